/* Which form a GPU collective (coll/cuda) runs in, checked without a GPU.
 *
 * today() is coll/cuda's choice as its issue() made it before the
 * algorithms were cut into files of their own (commit 467bd69,
 * coll/cuda/cuda.c), with every WEFT_CUDA_COLL_* variable at its default:
 * the reference. `table` writes that choice down at the sizes where it
 * changes, and today() is checked against it. */
#include "coll/coll.h"
#include "harness.h"
#include "weft.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    F_LL,            /* one launch, lines pushed into the peers (kernels.h: weft_ck_ll_args) */
    F_WINDOW,        /* read in place out of registered windows */
    F_TWO,           /* allreduce two shots, bcast two steps */
    F_RING,          /* the pipelined kernel as a ring */
    F_PUSHED,        /* the pipelined kernel, pushing */
    F_PIPELINED,     /* the pipelined kernel, reading the peers' slots */
    F_ONE_SHOT,      /* stage, barrier, reduce or copy, in slot-sized chunks */
    F_FUSED,         /* the same in one launch of one block */
    F_BARRIER,       /* the barrier kernel */
    F_BARRIER_FUSED, /* the barrier in the fused kernel */
} form_t;

static const char *const form_names[] = {"ll",        "window",   "two shots", "ring",    "pushed",
                                         "pipelined", "one shot", "fused",     "barrier", "fused barrier"};

/* A call as the choice sees it: the collective, its ranks, the element size and count (per rank: a block of
 * allgather, alltoall and reduce_scatter_block, else the vector), whether two ranks share a GPU, whether the
 * stream is being captured into a CUDA graph, and whether the input lies in a registered window (out of
 * place). */
typedef struct {
    weft_coll_kind_t kind;
    int n;
    size_t es, count;
    int shared, capturing, window;
} call_t;

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* issue() of coll/cuda/cuda.c at 467bd69, with the defaults: WEFT_CUDA_COLL_FUSED 16384, _LL auto, _WINDOW auto,
 * _TWO_SHOT 8 MiB, _SLOT auto, _PIPE auto, _PUSH auto, _RING auto; the pipelined kernel's geometry fits (it
 * does with the default slots for every size below). */
static form_t today(const call_t *c)
{
    const size_t fused = 16384, two_shot = 8 * MIB, never = SIZE_MAX;
    weft_coll_kind_t k = c->kind;
    int n = c->n, ar = k == WEFT_COLL_ALLREDUCE, bc = k == WEFT_COLL_BCAST;
    size_t block = c->count * c->es;
    size_t staged = k == WEFT_COLL_BARRIER                                           ? 0
                    : k == WEFT_COLL_REDUCE_SCATTER_BLOCK || k == WEFT_COLL_ALLTOALL ? (size_t)n * block
                                                                                     : block;
    size_t slot = c->shared ? 8 * MIB : 32 * MIB, fuse_max = c->capturing ? 4096 : fused;
    int fusing = staged > 0 ? staged <= fuse_max && staged <= slot : 1;
    /* ll_piece, ll_most: 1 MiB on 2 ranks, 512 KiB on others, within the LL area's share of a sender */
    size_t piece = k == WEFT_COLL_BARRIER ? 0 : block;
    size_t ll_max = (size_t)(16u << 20) / (2 * (size_t)n) / 16 * 16 / 2, ll_most = n == 2 ? MIB : 512 * KIB;
    if (ll_most > ll_max) ll_most = ll_max;
    int ll = piece > 0 && piece <= ll_most;
    /* window_input (out of place), window_min */
    size_t need = k == WEFT_COLL_REDUCE_SCATTER_BLOCK || k == WEFT_COLL_ALLTOALL ? (size_t)n * block : block;
    size_t wmin = c->shared                                                        ? 8 * MIB
                  : k == WEFT_COLL_ALLTOALL || k == WEFT_COLL_REDUCE_SCATTER_BLOCK ? 64 * KIB
                  : ar                                                             ? never
                                                                                   : 8 * MIB;
    if (k != WEFT_COLL_BARRIER && c->window && !ll && need >= wmin && need > fused) return F_WINDOW;
    /* pipe_from, push_min, ring_min */
    size_t pipe = c->shared ? 0 : 32 * MIB;
    size_t ring_min =
        n >= 3 && (k == WEFT_COLL_ALLGATHER || bc || ar || k == WEFT_COLL_REDUCE_SCATTER_BLOCK) ? 0 : never;
    size_t pipe_from = pipe && k == WEFT_COLL_ALLGATHER && 8 * MIB < pipe && 8 * MIB >= ring_min ? 8 * MIB : pipe;
    size_t push_min = ar                                    ? (n == 2 ? 32 : 128) * MIB
                      : k == WEFT_COLL_REDUCE_SCATTER_BLOCK ? (n == 2 ? 32 : 256) * MIB
                                                            : 0;
    int past_fused = staged > fused;
    int piping = k != WEFT_COLL_BARRIER && past_fused && pipe > 0 && staged >= pipe_from;
    int pushed = (ar || bc) && piping && (staged >= push_min || staged >= ring_min);
    int two = (ar || bc) && n >= 3 && !ll && past_fused && staged >= two_shot;
    if (two && !pushed) return F_TWO;
    if (ll) return F_LL;
    if (piping) return staged >= ring_min ? F_RING : staged >= push_min ? F_PUSHED : F_PIPELINED;
    if (k == WEFT_COLL_BARRIER) return fusing ? F_BARRIER_FUSED : F_BARRIER;
    return fusing ? F_FUSED : F_ONE_SHOT;
}

