/* Collectives, point to point and groups over weft's stream-ordered calls.
 *
 * A collective is weft_<name>_on_stream on the caller's stream: with device
 * buffers on one node weft's kernels run it in stream order and the call
 * returns at once; anything else weft runs on the host after the stream's
 * earlier work, returning when the result is in place. Gather and scatter
 * (which weft's kernels lack) and sends and receives go through weft's
 * point to point from the host: their streams' earlier work is waited
 * for, every message of the group is posted at once (receives first), and
 * the call returns when all are done, so the stream's later work sees them.
 * A send and a receive of a rank to itself are a copy.
 *
 * Groups: calls between ncclGroupStart and the outermost ncclGroupEnd are
 * checked when made and queued (per thread, as NCCL's), then issued
 * together: messages posted, collectives run in the order called, messages
 * waited for. A call that failed its checks fails the group: ncclGroupEnd
 * issues nothing and returns that error.
 *
 * PreMulSum operators pre-multiply on the host: the input is copied to host
 * memory, scaled, summed by weft's host collective and copied back. */
#include "nccl_impl.h"

#include <stdlib.h>
#include <string.h>

/* ---- types and operators ------------------------------------------------- */

static const struct {
    size_t size;
    int move;   /* weft type for data movement (same element size) */
    int reduce; /* weft type for reductions, or -1 */
    const char *name;
} types[ncclNumTypes] = {
    [ncclInt8] = {1, WEFT_INT8, WEFT_INT8, "int8"},
    [ncclUint8] = {1, WEFT_UINT8, WEFT_UINT8, "uint8"},
    [ncclInt32] = {4, WEFT_INT32, WEFT_INT32, "int32"},
    [ncclUint32] = {4, WEFT_UINT32, WEFT_UINT32, "uint32"},
    [ncclInt64] = {8, WEFT_INT64, WEFT_INT64, "int64"},
    [ncclUint64] = {8, WEFT_UINT64, WEFT_UINT64, "uint64"},
    [ncclFloat16] = {2, WEFT_FLOAT16, WEFT_FLOAT16, "float16"},
    [ncclFloat32] = {4, WEFT_FLOAT32, WEFT_FLOAT32, "float32"},
    [ncclFloat64] = {8, WEFT_FLOAT64, WEFT_FLOAT64, "float64"},
    [ncclBfloat16] = {2, WEFT_BFLOAT16, WEFT_BFLOAT16, "bfloat16"},
    [ncclFloat8e4m3] = {1, WEFT_UINT8, -1, "float8e4m3"},
    [ncclFloat8e5m2] = {1, WEFT_UINT8, -1, "float8e5m2"},
};

static const weft_op_t ops_of[ncclNumOps] = {
    [ncclSum] = WEFT_SUM, [ncclProd] = WEFT_PROD, [ncclMax] = WEFT_MAX, [ncclMin] = WEFT_MIN, [ncclAvg] = WEFT_AVG};

size_t nccl_type_size(ncclDataType_t t)
{
    return (unsigned)t < ncclNumTypes ? types[t].size : 0;
}

int nccl_move_type(ncclDataType_t t)
{
    return (unsigned)t < ncclNumTypes ? types[t].move : -1;
}

/* A PreMulSum operator: ncclRedOp_t ncclNumOps + its index on the comm. */
struct nccl_premul {
    int live;
    ncclDataType_t type;
    ncclScalarResidence_t residence;
    unsigned char value[8]; /* host-immediate: the scalar, read at creation */
    const void *where;      /* device: where the scalar is read when a collective runs */
};

/* What ncclRedOpCreatePreMulSum hands out when it fails: collectives
 * given it fail too (PyTorch ignores the create's result and would else
 * run a plain sum with the zero it initialised the operator to). */
#define OP_REFUSED ((ncclRedOp_t)0x7fffff00)

void nccl_coll_comm_release(ncclComm_t comm)
{
    free(comm->ops);
    comm->ops = NULL;
    comm->nops = 0;
}

/* ---- operations --------------------------------------------------------- */

enum { K_ALLREDUCE, K_BCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_ALLTOALL, K_GATHER, K_SCATTER, K_SEND, K_RECV };
static const char *const kind_fn[] = {"ncclAllReduce",     "ncclBroadcast", "ncclReduce", "ncclAllGather",
                                      "ncclReduceScatter", "ncclAlltoAll",  "ncclGather", "ncclScatter",
                                      "ncclSend",          "ncclRecv"};

