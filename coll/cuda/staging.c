/* coll/cuda's slot protocol (kernels.h): a call stages its contribution
 * into this rank's scratch slot (a copy kernel), passes a barrier kernel,
 * then reduces or copies straight out of the peers' slots, in slot-sized
 * chunks; a small call runs the three steps in one launch of one block
 * (fused). The one-shot, two-shot / two-step and window algorithms are
 * made of these steps; the pipelined ones start with the barrier. */
#include "coll/cuda/cuda_coll.h"

#include <string.h>

size_t weft_gpu_staged(const weft_coll_args_t *a)
{
    size_t block = a->count * weft_gpu_esize(a);
    if (a->kind == WEFT_COLL_BARRIER) return 0;
    if (a->kind == WEFT_COLL_REDUCE_SCATTER_BLOCK || a->kind == WEFT_COLL_ALLTOALL)
        return (size_t)a->comm->size * block;
    return block;
}

int weft_gpu_past_fused(const weft_coll_args_t *a)
{
    size_t staged = weft_gpu_staged(a);
    if (staged <= (size_t)(weft_gpu_vars.fused > 0 ? weft_gpu_vars.fused : 0))
        return weft_coll_decline("coll/cuda: %zu bytes staged per rank: up to WEFT_CUDA_COLL_FUSED (%d) the "
                                 "fused one shot takes the call",
                                 staged, weft_gpu_vars.fused);
    return WEFT_SUCCESS;
}

int weft_gpu_fuses(const weft_coll_args_t *a, const weft_gpu_state_t *st, int capturing)
{
    size_t staged = weft_gpu_staged(a), most = (size_t)(weft_gpu_vars.fused > 0 ? weft_gpu_vars.fused : 0);
    if (capturing && most > 4096) most = 4096;
    return staged > 0 ? staged <= most && staged <= st->slot : weft_gpu_vars.fused > 0;
}

weft_ck_ctl_t weft_gpu_ctl(const weft_gpu_state_t *st)
{
    weft_ck_ctl_t c = {(unsigned long long *)(uintptr_t)st->counter, (volatile int *)(uintptr_t)st->dwords,
                       (volatile int *)(uintptr_t)(st->dwords + sizeof(int))};
    return c;
}

unsigned weft_gpu_grid(const weft_gpu_state_t *st, size_t bytes)
{
    size_t b = (bytes + 256 * 16 - 1) / (256 * 16), most = (size_t)st->sms * 4;
    b = weft_gpu_within_cta_hints(st->comm, b > most ? most : b);
    return (unsigned)(b < 1 ? 1 : b);
}

/* 256 threads a block. */
static int launch(weft_gpu_op_t *op, weft_gpu_kernel_t k, weft_dtype_t dt, int o, unsigned gx, unsigned gy, void *args,
                  const char *what)
{
    return weft_gpu_launch(op, k, dt, o, gx, gy, 256, args, what);
}

/* The stages gathered since the last barrier, in one launch (one y-block row each). */
static int stage_flush(weft_gpu_op_t *op)
{
    weft_gpu_state_t *st = op->st;
    if (!op->stg.n) return WEFT_SUCCESS;
    op->stg.ctl = weft_gpu_ctl(st);
    op->stg.scratch = (char *)(uintptr_t)st->region;
    op->stg.slot_bytes = st->slot;
    int rc = launch(op, WEFT_GPU_K_STAGE, 0, 0, weft_gpu_grid(st, op->stg_most), (unsigned)op->stg.n, &op->stg,
                    "launching the stage kernel");
    op->stg.n = 0;
    op->stg_most = 0;
    return rc;
}

int weft_gpu_stage(weft_gpu_op_t *op, const char *in, size_t off, size_t bytes)
{
    if (!bytes) return WEFT_SUCCESS;
    weft_ck_stage_piece_t *p;
    if (op->fusing) {
        p = &op->fz.stage[op->fz.nstage++];
    } else {
        int rc = op->stg.n == WEFT_CK_MAX_RANKS ? stage_flush(op) : WEFT_SUCCESS;
        if (rc) return rc;
        p = &op->stg.piece[op->stg.n++];
        if (bytes > op->stg_most) op->stg_most = bytes;
    }
    p->in = in, p->off = off, p->bytes = bytes;
    return WEFT_SUCCESS;
}

