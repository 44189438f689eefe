/* The cuMemcpy floor under GPU point-to-point numbers, without weft or UCX:
 * what one process gets from the driver's copies on one GPU. Two ranks on
 * one GPU move device memory with such copies (UCX's cuda_ipc maps the
 * peer's buffer and copies device to device; a staged path copies device to
 * pinned host and back), so weft-osu-bw D D approaches the DtoD column and
 * small-message latency cannot beat the copy latency.
 *
 *   contrib/bench/cuda-floor [-n REPS] [-b MIN:MAX] [-l MIN:MAX] [-k COPIES] [-d DEVICE] [--csv FILE]
 *     -n REPS      repetitions per size and direction; the table prints the median (default 20)
 *     -b MIN:MAX   bandwidth sizes, powers of two (default 4m:1g; suffixes k m g; 0:0 skips the table)
 *     -l MIN:MAX   latency sizes (default 8:64k; 0:0 skips the table)
 *     -k COPIES    copies per latency repetition, timed together (default 100)
 *     -d DEVICE    device ordinal (default: LOCAL_RANK / OMPI_COMM_WORLD_LOCAL_RANK, else 0;
 *                  taken modulo the device count)
 *     --csv FILE   also write the medians: test,direction,size,median_us,mbs,reps
 *
 * Bandwidth: one copy per repetition, timed to its completion (DtoD:
 * cuMemcpyDtoD then cuCtxSynchronize; DtoH and HtoD between device memory
 * and pinned host memory, cuMemAllocHost, synchronous by the driver's
 * rules); MB/s = size / median time, 10^6 bytes as OSU. Latency: COPIES
 * copies back to back, each complete before the next (DtoD: each followed
 * by cuCtxSynchronize), time per copy. The CUDA driver (libcuda.so.1) is
 * loaded at run time; without one the program says so and exits 2. */
#include "osu/cuda_mem.h"
#include "osu/size.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { DTOD, DTOH, HTOD, NDIR };
static const char *dir_name[NDIR] = {"DtoD", "DtoH", "HtoD"};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int parse_range(const char *s, size_t *lo, size_t *hi)
{
    const char *end;
    if (osu_parse_size(s, lo, &end) || *end != ':' || osu_parse_size(end + 1, hi, &end) || *end) return -1;
    return *lo > *hi || *hi > ((size_t)1 << 34) ? -1 : 0;
}

static size_t next_size(size_t s)
{
    return s ? s * 2 : 1;
}

static void *dev_src, *dev_dst, *host_buf;

/* One copy of dir, complete on return. */
static void copy(int dir, size_t bytes)
{
    int rc = dir == DTOD   ? cm_dtod(dev_dst, dev_src, bytes) || cm_sync()
             : dir == DTOH ? cm_dtoh(host_buf, dev_src, bytes)
                           : cm_htod(dev_dst, host_buf, bytes);
    if (rc) {
        fprintf(stderr, "cuda-floor: %s\n", cm_last_error());
        exit(1);
    }
}

