/* The collective framework: components (coll/base, coll/shm, coll/hier, coll/cuda),
 * each a descriptor with its algorithms (one file each), its WEFT_*
 * variables and its per-communicator state; a selection table (the
 * built-in rules are coll/rules.conf); and the front end that validates
 * arguments, selects, builds a schedule and starts it.
 *
 * An algorithm builds its schedule from normalised arguments; it may
 * decline a shape it cannot handle (WEFT_ERR_UNSUPPORTED, through
 * weft_coll_decline), and the next candidate in the selection runs
 * instead. */
#ifndef WEFT_COLL_H
#define WEFT_COLL_H

#include "src/op.h"
#include "src/schedule.h"
#include "src/weft_internal.h"

typedef enum weft_coll_kind {
    WEFT_COLL_BARRIER,
    WEFT_COLL_BCAST,
    WEFT_COLL_REDUCE,
    WEFT_COLL_ALLREDUCE,
    WEFT_COLL_ALLGATHER,
    WEFT_COLL_ALLGATHERV,
    WEFT_COLL_GATHER,
    WEFT_COLL_GATHERV,
    WEFT_COLL_SCATTER,
    WEFT_COLL_SCATTERV,
    WEFT_COLL_REDUCE_SCATTER,
    WEFT_COLL_REDUCE_SCATTER_BLOCK,
    WEFT_COLL_ALLTOALL,
    WEFT_COLL_ALLTOALLV,
    WEFT_COLL_SCAN,
    WEFT_COLL_EXSCAN,
    WEFT_COLL_KINDS
} weft_coll_kind_t;

/* Arguments after the front end's checks: in-place forms resolved (sendbuf
 * points at the data to contribute, possibly inside recvbuf), counts in
 * elements of dtype. */
typedef struct weft_coll_args {
    weft_coll_kind_t kind;
    weft_comm_t comm;
    const void *sendbuf; /* WEFT_IN_PLACE only for alltoall (the algorithm copies recvbuf) */
    void *recvbuf;
    void *const *recvbufs; /* allgather into a list: rank r's block goes to recvbufs[r] */
    size_t count;          /* per rank (allgather, gather, scatter, alltoall, reduce_scatter_block) or total */
    weft_dtype_t dtype;
    size_t esize;
    weft_op_t op;
    int root;
    const int64_t *scounts, *sdispls, *rcounts, *rdispls; /* v-variants */
    size_t bytes;                                         /* message size the selection looks at */
    weft_memtype_t mem;                                   /* where the buffers live (selection key) */
    int on_stream; /* a weft_*_on_stream call: device work goes on `stream` and the call returns at once */
    void *stream;  /* its CUstream (NULL: the legacy default stream) */
} weft_coll_args_t;

typedef struct weft_coll_alg {
    const char *name; /* unique within its collective, e.g. "ring" */
    weft_coll_kind_t kind;
    const char *description;
    /* Adds the algorithm to s, or declines with WEFT_ERR_UNSUPPORTED having
     * changed nothing in s (no step, no watch, no device flag): a staged
     * algorithm builds the selected host algorithm into its own schedule
     * (weft_coll_build_selected, which checks the steps). */
    int (*build)(weft_sched_t *s, const weft_coll_args_t *a);
    /* 1: a stream-ordered call's device work goes on a->stream itself
     * (coll/cuda's kernels). 0: the schedule runs on the host, and the front
     * end keeps the stream's order around it (pt2pt/cuda.h's gate). */
    int stream_ordered;
} weft_coll_alg_t;

const char *weft_coll_kind_name(weft_coll_kind_t kind);

/* ---- components ------------------------------------------------------- */
/* A component's slot in a communicator's collective state. */
enum { WEFT_COLL_COMP_BASE, WEFT_COLL_COMP_SHM, WEFT_COLL_COMP_HIER, WEFT_COLL_COMP_CUDA, WEFT_COLL_COMPS };

/* A threshold an algorithm applies inside itself (rather than a selection
 * rule), shown by weft_info --coll. `var` names the WEFT_* variable that
 * sets it (value then points at that variable), NULL when it is fixed at
 * build time. */
typedef struct weft_coll_param {
    const char *name;
    const char *algs; /* the algorithms that apply it, e.g. "allreduce shm, reduce shm" */
    const int *value;
    const char *unit; /* "bytes", "ranks", "" */
    const char *var;
    const char *desc;
} weft_coll_param_t;

