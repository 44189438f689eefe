/* reduce_scatter and reduce_scatter_block, ring: the input vector is cut
 * into the ranks' blocks; in n - 1 steps each rank adds the block its left
 * neighbour sends and passes it on, ending with its own fully reduced
 * block. Each block is reduced in one fixed order (reproducible). Extra
 * memory: a copy of the input vector plus one block. */
#include "coll/coll.h"

static size_t block_count(const weft_coll_args_t *a, int i)
{
    return a->rcounts ? (size_t)a->rcounts[i] : a->count;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t es = a->esize, total = 0, maxblock = 0;
    size_t *off = weft_sched_scratch(s, sizeof(size_t) * (size_t)n);
    if (!off) return weft_error(WEFT_ERR_NO_MEMORY, "reduce_scatter_ring: out of memory");
    for (int i = 0; i < n; i++) {
        off[i] = total;
        total += block_count(a, i);
        if (block_count(a, i) > maxblock) maxblock = block_count(a, i);
    }
    char *acc = weft_sched_scratch(s, total * es), *tmp = weft_sched_scratch(s, maxblock * es);
    if (!acc || !tmp)
        return weft_error(WEFT_ERR_NO_MEMORY, "reduce_scatter_ring: out of memory (%zu bytes)", total * es);
    if ((rc = weft_sched_copy(s, acc, a->sendbuf, total * es)) || (rc = weft_sched_end_round(s))) return rc;
    for (int k = 0; k < n - 1; k++) {
        int sb = weft_mod(r - k - 1, n), rb = weft_mod(r - k - 2, n);
        if ((rc = weft_sched_recv(s, tmp, block_count(a, rb) * es, weft_mod(r - 1, n))) ||
            (rc = weft_sched_send(s, acc + off[sb] * es, block_count(a, sb) * es, (r + 1) % n)) ||
            (rc = weft_sched_reduce(s, a->op, a->dtype, acc + off[rb] * es, tmp, block_count(a, rb))) ||
            (rc = weft_sched_end_round(s)))
            return rc;
    }
    if ((rc = weft_sched_op_finalize(s, a->op, a->dtype, acc + off[r] * es, block_count(a, r), n)) ||
        (rc = weft_sched_end_round(s)) ||
        (rc = weft_sched_copy(s, a->recvbuf, acc + off[r] * es, block_count(a, r) * es)))
        return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_reduce_scatter_ring = {
    .name = "ring",
    .kind = WEFT_COLL_REDUCE_SCATTER,
    .description = "ring, n-1 steps, a copy of the input as scratch",
    .build = build,
};

const weft_coll_alg_t weft_alg_reduce_scatter_block_ring = {
    .name = "ring",
    .kind = WEFT_COLL_REDUCE_SCATTER_BLOCK,
    .description = "ring, n-1 steps, a copy of the input as scratch",
    .build = build,
};
