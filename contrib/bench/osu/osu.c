/* weft's OSU-style microbenchmarks: options, the program table, buffers,
 * statistics and output. One binary per backend; the program is chosen by
 * the name it is started under (weft-osu-allreduce, mpi-osu-bw, ...) or by
 * its first argument (weft-osu allreduce ...). */
#include "osu.h"

#include "cuda_mem.h"
#include "size.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

osu_opts_t osu_opt;

int osu_run_pt2pt(const osu_bench_t *b);
int osu_run_coll(const osu_bench_t *b);
int osu_run_icoll(const osu_bench_t *b);

#define MiB (1024 * 1024)
#define PT(n, t, k, lo)                                                                                                \
    {                                                                                                                  \
        n, t, OSU_PT2PT, BK_BARRIER, k, lo, 4 * MiB, osu_run_pt2pt                                                     \
    }
#define CO(n, t, c, lo)                                                                                                \
    {                                                                                                                  \
        n, t, OSU_COLL, c, 0, lo, 1 * MiB, osu_run_coll                                                                \
    }
#define IC(n, t, c, lo)                                                                                                \
    {                                                                                                                  \
        n, t, OSU_ICOLL, c, 0, lo, 1 * MiB, osu_run_icoll                                                              \
    }
static const osu_bench_t benches[] = {
    PT("latency", "Latency Test", PT_LATENCY, 0),
    PT("bw", "Bandwidth Test", PT_BW, 1),
    PT("bibw", "Bi-Directional Bandwidth Test", PT_BIBW, 1),
    PT("mbw-mr", "Multiple Bandwidth / Message Rate Test", PT_MBW_MR, 1),
    PT("multi-lat", "Multi Latency Test", PT_MULTI_LAT, 0),
    CO("barrier", "Barrier Latency Test", BK_BARRIER, 0),
    CO("bcast", "Broadcast Latency Test", BK_BCAST, 1),
    CO("reduce", "Reduce Latency Test", BK_REDUCE, 4),
    CO("allreduce", "Allreduce Latency Test", BK_ALLREDUCE, 4),
    CO("allgather", "Allgather Latency Test", BK_ALLGATHER, 1),
    CO("allgatherv", "Allgatherv Latency Test", BK_ALLGATHERV, 1),
    CO("reduce-scatter", "Reduce_scatter Latency Test", BK_REDUCE_SCATTER, 4),
    CO("reduce-scatter-block", "Reduce_scatter_block Latency Test", BK_REDUCE_SCATTER_BLOCK, 4),
    CO("alltoall", "All-to-All Personalized Exchange Latency Test", BK_ALLTOALL, 1),
    CO("alltoallv", "All-to-Allv Personalized Exchange Latency Test", BK_ALLTOALLV, 1),
    CO("gather", "Gather Latency Test", BK_GATHER, 1),
    CO("scatter", "Scatter Latency Test", BK_SCATTER, 1),
    IC("ibarrier", "Non-blocking Barrier Latency Test", BK_BARRIER, 0),
    IC("ibcast", "Non-blocking Broadcast Latency Test", BK_BCAST, 1),
    IC("ireduce", "Non-blocking Reduce Latency Test", BK_REDUCE, 4),
    IC("iallreduce", "Non-blocking Allreduce Latency Test", BK_ALLREDUCE, 4),
    IC("iallgather", "Non-blocking Allgather Latency Test", BK_ALLGATHER, 1),
    IC("iallgatherv", "Non-blocking Allgatherv Latency Test", BK_ALLGATHERV, 1),
    IC("ireduce-scatter", "Non-blocking Reduce_scatter Latency Test", BK_REDUCE_SCATTER, 4),
    IC("ireduce-scatter-block", "Non-blocking Reduce_scatter_block Latency Test", BK_REDUCE_SCATTER_BLOCK, 4),
    IC("ialltoall", "Non-blocking All-to-All Latency Test", BK_ALLTOALL, 1),
    IC("ialltoallv", "Non-blocking All-to-Allv Latency Test", BK_ALLTOALLV, 1),
    IC("igather", "Non-blocking Gather Latency Test", BK_GATHER, 1),
    IC("iscatter", "Non-blocking Scatter Latency Test", BK_SCATTER, 1),
};
#define NBENCH ((int)(sizeof(benches) / sizeof(benches[0])))

