/* Communicators: split, split_ranks, split_type against references on
 * 1..8 ranks and simulated node layouts; create_group among the members
 * only; nested splits; options and hint
 * inheritance; isolation of traffic between parent and child; 10,000
 * create/free; free with pending requests; bad arguments. */
#include "harness.h"
#include "weft.h"
#include "weft_internal.h"

#include <criterion/criterion.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static weft_comm_t start(int *rank, int *size)
{
    TH_OK(weft_init(NULL, NULL));
    weft_comm_t w = weft_comm_world();
    TH_OK(weft_comm_rank(w, rank));
    TH_OK(weft_comm_size(w, size));
    return w;
}

/* Checks comm against the expected members (world ranks, in new-rank order)
 * and that a ring of messages over it reaches exactly them. */
static void check_members(weft_comm_t c, const int *expect, int n, int world_rank)
{
    int rank, size;
    TH_OK(weft_comm_rank(c, &rank));
    TH_OK(weft_comm_size(c, &size));
    TH_CHECK(size == n, "size %d, expected %d", size, n);
    TH_CHECK(expect[rank] == world_rank, "new rank %d is world %d, expected world %d", rank, world_rank, expect[rank]);
    for (int i = 0; i < n; i++) {
        int wr;
        TH_OK(weft_comm_world_rank(c, i, &wr));
        TH_CHECK(wr == expect[i], "member %d is world %d, expected %d", i, wr, expect[i]);
    }
    int right = (rank + 1) % size, left = (rank + size - 1) % size, in = -1;
    TH_OK(weft_sendrecv(&world_rank, 1, WEFT_INT32, right, 3, &in, 1, WEFT_INT32, left, 3, c, NULL));
    TH_CHECK(in == expect[left], "ring over the new comm: got %d from left, expected %d", in, expect[left]);
}

/* ---- split by color/key ----------------------------------------------- */
static int color_of(int r)
{
    return r % 3 == 2 ? WEFT_UNDEFINED : r % 2;
}
static int key_of(int r, int n)
{
    return (n - r) / 2; /* ties broken by parent rank */
}

static int body_split(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    weft_comm_t c;
    TH_OK(weft_comm_split(w, color_of(rank), key_of(rank, size), WEFT_OPTIONS_NULL, &c));
    if (color_of(rank) == WEFT_UNDEFINED) {
        TH_CHECK(c == WEFT_COMM_NULL, "undefined color gave a communicator");
    } else {
        int expect[64], m = 0;
        for (int k = -64; k <= 64; k++) /* by key, then parent rank */
            for (int r = 0; r < size; r++)
                if (color_of(r) == color_of(rank) && key_of(r, size) == k) expect[m++] = r;
        check_members(c, expect, m, rank);
        /* Nested: split the child again, reversing its order. */
        int crank, csize;
        weft_comm_t g;
        TH_OK(weft_comm_rank(c, &crank));
        TH_OK(weft_comm_size(c, &csize));
        TH_OK(weft_comm_split(c, 0, -crank, WEFT_OPTIONS_NULL, &g));
        int rev[64];
        for (int i = 0; i < m; i++)
            rev[i] = expect[m - 1 - i];
        check_members(g, rev, m, rank);
        TH_OK(weft_comm_free(&g));
        TH_OK(weft_comm_free(&c));
        TH_CHECK(c == WEFT_COMM_NULL, "free did not reset the handle");
    }
    weft_comm_t d;
    TH_OK(weft_comm_dup(w, WEFT_OPTIONS_NULL, &d));
    int all[64];
    for (int r = 0; r < size; r++)
        all[r] = r;
    check_members(d, all, size, rank);
    TH_OK(weft_comm_free(&d));
    TH_OK(weft_finalize());
    return 0;
}

Test(comm, split_color_key_1_to_8_ranks, .timeout = 120)
{
    for (int n = 1; n <= 8; n++) {
        th_result_t res = th_run(n, body_split, NULL, 60, NULL);
        cr_assert_eq(res.failed, 0, "%d ranks", n);
    }
}

