/* allreduce, shared memory, through the slots of the communicator's
 * segment. No messages; every rank gets the same bits.
 *
 *  shm          below WEFT_SHM_CHUNK_MIN (2 KiB) up the flag tree to rank
 *               0, whose result every rank reads (from its slot, or down
 *               the tree over WEFT_SHM_FLAT_MAX); from it, on 4 or more
 *               ranks, every rank writes its input, reduces 1/n of it
 *               across all slots in rank order, and all copy the chunks
 *               out (reduce_chunked.c). A vector over a slot goes in
 *               64 KiB pieces, each taking its own way (reduce_tree.h).
 *  shm_chunked  shm's chunked path whatever the size and the number of
 *               ranks (the selection picks it where it measured faster
 *               than shm_allread: 1-2 KiB on 8 ranks).
 *  shm_allread  every rank writes its input beside its slot's sequence
 *               word (in the head line up to WEFT_SHM_INLINE bytes) and
 *               reduces the inputs itself: one transfer of each line
 *               instead of a fan-in and a release. Up to WEFT_SHM_RADIX
 *               ranks, every rank reads all n inputs; on more, in two
 *               rounds: groups of WEFT_SHM_RADIX consecutive ranks read
 *               each other's inputs and reduce them (every member gets
 *               its group's partial), then every rank reads one member's
 *               partial of each other group and reduces the partials in
 *               group order (n / R + R reads per rank instead of n). Rank
 *               order inside groups, group order across: every rank
 *               computes the same expression, so gets the same bits.
 *               For small vectors (up to one slot). */
#include "coll/shm/reduce_chunked.h"
#include "coll/shm/reduce_tree.h"
#include "op.h"

/* shm's piece up the tree, from its phase 1: the root (rank 0) reduces
 * its children's partials into its slot, raises its RESULT, and every
 * rank reads the result from there (small results) or it flows down the
 * tree like a bcast. */
static int tree_piece(weft_sched_t *s, weft_shm_reduce_t *x)
{
    weft_shm_op_t *op = &x->op;
    weft_shm_t *sh = op->sh;
    int rc;
    size_t bytes = x->count * x->esize;
    switch (op->phase) {
    case 1:
        if (!weft_shm_tree_up(s, x, 0)) return 0;
        if (sh->me == 0) { /* the root */
            /* Every member published its partial of this collective, so it
             * finished the slot's previous use: nothing to wait for. */
            weft_shm_record(op, weft_shm_flat_down(sh, bytes) ? WEFT_SHM_READ_ALL : WEFT_SHM_READ_CHILDREN, 0);
            char *res = weft_shm_buf(op, sh->me, bytes);
            weft_shm_reduce_children(x, res, 0, 0);
            weft_op_finalize((weft_op_t)x->rop, (weft_dtype_t)x->dtype, res, x->count, sh->n);
            /* a child's signature unlike its own: every reader of the result fails too */
            weft_shm_head_publish_msg(op, WEFT_SHM_RESULT, x->rc ? WEFT_SHM_SIG_BAD : x->sig);
            memcpy(x->recv, res, bytes);
            break;
        }
        op->phase = 2; /* the result */
        /* fall through */
    case 2:
        rc = weft_shm_tree_down(s, op, 0, x->recv, bytes, weft_shm_flat_down(sh, bytes), x->piece ? 0 : x->sig,
                                x->alg, "result flag");
        if (rc == 0) return 0;
        if (rc < 0 && !x->rc) x->rc = rc;
        weft_shm_all_started(sh, op->k); /* the result needed every member's partial */
        break;
    default: return WEFT_ERR_INTERNAL;
    }
    weft_shm_op_end(op);
    return 1;
}

static int piece_step(weft_sched_t *s, weft_shm_reduce_t *x)
{
    return x->chunked ? weft_shm_chunked_piece(s, x) : tree_piece(s, x);
}

/* shm: a piece goes chunked from the creator's WEFT_SHM_CHUNK_MIN bytes
 * on WEFT_SHM_CHUNKED_RANKS or more ranks (every member decides alike), up the
 * tree otherwise (a smaller last piece too). */
static void set_piece(weft_shm_reduce_t *x)
{
    weft_shm_reduce_set_piece(x);
    x->chunked = x->count * x->esize >= x->op.sh->chunk_min && x->op.sh->n >= WEFT_SHM_CHUNKED_RANKS;
    if (x->chunked) weft_shm_chunked_set(x);
}

/* shm_chunked: every piece chunked. */
static void set_piece_chunked(weft_shm_reduce_t *x)
{
    weft_shm_reduce_set_piece(x);
    x->chunked = 1;
    weft_shm_chunked_set(x);
}

static int step(weft_sched_t *s, void *arg)
{
    return weft_shm_reduce_pieces(s, arg, piece_step, set_piece);
}

