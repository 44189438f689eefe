/* Internal declarations shared by src/, pt2pt/ and coll/. Not installed. */
#ifndef WEFT_INTERNAL_H
#define WEFT_INTERNAL_H

#include "config.h"
#include "weft.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define WEFT_LOCAL        __attribute__((visibility("hidden")))
#define WEFT_LIKELY(x)    __builtin_expect(!!(x), 1)
#define WEFT_UNLIKELY(x)  __builtin_expect(!!(x), 0)
#define WEFT_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* ---- logging (log.c) --------------------------------------------------- */
enum { WEFT_LOG_ERROR = 0, WEFT_LOG_WARN = 1, WEFT_LOG_INFO = 2, WEFT_LOG_DEBUG = 3, WEFT_LOG_TRACE = 4 };
extern int weft_log_level;
void weft_log_init(void);
void weft_log_set_rank(int rank);
void weft_log_write(int level, const char *fmt, ...) WEFT_PRINTF(2, 3);
#define weft_log(level, ...)                                                                                           \
    do {                                                                                                               \
        if (WEFT_UNLIKELY((level) <= weft_log_level)) weft_log_write((level), __VA_ARGS__);                            \
    } while (0)
#define weft_warn(...)     weft_log(WEFT_LOG_WARN, __VA_ARGS__)
#define weft_info_log(...) weft_log(WEFT_LOG_INFO, __VA_ARGS__)
#define weft_debug(...)    weft_log(WEFT_LOG_DEBUG, __VA_ARGS__)
/* Text from outside the process (a peer's message, a variable) made safe
 * to print: printable ASCII as is, backslash, newline and other bytes
 * escaped (\\, \n, \xNN), cut with "..." to fit cap; returns its length. */
size_t weft_escape(char *out, size_t cap, const char *in, size_t len);

/* ---- errors (error.c) -------------------------------------------------- */
/* Records `status` with a message as this thread's last error, logs it at
 * `level` and returns status, so a failure path is one line:
 *     return weft_error(WEFT_ERR_ARG, "weft_send: dest %d out of range", dest);
 * weft_error logs at debug: the caller gets the status and weft_last_error(),
 * and a warning would say it twice. An error no caller will see (weft goes
 * on without it) is logged with weft_error_at(WEFT_LOG_WARN, ...). */
int weft_error_at(int level, int status, const char *fmt, ...) WEFT_PRINTF(3, 4);
#define weft_error(status, ...) weft_error_at(WEFT_LOG_DEBUG, (status), __VA_ARGS__)
/* Like weft_error but logged at debug level: for outcomes the caller
 * expects and handles (a timeout it polls through, a canceled recv). */
#define weft_error_quiet(status, ...) weft_error_at(WEFT_LOG_DEBUG, (status), __VA_ARGS__)
void weft_error_clear(void);

/* One error path per function: jump to the function's single cleanup label. */
#define WEFT_CHECK_GOTO(expr, rc_var, label)                                                                           \
    do {                                                                                                               \
        (rc_var) = (expr);                                                                                             \
        if (WEFT_UNLIKELY((rc_var) != WEFT_SUCCESS)) goto label;                                                       \
    } while (0)

/* ---- configuration (config.c) ----------------------------------------- */
/* A WEFT_* variable: declared once, in the table of the layer or component
 * that owns it (config.c for the runtime's, each collective component's
 * descriptor for its own); weft_info prints them all. */
typedef enum {
    WEFT_VAR_STRING,
    WEFT_VAR_DOUBLE,
    WEFT_VAR_BOOL,
    WEFT_VAR_INT,
    WEFT_VAR_INT_AUTO,
    WEFT_VAR_LOGLEVEL,
    WEFT_VAR_KIND = 0xff,
    /* or'ed with a kind: every rank must set the same value (compared at
     * init): the collectives' selection inputs and protocol knobs */
    WEFT_VAR_AGREE = 0x100
} weft_var_kind_t;
typedef struct weft_var {
    const char *name;
    weft_var_kind_t kind;
    const char *def;
    const char *desc;
    void *addr;  /* where the value lives: char[size], double or int (auto: -1) */
    size_t size; /* for strings */
} weft_var_t;

enum { WEFT_PT_AUTO = -1, WEFT_PT_OFF = 0, WEFT_PT_ON = 1 };
#define WEFT_PROGRESS_POLL_US_DEFAULT 200
/* WEFT_WAIT_SPIN_US=auto: a rank with CPUs of its own, and one whose
 * machine's ranks share its CPUs (docs/PERFORMANCE.md section 5). */
