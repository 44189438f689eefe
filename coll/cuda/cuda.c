/* coll/cuda: collectives on device buffers among the ranks of one node
 * (cuda_coll.h: the files and how a call runs). Its descriptor: the
 * variables, the parameters inside the algorithms, and the algorithms, one
 * a file, which rules.conf's mem=cuda rules choose among: for each
 * collective the LL kernel, a registered window, the pipelined kernel
 * (ring, pushed), two shots or steps, the pipelined kernel reading, one
 * shot; the staged algorithms (staged.c) where no kernel runs. */
#include "coll/cuda/cuda_coll.h"

#include <stdlib.h>
#include <string.h>

weft_gpu_vars_t weft_gpu_vars;

static const weft_var_t vars[] = {
    {"WEFT_CUDA_COLL", WEFT_VAR_BOOL | WEFT_VAR_AGREE, "1",
     "collectives on device buffers through coll/cuda (kernels over CUDA IPC among the ranks of one node); 0: "
     "they fail with WEFT_ERR_UNSUPPORTED",
     &weft_gpu_vars.enabled, 0},
    {"WEFT_CUDA_COLL_SLOT", WEFT_VAR_INT_AUTO | WEFT_VAR_AGREE, "auto",
     "coll/cuda: bytes of each of a rank's two scratch slots (its device memory, mapped by its peers); larger "
     "messages go in chunks of this size, one barrier each. Costs 2 x this + about 16 MiB (the "
     "flags and the LL area) of device memory per rank and communicator that runs a GPU collective. auto: 8 MiB "
     "where ranks share a GPU, 32 MiB where every rank has its own (measured on four H100s: 1.1-1.5x the bus "
     "bandwidth of 8 MiB slots for allreduce, reduce_scatter and alltoall from 16 MiB)",
     &weft_gpu_vars.slot, 0},
    {"WEFT_CUDA_COLL_FUSED", WEFT_VAR_INT | WEFT_VAR_AGREE, "16384",
     "coll/cuda: one-shot calls (cuda_one_shot) and barriers that stage up to this many bytes per rank run as one "
     "launch of one thread block (stage, barrier and reduce or copy fused) instead of three launches (into a CUDA "
     "graph: up to 4096 at most, as a replay pays no launch cost); the other kernel forms (window, two shots, "
     "pipelined) decline such calls; 0: never",
     &weft_gpu_vars.fused, 0},
    {"WEFT_CUDA_COLL_PIPE_BLOCKS", WEFT_VAR_INT | WEFT_VAR_AGREE, "128",
     "coll/cuda: thread blocks of the pipelined kernel (within the max_ctas / min_ctas hints and the SMs; where "
     "processes share a GPU, at most their share of the blocks it holds at once, so that all of theirs run "
     "together: the blocks wait on each other)",
     &weft_gpu_vars.pipe_blocks, 0},
    {"WEFT_CUDA_COLL_PIPE_DEPTH", WEFT_VAR_INT_AUTO | WEFT_VAR_AGREE, "auto",
     "coll/cuda: positions of the slots per block of the pipelined kernel (at most 512 / blocks): the units a "
     "block may have in flight; the slots are cut into blocks x this many positions, so more positions make "
     "smaller units. auto: 4 for a ring (cuda_ring; four H200s: 0.80-1.0x the time of 2 at 32-128 "
     "MiB, the same above) and a bcast on 2 ranks (measured on two H200s, two leases: 1.05-1.12x the bus "
     "bandwidth of 2 at 32-64 MiB, 1.00-1.02x above), 2 otherwise (measured on four H100s, 32 MiB - 1 GiB: 4 "
     "positions gave allreduce, bcast and reduce_scatter 0.80-0.94x the bus bandwidth of 2 at most sizes, the "
     "others 0.97-1.08x; two H200s: allreduce 0.82-0.96x)",
     &weft_gpu_vars.pipe_depth, 0},
    {"WEFT_CUDA_COLL_PIPE_AHEAD", WEFT_VAR_INT_AUTO | WEFT_VAR_AGREE, "auto",
     "coll/cuda: units a block of the pipelined kernel fills (stages or pushes) ahead of the one it consumes, so "
     "its peers' flags for that one are on their way while it works (at most the depth - 1); 0: each unit "
     "filled, then consumed. auto: 1 for allreduce, 0 for the others (measured on four H100s at 128 MiB - 1 GiB: "
     "1 ahead gave allreduce 1.02-1.07x the bus bandwidth of 0, allgather 0.91-0.95x, the others "
     "0.97-1.04x). A ring (cuda_ring) runs this many of a block's units at a time, step by step "
     "(at least 1, at most half the depth; four H200s: 2 against 1 the same time, 0.98-1.01x)",
     &weft_gpu_vars.pipe_ahead, 0},
    {"WEFT_CUDA_COLL_PIPE_SPLIT", WEFT_VAR_INT_AUTO, "auto",
     "coll/cuda: warps of each block of a pushing pipelined kernel (cuda_pushed) that push units while "
     "the block's other warps consume the units the peers pushed, side by side (on a rank that both pushes and "
     "consumes; a bcast's root and a reduce's other ranks do one of the two); 0: every warp pushes a unit, then "
     "consumes one (WEFT_CUDA_COLL_PIPE_AHEAD); at least the block's warps: none split. auto: where each block "
     "has at least two units (one unit a block leaves nothing to overlap), 3 of 8 warps for allgather (on 2 ranks; "
     "on four H200s unsplit blocks were 1.05-1.12x faster from 256 MiB), alltoall and reduce_scatter, 6 of 8 for "
     "allreduce (of the block's warps; measured on two H200s, 64 MiB - 1 GiB: bus bandwidth 1.03-1.22x, "
     "1.06-1.16x and 1.07-1.11x that of unsplit blocks), 0 for the rest. A rank's own "
     "choice: ranks may differ",
     &weft_gpu_vars.pipe_split, 0},
    {"WEFT_CUDA_COLL_PDL", WEFT_VAR_BOOL, "1",
     "coll/cuda: launch the kernels with programmatic dependent launch where the GPU (sm_90 or newer) and the "
     "driver (CUDA 12.3 or newer) have it, for kernels of one block (small calls): such a kernel is launched as "
     "the one before it in the stream ends (once every block of that one has exited or, in the LL kernel, "
     "passed its last wait) and waits for its end before touching memory, so stream order holds and only the "
     "launch gap shrinks (one H200, one-block kernels back to back in a CUDA graph: 0.63 against 0.75 us a "
     "kernel; 2 ranks on one H200 under MPS, in graphs: 0.83-0.99x the time up to 16 KiB, but LL calls of "
     "several blocks 1.20-1.23x at 32-64 KiB, hence one block only). A rank's own choice: ranks may differ; 0: "
     "plain launches",
     &weft_gpu_vars.pdl, 0},
};

