/* Communicators: the unique id (a weft rendezvous handle), init from it
 * (weft_comm_join: the first communicator of a process forms weft's world,
 * later ones are groups of it, and the world closes when the last one is
 * destroyed), the config's fields (weft options and hints, or logged as
 * ignored with the reason), split, shrink, finalize, destroy, abort,
 * revoke, and the queries. */
#include "nccl_impl.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The unique id: the rendezvous handle, then "WNCL" and a version. */
#define ID_TAG     "WNCL"
#define ID_VERSION 1
#define ID_TAG_AT  64

_Static_assert(sizeof(weft_rendezvous_t) <= ID_TAG_AT, "a rendezvous handle fits the unique id");
_Static_assert(sizeof(ncclConfig_t) == 80, "ncclConfig_t has NCCL 2.28's layout");
_Static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES, "ncclUniqueId is 128 bytes");

/* ---- ids ------------------------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

static ncclResult_t id_check(const ncclUniqueId *id, const char *fn)
{
    if (memcmp(id->internal + ID_TAG_AT, ID_TAG, 4) || id->internal[ID_TAG_AT + 4] != ID_VERSION)
        return nccl_fail(ncclInvalidArgument,
                         "%s: the unique id was not made by weft's ncclGetUniqueId (all ranks must use weft's "
                         "libnccl.so.2, and the id must be passed on whole)",
                         fn);
    return ncclSuccess;
}

/* The same on every member: from the id's secret bytes. */
static uint64_t id_hash(const ncclUniqueId *id)
{
    uint64_t h = UINT64_C(0x6e63636c2d776674);
    for (int i = 0; i < ID_TAG_AT; i += 8) {
        uint64_t w;
        memcpy(&w, id->internal + i, 8);
        h = mix64(h ^ w);
    }
    return h;
}

NCCL_DEF(ncclResult_t, GetUniqueId, (ncclUniqueId * uniqueId))
{
    static int said;
    if (!uniqueId) return nccl_fail(ncclInvalidArgument, "ncclGetUniqueId: NULL uniqueId pointer");
    memset(uniqueId, 0, sizeof(*uniqueId));
    const char *comm_id = getenv("NCCL_COMM_ID");
    if (comm_id && *comm_id && !said++)
        nccl_log(NL_WARN,
                 "NCCL_COMM_ID=%s is ignored: weft's unique id names a fresh port that ncclGetUniqueId listens on "
                 "(NCCL_SOCKET_IFNAME chooses the interface)",
                 comm_id);
    weft_rendezvous_t h;
    NCCL_LOCK();
    int rc = weft_rendezvous_open(getenv("NCCL_SOCKET_IFNAME"), &h);
    NCCL_UNLOCK();
    if (rc) return nccl_weft_fail(rc, "ncclGetUniqueId");
    memcpy(uniqueId->internal, &h, sizeof(h));
    memcpy(uniqueId->internal + ID_TAG_AT, ID_TAG, 4);
    uniqueId->internal[ID_TAG_AT + 4] = ID_VERSION;
    memset(&h, 0, sizeof(h));
    return ncclSuccess;
}

/* ---- the config ------------------------------------------------------------ */

static void config_defaults(ncclConfig_t *c)
{
    const ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
    *c = init;
}

/* Copies the caller's config (up to its own size: an older NCCL's shorter
 * layout leaves the later fields unset). */
