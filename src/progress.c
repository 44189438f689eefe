/* The progress engine: drives UCX and every registered hook (collective
 * schedules later). All waiting in weft goes through weft_progress().
 * Also the liveness record: which ranks are known dead, and why. */
#include "bootstrap/bootstrap.h"
#include "request.h"
#include "src/cuda/runtime.h"
#include "weft_internal.h"

#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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

int weft_progress_idle(unsigned *idle_polls, int events)
{
    if (events) {
        *idle_polls = 0;
        return 0;
    }
    if (++*idle_polls >= (unsigned)weft_cfg.spin_before_yield) {
        *idle_polls = 0;
        sched_yield();
        return 1;
    }
    return 0;
}

/* ---- the progress thread (weft_internal.h) ------------------------------- */

_Atomic int weft_api_locking;
int weft_api_depth;
_Atomic int weft_api_lock;
_Atomic int weft_api_wanted;
_Atomic int weft_api_owner;
_Thread_local int weft_pt_self;
int weft_pt_state = WEFT_PT_RUNNING;
int weft_pt_kick;
_Atomic int weft_pt_asleep;

static pthread_t pt_thread;
static _Atomic int pt_stop;
static int pt_running;
static int pt_kick_fd = -1;             /* eventfd: a call that left work for it, and stop, wake the thread */
static int pt_waiter_fd = -1;           /* eventfd: the thread tells a wait asleep that its request completed */
static weft_request_t pt_waiter;        /* that wait's request (under the lock; NULL: none) */
static _Atomic int pt_stuck;            /* the thread cannot advance device work (no CUDA context to make current) */
static cpu_set_t pt_cpus;               /* the CPUs it runs on (weft_progress_thread_resolve; empty: any) */
static char pt_where[64];               /* and in words, for the log */
static double pt_spin_s;                /* WEFT_PROGRESS_SPIN_US in seconds (weft_progress_thread_resolve) */
static _Atomic unsigned long pt_passes; /* passes it made holding the lock (tests) */
static _Atomic int pt_watching;         /* 1 while pt_dormant polls for new work (no wake-up needed) */
static _Atomic(weft_bell_t *) pt_bell;  /* the bell the thread naps on (pt_sleep_bell), which a wake-up rings too */
static _Atomic int pt_bell_ringers;     /* wake-ups between their load of pt_bell and their ring's end */

/* An application call holds the lock (and polls meanwhile): the thread
 * tries again after a nap that doubles up to the max, so a long blocking
 * call costs it little and a short one delays it little. */
#define PT_LOCK_NAP_MIN_US 20
#define PT_LOCK_NAP_MAX_US 1000
/* Pending work that raises no events (shared-memory flags): passes without
 * news spent yielding before the thread naps, the first nap, doubling up to
 * WEFT_PROGRESS_THREAD's microseconds (weft_cfg.progress_poll_us); past
 * that, a nap is at most an eighth of the time without news (a peer that
 * is late by a second is noticed within 1/8 more), up to PT_NAP_MAX_US. */
#define PT_SPIN_PASSES  64
#define PT_NAP_FIRST_US 8
#define PT_NAP_MAX_US   4000
/* A wait (or the thread) sleeps on a bell only past this long without
 * news, and only where every rank has a CPU of its own (bells_fit); before
 * that it naps, late by at most an eighth of the time without news. A ring
 * costs the flag's poster a system call per sleeper on its critical path:
 * where ranks outnumber their CPUs, preempted peers keep the others
 * waiting past any such time at every step (16 ranks on 8 CPUs beside a
 * busy loop: small collectives 1.05-1.7x the naps' time with bells,
 * docs/PERFORMANCE.md section 5). */
#define PT_BELL_AFTER_S 1e-3
static int bells_fit(void)
{
    return weft_g.cpu_sharers <= weft_g.cpus_shared;
}
/* WEFT_PROGRESS_SPIN_US (pt_spin_s; auto: 200 us where the thread has a
 * CPU of its own, else 0, weft_progress_thread_resolve): the thread keeps
 * passing, yielding, this long without news before its first nap (a
 * shared-memory collective's flags come microseconds apart, and a nap
 * between two of them stretches every member's step), and watches for
 * new work this long before it sleeps dormant (the next operation of a
 * loop then starts at once, not after a wake-up through the scheduler). */
/* While anything is pending the thread looks at the liveness record this
 * often, asleep or not: a receive from a rank that died, or a collective
 * with a lost member, fails without anyone waiting for it. */