extern const weft_gpu_alg_t weft_gpu_barrier_flags, weft_gpu_bcast_ll, weft_gpu_bcast_window, weft_gpu_bcast_ring,
    weft_gpu_bcast_pushed, weft_gpu_bcast_two_step, weft_gpu_bcast_pipelined, weft_gpu_bcast_one_shot,
    weft_gpu_reduce_ll, weft_gpu_reduce_window, weft_gpu_reduce_pushed, weft_gpu_reduce_pipelined,
    weft_gpu_reduce_one_shot, weft_gpu_allreduce_ll, weft_gpu_allreduce_window, weft_gpu_allreduce_ring,
    weft_gpu_allreduce_pushed, weft_gpu_allreduce_two_shot, weft_gpu_allreduce_pipelined, weft_gpu_allreduce_one_shot,
    weft_gpu_allgather_ll, weft_gpu_allgather_window, weft_gpu_allgather_ring, weft_gpu_allgather_pushed,
    weft_gpu_allgather_pipelined, weft_gpu_allgather_one_shot, weft_gpu_reduce_scatter_ll,
    weft_gpu_reduce_scatter_window, weft_gpu_reduce_scatter_ring, weft_gpu_reduce_scatter_pushed,
    weft_gpu_reduce_scatter_pipelined, weft_gpu_reduce_scatter_one_shot, weft_gpu_alltoall_ll, weft_gpu_alltoall_window,
    weft_gpu_alltoall_pushed, weft_gpu_alltoall_pipelined, weft_gpu_alltoall_one_shot;

