/* coll/cuda: a communicator's GPU state, set up collectively at its first
 * GPU call: which ranks share a GPU (a host allgather of their PCI
 * addresses), then every rank's scratch region, counter, abort words and
 * stream, the regions exchanged as CUDA IPC handles (a second allgather)
 * and mapped; every rank fails alike when one could not set up. Also the
 * checks every kernel algorithm makes of a call before its own. */
#include "coll/cuda/cuda_coll.h"
#include "pt2pt/cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* WEFT_CUDA_COLL_SLOT auto: 8 MiB where ranks share a GPU (the size the rules were measured with there),
 * 32 MiB where every rank has its own (the variable's text says what it gave). */
#define SLOT_SHARED   ((size_t)8 << 20)
#define SLOT_OWN_GPUS ((size_t)32 << 20)

size_t weft_gpu_slot_bytes(int shared)
{
    /* a multiple of 16: the second slot, and every part in it, stays aligned for vector and word access */
    if (weft_gpu_vars.slot < 0) return shared ? SLOT_SHARED : SLOT_OWN_GPUS;
    return (size_t)(weft_gpu_vars.slot < 4096 ? 4096 : weft_gpu_vars.slot) / 16 * 16;
}

int weft_gpu_usable(const weft_coll_args_t *a)
{
    weft_comm_t comm = a->comm;
    if (!weft_gpu_kernels_built()) return weft_coll_decline("coll/cuda: built without nvcc (no kernels)");
    if (!weft_gpu_vars.enabled) return weft_coll_decline("coll/cuda: WEFT_CUDA_COLL=0");
#ifdef WEFT_HAVE_CUDA
    if (!weft_cu.launch_kernel || !weft_cu.ipc_open_mem_handle || !weft_cu.event_query || !weft_cu.stream_wait_event)
        return weft_coll_decline("coll/cuda: the CUDA driver lacks kernel launch, IPC, event queries or stream waits");
#endif
    if (weft_comm_spans_nodes(comm)) return weft_coll_decline("coll/cuda: the communicator spans nodes");
    if (comm->size > WEFT_CK_MAX_RANKS)
        return weft_coll_decline("coll/cuda: %d ranks (at most %d)", comm->size, WEFT_CK_MAX_RANKS);
    int reduces =
        a->kind == WEFT_COLL_ALLREDUCE || a->kind == WEFT_COLL_REDUCE || a->kind == WEFT_COLL_REDUCE_SCATTER_BLOCK;
    if (reduces && (a->op > WEFT_AVG || (int)a->dtype >= WEFT_GPU_NTYPES))
        return weft_coll_decline("coll/cuda: %s on %s", weft_op_name(a->op), weft_dtype_name(a->dtype));
    return WEFT_SUCCESS;
}

int weft_gpu_broken(const weft_gpu_state_t *st)
{
    return weft_error(st->broken,
                      "coll/cuda: comm %s: %s; every later GPU collective on this communicator fails at once (free "
                      "it and split a new one)",
                      st->comm->name, st->why);
}

#ifdef WEFT_HAVE_CUDA

int weft_gpu_cu_fail(CUresult r, const char *what)
{
    return weft_error(WEFT_ERR_TRANSPORT, "coll/cuda: %s failed: %s", what, weft_cu_text(r));
}

/* What each rank tells the others at setup. */
typedef struct {
    int32_t status; /* WEFT_SUCCESS or this rank's setup error */
    int32_t device;
    int32_t pci;                     /* the GPU's PCI domain, bus and device (-1: unknown): which ranks share one */
    int32_t sms, ll_room, pipe_room; /* its GPU's SMs; blocks of the LL / pipelined kernels it holds at once */
    CUipcMemHandle handle;
} exch_t;

void weft_gpu_state_release(weft_comm_t comm, void *p)
{
    (void)comm;
    weft_gpu_state_t *st = p;
    if (!st) return;
    if (st->ctx && weft_cu.ctx_push(st->ctx) == CUDA_SUCCESS) {
        if (st->stream) weft_cu.stream_synchronize(st->stream);
        /* the last call on a stream of the caller's may still run: the region and the mappings stay until
         * it ends (10 s at most, then the abort word stops its waits, 2 s more) */
        if (st->tail && weft_gpu_event_wait(st->tail, 10.0) == CUDA_ERROR_NOT_READY && st->words) {
            st->words[0] = 1;
            weft_gpu_event_wait(st->tail, 2.0);
        }
        for (int r = 0; r < st->n; r++)
            if (st->peer[r] && r != st->me) weft_cu.ipc_close_mem_handle(st->peer[r]);
        for (int i = 0; i < WEFT_GPU_MAX_WINDOWS; i++)
            if (st->win[i].st) weft_gpu_window_unmap(&st->win[i], st->n);
        if (st->region) weft_cu.mem_free(st->region);
        if (st->counter) weft_cu.mem_free(st->counter);
        if (st->words) weft_cu.mem_free_host(st->words);
        if (st->stream) weft_cu.stream_destroy(st->stream);
        while (st->nev > 0)
            weft_cu.event_destroy(st->evpool[--st->nev]);
        CUcontext popped;
        weft_cu.ctx_pop(&popped);
    }
    free(st);
}

/* The current context's GPU as its PCI domain, bus and device (-1: unknown). */
static int32_t gpu_pci(void)
{
    CUdevice dev = 0;
    int dom = 0, bus = 0, slot = 0;
    if (!weft_cu.device_get_attribute || weft_cu.ctx_get_device(&dev) != CUDA_SUCCESS ||
        weft_cu.device_get_attribute(&dom, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev) != CUDA_SUCCESS ||
        weft_cu.device_get_attribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev) != CUDA_SUCCESS ||
        weft_cu.device_get_attribute(&slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev) != CUDA_SUCCESS)
        return -1;
    return (int32_t)((dom & 0x7fff) << 16 | (bus & 0xff) << 8 | (slot & 0xff));
}

