/* Which RDMA port, and on RoCE which GID index, UCX should use.
 *
 * Users of GPU pods with RoCE used to pick NCCL_IB_GID_INDEX / UCX_IB_GID_INDEX
 * by hand from /sys/class/infiniband, and got it wrong where the index differs
 * per pod and per NIC. This file reads the same sysfs attributes (under
 * WEFT_RDMA_FSROOT, so tests can use a synthetic tree), ranks the candidates
 * and hands the winner to UCX through its environment variables before UCX
 * reads its configuration. docs/RDMA.md states the order of preference; the
 * comments here say why each rule is what it is. */
#include "topo/topo.h"
#include "weft_internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RTF_UP_FLAG     0x0001 /* linux/route.h's RTF_UP and RTF_REJECT, as /proc/net/route prints them */
#define RTF_REJECT_FLAG 0x0200

/* ---- reading sysfs ------------------------------------------------------ */

/* For messages and notes, whose tail may be cut: a cut message beats none
 * (the env bootstrap's weft_env_textf, for this file). */
static void textf(char *buf, size_t len, const char *fmt, ...) WEFT_PRINTF(3, 4);
static void textf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* A path, never a cut one: "" (which no open finds) when it does not fit. */
static void pathf(char *buf, size_t len, const char *fmt, ...) WEFT_PRINTF(3, 4);
static void pathf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len) buf[0] = '\0';
}

/* Reads a small text attribute into buf, without trailing white space.
 * Returns 0 or the errno of the failed open/read: sysfs answers EINVAL for
 * the type and netdev of an empty GID entry, and in some SR-IOV / macvlan
 * pods for the type of valid entries too. */
static int read_attr(char *buf, size_t len, const char *fmt, ...) WEFT_PRINTF(3, 4);
static int read_attr(char *buf, size_t len, const char *fmt, ...)
{
    char path[PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    buf[0] = '\0';
    if (n < 0 || (size_t)n >= sizeof(path)) return ENAMETOOLONG;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    ssize_t r = read(fd, buf, len - 1);
    int err = r < 0 ? errno : 0;
    close(fd);
    if (err) return err;
    buf[r] = '\0';
    while (r > 0 && (buf[r - 1] == '\n' || buf[r - 1] == ' ' || buf[r - 1] == '\t'))
        buf[--r] = '\0';
    return 0;
}

/* The last component of a symlink's target: the PCI address of a device
 * link ("../../../0000:5e:00.0"). "" when it is not a link. */
static void link_basename(char *buf, size_t len, const char *path)
{
    char target[PATH_MAX];
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    buf[0] = '\0';
    if (n <= 0) return;
    target[n] = '\0';
    const char *base = strrchr(target, '/');
    textf(buf, len, "%s", base ? base + 1 : target);
}

static int natural_cmp(const void *a, const void *b)
{
    return strverscmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* A directory's entries except dot files, in natural order (mlx5_2 before
 * mlx5_10, GID 9 before 10). Returns 0, or the errno of opendir (then
 * *names is NULL); ENOMEM when a copy fails. */
static int list_dir(const char *path, char ***names, int *n)
{
    int rc = 0, cap = 0;
    char **v = NULL;
    *names = NULL;
    *n = 0;
    DIR *d = opendir(path);
    if (!d) return errno;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nv = realloc(v, (size_t)cap * sizeof(*v));
            if (!nv) {
                rc = ENOMEM;
                break;
            }
            v = nv;
        }
        if (!(v[*n] = strdup(e->d_name))) {
            rc = ENOMEM;
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (rc) {
        free_names(v, *n);
        *n = 0;
        return rc;
    }
    if (*n) qsort(v, (size_t)*n, sizeof(*v), natural_cmp);
    *names = v;
    return 0;
}

/* ---- GID entries -------------------------------------------------------- */

static weft_rdma_family_t gid_family(const unsigned char *raw)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!memcmp(raw, mapped, sizeof(mapped)))
        return raw[12] == 169 && raw[13] == 254 ? WEFT_RDMA_FAM_LINK_LOCAL : WEFT_RDMA_FAM_IPV4;
    if (raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80) return WEFT_RDMA_FAM_LINK_LOCAL;
    return WEFT_RDMA_FAM_IPV6;
}

static const char *family_name(weft_rdma_family_t f)
{
    switch (f) {
    case WEFT_RDMA_FAM_IPV4: return "ipv4";
    case WEFT_RDMA_FAM_IPV6: return "ipv6";
    case WEFT_RDMA_FAM_LINK_LOCAL: break;
    }
    return "link-local";
}

/* How sure we are of the RoCE version, best first: read as v2, v2 by
 * inference, unknown, v1 (read or inferred: v1 is not routable across IP
 * subnets, so it is the last resort). */
static int version_rank(const weft_rdma_gid_t *g)
{
    if (g->version == 2) return g->inferred ? 1 : 0;
    return g->version == 0 ? 2 : 3;
}

static const char *version_name(const weft_rdma_gid_t *g)
{
    switch (version_rank(g)) {
    case 0: return "RoCE v2";
    case 1: return "inferred RoCE v2";
    case 2: return "type unknown";
    }
    return g->inferred ? "inferred RoCE v1" : "RoCE v1";
}

/* Preference class of an entry, lower is better; -1: never chosen. RoCE v2
 * first (routable over IP), then the address family: an IPv4-mapped GID
 * before a global IPv6 one, as UCX and NCCL order them by default. */
static int gid_pref(const weft_rdma_gid_t *g)
{
    if (g->family == WEFT_RDMA_FAM_LINK_LOCAL) return -1;
    return 2 * version_rank(g) + (g->family == WEFT_RDMA_FAM_IPV6);
}

/* Where types/<i> cannot be read, an address's twin tells the version: the
 * kernel adds every address once per GID type the port supports, v1 before
 * v2 (roce_gid_mgmt.c), so of two entries with one address the first is v1.
 * A twin whose type was read settles it outright. */
