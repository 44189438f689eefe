/* The NCCL API layer (nccl/): programs written to nccl.h, run as forked
 * ranks that meet through a unique id one of them makes (no launcher, no
 * weft_init). Host buffers and the NULL stream, which weft's stream-ordered
 * calls take without a GPU: every collective of NCCL 2.28 on every type and
 * op against references, in and out of place; send / receive in and out of
 * groups; gather and scatter; PreMulSum (host and "device" scalars);
 * split, shrink, a second communicator of some of the ranks, nonblocking
 * communicators, finalize, abort, revoke; the config's fields (weft hints,
 * ignored ones logged); and bad input: ids, configs, ranks, types, ops,
 * buffers, groups, each with its ncclResult_t and a message naming it. */
#include "harness.h"
#include "nccl.h"
#include "nccl_impl.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TIMEOUT 90.0

/* An NCCL call that must return ncclSuccess (or what a nonblocking comm reports). */
#define N_OK(call)                                                                                                     \
    do {                                                                                                               \
        ncclResult_t n_rc_ = (call);                                                                                   \
        TH_CHECK(n_rc_ == ncclSuccess, "%s returned %d (%s): %s", #call, n_rc_, ncclGetErrorString(n_rc_),             \
                 ncclGetLastError(NULL));                                                                              \
    } while (0)
/* ... that must fail with want, its message containing text. */
#define N_FAILS(call, want, text)                                                                                      \
    do {                                                                                                               \
        ncclResult_t n_rc_ = (call);                                                                                   \
        TH_CHECK(n_rc_ == (want), "%s returned %d, expected %d (%s): %s", #call, n_rc_, (int)(want), #want,            \
                 ncclGetLastError(NULL));                                                                              \
        TH_CHECK(strstr(ncclGetLastError(NULL), text), "%s: message lacks '%s': %s", #call, text,                      \
                 ncclGetLastError(NULL));                                                                              \
    } while (0)

static const weft_dtype_t weft_of[ncclNumTypes] = {
    [ncclInt8] = WEFT_INT8,         [ncclUint8] = WEFT_UINT8,      [ncclInt32] = WEFT_INT32,
    [ncclUint32] = WEFT_UINT32,     [ncclInt64] = WEFT_INT64,      [ncclUint64] = WEFT_UINT64,
    [ncclFloat16] = WEFT_FLOAT16,   [ncclFloat32] = WEFT_FLOAT32,  [ncclFloat64] = WEFT_FLOAT64,
    [ncclBfloat16] = WEFT_BFLOAT16, [ncclFloat8e4m3] = WEFT_UINT8, [ncclFloat8e5m2] = WEFT_UINT8};
static const weft_op_t weft_op_of[ncclNumOps] = {WEFT_SUM, WEFT_PROD, WEFT_MAX, WEFT_MIN, WEFT_AVG};

/* Rank `maker` makes a unique id and posts it in slot; the others take it. */
static ncclUniqueId id_from(th_board_t *b, int slot, int rank, int maker)
{
    ncclUniqueId id;
    if (rank == maker) {
        N_OK(ncclGetUniqueId(&id));
        th_board_post(b, slot, &id, sizeof(id));
    } else {
        TH_CHECK(th_board_wait(b, slot, &id, sizeof(id), 30) == 0, "no id in slot %d", slot);
    }
    return id;
}

static void run(int n, th_body_fn body)
{
    th_result_t r = th_run_with_board(n, body, TIMEOUT);
    cr_assert_eq(r.failed, 0, "%d of %d ranks failed%s", r.failed, n, r.timed_out ? " (timed out)" : "");
}

static void expect_bytes(const void *got, const void *want, size_t bytes, const char *what)
{
    if (memcmp(got, want, bytes) == 0) return;
    size_t i = 0;
    while (((const unsigned char *)got)[i] == ((const unsigned char *)want)[i])
        i++;
    TH_CHECK(0, "%s: first difference at byte %zu of %zu", what, i, bytes);
}

/* ---- one process: versions, ids, configs, one-rank communicators, bad input ---------- */

