/* The collective front end: argument checks, in-place resolution,
 * selection with fallback, schedule start; and the registry. */
#include "coll/coll.h"

#include "pt2pt/cuda.h"

#include <stdlib.h>
#include <string.h>

/* ---- the registry: the components and their algorithms ------------------- */

const weft_coll_component_t *const weft_coll_components[] = {&weft_coll_base, &weft_coll_shm, &weft_coll_hier,
                                                             &weft_coll_cuda, NULL};

/* Every component's algorithms in one list (built at init), and each one's
 * component. */
#define MAX_ALGS 128
static const weft_coll_alg_t *all_algs[MAX_ALGS + 1];
static const weft_coll_component_t *all_comps[MAX_ALGS];
const weft_coll_alg_t *const *weft_coll_algorithms = all_algs;

static int registry_build(void)
{
    int n = 0;
    for (int c = 0; weft_coll_components[c]; c++) {
        const weft_coll_component_t *comp = weft_coll_components[c];
        if (comp->id != c)
            return weft_error(WEFT_ERR_INTERNAL, "coll: component %s has id %d at place %d", comp->name, comp->id, c);
        for (int i = 0; comp->algorithms[i]; i++) {
            if (n == MAX_ALGS) return weft_error(WEFT_ERR_INTERNAL, "coll: more than %d algorithms", MAX_ALGS);
            all_comps[n] = comp;
            all_algs[n++] = comp->algorithms[i];
        }
    }
    all_algs[n] = NULL;
    return WEFT_SUCCESS;
}

const weft_coll_component_t *weft_coll_component_of(const weft_coll_alg_t *alg)
{
    for (int i = 0; all_algs[i]; i++)
        if (all_algs[i] == alg) return all_comps[i];
    return NULL;
}

/* The framework's variables (select.c: WEFT_COLL_TUNE), then every
 * component's, in component order, go to config's registry. */
extern const weft_var_t weft_coll_select_vars[];
extern const int weft_coll_select_nvars;

void weft_coll_register_vars(void)
{
    weft_config_register(weft_coll_select_vars, weft_coll_select_nvars);
    for (int c = 0; weft_coll_components[c]; c++)
        if (weft_coll_components[c]->nvars)
            weft_config_register(weft_coll_components[c]->vars, weft_coll_components[c]->nvars);
}

/* ---- per-communicator state ------------------------------------------------ */

/* What coll/ keeps on a communicator (comm->coll): each component's state
 * (first: weft_coll_state indexes it) and the algorithms hints chose. */
typedef struct {
    void *state[WEFT_COLL_COMPS];
    const weft_coll_alg_t *forced[WEFT_COLL_KINDS];
    unsigned forced_mem[WEFT_COLL_KINDS]; /* the memory types the forced algorithm's component takes */
} coll_comm_t;

static coll_comm_t *coll_comm(weft_comm_t comm)
{
    if (!comm->coll) comm->coll = calloc(1, sizeof(coll_comm_t));
    return comm->coll;
}

int weft_coll_state_set(weft_comm_t comm, int id, void *state)
{
    coll_comm_t *cc = coll_comm(comm);
    if (!cc) return weft_error(WEFT_ERR_NO_MEMORY, "comm %s: out of memory for its collective state", comm->name);
    cc->state[id] = state;
    return WEFT_SUCCESS;
}

const weft_coll_alg_t *weft_coll_forced(weft_comm_t comm, weft_coll_kind_t kind, weft_memtype_t mem)
{
    const coll_comm_t *cc = comm->coll;
    return cc && (cc->forced_mem[kind] & WEFT_MEM_BIT(mem)) ? cc->forced[kind] : NULL;
}

static void comm_release(weft_comm_t comm)
{
    coll_comm_t *cc = comm->coll;
    if (!cc) return;
    for (int c = 0; weft_coll_components[c]; c++)
        if (cc->state[c] && weft_coll_components[c]->comm_release)
            weft_coll_components[c]->comm_release(comm, cc->state[c]);
    free(cc);
    comm->coll = NULL;
}

/* ---- posting: selection with fallback ----------------------------------- */

const char *weft_coll_send_source(weft_sched_t *s, const weft_coll_args_t *a, size_t bytes, const char *alg)
{
    /* NULL only with nothing to send (the buffer checks saw to it): not a failure */
    if (a->sendbuf != WEFT_IN_PLACE) return a->sendbuf ? a->sendbuf : (const void *)a;
    char *copy = weft_sched_scratch(s, bytes);
    if (!copy) {
        weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory for the in-place copy (%zu bytes)", alg, bytes);
        return NULL;
    }
    if (bytes) memcpy(copy, a->recvbuf, bytes);
    return copy;
}

/* Posts the call (req: its request), or with req == NULL runs it to its
 * end (a blocking call; one that times out is canceled before returning). */
/* The buffers' memory type (a selection key): device memory when any of
 * them is. A list of receive buffers is one memory type throughout (its
 * blocks go where the algorithm for that type puts them). Costs one
 * loader-counter read where no CUDA is loaded. */
static int coll_memtype(weft_coll_args_t *a)
{
    if (WEFT_LIKELY(!weft_cuda_possible())) return WEFT_SUCCESS;
    const char *fn = weft_coll_kind_name(a->kind);
    const void *bufs[2] = {a->sendbuf == WEFT_IN_PLACE ? NULL : a->sendbuf, a->recvbuf};
    weft_memtype_t mem;
    int path, rc;
    for (int i = 0; i < 2; i++) {
        if ((rc = weft_cuda_classify(bufs[i], 1, fn, i ? "receive buffer" : "send buffer", &mem, &path))) return rc;
        if (mem != WEFT_MEM_HOST) a->mem = mem;
    }
    if (!a->recvbufs || !a->count) return WEFT_SUCCESS;
    weft_memtype_t first = WEFT_MEM_HOST;
    for (int r = 0; r < a->comm->size; r++) {
        if ((rc = weft_cuda_classify(a->recvbufs[r], 1, fn, "a receive buffer of the list", &mem, &path))) return rc;
        if (r == 0) first = mem;
        if (mem != first)
            return weft_error(WEFT_ERR_ARG, "%s: receive buffers 0 and %d of the list are %s and %s memory: a list is "
                              "one memory type", fn, r, weft_memtype_name(first), weft_memtype_name(mem));
        if (mem != WEFT_MEM_HOST) a->mem = mem;
    }
    return WEFT_SUCCESS;
}

/* ---- WEFT_COLL_CHECK: the members' calls compared before anything runs ---- */

/* What every member of a call must agree on (-1: nothing to compare for
 * this collective). No padding: records are compared with memcmp. */
typedef struct {
    int32_t kind, dtype, op, root;
    int64_t count;        /* the count, or per rank's block; -1 for the v-collectives */
    uint64_t counts_hash; /* allgatherv, reduce_scatter: the counts every member passes alike; else 0 */
} check_rec_t;
_Static_assert(sizeof(check_rec_t) == 32, "a check record has no padding");

typedef struct {
    int n;
    check_rec_t mine;
    check_rec_t *all;
    weft_comm_t comm;
} call_check_t;

static int kind_has_op(weft_coll_kind_t k)
{
    return k == WEFT_COLL_REDUCE || k == WEFT_COLL_ALLREDUCE || k == WEFT_COLL_REDUCE_SCATTER ||
           k == WEFT_COLL_REDUCE_SCATTER_BLOCK || k == WEFT_COLL_SCAN || k == WEFT_COLL_EXSCAN;
}

static int kind_has_root(weft_coll_kind_t k)
{
    return k == WEFT_COLL_BCAST || k == WEFT_COLL_REDUCE || k == WEFT_COLL_GATHER || k == WEFT_COLL_GATHERV ||
           k == WEFT_COLL_SCATTER || k == WEFT_COLL_SCATTERV;
}

uint64_t weft_coll_counts_hash(const int64_t *counts, int n)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (int i = 0; i < n; i++)
        h = (h ^ (uint64_t)counts[i]) * UINT64_C(0x100000001b3);
    return h;
}

static void check_describe(const check_rec_t *r, char *buf, size_t len)
{
    const char *kind = r->kind >= 0 && r->kind < WEFT_COLL_KINDS ? weft_coll_kind_name((weft_coll_kind_t)r->kind)
                                                                 : "an unknown collective";
    int n = r->kind == WEFT_COLL_BARRIER ? snprintf(buf, len, "%s", kind)
            : r->count >= 0              ? snprintf(buf, len, "%s of %lld x %s", kind, (long long)r->count,
                                                    weft_dtype_name((weft_dtype_t)r->dtype))
                            : snprintf(buf, len, "%s of %s", kind, weft_dtype_name((weft_dtype_t)r->dtype));
    size_t used = n < 0 ? 0 : (size_t)n < len ? (size_t)n : len;
    if (r->op >= 0) used += (size_t)snprintf(buf + used, len - used, ", op %s", weft_op_name((weft_op_t)r->op));
    if (used < len && r->root >= 0) used += (size_t)snprintf(buf + used, len - used, ", root %d", r->root);
    if (used < len && r->counts_hash)
        snprintf(buf + used, len - used, ", counts hashing to %016llx", (unsigned long long)r->counts_hash);
}

