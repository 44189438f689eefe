/* Collectives beyond correctness of one call: many nonblocking ones in
 * flight on one and several communicators mixed with user traffic on the
 * same tags, selection through WEFT_COLL_TUNE, reproducibility, float16 /
 * bfloat16 accuracy on real-valued data, bad arguments, and a rank killed
 * mid-allreduce. */
#include "coll/coll.h"
#include "harness.h"
#include "weft.h"

#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *const quiet_env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=60", NULL};

static weft_comm_t start(int *rank, int *size)
{
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    TH_OK(weft_comm_rank(w, rank));
    TH_OK(weft_comm_size(w, size));
    return w;
}

/* ---- many collectives in flight, two communicators, user traffic ------- */
#define K 8
static int body_inflight(int rank, int size, void *arg)
{
    int me, n;
    weft_comm_t w = start(&me, &n), c;
    if (arg) TH_CHECK(weft_progress_thread_running(), "rank %d: WEFT_PROGRESS_THREAD started no thread", rank);
    TH_OK(weft_comm_dup(w, WEFT_OPTIONS_NULL, &c));
    int64_t ar_in[K], ar_out[K], ag_out[K][16], bc[K];
    float big_in[4096], big_out[4096];
    weft_request_t reqs[4 * K + 8];
    int q = 0;
    int right = (rank + 1) % size, left = (rank + size - 1) % size, uin[2] = {-1, -1}, uout[2] = {rank, -rank};
    /* User messages on tags 0 and 1, the collectives' first sequence numbers. */
    TH_OK(weft_irecv(&uin[0], 1, WEFT_INT32, left, 0, w, &reqs[q++]));
    TH_OK(weft_irecv(&uin[1], 1, WEFT_INT32, left, 1, c, &reqs[q++]));
    for (int i = 0; i < 4096; i++)
        big_in[i] = (float)((rank + i) % 7);
    for (int i = 0; i < K; i++) {
        ar_in[i] = rank * 10 + i;
        bc[i] = rank == i % size ? 1000 + i : -1;
        weft_comm_t on = i % 2 ? c : w;
        TH_OK(weft_iallreduce(&ar_in[i], &ar_out[i], 1, WEFT_INT64, WEFT_SUM, on, &reqs[q++]));
        TH_OK(weft_iallgather(&ar_in[i], ag_out[i], 1, WEFT_INT64, on, &reqs[q++]));
        TH_OK(weft_ibcast(&bc[i], 1, WEFT_INT64, i % size, on, &reqs[q++]));
        if (i == K / 2) {
            TH_OK(weft_isend(&uout[0], 1, WEFT_INT32, right, 0, w, &reqs[q++]));
            TH_OK(weft_isend(&uout[1], 1, WEFT_INT32, right, 1, c, &reqs[q++]));
            TH_OK(weft_iallreduce(big_in, big_out, 4096, WEFT_FLOAT32, WEFT_MAX, c, &reqs[q++]));
        }
    }
    TH_OK(weft_ibarrier(w, &reqs[q++]));
    /* Wait in reverse order of posting. */
    for (int i = q - 1; i >= 0; i--)
        TH_OK(weft_wait(&reqs[i], NULL));
    int64_t sum_ranks = (int64_t)size * (size - 1) / 2;
    for (int i = 0; i < K; i++) {
        TH_CHECK(ar_out[i] == 10 * sum_ranks + (int64_t)size * i, "allreduce %d: %lld", i, (long long)ar_out[i]);
        for (int r = 0; r < size; r++)
            TH_CHECK(ag_out[i][r] == r * 10 + i, "allgather %d block %d", i, r);
        TH_CHECK(bc[i] == 1000 + i, "bcast %d: %lld", i, (long long)bc[i]);
    }
    for (int i = 0; i < 4096; i++) {
        float want = 0;
        for (int r = 0; r < size; r++)
            want = fmaxf(want, (float)((r + i) % 7));
        TH_CHECK(big_out[i] == want, "max at %d", i);
    }
    TH_CHECK(uin[0] == left && uin[1] == -left, "user traffic mixed up: %d %d", uin[0], uin[1]);
    /* weft_test drives a collective to completion too. */
    weft_request_t r;
    int flag = 0;
    TH_OK(weft_iallreduce(WEFT_IN_PLACE, ar_in, K, WEFT_INT64, WEFT_MAX, w, &r));
    while (!flag)
        TH_OK(weft_test(&r, &flag, NULL));
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_finalize());
    return 0;
}

Test(coll_async, many_in_flight_with_user_traffic, .timeout = 120)
{
    for (int n = 2; n <= 6; n += 2) {
        th_result_t res = th_run(n, body_inflight, NULL, 100, quiet_env);
        cr_assert_eq(res.failed, 0, "%d ranks", n);
    }
}

