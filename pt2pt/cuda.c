/* Device buffers in point-to-point: the path each takes, and the staged
 * path for a UCX without CUDA memory (see cuda.h; the driver and memory
 * types are src/cuda's). */
#include "pt2pt/cuda.h"

#include <stdlib.h>
#include <string.h>

ucp_datatype_t weft_cuda_stage_dt;

/* ---- the mode ---------------------------------------------------------------- */

#ifdef WEFT_HAVE_CUDA
#include <cuda.h>

enum { MODE_AUTO, MODE_UCX, MODE_STAGED, MODE_OFF };
static int mode;
static int ucx_cuda; /* the UCX context carries CUDA memory */

/* ---- classification ------------------------------------------------------------ */

int weft_cuda_classify(const void *buf, size_t bytes, const char *fn, const char *what, weft_memtype_t *mem, int *path)
{
    int managed = 0, rc = weft_cuda_memtype(buf, bytes, fn, what, mem, &managed);
    *path = managed ? WEFT_CUDA_MANAGED : WEFT_CUDA_HOST;
    if (rc || *mem != WEFT_MEM_CUDA) return rc;
    if (mode == MODE_OFF)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: %s is device memory and WEFT_CUDA=off", fn, what);
    /* Small messages skip UCX's CUDA transports in auto mode: one copy
     * through weft's pinned buffer on each side beats cuda_ipc's handle
     * exchange and copy completion (docs/PERFORMANCE.md section 8). */
    *path = ucx_cuda && (mode == MODE_UCX || (mode == MODE_AUTO && bytes > (size_t)weft_cfg.cuda_small))
                ? WEFT_CUDA_UCX
                : WEFT_CUDA_STAGED;
    return WEFT_SUCCESS;
}

/* ---- the staged path: pinned chunks, one copy stream per context ---------------- */

typedef weft_cuda_chunk_t chunk_t;

static chunk_t *chunk_pool;
static size_t chunk_bytes;
static int chunk_depth;

enum { MAX_DEPTH = WEFT_CUDA_STAGE_MAX_DEPTH };
/* Messages up to this size are copied straight to or from UCX's buffer (one
 * fragment on shared memory; one copy either way). Larger ones go through
 * pinned chunks: copying each UCX fragment separately was measured 3-8x
 * slower at 16-512 KiB on an H100 (a copy and a wait per 8 KiB fragment). */
#define DIRECT_MAX ((size_t)8192)

struct weft_cuda_stage {
    int send;
    char *dev;
    size_t len;
    CUcontext ctx;
    CUstream stream;
    int nslots;   /* 0: direct (copies straight to / from UCX's buffer) */
    size_t chunk; /* bytes per chunk: the whole message when it is under one pinned chunk */
    chunk_t *slot[MAX_DEPTH];
    size_t next;   /* the offset UCX is expected to ask for next (in order) */
    size_t issued; /* send: bytes whose copy to a chunk is issued */
    int finished;  /* the last copies were waited for */
    CUresult err;  /* the first CUDA failure */
    const char *err_at;
};

static void stage_fail(weft_cuda_stage_t *st, CUresult r, const char *at)
{
    if (r != CUDA_SUCCESS && st->err == CUDA_SUCCESS) {
        st->err = r;
        st->err_at = at;
    }
}

/* A pinned chunk from the pool, or a new one; NULL with *r untouched
 * where none may be allocated now (weft_cuda_pinned_may_alloc: the
 * copies then go through pageable memory). */
