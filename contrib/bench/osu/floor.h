/* Helpers shared by the floor programs, contrib/bench/cuda-floor
 * (cuda-floor.c, C) and contrib/bench/coll-floor (coll-floor.cu, C++ by
 * nvcc): the clock, medians, the size ranges of their command lines, and the
 * MPS line of their headers. Static inline functions in the common subset of
 * C and C++; the includer of a C file defines _GNU_SOURCE (or a POSIX level)
 * first, for clock_gettime and nanosleep. */
#ifndef WEFT_OSU_FLOOR_H
#define WEFT_OSU_FLOOR_H

#include "size.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Seconds on the monotonic clock. */
static inline double floor_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void floor_sleep_us(long us)
{
    struct timespec ts = {us / 1000000, us % 1000000 * 1000};
    nanosleep(&ts, NULL);
}

static inline int floor_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n), n >= 1; sorts v. */
static inline double floor_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), floor_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* MIN:MAX (osu_parse_size's sizes) into *lo and *hi; -1 unless the whole of s
 * is one, with MIN <= MAX <= max. */
static inline int floor_parse_range(const char *s, size_t *lo, size_t *hi, size_t max)
{
    const char *end;
    if (osu_parse_size(s, lo, &end) || *end != ':' || osu_parse_size(end + 1, hi, &end) || *end) return -1;
    return *lo > *hi || *hi > max ? -1 : 0;
}

/* The size after s in a table of powers of two (after 0: 1). */
static inline size_t floor_next_size(size_t s)
{
    return s ? s * 2 : 1;
}

/* The CSV of a floor program's medians: *out = the file at path with its
 * header line written (NULL path: *out = NULL). -1 after saying why on
 * stderr, as prog. */
static inline int floor_csv_open(const char *prog, const char *path, const char *header, FILE **out)
{
    *out = NULL;
    if (!path) return 0;
    if (!(*out = fopen(path, "w"))) {
        fprintf(stderr, "%s: cannot open %s: %s\n", prog, path, strerror(errno));
        return -1;
    }
    fprintf(*out, "%s\n", header);
    return 0;
}

/* Closes the CSV (NULL: nothing to do); -1 after saying why on stderr when its writes failed. */
static inline int floor_csv_close(const char *prog, FILE *csv, const char *path)
{
    if (!csv || !fclose(csv)) return 0;
    fprintf(stderr, "%s: writing %s: %s\n", prog, path, strerror(errno));
    return -1;
}

/* The end of a command line's bad option: says which, and the usage. */
static inline void floor_bad_option(const char *prog, const char *opt, const char *val,
                                    void (*usage)(FILE *, const char *), const char *argv0)
{
    fprintf(stderr, "%s: bad option %s %s\n", prog, opt, val ? val : "");
    usage(stderr, argv0);
}

/* "MPS control pipe found (PATH)" or "... not found (PATH)" into buf: PATH is
 * $CUDA_MPS_PIPE_DIRECTORY/control, else /tmp/nvidia-mps/control. */
static inline void floor_mps_note(char *buf, size_t len)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    char path[4096];
    snprintf(path, sizeof(path), "%s/control", dir && *dir ? dir : "/tmp/nvidia-mps");
    struct stat st;
    snprintf(buf, len, "MPS control pipe %s (%s)", stat(path, &st) ? "not found" : "found", path);
}

#endif
