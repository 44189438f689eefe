/* UCX context, worker and endpoints. */
#include "pt2pt/cuda.h"
#include "pt2pt/pt2pt.h"
#include "pt2pt/ucx_addr.h"
#include "src/bootstrap/bootstrap.h"

#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <uct/api/uct.h>

static weft_pt2pt_t *g_p2p; /* the one per process, for the hot paths */
static int g_finalizing;

int weft_p2p_status_to_weft(ucs_status_t status)
{
    switch (status) {
    case UCS_OK: return WEFT_SUCCESS;
    case UCS_ERR_MESSAGE_TRUNCATED: return WEFT_ERR_TRUNCATE;
    case UCS_ERR_CANCELED: return WEFT_ERR_CANCELED;
    case UCS_ERR_NO_MEMORY: return WEFT_ERR_NO_MEMORY;
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED: return WEFT_ERR_PEER_LOST;
    case UCS_ERR_TIMED_OUT: return WEFT_ERR_TIMEOUT;
    default: return WEFT_ERR_TRANSPORT;
    }
}

static void ep_error_cb(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    int rank = (int)(intptr_t)arg;
    (void)ep;
    if (!g_p2p || rank < 0 || rank >= g_p2p->npeers) return;
    if (!g_p2p->peers[rank].lost) g_p2p->lost_count++;
    g_p2p->peers[rank].lost = 1;
    g_p2p->peers[rank].why = status;
    if (!g_finalizing) weft_rank_lost(rank, "UCX reports %s on its endpoint", ucs_status_string(status));
}

/* Creates the endpoint to world_rank from its sealed address (blob, len),
 * checked first: garbage in ucp_ep_create aborts the process, so a rank
 * whose address fails is named and never given to UCX. */
static int ep_from_blob(weft_pt2pt_t *p2p, int world_rank, const uint8_t *blob, size_t len)
{
    weft_peer_t *peer = &p2p->peers[world_rank];
    size_t addr_len;
    char why[256];
    if (weft_ucx_addr_open(&p2p->key, (uint32_t)world_rank, (uint32_t)p2p->npeers, blob, len, &addr_len, why,
                           sizeof(why)) != 0)
        return weft_error(WEFT_ERR_BOOTSTRAP,
                          "rank %d's UCX worker address failed validation and was not given to UCX: %s (bootstrap %s)",
                          world_rank, why, p2p->bs->name);
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = (const ucp_address_t *)(blob + WEFT_UCX_ADDR_HDR),
        .err_mode = weft_cfg.peer_failure ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE,
    };
    if (weft_cfg.peer_failure) {
        params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.err_handler.cb = ep_error_cb;
        params.err_handler.arg = (void *)(intptr_t)world_rank;
    }
    ucs_status_t st = ucp_ep_create(p2p->worker, &params, &peer->ep);
    if (st != UCS_OK) {
        peer->ep = NULL;
        return weft_error(weft_p2p_status_to_weft(st), "cannot create a UCX endpoint to rank %d: %s", world_rank,
                          ucs_status_string(st));
    }
    return WEFT_SUCCESS;
}

/* Makes the endpoints to ranks[0..n-1] that do not exist yet, fetching
 * their addresses through the bootstrap a batch at a time (one request to
 * the store for up to WEFT_BOOTSTRAP_GET_MAX ranks). The first failure is
 * returned; the others still get their endpoints. */
static int connect_ranks(weft_pt2pt_t *p2p, const int *ranks, int n)
{
    int batch[WEFT_BOOTSTRAP_GET_MAX], rc = WEFT_SUCCESS;
    void *blobs[WEFT_BOOTSTRAP_GET_MAX];
    size_t lens[WEFT_BOOTSTRAP_GET_MAX];
    double deadline = weft_deadline_from(weft_cfg.init_timeout, weft_wtime());
    for (int i = 0; i < n;) {
        int k = 0;
        for (; i < n && k < WEFT_BOOTSTRAP_GET_MAX; i++) {
            int r = ranks[i], dup = 0;
            if (r < 0 || r >= p2p->npeers || p2p->peers[r].ep) continue;
            for (int j = 0; j < k && !dup; j++)
                dup = batch[j] == r;
            if (!dup) batch[k++] = r;
        }
        if (!k) continue;
        int frc = weft_bootstrap_get(p2p->bs, batch, k, blobs, lens, deadline);
        if (frc != WEFT_SUCCESS) {
            if (rc == WEFT_SUCCESS) rc = frc;
            continue;
        }
        p2p->fetched += (uint64_t)k;
        for (int j = 0; j < k; j++) {
            int erc = ep_from_blob(p2p, batch[j], blobs[j], lens[j]);
            if (erc != WEFT_SUCCESS && rc == WEFT_SUCCESS) rc = erc;
            free(blobs[j]); /* UCX unpacked what it needs */
        }
    }
    return rc;
}

