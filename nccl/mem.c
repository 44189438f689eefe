/* Buffers: ncclMemAlloc / ncclMemFree (device memory from cuMemAlloc:
 * what weft's windows take), ncclCommRegister (accepted and unused, and
 * said so), ncclCommWindowRegister (weft's registered windows), and the
 * device API's host calls (refused: weft has no counterpart). */
#include "nccl_impl.h"

#include <stdlib.h>

NCCL_DEF(ncclResult_t, MemAlloc, (void **ptr, size_t size))
{
    if (!ptr) return nccl_fail(ncclInvalidArgument, "ncclMemAlloc: NULL ptr");
    *ptr = NULL;
    if (size == 0) return ncclSuccess;
    int r = nccl_cuda_alloc(ptr, size);
    if (r)
        return nccl_fail(r == NCCL_CUDA_NOT_LOADED ? ncclInvalidUsage : ncclUnhandledCudaError,
                         "ncclMemAlloc: %zu bytes: %s", size, nccl_cuda_error(r));
    return ncclSuccess;
}

NCCL_DEF(ncclResult_t, MemFree, (void *ptr))
{
    if (!ptr) return ncclSuccess;
    int r = nccl_cuda_free(ptr);
    return r ? nccl_fail(r == NCCL_CUDA_NOT_LOADED ? ncclInvalidUsage : ncclUnhandledCudaError, "ncclMemFree(%p): %s",
                         ptr, nccl_cuda_error(r))
             : ncclSuccess;
}

/* ---- registration ------------------------------------------------------------ */

#define REG_MAGIC 0x6e526567u /* "nReg" */
typedef struct {
    uint32_t magic;
    ncclComm_t comm;
} reg_t;

NCCL_DEF(ncclResult_t, CommRegister, (const ncclComm_t comm, void *buff, size_t size, void **handle))
{
    static int said;
    ncclResult_t rc = nccl_comm_check(comm, "ncclCommRegister");
    if (rc) return rc;
    if (!handle || (!buff && size))
        return nccl_fail(ncclInvalidArgument, "ncclCommRegister: NULL %s", handle ? "buffer" : "handle pointer");
    reg_t *r = malloc(sizeof(*r));
    if (!r) return nccl_fail(ncclSystemError, "ncclCommRegister: out of memory");
    r->magic = REG_MAGIC;
    r->comm = comm;
    *handle = r;
    if (!said++)
        nccl_log(comm->rank == 0 ? NL_WARN : NL_INFO,
                 "ncclCommRegister: buffers are accepted and not used: weft's GPU collectives work through their own "
                 "scratch; ncclCommWindowRegister gives weft's zero-copy windows");
    return ncclSuccess;
}

NCCL_DEF(ncclResult_t, CommDeregister, (const ncclComm_t comm, void *handle))
{
    ncclResult_t rc = nccl_comm_check(comm, "ncclCommDeregister");
    if (rc) return rc;
    reg_t *r = handle;
    if (!r || r->magic != REG_MAGIC || r->comm != comm)
        return nccl_fail(ncclInvalidArgument, "ncclCommDeregister: %p is not a registration of comm %s", handle,
                         comm->name);
    r->magic = 0;
    free(r);
    return ncclSuccess;
}

/* ---- windows ------------------------------------------------------------------ */

#define WIN_MAGIC 0x6e57696eu /* "nWin" */
struct ncclWindow_vidmem {
    uint32_t magic;
    ncclComm_t comm;
    weft_window_t win;
};

NCCL_DEF(ncclResult_t, CommWindowRegister, (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags))
{
    static const char fn[] = "ncclCommWindowRegister";
    ncclResult_t rc = nccl_comm_usable(comm, fn);
    if (rc) return rc;
    if (!win) return nccl_fail(ncclInvalidArgument, "%s: NULL window pointer", fn);
    *win = NULL;
    if (winFlags & ~NCCL_WIN_COLL_SYMMETRIC)
        return nccl_fail(ncclInvalidArgument, "%s: unknown flags 0x%x", fn, (unsigned)winFlags);
    if (!comm->wc)
        return nccl_fail(ncclInvalidUsage, "%s: comm %s has one rank and no weft communicator: nothing to share", fn,
                         comm->name);
    struct ncclWindow_vidmem *w = calloc(1, sizeof(*w));
    if (!w) return nccl_fail(ncclSystemError, "%s: out of memory", fn);
    /* weft's windows are what NCCL calls symmetric: every rank registers
     * its buffer in the same call, and collectives read each other's. */
    NCCL_LOCK();
    int wrc = weft_comm_window_register(comm->wc, buff, size, &w->win);
    NCCL_UNLOCK();
    if (wrc) {
        free(w);
        return nccl_weft_fail(wrc, fn);
    }
    w->magic = WIN_MAGIC;
    w->comm = comm;
    *win = w;
    return ncclSuccess;
}

NCCL_DEF(ncclResult_t, CommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))
{
    static const char fn[] = "ncclCommWindowDeregister";
    ncclResult_t rc = nccl_comm_check(comm, fn);
    if (rc) return rc;
    if (!win || win->magic != WIN_MAGIC || win->comm != comm)
        return nccl_fail(ncclInvalidArgument, "%s: %p is not a window of comm %s", fn, (void *)win, comm->name);
    NCCL_LOCK();
    int wrc = weft_comm_window_deregister(comm->wc, &win->win);
    NCCL_UNLOCK();
    if (wrc) return nccl_weft_fail(wrc, fn);
    win->magic = 0;
    free(win);
    return ncclSuccess;
}

/* ---- the device API ---------------------------------------------------------------- */

NCCL_DEF(ncclResult_t, DevCommCreate,
         (ncclComm_t comm, ncclDevCommRequirements_t const *reqs, ncclDevComm_t *outDevComm))
{
    (void)comm;
    (void)reqs;
    (void)outDevComm;
    return nccl_fail(ncclInvalidUsage,
                     "ncclDevCommCreate: NCCL's device API (GIN / LSA kernels calling NCCL from the GPU) has no "
                     "counterpart in weft");
}

NCCL_DEF(ncclResult_t, DevCommDestroy, (ncclComm_t comm, ncclDevComm_t const *devComm))
{
    (void)comm;
    (void)devComm;
    return nccl_fail(ncclInvalidUsage,
                     "ncclDevCommDestroy: NCCL's device API has no counterpart in weft (no device communicator was "
                     "made)");
}