Test(nccl, version_ids_errors_and_one_rank)
{
    int v = 0;
    cr_assert_eq(ncclGetVersion(&v), ncclSuccess);
    cr_assert_eq(v, 22809);
    cr_assert_eq(v, NCCL_VERSION(2, 28, 9));
    cr_assert_eq(ncclGetVersion(NULL), ncclInvalidArgument);
    for (int r = 0; r <= ncclNumResults; r++)
        cr_assert(ncclGetErrorString((ncclResult_t)r)[0]);
    cr_assert_eq(sizeof(ncclUniqueId), 128);
    cr_assert_eq(sizeof(ncclConfig_t), 80);
    cr_assert_eq((int)ncclMaxRedOp, 0x7fffffff);
    cr_assert_eq(pncclGetVersion(&v), ncclSuccess); /* the profiling names exist */

    ncclUniqueId a, b;
    cr_assert_eq(ncclGetUniqueId(&a), ncclSuccess);
    cr_assert_eq(ncclGetUniqueId(&b), ncclSuccess);
    cr_assert(memcmp(&a, &b, sizeof(a)) != 0, "two ids are equal");
    cr_assert(!memcmp(a.internal + 64, "WNCL", 4));
    for (int i = 69; i < 128; i++)
        cr_assert_eq(a.internal[i], 0);
    cr_assert_eq(ncclGetUniqueId(NULL), ncclInvalidArgument);

    ncclComm_t c = NULL;
    ncclUniqueId junk;
    memset(&junk, 7, sizeof(junk));
    cr_assert_eq(ncclCommInitRank(&c, 2, junk, 0), ncclInvalidArgument);
    cr_assert(strstr(ncclGetLastError(NULL), "unique id"), "%s", ncclGetLastError(NULL));
    cr_assert_eq(ncclCommInitRank(&c, 2, a, 2), ncclInvalidArgument);
    cr_assert_eq(ncclCommInitRank(&c, 0, a, 0), ncclInvalidArgument);
    cr_assert_eq(ncclCommInitRank(NULL, 1, a, 0), ncclInvalidArgument);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.magic = 1;
    cr_assert_eq(ncclCommInitRankConfig(&c, 1, a, 0, &cfg), ncclInvalidArgument);
    cr_assert(strstr(ncclGetLastError(NULL), "NCCL_CONFIG_INITIALIZER"), "%s", ncclGetLastError(NULL));
    ncclConfig_t cfg2 = NCCL_CONFIG_INITIALIZER;
    cfg2.blocking = 3;
    cr_assert_eq(ncclCommInitRankConfig(&c, 1, a, 0, &cfg2), ncclInvalidArgument);

    /* A one-rank communicator (this process has no weft yet): copies. */
    cr_assert_eq(ncclCommInitRank(&c, 1, a, 0), ncclSuccess, "%s", ncclGetLastError(NULL));
    int n = -1, r = -1, dev = 5;
    cr_assert_eq(ncclCommCount(c, &n), ncclSuccess);
    cr_assert_eq(ncclCommUserRank(c, &r), ncclSuccess);
    cr_assert(n == 1 && r == 0);
    cr_assert_eq(ncclCommCuDevice(c, &dev), ncclInvalidUsage); /* no CUDA context */
    cr_assert_eq(dev, -1);
    cr_assert_eq(ncclCommCount(c, NULL), ncclInvalidArgument);
    cr_assert_eq(ncclCommCount(NULL, &n), ncclInvalidArgument);
    float x[4] = {1, 2, 3, 4}, y[4] = {0};
    cr_assert_eq(ncclAllReduce(x, y, 4, ncclFloat, ncclSum, c, NULL), ncclSuccess);
    cr_assert(!memcmp(x, y, sizeof(x)));
    float scale = 0.5f, z[4];
    ncclRedOp_t op;
    cr_assert_eq(ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat, ncclScalarHostImmediate, c), ncclSuccess);
    cr_assert_eq(ncclAllReduce(x, z, 4, ncclFloat, op, c, NULL), ncclSuccess, "%s", ncclGetLastError(NULL));
    for (int i = 0; i < 4; i++)
        cr_assert_eq(z[i], x[i] * 0.5f);
    cr_assert_eq(ncclRedOpDestroy(op, c), ncclSuccess);
    cr_assert_eq(ncclRedOpDestroy(op, c), ncclInvalidArgument);
    cr_assert_eq(ncclGroupStart(), ncclSuccess);
    cr_assert_eq(ncclSend(x, 4, ncclFloat, 0, c, NULL), ncclSuccess);
    cr_assert_eq(ncclRecv(z, 4, ncclFloat, 0, c, NULL), ncclSuccess);
    cr_assert_eq(ncclGroupEnd(), ncclSuccess, "%s", ncclGetLastError(NULL));
    cr_assert(!memcmp(x, z, sizeof(x)));
    cr_assert_eq(ncclSend(x, 4, ncclFloat, 0, c, NULL), ncclInvalidUsage); /* no receive: would hang */
    cr_assert(strstr(ncclGetLastError(NULL), "without its receive"), "%s", ncclGetLastError(NULL));
    ncclComm_t s = NULL;
    cr_assert_eq(ncclCommSplit(c, 0, 0, &s, NULL), ncclSuccess);
    cr_assert_not_null(s);
    cr_assert_eq(ncclCommDestroy(s), ncclSuccess);
    cr_assert_eq(ncclCommSplit(c, NCCL_SPLIT_NOCOLOR, 0, &s, NULL), ncclSuccess);
    cr_assert_null(s);
    cr_assert_eq(ncclCommWindowRegister(c, x, sizeof(x), &(ncclWindow_t){0}, 0), ncclInvalidUsage);
    void *h = NULL;
    cr_assert_eq(ncclCommRegister(c, x, sizeof(x), &h), ncclSuccess);
    cr_assert_eq(ncclCommDeregister(c, h), ncclSuccess);
    cr_assert_eq(ncclCommDeregister(c, x), ncclInvalidArgument);
    cr_assert_eq(ncclCommFinalize(c), ncclSuccess);
    cr_assert_eq(ncclAllReduce(x, y, 4, ncclFloat, ncclSum, c, NULL), ncclInvalidUsage);
    cr_assert_eq(ncclCommFinalize(c), ncclInvalidUsage);
    cr_assert_eq(ncclCommDestroy(c), ncclSuccess);
    cr_assert_eq(ncclCommDestroy(NULL), ncclSuccess);

    /* One device in one process works; more do not (one rank per process). */
    ncclComm_t all[2];
    cr_assert_eq(ncclCommInitAll(all, 1, NULL), ncclSuccess, "%s", ncclGetLastError(NULL));
    cr_assert_eq(ncclCommDestroy(all[0]), ncclSuccess);
    cr_assert_eq(ncclCommInitAll(all, 2, NULL), ncclInvalidUsage);
    cr_assert(strstr(ncclGetLastError(NULL), "one rank per process"), "%s", ncclGetLastError(NULL));

    /* Groups, memory and the device API. */
    cr_assert_eq(ncclGroupEnd(), ncclInvalidUsage);
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    cr_assert_eq(ncclGroupStart(), ncclSuccess);
    cr_assert_eq(ncclGroupSimulateEnd(&sim), ncclInvalidUsage);
    cr_assert(strstr(ncclGetLastError(NULL), "cost model"), "%s", ncclGetLastError(NULL));
    cr_assert_eq(ncclGroupEnd(), ncclInvalidUsage); /* the simulated end closed the group */
    void *p = (void *)1;
    cr_assert_eq(ncclMemAlloc(&p, 64), ncclInvalidUsage); /* no CUDA driver in this process */
    cr_assert_null(p);
    cr_assert_eq(ncclMemFree(NULL), ncclSuccess);
    cr_assert_eq(ncclDevCommCreate(NULL, NULL, NULL), ncclInvalidUsage);
    cr_assert(strstr(ncclGetLastError(NULL), "device API"), "%s", ncclGetLastError(NULL));
    cr_assert_eq(ncclDevCommDestroy(NULL, NULL), ncclInvalidUsage);
}