int weft_p2p_ep(int world_rank, ucp_ep_h *ep)
{
    weft_peer_t *peer = &g_p2p->peers[world_rank];
    if (WEFT_LIKELY(peer->ep != NULL)) {
        *ep = peer->ep;
        return WEFT_SUCCESS;
    }
    int rc = connect_ranks(g_p2p, &world_rank, 1);
    if (rc != WEFT_SUCCESS) return rc;
    *ep = peer->ep;
    return WEFT_SUCCESS;
}

static int p2p_connect(const int *world_ranks, int n)
{
    return connect_ranks(g_p2p, world_ranks, n);
}

int weft_p2p_progress(void)
{
    return (int)ucp_worker_progress(g_p2p->worker);
}

int weft_p2p_sends_inflight;

/* Messages dropped at finalize (weft_p2p_drop_unreceived). */
static struct {
    int inflight; /* dropping receives not completed */
    int count;
    char who[320];
} unreceived;

/* ---- control messages: UCX active messages, outside tag matching ----------
 * Revoke notices and agreements (src/ft.c) must reach a rank whatever it
 * is waiting on, and must cost nothing per tagged message: an active
 * message is handled by its own callback during any progress, and no
 * receive sits in UCX's tag queues for it. Each message starts with the
 * sender's world rank. */
#define AM_CTRL_ID 7

static ucs_status_t am_ctrl_cb(void *arg, const void *header, size_t header_length, void *data, size_t length,
                               const ucp_am_recv_param_t *param)
{
    int32_t from;
    (void)arg, (void)header, (void)header_length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV || length < sizeof(from)) {
        weft_warn("control message of %zu bytes dropped: %s", length,
                  length < sizeof(from) ? "too short" : "it came by rendezvous, control messages are sent eagerly");
        return UCS_OK;
    }
    memcpy(&from, data, sizeof(from));
    weft_ft_deliver(from, (const char *)data + sizeof(from), length - sizeof(from));
    return UCS_OK;
}

static void am_send_done(void *request, ucs_status_t status, void *user_data)
{
    (void)status; /* a control message to a rank that died is lost with it */
    free(user_data);
    ucp_request_free(request);
}

static int p2p_ctrl_send(int world_rank, const void *buf, size_t len)
{
    ucp_ep_h ep;
    int rc;
    if (g_p2p->peers[world_rank].lost)
        return weft_error(WEFT_ERR_PEER_LOST, "control message to rank %d: the rank is lost (%s)", world_rank,
                          ucs_status_string(g_p2p->peers[world_rank].why));
    if ((rc = weft_p2p_ep(world_rank, &ep))) return rc;
    int32_t from = weft_g.rank;
    char *copy = malloc(sizeof(from) + len); /* UCX reads it until the send completes */
    if (!copy) return weft_error(WEFT_ERR_NO_MEMORY, "control message to rank %d: out of memory", world_rank);
    memcpy(copy, &from, sizeof(from));
    memcpy(copy + sizeof(from), buf, len);
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
        .flags = UCP_AM_SEND_FLAG_EAGER,
        .cb.send = am_send_done,
        .user_data = copy,
    };
    ucs_status_ptr_t sp = ucp_am_send_nbx(ep, AM_CTRL_ID, NULL, 0, copy, sizeof(from) + len, &param);
    if (UCS_PTR_IS_PTR(sp)) return WEFT_SUCCESS; /* completes in the background */
    free(copy);
    if (sp == NULL) return WEFT_SUCCESS;
    return weft_error(weft_p2p_status_to_weft(UCS_PTR_STATUS(sp)), "control message to rank %d: %s", world_rank,
                      ucs_status_string(UCS_PTR_STATUS(sp)));
}

static void discard_done(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info, void *user_data)
{
    (void)status, (void)info, (void)user_data;
    ucp_request_free(request);
}

/* A message probed with remove must be received, then dropped: into a
 * buffer too small for it (truncated), so that a rendezvous one is not
 * pulled from its sender (whose call may have failed and its buffer been
 * freed since) and UCX only tells the sender it is done. 1: the receive
 * is still in flight (done runs at its end). */
static int receive_to_drop(ucp_tag_message_h msg, ucp_tag_recv_nbx_callback_t done)
{
    static char sink[64];
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.recv = done,
        .user_data = NULL,
    };
    ucs_status_ptr_t sp = ucp_tag_msg_recv_nbx(g_p2p->worker, sink, sizeof(sink), msg, &param);
    return UCS_PTR_IS_PTR(sp);
}

static int p2p_discard(uint32_t ctx, uint32_t ctx_mask)
{
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    int n = 0;
    while ((msg = ucp_tag_probe_nb(g_p2p->worker, (ucp_tag_t)ctx, (ucp_tag_t)ctx_mask, 1, &info)) != NULL) {
        receive_to_drop(msg, discard_done);
        n++;
    }
    if (n) weft_debug("discarded %d message%s of context %#x (mask %#x)", n, n == 1 ? "" : "s", ctx, ctx_mask);
    return n;
}

