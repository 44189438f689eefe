/* The state allgather_shm.c and allgather_shm_cma.c share, built alike:
 * every member's block resolved at post time. */
#ifndef WEFT_COLL_SHM_ALLGATHER_H
#define WEFT_COLL_SHM_ALLGATHER_H

#include "coll/shm/segment.h"

typedef struct weft_shm_allgather {
    weft_shm_op_t op;
    const void *send;
    size_t bytes;
    uint64_t sig; /* the call's (weft_shm_sig of the block) */
    int rc;       /* the first failure (a signature mismatch, a failed read) */
    char **dst; /* where rank r's block goes */
} weft_shm_allgather_t;

/* The state of a's allgather on the segment `sh` the algorithm got (NULL:
 * it declines), polled by `step`. */
static inline int weft_shm_allgather_build(weft_sched_t *s, const weft_coll_args_t *a, weft_shm_t *sh,
                                           weft_sched_poll_fn step, const char *alg)
{
    if (!sh) return WEFT_ERR_UNSUPPORTED;
    weft_shm_allgather_t *g = weft_shm_op_alloc(s, sh, sizeof(*g), sizeof(char *) * (size_t)sh->n, alg);
    if (!g) return WEFT_ERR_NO_MEMORY;
    g->send = a->sendbuf;
    g->bytes = a->count * a->esize;
    g->sig = weft_shm_sig(a, g->bytes);
    g->dst = weft_shm_op_extra(g, sizeof(*g));
    for (int r = 0; r < sh->n; r++)
        g->dst[r] = weft_coll_rblock(a, r);
    return weft_sched_poll(s, step, g);
}

#endif