static ncclResult_t config_read(const ncclConfig_t *in, ncclConfig_t *out, const char *fn)
{
    config_defaults(out);
    if (!in) return ncclSuccess;
    if (in->magic != NCCL_CONFIG_MAGIC)
        return nccl_fail(ncclInvalidArgument,
                         "%s: the config's magic is 0x%x, not 0x%x: start it from NCCL_CONFIG_INITIALIZER", fn,
                         in->magic, (unsigned)NCCL_CONFIG_MAGIC);
    size_t first = offsetof(ncclConfig_t, blocking) + sizeof(int);
    if (in->size < first || in->size > ((size_t)1 << 16))
        return nccl_fail(ncclInvalidArgument, "%s: the config's size is %zu bytes: not an ncclConfig_t", fn, in->size);
    size_t n = in->size < sizeof(*out) ? in->size : sizeof(*out);
    memcpy((char *)out + offsetof(ncclConfig_t, blocking), (const char *)in + offsetof(ncclConfig_t, blocking),
           n - offsetof(ncclConfig_t, blocking));
    out->size = sizeof(*out);
    out->version = in->version;
    if (in->size > sizeof(*out))
        nccl_log(NL_INFO,
                 "%s: the config is %zu bytes (a newer NCCL's, version %u); fields past NCCL %d.%d's are "
                 "ignored",
                 fn, in->size, in->version, NCCL_MAJOR, NCCL_MINOR);
    if (out->blocking != NCCL_CONFIG_UNDEF_INT && out->blocking != 0 && out->blocking != 1)
        return nccl_fail(ncclInvalidArgument, "%s: config.blocking is %d, not 0 or 1", fn, out->blocking);
    if (out->commName && strlen(out->commName) >= 64)
        nccl_log(NL_INFO, "%s: config.commName '%.40s...' is cut to 63 characters", fn, out->commName);
    return ncclSuccess;
}

/* The weft options a config asks for: its name, the device, and the
 * CTA bounds as coll/cuda's hints (weft decides and logs each hint). */
static int config_options(const ncclConfig_t *c, int device, const char *default_name, weft_options_t *opts)
{
    char v[32], name[64];
    int rc = weft_options_create(opts);
    if (rc) return rc;
    snprintf(name, sizeof(name), "%s", c->commName && c->commName[0] ? c->commName : default_name);
    if (name[0] && (rc = weft_options_set_name(*opts, name))) goto fail;
    if (device >= 0 && (rc = weft_options_set_device(*opts, device))) goto fail;
    const struct {
        int value;
        const char *hint;
    } hints[] = {{c->cgaClusterSize, "cga_cluster_size"}, {c->minCTAs, "min_ctas"}, {c->maxCTAs, "max_ctas"}};
    for (size_t i = 0; i < sizeof(hints) / sizeof(hints[0]); i++)
        if (hints[i].value != NCCL_CONFIG_UNDEF_INT) {
            snprintf(v, sizeof(v), "%d", hints[i].value);
            if ((rc = weft_options_set_hint(*opts, hints[i].hint, v))) goto fail;
        }
    return WEFT_SUCCESS;
fail:
    weft_options_free(opts);
    return rc;
}

/* One line for each field the program set that weft does not act on (a
 * warning on rank 0, the others at INFO), and for those it does at INFO. */
static void config_report(ncclComm_t comm, const ncclConfig_t *c)
{
    int level = comm->rank == 0 ? NL_WARN : NL_INFO;
    const struct {
        int set;
        const char *field;
        int value;
        const char *why;
    } ignored[] = {
        {c->splitShare != NCCL_CONFIG_UNDEF_INT, "splitShare", c->splitShare,
         "weft's communicators always share the process's UCX worker and endpoints; there are no per-communicator "
         "buffers to share or to keep apart"},
        {c->trafficClass != NCCL_CONFIG_UNDEF_INT, "trafficClass", c->trafficClass,
         "UCX sets the traffic class for the whole process (UCX_IB_TRAFFIC_CLASS)"},
        {c->collnetEnable != NCCL_CONFIG_UNDEF_INT, "collnetEnable", c->collnetEnable,
         "weft has no CollNet / SHARP in-network reductions"},
        {c->CTAPolicy != NCCL_CONFIG_UNDEF_INT, "CTAPolicy", c->CTAPolicy,
         "weft's kernels size their grids per call; minCTAs / maxCTAs bound them"},
        {c->shrinkShare != NCCL_CONFIG_UNDEF_INT, "shrinkShare", c->shrinkShare,
         "weft's communicators always share the process's transport; there is nothing per communicator to share"},
        {c->nvlsCTAs != NCCL_CONFIG_UNDEF_INT, "nvlsCTAs", c->nvlsCTAs, "weft has no NVLink SHARP (NVLS) algorithms"},
        {c->nChannelsPerNetPeer != NCCL_CONFIG_UNDEF_INT, "nChannelsPerNetPeer", c->nChannelsPerNetPeer,
         "weft's network traffic is UCX's, which has no NCCL channels"},
        {c->nvlinkCentricSched != NCCL_CONFIG_UNDEF_INT, "nvlinkCentricSched", c->nvlinkCentricSched,
         "weft has no NVLink-centric scheduler"},
    };
    for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
        if (ignored[i].set)
            nccl_log(level, "comm %s: config.%s=%d ignored: %s", comm->name, ignored[i].field, ignored[i].value,
                     ignored[i].why);
    if (c->netName)
        nccl_log(level,
                 "comm %s: config.netName=%s ignored: weft moves data with UCX, chosen by UCX_TLS / UCX_NET_DEVICES, "
                 "not by network plugin",
                 comm->name, c->netName);
    nccl_log(NL_INFO, "comm %s: rank %d of %d, device %d, %s%s%s", comm->name, comm->rank, comm->nranks, comm->device,
             comm->blocking ? "blocking"
                            : "nonblocking (calls finish before they return; they "
                              "report ncclInProgress as NCCL's would)",
             c->commName ? ", config.commName applied" : "",
             c->minCTAs != NCCL_CONFIG_UNDEF_INT || c->maxCTAs != NCCL_CONFIG_UNDEF_INT ||
                     c->cgaClusterSize != NCCL_CONFIG_UNDEF_INT
                 ? ", CTA fields passed as weft hints (min_ctas, max_ctas, cga_cluster_size: weft logs each)"
                 : "");
}

