/* Surviving a lost rank: revoke, shrink and agree (ULFM-style), the context
 * id's generation, more than 1,024 communicators, and weft_finalize with a
 * dead peer. Multi-rank through the harness (fork + the env bootstrap).
 *
 * Timing bounds are generous (a shared 2-core machine runs these): each
 * says how much faster than the deadline the thing must happen, and the
 * deadlines are set far above them, so a wait that sat out its deadline
 * shows. */
#include "harness.h"
#include "schedule.h"
#include "weft.h"
#include "weft_internal.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define FT_DEADLINE 20.0 /* every communicator's timeout in these tests */

static weft_comm_t start(int *rank, int *size)
{
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    TH_OK(weft_comm_rank(w, rank));
    TH_OK(weft_comm_size(w, size));
    TH_OK(weft_comm_set_timeout(w, FT_DEADLINE));
    return w;
}

static void *shared_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(p != MAP_FAILED);
    memset(p, 0, bytes);
    return p;
}

static void die(void)
{
    fflush(stdout);
    fflush(stderr);
    kill(getpid(), SIGKILL);
}

/* The world ranks of comm's members, in comm order, as one number each
 * child can write to shared memory: bit w set for world rank w. */
static unsigned members_mask(weft_comm_t c)
{
    int n;
    unsigned m = 0;
    TH_OK(weft_comm_size(c, &n));
    for (int i = 0; i < n; i++) {
        int w;
        TH_OK(weft_comm_world_rank(c, i, &w));
        m |= 1u << w;
    }
    return m;
}

static const char *const quiet_env[] = {"WEFT_LOG_LEVEL=error", NULL};

/* ---- revoke: every member's pending operations fail at once ----------- */
/* Rank 0 revokes a communicator while rank 1 waits in a receive no one
 * will match, rank 2 in an allreduce the others never join, and rank 3 on
 * a 4 MB send rank 2 never receives (rendezvous: it completes only once
 * rank 2 discards it). Rank 0's own pending receive fails too. Every one
 * fails with WEFT_ERR_REVOKED within a fraction of the deadline; later
 * operations fail at once; the world is untouched. */
typedef struct {
    double revoked_at;
    double took[4];
} revoke_shared_t;

static int body_revoke(int rank, int size, void *arg)
{
    revoke_shared_t *sh = arg;
    int me, n, rc, flag, x = 0;
    (void)size;
    weft_comm_t w = start(&me, &n), c;
    TH_OK(weft_comm_dup(w, WEFT_OPTIONS_NULL, &c));
    TH_OK(weft_comm_warmup(c));
    TH_OK(weft_barrier(w));
    enum { BIG = 4 << 20 };
    char *big = calloc(BIG, 1);
    weft_request_t r = WEFT_REQUEST_NULL;
    if (rank == 0) {
        TH_OK(weft_irecv(&x, 1, WEFT_INT32, 2, 9, c, &r));
        usleep(300 * 1000); /* the others are blocked by now */
        sh->revoked_at = weft_wtime();
        TH_OK(weft_comm_revoke(c));
        rc = weft_wait(&r, NULL);
    } else if (rank == 1) {
        rc = weft_recv(&x, 1, WEFT_INT32, 3, 9, c, NULL);
    } else if (rank == 2) {
        rc = weft_allreduce(WEFT_IN_PLACE, &x, 1, WEFT_INT32, WEFT_SUM, c);
    } else {
        TH_OK(weft_isend(big, BIG, WEFT_BYTE, 2, 5, c, &r));
        rc = weft_wait(&r, NULL);
    }
    double took = weft_wtime() - sh->revoked_at;
    sh->took[rank] = took;
    TH_CHECK(rc == WEFT_ERR_REVOKED, "rank %d: rc %d (%s): %s", rank, rc, weft_strerror(rc), weft_last_error());
    TH_CHECK(strstr(weft_last_error(), "revoked by its rank 0"), "rank %d: the message does not name rank 0: %s", rank,
             weft_last_error());
    TH_CHECK(took < FT_DEADLINE / 4, "rank %d: failed %.3f s after the revoke", rank, took);
    TH_OK(weft_comm_is_revoked(c, &flag));
    TH_CHECK(flag == 1, "rank %d: not revoked", rank);
    /* Later operations fail at once. */
    weft_comm_t d;
    TH_CHECK(weft_send(&x, 1, WEFT_INT32, (rank + 1) % 4, 1, c) == WEFT_ERR_REVOKED, "send");
    TH_CHECK(weft_recv(&x, 1, WEFT_INT32, (rank + 3) % 4, 1, c, NULL) == WEFT_ERR_REVOKED, "recv");
    TH_CHECK(weft_irecv(&x, 1, WEFT_INT32, WEFT_ANY_SOURCE, 1, c, &r) == WEFT_ERR_REVOKED, "irecv");
    TH_CHECK(weft_barrier(c) == WEFT_ERR_REVOKED, "barrier");
    TH_CHECK(weft_comm_dup(c, WEFT_OPTIONS_NULL, &d) == WEFT_ERR_REVOKED, "dup");
    TH_CHECK(strstr(weft_last_error(), "weft_comm_dup: comm"), "%s", weft_last_error());
    TH_OK(weft_comm_revoke(c)); /* twice: no error */
    /* The world is untouched; the revoked comm can be freed. */
    int one = 1;
    TH_OK(weft_allreduce(WEFT_IN_PLACE, &one, 1, WEFT_INT32, WEFT_SUM, w));
    TH_CHECK(one == 4, "world allreduce after the revoke: %d", one);
    TH_OK(weft_comm_free(&c));
    free(big);
    TH_OK(weft_finalize());
    return 0;
}