/* Every member holds every record: all find the same first rank whose
 * call differs from rank 0's, and fail with the same message. */
static int check_compare(weft_sched_t *s, void *arg)
{
    call_check_t *c = arg;
    (void)s;
    for (int r = 1; r < c->n; r++)
        if (memcmp(&c->all[r], &c->all[0], sizeof(check_rec_t))) {
            char theirs[200], first[200];
            check_describe(&c->all[r], theirs, sizeof(theirs));
            check_describe(&c->all[0], first, sizeof(first));
            return weft_error(WEFT_ERR_ARG,
                              "WEFT_COLL_CHECK: the members of comm %s called different collectives or passed "
                              "different arguments: rank %d called %s, rank 0 %s",
                              c->comm->name, r, theirs, first);
        }
    return WEFT_SUCCESS;
}

/* The check's rounds, ahead of the algorithm's: an allgather of every
 * member's record (Bruck), then the comparison; the algorithm's first
 * messages go out in a later round, so only once the check passed. */
static int check_build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, rc;
    call_check_t *c = weft_sched_scratch(s, sizeof(call_check_t) + sizeof(check_rec_t) * (size_t)n);
    if (!c) return weft_error(WEFT_ERR_NO_MEMORY, "WEFT_COLL_CHECK: out of memory for %d records", n);
    memset(c, 0, sizeof(*c));
    c->n = n;
    c->all = (check_rec_t *)(c + 1);
    c->comm = a->comm;
    c->mine.kind = (int32_t)a->kind;
    c->mine.dtype = a->kind == WEFT_COLL_BARRIER ? -1 : (int32_t)a->dtype;
    c->mine.op = kind_has_op(a->kind) ? (int32_t)a->op : -1;
    c->mine.root = kind_has_root(a->kind) ? a->root : -1;
    switch (a->kind) {
    case WEFT_COLL_BARRIER: c->mine.count = 0; break;
    case WEFT_COLL_ALLGATHERV:
    case WEFT_COLL_REDUCE_SCATTER:
        c->mine.count = -1;
        c->mine.counts_hash = weft_coll_counts_hash(a->rcounts, n);
        break;
    case WEFT_COLL_GATHERV: /* the counts are the root's alone; alltoallv's differ by design */
    case WEFT_COLL_SCATTERV:
    case WEFT_COLL_ALLTOALLV: c->mine.count = -1; break;
    default: c->mine.count = (int64_t)a->count;
    }
    if ((rc = weft_coll_allgather_bruck_build(s, &c->mine, c->all, sizeof(check_rec_t))) ||
        (rc = weft_sched_call(s, check_compare, c)))
        return rc;
    return weft_sched_end_round(s);
}

/* A weft_*_on_stream call: its stream in, and what the call found out. */
typedef struct {
    void *stream;
    int host;  /* set by coll_finish: the call's buffers are host memory */
    int block; /* set by coll_finish: a host-driven call on device buffers: the call waits for its end */
} stream_call_t;

/* The first step of a stream-ordered call that runs on the host: the
 * stream's work before the call is done (its gate's event). */
static int gate_poll(weft_sched_t *s, void *arg)
{
    int r = weft_cuda_gate_ready(arg);
    if (r == 0) weft_sched_waiting(s, -1, "the stream's work queued before the call");
    return r;
}

/* keep: a failed collective's messages may still use a staged call's host
 * copies. */
static void gate_release(void *arg)
{
    weft_cuda_gate_release(arg, weft_sched_adrift() > 0);
}

/* The gate goes back when s ends; if that cannot be arranged, s is
 * discarded and the gate released now. */
static int gate_release_at_end(weft_sched_t *s, weft_cuda_gate_t *gate)
{
    int rc = weft_sched_on_end(s, gate_release, gate);
    if (rc) {
        weft_sched_discard(s);
        gate_release(gate);
    }
    return rc;
}

/* The last step of a call staged on its stream: whether its result's copy
 * to the device could be queued. */
static int staged_copies_queued(weft_sched_t *s, void *arg)
{
    (void)s;
    const weft_cuda_gate_t *g = arg;
    if (WEFT_UNLIKELY(weft_cuda_gate_let_go(g)))
        return weft_error(WEFT_ERR_TIMEOUT, "the stream was let go past the call's deadline, before the result was "
                                            "ready (the log's warning says why): the result buffer is undefined");
    return g->failed
               ? weft_error(g->failed, "the copy of the result to the device could not be queued on the stream (the "
                                       "log's warning says why): the result buffer is not written")
               : WEFT_SUCCESS;
}

static int staged_tail(weft_sched_t *s, void *arg)
{
    return weft_sched_call(s, staged_copies_queued, arg);
}

/* The component whose shared state on comm is not settled yet (coll/coll.h's
 * `unsettled`), or NULL: on every call, so no search of the registry. */
static const weft_coll_component_t *unsettled(weft_comm_t comm)
{
    for (int c = 0; weft_coll_components[c]; c++)
        if (weft_coll_components[c]->unsettled && weft_coll_components[c]->unsettled(comm))
            return weft_coll_components[c];
    return NULL;
}

/* Behind candidate i of cands (built into s, its component's shared state
 * on the communicator not settled yet), the candidate every member picks
 * once that state is known unusable: the first later one of another
 * component that builds, then tail(s, arg) if given. WEFT_ERR_UNSUPPORTED
 * (having added nothing) when there is none; another error when the one
 * found cannot be built, or has child steps (which reserve their turns
 * when the schedule starts, used or not). */
static int build_fallback(weft_sched_t *s, const weft_coll_args_t *a, const weft_coll_alg_t *const *cands, int n, int i,
                          weft_sched_fn tail, void *arg)
{
    const weft_coll_component_t *comp = weft_coll_component_of(cands[i]);
    int rc = weft_sched_fallback_begin(s), before = weft_sched_nops(s), children = weft_sched_nchildren(s);
    for (int j = i + 1; j < n && !rc; j++) {
        if (weft_coll_component_of(cands[j]) == comp) continue;
        rc = cands[j]->build(s, a);
        if (rc == WEFT_SUCCESS) {
            if (weft_sched_nchildren(s) != children)
                return weft_error(WEFT_ERR_INTERNAL, "%s: fallback %s has child steps", weft_coll_kind_name(a->kind),
                                  cands[j]->name);
            weft_sched_fallback_name(s, cands[j]->name);
            weft_debug("%s: %s on comm %s, with %s behind it in case %s's shared memory cannot be set up",
                       weft_coll_kind_name(a->kind), cands[i]->name, a->comm->name, cands[j]->name, comp->name);
            if (tail && !(rc = weft_sched_end_round(s))) rc = tail(s, arg);
            return rc;
        }
        if (rc != WEFT_ERR_UNSUPPORTED) return rc;
        if (weft_sched_nops(s) != before)
            return weft_error(WEFT_ERR_INTERNAL, "%s: algorithm %s declined after adding steps",
                              weft_coll_kind_name(a->kind), cands[j]->name);
        rc = WEFT_SUCCESS;
    }
    weft_sched_fallback_drop(s);
    return rc ? rc : WEFT_ERR_UNSUPPORTED;
}

int weft_coll_settled(weft_comm_t comm)
{
    return !unsettled(comm);
}

int weft_coll_build_selected(weft_sched_t *s, const weft_coll_args_t *a, weft_sched_fn tail, void *arg)
{
    const weft_coll_alg_t *cands[32];
    int n = weft_coll_select(a, cands, 32), before = weft_sched_nops(s);
    for (int i = 0; i < n; i++) {
        int rc = cands[i]->build(s, a);
        if (rc == WEFT_SUCCESS) {
            if (tail && ((rc = weft_sched_end_round(s)) || (rc = tail(s, arg)))) return rc;
            const weft_coll_component_t *comp = unsettled(a->comm);
            if (WEFT_UNLIKELY(comp) && weft_coll_component_of(cands[i]) == comp &&
                (rc = build_fallback(s, a, cands, n, i, tail, arg)) == WEFT_ERR_UNSUPPORTED)
                rc = WEFT_SUCCESS; /* none: the call fails if the state turns out unusable, as before */
            return rc;
        }
        if (rc != WEFT_ERR_UNSUPPORTED) return rc;
        if (weft_sched_nops(s) != before)
            return weft_error(WEFT_ERR_INTERNAL, "%s: algorithm %s declined after adding steps",
                              weft_coll_kind_name(a->kind), cands[i]->name);
    }
    return weft_error(WEFT_ERR_UNSUPPORTED, "%s: no algorithm accepts this call on %s buffers (%d tried)",
                      weft_coll_kind_name(a->kind), weft_memtype_name(a->mem), n);
}

