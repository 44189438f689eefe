/* allgather, Bruck et al.: in round k every rank sends the blocks it has
 * gathered so far (at most k) to rank - k and receives as many from
 * rank + k, so ceil(log2 n) rounds suffice for any n; a final rotation puts
 * the blocks in rank order. Extra memory: n blocks of scratch. Few rounds:
 * small messages. */
#include "coll/coll.h"

/* Shared with the runtime (communicator creation): contiguous blocks. */
static int bruck(weft_sched_t *s, weft_comm_t comm, const void *send, size_t block, char *recv, void *const *recvbufs)
{
    int n = comm->size, rank = comm->rank, rc;
    char *tmp = weft_sched_scratch(s, (size_t)n * block);
    if (!tmp) return weft_error(WEFT_ERR_NO_MEMORY, "allgather_bruck: out of memory for %d x %zu bytes", n, block);
    if ((rc = weft_sched_copy(s, tmp, send, block)) || (rc = weft_sched_end_round(s))) return rc;
    for (int k = 1; k < n; k <<= 1) {
        int count = k < n - k ? k : n - k;
        if ((rc = weft_sched_recv(s, tmp + (size_t)k * block, (size_t)count * block, (rank + k) % n)) ||
            (rc = weft_sched_send(s, tmp, (size_t)count * block, weft_mod(rank - k, n))) ||
            (rc = weft_sched_end_round(s)))
            return rc;
    }
    /* tmp[i] holds rank (rank + i) % n's block. */
    for (int i = 0; i < n; i++) {
        int owner = (rank + i) % n;
        char *dst = recvbufs ? (char *)recvbufs[owner] : recv + (size_t)owner * block;
        if ((rc = weft_sched_copy(s, dst, tmp + (size_t)i * block, block))) return rc;
    }
    return weft_sched_end_round(s);
}

int weft_coll_allgather_bruck_build(weft_sched_t *s, const void *send, void *recv, size_t block)
{
    weft_comm_t comm;
    weft_sched_comm(s, &comm);
    return bruck(s, comm, send, block, recv, NULL);
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    return bruck(s, a->comm, a->sendbuf, a->count * a->esize, a->recvbuf, a->recvbufs);
}

const weft_coll_alg_t weft_alg_allgather_bruck = {
    .name = "bruck",
    .kind = WEFT_COLL_ALLGATHER,
    .description = "Bruck's algorithm, ceil(log2 n) rounds, n blocks of scratch; small messages",
    .build = build,
};