typedef struct nccl_op {
    int kind;
    ncclComm_t comm;
    const void *send;
    void *recv;
    size_t count; /* elements: per rank for the gathers, scatters and reduce_scatter */
    ncclDataType_t type;
    ncclRedOp_t op;
    int root; /* root, or peer */
    void *stream;
} nccl_op_t;

static int is_p2p(int kind)
{
    return kind == K_SEND || kind == K_RECV || kind == K_GATHER || kind == K_SCATTER;
}

static int is_reduction(int kind)
{
    return kind == K_ALLREDUCE || kind == K_REDUCE || kind == K_REDUCE_SCATTER;
}

/* The checks NCCL makes before anything is enqueued. */
static ncclResult_t op_check(nccl_op_t *o)
{
    const char *fn = kind_fn[o->kind];
    ncclResult_t rc = nccl_comm_usable(o->comm, fn);
    if (rc) return rc;
    ncclComm_t c = o->comm;
    if ((unsigned)o->type >= ncclNumTypes)
        return nccl_fail(ncclInvalidArgument, "%s: datatype %d is not an ncclDataType_t", fn, (int)o->type);
    if (o->count > (size_t)INT64_MAX / 8 / (size_t)c->nranks)
        return nccl_fail(ncclInvalidArgument, "%s: count %zu is too large", fn, o->count);
    if (is_reduction(o->kind)) {
        if (types[o->type].reduce < 0)
            return nccl_fail(ncclInvalidArgument,
                             "%s: weft has no %s arithmetic (fp8 moves as bytes: broadcast, allgather, alltoall, "
                             "gather, scatter, send, receive)",
                             fn, types[o->type].name);
        if (o->op == OP_REFUSED)
            return nccl_fail(ncclInvalidUsage,
                             "%s: the operator was refused by ncclRedOpCreatePreMulSum (ncclGetLastError said why)",
                             fn);
        if ((unsigned)o->op >= ncclNumOps) {
            int i = (int)o->op - ncclNumOps;
            if (i < 0 || i >= c->nops || !c->ops[i].live)
                return nccl_fail(ncclInvalidArgument, "%s: op %d is neither built in nor a live PreMulSum of comm %s",
                                 fn, (int)o->op, c->name);
            if (c->ops[i].type != o->type)
                return nccl_fail(ncclInvalidArgument, "%s: PreMulSum op %d was made for %s, not %s", fn, (int)o->op,
                                 types[c->ops[i].type].name, types[o->type].name);
        }
    }
    int rooted = o->kind == K_BCAST || o->kind == K_REDUCE || o->kind == K_GATHER || o->kind == K_SCATTER ||
                 o->kind == K_SEND || o->kind == K_RECV;
    if (rooted && (o->root < 0 || o->root >= c->nranks))
        return nccl_fail(ncclInvalidArgument, "%s: %s %d is not in 0..%d of comm %s", fn,
                         o->kind == K_SEND || o->kind == K_RECV ? "peer" : "root", o->root, c->nranks - 1, c->name);
    if (o->count > 0) {
        int me_root = o->root == c->rank;
        int need_send = o->kind != K_RECV && !(o->kind == K_SCATTER && !me_root) && !(o->kind == K_BCAST && !me_root);
        int need_recv = o->kind != K_SEND && !(o->kind == K_REDUCE && !me_root) && !(o->kind == K_GATHER && !me_root);
        if ((need_send && !o->send) || (need_recv && !o->recv))
            return nccl_fail(ncclInvalidArgument, "%s: NULL %s buffer for %zu elements", fn,
                             need_send && !o->send ? "send" : "receive", o->count);
    }
    return ncclSuccess;
}

/* ---- PreMulSum on the host -------------------------------------------------- */

/* buf[i] *= k, as weft's PROD against a block of copies of the scalar: the
 * collectives' own arithmetic (integers wrap; half types multiply in float
 * and round once). */
