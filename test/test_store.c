/* The env bootstrap and its TCP store (src/bootstrap/env*.c), tested through
 * the internal API: allgather correctness, deadlines that name the missing
 * ranks, ranks that die, strangers on the store's port, bad variables.
 *
 * Multi-rank tests fork ranks with test/harness.h; a child reports with
 * TH_CHECK / TH_OK and only the parent uses Criterion assertions. */
#include "bootstrap/bootstrap.h"
#include "harness.h"
#include "weft_internal.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* The store's wire format, repeated here on purpose: the stranger tests
 * craft messages a real client would never send. Keep in step with env_wire.h. */
#define WIRE_MAGIC   0x57465453u
#define WIRE_VERSION 1u
#define WIRE_HDR     40
enum { W_HELLO = 1, W_WELCOME = 2, W_CONTRIB = 3, W_RESULT = 4, W_ERROR = 5, W_BYE = 6 };

static void wire_pack(uint8_t *b, unsigned kind, uint32_t rank, uint32_t size, uint64_t seq, uint64_t arg, uint64_t len)
{
    uint32_t v32;
    uint16_t v16;
    uint64_t v64;
    v32 = htobe32(WIRE_MAGIC);
    memcpy(b, &v32, 4);
    v16 = htobe16((uint16_t)WIRE_VERSION);
    memcpy(b + 4, &v16, 2);
    v16 = htobe16((uint16_t)kind);
    memcpy(b + 6, &v16, 2);
    v32 = htobe32(rank);
    memcpy(b + 8, &v32, 4);
    v32 = htobe32(size);
    memcpy(b + 12, &v32, 4);
    v64 = htobe64(seq);
    memcpy(b + 16, &v64, 8);
    v64 = htobe64(arg);
    memcpy(b + 24, &v64, 8);
    v64 = htobe64(len);
    memcpy(b + 32, &v64, 8);
}

static unsigned seed_of(int round, int rank)
{
    return (unsigned)(round * 1000 + rank + 1);
}

static int master_port(void)
{
    const char *p = getenv("MASTER_PORT");
    return p ? atoi(p) : -1;
}

/* One allgather of `len` bytes per rank with the harness pattern, checked. */
static void check_round(weft_bootstrap_t *bs, int round, size_t len, double deadline)
{
    uint8_t *send = malloc(len ? len : 1);
    uint8_t *recv = malloc(len * (size_t)bs->size + 1);
    size_t bad = 0;

    TH_CHECK(send && recv, "out of memory");
    th_fill(send, len, seed_of(round, bs->rank));
    memset(recv, 0xEE, len * (size_t)bs->size + 1);
    TH_OK(bs->allgather(bs, send, recv, len, deadline));
    for (int r = 0; r < bs->size; r++)
        TH_CHECK(th_verify(recv + (size_t)r * len, len, seed_of(round, r), &bad),
                 "rank %d: round %d (%zu bytes): rank %d's block differs at byte %zu", bs->rank, round, len, r, bad);
    TH_CHECK(recv[len * (size_t)bs->size] == 0xEE, "rank %d: round %d wrote past the receive buffer", bs->rank, round);
    free(send);
    free(recv);
}

static void boot(weft_bootstrap_t *bs, double timeout_s)
{
    memset(bs, 0, sizeof(*bs));
    TH_OK(weft_config_load());
    TH_OK(weft_bootstrap_env_init(bs, weft_wtime() + timeout_s));
}

/* ------------------------------------------------------------------ */
/* Correctness                                                         */
/* ------------------------------------------------------------------ */

static const size_t round_lens[] = {0, 1, 3, 8, 4096, 1 << 20, 17, 0, 65537, 1};
#define NROUNDS ((int)(sizeof(round_lens) / sizeof(round_lens[0])))

static int body_allgather(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    (void)arg;
    boot(&bs, 20);
    TH_CHECK(strcmp(bs.name, "env") == 0, "name %s", bs.name);
    TH_CHECK(bs.rank == rank && bs.size == size, "rank %d/%d, expected %d/%d", bs.rank, bs.size, rank, size);
    TH_CHECK(bs.local_rank == rank && bs.local_size == size, "local %d/%d", bs.local_rank, bs.local_size);
    for (int i = 0; i < NROUNDS; i++)
        check_round(&bs, i, round_lens[i], weft_wtime() + 20);
    /* The generic helpers on top of the vtable work too. */
    TH_OK(weft_bootstrap_barrier(&bs, weft_wtime() + 20));
    double t0 = weft_wtime();
    bs.finalize(&bs, 1, weft_wtime() + 10);
    TH_CHECK(weft_wtime() - t0 < 5, "graceful finalize took %.1f s", weft_wtime() - t0);
    return 0;
}

static void run_allgather(int n)
{
    th_result_t res = th_run(n, body_allgather, NULL, 50, NULL);
    cr_assert(!res.timed_out, "%d ranks: the harness had to kill ranks", n);
    cr_assert_eq(res.failed, 0, "%d ranks: %d ranks failed", n, res.failed);
}