/* The config: fields weft acts on, fields it ignores (each logged with
 * the reason), an older NCCL's shorter layout. */
static void init_with_config(void *arg)
{
    (void)arg;
    ncclUniqueId id;
    ncclComm_t c;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.splitShare = 1;
    cfg.netName = "IB";
    cfg.collnetEnable = 1;
    cfg.trafficClass = 106;
    cfg.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
    cfg.nvlsCTAs = 16;
    cfg.commName = "trainer";
    if (ncclGetUniqueId(&id) || ncclCommInitRankConfig(&c, 1, id, 0, &cfg)) {
        fprintf(stderr, "init failed: %s\n", ncclGetLastError(NULL));
        return;
    }
    ncclCommDestroy(c);
    /* NCCL 2.18's layout ends at splitShare: what follows is not read. */
    ncclConfig_t old = NCCL_CONFIG_INITIALIZER;
    old.size = offsetof(ncclConfig_t, splitShare) + sizeof(int);
    old.commName = "not-read";
    old.nvlsCTAs = 4;
    if (ncclGetUniqueId(&id) || ncclCommInitRankConfig(&c, 1, id, 0, &old)) {
        fprintf(stderr, "old layout: init failed: %s\n", ncclGetLastError(NULL));
        return;
    }
    fprintf(stderr, "old layout ok\n");
    ncclCommDestroy(c);
}