int weft_gpu_barrier_as(weft_gpu_op_t *op, unsigned long long desc, int check, size_t need,
                        const weft_gpu_window_t *win)
{
    weft_gpu_state_t *st = op->st;
    weft_ck_barrier_args_t b;
    memset(&b, 0, sizeof(b));
    b.ctl = weft_gpu_ctl(st);
    b.nranks = st->n;
    b.rank = st->me;
    b.my_flags = (unsigned long long *)(uintptr_t)st->region;
    for (int p = 0; p < st->n; p++)
        b.peer_flags[p] = (unsigned long long *)(uintptr_t)st->peer[p];
    b.desc = desc;
    b.check = check;
    b.need = need;
    for (int p = 0; win && p < st->n; p++)
        b.winlen[p] = win->len[p];
    if (op->fusing) {
        op->fz.bar = b;
        return WEFT_SUCCESS;
    }
    int rc = stage_flush(op);
    return rc ? rc : weft_gpu_launch(op, WEFT_GPU_K_BARRIER, 0, 0, 1, 1, 32, &b, "launching the barrier kernel");
}

int weft_gpu_barrier(weft_gpu_op_t *op)
{
    return weft_gpu_barrier_as(op, 0, 1, 0, NULL);
}

/* Where a reduce or copy reads: every rank's slot, or (a call in a window) the peers' inputs there. */
static void read_from(const weft_gpu_op_t *op, weft_ck_ctl_t *ctl, const char **scratch, size_t *slot_bytes, int *reg,
                      const char **mine, const char **win)
{
    const weft_gpu_state_t *st = op->st;
    *ctl = weft_gpu_ctl(st);
    for (int p = 0; p < st->n; p++)
        scratch[p] = (const char *)(uintptr_t)st->peer[p];
    *slot_bytes = st->slot;
    *reg = op->win != NULL;
    *mine = (const char *)(uintptr_t)st->region;
    for (int p = 0; op->win && p < st->n; p++)
        win[p] = (const char *)(uintptr_t)op->win->base[p];
}

int weft_gpu_reduce_as(weft_gpu_op_t *op, size_t src_off, void *out, size_t count, int out_slot)
{
    weft_gpu_state_t *st = op->st;
    weft_ck_reduce_args_t a;
    memset(&a, 0, sizeof(a));
    read_from(op, &a.ctl, a.scratch, &a.slot_bytes, &a.reg, &a.mine, a.win);
    a.src_off = src_off;
    a.nsrc = st->n;
    a.op = (int)op->a.op;
    a.out = out;
    a.count = count;
    a.out_slot = out_slot;
    if (!count) return WEFT_SUCCESS;
    if (op->fusing) {
        op->fz.red = a;
        op->fz.mode = 1;
        return WEFT_SUCCESS;
    }
    return launch(op, WEFT_GPU_K_REDUCE, op->a.dtype, a.op, weft_gpu_grid(st, count * op->a.esize), 1, &a,
                  "launching the reduce kernel");
}

int weft_gpu_reduce(weft_gpu_op_t *op, size_t src_off, void *out, size_t count)
{
    return weft_gpu_reduce_as(op, src_off, out, count, 0);
}

int weft_gpu_copy_parts(weft_gpu_op_t *op, int n, const int *src, const size_t *src_off, char *const *dst,
                        const size_t *len)
{
    weft_gpu_state_t *st = op->st;
    weft_ck_copy_args_t c;
    memset(&c, 0, sizeof(c));
    read_from(op, &c.ctl, c.scratch, &c.slot_bytes, &c.reg, &c.mine, c.win);
    c.n = n;
    size_t most = 0;
    for (int i = 0; i < n; i++) {
        c.d[i].src = src[i];
        c.d[i].src_off = src_off[i];
        c.d[i].len = len[i];
        c.d[i].dst = dst[i];
        if (len[i] > most) most = len[i];
    }
    if (!most || !n) return WEFT_SUCCESS;
    if (op->fusing) {
        op->fz.cp = c;
        op->fz.mode = 2;
        return WEFT_SUCCESS;
    }
    return launch(op, WEFT_GPU_K_COPY, 0, 0, weft_gpu_grid(st, most), (unsigned)n, &c, "launching the copy kernel");
}

int weft_gpu_copy_out(weft_gpu_op_t *op, int n, const int *src, size_t src_off_base, const size_t *src_off_step,
                      char *const *dst, size_t len)
{
    size_t off[WEFT_CK_MAX_RANKS], lens[WEFT_CK_MAX_RANKS];
    for (int i = 0; i < n; i++)
        off[i] = src_off_base + (src_off_step ? src_off_step[i] : 0), lens[i] = len;
    return weft_gpu_copy_parts(op, n, src, off, dst, lens);
}

/* A one-source reduce of bytes (or 32-bit words): the same bits, into this rank's other slot, where the peers
 * read it after the next barrier. */
