/* Datatypes. A type is its type map (runs of basic elements at byte
 * displacements, one element's worth; a run may repeat at a stride) plus
 * its bounds and the constructor call that made it (for get_envelope /
 * get_contents). Every constructor reduces to a list of blocks (count
 * copies of an old type at a displacement, the block itself repeated at a
 * stride for vectors and subarrays). Copies of an old type that is one run
 * become one run with more repetitions, so contiguous and vector types of
 * any count stay one run, and a vector of vectors one run per outer block;
 * only copies of a type of several runs are written out, up to a bound on
 * the runs a type may hold (RUNS_MAX). Sending packs into weft's byte
 * buffers unless the data is contiguous (then it goes as is). */
#include "mpi_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The predefined types, by handle value - 0x200: name, size, class,
 * weft's type, alignment. Pair types (value, index) are built at init. */
#define NONE ((weft_dtype_t)-1)
typedef struct predef {
    int value;
    const char *name;
    int size;
    int cls;
    weft_dtype_t wdt;
    int align;
} predef_t;

static const predef_t predefs[] = {
    {0x201, "MPI_AINT", 8, 'i', WEFT_INT64, 8},
    {0x202, "MPI_COUNT", 8, 'i', WEFT_INT64, 8},
    {0x203, "MPI_OFFSET", 8, 'i', WEFT_INT64, 8},
    {0x207, "MPI_PACKED", 1, 'b', WEFT_BYTE, 1},
    {0x208, "MPI_SHORT", 2, 'i', WEFT_INT16, 2},
    {0x209, "MPI_INT", 4, 'i', WEFT_INT32, 4},
    {0x20a, "MPI_LONG", 8, 'i', WEFT_INT64, 8},
    {0x20b, "MPI_LONG_LONG_INT", 8, 'i', WEFT_INT64, 8},
    {0x20c, "MPI_UNSIGNED_SHORT", 2, 'u', WEFT_UINT16, 2},
    {0x20d, "MPI_UNSIGNED", 4, 'u', WEFT_UINT32, 4},
    {0x20e, "MPI_UNSIGNED_LONG", 8, 'u', WEFT_UINT64, 8},
    {0x20f, "MPI_UNSIGNED_LONG_LONG", 8, 'u', WEFT_UINT64, 8},
    {0x210, "MPI_FLOAT", 4, 'f', WEFT_FLOAT32, 4},
    {0x212, "MPI_C_COMPLEX", 8, 'c', NONE, 4},
    {0x213, "MPI_CXX_FLOAT_COMPLEX", 8, 'c', NONE, 4},
    {0x214, "MPI_DOUBLE", 8, 'f', WEFT_FLOAT64, 8},
    {0x216, "MPI_C_DOUBLE_COMPLEX", 16, 'c', NONE, 8},
    {0x217, "MPI_CXX_DOUBLE_COMPLEX", 16, 'c', NONE, 8},
    {0x218, "MPI_LOGICAL", 4, 'l', NONE, 4},
    {0x219, "MPI_INTEGER", 4, 'i', WEFT_INT32, 4},
    {0x21a, "MPI_REAL", 4, 'f', WEFT_FLOAT32, 4},
    {0x21b, "MPI_COMPLEX", 8, 'c', NONE, 4},
    {0x21c, "MPI_DOUBLE_PRECISION", 8, 'f', WEFT_FLOAT64, 8},
    {0x21d, "MPI_DOUBLE_COMPLEX", 16, 'c', NONE, 8},
    {0x21e, "MPI_CHARACTER", 1, 'x', NONE, 1},
    {0x220, "MPI_LONG_DOUBLE", 16, 'f', NONE, 16},
    {0x224, "MPI_C_LONG_DOUBLE_COMPLEX", 32, 'c', NONE, 16},
    {0x225, "MPI_CXX_LONG_DOUBLE_COMPLEX", 32, 'c', NONE, 16},
    {0x238, "MPI_C_BOOL", 1, 'l', NONE, 1},
    {0x239, "MPI_CXX_BOOL", 1, 'l', NONE, 1},
    {0x23c, "MPI_WCHAR", 4, 'x', NONE, 4},
    {0x240, "MPI_INT8_T", 1, 'i', WEFT_INT8, 1},
    {0x241, "MPI_UINT8_T", 1, 'u', WEFT_UINT8, 1},
    {0x243, "MPI_CHAR", 1, 'i', WEFT_INT8, 1},
    {0x244, "MPI_SIGNED_CHAR", 1, 'i', WEFT_INT8, 1},
    {0x245, "MPI_UNSIGNED_CHAR", 1, 'u', WEFT_UINT8, 1},
    {0x247, "MPI_BYTE", 1, 'b', WEFT_BYTE, 1},
    {0x248, "MPI_INT16_T", 2, 'i', WEFT_INT16, 2},
    {0x249, "MPI_UINT16_T", 2, 'u', WEFT_UINT16, 2},
    {0x250, "MPI_INT32_T", 4, 'i', WEFT_INT32, 4},
    {0x251, "MPI_UINT32_T", 4, 'u', WEFT_UINT32, 4},
    {0x258, "MPI_INT64_T", 8, 'i', WEFT_INT64, 8},
    {0x259, "MPI_UINT64_T", 8, 'u', WEFT_UINT64, 8},
    {0x2c0, "MPI_LOGICAL1", 1, 'l', NONE, 1},
    {0x2c1, "MPI_INTEGER1", 1, 'i', WEFT_INT8, 1},
    {0x2c8, "MPI_LOGICAL2", 2, 'l', NONE, 2},
    {0x2c9, "MPI_INTEGER2", 2, 'i', WEFT_INT16, 2},
    {0x2ca, "MPI_REAL2", 2, 'h', WEFT_FLOAT16, 2},
    {0x2d0, "MPI_LOGICAL4", 4, 'l', NONE, 4},
    {0x2d1, "MPI_INTEGER4", 4, 'i', WEFT_INT32, 4},
    {0x2d2, "MPI_REAL4", 4, 'f', WEFT_FLOAT32, 4},
    {0x2d3, "MPI_COMPLEX4", 4, 'x', NONE, 2},
    {0x2d8, "MPI_LOGICAL8", 8, 'l', NONE, 8},
    {0x2d9, "MPI_INTEGER8", 8, 'i', WEFT_INT64, 8},
    {0x2da, "MPI_REAL8", 8, 'f', WEFT_FLOAT64, 8},
    {0x2db, "MPI_COMPLEX8", 8, 'c', NONE, 4},
    {0x2e0, "MPI_LOGICAL16", 16, 'l', NONE, 16},
    {0x2e1, "MPI_INTEGER16", 16, 'i', NONE, 16},
    {0x2e2, "MPI_REAL16", 16, 'f', NONE, 16},
    {0x2e3, "MPI_COMPLEX16", 16, 'c', NONE, 8},
    {0x2eb, "MPI_COMPLEX32", 32, 'c', NONE, 16},
};
#define N_PREDEF ((int)(sizeof(predefs) / sizeof(predefs[0])))

/* Pair types: value type, index type (MPI_INT, or the same Fortran type). */
static const struct {
    int value;
    const char *name;
    int first, second;
} pairs[] = {
    {0x228, "MPI_FLOAT_INT", 0x210, 0x209}, {0x229, "MPI_DOUBLE_INT", 0x214, 0x209},
    {0x22a, "MPI_LONG_INT", 0x20a, 0x209},  {0x22b, "MPI_2INT", 0x209, 0x209},
    {0x22c, "MPI_SHORT_INT", 0x208, 0x209}, {0x22d, "MPI_LONG_DOUBLE_INT", 0x220, 0x209},
    {0x230, "MPI_2REAL", 0x21a, 0x21a},     {0x231, "MPI_2DOUBLE_PRECISION", 0x21c, 0x21c},
    {0x232, "MPI_2INTEGER", 0x219, 0x219},
};
#define N_PAIRS ((int)(sizeof(pairs) / sizeof(pairs[0])))

struct MPI_ABI_Datatype *mpi_dtype_table[MPI_DTYPE_TABLE_SIZE];
static struct MPI_ABI_Datatype predef_obj[N_PREDEF + N_PAIRS];
static mpi_run_t predef_runs[N_PREDEF + 2 * N_PAIRS];

/* mpi_basic: by handle value - 0x200 (only non-pair predefined types). */
static mpi_basic_t basic_table[MPI_DTYPE_TABLE_SIZE];

const mpi_basic_t *mpi_basic_of(int basic)
{
    return &basic_table[basic];
}

static void predef_init(struct MPI_ABI_Datatype *t, int value, const char *name)
{
    t->h.magic = MPI_MAGIC_BASE + MPI_K_DTYPE;
    t->h.refs = 1;
    t->predefined = value;
    t->committed = 1;
    t->combiner = MPI_COMBINER_NAMED;
    snprintf(t->name, sizeof(t->name), "%s", name);
    mpi_dtype_table[value - 0x200] = t;
}

/* Derived types' extra fields live beside the struct: alignment and the
 * unit a reduction works in. */
typedef struct dtype_extra {
    int align;
    int unit;        /* predefined type every element is made of (reductions), or 0 */
    MPI_Count units; /* units per element */
} dtype_extra_t;

static dtype_extra_t *extra_of(const struct MPI_ABI_Datatype *t);
static dtype_extra_t predef_extra[MPI_DTYPE_TABLE_SIZE];

