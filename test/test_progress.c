/* The progress thread (WEFT_PROGRESS_THREAD): nonblocking work completes
 * while every rank sleeps without calling weft, and its completion
 * callbacks run on the thread; an idle rank's thread costs next to no CPU;
 * a blocking ping-pong and small blocking collectives leave it asleep; a
 * post wakes the thread from its nap; a rank killed while the others
 * compute fails their pending work with nobody waiting; deadlines still hold; weft_request_on_complete's rules;
 * and what auto decides. */
#include "harness.h"
#include "weft.h"
#include "weft_internal.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static const char *const on_env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=60", "WEFT_PROGRESS_THREAD=on", NULL};

static weft_comm_t start(void)
{
    TH_OK(weft_init(NULL, NULL));
    int on = 0;
    TH_OK(weft_progress_thread_active(&on));
    TH_CHECK(on, "WEFT_PROGRESS_THREAD=on started no thread");
    return weft_comm_world();
}

/* Runs body on n ranks and asserts that none hung or failed. */
static void run_ok(int n, th_body_fn body, void *arg, double timeout_s, const char *const *env)
{
    th_result_t res = th_run(n, body, arg, timeout_s, env);
    cr_assert_eq(res.timed_out, 0, "hung");
    cr_assert_eq(res.failed, 0);
}

/* A completion callback's record: how often, with what, on which thread. */
typedef struct {
    _Atomic int fired;
    _Atomic int status;
    _Atomic int on_main;
} note_t;
static pthread_t main_thread;

static void note(void *arg, int status)
{
    note_t *n = arg;
    atomic_store(&n->status, status);
    atomic_store(&n->on_main, pthread_equal(pthread_self(), main_thread) != 0);
    atomic_fetch_add(&n->fired, 1);
}

/* ---- nonblocking work completes while every rank sleeps ------------------- */
/* Every rank posts a 1 MiB allreduce (messages, rendezvous), a small one
 * (shared memory: flags that raise no event), an alltoall, an allgather
 * (both single-copy in shared memory: the post leaves the reads to the
 * thread), a bcast and a 4 MiB message around the ring, then only sleeps
 * (nanosleep, no weft call) until every callback has run and the results
 * are in its buffers. */