/* UCX 1.13 has no query for an endpoint's transports; its printed
 * configuration lists every lane as "lane[i]: <rsc>:<tl>/<dev>.<path> ...".
 * Collect the distinct tl/dev pairs in lane order. */
static int p2p_peer_info(int world_rank, char *buf, size_t len)
{
    ucp_ep_h ep;
    char *text = NULL;
    size_t text_len = 0, used = 0;
    int rc = weft_p2p_ep(world_rank, &ep);
    if (rc) return rc;
    /* Let wireup settle so the lanes are the final ones. */
    for (int i = 0; i < 100; i++)
        ucp_worker_progress(g_p2p->worker);
    FILE *f = open_memstream(&text, &text_len);
    if (!f) return weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_peer_info: out of memory");
    ucp_ep_print_info(ep, f);
    fclose(f);
    buf[0] = '\0';
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *lane = strstr(line, "lane[");
        if (!lane) continue;
        char *colon = strchr(lane, ':');
        if (!colon) continue;
        char *rsc = colon + 1;
        while (*rsc == ' ')
            rsc++;
        char *tl = strchr(rsc, ':'); /* "<index>:<tl>/<dev>.<path>" */
        tl = tl ? tl + 1 : rsc;
        size_t n = strcspn(tl, " \t");
        char item[96];
        snprintf(item, sizeof(item), "%.*s", (int)n, tl);
        char *dot = strrchr(item, '.'); /* drop the path index */
        char *slash = strchr(item, '/');
        if (dot && slash && dot > slash) *dot = '\0';
        if (!slash || strstr(buf, item)) continue;
        int w = snprintf(buf + used, len - used, "%s%s", used ? " " : "", item);
        if (w > 0 && used + (size_t)w < len) used += (size_t)w;
    }
    free(text);
    if (!buf[0]) snprintf(buf, len, "unknown (UCX printed no lanes for rank %d)", world_rank);
    return WEFT_SUCCESS;
}

/* The worker's event fd (UCP_FEATURE_WAKEUP): the progress thread and
 * waits past their spin budget sleep on it. */
static int p2p_event_fd(void)
{
    int fd = -1;
    if (ucp_worker_get_efd(g_p2p->worker, &fd) != UCS_OK) return -1;
    return fd;
}

static int p2p_arm(void)
{
    ucs_status_t st = ucp_worker_arm(g_p2p->worker);
    if (st == UCS_OK) return 1;
    if (st == UCS_ERR_BUSY) return 0;
    return weft_error(weft_p2p_status_to_weft(st), "ucp_worker_arm: %s", ucs_status_string(st));
}

const weft_transport_ops_t weft_p2p_transport = {
    .isend = weft_p2p_isend,
    .irecv = weft_p2p_irecv,
    .arrived = weft_p2p_arrived,
    .progress = weft_p2p_progress,
    .peer_info = p2p_peer_info,
    .ctrl_send = p2p_ctrl_send,
    .discard = p2p_discard,
    .event_fd = p2p_event_fd,
    .arm = p2p_arm,
    .connect = p2p_connect,
};

/* Publishes this rank's worker address, sealed (pt2pt/ucx_addr.h): the
 * others fetch it when they first make an endpoint to this rank. Small
 * worlds (WEFT_ADDRESSES_AT_INIT) hand every rank every address at once:
 * under the env bootstrap the published ones live in rank 0's store, and a
 * rank that outlives rank 0 can still reach every other survivor. */
static int publish_address(weft_pt2pt_t *p2p, weft_bootstrap_t *bs, const void *addr, size_t addr_len, double deadline)
{
    uint8_t *mine = NULL;
    size_t sealed = weft_ucx_addr_sealed_len(addr_len);
    int rc;

    WEFT_CHECK_GOTO(weft_job_key_load(&p2p->key, "weft_init"), rc, out);
    if (addr_len < WEFT_UCX_ADDR_MIN || addr_len > WEFT_UCX_ADDR_MAX) {
        rc = weft_error(WEFT_ERR_TRANSPORT, "weft_init: this rank's UCX worker address is %zu bytes, outside [%d, %d]",
                        addr_len, WEFT_UCX_ADDR_MIN, WEFT_UCX_ADDR_MAX);
        goto out;
    }
    if (!(mine = malloc(sealed))) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory");
        goto out;
    }
    weft_ucx_addr_seal(&p2p->key, (uint32_t)bs->rank, (uint32_t)bs->size, addr, addr_len, mine);
    rc = weft_bootstrap_put(bs, mine, sealed, bs->size <= weft_cfg.addresses_at_init, deadline);
out:
    free(mine);
    return rc;
}

