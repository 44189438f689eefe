/* coll/cuda: collectives on device buffers among the ranks of one node,
 * by kernels over CUDA IPC-mapped scratch (kernels.h: the layout and the
 * protocol; kernels/<protocol>.cu: the kernels, embedded as fatbins and
 * loaded through the driver, which weft opens at run time and never links).
 *
 * Per communicator: each rank's scratch region (flags, two slots of
 * WEFT_CUDA_COLL_SLOT bytes), its sequence counter in device memory, two
 * words of host-mapped memory (abort, error), weft's stream; the regions are
 * exchanged once, at the first GPU collective, by a host allgather of their
 * IPC handles. A call stages its contribution into its slot, passes a
 * barrier kernel, then reduces or copies out of the peers' slots, in
 * slot-sized chunks; every launch goes on the communicator's stream when
 * its schedule starts (in the user's call order), and the schedule polls
 * an event recorded after the last launch. A wait past the deadline sets
 * the abort word: the kernels stop, the call returns the timeout, and the
 * communicator's GPU collectives fail from then on (its ranks' counters are
 * out of step). Semantics as for CUDA-aware MPI: the caller synchronises
 * the stream that wrote the buffers; the call returns when the result is in
 * place. */
#include "pt2pt/cuda.h"

#include "coll/coll.h"
#include "coll/cuda/kernels.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
    int slot;    /* WEFT_CUDA_COLL_SLOT */
    int enabled; /* WEFT_CUDA_COLL */
    int fused;   /* WEFT_CUDA_COLL_FUSED */
    int pipe;    /* WEFT_CUDA_COLL_PIPE */
    int pipe_blocks; /* WEFT_CUDA_COLL_PIPE_BLOCKS */
    int ll;          /* WEFT_CUDA_COLL_LL */
    int window;      /* WEFT_CUDA_COLL_WINDOW */
    int two_shot;    /* WEFT_CUDA_COLL_TWO_SHOT */
    int push;        /* WEFT_CUDA_COLL_PUSH */
    int pipe_depth;  /* WEFT_CUDA_COLL_PIPE_DEPTH */
    int pipe_ahead;  /* WEFT_CUDA_COLL_PIPE_AHEAD */
    int pipe_split;  /* WEFT_CUDA_COLL_PIPE_SPLIT */
    int ring;        /* WEFT_CUDA_COLL_RING */
    int pdl;         /* WEFT_CUDA_COLL_PDL */
} cvars;

/* The pipelined kernels' threads per block; the LL kernels' most (their __launch_bounds__). 8 warps: the blocks
 * the pipelined kernels' grids and warp splits (pipe_split) are tuned for, which their registers allowed when one
 * kernel held every mode and op; the kernels of one mode, type and op have room for more. */
enum { PIPE_THREADS = 256, LL_THREADS = 512 };

static const weft_var_t vars[] = {
    {"WEFT_CUDA_COLL_LL", WEFT_VAR_INT_AUTO | WEFT_VAR_AGREE, "auto",
     "coll/cuda: calls whose piece for each peer (an allreduce's, reduce's, allgather's or bcast's whole input; a "
     "reduce_scatter's or alltoall's block) is up to this many bytes (and the LL area's share of a sender: 2 MiB "
     "on 2 ranks, 1 MiB on 4, 512 KiB on 8) run as one launch (a block per 4 KiB, at most one per SM; where "
     "processes share a GPU, at most their share of the blocks it holds at once, so that all of theirs run "
     "together: the blocks wait on each other) that stores its pieces, 8 bytes "
     "at a time with the call's sequence number beside them, straight into the peers' memory, and reduces or "
     "copies out what arrives in its own: no barrier, no staging (measured on four H100s: 0.5-0.75x the staged "
     "time at 32-64 KiB pieces; two H200s, 128-512 KiB pieces: 0.59-0.76x in CUDA graphs, 0.33-0.73x launched). "
     "auto: 1 MiB on 2 ranks (two H200s, 1 MiB pieces: 0.77-0.83x the staged time launched, 0.88-1.01x in graphs; "
     "2 MiB pieces lost, 1.00-1.22x), 512 KiB on more (four H200s: 1 MiB pieces lost, 1.09-1.40x); 0: never",
     &cvars.ll, 0},
    {"WEFT_CUDA_COLL_WINDOW", WEFT_VAR_INT_AUTO | WEFT_VAR_AGREE, "auto",
     "coll/cuda: calls whose input, at least this many bytes per rank, lies in a registered window on every rank "
     "(weft_comm_window_register) read it in place: no staging, no chunks, one barrier more; smaller ones stage "
     "as if unregistered. auto: 8 MiB where ranks share a GPU (measured there: the second barrier costs more than "
     "the copy below about 8 MiB); where every rank has a GPU of its own alltoall and reduce_scatter from 64 KiB, "
     "allreduce never, the others from 8 MiB (measured on four H100s); 0: never",
     &cvars.window, 0},
    {"WEFT_CUDA_COLL_TWO_SHOT", WEFT_VAR_INT | WEFT_VAR_AGREE, "8388608",
     "coll/cuda: allreduces of at least this many bytes per rank on 3 or more ranks run in two shots (each rank "
     "reduces its part of every input, then every rank copies every reduced part: about 2 x the vector read per "
     "rank instead of n x) instead of one shot (staged calls; one in a registered window stays one shot); bcasts "
     "as large in two steps (each rank relays its part of the root's chunk through its slot: the root's NVLink "
     "egress carries it about twice instead of n - 1 times); a pipelined allreduce or bcast that pushes "
     "(WEFT_CUDA_COLL_PUSH) is two shots (steps) of its own and goes first; 0: never",
     &cvars.two_shot, 0},
    {"WEFT_CUDA_COLL", WEFT_VAR_BOOL | WEFT_VAR_AGREE, "1",
     "collectives on device buffers through coll/cuda (kernels over CUDA IPC among the ranks of one node); 0: "
     "they fail with WEFT_ERR_UNSUPPORTED",
     &cvars.enabled, 0},
    {"WEFT_CUDA_COLL_SLOT", WEFT_VAR_INT_AUTO | WEFT_VAR_AGREE, "auto",
     "coll/cuda: bytes of each of a rank's two scratch slots (its device memory, mapped by its peers); larger "
     "messages go in chunks of this size, one barrier each. Costs 2 x this + about 16 MiB (the "
     "flags and the LL area) of device memory per rank and communicator that runs a GPU collective. auto: 8 MiB "
     "where ranks share a GPU, 32 MiB where every rank has its own (measured on four H100s: 1.1-1.5x the bus "
     "bandwidth of 8 MiB slots for allreduce, reduce_scatter and alltoall from 16 MiB)",
     &cvars.slot, 0},
    {"WEFT_CUDA_COLL_FUSED", WEFT_VAR_INT | WEFT_VAR_AGREE, "16384",
     "coll/cuda: calls that stage up to this many bytes per rank run as one launch of one thread block (stage, "
     "barrier and reduce or copy fused) instead of three launches (into a CUDA graph: up to 4096 at most, as a "
     "replay pays no launch cost); 0: never",
     &cvars.fused, 0},
    {"WEFT_CUDA_COLL_PIPE", WEFT_VAR_INT_AUTO | WEFT_VAR_AGREE, "auto",
     "coll/cuda: calls that stage at least this many bytes per rank run as one barrier then one pipelined launch of "
     "many blocks (each unit staged, announced and consumed with its own flags, so staging, NVLink reads and "
     "reductions overlap) instead of slot-sized chunks of three launches each. auto: 32 MiB where every rank has "
     "a GPU of its own (an allgather that runs as a ring, WEFT_CUDA_COLL_RING: 8 MiB; four H200s, 32 MiB in all: "
     "0.98x NCCL's time against 1.37x chunked), never where two ranks share one (their spinning blocks starve "
     "each other); 0: never",
     &cvars.pipe, 0},
    {"WEFT_CUDA_COLL_PUSH", WEFT_VAR_INT_AUTO | WEFT_VAR_AGREE, "auto",
     "coll/cuda: pipelined calls (WEFT_CUDA_COLL_PIPE) staging at least this many bytes per rank push: each rank "
     "stores its units into its peers' scratch (NVLink carries stores; every rank reads only its own memory), and "
     "an allreduce runs as a reduce-scatter whose parts every rank then pushes to all (about 2 x the vector "
     "crosses per rank, not n - 1 x); smaller ones stage into their own scratch for the peers to read. auto: "
     "allreduce from 128 MiB, reduce_scatter from 256 MiB (both on 2 ranks from 32 MiB: measured on two "
     "H200s), the others always (measured on four H100s); 0: never",
     &cvars.push, 0},
    {"WEFT_CUDA_COLL_PIPE_BLOCKS", WEFT_VAR_INT | WEFT_VAR_AGREE, "128",
     "coll/cuda: thread blocks of the pipelined kernel (within the max_ctas / min_ctas hints and the SMs; where "
     "processes share a GPU, at most their share of the blocks it holds at once, so that all of theirs run "
     "together: the blocks wait on each other)",
     &cvars.pipe_blocks, 0},
    {"WEFT_CUDA_COLL_PIPE_DEPTH", WEFT_VAR_INT_AUTO | WEFT_VAR_AGREE, "auto",
     "coll/cuda: positions of the slots per block of the pipelined kernel (at most 512 / blocks): the units a "
     "block may have in flight; the slots are cut into blocks x this many positions, so more positions make "
     "smaller units. auto: 4 for a ring (WEFT_CUDA_COLL_RING; four H200s: 0.80-1.0x the time of 2 at 32-128 "
     "MiB, the same above) and a bcast on 2 ranks (measured on two H200s, two leases: 1.05-1.12x the bus "
     "bandwidth of 2 at 32-64 MiB, 1.00-1.02x above), 2 otherwise (measured on four H100s, 32 MiB - 1 GiB: 4 "
     "positions gave allreduce, bcast and reduce_scatter 0.80-0.94x the bus bandwidth of 2 at most sizes, the "
     "others 0.97-1.08x; two H200s: allreduce 0.82-0.96x)",
     &cvars.pipe_depth, 0},
    {"WEFT_CUDA_COLL_PIPE_AHEAD", WEFT_VAR_INT_AUTO | WEFT_VAR_AGREE, "auto",
     "coll/cuda: units a block of the pipelined kernel fills (stages or pushes) ahead of the one it consumes, so "
     "its peers' flags for that one are on their way while it works (at most the depth - 1); 0: each unit "
     "filled, then consumed. auto: 1 for allreduce, 0 for the others (measured on four H100s at 128 MiB - 1 GiB: "
     "1 ahead gave allreduce 1.02-1.07x the bus bandwidth of 0, allgather 0.91-0.95x, the others "
     "0.97-1.04x). A ring (WEFT_CUDA_COLL_RING) runs this many of a block's units at a time, step by step "
     "(at least 1, at most half the depth; four H200s: 2 against 1 the same time, 0.98-1.01x)",
     &cvars.pipe_ahead, 0},
    {"WEFT_CUDA_COLL_PIPE_SPLIT", WEFT_VAR_INT_AUTO, "auto",
     "coll/cuda: warps of each block of a pushing pipelined kernel (WEFT_CUDA_COLL_PUSH) that push units while "
     "the block's other warps consume the units the peers pushed, side by side (on a rank that both pushes and "
     "consumes; a bcast's root and a reduce's other ranks do one of the two); 0: every warp pushes a unit, then "
     "consumes one (WEFT_CUDA_COLL_PIPE_AHEAD); at least the block's warps: none split. auto: where each block "
     "has at least two units (one unit a block leaves nothing to overlap), 3 of 8 warps for allgather (on 2 ranks; "
     "on four H200s unsplit blocks were 1.05-1.12x faster from 256 MiB), alltoall and reduce_scatter, 6 of 8 for "
     "allreduce (of the block's warps; measured on two H200s, 64 MiB - 1 GiB: bus bandwidth 1.03-1.22x, "
     "1.06-1.16x and 1.07-1.11x that of unsplit blocks), 0 for the rest. A rank's own "
     "choice: ranks may differ",
     &cvars.pipe_split, 0},
    {"WEFT_CUDA_COLL_RING", WEFT_VAR_INT_AUTO | WEFT_VAR_AGREE, "auto",
     "coll/cuda: pipelined allgathers, bcasts, reduce_scatters and allreduces (WEFT_CUDA_COLL_PIPE) on 3 or more "
     "ranks staging at least this many bytes per rank run as a ring: every rank stores only into the next rank's "
     "scratch and passes on what the previous one stored (allgather and bcast bit for bit as the other forms; "
     "reduce_scatter and allreduce fold in ring order, rounding each partial to the element type). auto: every "
     "pipelined call of the four (measured on four H200s, bf16, ring / pushed time: 0.66-0.70 for allgather, "
     "reduce_scatter and allreduce from 128 MiB, 0.69-0.93 at 32-64 MiB; bcast 0.92-1.01 from 128 MiB, "
     "0.97-1.04 at 32-64 MiB with 4 positions); 0: never",
     &cvars.ring, 0},
    {"WEFT_CUDA_COLL_PDL", WEFT_VAR_BOOL, "1",
     "coll/cuda: launch the kernels with programmatic dependent launch where the GPU (sm_90 or newer) and the "
     "driver (CUDA 12.3 or newer) have it, for kernels of one block (small calls): such a kernel is launched as "
     "the one before it in the stream ends (once every block of that one has exited or, in the LL kernel, "
     "passed its last wait) and waits for its end before touching memory, so stream order holds and only the "
     "launch gap shrinks (one H200, one-block kernels back to back in a CUDA graph: 0.63 against 0.75 us a "
     "kernel; 2 ranks on one H200 under MPS, in graphs: 0.83-0.99x the time up to 16 KiB, but LL calls of "
     "several blocks 1.20-1.23x at 32-64 KiB, hence one block only). A rank's own choice: ranks may differ; 0: "
     "plain launches",
     &cvars.pdl, 0},
};

#ifdef WEFT_HAVE_CUDA_KERNELS
#include "coll/cuda/kernels_fatbin.inc" /* weft_ck_fatbins[]: one per protocol's kernels (Makefile.am) */
#include "src/cuda/runtime.h"

/* ---- the kernels, one module per protocol's fatbin per context ------------------------------ */

/* The element types and ops of the reduce kernels: weft_ck_<protocol>_reduce_<type>_<op> for the hot pairs, else
 * weft_ck_<protocol>_reduce_<type>, which reads the op from its arguments (kernels.h) */
