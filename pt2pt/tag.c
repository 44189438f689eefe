/* Tagged send / receive / probe on UCX. The host path adds no copy: user
 * buffers go straight to UCX, which picks eager or zero-copy rendezvous.
 * Device buffers (cuda.h) go to UCX with their memory type, or as one
 * message of the staging datatype. */
#include "pt2pt/cuda.h"
#include "pt2pt/pt2pt.h"

#include <string.h>

static void p2p_orphan(weft_request_t req)
{
    (void)req; /* the completion callback sees req->orphaned and releases it */
}

static int recv_cancel(weft_request_t req)
{
    if (req->owner_data) ucp_request_cancel(weft_g.p2p->worker, req->owner_data);
    return WEFT_SUCCESS;
}

/* A receive from a rank known to be lost (UCX's endpoint error, the
 * bootstrap's notice) can never complete. */
static void recv_check(weft_request_t req)
{
    if (req->peer < 0 || weft_lost_count == 0 || !req->owner_data) return;
    char why[320];
    if (!weft_rank_lost_why(weft_comm_world_rank_of(req->comm, req->peer))) return;
    weft_lost_describe(req->comm, req->peer, why, sizeof(why));
    req->cancel_reason = WEFT_ERR_PEER_LOST;
    weft_error(WEFT_ERR_PEER_LOST, "recv from rank %d (tag %d, comm %s): %s", req->peer, req->tag, req->comm->name,
               why);
    ucp_request_cancel(weft_g.p2p->worker, req->owner_data);
}

static const weft_request_ops_t send_ops = {
    .kind = "send", .cancel = NULL, .check = NULL, .orphan = p2p_orphan, .transport_completes = 1};
static const weft_request_ops_t recv_ops = {
    .kind = "recv", .cancel = recv_cancel, .check = recv_check, .orphan = p2p_orphan, .transport_completes = 1};

/* A staged message is over: its last copies waited for, its state freed.
 * The CUDA failure, if any, becomes the request's error. */
static int stage_end(weft_request_t req, int err, const char *what)
{
    if (WEFT_LIKELY(!req->owner_extra)) return err;
    int rc = weft_cuda_stage_end(req->owner_extra, what);
    weft_cuda_stage_free(req->owner_extra);
    req->owner_extra = NULL;
    return err ? err : rc;
}

static void send_done(void *ucx_req, ucs_status_t st, void *user_data)
{
    weft_request_t req = user_data;
    ucp_request_free(ucx_req);
    req->owner_data = NULL;
    weft_p2p_sends_inflight--;
    int err = stage_end(req, weft_p2p_status_to_weft(st), "send of a device buffer");
    /* Completed because the receiver discarded it (the comm was revoked). */
    if (WEFT_UNLIKELY(req->comm && req->comm->revoked) && !err) err = WEFT_ERR_REVOKED;
    if (req->orphaned) { /* no one waits for its outcome */
        if (err)
            weft_warn("send to rank %d (tag %d), released before it completed, failed: %s", req->peer, req->tag,
                      st != UCS_OK ? ucs_status_string(st) : weft_last_error());
        weft_request_release(req);
        return;
    }
    weft_request_complete(req, err);
}

/* UCX fills the tag info only for a successful receive; a truncated one
 * reports neither the sender nor the length. */
static void recv_fill(weft_request_t req, ucs_status_t st, const ucp_tag_recv_info_t *info)
{
    if (st == UCS_OK) {
        req->status.source = weft_tag_source(info->sender_tag);
        req->status.tag = weft_tag_tag(info->sender_tag);
        req->status.bytes = info->length;
    }
    int err = stage_end(req, weft_p2p_status_to_weft(st), "receive into a device buffer");
    if (st == UCS_ERR_CANCELED && req->cancel_reason) err = req->cancel_reason;
    if (err == WEFT_ERR_TRUNCATE) {
        req->status.source = req->peer;
        req->status.tag = req->tag;
        req->status.bytes = req->capacity;
        weft_error(WEFT_ERR_TRUNCATE, "recv (source %d, tag %d, comm %s): the message does not fit the %zu-byte buffer",
                   req->peer, req->tag, req->comm->name, req->capacity);
    }
    weft_request_complete(req, err);
}

