/* Hierarchical collectives (coll/hier/) on simulated nodes (WEFT_NODE_ID
 * per rank, WEFT_RANKS_PER_NODE): derived node / leader / rail
 * sub-communicators (membership, ranks, context ids, traffic isolation,
 * built with no communication); every hier algorithm forced x dtype (x op)
 * against references on 2x2, 2x3, 3x2, 4x1, 1x4 and uneven layouts, counts
 * 0, 1, a prime and a larger one, in-place forms; allgather (contiguous and
 * list) bit-exact against the flat ring for bf16, fp16, fp32, int32; which
 * layouts each algorithm declines; concurrent nonblocking hier
 * collectives; a node leader killed mid-collective. */
#include "coll/coll.h"
#include "harness.h"
#include "weft.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const int64_t counts[] = {0, 1, 13, 1031};
#define NCOUNTS 4
#define SEED 0x1234567u /* reduction inputs (th_fill_input) */

typedef struct layout {
    int n;
    int nodes[8]; /* node id per rank */
} layout_t;

static const char *cur; /* what is being checked, for messages */

static weft_comm_t start(const layout_t *lay, int rank)
{
    char b[16];
    snprintf(b, sizeof(b), "%d", lay->nodes[rank]);
    setenv("WEFT_NODE_ID", b, 1);
    TH_OK(weft_init(NULL, NULL));
    return weft_comm_world();
}

static weft_comm_t forced(weft_comm_t w, weft_coll_kind_t kind, const char *alg)
{
    return th_forced(w, weft_coll_kind_name(kind), alg);
}

/* ---- reductions ----------------------------------------------------------- */
static void check_reduce_one(weft_comm_t c, weft_coll_kind_t kind, weft_dtype_t d, weft_op_t op, int64_t n, int root,
                             int inplace, int salt)
{
    int me, size;
    TH_OK(weft_comm_rank(c, &me));
    TH_OK(weft_comm_size(c, &size));
    size_t es = weft_dtype_size(d), bytes = (size_t)n * es;
    char *in = calloc((size_t)n + 1, es), *out = calloc((size_t)n + 1, es);
    char *ref = th_reference(d, op, n, SEED, 0, size, salt);
    th_fill_input(in, d, n, SEED, me, salt);
    int is_root = kind == WEFT_COLL_ALLREDUCE || me == root;
    const void *src = in;
    if (inplace && is_root) {
        memcpy(out, in, bytes);
        src = WEFT_IN_PLACE;
    }
    if (kind == WEFT_COLL_ALLREDUCE)
        TH_OK(weft_allreduce(src, out, n, d, op, c));
    else
        TH_OK(weft_reduce(src, out, n, d, op, root, c));
    if (is_root)
        TH_CHECK(!memcmp(out, ref, bytes), "%s: %s %s %s count %lld root %d%s", cur, weft_coll_kind_name(kind),
                 weft_dtype_name(d), weft_op_name(op), (long long)n, root, inplace ? " in place" : "");
    free(in);
    free(out);
    free(ref);
}

static void check_reductions(weft_comm_t c, weft_coll_kind_t kind)
{
    int size, salt = 0;
    TH_OK(weft_comm_size(c, &size));
    for (int d = 0; d < WEFT_DTYPE_COUNT; d++)
        for (int op = WEFT_SUM; op <= WEFT_BXOR; op++) {
            if (weft_op_check((weft_op_t)op, (weft_dtype_t)d, "test")) continue;
            /* Every count for SUM; the prime count (and in place) for the other ops. */
            for (int i = 0; i < NCOUNTS; i++) {
                if (op != WEFT_SUM && counts[i] != 13) continue;
                int root = kind == WEFT_COLL_REDUCE ? (salt % size) : 0;
                check_reduce_one(c, kind, (weft_dtype_t)d, (weft_op_t)op, counts[i], root, 0, ++salt);
                if (counts[i] == 13)
                    check_reduce_one(c, kind, (weft_dtype_t)d, (weft_op_t)op, counts[i], root, 1, ++salt);
            }
        }
}

