/* coll/hier: compositions over a communicator's derived node, leader and
 * rail sub-communicators (see hier.h); its descriptor, shape checks and
 * child steps. Its state lives on the sub-communicators: the order in
 * which children of different parent calls start there. */
#include "coll/hier/hier.h"

#include <stdlib.h>
#include <string.h>

extern const weft_coll_alg_t weft_alg_barrier_hier, weft_alg_bcast_hier, weft_alg_reduce_hier, weft_alg_allreduce_hier,
    weft_alg_allreduce_hier_rail, weft_alg_allgather_hier, weft_alg_alltoall_hier, weft_alg_alltoallv_hier;

static const weft_coll_alg_t *const algorithms[] = {
    &weft_alg_barrier_hier,   &weft_alg_bcast_hier,          &weft_alg_reduce_hier,
    &weft_alg_allreduce_hier, &weft_alg_allreduce_hier_rail, &weft_alg_allgather_hier,
    &weft_alg_alltoall_hier,  &weft_alg_alltoallv_hier,      NULL,
};

/* On a sub-communicator: child collectives start in ticket order. Tickets
 * are taken when parent schedules start (the user's order), so every
 * member starts them in the same order. Broken once a parent gave up a
 * ticket unposted: later children fail at once. */
typedef struct {
    unsigned tickets, turn;
    int broken;
} hier_sub_t;

static void hier_release(weft_comm_t comm, void *state)
{
    (void)comm;
    free(state);
}

const weft_coll_component_t weft_coll_hier = {
    .id = WEFT_COLL_COMP_HIER,
    .name = "hier",
    .description = "several nodes: steps on the node, leader and rail sub-communicators (each runs its own selection)",
    .memtypes = WEFT_MEM_BIT(WEFT_MEM_HOST) | WEFT_MEM_BIT(WEFT_MEM_CUDA), /* cuda: allgather, allreduce, barrier */
    .algorithms = algorithms,
    .comm_release = hier_release,
};

int weft_hier_shape(const weft_coll_args_t *a, int need_equal, const char *alg, const weft_comm_topo_t **out)
{
    weft_comm_t c = a->comm;
    /* Device buffers: the allgather moves them itself (device-aware messages
     * and copies); allreduce's and barrier's steps are children, each of which
     * selects for its own communicator (the node's: coll/cuda's kernels; the
     * leaders' or a rail's: coll/cuda's staged algorithms). The others go to
     * coll/cuda's staged algorithms on the whole communicator. */
    if (a->mem != WEFT_MEM_HOST && a->kind != WEFT_COLL_ALLGATHER && a->kind != WEFT_COLL_ALLREDUCE &&
        a->kind != WEFT_COLL_BARRIER)
        return weft_coll_decline("%s: device buffers (coll/hier takes them in allgather, allreduce, barrier)", alg);
    /* The division of an average runs on the host. */
    if (a->mem != WEFT_MEM_HOST && a->kind == WEFT_COLL_ALLREDUCE && a->op == WEFT_AVG)
        return weft_coll_decline("%s: an average on device buffers (coll/cuda's staged algorithm takes it)", alg);
    if (c->sub_ctx[WEFT_SUB_NODE] == WEFT_SUB_NONE)
        return weft_coll_decline("%s: comm %s is itself derived", alg, c->name);
    if (c->nnodes <= 1) return weft_coll_decline("%s: comm %s is on one node", alg, c->name);
    if (c->nnodes == c->size) return weft_coll_decline("%s: comm %s has one rank per node", alg, c->name);
    const weft_comm_topo_t *t = weft_comm_topo(c);
    if (!t) return WEFT_ERR_NO_MEMORY;
    if (need_equal && !t->equal)
        return weft_coll_decline("%s: the nodes of comm %s hold different numbers of ranks", alg, c->name);
    *out = t;
    return WEFT_SUCCESS;
}

typedef struct {
    weft_hier_child_t c;
    weft_comm_t comm;
    unsigned ticket; /* this child's turn on comm */
} child_t;

/* At the parent's start: the child's turn among all children on its
 * sub-communicator (see weft_sched_child). */
