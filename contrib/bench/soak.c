/* weft-soak: many small collectives, then many communicator create/free
 * cycles, with every rank's resident set size (RSS) at the start of each
 * phase (after a warm-up: UCX endpoints, segments and caches fill on first
 * use) and at its end. A leak per call or per communicator shows as
 * growth; a bounded run fails (exit 1) when a rank grew by more than -g.
 *
 *   weftrun -n 4 contrib/bench/weft-soak                    # 10^6 collectives, 10^4 communicators
 *   weftrun -n 4 contrib/bench/weft-soak -c 100000 -k 1000 -g 2048
 *
 * The collectives cycle through allreduce, bcast, barrier, allgather,
 * reduce, a nonblocking allreduce, alltoall and reduce_scatter_block of a
 * few bytes (the shared-memory algorithms on one node; with simulated
 * nodes, WEFT_RANKS_PER_NODE, the hierarchical ones and their derived
 * communicators), checking every result. A communicator cycle is a dup, a
 * split or a split_ranks, a collective on it (which creates its segment)
 * and a free. Options: -c collectives, -k communicator cycles, -g KiB of
 * growth allowed per rank per phase (0: report only). */
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                                                                    \
    do {                                                                                                               \
        int rc_ = (call);                                                                                              \
        if (rc_) {                                                                                                     \
            fprintf(stderr, "weft-soak: %s: %s (%s)\n", #call, weft_strerror(rc_), weft_last_error());                 \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)
#define EXPECT(cond, ...)                                                                                              \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "weft-soak: " __VA_ARGS__);                                                                \
            fprintf(stderr, "\n");                                                                                     \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* This process's resident set size in KiB (/proc/self/statm). */
static long rss_kib(void)
{
    long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Collective i of the mix, its result checked. */
static void one_collective(weft_comm_t w, int rank, int size, long i)
{
    int64_t in[64], out[64], want = 0;
    weft_request_t req;
    for (int r = 0; r < size; r++)
        want += r + i;
    in[0] = rank + i;
    switch (i % 8) {
    case 0:
        CHECK(weft_allreduce(in, out, 1, WEFT_INT64, WEFT_SUM, w));
        EXPECT(out[0] == want, "allreduce %ld: %lld, not %lld", i, (long long)out[0], (long long)want);
        break;
    case 1:
        out[0] = rank == (int)(i % size) ? i : -1;
        CHECK(weft_bcast(out, 1, WEFT_INT64, (int)(i % size), w));
        EXPECT(out[0] == i, "bcast %ld: %lld", i, (long long)out[0]);
        break;
    case 2: CHECK(weft_barrier(w)); break;
    case 3:
        CHECK(weft_allgather(in, out, 1, WEFT_INT64, w));
        EXPECT(out[size - 1] == size - 1 + i, "allgather %ld: %lld", i, (long long)out[size - 1]);
        break;
    case 4:
        CHECK(weft_reduce(in, out, 1, WEFT_INT64, WEFT_SUM, 0, w));
        EXPECT(rank != 0 || out[0] == want, "reduce %ld: %lld", i, (long long)out[0]);
        break;
    case 5:
        for (int j = 1; j < 8; j++)
            in[j] = in[0];
        CHECK(weft_iallreduce(in, out, 8, WEFT_INT64, WEFT_SUM, w, &req));
        CHECK(weft_wait(&req, NULL));
        EXPECT(out[7] == want, "iallreduce %ld: %lld", i, (long long)out[7]);
        break;
    case 6:
        for (int r = 0; r < size; r++)
            in[r] = rank * 1000 + r;
        CHECK(weft_alltoall(in, out, 1, WEFT_INT64, w));
        EXPECT(out[size - 1] == (size - 1) * 1000 + rank, "alltoall %ld: %lld", i, (long long)out[size - 1]);
        break;
    default:
        for (int r = 0; r < size; r++)
            in[r] = i;
        CHECK(weft_reduce_scatter_block(in, out, 1, WEFT_INT64, WEFT_SUM, w));
        EXPECT(out[0] == i * size, "reduce_scatter_block %ld: %lld", i, (long long)out[0]);
    }
}

/* Communicator cycle i: create, use, free. */
static void one_comm(weft_comm_t w, int rank, int size, long i)
{
    weft_comm_t c;
    int ranks[64];
    switch (i % 3) {
    case 0: CHECK(weft_comm_dup(w, WEFT_OPTIONS_NULL, &c)); break;
    case 1: CHECK(weft_comm_split(w, 0, size - rank, WEFT_OPTIONS_NULL, &c)); break; /* reversed */
    default:
        for (int r = 0; r < size; r++)
            ranks[r] = r;
        CHECK(weft_comm_split_ranks(w, ranks, size, "soak", WEFT_OPTIONS_NULL, &c));
    }
    int64_t in = 1, out = 0;
    CHECK(weft_allreduce(&in, &out, 1, WEFT_INT64, WEFT_SUM, c));
    EXPECT(out == size, "allreduce on communicator %ld: %lld", i, (long long)out);
    CHECK(weft_comm_free(&c));
}

/* Every rank's RSS (KiB) now, gathered: max start and end over ranks. */
static void rss_all(weft_comm_t w, int size, long *out)
{
    int64_t mine = rss_kib(), all[64];
    CHECK(weft_allgather(&mine, all, 1, WEFT_INT64, w));
    for (int r = 0; r < size; r++)
        out[r] = (long)all[r];
}

/* Runs a phase of n steps (warm-up first), returns the largest growth. */
static long phase(weft_comm_t w, int rank, int size, long n, long warm, const char *name,
                  void (*step)(weft_comm_t, int, int, long))
{
    long before[64], after[64], growth = 0, at = 0, max_before = 0, max_after = 0;
    for (long i = 0; i < warm; i++)
        step(w, rank, size, i);
    rss_all(w, size, before);
    double t0 = weft_wtime();
    for (long i = 0; i < n; i++)
        step(w, rank, size, warm + i);
    double t = weft_wtime() - t0;
    rss_all(w, size, after);
    for (int r = 0; r < size; r++) {
        if (after[r] - before[r] > growth) {
            growth = after[r] - before[r];
            at = r;
        }
        if (before[r] > max_before) max_before = before[r];
        if (after[r] > max_after) max_after = after[r];
    }
    if (rank == 0)
        printf("%-14s %9ld %9.2f %9.2f %12ld %12ld %9ld (rank %ld)\n", name, n, t, n ? t * 1e6 / (double)n : 0.0,
               max_before, max_after, growth, at);
    return growth;
}

int main(int argc, char **argv)
{
    long ncoll = 1000000, ncomm = 10000, limit = 0;
    int opt;
    while ((opt = getopt(argc, argv, "c:k:g:h")) != -1) {
        switch (opt) {
        case 'c': ncoll = atol(optarg); break;
        case 'k': ncomm = atol(optarg); break;
        case 'g': limit = atol(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-c collectives] [-k communicator cycles] [-g KiB of growth allowed]\n",
                    argv[0]);
            return opt == 'h' ? 0 : 2;
        }
    }
    CHECK(weft_init(&argc, &argv));
    weft_comm_t w = weft_comm_world();
    int rank, size;
    CHECK(weft_comm_rank(w, &rank));
    CHECK(weft_comm_size(w, &size));
    EXPECT(size <= 64, "at most 64 ranks");
    /* warm-up: 1% of each phase, at least a few thousand calls / 20 communicators */
    long wcoll = ncoll / 100 > 2000 ? ncoll / 100 : 2000, wcomm = ncomm / 100 > 20 ? ncomm / 100 : 20;
    if (rank == 0) {
        printf("# weft-soak: %d ranks; warm-up %ld collectives, %ld communicators; RSS in KiB, max over ranks\n", size,
               wcoll, wcomm);
        printf("%-14s %9s %9s %9s %12s %12s %9s\n", "# phase", "count", "seconds", "us each", "RSS start", "RSS end",
               "growth");
    }
    long g1 = phase(w, rank, size, ncoll, wcoll, "collectives", one_collective);
    long g2 = phase(w, rank, size, ncomm, wcomm, "communicators", one_comm);
    int bad = limit > 0 && (g1 > limit || g2 > limit);
    if (rank == 0 && limit > 0)
        printf("# %s: largest growth %ld KiB, limit %ld KiB\n", bad ? "FAIL" : "PASS", g1 > g2 ? g1 : g2, limit);
    fflush(stdout);
    CHECK(weft_finalize());
    return bad;
}
