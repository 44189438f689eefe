/* weft's GPU collectives against NCCL, in the style of nccl-tests: one
 * process per GPU (launched by mpirun, srun or weftrun; device = local rank
 * modulo the device count), the same buffers, the same stream, alternating
 * rounds; medians.
 *
 *   contrib/bench/weft-nccl-tests [-c COLLS] [-t TYPES] [-m MIN:MAX] [-r ROUNDS] [-g 0|1|0,1]
 *                                 [-l weft,nccl] [-n ITERS] [--check-max BYTES] [--nccl-lib FILE] [--csv FILE]
 *                                 [--window 0|1]
 *     -c COLLS      comma list of allreduce, allgather, reduce_scatter, bcast, alltoall (default all)
 *     -t TYPES      comma list of bf16, fp16, fp32, int32 (default bf16,fp32)
 *     -m MIN:MAX    sizes in bytes, powers of two (default 8:1g; nccl-tests' size: allreduce and
 *                   bcast: the vector; allgather: the whole output; reduce_scatter and alltoall:
 *                   the whole input)
 *     -r ROUNDS     rounds, alternating which library goes first (default 3); tables print medians
 *     -g MODES      0: launches, 1: the iterations captured in one CUDA graph and replayed
 *                   (default 0,1)
 *     -l LIBS       weft, nccl or both (default both when NCCL loads)
 *     --nccl-lib F  NCCL's library (default libnccl.so.2, found as the dynamic loader finds it)
 *     -n ITERS      timed calls per measurement (default: 100 up to 1 MiB, 40 up to 64 MiB, 10 above),
 *                   after a fifth as many untimed ones
 *     --check-max B every library's result is checked against the exact answer in the first round
 *                   for sizes up to B (default 64m): inputs are small integers, so every sum is exact
 *                   in every type and any reduction order
 *     --csv FILE    rank 0 writes every measurement: coll,type,graph,ranks,bytes,lib,round,us,algbw,busbw,
 *                   host_us (the host's time to issue the calls or the replay, per call, the largest over
 *                   the ranks: near us, the host sets the pace)
 *     --window 1    weft's send and receive buffers are registered windows (weft_comm_window_register):
 *                   calls past the one-launch sizes read the peers' inputs in place (default 0)
 *
 * Time of a measurement: events on the stream around ITERS calls (or one
 * replay of a graph of ITERS calls), per call, the largest over the ranks.
 * algbw = size / time; busbw = algbw x nccl-tests' factor (allreduce
 * 2(n-1)/n; allgather, reduce_scatter, alltoall (n-1)/n; bcast 1), in GB/s
 * (10^9). NCCL's alltoall is grouped ncclSend/ncclRecv, as nccl-tests does
 * it. Sum is the reduction; bcast's root is rank 0; both libraries run out
 * of place on the same buffers except bcast (in place in recvbuf, weft's
 * only form).
 *
 * Needs the CUDA runtime (linked statically) and a driver; NCCL is opened
 * at run time (no link-time dependency, so CI builds this without it). Exit
 * 2: no device; 1: a call failed or a result was wrong. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osu/floor.h"
#include "weft.h"

/* ---- NCCL, opened at run time (its ABI: these types and values are fixed) ---- */
typedef struct {
    char internal[128];
} nccl_id_t;
typedef struct nccl_comm *nccl_comm_t;
enum { NCCL_INT32 = 2, NCCL_FLOAT16 = 6, NCCL_FLOAT32 = 7, NCCL_BFLOAT16 = 9, NCCL_SUM = 0 };
static struct {
    void *lib;
    int (*get_version)(int *);
    int (*get_unique_id)(nccl_id_t *);
    int (*comm_init_rank)(nccl_comm_t *, int, nccl_id_t, int);
    int (*comm_destroy)(nccl_comm_t);
    const char *(*error_string)(int);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
    int (*all_gather)(const void *, void *, size_t, int, nccl_comm_t, cudaStream_t);
    int (*reduce_scatter)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
    int (*broadcast)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
    int (*send)(const void *, size_t, int, int, nccl_comm_t, cudaStream_t);
    int (*recv)(void *, size_t, int, int, nccl_comm_t, cudaStream_t);
    int (*group_start)(void);
    int (*group_end)(void);
} nccl;

