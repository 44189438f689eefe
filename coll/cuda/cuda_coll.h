/* coll/cuda's internals: collectives on device buffers among the ranks of
 * one node, by kernels over CUDA IPC-mapped scratch (kernels.h: the layout
 * and the protocols; kernels/<protocol>.cu: the kernels, embedded as
 * fatbins and loaded through the driver, which weft opens at run time and
 * never links). The files:
 *
 *   cuda.c          the component: its variables, parameters and algorithm list
 *   module.c        the kernels, loaded from the embedded fatbins into each context
 *   setup.c         a communicator's GPU state: scratch regions exchanged through CUDA IPC at its first GPU call
 *   window.c        registered buffers (weft_comm_window_register), which calls read in place
 *   launch.c        a call's life: its schedule steps, launches (programmatic dependent launch), CUDA graph
 *                   capture, the event pool, the abort word that ends the kernels' waits at the deadline
 *   staging.c       the slot protocol's steps: stage into this rank's slot, barrier, reduce or copy out of the
 *                   peers' slots (fused into one launch for small calls)
 *   pipelined.c     the pipelined kernel's geometry and launch (its reading, pushing and ring forms)
 *   ll.c            the LL kernel's launch
 *   <collective>_<form>.c   the algorithms, one a file, each a row of cuda.c's list, chosen by rules.conf's
 *                   mem=cuda rules; one that cannot run a call declines it and the next candidate runs
 *   staged.c        the staged algorithms: host copies around the host algorithm, where no kernel runs
 *
 * Per communicator: each rank's scratch region (flags, two slots of
 * WEFT_CUDA_COLL_SLOT bytes), its sequence counter in device memory, two
 * words of host-mapped memory (abort, error), weft's stream. A call's
 * launches go on its stream when its schedule starts (in the user's call
 * order), and the schedule polls an event recorded after the last one. A
 * wait past the deadline sets the abort word: the kernels stop, the call
 * returns the timeout, and the communicator's GPU collectives fail from then
 * on (its ranks' counters are out of step). Semantics as for CUDA-aware
 * MPI: the caller synchronises the stream that wrote the buffers; the call
 * returns when the result is in place.
 *
 * An algorithm's decision to take a call (its `takes`) reads the arguments
 * and the communicator's state only, no driver: test/test_cuda_select.c asks
 * it without a GPU. Everything the algorithms use compiles without the CUDA
 * headers; the driver's side (module.c, setup.c, window.c, launch.c) only
 * with them. */
#ifndef WEFT_COLL_CUDA_CUDA_COLL_H
#define WEFT_COLL_CUDA_CUDA_COLL_H

#include "coll/coll.h"
#include "coll/cuda/kernels.h"
#include "src/cuda/runtime.h"

#include <stddef.h>
#include <stdint.h>

/* The WEFT_CUDA_COLL_* variables (cuda.c). */
typedef struct weft_gpu_vars {
    int enabled;     /* WEFT_CUDA_COLL */
    int slot;        /* WEFT_CUDA_COLL_SLOT (-1: auto) */
    int fused;       /* WEFT_CUDA_COLL_FUSED */
    int pipe_blocks; /* WEFT_CUDA_COLL_PIPE_BLOCKS */
    int pipe_depth;  /* WEFT_CUDA_COLL_PIPE_DEPTH (-1: auto) */
    int pipe_ahead;  /* WEFT_CUDA_COLL_PIPE_AHEAD (-1: auto) */
    int pipe_split;  /* WEFT_CUDA_COLL_PIPE_SPLIT (-1: auto) */
    int pdl;         /* WEFT_CUDA_COLL_PDL */
} weft_gpu_vars_t;
extern weft_gpu_vars_t weft_gpu_vars;

/* The pipelined kernels' threads per block; the LL kernels' most (their __launch_bounds__). 8 warps: the blocks
 * the pipelined kernels' grids and warp splits (pipe_split) are tuned for. */
enum { WEFT_GPU_PIPE_THREADS = 256, WEFT_GPU_LL_THREADS = 512 };
enum { WEFT_GPU_MAX_WINDOWS = 64, WEFT_GPU_EVPOOL = 32 };
/* The element types and ops of the reduce kernels (kernels.h's lists follow weft_dtype_t, weft_op_t). */
enum { WEFT_GPU_NTYPES = WEFT_FLOAT64 + 1, WEFT_GPU_NOPS = WEFT_AVG + 1 };

