/* Pack / unpack (native: the packed bytes weft sends; "external32": MPI's
 * portable big-endian form), addresses and memory allocation. */
#include "mpi_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int pack_common(const void *inbuf, MPI_Count incount, MPI_Datatype datatype, void *outbuf, MPI_Count outsize,
                       MPI_Count *position, MPI_Comm comm, const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *t;
    int rc = mpi_check_comm(comm, fn, &c);
    if (rc || (rc = mpi_check_dtype(c, datatype, fn, &t)) || (rc = mpi_check_count(c, incount, fn))) return rc;
    if (!position || (outsize > 0 && !outbuf)) return mpi_err(c, MPI_ERR_ARG, fn, "NULL position or output buffer");
    MPI_Count bytes = mpi_dtype_bytes(t, incount);
    if (*position < 0 || *position + bytes > outsize)
        return mpi_err(c, MPI_ERR_TRUNCATE, fn, "%lld bytes at position %lld do not fit %lld", (long long)bytes,
                       (long long)*position, (long long)outsize);
    mpi_pack(inbuf, incount, t, (char *)outbuf + *position);
    *position += bytes;
    return MPI_SUCCESS;
}

static int unpack_common(const void *inbuf, MPI_Count insize, MPI_Count *position, void *outbuf, MPI_Count outcount,
                         MPI_Datatype datatype, MPI_Comm comm, const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *t;
    int rc = mpi_check_comm(comm, fn, &c);
    if (rc || (rc = mpi_check_dtype(c, datatype, fn, &t)) || (rc = mpi_check_count(c, outcount, fn))) return rc;
    if (!position || (insize > 0 && !inbuf)) return mpi_err(c, MPI_ERR_ARG, fn, "NULL position or input buffer");
    MPI_Count bytes = mpi_dtype_bytes(t, outcount);
    if (*position < 0 || *position + bytes > insize)
        return mpi_err(c, MPI_ERR_TRUNCATE, fn, "%lld bytes at position %lld are past the %lld-byte input",
                       (long long)bytes, (long long)*position, (long long)insize);
    mpi_unpack((const char *)inbuf + *position, bytes, outbuf, outcount, t);
    *position += bytes;
    return MPI_SUCCESS;
}

MPI_DEF(int, Pack,
        (const void *inbuf, int incount, MPI_Datatype datatype, void *outbuf, int outsize, int *position,
         MPI_Comm comm))
{
    if (!position) return mpi_err(mpi_comm_get(comm), MPI_ERR_ARG, "MPI_Pack", "NULL position");
    MPI_Count pos = *position;
    int rc = pack_common(inbuf, incount, datatype, outbuf, outsize, &pos, comm, "MPI_Pack");
    if (!rc) *position = (int)pos;
    return rc;
}

MPI_DEF(int, Pack_c,
        (const void *inbuf, MPI_Count incount, MPI_Datatype datatype, void *outbuf, MPI_Count outsize,
         MPI_Count *position, MPI_Comm comm))
{
    return pack_common(inbuf, incount, datatype, outbuf, outsize, position, comm, "MPI_Pack_c");
}

MPI_DEF(int, Unpack,
        (const void *inbuf, int insize, int *position, void *outbuf, int outcount, MPI_Datatype datatype,
         MPI_Comm comm))
{
    if (!position) return mpi_err(mpi_comm_get(comm), MPI_ERR_ARG, "MPI_Unpack", "NULL position");
    MPI_Count pos = *position;
    int rc = unpack_common(inbuf, insize, &pos, outbuf, outcount, datatype, comm, "MPI_Unpack");
    if (!rc) *position = (int)pos;
    return rc;
}

MPI_DEF(int, Unpack_c,
        (const void *inbuf, MPI_Count insize, MPI_Count *position, void *outbuf, MPI_Count outcount,
         MPI_Datatype datatype, MPI_Comm comm))
{
    return unpack_common(inbuf, insize, position, outbuf, outcount, datatype, comm, "MPI_Unpack_c");
}

