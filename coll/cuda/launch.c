/* coll/cuda: a call's life. Its build (every algorithm's) checks the call,
 * finds the communicator's state and asks the algorithm whether it takes
 * the call; the schedule's start issues the algorithm's launches on the
 * call's stream (in the user's call order on every rank; a communicator's
 * calls run on the GPU in call order whatever streams they go on) and
 * records an event from the communicator's pool; the schedule then polls
 * it. Kernels of one block launch with programmatic dependent launch; a
 * stream being captured into a CUDA graph gets the launches and no event.
 * A failed schedule (the deadline, a lost peer) sets the abort word that
 * every kernel wait watches: the kernels end, the communicator's GPU
 * collectives fail from then on. */
#include "coll/cuda/cuda_coll.h"
#include "pt2pt/cuda.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>

#ifdef WEFT_HAVE_CUDA

CUresult weft_gpu_event_wait(CUevent ev, double seconds)
{
    double until = weft_wtime() + seconds;
    CUresult q;
    while ((q = weft_cu.event_query(ev)) == CUDA_ERROR_NOT_READY && weft_wtime() < until)
        sched_yield();
    return q;
}

/* A kernel of one block (a small call's, where the gap between kernels is a good part of the time) goes out with
 * programmatic dependent launch where the module has it (every kernel starts with stream_order():
 * kernels/common.cuh). */
int weft_gpu_launch(weft_gpu_op_t *op, weft_gpu_kernel_t k, weft_dtype_t dt, int o, unsigned gx, unsigned gy,
                    unsigned threads, void *args, const char *what)
{
    const weft_gpu_state_t *st = op->st;
    CUfunction f = weft_gpu_function(st->m, k, dt, o);
    void *params[] = {args};
    CUresult r;
#if CUDA_VERSION >= 12000
    if (weft_gpu_vars.pdl && st->m->pdl && gx * gy == 1) {
        CUlaunchAttribute at;
        memset(&at, 0, sizeof(at));
        at.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        at.value.programmaticStreamSerializationAllowed = 1;
        CUlaunchConfig c;
        memset(&c, 0, sizeof(c));
        c.gridDimX = gx, c.gridDimY = gy, c.gridDimZ = 1;
        c.blockDimX = threads, c.blockDimY = 1, c.blockDimZ = 1;
        c.hStream = op->stream, c.attrs = &at, c.numAttrs = 1;
        r = weft_cu.launch_kernel_ex(&c, f, params, NULL);
    } else
#endif
        r = weft_cu.launch_kernel(f, gx, gy, 1, threads, 1, 1, 0, op->stream, params, NULL);
    if (r == CUDA_SUCCESS) return WEFT_SUCCESS;
    int regs = -1;
    if (weft_cu.func_get_attribute) weft_cu.func_get_attribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f);
    return weft_error(WEFT_ERR_TRANSPORT,
                      "coll/cuda: %s (%u x %u blocks of %u threads, %d registers a thread) failed: %s", what, gx, gy,
                      threads, regs, weft_cu_text(r));
}

/* Issues the whole call on the stream, then records the event. */
static int issue(weft_gpu_op_t *op)
{
    weft_gpu_state_t *st = op->st;
    memset(&op->fz, 0, sizeof(op->fz));
    op->stg.n = 0;
    op->stg_most = 0;
    op->fusing = 0;
    op->win = NULL;
    /* A communicator's calls run on the GPU in call order whatever streams they go on (the flags and the
     * device counter assume it; FSDP puts a group's all-gathers and reduce-scatters on two streams, which
     * would otherwise run them at once): a call on another stream than the previous one's waits for that
     * call's end, unless it has been reaped (done). A captured call is ordered by the graph's stream. */
    if (!op->capturing && st->tail && st->tail_stream != op->stream) {
        CUresult r = weft_cu.stream_wait_event(op->stream, st->tail, 0);
        if (r != CUDA_SUCCESS) return weft_gpu_cu_fail(r, "ordering the call after the communicator's previous one");
    }
    int rc = op->alg->issue(op);
    if (rc || op->capturing) return rc;
    CUresult r = weft_cu.event_record(op->ev, op->stream);
    if (r != CUDA_SUCCESS) return weft_gpu_cu_fail(r, "recording the call's event");
    st->tail = op->ev;
    st->tail_stream = op->stream;
    op->num = ++st->issued;
    return WEFT_SUCCESS;
}

/* The schedule's start (in the user's call order on every rank): issues the launches. */
static void op_start(void *arg)
{
    weft_gpu_op_t *op = arg;
    if (op->started) return;
    op->started = 1;
    weft_gpu_state_t *st = op->st;
    if (st->broken) return; /* the poll reports it */
    CUresult r = weft_cu.ctx_push(st->ctx);
    int rc = r == CUDA_SUCCESS ? issue(op) : weft_gpu_cu_fail(r, "making the buffers' context current");
    CUcontext popped;
    if (r == CUDA_SUCCESS) weft_cu.ctx_pop(&popped);
    if (rc) {
        st->broken = rc;
        snprintf(st->why, sizeof(st->why), "launching a %s failed (%s)", op->name, weft_last_error());
    }
}