/* ---- split_ranks (torchcomms): groups given as member lists ----------- */
static int body_split_ranks(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    /* Groups: even ranks in descending order, odd ranks ascending; rank 1 asks for none. */
    int list[64], m = 0;
    if (rank == 1 && size > 2) {
        m = 0;
    } else if (rank % 2 == 0) {
        for (int r = size - 1; r >= 0; r--)
            if (r % 2 == 0) list[m++] = r;
    } else {
        for (int r = 0; r < size; r++)
            if (r % 2 == 1 && !(r == 1 && size > 2)) list[m++] = r;
    }
    weft_comm_t c;
    TH_OK(weft_comm_split_ranks(w, list, m, rank % 2 ? "odd" : "even", WEFT_OPTIONS_NULL, &c));
    if (m == 0) {
        TH_CHECK(c == WEFT_COMM_NULL, "empty list gave a communicator");
    } else {
        check_members(c, list, m, rank);
        TH_CHECK(!strcmp(weft_comm_name(c), rank % 2 ? "odd" : "even"), "name %s", weft_comm_name(c));
        TH_OK(weft_comm_free(&c));
    }
    TH_OK(weft_finalize());
    return 0;
}

Test(comm, split_ranks_1_to_8_ranks, .timeout = 120)
{
    for (int n = 1; n <= 8; n++) {
        th_result_t res = th_run(n, body_split_ranks, NULL, 60, NULL);
        cr_assert_eq(res.failed, 0, "%d ranks", n);
    }
}

/* ---- split_type NODE with simulated nodes ----------------------------- */
typedef struct {
    int nodes[16]; /* node id per rank */
} layout_t;

static int body_split_node(int rank, int size, void *arg)
{
    layout_t *lay = arg;
    char b[16];
    snprintf(b, sizeof(b), "%d", lay->nodes[rank]);
    setenv("WEFT_NODE_ID", b, 1);
    unsetenv("LOCAL_RANK");
    unsetenv("LOCAL_WORLD_SIZE");
    int me, n;
    weft_comm_t w = start(&me, &n);
    int expect[64], m = 0, lr = -1, ls = -1, node, nnodes, distinct = 0;
    for (int r = 0; r < size; r++)
        if (lay->nodes[r] == lay->nodes[rank]) expect[m++] = r;
    for (int r = 0; r < size; r++) {
        int seen = 0;
        for (int q = 0; q < r; q++)
            seen |= lay->nodes[q] == lay->nodes[r];
        distinct += !seen;
    }
    /* Reverse order by key within the node. */
    weft_comm_t c;
    TH_OK(weft_comm_split_type(w, WEFT_SPLIT_NODE, 0, WEFT_OPTIONS_NULL, &c));
    check_members(c, expect, m, rank);
    TH_OK(weft_local_rank(&lr));
    TH_OK(weft_local_size(&ls));
    TH_OK(weft_node_info(&node, &nnodes));
    TH_CHECK(ls == m && expect[lr] == rank, "local rank %d of %d", lr, ls);
    TH_CHECK(nnodes == distinct, "%d nodes, expected %d", nnodes, distinct);
    /* Simulated nodes share this machine's CPUs: every rank counts (these
     * ranks are not bound: each shares all of its CPUs with all of them),
     * and more ranks than CPUs means waiting ranks yield at once. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    TH_CHECK(weft_g.machine_ranks == size, "%d ranks on this machine, expected %d", weft_g.machine_ranks, size);
    TH_CHECK(weft_g.cpu_sharers == size && weft_g.cpus_shared >= 1 && weft_g.cpus_shared <= cpus,
             "%d ranks share %d CPUs, expected %d ranks", weft_g.cpu_sharers, weft_g.cpus_shared, size);
    TH_CHECK(getenv("WEFT_SPIN_BEFORE_YIELD") || weft_cfg.spin_before_yield == (size > weft_g.cpus_shared ? 1 : 2000),
             "spin before yield %d with %d ranks on %d CPUs", weft_cfg.spin_before_yield, size, weft_g.cpus_shared);
    /* NUMA and socket splits lie within the node split. */
    weft_comm_t numa, sock;
    TH_OK(weft_comm_split_type(w, WEFT_SPLIT_NUMA, 0, WEFT_OPTIONS_NULL, &numa));
    TH_OK(weft_comm_split_type(w, WEFT_SPLIT_SOCKET, 0, WEFT_OPTIONS_NULL, &sock));
    int ns, ss;
    TH_OK(weft_comm_size(numa, &ns));
    TH_OK(weft_comm_size(sock, &ss));
    TH_CHECK(ns >= 1 && ns <= m && ss >= 1 && ss <= m, "numa %d socket %d node %d", ns, ss, m);
    TH_OK(weft_comm_free(&numa));
    TH_OK(weft_comm_free(&sock));
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_finalize());
    return 0;
}

