/* reduce on device buffers in registered windows (window.c): the root reduces every rank's vector straight out of its
 * window, between a barrier that announces where each input lies and one that keeps a rank's input in place until its
 * peers have read it. No staging, no chunks; rules.conf says from which size the second barrier pays. */
#include "coll/cuda/cuda_coll.h"

/* The vector the root reads: only the root reads, so in place too. */
static const char *input(const weft_coll_args_t *a, size_t *need)
{
    *need = a->count * weft_gpu_esize(a);
    return weft_gpu_input(a);
}

static int steps(weft_gpu_op_t *op, const char *in, size_t need)
{
    (void)in;
    (void)need;
    return op->st->me == op->a.root ? weft_gpu_reduce(op, 0, op->a.recvbuf, op->a.count) : WEFT_SUCCESS;
}

WEFT_GPU_WINDOW_ALG(reduce, WEFT_COLL_REDUCE, "as allreduce's window form, the root alone reducing", input, steps)