/* staged.c: the same collectives (and reduce_scatter) through host copies, where no kernel takes a call. */
extern const weft_coll_alg_t weft_alg_barrier_staged, weft_alg_bcast_staged, weft_alg_reduce_staged,
    weft_alg_allreduce_staged, weft_alg_allgather_staged, weft_alg_reduce_scatter_staged,
    weft_alg_reduce_scatter_block_staged, weft_alg_alltoall_staged;
/* staged_pipelined.c: the elementwise ones through host copies in pieces that overlap the host collective. */
extern const weft_coll_alg_t weft_alg_bcast_staged_pipelined, weft_alg_reduce_staged_pipelined,
    weft_alg_allreduce_staged_pipelined;
/* allreduce_direct.c, reduce_scatter_direct.c, allgather_direct.c: across nodes with the messages in device memory
 * (direct.c). */
extern const weft_coll_alg_t weft_alg_allreduce_direct, weft_alg_reduce_scatter_direct,
    weft_alg_reduce_scatter_block_direct, weft_alg_allgather_direct;

/* The kernel algorithms, each collective's in the order rules.conf tries them, then the staged ones. */
static const weft_coll_alg_t *const algorithms[] = {
    &weft_gpu_barrier_flags.alg,

    &weft_gpu_bcast_ll.alg,
    &weft_gpu_bcast_window.alg,
    &weft_gpu_bcast_ring.alg,
    &weft_gpu_bcast_pushed.alg,
    &weft_gpu_bcast_two_step.alg,
    &weft_gpu_bcast_pipelined.alg,
    &weft_gpu_bcast_one_shot.alg,

    &weft_gpu_reduce_ll.alg,
    &weft_gpu_reduce_window.alg,
    &weft_gpu_reduce_pushed.alg,
    &weft_gpu_reduce_pipelined.alg,
    &weft_gpu_reduce_one_shot.alg,

    &weft_gpu_allreduce_ll.alg,
    &weft_gpu_allreduce_window.alg,
    &weft_gpu_allreduce_ring.alg,
    &weft_gpu_allreduce_pushed.alg,
    &weft_gpu_allreduce_two_shot.alg,
    &weft_gpu_allreduce_pipelined.alg,
    &weft_gpu_allreduce_one_shot.alg,

    &weft_gpu_allgather_ll.alg,
    &weft_gpu_allgather_window.alg,
    &weft_gpu_allgather_ring.alg,
    &weft_gpu_allgather_pushed.alg,
    &weft_gpu_allgather_pipelined.alg,
    &weft_gpu_allgather_one_shot.alg,

    &weft_gpu_reduce_scatter_ll.alg,
    &weft_gpu_reduce_scatter_window.alg,
    &weft_gpu_reduce_scatter_ring.alg,
    &weft_gpu_reduce_scatter_pushed.alg,
    &weft_gpu_reduce_scatter_pipelined.alg,
    &weft_gpu_reduce_scatter_one_shot.alg,

    &weft_gpu_alltoall_ll.alg,
    &weft_gpu_alltoall_window.alg,
    &weft_gpu_alltoall_pushed.alg,
    &weft_gpu_alltoall_pipelined.alg,
    &weft_gpu_alltoall_one_shot.alg,

    &weft_alg_allreduce_direct,
    &weft_alg_reduce_scatter_direct,
    &weft_alg_reduce_scatter_block_direct,
    &weft_alg_allgather_direct,

    &weft_alg_bcast_staged_pipelined,
    &weft_alg_reduce_staged_pipelined,
    &weft_alg_allreduce_staged_pipelined,

    &weft_alg_barrier_staged,
    &weft_alg_bcast_staged,
    &weft_alg_reduce_staged,
    &weft_alg_allreduce_staged,
    &weft_alg_allgather_staged,
    &weft_alg_reduce_scatter_staged,
    &weft_alg_reduce_scatter_block_staged,
    &weft_alg_alltoall_staged,
    NULL,
};

int weft_gpu_takes(const weft_coll_alg_t *alg, const weft_coll_args_t *a, const weft_gpu_state_t *st)
{
    /* the kernel algorithms are the stream-ordered ones, each the first member of its weft_gpu_alg_t */
    if (weft_coll_component_of(alg) != &weft_coll_cuda || !alg->stream_ordered) return WEFT_ERR_ARG;
    return ((const weft_gpu_alg_t *)(const void *)alg)->takes(a, st);
}

