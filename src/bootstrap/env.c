/* The env bootstrap (torchrun / Kubernetes style). RANK, WORLD_SIZE,
 * MASTER_ADDR and MASTER_PORT name this rank and rank 0's TCP store; rank 0
 * serves the store from a thread and every rank, rank 0 included, is a
 * client of it. The store runs rounds (allgather; gather to rank 0;
 * broadcast from rank 0) and keeps each rank's published blob (its UCX
 * address) for the ranks that fetch it on demand.
 *
 * The pieces: env_wire.h / env_wire.c the protocol (header, kinds, limits),
 * env_server.c the store, env_client.c the rank's side of it, env.h what
 * they share; this file reads the environment and builds the bootstrap.
 *
 * Deadlines: each CONTRIB carries the client's remaining time, so the store
 * needs no clock agreement and no setting of its own. A round's deadline is
 * the earliest deadline among the contributions it has received; when it
 * passes, the store fails the round for every rank (those waiting now and
 * those that come later) with a message listing exactly the ranks that had
 * not contributed. Clients wait for that answer until their own deadline plus
 * CLIENT_GRACE, then fail by themselves (rank 0's store is hung or gone).
 * A rank that disconnects, or says goodbye, fails the pending and all later
 * rounds at once with WEFT_ERR_PEER_LOST instead of waiting for a deadline.
 *
 * Liveness: a rank's connection closing without a goodbye means its process
 * ended (the kernel closes a killed process's sockets), so the store tells
 * every other rank at once with a LOST notice, and the progress engine of
 * each fails the collectives that rank was part of (weft_rank_lost). When
 * rank 0 itself dies, every client sees its store connection close without
 * a notice and reports rank 0 lost the same way.
 *
 * Membership: every connection proves it knows the job key (jobkey.h)
 * before it may take a rank, and the store proves it too, in one
 * challenge-response each way (env_wire.h); rank 0 listens only on
 * MASTER_ADDR's address. docs/SECURITY.md says what this protects.
 */
#include "bootstrap/env.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

/* "host:port", with brackets around an IPv6 literal. */
static void format_where(char *buf, size_t cap, const char *host, int port)
{
    if (strchr(host, ':'))
        snprintf(buf, cap, "[%s]:%d", host, port);
    else
        snprintf(buf, cap, "%s:%d", host, port);
}

static int env_long(const char *who, const char *name, long lo, long hi, const char *extra, long *out, int *present)
{
    const char *v = getenv(name);
    char *end;
    long x;

    if (!v) {
        if (present) {
            *present = 0;
            return WEFT_SUCCESS;
        }
        return weft_error(WEFT_ERR_ARG, "%s: %s is not set", who, name);
    }
    errno = 0;
    x = strtol(v, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\n')
        end++;
    if (end == v || *end || errno == ERANGE || x < lo || x > hi)
        return weft_error(WEFT_ERR_ARG, "%s: %s='%.64s' is not an integer in [%ld, %ld]%s", who, name, v, lo, hi,
                          extra);
    *out = x;
    if (present) *present = 1;
    return WEFT_SUCCESS;
}

int weft_env_vars_read(env_vars_t *v, const char *who)
{
    long size, rank, port, lsize = -1, lrank = -1;
    int have_lsize = 0, have_lrank = 0, rc;
    char extra[48];
    const char *addr;

    WEFT_CHECK_GOTO(env_long(who, "WORLD_SIZE", 1, STORE_MAX_WORLD, "", &size, NULL), rc, out);
    snprintf(extra, sizeof(extra), " (WORLD_SIZE=%ld)", size);
    WEFT_CHECK_GOTO(env_long(who, "RANK", 0, size - 1, extra, &rank, NULL), rc, out);
    WEFT_CHECK_GOTO(env_long(who, "MASTER_PORT", 1, 65535, "", &port, NULL), rc, out);
    addr = getenv("MASTER_ADDR");
    if (!addr || !*addr || strlen(addr) >= sizeof(v->addr)) {
        rc = weft_error(WEFT_ERR_ARG, "%s: MASTER_ADDR='%.64s' is not a host name or address", who,
                        addr ? addr : "(unset)");
        goto out;
    }
    WEFT_CHECK_GOTO(env_long(who, "LOCAL_WORLD_SIZE", 1, size, extra, &lsize, &have_lsize), rc, out);
    if (have_lsize) snprintf(extra, sizeof(extra), " (LOCAL_WORLD_SIZE=%ld)", lsize);
    WEFT_CHECK_GOTO(env_long(who, "LOCAL_RANK", 0, (have_lsize ? lsize : size) - 1, extra, &lrank, &have_lrank), rc,
                    out);
    v->rank = (int)rank;
    v->size = (int)size;
    v->port = (int)port;
    v->local_rank = have_lrank ? (int)lrank : -1;
    v->local_size = have_lsize ? (int)lsize : -1;
    snprintf(v->addr, sizeof(v->addr), "%s", addr);
    format_where(v->where, sizeof(v->where), addr, (int)port);
out:
    return rc;
}

int weft_bootstrap_env_detected(void)
{
    static const char *const names[] = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *v = getenv(names[i]);
        if (!v || !*v) return 0;
    }
    return 1;
}

