/* The schedule engine (see schedule.h). Collective traffic uses the
 * collective tag class with tag = sequence number mod 2^23, so concurrent
 * collectives on one communicator never match each other while fewer than
 * 2^23 are in flight. */
#include "schedule.h"

#include "op.h"
#include "src/cuda/runtime.h"

#include <stdlib.h>
#include <string.h>

enum { OP_SEND, OP_RECV, OP_COPY, OP_CALL, OP_REDUCE, OP_FINALIZE, OP_POLL, OP_CHILD };
/* weft_sched_on_end's steps per schedule: an algorithm's own and the front end's stream gate */
enum { SCHED_ON_END = 2 };

typedef struct {
    int kind;
    int peer;
    void *buf;
    const void *src;
    size_t bytes;
    weft_sched_fn fn;
    weft_sched_poll_fn poll;
    weft_sched_post_fn post; /* OP_CHILD */
    void *arg;
    int rop;   /* OP_REDUCE: the weft_op_t */
    int dtype; /* OP_REDUCE: the weft_dtype_t */
} sched_op_t;

/* A scratch buffer: malloc'd (cap 0), or a block of the device runtime's
 * pinned pool (cap: its size, for weft_cuda_pinned_put). */
typedef struct {
    void *p;
    size_t cap;
} sched_buf_t;

struct weft_sched {
    weft_sched_hot_t hot; /* first: schedule.h reads it inline */
    weft_comm_t comm;
    const char *name;
    unsigned seq;
    sched_op_t *ops;
    int nops, cap;
    int *round_end; /* index one past each round's last op */
    int nrounds, round_cap;
    int cur;              /* round being executed */
    weft_request_t *reqs; /* the current round's transport requests */
    int nreqs, reqs_cap;
    int nrecvs; /* the first nrecvs of reqs are receives (posted first) */
    sched_buf_t *scratch; /* weft_sched_scratch's and _scratch_pinned's buffers */
    int nscratch;
    int waiting_peer;          /* for timeout messages: a peer the round still waits on */
    const char *waiting_what;  /* a polling step's description of what it waits for (NULL: a message) */
    int waiting_flag;          /* waiting_what is a flag of rank waiting_peer in shared memory */
    weft_bell_ref_t bell;      /* with waiting_flag: the bell that flag's poster rings (NULL: none) */
    int local_pos;             /* the local step a pending poll stopped at (0: from the round's start) */
    int polling;               /* the last pass stopped at a polling step (raises no transport events) */
    int progressed;            /* a polling step got further in this pass (weft_sched_progressed) */
    int fallback_round;        /* weft_sched_fallback_begin's first round (0: none): the rounds run end there */
    const char *fallback_name; /* the fallback's algorithm */
    int child_next;            /* op index of the current round's next child to post (-1: all posted) */
    int nchildren;             /* child steps in the schedule (most have none: no child pass at all) */
    unsigned lost_seen;        /* weft_lost_count when the members were last checked */
    weft_request_t req;
    struct weft_sched *next_active;
    void *spare;                     /* SCHED_SCRATCH_KEEP bytes kept across uses */
    int spare_used;                  /* handed out by weft_sched_scratch */
    const weft_sched_watch_t *watch; /* NULL: none */
    void *watch_arg;
    unsigned watch_polls;   /* polls that found a step not done */
    int watch_started;      /* its start ran */
    int device;             /* its buffers may be device memory (weft_sched_device) */
    double deadline;        /* its own (weft_sched_deadline), absolute; 0: none */
    double timeout;         /* the seconds that deadline was set from */
    /* weft_sched_on_end's: run once, in the order given, when the schedule is freed */
    void (*on_end[SCHED_ON_END])(void *);
    void *on_end_arg[SCHED_ON_END];
    int non_end;
    /* A child step failed with no cause this rank knows yet (see
     * child_failed): the schedule waits for the revoke or the loss behind
     * it, at most SCHED_CAUSE_WAIT_S, before failing with the child's error. */
    int child_err;
    double child_failed_at;
    char child_why[320];
};

static weft_sched_t *active;
static int hook_registered;
/* Schedules on the active list, and the count at which weft_sched_reap passes over them: stream-ordered
 * calls return before their work is done and nobody need wait for them, so without the pass a program that
 * only ever enqueues (and synchronises its streams itself) would keep every call it made. Each pass sets the
 * next at twice what it left (at least REAP_MIN): about one poll a call however many are in flight. */
#define REAP_MIN 64
static int nactive, reap_at = REAP_MIN, in_pass;
static int nest_depth, nest_posting; /* starts inside a start's first pass, and that start's posting */

/* Finished schedules keep their arrays and one small scratch buffer for
 * the next collective: a small-message collective then allocates nothing. */
#define SCHED_CACHE_MAX    16
#define SCHED_SCRATCH_KEEP 65536
static weft_sched_t *sched_cache;
static int sched_cached;

static int grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap) return WEFT_SUCCESS;
    int ncap = *cap ? *cap * 2 : 8;
    while (ncap < need)
        ncap *= 2;
    void *n = realloc(*p, (size_t)ncap * elem);
    if (!n) return weft_error(WEFT_ERR_NO_MEMORY, "schedule: out of memory");
    *p = n;
    *cap = ncap;
    return WEFT_SUCCESS;
}

weft_sched_t *weft_sched_create(weft_comm_t comm, const char *name)
{
    weft_sched_t *s = sched_cache;
    if (s) {
        sched_cache = s->next_active;
        sched_cached--;
        s->next_active = NULL;
    } else if (!(s = calloc(1, sizeof(*s)))) {
        return NULL;
    }
    s->comm = comm;
    s->name = name;
    s->waiting_peer = -1;
    s->waiting_what = NULL;
    s->bell.bell = NULL;
    s->local_pos = 0;
    s->child_next = -1;
    s->nchildren = 0;
    s->fallback_round = 0;
    s->fallback_name = NULL;
    s->lost_seen = 0; /* a new collective checks its members at its first idle wait */
    s->watch = NULL;
    s->child_err = 0;
    s->deadline = 0;
    s->device = 0; /* a cached schedule's last user may have set it */
    s->non_end = 0;
    return s;
}

