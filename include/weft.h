/*
 * weft: MPI-style message passing on UCX, with a collectives module.
 *
 * The one public header. Conventions (kept stable for C and ctypes users):
 *   - handles are opaque pointers (NULL is the null handle);
 *   - every enum has fixed numeric values that never change meaning;
 *   - every call returns an int status (WEFT_SUCCESS == 0, errors < 0);
 *     weft_strerror() names it and weft_last_error() gives this thread's
 *     last failure message in full (which rank, which argument, ...);
 *   - no struct is passed by value; weft_status_t is passed by pointer and
 *     its layout is versioned by WEFT_STATUS_LAYOUT.
 *
 * Threading: one thread at a time may call into weft (MPI_THREAD_FUNNELED
 * or SERIALIZED in MPI's terms). With its progress thread on
 * (WEFT_PROGRESS_THREAD), weft advances pending operations between the
 * application's calls (never during one), asleep when there is nothing to
 * advance.
 */
#ifndef WEFT_H
#define WEFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
#endif

#include "weft_version.h" /* WEFT_VERSION_MAJOR / _MINOR / _PATCH / _STRING */

/* ------------------------------------------------------------------ */
/* Status codes (fixed values)                                         */
/* ------------------------------------------------------------------ */
enum {
    WEFT_SUCCESS = 0,
    WEFT_ERR_ARG = -1,             /* bad argument: NULL buffer, negative count, rank out of range, ... */
    WEFT_ERR_NO_MEMORY = -2,       /* allocation failed */
    WEFT_ERR_TIMEOUT = -3,         /* a deadline passed; the request (if any) stays valid */
    WEFT_ERR_PEER_LOST = -4,       /* a peer process died or its connection failed */
    WEFT_ERR_TRUNCATE = -5,        /* message longer than the receive buffer; nothing written past it */
    WEFT_ERR_UNSUPPORTED = -6,     /* not available in this build or for this case */
    WEFT_ERR_NOT_INITIALIZED = -7, /* called before weft_init or after weft_finalize */
    WEFT_ERR_BOOTSTRAP = -8,       /* ranks could not find each other */
    WEFT_ERR_TRANSPORT = -9,       /* UCX reported an error */
    WEFT_ERR_CANCELED = -10,       /* the request was canceled */
    WEFT_ERR_INTERNAL = -11,       /* a bug in weft: please report */
    WEFT_ERR_ALREADY = -12,        /* already initialized / already done */
    WEFT_ERR_COMM = -13,           /* invalid or freed communicator */
    WEFT_ERR_REVOKED = -14         /* the communicator was revoked (weft_comm_revoke) */
};

/* ------------------------------------------------------------------ */
/* Datatypes (fixed values)                                            */
/* ------------------------------------------------------------------ */
typedef enum weft_dtype {
    WEFT_INT8 = 0,
    WEFT_UINT8 = 1,
    WEFT_INT16 = 2,
    WEFT_UINT16 = 3,
    WEFT_INT32 = 4,
    WEFT_UINT32 = 5,
    WEFT_INT64 = 6,
    WEFT_UINT64 = 7,
    WEFT_FLOAT16 = 8,  /* IEEE 754 binary16 */
    WEFT_BFLOAT16 = 9, /* bfloat16 (upper half of a float32) */
    WEFT_FLOAT32 = 10,
    WEFT_FLOAT64 = 11,
    WEFT_BYTE = 12,
    WEFT_DTYPE_COUNT = 13
} weft_dtype_t;

/* ------------------------------------------------------------------ */
/* Reduction operators (fixed values)                                  */
/* ------------------------------------------------------------------ */
/* sum/prod/min/max/avg on every numeric type (float16 and bfloat16
 * computed in float32, each result rounded to nearest even; integers
 * wrap; min/max propagate NaN; avg of integers truncates toward zero);
 * band/bor/bxor on integer types and byte. Anything else is WEFT_ERR_ARG. */
typedef enum weft_op {
    WEFT_SUM = 0,
    WEFT_PROD = 1,
    WEFT_MIN = 2,
    WEFT_MAX = 3,
    WEFT_AVG = 4,
    WEFT_BAND = 5,
    WEFT_BOR = 6,
    WEFT_BXOR = 7,
    WEFT_OP_COUNT = 8
} weft_op_t;

/* ------------------------------------------------------------------ */
/* Handles and special values                                          */
/* ------------------------------------------------------------------ */
typedef struct weft_comm_s *weft_comm_t;
typedef struct weft_request_s *weft_request_t;

#define WEFT_COMM_NULL    ((weft_comm_t)0)
#define WEFT_REQUEST_NULL ((weft_request_t)0)

#define WEFT_ANY_SOURCE (-1)
#define WEFT_ANY_TAG    (-1)
/* User tags are 0..WEFT_TAG_UB. */
#define WEFT_TAG_UB ((1 << 23) - 1)