/* Says once per process how the store is protected: without a secret,
 * anyone who reaches it can take a rank that has not arrived yet. */
static void log_protection(const env_boot_t *eb)
{
    static int said;
    if (said++) return;
    if (eb->key.keyed)
        weft_info_log("env bootstrap: the store at %s is authenticated with the job secret from %s", eb->where,
                      eb->key.source);
    else
        weft_info_log("env bootstrap: the store at %s is not authenticated: any process that reaches it can join as a "
                      "rank that has not arrived yet. Set WEFT_JOB_SECRET (or WEFT_JOB_SECRET_FILE) to the same "
                      "secret on every rank (weftrun sets one itself); see docs/SECURITY.md",
                      eb->where);
}

/* A rank's bootstrap state for the store at addr:port (where: "addr:port"
 * for messages), or NULL (out of memory). */
static env_boot_t *boot_new(int rank, int size, const char *addr, int port, const char *where)
{
    env_boot_t *eb = calloc(1, sizeof(*eb));
    if (!eb) return NULL;
    eb->fd = -1;
    eb->via_leader = -1;
    eb->first_lost = -1;
    eb->rank = rank;
    eb->size = size;
    eb->port = port;
    snprintf(eb->addr, sizeof(eb->addr), "%s", addr);
    snprintf(eb->where, sizeof(eb->where), "%s", where);
    return eb;
}

#define RELAY_AUTO_MIN 1024 /* WEFT_STORE_RELAY=auto: relays in worlds larger than this */

/* Whether this job's ranks reach the store through node relays: every
 * rank decides alike from the same variables. */
static int relays_used(const env_boot_t *eb, const env_vars_t *v)
{
    static int warned;
    int on = !strcasecmp(weft_cfg.store_relay, "on");
    if (!on && (strcasecmp(weft_cfg.store_relay, "auto") || v->size <= RELAY_AUTO_MIN)) return 0;
    const char *lacks = v->local_rank < 0 || v->local_size < 1 ? "LOCAL_RANK and LOCAL_WORLD_SIZE"
                        : v->local_size == 1                   ? "LOCAL_WORLD_SIZE > 1"
                        : !eb->key.keyed                       ? "a job secret (the relay's name is derived from it)"
                                                               : NULL;
    if (lacks && on && !warned++)
        weft_warn("env bootstrap: WEFT_STORE_RELAY=on needs %s: every rank connects to rank 0's store directly", lacks);
    return lacks == NULL;
}

/* Starts the store when serve says how (this rank serves it), connects eb
 * to it and makes *bs the env bootstrap over eb, called name. eb is freed
 * when this fails. */
static int boot_start(weft_bootstrap_t *bs, env_boot_t *eb, const env_serve_t *serve, const char *name, int local_rank,
                      int local_size, double deadline)
{
    int rc;
    if (serve) WEFT_CHECK_GOTO(weft_env_server_start(&eb->srv, serve, &eb->thread), rc, out);
    /* The node's first rank relays for its node (rank 0's node too). A
     * relay that cannot start fails nobody: its node's ranks connect to
     * the store directly after a while. */
    if (eb->via_leader >= 0 && eb->via_leader == eb->rank &&
        weft_env_relay_start(&eb->relay, eb, eb->rank, local_size, deadline) != WEFT_SUCCESS) {
        weft_warn("%s; this node's ranks connect to the store directly", weft_last_error());
        weft_error_clear();
    }
    WEFT_CHECK_GOTO(weft_env_client_connect(eb, deadline), rc, out);
    bs->name = name;
    bs->rank = eb->rank;
    bs->size = eb->size;
    bs->local_rank = local_rank;
    bs->local_size = local_size;
    bs->allgather = weft_env_allgather;
    bs->gather = weft_env_gather;
    bs->bcast = weft_env_bcast;
    bs->barrier = weft_env_barrier;
    bs->put = weft_env_put;
    bs->get = weft_env_get;
    bs->finalize = weft_env_finalize;
    bs->poll_lost = weft_env_poll_lost;
    bs->impl = eb;
    return WEFT_SUCCESS;
out:
    weft_env_free(eb, 0, 0);
    return rc;
}

