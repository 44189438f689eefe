/* barrier, shared memory: a k-way dissemination barrier over flags
 * (k = WEFT_SHM_RADIX). In round j each rank raises its step counter and
 * waits until the k - 1 ranks rank - i k^j (i = 1..k-1, mod n) reached the
 * same round, so after ceil(log_k n) rounds every rank knows that every
 * member arrived. One cache line written and k - 1 read per round (the
 * reads overlap), no round trip through a root, no data, no messages.
 * With k >= n it is one round: every rank reads every flag. The counter
 * only grows (collective c, round j: c x rounds + j + 1), so a rank
 * already in a later barrier satisfies the wait too. */
#include "coll/shm/segment.h"

typedef struct {
    weft_shm_op_t op;
    int rounds, round, raised;
    long stride;
} barrier_t;

static int step(weft_sched_t *s, void *arg)
{
    barrier_t *b = arg;
    weft_shm_op_t *op = &b->op;
    weft_shm_t *sh = op->sh;
    int rc;
    switch (op->phase) {
    case 0:
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        for (b->rounds = 0, b->stride = 1; b->stride < sh->n; b->rounds++)
            b->stride *= sh->radix;
        b->round = b->raised = 0;
        b->stride = 1;
        op->phase = 1;
        /* fall through */
    case 1:
        for (; b->round < b->rounds; b->round++, b->raised = 0, b->stride *= sh->radix) {
            uint64_t target = op->k * (uint64_t)b->rounds + (uint64_t)b->round + 1;
            if (!b->raised) {
                atomic_store_explicit(&sh->ctrl[sh->me].step, target, memory_order_release);
                b->raised = 1;
            }
            /* every peer's flag loaded before any is judged: the misses overlap */
            int late = -1;
            for (long peer = 1; peer < sh->radix && peer * b->stride < sh->n; peer++) {
                int from = (int)((sh->me - peer * b->stride % sh->n + sh->n) % sh->n);
                if (atomic_load_explicit(&sh->ctrl[from].step, memory_order_acquire) < target && late < 0) late = from;
            }
            if (late >= 0) {
                weft_sched_waiting_flag(s, late, "barrier flag");
                return 0;
            }
        }
        weft_shm_op_end(op);
        return 1;
    }
    return WEFT_ERR_INTERNAL;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    weft_shm_t *sh = weft_shm_get(a->comm, 0);
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    barrier_t *b = weft_shm_op_alloc(s, sh, sizeof(*b), 0, "barrier_shm");
    if (!b) return WEFT_ERR_NO_MEMORY;
    return weft_sched_poll(s, step, b);
}

const weft_coll_alg_t weft_alg_barrier_shm_dissem = {
    .name = "shm_dissem",
    .kind = WEFT_COLL_BARRIER,
    .description = "one node: a k-way dissemination barrier over flags in a shared segment (k = WEFT_SHM_RADIX), "
                   "ceil(log_k n) rounds, no messages",
    .build = build,
};
