/* The floors under weft's GPU collectives (coll/cuda), without weft: what
 * one GPU gives a bare kernel that does a collective's memory traffic, and
 * what a kernel launch plus one cross-process flag round trip costs.
 * Two ranks sharing one GPU (as contrib/bench/gpu-coll.sh runs them) cannot
 * beat either: weft's blocking allreduce launches a stage copy, a barrier
 * kernel over system-scope flags in CUDA IPC-mapped memory, and a reduce
 * kernel over the peers' slots, then waits for them.
 *
 *   contrib/bench/coll-floor [--traffic] [--sync] [-m MIN:MAX] [-r RANKS] [-n REPS] [-k CALLS] [-d DEVICE]
 *                            [--csv FILE]
 *     --traffic    the traffic table only; --sync: the sync table only (default: both, sync first)
 *     -m MIN:MAX   message sizes S in bytes, powers of two (default 4:64m; suffixes k m g)
 *     -r RANKS     comma list of rank counts R, 1..8 (default 2,4,8; the sync table skips 1)
 *     -n REPS      repetitions; the tables print medians (default 20, at most 1000)
 *     -k CALLS     traffic: at most CALLS calls per repetition (fewer for large messages, down to one
 *                  per 256 MiB of traffic); sync: iterations per repetition (default 20)
 *     -d DEVICE    device ordinal (default 0; modulo the device count)
 *     --csv FILE   also write the medians: test,ranks,size,median_us,kernel_us,shared_us,gbps,reps
 *
 * Traffic floor (one process, all buffers in its device memory):
 *   reduce  a kernel reads R buffers of S bytes, sums them as float32 (in
 *           source order, 16-byte vectors) and writes S bytes: one rank's
 *           reduce in weft's one-shot allreduce (its stage copy, S more
 *           bytes read and written, not included). reduce_scatter_block's
 *           is reduce at S / R.
 *   gather  a kernel copies R blocks of S bytes into an output of R * S
 *           (one grid row per block): allgather's copy-out, and alltoall's
 *           (R blocks of S); bcast's is gather with R = 1.
 * Columns: call (us): each call a launch then cudaStreamSynchronize, as a
 * blocking collective ends: the median of REPS repetitions of up to CALLS
 * calls, per call; kernel (us): the same launches back to back, timed by
 * events (no launch or synchronisation cost); xR (us): R kernels then one
 * synchronise per call, the one GPU's work when R ranks share it (each
 * rank does its own reduce or gather); GB/s: bytes read and written per
 * kernel over the kernel time (10^9 B/s). The grids are coll/cuda's (256
 * threads a block, one block per 4 KiB up to 4 per SM).
 *
 * Sync floor (R processes on one device, R from -r, 2..8): the program
 * forks R processes before any CUDA call (each then has its own context, as
 * R ranks would); each allocates a flag buffer, and the processes exchange
 * their CUDA IPC handles (cudaIpcGetMemHandle, cudaIpcOpenMemHandle)
 * through a MAP_SHARED page. An iteration: each process launches one block
 * of R - 1 threads (R = 2: one thread); the thread for peer p release-stores
 * (system scope) the iteration's number into p's buffer, then spins
 * (acquire, system scope, __nanosleep) until p's number for this iteration
 * arrives (weft's barrier kernel, coll/cuda/kernels/barrier.cuh), giving up after
 * 2 s; the host synchronises the stream. The table prints us per iteration
 * (one launch, one round trip, one synchronise), the median over REPS
 * repetitions of CALLS iterations of every process, and the smallest and
 * largest of the processes' own medians. Without MPS the processes'
 * contexts take turns on the GPU (time slices: expect milliseconds); under
 * MPS (nvidia-cuda-mps-control -d) they run at once (microseconds). The
 * header says whether an MPS control pipe exists ($CUDA_MPS_PIPE_DIRECTORY/
 * control, else /tmp/nvidia-mps/control). A process whose peers fail, die
 * or make no progress for 60 s stops; the parent reports it.
 *
 * Built by nvcc (Makefile.am, when configure found it) against the CUDA
 * runtime, linked statically: it needs the NVIDIA driver (libcuda.so.1, as
 * new as the toolkit's runtime) at run time and no toolkit. Without a
 * driver or a device it says so and exits 2; other failures (CUDA IPC
 * refused, a peer's flag that never came) exit 1. */
