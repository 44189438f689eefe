/* Start-up: init deadlines that name missing ranks, the out-of-band
 * bootstrap, local ranks, finalize next to a dead peer, a store that is
 * late or never reachable (the error says what was tried), the
 * torchstore bootstrap facing a service that is not torch's store, and
 * joining by a rendezvous handle (forming the world, or a group of it). */
#include "harness.h"
#include "weft.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- a rank that never arrives ---------------------------------------- */
typedef struct {
    int missing;
} missing_arg_t;

static int body_missing(int rank, int size, void *argp)
{
    missing_arg_t *arg = argp;
    (void)size;
    if (rank == arg->missing) {
        sleep(6); /* never calls weft_init within the others' deadline */
        return 0;
    }
    double t0 = weft_wtime();
    int rc = weft_init(NULL, NULL);
    double dt = weft_wtime() - t0;
    TH_CHECK(rc == WEFT_ERR_TIMEOUT, "init returned %d (%s)", rc, weft_last_error());
    TH_CHECK(dt < 2.0 + 3.0, "init failed only after %.1f s", dt);
    char want[32];
    snprintf(want, sizeof(want), "%d", arg->missing);
    TH_CHECK(strstr(weft_last_error(), want), "message does not name rank %d: %s", arg->missing, weft_last_error());
    /* Nothing is half-initialised afterwards. */
    TH_CHECK(weft_comm_world() == WEFT_COMM_NULL, "world exists after failed init");
    return 0;
}

Test(init, deadline_names_the_missing_rank, .timeout = 60)
{
    const char *env[] = {"WEFT_INIT_TIMEOUT=2", NULL};
    missing_arg_t arg = {.missing = 2};
    th_result_t res = th_run(4, body_missing, &arg, 40, env);
    cr_assert_eq(res.timed_out, 0);
    for (int r = 0; r < 4; r++)
        cr_expect_eq(res.exit_code[r], 0, "rank %d", r);
}

Test(init, deadline_when_rank0_and_its_store_never_come, .timeout = 60)
{
    const char *env[] = {"WEFT_INIT_TIMEOUT=2", NULL};
    missing_arg_t arg = {.missing = 0};
    th_result_t res = th_run(3, body_missing, &arg, 40, env);
    cr_assert_eq(res.timed_out, 0);
    for (int r = 0; r < 3; r++)
        cr_expect_eq(res.exit_code[r], 0, "rank %d", r);
}

/* ---- the out-of-band bootstrap: a host's own allgather ----------------- */
/* The "host code" here is a shared-memory allgather between forked ranks. */
#define OOB_MAX_RANKS 8
#define OOB_MAX_BYTES 4096
typedef struct {
    atomic_int arrived;
    atomic_int generation;
    int size;
    char slots[OOB_MAX_RANKS][OOB_MAX_BYTES];
} shm_ag_t;

typedef struct {
    shm_ag_t *shm;
    int rank;
    int calls;
} oob_ctx_t;

static void shm_barrier(shm_ag_t *s)
{
    int gen = atomic_load(&s->generation);
    if (atomic_fetch_add(&s->arrived, 1) == s->size - 1) {
        atomic_store(&s->arrived, 0);
        atomic_fetch_add(&s->generation, 1);
    } else {
        while (atomic_load(&s->generation) == gen)
            usleep(100);
    }
}

static int shm_allgather(const void *send, void *recv, size_t len, void *ctxp)
{
    oob_ctx_t *ctx = ctxp;
    if (len > OOB_MAX_BYTES) return 1;
    ctx->calls++;
    memcpy(ctx->shm->slots[ctx->rank], send, len);
    shm_barrier(ctx->shm);
    for (int r = 0; r < ctx->shm->size; r++)
        memcpy((char *)recv + (size_t)r * len, ctx->shm->slots[r], len);
    shm_barrier(ctx->shm);
    return 0;
}

static int body_oob(int rank, int size, void *argp)
{
    shm_ag_t *shm = argp;
    oob_ctx_t ctx = {.shm = shm, .rank = rank, .calls = 0};
    /* The env variables are set by the harness; the OOB path must not use them. */
    TH_OK(weft_init_oob(rank, size, shm_allgather, &ctx));
    TH_CHECK(ctx.calls > 0, "the callback was never used");
    TH_CHECK(!strcmp(weft_bootstrap_name(), "oob"), "bootstrap %s", weft_bootstrap_name());
    weft_comm_t w = weft_comm_world();
    int me, n, lr, ls;
    TH_OK(weft_comm_rank(w, &me));
    TH_OK(weft_comm_size(w, &n));
    TH_OK(weft_local_rank(&lr));
    TH_OK(weft_local_size(&ls));
    TH_CHECK(me == rank && n == size, "rank %d size %d", me, n);
    TH_CHECK(lr == rank && ls == size, "one host: local %d of %d", lr, ls);
    int right = (rank + 1) % size, left = (rank + size - 1) % size, in = -1;
    TH_OK(weft_sendrecv(&rank, 1, WEFT_INT32, right, 0, &in, 1, WEFT_INT32, left, 0, w, NULL));
    TH_CHECK(in == left, "in %d", in);
    TH_OK(weft_finalize());
    return 0;
}

