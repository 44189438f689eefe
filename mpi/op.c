/* Reduction operators: MPI's predefined ops on every type MPI allows them
 * for, user ops, and which (op, type) pairs weft reduces itself. Local
 * reductions work on a type's unit (the predefined type it is made of);
 * non-contiguous data is packed, reduced and unpacked. */
#include "mpi_impl.h"

#include <complex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct MPI_ABI_Op predef_ops[0x1e];

static void ops_init(void)
{
    static int done;
    if (done) return;
    done = 1;
    static const int values[] = {0x21, 0x22, 0x23, 0x24, 0x28, 0x29, 0x2a, 0x30, 0x31, 0x32, 0x38, 0x39, 0x3c, 0x3d};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        struct MPI_ABI_Op *o = &predef_ops[values[i] - 0x20];
        o->h.magic = MPI_MAGIC_BASE + MPI_K_OP;
        o->h.refs = 1;
        o->predefined = values[i];
        o->commute = 1;
    }
}

struct MPI_ABI_Op *mpi_op_get(MPI_Op h)
{
    uintptr_t v = (uintptr_t)h;
    if (v > 0x20 && v < 0x3e) {
        ops_init();
        return predef_ops[v - 0x20].predefined ? &predef_ops[v - 0x20] : NULL;
    }
    if (v < MPI_HANDLE_INT_BASE) return NULL;
    return mpi_obj_check(MPI_K_OP, h);
}

/* ---- kernels --------------------------------------------------------------- */

#define OP_SUM(a, b)  ((b) + (a))
#define OP_PROD(a, b) ((b) * (a))
#define OP_MIN(a, b)  ((a) < (b) ? (a) : (b))
#define OP_MAX(a, b)  ((a) > (b) ? (a) : (b))
#define OP_LAND(a, b) ((a) && (b))
#define OP_LOR(a, b)  ((a) || (b))
#define OP_LXOR(a, b) (!(a) != !(b))
#define OP_BAND(a, b) ((a) & (b))
#define OP_BOR(a, b)  ((a) | (b))
#define OP_BXOR(a, b) ((a) ^ (b))

#define LOOP(T, F)                                                                                                     \
    do {                                                                                                               \
        const T *x = in;                                                                                               \
        T *y = inout;                                                                                                  \
        for (MPI_Count i = 0; i < n; i++) {                                                                            \
            T a, b;                                                                                                    \
            memcpy(&a, &x[i], sizeof(T));                                                                              \
            memcpy(&b, &y[i], sizeof(T));                                                                              \
            b = (T)F(a, b);                                                                                            \
            memcpy(&y[i], &b, sizeof(T));                                                                              \
        }                                                                                                              \
    } while (0)

/* ops on one C type; returns 0 or -1 when the op does not apply to it */
#define KERNEL_INT(name, T)                                                                                            \
    static int name(int op, const void *in, void *inout, MPI_Count n)                                                  \
    {                                                                                                                  \
        switch (op) {                                                                                                  \
        case 0x21: LOOP(T, OP_SUM); return 0;                                                                          \
        case 0x24: LOOP(T, OP_PROD); return 0;                                                                         \
        case 0x22: LOOP(T, OP_MIN); return 0;                                                                          \
        case 0x23: LOOP(T, OP_MAX); return 0;                                                                          \
        case 0x30: LOOP(T, OP_LAND); return 0;                                                                         \
        case 0x31: LOOP(T, OP_LOR); return 0;                                                                          \
        case 0x32: LOOP(T, OP_LXOR); return 0;                                                                         \
        case 0x28: LOOP(T, OP_BAND); return 0;                                                                         \
        case 0x29: LOOP(T, OP_BOR); return 0;                                                                          \
        case 0x2a: LOOP(T, OP_BXOR); return 0;                                                                         \
        default: return -1;                                                                                            \
        }                                                                                                              \
    }
#define KERNEL_FLOAT(name, T)                                                                                          \
    static int name(int op, const void *in, void *inout, MPI_Count n)                                                  \
    {                                                                                                                  \
        switch (op) {                                                                                                  \
        case 0x21: LOOP(T, OP_SUM); return 0;                                                                          \
        case 0x24: LOOP(T, OP_PROD); return 0;                                                                         \
        case 0x22: LOOP(T, OP_MIN); return 0;                                                                          \
        case 0x23: LOOP(T, OP_MAX); return 0;                                                                          \
        default: return -1;                                                                                            \
        }                                                                                                              \
    }
