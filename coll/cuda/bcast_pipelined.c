/* bcast on device buffers through the pipelined kernel (pipelined.c, kernels.h: weft_ck_pipe_args), the peers
 * reading: its form, which the pushed and ring forms start from. */
#include "coll/cuda/cuda_coll.h"

/* Copies of bytes: the root produces, every other rank consumes. */
void weft_gpu_bcast_pipe(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p)
{
    size_t block = a->count * weft_gpu_esize(a);
    int me = st->me, root = a->root;
    p->mode = 2;
    p->esize = 1;
    p->count = block;
    for (int r = 0; r < st->n; r++)
        p->dst[r] = (char *)a->recvbuf + (size_t)r * block;
    p->in = a->recvbuf;
    p->dst[root] = a->recvbuf;
    p->stage_on = me == root;
    p->consume_on = me != root;
    p->read_mask = me == root ? 0 : 1u << root;
    p->cons_mask = me == root ? weft_gpu_others(st->n, me) : 0;
}

WEFT_GPU_PIPE_ALG(
    bcast, pipelined, WEFT_COLL_BCAST,
    "pipelined: the root stages units, every other rank copies them out of its positions as their flags arrive",
    weft_gpu_bcast_pipe)