/* A barrier of this call found a peer's call unlike this rank's (windows):
 * the communicator is broken; the error names the peer and the log shows
 * what every rank announced. */
static int mismatch_error(weft_gpu_op_t *op)
{
    weft_gpu_state_t *st = op->st;
    int peer = -st->words[1] - 1;
    /* what every rank announced, as this rank's header holds it (both parities) */
    unsigned long long d[2 * WEFT_CK_MAX_RANKS], ctr = 0;
    if (weft_cuda_copy(d, (const void *)(uintptr_t)(st->region + WEFT_CK_DESC), sizeof(d)) ||
        weft_cuda_copy(&ctr, (const void *)(uintptr_t)st->counter, sizeof(ctr)))
        memset(d, 0, sizeof(d));
    char seen[400];
    int at = snprintf(seen, sizeof(seen), "counter %#llx;", ctr);
    for (int q = 0; q < 2 * st->n && at < (int)sizeof(seen); q++) {
        unsigned long long v = d[(q / st->n) * WEFT_CK_MAX_RANKS + q % st->n];
        at += snprintf(seen + at, sizeof(seen) - (size_t)at, " %d:%d=%s", q / st->n, q % st->n, !(v & 1) ? "slot" : "");
        if (v & 1 && at < (int)sizeof(seen))
            at += snprintf(seen + at, sizeof(seen) - (size_t)at, "w%llu+%llu", (v >> 1) & 0x7fff, WEFT_CK_DESC_OFF(v));
    }
    weft_warn("coll/cuda: comm %s: %s: the inputs the ranks announced (parity:rank=place): %s", st->comm->name,
              op->name, seen);
    st->broken = WEFT_ERR_ARG;
    snprintf(st->why, sizeof(st->why),
             "a %s did not match rank %d's: one rank's input lay in a registered window and the other's not, "
             "or in another window, or the window was too small for the call",
             op->name, peer);
    return weft_error(WEFT_ERR_ARG,
                      "%s (comm %s): rank %d's call does not match this rank's: every rank passes an input in "
                      "the same registered window (weft_comm_window_register), or none does",
                      op->name, st->comm->name, peer);
}

/* The call is done: its event, or a later call's (the communicator's eager calls end in call order). The
 * first poll, right after the launches, asks nothing: the kernels cannot have ended yet, and the question
 * costs about a microsecond of a stream-ordered call's host time. */
static int op_poll(weft_sched_t *s, void *arg)
{
    weft_gpu_op_t *op = arg;
    weft_gpu_state_t *st = op->st;
    int fresh = !op->started;
    if (fresh) op_start(op);
    if (st->broken) return weft_gpu_broken(st);
    if (op->capturing) return 1; /* launched into the graph: each replay runs it */
    CUresult r = op->num && op->num <= st->done ? CUDA_SUCCESS
                 : fresh                        ? CUDA_ERROR_NOT_READY
                                                : weft_cu.event_query(op->ev);
    if (r == CUDA_SUCCESS && st->words[1] < 0) return mismatch_error(op); /* a peer's call unlike this one */
    if (r == CUDA_SUCCESS) {
        if (op->num > st->done) st->done = op->num;
        return 1;
    }
    if (r != CUDA_ERROR_NOT_READY) return weft_gpu_cu_fail(r, "waiting for the GPU collective");
    weft_sched_waiting(s, -1, "the GPU collective's kernels (a peer's barrier flag)");
    return 0;
}

/* A failed schedule (timeout, cancel, an error): the kernels may still wait
 * on peers; the abort word ends them, and the communicator's counters are
 * out of step from here on. */
static void op_failed(void *arg, int rc)
{
    weft_gpu_op_t *op = arg;
    weft_gpu_state_t *st = op->st;
    if (!op->started && op->ev && weft_cu.ctx_push(st->ctx) == CUDA_SUCCESS) { /* never issued: op_end won't run */
        CUcontext popped;
        weft_cu.event_destroy(op->ev);
        op->ev = NULL;
        weft_cu.ctx_pop(&popped);
    }
    if (!op->started || !st->words || op->capturing) return;
    st->words[0] = 1;
    __sync_synchronize();
    if (weft_cu.ctx_push(st->ctx) == CUDA_SUCCESS) {
        /* The kernels end within microseconds of the abort word; but work of another communicator
         * queued before them on the same stream may not: wait a bounded time, never forever. */
        if (weft_gpu_event_wait(op->ev, 2.0) == CUDA_ERROR_NOT_READY)
            weft_warn("coll/cuda: comm %s: a failed %s's kernels are still queued behind other work on their "
                      "stream after 2 s; they end at the abort word when they run",
                      st->comm->name, op->name);
        if (st->tail == op->ev) st->tail = NULL;
        weft_cu.event_destroy(op->ev); /* op_end, which would, does not run after a failure */
        op->ev = NULL;
        CUcontext popped;
        weft_cu.ctx_pop(&popped);
    }
    int peer = st->words[1] - 1;
    if (!st->broken) {
        st->broken = WEFT_ERR_COMM;
        if (peer >= 0)
            snprintf(st->why, sizeof(st->why), "a %s ended (%s) while its kernels waited for rank %d", op->name,
                     weft_strerror(rc), peer);
        else
            snprintf(st->why, sizeof(st->why), "a %s ended (%s)", op->name, weft_strerror(rc));
    }
    if (peer >= 0) { /* the message says whom the kernels waited for */
        char was[200];
        snprintf(was, sizeof(was), "%s", weft_last_error());
        weft_error(rc, "%s (the GPU kernels were waiting for rank %d's barrier flag; stopped through the abort word)",
                   was, peer);
    }
}

