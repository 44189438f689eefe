/* The device runtime (runtime.h): libcuda opened at run time, memory
 * types, a copy stream per context, host-driven calls in a stream's order.
 * Point-to-point (pt2pt/cuda.c) and the GPU collectives (coll/cuda) use it;
 * it uses nothing above src/. */
#include "src/cuda/runtime.h"

#include "weft_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

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
        {"cuStreamWaitValue32_v2", (void **)&weft_cu.stream_wait_value32},
        {"cuStreamWriteValue32_v2", (void **)&weft_cu.stream_write_value32},
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

/* ---- the progress thread's context ------------------------------------------------ */

/* The application's context: current on its thread when the progress thread
 * started, else the context of the first device buffer weft met. The thread
 * makes it current before it runs anything once device memory is in play:
 * a driver call there without a current context fails, and the CUDA runtime
 * (UCX's CUDA transports) would create a context of its own on device 0. */
static _Atomic(CUcontext) app_ctx;
static _Atomic int device_seen;

static void note_device_buffer(CUcontext ctx)
{
    CUcontext none = NULL;
    atomic_store_explicit(&device_seen, 1, memory_order_relaxed);
    if (ctx) atomic_compare_exchange_strong(&app_ctx, &none, ctx);
}

void weft_cuda_thread_note_context(void)
{
    CUcontext c = NULL, none = NULL;
    if (!weft_cuda_possible() || !weft_cu.ctx_get_current) return;
    if (weft_cu.ctx_get_current(&c) == CUDA_SUCCESS && c) atomic_compare_exchange_strong(&app_ctx, &none, c);
}

int weft_cuda_thread_ready(void)
{
    static _Thread_local CUcontext bound;
    if (WEFT_LIKELY(!weft_cuda_possible())) return 1;
    CUcontext want = atomic_load(&app_ctx), popped;
    /* No device buffer seen: nothing the thread runs calls the driver. */
    if (!want) return !atomic_load_explicit(&device_seen, memory_order_relaxed);
    if (bound == want) return 1;
    if (bound) weft_cu.ctx_pop(&popped);
    bound = NULL;
    if (weft_cu.ctx_push(want) != CUDA_SUCCESS) return 0;
    bound = want;
    return 1;
}

/* ---- memory types ---------------------------------------------------------------- */

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

int weft_cuda_memtype(const void *buf, size_t bytes, const char *fn, const char *what, weft_memtype_t *mem,
                      int *managed_out)
{
    *mem = WEFT_MEM_HOST;
    if (managed_out) *managed_out = 0;
    if (!bytes || !buf || !weft_cuda_possible()) return WEFT_SUCCESS;
    unsigned type = 0;
    int managed = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    CUcontext ctx = NULL;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                   CU_POINTER_ATTRIBUTE_CONTEXT};
    void *data[] = {&type, &managed, &start, &size, &ctx};
    CUresult r = weft_cu.pointer_get_attributes(5, attrs, data, (CUdeviceptr)(uintptr_t)buf);
    if (r != CUDA_SUCCESS)
        return weft_error(WEFT_ERR_ARG, "%s: %s at %p: the CUDA driver cannot tell what memory it is: %s", fn, what,
                          buf, weft_cu_text(r));
    if (type == CU_MEMORYTYPE_DEVICE && !managed) {
        uintptr_t end = (uintptr_t)start + size;
        if (size && (uintptr_t)buf + bytes > end)
            return weft_error(WEFT_ERR_ARG,
                              "%s: %s: %zu bytes at %p run %zu bytes past the end of its device allocation", fn, what,
                              bytes, buf, (size_t)((uintptr_t)buf + bytes - end));
        *mem = WEFT_MEM_CUDA;
        note_device_buffer(ctx);
        return WEFT_SUCCESS;
    }
    if (managed_out) *managed_out = managed;
    /* Host memory, pinned or registered host memory, managed memory (the
     * CPU reaches it), or an address the driver does not know. */
    if (type == 0 && (!host_readable(buf) || !host_readable((const char *)buf + bytes - 1)))
        return weft_error(WEFT_ERR_ARG,
                          "%s: %s (%zu bytes at %p) is neither readable host memory nor device memory the CUDA "
                          "driver knows (a freed buffer?)",
                          fn, what, bytes, buf);
    return WEFT_SUCCESS;
}

/* ---- a copy stream per context ----------------------------------------------------- */

enum { MAX_CTX = 16 };
static struct {
    CUcontext ctx;
    CUstream stream;
} streams[MAX_CTX];