/* ---- WEFT_COLL_TUNE picks the algorithm -------------------------------- */
static int body_tune(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    const weft_coll_alg_t *c[32];
    weft_coll_args_t a = {.kind = WEFT_COLL_ALLREDUCE, .comm = w, .bytes = 100};
    TH_CHECK(weft_coll_select(&a, c, 32) >= 2 && !strcmp(c[0]->name, "ring"), "small allreduce: %s", c[0]->name);
    a.bytes = 1 << 20;
    TH_CHECK(weft_coll_select(&a, c, 32) >= 2 && !strcmp(c[0]->name, "recursive_doubling"), "large: %s", c[0]->name);
    a.kind = WEFT_COLL_ALLGATHER;
    a.bytes = 10;
    TH_CHECK(weft_coll_select(&a, c, 32) >= 2 && !strcmp(c[0]->name, "ring"), "allgather np rule: %s", c[0]->name);
    /* Device buffers on one node: coll/cuda's algorithms first (10 bytes: its LL form), whatever the host rules
     * say. */
    a.mem = WEFT_MEM_CUDA;
    int nc = weft_coll_select(&a, c, 32);
    TH_CHECK(nc >= 1 && !strcmp(c[0]->name, "cuda_ll"), "a cuda allgather got %d candidates, first %s", nc,
             nc ? c[0]->name : "-");
    int64_t x = 1, y = 0;
    TH_OK(weft_allreduce(&x, &y, 1, WEFT_INT64, WEFT_SUM, w));
    TH_CHECK(y == n, "sum %lld", (long long)y);
    TH_OK(weft_finalize());
    return 0;
}

Test(coll_async, tune_variable_overrides_defaults, .timeout = 60)
{
    const char *env[] = {"WEFT_COLL_TUNE=allreduce:0-4k:ring;allreduce:4k-inf:recursive_doubling,"
                         "allgather:np=2-8:ring",
                         NULL};
    th_result_t res = th_run(3, body_tune, NULL, 50, env);
    cr_assert_eq(res.failed, 0);
}

/* A rule naming a memory type its algorithm's component does not take, or
 * an unknown one, fails init with WEFT_ERR_ARG and a message naming it. */
static int body_tune_bad(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    int rc = weft_init(NULL, NULL);
    TH_CHECK(rc == WEFT_ERR_ARG, "init returned %d (%s)", rc, weft_last_error());
    TH_CHECK(strstr(weft_last_error(), (const char *)arg), "message '%s' does not say '%s'", weft_last_error(),
             (const char *)arg);
    return 0;
}

Test(coll_async, tune_memory_type_checked, .timeout = 60)
{
    const char *cuda[] = {"WEFT_LOG_LEVEL=error", "WEFT_COLL_TUNE=allreduce:mem=cuda:ring", NULL};
    const char *bogus[] = {"WEFT_LOG_LEVEL=error", "WEFT_COLL_TUNE=allreduce:mem=gpu:ring", NULL};
    th_result_t res = th_run(2, body_tune_bad, (void *)"does not take cuda buffers", 30, cuda);
    cr_assert_eq(res.failed, 0);
    res = th_run(2, body_tune_bad, (void *)"'mem=gpu' is not mem=host or mem=cuda", 30, bogus);
    cr_assert_eq(res.failed, 0);
}

/* ---- reproducible, identical on every rank; fp16/bf16 accuracy ---------- */
static double real_value(int rank, int i)
{
    unsigned x = (unsigned)(rank * 2654435761u) ^ (unsigned)(i * 40503u);
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return ((double)(x % 20001) - 10000.0) / 997.0; /* about -10..10, not exact in 16 bits */
}

