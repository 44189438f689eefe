/* coll/cuda's kernels (kernels/<protocol>.cu, each compiled by nvcc into a
 * fatbin that libweft embeds and loads through the driver) and the host
 * code that launches them (cuda.c): the argument blocks, passed by value,
 * one per kernel, and the kernels' names. Plain C on both sides.
 *
 * Every rank of a communicator on one node owns a scratch region in its
 * device memory, mapped by its peers through CUDA IPC:
 *   [0, WEFT_CK_HDR)           flags: unsigned long long flag[WEFT_CK_MAX_RANKS];
 *                              flag[src] = the last sequence number rank src announced
 *   [HDR, HDR + slot)          slot 0 (calls of even sequence number)
 *   [HDR + slot, HDR + 2 slot) slot 1 (odd)
 * A collective is: stage (each rank copies its contribution into its own
 * slot), barrier (announce and wait: every rank's slot is filled), then
 * reduce or copy (read the peers' slots). The sequence number lives in
 * device memory (ctl.counter: the last barrier this rank completed), so the
 * kernels pick the slot themselves and a captured CUDA graph replays with
 * fresh numbers. Two slots: a rank writes slot p of call n + 2 only after
 * the barrier of call n + 1, which every peer passes only after reading
 * call n's slot p; no second barrier is needed. */
#ifndef WEFT_COLL_CUDA_KERNELS_H
#define WEFT_COLL_CUDA_KERNELS_H

#include <stddef.h>

#define WEFT_CK_MAX_RANKS 8

/* The element types (in weft_dtype_t order, WEFT_INT8 .. WEFT_FLOAT64) and
 * ops (in weft_op_t order, WEFT_SUM .. WEFT_AVG) of the reduce kernels.
 * Each protocol has a kernel per type, weft_ck_<protocol>_reduce_<type>
 * (weft_ck_reduce_i32, weft_ck_ll_reduce_bf16, ...), which reads the op
 * from its arguments (op) and calls that op's reduction loop; and for the
 * hot pairs (WEFT_CK_HOT) a kernel per type and op,
 * weft_ck_<protocol>_reduce_<type>_<op> (weft_ck_reduce_f32_sum, ...), the
 * same loop inlined. The host takes a pair's own kernel where the fatbins
 * have one, else its type's: twelve kernels a protocol instead of sixty
 * keep the build in minutes. X(name, ...) for each, with the arguments
 * after X. */
#define WEFT_CK_DTYPES(X, ...)                                                                                         \
    X(i8, __VA_ARGS__) X(u8, __VA_ARGS__) X(i16, __VA_ARGS__) X(u16, __VA_ARGS__) X(i32, __VA_ARGS__)                  \
    X(u32, __VA_ARGS__) X(i64, __VA_ARGS__) X(u64, __VA_ARGS__) X(f16, __VA_ARGS__) X(bf16, __VA_ARGS__)               \
    X(f32, __VA_ARGS__) X(f64, __VA_ARGS__)
#define WEFT_CK_OPS(X, ...)                                                                                            \
    X(sum, __VA_ARGS__) X(prod, __VA_ARGS__) X(min, __VA_ARGS__) X(max, __VA_ARGS__) X(avg, __VA_ARGS__)
/* The hot pairs, X(type, op): gradients' sums and averages. */
#define WEFT_CK_HOT(X) X(f16, sum) X(bf16, sum) X(f32, sum) X(f16, avg) X(bf16, avg) X(f32, avg)
/* Bytes before the slots: the flags (128 KiB), then the LL area
 * (WEFT_CK_LL_OFF: 2 parities x n senders x weft_ck_ll_slot(n) bytes of
 * 16-byte lines on n ranks; see weft_ck_ll_args). */
#define WEFT_CK_LL_OFF 131072
#define WEFT_CK_LL_AREA (16u << 20)
#define WEFT_CK_HDR (WEFT_CK_LL_OFF + WEFT_CK_LL_AREA)
/* A sender's lines for one parity on n ranks, and the largest piece they
 * hold (16 bytes of line per 8 of data): 2 MiB on 2 ranks, 1 MiB on 4,
 * 512 KiB on 8. */
