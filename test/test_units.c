/* Single-process units: status names, datatypes, configuration, the tag
 * layout, and the singleton runtime (self traffic, bad arguments, use
 * after finalize). */
#include "bootstrap/hmac.h"
#include "harness.h"
#include "pt2pt/pt2pt.h"
#include "pt2pt/ucx_addr.h"
#include "weft.h"
#include "weft_internal.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

Test(units, status_codes_are_fixed_and_named)
{
    cr_assert_eq(WEFT_SUCCESS, 0);
    cr_assert_eq(WEFT_ERR_ARG, -1);
    cr_assert_eq(WEFT_ERR_TIMEOUT, -3);
    cr_assert_eq(WEFT_ERR_TRUNCATE, -5);
    cr_assert_eq(WEFT_ERR_NOT_INITIALIZED, -7);
    cr_assert_eq(WEFT_ERR_COMM, -13);
    cr_assert_eq(WEFT_ERR_REVOKED, -14);
    for (int s = 0; s >= -14; s--)
        cr_assert_str_neq(weft_strerror(s), "unknown status", "status %d unnamed", s);
    cr_assert_str_eq(weft_strerror(-999), "unknown status");
}

Test(units, dtype_sizes)
{
    const size_t want[WEFT_DTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8, 1};
    for (int d = 0; d < WEFT_DTYPE_COUNT; d++)
        cr_assert_eq(weft_dtype_size((weft_dtype_t)d), want[d], "dtype %d", d);
    cr_assert_eq(weft_dtype_size((weft_dtype_t)13), 0);
    cr_assert_eq(weft_dtype_size((weft_dtype_t)-1), 0);
    cr_assert_str_eq(weft_dtype_name(WEFT_BFLOAT16), "bfloat16");
}

Test(units, buffer_check)
{
    size_t bytes;
    char b[16] = {0};
    cr_assert_eq(weft_buffer_check(b, 4, WEFT_FLOAT32, "t", "buf", &bytes), WEFT_SUCCESS);
    cr_assert_eq(bytes, 16);
    cr_assert_eq(weft_buffer_check(NULL, 0, WEFT_FLOAT32, "t", "buf", &bytes), WEFT_SUCCESS);
    cr_assert_eq(weft_buffer_check(NULL, 1, WEFT_FLOAT32, "t", "buf", &bytes), WEFT_ERR_ARG);
    cr_assert(strstr(weft_last_error(), "NULL buf"));
    cr_assert_eq(weft_buffer_check(b, -1, WEFT_FLOAT32, "t", "buf", &bytes), WEFT_ERR_ARG);
    cr_assert(strstr(weft_last_error(), "negative count"));
    cr_assert_eq(weft_buffer_check(b, 1, (weft_dtype_t)77, "t", "buf", &bytes), WEFT_ERR_ARG);
    cr_assert(strstr(weft_last_error(), "unknown datatype"));
    cr_assert_eq(weft_buffer_check(b, INT64_MAX, WEFT_FLOAT64, "t", "buf", &bytes), WEFT_ERR_ARG);
}

Test(units, tag_layout_roundtrip)
{
    ucp_tag_t t = weft_tag_make(WEFT_TAG_CLASS_USER, WEFT_TAG_UB, WEFT_TAG_MAX_RANKS - 1, WEFT_TAG_MAX_CONTEXTS - 1);
    cr_assert_eq(weft_tag_tag(t), WEFT_TAG_UB);
    cr_assert_eq(weft_tag_source(t), WEFT_TAG_MAX_RANKS - 1);
    cr_assert_eq(t & WEFT_TAG_MASK_CTX, WEFT_TAG_MAX_CONTEXTS - 1);
    cr_assert_eq(t & WEFT_TAG_MASK_CLASS, 0);
    /* The fields tile the 64 bits exactly, with no overlap. */
    cr_assert_eq(WEFT_TAG_MASK_CLASS | WEFT_TAG_MASK_TAG | WEFT_TAG_MASK_SRC | WEFT_TAG_MASK_CTX, ~UINT64_C(0));
    cr_assert_eq(WEFT_TAG_MASK_CLASS & WEFT_TAG_MASK_TAG, 0);
    cr_assert_eq(WEFT_TAG_MASK_TAG & WEFT_TAG_MASK_SRC, 0);
    cr_assert_eq(WEFT_TAG_MASK_SRC & WEFT_TAG_MASK_CTX, 0);
    ucp_tag_t c = weft_tag_make(WEFT_TAG_CLASS_COLL, 5, 3, 9);
    cr_assert_neq(c & WEFT_TAG_MASK_CLASS, weft_tag_make(WEFT_TAG_CLASS_USER, 5, 3, 9) & WEFT_TAG_MASK_CLASS);
}