/* UCX allocates and frees one device buffer the first time an endpoint's
 * protocols weigh staging through device memory, and that free waits for
 * all work on the device. A stream-ordered call that made the process's
 * first endpoint while the application's earlier work still held its
 * stream would wait there until that work ended (and forever where the
 * work waits for the call to return, as a host word that is set after
 * it does). So where UCX carries CUDA memory and a context is current at
 * init, the first endpoint, to this rank itself, is made at init. */
static void first_endpoint(weft_pt2pt_t *p2p, const void *addr, size_t addr_len)
{
    int self = p2p->bs->rank;
    size_t sealed = weft_ucx_addr_sealed_len(addr_len);
    uint8_t *mine;
    if (p2p->peers[self].ep || !weft_cuda_ucx_device_now() || !(mine = malloc(sealed))) return;
    weft_ucx_addr_seal(&p2p->key, (uint32_t)self, (uint32_t)p2p->npeers, addr, addr_len, mine);
    int rc = ep_from_blob(p2p, self, mine, sealed);
    free(mine);
    weft_debug("weft_init: the endpoint to this rank, made at init so that UCX's probe of device memory waits on "
               "no stream: %s",
               rc ? weft_last_error() : "made");
    if (rc) weft_error_clear(); /* a first call makes the endpoint again and says why it cannot */
}

/* UCX_TLS, when the user set none. UCX's TCP transport listens on every
 * interface and takes a connection and tagged messages from anyone who can
 * reach it (a local user injected messages into a job's receives): where
 * every rank of the job runs on this machine (no_tcp), shared memory
 * carries everything and tcp is left out. When UCX cannot open its
 * transports, the later tries leave out one shared-memory transport at a
 * time: POSIX shared memory first where /dev/shm is short of space (a
 * container's 64 MB, or filled by any user), else System V's (its segment
 * ids are a host-wide pool any user can exhaust), then the other one.
 * NULL: UCX's own default (also for a try that does not exist). */
static const char *default_tls(int no_tcp, int attempt, int shm_short)
{
    static const char *const tls[2][3] = {{NULL, "^sysv", "^posix"}, {"^tcp", "^tcp,sysv", "^tcp,posix"}};
    const char *user = getenv("UCX_TLS");
    if ((user && *user) || attempt < 0 || attempt > 2) return NULL;
    return tls[no_tcp != 0][attempt == 0 ? 0 : shm_short ? 3 - attempt : attempt];
}

/* UCX's shared memory per process (its receive descriptors, about 4 MB,
 * and FIFOs, with room to spare); below this much free space in /dev/shm
 * its POSIX transport would fail. */
#define WEFT_DEV_SHM_NEEDED ((uint64_t)8 << 20)

/* And the files it makes at once (each segment is a file for a moment). */
#define WEFT_DEV_SHM_FILES 64

/* Bytes free in /dev/shm (0 when it is out of inodes: no file can be
 * made), UINT64_MAX where it cannot be told; desc says which, for messages. */
static uint64_t dev_shm_free(char *desc, size_t len)
{
    struct statvfs v;
    if (statvfs("/dev/shm", &v)) {
        snprintf(desc, len, "/dev/shm's free space is unknown");
        return UINT64_MAX;
    }
    /* (f_files 0: a file system that does not count inodes) */
    if (v.f_files && v.f_favail < WEFT_DEV_SHM_FILES) {
        snprintf(desc, len, "/dev/shm has %llu free inodes", (unsigned long long)v.f_favail);
        return 0;
    }
    uint64_t bytes = (uint64_t)v.f_bavail * (uint64_t)(v.f_frsize ? v.f_frsize : v.f_bsize);
    snprintf(desc, len, "/dev/shm has %.1f MiB free", (double)bytes / (1 << 20));
    return bytes;
}

/* The UCX context and worker, with UCX_TLS = tls (NULL: as configured).
 * On failure nothing is left open and *what says which step failed. */
static ucs_status_t ucx_open(weft_pt2pt_t *p2p, const ucp_params_t *params, const ucp_worker_params_t *wparams,
                             const char *tls, const char **what)
{
    ucp_config_t *config = NULL;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);
    *what = "reading UCX's configuration";
    if (st != UCS_OK) return st;
    if (tls && (st = ucp_config_modify(config, "TLS", tls)) != UCS_OK) {
        ucp_config_release(config);
        *what = "setting UCX_TLS";
        return st;
    }
    st = ucp_init(params, config, &p2p->context);
    ucp_config_release(config);
    *what = "ucp_init";
    if (st != UCS_OK) {
        p2p->context = NULL;
        return st;
    }
    st = ucp_worker_create(p2p->context, wparams, &p2p->worker);
    *what = "ucp_worker_create";
    if (st != UCS_OK) {
        p2p->worker = NULL;
        ucp_cleanup(p2p->context);
        p2p->context = NULL;
    }
    return st;
}

