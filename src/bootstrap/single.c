/* A job of one rank: nothing to exchange. */
#include "bootstrap/bootstrap.h"
#include "weft_internal.h"

#include <string.h>

static int single_allgather(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline)
{
    (void)bs;
    (void)deadline;
    if (len) memcpy(recv, send, len);
    return WEFT_SUCCESS;
}

static void single_finalize(weft_bootstrap_t *bs, int graceful, double deadline)
{
    (void)bs;
    (void)graceful;
    (void)deadline;
}

int weft_bootstrap_single_init(weft_bootstrap_t *bs)
{
    bs->name = "single";
    bs->rank = 0;
    bs->size = 1;
    bs->local_rank = 0;
    bs->local_size = 1;
    bs->allgather = single_allgather;
    bs->finalize = single_finalize;
    bs->impl = NULL;
    return WEFT_SUCCESS;
}