#define CK_NAME(name, ...) #name,
static const char *const dtype_names[] = {WEFT_CK_DTYPES(CK_NAME, 0)};
static const char *const op_names[] = {WEFT_CK_OPS(CK_NAME, 0)};
#undef CK_NAME
enum {
    NREDUCE = (int)(sizeof(dtype_names) / sizeof(dtype_names[0])),
    NOPS = (int)(sizeof(op_names) / sizeof(op_names[0])),
    NFATBINS = (int)(sizeof(weft_ck_fatbins) / sizeof(weft_ck_fatbins[0]))
};
_Static_assert(NREDUCE == WEFT_FLOAT64 + 1 && NOPS == WEFT_AVG + 1, "kernels.h's lists follow weft_dtype_t, weft_op_t");

typedef struct module {
    CUcontext ctx;
    CUmodule mod[NFATBINS];
    CUfunction stage, barrier, copy, fused_copy, pipe_copy, push_copy, push_bcast, ring_allgather, ring_bcast, ll_copy;
    /* [dtype][op] */
    CUfunction reduce[NREDUCE][NOPS], fused_reduce[NREDUCE][NOPS], pipe_reduce[NREDUCE][NOPS],
        push_reduce[NREDUCE][NOPS], push_allreduce[NREDUCE][NOPS], ring_reduce_scatter[NREDUCE][NOPS],
        ring_allreduce[NREDUCE][NOPS], ll_reduce[NREDUCE][NOPS];
    int sms;
    int pipe_threads; /* PIPE_THREADS, or fewer where a pipelined kernel's registers allow fewer */
    /* Blocks one SM holds at once of the LL kernels (LL_THREADS a block) and of the pipelined ones
     * (pipe_threads), the least over each kind's kernels: their blocks spin on the peers' blocks */
    int ll_per_sm, pipe_per_sm;
    int pdl;          /* the GPU and driver have programmatic dependent launch (used unless WEFT_CUDA_COLL_PDL=0) */
} module_t;

enum { MAX_CTX = 16 };
static module_t modules[MAX_CTX];

static int cu_fail(CUresult r, const char *what)
{
    return weft_error(WEFT_ERR_TRANSPORT, "coll/cuda: %s failed: %s", what, weft_cu_text(r));
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
static CUresult get_function(const module_t *m, CUfunction *f, const char *name)
{
    CUresult r = CUDA_ERROR_NOT_FOUND;
    for (int i = 0; i < NFATBINS && r != CUDA_SUCCESS; i++)
        r = weft_cu.module_get_function(f, m->mod[i], name);
    return r;
}

/* Every kernel of the module (kernels.h's names); an error names the one missing. */
static int get_functions(module_t *m)
{
    const struct {
        const char *name;
        CUfunction *f;
    } one[] = {{"weft_ck_stage", &m->stage},
               {"weft_ck_barrier", &m->barrier},
               {"weft_ck_copy", &m->copy},
               {"weft_ck_fused_copy", &m->fused_copy},
               {"weft_ck_pipe_copy", &m->pipe_copy},
               {"weft_ck_push_copy", &m->push_copy},
               {"weft_ck_push_bcast", &m->push_bcast},
               {"weft_ck_ring_allgather", &m->ring_allgather},
               {"weft_ck_ring_bcast", &m->ring_bcast},
               {"weft_ck_ll_copy", &m->ll_copy}};
    const struct {
        const char *prefix;
        CUfunction (*f)[NOPS];
    } each[] = {{"weft_ck_reduce", m->reduce},
                {"weft_ck_fused_reduce", m->fused_reduce},
                {"weft_ck_pipe_reduce", m->pipe_reduce},
                {"weft_ck_push_reduce", m->push_reduce},
                {"weft_ck_push_allreduce", m->push_allreduce},
                {"weft_ck_ring_reduce_scatter", m->ring_reduce_scatter},
                {"weft_ck_ring_allreduce", m->ring_allreduce},
                {"weft_ck_ll_reduce", m->ll_reduce}};
    const size_t none = sizeof(one) / sizeof(one[0]), neach = sizeof(each) / sizeof(each[0]);
    char name[64];
    CUresult r = CUDA_SUCCESS;
    for (size_t k = 0; k < none && r == CUDA_SUCCESS; k++) {
        snprintf(name, sizeof(name), "%s", one[k].name);
        r = get_function(m, one[k].f, name);
    }
    for (size_t k = 0; k < neach && r == CUDA_SUCCESS; k++)
        for (int t = 0; t < NREDUCE && r == CUDA_SUCCESS; t++)
            for (int o = 0; o < NOPS && r == CUDA_SUCCESS; o++) {
                snprintf(name, sizeof(name), "%s_%s_%s", each[k].prefix, dtype_names[t], op_names[o]);
                r = get_function(m, &each[k].f[t][o], name);
                if (r == CUDA_ERROR_NOT_FOUND) { /* not a hot pair: its type's kernel */
                    snprintf(name, sizeof(name), "%s_%s", each[k].prefix, dtype_names[t]);
                    r = get_function(m, &each[k].f[t][o], name);
                }
            }
    return r == CUDA_SUCCESS ? WEFT_SUCCESS
                             : weft_error(WEFT_ERR_INTERNAL, "coll/cuda: kernel %s missing from the fatbins: %s", name,
                                          weft_cu_text(r));
}

static int module_of(CUcontext ctx, module_t **out)
{
    int i;
    for (i = 0; i < MAX_CTX && modules[i].ctx; i++)
        if (modules[i].ctx == ctx) {
            *out = &modules[i];
            return WEFT_SUCCESS;
        }
    if (i == MAX_CTX) return weft_error(WEFT_ERR_UNSUPPORTED, "coll/cuda: more than %d CUDA contexts", MAX_CTX);
    module_t *m = &modules[i];
    int loaded = 0, rc = WEFT_SUCCESS;
    for (; loaded < NFATBINS; loaded++) {
        CUresult r = weft_cu.module_load_data(&m->mod[loaded], weft_ck_fatbins[loaded]);
        if (r != CUDA_SUCCESS) {
            rc = weft_error(WEFT_ERR_UNSUPPORTED, "coll/cuda: loading the kernels failed: %s (built with nvcc %s)",
                            weft_cu_text(r), WEFT_NVCC_ARCHS);
            break;
        }
    }
    if (!rc) rc = get_functions(m);
    if (rc) {
        while (loaded > 0) weft_cu.module_unload(m->mod[--loaded]);
        return rc;
    }
    /* the pipelined kernels (staged, pushed, ring): threads a block of every one can have (its registers decide),
     * and blocks an SM holds of every one; the same for the LL kernels */
    CUfunction pipes[5 + 5 * NREDUCE * NOPS], lls[1 + NREDUCE * NOPS];
    int npipes = 0, nlls = 0;
    pipes[npipes++] = m->pipe_copy, pipes[npipes++] = m->push_copy, pipes[npipes++] = m->push_bcast;
    pipes[npipes++] = m->ring_allgather, pipes[npipes++] = m->ring_bcast, lls[nlls++] = m->ll_copy;
    for (int t = 0; t < NREDUCE; t++)
        for (int o = 0; o < NOPS; o++) {
            pipes[npipes++] = m->pipe_reduce[t][o], pipes[npipes++] = m->push_reduce[t][o];
            pipes[npipes++] = m->push_allreduce[t][o], pipes[npipes++] = m->ring_reduce_scatter[t][o];
            pipes[npipes++] = m->ring_allreduce[t][o];
            lls[nlls++] = m->ll_reduce[t][o];
        }
    m->pipe_threads = PIPE_THREADS;
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
    m->ll_per_sm = blocks_per_sm(lls[0], LL_THREADS, dev);
    m->pipe_per_sm = blocks_per_sm(pipes[0], m->pipe_threads, dev);
    for (int k = 1; k < nlls; k++) {
        int b = blocks_per_sm(lls[k], LL_THREADS, dev);
        if (b < m->ll_per_sm) m->ll_per_sm = b;
    }
    for (int k = 1; k < npipes; k++) {
        int b = blocks_per_sm(pipes[k], m->pipe_threads, dev);
        if (b < m->pipe_per_sm) m->pipe_per_sm = b;
    }
    int regs = -1, ll_regs = -1;
    if (weft_cu.func_get_attribute) {
        weft_cu.func_get_attribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, m->pipe_copy);
        weft_cu.func_get_attribute(&ll_regs, CU_FUNC_ATTRIBUTE_NUM_REGS, m->ll_reduce[WEFT_FLOAT32][WEFT_SUM]);
    }
    m->pdl = 0;
#if CUDA_VERSION >= 12000
    m->pdl = weft_cu.launch_kernel_ex && major >= 9 && drv >= 12030;
#endif
    weft_debug("coll/cuda: kernels loaded: %d SMs, pipelined kernels of %d threads a block (%d warps; the copy "
               "kernel %d registers a thread; %d blocks an SM), LL kernels %d blocks of %d threads an SM (f32 sum: %d "
               "registers a thread); programmatic dependent launch %s (sm_%d0, driver %d.%d)",
               m->sms, m->pipe_threads, m->pipe_threads / 32, regs, m->pipe_per_sm, m->ll_per_sm, LL_THREADS, ll_regs,
               !m->pdl ? "not available" : cvars.pdl ? "on" : "off (WEFT_CUDA_COLL_PDL=0)", major, drv / 1000,
               drv % 1000 / 10);
    m->ctx = ctx;
    *out = m;
    return WEFT_SUCCESS;
}

/* ---- per-communicator state ----------------------------------------------------- */

/* A registered buffer (weft_comm_window_register): index i of every rank's
 * table; base[p] is rank p's buffer as this rank addresses it (its own, or
 * mapped through CUDA IPC), len[p] its bytes. */
enum { MAX_WINDOWS = 64 };
struct weft_window {
    struct cuda_state *st; /* NULL: the entry is free */
    int index;
    CUdeviceptr base[WEFT_CK_MAX_RANKS];
    CUdeviceptr mapped[WEFT_CK_MAX_RANKS]; /* what cuIpcOpenMemHandle returned (closed at deregistration) */
    unsigned long long len[WEFT_CK_MAX_RANKS];
};
typedef struct weft_window cuda_window_t;

/* What each rank tells the others at setup. */
typedef struct {
    int32_t status; /* WEFT_SUCCESS or this rank's setup error */
    int32_t device;
    int32_t pci; /* the GPU's PCI domain, bus and device (-1: unknown): which ranks share one */
    int32_t sms, ll_room, pipe_room; /* its GPU's SMs; blocks of the LL / pipelined kernels it holds at once */
    CUipcMemHandle handle;
} exch_t;

enum { EVPOOL = 32 };

typedef struct cuda_state {
    weft_comm_t comm;
    int n, me;
    int ready;  /* regions exchanged and mapped */
    int broken; /* a weft error code: every later call fails with it */
    int shared;  /* two ranks of the communicator share a GPU (the auto values below and in window_min) */
    int per_gpu; /* processes that may run kernels on one of the ranks' GPUs at once (this one's and others') */
    /* The most blocks of an LL / pipelined kernel: every rank's (all per_gpu processes') fit on the GPU at
     * once, so no spinning block waits on a peer's block that cannot start; the same on every rank */
    unsigned ll_most, pipe_most;
    size_t pipe; /* WEFT_CUDA_COLL_PIPE resolved (0: never) */
    char why[256];
    CUcontext ctx;
    module_t *m;
    CUstream stream;
    CUdeviceptr region; /* this rank's: header + 2 slots */
    CUdeviceptr counter;
    size_t slot;
    int *words; /* host-mapped: [0] abort, [1] error */
    CUdeviceptr dwords;
    CUdeviceptr peer[WEFT_CK_MAX_RANKS]; /* every rank's region (own: region) */
    /* The last eager call's end (its event, until the call is reaped) and the stream it went on. */
    CUevent tail;
    CUstream tail_stream;
    /* Eager calls in issue order: the last one's number, and the highest known done (the calls run on the GPU
     * in call order, tail below: every one before it is done too, no need to ask their events). */
    unsigned long long issued, done;
    /* Events of reaped calls, for the next ones (an event a call: creating and destroying one cost about a
     * microsecond of the call's host time) */
    CUevent evpool[EVPOOL];
    int nev;
    cuda_window_t win[MAX_WINDOWS];
    int nwin; /* windows registered: a call looks for its input in them only when there are some */
} cuda_state_t;

/* Waits (yielding) until ev has completed or `seconds` have passed: the
 * event's last status (CUDA_ERROR_NOT_READY: still running). The caller
 * has made the event's context current. */
static CUresult event_wait(CUevent ev, double seconds)
{
    double until = weft_wtime() + seconds;
    CUresult q;
    while ((q = weft_cu.event_query(ev)) == CUDA_ERROR_NOT_READY && weft_wtime() < until)
        sched_yield();
    return q;
}

/* Closes this rank's IPC mappings of a window's peer buffers. The caller has made the context current. */
static void window_unmap(cuda_window_t *w, int n)
{
    for (int p = 0; p < n; p++)
        if (w->mapped[p]) weft_cu.ipc_close_mem_handle(w->mapped[p]);
}

static void state_release(weft_comm_t comm, void *p)
{
    (void)comm;
    cuda_state_t *st = p;
    if (!st) return;
    if (st->ctx && weft_cu.ctx_push(st->ctx) == CUDA_SUCCESS) {
        if (st->stream) weft_cu.stream_synchronize(st->stream);
        /* the last call on a stream of the caller's may still run: the region and the mappings stay until
         * it ends (10 s at most, then the abort word stops its waits, 2 s more) */
        if (st->tail && event_wait(st->tail, 10.0) == CUDA_ERROR_NOT_READY && st->words) {
            st->words[0] = 1;
            event_wait(st->tail, 2.0);
        }
        for (int r = 0; r < st->n; r++)
            if (st->peer[r] && r != st->me) weft_cu.ipc_close_mem_handle(st->peer[r]);
        for (int i = 0; i < MAX_WINDOWS; i++)
            if (st->win[i].st) window_unmap(&st->win[i], st->n);
        if (st->region) weft_cu.mem_free(st->region);
        if (st->counter) weft_cu.mem_free(st->counter);
        if (st->words) weft_cu.mem_free_host(st->words);
        if (st->stream) weft_cu.stream_destroy(st->stream);
        while (st->nev > 0) weft_cu.event_destroy(st->evpool[--st->nev]);
        CUcontext popped;
        weft_cu.ctx_pop(&popped);
    }
    free(st);
}

static int broken_error(const cuda_state_t *st)
{
    return weft_error(st->broken,
                      "coll/cuda: comm %s: %s; every later GPU collective on this communicator fails at once (free "
                      "it and split a new one)",
                      st->comm->name, st->why);
}

/* The current context's GPU as its PCI domain, bus and device (-1: unknown). */
static int32_t gpu_pci(void)
{
    CUdevice dev = 0;
    int dom = 0, bus = 0, slot = 0;
    if (!weft_cu.device_get_attribute || weft_cu.ctx_get_device(&dev) != CUDA_SUCCESS ||
        weft_cu.device_get_attribute(&dom, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev) != CUDA_SUCCESS ||
        weft_cu.device_get_attribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev) != CUDA_SUCCESS ||
        weft_cu.device_get_attribute(&slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev) != CUDA_SUCCESS)
        return -1;
    return (int32_t)((dom & 0x7fff) << 16 | (bus & 0xff) << 8 | (slot & 0xff));
}