/* NCCL_* variables weft does not read: said once per process. */
static void env_report(int rank)
{
    static int said;
    extern char **environ;
    static const char *const honoured[] = {"NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_SOCKET_IFNAME", "NCCL_COMM_ID",
                                           "NCCL_DEBUG_SUBSYS"};
    char list[512] = "";
    size_t used = 0;
    if (said++) return;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "NCCL_", 5)) continue;
        size_t len = strcspn(*e, "=");
        int known = 0;
        for (size_t i = 0; i < sizeof(honoured) / sizeof(honoured[0]) && !known; i++)
            known = strlen(honoured[i]) == len && !strncmp(*e, honoured[i], len);
        if (!known && used + len + 3 < sizeof(list))
            used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%.*s", used ? ", " : "", (int)len, *e);
    }
    if (used)
        nccl_log(rank == 0 ? NL_WARN : NL_INFO,
                 "ignored (weft's own WEFT_* variables and UCX's tune it instead; docs/NCCL.md): %s", list);
}

/* ---- weft's world ---------------------------------------------------------------- */

/* Communicators on weft, and whether this library formed weft's world (the
 * first of them did, by its join): the world closes (weft_finalize, which
 * waits for the other members to close theirs) when the last of them is
 * destroyed, so that a later communicator may form a new one, and the
 * processes part without the store reporting them lost. A world the
 * program made itself (weft_init) is the program's. Under nccl_lock. */
static int weft_comms_alive, world_ours;

static void world_hold(int formed)
{
    weft_comms_alive++;
    if (formed) world_ours = 1;
}

/* graceful: the last communicator was destroyed (not aborted, after which
 * the other members may be gone or stuck: the world is then left open). */
static void world_release(int graceful)
{
    if (--weft_comms_alive > 0 || !world_ours) return;
    world_ours = 0;
    if (!graceful) {
        nccl_log(NL_INFO, "the last communicator was aborted: weft's world stays open until the process ends");
        return;
    }
    nccl_log(NL_INFO, "the last communicator is destroyed: weft's world closes (weft_finalize)");
    int wrc = weft_finalize();
    if (wrc) nccl_log(NL_WARN, "closing weft's world: %s (%s)", weft_last_error(), weft_strerror(wrc));
}

/* ---- communicator objects --------------------------------------------------- */

ncclResult_t nccl_comm_check(ncclComm_t comm, const char *fn)
{
    if (NCCL_UNLIKELY(!comm)) return nccl_fail(ncclInvalidArgument, "%s: the communicator is NULL", fn);
    if (NCCL_UNLIKELY(comm->magic != NCCL_COMM_MAGIC))
        return nccl_fail(ncclInvalidArgument, "%s: %p is not a live communicator (destroyed, or never made)", fn,
                         (void *)comm);
    return ncclSuccess;
}

