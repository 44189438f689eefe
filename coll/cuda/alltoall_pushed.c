/* alltoall on device buffers through the pipelined kernel, pushing (pipelined.c, kernels.h: weft_ck_pipe_args):
 * every rank stores its piece of block p into rank p's positions, which copies it out. NVLink carries stores; every
 * rank reads only its own memory and its own input where it lies. */
#include "coll/cuda/cuda_coll.h"

WEFT_GPU_PUSHED_ALG(
    alltoall, WEFT_COLL_ALLTOALL,
    "pipelined, pushing: every rank stores its piece of block p into rank p's positions, which copies it out")
