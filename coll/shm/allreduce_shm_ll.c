/* allreduce shm_ll: the chunked shape on flagged lines, for small
 * vectors (up to WEFT_SHM_LL_MAX bytes). No messages; every rank gets the
 * same bits.
 *
 * Every rank writes its input into its flagged lines (56 bytes of data
 * and a sequence word each, segment.h), each line with 2k + 1. The lines
 * are split among the ranks in blocks (weft_coll_block); a line's owner
 * polls that line of every rank, reduces them in rank order and writes
 * the result over its own line with 2k + 2; every rank copies each
 * reduced line as soon as it is up. A line's one transfer brings its data
 * and its flag: two dependent transfers per call (inputs to owners,
 * results to all) instead of four with head flags (flag, then data, for
 * inputs and results), and a rank polls only the lines it needs.
 *
 * Signatures: each line's sequence word carries its writer's 20-bit
 * signature (weft_shm_sig_ll: message length, datatype, op; or
 * WEFT_SHM_LL_BAD from an owner that saw two), so ranks that passed
 * different counts, datatypes or ops fail where they read; a rank waiting
 * for a line that another rank's different count never writes finds that
 * rank's head (published first, marked WEFT_SHM_SIG_LL) with another
 * signature every WAIT_CHECK polls and fails too. */
#include "coll/shm/segment.h"

#include "op.h"

/* Polls of an unfinished wait between looks at the heads of the members
 * (a rank with another count or another algorithm never writes the line
 * awaited, but its head says so). */
#define WAIT_CHECK 256u
#define LL_SEQ_MASK ((UINT64_C(1) << WEFT_SHM_LL_SEQ_BITS) - 1)

typedef struct {
    weft_shm_op_t op;
    const void *send;
    void *recv;
    size_t count, esize, bytes;
    int dtype, rop;
    weft_op_strided_fn kern; /* the op's strided fold, called once per line over all ranks */
    int nl;          /* lines of the message */
    size_t l0, cnt;  /* this rank's lines */
    size_t base, extra; /* rank r owns base + (r < extra) lines (weft_coll_block) */
    int left;        /* phase 3: reduced lines not yet copied */
    uint64_t sig;    /* the head's signature (marked), and the lines' (weft_shm_sig_ll) */
    uint64_t tag;
    unsigned polls;  /* of the current wait */
    int rc;
    unsigned char got[WEFT_SHM_LL_LINES];
} ll_t;

static uint64_t ll_word(const ll_t *x, int ev, uint64_t tag)
{
    return tag << WEFT_SHM_LL_SEQ_BITS | (2 * x->op.k + (uint64_t)ev);
}
static size_t line_bytes(const ll_t *x, int j)
{
    size_t at = (size_t)j * WEFT_SHM_LL_DATA;
    return x->bytes - at < WEFT_SHM_LL_DATA ? x->bytes - at : WEFT_SHM_LL_DATA;
}

/* A line that arrived with another writer's signature: the error (once). */
static int bad_line(ll_t *x, int r, uint64_t word)
{
    return weft_shm_sig_differs(r, -1, weft_shm_sig_from_ll(word >> WEFT_SHM_LL_SEQ_BITS), weft_shm_sig_from_ll(x->tag),
                                "allreduce_shm_ll");
}

/* Every WAIT_CHECK polls of a wait: a member whose head is in this
 * collective with another length (count or algorithm) never writes what
 * this rank waits for; its mismatch, or 0. */
static int check_heads(ll_t *x)
{
    weft_shm_op_t *op = &x->op;
    if (++x->polls % WAIT_CHECK) return 0;
    for (int r = 0; r < op->sh->n; r++)
        if (atomic_load_explicit(&weft_shm_head(op, r)->seq, memory_order_acquire) >= 2 * op->k + WEFT_SHM_PARTIAL) {
            int rc = weft_shm_sig_mismatch(op, r, -1, x->sig, "allreduce_shm_ll");
            if (rc) return rc;
        }
    return 0;
}

/* This rank's lines reduced in rank order, into the result and over its
 * own lines (2k + 2); a length mismatch marks them bad instead, so every
 * reader fails. */
static void reduce_lines(ll_t *x)
{
    weft_shm_op_t *op = &x->op;
    int n = op->sh->n;
    weft_shm_ll_line_t *mine = weft_shm_ll(op, op->sh->me);
    for (int r = 0; r < n && !x->rc; r++) {
        const weft_shm_ll_line_t *lines = weft_shm_ll(op, r);
        for (size_t j = x->l0; j < x->l0 + x->cnt && !x->rc; j++) {
            uint64_t w = atomic_load_explicit(&lines[j].seq, memory_order_relaxed);
            if (w >> WEFT_SHM_LL_SEQ_BITS != x->tag) x->rc = bad_line(x, r, w);
        }
    }
    for (size_t j = x->l0; j < x->l0 + x->cnt; j++) {
        if (x->rc) {
            atomic_store_explicit(&mine[j].seq, ll_word(x, WEFT_SHM_RESULT, WEFT_SHM_LL_BAD), memory_order_release);
            continue;
        }
        size_t b = line_bytes(x, (int)j), m = b / x->esize;
        char *dst = (char *)x->recv + j * WEFT_SHM_LL_DATA;
        x->kern(dst, weft_shm_ll(op, 0)[j].d, WEFT_SHM_LL_RANK_STRIDE, n, m);
        weft_op_finalize((weft_op_t)x->rop, (weft_dtype_t)x->dtype, dst, m, n);
        memcpy(mine[j].d, dst, b);
        atomic_store_explicit(&mine[j].seq, ll_word(x, WEFT_SHM_RESULT, x->tag), memory_order_release);
    }
    weft_shm_ring(op->sh);
}

