/* Which form a GPU collective (coll/cuda) runs in, checked without a GPU.
 *
 * today() is coll/cuda's choice as its issue() made it before the
 * algorithms were cut into files of their own (commit 467bd69,
 * coll/cuda/cuda.c), with every WEFT_CUDA_COLL_* variable at its default:
 * the reference. `table` writes that choice down at the sizes where it
 * changes, and today() is checked against it. Then the selection (the
 * rules.conf rules with mem=cuda, the algorithms' own declines) must pick
 * the same form for every collective, rank count, size around every
 * threshold, element size, GPU shape (own or shared), eager or captured, in
 * a registered window or not: the communicators are made up, with the state
 * coll/cuda would have set up on them, and no driver is called. */
#include "coll/coll.h"
#include "coll/cuda/cuda_coll.h"
#include "harness.h"
#include "pt2pt/cuda.h"
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
static form_t today_fused(const call_t *c, size_t fused)
{
    const size_t two_shot = 8 * MIB, never = SIZE_MAX;
    weft_coll_kind_t k = c->kind;
    int n = c->n, ar = k == WEFT_COLL_ALLREDUCE, bc = k == WEFT_COLL_BCAST;
    size_t block = c->count * c->es;
    size_t staged = k == WEFT_COLL_BARRIER                                           ? 0
                    : k == WEFT_COLL_REDUCE_SCATTER_BLOCK || k == WEFT_COLL_ALLTOALL ? (size_t)n * block
                                                                                     : block;
    size_t slot = c->shared ? 8 * MIB : 32 * MIB, fuse_max = c->capturing && fused > 4096 ? 4096 : fused;
    int fusing = staged > 0 ? staged <= fuse_max && staged <= slot : fused > 0;
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

static form_t today(const call_t *c)
{
    return today_fused(c, 16384);
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

/* ---- the selection ------------------------------------------------------------------------------------- */

static void single_env(void)
{
    th_single_env();
    unsetenv("WEFT_COLL_TUNE");
    setenv("WEFT_LOG_LEVEL", "error", 1);
}

/* A registered window this far into a made-up address space holds every input of a call "in a window"; the
 * calls not in one have none registered. */
#define WINDOW_BASE ((uintptr_t)1 << 44)
#define WINDOW_LEN  ((unsigned long long)1 << 42)

/* A communicator of n ranks on one node (this rank 0) and the state coll/cuda would have set up on it: slots of
 * the auto size, the pipelined grid of a 132-SM GPU (its share where ranks share one). */
typedef struct {
    struct weft_comm_s comm;
    weft_gpu_state_t st;
} made_up_t;

static void made_up(made_up_t *m, int n, int shared, int window)
{
    memset(m, 0, sizeof(*m));
    m->comm.size = n;
    m->comm.nnodes = 1;
    snprintf(m->comm.name, sizeof(m->comm.name), "made-up %d", n);
    weft_gpu_state_t *st = &m->st;
    st->comm = &m->comm;
    st->n = n;
    st->ready = 1;
    st->shared = shared;
    st->per_gpu = shared ? n : 1;
    st->sms = 132;
    st->pipe_most = st->ll_most = shared ? (unsigned)(132 / n) : 132;
    st->pipe_threads = WEFT_GPU_PIPE_THREADS;
    st->slot = weft_gpu_slot_bytes(shared);
    if (window) {
        st->win[0].st = st;
        st->win[0].base[0] = WINDOW_BASE;
        st->win[0].len[0] = WINDOW_LEN;
        st->nwin = 1;
    }
    cr_assert_eq(weft_coll_state_set(&m->comm, WEFT_COLL_COMP_CUDA, st), WEFT_SUCCESS);
}

static const weft_dtype_t by_size[9] = {[1] = WEFT_INT8, [2] = WEFT_FLOAT16, [4] = WEFT_FLOAT32, [8] = WEFT_FLOAT64};

/* The form the selection picks: the first candidate that takes the call (what weft_gpu_build asks), its name in
 * *name. */
static form_t selected(const call_t *c, made_up_t *m, const char **name)
{
    weft_coll_args_t a;
    memset(&a, 0, sizeof(a));
    a.kind = c->kind;
    a.comm = &m->comm;
    a.count = c->kind == WEFT_COLL_BARRIER ? 0 : c->count;
    a.dtype = by_size[c->es];
    a.esize = c->es;
    a.op = WEFT_SUM;
    a.mem = WEFT_MEM_CUDA;
    a.sendbuf = (const void *)(WINDOW_BASE + 4096); /* out of place, both in the window where it is registered */
    a.recvbuf = (void *)(WINDOW_BASE + (WINDOW_LEN >> 1));
    size_t block = c->count * c->es;
    a.bytes = c->kind == WEFT_COLL_BARRIER                ? 0
              : c->kind == WEFT_COLL_REDUCE_SCATTER_BLOCK ? (size_t)c->n * block
                                                          : block;
    const weft_coll_alg_t *cand[32];
    int nc = weft_coll_select(&a, cand, 32);
    for (int i = 0; i < nc; i++) {
        int rc = weft_gpu_takes(cand[i], &a, &m->st);
        *name = cand[i]->name;
        if (rc == WEFT_ERR_ARG) return (form_t)-1; /* not a kernel: staged, or another component's */
        if (rc) continue;
        int fused = weft_gpu_fuses(&a, &m->st, c->capturing);
        static const struct {
            const char *name;
            form_t form;
        } forms[] = {
            {"cuda_ll", F_LL},     {"cuda_window", F_WINDOW}, {"cuda_two_shot", F_TWO},       {"cuda_two_step", F_TWO},
            {"cuda_ring", F_RING}, {"cuda_pushed", F_PUSHED}, {"cuda_pipelined", F_PIPELINED}};
        for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++)
            if (!strcmp(cand[i]->name, forms[f].name)) return forms[f].form;
        if (!strcmp(cand[i]->name, "cuda_one_shot")) return fused ? F_FUSED : F_ONE_SHOT;
        if (!strcmp(cand[i]->name, "cuda_flags")) return fused ? F_BARRIER_FUSED : F_BARRIER;
        return (form_t)-1;
    }
    *name = "none";
    return (form_t)-1;
}

/* Element counts around every size where today's choice changes, in bytes staged per rank (n blocks of an
 * alltoall or reduce_scatter_block) and in bytes of a piece, and every power of two. */
static size_t counts_for(const call_t *c, size_t *out, size_t max)
{
    static const size_t staged[] = {16384,   65536,   512 * KIB, MIB,       2 * MIB,
                                    4 * MIB, 8 * MIB, 32 * MIB,  128 * MIB, 256 * MIB};
    static const size_t pieces[] = {512 * KIB, MIB, 2 * MIB};
    size_t n = 0, per = c->es *
                        (c->kind == WEFT_COLL_REDUCE_SCATTER_BLOCK || c->kind == WEFT_COLL_ALLTOALL ? (size_t)c->n : 1);
    size_t at[64], nat = 0;
    for (size_t i = 0; i < sizeof(staged) / sizeof(staged[0]); i++)
        at[nat++] = (staged[i] + per - 1) / per;
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++)
        at[nat++] = pieces[i] / c->es;
    for (int k = 0; k <= 30; k += 3)
        at[nat++] = ((size_t)1 << k) / c->es + 1;
    for (size_t i = 0; i < nat; i++)
        for (int d = -1; d <= 1; d++) {
            size_t c = at[i] + (size_t)d, seen = 0;
            for (size_t j = 0; j < n && !seen; j++)
                seen = out[j] == c;
            if (c >= 1 && !seen && n < max) out[n++] = c;
        }
    return n;
}