int weft_coll_stage_extents(const weft_coll_args_t *a, weft_coll_stage_t *x)
{
    size_t n = (size_t)a->comm->size, block = a->count * a->esize;
    *x = (weft_coll_stage_t){.src = a->sendbuf, .block = block};
    int root = a->root == a->comm->rank;
    switch (a->kind) {
    case WEFT_COLL_BARRIER: break;
    case WEFT_COLL_BCAST:
        x->src = a->recvbuf;
        x->in = root ? block : 0;
        x->out = root ? 0 : block;
        x->shared = 1;
        break;
    case WEFT_COLL_REDUCE:
        x->in = block;
        x->out = root ? block : 0;
        break;
    case WEFT_COLL_ALLREDUCE: x->in = x->out = block; break;
    case WEFT_COLL_ALLGATHER:
        x->in = block;
        x->out = block * n;
        break;
    case WEFT_COLL_REDUCE_SCATTER_BLOCK:
    case WEFT_COLL_REDUCE_SCATTER:
        x->in = a->bytes; /* the whole vector */
        x->out = block;
        break;
    case WEFT_COLL_ALLTOALL:
        if (x->src == WEFT_IN_PLACE) x->src = a->recvbuf;
        x->in = x->out = block * n;
        break;
    default: return WEFT_ERR_UNSUPPORTED;
    }
    return WEFT_SUCCESS;
}

void weft_coll_stage_host_args(const weft_coll_args_t *a, void *hin, void *hout, weft_coll_args_t *h)
{
    *h = *a;
    h->mem = WEFT_MEM_HOST;
    h->on_stream = 0;
    h->stream = NULL;
    h->recvbufs = NULL;
    h->sendbuf = hin;
    h->recvbuf = hout;
}

int weft_coll_stage_pinned(weft_sched_t *s, const weft_coll_args_t *a, const weft_coll_stage_t *x, char **hin,
                           char **hout, const char *alg)
{
    if (x->shared) {
        *hin = *hout = x->block ? weft_sched_scratch_pinned(s, x->block) : NULL;
    } else {
        *hin = x->in ? weft_sched_scratch_pinned(s, x->in) : NULL;
        *hout = x->out ? weft_sched_scratch_pinned(s, x->out) : NULL;
    }
    if ((x->in && !*hin) || (x->out && !*hout))
        return weft_error(WEFT_ERR_NO_MEMORY, "%s %s: out of memory for %zu + %zu bytes of host copies",
                          weft_coll_kind_name(a->kind), alg, x->in, x->out);
    return WEFT_SUCCESS;
}

/* The most members whose endpoints a stream-staged call makes on the
 * calling thread; a larger communicator's calls run gated. */
#define STAGE_CONNECT_MAX 4096

/* Makes this rank's endpoints to every member of comm, once, on the
 * calling thread. A stream-staged call needs them before it returns: making
 * an endpoint can call into the driver in ways that wait for the device
 * (UCX 1.22 frees a device buffer it allocated to probe device memory, on
 * the process's first endpoint unless init made one, see pt2pt/ucx.c's
 * first_endpoint), and on the progress thread, while the stream waits on
 * the staged word that thread is to set, such a wait never ends. 0 when
 * they exist; a communicator whose endpoints could not all be made is not
 * tried again. */
static int stage_connect(weft_comm_t comm, const char *name)
{
    if (WEFT_LIKELY(comm->connected)) return comm->connected > 0 ? 0 : -1;
    if (comm->size > STAGE_CONNECT_MAX || !weft_xport->connect) {
        comm->connected = -1;
        weft_debug("%s: communicator %s of %d ranks: its endpoints are not all made; its stream-ordered calls "
                   "that run on the host return at their end",
                   name, comm->name, comm->size);
        return -1;
    }
    int *ranks = malloc((size_t)comm->size * sizeof(*ranks));
    if (!ranks) return -1;
    for (int i = 0; i < comm->size; i++)
        ranks[i] = weft_comm_world_rank_of(comm, i);
    int rc = weft_xport->connect(ranks, comm->size);
    free(ranks);
    if (rc) {
        weft_debug("%s: endpoints to the members of %s: %s; its stream-ordered calls that run on the host return "
                   "at their end",
                   name, comm->name, weft_strerror(rc));
        comm->connected = -1;
        return -1;
    }
    comm->connected = 1;
    return 0;
}

/* A stream-ordered call on device buffers whose algorithm runs on the host,
 * with the progress thread to drive it: staged on its stream
 * (src/cuda/runtime.h's gate), the host algorithm the selection picks for
 * host buffers of the same call running on pinned host copies (extents
 * *xp) that the stream fills before and empties after it.
 * WEFT_ERR_UNSUPPORTED, with nothing done, where it cannot be (no word for
 * the stream to wait on, no pinned memory): the caller then waits for the
 * call's end. */
static int stream_staged(weft_coll_args_t *a, const weft_coll_stage_t *xp, weft_request_t *req)
{
    const char *name = weft_coll_kind_name(a->kind);
    const weft_coll_stage_t x = *xp;
    weft_cuda_gate_t g;
    /* (The list form of allgather has no stream-ordered call.) */
    if (a->recvbufs || stage_connect(a->comm, name) || !weft_cuda_gate_reserve(&g, a->stream))
        return WEFT_ERR_UNSUPPORTED;
    void *blocks[2] = {NULL, NULL};
    size_t caps[2] = {0, 0};
    int nb = 0;
    char *hin = NULL, *hout = NULL;
    if (x.shared) {
        if (x.block && (hin = hout = blocks[nb] = weft_cuda_pinned_get(x.block, &caps[nb]))) nb++;
    } else {
        if (x.in && (hin = blocks[nb] = weft_cuda_pinned_get(x.in, &caps[nb]))) nb++;
        if (x.out && (hout = blocks[nb] = weft_cuda_pinned_get(x.out, &caps[nb]))) nb++;
    }
    int rc = WEFT_SUCCESS;
    weft_sched_t *s = NULL;
    weft_cuda_gate_t *gate = NULL;
    if ((x.in && !hin) || (x.out && !hout)) {
        weft_debug("%s: no pinned memory for %zu + %zu bytes of host copies: this stream-ordered call returns at "
                   "its end",
                   name, x.in, x.out);
        rc = WEFT_ERR_UNSUPPORTED;
    } else if (!(s = weft_sched_create(a->comm, "staged"))) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory for a schedule", name);
    } else if (!(gate = weft_sched_scratch(s, sizeof(*gate)))) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", name);
    } else {
        *gate = g;
        weft_coll_args_t h;
        weft_coll_stage_host_args(a, hin, hout, &h);
        if (WEFT_UNLIKELY(weft_coll_check)) rc = check_build(s, a);
        if (!rc && !(rc = weft_sched_poll(s, gate_poll, gate)) && !(rc = weft_sched_end_round(s)) &&
            (rc = weft_coll_build_selected(s, &h, staged_tail, gate)) == WEFT_ERR_UNSUPPORTED)
            rc = weft_error(WEFT_ERR_INTERNAL, "%s: no host algorithm takes a stream-staged call's host copies", name);
    }
    if (rc) {
        /* The word (still reserved), the schedule, the blocks. */
        weft_cuda_gate_release(gate ? gate : &g, 0);
        if (s) weft_sched_discard(s);
        for (int b = 0; b < nb; b++)
            weft_cuda_pinned_put(blocks[b], caps[b]);
        return rc;
    }
    /* From here the blocks are the gate's, whatever happens. */
    gate->deadline = a->comm->timeout > 0 ? weft_wtime() + a->comm->timeout : 0;
    rc = weft_cuda_gate_stage(gate, a->stream, a->recvbuf ? a->recvbuf : a->sendbuf,
                              (weft_cuda_span_t){hin, x.src, x.in}, (weft_cuda_span_t){a->recvbuf, hout, x.out}, blocks,
                              caps, nb, name);
    if (rc) {
        weft_sched_discard(s);
        return rc;
    }
    weft_debug("%s: stream-ordered on device buffers, run on the host: staged on its stream (%zu + %zu bytes of "
               "pinned host copies)",
               name, x.in, x.out);
    if ((rc = gate_release_at_end(s, gate))) return rc;
    weft_sched_deadline(s, a->comm->timeout);
    return req ? weft_sched_start(s, req) : weft_sched_run(s);
}