static void infer_versions(weft_rdma_port_t *p)
{
    for (int i = 0; i < p->ngids; i++) {
        weft_rdma_gid_t *g = &p->gids[i];
        if (g->version) continue;
        int known = 0, earlier = 0, twins = 0;
        for (int j = 0; j < p->ngids; j++) {
            const weft_rdma_gid_t *t = &p->gids[j];
            if (j == i || memcmp(t->raw, g->raw, 16)) continue;
            twins++;
            if (t->type_errno == 0 && t->version) known = t->version;
            if (t->index < g->index) earlier++;
        }
        if (!twins) continue;
        g->version = known ? 3 - known : earlier ? 2 : 1;
        g->inferred = 1;
    }
}

/* Range lists of indexes met in increasing order ("0-3,8-255"): *start /
 * *end is the open range (-1: none), written out when the next index does
 * not continue it, or at the end. */
static void range_flush(char *buf, size_t len, int *start, int *end)
{
    if (*start < 0) return;
    size_t used = strlen(buf);
    if (used + 1 < len) {
        if (*start == *end)
            textf(buf + used, len - used, "%s%d", used ? "," : "", *start);
        else
            textf(buf + used, len - used, "%s%d-%d", used ? "," : "", *start, *end);
    }
    *start = *end = -1;
}

static void range_add(char *buf, size_t len, int *start, int *end, int i)
{
    if (*start >= 0 && i == *end + 1) {
        *end = i;
        return;
    }
    range_flush(buf, len, start, end);
    *start = *end = i;
}

static void netdev_add(weft_rdma_port_t *p, const char *name)
{
    if (!name[0]) return;
    size_t n = strlen(name), used = strlen(p->netdevs);
    for (const char *s = p->netdevs; (s = strstr(s, name)); s += n)
        if ((s == p->netdevs || s[-1] == ' ') && (s[n] == ' ' || s[n] == '\0')) return;
    if (used + n + 2 <= sizeof(p->netdevs))
        textf(p->netdevs + used, sizeof(p->netdevs) - used, "%s%s", used ? " " : "", name);
}

/* The GID table of a RoCE port: the non-empty entries with their type and
 * netdev; the empty ones (zero GID, or a gids/<i> that cannot be read) as a
 * range list. Real tables are 128-256 entries, mostly empty; a pod's first
 * valid entry may sit at index 4-7 behind empty ones. */
static int scan_gids(const char *portdir, weft_rdma_port_t *p)
{
    char path[PATH_MAX], text[64];
    char **names = NULL;
    int n = 0, rc = WEFT_SUCCESS, run_start = -1, run_end = -1;
    pathf(path, sizeof(path), "%s/gids", portdir);
    int err = list_dir(path, &names, &n);
    if (err == ENOMEM) return weft_error(WEFT_ERR_NO_MEMORY, "rdma: out of memory listing %s", path);
    if (n && !(p->gids = calloc((size_t)n, sizeof(*p->gids)))) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "rdma: out of memory for %d GID entries of %s:%d", n, p->dev, p->port);
        goto out;
    }
    for (int k = 0; k < n; k++) {
        char *end;
        long idx = strtol(names[k], &end, 10);
        if (*end || idx < 0 || idx > INT_MAX) continue;
        weft_rdma_gid_t *g = &p->gids[p->ngids];
        memset(g, 0, sizeof(*g));
        g->index = (int)idx;
        static const unsigned char zero[16];
        if (read_attr(text, sizeof(text), "%s/gids/%s", portdir, names[k]) || inet_pton(AF_INET6, text, g->raw) != 1 ||
            !memcmp(g->raw, zero, sizeof(zero))) {
            range_add(p->empty, sizeof(p->empty), &run_start, &run_end, g->index);
            continue;
        }
        range_flush(p->empty, sizeof(p->empty), &run_start, &run_end);
        inet_ntop(AF_INET6, g->raw, g->addr, sizeof(g->addr));
        g->family = gid_family(g->raw);
        g->type_errno = read_attr(g->type, sizeof(g->type), "%s/gid_attrs/types/%s", portdir, names[k]);
        if (!g->type_errno) g->version = strstr(g->type, "v2") ? 2 : strstr(g->type, "v1") ? 1 : 0;
        read_attr(g->ndev, sizeof(g->ndev), "%s/gid_attrs/ndevs/%s", portdir, names[k]);
        netdev_add(p, g->ndev);
        p->ngids++;
    }
    range_flush(p->empty, sizeof(p->empty), &run_start, &run_end);
    infer_versions(p);
out:
    free_names(names, n);
    return rc;
}

static int scan_port(const char *devdir, const char *dev, const char *portname, weft_rdma_port_t *p)
{
    char portdir[PATH_MAX], path[PATH_MAX];
    char **nets = NULL;
    int nnets = 0;
    memset(p, 0, sizeof(*p));
    textf(p->dev, sizeof(p->dev), "%s", dev);
    p->port = atoi(portname);
    p->best = -1;
    p->locality = -1;
    pathf(portdir, sizeof(portdir), "%s/ports/%s", devdir, portname);
    if (read_attr(p->state, sizeof(p->state), "%s/state", portdir)) textf(p->state, sizeof(p->state), "unreadable");
    /* "4: ACTIVE": the number is the verbs port state (5 is ACTIVE_DEFER,
     * which UCX does not use either), the word its name */
    int state_num;
    p->active = sscanf(p->state, "%d", &state_num) == 1 ? state_num == 4 : !strcmp(p->state, "ACTIVE");
    read_attr(p->link_text, sizeof(p->link_text), "%s/link_layer", portdir);
    p->link = !strcmp(p->link_text, "InfiniBand") ? WEFT_RDMA_LINK_IB
              : !strcmp(p->link_text, "Ethernet") ? WEFT_RDMA_LINK_ETH
                                                  : WEFT_RDMA_LINK_OTHER;
    pathf(path, sizeof(path), "%s/device", devdir);
    link_basename(p->pci, sizeof(p->pci), path);
    pathf(path, sizeof(path), "%s/device/physfn", devdir);
    link_basename(p->pf_pci, sizeof(p->pf_pci), path);
    pathf(path, sizeof(path), "%s/device/net", devdir);
    if (list_dir(path, &nets, &nnets) == ENOMEM) return weft_error(WEFT_ERR_NO_MEMORY, "rdma: out of memory");
    for (int i = 0; i < nnets; i++)
        netdev_add(p, nets[i]);
    free_names(nets, nnets);
    /* On InfiniBand the GID index question does not arise: UCX uses the
     * port GID (index 0) and routes by LID. */
    return p->link == WEFT_RDMA_LINK_IB ? WEFT_SUCCESS : scan_gids(portdir, p);
}

