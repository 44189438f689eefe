/* Every collective x every algorithm (forced through a communicator hint)
 * x dtype x op against straightforward references, fresh random data each
 * run (the seed is printed on failure), counts 0, 1, a prime and a larger
 * one, 1..9 ranks, in-place forms, nonblocking calls in flight together,
 * and bad arguments; the segmented algorithms also on messages of several
 * segments plus a remainder (3, 4 and 7 ranks).
 *
 * Reduction inputs are small integers held in each dtype, so every
 * reduction order gives the same bits and results compare exactly; copies
 * (bcast, gather, scatter, allgather, alltoall) compare bit for bit. */
#include "coll/coll.h"
#include "harness.h"
#include "weft.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const int64_t counts[] = {0, 1, 13, 1031};
#define NCOUNTS 4

static unsigned g_seed;

#define CHECK_EQ(got, want, bytes, ...) TH_CHECK(!memcmp((got), (want), (bytes)), __VA_ARGS__)

static const char *cur_alg;
#define WHERE "seed %u alg %s"
#define WARGS g_seed, cur_alg

/* ---- reductions -------------------------------------------------------- */
/* One call of a reduction collective on total elements (reduce_scatter:
 * rcounts per rank; reduce_scatter_block: cnt per rank), checked against
 * the reference. inplace uses WEFT_IN_PLACE (reduce: at the root). */
static void check_reduction(weft_comm_t c, weft_coll_kind_t kind, weft_dtype_t d, weft_op_t op, int64_t cnt,
                            const int64_t *rcounts, int salt, int root, int inplace)
{
    int me, n;
    TH_OK(weft_comm_rank(c, &me));
    TH_OK(weft_comm_size(c, &n));
    size_t es = weft_dtype_size(d);
    int64_t total = cnt;
    if (kind == WEFT_COLL_REDUCE_SCATTER) {
        total = 0;
        for (int r = 0; r < n; r++)
            total += rcounts[r];
    } else if (kind == WEFT_COLL_REDUCE_SCATTER_BLOCK) {
        total = cnt * n;
    }
    char *in = calloc((size_t)total + 1, es), *out = calloc((size_t)total + 1, es);
    th_fill_input(in, d, total, g_seed, me, salt);
    switch (kind) {
    case WEFT_COLL_ALLREDUCE: {
        char *ref = th_reference(d, op, total, g_seed, 0, n, salt);
        if (inplace) {
            memcpy(out, in, (size_t)total * es);
            TH_OK(weft_allreduce(WEFT_IN_PLACE, out, total, d, op, c));
        } else {
            TH_OK(weft_allreduce(in, out, total, d, op, c));
        }
        CHECK_EQ(out, ref, (size_t)total * es, WHERE " allreduce %s %s count %lld", WARGS, weft_dtype_name(d),
                 weft_op_name(op), (long long)total);
        free(ref);
        break;
    }
    case WEFT_COLL_REDUCE: {
        char *ref = th_reference(d, op, total, g_seed, 0, n, salt);
        if (inplace && me == root) {
            memcpy(out, in, (size_t)total * es);
            TH_OK(weft_reduce(WEFT_IN_PLACE, out, total, d, op, root, c));
        } else {
            TH_OK(weft_reduce(in, me == root ? out : NULL, total, d, op, root, c));
        }
        if (me == root)
            CHECK_EQ(out, ref, (size_t)total * es, WHERE " reduce %s %s count %lld root %d", WARGS, weft_dtype_name(d),
                     weft_op_name(op), (long long)total, root);
        free(ref);
        break;
    }
    case WEFT_COLL_SCAN:
    case WEFT_COLL_EXSCAN: {
        int ex = kind == WEFT_COLL_EXSCAN;
        const void *send = in;
        if (inplace) {
            memcpy(out, in, (size_t)total * es);
            send = WEFT_IN_PLACE;
        } else {
            memset(out, 0x5A, (size_t)total * es);
        }
        if (ex)
            TH_OK(weft_exscan(send, out, total, d, op, c));
        else
            TH_OK(weft_scan(send, out, total, d, op, c));
        if (!ex || me > 0) {
            char *ref = th_reference(d, op, total, g_seed, 0, ex ? me : me + 1, salt);
            CHECK_EQ(out, ref, (size_t)total * es, WHERE " %sscan %s %s count %lld%s", WARGS, ex ? "ex" : "",
                     weft_dtype_name(d), weft_op_name(op), (long long)total, inplace ? " in place" : "");
            free(ref);
        } else if (inplace) {
            CHECK_EQ(out, in, (size_t)total * es, "exscan wrote rank 0's buffer (in place)");
        } else {
            for (size_t b = 0; b < (size_t)total * es; b++)
                TH_CHECK((unsigned char)out[b] == 0x5A, "exscan wrote rank 0's buffer");
        }
        break;
    }
    case WEFT_COLL_REDUCE_SCATTER:
    case WEFT_COLL_REDUCE_SCATTER_BLOCK: {
        char *ref = th_reference(d, op, total, g_seed, 0, n, salt);
        int64_t off = 0, mine = kind == WEFT_COLL_REDUCE_SCATTER ? rcounts[me] : cnt;
        for (int r = 0; r < me; r++)
            off += kind == WEFT_COLL_REDUCE_SCATTER ? rcounts[r] : cnt;
        /* In place the input is the whole vector in recvbuf; the result goes to its front. */
        const void *send = in;
        if (inplace) {
            memcpy(out, in, (size_t)total * es);
            send = WEFT_IN_PLACE;
        }
        if (kind == WEFT_COLL_REDUCE_SCATTER)
            TH_OK(weft_reduce_scatter(send, out, rcounts, d, op, c));
        else
            TH_OK(weft_reduce_scatter_block(send, out, cnt, d, op, c));
        CHECK_EQ(out, ref + (size_t)off * es, (size_t)mine * es, WHERE " reduce_scatter %s %s count %lld%s", WARGS,
                 weft_dtype_name(d), weft_op_name(op), (long long)mine, inplace ? " in place" : "");
        free(ref);
        break;
    }
    default: break;
    }
    free(in);
    free(out);
}