Test(units, config_defaults_and_bad_values)
{
    unsetenv("WEFT_TIMEOUT");
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    cr_assert_float_eq(weft_cfg.timeout, 600.0, 1e-9);
    setenv("WEFT_TIMEOUT", "2.5", 1);
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    cr_assert_float_eq(weft_cfg.timeout, 2.5, 1e-9);
    setenv("WEFT_TIMEOUT", "soon", 1);
    cr_assert_eq(weft_config_load(), WEFT_ERR_ARG);
    cr_assert(strstr(weft_last_error(), "WEFT_TIMEOUT='soon'"), "%s", weft_last_error());
    unsetenv("WEFT_TIMEOUT");
    setenv("WEFT_BOOTSTRAP", "carrier-pigeon", 1);
    cr_assert_eq(weft_config_load(), WEFT_ERR_ARG);
    cr_assert(strstr(weft_last_error(), "WEFT_BOOTSTRAP"));
    setenv("WEFT_EAGER_CONNECT", "maybe", 1);
    setenv("WEFT_BOOTSTRAP", "single", 1);
    cr_assert_eq(weft_config_load(), WEFT_ERR_ARG);
    unsetenv("WEFT_EAGER_CONNECT");
    setenv("WEFT_PROGRESS_THREAD", "2000000", 1); /* a poll of 2 s: out of range, not clamped */
    cr_assert_eq(weft_config_load(), WEFT_ERR_ARG);
    cr_assert(strstr(weft_last_error(), "WEFT_PROGRESS_THREAD='2000000'"), "%s", weft_last_error());
    setenv("WEFT_PROGRESS_THREAD", "sometimes", 1);
    cr_assert_eq(weft_config_load(), WEFT_ERR_ARG);
    cr_assert(strstr(weft_last_error(), "auto, on, off"), "%s", weft_last_error());
    setenv("WEFT_PROGRESS_THREAD", "50", 1); /* a number: on, polling at most every 50 us */
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    cr_assert_eq(weft_cfg.progress_thread, WEFT_PT_ON);
    cr_assert_eq(weft_cfg.progress_poll_us, 50);
    setenv("WEFT_PROGRESS_THREAD", "off", 1);
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    cr_assert_eq(weft_cfg.progress_thread, WEFT_PT_OFF);
    setenv("WEFT_PROGRESS_THREAD", "0", 1); /* the old spelling of off */
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    cr_assert_eq(weft_cfg.progress_thread, WEFT_PT_OFF);
    setenv("WEFT_PROGRESS_THREAD", "ON", 1);
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    cr_assert_eq(weft_cfg.progress_thread, WEFT_PT_ON);
    cr_assert_eq(weft_cfg.progress_poll_us, WEFT_PROGRESS_POLL_US_DEFAULT);
    unsetenv("WEFT_PROGRESS_THREAD");
    cr_assert_eq(weft_config_load(), WEFT_SUCCESS);
    cr_assert_eq(weft_cfg.progress_thread, WEFT_PT_AUTO, "the default is auto");
    /* The variable table is complete and self-describing. */
    cr_assert_geq(weft_var_count(), 5);
    for (int i = 0; i < weft_var_count(); i++) {
        const char *n, *t, *d, *desc;
        cr_assert_eq(weft_var_get(i, &n, &t, &d, &desc), WEFT_SUCCESS);
        cr_assert(!strncmp(n, "WEFT_", 5));
        cr_assert(strlen(desc) > 10);
    }
    cr_assert_eq(weft_var_get(weft_var_count(), NULL, NULL, NULL, NULL), WEFT_ERR_ARG);
}