enum { NREQ = 7 };
static int body_sleeping(int rank, int size, void *arg)
{
    int thread = arg != NULL; /* without it, nothing moves during the sleep */
    main_thread = pthread_self();
    weft_comm_t w;
    if (thread) {
        w = start();
    } else {
        TH_OK(weft_init(NULL, NULL));
        w = weft_comm_world();
    }
    enum { BIG = 1 << 18, SMALL = 16, A2A = 4096, MSG = 4 << 20 };
    float *big = malloc(sizeof(float) * BIG), *big_out = malloc(sizeof(float) * BIG);
    int64_t small[SMALL], small_out[SMALL], bc[SMALL];
    int32_t *a2a = malloc(sizeof(int32_t) * A2A * (size_t)size),
            *a2a_out = malloc(sizeof(int32_t) * A2A * (size_t)size),
            *ag_out = malloc(sizeof(int32_t) * A2A * (size_t)size);
    unsigned char *msg = malloc(MSG), *got = malloc(MSG);
    for (int i = 0; i < BIG; i++) {
        big[i] = (float)(rank + 1);
        big_out[i] = -1;
    }
    for (int i = 0; i < SMALL; i++) {
        small[i] = rank * 10 + i;
        small_out[i] = -1;
        bc[i] = rank == 1 ? 500 + i : -1;
    }
    for (int p = 0; p < size; p++)
        for (int i = 0; i < A2A; i++)
            a2a[(size_t)p * A2A + i] = rank * 1000000 + p * 10000 + i;
    th_fill(msg, MSG, 11u + (unsigned)rank);
    memset(got, 0, MSG);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    TH_OK(weft_barrier(w)); /* everyone connected: the calls below are the test */
    weft_request_t r[NREQ];
    note_t notes[NREQ];
    memset(notes, 0, sizeof(notes));
    TH_OK(weft_irecv(got, MSG, WEFT_BYTE, left, 9, w, &r[0]));
    TH_OK(weft_isend(msg, MSG, WEFT_BYTE, right, 9, w, &r[1]));
    TH_OK(weft_iallreduce(big, big_out, BIG, WEFT_FLOAT32, WEFT_SUM, w, &r[2]));
    TH_OK(weft_iallreduce(small, small_out, SMALL, WEFT_INT64, WEFT_SUM, w, &r[3]));
    TH_OK(weft_ialltoall(a2a, a2a_out, A2A, WEFT_INT32, w, &r[4]));
    TH_OK(weft_ibcast(bc, SMALL, WEFT_INT64, 1, w, &r[5]));
    TH_OK(weft_iallgather(a2a, ag_out, A2A, WEFT_INT32, w, &r[6]));
    for (int i = 0; i < NREQ; i++)
        TH_OK(weft_request_on_complete(r[i], note, &notes[i]));
    /* Sleep: no weft call until every callback ran (or 30 s). */
    double t0 = weft_wtime(), took = -1;
    if (!thread) {
        th_nap_ms(500);
        TH_CHECK(!atomic_load(&notes[0].fired) && !atomic_load(&notes[2].fired),
                 "rank %d: the big receive or allreduce completed without a thread or a call", rank);
        TH_OK(weft_waitall(NREQ, r, NULL));
        TH_OK(weft_finalize());
        return 0;
    }
    while (weft_wtime() - t0 < 30) {
        int all = 1;
        for (int i = 0; i < NREQ; i++)
            all &= atomic_load(&notes[i].fired) == 1;
        if (all) {
            took = weft_wtime() - t0;
            break;
        }
        th_nap_ms(2);
    }
    for (int i = 0; i < NREQ; i++)
        TH_CHECK(atomic_load(&notes[i].fired) == 1, "rank %d: request %d: its callback ran %d times in 30 s of sleep",
                 rank, i, atomic_load(&notes[i].fired));
    float want = (float)size * (float)(size + 1) / 2;
    TH_CHECK(big_out[BIG - 1] == want, "rank %d: the allreduce's result is not in the buffer after its callback", rank);
    TH_CHECK(th_verify(got, MSG, 11u + (unsigned)left, NULL), "rank %d: the message differs", rank);
    weft_status_t st[NREQ];
    TH_OK(weft_waitall(NREQ, r, st));
    for (int i = 0; i < SMALL; i++) {
        int64_t s = 0;
        for (int p = 0; p < size; p++)
            s += p * 10 + i;
        TH_CHECK(small_out[i] == s, "rank %d: small allreduce [%d] = %lld, not %lld", rank, i, (long long)small_out[i],
                 (long long)s);
        TH_CHECK(bc[i] == 500 + i, "rank %d: bcast [%d] = %lld", rank, i, (long long)bc[i]);
    }
    for (int p = 0; p < size; p++)
        for (int i = 0; i < A2A; i += 97)
            TH_CHECK(a2a_out[(size_t)p * A2A + i] == p * 1000000 + rank * 10000 + i, "rank %d: alltoall from %d [%d]",
                     rank, p, i);
    for (int p = 0; p < size; p++)
        for (int i = 0; i < A2A; i += 97)
            TH_CHECK(ag_out[(size_t)p * A2A + i] == p * 1000000 + i, "rank %d: allgather from %d [%d]", rank, p, i);
    for (int i = 0; i < BIG; i += 1021)
        TH_CHECK(big_out[i] == want, "rank %d: allreduce [%d] = %g", rank, i, (double)big_out[i]);
    if (rank == 0) printf("progress thread: everything completed %.1f ms into the sleep\n", took * 1e3);
    free(big);
    free(big_out);
    free(a2a);
    free(a2a_out);
    free(ag_out);
    free(msg);
    free(got);
    TH_OK(weft_finalize());
    return 0;
}

