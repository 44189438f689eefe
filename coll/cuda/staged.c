/* coll/cuda's staged algorithms: a collective on device buffers that no GPU
 * kernel takes (a communicator spanning nodes with one rank per node, such
 * as the leader and rail communicators of the hierarchical algorithms; more
 * ranks than coll/cuda's kernels take; an op or type they lack) runs on the
 * host. Its schedule copies the device input into host memory (a round of
 * its own, so nothing is sent before the copy is done), runs in the same
 * schedule the host algorithm the selection picks for host buffers of the
 * same call, then copies the result back. Cost beside the host collective:
 * one copy of the input and one of the output over the GPU's host link,
 * into and out of pinned host memory that a pool keeps for the next call
 * (src/cuda/runtime.h; pageable where none can be had).
 * A stream-ordered call runs here only where nobody drives it while the
 * caller goes on (the call then returns at its end, coll.c's gate); with
 * the progress thread the front end stages it on its stream itself. */
#include "coll/coll.h"
#include "pt2pt/cuda.h"

/* The result's copy back to the device, added after the host collective
 * (and after its fallback, where it has one: weft_coll_build_selected). */
typedef struct {
    const weft_coll_args_t *a;
    char *hout;
    size_t out, block;
} copy_out_t;

static int copy_out(weft_sched_t *s, void *arg)
{
    const copy_out_t *co = arg;
    const weft_coll_args_t *a = co->a;
    int rc = WEFT_SUCCESS;
    if (a->kind == WEFT_COLL_ALLGATHER && a->recvbufs) { /* the list form: a copy per block */
        for (int r = 0; r < a->comm->size && !rc; r++)
            rc = weft_sched_copy(s, a->recvbufs[r], co->hout + (size_t)r * co->block, co->block);
        return rc;
    }
    return co->out ? weft_sched_copy(s, a->recvbuf, co->hout, co->out) : WEFT_SUCCESS;
}

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    const char *name = weft_coll_kind_name(a->kind);
    if (a->mem == WEFT_MEM_HOST) return weft_coll_decline("%s staged: host buffers", name);
    weft_coll_stage_t x;
    if (weft_coll_stage_extents(a, &x))
        return weft_coll_decline("%s staged: not staged (coll/cuda stages the collectives it has kernels for)", name);
    /* Host copies, in pinned memory kept for reuse. */
    char *hin, *hout;
    int rc = weft_coll_stage_pinned(s, a, &x, &hin, &hout, "staged");
    if (rc) return rc;
    weft_sched_device(s); /* its copies go through the driver */
    if (x.in && (rc = weft_sched_copy(s, hin, x.src, x.in))) return rc;
    if ((rc = weft_sched_end_round(s))) return rc;
    weft_coll_args_t h;
    weft_coll_stage_host_args(a, hin, hout, &h);
    copy_out_t co = {a, hout, x.out, x.block};
    if ((rc = weft_coll_build_selected(s, &h, copy_out, &co)) == WEFT_ERR_UNSUPPORTED)
        return weft_error(WEFT_ERR_INTERNAL, "%s staged: no host algorithm takes the host copies' call", name);
    return rc;
}

#define STAGED_ALG(kind_, fn_)                                                                                         \
    const weft_coll_alg_t weft_alg_##fn_##_staged = {                                                                  \
        "staged", kind_,                                                                                               \
        "device buffers through host copies: the input copied to pinned host memory (a pool kept for reuse), the "     \
        "host algorithm the selection picks, the result copied back (any communicator; where no GPU kernel takes "     \
        "the call)",                                                                                                   \
        build, 0};

STAGED_ALG(WEFT_COLL_BARRIER, barrier)
STAGED_ALG(WEFT_COLL_BCAST, bcast)
STAGED_ALG(WEFT_COLL_REDUCE, reduce)
STAGED_ALG(WEFT_COLL_ALLREDUCE, allreduce)
STAGED_ALG(WEFT_COLL_ALLGATHER, allgather)
STAGED_ALG(WEFT_COLL_REDUCE_SCATTER, reduce_scatter)
STAGED_ALG(WEFT_COLL_REDUCE_SCATTER_BLOCK, reduce_scatter_block)
STAGED_ALG(WEFT_COLL_ALLTOALL, alltoall)
