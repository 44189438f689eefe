/* Device messages of collectives on the staged path as a pipeline of host
 * messages (see cuda.h): an envelope on the collective's own tag, then
 * the data in pinned chunks, each one contiguous host message on a channel
 * tag of its own, so that UCX moves it by its zero-copy paths (CMA between
 * processes, RDMA between nodes) while the next chunk is copied off the
 * device. The generic-datatype path (cuda.c) moves every UCX fragment
 * through a pack callback: two host copies of 8 KiB at a time. */
#include "pt2pt/cuda.h"
#include "pt2pt/pt2pt.h"

#include <stdlib.h>
#include <string.h>

#ifdef WEFT_HAVE_CUDA
#include <cuda.h>

/* What the envelope says: the message's length and its channel. */
typedef struct {
    uint32_t magic;
    uint32_t channel;
    uint64_t len;
} envelope_t;
#define ENVELOPE_MAGIC 0x77506970u /* "wPip" */

/* A slot holds one chunk at a time: its copy between the device and the
 * slot's host memory (COPY), its host message in UCX (WIRE), arrived and
 * waiting for its copy (HERE, receiver), or nothing (FREE). */
enum { SLOT_FREE, SLOT_COPY, SLOT_WIRE, SLOT_HERE };

typedef struct {
    weft_cuda_chunk_t *c; /* pinned, with its event; NULL: heap memory, copies waited for */
    char *heap;
    int state;
    size_t k; /* the chunk it holds */
    void *ucx;
    ucs_status_t st; /* the UCX outcome of its message */
    size_t got;      /* receiver: the bytes that arrived */
} slot_t;

typedef struct pipe {
    struct pipe *next;
    weft_request_t req;
    int send;
    int world; /* the peer's world rank */
    char *dev;
    size_t len; /* sender: the message; receiver: learnt from the envelope */
    CUcontext ctx;
    CUstream stream;
    ucp_ep_h ep; /* sender */
    ucp_tag_t channel;
    size_t chunk, nchunks;
    size_t started; /* sender: chunks whose copy was issued; receiver: chunk receives posted */
    size_t wired;   /* sender: chunks handed to UCX */
    size_t done;    /* chunks finished (sent, or copied to the device) */
    int nslots;
    slot_t slot[WEFT_CUDA_STAGE_MAX_DEPTH];
    envelope_t env;
    void *env_ucx;
    int env_state; /* 0: in UCX, 1: done, 2: processed (receiver) */
    ucs_status_t env_st;
    ucp_tag_recv_info_t env_info;
    int truncated; /* receiver: the message is longer than the buffer; its chunks are drained */
    int canceled;  /* receiver: the reason, once cancelled */
    int err;       /* the first failure, as a weft status (already logged) */
} pipe_t;

static pipe_t *active;
static int hooked;
static uint32_t next_channel;

#define PIPE_CHANNEL_BIT (1u << (WEFT_TAG_TAG_BITS - 1))

static int pipe_progress(void *arg);

static slot_t *slot_of(pipe_t *p, size_t k)
{
    return &p->slot[k % (size_t)p->nslots];
}

static char *slot_host(slot_t *s)
{
    return s->c ? s->c->host : s->heap;
}

static size_t chunk_len(pipe_t *p, size_t k)
{
    size_t off = k * p->chunk;
    return p->len - off < p->chunk ? p->len - off : p->chunk;
}

static void fail(pipe_t *p, int err)
{
    if (!p->err) p->err = err;
}

static void fail_cu(pipe_t *p, CUresult r, const char *at)
{
    if (r == CUDA_SUCCESS || p->err) return;
    p->err = weft_error(WEFT_ERR_TRANSPORT, "%s of a device buffer (%zu bytes, pipelined): %s failed: %s",
                        p->send ? "send" : "receive", p->len, at, weft_cu_text(r));
}

static void fail_ucx(pipe_t *p, ucs_status_t st, const char *at)
{
    if (st == UCS_OK || st == UCS_ERR_CANCELED || p->err) return;
    p->err = weft_error(weft_p2p_status_to_weft(st), "%s of a device buffer (%zu bytes, pipelined) %s rank %d: %s: %s",
                        p->send ? "send" : "receive", p->len, p->send ? "to" : "from", p->req->peer, at,
                        ucs_status_string(st));
}