static int nccl_open(const char *path, char *why, size_t len)
{
    nccl.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!nccl.lib) {
        snprintf(why, len, "%s cannot be loaded (%s)", path, dlerror());
        return -1;
    }
    struct {
        const char *name;
        void **fn;
    } syms[] = {
        {"ncclGetVersion", (void **)&nccl.get_version},     {"ncclGetUniqueId", (void **)&nccl.get_unique_id},
        {"ncclCommInitRank", (void **)&nccl.comm_init_rank}, {"ncclCommDestroy", (void **)&nccl.comm_destroy},
        {"ncclGetErrorString", (void **)&nccl.error_string}, {"ncclAllReduce", (void **)&nccl.all_reduce},
        {"ncclAllGather", (void **)&nccl.all_gather},        {"ncclReduceScatter", (void **)&nccl.reduce_scatter},
        {"ncclBroadcast", (void **)&nccl.broadcast},         {"ncclSend", (void **)&nccl.send},
        {"ncclRecv", (void **)&nccl.recv},                   {"ncclGroupStart", (void **)&nccl.group_start},
        {"ncclGroupEnd", (void **)&nccl.group_end},
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
        if (!(*syms[i].fn = dlsym(nccl.lib, syms[i].name))) {
            snprintf(why, len, "%s lacks %s", path, syms[i].name);
            dlclose(nccl.lib);
            nccl.lib = NULL;
            return -1;
        }
    return 0;
}

/* ---- the run ---------------------------------------------------------------------- */
enum { C_ALLREDUCE, C_ALLGATHER, C_REDUCE_SCATTER, C_BCAST, C_ALLTOALL, NCOLL };
static const char *const coll_names[NCOLL] = {"allreduce", "allgather", "reduce_scatter", "bcast", "alltoall"};
enum { T_BF16, T_FP16, T_FP32, T_INT32, NTYPE };
static const char *const type_names[NTYPE] = {"bf16", "fp16", "fp32", "int32"};
static const size_t type_size[NTYPE] = {2, 2, 4, 4};
static const weft_dtype_t type_weft[NTYPE] = {WEFT_BFLOAT16, WEFT_FLOAT16, WEFT_FLOAT32, WEFT_INT32};
static const int type_nccl[NTYPE] = {NCCL_BFLOAT16, NCCL_FLOAT16, NCCL_FLOAT32, NCCL_INT32};
enum { L_WEFT, L_NCCL, NLIB };
static const char *const lib_names[NLIB] = {"weft", "nccl"};

static int me, nranks;
static weft_comm_t world;
static cudaStream_t stream;
static nccl_comm_t ncomm;
static char *sendbuf, *recvbuf, *hostbuf;
static size_t maxbytes;

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "weft-nccl-tests: rank %d: ", me);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

#define CU(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) die("%s: %s", #call, cudaGetErrorString(e_));                                           \
    } while (0)

/* The value of element i of rank r's input: small integers, exact in every type. */
static int pattern(int r, size_t i)
{
    return (int)((i * 7 + (size_t)r * 3) % 16);
}

static void put(int type, void *base, size_t i, int v)
{
    switch (type) {
    case T_BF16: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        ((uint16_t *)base)[i] = (uint16_t)(u >> 16);
        break;
    }
    case T_FP16: { /* small non-negative integers: exact in half */
        uint16_t h = 0;
        if (v) {
            int e = 0;
            while ((v >> (e + 1)) > 0)
                e++;
            h = (uint16_t)(((e + 15) << 10) | (((unsigned)v << (10 - e)) & 0x3ff));
        }
        ((uint16_t *)base)[i] = h;
        break;
    }
    case T_FP32: ((float *)base)[i] = (float)v; break;
    default: ((int32_t *)base)[i] = v;
    }
}

static int get(int type, const void *base, size_t i)
{
    switch (type) {
    case T_BF16: {
        uint32_t u = (uint32_t)((const uint16_t *)base)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return (int)f;
    }
    case T_FP16: {
        uint16_t h = ((const uint16_t *)base)[i];
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        return e ? (int)(((int64_t)(1024 + m) << e) >> 25) : 0;
    }
    case T_FP32: return (int)((const float *)base)[i];
    default: return ((const int32_t *)base)[i];
    }
}