static int step(weft_sched_t *s, void *arg)
{
    ll_t *x = arg;
    weft_shm_op_t *op = &x->op;
    weft_shm_t *sh = op->sh;
    int rc;
    switch (op->phase) {
    case 0: {
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        size_t l0, cnt;
        x->nl = (int)((x->bytes + WEFT_SHM_LL_DATA - 1) / WEFT_SHM_LL_DATA);
        weft_coll_block((size_t)x->nl, sh->n, sh->me, &l0, &cnt);
        x->l0 = l0;
        x->cnt = cnt;
        x->base = (size_t)x->nl / (size_t)sh->n;
        x->extra = (size_t)x->nl % (size_t)sh->n;
        op->phase = 1;
    }
        /* fall through */
    case 1: {
        if (!weft_shm_claim(s, op, WEFT_SHM_READ_ALL, 0)) return 0;
        /* the head first: a rank waiting in vain for a line finds it */
        weft_shm_head_publish_msg(op, WEFT_SHM_PARTIAL, x->sig);
        weft_shm_ll_line_t *mine = weft_shm_ll(op, sh->me);
        uint64_t w = ll_word(x, WEFT_SHM_PARTIAL, x->tag);
        for (int j = 0; j < x->nl; j++) {
            memcpy(mine[j].d, (const char *)x->send + (size_t)j * WEFT_SHM_LL_DATA, line_bytes(x, j));
            atomic_store_explicit(&mine[j].seq, w, memory_order_release);
        }
        weft_shm_ring(sh);
        x->polls = 0;
        op->phase = 2;
    }
        /* fall through */
    case 2: {
        /* this rank's lines of every rank: all loaded, then judged */
        uint64_t want = 2 * op->k + WEFT_SHM_PARTIAL;
        int late = -1;
        for (int r = 0; r < sh->n; r++) {
            const weft_shm_ll_line_t *lines = weft_shm_ll(op, r);
            for (size_t j = x->l0; j < x->l0 + x->cnt; j++)
                if ((atomic_load_explicit(&lines[j].seq, memory_order_acquire) & LL_SEQ_MASK) < want && late < 0)
                    late = r;
        }
        if (late >= 0) {
            if ((x->rc = check_heads(x))) {
                reduce_lines(x); /* marks this rank's lines bad: their readers fail too */
                break;
            }
            weft_shm_waiting(s, sh, late, "flagged input line");
            return 0;
        }
        reduce_lines(x);
        if (x->rc) break;
        x->left = x->nl - (int)x->cnt;
        x->polls = 0;
        op->phase = 3;
    }
        /* fall through */
    case 3: {
        /* every other line, copied as soon as its owner reduced it */
        uint64_t want = 2 * op->k + WEFT_SHM_RESULT;
        int late = -1;
        size_t j = 0;
        for (int o = 0; o < sh->n && j < (size_t)x->nl && !x->rc; o++) {
            size_t end = j + x->base + ((size_t)o < x->extra);
            const weft_shm_ll_line_t *lines = weft_shm_ll(op, o);
            for (; o != sh->me && j < end; j++) {
                if (x->got[j]) continue;
                uint64_t w = atomic_load_explicit(&lines[j].seq, memory_order_acquire);
                if ((w & LL_SEQ_MASK) < want) {
                    if (late < 0) late = o;
                    continue;
                }
                if (w >> WEFT_SHM_LL_SEQ_BITS != x->tag) {
                    x->rc = bad_line(x, o, w);
                    break;
                }
                memcpy((char *)x->recv + j * WEFT_SHM_LL_DATA, lines[j].d, line_bytes(x, (int)j));
                x->got[j] = 1;
                x->left--;
            }
            j = end;
        }
        if (x->rc) break;
        if (x->left) {
            if ((x->rc = check_heads(x))) break;
            weft_shm_waiting(s, sh, late, "reduced flagged line");
            return 0;
        }
        /* a reduced line needed every member's input line */
        weft_shm_all_started(sh, op->k);
        break;
    }
    default: return WEFT_ERR_INTERNAL;
    }
    weft_shm_op_end(op);
    return x->rc ? x->rc : 1;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    weft_shm_t *sh = a->count && a->bytes <= WEFT_SHM_LL_MAX ? weft_shm_get(a->comm, 0) : NULL;
    if (!sh || sh->ops >= WEFT_SHM_LL_OPS_MAX) return WEFT_ERR_UNSUPPORTED; /* (its sequence bits) */
    ll_t *x = weft_shm_op_alloc(s, sh, sizeof(*x), 0, "allreduce_shm_ll");
    if (!x) return WEFT_ERR_NO_MEMORY;
    x->send = a->sendbuf;
    x->recv = a->recvbuf;
    x->count = a->count;
    x->esize = a->esize;
    x->bytes = a->bytes;
    x->dtype = (int)a->dtype;
    x->rop = (int)a->op;
    x->kern = weft_op_strided_kernel(a->op, a->dtype); /* valid: checked at the call */
    x->sig = weft_shm_sig(a, a->bytes) | WEFT_SHM_SIG_LL;
    x->tag = weft_shm_sig_ll(x->sig);
    return weft_sched_poll(s, step, x);
}

const weft_coll_alg_t weft_alg_allreduce_shm_ll = {
    .name = "shm_ll",
    .kind = WEFT_COLL_ALLREDUCE,
    .description = "one node: every rank writes its input in flagged lines (56 bytes and a flag each) of a shared "
                   "segment; each line's owner reduces it across ranks in rank order, all copy the reduced lines as "
                   "they come (small vectors, up to 7 KiB)",
    .build = build,
};