static void run_layout(int n, const int *nodes)
{
    layout_t lay;
    memcpy(lay.nodes, nodes, sizeof(int) * (size_t)n);
    th_result_t res = th_run(n, body_split_node, &lay, 60, NULL);
    cr_assert_eq(res.failed, 0, "layout of %d ranks", n);
}

Test(comm, split_type_node_simulated_layouts, .timeout = 180)
{
    run_layout(4, (int[]){0, 0, 1, 1});          /* 2x2 */
    run_layout(6, (int[]){0, 0, 0, 1, 1, 1});    /* 2x3 */
    run_layout(6, (int[]){0, 0, 1, 1, 2, 2});    /* 3x2 */
    run_layout(4, (int[]){0, 1, 2, 3});          /* 4x1 */
    run_layout(4, (int[]){7, 7, 7, 7});          /* 1x4 */
    run_layout(5, (int[]){3, 1, 3, 3, 1});       /* uneven, interleaved */
    run_layout(7, (int[]){0, 0, 0, 0, 0, 1, 2}); /* uneven */
    /* dealt round-robin: rank 0's broadcast map is four runs of 0, 1, 2 */
    run_layout(12, (int[]){5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6, 7});
}

static int body_ranks_per_node(int rank, int size, void *arg)
{
    (void)arg;
    unsetenv("LOCAL_RANK");
    unsetenv("LOCAL_WORLD_SIZE");
    int me, n, node, nnodes, lr, ls;
    weft_comm_t w = start(&me, &n);
    TH_OK(weft_node_info(&node, &nnodes));
    TH_OK(weft_local_rank(&lr));
    TH_OK(weft_local_size(&ls));
    TH_CHECK(node == rank / 3 && nnodes == (size + 2) / 3, "node %d of %d", node, nnodes);
    TH_CHECK(lr == rank % 3, "local rank %d", lr);
    weft_comm_t c;
    TH_OK(weft_comm_split_type(w, WEFT_SPLIT_NODE, 0, WEFT_OPTIONS_NULL, &c));
    int expect[8], m = 0;
    for (int r = 0; r < size; r++)
        if (r / 3 == rank / 3) expect[m++] = r;
    check_members(c, expect, m, rank);
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_finalize());
    return 0;
}

Test(comm, ranks_per_node_variable, .timeout = 60)
{
    const char *env[] = {"WEFT_RANKS_PER_NODE=3", NULL};
    th_result_t res = th_run(8, body_ranks_per_node, NULL, 50, env);
    cr_assert_eq(res.failed, 0);
}