static int pack_size(MPI_Count incount, MPI_Datatype datatype, MPI_Comm comm, MPI_Count *size, const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *t;
    int rc = mpi_check_comm(comm, fn, &c);
    if (rc || (rc = mpi_check_dtype(c, datatype, fn, &t)) || (rc = mpi_check_count(c, incount, fn))) return rc;
    if (!size) return mpi_err(c, MPI_ERR_ARG, fn, "NULL size");
    *size = mpi_dtype_bytes(t, incount);
    return MPI_SUCCESS;
}

MPI_DEF(int, Pack_size, (int incount, MPI_Datatype datatype, MPI_Comm comm, int *size))
{
    MPI_Count s = 0;
    int rc = pack_size(incount, datatype, comm, &s, "MPI_Pack_size");
    if (!rc) mpi_count_to_int(s, size);
    return rc;
}

MPI_DEF(int, Pack_size_c, (MPI_Count incount, MPI_Datatype datatype, MPI_Comm comm, MPI_Count *size))
{
    return pack_size(incount, datatype, comm, size, "MPI_Pack_size_c");
}

/* ---- external32 ---------------------------------------------------------------------- */

/* Size of a basic type in external32 (0: none), and how to convert it:
 * 'i' / 'u' integers (resized), 'f' floats byte-swapped, 'c' complex
 * (two floats), 'b' bytes as they are. */
static int ext_size(int basic, int *kind)
{
    const mpi_basic_t *b = mpi_basic_of(basic);
    int value = basic + 0x200;
    switch (b->cls) {
    case 'i':
    case 'u':
        *kind = b->cls;
        if (value == 0x20a || value == 0x20e) return 4; /* long, unsigned long */
        return b->size;
    case 'l': *kind = 'u'; return b->size;
    case 'f':
    case 'h': *kind = 'f'; return b->size == 16 ? 0 : b->size; /* long double: no portable form here */
    case 'c': *kind = 'c'; return b->size == 32 ? 0 : b->size;
    case 'b': *kind = 'b'; return 1;
    case 'x':
        if (value == 0x23c) { /* wchar_t: 2 bytes */
            *kind = 'u';
            return 2;
        }
        if (value == 0x21e) {
            *kind = 'b';
            return 1;
        }
        return 0;
    default: return 0;
    }
}

static void to_be(const unsigned char *in, int n, unsigned char *out)
{
    for (int i = 0; i < n; i++)
        out[i] = in[n - 1 - i];
}

/* Converts one element (native -> external when out is external). */
static int convert(const char *in, int nsize, char *out, int esize, int kind, int to_ext)
{
    if (kind == 'b') {
        memcpy(out, in, (size_t)esize);
        return 0;
    }
    if (kind == 'f') {
        to_be((const unsigned char *)in, esize, (unsigned char *)out);
        return 0;
    }
    if (kind == 'c') {
        int h = esize / 2;
        to_be((const unsigned char *)in, h, (unsigned char *)out);
        to_be((const unsigned char *)in + h, h, (unsigned char *)out + h);
        return 0;
    }
    /* integers: through 64 bits */
    int from = to_ext ? nsize : esize, to = to_ext ? esize : nsize;
    unsigned char v[16] = {0};
    if (from > 8 || to > 8) {
        if (from != to) return -1;
        to_be((const unsigned char *)in, from, (unsigned char *)out);
        return 0;
    }
    uint64_t u = 0;
    if (to_ext) {
        memcpy(v, in, (size_t)from); /* little-endian host */
        memcpy(&u, v, 8);
        if (kind == 'i' && from < 8 && (v[from - 1] & 0x80)) u |= ~UINT64_C(0) << (8 * from);
        unsigned char le[8];
        memcpy(le, &u, 8);
        to_be(le, to, (unsigned char *)out);
    } else {
        to_be((const unsigned char *)in, from, v);
        memcpy(&u, v, 8);
        if (kind == 'i' && from < 8 && (v[from - 1] & 0x80)) u |= ~UINT64_C(0) << (8 * from);
        memcpy(out, &u, (size_t)to);
    }
    return 0;
}

