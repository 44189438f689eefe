/* The env bootstrap and its TCP store (src/bootstrap/env*.c), tested through
 * the internal API: allgather correctness, deadlines that name the missing
 * ranks, ranks that die, strangers on the store's port (without the job
 * secret, with garbage, in a flood), fake stores, where the store listens,
 * bad variables, node relays (one connection per node).
 *
 * Multi-rank tests fork ranks with test/harness.h; a child reports with
 * TH_CHECK / TH_OK and only the parent uses Criterion assertions. */
#include "bootstrap/bootstrap.h"
#include "bootstrap/env.h"
#include "bootstrap/env_wire.h"
#include "bootstrap/jobkey.h"
#include "harness.h"
#include "weft_internal.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* The store's wire format, repeated here on purpose: the stranger tests
 * craft messages a real client would never send. Keep in step with env_wire.h.
 * (The proofs come from env_wire.c: writing HMAC again here would test nothing.) */
#define WIRE_MAGIC   0x57465453u
#define WIRE_VERSION 3u
#define WIRE_HDR     40
enum { W_HELLO = 1, W_WELCOME = 2, W_CONTRIB = 3, W_RESULT = 4, W_ERROR = 5, W_BYE = 6, W_CHALLENGE = 8, W_PROOF = 9 };

static void wire_pack_v(uint8_t *b, unsigned version, unsigned kind, uint32_t rank, uint32_t size, uint64_t seq,
                        uint64_t arg, uint64_t len)
{
    uint32_t v32;
    uint16_t v16;
    uint64_t v64;
    v32 = htobe32(WIRE_MAGIC);
    memcpy(b, &v32, 4);
    v16 = htobe16((uint16_t)version);
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

static void wire_pack(uint8_t *b, unsigned kind, uint32_t rank, uint32_t size, uint64_t seq, uint64_t arg, uint64_t len)
{
    wire_pack_v(b, WIRE_VERSION, kind, rank, size, seq, arg, len);
}

static uint16_t wire_kind(const uint8_t *b)
{
    uint16_t v;
    memcpy(&v, b + 6, 2);
    return be16toh(v);
}

/* The job key this process has (WEFT_JOB_SECRET in the environment). */
static void load_key(weft_job_key_t *k)
{
    TH_OK(weft_config_load());
    TH_OK(weft_job_key_load(k, "test"));
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
    /* The victim first: a survivor that finished meanwhile (its next round
     * failed, it left without a goodbye) may be announced too on a busy host. */
    TH_CHECK(weft_world_lost_rank() == l->victim, "rank %d: rank %d recorded lost first (%u in all)", rank,
             weft_world_lost_rank(), weft_lost_count);
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
    S_DUPLICATE,
    S_NO_SECRET
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

/* Sets a receive timeout, so a raw client cannot hang on a silent store. */
static void recv_timeout(int fd, double s)
{
    struct timeval tv = {.tv_sec = (time_t)s, .tv_usec = (suseconds_t)((s - (double)(time_t)s) * 1e6)};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

/* A raw handshake claiming `rank` of `size` with key k (keyed: whether to
 * say we have a secret): HELLO, the store's CHALLENGE (consumed), PROOF.
 * The store's verdict is left in the socket for the caller. */
static int raw_handshake(int fd, uint32_t rank, uint32_t size, const weft_job_key_t *k, int keyed)
{
    uint8_t b[WIRE_HDR + STORE_CHALLENGE], nc[STORE_NONCE], proof[STORE_PROOF];
    memset(nc, 0x5a, sizeof(nc));
    recv_timeout(fd, 5);
    wire_pack(b, W_HELLO, rank, size, 0, keyed ? FLAG_KEYED : 0, STORE_NONCE);
    memcpy(b + WIRE_HDR, nc, STORE_NONCE);
    TH_CHECK(send(fd, b, WIRE_HDR + STORE_NONCE, MSG_NOSIGNAL) == WIRE_HDR + STORE_NONCE, "stranger: send HELLO");
    TH_CHECK(recv(fd, b, sizeof(b), MSG_WAITALL) == (ssize_t)sizeof(b), "stranger: no CHALLENGE from the store");
    TH_CHECK(wire_kind(b) == W_CHALLENGE, "stranger: the store answered HELLO with kind %u", wire_kind(b));
    weft_env_proof(k->key, PROOF_BY_RANK, nc, b + WIRE_HDR, rank, size, proof);
    wire_pack(b, W_PROOF, rank, size, 0, 0, STORE_PROOF);
    memcpy(b + WIRE_HDR, proof, STORE_PROOF);
    TH_CHECK(send(fd, b, WIRE_HDR + STORE_PROOF, MSG_NOSIGNAL) == WIRE_HDR + STORE_PROOF, "stranger: send PROOF");
    return 0;
}

/* The attack: a stranger reaches the store before the real rank 1
 * and claims its slot, in the old protocol and in the new one without the
 * secret or with a wrong one. Each is refused; the real rank 1 joins later. */
static int stranger_claims_rank_1(void)
{
    weft_job_key_t none = {0}, wrong = {0};
    uint8_t b[WIRE_HDR];
    int fd;

    setenv("WEFT_JOB_SECRET", "not the job's secret, but long enough", 1);
    load_key(&wrong);
    /* Version 1 of the protocol: a HELLO was all it took. */
    TH_CHECK((fd = connect_store(weft_wtime() + 10)) >= 0, "stranger: cannot connect to the store");
    wire_pack_v(b, 1, W_HELLO, 1, REAL_RANKS, 0, 0, 0);
    (void)send(fd, b, WIRE_HDR, MSG_NOSIGNAL);
    expect_refusal(fd, WEFT_ERR_BOOTSTRAP, "protocol version 1, but the store speaks version 3");
    close(fd);
    /* No secret, saying so. */
    TH_CHECK((fd = connect_store(weft_wtime() + 10)) >= 0, "connect");
    raw_handshake(fd, 1, REAL_RANKS, &none, 0);
    expect_refusal(fd, WEFT_ERR_BOOTSTRAP, "authentication failed for rank 1: the store requires the job secret");
    close(fd);
    /* No secret, pretending to have one. */
    TH_CHECK((fd = connect_store(weft_wtime() + 10)) >= 0, "connect");
    raw_handshake(fd, 1, REAL_RANKS, &none, 1);
    expect_refusal(fd, WEFT_ERR_BOOTSTRAP, "authentication failed for rank 1: wrong proof of the job secret");
    close(fd);
    /* A wrong secret, through the real client. */
    weft_bootstrap_t bs = {0};
    setenv("RANK", "1", 1);
    unsetenv("LOCAL_RANK");
    int rc = weft_bootstrap_env_init(&bs, weft_wtime() + 5);
    TH_CHECK(rc == WEFT_ERR_BOOTSTRAP, "stranger: got %d: %s", rc, weft_last_error());
    TH_CHECK(strstr(weft_last_error(), "failed to prove it knows the job secret"), "stranger: %s", weft_last_error());
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
        TH_OK(weft_config_load());
        int rc = weft_bootstrap_env_init(&bs, weft_wtime() + 5);
        TH_CHECK(rc == WEFT_ERR_ARG, "impostor: got %d: %s", rc, weft_last_error());
        TH_CHECK(strstr(weft_last_error(), "rank 1 is already connected"), "impostor: %s", weft_last_error());
        return 0;
    }
    if (mode == S_NO_SECRET) return stranger_claims_rank_1();
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
    case S_BAD_RANK: { /* with the secret: then the claim itself is checked */
        weft_job_key_t k;
        load_key(&k);
        raw_handshake(fd, 99, REAL_RANKS, &k, 1);
        expect_refusal(fd, WEFT_ERR_ARG, "rank 99 is out of range for WORLD_SIZE=4");
        break;
    }
    case S_BAD_SIZE: {
        weft_job_key_t k;
        load_key(&k);
        raw_handshake(fd, 1, 7, &k, 1);
        expect_refusal(fd, WEFT_ERR_ARG, "says WORLD_SIZE=7");
        break;
    }
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
    if (rank == 1 && *(const int *)arg == S_NO_SECRET) usleep(1500 * 1000); /* the stranger comes first */
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
/* Issue 21: a stranger that reaches the store first cannot take a rank. */
Test(store, stranger_without_the_secret_cannot_take_a_rank, .timeout = 60)
{
    run_stranger(S_NO_SECRET);
}

/* ------------------------------------------------------------------ */
/* A fake store: clients fail by their own deadline, and one that does */
/* not know the job secret learns nothing                              */
/* ------------------------------------------------------------------ */

#define TEST_SECRET "a test job secret of enough length"

enum { FAKE_SILENT, FAKE_HANDSHAKE_THEN_SILENT, FAKE_NOT_A_STORE, FAKE_WRONG_PROOF, FAKE_UNKEYED, FAKE_ERROR_TEXT };

/* What FAKE_ERROR_TEXT answers a HELLO with: terminal escapes, a newline, a NUL, and more than a screen. */
static const char evil_text[] = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\nforged line\r\x01";

/* Serves one connection from a child process in the given way. Exit
 * status: 0, or 3 when the client sent anything after its HELLO although
 * the fake never proved itself (FAKE_WRONG_PROOF, FAKE_UNKEYED). */
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
        uint8_t b[WIRE_HDR + STORE_CHALLENGE], nc[STORE_NONCE];
        weft_job_key_t k = {0};
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0 || recv(fd, b, WIRE_HDR + STORE_NONCE, MSG_WAITALL) != WIRE_HDR + STORE_NONCE) _exit(2);
        memcpy(nc, b + WIRE_HDR, STORE_NONCE);
        if (mode == FAKE_HANDSHAKE_THEN_SILENT) { /* knows the secret: a store that hangs afterwards */
            setenv("WEFT_JOB_SECRET", TEST_SECRET, 1);
            if (weft_config_load() || weft_job_key_load(&k, "fake")) _exit(2);
        }
        if (mode == FAKE_ERROR_TEXT) { /* refuses the HELLO (before proving anything) with a hostile text */
            char text[4000];
            memset(text, 'x', sizeof(text));
            memcpy(text, evil_text, sizeof(evil_text) - 1);
            wire_pack(b, W_ERROR, 1, 2, 0, (uint64_t)(int64_t)WEFT_ERR_ARG, sizeof(text));
            (void)send(fd, b, WIRE_HDR, 0);
            (void)send(fd, text, sizeof(text), 0);
        } else if (mode == FAKE_NOT_A_STORE) {
            memcpy(b, "HTTP/1.1 400 Bad Request\r\n\r\n0123456789A", WIRE_HDR);
            (void)send(fd, b, WIRE_HDR, 0);
        } else if (mode != FAKE_SILENT) {
            wire_pack(b, W_CHALLENGE, 1, 2, 0, mode == FAKE_UNKEYED ? 0 : FLAG_KEYED, STORE_CHALLENGE);
            memset(b + WIRE_HDR, 0x33, STORE_NONCE);
            weft_env_proof(k.key, PROOF_BY_STORE, nc, b + WIRE_HDR, 1, 2, b + WIRE_HDR + STORE_NONCE);
            if (mode == FAKE_WRONG_PROOF) b[WIRE_HDR + STORE_NONCE] ^= 1; /* a forger's best guess is off */
            (void)send(fd, b, sizeof(b), 0);
        }
        if (mode == FAKE_WRONG_PROOF || mode == FAKE_UNKEYED) { /* the client must hang up without a word */
            recv_timeout(fd, 5);
            _exit(recv(fd, b, sizeof(b), 0) == 0 ? 0 : 3);
        }
        if (mode == FAKE_HANDSHAKE_THEN_SILENT && recv(fd, b, WIRE_HDR + STORE_PROOF, MSG_WAITALL) > 0) {
            wire_pack(b, W_WELCOME, 1, 2, 0, 0, 0);
            (void)send(fd, b, WIRE_HDR, 0);
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

/* This process's WEFT_JOB_SECRET (NULL: none), read as weft_init would. */
static void use_secret(const char *secret)
{
    if (secret)
        setenv("WEFT_JOB_SECRET", secret, 1);
    else
        unsetenv("WEFT_JOB_SECRET");
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS, "%s", weft_last_error());
}

static void stop_fake(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static int fake_exit_code(pid_t pid)
{
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

Test(store, client_deadline_when_store_is_silent, .timeout = 60)
{
    weft_bootstrap_t bs = {0};
    int port;
    use_secret(TEST_SECRET);
    pid_t pid = fake_store(FAKE_HANDSHAKE_THEN_SILENT, &port);
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
    use_secret(TEST_SECRET);
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
    use_secret(TEST_SECRET);
    pid_t pid = fake_store(FAKE_NOT_A_STORE, &port);
    set_job_env_port("1", "2", "127.0.0.1", port);
    int rc = weft_bootstrap_env_init(&bs, weft_wtime() + 5);
    stop_fake(pid);
    cr_assert_eq(rc, WEFT_ERR_BOOTSTRAP, "%d: %s", rc, weft_last_error());
    cr_assert(strstr(weft_last_error(), "is not a weft store"), "%s", weft_last_error());
}

/* Issue 21: a fake store (something else on MASTER_PORT) cannot collect
 * the ranks' data: it cannot answer the client's challenge, and the client
 * stops before sending anything but its HELLO, at once, not at a deadline. */
static void expect_fake_detected(int mode, const char *needle)
{
    weft_bootstrap_t bs = {0};
    int port;
    use_secret(TEST_SECRET);
    pid_t pid = fake_store(mode, &port);
    set_job_env_port("1", "2", "127.0.0.1", port);
    double t0 = weft_wtime();
    int rc = weft_bootstrap_env_init(&bs, t0 + 20);
    double took = weft_wtime() - t0;
    int fake_rc = fake_exit_code(pid);
    cr_assert_eq(rc, WEFT_ERR_BOOTSTRAP, "%d: %s", rc, weft_last_error());
    cr_assert(strstr(weft_last_error(), needle), "\"%s\" lacks \"%s\"", weft_last_error(), needle);
    cr_assert(took < 3.0, "took %.2f s to see a fake store", took);
    cr_assert_eq(fake_rc, 0, "the fake store got more than a HELLO (exit %d)", fake_rc);
}

Test(store, fake_store_without_the_secret_is_detected, .timeout = 60)
{
    expect_fake_detected(FAKE_WRONG_PROOF, "failed to prove it knows the job secret");
}

Test(store, fake_store_claiming_no_secret_is_detected, .timeout = 60)
{
    expect_fake_detected(FAKE_UNKEYED, "has no job secret but rank 1 has one (from WEFT_JOB_SECRET)");
}

/* A rank without the secret facing a store with one: told what to set. */
static int body_secretless_rank(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    (void)size, (void)arg;
    if (rank == 1) {
        usleep(300 * 1000);
        unsetenv("WEFT_JOB_SECRET");
        memset(&bs, 0, sizeof(bs));
        TH_OK(weft_config_load());
        int rc = weft_bootstrap_env_init(&bs, weft_wtime() + 5);
        TH_CHECK(rc == WEFT_ERR_BOOTSTRAP, "rank 1: got %d: %s", rc, weft_last_error());
        TH_CHECK(strstr(weft_last_error(), "requires the job secret and rank 1 has none: set WEFT_JOB_SECRET"),
                 "rank 1: %s", weft_last_error());
        return 0;
    }
    boot(&bs, 20); /* rank 0's own client is in; it gives up on rank 1 at finalize */
    usleep(2000 * 1000);
    bs.finalize(&bs, 0, 0);
    return 0;
}

Test(store, rank_without_the_secret_is_told_what_to_set, .timeout = 60)
{
    th_result_t res = th_run(2, body_secretless_rank, NULL, 30, NULL);
    cr_assert(!res.timed_out);
    cr_assert_eq(res.failed, 0, "%d ranks failed", res.failed);
}

/* Without any secret the store still works (and says at info that it is open). */
Test(store, allgather_without_a_secret, .timeout = 60)
{
    static const char *const env[] = {"WEFT_JOB_SECRET=", NULL};
    th_result_t res = th_run(3, body_allgather, NULL, 50, env);
    cr_assert(!res.timed_out);
    cr_assert_eq(res.failed, 0, "%d ranks failed", res.failed);
}

/* Without a secret, each rank says once, at info, that the store is open and what sets one. */
static void solo_with_info_log(void *arg)
{
    weft_bootstrap_t bs = {0};
    (void)arg;
    setenv("WEFT_LOG_LEVEL", "info", 1);
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    weft_log_init();
    set_job_env_port("0", "1", "127.0.0.1", th_free_port());
    cr_assert_eq(weft_bootstrap_env_init(&bs, weft_wtime() + 5), WEFT_SUCCESS, "%s", weft_last_error());
    bs.finalize(&bs, 1, weft_wtime() + 5);
}

Test(store, unauthenticated_store_says_so_at_info, .timeout = 60)
{
    unsetenv("WEFT_JOB_SECRET");
    char *err = th_stderr_of(solo_with_info_log, NULL);
    cr_expect(strstr(err, "is not authenticated: any process that reaches it can join as a rank that has not arrived "
                          "yet. Set WEFT_JOB_SECRET"),
              "%s", err);
    free(err);
}

/* A secret from a file (a mounted Kubernetes Secret) equals the same secret in
 * WEFT_JOB_SECRET: ranks may mix the two. */
static int body_secret_file(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    (void)size;
    if (rank % 2) { /* the odd ranks read it from the file */
        setenv("WEFT_JOB_SECRET_FILE", (const char *)arg, 1);
        unsetenv("WEFT_JOB_SECRET");
    }
    boot(&bs, 20);
    check_round(&bs, 0, 24, weft_wtime() + 20);
    bs.finalize(&bs, 1, weft_wtime() + 10);
    return 0;
}

Test(store, secret_from_a_file, .timeout = 60)
{
    static char path[] = "/tmp/weft-secret-XXXXXX";
    static const char *const env[] = {"WEFT_JOB_SECRET=" TEST_SECRET, NULL};
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert(write(fd, TEST_SECRET "\n", sizeof(TEST_SECRET)) == (ssize_t)sizeof(TEST_SECRET));
    close(fd);
    th_result_t res = th_run(4, body_secret_file, path, 30, env);
    cr_assert(!res.timed_out);
    cr_expect_eq(res.failed, 0, "%d ranks failed", res.failed);
    /* An unreadable file is an error naming it, not a silent fallback. */
    weft_job_key_t k;
    unsetenv("WEFT_JOB_SECRET");
    setenv("WEFT_JOB_SECRET_FILE", "/nonexistent/weft-secret", 1);
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    cr_expect_eq(weft_job_key_load(&k, "test"), WEFT_ERR_ARG);
    cr_expect(strstr(weft_last_error(), "WEFT_JOB_SECRET_FILE='/nonexistent/weft-secret': No such file"), "%s",
              weft_last_error());
    unlink(path);
}

/* Whatever answers on MASTER_PORT may send any text: the error shows it
 * escaped (no terminal escapes, no forged log lines) and bounded. */
Test(store, a_refusal_text_is_printed_escaped_and_bounded, .timeout = 60)
{
    weft_bootstrap_t bs = {0};
    int port;
    use_secret(TEST_SECRET);
    pid_t pid = fake_store(FAKE_ERROR_TEXT, &port);
    set_job_env_port("1", "2", "127.0.0.1", port);
    int rc = weft_bootstrap_env_init(&bs, weft_wtime() + 5);
    stop_fake(pid);
    const char *msg = weft_last_error();
    cr_assert_neq(rc, WEFT_SUCCESS);
    cr_assert(strstr(msg, "\\x1b]0;owned\\x07\\x1b[2J\\x1b[31mred\\nforged line\\x0d\\x01"), "%s", msg);
    for (const char *c = msg; *c; c++)
        cr_assert((unsigned char)*c >= 0x20 && (unsigned char)*c < 0x7f, "byte 0x%02x at %d in: %s", (unsigned char)*c,
                  (int)(c - msg), msg);
    cr_assert(strlen(msg) < 1400, "%zu characters", strlen(msg));
}

/* A secret with fewer than 128 bits (by length and alphabet) is refused
 * unless WEFT_JOB_SECRET_ALLOW_WEAK says otherwise; a file that is not a
 * regular file (a FIFO nobody writes) fails at once instead of blocking. */
Test(store, weak_secrets_are_refused, .timeout = 30)
{
    static const struct {
        const char *secret;
        int ok;
    } cases[] = {
        {"abc", 0},
        {"hunter2-hunter2", 0},                      /* lower, digits, '-': 15 x 6.1 bits */
        {"0123456789abcdef0123456789abcde", 0},      /* 31 hex digits: 124 bits */
        {"0123456789abcdef0123456789abcdef", 1},     /* 32: 128 */
        {"6f1c2a9e-3b7d-4c1a-9f2e-8d7c6b5a4e3f", 1}, /* a UUID: its hex digits count, the hyphens not */
        {TEST_SECRET, 1},
    };
    weft_job_key_t k;
    unsetenv("WEFT_JOB_SECRET_FILE");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        unsetenv("WEFT_JOB_SECRET_ALLOW_WEAK");
        use_secret(cases[i].secret);
        int rc = weft_job_key_load(&k, "test");
        cr_expect_eq(rc, cases[i].ok ? WEFT_SUCCESS : WEFT_ERR_ARG, "'%s': %d (%s)", cases[i].secret, rc,
                     weft_last_error());
        if (!cases[i].ok) {
            cr_expect(strstr(weft_last_error(), "WEFT_JOB_SECRET_ALLOW_WEAK"), "%s", weft_last_error());
            cr_expect(!strstr(weft_last_error(), cases[i].secret), "the message shows the secret: %s",
                      weft_last_error());
            setenv("WEFT_JOB_SECRET_ALLOW_WEAK", "1", 1);
            use_secret(cases[i].secret);
            cr_expect_eq(weft_job_key_load(&k, "test"), WEFT_SUCCESS, "allowed: %s", weft_last_error());
            cr_expect(k.keyed);
        }
    }
}

/* Rank 0's store holds a connection per rank: where its open-file limit
 * (the hard one, so it cannot be raised) is below WORLD_SIZE, rank 0 and
 * every rank that reaches the store are refused at once with the limit
 * named, instead of the ranks past the limit waiting in the backlog and
 * the others timing out at the deadline. Rank 0 of a world of 300, limited
 * to 100 descriptors (the other ranks' refusals race rank 0's exit; under a
 * launcher rank 0's failure ends the job). */
static int body_fd_limit(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    setenv("WORLD_SIZE", "300", 1);
    struct rlimit rl = {100, 100};
    TH_CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit: %s", strerror(errno));
    weft_bootstrap_t bs;
    memset(&bs, 0, sizeof(bs));
    TH_OK(weft_config_load());
    double t0 = weft_wtime();
    int rc = weft_bootstrap_env_init(&bs, t0 + 20);
    double took = weft_wtime() - t0;
    if (rc == WEFT_SUCCESS) bs.finalize(&bs, 0, 0);
    TH_CHECK(rc == WEFT_ERR_BOOTSTRAP, "rank %d: got %d (%s): %s", rank, rc, weft_strerror(rc), weft_last_error());
    TH_CHECK(took < 5, "rank %d: failed after %.1f s", rank, took);
    TH_CHECK(strstr(weft_last_error(), "open-file limit is 100, below the 316 it needs"), "rank %d: %s", rank,
             weft_last_error());
    return 0;
}

Test(store, a_store_without_descriptors_for_every_rank_refuses_at_once, .timeout = 60)
{
    th_result_t res = th_run(1, body_fd_limit, NULL, 40, NULL);
    cr_assert(!res.timed_out);
    cr_assert_eq(res.failed, 0);
}

Test(store, a_secret_file_that_is_not_a_regular_file_fails_at_once, .timeout = 30)
{
    char dir[] = "/tmp/weft-secret-dir-XXXXXX", fifo[64], link[64], file[64];
    cr_assert(mkdtemp(dir));
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    snprintf(link, sizeof(link), "%s/link", dir);
    snprintf(file, sizeof(file), "%s/..data", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    unsetenv("WEFT_JOB_SECRET");
    weft_job_key_t k;
    const char *bad[] = {fifo, dir, "/dev/null"};
    for (int i = 0; i < 3; i++) {
        setenv("WEFT_JOB_SECRET_FILE", bad[i], 1);
        cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
        double t0 = weft_wtime();
        cr_expect_eq(weft_job_key_load(&k, "test"), WEFT_ERR_ARG, "%s", bad[i]);
        cr_expect(weft_wtime() - t0 < 1.0);
        cr_expect(strstr(weft_last_error(), "not a regular file"), "%s", weft_last_error());
    }
    /* A link to a regular file is followed: Kubernetes mounts a Secret's keys as links. */
    FILE *f = fopen(file, "w");
    cr_assert(f);
    fputs(TEST_SECRET "\n", f);
    fclose(f);
    cr_assert_eq(symlink(file, link), 0);
    setenv("WEFT_JOB_SECRET_FILE", link, 1);
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    cr_expect_eq(weft_job_key_load(&k, "test"), WEFT_SUCCESS, "%s", weft_last_error());
    unlink(link);
    unlink(file);
    unlink(fifo);
    rmdir(dir);
}

/* ------------------------------------------------------------------ */
/* A flood of bad connections: bounded logging, the job still starts   */
/* ------------------------------------------------------------------ */

#define FLOOD_CONNS 10000

typedef struct flood_shared {
    volatile int done;
    volatile int conns; /* the flood's connections that got through */
    char log[64];       /* rank 0's stderr */
} flood_shared_t;

static int flooder(flood_shared_t *sh)
{
    uint8_t junk[WIRE_HDR];
    struct sockaddr_in sa = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)master_port()), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    memset(junk, 'G', sizeof(junk)); /* not the magic */
    signal(SIGPIPE, SIG_IGN);
    TH_CHECK(connect_store(weft_wtime() + 10) >= 0, "flooder: no store");
    double end = weft_wtime() + 40;
    for (int i = 0; i < FLOOD_CONNS && weft_wtime() < end;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) {
            usleep(1000);
            continue;
        }
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            (void)send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
            sh->conns++;
            i++;
        }
        close(fd);
    }
    sh->done = 1;
    return 0;
}