#include <cuda_runtime.h>

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "osu/floor.h"

#define MAXR 8
#define MAX_REPS 1000
#define LIMIT_S 60.0                         /* seconds without progress before giving up on the processes */
#define SPIN_LIMIT_NS 2000000000ull          /* a flag kernel's wait for one peer */
#define TRAFFIC_PER_REP ((size_t)256 << 20) /* bytes a traffic repetition moves at least (calls permitting) */

/* ------------------------------------------------------------------ */
/* Kernels                                                              */
/* ------------------------------------------------------------------ */
struct Ptrs {
    const char *p[MAXR];
};

/* p.p[i] with a constant index (a computed one would copy the parameter block to local memory). */
__device__ __forceinline__ const char *pick(const Ptrs &p, int i)
{
    const char *r = p.p[0];
#pragma unroll
    for (int j = 1; j < MAXR; j++)
        if (j == i) r = p.p[j];
    return r;
}

/* out[i] = src[0][i] + ... + src[R - 1][i], n floats; every buffer 16-byte aligned. */
template <int R> __global__ void reduce_k(Ptrs src, float *out, size_t n)
{
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nth = (size_t)gridDim.x * blockDim.x;
    const float4 *v[R];
#pragma unroll
    for (int p = 0; p < R; p++)
        v[p] = reinterpret_cast<const float4 *>(src.p[p]);
    size_t n4 = n / 4;
    float4 *o = reinterpret_cast<float4 *>(out);
    for (size_t i = tid; i < n4; i += nth) {
        float4 in[R];
#pragma unroll
        for (int p = 0; p < R; p++)
            in[p] = v[p][i];
        float4 a = in[0];
#pragma unroll
        for (int p = 1; p < R; p++)
            a.x += in[p].x, a.y += in[p].y, a.z += in[p].z, a.w += in[p].w;
        o[i] = a;
    }
    for (size_t i = n4 * 4 + tid; i < n; i += nth) {
        float a = reinterpret_cast<const float *>(src.p[0])[i];
#pragma unroll
        for (int p = 1; p < R; p++)
            a += reinterpret_cast<const float *>(src.p[p])[i];
        out[i] = a;
    }
}

/* Row y of the grid copies bytes from src.p[y] to out + y * bytes; 16-byte words where the size allows. */
__global__ void gather_k(Ptrs src, char *out, size_t bytes)
{
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nth = (size_t)gridDim.x * blockDim.x;
    const char *s = pick(src, (int)blockIdx.y);
    char *d = out + (size_t)blockIdx.y * bytes;
    size_t nv = bytes % 16 == 0 ? bytes / 16 : 0;
    const uint4 *vs = reinterpret_cast<const uint4 *>(s);
    uint4 *vd = reinterpret_cast<uint4 *>(d);
    size_t i = tid;
    for (; i + 3 * nth < nv; i += 4 * nth) {
        uint4 a = vs[i], b = vs[i + nth], c = vs[i + 2 * nth], e = vs[i + 3 * nth];
        vd[i] = a, vd[i + nth] = b, vd[i + 2 * nth] = c, vd[i + 3 * nth] = e;
    }
    for (; i < nv; i += nth)
        vd[i] = vs[i];
    for (size_t j = nv * 16 + tid; j < bytes; j += nth)
        d[j] = s[j];
}