Test(progress, nonblocking_work_completes_while_every_rank_sleeps, .timeout = 120)
{
    run_ok(4, body_sleeping, (void *)on_env, 100, on_env);
    const char *const off_env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=60", "WEFT_PROGRESS_THREAD=off", NULL};
    run_ok(4, body_sleeping, NULL, 100, off_env); /* thread off */
}

/* ---- an idle rank's CPU ------------------------------------------------------ */
/* 2 s of sleep with the thread on: nothing pending, then a receive pending
 * (the thread armed on UCX's event fd), then a barrier a late peer has not
 * joined yet (shared-memory flags: the thread polls, napping). The first
 * two must cost at most 1% of a core (20 ms); the third is reported. */
typedef struct {
    double ms[3][2]; /* [case][rank] */
} idle_shared_t;

static double idle_cpu_ms(double seconds)
{
    double c0 = th_cpu_seconds(), t0 = weft_wtime();
    while (weft_wtime() - t0 < seconds)
        th_nap_ms(100);
    return (th_cpu_seconds() - c0) * 1e3;
}

static int body_idle(int rank, int size, void *arg)
{
    (void)size;
    idle_shared_t *sh = arg;
    weft_comm_t w = start();
    int peer = rank ^ 1, x = 0, y = rank;
    TH_OK(weft_barrier(w));
    sh->ms[0][rank] = idle_cpu_ms(2.0);
    weft_request_t r, s;
    TH_OK(weft_irecv(&x, 1, WEFT_INT32, peer, 5, w, &r));
    sh->ms[1][rank] = idle_cpu_ms(2.0);
    TH_OK(weft_isend(&y, 1, WEFT_INT32, peer, 5, w, &s));
    TH_OK(weft_wait(&r, NULL));
    TH_OK(weft_wait(&s, NULL));
    TH_CHECK(x == peer, "rank %d: got %d", rank, x);
    TH_OK(weft_barrier(w));
    if (rank == 0) {
        weft_request_t b;
        TH_OK(weft_ibarrier(w, &b));
        sh->ms[2][0] = idle_cpu_ms(2.0);
        TH_OK(weft_wait(&b, NULL));
    } else {
        th_nap_ms(2000);
        TH_OK(weft_barrier(w));
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(progress, idle_rank_burns_at_most_one_percent, .timeout = 90)
{
    idle_shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(sh != MAP_FAILED);
    /* as here (a 2-core host: no CPU of its own, no polling before naps) and
     * as where the thread has a CPU of its own (200 us of it) */
    const char *const spin_env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=60", "WEFT_PROGRESS_THREAD=on",
                                    "WEFT_PROGRESS_SPIN_US=200", NULL};
    const char *const *envs[] = {on_env, spin_env};
    for (int e = 0; e < 2; e++) {
        memset(sh, 0, sizeof(*sh));
        run_ok(2, body_idle, sh, 50, envs[e]);
        printf("idle CPU in 2 s, thread on%s (rank 0, rank 1): nothing pending %.1f, %.1f ms; a receive pending "
               "%.1f, %.1f ms; a shared-memory barrier pending (rank 0) %.1f ms\n",
               e ? ", polling 200 us" : "", sh->ms[0][0], sh->ms[0][1], sh->ms[1][0], sh->ms[1][1], sh->ms[2][0]);
        for (int r = 0; r < 2; r++) {
            cr_expect_leq(sh->ms[0][r], 20.0, "rank %d, nothing pending: %.1f ms of CPU in 2 s", r, sh->ms[0][r]);
            cr_expect_leq(sh->ms[1][r], 20.0, "rank %d, a receive pending: %.1f ms of CPU in 2 s", r, sh->ms[1][r]);
        }
        /* polling, napping up to WEFT_PROGRESS_THREAD's 200 us: a few percent, not a spinning core */
        cr_expect_leq(sh->ms[2][0], 400.0, "a barrier pending: %.1f ms of CPU in 2 s", sh->ms[2][0]);
    }
    munmap(sh, sizeof(*sh));
}

/* ---- blocking calls keep the caller's own polling ---------------------------- */
/* A blocking ping-pong and small blocking allreduces leave nothing pending
 * when they return: the thread sleeps through them (no pass of its takes
 * the lock from the caller). */
static int body_blocking(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    weft_comm_t w = start();
    int peer = rank ^ 1;
    int64_t v = rank, sum = 0;
    char b[8] = {0};
    TH_OK(weft_barrier(w));
    th_nap_ms(50); /* the thread finds nothing and goes to sleep */
    unsigned long p0 = weft_progress_thread_passes();
    for (int i = 0; i < 20000; i++) {
        if (rank == 0) {
            TH_OK(weft_send(b, 8, WEFT_BYTE, peer, 1, w));
            TH_OK(weft_recv(b, 8, WEFT_BYTE, peer, 1, w, NULL));
        } else {
            TH_OK(weft_recv(b, 8, WEFT_BYTE, peer, 1, w, NULL));
            TH_OK(weft_send(b, 8, WEFT_BYTE, peer, 1, w));
        }
    }
    for (int i = 0; i < 2000; i++)
        TH_OK(weft_allreduce(&v, &sum, 1, WEFT_INT64, WEFT_SUM, w));
    unsigned long passes = weft_progress_thread_passes() - p0;
    TH_CHECK(sum == 1, "rank %d: allreduce gave %lld", rank, (long long)sum);
    /* a handful at most: the last call of the peer's barrier, a stray wake */
    TH_CHECK(passes <= 10, "rank %d: the thread made %lu passes during 20000 blocking ping-pongs", rank, passes);
    TH_OK(weft_finalize());
    return 0;
}

Test(progress, blocking_calls_leave_the_thread_asleep, .timeout = 60)
{
    run_ok(2, body_blocking, NULL, 50, on_env);
}

/* ---- a post reaches a thread that watches for new work ----------------------- */
/* With WEFT_PROGRESS_SPIN_US (200 us by default where the thread has a CPU
 * of its own; 200 ms here, so it watches through every short sleep below)
 * a post marks the work and skips the thread's wake-up while the thread
 * polls for the mark. Every rank posts a small allreduce and a bcast, then
 * sleeps without calling weft until both callbacks ran: 300 times, every
 * 50th after a 250 ms sleep that outlasts the watch (the thread is asleep
 * at that post, which must wake it). A lost mark leaves a callback unrun. */
static const char *const watch_env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=60", "WEFT_PROGRESS_THREAD=on",
                                        "WEFT_PROGRESS_SPIN_US=200000", NULL};

