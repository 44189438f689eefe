/* alltoall on device buffers in registered windows (window.c): every rank copies its block of every peer's input
 * straight out of their windows, between a barrier that announces where each input lies and one that keeps a rank's
 * input in place until its peers have read it. No staging, no chunks; rules.conf says from which size the second
 * barrier pays. */
#include "coll/cuda/cuda_coll.h"

/* The blocks the peers read, out of place only. */
static const char *input(const weft_coll_args_t *a, size_t *need)
{
    *need = (size_t)a->comm->size * a->count * weft_gpu_esize(a);
    return weft_gpu_input_apart(a);
}

/* This rank's block of every rank's input. */
static int steps(weft_gpu_op_t *op, const char *in, size_t need)
{
    size_t block = need / (size_t)op->st->n, step[WEFT_CK_MAX_RANKS];
    int src[WEFT_CK_MAX_RANKS];
    char *dst[WEFT_CK_MAX_RANKS];
    (void)in;
    for (int p = 0; p < op->st->n; p++)
        src[p] = p, dst[p] = (char *)op->a.recvbuf + (size_t)p * block, step[p] = 0;
    return weft_gpu_copy_out(op, op->st->n, src, (size_t)op->st->me * block, step, dst, block);
}

WEFT_GPU_WINDOW_ALG(alltoall, WEFT_COLL_ALLTOALL,
                    "every rank copies its block of every peer's input straight out of their registered windows, "
                    "between two barriers; no staging",
                    input, steps)