Test(store, allgather_1_rank, .timeout = 60)
{
    run_allgather(1);
}
Test(store, allgather_2_ranks, .timeout = 60)
{
    run_allgather(2);
}
Test(store, allgather_5_ranks, .timeout = 60)
{
    run_allgather(5);
}
Test(store, allgather_8_ranks, .timeout = 60)
{
    run_allgather(8);
}

/* Finalize, then init again on the same port at once (weft_init may be
 * called again after weft_finalize): a rank that reaches rank 0's previous
 * store before it closes is told to retry, and no port stays taken. */
static int body_reinit(int rank, int size, void *arg)
{
    (void)rank, (void)size, (void)arg;
    for (int k = 0; k < 4; k++) {
        weft_bootstrap_t bs;
        boot(&bs, 20);
        check_round(&bs, k, (size_t)(64 + k), weft_wtime() + 20);
        bs.finalize(&bs, 1, weft_wtime() + 10);
    }
    return 0;
}

Test(store, reinit_same_port, .timeout = 60)
{
    th_result_t res = th_run(4, body_reinit, NULL, 40, NULL);
    cr_assert(!res.timed_out);
    cr_assert_eq(res.failed, 0, "%d ranks failed", res.failed);
}

/* Many ranks, small messages: the store has no small fixed rank limit. */
static int body_many(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    (void)rank, (void)size, (void)arg;
    boot(&bs, 40);
    for (int i = 0; i < 4; i++)
        check_round(&bs, i, (size_t)(i * 13 + 5), weft_wtime() + 40);
    bs.finalize(&bs, 1, weft_wtime() + 20);
    return 0;
}

Test(store, allgather_48_ranks, .timeout = 60)
{
    th_result_t res = th_run(48, body_many, NULL, 55, NULL);
    cr_assert(!res.timed_out);
    cr_assert_eq(res.failed, 0, "%d ranks failed", res.failed);
}

/* Every rank must pass the same length; a mismatch fails the round for all,
 * naming the rank, and the next (consistent) round works. */
static int body_len_mismatch(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    uint8_t send[16] = {0}, recv[16 * 3];
    (void)size, (void)arg;
    boot(&bs, 20);
    int rc = bs.allgather(&bs, send, recv, rank == 1 ? 8 : 16, weft_wtime() + 20);
    TH_CHECK(rc == WEFT_ERR_ARG, "rank %d: got %d (%s)", rank, rc, weft_last_error());
    TH_CHECK(strstr(weft_last_error(), "rank 1 passed 8 bytes") != NULL, "rank %d: %s", rank, weft_last_error());
    check_round(&bs, 1, 16, weft_wtime() + 20);
    bs.finalize(&bs, 1, weft_wtime() + 10);
    return 0;
}

Test(store, length_mismatch, .timeout = 60)
{
    th_result_t res = th_run(3, body_len_mismatch, NULL, 30, NULL);
    cr_assert(!res.timed_out);
    cr_assert_eq(res.failed, 0, "%d ranks failed", res.failed);
}

/* ------------------------------------------------------------------ */
/* Deadlines: missing ranks, dead ranks                                */
/* ------------------------------------------------------------------ */

#define MISSING_DEADLINE 3.0
/* The store answers at the deadline; clients wait at most 1 s more. */
#define MISSING_SLACK 2.5

typedef struct missing_arg {
    int missing[4]; /* -1 terminated */
    const char *expect;
} missing_arg_t;

static int is_missing(const missing_arg_t *m, int rank)
{
    for (int i = 0; m->missing[i] >= 0; i++)
        if (m->missing[i] == rank) return 1;
    return 0;
}

static int body_missing(int rank, int size, void *arg)
{
    const missing_arg_t *m = arg;
    weft_bootstrap_t bs;
    uint64_t v = (uint64_t)rank, out[16];
    (void)size;

    if (is_missing(m, rank)) { /* never calls init */
        usleep((useconds_t)((MISSING_DEADLINE + MISSING_SLACK + 1) * 1e6));
        return 0;
    }
    memset(&bs, 0, sizeof(bs));
    double t0 = weft_wtime(), deadline = t0 + MISSING_DEADLINE;
    int rc = weft_bootstrap_env_init(&bs, deadline);
    if (rc == WEFT_SUCCESS) {
        rc = bs.allgather(&bs, &v, out, sizeof(v), deadline);
        bs.finalize(&bs, 0, 0);
    }
    double took = weft_wtime() - t0;
    TH_CHECK(rc == WEFT_ERR_TIMEOUT, "rank %d: got %d (%s): %s", rank, rc, weft_strerror(rc), weft_last_error());
    TH_CHECK(took >= MISSING_DEADLINE - 0.5 && took <= MISSING_DEADLINE + MISSING_SLACK,
             "rank %d: failed after %.2f s, deadline %.1f s", rank, took, MISSING_DEADLINE);
    TH_CHECK(strstr(weft_last_error(), m->expect) != NULL, "rank %d: message lacks \"%s\": %s", rank, m->expect,
             weft_last_error());
    return 0;
}