#define weft_ck_ll_slot(n) ((size_t)WEFT_CK_LL_AREA / (2 * (size_t)(n)) / 16 * 16)
#define weft_ck_ll_max(n) (weft_ck_ll_slot(n) / 2)
/* The pipelined kernels' flags, in the header after the barrier's:
 * unsigned long long rdy[WEFT_CK_PIPE_MAXPOS][WEFT_CK_MAX_RANKS] at
 * WEFT_CK_PIPE_RDY, dn[..][..] at WEFT_CK_PIPE_DN (see weft_ck_pipe_args). */
#define WEFT_CK_PIPE_MAXPOS 512
#define WEFT_CK_PIPE_RDY 4096
#define WEFT_CK_PIPE_DN (WEFT_CK_PIPE_RDY + WEFT_CK_PIPE_MAXPOS * WEFT_CK_MAX_RANKS * 8)
/* rdy2[..][..]: a pushed allreduce's second phase (its reduced pieces are in place) */
#define WEFT_CK_PIPE_RDY2 (WEFT_CK_PIPE_DN + WEFT_CK_PIPE_MAXPOS * WEFT_CK_MAX_RANKS * 8)
#if WEFT_CK_PIPE_RDY2 + WEFT_CK_PIPE_MAXPOS * WEFT_CK_MAX_RANKS * 8 > WEFT_CK_LL_OFF
#error "the pipelined kernels' flags overlap the LL area"
#endif

/* Per-call input descriptors, in the header: unsigned long long
 * desc[2][WEFT_CK_MAX_RANKS] at WEFT_CK_DESC; desc[parity][src] is what rank
 * src's barrier of that parity announced to this rank (its own entry: what
 * this rank's barrier announced). 0: the input is in src's scratch slot;
 * WEFT_CK_DESC_REG(off, win): it is in src's registered window win (the
 * same index on every rank), off bytes from src's window start. */
#define WEFT_CK_DESC 1024
/* The LL kernel's count of its blocks that have finished (unsigned long long; the last one resets it). */
#define WEFT_CK_LL_DONE 512
#define WEFT_CK_DESC_REG(off, win) (((unsigned long long)(off) << 16) | ((unsigned long long)(win) << 1) | 1ull)
#define WEFT_CK_DESC_OFF(d) ((d) >> 16)

/* Set in *ctl.counter by a barrier that the abort word ended: the kernels
 * queued after it on the stream (graph replays, more stream-ordered calls)
 * find it there, in device memory, and end without touching any flag. */
#define WEFT_CK_POISON (1ull << 63)

typedef struct weft_ck_ctl {
    unsigned long long *counter; /* this rank's device memory: sequence number of the last barrier passed */
    volatile int *abort;         /* host-mapped (device address): nonzero ends every wait at once */
    volatile int *error;         /* host-mapped: 1 + the rank a wait was waiting for when abort ended it;
                                    -(1 + p): rank p's call did not match (weft_ck_barrier_args.check) */
} weft_ck_ctl_t;

/* weft_ck_stage: blockIdx.y = i < n: copies piece[i].bytes from
 * piece[i].in to scratch + HDR + ((*counter + 1) & 1) * slot_bytes +
 * piece[i].off (a call's stages before its barrier, in one launch).
 * Grid-stride over x; any alignment. Poisoned counter: nothing. */
typedef struct weft_ck_stage_piece {
    const void *in;
    size_t off, bytes;
} weft_ck_stage_piece_t;
typedef struct weft_ck_stage_args {
    weft_ck_ctl_t ctl;
    char *scratch; /* this rank's region */
    size_t slot_bytes;
    int n;
    weft_ck_stage_piece_t piece[WEFT_CK_MAX_RANKS];
} weft_ck_stage_args_t;