/* Elements each rank sends for a collective of `bytes` (nccl-tests' size). */
static size_t count_of(int coll, int type, size_t bytes)
{
    size_t n = bytes / type_size[type];
    return coll == C_ALLGATHER || coll == C_REDUCE_SCATTER || coll == C_ALLTOALL ? n / (size_t)nranks : n;
}

static double bus_factor(int coll)
{
    double n = nranks;
    return coll == C_ALLREDUCE ? 2 * (n - 1) / n : coll == C_BCAST ? 1 : (n - 1) / n;
}

/* One call of coll on lib, count as count_of() gives. */
static void call(int lib, int coll, int type, size_t count)
{
    int rc = 0;
    if (lib == L_WEFT) {
        weft_dtype_t t = type_weft[type];
        switch (coll) {
        case C_ALLREDUCE: rc = weft_allreduce_on_stream(sendbuf, recvbuf, count, t, WEFT_SUM, world, stream, NULL); break;
        case C_ALLGATHER: rc = weft_allgather_on_stream(sendbuf, recvbuf, count, t, world, stream, NULL); break;
        case C_REDUCE_SCATTER:
            rc = weft_reduce_scatter_block_on_stream(sendbuf, recvbuf, count, t, WEFT_SUM, world, stream, NULL);
            break;
        case C_BCAST: rc = weft_bcast_on_stream(recvbuf, count, t, 0, world, stream, NULL); break;
        default: rc = weft_alltoall_on_stream(sendbuf, recvbuf, count, t, world, stream, NULL);
        }
        if (rc) die("weft %s: %s (%s)", coll_names[coll], weft_strerror(rc), weft_last_error());
        return;
    }
    int t = type_nccl[type];
    switch (coll) {
    case C_ALLREDUCE: rc = nccl.all_reduce(sendbuf, recvbuf, count, t, NCCL_SUM, ncomm, stream); break;
    case C_ALLGATHER: rc = nccl.all_gather(sendbuf, recvbuf, count, t, ncomm, stream); break;
    case C_REDUCE_SCATTER: rc = nccl.reduce_scatter(sendbuf, recvbuf, count, t, NCCL_SUM, ncomm, stream); break;
    case C_BCAST: rc = nccl.broadcast(recvbuf, recvbuf, count, t, 0, ncomm, stream); break;
    default: {
        size_t block = count * type_size[type];
        rc = nccl.group_start();
        for (int p = 0; !rc && p < nranks; p++) {
            rc = nccl.send(sendbuf + (size_t)p * block, count, t, p, ncomm, stream);
            if (!rc) rc = nccl.recv(recvbuf + (size_t)p * block, count, t, p, ncomm, stream);
        }
        int rc2 = nccl.group_end();
        if (!rc) rc = rc2;
    }
    }
    if (rc) die("nccl %s: %s", coll_names[coll], nccl.error_string(rc));
}

/* Fills the inputs (and bcast's root buffer) for coll with the pattern. */
static void fill(int coll, int type, size_t count)
{
    size_t n = coll == C_ALLTOALL || coll == C_REDUCE_SCATTER ? count * (size_t)nranks : count;
    for (size_t i = 0; i < n; i++)
        put(type, hostbuf, i, pattern(me, i));
    size_t bytes = n * type_size[type];
    CU(cudaMemcpy(coll == C_BCAST ? recvbuf : sendbuf, hostbuf, bytes, cudaMemcpyHostToDevice));
    if (coll == C_BCAST && me != 0) CU(cudaMemset(recvbuf, 0xff, bytes));
}

