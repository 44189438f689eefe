/* The NVLink floors under coll/cuda's large collectives, without weft,
 * NCCL or processes: what G GPUs of one host give a bare copy or reduction
 * over their links, by copy engine or by kernel, pulling or pushing. One
 * process drives GPUs 0..G-1 with peer access enabled between every pair
 * (the same links and mappings as CUDA IPC between processes, without a
 * flag or a launch per process). weft-nccl-tests' bus bandwidth at 64 MiB -
 * 1 GiB against these says whether a collective is bound by its mechanism
 * (copy engine, pulling kernel, pushing kernel) or by weft's protocol
 * around it.
 *
 *   contrib/bench/nvlink-floor [-g GPUS] [-m MIN:MAX] [-n REPS] [-b BLOCKS] [-t THREADS] [--csv FILE]
 *     -g GPUS      comma list of GPU counts, 2..8 (default: 2 and the device count, when more)
 *     -m MIN:MAX   collective sizes S in bytes, powers of two (default 64m:1g; suffixes k m g)
 *     -n REPS      timed repetitions per test and size (default 10, after 2 untimed); the table
 *                  prints the median
 *     -b BLOCKS    thread blocks per GPU for the kernels (default: 2 per SM), split evenly over
 *                  the rows (one row per peer)
 *     -t THREADS   threads per block (default 512)
 *     --csv FILE   also write the medians: test,gpus,size,median_us,algbw_gbs,busbw_gbs,reps
 *
 * Tests, with nccl-tests' meaning of S (the allgather's output, the
 * reduce_scatter's input per GPU) and of bus bandwidth (S / t * (G - 1) / G
 * for both):
 *   ag-ce-pull  allgather by copy engine: each GPU copies every peer's S / G
 *               block into its output (cudaMemcpyPeerAsync, one stream per
 *               peer, queued on the receiving GPU)
 *   ag-ce-push  the same copies queued on the sending GPU
 *   ag-sm-pull  allgather by kernel: each GPU's kernel reads the peers'
 *               blocks (a grid row per peer, 16-byte loads, four in flight
 *               per thread) and writes them into its output
 *   ag-sm-push  each GPU's kernel reads its own block and writes it into
 *               every peer's output
 *   ag-sm-ring  a ring's traffic: each GPU's kernel writes G - 1 blocks
 *               (every block but the next GPU's own) into the next GPU's
 *               output (a grid row per block), as a ring allgather's steps
 *               move them, without the steps' waits (so its input holds
 *               every block: the data the ring would forward)
 *   rs-sm-pull  reduce_scatter of float32 by kernel: each GPU's kernel reads
 *               its S / G block of every GPU's input (G - 1 remote), sums
 *               them in GPU order and writes S / G bytes: the first half of
 *               a reduce_scatter + allgather allreduce, whose bus bandwidth
 *               is bounded by the slower half
 * A repetition: every GPU synchronised, the work queued on all of them, all
 * synchronised again, timed on the host's monotonic clock (milliseconds at
 * these sizes: the queueing is noise). After the timed repetitions each
 * test checks the first and last 16 bytes of every block it wrote.
 *
 * Built by nvcc (Makefile.am, when configure found it), the CUDA runtime
 * linked statically: it needs the driver at run time and no toolkit.
 * Without a driver or with fewer than 2 GPUs it says so and exits 2;
 * missing peer access or a wrong result exits 1. */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "osu/floor.h"

#define MAXG     8
#define MAX_REPS 1000
#define WARMUP   2

struct Ptrs {
    char *p[MAXG];
};

/* p.p[i] with a constant index (a computed one would copy the parameter block to local memory). */
__device__ __forceinline__ char *pick(const Ptrs &p, int i)
{
    char *r = p.p[0];
#pragma unroll
    for (int j = 1; j < MAXG; j++)
        if (j == i) r = p.p[j];
    return r;
}

/* Row y of the grid copies `bytes` (a multiple of 16) from src.p[y] to dst.p[y]. */
__global__ void copy_rows(Ptrs src, Ptrs dst, size_t bytes)
{
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nth = (size_t)gridDim.x * blockDim.x;
    const uint4 *s = reinterpret_cast<const uint4 *>(pick(src, (int)blockIdx.y));
    uint4 *d = reinterpret_cast<uint4 *>(pick(dst, (int)blockIdx.y));
    size_t nv = bytes / 16, i = tid;
    for (; i + 3 * nth < nv; i += 4 * nth) {
        uint4 a = s[i], b = s[i + nth], c = s[i + 2 * nth], e = s[i + 3 * nth];
        d[i] = a, d[i + nth] = b, d[i + 2 * nth] = c, d[i + 3 * nth] = e;
    }
    for (; i < nv; i += nth) d[i] = s[i];
}