static void recv_done(void *ucx_req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user_data)
{
    weft_request_t req = user_data;
    /* info may live inside the UCX request: read it before freeing that. */
    if (!req->orphaned) recv_fill(req, st, info);
    ucp_request_free(ucx_req);
    req->owner_data = NULL;
    if (req->orphaned) {
        stage_end(req, 0, "receive into a device buffer");
        weft_request_release(req);
    }
}

static void memtype_param(ucp_request_param_t *param, ucs_memory_type_t type)
{
    param->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    param->memory_type = type;
}

/* A buffer in a process that may hold device memory (classify: a user's
 * buffer; else a collective schedule's host memory): the memory type for
 * UCX, which then need not ask the driver again (managed memory: UCX asks
 * itself, it may treat it apart from host memory), or the staging datatype
 * (the message's "buffer" is then the stage), or (*pipe set) a collective's
 * staged message that goes as a pipeline of host messages (pipe.c). On
 * failure the request is released and the error returned. */
static int device_param(weft_request_t *req, const void **buf, size_t bytes, int send, int classify, unsigned cls,
                        ucp_request_param_t *param, int *pipe, const char *what)
{
    weft_memtype_t mem;
    int path = WEFT_CUDA_HOST, rc = WEFT_SUCCESS;
    if (classify) rc = weft_cuda_classify(*buf, bytes, send ? "send" : "recv", what, &mem, &path);
    if (rc == WEFT_SUCCESS && path == WEFT_CUDA_STAGED && cls == WEFT_TAG_CLASS_COLL && weft_cuda_pipe_wanted(bytes)) {
        *pipe = 1;
    } else if (rc == WEFT_SUCCESS && path == WEFT_CUDA_HOST) {
        memtype_param(param, UCS_MEMORY_TYPE_HOST);
    } else if (rc == WEFT_SUCCESS && path == WEFT_CUDA_UCX) {
        memtype_param(param, UCS_MEMORY_TYPE_CUDA);
    } else if (rc == WEFT_SUCCESS && path == WEFT_CUDA_STAGED) {
        weft_cuda_stage_t *st = weft_cuda_stage_new((void *)*buf, bytes, send);
        if (!st) {
            rc = WEFT_ERR_TRANSPORT;
        } else {
            (*req)->owner_extra = st;
            param->op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
            param->datatype = weft_cuda_stage_dt;
            *buf = st;
        }
    }
    if (rc) {
        weft_request_release(*req);
        *req = NULL;
    }
    return rc;
}

int weft_p2p_isend(const void *buf, size_t bytes, int dest, unsigned cls, int tag, weft_comm_t comm,
                   weft_request_t *out)
{
    int world = weft_comm_world_rank_of(comm, dest);
    ucp_ep_h ep;
    int rc;

    if (WEFT_UNLIKELY(weft_g.p2p->peers[world].lost))
        return weft_error(WEFT_ERR_PEER_LOST, "send to rank %d (comm %s): the rank is lost (%s)", dest, comm->name,
                          ucs_status_string(weft_g.p2p->peers[world].why));
    if ((rc = weft_p2p_ep(world, &ep)) != WEFT_SUCCESS) return rc;
    weft_request_t req = weft_request_alloc(&send_ops, comm);
    if (!req) return weft_error(WEFT_ERR_NO_MEMORY, "send: out of memory for a request");
    req->peer = dest;
    req->tag = tag;
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = send_done,
        .user_data = req,
    };
    /* Collective schedules move host memory (their front end classified the
     * buffers) unless they say otherwise: user messages are classified. */
    int sync = (cls & WEFT_TAG_SEND_SYNC) != 0;
    cls &= ~WEFT_TAG_SEND_SYNC;
    int classify = cls == WEFT_TAG_CLASS_USER || (cls & WEFT_TAG_CLASS_DEVICE), pipe = 0;
    cls &= ~WEFT_TAG_CLASS_DEVICE;
    if (WEFT_UNLIKELY(weft_cuda_possible()) &&
        (rc = device_param(&req, &buf, bytes, 1, classify, cls, &param, &pipe, "send buffer")))
        return rc;
    ucp_tag_t wire = weft_tag_make(cls, (unsigned)tag, (unsigned)comm->rank, comm->context_id);
    if (pipe) {
        if ((rc = weft_cuda_pipe_send(req, buf, bytes, ep, wire))) {
            weft_request_release(req);
            return rc;
        }
        *out = req;
        return WEFT_SUCCESS;
    }
    ucs_status_ptr_t sp =
        sync ? ucp_tag_send_sync_nbx(ep, buf, bytes, wire, &param) : ucp_tag_send_nbx(ep, buf, bytes, wire, &param);
    if (sp == NULL) {
        rc = stage_end(req, WEFT_SUCCESS, "send of a device buffer");
        weft_request_complete(req, rc);
    } else if (UCS_PTR_IS_ERR(sp)) {
        ucs_status_t st = UCS_PTR_STATUS(sp);
        stage_end(req, 0, "send of a device buffer");
        weft_request_release(req);
        return weft_error(weft_p2p_status_to_weft(st), "send to rank %d (comm %s): %s", dest, comm->name,
                          ucs_status_string(st));
    } else {
        req->owner_data = sp;
        weft_p2p_sends_inflight++;
    }
    *out = req;
    return WEFT_SUCCESS;
}