static int body_accuracy(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    enum { N = 3001 };
    /* Every allreduce algorithm in the registry. */
    const char *algs[16];
    int nalgs = 0;
    for (int i = 0; weft_coll_algorithms[i] && nalgs < 16; i++)
        if (weft_coll_algorithms[i]->kind == WEFT_COLL_ALLREDUCE) algs[nalgs++] = weft_coll_algorithms[i]->name;
    for (int ai = 0; ai < nalgs; ai++) {
        weft_comm_t c = th_forced(w, "allreduce", algs[ai]);
        static const weft_dtype_t dts[] = {WEFT_FLOAT16, WEFT_BFLOAT16, WEFT_FLOAT32, WEFT_FLOAT64};
        for (int di = 0; di < 4; di++) {
            weft_dtype_t d = dts[di];
            size_t es = weft_dtype_size(d);
            char *in = malloc(N * es), *out1 = malloc(N * es), *out2 = malloc(N * es), *all = malloc(N * es * 16);
            for (int i = 0; i < N; i++) {
                double v = real_value(rank, i);
                if (d == WEFT_FLOAT16)
                    ((uint16_t *)in)[i] = weft_float_to_fp16((float)v);
                else if (d == WEFT_BFLOAT16)
                    ((uint16_t *)in)[i] = weft_float_to_bf16((float)v);
                else if (d == WEFT_FLOAT32)
                    ((float *)in)[i] = (float)v;
                else
                    ((double *)in)[i] = v;
            }
            TH_OK(weft_allreduce(in, out1, N, d, WEFT_SUM, c));
            TH_OK(weft_allreduce(in, out2, N, d, WEFT_SUM, c));
            TH_CHECK(!memcmp(out1, out2, N * es), "%s %s: not reproducible run to run", algs[ai], weft_dtype_name(d));
            /* Every rank holds the same bits. */
            TH_OK(weft_allgather(out1, all, (int64_t)(N * es), WEFT_BYTE, c));
            for (int r = 0; r < size; r++)
                TH_CHECK(!memcmp(all + (size_t)r * N * es, out1, N * es), "%s %s: rank %d differs", algs[ai],
                         weft_dtype_name(d), r);
            /* Against a float64 sum of the values as stored: each of the
             * n - 1 additions rounds with relative error <= u (2^-11 for
             * float16, 2^-8 for bfloat16), so |error| <= (n-1) u sum|x_i|
             * (+ u |result| for the final rounding), with a margin of 2. */
            double u = d == WEFT_FLOAT16    ? 0x1p-11
                       : d == WEFT_BFLOAT16 ? 0x1p-8
                       : d == WEFT_FLOAT32  ? 0x1p-24
                                            : 0x1p-53;
            for (int i = 0; i < N; i++) {
                double exact = 0, mag = 0, got;
                for (int r = 0; r < size; r++) {
                    double x = real_value(r, i), stored;
                    if (d == WEFT_FLOAT16)
                        stored = weft_fp16_to_float(weft_float_to_fp16((float)x));
                    else if (d == WEFT_BFLOAT16)
                        stored = weft_bf16_to_float(weft_float_to_bf16((float)x));
                    else if (d == WEFT_FLOAT32)
                        stored = (float)x;
                    else
                        stored = x;
                    exact += stored;
                    mag += fabs(stored);
                }
                if (d == WEFT_FLOAT16)
                    got = weft_fp16_to_float(((uint16_t *)out1)[i]);
                else if (d == WEFT_BFLOAT16)
                    got = weft_bf16_to_float(((uint16_t *)out1)[i]);
                else if (d == WEFT_FLOAT32)
                    got = ((float *)out1)[i];
                else
                    got = ((double *)out1)[i];
                double bound = 2 * ((size - 1) * u * mag + u * fabs(exact)) + 1e-300;
                TH_CHECK(fabs(got - exact) <= bound, "%s %s element %d: %.9g vs %.9g (bound %.3g)", algs[ai],
                         weft_dtype_name(d), i, got, exact, bound);
            }
            free(in);
            free(out1);
            free(out2);
            free(all);
        }
        TH_OK(weft_comm_free(&c));
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(coll_async, reproducible_and_accurate_half_precision, .timeout = 120)
{
    for (int n = 3; n <= 8; n += 5) {
        th_result_t res = th_run(n, body_accuracy, NULL, 100, quiet_env);
        cr_assert_eq(res.failed, 0, "%d ranks", n);
    }
}

/* ---- bad arguments -------------------------------------------------------- */
static int body_bad(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    float f[4] = {0}, g[64] = {0};
    int64_t counts[8] = {1, 1, 1, 1, 1, 1, 1, 1}, neg[8] = {1, -1, 1, 1, 1, 1, 1, 1},
            displs[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    weft_request_t r;
    TH_CHECK(weft_bcast(f, 1, WEFT_FLOAT32, size, w) == WEFT_ERR_ARG, "root out of range");
    TH_CHECK(strstr(weft_last_error(), "root"), "%s", weft_last_error());
    TH_CHECK(weft_reduce(f, g, 1, WEFT_FLOAT32, WEFT_SUM, -1, w) == WEFT_ERR_ARG, "negative root");
    TH_CHECK(weft_allreduce(f, g, -1, WEFT_FLOAT32, WEFT_SUM, w) == WEFT_ERR_ARG, "negative count");
    TH_CHECK(weft_allreduce(NULL, g, 4, WEFT_FLOAT32, WEFT_SUM, w) == WEFT_ERR_ARG, "NULL send");
    TH_CHECK(weft_allreduce(f, NULL, 4, WEFT_FLOAT32, WEFT_SUM, w) == WEFT_ERR_ARG, "NULL recv");
    TH_CHECK(weft_allreduce(f, g, 4, WEFT_FLOAT32, WEFT_BXOR, w) == WEFT_ERR_ARG, "bxor on float32");
    TH_CHECK(strstr(weft_last_error(), "bxor") && strstr(weft_last_error(), "float32"), "%s", weft_last_error());
    TH_CHECK(weft_allreduce(f, g, 4, WEFT_BYTE, WEFT_SUM, w) == WEFT_ERR_ARG, "sum on byte");
    TH_CHECK(weft_allreduce(f, g, 4, WEFT_FLOAT32, (weft_op_t)42, w) == WEFT_ERR_ARG, "unknown op");
    TH_CHECK(weft_allreduce(f, g, 4, (weft_dtype_t)42, WEFT_SUM, w) == WEFT_ERR_ARG, "unknown dtype");
    TH_CHECK(weft_allgatherv(f, 1, g, neg, displs, WEFT_FLOAT32, w) == WEFT_ERR_ARG, "negative recvcount");
    TH_CHECK(weft_allgatherv(f, 2, g, counts, displs, WEFT_FLOAT32, w) == WEFT_ERR_ARG, "sendcount != recvcounts[me]");
    TH_CHECK(strstr(weft_last_error(), "recvcounts"), "%s", weft_last_error());
    TH_CHECK(weft_allgatherv(f, 1, g, NULL, displs, WEFT_FLOAT32, w) == WEFT_ERR_ARG, "NULL counts");
    TH_CHECK(weft_alltoallv(f, counts, displs, g, counts, NULL, WEFT_FLOAT32, w) == WEFT_ERR_ARG, "NULL displs");
    TH_CHECK(weft_iallreduce(f, g, 4, WEFT_FLOAT32, WEFT_SUM, w, NULL) == WEFT_ERR_ARG, "NULL request");
    TH_CHECK(weft_barrier(WEFT_COMM_NULL) == WEFT_ERR_COMM, "null comm");
    TH_CHECK(weft_allgather(WEFT_IN_PLACE, NULL, 1, WEFT_FLOAT32, w) == WEFT_ERR_ARG, "in place without a buffer");
    TH_CHECK(weft_scatter(f, WEFT_IN_PLACE, 1, WEFT_FLOAT32, (rank + 1) % size, w) == WEFT_ERR_ARG || size == 1,
             "in place off the root");
    /* None of that disturbed the communicator: a real collective works. */
    TH_OK(weft_iallreduce(WEFT_IN_PLACE, f, 4, WEFT_FLOAT32, WEFT_SUM, w, &r));
    TH_OK(weft_wait(&r, NULL));
    TH_OK(weft_finalize());
    TH_CHECK(weft_barrier(w) == WEFT_ERR_NOT_INITIALIZED, "after finalize");
    return 0;
}

Test(coll_async, bad_arguments, .timeout = 60)
{
    th_result_t res = th_run(3, body_bad, NULL, 50, quiet_env);
    cr_assert_eq(res.failed, 0);
}

/* ---- counts, displacements and their products that overflow ---------------- */
/* Every rank passes the same bad arguments, so each fails alone at the
 * call (no collective starts) with WEFT_ERR_ARG naming the argument.
 * Before the front end checked them: count 2^62 (x 4 bytes wraps to 0)
 * crashed in the shared-memory allreduce's reduction, INT64_MAX in
 * shm_cma, and a displacement of INT64_MAX / 2 wrapped and wrote outside
 * the receive buffer. */
#define EXPECT_ARG(call, word)                                                                                         \
    do {                                                                                                               \
        int rc_ = (call);                                                                                              \
        TH_CHECK(rc_ == WEFT_ERR_ARG && strstr(weft_last_error(), word), "%s: %d (%s), expected an error naming %s",   \
                 #call, rc_, weft_last_error(), word);                                                                 \
    } while (0)

static int body_overflow(int rank, int size, void *arg)
{
    (void)arg;
    (void)rank;
    (void)size;
    int me, n;
    weft_comm_t w = start(&me, &n);
    static float f[64], g[64];
    const int64_t big = INT64_C(1) << 62, huge = INT64_MAX;
    /* count x 4 bytes fits, x 4 ranks does not */
    const int64_t per_rank = (INT64_C(1) << 61) / 4;
    int64_t counts[8], displs[8], zero[8] = {0};
    for (int r = 0; r < 8; r++) {
        counts[r] = 1;
        displs[r] = r;
    }
    EXPECT_ARG(weft_allreduce(f, g, big, WEFT_FLOAT32, WEFT_SUM, w), "count");
    EXPECT_ARG(weft_allreduce(f, g, huge, WEFT_FLOAT32, WEFT_SUM, w), "count");
    EXPECT_ARG(weft_allreduce(WEFT_IN_PLACE, g, big, WEFT_INT64, WEFT_MAX, w), "count");
    EXPECT_ARG(weft_reduce(f, g, big, WEFT_FLOAT64, WEFT_SUM, 0, w), "count");
    EXPECT_ARG(weft_scan(f, g, big, WEFT_INT32, WEFT_SUM, w), "count");
    EXPECT_ARG(weft_exscan(f, g, huge, WEFT_INT16, WEFT_SUM, w), "count");
    EXPECT_ARG(weft_bcast(f, big, WEFT_FLOAT32, 0, w), "count");
    EXPECT_ARG(weft_bcast(f, huge, WEFT_BFLOAT16, 0, w), "count");
    /* the per-rank count fits, the whole buffer (count x ranks) does not */
    EXPECT_ARG(weft_allgather(f, g, per_rank, WEFT_FLOAT64, w), "ranks");
    EXPECT_ARG(weft_allgather(f, g, big, WEFT_FLOAT32, w), "count");
    EXPECT_ARG(weft_gather(f, g, per_rank, WEFT_FLOAT64, 0, w), "ranks");
    EXPECT_ARG(weft_scatter(f, g, per_rank, WEFT_FLOAT64, 0, w), "ranks");
    EXPECT_ARG(weft_alltoall(f, g, per_rank, WEFT_FLOAT64, w), "ranks");
    EXPECT_ARG(weft_alltoall(WEFT_IN_PLACE, g, per_rank, WEFT_FLOAT64, w), "ranks");
    EXPECT_ARG(weft_reduce_scatter_block(f, g, per_rank, WEFT_FLOAT64, WEFT_SUM, w), "ranks");
    EXPECT_ARG(weft_reduce_scatter_block(f, g, big, WEFT_FLOAT32, WEFT_SUM, w), "count");
    /* displacements: one that wraps when scaled, one whose block ends past
     * the address space, counts whose sum does */
    displs[n - 1] = INT64_MAX / 2;
    EXPECT_ARG(weft_allgatherv(f, 1, g, counts, displs, WEFT_FLOAT32, w), "displacement");
    if (me == 0) { /* the vectors count at the root only: the others would start the call */
        EXPECT_ARG(weft_gatherv(f, 1, g, counts, displs, WEFT_FLOAT32, 0, w), "displacement");
        EXPECT_ARG(weft_scatterv(f, counts, displs, g, 1, WEFT_FLOAT32, 0, w), "displacement");
    }
    EXPECT_ARG(weft_alltoallv(f, counts, displs, g, counts, displs, WEFT_FLOAT32, w), "displacement");
    displs[n - 1] = INT64_MAX / 4 - 1; /* x 4 bytes fits; its block's end does not */
    counts[n - 1] = 8;
    int64_t sc = me == n - 1 ? 8 : 1;
    EXPECT_ARG(weft_allgatherv(f, sc, g, counts, displs, WEFT_FLOAT32, w), "displacement");
    displs[n - 1] = n - 1;
    counts[n - 1] = 1;
    counts[0] = huge;
    EXPECT_ARG(weft_allgatherv(f, me == 0 ? huge : 1, g, counts, displs, WEFT_FLOAT32, w), "count");
    EXPECT_ARG(weft_alltoallv(f, counts, zero, g, counts, zero, WEFT_FLOAT32, w), "count");
    counts[0] = counts[1] = INT64_MAX / 2 + 1; /* each fits, their sum wraps */
    EXPECT_ARG(weft_reduce_scatter(f, g, counts, WEFT_BYTE, WEFT_BOR, w), "counts");
    EXPECT_ARG(weft_alltoallv(f, counts, zero, g, counts, zero, WEFT_BYTE, w), "count");
    /* None of that started anything: a real collective works. */
    float one = 1, sum = 0;
    TH_OK(weft_allreduce(&one, &sum, 1, WEFT_FLOAT32, WEFT_SUM, w));
    TH_CHECK(sum == (float)n, "sum %g", (double)sum);
    TH_OK(weft_finalize());
    return 0;
}

Test(coll_async, overflowing_arguments, .timeout = 60)
{
    for (int n = 2; n <= 4; n += 2) {
        th_result_t res = th_run(n, body_overflow, NULL, 40, quiet_env);
        cr_assert_eq(res.timed_out, 0, "%d ranks: hung", n);
        cr_assert_eq(res.failed, 0, "%d ranks", n);
    }
}

/* ---- WEFT_COLL_CHECK: the members' calls compared first --------------------- */
/* With WEFT_COLL_CHECK=1 every collective first allgathers each member's
 * (collective, datatype, op, root, count): calls that differ fail on every
 * rank with WEFT_ERR_ARG and one message naming the first rank that
 * differs, where without it base algorithms return wrong data (a float32
 * sum against an int32 one) or wait for messages that never come (another
 * root). Rank 2 differs in each case, on a fresh communicator (a failed
 * call breaks a communicator's shared-memory collectives); correct calls,
 * v-collectives included, still work. Before, WEFT_COLL_CHECK was an
 * unknown variable. */
static uint64_t text_hash(const char *t)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (; *t; t++)
        h = (h ^ (unsigned char)*t) * UINT64_C(0x100000001b3);
    return h;
}

/* Every rank failed with the same message, which says what `want` says. */
static void expect_check_failure(weft_comm_t w, int rank, int size, int rc, const char *what, const char *want)
{
    TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), "WEFT_COLL_CHECK") &&
                 strstr(weft_last_error(), "rank 2 called") && strstr(weft_last_error(), want),
             "rank %d: %s: %d (%s), wanted an error naming rank 2 and %s", rank, what, rc, weft_last_error(), want);
    uint64_t mine = text_hash(weft_last_error()), all[8];
    TH_OK(weft_allgather(&mine, all, 1, WEFT_UINT64, w));
    for (int r = 0; r < size; r++)
        TH_CHECK(all[r] == mine, "%s: rank %d's message differs from rank %d's (%s)", what, r, rank, weft_last_error());
}

