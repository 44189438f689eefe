/* See gpu.h. */
#include "gpu.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

static struct {
    CUresult (*init)(unsigned);
    CUresult (*device_get_count)(int *);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*htod)(CUdeviceptr, const void *, size_t);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);
    CUresult (*memset_d8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*error_string)(CUresult, const char **);
    CUresult (*ctx_synchronize)(void);
    CUresult (*stream_create)(void **, unsigned);
    CUresult (*stream_synchronize)(void *);
    CUresult (*stream_destroy)(void *);
    CUresult (*begin_capture)(void *, int);
    CUresult (*end_capture)(void *, void **);
    CUresult (*graph_instantiate)(void **, void *, unsigned long long);
    CUresult (*graph_launch)(void *, void *);
    CUresult (*graph_exec_destroy)(void *);
    CUresult (*graph_destroy)(void *);
    CUresult (*memset_d32_async)(CUdeviceptr, unsigned, size_t, void *);
    CUresult (*mem_host_alloc)(void **, size_t, unsigned);
    CUresult (*mem_host_get_device_pointer)(CUdeviceptr *, void *, unsigned);
    CUresult (*mem_free_host)(void *);
    CUresult (*stream_wait_value32)(void *, CUdeviceptr, unsigned, unsigned);
    CUresult (*stream_query)(void *);
} cu;

static const char *load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) return "libcuda.so.1 cannot be loaded (no NVIDIA driver)";
    struct {
        const char *name;
        void **fn;
    } syms[] = {
        {"cuInit", (void **)&cu.init},
        {"cuDeviceGetCount", (void **)&cu.device_get_count},
        {"cuDeviceGet", (void **)&cu.device_get},
        {"cuDevicePrimaryCtxRetain", (void **)&cu.primary_retain},
        {"cuCtxSetCurrent", (void **)&cu.ctx_set_current},
        {"cuMemAlloc_v2", (void **)&cu.mem_alloc},
        {"cuMemFree_v2", (void **)&cu.mem_free},
        {"cuMemcpyHtoD_v2", (void **)&cu.htod},
        {"cuMemcpyDtoH_v2", (void **)&cu.dtoh},
        {"cuMemsetD8_v2", (void **)&cu.memset_d8},
        {"cuGetErrorString", (void **)&cu.error_string},
        {"cuCtxSynchronize", (void **)&cu.ctx_synchronize},
        {"cuStreamCreate", (void **)&cu.stream_create},
        {"cuStreamSynchronize", (void **)&cu.stream_synchronize},
        {"cuStreamDestroy_v2", (void **)&cu.stream_destroy},
        {"cuStreamBeginCapture_v2", (void **)&cu.begin_capture},
        {"cuStreamEndCapture", (void **)&cu.end_capture},
        {"cuGraphInstantiateWithFlags", (void **)&cu.graph_instantiate},
        {"cuGraphLaunch", (void **)&cu.graph_launch},
        {"cuGraphExecDestroy", (void **)&cu.graph_exec_destroy},
        {"cuGraphDestroy", (void **)&cu.graph_destroy},
        {"cuMemsetD32Async", (void **)&cu.memset_d32_async},
        {"cuMemHostAlloc", (void **)&cu.mem_host_alloc},
        {"cuMemHostGetDevicePointer_v2", (void **)&cu.mem_host_get_device_pointer},
        {"cuMemFreeHost", (void **)&cu.mem_free_host},
        {"cuStreamWaitValue32_v2", (void **)&cu.stream_wait_value32},
        {"cuStreamQuery", (void **)&cu.stream_query},
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++)
        if (!(*syms[i].fn = dlsym(h, syms[i].name))) return "libcuda.so.1 lacks a driver entry point";
    return NULL;
}

int gpu_available(char *why, size_t len)
{
    int fds[2];
    if (pipe(fds)) {
        snprintf(why, len, "pipe failed");
        return 0;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        char msg[200] = "";
        const char *err = load();
        int n = 0;
        if (err)
            snprintf(msg, sizeof(msg), "%s", err);
        else if (cu.init(0) != 0)
            snprintf(msg, sizeof(msg), "cuInit failed (no usable GPU)");
        else if (cu.device_get_count(&n) != 0 || n < 1)
            snprintf(msg, sizeof(msg), "the driver sees no device");
        if (write(fds[1], msg, strlen(msg)) < 0) _exit(2);
        _exit(msg[0] ? 1 : 0);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], why, len - 1);
    why[got > 0 ? got : 0] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 1;
    if (!why[0]) snprintf(why, len, "the CUDA probe crashed");
    return 0;
}