int weft_p2p_init(weft_pt2pt_t **out, weft_bootstrap_t *bs, double deadline)
{
    int rc = WEFT_SUCCESS;
    ucs_status_t st;
    ucp_address_t *addr = NULL;
    size_t addr_len = 0;
    weft_pt2pt_t *p2p = calloc(1, sizeof(*p2p));

    if (!p2p) return weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory");
    if (bs->size > WEFT_TAG_MAX_RANKS) {
        rc = weft_error(WEFT_ERR_UNSUPPORTED, "weft_init: %d ranks exceed the tag layout's %d", bs->size,
                        WEFT_TAG_MAX_RANKS);
        goto out;
    }
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                      UCP_PARAM_FIELD_ESTIMATED_NUM_PPN,
        .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AM,
        .mt_workers_shared = 0,
        .estimated_num_eps = (size_t)bs->size,
        .estimated_num_ppn = (size_t)(bs->local_size > 0 ? bs->local_size : 1),
    };
    /* The progress thread, and a blocking wait past its spin budget
     * (WEFT_WAIT_SPIN_US), sleep on the worker's event fd; the feature
     * changes neither the transports UCX picks nor their latency between
     * ranks (docs/PERFORMANCE.md section 2), so it is always asked for. */
    params.features |= UCP_FEATURE_WAKEUP;
    /* With a progress thread (WEFT_PROGRESS_THREAD) two threads use the
     * worker, one at a time (weft_api_lock): UCX's serialized mode. */
    ucp_worker_params_t wparams = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                   .thread_mode = weft_cfg.progress_thread == WEFT_PT_ON ? UCS_THREAD_MODE_SERIALIZED
                                                                                         : UCS_THREAD_MODE_SINGLE};
    /* WEFT_PEER_FAILURE=1: UCX 1.13 detects failed peers only over tcp, so
     * the user who asks for it keeps tcp also on one machine */
    int single = weft_g.machine_ranks >= bs->size && !weft_cfg.peer_failure;
    /* A /dev/shm already short of space: the first try leaves POSIX shared
     * memory out (else UCX prints its own errors for it, then weft tries again). */
    char shm_desc[64];
    uint64_t shm_free = dev_shm_free(shm_desc, sizeof(shm_desc));
    int shm_short = shm_free < WEFT_DEV_SHM_NEEDED, first = shm_short && default_tls(single, 1, 1) ? 1 : 0;
    const char *tls = default_tls(single, first, shm_short), *what = "";
    if (first)
        weft_warn("%s, under the %d MiB and %d files UCX's POSIX shared memory takes a rank: UCX_TLS=%s "
                  "(System V shared memory instead; set UCX_TLS to choose the transports yourself)",
                  shm_desc, (int)(WEFT_DEV_SHM_NEEDED >> 20), WEFT_DEV_SHM_FILES, tls);
    st = ucx_open(p2p, &params, &wparams, tls, &what);
    for (int attempt = first + 1; attempt <= 2 && st != UCS_OK && default_tls(single, attempt, shm_short) &&
                                  (!strcmp(what, "ucp_init") || !strcmp(what, "ucp_worker_create"));
         attempt++) {
        const char *next = default_tls(single, attempt, shm_short);
        int posix_out = strstr(next, "posix") != NULL;
        char why[112];
        if (posix_out)
            snprintf(why, sizeof(why), "%s%s", shm_short ? "" : "POSIX shared memory may be what failed; ", shm_desc);
        else
            snprintf(why, sizeof(why), "System V shared memory ids may be exhausted on this host");
        weft_warn("UCX could not open its transports (%s: %s); trying again with UCX_TLS=%s (%s; set UCX_TLS to "
                  "choose the transports yourself)",
                  what, ucs_status_string(st), next, why);
        st = ucx_open(p2p, &params, &wparams, tls = next, &what);
    }
    if (st != UCS_OK && shm_free != UINT64_MAX && shm_short) {
        rc = weft_error(WEFT_ERR_TRANSPORT,
                        "%s failed: %s; %s, UCX's shared memory needs about %d MiB per rank on a host (a "
                        "container's /dev/shm: docker run --shm-size, Kubernetes: an emptyDir of medium Memory at "
                        "/dev/shm)",
                        what, ucs_status_string(st), shm_desc, (int)(WEFT_DEV_SHM_NEEDED >> 20));
        goto out;
    }
    if (st != UCS_OK) {
        rc = weft_error(WEFT_ERR_TRANSPORT, "%s failed: %s", what, ucs_status_string(st));
        goto out;
    }
    if (tls)
        weft_info_log("UCX_TLS=%s: %s", tls,
                      single && !strcmp(tls, "^tcp")
                          ? "every rank runs on this machine, so UCX's tcp (open to anyone who can reach it) is left "
                            "out; set UCX_TLS to choose"
                          : "the transports UCX could open");
    /* A receive of an already-arrived message completes inline; UCX fills
     * its recv_info (sender, length) then only from 1.16 (openucx/ucx
     * df0798c005). Checked at run time: the library loaded may be older
     * than the headers. */
    unsigned major, minor, release;
    ucp_get_version(&major, &minor, &release);
    p2p->recv_inline = major > 1 || (major == 1 && minor >= 16);
    WEFT_CHECK_GOTO(weft_cuda_init(p2p->context), rc, out);
    ucp_am_handler_param_t am = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB,
                                 .id = AM_CTRL_ID,
                                 .cb = am_ctrl_cb};
    st = ucp_worker_set_am_recv_handler(p2p->worker, &am);
    if (st != UCS_OK) {
        rc = weft_error(WEFT_ERR_TRANSPORT, "ucp_worker_set_am_recv_handler failed: %s", ucs_status_string(st));
        goto out;
    }
    st = ucp_worker_get_address(p2p->worker, &addr, &addr_len);
    if (st != UCS_OK) {
        rc = weft_error(WEFT_ERR_TRANSPORT, "ucp_worker_get_address failed: %s", ucs_status_string(st));
        goto out;
    }
    p2p->bs = bs;
    p2p->npeers = bs->size;
    WEFT_CHECK_GOTO(publish_address(p2p, bs, addr, addr_len, deadline), rc, out);
    p2p->peers = calloc((size_t)bs->size, sizeof(*p2p->peers));
    if (!p2p->peers) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory for %d peers", bs->size);
        goto out;
    }
    g_p2p = p2p;
    g_finalizing = 0;
    memset(&unreceived, 0, sizeof(unreceived));
    weft_p2p_sends_inflight = 0;
    weft_xport = &weft_p2p_transport;
    if (weft_cfg.eager_connect)
        for (int r = 0; r < bs->size; r += WEFT_BOOTSTRAP_GET_MAX) {
            int batch[WEFT_BOOTSTRAP_GET_MAX], k = 0;
            for (int q = r; q < bs->size && k < WEFT_BOOTSTRAP_GET_MAX; q++)
                batch[k++] = q;
            WEFT_CHECK_GOTO(connect_ranks(p2p, batch, k), rc, out);
        }
    first_endpoint(p2p, addr, addr_len);
