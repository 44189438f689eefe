/* Device memory for the benchmarks (the OSU-style harness, both backends,
 * and contrib/bench/cuda-floor) through the CUDA driver API, loaded at run
 * time with dlopen("libcuda.so.1"): the programs have no link-time CUDA
 * dependency, build without the toolkit and run (host buffers) where there
 * is no driver. Device pointers are returned as void *.
 *
 * Every function but cm_init returns 0 (or a pointer) on success and -1 (or
 * NULL) on failure, with the reason in cm_last_error(). One thread. */
#ifndef WEFT_CUDA_MEM_H
#define WEFT_CUDA_MEM_H

#include <stddef.h>

/* Loads libcuda.so.1, cuInit, and makes the primary context of device
 * (local_rank modulo the device count) current. 0 on success (again: a
 * no-op); -1 with a sentence in err (no driver, a stub driver, no device...). */
int cm_init(int local_rank, char *err, size_t errlen);
int cm_ready(void);
int cm_device(void);              /* the ordinal in use */
int cm_device_count(void);        /* devices visible */
const char *cm_device_name(void); /* "NVIDIA H100 80GB HBM3" */
int cm_driver_version(void);      /* 13000 for CUDA 13.0 */
const char *cm_last_error(void);

/* cuMemAlloc (managed: cuMemAllocManaged, attached globally) and cuMemFree. */
void *cm_alloc(size_t bytes, int managed);
void cm_free(void *dev);
/* Page-locked host memory: cuMemAllocHost and cuMemFreeHost. */
void *cm_host_alloc(size_t bytes);
void cm_host_free(void *host);
int cm_memset(void *dev, unsigned char value, size_t bytes);
/* Synchronous copies (cuMemcpyHtoD, DtoH, DtoD); a DtoD copy returns before
 * it completes (the driver's rule): cm_sync waits for it. */
int cm_htod(void *dev, const void *host, size_t bytes);
int cm_dtoh(void *host, const void *dev, size_t bytes);
int cm_dtod(void *dst, const void *src, size_t bytes);
int cm_sync(void); /* cuCtxSynchronize */

/* Streams (cuStreamCreate, cuStreamSynchronize, cuStreamDestroy), as void *.
 * nonblocking: CU_STREAM_NON_BLOCKING, no implicit ordering with the legacy
 * default stream (the synchronous copies above). */
void *cm_stream_create(int nonblocking);
void cm_stream_destroy(void *stream);
int cm_stream_sync(void *stream);
/* Copies queued on a stream (cuMemcpyHtoDAsync, DtoHAsync, DtoDAsync),
 * complete after cm_stream_sync; host memory should be pinned (cm_host_alloc). */
int cm_htod_async(void *dev, const void *host, size_t bytes, void *stream);
int cm_dtoh_async(void *host, const void *dev, size_t bytes, void *stream);
int cm_dtod_async(void *dst, const void *src, size_t bytes, void *stream);

/* CUDA IPC: cm_ipc_get writes the CM_IPC_HANDLE_BYTES-byte handle of a
 * cm_alloc'd buffer (cuIpcGetMemHandle); another process maps it with
 * cm_ipc_open (cuIpcOpenMemHandle, lazy peer access; the device pointer, or
 * NULL) and unmaps it with cm_ipc_close (cuIpcCloseMemHandle). Fails where
 * the driver or the host allows no IPC (e.g. some containers and sandboxes). */
#define CM_IPC_HANDLE_BYTES 64
int cm_ipc_get(void *handle, void *dev);
void *cm_ipc_open(const void *handle);
int cm_ipc_close(void *mapped);

#endif