/* WEFT_CUDA_COLL_SLOT auto: 8 MiB where ranks share a GPU (the size the thresholds were measured with
 * there), 32 MiB where every rank has its own (four H100s, NV18, PERFORMANCE.md section 10: from 16 MiB,
 * 32 MiB slots against 8 MiB gave allreduce 1.26x the bus bandwidth, reduce_scatter 1.3-1.5x, alltoall
 * 1.1-1.35x, allgather 0.86-1.0x, bcast about 1.0x). WEFT_CUDA_COLL_PIPE auto: 32 MiB on own GPUs (two
 * H100s, section 10), never on a shared one. */
#define SLOT_SHARED   ((size_t)8 << 20)
#define SLOT_OWN_GPUS ((size_t)32 << 20)
#define PIPE_OWN_GPUS ((size_t)32 << 20)

/* This rank's half of the setup: its region, counter, words, stream. */
static int setup_local(cuda_state_t *st, exch_t *mine)
{
    CUresult r;
    int rc;
    if ((rc = module_of(st->ctx, &st->m))) return rc;
    size_t len = WEFT_CK_HDR + 2 * st->slot;
    if ((r = weft_cu.mem_alloc(&st->region, len)) != CUDA_SUCCESS) return cu_fail(r, "allocating the scratch region");
    if ((r = weft_cu.memset_d8(st->region, 0, WEFT_CK_HDR)) != CUDA_SUCCESS) return cu_fail(r, "clearing the flags");
    if ((r = weft_cu.mem_alloc(&st->counter, sizeof(unsigned long long))) != CUDA_SUCCESS ||
        (r = weft_cu.memset_d8(st->counter, 0, sizeof(unsigned long long))) != CUDA_SUCCESS)
        return cu_fail(r, "allocating the sequence counter");
    /* The flags are clear before any peer can see the region: a late clear
     * would erase a fast peer's first announcement. */
    if ((r = weft_cu.stream_synchronize(NULL)) != CUDA_SUCCESS) return cu_fail(r, "clearing the flags");
    if ((r = weft_cu.mem_host_alloc((void **)&st->words, 2 * sizeof(int),
                                    CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)) != CUDA_SUCCESS)
        return cu_fail(r, "allocating the abort word");
    st->words[0] = st->words[1] = 0;
    if ((r = weft_cu.mem_host_get_device_pointer(&st->dwords, st->words, 0)) != CUDA_SUCCESS)
        return cu_fail(r, "mapping the abort word");
    int least = 0, greatest = 0;
    if (st->comm->gpu_high_priority && weft_cu.stream_create_with_priority && weft_cu.ctx_get_stream_priority_range &&
        weft_cu.ctx_get_stream_priority_range(&least, &greatest) == CUDA_SUCCESS)
        r = weft_cu.stream_create_with_priority(&st->stream, CU_STREAM_DEFAULT, greatest);
    else
        r = weft_cu.stream_create(&st->stream, CU_STREAM_DEFAULT);
    if (r != CUDA_SUCCESS) return cu_fail(r, "creating the stream");
    if ((r = weft_cu.ipc_get_mem_handle(&mine->handle, st->region)) != CUDA_SUCCESS)
        return cu_fail(r, "cuIpcGetMemHandle of the scratch region");
    CUdevice dev = 0;
    weft_cu.ctx_get_device(&dev);
    mine->device = (int32_t)dev;
    mine->sms = st->m->sms;
    mine->ll_room = st->m->ll_per_sm * st->m->sms;
    mine->pipe_room = st->m->pipe_per_sm * st->m->sms;
    return WEFT_SUCCESS;
}

/* The GPUs this process sees (device ordinals that answer), at least 1. */
static int32_t gpus_visible(void)
{
    int32_t n = 0;
    int v = 0;
    while (n < 64 && weft_cu.device_get_attribute &&
           weft_cu.device_get_attribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, (CUdevice)n) == CUDA_SUCCESS)
        n++;
    return n > 0 ? n : 1;
}

/* Processes that may run kernels on one GPU of the communicator's at once: the most ranks of it on one GPU;
 * where the machine has ranks outside it (simulated nodes, a split), they may share its GPUs too: as many as
 * the machine's ranks spread over the fewest GPUs a rank sees, at most all of them. The same on every rank. */
static int gpu_sharers(const cuda_state_t *st, const int32_t *pci, int32_t gpus)
{
    int most = 1;
    for (int p = 0; p < st->n; p++) {
        int same = 0;
        for (int q = 0; q < st->n; q++)
            same += pci[p] >= 0 && pci[q] == pci[p];
        if (same > most) most = same;
    }
    int machine = weft_g.machine_ranks > st->n ? weft_g.machine_ranks : st->n, outside = machine - st->n;
    if (outside > 0) {
        int spread = (machine + gpus - 1) / (gpus > 0 ? gpus : 1);
        if (spread > most + outside) spread = most + outside;
        if (spread > most) most = spread;
    }
    return most;
}

/* The most blocks of a spinning kernel of `room` blocks a GPU (the least over the ranks) and `sms` SMs: every
 * one of per_gpu processes' at once. */
static unsigned spin_most(int room, int sms, int per_gpu)
{
    int b = room / (per_gpu > 0 ? per_gpu : 1);
    if (b > sms) b = sms;
    return b < 1 ? 1u : (unsigned)b;
}

/* The setup, collective over comm (a host allgather of every rank's
 * record): every rank fails alike when one could not set up. */