static int add_port(weft_rdma_choice_t *c, int *cap, weft_rdma_port_t **slot)
{
    if (c->nports == *cap) {
        int ncap = *cap ? 2 * *cap : 8;
        weft_rdma_port_t *np = realloc(c->ports, (size_t)ncap * sizeof(*np));
        if (!np) return weft_error(WEFT_ERR_NO_MEMORY, "rdma: out of memory for %d ports", ncap);
        c->ports = np;
        *cap = ncap;
    }
    *slot = &c->ports[c->nports];
    return WEFT_SUCCESS;
}

/* Every port of every device under <root>/sys/class/infiniband. */
static int scan(weft_rdma_choice_t *c)
{
    char **devs = NULL, **ports = NULL;
    int ndevs = 0, nports = 0, cap = 0, rc = WEFT_SUCCESS;
    int err = list_dir(c->classdir, &devs, &ndevs);
    if (err == ENOMEM) return weft_error(WEFT_ERR_NO_MEMORY, "rdma: out of memory listing %s", c->classdir);
    for (int d = 0; d < ndevs; d++) {
        char devdir[PATH_MAX], path[PATH_MAX];
        pathf(devdir, sizeof(devdir), "%s/%s", c->classdir, devs[d]);
        pathf(path, sizeof(path), "%s/ports", devdir);
        if (list_dir(path, &ports, &nports) == ENOMEM) {
            rc = weft_error(WEFT_ERR_NO_MEMORY, "rdma: out of memory listing %s", path);
            goto out;
        }
        for (int p = 0; p < nports; p++) {
            weft_rdma_port_t *slot = NULL;
            WEFT_CHECK_GOTO(add_port(c, &cap, &slot), rc, out);
            c->nports++; /* counted before scanning so that free releases its GIDs */
            WEFT_CHECK_GOTO(scan_port(devdir, devs[d], ports[p], slot), rc, out);
        }
        free_names(ports, nports);
        ports = NULL;
        nports = 0;
    }
out:
    free_names(ports, nports);
    free_names(devs, ndevs);
    return rc;
}

/* ---- the route to MASTER_ADDR ------------------------------------------- */

static int prefix_match(const unsigned char *a, const unsigned char *net, int bits)
{
    int bytes = bits / 8, rest = bits % 8;
    if (memcmp(a, net, (size_t)bytes)) return 0;
    if (!rest) return 1;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return (a[bytes] & mask) == (net[bytes] & mask);
}

static int hex_bytes(const char *hex, unsigned char *out, int n)
{
    for (int i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1) return -1;
        out[i] = (unsigned char)v;
    }
    return 0;
}

/* The interface of the route to `addr` in the kernel's main table, as
 * /proc/net/route (IPv4) or /proc/net/ipv6_route print it: the longest
 * prefix that is up and not a reject route, then the lowest metric. The
 * table rather than a connected socket: on the node that hosts MASTER_ADDR
 * a socket would route through lo, the table names the interface of its
 * subnet; and a synthetic table makes the rule testable. */