#define WEFT_WAIT_SPIN_US_DEDICATED 1000
#define WEFT_WAIT_SPIN_US_SHARED    50
/* WEFT_PROGRESS_SPIN_US=auto where the progress thread has a CPU of its own */
#define WEFT_PROGRESS_SPIN_US_SPARE 200
typedef struct weft_config {
    char bootstrap[16];    /* auto | pmix | env | single */
    double timeout;        /* default wait deadline, seconds; 0 = none */
    double init_timeout;   /* bootstrap deadline, seconds */
    int eager_connect;     /* create every endpoint at init */
    int addresses_at_init; /* worlds of at most this many ranks get every UCX address at init */
    int peer_failure;      /* UCX peer failure detection on endpoints */
    int log_level;
    int spin_before_yield;         /* progress polls without news before sched_yield */
    int wait_spin_us;              /* WEFT_WAIT_SPIN_US: microseconds a blocking wait polls without news, then sleeps */
    char progress_thread_text[16]; /* WEFT_PROGRESS_THREAD as given */
    int progress_thread;           /* WEFT_PT_AUTO (resolved at init to on or off), WEFT_PT_OFF or WEFT_PT_ON */
    int progress_poll_us;          /* the thread's longest sleep between polls of work that raises no events */
    int progress_spin_us;          /* WEFT_PROGRESS_SPIN_US: the thread's polling without news before a nap or sleep */
    char host_id[128];             /* overrides the host identity ("" = hostname + boot id) */
    char node_id[32];              /* this rank's explicit node id ("" = from the host id) */
    int ranks_per_node;            /* simulated nodes of this many ranks (0 = off) */
    char cuda[16];                 /* WEFT_CUDA: auto | ucx | staged | off (device buffers in point-to-point) */
    int cuda_stage_chunk;          /* WEFT_CUDA_STAGE_CHUNK: bytes per pinned chunk of the staged path */
    int cuda_stage_pipe;           /* WEFT_CUDA_STAGE_PIPE: collectives' staged device messages pipelined from */
    int cuda_stage_depth;          /* WEFT_CUDA_STAGE_DEPTH: chunks in flight per staged message */
    int cuda_small;                /* WEFT_CUDA_SMALL: auto mode stages device messages up to this size */
    int rdma_select;               /* choose the RDMA port and GID index for UCX at init */
    char rdma_fsroot[512];         /* stands for / when reading sysfs and procfs for that choice */

    /* Who may join (bootstrap/jobkey.h, docs/SECURITY.md). */
    char job_secret[1024];      /* WEFT_JOB_SECRET: the job's shared secret ("" = none) */
    char job_secret_file[1024]; /* WEFT_JOB_SECRET_FILE: a file holding it */
    int store_bind_any;         /* WEFT_STORE_BIND_ANY: the env store may listen on every interface */
    char store_fd[16];          /* WEFT_STORE_FD: rank 0's store listens on this inherited socket (weftrun's) */
    char store_relay[8];        /* WEFT_STORE_RELAY: auto, on or off (ranks reach the env store through node relays) */
    int job_secret_allow_weak;  /* WEFT_JOB_SECRET_ALLOW_WEAK: accept a secret below 128 bits */
} weft_config_t;
extern weft_config_t weft_cfg;
/* Reads every WEFT_* variable (the runtime's and the collective
 * components'); a malformed value fails with WEFT_ERR_ARG naming the
 * variable. */
int weft_config_load(void);
/* A layer above src/ adds its table of WEFT_* variables (static storage)
 * before weft_config_load; registering a table twice is a no-op. */
int weft_config_register(const weft_var_t *table, int n);
/* weft_var_count / weft_var_get over every registered table. */
int weft_config_var_count(void);
int weft_config_var_get(int index, const char **name, const char **type, const char **default_value,
                        const char **description);
/* A hash of the names and values of the variables every rank must set
 * alike (WEFT_VAR_AGREE), exchanged at init. */
uint64_t weft_config_agree_hash(void);
/* Called by every rank when init's exchange found ranks whose
 * weft_config_agree_hash() differs from rank 0's: one more bootstrap
 * exchange (a gather at rank 0, a broadcast of its verdict) finds which
 * variables and which ranks, and every rank fails with WEFT_ERR_ARG
 * naming them. */
struct weft_bootstrap;
int weft_config_agree_fail(struct weft_bootstrap *bs, double deadline);
/* "rank 3", "ranks 0, 2-5, 7" (at most cap bytes; "... (N more)" when cut) */
void weft_format_ranks(char *buf, size_t cap, const int *ranks, int n);

/* ---- global state ------------------------------------------------------ */
struct weft_bootstrap;
struct weft_pt2pt;
typedef struct weft_state {
    int initialized;
    int rank;
    int size;
    int local_rank;
    int local_size;
    int machine_ranks; /* ranks on this rank's machine (hostname and boot id), simulated nodes or not */
    int cpu_sharers;   /* ranks of this machine that may run on this rank's CPUs (itself included) */
    int cpus_shared;   /* the CPUs they may run on: fewer than them is oversubscribed */
    int node;          /* this rank's node index */
    int nnodes;
    int *node_of; /* world rank -> node index (nodes numbered by first rank) */
    uint64_t
        job_id; /* the same on every rank, different for every job: world rank 0's host id, pid and start time hashed */
    uint64_t world_nonce; /* world rank 0's random contribution to the node-map exchange: the world's nonce */
    struct weft_bootstrap *bs;
    struct weft_pt2pt *p2p;
    weft_comm_t world;
} weft_state_t;
extern weft_state_t weft_g;

#define WEFT_CHECK_INIT(fn)                                                                                            \
    do {                                                                                                               \
        if (WEFT_UNLIKELY(!weft_g.initialized))                                                                        \
            return weft_error(WEFT_ERR_NOT_INITIALIZED, "%s: weft is not initialized (or already finalized)", (fn));   \
    } while (0)

/* Deadline helpers: an absolute weft_wtime() value; 0 means none. */
static inline double weft_deadline_from(double timeout_s, double now)
{
    return timeout_s > 0 ? now + timeout_s : 0.0;
}