static int setup(cuda_state_t *st)
{
    exch_t mine, all[WEFT_CK_MAX_RANKS];
    memset(&mine, 0, sizeof(mine));
    memset(all, 0, sizeof(all));
    CUresult r = weft_cu.ctx_push(st->ctx);
    if (r != CUDA_SUCCESS) return cu_fail(r, "making the buffers' context current");
    /* Which ranks share a GPU, first: it sets the slots' default size (the
     * same on every rank: the same records); and the GPUs each rank sees. */
    int32_t pg[2 * WEFT_CK_MAX_RANKS], pci[WEFT_CK_MAX_RANKS], gpus = 0;
    mine.pci = gpu_pci();
    int32_t mine_pg[2] = {mine.pci, gpus_visible()};
    int rc = weft_allgather(mine_pg, pg, (int64_t)sizeof(mine_pg), WEFT_BYTE, st->comm);
    if (rc) {
        CUcontext popped;
        weft_cu.ctx_pop(&popped);
        st->broken = rc;
        snprintf(st->why, sizeof(st->why), "its GPU setup failed (%s)", weft_last_error());
        return rc;
    }
    for (int p = 0; p < st->n; p++) {
        pci[p] = pg[2 * p];
        if (!gpus || pg[2 * p + 1] < gpus) gpus = pg[2 * p + 1];
    }
    for (int p = 0; p < st->n; p++)
        for (int q = p + 1; q < st->n; q++)
            if (pci[p] >= 0 && pci[p] == pci[q]) st->shared = 1;
    st->per_gpu = gpu_sharers(st, pci, gpus);
    /* a multiple of 16: the second slot, and every part in it, stays aligned for vector and word access */
    st->slot = cvars.slot < 0 ? (st->shared ? SLOT_SHARED : SLOT_OWN_GPUS)
                              : (size_t)(cvars.slot < 4096 ? 4096 : cvars.slot) / 16 * 16;
    st->pipe = cvars.pipe < 0 ? (st->shared ? 0 : PIPE_OWN_GPUS) : (size_t)cvars.pipe;
    rc = setup_local(st, &mine);
    char local_why[200] = "";
    if (rc) snprintf(local_why, sizeof(local_why), "%s", weft_last_error());
    mine.status = rc;
    int arc = weft_allgather(&mine, all, (int64_t)sizeof(mine), WEFT_BYTE, st->comm);
    if (arc) rc = arc;
    for (int p = 0; !rc && p < st->n; p++) {
        if (all[p].status) {
            rc = weft_error(WEFT_ERR_UNSUPPORTED, "coll/cuda: comm %s: rank %d could not set up its GPU scratch (%s)",
                            st->comm->name, p, weft_strerror(all[p].status));
        } else if (p == st->me) {
            st->peer[p] = st->region;
        } else if ((r = weft_cu.ipc_open_mem_handle(&st->peer[p], all[p].handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) !=
                   CUDA_SUCCESS) {
            rc = weft_error(WEFT_ERR_UNSUPPORTED,
                            "coll/cuda: comm %s: mapping rank %d's scratch (device %d) through CUDA IPC failed: %s",
                            st->comm->name, p, (int)all[p].device, weft_cu_text(r));
        }
    }
    if (rc && local_why[0]) weft_warn("coll/cuda: %s", local_why);
    if (!rc) { /* the spinning kernels' grids, from every rank's GPU: the same everywhere */
        int sms = all[0].sms, ll_room = all[0].ll_room, pipe_room = all[0].pipe_room;
        for (int p = 1; p < st->n; p++) {
            if (all[p].sms < sms) sms = all[p].sms;
            if (all[p].ll_room < ll_room) ll_room = all[p].ll_room;
            if (all[p].pipe_room < pipe_room) pipe_room = all[p].pipe_room;
        }
        st->ll_most = spin_most(ll_room, sms, st->per_gpu);
        st->pipe_most = spin_most(pipe_room, sms, st->per_gpu);
    }
    CUcontext popped;
    weft_cu.ctx_pop(&popped);
    if (rc) {
        st->broken = rc;
        snprintf(st->why, sizeof(st->why), "its GPU setup failed (%s)", weft_last_error());
        return rc;
    }
    st->ready = 1;
    weft_debug("coll/cuda: comm %s: %d ranks mapped, slots of %zu bytes%s; up to %d processes a GPU: LL kernels of "
               "%u blocks at most, pipelined ones %u",
               st->comm->name, st->n, st->slot, st->shared ? "; ranks share a GPU" : "", st->per_gpu, st->ll_most,
               st->pipe_most);
    return WEFT_SUCCESS;
}

static int get_state(weft_comm_t comm, CUcontext ctx, cuda_state_t **out)
{
    cuda_state_t *st = weft_coll_state(comm, WEFT_COLL_COMP_CUDA);
    if (!st) {
        if (!(st = calloc(1, sizeof(*st)))) return weft_error(WEFT_ERR_NO_MEMORY, "coll/cuda: out of memory");
        st->comm = comm;
        st->n = comm->size;
        st->me = comm->rank;
        st->ctx = ctx;
        if (weft_coll_state_set(comm, WEFT_COLL_COMP_CUDA, st)) {
            free(st);
            return weft_error(WEFT_ERR_NO_MEMORY, "coll/cuda: out of memory");
        }
    }
    if (st->broken) return broken_error(st);
    if (st->ctx != ctx)
        return weft_error(WEFT_ERR_ARG,
                          "coll/cuda: comm %s: the buffers belong to another CUDA context than its first GPU "
                          "collective's (one device per rank and communicator)",
                          comm->name);
    if (!st->ready) {
        int rc = setup(st);
        if (rc) return rc;
    }
    *out = st;
    return WEFT_SUCCESS;
}

/* ---- one call ------------------------------------------------------------------------ */

typedef struct cuda_op {
    cuda_state_t *st;
    weft_coll_args_t a;
    CUstream stream; /* the caller's (weft_*_on_stream) or the communicator's */
    int capturing;   /* the stream is being captured into a CUDA graph: no event, nothing to poll */
    CUevent ev;
    unsigned long long num; /* its place in the communicator's eager calls (cuda_state.issued) */
    int started; /* the launches were issued (the event marks their end) */
    const char *name;
    int fusing; /* one chunk, small: the steps fill fz, issue launches it once */
    weft_ck_fused_args_t fz;
    weft_ck_stage_args_t stg; /* not fused: the stages before the next barrier, launched with it */
    size_t stg_most;          /* the largest of them (the launch's grid) */
    const cuda_window_t *win; /* the call's input lies in this window: read in place */
} cuda_op_t;

/* Every kernel launch: on the call's stream, gx x gy blocks of `threads`, one argument block; a kernel of one block
 * (a small call's, where the gap between kernels is a good part of the time) with programmatic dependent launch
 * where the module has it (every kernel starts with stream_order(): kernels/common.cuh). */
static CUresult launch_on(cuda_op_t *op, CUfunction f, unsigned gx, unsigned gy, unsigned threads, void *args)
{
    void *params[] = {args};
#if CUDA_VERSION >= 12000
    if (cvars.pdl && op->st->m->pdl && gx * gy == 1) {
        CUlaunchAttribute at;
        memset(&at, 0, sizeof(at));
        at.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        at.value.programmaticStreamSerializationAllowed = 1;
        CUlaunchConfig c;
        memset(&c, 0, sizeof(c));
        c.gridDimX = gx, c.gridDimY = gy, c.gridDimZ = 1;
        c.blockDimX = threads, c.blockDimY = 1, c.blockDimZ = 1;
        c.hStream = op->stream, c.attrs = &at, c.numAttrs = 1;
        return weft_cu.launch_kernel_ex(&c, f, params, NULL);
    }
#endif
    return weft_cu.launch_kernel(f, gx, gy, 1, threads, 1, 1, 0, op->stream, params, NULL);
}

/* launch_on, 256 threads a block; a failure names `what`. */
static int launch(cuda_op_t *op, CUfunction f, unsigned gx, unsigned gy, void *args, const char *what)
{
    CUresult r = launch_on(op, f, gx, gy, 256, args);
    return r == CUDA_SUCCESS ? WEFT_SUCCESS : cu_fail(r, what);
}

/* b blocks within the communicator's max_ctas / min_ctas hints. */
static size_t within_cta_hints(const weft_comm_t c, size_t b)
{
    if (c->gpu_max_ctas > 0 && b > (size_t)c->gpu_max_ctas) b = (size_t)c->gpu_max_ctas;
    if (c->gpu_min_ctas > 0 && b < (size_t)c->gpu_min_ctas) b = (size_t)c->gpu_min_ctas;
    return b;
}

/* Blocks for a grid-stride kernel over `bytes` (16 bytes a thread a turn),
 * within the communicator's max_ctas / min_ctas hints. */
static unsigned grid_for(const cuda_op_t *op, size_t bytes)
{
    size_t b = (bytes + 256 * 16 - 1) / (256 * 16), most = (size_t)op->st->m->sms * 4;
    b = within_cta_hints(op->st->comm, b > most ? most : b);
    return (unsigned)(b < 1 ? 1 : b);
}

static weft_ck_ctl_t ctl_of(const cuda_state_t *st)
{
    weft_ck_ctl_t c = {(unsigned long long *)(uintptr_t)st->counter, (volatile int *)(uintptr_t)st->dwords,
                       (volatile int *)(uintptr_t)(st->dwords + sizeof(int))};
    return c;
}

/* The stages gathered since the last barrier, in one launch (one y-block row each). */
static int stage_flush(cuda_op_t *op)
{
    cuda_state_t *st = op->st;
    if (!op->stg.n) return WEFT_SUCCESS;
    op->stg.ctl = ctl_of(st);
    op->stg.scratch = (char *)(uintptr_t)st->region;
    op->stg.slot_bytes = st->slot;
    int rc = launch(op, st->m->stage, grid_for(op, op->stg_most), (unsigned)op->stg.n, &op->stg,
                    "launching the stage kernel");
    op->stg.n = 0;
    op->stg_most = 0;
    return rc;
}

/* A piece of this rank's contribution into its next slot: gathered, launched before the next barrier (fused:
 * into the fused launch). */
static int stage(cuda_op_t *op, const char *in, size_t off, size_t bytes)
{
    if (!bytes) return WEFT_SUCCESS;
    weft_ck_stage_piece_t *p;
    if (op->fusing) {
        p = &op->fz.stage[op->fz.nstage++];
    } else {
        int rc = op->stg.n == WEFT_CK_MAX_RANKS ? stage_flush(op) : WEFT_SUCCESS;
        if (rc) return rc;
        p = &op->stg.piece[op->stg.n++];
        if (bytes > op->stg_most) op->stg_most = bytes;
    }
    p->in = in, p->off = off, p->bytes = bytes;
    return WEFT_SUCCESS;
}

/* A barrier kernel announcing desc (WEFT_CK_DESC: 0, the input in the slot;
 * else its place in window win) and, with check, comparing the peers'. */
static int barrier_as(cuda_op_t *op, unsigned long long desc, int check, size_t need, const cuda_window_t *win)
{
    cuda_state_t *st = op->st;
    weft_ck_barrier_args_t b;
    memset(&b, 0, sizeof(b));
    b.ctl = ctl_of(st);
    b.nranks = st->n;
    b.rank = st->me;
    b.my_flags = (unsigned long long *)(uintptr_t)st->region;
    for (int p = 0; p < st->n; p++)
        b.peer_flags[p] = (unsigned long long *)(uintptr_t)st->peer[p];
    b.desc = desc;
    b.check = check;
    b.need = need;
    for (int p = 0; win && p < st->n; p++)
        b.winlen[p] = win->len[p];
    if (op->fusing) {
        op->fz.bar = b;
        return WEFT_SUCCESS;
    }
    int rc = stage_flush(op);
    if (rc) return rc;
    CUresult r = launch_on(op, st->m->barrier, 1, 1, 32, &b);
    return r == CUDA_SUCCESS ? WEFT_SUCCESS : cu_fail(r, "launching the barrier kernel");
}

/* The barrier of a call whose input is in the scratch slot (or that has none). */
static int barrier(cuda_op_t *op)
{
    return barrier_as(op, 0, 1, 0, NULL);
}

/* A reduce or copy of a call in a window reads the peers' inputs there. */
static void set_reg(const cuda_op_t *op, int *reg, const char **mine, const char **win)
{
    *reg = op->win != NULL;
    *mine = (const char *)(uintptr_t)op->st->region;
    for (int p = 0; op->win && p < op->st->n; p++)
        win[p] = (const char *)(uintptr_t)op->win->base[p];
}

/* A reduce into out, or (out_slot) into this rank's other slot at offset (size_t)out. */
static int reduce_as(cuda_op_t *op, size_t src_off, void *out, size_t count, int out_slot)
{
    cuda_state_t *st = op->st;
    weft_ck_reduce_args_t a;
    memset(&a, 0, sizeof(a));
    a.ctl = ctl_of(st);
    for (int p = 0; p < st->n; p++)
        a.scratch[p] = (const char *)(uintptr_t)st->peer[p];
    a.slot_bytes = st->slot;
    a.src_off = src_off;
    a.nsrc = st->n;
    a.op = (int)op->a.op;
    a.out = out;
    a.count = count;
    a.out_slot = out_slot;
    set_reg(op, &a.reg, &a.mine, a.win);
    if (!count) return WEFT_SUCCESS;
    if (op->fusing) {
        op->fz.red = a;
        op->fz.mode = 1;
        return WEFT_SUCCESS;
    }
    return launch(op, st->m->reduce[op->a.dtype][a.op], grid_for(op, count * op->a.esize), 1, &a,
                  "launching the reduce kernel");
}

static int reduce(cuda_op_t *op, size_t src_off, void *out, size_t count)
{
    return reduce_as(op, src_off, out, count, 0);
}

/* Copies: descriptor i takes len[i] bytes at src_off[i] of rank src[i]'s slot (or window) to dst[i]. */
static int copy_parts(cuda_op_t *op, int n, const int *src, const size_t *src_off, char *const *dst,
                      const size_t *len)
{
    cuda_state_t *st = op->st;
    weft_ck_copy_args_t c;
    memset(&c, 0, sizeof(c));
    c.ctl = ctl_of(st);
    for (int p = 0; p < st->n; p++)
        c.scratch[p] = (const char *)(uintptr_t)st->peer[p];
    c.slot_bytes = st->slot;
    c.n = n;
    size_t most = 0;
    for (int i = 0; i < n; i++) {
        c.d[i].src = src[i];
        c.d[i].src_off = src_off[i];
        c.d[i].len = len[i];
        c.d[i].dst = dst[i];
        if (len[i] > most) most = len[i];
    }
    set_reg(op, &c.reg, &c.mine, c.win);
    if (!most || !n) return WEFT_SUCCESS;
    if (op->fusing) {
        op->fz.cp = c;
        op->fz.mode = 2;
        return WEFT_SUCCESS;
    }
    return launch(op, st->m->copy, grid_for(op, most), (unsigned)n, &c, "launching the copy kernel");
}

/* Copies of len bytes each, at src_off_base (+ src_off_step[i]) of rank src[i]'s slot (or window). */
static int copy_out(cuda_op_t *op, int n, const int *src, size_t src_off_base, const size_t *src_off_step,
                    char *const *dst, size_t len)
{
    size_t off[WEFT_CK_MAX_RANKS], lens[WEFT_CK_MAX_RANKS];
    for (int i = 0; i < n; i++)
        off[i] = src_off_base + (src_off_step ? src_off_step[i] : 0), lens[i] = len;
    return copy_parts(op, n, src, off, dst, lens);
}

/* The bytes staged per rank from which a pipelined call on n ranks pushes (SIZE_MAX: never):
 * WEFT_CUDA_COLL_PUSH as set; auto, as measured on four H100s (NV18, 32 MiB slots, bf16, PERFORMANCE.md
 * section 10: bus bandwidth pushed / read): allreduce from 128 MiB (1.08-1.26x from 128 MiB; 0.82-0.95x at
 * 32-64 MiB, where the chunked two shots it replaces are faster; on 2 ranks, with split blocks, from 32 MiB:
 * two H200s, 1.07x at 64 MiB, 1.01x at 32 MiB), reduce_scatter from 256 MiB (1.07-1.17x;
 * 0.78-0.99x at 32-128 MiB) but on 2 ranks from 32 MiB (two H200s: 1.17-1.24x at 32-128 MiB, 0.99-1.00x
 * from 256 MiB), allgather and alltoall always (1.0-1.3x; 1.04-1.13x), bcast always (3+ ranks: scattered by
 * the root and passed on, 1.3-2.0x the two steps it replaces from 64 MiB), reduce always (not measured: the
 * same bytes cross NVLink either way). Ranks sharing a GPU take the same values (not measured there). */
static size_t push_min(weft_coll_kind_t kind, int n)
{
    if (cvars.push >= 0) return cvars.push ? (size_t)cvars.push : SIZE_MAX;
    switch (kind) {
    case WEFT_COLL_ALLREDUCE: return (size_t)(n == 2 ? 32 : 128) << 20;
    case WEFT_COLL_REDUCE_SCATTER_BLOCK: return (size_t)(n == 2 ? 32 : 256) << 20;
    default: return 0;
    }
}

/* The bytes staged per rank from which a pipelined call on n ranks runs as a ring (kernels.h: modes 5-8;
 * SIZE_MAX: never): 3 or more ranks, allgather, bcast, reduce_scatter and allreduce; WEFT_CUDA_COLL_RING as
 * set; auto: always. */
static size_t ring_min(weft_coll_kind_t kind, int n)
{
    if (n < 3 || (kind != WEFT_COLL_ALLGATHER && kind != WEFT_COLL_BCAST && kind != WEFT_COLL_ALLREDUCE &&
                  kind != WEFT_COLL_REDUCE_SCATTER_BLOCK))
        return SIZE_MAX;
    if (cvars.ring >= 0) return cvars.ring ? (size_t)cvars.ring : SIZE_MAX;
    return 0;
}

/* The bytes staged per rank from which a call is pipelined: WEFT_CUDA_COLL_PIPE resolved (st->pipe); auto,
 * where it pipelines at all, an allgather that runs as a ring from 8 MiB (four H200s, bf16, 32 MiB in all:
 * 0.98x NCCL's time against 1.37x chunked; 16 MiB: 1.14x either way). */
#define PIPE_RING_ALLGATHER ((size_t)8 << 20)
static size_t pipe_from(const cuda_state_t *st, weft_coll_kind_t kind, int n)
{
    if (cvars.pipe >= 0 || !st->pipe) return st->pipe;
    if (kind == WEFT_COLL_ALLGATHER && PIPE_RING_ALLGATHER < st->pipe && PIPE_RING_ALLGATHER >= ring_min(kind, n))
        return PIPE_RING_ALLGATHER;
    return st->pipe;
}

/* The warps of each block of a pipelined call that push while the block's
 * others consume (weft_ck_pipe_args.split; 0: each warp does both in turn),
 * of a block of `warps`: only where this rank both pushes to a peer and
 * consumes from one (not a bcast's root or a reduce's other ranks, not mode
 * 4, whose other ranks push while they consume); WEFT_CUDA_COLL_PIPE_SPLIT
 * as set; auto, as measured on two H200s (NV18, 32 MiB slots, bf16,
 * 128 blocks of 8 warps, PERFORMANCE.md section 10: bus bandwidth split /
 * unsplit at 64 MiB - 1 GiB; 3 of 8 warps against 2, 4, 5 and 6): only
 * where each of the g blocks has two units or more (at one a block, 32 MiB
 * alltoall and reduce_scatter, the split lost: 0.89-0.97x), 3 of 8 for
 * allgather and alltoall (1.03-1.15x, 1.09-1.22x) and reduce_scatter
 * (1.06-1.16x), 6 of 8 for allreduce (whose consuming warps also push the
 * reduced parts: 1.07-1.11x, where 3 gave 1.03-1.05x). On four H200s (one
 * lease, 16 MiB - 1 GiB, unsplit / split): allgather 1.05-1.12x from 256
 * MiB and 0.99-1.01x below, so an allgather splits on 2 ranks only; the
 * others 0.91-1.01x (reduce_scatter 0.91x from 256 MiB): split there too.
 * In place too: a block's consuming warps start a unit only after its
 * pushing warps pushed it (kernels.h), so an output they write is never
 * input still to be read. */
static int pipe_split(const weft_ck_pipe_args_t *p, weft_coll_kind_t kind, int warps, unsigned g)
{
    if (!p->push || p->mode == 4 || !p->stage_on || !p->consume_on || !p->cons_mask || !p->read_mask) return 0;
    int w = cvars.pipe_split;
    if (w < 0) {
        if (p->units < 2 * (size_t)g) return 0;
        w = kind == WEFT_COLL_ALLREDUCE ? (warps * 6 + 4) / 8
            : (kind == WEFT_COLL_ALLGATHER && p->nranks == 2) || kind == WEFT_COLL_ALLTOALL ||
                    kind == WEFT_COLL_REDUCE_SCATTER_BLOCK
                ? (warps * 3 + 4) / 8
                : 0;
    }
    return w > 0 && w < warps ? w : 0;
}

/* The kernel of a pipelined call: one per mode, staged or pushed (kernels.h: weft_ck_pipe_args), and a reduce's
 * for its type and op. */
static CUfunction pipe_kernel(const module_t *m, const weft_ck_pipe_args_t *p, weft_dtype_t dt)
{
    switch (p->mode) {
    case 1: return p->push ? m->push_reduce[dt][p->op] : m->pipe_reduce[dt][p->op];
    case 2: return p->push ? m->push_copy : m->pipe_copy;
    case 3: return p->push ? m->push_allreduce[dt][p->op] : m->pipe_reduce[dt][p->op];
    case 4: return p->push ? m->push_bcast : m->pipe_copy;
    case 5: return m->ring_allgather;
    case 6: return m->ring_bcast;
    case 7: return m->ring_reduce_scatter[dt][p->op];
    default: return m->ring_allreduce[dt][p->op]; /* 8 */
    }
}

/* The pipelined form of a large call (kernels.h: weft_ck_pipe_args): a
 * barrier (the slots are free, the counter moves), then one launch of
 * `blocks` blocks, each with `depth` positions of the two slots. *piped
 * stays 0 when the slots are too small for the geometry (the caller
 * chunks instead). */
static int pipe_issue(cuda_op_t *op, size_t staged, int *piped)
{
    const weft_coll_args_t *a = &op->a;
    cuda_state_t *st = op->st;
    const weft_comm_t c = st->comm;
    int n = st->n, me = st->me;
    size_t es = a->esize ? a->esize : 1, block = a->count * es;
    weft_ck_pipe_args_t p;
    memset(&p, 0, sizeof(p));
    p.ctl = ctl_of(st);
    p.nranks = n;
    p.rank = me;
    for (int r = 0; r < n; r++)
        p.scratch[r] = (char *)(uintptr_t)st->peer[r];
    unsigned all = ((1u << n) - 1) & ~(1u << me);
    p.in = a->sendbuf == WEFT_IN_PLACE ? (const char *)a->recvbuf : (const char *)a->sendbuf;
    p.out = a->recvbuf;
    p.stage_on = p.consume_on = 1;
    p.read_mask = p.cons_mask = all;
    p.npieces = 1;
    p.esize = es;
    p.count = a->count;
    p.op = (int)a->op;
    p.push = staged >= push_min(a->kind, n);
    switch (a->kind) {
    case WEFT_COLL_ALLREDUCE:
        p.mode = 1;
        if (p.push && n > 1) { /* two phases over the vector's n parts, each a whole number of 16-byte words */
            size_t align = es < 16 ? 16 / es : 1;
            p.mode = 3;
            p.npieces = n;
            p.total = a->count;
            p.count = ((a->count + (size_t)n - 1) / (size_t)n + align - 1) / align * align;
            p.in_stride = p.count * es;
            p.red_piece = me;
        }
        break;
    case WEFT_COLL_REDUCE:
        p.mode = 1;
        p.consume_on = me == a->root;
        p.read_mask = me == a->root ? all : 0;
        p.cons_mask = me == a->root ? 0 : 1u << a->root;
        break;
    case WEFT_COLL_REDUCE_SCATTER_BLOCK:
        p.mode = 1;
        p.npieces = n;
        p.in_stride = block;
        p.red_piece = me;
        break;
    case WEFT_COLL_ALLGATHER:
    case WEFT_COLL_ALLTOALL:
    case WEFT_COLL_BCAST:
        p.mode = 2;
        p.esize = 1;
        p.count = block;
        p.copy_self = a->kind != WEFT_COLL_BCAST;
        if (a->kind == WEFT_COLL_ALLTOALL) {
            p.npieces = n;
            p.in_stride = block;
            p.copy_piece = me;
        }
        for (int r = 0; r < n; r++)
            p.dst[r] = a->kind == WEFT_COLL_ALLGATHER ? weft_coll_rblock(a, r) : (char *)a->recvbuf + (size_t)r * block;
        if (a->kind == WEFT_COLL_BCAST) {
            p.in = a->recvbuf;
            p.dst[a->root] = a->recvbuf;
            p.stage_on = me == a->root;
            p.consume_on = me != a->root;
            p.read_mask = me == a->root ? 0 : 1u << a->root;
            p.cons_mask = me == a->root ? all : 0;
        }
        break;
    default: return WEFT_SUCCESS; /* not pipelined: the caller chunks */
    }
    if (p.push && a->kind == WEFT_COLL_BCAST && n >= 3) { /* scattered by the root, passed on by the others */
        p.mode = 4;
        p.root = a->root;
        p.npieces = n - 1;
        p.total = block;
        p.count = ((block + (size_t)n - 2) / (size_t)(n - 1) + 15) / 16 * 16;
        p.in_stride = p.count;
        p.out = a->recvbuf;
    }
    if (staged >= ring_min(a->kind, n)) { /* every store to the next rank (kernels.h: modes 5-8) */
        p.push = 0;
        p.npieces = 1;
        switch (a->kind) {
        case WEFT_COLL_ALLGATHER: p.mode = 5, p.copy_self = p.in != p.dst[me]; break;
        case WEFT_COLL_BCAST: /* (not mode 4's parts) */
            p.mode = 6, p.root = a->root, p.in = p.out = a->recvbuf, p.count = block, p.total = 0, p.in_stride = 0;
            break;
        case WEFT_COLL_REDUCE_SCATTER_BLOCK: p.mode = 7; break;
        default: { /* allreduce: the vector's n parts, as mode 3 */
            size_t align = es < 16 ? 16 / es : 1;
            p.mode = 8;
            p.total = a->count;
            p.count = ((a->count + (size_t)n - 1) / (size_t)n + align - 1) / align * align;
            p.in_stride = p.count * es;
        }
        }
    }
    int ring = p.mode >= 5;
    CUfunction f = pipe_kernel(st->m, &p, a->dtype);
    /* places in a position: pushed, one per producer (two for an allreduce's two phases, the root's and the
     * n - 1 parts for a bcast's); else the pieces */
    p.pos_pieces = ring || !p.push ? p.npieces
                   : p.mode == 3       ? 2 * n
                   : p.mode == 4       ? n
                   : a->kind == WEFT_COLL_BCAST ? 1
                                                : n;
    /* geometry: blocks within the hints and the SMs; positions of whole 16-byte words per piece */
    unsigned g = (unsigned)within_cta_hints(c, cvars.pipe_blocks > 0 ? (size_t)cvars.pipe_blocks : 1);
    if (g > st->pipe_most) g = st->pipe_most; /* the SMs; on a shared GPU, every sharer's grid at once */
    if (g > WEFT_CK_PIPE_MAXPOS) g = WEFT_CK_PIPE_MAXPOS;
    if (g < 1) g = 1;
    int depth_as = cvars.pipe_depth >= 0                      ? cvars.pipe_depth
                   : ring || (a->kind == WEFT_COLL_BCAST && n == 2) ? 4
                                                                  : 2;
    unsigned want = depth_as > 1 ? (unsigned)depth_as : 1;
    /* a ring's K units at a time need 2K positions (kernels.h) */
    int ahead = cvars.pipe_ahead >= 0 ? cvars.pipe_ahead : a->kind == WEFT_COLL_ALLREDUCE ? 1 : 0;
    if (ring && p.mode != 6) {
        if (want < 2 * (unsigned)(ahead > 1 ? ahead : 1)) want = 2 * (unsigned)(ahead > 1 ? ahead : 1);
        if (want > WEFT_CK_PIPE_MAXPOS) want = WEFT_CK_PIPE_MAXPOS;
        if (g > WEFT_CK_PIPE_MAXPOS / want) g = WEFT_CK_PIPE_MAXPOS / want;
    }
    unsigned depth = WEFT_CK_PIPE_MAXPOS / g < want ? WEFT_CK_PIPE_MAXPOS / g : want;
    size_t posbytes = 2 * st->slot / ((size_t)g * depth);
    size_t piece = posbytes / (size_t)p.pos_pieces / 16 * 16;
    p.unit_elems = piece / p.esize;
    if (!p.unit_elems || !p.count) return WEFT_SUCCESS;
    p.units = (p.count + p.unit_elems - 1) / p.unit_elems;
    /* a flag value holds a unit's number (a ring's item's) in 24 bits */
    if (p.units * (ring ? 2 * (size_t)n : 1) >= (size_t)1 << 24) return WEFT_SUCCESS;
    if (p.units < g) g = (unsigned)p.units;
    p.depth = (int)depth;
    if (ring) /* units a block runs at a time */
        p.ahead = ahead < 1 ? 1 : ahead > (int)depth / 2 ? ((int)depth / 2 > 0 ? (int)depth / 2 : 1) : ahead;
    else
        p.ahead = ahead < (int)depth ? ahead : (int)depth - 1;
    p.split = pipe_split(&p, a->kind, st->m->pipe_threads / 32, g);
    int rc = barrier(op);
    if (rc) return rc;
    *piped = 1;
    CUresult r = launch_on(op, f, g, 1, (unsigned)st->m->pipe_threads, &p);
    if (r == CUDA_SUCCESS) return WEFT_SUCCESS;
    int regs = -1;
    if (weft_cu.func_get_attribute) weft_cu.func_get_attribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f);
    return weft_error(WEFT_ERR_TRANSPORT,
                      "coll/cuda: launching the pipelined kernel (%u blocks of %d threads, %d registers a thread) "
                      "failed: %s",
                      g, st->m->pipe_threads, regs, weft_cu_text(r));
}