/* A new op at the end of the current round, zeroed but for its kind (NULL
 * when out of memory). Fields are stored one by one: building a whole
 * struct by value and copying it stalled on store forwarding. */
static sched_op_t *add_op(weft_sched_t *s, int kind)
{
    if (grow((void **)&s->ops, &s->cap, s->nops + 1, sizeof(sched_op_t))) return NULL;
    sched_op_t *op = &s->ops[s->nops++];
    memset(op, 0, sizeof(*op));
    op->kind = kind;
    return op;
}

int weft_sched_send(weft_sched_t *s, const void *buf, size_t bytes, int peer)
{
    sched_op_t *op = add_op(s, OP_SEND);
    if (!op) return WEFT_ERR_NO_MEMORY;
    op->peer = peer;
    op->src = buf;
    op->bytes = bytes;
    return WEFT_SUCCESS;
}

int weft_sched_recv(weft_sched_t *s, void *buf, size_t bytes, int peer)
{
    sched_op_t *op = add_op(s, OP_RECV);
    if (!op) return WEFT_ERR_NO_MEMORY;
    op->peer = peer;
    op->buf = buf;
    op->bytes = bytes;
    return WEFT_SUCCESS;
}

int weft_sched_copy(weft_sched_t *s, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0 || dst == src) return WEFT_SUCCESS;
    sched_op_t *op = add_op(s, OP_COPY);
    if (!op) return WEFT_ERR_NO_MEMORY;
    op->buf = dst;
    op->src = src;
    op->bytes = bytes;
    return WEFT_SUCCESS;
}

int weft_sched_on_end(weft_sched_t *s, void (*fn)(void *), void *arg)
{
    if (s->non_end == SCHED_ON_END)
        return weft_error(WEFT_ERR_INTERNAL, "collective %s: more than %d steps to run at its end", s->name,
                          SCHED_ON_END);
    s->on_end[s->non_end] = fn;
    s->on_end_arg[s->non_end++] = arg;
    return WEFT_SUCCESS;
}

int weft_sched_nops(const weft_sched_t *s)
{
    return s->nops;
}

void weft_sched_device(weft_sched_t *s)
{
    s->device = 1;
}

int weft_sched_reduce(weft_sched_t *s, int rop, int dtype, void *inout, const void *in, size_t count)
{
    if (count == 0) return WEFT_SUCCESS;
    sched_op_t *op = add_op(s, OP_REDUCE);
    if (!op) return WEFT_ERR_NO_MEMORY;
    op->buf = inout;
    op->src = in;
    op->bytes = count;
    op->rop = rop;
    op->dtype = dtype;
    return WEFT_SUCCESS;
}

int weft_sched_op_finalize(weft_sched_t *s, int rop, int dtype, void *buf, size_t count, int nranks)
{
    if (count == 0 || rop != WEFT_AVG) return WEFT_SUCCESS;
    sched_op_t *op = add_op(s, OP_FINALIZE);
    if (!op) return WEFT_ERR_NO_MEMORY;
    op->buf = buf;
    op->bytes = count;
    op->rop = rop;
    op->dtype = dtype;
    op->peer = nranks;
    return WEFT_SUCCESS;
}

int weft_sched_call(weft_sched_t *s, weft_sched_fn fn, void *arg)
{
    sched_op_t *op = add_op(s, OP_CALL);
    if (!op) return WEFT_ERR_NO_MEMORY;
    op->fn = fn;
    op->arg = arg;
    return WEFT_SUCCESS;
}

int weft_sched_poll(weft_sched_t *s, weft_sched_poll_fn fn, void *arg)
{
    sched_op_t *op = add_op(s, OP_POLL);
    if (!op) return WEFT_ERR_NO_MEMORY;
    op->poll = fn;
    op->arg = arg;
    return WEFT_SUCCESS;
}

void weft_sched_watch(weft_sched_t *s, const weft_sched_watch_t *watch, void *arg)
{
    s->watch = watch;
    s->watch_arg = arg;
    s->watch_polls = 0;
    s->watch_started = 0;
}

void weft_sched_deadline(weft_sched_t *s, double timeout_s)
{
    s->timeout = timeout_s;
    s->deadline = timeout_s > 0 ? weft_deadline_from(timeout_s, weft_wtime()) : 0;
}

static void watch_start(weft_sched_t *s)
{
    if (s->watch && !s->watch_started && s->watch->start) s->watch->start(s->watch_arg);
    s->watch_started = 1;
}

/* The schedule ends with rc: a watch hears of a failure. */
static void watch_end(weft_sched_t *s, int rc)
{
    if (WEFT_UNLIKELY(rc != WEFT_SUCCESS) && s->watch && s->watch->failed) s->watch->failed(s->watch_arg, rc);
    s->watch = NULL;
}

void weft_sched_progressed(weft_sched_t *s)
{
    s->progressed = 1;
}

void weft_sched_waiting(weft_sched_t *s, int peer, const char *what)
{
    s->waiting_peer = peer;
    s->waiting_what = what;
    s->waiting_flag = 0;
}

void weft_sched_waiting_flag(weft_sched_t *s, int peer, const char *flag, const weft_bell_ref_t *bell)
{
    s->waiting_peer = peer;
    s->waiting_what = flag;
    s->waiting_flag = 1;
    s->bell = *bell;
}

int weft_sched_child(weft_sched_t *s, weft_sched_post_fn post, weft_sched_fn reserve, void *arg)
{
    sched_op_t *op = add_op(s, OP_CHILD);
    if (!op) return WEFT_ERR_NO_MEMORY;
    op->peer = -1;
    op->post = post;
    op->fn = reserve;
    op->arg = arg;
    s->nchildren++;
    return WEFT_SUCCESS;
}