/* sc: NULL, or the stream-ordered call this one is. */
static int coll_finish(weft_coll_args_t *a, weft_request_t *req, stream_call_t *sc)
{
    const weft_coll_alg_t *cands[32];
    int rc = coll_memtype(a);
    if (rc) return rc;
    if (sc) {
        a->on_stream = 1;
        a->stream = sc->stream;
        /* A barrier has no buffers: on a stream, with CUDA loaded, it is the GPU's (a barrier kernel). */
        if (a->kind == WEFT_COLL_BARRIER && weft_cuda_possible()) a->mem = WEFT_MEM_CUDA;
        /* Host buffers: the stream's work first, then the host collective. Without a driver only the
         * legacy stream is accepted (nothing to wait for); with one, the gate below (a synchronisation
         * here, under the lock the progress thread needs, could wait for a call staged on the stream). */
        sc->host = a->mem == WEFT_MEM_HOST;
        if (sc->host && !weft_cuda_possible() && (rc = weft_cuda_stream_sync(a->stream, weft_coll_kind_name(a->kind))))
            return rc;
    }
    /* The first candidate nearly always builds: ask for two, and for the
     * whole list only when both decline (the order is the same). */
    int n = weft_coll_select(a, cands, 2), fallback = 1, staged_tried = 0;
    for (int i = 0; i < n; i++) {
        if (i == 1 && n == 2) n = weft_coll_select(a, cands, 32);
        /* Device buffers on a stream, an algorithm the host runs: every rank runs the host algorithm the
         * selection picks for host copies of its buffers (coll/cuda's staged), whichever way it goes here:
         * staged on the stream where the progress thread drives it (the call returns at once), else behind
         * the gate below (its first round waits for the stream's earlier work, the call returns at its end).
         * The way may differ between ranks (the thread on one, no pinned memory on another); what goes
         * between them does not. */
        const weft_coll_alg_t *alg = cands[i];
        int device = a->mem != WEFT_MEM_HOST;
        int gated = a->on_stream && (device ? !alg->stream_ordered : weft_cuda_possible());
        weft_coll_stage_t x;
        if (gated && device && !weft_coll_stage_extents(a, &x)) {
            if (weft_progress_thread_running() && !staged_tried) {
                staged_tried = 1;
                if ((rc = stream_staged(a, &x, req)) != WEFT_ERR_UNSUPPORTED) return rc;
            }
            const weft_coll_alg_t *staged = weft_coll_find(a->kind, "staged");
            if (staged) alg = staged;
        }
        weft_sched_t *s = weft_sched_create(a->comm, alg->name);
        if (!s) return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory for a schedule", weft_coll_kind_name(a->kind));
        rc = WEFT_UNLIKELY(weft_coll_check) ? check_build(s, a) : WEFT_SUCCESS;
        weft_cuda_gate_t *gate = NULL;
        if (rc == WEFT_SUCCESS && gated) {
            if (!(gate = weft_sched_scratch(s, sizeof(*gate))))
                rc = weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", weft_coll_kind_name(a->kind));
            else if (!(rc = weft_sched_poll(s, gate_poll, gate)))
                rc = weft_sched_end_round(s);
        }
        if (rc == WEFT_SUCCESS) rc = alg->build(s, a);
        const weft_coll_component_t *comp = rc == WEFT_SUCCESS && fallback && !gate ? unsettled(a->comm) : NULL;
        if (WEFT_UNLIKELY(comp) && weft_coll_component_of(cands[i]) == comp) {
            if (n == 2) n = weft_coll_select(a, cands, 32);
            int frc = build_fallback(s, a, cands, n, i, NULL, NULL);
            if (frc) {
                /* None, or it could not be built (out of memory: a call that would run without it must not
                 * fail for it): this candidate again, without one. */
                if (frc != WEFT_ERR_UNSUPPORTED)
                    weft_debug("%s: %s on comm %s goes without a fallback: %s", weft_coll_kind_name(a->kind),
                               cands[i]->name, a->comm->name, weft_last_error());
                weft_sched_discard(s);
                fallback = 0;
                i--;
                continue;
            }
        }
        if (rc == WEFT_SUCCESS && gate) {
            /* A refusal here (a graph capture) is final: every candidate would be refused alike. */
            if ((rc = weft_cuda_gate_open(gate, a->stream, a->recvbuf ? a->recvbuf : a->sendbuf,
                                          weft_coll_kind_name(a->kind)))) {
                weft_sched_discard(s);
                return rc;
            }
            if ((rc = gate_release_at_end(s, gate))) return rc;
            if (device) sc->block = 1;
        }
        if (rc == WEFT_SUCCESS) {
            /* Stream-ordered on device memory: the call returns before the work is done, and
             * nobody may wait for it (no request, or one only tested): the schedule keeps the
             * communicator's deadline itself, from the call. */
            if (a->on_stream && a->mem != WEFT_MEM_HOST) weft_sched_deadline(s, a->comm->timeout);
            return req ? weft_sched_start(s, req) : weft_sched_run(s);
        }
        weft_sched_discard(s);
        if (rc != WEFT_ERR_UNSUPPORTED) return rc;
        weft_debug("%s: algorithm %s declines this call; trying the next", weft_coll_kind_name(a->kind), alg->name);
    }
    if (n == 0)
        return weft_error(WEFT_ERR_UNSUPPORTED,
                          "%s: the buffers are %s memory, and no collective component of this "
                          "build takes them (weft_info --coll lists the components and their memory types)",
                          weft_coll_kind_name(a->kind), weft_memtype_name(a->mem));
    return weft_error(WEFT_ERR_UNSUPPORTED, "%s: no algorithm accepts this call (%d tried)",
                      weft_coll_kind_name(a->kind), n);
}

/* ---- argument checks ------------------------------------------------------ */

typedef struct {
    const char *fn;
    int rc;
} check_t;

static int begin(weft_coll_args_t *a, weft_coll_kind_t kind, weft_comm_t comm, weft_dtype_t dtype, const char *fn,
                 weft_request_t *req, int nonblocking)
{
    int rc;
    WEFT_CHECK_INIT(fn);
    if ((rc = weft_comm_check_usable(comm, fn))) return rc;
    if (nonblocking && !req) return weft_error(WEFT_ERR_ARG, "%s: NULL request pointer", fn);
    memset(a, 0, sizeof(*a));
    a->kind = kind;
    a->comm = comm;
    a->dtype = dtype;
    a->esize = weft_dtype_size(dtype);
    a->mem = WEFT_MEM_HOST; /* the only memory type weft detects yet */
    if (kind != WEFT_COLL_BARRIER && a->esize == 0)
        return weft_error(WEFT_ERR_ARG, "%s: unknown datatype %d", fn, (int)dtype);
    return WEFT_SUCCESS;
}

/* count elements of a's dtype, non-negative, whose bytes times `ranks`
 * (a buffer of one such block per rank; 1: a single block) stay within
 * WEFT_MAX_BYTES: every byte length and offset the algorithms derive from
 * them is then exact. */
static int check_count(const weft_coll_args_t *a, int64_t count, int ranks, const char *fn, const char *what)
{
    uint64_t bytes;
    if (count < 0) return weft_error(WEFT_ERR_ARG, "%s: negative %s %lld", fn, what, (long long)count);
    if (weft_mul_bytes((uint64_t)count, a->esize, &bytes))
        return weft_error(WEFT_ERR_ARG, "%s: %s %lld of %s overflows the address space (over %llu bytes)", fn, what,
                          (long long)count, weft_dtype_name(a->dtype), (unsigned long long)WEFT_MAX_BYTES);
    if (ranks > 1 && weft_mul_bytes(bytes, (uint64_t)ranks, &bytes))
        return weft_error(WEFT_ERR_ARG,
                          "%s: %s %lld of %s times %d ranks overflows the address space (over %llu bytes)", fn, what,
                          (long long)count, weft_dtype_name(a->dtype), ranks, (unsigned long long)WEFT_MAX_BYTES);
    return WEFT_SUCCESS;
}

static int check_buf(const void *buf, int64_t count, const char *fn, const char *what)
{
    if (count > 0 && buf == NULL)
        return weft_error(WEFT_ERR_ARG, "%s: NULL %s with count %lld", fn, what, (long long)count);
    return WEFT_SUCCESS;
}

