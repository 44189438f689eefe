/* hwloc: what this host looks like, and where this process sits on it:
 * NUMA node, socket, CPU binding, nearest GPU and NIC. The topology used for
 * placement is loaded once per process with its I/O devices (PCI and OS
 * devices) and kept until weft_topo_release(). */
#include "topo/topo.h"
#include "weft_internal.h"

#include <errno.h>
#include <hwloc.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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
    WEFT_API_ENTER();
    if (!buf || len == 0) return weft_error(WEFT_ERR_ARG, "weft_host_topology: NULL or empty buffer");
    return weft_topo_summary(buf, len);
}

/* ---- the cached topology ---------------------------------------------- */

/* Guards topo_cached and every use of it, so a test hook or a release cannot
 * pull the topology from under a query in another thread. */
static pthread_mutex_t topo_lock = PTHREAD_MUTEX_INITIALIZER;
static hwloc_topology_t topo_cached;

enum topo_source { TOPO_HOST, TOPO_XML, TOPO_SYNTHETIC };

/* Builds a topology with its I/O devices from this host (or whatever
 * HWLOC_XMLFILE / HWLOC_SYNTHETIC name: hwloc honours them itself), an XML
 * file or a synthetic description. *out is set only on success. */
static int topo_build(enum topo_source src, const char *arg, hwloc_topology_t *out)
{
    hwloc_topology_t t;
    int rc = WEFT_SUCCESS;
    if (hwloc_topology_init(&t) != 0) return weft_error(WEFT_ERR_NO_MEMORY, "hwloc_topology_init failed");
    /* Without this filter an XML file's PCI and OS devices are dropped too. */
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    switch (src) {
    case TOPO_HOST:
        /* The GL backend connects to X displays; the GPUs it would report are
         * named by the CUDA/NVML/RSMI/OpenCL backends already. */
        hwloc_topology_set_components(t, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "gl");
        break;
    case TOPO_XML:
        if (hwloc_topology_set_xml(t, arg) != 0) {
            rc = weft_error(WEFT_ERR_ARG, "hwloc cannot use the XML topology '%s': %s", arg, strerror(errno));
            goto fail;
        }
        break;
    case TOPO_SYNTHETIC:
        if (hwloc_topology_set_synthetic(t, arg) != 0) {
            rc = weft_error(WEFT_ERR_ARG, "hwloc rejects the synthetic topology '%s'", arg);
            goto fail;
        }
        break;
    }
    if (hwloc_topology_load(t) != 0) {
        if (src == TOPO_HOST)
            rc = weft_error(WEFT_ERR_INTERNAL, "hwloc could not load this host's topology: %s", strerror(errno));
        else
            rc = weft_error(WEFT_ERR_ARG, "hwloc could not load the topology '%s': %s", arg, strerror(errno));
        goto fail;
    }
    *out = t;
    return WEFT_SUCCESS;
fail:
    hwloc_topology_destroy(t);
    return rc;
}

/* Caller holds topo_lock. */
static int topo_get_locked(hwloc_topology_t *out)
{
    if (!topo_cached) {
        int rc = topo_build(TOPO_HOST, NULL, &topo_cached);
        if (rc != WEFT_SUCCESS) return rc;
    }
    *out = topo_cached;
    return WEFT_SUCCESS;
}

static int topo_replace(enum topo_source src, const char *arg, const char *fn)
{
    hwloc_topology_t t, old;
    if (!arg) return weft_error(WEFT_ERR_ARG, "%s: NULL argument", fn);
    int rc = topo_build(src, arg, &t);
    if (rc != WEFT_SUCCESS) return rc;
    pthread_mutex_lock(&topo_lock);
    old = topo_cached;
    topo_cached = t;
    pthread_mutex_unlock(&topo_lock);
    if (old) hwloc_topology_destroy(old);
    return WEFT_SUCCESS;
}

