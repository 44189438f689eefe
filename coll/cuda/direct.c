/* coll/cuda's direct algorithms (allreduce_direct.c, reduce_scatter_direct.c,
 * allgather_direct.c): host-driven rings on device buffers whose messages
 * UCX moves in device memory itself (cuda_ipc between processes of a host,
 * GPUDirect RDMA over verbs; else point-to-point through its pinned chunks)
 * and whose reductions run on the GPU (kernels/local.cu), so the vector
 * never sits whole on the host. What all three share: the checks and the
 * debug line naming the mover. What the two reducing ones share besides:
 * the buffers' context, a stream of weft's own per context, the call's
 * event, the device scratch (two blocks kept for the next call), and the
 * reduce-scatter ring both are made of. */
#include "coll/cuda/cuda_coll.h"
#include "pt2pt/cuda.h"

#include <string.h>

#ifdef WEFT_HAVE_CUDA

/* The device scratch, kept for the next call in the same context (a call
 * that finds it in use allocates its own, freed at its end: cuMemFree
 * waits for the device). Freed with the context. */
static struct {
    CUcontext ctx;
    CUdeviceptr p;
    size_t bytes;
    int busy;
} scratch;

/* A stream of weft's own per context for the reduce kernels (non-blocking:
 * no ordering against the legacy stream, which the application may use). */
enum { MAX_STREAMS = 16 };
static struct {
    CUcontext ctx;
    CUstream stream;
} streams[MAX_STREAMS];

struct weft_gpu_direct {
    const char *name; /* "allreduce direct", ... */
    CUcontext ctx;
    const weft_gpu_module_t *m;
    CUstream stream;
    CUevent ev;
    CUdeviceptr tmp;
    int tmp_own; /* tmp is this call's (else the cache's) */
    weft_dtype_t dtype;
    weft_op_t op;
    size_t esize;
};

typedef struct {
    weft_gpu_direct_t *d;
    weft_ck_local_args_t la;
} reduce_step_t;

static int cu_fail(const weft_gpu_direct_t *d, CUresult r, const char *what)
{
    return weft_error(WEFT_ERR_TRANSPORT, "%s: %s failed: %s", d->name, what, weft_cu_text(r));
}

static void release(void *arg)
{
    weft_gpu_direct_t *d = arg;
    CUcontext popped;
    /* Messages of a failed schedule still in flight may yet land in the scratch: it is dropped, not reused or
     * freed (a leak only after a failure). */
    int adrift = weft_sched_adrift() > 0;
    if (d->tmp && !d->tmp_own) {
        if (adrift) scratch.p = 0, scratch.bytes = 0;
        scratch.busy = 0;
    }
    if (weft_cu.ctx_push(d->ctx) != CUDA_SUCCESS) return;
    if (d->ev) weft_cu.event_destroy(d->ev);
    if (d->tmp_own && d->tmp && !adrift) weft_cu.mem_free(d->tmp);
    weft_cu.ctx_pop(&popped);
}