/* Chunk k's copy between the device and its slot; a slot of heap memory
 * waits for it (the driver stages such a copy itself). */
static void copy_issue(pipe_t *p, size_t k, size_t n)
{
    slot_t *s = slot_of(p, k);
    CUdeviceptr dev = (CUdeviceptr)(uintptr_t)(p->dev + k * p->chunk), host = (CUdeviceptr)(uintptr_t)slot_host(s);
    CUresult r =
        p->send ? weft_cu.memcpy_async(host, dev, n, p->stream) : weft_cu.memcpy_async(dev, host, n, p->stream);
    if (r == CUDA_SUCCESS) r = s->c ? weft_cu.event_record(s->c->ev, p->stream) : weft_cu.stream_synchronize(p->stream);
    fail_cu(p, r, p->send ? "copying device memory to a pinned chunk" : "copying a pinned chunk to the device");
    s->k = k;
    s->state = SLOT_COPY;
}

static int copy_done(pipe_t *p, slot_t *s)
{
    if (!s->c || p->err) return 1;
    CUresult r = weft_cu.event_query(s->c->ev);
    if (r == CUDA_ERROR_NOT_READY) return 0;
    fail_cu(p, r, "waiting for a staged copy");
    return 1;
}

static void chunk_sent(void *ucx_req, ucs_status_t st, void *user_data)
{
    slot_t *s = user_data;
    ucp_request_free(ucx_req);
    weft_p2p_sends_inflight--;
    s->ucx = NULL;
    s->st = st;
    s->state = SLOT_HERE; /* the pipe's progress frees it */
}

static void chunk_arrived(void *ucx_req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user_data)
{
    slot_t *s = user_data;
    s->got = st == UCS_OK ? info->length : 0;
    ucp_request_free(ucx_req);
    s->ucx = NULL;
    s->st = st;
    s->state = SLOT_HERE;
}

static void envelope_sent(void *ucx_req, ucs_status_t st, void *user_data)
{
    pipe_t *p = user_data;
    ucp_request_free(ucx_req);
    weft_p2p_sends_inflight--;
    p->env_ucx = NULL;
    p->env_st = st;
    p->env_state = 1;
}

static void envelope_arrived(void *ucx_req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user_data)
{
    pipe_t *p = user_data;
    if (st == UCS_OK) p->env_info = *info;
    ucp_request_free(ucx_req);
    p->env_ucx = NULL;
    p->env_st = st;
    p->env_state = 1;
}

/* Sender: chunks whose copy is done go to UCX, in order; free slots take
 * the next chunks' copies. */
static int send_advance(pipe_t *p)
{
    int events = 0;
    if (p->env_state == 1) {
        fail_ucx(p, p->env_st, "the envelope");
        p->env_state = 2;
        events++;
    }
    for (int i = 0; i < p->nslots; i++) {
        slot_t *s = &p->slot[i];
        if (s->state != SLOT_HERE) continue;
        fail_ucx(p, s->st, "a chunk");
        s->state = SLOT_FREE;
        p->done++;
        events++;
    }
    while (!p->err && p->wired < p->started) {
        slot_t *s = slot_of(p, p->wired);
        if (s->state != SLOT_COPY || !copy_done(p, s)) break;
        ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                                     UCP_OP_ATTR_FIELD_MEMORY_TYPE,
                                     .cb.send = chunk_sent,
                                     .user_data = s,
                                     .memory_type = UCS_MEMORY_TYPE_HOST};
        ucs_status_ptr_t sp = ucp_tag_send_nbx(p->ep, slot_host(s), chunk_len(p, p->wired), p->channel, &param);
        p->wired++;
        events++;
        if (sp == NULL) {
            s->state = SLOT_FREE;
            p->done++;
        } else if (UCS_PTR_IS_ERR(sp)) {
            fail_ucx(p, UCS_PTR_STATUS(sp), "posting a chunk");
            s->state = SLOT_FREE;
            p->done++;
        } else {
            s->ucx = sp;
            s->state = SLOT_WIRE;
            weft_p2p_sends_inflight++;
        }
    }
    while (!p->err && p->started < p->nchunks && slot_of(p, p->started)->state == SLOT_FREE) {
        copy_issue(p, p->started, chunk_len(p, p->started));
        p->started++;
    }
    return events;
}

