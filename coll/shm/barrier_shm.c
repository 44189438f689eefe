/* barrier, shared memory, two shapes; only sequence words of the slots'
 * head lines are written (no data, so no slot is claimed: a reader of an
 * earlier collective's data in this slot waits for a value the barrier's
 * only exceeds, and the data stays). No messages.
 *
 *  shm          arrivals go up the flag tree to rank 0 (radix
 *               WEFT_SHM_RADIX; a rank raises its PARTIAL once its
 *               children raised theirs), and rank 0's RESULT releases
 *               everyone, each rank reading that one line.
 *  shm_allread  every rank raises its RESULT and reads every member's:
 *               one transfer of each line instead of a fan-in and a
 *               release, but n loads per rank (wins on few ranks). */
#include "coll/shm/segment.h"

typedef struct {
    weft_shm_op_t op;
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
        if (!weft_shm_wait_children(s, op, 0, "barrier arrival flag")) return 0;
        if (sh->me == 0) {
            weft_shm_head_publish(op, WEFT_SHM_RESULT);
            break;
        }
        weft_shm_head_publish(op, WEFT_SHM_PARTIAL);
        op->phase = 2;
        /* fall through */
    case 2:
        if (!weft_shm_head_wait(s, op, 0, WEFT_SHM_RESULT, "barrier release flag (rank 0's)")) return 0;
        weft_shm_all_started(sh, op->k); /* released: every member arrived */
        break;
    default: return WEFT_ERR_INTERNAL;
    }
    weft_shm_op_end(op);
    return 1;
}

static int step_allread(weft_sched_t *s, void *arg)
{
    barrier_t *b = arg;
    weft_shm_op_t *op = &b->op;
    int rc;
    switch (op->phase) {
    case 0:
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        weft_shm_head_publish(op, WEFT_SHM_RESULT);
        op->phase = 1;
        /* fall through */
    case 1:
        if (!weft_shm_wait_heads(s, op, WEFT_SHM_RESULT, NULL, 0, "barrier arrival flag")) return 0;
        break;
    default: return WEFT_ERR_INTERNAL;
    }
    weft_shm_op_end(op);
    return 1;
}

static int build_with(weft_sched_t *s, const weft_coll_args_t *a, weft_sched_poll_fn fn, const char *alg)
{
    weft_shm_t *sh = weft_shm_get(a->comm, 0);
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    barrier_t *b = weft_shm_op_alloc(s, sh, sizeof(*b), 0, alg);
    if (!b) return WEFT_ERR_NO_MEMORY;
    return weft_sched_poll(s, fn, b);
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    return build_with(s, a, step, "barrier_shm");
}

static int build_allread(weft_sched_t *s, const weft_coll_args_t *a)
{
    return build_with(s, a, step_allread, "barrier_shm_allread");
}

const weft_coll_alg_t weft_alg_barrier_shm = {
    .name = "shm",
    .kind = WEFT_COLL_BARRIER,
    .description = "one node: arrivals up a flag tree in a shared segment (radix WEFT_SHM_RADIX) to rank 0, whose "
                   "one release flag every rank reads; no messages",
    .build = build,
};

const weft_coll_alg_t weft_alg_barrier_shm_allread = {
    .name = "shm_allread",
    .kind = WEFT_COLL_BARRIER,
    .description = "one node: every rank raises its flag in a shared segment and reads every member's; no messages",
    .build = build_allread,
};