#define KERNEL_COMPLEX(name, T)                                                                                        \
    static int name(int op, const void *in, void *inout, MPI_Count n)                                                  \
    {                                                                                                                  \
        switch (op) {                                                                                                  \
        case 0x21: LOOP(T, OP_SUM); return 0;                                                                          \
        case 0x24: LOOP(T, OP_PROD); return 0;                                                                         \
        default: return -1;                                                                                            \
        }                                                                                                              \
    }
#define KERNEL_LOGICAL(name, T)                                                                                        \
    static int name(int op, const void *in, void *inout, MPI_Count n)                                                  \
    {                                                                                                                  \
        switch (op) {                                                                                                  \
        case 0x30: LOOP(T, OP_LAND); return 0;                                                                         \
        case 0x31: LOOP(T, OP_LOR); return 0;                                                                          \
        case 0x32: LOOP(T, OP_LXOR); return 0;                                                                         \
        default: return -1;                                                                                            \
        }                                                                                                              \
    }
#define KERNEL_BYTE(name, T)                                                                                           \
    static int name(int op, const void *in, void *inout, MPI_Count n)                                                  \
    {                                                                                                                  \
        switch (op) {                                                                                                  \
        case 0x28: LOOP(T, OP_BAND); return 0;                                                                         \
        case 0x29: LOOP(T, OP_BOR); return 0;                                                                          \
        case 0x2a: LOOP(T, OP_BXOR); return 0;                                                                         \
        default: return -1;                                                                                            \
        }                                                                                                              \
    }

KERNEL_INT(k_i8, int8_t)
KERNEL_INT(k_i16, int16_t)
KERNEL_INT(k_i32, int32_t)
KERNEL_INT(k_i64, int64_t)
KERNEL_INT(k_i128, __int128)
KERNEL_INT(k_u8, uint8_t)
KERNEL_INT(k_u16, uint16_t)
KERNEL_INT(k_u32, uint32_t)
KERNEL_INT(k_u64, uint64_t)
KERNEL_FLOAT(k_f32, float)
KERNEL_FLOAT(k_f64, double)
KERNEL_FLOAT(k_f80, long double)
KERNEL_COMPLEX(k_c32, float _Complex)
KERNEL_COMPLEX(k_c64, double _Complex)
KERNEL_COMPLEX(k_c80, long double _Complex)
KERNEL_LOGICAL(k_l8, uint8_t)
KERNEL_LOGICAL(k_l16, uint16_t)
KERNEL_LOGICAL(k_l32, uint32_t)
KERNEL_LOGICAL(k_l64, uint64_t)
KERNEL_LOGICAL(k_l128, unsigned __int128)
KERNEL_BYTE(k_b8, uint8_t)

/* binary16 <-> float for MPI_REAL2 */
static float half_to_float(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, f;
    if (e == 0) {
        if (m == 0) {
            f = s;
        } else {
            e = 127 - 15 + 1;
            while (!(m & 0x400)) {
                m <<= 1;
                e--;
            }
            f = s | (e << 23) | ((m & 0x3ff) << 13);
        }
    } else if (e == 31) {
        f = s | 0x7f800000u | (m << 13);
    } else {
        f = s | ((e + 127 - 15) << 23) | (m << 13);
    }
    float r;
    memcpy(&r, &f, 4);
    return r;
}

static uint16_t float_to_half(float v)
{
    uint32_t f;
    memcpy(&f, &v, 4);
    uint32_t s = (f >> 16) & 0x8000;
    int e = (int)((f >> 23) & 0xff) - 127 + 15;
    uint32_t m = f & 0x7fffff;
    if (((f >> 23) & 0xff) == 0xff) return (uint16_t)(s | 0x7c00 | (m ? 0x200 : 0));
    if (e >= 31) return (uint16_t)(s | 0x7c00);
    if (e <= 0) {
        if (e < -10) return (uint16_t)s;
        m |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e), r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(s | r);
    }
    uint32_t r = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(s | r);
}