/* ---- copies ---------------------------------------------------------------- */
static void check_bcast(weft_comm_t c)
{
    int me, size;
    TH_OK(weft_comm_rank(c, &me));
    TH_OK(weft_comm_size(c, &size));
    for (int d = 0; d < WEFT_DTYPE_COUNT; d++)
        for (int i = 0; i < NCOUNTS; i++)
            for (int root = 0; root < size; root++) {
                if (counts[i] != 13 && root != size - 1) continue;
                size_t es = weft_dtype_size((weft_dtype_t)d), bytes = (size_t)counts[i] * es;
                char *buf = calloc(bytes + 1, 1), *ref = calloc(bytes + 1, 1);
                th_fill_input(ref, (weft_dtype_t)d, counts[i], SEED, root, d);
                if (me == root) memcpy(buf, ref, bytes);
                TH_OK(weft_bcast(buf, counts[i], (weft_dtype_t)d, root, c));
                TH_CHECK(!memcmp(buf, ref, bytes), "%s: bcast %s count %lld root %d", cur,
                         weft_dtype_name((weft_dtype_t)d), (long long)counts[i], root);
                free(buf);
                free(ref);
            }
}

/* Allgather, contiguous and list (in place too), against the reference. */
static void check_allgather(weft_comm_t c)
{
    int me, size;
    TH_OK(weft_comm_rank(c, &me));
    TH_OK(weft_comm_size(c, &size));
    for (int d = 0; d < WEFT_DTYPE_COUNT; d++)
        for (int i = 0; i < NCOUNTS; i++)
            for (int form = 0; form < 3; form++) { /* contiguous, list, contiguous in place */
                weft_dtype_t dt = (weft_dtype_t)d;
                size_t es = weft_dtype_size(dt), block = (size_t)counts[i] * es;
                char *in = calloc(block + 1, 1), *out = calloc(block * (size_t)size + 1, 1);
                char *ref = calloc(block * (size_t)size + 1, 1);
                void *list[8];
                for (int r = 0; r < size; r++) {
                    th_fill_input(ref + (size_t)r * block, dt, counts[i], SEED, r, 100 + d);
                    list[size - 1 - r] = out + (size_t)r * block; /* list form: blocks in reverse memory order */
                }
                th_fill_input(in, dt, counts[i], SEED, me, 100 + d);
                if (form == 0) TH_OK(weft_allgather(in, out, counts[i], dt, c));
                if (form == 1) {
                    void *rev[8];
                    for (int r = 0; r < size; r++)
                        rev[r] = list[size - 1 - r];
                    TH_OK(weft_allgather_list(in, rev, counts[i], dt, c));
                }
                if (form == 2) {
                    memcpy(out + (size_t)me * block, in, block);
                    TH_OK(weft_allgather(WEFT_IN_PLACE, out, counts[i], dt, c));
                }
                TH_CHECK(!memcmp(out, ref, block * (size_t)size), "%s: allgather form %d %s count %lld", cur, form,
                         weft_dtype_name(dt), (long long)counts[i]);
                free(in);
                free(out);
                free(ref);
            }
}