/* Receiver: the envelope says how long and where; chunk receives are
 * posted in order as slots free up; arrived chunks are copied to the
 * device in order (a drained one is dropped). */
static int recv_advance(pipe_t *p)
{
    int events = 0;
    if (p->env_state == 1) {
        p->env_state = 2;
        events++;
        if (p->env_st == UCS_ERR_MESSAGE_TRUNCATED) {
            /* The sender did not pipeline a message this size: its settings differ. */
            fail(p, weft_error(WEFT_ERR_TRUNCATE,
                               "receive of a device buffer (%zu bytes) from rank %d (tag %d, comm %s): the message is "
                               "not a pipelined one; WEFT_CUDA, WEFT_CUDA_STAGE_PIPE and the buffer sizes must be "
                               "alike on both ranks",
                               p->req->capacity, p->req->peer, p->req->tag, p->req->comm->name));
        } else if (p->env_st != UCS_OK) {
            fail_ucx(p, p->env_st, "the envelope");
            if (p->env_st == UCS_ERR_CANCELED) p->err = p->canceled ? p->canceled : WEFT_ERR_CANCELED;
        } else if (p->env_info.length != sizeof(envelope_t) || p->env.magic != ENVELOPE_MAGIC) {
            fail(p, weft_error(WEFT_ERR_TRANSPORT,
                               "receive of a device buffer (%zu bytes) from rank %d (tag %d, comm %s): a %zu-byte "
                               "message where a pipelined one's envelope was due; WEFT_CUDA, WEFT_CUDA_STAGE_PIPE and "
                               "the buffer sizes must be alike on both ranks",
                               p->req->capacity, p->req->peer, p->req->tag, p->req->comm->name,
                               (size_t)p->env_info.length));
        } else {
            int src = weft_tag_source(p->env_info.sender_tag);
            p->len = p->env.len;
            p->nchunks = (p->len + p->chunk - 1) / p->chunk;
            p->truncated = p->len > p->req->capacity;
            p->channel = weft_tag_make(WEFT_TAG_CLASS_CTRL, PIPE_CHANNEL_BIT | p->env.channel, (unsigned)src,
                                       p->req->comm->context_id);
            p->req->status.source = src;
            p->req->status.tag = weft_tag_tag(p->env_info.sender_tag);
        }
    }
    if (p->env_state != 2) return events;
    for (;;) { /* in order: the copies run on one stream */
        slot_t *s = p->done < p->started ? slot_of(p, p->done) : NULL;
        if (!s) break;
        if (s->state == SLOT_HERE) {
            fail_ucx(p, s->st, "a chunk");
            if (s->st == UCS_ERR_CANCELED && !p->err) p->err = p->canceled ? p->canceled : WEFT_ERR_CANCELED;
            if (!p->err && s->got != chunk_len(p, s->k))
                fail(p, weft_error(WEFT_ERR_TRANSPORT,
                                   "receive of a device buffer from rank %d: chunk %zu has %zu bytes, not %zu; "
                                   "WEFT_CUDA_STAGE_CHUNK must be alike on every rank",
                                   p->req->peer, s->k, s->got, chunk_len(p, s->k)));
            events++;
            if (p->err || p->truncated) {
                s->state = SLOT_FREE;
                p->done++;
                continue;
            }
            copy_issue(p, s->k, s->got);
        }
        if (s->state != SLOT_COPY || !copy_done(p, s)) break;
        s->state = SLOT_FREE;
        p->done++;
        events++;
    }
    /* After a failure nothing more is posted: the sender's rest stays
     * unreceived, as a failed receive's would. */
    while (!p->err && p->started < p->nchunks && slot_of(p, p->started)->state == SLOT_FREE) {
        slot_t *s = slot_of(p, p->started);
        size_t n = chunk_len(p, p->started);
        ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                                     UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                                     .cb.recv = chunk_arrived,
                                     .user_data = s,
                                     .memory_type = UCS_MEMORY_TYPE_HOST};
        s->k = p->started++;
        s->state = SLOT_WIRE;
        ucs_status_ptr_t sp = ucp_tag_recv_nbx(weft_g.p2p->worker, slot_host(s), n, p->channel, ~(ucp_tag_t)0, &param);
        events++;
        if (UCS_PTR_IS_ERR(sp)) {
            fail_ucx(p, UCS_PTR_STATUS(sp), "posting a chunk receive");
            s->state = SLOT_FREE;
            p->done++;
        } else if (s->state == SLOT_WIRE) {
            s->ucx = sp;
        }
    }
    return events;
}