/* A timeout argument (seconds) meaning "use the communicator's default". */
#define WEFT_TIMEOUT_DEFAULT (-1.0)
/* A timeout argument meaning "wait without a deadline" (discouraged). */
#define WEFT_TIMEOUT_NONE (0.0)

/* Completion status of a receive (or probe). Layout version 1:
 *   int32 source, int32 tag, int32 error, int32 reserved, uint64 bytes. */
#define WEFT_STATUS_LAYOUT 1
typedef struct weft_status {
    int32_t source;   /* rank that sent the message (in the communicator) */
    int32_t tag;      /* the sender's tag */
    int32_t error;    /* WEFT_SUCCESS or the request's error */
    int32_t reserved; /* keep zero */
    uint64_t bytes;   /* bytes received. WEFT_ERR_TRUNCATE: UCX does not report the
                         sender, so source/tag are the receive's own arguments
                         and bytes is the buffer's capacity */
} weft_status_t;

/* The out-of-band allgather a host code provides to weft_init_oob:
 * gather `len` bytes from every rank into recvbuf (rank order), return 0
 * on success, anything else on failure. */
typedef int (*weft_oob_allgather_fn)(const void *sendbuf, void *recvbuf, size_t len, void *ctx);

/* ------------------------------------------------------------------ */
/* Runtime                                                             */
/* ------------------------------------------------------------------ */

/* Initialises weft. The bootstrap is chosen by itself: PMIx when started
 * by mpirun / prterun / srun --mpi=pmix; the env bootstrap when RANK,
 * WORLD_SIZE, MASTER_ADDR and MASTER_PORT are set (torchrun, Kubernetes);
 * a singleton of size 1 otherwise. WEFT_BOOTSTRAP=pmix|env|single forces
 * one. argc/argv may be NULL. */
WEFT_API int weft_init(int *argc, char ***argv);

/* Initialises weft from a host code's own allgather (MPI_Allgather, a
 * key-value store, ...). `allgather` is called collectively by all ranks. */
WEFT_API int weft_init_oob(int rank, int size, weft_oob_allgather_fn allgather, void *ctx);

/* Completes outstanding work, synchronises with the other ranks (within
 * WEFT_TIMEOUT) and releases everything. weft_init may be called again. */
WEFT_API int weft_finalize(void);

WEFT_API int weft_initialized(int *flag);

/* Drives communication once; returns the number of events processed. */
WEFT_API int weft_progress(void);

WEFT_API double weft_wtime(void);
WEFT_API int weft_get_version(int *major, int *minor, int *patch);
WEFT_API const char *weft_version_string(void);
WEFT_API const char *weft_strerror(int status);
/* This thread's last failure message ("" when none). Valid until the next
 * failing call on the same thread. */
WEFT_API const char *weft_last_error(void);

/* Name of the bootstrap in use: "pmix", "env", "torchstore", "oob",
 * "rendezvous", "single", or "none". */
WEFT_API const char *weft_bootstrap_name(void);

/* Datatype size in bytes, or 0 for an unknown datatype. */
WEFT_API size_t weft_dtype_size(weft_dtype_t dtype);
WEFT_API const char *weft_dtype_name(weft_dtype_t dtype);
/* MPI's reduce_local: inout[i] = inout[i] op in[i] for i < count, on host
 * memory, in the collectives' own arithmetic (float16 / bfloat16 computed
 * in float32 and rounded once; AVG adds, as one step of a reduction does).
 * in and inout are the same buffer or disjoint. Needs no weft_init. */
WEFT_API int weft_reduce_local(const void *in, void *inout, int64_t count, weft_dtype_t dtype, weft_op_t op);

/* ------------------------------------------------------------------ */
/* Communicators                                                       */
/* ------------------------------------------------------------------ */
/* The world communicator (WEFT_COMM_NULL before init / after finalize). */
WEFT_API weft_comm_t weft_comm_world(void);
WEFT_API int weft_comm_rank(weft_comm_t comm, int *rank);
WEFT_API int weft_comm_size(weft_comm_t comm, int *size);
/* Local (same host) rank and size as torchrun/FSDP users expect:
 * LOCAL_RANK / LOCAL_WORLD_SIZE when set, otherwise the launcher's view. */
WEFT_API int weft_local_rank(int *local_rank);
WEFT_API int weft_local_size(int *local_size);
/* Default deadline (seconds) of every wait on this communicator. */
WEFT_API int weft_comm_get_timeout(weft_comm_t comm, double *timeout_s);
WEFT_API int weft_comm_set_timeout(weft_comm_t comm, double timeout_s);

/* ------------------------------------------------------------------ */
/* Options and hints                                                   */
/* ------------------------------------------------------------------ */
/* An options object carries a communicator's name, timeout,
 * abort-on-error flag, device, and string hints. A new communicator takes
 * its parent's options unless the creating call passes its own (then
 * fields not set in them are still inherited). Every hint ends up
 * APPLIED, IGNORED (with a reason) or REJECTED (bad value); creation logs
 * one line per hint that is not applied, and weft_comm_hint_status says
 * which and why. Nothing is dropped silently. Options objects may be made
 * before weft_init (for weft_comm_join). */