static const weft_sched_watch_t gpu_watch = {.start = op_start, .failed = op_failed};

static int op_end(weft_sched_t *s, void *arg)
{
    (void)s;
    weft_gpu_op_t *op = arg;
    weft_gpu_state_t *st = op->st;
    if (st->tail == op->ev) st->tail = NULL; /* done: later calls need not wait for it */
    if (op->ev && st->nev < WEFT_GPU_EVPOOL)
        st->evpool[st->nev++] = op->ev; /* its work is done: the next call may record it again */
    else if (op->ev)
        weft_cu.event_destroy(op->ev);
    op->ev = NULL;
    return WEFT_SUCCESS;
}

int weft_gpu_build(weft_sched_t *s, const weft_coll_args_t *a, const weft_gpu_alg_t *alg)
{
    const char *name = alg->alg.name;
    int rc = weft_gpu_usable(a);
    if (rc) return rc;
    int empty = a->kind != WEFT_COLL_BARRIER && a->count == 0;
    /* A communicator set up: the algorithm's own conditions first, before the buffers' (a decline is cheap). */
    weft_gpu_state_t *st = weft_coll_state(a->comm, WEFT_COLL_COMP_CUDA);
    int asked = st && st->ready && !st->broken && !empty;
    if (asked && (rc = alg->takes(a, st))) return rc;
    if ((rc = weft_gpu_state_of(a, &st))) return rc;
    if (empty) return WEFT_SUCCESS; /* every rank passes the same count: nothing to do anywhere */
    if (!asked && (rc = alg->takes(a, st))) return rc;
    weft_gpu_op_t *op = weft_sched_scratch(s, sizeof(*op));
    if (!op) return weft_error(WEFT_ERR_NO_MEMORY, "%s %s: out of memory", weft_coll_kind_name(a->kind), name);
    memset(op, 0, sizeof(*op));
    op->st = st;
    op->a = *a;
    op->alg = alg;
    snprintf(op->name, sizeof(op->name), "%s %s", weft_coll_kind_name(a->kind), name);
    op->stream = a->on_stream ? (CUstream)a->stream : st->stream;
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = CUDA_SUCCESS;
    if (a->on_stream && weft_cu.stream_is_capturing &&
        (r = weft_cu.stream_is_capturing(op->stream, &cap)) != CUDA_SUCCESS)
        return weft_gpu_cu_fail(r, "asking whether the stream is being captured");
    if (cap == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
        return weft_error(WEFT_ERR_ARG, "%s: the stream's graph capture was invalidated", op->name);
    op->capturing = cap == CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (!op->capturing && st->nev > 0)
        op->ev = st->evpool[--st->nev];
    else if (!op->capturing && (r = weft_cu.event_create(&op->ev, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS)
        return weft_gpu_cu_fail(r, "creating an event");
    weft_sched_watch(s, &gpu_watch, op);
    if ((rc = weft_sched_poll(s, op_poll, op)) || (rc = weft_sched_call(s, op_end, op))) return rc;
    return WEFT_SUCCESS;
}

#else /* no CUDA headers: weft_gpu_usable declines every call first */

int weft_gpu_launch(weft_gpu_op_t *op, weft_gpu_kernel_t k, weft_dtype_t dt, int o, unsigned gx, unsigned gy,
                    unsigned threads, void *args, const char *what)
{
    (void)op, (void)k, (void)dt, (void)o, (void)gx, (void)gy, (void)threads, (void)args;
    return weft_error(WEFT_ERR_UNSUPPORTED, "coll/cuda: %s: built without CUDA", what);
}

int weft_gpu_build(weft_sched_t *s, const weft_coll_args_t *a, const weft_gpu_alg_t *alg)
{
    (void)s;
    int rc = weft_gpu_usable(a);
    return rc ? rc : weft_coll_decline("coll/cuda: %s: built without CUDA", alg->alg.name);
}

#endif
