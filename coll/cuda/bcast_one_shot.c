/* bcast on device buffers in one shot through the scratch slots (staging.c): the root stages its buffer into its slot,
 * a barrier, every other rank copies it out of the root's slot; in slot-sized chunks, one barrier each, or one launch
 * of one block for a small call (fused). Takes every call the kernels can run: the last of the forms rules.conf tries.
 */
#include "coll/cuda/cuda_coll.h"

static int steps(weft_gpu_op_t *op)
{
    const weft_coll_args_t *a = &op->a;
    size_t bytes = a->count * weft_gpu_esize(a), slot = op->st->slot;
    char *out = a->recvbuf;
    int rc = WEFT_SUCCESS, me = op->st->me, src[1] = {a->root};
    for (size_t o = 0; !rc && o < bytes; o += slot) {
        size_t k = bytes - o < slot ? bytes - o : slot;
        char *dst[1] = {out + o};
        if (me == a->root) rc = weft_gpu_stage(op, out + o, 0, k);
        if (!rc) rc = weft_gpu_barrier(op);
        if (!rc && me != a->root) rc = weft_gpu_copy_out(op, 1, src, 0, NULL, dst, k);
    }
    return rc;
}

WEFT_GPU_ONE_SHOT_ALG(bcast, one_shot, WEFT_COLL_BCAST,
                      "one shot: the root stages its buffer, a barrier kernel, every other rank copies it out of the "
                      "root's slot; fused up to WEFT_CUDA_COLL_FUSED",
                      steps)
