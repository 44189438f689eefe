/* coll/cuda's kernels: the fatbins nvcc built of kernels/<protocol>.cu,
 * embedded in libweft (Makefile.am: coll/cuda/kernels_fatbin.inc), loaded
 * through the driver into each context at its first GPU call, and looked up
 * by kernels.h's names; with them what the launches need to know of the
 * GPU: its SMs, the blocks of each spinning kernel an SM holds, whether it
 * has programmatic dependent launch. */
#include "coll/cuda/cuda_coll.h"

#include <stdio.h>
#include <string.h>

#ifdef WEFT_HAVE_CUDA_KERNELS
#include "coll/cuda/kernels_fatbin.inc" /* weft_ck_fatbins[]: one per protocol's kernels (Makefile.am) */
enum { NFATBINS = (int)(sizeof(weft_ck_fatbins) / sizeof(weft_ck_fatbins[0])) };
#else
enum { NFATBINS = 0 };
#endif

int weft_gpu_kernels_built(void)
{
    return NFATBINS > 0;
}

#ifdef WEFT_HAVE_CUDA

/* The element types and ops of the reduce kernels: weft_ck_<protocol>_reduce_<type>_<op> for the hot pairs, else
 * weft_ck_<protocol>_reduce_<type>, which reads the op from its arguments (kernels.h) */
#define CK_NAME(name, ...) #name,
static const char *const dtype_names[] = {WEFT_CK_DTYPES(CK_NAME, 0)};
static const char *const op_names[] = {WEFT_CK_OPS(CK_NAME, 0)};
#undef CK_NAME
_Static_assert(sizeof(dtype_names) / sizeof(dtype_names[0]) == WEFT_GPU_NTYPES &&
                   sizeof(op_names) / sizeof(op_names[0]) == WEFT_GPU_NOPS,
               "kernels.h's lists follow weft_dtype_t, weft_op_t");
_Static_assert(NFATBINS <= (int)(sizeof(((weft_gpu_module_t *)0)->mod) / sizeof(CUmodule)), "a module per fatbin");

/* kernels.h's names, by weft_gpu_kernel_t (from WEFT_GPU_K_REDUCE on, the prefix of one per type and op) */
static const char *const kernel_names[WEFT_GPU_KERNELS] = {
    [WEFT_GPU_K_STAGE] = "weft_ck_stage",
    [WEFT_GPU_K_BARRIER] = "weft_ck_barrier",
    [WEFT_GPU_K_COPY] = "weft_ck_copy",
    [WEFT_GPU_K_FUSED_COPY] = "weft_ck_fused_copy",
    [WEFT_GPU_K_PIPE_COPY] = "weft_ck_pipe_copy",
    [WEFT_GPU_K_PUSH_COPY] = "weft_ck_push_copy",
    [WEFT_GPU_K_PUSH_BCAST] = "weft_ck_push_bcast",
    [WEFT_GPU_K_RING_ALLGATHER] = "weft_ck_ring_allgather",
    [WEFT_GPU_K_RING_BCAST] = "weft_ck_ring_bcast",
    [WEFT_GPU_K_LL_COPY] = "weft_ck_ll_copy",
    [WEFT_GPU_K_REDUCE] = "weft_ck_reduce",
    [WEFT_GPU_K_FUSED_REDUCE] = "weft_ck_fused_reduce",
    [WEFT_GPU_K_PIPE_REDUCE] = "weft_ck_pipe_reduce",
    [WEFT_GPU_K_PUSH_REDUCE] = "weft_ck_push_reduce",
    [WEFT_GPU_K_PUSH_ALLREDUCE] = "weft_ck_push_allreduce",
    [WEFT_GPU_K_RING_REDUCE_SCATTER] = "weft_ck_ring_reduce_scatter",
    [WEFT_GPU_K_RING_ALLREDUCE] = "weft_ck_ring_allreduce",
    [WEFT_GPU_K_LL_REDUCE] = "weft_ck_ll_reduce",
    [WEFT_GPU_K_LOCAL_REDUCE] = "weft_ck_local_reduce",
};

enum { MAX_CTX = 16 };
static weft_gpu_module_t modules[MAX_CTX];

CUfunction weft_gpu_function(const weft_gpu_module_t *m, weft_gpu_kernel_t k, weft_dtype_t dt, int o)
{
    return k < WEFT_GPU_K_REDUCE ? m->one[k] : m->each[k - WEFT_GPU_K_REDUCE][dt][o];
}

/* Blocks of f, `threads` threads each, that one SM of dev holds at once: the occupancy calculator's arithmetic
 * over the kernel's registers and static shared memory (registers in 256-register units a warp, each warp in one
 * of the register file's four quarters; shared memory plus the per-block reservation); 1 where an attribute is
 * unknown. */