static int check_root(weft_comm_t comm, int root, const char *fn)
{
    if (root < 0 || root >= comm->size)
        return weft_error(WEFT_ERR_ARG, "%s: root %d out of range 0..%d of comm %s", fn, root, comm->size - 1,
                          comm->name);
    return WEFT_SUCCESS;
}

/* A per-rank counts array (and optional displacements): non-NULL, counts
 * and displacements >= 0, each rank's block (displacement + count, in
 * bytes) and the counts' sum within WEFT_MAX_BYTES. *total: the sum. */
static int check_vector(const weft_coll_args_t *a, const int64_t *counts, const int64_t *displs, const char *fn,
                        const char *what, int64_t *total)
{
    weft_comm_t comm = a->comm;
    const char *dt = weft_dtype_name(a->dtype);
    uint64_t sum = 0, bytes, off;
    if (!counts) return weft_error(WEFT_ERR_ARG, "%s: NULL %s counts", fn, what);
    for (int r = 0; r < comm->size; r++) {
        if (counts[r] < 0)
            return weft_error(WEFT_ERR_ARG, "%s: %s count for rank %d is negative (%lld)", fn, what, r,
                              (long long)counts[r]);
        if (displs && displs[r] < 0)
            return weft_error(WEFT_ERR_ARG, "%s: %s displacement for rank %d is negative (%lld)", fn, what, r,
                              (long long)displs[r]);
        if (weft_mul_bytes((uint64_t)counts[r], a->esize, &bytes))
            return weft_error(WEFT_ERR_ARG, "%s: %s count for rank %d (%lld of %s) overflows the address space", fn,
                              what, r, (long long)counts[r], dt);
        if (displs && weft_mul_bytes((uint64_t)displs[r], a->esize, &off))
            return weft_error(WEFT_ERR_ARG, "%s: %s displacement for rank %d (%lld of %s) overflows the address space",
                              fn, what, r, (long long)displs[r], dt);
        /* both at most WEFT_MAX_BYTES: their sums cannot wrap a uint64_t */
        if (displs && off + bytes > WEFT_MAX_BYTES)
            return weft_error(WEFT_ERR_ARG,
                              "%s: %s displacement for rank %d (%lld) plus its count (%lld) of %s ends past the "
                              "address space",
                              fn, what, r, (long long)displs[r], (long long)counts[r], dt);
        if ((sum += bytes) > WEFT_MAX_BYTES)
            return weft_error(WEFT_ERR_ARG, "%s: the %s counts of ranks 0..%d add up to more than %llu bytes of %s", fn,
                              what, r, (unsigned long long)WEFT_MAX_BYTES, dt);
    }
    *total = (int64_t)(sum / (a->esize ? a->esize : 1));
    return WEFT_SUCCESS;
}

/* ---- the public calls ------------------------------------------------------- */

static int barrier(stream_call_t *sc, weft_comm_t comm, weft_request_t *req, const char *fn)
{
    weft_coll_args_t a;
    int rc = begin(&a, WEFT_COLL_BARRIER, comm, WEFT_BYTE, fn, req, req != NULL);
    return rc ? rc : coll_finish(&a, req, sc);
}
WEFT_API int weft_barrier(weft_comm_t comm)
{
    WEFT_API_ENTER();
    return barrier(NULL, comm, NULL, "weft_barrier");
}
WEFT_API int weft_ibarrier(weft_comm_t comm, weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? barrier(NULL, comm, req, "weft_ibarrier")
               : weft_error(WEFT_ERR_ARG, "weft_ibarrier: NULL request pointer");
}

static int bcast(stream_call_t *sc, void *buf, int64_t count, weft_dtype_t dtype, int root, weft_comm_t comm,
                 weft_request_t *req, const char *fn)
{
    weft_coll_args_t a;
    int rc = begin(&a, WEFT_COLL_BCAST, comm, dtype, fn, req, req != NULL);
    if (rc || (rc = check_count(&a, count, 1, fn, "count")) || (rc = check_buf(buf, count, fn, "buffer")) ||
        (rc = check_root(comm, root, fn)))
        return rc;
    a.sendbuf = buf;
    a.recvbuf = buf;
    a.count = (size_t)count;
    a.root = root;
    a.bytes = a.count * a.esize;
    return coll_finish(&a, req, sc);
}
WEFT_API int weft_bcast(void *buf, int64_t count, weft_dtype_t dtype, int root, weft_comm_t comm)
{
    WEFT_API_ENTER();
    return bcast(NULL, buf, count, dtype, root, comm, NULL, "weft_bcast");
}
WEFT_API int weft_ibcast(void *buf, int64_t count, weft_dtype_t dtype, int root, weft_comm_t comm, weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? bcast(NULL, buf, count, dtype, root, comm, req, "weft_ibcast")
               : weft_error(WEFT_ERR_ARG, "weft_ibcast: NULL request pointer");
}

/* reduce / allreduce / scan / exscan share their checks. */
static int reduction(stream_call_t *sc, weft_coll_kind_t kind, const void *sendbuf, void *recvbuf, int64_t count,
                     weft_dtype_t dtype, weft_op_t op, int root, weft_comm_t comm, weft_request_t *req, const char *fn)
{
    weft_coll_args_t a;
    int rc = begin(&a, kind, comm, dtype, fn, req, req != NULL);
    if (rc || (rc = check_count(&a, count, 1, fn, "count")) || (rc = weft_op_check(op, dtype, fn))) return rc;
    int is_root = kind != WEFT_COLL_REDUCE || comm->rank == root;
    if (kind == WEFT_COLL_REDUCE && (rc = check_root(comm, root, fn))) return rc;
    if (sendbuf == WEFT_IN_PLACE) {
        if (kind == WEFT_COLL_REDUCE && !is_root)
            return weft_error(WEFT_ERR_ARG, "%s: WEFT_IN_PLACE is only for the root of a reduce", fn);
        sendbuf = recvbuf;
    }
    if ((rc = check_buf(sendbuf, count, fn, "send buffer")) ||
        (is_root && (rc = check_buf(recvbuf, count, fn, "receive buffer"))))
        return rc;
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = (size_t)count;
    a.op = op;
    a.root = root;
    a.bytes = a.count * a.esize;
    return coll_finish(&a, req, sc);
}
WEFT_API int weft_reduce(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, int root, weft_comm_t c)
{
    WEFT_API_ENTER();
    return reduction(NULL, WEFT_COLL_REDUCE, s, r, n, d, op, root, c, NULL, "weft_reduce");
}
WEFT_API int weft_ireduce(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, int root, weft_comm_t c,
                          weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? reduction(NULL, WEFT_COLL_REDUCE, s, r, n, d, op, root, c, req, "weft_ireduce")
               : weft_error(WEFT_ERR_ARG, "weft_ireduce: NULL request pointer");
}
WEFT_API int weft_allreduce(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, weft_comm_t c)
{
    WEFT_API_ENTER();
    return reduction(NULL, WEFT_COLL_ALLREDUCE, s, r, n, d, op, 0, c, NULL, "weft_allreduce");
}
WEFT_API int weft_iallreduce(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, weft_comm_t c,
                             weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? reduction(NULL, WEFT_COLL_ALLREDUCE, s, r, n, d, op, 0, c, req, "weft_iallreduce")
               : weft_error(WEFT_ERR_ARG, "weft_iallreduce: NULL request pointer");
}
WEFT_API int weft_scan(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, weft_comm_t c)
{
    WEFT_API_ENTER();
    return reduction(NULL, WEFT_COLL_SCAN, s, r, n, d, op, 0, c, NULL, "weft_scan");
}
WEFT_API int weft_iscan(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, weft_comm_t c,
                        weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? reduction(NULL, WEFT_COLL_SCAN, s, r, n, d, op, 0, c, req, "weft_iscan")
               : weft_error(WEFT_ERR_ARG, "weft_iscan: NULL request pointer");
}
WEFT_API int weft_exscan(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, weft_comm_t c)
{
    WEFT_API_ENTER();
    return reduction(NULL, WEFT_COLL_EXSCAN, s, r, n, d, op, 0, c, NULL, "weft_exscan");
}
WEFT_API int weft_iexscan(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, weft_comm_t c,
                          weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? reduction(NULL, WEFT_COLL_EXSCAN, s, r, n, d, op, 0, c, req, "weft_iexscan")
               : weft_error(WEFT_ERR_ARG, "weft_iexscan: NULL request pointer");
}