/* ---- options and hints (options.c) ------------------------------------ */
typedef struct weft_hint {
    char *key;
    char *value;
    int status; /* WEFT_HINT_* */
    char reason[160];
} weft_hint_t;

#define WEFT_OPTIONS_MAGIC 0x774f7074u /* "wOpt" */
enum { WEFT_OPT_NAME = 1, WEFT_OPT_TIMEOUT = 2, WEFT_OPT_ABORT = 4, WEFT_OPT_DEVICE = 8 };
struct weft_options_s {
    uint32_t magic;
    int set; /* WEFT_OPT_* fields given */
    char name[64];
    double timeout;
    int abort_on_error;
    int device;
    weft_hint_t *hints; /* key/value only; status is evaluated per communicator */
    int nhints;
};

/* ---- communicators (comm.c) ------------------------------------------- */
#define WEFT_COMM_MAGIC 0x77436f6du /* "wCom" */
/* A context id (20 bits, the tag's context field) is a slot, a kind and a
 * generation:
 *   19..14  generation (6 bits): the members' creation epoch when the
 *           communicator was made, so a message of a freed communicator
 *           (one that timed out, say, and arrived late) never matches a
 *           later communicator given the same slot;
 *   13..12  kind: 0 the communicator itself, 1..3 its derived node,
 *           leader and rail communicators (which share its slot);
 *   11..0   slot: agreed free on every member at creation.
 * So a process holds up to WEFT_MAX_CONTEXTS live communicators (world
 * included; derived ones do not count). */
#define WEFT_CTX_SLOT_BITS  12
#define WEFT_CTX_KIND_SHIFT 12
#define WEFT_CTX_GEN_SHIFT  14
#define WEFT_CTX_GEN_BITS   6
#define WEFT_CTX_BITS       (WEFT_CTX_GEN_SHIFT + WEFT_CTX_GEN_BITS)
#define WEFT_MAX_CONTEXTS   (1 << WEFT_CTX_SLOT_BITS)
#define WEFT_CTX_SLOT_MASK  ((uint32_t)WEFT_MAX_CONTEXTS - 1)
#define WEFT_CTX_GENS       (1u << WEFT_CTX_GEN_BITS)
/* Slot and generation, without the kind: a communicator and its derived ones. */
#define WEFT_CTX_FAMILY_MASK (WEFT_CTX_SLOT_MASK | ((WEFT_CTX_GENS - 1) << WEFT_CTX_GEN_SHIFT))
static inline uint32_t weft_ctx_make(uint32_t slot, uint32_t kind, uint32_t gen)
{
    return slot | kind << WEFT_CTX_KIND_SHIFT | (gen % WEFT_CTX_GENS) << WEFT_CTX_GEN_SHIFT;
}
struct weft_ft_comm;
struct weft_comm_s {
    uint32_t magic;
    uint32_t context_id; /* agreed by all members; part of every tag (weft_ctx_make) */
    int rank;
    int size;
    int *world_ranks;  /* comm rank -> world rank (NULL for world: identity) */
    double timeout;    /* default wait deadline, seconds; 0 = none */
    unsigned coll_seq; /* collectives started on this communicator */
    int abort_on_error;
    int device;
    int pending;        /* live requests on this communicator */
    weft_hint_t *hints; /* evaluated hints */
    int nhints;
    int gpu_max_ctas, gpu_min_ctas; /* hints max_ctas / min_ctas: coll/cuda's grid bounds (0: its own) */
    int gpu_high_priority;          /* hint is_high_priority_stream: coll/cuda's own stream at high priority */
    int nnodes;                     /* distinct nodes among the members */
    char name[64];
    /* The collective module's state on this communicator (its components'
     * and the algorithms hints chose): opaque here, owned by coll/, NULL
     * until first needed, released through weft_coll_svc->comm_release
     * when the communicator (derived ones too) goes. */
    void *coll;
    struct weft_comm_s *next_free;
    /* Derived sub-communicators (node, leader, rail): their context ids are
     * agreed with this one's at creation (WEFT_SUB_NONE on a derived comm,
     * which has none); the objects are built locally on first use. */
    uint32_t sub_ctx[3];
    struct weft_comm_topo *topo; /* NULL until first asked for */
    /* Fault tolerance (ft.c): set once revoked, here or by another member
     * (then every operation on it fails with WEFT_ERR_REVOKED); the
     * agreements' state, NULL until the first shrink or agree. */
    int revoked;
    int revoked_by;             /* the world rank that revoked it */
    int revoke_sent;            /* this rank told the other members */
    struct weft_comm_s *parent; /* a derived comm's communicator (NULL on others) */
    struct weft_ft_comm *ft;
    /* A secret agreed by the members at creation: every member's random
     * contribution rides in the creation allgather and the lowest parent
     * rank's is kept (the world's: world rank 0's, from the node-map
     * exchange; a derived comm's: its parent's, put through weft_prf64).
     * Names of the communicator's shared resources are derived from it
     * (weft_comm_nonce), so nobody outside the job can predict them. */
    uint64_t nonce;
    /* 1 once this rank made its endpoints to every member on a calling
     * thread (coll.c: a stream-staged call needs them before it returns);
     * -1 once that failed. */
    int connected;
};
int weft_comm_world_create(void);
void weft_comm_world_destroy(void);
/* Validates a communicator handle (fn names the caller in the message). */
int weft_comm_check(weft_comm_t comm, const char *fn);
/* The same, and fails with WEFT_ERR_REVOKED on a revoked one: for every
 * call that communicates on comm. */