typedef struct weft_coll_component {
    int id; /* WEFT_COLL_COMP_* */
    const char *name;
    const char *description;
    unsigned memtypes;                        /* WEFT_MEM_BIT()s of the buffers its algorithms take */
    const weft_coll_alg_t *const *algorithms; /* NULL-terminated */
    const weft_var_t *vars;                   /* its WEFT_* variables (weft_info prints them) */
    int nvars;
    const weft_coll_param_t *params;
    int nparams;
    /* At weft_init, after the variables are read; NULL: nothing to do. */
    int (*init)(void);
    /* For the rules' gpu= condition (select.c asks the component that takes
     * a->mem): 1 when two or more ranks of a->comm share a GPU, 0 when each
     * has its own, -1 when unknown (no gpu= rule matches). It may set up the
     * component's state on a->comm, a collective step: every member selects
     * for the same call alike. NULL: unknown. */
    int (*gpu_shared)(const weft_coll_args_t *a);
    /* 1 while the shared state its algorithms need on comm is not set up
     * yet and may turn out unusable on every member alike (coll/shm: a
     * segment its creator cannot make, /dev/shm full): a call it takes
     * then gets a fallback behind it (weft_sched_fallback_begin), the
     * algorithm the selection would pick with this component declining,
     * which is what every member's later calls pick once the state is
     * known unusable. NULL: never. */
    int (*unsettled)(weft_comm_t comm);
    /* Frees the component's state on a communicator that goes (its own,
     * a dup's, or a derived node / leader / rail one); NULL: it keeps none. */
    void (*comm_release)(weft_comm_t comm, void *state);
} weft_coll_component_t;

extern const weft_coll_component_t weft_coll_base, weft_coll_shm, weft_coll_hier, weft_coll_cuda;

/* Component `id`'s state on comm (NULL until it set one). */
static inline void *weft_coll_state(weft_comm_t comm, int id)
{
    return comm->coll ? ((void **)comm->coll)[id] : NULL;
}
/* Sets it (components create theirs on first use); WEFT_ERR_NO_MEMORY
 * when coll/'s own record on comm cannot be allocated. */
int weft_coll_state_set(weft_comm_t comm, int id, void *state);

/* A decline (WEFT_ERR_UNSUPPORTED: the next candidate runs). The reason is
 * formatted only when debug logging would show it: declines are expected
 * on the hot path (every call on a leader communicator tries hier). */
#define weft_coll_decline(...)                                                                                         \
    (WEFT_UNLIKELY(weft_log_level >= WEFT_LOG_DEBUG) ? weft_error_quiet(WEFT_ERR_UNSUPPORTED, __VA_ARGS__)             \
                                                     : WEFT_ERR_UNSUPPORTED)

/* Where rank r's block of an allgather-like result lives. */
static inline char *weft_coll_rblock(const weft_coll_args_t *a, int r)
{
    return a->recvbufs ? (char *)a->recvbufs[r] : (char *)a->recvbuf + (size_t)r * a->count * a->esize;
}

/* The data an exchange sends: a->sendbuf, or for the in-place form a copy
 * of the `bytes` in recvbuf taken now (schedule scratch), so the algorithm
 * can receive into recvbuf while still sending its old contents. NULL when
 * out of memory (the error is set, naming `alg`). */
const char *weft_coll_send_source(weft_sched_t *s, const weft_coll_args_t *a, size_t bytes, const char *alg);

/* WEFT_COLL_CHECK (select.c declares it with the framework's variables):
 * every call's schedule starts with a check that all members passed the
 * same call (coll.c). */
extern int weft_coll_check;

/* Builds into s the algorithm the selection picks for a (the first
 * candidate that does not decline), ends the round and adds tail(s, arg)
 * (the steps after it; NULL: none): how coll/cuda's staged algorithms run
 * the host collective on their host copies inside their own schedule.
 * Where the algorithm's component is unsettled on a->comm (coll/coll.h's
 * `unsettled`), the fallback follows (weft_sched_fallback_begin), with the
 * tail again, as the front end does for a call of its own. */
int weft_coll_build_selected(weft_sched_t *s, const weft_coll_args_t *a, weft_sched_fn tail, void *arg);
/* 1 when no component's shared state on comm is still unsettled: the
 * selection then builds no fallback behind an algorithm (a build may add
 * several host collectives to one schedule, as coll/cuda's pipelined staged
 * algorithms do). */
int weft_coll_settled(weft_comm_t comm);

/* The host copies of a call on device buffers (coll/cuda's staged
 * algorithms; stream-ordered calls staged on their stream, coll.c): `in`
 * bytes of input from `src`; `out` bytes of result for recvbuf (the list
 * form of allgather: a block of `block` bytes for each recvbufs[r]); a
 * bcast's input and output are one buffer of `block` bytes (`shared`).
 * WEFT_ERR_UNSUPPORTED (no error set) for the kinds that are not staged. */
typedef struct {
    const void *src;
    size_t in, out, block;
    int shared;
} weft_coll_stage_t;
int weft_coll_stage_extents(const weft_coll_args_t *a, weft_coll_stage_t *x);
/* *h: a's call on host copies hin (input) and hout (output). */
void weft_coll_stage_host_args(const weft_coll_args_t *a, void *hin, void *hout, weft_coll_args_t *h);
/* The pinned host copies of extents x in s's scratch (a pool kept for
 * reuse; a bcast's one buffer serves both): 0, or WEFT_ERR_NO_MEMORY
 * naming alg's call. */
int weft_coll_stage_pinned(weft_sched_t *s, const weft_coll_args_t *a, const weft_coll_stage_t *x, char **hin,
                           char **hout, const char *alg);

/* Selection (select.c): the candidates for a call, best first, ending
 * with every other algorithm of the collective as a fallback. */