Test(ft, revoke_fails_pending_operations_everywhere, .timeout = 90)
{
    revoke_shared_t *sh = shared_alloc(sizeof(*sh));
    const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=20", NULL};
    th_result_t res = th_run(4, body_revoke, sh, 80, env);
    cr_assert_eq(res.failed, 0);
    cr_log_info("revoke: pending operations failed %.1f / %.1f / %.1f / %.1f ms after it (ranks 0-3)",
                sh->took[0] * 1e3, sh->took[1] * 1e3, sh->took[2] * 1e3, sh->took[3] * 1e3);
    munmap(sh, sizeof(*sh));
}

/* ---- agree and shrink with everyone alive ------------------------------ */
static int body_agree(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n), c, s;
    TH_OK(weft_comm_split(w, 0, size - rank, WEFT_OPTIONS_NULL, &c)); /* reversed order */
    for (int round = 0; round < 5; round++) {
        int flag = rank == 2 ? 0x5 : 0x7 | (rank << 4);
        TH_OK(weft_comm_agree(c, &flag));
        TH_CHECK(flag == 0x5, "rank %d round %d: agreed flag %#x", rank, round, flag);
    }
    TH_CHECK(weft_comm_agree(c, NULL) == WEFT_ERR_ARG, "NULL flag");
    TH_OK(weft_comm_shrink(c, &s));
    int sr, ss;
    TH_OK(weft_comm_rank(s, &sr));
    TH_OK(weft_comm_size(s, &ss));
    TH_CHECK(ss == size && sr == size - 1 - rank, "rank %d: shrunk comm rank %d of %d", rank, sr, ss);
    TH_CHECK(s->context_id != c->context_id, "same context id %#x", s->context_id);
    TH_CHECK(strstr(weft_comm_name(s), ".shrink"), "name %s", weft_comm_name(s));
    double t;
    TH_OK(weft_comm_get_timeout(s, &t));
    TH_CHECK(t == FT_DEADLINE, "timeout %g not inherited", t);
    int64_t v = rank, sum = 0;
    TH_OK(weft_allreduce(&v, &sum, 1, WEFT_INT64, WEFT_SUM, s));
    TH_CHECK(sum == (int64_t)size * (size - 1) / 2, "sum %lld", (long long)sum);
    TH_CHECK(weft_comm_shrink(c, NULL) == WEFT_ERR_ARG, "NULL output");
    TH_OK(weft_comm_free(&s));
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_finalize());
    return 0;
}

Test(ft, agree_and_shrink_with_every_rank_alive, .timeout = 60)
{
    th_result_t res = th_run(4, body_agree, NULL, 50, quiet_env);
    cr_assert_eq(res.failed, 0);
}

/* ---- a training loop that loses a rank at a random point ---------------- */
/* Four ranks run steps of allreduce; one (rank 0 too: it hosts the env
 * store) is killed at a random step, before its allreduce or in the middle
 * of it. The survivors see the error (lost peer, or the comm revoked by
 * another survivor), revoke, shrink, agree on the step to resume from and
 * carry on with the survivors' sums until the end; their communicators
 * must be identical, and finalize clean. Twenty runs, each with its own
 * victim, step and way of dying. */
#define STEPS 24
#define COUNT 4096

typedef struct {
    unsigned seed;
    unsigned members[4]; /* per survivor: the final communicator (world-rank bitmask) */
    int steps_done[4];
    int recoveries[4];
    double finalize_s[4];
} loop_shared_t;

static double contribution(int world_rank, int step, int i)
{
    return (double)((world_rank + 1) * 1000 + step * 7 + i % 13);
}

/* seed: bits 0-1 the victim, 2-6 the step (1 + value mod STEPS - 4), 7 mid-allreduce. */
static int seed_victim(unsigned seed)
{
    return (int)(seed & 3);
}
static int seed_step(unsigned seed)
{
    return 1 + (int)((seed >> 2) & 31) % (STEPS - 4);
}
static int seed_mid(unsigned seed)
{
    return (int)((seed >> 7) & 1);
}