/* ---- options, inheritance, hints -------------------------------------- */
static int body_options(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    int me, n, st;
    char why[256];
    weft_comm_t w = start(&me, &n);
    weft_options_t o;
    TH_OK(weft_options_create(&o));
    TH_OK(weft_options_set_name(o, "trainer"));
    TH_OK(weft_options_set_timeout(o, 42));
    TH_OK(weft_options_set_device(o, 3));
    TH_OK(weft_options_set_hint(o, "allreduce_algorithm", "ring"));
    TH_OK(weft_options_set_hint(o, "max_ctas", "16"));
    TH_OK(weft_options_set_hint(o, "min_ctas", "lots"));
    TH_OK(weft_options_set_hint(o, "frobnicate", "yes"));
    TH_OK(weft_options_set_hint(o, "allgather_algorithm", "warp"));
    TH_OK(weft_options_set_hint(o, "teleport_algorithm", "now"));
    weft_comm_t c;
    TH_OK(weft_comm_split(w, 0, rank, o, &c));
    double t;
    int dev;
    TH_OK(weft_comm_get_timeout(c, &t));
    TH_OK(weft_comm_get_device(c, &dev));
    TH_CHECK(t == 42 && dev == 3 && !strcmp(weft_comm_name(c), "trainer"), "t %g dev %d name %s", t, dev,
             weft_comm_name(c));
    TH_OK(weft_comm_hint_status(c, "max_ctas", &st, why, sizeof(why)));
    /* applied where coll/cuda's kernels are built, ignored with the reason elsewhere */
    int gpu = strstr(weft_build_info(), "collectives: coll/cuda") != NULL;
    TH_CHECK(st == (gpu ? WEFT_HINT_APPLIED : WEFT_HINT_IGNORED) && strlen(why) > 5, "max_ctas: %d %s", st, why);
    TH_OK(weft_comm_hint_status(c, "min_ctas", &st, why, sizeof(why)));
    TH_CHECK(st == WEFT_HINT_REJECTED && strstr(why, "lots"), "min_ctas: %d %s", st, why);
    TH_OK(weft_comm_hint_status(c, "frobnicate", &st, why, sizeof(why)));
    TH_CHECK(st == WEFT_HINT_IGNORED && strstr(why, "unknown"), "frobnicate: %d %s", st, why);
    TH_OK(weft_comm_hint_status(c, "allreduce_algorithm", &st, why, sizeof(why)));
    TH_CHECK(st == WEFT_HINT_APPLIED && strstr(why, "ring"), "allreduce_algorithm: %d %s", st, why);
    TH_OK(weft_comm_hint_status(c, "allgather_algorithm", &st, why, sizeof(why)));
    TH_CHECK(st == WEFT_HINT_REJECTED && strstr(why, "bruck"), "allgather_algorithm=warp: %d %s", st, why);
    TH_OK(weft_comm_hint_status(c, "teleport_algorithm", &st, why, sizeof(why)));
    TH_CHECK(st == WEFT_HINT_IGNORED && strstr(why, "teleport"), "teleport_algorithm: %d %s", st, why);
    TH_OK(weft_comm_hint_status(c, "bcast_algorithm", &st, NULL, 0));
    TH_CHECK(st == WEFT_HINT_NOT_SET, "not given: %d", st);
    int count;
    TH_OK(weft_comm_hint_count(c, &count));
    TH_CHECK(count == 6, "%d hints", count);
    /* A child inherits everything; its own options override per field. */
    weft_comm_t d, e;
    TH_OK(weft_comm_dup(c, WEFT_OPTIONS_NULL, &d));
    TH_OK(weft_comm_get_timeout(d, &t));
    TH_OK(weft_comm_hint_count(d, &count));
    TH_CHECK(t == 42 && count == 6, "inherited timeout %g, %d hints", t, count);
    weft_options_t o2;
    TH_OK(weft_options_create(&o2));
    TH_OK(weft_options_set_hint(o2, "timeout", "7.5"));
    TH_OK(weft_comm_dup(d, o2, &e));
    TH_OK(weft_comm_get_timeout(e, &t));
    TH_OK(weft_comm_hint_status(e, "timeout", &st, NULL, 0));
    TH_CHECK(t == 7.5 && st == WEFT_HINT_APPLIED, "timeout hint: %g (%d)", t, st);
    TH_OK(weft_comm_get_device(e, &dev));
    TH_CHECK(dev == 3, "device not inherited: %d", dev);
    TH_OK(weft_options_set_hint(o2, "timeout", "-1"));
    weft_comm_t f;
    TH_OK(weft_comm_dup(d, o2, &f));
    TH_OK(weft_comm_hint_status(f, "timeout", &st, why, sizeof(why)));
    TH_OK(weft_comm_get_timeout(f, &t));
    TH_CHECK(st == WEFT_HINT_REJECTED && t == 42, "bad timeout hint: %d %g", st, t);
    TH_OK(weft_options_free(&o));
    TH_OK(weft_options_free(&o2));
    TH_CHECK(o == WEFT_OPTIONS_NULL, "options handle not reset");
    TH_OK(weft_comm_free(&f));
    TH_OK(weft_comm_free(&e));
    TH_OK(weft_comm_free(&d));
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_finalize());
    return 0;
}

