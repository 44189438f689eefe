/* weft's OSU-style microbenchmarks: the backend layer.
 *
 * Every benchmark (pt2pt.c, coll.c) is written once against this small
 * interface; backend_weft.c implements it over weft, backend_mpi.c over any
 * MPI through mpicc. The same sources therefore measure weft, Open MPI and
 * MPICH with identical loops, buffers and timers. */
#ifndef WEFT_BENCH_H
#define WEFT_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* Element types the benchmarks use (OSU measures float collectives). */
typedef enum { BK_CHAR, BK_INT32, BK_FLOAT, BK_DOUBLE } bk_type_t;
typedef enum { BK_SUM, BK_MIN, BK_MAX } bk_op_t;

/* Every collective the harness measures. */
typedef enum {
    BK_BARRIER,
    BK_BCAST,
    BK_REDUCE,
    BK_ALLREDUCE,
    BK_ALLGATHER,
    BK_ALLGATHERV,
    BK_REDUCE_SCATTER,
    BK_REDUCE_SCATTER_BLOCK,
    BK_ALLTOALL,
    BK_ALLTOALLV,
    BK_GATHER,
    BK_SCATTER,
    BK_COLL_COUNT
} bk_coll_t;

/* One collective call. Counts are elements; the v-forms carry per-rank
 * counts and displacements in both widths (weft takes int64, MPI int), both
 * filled by the harness before timing so no backend converts inside the
 * timed loop. */
typedef struct {
    bk_coll_t coll;
    const void *sendbuf;
    void *recvbuf;
    int64_t count;
    bk_type_t type;
    bk_op_t op;
    int root;
    const int64_t *counts64, *displs64;
    const int *counts32, *displs32;
} bk_coll_args_t;

/* A pending operation; backends keep their own handle inside. */
typedef struct {
    uint64_t opaque[2];
} bk_req_t;

/* Life cycle and identity. */
int bk_init(int *argc, char ***argv);
void bk_finalize(void);
int bk_rank(void);
int bk_size(void);
/* Rank among the ranks of this host (picks the GPU of -d cuda). */
int bk_local_rank(void);
double bk_wtime(void);
/* "weft 0.1.0 (UCX 1.13.1)", "Open MPI v4.1.4", "MPICH Version: 4.0.2" ... */
const char *bk_library(void);
/* Short name for tables and CSV files: "weft", "openmpi", "mpich", "mpi". */
const char *bk_short_name(void);
void bk_abort(const char *why);
/* May device (CUDA) pointers be passed to bk_send & co? 1 yes, 0 no (the
 * library would crash on one), -1 unknown (try); why: one sentence. */
int bk_device_support(char *why, size_t len);

/* Point to point (bytes). */
int bk_send(const void *buf, size_t bytes, int peer, int tag);
int bk_recv(void *buf, size_t bytes, int peer, int tag);
int bk_isend(const void *buf, size_t bytes, int peer, int tag, bk_req_t *req);
int bk_irecv(void *buf, size_t bytes, int peer, int tag, bk_req_t *req);
int bk_waitall(int n, bk_req_t *reqs);
int bk_test(bk_req_t *req, int *done);

/* Collectives: blocking, and nonblocking (completed by bk_waitall/bk_test). */
int bk_coll(const bk_coll_args_t *a);
int bk_icoll(const bk_coll_args_t *a, bk_req_t *req);
/* One collective that may fail without ending the job: blocking, or
 * (nonblocking) posted and waited for. 0 on success; otherwise nonzero with
 * the library's error in why (one line). */
int bk_coll_try(const bk_coll_args_t *a, int nonblocking, char *why, size_t len);

size_t bk_type_size(bk_type_t t);

#endif
