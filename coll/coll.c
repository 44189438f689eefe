/* The collective module's entry points. */
#include "coll/coll.h"

static int internal_allgather(weft_comm_t comm, const void *send, void *recv, size_t bytes)
{
    weft_sched_t *s = weft_sched_create(comm, "allgather_bruck");
    if (!s) return weft_error(WEFT_ERR_NO_MEMORY, "allgather: out of memory for a schedule");
    int rc = weft_coll_allgather_bruck_build(s, send, recv, bytes);
    if (rc) {
        weft_sched_discard(s);
        return rc;
    }
    return weft_sched_run(s);
}

static const weft_coll_services_t services = {.allgather = internal_allgather};
const weft_coll_services_t *weft_coll_svc;

int weft_coll_init(void)
{
    weft_coll_svc = &services;
    return WEFT_SUCCESS;
}

void weft_coll_finalize(void)
{
    weft_coll_svc = NULL;
}