CUstream weft_cuda_copy_stream(CUcontext ctx, CUresult *r)
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

/* ---- the pinned pool --------------------------------------------------------------- */

/* Free blocks by size class (64 KiB << k); at most POOL_PER_CLASS each and
 * POOL_KEEP bytes in all are kept, the rest freed when returned. A staged
 * call takes two blocks of a class (input and output): 16 keep eight
 * nonblocking calls of one size in flight (DDP's buckets) from allocating
 * and freeing pinned memory (milliseconds each) on every call. */
enum { POOL_CLASSES = 24, POOL_PER_CLASS = 16 };
#define POOL_MIN  ((size_t)64 << 10)
#define POOL_KEEP ((size_t)1 << 30)
static struct {
    void *block[POOL_PER_CLASS];
    int n;
} pool[POOL_CLASSES];
static size_t pool_kept;

static int pool_class(size_t bytes, size_t *cap)
{
    int k = 0;
    size_t c = POOL_MIN;
    while (c < bytes && k < POOL_CLASSES - 1) {
        c <<= 1;
        k++;
    }
    *cap = c < bytes ? bytes : c;
    return c < bytes ? -1 : k; /* -1: beyond the classes, never kept */
}

/* Whether a stream waits on a staged call's word (below): allocating or
 * freeing pinned memory then waits for the device, hence for that call,
 * which only the progress thread can finish (and the caller holds the lock
 * it needs). */
static int staged_pending(void);

/* Blocks the pool cannot keep, returned while freeing could wait for a
 * staged stream (on the progress thread, or while one waits): chained
 * through their first bytes, freed when nothing waits. */
static void *unkept;

int weft_cuda_pinned_may_alloc(void)
{
    return !weft_pt_self && !staged_pending();
}

static void unkept_free(void)
{
    while (unkept) {
        void *p = unkept;
        unkept = *(void **)p;
        weft_cu.mem_free_host(p);
    }
}

/* Into the pool, or (no room) unkept: never freed here. */
static void pool_return(void *p, size_t cap)
{
    size_t c;
    int k = pool_class(cap, &c);
    if (k >= 0 && c == cap && pool[k].n < POOL_PER_CLASS && pool_kept + cap <= POOL_KEEP) {
        pool[k].block[pool[k].n++] = p;
        pool_kept += cap;
        return;
    }
    *(void **)p = unkept;
    unkept = p;
}

void *weft_cuda_pinned_get(size_t bytes, size_t *cap)
{
    CUcontext cur = NULL;
    if (!bytes || driver_state <= 0) return NULL;
    if (unkept && weft_cuda_pinned_may_alloc()) unkept_free();
    int k = pool_class(bytes, cap);
    if (k >= 0 && pool[k].n > 0) {
        pool_kept -= *cap;
        return pool[k].block[--pool[k].n];
    }
    if (!weft_cuda_pinned_may_alloc()) {
        weft_debug("cuda: no pinned block of %zu bytes kept, and none is allocated while a stream waits for a "
                   "staged call (that waits for the device): this call's host copies use pageable memory",
                   *cap);
        return NULL;
    }
    /* cuMemHostAlloc needs a current context; the pool's blocks are portable. */
    if (!weft_cu.ctx_get_current || weft_cu.ctx_get_current(&cur) != CUDA_SUCCESS || !cur) return NULL;
    void *p = NULL;
    CUresult r = weft_cu.mem_host_alloc(&p, *cap, CU_MEMHOSTALLOC_PORTABLE);
    if (r != CUDA_SUCCESS) {
        weft_debug("cuda: no pinned block of %zu bytes (%s): this call's host copies use pageable memory", *cap,
                   weft_cu_text(r));
        return NULL;
    }
    weft_debug("cuda: pinned staging block of %zu bytes allocated (%zu bytes kept free)", *cap, pool_kept);
    return p;
}

void weft_cuda_pinned_put(void *p, size_t cap)
{
    if (!p) return;
    pool_return(p, cap);
    if (unkept && weft_cuda_pinned_may_alloc()) unkept_free();
}

void weft_cuda_pinned_free(void *p)
{
    if (p && driver_state > 0) weft_cu.mem_free_host(p);
}

static void staged_reclaim(int final);
static void watch_end(void);

void weft_cuda_copy_streams_release(void)
{
    if (driver_state <= 0) return;
    watch_end();
    staged_reclaim(1);
    unkept_free();
    for (int i = 0; i < MAX_CTX && streams[i].ctx; i++) {
        weft_cu.stream_destroy(streams[i].stream);
        streams[i].ctx = NULL;
    }
    for (int k = 0; k < POOL_CLASSES; k++)
        while (pool[k].n > 0)
            weft_cu.mem_free_host(pool[k].block[--pool[k].n]);
    pool_kept = 0;
}