static const weft_coll_kind_t kinds[] = {WEFT_COLL_BARRIER,   WEFT_COLL_BCAST,     WEFT_COLL_REDUCE,
                                         WEFT_COLL_ALLREDUCE, WEFT_COLL_ALLGATHER, WEFT_COLL_REDUCE_SCATTER_BLOCK,
                                         WEFT_COLL_ALLTOALL};

/* Every collective, 1-8 ranks, own and shared GPUs, eager and captured, in a window or not, element sizes 1-8,
 * with WEFT_CUDA_COLL_FUSED at `fused`: the selection's form against today's. */
static void compare_all(int fused)
{
    weft_gpu_vars.fused = fused;
    size_t calls = 0, bad = 0;
    static made_up_t m;
    for (int n = 1; n <= WEFT_CK_MAX_RANKS; n++)
        for (int shared = 0; shared <= (n > 1); shared++)
            for (int window = 0; window <= 1; window++) {
                made_up(&m, n, shared, window);
                for (size_t ki = 0; ki < sizeof(kinds) / sizeof(kinds[0]); ki++)
                    for (size_t es = 1; es <= 8; es *= 2)
                        for (int capturing = 0; capturing <= 1; capturing++) {
                            call_t c = {kinds[ki], n, es, 1, shared, capturing, window};
                            size_t counts[128];
                            size_t nc = kinds[ki] == WEFT_COLL_BARRIER ? 1 : counts_for(&c, counts, 128);
                            for (size_t i = 0; i < nc; i++) {
                                c.count = kinds[ki] == WEFT_COLL_BARRIER ? 0 : counts[i];
                                const char *name = "";
                                form_t want = today_fused(&c, (size_t)fused), got = selected(&c, &m, &name);
                                calls++;
                                if (got != want && bad++ < 20)
                                    cr_log_error("%s on %d ranks (%s GPU%s%s), %zu x %zu B: %s (%s) where today "
                                                 "%s",
                                                 weft_coll_kind_name(c.kind), n, shared ? "shared" : "own",
                                                 capturing ? ", captured" : "", window ? ", in a window" : "", c.count,
                                                 es, (int)got >= 0 ? form_names[got] : "-", name, form_names[want]);
                            }
                        }
                free(m.comm.coll);
            }
    weft_gpu_vars.fused = 16384;
    cr_assert_eq(bad, 0, "%zu of %zu calls took another form than today (WEFT_CUDA_COLL_FUSED=%d)", bad, calls, fused);
}

