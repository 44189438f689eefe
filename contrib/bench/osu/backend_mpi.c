/* The benchmarks' backend over any MPI (built with that MPI's mpicc). */
#include "bench.h"

#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h> /* MPIX_Query_cuda_support (the cuda extension, built by default) */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(MPI_Request) <= sizeof(bk_req_t), "bk_req_t too small for MPI_Request");

static int my_rank, my_size;

static MPI_Datatype dtype(bk_type_t t)
{
    switch (t) {
    case BK_CHAR: return MPI_CHAR;
    case BK_INT32: return MPI_INT32_T;
    case BK_FLOAT: return MPI_FLOAT;
    case BK_DOUBLE: return MPI_DOUBLE;
    }
    return MPI_DATATYPE_NULL;
}

static MPI_Op mpi_op(bk_op_t op)
{
    switch (op) {
    case BK_SUM: return MPI_SUM;
    case BK_MIN: return MPI_MIN;
    case BK_MAX: return MPI_MAX;
    }
    return MPI_OP_NULL;
}

static int check(int rc, const char *what)
{
    if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, text, &len);
        fprintf(stderr, "mpi-osu: rank %d: %s failed: %s\n", my_rank, what, text);
        bk_abort(what);
    }
    return 0;
}

static MPI_Request *mreq(bk_req_t *r)
{
    return (MPI_Request *)(void *)r->opaque;
}

int bk_init(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &my_size);
    return 0;
}

void bk_finalize(void)
{
    MPI_Finalize();
}
int bk_rank(void)
{
    return my_rank;
}
int bk_size(void)
{
    return my_size;
}
int bk_local_rank(void)
{
    /* The launchers' variables, else the ranks sharing this node's memory. */
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK", "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v);
    }
    MPI_Comm node;
    int local = 0;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &local);
        MPI_Comm_free(&node);
    }
    return local;
}

double bk_wtime(void)
{
    return MPI_Wtime();
}

const char *bk_library(void)
{
    static char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(text, &len);
    /* First line only: MPICH prints a long configuration. */
    char *nl = strchr(text, '\n');
    if (nl) *nl = '\0';
    nl = strchr(text, ',');
    if (nl && strstr(text, "Open MPI")) *nl = '\0';
    return text;
}

const char *bk_short_name(void)
{
    const char *lib = bk_library();
    if (strstr(lib, "Open MPI")) return "openmpi";
    if (strstr(lib, "MPICH")) return "mpich";
    if (strstr(lib, "weft")) return "weft-mpi";
    return "mpi";
}

void bk_abort(const char *why)
{
    fprintf(stderr, "mpi-osu: rank %d aborting: %s\n", my_rank, why);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

/* CUDA-awareness as the library reports it at run time: Open MPI's
 * MPIX_Query_cuda_support() (mpi-ext.h; ompi_info shows the same fact as
 * opal_built_with_cuda_support), MPICH's MPIX_GPU_query_support(). An MPI
 * that is not CUDA-aware takes a device pointer for host memory and crashes
 * on it. OSU_CUDA=force (osu.c) overrides a no: Open MPI's pml ucx hands
 * contiguous buffers to UCX untouched, so over a UCX with CUDA transports it
 * may move device memory although Open MPI itself was built without CUDA. */
int bk_device_support(char *why, size_t len)
{
#if defined(MPIX_CUDA_AWARE_SUPPORT)
    int yes = MPIX_Query_cuda_support();
    snprintf(why, len, "%s %s CUDA-aware (MPIX_Query_cuda_support() = %d, built %s CUDA)%s", bk_library(),
             yes ? "is" : "is not", yes, MPIX_CUDA_AWARE_SUPPORT ? "with" : "without",
             yes ? ""
                 : ": it would take a device pointer for host memory; run with host buffers, or set "
                   "OSU_CUDA=force to try its pml ucx over a UCX with CUDA transports");
    return yes ? 1 : 0;
#elif defined(MPIX_GPU_SUPPORT_CUDA)
    int yes = 0;
    MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes);
    snprintf(why, len, "%s %s CUDA-aware (MPIX_GPU_query_support(CUDA) = %d)%s", bk_library(), yes ? "is" : "is not",
             yes, yes ? "" : " (MPICH: built with CUDA and MPIR_CVAR_ENABLE_GPU=1?); run with host buffers");
    return yes ? 1 : 0;
#else
    snprintf(why, len, "%s reports no CUDA support query: trying device buffers anyway", bk_library());
    return -1;
#endif
}

int bk_send(const void *buf, size_t bytes, int peer, int tag)
{
    return check(MPI_Send(buf, (int)bytes, MPI_CHAR, peer, tag, MPI_COMM_WORLD), "MPI_Send");
}

