/* Neighbourhood collectives over a communicator's topology: one message to
 * each out-neighbour and from each in-neighbour, all posted at once on a
 * shadow of the communicator (weft's dup, made at the first such call), so
 * they never match the program's own messages. Each call takes the next
 * number of a per-communicator sequence as its tag, plus, on a Cartesian
 * grid, the receiver's slot: with two neighbours in one rank (a periodic
 * dimension of two), each message still lands in its slot. */
#include "mpi/coll.h"

#include <stdlib.h>
#include <string.h>

#define SLOT_BITS 10

/* The in- and out-neighbours of c's topology, in MPI's order. */
static int neighbours(struct MPI_ABI_Comm *c, int **in, int *nin, int **out, int *nout, int *cart)
{
    mpi_topo_t *t = c->topo;
    *cart = 0;
    if (t->kind == MPI_CART) {
        int n = 2 * t->ndims;
        *in = malloc(sizeof(int) * (size_t)(n + 1));
        *out = malloc(sizeof(int) * (size_t)(n + 1));
        if (!*in || !*out) return MPI_ERR_NO_MEM;
        for (int d = 0; d < t->ndims; d++) {
            int src, dst;
            PMPI_Cart_shift(c->predefined ? (MPI_Comm)(uintptr_t)c->predefined : c, d, 1, &src, &dst);
            (*in)[2 * d] = (*out)[2 * d] = src;
            (*in)[2 * d + 1] = (*out)[2 * d + 1] = dst;
        }
        *nin = *nout = n;
        *cart = 1;
    } else if (t->kind == MPI_GRAPH) {
        int first = c->rank == 0 ? 0 : t->index[c->rank - 1], n = t->index[c->rank] - first;
        *in = malloc(sizeof(int) * (size_t)(n + 1));
        *out = malloc(sizeof(int) * (size_t)(n + 1));
        if (!*in || !*out) return MPI_ERR_NO_MEM;
        memcpy(*in, t->edges + first, sizeof(int) * (size_t)n);
        memcpy(*out, t->edges + first, sizeof(int) * (size_t)n);
        *nin = *nout = n;
    } else {
        *in = malloc(sizeof(int) * (size_t)(t->indegree + 1));
        *out = malloc(sizeof(int) * (size_t)(t->outdegree + 1));
        if (!*in || !*out) return MPI_ERR_NO_MEM;
        if (t->indegree) memcpy(*in, t->sources, sizeof(int) * (size_t)t->indegree);
        if (t->outdegree) memcpy(*out, t->dests, sizeof(int) * (size_t)t->outdegree);
        *nin = t->indegree;
        *nout = t->outdegree;
    }
    return MPI_SUCCESS;
}

void mpi_nbr_reset(struct mpi_coll *c)
{
    for (int i = c->next; c->nreq && i < c->nn; i++)
        if (c->nreq[i]) weft_request_free(&c->nreq[i]);
    free(c->nreq);
    free(c->in);
    free(c->roff);
    c->nreq = NULL;
    c->in = NULL;
    c->roff = NULL;
    c->nn = c->next = c->nin = 0;
}

/* The per-neighbour count, displacement (bytes) and type of one side. */
static void side(const struct mpi_coll *c, int recv, int i, MPI_Count *count, MPI_Aint *disp,
                 struct MPI_ABI_Datatype **t)
{
    int v = c->kind == C_NALLGATHERV || c->kind == C_NALLTOALLV || c->kind == C_NALLTOALLW;
    int w = c->kind == C_NALLTOALLW;
    if (recv) {
        *t = w ? c->rtypes[i] : c->rtype;
        *count = v ? c->rcounts[i] : c->rcount;
        *disp = v ? (MPI_Aint)(w ? c->rdispls[i] : c->rdispls[i] * (*t)->extent)
                  : (MPI_Aint)i * (MPI_Aint)c->rcount * (*t)->extent;
    } else {
        int all = c->kind == C_NALLGATHER || c->kind == C_NALLGATHERV; /* one buffer for every neighbour */
        *t = w ? c->stypes[i] : c->stype;
        *count = all ? c->scount : v ? c->scounts[i] : c->scount;
        *disp = all ? 0
                : v ? (MPI_Aint)(w ? c->sdispls[i] : c->sdispls[i] * (*t)->extent)
                    : (MPI_Aint)i * (MPI_Aint)c->scount * (*t)->extent;
    }
}