static int body_loop(int rank, int size, void *arg)
{
    loop_shared_t *sh = arg;
    int me, n;
    unsigned seed = sh->seed;
    int victim = seed_victim(seed), kill_step = seed_step(seed), mid = seed_mid(seed);
    weft_comm_t w = start(&me, &n), comm = w;
    double *x = malloc(COUNT * sizeof(double)), *y = malloc(COUNT * sizeof(double));
    int step = 0;
    (void)size;
    while (step < STEPS) {
        for (int i = 0; i < COUNT; i++)
            x[i] = contribution(rank, step, i);
        int rc;
        if (rank == victim && step == kill_step) {
            if (!mid) die();
            weft_request_t r; /* dies with its part of the allreduce under way */
            TH_OK(weft_iallreduce(x, y, COUNT, WEFT_FLOAT64, WEFT_SUM, comm, &r));
            for (int i = 0; i < 3; i++)
                weft_progress();
            die();
        }
        rc = weft_allreduce(x, y, COUNT, WEFT_FLOAT64, WEFT_SUM, comm);
        if (rc == WEFT_SUCCESS) {
            int cn;
            TH_OK(weft_comm_size(comm, &cn));
            for (int i = 0; i < COUNT; i++) {
                double want = 0;
                for (int m = 0; m < cn; m++) {
                    int wr;
                    TH_OK(weft_comm_world_rank(comm, m, &wr));
                    want += contribution(wr, step, i);
                }
                TH_CHECK(y[i] == want, "rank %d step %d: y[%d] = %g, expected %g over %d ranks", rank, step, i, y[i],
                         want, cn);
            }
            step++;
            continue;
        }
        TH_CHECK(rc == WEFT_ERR_PEER_LOST || rc == WEFT_ERR_REVOKED, "rank %d step %d: rc %d (%s): %s", rank, step, rc,
                 weft_strerror(rc), weft_last_error());
        /* ULFM's recovery: make sure every survivor stops using comm, agree
         * on the survivors, resume from the earliest step not everyone did. */
        TH_OK(weft_comm_revoke(comm));
        weft_comm_t next;
        rc = weft_comm_shrink(comm, &next);
        TH_CHECK(rc == WEFT_SUCCESS, "rank %d (seed %u: victim %d, step %d, %s): shrink: rc %d (%s): %s", rank, seed,
                 victim, kill_step, mid ? "mid-allreduce" : "before it", rc, weft_strerror(rc), weft_last_error());
        if (comm != w) TH_OK(weft_comm_free(&comm));
        comm = next;
        int resume = step;
        TH_OK(weft_allreduce(WEFT_IN_PLACE, &resume, 1, WEFT_INT32, WEFT_MIN, comm));
        step = resume;
        sh->recoveries[rank]++;
    }
    int cn;
    TH_OK(weft_comm_size(comm, &cn));
    TH_CHECK(cn == 3, "rank %d: %d ranks at the end", rank, cn);
    sh->members[rank] = members_mask(comm);
    sh->steps_done[rank] = step;
    if (comm != w) TH_OK(weft_comm_free(&comm));
    free(x);
    free(y);
    double t0 = weft_wtime();
    int rc = weft_finalize();
    sh->finalize_s[rank] = weft_wtime() - t0;
    TH_CHECK(rc == WEFT_SUCCESS, "rank %d: finalize: rc %d (%s): %s", rank, rc, weft_strerror(rc), weft_last_error());
    return 0;
}

/* WEFT_TEST_FT_SEED=n (0-255, as a failure names it) gives every run that
 * seed, to reproduce it. */
static void run_loops(int runs, const char *const *env)
{
    loop_shared_t *sh = shared_alloc(sizeof(*sh));
    unsigned base = (unsigned)time(NULL);
    const char *forced = getenv("WEFT_TEST_FT_SEED");
    int seed = forced && *forced ? (int)(strtoul(forced, NULL, 0) & 0xff) : -1;
    for (int run = 0; run < runs; run++) {
        memset(sh, 0, sizeof(*sh));
        /* Every victim and both ways of dying come up; the step is random. */
        sh->seed = (unsigned)run % 4 | ((base + (unsigned)run * 2654435761u) % 32) << 2 | ((unsigned)run / 4 % 2) << 7;
        if (seed >= 0) sh->seed = (unsigned)seed;
        int victim = seed_victim(sh->seed);
        double t0 = weft_wtime();
        th_result_t res = th_run(4, body_loop, sh, 60, env);
        cr_assert_eq(res.timed_out, 0, "run %d (seed %u): hung", run, sh->seed);
        cr_assert_eq(res.exit_code[victim], 128 + SIGKILL, "run %d: the victim (rank %d) exited with %d", run, victim,
                     res.exit_code[victim]);
        unsigned want = 0xf & ~(1u << victim);
        for (int r = 0; r < 4; r++) {
            if (r == victim) continue;
            cr_assert_eq(res.exit_code[r], 0,
                         "run %d (seed %u, victim %d): survivor %d failed (exit codes, 128+n: signal n: %d %d %d %d)",
                         run, sh->seed, victim, r, res.exit_code[0], res.exit_code[1], res.exit_code[2],
                         res.exit_code[3]);
            cr_assert_eq(sh->members[r], want, "run %d: survivor %d ended with members %#x, expected %#x", run, r,
                         sh->members[r], want);
            cr_assert_eq(sh->steps_done[r], STEPS);
            cr_assert(sh->finalize_s[r] < 5, "run %d: survivor %d's finalize took %.1f s", run, r, sh->finalize_s[r]);
        }
        cr_log_info("run %d: victim %d at step %d (%s): survivors done in %.2f s", run, victim, seed_step(sh->seed),
                    seed_mid(sh->seed) ? "mid-allreduce" : "before it", weft_wtime() - t0);
    }
    munmap(sh, sizeof(*sh));
}

