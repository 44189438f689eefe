/* coll/cuda's pipelined kernel (kernels.h: weft_ck_pipe_args): a barrier
 * (the slots are free, the counter moves), then one launch of many blocks,
 * each with positions of its own in the two slots, through which the
 * call's units are staged (or pushed into the peers' positions, or passed
 * round a ring) and consumed as their flags arrive. The algorithms
 * (*_pipelined.c: the peers read; *_pushed.c; *_ring.c) set the form; this
 * file cuts the slots into positions and units and launches. */
#include "coll/cuda/cuda_coll.h"

#include <string.h>

void weft_gpu_pipe_init(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p)
{
    memset(p, 0, sizeof(*p));
    p->ctl = weft_gpu_ctl(st);
    p->nranks = st->n;
    p->rank = st->me;
    for (int r = 0; r < st->n; r++)
        p->scratch[r] = (char *)(uintptr_t)st->peer[r];
    p->in = weft_gpu_input(a);
    p->out = a->recvbuf;
    p->stage_on = p->consume_on = 1;
    p->read_mask = p->cons_mask = weft_gpu_others(st->n, st->me);
    p->npieces = 1;
    p->esize = weft_gpu_esize(a);
    p->count = a->count;
    p->op = (int)a->op;
}

void weft_gpu_pipe_parts(const weft_coll_args_t *a, int n, weft_ck_pipe_args_t *p)
{
    size_t es = weft_gpu_esize(a), align = es < 16 ? 16 / es : 1;
    p->total = a->count;
    p->count = ((a->count + (size_t)n - 1) / (size_t)n + align - 1) / align * align;
    p->in_stride = p->count * es;
}

/* The warps of each block of a pipelined call that push while the block's
 * others consume (weft_ck_pipe_args.split; 0: each warp does both in turn),
 * of a block of `warps`: only where this rank both pushes to a peer and
 * consumes from one (not a bcast's root or a reduce's other ranks, not mode
 * 4, whose other ranks push while they consume), and where each of the g
 * blocks has two units or more (one unit a block leaves nothing to
 * overlap); WEFT_CUDA_COLL_PIPE_SPLIT as set, its auto values by collective
 * (the variable's text says what they gave). In place too: a block's
 * consuming warps start a unit only after its pushing warps pushed it
 * (kernels.h), so an output they write is never input still to be read. */
static int pipe_split(const weft_ck_pipe_args_t *p, weft_coll_kind_t kind, int warps, unsigned g)
{
    if (!p->push || p->mode == 4 || !p->stage_on || !p->consume_on || !p->cons_mask || !p->read_mask) return 0;
    int w = weft_gpu_vars.pipe_split;
    if (w < 0) {
        if (p->units < 2 * (size_t)g) return 0;
        w = kind == WEFT_COLL_ALLREDUCE ? (warps * 6 + 4) / 8
            : (kind == WEFT_COLL_ALLGATHER && p->nranks == 2) || kind == WEFT_COLL_ALLTOALL ||
                    kind == WEFT_COLL_REDUCE_SCATTER_BLOCK
                ? (warps * 3 + 4) / 8
                : 0;
    }
    return w > 0 && w < warps ? w : 0;
}

