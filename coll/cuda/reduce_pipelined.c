/* reduce on device buffers through the pipelined kernel (pipelined.c, kernels.h: weft_ck_pipe_args), the peers
 * reading: its form, which the pushed and ring forms start from. */
#include "coll/cuda/cuda_coll.h"

/* Every rank produces; the root alone consumes (reduces). */
void weft_gpu_reduce_pipe(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p)
{
    int me = st->me, root = a->root;
    p->mode = 1;
    p->consume_on = me == root;
    p->read_mask = me == root ? weft_gpu_others(st->n, me) : 0;
    p->cons_mask = me == root ? 0 : 1u << root;
}

WEFT_GPU_PIPE_ALG(reduce, pipelined, WEFT_COLL_REDUCE, "pipelined, as allreduce's, the root alone reducing",
                  weft_gpu_reduce_pipe)