/* The variables that picked a call's form before the rules did: what replaces each. */
static int init(void)
{
    static const char *const retired[][2] = {
        {"WEFT_CUDA_COLL_LL", "cuda_ll"},
        {"WEFT_CUDA_COLL_WINDOW", "cuda_window"},
        {"WEFT_CUDA_COLL_TWO_SHOT", "cuda_two_shot (bcast: cuda_two_step)"},
        {"WEFT_CUDA_COLL_PIPE", "cuda_ring, cuda_pushed, cuda_pipelined"},
        {"WEFT_CUDA_COLL_PUSH", "cuda_pushed"},
        {"WEFT_CUDA_COLL_RING", "cuda_ring"},
    };
    for (size_t i = 0; i < sizeof(retired) / sizeof(retired[0]); i++)
        if (getenv(retired[i][0]))
            weft_warn("coll/cuda: %s is gone: rules.conf's mem=cuda rules pick the form now; force one with "
                      "WEFT_COLL_TUNE, e.g. allreduce:1m-inf:mem=cuda:cuda_one_shot (%s; weft_info --coll "
                      "lists the rules and the algorithms)",
                      retired[i][0], retired[i][1]);
    return WEFT_SUCCESS;
}

static const int max_ranks = WEFT_CK_MAX_RANKS, hdr = WEFT_CK_HDR, ll_area = (int)WEFT_CK_LL_AREA;

static const weft_coll_param_t params[] = {
    {"slot", "every coll/cuda algorithm", &weft_gpu_vars.slot, "bytes", "WEFT_CUDA_COLL_SLOT",
     "messages larger than a slot go in chunks, one barrier each (auto: 8 MiB on a shared GPU, 32 MiB on own GPUs)"},
    {"fused", "cuda_one_shot, cuda_flags", &weft_gpu_vars.fused, "bytes", "WEFT_CUDA_COLL_FUSED",
     "calls staging up to this much per rank run as one launch of one block; the other forms decline them"},
    {"max_ranks", "every coll/cuda algorithm", &max_ranks, "ranks", NULL,
     "communicators of more ranks decline (one node's GPUs)"},
    {"flags", "every coll/cuda algorithm", &hdr, "bytes", NULL, "the flag header before each rank's two slots"},
    {"ll_area", "cuda_ll", &ll_area, "bytes", NULL,
     "a piece for each peer is at most this / 4n (2 MiB on 2 ranks, 1 MiB on 4, 512 KiB on 8); larger ones "
     "decline; on a GPU shared by k processes, 1/k of the blocks it holds at once"},
    {"pipe_blocks", "cuda_ring, cuda_pushed, cuda_pipelined", &weft_gpu_vars.pipe_blocks, "blocks",
     "WEFT_CUDA_COLL_PIPE_BLOCKS",
     "the pipelined kernel's grid (within the max_ctas / min_ctas hints and the SMs; on a GPU shared by k "
     "processes, 1/k of the blocks it holds at once)"},
    {"pipe_depth", "cuda_ring, cuda_pushed, cuda_pipelined", &weft_gpu_vars.pipe_depth, "positions",
     "WEFT_CUDA_COLL_PIPE_DEPTH",
     "slot positions per block of the pipelined kernel (512 / blocks at most): units in flight per block (auto: "
     "a ring and a bcast on 2 ranks 4, else 2); slots too small for a unit a position decline the call"},
    {"pipe_ahead", "cuda_ring, cuda_pushed, cuda_pipelined", &weft_gpu_vars.pipe_ahead, "units",
     "WEFT_CUDA_COLL_PIPE_AHEAD",
     "units a pipelined block fills ahead of the one it consumes (depth - 1 at most; auto: allreduce 1, the "
     "others 0); a ring's units a block runs at a time (1 at least, depth / 2 at most)"},
    {"pipe_split", "cuda_pushed", &weft_gpu_vars.pipe_split, "warps", "WEFT_CUDA_COLL_PIPE_SPLIT",
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
    .init = init,
    .gpu_shared = weft_gpu_shared,
    .comm_release = weft_gpu_state_release,
};