out:
    if (addr) ucp_worker_release_address(p2p->worker, addr);
    if (rc != WEFT_SUCCESS) {
        weft_p2p_finalize(p2p, 0);
        p2p = NULL;
    }
    *out = p2p;
    return rc;
}

/* A rank UCX or the liveness record knows to be dead. */
static int peer_gone(const weft_pt2pt_t *p2p, int r)
{
    return p2p->peers[r].lost || weft_rank_lost_why(r) != NULL;
}

/* Progresses `req` (a UCX request pointer or status) to completion or the deadline. */
static ucs_status_t wait_ucx(ucp_worker_h worker, ucs_status_ptr_t req, double deadline)
{
    ucs_status_t st;
    if (req == NULL) return UCS_OK;
    if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
    unsigned idle = 0;
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        int ev = (int)ucp_worker_progress(worker);
        if (!ev && deadline > 0 && weft_wtime() > deadline) break;
        weft_progress_idle(&idle, ev);
    }
    ucp_request_free(req);
    return st;
}

void weft_p2p_finalize(weft_pt2pt_t *p2p, double deadline)
{
    if (!p2p) return;
    g_finalizing = 1;
    if (p2p->peers) {
        for (int r = 0; r < p2p->npeers; r++) {
            /* A dead rank's endpoint would flush what it still holds for
             * that rank until the deadline: ucp_worker_destroy drops it. An
             * endpoint whose sends were not delivered (a message nobody
             * received) is closed by force: its requests end canceled and
             * release what they hold (UCX asserts at cleanup on a memory
             * registration still in use). */
            if (!p2p->peers[r].ep || peer_gone(p2p, r)) continue;
            ucp_request_param_t param = {
                .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                .flags = weft_cfg.peer_failure || p2p->peers[r].undelivered ? UCP_EP_CLOSE_FLAG_FORCE : 0};
            ucs_status_t st = wait_ucx(p2p->worker, ucp_ep_close_nbx(p2p->peers[r].ep, &param), deadline);
            if (st != UCS_OK && st != UCS_INPROGRESS && !p2p->peers[r].lost)
                weft_debug("closing the endpoint to rank %d: %s", r, ucs_status_string(st));
        }
    }
    if (p2p->worker) ucp_worker_destroy(p2p->worker);
    weft_cuda_finalize();
    if (p2p->context) ucp_cleanup(p2p->context);
    free(p2p->peers);
    memset(&p2p->key, 0, sizeof(p2p->key));
    free(p2p);
    if (g_p2p == p2p) {
        g_p2p = NULL;
        weft_xport = NULL;
    }
}