static ncclResult_t scale(void *buf, size_t n, ncclDataType_t t, const unsigned char *k, const char *fn)
{
    enum { CHUNK = 4096 };
    size_t es = types[t].size;
    unsigned char *ks = malloc(CHUNK * es);
    if (!ks) return nccl_fail(ncclSystemError, "%s: out of memory", fn);
    for (size_t i = 0; i < CHUNK; i++)
        memcpy(ks + i * es, k, es);
    int rc = WEFT_SUCCESS;
    for (size_t at = 0; at < n && !rc; at += CHUNK)
        rc = weft_reduce_local(ks, (char *)buf + at * es, (int64_t)(n - at < CHUNK ? n - at : CHUNK), types[t].reduce,
                               WEFT_PROD);
    free(ks);
    return rc ? nccl_weft_fail(rc, fn) : ncclSuccess;
}

/* Copies between the caller's buffer and host memory in stream order and
 * waits for it. */
static ncclResult_t copy_and_wait(void *dst, const void *src, size_t bytes, void *stream, const char *fn)
{
    int r = nccl_cuda_copy(dst, src, bytes, stream);
    if (!r) r = nccl_cuda_stream_sync(stream);
    return r ? nccl_fail(ncclUnhandledCudaError, "%s: copying %zu bytes: %s", fn, bytes, nccl_cuda_error(r))
             : ncclSuccess;
}

static ncclResult_t run_premul(const nccl_op_t *o)
{
    const char *fn = kind_fn[o->kind];
    ncclComm_t c = o->comm;
    const struct nccl_premul *p = &c->ops[(int)o->op - ncclNumOps];
    size_t es = types[o->type].size, nin = o->kind == K_REDUCE_SCATTER ? o->count * (size_t)c->nranks : o->count;
    size_t nout = o->count;
    int capturing = 0, root = o->kind != K_REDUCE || o->root == c->rank;
    unsigned char k[8];
    ncclResult_t rc = ncclSuccess;

    nccl_cuda_capturing(o->stream, &capturing);
    if (capturing)
        return nccl_fail(ncclInvalidUsage,
                         "%s: a PreMulSum operator cannot be captured in a CUDA graph: weft scales on the host (its "
                         "GPU kernels have no pre-multiplied sum)",
                         fn);
    static int said;
    if (!said++)
        nccl_log(NL_INFO, "%s: PreMulSum runs through host memory (weft's GPU kernels have no pre-multiplied sum)", fn);
    unsigned char *in = malloc(nin * es + 1), *out = malloc(nout * es + 1);
    if (!in || !out) {
        rc = nccl_fail(ncclSystemError, "%s: out of memory for %zu bytes of host staging", fn, (nin + nout) * es);
        goto done;
    }
    if ((rc = copy_and_wait(in, o->send, nin * es, o->stream, fn))) goto done;
    memcpy(k, p->value, sizeof(k));
    if (p->residence == ncclScalarDevice && (rc = copy_and_wait(k, p->where, es, o->stream, fn))) goto done;
    if ((rc = scale(in, nin, o->type, k, fn))) goto done;
    int wrc = WEFT_SUCCESS, wt = types[o->type].reduce;
    if (!c->wc)
        memcpy(out, in, nout * es);
    else if (o->kind == K_ALLREDUCE)
        wrc = weft_allreduce(in, out, (int64_t)nout, wt, WEFT_SUM, c->wc);
    else if (o->kind == K_REDUCE)
        wrc = weft_reduce(in, out, (int64_t)nout, wt, WEFT_SUM, o->root, c->wc);
    else
        wrc = weft_reduce_scatter_block(in, out, (int64_t)nout, wt, WEFT_SUM, c->wc);
    if (wrc) {
        rc = nccl_weft_fail(wrc, fn);
        goto done;
    }
    if (root) rc = copy_and_wait(o->recv, out, nout * es, o->stream, fn);
done:
    free(in);
    free(out);
    return rc;
}

/* ---- collectives ------------------------------------------------------------ */

/* reduce_scatter with the result inside the input (NCCL's in place): weft
 * reduces into a scratch block (device memory allocated and freed in
 * stream order, or host memory), which is then moved in stream order. */
