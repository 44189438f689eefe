/* bcast, shared memory: the root copies the message into its slot and
 * raises its arrival counter; down the flag tree (radix WEFT_SHM_RADIX,
 * see segment.h) each rank waits for its parent's arrival, copies the
 * parent's slot into its own (when it has children) and raises its own
 * arrival, and copies the message out. A rank polls one parent, never
 * the root with everyone else; the root leaves as soon as its slot is
 * written. Messages up to one slot (WEFT_SHM_SLOT); larger ones decline. */
#include "coll/shm/segment.h"

#include <string.h>

typedef struct {
    weft_shm_op_t op;
    void *buf;
    size_t bytes;
    int root;
} bcast_t;

static int step(weft_sched_t *s, void *arg)
{
    bcast_t *b = arg;
    weft_shm_op_t *op = &b->op;
    weft_shm_t *sh = op->sh;
    int rc;
    switch (op->phase) {
    case 0:
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        op->phase = 1;
        /* fall through */
    case 1:
        if (sh->me == b->root) {
            if (!weft_shm_claim(s, op, WEFT_SHM_READ_CHILDREN, b->root)) return 0;
            memcpy(weft_shm_slot(op, sh->me), b->buf, b->bytes);
            weft_shm_publish(op, offsetof(weft_shm_ctrl_t, arrived));
            break;
        }
        if (!weft_shm_tree_down(s, op, b->root, offsetof(weft_shm_ctrl_t, arrived), b->buf, b->bytes, "arrival flag"))
            return 0;
        break;
    default: return WEFT_ERR_INTERNAL;
    }
    weft_shm_op_end(op);
    return 1;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    size_t bytes = a->count * a->esize;
    weft_shm_t *sh = bytes ? weft_shm_get(a->comm, bytes) : NULL;
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    bcast_t *b = weft_shm_op_alloc(s, sh, sizeof(*b), 0, "bcast_shm");
    if (!b) return WEFT_ERR_NO_MEMORY;
    b->buf = a->recvbuf;
    b->bytes = bytes;
    b->root = a->root;
    return weft_sched_poll(s, step, b);
}

const weft_coll_alg_t weft_alg_bcast_shm = {
    .name = "shm",
    .kind = WEFT_COLL_BCAST,
    .description = "one node, up to 16 KiB: the root writes its slot of a shared segment, the data flows down a "
                   "flag tree (radix WEFT_SHM_RADIX)",
    .build = build,
};