Test(comm, options_inheritance_and_hint_statuses, .timeout = 60)
{
    th_result_t res = th_run(3, body_options, NULL, 50, NULL);
    cr_assert_eq(res.failed, 0);
}

/* ---- parent and child traffic with identical tags never mix ----------- */
static int body_isolation(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    weft_comm_t c;
    TH_OK(weft_comm_dup(w, WEFT_OPTIONS_NULL, &c));
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    enum { K = 20 };
    int inw[K], inc[K], outw[K], outc[K];
    weft_request_t reqs[4 * K];
    int q = 0;
    /* Post child receives first, then parent ones, all tag 5 from the same peer. */
    for (int i = 0; i < K; i++)
        TH_OK(weft_irecv(&inc[i], 1, WEFT_INT32, left, 5, c, &reqs[q++]));
    for (int i = 0; i < K; i++)
        TH_OK(weft_irecv(&inw[i], 1, WEFT_INT32, WEFT_ANY_SOURCE, WEFT_ANY_TAG, w, &reqs[q++]));
    for (int i = 0; i < K; i++) {
        outw[i] = 1000 * rank + i;
        outc[i] = -1000 * rank - i - 1;
        TH_OK(weft_isend(&outw[i], 1, WEFT_INT32, right, 5, w, &reqs[q++]));
        TH_OK(weft_isend(&outc[i], 1, WEFT_INT32, right, 5, c, &reqs[q++]));
    }
    TH_OK(weft_waitall(q, reqs, NULL));
    for (int i = 0; i < K; i++) {
        TH_CHECK(inw[i] == 1000 * left + i, "parent message %d: %d", i, inw[i]);
        TH_CHECK(inc[i] == -1000 * left - i - 1, "child message %d: %d", i, inc[i]);
    }
    TH_OK(weft_comm_free(&c));
    TH_OK(weft_finalize());
    return 0;
}

Test(comm, parent_and_child_traffic_with_equal_tags, .timeout = 60)
{
    th_result_t res = th_run(4, body_isolation, NULL, 50, NULL);
    cr_assert_eq(res.failed, 0);
}

/* ---- 10,000 communicators: no leak of memory or context ids ------------ */
static int body_many(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    int me, n;
    weft_comm_t w = start(&me, &n);
    weft_comm_t c;
    /* Warm the allocators, then measure. */
    for (int i = 0; i < 50; i++) {
        TH_OK(weft_comm_split(w, rank % 2, 0, WEFT_OPTIONS_NULL, &c));
        TH_OK(weft_comm_free(&c));
    }
    struct mallinfo2 before = mallinfo2();
    for (int i = 0; i < 10000; i++) {
        TH_OK(weft_comm_split(w, rank % 2, i, WEFT_OPTIONS_NULL, &c));
        TH_OK(weft_comm_free(&c));
    }
    struct mallinfo2 after = mallinfo2();
    long grew = (long)after.uordblks - (long)before.uordblks;
    TH_CHECK(grew < 64 * 1024, "heap grew by %ld bytes over 10,000 communicators", grew);
    /* More live communicators than 4096 would fail if ids had leaked. */
    weft_comm_t keep[100];
    for (int i = 0; i < 100; i++)
        TH_OK(weft_comm_dup(w, WEFT_OPTIONS_NULL, &keep[i]));
    for (int i = 0; i < 100; i++)
        TH_OK(weft_comm_free(&keep[i]));
    TH_OK(weft_finalize());
    return 0;
}

Test(comm, ten_thousand_create_free, .timeout = 180)
{
    th_result_t res = th_run(3, body_many, NULL, 170, NULL);
    cr_assert_eq(res.failed, 0);
}

