/* Blocking waits past their spin budget (WEFT_WAIT_SPIN_US) sleep: a wait
 * on a late peer costs little CPU and still completes, whether it sleeps
 * on UCX's events (a message) or naps (a shared-memory collective); a
 * deadline that passes during the sleep still ends it with
 * WEFT_ERR_TIMEOUT; a peer killed meanwhile is still reported; and init
 * tells ranks that share their CPUs (oversubscribed) from ranks that do
 * not. Runs with whatever WEFT_PROGRESS_THREAD says (make
 * check-progress-thread: on and off): with the thread on, the sleeping
 * call hands its request to the thread. CPU shares are behaviour (the
 * wait sleeps rather than spins), not speed; the bounds are loose for a
 * shared 2-core machine. */
#include "harness.h"
#include "weft.h"
#include "weft_internal.h"

#include <criterion/criterion.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A sleeping wait may use at most this share of its wall time. */
#define CPU_SHARE_MAX 0.3
#define LATE_MS       200

static const char *const quiet_env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=60", NULL};

static void *shared_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(p != MAP_FAILED);
    memset(p, 0, bytes);
    return p;
}

/* One measured wait: its wall and CPU seconds. */
typedef struct {
    double wall, cpu;
} took_t;

/* rc = call, its wall and CPU time in *t. */
#define MEASURE_RC(t, rc, call)                                                                                        \
    do {                                                                                                               \
        double c0_ = th_cpu_seconds(), t0_ = weft_wtime();                                                             \
        (rc) = (call);                                                                                                 \
        (t)->wall = weft_wtime() - t0_;                                                                                \
        (t)->cpu = th_cpu_seconds() - c0_;                                                                             \
    } while (0)
/* The same for a call that must succeed. */
#define MEASURE(t, call)                                                                                               \
    do {                                                                                                               \
        int rc_;                                                                                                       \
        MEASURE_RC(t, rc_, call);                                                                                      \
        TH_OK(rc_);                                                                                                    \
    } while (0)

static void expect_slept(const took_t *t, const char *what)
{
    cr_expect_geq(t->wall, LATE_MS * 0.5e-3, "%s: %.3f s: the peer was not late", what, t->wall);
    cr_expect_leq(t->cpu, CPU_SHARE_MAX * t->wall, "%s: %.0f ms of CPU in %.0f ms of waiting (at most %.0f%%)", what,
                  t->cpu * 1e3, t->wall * 1e3, CPU_SHARE_MAX * 100);
}

/* ---- a late peer: the wait sleeps and completes ----------------------------- */
/* Rank 1 is LATE_MS late to each of: a message rank 0 receives (UCX's
 * events wake it), a small allreduce (shared-memory flags: naps), an
 * alltoall, a 1 MiB message (rendezvous) rank 0 waits for with
 * weft_waitall, and a message rank 0 probes for. Rank 0's waits must use
 * at most CPU_SHARE_MAX of their time and deliver the right data. */
enum { LATE_RECV, LATE_ALLREDUCE, LATE_ALLTOALL, LATE_WAITALL, LATE_PROBE, LATE_CASES };
static const char *const late_case[] = {"recv", "allreduce", "alltoall", "waitall (1 MiB)", "probe"};
typedef struct {
    int other_work; /* rank 0 has a receive pending throughout (the thread, when on, is armed for it) */
    took_t took[LATE_CASES];
} late_shared_t;

