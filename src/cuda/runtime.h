/* The device runtime, at the bottom of the house with the rest of src/:
 * the CUDA driver, opened at run time when the process has loaded
 * libcuda.so.1 (weft never links it), the memory type of a buffer, a copy
 * stream per context, and host-driven calls in a stream's order. Used by
 * point-to-point (pt2pt/cuda.c: UCX's paths and staging), the GPU
 * collectives (coll/cuda) and the schedules. The driver table only with
 * WEFT_HAVE_CUDA. */
#ifndef WEFT_CUDA_RUNTIME_H
#define WEFT_CUDA_RUNTIME_H

#include "src/weft_internal.h"

#include <stddef.h>

#ifdef WEFT_HAVE_CUDA
#include <cuda.h>

typedef struct weft_cu_driver {
    /* Required (the runtime refuses a driver without them). */
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
    CUresult (*stream_wait_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned);  /* _v2: CUDA 12 drivers */
    CUresult (*stream_write_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned); /* _v2 */
#if CUDA_VERSION >= 12000
    CUresult (*launch_kernel_ex)(const CUlaunchConfig *, CUfunction, void **, void **); /* CUDA 12 drivers */
#endif
} weft_cu_driver_t;

extern weft_cu_driver_t weft_cu;

/* The driver's text for r ("unknown CUDA error" without one). */
const char *weft_cu_text(CUresult r);

/* The stream weft's own copies in ctx run on (blocking: after the work
 * queued on the legacy default stream); NULL with *r set when none could
 * be made. */
CUstream weft_cuda_copy_stream(CUcontext ctx, CUresult *r);
#endif
/* Destroys the copy streams and frees the pinned pool (at finalize). */
void weft_cuda_copy_streams_release(void);

/* Pinned host memory for the host copies of device buffers (coll/cuda's
 * staged algorithms, the steps between nodes): blocks of power-of-two
 * sizes from 64 KiB, allocated on first use (portable: any context's copies
 * use them at full speed, where pageable memory goes through the driver's
 * own staging) and kept for reuse. NULL where none can be had (no driver,
 * no current context, the allocation failed): the caller uses pageable
 * memory. *cap: the block's size, for weft_cuda_pinned_put. */
void *weft_cuda_pinned_get(size_t bytes, size_t *cap);
void weft_cuda_pinned_put(void *p, size_t cap);
/* Frees a block outside the pool (after weft_cuda_copy_streams_release). */
void weft_cuda_pinned_free(void *p);
/* 0 where allocating or freeing pinned memory could wait for the device,
 * and so for a staged stream-ordered call that only the progress thread
 * can finish: on that thread, or while a stream waits for such a call. */
int weft_cuda_pinned_may_alloc(void);

/* 1 when libcuda is loaded and usable in this process (loads the table on
 * first sight of it), 0 otherwise. */
int weft_cuda_possible(void);

/* The progress thread's rule: it makes the application's context current
 * (the one current on the application's thread at init, noted by
 * weft_cuda_thread_note_context there, else the context of the first device
 * buffer weft classified) before it runs anything, and never creates one.
 * weft_cuda_thread_ready, on the thread, under the API mutex: 1 when it may
 * run (no driver, no device buffer yet, or the context is current), 0 when
 * device buffers are in play and no context is known. */
void weft_cuda_thread_note_context(void);
int weft_cuda_thread_ready(void);

/* libcuda in this process: 0 not loaded (yet), 1 loaded and usable, -1
 * loaded but unusable. */
int weft_cuda_driver_state(void);

/* *mem: WEFT_MEM_CUDA for device memory (not managed), else WEFT_MEM_HOST;
 * *managed (where not NULL): 1 for managed memory (host to weft).
 * Errors (WEFT_ERR_ARG naming `fn` and `what`): a range past the end of its
 * device allocation, an address neither readable host memory nor device
 * memory the driver knows; WEFT_ERR_UNSUPPORTED: device memory in a build
 * without CUDA. */
int weft_cuda_memtype(const void *buf, size_t bytes, const char *fn, const char *what, weft_memtype_t *mem,
                      int *managed);

/* A copy between any two buffers (device or host memory), done on return:
 * a collective schedule's local copy on device buffers. */
int weft_cuda_copy(void *dst, const void *src, size_t bytes);

/* A copy that runs while the caller goes on: queued on the copy stream of
 * the device buffer's context with an event behind it (between host
 * buffers, or where the driver has no event queries, done on return).
 * weft_cuda_copy_test: 1 once it is done (and forgotten), 0 not yet, or an
 * error; weft_cuda_copy_end waits for it and forgets it (a schedule's end,
 * however it ends: the host memory it writes or reads goes back to the
 * pool). */