static void recv_tag_mask(int source, unsigned cls, int tag, weft_comm_t comm, ucp_tag_t *t, ucp_tag_t *mask)
{
    *mask = WEFT_TAG_MASK_CLASS | WEFT_TAG_MASK_CTX;
    if (source != WEFT_ANY_SOURCE) *mask |= WEFT_TAG_MASK_SRC;
    if (tag != WEFT_ANY_TAG) *mask |= WEFT_TAG_MASK_TAG;
    *t = weft_tag_make(cls, tag == WEFT_ANY_TAG ? 0u : (unsigned)tag, source == WEFT_ANY_SOURCE ? 0u : (unsigned)source,
                       comm->context_id);
}

int weft_p2p_irecv(void *buf, size_t bytes, int source, unsigned cls, int tag, weft_comm_t comm, weft_request_t *out)
{
    ucp_tag_t t, mask;
    int classify = cls == WEFT_TAG_CLASS_USER || (cls & WEFT_TAG_CLASS_DEVICE), pipe = 0;
    cls &= ~WEFT_TAG_CLASS_DEVICE;
    weft_request_t req = weft_request_alloc(&recv_ops, comm);
    if (!req) return weft_error(WEFT_ERR_NO_MEMORY, "recv: out of memory for a request");
    req->peer = source;
    req->tag = tag;
    req->capacity = bytes;
    _Static_assert(sizeof(req->owner_scratch) >= sizeof(ucp_tag_recv_info_t), "scratch too small for tag info");
    ucp_tag_recv_info_t *info = (ucp_tag_recv_info_t *)req->owner_scratch;
    recv_tag_mask(source, cls, tag, comm, &t, &mask);
    /* Connecting to a named source lets UCX notice if it dies while we wait. */
    if (source != WEFT_ANY_SOURCE && weft_cfg.peer_failure) {
        ucp_ep_h ep;
        (void)weft_p2p_ep(weft_comm_world_rank_of(comm, source), &ep);
    }
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_RECV_INFO,
        .cb.recv = recv_done,
        .user_data = req,
        .recv_info.tag_info = info,
    };
    /* UCX before 1.16 completes a receive of an already-arrived message
     * inline without filling recv_info, losing the sender: there, always
     * take the callback path, which reports it. */
    if (!weft_g.p2p->recv_inline) param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    int rc;
    if (WEFT_UNLIKELY(weft_cuda_possible()) &&
        (rc = device_param(&req, (const void **)&buf, bytes, 0, classify, cls, &param, &pipe, "receive buffer")))
        return rc;
    if (pipe) {
        if ((rc = weft_cuda_pipe_recv(req, buf, bytes, t, mask))) {
            weft_request_release(req);
            return rc;
        }
        *out = req;
        return WEFT_SUCCESS;
    }
    ucs_status_ptr_t sp = ucp_tag_recv_nbx(weft_g.p2p->worker, buf, bytes, t, mask, &param);
    if (sp == NULL) {
        recv_fill(req, UCS_OK, info);
    } else if (UCS_PTR_IS_ERR(sp)) {
        ucs_status_t st = UCS_PTR_STATUS(sp);
        if (st == UCS_ERR_MESSAGE_TRUNCATED) {
            recv_fill(req, st, info);
        } else {
            stage_end(req, 0, "receive into a device buffer");
            weft_request_release(req);
            return weft_error(weft_p2p_status_to_weft(st), "recv from rank %d (comm %s): %s", source, comm->name,
                              ucs_status_string(st));
        }
    } else if (!req->complete) {
        /* (with NO_IMM_CMPL, UCX may have run recv_done inside the call: the request is then freed) */
        req->owner_data = sp;
    }
    *out = req;
    return WEFT_SUCCESS;
}