/* Nothing of the pipe is left in UCX or on the stream. */
static int pipe_idle(pipe_t *p)
{
    if (p->env_ucx) return 0;
    for (int i = 0; i < p->nslots; i++)
        if (p->slot[i].state == SLOT_WIRE || (p->slot[i].state == SLOT_COPY && !copy_done(p, &p->slot[i]))) return 0;
    return 1;
}

static void pipe_free(pipe_t *p)
{
    for (int i = 0; i < p->nslots; i++) {
        if (p->slot[i].c) weft_cuda_chunk_put(p->slot[i].c);
        free(p->slot[i].heap);
    }
    free(p);
}

/* Finished (all chunks done), or failed with nothing left in UCX or on
 * the stream (a receiver's posted envelope and chunks are cancelled first). */
static int pipe_over(pipe_t *p)
{
    if (p->env_state == 2 && p->done == p->nchunks) return 1;
    if (!p->err) return 0;
    if (!p->send) {
        if (p->env_ucx) ucp_request_cancel(weft_g.p2p->worker, p->env_ucx);
        for (int i = 0; i < p->nslots; i++)
            if (p->slot[i].ucx && p->slot[i].state == SLOT_WIRE) ucp_request_cancel(weft_g.p2p->worker, p->slot[i].ucx);
    }
    return pipe_idle(p);
}

/* The request completes (or, orphaned, is released) and the pipe goes. */
static void pipe_end(pipe_t *p)
{
    weft_request_t req = p->req;
    int err = p->err;
    if (!p->send && !err) {
        req->status.bytes = p->truncated ? req->capacity : p->len;
        if (p->truncated)
            err = weft_error(WEFT_ERR_TRUNCATE,
                             "recv (source %d, tag %d, comm %s): the %zu-byte message does not fit the %zu-byte buffer",
                             req->peer, req->tag, req->comm->name, p->len, req->capacity);
    }
    if (WEFT_UNLIKELY(req->comm && req->comm->revoked) && !err && p->send) err = WEFT_ERR_REVOKED;
    req->owner_data = NULL;
    pipe_free(p);
    if (req->orphaned) {
        if (err)
            weft_warn("pipelined %s of a device buffer, released before it completed, failed: %s", req->ops->kind,
                      weft_last_error());
        weft_request_release(req);
    } else {
        weft_request_complete(req, err);
    }
}

/* Advances every pipe; the finished ones leave the list before their
 * requests complete (a completion may post the next message). */
static int pipe_progress(void *arg)
{
    (void)arg;
    static int running;
    if (running || !active) return 0;
    running = 1;
    int events = 0;
    pipe_t *over = NULL;
    for (pipe_t **pp = &active; *pp;) {
        pipe_t *p = *pp;
        CUcontext popped;
        int pushed = weft_cu.ctx_push(p->ctx) == CUDA_SUCCESS, done;
        if (!pushed)
            fail_cu(p, CUDA_ERROR_INVALID_CONTEXT, "making the buffer's context current");
        else
            events += p->send ? send_advance(p) : recv_advance(p);
        done = pipe_over(p);
        if (pushed) weft_cu.ctx_pop(&popped);
        if (done) {
            *pp = p->next;
            p->next = over;
            over = p;
            continue;
        }
        pp = &p->next;
    }
    running = 0;
    while (over) {
        pipe_t *p = over;
        over = p->next;
        pipe_end(p);
        events++;
    }
    return events;
}

/* ---- requests ------------------------------------------------------------------- */

static void pipe_orphan(weft_request_t req)
{
    (void)req; /* pipe_end sees req->orphaned and releases it */
}