/* This rank's half of the setup: its region, counter, words, stream. */
static int setup_local(weft_gpu_state_t *st, exch_t *mine)
{
    CUresult r;
    int rc;
    if ((rc = weft_gpu_module(st->ctx, &st->m))) return rc;
    size_t len = WEFT_CK_HDR + 2 * st->slot;
    if ((r = weft_cu.mem_alloc(&st->region, len)) != CUDA_SUCCESS)
        return weft_gpu_cu_fail(r, "allocating the scratch region");
    if ((r = weft_cu.memset_d8(st->region, 0, WEFT_CK_HDR)) != CUDA_SUCCESS)
        return weft_gpu_cu_fail(r, "clearing the flags");
    if ((r = weft_cu.mem_alloc(&st->counter, sizeof(unsigned long long))) != CUDA_SUCCESS ||
        (r = weft_cu.memset_d8(st->counter, 0, sizeof(unsigned long long))) != CUDA_SUCCESS)
        return weft_gpu_cu_fail(r, "allocating the sequence counter");
    /* The flags are clear before any peer can see the region: a late clear
     * would erase a fast peer's first announcement. */
    if ((r = weft_cu.stream_synchronize(NULL)) != CUDA_SUCCESS) return weft_gpu_cu_fail(r, "clearing the flags");
    if ((r = weft_cu.mem_host_alloc((void **)&st->words, 2 * sizeof(int),
                                    CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)) != CUDA_SUCCESS)
        return weft_gpu_cu_fail(r, "allocating the abort word");
    st->words[0] = st->words[1] = 0;
    if ((r = weft_cu.mem_host_get_device_pointer(&st->dwords, st->words, 0)) != CUDA_SUCCESS)
        return weft_gpu_cu_fail(r, "mapping the abort word");
    int least = 0, greatest = 0;
    if (st->comm->gpu_high_priority && weft_cu.stream_create_with_priority && weft_cu.ctx_get_stream_priority_range &&
        weft_cu.ctx_get_stream_priority_range(&least, &greatest) == CUDA_SUCCESS)
        r = weft_cu.stream_create_with_priority(&st->stream, CU_STREAM_DEFAULT, greatest);
    else
        r = weft_cu.stream_create(&st->stream, CU_STREAM_DEFAULT);
    if (r != CUDA_SUCCESS) return weft_gpu_cu_fail(r, "creating the stream");
    if ((r = weft_cu.ipc_get_mem_handle(&mine->handle, st->region)) != CUDA_SUCCESS)
        return weft_gpu_cu_fail(r, "cuIpcGetMemHandle of the scratch region");
    CUdevice dev = 0;
    weft_cu.ctx_get_device(&dev);
    mine->device = (int32_t)dev;
    mine->sms = st->m->sms;
    mine->ll_room = st->m->ll_per_sm * st->m->sms;
    mine->pipe_room = st->m->pipe_per_sm * st->m->sms;
    st->sms = st->m->sms;
    st->pipe_threads = st->m->pipe_threads;
    return WEFT_SUCCESS;
}

/* The GPUs this process sees (device ordinals that answer), at least 1. */
static int32_t gpus_visible(void)
{
    int32_t n = 0;
    int v = 0;
    while (n < 64 && weft_cu.device_get_attribute &&
           weft_cu.device_get_attribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, (CUdevice)n) == CUDA_SUCCESS)
        n++;
    return n > 0 ? n : 1;
}