/* Sums the rejections rank 0's log accounts for: lines shown plus the
 * counts of those not shown. */
static long count_rejections(const char *log, int *lines)
{
    long total = 0;
    *lines = 0;
    for (const char *p = log; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char line[1200];
        snprintf(line, sizeof(line), "%.*s", (int)(n < sizeof(line) - 1 ? n : sizeof(line) - 1), p);
        if (strstr(line, "env store at")) {
            const char *m;
            (*lines)++;
            if ((m = strstr(line, "(and "))) /* "... (and 123 more rejected connections not shown ..." */
                total += 1 + strtol(m + 5, NULL, 10);
            else if ((m = strstr(line, "env store at ")) && (m = strstr(m, ": ")) && (m[2] >= '0' && m[2] <= '9'))
                total += strtol(m + 2, NULL, 10); /* "<N> more rejected connections not shown" */
            else
                total++;
        }
        p = nl ? nl + 1 : p + n;
    }
    return total;
}

static int body_flood(int rank, int size, void *arg)
{
    flood_shared_t *sh = arg;
    weft_bootstrap_t bs;
    int saved = -1;
    (void)size;

    if (rank == REAL_RANKS) return flooder(sh);
    if (rank == 0) { /* its stderr goes to a file, to be counted */
        int fd = open(sh->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        TH_CHECK(fd >= 0, "open %s", sh->log);
        saved = dup(2);
        dup2(fd, 2);
        close(fd);
    } else {
        usleep(500 * 1000); /* join while the flood is on */
    }
    double t0 = weft_wtime();
    boot(&bs, 40);
    for (int i = 0; i < 10; i++) {
        check_round(&bs, i, 64, weft_wtime() + 40);
        usleep(50 * 1000);
    }
    if (rank != 0) {
        bs.finalize(&bs, 1, weft_wtime() + 40);
        return 0;
    }
    while (!sh->done && weft_wtime() - t0 < 45)
        usleep(10 * 1000);
    usleep(1500 * 1000); /* the last count comes out within a second */
    bs.finalize(&bs, 1, weft_wtime() + 40);
    double took = weft_wtime() - t0;
    fflush(stderr);
    dup2(saved, 2);
    char *log = calloc(1, 1 << 22);
    int fd = open(sh->log, O_RDONLY);
    TH_CHECK(log && fd >= 0, "read %s", sh->log);
    ssize_t n = read(fd, log, (1 << 22) - 1);
    close(fd);
    TH_CHECK(n >= 0, "read");
    int lines;
    long counted = count_rejections(log, &lines);
    fprintf(stderr, "flood: %d connections in %.1f s; rank 0 logged %d lines accounting for %ld rejections\n",
            sh->conns, took, lines, counted);
    /* a burst of 5, then a line a second, then the closing count */
    TH_CHECK(lines <= 5 + (int)took + 3, "rank 0 logged %d lines in %.1f s:\n%.2000s", lines, took, log);
    TH_CHECK(counted >= sh->conns * 9L / 10, "the log accounts for %ld of %d rejected connections:\n%.2000s", counted,
             sh->conns, log);
    TH_CHECK(strstr(log, "more rejected connections not shown"), "no count of the lines not shown:\n%.2000s", log);
    free(log);
    return 0;
}

Test(store, rejection_flood_is_logged_at_a_bounded_rate, .timeout = 120)
{
    flood_shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    snprintf(sh->log, sizeof(sh->log), "/tmp/weft-flood-%d.log", (int)getpid());
    static const char *const env[] = {"WORLD_SIZE=4", "LOCAL_WORLD_SIZE=4", "WEFT_LOG_LEVEL=warn", NULL};
    th_result_t res = th_run(REAL_RANKS + 1, body_flood, sh, 100, env);
    unlink(sh->log);
    cr_assert(!res.timed_out);
    for (int r = 0; r <= REAL_RANKS; r++)
        cr_expect_eq(res.exit_code[r], 0, "rank %d failed", r);
    /* enough that most go unshown; not a rate (an ASan build beside another job made 3984 in 40 s) */
    cr_expect(sh->conns >= FLOOD_CONNS / 10, "the flood made only %d connections", sh->conns);
    munmap(sh, sizeof(*sh));
}

/* ------------------------------------------------------------------ */
/* Single process: addresses, ports, variables                         */
/* ------------------------------------------------------------------ */

static void solo_job(const char *addr)
{
    weft_bootstrap_t bs = {0};
    int port = th_free_port();
    uint8_t in[5] = {1, 2, 3, 4, 5}, out[5] = {0};
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS, "%s", weft_last_error());
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
/* Issue 21: rank 0 listens on MASTER_ADDR's address only. One that is not
 * this host's, or 0.0.0.0, would open the store on every interface: refused
 * with the reason, unless WEFT_STORE_BIND_ANY=1 asks for it. */
static void expect_bind_refused(const char *addr, const char *needle)
{
    weft_bootstrap_t bs = {0};
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    set_job_env_port("0", "2", addr, th_free_port());
    double t0 = weft_wtime();
    int rc = weft_bootstrap_env_init(&bs, t0 + 10);
    cr_expect_neq(rc, WEFT_SUCCESS, "MASTER_ADDR=%s: the store started", addr);
    cr_expect(strstr(weft_last_error(), needle), "MASTER_ADDR=%s: \"%s\" lacks \"%s\"", addr, weft_last_error(),
              needle);
    cr_expect(weft_wtime() - t0 < 2, "MASTER_ADDR=%s: took %.1f s to refuse", addr, weft_wtime() - t0);
    cr_expect_null(bs.impl);
}

Test(store, master_addr_not_local_is_refused, .timeout = 60)
{
    expect_bind_refused("192.0.2.1", "MASTER_ADDR=192.0.2.1, which resolves to 192.0.2.1, not an address of this host");
}

Test(store, master_addr_any_is_refused, .timeout = 60)
{
    expect_bind_refused("0.0.0.0", "MASTER_ADDR=0.0.0.0 would make rank 0's store listen on every interface");
    expect_bind_refused("::", "MASTER_ADDR=:: would make rank 0's store listen on every interface");
}

/* A MASTER_ADDR that is not this host's (behind a Kubernetes ClusterIP
 * service), allowed: rank 0 listens on every address and reaches its own
 * store anyway. */
Test(store, master_addr_not_local_with_bind_any, .timeout = 60)
{
    setenv("WEFT_STORE_BIND_ANY", "1", 1);
    solo_job("192.0.2.1");
    solo_job("0.0.0.0");
}

/* A non-loopback address of this host, or NULL. */
static const char *other_local_address(char *buf, size_t cap)
{
    struct ifaddrs *ifa = NULL;
    const char *found = NULL;
    if (getifaddrs(&ifa) != 0) return NULL;
    for (struct ifaddrs *i = ifa; i && !found; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK) &&
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, buf, (socklen_t)cap))
            found = buf;
    freeifaddrs(ifa);
    return found;
}

