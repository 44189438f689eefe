/* Collective benchmarks, blocking and nonblocking, as OSU defines them.
 *
 * Blocking: each rank times every call (a barrier after each, outside the
 * timed part, as in OSU's own tests) and reports its average; the table
 * shows the average over ranks (-f adds min and max). Sizes are bytes per
 * rank's contribution; reduce_scatter(_block) sizes are the whole vector,
 * each rank receiving size / ranks, as OSU. Reductions use float sums,
 * data movement uses bytes (OSU's choice).
 *
 * Nonblocking (OSU's overlap method): the pure communication time T is
 * measured with post + wait; then each iteration posts, computes for T
 * (calling test -t times if asked), and waits. Overlap % = 100 * (1 -
 * (overall - compute) / T), clamped to [0, 100].
 *
 * -d cuda / -d managed: every rank's send and receive buffers on its GPU
 * (the pools of osu.c); the timing is the same (a blocking call returns
 * when its result is in place, a wait when the request completed), and
 * validation writes and reads the buffers through the pools' host copies,
 * outside the timers. One untimed call before the table tells whether the
 * library runs the collective on such buffers at all (and sets up what it
 * keeps for them, e.g. weft's IPC-mapped scratch); if not, the lowest rank
 * that failed prints the library's error and every rank returns 2. */
#include "osu.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const osu_bench_t *b;
    int n, me;
    bk_type_t type;
    size_t esize;
    osu_pool_t sp, rp;
    int64_t *counts64, *displs64;
    int *counts32, *displs32;
} coll_ctx_t;

static int is_reduction(bk_coll_t c)
{
    return c == BK_REDUCE || c == BK_ALLREDUCE || c == BK_REDUCE_SCATTER || c == BK_REDUCE_SCATTER_BLOCK;
}

/* Elements each rank contributes for a message of `size` bytes (0: skip). */
static size_t elems(const coll_ctx_t *c, size_t size)
{
    size_t count = size / c->esize;
    if (c->b->coll == BK_REDUCE_SCATTER || c->b->coll == BK_REDUCE_SCATTER_BLOCK) count /= (size_t)c->n;
    return count;
}

/* Bytes of the send and receive buffers for `count` elements. */
static void buffer_bytes(const coll_ctx_t *c, size_t count, size_t *sbytes, size_t *rbytes)
{
    size_t one = count * c->esize, all = one * (size_t)c->n;
    switch (c->b->coll) {
    case BK_BCAST: *sbytes = 0, *rbytes = one; break;
    case BK_ALLGATHER:
    case BK_ALLGATHERV:
    case BK_GATHER: *sbytes = one, *rbytes = all; break;
    case BK_SCATTER: *sbytes = all, *rbytes = one; break;
    case BK_ALLTOALL:
    case BK_ALLTOALLV: *sbytes = all, *rbytes = all; break;
    case BK_REDUCE_SCATTER:
    case BK_REDUCE_SCATTER_BLOCK: *sbytes = all, *rbytes = one; break;
    default: *sbytes = one, *rbytes = one; break;
    }
}

static bk_coll_args_t make_args(coll_ctx_t *c, size_t count, int it)
{
    for (int r = 0; r < c->n; r++) {
        c->counts64[r] = (int64_t)count;
        c->displs64[r] = (int64_t)(count * (size_t)r);
        c->counts32[r] = (int)count;
        c->displs32[r] = (int)(count * (size_t)r);
    }
    bk_coll_args_t a = {.coll = c->b->coll,
                        .sendbuf = osu_pool_get(&c->sp, it),
                        .recvbuf = osu_pool_get(&c->rp, it),
                        .count = (int64_t)count,
                        .type = c->type,
                        .op = BK_SUM,
                        .root = 0,
                        .counts64 = c->counts64,
                        .displs64 = c->displs64,
                        .counts32 = c->counts32,
                        .displs32 = c->displs32};
    return a;
}

/* Validation: the inputs of iteration `it`, written outside the timer
 * (device buffers: into the pools' host copies, then copied over). */