int weft_topo_load_xml(const char *path)
{
    return topo_replace(TOPO_XML, path, "weft_topo_load_xml");
}

int weft_topo_load_synthetic(const char *description)
{
    return topo_replace(TOPO_SYNTHETIC, description, "weft_topo_load_synthetic");
}

void weft_topo_release(void)
{
    pthread_mutex_lock(&topo_lock);
    hwloc_topology_t old = topo_cached;
    topo_cached = NULL;
    pthread_mutex_unlock(&topo_lock);
    if (old) hwloc_topology_destroy(old);
}

/* ---- placement ---------------------------------------------------------- */

/* The process's binding (all its threads together: a rank whose OpenMP
 * threads are pinned one per core is placed on the union), restricted to the
 * PUs the topology has. When hwloc cannot read it (not supported, or the
 * topology is an XML/synthetic one and not this machine), the allowed set. */
static int read_binding(hwloc_topology_t t, hwloc_bitmap_t set)
{
    const struct hwloc_topology_support *sup = hwloc_topology_get_support(t);
    int ok = 0;
    if (sup->cpubind->get_thisproc_cpubind) ok = hwloc_get_cpubind(t, set, HWLOC_CPUBIND_PROCESS) == 0;
    if (!ok && sup->cpubind->get_thisthread_cpubind) ok = hwloc_get_cpubind(t, set, HWLOC_CPUBIND_THREAD) == 0;
    if (ok && hwloc_bitmap_and(set, set, hwloc_topology_get_topology_cpuset(t)) != 0)
        return weft_error(WEFT_ERR_NO_MEMORY, "hwloc_bitmap_and failed");
    if (!ok || hwloc_bitmap_iszero(set)) {
        weft_debug("topo: CPU binding %s; placing on the allowed cpuset", ok ? "outside the topology" : "unreadable");
        if (hwloc_bitmap_copy(set, hwloc_topology_get_allowed_cpuset(t)) != 0)
            return weft_error(WEFT_ERR_NO_MEMORY, "hwloc_bitmap_copy failed");
        if (hwloc_bitmap_iszero(set)) return weft_error(WEFT_ERR_INTERNAL, "hwloc reports no usable PU on this host");
    }
    return WEFT_SUCCESS;
}

/* hwloc's list string ("0-3,8"). A set too long for buf (scattered PUs on a
 * large host) is cut after its last whole element and ends in ",...". */
static void format_cpuset(char *buf, size_t len, hwloc_const_bitmap_t set)
{
    int n = hwloc_bitmap_list_snprintf(buf, len, set);
    if (n < 0) {
        buf[0] = '\0';
        return;
    }
    if ((size_t)n < len) return;
    char *cut = NULL;
    for (char *c = buf; *c && c + sizeof(",...") <= buf + len; c++)
        if (*c == ',') cut = c;
    if (cut)
        memcpy(cut, ",...", sizeof(",..."));
    else
        snprintf(buf, len, "...");
}

/* Special memory (HBM, MCDRAM, NVM, CXL, GPU memory) carries a subtype. */
static int numa_is_ordinary(hwloc_obj_t n)
{
    return !n->subtype || !strcmp(n->subtype, "DRAM");
}

/* The NUMA node whose cpuset contains the whole binding. Several can (DRAM
 * and HBM/CXL nodes local to the same cores): the smallest cpuset wins, then
 * ordinary memory, then the lowest OS index. NULL when the binding spans
 * nodes (or the topology has none). */
static hwloc_obj_t containing_numa(hwloc_topology_t t, hwloc_const_bitmap_t set)
{
    hwloc_obj_t n = NULL, best = NULL;
    while ((n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, n))) {
        if (!n->cpuset || !hwloc_bitmap_isincluded(set, n->cpuset)) continue;
        if (!best) {
            best = n;
            continue;
        }
        int wn = hwloc_bitmap_weight(n->cpuset), wb = hwloc_bitmap_weight(best->cpuset);
        if (wn != wb) {
            if (wn < wb) best = n;
        } else if (numa_is_ordinary(n) != numa_is_ordinary(best)) {
            if (numa_is_ordinary(n)) best = n;
        } else if (n->os_index < best->os_index) {
            best = n;
        }
    }
    return best;
}