static chunk_t *chunk_get(CUresult *r)
{
    chunk_t *c = chunk_pool;
    if (c) {
        chunk_pool = c->next;
        return c;
    }
    if (!weft_cuda_pinned_may_alloc()) {
        weft_debug("cuda: no pinned chunk kept, and none is allocated on the progress thread or while a stream "
                   "waits for a staged call: this copy goes through pageable memory");
        return NULL;
    }
    if (!(c = calloc(1, sizeof(*c)))) {
        *r = CUDA_ERROR_OUT_OF_MEMORY;
        return NULL;
    }
    /* Portable: usable from every context's stream. */
    if ((*r = weft_cu.mem_host_alloc((void **)&c->host, chunk_bytes, CU_MEMHOSTALLOC_PORTABLE)) != CUDA_SUCCESS ||
        (*r = weft_cu.event_create(&c->ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
        if (c->host) weft_cu.mem_free_host(c->host);
        free(c);
        return NULL;
    }
    return c;
}

weft_cuda_chunk_t *weft_cuda_chunk_get(CUresult *r)
{
    return chunk_get(r);
}

void weft_cuda_chunk_put(weft_cuda_chunk_t *c)
{
    c->pending = 0;
    c->next = chunk_pool;
    chunk_pool = c;
}

size_t weft_cuda_chunk_bytes(void)
{
    return chunk_bytes;
}

int weft_cuda_chunk_depth(void)
{
    return chunk_depth;
}

static void chunk_wait(weft_cuda_stage_t *st, chunk_t *c)
{
    if (!c->pending) return;
    stage_fail(st, weft_cu.event_synchronize(c->ev), "waiting for a staged copy");
    c->pending = 0;
}

/* Chunk k's copy between the device buffer and its slot, recorded on the
 * slot's event. */
static void chunk_copy(weft_cuda_stage_t *st, size_t k, size_t bytes)
{
    chunk_t *c = st->slot[k % (size_t)st->nslots];
    CUdeviceptr dev = (CUdeviceptr)(uintptr_t)(st->dev + k * st->chunk), host = (CUdeviceptr)(uintptr_t)c->host;
    CUresult r = st->send ? weft_cu.memcpy_async(host, dev, bytes, st->stream)
                          : weft_cu.memcpy_async(dev, host, bytes, st->stream);
    stage_fail(st, r, st->send ? "copying device memory to a pinned chunk" : "copying a pinned chunk to the device");
    if (r == CUDA_SUCCESS) {
        stage_fail(st, weft_cu.event_record(c->ev, st->stream), "recording a staged copy");
        c->pending = 1;
    }
}

/* Direct copy of len bytes between the device buffer at off and host (UCX's
 * buffer), waited for. Through a pinned chunk when it fits: a copy between
 * the device and pageable memory is slower (the driver stages it itself). */
static void direct_copy(weft_cuda_stage_t *st, size_t off, void *host, size_t len)
{
    CUresult r = CUDA_SUCCESS;
    chunk_t *c = len <= chunk_bytes ? chunk_get(&r) : NULL;
    CUdeviceptr dev = (CUdeviceptr)(uintptr_t)(st->dev + off), h = (CUdeviceptr)(uintptr_t)(c ? c->host : (char *)host);
    if (c && !st->send) memcpy(c->host, host, len);
    r = st->send ? weft_cu.memcpy_async(h, dev, len, st->stream) : weft_cu.memcpy_async(dev, h, len, st->stream);
    if (r == CUDA_SUCCESS) r = weft_cu.stream_synchronize(st->stream);
    stage_fail(st, r, st->send ? "copying device memory to the host" : "copying to the device");
    if (c) {
        if (st->send && r == CUDA_SUCCESS) memcpy(host, c->host, len);
        weft_cuda_chunk_put(c);
    }
}

/* Sender: issues the copies of chunks up to `upto` bytes (chunk-aligned or
 * the end), as far as the slots allow. */
static void send_issue(weft_cuda_stage_t *st, size_t upto)
{
    while (st->issued < upto && st->issued < st->len) {
        size_t k = st->issued / st->chunk, n = st->len - st->issued < st->chunk ? st->len - st->issued : st->chunk;
        chunk_copy(st, k, n);
        st->issued += n;
    }
}

CUresult weft_cuda_buffer_enter(const void *dev, CUcontext *ctx, CUstream *stream)
{
    CUresult r;
    CUpointer_attribute a = CU_POINTER_ATTRIBUTE_CONTEXT;
    void *d = ctx;
    if ((r = weft_cu.pointer_get_attributes(1, &a, &d, (CUdeviceptr)(uintptr_t)dev)) != CUDA_SUCCESS ||
        (r = weft_cu.ctx_push(*ctx)) != CUDA_SUCCESS)
        return r;
    if ((*stream = weft_cuda_copy_stream(*ctx, &r))) return CUDA_SUCCESS;
    CUcontext popped;
    weft_cu.ctx_pop(&popped);
    return r;
}

weft_cuda_stage_t *weft_cuda_stage_new(void *dev, size_t bytes, int send)
{
    weft_cuda_stage_t *st = calloc(1, sizeof(*st));
    if (!st) {
        weft_error(WEFT_ERR_NO_MEMORY, "cuda: out of memory for a staged message");
        return NULL;
    }
    st->send = send;
    st->dev = dev;
    st->len = bytes;
    CUresult r = weft_cuda_buffer_enter(dev, &st->ctx, &st->stream);
    if (r != CUDA_SUCCESS) goto fail;
    if (bytes > DIRECT_MAX) {
        st->chunk = bytes < chunk_bytes ? bytes : chunk_bytes;
        size_t chunks = (bytes + st->chunk - 1) / st->chunk;
        st->nslots = chunks < (size_t)chunk_depth ? (int)chunks : chunk_depth;
        for (int i = 0; i < st->nslots; i++)
            if (!(st->slot[i] = chunk_get(&r))) {
                st->nslots = i;
                break;
            }
        /* A sender starts its first copies now: they run while the
         * message's header goes out. */
        if (r == CUDA_SUCCESS && send) send_issue(st, (size_t)st->nslots * st->chunk);
    }
    CUcontext popped;
    weft_cu.ctx_pop(&popped);
    weft_debug("cuda: staged %s of %zu bytes at %p: %d chunk slots", send ? "send" : "receive", bytes, dev, st->nslots);
    if (r == CUDA_SUCCESS && st->err == CUDA_SUCCESS) return st;
    if (st->err != CUDA_SUCCESS) r = st->err;
fail:
    weft_error(WEFT_ERR_TRANSPORT, "cuda: preparing a staged %s of %zu bytes failed: %s", send ? "send" : "receive",
               bytes, weft_cu_text(r));
    weft_cuda_stage_free(st);
    return NULL;
}

/* UCX's generic datatype: the stage is the message's buffer. */
static void *dt_start(void *context, const void *buffer, size_t count)
{
    (void)context;
    (void)count;
    return (void *)buffer;
}

static void *dt_start_unpack(void *context, void *buffer, size_t count)
{
    return dt_start(context, buffer, count);
}

static size_t dt_packed_size(void *state)
{
    return ((weft_cuda_stage_t *)state)->len;
}

static size_t dt_pack(void *state, size_t offset, void *dest, size_t max)
{
    weft_cuda_stage_t *st = state;
    weft_log(WEFT_LOG_TRACE, "cuda: pack up to %zu bytes at %zu of %zu", max, offset, st->len);
    size_t want = offset < st->len ? (st->len - offset < max ? st->len - offset : max) : 0, done = 0;
    if (weft_cu.ctx_push(st->ctx) != CUDA_SUCCESS) {
        stage_fail(st, CUDA_ERROR_INVALID_CONTEXT, "making the buffer's context current");
        memset(dest, 0, want);
        return want;
    }
    if (!st->nslots || offset != st->next) {
        /* A small message, or UCX asks out of order: copy directly. */
        direct_copy(st, offset, dest, want);
        done = want;
    }
    while (done < want) {
        size_t k = (offset + done) / st->chunk, in = (offset + done) % st->chunk;
        size_t n = st->chunk - in < want - done ? st->chunk - in : want - done;
        chunk_t *c = st->slot[k % (size_t)st->nslots];
        chunk_wait(st, c);
        memcpy((char *)dest + done, c->host + in, n);
        done += n;
        /* A chunk read to its end frees its slot for the chunk depth ahead. */
        if (in + n == st->chunk || offset + done == st->len) send_issue(st, (k + 1 + (size_t)st->nslots) * st->chunk);
    }
    if (offset == st->next) st->next = offset + done;
    CUcontext popped;
    weft_cu.ctx_pop(&popped);
    if (st->err != CUDA_SUCCESS) memset(dest, 0, want);
    return want;
}

static ucs_status_t dt_unpack(void *state, size_t offset, const void *src, size_t length)
{
    weft_cuda_stage_t *st = state;
    weft_log(WEFT_LOG_TRACE, "cuda: unpack %zu bytes at %zu of %zu (first 0x%02x)", length, offset, st->len,
             length ? *(const unsigned char *)src : 0);
    if (offset >= st->len) return UCS_OK;
    if (length > st->len - offset) length = st->len - offset;
    if (weft_cu.ctx_push(st->ctx) != CUDA_SUCCESS) {
        stage_fail(st, CUDA_ERROR_INVALID_CONTEXT, "making the buffer's context current");
        return UCS_OK;
    }
    if (!st->nslots || offset != st->next) {
        direct_copy(st, offset, (void *)src, length);
    } else {
        size_t done = 0;
        while (done < length) {
            size_t at = offset + done, k = at / st->chunk, in = at % st->chunk;
            size_t n = st->chunk - in < length - done ? st->chunk - in : length - done;
            chunk_t *c = st->slot[k % (size_t)st->nslots];
            if (in == 0) chunk_wait(st, c); /* its previous chunk reached the device */
            memcpy(c->host + in, (const char *)src + done, n);
            done += n;
            if (in + n == st->chunk || at + n == st->len) chunk_copy(st, k, in + n);
        }
        st->next = offset + length;
    }
    CUcontext popped;
    weft_cu.ctx_pop(&popped);
    return UCS_OK;
}

/* The message is done (UCX calls this before completing it; weft calls it
 * again through weft_cuda_stage_end): wait for every copy in flight. */
static void dt_finish(void *state)
{
    weft_cuda_stage_t *st = state;
    if (st->finished) return;
    st->finished = 1;
    if (!st->nslots) return;
    if (weft_cu.ctx_push(st->ctx) != CUDA_SUCCESS) {
        stage_fail(st, CUDA_ERROR_INVALID_CONTEXT, "making the buffer's context current");
        return;
    }
    /* A receive whose last fragment did not end a chunk (or came out of
     * order) leaves a partly filled chunk behind. */
    if (!st->send && st->next % st->chunk && st->next < st->len)
        chunk_copy(st, st->next / st->chunk, st->next % st->chunk);
    for (int i = 0; i < st->nslots; i++)
        chunk_wait(st, st->slot[i]);
    CUcontext popped;
    weft_cu.ctx_pop(&popped);
}

int weft_cuda_stage_end(weft_cuda_stage_t *st, const char *what)
{
    dt_finish(st);
    if (st->err == CUDA_SUCCESS) return WEFT_SUCCESS;
    return weft_error(WEFT_ERR_TRANSPORT, "%s: %s failed: %s", what, st->err_at, weft_cu_text(st->err));
}

void weft_cuda_stage_free(weft_cuda_stage_t *st)
{
    if (!st) return;
    for (int i = 0; i < st->nslots; i++)
        weft_cuda_chunk_put(st->slot[i]);
    free(st);
}

int weft_cuda_init(ucp_context_h ctx)
{
    const char *m = weft_cfg.cuda;
    if (!strcmp(m, "auto"))
        mode = MODE_AUTO;
    else if (!strcmp(m, "ucx"))
        mode = MODE_UCX;
    else if (!strcmp(m, "staged"))
        mode = MODE_STAGED;
    else if (!strcmp(m, "off"))
        mode = MODE_OFF;
    else
        return weft_error(WEFT_ERR_ARG, "WEFT_CUDA='%s' is not one of auto, ucx, staged, off", m);
    ucp_context_attr_t attr = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    ucx_cuda = ucp_context_query(ctx, &attr) == UCS_OK && (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
    if (mode == MODE_UCX && !ucx_cuda)
        return weft_error(WEFT_ERR_UNSUPPORTED,
                          "WEFT_CUDA=ucx, but UCX %s carries no CUDA memory (no cuda_copy / cuda_ipc transports)",
                          ucp_get_version_string());
    chunk_bytes = weft_cfg.cuda_stage_chunk < 4096 ? 4096 : (size_t)weft_cfg.cuda_stage_chunk;
    chunk_depth = weft_cfg.cuda_stage_depth < 1           ? 1
                  : weft_cfg.cuda_stage_depth > MAX_DEPTH ? MAX_DEPTH
                                                          : weft_cfg.cuda_stage_depth;
    ucp_generic_dt_ops_t ops = {.start_pack = dt_start,
                                .start_unpack = dt_start_unpack,
                                .packed_size = dt_packed_size,
                                .pack = dt_pack,
                                .unpack = dt_unpack,
                                .finish = dt_finish};
    ucs_status_t st = ucp_dt_create_generic(&ops, NULL, &weft_cuda_stage_dt);
    if (st != UCS_OK)
        return weft_error(WEFT_ERR_TRANSPORT, "cuda: creating the staging datatype failed: %s", ucs_status_string(st));
    return WEFT_SUCCESS;
}

void weft_cuda_finalize(void)
{
    if (weft_cuda_stage_dt) ucp_dt_destroy(weft_cuda_stage_dt);
    weft_cuda_stage_dt = 0;
    if (weft_cuda_driver_state() > 0) {
        while (chunk_pool) {
            chunk_t *c = chunk_pool;
            chunk_pool = c->next;
            weft_cu.event_destroy(c->ev);
            weft_cu.mem_free_host(c->host);
            free(c);
        }
    }
    weft_cuda_copy_streams_release();
}

void weft_cuda_describe(char *buf, size_t len)
{
    const char *how = mode == MODE_OFF ? "off (WEFT_CUDA=off)"
                      : ucx_cuda && mode != MODE_STAGED
                          ? "through UCX (cuda_copy, cuda_ipc)"
                          : "staged through pinned host chunks (the UCX in use carries no CUDA memory)";
    snprintf(buf, len,
             "UCX carries host%s; device buffers: %s; collectives on device buffers that no GPU kernel takes "
             "(across nodes): host copies in pinned blocks a pool keeps for the next call%s; libcuda %s",
             ucx_cuda ? " cuda" : "", how,
             mode == MODE_OFF          ? ""
             : weft_cuda_ucx_carries() ? ", but large allreduce and reduce_scatter, and allgather of one rank per "
                                         "node, stay on the GPU (coll/cuda's direct rings: UCX moves the blocks; "
                                         "rules.conf's xport=cuda rows, weft_info --coll)"
                                       : ", but large allreduce and reduce_scatter, and allgather of one rank per "
                                         "node, stay on the GPU (coll/cuda's direct rings: their blocks in pinned "
                                         "chunks, one host message each from WEFT_CUDA_STAGE_PIPE bytes; rules.conf's "
                                         "xport=host rows, weft_info --coll)",
             weft_cuda_driver_state() > 0   ? "loaded"
             : weft_cuda_driver_state() < 0 ? "loaded but unusable"
                                            : "not loaded by this process");
}

int weft_cuda_ucx_carries(void)
{
    return ucx_cuda && (mode == MODE_AUTO || mode == MODE_UCX);
}

int weft_cuda_p2p_moves(void)
{
    return mode != MODE_OFF;
}

int weft_cuda_ucx_device_now(void)
{
    CUcontext c = NULL;
    return ucx_cuda && weft_cuda_possible() && weft_cu.ctx_get_current && weft_cu.ctx_get_current(&c) == CUDA_SUCCESS &&
           c;
}

#else /* no CUDA in this build */

int weft_cuda_classify(const void *buf, size_t bytes, const char *fn, const char *what, weft_memtype_t *mem, int *path)
{
    *path = WEFT_CUDA_HOST;
    return weft_cuda_memtype(buf, bytes, fn, what, mem, NULL);
}

int weft_cuda_init(ucp_context_h ctx)
{
    (void)ctx;
    if (strcmp(weft_cfg.cuda, "auto") && strcmp(weft_cfg.cuda, "off"))
        return weft_error(WEFT_ERR_UNSUPPORTED, "WEFT_CUDA='%s': this weft was built without CUDA", weft_cfg.cuda);
    return WEFT_SUCCESS;
}

void weft_cuda_finalize(void)
{
}

int weft_cuda_ucx_device_now(void)
{
    return 0;
}

int weft_cuda_ucx_carries(void)
{
    return 0;
}

int weft_cuda_p2p_moves(void)
{
    return 0;
}

weft_cuda_stage_t *weft_cuda_stage_new(void *dev, size_t bytes, int send)
{
    (void)dev;
    (void)bytes;
    (void)send;
    weft_error(WEFT_ERR_UNSUPPORTED, "cuda: this weft was built without CUDA");
    return NULL;
}

int weft_cuda_stage_end(weft_cuda_stage_t *st, const char *what)
{
    (void)st;
    (void)what;
    return WEFT_SUCCESS;
}

void weft_cuda_stage_free(weft_cuda_stage_t *st)
{
    (void)st;
}

void weft_cuda_describe(char *buf, size_t len)
{
    snprintf(buf, len, "host only (built without CUDA)");
}

#endif
