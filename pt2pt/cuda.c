/* Device buffers in point-to-point: detection, and the staged path for a
 * UCX without CUDA memory (see cuda.h). */
#include "pt2pt/cuda.h"

#include "src/cuda_driver.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

ucp_datatype_t weft_cuda_stage_dt;

/* ---- the mode and the loader check ---------------------------------------- */

enum { MODE_AUTO, MODE_UCX, MODE_STAGED, MODE_OFF };
static int mode;
static int ucx_cuda; /* the UCX context carries CUDA memory */

/* libcuda's state in this process: 0 not loaded (checked again when the
 * loader loads anything), 1 loaded and usable, -1 loaded but unusable
 * (reported once). */
static int driver_state;
static int driver_load(void);

/* The loader appends each object it loads to the end of its list of link
 * maps: while the last one seen has no successor, nothing was loaded since
 * and libcuda cannot have arrived, for the price of one load. That object
 * is pinned (a reference from dlopen RTLD_NOLOAD), so it stays mapped while
 * weft points to it; without a pin every call asks the loader's counter. */
static struct link_map *last;
static void *last_pin;

static int loader_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    *(unsigned long long *)arg = info->dlpi_adds;
    return 1; /* the counter is the same in every entry: one is enough */
}

static int loaded_since(void)
{
    static unsigned long long seen;
    if (WEFT_LIKELY(last != NULL) && !last->l_next) return 0;
    struct link_map *m = last ? last : _r_debug.r_map;
    while (m && m->l_next)
        m = m->l_next;
    void *pin = m && m->l_name && m->l_name[0] ? dlopen(m->l_name, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    if (pin) {
        if (last_pin) dlclose(last_pin);
        last = m;
        last_pin = pin;
        return 1;
    }
    unsigned long long adds = 0;
    dl_iterate_phdr(loader_cb, &adds);
    if (adds == seen) return 0;
    seen = adds;
    return 1;
}

int weft_cuda_possible(void)
{
    if (WEFT_LIKELY(driver_state != 0)) return driver_state > 0;
    if (WEFT_LIKELY(!loaded_since())) return 0;
    return driver_load() > 0;
}

#ifdef WEFT_HAVE_CUDA
#include <cuda.h>

/* ---- the driver, opened at run time ------------------------------------------ */

weft_cu_driver_t weft_cu;

const char *weft_cu_text(CUresult r)
{
    const char *s = NULL;
    if (weft_cu.get_error_string) weft_cu.get_error_string(r, &s);
    return s ? s : "unknown CUDA error";
}

static int driver_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return 0;
    struct {
        const char *name;
        void **fn;
    } syms[] = {
        {"cuInit", (void **)&weft_cu.init},
        {"cuGetErrorString", (void **)&weft_cu.get_error_string},
        {"cuPointerGetAttributes", (void **)&weft_cu.pointer_get_attributes},
        {"cuCtxPushCurrent_v2", (void **)&weft_cu.ctx_push},
        {"cuCtxPopCurrent_v2", (void **)&weft_cu.ctx_pop},
        {"cuStreamCreate", (void **)&weft_cu.stream_create},
        {"cuStreamDestroy_v2", (void **)&weft_cu.stream_destroy},
        {"cuStreamSynchronize", (void **)&weft_cu.stream_synchronize},
        {"cuEventCreate", (void **)&weft_cu.event_create},
        {"cuEventDestroy_v2", (void **)&weft_cu.event_destroy},
        {"cuEventRecord", (void **)&weft_cu.event_record},
        {"cuEventSynchronize", (void **)&weft_cu.event_synchronize},
        {"cuMemcpyAsync", (void **)&weft_cu.memcpy_async},
        {"cuMemHostAlloc", (void **)&weft_cu.mem_host_alloc},
        {"cuMemFreeHost", (void **)&weft_cu.mem_free_host},
    };
    struct {
        const char *name;
        void **fn;
    } optional[] = {
        {"cuEventQuery", (void **)&weft_cu.event_query},
        {"cuStreamWaitEvent", (void **)&weft_cu.stream_wait_event},
        {"cuStreamIsCapturing", (void **)&weft_cu.stream_is_capturing},
        {"cuMemAlloc_v2", (void **)&weft_cu.mem_alloc},
        {"cuMemFree_v2", (void **)&weft_cu.mem_free},
        {"cuMemsetD8_v2", (void **)&weft_cu.memset_d8},
        {"cuMemHostGetDevicePointer_v2", (void **)&weft_cu.mem_host_get_device_pointer},
        {"cuIpcGetMemHandle", (void **)&weft_cu.ipc_get_mem_handle},
        {"cuIpcOpenMemHandle_v2", (void **)&weft_cu.ipc_open_mem_handle},
        {"cuIpcCloseMemHandle", (void **)&weft_cu.ipc_close_mem_handle},
        {"cuModuleLoadData", (void **)&weft_cu.module_load_data},
        {"cuModuleUnload", (void **)&weft_cu.module_unload},
        {"cuModuleGetFunction", (void **)&weft_cu.module_get_function},
        {"cuLaunchKernel", (void **)&weft_cu.launch_kernel},
        {"cuCtxGetCurrent", (void **)&weft_cu.ctx_get_current},
        {"cuCtxGetDevice", (void **)&weft_cu.ctx_get_device},
        {"cuDeviceGetAttribute", (void **)&weft_cu.device_get_attribute},
        {"cuStreamCreateWithPriority", (void **)&weft_cu.stream_create_with_priority},
        {"cuCtxGetStreamPriorityRange", (void **)&weft_cu.ctx_get_stream_priority_range},
        {"cuFuncGetAttribute", (void **)&weft_cu.func_get_attribute},
        {"cuMemGetAddressRange_v2", (void **)&weft_cu.mem_get_address_range},
        {"cuStreamGetCtx", (void **)&weft_cu.stream_get_ctx},
        {"cuDriverGetVersion", (void **)&weft_cu.driver_get_version},
#if CUDA_VERSION >= 12000
        {"cuLaunchKernelEx", (void **)&weft_cu.launch_kernel_ex},
#endif
    };
    for (size_t i = 0; i < sizeof(optional) / sizeof(optional[0]); i++)
        *optional[i].fn = dlsym(h, optional[i].name);
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
        if (!(*syms[i].fn = dlsym(h, syms[i].name))) {
            weft_warn("cuda: libcuda.so.1 is loaded but has no %s: device buffers are not recognised", syms[i].name);
            driver_state = -1;
            return -1;
        }
    CUresult r = weft_cu.init(0);
    if (r != CUDA_SUCCESS) {
        weft_warn("cuda: cuInit failed (%s): device buffers are not recognised", weft_cu_text(r));
        driver_state = -1;
        return -1;
    }
    weft_debug("cuda: libcuda.so.1 is loaded: buffers are classified by the driver");
    driver_state = 1;
    return 1;
}

