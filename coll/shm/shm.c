/* coll/shm: collectives among the ranks of one node through a shared
 * segment per communicator (segment.h: its life cycle and flag protocol;
 * one file per algorithm). Its state on a communicator is the segment,
 * created on the first shared-memory call and released with the
 * communicator. */
#include "coll/shm/reduce_chunked.h"
#include "coll/shm/segment.h"

extern const weft_coll_alg_t weft_alg_barrier_shm, weft_alg_bcast_shm, weft_alg_reduce_shm, weft_alg_allreduce_shm,
    weft_alg_allgather_shm, weft_alg_reduce_scatter_shm, weft_alg_reduce_scatter_block_shm, weft_alg_bcast_shm_cma,
    weft_alg_allgather_shm_cma, weft_alg_allreduce_shm_cma, weft_alg_barrier_shm_allread,
    weft_alg_allreduce_shm_allread, weft_alg_allreduce_shm_chunked, weft_alg_allreduce_shm_ll, weft_alg_alltoall_shm,
    weft_alg_reduce_scatter_shm_cma, weft_alg_reduce_scatter_block_shm_cma, weft_alg_alltoall_shm_cma;

static const weft_coll_alg_t *const algorithms[] = {
    &weft_alg_barrier_shm,
    &weft_alg_bcast_shm,
    &weft_alg_reduce_shm,
    &weft_alg_allreduce_shm,
    &weft_alg_allgather_shm,
    &weft_alg_reduce_scatter_shm,
    &weft_alg_reduce_scatter_block_shm,
    &weft_alg_bcast_shm_cma,
    &weft_alg_allgather_shm_cma,
    &weft_alg_allreduce_shm_cma,
    &weft_alg_barrier_shm_allread,
    &weft_alg_allreduce_shm_allread,
    &weft_alg_allreduce_shm_chunked,
    &weft_alg_allreduce_shm_ll,
    &weft_alg_alltoall_shm,
    &weft_alg_reduce_scatter_shm_cma,
    &weft_alg_reduce_scatter_block_shm_cma,
    &weft_alg_alltoall_shm_cma,
    NULL,
};

weft_shm_vars_t weft_shm_vars;

static const weft_var_t vars[] = {
    {"WEFT_SHM_CMA", WEFT_VAR_INT | WEFT_VAR_AGREE, "1",
     "0: the single-copy shared-memory collectives (shm_cma, process_vm_readv) decline and the base algorithms run "
     "(the same on every rank)",
     &weft_shm_vars.cma, 0},
    {"WEFT_SHM_RADIX", WEFT_VAR_INT, "8",
     "radix of the shared-memory flag trees (tree barrier, bcast, reduce, small allreduce; groups of this many "
     "consecutive ranks meet first) and group size of shm_allread allreduce (over this many ranks it reads in "
     "two rounds: its group's inputs, then one partial per group); 2 or more; the segment's creator decides for "
     "every member",
     &weft_shm_vars.radix, 0},
    {"WEFT_SHM_CHUNK_MIN", WEFT_VAR_INT, "2048",
     "shared-memory allreduce (shm): vectors from this many bytes (on 4 or more ranks) are reduced one "
     "chunk per rank; smaller ones go up the flag tree (the segment's creator decides for every member)",
     &weft_shm_vars.chunk_min, 0},
    {"WEFT_SHM_FLAT_MAX", WEFT_VAR_INT, "2048",
     "shared-memory bcast and small allreduce: messages (results) up to this many bytes are read by every rank "
     "straight from the root's slot (one hop) instead of flowing down the flag tree (the segment's creator "
     "decides for every member)",
     &weft_shm_vars.flat_max, 0},
    {"WEFT_SHM_FLAT_PIECES", WEFT_VAR_INT, "16",
     "shared-memory bcast beyond WEFT_SHM_FLAT_MAX: on up to this many ranks every rank reads the message (over "
     "a slot, each slot-sized piece) straight from the root's slot, on more it flows down the flag tree "
     "(measured on 16 cores at 256 KiB - 4 MiB: 0.67-0.89 of the tree's time on 16 ranks, level on 8; at 4-64 "
     "KiB the tree's two hops took 1.20-1.38x MPICH's time on 16 ranks); 0: always the tree (the segment's "
     "creator decides for every member)",
     &weft_shm_vars.flat_pieces, 0},
};

static const int slot = (int)WEFT_SHM_SLOT, cma_min = (int)WEFT_SHM_CMA_MIN, chunked_ranks = WEFT_SHM_CHUNKED_RANKS,
                 ll_max = (int)WEFT_SHM_LL_MAX, inline_max = WEFT_SHM_INLINE, nbuf = WEFT_SHM_NBUF;

static const weft_coll_param_t params[] = {
    {"chunk_min", "allreduce shm", &weft_shm_vars.chunk_min, "bytes", "WEFT_SHM_CHUNK_MIN",
     "from this size each rank reduces one chunk instead of the flag tree"},
    {"chunked_ranks", "allreduce shm", &chunked_ranks, "ranks", NULL,
     "chunk_min applies from this many ranks (fewer: the flag tree at every size)"},
    {"flat_max", "bcast shm, allreduce shm", &weft_shm_vars.flat_max, "bytes", "WEFT_SHM_FLAT_MAX",
     "results up to this size are read straight from the root's slot"},
    {"flat_pieces", "bcast shm", &weft_shm_vars.flat_pieces, "ranks", "WEFT_SHM_FLAT_PIECES",
     "beyond flat_max, messages (and pieces) read straight from the root's slot up to this many ranks"},
    {"radix", "shm trees, shm_allread", &weft_shm_vars.radix, "ranks", "WEFT_SHM_RADIX",
     "radix of the flag trees; shm_allread reads in two rounds above it"},
    {"slot", "every shm algorithm but shm_cma", &slot, "bytes", NULL,
     "largest piece one collective moves through a slot; larger messages go in pieces of this size (allgather, "
     "reduce_scatter: decline above it)"},
    {"inline", "shm trees", &inline_max, "bytes", NULL, "messages up to this size ride in the slot's flag line"},
    {"ll_max", "allreduce shm_ll", &ll_max, "bytes", NULL, "largest vector shm_ll takes (its flagged lines)"},
    {"cma_min", "shm_cma", &cma_min, "bytes", NULL, "shm_cma declines below this size"},
    {"nbuf", "every shm algorithm", &nbuf, "slots", NULL,
     "slots per rank: collectives in flight between the fastest and the slowest rank"},
};

/* Segments of jobs killed before all their ranks attached (rare: the name
 * is unlinked once every rank mapped it); one rank per node looks. */
static int shm_init(void)
{
    if (weft_g.local_rank == 0) weft_shm_sweep();
    return WEFT_SUCCESS;
}

const weft_coll_component_t weft_coll_shm = {
    .id = WEFT_COLL_COMP_SHM,
    .name = "shm",
    .description = "one node: flags and slots in a segment shared by the members; single copy with CMA",
    .memtypes = WEFT_MEM_BIT(WEFT_MEM_HOST),
    .algorithms = algorithms,
    .vars = vars,
    .nvars = (int)(sizeof(vars) / sizeof(vars[0])),
    .params = params,
    .nparams = (int)(sizeof(params) / sizeof(params[0])),
    .init = shm_init,
    .unsettled = weft_shm_unsettled,
    .comm_release = weft_shm_comm_release,
};