int weft_comm_check_usable(weft_comm_t comm, const char *fn);
/* The error of an operation on a revoked comm (naming who revoked it). */
int weft_comm_revoked_error(weft_comm_t comm, const char *fn);
/* The live communicator (not a derived one) whose context id is ctx, or NULL. */
weft_comm_t weft_comm_lookup(uint32_t ctx);
/* This process's creation epoch: a new communicator's generation is the
 * highest epoch among its members, and each member's epoch moves past it. */
uint32_t weft_comm_epoch(void);
/* The slots free here: a bitmap of WEFT_MAX_CONTEXTS bits. */
void weft_comm_free_slots(uint64_t *bits);
/* Builds, without communication, the communicator of parent's ranks
 * `members` (in that order, this rank among them) on context slot `slot`,
 * generation `gen` (agreed by the members), with parent's options;
 * advances the epoch past gen. */
int weft_comm_build(weft_comm_t parent, const int *members, int nmembers, uint32_t slot, uint32_t epoch,
                    const char *name, weft_comm_t *out);
/* Calls fn on every live communicator (world included, derived ones not). */
void weft_comm_foreach(void (*fn)(weft_comm_t comm, void *arg), void *arg);
static inline int weft_comm_spans_nodes(weft_comm_t comm)
{
    return comm->nnodes > 1;
}
static inline int weft_comm_world_rank_of(weft_comm_t comm, int rank)
{
    return comm->world_ranks ? comm->world_ranks[rank] : rank;
}
/* comm's nonce (see struct weft_comm_s): for names of its shared
 * resources, through weft_prf64 only, so that a name seen does not give
 * the nonce away. */
static inline uint64_t weft_comm_nonce(weft_comm_t comm)
{
    return comm->nonce;
}
/* 64 random bits from the kernel (getrandom, else /dev/urandom; only when
 * both fail, which Linux since 3.17 does not, a hash of the clock, pid and
 * addresses, with a warning). */
uint64_t weft_random64(void);
/* A keyed pseudo-random function (SipHash-2-4 of two words under the key
 * (key, 0)): outputs for any messages tell nothing about the key or about
 * the output for another message. */
uint64_t weft_prf64(uint64_t key, uint64_t m0, uint64_t m1);
/* ---- topology of a communicator and its derived sub-communicators ------ */
/* Built from the node map on first use, without communication, and cached
 * on the communicator (freed with it). Nodes are numbered by their first
 * member in comm-rank order; a node's leader is its lowest comm rank; a
 * rank's local index is its position among its node's members. */
enum { WEFT_SUB_NODE = 0, WEFT_SUB_LEADER = 1, WEFT_SUB_RAIL = 2, WEFT_SUB_KINDS = 3 };
#define WEFT_SUB_NONE UINT32_MAX
typedef struct weft_comm_topo {
    int nnodes;
    int *node_of;   /* comm rank -> node index */
    int *local_of;  /* comm rank -> local index on its node */
    int *node_size; /* node index -> members */
    int *leader_of; /* node index -> the leader's comm rank */
    int equal;      /* every node has the same number of members */
    int my_node, my_local;
    int built[WEFT_SUB_KINDS];
    struct weft_comm_s *sub[WEFT_SUB_KINDS];
} weft_comm_topo_t;
/* comm's topology, or NULL with the error set (out of memory). */
const weft_comm_topo_t *weft_comm_topo(weft_comm_t comm);
/* The node, leader or rail sub-communicator containing this rank: members
 * in comm-rank order; the leader comm has one rank (the leader) per node
 * and *out is NULL on other ranks; rail r holds the ranks of local index r.
 * Built locally on first use (the context ids were agreed at comm's
 * creation), cached on comm. WEFT_ERR_UNSUPPORTED on a derived comm. */
int weft_comm_derived(weft_comm_t comm, int kind, weft_comm_t *out);

/* A wait on comm ended in rc: aborts the job if the communicator asked for
 * that and rc is a timeout or a communication failure. */
void weft_comm_error_policy(weft_comm_t comm, int rc);

/* Applies options (and the parent's, inherited) to a new communicator and
 * evaluates every hint; logs one line per hint not applied. */
int weft_options_apply(weft_comm_t comm, weft_comm_t parent, weft_options_t opts, const char *default_name);
void weft_hints_free(weft_hint_t *hints, int n);

/* ---- datatypes (dtype.c) ---------------------------------------------- */
/* The most bytes a buffer, or an offset into one, may span: pointer
 * arithmetic past PTRDIFF_MAX is undefined, and no process maps that much. */
#define WEFT_MAX_BYTES ((uint64_t)PTRDIFF_MAX)
/* *out = a * b when the product is at most WEFT_MAX_BYTES: 0, else 1 (*out
 * untouched). The one overflow check for every count x element size (x
 * ranks) that becomes a byte length or an offset, point-to-point's and the
 * collectives' alike. */
