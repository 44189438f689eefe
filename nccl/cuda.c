/* The few CUDA driver calls NCCL's API needs beside weft's own: the
 * current device, waiting for a stream, capture status, stream-ordered
 * copies and allocations. libcuda.so.1 is looked up only once the process
 * has loaded it (RTLD_NOLOAD, as weft itself does): a program without CUDA
 * runs on host memory, where copies are memcpy and streams are NULL.
 * Declared here rather than from cuda.h: the library builds without the
 * CUDA toolkit. */
#include "nccl_impl.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

typedef int CUresult_t;
typedef unsigned long long devptr_t;

static struct {
    CUresult_t (*ctx_get_current)(void **);
    CUresult_t (*ctx_get_device)(int *);
    CUresult_t (*stream_synchronize)(void *);
    CUresult_t (*stream_is_capturing)(void *, int *);
    CUresult_t (*memcpy_async)(devptr_t, devptr_t, size_t, void *);
    CUresult_t (*mem_alloc)(devptr_t *, size_t);
    CUresult_t (*mem_free)(devptr_t);
    CUresult_t (*mem_alloc_async)(devptr_t *, size_t, void *);
    CUresult_t (*mem_free_async)(devptr_t, void *);
    CUresult_t (*pointer_get_attribute)(void *, int, devptr_t);
    CUresult_t (*get_error_string)(CUresult_t, const char **);
} cu;

static _Atomic int state;  /* 0 not found (yet), 1 loaded, -1 loaded but unusable */
static _Atomic int probed; /* looked for it at least once */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_MEMORYTYPE_DEVICE             2
#define NOT_LOADED                       NCCL_CUDA_NOT_LOADED

/* Looks for the driver again if it was not there last time: at the calls
 * that start something (communicator creation, allocation), not on every
 * collective. */
int nccl_cuda_probe(void)
{
    int s = atomic_load_explicit(&state, memory_order_acquire);
    if (NCCL_LIKELY(s != 0)) return s > 0;
    pthread_mutex_lock(&load_lock);
    atomic_store(&probed, 1);
    if ((s = atomic_load(&state)) == 0) {
        void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (h) {
            struct {
                const char *name;
                void **fn;
            } syms[] = {
                {"cuCtxGetCurrent", (void **)&cu.ctx_get_current},
                {"cuCtxGetDevice", (void **)&cu.ctx_get_device},
                {"cuStreamSynchronize", (void **)&cu.stream_synchronize},
                {"cuStreamIsCapturing", (void **)&cu.stream_is_capturing},
                {"cuMemcpyAsync", (void **)&cu.memcpy_async},
                {"cuMemAlloc_v2", (void **)&cu.mem_alloc},
                {"cuMemFree_v2", (void **)&cu.mem_free},
                {"cuPointerGetAttribute", (void **)&cu.pointer_get_attribute},
                {"cuGetErrorString", (void **)&cu.get_error_string},
            };
            s = 1;
            for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
                if (!(*syms[i].fn = dlsym(h, syms[i].name))) {
                    nccl_log(NL_WARN, "libcuda.so.1 has no %s: device memory is not usable through weft's NCCL",
                             syms[i].name);
                    s = -1;
                }
            /* Stream-ordered allocation (CUDA 11.2 drivers on). */
            *(void **)&cu.mem_alloc_async = dlsym(h, "cuMemAllocAsync");
            *(void **)&cu.mem_free_async = dlsym(h, "cuMemFreeAsync");
            atomic_store(&state, s);
        }
    }
    pthread_mutex_unlock(&load_lock);
    return s > 0;
}

int nccl_cuda_loaded(void)
{
    int s = atomic_load_explicit(&state, memory_order_acquire);
    if (NCCL_LIKELY(s != 0 || atomic_load_explicit(&probed, memory_order_relaxed))) return s > 0;
    return nccl_cuda_probe();
}

const char *nccl_cuda_error(int r)
{
    const char *s = NULL;
    if (r == NOT_LOADED) return "the process has not loaded the CUDA driver (libcuda.so.1)";
    if (cu.get_error_string) cu.get_error_string(r, &s);
    return s ? s : "unknown CUDA error";
}

int nccl_cuda_current_device(int *device)
{
    void *ctx = NULL;
    *device = -1;
    if (!nccl_cuda_probe()) return 0;
    if (cu.ctx_get_current(&ctx) != 0 || !ctx) return 0;
    return cu.ctx_get_device(device);
}

int nccl_cuda_stream_sync(void *stream)
{
    if (!nccl_cuda_loaded()) return 0; /* without CUDA only the NULL stream exists, and it has no work */
    return cu.stream_synchronize(stream);
}

int nccl_cuda_capturing(void *stream, int *capturing)
{
    *capturing = 0;
    if (!nccl_cuda_loaded()) return 0;
    int status = 0;
    int r = cu.stream_is_capturing(stream, &status);
    *capturing = status != 0; /* CU_STREAM_CAPTURE_STATUS_NONE is 0 */
    return r;
}

int nccl_cuda_copy(void *dst, const void *src, size_t bytes, void *stream)
{
    if (bytes == 0 || dst == src) return 0;
    if (!nccl_cuda_loaded()) {
        memmove(dst, src, bytes);
        return 0;
    }
    return cu.memcpy_async((devptr_t)(uintptr_t)dst, (devptr_t)(uintptr_t)src, bytes, stream);
}

int nccl_cuda_alloc(void **ptr, size_t bytes)
{
    devptr_t p = 0;
    *ptr = NULL;
    if (!nccl_cuda_probe()) return NOT_LOADED;
    int r = cu.mem_alloc(&p, bytes);
    if (r == 0) *ptr = (void *)(uintptr_t)p;
    return r;
}

int nccl_cuda_free(void *ptr)
{
    if (!nccl_cuda_loaded()) return NOT_LOADED;
    return cu.mem_free((devptr_t)(uintptr_t)ptr);
}

int nccl_cuda_alloc_async(void **ptr, size_t bytes, void *stream)
{
    devptr_t p = 0;
    *ptr = NULL;
    if (!nccl_cuda_loaded()) return NOT_LOADED;
    int r = cu.mem_alloc_async ? cu.mem_alloc_async(&p, bytes, stream) : cu.mem_alloc(&p, bytes);
    if (r == 0) *ptr = (void *)(uintptr_t)p;
    return r;
}

int nccl_cuda_free_async(void *ptr, void *stream)
{
    if (!nccl_cuda_loaded()) return NOT_LOADED;
    if (cu.mem_free_async) return cu.mem_free_async((devptr_t)(uintptr_t)ptr, stream);
    int r = cu.stream_synchronize(stream); /* an old driver: free once the stream is past it */
    return r ? r : cu.mem_free((devptr_t)(uintptr_t)ptr);
}

int nccl_cuda_is_device(const void *ptr)
{
    if (!ptr || !nccl_cuda_loaded()) return 0;
    unsigned int type = 0;
    if (cu.pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (devptr_t)(uintptr_t)ptr) != 0) return 0;
    return type == CU_MEMORYTYPE_DEVICE;
}
