/* The benchmarks' backend over weft. */
#include "bench.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(sizeof(weft_request_t) <= sizeof(bk_req_t), "bk_req_t too small for weft_request_t");

static weft_comm_t world;
static int my_rank, my_size;

static const weft_dtype_t dtypes[] = {
    [BK_CHAR] = WEFT_BYTE, [BK_INT32] = WEFT_INT32, [BK_FLOAT] = WEFT_FLOAT32, [BK_DOUBLE] = WEFT_FLOAT64};
static const weft_op_t ops[] = {[BK_SUM] = WEFT_SUM, [BK_MIN] = WEFT_MIN, [BK_MAX] = WEFT_MAX};

static int check(int rc, const char *what)
{
    if (rc != WEFT_SUCCESS) {
        fprintf(stderr, "weft-osu: rank %d: %s failed: %s: %s\n", my_rank, what, weft_strerror(rc), weft_last_error());
        bk_abort(what);
    }
    return rc;
}

static weft_request_t *wreq(bk_req_t *r)
{
    return (weft_request_t *)(void *)r->opaque;
}

int bk_init(int *argc, char ***argv)
{
    /* Until weft_init says, the launcher's rank (for messages: -1 if none). */
    const char *env = getenv("RANK")                   ? getenv("RANK")
                      : getenv("OMPI_COMM_WORLD_RANK") ? getenv("OMPI_COMM_WORLD_RANK")
                                                       : getenv("PMIX_RANK");
    my_rank = env ? atoi(env) : -1;
    check(weft_init(argc, argv), "weft_init");
    world = weft_comm_world();
    weft_comm_rank(world, &my_rank);
    weft_comm_size(world, &my_size);
    return 0;
}

void bk_finalize(void)
{
    weft_finalize();
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
    int local = 0;
    if (weft_local_rank(&local) != WEFT_SUCCESS) local = 0;
    return local;
}

double bk_wtime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *bk_library(void)
{
    static char text[128];
    int major = 0, minor = 0, patch = 0;
    weft_get_version(&major, &minor, &patch);
    snprintf(text, sizeof(text), "weft %d.%d.%d (UCX %s)", major, minor, patch, weft_ucx_version());
    return text;
}

const char *bk_short_name(void)
{
    return "weft";
}

void bk_abort(const char *why)
{
    fprintf(stderr, "weft-osu: rank %d aborting: %s\n", my_rank, why);
    weft_comm_abort(world, 1);
    exit(1);
}

/* weft_build_info's cuda=VALUE: "no" (built without CUDA), or a description
 * of the GPU support this build has (a path, then what point to point and
 * the collectives do in parentheses, spaces and all); weft detects the
 * memory type of every buffer itself. */
int bk_device_support(char *why, size_t len)
{
    const char *info = weft_build_info(), *cuda = info ? strstr(info, "cuda=") : NULL;
    char value[256] = "unknown";
    if (cuda) {
        size_t n = strcspn(cuda + 5, " (");
        if (cuda[5 + n] == '(') n += strcspn(cuda + 5 + n, ")") + (strchr(cuda + 5 + n, ')') ? 1 : 0);
        snprintf(value, sizeof(value), "%.*s", (int)(n < sizeof(value) ? n : sizeof(value) - 1), cuda + 5);
    }
    if (strstr(value, "no-gpu-paths")) {
        snprintf(why, len,
                 "this weft has no GPU code paths (weft_build_info: cuda=%s): it would take a device pointer "
                 "for host memory",
                 value);
        return 0;
    }
    if (!strcmp(value, "no") || !strcmp(value, "unknown")) {
        snprintf(why, len, "weft_build_info says cuda=%s: device buffers may be refused", value);
        return -1;
    }
    snprintf(why, len, "weft cuda=%s", value);
    return 1;
}

int bk_send(const void *buf, size_t bytes, int peer, int tag)
{
    return check(weft_send(buf, (int64_t)bytes, WEFT_BYTE, peer, tag, world), "weft_send");
}

int bk_recv(void *buf, size_t bytes, int peer, int tag)
{
    return check(weft_recv(buf, (int64_t)bytes, WEFT_BYTE, peer, tag, world, NULL), "weft_recv");
}

int bk_isend(const void *buf, size_t bytes, int peer, int tag, bk_req_t *req)
{
    return check(weft_isend(buf, (int64_t)bytes, WEFT_BYTE, peer, tag, world, wreq(req)), "weft_isend");
}