ncclResult_t nccl_comm_usable(ncclComm_t comm, const char *fn)
{
    ncclResult_t rc = nccl_comm_check(comm, fn);
    if (NCCL_UNLIKELY(rc)) return rc;
    if (NCCL_UNLIKELY(comm->finalized || comm->aborted))
        return nccl_fail(ncclInvalidUsage, "%s: comm %s was %s", fn, comm->name,
                         comm->aborted ? "aborted or revoked" : "finalized");
    return ncclSuccess;
}

void nccl_comm_note(ncclComm_t comm, ncclResult_t rc)
{
    if (comm &&
        (rc == ncclRemoteError || rc == ncclSystemError || rc == ncclInternalError || rc == ncclUnhandledCudaError))
        atomic_store(&comm->async, (int)rc);
}

ncclResult_t nccl_comm_quiesce(ncclComm_t comm, const char *fn)
{
    ncclResult_t out = ncclSuccess;
    for (int i = 0; i < comm->nstreams; i++) {
        int r = nccl_cuda_stream_sync(comm->streams[i]);
        if (r && out == ncclSuccess)
            out = nccl_fail(ncclUnhandledCudaError, "%s: comm %s: waiting for stream %p: %s", fn, comm->name,
                            comm->streams[i], nccl_cuda_error(r));
    }
    comm->nstreams = 0;
    return out;
}

static ncclComm_t comm_new(int rank, int nranks, int device, const ncclConfig_t *cfg, uint64_t id)
{
    ncclComm_t c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->magic = NCCL_COMM_MAGIC;
    c->rank = rank;
    c->nranks = nranks;
    c->device = device;
    c->config = *cfg;
    c->config.commName = NULL; /* the caller's string may go; c->name keeps it */
    c->config.netName = NULL;
    c->blocking = cfg->blocking != 0;
    c->id = id;
    atomic_init(&c->async, ncclSuccess);
    return c;
}

static void comm_free(ncclComm_t c)
{
    nccl_coll_comm_release(c);
    c->magic = 0;
    free(c);
}

/* The return of a creation that worked: ncclInProgress for a nonblocking
 * communicator (its work is done; ncclCommGetAsyncError says ncclSuccess),
 * as NCCL's nonblocking calls report. */
static ncclResult_t created(ncclComm_t c)
{
    return c->blocking ? ncclSuccess : ncclInProgress;
}

/* Fills in a new communicator's weft side from wc (NULL: a one-rank
 * communicator without weft) and says what the config did. */
static ncclResult_t comm_finish(ncclComm_t c, weft_comm_t wc, const ncclConfig_t *cfg, const char *fallback_name)
{
    c->wc = wc;
    if (wc) {
        snprintf(c->name, sizeof(c->name), "%s", weft_comm_name(wc));
        int r = 0, n = 0;
        weft_comm_rank(wc, &r);
        weft_comm_size(wc, &n);
        if (r != c->rank || n != c->nranks)
            return nccl_fail(ncclInternalError, "weft gave rank %d of %d for rank %d of %d", r, n, c->rank, c->nranks);
    } else {
        snprintf(c->name, sizeof(c->name), "%s", cfg->commName && cfg->commName[0] ? cfg->commName : fallback_name);
    }
    config_report(c, cfg);
    env_report(c->rank);
    return ncclSuccess;
}

/* ---- init ---------------------------------------------------------------------- */

