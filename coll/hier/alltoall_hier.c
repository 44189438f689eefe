/* Node-aware alltoall: exchanges inside the node first (cheap, and they
 * overlap the first inter-node round's set-up), then the inter-node ones
 * ordered by node distance, so at every round each node sends to exactly
 * one other node and receives from exactly one: no incast on a node's
 * links, any ranks per node. Pure point-to-point on the parent comm (a
 * leader-aggregated variant would add two copies for fewer, larger
 * messages: left until measurements ask for it). */
#include "coll/hier/hier.h"

static void block_of(const weft_coll_args_t *a, int p, int send, size_t *off, size_t *bytes)
{
    if (a->scounts) {
        const int64_t *cnt = send ? a->scounts : a->rcounts, *dsp = send ? a->sdispls : a->rdispls;
        *off = (size_t)dsp[p] * a->esize;
        *bytes = (size_t)cnt[p] * a->esize;
    } else {
        *bytes = a->count * a->esize;
        *off = (size_t)p * *bytes;
    }
}

int weft_hier_alltoall_build(weft_sched_t *s, const weft_coll_args_t *a, const char *alg)
{
    const weft_comm_topo_t *t;
    int rc = weft_hier_shape(a, 0, alg, &t);
    if (rc) return rc;
    int n = a->comm->size, me = a->comm->rank, N = t->nnodes;
    const char *send = a->scounts ? a->sendbuf : weft_coll_send_source(s, a, (size_t)n * a->count * a->esize, alg);
    if (!send) return WEFT_ERR_NO_MEMORY;
    char *recv = a->recvbuf;
    size_t so, sb, ro, rb;
    for (int k = 0; k < N && !rc; k++) {
        int to = (t->my_node + k) % N, from = (t->my_node - k + N) % N;
        for (int p = 0; p < n && !rc; p++) {
            if (p == me) continue;
            if (t->node_of[p] == from) {
                block_of(a, p, 0, &ro, &rb);
                rc = weft_sched_recv(s, recv + ro, rb, p);
            }
            if (!rc && t->node_of[p] == to) {
                block_of(a, p, 1, &so, &sb);
                rc = weft_sched_send(s, send + so, sb, p);
            }
        }
        if (!rc && k == 0) {
            block_of(a, me, 1, &so, &sb);
            block_of(a, me, 0, &ro, &rb);
            rc = weft_sched_copy(s, recv + ro, send + so, sb < rb ? sb : rb);
        }
        if (!rc) rc = weft_sched_end_round(s);
    }
    return rc;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    return weft_hier_alltoall_build(s, a, "alltoall hier");
}

const weft_coll_alg_t weft_alg_alltoall_hier = {
    .name = "hier",
    .kind = WEFT_COLL_ALLTOALL,
    .description = "intra-node exchanges, then inter-node ones one node distance per round (multi-node)",
    .build = build,
};
