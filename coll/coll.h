/* The collective framework: a registry of algorithms (one file each under
 * coll/base/), a selection table, and the front end that validates
 * arguments, selects, builds a schedule and starts it.
 *
 * An algorithm builds its schedule from normalised arguments; it may
 * decline a shape it cannot handle (WEFT_ERR_UNSUPPORTED), and the next
 * candidate in the selection runs instead. */
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
} weft_coll_args_t;

typedef struct weft_coll_alg {
    const char *name; /* unique within its collective, e.g. "ring" */
    weft_coll_kind_t kind;
    const char *description;
    /* Adds the algorithm to s, or declines with WEFT_ERR_UNSUPPORTED. */
    int (*build)(weft_sched_t *s, const weft_coll_args_t *a);
} weft_coll_alg_t;

const char *weft_coll_kind_name(weft_coll_kind_t kind);

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

/* Selection (select.c): the candidates for a call, best first, ending
 * with every other algorithm of the collective as a fallback. */
int weft_coll_select(const weft_coll_args_t *a, const weft_coll_alg_t **out, int max);
int weft_coll_select_init(void);
void weft_coll_select_finalize(void);
const weft_coll_alg_t *weft_coll_find(weft_coll_kind_t kind, const char *name);
/* The registry (coll.c). */
extern const weft_coll_alg_t *const weft_coll_algorithms[];

/* Block i of count elements split n ways as evenly as possible. */
static inline void weft_coll_block(size_t count, int n, int i, size_t *off, size_t *len)
{
    size_t base = count / (size_t)n, extra = count % (size_t)n, ui = (size_t)i;
    *off = ui * base + (ui < extra ? ui : extra);
    *len = base + (ui < extra ? 1 : 0);
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
/* The segmented ring reduce-scatter (reduce_scatter_ring.c), also allreduce
 * ring's first phase: block i of the input is len[i] elements at element
 * off[i] of in; this rank's block, reduced over every rank (and finalised,
 * for AVG), goes to out, which may be that block of in itself (in place).
 * Two segments of scratch; `alg` names the caller in errors. */
int weft_coll_reduce_scatter_ring_build(weft_sched_t *s, const weft_coll_args_t *a, const char *in, char *out,
                                        const size_t *off, const size_t *len, const char *alg);

#endif
