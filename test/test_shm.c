/* coll/shm: the shared-memory algorithms forced on 1..8 ranks of one node
 * (every dtype x op runs in test_coll, which forces every registered
 * algorithm; here: counts at the slot and chunking boundaries, over the
 * slot (declines, the next candidate runs), in-place forms, 1000
 * back-to-back collectives (slot reuse), nonblocking ones in flight
 * together with user pt2pt), simulated nodes (decline), and killed runs:
 * survivors fail within the timeout and no segment of the run stays in
 * /dev/shm (unlink once attached, the creator's unlink on release, the
 * sweep at the next init). */
#include "coll/shm/segment.h"
#include "harness.h"
#include "topo/topo.h"
#include "weft.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *const quiet_env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=30", NULL};

/* Rank r's element i of input `salt`: a small integer, exact in every dtype. */
static int val(int r, size_t i, int salt)
{
    return (int)((r * 7 + i * 13 + (size_t)salt * 31) % 9) - 4;
}

static weft_comm_t forced(const char *coll, const char *alg)
{
    return th_forced(weft_comm_world(), coll, alg);
}

/* Runs body on n ranks with env: none hangs, none fails. */
static void run_ok(int n, th_body_fn body, void *arg, double timeout_s, const char *const *env)
{
    th_result_t res = th_run(n, body, arg, timeout_s, env);
    cr_assert_eq(res.timed_out, 0, "hung");
    cr_assert_eq(res.failed, 0);
}

/* Shared-memory collectives run so far on c. */
static uint64_t shm_ops(weft_comm_t c)
{
    weft_shm_t *sh = weft_coll_state(c, WEFT_COLL_COMP_SHM);
    return sh ? sh->ops : 0;
}

/* The counts: empty, one, the most that fits in a slot's head line
 * beside its flag and length (12 x 4 = 48 bytes) and one more (a prime),
 * around the chunking threshold, a whole slot, one element over it (two
 * pieces), three pieces the last of which fits in the head line. In int32
 * elements. */
static const int64_t counts[] = {0, 1, 12, 13, 511, 512, 4097, 16384, 16385, 2 * 16384 + 5};
#define NCOUNTS ((int)(sizeof(counts) / sizeof(counts[0])))

static void check_allreduce(weft_comm_t c, int64_t n, weft_op_t op, int inplace, int salt)
{
    int me, np;
    TH_OK(weft_comm_rank(c, &me));
    TH_OK(weft_comm_size(c, &np));
    int32_t *in = malloc(sizeof(int32_t) * (size_t)(n + 1)), *out = malloc(sizeof(int32_t) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++)
        in[i] = val(me, (size_t)i, salt);
    if (inplace) memcpy(out, in, sizeof(int32_t) * (size_t)n);
    TH_OK(weft_allreduce(inplace ? WEFT_IN_PLACE : in, out, n, WEFT_INT32, op, c));
    for (int64_t i = 0; i < n; i++) {
        int64_t want = val(0, (size_t)i, salt);
        for (int r = 1; r < np; r++) {
            int v = val(r, (size_t)i, salt);
            want = op == WEFT_MAX ? (v > want ? v : want) : want + v;
        }
        if (op == WEFT_AVG) want /= np;
        TH_CHECK(out[i] == want, "allreduce n %lld op %d elem %lld: %d != %lld", (long long)n, op, (long long)i, out[i],
                 (long long)want);
    }
    free(in);
    free(out);
}

static int body_forced(int rank, int size, void *arg)
{
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t c;
    /* allreduce: SUM, MAX, AVG; in place and not; the slot boundary. */
    static const char *const algs[] = {"shm", "shm_allread", "shm_chunked", "shm_ll"};
    /* shm_ll also at its lines' edges: one line, one over, its largest
     * message and one over */
    static const int64_t ll_counts[] = {14, 15, (int64_t)(WEFT_SHM_LL_MAX / 4), (int64_t)(WEFT_SHM_LL_MAX / 4) + 1};
    for (int alg = 0; alg < 4; alg++) {
        c = forced("allreduce", algs[alg]);
        for (int ci = 0; ci < NCOUNTS + (alg == 3 ? 4 : 0); ci++)
            for (int op = 0; op < 3; op++) {
                int64_t cnt = ci < NCOUNTS ? counts[ci] : ll_counts[ci - NCOUNTS];
                uint64_t before = shm_ops(c);
                weft_op_t o = op == 0 ? WEFT_SUM : op == 1 ? WEFT_MAX : WEFT_AVG;
                check_allreduce(c, cnt, o, (ci + op) % 2, ci * 3 + op);
                /* shm, shm_chunked: one sequence number per slot-sized
                 * piece; shm_allread: two from 3 ranks on (two rounds over
                 * WEFT_SHM_RADIX ranks), and over a slot it declines (the
                 * next candidate, shm in pieces, runs); shm_ll: one, and
                 * over WEFT_SHM_LL_MAX it declines (shm runs) */
                int64_t slot = (int64_t)WEFT_SHM_SLOT;
                uint64_t ran = shm_ops(c) - before, want = size > 1 ? (uint64_t)((cnt * 4 + slot - 1) / slot) : 0;
                if (alg == 1 && cnt * 4 <= slot) want = size < 2 || cnt == 0 ? 0 : size > 2 ? 2 : 1;
                TH_CHECK(ran == want, "allreduce %s count %lld: shm ran %llu pieces, not %llu", algs[alg],
                         (long long)cnt, (unsigned long long)ran, (unsigned long long)want);
            }
        TH_OK(weft_comm_free(&c));
    }
    /* reduce: every root, SUM. */
    c = forced("reduce", "shm");
    for (int ci = 0; ci < NCOUNTS; ci++) {
        int64_t n = counts[ci];
        int root = ci % size;
        int32_t *in = malloc(4 * (size_t)(n + 1)), *out = calloc((size_t)n + 1, 4);
        for (int64_t i = 0; i < n; i++)
            in[i] = val(rank, (size_t)i, ci);
        if (rank == root && ci % 2) memcpy(out, in, 4 * (size_t)n);
        TH_OK(weft_reduce(rank == root && ci % 2 ? WEFT_IN_PLACE : in, out, n, WEFT_INT32, WEFT_SUM, root, c));
        for (int64_t i = 0; rank == root && i < n; i++) {
            int want = 0;
            for (int r = 0; r < size; r++)
                want += val(r, (size_t)i, ci);
            TH_CHECK(out[i] == want, "reduce n %lld root %d elem %lld", (long long)n, root, (long long)i);
        }
        free(in);
        free(out);
    }
    TH_OK(weft_comm_free(&c));
    /* bcast, allgather: bytes, in the head line and one over, up to a
     * slot and one over, four pieces (allgather declines over a slot: the
     * next candidate runs). */
    c = forced("bcast", "shm");
    weft_comm_t g = forced("allgather", "shm");
    static const int64_t bytes[] = {0, 1, 13, 48, 49, 65536, 65537, 3 * 65536 + 100};
    for (int bi = 0; bi < 8; bi++) {
        int64_t n = bytes[bi];
        int root = (bi + 1) % size;
        unsigned char *b = malloc((size_t)n + 1), *all = malloc((size_t)(n + 1) * (size_t)size);
        if (rank == root) th_fill(b, (size_t)n, 100u + (unsigned)bi);
        TH_OK(weft_bcast(b, n, WEFT_BYTE, root, c));
        TH_CHECK(th_verify(b, (size_t)n, 100u + (unsigned)bi, NULL), "bcast %lld bytes root %d", (long long)n, root);
        th_fill(all + (size_t)rank * (size_t)n, (size_t)n, 200u + (unsigned)(bi * 64 + rank));
        TH_OK(weft_allgather(WEFT_IN_PLACE, all, n, WEFT_BYTE, g));
        for (int r = 0; r < size; r++)
            TH_CHECK(th_verify(all + (size_t)r * (size_t)n, (size_t)n, 200u + (unsigned)(bi * 64 + r), NULL),
                     "allgather %lld bytes block %d", (long long)n, r);
        free(b);
        free(all);
    }
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_comm_free(&g));
    /* reduce_scatter (uneven blocks, one empty) and _block; barrier. */
    c = forced("reduce_scatter", "shm");
    g = forced("reduce_scatter_block", "shm");
    for (int ci = 0; ci < NCOUNTS; ci++) {
        int64_t rc[64], total = 0, off = 0, blk = counts[ci] / (size > 1 ? size : 1);
        for (int r = 0; r < size; r++) {
            rc[r] = r == 1 ? 0 : counts[ci] / size + (r % 2);
            if (r < rank) off += rc[r];
            total += rc[r];
        }
        int32_t *in = malloc(4 * (size_t)(total + blk * size + 1)), *out = malloc(4 * (size_t)(total + 1));
        for (int pass = 0; pass < 2; pass++) {
            int64_t t = pass ? blk * size : total, o = pass ? blk * rank : off, mine = pass ? blk : rc[rank];
            for (int64_t i = 0; i < t; i++)
                in[i] = val(rank, (size_t)i, ci + pass);
            if (pass)
                TH_OK(weft_reduce_scatter_block(in, out, blk, WEFT_INT32, WEFT_SUM, g));
            else
                TH_OK(weft_reduce_scatter(WEFT_IN_PLACE, (memcpy(out, in, 4 * (size_t)t), out), rc, WEFT_INT32,
                                          WEFT_SUM, c));
            for (int64_t i = 0; i < mine; i++) {
                int want = 0;
                for (int r = 0; r < size; r++)
                    want += val(r, (size_t)(o + i), ci + pass);
                TH_CHECK(out[i] == want, "reduce_scatter%s total %lld elem %lld", pass ? "_block" : "", (long long)t,
                         (long long)i);
            }
        }
        free(in);
        free(out);
    }
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_comm_free(&g));
    /* Nobody leaves a barrier before the last rank arrived: one rank (a
     * different one each time) arrives late; arrival and exit times
     * (CLOCK_MONOTONIC, one clock for the host) are compared afterwards.
     * Both shapes. */
    for (int alg = 0; alg < 2; alg++) {
        c = forced("barrier", alg ? "shm_allread" : "shm");
        double times[2 * 20], *all = malloc(sizeof(double) * 2 * 20 * (size_t)size);
        TH_CHECK(all != NULL, "out of memory");
        for (int i = 0; i < 20; i++) {
            if (rank == i % size) usleep(2000);
            times[2 * i] = weft_wtime();
            TH_OK(weft_barrier(c));
            times[2 * i + 1] = weft_wtime();
        }
        TH_CHECK(size == 1 || shm_ops(c) == 20, "barrier: %llu shm ops", (unsigned long long)shm_ops(c));
        TH_OK(weft_allgather(times, all, 2 * 20, WEFT_FLOAT64, weft_comm_world()));
        for (int i = 0; i < 20; i++)
            for (int r = 0; r < size; r++)
                for (int q = 0; q < size; q++)
                    TH_CHECK(all[(size_t)q * 40 + 2 * (size_t)i + 1] >= all[(size_t)r * 40 + 2 * (size_t)i],
                             "barrier %s %d: rank %d left at %.6f before rank %d arrived at %.6f",
                             alg ? "shm_allread" : "shm", i, q, all[(size_t)q * 40 + 2 * (size_t)i + 1], r,
                             all[(size_t)r * 40 + 2 * (size_t)i]);
        free(all);
        TH_OK(weft_comm_free(&c));
    }
    TH_OK(weft_finalize());
    return 0;
}