int bk_irecv(void *buf, size_t bytes, int peer, int tag, bk_req_t *req)
{
    return check(weft_irecv(buf, (int64_t)bytes, WEFT_BYTE, peer, tag, world, wreq(req)), "weft_irecv");
}

int bk_waitall(int n, bk_req_t *reqs)
{
    /* bk_req_t holds one weft_request_t at its start: wait one by one. */
    for (int i = 0; i < n; i++)
        check(weft_wait(wreq(&reqs[i]), NULL), "weft_wait");
    return 0;
}

int bk_test(bk_req_t *req, int *done)
{
    return check(weft_test(wreq(req), done, NULL), "weft_test");
}

static int post(const bk_coll_args_t *a, weft_request_t *r)
{
    weft_dtype_t t = dtypes[a->type];
    weft_op_t op = ops[a->op];
    switch (a->coll) {
    case BK_BARRIER: return r ? weft_ibarrier(world, r) : weft_barrier(world);
    case BK_BCAST:
        return r ? weft_ibcast(a->recvbuf, a->count, t, a->root, world, r)
                 : weft_bcast(a->recvbuf, a->count, t, a->root, world);
    case BK_REDUCE:
        return r ? weft_ireduce(a->sendbuf, a->recvbuf, a->count, t, op, a->root, world, r)
                 : weft_reduce(a->sendbuf, a->recvbuf, a->count, t, op, a->root, world);
    case BK_ALLREDUCE:
        return r ? weft_iallreduce(a->sendbuf, a->recvbuf, a->count, t, op, world, r)
                 : weft_allreduce(a->sendbuf, a->recvbuf, a->count, t, op, world);
    case BK_ALLGATHER:
        return r ? weft_iallgather(a->sendbuf, a->recvbuf, a->count, t, world, r)
                 : weft_allgather(a->sendbuf, a->recvbuf, a->count, t, world);
    case BK_ALLGATHERV:
        return r ? weft_iallgatherv(a->sendbuf, a->count, a->recvbuf, a->counts64, a->displs64, t, world, r)
                 : weft_allgatherv(a->sendbuf, a->count, a->recvbuf, a->counts64, a->displs64, t, world);
    case BK_REDUCE_SCATTER:
        return r ? weft_ireduce_scatter(a->sendbuf, a->recvbuf, a->counts64, t, op, world, r)
                 : weft_reduce_scatter(a->sendbuf, a->recvbuf, a->counts64, t, op, world);
    case BK_REDUCE_SCATTER_BLOCK:
        return r ? weft_ireduce_scatter_block(a->sendbuf, a->recvbuf, a->count, t, op, world, r)
                 : weft_reduce_scatter_block(a->sendbuf, a->recvbuf, a->count, t, op, world);
    case BK_ALLTOALL:
        return r ? weft_ialltoall(a->sendbuf, a->recvbuf, a->count, t, world, r)
                 : weft_alltoall(a->sendbuf, a->recvbuf, a->count, t, world);
    case BK_ALLTOALLV:
        return r ? weft_ialltoallv(a->sendbuf, a->counts64, a->displs64, a->recvbuf, a->counts64, a->displs64, t, world,
                                   r)
                 : weft_alltoallv(a->sendbuf, a->counts64, a->displs64, a->recvbuf, a->counts64, a->displs64, t, world);
    case BK_GATHER:
        return r ? weft_igather(a->sendbuf, a->recvbuf, a->count, t, a->root, world, r)
                 : weft_gather(a->sendbuf, a->recvbuf, a->count, t, a->root, world);
    case BK_SCATTER:
        return r ? weft_iscatter(a->sendbuf, a->recvbuf, a->count, t, a->root, world, r)
                 : weft_scatter(a->sendbuf, a->recvbuf, a->count, t, a->root, world);
    case BK_COLL_COUNT: break;
    }
    return WEFT_ERR_ARG;
}

int bk_coll(const bk_coll_args_t *a)
{
    return check(post(a, NULL), "collective");
}

int bk_icoll(const bk_coll_args_t *a, bk_req_t *req)
{
    return check(post(a, wreq(req)), "nonblocking collective");
}

int bk_coll_try(const bk_coll_args_t *a, int nonblocking, char *why, size_t len)
{
    weft_request_t r = WEFT_REQUEST_NULL;
    int rc = post(a, nonblocking ? &r : NULL);
    if (rc == WEFT_SUCCESS && nonblocking) rc = weft_wait(&r, NULL);
    if (rc != WEFT_SUCCESS) snprintf(why, len, "%s (%s)", weft_last_error(), weft_strerror(rc));
    return rc;
}