Test(ft, training_loop_survives_a_random_kill_20_times, .timeout = 300)
{
    const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=20", NULL};
    run_loops(20, env);
}

/* The same on two simulated nodes of two ranks: hierarchical allreduces,
 * whose node and leader sub-communicators are revoked with their parent.
 * With WEFT_PEER_FAILURE=1: the simulated nodes share a host, so without
 * it UCX 1.13 carries their leader traffic over its single-copy (CMA)
 * rendezvous, which real nodes never use, and a receiver whose CMA read
 * hits a sender killed mid-message is aborted by UCX itself (SIGABRT: a
 * second death the survivors cannot recover from; docs/COMMUNICATORS.md).
 * With endpoint error handling UCX uses TCP between them, as between
 * real nodes, and reports the dead peer instead. */
Test(ft, training_loop_on_two_simulated_nodes_survives_a_random_kill, .timeout = 120)
{
    const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=20", "WEFT_RANKS_PER_NODE=2",
                               "WEFT_PEER_FAILURE=1", NULL};
    run_loops(8, env);
}

/* ---- a failed step on a sub-communicator -------------------------------- */
/* A hierarchical collective's step on a node (leader, rail) communicator
 * fails on one member because another member gave it up: that member's
 * collective failed for a lost peer or a revoke it learnt of first, and
 * coll/shm fails the others' part with WEFT_ERR_COMM (seen in the two-node
 * training loop: "a step on a sub-communicator failed: invalid
 * communicator", which no survivor's recovery expects). The parent's
 * collective must fail for the cause, as on that member: here a child
 * step fails with WEFT_ERR_COMM on rank 0 while rank 1, after 200 ms,
 * does nothing (the child's error, after the engine waited for a cause),
 * revokes the communicator (WEFT_ERR_REVOKED) or dies (WEFT_ERR_PEER_LOST
 * naming it). */
static int child_gives_up(weft_sched_t *s, void *arg)
{
    (void)s;
    (void)arg;
    return weft_error(WEFT_ERR_COMM, "test: another member of the sub-communicator gave its step up");
}

static int post_failing_child(weft_sched_t *s, void *arg, weft_request_t *req)
{
    weft_comm_t comm;
    (void)arg;
    if (!req) return WEFT_SUCCESS;
    weft_sched_comm(s, &comm);
    weft_sched_t *c = weft_sched_create(comm, "test_child");
    if (!c) return WEFT_ERR_NO_MEMORY;
    int rc = weft_sched_call(c, child_gives_up, NULL);
    if (rc) {
        weft_sched_discard(c);
        return rc;
    }
    return weft_sched_start(c, req);
}

/* A collective whose one step is a child that fails at once; its status,
 * message (into msg) and duration. */
static int run_failing_parent(weft_comm_t comm, char *msg, size_t len, double *took)
{
    double t0 = weft_wtime();
    weft_sched_t *s = weft_sched_create(comm, "test_parent");
    TH_CHECK(s, "out of memory");
    TH_OK(weft_sched_child(s, post_failing_child, NULL, NULL));
    int rc = weft_sched_run(s);
    *took = weft_wtime() - t0;
    snprintf(msg, len, "%s", weft_last_error());
    return rc;
}

