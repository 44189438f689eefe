/* RDMA port and GID selection (src/topo/rdma.c) on synthetic sysfs trees
 * modelled on real layouts: what the kernel shows under
 * /sys/class/infiniband (a class symlink into /sys/devices/<pci>/infiniband,
 * a device symlink back to the PCI function, ports/<p>/{state, link_layer,
 * gids/<i>, gid_attrs/{types,ndevs}/<i>}) and /proc/net/route. This machine
 * has no RDMA device and no soft-RoCE module, so these trees are the only
 * RDMA hosts the tests see.
 *
 * sysfs answers EINVAL when the type or netdev of an empty GID entry is read
 * (and in some SR-IOV / macvlan pods for valid entries too). A regular file
 * cannot fail a read that way, and root reads any mode, so an unreadable
 * attribute is modelled as a directory: read() fails with EISDIR, and the
 * reader treats every read error alike ("type unknown").
 *
 * Each Criterion test runs in its own process: environment variables, the
 * cached topology and what init set do not leak between tests. */
#include "topo/topo.h"
#include "weft.h"
#include "weft_internal.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- building trees ------------------------------------------------------- */

static char root[256];

static void mkdirs(const char *path)
{
    char tmp[1024];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0755);
            *p = '/';
        }
    cr_assert(mkdir(tmp, 0755) == 0 || errno == EEXIST, "mkdir %s: %s", tmp, strerror(errno));
}

static void parent_dirs(const char *path)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    cr_assert_not_null(slash);
    *slash = '\0';
    mkdirs(dir);
}

/* root/rel, rel formatted from fmt. */
static void at_root(char *path, size_t len, const char *fmt, va_list ap)
{
    char rel[512];
    vsnprintf(rel, sizeof(rel), fmt, ap);
    snprintf(path, len, "%s/%s", root, rel);
}

/* Writes "text\n" at root/rel (sysfs attributes end in a newline). */
static void put(const char *text, const char *fmt, ...)
{
    char path[1024];
    va_list ap;
    va_start(ap, fmt);
    at_root(path, sizeof(path), fmt, ap);
    va_end(ap);
    parent_dirs(path);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "fopen %s: %s", path, strerror(errno));
    fprintf(f, "%s\n", text);
    fclose(f);
}

/* An attribute whose read fails (see the file comment). */
static void unreadable(const char *fmt, ...)
{
    char path[1024];
    va_list ap;
    va_start(ap, fmt);
    at_root(path, sizeof(path), fmt, ap);
    va_end(ap);
    mkdirs(path);
}

