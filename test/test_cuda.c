/* Device buffers in point-to-point, on the one GPU of the host: 2-4 ranks
 * share device 0 (CUDA IPC between processes on one device works). Every
 * case runs three times: WEFT_CUDA=staged (pinned host chunks),
 * WEFT_CUDA=auto (UCX's CUDA transports when the UCX in use carries them,
 * except messages up to WEFT_CUDA_SMALL, staged: the two ends of one
 * message may take different paths) and auto with WEFT_CUDA_SMALL=0 (UCX
 * for every size). Without a driver or a device each test is skipped, with
 * the reason. */
#include "gpu.h"
#include "harness.h"
#include "weft.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const paths[] = {"WEFT_CUDA=staged", "WEFT_CUDA=auto", "WEFT_CUDA_SMALL=0"};

/* Runs body on n ranks under each path (extra: up to two more variables, or NULL). */
static void run_paths(int n, th_body_fn body, void *arg, const char *const *extra)
{
    GPU_NEED();
    const char *level = gpu_log_level_env();
    for (int p = 0; p < 3; p++) {
        const char *env[] = {
            level, "WEFT_TIMEOUT=60", paths[p], extra ? extra[0] : NULL, extra && extra[0] ? extra[1] : NULL, NULL};
        th_result_t res = th_run(n, body, arg, 120, env);
        cr_assert_eq(res.timed_out, 0, "%s: hung", paths[p]);
        cr_assert_eq(res.failed, 0, "%s: %d of %d ranks failed", paths[p], res.failed, n);
    }
}

static unsigned char pattern(int src, size_t i, size_t n)
{
    return (unsigned char)((unsigned)src * 131u + (unsigned)(i * 7u) + (unsigned)n);
}

/* A buffer of n bytes on the device (dev) or the host, holding the pattern
 * of src (src >= 0) or filled with 0xee. */
static void *buffer(int dev, size_t n, int src)
{
    unsigned char *h = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        h[i] = src >= 0 ? pattern(src, i, n) : 0xee;
    if (!dev) return h;
    void *d = gpu_alloc(n);
    if (!d || gpu_upload(d, h, n)) {
        fprintf(stderr, "device allocation / upload of %zu bytes failed\n", n);
        exit(1);
    }
    free(h);
    return d;
}

static void release(int dev, void *p)
{
    if (dev)
        gpu_free(p);
    else
        free(p);
}

/* 0 when buf (device or host) holds src's pattern, else the first bad index + 1. */
static size_t verify(int dev, const void *buf, size_t n, int src)
{
    const unsigned char *h = buf;
    unsigned char *copy = NULL;
    if (dev) {
        copy = malloc(n ? n : 1);
        if (gpu_download(copy, buf, n)) return 1;
        h = copy;
    }
    size_t bad = 0;
    for (size_t i = 0; i < n && !bad; i++)
        if (h[i] != pattern(src, i, n)) {
            bad = i + 1;
            fprintf(stderr, "byte %zu of %zu: 0x%02x where 0x%02x was sent\n", i, n, h[i], pattern(src, i, n));
        }
    free(copy);
    return bad;
}

/* ---- sizes x placements in a ring ------------------------------------------ */

/* 1 B to 3 MiB: inline, eager, one staging chunk exactly, one byte more,
 * many chunks (pipelined); D->D, H->D, D->H. */
static const size_t sizes[] = {1, 8, 4095, 65539, 524288, 524289, 3 * 1048576 + 7};

static int body_ring(int rank, int size, void *arg)
{
    (void)arg;
    weft_comm_t w = gpu_weft_start();
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    static const int place[3][2] = {{1, 1}, {0, 1}, {1, 0}}; /* {send on device, receive on device} */
    for (int p = 0; p < 3; p++)
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            size_t n = sizes[k];
            void *s = buffer(place[p][0], n, rank), *r = buffer(place[p][1], n, -1);
            weft_status_t st;
            TH_OK(
                weft_sendrecv(s, (int64_t)n, WEFT_BYTE, right, (int)k, r, (int64_t)n, WEFT_BYTE, left, (int)k, w, &st));
            TH_CHECK(st.bytes == n && st.source == left, "%zu bytes: status %zu bytes from %d", n, st.bytes, st.source);
            size_t bad = verify(place[p][1], r, n, left);
            TH_CHECK(!bad, "placement %d, %zu bytes: byte %zu differs", p, n, bad - 1);
            release(place[p][0], s);
            release(place[p][1], r);
        }
    TH_OK(weft_finalize());
    return 0;
}