static inline int weft_mul_bytes(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t p;
    if (__builtin_mul_overflow(a, b, &p) || p > WEFT_MAX_BYTES) return 1;
    *out = p;
    return 0;
}
/* Validates (buf, count, dtype) and returns the byte length in *bytes. */
int weft_buffer_check(const void *buf, int64_t count, weft_dtype_t dtype, const char *fn, const char *what,
                      size_t *bytes);

/* ---- memory types --------------------------------------------------- */
/* Where a buffer lives: part of a collective's selection key (an
 * algorithm's component says which types it takes) and, with CUDA
 * support, of how point-to-point moves it. Host is the only type weft
 * detects today. */
typedef enum weft_memtype { WEFT_MEM_HOST = 0, WEFT_MEM_CUDA = 1, WEFT_MEM_TYPES } weft_memtype_t;
#define WEFT_MEM_BIT(m) (1u << (unsigned)(m))
static inline const char *weft_memtype_name(weft_memtype_t m)
{
    return m == WEFT_MEM_HOST ? "host" : m == WEFT_MEM_CUDA ? "cuda" : "?";
}

/* ---- progress engine (progress.c) ------------------------------------- */
/* A progress hook is called on every weft_progress() pass (collective
 * schedules, deadline checks). It returns the number of events it handled. */
typedef int (*weft_progress_fn)(void *arg);
int weft_progress_register(weft_progress_fn fn, void *arg);
void weft_progress_unregister(weft_progress_fn fn, void *arg);
/* Yields the CPU after many empty polls, so oversubscribed ranks share
 * cores; returns 1 when it yielded (a yield may take a time slice). */
int weft_progress_idle(unsigned *idle_polls, int events);
/* A blocking wait past its spin budget (WEFT_WAIT_SPIN_US): what it knows
 * between its sleeps (zeroed at the start and after news). */
typedef struct weft_wait_sleep {
    unsigned busy_arms; /* arms in a row that found news, without a poll finding any */
    double quiet_since; /* the wait's last news */
} weft_wait_sleep_t;
/* A doorbell in memory that the ranks of a node share (coll/shm's
 * segment): a wait whose only pending steps poll flags there sleeps on its
 * own bell (a futex) instead of napping, and a rank that raises a flag
 * rings the bells of the ranks asleep. The ring is best effort: a poster
 * looks at `sleepers` without a fence, so a wait still sleeps no longer
 * than the nap it would have taken. */
typedef struct weft_bell {
    _Atomic uint32_t ring;   /* the futex word: every ring bumps it */
    _Atomic uint32_t asleep; /* 1 while its owner sleeps on it (a ringer clears it) */
} weft_bell_t;
typedef struct weft_bell_ref {
    weft_bell_t *bell;          /* the waiter's own */
    _Atomic uint32_t *sleepers; /* the owners of the group's bells asleep: ringers look at the bells only when > 0 */
} weft_bell_ref_t;
/* Wakes b's owner when it sleeps on it (a system call then). */
void weft_bell_ring(weft_bell_t *b);
/* Before the memory [base, base + len) holding bells goes away (under the
 * API lock): a progress thread napping on one of them is woken and lets
 * go of it first. */
void weft_progress_bell_unmap(const void *base, size_t len);
/* Sleeps once: until the progress thread completes req, when the thread
 * runs with other work and this is the application's call (req NULL, a
 * probe's sleep, never hands over); else until UCX's event fd fires or,
 * while something pending raises no events (shared-memory flags), for a
 * nap that grows with the time without news; never past `deadline` (0:
 * none) nor the next liveness check (WEFT_LIVENESS_POLL_S). The caller
 * polls again after it and reads the clock. */
void weft_wait_sleep(weft_wait_sleep_t *ws, weft_request_t req, double now, double deadline);
/* The registered hooks alone (weft_progress: the transport, then these). */
int weft_progress_hooks(void);

/* ---- the progress thread (WEFT_PROGRESS_THREAD, progress.c) ------------- */
/* With it on, a thread of weft's own advances pending operations while the
 * application computes, so rendezvous messages, collective schedules and
 * the callbacks of weft_request_on_complete move between the
 * application's calls (OSU's overlap). weft stays FUNNELED: every API call
 * holds weft_api_lock from its outermost entry to its return
 * (WEFT_API_ENTER), and the thread runs only when it can take the lock
 * without waiting and no call is asking for it, so the two never run weft
 * at once and the application's calls go first. When it finds nothing to
 * do it sleeps: on the transport's event fd while something pending will
 * raise events (ARMED), on its own wake-up descriptor when nothing is
 * pending (IDLE), napping between polls while a pending operation raises
 * no events (shared-memory flags). IDLE, it is dormant: it clears
 * weft_api_locking before it lets go of the lock, and calls take no lock
 * (a blocking ping-pong runs as with the thread off) until one leaves
 * something pending: on its way out it sets weft_api_locking again and
 * wakes the thread, which runs only after reading it set. Off, or dormant,
 * an API call pays a branch and a counter on the way in and out. */
#include <pthread.h>
#include <stdatomic.h>
/* Calls take the lock: the thread runs and is not dormant. Stored with
 * release, loaded with acquire: a call that finds it clear sees what the
 * thread's last pass wrote. */
extern _Atomic int weft_api_locking;
/* The lock: 0 free, 1 held. A call takes it with one
 * exchange and, should the thread hold it for a pass, spins for it
 * (yielding after a while: weft_api_lock_slow); the thread only tries it,
 * so releasing it is a store, and nobody ever sleeps on it. */