/* allgather (contiguous or list), gather, scatter, alltoall: count per rank. */
static int per_rank(stream_call_t *sc, weft_coll_kind_t kind, const void *sendbuf, void *recvbuf, void *const *recvbufs,
                    int64_t count, weft_dtype_t dtype, int root, weft_comm_t comm, weft_request_t *req, const char *fn)
{
    weft_coll_args_t a;
    int rc = begin(&a, kind, comm, dtype, fn, req, req != NULL);
    /* Every rank checks the whole buffer's size (count x ranks), which only
     * the root's or the receivers' calls touch: all fail alike. */
    if (rc || (rc = check_count(&a, count, 1, fn, "count")) || (rc = check_count(&a, count, comm->size, fn, "count")))
        return rc;
    int rooted = kind == WEFT_COLL_GATHER || kind == WEFT_COLL_SCATTER;
    if (rooted && (rc = check_root(comm, root, fn))) return rc;
    int me = comm->rank, is_root = !rooted || me == root;
    size_t block = (size_t)count * a.esize;
    a.count = (size_t)count;
    a.root = root;
    a.bytes = block;
    a.recvbufs = recvbufs;
    if (recvbufs) {
        for (int r = 0; r < comm->size; r++)
            if (count > 0 && !recvbufs[r]) return weft_error(WEFT_ERR_ARG, "%s: recvbufs[%d] is NULL", fn, r);
    } else if (is_root && kind != WEFT_COLL_SCATTER && (rc = check_buf(recvbuf, count, fn, "receive buffer"))) {
        return rc;
    }
    if (kind == WEFT_COLL_SCATTER) {
        if (is_root && (rc = check_buf(sendbuf, count, fn, "send buffer"))) return rc;
        if (recvbuf == WEFT_IN_PLACE) {
            if (!is_root) return weft_error(WEFT_ERR_ARG, "%s: WEFT_IN_PLACE is only for the root", fn);
            recvbuf = (char *)sendbuf + (size_t)root * block;
        }
        if ((rc = check_buf(recvbuf, count, fn, "receive buffer"))) return rc;
    } else if (sendbuf == WEFT_IN_PLACE) {
        if (!is_root) return weft_error(WEFT_ERR_ARG, "%s: WEFT_IN_PLACE is only for the root", fn);
        if (kind == WEFT_COLL_ALLTOALL) {
            /* The algorithm sends from a copy of recvbuf it makes at post time. */
            a.sendbuf = WEFT_IN_PLACE;
            a.recvbuf = recvbuf;
            return coll_finish(&a, req, sc);
        }
        sendbuf = weft_coll_rblock(
            &(weft_coll_args_t){.recvbuf = recvbuf, .recvbufs = recvbufs, .count = a.count, .esize = a.esize},
            kind == WEFT_COLL_GATHER ? root : me);
    } else if ((rc = check_buf(sendbuf, kind == WEFT_COLL_ALLTOALL ? count * comm->size : count, fn, "send buffer"))) {
        return rc;
    }
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    return coll_finish(&a, req, sc);
}
WEFT_API int weft_allgather(const void *s, void *r, int64_t n, weft_dtype_t d, weft_comm_t c)
{
    WEFT_API_ENTER();
    return per_rank(NULL, WEFT_COLL_ALLGATHER, s, r, NULL, n, d, 0, c, NULL, "weft_allgather");
}
WEFT_API int weft_iallgather(const void *s, void *r, int64_t n, weft_dtype_t d, weft_comm_t c, weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? per_rank(NULL, WEFT_COLL_ALLGATHER, s, r, NULL, n, d, 0, c, req, "weft_iallgather")
               : weft_error(WEFT_ERR_ARG, "weft_iallgather: NULL request pointer");
}
WEFT_API int weft_allgather_list(const void *s, void *const rs[], int64_t n, weft_dtype_t d, weft_comm_t c)
{
    WEFT_API_ENTER();
    if (!rs) return weft_error(WEFT_ERR_ARG, "weft_allgather_list: NULL recvbufs");
    return per_rank(NULL, WEFT_COLL_ALLGATHER, s, NULL, rs, n, d, 0, c, NULL, "weft_allgather_list");
}
WEFT_API int weft_iallgather_list(const void *s, void *const rs[], int64_t n, weft_dtype_t d, weft_comm_t c,
                                  weft_request_t *req)
{
    WEFT_API_ENTER();
    if (!rs || !req) return weft_error(WEFT_ERR_ARG, "weft_iallgather_list: NULL recvbufs or request pointer");
    return per_rank(NULL, WEFT_COLL_ALLGATHER, s, NULL, rs, n, d, 0, c, req, "weft_iallgather_list");
}
WEFT_API int weft_gather(const void *s, void *r, int64_t n, weft_dtype_t d, int root, weft_comm_t c)
{
    WEFT_API_ENTER();
    return per_rank(NULL, WEFT_COLL_GATHER, s, r, NULL, n, d, root, c, NULL, "weft_gather");
}
WEFT_API int weft_igather(const void *s, void *r, int64_t n, weft_dtype_t d, int root, weft_comm_t c,
                          weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? per_rank(NULL, WEFT_COLL_GATHER, s, r, NULL, n, d, root, c, req, "weft_igather")
               : weft_error(WEFT_ERR_ARG, "weft_igather: NULL request pointer");
}
WEFT_API int weft_scatter(const void *s, void *r, int64_t n, weft_dtype_t d, int root, weft_comm_t c)
{
    WEFT_API_ENTER();
    return per_rank(NULL, WEFT_COLL_SCATTER, s, r, NULL, n, d, root, c, NULL, "weft_scatter");
}
WEFT_API int weft_iscatter(const void *s, void *r, int64_t n, weft_dtype_t d, int root, weft_comm_t c,
                           weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? per_rank(NULL, WEFT_COLL_SCATTER, s, r, NULL, n, d, root, c, req, "weft_iscatter")
               : weft_error(WEFT_ERR_ARG, "weft_iscatter: NULL request pointer");
}
WEFT_API int weft_alltoall(const void *s, void *r, int64_t n, weft_dtype_t d, weft_comm_t c)
{
    WEFT_API_ENTER();
    return per_rank(NULL, WEFT_COLL_ALLTOALL, s, r, NULL, n, d, 0, c, NULL, "weft_alltoall");
}
WEFT_API int weft_ialltoall(const void *s, void *r, int64_t n, weft_dtype_t d, weft_comm_t c, weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? per_rank(NULL, WEFT_COLL_ALLTOALL, s, r, NULL, n, d, 0, c, req, "weft_ialltoall")
               : weft_error(WEFT_ERR_ARG, "weft_ialltoall: NULL request pointer");
}

/* allgatherv / gatherv: each rank sends sendcount, the receiver(s) place
 * rank r's block at displs[r] with recvcounts[r] elements. */
static int gathering_v(weft_coll_kind_t kind, const void *sendbuf, int64_t sendcount, void *recvbuf,
                       const int64_t *recvcounts, const int64_t *displs, weft_dtype_t dtype, int root, weft_comm_t comm,
                       weft_request_t *req, const char *fn)
{
    weft_coll_args_t a;
    int64_t total;
    int rc = begin(&a, kind, comm, dtype, fn, req, req != NULL);
    if (rc) return rc;
    int rooted = kind == WEFT_COLL_GATHERV;
    if (rooted && (rc = check_root(comm, root, fn))) return rc;
    int is_root = !rooted || comm->rank == root;
    if (is_root) {
        if (!displs) return weft_error(WEFT_ERR_ARG, "%s: NULL displacements", fn);
        if ((rc = check_vector(&a, recvcounts, displs, fn, "receive", &total))) return rc;
        if (total > 0 && !recvbuf) return weft_error(WEFT_ERR_ARG, "%s: NULL receive buffer", fn);
    }
    if (sendbuf == WEFT_IN_PLACE) {
        if (!is_root) return weft_error(WEFT_ERR_ARG, "%s: WEFT_IN_PLACE is only for the root", fn);
        sendcount = recvcounts[comm->rank];
        sendbuf = (char *)recvbuf + (size_t)displs[comm->rank] * a.esize;
    }
    if ((rc = check_count(&a, sendcount, 1, fn, "send count")) ||
        (rc = check_buf(sendbuf, sendcount, fn, "send buffer")))
        return rc;
    if (is_root && sendcount != recvcounts[comm->rank])
        return weft_error(WEFT_ERR_ARG, "%s: this rank sends %lld elements but recvcounts[%d] is %lld", fn,
                          (long long)sendcount, comm->rank, (long long)recvcounts[comm->rank]);
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = (size_t)sendcount;
    a.rcounts = recvcounts;
    a.rdispls = displs;
    a.root = root;
    a.bytes = (size_t)sendcount * a.esize;
    return coll_finish(&a, req, NULL);
}
WEFT_API int weft_allgatherv(const void *s, int64_t sc, void *r, const int64_t rc[], const int64_t dp[], weft_dtype_t d,
                             weft_comm_t c)
{
    WEFT_API_ENTER();
    return gathering_v(WEFT_COLL_ALLGATHERV, s, sc, r, rc, dp, d, 0, c, NULL, "weft_allgatherv");
}
WEFT_API int weft_iallgatherv(const void *s, int64_t sc, void *r, const int64_t rc[], const int64_t dp[],
                              weft_dtype_t d, weft_comm_t c, weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? gathering_v(WEFT_COLL_ALLGATHERV, s, sc, r, rc, dp, d, 0, c, req, "weft_iallgatherv")
               : weft_error(WEFT_ERR_ARG, "weft_iallgatherv: NULL request pointer");
}
WEFT_API int weft_gatherv(const void *s, int64_t sc, void *r, const int64_t rc[], const int64_t dp[], weft_dtype_t d,
                          int root, weft_comm_t c)
{
    WEFT_API_ENTER();
    return gathering_v(WEFT_COLL_GATHERV, s, sc, r, rc, dp, d, root, c, NULL, "weft_gatherv");
}
WEFT_API int weft_igatherv(const void *s, int64_t sc, void *r, const int64_t rc[], const int64_t dp[], weft_dtype_t d,
                           int root, weft_comm_t c, weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? gathering_v(WEFT_COLL_GATHERV, s, sc, r, rc, dp, d, root, c, req, "weft_igatherv")
               : weft_error(WEFT_ERR_ARG, "weft_igatherv: NULL request pointer");
}