unsigned weft_sched_seq(const weft_sched_t *s)
{
    return s->seq;
}

int weft_sched_end_round(weft_sched_t *s)
{
    int start = s->nrounds ? s->round_end[s->nrounds - 1] : 0;
    if (s->nops == start) return WEFT_SUCCESS; /* empty round */
    int rc = grow((void **)&s->round_end, &s->round_cap, s->nrounds + 1, sizeof(int));
    if (rc) return rc;
    s->round_end[s->nrounds++] = s->nops;
    return WEFT_SUCCESS;
}

int weft_sched_fallback_begin(weft_sched_t *s)
{
    int rc = weft_sched_end_round(s);
    if (!rc) s->fallback_round = s->nrounds;
    return rc;
}

void weft_sched_fallback_name(weft_sched_t *s, const char *name)
{
    s->fallback_name = name;
}

void weft_sched_fallback_drop(weft_sched_t *s)
{
    s->fallback_round = 0;
}

int weft_sched_has_fallback(const weft_sched_t *s)
{
    return s->fallback_round > 0;
}

int weft_sched_nchildren(const weft_sched_t *s)
{
    return s->nchildren;
}

/* The rounds that run: all, or those before an unused fallback. */
static inline int rounds_run(const weft_sched_t *s)
{
    return s->fallback_round ? s->fallback_round : s->nrounds;
}

void weft_sched_comm(const weft_sched_t *s, weft_comm_t *comm)
{
    *comm = s->comm;
}

void *weft_sched_scratch(weft_sched_t *s, size_t bytes)
{
    if (!s->spare_used && bytes <= SCHED_SCRATCH_KEEP) { /* the kept buffer serves one small request */
        if (!s->spare) s->spare = malloc(SCHED_SCRATCH_KEEP);
        if (s->spare) {
            s->spare_used = 1;
            return s->spare;
        }
    }
    sched_buf_t *n = realloc(s->scratch, sizeof(*n) * (size_t)(s->nscratch + 1));
    if (!n) return NULL;
    s->scratch = n;
    void *p = malloc(bytes ? bytes : 1);
    if (p) s->scratch[s->nscratch++] = (sched_buf_t){p, 0};
    return p;
}

void *weft_sched_scratch_pinned(weft_sched_t *s, size_t bytes)
{
    size_t cap;
    void *p = weft_cuda_pinned_get(bytes, &cap);
    if (!p) return weft_sched_scratch(s, bytes);
    sched_buf_t *n = realloc(s->scratch, sizeof(*n) * (size_t)(s->nscratch + 1));
    if (!n) {
        weft_cuda_pinned_put(p, cap);
        return NULL;
    }
    s->scratch = n;
    s->scratch[s->nscratch++] = (sched_buf_t){p, cap};
    return p;
}

/* final: at finalize, after the device runtime let go of its pool. */
static void buf_release(sched_buf_t b, int final)
{
    if (!b.cap)
        free(b.p);
    else if (final)
        weft_cuda_pinned_free(b.p);
    else
        weft_cuda_pinned_put(b.p, b.cap);
}

static void scratch_release(weft_sched_t *s)
{
    for (int i = 0; i < s->nscratch; i++)
        buf_release(s->scratch[i], 0);
    s->nscratch = 0;
}

static void sched_destroy(weft_sched_t *s)
{
    scratch_release(s);
    free(s->scratch);
    free(s->spare);
    free(s->ops);
    free(s->round_end);
    free(s->reqs);
    free(s);
}

/* Returns s to the cache (or frees it): its arrays stay allocated. */
static void sched_free(weft_sched_t *s)
{
    for (int i = 0, n = s->non_end; i < n; i++)
        s->on_end[i](s->on_end_arg[i]);
    s->non_end = 0;
    if (sched_cached >= SCHED_CACHE_MAX) {
        sched_destroy(s);
        return;
    }
    scratch_release(s);
    s->spare_used = 0;
    s->nops = s->nrounds = s->cur = s->nreqs = s->local_pos = s->nchildren = s->polling = s->progressed = 0;
    s->child_err = 0;
    s->req = NULL;
    s->next_active = sched_cache;
    sched_cache = s;
    sched_cached++;
}

void weft_sched_discard(weft_sched_t *s)
{
    if (s) sched_free(s);
}

/* All messages of one collective carry its sequence number. Ranks run
 * different numbers of rounds (a tree's leaves, recursive doubling's
 * extra ranks), so the round cannot be part of the tag; within a pair,
 * UCX matches messages with equal tags in the order they were sent, and
 * every algorithm posts a pair's messages in the same order on both
 * sides. */
static unsigned coll_tag(const weft_sched_t *s)
{
    return s->seq & ((1u << WEFT_COLL_TAG_BITS) - 1);
}

/* Posts the current round's children from s->child_next on, in order,
 * until one may not post yet (it is retried on later progress). */
static int post_children(weft_sched_t *s)
{
    int end = s->round_end[s->cur];
    for (int i = s->child_next; i >= 0 && i < end; i++) {
        sched_op_t *op = &s->ops[i];
        if (op->kind != OP_CHILD) continue;
        int rc = op->post(s, op->arg, &s->reqs[s->nreqs]);
        if (rc == WEFT_SCHED_AGAIN) {
            s->child_next = i;
            return WEFT_SUCCESS;
        }
        if (rc) {
            s->child_next = i + 1; /* this one failed: it is not abandoned again */
            return rc;
        }
        s->reqs[s->nreqs]->peer = op->peer;
        s->nreqs++;
    }
    s->child_next = -1;
    return WEFT_SUCCESS;
}

/* Tells the children this schedule never posted that they will not be. */
static void abandon_children(weft_sched_t *s)
{
    if (!s->nchildren || s->cur >= s->nrounds) return;
    int from = s->child_next >= 0 ? s->child_next : s->round_end[s->cur];
    for (int i = from; i < s->nops; i++)
        if (s->ops[i].kind == OP_CHILD) s->ops[i].post(s, s->ops[i].arg, NULL);
    s->child_next = -1;
}