Test(init, oob_allgather_callback, .timeout = 60)
{
    shm_ag_t *shm = mmap(NULL, sizeof(shm_ag_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(shm, MAP_FAILED);
    memset(shm, 0, sizeof(*shm));
    shm->size = 3;
    /* No env bootstrap variables at all for the OOB ranks. */
    const char *env[] = {"WEFT_BOOTSTRAP=single", NULL};
    th_result_t res = th_run(3, body_oob, shm, 40, env);
    cr_assert_eq(res.failed, 0);
    munmap(shm, sizeof(*shm));
}

/* Issue 21: a peer's garbage UCX address never reaches UCX (in UCX 1.13,
 * ucp_ep_create asserts in ucp_address_unpack and the process dies with
 * SIGABRT). Rank 1's host code hands the others random bytes in place of
 * its worker address (the exchange of sealed addresses, whose frames begin
 * with "WUCA"). Addresses
 * are fetched when a rank first makes an endpoint: init succeeds, and the
 * first send of every other rank to rank 1 fails naming it; nobody aborts. */
static int garbage_address_allgather(const void *send, void *recv, size_t len, void *ctxp)
{
    oob_ctx_t *ctx = ctxp;
    static int done;
    uint8_t junk[OOB_MAX_BYTES];
    if (ctx->rank == 1 && len >= 4 && !memcmp(send, "WUCA", 4) && len <= sizeof(junk) && !done++) {
        srand(21);
        for (size_t i = 0; i < len; i++)
            junk[i] = (uint8_t)rand();
        send = junk;
    }
    return shm_allgather(send, recv, len, ctxp);
}

static int body_garbage_address(int rank, int size, void *argp)
{
    oob_ctx_t ctx = {.shm = argp, .rank = rank, .calls = 0};
    TH_OK(weft_init_oob(rank, size, garbage_address_allgather, &ctx));
    if (rank != 1) { /* what used to happen: the first message to rank 1 aborts */
        int v = 0, rc = weft_send(&v, 1, WEFT_INT32, 1, 0, weft_comm_world());
        TH_CHECK(rc == WEFT_ERR_BOOTSTRAP, "rank %d: send returned %d: %s", rank, rc, weft_last_error());
        TH_CHECK(strstr(weft_last_error(), "rank 1's UCX worker address failed validation and was not given to UCX"),
                 "rank %d: %s", rank, weft_last_error());
    }
    TH_OK(weft_finalize());
    return 0;
}

/* ---- joining by a rendezvous handle ------------------------------------- */

/* Rank `opener` opens a rendezvous and posts it in slot; the others take it. */
static weft_rendezvous_t rendezvous_from(th_board_t *b, int slot, int rank, int opener)
{
    weft_rendezvous_t h;
    if (rank == opener) {
        TH_OK(weft_rendezvous_open(NULL, &h));
        th_board_post(b, slot, &h, sizeof(h));
    } else {
        TH_CHECK(th_board_wait(b, slot, &h, sizeof(h), 30) == 0, "no handle in slot %d", slot);
    }
    return h;
}

static void ring_check(weft_comm_t c, int world_rank)
{
    int rank, size, in = -1, want;
    TH_OK(weft_comm_rank(c, &rank));
    TH_OK(weft_comm_size(c, &size));
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    TH_OK(weft_comm_world_rank(c, left, &want));
    TH_OK(weft_sendrecv(&world_rank, 1, WEFT_INT32, right, 1, &in, 1, WEFT_INT32, left, 1, c, NULL));
    TH_CHECK(in == want, "ring: %d from the left, expected world rank %d", in, want);
}

/* Runs body on n ranks sharing a board for the handles. */
static void run_joining(int n, th_body_fn body)
{
    th_result_t r = th_run_with_board(n, body, 50);
    cr_assert_eq(r.failed, 0, "%d of %d ranks failed", r.failed, n);
}

/* Without weft_init, the first join forms the world (in the join's rank
 * order, not the harness's); a later one among some of them makes a group. */
static int body_join(int rank, int size, void *argp)
{
    th_board_t *b = argp;
    int flag, me, n, jr = (rank + 1) % size; /* the join's ranks differ from the harness's */
    TH_OK(weft_initialized(&flag));
    TH_CHECK(!flag, "initialized before the join");
    weft_rendezvous_t h = rendezvous_from(b, 0, jr, 0);
    weft_comm_t c = WEFT_COMM_NULL, g = WEFT_COMM_NULL;
    weft_options_t o;
    TH_OK(weft_options_create(&o));
    TH_OK(weft_options_set_name(o, "joined"));
    TH_OK(weft_comm_join(&h, jr, size, o, &c));
    TH_OK(weft_options_free(&o));
    TH_CHECK(!strcmp(weft_bootstrap_name(), "rendezvous"), "bootstrap %s", weft_bootstrap_name());
    TH_CHECK(!strcmp(weft_comm_name(c), "joined"), "name %s", weft_comm_name(c));
    TH_OK(weft_comm_rank(weft_comm_world(), &me));
    TH_OK(weft_comm_size(weft_comm_world(), &n));
    TH_CHECK(me == jr && n == size, "world rank %d of %d, joined as %d of %d", me, n, jr, size);
    TH_OK(weft_comm_rank(c, &me));
    TH_CHECK(me == jr, "rank %d in the joined comm", me);
    int sum = 0;
    TH_OK(weft_allreduce(&jr, &sum, 1, WEFT_INT32, WEFT_SUM, c));
    TH_CHECK(sum == size * (size - 1) / 2, "sum %d", sum);
    ring_check(c, jr);
    /* World ranks 3 and 1 join a second handle (3 opens it, as its rank 0). */
    if (jr == 3 || jr == 1) {
        weft_rendezvous_t h2 = rendezvous_from(b, 1, jr == 3 ? 0 : 1, 0);
        TH_OK(weft_comm_join(&h2, jr == 3 ? 0 : 1, 2, WEFT_OPTIONS_NULL, &g));
        int w0, w1;
        TH_OK(weft_comm_world_rank(g, 0, &w0));
        TH_OK(weft_comm_world_rank(g, 1, &w1));
        TH_CHECK(w0 == 3 && w1 == 1, "group of world ranks %d, %d", w0, w1);
        ring_check(g, jr);
        TH_OK(weft_comm_free(&g));
    }
    /* A handle opened and never joined, or joined already: closing it is fine. */
    weft_rendezvous_t h3;
    TH_OK(weft_rendezvous_open("lo", &h3));
    TH_OK(weft_rendezvous_close(&h3));
    TH_OK(weft_rendezvous_close(&h3));
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_finalize());
    return 0;
}

Test(init, join_forms_the_world_then_groups, .timeout = 60)
{
    run_joining(4, body_join);
}

/* After weft_init (the env bootstrap), a join makes a group of the world. */
static int body_join_after_init(int rank, int size, void *argp)
{
    th_board_t *b = argp;
    TH_OK(weft_init(NULL, NULL));
    if (rank == 2 || rank == 0) {
        weft_rendezvous_t h = rendezvous_from(b, 0, rank, 2);
        weft_comm_t g;
        TH_OK(weft_comm_join(&h, rank == 2 ? 0 : 1, 2, WEFT_OPTIONS_NULL, &g));
        int w0;
        TH_OK(weft_comm_world_rank(g, 0, &w0));
        TH_CHECK(w0 == 2, "rank 0 of the group is world rank %d", w0);
        ring_check(g, rank);
        TH_OK(weft_comm_free(&g));
    }
    (void)size;
    TH_OK(weft_finalize());
    return 0;
}

Test(init, join_after_init_makes_a_group, .timeout = 60)
{
    run_joining(3, body_join_after_init);
}

/* Processes with a world and one without cannot join together; bad
 * handles, ranks and openers fail at once. */
static int body_join_mixed(int rank, int size, void *argp)
{
    th_board_t *b = argp;
    weft_comm_t c = WEFT_COMM_NULL, d = WEFT_COMM_NULL;
    (void)size;
    if (rank < 2) {
        weft_rendezvous_t h = rendezvous_from(b, 0, rank, 0);
        TH_OK(weft_comm_join(&h, rank, 2, WEFT_OPTIONS_NULL, &c));
    }
    weft_rendezvous_t h2 = rendezvous_from(b, 1, rank, 0);
    int rc = weft_comm_join(&h2, rank, 3, WEFT_OPTIONS_NULL, &d);
    TH_CHECK(rc == WEFT_ERR_ARG && d == WEFT_COMM_NULL, "mixed join: rc %d (%s)", rc, weft_last_error());
    TH_CHECK(strstr(weft_last_error(), "rank 2 has none yet"), "%s", weft_last_error());
    int flag;
    TH_OK(weft_initialized(&flag));
    TH_CHECK(flag == (rank < 2), "initialized %d after the failed join", flag);
    if (rank == 0) {
        weft_rendezvous_t bad, mine;
        memset(&bad, 0x5a, sizeof(bad));
        TH_CHECK(weft_comm_join(&bad, 0, 2, WEFT_OPTIONS_NULL, &d) == WEFT_ERR_ARG, "garbage handle");
        TH_CHECK(weft_comm_join(NULL, 0, 2, WEFT_OPTIONS_NULL, &d) == WEFT_ERR_ARG, "NULL handle");
        TH_OK(weft_rendezvous_open(NULL, &mine));
        TH_CHECK(weft_comm_join(&mine, 2, 2, WEFT_OPTIONS_NULL, &d) == WEFT_ERR_ARG, "rank 2 of 2");
        rc = weft_comm_join(&mine, 1, 2, WEFT_OPTIONS_NULL, &d);
        TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), "must join as rank 0"), "opener as rank 1: %s",
                 weft_last_error());
        TH_CHECK(weft_rendezvous_open(NULL, NULL) == WEFT_ERR_ARG, "NULL out");
        TH_CHECK(weft_rendezvous_open("no-such-interface", &mine) == WEFT_ERR_BOOTSTRAP, "no interface");
        TH_CHECK(strstr(weft_last_error(), "no-such-interface"), "%s", weft_last_error());
    }
    if (rank < 2) {
        TH_OK(weft_comm_free(&c));
        TH_OK(weft_finalize());
    }
    return 0;
}