#define PT_CHECK_S 0.05
/* Arms that found news already there, in a row, without a pass finding
 * any: the thread then polls instead (a transport whose arm never settles). */
#define PT_BUSY_ARMS_MAX 16

void weft_progress_thread_rouse(void)
{
    if (!pt_running || weft_pt_self) return;
    weft_progress_thread_mark_roused();
    weft_progress_thread_wake();
}

void weft_progress_thread_wake(void)
{
    uint64_t one = 1;
    /* A thread watching for new work (pt_dormant's poll) sees the call's
     * mark without the write, a system call of about a microsecond inside
     * every post; it looks once more after it stops watching (the fences
     * pair: one of the two sees the other's store). */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&pt_watching, memory_order_relaxed)) return;
    if (pt_kick_fd >= 0 && write(pt_kick_fd, &one, sizeof(one)) < 0) {
        /* full (it is being woken already) */
    }
    /* After the write (a thread that stores pt_bell, then finds the
     * descriptor unwritten, is seen here): a nap on a bell ends too. A
     * wake-up runs after the caller let go of the lock, so the bell's
     * memory may be going (another application thread freeing its
     * communicator): weft_progress_bell_unmap waits for the ringers. */
    atomic_fetch_add_explicit(&pt_bell_ringers, 1, memory_order_seq_cst);
    weft_bell_t *b = atomic_load_explicit(&pt_bell, memory_order_seq_cst);
    if (b) weft_bell_ring(b);
    atomic_fetch_sub_explicit(&pt_bell_ringers, 1, memory_order_release);
}

/* Sleeps until fd0 or fd1 (-1: none) is readable, or timeout_s (< 0:
 * none) passes; reads fd0 (an eventfd) when it woke the sleeper, and
 * returns 1 then. */
static int sleep_on(int fd0, int fd1, double timeout_s)
{
    struct pollfd fds[2] = {{.fd = fd0, .events = POLLIN}, {.fd = fd1, .events = POLLIN}};
    struct timespec ts, *tp = NULL;
    if (timeout_s >= 0) {
        ts.tv_sec = (time_t)timeout_s;
        ts.tv_nsec = (long)((timeout_s - (double)ts.tv_sec) * 1e9);
        tp = &ts;
    }
    if (ppoll(fds, 2, tp, NULL) > 0 && fd0 >= 0 && (fds[0].revents & POLLIN)) {
        uint64_t v;
        if (read(fd0, &v, sizeof(v)) < 0) {
            /* another reader took it: nothing to do */
        }
        return 1;
    }
    return 0;
}

/* Sleeps until a wake-up, news on efd (-1: none), or timeout_s (< 0:
 * none); 1 when a wake-up ended it. */
static int pt_sleep(int efd, double timeout_s)
{
    atomic_store_explicit(&weft_pt_asleep, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst); /* pairs with weft_pt_sleeps' */
    int woken = sleep_on(pt_kick_fd, efd, timeout_s);
    atomic_store_explicit(&weft_pt_asleep, 0, memory_order_relaxed);
    return woken;
}

/* The bells (weft_internal.h): futexes in memory the ranks share, so not
 * FUTEX_PRIVATE. */