/* weft_ck_barrier (one block of WEFT_CK_MAX_RANKS threads or more):
 * seq = *counter + 1; desc goes into this rank's entry of desc[seq & 1] in
 * its own header and in every peer's; for every peer p != rank:
 * release-store (system scope) peer_flags[p][rank] = seq, then wait until
 * my_flags[p] >= seq (acquire, system scope); a wait also watches
 * *ctl.abort and, when it is set, stores 1 + p in *ctl.error and returns,
 * setting WEFT_CK_POISON in the counter. With check, peer p's desc must
 * match this one's kind (both in the slot, or both in the same window) and,
 * in a window, hold need bytes from its offset within winlen[p]; otherwise
 * -(1 + p) goes in *ctl.error and the counter is poisoned (the call ends on
 * every rank that sees it). Otherwise, at the end *counter = seq. */
typedef struct weft_ck_barrier_args {
    weft_ck_ctl_t ctl;
    int nranks, rank;
    unsigned long long *my_flags;                        /* this rank's region (its header) */
    unsigned long long *peer_flags[WEFT_CK_MAX_RANKS];  /* each rank's region through IPC (own: my_flags) */
    unsigned long long desc;                             /* this call's input (WEFT_CK_DESC) */
    int check;
    unsigned long long need;                             /* check, in a window: bytes read from each input */
    unsigned long long winlen[WEFT_CK_MAX_RANKS];        /* check, in a window: each rank's window bytes */
} weft_ck_barrier_args_t;

/* weft_ck_reduce_<type> and weft_ck_reduce_<type>_<op> (above): with parity =
 * *counter & 1 (poisoned: nothing) and src[p] = scratch[p] + HDR + parity *
 * slot_bytes + src_off (reg: win[p] + the offset in desc[parity][p] of this
 * rank's header + src_off),
 * out[i] = src[0][i] op src[1][i] op ... op src[nsrc - 1][i] for i < count,
 * always in this order (every rank computes the same bits). op: weft_op_t
 * values (0 sum, 1 prod, 2 min, 3 max, 4 avg: the sum divided by nsrc,
 * integers truncating toward zero): the call's, which the kernel of a
 * type reads and that of a pair has compiled in. float16 / bfloat16 accumulate in
 * float32 and round once (to nearest even); min / max propagate NaN;
 * integers wrap. out may be any device address (element-aligned); with
 * out_slot, the result goes to this rank's other slot (the parity of the
 * next barrier, where its peers read it after that barrier) at offset out. */
typedef struct weft_ck_reduce_args {
    weft_ck_ctl_t ctl;
    const char *scratch[WEFT_CK_MAX_RANKS]; /* each rank's region (own included), in rank order */
    size_t slot_bytes;
    size_t src_off; /* bytes into the slot */
    int nsrc;
    int op; /* weft_op_t (above) */
    void *out;
    size_t count; /* elements */
    int reg;          /* the inputs are in the ranks' window win[] (WEFT_CK_DESC) */
    int out_slot;     /* out is an offset into this rank's other slot (parity (*counter + 1) & 1), where
                         the next barrier's peers read it: two-shot allreduce */
    const char *mine; /* this rank's region (reg: the descriptors in its header; out_slot) */
    const char *win[WEFT_CK_MAX_RANKS];
} weft_ck_reduce_args_t;

/* weft_ck_copy: blockIdx.y = i < n: copies d[i].len bytes from
 * scratch[d[i].src] + HDR + (*counter & 1) * slot_bytes + d[i].src_off
 * (reg: from win[src] + its desc's offset + src_off, as weft_ck_reduce) to
 * d[i].dst. Grid-stride over x; any alignment. Poisoned counter: nothing. */
typedef struct weft_ck_copy_desc {
    int src;
    size_t src_off, len;
    char *dst;
} weft_ck_copy_desc_t;
typedef struct weft_ck_copy_args {
    weft_ck_ctl_t ctl;
    const char *scratch[WEFT_CK_MAX_RANKS];
    size_t slot_bytes;
    int n;
    weft_ck_copy_desc_t d[WEFT_CK_MAX_RANKS];
    int reg;
    const char *mine;
    const char *win[WEFT_CK_MAX_RANKS];
} weft_ck_copy_args_t;