static int route_lookup(const char *prefix, const struct sockaddr_storage *addr, char *ifname, size_t len, char *note,
                        size_t nlen)
{
    char path[PATH_MAX], line[512], best[32] = "";
    int v4 = addr->ss_family == AF_INET, best_bits = -1;
    unsigned best_metric = 0;
    pathf(path, sizeof(path), "%s/proc/net/%s", prefix, v4 ? "route" : "ipv6_route");
    FILE *f = fopen(path, "re");
    if (!f) {
        textf(note, nlen, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        char iface[32], dest_hex[40];
        unsigned flags, metric, plen;
        int bits;
        if (v4) {
            unsigned dest, gw, mask;
            if (sscanf(line, "%31s %x %x %x %*d %*d %u %x", iface, &dest, &gw, &flags, &metric, &mask) != 6) continue;
            /* the kernel prints the network-order words as host integers */
            uint32_t a = ((const struct sockaddr_in *)addr)->sin_addr.s_addr;
            if ((a & mask) != dest) continue;
            bits = __builtin_popcount(mask);
        } else {
            if (sscanf(line, "%32s %x %*32s %*x %*32s %x %*x %*x %x %31s", dest_hex, &plen, &metric, &flags, iface) !=
                5)
                continue;
            unsigned char dest[16];
            if (plen > 128 || hex_bytes(dest_hex, dest, 16)) continue;
            if (!prefix_match(((const struct sockaddr_in6 *)addr)->sin6_addr.s6_addr, dest, (int)plen)) continue;
            bits = (int)plen;
        }
        if (!(flags & RTF_UP_FLAG) || (flags & RTF_REJECT_FLAG)) continue;
        if (bits > best_bits || (bits == best_bits && metric < best_metric)) {
            best_bits = bits;
            best_metric = metric;
            textf(best, sizeof(best), "%s", iface);
        }
    }
    fclose(f);
    if (!best[0]) {
        textf(note, nlen, "no route in %s", path);
        return -1;
    }
    textf(ifname, len, "%s", best);
    return 0;
}

/* MASTER_ADDR as an address: numeric forms first, else the resolver (the
 * env bootstrap has resolved it already, so this does not wait on DNS). */
static int resolve(const char *host, struct sockaddr_storage *out, char *note, size_t nlen)
{
    memset(out, 0, sizeof(*out));
    struct sockaddr_in *s4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)out;
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        out->ss_family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        out->ss_family = AF_INET6;
        return 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(host, NULL, &hints, &res);
    if (gai) {
        textf(note, nlen, "cannot resolve MASTER_ADDR %s: %s", host, gai_strerror(gai));
        return -1;
    }
    const struct addrinfo *pick = res;
    for (const struct addrinfo *r = res; r; r = r->ai_next)
        if (r->ai_family == AF_INET) {
            pick = r;
            break;
        }
    memcpy(out, pick->ai_addr, pick->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

static int has_netdev(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *s = list; n && (s = strstr(s, name)); s += n)
        if ((s == list || s[-1] == ' ') && (s[n] == ' ' || s[n] == '\0')) return 1;
    return 0;
}

/* ---- choosing ----------------------------------------------------------- */

/* The entry a RoCE port would use: best class, then the one whose netdev
 * carries the route to MASTER_ADDR (a port with VLAN netdevs has one
 * address per VLAN), then the lowest index. */
static void pick_port_gid(weft_rdma_port_t *p)
{
    p->best = -1;
    for (int i = 0; i < p->ngids; i++) {
        weft_rdma_gid_t *g = &p->gids[i];
        g->pref = gid_pref(g);
        if (g->pref < 0) continue;
        if (p->best < 0) {
            p->best = i;
            continue;
        }
        const weft_rdma_gid_t *b = &p->gids[p->best];
        if (g->pref < b->pref || (g->pref == b->pref && g->on_route > b->on_route)) p->best = i;
    }
    p->usable = p->active && (p->link == WEFT_RDMA_LINK_IB || p->best >= 0);
}

static int port_pref(const weft_rdma_port_t *p)
{
    return p->link == WEFT_RDMA_LINK_IB ? 0 : p->gids[p->best].pref;
}

enum key { KEY_TIE = 0, KEY_LOCALITY, KEY_ROUTE, KEY_CPU, KEY_GID };

/* Orders two usable ports for a rank whose GPU has locality loc[] to each
 * port (NULL without a GPU): nearest the GPU; then the port carrying the
 * route to MASTER_ADDR; without a GPU, hwloc's NIC nearest the CPU binding;
 * then the better GID. <0: a is better; *key says which rule decided. */
static int port_cmp(const weft_rdma_choice_t *c, const int *loc, int a, int b, enum key *key)
{
    const weft_rdma_port_t *pa = &c->ports[a], *pb = &c->ports[b];
    *key = KEY_LOCALITY;
    if (loc && loc[a] != loc[b]) return loc[a] - loc[b];
    *key = KEY_ROUTE;
    if (pa->on_route != pb->on_route) return pb->on_route - pa->on_route;
    *key = KEY_CPU;
    if (!loc && pa->near_cpu != pb->near_cpu) return pb->near_cpu - pa->near_cpu;
    *key = KEY_GID;
    if (port_pref(pa) != port_pref(pb)) return port_pref(pa) - port_pref(pb);
    *key = KEY_TIE;
    return 0;
}

/* Marks in `set` the usable ports that tie for best under loc; returns how many. */
static int best_set(const weft_rdma_choice_t *c, const int *loc, char *set)
{
    int m = -1, count = 0;
    enum key k;
    for (int i = 0; i < c->nports; i++)
        if (c->ports[i].usable && (m < 0 || port_cmp(c, loc, i, m, &k) < 0)) m = i;
    for (int i = 0; i < c->nports; i++) {
        set[i] = m >= 0 && c->ports[i].usable && port_cmp(c, loc, i, m, &k) == 0;
        count += set[i];
    }
    return count;
}

static void port_name(const weft_rdma_port_t *p, char *buf, size_t len)
{
    textf(buf, len, "%s:%d", p->dev, p->port);
}

/* Why the chosen port beat the runner-up, or why a loser lost to it. */
static void explain(weft_rdma_choice_t *c, const int *loc, const char *spread)
{
    weft_rdma_port_t *w = &c->ports[c->chosen];
    char wn[80];
    port_name(w, wn, sizeof(wn));
    int runner = -1;
    enum key k;
    for (int i = 0; i < c->nports; i++)
        if (i != c->chosen && c->ports[i].usable && (runner < 0 || port_cmp(c, loc, i, runner, &k) < 0)) runner = i;
    const char *locname = loc ? weft_pci_locality_name((weft_pci_locality_t)loc[c->chosen]) : "";
    if (runner < 0) {
        textf(w->verdict, sizeof(w->verdict), "the only usable port");
    } else {
        port_cmp(c, loc, c->chosen, runner, &k);
        switch (k) {
        case KEY_LOCALITY: textf(w->verdict, sizeof(w->verdict), "nearest the GPU %s (%s)", c->gpu, locname); break;
        case KEY_ROUTE:
            textf(w->verdict, sizeof(w->verdict), "its netdev %s carries the route to MASTER_ADDR", c->route_if);
            break;
        case KEY_CPU: textf(w->verdict, sizeof(w->verdict), "the RDMA NIC nearest the CPU binding (hwloc)"); break;
        case KEY_GID: textf(w->verdict, sizeof(w->verdict), "the most preferred GID of all ports"); break;
        case KEY_TIE: textf(w->verdict, sizeof(w->verdict), "%s", spread); break;
        }
        if (k != KEY_LOCALITY && loc && k != KEY_TIE) {
            size_t u = strlen(w->verdict);
            textf(w->verdict + u, sizeof(w->verdict) - u, "; as near the GPU %s (%s) as any", c->gpu, locname);
        }
    }
    for (int i = 0; i < c->nports; i++) {
        weft_rdma_port_t *p = &c->ports[i];
        if (i == c->chosen) continue;
        if (!p->active) {
            textf(p->verdict, sizeof(p->verdict), "port state %s", p->state);
            continue;
        }
        if (!p->usable) {
            textf(p->verdict, sizeof(p->verdict), "no routable GID (%s)",
                  p->ngids ? "only link-local entries" : "the table is empty");
            continue;
        }
        port_cmp(c, loc, i, c->chosen, &k);
        switch (k) {
        case KEY_LOCALITY:
            textf(p->verdict, sizeof(p->verdict), "farther from the GPU %s (%s) than %s (%s)", c->gpu,
                  weft_pci_locality_name((weft_pci_locality_t)loc[i]), wn, locname);
            break;
        case KEY_ROUTE:
            textf(p->verdict, sizeof(p->verdict), "does not carry the route to MASTER_ADDR (%s on %s does)",
                  c->route_if, wn);
            break;
        case KEY_CPU: textf(p->verdict, sizeof(p->verdict), "farther from the CPU binding than %s", wn); break;
        case KEY_GID: /* InfiniBand ranks first here, so p is RoCE and has a best entry */
            textf(p->verdict, sizeof(p->verdict), "its best GID (%s, %s) is less preferred than %s's",
                  version_name(&p->gids[p->best]), family_name(p->gids[p->best].family), wn);
            break;
        case KEY_TIE: textf(p->verdict, sizeof(p->verdict), "as good as %s; %s", wn, spread); break;
        }
    }
}

/* A sentence for a host where no port can be used, naming every port. */
static void explain_none(weft_rdma_choice_t *c)
{
    int roce_active = 0;
    size_t u;
    for (int i = 0; i < c->nports; i++)
        roce_active |= c->ports[i].active && c->ports[i].link != WEFT_RDMA_LINK_IB;
    c->outcome = roce_active ? WEFT_RDMA_NO_ROUTABLE_GID : WEFT_RDMA_NO_ACTIVE_PORT;
    textf(c->why, sizeof(c->why), "%s:",
          roce_active ? "no RDMA port has a routable GID (RoCE needs an IPv4 or global IPv6 address on the "
                        "port's netdev; link-local fe80:: GIDs are never used)"
                      : "no RDMA port is ACTIVE");
    for (int i = 0; i < c->nports; i++) {
        weft_rdma_port_t *p = &c->ports[i];
        char what[160];
        if (!p->active)
            textf(what, sizeof(what), "state %s", p->state);
        else if (p->ngids)
            textf(what, sizeof(what), "%d link-local GID%s (%s%s)", p->ngids, p->ngids == 1 ? "" : "s", p->gids[0].addr,
                  p->ngids > 1 ? ", ..." : "");
        else
            textf(what, sizeof(what), "no GID at all");
        textf(p->verdict, sizeof(p->verdict), "%s", p->active ? "no routable GID" : "port not ACTIVE");
        u = strlen(c->why);
        textf(c->why + u, sizeof(c->why) - u, "%s %s:%d%s%s%s %s", i ? ";" : "", p->dev, p->port,
              p->netdevs[0] ? " (" : "", p->netdevs, p->netdevs[0] ? ")" : "", what);
    }
}

/* The rank's GPU and every GPU's locality to every port (loc[g * nports + p]). */
static int locality(weft_rdma_choice_t *c, const weft_rdma_input_t *in, int **loc_out)
{
    char(*gpus)[16] = calloc(WEFT_RDMA_MAX_GPUS, sizeof(*gpus));
    int ngpus = 0, rc = WEFT_SUCCESS;
    int *loc = NULL;
    *loc_out = NULL;
    if (!gpus) return weft_error(WEFT_ERR_NO_MEMORY, "rdma: out of memory");
    if (weft_topo_gpus(gpus, WEFT_RDMA_MAX_GPUS, &ngpus) != WEFT_SUCCESS) {
        weft_debug("rdma: hwloc cannot list the GPUs (%s); choosing without GPU locality", weft_last_error());
        ngpus = 0;
    }
    c->ngpus = ngpus;
    if (ngpus > 0) {
        /* local rank i drives GPU i, the torchrun / Slurm convention */
        c->gpu_index = in->local_rank % ngpus;
        textf(c->gpu, sizeof(c->gpu), "%s", gpus[c->gpu_index]);
        if (!(loc = calloc((size_t)ngpus * (size_t)c->nports, sizeof(*loc)))) {
            rc = weft_error(WEFT_ERR_NO_MEMORY, "rdma: out of memory");
            goto out;
        }
        for (int g = 0; g < ngpus; g++)
            for (int p = 0; p < c->nports; p++) {
                weft_rdma_port_t *port = &c->ports[p];
                weft_pci_locality_t l = WEFT_PCI_UNKNOWN;
                if (port->pci[0]) weft_topo_pci_locality(gpus[g], port->pci, &l);
                /* a VF the topology lacks sits where its physical function is */
                if (l == WEFT_PCI_UNKNOWN && port->pf_pci[0]) weft_topo_pci_locality(gpus[g], port->pf_pci, &l);
                loc[g * c->nports + p] = (int)l;
                if (g == c->gpu_index) port->locality = (int)l;
            }
    } else {
        weft_placement_t pl;
        if (weft_topo_placement(&pl) == WEFT_SUCCESS)
            for (int p = 0; p < c->nports; p++)
                c->ports[p].near_cpu = pl.nic[0] && !strcmp(pl.nic, c->ports[p].dev);
    }
    *loc_out = loc;
out:
    free(gpus);
    return rc;
}

static int choose(weft_rdma_choice_t *c, const weft_rdma_input_t *in, const int *loc)
{
    const int *mine = loc ? loc + c->gpu_index * c->nports : NULL;
    char *set = calloc((size_t)c->nports, 2);
    char spread[200] = "";
    if (!set) return weft_error(WEFT_ERR_NO_MEMORY, "rdma: out of memory");
    char *other = set + c->nports;
    int nbest = best_set(c, mine, set), pos, peers = 0, mypos = 0;
    if (loc) {
        /* Ports that tie are shared out among the GPUs for which the same
         * ports tie (NCCL does the same): the k-th of those GPUs by bus id
         * takes the k-th port, so two GPUs under one switch with two NICs
         * use one NIC each. */
        for (int g = 0; g < c->ngpus; g++) {
            best_set(c, loc + g * c->nports, other);
            if (memcmp(set, other, (size_t)c->nports)) continue;
            if (g < c->gpu_index) mypos++;
            peers++;
        }
        pos = mypos;
        textf(spread, sizeof(spread), "%d ports tie for the %d GPU%s nearest them; GPU %s is number %d of those", nbest,
              peers, peers == 1 ? "" : "s", c->gpu, mypos);
    } else {
        pos = in->local_rank;
        textf(spread, sizeof(spread), "%d ports tie; they are shared out by local rank (%d here)", nbest,
              in->local_rank);
    }
    int want = nbest ? pos % nbest : 0;
    for (int i = 0, k = 0; i < c->nports; i++)
        if (set[i] && k++ == want) c->chosen = i;
    explain(c, mine, spread);
    free(set);
    return WEFT_SUCCESS;
}

int weft_rdma_select(const weft_rdma_input_t *in, weft_rdma_choice_t **out)
{
    int rc = WEFT_SUCCESS, usable = 0, *loc = NULL;
    weft_rdma_choice_t *c = NULL;
    if (!in || !out) return weft_error(WEFT_ERR_ARG, "weft_rdma_select: NULL argument");
    *out = NULL;
    if (!(c = calloc(1, sizeof(*c)))) return weft_error(WEFT_ERR_NO_MEMORY, "rdma: out of memory");
    c->chosen = -1;
    c->gid_index = -1;
    c->gpu_index = -1;
    c->ngpus = -1;
    /* "/" stands for the real root: no doubled slash in messages */
    char prefix[sizeof(in->fsroot)];
    textf(prefix, sizeof(prefix), "%s", strcmp(in->fsroot, "/") ? in->fsroot : "");
    for (size_t n = strlen(prefix); n > 1 && prefix[n - 1] == '/'; n--)
        prefix[n - 1] = '\0';
    textf(c->classdir, sizeof(c->classdir), "%s/sys/class/infiniband", prefix);
    WEFT_CHECK_GOTO(scan(c), rc, done);
    if (c->nports == 0) {
        c->outcome = WEFT_RDMA_NO_DEVICE;
        textf(c->why, sizeof(c->why), "no RDMA device (%s is absent or empty)", c->classdir);
        goto done;
    }
    if (in->master_addr[0]) {
        struct sockaddr_storage ss;
        if (resolve(in->master_addr, &ss, c->route_note, sizeof(c->route_note)) == 0 &&
            route_lookup(prefix, &ss, c->route_if, sizeof(c->route_if), c->route_note, sizeof(c->route_note)) == 0)
            textf(c->route_note, sizeof(c->route_note), "MASTER_ADDR %s routes through %s", in->master_addr,
                  c->route_if);
    } else {
        textf(c->route_note, sizeof(c->route_note), "MASTER_ADDR is not set");
    }
    for (int i = 0; i < c->nports; i++) {
        weft_rdma_port_t *p = &c->ports[i];
        p->on_route = c->route_if[0] && has_netdev(p->netdevs, c->route_if);
        for (int g = 0; g < p->ngids; g++)
            p->gids[g].on_route = c->route_if[0] && !strcmp(p->gids[g].ndev, c->route_if);
        pick_port_gid(p);
        usable += p->usable;
    }
    if (!usable) {
        explain_none(c);
        goto done;
    }
    /* hwloc only where locality can change the answer (or a report shows it) */
    if (usable > 1 || in->full) WEFT_CHECK_GOTO(locality(c, in, &loc), rc, done);
    WEFT_CHECK_GOTO(choose(c, in, loc), rc, done);
    weft_rdma_port_t *w = &c->ports[c->chosen];
    c->outcome = WEFT_RDMA_CHOSEN;
    if (w->link == WEFT_RDMA_LINK_IB) {
        textf(c->why, sizeof(c->why), "%s:%d (InfiniBand): %s", w->dev, w->port, w->verdict);
    } else {
        const weft_rdma_gid_t *g = &w->gids[w->best];
        c->gid_index = g->index;
        textf(c->why, sizeof(c->why), "%s:%d GID index %d (%s, %s %s%s%s): %s", w->dev, w->port, g->index,
              version_name(g), family_name(g->family), g->addr, g->ndev[0] ? " on " : "", g->ndev, w->verdict);
    }
done:
    free(loc);
    if (rc != WEFT_SUCCESS) {
        weft_rdma_choice_free(c);
        c = NULL;
    }
    *out = c;
    return rc;
}

void weft_rdma_choice_free(weft_rdma_choice_t *c)
{
    if (!c) return;
    for (int i = 0; i < c->nports; i++)
        free(c->ports[i].gids);
    free(c->ports);
    free(c);
}

void weft_rdma_input_init(weft_rdma_input_t *in, int local_rank)
{
    memset(in, 0, sizeof(*in));
    textf(in->fsroot, sizeof(in->fsroot), "%s", weft_cfg.rdma_fsroot[0] ? weft_cfg.rdma_fsroot : "/");
    in->local_rank = local_rank > 0 ? local_rank : 0;
    const char *m = getenv("MASTER_ADDR");
    if (m) textf(in->master_addr, sizeof(in->master_addr), "%s", m);
}

/* ---- the report ----------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t len, used;
    int truncated;
} out_t;

static void put(out_t *o, const char *fmt, ...) WEFT_PRINTF(2, 3);
static void put(out_t *o, const char *fmt, ...)
{
    if (o->truncated) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->used, o->len - o->used, fmt, ap);
    va_end(ap);
    if (n >= 0 && o->used + (size_t)n < o->len) {
        o->used += (size_t)n;
        return;
    }
    o->truncated = 1;
    /* end on a visible mark rather than a cut word */
    if (o->len >= 5) memcpy(o->buf + o->len - 5, "...\n", 5);
    o->used = o->len - 1;
}

