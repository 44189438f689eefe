/* The cuMemcpy floor under GPU point-to-point numbers, without weft or UCX:
 * what one process gets from the driver's copies on one GPU. Two ranks on
 * one GPU move device memory with such copies (UCX's cuda_ipc maps the
 * peer's buffer and copies device to device; a staged path copies device to
 * pinned host and back), so weft-osu-bw D D approaches the DtoD column and
 * small-message latency cannot beat the copy latency.
 *
 * --pingpong: the floor for two processes on one GPU (two ranks sharing a
 * device, no MPS): what alternating GPU work costs when each process in turn
 * copies, then hands the turn to the other, as a ping-pong does. The GPU
 * switches between the two contexts, and a turn that writes device memory
 * pays far more than one that only copies device to host; no library (weft,
 * UCX, NCCL) moving messages this way between the two processes gets under
 * these numbers.
 *
 *   contrib/bench/cuda-floor [-n REPS] [-b MIN:MAX] [-l MIN:MAX] [-k COPIES] [-d DEVICE] [--csv FILE]
 *   contrib/bench/cuda-floor --pingpong [-n REPS] [-l MIN:MAX] [-k ROUNDTRIPS] [-d DEVICE] [--csv FILE]
 *     -n REPS      repetitions per size and direction; the table prints the median (default 20)
 *     -b MIN:MAX   bandwidth sizes, powers of two (default 4m:1g; suffixes k m g; 0:0 skips the table)
 *     -l MIN:MAX   latency sizes (default 8:64k; 0:0 skips the table)
 *     -k COPIES    copies per latency repetition, timed together (default 100)
 *     -d DEVICE    device ordinal (default: LOCAL_RANK / OMPI_COMM_WORLD_LOCAL_RANK, else 0;
 *                  taken modulo the device count)
 *     --csv FILE   also write the medians: test,direction,size,median_us,mbs,reps
 *     --pingpong   the two-process table below (defaults: -n 10, -l 8:8, -k 100 round trips; no -b)
 *
 * Bandwidth: one copy per repetition, timed to its completion (DtoD:
 * cuMemcpyDtoD then cuCtxSynchronize; DtoH and HtoD between device memory
 * and pinned host memory, cuMemAllocHost, synchronous by the driver's
 * rules); MB/s = size / median time, 10^6 bytes as OSU. Latency: COPIES
 * copies back to back, each complete before the next (DtoD: each followed
 * by cuCtxSynchronize), time per copy.
 *
 * Ping-pong: the program forks before any CUDA call; each process then makes
 * its own context on the same device (as two MPI ranks would), allocates a
 * device buffer and pinned host memory of the largest size, and maps the
 * other's buffer through CUDA IPC (cuIpcGetMemHandle, cuIpcOpenMemHandle;
 * the handles pass through a shared page). The turn is a counter in that
 * page (acquire/release, spinning). On its turn a process queues the
 * operation on a non-blocking stream, cuStreamSynchronize, then passes the
 * turn. Operations (columns): DtoH (own device buffer to pinned host: the
 * sender's half of a staged message), HtoD (pinned host to own device: the
 * receiver's half), DtoH+HtoD (a staged message's both halves in one turn:
 * HtoD, then DtoH, one synchronize), peer-DtoD (the peer's IPC-mapped buffer
 * into the own one: what cuda_ipc does), none (the turn flag only, the CPU
 * floor). A repetition times ROUNDTRIPS round trips; the table prints the
 * median of REPS, in microseconds per one-way handoff (round trip / 2). The
 * header says whether an MPS control pipe exists ($CUDA_MPS_PIPE_DIRECTORY,
 * else /tmp/nvidia-mps): with MPS both processes share one context and the
 * numbers are a different story. A process whose peer fails, dies or stays
 * silent for 60 s stops; the parent reports it.
 *
 * The CUDA driver (libcuda.so.1) is loaded at run time; without one the
 * program says so and exits 2 (1 where CUDA IPC fails, naming the call). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "osu/cuda_mem.h"
#include "osu/floor.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

enum { DTOD, DTOH, HTOD, NDIR };
static const char *dir_name[NDIR] = {"DtoD", "DtoH", "HtoD"};

static void *dev_src, *dev_dst, *host_buf;

/* One copy of dir, complete on return. */
static void copy(int dir, size_t bytes)
{
    int rc = dir == DTOD   ? cm_dtod(dev_dst, dev_src, bytes) || cm_sync()
             : dir == DTOH ? cm_dtoh(host_buf, dev_src, bytes)
                           : cm_htod(dev_dst, host_buf, bytes);
    if (rc) {
        fprintf(stderr, "cuda-floor: %s\n", cm_last_error());
        exit(1);
    }
}

