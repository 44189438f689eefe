/* The fold of n ranks onto the largest power of two (builders.h): how
 * recursive doubling, recursive halving, Rabenseifner and reduce_scatter_gather
 * handle any n instead of declining. */
#include "coll/base/builders.h"

void weft_coll_fold_init(weft_coll_fold_t *f, int n, int rank, int root, int odd_survives)
{
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    int v = weft_mod(rank - root, n);
    f->n = n;
    f->p = p;
    f->rem = n - p;
    f->root = root;
    f->odd_survives = odd_survives ? 1 : 0;
    if (v < 2 * f->rem) {
        f->newrank = v % 2 == f->odd_survives ? v / 2 : -1;
        f->partner = ((v ^ 1) + root) % n;
    } else {
        f->newrank = v - f->rem;
        f->partner = -1;
    }
}

int weft_coll_fold_first(const weft_coll_fold_t *f, int i)
{
    return i < f->rem ? 2 * i : i + f->rem;
}

int weft_coll_fold_rank(const weft_coll_fold_t *f, int i)
{
    return ((i < f->rem ? 2 * i + f->odd_survives : i + f->rem) + f->root) % f->n;
}

int weft_coll_fold_in(weft_sched_t *s, const weft_coll_fold_t *f, const void *send, void *recv, size_t bytes)
{
    if (f->partner < 0) return WEFT_SUCCESS;
    int rc = f->newrank < 0 ? weft_sched_send(s, send, bytes, f->partner) : weft_sched_recv(s, recv, bytes, f->partner);
    return rc ? rc : weft_sched_end_round(s);
}

int weft_coll_fold_in_reduce(weft_sched_t *s, const weft_coll_fold_t *f, const weft_coll_args_t *a, const void *mine,
                             char *acc, char *tmp, size_t count)
{
    if (f->partner < 0 || f->newrank < 0) return weft_coll_fold_in(s, f, mine, NULL, count * a->esize);
    /* Where mine is not acc, receiving into acc saves copying mine there
     * (and puts the partner's operand first). */
    char *into = mine == acc ? tmp : acc;
    const void *other = mine == acc ? tmp : mine;
    int rc;
    if ((rc = weft_sched_recv(s, into, count * a->esize, f->partner)) ||
        (rc = weft_sched_reduce(s, a->op, a->dtype, acc, other, count)))
        return rc;
    return weft_sched_end_round(s);
}

int weft_coll_fold_out(weft_sched_t *s, const weft_coll_fold_t *f, void *buf, size_t bytes)
{
    if (f->partner < 0) return WEFT_SUCCESS;
    int rc = weft_sched_end_round(s);
    if (rc) return rc;
    return f->newrank < 0 ? weft_sched_recv(s, buf, bytes, f->partner) : weft_sched_send(s, buf, bytes, f->partner);
}
