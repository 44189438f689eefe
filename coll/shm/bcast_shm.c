/* bcast, shared memory: the root copies the message into its slot and
 * raises its RESULT. A message up to WEFT_SHM_FLAT_MAX bytes (by default
 * what fits in the head line beside the flag) is read by every rank
 * straight from there: one cache miss. Larger ones go down the flag tree
 * (radix WEFT_SHM_RADIX, see segment.h): each rank waits for its parent's
 * RESULT, copies the parent's slot into its own (when it has children)
 * and raises its own, and copies the message out, so a rank polls one
 * parent, never the root with everyone else. The root leaves as soon as
 * its slot is written. Messages up to one slot (WEFT_SHM_SLOT, 64 KiB);
 * larger ones decline. */
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
            if (!weft_shm_claim(s, op, weft_shm_flat_down(sh, b->bytes) ? WEFT_SHM_READ_ALL : WEFT_SHM_READ_CHILDREN,
                                b->root))
                return 0;
            memcpy(weft_shm_buf(op, sh->me, b->bytes), b->buf, b->bytes);
            weft_shm_head_publish(op, WEFT_SHM_RESULT);
            break;
        }
        if (!weft_shm_tree_down(s, op, b->root, b->buf, b->bytes, "message flag")) return 0;
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
    .description = "one node, up to 64 KiB: the root writes its slot of a shared segment; every rank reads a small "
                   "message from there, larger ones flow down a flag tree (radix WEFT_SHM_RADIX)",
    .build = build,
};