/* --pingpong: two processes, one device, taking turns. */
enum { PP_DTOH, PP_HTOD, PP_STAGED, PP_PEER, PP_NONE, NPP };
static const char *pp_name[NPP] = {"DtoH", "HtoD", "DtoH+HtoD", "peer-DtoD", "none"};
/* A process's state, in order (a wait for READY is over at any later one). */
enum { PP_START, PP_READY, PP_OPEN, PP_DONE, PP_FAILED };
#define PP_LIMIT 60.0 /* seconds a process waits for its peer */

struct pp_shared {
    _Alignas(64) _Atomic uint64_t seq; /* handoffs so far: process seq % 2 has the turn */
    _Alignas(64) _Atomic uint64_t state[2];
    int code[2];                                  /* the exit status of a FAILED process */
    unsigned char handle[2][CM_IPC_HANDLE_BYTES]; /* cuIpcGetMemHandle of each device buffer */
    char error[2][512];                           /* why a process FAILED */
};
static struct pp_shared *pp;
static int pp_me; /* 0: the parent (prints), 1: the child */
static pid_t pp_child, pp_parent;
static int pp_reaped, pp_status; /* the parent's waitpid of the child */
static uint64_t pp_next;         /* the value of seq at this process's next turn */
static void *pp_dev, *pp_peer_dev, *pp_host, *pp_stream;
static int pp_midline; /* the parent has printed part of a table row */

/* The parent, before an error message: ends the row in progress, so the message gets a line of its own. */
static void pp_end_row(void)
{
    if (pp_midline) printf("\n");
    pp_midline = 0;
    fflush(stdout);
}

/* The parent: reaps the child, waiting up to limit seconds, then SIGKILL (limit 0: one look, no kill). */
static int pp_reap(double limit)
{
    for (double t0 = floor_now(); !pp_reaped;) {
        pid_t r = waitpid(pp_child, &pp_status, WNOHANG);
        if (r == pp_child || (r < 0 && errno != EINTR)) {
            if (r < 0) pp_status = -1;
            pp_reaped = 1;
        } else if (floor_now() - t0 >= limit) {
            if (limit > 0) {
                kill(pp_child, SIGKILL);
                while (waitpid(pp_child, &pp_status, 0) < 0 && errno == EINTR)
                    ;
                pp_reaped = 1;
            }
            break;
        } else {
            floor_sleep_us(1000);
        }
    }
    return pp_reaped;
}

/* The parent: the child failed or ended early; say why and exit. */
static void pp_child_gone(void)
{
    pp_reap(10);
    pp_end_row();
    if (atomic_load_explicit(&pp->state[1], memory_order_acquire) == PP_FAILED) {
        fprintf(stderr, "cuda-floor: second process: %s\n", pp->error[1]);
        exit(pp->code[1] ? pp->code[1] : 1);
    }
    if (pp_status != -1 && WIFSIGNALED(pp_status))
        fprintf(stderr, "cuda-floor: the second process (pid %d) was killed by signal %d (%s)\n", (int)pp_child,
                WTERMSIG(pp_status), strsignal(WTERMSIG(pp_status)));
    else
        fprintf(stderr, "cuda-floor: the second process (pid %d) ended early (exit status %d)\n", (int)pp_child,
                pp_status != -1 && WIFEXITED(pp_status) ? WEXITSTATUS(pp_status) : -1);
    exit(1);
}

