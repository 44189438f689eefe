/* reduce_scatter_block on device buffers in registered windows (window.c): every rank reduces its block of every peer's
 * vector straight out of their windows, between a barrier that announces where each input lies and one that keeps a
 * rank's input in place until its peers have read it. No staging, no chunks; rules.conf says from which size the second
 * barrier pays. */
#include "coll/cuda/cuda_coll.h"

/* The vector the peers read, out of place only. */
static const char *input(const weft_coll_args_t *a, size_t *need)
{
    *need = (size_t)a->comm->size * a->count * weft_gpu_esize(a);
    return weft_gpu_input_apart(a);
}

/* This rank's block of every rank's vector. */
static int steps(weft_gpu_op_t *op, const char *in, size_t need)
{
    (void)in;
    return weft_gpu_reduce(op, (size_t)op->st->me * (need / (size_t)op->st->n), op->a.recvbuf, op->a.count);
}

WEFT_GPU_WINDOW_ALG(reduce_scatter, WEFT_COLL_REDUCE_SCATTER_BLOCK,
                    "every rank reduces its block of every peer's vector straight out of their registered windows, "
                    "between two barriers; no staging",
                    input, steps)