/* The input the peers read of a call that may run in a window, and how
 * many bytes of it (*need); NULL when the call never does (in place where
 * a rank writes what its peers read). */
static const char *window_input(const weft_coll_args_t *a, int n, size_t *need)
{
    size_t es = a->esize ? a->esize : 1, block = a->count * es;
    const char *in = a->sendbuf == WEFT_IN_PLACE ? NULL : (const char *)a->sendbuf;
    int apart = in && in != (const char *)a->recvbuf;
    switch (a->kind) {
    case WEFT_COLL_ALLREDUCE: *need = block; return apart ? in : NULL;
    case WEFT_COLL_REDUCE: *need = block; return in ? in : (const char *)a->recvbuf; /* only the root reads */
    case WEFT_COLL_REDUCE_SCATTER_BLOCK: *need = (size_t)n * block; return apart ? in : NULL;
    case WEFT_COLL_ALLTOALL: *need = (size_t)n * block; return apart ? in : NULL;
    case WEFT_COLL_ALLGATHER: *need = block; return in; /* in place: its own block, which nobody writes */
    case WEFT_COLL_BCAST: *need = block; return (const char *)a->recvbuf;
    default: return NULL;
    }
}

/* The bytes a call must read per rank to read them out of windows (SIZE_MAX: never): WEFT_CUDA_COLL_WINDOW
 * as set; auto, 8 MiB where ranks share a GPU (measured there: one H100 shared by 2 ranks), and where
 * every rank has a GPU of its own, per collective (four H100s, NV18, windows against staged with 32 MiB slots,
 * PERFORMANCE.md section 10): alltoall from 64 KiB (0.38-0.92x the staged time to 128 MiB, 1.0-1.05x
 * above), reduce_scatter from 64 KiB (0.51-0.80x; 0.7-1.3x at 256 KiB - 2 MiB in an earlier run),
 * allreduce never (one shot out of the windows lost to two shots staged from 32 MiB, 1.17-1.27x). */
static size_t window_min(const cuda_state_t *st, weft_coll_kind_t kind)
{
    const size_t shared = (size_t)8 << 20;
    if (cvars.window >= 0) return cvars.window ? (size_t)cvars.window : SIZE_MAX;
    if (st->shared) return shared;
    switch (kind) {
    case WEFT_COLL_ALLTOALL:
    case WEFT_COLL_REDUCE_SCATTER_BLOCK: return (size_t)64 << 10;
    case WEFT_COLL_ALLREDUCE: return SIZE_MAX;
    default: return shared;
    }
}

/* The window of this rank's that holds [p, p + bytes), and p's offset in it. */
static const cuda_window_t *window_of(const cuda_state_t *st, const char *p, size_t bytes, size_t *off)
{
    for (int i = 0; p && i < MAX_WINDOWS; i++) {
        const cuda_window_t *w = &st->win[i];
        const char *lo = (const char *)(uintptr_t)w->base[st->me];
        if (w->st && p >= lo && bytes <= w->len[st->me] && (size_t)(p - lo) <= w->len[st->me] - bytes) {
            *off = (size_t)(p - lo);
            return w;
        }
    }
    return NULL;
}

/* Part p of a bcast chunk, copied from the root's slot into this rank's
 * other slot (where the peers read it after the next barrier): a
 * one-source reduce of bytes (or 32-bit words), the same bits. */
static int relay(cuda_op_t *op, int root, size_t off, size_t bytes)
{
    cuda_state_t *st = op->st;
    if (!bytes) return WEFT_SUCCESS;
    weft_ck_reduce_args_t r;
    memset(&r, 0, sizeof(r));
    r.ctl = ctl_of(st);
    r.scratch[0] = (const char *)(uintptr_t)st->peer[root];
    r.slot_bytes = st->slot;
    r.src_off = off;
    r.nsrc = 1;
    r.op = (int)WEFT_SUM;
    r.out = (void *)(uintptr_t)off;
    r.out_slot = 1;
    r.mine = (const char *)(uintptr_t)st->region;
    int words = bytes % 4 == 0 && off % 4 == 0;
    r.count = words ? bytes / 4 : bytes;
    return launch(op, st->m->reduce[words ? WEFT_UINT32 : WEFT_UINT8][r.op], grid_for(op, bytes), 1, &r,
                  "launching the relay kernel");
}

/* Two steps per slot chunk (3 or more ranks, staged): allreduce's two
 * shots, each rank staging its input; bcast, the root alone staging. A
 * barrier; each rank reduces its part (a vector-aligned n-th of the chunk)
 * of every rank's chunk (allreduce) or relays its part of the root's
 * (bcast) into its other slot, where nobody reads until the next barrier; a
 * barrier; every rank (but a bcast's root) copies every part out of its
 * owner's slot. An allreduce reads about twice its vector where one shot
 * reads it n times; a bcast's root sends its chunk about twice instead of
 * n - 1 times. */
static int two_step(cuda_op_t *op, const char *in)
{
    const weft_coll_args_t *a = &op->a;
    cuda_state_t *st = op->st;
    int n = st->n, me = st->me, bcast = a->kind == WEFT_COLL_BCAST, rc = WEFT_SUCCESS, src[WEFT_CK_MAX_RANKS];
    size_t es = a->esize ? a->esize : 1, align = es < 16 ? 16 / es : 1, kmax = st->slot / es;
    size_t off[WEFT_CK_MAX_RANKS], len[WEFT_CK_MAX_RANKS];
    char *dst[WEFT_CK_MAX_RANKS], *out = a->recvbuf;
    if (bcast) in = out;
    for (size_t o = 0; !rc && o < a->count; o += kmax) {
        size_t k = a->count - o < kmax ? a->count - o : kmax;
        size_t q = ((k + (size_t)n - 1) / (size_t)n + align - 1) / align * align; /* a part, vector-aligned */
        size_t lo = (size_t)me * q, mine = lo < k ? (k - lo < q ? k - lo : q) : 0;
        /* part p sits at p * q in both slots: within the chunk, so within a slot */
        if (!bcast || me == a->root) rc = stage(op, in + o * es, 0, k * es);
        if (!rc && !(rc = barrier(op)))
            rc = bcast ? relay(op, a->root, lo * es, mine * es)
                       : reduce_as(op, lo * es, (void *)(uintptr_t)(lo * es), mine, 1);
        if (!rc) rc = barrier(op);
        int m = 0;
        for (int p = 0; p < n && !(bcast && me == a->root); p++) {
            size_t plo = (size_t)p * q, plen = plo < k ? (k - plo < q ? k - plo : q) : 0;
            if (plen) src[m] = p, off[m] = plo * es, dst[m] = out + (o + plo) * es, len[m++] = plen * es;
        }
        if (!rc && m) rc = copy_parts(op, m, src, off, dst, len);
    }
    return rc;
}

/* A call whose input lies in a window on every rank: a barrier that
 * announces where (each rank checks the others'), the reduce or copy
 * straight out of the peers' windows, then a barrier (the peers are done
 * reading this rank's input before its stream goes on). No staging, no
 * chunks. */
static int issue_in_window(cuda_op_t *op, const char *in, size_t off, size_t need)
{
    const weft_coll_args_t *a = &op->a;
    cuda_state_t *st = op->st;
    int n = st->n, me = st->me, k = 0, src[WEFT_CK_MAX_RANKS];
    size_t es = a->esize ? a->esize : 1, block = a->count * es, step[WEFT_CK_MAX_RANKS];
    char *out = a->recvbuf, *dst[WEFT_CK_MAX_RANKS];
    int rc = barrier_as(op, WEFT_CK_DESC_REG(off, op->win->index), 1, need, op->win);
    if (rc) return rc;
    switch (a->kind) {
    case WEFT_COLL_ALLREDUCE: rc = reduce(op, 0, out, a->count); break;
    case WEFT_COLL_REDUCE:
        if (me == a->root) rc = reduce(op, 0, out, a->count);
        break;
    case WEFT_COLL_REDUCE_SCATTER_BLOCK: rc = reduce(op, (size_t)me * block, out, a->count); break;
    case WEFT_COLL_BCAST:
        src[0] = a->root, dst[0] = out;
        if (me != a->root) rc = copy_out(op, 1, src, 0, NULL, dst, block);
        break;
    case WEFT_COLL_ALLGATHER:
        for (int p = 0; p < n; p++)
            if (p != me || weft_coll_rblock(a, p) != in) src[k] = p, dst[k++] = weft_coll_rblock(a, p);
        rc = copy_out(op, k, src, 0, NULL, dst, block);
        break;
    case WEFT_COLL_ALLTOALL:
        for (int p = 0; p < n; p++)
            src[p] = p, dst[p] = out + (size_t)p * block, step[p] = 0;
        rc = copy_out(op, n, src, (size_t)me * block, step, dst, block);
        break;
    default: break;
    }
    return rc ? rc : barrier_as(op, 0, 0, 0, NULL);
}

