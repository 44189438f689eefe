/* reduce on device buffers through the pipelined kernel, pushing (pipelined.c, kernels.h: weft_ck_pipe_args):
 * every rank stores its units into the root's positions, which reduces them. NVLink carries stores; every rank reads
 * only its own memory and its own input where it lies. */
#include "coll/cuda/cuda_coll.h"

WEFT_GPU_PUSHED_ALG(reduce, WEFT_COLL_REDUCE,
                    "pipelined, pushing: every rank stores its units into the root's positions, which reduces them")