static const osu_bench_t *find_bench(const char *name)
{
    for (int i = 0; i < NBENCH; i++)
        if (!strcmp(benches[i].name, name)) return &benches[i];
    return NULL;
}

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [options]        (or: %s-osu PROGRAM [options])\n"
            "  -m [MIN:]MAX     message sizes in bytes, powers of two (suffixes k, m)\n"
            "  -i N             timed iterations per size (default 10000 pt2pt latency, 1000 collectives;\n"
            "                   sizes above %d bytes use N/10)\n"
            "  -x N             warm-up iterations per size (default 200 collectives, 1000 latency;\n"
            "                   sizes above %d bytes use N/10)\n"
            "  --iters-large N, --warmup-large N   the counts above %d bytes instead of N/10\n"
            "  -c               validate every result (adds a Validation column; exit 1 on a mismatch)\n"
            "  -f               full statistics: min / avg / max over ranks and the iteration count\n"
            "  -W N             window of messages in flight for bw, bibw, mbw-mr (default 64)\n"
            "  -t N             calls to test during the compute phase of nonblocking benchmarks (default 0)\n"
            "  -d cuda [A B]    device buffers. Point-to-point programs: A and B place the buffers of rank 0\n"
            "                   and rank 1 (mbw-mr, multi-lat: of the first and second half), each D (device),\n"
            "                   H (host), P (pinned host: cuMemAllocHost; not OSU's) or M (managed); default D D\n"
            "                   (OSU's own binaries default to H H); the words alone (D H) imply -d cuda.\n"
            "                   Collectives: every buffer of every rank on its GPU (no A B); a collective the\n"
            "                   library cannot run on device buffers ends with its error (exit 2).\n"
            "                   GPU: local rank modulo the device count; the\n"
            "                   driver (libcuda.so.1) is loaded at run time (exit 2 where there is none);\n"
            "                   OSU_CUDA=force (environment) passes device pointers to a library that says\n"
            "                   it cannot take them (an MPI that is not CUDA-aware)\n"
            "  -d host          host buffers (the default); -d managed: M M (OSU 5's -d managed; collectives:\n"
            "                   managed buffers on every rank)\n"
            "  --rotate BYTES   rotate buffers spanning this many bytes (default 32m; 0 = one buffer)\n"
            "  --csv FILE       also append one CSV row per size to FILE\n"
            "  --label NAME     library name in the CSV rows (default %s; e.g. one per algorithm)\n"
            "programs:",
            prog, bk_short_name(), OSU_LARGE_MESSAGE, OSU_LARGE_MESSAGE, OSU_LARGE_MESSAGE, bk_short_name());
    for (int i = 0; i < NBENCH; i++)
        fprintf(f, " %s", benches[i].name);
    fprintf(f, "\n");
}

/* A whole argument: a size and nothing after it. */
static int parse_size(const char *s, size_t *out)
{
    const char *end;
    size_t v;
    if (osu_parse_size(s, &v, &end) || *end) return -1;
    *out = v;
    return 0;
}

static int parse_int(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > 1000000000) return -1;
    *out = (int)v;
    return 0;
}