static void run_missing(int n, const missing_arg_t *m)
{
    th_result_t res = th_run(n, body_missing, (void *)m, 30, NULL);
    cr_assert(!res.timed_out);
    cr_assert_eq(res.failed, 0, "%d ranks failed", res.failed);
}

Test(store, missing_rank_is_named, .timeout = 60)
{
    missing_arg_t m = {.missing = {3, -1}, .expect = "rank 3 never arrived (1 of 5 missing) at the store 127.0.0.1:"};
    run_missing(5, &m);
}

Test(store, missing_ranks_are_named, .timeout = 60)
{
    missing_arg_t m = {.missing = {2, 4, 5, -1},
                       .expect = "ranks 2, 4-5 never arrived (3 of 7 missing) at the store 127.0.0.1:"};
    run_missing(7, &m);
}

Test(store, missing_rank_0, .timeout = 60)
{
    missing_arg_t m = {.missing = {0, -1}, .expect = "rank 0's store at 127.0.0.1:"};
    run_missing(3, &m);
}

/* A rank that joined and then stops contributing is named as well. */
static int body_behind(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    (void)size, (void)arg;
    boot(&bs, 20);
    check_round(&bs, 0, 8, weft_wtime() + 20);
    if (rank == 2) {
        usleep((useconds_t)((MISSING_DEADLINE + MISSING_SLACK + 1) * 1e6));
        bs.finalize(&bs, 0, 0);
        return 0;
    }
    uint64_t v = 1, out[4];
    double t0 = weft_wtime();
    int rc = bs.allgather(&bs, &v, out, sizeof(v), t0 + MISSING_DEADLINE);
    double took = weft_wtime() - t0;
    TH_CHECK(rc == WEFT_ERR_TIMEOUT, "rank %d: got %d: %s", rank, rc, weft_last_error());
    TH_CHECK(took <= MISSING_DEADLINE + MISSING_SLACK, "rank %d: took %.2f s", rank, took);
    TH_CHECK(strstr(weft_last_error(), "rank 2 is connected but did not reach this round (1 of 4 missing)"),
             "rank %d: %s", rank, weft_last_error());
    bs.finalize(&bs, 0, 0);
    return 0;
}

Test(store, rank_behind_is_named, .timeout = 60)
{
    th_result_t res = th_run(4, body_behind, NULL, 30, NULL);
    cr_assert(!res.timed_out);
    cr_assert_eq(res.failed, 0, "%d ranks failed", res.failed);
}

typedef struct death_arg {
    int victim;
    int victim_delay_ms; /* victim dies this long after the good rounds */
    int others_delay_ms; /* the others start the next round this long after */
    const char *expect;
} death_arg_t;

static int body_death(int rank, int size, void *arg)
{
    const death_arg_t *d = arg;
    weft_bootstrap_t bs;
    uint64_t v = (uint64_t)rank, out[8];
    (void)size;

    boot(&bs, 20);
    for (int i = 0; i < 3; i++)
        check_round(&bs, i, 100, weft_wtime() + 20);
    if (rank == d->victim) {
        usleep((useconds_t)d->victim_delay_ms * 1000);
        _exit(0); /* no goodbye: the store sees the connection close */
    }
    usleep((useconds_t)d->others_delay_ms * 1000);
    double t0 = weft_wtime();
    int rc = bs.allgather(&bs, &v, out, sizeof(v), t0 + 15);
    double took = weft_wtime() - t0;
    TH_CHECK(rc == WEFT_ERR_PEER_LOST, "rank %d: got %d (%s): %s", rank, rc, weft_strerror(rc), weft_last_error());
    TH_CHECK(took < 5, "rank %d: took %.2f s to notice (deadline 15 s)", rank, took);
    TH_CHECK(strstr(weft_last_error(), d->expect), "rank %d: message lacks \"%s\": %s", rank, d->expect,
             weft_last_error());
    /* Later rounds fail at once too. */
    t0 = weft_wtime();
    rc = bs.allgather(&bs, &v, out, sizeof(v), t0 + 15);
    TH_CHECK(rc == WEFT_ERR_PEER_LOST && weft_wtime() - t0 < 5, "rank %d: next round: %d after %.2f s", rank, rc,
             weft_wtime() - t0);
    bs.finalize(&bs, 0, 0);
    return 0;
}

static void run_death(int n, const death_arg_t *d)
{
    th_result_t res = th_run(n, body_death, (void *)d, 30, NULL);
    cr_assert(!res.timed_out);
    cr_assert_eq(res.failed, 0, "%d ranks failed", res.failed);
}

Test(store, rank_dies_during_round, .timeout = 60)
{
    death_arg_t d = {.victim = 2,
                     .victim_delay_ms = 800,
                     .others_delay_ms = 0,
                     .expect = "rank 2 disconnected"}; /* closed or reset: the exit races the store's reads */
    run_death(4, &d);
}

Test(store, rank_dies_between_rounds, .timeout = 60)
{
    death_arg_t d = {.victim = 1,
                     .victim_delay_ms = 0,
                     .others_delay_ms = 600,
                     .expect = "rank 1 disconnected"}; /* closed or reset: the exit races the store's reads */
    run_death(4, &d);
}