int mpi_nbr_post(mpi_req_t *r)
{
    struct mpi_coll *c = r->coll;
    struct MPI_ABI_Comm *cm = r->comm;
    int *in = NULL, *out = NULL, nin, nout, cart, rc, wrc;
    if (!cm->nbr_wc && (wrc = weft_comm_dup(cm->wc, WEFT_OPTIONS_NULL, &cm->nbr_wc))) return wrc;
    if ((rc = neighbours(cm, &in, &nin, &out, &nout, &cart))) goto fail;
    unsigned seq = cm->nbr_seq++ % (1u << (23 - SLOT_BITS));
    c->in = in;
    c->nin = nin;
    in = NULL;
    c->nreq = calloc((size_t)(nin + nout + 1), sizeof(weft_request_t));
    c->roff = calloc((size_t)(nin + 1), sizeof(int64_t));
    if (!c->nreq || !c->roff) {
        rc = MPI_ERR_NO_MEM;
        goto fail;
    }
    /* receives: straight into the buffer when every block is contiguous,
     * else into one packed temporary */
    int packed_recv = 0;
    MPI_Count rtotal = 0;
    for (int i = 0; i < nin; i++) {
        MPI_Count count;
        MPI_Aint disp;
        struct MPI_ABI_Datatype *t;
        side(c, 1, i, &count, &disp, &t);
        if (!t->contig) packed_recv = 1;
        c->roff[i] = rtotal;
        rtotal += mpi_dtype_bytes(t, count);
    }
    if (packed_recv && !(c->tr = mpi_malloc((size_t)rtotal))) {
        rc = MPI_ERR_NO_MEM;
        goto fail;
    }
    for (int i = 0; i < nin; i++) {
        MPI_Count count;
        MPI_Aint disp;
        struct MPI_ABI_Datatype *t;
        side(c, 1, i, &count, &disp, &t);
        if (c->in[i] == MPI_PROC_NULL) continue;
        void *dst = packed_recv ? (char *)c->tr + c->roff[i] : mpi_dtype_data((char *)c->rbuf + disp, t);
        unsigned tag = (seq << SLOT_BITS) | (unsigned)(cart ? i : 0);
        if ((wrc = weft_irecv(dst, mpi_dtype_bytes(t, count), WEFT_BYTE, c->in[i], (int)tag, cm->nbr_wc,
                              &c->nreq[c->nn++])))
            goto weft_fail;
    }
    /* sends: packed copies where a block is not contiguous */
    MPI_Count stotal = 0;
    for (int j = 0; j < nout; j++) {
        MPI_Count count;
        MPI_Aint disp;
        struct MPI_ABI_Datatype *t;
        side(c, 0, j, &count, &disp, &t);
        if (!t->contig) stotal += mpi_dtype_bytes(t, count);
    }
    if (stotal && !(c->ts = mpi_malloc((size_t)stotal))) {
        rc = MPI_ERR_NO_MEM;
        goto fail;
    }
    MPI_Count soff = 0;
    for (int j = 0; j < nout; j++) {
        MPI_Count count;
        MPI_Aint disp;
        struct MPI_ABI_Datatype *t;
        side(c, 0, j, &count, &disp, &t);
        MPI_Count bytes = mpi_dtype_bytes(t, count);
        const void *src;
        if (t->contig) {
            src = mpi_dtype_data((const char *)c->sbuf + disp, t);
        } else {
            mpi_pack((const char *)c->sbuf + disp, count, t, (char *)c->ts + soff);
            src = (char *)c->ts + soff;
            soff += bytes;
        }
        if (out[j] == MPI_PROC_NULL) continue;
        /* on a grid my side j is the receiver's side j ^ 1 */
        unsigned tag = (seq << SLOT_BITS) | (unsigned)(cart ? j ^ 1 : 0);
        if ((wrc = weft_isend(src, bytes, WEFT_BYTE, out[j], (int)tag, cm->nbr_wc, &c->nreq[c->nn++]))) goto weft_fail;
    }
    free(out);
    c->next = 0;
    r->wr = c->nn ? c->nreq[c->next++] : NULL;
    if (!r->wr) r->complete = 1, r->error = MPI_SUCCESS;
    return MPI_SUCCESS;
weft_fail:
    c->nn--; /* the slot of the failed call holds nothing */
    free(in);
    free(out);
    return wrc;
fail:
    free(in);
    free(out);
    return rc;
}