/* Returns 0 to run, 1 to stop quietly (--help), -1 on a bad option (reported on rank 0). */
static int parse_options(int argc, char **argv, const osu_bench_t *b, const char *prog)
{
    int rank0 = bk_rank() == 0;
    int iters = -1, warmup = -1, iters_large = -1, warmup_large = -1;
    char dev_opt = 0, words[2] = {0, 0}; /* -d: 'c' cuda, 'm' managed, 'h' host; buffer locations */
    int nwords = 0;
    osu_opt.min_size = b->default_min;
    osu_opt.max_size = b->default_max;
    osu_opt.window = 64;
    osu_opt.rotate_bytes = 32u * MiB;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            if (rank0) usage(stdout, prog);
            return 1;
        } else if (!strcmp(a, "-c")) {
            osu_opt.validate = 1;
        } else if (!strcmp(a, "-f")) {
            osu_opt.full = 1;
        } else if (!v && (!strcmp(a, "-m") || !strcmp(a, "-i") || !strcmp(a, "-x") || !strcmp(a, "-W") ||
                          !strcmp(a, "-t") || !strcmp(a, "-d") || !strcmp(a, "--rotate") || !strcmp(a, "--csv") ||
                          !strcmp(a, "--label") || !strcmp(a, "--iters-large") || !strcmp(a, "--warmup-large"))) {
            if (rank0) fprintf(stderr, "%s: option %s needs a value\n", prog, a);
            return -1;
        } else if (!strcmp(a, "-m")) {
            const char *colon = strchr(v, ':');
            if (colon) {
                char lo[64];
                size_t n = (size_t)(colon - v);
                if (n >= sizeof(lo)) n = sizeof(lo) - 1;
                memcpy(lo, v, n);
                lo[n] = '\0';
                bad = (n && parse_size(lo, &osu_opt.min_size)) || parse_size(colon + 1, &osu_opt.max_size);
            } else {
                bad = parse_size(v, &osu_opt.max_size);
            }
            bad = bad || osu_opt.min_size > osu_opt.max_size || osu_opt.max_size > (size_t)1 << 30;
            i++;
        } else if (!strcmp(a, "-i")) {
            bad = parse_int(v, &iters) || iters < 1;
            i++;
        } else if (!strcmp(a, "--iters-large")) {
            bad = parse_int(v, &iters_large) || iters_large < 1;
            i++;
        } else if (!strcmp(a, "--warmup-large")) {
            bad = parse_int(v, &warmup_large);
            i++;
        } else if (!strcmp(a, "-x")) {
            bad = parse_int(v, &warmup);
            i++;
        } else if (!strcmp(a, "-W")) {
            bad = parse_int(v, &osu_opt.window) || osu_opt.window < 1 || osu_opt.window > 4096;
            i++;
        } else if (!strcmp(a, "-t")) {
            bad = parse_int(v, &osu_opt.test_calls);
            i++;
        } else if (!strcmp(a, "-d")) {
            /* OSU 5's -d managed: managed buffers on both ranks. */
            dev_opt = !strcmp(v, "cuda") ? 'c' : !strcmp(v, "managed") ? 'm' : !strcmp(v, "host") ? 'h' : 0;
            bad = !dev_opt;
            i++;
        } else if (a[0] && !a[1] && strchr("DHMPdhmp", a[0])) {
            if (nwords == 2) {
                if (rank0) fprintf(stderr, "%s: a third buffer location '%s' (two: rank 0's, rank 1's)\n", prog, a);
                return -1;
            }
            words[nwords++] = (char)toupper((unsigned char)a[0]);
        } else if (!strcmp(a, "--rotate")) {
            bad = parse_size(v, &osu_opt.rotate_bytes);
            i++;
        } else if (!strcmp(a, "--csv")) {
            osu_opt.csv_path = v;
            i++;
        } else if (!strcmp(a, "--label")) {
            osu_opt.label = v;
            i++;
        } else {
            if (rank0) {
                fprintf(stderr, "%s: unknown option '%s'\n", prog, a);
                usage(stderr, prog);
            }
            return -1;
        }
        if (bad) {
            if (rank0) fprintf(stderr, "%s: bad value '%s' for %s\n", prog, v, a);
            return -1;
        }
    }
    if (nwords == 1) {
        if (rank0)
            fprintf(stderr, "%s: buffer locations come in pairs, rank 0's then rank 1's: D D, D H, H D or H H\n", prog);
        return -1;
    }
    int device_words = nwords == 2 && (words[0] != 'H' || words[1] != 'H'); /* P H needs the driver too */
    if (dev_opt == 'h' && device_words) {
        if (rank0) fprintf(stderr, "%s: -d host contradicts the buffer locations %c %c\n", prog, words[0], words[1]);
        return -1;
    }
    osu_opt.accel = dev_opt == 'c' || dev_opt == 'm' || device_words;
    if (nwords == 2)
        memcpy(osu_opt.loc, words, 2);
    else
        memset(osu_opt.loc, dev_opt == 'm' ? 'M' : osu_opt.accel ? 'D' : 'H', 2);
    /* Collectives: every buffer of every rank in one place (-d cuda: device,
     * -d managed: managed); the D / H words place two ranks' buffers, which
     * a collective does not have. */
    if (nwords && b->family != OSU_PT2PT) {
        if (rank0)
            fprintf(stderr,
                    "%s: buffer locations (%c %c) are for the point-to-point programs; collectives take -d cuda "
                    "(device buffers on every rank) or -d managed\n",
                    prog, words[0], words[1]);
        return -1;
    }
    int pt2pt_latency = b->family == OSU_PT2PT && (b->pt2pt_kind == PT_LATENCY || b->pt2pt_kind == PT_MULTI_LAT);
    int pt2pt_bw = b->family == OSU_PT2PT && !pt2pt_latency;
    /* OSU's defaults: latency 10000 (+1000), bandwidth 100 (+10), collectives 1000 (+200). */
    if (iters < 0) iters = pt2pt_latency ? 10000 : pt2pt_bw ? 100 : 1000;
    if (warmup < 0) warmup = pt2pt_latency ? 1000 : pt2pt_bw ? 10 : 200;
    osu_opt.iters = iters;
    osu_opt.warmup = warmup;
    osu_opt.iters_large = iters_large > 0 ? iters_large : iters / 10 > 0 ? iters / 10 : 1;
    osu_opt.warmup_large = warmup_large >= 0 ? warmup_large : warmup / 10;
    if (osu_opt.csv_path && rank0) {
        osu_opt.csv = fopen(osu_opt.csv_path, "a");
        if (!osu_opt.csv) {
            fprintf(stderr, "%s: cannot open %s: %s\n", prog, osu_opt.csv_path, strerror(errno));
            return -1;
        }
        if (ftell(osu_opt.csv) == 0)
            fprintf(osu_opt.csv, "benchmark,library,ranks,size,avg_us,min_us,max_us,bw_mbs,msg_rate,overall_us,"
                                 "compute_us,pure_comm_us,overlap_pct,iterations,validation\n");
    }
    return 0;
}