extern _Atomic int weft_api_lock;
extern _Atomic int weft_api_wanted; /* a call is spinning for the lock */
/* Who holds it. A call made inside another (internal code calls the API)
 * finds its own kind here and does not lock again: an application thread's
 * whenever an application thread holds it (one at a time may call weft),
 * the progress thread's when it does and weft_pt_self (a thread-local, read
 * only then) says this is it. No thread-local on the fast path: in a shared
 * library each access is a call to __tls_get_addr. */
enum { WEFT_OWNER_NONE = 0, WEFT_OWNER_APP = 1, WEFT_OWNER_PT = 2 };
extern _Atomic int weft_api_owner;
extern _Thread_local int weft_pt_self;
void weft_api_lock_slow(void);
/* The thread's state and the posting side's kick, both under the lock. */
enum { WEFT_PT_RUNNING = 0, WEFT_PT_ARMED = 1, WEFT_PT_IDLE = 2, WEFT_PT_NAPPING = 3 };
extern int weft_pt_state;
/* Set by a call that posted work the thread's transport events may not
 * announce (a schedule that polls shared memory): a thread asleep (ARMED
 * on the transport's fd, NAPPING between polls, or napping until the lock
 * is free) is woken as the call returns, once. */
extern int weft_pt_kick;
/* 1 while the thread sleeps (pt_sleep), whatever for. */
extern _Atomic int weft_pt_asleep;
/* The thread is asleep or about to be: it set its state under the lock
 * before its naps; a nap after a failed try of the lock is seen once
 * weft_pt_asleep is stored (pt_sleep's fence pairs with this one), and a
 * post in between waits out that nap (at most 1 ms). */
static inline int weft_pt_sleeps(void)
{
    if (weft_pt_state != WEFT_PT_RUNNING) return 1;
    atomic_thread_fence(memory_order_seq_cst);
    return atomic_load_explicit(&weft_pt_asleep, memory_order_relaxed);
}
/* Before waking the thread for work a call leaves: it is to run a pass
 * (and calls to take the lock, should it have gone dormant). */
static inline void weft_progress_thread_mark_roused(void)
{
    weft_pt_state = WEFT_PT_RUNNING;
    weft_pt_kick = 0;
    atomic_store_explicit(&weft_api_locking, 1, memory_order_release);
}
/* Requests allocated and not complete (request.c): what the thread may
 * have to advance. */
extern int weft_request_pending;
void weft_progress_thread_wake(void);
/* Starts fn(arg) on a thread of weft's own with every signal blocked (the
 * process's signals belong to the application's threads), named `name`
 * unless NULL. Returns 0 or pthread_create's error. */
int weft_thread_start(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg, const char *name);
/* Depth of the application's calls made without the lock (the thread off
 * or dormant): only the outermost one's return may rouse the thread (an
 * inner call's, inside a blocking collective, would let it run beside its
 * caller). One application thread at a time is in weft: a plain int. */
extern int weft_api_depth;
static inline int weft_api_enter(void)
{
    if (WEFT_LIKELY(!atomic_load_explicit(&weft_api_locking, memory_order_acquire))) {
        weft_api_depth++;
        return 0;
    }
    int owner = atomic_load_explicit(&weft_api_owner, memory_order_relaxed);
    if (owner == WEFT_OWNER_APP || (WEFT_UNLIKELY(owner == WEFT_OWNER_PT) && weft_pt_self)) return 2; /* nested */
    if (WEFT_UNLIKELY(atomic_exchange_explicit(&weft_api_lock, 1, memory_order_acquire))) weft_api_lock_slow();
    atomic_store_explicit(&weft_api_owner, WEFT_OWNER_APP, memory_order_relaxed);
    return 1;
}
/* Lets go of the lock a call holds (its return, or a wait that hands its
 * request to the thread), waking the thread when it sleeps with nothing
 * pending and something is now, or armed on events that work this call
 * posted may never raise. */
static inline void weft_api_unlock(void)
{
    int wake = weft_request_pending > 0 &&
               (WEFT_UNLIKELY(weft_pt_state == WEFT_PT_IDLE) || (WEFT_UNLIKELY(weft_pt_kick) && weft_pt_sleeps()));
    if (wake) weft_progress_thread_mark_roused(); /* under the lock; the wake-up after it */
    atomic_store_explicit(&weft_api_owner, WEFT_OWNER_NONE, memory_order_relaxed);
    atomic_store_explicit(&weft_api_lock, 0, memory_order_release);
    if (wake) weft_progress_thread_wake();
}
/* A call that took no lock (the thread off or dormant) and leaves work
 * pending: the thread, if dormant, runs again (marked, then woken). */
void weft_progress_thread_rouse(void);
static inline void weft_api_leave(const int *how)
{
    if (WEFT_LIKELY(*how == 0)) {
        if (--weft_api_depth == 0 && WEFT_UNLIKELY(weft_pt_state == WEFT_PT_IDLE) && weft_request_pending > 0)
            weft_progress_thread_rouse();
        return;
    }
    if (*how == 1) weft_api_unlock();
}
/* The first statement of every API function but weft_wtime, weft_strerror
 * (pure) and weft_comm_abort (it must not wait for a blocked call). */