static void check_alltoall(weft_comm_t c, int v)
{
    int me, size;
    TH_OK(weft_comm_rank(c, &me));
    TH_OK(weft_comm_size(c, &size));
    static const weft_dtype_t dts[] = {WEFT_INT8, WEFT_BFLOAT16, WEFT_FLOAT16, WEFT_INT32, WEFT_FLOAT32, WEFT_FLOAT64};
    for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
        for (int i = 0; i < NCOUNTS; i++)
            for (int inplace = 0; inplace < (v ? 1 : 2); inplace++) {
                weft_dtype_t dt = dts[d];
                size_t es = weft_dtype_size(dt);
                int64_t n = counts[i], sc[8], sd[8], rc[8], rd[8], stot = 0, rtot = 0;
                /* v: rank r sends (n + r + p) % 4 * n / 2 elements to p (zeros included). */
                for (int p = 0; p < size; p++) {
                    sc[p] = v ? (n + me + p) % 4 * n / 2 : n;
                    rc[p] = v ? (n + p + me) % 4 * n / 2 : n;
                    sd[p] = stot;
                    rd[p] = rtot;
                    stot += sc[p];
                    rtot += rc[p];
                }
                char *in = calloc((size_t)stot * es + 1, 1), *out = calloc((size_t)rtot * es + 1, 1);
                char *ref = calloc((size_t)rtot * es + 1, 1);
                for (int p = 0; p < size; p++) { /* block me->p is filled from (me, p) */
                    th_fill_input(in + (size_t)sd[p] * es, dt, sc[p], SEED, me * 16 + p, 7);
                    th_fill_input(ref + (size_t)rd[p] * es, dt, rc[p], SEED, p * 16 + me, 7);
                }
                if (v)
                    TH_OK(weft_alltoallv(in, sc, sd, out, rc, rd, dt, c));
                else if (inplace) {
                    memcpy(out, in, (size_t)stot * es);
                    TH_OK(weft_alltoall(WEFT_IN_PLACE, out, n, dt, c));
                } else
                    TH_OK(weft_alltoall(in, out, n, dt, c));
                TH_CHECK(!memcmp(out, ref, (size_t)rtot * es), "%s: alltoall%s %s count %lld%s", cur, v ? "v" : "",
                         weft_dtype_name(dt), (long long)n, inplace ? " in place" : "");
                free(in);
                free(out);
                free(ref);
            }
}

/* Allgather hier vs the flat ring, bit for bit, on arbitrary bit patterns. */
static void check_allgather_vs_flat(weft_comm_t w)
{
    int me, size;
    TH_OK(weft_comm_rank(w, &me));
    TH_OK(weft_comm_size(w, &size));
    weft_comm_t h = forced(w, WEFT_COLL_ALLGATHER, "hier"), f = forced(w, WEFT_COLL_ALLGATHER, "ring");
    static const weft_dtype_t dts[] = {WEFT_BFLOAT16, WEFT_FLOAT16, WEFT_FLOAT32, WEFT_INT32};
    for (int d = 0; d < 4; d++)
        for (int list = 0; list < 2; list++) {
            int64_t n = 4099;
            size_t block = (size_t)n * weft_dtype_size(dts[d]);
            char *in = malloc(block), *a = malloc(block * (size_t)size), *b = malloc(block * (size_t)size);
            th_fill(in, block, (unsigned)(me * 31 + d));
            void *la[8];
            for (int r = 0; r < size; r++)
                la[r] = a + (size_t)r * block;
            if (list)
                TH_OK(weft_allgather_list(in, la, n, dts[d], h));
            else
                TH_OK(weft_allgather(in, a, n, dts[d], h));
            TH_OK(weft_allgather(in, b, n, dts[d], f));
            TH_CHECK(!memcmp(a, b, block * (size_t)size), "allgather hier%s differs from ring for %s",
                     list ? " (list)" : "", weft_dtype_name(dts[d]));
            free(in);
            free(a);
            free(b);
        }
    TH_OK(weft_comm_free(&h));
    TH_OK(weft_comm_free(&f));
}

/* Several hier collectives in flight at once on one comm: children on the
 * shared sub-comms must not cross even when ranks progress them unevenly. */