/* Packages do not overlap: at most one contains the binding. */
static hwloc_obj_t containing_package(hwloc_topology_t t, hwloc_const_bitmap_t set)
{
    hwloc_obj_t p = NULL;
    while ((p = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PACKAGE, p)))
        if (p->cpuset && hwloc_bitmap_isincluded(set, p->cpuset)) return p;
    return NULL;
}

/* GPU kinds, best first (-1: not a GPU). Several OS devices name one GPU
 * (cuda0, nvml0, opencl0d0 on the same PCI device); the handle a compute
 * runtime uses wins: CUDA, ROCm SMI, Level Zero; then NVML; then OpenCL and
 * other co-processors; then display devices (Linux DRM card*, GL screens). */
static int gpu_kind(hwloc_obj_t o)
{
    const char *sub = o->subtype ? o->subtype : "";
    switch (o->attr->osdev.type) {
    case HWLOC_OBJ_OSDEV_COPROC: return (!strcmp(sub, "CUDA") || !strcmp(sub, "LevelZero")) ? 0 : 2;
    case HWLOC_OBJ_OSDEV_GPU:
        if (!strcmp(sub, "RSMI")) return 0;
        if (!strcmp(sub, "NVML")) return 1;
        return 3;
    default: return -1;
    }
}

/* NIC kinds: RDMA (OpenFabrics: mlx5_0, hfi1_0, ...) before IP (eth0, ib0). */
static int nic_kind(hwloc_obj_t o)
{
    switch (o->attr->osdev.type) {
    case HWLOC_OBJ_OSDEV_OPENFABRICS: return 0;
    case HWLOC_OBJ_OSDEV_NETWORK: return strcmp(o->name, "lo") ? 1 : -1;
    default: return -1;
    }
}

typedef struct {
    int intersects;   /* the device's non-I/O ancestor shares PUs with the binding */
    int common_depth; /* depth of the common ancestor with the binding's covering object (when not intersecting) */
    int weight;       /* PUs of the device's non-I/O ancestor: fewer = attached closer */
} device_score_t;

static int device_better(const device_score_t *a, const char *an, const device_score_t *b, const char *bn)
{
    if (a->intersects != b->intersects) return a->intersects > b->intersects;
    if (a->common_depth != b->common_depth) return a->common_depth > b->common_depth;
    if (a->weight != b->weight) return a->weight < b->weight;
    return strverscmp(an, bn) < 0;
}

/* The nearest OS device of a kind to the binding `set`:
 *  1. only devices of the best kind found anywhere on the host count (a host
 *     with CUDA names its GPUs cuda*, one with RDMA NICs mlx5_*), so all
 *     ranks of a node report the same naming;
 *  2. devices whose non-I/O ancestor (the package, NUMA group or machine the
 *     PCI tree hangs from) intersects the binding come first; among them the
 *     one with the smallest ancestor cpuset, i.e. attached closest;
 *  3. when none intersects (the binding's socket has no such device), the
 *     device whose ancestor has the deepest common ancestor with the smallest
 *     object covering the binding (same group of sockets before another),
 *     then again the smallest ancestor cpuset;
 *  4. remaining ties by name in natural order (cuda2 before cuda10).
 * An unbound process therefore gets the first device by name among those
 * attached to a package (or equally close). NULL when the host has none. */