/* ---- finalize: messages nobody will receive ------------------------------
 * A rank in weft_finalize posts no more receives, so what users sent it
 * that waits in its unexpected queue never will be received: it is
 * received into scratch and dropped, and named in a warning. A rendezvous
 * message then completes at its sender too, whose flush would otherwise
 * wait for it until the deadline (WEFT_TIMEOUT: 600 s by default). Done
 * while this rank flushes and while it waits in the closing barrier
 * (weft_p2p_drop_unreceived as the bootstrap's idle hook); the state is
 * `unreceived` (top of the file). */

static void unreceived_done(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info, void *user_data)
{
    (void)status, (void)info, (void)user_data;
    ucp_request_free(request);
    unreceived.inflight--;
}

static void drop_unreceived(weft_pt2pt_t *p2p)
{
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    /* Users' messages only (they are counted and named; the others are
     * left to the endpoints' close). */
    ucp_tag_t user = weft_tag_make(WEFT_TAG_CLASS_USER, 0, 0, 0);
    while ((msg = ucp_tag_probe_nb(p2p->worker, user, WEFT_TAG_MASK_CLASS, 1, &info)) != NULL) {
        unreceived.inflight += receive_to_drop(msg, unreceived_done);
        size_t used = strlen(unreceived.who);
        if (unreceived.count++ < 4 && used + 64 < sizeof(unreceived.who))
            snprintf(unreceived.who + used, sizeof(unreceived.who) - used, "%s%zu bytes from rank %d tag %d",
                     used ? ", " : "", info.length, weft_tag_source(info.sender_tag), weft_tag_tag(info.sender_tag));
    }
}

void weft_p2p_drop_unreceived(void)
{
    if (!g_p2p) return;
    /* what has arrived is seen (a rendezvous message's header) before the queue is looked at */
    for (int i = 0; i < 1000 && ucp_worker_progress(g_p2p->worker); i++)
        ;
    drop_unreceived(g_p2p);
}

/* After the closing barrier every rank has flushed: what it sent has
 * arrived, so a last look finds every message nobody received. Its
 * dropping receives end, and so do this rank's sends that another rank
 * drops, before the endpoints close (a moment at most). */
#define SETTLE_S 1.0
void weft_p2p_settle(double deadline)
{
    if (!g_p2p) return;
    weft_p2p_drop_unreceived();
    double until = weft_wtime() + SETTLE_S;
    if (deadline > 0 && deadline < until) until = deadline;
    while ((unreceived.inflight > 0 || weft_p2p_sends_inflight > 0) && weft_wtime() < until)
        if (!ucp_worker_progress(g_p2p->worker)) drop_unreceived(g_p2p);
    weft_p2p_report_unreceived();
}

void weft_p2p_report_unreceived(void)
{
    if (unreceived.count)
        weft_warn("weft_finalize: %d message%s sent to this rank %s never received (%s%s): dropped", unreceived.count,
                  unreceived.count == 1 ? "" : "s", unreceived.count == 1 ? "was" : "were", unreceived.who,
                  unreceived.count > 4 ? ", ..." : "");
    unreceived.count = 0;
    unreceived.who[0] = '\0';
}

/* Flushes what this rank sent to every live rank (before the final
 * barrier), one endpoint at a time: a send to a dead rank never completes,
 * and a flush of the whole worker would wait for it until the deadline.
 * A rank found dead while this waits is given up at once. */
