/* coll/cuda's pipelined staged algorithms: allreduce, bcast and reduce on
 * device buffers through host copies (as staged.c) in pieces of
 * PIECE_BYTES, so the copies over the GPU's host link overlap the host
 * collective instead of coming before and after all of it. The copy of a
 * piece to pinned host memory is queued on the context's copy stream
 * while the host algorithm runs the piece before it (two pieces in
 * flight); a piece's result goes back to the device as soon as its host
 * collective ends, while the next piece runs. Time: about one piece's
 * copies plus the host collective of the whole call, where staged.c pays
 * both copies of the whole call besides. Each piece is the collective of
 * its elements (these three are elementwise), built by the selection as
 * for host buffers of that size, on every rank alike. For where UCX moves
 * no device memory (direct.c's rings do where it does). A communicator
 * whose shared state is not settled yet (its first calls: a host algorithm
 * with a fallback) runs the whole call staged. */
#include "coll/coll.h"
#include "pt2pt/cuda.h"

#include <string.h>

#define PIECE_BYTES ((size_t)4 << 20)

typedef struct {
    char *dev_in, *dev_out; /* the device buffers (NULL: no copy this way on this rank) */
    char *hin, *hout;       /* their host copies */
    size_t bytes, piece;    /* the call's, a piece's (a multiple of the element) */
    int npieces;
    int next_in, next_out; /* the next piece whose copy in / out to queue */
    int waited_in;         /* pieces whose copy in is known done */
    weft_cuda_copy_t *in, *out; /* per piece */
} pipe_t;

typedef struct {
    pipe_t *p;
    int j;
} piece_ref_t;

static size_t piece_len(const pipe_t *p, int j)
{
    size_t off = (size_t)j * p->piece;
    return p->bytes - off < p->piece ? p->bytes - off : p->piece;
}

static void pipe_end(void *arg)
{
    pipe_t *p = arg;
    for (int j = 0; j < p->npieces; j++) {
        weft_cuda_copy_end(&p->in[j]);
        weft_cuda_copy_end(&p->out[j]);
    }
}

/* Queues copies in up to piece `upto` (exclusive). */
static int queue_in(pipe_t *p, int upto)
{
    int rc = WEFT_SUCCESS;
    if (upto > p->npieces) upto = p->npieces;
    for (; p->dev_in && p->next_in < upto && !rc; p->next_in++) {
        size_t off = (size_t)p->next_in * p->piece;
        rc = weft_cuda_copy_start(p->hin + off, p->dev_in + off, piece_len(p, p->next_in), &p->in[p->next_in]);
    }
    return rc;
}

/* Before piece j's host collective: its copy in is done; the one after it is queued. */
static int wait_in(weft_sched_t *s, void *arg)
{
    const piece_ref_t *r = arg;
    pipe_t *p = r->p;
    if (!p->dev_in) return 1;
    int rc = queue_in(p, r->j + 2);
    if (rc) return rc;
    for (; p->waited_in <= r->j; p->waited_in++) {
        if ((rc = weft_cuda_copy_test(&p->in[p->waited_in])) == 0) {
            weft_sched_waiting(s, -1, "the copy of a piece of the input to host memory");
            return 0;
        }
        if (rc < 0) return rc;
    }
    return 1;
}

/* After piece j's host collective: its result's copy out is queued. */
static int queue_out(weft_sched_t *s, void *arg)
{
    (void)s;
    const piece_ref_t *r = arg;
    pipe_t *p = r->p;
    if (!p->dev_out) return WEFT_SUCCESS;
    size_t off = (size_t)r->j * p->piece;
    p->next_out = r->j + 1;
    return weft_cuda_copy_start(p->dev_out + off, p->hout + off, piece_len(p, r->j), &p->out[r->j]);
}

/* The tail of piece j's host collective (weft_coll_build_selected adds it at build time): the step above. */
static int add_queue_out(weft_sched_t *s, void *arg)
{
    return weft_sched_call(s, queue_out, arg);
}

