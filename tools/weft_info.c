/* weft_info: what this weft is, how it was started, what UCX offers, and
 * every WEFT_* variable. Run it alone, or under a launcher (rank 0 prints). */
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(void)
{
    printf("usage: weft_info [--vars] [--coll] [--topo] [--peers] [--rdma] [--no-init] [-h]\n"
           "  (no option)  version, build, bootstrap, UCX version and transports, host, variables\n"
           "  --vars       only the WEFT_* variable table\n"
           "  --coll       the collective algorithms and the selection table in effect\n"
           "  --topo       the node map and every rank's placement (run it under a launcher)\n"
           "  --peers      which UCX transports connect rank 0 to every rank (after a warm-up)\n"
           "  --rdma       the RDMA ports and RoCE GIDs, which one UCX gets and why (rank 0 in full,\n"
           "               then every rank's choice); with --no-init, what weft_init would choose\n"
           "  --no-init    do not initialise weft (no bootstrap line)\n");
}

#define LINE 1024

/* Every rank sends rank 0 one line; rank 0 prints them in rank order. */
static int gather_lines(const char *mine, int rank, int size)
{
    weft_comm_t w = weft_comm_world();
    if (rank != 0) return weft_send(mine, LINE, WEFT_BYTE, 0, 1, w);
    printf("%s\n", mine);
    for (int r = 1; r < size; r++) {
        char line[LINE];
        int rc = weft_recv(line, LINE, WEFT_BYTE, r, 1, w, NULL);
        if (rc) return rc;
        line[LINE - 1] = '\0';
        printf("%s\n", line);
    }
    return WEFT_SUCCESS;
}

static int print_topo(int rank, int size)
{
    char host[64] = "?", place[256], line[LINE];
    int node, nnodes, lr, ls;
    gethostname(host, sizeof(host) - 1);
    weft_node_info(&node, &nnodes);
    weft_local_rank(&lr);
    weft_local_size(&ls);
    if (weft_placement(place, sizeof(place)) != WEFT_SUCCESS)
        snprintf(place, sizeof(place), "? (%s)", weft_last_error());
    if (rank == 0)
        printf("node map: %d rank%s on %d node%s\n", size, size == 1 ? "" : "s", nnodes, nnodes == 1 ? "" : "s");
    snprintf(line, sizeof(line), "  rank %-4d node %-3d local %d/%d  host %-16s %s", rank, node, lr, ls, host, place);
    return gather_lines(line, rank, size);
}

static int print_peers(int rank, int size)
{
    char info[256], line[LINE];
    int rc = weft_comm_warmup(weft_comm_world());
    if (rc) return rc;
    if (rank == 0) printf("transports from each rank to its neighbours (after weft_comm_warmup):\n");
    char a[256], b[256];
    weft_comm_peer_info(weft_comm_world(), (rank + 1) % size, a, sizeof(a));
    weft_comm_peer_info(weft_comm_world(), rank, b, sizeof(b));
    snprintf(info, sizeof(info), "%s", a);
    snprintf(line, sizeof(line), "  rank %-4d -> rank %-4d %s   (self: %s)", rank, (rank + 1) % size, info, b);
    return gather_lines(line, rank, size);
}

static int print_rdma(int rank, int size)
{
    static char report[1 << 16];
    char line[LINE];
    int rc = weft_rdma_report(report, sizeof(report));
    if (rc != WEFT_SUCCESS && rc != WEFT_ERR_TRUNCATE) return rc;
    if (rank == 0) fputs(report, stdout);
    if (size > 1) {
        int lr = 0;
        weft_local_rank(&lr);
        if (rank == 0) printf("each rank's choice:\n");
        snprintf(line, sizeof(line), "  rank %-4d local %-3d %.*s", rank, lr, (int)strcspn(report, "\n"), report);
        rc = gather_lines(line, rank, size);
    }
    return rc == WEFT_ERR_TRUNCATE ? WEFT_SUCCESS : rc;
}

static void print_vars(void)
{
    printf("variables (set in the environment; a type ending in '*': the same on every rank, compared at init):\n");
    for (int i = 0; i < weft_var_count(); i++) {
        const char *name, *type, *def, *desc;
        weft_var_get(i, &name, &type, &def, &desc);
        const char *cur = getenv(name);
        char hidden[64];
        if (cur && !strcmp(name, "WEFT_JOB_SECRET")) { /* say that it is set, never what it is */
            snprintf(hidden, sizeof(hidden), "(hidden, %zu characters)", strlen(cur));
            cur = hidden;
        }
        printf("  %-24s %-9s default %-6s %s%s%s%s\n", name, type, def, desc, cur ? " [set: " : "", cur ? cur : "",
               cur ? "]" : "");
    }
}