/* out[i] = src[0][i] + ... + src[R - 1][i], n floats (a multiple of 8), two float4 per source in flight. */
template <int R> __global__ void reduce_k(Ptrs src, float *out, size_t n)
{
    size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, nth = (size_t)gridDim.x * blockDim.x;
    const float4 *v[R];
#pragma unroll
    for (int p = 0; p < R; p++)
        v[p] = reinterpret_cast<const float4 *>(src.p[p]);
    float4 *o = reinterpret_cast<float4 *>(out);
    size_t n4 = n / 4, i = tid;
    for (; i + nth < n4; i += 2 * nth) {
        float4 a[R], b[R];
#pragma unroll
        for (int p = 0; p < R; p++)
            a[p] = v[p][i], b[p] = v[p][i + nth];
#pragma unroll
        for (int p = 1; p < R; p++) {
            a[0].x += a[p].x, a[0].y += a[p].y, a[0].z += a[p].z, a[0].w += a[p].w;
            b[0].x += b[p].x, b[0].y += b[p].y, b[0].z += b[p].z, b[0].w += b[p].w;
        }
        o[i] = a[0], o[i + nth] = b[0];
    }
    for (; i < n4; i += nth) {
        float4 a = v[0][i];
#pragma unroll
        for (int p = 1; p < R; p++)
            a.x += v[p][i].x, a.y += v[p][i].y, a.z += v[p][i].z, a.w += v[p][i].w;
        o[i] = a;
    }
}

