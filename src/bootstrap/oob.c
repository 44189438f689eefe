/* Bootstrap from a host code's own allgather (MPI_Allgather, a store).
 * weft cannot put a deadline on the host's callback: it is the host's. */
#include "bootstrap/bootstrap.h"
#include "weft_internal.h"

typedef struct {
    weft_oob_allgather_fn fn;
    void *ctx;
} oob_t;

static oob_t g_oob;

static int oob_allgather(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline)
{
    oob_t *oob = bs->impl;
    (void)deadline;
    int ret = oob->fn(send, recv, len, oob->ctx);
    if (ret != 0)
        return weft_error(WEFT_ERR_BOOTSTRAP, "the out-of-band allgather callback failed with %d (rank %d, %zu bytes)",
                          ret, bs->rank, len);
    return WEFT_SUCCESS;
}

static void oob_finalize(weft_bootstrap_t *bs, int graceful, double deadline)
{
    (void)graceful;
    (void)deadline;
    bs->impl = NULL;
}

int weft_bootstrap_oob_init(weft_bootstrap_t *bs, int rank, int size, weft_oob_allgather_fn fn, void *ctx)
{
    if (!fn) return weft_error(WEFT_ERR_ARG, "weft_init_oob: NULL allgather callback");
    if (size < 1) return weft_error(WEFT_ERR_ARG, "weft_init_oob: size %d is not >= 1", size);
    if (rank < 0 || rank >= size)
        return weft_error(WEFT_ERR_ARG, "weft_init_oob: rank %d out of range 0..%d", rank, size - 1);
    g_oob.fn = fn;
    g_oob.ctx = ctx;
    bs->name = "oob";
    bs->rank = rank;
    bs->size = size;
    bs->local_rank = -1;
    bs->local_size = -1;
    bs->allgather = oob_allgather;
    bs->finalize = oob_finalize;
    bs->impl = &g_oob;
    return WEFT_SUCCESS;
}