static void check_reductions(weft_comm_t c, weft_coll_kind_t kind)
{
    int n;
    TH_OK(weft_comm_size(c, &n));
    for (int d = 0; d < WEFT_DTYPE_COUNT; d++)
        for (int op = 0; op < WEFT_OP_COUNT; op++) {
            if (weft_op_check((weft_op_t)op, (weft_dtype_t)d, "test") != WEFT_SUCCESS) continue;
            /* The full op matrix on the allreduce algorithms; SUM and MAX elsewhere. */
            if (kind != WEFT_COLL_ALLREDUCE && op != WEFT_SUM && op != WEFT_MAX && op != WEFT_BXOR) continue;
            for (int ci = 0; ci < NCOUNTS; ci++) {
                int64_t cnt = counts[ci], rcounts[16];
                for (int r = 0; r < n; r++)
                    rcounts[r] = cnt ? cnt + r % 3 : 0;
                check_reduction(c, kind, (weft_dtype_t)d, (weft_op_t)op, cnt, rcounts, d * 100 + op * 10 + ci,
                                (ci + n - 1) % n, ci % 2 == 1);
            }
        }
}

/* Segmented algorithms move WEFT_COLL_SEG_BYTES at a time: counts of
 * several segments plus a remainder (3 segments + 1 element), just under
 * and exactly on a segment boundary, for every element size; blocks of
 * unequal segment counts (and empty ones) for reduce_scatter, and for
 * allreduce (ring: n blocks) blocks of those sizes and one element fewer;
 * in place and not; AVG, whose division runs per segment. */