/* -d cuda: CUDA on every rank (the device of its local rank modulo the
 * device count), then the library's word on device pointers when a rank
 * holds device buffers (OSU_CUDA=force in the environment overrides a no).
 * Every rank returns the same: 0 to run, 2 to stop, the reason printed once
 * (by rank 0, or by a failing rank when rank 0 did not fail). */
static int setup_device(const char *prog)
{
    if (!osu_opt.accel) return 0;
    char why[512] = "", lib_note[384] = "";
    int fail = 0, support = 1, uses_device = osu_opt.loc[0] != 'H' || osu_opt.loc[1] != 'H';
    if (cm_init(bk_local_rank(), why, sizeof(why)) != 0) fail = 1;
    if (!fail && uses_device) {
        support = bk_device_support(lib_note, sizeof(lib_note));
        const char *force = getenv("OSU_CUDA");
        if (support == 0 && force && !strcmp(force, "force")) {
            size_t n = strlen(lib_note);
            snprintf(lib_note + n, sizeof(lib_note) - n, " [OSU_CUDA=force: device pointers passed anyway]");
        } else if (support == 0) {
            fail = 1;
            snprintf(why, sizeof(why), "%s", lib_note);
        }
    }
    if (osu_errors_total(fail)) {
        int32_t rank0_failed = fail;
        bk_coll_args_t a = {.coll = BK_BCAST, .recvbuf = &rank0_failed, .count = 1, .type = BK_INT32, .root = 0};
        bk_coll(&a);
        if (fail && (bk_rank() == 0 || !rank0_failed)) {
            fprintf(stderr, "%s: rank %d: -d cuda: %s\n", prog, bk_rank(), why);
            fflush(stderr);
        }
        return 2;
    }
    int v = cm_driver_version();
    snprintf(osu_opt.device_note, sizeof(osu_opt.device_note),
             "# CUDA: rank 0 on device %d of %d (%s; every rank: local rank %% %d), driver %d.%d%s%s", cm_device(),
             cm_device_count(), cm_device_name(), cm_device_count(), v / 1000, v % 1000 / 10,
             uses_device && lib_note[0] ? "; " : "", uses_device ? lib_note : "");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--list")) { /* the build links weft-osu-NAME from this list */
        for (int i = 0; i < NBENCH; i++)
            printf("%s\n", benches[i].name);
        return 0;
    }
    bk_init(&argc, &argv);
    /* The program: the name after "-osu-" in argv[0], else the first argument. */
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    const char *which = strstr(base, "-osu-");
    int first = 1;
    if (which)
        which += 5;
    else if (argc > 1)
        which = argv[first++];
    const osu_bench_t *b = which ? find_bench(which) : NULL;
    char prog[96];
    snprintf(prog, sizeof(prog), "%s-osu-%s", bk_short_name(), b ? b->name : "?");
    if (!b) {
        if (bk_rank() == 0) {
            if (which) fprintf(stderr, "%s: unknown program '%s'\n", base, which);
            usage(stderr, base);
        }
        bk_finalize();
        return 2;
    }
    int rc = parse_options(argc - first, argv + first, b, prog);
    if (rc == 0) rc = setup_device(prog) ? -1 : 0;
    if (rc != 0) {
        if (osu_opt.csv) fclose(osu_opt.csv);
        bk_finalize();
        return rc < 0 ? 2 : 0;
    }
    rc = b->run(b);
    if (osu_opt.csv) fclose(osu_opt.csv);
    bk_finalize();
    return rc;
}