#define WEFT_API_ENTER() int weft_api_how_ __attribute__((cleanup(weft_api_leave), unused)) = weft_api_enter()
/* At init, before the transport (which asks for events only when the
 * thread will run): resolves WEFT_PROGRESS_THREAD=auto to on where this
 * rank's CPUs leave one spare beyond the ranks of this machine
 * (host_ranks) that share them, else off. */
void weft_progress_thread_resolve(int host_ranks);
/* At the end of a successful init (WEFT_PROGRESS_THREAD on), and at the
 * start of finalize: stops and joins it (the caller holds the lock; the
 * thread never waits for it). */
int weft_progress_thread_start(void);
void weft_progress_thread_stop(void);
/* 1 while the thread runs (tests). */
int weft_progress_thread_running(void);
/* Passes the thread made holding the lock so far (tests: a blocking
 * ping-pong leaves it asleep). */
unsigned long weft_progress_thread_passes(void);

/* ---- liveness (progress.c) ---------------------------------------------- */
/* Ranks known to be dead, from whichever source noticed first: the
 * bootstrap (the env store's notices, PMIx events) or UCX endpoint errors.
 * Nothing per message consults it: waits do, and only while idle. Main
 * thread only (a source with its own thread queues and reports through the
 * bootstrap's poll_lost). */
extern unsigned weft_lost_count; /* world ranks known lost; 0 on the happy path */
int weft_liveness_init(int size);
void weft_liveness_finalize(void);
/* Records a world rank as lost; the first reason stays. Ignored before init. */
void weft_rank_lost(int world_rank, const char *fmt, ...) WEFT_PRINTF(2, 3);
/* Why a world rank is lost, or NULL while it is not known to be. */
const char *weft_rank_lost_why(int world_rank);
/* The rank of comm recorded lost first (the likely cause), or -1. */
int weft_comm_lost_member(weft_comm_t comm);
/* The world rank recorded lost first, or -1. */
int weft_world_lost_rank(void);
/* "rank R (world rank W) lost: why" for comm rank R of comm. */
void weft_lost_describe(weft_comm_t comm, int rank, char *buf, size_t len);
/* Asks the bootstrap for news of dead ranks: at most every
 * WEFT_LIVENESS_POLL_S unless `force`. Called from idle waits only;
 * `since` is when the calling wait began (0: unknown), so a bootstrap
 * whose question costs its launcher something asks only on behalf of
 * waits that are stuck, not of every short one. */
#define WEFT_LIVENESS_POLL_S 0.01
void weft_liveness_poll(double now, double since, int force);

/* ---- the transport below (registered by pt2pt/ at init) ---------------- */
/* Tag classes: user point-to-point, collective schedules, control traffic
 * and weft_comm_create_group's agreement never match each other (pt2pt/pt2pt.h has the bit layout). */
enum { WEFT_TAG_CLASS_USER = 0, WEFT_TAG_CLASS_COLL = 1, WEFT_TAG_CLASS_CTRL = 2, WEFT_TAG_CLASS_CREATE = 3 };
/* OR'ed into a class passed to isend / irecv (never on the wire): the
 * buffer may be device memory, classify it as a user message's (a
 * collective schedule on device buffers, weft_sched_device). */
#define WEFT_TAG_CLASS_DEVICE 0x100u
/* OR'ed into a send's class (never on the wire): synchronous mode, the
 * send completes once the receiver has matched it (weft_issend). */
#define WEFT_TAG_SEND_SYNC 0x200u
/* Bits of the tag field a collective schedule may use. */
#define WEFT_COLL_TAG_BITS 23
typedef struct weft_transport_ops {
    int (*isend)(const void *buf, size_t bytes, int dest, unsigned cls, int tag, weft_comm_t comm, weft_request_t *out);
    int (*irecv)(void *buf, size_t bytes, int source, unsigned cls, int tag, weft_comm_t comm, weft_request_t *out);
    /* 1 when a message from source (class cls, tag) on comm has arrived and
     * waits unreceived, else 0; it stays there (a freed communicator's are
     * discarded). */
    int (*arrived)(int source, unsigned cls, int tag, weft_comm_t comm);
    int (*progress)(void);
    /* Which transports/devices reach a world rank ("sysv/memory cma/memory"). */
    int (*peer_info)(int world_rank, char *buf, size_t len);
    /* A control message (revoke notices, agreements) to a world rank: sent
     * in the background (buf is copied), delivered on the peer, whatever it
     * is waiting on, through weft_ft_deliver. */
    int (*ctrl_send)(int world_rank, const void *buf, size_t len);
    /* Receives and discards every message that has arrived with a context
     * id equal to ctx on the bits of ctx_mask: a revoked communicator's
     * traffic (its senders' pending sends complete), or a freed one's that
     * came late. */
    int (*discard)(uint32_t ctx, uint32_t ctx_mask);
    /* The progress thread's sleep: a descriptor that becomes readable when
     * the transport has news (-1: none, the thread then polls), and arm,
     * which asks for that news: 1 armed (sleep), 0 news already there
     * (progress first), < 0 an error (the thread polls). */
    int (*event_fd)(void);
    int (*arm)(void);
    /* Makes the endpoints to these world ranks that do not exist yet, at
     * once: a schedule names the ranks it will send to when it starts, so
     * their addresses come in one fetch rather than one per round (NULL:
     * endpoints come with the first send). Failures are left to the sends. */
    int (*connect)(const int *world_ranks, int n);
} weft_transport_ops_t;
extern const weft_transport_ops_t *weft_xport;
/* The transport's life cycle, called by the composition root (init.c);
 * pt2pt/ defines them and registers weft_xport in weft_p2p_init. */