/* Why an entry of a port lost to the port's best entry b. */
static void gid_lost(const weft_rdma_gid_t *g, const weft_rdma_gid_t *b, char *buf, size_t len)
{
    if (g->pref < 0)
        textf(buf, len, "link-local address: not routable");
    else if (version_rank(g) != version_rank(b))
        textf(buf, len, "%s (gid %d is %s)", version_name(g), b->index, version_name(b));
    else if (g->family != b->family)
        textf(buf, len, "IPv6 (gid %d is IPv4-mapped, preferred)", b->index);
    else if (g->on_route != b->on_route)
        textf(buf, len, "its netdev does not carry the route to MASTER_ADDR (gid %d's %s does)", b->index, b->ndev);
    else
        textf(buf, len, "as good as gid %d, which comes first", b->index);
}

/* Why an entry is its port's best: what it is, and how sure. */
static void gid_won(const weft_rdma_gid_t *g, char *buf, size_t len)
{
    const char *fam = g->family == WEFT_RDMA_FAM_IPV4 ? "an IPv4-mapped GID" : "a global IPv6 GID";
    char why[96];
    if (g->type_errno)
        textf(why, sizeof(why), "types/%d unreadable: %s", g->index, strerror(g->type_errno));
    else
        textf(why, sizeof(why), "types/%d reads '%s'", g->index, g->type);
    switch (version_rank(g)) {
    case 0: textf(buf, len, "RoCE v2 with %s", fam); break;
    case 1:
        textf(buf, len,
              "RoCE v2 with %s (%s; the later of two entries with this address, and the kernel adds v1 first)", fam,
              why);
        break;
    case 2: textf(buf, len, "%s (%s; no twin entry to tell v1 from v2, so taken as RoCE v2)", fam, why); break;
    default: textf(buf, len, "RoCE v1 with %s (no v2 entry; v1 does not cross IP subnets)", fam); break;
    }
}

