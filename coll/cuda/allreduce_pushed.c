/* allreduce on device buffers through the pipelined kernel, pushing (pipelined.c, kernels.h: weft_ck_pipe_args):
 * a reduce-scatter whose reduced parts every rank then pushes to all, unit by unit (two shots overlapped: about 2 x the
 * vector crosses per rank, not n - 1 x). NVLink carries stores; every rank reads only its own memory and its own input
 * where it lies. */
#include "coll/cuda/cuda_coll.h"

static void form(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p)
{
    weft_gpu_allreduce_pipe(a, st, p);
    p->push = 1;
    if (st->n > 1) { /* two phases over the vector's n parts */
        p->mode = 3;
        p->npieces = st->n;
        weft_gpu_pipe_parts(a, st->n, p);
        p->red_piece = st->me;
    }
}

WEFT_GPU_PIPE_ALG(allreduce, pushed, WEFT_COLL_ALLREDUCE,
                  "pipelined, pushing: each rank stores its units into its peers' positions; a reduce-scatter whose "
                  "reduced parts every rank then pushes to all (two shots overlapped)",
                  form)