static hwloc_obj_t nearest_osdev(hwloc_topology_t t, hwloc_const_bitmap_t set, int (*kind)(hwloc_obj_t))
{
    hwloc_obj_t o = NULL, best = NULL, root = hwloc_get_root_obj(t);
    int best_kind = INT_MAX;
    while ((o = hwloc_get_next_osdev(t, o))) {
        if (!o->name) continue;
        int k = kind(o);
        if (k >= 0 && k < best_kind) best_kind = k;
    }
    if (best_kind == INT_MAX) return NULL;

    hwloc_obj_t cover = hwloc_get_obj_covering_cpuset(t, set);
    if (!cover) cover = root;
    device_score_t best_score = {0, 0, 0};
    while ((o = hwloc_get_next_osdev(t, o))) {
        if (!o->name || kind(o) != best_kind) continue;
        hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, o);
        if (!anc || !anc->cpuset) anc = root;
        device_score_t s;
        s.intersects = hwloc_bitmap_intersects(anc->cpuset, set);
        s.common_depth = s.intersects ? 0 : (int)hwloc_get_common_ancestor_obj(t, anc, cover)->depth;
        s.weight = hwloc_bitmap_weight(anc->cpuset);
        if (s.weight < 0) s.weight = INT_MAX;
        if (!best || device_better(&s, o->name, &best_score, best->name)) {
            best = o;
            best_score = s;
        }
    }
    return best;
}

/* Bus id of the PCI device an OS device belongs to ("" when not on PCI).
 * Sub-devices (Level Zero ze0.0) hang under their device's OS object. */
static void osdev_pci_busid(hwloc_obj_t o, char *buf, size_t len)
{
    hwloc_obj_t p = o->parent;
    while (p && p->type == HWLOC_OBJ_OS_DEVICE)
        p = p->parent;
    buf[0] = '\0';
    if (p && p->type == HWLOC_OBJ_PCI_DEVICE)
        snprintf(buf, len, "%04x:%02x:%02x.%01x", (unsigned)p->attr->pcidev.domain, (unsigned)p->attr->pcidev.bus,
                 (unsigned)p->attr->pcidev.dev, (unsigned)p->attr->pcidev.func);
}

/* `set` is non-empty and within the topology. */
static void placement_compute(hwloc_topology_t t, hwloc_const_bitmap_t set, weft_placement_t *out)
{
    memset(out, 0, sizeof(*out));
    hwloc_obj_t numa = containing_numa(t, set), pkg = containing_package(t, set);
    out->numa = numa ? (int)numa->os_index : -1;
    out->socket = pkg ? (int)pkg->logical_index : -1;
    out->ncpus = hwloc_bitmap_weight(set);
    format_cpuset(out->cpuset, sizeof(out->cpuset), set);
    hwloc_obj_t gpu = nearest_osdev(t, set, gpu_kind);
    if (gpu) {
        snprintf(out->gpu, sizeof(out->gpu), "%s", gpu->name);
        osdev_pci_busid(gpu, out->gpu_pci, sizeof(out->gpu_pci));
    }
    hwloc_obj_t nic = nearest_osdev(t, set, nic_kind);
    if (nic) {
        snprintf(out->nic, sizeof(out->nic), "%s", nic->name);
        osdev_pci_busid(nic, out->nic_pci, sizeof(out->nic_pci));
    }
}

int weft_topo_placement(weft_placement_t *out)
{
    hwloc_topology_t t;
    hwloc_bitmap_t set = NULL;
    int rc;
    if (!out) return weft_error(WEFT_ERR_ARG, "weft_topo_placement: NULL output");
    pthread_mutex_lock(&topo_lock);
    WEFT_CHECK_GOTO(topo_get_locked(&t), rc, done);
    if (!(set = hwloc_bitmap_alloc())) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_topo_placement: hwloc_bitmap_alloc failed");
        goto done;
    }
    WEFT_CHECK_GOTO(read_binding(t, set), rc, done);
    placement_compute(t, set, out);
done:
    pthread_mutex_unlock(&topo_lock);
    hwloc_bitmap_free(set);
    return rc;
}