static ncclResult_t reduce_scatter_in_place(const nccl_op_t *o, int wt, weft_op_t wop)
{
    static const char fn[] = "ncclReduceScatter";
    size_t bytes = o->count * types[o->type].size;
    void *tmp = NULL;
    int r = 0, dev = nccl_cuda_is_device(o->send);
    if (dev) {
        if ((r = nccl_cuda_alloc_async(&tmp, bytes, o->stream)))
            return nccl_fail(ncclUnhandledCudaError, "%s: in place: %zu bytes of scratch: %s", fn, bytes,
                             nccl_cuda_error(r));
    } else if (!(tmp = malloc(bytes))) {
        return nccl_fail(ncclSystemError, "%s: in place: out of memory for %zu bytes of scratch", fn, bytes);
    }
    ncclResult_t rc = ncclSuccess;
    int wrc =
        weft_reduce_scatter_block_on_stream(o->send, tmp, (int64_t)o->count, wt, wop, o->comm->wc, o->stream, NULL);
    if (wrc) {
        rc = nccl_weft_fail(wrc, fn);
        nccl_comm_note(o->comm, rc);
    } else if ((r = nccl_cuda_copy(o->recv, tmp, bytes, o->stream))) {
        rc = nccl_fail(ncclUnhandledCudaError, "%s: in place: moving the result: %s", fn, nccl_cuda_error(r));
    }
    if (dev)
        nccl_cuda_free_async(tmp, o->stream);
    else
        free(tmp);
    return rc;
}

static ncclResult_t run_collective(const nccl_op_t *o)
{
    const char *fn = kind_fn[o->kind];
    ncclComm_t c = o->comm;
    weft_comm_t wc = c->wc;
    size_t es = types[o->type].size, block = o->count * es;
    int64_t n = (int64_t)o->count;
    int mt = types[o->type].move, wt = types[o->type].reduce, r = 0, wrc = WEFT_SUCCESS;
    weft_op_t wop = (unsigned)o->op < ncclNumOps ? ops_of[o->op] : WEFT_SUM;

    if (is_reduction(o->kind) && (unsigned)o->op >= ncclNumOps) return run_premul(o);
    if (!wc) {
        /* One rank without weft: every collective is a copy of its input. */
        size_t bytes = o->kind == K_BCAST ? (o->root == c->rank ? block : 0) : block;
        if (o->recv && o->send && bytes) r = nccl_cuda_copy(o->recv, o->send, bytes, o->stream);
        return r ? nccl_fail(ncclUnhandledCudaError, "%s: copy on comm %s: %s", fn, c->name, nccl_cuda_error(r))
                 : ncclSuccess;
    }
    const char *sendbuf = o->send;
    char *recvbuf = o->recv;
    switch (o->kind) {
    case K_ALLREDUCE:
        wrc = weft_allreduce_on_stream(sendbuf == recvbuf ? WEFT_IN_PLACE : sendbuf, recvbuf, n, wt, wop, wc, o->stream,
                                       NULL);
        break;
    case K_REDUCE:
        wrc = weft_reduce_on_stream(sendbuf == recvbuf && o->root == c->rank ? WEFT_IN_PLACE : sendbuf, recvbuf, n, wt,
                                    wop, o->root, wc, o->stream, NULL);
        break;
    case K_BCAST:
        if (o->root == c->rank && sendbuf && sendbuf != recvbuf && block)
            r = nccl_cuda_copy(recvbuf, sendbuf, block, o->stream);
        if (!r) wrc = weft_bcast_on_stream(recvbuf, n, mt, o->root, wc, o->stream, NULL);
        break;
    case K_ALLGATHER:
        wrc = weft_allgather_on_stream(sendbuf == recvbuf + (size_t)c->rank * block ? WEFT_IN_PLACE : sendbuf, recvbuf,
                                       n, mt, wc, o->stream, NULL);
        break;
    case K_REDUCE_SCATTER:
        if (recvbuf == sendbuf + (size_t)c->rank * block && block) return reduce_scatter_in_place(o, wt, wop);
        wrc = weft_reduce_scatter_block_on_stream(sendbuf, recvbuf, n, wt, wop, wc, o->stream, NULL);
        break;
    case K_ALLTOALL:
        wrc =
            weft_alltoall_on_stream(sendbuf == recvbuf ? WEFT_IN_PLACE : sendbuf, recvbuf, n, mt, wc, o->stream, NULL);
        break;
    default: return nccl_fail(ncclInternalError, "%s: not a collective (kind %d)", fn, o->kind);
    }
    if (r) return nccl_fail(ncclUnhandledCudaError, "%s: comm %s: %s", fn, c->name, nccl_cuda_error(r));
    if (wrc) {
        ncclResult_t rc = nccl_weft_fail(wrc, fn);
        nccl_comm_note(c, rc);
        return rc;
    }
    return ncclSuccess;
}

/* ---- point to point ------------------------------------------------------------ */