int gpu_open(void)
{
    CUdevice dev;
    CUcontext ctx;
    int n = 0;
    const char *lr = getenv("LOCAL_RANK");
    if (load() || cu.init(0) || cu.device_get_count(&n) || n < 1) return -1;
    /* One GPU per local rank where there are several (the harness sets LOCAL_RANK), else all share one. */
    if (cu.device_get(&dev, (lr ? atoi(lr) : 0) % n) || cu.primary_retain(&ctx, dev) || cu.ctx_set_current(ctx))
        return -1;
    return 0;
}

void *gpu_alloc(size_t bytes)
{
    CUdeviceptr p = 0;
    return cu.mem_alloc(&p, bytes ? bytes : 1) ? NULL : (void *)(uintptr_t)p;
}

void gpu_free(void *p)
{
    if (p) cu.mem_free((CUdeviceptr)(uintptr_t)p);
}

/* A copy from pageable memory may still be in flight when cuMemcpyHtoD
 * returns: wait, so the buffer is what the test says it is. */
int gpu_upload(void *dev, const void *host, size_t bytes)
{
    return bytes ? cu.htod((CUdeviceptr)(uintptr_t)dev, host, bytes) || cu.ctx_synchronize() : 0;
}

int gpu_download(void *host, const void *dev, size_t bytes)
{
    return bytes ? cu.dtoh(host, (CUdeviceptr)(uintptr_t)dev, bytes) : 0;
}

int gpu_memset(void *dev, unsigned char v, size_t bytes)
{
    return bytes ? cu.memset_d8((CUdeviceptr)(uintptr_t)dev, v, bytes) || cu.ctx_synchronize() : 0;
}

void *gpu_stream(void)
{
    void *s = NULL;
    return cu.stream_create(&s, 1 /* CU_STREAM_NON_BLOCKING */) ? NULL : s;
}

int gpu_memset32_async(void *dev, unsigned v, size_t n, void *stream)
{
    return n && cu.memset_d32_async((CUdeviceptr)(uintptr_t)dev, v, n, stream) ? -1 : 0;
}

volatile unsigned *gpu_hold(void *stream)
{
    void *p = NULL;
    CUdeviceptr d = 0;
    if (cu.mem_host_alloc(&p, 64, 0x01 | 0x02 /* PORTABLE | DEVICEMAP */)) return NULL;
    *(volatile unsigned *)p = 0;
    if (cu.mem_host_get_device_pointer(&d, p, 0) || cu.stream_wait_value32(stream, d, 1, 0 /* GEQ */)) {
        cu.mem_free_host(p);
        return NULL;
    }
    return p;
}

void gpu_hold_release(volatile unsigned *word)
{
    __atomic_store_n(word, 1u, __ATOMIC_RELEASE);
}

void gpu_hold_free(volatile unsigned *word)
{
    cu.mem_free_host((void *)word);
}

int gpu_stream_busy(void *stream)
{
    CUresult r = cu.stream_query(stream);
    return r == 600 /* CUDA_ERROR_NOT_READY */ ? 1 : r ? -1 : 0;
}

int gpu_stream_sync(void *stream)
{
    return cu.stream_synchronize(stream) ? -1 : 0;
}

void gpu_stream_free(void *stream)
{
    cu.stream_destroy(stream);
}

int gpu_capture_begin(void *stream)
{
    return cu.begin_capture(stream, 2 /* CU_STREAM_CAPTURE_MODE_RELAXED */) ? -1 : 0;
}

void *gpu_capture_end(void *stream)
{
    void *graph = NULL, *exec = NULL;
    if (cu.end_capture(stream, &graph) || !graph) return NULL;
    CUresult r = cu.graph_instantiate(&exec, graph, 0);
    cu.graph_destroy(graph);
    return r ? NULL : exec;
}

int gpu_graph_launch(void *exec, void *stream)
{
    return cu.graph_launch(exec, stream) ? -1 : 0;
}

void gpu_graph_free(void *exec)
{
    cu.graph_exec_destroy(exec);
}

weft_comm_t gpu_weft_start(void)
{
    if (gpu_open()) {
        fprintf(stderr, "no CUDA context on device LOCAL_RANK %% count\n");
        exit(1);
    }
    if (weft_init(NULL, NULL)) {
        fprintf(stderr, "weft_init: %s\n", weft_last_error());
        exit(1);
    }
    return weft_comm_world();
}

const char *gpu_log_level_env(void)
{
    static char level[64];
    snprintf(level, sizeof(level), "WEFT_LOG_LEVEL=%s",
             getenv("WEFT_TEST_LOG_LEVEL") ? getenv("WEFT_TEST_LOG_LEVEL") : "error");
    return level;
}