/* This process cannot go on. The parent prints the reason, tells the child and waits for it; the child leaves
 * the reason to the parent. */
static void pp_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void pp_fail(int code, const char *fmt, ...)
{
    char msg[sizeof(pp->error[0])];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (pp_me == 0) {
        pp_end_row();
        fprintf(stderr, "cuda-floor: %s\n", msg);
        atomic_store_explicit(&pp->state[0], PP_FAILED, memory_order_release);
        pp_reap(10);
    } else {
        memcpy(pp->error[1], msg, sizeof(msg));
        pp->code[1] = code;
        atomic_store_explicit(&pp->state[1], PP_FAILED, memory_order_release);
    }
    exit(code);
}

/* Exits where the peer failed or is gone; a child whose parent failed leaves quietly (the parent says why). */
static void pp_check_peer(void)
{
    uint64_t st = atomic_load_explicit(&pp->state[1 - pp_me], memory_order_acquire);
    if (pp_me == 1) {
        if (st == PP_FAILED) exit(1);
        if (getppid() != pp_parent) {
            fprintf(stderr, "cuda-floor: second process: the first process (pid %d) is gone\n", (int)pp_parent);
            exit(1);
        }
    } else if (st == PP_FAILED || (st != PP_DONE && pp_reap(0))) {
        pp_child_gone();
    }
}

/* Spins until *w reaches v. Every 10 ms or so (never within a fast handoff: the clock is read once per 1024
 * spins) it looks at the peer, and gives up after PP_LIMIT seconds. */
static void pp_wait(_Atomic uint64_t *w, uint64_t v)
{
    double t0 = 0, last = 0;
    for (unsigned spins = 1; atomic_load_explicit(w, memory_order_acquire) < v; spins++) {
        if (spins % 1024) continue;
        double t = floor_now();
        if (!t0) t0 = last = t;
        if (t - last < 0.01) continue;
        last = t;
        pp_check_peer();
        if (t - t0 > PP_LIMIT)
            pp_fail(1, "the %s process did not answer in %.0f s", pp_me ? "first" : "second", PP_LIMIT);
    }
    if (w != &pp->seq) pp_check_peer(); /* a state: FAILED is past every other */
}

/* One turn's work, complete on return. */
static void pp_op(int op, size_t bytes)
{
    int rc = 0;
    switch (op) {
    case PP_DTOH: rc = cm_dtoh_async(pp_host, pp_dev, bytes, pp_stream); break;
    case PP_HTOD: rc = cm_htod_async(pp_dev, pp_host, bytes, pp_stream); break;
    case PP_STAGED: /* receive the peer's message, send the own one */
        rc = cm_htod_async(pp_dev, pp_host, bytes, pp_stream) || cm_dtoh_async(pp_host, pp_dev, bytes, pp_stream);
        break;
    case PP_PEER: rc = cm_dtod_async(pp_dev, pp_peer_dev, bytes, pp_stream); break;
    default: return;
    }
    if (rc || cm_stream_sync(pp_stream)) pp_fail(1, "%s, %zu B: %s", pp_name[op], bytes, cm_last_error());
}

/* roundtrips round trips of op; in the parent, the seconds per one-way handoff. The parent's turn comes
 * first; it times from its first turn to the end of the child's last. */
static double pp_run(int op, size_t bytes, int roundtrips)
{
    double t0 = floor_now();
    for (int k = 0; k < roundtrips; k++) {
        if (pp_me == 1) pp_wait(&pp->seq, pp_next);
        pp_op(op, bytes);
        atomic_store_explicit(&pp->seq, pp_next + 1, memory_order_release);
        pp_next += 2;
        if (pp_me == 0) pp_wait(&pp->seq, pp_next);
    }
    return (floor_now() - t0) / roundtrips / 2;
}

