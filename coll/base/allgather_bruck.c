/* allgather, Bruck et al.: in round k every rank sends the blocks it has
 * gathered so far (at most k) to rank - k and receives as many from
 * rank + k, so ceil(log2 n) rounds suffice for any n; a final rotation puts
 * the blocks in rank order. Extra memory: n * block bytes of scratch. */
#include "coll/coll.h"

int weft_coll_allgather_bruck_build(weft_sched_t *s, const void *send, void *recv, size_t block)
{
    weft_comm_t comm = NULL;
    int n, rank, rc;
    weft_sched_comm(s, &comm);
    n = comm->size;
    rank = comm->rank;
    if (n == 1) return weft_sched_copy(s, recv, send, block);
    char *tmp = weft_sched_scratch(s, (size_t)n * block);
    if (!tmp) return weft_error(WEFT_ERR_NO_MEMORY, "allgather_bruck: out of memory for %d x %zu bytes", n, block);
    if ((rc = weft_sched_copy(s, tmp, send, block)) || (rc = weft_sched_end_round(s))) return rc;
    for (int k = 1; k < n; k <<= 1) {
        int count = k < n - k ? k : n - k;
        if ((rc = weft_sched_recv(s, tmp + (size_t)k * block, (size_t)count * block, (rank + k) % n)) ||
            (rc = weft_sched_send(s, tmp, (size_t)count * block, (rank - k + n) % n)) || (rc = weft_sched_end_round(s)))
            return rc;
    }
    /* tmp[i] holds rank (rank + i) % n's block. */
    for (int i = 0; i < n; i++)
        if ((rc = weft_sched_copy(s, (char *)recv + (size_t)((rank + i) % n) * block, tmp + (size_t)i * block, block)))
            return rc;
    return weft_sched_end_round(s);
}