static int body_coll_check(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n), c;
    int32_t in[8], out[64];
    for (int i = 0; i < 8; i++)
        in[i] = rank + i;
    /* correct calls */
    TH_OK(weft_allreduce(in, out, 4, WEFT_INT32, WEFT_SUM, w));
    TH_CHECK(out[1] == size * (size - 1) / 2 + size, "allreduce: %d", out[1]);
    int64_t counts[8], displs[8];
    for (int r = 0; r < size; r++) {
        counts[r] = r % 2 + 1;
        displs[r] = 2 * r;
    }
    TH_OK(weft_allgatherv(in, counts[rank], out, counts, displs, WEFT_INT32, w));
    TH_CHECK(out[2 * (size - 1)] == size - 1, "allgatherv: %d", out[2 * (size - 1)]);
    TH_OK(weft_barrier(w));
    weft_request_t r;
    TH_OK(weft_ibcast(in, 2, WEFT_INT32, 1, w, &r));
    TH_OK(weft_wait(&r, NULL));
    TH_CHECK(in[0] == 1, "ibcast: %d", in[0]);
    /* a float32 sum against int32 ones, through a base algorithm */
    c = th_forced(w, "allreduce", "ring");
    int rc = weft_allreduce(in, out, 4, rank == 2 ? WEFT_FLOAT32 : WEFT_INT32, WEFT_SUM, c);
    expect_check_failure(w, rank, size, rc, "allreduce ring", "allreduce of 4 x float32, op sum");
    TH_OK(weft_comm_free(&c));
    /* and through shared memory, where the signature would also see it */
    c = th_forced(w, "allreduce", "shm");
    rc = weft_allreduce(in, out, 4, WEFT_INT32, rank == 2 ? WEFT_MAX : WEFT_SUM, c);
    expect_check_failure(w, rank, size, rc, "allreduce shm", "op max");
    TH_OK(weft_comm_free(&c));
    /* another root: without the check, binomial trees that wait for each other */
    c = th_forced(w, "bcast", "binomial");
    rc = weft_bcast(in, 2, WEFT_INT32, rank == 2 ? 1 : 0, c);
    expect_check_failure(w, rank, size, rc, "bcast", "root 1");
    TH_OK(weft_comm_free(&c));
    /* another collective */
    TH_OK(weft_comm_dup(w, NULL, &c));
    rc = rank == 2 ? weft_reduce(in, out, 4, WEFT_INT32, WEFT_SUM, 0, c)
                   : weft_allreduce(in, out, 4, WEFT_INT32, WEFT_SUM, c);
    expect_check_failure(w, rank, size, rc, "reduce against allreduce", "called reduce");
    TH_OK(weft_comm_free(&c));
    /* another count, nonblocking */
    TH_OK(weft_comm_dup(w, NULL, &c));
    TH_OK(weft_iallgather(in, out, rank == 2 ? 3 : 2, WEFT_INT32, c, &r));
    rc = weft_wait(&r, NULL);
    expect_check_failure(w, rank, size, rc, "iallgather", "allgather of 3 x int32");
    TH_OK(weft_comm_free(&c));
    /* allgatherv counts that differ */
    TH_OK(weft_comm_dup(w, NULL, &c));
    if (rank == 2) counts[0]++;
    rc = weft_allgatherv(in, counts[rank], out, counts, displs, WEFT_INT32, c);
    expect_check_failure(w, rank, size, rc, "allgatherv", "counts hashing to");
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_finalize());
    return 0;
}

