/* alltoall, Bruck et al.: rotate the send blocks so that index i holds the
 * block for rank + i; in round k (k = 1, 2, 4, ...) send every block whose
 * index has bit k set to rank + k, packed into one message, and receive as
 * many from rank - k into the same indices; after ceil(log2 n) rounds index
 * i holds the block from rank - i, and an inverse rotation puts the blocks
 * in rank order. Each block travels up to log2 n times, but there are only
 * ceil(log2 n) messages: small messages. Extra memory: n blocks of scratch
 * (the rotated blocks); the output buffer, not needed until the end, holds
 * the packed messages (at most n / 2 blocks each way). The in-place form
 * rotates straight out of the output buffer before anything is packed. */
#include "coll/coll.h"

/* Copies the blocks whose index has bit k set between tmp and the packed buffer. */
static int pack(weft_sched_t *s, char *tmp, char *packed, int n, int k, size_t block, int unpack)
{
    int rc;
    size_t j = 0;
    for (int i = k; i < n; i++)
        if (i & k) {
            char *t = tmp + (size_t)i * block, *p = packed + j++ * block;
            if ((rc = unpack ? weft_sched_copy(s, t, p, block) : weft_sched_copy(s, p, t, block))) return rc;
        }
    return WEFT_SUCCESS;
}

static size_t with_bit(int n, int k)
{
    size_t m = 0;
    for (int i = k; i < n; i++)
        m += (i & k) != 0;
    return m;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    int n = a->comm->size, r = a->comm->rank, rc;
    size_t block = a->count * a->esize;
    char *recv = a->recvbuf;
    const char *send = a->sendbuf == WEFT_IN_PLACE ? recv : a->sendbuf;
    if (block == 0) return WEFT_SUCCESS;
    if (n == 1) {
        if ((rc = weft_sched_copy(s, recv, send, block))) return rc;
        return weft_sched_end_round(s);
    }
    char *tmp = weft_sched_scratch(s, (size_t)n * block);
    if (!tmp) return weft_error(WEFT_ERR_NO_MEMORY, "alltoall_bruck: out of memory for %d x %zu bytes", n, block);
    /* Packed messages live in the output: outgoing at the front, incoming after n / 2 blocks. */
    char *out = recv, *in = recv + (size_t)(n / 2) * block;
    for (int i = 0; i < n; i++)
        if ((rc = weft_sched_copy(s, tmp + (size_t)i * block, send + (size_t)((r + i) % n) * block, block))) return rc;
    if ((rc = pack(s, tmp, out, n, 1, block, 0)) || (rc = weft_sched_end_round(s))) return rc;
    for (int k = 1; k < n; k <<= 1) {
        size_t bytes = with_bit(n, k) * block;
        if ((rc = weft_sched_recv(s, in, bytes, weft_mod(r - k, n))) ||
            (rc = weft_sched_send(s, out, bytes, (r + k) % n)) || (rc = pack(s, tmp, in, n, k, block, 1)))
            return rc;
        if (2 * k < n) {
            if ((rc = pack(s, tmp, out, n, 2 * k, block, 0))) return rc;
        } else {
            /* Index i holds the block from rank - i. */
            for (int i = 0; i < n; i++)
                if ((rc =
                         weft_sched_copy(s, recv + (size_t)weft_mod(r - i, n) * block, tmp + (size_t)i * block, block)))
                    return rc;
        }
        if ((rc = weft_sched_end_round(s))) return rc;
    }
    return WEFT_SUCCESS;
}

const weft_coll_alg_t weft_alg_alltoall_bruck = {
    .name = "bruck",
    .kind = WEFT_COLL_ALLTOALL,
    .description = "Bruck's algorithm, ceil(log2 n) rounds of packed messages, n blocks of scratch; small messages",
    .build = build,
};
