/* allgather on device buffers in one shot through the scratch slots (staging.c): every rank stages its block into its
 * slot, passes a barrier, then copies every rank's block out of its slot; in slot-sized chunks, one barrier each, or
 * one launch of one block for a small call (fused). Takes every call the kernels can run: the last of the forms
 * rules.conf tries. */
#include "coll/cuda/cuda_coll.h"

static int steps(weft_gpu_op_t *op)
{
    const weft_coll_args_t *a = &op->a;
    size_t block = a->count * weft_gpu_esize(a), slot = op->st->slot;
    const char *in = weft_gpu_input(a);
    int rc = WEFT_SUCCESS, src[WEFT_CK_MAX_RANKS];
    char *dst[WEFT_CK_MAX_RANKS];
    for (size_t o = 0; !rc && o < block; o += slot) {
        size_t k = block - o < slot ? block - o : slot;
        if (!(rc = weft_gpu_stage(op, in + o, 0, k)) && !(rc = weft_gpu_barrier(op))) {
            for (int p = 0; p < op->st->n; p++)
                src[p] = p, dst[p] = weft_coll_rblock(a, p) + o;
            rc = weft_gpu_copy_out(op, op->st->n, src, 0, NULL, dst, k);
        }
    }
    return rc;
}

WEFT_GPU_ONE_SHOT_ALG(allgather, one_shot, WEFT_COLL_ALLGATHER,
                      "one shot: every rank stages its block, passes a barrier kernel, then copies every peer's out of "
                      "its slot; fused up to WEFT_CUDA_COLL_FUSED",
                      steps)