/* Posts the transport operations of round s->cur. */
static int post_round(weft_sched_t *s)
{
    int start = s->cur ? s->round_end[s->cur - 1] : 0, end = s->round_end[s->cur], rc;
    int tag = (int)coll_tag(s);
    unsigned cls = WEFT_TAG_CLASS_COLL | (s->device ? WEFT_TAG_CLASS_DEVICE : 0u);
    s->nreqs = 0;
    s->nrecvs = 0;
    if ((rc = grow((void **)&s->reqs, &s->reqs_cap, end - start, sizeof(weft_request_t)))) return rc;
    /* Receives first, so matching sends find them posted; children last. */
    for (int pass = 0; pass < 2; pass++)
        for (int i = start; i < end; i++) {
            sched_op_t *op = &s->ops[i];
            if (pass == 0 && op->kind == OP_RECV)
                rc = weft_xport->irecv(op->buf, op->bytes, op->peer, cls, tag, s->comm, &s->reqs[s->nreqs]);
            else if (pass == 1 && op->kind == OP_SEND)
                rc = weft_xport->isend(op->src, op->bytes, op->peer, cls, tag, s->comm, &s->reqs[s->nreqs]);
            else
                continue;
            if (rc) return rc;
            s->reqs[s->nreqs]->peer = op->peer;
            s->nreqs++;
            if (pass == 0) s->nrecvs = s->nreqs;
        }
    if (!s->nchildren) return WEFT_SUCCESS;
    s->child_next = start;
    return post_children(s);
}

/* Runs round s->cur's local steps in order: WEFT_SUCCESS, an error, or
 * SCHED_PENDING when a polling step is not done yet (the round resumes at
 * that step on the next pass; the steps before it are not repeated). */
#define SCHED_PENDING 1
#define SCHED_JUMP    2 /* a polling step asked for the fallback (weft_sched_fallback_begin) */
static int run_locals(weft_sched_t *s)
{
    int start = s->local_pos ? s->local_pos : s->cur ? s->round_end[s->cur - 1] : 0, end = s->round_end[s->cur];
    for (int i = start; i < end; i++) {
        sched_op_t *op = &s->ops[i];
        if (op->kind == OP_POLL) {
            s->bell.bell = NULL; /* the step names it again if it waits on a flag */
            int rc = op->poll(s, op->arg);
            if (rc == 0) {
                s->local_pos = i;
                s->polling = 1;
                if (s->watch && ++s->watch_polls % WEFT_SCHED_WATCH_POLLS == 0 && s->watch->check &&
                    (rc = s->watch->check(s->watch_arg)) < 0)
                    return rc;
                return SCHED_PENDING;
            }
            if (WEFT_UNLIKELY(rc == WEFT_SCHED_FALLBACK)) {
                if (!s->fallback_round)
                    return weft_error(WEFT_ERR_INTERNAL, "collective %s: a step asked for a fallback it has none of",
                                      s->name);
                s->local_pos = 0;
                return SCHED_JUMP;
            }
            if (rc < 0) return rc;
            s->local_pos = 0;
            s->waiting_what = NULL;
        } else if (op->kind == OP_COPY) {
            if (WEFT_UNLIKELY(s->device)) {
                int rc = weft_cuda_copy(op->buf, op->src, op->bytes);
                if (rc) return rc;
            } else {
                memmove(op->buf, op->src, op->bytes);
            }
        } else if (op->kind == OP_REDUCE)
            weft_op_reduce((weft_op_t)op->rop, (weft_dtype_t)op->dtype, op->buf, op->src, op->bytes);
        else if (op->kind == OP_FINALIZE)
            weft_op_finalize((weft_op_t)op->rop, (weft_dtype_t)op->dtype, op->buf, op->bytes, op->peer);
        else if (op->kind == OP_CALL) {
            int rc = op->fn(s, op->arg);
            if (rc) return rc;
        }
    }
    return WEFT_SUCCESS;
}

/* The scratch of failed schedules whose messages were still in flight
 * when they ended: a rendezvous send is read, and a matched receive
 * written, by the transport until it completes, which may be long after
 * (the peer posts late, or never). The buffers are kept until every such
 * message of every failed schedule is over (a child's message may land in
 * its parent's scratch), then freed together; finalize frees what is left
 * once the transport is gone. */
static struct {
    sched_buf_t *bufs;
    int n, cap;
    int inflight; /* released messages of failed schedules not yet over */
} parked;

int weft_sched_adrift(void)
{
    return parked.inflight;
}

static void parked_free(int final)
{
    for (int i = 0; i < parked.n; i++)
        buf_release(parked.bufs[i], final);
    parked.n = 0;
}

static void parked_message_over(void *arg)
{
    (void)arg;
    if (--parked.inflight == 0) parked_free(0);
}

static void park(sched_buf_t b)
{
    if (!b.p) return;
    if (parked.n == parked.cap && grow((void **)&parked.bufs, &parked.cap, parked.n + 1, sizeof(*parked.bufs))) {
        weft_debug("schedule: no memory to list a failed collective's scratch: it is never freed");
        return;
    }
    parked.bufs[parked.n++] = b;
}

/* A failed schedule's scratch, while messages of failed schedules are in
 * flight: kept (parked) instead of freed or reused. */
static void park_scratch(weft_sched_t *s)
{
    if (!parked.inflight) return;
    weft_debug("collective %s (comm %s): its scratch is kept until %d message%s in flight end%s", s->name,
               s->comm->name, parked.inflight, parked.inflight == 1 ? "" : "s", parked.inflight == 1 ? "s" : "");
    for (int i = 0; i < s->nscratch; i++)
        park(s->scratch[i]);
    s->nscratch = 0;
    if (s->spare_used) {
        park((sched_buf_t){s->spare, 0});
        s->spare = NULL;
        s->spare_used = 0;
    }
}