static int body_child_fails(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    int me, n;
    weft_comm_t w = start(&me, &n), quiet, revoked;
    TH_OK(weft_comm_dup(w, WEFT_OPTIONS_NULL, &quiet));
    TH_OK(weft_comm_dup(w, WEFT_OPTIONS_NULL, &revoked));
    char msg[1024];
    double took;
    int rc;
    /* No cause: the child's own error, once the engine gave up waiting. */
    TH_OK(weft_barrier(w));
    if (rank == 0) {
        rc = run_failing_parent(quiet, msg, sizeof(msg), &took);
        TH_CHECK(rc == WEFT_ERR_COMM, "no cause: rc %d (%s): %s", rc, weft_strerror(rc), msg);
        TH_CHECK(strstr(msg, "no lost member or revoke explains it"), "no cause: %s", msg);
        TH_CHECK(took > 0.5 && took < FT_DEADLINE / 4, "no cause: failed after %.3f s", took);
    }
    /* Rank 1 revokes the communicator. */
    TH_OK(weft_barrier(w));
    if (rank == 0) {
        rc = run_failing_parent(revoked, msg, sizeof(msg), &took);
        TH_CHECK(rc == WEFT_ERR_REVOKED, "revoke: rc %d (%s): %s", rc, weft_strerror(rc), msg);
        TH_CHECK(strstr(msg, "revoked by its rank 1"), "revoke: %s", msg);
        TH_CHECK(took > 0.1 && took < FT_DEADLINE / 4, "revoke: failed after %.3f s", took);
    } else {
        usleep(200 * 1000);
        TH_OK(weft_comm_revoke(revoked));
    }
    /* Rank 1 dies. */
    TH_OK(weft_barrier(w));
    if (rank == 1) {
        usleep(200 * 1000);
        die();
    }
    rc = run_failing_parent(w, msg, sizeof(msg), &took);
    TH_CHECK(rc == WEFT_ERR_PEER_LOST, "loss: rc %d (%s): %s", rc, weft_strerror(rc), msg);
    TH_CHECK(strstr(msg, "rank 1 (world rank 1) lost"), "loss: %s", msg);
    TH_CHECK(took > 0.1 && took < FT_DEADLINE / 4, "loss: failed after %.3f s", took);
    TH_OK(weft_comm_free(&quiet));
    TH_OK(weft_comm_free(&revoked));
    TH_OK(weft_finalize());
    return 0;
}

Test(ft, a_failed_step_on_a_sub_communicator_reports_the_revoke_or_loss_behind_it, .timeout = 60)
{
    th_result_t res = th_run(2, body_child_fails, NULL, 50, quiet_env);
    cr_assert_eq(res.timed_out, 0);
    cr_assert_eq(res.exit_code[0], 0, "rank 0 exited with %d", res.exit_code[0]);
    cr_assert_eq(res.exit_code[1], 128 + SIGKILL, "rank 1 exited with %d", res.exit_code[1]);
}

/* ---- agree and shrink with a dead member -------------------------------- */
static int body_agree_lost(int rank, int size, void *arg)
{
    unsigned *shared = arg;
    int me, n;
    weft_comm_t w = start(&me, &n), s;
    (void)size;
    TH_OK(weft_barrier(w));
    if (rank == 2) die();
    int flag = rank == 1 ? 0x3 : 0xf;
    int rc = weft_comm_agree(w, &flag);
    TH_CHECK(rc == WEFT_ERR_PEER_LOST, "rank %d: agree: rc %d (%s): %s", rank, rc, weft_strerror(rc),
             weft_last_error());
    TH_CHECK(strstr(weft_last_error(), "3 of 4 members took part; lost: rank 2"), "rank %d: %s", rank,
             weft_last_error());
    TH_CHECK(flag == 0x3, "rank %d: agreed flag %#x", rank, flag);
    TH_OK(weft_comm_shrink(w, &s));
    shared[rank] = members_mask(s);
    int one = 1;
    TH_OK(weft_allreduce(WEFT_IN_PLACE, &one, 1, WEFT_INT32, WEFT_SUM, s));
    TH_CHECK(one == 3, "sum %d", one);
    flag = 1;
    TH_OK(weft_comm_agree(s, &flag)); /* everyone of s is alive */
    TH_OK(weft_comm_free(&s));
    TH_OK(weft_finalize());
    return 0;
}

Test(ft, agree_and_shrink_with_a_dead_member, .timeout = 60)
{
    unsigned *shared = shared_alloc(4 * sizeof(unsigned));
    th_result_t res = th_run(4, body_agree_lost, shared, 50, quiet_env);
    cr_assert_eq(res.timed_out, 0);
    for (int r = 0; r < 4; r++)
        if (r != 2) {
            cr_assert_eq(res.exit_code[r], 0, "rank %d", r);
            cr_assert_eq(shared[r], 0xbu, "rank %d: members %#x", r, shared[r]);
        }
    munmap(shared, 4 * sizeof(unsigned));
}

/* ---- a death during the shrink ----------------------------------------- */
/* The agreement's leader (rank 0) dies in the middle of it: after sending
 * its proposal to rank 1 only, or after telling rank 1 only the decision
 * (rank 1 returns with a communicator that still holds rank 0). A non-
 * leader dies as the shrink begins. The survivors must end with identical
 * communicators, and no one may hang: shrinking again until the dead rank
 * is out gives the three survivors. */