/* ---- create_group: collective over the members only --------------------- */
static int body_create_group(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    weft_comm_t a = WEFT_COMM_NULL, b = WEFT_COMM_NULL, c, d;
    /* Two disjoint groups at once, in their own orders; the others never call. */
    int la[] = {3, 1, 4}, lb[] = {2, 0};
    if (rank == 1 || rank == 3 || rank == 4) {
        TH_OK(weft_comm_create_group(w, la, 3, 7, WEFT_OPTIONS_NULL, &a));
        check_members(a, la, 3, rank);
        /* A group of a group, without its member 1 (world rank 1). */
        if (rank != 1) {
            int l[] = {2, 0}, expect[] = {4, 3};
            TH_OK(weft_comm_create_group(a, l, 2, 0, WEFT_OPTIONS_NULL, &c));
            check_members(c, expect, 2, rank);
            TH_OK(weft_comm_free(&c));
        }
    } else if (rank == 0 || rank == 2) {
        TH_OK(weft_comm_create_group(w, lb, 2, 7, WEFT_OPTIONS_NULL, &b));
        check_members(b, lb, 2, rank);
    }
    /* Overlapping groups, one after the other on the shared member 2, each
     * with its own tag (the members of one may start before the other ends). */
    int lc[] = {0, 1, 2}, ld[] = {2, 3, 4};
    if (rank <= 2) {
        TH_OK(weft_comm_create_group(w, lc, 3, 100, WEFT_OPTIONS_NULL, &c));
        check_members(c, lc, 3, rank);
        TH_OK(weft_comm_free(&c));
    }
    if (rank >= 2) {
        TH_OK(weft_comm_create_group(w, ld, 3, 101, WEFT_OPTIONS_NULL, &d));
        check_members(d, ld, 3, rank);
        TH_OK(weft_comm_free(&d));
    }
    /* Everyone, in reverse order, with options: a collective runs on it. */
    int all[16], sum = 0, total = 0;
    for (int i = 0; i < size; i++)
        all[i] = size - 1 - i;
    weft_options_t o;
    TH_OK(weft_options_create(&o));
    TH_OK(weft_options_set_name(o, "grouped"));
    TH_OK(weft_comm_create_group(w, all, size, 5, o, &c));
    TH_OK(weft_options_free(&o));
    TH_CHECK(!strcmp(weft_comm_name(c), "grouped"), "name %s", weft_comm_name(c));
    check_members(c, all, size, rank);
    TH_OK(weft_allreduce(&rank, &sum, 1, WEFT_INT32, WEFT_SUM, c));
    for (int i = 0; i < size; i++)
        total += i;
    TH_CHECK(sum == total, "allreduce over the group: %d, expected %d", sum, total);
    TH_OK(weft_comm_free(&c));
    /* The first member sees another list: every member fails, naming why. */
    int l3[] = {0, 1, 2}, l2[] = {0, 1};
    if (rank <= 2) {
        int rc = weft_comm_create_group(w, rank == 1 ? l2 : l3, rank == 1 ? 2 : 3, 9, WEFT_OPTIONS_NULL, &c);
        TH_CHECK(rc == WEFT_ERR_ARG && c == WEFT_COMM_NULL, "another list: rc %d (%s)", rc, weft_last_error());
        TH_CHECK(strstr(weft_last_error(), rank == 1 ? "not 2 members long" : "another list"), "%s", weft_last_error());
    }
    /* A NULL output pointer on one member: all of them fail. */
    if (rank <= 1) {
        int rc = weft_comm_create_group(w, l2, 2, 10, WEFT_OPTIONS_NULL, rank == 1 ? NULL : &c);
        TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), "NULL output"), "NULL out: rc %d (%s)", rc,
                 weft_last_error());
    }
    /* Arguments this rank alone can tell are wrong: it fails at once. */
    int dup[] = {rank, rank}, far[] = {rank, size + 1}, self_less[] = {(rank + 1) % size};
    TH_CHECK(weft_comm_create_group(w, NULL, 1, 0, WEFT_OPTIONS_NULL, &c) == WEFT_ERR_ARG, "NULL list");
    TH_CHECK(weft_comm_create_group(w, dup, 0, 0, WEFT_OPTIONS_NULL, &c) == WEFT_ERR_ARG, "no ranks");
    TH_CHECK(weft_comm_create_group(w, dup, 2, 0, WEFT_OPTIONS_NULL, &c) == WEFT_ERR_ARG, "twice");
    TH_CHECK(weft_comm_create_group(w, far, 2, 0, WEFT_OPTIONS_NULL, &c) == WEFT_ERR_ARG, "out of range");
    TH_CHECK(weft_comm_create_group(w, self_less, 1, 0, WEFT_OPTIONS_NULL, &c) == WEFT_ERR_ARG &&
                 strstr(weft_last_error(), "does not contain the caller"),
             "%s", weft_last_error());
    TH_CHECK(weft_comm_create_group(w, all, size, -1, WEFT_OPTIONS_NULL, &c) == WEFT_ERR_ARG, "negative tag");
    TH_CHECK(weft_comm_create_group(w, all, size, WEFT_TAG_UB + 1, WEFT_OPTIONS_NULL, &c) == WEFT_ERR_ARG, "tag");
    TH_CHECK(weft_comm_create_group(WEFT_COMM_NULL, all, size, 0, WEFT_OPTIONS_NULL, &c) == WEFT_ERR_COMM, "null");
    if (a) TH_OK(weft_comm_free(&a));
    if (b) TH_OK(weft_comm_free(&b));
    TH_OK(weft_finalize());
    return 0;
}