static int scatter_v(const void *sendbuf, const int64_t *sendcounts, const int64_t *displs, void *recvbuf,
                     int64_t recvcount, weft_dtype_t dtype, int root, weft_comm_t comm, weft_request_t *req,
                     const char *fn)
{
    weft_coll_args_t a;
    int64_t total;
    int rc = begin(&a, WEFT_COLL_SCATTERV, comm, dtype, fn, req, req != NULL);
    if (rc || (rc = check_root(comm, root, fn))) return rc;
    int is_root = comm->rank == root;
    if (is_root) {
        if (!displs) return weft_error(WEFT_ERR_ARG, "%s: NULL displacements", fn);
        if ((rc = check_vector(&a, sendcounts, displs, fn, "send", &total))) return rc;
        if (total > 0 && !sendbuf) return weft_error(WEFT_ERR_ARG, "%s: NULL send buffer", fn);
        if (recvbuf == WEFT_IN_PLACE) {
            recvcount = sendcounts[root];
            recvbuf = (char *)sendbuf + (size_t)displs[root] * a.esize;
        }
    } else if (recvbuf == WEFT_IN_PLACE) {
        return weft_error(WEFT_ERR_ARG, "%s: WEFT_IN_PLACE is only for the root", fn);
    }
    if ((rc = check_count(&a, recvcount, 1, fn, "receive count")) ||
        (rc = check_buf(recvbuf, recvcount, fn, "receive buffer")))
        return rc;
    if (is_root && recvcount != sendcounts[root])
        return weft_error(WEFT_ERR_ARG, "%s: the root receives %lld elements but sendcounts[%d] is %lld", fn,
                          (long long)recvcount, root, (long long)sendcounts[root]);
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = (size_t)recvcount;
    a.scounts = sendcounts;
    a.sdispls = displs;
    a.root = root;
    a.bytes = (size_t)recvcount * a.esize;
    return coll_finish(&a, req, NULL);
}
WEFT_API int weft_scatterv(const void *s, const int64_t sc[], const int64_t dp[], void *r, int64_t rc, weft_dtype_t d,
                           int root, weft_comm_t c)
{
    WEFT_API_ENTER();
    return scatter_v(s, sc, dp, r, rc, d, root, c, NULL, "weft_scatterv");
}
WEFT_API int weft_iscatterv(const void *s, const int64_t sc[], const int64_t dp[], void *r, int64_t rc, weft_dtype_t d,
                            int root, weft_comm_t c, weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? scatter_v(s, sc, dp, r, rc, d, root, c, req, "weft_iscatterv")
               : weft_error(WEFT_ERR_ARG, "weft_iscatterv: NULL request pointer");
}

/* reduce_scatter(_block): the input is the whole vector (sum of counts). */
static int reduce_scatter(stream_call_t *sc, weft_coll_kind_t kind, const void *sendbuf, void *recvbuf,
                          const int64_t *recvcounts, int64_t blockcount, weft_dtype_t dtype, weft_op_t op,
                          weft_comm_t comm, weft_request_t *req, const char *fn)
{
    weft_coll_args_t a;
    int64_t total;
    int rc = begin(&a, kind, comm, dtype, fn, req, req != NULL);
    if (rc || (rc = weft_op_check(op, dtype, fn))) return rc;
    if (kind == WEFT_COLL_REDUCE_SCATTER) {
        if ((rc = check_vector(&a, recvcounts, NULL, fn, "receive", &total))) return rc;
        blockcount = recvcounts[comm->rank];
    } else {
        if ((rc = check_count(&a, blockcount, 1, fn, "receive count")) ||
            (rc = check_count(&a, blockcount, comm->size, fn, "receive count")))
            return rc;
        total = blockcount * comm->size;
    }
    if (sendbuf == WEFT_IN_PLACE) sendbuf = recvbuf;
    if ((rc = check_buf(sendbuf, total, fn, "send buffer")) ||
        (rc = check_buf(recvbuf, blockcount, fn, "receive buffer")))
        return rc;
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.count = (size_t)blockcount;
    a.rcounts = recvcounts;
    a.op = op;
    a.bytes = (size_t)total * a.esize;
    return coll_finish(&a, req, sc);
}
WEFT_API int weft_reduce_scatter(const void *s, void *r, const int64_t rc[], weft_dtype_t d, weft_op_t op,
                                 weft_comm_t c)
{
    WEFT_API_ENTER();
    return reduce_scatter(NULL, WEFT_COLL_REDUCE_SCATTER, s, r, rc, 0, d, op, c, NULL, "weft_reduce_scatter");
}
WEFT_API int weft_ireduce_scatter(const void *s, void *r, const int64_t rc[], weft_dtype_t d, weft_op_t op,
                                  weft_comm_t c, weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? reduce_scatter(NULL, WEFT_COLL_REDUCE_SCATTER, s, r, rc, 0, d, op, c, req, "weft_ireduce_scatter")
               : weft_error(WEFT_ERR_ARG, "weft_ireduce_scatter: NULL request pointer");
}
WEFT_API int weft_reduce_scatter_block(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, weft_comm_t c)
{
    WEFT_API_ENTER();
    return reduce_scatter(NULL, WEFT_COLL_REDUCE_SCATTER_BLOCK, s, r, NULL, n, d, op, c, NULL,
                          "weft_reduce_scatter_block");
}
WEFT_API int weft_ireduce_scatter_block(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, weft_comm_t c,
                                        weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? reduce_scatter(NULL, WEFT_COLL_REDUCE_SCATTER_BLOCK, s, r, NULL, n, d, op, c, req,
                                "weft_ireduce_scatter_block")
               : weft_error(WEFT_ERR_ARG, "weft_ireduce_scatter_block: NULL request pointer");
}

static int alltoall_v(const void *sendbuf, const int64_t *scounts, const int64_t *sdispls, void *recvbuf,
                      const int64_t *rcounts, const int64_t *rdispls, weft_dtype_t dtype, weft_comm_t comm,
                      weft_request_t *req, const char *fn)
{
    weft_coll_args_t a;
    int64_t stotal, rtotal;
    int rc = begin(&a, WEFT_COLL_ALLTOALLV, comm, dtype, fn, req, req != NULL);
    if (rc) return rc;
    if (sendbuf == WEFT_IN_PLACE)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: WEFT_IN_PLACE is not supported for alltoallv yet", fn);
    if (!sdispls || !rdispls) return weft_error(WEFT_ERR_ARG, "%s: NULL displacements", fn);
    if ((rc = check_vector(&a, scounts, sdispls, fn, "send", &stotal)) ||
        (rc = check_vector(&a, rcounts, rdispls, fn, "receive", &rtotal)))
        return rc;
    if ((rc = check_buf(sendbuf, stotal, fn, "send buffer")) || (rc = check_buf(recvbuf, rtotal, fn, "receive buffer")))
        return rc;
    a.sendbuf = sendbuf;
    a.recvbuf = recvbuf;
    a.scounts = scounts;
    a.sdispls = sdispls;
    a.rcounts = rcounts;
    a.rdispls = rdispls;
    a.bytes = (size_t)(stotal / (comm->size ? comm->size : 1)) * a.esize;
    return coll_finish(&a, req, NULL);
}
WEFT_API int weft_alltoallv(const void *s, const int64_t sc[], const int64_t sd[], void *r, const int64_t rc[],
                            const int64_t rd[], weft_dtype_t d, weft_comm_t c)
{
    WEFT_API_ENTER();
    return alltoall_v(s, sc, sd, r, rc, rd, d, c, NULL, "weft_alltoallv");
}
WEFT_API int weft_ialltoallv(const void *s, const int64_t sc[], const int64_t sd[], void *r, const int64_t rc[],
                             const int64_t rd[], weft_dtype_t d, weft_comm_t c, weft_request_t *req)
{
    WEFT_API_ENTER();
    return req ? alltoall_v(s, sc, sd, r, rc, rd, d, c, req, "weft_ialltoallv")
               : weft_error(WEFT_ERR_ARG, "weft_ialltoallv: NULL request pointer");
}