static void check_segmented(weft_comm_t c, weft_coll_kind_t kind)
{
    static const weft_dtype_t dts[] = {WEFT_INT8, WEFT_BFLOAT16, WEFT_FLOAT16, WEFT_FLOAT32, WEFT_INT64};
    static const weft_op_t ops[] = {WEFT_SUM, WEFT_AVG};
    int n;
    TH_OK(weft_comm_size(c, &n));
    for (size_t di = 0; di < sizeof(dts) / sizeof(dts[0]); di++) {
        int64_t seg = (int64_t)weft_coll_seg_elems(weft_dtype_size(dts[di]));
        /* rcounts: some blocks of several segments, some of a few elements, one empty. */
        const int64_t pattern[] = {3 * seg + 1, 2 * seg, 0, 2 * seg - 1, 1};
        const int64_t cnts[] = {3 * seg + 1, 2 * seg - 1, 2 * seg};
        for (size_t oi = 0; oi < sizeof(ops) / sizeof(ops[0]); oi++)
            for (size_t ci = 0; ci < sizeof(cnts) / sizeof(cnts[0]); ci++) {
                /* The large cases on every dtype, the boundary cases on the first one. */
                if (ci > 0 && di > 0) continue;
                int64_t rcounts[16];
                for (int r = 0; r < n; r++)
                    rcounts[r] = pattern[(r + (int)ci) % 5];
                int salt = 7000 + (int)(di * 100 + oi * 10 + ci), root = (int)(di + ci) % n;
                /* allreduce ring segments its n blocks: cnts[ci] elements in the first n - 1, one fewer in the last. */
                int64_t cnt = kind == WEFT_COLL_ALLREDUCE ? cnts[ci] * n - 1 : cnts[ci];
                check_reduction(c, kind, dts[di], ops[oi], cnt, rcounts, salt, root, (int)(di + oi + ci) % 2);
            }
    }
}

/* ---- copies -------------------------------------------------------------- */
static void fill_bytes(void *buf, size_t bytes, int rank, int salt)
{
    th_fill(buf, bytes, g_seed * 131u + (unsigned)rank * 7919u + (unsigned)salt);
}
static int bytes_ok(const void *buf, size_t bytes, int rank, int salt)
{
    return th_verify(buf, bytes, g_seed * 131u + (unsigned)rank * 7919u + (unsigned)salt, NULL);
}

