/* The description of one collective call (coll.c), shared with the
 * neighbourhood collectives (neighbor.c): its arguments, and the state of
 * one run of it. */
#ifndef WEFT_MPI_COLL_H
#define WEFT_MPI_COLL_H

#include "mpi/mpi_impl.h"

enum coll_kind {
    C_BARRIER,
    C_BCAST,
    C_GATHER,
    C_GATHERV,
    C_SCATTER,
    C_SCATTERV,
    C_ALLGATHER,
    C_ALLGATHERV,
    C_ALLTOALL,
    C_ALLTOALLV,
    C_ALLTOALLW,
    C_REDUCE,
    C_ALLREDUCE,
    C_RSB,
    C_RS,
    C_SCAN,
    C_EXSCAN,
    /* neighbourhood collectives (neighbor.c) */
    C_NALLGATHER,
    C_NALLGATHERV,
    C_NALLTOALL,
    C_NALLTOALLV,
    C_NALLTOALLW
};

struct mpi_coll {
    int kind;
    const void *sbuf;
    void *rbuf;
    MPI_Count scount, rcount;
    struct MPI_ABI_Datatype *stype, *rtype;
    MPI_Count *scounts, *sdispls, *rcounts, *rdispls;
    struct MPI_ABI_Datatype **stypes, **rtypes; /* alltoallw: ntypes each, referenced */
    int ntypes;
    struct MPI_ABI_Op *op;
    int root;
    /* state of one run */
    void *ts, *tr;
    int64_t *wc1, *wd1, *wc2, *wd2;
    MPI_Count block; /* packed bytes of one contribution (reductions), or of one block */
    int fallback;    /* reduction computed here */
    /* neighbourhood collectives: the messages in flight, waited for in turn */
    weft_request_t *nreq;
    int nn, next;
    int nin, *in;  /* in-neighbours (MPI_PROC_NULL for none) */
    int64_t *roff; /* where each in-neighbour's data goes in tr (packed receives) */
};

enum { BLOCK, NONBLOCK, PERSIST };
/* Runs a described collective in one of the three forms (takes over the
 * arrays it points to). */
int mpi_coll_run(struct MPI_ABI_Comm *cm, struct mpi_coll *c, int form, MPI_Request *request, const char *fn);
int mpi_nbr_post(mpi_req_t *r);
int mpi_nbr_step(mpi_req_t *r, int rc);
void mpi_nbr_reset(struct mpi_coll *c);

#endif
