/*
 * weft's NCCL: the NCCL 2.28 API over weft (libnccl.so.2 in
 * $(libdir)/weft/nccl; docs/NCCL.md says what maps to what).
 *
 * A program built against NVIDIA's nccl.h runs on this library, and one
 * built against this header runs on NVIDIA's: the types, enum values,
 * struct layouts, macros and function signatures below are NCCL's ABI as
 * of 2.28 (what PyTorch 2.11's wheels were built against). Every function
 * also exists as pnccl<Name> (the profiling names), and ncclX is a weak
 * alias of it.
 */
#ifndef NCCL_H_
#define NCCL_H_

#include <limits.h>
#include <stddef.h>

/* cudaStream_t: from the CUDA runtime's header when the compiler can find
 * it (programs written to NVIDIA's nccl.h expect it included), else the
 * same type declared here (also when NCCL_WEFT_NO_CUDA_INCLUDE is defined). */
#if defined(__has_include) && !defined(NCCL_WEFT_NO_CUDA_INCLUDE)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#define NCCL_WEFT_HAVE_CUDA_RUNTIME_H 1
#endif
#endif
#ifndef NCCL_WEFT_HAVE_CUDA_RUNTIME_H
typedef struct CUstream_st *cudaStream_t;
#endif

/* The version this library implements, encoded as ncclGetVersion reports
 * it: 2.28.9 -> 22809 (from 2.9 on, major * 10000 + minor * 100 + patch). */
#define NCCL_MAJOR            2
#define NCCL_MINOR            28
#define NCCL_PATCH            9
#define NCCL_SUFFIX           ""
#define NCCL_VERSION_CODE     22809
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))
/* Says which library this is, for programs that care (NVIDIA's has none). */
#define NCCL_WEFT 1

#ifdef __cplusplus
extern "C" {
#endif

/* Handles. */
typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow_vidmem *ncclWindow_t;
#define NCCL_COMM_NULL NULL

/* The unique id: here a weft rendezvous handle (the maker's address and
 * port, and a fresh secret) in the first 64 bytes, the rest zero. */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* Results. */
typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

/* "Not set" in a config, and other special values. */
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR    -1
#define NCCL_UNDEF_FLOAT      -1.0f

/* ncclCommWindowRegister flags. */
#define NCCL_WIN_DEFAULT            0x00
#define NCCL_WIN_COLL_SYMMETRIC     0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ncclConfig_t.CTAPolicy values. */
#define NCCL_CTA_POLICY_DEFAULT    0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO       0x02

/* ncclCommShrink flags: shrink a working parent, or stop the parent's
 * operations first (a member has failed). */
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT   0x01

/* ncclCommRevoke flags (must be 0). */
#define NCCL_REVOKE_DEFAULT 0x00

/* Communicator configuration (layout of NCCL 2.28). Start from
 * NCCL_CONFIG_INITIALIZER; size, magic and version say which layout the
 * program was built with (an older, shorter one is read up to its size). */
typedef struct ncclConfig_v22800 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
    int splitShare;
    int trafficClass;
    const char *commName;
    int collnetEnable;
    int CTAPolicy;
    int shrinkShare;
    int nvlsCTAs;
    int nChannelsPerNetPeer;
    int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_MAGIC 0xcafebeef
#define NCCL_CONFIG_INITIALIZER                                                                                        \
    {                                                                                                                  \
        sizeof(ncclConfig_t), NCCL_CONFIG_MAGIC, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),                     \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                \
            NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR,                \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                                                               \
    }

/* What ncclGroupSimulateEnd fills in. */
typedef struct ncclSimInfo_v22200 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_MAGIC 0x74685283
#define NCCL_SIM_INFO_INITIALIZER                                                                                      \
    {                                                                                                                  \
        sizeof(ncclSimInfo_t), NCCL_SIM_INFO_MAGIC, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_UNDEF_FLOAT \
    }

/* Reductions: the five built in, then the ones ncclRedOpCreatePreMulSum
 * makes (from ncclNumOps up). The enum is as wide as an int. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5,
    ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

/* Element types. */
typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12
} ncclDataType_t;

/* Where ncclRedOpCreatePreMulSum's scalar lives: device memory read when
 * the collective runs, or host memory read before the call returns. */
typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* NCCL's device API (GIN / LSA kernels): declared so that programs link;
 * weft has no counterpart and refuses them (ncclInvalidUsage). */
typedef struct ncclDevComm ncclDevComm_t;
struct ncclDevCommRequirements;
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;

#define NCCL_WEFT_DECLARE(ret, name, params)                                                                           \
    ret nccl##name params;                                                                                             \
    ret pnccl##name params

/* Memory for registration (here: device memory from cuMemAlloc, what
 * weft's windows take). */
NCCL_WEFT_DECLARE(ncclResult_t, MemAlloc, (void **ptr, size_t size));
NCCL_WEFT_DECLARE(ncclResult_t, MemFree, (void *ptr));

/* Version (NCCL_VERSION_CODE of the API implemented), errors. */
NCCL_WEFT_DECLARE(ncclResult_t, GetVersion, (int *version));
NCCL_WEFT_DECLARE(const char *, GetErrorString, (ncclResult_t result));
NCCL_WEFT_DECLARE(const char *, GetLastError, (ncclComm_t comm));
NCCL_WEFT_DECLARE(void, ResetDebugInit, (void));

/* Creating communicators. One process calls ncclGetUniqueId and hands the
 * id to the others by its own means; every rank then calls an init with
 * it. The maker of the id serves its store and must be rank 0. */
