/* reduce_scatter_block on device buffers in one shot through the scratch slots (staging.c): every rank stages its
 * vector into its slot, passes a barrier, then reduces its own block of every rank's slot; in slot-sized chunks, one
 * barrier each, or one launch of one block for a small call (fused). Takes every call the kernels can run: the last of
 * the forms rules.conf tries. */
#include "coll/cuda/cuda_coll.h"

static int steps(weft_gpu_op_t *op)
{
    const weft_coll_args_t *a = &op->a;
    int n = op->st->n;
    size_t es = weft_gpu_esize(a), per = op->st->slot / es / (size_t)n; /* elements of each rank's block a chunk */
    const char *in = weft_gpu_input(a);
    int rc = WEFT_SUCCESS;
    for (size_t o = 0; !rc && o < a->count; o += per) {
        size_t k = a->count - o < per ? a->count - o : per;
        for (int p = 0; !rc && p < n; p++)
            rc = weft_gpu_stage(op, in + ((size_t)p * a->count + o) * es, (size_t)p * k * es, k * es);
        if (!rc && !(rc = weft_gpu_barrier(op)))
            rc = weft_gpu_reduce(op, (size_t)op->st->me * k * es, (char *)a->recvbuf + o * es, k);
    }
    return rc;
}

WEFT_GPU_ONE_SHOT_ALG(reduce_scatter, one_shot, WEFT_COLL_REDUCE_SCATTER_BLOCK,
                      "one shot: every rank stages its vector, passes a barrier kernel, then reduces its own block of "
                      "every peer's slot; fused up to WEFT_CUDA_COLL_FUSED",
                      steps)
