/* allgather on device buffers through the pipelined kernel, pushing (pipelined.c, kernels.h: weft_ck_pipe_args):
 * every rank stores its units into every peer's positions, which copies them out. NVLink carries stores; every rank
 * reads only its own memory and its own input where it lies. */
#include "coll/cuda/cuda_coll.h"

WEFT_GPU_PUSHED_ALG(
    allgather, WEFT_COLL_ALLGATHER,
    "pipelined, pushing: every rank stores its units into every peer's positions, which copies them out")
