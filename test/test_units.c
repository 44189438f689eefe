/* Single-process units: status names, datatypes, configuration, the tag
 * layout, and the singleton runtime (self traffic, bad arguments, use
 * after finalize). */
#include "harness.h"
#include "pt2pt/pt2pt.h"
#include "weft.h"
#include "weft_internal.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void single_env(void)
{
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    unsetenv("PMIX_RANK");
    unsetenv("PMIX_NAMESPACE");
    setenv("WEFT_BOOTSTRAP", "single", 1);
}

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
    single_env();
    setenv("WEFT_INIT_TIMEOUT", "-3", 1);
    cr_assert_eq(weft_init(NULL, NULL), WEFT_ERR_ARG);
    cr_assert(strstr(weft_last_error(), "WEFT_INIT_TIMEOUT"));
    unsetenv("WEFT_INIT_TIMEOUT");
}

Test(units, use_before_init_and_after_finalize)
{
    int x = 0, flag = 0;
    single_env();
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
    single_env();
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
    single_env();
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
    single_env();
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
    single_env();
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
    single_env();
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