/* The socket under WEFT_STORE_FD: a TCP one listening on port. */
static int inherited_listener_check(const char *text, int port, int *out)
{
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (end == text || *end || v < 0 || v > 1 << 20)
        return weft_error(WEFT_ERR_ARG, "env bootstrap: WEFT_STORE_FD='%s' is not a file descriptor", text);
    int fd = (int)v, listening = 0;
    socklen_t ol = sizeof(listening);
    struct sockaddr_storage sa;
    socklen_t sl = sizeof(sa);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &ol) != 0 || !listening ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0 || (sa.ss_family != AF_INET && sa.ss_family != AF_INET6))
        return weft_error(WEFT_ERR_ARG, "env bootstrap: WEFT_STORE_FD=%d is not a TCP socket listening for the store "
                          "(%s): it is weftrun's to set, for rank 0 only", fd, listening ? "not TCP" : "not listening");
    int bound = ntohs(sa.ss_family == AF_INET ? ((struct sockaddr_in *)&sa)->sin_port
                                              : ((struct sockaddr_in6 *)&sa)->sin6_port);
    if (bound != port)
        return weft_error(WEFT_ERR_ARG, "env bootstrap: WEFT_STORE_FD=%d listens on port %d, not MASTER_PORT=%d", fd,
                          bound, port);
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return weft_error(WEFT_ERR_ARG, "env bootstrap: WEFT_STORE_FD=%d: %s", fd, strerror(errno));
    weft_debug("env store: serving on the inherited socket WEFT_STORE_FD=%d (port %d)", fd, port);
    *out = fd;
    return WEFT_SUCCESS;
}

/* WEFT_STORE_FD (weftrun's, for rank 0): a socket listening on MASTER_PORT
 * that this process inherited; the store serves on it (and no child of
 * this process inherits it in turn). The variable may also reach a process
 * that did not inherit the socket (a job started from inside a rank, with
 * a copy of its environment): anything else under the number is ignored
 * with a warning, and rank 0 listens on MASTER_PORT itself. */
static void inherited_listener(const char *text, int port, int *out)
{
    if (inherited_listener_check(text, port, out) == WEFT_SUCCESS) return;
    weft_warn("%s; ignored: rank 0 listens on MASTER_PORT=%d itself", weft_last_error(), port);
    weft_error_clear();
    *out = -1;
}

int weft_bootstrap_env_init(weft_bootstrap_t *bs, double deadline)
{
    env_boot_t *eb;
    env_vars_t v;
    int rc;

    if (!bs) return weft_error(WEFT_ERR_ARG, "env bootstrap: NULL bootstrap");
    if ((rc = weft_env_vars_read(&v, "env bootstrap"))) return rc;
    if (!(eb = boot_new(v.rank, v.size, v.addr, v.port, v.where)))
        return weft_error(WEFT_ERR_NO_MEMORY, "env bootstrap: out of memory");
    if ((rc = weft_job_key_load(&eb->key, "env bootstrap"))) {
        weft_env_free(eb, 0, 0);
        return rc;
    }
    log_protection(eb);
    int listen_fd = -1;
    if (eb->rank == 0 && weft_cfg.store_fd[0]) inherited_listener(weft_cfg.store_fd, eb->port, &listen_fd);
    unsetenv("WEFT_STORE_FD"); /* taken (or not weftrun's): a child of this process gets no stale number */
    int relay = relays_used(eb, &v);
    if (relay) eb->via_leader = eb->rank - v.local_rank;
    env_serve_t o = {.size = eb->size,
                     .relay_nodes = relay ? (eb->size + v.local_size - 1) / v.local_size : 0,
                     .local_size = v.local_size,
                     .addr = eb->addr,
                     .port = eb->port,
                     .where = eb->where,
                     .key = &eb->key,
                     .bind_any = weft_cfg.store_bind_any,
                     .deadline = deadline,
                     .listen_fd = listen_fd};
    return boot_start(bs, eb, eb->rank == 0 ? &o : NULL, "env", v.local_rank, v.local_size, deadline);
}

int weft_bootstrap_rendezvous_init(weft_bootstrap_t *bs, const weft_rdv_info_t *info, int rank, int size, int listen_fd,
                                   int want_lost, double deadline)
{
    env_boot_t *eb = boot_new(rank, size, info->addr, info->port, info->where);
    int rc = eb ? weft_job_key_from_secret(&eb->key, info->secret, sizeof(info->secret), "the rendezvous handle")
                : weft_error(WEFT_ERR_NO_MEMORY, "rendezvous: out of memory");
    if (rc) {
        if (listen_fd >= 0) close(listen_fd);
        if (eb) weft_env_free(eb, 0, 0);
        return rc;
    }
    eb->no_lost = !want_lost;
    /* The opener serves the store on the socket it listens on already (the
     * store owns it from here; lost only if the store cannot start: out of
     * memory). */
    env_serve_t o = {.size = size,
                     .local_size = -1,
                     .addr = eb->addr,
                     .port = eb->port,
                     .where = eb->where,
                     .key = &eb->key,
                     .deadline = deadline,
                     .listen_fd = listen_fd};
    return boot_start(bs, eb, listen_fd >= 0 ? &o : NULL, "rendezvous", -1, -1, deadline);
}

int weft_bootstrap_env_store_stats(weft_bootstrap_t *bs, weft_store_stats_t *out)
{
    env_boot_t *eb = bs && bs->name && !strcmp(bs->name, "env") ? bs->impl : NULL;
    if (!eb || !eb->srv) return weft_error_quiet(WEFT_ERR_UNSUPPORTED, "this rank serves no env store");
    weft_env_server_stats(eb->srv, out);
    return WEFT_SUCCESS;
}