Test(units, bad_config_fails_init_with_a_message)
{
    th_single_env();
    setenv("WEFT_INIT_TIMEOUT", "-3", 1);
    cr_assert_eq(weft_init(NULL, NULL), WEFT_ERR_ARG);
    cr_assert(strstr(weft_last_error(), "WEFT_INIT_TIMEOUT"));
    unsetenv("WEFT_INIT_TIMEOUT");
}

Test(units, use_before_init_and_after_finalize)
{
    int x = 0, flag = 0;
    th_single_env();
    cr_assert_eq(weft_send(&x, 1, WEFT_INT32, 0, 0, weft_comm_world()), WEFT_ERR_NOT_INITIALIZED);
    cr_assert_eq(weft_comm_world(), WEFT_COMM_NULL);
    cr_assert_eq(weft_finalize(), WEFT_ERR_NOT_INITIALIZED);
    cr_assert_eq(weft_init(NULL, NULL), WEFT_SUCCESS);
    weft_comm_t world = weft_comm_world();
    cr_assert_eq(weft_init(NULL, NULL), WEFT_ERR_ALREADY);
    cr_assert_str_eq(weft_bootstrap_name(), "single");
    cr_assert_eq(weft_finalize(), WEFT_SUCCESS);
    cr_assert_eq(weft_send(&x, 1, WEFT_INT32, 0, 0, world), WEFT_ERR_NOT_INITIALIZED);
    cr_assert(strstr(weft_last_error(), "weft_send"));
    cr_assert_eq(weft_recv(&x, 1, WEFT_INT32, 0, 0, world, NULL), WEFT_ERR_NOT_INITIALIZED);
    cr_assert_eq(weft_iprobe(0, 0, world, &flag, NULL), WEFT_ERR_NOT_INITIALIZED);
    cr_assert_eq(weft_comm_rank(world, &x), WEFT_ERR_NOT_INITIALIZED);
    cr_assert_str_eq(weft_bootstrap_name(), "none");
    /* weft can start again after finalize. */
    cr_assert_eq(weft_init(NULL, NULL), WEFT_SUCCESS);
    cr_assert_eq(weft_finalize(), WEFT_SUCCESS);
}

Test(units, singleton_self_traffic)
{
    th_single_env();
    cr_assert_eq(weft_init(NULL, NULL), WEFT_SUCCESS);
    weft_comm_t world = weft_comm_world();
    int rank = -1, size = -1;
    cr_assert_eq(weft_comm_rank(world, &rank), WEFT_SUCCESS);
    cr_assert_eq(weft_comm_size(world, &size), WEFT_SUCCESS);
    cr_assert_eq(rank, 0);
    cr_assert_eq(size, 1);
    double in[100], out[100];
    for (int i = 0; i < 100; i++)
        in[i] = i * 0.5;
    weft_request_t r;
    weft_status_t st;
    cr_assert_eq(weft_irecv(out, 100, WEFT_FLOAT64, 0, 42, world, &r), WEFT_SUCCESS);
    cr_assert_eq(weft_send(in, 100, WEFT_FLOAT64, 0, 42, world), WEFT_SUCCESS);
    cr_assert_eq(weft_wait(&r, &st), WEFT_SUCCESS);
    cr_assert_eq(r, WEFT_REQUEST_NULL);
    cr_assert_eq(st.source, 0);
    cr_assert_eq(st.tag, 42);
    cr_assert_eq(st.bytes, sizeof(in));
    cr_assert_arr_eq(in, out, sizeof(in));
    cr_assert_eq(weft_finalize(), WEFT_SUCCESS);
}