Test(store, rank_0_dies, .timeout = 60)
{
    death_arg_t d = {.victim = 0,
                     .victim_delay_ms = 300,
                     .others_delay_ms = 0,
                     .expect = "the connection to rank 0's store at 127.0.0.1:"};
    run_death(3, &d);
}

/* Liveness: the store announces a rank that dies (a LOST notice) to every
 * other rank. Between rounds poll_lost takes it without blocking; during a
 * round the client takes it on the way to the round's failure, which it
 * precedes. Rank 0 dying shows as its store's connection closing. */
typedef struct lost_arg {
    int victim;
    int during_round; /* 1: the others are waiting in a round when it dies */
    const char *expect;
} lost_arg_t;

static int body_lost_notice(int rank, int size, void *arg)
{
    const lost_arg_t *l = arg;
    weft_bootstrap_t bs;
    uint64_t v = (uint64_t)rank, out[8];

    TH_OK(weft_liveness_init(size));
    boot(&bs, 20);
    TH_CHECK(bs.poll_lost, "the env bootstrap has no poll_lost");
    check_round(&bs, 0, 8, weft_wtime() + 20);
    if (rank == l->victim) {
        usleep(300 * 1000);
        _exit(0); /* no goodbye */
    }
    double t0 = weft_wtime();
    if (l->during_round) {
        int rc = bs.allgather(&bs, &v, out, sizeof(v), t0 + 15);
        TH_CHECK(rc == WEFT_ERR_PEER_LOST, "rank %d: got %d: %s", rank, rc, weft_last_error());
    } else {
        while (!weft_rank_lost_why(l->victim) && weft_wtime() - t0 < 5) {
            bs.poll_lost(&bs, 0);
            usleep(1000);
        }
    }
    double took = weft_wtime() - t0;
    const char *why = weft_rank_lost_why(l->victim);
    TH_CHECK(why, "rank %d: rank %d not recorded lost after %.2f s", rank, l->victim, took);
    TH_CHECK(took < 2, "rank %d: took %.2f s", rank, took);
    TH_CHECK(strstr(why, l->expect), "rank %d: \"%s\" lacks \"%s\"", rank, why, l->expect);
    TH_CHECK(weft_lost_count == 1, "rank %d: %u ranks recorded lost", rank, weft_lost_count);
    if (!l->during_round) { /* the next round fails as before */
        int rc = bs.allgather(&bs, &v, out, sizeof(v), weft_wtime() + 15);
        TH_CHECK(rc == WEFT_ERR_PEER_LOST, "rank %d: next round: %d: %s", rank, rc, weft_last_error());
    }
    bs.finalize(&bs, 0, 0);
    weft_liveness_finalize();
    return 0;
}

static void run_lost_notice(int n, const lost_arg_t *l)
{
    th_result_t res = th_run(n, body_lost_notice, (void *)l, 30, NULL);
    cr_assert(!res.timed_out);
    for (int r = 0; r < n; r++)
        if (r != l->victim) cr_expect_eq(res.exit_code[r], 0, "rank %d", r);
}

Test(store, lost_notice_between_rounds, .timeout = 60)
{
    lost_arg_t l = {.victim = 2, .during_round = 0, .expect = "disconnected"};
    run_lost_notice(4, &l);
}

Test(store, lost_notice_during_round, .timeout = 60)
{
    lost_arg_t l = {.victim = 1, .during_round = 1, .expect = "disconnected"};
    run_lost_notice(4, &l);
}

Test(store, lost_store_host, .timeout = 60)
{
    lost_arg_t l = {.victim = 0, .during_round = 0, .expect = "closed the connection without notice"};
    run_lost_notice(3, &l);
}

/* Rank 0 gives up and closes its store while the others are between
 * rounds: their next round fails at once and says so. */
static int body_store_closes(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    uint64_t v = 1, out[4];
    (void)size, (void)arg;
    boot(&bs, 20);
    check_round(&bs, 0, 8, weft_wtime() + 20);
    if (rank == 0) {
        bs.finalize(&bs, 0, 0);
        usleep(1000 * 1000); /* alive: the notice, not a dead process, explains */
        return 0;
    }
    usleep(300 * 1000);
    double t0 = weft_wtime();
    int rc = bs.allgather(&bs, &v, out, sizeof(v), t0 + 15);
    TH_CHECK(rc == WEFT_ERR_PEER_LOST && weft_wtime() - t0 < 2, "rank %d: %d after %.2f s: %s", rank, rc,
             weft_wtime() - t0, weft_last_error());
    TH_CHECK(strstr(weft_last_error(), "rank 0 closed its store at 127.0.0.1:"), "rank %d: %s", rank,
             weft_last_error());
    bs.finalize(&bs, 1, weft_wtime() + 1);
    return 0;
}

Test(store, store_closes_early, .timeout = 60)
{
    th_result_t res = th_run(3, body_store_closes, NULL, 30, NULL);
    cr_assert(!res.timed_out);
    cr_assert_eq(res.failed, 0, "%d ranks failed", res.failed);
}

