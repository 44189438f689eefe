/* weft's NCCL over weft.h: the objects behind NCCL's handles, and what the
 * files of nccl/ share. An ncclComm_t points to a struct ncclComm holding
 * a weft communicator; weft does the communication, and there is no
 * second runtime and no thread here. nccl/README.md has the layout. */
#ifndef WEFT_NCCL_IMPL_H
#define WEFT_NCCL_IMPL_H

#define NCCL_WEFT_NO_CUDA_INCLUDE 1
#include "nccl.h"
#include "weft.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Every ncclX is a weak alias of pncclX (the profiling names), both
 * exported; nccl.h's prototypes check the definition's. */
#define NCCL_EXPORT __attribute__((visibility("default")))
#define NCCL_DEF(ret, name, params)                                                                                    \
    NCCL_EXPORT ret nccl##name params __attribute__((weak, alias("pnccl" #name)));                                     \
    NCCL_EXPORT ret pnccl##name params

#define NCCL_LIKELY(x)   __builtin_expect(!!(x), 1)
#define NCCL_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- logging and errors (error.c) ------------------------------------- */
/* NCCL_DEBUG: VERSION, WARN (the default here: weft says what it ignores),
 * INFO, TRACE; NCCL_DEBUG_FILE as NCCL's (%h host, %p pid). */
enum { NL_NONE = 0, NL_VERSION = 1, NL_WARN = 2, NL_INFO = 3, NL_TRACE = 4 };
extern int nccl_log_level;
void nccl_log_init(void);
void nccl_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records the message as this thread's (and the process's) last error,
 * logs it at WARN, and returns code. */
ncclResult_t nccl_fail(ncclResult_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A failed weft call: its status mapped to NCCL's, its message kept. */
ncclResult_t nccl_weft_fail(int status, const char *fn);
ncclResult_t nccl_result_of(int weft_status);
const char *nccl_result_name(ncclResult_t r); /* "ncclInvalidArgument" */

/* ---- the lock ------------------------------------------------------------ */
/* weft is called by one thread at a time; NCCL may be called from several
 * (PyTorch's watchdog asks about errors while the main thread posts). Every
 * call into weft holds this lock; ncclCommGetAsyncError never waits for it. */
extern pthread_mutex_t nccl_lock;
#define NCCL_LOCK()   pthread_mutex_lock(&nccl_lock)
#define NCCL_UNLOCK() pthread_mutex_unlock(&nccl_lock)

/* ---- communicators (init.c) ------------------------------------------- */
#define NCCL_COMM_MAGIC  0x6e43636du /* "nCcm" */
#define NCCL_MAX_STREAMS 8

struct nccl_premul; /* coll.c */
struct nccl_selfmsg;

struct ncclComm {
    uint32_t magic;
    weft_comm_t wc; /* NULL: a one-rank communicator made without weft (see init.c) */
    int rank, nranks;
    int device;        /* the CUDA device current at creation (-1: none) */
    int blocking;      /* config.blocking (1 unless it said 0) */
    int finalized;     /* ncclCommFinalize ran */
    int aborted;       /* ncclCommAbort / revoke: every later call fails */
    _Atomic int async; /* what ncclCommGetAsyncError answers (an ncclResult_t; read by any thread) */
    uint64_t id;       /* the same on every member: from the unique id or the parent */
    uint32_t children; /* splits and shrinks made from it (their ids) */
    char name[64];
    ncclConfig_t config; /* as given (fields past the caller's size: unset), for children */
    /* The streams its calls were enqueued on (finalize waits for them). */
    void *streams[NCCL_MAX_STREAMS];
    int nstreams;
    /* PreMulSum operators made on it (ncclRedOp_t ncclNumOps + index). */
    struct nccl_premul *ops;
    int nops;
    /* One-rank communicators without weft: sends to self waiting for a receive. */
    struct nccl_selfmsg *self_head, *self_tail;
};

/* comm is a live communicator (else the error, naming fn). */
ncclResult_t nccl_comm_check(ncclComm_t comm, const char *fn);
/* ... and usable for communication: not finalized, aborted or failed. */
ncclResult_t nccl_comm_usable(ncclComm_t comm, const char *fn);
/* An operation on comm failed: a timeout, a lost peer, a revoked
 * communicator make comm's asynchronous error (ncclCommGetAsyncError). */
void nccl_comm_note(ncclComm_t comm, ncclResult_t rc);
/* Remembers a stream comm's work went to. */
static inline void nccl_comm_stream(ncclComm_t comm, void *stream)
{
    for (int i = 0; i < comm->nstreams; i++)
        if (comm->streams[i] == stream) return;
    if (comm->nstreams < NCCL_MAX_STREAMS)
        comm->streams[comm->nstreams++] = stream;
    else
        comm->streams[NCCL_MAX_STREAMS - 1] = stream;
}
/* Waits for comm's streams (finalize, destroy). */
ncclResult_t nccl_comm_quiesce(ncclComm_t comm, const char *fn);
/* Releases coll.c's state on comm (PreMulSum ops, queued self sends). */
void nccl_coll_comm_release(ncclComm_t comm);

/* ---- types and operators (coll.c) -------------------------------------- */
/* The weft type of an NCCL type for moving data (fp8: bytes), or -1. */
int nccl_move_type(ncclDataType_t t);
size_t nccl_type_size(ncclDataType_t t);

/* ---- the CUDA driver (cuda.c) -------------------------------------------- */
/* libcuda, when the process has loaded it (nothing here loads it first:
 * a program without CUDA runs on host memory). All return 0 on success or
 * a CUresult, and fill nccl_cuda_error's text. */
int nccl_cuda_loaded(void);
int nccl_cuda_probe(void);                 /* looks again if it was not there (creation, allocation) */
int nccl_cuda_current_device(int *device); /* -1: no context current */
int nccl_cuda_stream_sync(void *stream);
int nccl_cuda_capturing(void *stream, int *capturing);
int nccl_cuda_copy(void *dst, const void *src, size_t bytes, void *stream); /* stream-ordered; memcpy without CUDA */
int nccl_cuda_alloc(void **ptr, size_t bytes);
int nccl_cuda_free(void *ptr);
int nccl_cuda_alloc_async(void **ptr, size_t bytes, void *stream);
int nccl_cuda_free_async(void *ptr, void *stream);
int nccl_cuda_is_device(const void *ptr); /* 1: device memory */
#define NCCL_CUDA_NOT_LOADED (-1000)      /* what the calls above return without a driver */
const char *nccl_cuda_error(int r);

#endif