/* One message of a group: a send or receive of `bytes` with `peer`. */
typedef struct {
    int send;
    ncclComm_t comm;
    void *buf;
    size_t bytes;
    int peer, tag;
    void *stream;
    int matched; /* a message to itself, paired with its other half */
    const char *fn;
} leg_t;

enum { TAG_P2P = 0, TAG_GATHER = 1, TAG_SCATTER = 2 };

typedef struct {
    leg_t *v;
    int n, cap;
} legs_t;

static int legs_add(legs_t *l, leg_t x)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        leg_t *v = realloc(l->v, sizeof(*v) * (size_t)cap);
        if (!v) return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

/* The messages of a send, receive, gather or scatter; a gather's or a
 * scatter's own block is a copy on its stream. */
static ncclResult_t expand(const nccl_op_t *o, legs_t *l)
{
    ncclComm_t c = o->comm;
    size_t block = o->count * types[o->type].size;
    const char *fn = kind_fn[o->kind];
    int bad = 0;
    switch (o->kind) {
    case K_SEND:
    case K_RECV:
        bad = legs_add(l, (leg_t){o->kind == K_SEND, c, o->kind == K_SEND ? (void *)o->send : o->recv, block, o->root,
                                  TAG_P2P, o->stream, 0, fn});
        break;
    case K_GATHER:
        if (c->rank != o->root) {
            bad = legs_add(l, (leg_t){1, c, (void *)o->send, block, o->root, TAG_GATHER, o->stream, 0, fn});
            break;
        }
        for (int r = 0; r < c->nranks && !bad; r++)
            if (r != c->rank)
                bad = legs_add(
                    l, (leg_t){0, c, (char *)o->recv + (size_t)r * block, block, r, TAG_GATHER, o->stream, 0, fn});
        if (!bad && block && o->send != (char *)o->recv + (size_t)c->rank * block) {
            int r = nccl_cuda_copy((char *)o->recv + (size_t)c->rank * block, o->send, block, o->stream);
            if (r) return nccl_fail(ncclUnhandledCudaError, "%s: own block: %s", fn, nccl_cuda_error(r));
        }
        break;
    case K_SCATTER:
        if (c->rank != o->root) {
            bad = legs_add(l, (leg_t){0, c, o->recv, block, o->root, TAG_SCATTER, o->stream, 0, fn});
            break;
        }
        for (int r = 0; r < c->nranks && !bad; r++)
            if (r != c->rank)
                bad = legs_add(
                    l, (leg_t){1, c, (char *)o->send + (size_t)r * block, block, r, TAG_SCATTER, o->stream, 0, fn});
        if (!bad && block && o->recv != (const char *)o->send + (size_t)c->rank * block) {
            int r = nccl_cuda_copy(o->recv, (const char *)o->send + (size_t)c->rank * block, block, o->stream);
            if (r) return nccl_fail(ncclUnhandledCudaError, "%s: own block: %s", fn, nccl_cuda_error(r));
        }
        break;
    default: break;
    }
    return bad ? nccl_fail(ncclSystemError, "%s: out of memory", fn) : ncclSuccess;
}

/* Messages of a rank to itself: each send meets the receive of the same
 * communicator and tag in order, and becomes a copy on the receive's
 * stream. One without its other half in the group would wait for ever. */
static ncclResult_t match_self(legs_t *l)
{
    for (int i = 0; i < l->n; i++) {
        leg_t *s = &l->v[i];
        if (!s->send || s->matched || s->peer != s->comm->rank) continue;
        leg_t *r = NULL;
        for (int j = 0; j < l->n && !r; j++)
            if (!l->v[j].send && !l->v[j].matched && l->v[j].comm == s->comm && l->v[j].peer == s->comm->rank &&
                l->v[j].tag == s->tag)
                r = &l->v[j];
        if (!r)
            return nccl_fail(ncclInvalidUsage,
                             "%s: a send to itself (rank %d of comm %s) without its receive in the same group would "
                             "never complete",
                             s->fn, s->peer, s->comm->name);
        if (r->bytes != s->bytes)
            return nccl_fail(ncclInvalidArgument, "%s: rank %d sends itself %zu bytes and receives %zu", s->fn, s->peer,
                             s->bytes, r->bytes);
        s->matched = r->matched = 1;
        int e = nccl_cuda_copy(r->buf, s->buf, s->bytes, r->stream);
        if (e) return nccl_fail(ncclUnhandledCudaError, "%s: copy to itself: %s", s->fn, nccl_cuda_error(e));
    }
    for (int i = 0; i < l->n; i++)
        if (!l->v[i].send && !l->v[i].matched && l->v[i].peer == l->v[i].comm->rank)
            return nccl_fail(ncclInvalidUsage,
                             "%s: a receive from itself (rank %d of comm %s) without its send in the same group would "
                             "never complete",
                             l->v[i].fn, l->v[i].peer, l->v[i].comm->name);
    return ncclSuccess;
}

