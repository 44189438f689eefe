/* bcast, shared memory, single copy: the root lends its buffer (its pid,
 * address and length in its flag line, then its arrival flag) and every
 * other rank copies the message straight from the root's memory into its
 * own with process_vm_readv (cross-memory attach): one copy per receiver,
 * no staging. The root returns only when every member's done flag says it
 * finished reading. From a full slot on (the slot algorithm "shm"
 * serves the smaller ones); declines where CMA does not work. */
#include "coll/shm/segment.h"

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
    weft_shm_t *sh;
    int rc;
    switch (op->phase) {
    case 0:
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        sh = op->sh;
        if (sh->me != b->root) {
            op->phase = 1;
            goto read;
        }
        weft_shm_cma_lend(op, b->buf, b->bytes);
        weft_shm_publish(op, offsetof(weft_shm_ctrl_t, done)); /* nothing for the root to read */
        op->phase = 2;
        /* fall through */
    case 2: /* root: the buffer stays valid until every reader is done */
        if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, done), op->k + 1, -1, "done flag")) return 0;
        op->sh->completed = op->k + 1;
        return 1;
    case 1:
    read:
        if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, arrived), op->k + 1, b->root, "arrival flag")) return 0;
        {
            const weft_shm_ctrl_t *c = &op->sh->ctrl[b->root];
            rc = c->cma_len != b->bytes
                     ? weft_error(WEFT_ERR_ARG, "bcast_shm_cma: the root sends %llu bytes, this rank expects %zu",
                                  (unsigned long long)c->cma_len, b->bytes)
                     : weft_shm_cma_read(b->buf, c->cma_pid, c->cma_addr, b->bytes, "bcast_shm_cma");
        }
        weft_shm_op_end(op); /* even after a failed read: the root must not wait forever */
        return rc ? rc : 1;
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
    return weft_sched_poll(s, step, b);
}

const weft_coll_alg_t weft_alg_bcast_shm_cma = {
    .name = "shm_cma",
    .kind = WEFT_COLL_BCAST,
    .description = "one node, over 16 KiB, CMA: the others copy straight from the root's buffer (process_vm_readv)",
    .build = build,
};