int main(int argc, char **argv)
{
    int vars_only = 0, coll = 0, topo = 0, peers = 0, rdma = 0, do_init = 1, rank = 0, size = 1, lrank = 0, lsize = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vars"))
            vars_only = 1;
        else if (!strcmp(argv[i], "--no-init"))
            do_init = 0;
        else if (!strcmp(argv[i], "--topo"))
            topo = 1;
        else if (!strcmp(argv[i], "--peers"))
            peers = 1;
        else if (!strcmp(argv[i], "--coll"))
            coll = 1;
        else if (!strcmp(argv[i], "--rdma"))
            rdma = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage();
            return 0;
        } else {
            fprintf(stderr, "weft_info: unknown option '%s'\n", argv[i]);
            usage();
            return 2;
        }
    }
    if (vars_only) {
        print_vars();
        return 0;
    }
    if (do_init) {
        int rc = weft_init(&argc, &argv);
        if (rc != WEFT_SUCCESS) {
            fprintf(stderr, "weft_info: weft_init failed: %s: %s\n", weft_strerror(rc), weft_last_error());
            return 1;
        }
        weft_comm_rank(weft_comm_world(), &rank);
        weft_comm_size(weft_comm_world(), &size);
        weft_local_rank(&lrank);
        weft_local_size(&lsize);
    }
    if (coll) {
        static char table[65536];
        int rc = do_init ? weft_coll_table(table, sizeof(table)) : WEFT_ERR_NOT_INITIALIZED;
        if (rc)
            fprintf(stderr, "weft_info --coll: %s: %s\n", weft_strerror(rc), weft_last_error());
        else if (rank == 0)
            fputs(table, stdout);
        int frc = do_init ? weft_finalize() : 0;
        return rc || frc ? 1 : 0;
    }
    if (rdma) {
        int rc = print_rdma(rank, size);
        if (rc) fprintf(stderr, "weft_info --rdma: rank %d: %s: %s\n", rank, weft_strerror(rc), weft_last_error());
        fflush(stdout);
        int frc = do_init ? weft_finalize() : 0;
        return rc || frc ? 1 : 0;
    }
    if (topo || peers) {
        int rc = topo ? print_topo(rank, size) : WEFT_SUCCESS;
        if (!rc && peers) rc = print_peers(rank, size);
        if (rc) fprintf(stderr, "weft_info: rank %d: %s: %s\n", rank, weft_strerror(rc), weft_last_error());
        fflush(stdout);
        int frc = weft_finalize();
        return rc || frc ? 1 : 0;
    }
    if (rank == 0) {
        char buf[4096];
        printf("weft %s\n", weft_version_string());
        printf("  build:       %s\n", weft_build_info());
        if (do_init)
            printf("  bootstrap:   %s (rank %d of %d, local rank %d of %d)\n", weft_bootstrap_name(), rank, size, lrank,
                   lsize);
        printf("  UCX:         %s\n", weft_ucx_version());
        if (weft_ucx_transports(buf, sizeof(buf)) == WEFT_SUCCESS) printf("  transports:  %s\n", buf);
        if (weft_memory_types(buf, sizeof(buf)) == WEFT_SUCCESS) printf("  memory:      %s\n", buf);
        const char *tls = getenv("UCX_TLS");
        printf("  UCX_TLS:     %s\n", tls ? tls : "(unset: UCX chooses)");
        if (weft_host_topology(buf, sizeof(buf)) == WEFT_SUCCESS) printf("  host:        %s\n", buf);
        if (do_init && weft_progress_info(buf, sizeof(buf)) == WEFT_SUCCESS) printf("  waits:       %s\n", buf);
        print_vars();
        fflush(stdout);
    }
    if (do_init) {
        int rc = weft_finalize();
        if (rc != WEFT_SUCCESS) {
            fprintf(stderr, "weft_info: weft_finalize failed: %s: %s\n", weft_strerror(rc), weft_last_error());
            return 1;
        }
    }
    return 0;
}
