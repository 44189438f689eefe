/* bcast on device buffers through the pipelined kernel, pushing (pipelined.c, kernels.h: weft_ck_pipe_args):
 * the root stores its units into the others' positions; on 3 or more ranks it scatters part k of each unit to the k-th
 * other rank, which passes it on to the rest, so the root's NVLink egress carries the vector once. NVLink carries
 * stores; every rank reads only its own memory and its own input where it lies. */
#include "coll/cuda/cuda_coll.h"

static void form(const weft_coll_args_t *a, const weft_gpu_state_t *st, weft_ck_pipe_args_t *p)
{
    weft_gpu_bcast_pipe(a, st, p);
    size_t block = a->count * weft_gpu_esize(a);
    int n = st->n;
    p->push = 1;
    if (n >= 3) { /* the n - 1 parts of the root's vector: scattered by the root, passed on by their owners */
        p->mode = 4;
        p->root = a->root;
        p->npieces = n - 1;
        p->total = block;
        p->count = ((block + (size_t)n - 2) / (size_t)(n - 1) + 15) / 16 * 16;
        p->in_stride = p->count;
        p->out = a->recvbuf;
    }
}

WEFT_GPU_PIPE_ALG(bcast, pushed, WEFT_COLL_BCAST,
                  "pipelined, pushing: the root stores its units into the others' positions; on 3+ ranks it scatters "
                  "them and the others pass them on (the root's NVLink egress carries the vector once)",
                  form)
