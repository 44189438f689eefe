/* Shared pieces of the hierarchical algorithms (coll/hier/): the shape
 * check every one of them starts with, and child steps that run a
 * collective on a derived sub-communicator (node, leader, rail) as one
 * step of the parent's schedule, through the normal front end and
 * selection on that sub-communicator. */
#ifndef WEFT_COLL_HIER_H
#define WEFT_COLL_HIER_H

#include "coll/coll.h"

/* The topology of a->comm when a hierarchical algorithm is worth running:
 * declines (WEFT_ERR_UNSUPPORTED, so the next candidate runs) on a single
 * node (the node-local path is the right one), with one rank per node (the
 * composition would be the flat algorithm plus overhead), on a derived
 * comm, and when need_equal and the nodes hold different numbers of ranks. */
int weft_hier_shape(const weft_coll_args_t *a, int need_equal, const char *alg, const weft_comm_topo_t **out);

/* A collective on a sub-communicator, posted when its round starts. */
typedef struct weft_hier_child {
    weft_coll_kind_t kind; /* barrier, bcast, reduce, allreduce, reduce_scatter(_block), allgather(v) */
    int sub;               /* WEFT_SUB_NODE / _LEADER / _RAIL */
    int idx;               /* 0..15, distinct per child of one parent schedule */
    const void *sendbuf;   /* WEFT_IN_PLACE allowed where the call allows it */
    void *recvbuf;         /* bcast: the buffer */
    size_t count;          /* reduce_scatter_block, allgather: per rank */
    weft_dtype_t dtype;
    weft_op_t op;
    int root;
    const int64_t *rcounts, *displs; /* reduce_scatter, allgatherv */
} weft_hier_child_t;

/* Adds the child to the current round (a copy is kept in the schedule's
 * scratch). This rank must be a member of the sub-communicator. */
int weft_hier_child(weft_sched_t *s, const weft_hier_child_t *c);

/* Alltoall(v) in node order (alltoall_hier.c): the exchanges inside the
 * node first, then one round per distance k = 1..nnodes-1 in which every
 * rank sends to the ranks of node (node + k) and receives from node
 * (node - k): each node talks to one other node at a time, and no node is
 * the target of two at once. a->scounts set: the v form. */
int weft_hier_alltoall_build(weft_sched_t *s, const weft_coll_args_t *a, const char *alg);

/* The op the sub-steps use: AVG sums, and the algorithm divides once at
 * the end by the parent's size. */
static inline weft_op_t weft_hier_sub_op(weft_op_t op)
{
    return op == WEFT_AVG ? WEFT_SUM : op;
}

#endif
