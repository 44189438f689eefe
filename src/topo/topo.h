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

/* ---- RDMA NIC and GID selection (rdma.c) ---------------------------------
 * Which RDMA port (and, on RoCE, which GID index) UCX should use, read from
 * sysfs under a root directory (WEFT_RDMA_FSROOT: "/" on a real host, a
 * synthetic tree in tests). docs/RDMA.md gives the order of preference. */
#define WEFT_RDMA_MAX_GPUS 64

typedef enum weft_rdma_family {
    WEFT_RDMA_FAM_IPV4 = 0,       /* IPv4-mapped ::ffff:a.b.c.d */
    WEFT_RDMA_FAM_IPV6 = 1,       /* any other IPv6 address that is not link-local */
    WEFT_RDMA_FAM_LINK_LOCAL = 2, /* fe80::/10 or IPv4 169.254/16: not routable, never chosen */
} weft_rdma_family_t;

typedef struct weft_rdma_gid {
    int index;
    unsigned char raw[16];
    char addr[48]; /* inet_ntop form */
    weft_rdma_family_t family;
    int version;    /* RoCE version: 1 or 2 from gid_attrs/types/<i>, or inferred (below); 0 unknown */
    int inferred;   /* version guessed from the entry's twin (types/<i> unreadable) */
    int type_errno; /* why types/<i> could not be read (0: it was) */
    char type[24];  /* types/<i> as read ("RoCE v2"), "" when unreadable */
    char ndev[32];  /* gid_attrs/ndevs/<i>, "" when unreadable */
    int on_route;   /* ndev carries the route to MASTER_ADDR */
    int pref;       /* preference class, lower is better; -1 never chosen */
} weft_rdma_gid_t;

enum { WEFT_RDMA_LINK_IB = 0, WEFT_RDMA_LINK_ETH = 1, WEFT_RDMA_LINK_OTHER = 2 };

typedef struct weft_rdma_port {
    char dev[64];
    int port;
    int link; /* WEFT_RDMA_LINK_* (link_layer: InfiniBand, Ethernet = RoCE) */
    char link_text[24];
    int active;
    char state[24];        /* "4: ACTIVE" */
    char pci[16];          /* the device symlink's PCI address */
    char pf_pci[16];       /* an SR-IOV VF's physical function (device/physfn), "" otherwise */
    char netdevs[160];     /* the PCI device's netdevs and the GIDs' ndevs, space separated */
    weft_rdma_gid_t *gids; /* non-empty GID entries, by index */
    int ngids;
    char empty[96];    /* indexes of empty (zero or unreadable) entries, "0-3,8-255" */
    int best;          /* index into gids of the entry this port would use; -1 none */
    int usable;        /* ACTIVE, and InfiniBand or a routable GID */
    int locality;      /* weft_pci_locality_t to the rank's GPU; -1 without one */
    int on_route;      /* one of netdevs carries the route to MASTER_ADDR */
    int near_cpu;      /* hwloc's nearest RDMA NIC to the CPU binding (hosts without GPUs) */
    char verdict[256]; /* why it won or lost */
} weft_rdma_port_t;

typedef enum weft_rdma_outcome {
    WEFT_RDMA_NO_DEVICE = 0,      /* no <root>/sys/class/infiniband, or no device in it */
    WEFT_RDMA_CHOSEN = 1,         /* chosen: ports[chosen] */
    WEFT_RDMA_NO_ACTIVE_PORT = 2, /* devices, but no port is ACTIVE */
    WEFT_RDMA_NO_ROUTABLE_GID = 3 /* active RoCE ports with only link-local or empty GIDs */
} weft_rdma_outcome_t;

typedef struct weft_rdma_input {
    char fsroot[512];      /* "/" or a synthetic tree holding sys/ and proc/ */
    int local_rank;        /* its GPU is GPU local_rank mod ngpus of those hwloc lists, in bus order */
    char master_addr[256]; /* "" when unset */
    int full;              /* also compute locality with one usable port (reports) */
} weft_rdma_input_t;

typedef struct weft_rdma_choice {
    weft_rdma_outcome_t outcome;
    char classdir[600]; /* <root>/sys/class/infiniband, for messages */
    weft_rdma_port_t *ports;
    int nports;
    int chosen;        /* index into ports; -1 unless outcome is CHOSEN */
    int gid_index;     /* UCX_IB_GID_INDEX to use; -1 on InfiniBand or none */
    char gpu[16];      /* the rank's GPU, "" without one */
    int gpu_index;     /* its position among ngpus in bus order */
    int ngpus;         /* GPUs hwloc lists; -1: not looked up (one usable port) */
    char route_if[32]; /* the interface of the route to MASTER_ADDR, "" unknown */
    char route_note[160];
    char why[512]; /* the decision in a sentence (or why there is none) */
} weft_rdma_choice_t;

/* Fills *in for this process: root from WEFT_RDMA_FSROOT, MASTER_ADDR from
 * the environment. select() asks hwloc for the GPUs and their locality when
 * several ports are usable (or full is set): tests load an XML topology. */
void weft_rdma_input_init(weft_rdma_input_t *in, int local_rank);
/* Scans the root and chooses. *out is allocated (free with
 * weft_rdma_choice_free) on success, whatever the outcome. */
int weft_rdma_select(const weft_rdma_input_t *in, weft_rdma_choice_t **out);
void weft_rdma_choice_free(weft_rdma_choice_t *c);
/* Every candidate and why it won or lost, one per line; the first line is
 * the decision, the second ucx_note (what was handed to UCX) when given.
 * Returns 1 when len was too small (the text then ends in "..."). */
int weft_rdma_format(const weft_rdma_choice_t *c, const char *ucx_note, char *buf, size_t len);
/* Hands a choice to UCX through UCX_NET_DEVICES / UCX_IB_GID_INDEX
 * (setenv without overwrite) unless the user set them, UCX_TLS rules the
 * verbs transports out, or this UCX has no verbs module (ucx_has_verbs 0;
 * -1: not known). dry_run: only say what would be done. Writes what was
 * done, or why not, into msg. */
void weft_rdma_apply_choice(const weft_rdma_choice_t *c, int ucx_has_verbs, int dry_run, char *msg, size_t len);
/* At init, before UCX reads its configuration: select and apply, logging
 * the outcome (quiet without RDMA devices). Never fails init. */
void weft_rdma_init(int local_rank, int ucx_has_verbs);
/* At finalize: unset what weft_rdma_init set, if still unchanged. */
void weft_rdma_finalize(void);

#endif
