/* The progress engine: drives UCX and every registered hook (collective
 * schedules later). All waiting in weft goes through weft_progress().
 * Also the liveness record: which ranks are known dead, and why. */
#include "bootstrap/bootstrap.h"
#include "src/cuda/runtime.h"
#include "weft_internal.h"

#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_HOOKS 32

static struct {
    weft_progress_fn fn;
    void *arg;
} hooks[MAX_HOOKS];
static int nhooks;

int weft_progress_register(weft_progress_fn fn, void *arg)
{
    if (nhooks == MAX_HOOKS) return weft_error(WEFT_ERR_NO_MEMORY, "progress engine: more than %d hooks", MAX_HOOKS);
    hooks[nhooks].fn = fn;
    hooks[nhooks].arg = arg;
    nhooks++;
    return WEFT_SUCCESS;
}

void weft_progress_unregister(weft_progress_fn fn, void *arg)
{
    for (int i = 0; i < nhooks; i++)
        if (hooks[i].fn == fn && hooks[i].arg == arg) {
            hooks[i] = hooks[--nhooks];
            return;
        }
}

const weft_transport_ops_t *weft_xport;

WEFT_API int weft_progress(void)
{
    WEFT_API_ENTER();
    if (WEFT_UNLIKELY(!weft_xport)) return 0;
    return weft_xport->progress() + weft_progress_hooks();
}

int weft_progress_hooks(void)
{
    int events = 0;
    for (int i = 0; i < nhooks; i++)
        events += hooks[i].fn(hooks[i].arg);
    return events;
}

void weft_progress_idle(unsigned *idle_polls, int events)
{
    if (events) {
        *idle_polls = 0;
        return;
    }
    if (++*idle_polls >= (unsigned)weft_cfg.spin_before_yield) {
        *idle_polls = 0;
        sched_yield();
    }
}

/* ---- the progress thread (weft_internal.h) ------------------------------- */

int weft_api_locking;
pthread_mutex_t weft_api_mutex = PTHREAD_MUTEX_INITIALIZER;
_Atomic int weft_api_wanted;
_Thread_local int weft_api_depth;

static pthread_t pt_thread;
static _Atomic int pt_stop;
static int pt_running;

static void *pt_main(void *arg)
{
    (void)arg;
    long us = weft_cfg.progress_thread;
    struct timespec nap = {us / 1000000, (us % 1000000) * 1000};
    int idle_for_cuda = 0;
    while (!atomic_load_explicit(&pt_stop, memory_order_acquire)) {
        int events = 0;
        if (!atomic_load_explicit(&weft_api_wanted, memory_order_relaxed) &&
            pthread_mutex_trylock(&weft_api_mutex) == 0) {
            /* device-buffer steps call the CUDA runtime, whose current device is per thread */
            if (!weft_cuda_possible()) {
                weft_api_depth = 1; /* weft_progress's own entry nests */
                events = weft_progress();
                weft_api_depth = 0;
            } else if (!idle_for_cuda) {
                idle_for_cuda = 1;
                weft_info_log("progress thread: CUDA is loaded in this process; the thread stays idle");
            }
            pthread_mutex_unlock(&weft_api_mutex);
        }
        if (events)
            sched_yield(); /* a call waiting for the mutex gets it first */
        else
            nanosleep(&nap, NULL);
    }
    return NULL;
}

/* A child forked while the thread runs has no thread, and the mutex may
 * be held by the thread's copy, which does not exist there (unless the
 * fork came from inside a call, whose return unlocks it). */
static void pt_after_fork_child(void)
{
    if (!weft_api_depth) pthread_mutex_init(&weft_api_mutex, NULL);
    atomic_store(&weft_api_wanted, 0);
    weft_api_locking = 0;
    pt_running = 0;
}

/* A process that exits without weft_finalize: the thread stops before
 * the exit handlers and destructors tear UCX down under it. */
static void pt_at_exit(void)
{
    weft_progress_thread_stop();
}

int weft_progress_thread_running(void)
{
    return pt_running;
}

