/* Device memory through the CUDA driver API, loaded at run time (see
 * cuda_mem.h). Where the toolkit's cuda.h is on the include path (weft's
 * configure found CUDA: CUDA_CFLAGS), its types are used and every function
 * pointer below is checked against the header's prototype at compile time;
 * elsewhere the few types are declared here (the driver ABI: 64-bit device
 * pointers, int results). Versioned entry points are looked up by their
 * exported names (cuMemAlloc is cuMemAlloc_v2 since CUDA 3.2): the
 * unversioned symbols are the legacy 32-bit ones. */
#include "cuda_mem.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<cuda.h>)
#include <cuda.h>
#define CM_HAVE_CUDA_H 1
#endif
#endif
#ifndef CM_HAVE_CUDA_H
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;
#define CU_IPC_HANDLE_SIZE 64
typedef struct CUipcMemHandle_st {
    char reserved[CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;
#define CUDA_SUCCESS                       0
#define CU_MEM_ATTACH_GLOBAL               0x1
#define CU_STREAM_NON_BLOCKING             0x1
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1
#endif
_Static_assert(CU_IPC_HANDLE_SIZE == CM_IPC_HANDLE_BYTES, "CUipcMemHandle size");

static struct {
    void *lib;
    int ready, device, count, version;
    char name[256];
    CUresult (*Init)(unsigned int);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxSynchronize)(void);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemAllocManaged)(CUdeviceptr *, size_t, unsigned int);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemAllocHost)(void **, size_t);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*StreamCreate)(CUstream *, unsigned int);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    /* optional (NULL where the driver lacks them: cm_ipc_* fail) */
    CUresult (*IpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
    CUresult (*IpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned int);
    CUresult (*IpcCloseMemHandle)(CUdeviceptr);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*GetErrorString)(CUresult, const char **);
} cu;

