/* Device buffers in point-to-point (pt2pt/cuda.c).
 *
 * The memory type of every buffer is detected from the CUDA driver's
 * pointer attributes (libcuda is opened at run time, never linked: a
 * process that has not loaded it holds no device memory, and costs one
 * loader-counter read per message). Device buffers then go one of two
 * ways, chosen once at init (WEFT_CUDA):
 *   ucx     UCX carries CUDA memory (cuda_copy, cuda_ipc): the buffer goes
 *           to UCX with its memory type stated, no weft copy;
 *   staged  UCX does not: the message is one UCX message of a generic
 *           datatype whose pack / unpack callbacks move the bytes through
 *           pinned host chunks, the copy of chunk k + 1 in flight while
 *           chunk k is on the wire. Tag matching, ANY_SOURCE, truncation,
 *           probe and cancel stay UCX's, as for host memory. Collectives'
 *           larger messages, whose peers and lengths are exact, go as a
 *           pipeline of host messages instead (pipe.c).
 * A receive completes when its data is in the device buffer (weft's copy
 * stream synchronised). A sender must have synchronised the stream that
 * produced its buffer before posting, as with CUDA-aware MPI. */
#ifndef WEFT_PT2PT_CUDA_H
#define WEFT_PT2PT_CUDA_H

#include "src/weft_internal.h"

#include <ucp/api/ucp.h>

/* How a buffer travels: host (as given), UCX's CUDA transports, staged;
 * managed memory as given too, its memory type left to UCX to find. */
enum { WEFT_CUDA_HOST = 0, WEFT_CUDA_UCX = 1, WEFT_CUDA_STAGED = 2, WEFT_CUDA_MANAGED = 3 };

/* The device runtime (src/cuda/runtime.h): weft_cuda_possible(), the
 * fast test every message pays, the driver and memory types. */
#include "src/cuda/runtime.h"

/* Classifies [buf, buf + bytes): *mem (weft_cuda_memtype) and *path
 * (WEFT_CUDA_*). Errors (WEFT_ERR_UNSUPPORTED: device memory and no
 * way to move it; WEFT_ERR_ARG: a range past its allocation, or an address
 * neither host nor device memory knows) name `fn` and `what`. */
int weft_cuda_classify(const void *buf, size_t bytes, const char *fn, const char *what, weft_memtype_t *mem, int *path);

/* At UCX init: notes whether the context carries CUDA memory and creates
 * the staging datatype. At finalize: frees the pinned chunks and streams. */
int weft_cuda_init(ucp_context_h ctx);
void weft_cuda_finalize(void);

/* 1 when the UCX context carries CUDA memory and a CUDA context is current
 * on the calling thread (weft_p2p_init's test for making its first
 * endpoint at once). */
int weft_cuda_ucx_device_now(void);
/* 1 when point-to-point hands large device buffers to UCX itself: the UCX
 * context carries CUDA memory (cuda_ipc, GPUDirect RDMA) and WEFT_CUDA is
 * auto or ucx; a property of the UCX in use and the configuration, alike on
 * every rank that runs them alike (rules.conf's xport=cuda). */
int weft_cuda_ucx_carries(void);
/* 1 when point-to-point moves device buffers at all (WEFT_CUDA is not
 * off): through UCX where it carries them, else through pinned chunks. */
int weft_cuda_p2p_moves(void);

/* Staged path: a staging state for a device buffer, handed to UCX as the
 * buffer of a message of weft_cuda_stage_dt (count: bytes). */
typedef struct weft_cuda_stage weft_cuda_stage_t;
extern ucp_datatype_t weft_cuda_stage_dt;
weft_cuda_stage_t *weft_cuda_stage_new(void *dev, size_t bytes, int send);
/* After UCX completed the message: waits for the last copies; 0, or the
 * CUDA failure as a weft error (naming `what`). */
int weft_cuda_stage_end(weft_cuda_stage_t *st, const char *what);
void weft_cuda_stage_free(weft_cuda_stage_t *st);

/* Collectives' device messages on the staged path, from
 * WEFT_CUDA_STAGE_PIPE bytes (pipe.c): an envelope on the message's own
 * tag (its length and a channel), then the data in pinned chunks, each a
 * contiguous host message on the channel's tag, which UCX moves by its
 * zero-copy paths while the next chunk is copied. Both sides must decide
 * alike: a collective posts its receives with the exact length, and the
 * knobs are agreed at init. The request's ops become the pipe's. */
int weft_cuda_pipe_wanted(size_t bytes);
int weft_cuda_pipe_send(weft_request_t req, const void *dev, size_t bytes, ucp_ep_h ep, ucp_tag_t wire);
int weft_cuda_pipe_recv(weft_request_t req, void *dev, size_t bytes, ucp_tag_t tag, ucp_tag_t mask);

#ifdef WEFT_HAVE_CUDA
/* The pool of pinned chunks both staged paths draw from (cuda.c): a chunk
 * of weft_cuda_chunk_bytes() and the event of the copy that last used it.
 * weft_cuda_chunk_get: NULL with *r untouched where none may be allocated
 * now (weft_cuda_pinned_may_alloc), NULL with *r set on failure. */
#define WEFT_CUDA_STAGE_MAX_DEPTH 16
typedef struct weft_cuda_chunk {
    struct weft_cuda_chunk *next;
    char *host;
    CUevent ev;
    int pending; /* ev marks a copy not yet waited for */
} weft_cuda_chunk_t;
weft_cuda_chunk_t *weft_cuda_chunk_get(CUresult *r);
/* Makes the context of device buffer dev current (the caller pops it) and
 * gives its copy stream; on failure nothing is made current. */
CUresult weft_cuda_buffer_enter(const void *dev, CUcontext *ctx, CUstream *stream);
void weft_cuda_chunk_put(weft_cuda_chunk_t *c);
size_t weft_cuda_chunk_bytes(void);
int weft_cuda_chunk_depth(void); /* WEFT_CUDA_STAGE_DEPTH, 1..16 */
#endif

/* "host cuda(ucx: cuda_copy, cuda_ipc)" and the like, for weft_info. */
void weft_cuda_describe(char *buf, size_t len);

#endif
