/* allreduce on device buffers in registered windows (window.c): every rank reduces every peer's vector straight out of
 * its window into its output, in rank order, between a barrier that announces where each input lies and one that keeps
 * a rank's input in place until its peers have read it. No staging, no chunks; rules.conf says from which size the
 * second barrier pays. */
#include "coll/cuda/cuda_coll.h"

/* The vector the peers read, out of place only. */
static const char *input(const weft_coll_args_t *a, size_t *need)
{
    *need = a->count * weft_gpu_esize(a);
    return weft_gpu_input_apart(a);
}

static int steps(weft_gpu_op_t *op, const char *in, size_t need)
{
    (void)in;
    (void)need;
    return weft_gpu_reduce(op, 0, op->a.recvbuf, op->a.count);
}

WEFT_GPU_WINDOW_ALG(allreduce, WEFT_COLL_ALLREDUCE,
                    "one shot out of registered windows: a barrier announcing where each rank's vector lies, every "
                    "rank reduces every peer's straight out of its window, a barrier; no staging, no chunks",
                    input, steps)