Test(coll_async, coll_check, .timeout = 90)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=20", "WEFT_COLL_CHECK=1", NULL};
    for (int n = 3; n <= 4; n++) {
        th_result_t res = th_run(n, body_coll_check, NULL, 60, env);
        cr_assert_eq(res.timed_out, 0, "%d ranks: hung", n);
        cr_assert_eq(res.failed, 0, "%d ranks", n);
    }
}

/* Without WEFT_COLL_CHECK: a receive of another length than its step
 * expects fails the rank with WEFT_ERR_ARG naming the sender (the ranks
 * passed different counts or datatypes), found at no cost; before, a
 * shorter message was taken silently. */
static int body_sizes_differ(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    int me, n;
    weft_comm_t w = start(&me, &n), c;
    int32_t in[8] = {7, 7, 7, 7}, out[64];
    /* rank 2 expects 3 elements from the root, which sends 2 */
    c = th_forced(w, "bcast", "binomial");
    int rc = weft_bcast(in, rank == 2 ? 3 : 2, WEFT_INT32, 0, c);
    if (rank == 2)
        TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), "rank 0 sent 8 bytes where this rank expects 12") &&
                     strstr(weft_last_error(), "different counts or datatypes"),
                 "bcast: %d %s", rc, weft_last_error());
    else
        TH_CHECK(rc == WEFT_SUCCESS, "rank %d bcast: %d %s", rank, rc, weft_last_error());
    TH_OK(weft_comm_free(&c));
    /* a longer message than expected: the ring's next rank fails */
    c = th_forced(w, "allgather", "ring");
    rc = weft_allgather(in, out, rank == 1 ? 3 : 2, WEFT_INT32, c);
    TH_CHECK(rc != WEFT_SUCCESS, "rank %d: allgather with other counts succeeded", rank);
    if (rank == 2)
        TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), "rank 1 sent more than the 8 bytes"),
                 "allgather: %d %s", rc, weft_last_error());
    TH_OK(weft_comm_free(&c));
    return 0; /* no finalize: the failed calls left peers in different places */
}

