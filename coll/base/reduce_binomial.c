/* reduce, binomial tree towards root: in step k a rank whose bit k is set
 * sends its partial result to rank - 2^k and leaves; the others add what
 * they receive. ceil(log2 n) steps, any n; the order of additions is fixed
 * by n and root, so results are reproducible run to run. Extra memory:
 * one message-sized receive buffer (two on non-roots). */
#include "coll/coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, vr = weft_mod(a->comm->rank - a->root, n), rc, mask = 1;
    size_t bytes = a->count * a->esize;
    int root = vr == 0;
    char *acc = root ? a->recvbuf : weft_sched_scratch(s, bytes);
    char *tmp = n > 1 ? weft_sched_scratch(s, bytes) : NULL;
    if (!acc || (n > 1 && !tmp))
        return weft_error(WEFT_ERR_NO_MEMORY, "reduce_binomial: out of memory (%zu bytes)", bytes);
    if ((rc = weft_sched_copy(s, acc, a->sendbuf, bytes)) || (rc = weft_sched_end_round(s))) return rc;
    while (mask < n) {
        if (vr & mask) {
            if ((rc = weft_sched_send(s, acc, bytes, (vr - mask + a->root) % n)) || (rc = weft_sched_end_round(s)))
                return rc;
            return WEFT_SUCCESS;
        }
        if (vr + mask < n) {
            if ((rc = weft_sched_recv(s, tmp, bytes, (vr + mask + a->root) % n)) ||
                (rc = weft_sched_reduce(s, a->op, a->dtype, acc, tmp, a->count)) || (rc = weft_sched_end_round(s)))
                return rc;
        }
        mask <<= 1;
    }
    if ((rc = weft_sched_op_finalize(s, a->op, a->dtype, acc, a->count, n))) return rc;
    return weft_sched_end_round(s);
}

const weft_coll_alg_t weft_alg_reduce_binomial = {
    .name = "binomial",
    .kind = WEFT_COLL_REDUCE,
    .description = "binomial tree to the root, ceil(log2 n) steps, one message-sized buffer",
    .build = build,
};
