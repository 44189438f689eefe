/* reduce_scatter_block on device buffers through the pipelined kernel, pushing (pipelined.c, kernels.h:
 * weft_ck_pipe_args): each rank stores its piece of every block into that block's owner, which reduces them. NVLink
 * carries stores; every rank reads only its own memory and its own input where it lies. */
#include "coll/cuda/cuda_coll.h"

WEFT_GPU_PUSHED_ALG(
    reduce_scatter, WEFT_COLL_REDUCE_SCATTER_BLOCK,
    "pipelined, pushing: each rank stores its piece of block p into rank p's positions, which reduces them")