static void check_concurrent(weft_comm_t w)
{
    int me, size;
    TH_OK(weft_comm_rank(w, &me));
    TH_OK(weft_comm_size(w, &size));
    enum { K = 4, N = 301 };
    int32_t in[K][N], out[K][N], bc[N], ag[8 * N];
    weft_request_t req[K + 2];
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++)
            in[k][i] = me * 1000 + k * 10 + i;
        TH_OK(weft_iallreduce(in[k], out[k], N, WEFT_INT32, WEFT_SUM, w, &req[k]));
    }
    for (int i = 0; i < N; i++)
        bc[i] = me == size - 1 ? i * 7 : -1;
    TH_OK(weft_ibcast(bc, N, WEFT_INT32, size - 1, w, &req[K]));
    TH_OK(weft_iallgather(in[0], ag, N, WEFT_INT32, w, &req[K + 1]));
    TH_OK(weft_waitall(K + 2, req, NULL));
    for (int k = 0; k < K; k++)
        for (int i = 0; i < N; i++) {
            int32_t want = 0;
            for (int r = 0; r < size; r++)
                want += r * 1000 + k * 10 + i;
            TH_CHECK(out[k][i] == want, "concurrent allreduce %d [%d]: %d, expected %d", k, i, out[k][i], want);
        }
    for (int i = 0; i < N; i++)
        TH_CHECK(bc[i] == i * 7, "concurrent bcast [%d] = %d", i, bc[i]);
    for (int r = 0; r < size; r++)
        for (int i = 0; i < N; i++)
            TH_CHECK(ag[r * N + i] == r * 1000 + i, "concurrent allgather");
}

/* Which layouts each algorithm takes (white box: build, then discard). */
static void check_declines(weft_comm_t w, const layout_t *lay)
{
    int nnodes = 0, equal = 1, per[8] = {0};
    for (int r = 0; r < lay->n; r++)
        per[lay->nodes[r]]++;
    for (int k = 0; k < 8; k++)
        if (per[k]) {
            nnodes++;
            for (int j = 0; j < 8; j++)
                if (per[j] && per[j] != per[k]) equal = 0;
        }
    int useful = nnodes > 1 && nnodes < lay->n;
    for (int i = 0; weft_coll_algorithms[i]; i++) {
        const weft_coll_alg_t *alg = weft_coll_algorithms[i];
        if (strncmp(alg->name, "hier", 4)) continue;
        int need_equal = alg->kind == WEFT_COLL_ALLGATHER || !strcmp(alg->name, "hier_rail");
        int64_t cnt[8] = {1, 1, 1, 1, 1, 1, 1, 1}, dsp[8] = {0, 1, 2, 3, 4, 5, 6, 7};
        char buf[64] = {0}, out[64];
        weft_coll_args_t a = {.kind = alg->kind,
                              .comm = w,
                              .sendbuf = buf,
                              .recvbuf = out,
                              .count = 1,
                              .dtype = WEFT_INT32,
                              .esize = 4,
                              .op = WEFT_SUM};
        if (alg->kind == WEFT_COLL_ALLTOALLV) {
            a.scounts = a.rcounts = cnt;
            a.sdispls = a.rdispls = dsp;
        }
        weft_sched_t *s = weft_sched_create(w, alg->name);
        int rc = alg->build(s, &a);
        weft_sched_discard(s);
        int want = useful && (equal || !need_equal) ? WEFT_SUCCESS : WEFT_ERR_UNSUPPORTED;
        TH_CHECK(rc == want, "%s %s on %d nodes (%s): build gave %d, expected %d", weft_coll_kind_name(alg->kind),
                 alg->name, nnodes, equal ? "equal" : "uneven", rc, want);
    }
}