static int k_f16(int op, const void *in, void *inout, MPI_Count n)
{
    if (op != 0x21 && op != 0x24 && op != 0x22 && op != 0x23) return -1;
    const uint16_t *x = in;
    uint16_t *y = inout;
    for (MPI_Count i = 0; i < n; i++) {
        uint16_t a16, b16;
        memcpy(&a16, &x[i], 2);
        memcpy(&b16, &y[i], 2);
        float a = half_to_float(a16), b = half_to_float(b16);
        float r = op == 0x21 ? a + b : op == 0x24 ? a * b : op == 0x22 ? OP_MIN(a, b) : OP_MAX(a, b);
        b16 = float_to_half(r);
        memcpy(&y[i], &b16, 2);
    }
    return 0;
}

typedef int (*kernel_fn)(int op, const void *in, void *inout, MPI_Count n);

static kernel_fn kernel_for(int unit)
{
    const mpi_basic_t *b = mpi_basic_of(unit - 0x200);
    switch (b->cls) {
    case 'i': return b->size == 1 ? k_i8 : b->size == 2 ? k_i16 : b->size == 4 ? k_i32 : b->size == 8 ? k_i64 : k_i128;
    case 'u': return b->size == 1 ? k_u8 : b->size == 2 ? k_u16 : b->size == 4 ? k_u32 : k_u64;
    case 'f': return b->size == 4 ? k_f32 : b->size == 8 ? k_f64 : k_f80;
    case 'h': return k_f16;
    case 'c': return b->size == 8 ? k_c32 : b->size == 16 ? k_c64 : k_c80;
    case 'l': return b->size == 1 ? k_l8 : b->size == 2 ? k_l16 : b->size == 4 ? k_l32 : b->size == 8 ? k_l64 : k_l128;
    case 'b': return k_b8;
    default: return NULL;
    }
}

/* MINLOC / MAXLOC on packed (value, index) pairs. */
#define PAIR_LOOP(V, I)                                                                                                \
    do {                                                                                                               \
        const char *x = in;                                                                                            \
        char *y = inout;                                                                                               \
        size_t step = sizeof(V) + sizeof(I);                                                                           \
        for (MPI_Count k = 0; k < n; k++, x += step, y += step) {                                                      \
            V a, b;                                                                                                    \
            I ia, ib;                                                                                                  \
            memcpy(&a, x, sizeof(V));                                                                                  \
            memcpy(&b, y, sizeof(V));                                                                                  \
            memcpy(&ia, x + sizeof(V), sizeof(I));                                                                     \
            memcpy(&ib, y + sizeof(V), sizeof(I));                                                                     \
            int better = op == 0x38 ? a < b : a > b;                                                                   \
            if (better || (a == b && ia < ib)) {                                                                       \
                memcpy(y, &a, sizeof(V));                                                                              \
                memcpy(y + sizeof(V), &ia, sizeof(I));                                                                 \
            }                                                                                                          \
        }                                                                                                              \
    } while (0)

static int pair_kernel(int unit, int op, const void *in, void *inout, MPI_Count n)
{
    if (op != 0x38 && op != 0x39) return -1;
    switch (unit) {
    case 0x228: PAIR_LOOP(float, int); return 0;
    case 0x229: PAIR_LOOP(double, int); return 0;
    case 0x22a: PAIR_LOOP(long, int); return 0;
    case 0x22b: PAIR_LOOP(int, int); return 0;
    case 0x22c: PAIR_LOOP(short, int); return 0;
    case 0x22d: PAIR_LOOP(long double, int); return 0;
    case 0x230: PAIR_LOOP(float, float); return 0;
    case 0x231: PAIR_LOOP(double, double); return 0;
    case 0x232: PAIR_LOOP(int, int); return 0;
    default: return -1;
    }
}

static int is_pair(int unit)
{
    return (unit >= 0x228 && unit <= 0x22d) || (unit >= 0x230 && unit <= 0x232);
}

/* Whether a predefined op applies to a unit type (without running it).
 * MPI_REPLACE and MPI_NO_OP apply to none: they are one-sided
 * communication's, which weft's library does not have. */
static int applies(int op, int unit)
{
    if (!unit) return 0;
    if (is_pair(unit)) return op == 0x38 || op == 0x39;
    if (op == 0x38 || op == 0x39) return 0;
    kernel_fn k = kernel_for(unit);
    if (!k) return 0;
    char a[32] = {0}, b[32] = {0};
    return k(op, a, b, 0) == 0; /* n = 0: answers whether the op is there */
}

