/* alltoall on device buffers through the pipelined kernel (pipelined.c, kernels.h: weft_ck_pipe_args), the peers
 * reading: its form, which the pushed and ring forms start from. */
#include "coll/cuda/cuda_coll.h"

/* Copies of bytes: a unit is n pieces, one of each block; each rank takes its own piece of every peer's. */
void weft_gpu_alltoall_pipe(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p)
{
    size_t block = a->count * weft_gpu_esize(a);
    p->mode = 2;
    p->esize = 1;
    p->count = block;
    p->copy_self = 1;
    p->npieces = st->n;
    p->in_stride = block;
    p->copy_piece = st->me;
    for (int r = 0; r < st->n; r++)
        p->dst[r] = (char *)a->recvbuf + (size_t)r * block;
}

WEFT_GPU_PIPE_ALG(alltoall, pipelined, WEFT_COLL_ALLTOALL,
                  "pipelined: each block stages units of every block and copies this rank's piece of every peer's out "
                  "as their flags arrive",
                  weft_gpu_alltoall_pipe)
