/* allreduce, shared memory, single copy: a reduce-scatter and an
 * allgather read straight from the other ranks' buffers with
 * process_vm_readv (cross-memory attach), no staging in a segment.
 * Every rank lends its input and its result buffer (pids and addresses in
 * its flag line, then its arrival flag). Rank r reduces chunk r (1/n of
 * the vector) of every rank's input, from its own on, in pieces
 * (weft_shm_cma_reduce: read a peer's piece, reduce it into chunk r of its
 * own result) and raises `reduced`; then it reads chunk q of rank q's
 * result for every q. Each byte crosses between processes twice, the
 * scratch is one piece whatever the vector, and every rank gets the same
 * bits (one rank reduces each chunk, in one order). In place works: chunk
 * q of a rank's buffer is overwritten only after rank q, its only reader,
 * raised `reduced`. A rank
 * returns when every member is done reading its buffers. Vectors from a
 * full slot on; declines where CMA does not work. */
#include "coll/shm/segment.h"

#include <string.h>

/* This rank's fields in its flag lines (segment.h: the algorithm's bytes
 * of weft_shm_ctrl_t): beside its arrival, the flag its chunk's readers
 * poll; in the second line, where its result is, which they read once. */
typedef struct {
    _Atomic uint64_t reduced; /* this rank's chunk of collective k's result is in its result buffer */
} ctrl_first_t;
typedef struct {
    uint64_t result_addr; /* this rank's result buffer, lent with its input */
} ctrl_second_t;
WEFT_SHM_CTRL_FITS(ctrl_first_t, alg_first);
WEFT_SHM_CTRL_FITS(ctrl_second_t, alg_second);
#define REDUCED            WEFT_SHM_CTRL_FIELD(alg_first, ctrl_first_t, reduced)
#define RESULT_ADDR(sh, r) (WEFT_SHM_CTRL_ALG(sh, r, alg_second, ctrl_second_t)->result_addr)

typedef struct {
    weft_shm_op_t op;
    const void *send;
    void *recv;
    size_t count, esize;
    int dtype, rop;
    uint64_t sig; /* the call's (weft_shm_sig of the vector) */
    int rc;       /* the first failed read or signature mismatch */
    int next; /* phase 2: the next peer (offset from this rank) to read */
    char *tmp; /* a peer's piece */
} allreduce_t;

/* Chunk `me` of the result, piece by piece. */
static void reduce_chunk(allreduce_t *x)
{
    weft_shm_t *sh = x->op.sh;
    size_t off, len;
    weft_coll_block(x->count, sh->n, sh->me, &off, &len);
    if (len)
        x->rc = weft_shm_cma_reduce(&x->op, x->send, x->sig, off, len, x->esize, x->dtype, x->rop, x->tmp,
                                    (char *)x->recv + off * x->esize, "allreduce_shm_cma");
}

static int step(weft_sched_t *s, void *arg)
{
    allreduce_t *x = arg;
    weft_shm_op_t *op = &x->op;
    weft_shm_t *sh = op->sh;
    int rc;
    switch (op->phase) {
    case 0:
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        RESULT_ADDR(sh, sh->me) = (uint64_t)(uintptr_t)x->recv;
        if (!weft_shm_cma_lend(s, op, x->send, x->sig)) return 0;
        op->phase = 1;
        /* fall through */
    case 1:
        if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, arrived), op->k + 1, -1, "arrival flag")) return 0;
        reduce_chunk(x);
        weft_shm_publish(op, REDUCED); /* even after a failed read */
        x->next = 1;
        op->phase = 2;
        /* fall through */
    case 2: /* the other chunks, from their owners' results, next rank first */
        for (; x->next < sh->n; x->next++) {
            int q = (sh->me + x->next) % sh->n;
            if (!weft_shm_wait(s, op, REDUCED, op->k + 1, q, "reduced-chunk flag")) return 0;
            size_t off, len;
            weft_coll_block(x->count, sh->n, q, &off, &len);
            if (len && !x->rc)
                x->rc = weft_shm_cma_read((char *)x->recv + off * x->esize, sh->ctrl[q].cma_pid,
                                          RESULT_ADDR(sh, q) + off * x->esize, len * x->esize, "allreduce_shm_cma");
        }
        weft_shm_publish(op, offsetof(weft_shm_ctrl_t, done));
        op->phase = 3;
        /* fall through */
    case 3: /* this rank's buffers stay valid until every reader is done */
        if (!weft_shm_wait(s, op, offsetof(weft_shm_ctrl_t, done), op->k + 1, -1, "done flag")) return 0;
        sh->completed = op->k + 1;
        return x->rc ? x->rc : 1;
    }
    return WEFT_ERR_INTERNAL;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    size_t bytes = a->count * a->esize;
    weft_shm_t *sh = bytes >= WEFT_SHM_CMA_MIN ? weft_shm_get_cma(a->comm) : NULL;
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    allreduce_t *x = weft_shm_op_alloc(s, sh, sizeof(*x), WEFT_SHM_CMA_PIECE, "allreduce_shm_cma");
    if (!x) return WEFT_ERR_NO_MEMORY;
    x->send = a->sendbuf;
    x->recv = a->recvbuf;
    x->count = a->count;
    x->esize = a->esize;
    x->dtype = (int)a->dtype;
    x->rop = (int)a->op;
    x->sig = weft_shm_sig(a, bytes);
    x->tmp = weft_shm_op_extra(x, sizeof(*x));
    return weft_sched_poll(s, step, x);
}

const weft_coll_alg_t weft_alg_allreduce_shm_cma = {
    .name = "shm_cma",
    .kind = WEFT_COLL_ALLREDUCE,
    .description = "one node, from 16 KiB, CMA: each rank reduces 1/n straight from the others' inputs, then reads "
                   "the other chunks from their owners' results (process_vm_readv)",
    .build = build,
};