/* ---- public API: argument checks, then the engine ---------------------- */

static int check_peer(weft_comm_t comm, int rank, int any_ok, const char *fn, const char *what)
{
    if (rank == WEFT_ANY_SOURCE && any_ok) return WEFT_SUCCESS;
    if (rank < 0 || rank >= comm->size)
        return weft_error(WEFT_ERR_ARG, "%s: %s rank %d out of range 0..%d of comm %s", fn, what, rank, comm->size - 1,
                          comm->name);
    return WEFT_SUCCESS;
}

static int check_tag(int tag, int any_ok, const char *fn)
{
    if (tag == WEFT_ANY_TAG && any_ok) return WEFT_SUCCESS;
    if (tag < 0 || tag > WEFT_TAG_UB)
        return weft_error(WEFT_ERR_ARG, "%s: tag %d out of range 0..%d%s", fn, tag, WEFT_TAG_UB,
                          any_ok ? " (or WEFT_ANY_TAG)" : "");
    return WEFT_SUCCESS;
}

static int check_send(const void *buf, int64_t count, weft_dtype_t dtype, int dest, int tag, weft_comm_t comm,
                      const char *fn, size_t *bytes)
{
    int rc;
    WEFT_CHECK_INIT(fn);
    if ((rc = weft_comm_check_usable(comm, fn)) ||
        (rc = weft_buffer_check(buf, count, dtype, fn, "send buffer", bytes)) ||
        (rc = check_peer(comm, dest, 0, fn, "destination")) || (rc = check_tag(tag, 0, fn)))
        return rc;
    return WEFT_SUCCESS;
}

static int check_recv(const void *buf, int64_t count, weft_dtype_t dtype, int source, int tag, weft_comm_t comm,
                      const char *fn, size_t *bytes)
{
    int rc;
    WEFT_CHECK_INIT(fn);
    if ((rc = weft_comm_check_usable(comm, fn)) ||
        (rc = weft_buffer_check(buf, count, dtype, fn, "receive buffer", bytes)) ||
        (rc = check_peer(comm, source, 1, fn, "source")) || (rc = check_tag(tag, 1, fn)))
        return rc;
    return WEFT_SUCCESS;
}

WEFT_API int weft_isend(const void *buf, int64_t count, weft_dtype_t dtype, int dest, int tag, weft_comm_t comm,
                        weft_request_t *request)
{
    WEFT_API_ENTER();
    size_t bytes;
    int rc = check_send(buf, count, dtype, dest, tag, comm, "weft_isend", &bytes);
    if (rc) return rc;
    if (!request) return weft_error(WEFT_ERR_ARG, "weft_isend: NULL request pointer");
    return weft_p2p_isend(buf, bytes, dest, WEFT_TAG_CLASS_USER, tag, comm, request);
}

WEFT_API int weft_issend(const void *buf, int64_t count, weft_dtype_t dtype, int dest, int tag, weft_comm_t comm,
                         weft_request_t *request)
{
    WEFT_API_ENTER();
    size_t bytes;
    int rc = check_send(buf, count, dtype, dest, tag, comm, "weft_issend", &bytes);
    if (rc) return rc;
    if (!request) return weft_error(WEFT_ERR_ARG, "weft_issend: NULL request pointer");
    return weft_p2p_isend(buf, bytes, dest, WEFT_TAG_CLASS_USER | WEFT_TAG_SEND_SYNC, tag, comm, request);
}