/* ---- services to the runtime --------------------------------------------- */

static int internal_allgather(weft_comm_t comm, const void *send, void *recv, size_t bytes)
{
    weft_sched_t *s = weft_sched_create(comm, "allgather_bruck");
    if (!s) return weft_error(WEFT_ERR_NO_MEMORY, "allgather: out of memory for a schedule");
    int rc = weft_coll_allgather_bruck_build(s, send, recv, bytes);
    if (rc) {
        weft_sched_discard(s);
        return rc;
    }
    return weft_sched_run(s);
}

static int internal_allreduce(weft_comm_t comm, const void *send, void *recv, size_t count, weft_dtype_t dtype,
                              weft_op_t op)
{
    const weft_coll_alg_t *alg = weft_coll_find(WEFT_COLL_ALLREDUCE, "recursive_doubling");
    weft_coll_args_t a = {.kind = WEFT_COLL_ALLREDUCE,
                          .comm = comm,
                          .sendbuf = send,
                          .recvbuf = recv,
                          .count = count,
                          .dtype = dtype,
                          .esize = weft_dtype_size(dtype),
                          .op = op,
                          .bytes = count * weft_dtype_size(dtype)};
    weft_sched_t *s = alg ? weft_sched_create(comm, "allreduce_recursive_doubling") : NULL;
    if (!s) return weft_error(WEFT_ERR_NO_MEMORY, "allreduce: out of memory for a schedule");
    int rc = alg->build(s, &a);
    if (rc) {
        weft_sched_discard(s);
        return rc;
    }
    return weft_sched_run(s);
}

static int force_algorithm(weft_comm_t comm, const char *coll, size_t len, const char *name, char *why, size_t why_len)
{
    for (int k = 0; k < WEFT_COLL_KINDS; k++) {
        const char *kn = weft_coll_kind_name((weft_coll_kind_t)k);
        if (strlen(kn) != len || strncmp(kn, coll, len)) continue;
        const weft_coll_alg_t *a = weft_coll_find((weft_coll_kind_t)k, name);
        if (!a) {
            size_t used = (size_t)snprintf(why, why_len, "no %s algorithm '%s'; known:", kn, name);
            for (int i = 0; weft_coll_algorithms[i] && used < why_len; i++)
                if ((int)weft_coll_algorithms[i]->kind == k)
                    used += (size_t)snprintf(why + used, why_len - used, " %s", weft_coll_algorithms[i]->name);
            return -2;
        }
        coll_comm_t *cc = coll_comm(comm);
        if (!cc) {
            snprintf(why, why_len, "out of memory");
            return -3;
        }
        cc->forced[k] = a;
        cc->forced_mem[k] = weft_coll_component_of(a)->memtypes;
        return 1;
    }
    snprintf(why, why_len, "'%.*s' is not a collective weft knows", (int)len, coll);
    return -1;
}

static const weft_coll_services_t services = {.allgather = internal_allgather,
                                              .allreduce = internal_allreduce,
                                              .force_algorithm = force_algorithm,
                                              .comm_release = comm_release};

int weft_coll_init(void)
{
    int rc = registry_build();
    if (!rc) rc = weft_coll_select_init();
    for (int c = 0; !rc && weft_coll_components[c]; c++)
        if (weft_coll_components[c]->init) rc = weft_coll_components[c]->init();
    if (rc) return rc;
    weft_coll_svc = &services;
    return WEFT_SUCCESS;
}

/* After the communicators went (weft_comm_world_destroy released their
 * state through weft_coll_svc). */
void weft_coll_finalize(void)
{
    weft_coll_svc = NULL;
    weft_coll_select_finalize();
}

/* ---- stream-ordered calls ------------------------------------------------------ */

/* Runs `call` (a family function given &tmp as its request) as a
 * stream-ordered call: device buffers go on `stream`, the call returns
 * once the work is enqueued; *req (when not NULL) is its work handle,
 * otherwise the request is released as it completes. Host buffers with no
 * request: the call waits (nothing else would tell the caller when its
 * buffers are free). A call on device buffers that runs on the host
 * returns at once where it is staged on its stream (stream_staged), else
 * (block; src/cuda/runtime.h's gate says why) the call waits, and *req is
 * WEFT_REQUEST_NULL. */
#define ON_STREAM(stream_, req_, call)                                                                                 \
    do {                                                                                                               \
        weft_request_t tmp = WEFT_REQUEST_NULL;                                                                        \
        stream_call_t sc_ = {.stream = (stream_)};                                                                     \
        int rc_ = (call);                                                                                              \
        weft_sched_reap();                                                                                             \
        if (rc_) return rc_;                                                                                           \
        if (sc_.block) {                                                                                               \
            if (req_) *(req_) = WEFT_REQUEST_NULL;                                                                     \
            return weft_wait(&tmp, NULL);                                                                              \
        }                                                                                                              \
        if (req_) {                                                                                                    \
            *(req_) = tmp;                                                                                             \
            return WEFT_SUCCESS;                                                                                       \
        }                                                                                                              \
        return sc_.host ? weft_wait(&tmp, NULL) : weft_request_free(&tmp);                                             \
    } while (0)

WEFT_API int weft_barrier_on_stream(weft_comm_t c, void *stream, weft_request_t *req)
{
    WEFT_API_ENTER();
    ON_STREAM(stream, req, barrier(&sc_, c, &tmp, "weft_barrier_on_stream"));
}
WEFT_API int weft_bcast_on_stream(void *buf, int64_t n, weft_dtype_t d, int root, weft_comm_t c, void *stream,
                                  weft_request_t *req)
{
    WEFT_API_ENTER();
    ON_STREAM(stream, req, bcast(&sc_, buf, n, d, root, c, &tmp, "weft_bcast_on_stream"));
}
WEFT_API int weft_reduce_on_stream(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, int root,
                                   weft_comm_t c, void *stream, weft_request_t *req)
{
    WEFT_API_ENTER();
    ON_STREAM(stream, req, reduction(&sc_, WEFT_COLL_REDUCE, s, r, n, d, op, root, c, &tmp, "weft_reduce_on_stream"));
}
WEFT_API int weft_allreduce_on_stream(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, weft_comm_t c,
                                      void *stream, weft_request_t *req)
{
    WEFT_API_ENTER();
    ON_STREAM(stream, req,
              reduction(&sc_, WEFT_COLL_ALLREDUCE, s, r, n, d, op, 0, c, &tmp, "weft_allreduce_on_stream"));
}
WEFT_API int weft_allgather_on_stream(const void *s, void *r, int64_t n, weft_dtype_t d, weft_comm_t c, void *stream,
                                      weft_request_t *req)
{
    WEFT_API_ENTER();
    ON_STREAM(stream, req,
              per_rank(&sc_, WEFT_COLL_ALLGATHER, s, r, NULL, n, d, 0, c, &tmp, "weft_allgather_on_stream"));
}
WEFT_API int weft_alltoall_on_stream(const void *s, void *r, int64_t n, weft_dtype_t d, weft_comm_t c, void *stream,
                                     weft_request_t *req)
{
    WEFT_API_ENTER();
    ON_STREAM(stream, req, per_rank(&sc_, WEFT_COLL_ALLTOALL, s, r, NULL, n, d, 0, c, &tmp, "weft_alltoall_on_stream"));
}
WEFT_API int weft_reduce_scatter_block_on_stream(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op,
                                                 weft_comm_t c, void *stream, weft_request_t *req)
{
    WEFT_API_ENTER();
    ON_STREAM(stream, req,
              reduce_scatter(&sc_, WEFT_COLL_REDUCE_SCATTER_BLOCK, s, r, NULL, n, d, op, c, &tmp,
                             "weft_reduce_scatter_block_on_stream"));
}