/* External size of one element of t, or -1 when a basic type has none. */
static MPI_Count ext_elem_size(const struct MPI_ABI_Datatype *t)
{
    MPI_Count s = 0;
    for (int r = 0; r < t->nruns; r++) {
        int kind, e = ext_size(t->runs[r].basic, &kind);
        if (!e) return -1;
        s += e * t->runs[r].n * t->runs[r].reps; /* no larger than the native size */
    }
    return s;
}

static int external_check(const char *datarep, const char *fn)
{
    if (!datarep || strcmp(datarep, "external32"))
        return mpi_err(NULL, MPI_ERR_UNSUPPORTED_DATAREP, fn, "data representation \"%s\" (only \"external32\")",
                       datarep ? datarep : "(null)");
    return MPI_SUCCESS;
}

static int external(const char *datarep, const void *native, MPI_Count count, MPI_Datatype datatype, void *ext,
                    MPI_Count extsize, MPI_Count *position, int pack, const char *fn)
{
    struct MPI_ABI_Datatype *t;
    int rc = external_check(datarep, fn);
    if (rc || (rc = mpi_check_dtype(NULL, datatype, fn, &t)) || (rc = mpi_check_count(NULL, count, fn))) return rc;
    if (!position) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL position");
    MPI_Count es = ext_elem_size(t);
    if (es < 0) return mpi_err(NULL, MPI_ERR_CONVERSION, fn, "%s has no external32 form here", mpi_dtype_name(t));
    MPI_Count bytes;
    if (__builtin_mul_overflow(es, count, &bytes))
        return mpi_err(NULL, MPI_ERR_COUNT, fn, "count %lld of %s overflows", (long long)count, mpi_dtype_name(t));
    if (*position < 0 || *position + bytes > extsize)
        return mpi_err(NULL, MPI_ERR_TRUNCATE, fn, "%lld bytes at position %lld do not fit %lld", (long long)bytes,
                       (long long)*position, (long long)extsize);
    char *e = (char *)ext + *position;
    for (MPI_Count i = 0; i < count; i++) {
        char *base = (char *)native + (MPI_Aint)i * t->extent;
        for (int r = 0; r < t->nruns; r++) {
            const mpi_run_t *x = &t->runs[r];
            int kind, esz = ext_size(x->basic, &kind), nsz = mpi_basic_of(x->basic)->size;
            for (MPI_Count q = 0; q < x->reps; q++)
                for (MPI_Count k = 0; k < x->n; k++) {
                    char *n = base + x->disp + q * x->stride + k * nsz;
                    if ((pack ? convert(n, nsz, e, esz, kind, 1) : convert(e, nsz, n, esz, kind, 0)))
                        return mpi_err(NULL, MPI_ERR_CONVERSION, fn, "cannot convert %s", mpi_dtype_name(t));
                    e += esz;
                }
        }
    }
    *position += bytes;
    return MPI_SUCCESS;
}

MPI_DEF(int, Pack_external,
        (const char datarep[], const void *inbuf, int incount, MPI_Datatype datatype, void *outbuf, MPI_Aint outsize,
         MPI_Aint *position))
{
    if (!position) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Pack_external", "NULL position");
    MPI_Count pos = *position;
    int rc = external(datarep, inbuf, incount, datatype, outbuf, outsize, &pos, 1, "MPI_Pack_external");
    if (!rc) *position = (MPI_Aint)pos;
    return rc;
}