WEFT_API int weft_irecv(void *buf, int64_t count, weft_dtype_t dtype, int source, int tag, weft_comm_t comm,
                        weft_request_t *request)
{
    WEFT_API_ENTER();
    size_t bytes;
    int rc = check_recv(buf, count, dtype, source, tag, comm, "weft_irecv", &bytes);
    if (rc) return rc;
    if (!request) return weft_error(WEFT_ERR_ARG, "weft_irecv: NULL request pointer");
    return weft_p2p_irecv(buf, bytes, source, WEFT_TAG_CLASS_USER, tag, comm, request);
}

/* A blocking receive that times out must not leave UCX owning the user's
 * buffer: cancel it and wait for the cancel to land. */
static int recv_abandon(weft_request_t req, int rc)
{
    char saved[1024];
    snprintf(saved, sizeof(saved), "%s", weft_last_error());
    recv_cancel(req);
    weft_request_wait_until(req, weft_wtime() + 5.0);
    if (req->complete) {
        weft_request_release(req);
    } else {
        weft_warn("recv from rank %d (tag %d, comm %s): its cancel did not complete within 5 s; a late message "
                  "may still be written to the buffer",
                  req->peer, req->tag, req->comm->name);
        weft_request_free(&req); /* still pending: released by its callback */
    }
    return weft_error(rc, "%s", saved);
}

WEFT_API int weft_send(const void *buf, int64_t count, weft_dtype_t dtype, int dest, int tag, weft_comm_t comm)
{
    WEFT_API_ENTER();
    size_t bytes;
    weft_request_t req;
    int rc = check_send(buf, count, dtype, dest, tag, comm, "weft_send", &bytes);
    if (rc) return rc;
    if ((rc = weft_p2p_isend(buf, bytes, dest, WEFT_TAG_CLASS_USER, tag, comm, &req))) return rc;
    if (WEFT_LIKELY(req->complete)) {
        rc = req->status.error;
        weft_request_release(req);
        return rc;
    }
    rc = weft_wait(&req, NULL);
    /* A send cannot be canceled; on timeout it finishes in the background. */
    if (rc == WEFT_ERR_TIMEOUT) {
        char saved[1024]; /* not weft_last_error() itself: it is the buffer written */
        snprintf(saved, sizeof(saved), "%s", weft_last_error());
        weft_request_free(&req);
        return weft_error(rc, "%s; the send finishes in the background", saved);
    }
    return rc;
}

WEFT_API int weft_recv(void *buf, int64_t count, weft_dtype_t dtype, int source, int tag, weft_comm_t comm,
                       weft_status_t *status)
{
    WEFT_API_ENTER();
    size_t bytes;
    weft_request_t req;
    int rc = check_recv(buf, count, dtype, source, tag, comm, "weft_recv", &bytes);
    if (rc) return rc;
    if ((rc = weft_p2p_irecv(buf, bytes, source, WEFT_TAG_CLASS_USER, tag, comm, &req))) return rc;
    rc = weft_wait(&req, status);
    if (rc == WEFT_ERR_TIMEOUT) return recv_abandon(req, rc);
    return rc;
}

WEFT_API int weft_sendrecv(const void *sendbuf, int64_t sendcount, weft_dtype_t sendtype, int dest, int sendtag,
                           void *recvbuf, int64_t recvcount, weft_dtype_t recvtype, int source, int recvtag,
                           weft_comm_t comm, weft_status_t *status)
{
    WEFT_API_ENTER();
    size_t sbytes, rbytes;
    weft_request_t reqs[2];
    weft_status_t st[2];
    int rc = check_send(sendbuf, sendcount, sendtype, dest, sendtag, comm, "weft_sendrecv", &sbytes);
    if (rc || (rc = check_recv(recvbuf, recvcount, recvtype, source, recvtag, comm, "weft_sendrecv", &rbytes)))
        return rc;
    if ((rc = weft_p2p_irecv(recvbuf, rbytes, source, WEFT_TAG_CLASS_USER, recvtag, comm, &reqs[0]))) return rc;
    if ((rc = weft_p2p_isend(sendbuf, sbytes, dest, WEFT_TAG_CLASS_USER, sendtag, comm, &reqs[1]))) {
        recv_abandon(reqs[0], rc);
        return rc;
    }
    rc = weft_waitall(2, reqs, st);
    if (status) *status = st[0];
    if (reqs[0]) recv_abandon(reqs[0], rc);
    if (reqs[1]) weft_request_free(&reqs[1]);
    return rc;
}