static ncclResult_t comm_init(ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank, const ncclConfig_t *config,
                              const char *fn)
{
    ncclConfig_t cfg;
    ncclResult_t rc;
    weft_options_t opts = WEFT_OPTIONS_NULL;
    weft_comm_t wc = WEFT_COMM_NULL;
    int flag = 0, device = -1, wrc;

    if (!out) return nccl_fail(ncclInvalidArgument, "%s: NULL comm pointer", fn);
    *out = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return nccl_fail(ncclInvalidArgument, "%s: rank %d of %d ranks: need 0 <= rank < nranks", fn, rank, nranks);
    if ((rc = id_check(id, fn)) || (rc = config_read(config, &cfg, fn))) return rc;
    weft_rendezvous_t h;
    memcpy(&h, id->internal, sizeof(h));
    nccl_cuda_current_device(&device);
    ncclComm_t c = comm_new(rank, nranks, device, &cfg, id_hash(id));
    if (!c) return nccl_fail(ncclSystemError, "%s: out of memory", fn);

    NCCL_LOCK();
    weft_initialized(&flag);
    if (nranks == 1 && !flag) {
        /* One rank in a process without weft yet: it needs no peer, and
         * weft's world is left to the first communicator that has some. */
        weft_rendezvous_close(&h);
        NCCL_UNLOCK();
        rc = comm_finish(c, WEFT_COMM_NULL, &cfg, "nccl.self");
        goto done;
    }
    char defname[32];
    snprintf(defname, sizeof(defname), "nccl.%08x", (unsigned)(c->id & 0xffffffffu));
    if ((wrc = config_options(&cfg, device, defname, &opts)) == WEFT_SUCCESS) {
        wrc = weft_comm_join(&h, rank, nranks, opts, &wc);
        weft_options_free(&opts);
    }
    rc = wrc ? nccl_weft_fail(wrc, fn) : comm_finish(c, wc, &cfg, defname);
    if (!wrc) world_hold(!flag);
    NCCL_UNLOCK();
done:
    memset(&h, 0, sizeof(h));
    if (rc) {
        if (wc) {
            NCCL_LOCK();
            weft_comm_free(&wc);
            world_release(1);
            NCCL_UNLOCK();
        }
        comm_free(c);
        return rc;
    }
    *out = c;
    return created(c);
}

NCCL_DEF(ncclResult_t, CommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank))
{
    return comm_init(comm, nranks, &commId, rank, NULL, "ncclCommInitRank");
}

NCCL_DEF(ncclResult_t, CommInitRankConfig,
         (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config))
{
    return comm_init(comm, nranks, &commId, rank, config, "ncclCommInitRankConfig");
}

NCCL_DEF(ncclResult_t, CommInitRankScalable,
         (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds, ncclConfig_t *config))
{
    static const char fn[] = "ncclCommInitRankScalable";
    if (nId < 1 || !commIds)
        return nccl_fail(ncclInvalidArgument, "%s: %s", fn, !commIds ? "NULL commIds" : "nId must be at least 1");
    /* One store is enough for weft: the first id's. Ids this process made
     * for the others are closed. */
    for (int i = 1; i < nId; i++)
        if (id_check(&commIds[i], fn) == ncclSuccess) {
            weft_rendezvous_t h;
            memcpy(&h, commIds[i].internal, sizeof(h));
            NCCL_LOCK();
            weft_rendezvous_close(&h);
            NCCL_UNLOCK();
        }
    if (nId > 1)
        nccl_log(NL_INFO,
                 "%s: %d ids given; weft bootstraps through the first one's store (weft's store serves "
                 "thousands of ranks)",
                 fn, nId);
    return comm_init(newcomm, nranks, &commIds[0], myrank, config, fn);
}

NCCL_DEF(ncclResult_t, CommInitAll, (ncclComm_t * comm, int ndev, const int *devlist))
{
    static const char fn[] = "ncclCommInitAll";
    if (!comm) return nccl_fail(ncclInvalidArgument, "%s: NULL comm array", fn);
    if (ndev < 1) return nccl_fail(ncclInvalidArgument, "%s: ndev is %d", fn, ndev);
    if (ndev > 1)
        return nccl_fail(ncclInvalidUsage,
                         "%s: %d devices in one process: weft runs one rank per process (start one process per GPU, "
                         "each with ncclCommInitRank)",
                         fn, ndev);
    ncclUniqueId id;
    ncclResult_t rc = pncclGetUniqueId(&id);
    if (rc) return rc;
    rc = comm_init(comm, 1, &id, 0, NULL, fn);
    if (rc == ncclSuccess && devlist) comm[0]->device = devlist[0];
    return rc;
}

/* ---- split and shrink --------------------------------------------------------------- */

/* A child's config: the caller's, else the parent's (as NCCL inherits). */
static ncclResult_t child_config(ncclComm_t parent, const ncclConfig_t *config, ncclConfig_t *cfg, const char *fn)
{
    if (config) return config_read(config, cfg, fn);
    *cfg = parent->config;
    return ncclSuccess;
}