static int body_layout(int rank, int size, void *arg)
{
    (void)size;
    const layout_t *lay = arg;
    weft_comm_t w = start(lay, rank);
    check_declines(w, lay);
    static const struct {
        weft_coll_kind_t kind;
        const char *alg;
    } algs[] = {{WEFT_COLL_BARRIER, "hier"},   {WEFT_COLL_BCAST, "hier"},          {WEFT_COLL_REDUCE, "hier"},
                {WEFT_COLL_ALLREDUCE, "hier"}, {WEFT_COLL_ALLREDUCE, "hier_rail"}, {WEFT_COLL_ALLGATHER, "hier"},
                {WEFT_COLL_ALLTOALL, "hier"},  {WEFT_COLL_ALLTOALLV, "hier"}};
    for (size_t i = 0; i < sizeof(algs) / sizeof(algs[0]); i++) {
        weft_comm_t c = forced(w, algs[i].kind, algs[i].alg);
        char what[64];
        snprintf(what, sizeof(what), "%s %s", weft_coll_kind_name(algs[i].kind), algs[i].alg);
        cur = what;
        switch (algs[i].kind) {
        case WEFT_COLL_BARRIER:
            for (int k = 0; k < 3; k++)
                TH_OK(weft_barrier(c));
            break;
        case WEFT_COLL_BCAST: check_bcast(c); break;
        case WEFT_COLL_REDUCE:
        case WEFT_COLL_ALLREDUCE: check_reductions(c, algs[i].kind); break;
        case WEFT_COLL_ALLGATHER: check_allgather(c); break;
        default: check_alltoall(c, algs[i].kind == WEFT_COLL_ALLTOALLV); break;
        }
        TH_OK(weft_comm_free(&c));
    }
    /* The default selection (hier / hier_rail by size on several nodes). */
    cur = "default selection";
    check_reduce_one(w, WEFT_COLL_ALLREDUCE, WEFT_FLOAT32, WEFT_SUM, 40009, 0, 1, 3);
    check_reduce_one(w, WEFT_COLL_ALLREDUCE, WEFT_BFLOAT16, WEFT_AVG, 40009, 0, 0, 4);
    check_allgather_vs_flat(w);
    check_concurrent(w);
    TH_OK(weft_finalize());
    return 0;
}

static const char *const quiet_env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=60", NULL};

static void run_layout(int n, const int *nodes)
{
    layout_t lay = {.n = n};
    memcpy(lay.nodes, nodes, sizeof(int) * (size_t)n);
    th_result_t res = th_run(n, body_layout, &lay, 100, quiet_env);
    cr_assert_eq(res.failed, 0, "layout of %d ranks (nodes %d %d %d %d ...)", n, nodes[0], nodes[1], nodes[2],
                 nodes[3]);
}

Test(hier, layouts_2x2_2x3_3x2, .timeout = 240)
{
    run_layout(4, (int[]){0, 0, 1, 1});       /* 2x2 */
    run_layout(6, (int[]){0, 0, 0, 1, 1, 1}); /* 2x3 */
    run_layout(6, (int[]){0, 1, 2, 0, 1, 2}); /* 3x2, interleaved: node order is not rank order */
}

Test(hier, layouts_4x1_1x4_uneven, .timeout = 240)
{
    run_layout(4, (int[]){0, 1, 2, 3});       /* 4x1: every hier algorithm declines */
    run_layout(4, (int[]){5, 5, 5, 5});       /* 1x4: one node, the node-local path */
    run_layout(4, (int[]){0, 0, 1, 0});       /* 3+1 */
    run_layout(6, (int[]){2, 0, 0, 1, 1, 1}); /* 1+2+3: uneven, root-leaders not rank 0 */
}

/* ---- derived sub-communicators ------------------------------------------ */
static void expect_members(weft_comm_t c, const int *world, int n, int me_world, const char *what)
{
    int rank, size;
    TH_CHECK(c != NULL, "%s: no comm", what);
    TH_OK(weft_comm_rank(c, &rank));
    TH_OK(weft_comm_size(c, &size));
    TH_CHECK(size == n, "%s: size %d, expected %d", what, size, n);
    for (int i = 0; i < n; i++) {
        int wr;
        TH_OK(weft_comm_world_rank(c, i, &wr));
        TH_CHECK(wr == world[i], "%s: member %d is world %d, expected %d", what, i, wr, world[i]);
        if (wr == me_world) TH_CHECK(rank == i, "%s: my rank %d, expected %d", what, rank, i);
    }
}

