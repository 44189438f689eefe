/* allgather on device buffers in registered windows (window.c): every rank copies every peer's block straight out of
 * its window into the output, between a barrier that announces where each input lies and one that keeps a rank's input
 * in place until its peers have read it. No staging, no chunks; rules.conf says from which size the second barrier
 * pays. */
#include "coll/cuda/cuda_coll.h"

/* The block the peers read: in place too (a rank's own block, which nobody writes). */
static const char *input(const weft_coll_args_t *a, size_t *need)
{
    *need = a->count * weft_gpu_esize(a);
    return (const char *)a->sendbuf;
}

/* Every peer's block, and this rank's where it is not in place already. */
static int steps(weft_gpu_op_t *op, const char *in, size_t need)
{
    int k = 0, src[WEFT_CK_MAX_RANKS];
    char *dst[WEFT_CK_MAX_RANKS];
    for (int p = 0; p < op->st->n; p++)
        if (p != op->st->me || weft_coll_rblock(&op->a, p) != in) src[k] = p, dst[k++] = weft_coll_rblock(&op->a, p);
    return weft_gpu_copy_out(op, k, src, 0, NULL, dst, need);
}

WEFT_GPU_WINDOW_ALG(allgather, WEFT_COLL_ALLGATHER,
                    "every rank copies every peer's block straight out of its registered window into the output, "
                    "between two barriers; no staging",
                    input, steps)