void weft_bell_ring(weft_bell_t *b)
{
    if (!atomic_exchange_explicit(&b->asleep, 0, memory_order_relaxed)) return; /* awake, or rung already */
    atomic_fetch_add_explicit(&b->ring, 1, memory_order_release);
    (void)syscall(SYS_futex, (uint32_t *)&b->ring, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Sleeps on ref's bell for at most timeout_s (0: rung, or timed out),
 * unless recheck (NULL: none) finds a reason not to once the sleepers'
 * count went up: a flag raised before that rang no bell. */
static int bell_sleep(const weft_bell_ref_t *ref, double timeout_s, int (*recheck)(void))
{
    weft_bell_t *b = ref->bell;
    uint32_t v = atomic_load_explicit(&b->ring, memory_order_acquire);
    atomic_store_explicit(&b->asleep, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(ref->sleepers, 1, memory_order_seq_cst);
    int rc = 1;
    if (!recheck || !recheck()) {
        struct timespec ts = {.tv_sec = (time_t)timeout_s};
        ts.tv_nsec = (long)((timeout_s - (double)ts.tv_sec) * 1e9);
        rc = (int)syscall(SYS_futex, (uint32_t *)&b->ring, FUTEX_WAIT, v, &ts, NULL, 0);
        if (rc < 0 && errno == EAGAIN) rc = 0; /* rung between the load and the sleep */
    }
    atomic_store_explicit(&b->asleep, 0, memory_order_relaxed);
    atomic_fetch_sub_explicit(ref->sleepers, 1, memory_order_relaxed);
    return rc;
}

static int kick_written(void)
{
    struct pollfd p = {.fd = pt_kick_fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

/* The thread's nap on a bell (its pending work polls flags that ring it;
 * pt_bell was set under the lock): until a ring, a wake-up
 * (weft_progress_thread_wake rings it too) or timeout_s; 1 unless it
 * timed out. It touches the bell no more once pt_bell is clear
 * (weft_progress_bell_unmap waits for that). */
static int pt_sleep_bell(const weft_bell_ref_t *ref, double timeout_s)
{
    atomic_store_explicit(&weft_pt_asleep, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst); /* pairs with weft_pt_sleeps' */
    int woken = bell_sleep(ref, timeout_s, kick_written) >= 0;
    atomic_store_explicit(&pt_bell, NULL, memory_order_seq_cst);
    atomic_store_explicit(&weft_pt_asleep, 0, memory_order_relaxed);
    uint64_t v;
    if (read(pt_kick_fd, &v, sizeof(v)) < 0) {
        /* not written: a ring or a timeout */
    }
    return woken;
}

void weft_progress_bell_unmap(const void *base, size_t len)
{
    weft_bell_t *b = atomic_load_explicit(&pt_bell, memory_order_seq_cst);
    if (b && (const char *)b >= (const char *)base && (const char *)b < (const char *)base + len)
        /* Bumped, not rung: the thread may not have marked itself asleep
         * yet; a bump makes its sleep end at once whenever it comes. */
        while (atomic_load_explicit(&pt_bell, memory_order_seq_cst) == b) {
            atomic_fetch_add_explicit(&b->ring, 1, memory_order_release);
            (void)syscall(SYS_futex, (uint32_t *)&b->ring, FUTEX_WAKE, 1, NULL, NULL, 0);
            sched_yield();
        }
    while (atomic_load_explicit(&pt_bell_ringers, memory_order_seq_cst))
        sched_yield();
}

static unsigned nap_next(unsigned us, unsigned first, unsigned max)
{
    if (first > max) first = max;
    return us == 0 ? first : us >= max / 2 ? max : 2 * us;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A call spins while the thread finishes its pass (a few microseconds),
 * yielding its core once that takes long (an oversubscribed host). */
void weft_api_lock_slow(void)
{
    unsigned spins = 0;
    atomic_store_explicit(&weft_api_wanted, 1, memory_order_relaxed);
    do {
        while (atomic_load_explicit(&weft_api_lock, memory_order_relaxed))
            if (++spins < 4096)
                cpu_relax();
            else
                sched_yield();
    } while (atomic_exchange_explicit(&weft_api_lock, 1, memory_order_acquire));
    atomic_store_explicit(&weft_api_wanted, 0, memory_order_relaxed);
}

/* The thread takes the lock only when it is free and no call wants it. */
static int pt_trylock(void)
{
    if (atomic_load_explicit(&weft_api_wanted, memory_order_relaxed) ||
        atomic_load_explicit(&weft_api_lock, memory_order_relaxed) ||
        atomic_exchange_explicit(&weft_api_lock, 1, memory_order_acquire))
        return 0;
    atomic_store_explicit(&weft_api_owner, WEFT_OWNER_PT, memory_order_relaxed);
    return 1;
}

static void pt_unlock(void)
{
    if (pt_waiter && pt_waiter->complete) { /* the wait asleep on it (weft_wait_sleep) */
        uint64_t one = 1;
        pt_waiter = NULL;
        if (write(pt_waiter_fd, &one, sizeof(one)) < 0) {
            /* full: it is being woken already */
        }
    }
    atomic_store_explicit(&weft_api_owner, WEFT_OWNER_NONE, memory_order_relaxed);
    atomic_store_explicit(&weft_api_lock, 0, memory_order_release);
}

static int pt_roused(void)
{
    return atomic_load_explicit(&weft_api_locking, memory_order_acquire) ||
           atomic_load_explicit(&pt_stop, memory_order_acquire);
}

/* Dormant until a call leaves work pending (it sets weft_api_locking,
 * then writes the kick descriptor) or the thread is stopped. */
static void pt_dormant(void)
{
    if (pt_spin_s > 0) {
        double until = weft_wtime() + pt_spin_s;
        atomic_store_explicit(&pt_watching, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        for (unsigned n = 1; !pt_roused(); n++) {
            cpu_relax();
            if (n & 255) continue;
            if (weft_wtime() >= until) break;
            sched_yield(); /* a thread of the CPU's that has work goes first */
        }
        atomic_store_explicit(&pt_watching, 0, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst); /* pairs with weft_progress_thread_wake's */
        if (pt_roused()) {
            uint64_t v;
            if (read(pt_kick_fd, &v, sizeof(v)) < 0) {
                /* not written yet, or already read: the next sleep's wake-up at worst */
            }
            return;
        }
    }
    do
        pt_sleep(-1, -1);
    while (!pt_roused());
}

static void *pt_main(void *arg)
{
    (void)arg;
    weft_pt_self = 1; /* its API calls inside a pass nest (weft_api_enter) */
    unsigned spins = 0, nap_us = 0, lock_nap_us = 0, busy_arms = 0;
    unsigned poll_max = weft_cfg.progress_poll_us > 0 ? (unsigned)weft_cfg.progress_poll_us : 1;
    double next_check = 0, news_at = 0;
    int efd = -2, cuda_said = 0; /* the transport's event fd: asked for under the lock, on the first pass */
    /* The naps are short: the default timer slack (50 us) would stretch them. */
    (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    int aff = CPU_COUNT(&pt_cpus) ? pthread_setaffinity_np(pthread_self(), sizeof(pt_cpus), &pt_cpus) : 0;
    if (aff)
        weft_info_log(
            "progress thread: its CPUs could not be set (%s); it shares this rank's (WEFT_PROGRESS_THREAD=off "
            "keeps it off)",
            strerror(aff));
    /* Dormant from the start (weft_progress_thread_start). */
    while (!pt_roused())
        pt_sleep(-1, -1);
    while (!atomic_load_explicit(&pt_stop, memory_order_acquire)) {
        if (!pt_trylock()) {
            lock_nap_us = nap_next(lock_nap_us, PT_LOCK_NAP_MIN_US, PT_LOCK_NAP_MAX_US);
            if (pt_sleep(-1, lock_nap_us * 1e-6)) lock_nap_us = 0; /* a call posted work: try again soon */
            continue;
        }
        lock_nap_us = 0;
        atomic_fetch_add_explicit(&pt_passes, 1, memory_order_relaxed);
        if (efd == -2) efd = weft_xport->event_fd ? weft_xport->event_fd() : -1;
        weft_pt_state = WEFT_PT_RUNNING;
        int events = 0, needs = WEFT_NEEDS_NOTHING;
        weft_bell_ref_t bell = {0};
        double wake_at = 0, now = 0;
        /* Driver calls on device buffers need the application's context current here (never one of its own). */
        int ready = weft_cuda_thread_ready();
        atomic_store_explicit(&pt_stuck, !ready, memory_order_relaxed);
        if (ready) {
            events = weft_progress();
            if (!events && weft_request_pending > 0) {
                now = weft_wtime();
                if (now >= next_check) {
                    next_check = now + PT_CHECK_S;
                    weft_liveness_poll(now, 0, 0);
                    if (weft_lost_count) weft_request_check_pending();
                }
                needs = weft_request_idle_needs(&wake_at, &bell);
            }
        } else if (!cuda_said) {
            cuda_said = 1;
            weft_info_log("progress thread: device buffers in use and no CUDA context known to make current; the "
                          "thread stays idle");
        }
        if (events) {
            spins = nap_us = busy_arms = 0;
            news_at = 0;
            pt_unlock();
            if (atomic_load_explicit(&weft_api_wanted, memory_order_relaxed)) sched_yield(); /* a call goes first */
            continue;
        }
        if (needs == WEFT_NEEDS_NOTHING) {
            /* Dormant: calls take no lock until one leaves work pending
             * (weft_progress_thread_rouse sets weft_api_locking again, then
             * wakes it); cleared before the lock is let go, so a call that
             * set it meanwhile cannot be undone. */
            weft_pt_state = WEFT_PT_IDLE;
            weft_pt_kick = 0;
            atomic_store_explicit(&weft_api_locking, 0, memory_order_release);
            pt_unlock();
            spins = nap_us = busy_arms = 0;
            next_check = news_at = 0;
            pt_dormant();
            continue;
        }
        if (needs == WEFT_NEEDS_EVENTS && efd >= 0 && busy_arms < PT_BUSY_ARMS_MAX) {
            int armed = weft_xport->arm();
            if (armed > 0) {
                busy_arms = 0;
                weft_pt_state = WEFT_PT_ARMED;
                weft_pt_kick = 0;
                pt_unlock();
                double until = wake_at > 0 && wake_at < next_check ? wake_at : next_check;
                pt_sleep(efd, until > now ? until - now : 0);
                spins = nap_us = 0;
                news_at = 0;
                continue;
            }
            if (armed == 0) { /* news came meanwhile: another pass */
                busy_arms++;
                pt_unlock();
                continue;
            }
            efd = -1; /* the transport cannot arm: poll from now on */
        }
        if (news_at == 0) news_at = now;
        if (spins < PT_SPIN_PASSES || now - news_at < pt_spin_s) {
            pt_unlock();
            spins++;
            sched_yield();
            continue;
        }
        /* A call that posts new work ends the nap (weft_pt_kick): the naps
         * grow while the application's waits, not this thread, see the
         * news, and the next operation must not wait for one to end. */
        weft_pt_state = WEFT_PT_NAPPING;
        weft_pt_kick = 0;
        int on_bell = needs == WEFT_NEEDS_BELL && now - news_at >= PT_BELL_AFTER_S && bells_fit();
        if (on_bell) atomic_store_explicit(&pt_bell, bell.bell, memory_order_release); /* under the lock */
        pt_unlock();
        unsigned cap = poll_max, late_us = (unsigned)((now - news_at) * 1e6 / 8);
        if (late_us > cap)
            cap = late_us < PT_NAP_MAX_US ? late_us : PT_NAP_MAX_US > poll_max ? PT_NAP_MAX_US : poll_max;
        nap_us = nap_next(nap_us, PT_NAP_FIRST_US, cap);
        double nap = nap_us * 1e-6;
        if (wake_at > 0 && wake_at - now < nap) nap = wake_at > now ? wake_at - now : 0;
        /* On a bell: a ring is news too (look at once, and often). */
        int woken = on_bell ? pt_sleep_bell(&bell, nap) : pt_sleep(-1, nap);
        if (woken) spins = nap_us = 0, news_at = 0; /* new work: look at once, and often */
        busy_arms = 0;
    }
    return NULL;
}

/* The application's call asleep in a wait, while the thread has work: it
 * lets go of the lock (waking the thread as a call's return would) and
 * sleeps on pt_waiter_fd, which the thread writes once a pass of its has
 * completed req; the thread alone sleeps on the transport's events. */
static void wait_handoff(weft_request_t req, double timeout_s)
{
    uint64_t stale;
    if (read(pt_waiter_fd, &stale, sizeof(stale)) < 0) {
        /* nothing left from an earlier wait */
    }
    pt_waiter = req;
    weft_api_unlock();
    sleep_on(pt_waiter_fd, -1, timeout_s);
    if (atomic_exchange_explicit(&weft_api_lock, 1, memory_order_acquire)) weft_api_lock_slow();
    atomic_store_explicit(&weft_api_owner, WEFT_OWNER_APP, memory_order_relaxed);
    pt_waiter = NULL;
}

void weft_wait_sleep(weft_wait_sleep_t *ws, weft_request_t req, double now, double deadline)
{
    double until = now + WEFT_LIVENESS_POLL_S, wake_at = 0;
    if (deadline > 0 && deadline < until) until = deadline;
    if (until <= now) return;
    /* A thread that has other work (it may be asleep on the same event fd)
     * takes this request over too: the application's call sleeps until the
     * thread completes it (the thread's own waits, inside its callbacks,
     * cannot hand over). A thread asleep with nothing else to do stays
     * asleep, and the call sleeps on the events itself. */
    if (pt_running && weft_pt_state != WEFT_PT_IDLE && req && !weft_pt_self &&
        !atomic_load_explicit(&pt_stuck, memory_order_relaxed) &&
        atomic_load_explicit(&weft_api_owner, memory_order_relaxed) == WEFT_OWNER_APP) {
        wait_handoff(req, until - now);
        return;
    }
    weft_bell_ref_t bell;
    int needs = weft_request_idle_needs(&wake_at, &bell);
    if (wake_at > 0 && wake_at < until) until = wake_at > now ? wake_at : now;
    int efd = needs < WEFT_NEEDS_BELL && weft_xport && weft_xport->event_fd ? weft_xport->event_fd() : -1;
    if (efd >= 0 && ws->busy_arms < PT_BUSY_ARMS_MAX) {
        int armed = weft_xport->arm();
        if (armed == 0) { /* news came meanwhile: poll first */
            ws->busy_arms++;
            return;
        }
        if (armed > 0) {
            ws->busy_arms = 0;
            sleep_on(-1, efd, until - now);
            return;
        }
    }
    /* Shared-memory flags raise no transport events (or the transport
     * cannot arm): a nap of an eighth of the time without news (a flag that
     * comes during it is seen at most 1/8 late), from PT_NAP_FIRST_US to
     * PT_NAP_MAX_US, which the flag's poster ends at once where it rings a
     * bell; short, so the caller's timer slack (50 us by default) would
     * stretch it: 1 us for its length. */
    double nap = (now - ws->quiet_since) / 8;
    if (nap < PT_NAP_FIRST_US * 1e-6) nap = PT_NAP_FIRST_US * 1e-6;
    if (nap > PT_NAP_MAX_US * 1e-6) nap = PT_NAP_MAX_US * 1e-6;
    if (nap > until - now) nap = until - now;
    int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (slack > 1000) (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    if (needs == WEFT_NEEDS_BELL && now - ws->quiet_since >= PT_BELL_AFTER_S && bells_fit())
        bell_sleep(&bell, nap, weft_progress);
    else
        sleep_on(-1, -1, nap);
    if (slack > 1000) (void)prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
}

WEFT_API int weft_progress_info(char *buf, size_t len)
{
    WEFT_API_ENTER();
    WEFT_CHECK_INIT("weft_progress_info");
    if (!buf || len == 0) return weft_error(WEFT_ERR_ARG, "weft_progress_info: NULL or empty buffer");
    int shared = weft_g.cpu_sharers > weft_g.cpus_shared;
    const char *set = getenv("WEFT_WAIT_SPIN_US");
    int n = snprintf(buf, len,
                     "poll %d us without news, then sleep (WEFT_WAIT_SPIN_US=%s); %d rank%s on this rank's %d CPU%s%s; "
                     "yield after %d empty polls; progress thread %s, polling %d us without news "
                     "(WEFT_PROGRESS_SPIN_US)",
                     weft_cfg.wait_spin_us, set ? set : "auto", weft_g.cpu_sharers, weft_g.cpu_sharers == 1 ? "" : "s",
                     weft_g.cpus_shared, weft_g.cpus_shared == 1 ? "" : "s", shared ? " (oversubscribed)" : "",
                     weft_cfg.spin_before_yield, pt_running ? "on" : "off", weft_cfg.progress_spin_us);
    if (n < 0 || (size_t)n >= len)
        return weft_error(WEFT_ERR_TRUNCATE, "weft_progress_info: %d bytes do not fit in %zu", n, len);
    return WEFT_SUCCESS;
}

/* A child forked while the thread runs has no thread, and the lock may
 * be held by the thread's copy, which does not exist there (unless the
 * fork came from inside a call, whose return unlocks it). */
static void pt_after_fork_child(void)
{
    if (atomic_load(&weft_api_owner) != WEFT_OWNER_APP) {
        atomic_store(&weft_api_owner, WEFT_OWNER_NONE);
        atomic_store(&weft_api_lock, 0);
    }
    atomic_store(&weft_api_wanted, 0);
    atomic_store(&weft_pt_asleep, 0);
    atomic_store(&pt_bell, NULL);
    atomic_store(&pt_bell_ringers, 0);
    weft_api_locking = 0;
    weft_pt_state = WEFT_PT_RUNNING;
    weft_pt_kick = 0;
    pt_running = 0;
    if (pt_kick_fd >= 0) close(pt_kick_fd); /* the parent's: a thread started here makes its own */
    if (pt_waiter_fd >= 0) close(pt_waiter_fd);
    pt_kick_fd = pt_waiter_fd = -1;
    pt_waiter = NULL;
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

unsigned long weft_progress_thread_passes(void)
{
    return atomic_load_explicit(&pt_passes, memory_order_relaxed);
}

/* Adds the CPUs a cpu list names ("0-3,8,10-11") to *set; their count, or -1. */
static int cpulist_parse(const char *text, cpu_set_t *set)
{
    int n = 0;
    for (const char *p = text; *p && *p != '\n';) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0) return -1;
        if (*end == '-') {
            p = end + 1;
            b = strtol(p, &end, 10);
            if (end == p || b < a) return -1;
        }
        for (long c = a; c <= b && c < CPU_SETSIZE; c++)
            CPU_SET((int)c, set);
        n += (int)(b - a + 1);
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* Reads a cpu list file into *set: the CPUs' count, or -1. */
static int cpulist_file(const char *path, cpu_set_t *set)
{
    char buf[4096];
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    CPU_ZERO(set);
    return cpulist_parse(buf, set);
}

/* The CPUs this job's ranks on this machine may share (*set, and their
 * count): the cpuset of this process's own cgroup where there is one (a
 * container, a Slurm job step: /proc/self/cgroup names it, v2's "0::"
 * line or v1's cpuset controller), else the cgroup root's, else every CPU
 * online. */
static long machine_cpus(cpu_set_t *set)
{
    char line[4096], path[4200];
    FILE *f = fopen("/proc/self/cgroup", "r");
    while (f && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        const char *rest = NULL, *file = NULL;
        if (!strncmp(line, "0::", 3)) {
            rest = line + 3, file = "cpuset.cpus.effective";
            snprintf(path, sizeof(path), "/sys/fs/cgroup%s/%s", rest, file);
        } else if ((rest = strstr(line, ":cpuset:"))) {
            rest += 8, file = "cpuset.effective_cpus";
            snprintf(path, sizeof(path), "/sys/fs/cgroup/cpuset%s/%s", rest, file);
        }
        int c = file && strcmp(rest, "/") ? cpulist_file(path, set) : -1;
        if (c > 0) {
            fclose(f);
            return c;
        }
    }
    if (f) fclose(f);
    static const char *const roots[] = {"/sys/fs/cgroup/cpuset.cpus.effective",
                                        "/sys/fs/cgroup/cpuset/cpuset.effective_cpus"};
    for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
        int c = cpulist_file(roots[i], set);
        if (c > 0) return c;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    CPU_ZERO(set);
    for (long c = 0; c < n && c < CPU_SETSIZE; c++)
        CPU_SET((int)c, set);
    return n;
}

void weft_progress_thread_resolve(int host_ranks)
{
    cpu_set_t set, machine;
    long cpus = machine_cpus(&machine), allowed = 0;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) allowed = CPU_COUNT(&set);
    if (cpus <= 0) cpus = 1;
    if (allowed <= 0 || allowed > cpus) allowed = cpus;
    if (host_ranks < 1) host_ranks = 1;
    /* Ranks spread evenly over the machine's CPUs: those bound to one core
     * (hyperthreads) share it with none, unbound ones with every rank. */
    long sharing = ((long)host_ranks * allowed + cpus - 1) / cpus;
    if (sharing < 1) sharing = 1;
    /* Ranks bound apart, as many CPUs each, leave these of the machine's
     * to no rank (8 ranks bound to a core each on 16 cores: 8). */
    long unbound = allowed < cpus ? cpus - (long)host_ranks * allowed : 0;
    CPU_ZERO(&pt_cpus);
    pt_where[0] = '\0';
    if (allowed > sharing && allowed < cpus) {
        /* A rank bound to a few CPUs with one to spare: the thread on the
         * last of them (on a core's two hyperthreads, the sibling of the
         * first), not wandering onto another rank's. */
        int c = CPU_SETSIZE - 1;
        while (c > 0 && !CPU_ISSET(c, &set))
            c--;
        CPU_SET(c, &pt_cpus);
        snprintf(pt_where, sizeof(pt_where), ", bound to CPU %d", c);
    } else if (unbound > 0) {
        /* None to spare in its own: the machine's CPUs outside this rank's,
         * where the scheduler finds the ones no rank is bound to idle. */
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &machine) && !CPU_ISSET(c, &set)) CPU_SET(c, &pt_cpus);
        snprintf(pt_where, sizeof(pt_where), ", on %d CPU%s outside this rank's binding", CPU_COUNT(&pt_cpus),
                 CPU_COUNT(&pt_cpus) == 1 ? "" : "s");
    }
    int spare = allowed > sharing || CPU_COUNT(&pt_cpus) > 0;
    /* Its polling before naps and sleeps (WEFT_PROGRESS_SPIN_US=auto):
     * only a thread with a CPU to itself, which takes no rank's time. */
    if (weft_cfg.progress_spin_us < 0) weft_cfg.progress_spin_us = spare ? WEFT_PROGRESS_SPIN_US_SPARE : 0;
    pt_spin_s = weft_cfg.progress_spin_us * 1e-6;
    /* An unbound rank's thread is left to the scheduler. */
    if (weft_cfg.progress_thread == WEFT_PT_AUTO) {
        weft_cfg.progress_thread = spare ? WEFT_PT_ON : WEFT_PT_OFF;
        weft_info_log("WEFT_PROGRESS_THREAD=auto: %s (%ld CPU%s for this rank, shared with about %ld rank%s; %ld of "
                      "the machine's %ld bound to no rank)",
                      spare ? "on" : "off: no CPU spare", allowed, allowed == 1 ? "" : "s", sharing,
                      sharing == 1 ? "" : "s", unbound > 0 ? unbound : 0, cpus);
    }
}

int weft_progress_thread_start(void)
{
    static int handlers_set;
    if (weft_cfg.progress_thread != WEFT_PT_ON || pt_running || !weft_xport) return WEFT_SUCCESS;
    if (!handlers_set) {
        (void)pthread_atfork(NULL, NULL, pt_after_fork_child);
        (void)atexit(pt_at_exit);
        handlers_set = 1;
    }
    if ((pt_kick_fd < 0 && (pt_kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) ||
        (pt_waiter_fd < 0 && (pt_waiter_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0))
        return weft_error(WEFT_ERR_INTERNAL, "WEFT_PROGRESS_THREAD=%s: no eventfd for the progress thread: %s",
                          weft_cfg.progress_thread_text, strerror(errno));
    atomic_store(&pt_stop, 0);
    /* It starts dormant: calls take no lock until one leaves work pending
     * (weft_progress_thread_rouse); nothing of init runs beside it. */
    weft_pt_state = WEFT_PT_IDLE;
    weft_pt_kick = 0;
    weft_cuda_thread_note_context(); /* the context current at init, for the thread's driver calls */
    weft_api_locking = 0;
    pt_running = 1; /* before it exists: a failure it meets goes to the shared message (error.c) */
    int err = weft_thread_start(&pt_thread, NULL, pt_main, NULL, "weft-progress");
    if (err) {
        pt_running = 0;
        weft_pt_state = WEFT_PT_RUNNING;
        return weft_error(WEFT_ERR_INTERNAL, "WEFT_PROGRESS_THREAD=%s: the progress thread could not start: %s",
                          weft_cfg.progress_thread_text, strerror(err));
    }
    weft_info_log("progress thread on%s: it advances pending work while the application computes", pt_where);
    return WEFT_SUCCESS;
}

void weft_progress_thread_stop(void)
{
    if (!pt_running) return;
    atomic_store_explicit(&pt_stop, 1, memory_order_release);
    weft_progress_thread_wake();
    pthread_join(pt_thread, NULL);
    pt_running = 0;
    weft_pt_state = WEFT_PT_RUNNING;
    weft_pt_kick = 0;
    weft_api_locking = 0; /* the caller's entry still unlocks on its return */
}

WEFT_API int weft_progress_thread_active(int *flag)
{
    WEFT_API_ENTER();
    if (!flag) return weft_error(WEFT_ERR_ARG, "weft_progress_thread_active: NULL flag pointer");
    *flag = pt_running;
    return WEFT_SUCCESS;
}

/* ---- liveness ------------------------------------------------------------ */

/* Per world rank: order = 1 for the first rank recorded lost, 2 for the
 * next, ...; 0 while alive. A dead rank's neighbours fail and leave after
 * it, and their departures are reported too: naming the earliest loss
 * names the cause. The reason is allocated when a rank is lost: 16 bytes
 * per rank of the world otherwise. */
#define LOST_WHY_MAX 256
typedef struct {
    unsigned order;
    char *why;
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
    for (int r = 0; r < lost_size; r++)
        free(lost[r].why);
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
    char why[LOST_WHY_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (!why[0]) snprintf(why, sizeof(why), "no reason given");
    l->why = strdup(why);
    l->order = ++weft_lost_count;
    /* The first loss is news; more are usually the job coming apart. */
    weft_log(l->order == 1 ? WEFT_LOG_WARN : WEFT_LOG_DEBUG, "rank %d lost: %s", world_rank, why);
}

const char *weft_rank_lost_why(int world_rank)
{
    if (!weft_lost_count || world_rank < 0 || world_rank >= lost_size || !lost[world_rank].order) return NULL;
    return lost[world_rank].why ? lost[world_rank].why : "lost (its reason did not fit in memory)";
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
