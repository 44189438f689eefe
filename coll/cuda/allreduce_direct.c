/* allreduce on device buffers across nodes with the messages in device
 * memory: a ring (reduce-scatter, then allgather: each rank sends 2 (n - 1)
 * / n of the vector, the minimum) whose messages UCX moves between the
 * GPUs itself (cuda_ipc between processes of one host, GPUDirect RDMA over
 * verbs) and whose reductions run on the GPU (kernels/local.cu), so the
 * vector never crosses the host link. The schedule is host-driven like
 * staged.c's: each round posts its message pair and, once the block came,
 * launches the reduce on a stream of weft's own and polls its event; the
 * next round sends the block the kernel wrote. Takes allreduce on a
 * communicator no kernel algorithm takes (the rail and leader steps of
 * the hierarchical algorithms, or a whole communicator across nodes)
 * where the UCX in use carries CUDA memory; elsewhere each message would
 * take point-to-point's staged path, and staged.c's host copies do better.
 * Its one scratch block (the incoming one) is device memory kept for the
 * next call. */
#include "coll/cuda/cuda_coll.h"
#include "pt2pt/cuda.h"

#include <string.h>

#ifdef WEFT_HAVE_CUDA

/* The incoming block's device memory, kept for the next call in the same
 * context (a call that finds it in use allocates its own, freed at its end:
 * cuMemFree waits for the device). Freed with the context. */
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

typedef struct {
    CUcontext ctx;
    const weft_gpu_module_t *m;
    CUstream stream;
    CUevent ev;
    CUdeviceptr tmp;
    int tmp_own; /* tmp is this call's (else the cache's) */
    weft_dtype_t dtype;
    weft_op_t op;
    size_t esize;
} direct_t;

typedef struct {
    direct_t *d;
    weft_ck_local_args_t la;
} reduce_step_t;

static int cu_fail(CUresult r, const char *what)
{
    return weft_error(WEFT_ERR_TRANSPORT, "allreduce direct: %s failed: %s", what, weft_cu_text(r));
}