/* The bytes of the piece a rank sends each peer in the LL form (weft_ck_ll_args): the same on every rank; 0: the
 * collective has no LL form. */
static size_t ll_piece(const weft_coll_args_t *a)
{
    size_t es = a->esize ? a->esize : 1;
    switch (a->kind) {
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_REDUCE:
    case WEFT_COLL_REDUCE_SCATTER_BLOCK: return es <= 8 ? a->count * es : 0; /* lines of 8 bytes: whole elements */
    case WEFT_COLL_ALLGATHER:
    case WEFT_COLL_ALLTOALL:
    case WEFT_COLL_BCAST: return a->count * es;
    default: return 0;
    }
}

/* The largest piece an LL call takes on n ranks: WEFT_CUDA_COLL_LL (auto: measured, see its text) within the LL
 * area's share of a sender (weft_ck_ll_max); 0: none. */
static size_t ll_most(int n)
{
    size_t most = cvars.ll >= 0 ? (size_t)cvars.ll : (size_t)(n == 2 ? 1024 : 512) << 10;
    return most < weft_ck_ll_max(n) ? most : weft_ck_ll_max(n);
}

/* The LL form: one launch, no barrier; who sends whom which piece, and what becomes of the pieces a rank takes
 * (kernels.h: weft_ck_ll_args). */
static int ll_issue(cuda_op_t *op, const char *in, char *out)
{
    const weft_coll_args_t *a = &op->a;
    cuda_state_t *st = op->st;
    int n = st->n, me = st->me;
    size_t es = a->esize ? a->esize : 1, block = a->count * es;
    unsigned others = ((1u << n) - 1) & ~(1u << me);
    weft_ck_ll_args_t l;
    memset(&l, 0, sizeof(l));
    l.ctl = ctl_of(st);
    l.nranks = n;
    l.rank = me;
    for (int r = 0; r < n; r++)
        l.scratch[r] = (char *)(uintptr_t)st->peer[r];
    l.op = (int)a->op;
    l.count = block; /* copies: bytes */
    l.esize = 1;
    l.slot = weft_ck_ll_slot(n);
    CUfunction f = st->m->ll_copy;
    switch (a->kind) {
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_REDUCE_SCATTER_BLOCK:
    case WEFT_COLL_REDUCE: {
        int scatter = a->kind == WEFT_COLL_REDUCE_SCATTER_BLOCK, rooted = a->kind == WEFT_COLL_REDUCE;
        f = st->m->ll_reduce[a->dtype][l.op];
        l.count = a->count;
        l.esize = es;
        l.send_mask = rooted ? (me == a->root ? 0 : 1u << a->root) : others;
        l.recv_mask = rooted && me != a->root ? 0 : others;
        for (int p = 0; p < n; p++)
            l.src[p] = in + (scatter ? (size_t)p * block : 0);
        l.dst[0] = rooted && me != a->root ? NULL : out;
        break;
    }
    case WEFT_COLL_ALLGATHER:
    case WEFT_COLL_ALLTOALL: {
        int a2a = a->kind == WEFT_COLL_ALLTOALL;
        l.send_mask = l.recv_mask = others;
        for (int p = 0; p < n; p++) {
            l.src[p] = in + (a2a ? (size_t)p * block : 0);
            l.dst[p] = a2a ? out + (size_t)p * block : weft_coll_rblock(a, p);
        }
        break;
    }
    case WEFT_COLL_BCAST:
        l.send_mask = me == a->root ? others : 0;
        l.recv_mask = me == a->root ? 0 : 1u << a->root;
        for (int p = 0; p < n; p++)
            l.src[p] = out;
        l.dst[a->root] = me == a->root ? NULL : out;
        break;
    default: return weft_error(WEFT_ERR_INTERNAL, "coll/cuda: %s has no LL form", weft_coll_kind_name(a->kind));
    }
    /* a line per thread per peer: a block per 4 KiB of a piece (measured, four H100s: one block's polls of 4
     * lines a peer made 16 KiB pieces slower than staging in a graph); within the hints, then within ll_most:
     * the blocks wait on the peers' blocks, so every rank's must be resident at once (a grid that fills the
     * GPU, resident first, keeps its peers' blocks from ever starting: on a shared GPU the kernels wait out the
     * deadline); a piece of fewer lines, one block of as many warps as it needs */
    size_t lines = (l.count * l.esize + 7) / 8,
           threads = lines >= LL_THREADS ? LL_THREADS : lines <= 32 ? 32 : (lines + 31) / 32 * 32;
    size_t blocks = within_cta_hints(st->comm, (lines + threads - 1) / threads);
    if (blocks > st->ll_most) blocks = st->ll_most;
    CUresult r = launch_on(op, f, blocks ? (unsigned)blocks : 1, 1, (unsigned)threads, &l);
    return r == CUDA_SUCCESS ? WEFT_SUCCESS : cu_fail(r, "launching the LL kernel");
}

/* Issues the whole call on the stream, chunk by chunk (each chunk: stage,
 * barrier, reduce or copy), then records the event. */
static int issue(cuda_op_t *op)
{
    const weft_coll_args_t *a = &op->a;
    cuda_state_t *st = op->st;
    int n = st->n, me = st->me, rc = WEFT_SUCCESS;
    size_t es = a->esize ? a->esize : 1, slot = st->slot;
    const char *in = a->sendbuf == WEFT_IN_PLACE ? (const char *)a->recvbuf : (const char *)a->sendbuf;
    char *out = a->recvbuf;
    int src[WEFT_CK_MAX_RANKS];
    char *dst[WEFT_CK_MAX_RANKS];
    size_t step[WEFT_CK_MAX_RANKS];
    /* Bytes each rank stages: within a slot, the loops below make one chunk. */
    size_t staged = a->kind == WEFT_COLL_BARRIER ? 0
                    : a->kind == WEFT_COLL_REDUCE_SCATTER_BLOCK || a->kind == WEFT_COLL_ALLTOALL
                        ? (size_t)n * a->count * es
                        : a->count * es;
    memset(&op->fz, 0, sizeof(op->fz));
    op->stg.n = 0;
    op->stg_most = 0;
    /* A communicator's calls run on the GPU in call order whatever streams they go on (the flags and the
     * device counter assume it; FSDP puts a group's all-gathers and reduce-scatters on two streams, which
     * would otherwise run them at once): a call on another stream than the previous one's waits for that
     * call's end, unless it has been reaped (done). A captured call is ordered by the graph's stream. */
    if (!op->capturing && st->tail && st->tail_stream != op->stream) {
        CUresult r = weft_cu.stream_wait_event(op->stream, st->tail, 0);
        if (r != CUDA_SUCCESS) return cu_fail(r, "ordering the call after the communicator's previous one");
    }
    /* Fused: one launch of one block, cheaper to launch, slower to move bytes; a graph replay pays no
     * launch cost, so captured calls fuse only up to 4 KiB (measured, 2 H100: non-fused 7.9 us at 32 KiB
     * in a graph, fused 11.4 us at 16 KiB; launched eagerly, fused 12.4 us at 16 KiB, non-fused 20). */
    size_t fuse_max = (size_t)(cvars.fused > 0 ? cvars.fused : 0);
    if (op->capturing && fuse_max > 4096) fuse_max = 4096;
    op->fusing = staged > 0 ? staged <= fuse_max && staged <= slot : cvars.fused > 0;
    if (op->fusing) {
        op->fz.scratch = (char *)(uintptr_t)st->region;
        op->fz.slot_bytes = slot;
    }
    size_t piece = ll_piece(a);
    int ll = piece > 0 && piece <= ll_most(n);
    /* In a window (every rank alike, checked by the first barrier): read in place. The one-launch forms
     * stay as they are: past WEFT_CUDA_COLL_FUSED itself (not the capture-dependent fuse_max), so a
     * capturing rank and an eager one decide alike. */
    size_t need = 0, woff = 0;
    const char *win_in = ll || !st->nwin ? NULL : window_input(a, n, &need);
    op->win = win_in && need >= window_min(st, a->kind) && need > (size_t)cvars.fused
                  ? window_of(st, win_in, need, &woff)
                  : NULL;
    if (op->win) {
        if ((rc = issue_in_window(op, win_in, woff, need))) return rc;
        goto record;
    }
    /* Two steps (allreduce, bcast) from WEFT_CUDA_COLL_TWO_SHOT bytes per rank on 3 or more ranks (on 2,
     * one shot reads as many remote bytes and passes one barrier less); ahead of the pipelined one-shot
     * kernel. A call in a window stays one shot (reading the windows in two shots is not built). Past
     * WEFT_CUDA_COLL_FUSED itself (not the capture-dependent fuse_max), as for windows: a capturing rank
     * and an eager one decide alike. */
    /* A pushed pipelined allreduce is two shots already, a pushed bcast two steps (both overlapped), a ring
     * passes each rank's part on (WEFT_CUDA_COLL_RING): they go first, and two steps follow only where the
     * pipelined kernel declines (slots too small for its geometry). */
    int past_fused = staged > (size_t)(cvars.fused > 0 ? cvars.fused : 0);
    int piping = past_fused && st->pipe > 0 && staged >= pipe_from(st, a->kind, n);
    int pushed = (a->kind == WEFT_COLL_ALLREDUCE || a->kind == WEFT_COLL_BCAST) && piping &&
                 (staged >= push_min(a->kind, n) || staged >= ring_min(a->kind, n));
    int two = (a->kind == WEFT_COLL_ALLREDUCE || a->kind == WEFT_COLL_BCAST) && n >= 3 && !ll &&
              cvars.two_shot > 0 && past_fused && staged >= (size_t)cvars.two_shot;
    if (two && !pushed) {
        if ((rc = two_step(op, in))) return rc;
        goto record;
    }
    if (ll) {
        if ((rc = ll_issue(op, in, out))) return rc;
        goto record;
    }
    int piped = 0;
    /* (past WEFT_CUDA_COLL_FUSED itself, as above: a capturing rank, which fuses less, pipelines alike) */
    if (piping && (rc = pipe_issue(op, staged, &piped))) return rc;
    if (two && !piped) {
        if ((rc = two_step(op, in))) return rc;
        goto record;
    }
    switch (piped ? WEFT_COLL_BARRIER : a->kind) {
    case WEFT_COLL_BARRIER:
        if (!piped) rc = barrier(op);
        break;
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_REDUCE: {
        size_t per = slot / es;
        for (size_t o = 0; !rc && o < a->count; o += per) {
            size_t k = a->count - o < per ? a->count - o : per;
            if (!(rc = stage(op, in + o * es, 0, k * es)) && !(rc = barrier(op)) &&
                (a->kind == WEFT_COLL_ALLREDUCE || me == a->root))
                rc = reduce(op, 0, out + o * es, k);
        }
        break;
    }
    case WEFT_COLL_REDUCE_SCATTER_BLOCK: {
        size_t per = slot / es / (size_t)n; /* elements of each rank's block per chunk */
        for (size_t o = 0; !rc && o < a->count; o += per) {
            size_t k = a->count - o < per ? a->count - o : per;
            for (int p = 0; !rc && p < n; p++)
                rc = stage(op, in + ((size_t)p * a->count + o) * es, (size_t)p * k * es, k * es);
            if (!rc && !(rc = barrier(op))) rc = reduce(op, (size_t)me * k * es, out + o * es, k);
        }
        break;
    }
    case WEFT_COLL_BCAST: {
        size_t bytes = a->count * es;
        for (size_t o = 0; !rc && o < bytes; o += slot) {
            size_t k = bytes - o < slot ? bytes - o : slot;
            if (me == a->root) rc = stage(op, out + o, 0, k);
            if (!rc) rc = barrier(op);
            src[0] = a->root;
            dst[0] = out + o;
            if (!rc && me != a->root) rc = copy_out(op, 1, src, 0, NULL, dst, k);
        }
        break;
    }
    case WEFT_COLL_ALLGATHER: {
        size_t block = a->count * es;
        for (size_t o = 0; !rc && o < block; o += slot) {
            size_t k = block - o < slot ? block - o : slot;
            if (!(rc = stage(op, in + o, 0, k)) && !(rc = barrier(op))) {
                for (int p = 0; p < n; p++)
                    src[p] = p, dst[p] = weft_coll_rblock(a, p) + o;
                rc = copy_out(op, n, src, 0, NULL, dst, k);
            }
        }
        break;
    }
    case WEFT_COLL_ALLTOALL: {
        size_t block = a->count * es, per = slot / (size_t)n;
        for (size_t o = 0; !rc && o < block; o += per) {
            size_t k = block - o < per ? block - o : per;
            for (int p = 0; !rc && p < n; p++)
                rc = stage(op, in + (size_t)p * block + o, (size_t)p * k, k);
            if (!rc && !(rc = barrier(op))) {
                for (int p = 0; p < n; p++)
                    src[p] = p, dst[p] = out + (size_t)p * block + o, step[p] = 0;
                rc = copy_out(op, n, src, (size_t)me * k, step, dst, k);
            }
        }
        break;
    }
    default: /* only the kinds of the algorithm table below reach here */
        rc = weft_error(WEFT_ERR_INTERNAL, "coll/cuda: called for %s, which has no coll/cuda algorithm",
                        weft_coll_kind_name(a->kind));
    }
    if (!rc && op->fusing) {
        CUfunction f = op->fz.mode == 1 ? st->m->fused_reduce[a->dtype][op->fz.red.op] : st->m->fused_copy;
        rc = launch(op, f, 1, 1, &op->fz, "launching the fused kernel");
    }
record:
    if (rc || op->capturing) return rc;
    CUresult r = weft_cu.event_record(op->ev, op->stream);
    if (r != CUDA_SUCCESS) return cu_fail(r, "recording the call's event");
    st->tail = op->ev;
    st->tail_stream = op->stream;
    op->num = ++st->issued;
    return WEFT_SUCCESS;
}