/* Today's choice written down where it changes: on own GPUs (every rank its own) and shared ones, eager and
 * captured, in a window or not. */
#define AR WEFT_COLL_ALLREDUCE
#define RE WEFT_COLL_REDUCE
#define RS WEFT_COLL_REDUCE_SCATTER_BLOCK
#define BC WEFT_COLL_BCAST
#define AG WEFT_COLL_ALLGATHER
#define AA WEFT_COLL_ALLTOALL
#define BA WEFT_COLL_BARRIER
static const struct {
    call_t c;
    form_t form;
} table[] = {
    /* barrier: fused (WEFT_CUDA_COLL_FUSED > 0). The other collectives never fuse by default: every call that
     * stages up to 16 KiB has pieces the LL kernel takes. */
    {{BA, 2, 1, 0, 0, 0, 0}, F_BARRIER_FUSED},
    {{BA, 8, 1, 0, 1, 1, 0}, F_BARRIER_FUSED},
    /* allreduce: LL to 1 MiB on 2 ranks, 512 KiB on 1 and 3-8 */
    {{AR, 2, 4, 1, 0, 0, 0}, F_LL},
    {{AR, 2, 4, MIB / 4, 0, 0, 0}, F_LL},
    {{AR, 2, 4, MIB / 4 + 1, 0, 0, 0}, F_ONE_SHOT},
    {{AR, 1, 4, 128 * KIB, 0, 0, 0}, F_LL},
    {{AR, 1, 4, 128 * KIB + 1, 0, 0, 0}, F_ONE_SHOT},
    {{AR, 4, 2, 256 * KIB, 1, 0, 0}, F_LL},
    {{AR, 4, 2, 256 * KIB + 1, 1, 0, 0}, F_ONE_SHOT},
    /* one shot up to 8 MiB (3+ ranks), then two shots; own GPUs: from 32 MiB pushed (2 ranks), a ring (3+),
     * on 1 rank pipelined to 128 MiB, then pushed */
    {{AR, 3, 1, 8 * MIB - 1, 0, 0, 0}, F_ONE_SHOT},
    {{AR, 3, 1, 8 * MIB, 0, 0, 0}, F_TWO},
    {{AR, 8, 4, 8 * MIB, 1, 0, 0}, F_TWO},
    {{AR, 8, 4, 256 * MIB, 1, 0, 0}, F_TWO},
    {{AR, 3, 1, 32 * MIB - 1, 0, 0, 0}, F_TWO},
    {{AR, 3, 1, 32 * MIB, 0, 0, 0}, F_RING},
    {{AR, 2, 8, 4 * MIB - 1, 0, 0, 0}, F_ONE_SHOT},
    {{AR, 2, 8, 4 * MIB, 0, 0, 0}, F_PUSHED},
    {{AR, 2, 8, 64 * MIB, 1, 0, 0}, F_ONE_SHOT},
    {{AR, 1, 1, 32 * MIB, 0, 0, 0}, F_PIPELINED},
    {{AR, 1, 1, 128 * MIB - 1, 0, 0, 0}, F_PIPELINED},
    {{AR, 1, 1, 128 * MIB, 0, 0, 0}, F_PUSHED},
    /* windows: shared GPUs from 8 MiB; own GPUs never for allreduce */
    {{AR, 2, 1, 8 * MIB, 1, 0, 1}, F_WINDOW},
    {{AR, 2, 1, 8 * MIB - 1, 1, 0, 1}, F_ONE_SHOT},
    {{AR, 2, 1, 8 * MIB, 0, 0, 1}, F_ONE_SHOT},
    {{AR, 4, 1, 64 * MIB, 0, 0, 1}, F_RING},
    /* reduce: LL as allreduce; windows from 8 MiB; own GPUs pushed from 32 MiB */
    {{RE, 2, 8, MIB / 8, 0, 0, 0}, F_LL},
    {{RE, 5, 8, 64 * KIB + 1, 0, 0, 0}, F_ONE_SHOT},
    {{RE, 5, 1, 8 * MIB, 0, 0, 1}, F_WINDOW},
    {{RE, 5, 1, 32 * MIB, 0, 0, 0}, F_PUSHED},
    {{RE, 5, 1, 32 * MIB, 1, 0, 0}, F_ONE_SHOT},
    /* reduce_scatter_block: LL on the block; windows from 64 KiB staged (own GPUs), 8 MiB (shared); own GPUs from
     * 32 MiB staged: pushed on 2 ranks, a ring on 3+, on 1 pipelined to 256 MiB */
    {{RS, 2, 4, MIB / 4, 0, 0, 0}, F_LL},
    {{RS, 2, 4, MIB / 4 + 1, 0, 0, 0}, F_ONE_SHOT},
    {{RS, 3, 1, 512 * KIB, 0, 0, 0}, F_LL},
    {{RS, 3, 1, 512 * KIB + 1, 0, 0, 1}, F_WINDOW},
    {{RS, 8, 1, 8 * KIB, 0, 0, 1}, F_LL},
    {{RS, 8, 1, 512 * KIB + 1, 1, 0, 1}, F_ONE_SHOT},
    {{RS, 8, 1, MIB, 1, 0, 1}, F_WINDOW},
    {{RS, 2, 1, 16 * MIB, 0, 0, 0}, F_PUSHED},
    {{RS, 4, 1, 8 * MIB, 0, 0, 0}, F_RING},
    {{RS, 4, 1, 8 * MIB - 1, 0, 0, 0}, F_ONE_SHOT},
    {{RS, 1, 1, 256 * MIB - 1, 0, 0, 0}, F_PIPELINED},
    {{RS, 1, 1, 256 * MIB, 0, 0, 0}, F_PUSHED},
    /* bcast: LL; windows from 8 MiB; two steps from 8 MiB on 3+ ranks; own GPUs from 32 MiB pushed (1-2 ranks)
     * or a ring */
    {{BC, 3, 1, MIB / 2, 0, 0, 0}, F_LL},
    {{BC, 3, 1, 8 * MIB, 0, 0, 1}, F_WINDOW},
    {{BC, 3, 1, 8 * MIB, 0, 0, 0}, F_TWO},
    {{BC, 3, 1, 32 * MIB, 0, 0, 0}, F_RING},
    {{BC, 3, 1, 32 * MIB, 1, 0, 0}, F_TWO},
    {{BC, 2, 1, 32 * MIB, 0, 0, 0}, F_PUSHED},
    {{BC, 2, 1, 32 * MIB, 1, 0, 0}, F_ONE_SHOT},
    /* allgather: LL; windows from 8 MiB; own GPUs a ring from 8 MiB on 3+ ranks, pushed from 32 MiB on 1-2 */
    {{AG, 2, 1, MIB, 0, 0, 0}, F_LL},
    {{AG, 4, 1, 8 * MIB, 0, 0, 0}, F_RING},
    {{AG, 4, 1, 8 * MIB, 0, 0, 1}, F_WINDOW},
    {{AG, 2, 1, 8 * MIB, 0, 0, 0}, F_ONE_SHOT},
    {{AG, 2, 1, 32 * MIB, 0, 0, 0}, F_PUSHED},
    {{AG, 4, 1, 32 * MIB, 1, 0, 0}, F_ONE_SHOT},
    /* alltoall: LL on the block; staged bytes are n blocks: windows from 64 KiB (own GPUs) or 8 MiB, pushed
     * from 32 MiB (own GPUs) */
    {{AA, 2, 1, MIB, 0, 0, 0}, F_LL},
    {{AA, 8, 1, 512 * KIB, 0, 0, 1}, F_LL},
    {{AA, 8, 1, 8 * KIB, 0, 0, 1}, F_LL},
    {{AA, 8, 1, 512 * KIB + 1, 0, 0, 1}, F_WINDOW},
    {{AA, 8, 1, MIB - 1, 1, 0, 1}, F_ONE_SHOT},
    {{AA, 8, 1, MIB, 1, 0, 1}, F_WINDOW},
    {{AA, 3, 1, 11184810, 0, 0, 0}, F_ONE_SHOT},
    {{AA, 3, 1, 11184811, 0, 0, 0}, F_PUSHED},
    {{AA, 4, 1, 8 * MIB, 1, 0, 0}, F_ONE_SHOT},
};

Test(cuda_select, todays_choice_as_written_down)
{
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        form_t f = today(&table[i].c);
        cr_expect_eq(f, table[i].form, "row %zu (%s on %d ranks, %zu x %zu B%s%s%s): %s, written down %s", i,
                     weft_coll_kind_name(table[i].c.kind), table[i].c.n, table[i].c.count, table[i].c.es,
                     table[i].c.shared ? ", shared GPU" : "", table[i].c.capturing ? ", captured" : "",
                     table[i].c.window ? ", in a window" : "", form_names[f], form_names[table[i].form]);
    }
}