MPI_DEF(int, Pack_external_c,
        (const char datarep[], const void *inbuf, MPI_Count incount, MPI_Datatype datatype, void *outbuf,
         MPI_Count outsize, MPI_Count *position))
{
    return external(datarep, inbuf, incount, datatype, outbuf, outsize, position, 1, "MPI_Pack_external_c");
}

MPI_DEF(int, Unpack_external,
        (const char datarep[], const void *inbuf, MPI_Aint insize, MPI_Aint *position, void *outbuf, int outcount,
         MPI_Datatype datatype))
{
    if (!position) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Unpack_external", "NULL position");
    MPI_Count pos = *position;
    int rc = external(datarep, outbuf, outcount, datatype, (void *)inbuf, insize, &pos, 0, "MPI_Unpack_external");
    if (!rc) *position = (MPI_Aint)pos;
    return rc;
}

MPI_DEF(int, Unpack_external_c,
        (const char datarep[], const void *inbuf, MPI_Count insize, MPI_Count *position, void *outbuf,
         MPI_Count outcount, MPI_Datatype datatype))
{
    return external(datarep, outbuf, outcount, datatype, (void *)inbuf, insize, position, 0, "MPI_Unpack_external_c");
}

static int external_size(const char *datarep, MPI_Count incount, MPI_Datatype datatype, MPI_Count *size, const char *fn)
{
    struct MPI_ABI_Datatype *t;
    int rc = external_check(datarep, fn);
    if (rc || (rc = mpi_check_dtype(NULL, datatype, fn, &t)) || (rc = mpi_check_count(NULL, incount, fn))) return rc;
    if (!size) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL size");
    MPI_Count es = ext_elem_size(t);
    if (es < 0) return mpi_err(NULL, MPI_ERR_CONVERSION, fn, "%s has no external32 form here", mpi_dtype_name(t));
    if (__builtin_mul_overflow(es, incount, size))
        return mpi_err(NULL, MPI_ERR_COUNT, fn, "count %lld of %s overflows", (long long)incount, mpi_dtype_name(t));
    return MPI_SUCCESS;
}

MPI_DEF(int, Pack_external_size, (const char datarep[], int incount, MPI_Datatype datatype, MPI_Aint *size))
{
    MPI_Count s = 0;
    int rc = external_size(datarep, incount, datatype, &s, "MPI_Pack_external_size");
    if (!rc && size) *size = (MPI_Aint)s;
    return rc;
}

MPI_DEF(int, Pack_external_size_c, (const char datarep[], MPI_Count incount, MPI_Datatype datatype, MPI_Count *size))
{
    return external_size(datarep, incount, datatype, size, "MPI_Pack_external_size_c");
}

/* ---- addresses and memory -------------------------------------------------------------- */

MPI_DEF(int, Get_address, (const void *location, MPI_Aint *address))
{
    if (!address) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Get_address", "NULL address");
    *address = (MPI_Aint)location;
    return MPI_SUCCESS;
}

MPI_DEF(MPI_Aint, Aint_add, (MPI_Aint base, MPI_Aint disp))
{
    return (MPI_Aint)((uintptr_t)base + (uintptr_t)disp);
}

MPI_DEF(MPI_Aint, Aint_diff, (MPI_Aint addr1, MPI_Aint addr2))
{
    return (MPI_Aint)((uintptr_t)addr1 - (uintptr_t)addr2);
}

MPI_DEF(int, Alloc_mem, (MPI_Aint size, MPI_Info info, void *baseptr))
{
    (void)info;
    if (size < 0 || !baseptr) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Alloc_mem", "negative size or NULL baseptr");
    void *p = malloc(size ? (size_t)size : 1);
    if (!p) return mpi_err(NULL, MPI_ERR_NO_MEM, "MPI_Alloc_mem", "cannot allocate %lld bytes", (long long)size);
    *(void **)baseptr = p;
    return MPI_SUCCESS;
}

MPI_DEF(int, Free_mem, (void *base))
{
    free(base);
    return MPI_SUCCESS;
}
