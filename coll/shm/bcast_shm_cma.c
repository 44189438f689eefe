/* bcast, shared memory, single copy, pipelined down a binary flag tree
 * (radix 2, see segment.h: each buffer has at most log2 n readers, and
 * radix 2 measured fastest against 4 and 8 at 1-4 MiB, 8-32 ranks, by
 * 1.3-2.5x): every rank lends its own buffer (pid,
 * address, length in its flag line, then its arrival flag) and a count of
 * the bytes in it that hold the message (`cma_ready`). The root's count is
 * the whole message at once; every other rank copies the message from its
 * parent's buffer straight into its own with process_vm_readv, in pieces
 * of BCAST_PIECE as its parent's count grows, and raises its own
 * count after each piece, so its children read behind it. One copy per
 * rank, never staged; a rank's buffer is read by its children only (not
 * by every rank at once, which serialises in the root's address space).
 * A rank returns when its children published done (its buffer is no
 * longer read). A failed read marks the count failed: the children fail
 * too instead of waiting. Declines where CMA does not work. */
#include "coll/shm/segment.h"

#define BCAST_PIECE        ((size_t)128 * 1024)
#define CMA_RADIX          2
#define READY_FAILED       UINT64_MAX

/* This rank's field in its second flag line (segment.h: the algorithm's
 * bytes of weft_shm_ctrl_t), apart from its arrival: its children poll it
 * while they copy. */
typedef struct {
    /* bytes of the lent buffer that hold the message (set to 0 before
     * `arrived`, then raised as pieces land; READY_FAILED: this rank's
     * read failed) */
    _Atomic uint64_t cma_ready;
} ctrl_second_t;
WEFT_SHM_CTRL_FITS(ctrl_second_t, alg_second);

static _Atomic uint64_t *ready_of(weft_shm_t *sh, int r)
{
    return &WEFT_SHM_CTRL_ALG(sh, r, alg_second, ctrl_second_t)->cma_ready;
}

typedef struct {
    weft_shm_op_t op;
    char *buf;
    size_t bytes, got;
    uint64_t sig; /* the call's (weft_shm_sig of the message) */
    int root, rc;
} bcast_t;

static void set_ready(weft_shm_t *sh, uint64_t v)
{
    atomic_store_explicit(ready_of(sh, sh->me), v, memory_order_release);
    weft_shm_ring(sh);
}

static int step(weft_sched_t *s, void *arg)
{
    bcast_t *b = arg;
    weft_shm_op_t *op = &b->op;
    weft_shm_t *sh = op->sh;
    int rc, v;
    switch (op->phase) {
    case 0:
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        set_ready(sh, sh->me == b->root ? b->bytes : 0);
        if (!weft_shm_cma_lend(s, op, b->buf, b->sig)) return 0; /* then `arrived` */
        op->phase = sh->me == b->root ? 2 : 1;
        if (op->phase == 2) goto lent;
        /* fall through */
    case 1: { /* from the parent, piece by piece */
        v = weft_shm_vrank(sh, b->root);
        int parent = weft_shm_rank_of(sh, weft_shm_parent(v, CMA_RADIX), b->root);
        if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, arrived), op->k + 1, parent, "arrival flag")) return 0;
        const weft_shm_ctrl_t *c = &sh->ctrl[parent];
        if (c->cma_sig != b->sig) {
            char who[96];
            snprintf(who, sizeof(who), "rank %d (this rank's parent in the tree of root %d)", parent, b->root);
            b->rc = weft_shm_sig_differs_who(who, c->cma_sig, b->sig, "bcast_shm_cma");
            set_ready(sh, READY_FAILED);
            op->phase = 2;
            goto lent;
        }
        while (b->got < b->bytes) {
            uint64_t ready = atomic_load_explicit(ready_of(sh, parent), memory_order_acquire);
            if (ready == READY_FAILED) {
                b->rc = weft_error(WEFT_ERR_INTERNAL,
                                   "bcast_shm_cma: rank %d (this rank's parent in the tree of root %d) failed to "
                                   "get the message",
                                   parent, b->root);
                set_ready(sh, READY_FAILED);
                break;
            }
            if (ready <= b->got) {
                weft_shm_waiting(s, sh, parent, "ready count (bytes of the message in its buffer)");
                return 0;
            }
            size_t len = (size_t)ready - b->got;
            if (len > BCAST_PIECE) len = BCAST_PIECE;
            if ((b->rc = weft_shm_cma_read(b->buf + b->got, c->cma_pid, c->cma_addr + b->got, len, "bcast_shm_cma"))) {
                set_ready(sh, READY_FAILED);
                break;
            }
            b->got += len;
            set_ready(sh, b->got);
        }
        op->phase = 2;
    }
        /* fall through */
    case 2: /* the buffer stays lent until the children read it all */
    lent:
        if (!weft_shm_wait_done_children(s, op, b->root, CMA_RADIX)) return 0;
        weft_shm_op_end(op);
        return b->rc ? b->rc : 1;
    }
    return WEFT_ERR_INTERNAL;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    size_t bytes = a->count * a->esize;
    weft_shm_t *sh = bytes >= WEFT_SHM_CMA_MIN ? weft_shm_get_cma(a->comm) : NULL;
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    bcast_t *b = weft_shm_op_alloc(s, sh, sizeof(*b), 0, "bcast_shm_cma");
    if (!b) return WEFT_ERR_NO_MEMORY;
    b->buf = a->recvbuf;
    b->bytes = bytes;
    b->root = a->root;
    b->sig = weft_shm_sig(a, bytes);
    return weft_sched_poll(s, step, b);
}

const weft_coll_alg_t weft_alg_bcast_shm_cma = {
    .name = "shm_cma",
    .kind = WEFT_COLL_BCAST,
    .description = "one node, from 16 KiB, CMA: each rank copies the message from its parent's buffer into its own "
                   "(process_vm_readv), piece by piece down a binary flag tree: one copy, pipelined",
    .build = build,
};