static int check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return 0;
    fprintf(stderr, "nvlink-floor: %s: %s\n", what, cudaGetErrorString(e));
    return 1;
}
#define CK(call)                                                                                                       \
    do {                                                                                                               \
        if (check((call), #call)) return 1;                                                                            \
    } while (0)

typedef struct {
    int g;                         /* GPUs */
    size_t max;                    /* the largest S */
    char *in[MAXG], *out[MAXG];    /* S bytes each, on their GPU */
    cudaStream_t st[MAXG][MAXG];   /* st[d][p]: a stream on GPU d for the copy with peer p */
    int blocks, threads;
} ctx_t;

enum { AG_CE_PULL, AG_CE_PUSH, AG_SM_PULL, AG_SM_PUSH, AG_SM_RING, RS_SM_PULL, NTESTS };
static const char *test_name[NTESTS] = {"ag-ce-pull", "ag-ce-push", "ag-sm-pull", "ag-sm-push", "ag-sm-ring",
                                        "rs-sm-pull"};

static int launch_reduce(int g, dim3 grid, int threads, cudaStream_t s, Ptrs src, float *out, size_t n)
{
    switch (g) {
    case 2: reduce_k<2><<<grid, threads, 0, s>>>(src, out, n); break;
    case 3: reduce_k<3><<<grid, threads, 0, s>>>(src, out, n); break;
    case 4: reduce_k<4><<<grid, threads, 0, s>>>(src, out, n); break;
    case 5: reduce_k<5><<<grid, threads, 0, s>>>(src, out, n); break;
    case 6: reduce_k<6><<<grid, threads, 0, s>>>(src, out, n); break;
    case 7: reduce_k<7><<<grid, threads, 0, s>>>(src, out, n); break;
    default: reduce_k<8><<<grid, threads, 0, s>>>(src, out, n); break;
    }
    return check(cudaGetLastError(), "reduce kernel launch");
}

/* Queues one repetition of test t at size s on every GPU. */
static int queue(const ctx_t *c, int t, size_t s)
{
    size_t blk = s / (size_t)c->g;
    for (int d = 0; d < c->g; d++) {
        CK(cudaSetDevice(d));
        if (t == AG_CE_PULL || t == AG_CE_PUSH) {
            for (int p = 0; p < c->g; p++) {
                if (p == d) continue;
                if (t == AG_CE_PULL)
                    CK(cudaMemcpyPeerAsync(c->out[d] + (size_t)p * blk, d, c->in[p], p, blk, c->st[d][p]));
                else
                    CK(cudaMemcpyPeerAsync(c->out[p] + (size_t)d * blk, p, c->in[d], d, blk, c->st[d][p]));
            }
        } else if (t == AG_SM_PULL || t == AG_SM_PUSH || t == AG_SM_RING) {
            Ptrs src = {}, dst = {};
            int rows = 0, next = (d + 1) % c->g;
            for (int p = 0; p < c->g; p++) {
                if (t == AG_SM_RING) {
                    if (p == next) continue;
                    src.p[rows] = c->in[d] + (size_t)p * blk;
                    dst.p[rows++] = c->out[next] + (size_t)p * blk;
                    continue;
                }
                if (p == d) continue;
                src.p[rows] = t == AG_SM_PULL ? c->in[p] : c->in[d];
                dst.p[rows] = t == AG_SM_PULL ? c->out[d] + (size_t)p * blk : c->out[p] + (size_t)d * blk;
                rows++;
            }
            dim3 grid((unsigned)((c->blocks + rows - 1) / rows), (unsigned)rows);
            copy_rows<<<grid, c->threads, 0, c->st[d][d]>>>(src, dst, blk);
            CK(cudaGetLastError());
        } else {
            Ptrs src = {};
            for (int p = 0; p < c->g; p++) src.p[p] = c->in[p] + (size_t)d * blk;
            if (launch_reduce(c->g, dim3((unsigned)c->blocks), c->threads, c->st[d][d], src, (float *)c->out[d],
                              blk / sizeof(float)))
                return 1;
        }
    }
    return 0;
}

static int sync_all(const ctx_t *c)
{
    for (int d = 0; d < c->g; d++) {
        CK(cudaSetDevice(d));
        CK(cudaDeviceSynchronize());
    }
    return 0;
}

/* Fills GPU d's input: bytes d + 1 for the allgathers (the ring's: block p bytes p + 1), floats d + 1 for
 * the reduction. */
static int fill(const ctx_t *c, int t, size_t s)
{
    for (int d = 0; d < c->g; d++) {
        CK(cudaSetDevice(d));
        if (t == RS_SM_PULL) {
            size_t n = s / sizeof(float);
            float *h = (float *)malloc(s);
            if (!h) return check(cudaErrorMemoryAllocation, "host buffer");
            for (size_t i = 0; i < n; i++) h[i] = (float)(d + 1);
            int rc = check(cudaMemcpy(c->in[d], h, s, cudaMemcpyHostToDevice), "fill");
            free(h);
            if (rc) return 1;
        } else if (t == AG_SM_RING) {
            size_t blk = s / (size_t)c->g;
            for (int p = 0; p < c->g; p++) CK(cudaMemset(c->in[d] + (size_t)p * blk, p + 1, blk));
        } else {
            CK(cudaMemset(c->in[d], d + 1, s));
        }
        CK(cudaMemset(c->out[d], 0, s));
    }
    return sync_all(c);
}

/* The first and last 16 bytes of every block test t wrote at size s. */
static int verify(const ctx_t *c, int t, size_t s)
{
    size_t blk = s / (size_t)c->g;
    unsigned char b[16];
    for (int d = 0; d < c->g; d++) {
        CK(cudaSetDevice(d));
        for (int p = 0; p < c->g; p++) {
            if (t == RS_SM_PULL && p > 0) break;
            if (t != RS_SM_PULL && p == d) continue;
            for (int end = 0; end < 2; end++) {
                size_t off = (t == RS_SM_PULL ? 0 : (size_t)p * blk) + (end ? blk - 16 : 0);
                CK(cudaMemcpy(b, c->out[d] + off, 16, cudaMemcpyDeviceToHost));
                for (int k = 0; k < 16; k += t == RS_SM_PULL ? 4 : 1) {
                    int ok;
                    if (t == RS_SM_PULL) {
                        float f;
                        memcpy(&f, b + k, sizeof(f));
                        ok = f == (float)(c->g * (c->g + 1) / 2);
                    } else {
                        ok = b[k] == (unsigned char)(p + 1);
                    }
                    if (!ok) {
                        fprintf(stderr, "nvlink-floor: %s, %d GPUs, %zu bytes: GPU %d's output at byte %zu is wrong\n",
                                test_name[t], c->g, s, d, off + (size_t)k);
                        return 1;
                    }
                }
            }
        }
    }
    return 0;
}

static void usage(FILE *f, const char *argv0)
{
    fprintf(f, "usage: %s [-g GPUS] [-m MIN:MAX] [-n REPS] [-b BLOCKS] [-t THREADS] [--csv FILE]\n", argv0);
}

static int parse_gpus(const char *s, int *out, int *n)
{
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 2 || v > MAXG || *n >= 16) return -1;
        out[(*n)++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return *n ? 0 : -1;
}

static int run(int g, size_t lo, size_t hi, int reps, int blocks, int threads, FILE *csv)
{
    ctx_t c;
    memset(&c, 0, sizeof(c));
    c.g = g, c.max = hi, c.threads = threads;
    for (int d = 0; d < g; d++) {
        CK(cudaSetDevice(d));
        for (int p = 0; p < g; p++) {
            if (p == d) continue;
            int can = 0;
            CK(cudaDeviceCanAccessPeer(&can, d, p));
            if (!can) {
                fprintf(stderr, "nvlink-floor: GPU %d cannot access GPU %d's memory (no peer access)\n", d, p);
                return 1;
            }
            cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled)
                (void)cudaGetLastError();
            else if (check(e, "cudaDeviceEnablePeerAccess"))
                return 1;
        }
        CK(cudaMalloc((void **)&c.in[d], hi));
        CK(cudaMalloc((void **)&c.out[d], hi));
        for (int p = 0; p < g; p++) CK(cudaStreamCreateWithFlags(&c.st[d][p], cudaStreamNonBlocking));
    }
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    c.blocks = blocks > 0 ? blocks : 2 * sms;
    printf("# %d GPUs, %d blocks of %d threads per GPU for the kernels; median of %d repetitions\n", g, c.blocks,
           threads, reps);
    printf("%-11s %5s %12s %12s %10s %10s\n", "test", "gpus", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s");
    double *v = (double *)malloc(sizeof(double) * (size_t)reps);
    if (!v) return check(cudaErrorMemoryAllocation, "host buffer");
    int rc = 0;
    for (int t = 0; t < NTESTS && !rc; t++) {
        for (size_t s = lo; s <= hi && !rc; s = floor_next_size(s)) {
            if (s % (16 * (size_t)g * 2)) continue;
            if ((rc = fill(&c, t, s))) break;
            for (int r = -WARMUP; r < reps && !rc; r++) {
                if ((rc = sync_all(&c))) break;
                double t0 = floor_now();
                if ((rc = queue(&c, t, s)) || (rc = sync_all(&c))) break;
                if (r >= 0) v[r] = floor_now() - t0;
            }
            if (rc || (rc = verify(&c, t, s))) break;
            double med = floor_median(v, reps), alg = (double)s / med / 1e9, bus = alg * (g - 1) / g;
            printf("%-11s %5d %12zu %12.1f %10.1f %10.1f\n", test_name[t], g, s, med * 1e6, alg, bus);
            if (csv) fprintf(csv, "%s,%d,%zu,%.3f,%.2f,%.2f,%d\n", test_name[t], g, s, med * 1e6, alg, bus, reps);
            fflush(stdout);
        }
    }
    free(v);
    for (int d = 0; d < g; d++) {
        cudaSetDevice(d);
        for (int p = 0; p < g; p++) cudaStreamDestroy(c.st[d][p]);
        cudaFree(c.in[d]);
        cudaFree(c.out[d]);
        for (int p = 0; p < g; p++)
            if (p != d) cudaDeviceDisablePeerAccess(p);
    }
    return rc;
}

int main(int argc, char **argv)
{
    int reps = 10, blocks = 0, threads = 512, gpus[16], ngpus = 0;
    size_t lo = (size_t)64 << 20, hi = (size_t)1 << 30;
    const char *csv_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout, argv[0]);
            return 0;
        } else if (!v) {
            bad = 1;
        } else if (!strcmp(a, "-g")) {
            bad = parse_gpus(v, gpus, &ngpus);
        } else if (!strcmp(a, "-m")) {
            bad = floor_parse_range(v, &lo, &hi, (size_t)8 << 30) || lo < 4096;
        } else if (!strcmp(a, "-n")) {
            reps = atoi(v), bad = reps < 1 || reps > MAX_REPS;
        } else if (!strcmp(a, "-b")) {
            blocks = atoi(v), bad = blocks < 1 || blocks > 65535;
        } else if (!strcmp(a, "-t")) {
            threads = atoi(v), bad = threads < 32 || threads > 1024 || threads % 32;
        } else if (!strcmp(a, "--csv")) {
            csv_path = v;
        } else {
            bad = 1;
        }
        if (bad) {
            floor_bad_option("nvlink-floor", a, v, usage, argv[0]);
            return 2;
        }
        i++;
    }
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev < 2) {
        fprintf(stderr, "nvlink-floor: needs 2 or more GPUs (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : ndev == 1 ? "1 found" : "none found");
        return 2;
    }
    if (!ngpus) {
        gpus[ngpus++] = 2;
        if (ndev > 2) gpus[ngpus++] = ndev > MAXG ? MAXG : ndev;
    }
    FILE *csv;
    if (floor_csv_open("nvlink-floor", csv_path, "test,gpus,size,median_us,algbw_gbs,busbw_gbs,reps", &csv)) return 2;
    int rc = 0;
    for (int i = 0; i < ngpus && !rc; i++) {
        if (gpus[i] > ndev) {
            fprintf(stderr, "nvlink-floor: %d GPUs asked for, %d found\n", gpus[i], ndev);
            rc = 2;
            break;
        }
        rc = run(gpus[i], lo, hi, reps, blocks, threads, csv);
    }
    if (floor_csv_close("nvlink-floor", csv, csv_path) && !rc) rc = 1;
    return rc;
}