static void fill_inputs(coll_ctx_t *c, const bk_coll_args_t *dev, size_t count, int it)
{
    size_t sbytes, rbytes;
    buffer_bytes(c, count, &sbytes, &rbytes);
    bk_coll_args_t host = *dev, *a = &host;
    host.sendbuf = osu_pool_host(&c->sp, (void *)dev->sendbuf);
    host.recvbuf = osu_pool_host(&c->rp, dev->recvbuf);
    memset(a->recvbuf, 0xff, rbytes); /* a call that writes nothing fails the check */
    void *sb = (void *)a->sendbuf;
    switch (c->b->coll) {
    case BK_BCAST:
        if (c->me == a->root) osu_fill(a->recvbuf, c->type, count, a->root, 0, 0, it);
        break;
    case BK_SCATTER:
        if (c->me == a->root)
            for (int d = 0; d < c->n; d++)
                osu_fill((char *)sb + (size_t)d * count * c->esize, c->type, count, a->root, d, 0, it);
        break;
    case BK_ALLTOALL:
    case BK_ALLTOALLV:
        for (int d = 0; d < c->n; d++)
            osu_fill((char *)sb + (size_t)d * count * c->esize, c->type, count, c->me, d, 0, it);
        break;
    case BK_REDUCE_SCATTER:
    case BK_REDUCE_SCATTER_BLOCK: osu_fill(sb, c->type, count * (size_t)c->n, c->me, 0, 0, it); break;
    case BK_BARRIER: break;
    default: osu_fill(sb, c->type, count, c->me, 0, 0, it); break;
    }
    osu_pool_push(&c->sp, (void *)dev->sendbuf, sbytes);
    osu_pool_push(&c->rp, dev->recvbuf, rbytes);
}

/* Sum over ranks of osu_value(r, 0, idx, it), as the reductions compute it. */
static size_t check_sum(const coll_ctx_t *c, const float *buf, size_t count, size_t first_idx, int it)
{
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
        long sum = 0;
        for (int r = 0; r < c->n; r++)
            sum += osu_value(r, 0, first_idx + i, it);
        bad += buf[i] != (float)sum;
    }
    return bad;
}

static size_t check_outputs(const coll_ctx_t *c, const bk_coll_args_t *dev, size_t count, int it)
{
    size_t sbytes, rbytes;
    buffer_bytes(c, count, &sbytes, &rbytes);
    if (c->b->coll == BK_BARRIER) return 0;
    osu_pool_pull(&c->rp, dev->recvbuf, rbytes);
    bk_coll_args_t host = *dev, *a = &host;
    host.recvbuf = osu_pool_host(&c->rp, dev->recvbuf);
    const char *rb = a->recvbuf;
    size_t blk = count * c->esize, bad = 0;
    switch (c->b->coll) {
    case BK_BARRIER: return 0;
    case BK_BCAST: return osu_check(rb, c->type, count, a->root, 0, 0, it);
    case BK_REDUCE:
        if (c->me != a->root) return 0;
        /* fall through */
    case BK_ALLREDUCE: return check_sum(c, a->recvbuf, count, 0, it);
    case BK_REDUCE_SCATTER:
    case BK_REDUCE_SCATTER_BLOCK: return check_sum(c, a->recvbuf, count, (size_t)c->me * count, it);
    case BK_GATHER:
        if (c->me != a->root) return 0;
        /* fall through */
    case BK_ALLGATHER:
    case BK_ALLGATHERV:
        for (int r = 0; r < c->n; r++)
            bad += osu_check(rb + (size_t)r * blk, c->type, count, r, 0, 0, it);
        return bad;
    case BK_SCATTER: return osu_check(rb, c->type, count, a->root, c->me, 0, it);
    case BK_ALLTOALL:
    case BK_ALLTOALLV:
        for (int s = 0; s < c->n; s++)
            bad += osu_check(rb + (size_t)s * blk, c->type, count, s, c->me, 0, it);
        return bad;
    case BK_COLL_COUNT: break;
    }
    return 0;
}

static void ctx_init(coll_ctx_t *c, const osu_bench_t *b)
{
    memset(c, 0, sizeof(*c));
    c->b = b;
    c->n = bk_size();
    c->me = bk_rank();
    c->type = is_reduction(b->coll) ? BK_FLOAT : BK_CHAR;
    c->esize = bk_type_size(c->type);
    size_t sbytes, rbytes, maxcount = osu_opt.max_size / c->esize;
    if (b->coll == BK_REDUCE_SCATTER || b->coll == BK_REDUCE_SCATTER_BLOCK) maxcount /= (size_t)c->n;
    buffer_bytes(c, maxcount, &sbytes, &rbytes);
    /* osu.c: loc[0] == loc[1] for collectives ('H', or 'D' / 'M' with -d) */
    osu_pool_init_at(&c->sp, sbytes, osu_opt.loc[0]);
    osu_pool_init_at(&c->rp, rbytes, osu_opt.loc[1]);
    c->counts64 = calloc((size_t)c->n, sizeof(int64_t));
    c->displs64 = calloc((size_t)c->n, sizeof(int64_t));
    c->counts32 = calloc((size_t)c->n, sizeof(int));
    c->displs32 = calloc((size_t)c->n, sizeof(int));
    if (!c->counts64 || !c->displs64 || !c->counts32 || !c->displs32) bk_abort("out of memory for counts");
}