NCCL_DEF(ncclResult_t, CommSplit, (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config))
{
    static const char fn[] = "ncclCommSplit";
    ncclConfig_t cfg;
    ncclResult_t rc;
    weft_options_t opts = WEFT_OPTIONS_NULL;
    weft_comm_t wc = WEFT_COMM_NULL;
    int wrc;

    if ((rc = nccl_comm_usable(comm, fn))) return rc;
    if (!newcomm) return nccl_fail(ncclInvalidArgument, "%s: NULL newcomm pointer", fn);
    *newcomm = NULL;
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
        return nccl_fail(ncclInvalidArgument, "%s: color %d is negative (NCCL_SPLIT_NOCOLOR opts out)", fn, color);
    if ((rc = child_config(comm, config, &cfg, fn))) return rc;
    uint32_t child = ++comm->children;
    uint64_t id = mix64(comm->id ^ mix64(((uint64_t)child << 32) | (uint32_t)color));
    if (!comm->wc) {
        if (color == NCCL_SPLIT_NOCOLOR) return created(comm);
        ncclComm_t c = comm_new(0, 1, comm->device, &cfg, id);
        if (!c) return nccl_fail(ncclSystemError, "%s: out of memory", fn);
        char name[64];
        snprintf(name, sizeof(name), "%.40s.split%u", comm->name, child);
        comm_finish(c, WEFT_COMM_NULL, &cfg, name);
        *newcomm = c;
        return created(c);
    }
    char defname[64];
    snprintf(defname, sizeof(defname), "%.40s.split%u", comm->name, child);
    NCCL_LOCK();
    if ((wrc = config_options(&cfg, comm->device, defname, &opts)) == WEFT_SUCCESS) {
        wrc = weft_comm_split(comm->wc, color == NCCL_SPLIT_NOCOLOR ? WEFT_UNDEFINED : color, key, opts, &wc);
        weft_options_free(&opts);
    }
    NCCL_UNLOCK();
    if (wrc) {
        rc = nccl_weft_fail(wrc, fn);
        nccl_comm_note(comm, rc);
        return rc;
    }
    if (!wc) return created(comm); /* NCCL_SPLIT_NOCOLOR: no communicator */
    int r = 0, n = 0;
    weft_comm_rank(wc, &r);
    weft_comm_size(wc, &n);
    ncclComm_t c = comm_new(r, n, comm->device, &cfg, id);
    NCCL_LOCK();
    world_hold(0);
    NCCL_UNLOCK();
    if (!c || (rc = comm_finish(c, wc, &cfg, defname))) {
        NCCL_LOCK();
        weft_comm_free(&wc);
        world_release(1);
        NCCL_UNLOCK();
        if (c) comm_free(c);
        return c ? rc : nccl_fail(ncclSystemError, "%s: out of memory", fn);
    }
    *newcomm = c;
    return created(c);
}