/* Tells the peer this process reached state, then waits for the peer to reach it. */
static void pp_meet(uint64_t state)
{
    atomic_store_explicit(&pp->state[pp_me], state, memory_order_release);
    pp_wait(&pp->state[1 - pp_me], state);
}

static int pingpong(int device, int reps, int roundtrips, size_t lo, size_t hi, const char *csv_path)
{
    pp = mmap(NULL, sizeof(*pp), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (pp == MAP_FAILED) {
        fprintf(stderr, "cuda-floor: mmap of the shared page: %s\n", strerror(errno));
        return 1;
    }
    fflush(stdout);
    fflush(stderr);
    pp_parent = getpid();
    if ((pp_child = fork()) < 0) {
        fprintf(stderr, "cuda-floor: fork: %s\n", strerror(errno));
        return 1;
    }
    pp_me = pp_child == 0;
    pp_next = (uint64_t)pp_me;

    /* From here on each process has its own context on the same device. */
    char err[512];
    if (cm_init(device, err, sizeof(err))) pp_fail(2, "%s", err);
    if (!(pp_dev = cm_alloc(hi, 0)) || !(pp_host = cm_host_alloc(hi)) || !(pp_stream = cm_stream_create(1)) ||
        cm_memset(pp_dev, (unsigned char)(1 + pp_me), hi) || cm_sync())
        pp_fail(1, "%zu-byte buffers: %s", hi, cm_last_error());
    memset(pp_host, 3 + pp_me, hi);
    const char *no_ipc = "CUDA IPC between two processes is not available here (a sandbox or a container that "
                         "hides the other process?)";
    if (cm_ipc_get(pp->handle[pp_me], pp_dev)) pp_fail(1, "%s; %s", cm_last_error(), no_ipc);
    pp_meet(PP_READY);
    if (!(pp_peer_dev = cm_ipc_open(pp->handle[1 - pp_me]))) pp_fail(1, "%s; %s", cm_last_error(), no_ipc);
    pp_meet(PP_OPEN);

    FILE *csv = NULL;
    double *t = NULL;
    if (pp_me == 0) {
        if (!(t = malloc(sizeof(double) * (size_t)reps))) pp_fail(1, "out of memory");
        if (csv_path) {
            if (!(csv = fopen(csv_path, "w"))) pp_fail(2, "cannot open %s: %s", csv_path, strerror(errno));
            fprintf(csv, "test,direction,size,median_us,mbs,reps\n");
        }
        char mps[4400];
        floor_mps_note(mps, sizeof(mps));
        int v = cm_driver_version();
        printf("# weft cuda-floor --pingpong: two processes on device %d (%s), driver %d.%d; %s\n", cm_device(),
               cm_device_name(), v / 1000, v % 1000 / 10, mps);
        printf("# us per one-way handoff (round trip / 2), median of %d repetitions of %d round trips; a turn: the\n"
               "# copy on a non-blocking stream, cuStreamSynchronize, then the turn flag; host memory pinned;\n"
               "# peer-DtoD reads the other process's buffer through CUDA IPC; none: the flag alone\n",
               reps, roundtrips);
        printf("%-12s", "# Size");
        for (int op = 0; op < NPP; op++) {
            char h[32];
            snprintf(h, sizeof(h), "%s (us)", pp_name[op]);
            printf("%16s", h);
        }
        printf("\n");
        fflush(stdout);
    }
    /* Both processes run the same schedule; only the parent's times count. */
    for (size_t s = lo ? lo : 1; s <= hi; s = floor_next_size(s)) {
        if (pp_me == 0) printf("%-12zu", s), pp_midline = 1;
        for (int op = 0; op < NPP; op++) {
            pp_run(op, s, 10); /* warm-up */
            for (int r = 0; r < reps; r++) {
                double one_way = pp_run(op, s, roundtrips);
                if (t) t[r] = one_way;
            }
            if (pp_me) continue;
            double m = floor_median(t, reps);
            printf("%16.2f", m * 1e6);
            if (csv)
                fprintf(csv, "pingpong,%s,%zu,%.4f,%.4f,%d\n", pp_name[op], s, m * 1e6,
                        op == PP_NONE ? 0.0 : (double)s / m / 1e6, reps);
        }
        if (pp_me == 0) pp_end_row();
    }

    /* Unmap the peer's buffer before either frees its own. */
    if (cm_ipc_close(pp_peer_dev)) pp_fail(1, "%s", cm_last_error());
    pp_meet(PP_DONE);
    cm_stream_destroy(pp_stream);
    cm_free(pp_dev);
    cm_host_free(pp_host);
    if (pp_me) return 0;
    free(t);
    if (csv && fclose(csv)) {
        fflush(stdout);
        fprintf(stderr, "cuda-floor: writing %s: %s\n", csv_path, strerror(errno));
        pp_reap(PP_LIMIT);
        return 1;
    }
    pp_reap(PP_LIMIT);
    if (pp_status == -1 || !WIFEXITED(pp_status) || WEXITSTATUS(pp_status)) pp_child_gone();
    return 0;
}

int main(int argc, char **argv)
{
    int reps = 0, copies = 100, device = -1, pingpong_mode = 0, lat_set = 0;
    size_t bw_lo = 4u << 20, bw_hi = (size_t)1 << 30, lat_lo = 8, lat_hi = 64u << 10;
    const char *csv_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: %s [-n REPS] [-b MIN:MAX] [-l MIN:MAX] [-k COPIES] [-d DEVICE] [--csv FILE]\n"
                   "  the cuMemcpy floor (DtoD, DtoH, HtoD with pinned host memory) on one GPU: bandwidth\n"
                   "  (default 4m:1g) and latency (default 8:64k), median of REPS (default 20); 0:0 skips a table\n"
                   "   or: %s --pingpong [-n REPS] [-l MIN:MAX] [-k ROUNDTRIPS] [-d DEVICE] [--csv FILE]\n"
                   "  two processes on one GPU taking turns (a ping-pong): the cost of alternating GPU work\n"
                   "  between them (DtoH, HtoD, both, a copy from the peer's IPC-mapped buffer, nothing), us per\n"
                   "  one-way handoff, median of REPS (default 10) runs of ROUNDTRIPS (default 100); sizes\n"
                   "  default 8:8\n",
                   argv[0], argv[0]);
            return 0;
        } else if (!strcmp(a, "--pingpong")) {
            pingpong_mode = 1;
            continue;
        } else if (!v) {
            bad = 1;
        } else if (!strcmp(a, "-n")) {
            reps = atoi(v), bad = reps < 1;
        } else if (!strcmp(a, "-k")) {
            copies = atoi(v), bad = copies < 1;
        } else if (!strcmp(a, "-d")) {
            device = atoi(v), bad = device < 0;
        } else if (!strcmp(a, "-b")) {
            bad = floor_parse_range(v, &bw_lo, &bw_hi, (size_t)1 << 34);
        } else if (!strcmp(a, "-l")) {
            bad = floor_parse_range(v, &lat_lo, &lat_hi, (size_t)1 << 34), lat_set = 1;
        } else if (!strcmp(a, "--csv")) {
            csv_path = v;
        } else {
            bad = 1;
        }
        if (bad) {
            fprintf(stderr, "cuda-floor: bad option %s %s (see -h)\n", a, v ? v : "");
            return 2;
        }
        i++;
    }
    if (device < 0) {
        const char *lr = getenv("LOCAL_RANK");
        if (!lr) lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        device = lr ? atoi(lr) : 0;
    }
    if (!reps) reps = pingpong_mode ? 10 : 20;
    if (pingpong_mode) {
        if (!lat_set) lat_lo = lat_hi = 8;
        if (!lat_hi) {
            fprintf(stderr, "cuda-floor: --pingpong needs sizes (-l MIN:MAX, MAX > 0)\n");
            return 2;
        }
        return pingpong(device, reps, copies, lat_lo, lat_hi, csv_path);
    }
    char err[512];
    if (cm_init(device, err, sizeof(err))) {
        fprintf(stderr, "cuda-floor: %s\n", err);
        return 2;
    }
    int do_bw = bw_hi > 0, do_lat = lat_hi > 0;
    size_t most = (do_bw ? bw_hi : 0) > (do_lat ? lat_hi : 0) ? bw_hi : lat_hi;
    if (most == 0) most = 1;
    if (!(dev_src = cm_alloc(most, 0)) || !(dev_dst = cm_alloc(most, 0)) || !(host_buf = cm_host_alloc(most)) ||
        cm_memset(dev_src, 1, most) || cm_memset(dev_dst, 0, most) || cm_sync()) {
        fprintf(stderr, "cuda-floor: %zu-byte buffers: %s\n", most, cm_last_error());
        return 1;
    }
    memset(host_buf, 2, most);
    FILE *csv;
    if (floor_csv_open("cuda-floor", csv_path, "test,direction,size,median_us,mbs,reps", &csv)) return 2;
    int v = cm_driver_version();
    printf("# weft cuda-floor: cuMemcpy on device %d of %d (%s), driver %d.%d; median of %d repetitions\n", cm_device(),
           cm_device_count(), cm_device_name(), v / 1000, v % 1000 / 10, reps);
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!t) return 1;

    if (do_bw) {
        printf("# Bandwidth (MB/s = 10^6 B/s): one copy per repetition, timed to its completion; host: pinned\n");
        printf("%-12s%16s%16s%16s\n", "# Size", "DtoD (MB/s)", "DtoH (MB/s)", "HtoD (MB/s)");
        for (size_t s = bw_lo ? bw_lo : 1; s <= bw_hi; s = floor_next_size(s)) {
            printf("%-12zu", s);
            for (int d = 0; d < NDIR; d++) {
                copy(d, s); /* warm-up */
                for (int r = 0; r < reps; r++) {
                    double t0 = floor_now();
                    copy(d, s);
                    t[r] = floor_now() - t0;
                }
                double m = floor_median(t, reps), mbs = (double)s / m / 1e6;
                printf("%16.2f", mbs);
                if (csv) fprintf(csv, "bw,%s,%zu,%.4f,%.4f,%d\n", dir_name[d], s, m * 1e6, mbs, reps);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    if (do_lat) {
        printf("# Latency (us per copy, %d back-to-back copies per repetition, each complete before the next;\n"
               "# DtoD: cuMemcpyDtoD + cuCtxSynchronize; DtoH, HtoD: pinned host, synchronous)\n",
               copies);
        printf("%-12s%16s%16s%16s\n", "# Size", "DtoD (us)", "DtoH (us)", "HtoD (us)");
        for (size_t s = lat_lo ? lat_lo : 1; s <= lat_hi; s = floor_next_size(s)) {
            printf("%-12zu", s);
            for (int d = 0; d < NDIR; d++) {
                for (int k = 0; k < 10; k++)
                    copy(d, s); /* warm-up */
                for (int r = 0; r < reps; r++) {
                    double t0 = floor_now();
                    for (int k = 0; k < copies; k++)
                        copy(d, s);
                    t[r] = (floor_now() - t0) / copies;
                }
                double m = floor_median(t, reps);
                printf("%16.2f", m * 1e6);
                if (csv) fprintf(csv, "lat,%s,%zu,%.4f,%.4f,%d\n", dir_name[d], s, m * 1e6, (double)s / m / 1e6, reps);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    if (csv) fclose(csv);
    free(t);
    cm_free(dev_src);
    cm_free(dev_dst);
    cm_host_free(host_buf);
    return 0;
}