typedef unsigned long long weft_gpu_ptr_t; /* a device address (CUdeviceptr) */

/* A registered buffer (weft_comm_window_register): index i of every rank's
 * table; base[p] is rank p's buffer as this rank addresses it (its own, or
 * mapped through CUDA IPC), len[p] its bytes. */
struct weft_window {
    struct weft_gpu_state *st; /* NULL: the entry is free */
    int index;
    weft_gpu_ptr_t base[WEFT_CK_MAX_RANKS];
    weft_gpu_ptr_t mapped[WEFT_CK_MAX_RANKS]; /* what cuIpcOpenMemHandle returned (closed at deregistration) */
    unsigned long long len[WEFT_CK_MAX_RANKS];
};
typedef struct weft_window weft_gpu_window_t;

/* The kernels, by kernels.h's names: weft_ck_<name>, and from WEFT_GPU_K_REDUCE on one per element type and
 * op: weft_ck_<name>_<type>_<op> for the hot pairs, else the type's weft_ck_<name>_<type> (module.c). */
typedef enum weft_gpu_kernel {
    WEFT_GPU_K_STAGE,
    WEFT_GPU_K_BARRIER,
    WEFT_GPU_K_COPY,
    WEFT_GPU_K_FUSED_COPY,
    WEFT_GPU_K_PIPE_COPY,
    WEFT_GPU_K_PUSH_COPY,
    WEFT_GPU_K_PUSH_BCAST,
    WEFT_GPU_K_RING_ALLGATHER,
    WEFT_GPU_K_RING_BCAST,
    WEFT_GPU_K_LL_COPY,
    WEFT_GPU_K_REDUCE,
    WEFT_GPU_K_FUSED_REDUCE,
    WEFT_GPU_K_PIPE_REDUCE,
    WEFT_GPU_K_PUSH_REDUCE,
    WEFT_GPU_K_PUSH_ALLREDUCE,
    WEFT_GPU_K_RING_REDUCE_SCATTER,
    WEFT_GPU_K_RING_ALLREDUCE,
    WEFT_GPU_K_LL_REDUCE,
    WEFT_GPU_K_LOCAL_REDUCE,
    WEFT_GPU_KERNELS
} weft_gpu_kernel_t;

#ifdef WEFT_HAVE_CUDA
/* The kernels loaded into one context (module.c). */
typedef struct weft_gpu_module {
    CUcontext ctx;
    CUmodule mod[16]; /* one per fatbin */
    int nmod;
    CUfunction one[WEFT_GPU_K_REDUCE];
    CUfunction each[WEFT_GPU_KERNELS - WEFT_GPU_K_REDUCE][WEFT_GPU_NTYPES][WEFT_GPU_NOPS];
    int sms;
    int pipe_threads; /* WEFT_GPU_PIPE_THREADS, or fewer where a pipelined kernel's registers allow fewer */
    /* Blocks one SM holds at once of the LL kernels (WEFT_GPU_LL_THREADS a block) and of the pipelined ones
     * (pipe_threads), the least over each kind's kernels: their blocks spin on the peers' blocks */
    int ll_per_sm, pipe_per_sm;
    int pdl; /* the GPU and driver have programmatic dependent launch (used unless WEFT_CUDA_COLL_PDL=0) */
} weft_gpu_module_t;
#endif