/* A graceful finalize on rank 0 does not wait past its deadline for a rank
 * that never says goodbye. */
static int body_slow_bye(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    (void)size, (void)arg;
    boot(&bs, 20);
    check_round(&bs, 0, 4, weft_wtime() + 20);
    if (rank == 1) {
        usleep(3000 * 1000);
        bs.finalize(&bs, 1, weft_wtime() + 1);
        return 0;
    }
    double t0 = weft_wtime();
    bs.finalize(&bs, 1, t0 + 0.5);
    double took = weft_wtime() - t0;
    TH_CHECK(took >= 0.45 && took < 2, "rank 0: graceful finalize took %.2f s, deadline 0.5 s", took);
    return 0;
}

Test(store, finalize_deadline, .timeout = 60)
{
    th_result_t res = th_run(2, body_slow_bye, NULL, 30, NULL);
    cr_assert(!res.timed_out);
    cr_assert_eq(res.failed, 0, "%d ranks failed", res.failed);
}

/* ------------------------------------------------------------------ */
/* Strangers on the store's port                                       */
/* ------------------------------------------------------------------ */

#define REAL_RANKS 4
static const char *const stranger_env[] = {"WORLD_SIZE=4", "LOCAL_WORLD_SIZE=4", NULL};

enum {
    S_GARBAGE,
    S_HUGE_LEN,
    S_HUGE_HELLO,
    S_BAD_RANK,
    S_BAD_SIZE,
    S_BAD_VERSION,
    S_HALF_HEADER,
    S_IDLE_MANY,
    S_DUPLICATE
};

static int connect_store(double deadline)
{
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)master_port()), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    while (weft_wtime() < deadline) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) return fd;
        if (fd >= 0) close(fd);
        usleep(5000);
    }
    return -1;
}

/* Reads until the store closes the connection; returns 1 when it did within
 * timeout_s. The first bytes it sent land in reply. */
static int closed_by_store(int fd, double timeout_s, uint8_t *reply, size_t cap, size_t *got)
{
    double deadline = weft_wtime() + timeout_s;
    uint8_t junk[256];
    *got = 0;
    while (weft_wtime() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        uint8_t *dst = *got < cap ? reply + *got : junk;
        size_t n = *got < cap ? cap - *got : sizeof(junk);
        ssize_t k = recv(fd, dst, n, 0);
        if (k == 0 || (k < 0 && errno == ECONNRESET)) return 1;
        if (k < 0) return 0;
        if (*got < cap) *got += (size_t)k;
    }
    return 0;
}

/* Expects an ERROR reply carrying `status` and `text`, then the close. */
static int expect_refusal(int fd, int status, const char *text)
{
    uint8_t reply[1024];
    size_t got;
    TH_CHECK(closed_by_store(fd, 5, reply, sizeof(reply) - 1, &got), "stranger: the store kept the connection open");
    TH_CHECK(got > WIRE_HDR, "stranger: no ERROR before the close (%zu bytes)", got);
    reply[got] = '\0';
    uint16_t kind;
    uint64_t arg;
    memcpy(&kind, reply + 6, 2);
    memcpy(&arg, reply + 24, 8);
    TH_CHECK(be16toh(kind) == W_ERROR && (int64_t)be64toh(arg) == status, "stranger: reply kind %u status %lld",
             be16toh(kind), (long long)(int64_t)be64toh(arg));
    TH_CHECK(strstr((char *)reply + WIRE_HDR, text), "stranger: reply \"%s\" lacks \"%s\"", (char *)reply + WIRE_HDR,
             text);
    return 0;
}