int main(int argc, char **argv)
{
    int reps = 20, copies = 100, device = -1;
    size_t bw_lo = 4u << 20, bw_hi = (size_t)1 << 30, lat_lo = 8, lat_hi = 64u << 10;
    const char *csv_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: %s [-n REPS] [-b MIN:MAX] [-l MIN:MAX] [-k COPIES] [-d DEVICE] [--csv FILE]\n"
                   "  the cuMemcpy floor (DtoD, DtoH, HtoD with pinned host memory) on one GPU: bandwidth\n"
                   "  (default 4m:1g) and latency (default 8:64k), median of REPS (default 20); 0:0 skips a table\n",
                   argv[0]);
            return 0;
        } else if (!v) {
            bad = 1;
        } else if (!strcmp(a, "-n")) {
            reps = atoi(v), bad = reps < 1;
        } else if (!strcmp(a, "-k")) {
            copies = atoi(v), bad = copies < 1;
        } else if (!strcmp(a, "-d")) {
            device = atoi(v), bad = device < 0;
        } else if (!strcmp(a, "-b")) {
            bad = parse_range(v, &bw_lo, &bw_hi);
        } else if (!strcmp(a, "-l")) {
            bad = parse_range(v, &lat_lo, &lat_hi);
        } else if (!strcmp(a, "--csv")) {
            csv_path = v;
        } else {
            bad = 1;
        }
        if (bad) {
            fprintf(stderr, "cuda-floor: bad option %s %s (see -h)\n", a, v ? v : "");
            return 2;
        }
        i++;
    }
    if (device < 0) {
        const char *lr = getenv("LOCAL_RANK");
        if (!lr) lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
        device = lr ? atoi(lr) : 0;
    }
    char err[512];
    if (cm_init(device, err, sizeof(err))) {
        fprintf(stderr, "cuda-floor: %s\n", err);
        return 2;
    }
    int do_bw = bw_hi > 0, do_lat = lat_hi > 0;
    size_t most = (do_bw ? bw_hi : 0) > (do_lat ? lat_hi : 0) ? bw_hi : lat_hi;
    if (most == 0) most = 1;
    if (!(dev_src = cm_alloc(most, 0)) || !(dev_dst = cm_alloc(most, 0)) || !(host_buf = cm_host_alloc(most)) ||
        cm_memset(dev_src, 1, most) || cm_memset(dev_dst, 0, most) || cm_sync()) {
        fprintf(stderr, "cuda-floor: %zu-byte buffers: %s\n", most, cm_last_error());
        return 1;
    }
    memset(host_buf, 2, most);
    FILE *csv = NULL;
    if (csv_path) {
        if (!(csv = fopen(csv_path, "w"))) {
            fprintf(stderr, "cuda-floor: cannot open %s: %s\n", csv_path, strerror(errno));
            return 2;
        }
        fprintf(csv, "test,direction,size,median_us,mbs,reps\n");
    }
    int v = cm_driver_version();
    printf("# weft cuda-floor: cuMemcpy on device %d of %d (%s), driver %d.%d; median of %d repetitions\n", cm_device(),
           cm_device_count(), cm_device_name(), v / 1000, v % 1000 / 10, reps);
    double *t = malloc(sizeof(double) * (size_t)reps);
    if (!t) return 1;

    if (do_bw) {
        printf("# Bandwidth (MB/s = 10^6 B/s): one copy per repetition, timed to its completion; host: pinned\n");
        printf("%-12s%16s%16s%16s\n", "# Size", "DtoD (MB/s)", "DtoH (MB/s)", "HtoD (MB/s)");
        for (size_t s = bw_lo ? bw_lo : 1; s <= bw_hi; s = next_size(s)) {
            printf("%-12zu", s);
            for (int d = 0; d < NDIR; d++) {
                copy(d, s); /* warm-up */
                for (int r = 0; r < reps; r++) {
                    double t0 = now();
                    copy(d, s);
                    t[r] = now() - t0;
                }
                double m = median(t, reps), mbs = (double)s / m / 1e6;
                printf("%16.2f", mbs);
                if (csv) fprintf(csv, "bw,%s,%zu,%.4f,%.4f,%d\n", dir_name[d], s, m * 1e6, mbs, reps);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    if (do_lat) {
        printf("# Latency (us per copy, %d back-to-back copies per repetition, each complete before the next;\n"
               "# DtoD: cuMemcpyDtoD + cuCtxSynchronize; DtoH, HtoD: pinned host, synchronous)\n",
               copies);
        printf("%-12s%16s%16s%16s\n", "# Size", "DtoD (us)", "DtoH (us)", "HtoD (us)");
        for (size_t s = lat_lo ? lat_lo : 1; s <= lat_hi; s = next_size(s)) {
            printf("%-12zu", s);
            for (int d = 0; d < NDIR; d++) {
                for (int k = 0; k < 10; k++)
                    copy(d, s); /* warm-up */
                for (int r = 0; r < reps; r++) {
                    double t0 = now();
                    for (int k = 0; k < copies; k++)
                        copy(d, s);
                    t[r] = (now() - t0) / copies;
                }
                double m = median(t, reps);
                printf("%16.2f", m * 1e6);
                if (csv) fprintf(csv, "lat,%s,%zu,%.4f,%.4f,%d\n", dir_name[d], s, m * 1e6, (double)s / m / 1e6, reps);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    if (csv) fclose(csv);
    free(t);
    cm_free(dev_src);
    cm_free(dev_dst);
    cm_host_free(host_buf);
    return 0;
}
