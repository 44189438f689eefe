/* Where this process sits on its host: NUMA node, socket, CPU binding, and
 * the nearest GPU and NIC, from hwloc (topo/hwloc.c). Internal, not installed. */
#ifndef WEFT_TOPO_H
#define WEFT_TOPO_H

#include <hwloc.h>
#include <stddef.h>

typedef struct weft_placement {
    int numa;         /* OS index of the NUMA node that contains the whole binding; -1 if it spans several */
    int socket;       /* logical index of the package (socket) containing the whole binding; -1 if it spans several */
    int ncpus;        /* number of PUs in the binding */
    char cpuset[64];  /* the binding as a list string, e.g. "0-3,8"; ends in ",..." when it did not fit */
    char gpu[32];     /* nearest GPU OS device name (e.g. "cuda0", "rsmi0", "nvml0"), "" when none */
    char gpu_pci[16]; /* its PCI bus id "0000:3b:00.0", "" when unknown */
    char nic[32];     /* nearest NIC: RDMA ("mlx5_0") if the host has any, else Ethernet ("eth0"); "" when none */
    char nic_pci[16];
} weft_placement_t;

/* Fills *out for the calling process. The binding is the process's CPU
 * binding (hwloc_get_cpubind, all threads together), restricted to the PUs
 * hwloc knows; when it cannot be read (or the topology is not this
 * machine's, e.g. HWLOC_XMLFILE / HWLOC_SYNTHETIC), the process's allowed
 * cpuset. The topology is loaded on first use and cached. */
int weft_topo_placement(weft_placement_t *out);

/* Renders a placement on one line, e.g.
 *   "numa 0 socket 0 cpus 0-3 (4) gpu cuda0 [0000:3b:00.0] nic mlx5_0 [0000:5e:00.0]"
 * numa/socket -1 print as "-", a missing device as "-" without a bus id.
 * Always NUL-terminated within len (truncated if needed); nothing when len is 0. */
void weft_topo_placement_format(const weft_placement_t *p, char *buf, size_t len);

/* Destroys the cached topology (at finalize). The next query loads this
 * host's topology again. Safe to call when nothing is loaded. */
void weft_topo_release(void);

/* ---- test hooks ---------------------------------------------------------
 * Replace the cached topology with one read from an hwloc XML file or built
 * from a synthetic description ("pack:2 numa:1 core:4 pu:1"), I/O devices
 * included. Such a topology is not this machine's: hwloc cannot read a
 * binding against it, so weft_topo_placement() reports the whole allowed
 * set; use weft_topo_placement_for_cpuset() to place a given binding. On
 * failure the previous topology stays. weft_topo_release() goes back to
 * this host. */
int weft_topo_load_xml(const char *path);
int weft_topo_load_synthetic(const char *description);
/* Placement of an explicit binding `set` (PU OS indexes) on the cached
 * topology; PUs the topology lacks are ignored, and a set with none of its
 * PUs is WEFT_ERR_ARG. */
int weft_topo_placement_for_cpuset(hwloc_const_bitmap_t set, weft_placement_t *out);

/* ---- PCI locality (hwloc.c) ---------------------------------------------- */
/* How close two PCI devices are, closest first. */
typedef enum weft_pci_locality {
    WEFT_PCI_SAME_SWITCH = 0,      /* below one PCIe switch (or functions of one device) */
    WEFT_PCI_SAME_HOST_BRIDGE = 1, /* different switches or root ports of one host bridge */
    WEFT_PCI_SAME_SOCKET = 2,      /* different host bridges of one package */
    WEFT_PCI_OTHER_SOCKET = 3,     /* across the inter-socket link */
    WEFT_PCI_UNKNOWN = 4           /* the topology lacks one of them */
} weft_pci_locality_t;
const char *weft_pci_locality_name(weft_pci_locality_t l);
/* Locality of two PCI bus ids ("0000:5e:00.0") on the cached topology. */
int weft_topo_pci_locality(const char *a, const char *b, weft_pci_locality_t *out);
/* PCI bus ids of the host's GPUs (the kind placement reports), sorted by
 * bus id; at most max are written, *count says how many. */
int weft_topo_gpus(char (*busids)[16], int max, int *count);

#endif