/* 1000 back-to-back allreduces (small and chunked, data changing every
 * time), with bcasts of a rotating root and allgathers between them: a
 * fast rank reuses slots while slow ones still read the previous ones. */
static int body_reuse(int rank, int size, void *arg)
{
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    int32_t in[700], out[700], all[64 * 4];
    uint64_t want_ops = 0;
    for (int it = 0; it < 1000; it++) {
        int n = it % 3 == 2 ? 700 : 1 + it % 17;
        /* the default table: shm_allread below 2 KiB on up to 8 ranks (two
         * sequence numbers from 3 ranks on), else shm (one) */
        want_ops += n * 4 < 2048 && size <= 8 && size > 2 ? 2 : 1;
        if (it % 10 == 0) want_ops += 2;
        for (int i = 0; i < n; i++)
            in[i] = val(rank, (size_t)i, it);
        TH_OK(weft_allreduce(in, out, n, WEFT_INT32, WEFT_SUM, w));
        for (int i = 0; i < n; i++) {
            int want = 0;
            for (int r = 0; r < size; r++)
                want += val(r, (size_t)i, it);
            TH_CHECK(out[i] == want, "iteration %d elem %d: %d != %d", it, i, out[i], want);
        }
        if (it % 10 == 0) {
            int32_t b[4] = {it, it + 1, rank, -it};
            TH_OK(weft_bcast(b, 4, WEFT_INT32, it % size, w));
            TH_CHECK(b[0] == it && b[2] == it % size, "bcast iteration %d", it);
            TH_OK(weft_allgather(b, all, 4, WEFT_INT32, w));
            for (int r = 0; r < size; r++)
                TH_CHECK(all[r * 4] == it && all[r * 4 + 2] == it % size, "allgather iteration %d", it);
        }
    }
    TH_CHECK(size == 1 || shm_ops(w) == want_ops, "default selection ran %llu shm collectives, not %llu",
             (unsigned long long)shm_ops(w), (unsigned long long)want_ops);
    TH_OK(weft_finalize());
    return 0;
}

/* Roots that lag: reduce's non-roots and bcast's root leave at once, so
 * fast ranks run up to WEFT_SHM_NBUF - 1 collectives ahead and must then
 * wait for the slow ones before reusing a slot. Rotating roots, a root
 * that sleeps now and then, results checked every time. */
static int body_runahead(int rank, int size, void *arg)
{
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t r = forced("reduce", "shm"), b = forced("bcast", "shm");
    weft_comm_t w = weft_comm_world();
    for (int it = 0; it < 300; it++) {
        int root = it % size, n = 1 + it % 37;
        int32_t in[40], out[40], bb[40];
        for (int i = 0; i < n; i++)
            in[i] = val(rank, (size_t)i, it);
        if (rank == root && it % 7 == 3) usleep(2000);
        TH_OK(weft_reduce(in, out, n, WEFT_INT32, WEFT_SUM, root, r));
        if (rank == root)
            for (int i = 0; i < n; i++) {
                int want = 0;
                for (int q = 0; q < size; q++)
                    want += val(q, (size_t)i, it);
                TH_CHECK(out[i] == want, "reduce iteration %d root %d elem %d: %d != %d", it, root, i, out[i], want);
            }
        if (rank != root && it % 11 == 5) usleep(1000);
        for (int i = 0; i < n; i++)
            bb[i] = rank == root ? it * 100 + i : -1;
        TH_OK(weft_bcast(bb, n, WEFT_INT32, root, b));
        for (int i = 0; i < n; i++)
            TH_CHECK(bb[i] == it * 100 + i, "bcast iteration %d root %d elem %d: %d", it, root, i, bb[i]);
        if (it % 50 == 49) TH_OK(weft_barrier(w));
        if (it % 25 == 7) { /* pipelined pieces: 10 (bcast) and 3 (reduce), the root late */
            static int32_t big[150000], bout[40000];
            for (int i = 0; i < 150000; i++)
                big[i] = rank == root ? it * 7 + i : -1;
            if (rank == root) usleep(1000);
            TH_OK(weft_bcast(big, 150000, WEFT_INT32, root, b));
            for (int i = 0; i < 150000; i++)
                if (big[i] != it * 7 + i) {
                    TH_CHECK(0, "big bcast iteration %d root %d elem %d: %d", it, root, i, big[i]);
                    break;
                }
            for (int i = 0; i < 40000; i++)
                big[i] = val(rank, (size_t)i, it);
            TH_OK(weft_reduce(big, bout, 40000, WEFT_INT32, WEFT_SUM, root, r));
            for (int i = 0; rank == root && i < 40000; i++) {
                int want = 0;
                for (int q = 0; q < size; q++)
                    want += val(q, (size_t)i, it);
                if (bout[i] != want) {
                    TH_CHECK(0, "big reduce iteration %d root %d elem %d: %d != %d", it, root, i, bout[i], want);
                    break;
                }
            }
        }
    }
    /* 300 each, and 12 big ones of 3 (reduce) and 10 (bcast) pieces */
    TH_CHECK(size == 1 || (shm_ops(r) == 300 + 12 * 3 && shm_ops(b) == 300 + 12 * 10),
             "shm ran %llu reduce and %llu bcast pieces, not 336 and 420", (unsigned long long)shm_ops(r),
             (unsigned long long)shm_ops(b));
    TH_OK(weft_comm_free(&r));
    TH_OK(weft_comm_free(&b));
    TH_OK(weft_finalize());
    return 0;
}

/* Nonblocking shm collectives (more in flight than slot buffers) with a
 * ring of user messages. */
static int body_nonblocking(int rank, int size, void *arg)
{
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    for (int rep = 0; rep < 20; rep++) {
        weft_request_t req[8];
        int32_t a[3] = {rank, 1, rep}, ar[3], b[5], g[64], x[2] = {rank, rep}, y[2] = {-1, -1}, bar;
        if (rank == rep % size)
            for (int i = 0; i < 5; i++)
                b[i] = rep * 10 + i;
        int nr = 0;
        TH_OK(weft_irecv(y, 2, WEFT_INT32, (rank + size - 1) % size, 7, w, &req[nr++]));
        TH_OK(weft_iallreduce(a, ar, 3, WEFT_INT32, WEFT_SUM, w, &req[nr++]));
        TH_OK(weft_ibcast(b, 5, WEFT_INT32, rep % size, w, &req[nr++]));
        TH_OK(weft_ibarrier(w, &req[nr++]));
        TH_OK(weft_iallgather(&rank, g, 1, WEFT_INT32, w, &req[nr++]));
        TH_OK(weft_isend(x, 2, WEFT_INT32, (rank + 1) % size, 7, w, &req[nr++]));
        TH_OK(weft_iallreduce(WEFT_IN_PLACE, &bar, 0, WEFT_INT32, WEFT_SUM, w, &req[nr++]));
        TH_OK(weft_waitall(nr, req, NULL));
        TH_CHECK(ar[0] == size * (size - 1) / 2 && ar[1] == size && ar[2] == rep * size, "iallreduce rep %d: %d %d %d",
                 rep, ar[0], ar[1], ar[2]);
        for (int i = 0; i < 5; i++)
            TH_CHECK(b[i] == rep * 10 + i, "ibcast rep %d", rep);
        for (int r = 0; r < size; r++)
            TH_CHECK(g[r] == r, "iallgather rep %d", rep);
        TH_CHECK(y[0] == (rank + size - 1) % size && y[1] == rep, "ring message rep %d", rep);
    }
    TH_OK(weft_finalize());
    return 0;
}

/* Blocking shared-memory collectives run on the caller's stack and hand
 * over to the ordinary wait when they spin too long: a blocking barrier
 * and allreduce issued while nonblocking shm collectives and a user
 * message are still in flight (the blocking one waits for them, and its
 * polling must keep them moving), and a rank that arrives 50 ms late
 * (everyone else hands over and still finishes). */
static int body_blocking_behind(int rank, int size, void *arg)
{
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    for (int rep = 0; rep < 10; rep++) {
        weft_request_t req[4];
        int32_t a[2] = {rank, rep}, ar[2], x = rank * 100 + rep, y = -1, s1 = rank + 1, s2 = 0;
        int nr = 0;
        TH_OK(weft_irecv(&y, 1, WEFT_INT32, (rank + size - 1) % size, 3, w, &req[nr++]));
        TH_OK(weft_iallreduce(a, ar, 2, WEFT_INT32, WEFT_SUM, w, &req[nr++]));
        TH_OK(weft_ibarrier(w, &req[nr++]));
        if (rep % 3 == 1 && rank == rep % size) usleep(50000); /* late: the others hand over */
        TH_OK(weft_barrier(w));
        TH_OK(weft_allreduce(&s1, &s2, 1, WEFT_INT32, WEFT_SUM, w));
        TH_CHECK(s2 == size * (size + 1) / 2, "blocking allreduce rep %d: %d", rep, s2);
        TH_OK(weft_isend(&x, 1, WEFT_INT32, (rank + 1) % size, 3, w, &req[nr++]));
        TH_OK(weft_waitall(nr, req, NULL));
        TH_CHECK(ar[0] == size * (size - 1) / 2 && ar[1] == rep * size, "iallreduce rep %d: %d %d", rep, ar[0], ar[1]);
        TH_CHECK(y == ((rank + size - 1) % size) * 100 + rep, "ring message rep %d: %d", rep, y);
    }
    TH_OK(weft_finalize());
    return 0;
}

/* Simulated nodes of two: world spans nodes (shm declines, the base
 * algorithm gives the right answer); a node communicator runs shm. */
static int body_nodes(int rank, int size, void *arg)
{
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t c = forced("allreduce", "shm"), node;
    check_allreduce(c, 100, WEFT_SUM, 0, 1);
    TH_CHECK(shm_ops(c) == 0 && weft_coll_state(c, WEFT_COLL_COMP_SHM) == NULL,
             "shm ran on a communicator spanning nodes");
    TH_OK(weft_comm_split_type(c, WEFT_SPLIT_NODE, rank, NULL, &node));
    check_allreduce(node, 100, WEFT_SUM, 0, 2);
    int ns;
    TH_OK(weft_comm_size(node, &ns));
    TH_CHECK(ns == 2 && shm_ops(node) == 1, "the node communicator (%d ranks) did not use shm", ns);
    TH_OK(weft_comm_free(&node));
    TH_OK(weft_comm_free(&c));
    (void)size;
    TH_OK(weft_finalize());
    return 0;
}

/* shm_cma (single copy, process_vm_readv) bcast and allgather from a full
 * slot on: every root, contiguous and in place, checked exactly; with
 * CMA usable each call runs as one shared-memory collective, otherwise
 * (and on one rank, or on simulated nodes of one rank) the base
 * algorithm runs and the result is the same. */