NCCL_DEF(ncclResult_t, CommShrink,
         (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config,
          int shrinkFlags))
{
    static const char fn[] = "ncclCommShrink";
    ncclConfig_t cfg;
    ncclResult_t rc;
    weft_options_t opts = WEFT_OPTIONS_NULL;
    weft_comm_t wc = WEFT_COMM_NULL;
    int wrc = WEFT_SUCCESS;

    if ((rc = nccl_comm_check(comm, fn))) return rc;
    if (!newcomm) return nccl_fail(ncclInvalidArgument, "%s: NULL newcomm pointer", fn);
    *newcomm = NULL;
    if (shrinkFlags & ~NCCL_SHRINK_ABORT)
        return nccl_fail(ncclInvalidArgument, "%s: unknown flags 0x%x", fn, (unsigned)shrinkFlags);
    if (excludeRanksCount < 0 || (excludeRanksCount > 0 && !excludeRanksList))
        return nccl_fail(ncclInvalidArgument, "%s: %d ranks to exclude from %s", fn, excludeRanksCount,
                         excludeRanksList ? "a list" : "a NULL list");
    char *out = calloc((size_t)comm->nranks, 1);
    int *members = malloc(sizeof(int) * (size_t)comm->nranks), n = 0;
    if (!out || !members) {
        free(out);
        free(members);
        return nccl_fail(ncclSystemError, "%s: out of memory", fn);
    }
    for (int i = 0; i < excludeRanksCount && !rc; i++) {
        int r = excludeRanksList[i];
        if (r < 0 || r >= comm->nranks)
            rc = nccl_fail(ncclInvalidArgument, "%s: excluded rank %d is not in 0..%d", fn, r, comm->nranks - 1);
        else if (r == comm->rank)
            rc = nccl_fail(ncclInvalidArgument, "%s: rank %d excludes itself (excluded ranks do not call)", fn, r);
        else
            out[r] = 1;
    }
    if (!rc) rc = child_config(comm, config, &cfg, fn);
    if (rc) goto done;
    uint32_t child = ++comm->children;
    uint64_t id = mix64(comm->id ^ mix64(((uint64_t)child << 32) | UINT64_C(0x5348524b)));
    char defname[64];
    snprintf(defname, sizeof(defname), "%.40s.shrink%u", comm->name, child);
    int me = 0;
    NCCL_LOCK();
    for (int r = 0; r < comm->nranks && !wrc; r++)
        if (!out[r]) {
            if (r == comm->rank) me = n;
            if (comm->wc) wrc = weft_comm_world_rank(comm->wc, r, &members[n]);
            n++;
        }
    /* The excluded ranks may be gone: the new communicator is made among
     * the others alone, as a group of weft's world (a revoked parent
     * cannot carry it). */
    if (!wrc && comm->wc && (shrinkFlags & NCCL_SHRINK_ABORT)) wrc = weft_comm_revoke(comm->wc);
    if (!wrc && comm->wc && (wrc = config_options(&cfg, comm->device, defname, &opts)) == WEFT_SUCCESS) {
        int tag = (int)(mix64(id) & (uint64_t)WEFT_TAG_UB);
        wrc = weft_comm_create_group(weft_comm_world(), members, n, tag, opts, &wc);
        weft_options_free(&opts);
        if (!wrc) world_hold(0);
    }
    NCCL_UNLOCK();
    if (wrc) {
        rc = nccl_weft_fail(wrc, fn);
        nccl_comm_note(comm, rc);
        goto done;
    }
    if (shrinkFlags & NCCL_SHRINK_ABORT) comm->aborted = 1;
    ncclComm_t c = comm_new(me, n, comm->device, &cfg, id);
    if (!c || (rc = comm_finish(c, wc, &cfg, defname))) {
        if (wc) {
            NCCL_LOCK();
            weft_comm_free(&wc);
            world_release(1);
            NCCL_UNLOCK();
        }
        if (c) comm_free(c);
        if (!c) rc = nccl_fail(ncclSystemError, "%s: out of memory", fn);
        goto done;
    }
    *newcomm = c;
    rc = created(c);
done:
    free(out);
    free(members);
    return rc;
}

/* ---- ending ---------------------------------------------------------------------------- */

NCCL_DEF(ncclResult_t, CommFinalize, (ncclComm_t comm))
{
    ncclResult_t rc = nccl_comm_check(comm, "ncclCommFinalize");
    if (rc) return rc;
    if (comm->finalized)
        return nccl_fail(ncclInvalidUsage, "ncclCommFinalize: comm %s is finalized already", comm->name);
    if (comm->aborted)
        return nccl_fail(ncclInvalidUsage, "ncclCommFinalize: comm %s was revoked or aborted: destroy it", comm->name);
    /* Everything issued on it is done once its streams are. */
    rc = nccl_comm_quiesce(comm, "ncclCommFinalize");
    comm->finalized = 1;
    if (rc) {
        nccl_comm_note(comm, rc);
        return rc;
    }
    return created(comm);
}

NCCL_DEF(ncclResult_t, CommDestroy, (ncclComm_t comm))
{
    if (!comm) return ncclSuccess;
    ncclResult_t rc = nccl_comm_check(comm, "ncclCommDestroy");
    if (rc) return rc;
    if (!comm->finalized && !comm->aborted) nccl_comm_quiesce(comm, "ncclCommDestroy");
    if (comm->wc) {
        NCCL_LOCK();
        int wrc = weft_comm_free(&comm->wc);
        if (wrc)
            nccl_log(NL_WARN, "ncclCommDestroy: comm %s: %s (%s); its weft communicator is left to the process",
                     comm->name, weft_last_error(), weft_strerror(wrc));
        world_release(!comm->aborted);
        NCCL_UNLOCK();
    }
    comm_free(comm);
    return ncclSuccess;
}