void mpi_dtype_init(void)
{
    static int done;
    if (done) return;
    done = 1;
    int k = 0;
    for (int i = 0; i < N_PREDEF; i++) {
        const predef_t *p = &predefs[i];
        struct MPI_ABI_Datatype *t = &predef_obj[i];
        basic_table[p->value - 0x200] = (mpi_basic_t){p->name, p->size, p->cls, p->wdt};
        predef_init(t, p->value, p->name);
        t->size = t->extent = t->true_extent = p->size;
        t->nelem = 1;
        t->contig = 1;
        t->basic = p->value - 0x200;
        t->nruns = 1;
        t->runs = &predef_runs[k++];
        t->runs[0] = (mpi_run_t){.disp = 0, .n = 1, .basic = p->value - 0x200, .reps = 1};
        t->wdt = p->wdt;
        predef_extra[p->value - 0x200] = (dtype_extra_t){p->align, p->value, 1};
    }
    for (int i = 0; i < N_PAIRS; i++) {
        const predef_t *a = NULL, *b = NULL;
        for (int j = 0; j < N_PREDEF; j++) {
            if (predefs[j].value == pairs[i].first) a = &predefs[j];
            if (predefs[j].value == pairs[i].second) b = &predefs[j];
        }
        struct MPI_ABI_Datatype *t = &predef_obj[N_PREDEF + i];
        predef_init(t, pairs[i].value, pairs[i].name);
        /* C struct layout: the index after the value, at its alignment */
        MPI_Aint off = (a->size + b->align - 1) / b->align * b->align;
        int align = a->align > b->align ? a->align : b->align;
        MPI_Aint ub = off + b->size;
        t->size = a->size + b->size;
        t->true_extent = ub;
        t->extent = (ub + align - 1) / align * align;
        t->nelem = 2;
        t->wdt = NONE;
        t->runs = &predef_runs[k];
        if (a == b && off == a->size) {
            t->nruns = 1;
            t->runs[0] = (mpi_run_t){.disp = 0, .n = 2, .basic = a->value - 0x200, .reps = 1};
            t->basic = a->value - 0x200;
            k += 1;
        } else {
            t->nruns = 2;
            t->runs[0] = (mpi_run_t){.disp = 0, .n = 1, .basic = a->value - 0x200, .reps = 1};
            t->runs[1] = (mpi_run_t){.disp = off, .n = 1, .basic = b->value - 0x200, .reps = 1};
            t->basic = -1;
            k += 2;
        }
        t->contig = t->extent == t->size && ub == t->size;
        predef_extra[pairs[i].value - 0x200] = (dtype_extra_t){align, pairs[i].value, 1};
    }
}

/* Derived types keep their extra in a side table by slot index. */
static dtype_extra_t *derived_extra;
static int derived_extra_cap;

static dtype_extra_t *extra_of(const struct MPI_ABI_Datatype *t)
{
    if (t->predefined) return &predef_extra[t->predefined - 0x200];
    int i = mpi_obj_index(MPI_K_DTYPE, t);
    if (i >= derived_extra_cap) {
        int cap = derived_extra_cap ? derived_extra_cap : 64;
        while (cap <= i)
            cap *= 2;
        dtype_extra_t *n = realloc(derived_extra, sizeof(*n) * (size_t)cap);
        if (!n) abort();
        memset(n + derived_extra_cap, 0, sizeof(*n) * (size_t)(cap - derived_extra_cap));
        derived_extra = n;
        derived_extra_cap = cap;
    }
    return &derived_extra[i];
}

int mpi_dtype_unit(const struct MPI_ABI_Datatype *t, MPI_Count *units)
{
    dtype_extra_t *e = extra_of(t);
    if (units) *units = e->units;
    return e->unit;
}

void mpi_dtype_ref(struct MPI_ABI_Datatype *t)
{
    if (t && !t->predefined) t->h.refs++;
}

void mpi_dtype_unref(struct MPI_ABI_Datatype *t)
{
    if (!t || t->predefined || --t->h.refs > 0) return;
    for (int i = 0; i < t->nt; i++)
        mpi_dtype_unref(mpi_dtype_get(t->types[i]));
    free(t->runs);
    free(t->ints);
    free(t->addrs);
    free(t->counts);
    free(t->types);
    mpi_obj_release(MPI_K_DTYPE, t);
}

/* ---- pack / unpack ------------------------------------------------------ */

void mpi_dtype_span(const struct MPI_ABI_Datatype *t, MPI_Count count, MPI_Aint *lo, MPI_Aint *span)
{
    if (count <= 0 || t->size == 0) {
        *lo = 0;
        *span = 0;
        return;
    }
    MPI_Aint first = t->true_lb, last = t->true_lb + t->true_extent;
    if (t->extent >= 0)
        last += (count - 1) * t->extent;
    else
        first += (count - 1) * t->extent;
    *lo = first;
    *span = last - first;
}

/* reps copies of len bytes, from src (sstep bytes between copies) to dst
 * (dstep): the sizes of basic elements get a copy of constant size. */
#define COPY_REPS(size)                                                                                                \
    case size:                                                                                                         \
        for (MPI_Count k = 0; k < reps; k++, dst += dstep, src += sstep)                                               \
            memcpy(dst, src, size);                                                                                    \
        break
static inline void copy_reps(char *dst, MPI_Aint dstep, const char *src, MPI_Aint sstep, size_t len, MPI_Count reps)
{
    switch (len) {
        COPY_REPS(1);
        COPY_REPS(2);
        COPY_REPS(4);
        COPY_REPS(8);
        COPY_REPS(16);
    default:
        for (MPI_Count k = 0; k < reps; k++, dst += dstep, src += sstep)
            memcpy(dst, src, len);
    }
}
#undef COPY_REPS

/* Copies count whole elements of t between the buffer at b and packed
 * data at p: packs when pack, else unpacks. Returns the end of p. */
static char *copy_elements(char *b, char *p, MPI_Count count, const struct MPI_ABI_Datatype *t, int pack)
{
    for (MPI_Count i = 0; i < count; i++, b += t->extent)
        for (int r = 0; r < t->nruns; r++) {
            const mpi_run_t *x = &t->runs[r];
            size_t n = (size_t)x->n * (size_t)basic_table[x->basic].size;
            if (pack)
                copy_reps(p, (MPI_Aint)n, b + x->disp, x->stride, n, x->reps);
            else
                copy_reps(b + x->disp, x->stride, p, (MPI_Aint)n, n, x->reps);
            p += n * (size_t)x->reps;
        }
    return p;
}

void mpi_pack(const void *buf, MPI_Count count, const struct MPI_ABI_Datatype *t, void *out)
{
    if (t->contig) {
        memcpy(out, (const char *)buf + t->true_lb, (size_t)(t->size * count));
        return;
    }
    copy_elements((char *)buf, out, count, t, 1);
}

void mpi_unpack(const void *in, MPI_Count bytes, void *buf, MPI_Count count, const struct MPI_ABI_Datatype *t)
{
    char *b = buf;
    MPI_Count total = t->size * count;
    if (bytes > total) bytes = total;
    if (t->contig) {
        memcpy(b + t->true_lb, in, (size_t)bytes);
        return;
    }
    if (bytes <= 0) return;
    /* the whole elements, then what arrived of the next one */
    MPI_Count whole = bytes / t->size;
    const char *p = copy_elements(b, (char *)in, whole, t, 0);
    bytes -= whole * t->size;
    b += whole * t->extent;
    for (int r = 0; r < t->nruns && bytes > 0; r++) {
        const mpi_run_t *x = &t->runs[r];
        MPI_Count n = x->n * basic_table[x->basic].size, full = bytes / n;
        if (full > x->reps) full = x->reps;
        copy_reps(b + x->disp, x->stride, p, (MPI_Aint)n, (size_t)n, full);
        p += full * n;
        bytes -= full * n;
        if (full < x->reps && bytes > 0) { /* the data ends inside this copy */
            memcpy(b + x->disp + full * x->stride, p, (size_t)bytes);
            bytes = 0;
        }
    }
}

MPI_Count mpi_dtype_elements(const struct MPI_ABI_Datatype *t, MPI_Count bytes)
{
    if (t->size == 0) return 0;
    MPI_Count whole = bytes / t->size, rem = bytes % t->size, n = whole * t->nelem;
    for (int r = 0; r < t->nruns && rem > 0; r++) {
        const mpi_run_t *x = &t->runs[r];
        MPI_Count bs = basic_table[x->basic].size, run = x->n * x->reps * bs;
        if (rem >= run) {
            n += x->n * x->reps;
            rem -= run;
        } else {
            n += rem / bs;
            rem %= bs;
            break;
        }
    }
    return rem ? MPI_UNDEFINED : n;
}

/* ---- construction ------------------------------------------------------- */

/* The most runs one type's map may hold (40 bytes each: 640 MiB), or one
 * per block its constructor was given when that is more. Copies of a type
 * of several runs are written out run by run; past this a constructor
 * fails (MPI_ERR_NO_MEM) rather than take the machine's memory. */
#define RUNS_MAX ((MPI_Count)1 << 24)

/* A block: reps copies (0: none), the i-th at disp + i * stride, of count
 * copies of old, the j-th at + j * old's extent. */
typedef struct blk {
    MPI_Aint disp;
    MPI_Count count;
    struct MPI_ABI_Datatype *old;
    MPI_Count reps;
    MPI_Aint stride;
} blk_t;
#define BLK(disp, count, old) ((blk_t){(disp), (count), (old), 1, 0})

typedef struct runbuf {
    mpi_run_t *runs;
    MPI_Count n, cap;
    MPI_Count max; /* the most runs allowed */
    int over;      /* a run was refused for max (else a failure is out of memory) */
} runbuf_t;

/* Whether one element's data is [lb, lb + size) and extent == size. */
static int contig_of(const struct MPI_ABI_Datatype *t)
{
    if (t->size == 0) return t->extent == 0;
    return t->nruns == 1 && t->runs[0].reps == 1 && t->extent == t->size && t->runs[0].disp == t->lb;
}

/* Appends reps copies of n elements of basic at disp (the i-th at
 * + i * stride), merged into the last run where they continue it: data
 * right after it makes it longer, runs of its length at a constant stride
 * give it more copies. 0, or -1 when out of memory or past rb->max. */
static int run_add(runbuf_t *rb, MPI_Aint disp, MPI_Count n, int basic, MPI_Count reps, MPI_Aint stride)
{
    if (n == 0 || reps == 0) return 0;
    MPI_Count bs = basic_table[basic].size;
    if (reps == 1) {
        stride = 0;
    } else if (stride == n * bs) { /* adjacent copies: one longer run */
        n *= reps;
        reps = 1;
        stride = 0;
    }
    if (rb->n > 0) {
        mpi_run_t *l = &rb->runs[rb->n - 1];
        if (l->basic == basic && l->reps == 1 && reps == 1 && l->disp + l->n * bs == disp) {
            l->n += n;
            return 0;
        }
        MPI_Aint s, next;
        if (l->basic == basic && l->n == n) {
            /* the stride the merged run would have: l's, else the new copies', else their distance */
            int ovf = 0;
            if (l->reps > 1)
                s = l->stride;
            else if (reps > 1)
                s = stride;
            else
                ovf = __builtin_sub_overflow(disp, l->disp, &s);
            if (!ovf && (reps == 1 || stride == s) && !__builtin_mul_overflow(l->reps, s, &next) &&
                !__builtin_add_overflow(next, l->disp, &next) && next == disp) {
                l->reps += reps;
                l->stride = s;
                return 0;
            }
        }
    }
    if (rb->n >= rb->max) {
        rb->over = 1;
        return -1;
    }
    if (rb->n == rb->cap) {
        MPI_Count cap = rb->cap ? 2 * rb->cap : 8;
        if (cap > rb->max) cap = rb->max;
        mpi_run_t *r = realloc(rb->runs, sizeof(*r) * (size_t)cap);
        if (!r) return -1;
        rb->runs = r;
        rb->cap = cap;
    }
    rb->runs[rb->n++] = (mpi_run_t){.disp = disp, .n = n, .basic = basic, .reps = reps, .stride = stride};
    return 0;
}