/* The stream, the event and `bytes` of scratch, with d->ctx current. */
static int acquire(weft_gpu_direct_t *d, size_t bytes)
{
    CUresult r;
    int i;
    for (i = 0; i < MAX_STREAMS && streams[i].ctx && streams[i].ctx != d->ctx; i++) {
    }
    if (i == MAX_STREAMS)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: more than %d CUDA contexts", d->name, MAX_STREAMS);
    if (!streams[i].ctx) {
        if ((r = weft_cu.stream_create(&streams[i].stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
            return cu_fail(d, r, "creating its stream");
        streams[i].ctx = d->ctx;
    }
    d->stream = streams[i].stream;
    if ((r = weft_cu.event_create(&d->ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
        d->ev = NULL;
        return cu_fail(d, r, "creating an event");
    }
    if (!bytes) return WEFT_SUCCESS;
    if (!scratch.busy && (scratch.ctx != d->ctx || scratch.bytes < bytes)) {
        /* the kept scratch is too small or another context's: replaced (freed in its own context) */
        if (scratch.p) {
            CUcontext popped;
            if (weft_cu.ctx_push(scratch.ctx) == CUDA_SUCCESS) {
                weft_cu.mem_free(scratch.p);
                weft_cu.ctx_pop(&popped);
            }
            scratch.p = 0;
            scratch.bytes = 0;
        }
        if ((r = weft_cu.mem_alloc(&scratch.p, bytes)) != CUDA_SUCCESS) {
            scratch.p = 0;
            return weft_error(WEFT_ERR_NO_MEMORY, "%s: %zu bytes of device scratch: %s", d->name, bytes,
                              weft_cu_text(r));
        }
        scratch.ctx = d->ctx;
        scratch.bytes = bytes;
    }
    if (!scratch.busy) {
        scratch.busy = 1;
        d->tmp = scratch.p;
        return WEFT_SUCCESS;
    }
    if ((r = weft_cu.mem_alloc(&d->tmp, bytes)) != CUDA_SUCCESS) {
        d->tmp = 0;
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: %zu bytes of device scratch: %s", d->name, bytes, weft_cu_text(r));
    }
    d->tmp_own = 1;
    return WEFT_SUCCESS;
}

/* The context of device buffer p (0), or a decline naming `what`. */
static int buffer_ctx(const char *name, const void *p, const char *what, CUcontext *ctx)
{
    unsigned type = 0;
    CUcontext c = NULL;
    CUpointer_attribute at[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT};
    void *data[] = {&type, &c};
    if (!p || weft_cu.pointer_get_attributes(2, at, data, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS ||
        type != CU_MEMORYTYPE_DEVICE || !c)
        return weft_coll_decline("%s: the %s is not device memory of a context", name, what);
    if (*ctx && c != *ctx)
        return weft_coll_decline("%s: the %s belongs to another context than the output", name, what);
    *ctx = c;
    return WEFT_SUCCESS;
}

int weft_gpu_direct_usable(const weft_coll_args_t *a, const char *name)
{
    if (a->mem != WEFT_MEM_CUDA) return weft_coll_decline("%s: not device buffers", name);
    if (!weft_cuda_p2p_moves())
        return weft_coll_decline("%s: point-to-point moves no device buffers (WEFT_CUDA=off)", name);
    if (!weft_gpu_vars.enabled) return weft_coll_decline("%s: WEFT_CUDA_COLL=0", name);
    return WEFT_SUCCESS;
}

void weft_gpu_direct_start(weft_sched_t *s, const weft_coll_args_t *a, const char *name, const char *gpu)
{
    weft_sched_device(s);
    weft_debug("%s: comm %s, %zu elements, a ring of %d ranks in device memory: %s%s%s", name, a->comm->name, a->count,
               a->comm->size,
               weft_cuda_ucx_carries() ? "UCX moves the blocks (rules.conf's xport=cuda)"
                                       : "point-to-point moves the blocks through its pinned chunks (xport=host)",
               gpu ? ", " : "", gpu ? gpu : "");
}

int weft_gpu_direct_open(weft_sched_t *s, const weft_coll_args_t *a, const char *name, const void *in, size_t bytes,
                         weft_gpu_direct_t **out)
{
    int rc = weft_gpu_direct_usable(a, name);
    if (rc) return rc;
    if (!weft_gpu_kernels_built()) return weft_coll_decline("%s: built without nvcc (no kernels)", name);
    if (!weft_cu.launch_kernel || !weft_cu.event_query || !weft_cu.mem_alloc || !weft_cu.mem_free)
        return weft_coll_decline("%s: the CUDA driver lacks kernel launch, event queries or allocation", name);
    /* an average as staged.c's (the host's sum, then one division): the same bits as the host call's */
    if (a->op == WEFT_AVG) return weft_coll_decline("%s: an average (coll/cuda's staged algorithm takes it)", name);
    if (a->op > WEFT_AVG || (int)a->dtype >= WEFT_GPU_NTYPES)
        return weft_coll_decline("%s: %s on %s", name, weft_op_name(a->op), weft_dtype_name(a->dtype));
    CUcontext ctx = NULL;
    rc = buffer_ctx(name, a->recvbuf, "output", &ctx);
    if (!rc && in) rc = buffer_ctx(name, in, "input", &ctx);
    if (rc) return rc;
    weft_gpu_direct_t *d = weft_sched_scratch(s, sizeof(*d));
    if (!d) return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", name);
    memset(d, 0, sizeof(*d));
    d->name = name;
    d->ctx = ctx;
    d->dtype = a->dtype;
    d->op = a->op;
    d->esize = weft_gpu_esize(a);
    CUcontext popped;
    CUresult r = weft_cu.ctx_push(ctx);
    if (r != CUDA_SUCCESS) return cu_fail(d, r, "making the buffers' context current");
    rc = weft_gpu_module(ctx, &d->m);
    if (!rc) rc = acquire(d, bytes);
    weft_cu.ctx_pop(&popped);
    if (rc) {
        release(d);
        return rc;
    }
    if ((rc = weft_sched_on_end(s, release, d))) {
        release(d);
        return rc;
    }
    weft_gpu_direct_start(s, a, name, "the GPU reduces them");
    *out = d;
    return WEFT_SUCCESS;
}

char *weft_gpu_direct_scratch(const weft_gpu_direct_t *d)
{
    return (char *)(uintptr_t)d->tmp;
}

/* A local step: the reduce on the stream, then its event. */
static int reduce_launch(weft_sched_t *s, void *arg)
{
    (void)s;
    reduce_step_t *st = arg;
    weft_gpu_direct_t *d = st->d;
    CUcontext popped;
    CUresult r = weft_cu.ctx_push(d->ctx);
    if (r != CUDA_SUCCESS) return cu_fail(d, r, "making the buffers' context current");
    size_t bytes = st->la.count * d->esize, most = (size_t)(d->m->sms > 0 ? d->m->sms : 1) * 4;
    size_t blocks = (bytes + 256 * 16 - 1) / (256 * 16);
    if (blocks > most) blocks = most;
    if (blocks < 1) blocks = 1;
    void *params[] = {&st->la};
    CUfunction f = weft_gpu_function(d->m, WEFT_GPU_K_LOCAL_REDUCE, d->dtype, (int)d->op);
    r = weft_cu.launch_kernel(f, (unsigned)blocks, 1, 1, 256, 1, 1, 0, d->stream, params, NULL);
    int rc = r == CUDA_SUCCESS ? WEFT_SUCCESS : cu_fail(d, r, "the reduce kernel's launch");
    if (!rc && (r = weft_cu.event_record(d->ev, d->stream)) != CUDA_SUCCESS) rc = cu_fail(d, r, "recording its event");
    weft_cu.ctx_pop(&popped);
    return rc;
}

static int reduce_done(weft_sched_t *s, void *arg)
{
    reduce_step_t *st = arg;
    CUresult r = weft_cu.event_query(st->d->ev);
    if (r == CUDA_SUCCESS) return 1;
    if (r != CUDA_ERROR_NOT_READY) return cu_fail(st->d, r, "the reduce kernel");
    weft_sched_waiting(s, -1, "the reduce kernel on this rank's GPU");
    return 0;
}

static int reduce_step(weft_sched_t *s, weft_gpu_direct_t *d, const void *a, const void *b, void *out, size_t count)
{
    reduce_step_t *st = weft_sched_scratch(s, sizeof(*st));
    if (!st) return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", d->name);
    memset(st, 0, sizeof(*st));
    st->d = d;
    st->la.a = a;
    st->la.b = b;
    st->la.out = out;
    st->la.count = count;
    st->la.op = (int)d->op;
    st->la.fin_n = 1;
    int rc = weft_sched_call(s, reduce_launch, st);
    return rc ? rc : weft_sched_poll(s, reduce_done, st);
}

int weft_gpu_direct_reduce_scatter(weft_sched_t *s, weft_gpu_direct_t *d, const char *in, char *mine, const size_t *off,
                                   const size_t *cnt)
{
    weft_comm_t comm;
    weft_sched_comm(s, &comm);
    int n = comm->size, me = comm->rank, right = (me + 1) % n, left = (me - 1 + n) % n, rc = WEFT_SUCCESS;
    size_t es = d->esize, most = 0;
    for (int b = 0; b < n; b++)
        if (cnt[b] > most) most = cnt[b];
    char *recvd = weft_gpu_direct_scratch(d), *partial = recvd + most * es;
    /* Step k sends the partial of block me - k - 1 (step 0: this rank's own input of it) and receives the left
     * neighbour's partial of block me - k - 2, folded with this rank's input of it into the partial it sends
     * next; the last step's fold is block me, into `mine`. The incoming partial comes first in the fold: each
     * block's chain runs alike on every rank. */
    for (int k = 0; k < n - 1 && !rc; k++) {
        int sb = ((me - k - 1) % n + n) % n, rb = ((me - k - 2) % n + n) % n;
        const char *send = k == 0 ? in + off[sb] * es : partial;
        char *into = k == n - 2 ? mine : partial;
        rc = weft_sched_recv(s, recvd, cnt[rb] * es, left);
        if (!rc) rc = weft_sched_send(s, send, cnt[sb] * es, right);
        if (!rc) rc = reduce_step(s, d, recvd, in + off[rb] * es, into, cnt[rb]);
        if (!rc) rc = weft_sched_end_round(s);
    }
    return rc;
}

#else /* no CUDA headers */

int weft_gpu_direct_usable(const weft_coll_args_t *a, const char *name)
{
    (void)a;
    return weft_coll_decline("%s: built without CUDA", name);
}

void weft_gpu_direct_start(weft_sched_t *s, const weft_coll_args_t *a, const char *name, const char *gpu)
{
    (void)s;
    (void)a;
    (void)name;
    (void)gpu;
}

int weft_gpu_direct_open(weft_sched_t *s, const weft_coll_args_t *a, const char *name, const void *in, size_t bytes,
                         weft_gpu_direct_t **out)
{
    (void)s;
    (void)a;
    (void)in;
    (void)bytes;
    *out = NULL;
    return weft_coll_decline("%s: built without CUDA", name);
}

char *weft_gpu_direct_scratch(const weft_gpu_direct_t *d)
{
    (void)d;
    return NULL;
}

int weft_gpu_direct_reduce_scatter(weft_sched_t *s, weft_gpu_direct_t *d, const char *in, char *mine, const size_t *off,
                                   const size_t *cnt)
{
    (void)s;
    (void)d;
    (void)in;
    (void)mine;
    (void)off;
    (void)cnt;
    return weft_error(WEFT_ERR_INTERNAL, "coll/cuda: built without CUDA");
}

#endif