Test(coll_async, sizes_that_differ_fail_without_the_check, .timeout = 60)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=3", NULL};
    th_result_t res = th_run(3, body_sizes_differ, NULL, 40, env);
    cr_assert_eq(res.timed_out, 0, "hung");
    cr_assert_eq(res.failed, 0);
}

/* ---- what reaches stderr at the default log level ------------------------ */
/* An error returned to the caller is not printed (the caller has it, with
 * weft_last_error()); one weft swallows is a warning: here a barrier only
 * rank 0 entered, canceled by weft_finalize. */
typedef struct {
    int rank, size, bad_rc, fin_rc;
    char last[1024];
} logging_t;

static void logging_run(void *arg)
{
    logging_t *l = arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    int64_t x = 1;
    l->bad_rc = weft_bcast(&x, 1, WEFT_INT64, l->size, w);
    snprintf(l->last, sizeof(l->last), "%s", weft_last_error());
    weft_request_t r;
    if (l->rank == 0 && weft_ibarrier(w, &r)) l->bad_rc = -1; /* the other ranks never join it */
    l->fin_rc = weft_finalize();
}

static int body_logging(int rank, int size, void *arg)
{
    (void)arg;
    logging_t l = {.rank = rank, .size = size};
    char *text = th_stderr_of(logging_run, &l);
    TH_CHECK(text, "out of memory");
    int bad_rc = l.bad_rc, fin_rc = l.fin_rc;
    const char *last = l.last;
    TH_CHECK(bad_rc == WEFT_ERR_ARG, "bcast with root %d returned %d", size, bad_rc);
    TH_CHECK(strstr(last, "out of range"), "weft_last_error(): %s", last);
    TH_CHECK(!strstr(text, "out of range"), "a returned error was printed too:\n%s", text);
    TH_CHECK(fin_rc == WEFT_SUCCESS, "weft_finalize returned %d", fin_rc);
    if (rank == 0)
        TH_CHECK(strstr(text, "warn: weft_finalize: 1 collective still in progress was canceled"),
                 "no warning for the canceled barrier:\n%s", text);
    else
        TH_CHECK(!strstr(text, "canceled"), "rank %d:\n%s", rank, text);
    free(text);
    return 0;
}

Test(coll_async, returned_errors_are_not_printed_swallowed_ones_are, .timeout = 60)
{
    /* The default log level; a barrier over point-to-point, which simply
     * waits for the absent rank. */
    const char *env[] = {"WEFT_LOG_LEVEL=warn", "WEFT_TIMEOUT=20", "WEFT_COLL_TUNE=barrier:dissemination", NULL};
    th_result_t res = th_run(2, body_logging, NULL, 50, env);
    cr_assert_eq(res.failed, 0);
}

