/* Rendezvous handles (weft.h: weft_rendezvous_open / _close; the join
 * itself is init/init.c's weft_comm_join): the explicit form of the env
 * bootstrap's store, for APIs that pass a handle between processes instead
 * of environment variables (NCCL's unique id).
 *
 * Opening one binds a fresh TCP port on one of this host's addresses and
 * listens on it at once, so that ranks that arrive before the opener joins
 * queue in the backlog instead of being refused; the listening socket
 * waits here until the opener's weft_comm_join hands it to the store. The
 * handle carries the address, the port and a fresh 256-bit secret from
 * which the store's key is derived (jobkey.c), so only holders of the
 * handle can join, and nobody can pose as the store.
 *
 * Handle layout (WEFT_RENDEZVOUS_BYTES = 64, integers big-endian):
 *    0  "WFRV"       4  version (1)   5  family (4 or 6)   6  port (u16)
 *    8  address (16 bytes; IPv4 in the first 4)
 *   24  secret (32 bytes)              56  zero (8 bytes)
 */
#include "bootstrap/bootstrap.h"
#include "bootstrap/hmac.h"
#include "weft_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RDV_MAGIC   "WFRV"
#define RDV_VERSION 1
#define RDV_BACKLOG 1024

/* The rendezvous this process opened and no join has taken yet. */
typedef struct open_rdv {
    uint8_t secret[WEFT_RDV_SECRET];
    int fd;
    struct open_rdv *next;
} open_rdv_t;

static open_rdv_t *opened;
static pthread_mutex_t opened_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- choosing the address ------------------------------------------------ */

/* Interfaces a container runtime or hypervisor makes, which other hosts
 * cannot reach. */
static int is_bridge(const char *name)
{
    static const char *const prefixes[] = {"docker", "veth", "virbr", "br-", "cni", "flannel", "lxc"};
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
        if (!strncmp(name, prefixes[i], strlen(prefixes[i]))) return 1;
    return 0;
}

/* Does interface `name` pass the NCCL_SOCKET_IFNAME-style filter spec?
 * "a,b": names starting a or b; "^a,b": all others; "=a,b": exactly a or b. */
static int name_matches(const char *spec, const char *name)
{
    int exclude = 0, exact = 0;
    if (*spec == '^') {
        exclude = 1;
        spec++;
    }
    if (*spec == '=') {
        exact = 1;
        spec++;
    }
    int hit = 0;
    for (const char *p = spec; *p && !hit;) {
        size_t len = strcspn(p, ",");
        if (len > 0) hit = exact ? strlen(name) == len && !strncmp(name, p, len) : !strncmp(name, p, len);
        p += len;
        if (*p == ',') p++;
    }
    return exclude ? !hit : hit;
}

static int usable_address(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) return 1;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return !IN6_IS_ADDR_LINKLOCAL(a) && !IN6_IS_ADDR_V4MAPPED(a); /* a link-local one needs a scope */
    }
    return 0;
}

/* Picks the address to listen on: with a spec, the first matching up
 * interface (IPv4 before IPv6); without, the first up interface that is
 * neither loopback nor a bridge, else loopback. */
static int pick_address(const char *spec, struct sockaddr_storage *out, char *name, size_t name_len)
{
    struct ifaddrs *ifs = NULL;
    int found = 0;
    if (getifaddrs(&ifs) != 0)
        return weft_error(WEFT_ERR_BOOTSTRAP, "weft_rendezvous_open: getifaddrs: %s", strerror(errno));
    /* passes: 0 IPv4 as wanted, 1 IPv6 as wanted, 2 and 3 loopback (no spec only) */
    for (int pass = 0; pass < 4 && !found; pass++) {
        int want_family = pass % 2 ? AF_INET6 : AF_INET, want_loopback = pass >= 2;
        if (want_loopback && spec && *spec) break;
        for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != want_family || !(i->ifa_flags & IFF_UP)) continue;
            if (!usable_address(i->ifa_addr)) continue;
            int loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
            if (spec && *spec) {
                if (!name_matches(spec, i->ifa_name)) continue;
            } else if (loopback != want_loopback || (!loopback && is_bridge(i->ifa_name))) {
                continue;
            }
            memset(out, 0, sizeof(*out));
            memcpy(out, i->ifa_addr, want_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
            snprintf(name, name_len, "%s", i->ifa_name);
            found = 1;
        }
    }
    freeifaddrs(ifs);
    if (!found)
        return weft_error(
            WEFT_ERR_BOOTSTRAP, "weft_rendezvous_open: no up interface %s%s%s has an address to listen on",
            spec && *spec ? "matches '" : "(not even loopback)", spec && *spec ? spec : "", spec && *spec ? "'" : "");
    return WEFT_SUCCESS;
}

/* ---- the handle ------------------------------------------------------------- */