/* Processes that may run kernels on one GPU of the communicator's at once: the most ranks of it on one GPU;
 * where the machine has ranks outside it (simulated nodes, a split), they may share its GPUs too: as many as
 * the machine's ranks spread over the fewest GPUs a rank sees, at most all of them. The same on every rank. */
static int gpu_sharers(const weft_gpu_state_t *st, const int32_t *pci, int32_t gpus)
{
    int most = 1;
    for (int p = 0; p < st->n; p++) {
        int same = 0;
        for (int q = 0; q < st->n; q++)
            same += pci[p] >= 0 && pci[q] == pci[p];
        if (same > most) most = same;
    }
    int machine = weft_g.machine_ranks > st->n ? weft_g.machine_ranks : st->n, outside = machine - st->n;
    if (outside > 0) {
        int spread = (machine + gpus - 1) / (gpus > 0 ? gpus : 1);
        if (spread > most + outside) spread = most + outside;
        if (spread > most) most = spread;
    }
    return most;
}

/* The most blocks of a spinning kernel of `room` blocks a GPU (the least over the ranks) and `sms` SMs: every
 * one of per_gpu processes' at once. */
static unsigned spin_most(int room, int sms, int per_gpu)
{
    int b = room / (per_gpu > 0 ? per_gpu : 1);
    if (b > sms) b = sms;
    return b < 1 ? 1u : (unsigned)b;
}

/* The setup, collective over comm (a host allgather of every rank's
 * record): every rank fails alike when one could not set up. */
