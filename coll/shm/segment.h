/* The shared-memory segment of a communicator whose members share one
 * node: its life cycle (segment.c: created on first use, attached,
 * released, stale ones swept), its layout, and the flag primitives the
 * coll/shm algorithms build on (op begin and end, publish and wait,
 * claiming a slot, the head lines, the tree's parents and children, length
 * checks, a message down the tree, the CMA lend and read). Each
 * algorithm's protocol and its own control fields are in its file:
 * barrier_shm.c, bcast_shm.c, bcast_shm_cma.c, allgather_shm.c and
 * allgather_shm_cma.c (their shared state: allgather.h), alltoall_shm.c,
 * alltoall_shm_cma.c, reduce_scatter_shm.c, reduce_scatter_shm_cma.c,
 * reduce_shm.c, allreduce_shm.c (shm, shm_chunked, shm_allread),
 * allreduce_shm_ll.c and allreduce_shm_cma.c; the reductions through the
 * slots share reduce_tree.c (the pieces and the tree's way up) and
 * reduce_chunked.c (the chunked pieces), the single-copy ones
 * weft_shm_cma_reduce.
 *
 * Layout (one segment per communicator, created on first use):
 *   header            one page: magic, creator pid, host id, size, ranks,
 *                     the attach count, the creator's settings
 *   ctrl[n]           per rank, 128 bytes (two cache lines, so the adjacent
 *                     line prefetcher does not couple neighbours), written
 *                     only by that rank: first its arrived / done sequence
 *                     counters, the buffer it lends (shm_cma) and its
 *                     slots' call signatures, what a reader needs once
 *                     `arrived` is seen; then `mapped`. Bytes of each line
 *                     belong to the algorithm running, which lays its own
 *                     fields over them (weft_shm_ctrl_t)
 *   data[n][NBUF]     per rank WEFT_SHM_NBUF slots (collective k uses slot
 *                     k % NBUF), each a 64-byte head line (a sequence
 *                     word and up to WEFT_SHM_INLINE bytes of data) alone
 *                     in a 128-byte pair, and a body of WEFT_SHM_SLOT bytes
 *   ll[n][NBUF]       per rank and slot, WEFT_SHM_LL_LINES flagged lines
 *                     (56 bytes of data and a sequence word each) that only
 *                     shm_ll writes, so a word there is always a sequence
 *                     word; part of the slot for reuse (weft_shm_claim)
 *
 * Collective k (the k-th shared-memory collective on the communicator,
 * counted by every member in the same order) publishes a counter by
 * storing k + 1 with release order; readers load with acquire order and
 * compare with >=. A rank publishes done = k + 1 once it will not read
 * any slot of collective k again, and writes its slot for collective k
 * only when the ranks that read it in its previous use (collective
 * k - NBUF or earlier: its parent, its children or everyone, recorded
 * when it wrote it) published done for that collective. Done counters
 * read are cached, so a tree collective usually reads none.
 *
 * The algorithms that pass data through the slots (the tree ones,
 * shm_allread, the chunked allreduce) signal through the head line of the
 * slot they wrote: seq = 2k + 1 (PARTIAL) when a rank's partial or input
 * is there, 2k + 2 (RESULT) when the message or the result is; the line
 * also carries the call's signature (datatype, op, root and the whole
 * message's length: weft_shm_sig), checked by the first piece's readers
 * (ranks that passed different arguments fail instead of taking wrong
 * bytes). A message of at most WEFT_SHM_INLINE bytes sits in the
 * same line as its sequence word, so a reader's one cache miss brings
 * both. Results and messages up to WEFT_SHM_FLAT_MAX bytes, and a
 * barrier's release, are read by every rank straight from the root's slot
 * instead of hopping down the tree (at 8-32 ranks one hop with many
 * readers of a line measured faster than two or three with few).
 *
 * The tree of radix R (WEFT_SHM_RADIX) is over the ranks relative to the
 * root, v = (rank - root) mod n: v's parent is v with its lowest nonzero
 * base-R digit cleared, so groups of R consecutive ranks (neighbouring
 * cores under the usual packed binding) meet first and the depth is
 * ceil(log_R n). A parent polls its children (arrivals, partial
 * reductions) and its children poll it (release, data); with R >= n the
 * tree is flat. */
#ifndef WEFT_COLL_SHM_SEGMENT_H
#define WEFT_COLL_SHM_SEGMENT_H

#include "coll/coll.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* Bytes one slot holds: the largest message (per rank for allgather, the
 * whole vector otherwise) the shared-memory algorithms take; above it they
 * decline and a base algorithm runs. 64 KiB x 4 slots x 64 ranks = 16 MiB
 * of address space (pages are touched only by the sizes used). */
#define WEFT_SHM_SLOT ((size_t)64 * 1024)
/* The single-copy (CMA) algorithms take messages (blocks) from this size on. */
#define WEFT_SHM_CMA_MIN ((size_t)16 * 1024)
/* A slot's head line: its sequence word, the signature of the call it
 * belongs to (weft_shm_sig: datatype, op, root, the whole message's
 * length), so a reader whose call differs can fail instead of taking the
 * wrong bytes, and the bytes of a message that fits beside them. */