typedef struct weft_options_s *weft_options_t;
#define WEFT_OPTIONS_NULL ((weft_options_t)0)
enum { WEFT_HINT_APPLIED = 0, WEFT_HINT_IGNORED = 1, WEFT_HINT_REJECTED = 2, WEFT_HINT_NOT_SET = 3 };

WEFT_API int weft_options_create(weft_options_t *options);
WEFT_API int weft_options_free(weft_options_t *options);
WEFT_API int weft_options_set_name(weft_options_t options, const char *name);
WEFT_API int weft_options_set_timeout(weft_options_t options, double timeout_s);
/* When set, a timeout or a lost peer on the communicator aborts the job
 * (torchcomms's abort_process_on_timeout_or_error) instead of returning. */
WEFT_API int weft_options_set_abort_on_error(weft_options_t options, int abort_on_error);
/* The GPU this communicator's device work uses (-1: none). */
WEFT_API int weft_options_set_device(weft_options_t options, int device);
WEFT_API int weft_options_set_hint(weft_options_t options, const char *key, const char *value);

/* Status of one hint on a communicator: *status is a WEFT_HINT_* value;
 * reason (may be NULL) receives why it was ignored or rejected. */
WEFT_API int weft_comm_hint_status(weft_comm_t comm, const char *key, int *status, char *reason, size_t reason_len);
/* The hints a communicator was given, by index 0..count-1 (pointers stay
 * valid while the communicator lives). */
WEFT_API int weft_comm_hint_count(weft_comm_t comm, int *count);
WEFT_API int weft_comm_hint_get(weft_comm_t comm, int index, const char **key, const char **value, int *status,
                                const char **reason);

/* ------------------------------------------------------------------ */
/* Creating communicators (all collective over the parent)             */
/* ------------------------------------------------------------------ */
#define WEFT_UNDEFINED (-32766)
typedef enum weft_split_type {
    WEFT_SPLIT_NODE = 0,  /* ranks on the same host (or simulated node) */
    WEFT_SPLIT_NUMA = 1,  /* ... and the same NUMA node (from the CPU binding) */
    WEFT_SPLIT_SOCKET = 2 /* ... and the same socket (package) */
} weft_split_type_t;

/* options may be WEFT_OPTIONS_NULL (inherit everything). */
WEFT_API int weft_comm_dup(weft_comm_t comm, weft_options_t options, weft_comm_t *newcomm);
/* MPI's split: members with equal color form a communicator, ordered by
 * key, ties by parent rank. color WEFT_UNDEFINED: *newcomm = WEFT_COMM_NULL. */
WEFT_API int weft_comm_split(weft_comm_t comm, int color, int key, weft_options_t options, weft_comm_t *newcomm);
/* torchcomms's split: every caller passes the parent ranks of its own new
 * group, in new-rank order (name may be NULL). An empty list (nranks 0)
 * gives WEFT_COMM_NULL; a list without the caller, with duplicates, or
 * differing between members is WEFT_ERR_ARG on every rank concerned. */
WEFT_API int weft_comm_split_ranks(weft_comm_t comm, const int *ranks, int nranks, const char *name,
                                   weft_options_t options, weft_comm_t *newcomm);
WEFT_API int weft_comm_split_type(weft_comm_t comm, int type, int key, weft_options_t options, weft_comm_t *newcomm);
/* MPI's comm_create_group: collective over the listed members of comm
 * only (the other ranks need not call). Every member passes the same list
 * of comm ranks, in new-rank order (the caller among them, no duplicates),
 * and the same tag (0..WEFT_TAG_UB): creations that overlap in time and in
 * members use different tags. The first listed member gathers what the
 * members need to agree on and hands it back; a member whose list or tag
 * differs is left waiting until the deadline (comm's timeout) when it is
 * not the first one's; when it is, every member fails with WEFT_ERR_ARG
 * naming the rank. */
WEFT_API int weft_comm_create_group(weft_comm_t comm, const int *ranks, int nranks, int tag, weft_options_t options,
                                    weft_comm_t *newcomm);

/* ------------------------------------------------------------------ */
/* Rendezvous: joining by a handle (NCCL's unique id)                  */
/* ------------------------------------------------------------------ */
/* A handle one process makes and hands to the others by its own means (a
 * file, MPI_Bcast, torch's store): where that process listens (a fresh TCP
 * port on one of its addresses) and a fresh 256-bit secret that proves
 * membership as WEFT_JOB_SECRET does in the env bootstrap (docs/SECURITY.md),
 * so a handle is a key: hand it only to the ranks that should join. */