/* ---- classification ------------------------------------------------------------ */

/* An address the driver does not know is host memory, unless it cannot
 * be read (a freed device buffer keeps its address reserved, unreadable).
 * Readable 2 MiB regions are remembered, so a region is checked once. */
static int host_readable(const void *p)
{
    enum { SLOTS = 64 };
    static uintptr_t ok[SLOTS];
    uintptr_t region = ((uintptr_t)p >> 21) + 1;
    if (ok[region % SLOTS] == region) return 1;
    char byte;
    struct iovec l = {&byte, 1}, r = {(void *)p, 1};
    /* Only EFAULT says unreadable (ENOSYS, EPERM: the check is not available here). */
    if (process_vm_readv(getpid(), &l, 1, &r, 1, 0) != 1 && errno == EFAULT) return 0;
    ok[region % SLOTS] = region;
    return 1;
}

int weft_cuda_classify(const void *buf, size_t bytes, const char *fn, const char *what, weft_memtype_t *mem, int *path)
{
    *mem = WEFT_MEM_HOST;
    *path = WEFT_CUDA_HOST;
    if (!bytes || !buf || !weft_cuda_possible()) return WEFT_SUCCESS;
    unsigned type = 0;
    int managed = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *data[] = {&type, &managed, &start, &size};
    CUresult r = weft_cu.pointer_get_attributes(4, attrs, data, (CUdeviceptr)(uintptr_t)buf);
    if (r != CUDA_SUCCESS)
        return weft_error(WEFT_ERR_ARG, "%s: %s at %p: the CUDA driver cannot tell what memory it is: %s", fn, what,
                          buf, weft_cu_text(r));
    if (type == CU_MEMORYTYPE_DEVICE && !managed) {
        uintptr_t end = (uintptr_t)start + size;
        if (size && (uintptr_t)buf + bytes > end)
            return weft_error(WEFT_ERR_ARG,
                              "%s: %s: %zu bytes at %p run %zu bytes past the end of its device allocation", fn, what,
                              bytes, buf, (size_t)((uintptr_t)buf + bytes - end));
        if (mode == MODE_OFF)
            return weft_error(WEFT_ERR_UNSUPPORTED, "%s: %s is device memory and WEFT_CUDA=off", fn, what);
        *mem = WEFT_MEM_CUDA;
        /* Small messages skip UCX's CUDA transports in auto mode: one copy
         * through weft's pinned buffer on each side beats cuda_ipc's handle
         * exchange and copy completion (docs/PERFORMANCE.md section 8). */
        *path = ucx_cuda && (mode == MODE_UCX || (mode == MODE_AUTO && bytes > (size_t)weft_cfg.cuda_small))
                    ? WEFT_CUDA_UCX
                    : WEFT_CUDA_STAGED;
        return WEFT_SUCCESS;
    }
    /* Host memory, pinned or registered host memory, managed memory (the
     * CPU reaches it), or an address the driver does not know. */
    if (type == 0 && (!host_readable(buf) || !host_readable((const char *)buf + bytes - 1)))
        return weft_error(WEFT_ERR_ARG,
                          "%s: %s (%zu bytes at %p) is neither readable host memory nor device memory the CUDA "
                          "driver knows (a freed buffer?)",
                          fn, what, bytes, buf);
    return WEFT_SUCCESS;
}

