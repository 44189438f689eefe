/* bcast, shared memory: the root copies the message into its slot and
 * raises its RESULT. A message up to WEFT_SHM_FLAT_MAX bytes is read by
 * every rank straight from there (one hop, many readers of a few lines).
 * Larger ones go down the flag tree (radix WEFT_SHM_RADIX, see
 * segment.h): each rank waits for its parent's RESULT, copies the
 * parent's slot into its own (when it has children) and raises its own,
 * and copies the message out, so a rank polls one parent, never the root
 * with everyone else. The root leaves as soon as its slot is written.
 * A message over a slot goes in slot-sized pieces, each a collective of
 * its own (weft_shm_pieces): a pipeline in which every rank copies each
 * piece while the root writes the next ones. On up to WEFT_SHM_FLAT_PIECES
 * ranks every message, a piece or one slot, is read straight from the
 * root's slot (the measurements are the variable's), on more it goes down
 * the tree (each rank from its parent's). */
#include "coll/shm/segment.h"

#include <string.h>

typedef struct {
    weft_shm_op_t op;
    char *buf;
    size_t bytes;
    int root;
    uint64_t k0; /* the first piece's sequence number */
    uint64_t piece;
    uint64_t sig; /* the call's (weft_shm_sig of the message) */
    int rc;       /* a signature mismatch, returned at the end */
} bcast_t;

static int step(weft_sched_t *s, void *arg)
{
    bcast_t *b = arg;
    weft_shm_op_t *op = &b->op;
    weft_shm_t *sh = op->sh;
    int rc;
    if (op->phase == 0) {
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        b->k0 = op->k;
        b->piece = 0;
        op->phase = 1;
    }
    for (; b->piece < op->nk; b->piece++) {
        size_t off = (size_t)b->piece * WEFT_SHM_SLOT,
               len = b->bytes - off < WEFT_SHM_SLOT ? b->bytes - off : WEFT_SHM_SLOT;
        /* alike on every rank: the call's length, the segment's size and its creator's variables */
        int flat = weft_shm_flat_down(sh, len) || sh->n <= sh->flat_pieces;
        op->k = b->k0 + b->piece;
        if (sh->me == b->root) {
            if (!weft_shm_claim(s, op, flat ? WEFT_SHM_READ_ALL : WEFT_SHM_READ_CHILDREN, b->root)) return 0;
            memcpy(weft_shm_buf(op, sh->me, len), b->buf + off, len);
            weft_shm_head_publish_msg(op, WEFT_SHM_RESULT, b->sig);
        } else if (op->phase == 1) {
            /* the first piece checks the signature */
            rc = weft_shm_tree_down(s, op, b->root, b->buf + off, len, flat, b->piece ? 0 : b->sig, "bcast_shm",
                                    "message flag");
            if (rc == 0) return 0;
            if (rc < 0) {
                b->rc = rc;
                op->phase = 2;
            }
        } else if (!flat && weft_shm_has_children(weft_shm_vrank(sh, b->root), sh->radix, sh->n)) {
            /* signatures differed: no data, only heads for the children (they failed on the first) */
            if (!weft_shm_claim(s, op, WEFT_SHM_READ_CHILDREN, b->root)) return 0;
            weft_shm_head_publish_msg(op, WEFT_SHM_RESULT, WEFT_SHM_SIG_BAD);
        }
        weft_shm_op_end(op);
    }
    return b->rc ? b->rc : 1;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    size_t bytes = a->count * a->esize, per;
    weft_shm_t *sh = bytes ? weft_shm_get(a->comm, 0) : NULL;
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    bcast_t *b = weft_shm_op_alloc(s, sh, sizeof(*b), 0, "bcast_shm");
    if (!b) return WEFT_ERR_NO_MEMORY;
    b->buf = a->recvbuf;
    b->bytes = bytes;
    b->root = a->root;
    b->sig = weft_shm_sig(a, bytes);
    b->op.nk = weft_shm_pieces(bytes, 1, &per);
    return weft_sched_poll(s, step, b);
}

const weft_coll_alg_t weft_alg_bcast_shm = {
    .name = "shm",
    .kind = WEFT_COLL_BCAST,
    .description = "one node: the root writes its slot of a shared segment; every rank reads a small message from "
                   "there, on up to WEFT_SHM_FLAT_PIECES ranks every message too, on more larger ones flow down a flag "
                   "tree (radix WEFT_SHM_RADIX); over a slot, in pipelined slot-sized pieces",
    .build = build,
};
