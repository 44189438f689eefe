/* alltoall on device buffers in one shot through the scratch slots (staging.c): every rank stages its blocks into its
 * slot, passes a barrier, then copies its block out of every rank's slot; in slot-sized chunks, one barrier each, or
 * one launch of one block for a small call (fused). Takes every call the kernels can run: the last of the forms
 * rules.conf tries. */
#include "coll/cuda/cuda_coll.h"

static int steps(weft_gpu_op_t *op)
{
    const weft_coll_args_t *a = &op->a;
    int n = op->st->n, rc = WEFT_SUCCESS, src[WEFT_CK_MAX_RANKS];
    size_t block = a->count * weft_gpu_esize(a), per = op->st->slot / (size_t)n, step[WEFT_CK_MAX_RANKS];
    const char *in = weft_gpu_input(a);
    char *dst[WEFT_CK_MAX_RANKS];
    for (size_t o = 0; !rc && o < block; o += per) {
        size_t k = block - o < per ? block - o : per;
        for (int p = 0; !rc && p < n; p++)
            rc = weft_gpu_stage(op, in + (size_t)p * block + o, (size_t)p * k, k);
        if (!rc && !(rc = weft_gpu_barrier(op))) {
            for (int p = 0; p < n; p++)
                src[p] = p, dst[p] = (char *)a->recvbuf + (size_t)p * block + o, step[p] = 0;
            rc = weft_gpu_copy_out(op, n, src, (size_t)op->st->me * k, step, dst, k);
        }
    }
    return rc;
}

WEFT_GPU_ONE_SHOT_ALG(alltoall, one_shot, WEFT_COLL_ALLTOALL,
                      "one shot: every rank stages its blocks, passes a barrier kernel, then copies its block of every "
                      "peer's slot; fused up to WEFT_CUDA_COLL_FUSED",
                      steps)