/* The schedule's start (in the user's call order on every rank): issues the launches. */
static void op_start(void *arg)
{
    cuda_op_t *op = arg;
    if (op->started) return;
    op->started = 1;
    cuda_state_t *st = op->st;
    if (st->broken) return; /* the poll reports it */
    CUresult r = weft_cu.ctx_push(st->ctx);
    int rc = r == CUDA_SUCCESS ? issue(op) : cu_fail(r, "making the buffers' context current");
    CUcontext popped;
    if (r == CUDA_SUCCESS) weft_cu.ctx_pop(&popped);
    if (rc) {
        st->broken = rc;
        snprintf(st->why, sizeof(st->why), "launching a %s failed (%s)", op->name, weft_last_error());
    }
}

/* A barrier of this call found a peer's call unlike this rank's (windows):
 * the communicator is broken; the error names the peer and the log shows
 * what every rank announced. */
static int mismatch_error(cuda_op_t *op)
{
    cuda_state_t *st = op->st;
    int peer = -st->words[1] - 1;
    /* what every rank announced, as this rank's header holds it (both parities) */
    unsigned long long d[2 * WEFT_CK_MAX_RANKS], ctr = 0;
    if (weft_cuda_copy(d, (const void *)(uintptr_t)(st->region + WEFT_CK_DESC), sizeof(d)) ||
        weft_cuda_copy(&ctr, (const void *)(uintptr_t)st->counter, sizeof(ctr)))
        memset(d, 0, sizeof(d));
    char seen[400];
    int at = snprintf(seen, sizeof(seen), "counter %#llx;", ctr);
    for (int q = 0; q < 2 * st->n && at < (int)sizeof(seen); q++) {
        unsigned long long v = d[(q / st->n) * WEFT_CK_MAX_RANKS + q % st->n];
        at += snprintf(seen + at, sizeof(seen) - (size_t)at, " %d:%d=%s", q / st->n, q % st->n,
                       !(v & 1) ? "slot" : "");
        if (v & 1 && at < (int)sizeof(seen))
            at += snprintf(seen + at, sizeof(seen) - (size_t)at, "w%llu+%llu", (v >> 1) & 0x7fff,
                           WEFT_CK_DESC_OFF(v));
    }
    weft_warn("coll/cuda: comm %s: %s: the inputs the ranks announced (parity:rank=place): %s", st->comm->name,
              op->name, seen);
    st->broken = WEFT_ERR_ARG;
    snprintf(st->why, sizeof(st->why),
             "a %s did not match rank %d's: one rank's input lay in a registered window and the other's not, "
             "or in another window, or the window was too small for the call",
             op->name, peer);
    return weft_error(WEFT_ERR_ARG,
                      "%s (comm %s): rank %d's call does not match this rank's: every rank passes an input in "
                      "the same registered window (weft_comm_window_register), or none does",
                      op->name, st->comm->name, peer);
}

/* The call is done: its event, or a later call's (the communicator's eager calls end in call order). The
 * first poll, right after the launches, asks nothing: the kernels cannot have ended yet, and the question
 * costs about a microsecond of a stream-ordered call's host time. */
static int op_poll(weft_sched_t *s, void *arg)
{
    cuda_op_t *op = arg;
    cuda_state_t *st = op->st;
    int fresh = !op->started;
    if (fresh) op_start(op);
    if (st->broken) return broken_error(st);
    if (op->capturing) return 1; /* launched into the graph: each replay runs it */
    CUresult r = op->num && op->num <= st->done ? CUDA_SUCCESS
                 : fresh                       ? CUDA_ERROR_NOT_READY
                                               : weft_cu.event_query(op->ev);
    if (r == CUDA_SUCCESS && st->words[1] < 0) return mismatch_error(op); /* a peer's call unlike this one */
    if (r == CUDA_SUCCESS) {
        if (op->num > st->done) st->done = op->num;
        return 1;
    }
    if (r != CUDA_ERROR_NOT_READY) return cu_fail(r, "waiting for the GPU collective");
    weft_sched_waiting(s, -1, "the GPU collective's kernels (a peer's barrier flag)");
    return 0;
}

/* A failed schedule (timeout, cancel, an error): the kernels may still wait
 * on peers; the abort word ends them, and the communicator's counters are
 * out of step from here on. */
static void op_failed(void *arg, int rc)
{
    cuda_op_t *op = arg;
    cuda_state_t *st = op->st;
    if (!op->started && op->ev && weft_cu.ctx_push(st->ctx) == CUDA_SUCCESS) { /* never issued: op_end won't run */
        CUcontext popped;
        weft_cu.event_destroy(op->ev);
        op->ev = NULL;
        weft_cu.ctx_pop(&popped);
    }
    if (!op->started || !st->words || op->capturing) return;
    st->words[0] = 1;
    __sync_synchronize();
    if (weft_cu.ctx_push(st->ctx) == CUDA_SUCCESS) {
        /* The kernels end within microseconds of the abort word; but work of another communicator
         * queued before them on the same stream may not: wait a bounded time, never forever. */
        if (event_wait(op->ev, 2.0) == CUDA_ERROR_NOT_READY)
            weft_warn("coll/cuda: comm %s: a failed %s's kernels are still queued behind other work on their "
                      "stream after 2 s; they end at the abort word when they run",
                      st->comm->name, op->name);
        if (st->tail == op->ev) st->tail = NULL;
        weft_cu.event_destroy(op->ev); /* op_end, which would, does not run after a failure */
        op->ev = NULL;
        CUcontext popped;
        weft_cu.ctx_pop(&popped);
    }
    int peer = st->words[1] - 1;
    if (!st->broken) {
        st->broken = WEFT_ERR_COMM;
        if (peer >= 0)
            snprintf(st->why, sizeof(st->why), "a %s ended (%s) while its kernels waited for rank %d", op->name,
                     weft_strerror(rc), peer);
        else
            snprintf(st->why, sizeof(st->why), "a %s ended (%s)", op->name, weft_strerror(rc));
    }
    if (peer >= 0) { /* the message says whom the kernels waited for */
        char was[200];
        snprintf(was, sizeof(was), "%s", weft_last_error());
        weft_error(rc, "%s (the GPU kernels were waiting for rank %d's barrier flag; stopped through the abort word)",
                   was, peer);
    }
}

static const weft_sched_watch_t cuda_watch = {.start = op_start, .failed = op_failed};

static int op_end(weft_sched_t *s, void *arg)
{
    (void)s;
    cuda_op_t *op = arg;
    cuda_state_t *st = op->st;
    if (st->tail == op->ev) st->tail = NULL; /* done: later calls need not wait for it */
    if (op->ev && st->nev < EVPOOL)
        st->evpool[st->nev++] = op->ev; /* its work is done: the next call may record it again */
    else if (op->ev)
        weft_cu.event_destroy(op->ev);
    op->ev = NULL;
    return WEFT_SUCCESS;
}