Test(units, bad_arguments_each_return_a_status)
{
    th_single_env();
    cr_assert_eq(weft_init(NULL, NULL), WEFT_SUCCESS);
    weft_comm_t world = weft_comm_world();
    int x = 0, flag;
    weft_request_t r = NULL;
    cr_assert_eq(weft_send(NULL, 1, WEFT_INT32, 0, 0, world), WEFT_ERR_ARG);
    cr_assert_eq(weft_send(&x, -1, WEFT_INT32, 0, 0, world), WEFT_ERR_ARG);
    cr_assert_eq(weft_send(&x, 1, (weft_dtype_t)99, 0, 0, world), WEFT_ERR_ARG);
    cr_assert_eq(weft_send(&x, 1, WEFT_INT32, 1, 0, world), WEFT_ERR_ARG);
    cr_assert(strstr(weft_last_error(), "destination rank 1 out of range"), "%s", weft_last_error());
    cr_assert_eq(weft_send(&x, 1, WEFT_INT32, -1, 0, world), WEFT_ERR_ARG);
    cr_assert_eq(weft_send(&x, 1, WEFT_INT32, 0, -5, world), WEFT_ERR_ARG);
    cr_assert_eq(weft_send(&x, 1, WEFT_INT32, 0, WEFT_TAG_UB + 1, world), WEFT_ERR_ARG);
    cr_assert_eq(weft_send(&x, 1, WEFT_INT32, 0, 0, WEFT_COMM_NULL), WEFT_ERR_COMM);
    cr_assert_eq(weft_recv(NULL, 3, WEFT_INT32, 0, 0, world, NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_recv(&x, 1, WEFT_INT32, 2, 0, world, NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_recv(&x, 1, WEFT_INT32, -7, 0, world, NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_irecv(&x, 1, WEFT_INT32, 0, 0, world, NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_isend(&x, 1, WEFT_INT32, 0, 0, world, NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_iprobe(0, 0, world, NULL, NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_wait(NULL, NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_test(&r, NULL, NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_waitall(-1, &r, NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_comm_rank(world, NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_comm_set_timeout(world, -1), WEFT_ERR_ARG);
    /* NULL buffer with zero count is fine; a NULL request is complete. */
    cr_assert_eq(weft_isend(NULL, 0, WEFT_INT32, 0, 1, world, &r), WEFT_SUCCESS);
    cr_assert_eq(weft_recv(NULL, 0, WEFT_INT32, 0, 1, world, NULL), WEFT_SUCCESS);
    cr_assert_eq(weft_wait(&r, NULL), WEFT_SUCCESS);
    cr_assert_eq(weft_wait(&r, NULL), WEFT_SUCCESS);
    cr_assert_eq(weft_test(&r, &flag, NULL), WEFT_SUCCESS);
    cr_assert_eq(flag, 1);
    cr_assert_eq(weft_finalize(), WEFT_SUCCESS);
}

Test(units, wait_deadline_keeps_request_valid_then_cancel)
{
    th_single_env();
    cr_assert_eq(weft_init(NULL, NULL), WEFT_SUCCESS);
    weft_comm_t world = weft_comm_world();
    int x = 0;
    weft_request_t r;
    weft_status_t st;
    cr_assert_eq(weft_irecv(&x, 1, WEFT_INT32, 0, 9, world, &r), WEFT_SUCCESS);
    double t0 = weft_wtime();
    cr_assert_eq(weft_wait_timeout(&r, 0.2, &st), WEFT_ERR_TIMEOUT);
    cr_assert_geq(weft_wtime() - t0, 0.2);
    cr_assert_neq(r, WEFT_REQUEST_NULL, "a timed-out request stays valid");
    cr_assert(strstr(weft_last_error(), "recv from rank 0"), "%s", weft_last_error());
    cr_assert_eq(weft_wait_timeout(&r, 0.05, &st), WEFT_ERR_TIMEOUT);
    /* It can still complete normally... */
    int v = 5;
    cr_assert_eq(weft_send(&v, 1, WEFT_INT32, 0, 9, world), WEFT_SUCCESS);
    cr_assert_eq(weft_wait_timeout(&r, 5, &st), WEFT_SUCCESS);
    cr_assert_eq(x, 5);
    /* ...or be canceled. */
    cr_assert_eq(weft_irecv(&x, 1, WEFT_INT32, 0, 10, world, &r), WEFT_SUCCESS);
    cr_assert_eq(weft_wait_timeout(&r, 0.05, &st), WEFT_ERR_TIMEOUT);
    cr_assert_eq(weft_request_cancel(&r), WEFT_SUCCESS);
    cr_assert_eq(weft_wait(&r, &st), WEFT_ERR_CANCELED);
    cr_assert_eq(r, WEFT_REQUEST_NULL);
    /* A blocking receive honours the communicator's timeout. */
    cr_assert_eq(weft_comm_set_timeout(world, 0.2), WEFT_SUCCESS);
    t0 = weft_wtime();
    cr_assert_eq(weft_recv(&x, 1, WEFT_INT32, 0, 11, world, NULL), WEFT_ERR_TIMEOUT);
    cr_assert_lt(weft_wtime() - t0, 3.0);
    cr_assert_eq(weft_probe(0, 11, world, NULL), WEFT_ERR_TIMEOUT);
    cr_assert_eq(weft_finalize(), WEFT_SUCCESS);
}

Test(units, truncation_reports_and_writes_nothing_past_the_buffer)
{
    th_single_env();
    cr_assert_eq(weft_init(NULL, NULL), WEFT_SUCCESS);
    weft_comm_t world = weft_comm_world();
    const size_t sizes[] = {8, 100, 64 * 1024, 1 << 20};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        char *src = malloc(n), *dst = malloc(n + 64);
        memset(src, 0xAB, n);
        memset(dst, 0x11, n + 64);
        weft_request_t r;
        weft_status_t st;
        cr_assert_eq(weft_irecv(dst, (int64_t)(n / 2), WEFT_BYTE, 0, 3, world, &r), WEFT_SUCCESS);
        cr_assert_eq(weft_send(src, (int64_t)n, WEFT_BYTE, 0, 3, world), WEFT_SUCCESS);
        cr_assert_eq(weft_wait(&r, &st), WEFT_ERR_TRUNCATE, "size %zu", n);
        cr_assert_eq(st.error, WEFT_ERR_TRUNCATE);
        for (size_t k = n / 2; k < n + 64; k++)
            cr_assert_eq(dst[k], 0x11, "byte %zu written past the buffer", k);
        free(src);
        free(dst);
    }
    cr_assert_eq(weft_finalize(), WEFT_SUCCESS);
}

Test(units, host_topology_and_transports)
{
    char buf[4096];
    cr_assert_eq(weft_host_topology(buf, sizeof(buf)), WEFT_SUCCESS);
    cr_assert(strstr(buf, "core"));
    cr_assert_eq(weft_ucx_transports(buf, sizeof(buf)), WEFT_SUCCESS);
    cr_assert(strstr(buf, "self/"), "%s", buf);
    cr_assert_eq(weft_host_topology(NULL, 3), WEFT_ERR_ARG);
}

static void send_out_of_range(void *arg)
{
    (void)arg;
    int x = 0;
    cr_assert_eq(weft_init(NULL, NULL), WEFT_SUCCESS);
    cr_assert_eq(weft_send(&x, 1, WEFT_INT32, 3, 0, weft_comm_world()), WEFT_ERR_ARG);
    cr_assert(strstr(weft_last_error(), "destination rank 3 out of range"), "%s", weft_last_error());
    cr_assert_eq(weft_finalize(), WEFT_SUCCESS);
}

/* An error returned to the caller is the caller's to report (status and
 * weft_last_error()): at the default level weft does not print it too. */
Test(units, returned_error_is_logged_at_debug_only)
{
    th_single_env();
    unsetenv("WEFT_LOG_LEVEL");
    char *out = th_stderr_of(send_out_of_range, NULL);
    cr_assert(!strstr(out, "out of range"), "a returned error was printed: %s", out);
    free(out);
    setenv("WEFT_LOG_LEVEL", "debug", 1);
    out = th_stderr_of(send_out_of_range, NULL);
    cr_assert(strstr(out, "debug: weft_send: destination rank 3 out of range"), "not logged at debug: %s", out);
    free(out);
    unsetenv("WEFT_LOG_LEVEL");
}

/* ---- SHA-256 and HMAC-SHA256 (src/bootstrap/hmac.c, over libcrypto) ------ */

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

static void expect_sha256(const void *msg, size_t len, const char *want)
{
    uint8_t d[WEFT_SHA256_LEN];
    char got[2 * WEFT_SHA256_LEN + 1];
    const weft_bytes_t one = {msg, len};
    cr_assert_eq(weft_sha256(&one, 1, d), 0);
    hex(d, sizeof(d), got);
    cr_expect_str_eq(got, want, "SHA-256 of %zu bytes", len);
}

/* FIPS 180-4's examples (and the one-million-'a' message). */
Test(units, sha256_test_vectors)
{
    expect_sha256("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    expect_sha256("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
                  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char *a = malloc(1000000);
    cr_assert(a);
    memset(a, 'a', 1000000);
    expect_sha256(a, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* Fed in uneven pieces, across block boundaries, the digest is the same. */
    uint8_t one[WEFT_SHA256_LEN], pieces[WEFT_SHA256_LEN];
    const weft_bytes_t whole = {a, 1000};
    weft_bytes_t parts[64];
    int n = 0;
    for (size_t off = 0, step = 1; off < 1000; off += step, step = step * 3 % 97 + 1)
        parts[n++] = (weft_bytes_t){a + off, off + step > 1000 ? 1000 - off : step};
    cr_assert_eq(weft_sha256(&whole, 1, one), 0);
    cr_assert_eq(weft_sha256(parts, n, pieces), 0);
    cr_expect_arr_eq(one, pieces, sizeof(one));
    free(a);
}

/* RFC 4231, test cases 1-7 (case 5 compares the first 128 bits, as the RFC does). */
Test(units, hmac_sha256_rfc4231)
{
    static const char tc7[] = "This is a test using a larger than block-size key and a larger than block-size data. "
                              "The key needs to be hashed before being used by the HMAC algorithm.";
    uint8_t k0b[20], kaa[131], k25[25], dd[50], cd[50], k0c[20];
    memset(k0b, 0x0b, sizeof(k0b));
    memset(kaa, 0xaa, sizeof(kaa));
    memset(dd, 0xdd, sizeof(dd));
    memset(cd, 0xcd, sizeof(cd));
    memset(k0c, 0x0c, sizeof(k0c));
    for (int i = 0; i < 25; i++)
        k25[i] = (uint8_t)(i + 1);
    struct {
        const void *key;
        size_t key_len;
        const void *data;
        size_t len;
        const char *mac;
    } tc[] = {
        {k0b, 20, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {"Jefe", 4, "what do ya want for nothing?", 28,
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {kaa, 20, dd, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
        {k25, 25, cd, 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
        {k0c, 20, "Test With Truncation", 20, "a3b6167473100ee06e0c796c2955552b"},
        {kaa, 131, "Test Using Larger Than Block-Size Key - Hash Key First", 54,
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
        {kaa, 131, tc7, sizeof(tc7) - 1, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
    };
    for (size_t i = 0; i < sizeof(tc) / sizeof(tc[0]); i++) {
        uint8_t mac[WEFT_SHA256_LEN];
        char got[2 * WEFT_SHA256_LEN + 1];
        const weft_bytes_t msg = {tc[i].data, tc[i].len};
        cr_assert_eq(weft_hmac_sha256(tc[i].key, tc[i].key_len, &msg, 1, mac), 0);
        hex(mac, sizeof(mac), got);
        got[strlen(tc[i].mac)] = '\0';
        cr_expect_str_eq(got, tc[i].mac, "RFC 4231 test case %zu", i + 1);
    }
    /* In pieces (one of them empty), the same MAC. */
    uint8_t a[WEFT_SHA256_LEN], b[WEFT_SHA256_LEN];
    const weft_bytes_t whole = {tc7, sizeof(tc7) - 1}, parts[] = {{tc7, 10}, {"", 0}, {tc7 + 10, sizeof(tc7) - 11}};
    cr_assert_eq(weft_hmac_sha256(kaa, 131, &whole, 1, a), 0);
    cr_assert_eq(weft_hmac_sha256(kaa, 131, parts, 3, b), 0);
    cr_expect_arr_eq(a, b, sizeof(a));
}

Test(units, constant_time_compare_and_random_bytes)
{
    uint8_t x[32] = {0}, y[32] = {0}, r1[32], r2[32];
    cr_expect(weft_ct_equal(x, y, sizeof(x)));
    y[31] = 1;
    cr_expect(!weft_ct_equal(x, y, sizeof(x)));
    y[31] = 0, y[0] = 0x80;
    cr_expect(!weft_ct_equal(x, y, sizeof(x)));
    cr_assert_eq(weft_random_bytes(r1, sizeof(r1)), 0);
    cr_assert_eq(weft_random_bytes(r2, sizeof(r2)), 0);
    cr_expect(!weft_ct_equal(r1, r2, sizeof(r1)), "two draws of 256 random bits are equal");
}

/* ---- sealed UCX addresses (pt2pt/ucx_addr.c) ---------------------------- */

static int open_as(const weft_job_key_t *k, uint32_t rank, const uint8_t *b, size_t n, char *why)
{
    size_t len = 0;
    return weft_ucx_addr_open(k, rank, 4, b, n, &len, why, 256);
}

Test(units, ucx_address_seal_and_check)
{
    weft_job_key_t none = {0}, key = {.keyed = 1}, other = {.keyed = 1};
    uint8_t addr[100], b[256], c[256];
    char why[256];
    size_t n = weft_ucx_addr_sealed_len(sizeof(addr)), len = 0;
    memset(key.key, 7, sizeof(key.key));
    memset(other.key, 8, sizeof(other.key));
    for (size_t i = 0; i < sizeof(addr); i++)
        addr[i] = (uint8_t)(i * 7);
    weft_ucx_addr_seal(&key, 2, 4, addr, sizeof(addr), b);
    cr_assert_eq(weft_ucx_addr_open(&key, 2, 4, b, n, &len, why, sizeof(why)), 0, "%s", why);
    cr_assert_eq(len, sizeof(addr));
    cr_assert_arr_eq(b + WEFT_UCX_ADDR_HDR, addr, sizeof(addr));
    /* Every way it can be wrong is caught, with the reason. */
    cr_expect_eq(open_as(&key, 3, b, n, why), -1);
    cr_expect(strstr(why, "sealed by rank 2 of 4, not rank 3 of 4"), "%s", why);
    cr_expect_eq(open_as(&other, 2, b, n, why), -1);
    cr_expect(strstr(why, "sealed with a different job secret"), "%s", why);
    cr_expect_eq(open_as(&none, 2, b, n, why), -1);
    cr_expect(strstr(why, "sealed with a job secret and this rank has none"), "%s", why);
    cr_expect_eq(open_as(&key, 2, b, n - 1, why), -1);
    cr_expect(strstr(why, "disagrees with the"), "%s", why);
    cr_expect_eq(open_as(&key, 2, b, 10, why), -1);
    cr_expect(strstr(why, "too few"), "%s", why);
    for (size_t i = 0; i < n; i++) { /* any flipped bit */
        memcpy(c, b, n);
        c[i] ^= 0x10;
        cr_expect_eq(open_as(&key, 2, c, n, why), -1, "byte %zu flipped went unnoticed", i);
    }
    /* Without a secret the tag is a checksum: it still catches corruption. */
    weft_ucx_addr_seal(&none, 0, 4, addr, sizeof(addr), b);
    cr_expect_eq(open_as(&none, 0, b, n, why), 0, "%s", why);
    b[WEFT_UCX_ADDR_HDR + 5] ^= 1;
    cr_expect_eq(open_as(&none, 0, b, n, why), -1);
    cr_expect(strstr(why, "checksum is wrong"), "%s", why);
    memset(c, 0xab, sizeof(c));
    cr_expect_eq(open_as(&none, 0, c, n, why), -1);
    cr_expect(strstr(why, "not a sealed address"), "%s", why);
}

/* A secret never appears in a message, even the one refusing it. */
Test(units, job_secret_is_not_echoed)
{
    char big[1100];
    memset(big, 's', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    setenv("WEFT_JOB_SECRET", big, 1);
    cr_assert_eq(weft_config_load(), WEFT_ERR_ARG);
    cr_expect(strstr(weft_last_error(), "WEFT_JOB_SECRET is too long"), "%s", weft_last_error());
    cr_expect(!strstr(weft_last_error(), "sss"), "%s", weft_last_error());
    unsetenv("WEFT_JOB_SECRET");
}