typedef struct {
    const char *when; /* "accept", "decide": the leader dies after sending that to rank 1; NULL: rank 3 dies */
    unsigned first[4], last[4];
    int rounds[4];
} during_shared_t;

static const char *die_after;
static void die_hook(const char *what, int to)
{
    if (die_after && !strcmp(what, die_after) && to == 1) die();
}

static int body_during(int rank, int size, void *arg)
{
    during_shared_t *sh = arg;
    int me, n;
    weft_comm_t w = start(&me, &n), c = w, s;
    (void)size;
    TH_OK(weft_barrier(w));
    if (sh->when && rank == 0) {
        die_after = sh->when;
        weft_ft_test_hook = die_hook;
    }
    if (!sh->when && rank == 3) die();
    for (int round = 0; round < 4; round++) {
        int rc = weft_comm_shrink(c, &s);
        TH_CHECK(rc == WEFT_SUCCESS, "rank %d round %d: shrink: rc %d (%s): %s", rank, round, rc, weft_strerror(rc),
                 weft_last_error());
        if (round == 0) sh->first[rank] = members_mask(s);
        if (c != w) TH_OK(weft_comm_free(&c));
        c = s;
        sh->rounds[rank] = round + 1;
        /* Everyone in c alive? (agree fails with a lost member in it.) */
        int flag = 1;
        rc = weft_comm_agree(c, &flag);
        if (rc == WEFT_SUCCESS) break;
        TH_CHECK(rc == WEFT_ERR_PEER_LOST, "rank %d: agree: %d (%s): %s", rank, rc, weft_strerror(rc),
                 weft_last_error());
    }
    sh->last[rank] = members_mask(c);
    int one = 1;
    TH_OK(weft_allreduce(WEFT_IN_PLACE, &one, 1, WEFT_INT32, WEFT_SUM, c));
    TH_CHECK(one == 3, "rank %d: sum %d over the last communicator", rank, one);
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_finalize());
    return 0;
}

static void run_during(const char *when)
{
    during_shared_t *sh = shared_alloc(sizeof(*sh));
    sh->when = when;
    int victim = when ? 0 : 3;
    th_result_t res = th_run(4, body_during, sh, 60, quiet_env);
    cr_assert_eq(res.timed_out, 0, "hung");
    cr_assert_eq(res.exit_code[victim], 128 + SIGKILL, "the victim exited with %d", res.exit_code[victim]);
    int ref = victim == 0 ? 1 : 0;
    for (int r = 0; r < 4; r++) {
        if (r == victim) continue;
        cr_assert_eq(res.exit_code[r], 0, "rank %d", r);
        cr_assert_eq(sh->first[r], sh->first[ref], "first shrink: rank %d got %#x, rank %d %#x", r, sh->first[r], ref,
                     sh->first[ref]);
        cr_assert_eq(sh->last[r], 0xfu & ~(1u << victim), "rank %d ended with %#x", r, sh->last[r]);
    }
    cr_log_info("%s: the first shrink gave %#x; %d shrink(s) to lose rank %d", when ? when : "non-leader dies",
                sh->first[ref], sh->rounds[ref], victim);
    munmap(sh, sizeof(*sh));
}

Test(ft, leader_dies_after_proposing_to_one_member, .timeout = 90)
{
    run_during("accept");
}

Test(ft, leader_dies_after_deciding_for_one_member, .timeout = 90)
{
    run_during("decide");
}

Test(ft, member_dies_as_the_shrink_begins, .timeout = 90)
{
    run_during(NULL);
}

/* ---- finalize with a dead peer ------------------------------------------ */
/* Rank 1 has a 4 MB send to rank 2 in flight (rendezvous: it never
 * completes once rank 2 is dead) and rank 2 dies. The survivors' finalize
 * must neither wait for that send nor for rank 2 in the closing barrier:
 * it returns WEFT_SUCCESS in well under the 20 s deadline. */
static int body_finalize(int rank, int size, void *arg)
{
    double *took = arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    (void)size;
    enum { BIG = 4 << 20 };
    char *big = calloc(BIG, 1);
    TH_OK(weft_comm_warmup(w));
    TH_OK(weft_barrier(w));
    if (rank == 2) {
        usleep(100 * 1000); /* rank 1's send is posted */
        die();
    }
    if (rank == 1) {
        weft_request_t r;
        TH_OK(weft_isend(big, BIG, WEFT_BYTE, 2, 7, w, &r));
        TH_OK(weft_request_free(&r));
        usleep(300 * 1000); /* rank 2 is dead, maybe not known yet */
    }
    double t0 = weft_wtime();
    int rc = weft_finalize();
    took[rank] = weft_wtime() - t0;
    TH_CHECK(rc == WEFT_SUCCESS, "rank %d: finalize: rc %d (%s): %s", rank, rc, weft_strerror(rc), weft_last_error());
    free(big);
    return 0;
}

