/* coll/cuda's kernels (kernels.cu, compiled by nvcc into a fatbin that
 * libweft embeds and loads through the driver) and the host code that
 * launches them (cuda.c): the argument blocks, passed by value, one per
 * kernel. Plain C on both sides.
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
#define WEFT_CK_HDR 4096 /* bytes of flags at the start of a scratch region */

typedef struct weft_ck_ctl {
    unsigned long long *counter; /* this rank's device memory: sequence number of the last barrier passed */
    volatile int *abort;         /* host-mapped (device address): nonzero ends every wait at once */
    volatile int *error;         /* host-mapped: 1 + the rank a wait was waiting for when abort ended it */
} weft_ck_ctl_t;

/* weft_ck_stage: copies `bytes` from `in` to
 * scratch + HDR + ((*counter + 1) & 1) * slot_bytes + off. Grid-stride;
 * any alignment. */
typedef struct weft_ck_stage_args {
    weft_ck_ctl_t ctl;
    const void *in;
    char *scratch; /* this rank's region */
    size_t slot_bytes;
    size_t off;
    size_t bytes;
} weft_ck_stage_args_t;

/* weft_ck_barrier (one block of WEFT_CK_MAX_RANKS threads or more):
 * seq = *counter + 1; for every peer p != rank: release-store (system
 * scope) peer_flags[p][rank] = seq, then wait until my_flags[p] >= seq
 * (acquire, system scope); a wait also watches *ctl.abort and, when it is
 * set, stores 1 + p in *ctl.error and returns without updating the counter.
 * At the end *counter = seq. */
typedef struct weft_ck_barrier_args {
    weft_ck_ctl_t ctl;
    int nranks, rank;
    unsigned long long *my_flags;                        /* this rank's region (its header) */
    unsigned long long *peer_flags[WEFT_CK_MAX_RANKS];  /* each rank's region through IPC (own: my_flags) */
} weft_ck_barrier_args_t;

/* weft_ck_reduce_<type> (one kernel per element type: i8 u8 i16 u16 i32
 * u32 i64 u64 f16 bf16 f32 f64): with parity = *counter & 1 and
 * src[p] = scratch[p] + HDR + parity * slot_bytes + src_off,
 * out[i] = src[0][i] op src[1][i] op ... op src[nsrc - 1][i] for i < count,
 * always in this order (every rank computes the same bits). op: weft_op_t
 * values (0 sum, 1 prod, 2 min, 3 max, 4 avg: the sum divided by nsrc,
 * integers truncating toward zero). float16 / bfloat16 accumulate in
 * float32 and round once (to nearest even); min / max propagate NaN;
 * integers wrap. out may be any device address (element-aligned). */
typedef struct weft_ck_reduce_args {
    weft_ck_ctl_t ctl;
    const char *scratch[WEFT_CK_MAX_RANKS]; /* each rank's region (own included), in rank order */
    size_t slot_bytes;
    size_t src_off; /* bytes into the slot */
    int nsrc;
    int op;
    void *out;
    size_t count; /* elements */
} weft_ck_reduce_args_t;

/* weft_ck_copy: blockIdx.y = i < n: copies d[i].len bytes from
 * scratch[d[i].src] + HDR + (*counter & 1) * slot_bytes + d[i].src_off to
 * d[i].dst. Grid-stride over x; any alignment. */
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
} weft_ck_copy_args_t;

/* weft_ck_fused_copy and weft_ck_fused_reduce_<type>: a whole small call
 * in one launch of ONE block (a single block needs no grid-wide sync):
 * the stage pieces (each: `bytes` from `in` to this rank's slot at `off`,
 * the slot of *counter + 1 as weft_ck_stage), the barrier (bar, as
 * weft_ck_barrier; an abort ends the kernel there), then red (mode 1,
 * fused_reduce) or cp (mode 2, fused_copy; mode 0: nothing) over the slot
 * the barrier made current. Same protocol, so fused and three-launch calls
 * follow each other on a communicator in any mix. */
typedef struct weft_ck_stage_piece {
    const void *in;
    size_t off, bytes;
} weft_ck_stage_piece_t;
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

#endif