/* One message ended: wait for the next; after the last, unpack. */
int mpi_nbr_step(mpi_req_t *r, int rc)
{
    struct mpi_coll *c = r->coll;
    if (rc && !r->error) r->error = mpi_class_of_weft(rc);
    c->nreq[c->next - 1] = NULL;
    if (c->next < c->nn) {
        r->wr = c->nreq[c->next++];
        return r->error;
    }
    if (c->tr && !r->error)
        for (int i = 0; i < c->nin; i++) {
            MPI_Count count;
            MPI_Aint disp;
            struct MPI_ABI_Datatype *t;
            side(c, 1, i, &count, &disp, &t);
            if (c->in[i] != MPI_PROC_NULL)
                mpi_unpack((char *)c->tr + c->roff[i], mpi_dtype_bytes(t, count), (char *)c->rbuf + disp, count, t);
        }
    free(c->ts), free(c->tr);
    c->ts = c->tr = NULL;
    return r->error;
}

/* ---- front ends ---------------------------------------------------------------------- */

static int degrees(MPI_Comm comm, const char *fn, struct MPI_ABI_Comm **c, int *nin, int *nout)
{
    int rc = mpi_check_comm(comm, fn, c);
    if (rc) return rc;
    mpi_topo_t *t = (*c)->topo;
    if (!t) return mpi_err(*c, MPI_ERR_TOPOLOGY, fn, "the communicator has no topology");
    if (t->kind == MPI_CART)
        *nin = *nout = 2 * t->ndims;
    else if (t->kind == MPI_GRAPH)
        *nin = *nout = t->index[(*c)->rank] - ((*c)->rank ? t->index[(*c)->rank - 1] : 0);
    else
        *nin = t->indegree, *nout = t->outdegree;
    return MPI_SUCCESS;
}

static MPI_Count *copy_array(const void *a, int large, int n, int aint)
{
    MPI_Count *r = mpi_malloc(sizeof(MPI_Count) * (size_t)(n > 0 ? n : 1));
    for (int i = 0; r && i < n; i++)
        r[i] = large || aint ? (aint ? (MPI_Count)((const MPI_Aint *)a)[i] : ((const MPI_Count *)a)[i])
                             : ((const int *)a)[i];
    return r;
}