int weft_progress_thread_start(void)
{
    static int handlers_set;
    if (weft_cfg.progress_thread <= 0 || pt_running) return WEFT_SUCCESS;
    if (!handlers_set) {
        (void)pthread_atfork(NULL, NULL, pt_after_fork_child);
        (void)atexit(pt_at_exit);
        handlers_set = 1;
    }
    atomic_store(&pt_stop, 0);
    weft_api_locking = 1; /* before the thread exists: every later call locks */
    /* every signal blocked in the thread: the process's signals go to the application's threads */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&pt_thread, NULL, pt_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        weft_api_locking = 0;
        return weft_error(WEFT_ERR_INTERNAL, "WEFT_PROGRESS_THREAD=%d: the progress thread could not start: %s",
                          weft_cfg.progress_thread, strerror(err));
    }
    pt_running = 1;
    weft_info_log("progress thread on: it polls while the application computes, sleeping %d us after an idle poll",
                  weft_cfg.progress_thread);
    return WEFT_SUCCESS;
}

void weft_progress_thread_stop(void)
{
    if (!pt_running) return;
    atomic_store_explicit(&pt_stop, 1, memory_order_release);
    pthread_join(pt_thread, NULL);
    pt_running = 0;
    weft_api_locking = 0; /* the caller's entry still unlocks on its return */
}

/* ---- liveness ------------------------------------------------------------ */

/* Per world rank: order = 1 for the first rank recorded lost, 2 for the
 * next, ...; 0 while alive. A dead rank's neighbours fail and leave after
 * it, and their departures are reported too: naming the earliest loss
 * names the cause. */
typedef struct {
    unsigned order;
    char why[256];
} lost_rank_t;

unsigned weft_lost_count;
static lost_rank_t *lost;
static int lost_size;
static double next_poll;

int weft_liveness_init(int size)
{
    weft_liveness_finalize();
    lost = calloc((size_t)size, sizeof(*lost));
    if (!lost) return weft_error(WEFT_ERR_NO_MEMORY, "liveness: out of memory for %d ranks", size);
    lost_size = size;
    return WEFT_SUCCESS;
}

void weft_liveness_finalize(void)
{
    free(lost);
    lost = NULL;
    lost_size = 0;
    weft_lost_count = 0;
    next_poll = 0;
}

void weft_rank_lost(int world_rank, const char *fmt, ...)
{
    if (!lost || world_rank < 0 || world_rank >= lost_size || lost[world_rank].order) return;
    lost_rank_t *l = &lost[world_rank];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->why, sizeof(l->why), fmt, ap);
    va_end(ap);
    if (!l->why[0]) snprintf(l->why, sizeof(l->why), "no reason given");
    l->order = ++weft_lost_count;
    /* The first loss is news; more are usually the job coming apart. */
    weft_log(l->order == 1 ? WEFT_LOG_WARN : WEFT_LOG_DEBUG, "rank %d lost: %s", world_rank, l->why);
}

const char *weft_rank_lost_why(int world_rank)
{
    if (!weft_lost_count || world_rank < 0 || world_rank >= lost_size || !lost[world_rank].order) return NULL;
    return lost[world_rank].why;
}

int weft_comm_lost_member(weft_comm_t comm)
{
    int found = -1;
    unsigned first = 0;
    if (!weft_lost_count || !comm) return -1;
    for (int r = 0; r < comm->size; r++) {
        int w = weft_comm_world_rank_of(comm, r);
        unsigned o = w >= 0 && w < lost_size ? lost[w].order : 0;
        if (o && (!first || o < first)) {
            first = o;
            found = r;
        }
    }
    return found;
}

int weft_world_lost_rank(void)
{
    for (int r = 0; weft_lost_count && r < lost_size; r++)
        if (lost[r].order == 1) return r;
    return -1;
}

void weft_lost_describe(weft_comm_t comm, int rank, char *buf, size_t len)
{
    int world = comm ? weft_comm_world_rank_of(comm, rank) : rank;
    const char *why = weft_rank_lost_why(world);
    snprintf(buf, len, "rank %d (world rank %d) lost: %s", rank, world, why ? why : "no reason given");
}

void weft_liveness_poll(double now, double since, int force)
{
    weft_bootstrap_t *bs = weft_g.bs;
    if (!bs || !bs->poll_lost || (!force && now < next_poll)) return;
    next_poll = now + WEFT_LIVENESS_POLL_S;
    bs->poll_lost(bs, since > 0 && now > since ? now - since : 0);
}