/* weft_ck_fused_copy and weft_ck_fused_reduce_<type>[_<op>]: a whole small call
 * in one launch of ONE block (a single block needs no grid-wide sync):
 * the stage pieces (each: `bytes` from `in` to this rank's slot at `off`,
 * the slot of *counter + 1 as weft_ck_stage), the barrier (bar, as
 * weft_ck_barrier; an abort ends the kernel there), then red (mode 1,
 * fused_reduce) or cp (mode 2, fused_copy; mode 0: nothing) over the slot
 * the barrier made current. Same protocol, so fused and three-launch calls
 * follow each other on a communicator in any mix. */
typedef struct weft_ck_fused_args {
    weft_ck_barrier_args_t bar;
    char *scratch; /* this rank's region */
    size_t slot_bytes;
    int nstage;
    weft_ck_stage_piece_t stage[WEFT_CK_MAX_RANKS];
    int mode; /* 0 barrier only, 1 reduce, 2 copy */
    weft_ck_reduce_args_t red;
    weft_ck_copy_args_t cp;
} weft_ck_fused_args_t;

/* weft_ck_pipe_copy and weft_ck_pipe_reduce_<type>[_<op>] (modes 1-4),
 * weft_ck_ring_copy and weft_ck_ring_reduce_<type>[_<op>] (modes 5-8): a
 * large call in one launch of many blocks, pipelined, after a weft_ck_barrier (which makes
 * the slots free and sets the counter: seq = *counter, read only). The
 * call is cut into `units`; a unit is npieces pieces of unit_elems
 * elements of esize bytes (copies: bytes, esize 1). Both slots together
 * are 2 * slot_bytes bytes of positions of npieces * unit_elems * esize
 * bytes; block b takes units b, b + G, b + 2G, ... (G = gridDim.x) and its
 * j-th unit goes to position b + (j % depth) * G (G * depth <= MAXPOS and
 * the positions fit the slots). For unit u, value v = (seq << 24) | (u + 1):
 *   1. j >= depth: wait until dn[pos][c] >= the value of the position's
 *      previous unit for every consumer c (cons_mask): they read it;
 *   2. stage_on: piece k (k < npieces) of the unit, elements
 *      [u * unit_elems, ...) of in + k * in_stride, into the position at
 *      k * unit_elems * esize; release-store (system scope) v into
 *      rdy[pos][rank] of every consumer's region;
 *   3. consume_on: wait until rdy[pos][p] >= v (this rank's region) for
 *      every producer p (read_mask); then reduce: out[u * unit_elems + i] =
 *      op over every rank in rank order of its position's element
 *      red_piece * unit_elems + i; or copy: for every producer p (and this
 *      rank when copy_self) the position's piece copy_piece to
 *      dst[p] + u * unit_elems; then release-store v into dn[pos][rank] of
 *      every producer's region;
 * and at the end every block waits for its positions' last dn, so the next
 * call (of either protocol) may stage at once. A block runs steps 1-2 of its
 * unit j before step 3 of its unit j - ahead (0 <= ahead < depth: the two
 * never share a position), so its peers' flags for the earlier unit are on
 * their way while it fills the later one; split > 0 (push only, fewer
 * warps than the block's): the block's first split warps run steps 1-2 of
 * every unit and the others step 3 of every unit, side by side (a block's
 * step 3 of unit j starts only after its step 2 of unit j: in place, an
 * output it writes may be the input step 2 reads; mode 3's step 3 then
 * waits, before writing into a consumer's position, for the dn its step 1
 * would have waited for). count: elements per piece
 * in the whole call (the last unit is short). Waits watch ctl.abort as the
 * barrier's do (1 + the awaited rank in *ctl.error). A poisoned counter
 * (the barrier before was aborted): the kernel ends at once.
 *
 * push: the producers write into the consumers' regions instead of their
 * own, so what crosses NVLink is a store and every consumer reads only its
 * own memory. A position is pos_pieces places of a piece each; producer q
 * writes into place q % pos_pieces of its consumers' position (a consumer's
 * own input is never staged: it reads it where it is):
 *   2. for every consumer c (cons_mask), piece (npieces == 1 ? 0 : c) of
 *      the unit into place rank of c's position; release-store v into
 *      rdy[pos][rank] of c's region;
 *   3. wait as above; reduce: out[...] = op in rank order over the places
 *      p of this rank's position (its own: its input's piece red_piece);
 *      copy: each producer p's place to dst[p] (copy_self: this rank's
 *      input piece copy_piece to dst[rank]); then dn as above.
 * mode 3 (push only, allreduce in two phases): pieces are the n parts of
 * one vector (piece k: elements [k * count, min((k + 1) * count, total)) of
 * in, in_stride = count * esize, the same offsets in out); step 3 reduces
 * part red_piece (= rank) into out, writes it into place nranks + rank of
 * every consumer's position, release-stores v into rdy2[pos][rank] there,
 * waits for rdy2[pos][p] >= v of every producer p and copies their places
 * nranks + p to out; then dn. pos_pieces = 2 * nranks.
 * mode 4 (push only, copy kernel, bcast on 3+ ranks): pieces are the
 * n - 1 parts of the root's vector (as mode 3: count bytes each, total in
 * all, in_stride = count; part k belongs to the k-th rank other than
 * root). The root pushes part k of each unit into place 0 of its owner's
 * position (rdy); the owner copies it to out and pushes it into place
 * 1 + k of every other non-root rank's position (rdy2), then copies the
 * places the others pushed; every non-root rank tells root and the other
 * non-root ranks dn. The root's NVLink egress carries the vector once,
 * not n - 1 times. pos_pieces = nranks.
 *
 * modes 5-8, the ring (3+ ranks; push, split unused): every rank stores
 * only into the next rank's (rank + 1 mod n) positions, one piece a
 * position (pos_pieces 1), and takes from its own what the previous rank
 * stored. Block b's items (a unit's step) are numbered i = 0, 1, ... in
 * the order it sends them, the same order the next rank takes them in;
 * item i uses position b + (i % depth) x G, value (seq << 24) | (i + 1):
 * the sender waits until dn[pos][next] (its region) holds the value of
 * item i - depth, stores the piece, fences, release-stores v into
 * rdy[pos][rank] of the next rank's region; the taker waits for rdy[pos]
 * [prev] >= v in its own, uses the piece, then stores v into dn[pos][rank]
 * of the previous rank's region. A block runs its units `ahead` (K) at a
 * time, each step of the K units in turn (depth >= 2K: never a cycle of
 * waits); at its end it waits for the dn of its last items.
 *   5 allgather (copy kernel): steps s < n of unit u: the block of rank
 *     me - s (s = 0: in, to dst[me] when copy_self; else the piece
 *     taken) to dst[me - s] and, s < n - 1, on to the next rank.
 *   6 bcast (copy kernel): one step a unit, along the chain root, root + 1,
 *     ...: the root stores in's unit on; the others take it into out and,
 *     but the last, store it on.
 *   7 reduce_scatter (in_stride: bytes between in's blocks): step s < n
 *     works on block me - s - 1: s = 0 stores in's on; 0 < s < n - 1 stores
 *     op(the partial taken, in's); s = n - 1 writes op(the partial, in's
 *     block me) to out. The fold goes round in ring order, from rank
 *     k + 1 to k for block k, not in rank order (an average sums until the
 *     last step divides by n); a partial is rounded to the element type at
 *     every step.
 *   8 allreduce (the vector's n parts as mode 3: count, total, in_stride):
 *     steps 0..n-1 as mode 7 on the parts, the last also storing the
 *     reduced part me on; steps n..2n-2 take part me - (s - n + 1) into out
 *     and, but the last, store it on. */