Test(cuda_select, rules_pick_todays_form)
{
    single_env();
    cr_assert_eq(weft_init(NULL, NULL), WEFT_SUCCESS, "%s", weft_last_error());
    compare_all(16384);
    /* the fused sizes decide between one shot fused and the other forms */
    compare_all(0);
    compare_all(65536);
    weft_finalize();
}

/* An algorithm forced by WEFT_COLL_TUNE is tried first; where it cannot run the call, the rules' choice runs. */
Test(cuda_select, forced_form_first_then_the_rules)
{
    single_env();
    setenv("WEFT_COLL_TUNE", "allreduce:mem=cuda:cuda_ring,alltoall:64k-inf:mem=cuda:cuda_pipelined", 1);
    cr_assert_eq(weft_init(NULL, NULL), WEFT_SUCCESS, "%s", weft_last_error());
    static made_up_t m;
    const char *name = "";
    made_up(&m, 4, 1, 0);
    call_t c = {WEFT_COLL_ALLREDUCE, 4, 4, MIB, 1, 0, 0};
    cr_expect_eq(selected(&c, &m, &name), F_RING, "4 MiB allreduce on 4 ranks sharing a GPU: %s", name);
    c.count = 100; /* up to WEFT_CUDA_COLL_FUSED the ring declines: LL */
    cr_expect_eq(selected(&c, &m, &name), F_LL, "a small allreduce: %s", name);
    c = (call_t){WEFT_COLL_ALLTOALL, 4, 1, 64 * KIB, 1, 0, 0}; /* sizes are one block: the rule takes 64 KiB */
    cr_expect_eq(selected(&c, &m, &name), F_PIPELINED, "64 KiB alltoall blocks: %s", name);
    c.count = 64 * KIB - 1;
    cr_expect_eq(selected(&c, &m, &name), F_LL, "alltoall blocks below the rule: %s", name);
    free(m.comm.coll);
    made_up(&m, 2, 1, 0);
    c = (call_t){WEFT_COLL_ALLREDUCE, 2, 4, MIB, 1, 0, 0};
    cr_expect_eq(selected(&c, &m, &name), F_ONE_SHOT, "a ring of 2 ranks declines: %s", name);
    free(m.comm.coll);
    weft_finalize();
    unsetenv("WEFT_COLL_TUNE");
}