/* The end: every copy out done. */
static int wait_out(weft_sched_t *s, void *arg)
{
    pipe_t *p = arg;
    for (int j = 0; j < p->next_out; j++) {
        int rc = weft_cuda_copy_test(&p->out[j]);
        if (rc == 0) {
            weft_sched_waiting(s, -1, "the copy of a piece of the result to the device");
            return 0;
        }
        if (rc < 0) return rc;
    }
    return 1;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    const char *name = weft_coll_kind_name(a->kind);
    if (a->mem == WEFT_MEM_HOST) return weft_coll_decline("%s staged_pipelined: host buffers", name);
    if (a->kind != WEFT_COLL_ALLREDUCE && a->kind != WEFT_COLL_BCAST && a->kind != WEFT_COLL_REDUCE)
        return weft_coll_decline("%s staged_pipelined: only the elementwise collectives (allreduce, bcast, reduce)",
                                 name);
    weft_coll_stage_t x;
    if (weft_coll_stage_extents(a, &x)) return weft_coll_decline("%s staged_pipelined: not staged", name);
    size_t piece = PIECE_BYTES / a->esize * a->esize;
    if (!piece || x.block <= piece)
        return weft_coll_decline("%s staged_pipelined: %zu bytes, one piece (%zu bytes) or less", name, x.block,
                                 PIECE_BYTES);
    if (!weft_coll_settled(a->comm))
        return weft_coll_decline("%s staged_pipelined: the communicator's shared state is not settled yet (its "
                                 "first calls)",
                                 name);
    int npieces = (int)((x.block + piece - 1) / piece);
    pipe_t *p = weft_sched_scratch(s, sizeof(*p) + 2 * (size_t)npieces * sizeof(weft_cuda_copy_t) +
                                          (size_t)npieces * sizeof(piece_ref_t));
    if (!p) return weft_error(WEFT_ERR_NO_MEMORY, "%s staged_pipelined: out of memory", name);
    memset(p, 0, sizeof(*p) + 2 * (size_t)npieces * sizeof(weft_cuda_copy_t));
    p->in = (weft_cuda_copy_t *)(p + 1);
    p->out = p->in + npieces;
    piece_ref_t *refs = (piece_ref_t *)(p->out + npieces);
    p->bytes = x.block;
    p->piece = piece;
    p->npieces = npieces;
    /* Host copies, in pinned memory kept for reuse (bcast: one buffer). */
    int rc = weft_coll_stage_pinned(s, a, &x, &p->hin, &p->hout, "staged_pipelined");
    if (rc) return rc;
    p->dev_in = x.in ? (char *)x.src : NULL;
    p->dev_out = x.out ? (char *)a->recvbuf : NULL;
    if ((rc = weft_sched_on_end(s, pipe_end, p))) return rc; /* copies in flight end before the host memory goes back */
    weft_sched_device(s);
    weft_coll_args_t h;
    weft_coll_stage_host_args(a, p->hin, p->hout, &h);
    for (int j = 0; j < npieces && !rc; j++) {
        size_t off = (size_t)j * piece;
        weft_coll_args_t hj = h;
        hj.count = piece_len(p, j) / a->esize;
        hj.bytes = piece_len(p, j);
        hj.sendbuf = p->hin ? p->hin + off : NULL;
        hj.recvbuf = p->hout ? p->hout + off : NULL;
        if (a->kind == WEFT_COLL_BCAST) hj.sendbuf = hj.recvbuf = p->hin + off;
        refs[j] = (piece_ref_t){p, j};
        /* the piece's messages start after its copy in: a round after this wait */
        if ((rc = weft_sched_poll(s, wait_in, &refs[j])) || (rc = weft_sched_end_round(s))) break;
        if ((rc = weft_coll_build_selected(s, &hj, add_queue_out, &refs[j])) == WEFT_ERR_UNSUPPORTED)
            return weft_error(WEFT_ERR_INTERNAL, "%s staged_pipelined: no host algorithm takes a piece's call", name);
        if (!rc && weft_sched_has_fallback(s))
            return weft_error(WEFT_ERR_INTERNAL, "%s staged_pipelined: a piece's host algorithm has a fallback", name);
        /* (the next piece's wait for its copy in joins this piece's round of queue_out) */
    }
    if (rc) return rc;
    weft_debug("%s staged_pipelined: %zu bytes through pinned host copies in %d pieces of %zu bytes", name, x.block,
               npieces, piece);
    return weft_sched_poll(s, wait_out, p);
}

#define PIPELINED_ALG(kind_, fn_)                                                                                      \
    const weft_coll_alg_t weft_alg_##fn_##_staged_pipelined = {                                                        \
        "staged_pipelined", kind_,                                                                                     \
        "device buffers through host copies in 4 MiB pieces: a piece's copy to pinned host memory overlaps the host "  \
        "collective of the piece before it, its result's copy back the next piece's (the host algorithm the "         \
        "selection picks for each piece; from two pieces, on a communicator whose shared state is settled)",         \
        build, 0};

PIPELINED_ALG(WEFT_COLL_BCAST, bcast)
PIPELINED_ALG(WEFT_COLL_REDUCE, reduce)
PIPELINED_ALG(WEFT_COLL_ALLREDUCE, allreduce)
