/* The schedule engine and the internal allgather: every rank count from
 * 1 to 9, several block sizes, concurrent schedules on one communicator
 * interleaved with user traffic that uses the same tag numbers. */
#include "coll/coll.h"
#include "harness.h"
#include "weft.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The engine's internals take no API lock: with the progress thread on
 * (WEFT_PROGRESS_THREAD), a test holds it around them as API calls do. */
#define LOCKED(expr)                                                                                                   \
    __extension__({                                                                                                    \
        int how_ = weft_api_enter();                                                                                   \
        __typeof__(expr) v_ = (expr);                                                                                  \
        weft_api_leave(&how_);                                                                                         \
        v_;                                                                                                            \
    })

static int body_allgather(int rank, int size, void *arg)
{
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    static const size_t blocks[] = {0, 1, 8, 1000, 100000};
    for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
        size_t block = blocks[b];
        char *send = malloc(block + 1), *recv = malloc((size_t)size * block + 1);
        th_fill(send, block, (unsigned)(rank * 31 + b));
        memset(recv, 0, (size_t)size * block);
        TH_OK(LOCKED(weft_coll_svc->allgather(w, send, recv, block)));
        for (int r = 0; r < size; r++) {
            size_t bad = 0;
            TH_CHECK(th_verify(recv + (size_t)r * block, block, (unsigned)(r * 31 + b), &bad),
                     "block %zu from rank %d: byte %zu differs", block, r, bad);
        }
        free(send);
        free(recv);
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(sched, allgather_bruck_1_to_9_ranks, .timeout = 120)
{
    for (int n = 1; n <= 9; n++) {
        th_result_t res = th_run(n, body_allgather, NULL, 60, NULL);
        cr_assert_eq(res.failed, 0, "%d ranks", n);
    }
}

#define NCONC 6
static int body_concurrent(int rank, int size, void *arg)
{
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    int64_t send[NCONC], recv[NCONC][16];
    weft_request_t reqs[NCONC], ureq[2];
    /* User traffic with tags equal to the collective tag numbers. */
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int64_t uout = 1000 + rank, uin = -1;
    TH_OK(weft_irecv(&uin, 1, WEFT_INT64, left, 0, w, &ureq[0]));
    for (int i = 0; i < NCONC; i++) {
        send[i] = rank * 100 + i;
        int how = weft_api_enter();
        weft_sched_t *s = weft_sched_create(w, "allgather_bruck");
        TH_CHECK(s, "schedule");
        TH_OK(weft_coll_allgather_bruck_build(s, &send[i], recv[i], sizeof(int64_t)));
        TH_OK(weft_sched_start(s, &reqs[i]));
        weft_api_leave(&how);
        if (i == NCONC / 2) TH_OK(weft_isend(&uout, 1, WEFT_INT64, right, 0, w, &ureq[1]));
    }
    /* Complete them in reverse order. */
    for (int i = NCONC - 1; i >= 0; i--)
        TH_OK(weft_wait(&reqs[i], NULL));
    TH_OK(weft_waitall(2, ureq, NULL));
    TH_CHECK(uin == 1000 + left, "user message %lld", (long long)uin);
    for (int i = 0; i < NCONC; i++)
        for (int r = 0; r < size; r++)
            TH_CHECK(recv[i][r] == r * 100 + i, "collective %d block %d: %lld", i, r, (long long)recv[i][r]);
    TH_OK(weft_finalize());
    return 0;
}

Test(sched, concurrent_schedules_and_user_traffic, .timeout = 60)
{
    th_result_t res = th_run(5, body_concurrent, NULL, 50, NULL);
    cr_assert_eq(res.failed, 0);
}

/* A rank that never joins: the others' collective times out naming a rank. */
static int body_stuck(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    TH_OK(weft_comm_set_timeout(w, 1.0));
    int64_t v = rank, all[4];
    if (rank == 3) {
        usleep(2500 * 1000);
    } else {
        int rc = LOCKED(weft_coll_svc->allgather(w, &v, all, sizeof(v)));
        TH_CHECK(rc == WEFT_ERR_TIMEOUT, "rc %d", rc);
        TH_CHECK(strstr(weft_last_error(), "timed out after 1 s waiting for rank"), "%s", weft_last_error());
    }
    weft_finalize();
    return 0;
}

Test(sched, missing_member_times_out_naming_a_rank, .timeout = 60)
{
    th_result_t res = th_run(4, body_stuck, NULL, 40, NULL);
    cr_assert_eq(res.timed_out, 0);
    for (int r = 0; r < 3; r++)
        cr_expect_eq(res.exit_code[r], 0, "rank %d", r);
}

/* A schedule's own deadline (weft_sched_deadline, what stream-ordered GPU
 * calls get): it fails with WEFT_ERR_TIMEOUT when only tested, and when its
 * request was released, at the next progress; its watch hears of it. */
static int never(weft_sched_t *s, void *arg)
{
    (void)arg;
    weft_sched_waiting(s, 1, "a flag that never comes");
    return 0;
}

static void heard(void *arg, int rc)
{
    *(int *)arg = rc;
}

static const weft_sched_watch_t hearing = {.failed = heard};

static weft_sched_t *stuck_sched(weft_comm_t w, int *rc_heard, double timeout_s)
{
    weft_sched_t *s = weft_sched_create(w, "stuck");
    if (!s) return NULL;
    weft_sched_watch(s, &hearing, rc_heard);
    if (weft_sched_poll(s, never, NULL)) return NULL;
    weft_sched_deadline(s, timeout_s);
    return s;
}

static int body_own_deadline(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    int heard_rc = 0, flag = 0;
    weft_request_t req;
    int how = weft_api_enter();
    weft_sched_t *s = stuck_sched(w, &heard_rc, 0.3);
    TH_CHECK(s, "schedule");
    double t0 = weft_wtime();
    TH_OK(weft_sched_start(s, &req));
    weft_api_leave(&how);
    int rc = WEFT_SUCCESS;
    while (!flag && weft_wtime() - t0 < 10)
        rc = weft_test(&req, &flag, NULL);
    double dt = weft_wtime() - t0;
    TH_CHECK(flag && rc == WEFT_ERR_TIMEOUT, "tested only: flag %d rc %d after %.2f s", flag, rc, dt);
    TH_CHECK(dt >= 0.3 && dt < 2, "tested only: ended after %.2f s, deadline 0.3 s", dt);
    TH_CHECK(heard_rc == WEFT_ERR_TIMEOUT, "the watch heard %d", heard_rc);
    TH_CHECK(strstr(weft_last_error(), "a flag that never comes") && strstr(weft_last_error(), "deadline"), "%s",
             weft_last_error());
    /* released at once: a later progress ends it all the same */
    heard_rc = 0;
    how = weft_api_enter();
    s = stuck_sched(w, &heard_rc, 0.3);
    TH_CHECK(s, "schedule");
    t0 = weft_wtime();
    TH_OK(weft_sched_start(s, &req));
    weft_api_leave(&how);
    TH_OK(weft_request_free(&req));
    int y = 0;
    weft_request_t other; /* a receive nobody sends to: testing it polls */
    TH_OK(weft_irecv(&y, 1, WEFT_INT32, rank, 7, w, &other));
    while (!heard_rc && weft_wtime() - t0 < 10)
        TH_OK(weft_test(&other, &flag, NULL));
    dt = weft_wtime() - t0;
    TH_OK(weft_request_cancel(&other));
    TH_CHECK(weft_wait(&other, NULL) == WEFT_ERR_CANCELED, "the receive was not canceled");
    TH_CHECK(heard_rc == WEFT_ERR_TIMEOUT && dt >= 0.3 && dt < 2, "released: the watch heard %d after %.2f s", heard_rc,
             dt);
    TH_OK(weft_finalize());
    return 0;
}

Test(sched, own_deadline_without_a_wait, .timeout = 60)
{
    th_result_t res = th_run(2, body_own_deadline, NULL, 40, NULL);
    cr_assert_eq(res.failed, 0);
}

/* A collective that fails while its send of scratch memory is still in
 * flight (rendezvous: the peer reads the buffer when it matches, later):
 * the scratch outlives the failure until the send is done, so the peer
 * gets the bytes that were sent, not what the heap put there since. */
#define LATE_BYTES (1u << 20)
#define LATE_SEED 77u

static int body_late_reader(int rank, int size, void *arg)
{
    (void)size;
    th_board_t *board = arg;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    char go = 1, ack = 0;
    if (rank == 0) {
        int heard_rc = 0;
        weft_request_t req;
        int how = weft_api_enter();
        weft_sched_t *s = weft_sched_create(w, "late");
        TH_CHECK(s, "schedule");
        weft_sched_watch(s, &hearing, &heard_rc);
        char *scratch = weft_sched_scratch(s, LATE_BYTES);
        TH_CHECK(scratch, "scratch");
        th_fill(scratch, LATE_BYTES, LATE_SEED);
        TH_OK(weft_sched_send(s, scratch, LATE_BYTES, 1));
        TH_OK(weft_sched_poll(s, never, NULL));
        weft_sched_deadline(s, 0.3);
        TH_OK(weft_sched_start(s, &req));
        weft_api_leave(&how);
        int rc = weft_wait(&req, NULL);
        TH_CHECK(rc == WEFT_ERR_TIMEOUT, "rc %d", rc);
        /* the heap hands the freed scratch out again, and it is written */
        for (int i = 0; i < 8; i++) {
            char *p = malloc(LATE_BYTES);
            TH_CHECK(p, "malloc");
            memset(p, 0xee, LATE_BYTES);
            free(p);
        }
        char *again = malloc(LATE_BYTES);
        memset(again, 0xee, LATE_BYTES);
        th_board_post(board, 0, &go, 1);
        TH_OK(weft_recv(&ack, 1, WEFT_BYTE, 1, 5, w, NULL)); /* progress while rank 1 reads */
        free(again);
        TH_CHECK(ack == 1, "rank 1 got other bytes than were sent");
    } else {
        TH_CHECK(th_board_wait(board, 0, &go, 1, 20) == 0, "rank 0 never failed its collective");
        char *buf = malloc(LATE_BYTES);
        weft_request_t req;
        int how = weft_api_enter();
        weft_sched_t *s = weft_sched_create(w, "late");
        TH_CHECK(s, "schedule");
        TH_OK(weft_sched_recv(s, buf, LATE_BYTES, 0));
        TH_OK(weft_sched_start(s, &req));
        weft_api_leave(&how);
        int rc = weft_wait(&req, NULL);
        size_t bad = 0;
        ack = rc == WEFT_SUCCESS && th_verify(buf, LATE_BYTES, LATE_SEED, &bad);
        if (!ack) fprintf(stderr, "rank 1: rc %d, byte %zu differs\n", rc, bad);
        TH_OK(weft_send(&ack, 1, WEFT_BYTE, 0, 5, w));
        free(buf);
        TH_CHECK(ack, "received other bytes than were sent");
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(sched, failed_schedule_keeps_scratch_for_sends_in_flight, .timeout = 60)
{
    th_result_t res = th_run_with_board(2, body_late_reader, 40);
    cr_assert_eq(res.timed_out, 0);
    cr_assert_eq(res.failed, 0);
}