static int body_cma(int rank, int size, void *arg)
{
    int nodes = arg != NULL; /* WEFT_RANKS_PER_NODE=1: must decline */
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t c = forced("bcast", "shm_cma"), g = forced("allgather", "shm_cma");
    int cma = size > 1 && !nodes && weft_shm_cma_usable(); /* WEFT_SHM_CMA=0: 0 */
    static const size_t sizes[] = {16384, 16385, (1u << 20) + 13};
    for (int si = 0; si < 3; si++) {
        size_t n = sizes[si];
        unsigned char *b = malloc(n), *all = malloc(n * (size_t)size), *mine = malloc(n);
        for (int root = 0; root < size; root++) {
            unsigned seed = 300u + (unsigned)(si * 16 + root);
            if (rank == root)
                th_fill(b, n, seed);
            else
                memset(b, 0xa5, n);
            uint64_t before = shm_ops(c);
            TH_OK(weft_bcast(b, (int64_t)n, WEFT_BYTE, root, c));
            TH_CHECK(th_verify(b, n, seed, NULL), "bcast %zu bytes root %d", n, root);
            /* declined: the default's next candidate ran (the slot algorithm, or a base one) */
            TH_CHECK(!cma || shm_ops(c) == before + 1, "bcast %zu bytes: shm_cma took %llu sequence numbers, not 1", n,
                     (unsigned long long)(shm_ops(c) - before));
        }
        for (int inplace = 0; inplace < 2; inplace++) {
            unsigned seed = 400u + (unsigned)(si * 4 + inplace) * 64u;
            memset(all, 0xa5, n * (size_t)size);
            th_fill(inplace ? all + (size_t)rank * n : mine, n, seed + (unsigned)rank);
            uint64_t before = shm_ops(g);
            TH_OK(weft_allgather(inplace ? WEFT_IN_PLACE : mine, all, (int64_t)n, WEFT_BYTE, g));
            for (int r = 0; r < size; r++)
                TH_CHECK(th_verify(all + (size_t)r * n, n, seed + (unsigned)r, NULL), "allgather %zu bytes%s block %d",
                         n, inplace ? " in place" : "", r);
            TH_CHECK(shm_ops(g) == before + (uint64_t)cma, "allgather %zu bytes: shm_cma ran %llu times (expected %d)",
                     n, (unsigned long long)(shm_ops(g) - before), cma);
        }
        free(b);
        free(all);
        free(mine);
    }
    /* allreduce: chunks of uneven length (a count no rank count divides),
     * several pieces per chunk, in place, and an AVG in fp32. */
    weft_comm_t ar = forced("allreduce", "shm_cma");
    static const int64_t acounts[] = {4096, 4099, (1 << 18) + 13};
    for (int ci = 0; ci < 3; ci++) {
        int64_t n = acounts[ci];
        int32_t *in = malloc(sizeof(int32_t) * (size_t)n), *out = malloc(sizeof(int32_t) * (size_t)n);
        float *f = malloc(sizeof(float) * (size_t)n);
        for (int inplace = 0; inplace < 2; inplace++) {
            for (int64_t i = 0; i < n; i++)
                in[i] = val(rank, (size_t)i, ci + inplace);
            uint64_t before = shm_ops(ar);
            TH_OK(weft_allreduce(inplace ? WEFT_IN_PLACE : in, inplace ? in : out, n, WEFT_INT32, WEFT_SUM, ar));
            int32_t *res = inplace ? in : out;
            for (int64_t i = 0; i < n; i++) {
                int want = 0;
                for (int r = 0; r < size; r++)
                    want += val(r, (size_t)i, ci + inplace);
                if (res[i] != want) {
                    TH_CHECK(0, "allreduce shm_cma %lld%s elem %lld: %d != %d", (long long)n,
                             inplace ? " in place" : "", (long long)i, res[i], want);
                    break;
                }
            }
            TH_CHECK(!cma || shm_ops(ar) == before + 1, "allreduce %lld: shm_cma took %llu sequence numbers, not 1",
                     (long long)n, (unsigned long long)(shm_ops(ar) - before));
        }
        for (int64_t i = 0; i < n; i++)
            f[i] = (float)(rank * 4);
        TH_OK(weft_allreduce(WEFT_IN_PLACE, f, n, WEFT_FLOAT32, WEFT_AVG, ar));
        for (int64_t i = 0; i < n; i++)
            if (f[i] != (float)(2 * (size - 1))) {
                TH_CHECK(0, "allreduce shm_cma AVG %lld elem %lld: %g", (long long)n, (long long)i, (double)f[i]);
                break;
            }
        free(in);
        free(out);
        free(f);
    }
    if (nodes)
        TH_CHECK(weft_coll_state(ar, WEFT_COLL_COMP_SHM) == NULL,
                 "allreduce shm_cma ran on a communicator spanning nodes");
    TH_OK(weft_comm_free(&ar));
    /* reduce_scatter_block and reduce_scatter (uneven blocks, an empty one,
     * several pieces per block), contiguous and in place (the input in the
     * receive buffer, the block moved to its start), and a MAX. */
    weft_comm_t rsb = forced("reduce_scatter_block", "shm_cma"), rsv = forced("reduce_scatter", "shm_cma");
    static const int64_t bcounts[] = {4096, 4099, (1 << 16) + 13};
    for (int ci = 0; ci < 3; ci++) {
        int64_t *rcounts = malloc(sizeof(int64_t) * (size_t)size), total = 0, off = 0;
        for (int r = 0; r < size; r++) {
            rcounts[r] = r == 1 ? 0 : bcounts[ci] + r * 7; /* rank 1's block empty */
            if (r == rank) off = total;
            total += rcounts[r];
        }
        int64_t most = total > bcounts[ci] * size ? total : bcounts[ci] * size;
        int32_t *in = malloc(sizeof(int32_t) * (size_t)most), *out = malloc(sizeof(int32_t) * (size_t)most);
        for (int v = 0; v < 2; v++) { /* reduce_scatter_block, reduce_scatter */
            weft_comm_t rc_comm = v ? rsv : rsb;
            int64_t blk = v ? rcounts[rank] : bcounts[ci], len = v ? total : bcounts[ci] * size;
            int64_t first = v ? off : (int64_t)rank * bcounts[ci];
            for (int inplace = 0; inplace < 2; inplace++) {
                int salt = 10 + ci * 4 + v * 2 + inplace;
                for (int64_t i = 0; i < len; i++)
                    (inplace ? out : in)[i] = val(rank, (size_t)i, salt);
                const void *send = inplace ? WEFT_IN_PLACE : in;
                uint64_t before = shm_ops(rc_comm);
                if (v)
                    TH_OK(weft_reduce_scatter(send, out, rcounts, WEFT_INT32, WEFT_SUM, rc_comm));
                else
                    TH_OK(weft_reduce_scatter_block(send, out, blk, WEFT_INT32, WEFT_SUM, rc_comm));
                for (int64_t i = 0; i < blk; i++) {
                    int want = 0;
                    for (int r = 0; r < size; r++)
                        want += val(r, (size_t)(first + i), salt);
                    if (out[i] != want) {
                        TH_CHECK(0, "%s shm_cma %lld%s elem %lld: %d != %d",
                                 v ? "reduce_scatter" : "reduce_scatter_block", (long long)len,
                                 inplace ? " in place" : "", (long long)i, out[i], want);
                        break;
                    }
                }
                TH_CHECK(!cma || shm_ops(rc_comm) == before + 1,
                         "reduce_scatter %lld: shm_cma took %llu sequence numbers, not 1", (long long)len,
                         (unsigned long long)(shm_ops(rc_comm) - before));
            }
        }
        float *f = malloc(sizeof(float) * (size_t)(bcounts[ci] * size));
        for (int64_t i = 0; i < bcounts[ci] * size; i++)
            f[i] = (float)((rank + (int)i) % size);
        TH_OK(weft_reduce_scatter_block(WEFT_IN_PLACE, f, bcounts[ci], WEFT_FLOAT32, WEFT_MAX, rsb));
        for (int64_t i = 0; i < bcounts[ci]; i++)
            if (f[i] != (float)(size - 1)) {
                TH_CHECK(0, "reduce_scatter_block shm_cma MAX %lld elem %lld: %g", (long long)bcounts[ci], (long long)i,
                         (double)f[i]);
                break;
            }
        free(f);
        free(in);
        free(out);
        free(rcounts);
    }
    if (nodes)
        TH_CHECK(weft_coll_state(rsb, WEFT_COLL_COMP_SHM) == NULL && weft_coll_state(rsv, WEFT_COLL_COMP_SHM) == NULL,
                 "reduce_scatter shm_cma ran on a communicator spanning nodes");
    TH_OK(weft_comm_free(&rsb));
    TH_OK(weft_comm_free(&rsv));
    /* alltoall: blocks of odd sizes and several pages, contiguous and in
     * place (each rank lends a copy made at post time). */
    weft_comm_t at = forced("alltoall", "shm_cma");
    static const size_t tsizes[] = {1, 16385, (1u << 18) + 13};
    for (int si = 0; si < 3; si++) {
        size_t n = tsizes[si], all = n * (size_t)size;
        unsigned char *in = malloc(all), *out = malloc(all);
        for (int inplace = 0; inplace < 2; inplace++) {
            unsigned seed = 500u + (unsigned)(si * 2 + inplace) * 4096u;
            unsigned char *src = inplace ? out : in;
            for (int r = 0; r < size; r++) /* block r: what this rank sends rank r */
                th_fill(src + (size_t)r * n, n, seed + (unsigned)(rank * 64 + r));
            if (!inplace) memset(out, 0xa5, all);
            uint64_t before = shm_ops(at);
            TH_OK(weft_alltoall(inplace ? WEFT_IN_PLACE : in, out, (int64_t)n, WEFT_BYTE, at));
            for (int r = 0; r < size; r++) /* block r: what rank r sent this rank */
                TH_CHECK(th_verify(out + (size_t)r * n, n, seed + (unsigned)(r * 64 + rank), NULL),
                         "alltoall %zu bytes%s block %d", n, inplace ? " in place" : "", r);
            TH_CHECK(!cma || shm_ops(at) == before + 1, "alltoall %zu bytes: shm_cma took %llu sequence numbers, not 1",
                     n, (unsigned long long)(shm_ops(at) - before));
        }
        free(in);
        free(out);
    }
    if (nodes)
        TH_CHECK(weft_coll_state(at, WEFT_COLL_COMP_SHM) == NULL,
                 "alltoall shm_cma ran on a communicator spanning nodes");
    TH_OK(weft_comm_free(&at));
    if (nodes)
        TH_CHECK(weft_coll_state(c, WEFT_COLL_COMP_SHM) == NULL && weft_coll_state(g, WEFT_COLL_COMP_SHM) == NULL,
                 "shm_cma ran on a communicator spanning nodes");
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_comm_free(&g));
    TH_OK(weft_finalize());
    return 0;
}

/* bcast_shm_cma with a rank that expects another length (an erroneous
 * call): that rank gets WEFT_ERR_ARG naming both lengths, its child in the
 * tree (radix 2: rank 3 under rank 2) fails because its parent did, the
 * others get the message, nobody hangs; the communicator's shared-memory
 * sequence is then broken on ranks 2 and 3, so the next shared-memory
 * collective fails at once on every rank (ranks 2 and 3 at its start, the
 * others seeing rank 2's record in the segment) instead of at the deadline. */