Test(cuda, ring_2_ranks, .timeout = 300)
{
    run_paths(2, body_ring, NULL, NULL);
}

Test(cuda, ring_4_ranks, .timeout = 300)
{
    run_paths(4, body_ring, NULL, NULL);
}

/* Small chunks: a 3 MiB message runs through 96 chunks, 2 in flight. */
Test(cuda, ring_small_chunks, .timeout = 300)
{
    static const char *const small[] = {"WEFT_CUDA_STAGE_CHUNK=32768", "WEFT_CUDA_STAGE_DEPTH=2"};
    run_paths(2, body_ring, NULL, small);
}

/* ---- ANY_SOURCE / ANY_TAG and order ------------------------------------------ */

enum { PER_SENDER = 4 };

static size_t any_len(int seq)
{
    return seq % 2 ? 700 * 1024 + 3 : 16; /* staged in chunks, and inline */
}

static int body_any(int rank, int size, void *arg)
{
    (void)arg;
    weft_comm_t w = gpu_weft_start();
    if (rank) {
        for (int seq = 0; seq < PER_SENDER; seq++) {
            size_t n = any_len(seq);
            void *s = buffer(1, n, rank * 100 + seq);
            TH_OK(weft_send(s, (int64_t)n, WEFT_BYTE, 0, seq, w));
            release(1, s);
        }
    } else {
        int next[64] = {0};
        void *r = buffer(1, any_len(1), -1);
        for (int i = 0; i < (size - 1) * PER_SENDER; i++) {
            weft_status_t st;
            TH_OK(weft_recv(r, (int64_t)any_len(1), WEFT_BYTE, WEFT_ANY_SOURCE, WEFT_ANY_TAG, w, &st));
            TH_CHECK(st.source > 0 && st.source < size, "source %d", st.source);
            int seq = next[st.source]++;
            TH_CHECK(st.tag == seq, "from rank %d: tag %d where %d was next (order lost)", st.source, st.tag, seq);
            TH_CHECK(st.bytes == any_len(seq), "from rank %d: %zu bytes", st.source, st.bytes);
            size_t bad = verify(1, r, st.bytes, st.source * 100 + seq);
            TH_CHECK(!bad, "from rank %d, message %d: byte %zu differs", st.source, seq, bad - 1);
        }
        release(1, r);
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(cuda, any_source_keeps_order, .timeout = 300)
{
    run_paths(4, body_any, NULL, NULL);
}

/* ---- truncation, probe, timeout, cancel ---------------------------------------- */

static int body_edges(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    weft_comm_t w = gpu_weft_start();
    size_t big = 1 << 20;
    void *s = buffer(1, big, rank), *r = buffer(1, big, -1);
    weft_status_t st;
    weft_options_t o;
    weft_comm_t quick; /* a short deadline (the dup is collective: both ranks make it) */
    TH_OK(weft_options_create(&o));
    TH_OK(weft_options_set_timeout(o, 0.5));
    TH_OK(weft_comm_dup(w, o, &quick));
    TH_OK(weft_options_free(&o));
    if (rank == 1) {
        TH_OK(weft_send(s, (int64_t)big, WEFT_BYTE, 0, 1, w)); /* truncated at rank 0 */
        void *p = buffer(1, 100000, rank);
        TH_OK(weft_send(p, 100000, WEFT_BYTE, 0, 2, w)); /* probed */
        release(1, p);
    } else {
        int rc = weft_recv(r, 4096, WEFT_BYTE, 1, 1, w, &st);
        TH_CHECK(rc == WEFT_ERR_TRUNCATE, "a 1 MiB message into a 4 KiB device buffer returned %d (%s)", rc,
                 weft_last_error());
        TH_OK(weft_probe(1, 2, w, &st));
        TH_CHECK(st.bytes == 100000 && st.tag == 2, "probe: %zu bytes, tag %d", st.bytes, st.tag);
        TH_OK(weft_recv(r, (int64_t)big, WEFT_BYTE, 1, 2, w, &st));
        size_t bad = verify(1, r, 100000, 1);
        TH_CHECK(st.bytes == 100000 && !bad, "after the probe: %zu bytes, byte %zu differs", st.bytes, bad - 1);
        /* Nobody sends tag 3: the receive ends at the communicator's deadline. */
        rc = weft_recv(r, (int64_t)big, WEFT_BYTE, 0, 3, quick, &st);
        TH_CHECK(rc == WEFT_ERR_TIMEOUT, "a receive nobody answers returned %d (%s)", rc, weft_last_error());
        weft_request_t q;
        TH_OK(weft_irecv(r, (int64_t)big, WEFT_BYTE, 0, 4, quick, &q));
        TH_OK(weft_request_cancel(&q));
        rc = weft_wait(&q, &st);
        TH_CHECK(rc == WEFT_ERR_CANCELED, "a canceled device receive returned %d", rc);
    }
    TH_OK(weft_comm_free(&quick));
    /* The pipe still works after all that. */
    void *s64 = buffer(1, 64, rank);
    TH_OK(weft_sendrecv(s64, 64, WEFT_BYTE, 1 - rank, 9, r, 64, WEFT_BYTE, 1 - rank, 9, w, &st));
    release(1, s64);
    size_t bad = verify(1, r, 64, 1 - rank);
    TH_CHECK(!bad, "after the edges: byte %zu differs", bad - 1);
    release(1, s);
    release(1, r);
    TH_OK(weft_finalize());
    return 0;
}

Test(cuda, truncate_probe_timeout_cancel, .timeout = 300)
{
    run_paths(2, body_edges, NULL, NULL);
}

/* ---- bad input ---------------------------------------------------------------- */

static int body_bad(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    (void)arg;
    weft_comm_t w = gpu_weft_start();
    void *d = gpu_alloc(1000);
    int rc = weft_send(d, 2000, WEFT_BYTE, 0, 0, w);
    TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), "past the end of its device allocation"),
             "2000 bytes of a 1000-byte device buffer: %d (%s)", rc, weft_last_error());
    void *gone = gpu_alloc(1 << 20);
    gpu_free(gone);
    rc = weft_send(gone, 100, WEFT_BYTE, 0, 0, w);
    TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), "neither readable host memory nor device memory"),
             "a freed device buffer: %d (%s)", rc, weft_last_error());
    /* a collective no component takes on device buffers (coll/cuda has no gather) */
    float *x = gpu_alloc(64 * sizeof(float)), *y = gpu_alloc(64 * sizeof(float));
    rc = weft_gather(x, y, 64, WEFT_FLOAT32, 0, w);
    TH_CHECK(rc == WEFT_ERR_UNSUPPORTED && strstr(weft_last_error(), "cuda memory"),
             "gather on device buffers: %d (%s)", rc, weft_last_error());
    gpu_free(x);
    gpu_free(y);
    gpu_free(d);
    TH_OK(weft_finalize());
    return 0;
}

Test(cuda, bad_device_buffers, .timeout = 120)
{
    run_paths(1, body_bad, NULL, NULL);
}

static int body_off(int rank, int size, void *arg)
{
    (void)rank;
    (void)size;
    (void)arg;
    weft_comm_t w = gpu_weft_start();
    void *d = gpu_alloc(64);
    int rc = weft_send(d, 64, WEFT_BYTE, 0, 0, w);
    TH_CHECK(rc == WEFT_ERR_UNSUPPORTED && strstr(weft_last_error(), "send buffer is device memory"),
             "WEFT_CUDA=off: %d (%s)", rc, weft_last_error());
    gpu_free(d);
    TH_OK(weft_finalize());
    return 0;
}

Test(cuda, device_support_off, .timeout = 120)
{
    GPU_NEED();
    const char *env[] = {"WEFT_LOG_LEVEL=error", "WEFT_CUDA=off", NULL};
    th_result_t res = th_run(1, body_off, NULL, 60, env);
    cr_assert_eq(res.failed, 0);
}