/* Cancels what the current round still has posted (after a failure);
 * sends cannot be canceled and finish in the background (as do receives
 * the transport had matched). Asking anyway would overwrite the failure's
 * message with a cancel error. What is still in flight is counted until
 * the transport releases it (park_scratch). */
static void abandon_round(weft_sched_t *s)
{
    for (int i = 0; i < s->nreqs; i++)
        if (s->reqs[i]) {
            weft_request_t r = s->reqs[i];
            if (!r->complete && r->ops->cancel) weft_request_cancel(&s->reqs[i]);
            if (!r->complete) {
                r->on_release = parked_message_over;
                parked.inflight++;
            }
            weft_request_free(&s->reqs[i]);
        }
    s->nreqs = 0;
}

static void unlink_active(weft_sched_t *s)
{
    for (weft_sched_t **pp = &active; *pp; pp = &(*pp)->next_active)
        if (*pp == s) {
            *pp = s->next_active;
            nactive--;
            return;
        }
}

static void log_end(const weft_sched_t *s, int rc)
{
    if (rc != WEFT_SUCCESS) weft_debug("collective %s (comm %s) failed: %s", s->name, s->comm->name, weft_strerror(rc));
}

/* Finishes the schedule: completes (or, if orphaned, releases) its request. */
static void finish(weft_sched_t *s, int rc)
{
    weft_request_t req = s->req;
    unlink_active(s);
    abandon_round(s);
    abandon_children(s);
    if (WEFT_UNLIKELY(rc != WEFT_SUCCESS)) park_scratch(s);
    log_end(s, rc);
    watch_end(s, rc);
    req->owner_data = NULL;
    sched_free(s);
    if (req->orphaned)
        weft_request_release(req);
    else
        weft_request_complete(req, rc);
}

/* Fails s with a message; set after finish(), which cancels the round's
 * receives, so nothing on the way overwrites it. A request the user let go
 * of returns the error to no one: that one is a warning. */
static void fail(weft_sched_t *s, int err, const char *why)
{
    char msg[640];
    int orphaned = s->req->orphaned;
    snprintf(msg, sizeof(msg), "collective %s (comm %s) failed in round %d of %d: %s%s", s->name, s->comm->name,
             s->cur + 1, s->nrounds, why, orphaned ? " (its request was already released)" : "");
    finish(s, err);
    weft_error_at(orphaned ? WEFT_LOG_WARN : WEFT_LOG_DEBUG, err, "%s", msg);
}

/* How long a schedule whose child step failed without a known cause waits
 * for one: a revoke notice or the news of a loss reaches every member within
 * milliseconds of the member that acted on it (ranks of one node may learn of
 * a loss 10 ms apart: their idle polls); more allows for loaded machines. */
#define SCHED_CAUSE_WAIT_S 1.0

/* The cause of a failure of s's collective that this rank can name for the
 * whole communicator: comm revoked (WEFT_ERR_REVOKED) or a member lost
 * (WEFT_ERR_PEER_LOST), with why set; 0 if none is known. `force` asks the
 * bootstrap now rather than at the next idle poll. */
static int known_cause(weft_sched_t *s, int force, char *why, size_t len)
{
    if (s->comm->revoked) {
        weft_comm_revoked_error(s->comm, s->name);
        snprintf(why, len, "%s", weft_last_error());
        return WEFT_ERR_REVOKED;
    }
    if (force) weft_liveness_poll(weft_wtime(), 0, 1);
    s->lost_seen = weft_lost_count;
    int lost = weft_comm_lost_member(s->comm);
    if (lost < 0) return 0;
    weft_lost_describe(s->comm, lost, why, len);
    return WEFT_ERR_PEER_LOST;
}

/* err, a child step's failure, may be the echo of another member's: see
 * child_failed. */
static int echo_error(int err)
{
    return err == WEFT_ERR_COMM || err == WEFT_ERR_INTERNAL || err == WEFT_ERR_TRANSPORT || err == WEFT_ERR_CANCELED;
}

/* A step on a sub-communicator (node, leader, rail) failed with err. A
 * sub-communicator's collective fails on one member because another gave
 * it up: that member's collective on the parent failed (a lost peer, a
 * revoke), so it never ran or abandoned its part of the step (coll/shm
 * then fails the others' part with WEFT_ERR_COMM), or it died (a read from
 * it fails). The parent's collective fails for that cause, as it does on
 * that member, once this rank knows it: at once if it does, else when the
 * revoke notice or the news of the loss arrives (every member gets them),
 * or after SCHED_CAUSE_WAIT_S with the child's own error. Errors that no
 * other member causes (bad arguments, memory) fail the parent at once.
 * Returns 1 when s ended. */
static int child_failed(weft_sched_t *s, int err)
{
    char why[320];
    int echo = echo_error(err);
    int known = echo || err == WEFT_ERR_PEER_LOST || err == WEFT_ERR_REVOKED ? known_cause(s, 1, why, sizeof(why)) : 0;
    if (known) {
        fail(s, known, why);
        return 1;
    }
    snprintf(s->child_why, sizeof(s->child_why), "a step on a sub-communicator failed: %s", weft_strerror(err));
    if (!echo || s->req->orphaned) { /* its own cause; or no one waits to hear another */
        fail(s, err, s->child_why);
        return 1;
    }
    s->child_err = err;
    s->child_failed_at = weft_wtime();
    weft_debug("collective %s (comm %s): %s; waiting up to %.3g s for the revoke or loss behind it", s->name,
               s->comm->name, s->child_why, SCHED_CAUSE_WAIT_S);
    return 0;
}

/* A schedule waiting for the cause of its child's failure (child_failed):
 * 1 when it ended. */
static int child_cause_wait(weft_sched_t *s)
{
    char why[320];
    double now = weft_wtime();
    weft_liveness_poll(now, s->child_failed_at, 0); /* since then: PMIx may ask its table */
    int known = s->comm->revoked || s->lost_seen != weft_lost_count ? known_cause(s, 0, why, sizeof(why)) : 0;
    if (known) {
        fail(s, known, why);
        return 1;
    }
    if (now - s->child_failed_at < SCHED_CAUSE_WAIT_S) return 0;
    snprintf(why, sizeof(why), "%.260s (no lost member or revoke explains it)", s->child_why);
    fail(s, s->child_err, why);
    return 1;
}