int mpi_op_check(struct MPI_ABI_Comm *c, struct MPI_ABI_Op *op, struct MPI_ABI_Datatype *t, const char *fn)
{
    if (!op->predefined || applies(op->predefined, mpi_dtype_unit(t, NULL))) return MPI_SUCCESS;
    MPI_Op h = (MPI_Op)(uintptr_t)op->predefined;
    if (h == MPI_REPLACE || h == MPI_NO_OP)
        return mpi_err(c, MPI_ERR_OP, fn, "%s is only for one-sided accumulates, not reductions",
                       h == MPI_REPLACE ? "MPI_REPLACE" : "MPI_NO_OP");
    return mpi_err(c, MPI_ERR_OP, fn, "op not defined for datatype %s", mpi_dtype_name(t));
}

int mpi_op_native(const struct MPI_ABI_Op *op, const struct MPI_ABI_Datatype *t, weft_op_t *wop)
{
    if (!op->predefined || (int)t->wdt < 0 || t->basic < 0) return 0;
    int cls = mpi_basic_of(t->basic)->cls;
    switch (op->predefined) {
    case 0x21: *wop = WEFT_SUM; break;
    case 0x24: *wop = WEFT_PROD; break;
    case 0x22: *wop = WEFT_MIN; break;
    case 0x23: *wop = WEFT_MAX; break;
    case 0x28: *wop = WEFT_BAND; break;
    case 0x29: *wop = WEFT_BOR; break;
    case 0x2a: *wop = WEFT_BXOR; break;
    default: return 0;
    }
    if (cls == 'b') return *wop == WEFT_BAND || *wop == WEFT_BOR || *wop == WEFT_BXOR;
    if (cls == 'f' || cls == 'h') return *wop == WEFT_SUM || *wop == WEFT_PROD || *wop == WEFT_MIN || *wop == WEFT_MAX;
    return cls == 'i' || cls == 'u';
}

/* Predefined op on packed units. */
static int reduce_units(int op, int unit, const void *in, void *inout, MPI_Count n)
{
    if (is_pair(unit)) return pair_kernel(unit, op, in, inout, n);
    kernel_fn k = kernel_for(unit);
    return k ? k(op, in, inout, n) : -1;
}

int mpi_reduce_local(const void *in, void *inout, MPI_Count count, struct MPI_ABI_Datatype *t, struct MPI_ABI_Op *op)
{
    if (count == 0) return MPI_SUCCESS;
    if (!op->predefined) {
        MPI_Datatype h = t->predefined ? (MPI_Datatype)(uintptr_t)t->predefined : t;
        if (op->fn_c) {
            MPI_Count len = count;
            op->fn_c((void *)in, inout, &len, &h);
            return MPI_SUCCESS;
        }
        /* int-count user functions get the count in pieces */
        while (count > 0) {
            int len = count > INT32_MAX ? INT32_MAX : (int)count;
            op->fn((void *)in, inout, &len, &h);
            count -= len;
            in = (const char *)in + (MPI_Aint)len * t->extent;
            inout = (char *)inout + (MPI_Aint)len * t->extent;
        }
        return MPI_SUCCESS;
    }
    MPI_Count units;
    int unit = mpi_dtype_unit(t, &units);
    if (!applies(op->predefined, unit)) return MPI_ERR_OP;
    /* pairs are reduced packed (their C layout may have padding) */
    if (t->contig && !(is_pair(unit) && t->size != t->extent)) {
        if (reduce_units(op->predefined, unit, mpi_dtype_data(in, t), mpi_dtype_data(inout, t), units * count))
            return MPI_ERR_OP;
        return MPI_SUCCESS;
    }
    MPI_Count bytes = mpi_dtype_bytes(t, count);
    char *a = mpi_malloc((size_t)bytes), *b = mpi_malloc((size_t)bytes);
    if (!a || !b) {
        free(a), free(b);
        return MPI_ERR_NO_MEM;
    }
    mpi_pack(in, count, t, a);
    mpi_pack(inout, count, t, b);
    int rc = reduce_units(op->predefined, unit, a, b, units * count) ? MPI_ERR_OP : MPI_SUCCESS;
    if (!rc) mpi_unpack(b, bytes, inout, count, t);
    free(a), free(b);
    return rc;
}

/* ---- API ------------------------------------------------------------------- */