#define WEFT_RENDEZVOUS_BYTES 64
typedef struct weft_rendezvous {
    unsigned char bytes[WEFT_RENDEZVOUS_BYTES];
} weft_rendezvous_t;
/* Opens a rendezvous: binds and listens (before weft_init too). ifname
 * chooses the address as NCCL_SOCKET_IFNAME does: "eth,ib" interfaces whose
 * names start so, "^docker,lo" all but those, "=eth0" exactly those; NULL or
 * "": the first up interface that is not loopback or a container bridge
 * (docker, veth, virbr, br-), IPv4 first, else loopback. */
WEFT_API int weft_rendezvous_open(const char *ifname, weft_rendezvous_t *handle);
/* Closes the listener of a rendezvous this process opened and that no
 * weft_comm_join took (a no-op for another process's handle). */
WEFT_API int weft_rendezvous_close(const weft_rendezvous_t *handle);
/* Joins the communicator of `size` processes that meet at handle, as rank
 * `rank` (every process its own rank, 0..size-1). The process that opened
 * the handle serves its store for the call and must be rank 0. Collective
 * over those processes, within WEFT_INIT_TIMEOUT. In a process that has not
 * initialised weft, the first join initialises it with these processes as
 * the world (weft_bootstrap_name() says "rendezvous"; weft_finalize ends it
 * as usual) and *newcomm is a duplicate of the world. Once weft is
 * initialised, a join makes a communicator of world members (as
 * weft_comm_create_group does): every joining process must be in the same
 * weft world. A process has one world; a join mixing processes of
 * different worlds, or processes with and without one, fails on every
 * member with WEFT_ERR_ARG naming the ranks. options as in weft_comm_dup. */
WEFT_API int weft_comm_join(const weft_rendezvous_t *handle, int rank, int size, weft_options_t options,
                            weft_comm_t *newcomm);
/* Frees a communicator and sets *comm to WEFT_COMM_NULL. Fails (naming
 * them) while requests on it are still pending (not counting requests the
 * program released: such collectives are stopped, and sends that only UCX
 * still holds, e.g. to a dead rank, are let go); the world cannot be freed. */
WEFT_API int weft_comm_free(weft_comm_t *comm);
/* Terminates every process of the job (under PMIx: the launcher's abort;
 * otherwise this process exits with errorcode and the launcher ends the rest). */
WEFT_API int weft_comm_abort(weft_comm_t comm, int errorcode);
/* The communicator's name ("world", or as given / derived at creation). */
WEFT_API const char *weft_comm_name(weft_comm_t comm);
WEFT_API int weft_comm_get_device(weft_comm_t comm, int *device);
/* The world rank of a communicator rank. */
WEFT_API int weft_comm_world_rank(weft_comm_t comm, int rank, int *world_rank);

/* ------------------------------------------------------------------ */
/* Surviving a lost rank (in the spirit of ULFM's MPI_Comm_revoke /    */
/* shrink / agree)                                                     */
/* ------------------------------------------------------------------ */
/* Revokes comm on every member: this rank's pending receives and
 * collectives on it (and on its node / leader / rail communicators) fail
 * at once with WEFT_ERR_REVOKED, every other member is told (a control
 * message to each), theirs fail as soon as it arrives, and every later
 * operation on comm fails at once with WEFT_ERR_REVOKED, on every member.
 * Pending sends complete when the receiver has discarded their data, then
 * report WEFT_ERR_REVOKED. Local: it does not wait for the others. Only
 * weft_comm_shrink, weft_comm_agree, queries and weft_comm_free still work
 * on a revoked communicator. Revoking twice is no error. */
WEFT_API int weft_comm_revoke(weft_comm_t comm);
/* *flag = 1 when comm was revoked (here, or by another member and the
 * notice arrived), else 0. */
WEFT_API int weft_comm_is_revoked(weft_comm_t comm, int *flag);
/* Collective over the surviving members of comm (revoked or not): they
 * agree on which members are alive and each gets *newcomm, a communicator
 * of exactly those members, in comm's rank order, identical on every
 * survivor, with comm's options. Fault tolerant: a member that dies during
 * the shrink is left out (or, if the others already agreed, is in newcomm
 * and is lost there); it does not make the shrink hang. Waits at most
 * comm's timeout. A rank the others agreed is lost, but is not, gets
 * WEFT_ERR_PEER_LOST and WEFT_COMM_NULL. */
WEFT_API int weft_comm_shrink(weft_comm_t comm, weft_comm_t *newcomm);
/* Fault-tolerant agreement (ULFM's MPI_Comm_agree): on entry *flag is this
 * rank's value; on return, on every surviving member, the bitwise AND of
 * the values of the members agreed to be alive (the same set, and so the
 * same value, everywhere). Returns WEFT_SUCCESS when every member of comm
 * took part, WEFT_ERR_PEER_LOST when some were lost (*flag is still the
 * agreed value, and weft_last_error names them), or a timeout after comm's
 * timeout. Works on a revoked communicator. */
WEFT_API int weft_comm_agree(weft_comm_t comm, int *flag);