Test(comm, create_group_among_members_only, .timeout = 90)
{
    th_result_t res = th_run(5, body_create_group, NULL, 80, NULL);
    cr_assert_eq(res.failed, 0);
}

/* ---- free with pending requests; bad arguments ------------------------ */
static int body_bad(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    weft_comm_t c = WEFT_COMM_NULL;
    /* Free with a pending receive: refused, naming it; fine after cancel. */
    TH_OK(weft_comm_dup(w, WEFT_OPTIONS_NULL, &c));
    int x;
    weft_request_t r;
    TH_OK(weft_irecv(&x, 1, WEFT_INT32, 0, 77, c, &r));
    int rc = weft_comm_free(&c);
    TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), "recv from rank 0 tag 77"), "rc %d: %s", rc,
             weft_last_error());
    TH_CHECK(c != WEFT_COMM_NULL, "handle reset although free failed");
    TH_OK(weft_request_cancel(&r));
    TH_CHECK(weft_wait(&r, NULL) == WEFT_ERR_CANCELED, "cancel");
    TH_OK(weft_comm_free(&c));
    TH_CHECK(weft_comm_free(&c) == WEFT_ERR_COMM, "double free");
    weft_comm_t w2 = w;
    TH_CHECK(weft_comm_free(&w2) == WEFT_ERR_COMM, "freeing the world");
    /* NULL output: that rank fails, the others get a communicator without it. */
    weft_comm_t d;
    if (rank == 1) {
        TH_CHECK(weft_comm_split(w, 0, 0, WEFT_OPTIONS_NULL, NULL) == WEFT_ERR_ARG, "NULL out");
        TH_CHECK(strstr(weft_last_error(), "NULL output"), "%s", weft_last_error());
    } else {
        int without1[16], m1 = 0;
        for (int i = 0; i < size; i++)
            if (i != 1) without1[m1++] = i;
        TH_OK(weft_comm_split(w, 0, 0, WEFT_OPTIONS_NULL, &d));
        check_members(d, without1, m1, rank);
        TH_OK(weft_comm_free(&d));
    }
    /* Duplicates, out of range, list without self, mismatched lists: all
     * reported on every rank concerned, within the timeout. */
    int dup_list[] = {0, 0};
    int bad_list[] = {0, size + 3};
    int all[16], mism[16];
    for (int i = 0; i < size; i++)
        all[i] = i;
    for (int i = 0; i < size; i++)
        mism[i] = size - 1 - i;
    if (rank == 0)
        rc = weft_comm_split_ranks(w, dup_list, 2, NULL, WEFT_OPTIONS_NULL, &d);
    else
        rc = weft_comm_split_ranks(w, all, size, NULL, WEFT_OPTIONS_NULL, &d);
    TH_CHECK(rc == WEFT_ERR_ARG && d == WEFT_COMM_NULL, "duplicates: rc %d", rc);
    if (rank == 0) TH_CHECK(strstr(weft_last_error(), "twice"), "%s", weft_last_error());
    rc = weft_comm_split_ranks(w, rank == 1 ? bad_list : all, size, NULL, WEFT_OPTIONS_NULL, &d);
    TH_CHECK(rc == WEFT_ERR_ARG, "out of range: rc %d", rc);
    if (rank == 1) TH_CHECK(strstr(weft_last_error(), "out of range"), "%s", weft_last_error());
    int others[16], m = 0;
    for (int i = 0; i < size; i++)
        if (i != rank) others[m++] = i;
    rc = weft_comm_split_ranks(w, rank == 2 ? others : all, rank == 2 ? m : size, NULL, WEFT_OPTIONS_NULL, &d);
    TH_CHECK(rc == WEFT_ERR_ARG, "without self: rc %d", rc);
    if (rank == 2) TH_CHECK(strstr(weft_last_error(), "does not contain the caller"), "%s", weft_last_error());
    double t0 = weft_wtime();
    rc = weft_comm_split_ranks(w, rank == 0 ? mism : all, size, NULL, WEFT_OPTIONS_NULL, &d);
    TH_CHECK(rc == WEFT_ERR_ARG && strstr(weft_last_error(), "differs"), "mismatch: rc %d %s", rc, weft_last_error());
    TH_CHECK(weft_wtime() - t0 < 30, "mismatch took too long");
    TH_CHECK(weft_comm_split(w, -5, 0, WEFT_OPTIONS_NULL, &d) == WEFT_ERR_ARG, "negative color");
    TH_CHECK(weft_comm_split_type(w, 99, 0, WEFT_OPTIONS_NULL, &d) == WEFT_ERR_ARG, "bad split type");
    TH_CHECK(weft_comm_split(WEFT_COMM_NULL, 0, 0, WEFT_OPTIONS_NULL, &d) == WEFT_ERR_COMM, "null comm");
    /* After all that the communicator still works. */
    TH_OK(weft_comm_split_ranks(w, all, size, "ok", WEFT_OPTIONS_NULL, &d));
    TH_OK(weft_comm_warmup(d));
    TH_OK(weft_comm_free(&d));
    TH_OK(weft_finalize());
    return 0;
}