Test(ft, finalize_with_a_dead_peer_returns_quickly, .timeout = 90)
{
    double *took = shared_alloc(4 * sizeof(double));
    const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_TIMEOUT=20", NULL};
    th_result_t res = th_run(4, body_finalize, took, 80, env);
    cr_assert_eq(res.timed_out, 0);
    cr_assert_eq(res.exit_code[2], 128 + SIGKILL);
    for (int r = 0; r < 4; r++)
        if (r != 2) {
            cr_expect_eq(res.exit_code[r], 0, "rank %d", r);
            cr_expect(took[r] < 3.0, "rank %d: finalize took %.2f s (deadline 20 s)", r, took[r]);
        }
    cr_log_info("finalize with a dead peer: %.0f / %.0f / %.0f ms (ranks 0, 1, 3)", took[0] * 1e3, took[1] * 1e3,
                took[3] * 1e3);
    munmap(took, 4 * sizeof(double));
}

/* ---- the context id's generation ----------------------------------------- */
/* A broadcast on comm A times out on rank 0 (rank 1 joins late); A is
 * freed; rank 1's late message arrives; B, created next, takes A's slot.
 * B's broadcasts must deliver B's data, not the late message of A (with the
 * same slot, collective sequence number and source it would match without
 * the generation). Binomial broadcast: one message from root to rank 0
 * (shared memory's would leave no message behind). */
static int body_generation(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    int me, n;
    weft_comm_t w = start(&me, &n), a = th_forced(w, "bcast", "binomial"), b;
    uint32_t a_ctx = a->context_id;
    char buf[64];
    if (rank == 0) {
        TH_OK(weft_comm_set_timeout(a, 0.3));
        memset(buf, 0, sizeof(buf));
        int rc = weft_bcast(buf, sizeof(buf), WEFT_BYTE, 1, a);
        TH_CHECK(rc == WEFT_ERR_TIMEOUT, "bcast on A: rc %d", rc);
    } else {
        usleep(800 * 1000); /* rank 0 gave up */
        snprintf(buf, sizeof(buf), "stale message of comm A");
        TH_OK(weft_bcast(buf, sizeof(buf), WEFT_BYTE, 1, a)); /* eager: done here, pending there */
    }
    TH_OK(weft_comm_free(&a));
    b = th_forced(w, "bcast", "binomial");
    TH_CHECK((b->context_id & WEFT_CTX_SLOT_MASK) == (a_ctx & WEFT_CTX_SLOT_MASK),
             "B did not reuse A's slot (%#x, %#x): the test proves nothing", b->context_id, a_ctx);
    TH_CHECK(b->context_id != a_ctx, "B has A's context id %#x", a_ctx);
    TH_OK(weft_comm_set_timeout(b, 5));
    for (int i = 0; i < 3; i++) {
        char want[64];
        snprintf(want, sizeof(want), "message %d of comm B", i);
        if (rank == 1) memcpy(buf, want, sizeof(want));
        TH_OK(weft_bcast(buf, sizeof(buf), WEFT_BYTE, 1, b));
        TH_CHECK(!strcmp(buf, want), "rank %d: bcast %d on B delivered \"%s\"", rank, i, buf);
    }
    TH_OK(weft_comm_free(&b));
    TH_OK(weft_finalize());
    return 0;
}

Test(ft, late_message_of_a_freed_comm_does_not_match_its_successor, .timeout = 60)
{
    th_result_t res = th_run(2, body_generation, NULL, 50, quiet_env);
    cr_assert_eq(res.failed, 0);
}

/* A revoked communicator's messages that arrived unreceived are dropped,
 * and a large (rendezvous) one must not be pulled from its sender to be
 * dropped: the sender's call may have failed and its buffer been freed
 * (here: made unreadable) since. Rank 1 sends 1 MiB on D; rank 0 sees it
 * arrive, revokes D (which drops it) and keeps progressing; then both
 * meet on the world communicator. */