int weft_p2p_init(struct weft_pt2pt **out, struct weft_bootstrap *bs, double deadline);
void weft_p2p_finalize(struct weft_pt2pt *p2p, double deadline);
/* Whether this UCX build loads its verbs module (libuct_ib, component
 * "ib"): builds configured --without-verbs cannot use an RDMA NIC at all.
 * Asked at init before weft_p2p_init, to decide what to hand UCX. */
int weft_p2p_ucx_has_verbs(void);
int weft_p2p_flush(double deadline);
/* At finalize: receives and drops what waits unreceived (a sender's flush
 * waits for it), and says so once (weft_p2p_report_unreceived). */
void weft_p2p_drop_unreceived(void);
void weft_p2p_report_unreceived(void);
/* After the closing barrier: the last unreceived messages dropped, and a
 * moment (at most 1 s) for the sends another rank drops; then the report. */
void weft_p2p_settle(double deadline);

/* ---- fault tolerance (ft.c) --------------------------------------------- */
/* A control message from world rank `from` (called by the transport from
 * its progress: copies and queues; weft_progress handles it right after). */
void weft_ft_deliver(int from, const void *buf, size_t len);
int weft_ft_init(void);
void weft_ft_finalize(void);
/* Marks comm (and its derived comms) revoked, fails their pending
 * requests; `by` is the world rank that revoked it. */
void weft_ft_revoke_local(weft_comm_t comm, int by);
/* A new communicator was built here: applies what arrived for it before. */
void weft_ft_comm_created(weft_comm_t comm);
/* comm goes: releases its agreement state (decisions stay answerable). */
void weft_ft_comm_release(weft_comm_t comm);
/* weft_finalize's closing barrier once ranks are lost: an agreement among
 * the world's survivors, within deadline. */
int weft_ft_barrier(double deadline);
/* Tests only (white-box fault injection): called after this rank, as an
 * agreement's leader, sent `what` ("accept", "decide") to comm rank `to`. */
extern void (*weft_ft_test_hook)(const char *what, int to);
/* Fails comm's pending requests (and its derived comms') with status err:
 * receives and collectives are canceled with it (request.c). */
void weft_request_fail_comm(weft_comm_t comm, int err);

/* ---- collective services (registered by coll/ at init) ---------------- */
/* What the runtime core needs from the collectives module, e.g. to create
 * communicators: blocking, with the communicator's deadline. */
typedef struct weft_coll_services {
    /* Gathers `bytes` from every member of comm into recv (rank order). */
    int (*allgather)(weft_comm_t comm, const void *send, void *recv, size_t bytes);
    /* recv = send reduced with op over every member (count elements). */
    int (*allreduce)(weft_comm_t comm, const void *send, void *recv, size_t count, weft_dtype_t dtype, weft_op_t op);
    /* For a "<collective>_algorithm" hint: makes the algorithm comm's
     * first candidate for that collective; returns 1, or 0 with a reason
     * when the collective is unknown (-1), has no such algorithm (-2), or
     * memory ran out (-3). */
    int (*force_algorithm)(weft_comm_t comm, const char *collective, size_t len, const char *name, char *why,
                           size_t why_len);
    /* A communicator is being freed: releases what coll/ keeps on it (comm->coll). */
    void (*comm_release)(weft_comm_t comm);
} weft_coll_services_t;
extern const weft_coll_services_t *weft_coll_svc;
/* The collective module's entry points for the composition root (init.c)
 * and the variable table (config.c): defined in coll/coll.c, which walks
 * its components' descriptors. */
int weft_coll_init(void);
void weft_coll_finalize(void);
/* coll/ hands its variable tables to config (weft_config_register); the
 * top floor (init.c) calls it before any variable is read. */
void weft_coll_register_vars(void);

/* ---- host topology (topo/) --------------------------------------------- */
/* hwloc summary of this host (topo/hwloc.c). */
int weft_topo_summary(char *buf, size_t len);
/* This process's host identity: hash of hostname and boot id (topo/node.c). */
uint64_t weft_topo_host_id(void);
/* The node map (one bootstrap allgather of node ids): fills weft_g.node,
 * nnodes, node_of, local_rank, local_size. Node id = WEFT_NODE_ID, else
 * the host id (WEFT_HOST_ID or hostname + boot id), split into simulated
 * nodes of WEFT_RANKS_PER_NODE ranks when set. Local rank and size come
 * from LOCAL_RANK / LOCAL_WORLD_SIZE or the launcher when given (and no
 * simulated nodes), else from the node map. */
int weft_topo_node_map(struct weft_bootstrap *bs, double deadline);
void weft_topo_node_map_free(void);
/* The record a rank sends in the node-map exchange, as this process would
 * send it but for a rank on node `node_id` of machine `machine`: what the
 * scale harness's simulated ranks send (contrib/scale). Returns its size
 * (0 when cap is too small). */
size_t weft_topo_node_record(void *out, size_t cap, uint64_t machine, int64_t node_id);

#endif