static int body_derive(int rank, int size, void *arg)
{
    const layout_t *lay = arg;
    weft_comm_t w = start(lay, rank);
    /* Expected groups, in world-rank order. */
    int node[8], leader[8], rail[8], nn = 0, nl = 0, nr = 0, local[8];
    for (int r = 0; r < size; r++) {
        local[r] = 0;
        for (int q = 0; q < r; q++)
            local[r] += lay->nodes[q] == lay->nodes[r];
    }
    for (int r = 0; r < size; r++) {
        if (lay->nodes[r] == lay->nodes[rank]) node[nn++] = r;
        if (local[r] == 0) leader[nl++] = r;
        if (local[r] == local[rank]) rail[nr++] = r;
    }
    weft_comm_t sub[3];
    for (int k = 0; k < 3; k++)
        TH_OK(weft_comm_derived(w, k, &sub[k]));
    expect_members(sub[WEFT_SUB_NODE], node, nn, rank, "node");
    expect_members(sub[WEFT_SUB_RAIL], rail, nr, rank, "rail");
    if (local[rank] == 0)
        expect_members(sub[WEFT_SUB_LEADER], leader, nl, rank, "leader");
    else
        TH_CHECK(sub[WEFT_SUB_LEADER] == NULL, "a non-leader got a leader comm");
    /* Cached: asking again gives the same objects. */
    for (int k = 0; k < 3; k++) {
        weft_comm_t again;
        TH_OK(weft_comm_derived(w, k, &again));
        TH_CHECK(again == sub[k], "derived comm %d rebuilt", k);
    }
    /* Context ids: distinct from the parent's and each other's; a derived comm derives nothing. */
    TH_CHECK(sub[0]->context_id != w->context_id && sub[2]->context_id != w->context_id &&
                 sub[0]->context_id != sub[2]->context_id,
             "context ids %u %u %u", w->context_id, sub[0]->context_id, sub[2]->context_id);
    if (sub[1])
        TH_CHECK(sub[1]->context_id != sub[0]->context_id && sub[1]->context_id != sub[2]->context_id &&
                     sub[1]->context_id != w->context_id,
                 "leader context id %u", sub[1]->context_id);
    weft_comm_t none;
    TH_CHECK(weft_comm_derived(sub[0], WEFT_SUB_NODE, &none) == WEFT_ERR_UNSUPPORTED && !none, "derived of derived");

    /* Isolation: the same (peer, tag) on the parent, the node comm and the
     * rail comm (and the leader comm, same members as rail 0) never match
     * each other; receives are posted in the opposite order of the sends. */
    int nrank, nsize, rrank, rsize;
    TH_OK(weft_comm_rank(sub[0], &nrank));
    TH_OK(weft_comm_size(sub[0], &nsize));
    TH_OK(weft_comm_rank(sub[2], &rrank));
    TH_OK(weft_comm_size(sub[2], &rsize));
    int32_t v[4] = {-1, -1, -1, -1}, s[4] = {rank * 10 + 1, rank * 10 + 2, rank * 10 + 3, rank * 10 + 4};
    weft_request_t rq[8];
    int nq = 0, lr = -1, ls = 0, right_w = (rank + 1) % size, left_w = (rank + size - 1) % size;
    int nright = (nrank + 1) % nsize, nleft = (nrank + nsize - 1) % nsize;
    int rright = (rrank + 1) % rsize, rleft = (rrank + rsize - 1) % rsize;
    if (sub[1]) {
        TH_OK(weft_comm_rank(sub[1], &lr));
        TH_OK(weft_comm_size(sub[1], &ls));
        TH_OK(weft_irecv(&v[3], 1, WEFT_INT32, (lr + ls - 1) % ls, 9, sub[1], &rq[nq++]));
    }
    TH_OK(weft_irecv(&v[2], 1, WEFT_INT32, rleft, 9, sub[2], &rq[nq++]));
    TH_OK(weft_irecv(&v[1], 1, WEFT_INT32, nleft, 9, sub[0], &rq[nq++]));
    TH_OK(weft_irecv(&v[0], 1, WEFT_INT32, left_w, 9, w, &rq[nq++]));
    TH_OK(weft_isend(&s[0], 1, WEFT_INT32, right_w, 9, w, &rq[nq++]));
    TH_OK(weft_isend(&s[1], 1, WEFT_INT32, nright, 9, sub[0], &rq[nq++]));
    TH_OK(weft_isend(&s[2], 1, WEFT_INT32, rright, 9, sub[2], &rq[nq++]));
    if (sub[1]) TH_OK(weft_isend(&s[3], 1, WEFT_INT32, (lr + 1) % ls, 9, sub[1], &rq[nq++]));
    TH_OK(weft_waitall(nq, rq, NULL));
    TH_CHECK(v[0] == left_w * 10 + 1, "parent got %d", v[0]);
    TH_CHECK(v[1] == node[nleft] * 10 + 2, "node comm got %d", v[1]);
    TH_CHECK(v[2] == rail[rleft] * 10 + 3, "rail comm got %d", v[2]);
    if (sub[1]) TH_CHECK(v[3] == leader[(lr + ls - 1) % ls] * 10 + 4, "leader comm got %d", v[3]);

    /* No communication: one rank derives a fresh dup's comms alone, and
     * nothing waits on the others (they are in a barrier meanwhile). */
    weft_comm_t d;
    TH_OK(weft_comm_dup(w, WEFT_OPTIONS_NULL, &d));
    uint32_t dctx = d->context_id;
    if (rank == size - 1)
        for (int k = 0; k < 3; k++) {
            weft_comm_t x;
            TH_OK(weft_comm_derived(d, k, &x));
            TH_CHECK(!x || (x->context_id != dctx && x->context_id != w->context_id &&
                            x->context_id != sub[0]->context_id && x->context_id != sub[2]->context_id),
                     "dup's derived comm shares a context id");
        }
    TH_OK(weft_barrier(w));
    /* Accounting: a freed comm's slot comes back (the next dup gets the
     * same slot, under a new generation). */
    TH_OK(weft_comm_free(&d));
    TH_OK(weft_comm_dup(w, WEFT_OPTIONS_NULL, &d));
    TH_CHECK((d->context_id & WEFT_CTX_SLOT_MASK) == (dctx & WEFT_CTX_SLOT_MASK) && d->context_id != dctx,
             "context id %#x after free, expected slot %#x again in another generation", d->context_id, dctx);
    TH_OK(weft_comm_free(&d));
    /* A split takes a slot the same way: each cycle gets the same one back. */
    uint32_t first = 0;
    for (int i = 0; i < 5; i++) {
        TH_OK(weft_comm_split(w, rank % 2, rank, WEFT_OPTIONS_NULL, &d));
        weft_comm_t x;
        TH_OK(weft_comm_derived(d, WEFT_SUB_RAIL, &x));
        if (i == 0) first = d->context_id;
        TH_CHECK((d->context_id & WEFT_CTX_SLOT_MASK) == (first & WEFT_CTX_SLOT_MASK) &&
                     x->context_id == d->sub_ctx[WEFT_SUB_RAIL] && x->context_id != d->context_id,
                 "split cycle %d: context %#x rail %#x", i, d->context_id, x->context_id);
        TH_OK(weft_comm_free(&d));
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(hier, derived_subcommunicators, .timeout = 120)
{
    static const layout_t lays[] = {
        {4, {0, 0, 1, 1}}, {6, {0, 1, 2, 0, 1, 2}}, {5, {3, 1, 3, 3, 1}}, {3, {0, 0, 0}}, {1, {0}}};
    for (size_t i = 0; i < sizeof(lays) / sizeof(lays[0]); i++) {
        th_result_t res = th_run(lays[i].n, body_derive, (void *)&lays[i], 60, quiet_env);
        cr_assert_eq(res.failed, 0, "layout %zu", i);
    }
}

/* ---- WEFT_COLL_TUNE and weft_info --coll --------------------------------- */
static int body_tune(int rank, int size, void *arg)
{
    (void)rank;
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    static char table[65536];
    TH_OK(weft_coll_table(table, sizeof(table)));
    TH_CHECK(strstr(table, "allreduce:64k-inf:nodes=multi:mem=host:hier_rail") &&
                 strstr(table, "allgather:4k-32k:nodes=multi:mem=host:hier"),
             "the table does not show the hier rules:\n%s", table);
    TH_CHECK(strstr(table, "allreduce:0-inf:nodes=multi:mem=host:hier_rail   (WEFT_COLL_TUNE"),
             "tuned rule missing:\n%s", table);
    float x = 1, y = 0;
    TH_OK(weft_allreduce(&x, &y, 1, WEFT_FLOAT32, WEFT_SUM, weft_comm_world()));
    TH_CHECK(y == (float)size, "sum %g", y);
    TH_OK(weft_finalize());
    return 0;
}

Test(hier, tune_rules_shown, .timeout = 60)
{
    const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_RANKS_PER_NODE=2",
                               "WEFT_COLL_TUNE=allreduce:nodes=multi:hier_rail", NULL};
    th_result_t res = th_run(4, body_tune, NULL, 50, env);
    cr_assert_eq(res.failed, 0);
}

/* ---- a node leader killed mid-collective ------------------------------------ */
#define KILL_TIMEOUT 20.0

typedef struct {
    double killed_at;
    double latency[8];
} kill_shared_t;

static int body_killed(int rank, int size, void *arg)
{
    kill_shared_t *sh = arg;
    (void)size;
    TH_OK(weft_init(NULL, NULL)); /* WEFT_RANKS_PER_NODE=2: nodes {0,1} {2,3}; rank 2 leads node 1 */
    weft_comm_t w = weft_comm_world();
    TH_OK(weft_comm_set_timeout(w, KILL_TIMEOUT));
    enum { N = 1 << 15 }; /* 128 KiB: hier_rail; 64 elements: hier */
    float *buf = calloc(N, sizeof(float));
    TH_OK(weft_allreduce(WEFT_IN_PLACE, buf, 64, WEFT_FLOAT32, WEFT_SUM, w)); /* hier, everyone connected */
    if (rank == 2) {
        usleep(50 * 1000);
        sh->killed_at = weft_wtime();
        kill(getpid(), SIGKILL);
    }
    double t0 = weft_wtime();
    int rc = WEFT_SUCCESS;
    for (int i = 0; i < 200 && rc == WEFT_SUCCESS; i++)
        rc = weft_allreduce(WEFT_IN_PLACE, buf, i % 2 ? 64 : N, WEFT_FLOAT32, WEFT_SUM, w); /* hier and hier_rail */
    double end = weft_wtime();
    TH_CHECK(rc == WEFT_ERR_PEER_LOST || rc == WEFT_ERR_TIMEOUT, "rank %d: rc %d (%s): %s", rank, rc, weft_strerror(rc),
             weft_last_error());
    TH_CHECK(end - t0 < KILL_TIMEOUT + 2, "rank %d: took %.1f s", rank, end - t0);
    sh->latency[rank] = end - sh->killed_at;
    /* No weft_finalize: its flush waits (to WEFT_TIMEOUT) for rendezvous
     * sends to the dead rank that the canceled rail step left behind; the
     * finalize path is not what this test is about. */
    free(buf);
    return 0;
}

Test(hier, node_leader_killed_mid_collective, .timeout = 90)
{
    const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=10", "WEFT_RANKS_PER_NODE=2", NULL};
    kill_shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    th_result_t res = th_run(4, body_killed, sh, 60, env);
    cr_assert_eq(res.timed_out, 0, "survivors hung");
    double worst = 0;
    for (int r = 0; r < 4; r++) {
        if (r == 2) continue;
        cr_expect_eq(res.exit_code[r], 0, "rank %d", r);
        if (sh->latency[r] > worst) worst = sh->latency[r];
    }
    cr_assert_eq(res.exit_code[2], 128 + SIGKILL);
    cr_log_info("node leader killed: slowest survivor returned %.1f ms after the kill", worst * 1e3);
    munmap(sh, sizeof(*sh));
}