static int body_cma_mismatch(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    TH_OK(weft_init(NULL, NULL));
    if (!weft_shm_cma_usable()) return weft_finalize(); /* shm_cma declines here: nothing to test */
    weft_comm_t c = forced("bcast", "shm_cma");
    static unsigned char b[40000];
    if (rank == 0) th_fill(b, 32768, 77u);
    int rc = weft_bcast(b, rank == 2 ? 32769 : 32768, WEFT_BYTE, 0, c);
    if (rank == 2)
        TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), "rank 0 (this rank's parent in the tree of root 0) "
                                                                 "has a 32768-byte message, this rank's is 32769"),
                 "rank 2: %d (%s)", rc, weft_last_error());
    else if (rank == 3) /* its parent's wrong length, or its parent's failure, whichever it sees first */
        TH_CHECK(rc != 0 && strstr(weft_last_error(), "rank 2 (this rank's parent in the tree of root 0)"),
                 "rank 3: %d (%s)", rc, weft_last_error());
    else {
        TH_CHECK(rc == 0, "rank %d: %d (%s)", rank, rc, weft_last_error());
        TH_CHECK(th_verify(b, 32768, 77u, NULL), "rank %d: wrong data", rank);
    }
    double t0 = weft_wtime();
    rc = weft_barrier(c);
    TH_CHECK(rc == WEFT_ERR_COMM && strstr(weft_last_error(), "fails at once") && weft_wtime() - t0 < 5,
             "rank %d: the barrier after: %d after %.1f s (%s)", rank, rc, weft_wtime() - t0, weft_last_error());
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_finalize());
    return 0;
}

/* Ranks that pass different counts to a slot bcast or allreduce (an
 * erroneous call) get WEFT_ERR_ARG naming both lengths instead of wrong
 * bytes, and nobody hangs. Rank 2 passes more (with `also3`, rank 3 too).
 * Flat bcast: only rank 2 reads the root's length. Tree bcast (radix 2:
 * rank 2's child is rank 3) of one and of several pieces: rank 2 and its
 * child fail (also when the child passed what rank 2 did: rank 2 passes a
 * bad mark down, not its own length, which rank 3's would match, and rank
 * 3 took rank 2's stale slot for the message). Allreduce up the tree: the
 * root (rank 2's parent) and rank 2 see it, and the root marks its result
 * bad, so all fail; chunked allreduce, allgather and reduce_scatter: every
 * rank checks every length, so all fail. A bcast's pieces go down the tree
 * here (WEFT_SHM_FLAT_PIECES=0); read straight from the root's slot (the
 * default on up to 16 ranks), only rank 2 reads the root's length, as in a
 * flat bcast of one piece (the `flat_pieces` cases). */
typedef struct {
    const char *coll;
    const char *alg;
    int64_t count; /* rank 2: count + extra */
    int64_t extra;
    int fail[4];     /* which ranks must fail */
    int also3;       /* rank 3 passes rank 2's count */
    int flat_pieces; /* WEFT_SHM_FLAT_PIECES=16 instead of 0 */
} mismatch_t;

static int body_mismatch(int rank, int size, void *arg)
{
    const mismatch_t *m = arg;
    (void)size;
    TH_OK(weft_init(NULL, NULL));
    if (!strcmp(m->alg, "shm_cma") && !weft_shm_cma_usable()) return weft_finalize();
    weft_comm_t c = forced(m->coll, m->alg);
    int64_t n = m->count + (rank == 2 || (rank == 3 && m->also3) ? m->extra : 0);
    static int32_t in[60000], out[4 * 60000];
    for (int64_t i = 0; i < n; i++)
        in[i] = (int32_t)(i + 1);
    int rc;
    if (!strcmp(m->coll, "bcast"))
        rc = weft_bcast(in, n, WEFT_INT32, 0, c);
    else if (!strcmp(m->coll, "allgather"))
        rc = weft_allgather(in, out, n, WEFT_INT32, c);
    else if (!strcmp(m->coll, "reduce_scatter_block"))
        rc = weft_reduce_scatter_block(in, out, n / 4, WEFT_INT32, WEFT_SUM, c);
    else
        rc = weft_allreduce(in, out, n, WEFT_INT32, WEFT_SUM, c);
    if (m->fail[rank])
        TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), "the ranks passed different counts"),
                 "%s count %lld rank %d: %d (%s)", m->coll, (long long)n, rank, rc, weft_last_error());
    else
        TH_CHECK(rc == 0, "%s count %lld rank %d: %d (%s)", m->coll, (long long)n, rank, rc, weft_last_error());
    TH_OK(weft_comm_free(&c)); /* its shared-memory sequence is out of step now */
    TH_OK(weft_finalize());
    return 0;
}

static void run_mismatch(const mismatch_t *m)
{
    static const char *const tree[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=10", "WEFT_SHM_RADIX=2",
                                       "WEFT_SHM_FLAT_PIECES=0", NULL};
    static const char *const flat[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=10", "WEFT_SHM_RADIX=2",
                                       "WEFT_SHM_FLAT_PIECES=16", NULL};
    th_result_t res = th_run(4, body_mismatch, (void *)m, 30, m->flat_pieces ? flat : tree);
    cr_assert_eq(res.timed_out, 0, "%s: hung", m->coll);
    cr_assert_eq(res.failed, 0, "%s %s count %lld, rank 2 %+lld, %s", m->coll, m->alg, (long long)m->count,
                 (long long)m->extra, m->flat_pieces ? "flat pieces" : "pieces down the tree");
}

Test(shm, mismatched_counts, .timeout = 120)
{
    static const mismatch_t cases[] = {
        {"bcast", "shm", 5, 1, {0, 0, 1, 0}, 0, 0},          /* flat, in the head line */
        {"bcast", "shm", 1000, 1, {0, 0, 1, 1}, 0, 0},       /* down the tree (4000 bytes) */
        {"bcast", "shm", 1000, 1, {0, 0, 1, 1}, 1, 0},       /* rank 3 as rank 2: rank 2's bad mark fails it */
        {"allreduce", "shm", 5, 1, {1, 1, 1, 1}, 1, 0},      /* ranks 2 and 3 alike: the root sees rank 2 differ */
        {"bcast", "shm", 20000, 20000, {0, 0, 1, 1}, 0, 0},  /* 2 pieces against 3 */
        {"bcast", "shm", 20000, -19990, {0, 0, 1, 1}, 0, 0}, /* the root's 2 pieces against 1: it waited for rank 2 */
        {"bcast", "shm", 20000, -19990, {0, 0, 1, 0}, 0, 1}, /* the same, read from the root's slot */
        {"bcast", "shm", 20000, 20000, {0, 0, 1, 0}, 0, 1},  /* the same, every piece read from the root's slot */
        {"bcast", "shm", 20000, 20000, {0, 0, 1, 1}, 1, 1},  /* rank 3 as rank 2: it reads the root's length, fails */
        {"allreduce", "shm", 5, 1, {1, 1, 1, 1}, 0, 0},      /* up the tree to rank 0, which marks its result bad */
        {"allreduce", "shm", 1000, 4, {1, 1, 1, 1}, 0, 0},   /* chunked: every rank checks every length */
        {"allreduce", "shm", 20000, 20000, {1, 1, 1, 1}, 0, 0}, /* chunked, 2 pieces against 3 */
        {"allgather", "shm", 100, 1, {1, 1, 1, 1}, 0, 0},
        {"reduce_scatter_block", "shm", 400, 4, {1, 1, 1, 1}, 0, 0},
        {"reduce_scatter_block", "shm_cma", 8192, 4, {1, 1, 1, 1}, 0, 0}, /* every rank reads every lend */
        {"allreduce", "shm_chunked", 5, 1, {1, 1, 1, 1}, 0, 0},  /* chunked below the threshold: every rank checks */
        {"allreduce", "shm_allread", 5, 1, {1, 1, 1, 1}, 0, 0},  /* every rank reads every length */
        {"allreduce", "shm_allread", 12, 1, {1, 1, 1, 1}, 0, 0}, /* 48 bytes in the head line against 52 in the body */
        {"allreduce", "shm_ll", 5, 1, {1, 1, 1, 1}, 0, 0},       /* one line each: the owner sees two lengths */
        {"allreduce", "shm_ll", 14, 1, {1, 1, 1, 1}, 0, 0},      /* one line against two */
        {"allreduce", "shm_ll", 100, 300, {1, 1, 1, 1}, 0, 0},   /* 8 lines against 29: other owners */
        {"allreduce", "shm_ll", 1700, 100, {1, 1, 1, 1}, 0, 0},  /* rank 2 over its largest: shm runs there */
        {"allreduce", "shm_ll", 70, 14, {1, 1, 1, 1}, 0, 0}, /* 5 lines against 6: an owner's line only one writes */
    };
    for (int i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++)
        run_mismatch(&cases[i]);
}

/* Ranks that pass different datatypes or ops (with equal byte lengths:
 * float32 against int32, max against sum) to a shared-memory collective:
 * the signature that rides in the words that carried the length makes
 * every rank that reads another's word fail with WEFT_ERR_ARG naming what
 * differs, and a rank that found a difference passes it on (its word
 * marked bad), so where every rank reads some word that depends on every
 * member (allreduce, allgather, reduce_scatter) every rank fails. A bcast's
 * root and a reduce's leaves read nothing: they cannot tell (WEFT_COLL_CHECK
 * does). Rank 2 differs; radix 2 (rank 2's child is rank 3). Before, every
 * rank returned success (float SUM against int SUM gave 1 and 1065353218). */
enum { SIG_DTYPE, SIG_OP };
typedef struct {
    const char *coll;
    const char *alg;
    int64_t count;
    int what;    /* SIG_DTYPE: rank 2 passes float32 for int32; SIG_OP: max for sum */
    int fail[4]; /* which ranks must fail */
} sigcase_t;

static int body_sig_mismatch(int rank, int size, void *arg)
{
    const sigcase_t *m = arg;
    (void)size;
    TH_OK(weft_init(NULL, NULL));
    if (!strcmp(m->alg, "shm_cma") && !weft_shm_cma_usable()) return weft_finalize();
    weft_comm_t c = forced(m->coll, m->alg);
    weft_dtype_t d = rank == 2 && m->what == SIG_DTYPE ? WEFT_FLOAT32 : WEFT_INT32;
    weft_op_t op = rank == 2 && m->what == SIG_OP ? WEFT_MAX : WEFT_SUM;
    static int32_t in[8192], out[4 * 8192];
    for (int64_t i = 0; i < m->count; i++)
        in[i] = (int32_t)(i % 7 + rank);
    int rc;
    if (!strcmp(m->coll, "bcast"))
        rc = weft_bcast(in, m->count, d, 0, c);
    else if (!strcmp(m->coll, "reduce"))
        rc = weft_reduce(in, out, m->count, d, op, 0, c);
    else if (!strcmp(m->coll, "allgather"))
        rc = weft_allgather(in, out, m->count, d, c);
    else if (!strcmp(m->coll, "reduce_scatter_block"))
        rc = weft_reduce_scatter_block(in, out, m->count / 4, d, op, c);
    else if (!strcmp(m->coll, "alltoall"))
        rc = weft_alltoall(in, out, m->count / 4, d, c);
    else
        rc = weft_allreduce(in, out, m->count, d, op, c);
    const char *word = m->what == SIG_DTYPE ? "datatypes" : "ops";
    if (m->fail[rank])
        TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), word), "%s %s count %lld rank %d: %d (%s)", m->coll,
                 m->alg, (long long)m->count, rank, rc, weft_last_error());
    else
        TH_CHECK(rc == 0, "%s %s count %lld rank %d: %d (%s)", m->coll, m->alg, (long long)m->count, rank, rc,
                 weft_last_error());
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_finalize());
    return 0;
}