static int sched_describe(weft_request_t req, char *buf, size_t len);

/* s's own deadline passed (weft_sched_deadline). The message is set before
 * finish(), so that the watch's failed() can add to it (coll/cuda: the rank
 * its kernels were waiting for); set again after, should the cancel of a
 * round's receives have replaced it. Nobody may hear of it but the log. */
static void expire(weft_sched_t *s)
{
    char what[320], msg[640];
    int orphaned = s->req->orphaned;
    if (sched_describe(s->req, what, sizeof(what)) <= 0)
        snprintf(what, sizeof(what), "collective %s (comm %s)", s->name, s->comm->name);
    snprintf(msg, sizeof(msg), "%s timed out: its deadline, %.3g s after the call, passed%s", what, s->timeout,
             orphaned ? " (its request was already released)" : "");
    weft_error_quiet(WEFT_ERR_TIMEOUT, "%s", msg);
    finish(s, WEFT_ERR_TIMEOUT);
    if (strncmp(weft_last_error(), msg, strlen(msg)) != 0) weft_error_quiet(WEFT_ERR_TIMEOUT, "%s", msg);
    if (orphaned) weft_warn("%s", weft_last_error());
}

/* Advances s as far as it can go now. Returns 1 if anything happened. */
static int advance(weft_sched_t *s)
{
    int moved = 0;
    s->polling = 0;
    if (WEFT_UNLIKELY(s->deadline > 0) && weft_wtime() >= s->deadline) {
        expire(s);
        return 1;
    }
    if (WEFT_UNLIKELY(s->child_err)) return child_cause_wait(s);
    while (s->cur < rounds_run(s)) {
        if (s->child_next >= 0) { /* children that could not post yet */
            int rc = post_children(s);
            if (rc) {
                /* A revoked sub-communicator, or one an earlier collective gave up on
                 * (WEFT_ERR_CANCELED): the parent's cause, if this rank knows it. */
                char why[320], detail[256];
                int known = echo_error(rc) || rc == WEFT_ERR_REVOKED ? known_cause(s, 1, why, sizeof(why)) : 0;
                if (!known) {
                    snprintf(detail, sizeof(detail), "%s", weft_last_error());
                    snprintf(why, sizeof(why), "a step on a sub-communicator could not start: %s", detail);
                }
                fail(s, known ? known : rc, why);
                return 1;
            }
            if (s->child_next >= 0) return moved;
        }
        for (int i = 0; i < s->nreqs; i++) {
            weft_request_t r = s->reqs[i];
            if (!r) continue;
            if (!r->complete) {
                s->waiting_peer = r->peer;
                return moved;
            }
            int err = r->status.error, peer = r->peer;
            /* Every step's receive expects an exact length: another one
             * means the ranks called with different counts or datatypes
             * (found without a message of its own). */
            size_t got = r->status.bytes, want = r->capacity;
            int mismatch = i < s->nrecvs && (err == WEFT_ERR_TRUNCATE || (!err && got != want));
            weft_request_release(r);
            s->reqs[i] = NULL;
            moved = 1;
            if (WEFT_UNLIKELY(mismatch)) {
                char why[320];
                if (err)
                    snprintf(why, sizeof(why),
                             "rank %d sent more than the %zu bytes this rank expects (the ranks passed different "
                             "counts or datatypes)",
                             peer, want);
                else
                    snprintf(why, sizeof(why),
                             "rank %d sent %zu bytes where this rank expects %zu (the ranks passed different "
                             "counts or datatypes)",
                             peer, got, want);
                fail(s, WEFT_ERR_ARG, why);
                return 1;
            }
            if (err && peer < 0) { /* a child */
                if (child_failed(s, err)) return 1;
                return moved;
            }
            if (err) {
                char why[320];
                if (err == WEFT_ERR_PEER_LOST && weft_rank_lost_why(weft_comm_world_rank_of(s->comm, peer)))
                    weft_lost_describe(s->comm, peer, why, sizeof(why));
                else
                    snprintf(why, sizeof(why), "exchange with rank %d failed: %s", peer, weft_strerror(err));
                fail(s, err, why);
                return 1;
            }
        }
        int rc = run_locals(s);
        if (rc == SCHED_PENDING) {
            moved |= s->progressed;
            s->progressed = 0;
            return moved;
        }
        s->local_pos = 0;
        if (WEFT_UNLIKELY(rc == SCHED_JUMP)) {
            /* Every member takes the fallback alike: the component's shared state is unusable for all. */
            weft_debug("collective %s (comm %s): shared state unusable, its fallback %s runs (from round %d of %d)",
                       s->name, s->comm->name, s->fallback_name ? s->fallback_name : "", s->fallback_round + 1,
                       s->nrounds);
            if (s->fallback_name) s->name = s->fallback_name;
            s->watch = NULL;
            s->waiting_what = NULL;
            s->waiting_flag = 0;
            s->waiting_peer = -1;
            s->cur = s->fallback_round;
            s->fallback_round = 0;
            if (s->cur < s->nrounds)
                rc = post_round(s);
            else
                s->nreqs = 0; /* an empty fallback: done */
        } else if (!rc && ++s->cur < rounds_run(s))
            rc = post_round(s);
        else
            s->nreqs = 0;
        moved = 1;
        if (rc) {
            finish(s, rc);
            return 1;
        }
    }
    finish(s, WEFT_SUCCESS);
    return 1;
}

static int sched_progress(void *arg)
{
    (void)arg;
    int events = 0;
    weft_sched_t *s = active;
    in_pass++;
    while (s) {
        weft_sched_t *next = s->next_active; /* s may finish and be freed */
        events += advance(s);
        s = next;
    }
    in_pass--;
    return events;
}