static int setup(weft_gpu_state_t *st)
{
    exch_t mine, all[WEFT_CK_MAX_RANKS];
    memset(&mine, 0, sizeof(mine));
    memset(all, 0, sizeof(all));
    CUresult r = weft_cu.ctx_push(st->ctx);
    if (r != CUDA_SUCCESS) return weft_gpu_cu_fail(r, "making the buffers' context current");
    /* Which ranks share a GPU, first: it sets the slots' default size (the
     * same on every rank: the same records); and the GPUs each rank sees. */
    int32_t pg[2 * WEFT_CK_MAX_RANKS], pci[WEFT_CK_MAX_RANKS], gpus = 0;
    mine.pci = gpu_pci();
    int32_t mine_pg[2] = {mine.pci, gpus_visible()};
    int rc = weft_allgather(mine_pg, pg, (int64_t)sizeof(mine_pg), WEFT_BYTE, st->comm);
    if (rc) {
        CUcontext popped;
        weft_cu.ctx_pop(&popped);
        st->broken = rc;
        snprintf(st->why, sizeof(st->why), "its GPU setup failed (%s)", weft_last_error());
        return rc;
    }
    for (int p = 0; p < st->n; p++) {
        pci[p] = pg[2 * p];
        if (!gpus || pg[2 * p + 1] < gpus) gpus = pg[2 * p + 1];
    }
    for (int p = 0; p < st->n; p++)
        for (int q = p + 1; q < st->n; q++)
            if (pci[p] >= 0 && pci[p] == pci[q]) st->shared = 1;
    st->per_gpu = gpu_sharers(st, pci, gpus);
    st->slot = weft_gpu_slot_bytes(st->shared);
    rc = setup_local(st, &mine);
    char local_why[200] = "";
    if (rc) snprintf(local_why, sizeof(local_why), "%s", weft_last_error());
    mine.status = rc;
    int arc = weft_allgather(&mine, all, (int64_t)sizeof(mine), WEFT_BYTE, st->comm);
    if (arc) rc = arc;
    for (int p = 0; !rc && p < st->n; p++) {
        if (all[p].status) {
            rc = weft_error(WEFT_ERR_UNSUPPORTED, "coll/cuda: comm %s: rank %d could not set up its GPU scratch (%s)",
                            st->comm->name, p, weft_strerror(all[p].status));
        } else if (p == st->me) {
            st->peer[p] = st->region;
        } else if ((r = weft_cu.ipc_open_mem_handle(&st->peer[p], all[p].handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) !=
                   CUDA_SUCCESS) {
            rc = weft_error(WEFT_ERR_UNSUPPORTED,
                            "coll/cuda: comm %s: mapping rank %d's scratch (device %d) through CUDA IPC failed: %s",
                            st->comm->name, p, (int)all[p].device, weft_cu_text(r));
        }
    }
    if (rc && local_why[0]) weft_warn("coll/cuda: %s", local_why);
    if (!rc) { /* the spinning kernels' grids, from every rank's GPU: the same everywhere */
        int sms = all[0].sms, ll_room = all[0].ll_room, pipe_room = all[0].pipe_room;
        for (int p = 1; p < st->n; p++) {
            if (all[p].sms < sms) sms = all[p].sms;
            if (all[p].ll_room < ll_room) ll_room = all[p].ll_room;
            if (all[p].pipe_room < pipe_room) pipe_room = all[p].pipe_room;
        }
        st->ll_most = spin_most(ll_room, sms, st->per_gpu);
        st->pipe_most = spin_most(pipe_room, sms, st->per_gpu);
    }
    CUcontext popped;
    weft_cu.ctx_pop(&popped);
    if (rc) {
        st->broken = rc;
        snprintf(st->why, sizeof(st->why), "its GPU setup failed (%s)", weft_last_error());
        return rc;
    }
    st->ready = 1;
    weft_debug("coll/cuda: comm %s: %d ranks mapped, slots of %zu bytes%s; up to %d processes a GPU: LL kernels of "
               "%u blocks at most, pipelined ones %u",
               st->comm->name, st->n, st->slot, st->shared ? "; ranks share a GPU" : "", st->per_gpu, st->ll_most,
               st->pipe_most);
    return WEFT_SUCCESS;
}

int weft_gpu_state_get(weft_comm_t comm, CUcontext ctx, weft_gpu_state_t **out)
{
    weft_gpu_state_t *st = weft_coll_state(comm, WEFT_COLL_COMP_CUDA);
    if (!st) {
        if (!(st = calloc(1, sizeof(*st)))) return weft_error(WEFT_ERR_NO_MEMORY, "coll/cuda: out of memory");
        st->comm = comm;
        st->n = comm->size;
        st->me = comm->rank;
        st->ctx = ctx;
        if (weft_coll_state_set(comm, WEFT_COLL_COMP_CUDA, st)) {
            free(st);
            return weft_error(WEFT_ERR_NO_MEMORY, "coll/cuda: out of memory");
        }
    }
    if (st->broken) return weft_gpu_broken(st);
    if (st->ctx != ctx)
        return weft_error(WEFT_ERR_ARG,
                          "coll/cuda: comm %s: the buffers belong to another CUDA context than its first GPU "
                          "collective's (one device per rank and communicator)",
                          comm->name);
    if (!st->ready) {
        int rc = setup(st);
        if (rc) return rc;
    }
    *out = st;
    return WEFT_SUCCESS;
}

/* The context of a device buffer, or a decline when it is not one. */
static int device_ctx(const void *buf, CUcontext *ctx)
{
    if (!buf || buf == WEFT_IN_PLACE) return WEFT_SUCCESS;
    unsigned type = 0;
    CUcontext c = NULL;
    CUpointer_attribute at[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT};
    void *data[] = {&type, &c};
    if (weft_cu.pointer_get_attributes(2, at, data, (CUdeviceptr)(uintptr_t)buf) != CUDA_SUCCESS ||
        type != CU_MEMORYTYPE_DEVICE)
        return weft_coll_decline("coll/cuda: a buffer at %p is not device memory", buf);
    if (*ctx && c && c != *ctx) return weft_coll_decline("coll/cuda: the buffers belong to different contexts");
    if (c) *ctx = c;
    return WEFT_SUCCESS;
}

int weft_gpu_state_of(const weft_coll_args_t *a, weft_gpu_state_t **out)
{
    CUcontext ctx = NULL;
    int rc;
    if ((rc = device_ctx(a->sendbuf, &ctx)) || (rc = device_ctx(a->recvbuf, &ctx))) return rc;
    if (a->recvbufs)
        for (int r = 0; r < a->comm->size; r++)
            if ((rc = device_ctx(a->recvbufs[r], &ctx))) return rc;
    if (!ctx && weft_cu.ctx_get_current(&ctx) != CUDA_SUCCESS) ctx = NULL;
    if (!ctx) return weft_coll_decline("coll/cuda: no CUDA context (no device buffer, none current)");
    return weft_gpu_state_get(a->comm, ctx, out);
}

int weft_gpu_shared(const weft_coll_args_t *a)
{
    weft_gpu_state_t *st = weft_coll_state(a->comm, WEFT_COLL_COMP_CUDA);
    if (!(st && st->ready) && (weft_gpu_usable(a) || weft_gpu_state_of(a, &st))) return -1;
    return st->broken ? -1 : st->shared;
}

#else /* no CUDA headers: no state is ever made */

void weft_gpu_state_release(weft_comm_t comm, void *p)
{
    (void)comm;
    free(p);
}

int weft_gpu_state_of(const weft_coll_args_t *a, weft_gpu_state_t **out)
{
    (void)a;
    *out = NULL;
    return weft_coll_decline("coll/cuda: built without CUDA");
}

int weft_gpu_shared(const weft_coll_args_t *a)
{
    weft_gpu_state_t *st = weft_coll_state(a->comm, WEFT_COLL_COMP_CUDA);
    return st && st->ready && !st->broken ? st->shared : -1;
}

#endif