static int blocks_per_sm(CUfunction f, int threads, CUdevice dev)
{
    int regs = 0, smem = 0, sm_regs = 0, sm_threads = 0, sm_blocks = 0, sm_smem = 0, reserved = 0;
    if (!weft_cu.func_get_attribute || !weft_cu.device_get_attribute || threads < 1 ||
        weft_cu.func_get_attribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f) != CUDA_SUCCESS ||
        weft_cu.func_get_attribute(&smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f) != CUDA_SUCCESS ||
        weft_cu.device_get_attribute(&sm_regs, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, dev) !=
            CUDA_SUCCESS ||
        weft_cu.device_get_attribute(&sm_threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev) !=
            CUDA_SUCCESS ||
        weft_cu.device_get_attribute(&sm_blocks, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, dev) !=
            CUDA_SUCCESS ||
        weft_cu.device_get_attribute(&sm_smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev) !=
            CUDA_SUCCESS)
        return 1;
    if (weft_cu.device_get_attribute(&reserved, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, dev) !=
        CUDA_SUCCESS)
        reserved = 1024;
    int warps = (threads + 31) / 32, per_warp = (regs > 0 ? regs : 1) * 32;
    per_warp = (per_warp + 255) / 256 * 256;
    int b = sm_blocks;
    int by_regs = 4 * (sm_regs / 4 / per_warp) / warps, by_threads = sm_threads / (warps * 32);
    int by_smem = smem + reserved > 0 ? sm_smem / (smem + reserved) : b;
    if (by_regs < b) b = by_regs;
    if (by_threads < b) b = by_threads;
    if (by_smem < b) b = by_smem;
    return b < 1 ? 1 : b;
}

/* The kernel `name` from whichever of the module's fatbins holds it. */
static CUresult get_function(const weft_gpu_module_t *m, CUfunction *f, const char *name)
{
    CUresult r = CUDA_ERROR_NOT_FOUND;
    for (int i = 0; i < m->nmod && r != CUDA_SUCCESS; i++)
        r = weft_cu.module_get_function(f, m->mod[i], name);
    return r;
}

/* Every kernel of the module (kernels.h's names); an error names the one missing. */
static int get_functions(weft_gpu_module_t *m)
{
    char name[64] = "";
    CUresult r = CUDA_SUCCESS;
    for (int k = 0; k < WEFT_GPU_K_REDUCE && r == CUDA_SUCCESS; k++) {
        snprintf(name, sizeof(name), "%s", kernel_names[k]);
        r = get_function(m, &m->one[k], name);
    }
    for (int k = WEFT_GPU_K_REDUCE; k < WEFT_GPU_KERNELS && r == CUDA_SUCCESS; k++)
        for (int t = 0; t < WEFT_GPU_NTYPES && r == CUDA_SUCCESS; t++)
            for (int o = 0; o < WEFT_GPU_NOPS && r == CUDA_SUCCESS; o++) {
                snprintf(name, sizeof(name), "%s_%s_%s", kernel_names[k], dtype_names[t], op_names[o]);
                r = get_function(m, &m->each[k - WEFT_GPU_K_REDUCE][t][o], name);
                if (r == CUDA_ERROR_NOT_FOUND) { /* not a hot pair: its type's kernel */
                    snprintf(name, sizeof(name), "%s_%s", kernel_names[k], dtype_names[t]);
                    r = get_function(m, &m->each[k - WEFT_GPU_K_REDUCE][t][o], name);
                }
            }
    return r == CUDA_SUCCESS ? WEFT_SUCCESS
                             : weft_error(WEFT_ERR_INTERNAL, "coll/cuda: kernel %s missing from the fatbins: %s", name,
                                          weft_cu_text(r));
}

/* The fewest blocks of the kernels in fs (`threads` a block) that one SM of dev holds. */
static int least_per_sm(const CUfunction *fs, int n, int threads, CUdevice dev)
{
    int least = blocks_per_sm(fs[0], threads, dev);
    for (int k = 1; k < n; k++) {
        int b = blocks_per_sm(fs[k], threads, dev);
        if (b < least) least = b;
    }
    return least;
}

/* What the launches need of the GPU: the pipelined kernels' (staged, pushed, ring) threads a block, as every one
 * can have them (its registers decide), and the blocks an SM holds of every one; the same for the LL kernels. */
