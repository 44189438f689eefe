/* bcast on device buffers in registered windows (window.c): every other rank copies the root's buffer straight out of
 * its window, between a barrier that announces where each input lies and one that keeps a rank's input in place until
 * its peers have read it. No staging, no chunks; rules.conf says from which size the second barrier pays. */
#include "coll/cuda/cuda_coll.h"

/* The buffer the others read (the root's). */
static const char *input(const weft_coll_args_t *a, size_t *need)
{
    *need = a->count * weft_gpu_esize(a);
    return (const char *)a->recvbuf;
}

static int steps(weft_gpu_op_t *op, const char *in, size_t need)
{
    int src[1] = {op->a.root};
    char *dst[1] = {op->a.recvbuf};
    (void)in;
    return op->st->me == op->a.root ? WEFT_SUCCESS : weft_gpu_copy_out(op, 1, src, 0, NULL, dst, need);
}

WEFT_GPU_WINDOW_ALG(
    bcast, WEFT_COLL_BCAST,
    "every other rank copies the root's buffer straight out of its registered window, between two barriers; no staging",
    input, steps)