static int body_late(int rank, int size, void *arg)
{
    late_shared_t *sh = arg;
    took_t *took = sh->took;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    int peer = 1 - rank;
    enum { BIG = 1 << 18 };
    int32_t *big = malloc(BIG * sizeof(int32_t));
    for (int i = 0; i < BIG; i++)
        big[i] = rank ? i : -1;
    int64_t v = rank + 1, sum = 0, mine[2] = {10 * rank, 10 * rank + 1}, got[2] = {-1, -1};
    int x = -1, y = 42;
    TH_OK(weft_barrier(w));
    TH_OK(weft_allreduce(&v, &sum, 1, WEFT_INT64, WEFT_SUM, w)); /* connected, shared memory set up */
    int z = -1;
    weft_request_t other = WEFT_REQUEST_NULL;
    if (sh->other_work && rank == 0) TH_OK(weft_irecv(&z, 1, WEFT_INT32, peer, 6, w, &other));
    if (rank == 1) {
        th_nap_ms(LATE_MS);
        TH_OK(weft_send(&y, 1, WEFT_INT32, peer, 3, w));
        th_nap_ms(LATE_MS);
        TH_OK(weft_allreduce(&v, &sum, 1, WEFT_INT64, WEFT_SUM, w));
        th_nap_ms(LATE_MS);
        TH_OK(weft_alltoall(mine, got, 1, WEFT_INT64, w));
        th_nap_ms(LATE_MS);
        TH_OK(weft_send(big, BIG, WEFT_INT32, peer, 4, w));
        th_nap_ms(LATE_MS);
        TH_OK(weft_send(&y, 1, WEFT_INT32, peer, 7, w));
    } else {
        MEASURE(&took[LATE_RECV], weft_recv(&x, 1, WEFT_INT32, peer, 3, w, NULL));
        TH_CHECK(x == 42, "received %d", x);
        MEASURE(&took[LATE_ALLREDUCE], weft_allreduce(&v, &sum, 1, WEFT_INT64, WEFT_SUM, w));
        MEASURE(&took[LATE_ALLTOALL], weft_alltoall(mine, got, 1, WEFT_INT64, w));
        weft_request_t r[2];
        TH_OK(weft_irecv(big, BIG, WEFT_INT32, peer, 4, w, &r[0]));
        TH_OK(weft_isend(&y, 1, WEFT_INT32, peer, 5, w, &r[1]));
        MEASURE(&took[LATE_WAITALL], weft_waitall(2, r, NULL));
        for (int i = 0; i < BIG; i++)
            TH_CHECK(big[i] == i, "element %d of the 1 MiB message: %d", i, big[i]);
        weft_status_t st;
        MEASURE(&took[LATE_PROBE], weft_probe(peer, 7, w, &st));
        TH_CHECK(st.source == peer && st.tag == 7, "probe found rank %d tag %d", st.source, st.tag);
        TH_OK(weft_recv(&x, 1, WEFT_INT32, peer, 7, w, NULL));
    }
    if (rank == 1) TH_OK(weft_recv(&x, 1, WEFT_INT32, peer, 5, w, NULL));
    if (sh->other_work && rank == 1) TH_OK(weft_send(&y, 1, WEFT_INT32, peer, 6, w));
    TH_OK(weft_wait(&other, NULL));
    TH_CHECK(!sh->other_work || rank == 1 || z == 42, "the pending receive got %d", z);
    TH_CHECK(sum == 3, "rank %d: allreduce gave %lld", rank, (long long)sum);
    TH_CHECK(got[0] == rank && got[1] == 10 + rank, "rank %d: alltoall gave %lld %lld", rank, (long long)got[0],
             (long long)got[1]);
    free(big);
    TH_OK(weft_finalize());
    (void)size;
    return 0;
}

static void run_late(int other_work)
{
    late_shared_t *sh = shared_alloc(sizeof(*sh));
    sh->other_work = other_work;
    th_result_t res = th_run(2, body_late, sh, 50, quiet_env);
    cr_assert_eq(res.timed_out, 0, "hung");
    cr_assert_eq(res.failed, 0);
    for (int c = 0; c < LATE_CASES; c++) {
        printf("a peer %d ms late, %s%s: %.0f ms of CPU in %.0f ms\n", LATE_MS, late_case[c],
               other_work ? " (a receive pending meanwhile)" : "", sh->took[c].cpu * 1e3, sh->took[c].wall * 1e3);
        expect_slept(&sh->took[c], late_case[c]);
    }
    munmap(sh, sizeof(*sh));
}

Test(wait, a_wait_on_a_late_peer_sleeps_and_completes, .timeout = 60)
{
    run_late(0);
}

/* The same with other work pending: the progress thread, when on, is
 * armed for it and takes the sleeping call's request over. */
Test(wait, a_wait_beside_other_pending_work_sleeps_and_completes, .timeout = 60)
{
    run_late(1);
}

/* ---- a deadline during the sleep ------------------------------------------- */
/* A wait on a receive nobody sends ends at its 0.3 s deadline with
 * WEFT_ERR_TIMEOUT (the request stays valid), and a blocking barrier
 * (shared memory: naps) a member joins only after the communicator's 1 s
 * deadline times out naming that rank; both sleep meanwhile. */
typedef struct {
    took_t recv, barrier;
} deadline_shared_t;

static int body_deadline(int rank, int size, void *arg)
{
    deadline_shared_t *sh = arg;
    (void)size;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    int x = 0;
    TH_OK(weft_barrier(w));
    int rc;
    if (rank == 0) {
        weft_request_t r;
        TH_OK(weft_irecv(&x, 1, WEFT_INT32, 1, 77, w, &r));
        MEASURE_RC(&sh->recv, rc, weft_wait_timeout(&r, 0.3, NULL));
        TH_CHECK(rc == WEFT_ERR_TIMEOUT, "the wait returned %d (%s)", rc, weft_strerror(rc));
        TH_CHECK(r != WEFT_REQUEST_NULL, "the timed-out request was released");
        TH_OK(weft_request_cancel(&r));
        TH_CHECK(weft_wait(&r, NULL) == WEFT_ERR_CANCELED, "not canceled");
    }
    TH_OK(weft_barrier(w));
    TH_OK(weft_comm_set_timeout(w, 1.0));
    if (rank == 0) {
        MEASURE_RC(&sh->barrier, rc, weft_barrier(w));
        TH_CHECK(rc == WEFT_ERR_TIMEOUT, "the barrier returned %d: %s", rc, weft_last_error());
        TH_CHECK(strstr(weft_last_error(), "rank 1"), "%s", weft_last_error());
    } else {
        th_nap_ms(2500);
    }
    weft_finalize();
    return 0;
}