static void sched_orphan(weft_request_t req)
{
    (void)req; /* finish() sees req->orphaned and releases it */
}

static int sched_describe(weft_request_t req, char *buf, size_t len)
{
    weft_sched_t *s = req->owner_data;
    if (!s) return 0;
    if (s->child_err)
        return snprintf(buf, len, "collective %s (comm %s) in round %d of %d, after %s, waiting for its cause", s->name,
                        s->comm->name, s->cur + 1, s->nrounds, s->child_why);
    if (s->waiting_what && s->waiting_flag)
        return snprintf(buf, len, "collective %s (comm %s) in round %d of %d, polling rank %d's %s in shared memory",
                        s->name, s->comm->name, s->cur + 1, s->nrounds, s->waiting_peer, s->waiting_what);
    if (s->waiting_what)
        return snprintf(buf, len, "collective %s (comm %s) in round %d of %d, polling %s", s->name, s->comm->name,
                        s->cur + 1, s->nrounds, s->waiting_what);
    return snprintf(buf, len, "collective %s (comm %s) in round %d of %d", s->name, s->comm->name, s->cur + 1,
                    s->nrounds);
}

static int sched_waiting_for(weft_request_t req)
{
    weft_sched_t *s = req->owner_data;
    return s ? s->waiting_peer : -1;
}

/* Called while a wait on the schedule is idle: a collective cannot finish
 * once any member is dead, whichever peer this rank happens to wait on (in
 * a ring, a live neighbour stuck behind the dead rank). Rescans the members
 * only when the liveness record has news. */
static void sched_check(weft_request_t req)
{
    weft_sched_t *s = req->owner_data;
    if (!s || s->lost_seen == weft_lost_count) return;
    s->lost_seen = weft_lost_count;
    int r = weft_comm_lost_member(s->comm);
    if (r < 0) return;
    char why[320];
    weft_lost_describe(s->comm, r, why, sizeof(why));
    fail(s, WEFT_ERR_PEER_LOST, why);
}

/* Stops a running schedule: its posted receives are canceled (no more data
 * lands in the caller's buffers); its sends finish in the background. */
static int sched_cancel(weft_request_t req)
{
    weft_sched_t *s = req->owner_data;
    if (s) finish(s, req->cancel_reason ? req->cancel_reason : WEFT_ERR_CANCELED); /* a revoke gives its own */
    return WEFT_SUCCESS;
}

/* For the progress thread and a wait past its spin: a schedule stopped at
 * a shared-memory flag whose poster rings a bell sleeps on it; one at
 * another polling step (a stream's event), at a child it may not post
 * yet, or waiting for the cause of a child's failure must be polled; one
 * waiting for its round's messages wakes on the transport's events. Its
 * own deadline is a time to look again. */
static int sched_idle_needs(weft_request_t req, double *wake_at, weft_bell_ref_t *bell)
{
    weft_sched_t *s = req->owner_data;
    if (!s) return WEFT_NEEDS_NOTHING;
    if (s->deadline > 0 && (*wake_at <= 0 || s->deadline < *wake_at)) *wake_at = s->deadline;
    if (s->child_next >= 0 || s->child_err) return WEFT_NEEDS_POLL;
    if (s->polling && s->waiting_flag && s->bell.bell) {
        *bell = s->bell;
        return WEFT_NEEDS_BELL;
    }
    if (s->polling) return WEFT_NEEDS_POLL;
    return WEFT_NEEDS_EVENTS;
}

static const weft_request_ops_t sched_ops = {.kind = "collective",
                                             .cancel = sched_cancel,
                                             .check = sched_check,
                                             .orphan = sched_orphan,
                                             .describe = sched_describe,
                                             .waiting_for = sched_waiting_for,
                                             .idle_needs = sched_idle_needs};

/* The ranks this schedule sends to get their endpoints in one go: at scale
 * their addresses are fetched from the bootstrap, one request for many. */
static void connect_peers(weft_sched_t *s)
{
    int peers[64], n = 0;
    for (int i = 0; i < s->nops && n < 64; i++)
        if (s->ops[i].kind == OP_SEND && s->ops[i].peer >= 0)
            peers[n++] = weft_comm_world_rank_of(s->comm, s->ops[i].peer);
    if (n > 1) (void)weft_xport->connect(peers, n);
}

/* nonblocking: the application's nonblocking call (weft_sched_start), not
 * weft_sched_run's handover to an ordinary wait. */
static int start(weft_sched_t *s, weft_request_t *out, int nonblocking)
{
    int rc = weft_sched_end_round(s);
    if (rc) goto fail;
    /* Revoked while this was being built or polled inline (shared memory). */
    if (WEFT_UNLIKELY(s->comm->revoked)) {
        rc = weft_comm_revoked_error(s->comm, s->name);
        goto fail;
    }
    s->req = weft_request_alloc(&sched_ops, s->comm);
    if (!s->req) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "collective %s: out of memory for a request", s->name);
        goto fail;
    }
    s->req->owner_data = s;
    /* The sequence number is taken only by schedules that run, so a
     * schedule an algorithm declined leaves no gap. */
    s->seq = s->comm->coll_seq++;
    watch_start(s);
    *out = s->req;
    if (s->nrounds == 0) {
        s->req->owner_data = NULL;
        weft_request_complete(s->req, WEFT_SUCCESS);
        sched_free(s);
        return WEFT_SUCCESS;
    }
    s->next_active = active;
    active = s;
    nactive++;
    /* Children reserve their turn on their sub-communicators now: schedules
     * start in the user's call order, the same on every rank. */
    for (int i = 0; s->nchildren && i < s->nops && !rc; i++)
        if (s->ops[i].kind == OP_CHILD && s->ops[i].fn) rc = s->ops[i].fn(s, s->ops[i].arg);
    if (weft_xport && weft_xport->connect && s->nrounds > 1) connect_peers(s);
    if (rc || (rc = post_round(s))) {
        finish(s, rc);
        return WEFT_SUCCESS; /* the request carries the error */
    }
    /* A schedule started inside another's first pass (a hierarchical
     * step's child) posts as its parent does; one started by a progress
     * pass (the thread's, or a blocking call's wait) does not post. */
    s->hot.posting = in_pass ? 0 : nest_depth ? nest_posting : nonblocking && weft_progress_thread_running();
    int outer = nest_posting;
    nest_depth++;
    nest_posting = s->hot.posting;
    advance(s);
    nest_depth--;
    nest_posting = outer;
    s->hot.posting = 0;
    /* The progress thread, asleep on the transport's events, learns of it
     * when this call returns (the schedule may raise none: shared memory). */
    if (WEFT_UNLIKELY(atomic_load_explicit(&weft_api_locking, memory_order_relaxed)) && !(*out)->complete)
        weft_pt_kick = 1;
    return WEFT_SUCCESS;