/* Checks the output of one call made after fill(); the number of wrong elements. */
static size_t check(int coll, int type, size_t count)
{
    size_t n = coll == C_ALLGATHER || coll == C_ALLTOALL ? count * (size_t)nranks : count;
    CU(cudaMemcpy(hostbuf, recvbuf, n * type_size[type], cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        int want = 0;
        switch (coll) {
        case C_ALLREDUCE:
            for (int r = 0; r < nranks; r++)
                want += pattern(r, i);
            break;
        case C_REDUCE_SCATTER:
            for (int r = 0; r < nranks; r++)
                want += pattern(r, (size_t)me * count + i);
            break;
        case C_ALLGATHER: want = pattern((int)(i / count), i % count); break;
        case C_BCAST: want = pattern(0, i); break;
        default: want = pattern((int)(i / count), (size_t)me * count + i % count);
        }
        if (get(type, hostbuf, i) != want && bad++ < 3)
            fprintf(stderr, "weft-nccl-tests: rank %d: %s %s count %zu: element %zu is %d, not %d\n", me,
                    coll_names[coll], type_names[type], count, i, get(type, hostbuf, i), want);
    }
    return bad;
}

/* One measurement: us per call, the largest over the ranks; *host_us: the host's time to issue the calls
 * (launches) or the replay (graph), per call, the largest over the ranks (where it is near the call time,
 * the host's issuing, not the GPU, sets the pace). */
static double measure(int lib, int coll, int type, size_t count, int graph, int iters, double *host_us)
{
    cudaEvent_t a, b;
    CU(cudaEventCreate(&a));
    CU(cudaEventCreate(&b));
    cudaGraphExec_t exec = NULL;
    int warm = iters / 5 + 1;
    for (int i = 0; i < warm; i++)
        call(lib, coll, type, count);
    if (graph) {
        cudaGraph_t g;
        CU(cudaStreamSynchronize(stream));
        CU(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
        for (int i = 0; i < iters; i++)
            call(lib, coll, type, count);
        CU(cudaStreamEndCapture(stream, &g));
        CU(cudaGraphInstantiate(&exec, g, 0));
        CU(cudaGraphDestroy(g));
        CU(cudaGraphLaunch(exec, stream)); /* a warm replay */
    }
    CU(cudaStreamSynchronize(stream));
    /* Everyone starts together (a host barrier), as nccl-tests does. */
    if (weft_barrier(world)) die("barrier: %s", weft_last_error());
    CU(cudaEventRecord(a, stream));
    double h0 = floor_now();
    if (graph)
        CU(cudaGraphLaunch(exec, stream));
    else
        for (int i = 0; i < iters; i++)
            call(lib, coll, type, count);
    double host_per_call = 1e6 * (floor_now() - h0) / iters;
    CU(cudaEventRecord(b, stream));
    CU(cudaEventSynchronize(b));
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, a, b));
    if (exec) CU(cudaGraphExecDestroy(exec));
    CU(cudaEventDestroy(a));
    CU(cudaEventDestroy(b));
    double mine[2] = {1e3 * ms / iters, host_per_call}, most[2] = {0, 0};
    if (weft_allreduce(mine, most, 2, WEFT_FLOAT64, WEFT_MAX, world)) die("allreduce: %s", weft_last_error());
    *host_us = most[1];
    return most[0];
}