#define WEFT_SHM_INLINE 48
typedef struct weft_shm_head {
    _Atomic uint64_t seq; /* 2k + 1: partial of collective k here; 2k + 2: its message / result */
    uint64_t sig;         /* the collective's signature, every piece */
    unsigned char inl[WEFT_SHM_INLINE];
} weft_shm_head_t;
/* The head line sits alone in a 128-byte pair of lines, its body after
 * it: the adjacent-line prefetcher fetches lines in pairs, and a poller of
 * the head would otherwise pull (and keep shared) a body line its writer is
 * about to fill. */
#define WEFT_SHM_HEAD_SPAN 128
#define WEFT_SHM_SLOT_STRIDE (WEFT_SHM_HEAD_SPAN + WEFT_SHM_SLOT)
enum { WEFT_SHM_PARTIAL = 1, WEFT_SHM_RESULT = 2 };
/* shm_ll's flagged lines: WEFT_SHM_LL_DATA bytes of data (a multiple of
 * every element size) and the line's sequence word, which carries
 * 2k + 1 (an input) or 2k + 2 (a reduced line) in its low
 * WEFT_SHM_LL_SEQ_BITS bits and the writer's signature in its top 20
 * (weft_shm_sig_ll: datatype, op, message length; WEFT_SHM_LL_BAD: a
 * writer that found the ranks' calls differ), stored after the data with
 * release order: one transfer of the line brings data and flag. */
#define WEFT_SHM_LL_DATA 56
#define WEFT_SHM_LL_LINES 128
/* One line more than the lines: with a span of a multiple of 4 KiB every
 * rank's line j would sit in one set of the L1 cache (12 ways, and an
 * owner reads line j of 16-32 ranks); one line more moves each rank's
 * lines NBUF sets on. */
#define WEFT_SHM_LL_SPAN ((size_t)(WEFT_SHM_LL_LINES + 1) * 64)
#define WEFT_SHM_LL_MAX ((size_t)WEFT_SHM_LL_LINES * WEFT_SHM_LL_DATA)
#define WEFT_SHM_LL_SEQ_BITS 44
#define WEFT_SHM_LL_BAD      ((UINT64_C(1) << (64 - WEFT_SHM_LL_SEQ_BITS)) - 1)
/* 2k + 2 must fit the sequence bits: shm_ll declines on a communicator
 * past this many shared-memory collectives (2^42, a margin below 2^43;
 * 50 days of back-to-back 1 us calls). */
#define WEFT_SHM_LL_OPS_MAX (UINT64_C(1) << (WEFT_SHM_LL_SEQ_BITS - 2))
typedef struct weft_shm_ll_line {
    unsigned char d[WEFT_SHM_LL_DATA];
    _Atomic uint64_t seq;
} weft_shm_ll_line_t;
_Static_assert(sizeof(weft_shm_ll_line_t) == 64, "a flagged line is one cache line");
_Static_assert(WEFT_SHM_LL_SPAN % 4096 != 0, "line j of consecutive ranks in different L1 sets");
_Static_assert(WEFT_SHM_LL_MAX < (1u << 13), "an LL message's length fits its 13 bits of the line's signature");
/* Slots per rank: up to NBUF - 1 collectives may be in flight between the
 * fastest and the slowest rank before the fastest waits (a reduce's
 * leaves, a bcast's root leave at once). */
#define WEFT_SHM_NBUF 4
/* A rank's flag lines, written only by that rank. The generic fields sit
 * beside bytes that belong to the algorithm running (alg_first,
 * alg_second): an algorithm that needs fields of its own lays a struct of
 * its file over them (WEFT_SHM_CTRL_ALG), so its readers find them in the
 * same line as before, and no other algorithm sees them. */
typedef struct weft_shm_ctrl {
    /* first line: what a reader needs once `arrived` is seen */
    _Atomic uint64_t arrived; /* this rank's data for collective k is in its slot */
    /* the algorithm's word beside the arrival (allreduce_shm_cma: its chunk's flag) */
    _Alignas(uint64_t) unsigned char alg_first[8];
    _Atomic uint64_t done; /* this rank finished reading collective k */
    /* shm_cma: the buffer this rank lends for its current collective (its
     * pid, address, and the call's signature, which says its length:
     * weft_shm_cma_lend), written before it publishes `arrived` and left
     * alone until the readers' `done` says they finished. */
    int64_t cma_pid;
    uint64_t cma_addr;
    uint64_t cma_sig;
    /* per slot, the 32-bit signature of its last contribution
     * (weft_shm_sig32, weft_shm_contribute): weft_shm_check_sigs reads it
     * in the line the arrival wait just brought */
    uint32_t slot_sig[WEFT_SHM_NBUF];
    /* second line */
    _Atomic uint64_t mapped; /* 1 once this rank mapped the segment */
    weft_bell_t bell;        /* this rank sleeps on it in a wait for flags (weft_shm_ring) */
    /* the algorithm's fields polled apart from the arrival
     * (allreduce_shm_cma: its result's address; bcast_shm_cma: its ready
     * count) */
    _Alignas(uint64_t) unsigned char alg_second[48];
} weft_shm_ctrl_t;
_Static_assert(offsetof(weft_shm_ctrl_t, mapped) == 64 && sizeof(weft_shm_ctrl_t) == 128,
               "a rank's flag lines are two cache lines, the arrival's first");
