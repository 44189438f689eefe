/* scatter, binomial tree rooted at root: the root sends each child the
 * blocks of the child's whole subtree as one message (farthest first); an
 * inner rank keeps its own block and passes the rest on the same way.
 * ceil(log2 n) steps, any n and any root; the root sends ceil(log2 n)
 * messages instead of n - 1. Extra memory: an inner rank receives its
 * subtree packed (subtree size blocks); leaves and the root need none (the
 * root sends straight from its buffer; where a child's blocks wrap past
 * rank n - 1 it sends them as two messages). */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, root = a->root, vr = weft_mod(r - root, n), rc;
    size_t block = a->count * a->esize;
    int sub = weft_coll_binomial_subtree(vr, n), top = 1;
    while (top * 2 < sub)
        top *= 2;
    if (vr == 0) {
        const char *send = a->sendbuf;
        for (int mask = top; mask > 0 && mask < n; mask >>= 1) {
            int child = (root + mask) % n, cs = weft_coll_binomial_subtree(mask, n);
            size_t first = weft_coll_binomial_first_part(child, cs, n);
            if ((rc = weft_sched_send(s, send + (size_t)child * block, first * block, child)) ||
                ((size_t)cs > first && (rc = weft_sched_send(s, send, ((size_t)cs - first) * block, child))))
                return rc;
        }
        if ((rc = weft_sched_copy(s, a->recvbuf, send + (size_t)r * block, block))) return rc;
        return weft_sched_end_round(s);
    }
    int parent = (vr - (vr & -vr) + root) % n;
    if (sub == 1) {
        if ((rc = weft_sched_recv(s, a->recvbuf, block, parent))) return rc;
        return weft_sched_end_round(s);
    }
    char *pk = weft_sched_scratch(s, (size_t)sub * block);
    if (!pk) return weft_error(WEFT_ERR_NO_MEMORY, "scatter_binomial: out of memory for %d x %zu bytes", sub, block);
    size_t first = parent == root ? weft_coll_binomial_first_part(r, sub, n) : (size_t)sub;
    if ((rc = weft_sched_recv(s, pk, first * block, parent)) ||
        ((size_t)sub > first && (rc = weft_sched_recv(s, pk + first * block, ((size_t)sub - first) * block, parent))) ||
        (rc = weft_sched_copy(s, a->recvbuf, pk, block)) || (rc = weft_sched_end_round(s)))
        return rc;
    for (int mask = top; mask > 0; mask >>= 1)
        if ((rc = weft_sched_send(s, pk + (size_t)mask * block,
                                  (size_t)weft_coll_binomial_subtree(vr + mask, n) * block, (r + mask) % n)))
            return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_scatter_binomial = {
    .name = "binomial",
    .kind = WEFT_COLL_SCATTER,
    .description = "binomial tree, subtrees packed on inner ranks, ceil(log2 n) steps; small messages, many ranks",
    .build = build,
};