/* The context of a device buffer, or a decline when it is not one. */
static int device_ctx(const void *buf, CUcontext *ctx)
{
    if (!buf || buf == WEFT_IN_PLACE) return WEFT_SUCCESS;
    unsigned type = 0;
    CUcontext c = NULL;
    CUpointer_attribute at[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT};
    void *data[] = {&type, &c};
    if (weft_cu.pointer_get_attributes(2, at, data, (CUdeviceptr)(uintptr_t)buf) != CUDA_SUCCESS ||
        type != CU_MEMORYTYPE_DEVICE)
        return weft_coll_decline("coll/cuda: a buffer at %p is not device memory", buf);
    if (*ctx && c && c != *ctx) return weft_coll_decline("coll/cuda: the buffers belong to different contexts");
    if (c) *ctx = c;
    return WEFT_SUCCESS;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a, const char *name)
{
    weft_comm_t comm = a->comm;
    if (!cvars.enabled) return weft_coll_decline("coll/cuda: WEFT_CUDA_COLL=0");
    if (!weft_cu.launch_kernel || !weft_cu.ipc_open_mem_handle || !weft_cu.event_query || !weft_cu.stream_wait_event)
        return weft_coll_decline("coll/cuda: the CUDA driver lacks kernel launch, IPC, event queries or stream waits");
    if (weft_comm_spans_nodes(comm)) return weft_coll_decline("coll/cuda: the communicator spans nodes");
    if (comm->size > WEFT_CK_MAX_RANKS)
        return weft_coll_decline("coll/cuda: %d ranks (at most %d)", comm->size, WEFT_CK_MAX_RANKS);
    int reduces =
        a->kind == WEFT_COLL_ALLREDUCE || a->kind == WEFT_COLL_REDUCE || a->kind == WEFT_COLL_REDUCE_SCATTER_BLOCK;
    if (reduces && (a->op > WEFT_AVG || (int)a->dtype >= NREDUCE))
        return weft_coll_decline("coll/cuda: %s on %s", weft_op_name(a->op), weft_dtype_name(a->dtype));
    CUcontext ctx = NULL;
    int rc;
    if ((rc = device_ctx(a->sendbuf, &ctx)) || (rc = device_ctx(a->recvbuf, &ctx))) return rc;
    if (a->recvbufs)
        for (int r = 0; r < comm->size; r++)
            if ((rc = device_ctx(a->recvbufs[r], &ctx))) return rc;
    if (!ctx && weft_cu.ctx_get_current(&ctx) != CUDA_SUCCESS) ctx = NULL;
    if (!ctx) return weft_coll_decline("coll/cuda: no CUDA context (no device buffer, none current)");
    cuda_state_t *st = NULL;
    if ((rc = get_state(comm, ctx, &st))) return rc;
    size_t total = a->kind == WEFT_COLL_BARRIER ? 1 : a->count;
    if (total == 0) return WEFT_SUCCESS; /* every rank passes the same count: nothing to do anywhere */
    cuda_op_t *op = weft_sched_scratch(s, sizeof(*op));
    if (!op) return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", name);
    memset(op, 0, sizeof(*op));
    op->st = st;
    op->a = *a;
    op->name = name;
    op->stream = a->on_stream ? (CUstream)a->stream : st->stream;
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = CUDA_SUCCESS;
    if (a->on_stream && weft_cu.stream_is_capturing &&
        (r = weft_cu.stream_is_capturing(op->stream, &cap)) != CUDA_SUCCESS)
        return cu_fail(r, "asking whether the stream is being captured");
    if (cap == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
        return weft_error(WEFT_ERR_ARG, "%s: the stream's graph capture was invalidated", name);
    op->capturing = cap == CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (!op->capturing && st->nev > 0)
        op->ev = st->evpool[--st->nev];
    else if (!op->capturing && (r = weft_cu.event_create(&op->ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS)
        return cu_fail(r, "creating an event");
    weft_sched_watch(s, &cuda_watch, op);
    if ((rc = weft_sched_poll(s, op_poll, op)) || (rc = weft_sched_call(s, op_end, op))) return rc;
    return WEFT_SUCCESS;
}

/* ---- registered buffers (windows) ------------------------------------------------ */

/* What each rank tells the others when registering. */
typedef struct {
    int32_t status; /* WEFT_SUCCESS or why this rank's buffer cannot be registered */
    int32_t index;  /* deregistration: the window it names */
    uint64_t off;   /* the buffer's offset in its allocation */
    uint64_t bytes;
    CUipcMemHandle handle; /* of the allocation */
} win_exch_t;

/* The communicator's coll/cuda state for a registration, or why not (the
 * same on every rank: it depends on the communicator alone). */
static int window_comm(weft_comm_t comm, const char *fn)
{
    int rc;
    WEFT_CHECK_INIT(fn);
    if ((rc = weft_comm_check_usable(comm, fn))) return rc;
    if (!cvars.enabled) return weft_error(WEFT_ERR_UNSUPPORTED, "%s: WEFT_CUDA_COLL=0 (no GPU collectives)", fn);
    if (!weft_cuda_possible() || !weft_cu.ipc_get_mem_handle || !weft_cu.mem_get_address_range)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: no CUDA driver with IPC in this process", fn);
    if (weft_comm_spans_nodes(comm) || comm->size > WEFT_CK_MAX_RANKS)
        return weft_error(WEFT_ERR_UNSUPPORTED,
                          "%s: comm %s spans nodes or has more than %d ranks: windows are for the GPU collectives "
                          "of one node's ranks (register on a node communicator, weft_comm_split_type)",
                          fn, comm->name, WEFT_CK_MAX_RANKS);
    return WEFT_SUCCESS;
}

/* Every rank's status is the same after this: the first failing rank's, named. */
static int window_agree(weft_comm_t comm, win_exch_t *mine, win_exch_t *all, const char *fn, const char *why)
{
    int rc = weft_allgather(mine, all, (int64_t)sizeof(*mine), WEFT_BYTE, comm);
    if (rc) return rc;
    for (int p = 0; p < comm->size; p++)
        if (all[p].status) {
            if (p != comm->rank || !why[0])
                return weft_error(all[p].status, "%s: comm %s: rank %d failed (%s)", fn, comm->name, p,
                                  weft_strerror(all[p].status));
            return weft_error(all[p].status, "%s: comm %s: %s", fn, comm->name, why);
        }
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_window_register(weft_comm_t comm, void *buf, size_t bytes, weft_window_t *win)
{
    WEFT_API_ENTER();
    static const char fn[] = "weft_comm_window_register";
    int rc = window_comm(comm, fn);
    if (rc) return rc;
    if (!win) return weft_error(WEFT_ERR_ARG, "%s: win is NULL", fn);
    *win = NULL;
    win_exch_t mine, all[WEFT_CK_MAX_RANKS];
    memset(&mine, 0, sizeof(mine));
    char why[200] = "";
    CUcontext ctx = NULL;
    unsigned type = 0;
    CUpointer_attribute at[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT};
    void *data[] = {&type, &ctx};
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult r;
    if (!buf || !bytes) {
        mine.status = WEFT_ERR_ARG;
        snprintf(why, sizeof(why), "an empty buffer (%p, %zu bytes)", buf, bytes);
    } else if (weft_cu.pointer_get_attributes(2, at, data, (CUdeviceptr)(uintptr_t)buf) != CUDA_SUCCESS ||
               type != CU_MEMORYTYPE_DEVICE || !ctx) {
        mine.status = WEFT_ERR_ARG;
        snprintf(why, sizeof(why), "the buffer at %p is not device memory", buf);
    } else if ((r = weft_cu.mem_get_address_range(&base, &size, (CUdeviceptr)(uintptr_t)buf)) != CUDA_SUCCESS ||
               (uintptr_t)buf + bytes > base + size) {
        mine.status = WEFT_ERR_ARG;
        snprintf(why, sizeof(why), "[%p, +%zu) is not inside one allocation (%s)", buf, bytes,
                 r == CUDA_SUCCESS ? "it runs past its end" : weft_cu_text(r));
    } else if ((r = weft_cu.ipc_get_mem_handle(&mine.handle, base)) != CUDA_SUCCESS) {
        mine.status = WEFT_ERR_UNSUPPORTED;
        snprintf(why, sizeof(why),
                 "cuIpcGetMemHandle of the buffer's allocation failed (%s): windows take cuMemAlloc / cudaMalloc "
                 "memory, not VMM (cuMemCreate, expandable segments) or managed memory",
                 weft_cu_text(r));
    }
    /* What would make get_state below fail on this rank alone: said now, so every rank stops alike. */
    const cuda_state_t *cur = weft_coll_state(comm, WEFT_COLL_COMP_CUDA);
    if (!mine.status && cur && cur->broken) {
        mine.status = cur->broken;
        snprintf(why, sizeof(why), "its GPU collectives failed earlier: %.150s", cur->why);
    } else if (!mine.status && cur && cur->ctx != ctx) {
        mine.status = WEFT_ERR_ARG;
        snprintf(why, sizeof(why), "the buffer belongs to another CUDA context than the communicator's GPU work");
    }
    mine.off = (uint64_t)((uintptr_t)buf - base);
    mine.bytes = bytes;
    if (mine.status) weft_warn("%s: comm %s: %s", fn, comm->name, why);
    if ((rc = window_agree(comm, &mine, all, fn, why))) return rc;
    /* Every rank has a device buffer: the communicator's GPU state (collective, alike everywhere). */
    cuda_state_t *st = NULL;
    if ((rc = get_state(comm, ctx, &st))) return rc;
    int idx = -1;
    for (int i = 0; i < MAX_WINDOWS && idx < 0; i++)
        if (!st->win[i].st) idx = i;
    cuda_window_t w;
    memset(&w, 0, sizeof(w));
    w.index = idx;
    memset(&mine, 0, sizeof(mine));
    why[0] = 0;
    if (idx < 0) {
        mine.status = WEFT_ERR_NO_MEMORY;
        snprintf(why, sizeof(why), "%d windows registered already (deregister one)", MAX_WINDOWS);
    } else if ((r = weft_cu.ctx_push(st->ctx)) != CUDA_SUCCESS) {
        mine.status = WEFT_ERR_TRANSPORT;
        snprintf(why, sizeof(why), "making the buffer's context current failed (%s)", weft_cu_text(r));
    } else {
        for (int p = 0; p < st->n && !mine.status; p++) {
            w.len[p] = all[p].bytes;
            if (p == st->me) {
                w.base[p] = (CUdeviceptr)(uintptr_t)buf;
            } else if ((r = weft_cu.ipc_open_mem_handle(&w.mapped[p], all[p].handle,
                                                        CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != CUDA_SUCCESS) {
                mine.status = WEFT_ERR_UNSUPPORTED;
                snprintf(why, sizeof(why), "mapping rank %d's buffer through CUDA IPC failed (%s)", p, weft_cu_text(r));
            } else {
                w.base[p] = w.mapped[p] + all[p].off;
            }
        }
        CUcontext popped;
        weft_cu.ctx_pop(&popped);
    }
    if (mine.status) weft_warn("%s: comm %s: %s", fn, comm->name, why);
    win_exch_t all2[WEFT_CK_MAX_RANKS];
    if ((rc = window_agree(comm, &mine, all2, fn, why))) {
        if (weft_cu.ctx_push(st->ctx) == CUDA_SUCCESS) {
            window_unmap(&w, st->n);
            CUcontext popped;
            weft_cu.ctx_pop(&popped);
        }
        return rc;
    }
    w.st = st;
    st->win[idx] = w;
    st->nwin++;
    *win = &st->win[idx];
    weft_debug("%s: comm %s: window %d, %zu bytes at %p", fn, comm->name, idx, bytes, buf);
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_window_deregister(weft_comm_t comm, weft_window_t *win)
{
    WEFT_API_ENTER();
    static const char fn[] = "weft_comm_window_deregister";
    int rc = window_comm(comm, fn);
    if (rc) return rc;
    if (!win) return weft_error(WEFT_ERR_ARG, "%s: win is NULL", fn);
    cuda_state_t *st = weft_coll_state(comm, WEFT_COLL_COMP_CUDA);
    cuda_window_t *w = *win;
    win_exch_t mine, all[WEFT_CK_MAX_RANKS];
    memset(&mine, 0, sizeof(mine));
    char why[160] = "";
    if (!w || !st || w < st->win || w >= st->win + MAX_WINDOWS || w->st != st) {
        mine.status = WEFT_ERR_ARG;
        mine.index = -1;
        snprintf(why, sizeof(why), "the handle is not a window registered on this communicator");
    } else {
        mine.index = w->index;
        /* The calls that read the window are done on this rank (their last barrier: the peers' reads too);
         * a wait bounded by the communicator's timeout (a broken communicator's kernels were stopped). */
        double limit = comm->timeout > 0 ? comm->timeout : 60.0;
        CUresult q = CUDA_SUCCESS;
        if (st->tail && !st->broken && weft_cu.ctx_push(st->ctx) == CUDA_SUCCESS) {
            q = event_wait(st->tail, limit);
            CUcontext popped;
            weft_cu.ctx_pop(&popped);
        }
        if (q == CUDA_ERROR_NOT_READY) {
            mine.status = WEFT_ERR_TIMEOUT;
            snprintf(why, sizeof(why), "the GPU work that used the window is still running after %.0f s", limit);
        }
    }
    if ((rc = window_agree(comm, &mine, all, fn, why))) return rc;
    for (int p = 0; p < comm->size; p++)
        if (all[p].index != mine.index)
            return weft_error(WEFT_ERR_ARG, "%s: comm %s: rank %d deregisters window %d, this rank window %d", fn,
                              comm->name, p, (int)all[p].index, (int)mine.index);
    if (weft_cu.ctx_push(st->ctx) == CUDA_SUCCESS) {
        window_unmap(w, st->n);
        CUcontext popped;
        weft_cu.ctx_pop(&popped);
    }
    memset(w, 0, sizeof(*w));
    st->nwin--;
    *win = NULL;
    return WEFT_SUCCESS;
}

#else /* no kernels in this build */

WEFT_API int weft_comm_window_register(weft_comm_t comm, void *buf, size_t bytes, weft_window_t *win)
{
    WEFT_API_ENTER();
    (void)comm;
    (void)buf;
    (void)bytes;
    if (win) *win = NULL;
    return weft_error(WEFT_ERR_UNSUPPORTED, "weft_comm_window_register: weft was built without GPU collectives");
}

WEFT_API int weft_comm_window_deregister(weft_comm_t comm, weft_window_t *win)
{
    WEFT_API_ENTER();
    (void)comm;
    (void)win;
    return weft_error(WEFT_ERR_UNSUPPORTED, "weft_comm_window_deregister: weft was built without GPU collectives");
}

static int build(weft_sched_t *s, const weft_coll_args_t *a, const char *name)
{
    (void)s;
    (void)a;
    (void)name;
    return weft_coll_decline("coll/cuda: built without nvcc (no kernels)");
}

static void state_release(weft_comm_t comm, void *p)
{
    (void)comm;
    (void)p;
}

#endif

#define CUDA_ALG(kind_, fn_, desc_)                                                                                    \
    static int build_##fn_(weft_sched_t *s, const weft_coll_args_t *a)                                                 \
    {                                                                                                                  \
        return build(s, a, #fn_ " cuda");                                                                              \
    }                                                                                                                  \
    const weft_coll_alg_t weft_alg_##fn_##_cuda = {"cuda", kind_, desc_, build_##fn_, 1};

CUDA_ALG(WEFT_COLL_BARRIER, barrier, "a barrier kernel: release/acquire flags at system scope over CUDA IPC")
CUDA_ALG(WEFT_COLL_ALLREDUCE, allreduce,
         "one shot: every rank stages its vector (or it lies in a registered window), passes a barrier kernel, then "
         "reduces every peer's slot in rank order (the same bits everywhere); LL up to WEFT_CUDA_COLL_LL; two shots "
         "from WEFT_CUDA_COLL_TWO_SHOT on 3+ ranks")
CUDA_ALG(WEFT_COLL_REDUCE, reduce, "as allreduce, the root alone reducing")
CUDA_ALG(WEFT_COLL_REDUCE_SCATTER_BLOCK, reduce_scatter_block,
         "every rank stages its vector, then reduces its own block of every peer's slot")
CUDA_ALG(WEFT_COLL_BCAST, bcast,
         "the root stages, the others copy from its slot; from WEFT_CUDA_COLL_TWO_SHOT on 3+ ranks each relays its "
         "part through its own slot first")
CUDA_ALG(WEFT_COLL_ALLGATHER, allgather, "every rank stages its block, then copies every peer's into the output")
CUDA_ALG(WEFT_COLL_ALLTOALL, alltoall, "every rank stages its blocks, then copies its block of every peer's slot")

/* staged.c: the same collectives (and reduce_scatter) through host copies, where no kernel takes a call. */
extern const weft_coll_alg_t weft_alg_barrier_staged, weft_alg_bcast_staged, weft_alg_reduce_staged,
    weft_alg_allreduce_staged, weft_alg_allgather_staged, weft_alg_reduce_scatter_staged,
    weft_alg_reduce_scatter_block_staged, weft_alg_alltoall_staged;

static const weft_coll_alg_t *const algorithms[] = {
    &weft_alg_barrier_cuda,        &weft_alg_allreduce_cuda,        &weft_alg_reduce_cuda,
    &weft_alg_reduce_scatter_block_cuda, &weft_alg_bcast_cuda,     &weft_alg_allgather_cuda,
    &weft_alg_alltoall_cuda,       &weft_alg_barrier_staged,        &weft_alg_bcast_staged,
    &weft_alg_reduce_staged,       &weft_alg_allreduce_staged,      &weft_alg_allgather_staged,
    &weft_alg_reduce_scatter_staged, &weft_alg_reduce_scatter_block_staged, &weft_alg_alltoall_staged,
    NULL,
};

static const int max_ranks = 8, hdr = WEFT_CK_HDR;

static const weft_coll_param_t params[] = {
    {"slot", "every coll/cuda algorithm", &cvars.slot, "bytes", "WEFT_CUDA_COLL_SLOT",
     "messages larger than a slot go in chunks, one barrier each (auto: 8 MiB on a shared GPU, 32 MiB on own GPUs)"},
    {"fused", "every coll/cuda algorithm", &cvars.fused, "bytes", "WEFT_CUDA_COLL_FUSED",
     "calls staging up to this much per rank run as one launch of one block"},
    {"max_ranks", "every coll/cuda algorithm", &max_ranks, "ranks", NULL,
     "communicators of more ranks decline (one node's GPUs)"},
    {"flags", "every coll/cuda algorithm", &hdr, "bytes", NULL, "the flag header before each rank's two slots"},
    {"ll", "every coll/cuda algorithm but barrier", &cvars.ll, "bytes", "WEFT_CUDA_COLL_LL",
     "calls whose piece for each peer is up to this much (and 4 MiB / the ranks at most: 2 MiB on 2, 512 KiB on 8) "
     "push their lines into the peers: no barrier, no staging (auto: 1 MiB on 2 ranks, 512 KiB on more); on a GPU "
     "shared by k processes, 1/k of the blocks it holds at once"},
    {"pipe", "every coll/cuda algorithm", &cvars.pipe, "bytes", "WEFT_CUDA_COLL_PIPE",
     "calls staging at least this much per rank run pipelined: one barrier, then one launch of many blocks (auto: "
     "32 MiB on own GPUs; never on a shared GPU, where 2 ranks on one H100 reached 100 GB/s against 240 chunked at "
     "16 MiB and 4 did not finish 32 MiB in 45 s)"},
    {"two_shot", "allreduce, bcast", &cvars.two_shot, "bytes", "WEFT_CUDA_COLL_TWO_SHOT",
     "allreduces from this much per rank on 3 or more ranks: reduce-scatter into the slots, then all-gather"},
    {"window", "every coll/cuda algorithm but barrier", &cvars.window, "bytes", "WEFT_CUDA_COLL_WINDOW",
     "calls reading at least this much per rank out of registered windows read it in place (two barriers; auto: "
     "8 MiB on a shared GPU; on own GPUs alltoall and reduce_scatter 64 KiB, allreduce never, the others 8 MiB)"},
    {"push", "every coll/cuda algorithm", &cvars.push, "bytes", "WEFT_CUDA_COLL_PUSH",
     "pipelined calls from this much per rank store into the peers' scratch (allreduce: reduce-scatter, then every "
     "part pushed to all) instead of staging into their own for the peers to read (auto: allreduce 128 MiB, "
     "reduce_scatter 256 MiB, both on 2 ranks 32 MiB, the others always)"},
    {"pipe_blocks", "every coll/cuda algorithm", &cvars.pipe_blocks, "blocks", "WEFT_CUDA_COLL_PIPE_BLOCKS",
     "the pipelined kernel's grid (within the max_ctas / min_ctas hints and the SMs; on a GPU shared by k "
     "processes, 1/k of the blocks it holds at once)"},
    {"pipe_depth", "every coll/cuda algorithm", &cvars.pipe_depth, "positions", "WEFT_CUDA_COLL_PIPE_DEPTH",
     "slot positions per block of the pipelined kernel (512 / blocks at most): units in flight per block (auto: "
     "a ring and a bcast on 2 ranks 4, else 2)"},
    {"pipe_ahead", "every coll/cuda algorithm", &cvars.pipe_ahead, "units", "WEFT_CUDA_COLL_PIPE_AHEAD",
     "units a pipelined block fills ahead of the one it consumes (depth - 1 at most; auto: allreduce 1, the "
     "others 0); a ring's units a block runs at a time (1 at least, depth / 2 at most)"},
    {"ring", "allgather, bcast, reduce_scatter, allreduce", &cvars.ring, "bytes", "WEFT_CUDA_COLL_RING",
     "pipelined calls on 3 or more ranks from this much per rank run as a ring: every store to the next rank "
     "(auto: always; an allgather then pipelines from 8 MiB)"},
    {"pipe_split", "every coll/cuda algorithm", &cvars.pipe_split, "warps", "WEFT_CUDA_COLL_PIPE_SPLIT",
     "warps of a pushing pipelined block that push while its others consume (auto, where a block has two units "
     "or more: allreduce 6 of 8, alltoall, reduce_scatter and allgather on 2 ranks 3 of 8)"},
};

const weft_coll_component_t weft_coll_cuda = {
    .id = WEFT_COLL_COMP_CUDA,
    .name = "cuda",
    .description = "collectives on device buffers: kernels over CUDA IPC-mapped scratch among one node's ranks; "
                   "through host copies (staged) elsewhere",
    .memtypes = WEFT_MEM_BIT(WEFT_MEM_CUDA),
    .algorithms = algorithms,
    .vars = vars,
    .nvars = (int)(sizeof(vars) / sizeof(vars[0])),
    .params = params,
    .nparams = (int)(sizeof(params) / sizeof(params[0])),
    .comm_release = state_release,
};
