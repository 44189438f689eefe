/* Datatypes: sizes, names, and buffer argument checks. Reductions arrive
 * with the collectives. */
#include "weft_internal.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[WEFT_DTYPE_COUNT] = {
    [WEFT_INT8] = {"int8", 1},         [WEFT_UINT8] = {"uint8", 1},     [WEFT_INT16] = {"int16", 2},
    [WEFT_UINT16] = {"uint16", 2},     [WEFT_INT32] = {"int32", 4},     [WEFT_UINT32] = {"uint32", 4},
    [WEFT_INT64] = {"int64", 8},       [WEFT_UINT64] = {"uint64", 8},   [WEFT_FLOAT16] = {"float16", 2},
    [WEFT_BFLOAT16] = {"bfloat16", 2}, [WEFT_FLOAT32] = {"float32", 4}, [WEFT_FLOAT64] = {"float64", 8},
    [WEFT_BYTE] = {"byte", 1},
};

WEFT_API size_t weft_dtype_size(weft_dtype_t dtype)
{
    WEFT_API_ENTER();
    if ((int)dtype < 0 || dtype >= WEFT_DTYPE_COUNT) return 0;
    return dtypes[dtype].size;
}

WEFT_API const char *weft_dtype_name(weft_dtype_t dtype)
{
    WEFT_API_ENTER();
    if ((int)dtype < 0 || dtype >= WEFT_DTYPE_COUNT) return "unknown";
    return dtypes[dtype].name;
}

int weft_buffer_check(const void *buf, int64_t count, weft_dtype_t dtype, const char *fn, const char *what,
                      size_t *bytes)
{
    size_t esize = weft_dtype_size(dtype);
    if (esize == 0) return weft_error(WEFT_ERR_ARG, "%s: unknown datatype %d for %s", fn, (int)dtype, what);
    if (count < 0) return weft_error(WEFT_ERR_ARG, "%s: negative count %lld for %s", fn, (long long)count, what);
    uint64_t len;
    if (weft_mul_bytes((uint64_t)count, esize, &len))
        return weft_error(WEFT_ERR_ARG, "%s: count %lld of %s overflows the address space for %s", fn, (long long)count,
                          dtypes[dtype].name, what);
    if (buf == NULL && count > 0)
        return weft_error(WEFT_ERR_ARG, "%s: NULL %s with count %lld", fn, what, (long long)count);
    *bytes = (size_t)len;
    return WEFT_SUCCESS;
}
