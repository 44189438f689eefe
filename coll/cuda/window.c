/* coll/cuda: registered buffers (windows). weft_comm_window_register,
 * collective like ncclCommWindowRegister, exchanges each rank's buffer
 * through CUDA IPC once; a later call whose input lies in a window on every
 * rank may read it in place (the *_window.c algorithms): a barrier whose
 * flags also carry each rank's input place, the reduce or copy straight out
 * of the peers' windows, and a second barrier so that no rank's stream goes
 * on (and overwrites its input) while a peer still reads it. The first
 * barrier checks the peers' announcements: a rank in a window and another
 * not, another window, or a window too small fails the call on every rank
 * that sees it. */
#include "coll/cuda/cuda_coll.h"
#include "pt2pt/cuda.h"

#include <stdio.h>
#include <string.h>

const weft_gpu_window_t *weft_gpu_window_of(const weft_gpu_state_t *st, const char *p, size_t bytes, size_t *off)
{
    for (int i = 0; p && i < WEFT_GPU_MAX_WINDOWS; i++) {
        const weft_gpu_window_t *w = &st->win[i];
        const char *lo = (const char *)(uintptr_t)w->base[st->me];
        if (w->st && p >= lo && bytes <= w->len[st->me] && (size_t)(p - lo) <= w->len[st->me] - bytes) {
            *off = (size_t)(p - lo);
            return w;
        }
    }
    return NULL;
}

/* The window that holds a call's input (*w, the input's offset in it *off), or a decline. */
static int window_find(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_gpu_input_fn input,
                       const weft_gpu_window_t **w, size_t *off)
{
    size_t need = 0;
    const char *in = input(a, &need);
    int rc;
    if (!in) return weft_coll_decline("coll/cuda: in place, a rank would overwrite what its peers read");
    if ((rc = weft_gpu_past_fused(a))) return rc;
    if (!st->nwin || !(*w = weft_gpu_window_of(st, in, need, off)))
        return weft_coll_decline("coll/cuda: the input (%zu bytes at %p) is in no registered window", need,
                                 (const void *)in);
    return WEFT_SUCCESS;
}

int weft_gpu_window_takes(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_gpu_input_fn input)
{
    const weft_gpu_window_t *w;
    size_t off;
    return window_find(a, st, input, &w, &off);
}

int weft_gpu_window_run(weft_gpu_op_t *op, weft_gpu_input_fn input, weft_gpu_window_steps_fn steps)
{
    const weft_gpu_window_t *w = NULL;
    size_t off = 0, need = 0;
    const char *in = input(&op->a, &need);
    if (window_find(&op->a, op->st, input, &w, &off))
        return weft_error(WEFT_ERR_INTERNAL, "coll/cuda: %s: its window went away", op->name);
    op->win = w;
    int rc = weft_gpu_barrier_as(op, WEFT_CK_DESC_REG(off, w->index), 1, need, w);
    if (!rc) rc = steps(op, in, need);
    return rc ? rc : weft_gpu_barrier_as(op, 0, 0, 0, NULL);
}

#ifdef WEFT_HAVE_CUDA

void weft_gpu_window_unmap(weft_gpu_window_t *w, int n)
{
    for (int p = 0; p < n; p++)
        if (w->mapped[p]) weft_cu.ipc_close_mem_handle(w->mapped[p]);
}

/* What each rank tells the others when registering. */
typedef struct {
    int32_t status; /* WEFT_SUCCESS or why this rank's buffer cannot be registered */
    int32_t index;  /* deregistration: the window it names */
    uint64_t off;   /* the buffer's offset in its allocation */
    uint64_t bytes;
    CUipcMemHandle handle; /* of the allocation */
} win_exch_t;

/* The communicator's coll/cuda state for a registration, or why not (the
 * same on every rank: it depends on the communicator alone). */
static int window_comm(weft_comm_t comm, const char *fn)
{
    int rc;
    WEFT_CHECK_INIT(fn);
    if ((rc = weft_comm_check_usable(comm, fn))) return rc;
    if (!weft_gpu_kernels_built())
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: weft was built without GPU collectives", fn);
    if (!weft_gpu_vars.enabled)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: WEFT_CUDA_COLL=0 (no GPU collectives)", fn);
    if (!weft_cuda_possible() || !weft_cu.ipc_get_mem_handle || !weft_cu.mem_get_address_range)
        return weft_error(WEFT_ERR_UNSUPPORTED, "%s: no CUDA driver with IPC in this process", fn);
    if (weft_comm_spans_nodes(comm) || comm->size > WEFT_CK_MAX_RANKS)
        return weft_error(WEFT_ERR_UNSUPPORTED,
                          "%s: comm %s spans nodes or has more than %d ranks: windows are for the GPU collectives "
                          "of one node's ranks (register on a node communicator, weft_comm_split_type)",
                          fn, comm->name, WEFT_CK_MAX_RANKS);
    return WEFT_SUCCESS;
}