static int body_watching(int rank, int size, void *arg)
{
    (void)arg;
    weft_comm_t w = start();
    int64_t in[8], out[8], bc[8];
    TH_OK(weft_barrier(w));
    for (int it = 0; it < 300; it++) {
        if (it % 50 == 49) th_nap_ms(250);
        for (int i = 0; i < 8; i++) {
            in[i] = rank + it + i;
            out[i] = -1;
            bc[i] = rank == it % size ? it * 100 + i : -1;
        }
        weft_request_t r[2];
        note_t n[2];
        memset(n, 0, sizeof(n));
        TH_OK(weft_iallreduce(in, out, 8, WEFT_INT64, WEFT_SUM, w, &r[0]));
        TH_OK(weft_ibcast(bc, 8, WEFT_INT64, it % size, w, &r[1]));
        TH_OK(weft_request_on_complete(r[0], note, &n[0]));
        TH_OK(weft_request_on_complete(r[1], note, &n[1]));
        double t0 = weft_wtime();
        while ((!atomic_load(&n[0].fired) || !atomic_load(&n[1].fired)) && weft_wtime() - t0 < 10)
            th_nap_ms(1);
        TH_CHECK(atomic_load(&n[0].fired) == 1 && atomic_load(&n[1].fired) == 1,
                 "rank %d, call %d: the callbacks ran %d and %d times in 10 s of sleep (a post's mark was lost)", rank,
                 it, atomic_load(&n[0].fired), atomic_load(&n[1].fired));
        TH_OK(weft_waitall(2, r, NULL));
        for (int i = 0; i < 8; i++) {
            int64_t want = (int64_t)size * (it + i) + (int64_t)size * (size - 1) / 2;
            TH_CHECK(out[i] == want, "rank %d, call %d: allreduce [%d] = %lld, not %lld", rank, it, i,
                     (long long)out[i], (long long)want);
            TH_CHECK(bc[i] == it * 100 + i, "rank %d, call %d: bcast [%d] = %lld", rank, it, i, (long long)bc[i]);
        }
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(progress, posts_reach_a_thread_that_watches, .timeout = 120)
{
    run_ok(3, body_watching, NULL, 100, watch_env);
}

/* ---- a post ends the thread's nap ------------------------------------------ */
/* Rank 0's thread polls nonblocking allreduces (shared memory) on `late`
 * dups that rank 1 joins only at the end, napping longer and longer
 * (WEFT_PROGRESS_THREAD=1000000 lets a nap grow to 1 s: 8 us doubling, so
 * one nap runs from 524 to 1048 ms): on one dup's bell (late = 1: no flag
 * of that dup rings it meanwhile), or, with two dups pending (two bells),
 * in plain naps. At 640 ms rank 0 posts an allreduce on the world and
 * sleeps, rank 1 joining it 20 ms later: the post must wake the thread
 * (its kick rings the bell the thread sleeps on, or ends the plain nap),
 * so the callback runs within 250 ms, not when the nap ends (about 0.4 s
 * later). */
static const char *const long_nap_env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=60", "WEFT_PROGRESS_THREAD=1000000",
                                           NULL};

static int body_nap(int rank, int size, void *arg)
{
    (void)size;
    int late = *(const int *)arg;
    weft_comm_t w = start(), d[2];
    int64_t in[16], out[16], one = 1, sum[2] = {0, 0};
    for (int i = 0; i < 16; i++)
        in[i] = rank + i;
    for (int j = 0; j < late; j++) {
        TH_OK(weft_comm_dup(w, NULL, &d[j]));
        TH_OK(weft_barrier(d[j])); /* its segment attached */
    }
    TH_OK(weft_barrier(w));
    if (rank == 0) {
        weft_request_t b[2], r;
        for (int j = 0; j < late; j++)
            TH_OK(weft_iallreduce(&one, &sum[j], 1, WEFT_INT64, WEFT_SUM, d[j], &b[j]));
        th_nap_ms(580); /* in the thread's nap from 524 to 1048 ms */
        unsigned long passes = weft_progress_thread_passes();
        th_nap_ms(60);
        TH_CHECK(weft_progress_thread_passes() == passes,
                 "rank 0: the thread made %lu passes at 580-640 ms: it did not nap (the test's premise)",
                 weft_progress_thread_passes() - passes);
        note_t n;
        memset(&n, 0, sizeof(n));
        TH_OK(weft_iallreduce(in, out, 16, WEFT_INT64, WEFT_SUM, w, &r));
        double t0 = weft_wtime();
        TH_OK(weft_request_on_complete(r, note, &n));
        while (!atomic_load(&n.fired) && weft_wtime() - t0 < 5)
            th_nap_ms(1);
        double took = weft_wtime() - t0;
        TH_CHECK(atomic_load(&n.fired) == 1, "rank 0: the allreduce's callback did not run in 5 s of sleep");
        TH_CHECK(took < 0.25,
                 "rank 0: the allreduce completed %.0f ms after its post: the post left the thread in its nap",
                 took * 1e3);
        TH_OK(weft_wait(&r, NULL));
        for (int j = 0; j < late; j++)
            TH_OK(weft_wait(&b[j], NULL));
    } else {
        th_nap_ms(660); /* its input comes 20 ms after rank 0's post: rank 0's thread must look */
        TH_OK(weft_allreduce(in, out, 16, WEFT_INT64, WEFT_SUM, w));
        for (int j = 0; j < late; j++)
            TH_OK(weft_allreduce(&one, &sum[j], 1, WEFT_INT64, WEFT_SUM, d[j]));
    }
    for (int i = 0; i < 16; i++)
        TH_CHECK(out[i] == 1 + 2 * i, "rank %d: allreduce [%d] = %lld", rank, i, (long long)out[i]);
    for (int j = 0; j < late; j++) {
        TH_CHECK(sum[j] == 2, "rank %d: the late allreduce on dup %d gave %lld", rank, j, (long long)sum[j]);
        TH_OK(weft_comm_free(&d[j]));
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(progress, a_post_ends_the_threads_nap_on_a_bell, .timeout = 60)
{
    static int late = 1;
    run_ok(2, body_nap, &late, 40, long_nap_env);
}

Test(progress, a_post_ends_the_threads_nap, .timeout = 60)
{
    static int late = 2;
    run_ok(2, body_nap, &late, 40, long_nap_env);
}

/* ---- a rank killed while the others compute ------------------------------- */
/* The survivors' pending allreduce fails (its callback hears
 * WEFT_ERR_PEER_LOST) while they sleep without a weft call: the thread
 * reads the liveness news and fails it; the wait then returns the same. */
typedef struct {
    double detected[4]; /* per survivor: seconds from the kill to the callback */
    double killed_at;
} kill_shared_t;

static int body_killed(int rank, int size, void *arg)
{
    (void)size;
    kill_shared_t *sh = arg;
    main_thread = pthread_self();
    weft_comm_t w = start();
    TH_OK(weft_comm_set_timeout(w, 20));
    enum { N = 1 << 16 };
    float *buf = calloc(N, sizeof(float));
    TH_OK(weft_allreduce(WEFT_IN_PLACE, buf, N, WEFT_FLOAT32, WEFT_SUM, w)); /* everyone connected */
    if (rank == 2) {
        th_nap_ms(100);
        sh->killed_at = weft_wtime();
        kill(getpid(), SIGKILL);
    }
    weft_request_t r;
    note_t n;
    memset(&n, 0, sizeof(n));
    TH_OK(weft_iallreduce(WEFT_IN_PLACE, buf, N, WEFT_FLOAT32, WEFT_SUM, w, &r));
    TH_OK(weft_request_on_complete(r, note, &n));
    double t0 = weft_wtime();
    while (!atomic_load(&n.fired) && weft_wtime() - t0 < 15)
        th_nap_ms(5);
    TH_CHECK(atomic_load(&n.fired) == 1, "rank %d: no callback within 15 s of sleep after the kill", rank);
    sh->detected[rank] = weft_wtime() - sh->killed_at;
    TH_CHECK(atomic_load(&n.status) == WEFT_ERR_PEER_LOST, "rank %d: the callback heard %d (%s)", rank,
             atomic_load(&n.status), weft_strerror(atomic_load(&n.status)));
    TH_CHECK(!atomic_load(&n.on_main), "rank %d: the callback ran on the main thread", rank);
    int rc = weft_wait(&r, NULL);
    TH_CHECK(rc == WEFT_ERR_PEER_LOST, "rank %d: the wait returned %d (%s): %s", rank, rc, weft_strerror(rc),
             weft_last_error());
    TH_CHECK(strstr(weft_last_error(), "rank 2"), "rank %d: the error does not name rank 2: %s", rank,
             weft_last_error());
    free(buf);
    weft_finalize();
    return 0;
}

Test(progress, rank_killed_while_the_others_compute, .timeout = 90)
{
    const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=20", "WEFT_PROGRESS_THREAD=on", NULL};
    kill_shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    th_result_t res = th_run(4, body_killed, sh, 70, env);
    cr_assert_eq(res.timed_out, 0, "survivors hung");
    cr_assert_eq(res.exit_code[2], 128 + SIGKILL);
    for (int r = 0; r < 4; r++)
        if (r != 2) cr_expect_eq(res.exit_code[r], 0, "rank %d", r);
    printf("progress thread: the loss failed the survivors' pending allreduce %.0f / %.0f / %.0f ms after the kill\n",
           sh->detected[0] * 1e3, sh->detected[1] * 1e3, sh->detected[3] * 1e3);
    munmap(sh, sizeof(*sh));
}

/* ---- deadlines with the thread on ------------------------------------------- */
/* A wait on a receive nobody sends times out at its deadline and leaves the
 * request valid (then canceled); a blocking collective a member never joins
 * times out naming a rank. */
static int body_deadlines(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    weft_comm_t w = start();
    int x = 0;
    weft_request_t r;
    TH_OK(weft_irecv(&x, 1, WEFT_INT32, rank ^ 1, 77, w, &r));
    double t0 = weft_wtime();
    int rc = weft_wait_timeout(&r, 0.3, NULL);
    double dt = weft_wtime() - t0;
    TH_CHECK(rc == WEFT_ERR_TIMEOUT, "rank %d: wait returned %d", rank, rc);
    TH_CHECK(dt >= 0.3 && dt < 3, "rank %d: a 0.3 s wait took %.2f s", rank, dt);
    TH_CHECK(r != WEFT_REQUEST_NULL, "rank %d: the timed-out request was released", rank);
    TH_OK(weft_request_cancel(&r));
    TH_CHECK(weft_wait(&r, NULL) == WEFT_ERR_CANCELED, "rank %d: not canceled", rank);
    TH_OK(weft_barrier(w));
    TH_OK(weft_comm_set_timeout(w, 1.0));
    if (rank == 1) {
        th_nap_ms(2500);
    } else {
        int64_t v = rank, all[2];
        t0 = weft_wtime();
        rc = weft_allgather(&v, all, 1, WEFT_INT64, w);
        dt = weft_wtime() - t0;
        TH_CHECK(rc == WEFT_ERR_TIMEOUT, "rank %d: allgather returned %d: %s", rank, rc, weft_last_error());
        TH_CHECK(dt >= 1 && dt < 4, "rank %d: a 1 s deadline took %.2f s", rank, dt);
        TH_CHECK(strstr(weft_last_error(), "rank 1"), "rank %d: %s", rank, weft_last_error());
    }
    weft_finalize();
    return 0;
}

Test(progress, deadlines_hold_with_the_thread_on, .timeout = 60)
{
    th_result_t res = th_run(2, body_deadlines, NULL, 50, on_env);
    cr_assert_eq(res.timed_out, 0, "hung");
    cr_assert_eq(res.exit_code[0], 0);
}

/* ---- weft_request_on_complete's rules ----------------------------------------- */
static int body_callback_rules(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    main_thread = pthread_self();
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    note_t a, b, c;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    memset(&c, 0, sizeof(c));
    int x = 0, y = 42;
    weft_request_t rr, sr, never;
    TH_OK(weft_irecv(&x, 1, WEFT_INT32, rank, 1, w, &rr));
    TH_OK(weft_isend(&y, 1, WEFT_INT32, rank, 1, w, &sr));
    /* complete already (a message to itself, waited for by weft_test's poll
     * below): the callback runs at once, on this thread */
    TH_OK(weft_request_on_complete(rr, note, &a));
    weft_status_t st;
    TH_OK(weft_wait(&rr, &st));
    TH_CHECK(atomic_load(&a.fired) == 1 && atomic_load(&a.status) == WEFT_SUCCESS, "fired %d status %d",
             atomic_load(&a.fired), atomic_load(&a.status));
    TH_CHECK(x == 42, "received %d", x);
    TH_CHECK(st.source == rank, "source %d", st.source);
    TH_OK(weft_request_on_complete(sr, note, &b));
    TH_CHECK(weft_request_on_complete(sr, note, &c) == WEFT_ERR_ALREADY, "a second callback was taken");
    TH_OK(weft_wait(&sr, NULL));
    TH_CHECK(atomic_load(&b.fired) == 1 && atomic_load(&c.fired) == 0, "b %d c %d", atomic_load(&b.fired),
             atomic_load(&c.fired));
    TH_CHECK(weft_request_on_complete(WEFT_REQUEST_NULL, note, &c) == WEFT_ERR_ARG, "null request taken");
    /* released while pending: never called */
    TH_OK(weft_irecv(&x, 1, WEFT_INT32, rank, 2, w, &never));
    TH_CHECK(weft_request_on_complete(never, NULL, NULL) == WEFT_ERR_ARG, "NULL callback taken");
    TH_OK(weft_request_on_complete(never, note, &c));
    TH_OK(weft_request_free(&never));
    for (int i = 0; i < 100; i++)
        weft_progress();
    th_nap_ms(50);
    TH_CHECK(atomic_load(&c.fired) == 0, "a released request's callback ran");
    TH_OK(weft_finalize());
    return 0;
}

Test(progress, on_complete_rules)
{
    for (int on = 0; on < 2; on++) {
        const char *const env[] = {"WEFT_LOG_LEVEL=error", on ? "WEFT_PROGRESS_THREAD=on" : "WEFT_PROGRESS_THREAD=off",
                                   NULL};
        th_result_t res = th_run(1, body_callback_rules, NULL, 30, env);
        cr_assert_eq(res.failed, 0, "thread %s", on ? "on" : "off");
    }
}

/* ---- what auto decides ---------------------------------------------------------- */
/* WEFT_PROGRESS_THREAD=auto and WEFT_PROGRESS_SPIN_US=auto resolved: the
 * thread runs where a CPU is spare, and polls before its naps only there. */
static void resolve_auto(int host_ranks, int thread)
{
    weft_cfg.progress_thread = thread;
    weft_cfg.progress_spin_us = -1;
    weft_progress_thread_resolve(host_ranks);
}

Test(progress, auto_wants_a_spare_cpu)
{
    cpu_set_t all, one;
    cr_assert_eq(sched_getaffinity(0, sizeof(all), &all), 0);
    resolve_auto(100000, WEFT_PT_AUTO); /* far more ranks than CPUs */
    cr_assert_eq(weft_cfg.progress_thread, WEFT_PT_OFF, "oversubscribed: off");
    cr_assert_eq(weft_cfg.progress_spin_us, 0, "oversubscribed: no polling");
    if (CPU_COUNT(&all) >= 2) {
        resolve_auto(1, WEFT_PT_AUTO);
        cr_assert_eq(weft_cfg.progress_thread, WEFT_PT_ON, "one rank on %d CPUs: on", CPU_COUNT(&all));
        cr_assert_eq(weft_cfg.progress_spin_us, WEFT_PROGRESS_SPIN_US_SPARE, "one rank on %d CPUs: it polls",
                     CPU_COUNT(&all));
    }
    /* bound to a single CPU, as every other rank of the machine: nowhere to put the thread */
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) {
            CPU_SET(c, &one);
            break;
        }
    cr_assert_eq(sched_setaffinity(0, sizeof(one), &one), 0);
    resolve_auto(CPU_SETSIZE, WEFT_PT_AUTO);
    cr_assert_eq(weft_cfg.progress_thread, WEFT_PT_OFF, "bound to one CPU, every CPU bound to a rank: off");
    if (CPU_COUNT(&all) >= 2) {
        /* bound to one CPU, the only rank here: the thread runs on the others */
        resolve_auto(1, WEFT_PT_AUTO);
        cr_assert_eq(weft_cfg.progress_thread, WEFT_PT_ON, "bound to one CPU of %d, no other rank: on",
                     CPU_COUNT(&all));
        cr_assert_eq(weft_cfg.progress_spin_us, WEFT_PROGRESS_SPIN_US_SPARE, "the thread's CPUs are its own: it polls");
    }
    resolve_auto(100000, WEFT_PT_ON); /* on stays on, and shares the rank's CPU: no polling */
    cr_assert_eq(weft_cfg.progress_thread, WEFT_PT_ON);
    cr_assert_eq(weft_cfg.progress_spin_us, 0, "forced on without a spare CPU: no polling");
    weft_cfg.progress_spin_us = 50; /* a value given stays */
    weft_progress_thread_resolve(1);
    cr_assert_eq(weft_cfg.progress_spin_us, 50);
    sched_setaffinity(0, sizeof(all), &all);
}