#ifdef CM_HAVE_CUDA_H
/* cuda.h maps the names to the _v2 entry points looked up below. */
#define CM_SAME(field, fn)                                                                                             \
    _Static_assert(__builtin_types_compatible_p(__typeof__(cu.field), __typeof__(&fn)), #fn ": prototype differs")
CM_SAME(Init, cuInit);
CM_SAME(DriverGetVersion, cuDriverGetVersion);
CM_SAME(DeviceGetCount, cuDeviceGetCount);
CM_SAME(DeviceGet, cuDeviceGet);
CM_SAME(DeviceGetName, cuDeviceGetName);
CM_SAME(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
CM_SAME(CtxSetCurrent, cuCtxSetCurrent);
CM_SAME(CtxSynchronize, cuCtxSynchronize);
CM_SAME(MemAlloc, cuMemAlloc_v2);
CM_SAME(MemAllocManaged, cuMemAllocManaged);
CM_SAME(MemFree, cuMemFree_v2);
CM_SAME(MemAllocHost, cuMemAllocHost_v2);
CM_SAME(MemFreeHost, cuMemFreeHost);
CM_SAME(MemsetD8, cuMemsetD8_v2);
CM_SAME(MemcpyHtoD, cuMemcpyHtoD_v2);
CM_SAME(MemcpyDtoH, cuMemcpyDtoH_v2);
CM_SAME(MemcpyDtoD, cuMemcpyDtoD_v2);
CM_SAME(StreamCreate, cuStreamCreate);
CM_SAME(StreamDestroy, cuStreamDestroy_v2);
CM_SAME(StreamSynchronize, cuStreamSynchronize);
CM_SAME(MemcpyHtoDAsync, cuMemcpyHtoDAsync_v2);
CM_SAME(MemcpyDtoHAsync, cuMemcpyDtoHAsync_v2);
CM_SAME(MemcpyDtoDAsync, cuMemcpyDtoDAsync_v2);
CM_SAME(IpcGetMemHandle, cuIpcGetMemHandle);
CM_SAME(IpcOpenMemHandle, cuIpcOpenMemHandle_v2);
CM_SAME(IpcCloseMemHandle, cuIpcCloseMemHandle);
CM_SAME(GetErrorName, cuGetErrorName);
CM_SAME(GetErrorString, cuGetErrorString);
#endif

static char last_error[512];

static void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
}

const char *cm_last_error(void)
{
    return last_error;
}

/* "cuMemAlloc(4096 B) failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory" */
static int failed(CUresult rc, const char *what, size_t bytes)
{
    const char *name = NULL, *text = NULL;
    if (cu.GetErrorName) cu.GetErrorName(rc, &name);
    if (cu.GetErrorString) cu.GetErrorString(rc, &text);
    char size[48] = "";
    if (bytes != (size_t)-1) snprintf(size, sizeof(size), "%zu B", bytes);
    set_error("%s(%s) failed: %s (%d)%s%s", what, size, name ? name : "CUDA error", (int)rc, text ? ": " : "",
              text ? text : "");
    return -1;
}

static CUdeviceptr dptr(const void *p)
{
    return (CUdeviceptr)(uintptr_t)p;
}

int cm_ready(void)
{
    return cu.ready;
}
int cm_device(void)
{
    return cu.device;
}
int cm_device_count(void)
{
    return cu.count;
}
const char *cm_device_name(void)
{
    return cu.name;
}
int cm_driver_version(void)
{
    return cu.version;
}

int cm_init(int local_rank, char *err, size_t errlen)
{
    if (cu.ready) return 0;
    if (!cu.lib) {
        dlerror();
        cu.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!cu.lib) {
            const char *why = dlerror();
            set_error("the CUDA driver library libcuda.so.1 cannot be loaded (%s): no NVIDIA driver on this host",
                      why ? why : "dlopen failed");
            goto fail;
        }
        static const struct {
            const char *name, *alt; /* alt: an older name of the same entry point */
            size_t offset;
            int optional;
        } syms[] = {
#define SYM(field, name) {name, NULL, offsetof(__typeof__(cu), field), 0}
            SYM(Init, "cuInit"),
            SYM(DriverGetVersion, "cuDriverGetVersion"),
            SYM(DeviceGetCount, "cuDeviceGetCount"),
            SYM(DeviceGet, "cuDeviceGet"),
            SYM(DeviceGetName, "cuDeviceGetName"),
            SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
            SYM(CtxSetCurrent, "cuCtxSetCurrent"),
            SYM(CtxSynchronize, "cuCtxSynchronize"),
            SYM(MemAlloc, "cuMemAlloc_v2"),
            SYM(MemAllocManaged, "cuMemAllocManaged"),
            SYM(MemFree, "cuMemFree_v2"),
            SYM(MemAllocHost, "cuMemAllocHost_v2"),
            SYM(MemFreeHost, "cuMemFreeHost"),
            SYM(MemsetD8, "cuMemsetD8_v2"),
            SYM(MemcpyHtoD, "cuMemcpyHtoD_v2"),
            SYM(MemcpyDtoH, "cuMemcpyDtoH_v2"),
            SYM(MemcpyDtoD, "cuMemcpyDtoD_v2"),
            SYM(StreamCreate, "cuStreamCreate"),
            SYM(StreamDestroy, "cuStreamDestroy_v2"),
            SYM(StreamSynchronize, "cuStreamSynchronize"),
            SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
            SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
            SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
/* Optional (NULL where missing); cuIpcOpenMemHandle_v2 since CUDA 11, the same prototype. */
#define OPT(field, name, alt_name) {name, alt_name, offsetof(__typeof__(cu), field), 1}
            OPT(IpcGetMemHandle, "cuIpcGetMemHandle", NULL),
            OPT(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle"),
            OPT(IpcCloseMemHandle, "cuIpcCloseMemHandle", NULL),
            SYM(GetErrorName, "cuGetErrorName"),
            SYM(GetErrorString, "cuGetErrorString"),
#undef SYM
#undef OPT
        };
        for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
            void *f = dlsym(cu.lib, syms[i].name);
            if (!f && syms[i].alt) f = dlsym(cu.lib, syms[i].alt);
            if (!f && !syms[i].optional) {
                set_error("libcuda.so.1 has no %s (a driver older than CUDA 8?)", syms[i].name);
                dlclose(cu.lib);
                cu.lib = NULL;
                goto fail;
            }
            memcpy((char *)&cu + syms[i].offset, &f, sizeof(f));
        }
    }
    CUresult rc = cu.Init(0);
    if (rc != CUDA_SUCCESS) {
        failed(rc, "cuInit", (size_t)-1);
        size_t n = strlen(last_error);
        /* 100: CUDA_ERROR_NO_DEVICE, 34: CUDA_ERROR_STUB_LIBRARY (the toolkit's stub, not a driver) */
        snprintf(last_error + n, sizeof(last_error) - n, "%s",
                 rc == 100  ? ": no CUDA device on this host (or CUDA_VISIBLE_DEVICES hides them all)"
                 : rc == 34 ? ": libcuda.so.1 is the toolkit's stub, not an NVIDIA driver"
                            : "");
        goto fail;
    }
    cu.DriverGetVersion(&cu.version);
    if ((rc = cu.DeviceGetCount(&cu.count)) != CUDA_SUCCESS) {
        failed(rc, "cuDeviceGetCount", (size_t)-1);
        goto fail;
    }
    if (cu.count < 1) {
        set_error("no CUDA device visible (cuDeviceGetCount = 0)");
        goto fail;
    }
    cu.device = (local_rank < 0 ? 0 : local_rank) % cu.count;
    CUdevice dev;
    CUcontext ctx;
    if ((rc = cu.DeviceGet(&dev, cu.device)) != CUDA_SUCCESS) {
        failed(rc, "cuDeviceGet", (size_t)-1);
        goto fail;
    }
    if (cu.DeviceGetName(cu.name, (int)sizeof(cu.name), dev) != CUDA_SUCCESS) snprintf(cu.name, sizeof(cu.name), "?");
    if ((rc = cu.DevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS) {
        failed(rc, "cuDevicePrimaryCtxRetain", (size_t)-1);
        goto fail;
    }
    if ((rc = cu.CtxSetCurrent(ctx)) != CUDA_SUCCESS) {
        failed(rc, "cuCtxSetCurrent", (size_t)-1);
        goto fail;
    }
    cu.ready = 1;
    return 0;
fail:
    if (err && errlen) snprintf(err, errlen, "%s", last_error);
    return -1;
}

static int not_ready(void)
{
    set_error("CUDA is not initialized (cm_init)");
    return -1;
}

void *cm_alloc(size_t bytes, int managed)
{
    if (!cu.ready) return not_ready(), NULL;
    CUdeviceptr p = 0;
    CUresult rc = managed ? cu.MemAllocManaged(&p, bytes, CU_MEM_ATTACH_GLOBAL) : cu.MemAlloc(&p, bytes);
    if (rc != CUDA_SUCCESS) return failed(rc, managed ? "cuMemAllocManaged" : "cuMemAlloc", bytes), NULL;
    return (void *)(uintptr_t)p;
}

void cm_free(void *dev)
{
    if (cu.ready && dev) cu.MemFree(dptr(dev));
}

void *cm_host_alloc(size_t bytes)
{
    if (!cu.ready) return not_ready(), NULL;
    void *p = NULL;
    CUresult rc = cu.MemAllocHost(&p, bytes);
    if (rc != CUDA_SUCCESS) return failed(rc, "cuMemAllocHost", bytes), NULL;
    return p;
}

void cm_host_free(void *host)
{
    if (cu.ready && host) cu.MemFreeHost(host);
}

int cm_memset(void *dev, unsigned char value, size_t bytes)
{
    if (!cu.ready) return not_ready();
    CUresult rc = bytes ? cu.MemsetD8(dptr(dev), value, bytes) : CUDA_SUCCESS;
    return rc == CUDA_SUCCESS ? 0 : failed(rc, "cuMemsetD8", bytes);
}

int cm_htod(void *dev, const void *host, size_t bytes)
{
    if (!cu.ready) return not_ready();
    CUresult rc = bytes ? cu.MemcpyHtoD(dptr(dev), host, bytes) : CUDA_SUCCESS;
    return rc == CUDA_SUCCESS ? 0 : failed(rc, "cuMemcpyHtoD", bytes);
}

int cm_dtoh(void *host, const void *dev, size_t bytes)
{
    if (!cu.ready) return not_ready();
    CUresult rc = bytes ? cu.MemcpyDtoH(host, dptr(dev), bytes) : CUDA_SUCCESS;
    return rc == CUDA_SUCCESS ? 0 : failed(rc, "cuMemcpyDtoH", bytes);
}

int cm_dtod(void *dst, const void *src, size_t bytes)
{
    if (!cu.ready) return not_ready();
    CUresult rc = bytes ? cu.MemcpyDtoD(dptr(dst), dptr(src), bytes) : CUDA_SUCCESS;
    return rc == CUDA_SUCCESS ? 0 : failed(rc, "cuMemcpyDtoD", bytes);
}

int cm_sync(void)
{
    if (!cu.ready) return not_ready();
    CUresult rc = cu.CtxSynchronize();
    return rc == CUDA_SUCCESS ? 0 : failed(rc, "cuCtxSynchronize", (size_t)-1);
}

void *cm_stream_create(int nonblocking)
{
    if (!cu.ready) return not_ready(), NULL;
    CUstream s = NULL;
    CUresult rc = cu.StreamCreate(&s, nonblocking ? CU_STREAM_NON_BLOCKING : 0);
    if (rc != CUDA_SUCCESS) return failed(rc, "cuStreamCreate", (size_t)-1), NULL;
    return s;
}

void cm_stream_destroy(void *stream)
{
    if (cu.ready && stream) cu.StreamDestroy((CUstream)stream);
}

int cm_stream_sync(void *stream)
{
    if (!cu.ready) return not_ready();
    CUresult rc = cu.StreamSynchronize((CUstream)stream);
    return rc == CUDA_SUCCESS ? 0 : failed(rc, "cuStreamSynchronize", (size_t)-1);
}

int cm_htod_async(void *dev, const void *host, size_t bytes, void *stream)
{
    if (!cu.ready) return not_ready();
    CUresult rc = bytes ? cu.MemcpyHtoDAsync(dptr(dev), host, bytes, (CUstream)stream) : CUDA_SUCCESS;
    return rc == CUDA_SUCCESS ? 0 : failed(rc, "cuMemcpyHtoDAsync", bytes);
}

int cm_dtoh_async(void *host, const void *dev, size_t bytes, void *stream)
{
    if (!cu.ready) return not_ready();
    CUresult rc = bytes ? cu.MemcpyDtoHAsync(host, dptr(dev), bytes, (CUstream)stream) : CUDA_SUCCESS;
    return rc == CUDA_SUCCESS ? 0 : failed(rc, "cuMemcpyDtoHAsync", bytes);
}

int cm_dtod_async(void *dst, const void *src, size_t bytes, void *stream)
{
    if (!cu.ready) return not_ready();
    CUresult rc = bytes ? cu.MemcpyDtoDAsync(dptr(dst), dptr(src), bytes, (CUstream)stream) : CUDA_SUCCESS;
    return rc == CUDA_SUCCESS ? 0 : failed(rc, "cuMemcpyDtoDAsync", bytes);
}

static int no_ipc(const char *what)
{
    set_error("libcuda.so.1 has no %s: this driver offers no CUDA IPC", what);
    return -1;
}

int cm_ipc_get(void *handle, void *dev)
{
    if (!cu.ready) return not_ready();
    if (!cu.IpcGetMemHandle) return no_ipc("cuIpcGetMemHandle");
    CUipcMemHandle h;
    CUresult rc = cu.IpcGetMemHandle(&h, dptr(dev));
    if (rc != CUDA_SUCCESS) return failed(rc, "cuIpcGetMemHandle", (size_t)-1);
    memcpy(handle, &h, sizeof(h));
    return 0;
}

void *cm_ipc_open(const void *handle)
{
    if (!cu.ready) return not_ready(), NULL;
    if (!cu.IpcOpenMemHandle) return no_ipc("cuIpcOpenMemHandle"), NULL;
    CUipcMemHandle h;
    memcpy(&h, handle, sizeof(h));
    CUdeviceptr p = 0;
    CUresult rc = cu.IpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (rc != CUDA_SUCCESS) return failed(rc, "cuIpcOpenMemHandle", (size_t)-1), NULL;
    return (void *)(uintptr_t)p;
}

int cm_ipc_close(void *mapped)
{
    if (!cu.ready) return not_ready();
    if (!cu.IpcCloseMemHandle) return no_ipc("cuIpcCloseMemHandle");
    CUresult rc = cu.IpcCloseMemHandle(dptr(mapped));
    return rc == CUDA_SUCCESS ? 0 : failed(rc, "cuIpcCloseMemHandle", (size_t)-1);
}