int osu_iters(size_t size)
{
    return size > OSU_LARGE_MESSAGE ? osu_opt.iters_large : osu_opt.iters;
}
int osu_warmup(size_t size)
{
    return size > OSU_LARGE_MESSAGE ? osu_opt.warmup_large : osu_opt.warmup;
}
size_t osu_first_size(void)
{
    return osu_opt.min_size;
}

size_t osu_next_size(size_t size)
{
    if (size == 0) return 1;
    size_t p = 1;
    while (p <= size)
        p <<= 1; /* next power of two above size */
    return p;
}

void osu_pool_init(osu_pool_t *p, size_t bytes)
{
    osu_pool_init_at(p, bytes, 'H');
}

void osu_pool_init_at(osu_pool_t *p, size_t bytes, char loc)
{
    size_t slot = (bytes + 4095) & ~(size_t)4095;
    if (slot == 0) slot = 4096;
    size_t n = osu_opt.rotate_bytes / slot;
    if (n < 1) n = 1;
    if (n > 64) n = 64;
    p->nslots = (int)n;
    p->bytes = bytes;
    p->loc = loc;
    p->scratch = NULL;
    p->slot = calloc(n, sizeof(*p->slot));
    if (!p->slot) bk_abort("out of memory for buffer slots");
    for (size_t i = 0; i < n; i++) {
        if (loc == 'H') {
            if (posix_memalign((void **)&p->slot[i], 4096, slot)) bk_abort("out of memory for buffers");
            memset(p->slot[i], 0, slot); /* fault the pages in before timing */
        } else if (loc == 'P') {
            if (!(p->slot[i] = cm_host_alloc(slot))) bk_abort(cm_last_error());
            memset(p->slot[i], 0, slot);
        } else if (!(p->slot[i] = cm_alloc(slot, loc == 'M')) || cm_memset(p->slot[i], 0, slot)) {
            bk_abort(cm_last_error());
        }
    }
    if (loc != 'H' && loc != 'P' && osu_opt.validate && !(p->scratch = malloc(slot)))
        bk_abort("out of memory for buffers");
}

void osu_pool_free(osu_pool_t *p)
{
    for (int i = 0; i < p->nslots; i++)
        if (p->loc == 'H')
            free(p->slot[i]);
        else if (p->loc == 'P')
            cm_host_free(p->slot[i]);
        else
            cm_free(p->slot[i]);
    free(p->slot);
    free(p->scratch);
    p->slot = NULL;
    p->scratch = NULL;
    p->nslots = 0;
}

static int pool_on_host(const osu_pool_t *p)
{
    return p->loc == 'H' || p->loc == 'P';
}

void *osu_pool_host(const osu_pool_t *p, void *buf)
{
    if (pool_on_host(p)) return buf;
    if (!p->scratch) bk_abort("device pool without a host copy (validation off?)");
    return p->scratch;
}

void osu_pool_push(const osu_pool_t *p, void *buf, size_t bytes)
{
    if (!pool_on_host(p) && cm_htod(buf, osu_pool_host(p, buf), bytes)) bk_abort(cm_last_error());
}

void osu_pool_pull(const osu_pool_t *p, const void *buf, size_t bytes)
{
    if (!pool_on_host(p) && cm_dtoh(osu_pool_host(p, NULL), buf, bytes)) bk_abort(cm_last_error());
}

void osu_pool_fill(const osu_pool_t *p, void *buf, size_t bytes, int src, int dst, int it)
{
    osu_fill(osu_pool_host(p, buf), BK_CHAR, bytes, src, dst, 0, it);
    osu_pool_push(p, buf, bytes);
}

size_t osu_pool_check(const osu_pool_t *p, const void *buf, size_t bytes, int src, int dst, int it)
{
    osu_pool_pull(p, buf, bytes);
    return osu_check(osu_pool_host(p, (void *)buf), BK_CHAR, bytes, src, dst, 0, it);
}

const char *osu_loc_name(char loc)
{
    return loc == 'D' ? "DEVICE (D)" : loc == 'M' ? "MANAGED (M)" : loc == 'P' ? "PINNED HOST (P)" : "HOST (H)";
}

