/* Reductions through the slots of the segment (reduce_shm.c,
 * allreduce_shm.c's shm and shm_chunked): the state they share, the
 * pipeline of pieces and the flag tree's way up (reduce_tree.c).
 *
 * Every rank's input goes through its slot. A vector over a slot goes in
 * pieces of at most one slot (weft_shm_pieces), each a collective of its
 * own, pipelined. Each piece goes up the flag tree (radix WEFT_SHM_RADIX):
 * a rank waits for its children's PARTIAL, reduces its input and their
 * partials into its slot in the tree's fixed child order and raises its
 * own PARTIAL; the root reduces its children's partials where its
 * algorithm wants them. An allreduce's piece may instead go the chunked
 * way (reduce_chunked.c). Rank order always, so every rank gets the same
 * bits. */
#ifndef WEFT_COLL_SHM_REDUCE_TREE_H
#define WEFT_COLL_SHM_REDUCE_TREE_H

#include "coll/shm/segment.h"

typedef struct weft_shm_reduce {
    weft_shm_op_t op;
    const void *send; /* the current piece's (weft_shm_pieces) */
    void *recv;
    size_t count, esize;
    int dtype, rop, root; /* root < 0: allreduce */
    int chunked;          /* allreduce: this piece goes the chunked way (reduce_chunked.c) */
    const char *send0;    /* the whole vector */
    char *recv0;
    size_t total, per; /* its elements, and per piece */
    uint64_t k0, piece;
    uint64_t sig;       /* the call's signature (weft_shm_sig of the whole vector) */
    int rc;             /* the first signature mismatch (reported when the call ends: nobody is left waiting) */
    const char *alg;    /* for messages */
    size_t off, len;    /* chunked: this rank's chunk of the current piece (elements) */
    unsigned char *got; /* chunked: weft_shm_wait_heads_each's, n bytes */
} weft_shm_reduce_t;

/* The state of a reduce (root >= 0) or allreduce (root < 0) of a's
 * vector, polled by `step` (which runs weft_shm_reduce_pieces).
 * WEFT_ERR_UNSUPPORTED when the slots cannot take it. */
int weft_shm_reduce_build(weft_sched_t *s, const weft_coll_args_t *a, int root, weft_sched_poll_fn step,
                          const char *alg);
/* Points x at piece x->piece (its sequence number, elements and buffers),
 * from its phase 1. */
void weft_shm_reduce_set_piece(weft_shm_reduce_t *x);
/* The pipeline, as a polling step: starts the op, then runs piece after
 * piece. set(x) points x at the next piece (weft_shm_reduce_set_piece,
 * and what the algorithm decides per piece); piece(s, x) runs the current
 * piece from its phase 1 and ends it (1 / 0 / < 0 as a polling step).
 * After a length mismatch the remaining pieces end here without waiting
 * for anyone. Inline, so each algorithm's piece steps are direct calls. */
static inline int weft_shm_reduce_pieces(weft_sched_t *s, weft_shm_reduce_t *x,
                                         int (*piece)(weft_sched_t *, weft_shm_reduce_t *),
                                         void (*set)(weft_shm_reduce_t *))
{
    weft_shm_op_t *op = &x->op;
    int rc;
    if (op->phase == 0) {
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        x->k0 = op->k;
        x->piece = 0;
        set(x);
    }
    for (;;) {
        if ((rc = piece(s, x)) <= 0) return rc;
        if (++x->piece == op->nk) return x->rc ? x->rc : 1;
        if (x->rc) { /* lengths differ: the ranks disagree on the pieces; end ours without waiting for anyone */
            for (; x->piece < op->nk; x->piece++) {
                op->k = x->k0 + x->piece;
                weft_shm_op_end(op);
            }
            return x->rc;
        }
        set(x);
    }
}

/* The current piece up the tree of `root`: waits for this rank's
 * children's PARTIAL (the first piece checks their signatures; the call
 * goes on, nobody waits, and a rank that found one unlike its own marks its
 * partial WEFT_SHM_SIG_BAD, so the root fails too), then a non-root claims
 * its slot (read by its parent), reduces its input and the children's
 * partials into it and raises its PARTIAL. The root only waits: it reduces them itself
 * (weft_shm_reduce_children). 1 / 0 as a polling step. */
int weft_shm_tree_up(weft_sched_t *s, weft_shm_reduce_t *x, int root);
/* dst = own input op each child's partial (v: this rank in the tree of
 * `root`), in the tree's fixed child order: every run, every rank of an
 * allreduce gets the root's bits. Not finalised. */
void weft_shm_reduce_children(weft_shm_reduce_t *x, void *dst, int v, int root);

#endif