static int stranger(int mode)
{
    uint8_t b[4096];
    size_t got;
    int fd;

    signal(SIGPIPE, SIG_IGN); /* the store may hang up while we still send */
    if (mode == S_DUPLICATE) {
        /* A second process claiming rank 1, once the real one is in. */
        weft_bootstrap_t bs;
        memset(&bs, 0, sizeof(bs));
        usleep(600 * 1000);
        setenv("RANK", "1", 1);
        unsetenv("LOCAL_RANK");
        int rc = weft_bootstrap_env_init(&bs, weft_wtime() + 5);
        TH_CHECK(rc == WEFT_ERR_ARG, "impostor: got %d: %s", rc, weft_last_error());
        TH_CHECK(strstr(weft_last_error(), "rank 1 is already connected"), "impostor: %s", weft_last_error());
        return 0;
    }
    if (mode == S_IDLE_MANY) {
        int fds[40];
        for (int i = 0; i < 40; i++)
            TH_CHECK((fds[i] = connect_store(weft_wtime() + 10)) >= 0, "connect");
        usleep(1500 * 1000);
        for (int i = 0; i < 40; i++)
            close(fds[i]);
        return 0;
    }
    fd = connect_store(weft_wtime() + 10);
    TH_CHECK(fd >= 0, "stranger: cannot connect to the store");
    switch (mode) {
    case S_GARBAGE:
        srand(7);
        for (size_t i = 0; i < sizeof(b); i++)
            b[i] = (uint8_t)rand();
        b[0] = 'G'; /* not the magic */
        (void)send(fd, b, sizeof(b), MSG_NOSIGNAL);
        TH_CHECK(closed_by_store(fd, 5, b, 0, &got), "stranger: garbage did not get us disconnected");
        break;
    case S_HUGE_LEN: /* a well-formed header announcing 1 TiB */
        wire_pack(b, W_CONTRIB, 0, REAL_RANKS, 0, 0, (uint64_t)1 << 40);
        (void)send(fd, b, WIRE_HDR, MSG_NOSIGNAL);
        TH_CHECK(closed_by_store(fd, 5, b, 0, &got), "stranger: a huge length did not get us disconnected");
        break;
    case S_HUGE_HELLO:
        wire_pack(b, W_HELLO, 0, REAL_RANKS, 0, 0, (uint64_t)1 << 30);
        (void)send(fd, b, WIRE_HDR, MSG_NOSIGNAL);
        TH_CHECK(closed_by_store(fd, 5, b, 0, &got), "stranger: a huge HELLO did not get us disconnected");
        break;
    case S_BAD_RANK:
        wire_pack(b, W_HELLO, 99, REAL_RANKS, 0, 0, 0);
        (void)send(fd, b, WIRE_HDR, MSG_NOSIGNAL);
        expect_refusal(fd, WEFT_ERR_ARG, "rank 99 is out of range for WORLD_SIZE=4");
        break;
    case S_BAD_SIZE:
        wire_pack(b, W_HELLO, 1, 7, 0, 0, 0);
        (void)send(fd, b, WIRE_HDR, MSG_NOSIGNAL);
        expect_refusal(fd, WEFT_ERR_ARG, "says WORLD_SIZE=7");
        break;
    case S_BAD_VERSION:
        wire_pack(b, W_HELLO, 1, REAL_RANKS, 0, 0, 0);
        b[5] = 9; /* version 9 */
        (void)send(fd, b, WIRE_HDR, MSG_NOSIGNAL);
        expect_refusal(fd, WEFT_ERR_BOOTSTRAP, "protocol version 9");
        break;
    case S_HALF_HEADER: /* then silence: must not stall anyone */
        wire_pack(b, W_HELLO, 1, REAL_RANKS, 0, 0, 0);
        (void)send(fd, b, 10, MSG_NOSIGNAL);
        usleep(1500 * 1000);
        break;
    }
    close(fd);
    return 0;
}

static int body_with_stranger(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    (void)size;
    if (rank >= REAL_RANKS) return stranger(*(const int *)arg);
    boot(&bs, 20);
    TH_CHECK(bs.size == REAL_RANKS, "size %d", bs.size);
    /* Rounds spread over ~1 s, so the stranger acts in the middle of them. */
    for (int i = 0; i < 40; i++) {
        check_round(&bs, i, (size_t)(i % 4 == 0 ? 70000 : i * 7), weft_wtime() + 20);
        usleep(25 * 1000);
    }
    bs.finalize(&bs, 1, weft_wtime() + 10);
    return 0;
}

static void run_stranger(int mode)
{
    th_result_t res = th_run(REAL_RANKS + 1, body_with_stranger, &mode, 40, (const char *const *)stranger_env);
    cr_assert(!res.timed_out);
    for (int r = 0; r < REAL_RANKS; r++)
        cr_expect_eq(res.exit_code[r], 0, "rank %d failed", r);
    cr_assert_eq(res.exit_code[REAL_RANKS], 0, "the stranger's checks failed");
}

Test(store, stranger_garbage, .timeout = 60)
{
    run_stranger(S_GARBAGE);
}
Test(store, stranger_huge_length, .timeout = 60)
{
    run_stranger(S_HUGE_LEN);
}
Test(store, stranger_huge_hello, .timeout = 60)
{
    run_stranger(S_HUGE_HELLO);
}
Test(store, stranger_rank_out_of_range, .timeout = 60)
{
    run_stranger(S_BAD_RANK);
}
Test(store, stranger_wrong_world_size, .timeout = 60)
{
    run_stranger(S_BAD_SIZE);
}
Test(store, stranger_wrong_version, .timeout = 60)
{
    run_stranger(S_BAD_VERSION);
}
Test(store, stranger_half_header, .timeout = 60)
{
    run_stranger(S_HALF_HEADER);
}
Test(store, stranger_idle_connections, .timeout = 60)
{
    run_stranger(S_IDLE_MANY);
}
Test(store, duplicate_rank, .timeout = 60)
{
    run_stranger(S_DUPLICATE);
}

/* ------------------------------------------------------------------ */
/* A fake store: clients fail by their own deadline                    */
/* ------------------------------------------------------------------ */

enum { FAKE_SILENT, FAKE_WELCOME_THEN_SILENT, FAKE_NOT_A_STORE };