static int pipe_cancel(weft_request_t req)
{
    pipe_t *p = req->owner_data;
    if (!p || p->send) return WEFT_SUCCESS;
    if (!p->canceled) p->canceled = req->cancel_reason ? req->cancel_reason : WEFT_ERR_CANCELED;
    fail(p, p->canceled); /* the pipe's progress withdraws what it posted (pipe_over) */
    return WEFT_SUCCESS;
}

/* A receive from a rank known to be lost can never complete. */
static void pipe_check(weft_request_t req)
{
    pipe_t *p = req->owner_data;
    if (!p || p->send || req->peer < 0 || weft_lost_count == 0 || !weft_rank_lost_why(p->world)) return;
    char why[320];
    weft_lost_describe(req->comm, req->peer, why, sizeof(why));
    req->cancel_reason = WEFT_ERR_PEER_LOST;
    weft_error(WEFT_ERR_PEER_LOST, "recv from rank %d (tag %d, comm %s): %s", req->peer, req->tag, req->comm->name,
               why);
    pipe_cancel(req);
}

/* Copies and arrived chunks raise no transport events: the progress
 * thread polls while one is pending; else UCX's events say when. */
static int pipe_idle_needs(weft_request_t req, double *wake_at, weft_bell_ref_t *bell)
{
    (void)bell;
    (void)wake_at;
    pipe_t *p = req->owner_data;
    if (!p) return WEFT_NEEDS_NOTHING;
    if (p->env_state == 1) return WEFT_NEEDS_POLL;
    for (int i = 0; i < p->nslots; i++)
        if (p->slot[i].state == SLOT_COPY || p->slot[i].state == SLOT_HERE) return WEFT_NEEDS_POLL;
    return WEFT_NEEDS_EVENTS;
}

static const weft_request_ops_t pipe_send_ops = {.kind = "send", .orphan = pipe_orphan, .idle_needs = pipe_idle_needs};
static const weft_request_ops_t pipe_recv_ops = {
    .kind = "recv", .cancel = pipe_cancel, .check = pipe_check, .orphan = pipe_orphan, .idle_needs = pipe_idle_needs};

int weft_cuda_pipe_wanted(size_t bytes)
{
    return weft_cfg.cuda_stage_pipe > 0 && bytes >= (size_t)weft_cfg.cuda_stage_pipe;
}

static pipe_t *pipe_new(weft_request_t req, void *dev, int send, size_t bytes)
{
    pipe_t *p = calloc(1, sizeof(*p));
    if (!p) {
        weft_error(WEFT_ERR_NO_MEMORY, "cuda: out of memory for a pipelined message");
        return NULL;
    }
    p->req = req;
    p->send = send;
    p->dev = dev;
    p->len = bytes;
    p->world = req->peer >= 0 ? weft_comm_world_rank_of(req->comm, req->peer) : -1;
    p->chunk = weft_cuda_chunk_bytes();
    size_t most = (bytes + p->chunk - 1) / p->chunk;
    p->nslots = most < (size_t)weft_cuda_chunk_depth() ? (int)most : weft_cuda_chunk_depth();
    CUresult r = weft_cuda_buffer_enter(dev, &p->ctx, &p->stream);
    if (r != CUDA_SUCCESS) goto fail;
    for (int i = 0; i < p->nslots; i++) {
        /* Where no pinned chunk may be had now, heap memory: slower copies, the same protocol. */
        if (!(p->slot[i].c = weft_cuda_chunk_get(&r)) && r == CUDA_SUCCESS && !(p->slot[i].heap = malloc(p->chunk)))
            r = CUDA_ERROR_OUT_OF_MEMORY;
        if (r != CUDA_SUCCESS) break;
    }
    CUcontext popped;
    weft_cu.ctx_pop(&popped);
    if (r == CUDA_SUCCESS) return p;
fail:
    weft_error(WEFT_ERR_TRANSPORT, "cuda: preparing a pipelined %s of %zu bytes failed: %s", send ? "send" : "receive",
               bytes, weft_cu_text(r));
    pipe_free(p);
    return NULL;
}