static int step_chunked(weft_sched_t *s, void *arg)
{
    return weft_shm_reduce_pieces(s, arg, weft_shm_chunked_piece, set_piece_chunked);
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    return weft_shm_reduce_build(s, a, -1, step, "allreduce_shm");
}

static int build_chunked(weft_sched_t *s, const weft_coll_args_t *a)
{
    return weft_shm_reduce_build(s, a, -1, step_chunked, "allreduce_shm_chunked");
}

typedef struct {
    weft_shm_op_t op;
    const void *send;
    void *recv;
    size_t count, bytes;
    int dtype, rop;
    int ngroups, group; /* this rank's group (of WEFT_SHM_RADIX consecutive ranks) */
    int *members;       /* its group's ranks, then one rank of each other group */
    int nmembers, nothers;
    uint64_t k0;  /* round 1's sequence number (round 2: k0 + 1) */
    uint64_t sig; /* the signature this rank publishes and expects (marked: segment.h) */
    int rc;       /* a signature mismatch seen in round 1 */
} allread_t;

/* Heads are published as RESULT (2k + 2) but awaited from PARTIAL on: a
 * rank that ran a tree algorithm for the same call (an erroneous one)
 * raises only its PARTIAL, and the signature check then fails everyone
 * instead of leaving this rank waiting. */
#define ALLREAD_EVENT WEFT_SHM_PARTIAL

/* 0 when each of the ranks' heads (slot of op->k) carries this rank's
 * signature, else an error naming the first that differs (a partial
 * marked WEFT_SHM_SIG_BAD: its group saw a difference, and the round-2
 * readers fail too, so nobody takes wrong bytes and nobody waits). */
static int check_sigs(allread_t *x, const int *ranks, int count)
{
    for (int i = 0; i < count; i++) {
        int rc = weft_shm_sig_mismatch(&x->op, ranks ? ranks[i] : i, -1, x->sig, "allreduce_shm_allread");
        if (rc) return rc;
    }
    return 0;
}

/* dst = the data of the ranks (their slots of collective from->k)
 * reduced in list order. */
static void reduce_heads(allread_t *x, const weft_shm_op_t *from, void *dst, const int *ranks, int count)
{
    const weft_shm_op_t *op = from;
    if (x->bytes > WEFT_SHM_INLINE)
        for (int i = 0; i < count; i++)
            weft_shm_prefetch(weft_shm_buf(op, ranks ? ranks[i] : i, x->bytes), x->bytes);
    const void *first = weft_shm_buf(op, ranks ? ranks[0] : 0, x->bytes);
    if (count == 1) {
        memcpy(dst, first, x->bytes);
        return;
    }
    weft_op_reduce3((weft_op_t)x->rop, (weft_dtype_t)x->dtype, dst, first,
                    weft_shm_buf(op, ranks ? ranks[1] : 1, x->bytes), x->count);
    for (int i = 2; i < count; i++)
        weft_op_reduce((weft_op_t)x->rop, (weft_dtype_t)x->dtype, dst, weft_shm_buf(op, ranks ? ranks[i] : i, x->bytes),
                       x->count);
}

/* The groups (after the attach: the radix is the creator's). */
static void set_groups(allread_t *x)
{
    weft_shm_t *sh = x->op.sh;
    int g = sh->radix;
    x->ngroups = (sh->n + g - 1) / g;
    if (x->ngroups == 1) return;
    x->group = sh->me / g;
    int first = x->group * g, idx = sh->me - first;
    x->nmembers = 0;
    for (int r = first; r < sh->n && r < first + g; r++)
        x->members[x->nmembers++] = r;
    /* round 2: from group h, the member with this rank's index (or its
     * last, in a smaller last group); from its own group itself */
    int *others = x->members + x->nmembers;
    for (int h = 0; h < x->ngroups; h++) {
        int size = sh->n - h * g < g ? sh->n - h * g : g;
        others[h] = h == x->group ? sh->me : h * g + (idx < size ? idx : size - 1);
    }
    x->nothers = x->ngroups;
}