int bk_recv(void *buf, size_t bytes, int peer, int tag)
{
    return check(MPI_Recv(buf, (int)bytes, MPI_CHAR, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
}

int bk_isend(const void *buf, size_t bytes, int peer, int tag, bk_req_t *req)
{
    return check(MPI_Isend(buf, (int)bytes, MPI_CHAR, peer, tag, MPI_COMM_WORLD, mreq(req)), "MPI_Isend");
}

int bk_irecv(void *buf, size_t bytes, int peer, int tag, bk_req_t *req)
{
    return check(MPI_Irecv(buf, (int)bytes, MPI_CHAR, peer, tag, MPI_COMM_WORLD, mreq(req)), "MPI_Irecv");
}

int bk_waitall(int n, bk_req_t *reqs)
{
    for (int i = 0; i < n; i++)
        check(MPI_Wait(mreq(&reqs[i]), MPI_STATUS_IGNORE), "MPI_Wait");
    return 0;
}

int bk_test(bk_req_t *req, int *done)
{
    return check(MPI_Test(mreq(req), done, MPI_STATUS_IGNORE), "MPI_Test");
}

static int post(const bk_coll_args_t *a, MPI_Request *r)
{
    MPI_Datatype t = dtype(a->type);
    MPI_Op op = mpi_op(a->op);
    MPI_Comm c = MPI_COMM_WORLD;
    int n = (int)a->count;
    void *sb = (void *)a->sendbuf;
    switch (a->coll) {
    case BK_BARRIER: return r ? MPI_Ibarrier(c, r) : MPI_Barrier(c);
    case BK_BCAST: return r ? MPI_Ibcast(a->recvbuf, n, t, a->root, c, r) : MPI_Bcast(a->recvbuf, n, t, a->root, c);
    case BK_REDUCE:
        return r ? MPI_Ireduce(sb, a->recvbuf, n, t, op, a->root, c, r)
                 : MPI_Reduce(sb, a->recvbuf, n, t, op, a->root, c);
    case BK_ALLREDUCE:
        return r ? MPI_Iallreduce(sb, a->recvbuf, n, t, op, c, r) : MPI_Allreduce(sb, a->recvbuf, n, t, op, c);
    case BK_ALLGATHER:
        return r ? MPI_Iallgather(sb, n, t, a->recvbuf, n, t, c, r) : MPI_Allgather(sb, n, t, a->recvbuf, n, t, c);
    case BK_ALLGATHERV:
        return r ? MPI_Iallgatherv(sb, n, t, a->recvbuf, a->counts32, a->displs32, t, c, r)
                 : MPI_Allgatherv(sb, n, t, a->recvbuf, a->counts32, a->displs32, t, c);
    case BK_REDUCE_SCATTER:
        return r ? MPI_Ireduce_scatter(sb, a->recvbuf, a->counts32, t, op, c, r)
                 : MPI_Reduce_scatter(sb, a->recvbuf, a->counts32, t, op, c);
    case BK_REDUCE_SCATTER_BLOCK:
        return r ? MPI_Ireduce_scatter_block(sb, a->recvbuf, n, t, op, c, r)
                 : MPI_Reduce_scatter_block(sb, a->recvbuf, n, t, op, c);
    case BK_ALLTOALL:
        return r ? MPI_Ialltoall(sb, n, t, a->recvbuf, n, t, c, r) : MPI_Alltoall(sb, n, t, a->recvbuf, n, t, c);
    case BK_ALLTOALLV:
        return r ? MPI_Ialltoallv(sb, a->counts32, a->displs32, t, a->recvbuf, a->counts32, a->displs32, t, c, r)
                 : MPI_Alltoallv(sb, a->counts32, a->displs32, t, a->recvbuf, a->counts32, a->displs32, t, c);
    case BK_GATHER:
        return r ? MPI_Igather(sb, n, t, a->recvbuf, n, t, a->root, c, r)
                 : MPI_Gather(sb, n, t, a->recvbuf, n, t, a->root, c);
    case BK_SCATTER:
        return r ? MPI_Iscatter(sb, n, t, a->recvbuf, n, t, a->root, c, r)
                 : MPI_Scatter(sb, n, t, a->recvbuf, n, t, a->root, c);
    case BK_COLL_COUNT: break;
    }
    return MPI_ERR_ARG;
}

int bk_coll(const bk_coll_args_t *a)
{
    return check(post(a, NULL), "collective");
}

int bk_icoll(const bk_coll_args_t *a, bk_req_t *req)
{
    return check(post(a, mreq(req)), "nonblocking collective");
}

/* Errors return (MPI_ERRORS_RETURN) for this one call, then are fatal again. */
int bk_coll_try(const bk_coll_args_t *a, int nonblocking, char *why, size_t len)
{
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = post(a, nonblocking ? &r : NULL);
    if (rc == MPI_SUCCESS && nonblocking) rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING] = "";
        int n = 0;
        MPI_Error_string(rc, text, &n);
        for (char *c = text; *c; c++)
            if (*c == '\n') *c = ' ';
        snprintf(why, len, "%s", text);
        return 1;
    }
    return 0;
}