/* ---- a rank killed during an allreduce ------------------------------------ */
/* The victim SIGKILLs itself while the others are blocked in an allreduce.
 * Every survivor must fail with WEFT_ERR_PEER_LOST long before the deadline
 * (the env store notices the dead connection and tells every rank), and its
 * message must name the dead rank, also where it was waiting on a live
 * neighbour stuck behind it (ring), in communicator terms. A communicator
 * of the survivors keeps working. */
#define KILL_TIMEOUT 20.0 /* far above the detection latency: a timeout would show */

typedef struct kill_shared {
    double killed_at;  /* weft_wtime() (CLOCK_MONOTONIC) just before the kill */
    double latency[8]; /* per survivor: from the kill to the error */
} kill_shared_t;

typedef struct kill_case {
    int victim;        /* world rank that dies */
    const char *alg;   /* allreduce algorithm forced by hint (NULL: the default choice) */
    int reversed;      /* run on a communicator whose ranks are the world's reversed */
    kill_shared_t *sh; /* MAP_SHARED: written by the children, read by the parent */
} kill_case_t;

static int body_killed(int rank, int size, void *arg)
{
    const kill_case_t *kc = arg;
    int me, n;
    weft_comm_t w = start(&me, &n), c = w;
    if (kc->alg || kc->reversed) {
        weft_options_t o;
        TH_OK(weft_options_create(&o));
        if (kc->alg) TH_OK(weft_options_set_hint(o, "allreduce_algorithm", kc->alg));
        TH_OK(weft_comm_split(w, 0, kc->reversed ? size - 1 - rank : rank, o, &c));
        TH_OK(weft_options_free(&o));
    }
    TH_OK(weft_comm_set_timeout(c, KILL_TIMEOUT));
    /* The survivors' own communicator must keep working after the loss. */
    weft_comm_t alive;
    TH_OK(weft_comm_split(w, rank == kc->victim ? WEFT_UNDEFINED : 0, rank, WEFT_OPTIONS_NULL, &alive));
    int victim_in_c = kc->reversed ? size - 1 - kc->victim : kc->victim;
    enum { N = 1 << 18 };
    float *buf = calloc(N, sizeof(float));
    TH_OK(weft_allreduce(WEFT_IN_PLACE, buf, N, WEFT_FLOAT32, WEFT_SUM, c)); /* everyone connected */
    if (rank == kc->victim) {
        usleep(50 * 1000);
        kc->sh->killed_at = weft_wtime();
        kill(getpid(), SIGKILL);
    }
    double t0 = weft_wtime();
    int rc = WEFT_SUCCESS;
    for (int i = 0; i < 50 && rc == WEFT_SUCCESS; i++)
        rc = weft_allreduce(WEFT_IN_PLACE, buf, N, WEFT_FLOAT32, WEFT_SUM, c);
    double end = weft_wtime(), took = end - t0;
    char want[64];
    snprintf(want, sizeof(want), "rank %d (world rank %d) lost", victim_in_c, kc->victim);
    TH_CHECK(rc == WEFT_ERR_PEER_LOST, "rank %d: rc %d (%s): %s", rank, rc, weft_strerror(rc), weft_last_error());
    TH_CHECK(strstr(weft_last_error(), want), "rank %d: the error does not say \"%s\": %s", rank, want,
             weft_last_error());
    TH_CHECK(took < 5, "rank %d: took %.1f s with a %.0f s timeout", rank, took, KILL_TIMEOUT);
    if (rank < 8) kc->sh->latency[rank] = end - kc->sh->killed_at;
    int64_t one = 1, sum = 0;
    TH_OK(weft_allreduce(&one, &sum, 1, WEFT_INT64, WEFT_SUM, alive));
    TH_CHECK(sum == size - 1, "rank %d: the survivors' allreduce gave %lld", rank, (long long)sum);
    TH_OK(weft_comm_free(&alive));
    free(buf);
    weft_finalize();
    return 0;
}

static void run_killed(int victim, const char *alg, int reversed)
{
    const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=10", NULL};
    kill_shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    kill_case_t kc = {.victim = victim, .alg = alg, .reversed = reversed, .sh = sh};
    th_result_t res = th_run(4, body_killed, &kc, 60, env);
    cr_assert_eq(res.timed_out, 0, "survivors hung");
    double worst = 0;
    for (int r = 0; r < 4; r++) {
        if (r == victim) continue;
        cr_expect_eq(res.exit_code[r], 0, "rank %d", r);
        if (sh->latency[r] > worst) worst = sh->latency[r];
    }
    cr_assert_eq(res.exit_code[victim], 128 + SIGKILL);
    cr_log_info("rank %d killed (%s%s): slowest survivor returned %.1f ms after the kill", victim,
                alg ? alg : "default algorithm", reversed ? ", reversed communicator" : "", worst * 1e3);
    munmap(sh, sizeof(*sh));
}

Test(coll_async, rank_killed_during_allreduce, .timeout = 90)
{
    run_killed(3, NULL, 0);
}

/* Ring: most survivors wait on a live neighbour, not on the dead rank. */
Test(coll_async, rank_killed_during_ring_allreduce, .timeout = 90)
{
    run_killed(3, "ring", 1);
}

/* Recursive doubling, a middle rank: survivors meet the loss in different rounds. */
Test(coll_async, rank_killed_during_recursive_doubling, .timeout = 90)
{
    run_killed(1, "recursive_doubling", 0);
}

/* Rank 0 hosts the env store: the others see its connection close. */
Test(coll_async, rank_killed_is_the_store_host, .timeout = 90)
{
    run_killed(0, "ring", 0);
}

