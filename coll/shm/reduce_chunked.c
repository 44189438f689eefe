/* An allreduce's piece, chunked: every rank writes its input to its slot
 * and raises its head's PARTIAL; each fetches its chunk (1/n of the piece,
 * whole cache lines) of a slot as soon as that slot's PARTIAL is up, and
 * once every head is up reduces its chunk across all slots in rank order
 * (into its result, then over the same lines of its own slot, which only
 * it read) and raises its RESULT; each copies a rank's reduced chunk out
 * as soon as that rank's RESULT is up. The flags sit in the slots' head
 * lines, one per slot (no line shared by three counters that every rank
 * polls). Rank order always, so every rank gets the same bits. */
#include "coll/shm/reduce_chunked.h"

#include <string.h>

/* The chunked path's signatures are marked (segment.h), so a rank that
 * ran the tree or shm_allread for the same call fails instead of taking
 * these flags for its own. */
#define CHUNKED_SIG(x) ((x)->sig | WEFT_SHM_SIG_CHUNKED)

/* dst[0, len) = slot[0] op slot[1] op ... op slot[n-1] from element off,
 * always in rank order: every rank computes the same bits. */
static void reduce_slots(weft_shm_reduce_t *x, void *dst, size_t off, size_t len)
{
    weft_shm_op_t *op = &x->op;
    size_t at = off * x->esize;
    weft_op_reduce3((weft_op_t)x->rop, (weft_dtype_t)x->dtype, dst, weft_shm_slot(op, 0) + at,
                    weft_shm_slot(op, 1) + at, len);
    for (int r = 2; r < op->sh->n; r++)
        weft_op_reduce((weft_op_t)x->rop, (weft_dtype_t)x->dtype, dst, weft_shm_slot(op, r) + at, len);
    weft_op_finalize((weft_op_t)x->rop, (weft_dtype_t)x->dtype, dst, len, op->sh->n);
}

/* Rank r's chunk of the current piece (elements): whole cache lines of
 * the slots, split as evenly as the lines allow, so no line a rank writes
 * back is another rank's to read in the same phase. */
static void line_block(const weft_shm_reduce_t *x, int r, size_t *off, size_t *len)
{
    size_t unit = x->esize <= 64 && 64 % x->esize == 0 ? 64 / x->esize : 1, u0, ul;
    weft_coll_block((x->count + unit - 1) / unit, x->op.sh->n, r, &u0, &ul);
    *off = u0 * unit < x->count ? u0 * unit : x->count;
    *len = ul * unit < x->count - *off ? ul * unit : x->count - *off;
}

void weft_shm_chunked_set(weft_shm_reduce_t *x)
{
    line_block(x, x->op.sh->me, &x->off, &x->len);
}

/* Rank r's input is in its slot: fetch this rank's chunk of it now, while
 * later ranks are still writing theirs. */
static void chunk_input_seen(void *arg, int r)
{
    weft_shm_reduce_t *x = arg;
    if (x->len) weft_shm_prefetch(weft_shm_slot(&x->op, r) + x->off * x->esize, x->len * x->esize);
}

/* Rank r's reduced chunk is in its slot: copy it out now. */
static void chunk_result_seen(void *arg, int r)
{
    weft_shm_reduce_t *x = arg;
    size_t off, len;
    if (r == x->op.sh->me) return;
    line_block(x, r, &off, &len);
    if (len) memcpy((char *)x->recv + off * x->esize, weft_shm_slot(&x->op, r) + off * x->esize, len * x->esize);
}

int weft_shm_chunked_piece(weft_sched_t *s, weft_shm_reduce_t *x)
{
    weft_shm_op_t *op = &x->op;
    weft_shm_t *sh = op->sh;
    switch (op->phase) {
    case 1:
        if (!weft_shm_claim(s, op, WEFT_SHM_READ_ALL, 0)) return 0;
        memcpy(weft_shm_slot(op, sh->me), x->send, x->count * x->esize);
        weft_shm_head_publish_msg(op, WEFT_SHM_PARTIAL, CHUNKED_SIG(x));
        op->phase = 2;
        /* fall through */
    case 2:
        if (!weft_shm_wait_heads_each(s, op, WEFT_SHM_PARTIAL, NULL, 0, x->got, chunk_input_seen, x, "input flag"))
            return 0;
        /* Every rank checks every signature (the first piece's), so when one
         * differs every rank fails here and nobody waits for chunks. */
        for (int r = 0; x->piece == 0 && !x->rc && r < sh->n; r++)
            x->rc = weft_shm_sig_mismatch(op, r, -1, CHUNKED_SIG(x), x->alg);
        if (!x->rc && x->len) {
            char *mine = (char *)x->recv + x->off * x->esize;
            reduce_slots(x, mine, x->off, x->len);
            memcpy(weft_shm_slot(op, sh->me) + x->off * x->esize, mine, x->len * x->esize);
        }
        weft_shm_head_publish(op, WEFT_SHM_RESULT);
        if (x->rc) break;
        op->phase = 3;
        /* fall through */
    case 3:
        if (!weft_shm_wait_heads_each(s, op, WEFT_SHM_RESULT, NULL, 0, x->got, chunk_result_seen, x,
                                      "reduced-chunk flag"))
            return 0;
        break;
    default: return WEFT_ERR_INTERNAL;
    }
    weft_shm_op_end(op);
    return 1;
}