Test(shm, mismatched_signatures, .timeout = 200)
{
    static const sigcase_t cases[] = {
        {"allreduce", "shm", 4, SIG_DTYPE, {1, 1, 1, 1}}, /* up the tree: the root marks the result bad */
        {"allreduce", "shm", 4, SIG_OP, {1, 1, 1, 1}},
        {"allreduce", "shm", 1000, SIG_DTYPE, {1, 1, 1, 1}}, /* chunked: every rank checks every word */
        {"allreduce", "shm_chunked", 4, SIG_OP, {1, 1, 1, 1}},
        {"allreduce", "shm_allread", 4, SIG_DTYPE, {1, 1, 1, 1}},
        {"allreduce", "shm_allread", 4, SIG_OP, {1, 1, 1, 1}},
        {"allreduce", "shm_ll", 20, SIG_DTYPE, {1, 1, 1, 1}}, /* the owners of the lines see it */
        {"allreduce", "shm_ll", 20, SIG_OP, {1, 1, 1, 1}},
        {"allreduce", "shm_cma", 8192, SIG_DTYPE, {1, 1, 1, 1}},
        {"reduce", "shm", 4, SIG_OP, {1, 0, 1, 0}},      /* rank 2 sees its child's, the root rank 2's bad mark */
        {"bcast", "shm", 5, SIG_DTYPE, {0, 0, 1, 0}},    /* flat: only rank 2 reads a word unlike its own */
        {"bcast", "shm", 1000, SIG_DTYPE, {0, 0, 1, 1}}, /* down the tree: rank 2, then its child */
        {"bcast", "shm_cma", 8192, SIG_DTYPE, {0, 0, 1, 1}},
        {"allgather", "shm", 4, SIG_DTYPE, {1, 1, 1, 1}},
        {"allgather", "shm_cma", 8192, SIG_DTYPE, {1, 1, 1, 1}},
        {"reduce_scatter_block", "shm", 16, SIG_OP, {1, 1, 1, 1}},
        {"reduce_scatter_block", "shm_cma", 8192, SIG_OP, {1, 1, 1, 1}},
        {"reduce_scatter_block", "shm_cma", 8192, SIG_DTYPE, {1, 1, 1, 1}},
        {"alltoall", "shm_cma", 8192, SIG_DTYPE, {1, 1, 1, 1}},
    };
    /* a bcast beyond WEFT_SHM_FLAT_MAX goes down the tree only with WEFT_SHM_FLAT_PIECES=0 on 4 ranks */
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=10", "WEFT_SHM_RADIX=2",
                                      "WEFT_SHM_FLAT_PIECES=0", NULL};
    for (int i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++) {
        th_result_t res = th_run(4, body_sig_mismatch, (void *)&cases[i], 30, env);
        cr_assert_eq(res.timed_out, 0, "%s %s: hung", cases[i].coll, cases[i].alg);
        cr_assert_eq(res.failed, 0, "%s %s count %lld", cases[i].coll, cases[i].alg, (long long)cases[i].count);
    }
}

/* Counts on both sides of a selection threshold (an erroneous call): with
 * the default table, 2000 bytes run shm_allread and 2080 the shm
 * algorithm: up the tree on 3 ranks, chunked on 4 (and on 8 ranks, 1020
 * bytes shm_allread and 1024 shm_chunked). Every rank gets
 * WEFT_ERR_ARG at once (each sees a length marked for another algorithm
 * in a head it waits for: the allread ranks the tree rank's partial or
 * the chunked rank's input, the tree rank the root's result, the chunked
 * rank the allread ranks' inputs), none waits for the timeout. */
static int body_mixed_rules(int rank, int size, void *arg)
{
    const int *counts = arg; /* rank 2's, then the others' */
    (void)size;
    TH_OK(weft_init(NULL, NULL));
    static int32_t in[520], out[520];
    for (int i = 0; i < 520; i++)
        in[i] = i;
    double t0 = weft_wtime();
    int rc = weft_allreduce(in, out, rank == 2 ? counts[0] : counts[1], WEFT_INT32, WEFT_SUM, weft_comm_world());
    TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), "the ranks passed different counts"), "rank %d: %d (%s)",
             rank, rc, weft_last_error());
    TH_CHECK(weft_wtime() - t0 < 5, "rank %d: the error took %.1f s", rank, weft_wtime() - t0);
    TH_OK(weft_finalize());
    return 0;
}

static void run_mixed_rules(int n, int rank2, int others)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=20", NULL};
    int counts[2] = {rank2, others};
    run_ok(n, body_mixed_rules, counts, 40, env);
}
/* The same across the single-copy rule: after an alltoall every rank
 * ran with shm_cma (8 KiB blocks), rank 2 passes 8191 bytes (the slots
 * take it) and the others 8192. Its peers must not read its stale lend of
 * the previous call: every rank fails at once naming the other algorithm. */
static int body_mixed_cma(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    if (!weft_shm_cma_usable()) return weft_finalize();
    weft_comm_t c;
    TH_OK(weft_comm_dup(weft_comm_world(), WEFT_OPTIONS_NULL, &c));
    static unsigned char in[4 * 8192], out[4 * 8192];
    memset(in, rank, sizeof(in));
    TH_OK(weft_alltoall(in, out, 8192, WEFT_BYTE, c));
    double t0 = weft_wtime();
    int rc = weft_alltoall(in, out, rank == 2 ? 8191 : 8192, WEFT_BYTE, c);
    TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), "another shared-memory algorithm"), "rank %d: %d (%s)",
             rank, rc, weft_last_error());
    TH_CHECK(weft_wtime() - t0 < 5, "rank %d: the error took %.1f s", rank, weft_wtime() - t0);
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_finalize());
    return 0;
}

/* reduce_scatter with receive counts that differ but add up alike (an
 * erroneous call): the signature's root bits carry a hash of the counts,
 * so every rank fails naming them instead of reducing another rank's block
 * as its own. arg: the algorithm forced. */
static int body_rs_counts(int rank, int size, void *arg)
{
    (void)size;
    TH_OK(weft_init(NULL, NULL));
    if (!strcmp((const char *)arg, "shm_cma") && !weft_shm_cma_usable()) return weft_finalize();
    weft_comm_t c = forced("reduce_scatter", (const char *)arg);
    static const int64_t mine[4] = {2048, 1024, 512, 512}, rank2[4] = {1024, 2048, 512, 512};
    /* (their hashes' top bits, the signature's root field, differ in the 4 the slot words keep too) */
    TH_CHECK((weft_coll_counts_hash(mine, 4) >> 52 & 0xf) != (weft_coll_counts_hash(rank2, 4) >> 52 & 0xf),
             "the test's two count vectors hash alike");
    static int32_t in[4096], out[2048];
    for (int i = 0; i < 4096; i++)
        in[i] = i;
    int rc = weft_reduce_scatter(in, out, rank == 2 ? rank2 : mine, WEFT_INT32, WEFT_SUM, c);
    TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), "receive counts"), "%s rank %d: %d (%s)",
             (const char *)arg, rank, rc, weft_last_error());
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_finalize());
    return 0;
}

Test(shm, reduce_scatter_counts_mismatch, .timeout = 60)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=20", NULL};
    static const char *const algs[] = {"shm", "shm_cma"};
    for (int i = 0; i < 2; i++) {
        th_result_t res = th_run(4, body_rs_counts, (void *)algs[i], 40, env);
        cr_assert_eq(res.timed_out, 0, "%s: hung", algs[i]);
        cr_assert_eq(res.failed, 0, "%s", algs[i]);
    }
}

Test(shm, mixed_rules_fail_fast_cma, .timeout = 60)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=20", NULL};
    run_ok(4, body_mixed_cma, NULL, 40, env);
}
Test(shm, mixed_rules_fail_fast, .timeout = 60)
{
    run_mixed_rules(3, 520, 500);
}
Test(shm, mixed_rules_fail_fast_chunked, .timeout = 60)
{
    run_mixed_rules(4, 520, 500);
}
/* on 8 ranks 1 KiB goes chunked (shm_chunked), 1020 bytes shm_allread */
Test(shm, mixed_rules_fail_fast_shm_chunked, .timeout = 60)
{
    run_mixed_rules(8, 256, 255);
}
/* on 9 ranks 64 bytes go shm_ll, 60 shm_allread (two rounds) */
Test(shm, mixed_rules_fail_fast_shm_ll, .timeout = 60)
{
    run_mixed_rules(9, 16, 15);
}