static const char *type_column(const weft_rdma_gid_t *g)
{
    if (g->type_errno == 0 && g->type[0]) return g->type;
    return g->version == 2 ? "v2 inferred" : g->version == 1 ? "v1 inferred" : "unknown";
}

int weft_rdma_format(const weft_rdma_choice_t *c, const char *ucx_note, char *buf, size_t len)
{
    out_t o = {buf, len, 0, 0};
    if (!buf || len == 0) return 1;
    buf[0] = '\0';
    if (!c) return 0;
    put(&o, "rdma: %s\n", c->why);
    if (ucx_note && ucx_note[0]) put(&o, "  UCX: %s\n", ucx_note);
    if (c->outcome == WEFT_RDMA_NO_DEVICE) return o.truncated;
    if (c->gpu[0])
        put(&o, "  GPU: %s (GPU %d of %d by PCI bus id: local rank mod GPUs)\n", c->gpu, c->gpu_index, c->ngpus);
    else if (c->ngpus == 0)
        put(&o, "  GPU: none (hwloc lists no GPU): without one, the route to MASTER_ADDR decides\n");
    else
        put(&o, "  GPU: not looked up (at most one usable port)\n");
    put(&o, "  route: %s\n", c->route_note);
    put(&o, "  %-12s %-5s %-12s %-10s %-26s %-8s %-10s %-12s %-16s %s\n", "port", "gid", "type", "family", "address",
        "netdev", "state", "pci", "locality", "verdict");
    for (int i = 0; i < c->nports; i++) {
        const weft_rdma_port_t *p = &c->ports[i];
        char pn[80], loc[24], pci[32], gi[12], why[320];
        const char *mark = i == c->chosen ? "WON" : "lost";
        port_name(p, pn, sizeof(pn));
        /* without a GPU, the only locality is hwloc's NIC nearest the CPUs */
        textf(loc, sizeof(loc), "%s",
              p->locality >= 0 ? weft_pci_locality_name((weft_pci_locality_t)p->locality)
              : p->near_cpu    ? "nearest the CPUs"
                               : "-");
        textf(pci, sizeof(pci), "%s", p->pci[0] ? p->pci : "-");
        if (p->link == WEFT_RDMA_LINK_IB || p->ngids == 0) {
            put(&o, "  %-12s %-5s %-12s %-10s %-26s %-8s %-10s %-12s %-16s %s: %s\n", pn, "-",
                p->link == WEFT_RDMA_LINK_IB ? "InfiniBand" : "no GID", "-", "-", p->netdevs[0] ? p->netdevs : "-",
                p->state, pci, loc, mark, p->verdict);
        }
        for (int k = 0; k < p->ngids; k++) {
            const weft_rdma_gid_t *g = &p->gids[k];
            textf(gi, sizeof(gi), "%d", g->index);
            if (k == p->best && i == c->chosen) {
                char w[256];
                gid_won(g, w, sizeof(w));
                textf(why, sizeof(why), "WON: %s; %s", w, p->verdict);
            } else if (k == p->best) {
                textf(why, sizeof(why), "lost: %s", p->verdict);
            } else {
                char l[200];
                gid_lost(g, p->best >= 0 ? &p->gids[p->best] : g, l, sizeof(l));
                textf(why, sizeof(why), "lost: %s", l);
            }
            put(&o, "  %-12s %-5s %-12s %-10s %-26s %-8s %-10s %-12s %-16s %s\n", pn, gi, type_column(g),
                family_name(g->family), g->addr, g->ndev[0] ? g->ndev : "-", p->state, pci, loc, why);
        }
        if (p->empty[0]) put(&o, "  %-12s gids %s: empty\n", pn, p->empty);
    }
    return o.truncated;
}