/* kind, one side's count / counts / displacements / types each */
static int neighbor(int kind, const void *sbuf, MPI_Count scount, const void *scounts, const void *sdispls,
                    const MPI_Datatype *stypes, void *rbuf, MPI_Count rcount, const void *rcounts, const void *rdispls,
                    const MPI_Datatype *rtypes, MPI_Comm comm, int large, int form, MPI_Request *request,
                    const char *fn)
{
    struct MPI_ABI_Comm *c;
    int nin = 0, nout = 0, rc = degrees(comm, fn, &c, &nin, &nout);
    if (rc) return rc;
    if (form != BLOCK && !request) return mpi_err(c, MPI_ERR_ARG, fn, "NULL request");
    if (sbuf == MPI_IN_PLACE || rbuf == MPI_IN_PLACE)
        return mpi_err(c, MPI_ERR_BUFFER, fn, "MPI_IN_PLACE is not allowed in neighbourhood collectives");
    int w = kind == C_NALLTOALLW, sv = kind == C_NALLTOALLV || w, rv = kind != C_NALLGATHER && kind != C_NALLTOALL;
    struct mpi_coll d = {.kind = kind, .sbuf = sbuf, .rbuf = rbuf, .scount = scount, .rcount = rcount};
    if ((sv && nout > 0 && (!scounts || !sdispls)) || (rv && nin > 0 && (!rcounts || !rdispls)) ||
        (w && ((nout > 0 && !stypes) || (nin > 0 && !rtypes))))
        return mpi_err(c, MPI_ERR_ARG, fn, "NULL count, displacement or type array");
    if (sv) {
        d.scounts = copy_array(scounts, large, nout, 0);
        d.sdispls = copy_array(sdispls, large, nout, w || large);
    }
    if (rv) {
        d.rcounts = copy_array(rcounts, large, nin, 0);
        d.rdispls = copy_array(rdispls, large, nin, w || large);
    }
    if ((sv && (!d.scounts || !d.sdispls)) || (rv && (!d.rcounts || !d.rdispls))) {
        rc = mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
        goto fail;
    }
    for (int j = 0; sv && j < nout; j++)
        if (d.scounts[j] < 0) {
            rc = mpi_err(c, MPI_ERR_COUNT, fn, "negative count");
            goto fail;
        }
    for (int i = 0; rv && i < nin; i++)
        if (d.rcounts[i] < 0) {
            rc = mpi_err(c, MPI_ERR_COUNT, fn, "negative count");
            goto fail;
        }
    if (w) {
        int n = nin > nout ? nin : nout;
        d.stypes = calloc((size_t)n + 1, sizeof(*d.stypes));
        d.rtypes = calloc((size_t)n + 1, sizeof(*d.rtypes));
        if (!d.stypes || !d.rtypes) {
            rc = mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
            goto fail;
        }
        for (int j = 0; j < nout; j++)
            if ((rc = mpi_check_dtype(c, stypes[j], fn, &d.stypes[j]))) goto fail;
        for (int i = 0; i < nin; i++)
            if ((rc = mpi_check_dtype(c, rtypes[i], fn, &d.rtypes[i]))) goto fail;
        for (int k = 0; k < n; k++) {
            if (!d.stypes[k]) d.stypes[k] = mpi_dtype_get(MPI_BYTE);
            if (!d.rtypes[k]) d.rtypes[k] = mpi_dtype_get(MPI_BYTE);
            mpi_dtype_ref(d.stypes[k]);
            mpi_dtype_ref(d.rtypes[k]);
        }
        d.ntypes = n;
    } else {
        if ((rc = mpi_check_dtype(c, *stypes, fn, &d.stype)) || (rc = mpi_check_dtype(c, *rtypes, fn, &d.rtype)) ||
            (!sv && (rc = mpi_check_count(c, scount, fn))) || (!rv && (rc = mpi_check_count(c, rcount, fn))))
            goto fail;
    }
    return mpi_coll_run(c, &d, form, request, fn);
fail:
    free(d.scounts), free(d.sdispls), free(d.rcounts), free(d.rdispls), free(d.stypes), free(d.rtypes);
    return rc;
}

/* The five collectives in their six forms each. */
#define NBR_FORMS(Name, IName, kind, P, CALL)                                                                          \
    MPI_DEF(int, Name, P(int, int, ))                                                                                  \
    {                                                                                                                  \
        return CALL, 0, BLOCK, NULL, "MPI_" #Name);                                                                    \
    }                                                                                                                  \
    MPI_DEF(int, Name##_c, P(MPI_Count, MPI_Aint, ))                                                                   \
    {                                                                                                                  \
        return CALL, 1, BLOCK, NULL, "MPI_" #Name "_c");                                                               \
    }                                                                                                                  \
    MPI_DEF(int, IName, P(int, int, , MPI_Request *request))                                                           \
    {                                                                                                                  \
        return CALL, 0, NONBLOCK, request, "MPI_" #IName);                                                             \
    }                                                                                                                  \
    MPI_DEF(int, IName##_c, P(MPI_Count, MPI_Aint, , MPI_Request *request))                                            \
    {                                                                                                                  \
        return CALL, 1, NONBLOCK, request, "MPI_" #IName "_c");                                                        \
    }                                                                                                                  \
    MPI_DEF(int, Name##_init, P(int, int, , MPI_Info info, MPI_Request *request))                                      \
    {                                                                                                                  \
        const char *fn = "MPI_" #Name "_init";                                                                         \
        int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);                                                   \
        return rc ? rc : CALL, 0, PERSIST, request, fn);                                                               \
    }                                                                                                                  \
    MPI_DEF(int, Name##_init_c, P(MPI_Count, MPI_Aint, , MPI_Info info, MPI_Request *request))                         \
    {                                                                                                                  \
        const char *fn = "MPI_" #Name "_init_c";                                                                       \
        int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);                                                   \
        return rc ? rc : CALL, 1, PERSIST, request, fn);                                                               \
    }