#define RANKS_TEST(name, body, N, t)                                                                                   \
    Test(shm, name##_##N, .timeout = 60)                                                                               \
    {                                                                                                                  \
        th_result_t res = th_run(N, body, NULL, t, quiet_env);                                                         \
        cr_assert_eq(res.timed_out, 0, "hung");                                                                        \
        cr_assert_eq(res.failed, 0);                                                                                   \
    }
RANKS_TEST(forced, body_forced, 1, 30)
RANKS_TEST(forced, body_forced, 2, 30)
RANKS_TEST(forced, body_forced, 3, 30)
RANKS_TEST(forced, body_forced, 5, 30)
RANKS_TEST(forced, body_forced, 8, 40)
RANKS_TEST(reuse, body_reuse, 3, 30)
RANKS_TEST(reuse, body_reuse, 4, 30)
RANKS_TEST(nonblocking, body_nonblocking, 4, 30)
RANKS_TEST(blocking_behind, body_blocking_behind, 3, 30)
RANKS_TEST(blocking_behind, body_blocking_behind, 4, 30)
RANKS_TEST(runahead, body_runahead, 2, 30)
RANKS_TEST(runahead, body_runahead, 5, 30)

/* Deep trees: radix 2 and 3 on 7 ranks (three and two levels, groups
 * that do not fill up), every forced algorithm and the reuse loop; a
 * bcast's pieces down the tree too (WEFT_SHM_FLAT_PIECES=0). */
#define RADIX_TEST(name, body, N, R)                                                                                   \
    Test(shm, name##_##N##_radix##R, .timeout = 90)                                                                    \
    {                                                                                                                  \
        static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=30", "WEFT_SHM_RADIX=" #R,             \
                                          "WEFT_SHM_FLAT_PIECES=0", NULL};                                             \
        th_result_t res = th_run(N, body, NULL, 60, env);                                                              \
        cr_assert_eq(res.timed_out, 0, "hung");                                                                        \
        cr_assert_eq(res.failed, 0);                                                                                   \
    }
RADIX_TEST(forced, body_forced, 7, 2)
RADIX_TEST(forced, body_forced, 7, 3)
RADIX_TEST(reuse, body_reuse, 6, 2)
RADIX_TEST(runahead, body_runahead, 7, 3)

/* Small messages and results down the tree (WEFT_SHM_FLAT_MAX=0; a
 * bcast's pieces too: WEFT_SHM_FLAT_PIECES=0), and every message and
 * result read straight from the root, up to a whole slot
 * (WEFT_SHM_FLAT_MAX=65536; pieces: WEFT_SHM_FLAT_PIECES=16), on deep
 * trees. */
#define FLAT_TEST(name, body, N, R, F, P)                                                                              \
    Test(shm, name##_##N##_radix##R##_flat##F, .timeout = 90)                                                          \
    {                                                                                                                  \
        static const char *const env[] = {"WEFT_LOG_LEVEL=error",                                                      \
                                          "WEFT_TIMEOUT=30",                                                           \
                                          "WEFT_SHM_RADIX=" #R,                                                        \
                                          "WEFT_SHM_FLAT_MAX=" #F,                                                     \
                                          "WEFT_SHM_FLAT_PIECES=" #P,                                                  \
                                          "WEFT_SHM_CHUNK_MIN=1000000",                                                \
                                          NULL};                                                                       \
        th_result_t res = th_run(N, body, NULL, 60, env);                                                              \
        cr_assert_eq(res.timed_out, 0, "hung");                                                                        \
        cr_assert_eq(res.failed, 0);                                                                                   \
    }
FLAT_TEST(forced, body_forced, 7, 2, 0, 0)
FLAT_TEST(forced, body_forced, 7, 2, 65536, 16)
FLAT_TEST(runahead, body_runahead, 7, 3, 0, 0)
FLAT_TEST(runahead, body_runahead, 6, 2, 65536, 16)

/* Every reduce and allreduce up the tree (no chunked path) to 64 KiB. */
Test(shm, forced_6_tree_only, .timeout = 90)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=30", "WEFT_SHM_RADIX=4",
                                      "WEFT_SHM_CHUNK_MIN=1000000", NULL};
    run_ok(6, body_forced, NULL, 60, env);
}
RANKS_TEST(cma, body_cma, 1, 30)
RANKS_TEST(cma, body_cma, 2, 30)
RANKS_TEST(cma, body_cma, 3, 30)
RANKS_TEST(cma, body_cma, 5, 30)
RADIX_TEST(cma, body_cma, 6, 2)
RADIX_TEST(cma_mismatch, body_cma_mismatch, 4, 2)

Test(shm, cma_off_declines, .timeout = 60)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=30", "WEFT_SHM_CMA=0", NULL};
    run_ok(3, body_cma, NULL, 30, env);
}

Test(shm, cma_simulated_nodes_decline, .timeout = 60)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=30", "WEFT_RANKS_PER_NODE=1", NULL};
    run_ok(3, body_cma, (void *)1, 30, env);
}

Test(shm, simulated_nodes_decline, .timeout = 60)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=30", "WEFT_RANKS_PER_NODE=2", NULL};
    run_ok(4, body_nodes, NULL, 30, env);
}

/* ---- a wait for a late peer sleeps on its bell ------------------------------- */

/* Rank 0 comes to three barriers 300 ms late, without calling weft
 * meanwhile: rank 1's wait runs past its spin and sleeps on its bell
 * (weft_bell_t in its flag lines), which rank 0's flags ring; a wait that
 * napped instead, or flags that ring no bell, leave the ring count where
 * it was. Two ranks, so that each has a CPU on a 2-core machine (where
 * ranks outnumber CPUs, waits nap). The progress thread is off: with it
 * on, a blocking wait may hand its polling over to the thread. */
static int body_bell(int rank, int size, void *arg)
{
    (void)size;
    int one_cpu = arg != NULL;
    if (one_cpu) { /* every rank on the first CPU it may use: oversubscribed */
        cpu_set_t mine, first;
        TH_CHECK(sched_getaffinity(0, sizeof(mine), &mine) == 0, "sched_getaffinity");
        CPU_ZERO(&first);
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &mine)) {
                CPU_SET(c, &first);
                break;
            }
        TH_CHECK(sched_setaffinity(0, sizeof(first), &first) == 0, "sched_setaffinity");
    }
    TH_CHECK(weft_init(NULL, NULL) == WEFT_SUCCESS, "init: %s", weft_last_error());
    weft_comm_t w = weft_comm_world();
    TH_CHECK(weft_barrier(w) == WEFT_SUCCESS, "barrier: %s", weft_last_error());
    weft_shm_t *sh = weft_shm_get(w, 0);
    TH_CHECK(sh && sh->mapped, "rank %d: the barrier ran without a shared-memory segment", rank);
    uint32_t before = atomic_load(&sh->ctrl[rank].bell.ring);
    for (int i = 0; i < 3; i++) {
        if (rank == 0) usleep(300 * 1000);
        TH_CHECK(weft_barrier(w) == WEFT_SUCCESS, "barrier %d: %s", i, weft_last_error());
    }
    uint32_t rung = atomic_load(&sh->ctrl[rank].bell.ring) - before;
    TH_CHECK(!one_cpu || rung == 0,
             "rank %d: bound with rank %d to one CPU, its wait slept on its bell %u times (it "
             "should nap: a ring costs the poster a system call per sleeper)",
             rank, 1 - rank, rung);
    TH_CHECK(one_cpu || rank == 0 || rung >= 1,
             "rank %d waited 3 x 300 ms for rank 0's barrier flags and its bell never rang (the wait napped, or "
             "the flags ring no bell)",
             rank);
    return weft_finalize();
}

Test(shm, a_wait_for_a_late_peer_sleeps_on_its_bell, .timeout = 60)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=30", "WEFT_PROGRESS_THREAD=off", NULL};
    run_ok(2, body_bell, NULL, 30, env);
}

/* The same with both ranks bound to one CPU: where ranks outnumber their
 * CPUs, the waits nap and no bell rings. */
Test(shm, oversubscribed_waits_nap, .timeout = 60)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=30", "WEFT_PROGRESS_THREAD=off", NULL};
    run_ok(2, body_bell, (void *)1, 30, env);
}

/* The progress thread naps on the same bells: rank 0 comes 3 ms late to
 * a nonblocking allreduce on a fresh dup that rank 1 posted and then
 * left to the thread (it sleeps without calling weft), 20 times; each dup
 * is freed at once after its wait, while the thread may still nap on a
 * bell in its segment (weft_progress_bell_unmap). The sums are right, no
 * rank crashes, and rank 1's bell rang. */
static int body_thread_bell(int rank, int size, void *arg)
{
    (void)arg;
    TH_CHECK(weft_init(NULL, NULL) == WEFT_SUCCESS, "init: %s", weft_last_error());
    unsigned rung = 0;
    for (int i = 0; i < 20; i++) {
        weft_comm_t d;
        TH_CHECK(weft_comm_dup(weft_comm_world(), NULL, &d) == WEFT_SUCCESS, "dup: %s", weft_last_error());
        TH_CHECK(weft_barrier(d) == WEFT_SUCCESS, "barrier: %s", weft_last_error());
        weft_shm_t *sh = weft_shm_get(d, 0);
        TH_CHECK(sh && sh->mapped, "rank %d: no shared-memory segment on the dup", rank);
        uint32_t before = atomic_load(&sh->ctrl[rank].bell.ring);
        int64_t in = rank + i, out = -1;
        weft_request_t req;
        if (rank == 0) usleep(3000);
        TH_CHECK(weft_iallreduce(&in, &out, 1, WEFT_INT64, WEFT_SUM, d, &req) == WEFT_SUCCESS, "iallreduce: %s",
                 weft_last_error());
        if (rank != 0) usleep(6000);
        TH_CHECK(weft_wait(&req, NULL) == WEFT_SUCCESS, "wait: %s", weft_last_error());
        rung += atomic_load(&sh->ctrl[rank].bell.ring) - before;
        int64_t want = (int64_t)size * (size - 1) / 2 + (int64_t)size * i;
        TH_CHECK(out == want, "rank %d, round %d: sum %lld, want %lld", rank, i, (long long)out, (long long)want);
        TH_CHECK(weft_comm_free(&d) == WEFT_SUCCESS, "free: %s", weft_last_error());
    }
    TH_CHECK(rank == 0 || rung >= 1, "rank %d: its progress thread's bell never rang in 20 late allreduces", rank);
    return weft_finalize();
}

Test(shm, the_progress_thread_naps_on_its_bell, .timeout = 60)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=30", "WEFT_PROGRESS_THREAD=on", NULL};
    run_ok(2, body_thread_bell, NULL, 30, env);
}

/* ---- segments go with their communicators ---------------------------------- */

/* This process's mappings of weft segments (/proc/self/maps). */
static int mapped_segments(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, "/dev/shm/weft-")) n++;
    fclose(f);
    return n;
}

/* dup -> allreduce -> free, 20 times: the segments of the dups and of
 * their derived node communicators (hier's node step on simulated nodes)
 * are unmapped with them. */
static int body_comm_segments(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    TH_CHECK(weft_init(NULL, NULL) == WEFT_SUCCESS, "init: %s", weft_last_error());
    int in = rank + 1, out = 0;
    TH_CHECK(weft_allreduce(&in, &out, 1, WEFT_INT32, WEFT_SUM, weft_comm_world()) == WEFT_SUCCESS, "%s",
             weft_last_error());
    int before = mapped_segments();
    TH_CHECK(before >= 1, "no weft segment mapped after an allreduce on the world (%d)", before);
    for (int i = 0; i < 20; i++) {
        weft_comm_t d;
        TH_CHECK(weft_comm_dup(weft_comm_world(), NULL, &d) == WEFT_SUCCESS, "dup: %s", weft_last_error());
        TH_CHECK(weft_allreduce(&in, &out, 1, WEFT_INT32, WEFT_SUM, d) == WEFT_SUCCESS, "%s", weft_last_error());
        TH_CHECK(out == 10, "allreduce on dup %d: %d", i, out);
        TH_CHECK(weft_comm_free(&d) == WEFT_SUCCESS, "free: %s", weft_last_error());
    }
    int after = mapped_segments();
    TH_CHECK(after == before, "rank %d: %d weft segments mapped after 20 dup/allreduce/free, %d before", rank, after,
             before);
    return weft_finalize();
}

Test(shm, freed_comms_unmap_segments, .timeout = 60)
{
    run_ok(4, body_comm_segments, NULL, 30, quiet_env);
}

Test(shm, freed_comms_unmap_segments_derived, .timeout = 60)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=30", "WEFT_RANKS_PER_NODE=2", NULL};
    run_ok(4, body_comm_segments, NULL, 30, env);
}

/* ---- killed runs ----------------------------------------------------------- */

typedef struct {
    int victim; /* the rank that kills itself */
    int when;   /* 0: before any collective (never attaches); 1: after 20 allreduces (mid-run);
                   2, 3: mid-run, the survivors then bcast 3 MiB (the CMA tree) or 1 MiB (slot pieces) */
    char name_file[64];
} kill_arg_t;

/* Rank 0 writes the segment's name (its /dev/shm entry) for the parent. */
static void publish_name(weft_comm_t w, const char *file)
{
    weft_shm_t *sh = weft_shm_get(w, 0);
    FILE *f = fopen(file, "w");
    if (f && sh) fprintf(f, "%s\n", sh->name + 1);
    if (f) fclose(f);
}

