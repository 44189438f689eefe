/* barrier, shared memory: every rank publishes its arrival flag for
 * collective k and waits until all members' flags reached it. No data, no
 * messages; one cache line written per rank. */
#include "coll/shm/segment.h"

static int step(weft_sched_t *s, void *arg)
{
    weft_shm_op_t *op = arg;
    int rc;
    switch (op->phase) {
    case 0:
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        weft_shm_publish(op, offsetof(weft_shm_ctrl_t, arrived));
        op->phase = 1;
        /* fall through */
    case 1:
        if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, arrived), op->k + 1, -1, "arrival flag")) return 0;
        weft_shm_op_end(op);
        return 1;
    }
    return WEFT_ERR_INTERNAL;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    weft_shm_t *sh = weft_shm_get(a->comm, 0);
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    weft_shm_op_t *op = weft_shm_op_alloc(s, sh, sizeof(*op), 0, "barrier_shm");
    if (!op) return WEFT_ERR_NO_MEMORY;
    return weft_sched_poll(s, step, op);
}

const weft_coll_alg_t weft_alg_barrier_shm = {
    .name = "shm",
    .kind = WEFT_COLL_BARRIER,
    .description = "one node: arrival flags in a shared segment, no messages",
    .build = build,
};