/* ---- handing the choice to UCX -------------------------------------------- */

/* What weft put into the environment at init, so that finalize takes back
 * only its own values and a report tells them from the user's. */
static char set_devices[96], set_gid[16], init_note[640];

/* UCX_TLS leaves the verbs transports in: unset, an exclusion list ("^...")
 * that does not drop "ib" (UCX's alias for all of them), or a list naming
 * one of them ("rc_x", "ud:aux", "all"). */
static int tls_allows_verbs(const char *tls)
{
    static const char *const verbs[] = {"all",  "ib",   "rc",       "rc_v",    "rc_x", "rc_verbs", "rc_mlx5", "ud",
                                        "ud_v", "ud_x", "ud_verbs", "ud_mlx5", "dc",   "dc_x",     "dc_mlx5"};
    int exclude = tls[0] == '^';
    for (const char *s = tls + exclude; *s;) {
        size_t token = strcspn(s, ","), name = strcspn(s, ":,");
        if (name > token) name = token;
        if (exclude && name == 2 && !strncmp(s, "ib", 2)) return 0;
        for (size_t i = 0; !exclude && i < sizeof(verbs) / sizeof(verbs[0]); i++)
            if (strlen(verbs[i]) == name && !strncmp(s, verbs[i], name)) return 1;
        s += token + (s[token] == ',');
    }
    return exclude;
}