int weft_p2p_flush(double deadline)
{
    weft_pt2pt_t *p2p = g_p2p;
    ucp_request_param_t param = {.op_attr_mask = 0};
    ucs_status_ptr_t *reqs = calloc((size_t)p2p->npeers, sizeof(*reqs));
    ucs_status_t failed = UCS_OK;
    int rc = WEFT_SUCCESS, failed_rank = -1, pending = 0;
    if (!reqs) return weft_error(WEFT_ERR_NO_MEMORY, "weft_finalize: out of memory");
    for (int r = 0; r < p2p->npeers; r++) {
        if (!p2p->peers[r].ep || peer_gone(p2p, r)) continue;
        ucs_status_ptr_t sp = ucp_ep_flush_nbx(p2p->peers[r].ep, &param);
        if (UCS_PTR_IS_PTR(sp)) {
            reqs[r] = sp;
            pending++;
        } else if (UCS_PTR_IS_ERR(sp) && failed == UCS_OK) {
            failed = UCS_PTR_STATUS(sp);
            failed_rank = r;
        }
    }
    double start = weft_wtime(), next_check = start;
    unsigned idle = 0;
    weft_p2p_drop_unreceived();
    while (pending > 0 || unreceived.inflight > 0) {
        int ev = (int)ucp_worker_progress(p2p->worker);
        if (ev == 0) drop_unreceived(p2p);
        for (int r = 0; r < p2p->npeers && ev == 0; r++) {
            if (!reqs[r]) continue;
            ucs_status_t st = ucp_request_check_status(reqs[r]);
            if (st == UCS_INPROGRESS && !peer_gone(p2p, r)) continue;
            if (st != UCS_INPROGRESS && st != UCS_OK && !peer_gone(p2p, r) && failed == UCS_OK) {
                failed = st;
                failed_rank = r;
            }
            ucp_request_free(reqs[r]); /* a dead rank's: UCX releases it whenever it ends */
            reqs[r] = NULL;
            pending--;
        }
        if (ev == 0) {
            double now = weft_wtime();
            if (now >= next_check) { /* news of dead ranks, as any idle wait */
                weft_liveness_poll(now, start, 0);
                next_check = now + WEFT_LIVENESS_POLL_S;
            }
            if (deadline > 0 && now > deadline) break;
        }
        weft_progress_idle(&idle, ev);
    }
    if (pending > 0) {
        char who[256] = "";
        size_t used = 0;
        for (int r = 0; r < p2p->npeers; r++)
            if (reqs[r]) {
                p2p->peers[r].undelivered = 1;
                int n = snprintf(who + used, sizeof(who) - used, "%s%d", used ? ", " : "", r);
                if (n > 0 && used + (size_t)n < sizeof(who)) used += (size_t)n;
                ucp_request_free(reqs[r]);
            }
        rc = weft_error(WEFT_ERR_TIMEOUT,
                        "weft_finalize: what this rank sent to rank%s %s was not delivered before the deadline",
                        pending == 1 ? "" : "s", who);
    } else if (failed != UCS_OK) {
        rc = weft_error(weft_p2p_status_to_weft(failed), "weft_finalize: flushing the sends to rank %d failed: %s",
                        failed_rank, ucs_status_string(failed));
    }
    free(reqs);
    return rc;
}

WEFT_API const char *weft_ucx_version(void)
{
    WEFT_API_ENTER();
    return ucp_get_version_string();
}

int weft_p2p_ucx_has_verbs(void)
{
    uct_component_h *components = NULL;
    unsigned ncomp = 0;
    int found = 0;
    if (uct_query_components(&components, &ncomp) != UCS_OK) return 0;
    for (unsigned c = 0; c < ncomp && !found; c++) {
        uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME};
        found = uct_component_query(components[c], &attr) == UCS_OK && !strcmp(attr.name, "ib");
    }
    uct_release_component_list(components);
    return found;
}

WEFT_API int weft_ucx_transports(char *buf, size_t len)
{
    WEFT_API_ENTER();
    uct_component_h *components = NULL;
    unsigned ncomp = 0;
    size_t used = 0;

    if (!buf || len == 0) return weft_error(WEFT_ERR_ARG, "weft_ucx_transports: NULL or empty buffer");
    buf[0] = '\0';
    if (uct_query_components(&components, &ncomp) != UCS_OK)
        return weft_error(WEFT_ERR_TRANSPORT, "weft_ucx_transports: uct_query_components failed");
    for (unsigned c = 0; c < ncomp; c++) {
        uct_component_attr_t cattr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
        if (uct_component_query(components[c], &cattr) != UCS_OK) continue;
        uct_md_resource_desc_t *mds = calloc(cattr.md_resource_count + 1, sizeof(*mds));
        if (!mds) continue;
        cattr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        cattr.md_resources = mds;
        if (uct_component_query(components[c], &cattr) == UCS_OK) {
            for (unsigned m = 0; m < cattr.md_resource_count; m++) {
                uct_md_config_t *mdcfg;
                uct_md_h md;
                uct_tl_resource_desc_t *tls;
                unsigned ntl;
                if (uct_md_config_read(components[c], NULL, NULL, &mdcfg) != UCS_OK) continue;
                ucs_status_t st = uct_md_open(components[c], mds[m].md_name, mdcfg, &md);
                uct_config_release(mdcfg);
                if (st != UCS_OK) continue;
                if (uct_md_query_tl_resources(md, &tls, &ntl) == UCS_OK) {
                    for (unsigned t = 0; t < ntl; t++) {
                        int n = snprintf(buf + used, len - used, "%s%s/%s", used ? " " : "", tls[t].tl_name,
                                         tls[t].dev_name);
                        if (n > 0 && used + (size_t)n < len) used += (size_t)n;
                    }
                    uct_release_tl_resource_list(tls);
                }
                uct_md_close(md);
            }
        }
        free(mds);
    }
    uct_release_component_list(components);
    return WEFT_SUCCESS;
}

WEFT_API int weft_memory_types(char *buf, size_t len)
{
    WEFT_API_ENTER();
    if (!buf || len == 0) return weft_error(WEFT_ERR_ARG, "weft_memory_types: NULL or empty buffer");
    WEFT_CHECK_INIT("weft_memory_types");
    weft_cuda_describe(buf, len);
    return WEFT_SUCCESS;
}