static int body_killed(int rank, int size, void *arg)
{
    kill_arg_t *k = arg;
    (void)size;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    if (rank == 0) publish_name(w, k->name_file);
    int32_t x[4] = {1, 2, 3, 4}, y[4];
    if (k->when >= 1)
        for (int i = 0; i < 20; i++)
            TH_OK(weft_allreduce(x, y, 4, WEFT_INT32, WEFT_SUM, w));
    if (rank == k->victim) raise(SIGKILL);
    double t0 = weft_wtime();
    int rc = WEFT_SUCCESS;
    if (k->when >= 2) { /* a rank whose parent (CMA tree, slot tree) is dead must not wait forever */
        static char big[3 << 20];
        rc = weft_bcast(big, k->when == 2 ? sizeof(big) : 1 << 20, WEFT_BYTE, 0, w);
        /* In the CMA tree rank 1 reads from the root alone and may finish;
         * the root (its child 2 is gone) and rank 3 (its parent) may not. */
        TH_CHECK(rc != WEFT_SUCCESS || (k->when == 2 && rank == 1), "the bcast succeeded on rank %d without rank %d",
                 rank, k->victim);
    } else {
        for (int i = 0; i < 5 && rc == WEFT_SUCCESS; i++)
            rc = weft_allreduce(x, y, 4, WEFT_INT32, WEFT_SUM, w);
        TH_CHECK(rc != WEFT_SUCCESS, "the allreduce succeeded without rank %d", k->victim);
    }
    TH_CHECK(weft_wtime() - t0 < 10, "the error took %.1f s", weft_wtime() - t0);
    weft_finalize(); /* fails (a rank is gone) but releases the segment */
    return 0;
}

static int shm_exists(const char *name)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    return stat(path, &st) == 0;
}

static void read_name(const char *file, char *name, size_t len)
{
    FILE *f = fopen(file, "r");
    cr_assert(f, "rank 0 did not write the segment name");
    cr_assert(fgets(name, (int)len, f));
    name[strcspn(name, "\n")] = '\0';
    fclose(f);
    unlink(file);
}

static void killed_run(int victim, int when)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=3", NULL};
    kill_arg_t k = {.victim = victim, .when = when};
    snprintf(k.name_file, sizeof(k.name_file), "/tmp/weft-test-shm-%d", (int)getpid());
    th_result_t res = th_run(4, body_killed, &k, 30, env);
    cr_assert_eq(res.timed_out, 0, "survivors hung");
    for (int r = 0; r < 4; r++)
        if (r != victim) cr_assert_eq(res.exit_code[r], 0, "rank %d failed", r);
    char name[200];
    read_name(k.name_file, name, sizeof(name));
    cr_assert(!shm_exists(name), "segment %s was left in /dev/shm", name);
}

Test(shm, killed_before_attach, .timeout = 60)
{
    killed_run(3, 0);
}
Test(shm, killed_mid_run, .timeout = 60)
{
    killed_run(2, 1);
}
/* Rank 2 is rank 3's parent in the CMA tree (radix 2); the slot pieces'
 * root waits for its done before reusing a slot. */
Test(shm, killed_before_cma_bcast, .timeout = 60)
{
    killed_run(2, 2);
}
Test(shm, killed_before_pieces_bcast, .timeout = 60)
{
    killed_run(2, 3);
}

/* The creator dies right after creating the segment, before anyone else
 * attached: the name stays until the next weft_init on the host sweeps it. */
static int body_creator_dies(int rank, int size, void *arg)
{
    kill_arg_t *k = arg;
    (void)size;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    int token = 0;
    if (rank != 0) { /* tell rank 0 this rank's init is over (rank 0 serves the bootstrap store) */
        TH_OK(weft_send(&token, 1, WEFT_INT32, 0, 1, w));
        usleep(300000);
        _exit(0); /* never attaches */
    }
    TH_OK(weft_recv(&token, 1, WEFT_INT32, 1, 1, w, NULL));
    weft_request_t req;
    TH_OK(weft_ibarrier(w, &req)); /* its first step creates the segment */
    publish_name(w, k->name_file);
    raise(SIGKILL);
    return 1;
}

static int body_sweep(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    TH_OK(weft_finalize());
    return 0;
}

Test(shm, stale_segment_swept_at_init, .timeout = 60)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=3", NULL};
    kill_arg_t k = {.victim = 0};
    snprintf(k.name_file, sizeof(k.name_file), "/tmp/weft-test-shm-%d", (int)getpid());
    th_run(2, body_creator_dies, &k, 30, env);
    char name[200];
    read_name(k.name_file, name, sizeof(name));
    /* Another weft_init on this host (a test running in parallel) may
     * sweep it first; either way it must be gone after ours. */
    if (!shm_exists(name)) cr_log_info("segment %s was already swept by another process", name);
    static const char *const single[] = {"WEFT_LOG_LEVEL=error", "WEFT_BOOTSTRAP=single", NULL};
    th_result_t res = th_run(1, body_sweep, NULL, 30, single);
    cr_assert_eq(res.failed, 0);
    cr_assert(!shm_exists(name), "the sweep left %s", name);
}

/* Any local user can put anything under a weft- name in /dev/shm: a FIFO
 * (an open for reading blocks until a writer comes: before, every
 * weft_init on the host hung in the sweep), a socket, a link, a directory,
 * a huge sparse file. The sweep skips them all, without blocking, and
 * removes none; made as 'nobody' when the tests run as root, else as this
 * user (the FIFO blocked either way). */
static void make_as(uid_t uid, const char *path, int kind)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (uid != geteuid() && (setgid(uid) || setuid(uid))) _exit(100);
        int ok = 0;
        if (kind == 0) ok = !mkfifo(path, 0666);
        if (kind == 1) {
            struct sockaddr_un sa = {.sun_family = AF_UNIX};
            snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", path);
            int fd = socket(AF_UNIX, SOCK_STREAM, 0);
            ok = fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof(sa));
        }
        if (kind == 2) ok = !symlink("/dev/shm/weft-sweep-target-missing", path);
        if (kind == 3) ok = !mkdir(path, 0777);
        if (kind == 4) {
            int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0666);
            ok = fd >= 0 && !ftruncate(fd, (off_t)1 << 40); /* 1 TiB, sparse */
        }
        if (kind == 5) { /* a FIFO this user owns, as another job of the same user could leave */
            ok = !mkfifo(path, 0600);
        }
        _exit(ok ? 0 : 101);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "could not make %s (kind %d)", path, kind);
}

Test(shm, sweep_never_blocks_on_what_others_put_in_dev_shm, .timeout = 90)
{
    uid_t other = geteuid() == 0 ? 65534 : geteuid();
    char paths[6][128];
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    for (int k = 0; k < 6; k++) { /* names of this host's segments: the sweep looks at nothing else */
        snprintf(paths[k], sizeof(paths[k]), "/dev/shm/weft-%016llx-%016llx-0-00000000-%016x",
                 (unsigned long long)getpid(), (unsigned long long)weft_topo_host_id(), k);
        make_as(k == 5 ? geteuid() : other, paths[k], k);
    }
    static const char *const single[] = {"WEFT_LOG_LEVEL=error", "WEFT_BOOTSTRAP=single", NULL};
    th_result_t res = th_run(1, body_sweep, NULL, 30, single);
    cr_expect_eq(res.timed_out, 0, "weft_init hung in the sweep");
    cr_expect_eq(res.failed, 0);
    for (int k = 0; k < 6; k++) {
        struct stat st;
        cr_expect_eq(lstat(paths[k], &st), 0, "the sweep removed %s", paths[k]);
        if (k == 3)
            rmdir(paths[k]);
        else
            unlink(paths[k]);
    }
}

/* Any user can fill /dev/shm with weft- names: the sweep stops within its
 * budget (and one rank per node sweeps), so init is not held up by them. */
static void init_once(void *arg)
{
    (void)arg;
    th_result_t *res = arg;
    static const char *const env[] = {"WEFT_LOG_LEVEL=debug", "WEFT_BOOTSTRAP=single", NULL};
    *res = th_run(1, body_sweep, NULL, 30, env);
}

Test(shm, a_flood_of_junk_names_in_dev_shm_is_swept_within_a_budget, .timeout = 120)
{
    enum { JUNK = 25000 };
    char dir[] = "/dev/shm", path[96];
    int made = 0;
    for (int i = 0; i < JUNK; i++) {
        snprintf(path, sizeof(path), "%s/weft-junk-%d-%08d", dir, (int)getpid(), i);
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0) break;
        close(fd);
        made++;
    }
    th_result_t res = {0};
    char *err = made == JUNK ? th_stderr_of(init_once, &res) : NULL;
    for (int i = 0; i < made; i++) {
        snprintf(path, sizeof(path), "%s/weft-junk-%d-%08d", dir, (int)getpid(), i);
        unlink(path);
    }
    cr_assert_eq(made, JUNK, "could not make %d files in /dev/shm", JUNK);
    cr_expect_eq(res.failed, 0);
    cr_expect(strstr(err, "its budget is spent"), "the sweep did not stop at its budget:\n%.2000s", err);
    free(err);
}

/* ---- segments nobody else can take -------------------------------------------- */

/* Someone outside the job takes a communicator's segment name before its
 * creator (the test computes it, white-box): as this user with mode 0666,
 * or as 'nobody' (the tests run as root) with 0666 or 0600. Rank 0's
 * exclusive create fails, the others refuse what they find (not this
 * user's, or not 0600): every rank fails well before its deadline with a
 * message naming the segment, and so does the next collective on that
 * communicator. Before: rank 0 failed with "File exists" and the others
 * waited for the segment until their deadline (mapping the other user's
 * file, had it looked like a segment). */
typedef struct {
    int as_nobody;
    mode_t mode;
} squat_t;

/* Creates name as the squatter would (a forked child, as 'nobody' when
 * asked): 0 done, else errno. */
static int squat(const char *name, const squat_t *q)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (q->as_nobody && (setgid(65534) || setuid(65534))) _exit(100);
        int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, q->mode);
        if (fd < 0 || fchmod(fd, q->mode)) _exit(errno ? errno : 101);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 102;
}

/* Within a few seconds of t0 (the timeout is 20), with rc an error whose
 * message names the segment. */
static void failed_fast(int rank, const char *what, int rc, double t0, const char *name)
{
    double took = weft_wtime() - t0;
    TH_CHECK(rc != WEFT_SUCCESS && took < 5 && strstr(weft_last_error(), name),
             "rank %d: %s: %d (%s) after %.1f s; wanted an error naming %s within 5 s", rank, what, rc,
             weft_last_error(), took, name);
}