/* The context of whichever of dst / src is device memory (NULL: neither). */
static CUcontext copy_ctx(const void *dst, const void *src)
{
    CUcontext ctx = NULL;
    CUpointer_attribute a = CU_POINTER_ATTRIBUTE_CONTEXT;
    void *d = &ctx;
    if (weft_cu.pointer_get_attributes(1, &a, &d, (CUdeviceptr)(uintptr_t)dst) == CUDA_SUCCESS && ctx) return ctx;
    ctx = NULL;
    d = &ctx;
    if (weft_cu.pointer_get_attributes(1, &a, &d, (CUdeviceptr)(uintptr_t)src) == CUDA_SUCCESS && ctx) return ctx;
    return NULL;
}

int weft_cuda_copy(void *dst, const void *src, size_t bytes)
{
    if (!bytes) return WEFT_SUCCESS;
    CUcontext ctx = weft_cuda_possible() ? copy_ctx(dst, src) : NULL;
    if (!ctx) {
        memmove(dst, src, bytes); /* neither is device memory */
        return WEFT_SUCCESS;
    }
    CUresult r = weft_cu.ctx_push(ctx);
    CUstream s = r == CUDA_SUCCESS ? weft_cuda_copy_stream(ctx, &r) : NULL;
    if (s) r = weft_cu.memcpy_async((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes, s);
    if (s && r == CUDA_SUCCESS) r = weft_cu.stream_synchronize(s);
    CUcontext popped;
    weft_cu.ctx_pop(&popped);
    return r == CUDA_SUCCESS ? WEFT_SUCCESS
                             : weft_error(WEFT_ERR_TRANSPORT, "cuda: a collective's local copy of %zu bytes failed: %s",
                                          bytes, weft_cu_text(r));
}

int weft_cuda_copy_start(void *dst, const void *src, size_t bytes, weft_cuda_copy_t *c)
{
    c->ctx = c->ev = NULL;
    CUcontext ctx = bytes && weft_cuda_possible() && weft_cu.event_query ? copy_ctx(dst, src) : NULL;
    if (!ctx) return weft_cuda_copy(dst, src, bytes); /* done on return (host memory, or no event to poll) */
    CUevent ev = NULL;
    CUresult r = weft_cu.ctx_push(ctx);
    if (r != CUDA_SUCCESS)
        return weft_error(WEFT_ERR_TRANSPORT, "cuda: a staged copy of %zu bytes: its context: %s", bytes,
                          weft_cu_text(r));
    CUstream s = weft_cuda_copy_stream(ctx, &r);
    if (s) r = weft_cu.memcpy_async((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, bytes, s);
    if (s && r == CUDA_SUCCESS) {
        if ((r = weft_cu.event_create(&ev, CU_EVENT_DISABLE_TIMING)) == CUDA_SUCCESS &&
            (r = weft_cu.event_record(ev, s)) != CUDA_SUCCESS) {
            weft_cu.event_destroy(ev);
            ev = NULL;
        }
        if (r != CUDA_SUCCESS) weft_cu.stream_synchronize(s); /* the copy may run: never leave it behind */
    }
    CUcontext popped;
    weft_cu.ctx_pop(&popped);
    if (r != CUDA_SUCCESS)
        return weft_error(WEFT_ERR_TRANSPORT, "cuda: a staged copy of %zu bytes could not be queued: %s", bytes,
                          weft_cu_text(r));
    c->ctx = ctx;
    c->ev = ev;
    return WEFT_SUCCESS;
}

int weft_cuda_copy_test(weft_cuda_copy_t *c)
{
    if (!c->ev) return 1;
    CUcontext popped;
    CUresult r = weft_cu.ctx_push((CUcontext)c->ctx);
    if (r == CUDA_SUCCESS) {
        r = weft_cu.event_query((CUevent)c->ev);
        weft_cu.ctx_pop(&popped);
    }
    if (r == CUDA_ERROR_NOT_READY) return 0;
    weft_cuda_copy_end(c);
    return r == CUDA_SUCCESS
               ? 1
               : weft_error(WEFT_ERR_TRANSPORT, "cuda: a staged copy between host and device failed: %s",
                            weft_cu_text(r));
}

void weft_cuda_copy_end(weft_cuda_copy_t *c)
{
    if (!c->ev) return;
    CUcontext popped;
    if (weft_cu.ctx_push((CUcontext)c->ctx) == CUDA_SUCCESS) {
        weft_cu.event_synchronize((CUevent)c->ev);
        weft_cu.event_destroy((CUevent)c->ev);
        weft_cu.ctx_pop(&popped);
    }
    c->ctx = c->ev = NULL;
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

/* The context a stream-ordered call's copies and event use: its buffer's;
 * with none (a barrier), the stream's; the legacy default stream: the
 * thread's. */
static int gate_ctx(void *stream, const void *buf, CUcontext *ctx, const char *what)
{
    *ctx = NULL;
    if (!weft_cuda_possible())
        return weft_error(WEFT_ERR_ARG, "%s: a stream (%p), but this process has no CUDA driver loaded", what, stream);
    CUpointer_attribute at = CU_POINTER_ATTRIBUTE_CONTEXT;
    void *d = ctx;
    if (!buf || weft_cu.pointer_get_attributes(1, &at, &d, (CUdeviceptr)(uintptr_t)buf) != CUDA_SUCCESS || !*ctx)
        if (!stream || !weft_cu.stream_get_ctx || weft_cu.stream_get_ctx((CUstream)stream, ctx) != CUDA_SUCCESS)
            if (!weft_cu.ctx_get_current || weft_cu.ctx_get_current(ctx) != CUDA_SUCCESS) *ctx = NULL;
    if (!*ctx) return weft_error(WEFT_ERR_ARG, "%s: no CUDA context for the stream %p", what, stream);
    return WEFT_SUCCESS;
}

/* With ctx current: refuses a stream being captured into a CUDA graph. */
static int gate_not_capturing(void *stream, const char *what)
{
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    if (weft_cu.stream_is_capturing && weft_cu.stream_is_capturing((CUstream)stream, &cap) == CUDA_SUCCESS &&
        cap != CU_STREAM_CAPTURE_STATUS_NONE)
        return weft_error(WEFT_ERR_UNSUPPORTED,
                          "%s: this call runs on the host (no GPU kernel takes it: its communicator spans nodes, or "
                          "its op, type or size is not one coll/cuda's kernels take), and a CUDA graph cannot replay "
                          "host work: call it outside the capture",
                          what);
    return WEFT_SUCCESS;
}

/* With ctx current: records g's event on the stream. */
static int gate_event(weft_cuda_gate_t *g, CUcontext ctx, void *stream, const char *what)
{
    CUevent ev = NULL;
    CUresult r;
    if ((r = weft_cu.event_create(&ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS ||
        (r = weft_cu.event_record(ev, (CUstream)stream)) != CUDA_SUCCESS) {
        if (ev) weft_cu.event_destroy(ev);
        return weft_error(WEFT_ERR_ARG, "%s: recording an event on stream %p failed: %s", what, stream,
                          weft_cu_text(r));
    }
    g->ctx = ctx;
    g->event = ev;
    return WEFT_SUCCESS;
}

int weft_cuda_gate_open(weft_cuda_gate_t *g, void *stream, const void *buf, const char *what)
{
    memset(g, 0, sizeof(*g));
    CUcontext ctx;
    int rc = gate_ctx(stream, buf, &ctx, what);
    if (rc) return rc;
    if (!weft_cu.event_query) return weft_cuda_stream_sync(stream, what); /* no polling: the work is done now */
    CUresult r = weft_cu.ctx_push(ctx);
    if (r != CUDA_SUCCESS)
        return weft_error(WEFT_ERR_TRANSPORT, "%s: making the context current failed: %s", what, weft_cu_text(r));
    if (!(rc = gate_not_capturing(stream, what))) rc = gate_event(g, ctx, stream, what);
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

/* The words staged streams wait on: pinned host memory, mapped for every
 * context (portable), one page of them. A word is HELD while its call runs,
 * RELEASED at the call's end (the stream goes on), and PASSED once the
 * stream, past its copies out, wrote so: free for another call, and the
 * pinned blocks its call parked there go back to the pool (unless messages
 * of a failed collective may still use them: then never). */
enum { HOLD_HELD = 0, HOLD_RELEASED = 1, HOLD_PASSED = 2, HOLD_WORDS = 1024, PARK_BLOCKS = 2 };
static _Atomic uint32_t *hold_words;
static CUdeviceptr hold_dev;
static unsigned hold_next;
static int hold_unusable;
/* Per word: the blocks parked there; the words staged and not yet seen
 * passed. */
static struct {
    void *p[PARK_BLOCKS];
    size_t cap[PARK_BLOCKS];
    int keep;   /* never back to the pool */
    int staged; /* listed in staged_at */
    int ended;  /* its call ended (weft_cuda_gate_release): until then the blocks are the call's, passed or not */
} parked[HOLD_WORDS];
static unsigned staged_at[HOLD_WORDS], nstaged;

/* The watchdog. A staged stream waits on its word until the progress
 * thread ends the call. Should that thread be held up inside one pass (a
 * call into the driver or UCX that waits for the device, which waits for
 * the word: seen once on an H100, UCX 1.22), nothing else would release
 * the word, and whoever blocks on the stream would hang for good. A thread
 * of weft's own, started with the first staged call that has a deadline,
 * lets a word still held WATCH_GRACE_S past its call's deadline go: the
 * stream goes on (the call's output undefined), the held-up pass can
 * finish, and the call fails as at any deadline. It sleeps while no staged
 * call is due. */
#define WATCH_GRACE_S 2.0
#define WATCH_TICK_MS 200
static _Atomic int64_t watch_due_us[HOLD_WORDS];   /* a staged word's deadline + grace, weft_wtime's us (0: none) */
static _Atomic int watch_due_n;                    /* words with a due time */
static _Atomic unsigned watch_firing = HOLD_WORDS; /* the word the watchdog is letting go (HOLD_WORDS: none) */
static _Atomic int watch_stop;
static int watch_fd = -1; /* eventfd: a due time set, or stop */
static pid_t watch_pid;   /* the process that started the thread (a forked child has none) */
static pthread_t watch_tid;

static void *watch_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&watch_stop)) {
        struct pollfd p = {.fd = watch_fd, .events = POLLIN};
        uint64_t v;
        if (poll(&p, 1, atomic_load(&watch_due_n) > 0 ? WATCH_TICK_MS : -1) > 0 && read(watch_fd, &v, sizeof(v)) < 0) {
            /* another wake-up took it */
        }
        int64_t now = (int64_t)(weft_wtime() * 1e6);
        for (unsigned k = 0; k < HOLD_WORDS && atomic_load(&watch_due_n) > 0; k++) {
            int64_t due = atomic_load(&watch_due_us[k]);
            if (!due || now < due) continue;
            /* Announced first: the call's end (unwatch_word) waits until this word is let go, so that the
             * word is never reused for another call meanwhile. */
            atomic_store(&watch_firing, k);
            uint32_t held = HOLD_HELD;
            int fire = atomic_compare_exchange_strong(&watch_due_us[k], &due, 0);
            if (fire) atomic_fetch_sub(&watch_due_n, 1);
            fire = fire && atomic_compare_exchange_strong(&hold_words[k], &held, HOLD_RELEASED);
            atomic_store(&watch_firing, HOLD_WORDS);
            if (fire)
                weft_warn("cuda: a stream-ordered call staged on its stream was still unfinished %.0f s past its "
                          "deadline (weft's progress thread did not end it): the stream goes on, the call's output "
                          "undefined; the call fails",
                          WATCH_GRACE_S);
        }
    }
    return NULL;
}

/* Nothing due, nothing being let go. */
static void watch_reset(void)
{
    for (unsigned k = 0; k < HOLD_WORDS; k++)
        atomic_store(&watch_due_us[k], 0);
    atomic_store(&watch_due_n, 0);
    atomic_store(&watch_firing, HOLD_WORDS);
}

/* Word k's call must end by deadline (weft_wtime's clock): the watchdog
 * lets the word go WATCH_GRACE_S after. No watchdog (it cannot start):
 * nothing changes. */
static void watch_word(unsigned k, double deadline)
{
    if (watch_pid != getpid()) {
        /* First here, or a forked child: the parent's thread is not in this process (its descriptor, left
         * open, may have been closed and reused by now), nor are its calls. */
        watch_pid = getpid();
        atomic_store(&watch_stop, 0);
        watch_reset();
        watch_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        int err = watch_fd < 0 ? errno : weft_thread_start(&watch_tid, NULL, watch_main, NULL, "weft-cuda-watch");
        if (err) {
            weft_debug("cuda: no watchdog for staged streams (%s)", strerror(err));
            if (watch_fd >= 0) close(watch_fd);
            watch_fd = -1;
        }
    }
    if (watch_fd < 0) return;
    /* The thread sleeps without a timeout only while nothing is due: woken when that changes (every due
     * time is WATCH_GRACE_S or more away, and it looks every WATCH_TICK_MS while any is). */
    uint64_t one = 1;
    if (atomic_exchange(&watch_due_us[k], (int64_t)((deadline + WATCH_GRACE_S) * 1e6)) == 0 &&
        atomic_fetch_add(&watch_due_n, 1) == 0 && write(watch_fd, &one, sizeof(one)) < 0) {
        /* full: it is being woken already */
    }
}

static void unwatch_word(unsigned k)
{
    if (atomic_exchange(&watch_due_us[k], 0) != 0) atomic_fetch_sub(&watch_due_n, 1);
    while (atomic_load(&watch_firing) == k)
        sched_yield();
}

static void watch_end(void)
{
    if (watch_pid != getpid() || watch_fd < 0) return;
    atomic_store(&watch_stop, 1);
    uint64_t one = 1;
    if (write(watch_fd, &one, sizeof(one)) < 0) {
        /* full: it is being woken already */
    }
    pthread_join(watch_tid, NULL);
    close(watch_fd);
    watch_fd = -1;
    watch_pid = 0;
    watch_reset();
}

static int hold_pool(void)
{
    if (hold_words) return 1;
    if (hold_unusable) return 0;
    void *p = NULL;
    CUresult r =
        weft_cu.mem_host_alloc(&p, HOLD_WORDS * sizeof(uint32_t), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    if (r == CUDA_SUCCESS && (r = weft_cu.mem_host_get_device_pointer(&hold_dev, p, 0)) != CUDA_SUCCESS)
        weft_cu.mem_free_host(p);
    if (r != CUDA_SUCCESS) {
        hold_unusable = 1;
        weft_debug("cuda: no pinned words for staged streams (%s): host-driven stream-ordered calls return at "
                   "their end",
                   weft_cu_text(r));
        return 0;
    }
    hold_words = p;
    for (unsigned i = 0; i < HOLD_WORDS; i++)
        atomic_store_explicit(&hold_words[i], HOLD_PASSED, memory_order_relaxed);
    return 1;
}

static int word_passed(unsigned k)
{
    return atomic_load_explicit(&hold_words[k], memory_order_acquire) == HOLD_PASSED;
}

/* The words their streams have passed: their blocks back to the pool (or
 * kept), the words free. final (at finalize): every word is let go, and the
 * blocks of one not passed are left to its stream. */
static void staged_reclaim(int final)
{
    unsigned left = 0;
    for (unsigned i = 0; i < nstaged; i++) {
        unsigned k = staged_at[i];
        int passed = word_passed(k);
        /* (A word the watchdog let go is passed before its call ended.) */
        if ((!passed || !parked[k].ended) && !final) {
            staged_at[left++] = k;
            continue;
        }
        for (int b = 0; b < PARK_BLOCKS; b++) {
            if (!parked[k].p[b]) continue;
            if (passed && parked[k].ended && !parked[k].keep)
                pool_return(parked[k].p[b], parked[k].cap[b]);
            else
                weft_debug("cuda: %zu pinned bytes of a staged call are never reused (%s)", parked[k].cap[b],
                           !passed            ? "its stream has not passed its copies at finalize"
                           : !parked[k].ended ? "its call had not ended at finalize"
                                              : "a failed collective's messages may still use them");
            parked[k].p[b] = NULL;
        }
        parked[k].keep = 0;
        parked[k].staged = 0;
        parked[k].ended = 0;
    }
    nstaged = left;
}

static int staged_pending(void)
{
    if (nstaged) staged_reclaim(0);
    return nstaged > 0;
}

int weft_cuda_gate_reserve(weft_cuda_gate_t *g, void *stream)
{
    memset(g, 0, sizeof(*g));
    /* The legacy default stream waits, and every blocking stream's later work waits for it: weft's own
     * copy streams among them. */
    if (!stream || stream == (void *)CU_STREAM_LEGACY) return 0;
    if (!weft_cuda_possible() || !weft_cu.event_query || !weft_cu.stream_wait_value32 ||
        !weft_cu.stream_write_value32 || !weft_cu.mem_host_get_device_pointer || !hold_pool())
        return 0;
    if (nstaged) staged_reclaim(0);
    for (unsigned i = 0; i < HOLD_WORDS; i++) {
        unsigned k = (hold_next + i) % HOLD_WORDS;
        if (!word_passed(k) || parked[k].staged) continue;
        hold_next = k + 1;
        atomic_store_explicit(&hold_words[k], HOLD_HELD, memory_order_relaxed);
        g->word = (void *)&hold_words[k];
        return 1;
    }
    weft_debug("cuda: every one of the %d staged-stream words is in use: this call returns at its end", HOLD_WORDS);
    return 0;
}

/* Parks blocks on word k, to be reclaimed once the stream passes it. A
 * word is listed once: reserved only when not listed, and at most
 * HOLD_WORDS are. */
static void park_on_word(unsigned k, void *const blocks[], const size_t caps[], int nblocks)
{
    for (int b = 0; b < nblocks; b++) {
        parked[k].p[b] = blocks[b];
        parked[k].cap[b] = caps[b];
    }
    parked[k].staged = 1;
    parked[k].ended = 0;
    staged_at[nstaged++] = k;
}

int weft_cuda_gate_stage(weft_cuda_gate_t *g, void *stream, const void *buf, weft_cuda_span_t in, weft_cuda_span_t out,
                         void *const blocks[], const size_t caps[], int nblocks, const char *what)
{
    unsigned k = (unsigned)((_Atomic uint32_t *)g->word - hold_words);
    CUstream st = (CUstream)stream;
    CUdeviceptr d = hold_dev + k * sizeof(uint32_t);
    CUcontext ctx, popped;
    CUresult r = CUDA_SUCCESS;
    int rc = nblocks > PARK_BLOCKS
                 ? weft_error(WEFT_ERR_INTERNAL, "%s: %d pinned blocks to park, at most %d", what, nblocks, PARK_BLOCKS)
                 : gate_ctx(stream, buf, &ctx, what);
    if (!rc && (r = weft_cu.ctx_push(ctx)) != CUDA_SUCCESS)
        rc = weft_error(WEFT_ERR_TRANSPORT, "%s: making the context current failed: %s", what, weft_cu_text(r));
    if (rc) goto unqueued;
    /* The progress thread ends the call: it makes this context current for its driver calls (one is known
     * from here even where no earlier buffer or init named one). */
    note_device_buffer(ctx);
    if ((rc = gate_not_capturing(stream, what))) goto unqueued_pop;
    /* A copy that fails to queue leaves nothing on the stream. */
    if (in.bytes)
        r = weft_cu.memcpy_async((CUdeviceptr)(uintptr_t)in.dst, (CUdeviceptr)(uintptr_t)in.src, in.bytes, st);
    if (r != CUDA_SUCCESS) {
        rc = weft_error(WEFT_ERR_TRANSPORT, "%s: queueing the copy of the input to host memory on stream %p failed: %s",
                        what, stream, weft_cu_text(r));
        goto unqueued_pop;
    }
    if ((rc = gate_event(g, ctx, stream, what))) goto queued;
    if ((r = weft_cu.stream_wait_value32(st, d, HOLD_RELEASED, CU_STREAM_WAIT_VALUE_GEQ)) != CUDA_SUCCESS) {
        /* Nothing waits: the caller takes the other way, and no call tries this one again. */
        weft_debug("cuda: a stream cannot wait on host memory here (%s): host-driven stream-ordered calls "
                   "return at their end",
                   weft_cu_text(r));
        weft_cu.stream_wait_value32 = NULL;
        weft_cu.event_destroy((CUevent)g->event);
        g->event = NULL;
        rc = WEFT_ERR_UNSUPPORTED;
        goto queued;
    }
    /* The stream waits from here: a copy out that fails to queue is the call's error at its end (the
     * collective itself runs, its peers wait for it). */
    if (out.bytes)
        r = weft_cu.memcpy_async((CUdeviceptr)(uintptr_t)out.dst, (CUdeviceptr)(uintptr_t)out.src, out.bytes, st);
    if (r != CUDA_SUCCESS) {
        weft_warn("%s: queueing the copy of the result to the device on stream %p failed: %s", what, stream,
                  weft_cu_text(r));
        g->failed = WEFT_ERR_TRANSPORT;
    }
queued:
    /* The copy in may be on its way: the blocks stay parked until the stream passes the word. Should the
     * word's passing fail to queue, the word and its blocks are never reused nor waited for. */
    if ((r = weft_cu.stream_write_value32(st, d, HOLD_PASSED, CU_STREAM_WRITE_VALUE_DEFAULT)) == CUDA_SUCCESS) {
        park_on_word(k, blocks, caps, nblocks);
        if (rc)
            parked[k].ended = 1; /* no call runs: the blocks are free once the stream passes */
        else if (g->deadline > 0)
            watch_word(k, g->deadline);
    } else
        weft_warn("%s: queueing the end of a staged call on stream %p failed (%s): its word and %zu pinned bytes "
                  "are never reused",
                  what, stream, weft_cu_text(r), (nblocks > 0 ? caps[0] : 0) + (nblocks > 1 ? caps[1] : 0));
    if (rc) g->word = NULL; /* the stream passes it */
    weft_cu.ctx_pop(&popped);
    return rc;
unqueued_pop:
    weft_cu.ctx_pop(&popped);
unqueued:
    for (int b = 0; b < nblocks; b++)
        pool_return(blocks[b], caps[b]);
    atomic_store_explicit((_Atomic uint32_t *)g->word, HOLD_PASSED, memory_order_release);
    g->word = NULL;
    return rc;
}

int weft_cuda_gate_let_go(const weft_cuda_gate_t *g)
{
    /* Before its call ends, only the watchdog moves a staged word off HELD. */
    return g->word && g->event && atomic_load_explicit((_Atomic uint32_t *)g->word, memory_order_acquire) != HOLD_HELD;
}

void weft_cuda_gate_release(weft_cuda_gate_t *g, int keep_blocks)
{
    if (g->event) weft_cu.event_destroy((CUevent)g->event);
    if (g->word) {
        unsigned k = (unsigned)((_Atomic uint32_t *)g->word - hold_words);
        unwatch_word(k);
        if (keep_blocks) parked[k].keep = 1;
        parked[k].ended = 1;
        /* A staged call's host collective is done: the stream copies its result out (unless the watchdog
         * let it go already: the stream may have passed it since). A word reserved but never staged (no
         * event) was never waited on: free again. */
        uint32_t held = HOLD_HELD;
        if (!g->event)
            atomic_store_explicit((_Atomic uint32_t *)g->word, HOLD_PASSED, memory_order_release);
        else
            atomic_compare_exchange_strong((_Atomic uint32_t *)g->word, &held, HOLD_RELEASED);
    }
    g->event = NULL;
    g->word = NULL;
}

#else /* no CUDA in this build */

void weft_cuda_thread_note_context(void)
{
}

int weft_cuda_thread_ready(void)
{
    return 1; /* no device buffers: the thread makes no driver call */
}

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

int weft_cuda_memtype(const void *buf, size_t bytes, const char *fn, const char *what, weft_memtype_t *mem,
                      int *managed)
{
    *mem = WEFT_MEM_HOST;
    if (managed) *managed = 0;
    unsigned type = 0;
    if (!bytes || !buf || !weft_cuda_possible()) return WEFT_SUCCESS;
    if (get_attribute(&type, 2, (unsigned long long)(uintptr_t)buf) == 0 && type == 2)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: %s is device memory, and this weft was built without CUDA", fn,
                          what);
    return WEFT_SUCCESS;
}

int weft_cuda_copy(void *dst, const void *src, size_t bytes)
{
    memmove(dst, src, bytes);
    return WEFT_SUCCESS;
}

int weft_cuda_copy_start(void *dst, const void *src, size_t bytes, weft_cuda_copy_t *c)
{
    c->ctx = c->ev = NULL;
    memmove(dst, src, bytes);
    return WEFT_SUCCESS;
}

int weft_cuda_copy_test(weft_cuda_copy_t *c)
{
    (void)c;
    return 1;
}

void weft_cuda_copy_end(weft_cuda_copy_t *c)
{
    (void)c;
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

int weft_cuda_gate_reserve(weft_cuda_gate_t *g, void *stream)
{
    (void)stream;
    memset(g, 0, sizeof(*g));
    return 0; /* never staged: weft_cuda_gate_open refuses the stream */
}

int weft_cuda_gate_stage(weft_cuda_gate_t *g, void *stream, const void *buf, weft_cuda_span_t in, weft_cuda_span_t out,
                         void *const blocks[], const size_t caps[], int nblocks, const char *what)
{
    (void)g, (void)buf, (void)in, (void)out, (void)blocks, (void)caps, (void)nblocks;
    return weft_error(WEFT_ERR_UNSUPPORTED, "%s: a stream (%p), but this weft was built without CUDA", what, stream);
}

int weft_cuda_gate_let_go(const weft_cuda_gate_t *g)
{
    (void)g;
    return 0;
}

void weft_cuda_gate_release(weft_cuda_gate_t *g, int keep_blocks)
{
    (void)g;
    (void)keep_blocks;
}

void weft_cuda_copy_streams_release(void)
{
}

void *weft_cuda_pinned_get(size_t bytes, size_t *cap)
{
    *cap = bytes;
    return NULL;
}

void weft_cuda_pinned_put(void *p, size_t cap)
{
    (void)p;
    (void)cap;
}

void weft_cuda_pinned_free(void *p)
{
    (void)p;
}

#endif

int weft_cuda_driver_state(void)
{
    return driver_state;
}