/* ------------------------------------------------------------------ */
/* Warm-up and diagnostics                                             */
/* ------------------------------------------------------------------ */
/* Collective: connects every endpoint among the members and exchanges a
 * few rounds of small messages, so the first real collective pays no
 * connection set-up. */
WEFT_API int weft_comm_warmup(weft_comm_t comm);
/* Which UCX transports/devices reach `rank` of comm, e.g.
 * "sysv/memory cma/memory" or "rc_mlx5/mlx5_0:1" (connects if needed). */
WEFT_API int weft_comm_peer_info(weft_comm_t comm, int rank, char *buf, size_t len);
/* This rank's node (host) index among the job's nodes, and node count. */
WEFT_API int weft_node_info(int *node, int *nnodes);
/* This rank's placement from hwloc on one line: NUMA node, socket, CPU
 * binding, nearest GPU and NIC ("numa 0 socket 0 cpus 0-3 (4) gpu - nic eth0"). */
WEFT_API int weft_placement(char *buf, size_t len);

/* ------------------------------------------------------------------ */
/* Point-to-point                                                      */
/* ------------------------------------------------------------------ */
/* Messages between one pair of ranks on one communicator arrive in the
 * order sent. Blocking calls wait at most the communicator's timeout. */
WEFT_API int weft_send(const void *buf, int64_t count, weft_dtype_t dtype, int dest, int tag, weft_comm_t comm);
WEFT_API int weft_recv(void *buf, int64_t count, weft_dtype_t dtype, int source, int tag, weft_comm_t comm,
                       weft_status_t *status);
WEFT_API int weft_isend(const void *buf, int64_t count, weft_dtype_t dtype, int dest, int tag, weft_comm_t comm,
                        weft_request_t *request);
WEFT_API int weft_irecv(void *buf, int64_t count, weft_dtype_t dtype, int source, int tag, weft_comm_t comm,
                        weft_request_t *request);
/* Synchronous mode (MPI's issend): the request completes only once the
 * receiver has matched the message, so its completion says a receive
 * (or probe-and-receive) has begun. Not cancelable, as weft_isend. */
WEFT_API int weft_issend(const void *buf, int64_t count, weft_dtype_t dtype, int dest, int tag, weft_comm_t comm,
                         weft_request_t *request);
WEFT_API int weft_sendrecv(const void *sendbuf, int64_t sendcount, weft_dtype_t sendtype, int dest, int sendtag,
                           void *recvbuf, int64_t recvcount, weft_dtype_t recvtype, int source, int recvtag,
                           weft_comm_t comm, weft_status_t *status);
/* Blocks (within the communicator's timeout) until a matching message is
 * pending; it stays pending. */
WEFT_API int weft_probe(int source, int tag, weft_comm_t comm, weft_status_t *status);
WEFT_API int weft_iprobe(int source, int tag, weft_comm_t comm, int *flag, weft_status_t *status);

/* ------------------------------------------------------------------ */
/* Collectives                                                         */
/* ------------------------------------------------------------------ */
/* Every member calls the same collectives on a communicator in the same
 * order. Blocking calls wait at most the communicator's timeout; each has a
 * nonblocking twin (weft_i...) returning a request for test / wait /
 * wait_timeout. Counts are elements of dtype; v-variants take per-rank
 * counts and displacements (in elements). A nonblocking call keeps using
 * its buffers and these arrays (and allgather_list's array of buffers)
 * until it completes: keep them valid until then, as in MPI. WEFT_IN_PLACE
 * as the send buffer means: the data is already in the receive buffer,
 * where MPI allows it. */
#define WEFT_IN_PLACE ((void *)1)

WEFT_API int weft_barrier(weft_comm_t comm);
WEFT_API int weft_ibarrier(weft_comm_t comm, weft_request_t *request);
WEFT_API int weft_bcast(void *buf, int64_t count, weft_dtype_t dtype, int root, weft_comm_t comm);
WEFT_API int weft_ibcast(void *buf, int64_t count, weft_dtype_t dtype, int root, weft_comm_t comm,
                         weft_request_t *request);
WEFT_API int weft_reduce(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, weft_op_t op, int root,
                         weft_comm_t comm);
WEFT_API int weft_ireduce(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, weft_op_t op, int root,
                          weft_comm_t comm, weft_request_t *request);
WEFT_API int weft_allreduce(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, weft_op_t op,
                            weft_comm_t comm);
WEFT_API int weft_iallreduce(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, weft_op_t op,
                             weft_comm_t comm, weft_request_t *request);
/* count: elements each rank contributes. */
WEFT_API int weft_allgather(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, weft_comm_t comm);
WEFT_API int weft_iallgather(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, weft_comm_t comm,
                             weft_request_t *request);
/* torch's all_gather into a list: recvbufs[r] receives rank r's count elements. */
WEFT_API int weft_allgather_list(const void *sendbuf, void *const recvbufs[], int64_t count, weft_dtype_t dtype,
                                 weft_comm_t comm);