/* A communicator's GPU state (setup.c), created at its first GPU call. */
typedef struct weft_gpu_state {
    weft_comm_t comm;
    int n, me;
    int ready;   /* regions exchanged and mapped */
    int broken;  /* a weft error code: every later call fails with it */
    int shared;  /* two ranks of the communicator share a GPU (rules.conf's gpu=shared) */
    int per_gpu; /* processes that may run kernels on one of the ranks' GPUs at once (this one's and others') */
    /* The most blocks of an LL / pipelined kernel: every rank's (all per_gpu processes') fit on the GPU at
     * once, so no spinning block waits on a peer's block that cannot start; the same on every rank */
    unsigned ll_most, pipe_most;
    int sms;          /* this rank's GPU's SMs */
    int pipe_threads; /* the pipelined kernels' threads a block (the module's) */
    size_t slot;      /* bytes of a scratch slot */
    char why[256];
    weft_gpu_ptr_t region; /* this rank's: header + 2 slots */
    weft_gpu_ptr_t counter;
    weft_gpu_ptr_t dwords;                  /* the words below as the device addresses them */
    int *words;                             /* host-mapped: [0] abort, [1] error */
    weft_gpu_ptr_t peer[WEFT_CK_MAX_RANKS]; /* every rank's region (own: region) */
    weft_gpu_window_t win[WEFT_GPU_MAX_WINDOWS];
    int nwin; /* windows registered: a call looks for its input in them only when there are some */
#ifdef WEFT_HAVE_CUDA
    CUcontext ctx;
    const weft_gpu_module_t *m;
    CUstream stream;
    /* The last eager call's end (its event, until the call is reaped) and the stream it went on. */
    CUevent tail;
    CUstream tail_stream;
    /* Eager calls in issue order: the last one's number, and the highest known done (the calls run on the GPU
     * in call order, tail below: every one before it is done too, no need to ask their events). */
    unsigned long long issued, done;
    /* Events of reaped calls, for the next ones (creating and destroying one costs about a microsecond of the
     * call's host time) */
    CUevent evpool[WEFT_GPU_EVPOOL];
    int nev;
#endif
} weft_gpu_state_t;

struct weft_gpu_alg;

/* One call (launch.c): built with its schedule, issued when the schedule starts. */
typedef struct weft_gpu_op {
    weft_gpu_state_t *st;
    weft_coll_args_t a;
    const struct weft_gpu_alg *alg;
    char name[64];          /* "<collective> cuda_<form>", for messages */
    int capturing;          /* the stream is being captured into a CUDA graph: no event, nothing to poll */
    int started;            /* the launches were issued (the event marks their end) */
    unsigned long long num; /* its place in the communicator's eager calls (weft_gpu_state.issued) */
    int fusing;             /* one chunk, small: the steps fill fz, which launches once at the end */
    weft_ck_fused_args_t fz;
    weft_ck_stage_args_t stg;     /* not fused: the stages before the next barrier, launched with it */
    size_t stg_most;              /* the largest of them (the launch's grid) */
    const weft_gpu_window_t *win; /* the call's input lies in this window: read in place */
#ifdef WEFT_HAVE_CUDA
    CUstream stream; /* the caller's (weft_*_on_stream) or the communicator's */
    CUevent ev;
#endif
} weft_gpu_op_t;

/* An algorithm: the framework's row (its build is weft_gpu_build with this), whether it takes a call (0) or
 * declines it (weft_coll_decline: WEFT_ERR_UNSUPPORTED), from the arguments and the communicator's state alone,
 * and the launches that run it on op's stream. */
typedef struct weft_gpu_alg {
    weft_coll_alg_t alg;
    int (*takes)(const weft_coll_args_t *a, const weft_gpu_state_t *st);
    int (*issue)(weft_gpu_op_t *op);
} weft_gpu_alg_t;