/* Rank r's algorithm bytes of its first or second line (line: alg_first,
 * alg_second) as the algorithm's own struct T; WEFT_SHM_CTRL_FITS(T,
 * line) asserts that T fits them, and WEFT_SHM_CTRL_FIELD gives a field's
 * place for weft_shm_wait and weft_shm_publish. */
#define WEFT_SHM_CTRL_ALG(sh, r, line, T) ((T *)(void *)(sh)->ctrl[r].line)
#define WEFT_SHM_CTRL_FITS(T, line)                                                                                    \
    _Static_assert(sizeof(T) <= sizeof(((weft_shm_ctrl_t *)0)->line) && _Alignof(T) <= _Alignof(uint64_t),             \
                   #T " fits the algorithm's bytes of a ctrl line")
#define WEFT_SHM_CTRL_FIELD(line, T, field) (offsetof(weft_shm_ctrl_t, line) + offsetof(T, field))

typedef struct weft_shm {
    char name[96];
    weft_comm_t comm; /* for messages */
    char *base; /* the mapping, NULL until attached */
    size_t len;
    int n, me;
    int radix;          /* the tree's radix (WEFT_SHM_RADIX, at least 2) */
    size_t chunk_min;   /* WEFT_SHM_CHUNK_MIN: chunked reductions from this many bytes */
    size_t flat_max;    /* WEFT_SHM_FLAT_MAX: messages read straight from the root up to this many bytes */
    int flat_pieces;    /* WEFT_SHM_FLAT_PIECES: a bcast's pieces read from the root's slot up to this many ranks */
    uint64_t *seen_done; /* per member, a lower bound of its done counter (last read, or implied) */
    uint64_t all_done;   /* a lower bound of every member's done counter */
    struct {
        uint64_t k;  /* 1 + the collective that last wrote this rank's slot (0: never) */
        int readers; /* WEFT_SHM_READ_* of that collective */
        int root;    /* and its tree's root */
    } use[WEFT_SHM_NBUF];
    int mapped;         /* this rank mapped the segment and counted itself */
    int ready;          /* every member attached (the name is gone), and nothing broke since */
    /* The segment could not be set up, or a shared-memory collective
     * failed here (the members' sequences are out of step): the status
     * every later shared-memory collective fails with at once, the
     * collective it happened in, and why. */
    int broken;
    uint64_t broken_k;
    char why[256];
    /* The segment could not be set up (its creator's notice tells every
     * member alike): the shared-memory algorithms decline from then on,
     * and calls built before that run their fallback (coll.c). */
    int unusable;
    uint64_t ops;       /* collectives assigned a number (the next k) */
    uint64_t completed; /* collectives finished here, in order */
    weft_shm_ctrl_t *ctrl;
    weft_bell_ref_t bell; /* this rank's bell and the header's count of members asleep on theirs */
    char *data;
    char *ll; /* the flagged lines (after the slots) */
} weft_shm_t;

/* One collective's state (schedule scratch). */
typedef struct weft_shm_op {
    weft_shm_t *sh;
    weft_sched_t *sched; /* its schedule */
    uint64_t k;  /* the collective's sequence number (of its current piece) */
    uint64_t k0; /* its first one */
    uint64_t nk; /* sequence numbers it takes: a message over a slot goes as nk pieces, one number each */
    int phase;
    int seen; /* weft_shm_wait_heads: the members before it were seen */
} weft_shm_op_t;

/* The communicator's segment state, or NULL when the shared-memory
 * algorithms must decline (several nodes, one rank, bytes over a slot,
 * out of memory, a segment known unusable: weft_shm_t's `unusable`).
 * Takes no collective action. After a collective failed (weft_shm_t's
 * `broken`) the state is still returned and every op fails at its start:
 * declining instead would send this rank to a base algorithm while the
 * other members wait in the segment. */
weft_shm_t *weft_shm_get(weft_comm_t comm, size_t bytes);
/* coll/shm's `unsettled` (coll/coll.h): comm's segment is not mapped here
 * yet, and not known unusable. */
int weft_shm_unsettled(weft_comm_t comm);
/* A message over a slot goes through the slots in pieces of at most one
 * slot, each piece a collective of its own (its own sequence number,
 * slot, flags and done counter: the op takes nk numbers at its start), so
 * a rank works on piece i while its children still copy piece i - 1 and
 * the root runs up to WEFT_SHM_NBUF - 1 pieces ahead: a pipeline. The
 * number of pieces of `count` elements of esize bytes, and the elements
 * per piece. */
static inline uint64_t weft_shm_pieces(size_t count, size_t esize, size_t *per)
{
    *per = WEFT_SHM_SLOT / (esize ? esize : 1);
    return count <= *per ? 1 : (uint64_t)((count + *per - 1) / *per);
}
/* The same for the single-copy (CMA) algorithms: any size, but NULL also
 * when cross-memory attach does not work here (weft_shm_cma_usable). */
weft_shm_t *weft_shm_get_cma(weft_comm_t comm);
/* 1 when process_vm_readv works in this process (probed once: a read of
 * our own memory, and Yama's ptrace_scope is 0 or absent, since peers are
 * not our descendants) and WEFT_SHM_CMA is not 0. Every rank of a node
 * answers the same (one kernel, one environment), so the algorithms
 * agree on declining. */
int weft_shm_cma_usable(void);
/* Copies len bytes at raddr in process pid into dst (partial reads are
 * continued). 0 or an error code (the op's name in the message). */
int weft_shm_cma_read(void *dst, int64_t pid, uint64_t raddr, size_t len, const char *alg);
/* The single-copy reductions (allreduce_shm_cma, reduce_scatter_shm_cma)
 * go in pieces of this many bytes: a peer's piece is read into a scratch
 * of this size (the op's extra bytes) and reduced into the result, so both
 * stay in the cache whatever the vector. A rank starts from its own piece
 * and reads the next ranks' after it (rank me + 1 first), so the ranks do
 * not all read one address space at once (process_vm_readv serialises the
 * readers of one address space); the order is fixed per block, so a
 * block's bits do not depend on timing. */
#define WEFT_SHM_CMA_PIECE ((size_t)16 * 1024)
/* After every member's arrival: reads len bytes at offset `at` of rank r's
 * lent buffer into dst, once its lend carries signature sig. 0, or the
 * mismatch or failed read (reported as alg's). */
int weft_shm_cma_read_lent(const weft_shm_t *sh, int r, uint64_t sig, size_t at, void *dst, size_t len,
                           const char *alg);
/* After every member's arrival: reduces elements [off, off + len) of every
 * member's lent input (its lend must carry signature sig; this rank's own
 * is `mine`, its input's start), piece by piece through tmp
 * (WEFT_SHM_CMA_PIECE bytes), into dst (where element off goes), which
 * holds partial sums meanwhile: no other rank may read it before the call
 * is done with it. dst may be this rank's own input at the same elements
 * (a piece is its own accumulator then). 0, or the first failed read or
 * signature mismatch (reported as alg's). */
int weft_shm_cma_reduce(const weft_shm_op_t *op, const char *mine, uint64_t sig, size_t off, size_t len, size_t esize,
                        int dtype, int rop, char *tmp, char *dst, const char *alg);
/* The shape the single-copy collectives share (allgather, alltoall,
 * reduce_scatter): start the op and lend buf with signature sig (phase
 * 0), wait for every member's arrival, run work (this rank's reads; its
 * status is kept in *rc across the polls) and publish done even after a
 * failure (phase 1), then wait until every member is done, so the lent
 * buffer stays valid while read (phase 2). A polling step: 1 when done, 0
 * not yet, < 0 an error (work's included). */
typedef int (*weft_shm_cma_work_fn)(weft_shm_op_t *op, void *arg);
int weft_shm_cma_run(weft_sched_t *s, weft_shm_op_t *op, const void *buf, uint64_t sig, int *rc,
                     weft_shm_cma_work_fn work, void *arg);
/* The op's start (its numbers were taken when its schedule started, so in
 * start order: weft_shm_op_alloc set the schedule's watch): attaches
 * (creating or opening the segment), fails at once when the
 * communicator's shared-memory sequence broke (weft_shm_t's `broken`), and
 * waits until the previous shared-memory collective on this communicator
 * finished here. 1 when done, 0 not yet, < 0 an error (as a polling step). */
int weft_shm_op_begin(weft_sched_t *s, weft_shm_op_t *op);
/* Waits until field (offsetof in weft_shm_ctrl_t) of every member (or of
 * `only` when >= 0) is >= target. 1 / 0 as a polling step. */
int weft_shm_wait(weft_sched_t *s, weft_shm_op_t *op, size_t field, uint64_t target, int only, const char *flag);
/* After this rank raised a flag: wakes the members asleep on their bells
 * (a wait that had nothing but flags of this segment to poll), which then
 * poll; one load of the header's count while none sleeps. */
void weft_shm_ring_all(const weft_shm_t *sh);
static inline void weft_shm_ring(const weft_shm_t *sh)
{
    if (WEFT_UNLIKELY(atomic_load_explicit(sh->bell.sleepers, memory_order_relaxed))) weft_shm_ring_all(sh);
}
/* What a wait on rank r's flag tells its schedule (the flag's name, for
 * messages, and the bell its raising rings). */
static inline void weft_shm_waiting(weft_sched_t *s, const weft_shm_t *sh, int r, const char *flag)
{
    weft_sched_waiting_flag(s, r, flag, &sh->bell);
}
/* The head line of rank r's slot k % NBUF, and the slot's body. */
static inline weft_shm_head_t *weft_shm_head(const weft_shm_op_t *op, int r)
{
    return (weft_shm_head_t *)(op->sh->data +
                               ((size_t)r * WEFT_SHM_NBUF + (size_t)(op->k % WEFT_SHM_NBUF)) * WEFT_SHM_SLOT_STRIDE);
}
static inline char *weft_shm_slot(const weft_shm_op_t *op, int r)
{
    return (char *)weft_shm_head(op, r) + WEFT_SHM_HEAD_SPAN;
}
/* Rank r's flagged lines of slot k % NBUF (shm_ll); line j of rank r + 1
 * is WEFT_SHM_LL_RANK_STRIDE bytes after rank r's. */
#define WEFT_SHM_LL_RANK_STRIDE ((size_t)WEFT_SHM_NBUF * WEFT_SHM_LL_SPAN)
static inline weft_shm_ll_line_t *weft_shm_ll(const weft_shm_op_t *op, int r)
{
    return (weft_shm_ll_line_t *)(op->sh->ll + (size_t)r * WEFT_SHM_LL_RANK_STRIDE +
                                  (size_t)(op->k % WEFT_SHM_NBUF) * WEFT_SHM_LL_SPAN);
}
/* Where a tree algorithm's message of `bytes` sits in rank r's slot:
 * beside the sequence word when it fits, else the body. */
static inline char *weft_shm_buf(const weft_shm_op_t *op, int r, size_t bytes)
{
    return bytes <= WEFT_SHM_INLINE ? (char *)weft_shm_head(op, r)->inl : weft_shm_slot(op, r);
}
/* Raises this rank's head to event ev (WEFT_SHM_PARTIAL / RESULT) of
 * collective op->k, after its data and the call's signature `sig`
 * (release order). */
static inline void weft_shm_head_publish_msg(weft_shm_op_t *op, int ev, uint64_t sig)
{
    weft_shm_head(op, op->sh->me)->sig = sig;
    atomic_store_explicit(&weft_shm_head(op, op->sh->me)->seq, 2 * op->k + (uint64_t)ev, memory_order_release);
    weft_shm_ring(op->sh);
}
/* The same without data (the barrier): the signature and the bytes stay. */
static inline void weft_shm_head_publish(weft_shm_op_t *op, int ev)
{
    atomic_store_explicit(&weft_shm_head(op, op->sh->me)->seq, 2 * op->k + (uint64_t)ev, memory_order_release);
    weft_shm_ring(op->sh);
}
/* Waits until rank r's head reached event ev of collective op->k. 1 / 0
 * as a polling step. */
static inline int weft_shm_head_wait(weft_sched_t *s, weft_shm_op_t *op, int r, int ev, const char *flag)
{
    if (WEFT_LIKELY(atomic_load_explicit(&weft_shm_head(op, r)->seq, memory_order_acquire) >=
                    2 * op->k + (uint64_t)ev) &&
        WEFT_LIKELY(!weft_sched_posting(s))) { /* a nonblocking post leaves the copies to the thread (weft_shm_wait) */
        /* r is in collective k, so it finished k - 1: its done is >= k,
         * and a later claim needs not read it (see weft_shm_claim) */
        if (op->sh->seen_done[r] < op->k) op->sh->seen_done[r] = op->k;
        return 1;
    }
    weft_shm_waiting(s, op->sh, r, flag);
    return 0;
}
/* Records that every member started collective k (this rank saw all their
 * arrivals, or a barrier's release or an allreduce's result, which need
 * them): every done counter is >= k, and claims need read none below. */
static inline void weft_shm_all_started(weft_shm_t *sh, uint64_t k)
{
    if (sh->all_done < k) sh->all_done = k;
}
static inline void weft_shm_publish(weft_shm_op_t *op, size_t field)
{
    atomic_store_explicit((_Atomic uint64_t *)((char *)&op->sh->ctrl[op->sh->me] + field), op->k + 1,
                          memory_order_release);
    weft_shm_ring(op->sh);
}
/* Who reads a slot a rank writes (recorded per slot, so the next write
 * to it waits for exactly those readers): its parent or its children in
 * the tree of `root`, or every member. */
enum { WEFT_SHM_READ_PARENT = 1, WEFT_SHM_READ_CHILDREN = 2, WEFT_SHM_READ_ALL = 4 };
/* Claims this rank's slot k % NBUF for collective k: waits until the
 * readers recorded by its previous use finished that collective (their
 * done counters; the last value read of each is cached, so a reader seen
 * far enough ahead costs nothing), then records `readers` (of the tree of
 * `root`; a second claim in the same collective adds its readers). 1 when
 * the slot may be written, 0 not yet (a polling step). */
int weft_shm_claim(weft_sched_t *s, weft_shm_op_t *op, int readers, int root);
/* What weft_shm_claim records, without waiting: for a rank that knows
 * every reader of the slot's previous use is past it (every member
 * already published its part of this collective). */
void weft_shm_record(weft_shm_op_t *op, int readers, int root);
/* Publishes this rank's lent buffer for collective op->k with the call's
 * signature (weft_shm_sig of its length), then arrived. It claims the
 * collective's slot first, as a contribution would, and leaves signature 0
 * in it (never a real one): a peer that runs a slot algorithm for this
 * call (its count fell under another rule) fails instead of taking an
 * older contribution. 1 when lent, 0 not yet (the slot's previous readers
 * are not done: call again). */
static inline int weft_shm_cma_lend(weft_sched_t *s, weft_shm_op_t *op, const void *buf, uint64_t sig)
{
    if (!weft_shm_claim(s, op, WEFT_SHM_READ_ALL, 0)) return 0;
    weft_shm_ctrl_t *c = &op->sh->ctrl[op->sh->me];
    c->cma_pid = (int64_t)getpid();
    c->cma_addr = (uint64_t)(uintptr_t)buf;
    c->cma_sig = sig;
    c->slot_sig[op->k % WEFT_SHM_NBUF] = 0;
    atomic_store_explicit((_Atomic uint64_t *)&c->arrived, op->k + 1, memory_order_release);
    weft_shm_ring(op->sh);
    return 1;
}
/* Down the tree of `root` (not the root itself): waits for the
 * parent's RESULT, copies the parent's message into this rank's slot
 * (claimed for its children) and raises its own RESULT when it has
 * children, then copies the message into dst. With flat (the caller's
 * choice, alike on every rank: weft_shm_flat_down, or bcast's pieces) the
 * message takes one hop: the root's RESULT, then the copy. `sig` (0:
 * unchecked) is the call's signature: when the head read from carries
 * another, nothing is copied, the children get a head marked
 * WEFT_SHM_SIG_BAD (so they fail too, and nobody waits) and the mismatch
 * is returned (< 0, reported as `alg`'s). 1 / 0 as a polling step. */
int weft_shm_tree_down(weft_sched_t *s, weft_shm_op_t *op, int root, void *dst, size_t bytes, int flat,
                       uint64_t sig, const char *alg, const char *flag);
/* ---- signatures ----------------------------------------------------------
 * What the members of a call must agree on, carried in the words coll/shm
 * publishes anyway beside its data (a slot's head line, a rank's slot
 * words, shm_ll's line words, a CMA lend), where only the message length
 * used to be: checking it costs no store and no cache line more than the
 * length did. Ranks that passed different datatypes, ops, roots or counts
 * fail with WEFT_ERR_ARG naming what differs, wherever a rank reads
 * another's word, instead of reducing each other's bytes as their own.
 * The 64-bit signature (head lines, CMA):
 *   bits  0-39  the whole message's length in bytes (mod 2^40)
 *        40-51  the root (mod 4096; 0 where the collective has none)
 *        52-55  the op (0 where the collective has none)
 *        56-59  the datatype
 *        60-62  the algorithm's mark (WEFT_SHM_SIG_ALLREAD, _CHUNKED, _LL;
 *               none: a tree), so a rank that ran another shared-memory
 *               algorithm for the same call (its count fell under another
 *               selection rule) does not take the other's flags for its own
 *        63     set only in WEFT_SHM_SIG_BAD: a rank that found the
 *               members' calls differ passes that on to its readers
 * shm_ll's lines carry 20 bits (weft_shm_sig_ll: length, datatype, op;
 * its messages are at most 7 KiB and it has no root) and the slot words
 * 32 (weft_shm_sig32: length mod 2^20, root mod 16, op, datatype; slot
 * messages are at most 64 KiB). */
#define WEFT_SHM_SIG_ALLREAD ((uint64_t)1 << 62)
#define WEFT_SHM_SIG_CHUNKED ((uint64_t)1 << 61)
#define WEFT_SHM_SIG_LL      ((uint64_t)1 << 60)
#define WEFT_SHM_SIG_MARKS   (WEFT_SHM_SIG_ALLREAD | WEFT_SHM_SIG_CHUNKED | WEFT_SHM_SIG_LL)
#define WEFT_SHM_SIG_BAD     UINT64_MAX
#define WEFT_SHM_SIG_LEN     ((UINT64_C(1) << 40) - 1)
_Static_assert(WEFT_DTYPE_COUNT <= 16 && WEFT_OP_COUNT <= 8, "a datatype fits 4 bits and an op 3 of a signature");
static inline uint64_t weft_shm_sig_pack(uint64_t len, int root, int op, int dtype)
{
    return (len & WEFT_SHM_SIG_LEN) | ((uint64_t)((unsigned)root & 0xfffu) << 40) |
           ((uint64_t)((unsigned)op & 0xfu) << 52) | ((uint64_t)((unsigned)dtype & 0xfu) << 56);
}
/* The signature of call a whose message (the part the signature vouches
 * for: a vector, a block) is len bytes. A reduce_scatter has no root: its
 * bits carry a hash of the receive counts instead (ranks whose counts
 * differ with the same total would otherwise reduce each other's blocks
 * as their own). */
static inline uint64_t weft_shm_sig(const weft_coll_args_t *a, uint64_t len)
{
    int root = a->kind == WEFT_COLL_REDUCE_SCATTER && a->rcounts
                   ? (int)(weft_coll_counts_hash(a->rcounts, a->comm->size) >> 52)
                   : a->root;
    return weft_shm_sig_pack(len, root, (int)a->op, (int)a->dtype);
}
static inline uint32_t weft_shm_sig32(uint64_t sig)
{
    return (uint32_t)((sig & 0xfffffu) | ((sig >> 40 & 0xfu) << 20) | ((sig >> 52 & 0xfu) << 24) |
                      ((sig >> 56 & 0xfu) << 28));
}
static inline uint64_t weft_shm_sig_ll(uint64_t sig)
{
    return (sig & 0x1fffu) | ((sig >> 56 & 0xfu) << 13) | ((sig >> 52 & 0x7u) << 17);
}
/* Back to the 64-bit layout (with the fields a short word has), for
 * messages. */
static inline uint64_t weft_shm_sig_from32(uint32_t w)
{
    return weft_shm_sig_pack(w & 0xfffffu, (int)(w >> 20 & 0xfu), (int)(w >> 24 & 0xfu), (int)(w >> 28 & 0xfu));
}
static inline uint64_t weft_shm_sig_from_ll(uint64_t tag)
{
    return tag == WEFT_SHM_LL_BAD
               ? WEFT_SHM_SIG_BAD
               : weft_shm_sig_pack(tag & 0x1fffu, 0, (int)(tag >> 17 & 0x7u), (int)(tag >> 13 & 0xfu)) |
                     WEFT_SHM_SIG_LL;
}
/* 0 when rank r's head (slot of collective op->k) carries signature sig,
 * else WEFT_ERR_ARG naming what differs: the datatype, the op, the root,
 * the length (the ranks passed different counts), the algorithm's mark,
 * or that r found the calls differ (WEFT_SHM_SIG_BAD). root >= 0: the tree
 * the algorithm reads r in (the message says whether r is its root or a
 * neighbour); < 0: a pattern without a tree. */
int weft_shm_sig_mismatch(weft_shm_op_t *op, int r, int root, uint64_t sig, const char *alg);
/* The same for a signature `theirs` read elsewhere (a line's word, a CMA
 * lend), r described by `who` ("rank 3 (...)"; NULL: "rank r"). */
int weft_shm_sig_differs(int r, int root, uint64_t theirs, uint64_t sig, const char *alg);
int weft_shm_sig_differs_who(const char *who, uint64_t theirs, uint64_t sig, const char *alg);
/* After every member's arrival (weft_shm_contribute): 0 when all
 * contributed with signature sig (its 32 bits), or an error naming the
 * first rank whose signature differs. */
int weft_shm_check_sigs(weft_shm_op_t *op, uint64_t sig, const char *alg);
/* 1 when a message (result) of `bytes` goes from the root to every rank
 * directly rather than down the tree (WEFT_SHM_FLAT_MAX, the creator's). */
static inline int weft_shm_flat_down(const weft_shm_t *sh, size_t bytes) { return bytes <= sh->flat_max; }

/* The tree (see the top of this file) over v = (rank - root) mod n. */
static inline int weft_shm_vrank(const weft_shm_t *sh, int root) { return (sh->me - root + sh->n) % sh->n; }
static inline int weft_shm_rank_of(const weft_shm_t *sh, int v, int root) { return (v + root) % sh->n; }
/* v's parent (v != 0). */
static inline int weft_shm_parent(int v, int radix)
{
    int p = 1;
    while ((v / p) % radix == 0)
        p *= radix;
    return v - ((v / p) % radix) * p;
}
/* 1 when v has children (v's lowest digit is 0 and v + 1 < n). */
static inline int weft_shm_has_children(int v, int radix, int n) { return v % radix == 0 && v + 1 < n; }
/* Waits until the head (slot of collective op->k) of each of the `count`
 * ranks in `ranks` (NULL: every member, count ignored) reached event ev:
 * all loaded, then judged (the misses overlap); the leading ranks seen
 * are not loaded again. After every member's, every member is in
 * collective k (weft_shm_all_started). With got, calls fn(arg, r) once
 * for each rank r the moment its head is first seen, in whatever order
 * they come (a rank's lines are fetched, or copied, while later ranks
 * are still on their way, instead of all after the last flag); got is
 * `count` (NULL ranks: n) bytes of the caller's, zero at the wait's start
 * and left zero when it returns 1. 1 / 0 as a polling step. */
typedef void (*weft_shm_seen_fn)(void *arg, int r);
int weft_shm_wait_heads_each(weft_sched_t *s, weft_shm_op_t *op, int ev, const int *ranks, int count,
                             unsigned char *got, weft_shm_seen_fn fn, void *arg, const char *flag);
static inline int weft_shm_wait_heads(weft_sched_t *s, weft_shm_op_t *op, int ev, const int *ranks, int count,
                                      const char *flag)
{
    return weft_shm_wait_heads_each(s, op, ev, ranks, count, NULL, NULL, NULL, flag);
}
/* Waits until every child of this rank published its PARTIAL of
 * collective op->k (children in a fixed order: stride 1 first, then R,
 * R^2...). */
int weft_shm_wait_children(weft_sched_t *s, weft_shm_op_t *op, int root, const char *flag);
/* Waits until every child of this rank (tree of `root`, radix `radix`)
 * published done for collective op->k: it reads nothing of this rank's
 * any more. */
int weft_shm_wait_done_children(weft_sched_t *s, weft_shm_op_t *op, int root, int radix);
/* Runs body with c set to each child's comm rank, in the same fixed order
 * (the tree of radix `radix` over n ranks; WEFT_SHM_FOR_CHILDREN: the
 * segment's radix). */
#define WEFT_SHM_FOR_CHILDREN_R(sh, radix, v, root, c, body)                                                           \
    do {                                                                                                               \
        for (long stride_ = 1; stride_ < (sh)->n && (v) % (stride_ * (radix)) == 0; stride_ *= (radix))               \
            for (long j_ = 1; j_ < (radix) && (v) + j_ * stride_ < (sh)->n; j_++) {                                   \
                int c = weft_shm_rank_of((sh), (int)((v) + j_ * stride_), (root));                                     \
                body;                                                                                                  \
            }                                                                                                          \
    } while (0)
#define WEFT_SHM_FOR_CHILDREN(sh, v, root, c, body) WEFT_SHM_FOR_CHILDREN_R(sh, (sh)->radix, v, root, c, body)
/* The first two phases of a contribution: start the operation, wait until
 * this rank's slot may be reused, copy src into it (and the call's
 * signature `sig` into its flag line, for weft_shm_check_sigs) and
 * publish the arrival. 1: done (op->phase is 2), 0: not yet, < 0: an
 * error. */
static inline int weft_shm_contribute(weft_sched_t *s, weft_shm_op_t *op, const void *src, size_t bytes, uint64_t sig)
{
    if (op->phase == 0) {
        int rc = weft_shm_op_begin(s, op);
        if (rc <= 0) return rc;
        op->phase = 1;
    }
    if (op->phase == 1) {
        if (!weft_shm_claim(s, op, WEFT_SHM_READ_ALL, 0)) return 0;
        memcpy(weft_shm_slot(op, op->sh->me), src, bytes);
        op->sh->ctrl[op->sh->me].slot_sig[op->k % WEFT_SHM_NBUF] = weft_shm_sig32(sig);
        weft_shm_publish(op, offsetof(weft_shm_ctrl_t, arrived));
        op->phase = 2;
    }
    return 1;
}

/* Marks collective k done here (publishes done, lets the next one start). */
static inline void weft_shm_op_end(weft_shm_op_t *op)
{
    weft_shm_publish(op, offsetof(weft_shm_ctrl_t, done));
    op->sh->completed = op->k + 1;
    if (op->nk > 1) weft_sched_progressed(op->sched); /* a piece: the wait keeps polling */
}
/* A new op's state in schedule scratch with `extra` bytes after it
 * (aligned to 64: weft_shm_op_extra); NULL and an error when out of
 * memory. */
void *weft_shm_op_alloc(weft_sched_t *s, weft_shm_t *sh, size_t size, size_t extra, const char *alg);
/* Where the `extra` bytes of an op state of `size` bytes start
 * (weft_shm_op_alloc): the offset, and the pointer. */
static inline size_t weft_shm_op_head(size_t size)
{
    return (size + 63) & ~(size_t)63;
}
static inline void *weft_shm_op_extra(void *state, size_t size)
{
    return (char *)state + weft_shm_op_head(size);
}

/* Asks for the first `bytes` (at most 4 KiB) of another rank's data ahead
 * of reading it, so the misses of several ranks' lines overlap instead of
 * coming one rank after another (the hardware prefetcher follows a
 * stream once it is read). Measured at 32 ranks: the tree allreduce
 * 1.1-1.2x faster at 64 B - 1 KiB, shm_allread up to 1.2x at 16. */
static inline void weft_shm_prefetch(const void *p, size_t bytes)
{
    const char *c = p;
    if (bytes > 4096) bytes = 4096;
    for (size_t i = 0; i < bytes; i += 64)
        __builtin_prefetch(c + i, 0, 3);
}

/* Releases a communicator's segment state (the component's comm_release). */
void weft_shm_comm_release(weft_comm_t comm, void *state);
/* coll/shm's variables (shm.c declares them; the segment's creator's
 * values are the ones every member uses). */
typedef struct weft_shm_vars {
    int cma;         /* WEFT_SHM_CMA */
    int radix;       /* WEFT_SHM_RADIX */
    int chunk_min;   /* WEFT_SHM_CHUNK_MIN */
    int flat_max;    /* WEFT_SHM_FLAT_MAX */
    int flat_pieces; /* WEFT_SHM_FLAT_PIECES */
} weft_shm_vars_t;
extern weft_shm_vars_t weft_shm_vars;
/* At init: removes this user's weft-* segments in /dev/shm whose creator
 * no longer runs on this host (a job killed before every rank attached).
 * Returns the number removed. */
int weft_shm_sweep(void);

#endif