/* Waits for the streams the messages read or write (each once): they move
 * from the host. */
static ncclResult_t sync_streams(const legs_t *l)
{
    for (int i = 0; i < l->n; i++) {
        int seen = 0, capturing = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = l->v[j].stream == l->v[i].stream;
        if (seen) continue;
        nccl_cuda_capturing(l->v[i].stream, &capturing);
        if (capturing)
            return nccl_fail(ncclInvalidUsage,
                             "%s: sends, receives, gathers and scatters cannot be captured in a CUDA graph: weft "
                             "moves them from the host",
                             l->v[i].fn);
        int r = nccl_cuda_stream_sync(l->v[i].stream);
        if (r)
            return nccl_fail(ncclUnhandledCudaError, "%s: waiting for stream %p: %s", l->v[i].fn, l->v[i].stream,
                             nccl_cuda_error(r));
    }
    return ncclSuccess;
}

/* ---- issuing a group -------------------------------------------------------------------- */

/* Issues ops[0..n-1] (checked already) under the lock: the messages posted,
 * the collectives in order, the messages waited for. */
static ncclResult_t issue(nccl_op_t *ops, int n)
{
    legs_t legs = {0};
    weft_request_t *reqs = NULL;
    int nreq = 0;
    ncclResult_t rc = ncclSuccess;

    for (int i = 0; i < n && !rc; i++)
        if (is_p2p(ops[i].kind)) rc = expand(&ops[i], &legs);
    if (!rc && legs.n) rc = sync_streams(&legs);
    if (!rc && legs.n) rc = match_self(&legs);
    if (!rc && legs.n && !(reqs = malloc(sizeof(*reqs) * (size_t)legs.n)))
        rc = nccl_fail(ncclSystemError, "ncclGroupEnd: out of memory for %d messages", legs.n);
    /* Receives first, then sends: nothing waits on an unposted receive. */
    for (int pass = 0; pass < 2 && !rc; pass++)
        for (int i = 0; i < legs.n && !rc; i++) {
            leg_t *g = &legs.v[i];
            if (g->matched || g->send != pass) continue;
            int wrc =
                g->send ? weft_isend(g->buf, (int64_t)g->bytes, WEFT_UINT8, g->peer, g->tag, g->comm->wc, &reqs[nreq])
                        : weft_irecv(g->buf, (int64_t)g->bytes, WEFT_UINT8, g->peer, g->tag, g->comm->wc, &reqs[nreq]);
            if (wrc) {
                rc = nccl_weft_fail(wrc, g->fn);
                nccl_comm_note(g->comm, rc);
            } else {
                nreq++;
            }
        }
    for (int i = 0; i < n && !rc; i++)
        if (!is_p2p(ops[i].kind)) rc = run_collective(&ops[i]);
    if (nreq && !rc) {
        int wrc = weft_waitall(nreq, reqs, NULL);
        if (wrc) {
            rc = nccl_weft_fail(wrc, legs.n == 1 ? legs.v[0].fn : "ncclGroupEnd (sends and receives)");
            for (int i = 0; i < n; i++)
                if (is_p2p(ops[i].kind)) nccl_comm_note(ops[i].comm, rc);
        }
    }
    /* After a failure, what is still pending is let go: receives are
     * canceled, sends finish in the background. */
    for (int i = 0; i < nreq; i++)
        if (reqs[i] != WEFT_REQUEST_NULL) weft_request_free(&reqs[i]);
    for (int i = 0; i < n; i++)
        nccl_comm_stream(ops[i].comm, ops[i].stream);
    free(reqs);
    free(legs.v);
    return rc;
}

/* ---- groups ---------------------------------------------------------------------------------- */

static _Thread_local struct {
    int depth;
    nccl_op_t *ops;
    int n, cap;
    ncclResult_t error; /* the first call of the group that failed its checks */
} grp;

