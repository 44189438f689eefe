/* weft-scale-rank: a real rank of the scale harness (contrib/scale/run_scale.py).
 *
 * The harness starts a few of these (world ranks 0 .. R-1, one simulated
 * node: WEFT_NODE_ID=0) and fills the rest of the world with simulated
 * ranks (weft-scale-sim), which speak the bootstrap but not UCX. So the
 * real ranks run their communicators and collectives among themselves:
 *   init            weft_init, timed (its end on the shared clock)
 *   sync A          an empty bootstrap round every rank runs (simulated too)
 *   by node         the world's node communicator (local: built from the
 *                   node map of all N ranks, no message)
 *   by color        weft_comm_split of that communicator (a collective
 *                   over its members), twice: the first makes endpoints
 *   first allreduce on a duplicate forced to the ring (UCX endpoints made on
 *                   first use), then a second one: the difference is the
 *                   connection set-up
 *   sync B          the store's counters are read here by rank 0; then
 *                   the simulated ranks fetch the addresses of their first
 *                   collective's peers, the real ranks wait
 *   sync C          and the store's counters again
 *   finalize
 * Prints one JSON line per rank. SCALE_T0: the run's start
 * (CLOCK_REALTIME seconds). */
#include "bootstrap/bootstrap.h"
#include "bootstrap/env.h"
#include "pt2pt/pt2pt.h"
#include "weft_internal.h"

#include <dirent.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_real(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Bytes the allocator has handed out (small chunks and mmapped ones). */
static long long heap_bytes(void)
{
    struct mallinfo2 mi = mallinfo2();
    return (long long)(mi.uordblks + mi.hblkhd);
}

static long status_kb(const char *field)
{
    char line[256];
    long v = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, field, strlen(field))) v = atol(line + strlen(field) + 1);
    fclose(f);
    return v;
}

/* CPU seconds of this process's thread named `name` (the store's:
 * "weft-store"), or -1. */
static double thread_cpu(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    double secs = -1;
    while (d && (e = readdir(d))) {
        char path[300], comm[64] = "", stat[1024];
        FILE *f;
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        if (!(f = fopen(path, "r"))) continue;
        if (!fgets(comm, sizeof(comm), f)) comm[0] = '\0';
        fclose(f);
        comm[strcspn(comm, "\n")] = '\0';
        if (strcmp(comm, name)) continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
        if (!(f = fopen(path, "r"))) continue;
        size_t n = fread(stat, 1, sizeof(stat) - 1, f);
        fclose(f);
        stat[n] = '\0';
        const char *p = strrchr(stat, ')'); /* after the name: state, then fields 4.. */
        unsigned long long ut = 0, st = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
            secs = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    }
    if (d) closedir(d);
    return secs;
}

static int endpoints(void)
{
    int n = 0;
    for (int r = 0; weft_g.p2p && r < weft_g.p2p->npeers; r++)
        n += weft_g.p2p->peers[r].ep != NULL;
    return n;
}