typedef struct {
    void *ctx, *ev; /* CUcontext, CUevent (NULL: nothing pending) */
} weft_cuda_copy_t;
int weft_cuda_copy_start(void *dst, const void *src, size_t bytes, weft_cuda_copy_t *c);
int weft_cuda_copy_test(weft_cuda_copy_t *c);
void weft_cuda_copy_end(weft_cuda_copy_t *c);

/* Synchronises a CUstream (NULL: the legacy default stream) for a
 * stream-ordered call on host buffers (`what` names the call in errors);
 * without a loaded driver only NULL is accepted (there is no work to wait
 * for). */
int weft_cuda_stream_sync(void *stream, const char *what);

/* A stream-ordered call whose algorithm runs on the host (coll.c: device
 * buffers on a communicator that spans nodes, or that no GPU kernel takes)
 * goes one of two ways.
 *
 * Staged on its stream, where the progress thread runs and the driver has
 * stream memory operations: weft_cuda_gate_reserve takes a word of pinned
 * host memory, and weft_cuda_gate_stage queues on the stream, behind the
 * work already there: the copies of the device input into pinned host
 * memory, the gate's event, a wait on the word, the copy of the host
 * result into the device buffer, and the word's passing. The call returns
 * at once; the host collective (on host memory: no driver call, so nothing
 * it waits for can sit behind the held stream in a hardware queue the
 * stream shares) starts when the event fires, and the gate's release at
 * its end sets the word: the stream goes on. Whoever blocks on the stream
 * (torch.cuda.synchronize) waits for the thread; a deadline or a lost peer
 * ends the collective with an error and releases the stream all the same.
 *
 * Otherwise weft_cuda_gate_open records the event, the schedule's first
 * step polls it, and the call returns at the schedule's end (nobody would
 * drive it meanwhile).
 *
 * A stream being captured into a CUDA graph is refused either way: nothing
 * on the host is replayed. */
typedef struct weft_cuda_gate {
    void *ctx, *event;
    void *word;      /* weft_cuda_gate_reserve's, else NULL */
    int failed;      /* weft_cuda_gate_stage: the copies out could not be queued (a weft error code) */
    double deadline; /* set before weft_cuda_gate_stage: when the call must end (weft_wtime; 0: never). A
                      * staged stream still held 2 s after it is let go by a watchdog thread of weft's. */
} weft_cuda_gate_t;
int weft_cuda_gate_open(weft_cuda_gate_t *g, void *stream, const void *buf, const char *what);
/* 1 when the stream's work before the call is done, 0 not yet, or an error. */
int weft_cuda_gate_ready(weft_cuda_gate_t *g);
/* 1 with a word taken for g (zeroed first); 0 where the call cannot be
 * staged on `stream` (the legacy default stream, which every blocking
 * stream's later work would wait behind; no stream memory operations in
 * the driver; every word in use): it then takes weft_cuda_gate_open's way. */
int weft_cuda_gate_reserve(weft_cuda_gate_t *g, void *stream);
/* A copy weft_cuda_gate_stage queues: bytes from src to dst (0: none). */
typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} weft_cuda_span_t;
/* After weft_cuda_gate_reserve: queues the call on `stream` (above). buf:
 * one of the call's device buffers (its context), NULL for none. blocks[]
 * (at most 2, pinned, from weft_cuda_pinned_get, caps[] their sizes) are
 * the host copies; they are the gate's from here, returned to the pool once
 * the stream has passed its copies out. Errors (a stream being captured:
 * WEFT_ERR_UNSUPPORTED with the reason; the driver refused to queue a
 * step): the word is free again once the stream passes what was queued;
 * WEFT_ERR_UNSUPPORTED with no error set: the driver cannot make a stream
 * wait on host memory, the caller takes weft_cuda_gate_open's way. A copy
 * out that cannot be queued once the stream waits sets g->failed (the call
 * runs, and fails at its end). */
int weft_cuda_gate_stage(weft_cuda_gate_t *g, void *stream, const void *buf, weft_cuda_span_t in, weft_cuda_span_t out,
                         void *const blocks[], const size_t caps[], int nblocks, const char *what);
/* Frees the gate's event and lets a staged stream go on; a word reserved
 * but never staged is free again (a gate never opened: nothing to do).
 * keep_blocks: messages of a failed collective may still read or write the
 * call's host copies: they never go back to the pool. */
void weft_cuda_gate_release(weft_cuda_gate_t *g, int keep_blocks);
/* 1 when the watchdog let a staged stream go before its call ended (its
 * deadline passed while the progress thread was held up). */
int weft_cuda_gate_let_go(const weft_cuda_gate_t *g);

#endif