static void group_drop(void)
{
    free(grp.ops);
    grp.ops = NULL;
    grp.n = grp.cap = 0;
    grp.error = ncclSuccess;
}

/* A call: checked, then queued in a group or issued at once. */
static ncclResult_t submit(nccl_op_t *o)
{
    ncclResult_t rc = op_check(o);
    if (NCCL_UNLIKELY(grp.depth > 0)) {
        if (rc) {
            if (!grp.error) grp.error = rc;
            return rc;
        }
        if (grp.n == grp.cap) {
            int cap = grp.cap ? 2 * grp.cap : 16;
            nccl_op_t *v = realloc(grp.ops, sizeof(*v) * (size_t)cap);
            if (!v) {
                if (!grp.error) grp.error = ncclSystemError;
                return nccl_fail(ncclSystemError, "%s: out of memory for the group", kind_fn[o->kind]);
            }
            grp.ops = v;
            grp.cap = cap;
        }
        grp.ops[grp.n++] = *o;
        return ncclSuccess;
    }
    if (rc) return rc;
    NCCL_LOCK();
    if (NCCL_LIKELY(!is_p2p(o->kind))) {
        rc = run_collective(o);
        nccl_comm_stream(o->comm, o->stream);
    } else {
        rc = issue(o, 1);
    }
    NCCL_UNLOCK();
    return rc;
}

NCCL_DEF(ncclResult_t, GroupStart, (void))
{
    if (grp.depth == 1 << 20) return nccl_fail(ncclInvalidUsage, "ncclGroupStart: groups nested 2^20 deep");
    grp.depth++;
    return ncclSuccess;
}

NCCL_DEF(ncclResult_t, GroupEnd, (void))
{
    if (grp.depth == 0) return nccl_fail(ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart to end");
    if (--grp.depth > 0) return ncclSuccess;
    ncclResult_t rc = grp.error;
    if (rc) {
        nccl_log(NL_WARN, "ncclGroupEnd: none of the group's %d calls was issued: a call in it failed (%s)", grp.n,
                 nccl_result_name(rc));
        group_drop();
        return rc;
    }
    if (grp.n) {
        NCCL_LOCK();
        rc = issue(grp.ops, grp.n);
        NCCL_UNLOCK();
    }
    group_drop();
    return rc;
}

NCCL_DEF(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t * simInfo))
{
    if (!simInfo || simInfo->magic != NCCL_SIM_INFO_MAGIC)
        return nccl_fail(ncclInvalidArgument, "ncclGroupSimulateEnd: simInfo is %s",
                         simInfo ? "not initialised with "
                                   "NCCL_SIM_INFO_INITIALIZER"
                                 : "NULL");
    if (grp.depth == 0) return nccl_fail(ncclInvalidUsage, "ncclGroupSimulateEnd: no ncclGroupStart to end");
    if (--grp.depth > 0) return ncclSuccess;
    int n = grp.n;
    group_drop();
    return nccl_fail(ncclInvalidUsage,
                     "ncclGroupSimulateEnd: weft has no cost model to estimate the group's %d calls; they were not "
                     "issued",
                     n);
}

/* ---- the calls ------------------------------------------------------------------------------------------- */

NCCL_DEF(ncclResult_t, AllReduce,
         (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
          cudaStream_t stream))
{
    nccl_op_t o = {K_ALLREDUCE, comm, sendbuff, recvbuff, count, datatype, op, 0, stream};
    return submit(&o);
}

NCCL_DEF(ncclResult_t, Reduce,
         (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
          ncclComm_t comm, cudaStream_t stream))
{
    nccl_op_t o = {K_REDUCE, comm, sendbuff, recvbuff, count, datatype, op, root, stream};
    return submit(&o);
}

NCCL_DEF(ncclResult_t, Broadcast,
         (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
          cudaStream_t stream))
{
    nccl_op_t o = {K_BCAST, comm, sendbuff, recvbuff, count, datatype, ncclSum, root, stream};
    return submit(&o);
}

NCCL_DEF(ncclResult_t, Bcast,
         (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream))
{
    nccl_op_t o = {K_BCAST, comm, buff, buff, count, datatype, ncclSum, root, stream};
    return submit(&o);
}

NCCL_DEF(ncclResult_t, AllGather,
         (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
          cudaStream_t stream))
{
    nccl_op_t o = {K_ALLGATHER, comm, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream};
    return submit(&o);
}