static int parse_list(const char *s, const char *const *names, int n, int *on)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    memset(on, 0, sizeof(int) * (size_t)n);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < n && strcmp(tok, names[k]))
            k++;
        if (k == n) return -1;
        on[k] = 1;
    }
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: weft-nccl-tests [-c COLLS] [-t TYPES] [-m MIN:MAX] [-r ROUNDS] [-g 0|1|0,1] "
                    "[-l weft,nccl] [-n ITERS] [--check-max BYTES] [--nccl-lib FILE] [--csv FILE] [--window 0|1]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int colls[NCOLL] = {1, 1, 1, 1, 1}, types[NTYPE] = {1, 0, 1, 0}, libs[NLIB] = {1, 1}, graphs[2] = {1, 1};
    int rounds = 3, iters_opt = 0, libs_given = 0, window = 0;
    weft_window_t wins[2] = {NULL, NULL};
    size_t lo = 8, hi = (size_t)1 << 30, check_max = (size_t)64 << 20;
    const char *csv_path = NULL, *nccl_path = "libnccl.so.2";
    static const char *const graph_names[2] = {"0", "1"};
    if (weft_init(&argc, &argv)) {
        fprintf(stderr, "weft-nccl-tests: weft_init: %s\n", weft_last_error());
        return 1;
    }
    world = weft_comm_world();
    weft_comm_rank(world, &me);
    weft_comm_size(world, &nranks);
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char *end;
        if (!v) usage();
        if (!strcmp(o, "-c")) {
            if (parse_list(v, coll_names, NCOLL, colls)) usage();
        } else if (!strcmp(o, "-t")) {
            if (parse_list(v, type_names, NTYPE, types)) usage();
        } else if (!strcmp(o, "-l")) {
            if (parse_list(v, lib_names, NLIB, libs)) usage();
            libs_given = 1;
        } else if (!strcmp(o, "-g")) {
            if (parse_list(v, graph_names, 2, graphs)) usage();
        } else if (!strcmp(o, "-m")) {
            if (floor_parse_range(v, &lo, &hi, (size_t)1 << 34) || !lo) usage();
        } else if (!strcmp(o, "-r")) {
            rounds = atoi(v);
            if (rounds < 1 || rounds > 99) usage();
        } else if (!strcmp(o, "-n")) {
            iters_opt = atoi(v);
            if (iters_opt < 1) usage();
        } else if (!strcmp(o, "--check-max")) {
            if (osu_parse_size(v, &check_max, &end) || *end) usage();
        } else if (!strcmp(o, "--nccl-lib")) {
            nccl_path = v;
        } else if (!strcmp(o, "--csv")) {
            csv_path = v;
        } else if (!strcmp(o, "--window")) {
            window = atoi(v);
        } else
            usage();
        i++;
    }
    int local = 0, ndev = 0;
    weft_local_rank(&local);
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        if (me == 0) fprintf(stderr, "weft-nccl-tests: no CUDA device\n");
        weft_finalize();
        return 2;
    }
    int dev = local % ndev;
    CU(cudaSetDevice(dev));
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    char why[512] = "";
    if (libs[L_NCCL] && nccl_open(nccl_path, why, sizeof(why))) {
        if (libs_given) die("NCCL: %s", why);
        if (me == 0) printf("# NCCL not measured: %s\n", why);
        libs[L_NCCL] = 0;
    }
    if (libs[L_NCCL]) {
        nccl_id_t id;
        int rc = 0;
        if (me == 0 && (rc = nccl.get_unique_id(&id))) die("ncclGetUniqueId: %s", nccl.error_string(rc));
        if (weft_bcast(&id, sizeof(id), WEFT_BYTE, 0, world)) die("bcast: %s", weft_last_error());
        if ((rc = nccl.comm_init_rank(&ncomm, nranks, id, me))) die("ncclCommInitRank: %s", nccl.error_string(rc));
    }
    maxbytes = hi;
    CU(cudaMalloc((void **)&sendbuf, maxbytes));
    CU(cudaMalloc((void **)&recvbuf, maxbytes));
    CU(cudaMallocHost((void **)&hostbuf, maxbytes));
    if (window && (weft_comm_window_register(world, sendbuf, maxbytes, &wins[0]) ||
                   weft_comm_window_register(world, recvbuf, maxbytes, &wins[1])))
        die("weft_comm_window_register: %s", weft_last_error());
    FILE *csv = NULL;
    if (me == 0) {
        struct cudaDeviceProp prop;
        CU(cudaGetDeviceProperties(&prop, dev));
        int nv = 0;
        if (libs[L_NCCL]) nccl.get_version(&nv);
        char mps[4200];
        floor_mps_note(mps, sizeof(mps));
        printf("# weft-nccl-tests: %d ranks, %d devices visible (rank 0 on %d: %s); NCCL %s%d; %s\n", nranks, ndev,
               dev, prop.name, libs[L_NCCL] ? "" : "not loaded ", nv, mps);
        printf("# NCCL_NVLS_ENABLE=%s; every time: us per call, the largest over the ranks, median of %d rounds\n",
               getenv("NCCL_NVLS_ENABLE") ? getenv("NCCL_NVLS_ENABLE") : "(unset)", rounds);
        printf("# weft's buffers: %s\n", window ? "registered windows (read in place)" : "unregistered (staged)");
        if (csv_path && !(csv = fopen(csv_path, "w"))) die("cannot write %s", csv_path);
        if (csv) fprintf(csv, "coll,type,graph,ranks,bytes,lib,round,us,algbw,busbw,host_us\n");
    }
    int failed = 0;
    double *t = calloc((size_t)rounds * NLIB, sizeof(double));
    for (int c = 0; c < NCOLL; c++)
        for (int ty = 0; ty < NTYPE; ty++)
            for (int g = 0; g < 2; g++) {
                if (!colls[c] || !types[ty] || !graphs[g]) continue;
                if (me == 0) {
                    printf("\n# %s %s, %s, %d ranks\n", coll_names[c], type_names[ty],
                           g ? "CUDA graph of the calls" : "launches", nranks);
                    printf("%12s %12s %10s %10s %10s %10s %10s %8s\n", "size(B)", "count", "weft(us)", "nccl(us)",
                           "weft-bus", "nccl-bus", "weft/nccl", "check");
                }
                for (size_t bytes = lo; bytes <= hi; bytes *= 2) {
                    size_t count = count_of(c, ty, bytes);
                    if (!count) continue;
                    int iters = iters_opt ? iters_opt : bytes <= (1u << 20) ? 100 : bytes <= (64u << 20) ? 40 : 10;
                    const char *verdict = bytes <= check_max ? "ok" : "-";
                    for (int r = 0; r < rounds; r++)
                        for (int k = 0; k < NLIB; k++) {
                            int lib = (k + r) % NLIB;
                            if (!libs[lib]) continue;
                            if (r == 0 && bytes <= check_max && !g) {
                                fill(c, ty, count);
                                call(lib, c, ty, count);
                                CU(cudaStreamSynchronize(stream));
                                size_t bad = check(c, ty, count), allbad = 0;
                                if (weft_allreduce(&bad, &allbad, 1, WEFT_UINT64, WEFT_SUM, world))
                                    die("allreduce: %s", weft_last_error());
                                if (allbad) {
                                    verdict = lib == L_WEFT ? "WEFT-BAD" : "NCCL-BAD";
                                    failed = 1;
                                }
                            }
                            double host_us, us = measure(lib, c, ty, count, g, iters, &host_us);
                            t[r * NLIB + lib] = us;
                            if (csv)
                                fprintf(csv, "%s,%s,%d,%d,%zu,%s,%d,%.3f,%.3f,%.3f,%.3f\n", coll_names[c],
                                        type_names[ty], g, nranks, bytes, lib_names[lib], r, us, bytes / us / 1e3,
                                        bytes / us / 1e3 * bus_factor(c), host_us);
                            if (csv) fflush(csv); /* a run cut short keeps what it measured */
                        }
                    if (me == 0) {
                        double med[NLIB] = {0, 0}, v[100];
                        for (int lib = 0; lib < NLIB; lib++) {
                            if (!libs[lib]) continue;
                            for (int r = 0; r < rounds; r++)
                                v[r] = t[r * NLIB + lib];
                            med[lib] = floor_median(v, rounds);
                        }
                        char wb[16] = "-", nb[16] = "-", wt[16] = "-", nt[16] = "-", ratio[16] = "-";
                        if (med[L_WEFT] > 0) {
                            snprintf(wt, sizeof(wt), "%.2f", med[L_WEFT]);
                            snprintf(wb, sizeof(wb), "%.2f", bytes / med[L_WEFT] / 1e3 * bus_factor(c));
                        }
                        if (med[L_NCCL] > 0) {
                            snprintf(nt, sizeof(nt), "%.2f", med[L_NCCL]);
                            snprintf(nb, sizeof(nb), "%.2f", bytes / med[L_NCCL] / 1e3 * bus_factor(c));
                        }
                        if (med[L_WEFT] > 0 && med[L_NCCL] > 0)
                            snprintf(ratio, sizeof(ratio), "%.2f", med[L_WEFT] / med[L_NCCL]);
                        printf("%12zu %12zu %10s %10s %10s %10s %10s %8s\n", bytes, count, wt, nt, wb, nb, ratio,
                               verdict);
                        fflush(stdout);
                    }
                }
            }
    free(t);
    if (csv) fclose(csv);
    if (ncomm) nccl.comm_destroy(ncomm);
    for (int i = 0; i < 2; i++)
        if (wins[i] && weft_comm_window_deregister(world, &wins[i]))
            die("weft_comm_window_deregister: %s", weft_last_error());
    cudaFree(sendbuf);
    cudaFree(recvbuf);
    cudaFreeHost(hostbuf);
    int rc = weft_finalize();
    return failed || rc ? 1 : 0;
}