typedef struct weft_ck_pipe_args {
    weft_ck_ctl_t ctl;
    int nranks, rank;
    char *scratch[WEFT_CK_MAX_RANKS]; /* every rank's region (own included) */
    int mode;                         /* 1 reduce, 2 copy, 3 allreduce (push), 4 bcast (push), 5-8 the ring */
    int push, pos_pieces;
    size_t total; /* mode 3 / 4: the vector's elements (pieces may be short or empty); else 0 */
    int root;     /* modes 4, 6 */
    int op; /* weft_op_t: the call's (as weft_ck_reduce_args') */
    unsigned read_mask, cons_mask; /* bit p: rank p */
    int stage_on, consume_on, copy_self;
    int npieces, depth, ahead, red_piece, copy_piece;
    int split; /* push: warps that produce while the others consume (0: each warp does both in turn) */
    size_t units, unit_elems, esize, count;
    const char *in;
    size_t in_stride; /* bytes between the input's pieces */
    void *out;        /* reduce */
    char *dst[WEFT_CK_MAX_RANKS]; /* copy: where producer p's pieces go */
} weft_ck_pipe_args_t;

/* weft_ck_ll_reduce_<type>[_<op>] and weft_ck_ll_copy: a small collective in one
 * launch of a few blocks, NCCL's LL idea: no barrier, no staging. seq =
 * *counter + 1 (poisoned: the kernel ends at once), parity = seq & 1. Every
 * piece is count x esize <= weft_ck_ll_max(nranks) bytes, sent in lines of
 * 8 bytes (grid-strided over the blocks' threads); line l of the piece for
 * peer p (src[p]) is stored, in one 16-byte store {bytes 0-3, seq, bytes
 * 4-7, seq} (32-bit seq), into p's region at WEFT_CK_LL_OFF + (parity x
 * nranks + rank) x slot + 16 l, for every p in send_mask; every other peer gets a
 * token there instead (line 0, no data). Each half of a line carries its
 * own copy of seq, and an 8-byte store arrives whole, so a reader that sees
 * seq in both halves has the line's data without a fence or a flag of its
 * own. Then every thread polls its lines from every peer in recv_mask in its
 * own region and either reduces them with its own piece (src[rank]), in
 * rank order (the same bits as every other path), into dst[0] (reduce;
 * recv_mask is every peer where dst[0] is set, none where it is NULL), or
 * copies peer p's into dst[p] (copy; and its own piece src[rank] into
 * dst[rank] unless NULL or the same); block 0's thread 0 waits for the
 * tokens of the peers outside recv_mask; the last block to finish (a count
 * at WEFT_CK_LL_DONE in the rank's own region) sets *counter = seq. So
 * every rank hears from every peer in every call: a sender's lines of
 * parity q are overwritten two calls later, once the reader has passed the
 * call in between, whichever protocol that was (each implies the peer
 * finished reading). Waits watch ctl.abort every 1024 polls (1 + the
 * awaited rank in *ctl.error; the counter is then poisoned). */