NCCL_DEF(ncclResult_t, ReduceScatter,
         (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
          ncclComm_t comm, cudaStream_t stream))
{
    nccl_op_t o = {K_REDUCE_SCATTER, comm, sendbuff, recvbuff, recvcount, datatype, op, 0, stream};
    return submit(&o);
}

NCCL_DEF(ncclResult_t, AlltoAll,
         (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
          cudaStream_t stream))
{
    nccl_op_t o = {K_ALLTOALL, comm, sendbuff, recvbuff, count, datatype, ncclSum, 0, stream};
    return submit(&o);
}

NCCL_DEF(ncclResult_t, Gather,
         (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
          cudaStream_t stream))
{
    nccl_op_t o = {K_GATHER, comm, sendbuff, recvbuff, count, datatype, ncclSum, root, stream};
    return submit(&o);
}

NCCL_DEF(ncclResult_t, Scatter,
         (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
          cudaStream_t stream))
{
    nccl_op_t o = {K_SCATTER, comm, sendbuff, recvbuff, count, datatype, ncclSum, root, stream};
    return submit(&o);
}

NCCL_DEF(ncclResult_t, Send,
         (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream))
{
    nccl_op_t o = {K_SEND, comm, sendbuff, NULL, count, datatype, ncclSum, peer, stream};
    return submit(&o);
}

NCCL_DEF(ncclResult_t, Recv,
         (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream))
{
    nccl_op_t o = {K_RECV, comm, NULL, recvbuff, count, datatype, ncclSum, peer, stream};
    return submit(&o);
}

/* ---- PreMulSum operators ----------------------------------------------------------------------------------- */

NCCL_DEF(ncclResult_t, RedOpCreatePreMulSum,
         (ncclRedOp_t * op, void *scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm))
{
    static const char fn[] = "ncclRedOpCreatePreMulSum";
    ncclResult_t rc;
    if (!op) return nccl_fail(ncclInvalidArgument, "%s: NULL op pointer", fn);
    *op = OP_REFUSED;
    if ((rc = nccl_comm_check(comm, fn))) return rc;
    if (!scalar) return nccl_fail(ncclInvalidArgument, "%s: NULL scalar", fn);
    if ((unsigned)datatype >= ncclNumTypes || types[datatype].reduce < 0)
        return nccl_fail(ncclInvalidArgument, "%s: no PreMulSum for datatype %d (%s)", fn, (int)datatype,
                         (unsigned)datatype < ncclNumTypes ? types[datatype].name : "unknown");
    if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
        return nccl_fail(ncclInvalidArgument, "%s: residence %d is not an ncclScalarResidence_t", fn, (int)residence);
    int i = 0;
    while (i < comm->nops && comm->ops[i].live)
        i++;
    if (i == comm->nops) {
        if (comm->nops >= 1 << 20)
            return nccl_fail(ncclInvalidUsage, "%s: 2^20 live operators on comm %s", fn, comm->name);
        struct nccl_premul *v = realloc(comm->ops, sizeof(*v) * (size_t)(comm->nops + 1));
        if (!v) return nccl_fail(ncclSystemError, "%s: out of memory", fn);
        comm->ops = v;
        comm->nops++;
    }
    struct nccl_premul *p = &comm->ops[i];
    memset(p, 0, sizeof(*p));
    p->live = 1;
    p->type = datatype;
    p->residence = residence;
    if (residence == ncclScalarHostImmediate)
        memcpy(p->value, scalar, types[datatype].size);
    else
        p->where = scalar;
    *op = (ncclRedOp_t)(ncclNumOps + i);
    return ncclSuccess;
}

NCCL_DEF(ncclResult_t, RedOpDestroy, (ncclRedOp_t op, ncclComm_t comm))
{
    static const char fn[] = "ncclRedOpDestroy";
    ncclResult_t rc = nccl_comm_check(comm, fn);
    if (rc) return rc;
    if (op == OP_REFUSED) return ncclSuccess; /* what a failed create handed out */
    int i = (int)op - ncclNumOps;
    if ((unsigned)op < ncclNumOps || i < 0 || i >= comm->nops || !comm->ops[i].live)
        return nccl_fail(ncclInvalidArgument, "%s: op %d is not a live PreMulSum operator of comm %s", fn, (int)op,
                         comm->name);
    comm->ops[i].live = 0;
    return ncclSuccess;
}
