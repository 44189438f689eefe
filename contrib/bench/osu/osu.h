/* weft's OSU-style microbenchmarks: what the benchmark bodies share
 * (options, rotating buffers, statistics over ranks, the table and CSV
 * output, validation patterns). Written once over bench.h. */
#ifndef WEFT_OSU_H
#define WEFT_OSU_H

#include "bench.h"

#include <stdio.h>

/* Messages above this many bytes use the "large" iteration counts, as OSU. */
#define OSU_LARGE_MESSAGE 8192

typedef struct {
    size_t min_size, max_size;
    int iters, warmup;             /* small messages */
    int iters_large, warmup_large; /* above OSU_LARGE_MESSAGE bytes */
    int validate;                  /* -c */
    int full;                      /* -f: min / avg / max over ranks, iterations */
    int window;                    /* -W: messages in flight for bw/bibw/mbw_mr */
    int test_calls;                /* -t: bk_test calls during the overlap compute */
    size_t rotate_bytes;           /* --rotate: bytes the rotating buffers span */
    int accel;                     /* -d cuda (or D/M words): CUDA is initialized on every rank */
    char loc[2];                   /* buffers of rank 0 and rank 1 (mbw-mr, multi-lat: of the
                                    * first and second half): 'H' host, 'D' device, 'M' managed */
    char device_note[320];         /* the device line of the header */
    const char *csv_path;          /* --csv FILE */
    const char *label;             /* --label: library column of the CSV */
    FILE *csv;
} osu_opts_t;

extern osu_opts_t osu_opt;

typedef enum { OSU_PT2PT, OSU_COLL, OSU_ICOLL } osu_family_t;
typedef enum { PT_LATENCY, PT_BW, PT_BIBW, PT_MBW_MR, PT_MULTI_LAT } osu_pt2pt_kind_t;

typedef struct osu_bench {
    const char *name;  /* program suffix: "allreduce", "mbw-mr", "iallreduce" */
    const char *title; /* "Allreduce Latency Test" */
    osu_family_t family;
    bk_coll_t coll; /* collectives */
    osu_pt2pt_kind_t pt2pt_kind;
    size_t default_min; /* bytes */
    size_t default_max;
    int (*run)(const struct osu_bench *b);
} osu_bench_t;

/* Iterations and warm-up for one message size. */
int osu_iters(size_t size);
int osu_warmup(size_t size);
/* The message sizes of the run: min, then powers of two up to max. */
size_t osu_first_size(void);
size_t osu_next_size(size_t size);

/* A set of equally sized buffers used in turn, one per iteration, spanning
 * at least --rotate bytes so large messages are not measured out of one
 * cached buffer; allocated page-aligned and touched before timing. Device
 * pools (loc 'D' or 'M', CUDA through cuda_mem.c) are zeroed with cuMemsetD8
 * and carry a host buffer for validation. */
typedef struct {
    char **slot;
    int nslots;
    size_t bytes;
    char loc;      /* 'H', 'D', 'M' */
    char *scratch; /* device pools: host copy for osu_pool_fill / osu_pool_check */
} osu_pool_t;
void osu_pool_init(osu_pool_t *p, size_t bytes); /* host */
void osu_pool_init_at(osu_pool_t *p, size_t bytes, char loc);
void osu_pool_free(osu_pool_t *p);
/* osu_fill / osu_check (BK_CHAR) on a buffer of the pool wherever it lives:
 * device buffers through a host copy (cuMemcpyHtoD / DtoH), outside timers. */
void osu_pool_fill(const osu_pool_t *p, void *buf, size_t bytes, int src, int dst, int it);
size_t osu_pool_check(const osu_pool_t *p, const void *buf, size_t bytes, int src, int dst, int it);
/* The same for any layout (the collectives' typed blocks): write into
 * osu_pool_host(p, buf), then osu_pool_push the first `bytes` to buf; or
 * osu_pool_pull them from buf and read osu_pool_host. Host pools: buf
 * itself, push and pull do nothing; device pools: the host copy (one for
 * the whole pool, so one buffer at a time), cuMemcpyHtoD / DtoH. */
void *osu_pool_host(const osu_pool_t *p, void *buf);
void osu_pool_push(const osu_pool_t *p, void *buf, size_t bytes);
void osu_pool_pull(const osu_pool_t *p, const void *buf, size_t bytes);
/* "HOST (H)", "DEVICE (D)", "MANAGED (M)" */
const char *osu_loc_name(char loc);
static inline void *osu_pool_get(const osu_pool_t *p, int iteration)
{
    return p->slot[iteration % p->nslots];
}

/* Validation data: a small integer from (source rank, destination rank,
 * element index, iteration), exact in float and in sums over many ranks. */
static inline int osu_value(int src, int dst, size_t idx, int it)
{
    return (int)((unsigned)src * 7u + (unsigned)dst * 13u + (unsigned)(idx % 1021) * 3u + (unsigned)it) % 61;
}
void osu_fill(void *buf, bk_type_t type, size_t count, int src, int dst, size_t first_idx, int it);
/* Counts elements of buf that differ from what osu_fill would write. */
size_t osu_check(const void *buf, bk_type_t type, size_t count, int src, int dst, size_t first_idx, int it);

/* Statistics over ranks, returned on rank 0. */
typedef struct {
    double min, avg, max;
} osu_stat_t;
osu_stat_t osu_stat(double value);
/* Sum over ranks of an error count; every rank gets the total. */
long osu_errors_total(long mine);

/* Output: the header lines, one row per size, CSV rows. */
void osu_print_header(const osu_bench_t *b, const char *columns);
void osu_csv_row(const osu_bench_t *b, size_t size, const osu_stat_t *lat, double bw_mbs, double msg_rate,
                 const double overlap[4], int iters, int valid);
const char *osu_valid_text(long errors);

#endif