static int child_reserve(weft_sched_t *s, void *arg)
{
    (void)s;
    child_t *ch = arg;
    hier_sub_t *h = weft_coll_state(ch->comm, WEFT_COLL_COMP_HIER);
    if (!h) {
        if (!(h = calloc(1, sizeof(*h))))
            return weft_error(WEFT_ERR_NO_MEMORY, "hier: out of memory for the state of %s", ch->comm->name);
        int rc = weft_coll_state_set(ch->comm, WEFT_COLL_COMP_HIER, h);
        if (rc) {
            free(h);
            return rc;
        }
    }
    ch->ticket = h->tickets++;
    return WEFT_SUCCESS;
}

static int child_post(weft_sched_t *s, void *arg, weft_request_t *req)
{
    child_t *ch = arg;
    const weft_hier_child_t *c = &ch->c;
    weft_comm_t sub = ch->comm;
    hier_sub_t *h = weft_coll_state(sub, WEFT_COLL_COMP_HIER);
    int64_t n = (int64_t)c->count;
    if (!h) return req ? weft_error(WEFT_ERR_INTERNAL, "hier: %s has no turn (its reservation failed)", sub->name) : 0;
    if (!req) { /* the parent ends without posting this child */
        h->broken = 1;
        return WEFT_SUCCESS;
    }
    if (h->broken)
        return weft_error(WEFT_ERR_CANCELED, "hier: an earlier collective gave up its step on %s", sub->name);
    if (h->turn != ch->ticket) return WEFT_SCHED_AGAIN; /* an earlier parent's child goes first */
    h->turn++;
    /* The sub-communicator's sequence number comes from the parent's, not
     * from the order schedules happen to reach this step: concurrent parent
     * collectives progress differently on different ranks. */
    sub->coll_seq = (weft_sched_seq(s) << 4) + (unsigned)c->idx;
    switch (c->kind) {
    case WEFT_COLL_BARRIER: return weft_ibarrier(sub, req);
    case WEFT_COLL_BCAST: return weft_ibcast(c->recvbuf, n, c->dtype, c->root, sub, req);
    case WEFT_COLL_REDUCE: return weft_ireduce(c->sendbuf, c->recvbuf, n, c->dtype, c->op, c->root, sub, req);
    case WEFT_COLL_ALLREDUCE: return weft_iallreduce(c->sendbuf, c->recvbuf, n, c->dtype, c->op, sub, req);
    case WEFT_COLL_REDUCE_SCATTER:
        return weft_ireduce_scatter(c->sendbuf, c->recvbuf, c->rcounts, c->dtype, c->op, sub, req);
    case WEFT_COLL_REDUCE_SCATTER_BLOCK:
        return weft_ireduce_scatter_block(c->sendbuf, c->recvbuf, n, c->dtype, c->op, sub, req);
    case WEFT_COLL_ALLGATHER: return weft_iallgather(c->sendbuf, c->recvbuf, n, c->dtype, sub, req);
    case WEFT_COLL_ALLGATHERV:
        return weft_iallgatherv(c->sendbuf, n, c->recvbuf, c->rcounts, c->displs, c->dtype, sub, req);
    default: return weft_error(WEFT_ERR_INTERNAL, "hier: no child step for %s", weft_coll_kind_name(c->kind));
    }
}

int weft_hier_child(weft_sched_t *s, const weft_hier_child_t *c)
{
    weft_comm_t parent, sub;
    weft_sched_comm(s, &parent);
    if (c->idx < 0 || c->idx > 15) return weft_error(WEFT_ERR_INTERNAL, "hier: child step index %d (0..15)", c->idx);
    int rc = weft_comm_derived(parent, c->sub, &sub);
    if (rc) return rc;
    if (!sub)
        return weft_error(WEFT_ERR_INTERNAL, "hier: rank %d is not in the leader comm of %s", parent->rank,
                          parent->name);
    child_t *ch = weft_sched_scratch(s, sizeof(*ch));
    if (!ch) return weft_error(WEFT_ERR_NO_MEMORY, "hier: out of memory for a child step");
    ch->c = *c;
    ch->comm = sub;
    return weft_sched_child(s, child_post, child_reserve, ch);
}
