/* gather, binomial tree rooted at root: a rank at distance v from the root
 * gathers the blocks of its subtree (v .. v + lowbit(v) - 1) from its
 * children, all at once, packed in rank-distance order behind its own, and
 * sends them to its parent as one message. ceil(log2 n) steps, any n and
 * any root; the root takes ceil(log2 n) messages instead of n - 1.
 * Extra memory: an inner rank packs its subtree (subtree size blocks);
 * leaves and the root need none (the root receives straight into place; a
 * child whose blocks wrap past rank n - 1 sends them as two messages). */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, root = a->root, vr = weft_mod(r - root, n), rc;
    size_t block = a->count * a->esize;
    int sub = weft_coll_binomial_subtree(vr, n);
    if (vr == 0) {
        for (int mask = 1; mask < n; mask <<= 1) {
            int child = (root + mask) % n, cs = weft_coll_binomial_subtree(mask, n);
            size_t first = weft_coll_binomial_first_part(child, cs, n);
            if ((rc = weft_sched_recv(s, weft_coll_rblock(a, child), first * block, child)) ||
                ((size_t)cs > first &&
                 (rc = weft_sched_recv(s, weft_coll_rblock(a, 0), ((size_t)cs - first) * block, child))))
                return rc;
        }
        if ((rc = weft_sched_copy(s, weft_coll_rblock(a, r), a->sendbuf, block))) return rc;
        return weft_sched_end_round(s);
    }
    const char *data = a->sendbuf;
    if (sub > 1) {
        char *pk = weft_sched_scratch(s, (size_t)sub * block);
        if (!pk) return weft_error(WEFT_ERR_NO_MEMORY, "gather_binomial: out of memory for %d x %zu bytes", sub, block);
        for (int mask = 1; mask < sub; mask <<= 1)
            if ((rc = weft_sched_recv(s, pk + (size_t)mask * block,
                                      (size_t)weft_coll_binomial_subtree(vr + mask, n) * block, (r + mask) % n)))
                return rc;
        if ((rc = weft_sched_copy(s, pk, a->sendbuf, block)) || (rc = weft_sched_end_round(s))) return rc;
        data = pk;
    }
    int parent = vr - (vr & -vr);
    size_t first = parent == 0 ? weft_coll_binomial_first_part(r, sub, n) : (size_t)sub;
    if ((rc = weft_sched_send(s, data, first * block, (parent + root) % n)) ||
        ((size_t)sub > first &&
         (rc = weft_sched_send(s, data + first * block, ((size_t)sub - first) * block, (parent + root) % n))))
        return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_gather_binomial = {
    .name = "binomial",
    .kind = WEFT_COLL_GATHER,
    .description = "binomial tree, subtrees packed on inner ranks, ceil(log2 n) steps; small messages, many ranks",
    .build = build,
};