/* Serves one connection from a child process in the given way. */
static pid_t fake_store(int mode, int *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(lfd >= 0);
    cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    cr_assert_eq(listen(lfd, 4), 0);
    cr_assert_eq(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
    *port = ntohs(sa.sin_port);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        uint8_t b[WIRE_HDR];
        int fd = accept(lfd, NULL, NULL);
        if (fd >= 0 && recv(fd, b, sizeof(b), MSG_WAITALL) == WIRE_HDR) {
            if (mode == FAKE_WELCOME_THEN_SILENT) {
                wire_pack(b, W_WELCOME, 1, 2, 0, 0, 0);
                (void)send(fd, b, sizeof(b), 0);
            } else if (mode == FAKE_NOT_A_STORE) {
                memcpy(b, "HTTP/1.1 400 Bad Request\r\n\r\n0123456789A", sizeof(b));
                (void)send(fd, b, sizeof(b), 0);
            }
        }
        sleep(30);
        _exit(0);
    }
    close(lfd);
    return pid;
}

static void set_job_env(const char *rank, const char *size, const char *addr, const char *port)
{
    setenv("RANK", rank, 1);
    setenv("WORLD_SIZE", size, 1);
    setenv("MASTER_ADDR", addr, 1);
    setenv("MASTER_PORT", port, 1);
    unsetenv("LOCAL_RANK");
    unsetenv("LOCAL_WORLD_SIZE");
}

static void set_job_env_port(const char *rank, const char *size, const char *addr, int port)
{
    char p[16];
    snprintf(p, sizeof(p), "%d", port);
    set_job_env(rank, size, addr, p);
}

