/* Hierarchical allgather: one ring per rail (the ranks of local index l on
 * every node) moves blocks across nodes while, in the same rounds, every
 * rank hands the block it received in the previous round to the other
 * ranks of its node. Round k: the ring passes on the block from node
 * (node - k) and receives the one from node (node - k - 1); the node
 * exchanges the blocks from node (node - k). Every message lands straight
 * in its final place in the output (contiguous or list form): no staging
 * copy, and the result is bit-identical to the flat algorithms'. Each rank
 * sends N - 1 blocks across nodes (the minimum) and the L rails use the
 * links at once. Needs equal ranks per node (declines otherwise).
 * Device buffers take the same schedule, its messages through UCX's CUDA
 * transports (or weft's staged path) and its one local copy through the
 * driver: the node exchange (CUDA IPC inside the node) and the rail ring
 * run at the same time, straight into the output. */
#include "coll/hier/hier.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    const weft_comm_topo_t *t;
    int rc = weft_hier_shape(a, 1, "allgather hier", &t);
    if (rc) return rc;
    if (a->mem != WEFT_MEM_HOST) weft_sched_device(s);
    int n = a->comm->size, N = t->nnodes, L = n / N, m = t->my_node, l = t->my_local;
    size_t bytes = a->count * a->esize;
    int *at = weft_sched_scratch(s, sizeof(int) * (size_t)n); /* at[node * L + local] = comm rank */
    if (!at) return weft_error(WEFT_ERR_NO_MEMORY, "allgather hier: out of memory");
    for (int r = 0; r < n; r++)
        at[t->node_of[r] * L + t->local_of[r]] = r;
    int right = at[((m + 1) % N) * L + l], left = at[((m - 1 + N) % N) * L + l];
    for (int k = 0; k < N && !rc; k++) {
        int have = (m - k + N) % N, next = (m - k - 1 + N) % N; /* nodes whose rail-l blocks move now */
        const char *mine = k == 0 ? (const char *)a->sendbuf : weft_coll_rblock(a, at[have * L + l]);
        if (k < N - 1) {
            rc = weft_sched_recv(s, weft_coll_rblock(a, at[next * L + l]), bytes, left);
            if (!rc) rc = weft_sched_send(s, mine, bytes, right);
        }
        for (int q = 0; q < L && !rc; q++) {
            if (q == l) continue;
            rc = weft_sched_recv(s, weft_coll_rblock(a, at[have * L + q]), bytes, at[m * L + q]);
            if (!rc) rc = weft_sched_send(s, mine, bytes, at[m * L + q]);
        }
        if (!rc && k == 0) rc = weft_sched_copy(s, weft_coll_rblock(a, a->comm->rank), a->sendbuf, bytes);
        if (!rc) rc = weft_sched_end_round(s);
    }
    return rc;
}

const weft_coll_alg_t weft_alg_allgather_hier = {
    .name = "hier",
    .kind = WEFT_COLL_ALLGATHER,
    .description = "a ring per rail across nodes overlapped with the node exchange, straight into the output "
                   "(multi-node, equal ranks per node; host or device buffers)",
    .build = build,
};