Test(init, join_of_processes_with_and_without_a_world_fails_everywhere, .timeout = 60)
{
    run_joining(3, body_join_mixed);
}

Test(init, garbage_ucx_address_never_reaches_ucx, .timeout = 60)
{
    shm_ag_t *shm = mmap(NULL, sizeof(shm_ag_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(shm, MAP_FAILED);
    memset(shm, 0, sizeof(*shm));
    shm->size = 3;
    const char *env[] = {"WEFT_BOOTSTRAP=single", NULL};
    th_result_t res = th_run(3, body_garbage_address, shm, 40, env);
    for (int r = 0; r < 3; r++)
        cr_expect_eq(res.exit_code[r], 0, "rank %d %s", r, res.exit_code[r] == 128 + SIGABRT ? "aborted" : "failed");
    munmap(shm, sizeof(*shm));
}

static int failing_allgather(const void *send, void *recv, size_t len, void *ctx)
{
    (void)send;
    (void)recv;
    (void)len;
    (void)ctx;
    return 42;
}

Test(init, oob_bad_arguments_and_failing_callback)
{
    setenv("WEFT_BOOTSTRAP", "single", 1);
    cr_assert_eq(weft_init_oob(0, 2, NULL, NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_init_oob(2, 2, failing_allgather, NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_init_oob(0, 0, failing_allgather, NULL), WEFT_ERR_ARG);
    cr_assert_eq(weft_init_oob(1, 2, failing_allgather, NULL), WEFT_ERR_BOOTSTRAP);
    cr_assert(strstr(weft_last_error(), "failed with 42"), "%s", weft_last_error());
    cr_assert_eq(weft_comm_world(), WEFT_COMM_NULL);
}

/* ---- local rank and size ---------------------------------------------- */
static int body_local(int rank, int size, void *arg)
{
    int expect_given = *(int *)arg;
    TH_OK(weft_init(NULL, NULL));
    int lr, ls;
    TH_OK(weft_local_rank(&lr));
    TH_OK(weft_local_size(&ls));
    if (expect_given)
        TH_CHECK(lr == rank % 2 && ls == 2, "LOCAL_RANK given: %d of %d", lr, ls);
    else
        TH_CHECK(lr == rank && ls == size, "derived from host ids: %d of %d", lr, ls);
    TH_CHECK(!strcmp(weft_bootstrap_name(), "env"), "%s", weft_bootstrap_name());
    TH_OK(weft_finalize());
    return 0;
}

static int body_local_given(int rank, int size, void *arg)
{
    char b[16];
    snprintf(b, sizeof(b), "%d", rank % 2);
    setenv("LOCAL_RANK", b, 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    return body_local(rank, size, arg);
}

static int body_local_derived(int rank, int size, void *arg)
{
    unsetenv("LOCAL_RANK");
    unsetenv("LOCAL_WORLD_SIZE");
    return body_local(rank, size, arg);
}

Test(init, local_rank_from_env_or_host_ids, .timeout = 60)
{
    int given = 1, derived = 0;
    th_result_t a = th_run(4, body_local_given, &given, 40, NULL);
    cr_assert_eq(a.failed, 0);
    th_result_t b = th_run(3, body_local_derived, &derived, 40, NULL);
    cr_assert_eq(b.failed, 0);
}

/* ---- automatic choice without any launcher: a singleton ---------------- */
Test(init, singleton_when_nothing_is_set)
{
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    unsetenv("WEFT_BOOTSTRAP");
    unsetenv("PMIX_RANK");
    unsetenv("PMIX_NAMESPACE");
    unsetenv("TORCHELASTIC_USE_AGENT_STORE");
    unsetenv("TORCHELASTIC_RUN_ID");
    cr_assert_eq(weft_init(NULL, NULL), WEFT_SUCCESS);
    cr_assert_str_eq(weft_bootstrap_name(), "single");
    cr_assert_eq(weft_finalize(), WEFT_SUCCESS);
}

/* ---- a launch that names several ranks never runs as singletons ------------ */
static void clear_launch_env(void)
{
    static const char *const vars[] = {"RANK",
                                       "WORLD_SIZE",
                                       "MASTER_ADDR",
                                       "MASTER_PORT",
                                       "WEFT_BOOTSTRAP",
                                       "PMIX_RANK",
                                       "PMIX_NAMESPACE",
                                       "TORCHELASTIC_USE_AGENT_STORE",
                                       "TORCHELASTIC_RUN_ID",
                                       "OMPI_COMM_WORLD_SIZE",
                                       "PMI_SIZE",
                                       "SLURM_STEP_NUM_TASKS",
                                       "LOCAL_RANK",
                                       "LOCAL_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
}

/* Before: each process ran as rank 0 of 1 and exited 0. */
Test(init, several_ranks_named_never_fall_back_to_a_singleton, .timeout = 30)
{
    static const struct {
        const char *env[4]; /* NAME=VALUE, NULL-terminated */
        const char *names;  /* what the error must name */
    } cases[] = {
        {{"RANK=1", "WORLD_SIZE=2", NULL}, "MASTER_ADDR, MASTER_PORT"},
        {{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=", NULL}, "MASTER_ADDR, MASTER_PORT"},
        {{"RANK=1", "WORLD_SIZE=2", "MASTER_PORT=29500", NULL}, "but MASTER_ADDR is unset"},
        {{"RANK=0", "WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="}, "but MASTER_PORT is unset"},
        {{"WORLD_SIZE=2", NULL}, "RANK, MASTER_ADDR, MASTER_PORT"},
        {{"PMI_SIZE=2", NULL}, "PMI_SIZE=2"},
        {{"SLURM_STEP_NUM_TASKS=8", NULL}, "srun without --mpi=pmix"},
        {{"OMPI_COMM_WORLD_SIZE=2", NULL}, "OMPI_COMM_WORLD_SIZE=2"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        clear_launch_env();
        for (int k = 0; k < 4 && cases[i].env[k]; k++)
            putenv((char *)cases[i].env[k]);
        int rc = weft_init(NULL, NULL);
        cr_expect_eq(rc, WEFT_ERR_ARG, "case %zu: %d (%s)", i, rc, rc ? weft_last_error() : weft_bootstrap_name());
        if (rc == WEFT_SUCCESS) {
            weft_finalize();
            continue;
        }
        cr_expect(strstr(weft_last_error(), cases[i].names), "case %zu: wanted '%s' in: %s", i, cases[i].names,
                  weft_last_error());
    }
    /* A job of one rank still starts alone. */
    clear_launch_env();
    putenv("RANK=0");
    putenv("WORLD_SIZE=1");
    putenv("SLURM_STEP_NUM_TASKS=1");
    cr_assert_eq(weft_init(NULL, NULL), WEFT_SUCCESS, "%s", weft_last_error());
    cr_assert_str_eq(weft_bootstrap_name(), "single");
    cr_assert_eq(weft_finalize(), WEFT_SUCCESS);
}

/* ---- settings that must agree across ranks ----------------------------- */
typedef struct {
    const char *var, *value; /* set on rank `on` alone */
    int on;
    const char *needle; /* in every rank's error */
} disagree_t;

/* Every rank fails weft_init within a few seconds, with the same variable
 * and ranks named. Before: init succeeded and the first collective waited
 * for its deadline (600 s by default), or, for a bad WEFT_NODE_ID, the
 * other ranks waited the init deadline. */
static int body_disagree(int rank, int size, void *arg)
{
    const disagree_t *d = arg;
    (void)size;
    if (rank == d->on) setenv(d->var, d->value, 1);
    double t0 = weft_wtime();
    int rc = weft_init(NULL, NULL);
    double took = weft_wtime() - t0;
    if (rc == WEFT_SUCCESS) {
        weft_finalize();
        TH_CHECK(0, "rank %d: weft_init succeeded with %s='%s' on rank %d alone", rank, d->var, d->value, d->on);
    }
    TH_CHECK(rc == WEFT_ERR_ARG && took < 5 && strstr(weft_last_error(), d->needle),
             "rank %d: %d after %.1f s: %s (wanted '%s')", rank, rc, took, weft_last_error(), d->needle);
    return 0;
}

static void disagree_run(int n, disagree_t d)
{
    static const char *const env[] = {"WEFT_LOG_LEVEL=error", "WEFT_INIT_TIMEOUT=30", "WEFT_TIMEOUT=30", NULL};
    th_result_t res = th_run(n, body_disagree, &d, 40, env);
    cr_assert_eq(res.timed_out, 0, "hung");
    cr_assert_eq(res.failed, 0);
}

Test(init, ranks_per_node_on_one_rank_fails_every_rank_at_once, .timeout = 60)
{
    disagree_run(2, (disagree_t){"WEFT_RANKS_PER_NODE", "1", 1, "WEFT_RANKS_PER_NODE (rank 1 sets it unlike rank 0"});
}
Test(init, coll_tune_on_some_ranks_fails_every_rank_at_once, .timeout = 60)
{
    disagree_run(
        3, (disagree_t){"WEFT_COLL_TUNE", "allreduce:0-inf:ring", 0, "WEFT_COLL_TUNE (ranks 1-2 set it unlike rank 0"});
}
Test(init, a_gpu_protocol_knob_on_one_rank_fails_every_rank_at_once, .timeout = 60)
{
    int known = 0;
    for (int i = 0; i < weft_var_count() && !known; i++) {
        const char *name;
        weft_var_get(i, &name, NULL, NULL, NULL);
        known = !strcmp(name, "WEFT_CUDA_COLL_FUSED");
    }
    if (!known) cr_skip_test("built without coll/cuda: WEFT_CUDA_COLL_FUSED does not exist");
    disagree_run(2, (disagree_t){"WEFT_CUDA_COLL_FUSED", "0", 1, "WEFT_CUDA_COLL_FUSED (rank 1 sets it unlike rank 0"});
}
Test(init, a_bad_node_id_fails_every_rank_at_once, .timeout = 60)
{
    disagree_run(3, (disagree_t){"WEFT_NODE_ID", "x1", 1, "WEFT_NODE_ID is not a non-negative integer on rank 1"});
}

/* ---- Kubernetes: rank 0's pod starts late, or never ---------------------- */
static int body_rank0_late(int rank, int size, void *arg)
{
    (void)arg;
    if (rank == 0) sleep(2); /* the others retry until its store is up */
    TH_OK(weft_init(NULL, NULL));
    int right = (rank + 1) % size, left = (rank + size - 1) % size, in = -1;
    TH_OK(weft_sendrecv(&rank, 1, WEFT_INT32, right, 0, &in, 1, WEFT_INT32, left, 0, weft_comm_world(), NULL));
    TH_CHECK(in == left, "in %d", in);
    TH_OK(weft_finalize());
    return 0;
}

Test(init, rank0_starts_late, .timeout = 60)
{
    const char *env[] = {"WEFT_INIT_TIMEOUT=20", NULL};
    th_result_t res = th_run(3, body_rank0_late, NULL, 40, env);
    cr_assert_eq(res.timed_out, 0);
    for (int r = 0; r < 3; r++)
        cr_expect_eq(res.exit_code[r], 0, "rank %d", r);
}

static void set_rank1_of_2(const char *addr, int port)
{
    char b[16];
    snprintf(b, sizeof(b), "%d", port);
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", addr, 1);
    setenv("MASTER_PORT", b, 1);
    setenv("WEFT_INIT_TIMEOUT", "1", 1);
    unsetenv("LOCAL_RANK");
    unsetenv("LOCAL_WORLD_SIZE");
}

Test(init, unreachable_store_says_what_was_tried, .timeout = 60)
{
    setenv("WEFT_BOOTSTRAP", "env", 1);
    unsetenv("TORCHELASTIC_USE_AGENT_STORE");
    /* Nobody listens: every connection is refused. */
    set_rank1_of_2("127.0.0.1", th_free_port());
    cr_assert_eq(weft_init(NULL, NULL), WEFT_ERR_TIMEOUT);
    const char *m = weft_last_error();
    cr_expect(strstr(m, "could not reach rank 0's store at 127.0.0.1:"), "%s", m);
    cr_expect(strstr(m, "connection attempts to port"), "%s", m);
    cr_expect(strstr(m, "Connection refused"), "%s", m);
    /* The same through a name: what it resolved to is part of the story. */
    set_rank1_of_2("localhost", th_free_port());
    cr_assert_eq(weft_init(NULL, NULL), WEFT_ERR_TIMEOUT);
    m = weft_last_error();
    cr_expect(strstr(m, "name 'localhost'"), "%s", m);
    cr_expect(strstr(m, "resolved to "), "%s", m);
    cr_expect(strstr(m, "Connection refused"), "%s", m);
    /* A name that never resolves (.invalid never does: RFC 6761). */
    set_rank1_of_2("weft-no-such-master.invalid", th_free_port());
    double t0 = weft_wtime();
    cr_assert_eq(weft_init(NULL, NULL), WEFT_ERR_TIMEOUT);
    m = weft_last_error();
    cr_expect(weft_wtime() - t0 < 1.0 + 2.0, "init took %.1f s with a 1 s deadline", weft_wtime() - t0);
    cr_expect(strstr(m, "name 'weft-no-such-master.invalid'"), "%s", m);
    cr_expect(strstr(m, "never resolved"), "%s", m);
    cr_expect(strstr(m, "lookups"), "%s", m);
}

/* ---- the torchstore bootstrap facing something else ----------------------- */
typedef struct {
    int listen_fd;
    const char *answer; /* NULL: accept and say nothing */
} fake_store_t;

static void *fake_store_main(void *p)
{
    fake_store_t *f = p;
    char in[10];
    int fd = accept(f->listen_fd, NULL, NULL);
    if (fd < 0) return NULL;
    /* torch's handshake: VALIDATE (5 bytes) and PING (5 bytes). */
    if (recv(fd, in, sizeof(in), MSG_WAITALL) == (ssize_t)sizeof(in) && f->answer)
        (void)send(fd, f->answer, strlen(f->answer), MSG_NOSIGNAL);
    sleep(5);
    close(fd);
    return NULL;
}

static int fake_store_start(fake_store_t *f, pthread_t *tid)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
    socklen_t len = sizeof(sa);
    f->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(f->listen_fd >= 0);
    cr_assert_eq(bind(f->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    cr_assert_eq(listen(f->listen_fd, 4), 0);
    cr_assert_eq(getsockname(f->listen_fd, (struct sockaddr *)&sa, &len), 0);
    cr_assert_eq(pthread_create(tid, NULL, fake_store_main, f), 0);
    return ntohs(sa.sin_port);
}

Test(init, torchstore_refuses_a_service_that_is_not_torchs_store, .timeout = 60)
{
    pthread_t tid;
    /* Under `srun torchrun`, the workers inherit the agent's PMIx variables:
     * torchrun's must win. */
    setenv("PMIX_RANK", "0", 1);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    setenv("TORCHELASTIC_RUN_ID", "weft-test", 1);
    unsetenv("WEFT_BOOTSTRAP");

    fake_store_t wrong = {.answer = "nope"};
    set_rank1_of_2("127.0.0.1", fake_store_start(&wrong, &tid));
    cr_assert_eq(weft_init(NULL, NULL), WEFT_ERR_BOOTSTRAP);
    cr_expect(strstr(weft_last_error(), "is not a torch TCPStore"), "%s", weft_last_error());
    pthread_join(tid, NULL);
    close(wrong.listen_fd);

    fake_store_t silent = {.answer = NULL};
    set_rank1_of_2("127.0.0.1", fake_store_start(&silent, &tid));
    cr_assert_eq(weft_init(NULL, NULL), WEFT_ERR_BOOTSTRAP);
    cr_expect(strstr(weft_last_error(), "did not answer torch's TCPStore ping"), "%s", weft_last_error());
    pthread_join(tid, NULL);
    close(silent.listen_fd);

    setenv("WEFT_BOOTSTRAP", "torchstore", 1);
    unsetenv("MASTER_PORT");
    cr_assert_eq(weft_init(NULL, NULL), WEFT_ERR_ARG);
    cr_expect(strstr(weft_last_error(), "torchstore bootstrap: MASTER_PORT is not set"), "%s", weft_last_error());
}

/* ---- what other users on the host can reach -------------------------- */
/* TCP sockets of this process in the LISTEN state (from /proc/net/tcp{,6}). */
static int tcp_listeners_of_this_process(void)
{
    unsigned long inodes[256];
    int ninodes = 0, n = 0;
    const char *tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
    for (int t = 0; t < 2; t++) {
        FILE *f = fopen(tables[t], "r");
        char line[512];
        if (!f) continue;
        while (fgets(line, sizeof(line), f) && ninodes < 256) {
            unsigned st;
            unsigned long inode;
            /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, " %*d: %*s %*s %x %*s %*s %*s %*d %*d %lu", &st, &inode) == 2 && st == 0x0A)
                inodes[ninodes++] = inode;
        }
        fclose(f);
    }
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[300], target[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, target, sizeof(target) - 1);
        unsigned long inode;
        if (k <= 0) continue;
        target[k] = '\0';
        if (sscanf(target, "socket:[%lu]", &inode) != 1) continue;
        for (int i = 0; i < ninodes; i++)
            n += inodes[i] == inode;
    }
    if (d) closedir(d);
    return n;
}

/* arg: the TCP listeners rank 1 (which serves no store) must have: 0 when
 * weft chose the transports, some when the user asked for UCX's tcp. */
static int body_listeners(int rank, int size, void *arg)
{
    int want_some = *(int *)arg;
    TH_OK(weft_init(NULL, NULL));
    int64_t v = rank + 1, sum = 0;
    TH_OK(weft_allreduce(&v, &sum, 1, WEFT_INT64, WEFT_SUM, weft_comm_world()));
    TH_CHECK(sum == (int64_t)size * (size + 1) / 2, "sum %lld", (long long)sum);
    if (rank == 1) {
        int n = tcp_listeners_of_this_process();
        TH_CHECK(want_some ? n > 0 : n == 0, "rank 1 listens on %d TCP sockets (expected %s)", n,
                 want_some ? "some: UCX_TLS asks for tcp" : "none");
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(init, a_job_on_one_machine_listens_on_no_tcp_port_but_the_store, .timeout = 60)
{
    int none = 0, some = 1;
    th_result_t res = th_run(2, body_listeners, &none, 40, NULL);
    cr_expect_eq(res.failed, 0, "UCX_TLS unset: a rank listened on TCP");
    const char *tcp[] = {"UCX_TLS=tcp,self", NULL};
    res = th_run(2, body_listeners, &some, 40, tcp);
    cr_expect_eq(res.failed, 0, "UCX_TLS=tcp,self: the user's choice was not kept");
}

/* A host whose System V shared-memory ids are used up (any user can take
 * them all) must not stop weft_init: UCX is opened again without sysv. The
 * sysv transport is made to fail here by demanding huge pages for it. */
Test(init, init_survives_a_failing_sysv_transport, .timeout = 60)
{
    int none = 0;
    const char *env[] = {"UCX_SYSV_HUGETLB_MODE=y", NULL};
    th_result_t res = th_run(2, body_listeners, &none, 40, env);
    cr_expect_eq(res.failed, 0, "weft_init failed with sysv unusable");
}

/* A full /dev/shm (a container's 64 MB, or filled by any user) makes
 * UCX's POSIX shared memory fail: weft_init tries without sysv, then
 * without posix, where System V's segments carry the job. POSIX shared
 * memory is made to fail here by pointing it at a directory where no file
 * can be made (/proc/self); /dev/shm itself has room, so both tries run. */
Test(init, init_survives_a_failing_posix_transport, .timeout = 60)
{
    int none = 0;
    const char *env[] = {"UCX_POSIX_DIR=/proc/self", NULL};
    th_result_t res = th_run(2, body_listeners, &none, 40, env);
    cr_expect_eq(res.failed, 0, "weft_init failed with UCX's posix transport unusable");
}

/* A /dev/shm with 1 MiB free (a container's, or one a local user filled):
 * init leaves UCX's POSIX shared memory out at once (System V segments
 * carry the job), coll/shm's segment cannot be made and the collectives
 * run without it; every result is right. Runs in a mount namespace of its
 * own with a small tmpfs over /dev/shm (needs CAP_SYS_ADMIN: skipped
 * without it). */
static int body_small_dev_shm(int rank, int size, void *arg)
{
    (void)arg;
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    int64_t v[64], sum[64], root[64];
    for (int i = 0; i < 64; i++) {
        v[i] = rank * 100 + i;
        root[i] = rank == 2 ? i * 7 : -1;
    }
    TH_OK(weft_allreduce(v, sum, 64, WEFT_INT64, WEFT_SUM, w));
    TH_OK(weft_bcast(root, 64, WEFT_INT64, 2, w));
    for (int i = 0; i < 64; i++) {
        TH_CHECK(sum[i] == 100 * (int64_t)size * (size - 1) / 2 + (int64_t)size * i, "rank %d: sum[%d] = %lld", rank, i,
                 (long long)sum[i]);
        TH_CHECK(root[i] == i * 7, "rank %d: bcast[%d] = %lld", rank, i, (long long)root[i]);
    }
    TH_OK(weft_barrier(w));
    TH_OK(weft_finalize());
    return 0;
}

/* Mounts a tmpfs with options opts over /dev/shm in a mount namespace
 * of this test's own, or skips the test. */
static void small_dev_shm(const char *opts)
{
    if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, opts))
        cr_skip_test("no mount namespace with a small /dev/shm here (%s): needs CAP_SYS_ADMIN", strerror(errno));
}

Test(init, a_small_dev_shm_stops_neither_init_nor_collectives, .timeout = 90)
{
    small_dev_shm("size=1m");
    const char *env[] = {"WEFT_TIMEOUT=30", NULL};
    th_result_t res = th_run(4, body_small_dev_shm, NULL, 60, env);
    cr_expect_eq(res.timed_out, 0, "hung");
    cr_expect_eq(res.failed, 0, "a rank failed with a 1 MiB /dev/shm");
}

/* A /dev/shm out of inodes (any local user can fill it with empty
 * files): no file can be made there, so coll/shm's creator cannot leave
 * a mark; it tells the others by a message, and nobody waits for the
 * segment (WEFT_TIMEOUT short enough that a wait fails the test). */
Test(init, a_dev_shm_out_of_inodes_stops_neither_init_nor_collectives, .timeout = 90)
{
    small_dev_shm("size=64m,nr_inodes=1"); /* the root directory takes the one inode */
    const char *env[] = {"WEFT_TIMEOUT=10", NULL};
    th_result_t res = th_run(4, body_small_dev_shm, NULL, 60, env);
    cr_expect_eq(res.timed_out, 0, "hung");
    cr_expect_eq(res.failed, 0, "a rank failed with a /dev/shm out of inodes");
}