static void check_copies(weft_comm_t c, weft_coll_kind_t kind)
{
    int me, n;
    TH_OK(weft_comm_rank(c, &me));
    TH_OK(weft_comm_size(c, &n));
    static const weft_dtype_t dts[] = {WEFT_BYTE, WEFT_INT32, WEFT_BFLOAT16, WEFT_FLOAT16, WEFT_FLOAT32, WEFT_FLOAT64};
    for (size_t di = 0; di < sizeof(dts) / sizeof(dts[0]); di++)
        for (int ci = 0; ci < NCOUNTS; ci++) {
            weft_dtype_t d = dts[di];
            size_t es = weft_dtype_size(d);
            int64_t cnt = counts[ci];
            size_t block = (size_t)cnt * es, all = block * (size_t)n;
            int salt = (int)di * 10 + ci, root = (ci + 1) % n, inplace = ci % 2 == 0;
            char *in = calloc(all + 1, 1), *out = calloc(all + 64, 1);
            switch (kind) {
            case WEFT_COLL_BCAST:
                if (me == root) fill_bytes(out, block, root, salt);
                TH_OK(weft_bcast(out, cnt, d, root, c));
                TH_CHECK(bytes_ok(out, block, root, salt), WHERE " bcast count %lld root %d", WARGS, (long long)cnt,
                         root);
                break;
            case WEFT_COLL_ALLGATHER: {
                fill_bytes(in, block, me, salt);
                if (inplace) {
                    memcpy(out + (size_t)me * block, in, block);
                    TH_OK(weft_allgather(WEFT_IN_PLACE, out, cnt, d, c));
                } else {
                    TH_OK(weft_allgather(in, out, cnt, d, c));
                }
                for (int r = 0; r < n; r++)
                    TH_CHECK(bytes_ok(out + (size_t)r * block, block, r, salt), WHERE " allgather block %d count %lld",
                             WARGS, r, (long long)cnt);
                /* The list form writes each rank's block to its own buffer. */
                void *list[16];
                for (int r = 0; r < n; r++)
                    list[r] = calloc(block + 1, 1);
                TH_OK(weft_allgather_list(in, list, cnt, d, c));
                for (int r = 0; r < n; r++) {
                    TH_CHECK(bytes_ok(list[r], block, r, salt), WHERE " allgather_list block %d", WARGS, r);
                    free(list[r]);
                }
                break;
            }
            case WEFT_COLL_ALLGATHERV:
            case WEFT_COLL_GATHERV: {
                int64_t rc[16], dp[16], pos = 0;
                for (int r = 0; r < n; r++) {
                    rc[r] = cnt ? cnt + (r % 3) : r % 2;
                    dp[r] = pos + 1; /* a one-element gap before each block */
                    pos = dp[r] + rc[r];
                }
                char *big = calloc((size_t)(pos + 1) * es, 1);
                memset(big, 0xEE, (size_t)(pos + 1) * es);
                /* This rank's block is rc[me] elements: more than `in` holds
                 * when the count is 0 (odd ranks send one) or n is small. */
                char *vin = calloc((size_t)rc[me] * es + 1, 1);
                fill_bytes(vin, (size_t)rc[me] * es, me, salt);
                if (kind == WEFT_COLL_ALLGATHERV)
                    TH_OK(weft_allgatherv(vin, rc[me], big, rc, dp, d, c));
                else
                    TH_OK(weft_gatherv(vin, rc[me], me == root ? big : NULL, rc, dp, d, root, c));
                free(vin);
                if (kind == WEFT_COLL_ALLGATHERV || me == root)
                    for (int r = 0; r < n; r++) {
                        TH_CHECK(bytes_ok(big + (size_t)dp[r] * es, (size_t)rc[r] * es, r, salt), WHERE " %s block %d",
                                 WARGS, kind == WEFT_COLL_GATHERV ? "gatherv" : "allgatherv", r);
                        TH_CHECK((unsigned char)big[(size_t)(dp[r] - 1) * es] == 0xEE, "gap before block %d written",
                                 r);
                    }
                free(big);
                break;
            }
            case WEFT_COLL_GATHER:
                fill_bytes(in, block, me, salt);
                if (inplace && me == root) {
                    memcpy(out + (size_t)me * block, in, block);
                    TH_OK(weft_gather(WEFT_IN_PLACE, out, cnt, d, root, c));
                } else {
                    TH_OK(weft_gather(in, me == root ? out : NULL, cnt, d, root, c));
                }
                if (me == root)
                    for (int r = 0; r < n; r++)
                        TH_CHECK(bytes_ok(out + (size_t)r * block, block, r, salt), WHERE " gather block %d", WARGS, r);
                break;
            case WEFT_COLL_SCATTER:
                if (me == root)
                    for (int r = 0; r < n; r++)
                        fill_bytes(in + (size_t)r * block, block, r, salt);
                if (inplace && me == root) {
                    TH_OK(weft_scatter(in, WEFT_IN_PLACE, cnt, d, root, c));
                    TH_CHECK(bytes_ok(in + (size_t)me * block, block, me, salt), WHERE " scatter in place", WARGS);
                } else {
                    TH_OK(weft_scatter(me == root ? in : NULL, out, cnt, d, root, c));
                    TH_CHECK(bytes_ok(out, block, me, salt), WHERE " scatter count %lld root %d", WARGS, (long long)cnt,
                             root);
                }
                break;
            case WEFT_COLL_SCATTERV: {
                int64_t sc[16], dp[16], pos = 0;
                for (int r = 0; r < n; r++) {
                    sc[r] = cnt ? cnt + (r % 2) : 0;
                    dp[r] = pos;
                    pos += sc[r] + 2;
                }
                char *big = calloc((size_t)(pos + 1) * es, 1);
                if (me == root)
                    for (int r = 0; r < n; r++)
                        fill_bytes(big + (size_t)dp[r] * es, (size_t)sc[r] * es, r, salt);
                TH_OK(weft_scatterv(me == root ? big : NULL, sc, dp, out, sc[me], d, root, c));
                TH_CHECK(bytes_ok(out, (size_t)sc[me] * es, me, salt), WHERE " scatterv", WARGS);
                free(big);
                break;
            }
            case WEFT_COLL_ALLTOALL:
                for (int r = 0; r < n; r++)
                    fill_bytes(in + (size_t)r * block, block, me * 64 + r, salt);
                if (inplace) {
                    memcpy(out, in, all);
                    TH_OK(weft_alltoall(WEFT_IN_PLACE, out, cnt, d, c));
                } else {
                    TH_OK(weft_alltoall(in, out, cnt, d, c));
                }
                for (int r = 0; r < n; r++)
                    TH_CHECK(bytes_ok(out + (size_t)r * block, block, r * 64 + me, salt), WHERE " alltoall from %d",
                             WARGS, r);
                break;
            case WEFT_COLL_ALLTOALLV: {
                /* Rank p sends (p + q) % 3 + cnt elements to rank q. */
                int64_t sc[16], sd[16], rc[16], rd[16], spos = 0, rpos = 0;
                for (int r = 0; r < n; r++) {
                    sc[r] = cnt ? cnt + (me + r) % 3 : 0;
                    rc[r] = cnt ? cnt + (r + me) % 3 : 0;
                    sd[r] = spos;
                    rd[r] = rpos;
                    spos += sc[r];
                    rpos += rc[r];
                }
                char *sb = calloc((size_t)spos * es + 1, 1), *rb = calloc((size_t)rpos * es + 1, 1);
                for (int r = 0; r < n; r++)
                    fill_bytes(sb + (size_t)sd[r] * es, (size_t)sc[r] * es, me * 64 + r, salt);
                TH_OK(weft_alltoallv(sb, sc, sd, rb, rc, rd, d, c));
                for (int r = 0; r < n; r++)
                    TH_CHECK(bytes_ok(rb + (size_t)rd[r] * es, (size_t)rc[r] * es, r * 64 + me, salt),
                             WHERE " alltoallv from %d", WARGS, r);
                free(sb);
                free(rb);
                break;
            }
            default: break;
            }
            free(in);
            free(out);
        }
}