typedef struct weft_ck_ll_args {
    weft_ck_ctl_t ctl;
    int nranks, rank;
    char *scratch[WEFT_CK_MAX_RANKS]; /* every rank's region (own included) */
    int op; /* weft_op_t: the call's (as weft_ck_reduce_args') */
    unsigned send_mask, recv_mask;
    const void *src[WEFT_CK_MAX_RANKS]; /* the piece for rank p; own entry: this rank's own piece */
    void *dst[WEFT_CK_MAX_RANKS];       /* reduce: dst[0] = the result (NULL: none here); copy: p's piece */
    size_t count, esize;                /* a piece: count elements of esize bytes */
    size_t slot;                        /* weft_ck_ll_slot(nranks) */
} weft_ck_ll_args_t;

/* weft_ck_local_reduce (a grid-stride kernel, any grid): out[i] = a[i] op
 * b[i] for i < count, in that order (a first), on one GPU: the local step
 * of the host-driven algorithms whose messages UCX moves in device memory
 * (coll/cuda/direct.c). fin_n: the count an average's result step divides
 * by (1 before the last step: a plain sum). out may be a. */
typedef struct weft_ck_local_args {
    const void *a, *b;
    void *out;
    size_t count; /* elements */
    int op;       /* weft_op_t */
    int fin_n;
} weft_ck_local_args_t;

#endif
