/* allgather on device buffers across nodes with the result never on the
 * host: base's ring (coll/base/allgather_ring.c) on the device buffers,
 * n - 1 steps straight into the output, its blocks moved in device memory
 * (by UCX where it carries CUDA memory, else by point-to-point's pinned
 * chunks) and its one local copy by the driver. Takes what coll/hier's
 * allgather declines across nodes (one rank per node, uneven nodes). */
#include "coll/cuda/cuda_coll.h"

static int build(weft_sched_t *s, const weft_coll_args_t *a)
{
    static const char name[] = "allgather direct";
    int rc = weft_gpu_direct_usable(a, name);
    if (rc) return rc;
    weft_gpu_direct_start(s, a, name, NULL);
    return weft_coll_allgather_ring_build(s, a);
}

const weft_coll_alg_t weft_alg_allgather_direct = {
    "direct", WEFT_COLL_ALLGATHER,
    "device buffers across nodes, the result never on the host: a ring straight into the output whose messages "
    "UCX moves in device memory (cuda_ipc, GPUDirect RDMA) or point-to-point through its pinned chunks",
    build, 0};