static void stop_fake(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

Test(store, client_deadline_when_store_is_silent, .timeout = 60)
{
    weft_bootstrap_t bs = {0};
    int port;
    pid_t pid = fake_store(FAKE_WELCOME_THEN_SILENT, &port);
    set_job_env_port("1", "2", "127.0.0.1", port);
    int rc = weft_bootstrap_env_init(&bs, weft_wtime() + 5);
    cr_assert_eq(rc, WEFT_SUCCESS, "%s", weft_last_error());
    uint32_t v = 1, out[2];
    double t0 = weft_wtime();
    rc = bs.allgather(&bs, &v, out, sizeof(v), t0 + 1.0);
    double took = weft_wtime() - t0;
    stop_fake(pid);
    cr_assert_eq(rc, WEFT_ERR_TIMEOUT, "%d: %s", rc, weft_last_error());
    cr_assert(took >= 1.0 && took < 3.0, "took %.2f s for a 1 s deadline", took);
    cr_assert(strstr(weft_last_error(), "did not answer allgather round 0"), "%s", weft_last_error());
    /* The stream is out of step now: later calls fail at once. */
    cr_assert_eq(bs.allgather(&bs, &v, out, sizeof(v), weft_wtime() + 5), WEFT_ERR_PEER_LOST);
    bs.finalize(&bs, 1, weft_wtime() + 1);
}

Test(store, client_deadline_when_hello_unanswered, .timeout = 60)
{
    weft_bootstrap_t bs = {0};
    int port;
    pid_t pid = fake_store(FAKE_SILENT, &port);
    set_job_env_port("1", "2", "127.0.0.1", port);
    double t0 = weft_wtime();
    int rc = weft_bootstrap_env_init(&bs, t0 + 1.0);
    double took = weft_wtime() - t0;
    stop_fake(pid);
    cr_assert_eq(rc, WEFT_ERR_TIMEOUT, "%d: %s", rc, weft_last_error());
    cr_assert(took < 3.0, "took %.2f s for a 1 s deadline", took);
    cr_assert(strstr(weft_last_error(), "did not answer its HELLO"), "%s", weft_last_error());
}

Test(store, not_a_store, .timeout = 60)
{
    weft_bootstrap_t bs = {0};
    int port;
    pid_t pid = fake_store(FAKE_NOT_A_STORE, &port);
    set_job_env_port("1", "2", "127.0.0.1", port);
    int rc = weft_bootstrap_env_init(&bs, weft_wtime() + 5);
    stop_fake(pid);
    cr_assert_eq(rc, WEFT_ERR_BOOTSTRAP, "%d: %s", rc, weft_last_error());
    cr_assert(strstr(weft_last_error(), "is not a weft store"), "%s", weft_last_error());
}

/* ------------------------------------------------------------------ */
/* Single process: addresses, ports, variables                         */
/* ------------------------------------------------------------------ */

static void solo_job(const char *addr)
{
    weft_bootstrap_t bs = {0};
    int port = th_free_port();
    uint8_t in[5] = {1, 2, 3, 4, 5}, out[5] = {0};
    set_job_env_port("0", "1", addr, port);
    int rc = weft_bootstrap_env_init(&bs, weft_wtime() + 5);
    cr_assert_eq(rc, WEFT_SUCCESS, "MASTER_ADDR=%s: %s", addr, weft_last_error());
    cr_assert_eq(bs.local_rank, -1);
    cr_assert_eq(bs.local_size, -1);
    cr_assert_eq(bs.allgather(&bs, in, out, sizeof(in), weft_wtime() + 5), WEFT_SUCCESS, "%s", weft_last_error());
    cr_assert_arr_eq(in, out, sizeof(in));
    double t0 = weft_wtime();
    bs.finalize(&bs, 1, weft_wtime() + 5);
    cr_assert(weft_wtime() - t0 < 2);
    cr_assert_null(bs.impl);
}

Test(store, in_process_single_rank, .timeout = 60)
{
    solo_job("127.0.0.1");
}
Test(store, master_addr_host_name, .timeout = 60)
{
    solo_job("localhost");
}
/* A MASTER_ADDR that is not this host's (a Kubernetes service address):
 * rank 0 listens on every address and reaches its own store anyway. */
Test(store, master_addr_not_local, .timeout = 60)
{
    solo_job("192.0.2.1");
}

static int body_localhost(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    (void)rank, (void)size, (void)arg;
    boot(&bs, 20);
    for (int i = 0; i < 3; i++)
        check_round(&bs, i, 32, weft_wtime() + 20);
    bs.finalize(&bs, 1, weft_wtime() + 10);
    return 0;
}

Test(store, master_addr_localhost_3_ranks, .timeout = 60)
{
    static const char *const env[] = {"MASTER_ADDR=localhost", NULL};
    th_result_t res = th_run(3, body_localhost, NULL, 30, env);
    cr_assert(!res.timed_out);
    cr_assert_eq(res.failed, 0, "%d ranks failed", res.failed);
}

Test(store, port_in_use, .timeout = 60)
{
    weft_bootstrap_t bs = {0};
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    cr_assert_eq(listen(lfd, 4), 0);
    cr_assert_eq(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
    set_job_env_port("0", "2", "127.0.0.1", ntohs(sa.sin_port));
    double t0 = weft_wtime();
    int rc = weft_bootstrap_env_init(&bs, t0 + 10);
    cr_assert_eq(rc, WEFT_ERR_BOOTSTRAP, "%d: %s", rc, weft_last_error());
    cr_assert(weft_wtime() - t0 < 2, "a taken port must fail at once");
    cr_assert(strstr(weft_last_error(), "cannot serve the store"), "%s", weft_last_error());
    close(lfd);
}

static void expect_bad_env(const char *var, const char *value, const char *needle)
{
    weft_bootstrap_t bs = {0};
    set_job_env("1", "4", "127.0.0.1", "29500");
    if (value)
        setenv(var, value, 1);
    else
        unsetenv(var);
    int rc = weft_bootstrap_env_init(&bs, weft_wtime() + 1);
    cr_expect_eq(rc, WEFT_ERR_ARG, "%s=%s: got %d (%s)", var, value ? value : "(unset)", rc, weft_last_error());
    cr_expect(strstr(weft_last_error(), needle), "%s=%s: message \"%s\" lacks \"%s\"", var, value ? value : "(unset)",
              weft_last_error(), needle);
    cr_expect_null(bs.impl);
}

Test(store, bad_variables, .timeout = 60)
{
    expect_bad_env("RANK", "4", "RANK='4' is not an integer in [0, 3] (WORLD_SIZE=4)");
    expect_bad_env("RANK", "-1", "RANK='-1'");
    expect_bad_env("RANK", "one", "RANK='one'");
    expect_bad_env("RANK", "", "RANK=''");
    expect_bad_env("RANK", NULL, "RANK is not set");
    expect_bad_env("WORLD_SIZE", "0", "WORLD_SIZE='0'");
    expect_bad_env("WORLD_SIZE", "4x", "WORLD_SIZE='4x'");
    expect_bad_env("WORLD_SIZE", "99999999999999999999", "WORLD_SIZE='99999999999999999999'");
    expect_bad_env("MASTER_PORT", "abc", "MASTER_PORT='abc'");
    expect_bad_env("MASTER_PORT", "0", "MASTER_PORT='0' is not an integer in [1, 65535]");
    expect_bad_env("MASTER_PORT", "65536", "MASTER_PORT='65536'");
    expect_bad_env("MASTER_PORT", NULL, "MASTER_PORT is not set");
    expect_bad_env("MASTER_ADDR", "", "MASTER_ADDR=''");
    expect_bad_env("LOCAL_WORLD_SIZE", "5", "LOCAL_WORLD_SIZE='5'");
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    weft_bootstrap_t bs = {0};
    setenv("LOCAL_RANK", "2", 1);
    cr_expect_eq(weft_bootstrap_env_init(&bs, weft_wtime() + 1), WEFT_ERR_ARG);
    cr_expect(strstr(weft_last_error(), "LOCAL_RANK='2' is not an integer in [0, 1] (LOCAL_WORLD_SIZE=2)"), "%s",
              weft_last_error());
}

Test(store, detection, .timeout = 60)
{
    set_job_env("0", "2", "127.0.0.1", "29500");
    cr_expect_eq(weft_bootstrap_env_detected(), 1);
    unsetenv("MASTER_PORT");
    cr_expect_eq(weft_bootstrap_env_detected(), 0);
    set_job_env("0", "2", "127.0.0.1", "29500");
    unsetenv("RANK");
    cr_expect_eq(weft_bootstrap_env_detected(), 0);
    set_job_env("0", "2", "", "29500");
    cr_expect_eq(weft_bootstrap_env_detected(), 0);
}