static void ctx_free(coll_ctx_t *c)
{
    osu_pool_free(&c->sp);
    osu_pool_free(&c->rp);
    free(c->counts64);
    free(c->displs64);
    free(c->counts32);
    free(c->displs32);
}

static void barrier(void)
{
    bk_coll_args_t a = {.coll = BK_BARRIER};
    bk_coll(&a);
}

/* Sizes to run: barrier runs once (size 0); the others skip sizes smaller
 * than one element per rank. */
static int size_runs(const coll_ctx_t *c, size_t size)
{
    if (c->b->coll == BK_BARRIER) return size == osu_first_size();
    return elems(c, size) > 0;
}

/* Buffers that are not host memory: one call of the first size, untimed
 * (see the top). 0 to go on; 2 (every rank) when some rank's call failed,
 * the lowest such rank having printed why. */
static int probe(coll_ctx_t *c, int nonblocking)
{
    if (osu_opt.loc[0] == 'H' && osu_opt.loc[1] == 'H') return 0;
    size_t size = osu_first_size();
    while (size <= osu_opt.max_size && !size_runs(c, size))
        size = osu_next_size(size);
    if (size > osu_opt.max_size) return 0;
    bk_coll_args_t a = make_args(c, elems(c, size), 0);
    char why[1200] = "";
    int failed = bk_coll_try(&a, nonblocking, why, sizeof(why)) != 0;
    double mine = failed ? c->me : c->n, lowest = c->n;
    bk_coll_args_t r = {
        .coll = BK_ALLREDUCE, .sendbuf = &mine, .recvbuf = &lowest, .count = 1, .type = BK_DOUBLE, .op = BK_MIN};
    bk_coll(&r);
    if ((int)lowest >= c->n) return 0;
    if (failed && c->me == (int)lowest) {
        fprintf(stderr, "%s-osu-%s: rank %d: %s of %zu bytes on %s buffers failed: %s\n", bk_short_name(),
                c->b->name, c->me, c->b->name, size, osu_loc_name(osu_opt.loc[1]), why);
        fflush(stderr);
    }
    return 2;
}

/* Busy "compute" for `secs`, calling test `tests` times at even intervals. */
static void compute(double secs, int tests, bk_req_t *req)
{
    double start = bk_wtime(), end = start + secs;
    double step = tests > 0 ? secs / (tests + 1) : secs + 1, next = start + step;
    volatile double x = 1.0;
    int done = 0;
    for (;;) {
        for (int k = 0; k < 64; k++)
            x = x * 1.0000001 + 1e-9; /* some arithmetic between clock reads */
        double now = bk_wtime();
        if (now >= end) break;
        if (!done && now >= next) {
            bk_test(req, &done);
            next += step;
        }
    }
}

/* One timed loop for every mode: blocking calls, nonblocking post + wait
 * (pure communication), or post + `overlap_secs` of compute + wait. Adds
 * the timed iterations' seconds to *total (and the compute part to
 * *compute_total); validation stays outside the timer. */
enum { MODE_BLOCKING, MODE_NB_PURE, MODE_NB_OVERLAP };
static long timed_loop(coll_ctx_t *c, size_t count, int iters, int skip, int mode, double overlap_secs, double *total,
                       double *compute_total)
{
    long errors = 0;
    bk_req_t req;
    barrier();
    for (int i = 0; i < iters + skip; i++) {
        bk_coll_args_t a = make_args(c, count, i);
        if (osu_opt.validate) fill_inputs(c, &a, count, i);
        double t0 = bk_wtime(), tc = 0;
        if (mode == MODE_BLOCKING) {
            bk_coll(&a);
        } else {
            bk_icoll(&a, &req);
            if (mode == MODE_NB_OVERLAP) {
                tc = bk_wtime();
                compute(overlap_secs, osu_opt.test_calls, &req);
                tc = bk_wtime() - tc;
            }
            bk_waitall(1, &req);
        }
        double t1 = bk_wtime();
        if (i >= skip) {
            *total += t1 - t0;
            if (compute_total) *compute_total += tc;
        }
        if (osu_opt.validate) errors += (long)check_outputs(c, &a, count, i);
        /* As OSU's collective tests: a barrier after every blocking call,
         * outside the timed region, so each call starts from a common
         * point (otherwise a rooted collective's ranks run ahead of the
         * root and the average measures buffering, not latency). */
        if (mode == MODE_BLOCKING && c->b->coll != BK_BARRIER) barrier();
    }
    return errors;
}