static int can_connect(const char *addr, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok;
    inet_pton(AF_INET, addr, &sa.sin_addr);
    ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

/* MASTER_ADDR=127.0.0.1: the store is not reachable on the host's other addresses. */
Test(store, store_listens_only_on_master_addr, .timeout = 60)
{
    char other[64];
    weft_bootstrap_t bs = {0};
    int port = th_free_port();
    if (!other_local_address(other, sizeof(other))) cr_skip_test("this host has no non-loopback IPv4 address");
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    set_job_env_port("0", "2", "127.0.0.1", port);
    cr_assert_eq(weft_bootstrap_env_init(&bs, weft_wtime() + 5), WEFT_SUCCESS, "%s", weft_last_error());
    cr_expect(can_connect("127.0.0.1", port), "the store is not on 127.0.0.1:%d", port);
    cr_expect(!can_connect(other, port), "the store is reachable on %s:%d too", other, port);
    bs.finalize(&bs, 0, 0);
}

/* Kubernetes: the Kubeflow operator gives the master pod MASTER_ADDR=localhost
 * and the other pods its service name, which resolves to the pod's address.
 * Rank 0 then also listens on the address of the pod's own name (from
 * /etc/hosts), and on nothing else. Simulated in private mount and UTS
 * namespaces: a host name that /etc/hosts maps to this host's other address. */
static int k8s_master_pod(const char *other, int port)
{
    static const char name[] = "weft-job-master-0";
    char hosts[] = "/tmp/weft-hosts-XXXXXX";
    weft_bootstrap_t bs = {0};
    if (unshare(CLONE_NEWNS | CLONE_NEWUTS) != 0) return 77;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return 77;
    int fd = mkstemp(hosts);
    if (fd < 0) return 2;
    dprintf(fd, "127.0.0.1 localhost\n%s %s\n", other, name);
    close(fd);
    if (mount(hosts, "/etc/hosts", NULL, MS_BIND, NULL) != 0 || sethostname(name, strlen(name)) != 0) {
        unlink(hosts);
        return 77;
    }
    unlink(hosts);
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    set_job_env_port("0", "2", "localhost", port);
    TH_OK(weft_config_load());
    TH_OK(weft_bootstrap_env_init(&bs, weft_wtime() + 5));
    TH_CHECK(can_connect(other, port), "the store is not reachable at %s (the pod's name's address)", other);
    TH_CHECK(can_connect("127.0.0.1", port), "the store is not reachable at localhost");
    bs.finalize(&bs, 0, 0);
    return 0;
}

Test(store, kubernetes_master_pod_with_localhost, .timeout = 60)
{
    char other[64];
    int port = th_free_port();
    if (!other_local_address(other, sizeof(other))) cr_skip_test("this host has no non-loopback IPv4 address");
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) _exit(k8s_master_pod(other, port));
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) cr_skip_test("no private mount and UTS namespaces here (needs root)");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the master pod's checks failed (status 0x%x)", st);
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