void weft_rdma_apply_choice(const weft_rdma_choice_t *c, int ucx_has_verbs, int dry_run, char *msg, size_t len)
{
    char dev[96];
    const char *verb = dry_run ? "would set" : "set";
    if (!c || c->outcome != WEFT_RDMA_CHOSEN) {
        textf(msg, len, "weft sets nothing: UCX keeps its defaults");
        return;
    }
    const weft_rdma_port_t *w = &c->ports[c->chosen];
    textf(dev, sizeof(dev), "%s:%d", w->dev, w->port);
    const char *user_dev = getenv("UCX_NET_DEVICES"), *tls = getenv("UCX_TLS");
    /* a device list the user chose may have another GID table: leave both */
    if (user_dev && (!set_devices[0] || strcmp(user_dev, set_devices))) {
        textf(msg, len, "UCX_NET_DEVICES=%s was set by the user and is kept (weft's choice would be %s)", user_dev,
              dev);
        return;
    }
    if (tls && !tls_allows_verbs(tls)) {
        textf(msg, len, "UCX_TLS=%s leaves out the verbs transports: weft sets nothing (its choice would be %s)", tls,
              dev);
        return;
    }
    if (ucx_has_verbs == 0) {
        textf(msg, len,
              "this UCX has no verbs module (libuct_ib): %s cannot carry weft's traffic and weft sets nothing; "
              "UCX uses TCP (docs/RDMA.md: which UCX builds carry verbs)",
              dev);
        return;
    }
    if (!dry_run) {
        setenv("UCX_NET_DEVICES", dev, 0);
        textf(set_devices, sizeof(set_devices), "%s", dev);
    }
    size_t u = (size_t)snprintf(msg, len, "%s UCX_NET_DEVICES=%s", verb, dev);
    if (c->gid_index >= 0 && u < len) {
        const char *user_gid = getenv("UCX_IB_GID_INDEX");
        char idx[16];
        textf(idx, sizeof(idx), "%d", c->gid_index);
        if (user_gid && (!set_gid[0] || strcmp(user_gid, set_gid))) {
            textf(msg + u, len - u, "; UCX_IB_GID_INDEX=%s was set by the user and is kept (weft's would be %s)",
                  user_gid, idx);
        } else {
            if (!dry_run) {
                setenv("UCX_IB_GID_INDEX", idx, 0);
                textf(set_gid, sizeof(set_gid), "%s", idx);
            }
            textf(msg + u, len - u, " UCX_IB_GID_INDEX=%s", idx);
        }
    }
    if (ucx_has_verbs < 0 && strlen(msg) + 1 < len)
        textf(msg + strlen(msg), len - strlen(msg), " (if this UCX has its verbs module, libuct_ib)");
}

void weft_rdma_init(int local_rank, int ucx_has_verbs)
{
    weft_rdma_input_t in;
    weft_rdma_choice_t *c = NULL;
    char msg[320];
    init_note[0] = '\0';
    if (!weft_cfg.rdma_select) {
        textf(init_note, sizeof(init_note), "WEFT_RDMA_SELECT=0: weft chose nothing at init");
        return;
    }
    weft_rdma_input_init(&in, local_rank);
    if (weft_rdma_select(&in, &c) != WEFT_SUCCESS) {
        weft_warn("RDMA port selection failed (%s); UCX keeps its defaults", weft_last_error());
        textf(init_note, sizeof(init_note), "selection failed at init: UCX kept its defaults");
        return;
    }
    /* Facts about the host are the same on every rank of it: local rank 0
     * warns, the others say it at debug level. */
    int level = local_rank == 0 ? WEFT_LOG_WARN : WEFT_LOG_DEBUG;
    switch (c->outcome) {
    case WEFT_RDMA_NO_DEVICE: break; /* a host without RDMA: nothing to say */
    case WEFT_RDMA_NO_ACTIVE_PORT:
        weft_info_log("RDMA: %s; UCX keeps its defaults", c->why);
        textf(init_note, sizeof(init_note), "at init: nothing set (no ACTIVE port)");
        break;
    case WEFT_RDMA_NO_ROUTABLE_GID:
        weft_log(level, "RDMA: %s. weft sets neither UCX_NET_DEVICES nor UCX_IB_GID_INDEX; UCX keeps its defaults",
                 c->why);
        textf(init_note, sizeof(init_note), "at init: nothing set (no routable GID)");
        break;
    case WEFT_RDMA_CHOSEN:
        weft_rdma_apply_choice(c, ucx_has_verbs, 0, msg, sizeof(msg));
        if (ucx_has_verbs)
            weft_info_log("RDMA: %s; %s", c->why, msg);
        else
            weft_log(level, "RDMA: %s", msg);
        textf(init_note, sizeof(init_note), "at init: %s", msg);
        break;
    }
    weft_rdma_choice_free(c);
}

void weft_rdma_finalize(void)
{
    const char *v;
    if (set_devices[0] && (v = getenv("UCX_NET_DEVICES")) && !strcmp(v, set_devices)) unsetenv("UCX_NET_DEVICES");
    if (set_gid[0] && (v = getenv("UCX_IB_GID_INDEX")) && !strcmp(v, set_gid)) unsetenv("UCX_IB_GID_INDEX");
    set_devices[0] = set_gid[0] = '\0';
}

WEFT_API int weft_rdma_report(char *buf, size_t len)
{
    WEFT_API_ENTER();
    weft_rdma_input_t in;
    weft_rdma_choice_t *c = NULL;
    char note[640];
    int rc, local_rank = 0;
    if (!buf || len == 0) return weft_error(WEFT_ERR_ARG, "weft_rdma_report: NULL or empty buffer");
    buf[0] = '\0';
    if (weft_g.initialized) {
        local_rank = weft_g.local_rank;
    } else {
        /* the variables (WEFT_RDMA_FSROOT) are read at init; read them now */
        if ((rc = weft_config_load()) != WEFT_SUCCESS) return rc;
        const char *lr = getenv("LOCAL_RANK");
        local_rank = lr ? atoi(lr) : 0;
    }
    weft_rdma_input_init(&in, local_rank);
    in.full = 1;
    if ((rc = weft_rdma_select(&in, &c)) != WEFT_SUCCESS) return rc;
    if (!weft_cfg.rdma_select) {
        textf(note, sizeof(note), "WEFT_RDMA_SELECT=0: weft sets nothing at init");
    } else if (weft_g.initialized && init_note[0]) {
        textf(note, sizeof(note), "%s", init_note);
    } else {
        char msg[320];
        weft_rdma_apply_choice(c, -1, 1, msg, sizeof(msg));
        textf(note, sizeof(note), "%s%s", weft_g.initialized ? "" : "at weft_init: ", msg);
    }
    int cut = weft_rdma_format(c, note, buf, len);
    weft_rdma_choice_free(c);
    if (cut) return weft_error(WEFT_ERR_TRUNCATE, "weft_rdma_report: the report needs more than %zu bytes", len);
    return WEFT_SUCCESS;
}