WEFT_API int weft_iallgather_list(const void *sendbuf, void *const recvbufs[], int64_t count, weft_dtype_t dtype,
                                  weft_comm_t comm, weft_request_t *request);
WEFT_API int weft_allgatherv(const void *sendbuf, int64_t sendcount, void *recvbuf, const int64_t recvcounts[],
                             const int64_t displs[], weft_dtype_t dtype, weft_comm_t comm);
WEFT_API int weft_iallgatherv(const void *sendbuf, int64_t sendcount, void *recvbuf, const int64_t recvcounts[],
                              const int64_t displs[], weft_dtype_t dtype, weft_comm_t comm, weft_request_t *request);
WEFT_API int weft_gather(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, int root,
                         weft_comm_t comm);
WEFT_API int weft_igather(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, int root,
                          weft_comm_t comm, weft_request_t *request);
WEFT_API int weft_gatherv(const void *sendbuf, int64_t sendcount, void *recvbuf, const int64_t recvcounts[],
                          const int64_t displs[], weft_dtype_t dtype, int root, weft_comm_t comm);
WEFT_API int weft_igatherv(const void *sendbuf, int64_t sendcount, void *recvbuf, const int64_t recvcounts[],
                           const int64_t displs[], weft_dtype_t dtype, int root, weft_comm_t comm,
                           weft_request_t *request);
WEFT_API int weft_scatter(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, int root,
                          weft_comm_t comm);
WEFT_API int weft_iscatter(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, int root,
                           weft_comm_t comm, weft_request_t *request);
WEFT_API int weft_scatterv(const void *sendbuf, const int64_t sendcounts[], const int64_t displs[], void *recvbuf,
                           int64_t recvcount, weft_dtype_t dtype, int root, weft_comm_t comm);
WEFT_API int weft_iscatterv(const void *sendbuf, const int64_t sendcounts[], const int64_t displs[], void *recvbuf,
                            int64_t recvcount, weft_dtype_t dtype, int root, weft_comm_t comm, weft_request_t *request);
/* Rank r receives recvcounts[r] elements of the reduction. */
WEFT_API int weft_reduce_scatter(const void *sendbuf, void *recvbuf, const int64_t recvcounts[], weft_dtype_t dtype,
                                 weft_op_t op, weft_comm_t comm);
WEFT_API int weft_ireduce_scatter(const void *sendbuf, void *recvbuf, const int64_t recvcounts[], weft_dtype_t dtype,
                                  weft_op_t op, weft_comm_t comm, weft_request_t *request);
WEFT_API int weft_reduce_scatter_block(const void *sendbuf, void *recvbuf, int64_t recvcount, weft_dtype_t dtype,
                                       weft_op_t op, weft_comm_t comm);
WEFT_API int weft_ireduce_scatter_block(const void *sendbuf, void *recvbuf, int64_t recvcount, weft_dtype_t dtype,
                                        weft_op_t op, weft_comm_t comm, weft_request_t *request);
/* count: elements sent to (and received from) each rank. */
WEFT_API int weft_alltoall(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, weft_comm_t comm);
WEFT_API int weft_ialltoall(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, weft_comm_t comm,
                            weft_request_t *request);
WEFT_API int weft_alltoallv(const void *sendbuf, const int64_t sendcounts[], const int64_t sdispls[], void *recvbuf,
                            const int64_t recvcounts[], const int64_t rdispls[], weft_dtype_t dtype, weft_comm_t comm);
WEFT_API int weft_ialltoallv(const void *sendbuf, const int64_t sendcounts[], const int64_t sdispls[], void *recvbuf,
                             const int64_t recvcounts[], const int64_t rdispls[], weft_dtype_t dtype, weft_comm_t comm,
                             weft_request_t *request);
/* Inclusive and exclusive prefix reductions (exscan leaves rank 0's
 * recvbuf untouched). */
WEFT_API int weft_scan(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, weft_op_t op,
                       weft_comm_t comm);
WEFT_API int weft_iscan(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, weft_op_t op,
                        weft_comm_t comm, weft_request_t *request);
WEFT_API int weft_exscan(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, weft_op_t op,
                         weft_comm_t comm);
WEFT_API int weft_iexscan(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, weft_op_t op,
                          weft_comm_t comm, weft_request_t *request);