/* Every rank's status is the same after this: the first failing rank's, named. */
static int window_agree(weft_comm_t comm, win_exch_t *mine, win_exch_t *all, const char *fn, const char *why)
{
    int rc = weft_allgather(mine, all, (int64_t)sizeof(*mine), WEFT_BYTE, comm);
    if (rc) return rc;
    for (int p = 0; p < comm->size; p++)
        if (all[p].status) {
            if (p != comm->rank || !why[0])
                return weft_error(all[p].status, "%s: comm %s: rank %d failed (%s)", fn, comm->name, p,
                                  weft_strerror(all[p].status));
            return weft_error(all[p].status, "%s: comm %s: %s", fn, comm->name, why);
        }
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_window_register(weft_comm_t comm, void *buf, size_t bytes, weft_window_t *win)
{
    WEFT_API_ENTER();
    static const char fn[] = "weft_comm_window_register";
    if (win) *win = NULL;
    int rc = window_comm(comm, fn);
    if (rc) return rc;
    if (!win) return weft_error(WEFT_ERR_ARG, "%s: win is NULL", fn);
    win_exch_t mine, all[WEFT_CK_MAX_RANKS];
    memset(&mine, 0, sizeof(mine));
    char why[200] = "";
    CUcontext ctx = NULL;
    unsigned type = 0;
    CUpointer_attribute at[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT};
    void *data[] = {&type, &ctx};
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult r;
    if (!buf || !bytes) {
        mine.status = WEFT_ERR_ARG;
        snprintf(why, sizeof(why), "an empty buffer (%p, %zu bytes)", buf, bytes);
    } else if (weft_cu.pointer_get_attributes(2, at, data, (CUdeviceptr)(uintptr_t)buf) != CUDA_SUCCESS ||
               type != CU_MEMORYTYPE_DEVICE || !ctx) {
        mine.status = WEFT_ERR_ARG;
        snprintf(why, sizeof(why), "the buffer at %p is not device memory", buf);
    } else if ((r = weft_cu.mem_get_address_range(&base, &size, (CUdeviceptr)(uintptr_t)buf)) != CUDA_SUCCESS ||
               (uintptr_t)buf + bytes > base + size) {
        mine.status = WEFT_ERR_ARG;
        snprintf(why, sizeof(why), "[%p, +%zu) is not inside one allocation (%s)", buf, bytes,
                 r == CUDA_SUCCESS ? "it runs past its end" : weft_cu_text(r));
    } else if ((r = weft_cu.ipc_get_mem_handle(&mine.handle, base)) != CUDA_SUCCESS) {
        mine.status = WEFT_ERR_UNSUPPORTED;
        snprintf(why, sizeof(why),
                 "cuIpcGetMemHandle of the buffer's allocation failed (%s): windows take cuMemAlloc / cudaMalloc "
                 "memory, not VMM (cuMemCreate, expandable segments) or managed memory",
                 weft_cu_text(r));
    }
    /* What would make weft_gpu_state_get below fail on this rank alone: said now, so every rank stops alike. */
    const weft_gpu_state_t *cur = weft_coll_state(comm, WEFT_COLL_COMP_CUDA);
    if (!mine.status && cur && cur->broken) {
        mine.status = cur->broken;
        snprintf(why, sizeof(why), "its GPU collectives failed earlier: %.150s", cur->why);
    } else if (!mine.status && cur && cur->ctx != ctx) {
        mine.status = WEFT_ERR_ARG;
        snprintf(why, sizeof(why), "the buffer belongs to another CUDA context than the communicator's GPU work");
    }
    mine.off = (uint64_t)((uintptr_t)buf - base);
    mine.bytes = bytes;
    if (mine.status) weft_warn("%s: comm %s: %s", fn, comm->name, why);
    if ((rc = window_agree(comm, &mine, all, fn, why))) return rc;
    /* Every rank has a device buffer: the communicator's GPU state (collective, alike everywhere). */
    weft_gpu_state_t *st = NULL;
    if ((rc = weft_gpu_state_get(comm, ctx, &st))) return rc;
    int idx = -1;
    for (int i = 0; i < WEFT_GPU_MAX_WINDOWS && idx < 0; i++)
        if (!st->win[i].st) idx = i;
    weft_gpu_window_t w;
    memset(&w, 0, sizeof(w));
    w.index = idx;
    memset(&mine, 0, sizeof(mine));
    why[0] = 0;
    if (idx < 0) {
        mine.status = WEFT_ERR_NO_MEMORY;
        snprintf(why, sizeof(why), "%d windows registered already (deregister one)", WEFT_GPU_MAX_WINDOWS);
    } else if ((r = weft_cu.ctx_push(st->ctx)) != CUDA_SUCCESS) {
        mine.status = WEFT_ERR_TRANSPORT;
        snprintf(why, sizeof(why), "making the buffer's context current failed (%s)", weft_cu_text(r));
    } else {
        for (int p = 0; p < st->n && !mine.status; p++) {
            w.len[p] = all[p].bytes;
            if (p == st->me) {
                w.base[p] = (CUdeviceptr)(uintptr_t)buf;
            } else if ((r = weft_cu.ipc_open_mem_handle(&w.mapped[p], all[p].handle,
                                                        CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != CUDA_SUCCESS) {
                mine.status = WEFT_ERR_UNSUPPORTED;
                snprintf(why, sizeof(why), "mapping rank %d's buffer through CUDA IPC failed (%s)", p, weft_cu_text(r));
            } else {
                w.base[p] = w.mapped[p] + all[p].off;
            }
        }
        CUcontext popped;
        weft_cu.ctx_pop(&popped);
    }
    if (mine.status) weft_warn("%s: comm %s: %s", fn, comm->name, why);
    win_exch_t all2[WEFT_CK_MAX_RANKS];
    if ((rc = window_agree(comm, &mine, all2, fn, why))) {
        if (weft_cu.ctx_push(st->ctx) == CUDA_SUCCESS) {
            weft_gpu_window_unmap(&w, st->n);
            CUcontext popped;
            weft_cu.ctx_pop(&popped);
        }
        return rc;
    }
    w.st = st;
    st->win[idx] = w;
    st->nwin++;
    *win = &st->win[idx];
    weft_debug("%s: comm %s: window %d, %zu bytes at %p", fn, comm->name, idx, bytes, buf);
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_window_deregister(weft_comm_t comm, weft_window_t *win)
{
    WEFT_API_ENTER();
    static const char fn[] = "weft_comm_window_deregister";
    int rc = window_comm(comm, fn);
    if (rc) return rc;
    if (!win) return weft_error(WEFT_ERR_ARG, "%s: win is NULL", fn);
    weft_gpu_state_t *st = weft_coll_state(comm, WEFT_COLL_COMP_CUDA);
    weft_gpu_window_t *w = *win;
    win_exch_t mine, all[WEFT_CK_MAX_RANKS];
    memset(&mine, 0, sizeof(mine));
    char why[160] = "";
    if (!w || !st || w < st->win || w >= st->win + WEFT_GPU_MAX_WINDOWS || w->st != st) {
        mine.status = WEFT_ERR_ARG;
        mine.index = -1;
        snprintf(why, sizeof(why), "the handle is not a window registered on this communicator");
    } else {
        mine.index = w->index;
        /* The calls that read the window are done on this rank (their last barrier: the peers' reads too);
         * a wait bounded by the communicator's timeout (a broken communicator's kernels were stopped). */
        double limit = comm->timeout > 0 ? comm->timeout : 60.0;
        CUresult q = CUDA_SUCCESS;
        if (st->tail && !st->broken && weft_cu.ctx_push(st->ctx) == CUDA_SUCCESS) {
            q = weft_gpu_event_wait(st->tail, limit);
            CUcontext popped;
            weft_cu.ctx_pop(&popped);
        }
        if (q == CUDA_ERROR_NOT_READY) {
            mine.status = WEFT_ERR_TIMEOUT;
            snprintf(why, sizeof(why), "the GPU work that used the window is still running after %.0f s", limit);
        }
    }
    if ((rc = window_agree(comm, &mine, all, fn, why))) return rc;
    for (int p = 0; p < comm->size; p++)
        if (all[p].index != mine.index)
            return weft_error(WEFT_ERR_ARG, "%s: comm %s: rank %d deregisters window %d, this rank window %d", fn,
                              comm->name, p, (int)all[p].index, (int)mine.index);
    if (weft_cu.ctx_push(st->ctx) == CUDA_SUCCESS) {
        weft_gpu_window_unmap(w, st->n);
        CUcontext popped;
        weft_cu.ctx_pop(&popped);
    }
    memset(w, 0, sizeof(*w));
    st->nwin--;
    *win = NULL;
    return WEFT_SUCCESS;
}

#else /* no CUDA headers */

WEFT_API int weft_comm_window_register(weft_comm_t comm, void *buf, size_t bytes, weft_window_t *win)
{
    WEFT_API_ENTER();
    (void)comm;
    (void)buf;
    (void)bytes;
    if (win) *win = NULL;
    return weft_error(WEFT_ERR_UNSUPPORTED, "weft_comm_window_register: weft was built without GPU collectives");
}

WEFT_API int weft_comm_window_deregister(weft_comm_t comm, weft_window_t *win)
{
    WEFT_API_ENTER();
    (void)comm;
    (void)win;
    return weft_error(WEFT_ERR_UNSUPPORTED, "weft_comm_window_deregister: weft was built without GPU collectives");
}

#endif