static void link_at(const char *target, const char *fmt, ...)
{
    char path[1024];
    va_list ap;
    va_start(ap, fmt);
    at_root(path, sizeof(path), fmt, ap);
    va_end(ap);
    parent_dirs(path);
    cr_assert_eq(symlink(target, path), 0, "symlink %s -> %s: %s", path, target, strerror(errno));
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void tree_new(void)
{
    snprintf(root, sizeof(root), "/tmp/weft-rdma-XXXXXX");
    cr_assert_not_null(mkdtemp(root));
    /* the variables are read by weft_config_load (as weft_init does) */
    setenv("WEFT_RDMA_FSROOT", root, 1);
    unsetenv("MASTER_ADDR");
    unsetenv("UCX_NET_DEVICES");
    unsetenv("UCX_IB_GID_INDEX");
    unsetenv("UCX_TLS");
    unsetenv("LOCAL_RANK");
    unsetenv("HWLOC_XMLFILE");
    unsetenv("HWLOC_SYNTHETIC");
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
}

static void tree_free(void)
{
    if (root[0]) nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* An RDMA device as the kernel lays it out: the PCI function under
 * /sys/devices with its netdevs, the device's directory under it, and the
 * class link. netdev may be NULL (a pod sees no PF netdev in its namespace). */
static void nic(const char *dev, const char *pci, const char *netdev)
{
    char devpath[256];
    snprintf(devpath, sizeof(devpath), "sys/devices/pci0000:00/%s", pci);
    put("0", "%s/numa_node", devpath);
    if (netdev) unreadable("%s/net/%s", devpath, netdev); /* a directory, as in sysfs */
    char target[512];
    snprintf(target, sizeof(target), "../../devices/pci0000:00/%s/infiniband/%s", pci, dev);
    unreadable("%s/infiniband/%s", devpath, dev);
    link_at(target, "sys/class/infiniband/%s", dev);
    snprintf(target, sizeof(target), "../../../%s", pci);
    link_at(target, "%s/infiniband/%s/device", devpath, dev);
}

static void port(const char *dev, int p, const char *state, const char *link_layer)
{
    put(state, "sys/class/infiniband/%s/ports/%d/state", dev, p);
    put(link_layer, "sys/class/infiniband/%s/ports/%d/link_layer", dev, p);
    unreadable("sys/class/infiniband/%s/ports/%d/gids", dev, p);
}

/* GID entry i; type / ndev NULL: unreadable. */
static void gid(const char *dev, int p, int i, const char *gid_text, const char *type, const char *ndev)
{
    put(gid_text, "sys/class/infiniband/%s/ports/%d/gids/%d", dev, p, i);
    if (type)
        put(type, "sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d", dev, p, i);
    else
        unreadable("sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d", dev, p, i);
    if (ndev)
        put(ndev, "sys/class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", dev, p, i);
    else
        unreadable("sys/class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", dev, p, i);
}

#define ZERO_GID "0000:0000:0000:0000:0000:0000:0000:0000"
#define V1       "IB/RoCE v1"
#define V2       "RoCE v2"

/* Empty entries from..to: a zero GID whose type and netdev read EINVAL. */
static void empty(const char *dev, int p, int from, int to)
{
    for (int i = from; i <= to; i++)
        gid(dev, p, i, ZERO_GID, NULL, NULL);
}

/* The text of an IPv4 address as sysfs prints its IPv4-mapped GID. */
static const char *mapped(const char *ipv4, char *buf, size_t len)
{
    struct in_addr a;
    cr_assert_eq(inet_pton(AF_INET, ipv4, &a), 1);
    const unsigned char *b = (const unsigned char *)&a.s_addr;
    snprintf(buf, len, "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3]);
    return buf;
}

/* A route as /proc/net/route prints it (the network-order words as host
 * integers, %08X); header written with the first route. */
static void route(const char *iface, const char *dest, const char *mask, const char *gw, int metric)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/proc/net/route", root);
    parent_dirs(path);
    int fresh = access(path, F_OK) != 0;
    FILE *f = fopen(path, "a");
    cr_assert_not_null(f);
    if (fresh) fprintf(f, "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n");
    struct in_addr d, m, g;
    inet_pton(AF_INET, dest, &d);
    inet_pton(AF_INET, mask, &m);
    inet_pton(AF_INET, gw, &g);
    fprintf(f, "%s\t%08X\t%08X\t%04X\t0\t0\t%d\t%08X\t0\t0\t0\n", iface, d.s_addr, g.s_addr, g.s_addr ? 3 : 1, metric,
            m.s_addr);
    fclose(f);
}

/* ---- running the selection -------------------------------------------------- */

static weft_rdma_choice_t *select_for(int local_rank)
{
    weft_rdma_input_t in;
    weft_rdma_choice_t *c = NULL;
    weft_rdma_input_init(&in, local_rank);
    in.full = 1;
    cr_assert_eq(weft_rdma_select(&in, &c), WEFT_SUCCESS, "select: %s", weft_last_error());
    cr_assert_not_null(c);
    return c;
}

static char report[1 << 16];

static const char *format(const weft_rdma_choice_t *c)
{
    cr_assert_eq(weft_rdma_format(c, NULL, report, sizeof(report)), 0, "report truncated");
    if (getenv("WEFT_TEST_RDMA_SHOW")) fputs(report, stderr); /* to read the reports of every case */
    return report;
}

/* The report's line for entry `index` of dev:port ("-" for a port line). */
static const char *line_of(const char *text, const char *devport, const char *index)
{
    static char line[1024];
    for (const char *s = text; s && *s;) {
        const char *e = strchr(s, '\n');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        char a[64], b[64];
        if (sscanf(s, " %63s %63s", a, b) == 2 && !strcmp(a, devport) && !strcmp(b, index)) {
            snprintf(line, sizeof(line), "%.*s", (int)n, s);
            return line;
        }
        s = e ? e + 1 : NULL;
    }
    cr_assert_fail("no line for %s %s in:\n%s", devport, index, text);
    return NULL;
}

static void expect_chosen(const weft_rdma_choice_t *c, const char *dev, int p, int gid_index)
{
    cr_assert_eq(c->outcome, WEFT_RDMA_CHOSEN, "outcome %d: %s", c->outcome, c->why);
    cr_assert_geq(c->chosen, 0);
    const weft_rdma_port_t *w = &c->ports[c->chosen];
    cr_expect_str_eq(w->dev, dev, "chose %s:%d gid %d (%s), want %s:%d gid %d", w->dev, w->port, c->gid_index, c->why,
                     dev, p, gid_index);
    cr_expect_eq(w->port, p);
    cr_expect_eq(c->gid_index, gid_index, "gid %d, want %d: %s", c->gid_index, gid_index, c->why);
}

/* stderr into a file, to read what init logged. */
static int saved_stderr = -1;
static char errpath[300];

static void capture_stderr(void)
{
    snprintf(errpath, sizeof(errpath), "%s/stderr.txt", root);
    int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert_geq(fd, 0);
    fflush(stderr);
    saved_stderr = dup(2);
    dup2(fd, 2);
    close(fd);
}

static const char *captured(void)
{
    static char text[8192];
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    FILE *f = fopen(errpath, "r");
    size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    text[n] = '\0';
    if (f) fclose(f);
    return text;
}

static void log_level(const char *level)
{
    setenv("WEFT_LOG_LEVEL", level, 1);
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    weft_log_init();
}

/* ---- (1) bare-metal ConnectX-6: v1/v2 x link-local / IPv4 / IPv6 -------------- */

/* What a host shows for a ConnectX-6 port whose netdev eth2 carries
 * 192.168.10.21/24 and 2001:db8:10::21/64: each address once per RoCE
 * version, v1 first (the kernel's order), the default link-local pair at 0-1,
 * the rest of the 256-entry table empty. Its second port (a separate PCI
 * function, mlx5_1 on eth3) is down. */
static void bare_metal(void)
{
    char g[64];
    nic("mlx5_0", "0000:3b:00.0", "eth2");
    port("mlx5_0", 1, "4: ACTIVE", "Ethernet");
    gid("mlx5_0", 1, 0, "fe80:0000:0000:0000:0a5c:2eff:fe14:5e42", V1, "eth2");
    gid("mlx5_0", 1, 1, "fe80:0000:0000:0000:0a5c:2eff:fe14:5e42", V2, "eth2");
    gid("mlx5_0", 1, 2, mapped("192.168.10.21", g, sizeof(g)), V1, "eth2");
    gid("mlx5_0", 1, 3, mapped("192.168.10.21", g, sizeof(g)), V2, "eth2");
    gid("mlx5_0", 1, 4, "2001:0db8:0010:0000:0000:0000:0000:0021", V1, "eth2");
    gid("mlx5_0", 1, 5, "2001:0db8:0010:0000:0000:0000:0000:0021", V2, "eth2");
    empty("mlx5_0", 1, 6, 255);
    nic("mlx5_1", "0000:3b:00.1", "eth3");
    port("mlx5_1", 1, "1: DOWN", "Ethernet");
    gid("mlx5_1", 1, 0, "fe80:0000:0000:0000:0a5c:2eff:fe14:5e43", V1, "eth3");
    gid("mlx5_1", 1, 1, "fe80:0000:0000:0000:0a5c:2eff:fe14:5e43", V2, "eth3");
    empty("mlx5_1", 1, 2, 255);
}

Test(rdma, bare_metal_connectx6_picks_v2_ipv4, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    bare_metal();
    weft_rdma_choice_t *c = select_for(0);
    expect_chosen(c, "mlx5_0", 1, 3);
    const char *r = format(c);
    cr_expect(strstr(r, "rdma: mlx5_0:1 GID index 3 (RoCE v2, ipv4 ::ffff:192.168.10.21 on eth2)"), "%s", r);
    cr_expect(strstr(line_of(r, "mlx5_0:1", "3"), "WON: RoCE v2 with an IPv4-mapped GID"), "%s", r);
    cr_expect(strstr(line_of(r, "mlx5_0:1", "2"), "lost: RoCE v1 (gid 3 is RoCE v2)"), "%s", r);
    cr_expect(strstr(line_of(r, "mlx5_0:1", "5"), "lost: IPv6 (gid 3 is IPv4-mapped, preferred)"), "%s", r);
    cr_expect(strstr(line_of(r, "mlx5_0:1", "4"), "lost: RoCE v1"), "%s", r);
    cr_expect(strstr(line_of(r, "mlx5_0:1", "0"), "lost: link-local address: not routable"), "%s", r);
    cr_expect(strstr(line_of(r, "mlx5_0:1", "1"), "link-local"), "%s", r);
    cr_expect(strstr(line_of(r, "mlx5_0:1", "gids"), "6-255: empty"), "%s", r);
    const char *down = line_of(r, "mlx5_1:1", "0");
    cr_expect(strstr(down, "1: DOWN") && strstr(down, "lost"), "%s", r);
    /* every column of a candidate: type, family, address, netdev, state, pci */
    const char *won = line_of(r, "mlx5_0:1", "3");
    cr_expect(strstr(won, "RoCE v2") && strstr(won, "ipv4") && strstr(won, "::ffff:192.168.10.21") &&
                  strstr(won, "eth2") && strstr(won, "4: ACTIVE") && strstr(won, "0000:3b:00.0"),
              "%s", won);
    weft_rdma_choice_free(c);
}

Test(rdma, bare_metal_without_ipv4_picks_v2_ipv6, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    nic("mlx5_0", "0000:3b:00.0", "eth2");
    port("mlx5_0", 1, "4: ACTIVE", "Ethernet");
    gid("mlx5_0", 1, 0, "fe80:0000:0000:0000:0a5c:2eff:fe14:5e42", V1, "eth2");
    gid("mlx5_0", 1, 1, "fe80:0000:0000:0000:0a5c:2eff:fe14:5e42", V2, "eth2");
    gid("mlx5_0", 1, 2, "2001:0db8:0010:0000:0000:0000:0000:0021", V1, "eth2");
    gid("mlx5_0", 1, 3, "2001:0db8:0010:0000:0000:0000:0000:0021", V2, "eth2");
    empty("mlx5_0", 1, 4, 15);
    weft_rdma_choice_t *c = select_for(0);
    expect_chosen(c, "mlx5_0", 1, 3);
    cr_expect(strstr(format(c), "WON: RoCE v2 with a global IPv6 GID"), "%s", report);
    weft_rdma_choice_free(c);
}

/* ---- (2) a Kubernetes pod with a macvlan RoCE interface --------------------- */

/* The pod's view of an SR-IOV VF (0000:3b:00.2, physfn 0000:3b:00.0) whose
 * RoCE netdev is the macvlan net1 (10.56.217.5): entries 0-3 empty, the
 * first valid one at 4, and -- as on the pods of the issue -- every types/<i>
 * read failing. The PF's netdev is in the host's namespace: the VF has no
 * netdev the pod can list, only the GIDs' ndevs name net1. */
static void pod(int types_readable)
{
    char g[64];
    nic("mlx5_2", "0000:3b:00.2", NULL);
    link_at("../0000:3b:00.0", "sys/devices/pci0000:00/0000:3b:00.2/physfn");
    port("mlx5_2", 1, "4: ACTIVE", "Ethernet");
    empty("mlx5_2", 1, 0, 3);
    gid("mlx5_2", 1, 4, "fe80:0000:0000:0000:4c1e:a3ff:fe77:0b12", types_readable ? V1 : NULL, "net1");
    gid("mlx5_2", 1, 5, "fe80:0000:0000:0000:4c1e:a3ff:fe77:0b12", types_readable ? V2 : NULL, "net1");
    gid("mlx5_2", 1, 6, mapped("10.56.217.5", g, sizeof(g)), types_readable ? V1 : NULL, "net1");
    gid("mlx5_2", 1, 7, mapped("10.56.217.5", g, sizeof(g)), types_readable ? V2 : NULL, "net1");
    empty("mlx5_2", 1, 8, 127);
}

Test(rdma, pod_macvlan_unreadable_types_picks_the_later_twin, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    pod(0);
    weft_rdma_choice_t *c = select_for(0);
    /* 6 and 7 carry one address; the kernel adds v1 first, so 7 is v2 */
    expect_chosen(c, "mlx5_2", 1, 7);
    const char *r = format(c);
    const char *won = line_of(r, "mlx5_2:1", "7");
    cr_expect(strstr(won, "v2 inferred") && strstr(won, "WON: RoCE v2 with an IPv4-mapped GID (types/7 unreadable") &&
                  strstr(won, "net1"),
              "%s", r);
    cr_expect(strstr(line_of(r, "mlx5_2:1", "6"), "lost: inferred RoCE v1 (gid 7 is inferred RoCE v2)"), "%s", r);
    cr_expect(strstr(line_of(r, "mlx5_2:1", "gids"), "0-3,8-127: empty"), "%s", r);
    cr_expect_str_eq(c->ports[0].pf_pci, "0000:3b:00.0");
    weft_rdma_choice_free(c);
}

Test(rdma, pod_macvlan_readable_types_picks_v2, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    pod(1);
    weft_rdma_choice_t *c = select_for(0);
    expect_chosen(c, "mlx5_2", 1, 7);
    cr_expect(strstr(line_of(format(c), "mlx5_2:1", "7"), "WON: RoCE v2 with an IPv4-mapped GID;"), "%s", report);
    weft_rdma_choice_free(c);
}

/* A lone address entry with an unreadable type: nothing tells v1 from v2,
 * and it is still the only routable entry, so it is taken (as v2). */
Test(rdma, pod_lone_entry_with_unknown_type_is_taken, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    char g[64];
    nic("mlx5_2", "0000:3b:00.2", NULL);
    port("mlx5_2", 1, "4: ACTIVE", "Ethernet");
    empty("mlx5_2", 1, 0, 3);
    gid("mlx5_2", 1, 4, "fe80:0000:0000:0000:4c1e:a3ff:fe77:0b12", NULL, "net1");
    gid("mlx5_2", 1, 5, mapped("10.56.217.5", g, sizeof(g)), NULL, "net1");
    empty("mlx5_2", 1, 6, 15);
    weft_rdma_choice_t *c = select_for(0);
    expect_chosen(c, "mlx5_2", 1, 5);
    const char *won = line_of(format(c), "mlx5_2:1", "5");
    cr_expect(strstr(won, "unknown") && strstr(won, "taken as RoCE v2"), "%s", won);
    weft_rdma_choice_free(c);
}

/* One twin's type readable (v1), the other's not: the other is v2. */
Test(rdma, pod_twin_with_known_type_settles_it, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    char g[64];
    nic("mlx5_2", "0000:3b:00.2", NULL);
    port("mlx5_2", 1, "4: ACTIVE", "Ethernet");
    empty("mlx5_2", 1, 0, 3);
    gid("mlx5_2", 1, 4, mapped("10.56.217.5", g, sizeof(g)), NULL, "net1");
    gid("mlx5_2", 1, 5, mapped("10.56.217.5", g, sizeof(g)), V1, "net1");
    weft_rdma_choice_t *c = select_for(0);
    expect_chosen(c, "mlx5_2", 1, 4);
    weft_rdma_choice_free(c);
}

/* ---- (3) eight NICs and eight GPUs -------------------------------------------- */

typedef struct {
    const char *nic;
    const char *pci;
} nic_at_t;

/* The NICs of test/data/topo-8gpu-8nic-*.xml (gen-topo-gpu-nic.py): names
 * are not in bus order, so only locality can give GPU k its NIC. */
static const nic_at_t pix_nics[8] = {{"mlx5_3", "0000:13:00.0"}, {"mlx5_2", "0000:23:00.0"}, {"mlx5_1", "0000:53:00.0"},
                                     {"mlx5_0", "0000:63:00.0"}, {"mlx5_7", "0000:93:00.0"}, {"mlx5_6", "0000:a3:00.0"},
                                     {"mlx5_5", "0000:d3:00.0"}, {"mlx5_4", "0000:e3:00.0"}};
static const nic_at_t shared_nics[8] = {
    {"mlx5_3", "0000:14:00.0"}, {"mlx5_2", "0000:15:00.0"}, {"mlx5_1", "0000:54:00.0"}, {"mlx5_0", "0000:55:00.0"},
    {"mlx5_7", "0000:94:00.0"}, {"mlx5_6", "0000:95:00.0"}, {"mlx5_5", "0000:d4:00.0"}, {"mlx5_4", "0000:d5:00.0"}};

/* Eight single-port RoCE NICs, each with the usual v1/v2 pairs: its own
 * 10.10.<k>.5 (rail k) at 2/3. */
static void eight_nics(const nic_at_t *nics)
{
    for (int k = 0; k < 8; k++) {
        char g[64], ip[32], eth[16];
        const char *dev = nics[k].nic;
        snprintf(ip, sizeof(ip), "10.10.%d.5", k);
        snprintf(eth, sizeof(eth), "eth%d", k + 2);
        nic(dev, nics[k].pci, eth);
        port(dev, 1, "4: ACTIVE", "Ethernet");
        char ll[64]; /* each NIC's own MAC in its link-local address */
        snprintf(ll, sizeof(ll), "fe80:0000:0000:0000:0a5c:2eff:fe14:5e%02x", 0x40 + k);
        gid(dev, 1, 0, ll, V1, eth);
        gid(dev, 1, 1, ll, V2, eth);
        gid(dev, 1, 2, mapped(ip, g, sizeof(g)), V1, eth);
        gid(dev, 1, 3, mapped(ip, g, sizeof(g)), V2, eth);
        empty(dev, 1, 4, 15);
    }
}

static void load_xml(const char *name)
{
    char path[4096];
    const char *top = getenv("top_srcdir"); /* set by make check */
    snprintf(path, sizeof(path), "%s/test/data/%s", top && *top ? top : ".", name);
    cr_assert_eq(weft_topo_load_xml(path), WEFT_SUCCESS, "loading %s: %s", path, weft_last_error());
}

Test(rdma, eight_gpus_each_rank_takes_the_nic_behind_its_gpu, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    eight_nics(pix_nics);
    load_xml("topo-8gpu-8nic-pix.xml");
    for (int r = 0; r < 8; r++) {
        weft_rdma_choice_t *c = select_for(r);
        /* local rank r drives GPU r (by bus id), whose switch holds pix_nics[r] */
        expect_chosen(c, pix_nics[r].nic, 1, 3);
        cr_expect_eq(c->ngpus, 8);
        cr_expect_eq(c->gpu_index, r);
        cr_expect(strstr(c->why, "nearest the GPU") && strstr(c->why, "same PCIe switch"), "rank %d: %s", r, c->why);
        const char *rep = format(c);
        char dp[32];
        /* the next switch of the host bridge, the other host bridge, the other socket */
        snprintf(dp, sizeof(dp), "%s:1", pix_nics[r ^ 1].nic);
        cr_expect(strstr(line_of(rep, dp, "3"), "same host bridge"), "rank %d:\n%s", r, rep);
        snprintf(dp, sizeof(dp), "%s:1", pix_nics[r ^ 2].nic);
        cr_expect(strstr(line_of(rep, dp, "3"), "same socket"), "rank %d:\n%s", r, rep);
        snprintf(dp, sizeof(dp), "%s:1", pix_nics[r ^ 4].nic);
        cr_expect(strstr(line_of(rep, dp, "3"), "lost: farther from the GPU"), "rank %d:\n%s", r, rep);
        cr_expect(strstr(line_of(rep, dp, "3"), "other socket"), "rank %d:\n%s", r, rep);
        weft_rdma_choice_free(c);
    }
}

/* Two GPUs and two NICs behind each switch: both NICs are equally near
 * both GPUs, and the two GPUs share them out, one each, in bus order. */
Test(rdma, eight_gpus_two_per_switch_share_the_switch_nics, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    eight_nics(shared_nics);
    load_xml("topo-8gpu-8nic-shared.xml");
    for (int r = 0; r < 8; r++) {
        weft_rdma_choice_t *c = select_for(r);
        /* switch s holds GPUs 2s, 2s+1 and shared_nics[2s], [2s+1]; ties go in name order */
        const char *a = shared_nics[r & ~1].nic, *b = shared_nics[r | 1].nic;
        const char *first = strverscmp(a, b) < 0 ? a : b, *second = first == a ? b : a;
        expect_chosen(c, r % 2 ? second : first, 1, 3);
        cr_expect(strstr(c->why, "2 ports tie for the 2 GPUs nearest them"), "rank %d: %s", r, c->why);
        weft_rdma_choice_free(c);
    }
}

/* ---- (4) link-local only ------------------------------------------------------ */

static void link_local_only(void)
{
    for (int k = 0; k < 2; k++) {
        char dev[16], pci[16], eth[16];
        snprintf(dev, sizeof(dev), "mlx5_%d", k);
        snprintf(pci, sizeof(pci), "0000:3b:00.%d", k);
        snprintf(eth, sizeof(eth), "eth%d", k + 2);
        nic(dev, pci, eth);
        port(dev, 1, "4: ACTIVE", "Ethernet");
        gid(dev, 1, 0, "fe80:0000:0000:0000:0a5c:2eff:fe14:5e42", V1, eth);
        gid(dev, 1, 1, "fe80:0000:0000:0000:0a5c:2eff:fe14:5e42", V2, eth);
        empty(dev, 1, 2, 255);
    }
}

Test(rdma, link_local_only_picks_nothing_and_says_why, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    link_local_only();
    weft_rdma_choice_t *c = select_for(0);
    cr_assert_eq(c->outcome, WEFT_RDMA_NO_ROUTABLE_GID, "%s", c->why);
    cr_expect_eq(c->chosen, -1);
    cr_expect(strstr(c->why, "no RDMA port has a routable GID") &&
                  strstr(c->why, "mlx5_0:1 (eth2) 2 link-local GIDs") && strstr(c->why, "mlx5_1:1 (eth3)") &&
                  strstr(c->why, "fe80::a5c:2eff:fe14:5e42"),
              "%s", c->why);
    weft_rdma_choice_free(c);

    /* at init: a warning naming the devices, and UCX left alone */
    log_level("warn");
    capture_stderr();
    weft_rdma_init(0, 1);
    const char *err = captured();
    cr_expect(strstr(err, "no RDMA port has a routable GID") && strstr(err, "mlx5_0:1") && strstr(err, "mlx5_1:1") &&
                  strstr(err, "weft sets neither UCX_NET_DEVICES nor UCX_IB_GID_INDEX"),
              "stderr: %s", err);
    cr_expect_null(getenv("UCX_NET_DEVICES"));
    cr_expect_null(getenv("UCX_IB_GID_INDEX"));
}

/* ---- (5) what the user set is kept -------------------------------------------- */

Test(rdma, user_net_devices_is_kept, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    bare_metal();
    setenv("UCX_NET_DEVICES", "mlx5_1:1", 1);
    log_level("info");
    capture_stderr();
    weft_rdma_init(0, 1);
    const char *err = captured();
    cr_expect_str_eq(getenv("UCX_NET_DEVICES"), "mlx5_1:1");
    /* their device may have another GID table: weft sets no index either */
    cr_expect_null(getenv("UCX_IB_GID_INDEX"));
    cr_expect(strstr(err, "UCX_NET_DEVICES=mlx5_1:1 was set by the user and is kept (weft's choice would be mlx5_0:1)"),
              "stderr: %s", err);
    weft_rdma_finalize();
    cr_expect_str_eq(getenv("UCX_NET_DEVICES"), "mlx5_1:1", "finalize removed the user's value");
}

Test(rdma, user_gid_index_is_kept, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    bare_metal();
    setenv("UCX_IB_GID_INDEX", "5", 1);
    weft_rdma_init(0, 1);
    cr_expect_str_eq(getenv("UCX_NET_DEVICES"), "mlx5_0:1");
    cr_expect_str_eq(getenv("UCX_IB_GID_INDEX"), "5");
    weft_rdma_finalize();
    cr_expect_null(getenv("UCX_NET_DEVICES"));
    cr_expect_str_eq(getenv("UCX_IB_GID_INDEX"), "5");
}

Test(rdma, choice_is_set_and_taken_back, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    bare_metal();
    log_level("info");
    capture_stderr();
    weft_rdma_init(0, 1);
    const char *err = captured();
    cr_expect_str_eq(getenv("UCX_NET_DEVICES"), "mlx5_0:1");
    cr_expect_str_eq(getenv("UCX_IB_GID_INDEX"), "3");
    cr_expect(strstr(err, "RDMA: mlx5_0:1 GID index 3") &&
                  strstr(err, "set UCX_NET_DEVICES=mlx5_0:1 UCX_IB_GID_INDEX=3"),
              "stderr: %s", err);
    weft_rdma_finalize();
    cr_expect_null(getenv("UCX_NET_DEVICES"));
    cr_expect_null(getenv("UCX_IB_GID_INDEX"));
}

Test(rdma, ucx_without_verbs_gets_nothing, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    bare_metal();
    log_level("warn");
    capture_stderr();
    weft_rdma_init(0, 0);
    const char *err = captured();
    cr_expect_null(getenv("UCX_NET_DEVICES"));
    cr_expect_null(getenv("UCX_IB_GID_INDEX"));
    cr_expect(strstr(err, "this UCX has no verbs module (libuct_ib)"), "stderr: %s", err);
}

Test(rdma, ucx_tls_without_verbs_gets_nothing, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    static const char *const keep_out[] = {"tcp", "tcp,sm,self", "^ib", "sm,^rc"};
    static const char *const let_in[] = {"rc_x,sm,self", "ud:aux,rc", "^tcp", "all", "dc_mlx5"};
    bare_metal();
    weft_rdma_choice_t *c = select_for(0);
    char msg[512];
    for (size_t i = 0; i < sizeof(keep_out) / sizeof(keep_out[0]); i++) {
        setenv("UCX_TLS", keep_out[i], 1);
        weft_rdma_apply_choice(c, 1, 1, msg, sizeof(msg));
        cr_expect(strstr(msg, "leaves out the verbs transports"), "UCX_TLS=%s: %s", keep_out[i], msg);
    }
    for (size_t i = 0; i < sizeof(let_in) / sizeof(let_in[0]); i++) {
        setenv("UCX_TLS", let_in[i], 1);
        weft_rdma_apply_choice(c, 1, 1, msg, sizeof(msg));
        cr_expect(strstr(msg, "would set UCX_NET_DEVICES=mlx5_0:1 UCX_IB_GID_INDEX=3"), "UCX_TLS=%s: %s", let_in[i],
                  msg);
    }
    weft_rdma_choice_free(c);
}

/* ---- InfiniBand, routes, no devices --------------------------------------------- */

Test(rdma, infiniband_picks_the_active_port_without_gid_index, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    nic("mlx5_0", "0000:3b:00.0", "ib0");
    port("mlx5_0", 1, "1: DOWN", "InfiniBand");
    nic("mlx5_1", "0000:86:00.0", "ib1");
    port("mlx5_1", 1, "4: ACTIVE", "InfiniBand");
    weft_rdma_choice_t *c = select_for(0);
    expect_chosen(c, "mlx5_1", 1, -1);
    const char *r = format(c);
    cr_expect(strstr(line_of(r, "mlx5_1:1", "-"), "InfiniBand") && strstr(line_of(r, "mlx5_1:1", "-"), "WON"), "%s", r);
    cr_expect(strstr(line_of(r, "mlx5_0:1", "-"), "lost: port state 1: DOWN"), "%s", r);
    weft_rdma_init(0, 1);
    cr_expect_str_eq(getenv("UCX_NET_DEVICES"), "mlx5_1:1");
    cr_expect_null(getenv("UCX_IB_GID_INDEX"));
}

/* Without GPUs, the NIC whose netdev carries the route to MASTER_ADDR. */
static void two_rails(void)
{
    char g[64];
    nic("mlx5_0", "0000:3b:00.0", "eth2");
    port("mlx5_0", 1, "4: ACTIVE", "Ethernet");
    gid("mlx5_0", 1, 0, mapped("192.168.10.21", g, sizeof(g)), V1, "eth2");
    gid("mlx5_0", 1, 1, mapped("192.168.10.21", g, sizeof(g)), V2, "eth2");
    nic("mlx5_1", "0000:86:00.0", "eth3");
    port("mlx5_1", 1, "4: ACTIVE", "Ethernet");
    gid("mlx5_1", 1, 0, mapped("10.1.7.21", g, sizeof(g)), V1, "eth3");
    gid("mlx5_1", 1, 1, mapped("10.1.7.21", g, sizeof(g)), V2, "eth3");
    gid("mlx5_1", 1, 2, "fd00:0000:0000:0007:0000:0000:0000:0021", V2, "eth3");
}

Test(rdma, without_gpus_the_route_to_master_addr_decides, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    two_rails();
    route("eth0", "0.0.0.0", "0.0.0.0", "172.16.0.1", 100);
    route("eth0", "172.16.0.0", "255.255.0.0", "0.0.0.0", 100);
    route("eth2", "192.168.10.0", "255.255.255.0", "0.0.0.0", 0);
    route("eth3", "10.1.0.0", "255.255.0.0", "0.0.0.0", 0);
    setenv("MASTER_ADDR", "10.1.0.1", 1);
    weft_rdma_choice_t *c = select_for(0);
    expect_chosen(c, "mlx5_1", 1, 1);
    cr_expect_str_eq(c->route_if, "eth3");
    const char *r = format(c);
    cr_expect(strstr(r, "route: MASTER_ADDR 10.1.0.1 routes through eth3"), "%s", r);
    cr_expect(strstr(line_of(r, "mlx5_1:1", "1"), "its netdev eth3 carries the route to MASTER_ADDR"), "%s", r);
    cr_expect(strstr(line_of(r, "mlx5_0:1", "1"), "does not carry the route to MASTER_ADDR (eth3 on mlx5_1:1 does)"),
              "%s", r);
    weft_rdma_choice_free(c);

    /* the other subnet, and a default route that no RDMA netdev carries */
    setenv("MASTER_ADDR", "192.168.10.2", 1);
    c = select_for(0);
    expect_chosen(c, "mlx5_0", 1, 1);
    weft_rdma_choice_free(c);
    setenv("MASTER_ADDR", "8.8.8.8", 1);
    c = select_for(1);
    cr_expect_str_eq(c->route_if, "eth0");
    /* nothing else to go by: local ranks share the two ports out */
    expect_chosen(c, "mlx5_1", 1, 1);
    cr_expect(strstr(c->why, "2 ports tie; they are shared out by local rank"), "%s", c->why);
    weft_rdma_choice_free(c);
}

Test(rdma, ipv6_route_to_master_addr, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    two_rails();
    char path[1024];
    snprintf(path, sizeof(path), "%s/proc/net/ipv6_route", root);
    parent_dirs(path);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    /* dest plen src plen nexthop metric refcnt use flags iface */
    fprintf(f, "fd000000000000070000000000000000 40 00000000000000000000000000000000 00 "
               "00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth3\n"
               "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
               "fe800000000000000000000000000001 00000400 00000001 00000000 00000003     eth0\n");
    fclose(f);
    setenv("MASTER_ADDR", "fd00:0:0:7::1", 1);
    weft_rdma_choice_t *c = select_for(0);
    expect_chosen(c, "mlx5_1", 1, 1);
    cr_expect_str_eq(c->route_if, "eth3");
    weft_rdma_choice_free(c);
}

Test(rdma, no_infiniband_class_does_nothing_quietly, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    weft_rdma_choice_t *c = select_for(0);
    cr_expect_eq(c->outcome, WEFT_RDMA_NO_DEVICE);
    cr_expect(strstr(c->why, "no RDMA device"), "%s", c->why);
    weft_rdma_choice_free(c);
    log_level("debug");
    capture_stderr();
    weft_rdma_init(0, 1);
    const char *err = captured();
    cr_expect_str_eq(err, "", "logged: %s", err);
    cr_expect_null(getenv("UCX_NET_DEVICES"));
}

Test(rdma, down_ports_only, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    nic("mlx5_0", "0000:3b:00.0", "eth2");
    port("mlx5_0", 1, "1: DOWN", "Ethernet");
    empty("mlx5_0", 1, 0, 3);
    weft_rdma_choice_t *c = select_for(0);
    cr_expect_eq(c->outcome, WEFT_RDMA_NO_ACTIVE_PORT, "%s", c->why);
    cr_expect(strstr(c->why, "no RDMA port is ACTIVE: mlx5_0:1 (eth2) state 1: DOWN"), "%s", c->why);
    weft_rdma_choice_free(c);
}

Test(rdma, select_off_sets_nothing, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    bare_metal();
    setenv("WEFT_RDMA_SELECT", "0", 1);
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    weft_rdma_init(0, 1);
    cr_expect_null(getenv("UCX_NET_DEVICES"));
    char buf[8192];
    cr_assert_eq(weft_rdma_report(buf, sizeof(buf)), WEFT_SUCCESS);
    cr_expect(strstr(buf, "UCX: WEFT_RDMA_SELECT=0: weft sets nothing at init"), "%s", buf);
}

Test(rdma, report_truncates_visibly, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    bare_metal();
    char small[200];
    cr_expect_eq(weft_rdma_report(small, sizeof(small)), WEFT_ERR_TRUNCATE);
    cr_expect_eq(strlen(small), sizeof(small) - 1);
    cr_expect_str_eq(small + sizeof(small) - 5, "...\n");
    cr_expect_eq(weft_rdma_report(NULL, 10), WEFT_ERR_ARG);
}

/* ---- through weft_init, and weft_info --rdma ------------------------------------- */

/* A singleton weft_init on the bare-metal tree hands UCX mlx5_0:1 and GID 3
 * (a device this machine lacks: UCX skips it and runs on shared memory). */
Test(rdma, init_hands_the_choice_to_ucx, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    bare_metal();
    setenv("WEFT_BOOTSTRAP", "single", 1);
    setenv("UCX_WARN_UNUSED_ENV_VARS", "n", 1);
    int rc = weft_init(NULL, NULL);
    cr_assert_eq(rc, WEFT_SUCCESS, "weft_init: %s", weft_last_error());
    cr_expect_str_eq(getenv("UCX_NET_DEVICES"), "mlx5_0:1");
    cr_expect_str_eq(getenv("UCX_IB_GID_INDEX"), "3");
    char buf[16384];
    cr_expect_eq(weft_rdma_report(buf, sizeof(buf)), WEFT_SUCCESS);
    cr_expect(strstr(buf, "  UCX: at init: set UCX_NET_DEVICES=mlx5_0:1 UCX_IB_GID_INDEX=3"), "%s", buf);
    cr_expect_eq(weft_finalize(), WEFT_SUCCESS);
    cr_expect_null(getenv("UCX_NET_DEVICES"));
    cr_expect_null(getenv("UCX_IB_GID_INDEX"));
}

/* Runs the built weft_info with the given arguments under the synthetic
 * root; returns its stdout. */
static const char *run_weft_info(const char *args)
{
    static char out[1 << 16];
    char cmd[2048];
    const char *top = getenv("top_builddir");
    snprintf(cmd, sizeof(cmd), "WEFT_BOOTSTRAP=single UCX_WARN_UNUSED_ENV_VARS=n %s/tools/weft_info %s 2>&1",
             top && *top ? top : ".", args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, sizeof(out) - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s exited %d:\n%s", cmd, st, out);
    return out;
}

Test(rdma, weft_info_rdma_prints_every_candidate, .init = tree_new, .fini = tree_free, .timeout = 60)
{
    pod(0);
    const char *out = run_weft_info("--rdma --no-init");
    const char *first = "rdma: mlx5_2:1 GID index 7 (inferred RoCE v2, ipv4 ::ffff:10.56.217.5 on net1): ";
    cr_expect(strncmp(out, first, strlen(first)) == 0, "%s", out);
    cr_expect(strstr(out, "  UCX: at weft_init: would set UCX_NET_DEVICES=mlx5_2:1 UCX_IB_GID_INDEX=7"), "%s", out);
    cr_expect(strstr(out, "  GPU: none (hwloc lists no GPU)"), "%s", out);
    cr_expect(strstr(out, "  route: MASTER_ADDR is not set"), "%s", out);
    for (int i = 4; i <= 7; i++) {
        char idx[8];
        snprintf(idx, sizeof(idx), "%d", i);
        const char *l = line_of(out, "mlx5_2:1", idx);
        cr_expect(strstr(l, "net1") && strstr(l, "4: ACTIVE") && strstr(l, "0000:3b:00.2") &&
                      (strstr(l, "WON") || strstr(l, "lost")),
                  "%s", l);
    }
    cr_expect(strstr(line_of(out, "mlx5_2:1", "gids"), "0-3,8-127: empty"), "%s", out);

    /* initialised: what init set */
    out = run_weft_info("--rdma");
    cr_expect(strstr(out, "  UCX: at init: set UCX_NET_DEVICES=mlx5_2:1 UCX_IB_GID_INDEX=7"), "%s", out);

    /* link-local only: the message, and nothing set */
    tree_free();
    tree_new();
    link_local_only();
    out = run_weft_info("--rdma --no-init");
    cr_expect(strstr(out, "rdma: no RDMA port has a routable GID"), "%s", out);
    cr_expect(strstr(out, "  UCX: at weft_init: weft sets nothing: UCX keeps its defaults"), "%s", out);
}
