/* barrier, shared memory: a dissemination barrier over flags. In round j
 * each rank raises its step counter and waits for rank - 2^j's counter to
 * reach the same round, so after ceil(log2 n) rounds every rank knows that
 * every member arrived. One cache line written and one read per round
 * instead of n reads; no data, no messages. The counter only grows
 * (collective k, round j: k x rounds + j + 1), so a rank already in a
 * later barrier satisfies the wait too. */
#include "coll/shm/segment.h"

typedef struct {
    weft_shm_op_t op;
    int rounds, round, raised;
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
        op->phase = 1;
        /* fall through */
    case 1:
        for (; b->round < b->rounds; b->round++, b->raised = 0) {
            uint64_t target = op->k * (uint64_t)b->rounds + (uint64_t)b->round + 1;
            if (!b->raised) {
                atomic_store_explicit(&sh->ctrl[sh->me].step, target, memory_order_release);
                b->raised = 1;
            }
            int from = (sh->me - (1 << b->round) % sh->n + sh->n) % sh->n;
            if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, step), target, from, "barrier flag")) return 0;
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
    b->rounds = 0;
    while ((1 << b->rounds) < sh->n)
        b->rounds++;
    b->round = b->raised = 0;
    return weft_sched_poll(s, step, b);
}

const weft_coll_alg_t weft_alg_barrier_shm = {
    .name = "shm",
    .kind = WEFT_COLL_BARRIER,
    .description = "one node: a dissemination barrier over flags in a shared segment, ceil(log2 n) rounds, no messages",
    .build = build,
};