/* Defines weft_gpu_<coll>_<form>, the algorithm named "cuda_<form>" of collective kind (one file each). */
#define WEFT_GPU_ALG(coll, form, kind, desc, takes_, issue_)                                                           \
    static int build_##coll##_##form(weft_sched_t *s, const weft_coll_args_t *a);                                      \
    const weft_gpu_alg_t weft_gpu_##coll##_##form = {                                                                  \
        {"cuda_" #form, kind, desc, build_##coll##_##form, 1}, takes_, issue_};                                        \
    static int build_##coll##_##form(weft_sched_t *s, const weft_coll_args_t *a)                                       \
    {                                                                                                                  \
        return weft_gpu_build(s, a, &weft_gpu_##coll##_##form);                                                        \
    }

/* Defines weft_gpu_<coll>_<form>, an algorithm made of one-shot steps (staging.c): it takes every call the
 * kernels can run, and runs fused where weft_gpu_fuses says. */
#define WEFT_GPU_ONE_SHOT_ALG(coll, form, kind, desc, steps)                                                           \
    static int issue_##coll##_##form(weft_gpu_op_t *op)                                                                \
    {                                                                                                                  \
        return weft_gpu_one_shot(op, steps);                                                                           \
    }                                                                                                                  \
    WEFT_GPU_ALG(coll, form, kind, desc, weft_gpu_takes_all, issue_##coll##_##form)

/* Defines weft_gpu_<coll>_<form>, a form of the pipelined kernel (pipelined.c): `fill` sets the kernel's
 * arguments for it after weft_gpu_pipe_init. */
#define WEFT_GPU_PIPE_ALG(coll, form, kind, desc, fill)                                                                \
    static int takes_##coll##_##form(const weft_coll_args_t *a, const weft_gpu_state_t *st)                            \
    {                                                                                                                  \
        return weft_gpu_pipe_takes(a, st, fill);                                                                       \
    }                                                                                                                  \
    static int issue_##coll##_##form(weft_gpu_op_t *op)                                                                \
    {                                                                                                                  \
        return weft_gpu_pipe_issue(op, fill);                                                                          \
    }                                                                                                                  \
    WEFT_GPU_ALG(coll, form, kind, desc, takes_##coll##_##form, issue_##coll##_##form)

/* Defines weft_gpu_<coll>_pushed: the collective's pipelined form (weft_gpu_<coll>_pipe), pushing. */
#define WEFT_GPU_PUSHED_ALG(coll, kind, desc)                                                                          \
    static void push_##coll(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p)             \
    {                                                                                                                  \
        weft_gpu_##coll##_pipe(a, st, p);                                                                              \
        p->push = 1;                                                                                                   \
    }                                                                                                                  \
    WEFT_GPU_PIPE_ALG(coll, pushed, kind, desc, push_##coll)

/* Defines weft_gpu_<coll>_window, the form that reads `input` in place out of registered windows (window.c):
 * `steps` reduces or copies between the barriers. */
#define WEFT_GPU_WINDOW_ALG(coll, kind, desc, input, steps)                                                            \
    static int takes_##coll##_window(const weft_coll_args_t *a, const weft_gpu_state_t *st)                            \
    {                                                                                                                  \
        return weft_gpu_window_takes(a, st, input);                                                                    \
    }                                                                                                                  \
    static int issue_##coll##_window(weft_gpu_op_t *op)                                                                \
    {                                                                                                                  \
        return weft_gpu_window_run(op, input, steps);                                                                  \
    }                                                                                                                  \
    WEFT_GPU_ALG(coll, window, kind, desc, takes_##coll##_window, issue_##coll##_window)

/* ---- cuda.c -------------------------------------------------------------------------------------------- */
/* Whether alg, one of coll/cuda's kernel algorithms, takes a on a communicator in state st (0), declines it
 * (WEFT_ERR_UNSUPPORTED), or is not one of them (WEFT_ERR_ARG): what weft_gpu_build asks, for the tests. */
int weft_gpu_takes(const weft_coll_alg_t *alg, const weft_coll_args_t *a, const weft_gpu_state_t *st);

/* ---- launch.c ------------------------------------------------------------------------------------------ */
/* The build of every algorithm: the buffers' context, the communicator's state (set up at its first call),
 * alg->takes, then the call's schedule steps (its launches go out when the schedule starts). */
int weft_gpu_build(weft_sched_t *s, const weft_coll_args_t *a, const weft_gpu_alg_t *alg);
/* A launch of kernel k (of element type dt and op o for the reduce kernels) on the call's stream: gx x gy
 * blocks of `threads`, one argument block; a failure names `what`. */
int weft_gpu_launch(weft_gpu_op_t *op, weft_gpu_kernel_t k, weft_dtype_t dt, int o, unsigned gx, unsigned gy,
                    unsigned threads, void *args, const char *what);

/* ---- setup.c ------------------------------------------------------------------------------------------- */
/* Declines (WEFT_ERR_UNSUPPORTED) a call no kernel of coll/cuda can run: no kernels in this build, the
 * variable off, a driver without what they need, a communicator spanning nodes or of more ranks than
 * WEFT_CK_MAX_RANKS, an op or type of no reduce kernel. */
int weft_gpu_usable(const weft_coll_args_t *a);
/* The communicator's state for a call on device buffers (set up collectively at its first one), or a decline
 * when a buffer is not device memory; an error once the state is broken. */
int weft_gpu_state_of(const weft_coll_args_t *a, weft_gpu_state_t **out);
/* The bytes of a scratch slot: WEFT_CUDA_COLL_SLOT, or its auto value for shared or own GPUs. */
size_t weft_gpu_slot_bytes(int shared);
/* The component's hooks (cuda.c's descriptor): rules.conf's gpu= condition, and the state's release. */
int weft_gpu_shared(const weft_coll_args_t *a);
void weft_gpu_state_release(weft_comm_t comm, void *state);
int weft_gpu_broken(const weft_gpu_state_t *st);

/* ---- direct.c: rings whose messages move in device memory ---------------------------------------------- */
typedef struct weft_gpu_direct weft_gpu_direct_t;
/* The checks of every direct algorithm (declines: not device buffers, WEFT_CUDA=off, WEFT_CUDA_COLL=0). */
int weft_gpu_direct_usable(const weft_coll_args_t *a, const char *name);
/* Marks s device-aware and logs the ring and who moves its blocks (gpu: what the GPU does besides, or NULL). */
void weft_gpu_direct_start(weft_sched_t *s, const weft_coll_args_t *a, const char *name, const char *gpu);
/* A reducing direct algorithm's checks (weft_gpu_direct_usable's, and: no kernels, an
 * average, an op or type of no kernel, buffers of no context or of two) and setup on s: the buffers' context, the
 * kernels, a stream of weft's own, the call's event, `bytes` of device scratch; released when s ends. in: the
 * input where it is not the output (checked to be the output's context). s is marked device-aware. */
int weft_gpu_direct_open(weft_sched_t *s, const weft_coll_args_t *a, const char *name, const void *in, size_t bytes,
                         weft_gpu_direct_t **out);
char *weft_gpu_direct_scratch(const weft_gpu_direct_t *d);
/* A reduce-scatter ring over the schedule's communicator, n - 1 rounds: block b of the input `in` is cnt[b]
 * elements at element off[b]; this rank's block (me) reduced over every rank lands in `mine`. Needs 2 x the
 * largest block of scratch. */
int weft_gpu_direct_reduce_scatter(weft_sched_t *s, weft_gpu_direct_t *d, const char *in, char *mine, const size_t *off,
                                   const size_t *cnt);

/* ---- window.c ------------------------------------------------------------------------------------------ */
/* The window of this rank's that holds [p, p + bytes), and p's offset in it (NULL: none). */
const weft_gpu_window_t *weft_gpu_window_of(const weft_gpu_state_t *st, const char *p, size_t bytes, size_t *off);
/* The input a window form reads of a call, and how many bytes of it per rank (*need); NULL when the call never
 * runs in a window (in place where a rank writes what its peers read). */
typedef const char *(*weft_gpu_input_fn)(const weft_coll_args_t *a, size_t *need);
/* A window form's condition: the input lies in a registered window on this rank, past what a fused launch takes
 * (the first barrier checks the peers' alike). */
int weft_gpu_window_takes(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_gpu_input_fn input);
/* A call in a window: the barrier that announces where (each rank checks the others'), `steps` reading straight
 * out of the peers' windows, then a barrier (the peers are done reading this rank's input before its stream goes
 * on). */
typedef int (*weft_gpu_window_steps_fn)(weft_gpu_op_t *op, const char *in, size_t need);
int weft_gpu_window_run(weft_gpu_op_t *op, weft_gpu_input_fn input, weft_gpu_window_steps_fn steps);

/* ---- staging.c: the slot protocol ---------------------------------------------------------------------- */
/* The bytes each rank stages of a call: a reduce_scatter_block's or alltoall's n blocks, else its vector. */
size_t weft_gpu_staged(const weft_coll_args_t *a);
/* A call that stages more than WEFT_CUDA_COLL_FUSED bytes per rank: the forms other than one shot take only
 * those (the fused launch is cheaper below; the variable, not the capture-dependent limit, so that a capturing
 * rank and an eager one decide alike). */
int weft_gpu_past_fused(const weft_coll_args_t *a);
/* Whether a one-shot call runs fused (one launch of one block): up to WEFT_CUDA_COLL_FUSED bytes staged per
 * rank (4096 at most while a CUDA graph captures: a replay pays no launch cost) and one slot; a barrier: the
 * variable above 0. */
int weft_gpu_fuses(const weft_coll_args_t *a, const weft_gpu_state_t *st, int capturing);
weft_ck_ctl_t weft_gpu_ctl(const weft_gpu_state_t *st);
/* Blocks for a grid-stride kernel over `bytes` (16 bytes a thread a turn), within the max_ctas / min_ctas hints. */
unsigned weft_gpu_grid(const weft_gpu_state_t *st, size_t bytes);
/* The one-shot steps, gathered (fused) or launched: a piece of this rank's contribution into its next slot
 * (launched before the next barrier); the barrier announcing desc (WEFT_CK_DESC: 0, the input in the slot; else
 * its place in window win) and, with check, comparing the peers'; a reduce of count elements at src_off of every
 * rank's slot (or window) into out, or (out_slot) into this rank's other slot at offset (size_t)out; copies:
 * descriptor i takes len[i] bytes at src_off[i] of rank src[i]'s slot (or window) to dst[i]. */
int weft_gpu_stage(weft_gpu_op_t *op, const char *in, size_t off, size_t bytes);
int weft_gpu_barrier_as(weft_gpu_op_t *op, unsigned long long desc, int check, size_t need,
                        const weft_gpu_window_t *win);
int weft_gpu_barrier(weft_gpu_op_t *op);
int weft_gpu_reduce_as(weft_gpu_op_t *op, size_t src_off, void *out, size_t count, int out_slot);
int weft_gpu_reduce(weft_gpu_op_t *op, size_t src_off, void *out, size_t count);
int weft_gpu_copy_parts(weft_gpu_op_t *op, int n, const int *src, const size_t *src_off, char *const *dst,
                        const size_t *len);
/* Copies of len bytes each, at src_off_base (+ src_off_step[i]) of rank src[i]'s slot (or window). */
int weft_gpu_copy_out(weft_gpu_op_t *op, int n, const int *src, size_t src_off_base, const size_t *src_off_step,
                      char *const *dst, size_t len);
/* Part [off, off + bytes) of a bcast chunk from the root's slot into this rank's other slot. */
int weft_gpu_relay(weft_gpu_op_t *op, int root, size_t off, size_t bytes);
/* A one-shot call: `steps` gathered into one fused launch where weft_gpu_fuses says, else launched as they come;
 * a one-shot algorithm takes every call (weft_gpu_takes_all). */
int weft_gpu_one_shot(weft_gpu_op_t *op, int (*steps)(weft_gpu_op_t *op));
int weft_gpu_takes_all(const weft_coll_args_t *a, const weft_gpu_state_t *st);
/* One shot of a vector (allreduce, reduce): per slot chunk, stage, barrier, and where reduce_here reduce every
 * rank's slot into the output. */
int weft_gpu_one_shot_vector(weft_gpu_op_t *op, int reduce_here);
/* Two steps per slot chunk (3 or more ranks): a barrier; each rank's part of every chunk made in its other
 * slot (step: a reduce, allreduce's two shots; a relay, bcast's two steps); a barrier; every part copied out. */
typedef int (*weft_gpu_part_fn)(weft_gpu_op_t *op, size_t off, size_t elems);
int weft_gpu_two_step(weft_gpu_op_t *op, const char *in, int stages, int copies, weft_gpu_part_fn part);
/* Their condition: 3 or more ranks, past the fused sizes. */
int weft_gpu_two_step_takes(const weft_coll_args_t *a, const weft_gpu_state_t *st);

/* ---- pipelined.c --------------------------------------------------------------------------------------- */
/* A pipelined call's arguments as every form starts them (kernels.h: weft_ck_pipe_args): every peer produces
 * and consumes, one piece a unit, the input and output of the call. */
void weft_gpu_pipe_init(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p);
/* The vector's n parts of a two-phase allreduce (modes 3 and 8): whole 16-byte words each. */
void weft_gpu_pipe_parts(const weft_coll_args_t *a, int n, weft_ck_pipe_args_t *p);
/* The geometry of the form the algorithm set in p (its mode, push): blocks, positions, units, how far ahead, the
 * warp split; declines where the slots are too small for it. *grid: the launch's blocks. */
int weft_gpu_pipe_shape(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p, unsigned *grid);
/* p made a ring of the given mode (kernels.h: 5-8): one piece a position, stored into the next rank's. */
static inline void weft_gpu_pipe_ring(weft_ck_pipe_args_t *p, int mode)
{
    p->push = 0;
    p->npieces = 1;
    p->mode = mode;
}
/* Each collective's pipelined form as the peers read it (<collective>_pipelined.c); its pushed and ring forms
 * start from it. */
void weft_gpu_allreduce_pipe(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p);
void weft_gpu_reduce_pipe(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p);
void weft_gpu_reduce_scatter_pipe(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p);
void weft_gpu_bcast_pipe(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p);
void weft_gpu_allgather_pipe(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p);
void weft_gpu_alltoall_pipe(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p);
/* A pipelined algorithm's takes and issue: `form` fills p's form (weft_gpu_pipe_init done). */
typedef void (*weft_gpu_pipe_form_fn)(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p);
int weft_gpu_pipe_takes(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_gpu_pipe_form_fn form);
int weft_gpu_pipe_issue(weft_gpu_op_t *op, weft_gpu_pipe_form_fn form);

/* ---- ll.c ---------------------------------------------------------------------------------------------- */
/* The LL kernel's condition: a piece per peer of whole elements of at most 8 bytes, within the LL area's share
 * of a sender (weft_ck_ll_max). */
int weft_gpu_ll_takes(const weft_coll_args_t *a, const weft_gpu_state_t *st);
/* l as every LL call starts it: every rank sends every peer p the piece at input + p x stride (kernels.h:
 * weft_ck_ll_args); the collective says where what arrives goes (and who sends whom, where not all to all), then
 * launches: `reduce` the reduce kernel of the call's type and op, else the copy kernel. */
void weft_gpu_ll_init(const weft_gpu_op_t *op, weft_ck_ll_args_t *l, size_t stride);
int weft_gpu_ll_launch(weft_gpu_op_t *op, weft_ck_ll_args_t *l, int reduce);

/* b blocks within the communicator's max_ctas / min_ctas hints. */
static inline size_t weft_gpu_within_cta_hints(const weft_comm_t c, size_t b)
{
    if (c->gpu_max_ctas > 0 && b > (size_t)c->gpu_max_ctas) b = (size_t)c->gpu_max_ctas;
    if (c->gpu_min_ctas > 0 && b < (size_t)c->gpu_min_ctas) b = (size_t)c->gpu_min_ctas;
    return b;
}

/* The input of a call (in place: the output's data) and every peer but this rank as a mask. */
static inline const char *weft_gpu_input(const weft_coll_args_t *a)
{
    return a->sendbuf == WEFT_IN_PLACE ? (const char *)a->recvbuf : (const char *)a->sendbuf;
}
static inline unsigned weft_gpu_others(int n, int me)
{
    return ((1u << n) - 1) & ~(1u << me);
}
/* The input out of place, or NULL in place (the output's data: where a rank would overwrite what its peers read). */
static inline const char *weft_gpu_input_apart(const weft_coll_args_t *a)
{
    return a->sendbuf != WEFT_IN_PLACE && a->sendbuf != a->recvbuf ? (const char *)a->sendbuf : NULL;
}
static inline size_t weft_gpu_esize(const weft_coll_args_t *a)
{
    return a->esize ? a->esize : 1;
}

#ifdef WEFT_HAVE_CUDA
int weft_gpu_cu_fail(CUresult r, const char *what);
/* setup.c: comm's state in context ctx, set up (collectively) at its first call. */
int weft_gpu_state_get(weft_comm_t comm, CUcontext ctx, weft_gpu_state_t **out);
/* Waits (yielding) until ev has completed or `seconds` have passed: the event's last status
 * (CUDA_ERROR_NOT_READY: still running). The caller has made the event's context current. */
CUresult weft_gpu_event_wait(CUevent ev, double seconds);
/* module.c: the kernels in ctx (loaded at its first call), and kernel k's function. */
int weft_gpu_module(CUcontext ctx, const weft_gpu_module_t **out);
CUfunction weft_gpu_function(const weft_gpu_module_t *m, weft_gpu_kernel_t k, weft_dtype_t dt, int o);
/* window.c: closes this rank's IPC mappings of a window's peer buffers (the context current). */
void weft_gpu_window_unmap(weft_gpu_window_t *w, int n);
#endif
/* module.c: whether this build has the kernels (nvcc ran). */
int weft_gpu_kernels_built(void);

#endif