static void measure(weft_gpu_module_t *m)
{
    enum { NPIPE_EACH = 5, NALL = WEFT_GPU_NTYPES * WEFT_GPU_NOPS };
    CUfunction pipes[5 + NPIPE_EACH * NALL], lls[1 + NALL];
    const weft_gpu_kernel_t pipe_one[] = {WEFT_GPU_K_PIPE_COPY, WEFT_GPU_K_PUSH_COPY, WEFT_GPU_K_PUSH_BCAST,
                                          WEFT_GPU_K_RING_ALLGATHER, WEFT_GPU_K_RING_BCAST};
    const weft_gpu_kernel_t pipe_each[NPIPE_EACH] = {WEFT_GPU_K_PIPE_REDUCE, WEFT_GPU_K_PUSH_REDUCE,
                                                     WEFT_GPU_K_PUSH_ALLREDUCE, WEFT_GPU_K_RING_REDUCE_SCATTER,
                                                     WEFT_GPU_K_RING_ALLREDUCE};
    int npipes = 0, nlls = 0;
    for (int i = 0; i < 5; i++)
        pipes[npipes++] = m->one[pipe_one[i]];
    lls[nlls++] = m->one[WEFT_GPU_K_LL_COPY];
    for (int t = 0; t < WEFT_GPU_NTYPES; t++)
        for (int o = 0; o < WEFT_GPU_NOPS; o++) {
            for (int i = 0; i < NPIPE_EACH; i++)
                pipes[npipes++] = weft_gpu_function(m, pipe_each[i], (weft_dtype_t)t, o);
            lls[nlls++] = weft_gpu_function(m, WEFT_GPU_K_LL_REDUCE, (weft_dtype_t)t, o);
        }
    m->pipe_threads = WEFT_GPU_PIPE_THREADS;
    for (int k = 0; k < npipes && weft_cu.func_get_attribute; k++) {
        int most = 0;
        if (weft_cu.func_get_attribute(&most, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, pipes[k]) == CUDA_SUCCESS &&
            most >= 32 && most < m->pipe_threads)
            m->pipe_threads = most / 32 * 32;
    }
    CUdevice dev = 0;
    int major = 0, drv = 0;
    m->sms = 32;
    if (weft_cu.ctx_get_device(&dev) == CUDA_SUCCESS) {
        weft_cu.device_get_attribute(&m->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
        weft_cu.device_get_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    }
    if (weft_cu.driver_get_version) weft_cu.driver_get_version(&drv);
    m->ll_per_sm = least_per_sm(lls, nlls, WEFT_GPU_LL_THREADS, dev);
    m->pipe_per_sm = least_per_sm(pipes, npipes, m->pipe_threads, dev);
    int regs = -1, ll_regs = -1;
    if (weft_cu.func_get_attribute) {
        weft_cu.func_get_attribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, m->one[WEFT_GPU_K_PIPE_COPY]);
        weft_cu.func_get_attribute(&ll_regs, CU_FUNC_ATTRIBUTE_NUM_REGS,
                                   weft_gpu_function(m, WEFT_GPU_K_LL_REDUCE, WEFT_FLOAT32, WEFT_SUM));
    }
    m->pdl = 0;
#if CUDA_VERSION >= 12000
    m->pdl = weft_cu.launch_kernel_ex && major >= 9 && drv >= 12030;
#endif
    weft_debug("coll/cuda: kernels loaded: %d SMs, pipelined kernels of %d threads a block (%d warps; the copy "
               "kernel %d registers a thread; %d blocks an SM), LL kernels %d blocks of %d threads an SM (f32 sum: %d "
               "registers a thread); programmatic dependent launch %s (sm_%d0, driver %d.%d)",
               m->sms, m->pipe_threads, m->pipe_threads / 32, regs, m->pipe_per_sm, m->ll_per_sm, WEFT_GPU_LL_THREADS,
               ll_regs,
               !m->pdl             ? "not available"
               : weft_gpu_vars.pdl ? "on"
                                   : "off (WEFT_CUDA_COLL_PDL=0)",
               major, drv / 1000, drv % 1000 / 10);
}

int weft_gpu_module(CUcontext ctx, const weft_gpu_module_t **out)
{
    int i;
    for (i = 0; i < MAX_CTX && modules[i].ctx; i++)
        if (modules[i].ctx == ctx) {
            *out = &modules[i];
            return WEFT_SUCCESS;
        }
    if (i == MAX_CTX) return weft_error(WEFT_ERR_UNSUPPORTED, "coll/cuda: more than %d CUDA contexts", MAX_CTX);
    if (!NFATBINS) return weft_error(WEFT_ERR_UNSUPPORTED, "coll/cuda: built without nvcc (no kernels)");
    weft_gpu_module_t *m = &modules[i];
    int rc = WEFT_SUCCESS;
#ifdef WEFT_HAVE_CUDA_KERNELS
    for (m->nmod = 0; m->nmod < NFATBINS; m->nmod++) {
        CUresult r = weft_cu.module_load_data(&m->mod[m->nmod], weft_ck_fatbins[m->nmod]);
        if (r != CUDA_SUCCESS) {
            rc = weft_error(WEFT_ERR_UNSUPPORTED, "coll/cuda: loading the kernels failed: %s (built with nvcc %s)",
                            weft_cu_text(r), WEFT_NVCC_ARCHS);
            break;
        }
    }
#endif
    if (!rc) rc = get_functions(m);
    if (rc) {
        while (m->nmod > 0)
            weft_cu.module_unload(m->mod[--m->nmod]);
        return rc;
    }
    measure(m);
    m->ctx = ctx;
    *out = m;
    return WEFT_SUCCESS;
}

#endif