__device__ __forceinline__ void st_release_sys(unsigned long long *p, unsigned long long v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long ld_acquire_sys(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long globaltimer(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

struct SyncArgs {
    Ptrs peer;               /* every process's flag buffer (own included), unsigned long long[MAXR] each */
    unsigned long long *mine; /* this process's */
    int me, n;
    unsigned long long seq;
    volatile int *timed_out; /* host-mapped: 1 + the peer a wait gave up on */
};

/* Thread t: peer p = t < me ? t : t + 1 (n - 1 threads). */
__global__ void sync_k(SyncArgs a)
{
    int p = (int)threadIdx.x;
    p += p >= a.me;
    if (p >= a.n) return;
    unsigned long long *peer = (unsigned long long *)pick(a.peer, p);
    st_release_sys(peer + a.me, a.seq);
    unsigned long long t0 = globaltimer();
    for (unsigned spins = 1; ld_acquire_sys(a.mine + p) < a.seq; spins++) {
        __nanosleep(100);
        if ((spins & 63) == 0 && globaltimer() - t0 > SPIN_LIMIT_NS) {
            *a.timed_out = 1 + p;
            __threadfence_system();
            return;
        }
    }
}

/* ------------------------------------------------------------------ */
/* CUDA start-up                                                        */
/* ------------------------------------------------------------------ */
static struct {
    int device, count, driver, runtime;
    char name[256];
} gpu;

/* The device's context in this process; -1 with the reason in err (no driver, no device...). */
static int cuda_start(int device, char *err, size_t len)
{
    cudaError_t e = cudaGetDeviceCount(&gpu.count);
    cudaDriverGetVersion(&gpu.driver);
    cudaRuntimeGetVersion(&gpu.runtime);
    if (e == cudaSuccess && gpu.count < 1) e = cudaErrorNoDevice;
    if (e != cudaSuccess) {
        if (gpu.driver == 0)
            snprintf(err, len, "no CUDA driver on this host (libcuda.so.1 cannot be loaded): no GPU to measure");
        else if (e == cudaErrorInsufficientDriver)
            snprintf(err, len, "the CUDA driver (%d.%d) is older than this program's CUDA runtime (%d.%d): %s",
                     gpu.driver / 1000, gpu.driver % 1000 / 10, gpu.runtime / 1000, gpu.runtime % 1000 / 10,
                     cudaGetErrorString(e));
        else if (e == cudaErrorNoDevice)
            snprintf(err, len, "no CUDA device on this host (or CUDA_VISIBLE_DEVICES hides them all)");
        else
            snprintf(err, len, "cudaGetDeviceCount: %s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
        return -1;
    }
    gpu.device = device % gpu.count;
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(gpu.device)) != cudaSuccess || (e = cudaFree(0)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, gpu.device)) != cudaSuccess) {
        snprintf(err, len, "device %d: %s (%s)", gpu.device, cudaGetErrorName(e), cudaGetErrorString(e));
        return -1;
    }
    snprintf(gpu.name, sizeof(gpu.name), "%s", prop.name);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Traffic floor                                                        */
/* ------------------------------------------------------------------ */
enum { T_REDUCE, T_GATHER, NT };
static const char *t_name[NT] = {"reduce", "gather"};

static struct {
    char *src;     /* MAXR buffers of stride bytes */
    char *out;     /* MAXR * max bytes */
    size_t stride; /* max rounded up to 4 KiB */
    int sms;
    cudaStream_t stream;
} tr;

static void cuda_check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fflush(stdout);
        fprintf(stderr, "coll-floor: %s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
        exit(1);
    }
}

/* coll/cuda's grid_for: a block of 256 threads per 4 KiB, at most 4 per SM. */
static unsigned grid_for(size_t bytes)
{
    size_t b = (bytes + 256 * 16 - 1) / (256 * 16), most = (size_t)tr.sms * 4;
    return (unsigned)(b < 1 ? 1 : b > most ? most : b);
}

static void launch(int test, int r, size_t bytes)
{
    Ptrs p;
    for (int i = 0; i < MAXR; i++)
        p.p[i] = tr.src + (size_t)(i < r ? i : 0) * tr.stride;
    if (test == T_GATHER) {
        gather_k<<<dim3(grid_for(bytes), (unsigned)r), 256, 0, tr.stream>>>(p, tr.out, bytes);
    } else {
        float *o = reinterpret_cast<float *>(tr.out);
        size_t n = bytes / 4;
        unsigned g = grid_for(bytes);
        switch (r) {
        case 1: reduce_k<1><<<g, 256, 0, tr.stream>>>(p, o, n); break;
        case 2: reduce_k<2><<<g, 256, 0, tr.stream>>>(p, o, n); break;
        case 3: reduce_k<3><<<g, 256, 0, tr.stream>>>(p, o, n); break;
        case 4: reduce_k<4><<<g, 256, 0, tr.stream>>>(p, o, n); break;
        case 5: reduce_k<5><<<g, 256, 0, tr.stream>>>(p, o, n); break;
        case 6: reduce_k<6><<<g, 256, 0, tr.stream>>>(p, o, n); break;
        case 7: reduce_k<7><<<g, 256, 0, tr.stream>>>(p, o, n); break;
        default: reduce_k<8><<<g, 256, 0, tr.stream>>>(p, o, n); break;
        }
    }
    cuda_check(cudaGetLastError(), t_name[test]);
}

static size_t traffic_bytes(int test, int r, size_t bytes)
{
    return test == T_REDUCE ? (size_t)(r + 1) * bytes : 2 * (size_t)r * bytes;
}

typedef struct {
    double call_us, kernel_us, shared_us, gbps;
} meas_t;

static meas_t measure(int test, int r, size_t bytes, int reps, int calls_max, double *t)
{
    size_t traffic = traffic_bytes(test, r, bytes);
    size_t k = TRAFFIC_PER_REP / (traffic ? traffic : 1);
    int calls = k < 1 ? 1 : k > (size_t)calls_max ? calls_max : (int)k;
    meas_t m;
    for (int i = 0; i < 3; i++)
        launch(test, r, bytes); /* warm-up */
    cuda_check(cudaStreamSynchronize(tr.stream), "cudaStreamSynchronize");
    for (int rep = 0; rep < reps; rep++) {
        double t0 = floor_now();
        for (int c = 0; c < calls; c++) {
            launch(test, r, bytes);
            cuda_check(cudaStreamSynchronize(tr.stream), "cudaStreamSynchronize");
        }
        t[rep] = (floor_now() - t0) / calls;
    }
    m.call_us = floor_median(t, reps) * 1e6;
    cudaEvent_t e0, e1;
    cuda_check(cudaEventCreate(&e0), "cudaEventCreate");
    cuda_check(cudaEventCreate(&e1), "cudaEventCreate");
    for (int rep = 0; rep < reps; rep++) {
        cuda_check(cudaEventRecord(e0, tr.stream), "cudaEventRecord");
        for (int c = 0; c < calls; c++)
            launch(test, r, bytes);
        cuda_check(cudaEventRecord(e1, tr.stream), "cudaEventRecord");
        cuda_check(cudaEventSynchronize(e1), "cudaEventSynchronize");
        float ms = 0;
        cuda_check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
        t[rep] = ms * 1e-3 / calls;
    }
    m.kernel_us = floor_median(t, reps) * 1e6;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    for (int rep = 0; rep < reps; rep++) {
        double t0 = floor_now();
        for (int c = 0; c < calls; c++) {
            for (int j = 0; j < r; j++)
                launch(test, r, bytes);
            cuda_check(cudaStreamSynchronize(tr.stream), "cudaStreamSynchronize");
        }
        t[rep] = (floor_now() - t0) / calls;
    }
    m.shared_us = floor_median(t, reps) * 1e6;
    m.gbps = m.kernel_us > 0 ? (double)traffic / (m.kernel_us * 1e-6) / 1e9 : 0;
    return m;
}

static int traffic(int device, const int *ranks, int nranks, size_t lo, size_t hi, int reps, int calls, FILE *csv)
{
    char err[512];
    if (cuda_start(device, err, sizeof(err))) {
        fprintf(stderr, "coll-floor: %s\n", err);
        return 2;
    }
    int rmax = 1;
    for (int i = 0; i < nranks; i++)
        rmax = ranks[i] > rmax ? ranks[i] : rmax;
    tr.stride = (hi + 4095) & ~(size_t)4095;
    cuda_check(cudaDeviceGetAttribute(&tr.sms, cudaDevAttrMultiProcessorCount, gpu.device), "SM count");
    cuda_check(cudaMalloc(&tr.src, tr.stride * (size_t)rmax), "cudaMalloc (sources)");
    cuda_check(cudaMalloc(&tr.out, tr.stride * (size_t)rmax), "cudaMalloc (output)");
    cuda_check(cudaMemset(tr.src, 0, tr.stride * (size_t)rmax), "cudaMemset");
    cuda_check(cudaMemset(tr.out, 0, tr.stride * (size_t)rmax), "cudaMemset");
    cuda_check(cudaStreamCreateWithFlags(&tr.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    double *t = (double *)malloc(sizeof(double) * (size_t)reps);
    if (!t) return 1;
    printf("# weft coll-floor: traffic floor on device %d of %d (%s, %d SMs), driver %d.%d, runtime %d.%d;\n"
           "# median of %d repetitions of up to %d calls (at least %zu MiB of traffic a repetition)\n"
           "# reduce: read R x S bytes, float32 sums, write S (one rank's reduce of a one-shot allreduce);\n"
           "# gather: copy R blocks of S bytes into R x S (allgather's copy-out)\n"
           "# call: launch + cudaStreamSynchronize; kernel: back-to-back launches, event-timed; xR: R kernels +\n"
           "# one synchronize (the GPU's work when R ranks share it); GB/s: bytes read + written / kernel time\n",
           gpu.device, gpu.count, gpu.name, tr.sms, gpu.driver / 1000, gpu.driver % 1000 / 10, gpu.runtime / 1000,
           gpu.runtime % 1000 / 10, reps, calls, TRAFFIC_PER_REP >> 20);
    printf("%-7s %10s %14s %12s %12s %9s %14s %12s %12s %9s\n", "# Ranks", "Size", "reduce call", "kernel", "xR",
           "GB/s", "gather call", "kernel", "xR", "GB/s");
    fflush(stdout);
    for (int i = 0; i < nranks; i++) {
        int r = ranks[i];
        for (size_t s = lo ? lo : 1; s <= hi; s = floor_next_size(s)) {
            printf("%-7d %10zu", r, s);
            for (int test = 0; test < NT; test++) {
                if (test == T_REDUCE && s < 4) { /* not one float */
                    printf(" %14s %12s %12s %9s", "-", "-", "-", "-");
                    continue;
                }
                meas_t m = measure(test, r, s, reps, calls, t);
                printf(" %14.2f %12.2f %12.2f %9.1f", m.call_us, m.kernel_us, m.shared_us, m.gbps);
                if (csv)
                    fprintf(csv, "%s,%d,%zu,%.4f,%.4f,%.4f,%.3f,%d\n", t_name[test], r, s, m.call_us, m.kernel_us,
                            m.shared_us, m.gbps, reps);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    free(t);
    cudaStreamDestroy(tr.stream);
    cudaFree(tr.src);
    cudaFree(tr.out);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Sync floor: R forked processes                                       */
/* ------------------------------------------------------------------ */
/* A process's state, in order (a wait for one is over at any later one). */
enum { S_START, S_READY, S_OPEN, S_MEASURED, S_CLOSED, S_FAILED };

struct sync_shared {
    int state[MAXR];          /* __atomic, acquire / release */
    unsigned long long progress; /* repetitions done, all processes together */
    int code[MAXR];           /* exit status of a FAILED process */
    cudaIpcMemHandle_t handle[MAXR];
    double t[MAXR][MAX_REPS]; /* each process's seconds per iteration, per repetition */
    char error[MAXR][512];    /* why a process FAILED */
    char gpu[320];            /* process 0's device line */
};
static struct sync_shared *sh;
static int s_me, s_n;
static pid_t s_parent;

static int load_state(int p)
{
    return __atomic_load_n(&sh->state[p], __ATOMIC_ACQUIRE);
}

static void set_state(int st)
{
    __atomic_store_n(&sh->state[s_me], st, __ATOMIC_RELEASE);
}

/* A process cannot go on: the reason for the parent, then exit. */
static void s_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void s_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sh->error[s_me], sizeof(sh->error[s_me]), fmt, ap);
    va_end(ap);
    sh->code[s_me] = code;
    set_state(S_FAILED);
    exit(code);
}

/* Leaves quietly where a peer failed (the parent reports it) or the parent is gone. */
static void s_check(void)
{
    for (int p = 0; p < s_n; p++)
        if (load_state(p) == S_FAILED) exit(1);
    if (getppid() != s_parent) exit(1);
}

/* Tells the peers this process reached st and waits until every one has. */
static void s_meet(int st)
{
    set_state(st);
    double t0 = floor_now();
    for (int p = 0; p < s_n; p++)
        while (load_state(p) < st) {
            s_check();
            if (floor_now() - t0 > LIMIT_S) s_fail(1, "process %d did not reach step %d in %.0f s", p, st, LIMIT_S);
            floor_sleep_us(100);
        }
}

static void s_cuda(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) s_fail(1, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* One process of the sync floor: set up, iterate, report through the shared page. */
static void sync_child(int device, int reps, int iters)
{
    char err[512];
    if (cuda_start(device, err, sizeof(err))) s_fail(2, "%s", err);
    if (s_me == 0)
        snprintf(sh->gpu, sizeof(sh->gpu), "device %d of %d (%s), driver %d.%d, runtime %d.%d", gpu.device,
                 gpu.count, gpu.name, gpu.driver / 1000, gpu.driver % 1000 / 10, gpu.runtime / 1000,
                 gpu.runtime % 1000 / 10);
    unsigned long long *flags = NULL;
    int *timed_out = NULL, *timed_out_dev = NULL;
    cudaStream_t stream;
    s_cuda(cudaMalloc(&flags, 4096), "cudaMalloc of the flags");
    s_cuda(cudaMemset(flags, 0, 4096), "cudaMemset of the flags");
    s_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); /* clear before a peer can see them */
    s_cuda(cudaHostAlloc(&timed_out, sizeof(int), cudaHostAllocMapped), "cudaHostAlloc (mapped)");
    s_cuda(cudaHostGetDevicePointer(&timed_out_dev, timed_out, 0), "cudaHostGetDevicePointer");
    *(volatile int *)timed_out = 0;
    s_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    const char *no_ipc = "CUDA IPC between processes is not available here (a sandbox or a container that hides "
                         "the other processes?)";
    cudaError_t e = cudaIpcGetMemHandle(&sh->handle[s_me], flags);
    if (e != cudaSuccess) s_fail(1, "cudaIpcGetMemHandle: %s; %s", cudaGetErrorString(e), no_ipc);
    s_meet(S_READY);
    SyncArgs a;
    memset(&a, 0, sizeof(a));
    for (int p = 0; p < s_n; p++) {
        void *m = flags;
        if (p != s_me && (e = cudaIpcOpenMemHandle(&m, sh->handle[p], cudaIpcMemLazyEnablePeerAccess)) != cudaSuccess)
            s_fail(1, "cudaIpcOpenMemHandle of process %d's flags: %s; %s", p, cudaGetErrorString(e), no_ipc);
        a.peer.p[p] = (const char *)m;
    }
    a.mine = flags;
    a.me = s_me;
    a.n = s_n;
    a.timed_out = (volatile int *)timed_out_dev;
    s_meet(S_OPEN);
    for (int rep = -1; rep < reps; rep++) { /* -1: warm-up */
        double t0 = floor_now();
        for (int i = 0; i < iters; i++) {
            a.seq++;
            sync_k<<<1, (unsigned)(s_n - 1), 0, stream>>>(a);
            s_cuda(cudaGetLastError(), "launching the flag kernel");
            s_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            int gone = *(volatile int *)timed_out;
            if (gone)
                s_fail(1, "iteration %llu: process %d's flag did not arrive within %.0f s", a.seq, gone - 1,
                       SPIN_LIMIT_NS * 1e-9);
        }
        if (rep >= 0) sh->t[s_me][rep] = (floor_now() - t0) / iters;
        __atomic_fetch_add(&sh->progress, 1, __ATOMIC_RELAXED);
        s_check();
    }
    s_meet(S_MEASURED);
    /* Unmap the peers' flags before any frees its own. */
    for (int p = 0; p < s_n; p++)
        if (p != s_me) s_cuda(cudaIpcCloseMemHandle((void *)a.peer.p[p]), "cudaIpcCloseMemHandle");
    s_meet(S_CLOSED);
    cudaStreamDestroy(stream);
    cudaFree(flags);
    cudaFreeHost(timed_out);
    exit(0);
}

/* The parent: n processes, each its own context; 0 with the row printed, else the exit status. */
static int sync_run(int n, int device, int reps, int iters, FILE *csv, int *header_done)
{
    sh = (struct sync_shared *)mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        fprintf(stderr, "coll-floor: mmap of the shared page: %s\n", strerror(errno));
        return 1;
    }
    memset(sh, 0, sizeof(*sh));
    s_n = n;
    s_parent = getpid();
    pid_t pid[MAXR];
    int status[MAXR], reaped[MAXR], started = 0;
    fflush(stdout);
    fflush(stderr);
    for (; started < n; started++) {
        if ((pid[started] = fork()) < 0) {
            fprintf(stderr, "coll-floor: fork: %s\n", strerror(errno));
            break;
        }
        if (pid[started] == 0) {
            s_me = started;
            sync_child(device, reps, iters); /* exits */
        }
        reaped[started] = 0;
    }
    if (started < n) { /* the ones started see a missing peer: no progress; stop them */
        for (int i = 0; i < started; i++)
            kill(pid[i], SIGKILL);
        for (int i = 0; i < started; i++)
            waitpid(pid[i], NULL, 0);
        munmap(sh, sizeof(*sh));
        return 1;
    }
    /* Watch: every process ends, or one fails (the others follow it), or nothing moves for LIMIT_S. */
    unsigned long long last = 0;
    double t_last = floor_now(), t_fail = 0;
    int left = n, killed = 0;
    while (left) {
        for (int i = 0; i < n; i++) {
            if (reaped[i]) continue;
            pid_t r = waitpid(pid[i], &status[i], WNOHANG);
            if (r == pid[i] || (r < 0 && errno != EINTR)) {
                if (r < 0) status[i] = -1;
                reaped[i] = 1, left--;
                int ok = status[i] != -1 && WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0;
                if (!ok && !t_fail) t_fail = floor_now();
            }
        }
        unsigned long long prog = __atomic_load_n(&sh->progress, __ATOMIC_RELAXED);
        double t = floor_now();
        if (prog != last) last = prog, t_last = t;
        if (left && !killed && (t - t_last > LIMIT_S || (t_fail && t - t_fail > 10))) {
            for (int i = 0; i < n; i++)
                if (!reaped[i]) kill(pid[i], SIGKILL);
            killed = 1;
        }
        if (left) floor_sleep_us(1000);
    }
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        if (__atomic_load_n(&sh->state[i], __ATOMIC_ACQUIRE) == S_FAILED) {
            fprintf(stderr, "coll-floor: --sync, %d processes: process %d: %s\n", n, i, sh->error[i]);
            rc = sh->code[i] ? sh->code[i] : 1;
        }
    for (int i = 0; i < n && !rc; i++) {
        if (status[i] != -1 && WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0) continue;
        if (killed && status[i] != -1 && WIFSIGNALED(status[i]) && WTERMSIG(status[i]) == SIGKILL)
            fprintf(stderr, "coll-floor: --sync, %d processes: no progress in %.0f s (process %d stopped)\n", n,
                    LIMIT_S, i);
        else if (status[i] != -1 && WIFSIGNALED(status[i]))
            fprintf(stderr, "coll-floor: --sync, %d processes: process %d (pid %d) was killed by signal %d (%s)\n",
                    n, i, (int)pid[i], WTERMSIG(status[i]), strsignal(WTERMSIG(status[i])));
        else
            fprintf(stderr, "coll-floor: --sync, %d processes: process %d (pid %d) ended with status %d\n", n, i,
                    (int)pid[i], status[i] != -1 && WIFEXITED(status[i]) ? WEXITSTATUS(status[i]) : -1);
        rc = 1;
    }
    if (rc) {
        munmap(sh, sizeof(*sh));
        return rc;
    }
    if (!*header_done) {
        char mps[4400];
        floor_mps_note(mps, sizeof(mps));
        printf("# weft coll-floor: sync floor, R processes on %s; %s\n"
               "# us per iteration: one launch of a flag kernel (release-store to every peer's flags, acquire-spin\n"
               "# on theirs, system scope, CUDA IPC) + cudaStreamSynchronize; median of %d repetitions of %d\n"
               "# iterations of every process; min / max: the processes' own medians\n",
               sh->gpu, mps, reps, iters);
        printf("%-7s %12s %12s %12s\n", "# Ranks", "Median(us)", "Min(us)", "Max(us)");
        *header_done = 1;
    }
    static double all[MAXR * MAX_REPS];
    double lo = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        memcpy(all + (size_t)i * reps, sh->t[i], sizeof(double) * (size_t)reps);
        double m = floor_median(sh->t[i], reps) * 1e6;
        lo = i == 0 || m < lo ? m : lo;
        hi = i == 0 || m > hi ? m : hi;
    }
    double m = floor_median(all, n * reps) * 1e6;
    printf("%-7d %12.2f %12.2f %12.2f\n", n, m, lo, hi);
    fflush(stdout);
    if (csv) fprintf(csv, "sync,%d,0,%.4f,,,,%d\n", n, m, reps);
    munmap(sh, sizeof(*sh));
    return 0;
}

/* ------------------------------------------------------------------ */
/* main                                                                 */
/* ------------------------------------------------------------------ */
static int parse_ranks(const char *s, int *ranks, int *n)
{
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > MAXR || *n == 16) return -1;
        ranks[(*n)++] = (int)v;
        s = end;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return *n ? 0 : -1;
}

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [--traffic] [--sync] [-m MIN:MAX] [-r RANKS] [-n REPS] [-k CALLS] [-d DEVICE] [--csv FILE]\n"
            "  floors under weft's GPU collectives on one GPU (default: both tables, sync first)\n"
            "  --traffic   a bare kernel with a collective's memory traffic: reduce (R x S bytes read, float32\n"
            "              sums, S written) and gather (R blocks of S copied into R x S), us per call\n"
            "  --sync      R forked processes, one flag kernel each per iteration (release-store to every peer\n"
            "              over CUDA IPC, acquire-spin on theirs) + stream synchronize, us per iteration\n"
            "  -m MIN:MAX  sizes S, powers of two (default 4:64m; suffixes k m g)\n"
            "  -r RANKS    comma list of R, 1..8 (default 2,4,8; sync skips 1)\n"
            "  -n REPS     repetitions, medians printed (default 20, at most %d)\n"
            "  -k CALLS    traffic: at most CALLS calls a repetition; sync: iterations a repetition (default 20)\n"
            "  -d DEVICE   device ordinal (default 0)\n"
            "  --csv FILE  also write test,ranks,size,median_us,kernel_us,shared_us,gbps,reps\n",
            prog, MAX_REPS);
}