void osu_fill(void *buf, bk_type_t type, size_t count, int src, int dst, size_t first_idx, int it)
{
    for (size_t i = 0; i < count; i++) {
        int v = osu_value(src, dst, first_idx + i, it);
        switch (type) {
        case BK_CHAR: ((unsigned char *)buf)[i] = (unsigned char)v; break;
        case BK_INT32: ((int32_t *)buf)[i] = v; break;
        case BK_FLOAT: ((float *)buf)[i] = (float)v; break;
        case BK_DOUBLE: ((double *)buf)[i] = v; break;
        }
    }
}

size_t osu_check(const void *buf, bk_type_t type, size_t count, int src, int dst, size_t first_idx, int it)
{
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
        int v = osu_value(src, dst, first_idx + i, it);
        switch (type) {
        case BK_CHAR: bad += ((const unsigned char *)buf)[i] != (unsigned char)v; break;
        case BK_INT32: bad += ((const int32_t *)buf)[i] != v; break;
        case BK_FLOAT: bad += ((const float *)buf)[i] != (float)v; break;
        case BK_DOUBLE: bad += ((const double *)buf)[i] != v; break;
        }
    }
    return bad;
}

osu_stat_t osu_stat(double value)
{
    osu_stat_t s = {0, 0, 0};
    bk_coll_args_t a = {.coll = BK_REDUCE, .sendbuf = &value, .count = 1, .type = BK_DOUBLE, .root = 0};
    a.op = BK_MIN, a.recvbuf = &s.min;
    bk_coll(&a);
    a.op = BK_MAX, a.recvbuf = &s.max;
    bk_coll(&a);
    a.op = BK_SUM, a.recvbuf = &s.avg;
    bk_coll(&a);
    s.avg /= bk_size();
    return s;
}

long osu_errors_total(long mine)
{
    double in = (double)mine, out = 0;
    bk_coll_args_t a = {
        .coll = BK_ALLREDUCE, .sendbuf = &in, .recvbuf = &out, .count = 1, .type = BK_DOUBLE, .op = BK_SUM};
    bk_coll(&a);
    return (long)out;
}

const char *osu_valid_text(long errors)
{
    return errors ? "Fail" : "Pass";
}

void osu_print_header(const osu_bench_t *b, const char *columns)
{
    if (bk_rank() != 0) return;
    printf("# %s OSU-style %s (%s, %d ranks)\n", bk_short_name(), b->title, bk_library(), bk_size());
    if (osu_opt.accel) {
        printf("# Send Buffer on %s and Receive Buffer on %s\n", osu_loc_name(osu_opt.loc[0]),
               osu_loc_name(osu_opt.loc[1]));
        printf("%s\n", osu_opt.device_note);
    }
    if (b->family != OSU_PT2PT)
        printf("# buffers rotate over %d MiB; %s\n", (int)(osu_opt.rotate_bytes >> 20),
               b->family == OSU_ICOLL ? "times are averages over ranks" : "latency: average over ranks");
    printf("%s\n", columns);
    fflush(stdout);
}

static void csv_num(FILE *f, double v)
{
    if (v < 0)
        fprintf(f, ",");
    else
        fprintf(f, ",%.4f", v);
}

void osu_csv_row(const osu_bench_t *b, size_t size, const osu_stat_t *lat, double bw_mbs, double msg_rate,
                 const double overlap[4], int iters, int valid)
{
    FILE *f = osu_opt.csv;
    if (!f || bk_rank() != 0) return;
    fprintf(f, "%s,%s,%d,%zu", b->name, osu_opt.label ? osu_opt.label : bk_short_name(), bk_size(), size);
    csv_num(f, lat ? lat->avg : -1);
    csv_num(f, lat ? lat->min : -1);
    csv_num(f, lat ? lat->max : -1);
    csv_num(f, bw_mbs);
    csv_num(f, msg_rate);
    for (int i = 0; i < 4; i++)
        csv_num(f, overlap ? overlap[i] : -1);
    fprintf(f, ",%d,%s\n", iters, valid < 0 ? "" : valid ? "pass" : "fail");
    fflush(f);
}

size_t bk_type_size(bk_type_t t)
{
    static const size_t sizes[] = {[BK_CHAR] = 1, [BK_INT32] = 4, [BK_FLOAT] = 4, [BK_DOUBLE] = 8};
    return sizes[t];
}
