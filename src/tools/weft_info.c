/* weft_info: what this weft is, how it was started, what UCX offers, and
 * every WEFT_* variable. Run it alone, or under a launcher (rank 0 prints). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

static void usage(void)
{
    printf("usage: weft_info [--vars] [--no-init] [-h]\n"
           "  (no option)  version, build, bootstrap, UCX version and transports, host, variables\n"
           "  --vars       only the WEFT_* variable table\n"
           "  --no-init    do not initialise weft (no bootstrap line)\n");
}

static void print_vars(void)
{
    printf("variables (set in the environment):\n");
    for (int i = 0; i < weft_var_count(); i++) {
        const char *name, *type, *def, *desc;
        weft_var_get(i, &name, &type, &def, &desc);
        const char *cur = getenv(name);
        printf("  %-24s %-8s default %-6s %s%s%s%s\n", name, type, def, desc, cur ? " [set: " : "", cur ? cur : "",
               cur ? "]" : "");
    }
}

int main(int argc, char **argv)
{
    int vars_only = 0, do_init = 1, rank = 0, size = 1, lrank = 0, lsize = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vars")) vars_only = 1;
        else if (!strcmp(argv[i], "--no-init")) do_init = 0;
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
    if (rank == 0) {
        char buf[4096];
        printf("weft %s\n", weft_version_string());
        printf("  build:       %s\n", weft_build_info());
        if (do_init)
            printf("  bootstrap:   %s (rank %d of %d, local rank %d of %d)\n", weft_bootstrap_name(), rank, size,
                   lrank, lsize);
        printf("  UCX:         %s\n", weft_ucx_version());
        if (weft_ucx_transports(buf, sizeof(buf)) == WEFT_SUCCESS) printf("  transports:  %s\n", buf);
        const char *tls = getenv("UCX_TLS");
        printf("  UCX_TLS:     %s\n", tls ? tls : "(unset: UCX chooses)");
        if (weft_host_topology(buf, sizeof(buf)) == WEFT_SUCCESS) printf("  host:        %s\n", buf);
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