/* ---- the staged path: pinned chunks, one copy stream per context ---------------- */

/* A pinned host chunk and the event of the copy that last used it. */
typedef struct chunk {
    struct chunk *next;
    char *host;
    CUevent ev;
    int pending; /* ev marks a copy not yet waited for */
} chunk_t;

static chunk_t *chunk_pool;
static size_t chunk_bytes;
static int chunk_depth;

enum { MAX_DEPTH = 16, MAX_CTX = 16 };
/* Messages up to this size are copied straight to or from UCX's buffer (one
 * fragment on shared memory; one copy either way). Larger ones go through
 * pinned chunks: copying each UCX fragment separately was measured 3-8x
 * slower at 16-512 KiB on an H100 (a copy and a wait per 8 KiB fragment). */
#define DIRECT_MAX ((size_t)8192)
static struct {
    CUcontext ctx;
    CUstream stream;
} streams[MAX_CTX];

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

static CUstream stream_of(CUcontext ctx, CUresult *r)
{
    for (int i = 0; i < MAX_CTX; i++) {
        if (streams[i].ctx == ctx) return streams[i].stream;
        if (!streams[i].ctx) {
            CUstream s = NULL;
            /* A blocking stream: weft's copies start after the work already
             * queued on the legacy default stream (a kernel that cleared a
             * receive buffer there, or wrote a send buffer, comes first). */
            if ((*r = weft_cu.stream_create(&s, CU_STREAM_DEFAULT)) != CUDA_SUCCESS) return NULL;
            streams[i].ctx = ctx;
            streams[i].stream = s;
            return s;
        }
    }
    *r = CUDA_ERROR_OUT_OF_MEMORY;
    return NULL;
}