static int body_all(int rank, int size, void *arg)
{
    (void)arg;
    (void)rank;
    (void)size;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    for (int i = 0; weft_coll_algorithms[i]; i++) {
        const weft_coll_alg_t *alg = weft_coll_algorithms[i];
        char key[64];
        snprintf(key, sizeof(key), "%s_algorithm", weft_coll_kind_name(alg->kind));
        weft_comm_t c = th_forced(w, weft_coll_kind_name(alg->kind), alg->name);
        int st;
        TH_OK(weft_comm_hint_status(c, key, &st, NULL, 0));
        TH_CHECK(st == WEFT_HINT_APPLIED, "hint %s=%s not applied", key, alg->name);
        cur_alg = alg->name;
        switch (alg->kind) {
        case WEFT_COLL_BARRIER:
            for (int k = 0; k < 3; k++)
                TH_OK(weft_barrier(c));
            break;
        case WEFT_COLL_REDUCE:
        case WEFT_COLL_ALLREDUCE:
        case WEFT_COLL_SCAN:
        case WEFT_COLL_EXSCAN:
        case WEFT_COLL_REDUCE_SCATTER:
        case WEFT_COLL_REDUCE_SCATTER_BLOCK: check_reductions(c, alg->kind); break;
        default: check_copies(c, alg->kind); break;
        }
        TH_OK(weft_comm_free(&c));
    }
    TH_OK(weft_finalize());
    return 0;
}

