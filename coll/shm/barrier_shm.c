/* barrier, shared memory. Up to WEFT_SHM_BARRIER_LINE_MAX ranks: one
 * cache line of bytes in the segment's header page, one per rank; a rank
 * entering its b-th barrier stores b mod 256 in its byte and polls the
 * line until every member's byte reached b (compared mod 256: no rank is
 * more than one barrier ahead of one still polling, since it cannot leave
 * barrier b + 1 before that rank entered it). The last arrival's store and
 * everyone's re-read of that one line are the whole critical path: two
 * line transfers, where a tree needs four (a child's write, the parent's
 * read, the release write, the readers' misses). More ranks: arrivals up
 * the flag tree to rank 0 (radix WEFT_SHM_RADIX; a rank raises its
 * PARTIAL once its children raised theirs), and rank 0's RESULT releases
 * everyone, each rank reading that one line; only sequence words of the
 * slots' head lines are written (no data, so no slot is claimed: a reader
 * of an earlier collective's data in this slot waits for a value the
 * barrier's only exceeds, and the data stays). No messages. */
#include "coll/shm/segment.h"

#include <stdlib.h>

typedef struct {
    weft_shm_op_t op;
    uint8_t epoch;
} barrier_t;

static int x_line(void) /* EXPERIMENT */
{
    static int v = -1;
    if (v < 0) v = getenv("WEFT_X_BARLINE") ? atoi(getenv("WEFT_X_BARLINE")) : 1;
    return v;
}

/* 1 when every member's byte reached the epoch. */
static int line_full(const weft_shm_t *sh, uint8_t epoch, int *late)
{
    int ok = 1;
    for (int r = 0; r < sh->n; r++) /* every byte loaded before any is judged (one line) */
        if ((int8_t)(uint8_t)(atomic_load_explicit(&sh->bar[r], memory_order_acquire) - epoch) < 0 && ok) {
            ok = 0;
            *late = r;
        }
    return ok;
}

static int step(weft_sched_t *s, void *arg)
{
    barrier_t *b = arg;
    weft_shm_op_t *op = &b->op;
    weft_shm_t *sh = op->sh;
    int rc, late = -1;
    switch (op->phase) {
    case 0:
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        b->epoch = (uint8_t)++sh->barriers;
        if (sh->n <= WEFT_SHM_BARRIER_LINE_MAX && x_line()) {
            atomic_store_explicit(&sh->bar[sh->me], b->epoch, memory_order_release);
            op->phase = 3;
            goto line;
        }
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
        break;
    case 3:
    line:
        if (!line_full(sh, b->epoch, &late)) {
            weft_sched_waiting_flag(s, late, "barrier byte");
            return 0;
        }
        break;
    default: return WEFT_ERR_INTERNAL;
    }
    weft_shm_all_started(sh, op->k); /* released: every member arrived */
    weft_shm_op_end(op);
    return 1;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    weft_shm_t *sh = weft_shm_get(a->comm, 0);
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    barrier_t *b = weft_shm_op_alloc(s, sh, sizeof(*b), 0, "barrier_shm");
    if (!b) return WEFT_ERR_NO_MEMORY;
    return weft_sched_poll(s, step, b);
}

const weft_coll_alg_t weft_alg_barrier_shm = {
    .name = "shm",
    .kind = WEFT_COLL_BARRIER,
    .description = "one node: up to 64 ranks a byte per rank in one shared cache line; more ranks arrivals up a flag "
                   "tree (radix WEFT_SHM_RADIX) to rank 0, whose one release flag every rank reads; no messages",
    .build = build,
};
