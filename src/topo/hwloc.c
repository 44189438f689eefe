/* hwloc: what this host looks like. Placement of each rank (NUMA, socket,
 * nearest GPU and NIC) arrives with the communicators work. */
#include <hwloc.h>

#include "weft_internal.h"

int weft_topo_summary(char *buf, size_t len)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0)
        return weft_error(WEFT_ERR_INTERNAL, "hwloc could not load this host's topology");
    int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    int numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    int pkgs = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
    snprintf(buf, len, "%d package%s, %d NUMA node%s, %d core%s, %d hardware thread%s (hwloc %s)", pkgs,
             pkgs == 1 ? "" : "s", numa, numa == 1 ? "" : "s", cores, cores == 1 ? "" : "s", pus, pus == 1 ? "" : "s",
             HWLOC_VERSION);
    hwloc_topology_destroy(topo);
    return WEFT_SUCCESS;
}

WEFT_API int weft_host_topology(char *buf, size_t len)
{
    if (!buf || len == 0) return weft_error(WEFT_ERR_ARG, "weft_host_topology: NULL or empty buffer");
    return weft_topo_summary(buf, len);
}