fail:
    if (s->req) weft_request_release(s->req);
    sched_free(s);
    return rc;
}

int weft_sched_start(weft_sched_t *s, weft_request_t *out)
{
    return start(s, out, 1);
}

/* 1 when every op of s is local (polls, copies, reductions, calls: a
 * shared-memory collective), in one round. */
static int local_only(const weft_sched_t *s)
{
    if (s->nrounds != 1 || s->nchildren || s->fallback_round) return 0;
    for (int i = 0; i < s->nops; i++)
        if (s->ops[i].kind == OP_SEND || s->ops[i].kind == OP_RECV) return 0;
    return 1;
}

/* Idle polls between progress calls while a blocking schedule runs inline:
 * a flag wait notices the flag within a few loads instead of a pass through
 * UCX and every active schedule, and other requests still advance (every
 * 256 measured the same as 16 at 8-32 ranks). */
#define INLINE_PROGRESS_EVERY 16
/* The most polls inline (with WEFT_SPIN_BEFORE_YIELD set very high, the
 * ordinary wait still reads the clock: deadlines and liveness hold). */
#define INLINE_POLLS_MAX 4096u

int weft_sched_run(weft_sched_t *s)
{
    int rc = weft_sched_end_round(s);
    if (rc) {
        sched_free(s);
        return rc;
    }
    /* A blocking schedule of local steps runs on the caller's stack for as
     * long as a wait would spin (WEFT_SPIN_BEFORE_YIELD polls): no request,
     * no pass through the progress engine per poll. If it is still pending
     * then (a late peer, a dead one, an oversubscribed host), it becomes an
     * ordinary started schedule and the ordinary wait takes over (its
     * deadline, liveness checks, yielding, timeout message). */
    if (local_only(s)) {
        /* The steps take shared-memory sequence numbers and publish flags:
         * the handover must not fail for want of a request after that. */
        if ((rc = weft_request_reserve())) {
            sched_free(s);
            return rc;
        }
        unsigned polls = 0, limit = weft_cfg.spin_before_yield > 0 ? (unsigned)weft_cfg.spin_before_yield : 1;
        if (limit > INLINE_POLLS_MAX) limit = INLINE_POLLS_MAX;
        watch_start(s);
        for (;;) {
            rc = run_locals(s);
            if (rc != SCHED_PENDING) {
                s->comm->coll_seq++; /* as weft_sched_start: the numbering stays the same on every rank */
                log_end(s, rc);
                watch_end(s, rc);
                weft_comm_t comm = s->comm;
                sched_free(s);
                if (rc) weft_comm_error_policy(comm, rc);
                return rc;
            }
            if (++polls >= limit || WEFT_UNLIKELY(s->comm->revoked)) break; /* the start below fails it */
            if (active || polls % INLINE_PROGRESS_EVERY == 0) weft_progress();
        }
    }
    weft_request_t req;
    rc = start(s, &req, 0);
    if (rc) return rc;
    return weft_sched_wait(&req);
}

int weft_sched_wait(weft_request_t *req)
{
    int rc = weft_wait(req, NULL);
    if (rc == WEFT_ERR_TIMEOUT) {
        /* The caller's buffers go out of scope: stop the schedule first. */
        char saved[1024];
        snprintf(saved, sizeof(saved), "%s", weft_last_error());
        weft_request_cancel(req);
        weft_request_free(req);
        rc = weft_error(WEFT_ERR_TIMEOUT, "%s", saved);
    }
    return rc;
}

void weft_sched_reap(void)
{
    if (nactive < reap_at || in_pass) return;
    sched_progress(NULL);
    reap_at = 2 * nactive > REAP_MIN ? 2 * nactive : REAP_MIN;
}

int weft_sched_init(void)
{
    active = NULL;
    nactive = 0;
    reap_at = REAP_MIN;
    if (hook_registered) return WEFT_SUCCESS;
    int rc = weft_progress_register(sched_progress, NULL);
    if (!rc) hook_registered = 1;
    return rc;
}

void weft_sched_finalize(void)
{
    int n = 0;
    /* What has ended (stream-ordered calls whose streams were synchronised) ends here, not canceled */
    if (!in_pass) sched_progress(NULL);
    while (active) {
        weft_sched_t *s = active;
        n++;
        finish(s, WEFT_ERR_CANCELED);
    }
    if (n)
        weft_warn("weft_finalize: %d collective%s still in progress %s canceled", n, n == 1 ? "" : "s",
                  n == 1 ? "was" : "were");
    while (sched_cache) {
        weft_sched_t *s = sched_cache;
        sched_cache = s->next_active;
        sched_destroy(s);
    }
    sched_cached = 0;
    if (hook_registered) weft_progress_unregister(sched_progress, NULL);
    hook_registered = 0;
}

void weft_sched_cleanup(void)
{
    if (parked.inflight)
        weft_debug("weft_finalize: %d message%s of failed collectives never ended: their scratch is freed now",
                   parked.inflight, parked.inflight == 1 ? "" : "s");
    parked.inflight = 0;
    parked_free(1);
    free(parked.bufs);
    parked.bufs = NULL;
    parked.cap = 0;
}