/* Stream-ordered collectives, as NCCL users expect: with device buffers
 * (coll/cuda: the ranks of one node) the collective is enqueued on `stream`
 * (a cudaStream_t / CUstream; NULL: the legacy default stream) and the call
 * returns at once: the result is in place in stream order, and a CUDA
 * graph that captures the call replays it (each replay a new collective, in
 * the same order on every rank). request, when not NULL, receives a work
 * handle: weft_test polls the GPU work's completion, weft_wait blocks the
 * host until it is done (the communicator's deadline applies); pass NULL to
 * let it go. The call's deadline (the communicator's timeout, from the call)
 * stops the kernels when it passes (an abort word they watch), in a wait or
 * while nobody waits (then at the next call into weft that makes progress:
 * weft_test on any request, any wait, another collective; weft has no
 * thread of its own): the call fails with WEFT_ERR_TIMEOUT, and the
 * communicator's later GPU collectives fail, naming the rank the kernels
 * waited for. With host buffers the collective runs as weft_i* once the
 * stream's earlier work is done (with no request, to its end before the
 * call returns). Device buffers that no GPU kernel takes (a communicator
 * that spans nodes; an op or type the kernels lack) run on the host, on
 * host copies, from the moment the stream's earlier work is done. With the
 * progress thread running (WEFT_PROGRESS_THREAD) and a stream other than
 * the legacy default one, the call returns at once: the copies are queued
 * on the stream around a wait on a word of pinned host memory that the
 * thread sets when it has finished the collective (request, the deadline
 * and a lost peer as for the kernels; a failed call lets the stream go on,
 * its buffers undefined). Otherwise the call returns when the result is in
 * place (*request is set to WEFT_REQUEST_NULL). Under graph capture it
 * fails with WEFT_ERR_UNSUPPORTED. Counts, datatypes, ops and WEFT_IN_PLACE
 * as in the blocking forms. */
WEFT_API int weft_barrier_on_stream(weft_comm_t comm, void *stream, weft_request_t *request);
WEFT_API int weft_bcast_on_stream(void *buf, int64_t count, weft_dtype_t dtype, int root, weft_comm_t comm,
                                  void *stream, weft_request_t *request);
WEFT_API int weft_reduce_on_stream(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype, weft_op_t op,
                                   int root, weft_comm_t comm, void *stream, weft_request_t *request);
WEFT_API int weft_allreduce_on_stream(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype,
                                      weft_op_t op, weft_comm_t comm, void *stream, weft_request_t *request);
WEFT_API int weft_allgather_on_stream(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype,
                                      weft_comm_t comm, void *stream, weft_request_t *request);
WEFT_API int weft_alltoall_on_stream(const void *sendbuf, void *recvbuf, int64_t count, weft_dtype_t dtype,
                                     weft_comm_t comm, void *stream, weft_request_t *request);
WEFT_API int weft_reduce_scatter_block_on_stream(const void *sendbuf, void *recvbuf, int64_t recvcount,
                                                 weft_dtype_t dtype, weft_op_t op, weft_comm_t comm, void *stream,
                                                 weft_request_t *request);

/* Registered buffers (windows), as ncclCommWindowRegister: collective over
 * comm (every rank, in the same order), for device memory on a communicator
 * whose GPU collectives run in coll/cuda (the ranks of one node). Each rank
 * gives [buf, buf + bytes) of memory from cuMemAlloc / cudaMalloc (torch's
 * caching allocator included; not VMM / expandable segments); the ranks
 * exchange it by CUDA IPC once, here. A later GPU collective whose input on
 * this rank lies inside a window (allreduce, reduce, reduce_scatter_block
 * not in place; allgather, alltoall, bcast) is read by the peers where it
 * is: no staging copy into the communicator's scratch, no chunking, in
 * exchange for a second barrier at the end (the peers have read it). Every
 * rank must pass a registered input to the same call, in the same window
 * (offsets may differ); a call where they do not (or where a peer's window
 * is too small for what is read) fails on the ranks that see it, naming the
 * rank, and the communicator's GPU collectives fail from then on (as after
 * a timeout). Calls small enough for the one-launch forms (the LL kernel,
 * WEFT_CUDA_COLL_FUSED), and any call reading less than the cuda_window
 * rules' bytes per rank (coll/rules.conf; 8 MiB where ranks share a GPU:
 * below it the second barrier costs more than the copy it saves), stage as
 * if unregistered. *win is
 * this rank's handle. Deregistration is collective too: it waits (up to the communicator's timeout, else fails with
 * WEFT_ERR_TIMEOUT on every rank) for this rank's last GPU collective, and
 * the memory stays the caller's. A CUDA graph that captured calls in a
 * window must not be replayed after the window is deregistered. */
typedef struct weft_window *weft_window_t;
WEFT_API int weft_comm_window_register(weft_comm_t comm, void *buf, size_t bytes, weft_window_t *win);
WEFT_API int weft_comm_window_deregister(weft_comm_t comm, weft_window_t *win);

/* ------------------------------------------------------------------ */
/* Requests                                                            */
/* ------------------------------------------------------------------ */
/* test / wait release a completed request and set *request to
 * WEFT_REQUEST_NULL. A wait that times out returns WEFT_ERR_TIMEOUT and
 * leaves the request valid: wait on it again, or cancel it. `status` may
 * be NULL. Waiting on WEFT_REQUEST_NULL returns WEFT_SUCCESS at once. */
