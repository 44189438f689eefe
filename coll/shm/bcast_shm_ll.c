/* bcast shm_ll: a small message (up to WEFT_SHM_LL_MAX bytes) in the
 * root's flagged lines (56 bytes of data and a sequence word each,
 * segment.h). The root writes each line with 2k + 2 (release order, after
 * its data); every other rank loads the words of all the lines it still
 * needs in one pass (their misses overlap) and copies each line that is
 * up. A line's one transfer brings its data and its flag: one dependent
 * transfer per call, where the flat read of shm takes two over
 * WEFT_SHM_INLINE bytes (the slot's head, then its body).
 *
 * Signatures: the root's line words carry its 20-bit signature
 * (weft_shm_sig_ll: length, datatype), so a reader whose count or datatype
 * differs fails where it reads. The root also raises its head to RESULT
 * with its whole signature marked WEFT_SHM_SIG_LL: a rank that ran shm for
 * this call (its count fell under another rule) fails there, and a reader
 * looks at that head every WAIT_CHECK polls, so one waiting for lines a
 * root with another count or root never writes fails too. */
#include "coll/shm/segment.h"

#include <string.h>

/* Polls of an unfinished wait between looks at the root's head. */
#define WAIT_CHECK 256u

typedef struct {
    weft_shm_op_t op;
    char *buf;
    size_t bytes;
    int root;
    int nl;       /* lines of the message */
    int next;     /* the first line not copied yet (a line up implies those before it are) */
    uint64_t sig; /* the root's head (marked) */
    uint64_t tag; /* the lines' (weft_shm_sig_ll) */
    unsigned polls;
} bcast_ll_t;

/* The root: its lines, then its head. */
static void write_lines(bcast_ll_t *x)
{
    weft_shm_op_t *op = &x->op;
    weft_shm_ll_line_t *mine = weft_shm_ll(op, op->sh->me);
    uint64_t w = weft_shm_ll_word(op->k, WEFT_SHM_RESULT, x->tag);
    for (int j = 0; j < x->nl; j++) {
        memcpy(mine[j].d, x->buf + (size_t)j * WEFT_SHM_LL_DATA, weft_shm_ll_bytes(x->bytes, (size_t)j));
        atomic_store_explicit(&mine[j].seq, w, memory_order_release);
    }
    weft_shm_head_publish_msg(op, WEFT_SHM_RESULT, x->sig);
}

/* A reader's pass over the root's lines from the first not yet copied: all
 * words loaded, each line up copied (again, when a line before it was
 * late: the bytes are the same). 1 when every line is here, 0 not yet,
 * < 0 a signature mismatch. */
static int read_lines(bcast_ll_t *x)
{
    weft_shm_op_t *op = &x->op;
    const weft_shm_ll_line_t *lines = weft_shm_ll(op, x->root);
    uint64_t want = 2 * op->k + WEFT_SHM_RESULT;
    int late = x->nl;
    for (int j = x->next; j < x->nl; j++) {
        uint64_t w = atomic_load_explicit(&lines[j].seq, memory_order_acquire);
        if ((w & WEFT_SHM_LL_SEQ_MASK) < want) {
            if (late == x->nl) late = j;
            continue;
        }
        if (w >> WEFT_SHM_LL_SEQ_BITS != x->tag)
            return weft_shm_sig_differs(x->root, x->root, weft_shm_sig_from_ll(w >> WEFT_SHM_LL_SEQ_BITS),
                                        weft_shm_sig_from_ll(x->tag), "bcast_shm_ll");
        memcpy(x->buf + (size_t)j * WEFT_SHM_LL_DATA, lines[j].d, weft_shm_ll_bytes(x->bytes, (size_t)j));
    }
    x->next = late;
    if (late < x->nl) return 0;
    /* the root is in collective k, so its done is >= k (as weft_shm_head_wait) */
    if (op->sh->seen_done[x->root] < op->k) op->sh->seen_done[x->root] = op->k;
    return 1;
}

static int step(weft_sched_t *s, void *arg)
{
    bcast_ll_t *x = arg;
    weft_shm_op_t *op = &x->op;
    int rc;
    if (op->phase == 0) {
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        op->phase = 1;
    }
    if (op->sh->me == x->root) {
        if (!weft_shm_claim(s, op, WEFT_SHM_READ_ALL, x->root)) return 0; /* (it said what it waits for) */
        write_lines(x);
        rc = 1;
    } else if (WEFT_UNLIKELY(weft_sched_posting(s))) {
        rc = 0; /* a nonblocking post leaves the copies to the thread (weft_shm_wait) */
    } else if ((rc = read_lines(x)) == 0 && ++x->polls % WAIT_CHECK == 0 &&
               atomic_load_explicit(&weft_shm_head(op, x->root)->seq, memory_order_acquire) >=
                   2 * op->k + WEFT_SHM_RESULT) {
        rc = weft_shm_sig_mismatch(op, x->root, x->root, x->sig, "bcast_shm_ll");
    }
    if (rc == 0) {
        weft_sched_waiting_flag(s, x->root, "flagged message line");
        return 0;
    }
    weft_shm_op_end(op);
    return rc;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    size_t bytes = a->count * a->esize;
    weft_shm_t *sh = weft_shm_get_ll(a->comm, bytes);
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    bcast_ll_t *x = weft_shm_op_alloc(s, sh, sizeof(*x), 0, "bcast_shm_ll");
    if (!x) return WEFT_ERR_NO_MEMORY;
    x->buf = a->recvbuf;
    x->bytes = bytes;
    x->root = a->root;
    x->nl = weft_shm_ll_lines(bytes);
    x->sig = weft_shm_sig(a, bytes) | WEFT_SHM_SIG_LL;
    x->tag = weft_shm_sig_ll(x->sig);
    return weft_sched_poll(s, step, x);
}

const weft_coll_alg_t weft_alg_bcast_shm_ll = {
    .name = "shm_ll",
    .kind = WEFT_COLL_BCAST,
    .description = "one node, up to 7 KiB: the root writes the message in flagged lines (56 bytes and a flag each) of "
                   "a shared segment; every rank polls them all at once and copies each as it comes (one transfer "
                   "brings a line's data and flag)",
    .build = build,
};