Test(wait, a_deadline_ends_a_sleeping_wait, .timeout = 60)
{
    deadline_shared_t *sh = shared_alloc(sizeof(*sh));
    th_result_t res = th_run(2, body_deadline, sh, 50, quiet_env);
    cr_assert_eq(res.timed_out, 0, "hung");
    cr_assert_eq(res.exit_code[0], 0);
    printf("deadline 0.3 s on a receive: ended after %.3f s, %.0f ms of CPU; 1 s on a barrier: %.3f s, %.0f ms\n",
           sh->recv.wall, sh->recv.cpu * 1e3, sh->barrier.wall, sh->barrier.cpu * 1e3);
    cr_expect(sh->recv.wall >= 0.3 && sh->recv.wall < 3, "a 0.3 s wait took %.3f s", sh->recv.wall);
    cr_expect(sh->barrier.wall >= 1 && sh->barrier.wall < 4, "a 1 s deadline took %.3f s", sh->barrier.wall);
    cr_expect_leq(sh->recv.cpu, CPU_SHARE_MAX * sh->recv.wall, "receive: %.0f ms of CPU", sh->recv.cpu * 1e3);
    cr_expect_leq(sh->barrier.cpu, CPU_SHARE_MAX * sh->barrier.wall, "barrier: %.0f ms of CPU", sh->barrier.cpu * 1e3);
    munmap(sh, sizeof(*sh));
}

/* ---- a peer killed while the waits sleep ------------------------------------ */
/* Rank 2 dies 300 ms into rank 0's receive from it (UCX events) and rank
 * 1's barrier (shared memory, which rank 0 never joins): both waits end
 * with WEFT_ERR_PEER_LOST naming rank 2, long before their 20 s deadline,
 * having slept meanwhile. */
typedef struct {
    took_t took[2];
    int rc[2];
} kill_shared_t;

static int body_kill(int rank, int size, void *arg)
{
    kill_shared_t *sh = arg;
    (void)size;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    TH_OK(weft_comm_set_timeout(w, 20));
    int64_t v = 1, sum = 0;
    TH_OK(weft_allreduce(&v, &sum, 1, WEFT_INT64, WEFT_SUM, w)); /* everyone connected */
    TH_OK(weft_barrier(w));
    if (rank == 2) {
        th_nap_ms(300);
        fflush(stderr);
        kill(getpid(), SIGKILL);
    }
    int x = 0, rc;
    MEASURE_RC(&sh->took[rank], rc, rank == 0 ? weft_recv(&x, 1, WEFT_INT32, 2, 9, w, NULL) : weft_barrier(w));
    sh->rc[rank] = rc;
    TH_CHECK(rc == WEFT_ERR_PEER_LOST, "rank %d: returned %d (%s): %s", rank, rc, weft_strerror(rc), weft_last_error());
    TH_CHECK(strstr(weft_last_error(), "rank 2"), "rank %d: the error does not name rank 2: %s", rank,
             weft_last_error());
    weft_finalize();
    return 0;
}

Test(wait, a_peer_killed_during_the_sleep_is_reported, .timeout = 90)
{
    const char *const env[] = {"WEFT_LOG_LEVEL=error", NULL};
    kill_shared_t *sh = shared_alloc(sizeof(*sh));
    th_result_t res = th_run(3, body_kill, sh, 70, env);
    cr_assert_eq(res.timed_out, 0, "survivors hung");
    cr_assert_eq(res.exit_code[2], 128 + SIGKILL);
    static const char *const what[] = {"receive from it", "barrier"};
    for (int r = 0; r < 2; r++) {
        cr_expect_eq(res.exit_code[r], 0, "rank %d", r);
        printf("rank 2 killed 300 ms into rank %d's %s: ended after %.3f s, %.0f ms of CPU\n", r, what[r],
               sh->took[r].wall, sh->took[r].cpu * 1e3);
        cr_expect_lt(sh->took[r].wall, 10, "rank %d: the loss took %.3f s to end the wait", r, sh->took[r].wall);
        cr_expect_leq(sh->took[r].cpu, CPU_SHARE_MAX * sh->took[r].wall, "rank %d: %.0f ms of CPU in %.0f ms", r,
                      sh->took[r].cpu * 1e3, sh->took[r].wall * 1e3);
    }
    munmap(sh, sizeof(*sh));
}