NCCL_WEFT_DECLARE(ncclResult_t, GetUniqueId, (ncclUniqueId * uniqueId));
NCCL_WEFT_DECLARE(ncclResult_t, CommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank));
NCCL_WEFT_DECLARE(ncclResult_t, CommInitRankConfig,
                  (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config));
NCCL_WEFT_DECLARE(ncclResult_t, CommInitRankScalable,
                  (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds, ncclConfig_t *config));
NCCL_WEFT_DECLARE(ncclResult_t, CommInitAll, (ncclComm_t * comm, int ndev, const int *devlist));
NCCL_WEFT_DECLARE(ncclResult_t, CommSplit,
                  (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config));
NCCL_WEFT_DECLARE(ncclResult_t, CommShrink,
                  (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,
                   ncclConfig_t *config, int shrinkFlags));

/* Ending communicators. */
NCCL_WEFT_DECLARE(ncclResult_t, CommFinalize, (ncclComm_t comm));
NCCL_WEFT_DECLARE(ncclResult_t, CommDestroy, (ncclComm_t comm));
NCCL_WEFT_DECLARE(ncclResult_t, CommAbort, (ncclComm_t comm));
NCCL_WEFT_DECLARE(ncclResult_t, CommRevoke, (ncclComm_t comm, int revokeFlags));

/* Queries. */
NCCL_WEFT_DECLARE(ncclResult_t, CommGetAsyncError, (ncclComm_t comm, ncclResult_t *asyncError));
NCCL_WEFT_DECLARE(ncclResult_t, CommCount, (const ncclComm_t comm, int *count));
NCCL_WEFT_DECLARE(ncclResult_t, CommCuDevice, (const ncclComm_t comm, int *device));
NCCL_WEFT_DECLARE(ncclResult_t, CommUserRank, (const ncclComm_t comm, int *rank));

/* Buffers: registration (accepted, nothing to do) and windows (weft's
 * registered windows). */
NCCL_WEFT_DECLARE(ncclResult_t, CommRegister, (const ncclComm_t comm, void *buff, size_t size, void **handle));
NCCL_WEFT_DECLARE(ncclResult_t, CommDeregister, (const ncclComm_t comm, void *handle));
NCCL_WEFT_DECLARE(ncclResult_t, CommWindowRegister,
                  (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags));
NCCL_WEFT_DECLARE(ncclResult_t, CommWindowDeregister, (ncclComm_t comm, ncclWindow_t win));

/* Reductions that pre-multiply each rank's input by its scalar, then sum. */
NCCL_WEFT_DECLARE(ncclResult_t, RedOpCreatePreMulSum,
                  (ncclRedOp_t * op, void *scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
                   ncclComm_t comm));
NCCL_WEFT_DECLARE(ncclResult_t, RedOpDestroy, (ncclRedOp_t op, ncclComm_t comm));

/* Collectives: enqueued on `stream`; sendbuff == recvbuff (or, for the
 * gathers and scatters, the rank's block of the larger buffer) is in place. */
NCCL_WEFT_DECLARE(ncclResult_t, Reduce,
                  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                   int root, ncclComm_t comm, cudaStream_t stream));
NCCL_WEFT_DECLARE(ncclResult_t, Bcast,
                  (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream));
NCCL_WEFT_DECLARE(ncclResult_t, Broadcast,
                  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                   ncclComm_t comm, cudaStream_t stream));
NCCL_WEFT_DECLARE(ncclResult_t, AllReduce,
                  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                   ncclComm_t comm, cudaStream_t stream));
NCCL_WEFT_DECLARE(ncclResult_t, ReduceScatter,
                  (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
                   ncclComm_t comm, cudaStream_t stream));
NCCL_WEFT_DECLARE(ncclResult_t, AllGather,
                  (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
                   cudaStream_t stream));
NCCL_WEFT_DECLARE(ncclResult_t, AlltoAll,
                  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                   cudaStream_t stream));
NCCL_WEFT_DECLARE(ncclResult_t, Gather,
                  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                   ncclComm_t comm, cudaStream_t stream));
NCCL_WEFT_DECLARE(ncclResult_t, Scatter,
                  (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                   ncclComm_t comm, cudaStream_t stream));

/* Point to point: a send and the peer's receive of the same count and
 * type match in the order posted; inside a group any number may be in
 * flight at once. */
NCCL_WEFT_DECLARE(ncclResult_t, Send,
                  (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                   cudaStream_t stream));
NCCL_WEFT_DECLARE(ncclResult_t, Recv,
                  (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                   cudaStream_t stream));

/* Groups: calls between Start and End are issued together at the
 * outermost End (communicator inits inside a group run at once). */
NCCL_WEFT_DECLARE(ncclResult_t, GroupStart, (void));
NCCL_WEFT_DECLARE(ncclResult_t, GroupEnd, (void));
NCCL_WEFT_DECLARE(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t * simInfo));

/* The device API's host side: refused. */
NCCL_WEFT_DECLARE(ncclResult_t, DevCommCreate,
                  (ncclComm_t comm, ncclDevCommRequirements_t const *reqs, ncclDevComm_t *outDevComm));
NCCL_WEFT_DECLARE(ncclResult_t, DevCommDestroy, (ncclComm_t comm, ncclDevComm_t const *devComm));

#undef NCCL_WEFT_DECLARE

#ifdef __cplusplus
}
#endif

#endif /* NCCL_H_ */