int main(int argc, char **argv)
{
    int do_traffic = 0, do_sync = 0, reps = 20, calls = 20, device = 0, ranks[16] = {2, 4, 8}, nranks = 3;
    size_t lo = 4, hi = (size_t)64 << 20;
    const char *csv_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout, argv[0]);
            return 0;
        } else if (!strcmp(a, "--traffic")) {
            do_traffic = 1;
            continue;
        } else if (!strcmp(a, "--sync")) {
            do_sync = 1;
            continue;
        } else if (!v) {
            bad = 1;
        } else if (!strcmp(a, "-m")) {
            bad = floor_parse_range(v, &lo, &hi, (size_t)1 << 32);
        } else if (!strcmp(a, "-r")) {
            bad = parse_ranks(v, ranks, &nranks);
        } else if (!strcmp(a, "-n")) {
            reps = atoi(v), bad = reps < 1 || reps > MAX_REPS;
        } else if (!strcmp(a, "-k")) {
            calls = atoi(v), bad = calls < 1;
        } else if (!strcmp(a, "-d")) {
            device = atoi(v), bad = device < 0;
        } else if (!strcmp(a, "--csv")) {
            csv_path = v;
        } else {
            bad = 1;
        }
        if (bad) {
            floor_bad_option("coll-floor", a, v, usage, argv[0]);
            return 2;
        }
        i++;
    }
    if (!do_traffic && !do_sync) do_traffic = do_sync = 1;
    FILE *csv;
    if (floor_csv_open("coll-floor", csv_path, "test,ranks,size,median_us,kernel_us,shared_us,gbps,reps", &csv))
        return 2;
    int rc = 0, header = 0;
    /* The sync processes fork before this process touches CUDA (the traffic table comes after). */
    for (int i = 0; do_sync && !rc && i < nranks; i++)
        if (ranks[i] >= 2) rc = sync_run(ranks[i], device, reps, calls, csv, &header);
    if (do_traffic && !rc) rc = traffic(device, ranks, nranks, lo, hi, reps, calls, csv);
    if (floor_csv_close("coll-floor", csv, csv_path) && !rc) rc = 1;
    return rc;
}