/* The segmented algorithms, forced, on messages of several segments. */
static int body_segmented(int rank, int size, void *arg)
{
    (void)arg;
    (void)rank;
    (void)size;
    static const struct {
        weft_coll_kind_t kind;
        const char *alg;
    } algs[] = {{WEFT_COLL_REDUCE, "binomial"},     {WEFT_COLL_ALLREDUCE, "ring"},
                {WEFT_COLL_REDUCE_SCATTER, "ring"}, {WEFT_COLL_REDUCE_SCATTER_BLOCK, "ring"},
                {WEFT_COLL_SCAN, "linear"},         {WEFT_COLL_EXSCAN, "linear"}};
    TH_OK(weft_init(NULL, NULL));
    for (size_t i = 0; i < sizeof(algs) / sizeof(algs[0]); i++) {
        weft_comm_t c = th_forced(weft_comm_world(), weft_coll_kind_name(algs[i].kind), algs[i].alg);
        cur_alg = algs[i].alg;
        check_segmented(c, algs[i].kind);
        TH_OK(weft_comm_free(&c));
    }
    TH_OK(weft_finalize());
    return 0;
}

/* Invalid (op, dtype) pairs are skipped through weft_op_check, which logs. */
static const char *const quiet_env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=60", NULL};

static void seed_once(void)
{
    const char *s = getenv("WEFT_TEST_SEED");
    g_seed = s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)time(NULL) ^ (unsigned)getpid();
    fprintf(stderr, "test_coll: seed %u (set WEFT_TEST_SEED to repeat)\n", g_seed);
}

#define RANKS_TEST(N)                                                                                                  \
    Test(coll, every_algorithm_on_##N##_ranks, .timeout = 300)                                                         \
    {                                                                                                                  \
        seed_once();                                                                                                   \
        th_result_t res = th_run(N, body_all, NULL, 280, quiet_env);                                                   \
        cr_assert_eq(res.timed_out, 0, "hung (seed %u)", g_seed);                                                      \
        cr_assert_eq(res.failed, 0, "seed %u", g_seed);                                                                \
    }
RANKS_TEST(1)
RANKS_TEST(2)
RANKS_TEST(3)
RANKS_TEST(4)
RANKS_TEST(5)
RANKS_TEST(6)
RANKS_TEST(7)
RANKS_TEST(8)
RANKS_TEST(9)

/* The same on simulated nodes (WEFT_RANKS_PER_NODE consecutive ranks per
 * node): the hierarchical algorithms run (or decline on uneven nodes) and
 * the node-local ones decline, and every collective must still be right. */
#define LAYOUT_TEST(N, PER, NAME)                                                                                      \
    Test(coll, every_algorithm_on_##NAME, .timeout = 300)                                                              \
    {                                                                                                                  \
        static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=60", "WEFT_RANKS_PER_NODE=" #PER,      \
                                          NULL};                                                                       \
        seed_once();                                                                                                   \
        th_result_t res = th_run(N, body_all, NULL, 280, env);                                                         \
        cr_assert_eq(res.timed_out, 0, "hung (seed %u)", g_seed);                                                      \
        cr_assert_eq(res.failed, 0, "seed %u", g_seed);                                                                \
    }
LAYOUT_TEST(4, 2, nodes_2x2)
LAYOUT_TEST(6, 3, nodes_2x3)
LAYOUT_TEST(6, 2, nodes_3x2)
LAYOUT_TEST(4, 1, nodes_4x1)
LAYOUT_TEST(5, 2, nodes_2_2_1)

#define SEGMENTED_TEST(N)                                                                                              \
    Test(coll, segmented_on_##N##_ranks, .timeout = 120)                                                               \
    {                                                                                                                  \
        seed_once();                                                                                                   \
        th_result_t res = th_run(N, body_segmented, NULL, 100, quiet_env);                                             \
        cr_assert_eq(res.timed_out, 0, "hung (seed %u)", g_seed);                                                      \
        cr_assert_eq(res.failed, 0, "seed %u", g_seed);                                                                \
    }
SEGMENTED_TEST(3)
SEGMENTED_TEST(4)
SEGMENTED_TEST(7)