static int step_allread(weft_sched_t *s, void *arg)
{
    allread_t *x = arg;
    weft_shm_op_t *op = &x->op;
    weft_shm_t *sh = op->sh;
    int rc;
    switch (op->phase) {
    case 0:
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        x->k0 = op->k;
        set_groups(x);
        op->phase = 1;
        /* fall through */
    case 1:
        if (!weft_shm_claim(s, op, WEFT_SHM_READ_ALL, 0)) return 0;
        memcpy(weft_shm_buf(op, sh->me, x->bytes), x->send, x->bytes);
        weft_shm_head_publish_msg(op, WEFT_SHM_RESULT, x->sig);
        op->phase = 2;
        /* fall through */
    case 2:
        if (x->ngroups == 1) { /* every member's input, in rank order */
            if (!weft_shm_wait_heads(s, op, ALLREAD_EVENT, NULL, 0, "input flag")) return 0;
            x->rc = check_sigs(x, NULL, sh->n); /* every rank checks every signature: all fail */
            if (!x->rc) {
                reduce_heads(x, op, x->recv, NULL, sh->n);
                weft_op_finalize((weft_op_t)x->rop, (weft_dtype_t)x->dtype, x->recv, x->count, sh->n);
            }
            if (op->nk == 2) { /* the unused second number */
                weft_shm_op_end(op);
                op->k++;
            }
            break;
        }
        if (!weft_shm_wait_heads(s, op, ALLREAD_EVENT, x->members, x->nmembers, "input flag (its group's)"))
            return 0;
        x->rc = check_sigs(x, x->members, x->nmembers);
        op->phase = 3;
        /* fall through */
    case 3: { /* the group's partial into this rank's slot of round 2 */
        weft_shm_op_t r1 = *op;
        op->k = x->k0 + 1;
        if (!weft_shm_claim(s, op, WEFT_SHM_READ_ALL, 0)) {
            op->k = x->k0;
            return 0;
        }
        if (!x->rc) reduce_heads(x, &r1, weft_shm_buf(op, sh->me, x->bytes), x->members, x->nmembers);
        weft_shm_op_end(&r1); /* round 1's slots are read */
        weft_shm_head_publish_msg(op, WEFT_SHM_RESULT, x->rc ? WEFT_SHM_SIG_BAD : x->sig);
        op->phase = 4;
    }
        /* fall through */
    case 4: { /* one partial of each group, in group order */
        const int *others = x->members + x->nmembers;
        if (!weft_shm_wait_heads(s, op, ALLREAD_EVENT, others, x->nothers, "partial flag (another group's)"))
            return 0;
        weft_shm_all_started(sh, x->k0); /* every group's partial needed every member's input */
        if (!x->rc) x->rc = check_sigs(x, others, x->nothers);
        if (!x->rc) {
            /* others[] holds one rank per group, this rank's own group included */
            reduce_heads(x, op, x->recv, others, x->ngroups);
            weft_op_finalize((weft_op_t)x->rop, (weft_dtype_t)x->dtype, x->recv, x->count, sh->n);
        }
        break;
    }
    default: return WEFT_ERR_INTERNAL;
    }
    weft_shm_op_end(op);
    return x->rc ? x->rc : 1;
}

static int build_allread(weft_sched_t *s, const weft_coll_args_t *a)
{
    weft_shm_t *sh = a->count ? weft_shm_get(a->comm, a->bytes) : NULL;
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    allread_t *x = weft_shm_op_alloc(s, sh, sizeof(*x), sizeof(int) * 2 * (size_t)sh->n, "allreduce_shm_allread");
    if (!x) return WEFT_ERR_NO_MEMORY;
    x->send = a->sendbuf;
    x->recv = a->recvbuf;
    x->count = a->count;
    x->bytes = a->bytes;
    x->dtype = (int)a->dtype;
    x->rop = (int)a->op;
    x->sig = weft_shm_sig(a, a->bytes) | WEFT_SHM_SIG_ALLREAD;
    x->members = weft_shm_op_extra(x, sizeof(*x));
    /* Two sequence numbers whenever groups are possible (the radix is
     * known only once attached, the numbers are taken before); in one
     * group the second stays unused and is ended with the first. */
    x->op.nk = sh->n > 2 ? 2 : 1;
    return weft_sched_poll(s, step_allread, x);
}

const weft_coll_alg_t weft_alg_allreduce_shm = {
    .name = "shm",
    .kind = WEFT_COLL_ALLREDUCE,
    .description =
        "one node: slots in a shared segment, up a flag tree (chunked from 2 KiB on 4+ ranks), 64 KiB pieces over "
        "a slot",
    .build = build,
};

const weft_coll_alg_t weft_alg_allreduce_shm_chunked = {
    .name = "shm_chunked",
    .kind = WEFT_COLL_ALLREDUCE,
    .description = "one node: shm's chunked path at every size: every rank writes its input to its slot, reduces its "
                   "share of the cache lines across all slots in rank order, all copy the shares (two flag rounds)",
    .build = build_chunked,
};

const weft_coll_alg_t weft_alg_allreduce_shm_allread = {
    .name = "shm_allread",
    .kind = WEFT_COLL_ALLREDUCE,
    .description = "one node: every rank writes its input beside its flag in a shared segment and reduces the inputs "
                   "itself (over WEFT_SHM_RADIX ranks in two rounds: groups, then one partial per group); small "
                   "vectors, up to one slot",
    .build = build_allread,
};