WEFT_API int weft_test(weft_request_t *request, int *flag, weft_status_t *status);
WEFT_API int weft_wait(weft_request_t *request, weft_status_t *status);
WEFT_API int weft_wait_timeout(weft_request_t *request, double timeout_s, weft_status_t *status);
/* Waits for all; returns the first error met (statuses[i].error tells
 * which request failed). Requests that completed are released; on
 * WEFT_ERR_TIMEOUT the unfinished ones stay valid. statuses may be NULL. */
WEFT_API int weft_waitall(int count, weft_request_t requests[], weft_status_t statuses[]);
WEFT_API int weft_waitall_timeout(int count, weft_request_t requests[], double timeout_s, weft_status_t statuses[]);
/* Cancels a pending receive; a later wait returns WEFT_ERR_CANCELED.
 * Sends cannot be canceled (WEFT_ERR_UNSUPPORTED): UCX may already be
 * moving their data. */
WEFT_API int weft_request_cancel(weft_request_t *request);
/* Releases a request without waiting. A pending receive is canceled; a
 * pending send completes in the background (its buffer must stay valid). */
WEFT_API int weft_request_free(weft_request_t *request);
/* Calls fn(arg, status) once, when the request completes (status: its
 * outcome), on the thread that completes it: weft's progress thread
 * (WEFT_PROGRESS_THREAD), a thread inside a weft call, or this one when the
 * request is complete already. fn runs inside weft: it must be short and
 * must not call weft (wake a thread of yours instead). The request stays
 * the caller's to wait on, test or free; one freed before it completes
 * never calls fn. One callback per request (WEFT_ERR_ALREADY). */
typedef void (*weft_request_callback_t)(void *arg, int status);
WEFT_API int weft_request_on_complete(weft_request_t request, weft_request_callback_t fn, void *arg);
/* A ready callback for weft_request_on_complete: writes an 8-byte 1 to the
 * file descriptor `fd` (cast to a pointer), an eventfd or a pipe that a
 * thread of the caller's sleeps on (weft.torch completes its futures so). */
WEFT_API void weft_notify_fd(void *fd, int status);
/* *flag = 1 while weft's progress thread runs in this process (after
 * weft_init; WEFT_PROGRESS_THREAD=on, or auto where a CPU is spare):
 * pending operations then complete without a weft call. */
WEFT_API int weft_progress_thread_active(int *flag);
/* How this rank's blocking waits and progress run, on one line (weft_info
 * prints it): how long a wait polls without news before it sleeps
 * (WEFT_WAIT_SPIN_US) and why, whether this rank's CPUs are shared by more
 * ranks than they hold (oversubscribed), and whether the progress thread
 * runs. WEFT_ERR_TRUNCATE when len is too short (buf holds what fit). */
WEFT_API int weft_progress_info(char *buf, size_t len);

/* ------------------------------------------------------------------ */
/* Introspection (weft_info uses these)                                */
/* ------------------------------------------------------------------ */
WEFT_API const char *weft_ucx_version(void);
/* Space-separated "transport/device" list UCX offers on this host. */
WEFT_API int weft_ucx_transports(char *buf, size_t len);
/* The memory types the UCX in use carries and how device buffers move
 * (through UCX, staged through pinned host memory, or not at all). After
 * weft_init. */
WEFT_API int weft_memory_types(char *buf, size_t len);
/* The WEFT_* runtime variables, one table: index 0..weft_var_count()-1. */
WEFT_API int weft_var_count(void);
WEFT_API int weft_var_get(int index, const char **name, const char **type, const char **default_value,
                          const char **description);
/* The collective algorithms and the effective selection table (built-in
 * rules plus WEFT_COLL_TUNE), as text; weft_info --coll prints it. */
WEFT_API int weft_coll_table(char *buf, size_t len);
/* Build facts, "key=value" space separated (cuda=yes|no, ...). */
WEFT_API const char *weft_build_info(void);
/* Short hwloc summary of this host ("2 cores, 1 NUMA node, 1 package"). */
WEFT_API int weft_host_topology(char *buf, size_t len);
/* The RDMA ports of this host and which one (and, on RoCE, which GID index)
 * weft hands to UCX for this rank, as text: the first line is the decision
 * ("rdma: mlx5_0:1 GID index 3 (RoCE v2, ipv4 ...): why"), the second what
 * was (or, before weft_init, would be) set in UCX_NET_DEVICES /
 * UCX_IB_GID_INDEX, then the rank's GPU, the route to MASTER_ADDR, and one
 * line per candidate (port, GID index, type, family, address, netdev,
 * state, PCI address, locality to the GPU) saying why it won or lost.
 * Works before weft_init (then LOCAL_RANK, if set, names the local rank).
 * WEFT_ERR_TRUNCATE when len was too small (buf holds what fit, ending in
 * "..."). weft_info --rdma prints it; docs/RDMA.md explains the order. */
WEFT_API int weft_rdma_report(char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_H */