#define CHECK(call)                                                                                                    \
    do {                                                                                                               \
        int rc_ = (call);                                                                                              \
        if (rc_) {                                                                                                     \
            fprintf(stderr, "weft-scale-rank: %s: %s\n", #call, weft_last_error());                                    \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static void sync_round(void)
{
    CHECK(weft_g.bs->allgather(weft_g.bs, NULL, NULL, 0, weft_wtime() + 600));
}

int main(void)
{
    const char *t0s = getenv("SCALE_T0");
    double t0 = t0s ? atof(t0s) : now_real();
    long long heap0 = heap_bytes();
    double a = now_real();
    CHECK(weft_init(NULL, NULL));
    double t_init = now_real() - t0, init_s = now_real() - a;
    long long heap_init = heap_bytes() - heap0;
    int rank = weft_g.rank, size = weft_g.size;
    sync_round();
    weft_store_stats_t st_a = {0}, st_b = {0}, st_c = {0};
    int serves = weft_bootstrap_env_store_stats(weft_g.bs, &st_a) == WEFT_SUCCESS;
    double cpu_a = thread_cpu("weft-store");

    weft_comm_t node, half, ring;
    double b = now_real();
    CHECK(weft_comm_derived(weft_g.world, WEFT_SUB_NODE, &node));
    double node_s = now_real() - b;
    int nrank, nsize;
    CHECK(weft_comm_rank(node, &nrank));
    CHECK(weft_comm_size(node, &nsize));
    b = now_real();
    CHECK(weft_comm_split(node, nrank % 2, nrank, NULL, &half));
    double color_s = now_real() - b;
    weft_comm_t half2; /* again: its endpoints exist now */
    b = now_real();
    CHECK(weft_comm_split(node, nrank % 2, nrank, NULL, &half2));
    double color2_s = now_real() - b;
    CHECK(weft_comm_free(&half2));
    weft_options_t o;
    CHECK(weft_options_create(&o));
    CHECK(weft_options_set_hint(o, "allreduce_algorithm", "ring"));
    CHECK(weft_comm_dup(node, o, &ring));
    CHECK(weft_options_free(&o));
    int eps0 = endpoints();
    double x = 1, y = 0;
    b = now_real();
    CHECK(weft_allreduce(&x, &y, 1, WEFT_FLOAT64, WEFT_SUM, ring));
    double coll1_s = now_real() - b;
    b = now_real();
    CHECK(weft_allreduce(&x, &y, 1, WEFT_FLOAT64, WEFT_SUM, ring));
    double coll2_s = now_real() - b;
    if (y != nsize) {
        fprintf(stderr, "weft-scale-rank: allreduce gave %g, expected %d\n", y, nsize);
        return 1;
    }
    int eps1 = endpoints();
    sync_round();
    if (serves) weft_bootstrap_env_store_stats(weft_g.bs, &st_b);
    double cpu_b = thread_cpu("weft-store");
    sync_round();
    if (serves) weft_bootstrap_env_store_stats(weft_g.bs, &st_c);
    double cpu_c = thread_cpu("weft-store");
    long hwm = status_kb("VmHWM:"), rss = status_kb("VmRSS:");
    printf("{\"rank\": %d, \"size\": %d, \"t_init\": %.4f, \"init_s\": %.4f, \"heap_init\": %lld, "
           "\"vmhwm_kb\": %ld, \"vmrss_kb\": %ld, \"node_comm_s\": %.6f, \"node_size\": %d, \"split_color_s\": %.6f, "
           "\"split_color2_s\": %.6f, "
           "\"coll1_s\": %.6f, \"coll2_s\": %.6f, \"eps_before\": %d, \"eps_after\": %d",
           rank, size, t_init, init_s, heap_init, hwm, rss, node_s, nsize, color_s, color2_s, coll1_s, coll2_s, eps0,
           eps1);
    if (serves)
        printf(", \"store_a\": {\"accepted\": %llu, \"peak_conns\": %llu, \"bytes_in\": %llu, \"bytes_out\": %llu}, "
               "\"store_b\": {\"accepted\": %llu, \"peak_conns\": %llu, \"bytes_in\": %llu, \"bytes_out\": %llu}, "
               "\"store_c\": {\"bytes_in\": %llu, \"bytes_out\": %llu}",
               (unsigned long long)st_a.accepted, (unsigned long long)st_a.peak_conns,
               (unsigned long long)st_a.bytes_in, (unsigned long long)st_a.bytes_out, (unsigned long long)st_b.accepted,
               (unsigned long long)st_b.peak_conns, (unsigned long long)st_b.bytes_in,
               (unsigned long long)st_b.bytes_out, (unsigned long long)st_c.bytes_in,
               (unsigned long long)st_c.bytes_out);
    printf(", \"store_cpu_a\": %.3f, \"store_cpu_b\": %.3f, \"store_cpu_c\": %.3f}\n", cpu_a, cpu_b, cpu_c);
    fflush(stdout);
    CHECK(weft_comm_free(&ring));
    CHECK(weft_comm_free(&half));
    CHECK(weft_finalize());
    return 0;
}