static int op_create(MPI_User_function *fn, MPI_User_function_c *fn_c, int commute, MPI_Op *op, const char *name)
{
    if ((!fn && !fn_c) || !op) return mpi_err(NULL, MPI_ERR_ARG, name, "NULL function or output");
    struct MPI_ABI_Op *o = mpi_obj_alloc(MPI_K_OP);
    if (!o) return mpi_err(NULL, MPI_ERR_NO_MEM, name, "out of handles");
    o->fn = fn;
    o->fn_c = fn_c;
    o->commute = commute != 0;
    *op = o;
    return MPI_SUCCESS;
}

MPI_DEF(int, Op_create, (MPI_User_function * user_fn, int commute, MPI_Op *op))
{
    return op_create(user_fn, NULL, commute, op, "MPI_Op_create");
}

MPI_DEF(int, Op_create_c, (MPI_User_function_c * user_fn, int commute, MPI_Op *op))
{
    return op_create(NULL, user_fn, commute, op, "MPI_Op_create_c");
}

MPI_DEF(int, Op_free, (MPI_Op * op))
{
    if (!op) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Op_free", "NULL handle pointer");
    struct MPI_ABI_Op *o = mpi_op_get(*op);
    if (!o) return mpi_err(NULL, MPI_ERR_OP, "MPI_Op_free", "invalid op");
    if (o->predefined) return mpi_err(NULL, MPI_ERR_OP, "MPI_Op_free", "a predefined op cannot be freed");
    if (--o->h.refs <= 0) mpi_obj_release(MPI_K_OP, o);
    *op = MPI_OP_NULL;
    return MPI_SUCCESS;
}

MPI_DEF(int, Op_commutative, (MPI_Op op, int *commute))
{
    struct MPI_ABI_Op *o = mpi_op_get(op);
    if (!o) return mpi_err(NULL, MPI_ERR_OP, "MPI_Op_commutative", "invalid op");
    if (!commute) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Op_commutative", "NULL output");
    *commute = o->commute;
    return MPI_SUCCESS;
}

static int reduce_local(const void *inbuf, void *inoutbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op,
                        const char *fn)
{
    struct MPI_ABI_Datatype *t;
    struct MPI_ABI_Op *o = mpi_op_get(op);
    int rc = mpi_check_dtype(NULL, datatype, fn, &t);
    if (rc) return rc;
    if (!o) return mpi_err(NULL, MPI_ERR_OP, fn, "invalid op");
    if ((rc = mpi_op_check(NULL, o, t, fn))) return rc;
    if ((rc = mpi_check_count(NULL, count, fn))) return rc;
    if (count > 0 && (!inbuf || !inoutbuf)) return mpi_err(NULL, MPI_ERR_BUFFER, fn, "NULL buffer");
    if ((rc = mpi_reduce_local(inbuf, inoutbuf, count, t, o)))
        return mpi_err(NULL, rc, fn, rc == MPI_ERR_OP ? "op not defined for datatype %s" : "out of memory (%s)",
                       mpi_dtype_name(t));
    return MPI_SUCCESS;
}

MPI_DEF(int, Reduce_local, (const void *inbuf, void *inoutbuf, int count, MPI_Datatype datatype, MPI_Op op))
{
    return reduce_local(inbuf, inoutbuf, count, datatype, op, "MPI_Reduce_local");
}

MPI_DEF(int, Reduce_local_c, (const void *inbuf, void *inoutbuf, MPI_Count count, MPI_Datatype datatype, MPI_Op op))
{
    return reduce_local(inbuf, inoutbuf, count, datatype, op, "MPI_Reduce_local_c");
}

MPI_DEF(MPI_Op, Op_fromint, (int op))
{
    if (op >= 0x20 && op < 0x3e) return (MPI_Op)(uintptr_t)op;
    void *o = mpi_obj_at(MPI_K_OP, op - MPI_HANDLE_INT_BASE);
    return o ? o : MPI_OP_NULL;
}

MPI_DEF(int, Op_toint, (MPI_Op op))
{
    uintptr_t v = (uintptr_t)op;
    if (v < MPI_HANDLE_INT_BASE) return (int)v;
    int i = mpi_obj_index(MPI_K_OP, op);
    return i < 0 ? 0x20 : MPI_HANDLE_INT_BASE + i;
}