/* gpu= is a condition of mem=cuda rules, shared or own: anything else fails init, naming the rule. */
Test(cuda_select, gpu_condition_checked)
{
    static const char *const bad[][2] = {
        {"allreduce:gpu=own:ring", "gpu= is a condition of mem=cuda rules"},
        {"allreduce:gpu=some:mem=cuda:cuda_ll", "'gpu=some' is not gpu=shared or gpu=own"},
        {"allreduce:xport=host:ring", "xport= is a condition of mem=cuda rules"},
        {"allreduce:xport=ib:mem=cuda:direct", "'xport=ib' is not xport=cuda or xport=host"},
        {"allreduce:nodes=2:ring", "'nodes=2' is not nodes=1 or nodes=multi"},
    };
    single_env();
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("WEFT_COLL_TUNE", bad[i][0], 1);
        cr_expect_eq(weft_init(NULL, NULL), WEFT_ERR_ARG, "%s", bad[i][0]);
        cr_expect(strstr(weft_last_error(), bad[i][1]) != NULL, "%s: %s", bad[i][0], weft_last_error());
    }
    setenv("WEFT_COLL_TUNE", "allreduce:8m-inf:np=3-8:gpu=own:mem=cuda:cuda_two_shot", 1);
    cr_assert_eq(weft_init(NULL, NULL), WEFT_SUCCESS, "%s", weft_last_error());
    char table[1 << 16];
    cr_assert_eq(weft_coll_table(table, sizeof(table)), WEFT_SUCCESS);
    cr_expect(strstr(table, "allreduce:8m-inf:np=3-8:gpu=own:mem=cuda:cuda_two_shot   (WEFT_COLL_TUNE") != NULL,
              "weft_coll_table does not print the rule as given");
    weft_finalize();
    unsetenv("WEFT_COLL_TUNE");
}

/* Across nodes the xport= rows follow point-to-point's way with device buffers: under WEFT_CUDA=staged (through
 * its pinned chunks, as where the UCX in use carries no CUDA memory) the xport=host rows apply and the xport=cuda
 * rows do not. What the built-in rules then try first of coll/cuda's direct ring and its staged form (allgather:
 * hier, then the direct ring for what it declines). */
Test(cuda_select, across_nodes_rows_follow_xport)
{
    single_env();
#ifdef WEFT_HAVE_CUDA
    setenv("WEFT_CUDA", "staged", 1); /* (a build without CUDA refuses it, and hands UCX no device buffer anyway) */
#endif
    cr_assert_eq(weft_init(NULL, NULL), WEFT_SUCCESS, "%s", weft_last_error());
    cr_expect_eq(weft_cuda_ucx_carries(), 0, "WEFT_CUDA=staged: point-to-point hands no device buffer to UCX");
    static struct weft_comm_s comm;
    memset(&comm, 0, sizeof(comm));
    comm.size = 2;
    comm.nnodes = 2;
    snprintf(comm.name, sizeof(comm.name), "made-up, two nodes");
    static const struct {
        weft_coll_kind_t kind;
        size_t bytes; /* per rank; reduce_scatter_block: the whole vector */
        const char *first;
    } want[] = {
        {WEFT_COLL_ALLREDUCE, 16 * MIB, "direct"},             /* xport=host: from 128 KiB */
        {WEFT_COLL_ALLREDUCE, 64 * KIB, "staged"},             /* xport=cuda's row from 64 KiB does not apply */
        {WEFT_COLL_REDUCE_SCATTER_BLOCK, MIB, "direct"},       /* xport=host: from 256 KiB */
        {WEFT_COLL_REDUCE_SCATTER_BLOCK, 128 * KIB, "staged"}, /* xport=cuda's from 128 KiB does not apply */
        {WEFT_COLL_ALLGATHER, 4 * MIB, "direct"},              /* what hier declines, either way */
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        weft_coll_args_t a;
        memset(&a, 0, sizeof(a));
        a.kind = want[i].kind;
        a.comm = &comm;
        a.dtype = WEFT_FLOAT32;
        a.esize = 4;
        a.op = WEFT_SUM;
        a.mem = WEFT_MEM_CUDA;
        a.bytes = want[i].bytes;
        a.count = a.kind == WEFT_COLL_REDUCE_SCATTER_BLOCK ? a.bytes / 8 : a.bytes / 4;
        const weft_coll_alg_t *cand[32];
        int nc = weft_coll_select(&a, cand, 32), first = -1;
        for (int k = 0; k < nc && first < 0; k++)
            if (!strcmp(cand[k]->name, "direct") || !strcmp(cand[k]->name, "staged")) first = k;
        cr_expect(first >= 0 && !strcmp(cand[first]->name, want[i].first), "%s of %zu bytes across nodes: %s first",
                  weft_coll_kind_name(a.kind), a.bytes, first >= 0 ? cand[first]->name : "neither");
        if (a.kind == WEFT_COLL_ALLGATHER)
            cr_expect(nc > 0 && !strcmp(cand[0]->name, "hier"), "allgather: %s before hier", cand[0]->name);
    }
    weft_finalize();
    unsetenv("WEFT_CUDA");
}