/* weftrun binds and listens on the store's port before any rank starts and
 * hands the socket to rank 0 (WEFT_STORE_FD): nobody can take the port in
 * between. Here the test holds the port (as weftrun would); rank 0 serves
 * on the inherited socket, and without it could not bind the port at all. */
static int held_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    cr_assert(fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof(sa)) && !listen(fd, 64) &&
              !getsockname(fd, (struct sockaddr *)&sa, &len));
    *port = ntohs(sa.sin_port);
    return fd;
}

static int body_inherited(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    (void)size;
    (void)arg;
    boot(&bs, 20);
    TH_CHECK(bs.rank == rank, "rank %d", bs.rank);
    check_round(&bs, 0, 4096, weft_wtime() + 20);
    check_round(&bs, 1, 100, weft_wtime() + 20);
    bs.finalize(&bs, 1, weft_wtime() + 10);
    return 0;
}

static int body_port_taken(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    (void)size;
    (void)arg;
    if (rank != 0) return 0;
    memset(&bs, 0, sizeof(bs));
    TH_OK(weft_config_load());
    int rc = weft_bootstrap_env_init(&bs, weft_wtime() + 3);
    TH_CHECK(rc != WEFT_SUCCESS && strstr(weft_last_error(), "in use"), "rc %d: %s", rc, weft_last_error());
    return 0;
}

