/* The CUDA driver, opened at run time (pt2pt/cuda.c loads it when the
 * process has loaded libcuda.so.1; weft never links it): the entry points
 * weft uses, shared by point-to-point (pt2pt/cuda.c) and the GPU
 * collectives (coll/cuda). Only with WEFT_HAVE_CUDA. */
#ifndef WEFT_CUDA_DRIVER_H
#define WEFT_CUDA_DRIVER_H

#ifdef WEFT_HAVE_CUDA
#include <cuda.h>

typedef struct weft_cu_driver {
    /* Required (pt2pt/cuda.c refuses a driver without them). */
    CUresult (*init)(unsigned);
    CUresult (*get_error_string)(CUresult, const char **);
    CUresult (*pointer_get_attributes)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
    CUresult (*ctx_push)(CUcontext);
    CUresult (*ctx_pop)(CUcontext *);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*stream_synchronize)(CUstream);
    CUresult (*event_create)(CUevent *, unsigned);
    CUresult (*event_destroy)(CUevent);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_synchronize)(CUevent);
    CUresult (*memcpy_async)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*mem_host_alloc)(void **, size_t, unsigned);
    CUresult (*mem_free_host)(void *);
    /* Optional (the GPU collectives; NULL when the driver lacks one:
     * coll/cuda then declines, saying which). */
    CUresult (*event_query)(CUevent);
    CUresult (*stream_wait_event)(CUstream, CUevent, unsigned);
    CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*memset_d8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*mem_host_get_device_pointer)(CUdeviceptr *, void *, unsigned);
    CUresult (*ipc_get_mem_handle)(CUipcMemHandle *, CUdeviceptr);
    CUresult (*ipc_open_mem_handle)(CUdeviceptr *, CUipcMemHandle, unsigned);
    CUresult (*ipc_close_mem_handle)(CUdeviceptr);
    CUresult (*module_load_data)(CUmodule *, const void *);
    CUresult (*module_unload)(CUmodule);
    CUresult (*module_get_function)(CUfunction *, CUmodule, const char *);
    CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
    CUresult (*ctx_get_current)(CUcontext *);
    CUresult (*ctx_get_device)(CUdevice *);
    CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*stream_create_with_priority)(CUstream *, unsigned, int);
    CUresult (*ctx_get_stream_priority_range)(int *, int *);
    CUresult (*func_get_attribute)(int *, CUfunction_attribute, CUfunction);
    CUresult (*mem_get_address_range)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*stream_get_ctx)(CUstream, CUcontext *);
    CUresult (*driver_get_version)(int *);
#if CUDA_VERSION >= 12000
    CUresult (*launch_kernel_ex)(const CUlaunchConfig *, CUfunction, void **, void **); /* CUDA 12 drivers */
#endif
} weft_cu_driver_t;

extern weft_cu_driver_t weft_cu;

/* The driver's text for r ("unknown CUDA error" without one). */
const char *weft_cu_text(CUresult r);
#endif

/* 1 when libcuda is loaded and usable in this process (loads the table on
 * first sight of it), 0 otherwise. */
int weft_cuda_possible(void);

/* A copy between any two buffers (device or host memory), done on return:
 * a collective schedule's local copy on device buffers (pt2pt/cuda.c). */
int weft_cuda_copy(void *dst, const void *src, size_t bytes);

#endif