Test(comm, free_with_pending_and_bad_arguments, .timeout = 90)
{
    th_result_t res = th_run(3, body_bad, NULL, 80, NULL);
    cr_assert_eq(res.failed, 0);
}

/* ---- warm-up and peer info -------------------------------------------- */
static int body_warmup(int rank, int size, void *arg)
{
    (void)arg;
    int me, n;
    weft_comm_t w = start(&me, &n);
    TH_OK(weft_comm_warmup(w));
    char info[512];
    for (int p = 0; p < size; p++) {
        TH_OK(weft_comm_peer_info(w, p, info, sizeof(info)));
        TH_CHECK(strchr(info, '/') && !strstr(info, "unknown"), "peer %d: '%s'", p, info);
        if (p == rank) TH_CHECK(strstr(info, "self/"), "self: '%s'", info);
    }
    TH_CHECK(weft_comm_peer_info(w, size, info, sizeof(info)) == WEFT_ERR_ARG, "out of range");
    TH_OK(weft_finalize());
    return 0;
}

Test(comm, warmup_and_peer_info, .timeout = 60)
{
    th_result_t res = th_run(4, body_warmup, NULL, 50, NULL);
    cr_assert_eq(res.failed, 0);
}

/* ---- abort on error: a timeout ends the process instead of returning --- */
static int body_abort(int rank, int size, void *arg)
{
    (void)arg;
    (void)size;
    int me, n, x;
    weft_comm_t w = start(&me, &n);
    weft_options_t o;
    weft_comm_t c;
    TH_OK(weft_options_create(&o));
    TH_OK(weft_options_set_abort_on_error(o, 1));
    TH_OK(weft_options_set_timeout(o, 0.5));
    TH_OK(weft_comm_dup(w, o, &c));
    if (rank == 0) {
        weft_recv(&x, 1, WEFT_INT32, 1, 1, c, NULL); /* never sent: aborts */
        return 0;                                    /* not reached */
    }
    weft_finalize(); /* rank 0 is gone: fails fast, does not hang */
    return 0;
}

Test(comm, abort_on_error_ends_the_process, .timeout = 60)
{
    th_result_t res = th_run(2, body_abort, NULL, 40, NULL);
    cr_assert_eq(res.timed_out, 0);
    cr_assert_eq(res.exit_code[0], 1, "rank 0 returned instead of aborting (exit %d)", res.exit_code[0]);
    cr_assert_eq(res.exit_code[1], 0);
}