static int body_squat(int rank, int size, void *arg)
{
    const squat_t *q = arg;
    (void)size;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world(), d;
    TH_OK(weft_comm_dup(w, NULL, &d));
    weft_shm_t *sh = weft_shm_get(d, 0); /* the state, not yet attached: the name is known */
    TH_CHECK(sh, "no shared-memory state on the dup");
    char name[96];
    snprintf(name, sizeof(name), "%s", sh->name);
    if (rank == 0) {
        int err = squat(name, q);
        TH_CHECK(err == 0, "the squatter could not create %s: %s", name, strerror(err));
    }
    TH_OK(weft_barrier(w)); /* the name is taken before anyone's first call on d */
    int32_t in[4] = {1, 2, 3, 4}, out[4];
    double t0 = weft_wtime();
    int rc = weft_allreduce(in, out, 4, WEFT_INT32, WEFT_SUM, d);
    failed_fast(rank, "the first allreduce", rc, t0, name);
    t0 = weft_wtime();
    rc = weft_allreduce(in, out, 4, WEFT_INT32, WEFT_SUM, d);
    failed_fast(rank, "the second allreduce", rc, t0, name);
    TH_OK(weft_barrier(w)); /* everyone looked: the squatter's file may go */
    if (rank == 0) TH_CHECK(shm_unlink(name) == 0, "unlink %s: %s", name, strerror(errno));
    TH_OK(weft_comm_free(&d));
    TH_OK(weft_finalize());
    return 0;
}

static void squat_run(int as_nobody, mode_t mode)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=20", NULL};
    squat_t q = {as_nobody, mode};
    run_ok(4, body_squat, &q, 60, env);
}

Test(shm, squatted_0666_same_user_fails_fast, .timeout = 90)
{
    squat_run(0, 0666);
}
Test(shm, squatted_0666_other_user_fails_fast, .timeout = 90)
{
    if (geteuid() != 0) cr_skip_test("needs root to create a file as another user");
    squat_run(1, 0666);
}
Test(shm, squatted_0600_other_user_fails_fast, .timeout = 90)
{
    if (geteuid() != 0) cr_skip_test("needs root to create a file as another user");
    squat_run(1, 0600);
}

/* The creator cannot size its segment (a file-size limit on rank 0 makes
 * ftruncate fail with EFBIG, as a full /dev/shm fails it with ENOSPC): it
 * marks the name failed, and every member learns it at once and runs the
 * call without shared memory (the fallback built behind the first calls,
 * coll.c), including nonblocking calls already posted behind it; later
 * calls decline coll/shm. Results are checked, and nothing waits for a
 * deadline. */
static int body_creator_fails(int rank, int size, void *arg)
{
    /* arg: run as nobody (the mark, mode 0100, then cannot be opened: only seen) */
    if (arg && geteuid() == 0) /* (dumpable again after the change of user: UCX reads peers' /proc/PID/fd) */
        TH_CHECK(!setgroups(0, NULL) && !setgid(65534) && !setuid(65534) && !prctl(PR_SET_DUMPABLE, 1),
                 "rank %d: cannot become nobody: %s", rank, strerror(errno));
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world(), d;
    TH_OK(weft_comm_dup(w, NULL, &d));
    char name[96];
    snprintf(name, sizeof(name), "%s", weft_shm_get(d, 0)->name);
    struct rlimit old = {0, 0}, small;
    if (rank == 0) {
        signal(SIGXFSZ, SIG_IGN);
        TH_CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0, "getrlimit: %s", strerror(errno));
        small = (struct rlimit){4096, old.rlim_max}; /* the soft limit only: it can be raised again */
        TH_CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0, "setrlimit: %s", strerror(errno));
    }
    enum { N = 4, CALLS = 3 };
    int32_t in[N], out[CALLS][N], bc[N] = {0}, ag[8];
    for (int i = 0; i < N; i++)
        in[i] = rank * 10 + i;
    double t0 = weft_wtime();
    /* Posted back to back before any completes: each was built with its fallback. */
    weft_request_t req[CALLS + 1];
    for (int c = 0; c < CALLS; c++)
        TH_OK(weft_iallreduce(in, out[c], N, WEFT_INT32, WEFT_SUM, d, &req[c]));
    if (rank == 1)
        for (int i = 0; i < N; i++)
            bc[i] = 100 + i;
    TH_OK(weft_ibcast(bc, N, WEFT_INT32, 1, d, &req[CALLS]));
    TH_OK(weft_waitall(CALLS + 1, req, NULL));
    double took = weft_wtime() - t0;
    if (rank == 0) TH_CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0, "setrlimit: %s", strerror(errno));
    TH_CHECK(took < 5, "rank %d: the calls took %.1f s", rank, took);
    for (int c = 0; c < CALLS; c++)
        for (int i = 0; i < N; i++)
            TH_CHECK(out[c][i] == 10 * size * (size - 1) / 2 + size * i, "rank %d: call %d: out[%d] = %d", rank, c, i,
                     out[c][i]);
    for (int i = 0; i < N; i++)
        TH_CHECK(bc[i] == 100 + i, "rank %d: bcast[%d] = %d", rank, i, bc[i]);
    TH_CHECK(!weft_shm_get(d, 0), "rank %d: coll/shm still takes calls on the communicator", rank);
    /* Later calls (blocking, another collective) run without shared memory too. */
    int32_t mine[2] = {rank, -rank};
    TH_OK(weft_allgather(mine, ag, 2, WEFT_INT32, d));
    for (int r = 0; r < size; r++)
        TH_CHECK(ag[2 * r] == r && ag[2 * r + 1] == -r, "rank %d: allgather block %d: %d %d", rank, r, ag[2 * r],
                 ag[2 * r + 1]);
    TH_OK(weft_barrier(d));
    TH_OK(weft_barrier(w));
    if (rank == 0) shm_unlink(name); /* the failed mark (else the sweep takes it after a minute) */
    TH_OK(weft_comm_free(&d));
    TH_OK(weft_finalize());
    return 0;
}

Test(shm, creator_failure_runs_without_shared_memory, .timeout = 90)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=20", NULL};
    run_ok(4, body_creator_fails, NULL, 60, env);
}

Test(shm, creator_failure_runs_without_shared_memory_not_root, .timeout = 90)
{
    if (geteuid() != 0) cr_skip_test("needs root to run the ranks as another user (nobody)");
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=20", NULL};
    run_ok(4, body_creator_fails, (void *)1, 60, env);
}

/* Segment names are not predictable: the same job, context id and
 * members (dup, free, dup again) give another name, and so do two runs
 * of the same program; every member computes the same one. Rank 0 writes
 * its names to the file in arg. */
static int body_names(int rank, int size, void *arg)
{
    (void)size;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world(), d;
    char names[3][96], all[4][96];
    for (int i = 0; i < 2; i++) {
        TH_OK(weft_comm_dup(w, NULL, &d));
        snprintf(names[i], sizeof(names[i]), "%s", weft_shm_get(d, 0)->name);
        TH_OK(weft_allgather(names[i], all, 96, WEFT_BYTE, w));
        for (int r = 0; r < size; r++)
            TH_CHECK(!strcmp(all[r], names[i]), "rank %d's name %s, rank %d's %s", rank, names[i], r, all[r]);
        TH_OK(weft_comm_free(&d));
    }
    TH_CHECK(strcmp(names[0], names[1]), "dup, free, dup: the same segment name twice: %s", names[0]);
    snprintf(names[2], sizeof(names[2]), "%s", weft_shm_get(w, 0)->name);
    if (rank == 0) {
        FILE *f = fopen(arg, "w");
        TH_CHECK(f, "%s: %s", (const char *)arg, strerror(errno));
        fprintf(f, "%s\n%s\n%s\n", names[0], names[1], names[2]);
        fclose(f);
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(shm, segment_names_unpredictable, .timeout = 60)
{
    char file[2][64], text[2][400];
    for (int i = 0; i < 2; i++) {
        snprintf(file[i], sizeof(file[i]), "/tmp/weft-test-names-%d-%d", (int)getpid(), i);
        th_result_t res = th_run(3, body_names, file[i], 30, quiet_env);
        cr_assert_eq(res.failed, 0);
        FILE *f = fopen(file[i], "r");
        cr_assert(f);
        size_t n = fread(text[i], 1, sizeof(text[i]) - 1, f);
        text[i][n] = '\0';
        fclose(f);
        unlink(file[i]);
    }
    cr_assert(strcmp(text[0], text[1]), "two runs named their segments alike:\n%s", text[0]);
}

/* A shared-memory collective that fails on one rank (rank 2 passed another
 * count to a flat bcast: only it notices) breaks the communicator's
 * sequence there: the next one fails at once on every rank, rank 2 at its
 * start and the others waiting for it, who find its record in the
 * segment. Before: rank 2 went on and the sequences could disagree. */
static int body_after_failure(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t c = forced("bcast", "shm");
    int32_t b[8] = {0}, in[4] = {1, 2, 3, 4}, out[4];
    int rc = weft_bcast(b, rank == 2 ? 6 : 5, WEFT_INT32, 0, c);
    TH_CHECK((rc == WEFT_ERR_ARG) == (rank == 2), "rank %d: bcast %d (%s)", rank, rc, weft_last_error());
    double t0 = weft_wtime();
    rc = weft_allreduce(in, out, 4, WEFT_INT32, WEFT_SUM, c);
    TH_CHECK(rc == WEFT_ERR_COMM && strstr(weft_last_error(), "fails at once") && weft_wtime() - t0 < 5,
             "rank %d: the allreduce after: %d after %.1f s (%s)", rank, rc, weft_wtime() - t0, weft_last_error());
    if (rank != 2)
        TH_CHECK(strstr(weft_last_error(), "rank 2's shared-memory collective"), "rank %d: %s", rank,
                 weft_last_error());
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_finalize());
    return 0;
}

Test(shm, after_a_failure_later_ones_fail_fast, .timeout = 60)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=20", NULL};
    run_ok(4, body_after_failure, NULL, 40, env);
}

/* Ranks time out in a shared-memory collective (rank 3 comes late) and
 * cancel it: their later ones, and rank 3's (which may still have
 * finished the late one: the others' inputs were there), fail at once
 * instead of waiting for collectives the sequence can no longer complete. */
static int body_after_timeout(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world(), d;
    TH_OK(weft_comm_dup(w, NULL, &d));
    int32_t in[4] = {1, 2, 3, 4}, out[4];
    TH_OK(weft_comm_set_timeout(d, 1));
    TH_OK(weft_allreduce(in, out, 4, WEFT_INT32, WEFT_SUM, d)); /* attached */
    if (rank == 3) usleep(1500000);
    int rc = weft_allreduce(in, out, 4, WEFT_INT32, WEFT_SUM, d);
    TH_CHECK(rc == WEFT_ERR_TIMEOUT || (rank == 3 && rc == WEFT_SUCCESS), "rank %d: %d (%s)", rank, rc,
             weft_last_error());
    TH_OK(weft_comm_set_timeout(d, 10));
    double t0 = weft_wtime();
    rc = weft_allreduce(in, out, 4, WEFT_INT32, WEFT_SUM, d);
    TH_CHECK(rc != WEFT_SUCCESS && weft_wtime() - t0 < 5, "rank %d: the allreduce after: %d after %.1f s (%s)", rank,
             rc, weft_wtime() - t0, weft_last_error());
    TH_OK(weft_comm_free(&d));
    TH_OK(weft_finalize());
    return 0;
}

Test(shm, after_a_timeout_later_ones_fail_fast, .timeout = 60)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=20", NULL};
    run_ok(4, body_after_timeout, NULL, 40, env);
}