Test(store, rank_0_serves_on_the_listening_socket_it_inherited, .timeout = 60)
{
    int port, fd = held_listener(&port);
    char p[32], f[32];
    snprintf(p, sizeof(p), "MASTER_PORT=%d", port);
    snprintf(f, sizeof(f), "WEFT_STORE_FD=%d", fd);
    const char *with[] = {p, f, NULL}, *without[] = {p, NULL};
    th_result_t res = th_run(3, body_inherited, NULL, 40, with);
    cr_expect_eq(res.failed, 0, "with the socket: %d ranks failed", res.failed);
    res = th_run(1, body_port_taken, NULL, 20, without);
    cr_expect_eq(res.failed, 0, "without it, rank 0 must find the port taken");
    close(fd);
}

/* A stale WEFT_STORE_FD (a job started from inside a rank, with a copy of
 * its environment but not its sockets) is ignored with a warning: rank 0
 * listens on MASTER_PORT itself, and the variable leaves the environment. */
typedef struct {
    const char *value;
    int rc;
    char msg[256];
} store_fd_case_t;

static void boot_with_store_fd(void *arg)
{
    store_fd_case_t *c = arg;
    weft_bootstrap_t bs = {0};
    setenv("WEFT_STORE_FD", c->value, 1);
    weft_config_load();
    c->rc = weft_bootstrap_env_init(&bs, weft_wtime() + 5);
    snprintf(c->msg, sizeof(c->msg), "%s", weft_last_error());
    if (c->rc == WEFT_SUCCESS) bs.finalize(&bs, 1, weft_wtime() + 5);
}