/* Appends count copies of o, the j-th at disp + j * o's extent. A type of
 * one run stays one run (more copies of it) where its copies follow each
 * other at one stride; otherwise each copy's runs are written out. */
static int add_copies(runbuf_t *rb, MPI_Aint disp, MPI_Count count, const struct MPI_ABI_Datatype *o)
{
    if (count == 0 || o->nruns == 0) return 0;
    if (o->nruns == 1) {
        const mpi_run_t *r = &o->runs[0];
        MPI_Aint whole;
        if (r->reps == 1) return run_add(rb, disp + r->disp, r->n, r->basic, count, o->extent);
        if (!__builtin_mul_overflow(r->reps, r->stride, &whole) && whole == o->extent)
            return run_add(rb, disp + r->disp, r->n, r->basic, r->reps * count, r->stride);
    }
    if (count > rb->max) { /* at least a run per copy */
        rb->over = 1;
        return -1;
    }
    for (MPI_Count j = 0; j < count; j++)
        for (int k = 0; k < o->nruns; k++) {
            const mpi_run_t *r = &o->runs[k];
            if (run_add(rb, disp + j * o->extent + r->disp, r->n, r->basic, r->reps, r->stride)) return -1;
        }
    return 0;
}

/* Appends a block: one copy of it (count copies of its old type) made,
 * then repeated as one run where that copy is one run, else written out. */
static int add_block(runbuf_t *rb, const blk_t *b)
{
    if (b->reps == 1) return add_copies(rb, b->disp, b->count, b->old);
    runbuf_t one = {.max = rb->max};
    int rc = add_copies(&one, 0, b->count, b->old);
    if (rc) goto out;
    if (one.n == 1) {
        const mpi_run_t *r = &one.runs[0];
        MPI_Aint whole;
        if (r->reps == 1) {
            rc = run_add(rb, b->disp + r->disp, r->n, r->basic, b->reps, b->stride);
            goto out;
        }
        if (!__builtin_mul_overflow(r->reps, r->stride, &whole) && whole == b->stride) {
            rc = run_add(rb, b->disp + r->disp, r->n, r->basic, r->reps * b->reps, r->stride);
            goto out;
        }
    }
    if (b->reps > rb->max) {
        rb->over = 1;
        rc = -1;
        goto out;
    }
    for (MPI_Count i = 0; i < b->reps && !rc; i++)
        for (MPI_Count k = 0; k < one.n && !rc; k++) {
            const mpi_run_t *r = &one.runs[k];
            rc = run_add(rb, b->disp + i * b->stride + r->disp, r->n, r->basic, r->reps, r->stride);
        }
out:
    rb->over |= one.over;
    free(one.runs);
    return rc;
}

#define MUL_OVF(a, b, r) __builtin_mul_overflow(a, b, r)
#define ADD_OVF(a, b, r) __builtin_add_overflow(a, b, r)

/* Builds a type from blocks. is_struct: round the extent up to the
 * strictest alignment of the members, as C lays out a struct. On failure
 * raises the error naming fn (out of memory, too many runs, a size or
 * extent past 64 bits) and returns it. */
static int build(const blk_t *b, MPI_Count nb, int is_struct, struct MPI_ABI_Datatype **out, const char *fn)
{
    struct MPI_ABI_Datatype *t = mpi_obj_alloc(MPI_K_DTYPE);
    if (!t) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    runbuf_t rb = {.max = nb > RUNS_MAX ? nb : RUNS_MAX};
    if (rb.max > INT32_MAX) rb.max = INT32_MAX;
    MPI_Aint lb = 0, ub = 0, tlb = 0, tub = 0;
    int have = 0, have_data = 0, align = 1, unit = -1, basic = -2;
    MPI_Count size = 0, nelem = 0, units = 0;
    for (MPI_Count i = 0; i < nb; i++) {
        const struct MPI_ABI_Datatype *o = b[i].old;
        dtype_extra_t *oe = extra_of(o);
        if (oe->align > align) align = oe->align;
        if (b[i].count == 0 || b[i].reps == 0) continue;
        /* bounds from the old type's lb and extent (either sign), then the
         * block's copies (stride of either sign) */
        MPI_Count copies, add;
        MPI_Aint first, last, shift;
        if (MUL_OVF(b[i].count, b[i].reps, &copies) || ADD_OVF(b[i].disp, o->lb, &first) ||
            MUL_OVF(b[i].count, o->extent, &last) || ADD_OVF(first, last, &last) ||
            MUL_OVF(b[i].reps - 1, b[i].stride, &shift))
            goto overflow;
        MPI_Aint blo = first < last ? first : last, bhi = first < last ? last : first;
        if (shift < 0 ? ADD_OVF(blo, shift, &blo) : ADD_OVF(bhi, shift, &bhi)) goto overflow;
        if (!have || blo < lb) lb = blo;
        if (!have || bhi > ub) ub = bhi;
        have = 1;
        if (MUL_OVF(o->size, copies, &add) || ADD_OVF(size, add, &size) || MUL_OVF(o->nelem, copies, &add) ||
            ADD_OVF(nelem, add, &nelem) || MUL_OVF(oe->units, copies, &add) || ADD_OVF(units, add, &units))
            goto overflow;
        if (unit == -1)
            unit = oe->unit;
        else if (unit != oe->unit)
            unit = 0;
        if (o->size == 0) continue;
        if (basic == -2)
            basic = o->basic;
        else if (basic != o->basic)
            basic = -1;
        /* the data's bounds: count copies of the old type's, then the block's copies */
        MPI_Aint dlo, dhi, dext;
        if (MUL_OVF(b[i].count - 1, o->extent, &dext) || ADD_OVF(b[i].disp, o->true_lb, &dlo) ||
            ADD_OVF(dlo, o->true_extent, &dhi) || (dext < 0 ? ADD_OVF(dlo, dext, &dlo) : ADD_OVF(dhi, dext, &dhi)) ||
            (shift < 0 ? ADD_OVF(dlo, shift, &dlo) : ADD_OVF(dhi, shift, &dhi)))
            goto overflow;
        if (!have_data || dlo < tlb) tlb = dlo;
        if (!have_data || dhi > tub) tub = dhi;
        have_data = 1;
        if (add_block(&rb, &b[i])) goto runs;
    }
    if (is_struct && have && align > 1) {
        MPI_Aint ext, pad;
        if (__builtin_sub_overflow(ub, lb, &ext)) goto overflow;
        pad = ext % align;
        if (pad && ADD_OVF(ub, align - pad, &ub)) goto overflow;
    }
    MPI_Aint extent, true_extent;
    if (__builtin_sub_overflow(ub, lb, &extent) || __builtin_sub_overflow(tub, tlb, &true_extent)) goto overflow;
    if (rb.n && rb.n < rb.cap) { /* the runs it keeps, no more */
        mpi_run_t *r = realloc(rb.runs, sizeof(*r) * (size_t)rb.n);
        if (r) rb.runs = r;
    }
    t->lb = lb;
    t->extent = extent;
    t->true_lb = tlb;
    t->true_extent = true_extent;
    t->size = size;
    t->nelem = nelem;
    t->nruns = (int)rb.n;
    t->runs = rb.runs;
    t->basic = basic < 0 ? -1 : basic;
    t->wdt = t->basic >= 0 ? basic_table[t->basic].wdt : NONE;
    t->contig = contig_of(t);
    dtype_extra_t *e = extra_of(t);
    e->align = align;
    e->unit = unit < 0 ? 0 : unit;
    e->units = units;
    *out = t;
    return MPI_SUCCESS;
overflow:
    free(rb.runs);
    mpi_obj_release(MPI_K_DTYPE, t);
    return mpi_err(NULL, MPI_ERR_ARG, fn, "the datatype's size or extent does not fit 64 bits");
runs:
    free(rb.runs);
    mpi_obj_release(MPI_K_DTYPE, t);
    if (rb.over)
        return mpi_err(NULL, MPI_ERR_NO_MEM, fn,
                       "the datatype would need more than %lld runs of contiguous data, the most one type may hold",
                       (long long)rb.max);
    return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
}

/* Records the constructor's arguments (copied) and takes references on
 * the old types. */
static int record(struct MPI_ABI_Datatype *t, int combiner, int ni, const int *ints, int na, const MPI_Aint *addrs,
                  int nc, const MPI_Count *counts, int nt, const MPI_Datatype *types)
{
    t->combiner = combiner;
    t->ni = ni;
    t->na = na;
    t->nc = nc;
    t->nt = nt;
    t->ints = ni ? malloc(sizeof(int) * (size_t)ni) : NULL;
    t->addrs = na ? malloc(sizeof(MPI_Aint) * (size_t)na) : NULL;
    t->counts = nc ? malloc(sizeof(MPI_Count) * (size_t)nc) : NULL;
    t->types = nt ? malloc(sizeof(MPI_Datatype) * (size_t)nt) : NULL;
    if ((ni && !t->ints) || (na && !t->addrs) || (nc && !t->counts) || (nt && !t->types)) return MPI_ERR_NO_MEM;
    if (ni) memcpy(t->ints, ints, sizeof(int) * (size_t)ni);
    if (na) memcpy(t->addrs, addrs, sizeof(MPI_Aint) * (size_t)na);
    if (nc) memcpy(t->counts, counts, sizeof(MPI_Count) * (size_t)nc);
    for (int i = 0; i < nt; i++) {
        t->types[i] = types[i];
        mpi_dtype_ref(mpi_dtype_get(types[i]));
    }
    return MPI_SUCCESS;
}

static int check_old(MPI_Datatype h, const char *fn, struct MPI_ABI_Datatype **out)
{
    MPI_CHECK_INIT(fn);
    *out = mpi_dtype_get(h);
    if (!*out) return mpi_err(NULL, MPI_ERR_TYPE, fn, "invalid datatype");
    return MPI_SUCCESS;
}

static int check_new(MPI_Datatype *newtype, const char *fn)
{
    if (!newtype) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL newtype");
    return MPI_SUCCESS;
}

/* Builds from blocks, records the constructor, hands out the handle. */
static int finish(const blk_t *b, MPI_Count nb, int is_struct, int combiner, int ni, const int *ints, int na,
                  const MPI_Aint *addrs, int nc, const MPI_Count *counts, int nt, const MPI_Datatype *types,
                  MPI_Datatype *newtype, const char *fn)
{
    struct MPI_ABI_Datatype *t;
    int rc = build(b, nb, is_struct, &t, fn);
    if (rc) return rc;
    if ((rc = record(t, combiner, ni, ints, na, addrs, nc, counts, nt, types))) {
        mpi_dtype_unref(t);
        return mpi_err(NULL, rc, fn, "out of memory");
    }
    *newtype = t;
    return MPI_SUCCESS;
}