static void release(void *arg)
{
    direct_t *d = arg;
    CUcontext popped;
    /* Messages of a failed schedule still in flight may yet land in the scratch block: it is dropped, not reused
     * or freed (a leak only after a failure). */
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

/* The stream, the event and the scratch block, with d->ctx current. */
static int acquire(direct_t *d, size_t bytes)
{
    CUresult r;
    int i;
    for (i = 0; i < MAX_STREAMS && streams[i].ctx && streams[i].ctx != d->ctx; i++) {
    }
    if (i == MAX_STREAMS)
        return weft_error(WEFT_ERR_UNSUPPORTED, "allreduce direct: more than %d CUDA contexts", MAX_STREAMS);
    if (!streams[i].ctx) {
        if ((r = weft_cu.stream_create(&streams[i].stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
            return cu_fail(r, "creating its stream");
        streams[i].ctx = d->ctx;
    }
    d->stream = streams[i].stream;
    if ((r = weft_cu.event_create(&d->ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
        d->ev = NULL;
        return cu_fail(r, "creating an event");
    }
    if (!bytes) return WEFT_SUCCESS;
    if (!scratch.busy && (scratch.ctx != d->ctx || scratch.bytes < bytes)) {
        /* the kept block is too small or another context's: replaced (freed in its own context) */
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
            return weft_error(WEFT_ERR_NO_MEMORY, "allreduce direct: %zu bytes of device scratch: %s", bytes,
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
        return weft_error(WEFT_ERR_NO_MEMORY, "allreduce direct: %zu bytes of device scratch: %s", bytes,
                          weft_cu_text(r));
    }
    d->tmp_own = 1;
    return WEFT_SUCCESS;
}

/* After a block came: block = block op tmp on the stream, then the event. */
static int reduce_launch(weft_sched_t *s, void *arg)
{
    (void)s;
    reduce_step_t *st = arg;
    direct_t *d = st->d;
    CUcontext popped;
    CUresult r = weft_cu.ctx_push(d->ctx);
    if (r != CUDA_SUCCESS) return cu_fail(r, "making the buffers' context current");
    size_t bytes = st->la.count * d->esize, most = (size_t)(d->m->sms > 0 ? d->m->sms : 1) * 4;
    size_t blocks = (bytes + 256 * 16 - 1) / (256 * 16);
    if (blocks > most) blocks = most;
    if (blocks < 1) blocks = 1;
    void *params[] = {&st->la};
    CUfunction f = weft_gpu_function(d->m, WEFT_GPU_K_LOCAL_REDUCE, d->dtype, (int)d->op);
    r = weft_cu.launch_kernel(f, (unsigned)blocks, 1, 1, 256, 1, 1, 0, d->stream, params, NULL);
    int rc = r == CUDA_SUCCESS ? WEFT_SUCCESS : cu_fail(r, "the reduce kernel's launch");
    if (!rc && (r = weft_cu.event_record(d->ev, d->stream)) != CUDA_SUCCESS) rc = cu_fail(r, "recording its event");
    weft_cu.ctx_pop(&popped);
    return rc;
}

static int reduce_done(weft_sched_t *s, void *arg)
{
    reduce_step_t *st = arg;
    CUresult r = weft_cu.event_query(st->d->ev);
    if (r == CUDA_SUCCESS) return 1;
    if (r != CUDA_ERROR_NOT_READY) return cu_fail(r, "the reduce kernel");
    weft_sched_waiting(s, -1, "the reduce kernel on this rank's GPU");
    return 0;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    weft_comm_t comm = a->comm;
    int n = comm->size, me = comm->rank, rc;
    if (a->mem != WEFT_MEM_CUDA) return weft_coll_decline("allreduce direct: not device buffers");
    if (!weft_cuda_ucx_carries())
        return weft_coll_decline("allreduce direct: the UCX in use carries no CUDA memory (staged takes the call)");
    if (!weft_gpu_kernels_built()) return weft_coll_decline("allreduce direct: built without nvcc (no kernels)");
    if (!weft_gpu_vars.enabled) return weft_coll_decline("allreduce direct: WEFT_CUDA_COLL=0");
    if (!weft_cu.launch_kernel || !weft_cu.event_query || !weft_cu.mem_alloc || !weft_cu.mem_free)
        return weft_coll_decline("allreduce direct: the CUDA driver lacks kernel launch, event queries or allocation");
    /* an average as staged.c's (the host's sum, then one division): the same bits as the host call's */
    if (a->op == WEFT_AVG)
        return weft_coll_decline("allreduce direct: an average (coll/cuda's staged algorithm takes it)");
    if (a->op > WEFT_AVG || (int)a->dtype >= WEFT_GPU_NTYPES)
        return weft_coll_decline("allreduce direct: %s on %s", weft_op_name(a->op), weft_dtype_name(a->dtype));
    size_t es = weft_gpu_esize(a), base = a->count / (size_t)n, extra = a->count % (size_t)n;
    if (a->count < (size_t)n) return weft_coll_decline("allreduce direct: fewer elements than ranks");
    /* The buffers' context (the output's; the input's must agree: one GPU). */
    CUcontext ctx = NULL, c2 = NULL;
    unsigned type = 0;
    CUpointer_attribute at[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT};
    void *data[] = {&type, &ctx};
    if (weft_cu.pointer_get_attributes(2, at, data, (CUdeviceptr)(uintptr_t)a->recvbuf) != CUDA_SUCCESS ||
        type != CU_MEMORYTYPE_DEVICE || !ctx)
        return weft_coll_decline("allreduce direct: the output is not device memory of a context");
    const char *in = weft_gpu_input_apart(a);
    if (in) {
        data[1] = &c2;
        if (weft_cu.pointer_get_attributes(2, at, data, (CUdeviceptr)(uintptr_t)in) != CUDA_SUCCESS ||
            type != CU_MEMORYTYPE_DEVICE || c2 != ctx)
            return weft_coll_decline("allreduce direct: the input is not device memory of the output's context");
    }
    direct_t *d = weft_sched_scratch(s, sizeof(*d));
    reduce_step_t *steps = n > 1 ? weft_sched_scratch(s, sizeof(*steps) * (size_t)(n - 1)) : NULL;
    if (!d || (n > 1 && !steps)) return weft_error(WEFT_ERR_NO_MEMORY, "allreduce direct: out of memory");
    memset(d, 0, sizeof(*d));
    d->ctx = ctx;
    d->dtype = a->dtype;
    d->op = a->op;
    d->esize = es;
    CUcontext popped;
    CUresult r = weft_cu.ctx_push(ctx);
    if (r != CUDA_SUCCESS) return cu_fail(r, "making the buffers' context current");
    rc = weft_gpu_module(ctx, &d->m);
    if (!rc) rc = acquire(d, n > 1 ? (base + (extra ? 1 : 0)) * es : 0);
    weft_cu.ctx_pop(&popped);
    if (rc) {
        release(d);
        return rc;
    }
    weft_sched_on_end(s, release, d);
    weft_sched_device(s);
    weft_debug("allreduce direct: comm %s, %zu bytes: a ring of %d ranks on device memory (UCX moves the blocks, "
               "the GPU reduces them)",
               comm->name, a->count * es, n);
    char *out = a->recvbuf;
    /* block b: elements [off(b), off(b) + cnt(b)) */
#define CNT(b) (base + ((size_t)(b) < extra ? 1 : 0))
#define OFF(b) ((size_t)(b)*base + ((size_t)(b) < extra ? (size_t)(b) : extra))
    if (in && (rc = weft_sched_copy(s, out, in, a->count * es))) return rc;
    if (n == 1) return WEFT_SUCCESS;
    if ((rc = weft_sched_end_round(s))) return rc;
    int right = (me + 1) % n, left = (me - 1 + n) % n;
    /* reduce-scatter: step k sends block me - k, receives block me - k - 1 and folds it in; at the end this
     * rank holds block me + 1 reduced over every rank */
    for (int k = 0; k < n - 1 && !rc; k++) {
        int sb = ((me - k) % n + n) % n, rb = ((me - k - 1) % n + n) % n;
        reduce_step_t *st = &steps[k];
        st->d = d;
        st->la.a = (const void *)(uintptr_t)d->tmp;
        st->la.b = out + OFF(rb) * es;
        st->la.out = out + OFF(rb) * es;
        st->la.count = CNT(rb);
        st->la.op = (int)a->op;
        st->la.fin_n = 1;
        /* the incoming block (the left neighbour's partial) comes first in the fold: the same order on every
         * rank for a block's position in the ring */
        rc = weft_sched_recv(s, (void *)(uintptr_t)d->tmp, CNT(rb) * es, left);
        if (!rc) rc = weft_sched_send(s, out + OFF(sb) * es, CNT(sb) * es, right);
        if (!rc) rc = weft_sched_call(s, reduce_launch, st);
        if (!rc) rc = weft_sched_poll(s, reduce_done, st);
        if (!rc) rc = weft_sched_end_round(s);
    }
    /* allgather: step k sends block me + 1 - k, receives block me - k in place */
    for (int k = 0; k < n - 1 && !rc; k++) {
        int sb = ((me + 1 - k) % n + n) % n, rb = ((me - k) % n + n) % n;
        rc = weft_sched_recv(s, out + OFF(rb) * es, CNT(rb) * es, left);
        if (!rc) rc = weft_sched_send(s, out + OFF(sb) * es, CNT(sb) * es, right);
        if (!rc) rc = weft_sched_end_round(s);
    }
#undef CNT
#undef OFF
    return rc;
}

#else /* no CUDA headers */

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    (void)s;
    (void)a;
    return weft_coll_decline("allreduce direct: built without CUDA");
}

#endif

const weft_coll_alg_t weft_alg_allreduce_direct = {
    "direct", WEFT_COLL_ALLREDUCE,
    "device buffers across nodes, the vector never on the host: a ring (reduce-scatter, allgather) whose "
    "messages UCX moves in device memory (cuda_ipc, GPUDirect RDMA) and whose reductions run on the GPU; where "
    "the UCX in use carries CUDA memory",
    build, 0};