Test(store, a_store_fd_that_is_no_listening_socket_is_ignored, .timeout = 30)
{
    int port, lfd = held_listener(&port), other;
    close(lfd); /* the port is free again: only WEFT_STORE_FD is wrong */
    use_secret(TEST_SECRET);
    set_job_env_port("0", "1", "127.0.0.1", port);
    struct {
        const char *value;
        const char *needle;
    } cases[] = {{"abc", "is not a file descriptor"}, {"-3", "is not a file descriptor"}, {"0", "not listening"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        store_fd_case_t c = {.value = cases[i].value};
        char *err = th_stderr_of(boot_with_store_fd, &c);
        cr_expect_eq(c.rc, WEFT_SUCCESS, "WEFT_STORE_FD=%s: %d %s", cases[i].value, c.rc, c.msg);
        cr_expect(strstr(err, cases[i].needle) && strstr(err, "ignored"), "WEFT_STORE_FD=%s: %s", cases[i].value, err);
        cr_expect(!getenv("WEFT_STORE_FD"), "WEFT_STORE_FD=%s is still in the environment", cases[i].value);
        free(err);
    }
    /* a listening socket on another port */
    other = held_listener(&lfd);
    char v[16];
    snprintf(v, sizeof(v), "%d", other);
    store_fd_case_t c = {.value = v};
    char *err = th_stderr_of(boot_with_store_fd, &c);
    cr_expect(c.rc == WEFT_SUCCESS && strstr(err, "not MASTER_PORT"), "%d %s", c.rc, err);
    free(err);
    close(other);
    weft_config_load();
}

/* ------------------------------------------------------------------ */
/* Node relays: a node's ranks reach the store through one connection */
/* ------------------------------------------------------------------ */

/* Simulated nodes of `local` consecutive ranks, relays on. */
static void relay_env(int rank, int local)
{
    char b[16];
    snprintf(b, sizeof(b), "%d", rank % local);
    setenv("LOCAL_RANK", b, 1);
    snprintf(b, sizeof(b), "%d", local);
    setenv("LOCAL_WORLD_SIZE", b, 1);
    setenv("WEFT_STORE_RELAY", "on", 1);
}

/* Rank 0: its store held least to most connections at once (ranks' own
 * and relays'). */
static void check_store_conns(weft_bootstrap_t *bs, int least, int most, const char *which)
{
    weft_store_stats_t st;
    TH_OK(weft_bootstrap_env_store_stats(bs, &st));
    TH_CHECK((int)st.peak_conns >= least && (int)st.peak_conns <= most,
             "the store held %llu connections at once, %d to %d expected (%s)", (unsigned long long)st.peak_conns,
             least, most, which);
}

/* n ranks of body: none killed by the harness, none failed. */
static void run_ranks(int n, th_body_fn body, void *arg, double timeout_s)
{
    th_result_t res = th_run(n, body, arg, timeout_s, NULL);
    cr_assert(!res.timed_out, "%d ranks: the harness had to kill ranks", n);
    cr_assert_eq(res.failed, 0, "%d ranks: %d ranks failed", n, res.failed);
}

typedef struct relay_arg {
    int local;         /* ranks per node */
    int no_relay_rank; /* this rank runs without relays (-1: none) */
    int max_fds;       /* the store's connections at most */
} relay_arg_t;

/* Every kind of round (1 MiB ones span several ROUTE chunks), published
 * blobs fetched across nodes, a graceful goodbye; rank 0's store holds a
 * connection per node (and its own rank's). */
static int body_relay(int rank, int size, void *arg)
{
    const relay_arg_t *a = arg;
    weft_bootstrap_t bs;
    char blob[64];
    relay_env(rank, a->local);
    if (rank == a->no_relay_rank) setenv("WEFT_STORE_RELAY", "off", 1);
    boot(&bs, 30);
    TH_CHECK(bs.local_rank == rank % a->local && bs.local_size == a->local, "local %d/%d", bs.local_rank,
             bs.local_size);
    for (int i = 0; i < NROUNDS; i++)
        check_round(&bs, i, round_lens[i], weft_wtime() + 30);
    int n = snprintf(blob, sizeof(blob), "blob of rank %d", rank);
    TH_OK(bs.put(&bs, blob, (size_t)n + 1, weft_wtime() + 30));
    int peers[2] = {(rank + a->local) % size, (rank + 1) % size};
    void *got[2] = {NULL, NULL};
    size_t lens[2] = {0, 0};
    TH_OK(bs.get(&bs, peers, 2, got, lens, weft_wtime() + 30));
    for (int i = 0; i < 2; i++) {
        snprintf(blob, sizeof(blob), "blob of rank %d", peers[i]);
        TH_CHECK(got[i] && lens[i] == strlen(blob) + 1 && !strcmp(got[i], blob), "rank %d: rank %d's blob: %.*s",
                 rank, peers[i], (int)lens[i], got[i] ? (char *)got[i] : "");
        free(got[i]);
    }
    TH_OK(weft_bootstrap_barrier(&bs, weft_wtime() + 30));
    if (rank == 0) check_store_conns(&bs, 1, a->max_fds, "its own and the relays'");
    double t0 = weft_wtime();
    bs.finalize(&bs, 1, weft_wtime() + 20);
    TH_CHECK(weft_wtime() - t0 < 5, "rank %d: graceful finalize took %.1f s", rank, weft_wtime() - t0);
    return 0;
}

static void run_relay(int n, const relay_arg_t *a)
{
    run_ranks(n, body_relay, (void *)a, 50);
}

Test(store, ranks_reach_the_store_through_their_node_relay, .timeout = 60)
{
    /* two nodes of 4: rank 0 itself, node 0's relay, node 1's relay */
    relay_arg_t a = {.local = 4, .no_relay_rank = -1, .max_fds = 3};
    run_relay(8, &a);
}

Test(store, twelve_nodes_of_four_share_twelve_connections, .timeout = 60)
{
    relay_arg_t a = {.local = 4, .no_relay_rank = -1, .max_fds = 13};
    run_relay(48, &a);
}

/* Node 1's first rank runs no relay: its other rank looks for it for 3 s,
 * then connects directly, and the job runs as without relays. */
Test(store, a_rank_without_its_relay_connects_directly, .timeout = 60)
{
    relay_arg_t a = {.local = 2, .no_relay_rank = 2, .max_fds = 4};
    run_relay(4, &a);
}

/* A relay's member or a whole relay dies: the others are told who, as
 * when a rank's own connection closes. */
typedef struct relay_death_arg {
    int victim;
    const char *expect; /* in the survivors' error (the victim's node excepted when it was the relay) */
} relay_death_arg_t;

static int body_relay_death(int rank, int size, void *arg)
{
    const relay_death_arg_t *d = arg;
    weft_bootstrap_t bs;
    uint64_t v = (uint64_t)rank, out[16];
    int local = 4, victim_node = d->victim / local, leader = d->victim % local == 0;
    (void)size;
    relay_env(rank, local);
    boot(&bs, 20);
    for (int i = 0; i < 3; i++)
        check_round(&bs, i, 100, weft_wtime() + 20);
    if (rank == d->victim) {
        usleep(300 * 1000);
        _exit(0); /* no goodbye: its route (and, for a leader, its relay) closes */
    }
    double t0 = weft_wtime();
    int rc = bs.allgather(&bs, &v, out, sizeof(v), t0 + 15);
    double took = weft_wtime() - t0;
    TH_CHECK(rc != WEFT_SUCCESS, "rank %d: the round succeeded without rank %d", rank, d->victim);
    TH_CHECK(took < 5, "rank %d: took %.2f s to notice (deadline 15 s)", rank, took);
    if (!(leader && rank / local == victim_node)) {
        TH_CHECK(rc == WEFT_ERR_PEER_LOST, "rank %d: got %d (%s): %s", rank, rc, weft_strerror(rc),
                 weft_last_error());
        TH_CHECK(strstr(weft_last_error(), d->expect), "rank %d: message lacks \"%s\": %s", rank, d->expect,
                 weft_last_error());
    }
    bs.finalize(&bs, 0, 0);
    return 0;
}

static void run_relay_death(const relay_death_arg_t *d)
{
    run_ranks(8, body_relay_death, (void *)d, 40);
}

Test(store, a_rank_lost_behind_a_relay_is_named, .timeout = 60)
{
    relay_death_arg_t d = {.victim = 6, .expect = "rank 6 disconnected"};
    run_relay_death(&d);
}

Test(store, a_lost_relay_loses_its_node, .timeout = 60)
{
    relay_death_arg_t d = {.victim = 4, .expect = "lost its node relay"};
    run_relay_death(&d);
}

/* The name of the relay led by `leader` in this rank's job of `size` ranks. */
static void relay_addr(int size, int leader, struct sockaddr_un *sa, unsigned *len)
{
    weft_job_key_t key;
    char where[64];
    load_key(&key);
    snprintf(where, sizeof(where), "%s:%s", getenv("MASTER_ADDR"), getenv("MASTER_PORT"));
    weft_env_relay_addr(key.key, size, leader, where, sa, len);
}

/* n ranks of body, as root (it acts as another user too). */
static void run_as_root(int n, th_body_fn body)
{
    if (geteuid() != 0) cr_skip_test("needs root to act as another user");
    run_ranks(n, body, NULL, 40);
}

/* The relay takes connections only from its own user's processes: another
 * user who learned its name is closed on at once, and the job goes on. */
static int body_relay_stranger(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    (void)size, (void)arg;
    relay_env(rank, 2);
    boot(&bs, 20);
    check_round(&bs, 0, 16, weft_wtime() + 20);
    if (rank == 0) {
        struct sockaddr_un sa;
        unsigned len;
        relay_addr(2, 0, &sa, &len);
        pid_t pid = fork();
        if (pid == 0) {
            if (setuid(65534) != 0) _exit(3);
            int fd = socket(AF_UNIX, SOCK_STREAM, 0);
            if (fd < 0 || connect(fd, (struct sockaddr *)&sa, len) != 0) _exit(4);
            struct timeval tv = {.tv_sec = 5};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
            uint8_t junk[64] = {0};
            (void)send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
            char c;
            ssize_t k = recv(fd, &c, 1, 0); /* closed at once (reset: our bytes were unread), no byte, no wait */
            _exit(k == 0 || (k < 0 && errno == ECONNRESET) ? 0 : 5);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        TH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "another user's connection to the relay: status %d",
                 WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    check_round(&bs, 1, 16, weft_wtime() + 20);
    bs.finalize(&bs, 1, weft_wtime() + 10);
    return 0;
}

Test(store, a_relay_refuses_other_users, .timeout = 60)
{
    run_as_root(2, body_relay_stranger);
}

/* Another user who learned a relay's name (it shows in /proc/net/unix, and
 * a job secret may be reused) binds it first and never answers: the ranks
 * see the socket is not their user's and connect directly, at once. */
static int body_relay_squatter(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    pid_t squatter = -1;
    (void)size, (void)arg;
    relay_env(rank, 2);
    if (rank == 0) {
        struct sockaddr_un sa;
        unsigned len;
        int ready[2];
        relay_addr(4, 2, &sa, &len); /* node 1's relay, led by rank 2 */
        TH_CHECK(pipe(ready) == 0, "pipe");
        squatter = fork();
        if (squatter == 0) {
            int fd = socket(AF_UNIX, SOCK_STREAM, 0);
            if (setuid(65534) != 0 || fd < 0 || bind(fd, (struct sockaddr *)&sa, len) != 0 || listen(fd, 16) != 0)
                _exit(3);
            (void)write(ready[1], "x", 1);
            for (;;)
                pause(); /* holds whoever connects, silent */
        }
        char c;
        TH_CHECK(read(ready[0], &c, 1) == 1, "the squatter did not bind");
    } else if (rank >= 2) {
        usleep(500 * 1000); /* the squatter binds first */
    }
    double t0 = weft_wtime();
    boot(&bs, 20);
    TH_CHECK(weft_wtime() - t0 < 5, "rank %d: init took %.1f s", rank, weft_wtime() - t0);
    check_round(&bs, 0, 64, weft_wtime() + 20);
    if (rank == 0) check_store_conns(&bs, 4, 4, "rank 0, node 0's relay, ranks 2 and 3");
    bs.finalize(&bs, 1, weft_wtime() + 10);
    if (squatter > 0) {
        kill(squatter, SIGKILL);
        waitpid(squatter, NULL, 0);
    }
    return 0;
}

Test(store, a_relay_name_another_user_holds_is_passed_by, .timeout = 60)
{
    run_as_root(4, body_relay_squatter);
}

/* A stranger that speaks the relays' protocol on the store's port: 300
 * connections that say RELAY and carry nobody (more than the table holds),
 * and one that opens route after route and never reads the answers. The
 * ranks still get in (memberless relays are evicted like any stranger),
 * and the store drops the second one (it queued answers for it without
 * end before). */
static int stranger_relays(const char *done)
{
    enum { FLOOD = 280, CYCLES = 500 };
    static int fds[FLOOD];
    uint8_t b[WIRE_HDR + STORE_NONCE];
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < FLOOD; i++) {
        TH_CHECK((fds[i] = connect_store(weft_wtime() + 10)) >= 0, "connection %d: %s", i, strerror(errno));
        wire_pack(b, K_RELAY, 0, REAL_RANKS, 0, 0, 0);
        (void)send(fds[i], b, WIRE_HDR, MSG_NOSIGNAL);
    }
    int fd = connect_store(weft_wtime() + 10);
    TH_CHECK(fd >= 0, "connect");
    int small = 4096;
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    wire_pack(b, K_RELAY, 0, REAL_RANKS, 0, 0, 0);
    (void)send(fd, b, WIRE_HDR, MSG_NOSIGNAL);
    int cycles = 0;
    for (; cycles < CYCLES; cycles++) { /* a HELLO on route 0, then its close: the number is free again */
        uint8_t m[3 * WIRE_HDR + STORE_NONCE];
        weft_env_hdr_pack(m, K_ROUTE, 0, 0, 0, ROUTE_DATA, WIRE_HDR + STORE_NONCE);
        wire_pack(m + WIRE_HDR, W_HELLO, 1, REAL_RANKS, 0, FLAG_KEYED, STORE_NONCE);
        memset(m + 2 * WIRE_HDR, 7, STORE_NONCE);
        weft_env_hdr_pack(m + 2 * WIRE_HDR + STORE_NONCE, K_ROUTE, 0, 0, 0, ROUTE_CLOSE, 0);
        if (send(fd, m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(m)) break;
    }
    size_t got;
    uint8_t junk[1];
    /* dropped for its routes or its unread answers at once, or by the sweep (10 s without a member) */
    TH_CHECK(closed_by_store(fd, 15, junk, 0, &got), "the store kept a relay that opens routes for nobody (%d cycles)",
             cycles);
    int f = open(done, O_CREAT | O_WRONLY, 0600); /* the ranks may come */
    if (f >= 0) close(f);
    usleep(3000 * 1000); /* the flood stays while the ranks join */
    for (int i = 0; i < FLOOD; i++)
        close(fds[i]);
    close(fd);
    return 0;
}

static int body_with_stranger_relays(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    const char *done = arg;
    if (rank == size - 1) return stranger_relays(done);
    relay_env(rank, 2);
    for (double t0 = weft_wtime(); rank > 0 && access(done, F_OK) != 0 && weft_wtime() - t0 < 20;)
        usleep(10 * 1000); /* the flood comes first */
    boot(&bs, 20);
    for (int i = 0; i < 10; i++)
        check_round(&bs, i, (size_t)(i * 7), weft_wtime() + 20);
    bs.finalize(&bs, 1, weft_wtime() + 10);
    return 0;
}

Test(store, a_stranger_relay_neither_locks_ranks_out_nor_grows_the_store, .timeout = 60)
{
    char done[64];
    snprintf(done, sizeof(done), "/tmp/weft-test-flooded.%d", (int)getpid());
    unlink(done);
    th_result_t res = th_run(REAL_RANKS + 1, body_with_stranger_relays, done, 50, (const char *const *)stranger_env);
    unlink(done);
    cr_assert(!res.timed_out);
    for (int r = 0; r < REAL_RANKS; r++)
        cr_expect_eq(res.exit_code[r], 0, "rank %d failed", r);
    cr_assert_eq(res.exit_code[REAL_RANKS], 0, "the stranger's checks failed");
}

/* Two nodes of 32 ranks, the store late: node 1's relay holds its ranks'
 * HELLOs until it reaches the store, then sends them at once, far more
 * routes than a relay may open before one becomes a member when it
 * carries few ranks (the store allows two per local rank, and 16). */
static int body_big_node(int rank, int size, void *arg)
{
    weft_bootstrap_t bs;
    (void)arg, (void)size;
    relay_env(rank, 32);
    if (rank == 0) usleep(1500 * 1000);
    boot(&bs, 40);
    check_round(&bs, 0, 8, weft_wtime() + 40);
    if (rank == 0) check_store_conns(&bs, 3, 3, "rank 0 and two relays");
    bs.finalize(&bs, 1, weft_wtime() + 20);
    return 0;
}

Test(store, a_node_of_32_ranks_comes_through_its_relay_at_once, .timeout = 60)
{
    run_ranks(64, body_big_node, NULL, 55);
}