static int pipe_start(pipe_t *p)
{
    p->next = active;
    active = p;
    p->req->owner_data = p;
    if (!hooked) {
        int rc = weft_progress_register(pipe_progress, NULL);
        if (rc) return rc;
        hooked = 1;
    }
    weft_debug("cuda: pipelined %s of %zu bytes %s rank %d: chunks of %zu, %d slots%s", p->send ? "send" : "receive",
               p->send ? p->len : p->req->capacity, p->send ? "to" : "from", p->req->peer, p->chunk, p->nslots,
               p->slot[0].c ? "" : " (heap memory: no pinned chunk may be allocated now)");
    pipe_progress(NULL);
    return WEFT_SUCCESS;
}

int weft_cuda_pipe_send(weft_request_t req, const void *dev, size_t bytes, ucp_ep_h ep, ucp_tag_t wire)
{
    pipe_t *p = pipe_new(req, (void *)dev, 1, bytes);
    if (!p) return WEFT_ERR_TRANSPORT;
    req->ops = &pipe_send_ops;
    p->ep = ep;
    p->nchunks = (bytes + p->chunk - 1) / p->chunk;
    p->env.magic = ENVELOPE_MAGIC;
    p->env.channel = next_channel++ & (PIPE_CHANNEL_BIT - 1);
    p->env.len = bytes;
    p->channel = weft_tag_make(WEFT_TAG_CLASS_CTRL, PIPE_CHANNEL_BIT | p->env.channel, (unsigned)req->comm->rank,
                               req->comm->context_id);
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                                 UCP_OP_ATTR_FIELD_MEMORY_TYPE,
                                 .cb.send = envelope_sent,
                                 .user_data = p,
                                 .memory_type = UCS_MEMORY_TYPE_HOST};
    ucs_status_ptr_t sp = ucp_tag_send_nbx(ep, &p->env, sizeof(p->env), wire, &param);
    if (UCS_PTR_IS_ERR(sp)) {
        ucs_status_t st = UCS_PTR_STATUS(sp);
        pipe_free(p);
        return weft_error(weft_p2p_status_to_weft(st), "send to rank %d (comm %s): %s", req->peer, req->comm->name,
                          ucs_status_string(st));
    }
    if (sp == NULL) {
        p->env_state = 1;
    } else {
        p->env_ucx = sp;
        weft_p2p_sends_inflight++;
    }
    return pipe_start(p);
}

int weft_cuda_pipe_recv(weft_request_t req, void *dev, size_t bytes, ucp_tag_t tag, ucp_tag_t mask)
{
    pipe_t *p = pipe_new(req, dev, 0, bytes);
    if (!p) return WEFT_ERR_TRANSPORT;
    req->ops = &pipe_recv_ops;
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                                                 UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FIELD_MEMORY_TYPE |
                                                 UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
                                 .cb.recv = envelope_arrived,
                                 .user_data = p,
                                 .recv_info.tag_info = &p->env_info,
                                 .memory_type = UCS_MEMORY_TYPE_HOST};
    ucs_status_ptr_t sp = ucp_tag_recv_nbx(weft_g.p2p->worker, &p->env, sizeof(p->env), tag, mask, &param);
    if (UCS_PTR_IS_ERR(sp)) {
        ucs_status_t st = UCS_PTR_STATUS(sp);
        pipe_free(p);
        return weft_error(weft_p2p_status_to_weft(st), "recv from rank %d (comm %s): %s", req->peer, req->comm->name,
                          ucs_status_string(st));
    }
    if (p->env_state == 0) p->env_ucx = sp;
    return pipe_start(p);
}

#else /* no CUDA in this build: classification never picks the staged path */

int weft_cuda_pipe_wanted(size_t bytes)
{
    (void)bytes;
    return 0;
}

int weft_cuda_pipe_send(weft_request_t req, const void *dev, size_t bytes, ucp_ep_h ep, ucp_tag_t wire)
{
    (void)req;
    (void)dev;
    (void)bytes;
    (void)ep;
    (void)wire;
    return weft_error(WEFT_ERR_UNSUPPORTED, "cuda: this weft was built without CUDA");
}

int weft_cuda_pipe_recv(weft_request_t req, void *dev, size_t bytes, ucp_tag_t tag, ucp_tag_t mask)
{
    (void)req;
    (void)dev;
    (void)bytes;
    (void)tag;
    (void)mask;
    return weft_error(WEFT_ERR_UNSUPPORTED, "cuda: this weft was built without CUDA");
}

#endif