/* ---- stream-ordered calls on host buffers ---------------------------------- */
/* With host buffers a weft_*_on_stream call synchronises the stream (none
 * here: NULL) and runs the host collective: with no request it is done on
 * return, with one the request completes it. A stream given where no CUDA
 * driver is loaded is refused, naming the call. */
static int body_on_stream_host(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    int64_t x[3] = {rank, 1, 2 * rank}, y[3] = {0, 0, 0};
    TH_OK(weft_allreduce_on_stream(x, y, 3, WEFT_INT64, WEFT_SUM, w, NULL, NULL));
    TH_CHECK(y[1] == size && y[0] == (int64_t)size * (size - 1) / 2, "no request: %lld %lld", (long long)y[0],
             (long long)y[1]);
    weft_request_t req;
    int64_t g[8] = {0};
    TH_OK(weft_allgather_on_stream(&x[0], g, 1, WEFT_INT64, w, NULL, &req));
    TH_OK(weft_wait(&req, NULL));
    for (int r = 0; r < size; r++)
        TH_CHECK(g[r] == r, "allgather: block %d is %lld", r, (long long)g[r]);
    TH_OK(weft_barrier_on_stream(w, NULL, NULL));
    int rc = weft_allreduce_on_stream(x, y, 3, WEFT_INT64, WEFT_SUM, w, (void *)0x1234, NULL);
    TH_CHECK(rc != 0 && strstr(weft_last_error(), "stream"), "a stream without CUDA: %d (%s)", rc, weft_last_error());
    TH_OK(weft_finalize());
    return 0;
}

Test(coll_async, on_stream_host_buffers, .timeout = 60)
{
    th_result_t res = th_run(3, body_on_stream_host, NULL, 50, NULL);
    cr_assert_eq(res.failed, 0);
}

/* ---- the progress thread (WEFT_PROGRESS_THREAD) ------------------------ */
/* With the thread on, a 4 MiB message (rendezvous) and a 1 MiB allreduce
 * posted before a stretch of computation complete during it: the
 * application makes no weft call until the results show up in its
 * buffers (without the thread nothing moves until the next call). Then
 * the waits, and everything checked. */
static int body_progress_thread(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    TH_CHECK(weft_progress_thread_running(), "rank %d: WEFT_PROGRESS_THREAD=20 (on) started no thread", rank);
    size_t big = (size_t)4 << 20, count = (size_t)1 << 18;
    unsigned char *msg = malloc(big);
    float *in = malloc(sizeof(float) * count), *out = malloc(sizeof(float) * count);
    for (size_t i = 0; i < count; i++) {
        in[i] = (float)(rank + 1);
        out[i] = -1;
    }
    int peer = rank ^ 1;
    th_fill(msg, big, 77u + (unsigned)(rank & ~1)); /* the even rank's pattern; the odd one compares its last byte */
    unsigned char tail_want = msg[big - 1];
    weft_request_t r[2];
    if (rank % 2 == 0) {
        TH_OK(weft_isend(msg, (int64_t)big, WEFT_BYTE, peer, 3, w, &r[0]));
    } else {
        memset(msg, (unsigned char)~tail_want, big);
        TH_OK(weft_irecv(msg, (int64_t)big, WEFT_BYTE, peer, 3, w, &r[0]));
    }
    TH_OK(weft_iallreduce(in, out, (int64_t)count, WEFT_FLOAT32, WEFT_SUM, w, &r[1]));
    float want = (float)size * (float)(size + 1) / 2;
    volatile float *last = &out[count - 1];
    volatile unsigned char *tail = &msg[big - 1];
    /* the application computes: no weft call until both show up (or 30 s) */
    double t0 = weft_wtime(), seen = 0;
    while (weft_wtime() - t0 < 30) {
        if (*last == want && (rank % 2 == 0 || *tail == tail_want)) {
            seen = weft_wtime() - t0;
            break;
        }
    }
    TH_CHECK(seen > 0, "rank %d: after 30 s without a weft call the %s had not arrived", rank,
             *last != want ? "allreduce's result" : "message");
    TH_OK(weft_wait(&r[0], NULL));
    TH_OK(weft_wait(&r[1], NULL));
    if (rank % 2) TH_CHECK(th_verify(msg, big, 77u + (unsigned)peer, NULL), "rank %d: the message differs", rank);
    for (size_t i = 0; i < count; i++)
        if (out[i] != want) {
            TH_CHECK(0, "rank %d: allreduce element %zu is %g, not %g", rank, i, (double)out[i], (double)want);
            break;
        }
    free(msg);
    free(in);
    free(out);
    TH_OK(weft_finalize());
    return 0;
}

static const char *const thread_env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=60", "WEFT_PROGRESS_THREAD=20", NULL};

Test(coll_async, progress_thread_moves_calls_during_compute, .timeout = 120)
{
    th_result_t res = th_run(2, body_progress_thread, NULL, 90, thread_env);
    cr_assert_eq(res.timed_out, 0, "hung");
    cr_assert_eq(res.failed, 0);
}

/* Everything of many_in_flight_with_user_traffic with the thread polling
 * beside the application's calls (the lock keeps them apart). */
Test(coll_async, progress_thread_with_many_in_flight, .timeout = 120)
{
    for (int n = 2; n <= 4; n += 2) {
        th_result_t res = th_run(n, body_inflight, (void *)thread_env, 100, thread_env); /* arg: the thread must run */
        cr_assert_eq(res.timed_out, 0, "%d ranks: hung", n);
        cr_assert_eq(res.failed, 0, "%d ranks", n);
    }
}