int osu_run_coll(const osu_bench_t *b)
{
    coll_ctx_t c;
    ctx_init(&c, b);
    if (probe(&c, 0)) {
        ctx_free(&c);
        return 2;
    }
    char cols[256];
    snprintf(cols, sizeof(cols), "# Size       Avg Latency(us)%s%s",
             osu_opt.full ? "   Min Latency(us)   Max Latency(us)  Iterations" : "",
             osu_opt.validate ? "        Validation" : "");
    osu_print_header(b, cols);
    long total_errors = 0;
    for (size_t size = osu_first_size(); size <= osu_opt.max_size; size = osu_next_size(size)) {
        if (!size_runs(&c, size)) continue;
        size_t count = elems(&c, size);
        int iters = osu_iters(size), skip = osu_warmup(size);
        double timer = 0;
        long errors = timed_loop(&c, count, iters, skip, MODE_BLOCKING, 0, &timer, NULL);
        osu_stat_t s = osu_stat(timer * 1e6 / iters);
        errors = osu_errors_total(errors);
        total_errors += errors;
        if (c.me == 0) {
            printf("%-10zu%18.2f", b->coll == BK_BARRIER ? (size_t)0 : size, s.avg);
            if (osu_opt.full) printf("%18.2f%18.2f%12d", s.min, s.max, iters);
            if (osu_opt.validate) printf("%18s", osu_valid_text(errors));
            printf("\n");
            fflush(stdout);
        }
        osu_csv_row(b, size, &s, -1, -1, NULL, iters, osu_opt.validate ? !errors : -1);
    }
    ctx_free(&c);
    return total_errors ? 1 : 0;
}

int osu_run_icoll(const osu_bench_t *b)
{
    coll_ctx_t c;
    ctx_init(&c, b);
    if (probe(&c, 1)) {
        ctx_free(&c);
        return 2;
    }
    char cols[320];
    snprintf(cols, sizeof(cols),
             "# Size           Overall(us)       Compute(us)    Pure Comm.(us)        Overlap(%%)%s%s",
             osu_opt.full ? "   Min Overall(us)   Max Overall(us)  Iterations" : "",
             osu_opt.validate ? "        Validation" : "");
    osu_print_header(b, cols);
    long total_errors = 0;
    for (size_t size = osu_first_size(); size <= osu_opt.max_size; size = osu_next_size(size)) {
        if (!size_runs(&c, size)) continue;
        size_t count = elems(&c, size);
        int iters = osu_iters(size), skip = osu_warmup(size);
        /* Pure communication time, then overlapped with compute of that length. */
        double pure = 0, overall = 0, comp = 0;
        long errors = timed_loop(&c, count, iters, skip, MODE_NB_PURE, 0, &pure, NULL);
        pure /= iters;
        errors += timed_loop(&c, count, iters, skip, MODE_NB_OVERLAP, pure, &overall, &comp);
        osu_stat_t so = osu_stat(overall * 1e6 / iters);
        osu_stat_t sc = osu_stat(comp * 1e6 / iters);
        osu_stat_t sp = osu_stat(pure * 1e6);
        double ov = sp.avg > 0 ? 100.0 - (so.avg - sc.avg) / sp.avg * 100.0 : 0;
        if (ov < 0) ov = 0;
        if (ov > 100) ov = 100;
        errors = osu_errors_total(errors);
        total_errors += errors;
        if (c.me == 0) {
            printf("%-10zu%18.2f%18.2f%18.2f%18.2f", b->coll == BK_BARRIER ? (size_t)0 : size, so.avg, sc.avg, sp.avg,
                   ov);
            if (osu_opt.full) printf("%18.2f%18.2f%12d", so.min, so.max, iters);
            if (osu_opt.validate) printf("%18s", osu_valid_text(errors));
            printf("\n");
            fflush(stdout);
        }
        double overlap[4] = {so.avg, sc.avg, sp.avg, ov};
        osu_csv_row(b, size, &so, -1, -1, overlap, iters, osu_opt.validate ? !errors : -1);
    }
    ctx_free(&c);
    return total_errors ? 1 : 0;
}