int weft_topo_placement_for_cpuset(hwloc_const_bitmap_t set, weft_placement_t *out)
{
    hwloc_topology_t t;
    hwloc_bitmap_t mine = NULL;
    int rc;
    if (!set || !out) return weft_error(WEFT_ERR_ARG, "weft_topo_placement_for_cpuset: NULL argument");
    pthread_mutex_lock(&topo_lock);
    WEFT_CHECK_GOTO(topo_get_locked(&t), rc, done);
    if (!(mine = hwloc_bitmap_alloc()) || hwloc_bitmap_and(mine, set, hwloc_topology_get_topology_cpuset(t)) != 0) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_topo_placement_for_cpuset: hwloc bitmap allocation failed");
        goto done;
    }
    if (hwloc_bitmap_iszero(mine)) {
        char list[64];
        hwloc_bitmap_list_snprintf(list, sizeof(list), set);
        rc = weft_error(WEFT_ERR_ARG, "weft_topo_placement_for_cpuset: cpuset '%s' has no PU of this topology", list);
        goto done;
    }
    placement_compute(t, mine, out);
    rc = WEFT_SUCCESS;
done:
    pthread_mutex_unlock(&topo_lock);
    hwloc_bitmap_free(mine);
    return rc;
}

/* ---- PCI locality --------------------------------------------------------- */

static int busid_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* The GPUs (the OS devices of the best GPU kind, as placement names them)
 * with a PCI bus id, one per PCI device, sorted by bus id: the order of
 * CUDA_DEVICE_ORDER=PCI_BUS_ID and nvidia-smi, in which local rank i
 * conventionally drives GPU i. */
int weft_topo_gpus(char (*busids)[16], int max, int *count)
{
    hwloc_topology_t t;
    int rc, n = 0;
    if (!busids || max < 0 || !count) return weft_error(WEFT_ERR_ARG, "weft_topo_gpus: NULL argument");
    pthread_mutex_lock(&topo_lock);
    WEFT_CHECK_GOTO(topo_get_locked(&t), rc, done);
    int best_kind = INT_MAX;
    hwloc_obj_t o = NULL;
    while ((o = hwloc_get_next_osdev(t, o))) {
        int k = o->name ? gpu_kind(o) : -1;
        if (k >= 0 && k < best_kind) best_kind = k;
    }
    while (best_kind != INT_MAX && (o = hwloc_get_next_osdev(t, o))) {
        char id[16];
        if (!o->name || gpu_kind(o) != best_kind) continue;
        osdev_pci_busid(o, id, sizeof(id));
        int seen = !id[0];
        for (int i = 0; i < n && i < max && !seen; i++)
            seen = !strcmp(busids[i], id);
        if (seen) continue;
        if (n < max) memcpy(busids[n], id, sizeof(id));
        n++;
    }
    if (n > max) {
        weft_debug("topo: %d GPUs, only the first %d by hwloc order are considered", n, max);
        n = max;
    }
    /* Bus ids are fixed-width lowercase hex, so string order is bus order. */
    qsort(busids, (size_t)n, sizeof(busids[0]), busid_cmp);
    *count = n;
    rc = WEFT_SUCCESS;
done:
    pthread_mutex_unlock(&topo_lock);
    return rc;
}

const char *weft_pci_locality_name(weft_pci_locality_t l)
{
    switch (l) {
    case WEFT_PCI_SAME_SWITCH: return "same PCIe switch";
    case WEFT_PCI_SAME_HOST_BRIDGE: return "same host bridge";
    case WEFT_PCI_SAME_SOCKET: return "same socket";
    case WEFT_PCI_OTHER_SOCKET: return "other socket";
    case WEFT_PCI_UNKNOWN: break;
    }
    return "unknown";
}

/* hwloc's common-ancestor helper works on depths, which I/O objects do not
 * have in a comparable form: walk a's parents, then b's until one is shared. */
static hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b)
{
    for (hwloc_obj_t y = b; y; y = y->parent)
        for (hwloc_obj_t x = a; x; x = x->parent)
            if (x == y) return x;
    return NULL;
}

/* How close two PCI devices ("0000:5e:00.0") are: below one PCIe switch,
 * one host bridge, one socket (package or NUMA node), or on different
 * sockets; unknown when the topology lacks either. Like NCCL's PIX/PXB,
 * PHB, NODE and SYS classes, so the nearest NIC of a GPU is the one whose
 * traffic crosses the fewest links. */
int weft_topo_pci_locality(const char *a, const char *b, weft_pci_locality_t *out)
{
    hwloc_topology_t t;
    int rc;
    if (!a || !b || !out) return weft_error(WEFT_ERR_ARG, "weft_topo_pci_locality: NULL argument");
    *out = WEFT_PCI_UNKNOWN;
    pthread_mutex_lock(&topo_lock);
    WEFT_CHECK_GOTO(topo_get_locked(&t), rc, done);
    hwloc_obj_t x = hwloc_get_pcidev_by_busidstring(t, a), y = hwloc_get_pcidev_by_busidstring(t, b);
    hwloc_obj_t c = x && y ? common_ancestor(x, y) : NULL;
    if (!c) goto done;
    if (c->type == HWLOC_OBJ_PCI_DEVICE)
        *out = WEFT_PCI_SAME_SWITCH; /* functions of one device */
    else if (c->type == HWLOC_OBJ_BRIDGE)
        *out = c->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI ? WEFT_PCI_SAME_SWITCH : WEFT_PCI_SAME_HOST_BRIDGE;
    else if (c->cpuset && hwloc_get_nbobjs_inside_cpuset_by_type(t, c->cpuset, HWLOC_OBJ_PACKAGE) <= 1)
        *out = WEFT_PCI_SAME_SOCKET;
    else
        *out = WEFT_PCI_OTHER_SOCKET;
done:
    pthread_mutex_unlock(&topo_lock);
    return rc;
}

/* "-" stands for "none" / "spans several"; fields are read with their
 * sizes as bounds, so a placement with unterminated strings cannot overrun. */
void weft_topo_placement_format(const weft_placement_t *p, char *buf, size_t len)
{
    char numa[12] = "-", sock[12] = "-", gpu[64] = "-", nic[64] = "-";
    if (!buf || len == 0) return;
    if (!p) {
        buf[0] = '\0';
        return;
    }
    if (p->numa >= 0) snprintf(numa, sizeof(numa), "%d", p->numa);
    if (p->socket >= 0) snprintf(sock, sizeof(sock), "%d", p->socket);
    if (p->gpu[0])
        snprintf(gpu, sizeof(gpu), p->gpu_pci[0] ? "%.*s [%.*s]" : "%.*s%.*s", (int)sizeof(p->gpu), p->gpu,
                 (int)sizeof(p->gpu_pci), p->gpu_pci);
    if (p->nic[0])
        snprintf(nic, sizeof(nic), p->nic_pci[0] ? "%.*s [%.*s]" : "%.*s%.*s", (int)sizeof(p->nic), p->nic,
                 (int)sizeof(p->nic_pci), p->nic_pci);
    snprintf(buf, len, "numa %s socket %s cpus %.*s (%d) gpu %s nic %s", numa, sock, (int)sizeof(p->cpuset),
             p->cpuset[0] ? p->cpuset : "-", p->ncpus, gpu, nic);
}

WEFT_API int weft_placement(char *buf, size_t len)
{
    WEFT_API_ENTER();
    weft_placement_t p;
    if (!buf || len == 0) return weft_error(WEFT_ERR_ARG, "weft_placement: NULL or empty buffer");
    int rc = weft_topo_placement(&p);
    if (rc) return rc;
    weft_topo_placement_format(&p, buf, len);
    return WEFT_SUCCESS;
}