int weft_coll_select(const weft_coll_args_t *a, const weft_coll_alg_t **out, int max);
int weft_coll_select_init(void);
void weft_coll_select_finalize(void);
const weft_coll_alg_t *weft_coll_find(weft_coll_kind_t kind, const char *name);
/* An algorithm a hint chose for comm's calls of `kind` on buffers of
 * memory type mem (its component takes them), or NULL. */
const weft_coll_alg_t *weft_coll_forced(weft_comm_t comm, weft_coll_kind_t kind, weft_memtype_t mem);
/* The registry (coll.c): every component's algorithms, NULL-terminated,
 * and which component each belongs to. */
extern const weft_coll_alg_t *const *weft_coll_algorithms;
const weft_coll_component_t *weft_coll_component_of(const weft_coll_alg_t *alg);
extern const weft_coll_component_t *const weft_coll_components[];

/* Block i of count elements split n ways as evenly as possible. */
static inline void weft_coll_block(size_t count, int n, int i, size_t *off, size_t *len)
{
    size_t base = count / (size_t)n, extra = count % (size_t)n, ui = (size_t)i;
    *off = ui * base + (ui < extra ? ui : extra);
    *len = base + (ui < extra ? 1 : 0);
}
/* A hash (FNV-1a) of a counts vector every member passes alike
 * (allgatherv, reduce_scatter): WEFT_COLL_CHECK's records, coll/shm's
 * signatures. */
uint64_t weft_coll_counts_hash(const int64_t *counts, int n);
/* A reduce_scatter's (a->rcounts) or reduce_scatter_block's (a->count
 * each) vector: its length in elements, and this rank's block in it. */
static inline size_t weft_coll_rs_block(const weft_coll_args_t *a, size_t *off, size_t *len)
{
    int me = a->comm->rank;
    if (a->kind != WEFT_COLL_REDUCE_SCATTER) {
        *off = (size_t)me * a->count;
        *len = a->count;
        return a->count * (size_t)a->comm->size;
    }
    size_t total = 0;
    *off = 0;
    for (int r = 0; r < a->comm->size; r++) {
        if (r == me) *off = total;
        total += (size_t)a->rcounts[r];
    }
    *len = (size_t)a->rcounts[me];
    return total;
}
/* Segmented algorithms (reduce binomial, reduce_scatter ring, allreduce
 * ring, scan linear) move large messages in segments of at most this many bytes, so their
 * scratch is a couple of segments whatever the message size. 64 KiB is
 * above UCX's eager/rendezvous switch (8 KiB on shared memory and TCP), so
 * each segment goes zero-copy and the receiver paces the sender (nothing
 * piles up unexpected); it amortises a round's overhead, and two segments
 * stay in a core's L2 cache while they are reduced. */
#define WEFT_COLL_SEG_BYTES ((size_t)64 * 1024)

/* Elements per segment for an element size: segments end on element
 * boundaries. */
static inline size_t weft_coll_seg_elems(size_t esize)
{
    size_t n = WEFT_COLL_SEG_BYTES / (esize ? esize : 1);
    return n ? n : 1;
}
/* Number of segments of count elements (0 for an empty message). */
static inline size_t weft_coll_nsegs(size_t count, size_t seg)
{
    return (count + seg - 1) / seg;
}
/* Segment j of count elements: its first element and its length (0 past the end). */
static inline void weft_coll_seg(size_t count, size_t seg, size_t j, size_t *off, size_t *len)
{
    *off = j * seg < count ? j * seg : count;
    *len = count - *off < seg ? count - *off : seg;
}
static inline int weft_mod(int a, int n)
{
    return ((a % n) + n) % n;
}

/* Binomial trees (gather, scatter): the number of blocks in the subtree of
 * the rank at distance v from the root, and how many of a root child's
 * blocks come before the wrap past rank n - 1. */
static inline int weft_coll_binomial_subtree(int v, int n)
{
    int low = v & -v;
    return v == 0 ? n : low < n - v ? low : n - v;
}
static inline size_t weft_coll_binomial_first_part(int rank, int blocks, int n)
{
    return (size_t)(blocks < n - rank ? blocks : n - rank);
}

/* Shared builders other algorithms reuse. */
int weft_coll_allgather_bruck_build(weft_sched_t *s, const void *send, void *recv, size_t block);
/* The ring allgather (allgather_ring.c) on a's buffers: also coll/cuda's direct allgather on device buffers (the
 * caller marks s device-aware). */
int weft_coll_allgather_ring_build(weft_sched_t *s, const weft_coll_args_t *a);
/* The segmented ring reduce-scatter (reduce_scatter_ring.c), also allreduce
 * ring's first phase: block i of the input is len[i] elements at element
 * off[i] of in; this rank's block, reduced over every rank (and finalised,
 * for AVG), goes to out, which may be that block of in itself (in place).
 * Two segments of scratch; `alg` names the caller in errors. */
int weft_coll_reduce_scatter_ring_build(weft_sched_t *s, const weft_coll_args_t *a, const char *in, char *out,
                                        const size_t *off, const size_t *len, const char *alg);

#endif