/* ---- oversubscription at init ------------------------------------------------ */
/* Ranks bound to one CPU together are oversubscribed: waits yield at once
 * and get the short budget, and weft_progress_info says so; ranks bound
 * to a CPU each are not. Both still run a ping-pong and an allreduce. */
typedef struct {
    int together; /* both ranks on one CPU (else one each) */
    struct {
        int spin_us, yield_after, sharers, cpus;
        char info[512];
    } rank[2];
} placement_shared_t;

static int first_cpus(int *cpus, int max)
{
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof(set), &set)) return 0;
    for (int c = 0; c < CPU_SETSIZE && n < max; c++)
        if (CPU_ISSET(c, &set)) cpus[n++] = c;
    return n;
}

static int body_bound(int rank, int size, void *arg)
{
    placement_shared_t *sh = arg;
    int together = sh->together, cpus[2];
    int n = first_cpus(cpus, 2);
    (void)size;
    TH_CHECK(n >= (together ? 1 : 2), "rank %d: %d CPUs allowed", rank, n);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(together ? cpus[0] : cpus[rank], &one);
    TH_CHECK(sched_setaffinity(0, sizeof(one), &one) == 0, "rank %d: sched_setaffinity failed", rank);
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    sh->rank[rank].spin_us = weft_cfg.wait_spin_us;
    sh->rank[rank].yield_after = weft_cfg.spin_before_yield;
    sh->rank[rank].sharers = weft_g.cpu_sharers;
    sh->rank[rank].cpus = weft_g.cpus_shared;
    TH_OK(weft_progress_info(sh->rank[rank].info, sizeof(sh->rank[rank].info)));
    int b = rank;
    for (int i = 0; i < 200; i++) {
        if (rank == 0) {
            TH_OK(weft_send(&b, 1, WEFT_INT32, 1, 1, w));
            TH_OK(weft_recv(&b, 1, WEFT_INT32, 1, 1, w, NULL));
        } else {
            TH_OK(weft_recv(&b, 1, WEFT_INT32, 0, 1, w, NULL));
            TH_OK(weft_send(&b, 1, WEFT_INT32, 0, 1, w));
        }
    }
    int64_t v = rank + 1, sum = 0;
    for (int i = 0; i < 200; i++)
        TH_OK(weft_allreduce(&v, &sum, 1, WEFT_INT64, WEFT_SUM, w));
    TH_CHECK(sum == 3, "rank %d: allreduce gave %lld", rank, (long long)sum);
    TH_OK(weft_finalize());
    return 0;
}

static void run_bound(int together)
{
    const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=60", NULL};
    if (getenv("WEFT_WAIT_SPIN_US") || getenv("WEFT_SPIN_BEFORE_YIELD")) cr_skip_test("the budget is set by hand");
    int cpus[2];
    if (!together && first_cpus(cpus, 2) < 2) cr_skip_test("one CPU allowed: no rank can have its own");
    placement_shared_t *sh = shared_alloc(sizeof(*sh));
    sh->together = together;
    th_result_t res = th_run(2, body_bound, sh, 50, env);
    cr_assert_eq(res.timed_out, 0, "hung");
    cr_assert_eq(res.failed, 0);
    for (int r = 0; r < 2; r++) {
        const char *info = sh->rank[r].info;
        printf("%s, rank %d: %s\n", together ? "both ranks on one CPU" : "a CPU each", r, info);
        cr_expect_eq(sh->rank[r].sharers, together ? 2 : 1, "rank %d: %d ranks share its CPUs", r, sh->rank[r].sharers);
        cr_expect_eq(sh->rank[r].cpus, 1, "rank %d: %d CPUs", r, sh->rank[r].cpus);
        cr_expect_eq(sh->rank[r].spin_us, together ? WEFT_WAIT_SPIN_US_SHARED : WEFT_WAIT_SPIN_US_DEDICATED,
                     "rank %d: spin budget %d us", r, sh->rank[r].spin_us);
        cr_expect_eq(sh->rank[r].yield_after, together ? 1 : 2000, "rank %d: yields after %d polls", r,
                     sh->rank[r].yield_after);
        cr_expect_eq(strstr(info, "oversubscribed") != NULL, together, "rank %d: %s", r, info);
    }
    munmap(sh, sizeof(*sh));
}

Test(wait, ranks_bound_to_one_cpu_are_oversubscribed, .timeout = 60)
{
    run_bound(1);
}

Test(wait, ranks_with_a_cpu_each_are_not, .timeout = 60)
{
    run_bound(0);
}