#define DROP_BYTES ((size_t)1 << 20)
static int body_drop_unread(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    int me, n;
    weft_comm_t w = start(&me, &n), d;
    TH_OK(weft_comm_dup(w, WEFT_OPTIONS_NULL, &d));
    if (rank == 1) {
        char *buf = mmap(NULL, DROP_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        TH_CHECK(buf != MAP_FAILED, "mmap");
        memset(buf, 7, DROP_BYTES);
        weft_request_t r;
        TH_OK(weft_isend(buf, (int64_t)DROP_BYTES, WEFT_BYTE, 0, 5, d, &r));
        TH_CHECK(mprotect(buf, DROP_BYTES, PROT_NONE) == 0, "mprotect");
        TH_OK(weft_request_free(&r));
        TH_OK(weft_barrier(w)); /* rank 0 dropped it */
        TH_OK(weft_barrier(w));
        TH_CHECK(mprotect(buf, DROP_BYTES, PROT_READ | PROT_WRITE) == 0, "mprotect");
    } else {
        int flag = 0;
        double t0 = weft_wtime();
        while (!flag && weft_wtime() - t0 < 10)
            TH_OK(weft_iprobe(1, 5, d, &flag, NULL));
        TH_CHECK(flag, "rank 1's message never arrived");
        TH_OK(weft_comm_revoke(d));
        t0 = weft_wtime();
        while (weft_wtime() - t0 < 0.3)
            weft_progress();
        TH_OK(weft_barrier(w));
        TH_OK(weft_barrier(w));
    }
    TH_OK(weft_comm_free(&d));
    TH_OK(weft_finalize());
    return 0;
}

static void run_drop_unread(const char *const *env)
{
    th_result_t res = th_run(2, body_drop_unread, NULL, 40, env);
    cr_assert_eq(res.timed_out, 0);
    cr_assert_eq(res.failed, 0);
}

Test(ft, a_dropped_message_is_not_read_from_its_sender, .timeout = 60)
{
    run_drop_unread(quiet_env);
}

Test(ft, a_dropped_message_is_not_read_from_its_sender_over_tcp, .timeout = 60)
{
    static const char *const tcp_env[] = {"WEFT_LOG_LEVEL=error", "UCX_TLS=tcp,self", NULL};
    run_drop_unread(tcp_env);
}

/* ---- more than 1,024 communicators ---------------------------------------- */
/* A communicator takes one context slot (its node, leader and rail
 * communicators share it): 4,095 live communicators besides the world,
 * and the next one fails with a clear error. */
static int body_many(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    (void)rank;
    int me, n;
    weft_comm_t w = start(&me, &n);
    weft_comm_t *c = calloc(WEFT_MAX_CONTEXTS, sizeof(*c));
    for (int i = 0; i < WEFT_MAX_CONTEXTS - 1; i++)
        TH_OK(weft_comm_dup(w, WEFT_OPTIONS_NULL, &c[i]));
    int rc = weft_comm_dup(w, WEFT_OPTIONS_NULL, &c[WEFT_MAX_CONTEXTS - 1]);
    TH_CHECK(rc == WEFT_ERR_NO_MEMORY && strstr(weft_last_error(), "at most 4096 live communicators"),
             "communicator %d: rc %d: %s", WEFT_MAX_CONTEXTS, rc, weft_last_error());
    /* Each one works, and so does one using its derived (node) communicator. */
    int one = 1;
    TH_OK(weft_allreduce(WEFT_IN_PLACE, &one, 1, WEFT_INT32, WEFT_SUM, c[WEFT_MAX_CONTEXTS - 2]));
    TH_CHECK(one == n, "sum %d", one);
    for (int i = 0; i < WEFT_MAX_CONTEXTS - 1; i++)
        TH_OK(weft_comm_free(&c[i]));
    free(c);
    TH_OK(weft_finalize());
    return 0;
}

Test(ft, more_than_1024_live_communicators, .timeout = 120)
{
    th_result_t res = th_run(2, body_many, NULL, 110, quiet_env);
    cr_assert_eq(res.failed, 0);
}

/* ---- bad arguments ---------------------------------------------------------- */
Test(ft, bad_arguments)
{
    int flag;
    weft_comm_t s;
    cr_assert_eq(weft_comm_revoke(weft_comm_world()), WEFT_ERR_NOT_INITIALIZED);
    setenv("WEFT_BOOTSTRAP", "single", 1);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    cr_assert_eq(weft_init(NULL, NULL), WEFT_SUCCESS);
    cr_assert_eq(weft_comm_revoke(WEFT_COMM_NULL), WEFT_ERR_COMM);
    cr_assert_eq(weft_comm_is_revoked(weft_comm_world(), NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_comm_agree(WEFT_COMM_NULL, &flag), WEFT_ERR_COMM);
    cr_assert_eq(weft_comm_shrink(weft_comm_world(), NULL), WEFT_ERR_ARG);
    /* A singleton agrees with itself, and shrinks to itself. */
    flag = 0x6;
    cr_assert_eq(weft_comm_agree(weft_comm_world(), &flag), WEFT_SUCCESS);
    cr_assert_eq(flag, 0x6);
    cr_assert_eq(weft_comm_shrink(weft_comm_world(), &s), WEFT_SUCCESS);
    cr_assert_eq(weft_comm_free(&s), WEFT_SUCCESS);
    cr_assert_str_eq(weft_strerror(WEFT_ERR_REVOKED), "communicator revoked");
    cr_assert_eq(weft_finalize(), WEFT_SUCCESS);
}
