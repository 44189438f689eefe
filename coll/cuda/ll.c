/* coll/cuda's LL kernel (kernels.h: weft_ck_ll_args): a small call in one
 * launch of a few blocks, no barrier, no staging; every 8 bytes of a piece
 * go with the call's sequence number beside them straight into the peer's
 * LL area. The algorithms (*_ll.c) say who sends whom which piece and what
 * becomes of the pieces a rank takes; this file launches. */
#include "coll/cuda/cuda_coll.h"

#include <string.h>

int weft_gpu_ll_takes(const weft_coll_args_t *a, const weft_gpu_state_t *st)
{
    size_t es = weft_gpu_esize(a), piece = a->count * es;
    int reduces =
        a->kind == WEFT_COLL_ALLREDUCE || a->kind == WEFT_COLL_REDUCE || a->kind == WEFT_COLL_REDUCE_SCATTER_BLOCK;
    if (reduces && es > 8) return weft_coll_decline("coll/cuda: LL lines of 8 bytes hold no %zu-byte element", es);
    if (!piece || piece > weft_ck_ll_max(st->n))
        return weft_coll_decline("coll/cuda: LL pieces of %zu bytes (the LL area holds %zu on %d ranks)", piece,
                                 (size_t)weft_ck_ll_max(st->n), st->n);
    return WEFT_SUCCESS;
}

void weft_gpu_ll_init(const weft_gpu_op_t *op, weft_ck_ll_args_t *l, size_t stride)
{
    const weft_gpu_state_t *st = op->st;
    memset(l, 0, sizeof(*l));
    l->ctl = weft_gpu_ctl(st);
    l->nranks = st->n;
    l->rank = st->me;
    l->send_mask = l->recv_mask = weft_gpu_others(st->n, st->me);
    for (int r = 0; r < st->n; r++) {
        l->scratch[r] = (char *)(uintptr_t)st->peer[r];
        l->src[r] = weft_gpu_input(&op->a) + (size_t)r * stride;
    }
    l->op = (int)op->a.op;
    l->count = op->a.count * weft_gpu_esize(&op->a); /* copies: bytes */
    l->esize = 1;
    l->slot = weft_ck_ll_slot(st->n);
}

/* A line per thread per peer: a block per 4 KiB of a piece (one block's polls of 4 lines a peer made 16 KiB pieces
 * slower than staging in a graph); within the hints, then within ll_most: the blocks wait on the peers' blocks, so
 * every rank's must be resident at once (a grid that fills the GPU, resident first, keeps its peers' blocks from
 * ever starting: on a shared GPU the kernels wait out the deadline); a piece of fewer lines, one block of as many
 * warps as it needs. */
int weft_gpu_ll_launch(weft_gpu_op_t *op, weft_ck_ll_args_t *l, int reduce)
{
    const weft_gpu_state_t *st = op->st;
    if (reduce) {
        l->count = op->a.count;
        l->esize = weft_gpu_esize(&op->a);
    }
    size_t lines = (l->count * l->esize + 7) / 8;
    size_t threads = lines >= WEFT_GPU_LL_THREADS ? WEFT_GPU_LL_THREADS : lines <= 32 ? 32 : (lines + 31) / 32 * 32;
    size_t blocks = weft_gpu_within_cta_hints(st->comm, (lines + threads - 1) / threads);
    if (blocks > st->ll_most) blocks = st->ll_most;
    return weft_gpu_launch(op, reduce ? WEFT_GPU_K_LL_REDUCE : WEFT_GPU_K_LL_COPY, op->a.dtype, l->op,
                           blocks ? (unsigned)blocks : 1, 1, (unsigned)threads, l, "launching the LL kernel");
}