NCCL_DEF(ncclResult_t, CommAbort, (ncclComm_t comm))
{
    if (!comm) return ncclSuccess;
    ncclResult_t rc = nccl_comm_check(comm, "ncclCommAbort");
    if (rc) return rc;
    comm->aborted = 1;
    atomic_store(&comm->async, (int)ncclRemoteError);
    /* Another thread may be inside weft, blocked in this communicator's
     * work: weft's deadline ends that call; this one does not wait for it. */
    if (pthread_mutex_trylock(&nccl_lock) != 0) {
        nccl_log(NL_WARN,
                 "ncclCommAbort: comm %s: another thread is inside weft; its call ends at weft's deadline "
                 "(WEFT_TIMEOUT), and the communicator is left to the process",
                 comm->name);
        return ncclSuccess;
    }
    if (comm->wc) {
        weft_comm_revoke(comm->wc); /* this rank's pending work on it fails at once; the others are told */
        int wrc = weft_comm_free(&comm->wc);
        if (wrc)
            nccl_log(NL_INFO, "ncclCommAbort: comm %s: %s; its weft communicator is left to the process", comm->name,
                     weft_last_error());
        world_release(0);
    }
    NCCL_UNLOCK();
    comm_free(comm);
    return ncclSuccess;
}

NCCL_DEF(ncclResult_t, CommRevoke, (ncclComm_t comm, int revokeFlags))
{
    ncclResult_t rc = nccl_comm_check(comm, "ncclCommRevoke");
    if (rc) return rc;
    if (revokeFlags != NCCL_REVOKE_DEFAULT)
        return nccl_fail(ncclInvalidArgument, "ncclCommRevoke: flags 0x%x (must be NCCL_REVOKE_DEFAULT)",
                         (unsigned)revokeFlags);
    if (comm->wc) {
        NCCL_LOCK();
        int wrc = weft_comm_revoke(comm->wc);
        NCCL_UNLOCK();
        if (wrc) return nccl_weft_fail(wrc, "ncclCommRevoke");
    }
    comm->aborted = 1;
    return created(comm);
}

/* ---- queries ------------------------------------------------------------------------------ */

NCCL_DEF(ncclResult_t, CommGetAsyncError, (ncclComm_t comm, ncclResult_t *asyncError))
{
    ncclResult_t rc = nccl_comm_check(comm, "ncclCommGetAsyncError");
    if (rc) return rc;
    if (!asyncError) return nccl_fail(ncclInvalidArgument, "ncclCommGetAsyncError: NULL asyncError pointer");
    /* No call into weft: the watchdog thread of PyTorch asks while the main
     * thread may be inside weft. */
    *asyncError = (ncclResult_t)atomic_load(&comm->async);
    return ncclSuccess;
}

NCCL_DEF(ncclResult_t, CommCount, (const ncclComm_t comm, int *count))
{
    ncclResult_t rc = nccl_comm_check(comm, "ncclCommCount");
    if (rc) return rc;
    if (!count) return nccl_fail(ncclInvalidArgument, "ncclCommCount: NULL count pointer");
    *count = comm->nranks;
    return ncclSuccess;
}

NCCL_DEF(ncclResult_t, CommCuDevice, (const ncclComm_t comm, int *device))
{
    ncclResult_t rc = nccl_comm_check(comm, "ncclCommCuDevice");
    if (rc) return rc;
    if (!device) return nccl_fail(ncclInvalidArgument, "ncclCommCuDevice: NULL device pointer");
    *device = comm->device;
    if (comm->device < 0)
        return nccl_fail(ncclInvalidUsage,
                         "ncclCommCuDevice: comm %s has no CUDA device (no CUDA context was current when it was made)",
                         comm->name);
    return ncclSuccess;
}

NCCL_DEF(ncclResult_t, CommUserRank, (const ncclComm_t comm, int *rank))
{
    ncclResult_t rc = nccl_comm_check(comm, "ncclCommUserRank");
    if (rc) return rc;
    if (!rank) return nccl_fail(ncclInvalidArgument, "ncclCommUserRank: NULL rank pointer");
    *rank = comm->rank;
    return ncclSuccess;
}