Test(nccl, config_fields_applied_or_logged_as_ignored)
{
    char *log = th_stderr_of(init_with_config, NULL);
    cr_assert(strstr(log, "old layout ok"), "%s", log);
    const char *want[] = {"comm trainer: config.splitShare=1 ignored: ",
                          "config.netName=IB ignored: ",
                          "config.collnetEnable=1 ignored: ",
                          "config.trafficClass=106 ignored: ",
                          "config.CTAPolicy=1 ignored: ",
                          "config.nvlsCTAs=16 ignored: ",
                          "WARN"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_assert(strstr(log, want[i]), "no '%s' in:\n%s", want[i], log);
    cr_assert(!strstr(log, "not-read") && !strstr(log, "nvlsCTAs=4"), "read past the old layout:\n%s", log);
    free(log);
}

/* ---- collectives on 4 ranks ------------------------------------------------------------- */

static ncclComm_t init_all(th_board_t *b, int slot, int rank, int size)
{
    ncclUniqueId id = id_from(b, slot, rank, 0);
    ncclComm_t c = NULL;
    N_OK(ncclCommInitRank(&c, size, id, rank));
    int n, r;
    N_OK(ncclCommCount(c, &n));
    N_OK(ncclCommUserRank(c, &r));
    TH_CHECK(n == size && r == rank, "rank %d of %d", r, n);
    return c;
}

static int body_collectives(int rank, int size, void *arg)
{
    th_board_t *b = arg;
    ncclComm_t c = init_all(b, 0, rank, size);
    const int64_t n = 37;
    /* allreduce, reduce and reduce_scatter: every type and op, small
     * integers (exact in every order), out of place and in place. */
    for (int t = 0; t < ncclNumTypes; t++) {
        if (t == ncclFloat8e4m3 || t == ncclFloat8e5m2) continue;
        weft_dtype_t wt = weft_of[t];
        size_t es = weft_dtype_size(wt);
        for (int o = 0; o < ncclNumOps; o++) {
            int salt = t * 8 + o;
            char *in = malloc(n * size * es), *out = malloc(n * size * es), *ref;
            th_fill_input(in, wt, n, 11, rank, salt);
            ref = th_reference(wt, weft_op_of[o], n, 11, 0, size, salt);
            N_OK(ncclAllReduce(in, out, n, t, o, c, NULL));
            expect_bytes(out, ref, n * es, "allreduce");
            N_OK(ncclAllReduce(in, in, n, t, o, c, NULL));
            expect_bytes(in, ref, n * es, "allreduce in place");
            th_fill_input(in, wt, n, 11, rank, salt);
            memset(out, 0, n * es);
            N_OK(ncclReduce(in, rank == 2 ? out : NULL, n, t, o, 2, c, NULL));
            if (rank == 2) expect_bytes(out, ref, n * es, "reduce");
            N_OK(ncclReduce(in, in, n, t, o, 2, c, NULL));
            if (rank == 2) expect_bytes(in, ref, n * es, "reduce in place");
            free(ref);
            /* reduce_scatter: n elements per rank of an n * size input */
            th_fill_input(in, wt, n * size, 12, rank, salt);
            ref = th_reference(wt, weft_op_of[o], n * size, 12, 0, size, salt);
            N_OK(ncclReduceScatter(in, out, n, t, o, c, NULL));
            expect_bytes(out, ref + rank * n * es, n * es, "reduce_scatter");
            N_OK(ncclReduceScatter(in, in + rank * n * es, n, t, o, c, NULL));
            expect_bytes(in + rank * n * es, ref + rank * n * es, n * es, "reduce_scatter in place");
            free(ref);
            free(in);
            free(out);
        }
    }
    /* fp8 moves as bytes, and has no arithmetic. */
    unsigned char f8[8], all8[8 * 8];
    memset(f8, rank + 1, sizeof(f8));
    N_OK(ncclAllGather(f8, all8, 8, ncclFloat8e4m3, c, NULL));
    for (int r = 0; r < size; r++)
        TH_CHECK(all8[r * 8] == r + 1 && all8[r * 8 + 7] == r + 1, "fp8 allgather block %d", r);
    N_FAILS(ncclAllReduce(f8, f8, 8, ncclFloat8e5m2, ncclSum, c, NULL), ncclInvalidArgument, "no float8e5m2");

    /* data movement: broadcast, bcast, allgather, alltoall, gather, scatter */
    int64_t buf[64], want[64], blk[16];
    for (int i = 0; i < 64; i++)
        buf[i] = rank * 1000 + i;
    int64_t src[16];
    for (int i = 0; i < 16; i++)
        src[i] = 1000 + i;
    memset(blk, 0, sizeof(blk));
    N_OK(ncclBroadcast(rank == 1 ? src : NULL, blk, 16, ncclInt64, 1, c, NULL));
    expect_bytes(blk, src, sizeof(blk), "broadcast");
    for (int i = 0; i < 16; i++)
        blk[i] = rank == 3 ? 3000 + i : -1;
    N_OK(ncclBcast(blk, 16, ncclInt64, 3, c, NULL));
    for (int i = 0; i < 16; i++)
        TH_CHECK(blk[i] == 3000 + i, "bcast[%d] = %lld", i, (long long)blk[i]);
    for (int i = 0; i < 4; i++)
        src[i] = rank * 10 + i;
    N_OK(ncclAllGather(src, buf, 4, ncclInt64, c, NULL));
    for (int r = 0; r < size; r++)
        for (int i = 0; i < 4; i++)
            TH_CHECK(buf[r * 4 + i] == r * 10 + i, "allgather [%d][%d]", r, i);
    for (int i = 0; i < 16; i++)
        buf[i] = i / 4 == rank ? rank * 10 + i % 4 : -1;
    N_OK(ncclAllGather(buf + rank * 4, buf, 4, ncclInt64, c, NULL));
    for (int r = 0; r < size; r++)
        for (int i = 0; i < 4; i++)
            TH_CHECK(buf[r * 4 + i] == r * 10 + i, "allgather in place [%d][%d]", r, i);
    for (int r = 0; r < size; r++)
        for (int i = 0; i < 2; i++)
            buf[r * 2 + i] = rank * 100 + r * 10 + i, want[r * 2 + i] = r * 100 + rank * 10 + i;
    int64_t got[16];
    N_OK(ncclAlltoAll(buf, got, 2, ncclInt64, c, NULL));
    expect_bytes(got, want, size * 2 * sizeof(int64_t), "alltoall");
    N_OK(ncclAlltoAll(buf, buf, 2, ncclInt64, c, NULL));
    expect_bytes(buf, want, size * 2 * sizeof(int64_t), "alltoall in place");
    for (int i = 0; i < 3; i++)
        src[i] = rank * 7 + i;
    memset(got, 0, sizeof(got));
    N_OK(ncclGather(src, rank == 3 ? got : NULL, 3, ncclInt64, 3, c, NULL));
    if (rank == 3)
        for (int r = 0; r < size; r++)
            for (int i = 0; i < 3; i++)
                TH_CHECK(got[r * 3 + i] == r * 7 + i, "gather [%d][%d] = %lld", r, i, (long long)got[r * 3 + i]);
    for (int i = 0; i < 12; i++)
        buf[i] = 500 + i;
    N_OK(ncclScatter(rank == 0 ? buf : NULL, got, 3, ncclInt64, 0, c, NULL));
    for (int i = 0; i < 3; i++)
        TH_CHECK(got[i] == 500 + rank * 3 + i, "scatter [%d] = %lld", i, (long long)got[i]);
    /* in place: the root's block stays where it is */
    for (int i = 0; i < 12; i++)
        buf[i] = 700 + i;
    N_OK(ncclScatter(rank == 0 ? buf : NULL, rank == 0 ? buf : got, 3, ncclInt64, 0, c, NULL));
    for (int i = 0; i < 3; i++)
        TH_CHECK((rank == 0 ? buf : got)[i] == 700 + rank * 3 + i, "scatter in place [%d]", i);
    for (int i = 0; i < 12; i++)
        got[i] = rank == 1 && i / 3 == 1 ? 40 + i : -1;
    src[0] = rank * 3, src[1] = rank * 3 + 1, src[2] = rank * 3 + 2;
    N_OK(ncclGather(rank == 1 ? got + 3 : src, rank == 1 ? got : NULL, 3, ncclInt64, 1, c, NULL));
    if (rank == 1)
        for (int i = 0; i < 12; i++)
            TH_CHECK(got[i] == (i / 3 == 1 ? 40 + i : i), "gather in place [%d] = %lld", i, (long long)got[i]);
    N_OK(ncclCommDestroy(c));
    return 0;
}

Test(nccl, every_collective_type_and_op_on_4_ranks, .timeout = 180)
{
    run(4, body_collectives);
}

/* ---- point to point and groups ------------------------------------------------------------- */

static int body_p2p(int rank, int size, void *arg)
{
    th_board_t *b = arg;
    ncclComm_t c = init_all(b, 0, rank, size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    /* A ring in a group: every rank sends before it receives, and nothing deadlocks. */
    double out[100], in[100];
    for (int i = 0; i < 100; i++)
        out[i] = rank + i * 0.25;
    N_OK(ncclGroupStart());
    N_OK(ncclSend(out, 100, ncclDouble, right, c, NULL));
    N_OK(ncclRecv(in, 100, ncclDouble, left, c, NULL));
    N_OK(ncclGroupEnd());
    for (int i = 0; i < 100; i++)
        TH_CHECK(in[i] == left + i * 0.25, "ring: in[%d] = %g", i, in[i]);
    /* Outside a group: pairs ordered so that each send meets its receive. */
    int pair = rank ^ 1, v = rank * 11, w = -1;
    if (rank % 2 == 0) {
        N_OK(ncclSend(&v, 1, ncclInt32, pair, c, NULL));
        N_OK(ncclRecv(&w, 1, ncclInt32, pair, c, NULL));
    } else {
        N_OK(ncclRecv(&w, 1, ncclInt32, pair, c, NULL));
        N_OK(ncclSend(&v, 1, ncclInt32, pair, c, NULL));
    }
    TH_CHECK(w == pair * 11, "pair: %d", w);
    /* All to all by sends and receives (as PyTorch's all_to_all_single with
     * uneven splits does), several messages per pair in order, with a
     * collective and a self exchange in the same nested group. */
    int64_t s[4][3], r[4][3], self_in = -1, sum = 0, one = 1;
    for (int p = 0; p < size; p++)
        for (int k = 0; k < 3; k++)
            s[p][k] = rank * 100 + p * 10 + k;
    N_OK(ncclGroupStart());
    N_OK(ncclGroupStart());
    for (int p = 0; p < size; p++)
        for (int k = 0; k < 3; k++) {
            N_OK(ncclSend(&s[p][k], 1, ncclInt64, p, c, NULL));
            N_OK(ncclRecv(&r[p][k], 1, ncclInt64, p, c, NULL));
        }
    N_OK(ncclGroupEnd());
    N_OK(ncclAllReduce(&one, &sum, 1, ncclInt64, ncclSum, c, NULL));
    N_OK(ncclSend(&s[0][0], 1, ncclInt64, rank, c, NULL));
    N_OK(ncclRecv(&self_in, 1, ncclInt64, rank, c, NULL));
    N_OK(ncclGroupEnd());
    for (int p = 0; p < size; p++)
        for (int k = 0; k < 3; k++)
            TH_CHECK(r[p][k] == p * 100 + rank * 10 + k, "a2a from %d #%d: %lld", p, k, (long long)r[p][k]);
    TH_CHECK(sum == size && self_in == s[0][0], "sum %lld, self %lld", (long long)sum, (long long)self_in);
    /* A call that fails its checks fails the whole group on every rank:
     * nothing of it is issued. */
    N_OK(ncclGroupStart());
    N_OK(ncclAllReduce(&one, &sum, 1, ncclInt64, ncclSum, c, NULL));
    N_FAILS(ncclSend(&one, 1, ncclInt64, size + 2, c, NULL), ncclInvalidArgument, "peer");
    N_FAILS(ncclGroupEnd(), ncclInvalidArgument, "peer");
    /* ... and the communicator still works. */
    N_OK(ncclAllReduce(&one, &sum, 1, ncclInt64, ncclSum, c, NULL));
    TH_CHECK(sum == size, "after the failed group: %lld", (long long)sum);
    N_OK(ncclCommDestroy(c));
    return 0;
}

Test(nccl, send_recv_and_groups_on_4_ranks, .timeout = 120)
{
    run(4, body_p2p);
}

/* ---- PreMulSum ----------------------------------------------------------------------------- */

static int body_premul(int rank, int size, void *arg)
{
    th_board_t *b = arg;
    ncclComm_t c = init_all(b, 0, rank, size);
    /* Each rank's own scalar: the result is sum over r of (r + 1) * x_r. */
    double x[5], y[5], k = rank + 1, dev_k = 2.0;
    for (int i = 0; i < 5; i++)
        x[i] = rank * 10 + i;
    ncclRedOp_t op, op_dev;
    N_OK(ncclRedOpCreatePreMulSum(&op, &k, ncclDouble, ncclScalarHostImmediate, c));
    k = 99; /* read at creation: a later change does not count */
    N_OK(ncclAllReduce(x, y, 5, ncclDouble, op, c, NULL));
    for (int i = 0; i < 5; i++) {
        double want = 0;
        for (int r = 0; r < size; r++)
            want += (r + 1) * (r * 10.0 + i);
        TH_CHECK(y[i] == want, "premul allreduce [%d] = %g, want %g", i, y[i], want);
    }
    /* A "device" scalar is read when the collective runs (here host memory:
     * without CUDA, weft's NCCL reads it with memcpy). */
    N_OK(ncclRedOpCreatePreMulSum(&op_dev, &dev_k, ncclDouble, ncclScalarDevice, c));
    dev_k = 3.0;
    float fx[8], fy[2];
    for (int i = 0; i < 8; i++)
        fx[i] = (float)(rank + i);
    N_FAILS(ncclReduceScatter(fx, fy, 2, ncclFloat, op_dev, c, NULL), ncclInvalidArgument, "made for float64");
    double dx[8], dy[2];
    for (int i = 0; i < 8; i++)
        dx[i] = rank + i;
    N_OK(ncclReduceScatter(dx, dy, 2, ncclDouble, op_dev, c, NULL));
    for (int i = 0; i < 2; i++) {
        double want = 0;
        for (int r = 0; r < size; r++)
            want += 3.0 * (r + rank * 2 + i);
        TH_CHECK(dy[i] == want, "premul reduce_scatter [%d] = %g, want %g", i, dy[i], want);
    }
    /* half precision: pre-multiplied, rounded, summed */
    uint16_t h = 0x3800; /* 0.5 */
    ncclRedOp_t op_h;
    N_OK(ncclRedOpCreatePreMulSum(&op_h, &h, ncclHalf, ncclScalarHostImmediate, c));
    uint16_t hx[2] = {0x4000, 0x4400} /* 2, 4 */, hy[2] = {0};
    N_OK(ncclReduce(hx, hy, 2, ncclHalf, op_h, 0, c, NULL));
    if (rank == 0) TH_CHECK(hy[0] == 0x4400 && hy[1] == 0x4800, "half premul: %04x %04x", hy[0], hy[1]); /* 4, 8 */
    N_OK(ncclRedOpDestroy(op, c));
    N_OK(ncclRedOpDestroy(op_dev, c));
    N_OK(ncclRedOpDestroy(op_h, c));
    N_FAILS(ncclAllReduce(x, y, 5, ncclDouble, op, c, NULL), ncclInvalidArgument, "live PreMulSum");
    N_FAILS(ncclRedOpDestroy(ncclSum, c), ncclInvalidArgument, "not a live PreMulSum");
    /* A refused create leaves an operator collectives refuse too (not a sum). */
    ncclRedOp_t bad = ncclSum;
    N_FAILS(ncclRedOpCreatePreMulSum(&bad, &k, ncclFloat8e4m3, ncclScalarHostImmediate, c), ncclInvalidArgument,
            "float8e4m3");
    N_FAILS(ncclAllReduce(x, y, 5, ncclDouble, bad, c, NULL), ncclInvalidUsage, "refused");
    N_OK(ncclRedOpDestroy(bad, c));
    N_OK(ncclCommDestroy(c));
    return 0;
}

Test(nccl, premulsum_on_4_ranks, .timeout = 120)
{
    run(4, body_premul);
}

/* ---- communicators: split, shrink, a second id, nonblocking, ending ------------------------- */

static int body_comms(int rank, int size, void *arg)
{
    th_board_t *b = arg;
    ncclComm_t c = init_all(b, 0, rank, size);
    int n, r;
    /* split: odd and even ranks, in reverse order; rank 4 in none */
    ncclComm_t s = NULL;
    N_OK(ncclCommSplit(c, rank == 4 ? NCCL_SPLIT_NOCOLOR : rank % 2, -rank, &s, NULL));
    if (rank == 4) {
        TH_CHECK(s == NULL, "no color, yet a communicator");
    } else {
        N_OK(ncclCommCount(s, &n));
        N_OK(ncclCommUserRank(s, &r));
        int members = rank % 2 ? 2 : 2; /* of 0..3: {0, 2} and {1, 3} */
        TH_CHECK(n == members && r == (rank < 2 ? 1 : 0), "split: rank %d of %d", r, n);
        int sum = 0;
        N_OK(ncclAllReduce(&rank, &sum, 1, ncclInt32, ncclSum, s, NULL));
        TH_CHECK(sum == (rank % 2 ? 4 : 2), "split sum %d", sum);
        N_OK(ncclCommDestroy(s));
    }
    N_FAILS(ncclCommSplit(c, -5, 0, &s, NULL), ncclInvalidArgument, "negative");
    /* A second unique id among ranks 1 and 3 (3 makes it): a group of the
     * world weft formed from the first; ranks 0, 2, 4 go on meanwhile. */
    if (rank == 1 || rank == 3) {
        ncclUniqueId id = id_from(b, 1, rank == 3 ? 0 : 1, 0);
        ncclComm_t g;
        N_OK(ncclCommInitRank(&g, 2, id, rank == 3 ? 0 : 1));
        int v = rank, got = -1;
        N_OK(ncclGroupStart());
        N_OK(ncclSend(&v, 1, ncclInt32, rank == 3 ? 1 : 0, g, NULL));
        N_OK(ncclRecv(&got, 1, ncclInt32, rank == 3 ? 1 : 0, g, NULL));
        N_OK(ncclGroupEnd());
        TH_CHECK(got == (rank == 3 ? 1 : 3), "second comm: %d", got);
        N_OK(ncclCommDestroy(g));
    }
    /* A nonblocking communicator: creation reports ncclInProgress, the
     * first poll says done; its config's CTA bounds are weft hints. */
    ncclUniqueId id2 = id_from(b, 2, rank, 0);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cfg.maxCTAs = 4;
    cfg.commName = "nb";
    ncclComm_t nb = NULL;
    ncclResult_t st = ncclCommInitRankConfig(&nb, size, id2, rank, &cfg);
    TH_CHECK(st == ncclInProgress && nb, "nonblocking init: %d (%s)", st, ncclGetLastError(NULL));
    ncclResult_t async = ncclInProgress;
    N_OK(ncclCommGetAsyncError(nb, &async));
    TH_CHECK(async == ncclSuccess, "async %d", async);
    TH_CHECK(!strcmp(weft_comm_name(nb->wc), "nb"), "weft name %s", weft_comm_name(nb->wc));
    int hs = -1;
    char why[256];
    TH_OK(weft_comm_hint_status(nb->wc, "max_ctas", &hs, why, sizeof(why)));
    TH_CHECK(hs != WEFT_HINT_NOT_SET, "max_ctas not passed to weft (%s)", why);
    double one = 1, tot = 0;
    N_OK(ncclAllReduce(&one, &tot, 1, ncclDouble, ncclSum, nb, NULL));
    TH_CHECK(tot == size, "nonblocking allreduce %g", tot);
    /* a split of it inherits its config (nonblocking too) */
    ncclComm_t nbs = NULL;
    TH_CHECK(ncclCommSplit(nb, 0, rank, &nbs, NULL) == ncclInProgress && nbs, "split of nonblocking: %s",
             ncclGetLastError(NULL));
    TH_CHECK(ncclCommFinalize(nbs) == ncclInProgress, "finalize nonblocking");
    N_OK(ncclCommGetAsyncError(nbs, &async));
    TH_CHECK(async == ncclSuccess, "after finalize: %d", async);
    N_OK(ncclCommDestroy(nbs));
    N_OK(ncclCommDestroy(nb));
    /* shrink: rank 2 is left out and does not call */
    if (rank != 2) {
        int ex[] = {2};
        ncclComm_t sh = NULL;
        N_OK(ncclCommShrink(c, ex, 1, &sh, NULL, NCCL_SHRINK_DEFAULT));
        N_OK(ncclCommCount(sh, &n));
        N_OK(ncclCommUserRank(sh, &r));
        TH_CHECK(n == size - 1 && r == (rank < 2 ? rank : rank - 1), "shrink: rank %d of %d", r, n);
        int sum = 0;
        N_OK(ncclAllReduce(&rank, &sum, 1, ncclInt32, ncclSum, sh, NULL));
        TH_CHECK(sum == 0 + 1 + 3 + 4, "shrink sum %d", sum);
        N_OK(ncclCommDestroy(sh));
        int self[] = {rank};
        N_FAILS(ncclCommShrink(c, self, 1, &sh, NULL, 0), ncclInvalidArgument, "excludes itself");
        N_FAILS(ncclCommShrink(c, ex, 1, &sh, NULL, 4), ncclInvalidArgument, "flags");
    }
    /* revoke, abort, finalize: later calls fail, naming why */
    ncclComm_t d = NULL;
    N_OK(ncclCommSplit(c, 0, rank, &d, NULL));
    N_OK(ncclCommRevoke(d, NCCL_REVOKE_DEFAULT));
    N_FAILS(ncclAllReduce(&one, &tot, 1, ncclDouble, ncclSum, d, NULL), ncclInvalidUsage, "revoked");
    N_OK(ncclCommDestroy(d));
    N_OK(ncclCommSplit(c, 0, rank, &d, NULL));
    N_OK(ncclCommAbort(d));
    N_OK(ncclCommFinalize(c));
    N_FAILS(ncclAllReduce(&one, &tot, 1, ncclDouble, ncclSum, c, NULL), ncclInvalidUsage, "finalized");
    N_OK(ncclCommDestroy(c));
    return 0;
}

Test(nccl, split_shrink_second_id_nonblocking_and_ending_on_5_ranks, .timeout = 120)
{
    run(5, body_comms);
}

/* ---- weft's world and its limits ------------------------------------------------------------- */

/* The first communicator of more than one rank forms weft's world: a later
 * one with a process outside it fails on every member, saying so. */
static int body_world(int rank, int size, void *arg)
{
    th_board_t *b = arg;
    (void)size;
    ncclComm_t c = NULL, d = NULL;
    if (rank < 2) {
        ncclUniqueId id = id_from(b, 0, rank, 0);
        N_OK(ncclCommInitRank(&c, 2, id, rank));
    }
    ncclUniqueId id = id_from(b, 1, rank, 0);
    N_FAILS(ncclCommInitRank(&d, 3, id, rank), ncclInvalidArgument, "not in one weft world");
    TH_CHECK(d == NULL, "a communicator after a failed init");
    if (c) N_OK(ncclCommDestroy(c));
    return 0;
}

Test(nccl, a_process_outside_the_first_communicators_world_fails_everywhere, .timeout = 60)
{
    run(3, body_world);
}

/* After weft_init (here the env bootstrap), communicators are groups of
 * weft's world; the id's maker must be rank 0. */
static int body_after_weft_init(int rank, int size, void *arg)
{
    th_board_t *b = arg;
    TH_OK(weft_init(NULL, NULL));
    ncclUniqueId id = id_from(b, 0, rank, size - 1);
    int me = (rank + 1) % size; /* the maker (last rank) is rank 0 of the communicator */
    ncclComm_t c = NULL;
    N_OK(ncclCommInitRank(&c, size, id, me));
    int wr = -1;
    TH_OK(weft_comm_world_rank(c->wc, 0, &wr));
    TH_CHECK(wr == size - 1, "rank 0 is world rank %d", wr);
    int64_t v = me, sum = 0;
    N_OK(ncclAllReduce(&v, &sum, 1, ncclInt64, ncclSum, c, NULL));
    TH_CHECK(sum == size * (size - 1) / 2, "sum %lld", (long long)sum);
    N_OK(ncclCommDestroy(c));
    /* the maker as another rank: refused at once */
    if (rank == 0) {
        ncclUniqueId mine;
        N_OK(ncclGetUniqueId(&mine));
        N_FAILS(ncclCommInitRank(&c, 2, mine, 1), ncclInvalidArgument, "must join as rank 0");
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(nccl, after_weft_init_communicators_are_groups_of_its_world, .timeout = 60)
{
    run(3, body_after_weft_init);
}
