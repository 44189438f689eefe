/* coll/base: every collective over point-to-point messages, any
 * communicator shape; one file per algorithm. It keeps no state on a
 * communicator and owns no variable. */
#include "coll/coll.h"

extern const weft_coll_alg_t weft_alg_barrier_dissemination, weft_alg_bcast_binomial, weft_alg_reduce_binomial,
    weft_alg_allreduce_recursive_doubling, weft_alg_allreduce_ring, weft_alg_allgather_bruck, weft_alg_allgather_ring,
    weft_alg_allgatherv_ring, weft_alg_gather_linear, weft_alg_gatherv_linear, weft_alg_scatter_linear,
    weft_alg_scatterv_linear, weft_alg_reduce_scatter_ring, weft_alg_reduce_scatter_block_ring,
    weft_alg_alltoall_pairwise, weft_alg_alltoallv_pairwise, weft_alg_scan_linear, weft_alg_exscan_linear,
    weft_alg_allgather_recursive_doubling, weft_alg_bcast_scatter_allgather, weft_alg_alltoall_bruck,
    weft_alg_alltoall_linear, weft_alg_gather_binomial, weft_alg_scatter_binomial, weft_alg_allreduce_rabenseifner,
    weft_alg_allreduce_knomial, weft_alg_reduce_scatter_recursive_halving,
    weft_alg_reduce_scatter_block_recursive_halving, weft_alg_reduce_reduce_scatter_gather;

static const weft_coll_alg_t *const algorithms[] = {
    &weft_alg_barrier_dissemination,
    &weft_alg_bcast_binomial,
    &weft_alg_bcast_scatter_allgather,
    &weft_alg_reduce_binomial,
    &weft_alg_reduce_reduce_scatter_gather,
    &weft_alg_allreduce_recursive_doubling,
    &weft_alg_allreduce_ring,
    &weft_alg_allreduce_rabenseifner,
    &weft_alg_allreduce_knomial,
    &weft_alg_allgather_bruck,
    &weft_alg_allgather_ring,
    &weft_alg_allgather_recursive_doubling,
    &weft_alg_allgatherv_ring,
    &weft_alg_gather_linear,
    &weft_alg_gather_binomial,
    &weft_alg_gatherv_linear,
    &weft_alg_scatter_linear,
    &weft_alg_scatter_binomial,
    &weft_alg_scatterv_linear,
    &weft_alg_reduce_scatter_ring,
    &weft_alg_reduce_scatter_block_ring,
    &weft_alg_reduce_scatter_recursive_halving,
    &weft_alg_reduce_scatter_block_recursive_halving,
    &weft_alg_alltoall_pairwise,
    &weft_alg_alltoall_bruck,
    &weft_alg_alltoall_linear,
    &weft_alg_alltoallv_pairwise,
    &weft_alg_scan_linear,
    &weft_alg_exscan_linear,
    NULL,
};

/* Built-in segment size of the segmented algorithms (coll.h). */
static const int seg_bytes = (int)WEFT_COLL_SEG_BYTES;

static const weft_coll_param_t params[] = {
    {"segment", "reduce binomial, reduce_scatter ring, allreduce ring, scan linear", &seg_bytes, "bytes", NULL,
     "large messages move in segments of at most this size (two segments of scratch)"},
};

const weft_coll_component_t weft_coll_base = {
    .id = WEFT_COLL_COMP_BASE,
    .name = "base",
    .description = "every collective over point-to-point messages (UCX), any communicator",
    .memtypes = WEFT_MEM_BIT(WEFT_MEM_HOST),
    .algorithms = algorithms,
    .params = params,
    .nparams = (int)(sizeof(params) / sizeof(params[0])),
};