int weft_p2p_arrived(int source, unsigned cls, int tag, weft_comm_t comm)
{
    ucp_tag_t t, mask;
    ucp_tag_recv_info_t info;
    recv_tag_mask(source, cls, tag, comm, &t, &mask);
    return ucp_tag_probe_nb(weft_g.p2p->worker, t, mask, 0, &info) != NULL;
}

static int probe_once(int source, int tag, weft_comm_t comm, int *flag, weft_status_t *status)
{
    ucp_tag_t t, mask;
    ucp_tag_recv_info_t info;
    recv_tag_mask(source, WEFT_TAG_CLASS_USER, tag, comm, &t, &mask);
    ucp_tag_message_h msg = ucp_tag_probe_nb(weft_g.p2p->worker, t, mask, 0, &info);
    *flag = msg != NULL;
    if (msg && status) {
        memset(status, 0, sizeof(*status));
        status->source = weft_tag_source(info.sender_tag);
        status->tag = weft_tag_tag(info.sender_tag);
        status->bytes = info.length;
    }
    return WEFT_SUCCESS;
}

static int check_probe(int source, int tag, weft_comm_t comm, const char *fn)
{
    int rc;
    WEFT_CHECK_INIT(fn);
    if ((rc = weft_comm_check_usable(comm, fn)) || (rc = check_peer(comm, source, 1, fn, "source")) ||
        (rc = check_tag(tag, 1, fn)))
        return rc;
    return WEFT_SUCCESS;
}

WEFT_API int weft_iprobe(int source, int tag, weft_comm_t comm, int *flag, weft_status_t *status)
{
    WEFT_API_ENTER();
    int rc = check_probe(source, tag, comm, "weft_iprobe");
    if (rc) return rc;
    if (!flag) return weft_error(WEFT_ERR_ARG, "weft_iprobe: NULL flag pointer");
    weft_progress();
    return probe_once(source, tag, comm, flag, status);
}

WEFT_API int weft_probe(int source, int tag, weft_comm_t comm, weft_status_t *status)
{
    WEFT_API_ENTER();
    int rc = check_probe(source, tag, comm, "weft_probe");
    if (rc) return rc;
    double deadline = weft_deadline_from(comm->timeout, weft_wtime());
    unsigned idle = 0;
    weft_wait_sleep_t ws = {0};
    for (;;) {
        int flag, events = weft_progress();
        probe_once(source, tag, comm, &flag, status);
        if (flag) return WEFT_SUCCESS;
        if (events) ws = (weft_wait_sleep_t){0};
        if (!events) {
            double now = weft_wtime();
            if (ws.quiet_since == 0) ws.quiet_since = now;
            weft_liveness_poll(now, 0, 0);
            if (comm->revoked) return weft_comm_revoked_error(comm, "weft_probe");
            if (source != WEFT_ANY_SOURCE && weft_rank_lost_why(weft_comm_world_rank_of(comm, source))) {
                char why[320];
                weft_lost_describe(comm, source, why, sizeof(why));
                return weft_error(WEFT_ERR_PEER_LOST, "weft_probe (comm %s): %s", comm->name, why);
            }
            if (deadline > 0 && now >= deadline)
                return weft_error_quiet(WEFT_ERR_TIMEOUT,
                                        "weft_probe: no message from rank %d (tag %d, comm %s) within %.3g s", source,
                                        tag, comm->name, comm->timeout);
            if (now - ws.quiet_since >= weft_cfg.wait_spin_us * 1e-6) { /* past the spin budget: sleep */
                weft_wait_sleep(&ws, NULL, now, deadline);
                continue;
            }
        }
        weft_progress_idle(&idle, events);
    }
}