int weft_gpu_pipe_shape(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p, unsigned *grid)
{
    int n = st->n, ring = p->mode >= 5;
    /* places in a position: pushed, one per producer (two for an allreduce's two phases, the root's and the
     * n - 1 parts for a bcast's); else the pieces */
    p->pos_pieces = ring || !p->push             ? p->npieces
                    : p->mode == 3               ? 2 * n
                    : p->mode == 4               ? n
                    : a->kind == WEFT_COLL_BCAST ? 1
                                                 : n;
    /* geometry: blocks within the hints and the SMs; positions of whole 16-byte words per piece */
    const weft_gpu_vars_t *v = &weft_gpu_vars;
    unsigned g = (unsigned)weft_gpu_within_cta_hints(st->comm, v->pipe_blocks > 0 ? (size_t)v->pipe_blocks : 1);
    if (g > st->pipe_most) g = st->pipe_most; /* the SMs; on a shared GPU, every sharer's grid at once */
    if (g > WEFT_CK_PIPE_MAXPOS) g = WEFT_CK_PIPE_MAXPOS;
    if (g < 1) g = 1;
    int depth_as = v->pipe_depth >= 0 ? v->pipe_depth : ring || (a->kind == WEFT_COLL_BCAST && n == 2) ? 4 : 2;
    unsigned want = depth_as > 1 ? (unsigned)depth_as : 1;
    /* a ring's K units at a time need 2K positions (kernels.h) */
    int ahead = v->pipe_ahead >= 0 ? v->pipe_ahead : a->kind == WEFT_COLL_ALLREDUCE ? 1 : 0;
    if (ring && p->mode != 6) {
        if (want < 2 * (unsigned)(ahead > 1 ? ahead : 1)) want = 2 * (unsigned)(ahead > 1 ? ahead : 1);
        if (want > WEFT_CK_PIPE_MAXPOS) want = WEFT_CK_PIPE_MAXPOS;
        if (g > WEFT_CK_PIPE_MAXPOS / want) g = WEFT_CK_PIPE_MAXPOS / want;
    }
    unsigned depth = WEFT_CK_PIPE_MAXPOS / g < want ? WEFT_CK_PIPE_MAXPOS / g : want;
    size_t posbytes = 2 * st->slot / ((size_t)g * depth);
    size_t piece = posbytes / (size_t)p->pos_pieces / 16 * 16;
    p->unit_elems = piece / p->esize;
    if (!p->unit_elems || !p->count)
        return weft_coll_decline("coll/cuda: slots of %zu bytes hold no unit of the pipelined kernel's %u blocks "
                                 "of %u positions",
                                 st->slot, g, depth);
    p->units = (p->count + p->unit_elems - 1) / p->unit_elems;
    /* a flag value holds a unit's number (a ring's item's) in 24 bits */
    if (p->units * (ring ? 2 * (size_t)n : 1) >= (size_t)1 << 24)
        return weft_coll_decline("coll/cuda: %zu units of the pipelined kernel, more than its flags count", p->units);
    if (p->units < g) g = (unsigned)p->units;
    p->depth = (int)depth;
    if (ring) /* units a block runs at a time */
        p->ahead = ahead < 1 ? 1 : ahead > (int)depth / 2 ? ((int)depth / 2 > 0 ? (int)depth / 2 : 1) : ahead;
    else
        p->ahead = ahead < (int)depth ? ahead : (int)depth - 1;
    p->split = pipe_split(p, a->kind, st->pipe_threads / 32, g);
    *grid = g;
    return WEFT_SUCCESS;
}

/* The kernel of a form: one per mode, staged or pushed (kernels.h: weft_ck_pipe_args). */
static weft_gpu_kernel_t pipe_kernel(const weft_ck_pipe_args_t *p)
{
    switch (p->mode) {
    case 1: return p->push ? WEFT_GPU_K_PUSH_REDUCE : WEFT_GPU_K_PIPE_REDUCE;
    case 2: return p->push ? WEFT_GPU_K_PUSH_COPY : WEFT_GPU_K_PIPE_COPY;
    case 3: return p->push ? WEFT_GPU_K_PUSH_ALLREDUCE : WEFT_GPU_K_PIPE_REDUCE;
    case 4: return p->push ? WEFT_GPU_K_PUSH_BCAST : WEFT_GPU_K_PIPE_COPY;
    case 5: return WEFT_GPU_K_RING_ALLGATHER;
    case 6: return WEFT_GPU_K_RING_BCAST;
    case 7: return WEFT_GPU_K_RING_REDUCE_SCATTER;
    default: return WEFT_GPU_K_RING_ALLREDUCE; /* 8 */
    }
}

int weft_gpu_pipe_takes(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_gpu_pipe_form_fn form)
{
    weft_ck_pipe_args_t p;
    unsigned g;
    int rc = weft_gpu_past_fused(a);
    if (rc) return rc;
    weft_gpu_pipe_init(a, st, &p);
    form(a, st, &p);
    if (p.mode >= 5 && st->n < 3) return weft_coll_decline("coll/cuda: a ring of %d ranks (3 or more)", st->n);
    return weft_gpu_pipe_shape(a, st, &p, &g);
}

int weft_gpu_pipe_issue(weft_gpu_op_t *op, weft_gpu_pipe_form_fn form)
{
    weft_ck_pipe_args_t p;
    unsigned g;
    weft_gpu_pipe_init(&op->a, op->st, &p);
    form(&op->a, op->st, &p);
    int rc = weft_gpu_pipe_shape(&op->a, op->st, &p, &g);
    if (!rc) rc = weft_gpu_barrier(op);
    return rc ? rc
              : weft_gpu_launch(op, pipe_kernel(&p), op->a.dtype, p.op, g, 1, (unsigned)op->st->pipe_threads, &p,
                                "launching the pipelined kernel");
}
