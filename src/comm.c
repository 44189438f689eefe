/* Communicator objects. The world communicator has context id 0; split
 * and friends arrive with the communicators work. */
#include <stdlib.h>
#include <string.h>

#include "weft_internal.h"

static struct weft_comm_s world_comm;

int weft_comm_world_create(void)
{
    memset(&world_comm, 0, sizeof(world_comm));
    world_comm.magic = WEFT_COMM_MAGIC;
    world_comm.context_id = 0;
    world_comm.rank = weft_g.rank;
    world_comm.size = weft_g.size;
    world_comm.world_ranks = NULL;
    world_comm.timeout = weft_cfg.timeout;
    snprintf(world_comm.name, sizeof(world_comm.name), "world");
    weft_g.world = &world_comm;
    return WEFT_SUCCESS;
}

void weft_comm_world_destroy(void)
{
    world_comm.magic = 0;
    weft_g.world = WEFT_COMM_NULL;
}

int weft_comm_check(weft_comm_t comm, const char *fn)
{
    if (comm == WEFT_COMM_NULL) return weft_error(WEFT_ERR_COMM, "%s: the communicator is WEFT_COMM_NULL", fn);
    if (comm->magic != WEFT_COMM_MAGIC)
        return weft_error(WEFT_ERR_COMM, "%s: %p is not a live communicator (freed, or never created)", fn,
                          (void *)comm);
    return WEFT_SUCCESS;
}

WEFT_API weft_comm_t weft_comm_world(void)
{
    return weft_g.initialized ? weft_g.world : WEFT_COMM_NULL;
}

#define COMM_GETTER_PROLOGUE(fn, out)                                                                           \
    int rc;                                                                                                     \
    WEFT_CHECK_INIT(fn);                                                                                        \
    if ((rc = weft_comm_check(comm, fn))) return rc;                                                            \
    if (!(out)) return weft_error(WEFT_ERR_ARG, "%s: NULL output pointer", fn)

WEFT_API int weft_comm_rank(weft_comm_t comm, int *rank)
{
    COMM_GETTER_PROLOGUE("weft_comm_rank", rank);
    *rank = comm->rank;
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_size(weft_comm_t comm, int *size)
{
    COMM_GETTER_PROLOGUE("weft_comm_size", size);
    *size = comm->size;
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_get_timeout(weft_comm_t comm, double *timeout_s)
{
    COMM_GETTER_PROLOGUE("weft_comm_get_timeout", timeout_s);
    *timeout_s = comm->timeout;
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_set_timeout(weft_comm_t comm, double timeout_s)
{
    int rc;
    WEFT_CHECK_INIT("weft_comm_set_timeout");
    if ((rc = weft_comm_check(comm, "weft_comm_set_timeout"))) return rc;
    if (!(timeout_s >= 0))
        return weft_error(WEFT_ERR_ARG, "weft_comm_set_timeout: timeout %g s is not >= 0 (0 = no deadline)",
                          timeout_s);
    comm->timeout = timeout_s;
    return WEFT_SUCCESS;
}

WEFT_API int weft_local_rank(int *local_rank)
{
    WEFT_CHECK_INIT("weft_local_rank");
    if (!local_rank) return weft_error(WEFT_ERR_ARG, "weft_local_rank: NULL output pointer");
    *local_rank = weft_g.local_rank;
    return WEFT_SUCCESS;
}

WEFT_API int weft_local_size(int *local_size)
{
    WEFT_CHECK_INIT("weft_local_size");
    if (!local_size) return weft_error(WEFT_ERR_ARG, "weft_local_size: NULL output pointer");
    *local_size = weft_g.local_size;
    return WEFT_SUCCESS;
}