static chunk_t *chunk_get(CUresult *r)
{
    chunk_t *c = chunk_pool;
    if (c) {
        chunk_pool = c->next;
        return c;
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
        c->next = chunk_pool;
        chunk_pool = c;
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
    CUresult r;
    CUpointer_attribute a = CU_POINTER_ATTRIBUTE_CONTEXT;
    void *d = &st->ctx;
    if ((r = weft_cu.pointer_get_attributes(1, &a, &d, (CUdeviceptr)(uintptr_t)dev)) != CUDA_SUCCESS ||
        (r = weft_cu.ctx_push(st->ctx)) != CUDA_SUCCESS)
        goto fail;
    st->stream = stream_of(st->ctx, &r);
    if (st->stream && bytes > DIRECT_MAX) {
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
    if (r == CUDA_SUCCESS && st->stream && st->err == CUDA_SUCCESS) return st;
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
    for (int i = 0; i < st->nslots; i++) {
        st->slot[i]->pending = 0;
        st->slot[i]->next = chunk_pool;
        chunk_pool = st->slot[i];
    }
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
    if (driver_state > 0) {
        while (chunk_pool) {
            chunk_t *c = chunk_pool;
            chunk_pool = c->next;
            weft_cu.event_destroy(c->ev);
            weft_cu.mem_free_host(c->host);
            free(c);
        }
        for (int i = 0; i < MAX_CTX && streams[i].ctx; i++) {
            weft_cu.stream_destroy(streams[i].stream);
            streams[i].ctx = NULL;
        }
    }
}

int weft_cuda_copy(void *dst, const void *src, size_t bytes)
{
    if (!bytes) return WEFT_SUCCESS;
    if (!weft_cuda_possible()) {
        memmove(dst, src, bytes);
        return WEFT_SUCCESS;
    }
    CUcontext ctx = NULL;
    CUpointer_attribute a = CU_POINTER_ATTRIBUTE_CONTEXT;
    void *d = &ctx;
    if (weft_cu.pointer_get_attributes(1, &a, &d, (CUdeviceptr)(uintptr_t)dst) != CUDA_SUCCESS || !ctx) {
        d = &ctx;
        if (weft_cu.pointer_get_attributes(1, &a, &d, (CUdeviceptr)(uintptr_t)src) != CUDA_SUCCESS || !ctx) {
            memmove(dst, src, bytes); /* neither is device memory */
            return WEFT_SUCCESS;
        }
    }
    CUresult r = weft_cu.ctx_push(ctx);
    CUstream s = r == CUDA_SUCCESS ? stream_of(ctx, &r) : NULL;
    if (s) r = weft_cu.memcpy_async((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes, s);
    if (s && r == CUDA_SUCCESS) r = weft_cu.stream_synchronize(s);
    CUcontext popped;
    weft_cu.ctx_pop(&popped);
    return r == CUDA_SUCCESS ? WEFT_SUCCESS
                             : weft_error(WEFT_ERR_TRANSPORT, "cuda: a collective's local copy of %zu bytes failed: %s",
                                          bytes, weft_cu_text(r));
}

int weft_cuda_stream_sync(void *stream, const char *what)
{
    if (!weft_cuda_possible())
        return stream ? weft_error(WEFT_ERR_ARG, "%s: a stream (%p), but this process has no CUDA driver loaded", what,
                                   stream)
                      : WEFT_SUCCESS;
    CUresult r = weft_cu.stream_synchronize((CUstream)stream);
    return r == CUDA_SUCCESS
               ? WEFT_SUCCESS
               : weft_error(WEFT_ERR_ARG, "%s: synchronising stream %p failed: %s", what, stream, weft_cu_text(r));
}

/* ---- gates: host-driven calls in a stream's order ------------------------------ */

int weft_cuda_gate_open(weft_cuda_gate_t *g, void *stream, const void *buf, const char *what)
{
    memset(g, 0, sizeof(*g));
    if (!weft_cuda_possible())
        return weft_error(WEFT_ERR_ARG, "%s: a stream (%p), but this process has no CUDA driver loaded", what, stream);
    CUcontext ctx = NULL;
    CUpointer_attribute at = CU_POINTER_ATTRIBUTE_CONTEXT;
    void *d = &ctx;
    /* The buffer's context; with none (a barrier), the stream's; the legacy default stream: the thread's. */
    if (!buf || weft_cu.pointer_get_attributes(1, &at, &d, (CUdeviceptr)(uintptr_t)buf) != CUDA_SUCCESS || !ctx)
        if (!stream || !weft_cu.stream_get_ctx || weft_cu.stream_get_ctx((CUstream)stream, &ctx) != CUDA_SUCCESS)
            if (!weft_cu.ctx_get_current || weft_cu.ctx_get_current(&ctx) != CUDA_SUCCESS) ctx = NULL;
    if (!ctx) return weft_error(WEFT_ERR_ARG, "%s: no CUDA context for the stream %p", what, stream);
    if (!weft_cu.event_query) return weft_cuda_stream_sync(stream, what); /* no polling: the work is done now */
    CUresult r = weft_cu.ctx_push(ctx);
    if (r != CUDA_SUCCESS) return weft_error(WEFT_ERR_TRANSPORT, "%s: making the context current failed: %s", what,
                                             weft_cu_text(r));
    int rc = WEFT_SUCCESS;
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    CUevent ev = NULL;
    if (weft_cu.stream_is_capturing && weft_cu.stream_is_capturing((CUstream)stream, &cap) == CUDA_SUCCESS &&
        cap != CU_STREAM_CAPTURE_STATUS_NONE) {
        rc = weft_error(WEFT_ERR_UNSUPPORTED,
                        "%s: this call runs on the host (no GPU kernel takes it: its communicator spans nodes, or "
                        "its op, type or size is not one coll/cuda's kernels take), and a CUDA graph cannot replay "
                        "host work: call it outside the capture",
                        what);
    } else if ((r = weft_cu.event_create(&ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS ||
               (r = weft_cu.event_record(ev, (CUstream)stream)) != CUDA_SUCCESS) {
        rc = weft_error(WEFT_ERR_ARG, "%s: recording an event on stream %p failed: %s", what, stream, weft_cu_text(r));
        if (ev) weft_cu.event_destroy(ev);
        ev = NULL;
    } else {
        g->ctx = ctx;
        g->event = ev;
    }
    CUcontext popped;
    weft_cu.ctx_pop(&popped);
    return rc;
}

int weft_cuda_gate_ready(weft_cuda_gate_t *g)
{
    if (!g->event) return 1;
    CUresult r = weft_cu.ctx_push((CUcontext)g->ctx);
    if (r == CUDA_SUCCESS) {
        r = weft_cu.event_query((CUevent)g->event);
        CUcontext popped;
        weft_cu.ctx_pop(&popped);
    }
    if (r == CUDA_SUCCESS) return 1;
    if (r == CUDA_ERROR_NOT_READY) return 0;
    return weft_error(WEFT_ERR_TRANSPORT, "cuda: the work queued on the stream before the call failed: %s",
                      weft_cu_text(r));
}

void weft_cuda_gate_release(weft_cuda_gate_t *g)
{
    if (g->event) weft_cu.event_destroy((CUevent)g->event);
    g->event = NULL;
}

void weft_cuda_describe(char *buf, size_t len)
{
    const char *how = mode == MODE_OFF ? "off (WEFT_CUDA=off)"
                      : ucx_cuda && mode != MODE_STAGED
                          ? "through UCX (cuda_copy, cuda_ipc)"
                          : "staged through pinned host chunks (the UCX in use carries no CUDA memory)";
    snprintf(buf, len, "UCX carries host%s; device buffers: %s; libcuda %s", ucx_cuda ? " cuda" : "", how,
             driver_state > 0   ? "loaded"
             : driver_state < 0 ? "loaded but unusable"
                                : "not loaded by this process");
}

#else /* no CUDA in this build */

/* Only recognition, so a device buffer is refused instead of read as host
 * memory: cuPointerGetAttribute's ABI is stable, the attribute and memory
 * type values are CUDA's (CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
 * CU_MEMORYTYPE_DEVICE = 2). */
static int (*get_attribute)(void *, int, unsigned long long);

static int driver_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return 0;
    get_attribute = (int (*)(void *, int, unsigned long long))dlsym(h, "cuPointerGetAttribute");
    driver_state = get_attribute ? 1 : -1;
    return driver_state;
}

int weft_cuda_classify(const void *buf, size_t bytes, const char *fn, const char *what, weft_memtype_t *mem, int *path)
{
    *mem = WEFT_MEM_HOST;
    *path = WEFT_CUDA_HOST;
    unsigned type = 0;
    if (!bytes || !buf || !weft_cuda_possible()) return WEFT_SUCCESS;
    if (get_attribute(&type, 2, (unsigned long long)(uintptr_t)buf) == 0 && type == 2)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: %s is device memory, and this weft was built without CUDA", fn,
                          what);
    return WEFT_SUCCESS;
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

int weft_cuda_copy(void *dst, const void *src, size_t bytes)
{
    memmove(dst, src, bytes);
    return WEFT_SUCCESS;
}

int weft_cuda_stream_sync(void *stream, const char *what)
{
    return stream ? weft_error(WEFT_ERR_UNSUPPORTED, "%s: a stream (%p), but this weft was built without CUDA", what,
                               stream)
                  : WEFT_SUCCESS;
}

int weft_cuda_gate_open(weft_cuda_gate_t *g, void *stream, const void *buf, const char *what)
{
    (void)buf;
    memset(g, 0, sizeof(*g));
    return weft_error(WEFT_ERR_UNSUPPORTED, "%s: a stream (%p), but this weft was built without CUDA", what, stream);
}

int weft_cuda_gate_ready(weft_cuda_gate_t *g)
{
    (void)g;
    return 1;
}

void weft_cuda_gate_release(weft_cuda_gate_t *g)
{
    (void)g;
}

void weft_cuda_describe(char *buf, size_t len)
{
    snprintf(buf, len, "host only (built without CUDA)");
}

#endif