#define ALLGATHER_P(CT, DT, ...)                                                                                       \
    (const void *sendbuf, CT sendcount, MPI_Datatype sendtype, void *recvbuf, CT recvcount, MPI_Datatype recvtype,     \
     MPI_Comm comm __VA_ARGS__)
#define ALLGATHER_CALL                                                                                                 \
    neighbor(C_NALLGATHER, sendbuf, sendcount, NULL, NULL, &sendtype, recvbuf, recvcount, NULL, NULL, &recvtype, comm
NBR_FORMS(Neighbor_allgather, Ineighbor_allgather, C_NALLGATHER, ALLGATHER_P, ALLGATHER_CALL)

#define ALLGATHERV_P(CT, DT, ...)                                                                                      \
    (const void *sendbuf, CT sendcount, MPI_Datatype sendtype, void *recvbuf, const CT recvcounts[],                   \
     const DT displs[], MPI_Datatype recvtype, MPI_Comm comm __VA_ARGS__)
#define ALLGATHERV_CALL                                                                                                \
    neighbor(C_NALLGATHERV, sendbuf, sendcount, NULL, NULL, &sendtype, recvbuf, 0, recvcounts, displs, &recvtype,    \
             comm
NBR_FORMS(Neighbor_allgatherv, Ineighbor_allgatherv, C_NALLGATHERV, ALLGATHERV_P, ALLGATHERV_CALL)

#define ALLTOALL_P ALLGATHER_P
#define ALLTOALL_CALL                                                                                                  \
    neighbor(C_NALLTOALL, sendbuf, sendcount, NULL, NULL, &sendtype, recvbuf, recvcount, NULL, NULL, &recvtype, comm
NBR_FORMS(Neighbor_alltoall, Ineighbor_alltoall, C_NALLTOALL, ALLTOALL_P, ALLTOALL_CALL)

#define ALLTOALLV_P(CT, DT, ...)                                                                                       \
    (const void *sendbuf, const CT sendcounts[], const DT sdispls[], MPI_Datatype sendtype, void *recvbuf,             \
     const CT recvcounts[], const DT rdispls[], MPI_Datatype recvtype, MPI_Comm comm __VA_ARGS__)
#define ALLTOALLV_CALL                                                                                                 \
    neighbor(C_NALLTOALLV, sendbuf, 0, sendcounts, sdispls, &sendtype, recvbuf, 0, recvcounts, rdispls, &recvtype,   \
             comm
NBR_FORMS(Neighbor_alltoallv, Ineighbor_alltoallv, C_NALLTOALLV, ALLTOALLV_P, ALLTOALLV_CALL)

/* alltoallw's displacements are MPI_Aint in both forms */
#define ALLTOALLW_P(CT, DT, ...)                                                                                       \
    (const void *sendbuf, const CT sendcounts[], const MPI_Aint sdispls[], const MPI_Datatype sendtypes[],             \
     void *recvbuf, const CT recvcounts[], const MPI_Aint rdispls[], const MPI_Datatype recvtypes[],                   \
     MPI_Comm comm __VA_ARGS__)
#define ALLTOALLW_CALL                                                                                                 \
    neighbor(C_NALLTOALLW, sendbuf, 0, sendcounts, sdispls, sendtypes, recvbuf, 0, recvcounts, rdispls, recvtypes,   \
             comm
NBR_FORMS(Neighbor_alltoallw, Ineighbor_alltoallw, C_NALLTOALLW, ALLTOALLW_P, ALLTOALLW_CALL)