int weft_rendezvous_parse(const weft_rendezvous_t *h, weft_rdv_info_t *info, const char *fn)
{
    const uint8_t *b = h ? h->bytes : NULL;
    if (!b) return weft_error(WEFT_ERR_ARG, "%s: NULL rendezvous handle", fn);
    int family = b[5];
    unsigned port = (unsigned)b[6] << 8 | b[7];
    int zero = 1;
    for (int i = 56; i < WEFT_RENDEZVOUS_BYTES; i++)
        zero &= b[i] == 0;
    if (memcmp(b, RDV_MAGIC, 4) || b[4] != RDV_VERSION || (family != 4 && family != 6) || port == 0 || !zero)
        return weft_error(WEFT_ERR_ARG,
                          "%s: the handle is not a weft rendezvous (version %d): made by weft_rendezvous_open, "
                          "copied whole?",
                          fn, RDV_VERSION);
    memset(info, 0, sizeof(*info));
    if (!inet_ntop(family == 4 ? AF_INET : AF_INET6, b + 8, info->addr, sizeof(info->addr)))
        return weft_error(WEFT_ERR_ARG, "%s: the handle's address does not parse", fn);
    info->port = (int)port;
    memcpy(info->secret, b + 24, WEFT_RDV_SECRET);
    snprintf(info->where, sizeof(info->where), family == 6 ? "[%s]:%d" : "%s:%d", info->addr, info->port);
    return WEFT_SUCCESS;
}

WEFT_API int weft_rendezvous_open(const char *ifname, weft_rendezvous_t *handle)
{
    WEFT_API_ENTER();
    static const char fn[] = "weft_rendezvous_open";
    struct sockaddr_storage sa;
    socklen_t len;
    char name[IF_NAMESIZE + 1] = "";
    uint8_t secret[WEFT_RDV_SECRET];
    int rc, fd = -1, err;
    open_rdv_t *o = NULL;

    weft_error_clear();
    if (!handle) return weft_error(WEFT_ERR_ARG, "%s: NULL handle pointer", fn);
    memset(handle, 0, sizeof(*handle));
    if ((rc = pick_address(ifname, &sa, name, sizeof(name)))) return rc;
    if ((err = weft_random_bytes(secret, sizeof(secret))) != 0)
        return weft_error(WEFT_ERR_BOOTSTRAP, "%s: no random bytes for the secret: %s", fn, strerror(err));
    len = sa.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    if (sa.ss_family == AF_INET)
        ((struct sockaddr_in *)&sa)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&sa)->sin6_port = 0;
    if ((fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0 ||
        bind(fd, (struct sockaddr *)&sa, len) != 0 || listen(fd, RDV_BACKLOG) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        rc = weft_error(WEFT_ERR_BOOTSTRAP, "%s: cannot listen on interface %s: %s", fn, name, strerror(errno));
        goto fail;
    }
    if (!(o = calloc(1, sizeof(*o)))) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", fn);
        goto fail;
    }
    uint8_t *b = handle->bytes;
    memcpy(b, RDV_MAGIC, 4);
    b[4] = RDV_VERSION;
    if (sa.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&sa;
        b[5] = 4;
        memcpy(b + 6, &in->sin_port, 2); /* already big-endian */
        memcpy(b + 8, &in->sin_addr, 4);
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&sa;
        b[5] = 6;
        memcpy(b + 6, &in6->sin6_port, 2);
        memcpy(b + 8, &in6->sin6_addr, 16);
    }
    memcpy(b + 24, secret, sizeof(secret));
    memcpy(o->secret, secret, sizeof(secret));
    o->fd = fd;
    pthread_mutex_lock(&opened_lock);
    o->next = opened;
    opened = o;
    pthread_mutex_unlock(&opened_lock);
    memset(secret, 0, sizeof(secret));
    weft_rdv_info_t info;
    if (weft_rendezvous_parse(handle, &info, fn) == WEFT_SUCCESS)
        weft_debug("%s: listening on %s (interface %s)", fn, info.where, name);
    return WEFT_SUCCESS;
fail:
    if (fd >= 0) close(fd);
    memset(secret, 0, sizeof(secret));
    memset(handle, 0, sizeof(*handle));
    return rc;
}

int weft_rendezvous_take(const weft_rendezvous_t *handle)
{
    int fd = -1;
    pthread_mutex_lock(&opened_lock);
    for (open_rdv_t **p = &opened; *p; p = &(*p)->next)
        if (!memcmp((*p)->secret, handle->bytes + 24, WEFT_RDV_SECRET)) {
            open_rdv_t *o = *p;
            *p = o->next;
            fd = o->fd;
            memset(o, 0, sizeof(*o));
            free(o);
            break;
        }
    pthread_mutex_unlock(&opened_lock);
    return fd;
}

WEFT_API int weft_rendezvous_close(const weft_rendezvous_t *handle)
{
    WEFT_API_ENTER();
    weft_rdv_info_t info;
    int rc = weft_rendezvous_parse(handle, &info, "weft_rendezvous_close");
    if (rc) return rc;
    memset(&info, 0, sizeof(info));
    int fd = weft_rendezvous_take(handle);
    if (fd >= 0) close(fd);
    return WEFT_SUCCESS;
}