int weft_gpu_relay(weft_gpu_op_t *op, int root, size_t off, size_t bytes)
{
    weft_gpu_state_t *st = op->st;
    if (!bytes) return WEFT_SUCCESS;
    weft_ck_reduce_args_t r;
    memset(&r, 0, sizeof(r));
    r.ctl = weft_gpu_ctl(st);
    r.scratch[0] = (const char *)(uintptr_t)st->peer[root];
    r.slot_bytes = st->slot;
    r.src_off = off;
    r.nsrc = 1;
    r.op = (int)WEFT_SUM;
    r.out = (void *)(uintptr_t)off;
    r.out_slot = 1;
    r.mine = (const char *)(uintptr_t)st->region;
    int words = bytes % 4 == 0 && off % 4 == 0;
    r.count = words ? bytes / 4 : bytes;
    return launch(op, WEFT_GPU_K_REDUCE, words ? WEFT_UINT32 : WEFT_UINT8, r.op, weft_gpu_grid(st, bytes), 1, &r,
                  "launching the relay kernel");
}

int weft_gpu_takes_all(const weft_coll_args_t *a, const weft_gpu_state_t *st)
{
    (void)a;
    (void)st;
    return WEFT_SUCCESS;
}

int weft_gpu_one_shot(weft_gpu_op_t *op, int (*steps)(weft_gpu_op_t *op))
{
    op->fusing = weft_gpu_fuses(&op->a, op->st, op->capturing);
    if (op->fusing) {
        op->fz.scratch = (char *)(uintptr_t)op->st->region;
        op->fz.slot_bytes = op->st->slot;
    }
    int rc = steps(op);
    if (rc || !op->fusing) return rc;
    int reduce = op->fz.mode == 1;
    return launch(op, reduce ? WEFT_GPU_K_FUSED_REDUCE : WEFT_GPU_K_FUSED_COPY, op->a.dtype, reduce ? op->fz.red.op : 0,
                  1, 1, &op->fz, "launching the fused kernel");
}

int weft_gpu_one_shot_vector(weft_gpu_op_t *op, int reduce_here)
{
    const weft_coll_args_t *a = &op->a;
    size_t es = weft_gpu_esize(a), per = op->st->slot / es;
    const char *in = weft_gpu_input(a);
    char *out = a->recvbuf;
    int rc = WEFT_SUCCESS;
    for (size_t o = 0; !rc && o < a->count; o += per) {
        size_t k = a->count - o < per ? a->count - o : per;
        if (!(rc = weft_gpu_stage(op, in + o * es, 0, k * es)) && !(rc = weft_gpu_barrier(op)) && reduce_here)
            rc = weft_gpu_reduce(op, 0, out + o * es, k);
    }
    return rc;
}

int weft_gpu_two_step_takes(const weft_coll_args_t *a, const weft_gpu_state_t *st)
{
    /* on 2 ranks one shot reads as many remote bytes and passes one barrier less */
    if (st->n < 3) return weft_coll_decline("coll/cuda: two steps on %d ranks (3 or more)", st->n);
    return weft_gpu_past_fused(a);
}

/* Per slot chunk: each rank's part is a vector-aligned n-th of the chunk, at the same place in both slots (within
 * the chunk, so within a slot); `part` makes this rank's in its other slot, where nobody reads until the next
 * barrier. An allreduce reads about twice its vector where one shot reads it n times; a bcast's root sends its
 * chunk about twice instead of n - 1 times. */
int weft_gpu_two_step(weft_gpu_op_t *op, const char *in, int stages, int copies, weft_gpu_part_fn part)
{
    const weft_coll_args_t *a = &op->a;
    weft_gpu_state_t *st = op->st;
    int n = st->n, me = st->me, rc = WEFT_SUCCESS, src[WEFT_CK_MAX_RANKS];
    size_t es = weft_gpu_esize(a), align = es < 16 ? 16 / es : 1, kmax = st->slot / es;
    size_t off[WEFT_CK_MAX_RANKS], len[WEFT_CK_MAX_RANKS];
    char *dst[WEFT_CK_MAX_RANKS], *out = a->recvbuf;
    for (size_t o = 0; !rc && o < a->count; o += kmax) {
        size_t k = a->count - o < kmax ? a->count - o : kmax;
        size_t q = ((k + (size_t)n - 1) / (size_t)n + align - 1) / align * align; /* a part, vector-aligned */
        size_t lo = (size_t)me * q, mine = lo < k ? (k - lo < q ? k - lo : q) : 0;
        if (stages) rc = weft_gpu_stage(op, in + o * es, 0, k * es);
        if (!rc && !(rc = weft_gpu_barrier(op))) rc = part(op, lo * es, mine);
        if (!rc) rc = weft_gpu_barrier(op);
        int m = 0;
        for (int p = 0; p < n && copies; p++) {
            size_t plo = (size_t)p * q, plen = plo < k ? (k - plo < q ? k - plo : q) : 0;
            if (plen) src[m] = p, off[m] = plo * es, dst[m] = out + (o + plo) * es, len[m++] = plen * es;
        }
        if (!rc && m) rc = weft_gpu_copy_parts(op, m, src, off, dst, len);
    }
    return rc;
}