static int check_nonneg(MPI_Count c, const char *what, const char *fn)
{
    if (c < 0) return mpi_err(NULL, MPI_ERR_COUNT, fn, "negative %s %lld", what, (long long)c);
    return MPI_SUCCESS;
}

/* contiguous */
static int contiguous(MPI_Count count, MPI_Datatype oldtype, MPI_Datatype *newtype, int large, const char *fn)
{
    struct MPI_ABI_Datatype *o;
    int rc = check_old(oldtype, fn, &o);
    if (rc || (rc = check_new(newtype, fn)) || (rc = check_nonneg(count, "count", fn))) return rc;
    blk_t b = BLK(0, count, o);
    int ci = (int)count;
    return finish(&b, 1, 0, MPI_COMBINER_CONTIGUOUS, large ? 0 : 1, &ci, 0, NULL, large ? 1 : 0, &count, 1, &oldtype,
                  newtype, fn);
}

MPI_DEF(int, Type_contiguous, (int count, MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    return contiguous(count, oldtype, newtype, 0, "MPI_Type_contiguous");
}

MPI_DEF(int, Type_contiguous_c, (MPI_Count count, MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    return contiguous(count, oldtype, newtype, 1, "MPI_Type_contiguous_c");
}

/* vector / hvector: stride in elements (vector) or bytes (hvector) */
static int vector(MPI_Count count, MPI_Count blocklength, MPI_Count stride, int bytes, MPI_Datatype oldtype,
                  MPI_Datatype *newtype, int large, const char *fn)
{
    struct MPI_ABI_Datatype *o;
    int rc = check_old(oldtype, fn, &o);
    if (rc || (rc = check_new(newtype, fn)) || (rc = check_nonneg(count, "count", fn)) ||
        (rc = check_nonneg(blocklength, "blocklength", fn)))
        return rc;
    /* one block repeated: count copies of blocklength old types, a stride apart */
    MPI_Aint step;
    if (__builtin_mul_overflow(stride, bytes ? 1 : o->extent, &step))
        return mpi_err(NULL, MPI_ERR_ARG, fn, "stride %lld times the extent %lld does not fit 64 bits",
                       (long long)stride, (long long)o->extent);
    blk_t b = {0, blocklength, o, count, step};
    int ints[3] = {(int)count, (int)blocklength, (int)stride};
    MPI_Count counts[3] = {count, blocklength, stride};
    MPI_Aint a = (MPI_Aint)stride;
    int combiner = bytes ? MPI_COMBINER_HVECTOR : MPI_COMBINER_VECTOR;
    if (large) return finish(&b, 1, 0, combiner, 0, NULL, 0, NULL, 3, counts, 1, &oldtype, newtype, fn);
    if (bytes) return finish(&b, 1, 0, combiner, 2, ints, 1, &a, 0, NULL, 1, &oldtype, newtype, fn);
    return finish(&b, 1, 0, combiner, 3, ints, 0, NULL, 0, NULL, 1, &oldtype, newtype, fn);
}

MPI_DEF(int, Type_vector, (int count, int blocklength, int stride, MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    return vector(count, blocklength, stride, 0, oldtype, newtype, 0, "MPI_Type_vector");
}

MPI_DEF(int, Type_vector_c,
        (MPI_Count count, MPI_Count blocklength, MPI_Count stride, MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    return vector(count, blocklength, stride, 0, oldtype, newtype, 1, "MPI_Type_vector_c");
}

MPI_DEF(int, Type_create_hvector,
        (int count, int blocklength, MPI_Aint stride, MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    return vector(count, blocklength, stride, 1, oldtype, newtype, 0, "MPI_Type_create_hvector");
}

MPI_DEF(int, Type_create_hvector_c,
        (MPI_Count count, MPI_Count blocklength, MPI_Count stride, MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    return vector(count, blocklength, stride, 1, oldtype, newtype, 1, "MPI_Type_create_hvector_c");
}

/* indexed family. bl: per-block lengths (NULL: `blocklength` for all);
 * displacements in elements (!bytes) or bytes. The record layouts follow
 * MPI's table for get_contents. */
static int indexed(MPI_Count count, const MPI_Count *bl, MPI_Count blocklength, const MPI_Count *disp, int bytes,
                   MPI_Datatype oldtype, MPI_Datatype *newtype, int combiner, int ni, const int *ints, int na,
                   const MPI_Aint *addrs, int nc, const MPI_Count *counts, const char *fn)
{
    struct MPI_ABI_Datatype *o;
    int rc = check_old(oldtype, fn, &o);
    if (rc || (rc = check_new(newtype, fn)) || (rc = check_nonneg(count, "count", fn))) return rc;
    if (!bl && (rc = check_nonneg(blocklength, "blocklength", fn))) return rc;
    blk_t *b = mpi_malloc(sizeof(blk_t) * (size_t)count);
    if (!b) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    for (MPI_Count i = 0; i < count; i++) {
        MPI_Count len = bl ? bl[i] : blocklength;
        if (len < 0) {
            free(b);
            return mpi_err(NULL, MPI_ERR_ARG, fn, "negative block length %lld", (long long)len);
        }
        MPI_Aint d;
        if (__builtin_mul_overflow(disp[i], bytes ? 1 : o->extent, &d)) {
            free(b);
            return mpi_err(NULL, MPI_ERR_ARG, fn, "displacement %lld times the extent %lld does not fit 64 bits",
                           (long long)disp[i], (long long)o->extent);
        }
        b[i] = BLK(d, len, o);
    }
    rc = finish(b, count, 0, combiner, ni, ints, na, addrs, nc, counts, 1, &oldtype, newtype, fn);
    free(b);
    return rc;
}

/* Widens int / MPI_Aint arrays for the common path. */
static MPI_Count *widen_int(const int *a, MPI_Count n)
{
    MPI_Count *w = mpi_malloc(sizeof(MPI_Count) * (size_t)(n > 0 ? n : 1));
    for (MPI_Count i = 0; w && i < n; i++)
        w[i] = a[i];
    return w;
}

static MPI_Count *widen_aint(const MPI_Aint *a, MPI_Count n)
{
    MPI_Count *w = mpi_malloc(sizeof(MPI_Count) * (size_t)(n > 0 ? n : 1));
    for (MPI_Count i = 0; w && i < n; i++)
        w[i] = a[i];
    return w;
}

static int check_arrays(MPI_Count count, const void *a, const void *b, const char *fn)
{
    if (count < 0) return mpi_err(NULL, MPI_ERR_COUNT, fn, "negative count %lld", (long long)count);
    if (count > 0 && (!a || !b)) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL array");
    if (count > INT32_MAX / 4) return mpi_err(NULL, MPI_ERR_COUNT, fn, "count %lld too large", (long long)count);
    return MPI_SUCCESS;
}

/* Concatenates int arrays for the int record layouts. */
static int *cat_ints(int first, const int *a, MPI_Count na, const int *b, MPI_Count nb, int extra, int *n)
{
    int *r = mpi_malloc(sizeof(int) * (size_t)(1 + na + nb + 1));
    if (!r) return NULL;
    int k = 0;
    r[k++] = first;
    if (extra >= 0) r[k++] = extra;
    for (MPI_Count i = 0; i < na; i++)
        r[k++] = a[i];
    for (MPI_Count i = 0; i < nb; i++)
        r[k++] = b[i];
    *n = k;
    return r;
}

static MPI_Count *cat_counts(MPI_Count first, const MPI_Count *a, MPI_Count na, const MPI_Count *b, MPI_Count nb,
                             MPI_Count extra, int has_extra, int *n)
{
    MPI_Count *r = mpi_malloc(sizeof(MPI_Count) * (size_t)(2 + na + nb));
    if (!r) return NULL;
    int k = 0;
    r[k++] = first;
    if (has_extra) r[k++] = extra;
    for (MPI_Count i = 0; i < na; i++)
        r[k++] = a[i];
    for (MPI_Count i = 0; i < nb; i++)
        r[k++] = b[i];
    *n = k;
    return r;
}

MPI_DEF(int, Type_indexed, (int count, const int bl[], const int disp[], MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_indexed";
    int rc = check_arrays(count, bl, disp, fn), ni;
    if (rc) return rc;
    MPI_Count *wb = widen_int(bl, count), *wd = widen_int(disp, count);
    int *ints = cat_ints(count, bl, count, disp, count, -1, &ni);
    if (!wb || !wd || !ints)
        rc = mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    else
        rc = indexed(count, wb, 0, wd, 0, oldtype, newtype, MPI_COMBINER_INDEXED, ni, ints, 0, NULL, 0, NULL, fn);
    free(wb), free(wd), free(ints);
    return rc;
}

MPI_DEF(int, Type_indexed_c,
        (MPI_Count count, const MPI_Count bl[], const MPI_Count disp[], MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_indexed_c";
    int rc = check_arrays(count, bl, disp, fn), nc;
    if (rc) return rc;
    MPI_Count *counts = cat_counts(count, bl, count, disp, count, 0, 0, &nc);
    if (!counts) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    rc = indexed(count, bl, 0, disp, 0, oldtype, newtype, MPI_COMBINER_INDEXED, 0, NULL, 0, NULL, nc, counts, fn);
    free(counts);
    return rc;
}

MPI_DEF(int, Type_create_hindexed,
        (int count, const int bl[], const MPI_Aint disp[], MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_create_hindexed";
    int rc = check_arrays(count, bl, disp, fn), ni;
    if (rc) return rc;
    MPI_Count *wb = widen_int(bl, count), *wd = widen_aint(disp, count);
    int *ints = cat_ints(count, bl, count, NULL, 0, -1, &ni);
    if (!wb || !wd || !ints)
        rc = mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    else
        rc = indexed(count, wb, 0, wd, 1, oldtype, newtype, MPI_COMBINER_HINDEXED, ni, ints, count, disp, 0, NULL, fn);
    free(wb), free(wd), free(ints);
    return rc;
}

MPI_DEF(int, Type_create_hindexed_c,
        (MPI_Count count, const MPI_Count bl[], const MPI_Count disp[], MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_create_hindexed_c";
    int rc = check_arrays(count, bl, disp, fn), nc;
    if (rc) return rc;
    MPI_Count *counts = cat_counts(count, bl, count, disp, count, 0, 0, &nc);
    if (!counts) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    rc = indexed(count, bl, 0, disp, 1, oldtype, newtype, MPI_COMBINER_HINDEXED, 0, NULL, 0, NULL, nc, counts, fn);
    free(counts);
    return rc;
}

MPI_DEF(int, Type_create_indexed_block,
        (int count, int blocklength, const int disp[], MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_create_indexed_block";
    int rc = check_arrays(count, disp, disp, fn), ni;
    if (rc) return rc;
    MPI_Count *wd = widen_int(disp, count);
    int *ints = cat_ints(count, disp, count, NULL, 0, blocklength, &ni);
    if (!wd || !ints)
        rc = mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    else
        rc = indexed(count, NULL, blocklength, wd, 0, oldtype, newtype, MPI_COMBINER_INDEXED_BLOCK, ni, ints, 0, NULL,
                     0, NULL, fn);
    free(wd), free(ints);
    return rc;
}

MPI_DEF(int, Type_create_indexed_block_c,
        (MPI_Count count, MPI_Count blocklength, const MPI_Count disp[], MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_create_indexed_block_c";
    int rc = check_arrays(count, disp, disp, fn), nc;
    if (rc) return rc;
    MPI_Count *counts = cat_counts(count, disp, count, NULL, 0, blocklength, 1, &nc);
    if (!counts) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    rc = indexed(count, NULL, blocklength, disp, 0, oldtype, newtype, MPI_COMBINER_INDEXED_BLOCK, 0, NULL, 0, NULL, nc,
                 counts, fn);
    free(counts);
    return rc;
}

MPI_DEF(int, Type_create_hindexed_block,
        (int count, int blocklength, const MPI_Aint disp[], MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_create_hindexed_block";
    int rc = check_arrays(count, disp, disp, fn);
    if (rc) return rc;
    MPI_Count *wd = widen_aint(disp, count);
    int ints[2] = {count, blocklength};
    if (!wd) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    rc = indexed(count, NULL, blocklength, wd, 1, oldtype, newtype, MPI_COMBINER_HINDEXED_BLOCK, 2, ints, count, disp,
                 0, NULL, fn);
    free(wd);
    return rc;
}

MPI_DEF(int, Type_create_hindexed_block_c,
        (MPI_Count count, MPI_Count blocklength, const MPI_Count disp[], MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_create_hindexed_block_c";
    int rc = check_arrays(count, disp, disp, fn), nc;
    if (rc) return rc;
    MPI_Count *counts = cat_counts(count, disp, count, NULL, 0, blocklength, 1, &nc);
    if (!counts) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    rc = indexed(count, NULL, blocklength, disp, 1, oldtype, newtype, MPI_COMBINER_HINDEXED_BLOCK, 0, NULL, 0, NULL, nc,
                 counts, fn);
    free(counts);
    return rc;
}

/* struct */
static int create_struct(MPI_Count count, const MPI_Count *bl, const MPI_Count *disp, const MPI_Datatype *types, int ni,
                         const int *ints, int na, const MPI_Aint *addrs, int nc, const MPI_Count *counts,
                         MPI_Datatype *newtype, const char *fn)
{
    int rc;
    MPI_CHECK_INIT(fn);
    if ((rc = check_new(newtype, fn))) return rc;
    if (count > 0 && !types) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL types");
    blk_t *b = mpi_malloc(sizeof(blk_t) * (size_t)count);
    if (!b) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    for (MPI_Count i = 0; i < count; i++) {
        struct MPI_ABI_Datatype *o = mpi_dtype_get(types[i]);
        if (!o || bl[i] < 0) {
            free(b);
            return mpi_err(NULL, o ? MPI_ERR_ARG : MPI_ERR_TYPE, fn, "%s of member %lld",
                           o ? "negative block length" : "invalid datatype", (long long)i);
        }
        b[i] = BLK((MPI_Aint)disp[i], bl[i], o);
    }
    rc = finish(b, count, 1, MPI_COMBINER_STRUCT, ni, ints, na, addrs, nc, counts, (int)count, types, newtype, fn);
    free(b);
    return rc;
}

MPI_DEF(int, Type_create_struct,
        (int count, const int bl[], const MPI_Aint disp[], const MPI_Datatype types[], MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_create_struct";
    int rc = check_arrays(count, bl, disp, fn), ni;
    if (rc) return rc;
    MPI_Count *wb = widen_int(bl, count), *wd = widen_aint(disp, count);
    int *ints = cat_ints(count, bl, count, NULL, 0, -1, &ni);
    if (!wb || !wd || !ints)
        rc = mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    else
        rc = create_struct(count, wb, wd, types, ni, ints, count, disp, 0, NULL, newtype, fn);
    free(wb), free(wd), free(ints);
    return rc;
}

MPI_DEF(int, Type_create_struct_c,
        (MPI_Count count, const MPI_Count bl[], const MPI_Count disp[], const MPI_Datatype types[],
         MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_create_struct_c";
    int rc = check_arrays(count, bl, disp, fn), nc;
    if (rc) return rc;
    MPI_Count *counts = cat_counts(count, bl, count, disp, count, 0, 0, &nc);
    if (!counts) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    rc = create_struct(count, bl, disp, types, 0, NULL, 0, NULL, nc, counts, newtype, fn);
    free(counts);
    return rc;
}

/* resized: the old type with lb and extent set */
static int resized(MPI_Datatype oldtype, MPI_Aint lb, MPI_Aint extent, MPI_Datatype *newtype, int large, const char *fn)
{
    struct MPI_ABI_Datatype *o, *t;
    int rc = check_old(oldtype, fn, &o);
    if (rc || (rc = check_new(newtype, fn))) return rc;
    blk_t b = BLK(0, 1, o);
    if ((rc = build(&b, 1, 0, &t, fn))) return rc;
    t->lb = lb;
    t->extent = extent;
    t->contig = contig_of(t);
    MPI_Aint a[2] = {lb, extent};
    MPI_Count c[2] = {lb, extent};
    if ((rc = record(t, MPI_COMBINER_RESIZED, 0, NULL, large ? 0 : 2, a, large ? 2 : 0, c, 1, &oldtype))) {
        mpi_dtype_unref(t);
        return mpi_err(NULL, rc, fn, "out of memory");
    }
    *newtype = t;
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_create_resized, (MPI_Datatype oldtype, MPI_Aint lb, MPI_Aint extent, MPI_Datatype *newtype))
{
    return resized(oldtype, lb, extent, newtype, 0, "MPI_Type_create_resized");
}

MPI_DEF(int, Type_create_resized_c, (MPI_Datatype oldtype, MPI_Count lb, MPI_Count extent, MPI_Datatype *newtype))
{
    return resized(oldtype, (MPI_Aint)lb, (MPI_Aint)extent, newtype, 1, "MPI_Type_create_resized_c");
}

MPI_DEF(int, Type_dup, (MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_dup";
    struct MPI_ABI_Datatype *o, *t;
    int rc = check_old(oldtype, fn, &o);
    if (rc || (rc = check_new(newtype, fn))) return rc;
    blk_t b = BLK(0, 1, o);
    if ((rc = build(&b, 1, 0, &t, fn))) return rc;
    t->lb = o->lb;
    t->extent = o->extent;
    t->contig = o->contig;
    t->committed = o->committed;
    extra_of(t)->align = extra_of(o)->align;
    if ((rc = record(t, MPI_COMBINER_DUP, 0, NULL, 0, NULL, 0, NULL, 1, &oldtype))) {
        mpi_dtype_unref(t);
        return mpi_err(NULL, rc, fn, "out of memory");
    }
    int err;
    mpi_attr_copy_all(MPI_K_DTYPE, oldtype, o->attrs, t, &t->attrs, &err);
    if (err) {
        mpi_attr_delete_all(MPI_K_DTYPE, t, &t->attrs);
        mpi_dtype_unref(t);
        return mpi_err(NULL, err, fn, "an attribute copy callback failed");
    }
    *newtype = t;
    return MPI_SUCCESS;
}

/* subarray: blocks over the dimensions, then resized to the full array's
 * extent. In C order (Fortran's dimensions reversed), a dimension the
 * subarray spans whole joins the one before it (its rows are one range of
 * that one's); then the fastest dimension makes contiguous blocks, the
 * next one repeats them a row apart (one run), the others are iterated. */
static int subarray(int ndims, const MPI_Count *sizes, const MPI_Count *subsizes, const MPI_Count *starts, int order,
                    MPI_Datatype oldtype, MPI_Datatype *newtype, int ni, const int *ints, int nc,
                    const MPI_Count *counts, const char *fn)
{
    struct MPI_ABI_Datatype *o;
    int rc = check_old(oldtype, fn, &o);
    if (rc || (rc = check_new(newtype, fn))) return rc;
    if (ndims <= 0) return mpi_err(NULL, MPI_ERR_ARG, fn, "ndims %d must be positive", ndims);
    if (order != MPI_ORDER_C && order != MPI_ORDER_FORTRAN) return mpi_err(NULL, MPI_ERR_ARG, fn, "invalid order");
    MPI_Count total = 1;
    for (int d = 0; d < ndims; d++) {
        if (sizes[d] <= 0 || subsizes[d] <= 0 || subsizes[d] > sizes[d] || starts[d] < 0 ||
            starts[d] + subsizes[d] > sizes[d])
            return mpi_err(NULL, MPI_ERR_ARG, fn, "invalid size / subsize / start in dimension %d", d);
        if (__builtin_mul_overflow(total, sizes[d], &total))
            return mpi_err(NULL, MPI_ERR_ARG, fn, "the array's size does not fit 64 bits");
    }
    MPI_Aint full;
    if (__builtin_mul_overflow(total, o->extent, &full))
        return mpi_err(NULL, MPI_ERR_ARG, fn, "the array's extent does not fit 64 bits");
    MPI_Count *sz = mpi_malloc(sizeof(MPI_Count) * 4 * (size_t)ndims), *ss = sz + ndims, *st = ss + ndims,
              *idx = st + ndims;
    if (!sz) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    int n = 0;
    for (int k = 0; k < ndims; k++) {
        int d = order == MPI_ORDER_C ? k : ndims - 1 - k;
        if (n > 0 && subsizes[d] == sizes[d]) { /* whole: joins the one before (no overflow: within total) */
            sz[n - 1] *= sizes[d];
            ss[n - 1] *= sizes[d];
            st[n - 1] *= sizes[d];
            continue;
        }
        sz[n] = sizes[d], ss[n] = subsizes[d], st[n] = starts[d], idx[n] = 0;
        n++;
    }
    /* blocks: one per index of the dimensions before the last two */
    MPI_Count nblocks = 1;
    for (int d = 0; d < n - 2; d++)
        nblocks *= ss[d];
    if (nblocks > RUNS_MAX) {
        free(sz);
        return mpi_err(
            NULL, MPI_ERR_NO_MEM, fn,
            "%lld rows: the datatype would need more runs of contiguous data than the %lld one type may hold",
            (long long)nblocks, (long long)RUNS_MAX);
    }
    blk_t *b = mpi_malloc(sizeof(blk_t) * (size_t)nblocks);
    if (!b) {
        free(sz);
        return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    }
    MPI_Count reps = n >= 2 ? ss[n - 2] : 1;
    MPI_Aint row = (MPI_Aint)sz[n - 1] * o->extent;
    for (MPI_Count k = 0; k < nblocks; k++) {
        MPI_Count off = 0, mult = 1;
        for (int d = n - 1; d >= 0; d--) {
            off += (st[d] + idx[d]) * mult;
            mult *= sz[d];
        }
        b[k] = (blk_t){(MPI_Aint)(off * o->extent), ss[n - 1], o, reps, row};
        for (int d = n - 3; d >= 0; d--) { /* the next index, the last of these dimensions fastest */
            if (++idx[d] < ss[d]) break;
            idx[d] = 0;
        }
    }
    free(sz);
    struct MPI_ABI_Datatype *t;
    rc = build(b, nblocks, 0, &t, fn);
    free(b);
    if (rc) return rc;
    t->lb = o->lb;
    t->extent = full;
    t->contig = contig_of(t);
    if ((rc = record(t, MPI_COMBINER_SUBARRAY, ni, ints, 0, NULL, nc, counts, 1, &oldtype))) {
        mpi_dtype_unref(t);
        return mpi_err(NULL, rc, fn, "out of memory");
    }
    *newtype = t;
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_create_subarray,
        (int ndims, const int sizes[], const int subsizes[], const int starts[], int order, MPI_Datatype oldtype,
         MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_create_subarray";
    if (ndims <= 0 || !sizes || !subsizes || !starts) return mpi_err(NULL, MPI_ERR_ARG, fn, "invalid arrays");
    MPI_Count *s = widen_int(sizes, ndims), *ss = widen_int(subsizes, ndims), *st = widen_int(starts, ndims);
    int *ints = mpi_malloc(sizeof(int) * (size_t)(3 * ndims + 2)), rc;
    if (!s || !ss || !st || !ints) {
        rc = mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    } else {
        ints[0] = ndims;
        for (int d = 0; d < ndims; d++) {
            ints[1 + d] = sizes[d];
            ints[1 + ndims + d] = subsizes[d];
            ints[1 + 2 * ndims + d] = starts[d];
        }
        ints[1 + 3 * ndims] = order;
        rc = subarray(ndims, s, ss, st, order, oldtype, newtype, 3 * ndims + 2, ints, 0, NULL, fn);
    }
    free(s), free(ss), free(st), free(ints);
    return rc;
}

MPI_DEF(int, Type_create_subarray_c,
        (int ndims, const MPI_Count sizes[], const MPI_Count subsizes[], const MPI_Count starts[], int order,
         MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_create_subarray_c";
    if (ndims <= 0 || !sizes || !subsizes || !starts) return mpi_err(NULL, MPI_ERR_ARG, fn, "invalid arrays");
    MPI_Count *counts = mpi_malloc(sizeof(MPI_Count) * (size_t)(3 * ndims));
    if (!counts) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    for (int d = 0; d < ndims; d++) {
        counts[d] = sizes[d];
        counts[ndims + d] = subsizes[d];
        counts[2 * ndims + d] = starts[d];
    }
    int ints[2] = {ndims, order};
    int rc = subarray(ndims, sizes, subsizes, starts, order, oldtype, newtype, 2, ints, 3 * ndims, counts, fn);
    free(counts);
    return rc;
}

/* darray: the elements of a block / cyclic distributed global array that
 * this rank owns, in array order (each dimension's local indices rise), as
 * blocks along the fastest dimension; the extent is the whole array's. */
static int darray(int size, int rank, int ndims, const MPI_Count *gsizes, const int *distribs, const int *dargs,
                  const int *psizes, int order, MPI_Datatype oldtype, MPI_Datatype *newtype, int ni, const int *ints,
                  int nc, const MPI_Count *counts, const char *fn)
{
    struct MPI_ABI_Datatype *o;
    int rc = check_old(oldtype, fn, &o);
    if (rc || (rc = check_new(newtype, fn))) return rc;
    if (ndims <= 0 || !gsizes || !distribs || !dargs || !psizes)
        return mpi_err(NULL, MPI_ERR_ARG, fn, "invalid ndims or NULL array");
    if (order != MPI_ORDER_C && order != MPI_ORDER_FORTRAN) return mpi_err(NULL, MPI_ERR_ARG, fn, "invalid order");
    long long procs = 1;
    for (int d = 0; d < ndims; d++) {
        if (psizes[d] <= 0 || gsizes[d] <= 0) return mpi_err(NULL, MPI_ERR_ARG, fn, "invalid size in dimension %d", d);
        procs *= psizes[d];
    }
    if (procs != size || rank < 0 || rank >= size)
        return mpi_err(NULL, MPI_ERR_ARG, fn, "the process grid has %lld processes, size %d, rank %d", procs, size,
                       rank);
    /* this rank's coordinates in the process grid (row-major, as MPI says) */
    int coord[64];
    if (ndims > 64) return mpi_err(NULL, MPI_ERR_DIMS, fn, "more than 64 dimensions");
    for (int d = ndims - 1, r = rank; d >= 0; d--) {
        coord[d] = r % psizes[d];
        r /= psizes[d];
    }
    /* each dimension's local indices */
    MPI_Count *loc[64], nloc[64];
    rc = MPI_SUCCESS;
    for (int d = 0; d < ndims; d++) {
        MPI_Count g = gsizes[d], n = 0;
        int p = psizes[d], c = coord[d], da = dargs[d];
        loc[d] = mpi_malloc(sizeof(MPI_Count) * (size_t)g);
        if (!loc[d]) {
            for (int k = 0; k < d; k++)
                free(loc[k]);
            return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
        }
        switch (distribs[d]) {
        case MPI_DISTRIBUTE_NONE:
            if (p != 1) rc = MPI_ERR_ARG;
            for (MPI_Count i = 0; i < g; i++)
                loc[d][n++] = i;
            break;
        case MPI_DISTRIBUTE_BLOCK: {
            MPI_Count b = da == MPI_DISTRIBUTE_DFLT_DARG ? (g + p - 1) / p : da;
            if (b <= 0 || b * p < g) rc = MPI_ERR_ARG;
            for (MPI_Count i = c * b; i < g && i < (c + 1) * b; i++)
                loc[d][n++] = i;
            break;
        }
        case MPI_DISTRIBUTE_CYCLIC: {
            MPI_Count b = da == MPI_DISTRIBUTE_DFLT_DARG ? 1 : da;
            if (b <= 0) rc = MPI_ERR_ARG;
            for (MPI_Count i = 0; b > 0 && i < g; i++)
                if ((i / b) % p == c) loc[d][n++] = i;
            break;
        }
        default: rc = MPI_ERR_ARG;
        }
        nloc[d] = n;
    }
    MPI_Count nblocks = 1, total = 1;
    MPI_Aint full = 0;
    int fast = order == MPI_ORDER_C ? ndims - 1 : 0, ovf = 0;
    for (int d = 0; d < ndims; d++) {
        ovf |= __builtin_mul_overflow(total, gsizes[d], &total);
        if (d != fast) nblocks *= nloc[d];
    }
    ovf |= __builtin_mul_overflow(total, o->extent, &full);
    if (!rc && ovf)
        rc = MPI_ERR_ARG;
    else
        ovf = 0; /* the error (if any) is another's */
    if (nloc[fast] == 0) nblocks = 0;
    /* the fastest dimension's local indices as segments of consecutive
     * ones, and those as groups of segments of one length at one step
     * (a cyclic distribution's: one block repeated) */
    MPI_Count ng = 0, *gf = rc ? NULL : mpi_malloc(sizeof(MPI_Count) * 4 * (size_t)(nloc[fast] ? nloc[fast] : 1));
    MPI_Count *gl = NULL, *gr = NULL, *gs = NULL;
    if (gf)
        gl = gf + nloc[fast], gr = gl + nloc[fast], gs = gr + nloc[fast];
    else if (!rc)
        rc = MPI_ERR_NO_MEM;
    for (MPI_Count j = 0; !rc && j < nloc[fast];) {
        MPI_Count first = loc[fast][j], len = 1;
        while (j + len < nloc[fast] && loc[fast][j + len] == first + len)
            len++;
        j += len;
        if (ng > 0 && gl[ng - 1] == len && (gr[ng - 1] == 1 || first == gf[ng - 1] + gr[ng - 1] * gs[ng - 1])) {
            if (gr[ng - 1] == 1) gs[ng - 1] = first - gf[ng - 1];
            gr[ng - 1]++;
        } else {
            gf[ng] = first, gl[ng] = len, gr[ng] = 1, gs[ng] = 0;
            ng++;
        }
    }
    blk_t *b = rc ? NULL : mpi_malloc(sizeof(blk_t) * (size_t)(nblocks * (ng ? ng : 1)));
    MPI_Count nb = 0, idx[64] = {0};
    if (!rc && !b) rc = MPI_ERR_NO_MEM;
    for (MPI_Count k = 0; !rc && k < nblocks; k++) {
        MPI_Count base = 0, mult = 1;
        for (int s = 0; s < ndims; s++) {
            int d = order == MPI_ORDER_C ? ndims - 1 - s : s;
            if (d != fast) base += loc[d][idx[d]] * mult;
            mult *= gsizes[d];
        }
        for (MPI_Count g = 0; g < ng; g++)
            b[nb++] = (blk_t){(MPI_Aint)((base + gf[g]) * o->extent), gl[g], o, gr[g], (MPI_Aint)(gs[g] * o->extent)};
        for (int s = 0; s < ndims; s++) {
            int d = order == MPI_ORDER_C ? ndims - 1 - s : s;
            if (d == fast) continue;
            if (++idx[d] < nloc[d]) break;
            idx[d] = 0;
        }
    }
    free(gf);
    for (int d = 0; d < ndims; d++)
        free(loc[d]);
    if (rc) {
        free(b);
        return mpi_err(NULL, rc, fn, "%s",
                       rc != MPI_ERR_ARG ? "out of memory"
                       : ovf             ? "the array's extent does not fit 64 bits"
                                         : "invalid distribution");
    }
    struct MPI_ABI_Datatype *t;
    rc = build(b, nb, 0, &t, fn);
    free(b);
    if (rc) return rc;
    t->lb = o->lb;
    t->extent = full;
    t->contig = contig_of(t);
    if ((rc = record(t, MPI_COMBINER_DARRAY, ni, ints, 0, NULL, nc, counts, 1, &oldtype))) {
        mpi_dtype_unref(t);
        return mpi_err(NULL, rc, fn, "out of memory");
    }
    *newtype = t;
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_create_darray,
        (int size, int rank, int ndims, const int gsizes[], const int distribs[], const int dargs[], const int psizes[],
         int order, MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_create_darray";
    if (ndims <= 0 || ndims > 64 || !gsizes || !distribs || !dargs || !psizes)
        return mpi_err(NULL, MPI_ERR_ARG, fn, "invalid ndims or NULL array");
    MPI_Count g[64];
    int ints[4 * 64 + 4], k = 0;
    ints[k++] = size;
    ints[k++] = rank;
    ints[k++] = ndims;
    for (int d = 0; d < ndims; d++)
        ints[k++] = gsizes[d], g[d] = gsizes[d];
    for (int d = 0; d < ndims; d++)
        ints[k++] = distribs[d];
    for (int d = 0; d < ndims; d++)
        ints[k++] = dargs[d];
    for (int d = 0; d < ndims; d++)
        ints[k++] = psizes[d];
    ints[k++] = order;
    return darray(size, rank, ndims, g, distribs, dargs, psizes, order, oldtype, newtype, k, ints, 0, NULL, fn);
}

MPI_DEF(int, Type_create_darray_c,
        (int size, int rank, int ndims, const MPI_Count gsizes[], const int distribs[], const int dargs[],
         const int psizes[], int order, MPI_Datatype oldtype, MPI_Datatype *newtype))
{
    const char *fn = "MPI_Type_create_darray_c";
    if (ndims <= 0 || ndims > 64 || !gsizes || !distribs || !dargs || !psizes)
        return mpi_err(NULL, MPI_ERR_ARG, fn, "invalid ndims or NULL array");
    int ints[3 * 64 + 4], k = 0;
    ints[k++] = size;
    ints[k++] = rank;
    ints[k++] = ndims;
    for (int d = 0; d < ndims; d++)
        ints[k++] = distribs[d];
    for (int d = 0; d < ndims; d++)
        ints[k++] = dargs[d];
    for (int d = 0; d < ndims; d++)
        ints[k++] = psizes[d];
    ints[k++] = order;
    return darray(size, rank, ndims, gsizes, distribs, dargs, psizes, order, oldtype, newtype, k, ints, ndims, gsizes,
                  fn);
}

/* ---- commit, free, queries ---------------------------------------------- */

MPI_DEF(int, Type_commit, (MPI_Datatype * datatype))
{
    const char *fn = "MPI_Type_commit";
    if (!datatype) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL handle pointer");
    struct MPI_ABI_Datatype *t;
    int rc = check_old(*datatype, fn, &t);
    if (rc) return rc;
    t->committed = 1;
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_free, (MPI_Datatype * datatype))
{
    const char *fn = "MPI_Type_free";
    if (!datatype) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL handle pointer");
    struct MPI_ABI_Datatype *t;
    int rc = check_old(*datatype, fn, &t);
    if (rc) return rc;
    if (t->predefined) return mpi_err(NULL, MPI_ERR_TYPE, fn, "predefined datatype %s cannot be freed", t->name);
    if (t->combiner == MPI_COMBINER_F90_INTEGER || t->combiner == MPI_COMBINER_F90_REAL ||
        t->combiner == MPI_COMBINER_F90_COMPLEX)
        return mpi_err(NULL, MPI_ERR_TYPE, fn, "a parameterized Fortran datatype cannot be freed");
    if ((rc = mpi_attr_delete_all(MPI_K_DTYPE, t, &t->attrs)))
        return mpi_err(NULL, rc, fn, "an attribute delete callback failed");
    t->h.magic = MPI_MAGIC_BASE + MPI_K_DTYPE; /* stays valid for the types and requests that hold it */
    mpi_dtype_unref(t);
    *datatype = MPI_DATATYPE_NULL;
    return MPI_SUCCESS;
}

static int query(MPI_Datatype h, const void *out, const char *fn, struct MPI_ABI_Datatype **t)
{
    int rc = check_old(h, fn, t);
    if (rc) return rc;
    if (!out) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL output");
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_size, (MPI_Datatype datatype, int *size))
{
    struct MPI_ABI_Datatype *t;
    int rc = query(datatype, size, "MPI_Type_size", &t);
    if (rc) return rc;
    mpi_count_to_int(t->size, size);
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_size_c, (MPI_Datatype datatype, MPI_Count *size))
{
    struct MPI_ABI_Datatype *t;
    int rc = query(datatype, size, "MPI_Type_size_c", &t);
    if (rc) return rc;
    *size = t->size;
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_size_x, (MPI_Datatype datatype, MPI_Count *size))
{
    return PMPI_Type_size_c(datatype, size);
}

MPI_DEF(int, Type_get_extent, (MPI_Datatype datatype, MPI_Aint *lb, MPI_Aint *extent))
{
    struct MPI_ABI_Datatype *t;
    int rc = query(datatype, lb, "MPI_Type_get_extent", &t);
    if (rc) return rc;
    if (!extent) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Type_get_extent", "NULL extent");
    *lb = t->lb;
    *extent = t->extent;
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_get_extent_c, (MPI_Datatype datatype, MPI_Count *lb, MPI_Count *extent))
{
    MPI_Aint l, e;
    int rc = PMPI_Type_get_extent(datatype, &l, &e);
    if (rc) return rc;
    if (!lb || !extent) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Type_get_extent_c", "NULL output");
    *lb = l;
    *extent = e;
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_get_extent_x, (MPI_Datatype datatype, MPI_Count *lb, MPI_Count *extent))
{
    return PMPI_Type_get_extent_c(datatype, lb, extent);
}

MPI_DEF(int, Type_get_true_extent, (MPI_Datatype datatype, MPI_Aint *true_lb, MPI_Aint *true_extent))
{
    struct MPI_ABI_Datatype *t;
    int rc = query(datatype, true_lb, "MPI_Type_get_true_extent", &t);
    if (rc) return rc;
    if (!true_extent) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Type_get_true_extent", "NULL extent");
    *true_lb = t->true_lb;
    *true_extent = t->true_extent;
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_get_true_extent_c, (MPI_Datatype datatype, MPI_Count *true_lb, MPI_Count *true_extent))
{
    MPI_Aint l, e;
    int rc = PMPI_Type_get_true_extent(datatype, &l, &e);
    if (rc) return rc;
    if (!true_lb || !true_extent) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Type_get_true_extent_c", "NULL output");
    *true_lb = l;
    *true_extent = e;
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_get_true_extent_x, (MPI_Datatype datatype, MPI_Count *true_lb, MPI_Count *true_extent))
{
    return PMPI_Type_get_true_extent_c(datatype, true_lb, true_extent);
}

const char *mpi_dtype_name(const struct MPI_ABI_Datatype *t)
{
    if (t->name[0]) return t->name;
    switch (t->combiner) {
    case MPI_COMBINER_DUP: return "a derived dup type";
    case MPI_COMBINER_CONTIGUOUS: return "a derived contiguous type";
    case MPI_COMBINER_VECTOR: return "a derived vector type";
    case MPI_COMBINER_HVECTOR: return "a derived hvector type";
    case MPI_COMBINER_INDEXED: return "a derived indexed type";
    case MPI_COMBINER_HINDEXED: return "a derived hindexed type";
    case MPI_COMBINER_INDEXED_BLOCK: return "a derived indexed_block type";
    case MPI_COMBINER_HINDEXED_BLOCK: return "a derived hindexed_block type";
    case MPI_COMBINER_STRUCT: return "a derived struct type";
    case MPI_COMBINER_SUBARRAY: return "a derived subarray type";
    case MPI_COMBINER_DARRAY: return "a derived darray type";
    case MPI_COMBINER_RESIZED: return "a derived resized type";
    case MPI_COMBINER_F90_REAL:
    case MPI_COMBINER_F90_COMPLEX:
    case MPI_COMBINER_F90_INTEGER: return "a Fortran parameterized type";
    default: return "a derived type";
    }
}

MPI_DEF(int, Type_set_name, (MPI_Datatype datatype, const char *name))
{
    struct MPI_ABI_Datatype *t;
    int rc = query(datatype, name, "MPI_Type_set_name", &t);
    if (rc) return rc;
    snprintf(t->name, sizeof(t->name), "%s", name);
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_get_name, (MPI_Datatype datatype, char *name, int *resultlen))
{
    struct MPI_ABI_Datatype *t;
    if (datatype == MPI_DATATYPE_NULL && name && resultlen) { /* as MPICH: the null handle has its name */
        *resultlen = snprintf(name, MPI_MAX_OBJECT_NAME, "MPI_DATATYPE_NULL");
        return MPI_SUCCESS;
    }
    int rc = query(datatype, name, "MPI_Type_get_name", &t);
    if (rc) return rc;
    if (!resultlen) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Type_get_name", "NULL resultlen");
    snprintf(name, MPI_MAX_OBJECT_NAME, "%s", t->name);
    *resultlen = (int)strlen(name);
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_get_envelope_c,
        (MPI_Datatype datatype, MPI_Count *ni, MPI_Count *na, MPI_Count *nc, MPI_Count *nd, int *combiner))
{
    struct MPI_ABI_Datatype *t;
    int rc = query(datatype, ni, "MPI_Type_get_envelope_c", &t);
    if (rc) return rc;
    if (!na || !nc || !nd || !combiner) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Type_get_envelope_c", "NULL output");
    *ni = t->ni;
    *na = t->na;
    *nc = t->nc;
    *nd = t->nt;
    *combiner = t->combiner;
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_get_envelope, (MPI_Datatype datatype, int *ni, int *na, int *nd, int *combiner))
{
    struct MPI_ABI_Datatype *t;
    int rc = query(datatype, ni, "MPI_Type_get_envelope", &t);
    if (rc) return rc;
    if (!na || !nd || !combiner) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Type_get_envelope", "NULL output");
    if (t->nc)
        return mpi_err(NULL, MPI_ERR_VALUE_TOO_LARGE, "MPI_Type_get_envelope",
                       "made by a large-count constructor: use MPI_Type_get_envelope_c");
    *ni = t->ni;
    *na = t->na;
    *nd = t->nt;
    *combiner = t->combiner;
    return MPI_SUCCESS;
}

static int contents(struct MPI_ABI_Datatype *t, MPI_Count mi, MPI_Count ma, MPI_Count mc, MPI_Count md, int *ints,
                    MPI_Aint *addrs, MPI_Count *counts, MPI_Datatype *types, const char *fn)
{
    if (t->combiner == MPI_COMBINER_NAMED) return mpi_err(NULL, MPI_ERR_TYPE, fn, "a named datatype has no contents");
    if (mi < t->ni || ma < t->na || mc < t->nc || md < t->nt)
        return mpi_err(NULL, MPI_ERR_ARG, fn, "output arrays too small");
    if ((t->ni && !ints) || (t->na && !addrs) || (t->nc && !counts) || (t->nt && !types))
        return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL output array");
    if (t->ni) memcpy(ints, t->ints, sizeof(int) * (size_t)t->ni);
    if (t->na) memcpy(addrs, t->addrs, sizeof(MPI_Aint) * (size_t)t->na);
    if (t->nc) memcpy(counts, t->counts, sizeof(MPI_Count) * (size_t)t->nc);
    for (int i = 0; i < t->nt; i++) {
        types[i] = t->types[i];
        mpi_dtype_ref(mpi_dtype_get(t->types[i])); /* the caller frees derived ones */
    }
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_get_contents_c,
        (MPI_Datatype datatype, MPI_Count max_integers, MPI_Count max_addresses, MPI_Count max_large_counts,
         MPI_Count max_datatypes, int ints[], MPI_Aint addrs[], MPI_Count counts[], MPI_Datatype types[]))
{
    struct MPI_ABI_Datatype *t;
    int rc = check_old(datatype, "MPI_Type_get_contents_c", &t);
    if (rc) return rc;
    return contents(t, max_integers, max_addresses, max_large_counts, max_datatypes, ints, addrs, counts, types,
                    "MPI_Type_get_contents_c");
}

MPI_DEF(int, Type_get_contents,
        (MPI_Datatype datatype, int max_integers, int max_addresses, int max_datatypes, int ints[], MPI_Aint addrs[],
         MPI_Datatype types[]))
{
    struct MPI_ABI_Datatype *t;
    int rc = check_old(datatype, "MPI_Type_get_contents", &t);
    if (rc) return rc;
    if (t->nc)
        return mpi_err(NULL, MPI_ERR_VALUE_TOO_LARGE, "MPI_Type_get_contents",
                       "made by a large-count constructor: use MPI_Type_get_contents_c");
    return contents(t, max_integers, max_addresses, 0, max_datatypes, ints, addrs, NULL, types,
                    "MPI_Type_get_contents");
}

MPI_DEF(int, Type_match_size, (int typeclass, int size, MPI_Datatype *datatype))
{
    const char *fn = "MPI_Type_match_size";
    if (!datatype) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL output");
    int v = 0;
    switch (typeclass) {
    case MPI_TYPECLASS_INTEGER:
        v = size == 1 ? 0x2c1 : size == 2 ? 0x2c9 : size == 4 ? 0x2d1 : size == 8 ? 0x2d9 : size == 16 ? 0x2e1 : 0;
        break;
    case MPI_TYPECLASS_REAL:
        v = size == 2 ? 0x2ca : size == 4 ? 0x2d2 : size == 8 ? 0x2da : size == 16 ? 0x2e2 : 0;
        break;
    case MPI_TYPECLASS_COMPLEX:
        v = size == 4 ? 0x2d3 : size == 8 ? 0x2db : size == 16 ? 0x2e3 : size == 32 ? 0x2eb : 0;
        break;
    case MPIX_TYPECLASS_LOGICAL:
        v = size == 1 ? 0x2c0 : size == 2 ? 0x2c8 : size == 4 ? 0x2d0 : size == 8 ? 0x2d8 : size == 16 ? 0x2e0 : 0;
        break;
    default: return mpi_err(NULL, MPI_ERR_ARG, fn, "invalid type class %d", typeclass);
    }
    if (!v) return mpi_err(NULL, MPI_ERR_ARG, fn, "no type of class %d has size %d", typeclass, size);
    *datatype = (MPI_Datatype)(uintptr_t)v;
    return MPI_SUCCESS;
}

/* Parameterized Fortran types: one cached type per (combiner, p, r), a
 * dup of the predefined type that fits, never freed. */
static int f90(int combiner, int p, int r, int value, MPI_Datatype *newtype, const char *fn)
{
    static struct {
        int combiner, p, r;
        MPI_Datatype t;
    } cache[64];
    static int ncache;
    MPI_CHECK_INIT(fn);
    if (!newtype) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL output");
    if (!value) return mpi_err(NULL, MPI_ERR_ARG, fn, "no datatype with precision %d and range %d", p, r);
    for (int i = 0; i < ncache; i++)
        if (cache[i].combiner == combiner && cache[i].p == p && cache[i].r == r) {
            *newtype = cache[i].t;
            return MPI_SUCCESS;
        }
    if (ncache == 64) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "too many parameterized Fortran types");
    struct MPI_ABI_Datatype *o = mpi_dtype_get((MPI_Datatype)(uintptr_t)value), *t;
    blk_t b = BLK(0, 1, o);
    int rc = build(&b, 1, 0, &t, fn);
    if (rc) return rc;
    int ints[2] = {p, r};
    int ni = combiner == MPI_COMBINER_F90_INTEGER ? 1 : 2;
    if ((rc = record(t, combiner, ni, combiner == MPI_COMBINER_F90_INTEGER ? &r : ints, 0, NULL, 0, NULL, 0, NULL))) {
        mpi_dtype_unref(t);
        return mpi_err(NULL, rc, fn, "out of memory");
    }
    t->committed = 1;
    extra_of(t)->unit = value;
    extra_of(t)->units = 1;
    cache[ncache].combiner = combiner;
    cache[ncache].p = p;
    cache[ncache].r = r;
    cache[ncache++].t = t;
    *newtype = t;
    return MPI_SUCCESS;
}

MPI_DEF(int, Type_create_f90_integer, (int r, MPI_Datatype *newtype))
{
    int v = r <= 2 ? 0x2c1 : r <= 4 ? 0x2c9 : r <= 9 ? 0x2d1 : r <= 18 ? 0x2d9 : 0;
    return f90(MPI_COMBINER_F90_INTEGER, MPI_UNDEFINED, r, v, newtype, "MPI_Type_create_f90_integer");
}

static int real_for(int p, int r)
{
    if (p == MPI_UNDEFINED) p = 0;
    if (r == MPI_UNDEFINED) r = 0;
    return p <= 6 && r <= 37 ? 0x2d2 : p <= 15 && r <= 307 ? 0x2da : p <= 33 && r <= 4931 ? 0x2e2 : 0;
}

MPI_DEF(int, Type_create_f90_real, (int p, int r, MPI_Datatype *newtype))
{
    return f90(MPI_COMBINER_F90_REAL, p, r, real_for(p, r), newtype, "MPI_Type_create_f90_real");
}

MPI_DEF(int, Type_create_f90_complex, (int p, int r, MPI_Datatype *newtype))
{
    int v = real_for(p, r);
    v = v == 0x2d2 ? 0x2db : v == 0x2da ? 0x2e3 : v == 0x2e2 ? 0x2eb : 0;
    return f90(MPI_COMBINER_F90_COMPLEX, p, r, v, newtype, "MPI_Type_create_f90_complex");
}

MPI_DEF(int, Type_get_value_index, (MPI_Datatype value_type, MPI_Datatype index_type, MPI_Datatype *pair_type))
{
    const char *fn = "MPI_Type_get_value_index";
    MPI_CHECK_INIT(fn);
    if (!mpi_dtype_get(value_type) || !mpi_dtype_get(index_type))
        return mpi_err(NULL, MPI_ERR_TYPE, fn, "invalid datatype");
    if (!pair_type) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL output");
    *pair_type = MPI_DATATYPE_NULL;
    for (int i = 0; i < N_PAIRS; i++)
        if ((uintptr_t)value_type == (uintptr_t)pairs[i].first && (uintptr_t)index_type == (uintptr_t)pairs[i].second)
            *pair_type = (MPI_Datatype)(uintptr_t)pairs[i].value;
    return MPI_SUCCESS;
}

MPI_DEF(MPI_Datatype, Type_fromint, (int datatype))
{
    if (datatype >= 0x200 && datatype < 0x200 + MPI_DTYPE_TABLE_SIZE)
        return mpi_dtype_table[datatype - 0x200] ? (MPI_Datatype)(uintptr_t)datatype : MPI_DATATYPE_NULL;
    void *o = mpi_obj_at(MPI_K_DTYPE, datatype - MPI_HANDLE_INT_BASE);
    return o ? o : MPI_DATATYPE_NULL;
}

MPI_DEF(int, Type_toint, (MPI_Datatype datatype))
{
    uintptr_t v = (uintptr_t)datatype;
    if (v < MPI_HANDLE_INT_BASE) return (int)v;
    int i = mpi_obj_index(MPI_K_DTYPE, datatype);
    return i < 0 ? 0x200 : MPI_HANDLE_INT_BASE + i;
}

/* ---- checks used by communication -------------------------------------- */

int mpi_check_dtype(struct MPI_ABI_Comm *c, MPI_Datatype h, const char *fn, struct MPI_ABI_Datatype **out)
{
    struct MPI_ABI_Datatype *t = mpi_dtype_get(h);
    if (MPI_LIKELY(t && t->committed)) {
        *out = t;
        return MPI_SUCCESS;
    }
    if (!t)
        return mpi_err(c, MPI_ERR_TYPE, fn, "%s",
                       h == MPI_DATATYPE_NULL ? "MPI_DATATYPE_NULL is not a datatype" : "invalid datatype handle");
    return mpi_err(c, MPI_ERR_TYPE, fn, "datatype not committed (MPI_Type_commit)");
}

int mpi_check_count(struct MPI_ABI_Comm *c, MPI_Count n, const char *fn)
{
    if (MPI_UNLIKELY(n < 0)) return mpi_err(c, MPI_ERR_COUNT, fn, "negative count %lld", (long long)n);
    return MPI_SUCCESS;
}

int mpi_check_buf(struct MPI_ABI_Comm *c, const void *buf, MPI_Count n, struct MPI_ABI_Datatype *t, const char *fn)
{
    if (MPI_UNLIKELY(n < 0)) return mpi_err(c, MPI_ERR_COUNT, fn, "negative count %lld", (long long)n);
    if (MPI_UNLIKELY(mpi_dtype_bytes(t, n) < 0))
        return mpi_err(c, MPI_ERR_COUNT, fn, "count %lld of %s overflows", (long long)n, mpi_dtype_name(t));
    (void)buf; /* NULL is MPI_BOTTOM: absolute addresses in the datatype */
    return MPI_SUCCESS;
}
