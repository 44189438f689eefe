/* Multi-rank point-to-point behaviour, ranks forked by the harness with
 * the env bootstrap on 127.0.0.1. */
#include "harness.h"
#include "pt2pt/pt2pt.h"
#include "weft.h"
#include "weft_internal.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RUN(n, body, arg, timeout, env)                                                                                \
    do {                                                                                                               \
        th_result_t res_ = th_run((n), (body), (arg), (timeout), (env));                                               \
        cr_assert_eq(res_.timed_out, 0, "ranks hung");                                                                 \
        for (int r_ = 0; r_ < (n); r_++)                                                                               \
            cr_expect_eq(res_.exit_code[r_], 0, "rank %d failed", r_);                                                 \
        cr_assert_eq(res_.failed, 0);                                                                                  \
    } while (0)

static weft_comm_t start(int *rank, int *size)
{
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t world = weft_comm_world();
    TH_OK(weft_comm_rank(world, rank));
    TH_OK(weft_comm_size(world, size));
    return world;
}

/* ---- every size from 0 B to 64 MiB, both directions ------------------- */
static int body_sizes(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    TH_CHECK(me == rank && n == size, "rank %d size %d", me, n);
    static const size_t sizes[] = {0,     1,     7,      64,      1000,    4096,     8192,
                                   65536, 65537, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t bytes = sizes[i];
        char *buf = malloc(bytes + 1);
        TH_CHECK(buf, "malloc %zu", bytes);
        unsigned seed = (unsigned)(i * 7 + 1);
        if (rank == 0) {
            th_fill(buf, bytes, seed);
            TH_OK(weft_send(buf, (int64_t)bytes, WEFT_BYTE, 1, (int)i, w));
            memset(buf, 0, bytes);
            weft_status_t st;
            TH_OK(weft_recv(buf, (int64_t)bytes, WEFT_BYTE, 1, (int)i, w, &st));
            TH_CHECK(st.bytes == bytes, "echo of %zu bytes came back with %llu", bytes, (unsigned long long)st.bytes);
            size_t bad = 0;
            TH_CHECK(th_verify(buf, bytes, seed + 1, &bad), "size %zu: byte %zu differs", bytes, bad);
        } else {
            weft_status_t st;
            TH_OK(weft_recv(buf, (int64_t)bytes, WEFT_BYTE, 0, (int)i, w, &st));
            TH_CHECK(st.bytes == bytes && st.source == 0 && st.tag == (int)i, "status %llu/%d/%d",
                     (unsigned long long)st.bytes, st.source, st.tag);
            size_t bad = 0;
            TH_CHECK(th_verify(buf, bytes, seed, &bad), "size %zu: byte %zu differs", bytes, bad);
            th_fill(buf, bytes, seed + 1);
            TH_OK(weft_send(buf, (int64_t)bytes, WEFT_BYTE, 0, (int)i, w));
        }
        free(buf);
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(p2p, sizes_0B_to_64MiB, .timeout = 120)
{
    RUN(2, body_sizes, NULL, 100, NULL);
}

/* ---- ANY_SOURCE / ANY_TAG --------------------------------------------- */
static int body_any(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    if (rank == 0) {
        int seen[64] = {0};
        for (int k = 1; k < size; k++) {
            int64_t v[2];
            weft_status_t st;
            TH_OK(weft_recv(v, 2, WEFT_INT64, WEFT_ANY_SOURCE, WEFT_ANY_TAG, w, &st));
            TH_CHECK(st.source >= 1 && st.source < size, "source %d", st.source);
            TH_CHECK(st.tag == 100 + st.source, "tag %d from %d", st.tag, st.source);
            TH_CHECK(v[0] == st.source && v[1] == -st.source, "payload from %d", st.source);
            TH_CHECK(st.bytes == 16, "bytes %llu", (unsigned long long)st.bytes);
            TH_CHECK(!seen[st.source], "rank %d twice", st.source);
            seen[st.source] = 1;
        }
        /* ANY_TAG from a named source, ANY_SOURCE with a named tag. */
        for (int k = 1; k < size; k++)
            TH_OK(weft_send(&k, 1, WEFT_INT32, k, 1, w));
        for (int k = 1; k < size; k++) {
            int v;
            weft_status_t st;
            TH_OK(weft_recv(&v, 1, WEFT_INT32, k, WEFT_ANY_TAG, w, &st));
            TH_CHECK(v == k * 3 && st.tag == 7 && st.source == k, "v %d tag %d", v, st.tag);
        }
        for (int k = 1; k < size; k++) {
            int v;
            weft_status_t st;
            TH_OK(weft_recv(&v, 1, WEFT_INT32, WEFT_ANY_SOURCE, 8, w, &st));
            TH_CHECK(v == st.source * 5, "v %d from %d", v, st.source);
        }
    } else {
        int64_t v[2] = {rank, -rank};
        TH_OK(weft_send(v, 2, WEFT_INT64, 0, 100 + rank, w));
        int a = rank * 3, b = rank * 5, go;
        TH_OK(weft_recv(&go, 1, WEFT_INT32, 0, 1, w, NULL));
        TH_OK(weft_send(&a, 1, WEFT_INT32, 0, 7, w));
        TH_OK(weft_send(&b, 1, WEFT_INT32, 0, 8, w));
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(p2p, any_source_any_tag, .timeout = 60)
{
    RUN(4, body_any, NULL, 50, NULL);
}

Test(p2p, any_source_with_eager_connect, .timeout = 60)
{
    const char *env[] = {"WEFT_EAGER_CONNECT=1", NULL};
    RUN(5, body_any, NULL, 50, env);
}

/* ---- addresses fetched on demand (WEFT_ADDRESSES_AT_INIT=0) ------------- */
/* Every rank publishes its address at init and a rank fetches a peer's when
 * it first makes an endpoint to it: a ring exchange fetches one address (the
 * right neighbour's), an allreduce by recursive doubling a few more in one
 * request when its schedule starts, and never all of them. */
static int body_on_demand(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    TH_CHECK(weft_g.p2p->fetched == 0, "rank %d fetched %llu addresses at init", rank,
             (unsigned long long)weft_g.p2p->fetched);
    int right = (rank + 1) % size, left = (rank + size - 1) % size, in = -1;
    TH_OK(weft_sendrecv(&rank, 1, WEFT_INT32, right, 0, &in, 1, WEFT_INT32, left, 0, w, NULL));
    TH_CHECK(in == left, "in %d", in);
    TH_CHECK(weft_g.p2p->fetched == (right == rank ? 0u : 1u), "rank %d fetched %llu addresses for one neighbour",
             rank, (unsigned long long)weft_g.p2p->fetched);
    weft_comm_t rd = th_forced(w, "allreduce", "recursive_doubling");
    int64_t x = rank + 1, sum = 0;
    TH_OK(weft_allreduce(&x, &sum, 1, WEFT_INT64, WEFT_SUM, rd));
    TH_CHECK(sum == (int64_t)size * (size + 1) / 2, "sum %lld", (long long)sum);
    /* the right neighbour, and log2(size) peers for each of the dup's exchanges and the allreduce */
    TH_CHECK(weft_g.p2p->fetched <= 9 && weft_g.p2p->fetched < (uint64_t)size - 1,
             "rank %d fetched %llu of %d addresses", rank, (unsigned long long)weft_g.p2p->fetched, size - 1);
    weft_comm_t half;
    TH_OK(weft_comm_split(w, rank % 2, -rank, WEFT_OPTIONS_NULL, &half));
    TH_OK(weft_allreduce(&x, &sum, 1, WEFT_INT64, WEFT_SUM, half));
    TH_OK(weft_comm_free(&half));
    TH_OK(weft_comm_free(&rd));
    TH_OK(weft_finalize());
    return 0;
}

Test(p2p, addresses_on_demand, .timeout = 60)
{
    const char *env[] = {"WEFT_ADDRESSES_AT_INIT=0", NULL};
    RUN(16, body_on_demand, NULL, 50, env);
}

/* Each rank fetches every address right after publishing its own: most
 * are not in rank 0's store yet, and the store answers when they come. */
Test(p2p, addresses_on_demand_with_eager_connect, .timeout = 60)
{
    const char *env[] = {"WEFT_ADDRESSES_AT_INIT=0", "WEFT_EAGER_CONNECT=1", NULL};
    RUN(6, body_any, NULL, 50, env);
}

/* ---- ordering: same pair, same tag, eager and rendezvous mixed --------- */
#define NORDER 300
static int body_order(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    int me, n;
    weft_comm_t w = start(&me, &n);
    /* Every 10th message is large enough for rendezvous. */
    size_t big = 256 * 1024;
    char *bufs = malloc(NORDER * big);
    weft_request_t reqs[NORDER];
    TH_CHECK(bufs, "malloc");
    if (rank == 0) {
        for (int i = 0; i < NORDER; i++) {
            size_t len = i % 10 == 0 ? big : 8 + (size_t)i;
            char *b = bufs + (size_t)i * big;
            th_fill(b, len, (unsigned)i);
            memcpy(b, &i, sizeof(i));
            TH_OK(weft_isend(b, (int64_t)len, WEFT_BYTE, 1, 5, w, &reqs[i]));
        }
        TH_OK(weft_waitall(NORDER, reqs, NULL));
    } else {
        for (int i = 0; i < NORDER; i++)
            TH_OK(weft_irecv(bufs + (size_t)i * big, (int64_t)big, WEFT_BYTE, 0, 5, w, &reqs[i]));
        weft_status_t st[NORDER];
        TH_OK(weft_waitall(NORDER, reqs, st));
        for (int i = 0; i < NORDER; i++) {
            int seq;
            memcpy(&seq, bufs + (size_t)i * big, sizeof(seq));
            TH_CHECK(seq == i, "message %d arrived as %d", seq, i);
            size_t len = i % 10 == 0 ? big : 8 + (size_t)i;
            TH_CHECK(st[i].bytes == len, "message %d: %llu bytes", i, (unsigned long long)st[i].bytes);
        }
    }
    free(bufs);
    TH_OK(weft_finalize());
    return 0;
}

Test(p2p, ordering_between_a_pair, .timeout = 60)
{
    RUN(2, body_order, NULL, 50, NULL);
}

/* ---- truncation across ranks ------------------------------------------ */
static int body_trunc(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    int me, n;
    weft_comm_t w = start(&me, &n);
    static const size_t lens[] = {16, 4096, 1 << 20};
    for (int i = 0; i < 3; i++) {
        size_t len = lens[i];
        char *b = malloc(len + 128);
        if (rank == 0) {
            memset(b, 0x5A, len);
            TH_OK(weft_send(b, (int64_t)len, WEFT_BYTE, 1, i, w));
        } else {
            memset(b, 0x11, len + 128);
            weft_status_t st;
            int rc = weft_recv(b, (int64_t)(len / 2), WEFT_BYTE, 0, i, w, &st);
            TH_CHECK(rc == WEFT_ERR_TRUNCATE, "len %zu: rc %d", len, rc);
            TH_CHECK(strstr(weft_last_error(), "does not fit"), "%s", weft_last_error());
            for (size_t k = len / 2; k < len + 128; k++)
                TH_CHECK(b[k] == 0x11, "len %zu: byte %zu overwritten", len, k);
        }
        free(b);
        /* The pair stays usable after a truncation. */
        int v = 41 + i;
        if (rank == 0)
            TH_OK(weft_send(&v, 1, WEFT_INT32, 1, 99, w));
        else {
            int got = 0;
            TH_OK(weft_recv(&got, 1, WEFT_INT32, 0, 99, w, NULL));
            TH_CHECK(got == 41 + i, "got %d", got);
        }
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(p2p, truncation_across_ranks, .timeout = 60)
{
    RUN(2, body_trunc, NULL, 50, NULL);
}

/* ---- wait deadlines: a late message ----------------------------------- */
static int body_deadline(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    int me, n;
    weft_comm_t w = start(&me, &n);
    if (rank == 0) {
        int v = 77;
        usleep(800 * 1000);
        TH_OK(weft_send(&v, 1, WEFT_INT32, 1, 1, w));
    } else {
        int v = 0;
        weft_request_t r;
        weft_status_t st;
        TH_OK(weft_irecv(&v, 1, WEFT_INT32, 0, 1, w, &r));
        double t0 = weft_wtime();
        int rc = weft_wait_timeout(&r, 0.2, &st);
        double dt = weft_wtime() - t0;
        TH_CHECK(rc == WEFT_ERR_TIMEOUT, "rc %d", rc);
        TH_CHECK(dt >= 0.2 && dt < 3.0, "waited %.3f s", dt);
        TH_CHECK(r != WEFT_REQUEST_NULL, "request released on timeout");
        TH_CHECK(strstr(weft_last_error(), "rank 0"), "%s", weft_last_error());
        TH_OK(weft_wait_timeout(&r, 10, &st));
        TH_CHECK(v == 77 && st.source == 0, "v %d", v);
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(p2p, wait_deadline_then_success, .timeout = 60)
{
    RUN(2, body_deadline, NULL, 50, NULL);
}

/* Sends that nobody ever receives (an erroneous program, as MPI's
 * finalize with pending sends): the receiver's finalize drops them with a
 * warning, so they complete and both finalizes end at once, not at the
 * deadline (WEFT_TIMEOUT is long here: a finalize that waited for them
 * would be killed by the harness); nobody crashes. A rendezvous one from
 * a first message (its endpoint's wire-up not done when the receiver
 * arrives at finalize) and eager ones. */
static int body_undelivered(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    int me, n;
    weft_comm_t w = start(&me, &n);
    size_t len = (size_t)4 << 20;
    char *b = calloc(len, 1);
    TH_CHECK(b != NULL, "4 MiB");
    if (rank == 0) {
        weft_request_t r;
        TH_OK(weft_isend(b, (int64_t)len, WEFT_BYTE, 1, 5, w, &r));
        TH_OK(weft_request_free(&r));
        for (int i = 0; i < 3; i++) {
            TH_OK(weft_isend(b, 8, WEFT_BYTE, 1, 6, w, &r));
            TH_OK(weft_request_free(&r));
        }
        int rc = weft_finalize();
        TH_CHECK(rc == WEFT_SUCCESS, "finalize with sends nobody received: %d (%s)", rc, weft_last_error());
    } else {
        int rc = weft_finalize();
        TH_CHECK(rc == WEFT_SUCCESS, "finalize beside them: %d (%s)", rc, weft_last_error());
    }
    free(b); /* only now: UCX may read it until the sender's endpoint is closed */
    return 0;
}

Test(p2p, undelivered_send_at_finalize, .timeout = 60)
{
    const char *env[] = {"WEFT_TIMEOUT=300", "WEFT_LOG_LEVEL=error", NULL};
    RUN(2, body_undelivered, NULL, 30, env);
}

/* ---- probe / iprobe --------------------------------------------------- */
static int body_probe(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    if (rank != 0) {
        size_t len = 1000u * (unsigned)rank;
        char *b = malloc(len);
        th_fill(b, len, (unsigned)rank);
        TH_OK(weft_send(b, (int64_t)len, WEFT_BYTE, 0, 30 + rank, w));
        free(b);
    } else {
        int flag = 1;
        weft_status_t st;
        TH_OK(weft_iprobe(0, 12345, w, &flag, &st));
        TH_CHECK(flag == 0, "iprobe found a message nobody sent");
        for (int k = 1; k < size; k++) {
            TH_OK(weft_probe(WEFT_ANY_SOURCE, WEFT_ANY_TAG, w, &st));
            TH_CHECK(st.bytes == 1000u * (unsigned)st.source && st.tag == 30 + st.source, "probe %llu from %d",
                     (unsigned long long)st.bytes, st.source);
            char *b = malloc(st.bytes);
            weft_status_t st2;
            TH_OK(weft_recv(b, (int64_t)st.bytes, WEFT_BYTE, st.source, st.tag, w, &st2));
            TH_CHECK(th_verify(b, st.bytes, (unsigned)st.source, NULL), "payload from %d", st.source);
            free(b);
        }
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(p2p, probe_then_receive, .timeout = 60)
{
    RUN(3, body_probe, NULL, 50, NULL);
}

/* ---- sendrecv around a non-power-of-two ring; all-pairs exchange ------- */
static int body_exchange(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int64_t out = rank * 1000, in = -1;
    weft_status_t st;
    TH_OK(weft_sendrecv(&out, 1, WEFT_INT64, right, 4, &in, 1, WEFT_INT64, left, 4, w, &st));
    TH_CHECK(in == left * 1000 && st.source == left, "in %lld", (long long)in);
    /* Every rank to every rank, all nonblocking, then one waitall. */
    int32_t *sendv = malloc(sizeof(int32_t) * (size_t)size), *recvv = malloc(sizeof(int32_t) * (size_t)size);
    weft_request_t *reqs = malloc(sizeof(weft_request_t) * 2 * (size_t)size);
    for (int p = 0; p < size; p++) {
        sendv[p] = rank * 100 + p;
        TH_OK(weft_irecv(&recvv[p], 1, WEFT_INT32, p, 6, w, &reqs[p]));
    }
    for (int p = 0; p < size; p++)
        TH_OK(weft_isend(&sendv[p], 1, WEFT_INT32, p, 6, w, &reqs[size + p]));
    TH_OK(weft_waitall(2 * size, reqs, NULL));
    for (int p = 0; p < size; p++)
        TH_CHECK(recvv[p] == p * 100 + rank, "from %d: %d", p, recvv[p]);
    /* weft_test polls to completion. */
    int flag = 0, v = rank, got = -1;
    weft_request_t r;
    TH_OK(weft_irecv(&got, 1, WEFT_INT32, left, 9, w, &r));
    TH_OK(weft_send(&v, 1, WEFT_INT32, right, 9, w));
    while (!flag)
        TH_OK(weft_test(&r, &flag, NULL));
    TH_CHECK(got == left && r == WEFT_REQUEST_NULL, "got %d", got);
    free(sendv);
    free(recvv);
    free(reqs);
    TH_OK(weft_finalize());
    return 0;
}

Test(p2p, sendrecv_and_all_pairs_on_5_and_8_ranks, .timeout = 90)
{
    RUN(5, body_exchange, NULL, 60, NULL);
    RUN(8, body_exchange, NULL, 80, NULL);
}

/* ---- a peer dies: the survivor gets an error naming it, within the timeout */
static int body_peer_dies(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    int me, n;
    weft_comm_t w = start(&me, &n);
    int v = 1;
    /* Connect both ways first, as a running job would be. */
    if (rank == 0) {
        TH_OK(weft_send(&v, 1, WEFT_INT32, 1, 0, w));
        TH_OK(weft_recv(&v, 1, WEFT_INT32, 1, 0, w, NULL));
        TH_OK(weft_comm_set_timeout(w, 8));
        double t0 = weft_wtime();
        int rc = weft_recv(&v, 1, WEFT_INT32, 1, 1, w, NULL);
        double dt = weft_wtime() - t0;
        TH_CHECK(rc == WEFT_ERR_PEER_LOST || rc == WEFT_ERR_TIMEOUT, "rc %d", rc);
        TH_CHECK(dt < 9.5, "took %.1f s", dt);
        TH_CHECK(strstr(weft_last_error(), "rank 1"), "error does not name rank 1: %s", weft_last_error());
        /* finalize must not hang on the dead peer either. */
        weft_finalize();
    } else {
        TH_OK(weft_recv(&v, 1, WEFT_INT32, 0, 0, w, NULL));
        TH_OK(weft_send(&v, 1, WEFT_INT32, 0, 0, w));
        usleep(100 * 1000);
        kill(getpid(), SIGKILL);
    }
    return 0;
}

Test(p2p, peer_killed_mid_wait, .timeout = 90)
{
    const char *env[] = {"WEFT_TIMEOUT=8", NULL};
    th_result_t res = th_run(2, body_peer_dies, NULL, 60, env);
    cr_assert_eq(res.timed_out, 0, "the survivor hung");
    cr_assert_eq(res.exit_code[0], 0, "rank 0 did not see the loss correctly");
    cr_assert_eq(res.exit_code[1], 128 + SIGKILL);
}
