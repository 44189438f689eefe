/* Point-to-point on UCX: one context and one worker per process,
 * endpoints created on first use, tag matching by UCX.
 *
 * 64-bit UCX tag layout (user traffic, collectives and control traffic
 * live in disjoint classes, so they never match each other):
 *   63..62  class      (0 user pt2pt, 1 collective, 2 control, 3 group creation)
 *   61..39  tag        (23 bits: user tag, or collective sequence/step)
 *   38..20  source     (19 bits: sender's rank in the communicator)
 *   19..0   context id (20 bits: agreed by the communicator's members:
 *           generation, kind and slot, src/weft_internal.h)
 * Control messages (revoke notices, agreements) are not tagged: they are
 * active messages (ucx.c), outside tag matching.
 */
#ifndef WEFT_PT2PT_H
#define WEFT_PT2PT_H

#include "bootstrap/jobkey.h"
#include "src/request.h"
#include "src/weft_internal.h"

#include <ucp/api/ucp.h>

#define WEFT_TAG_CLASS_SHIFT  62
#define WEFT_TAG_TAG_SHIFT    39
#define WEFT_TAG_SRC_SHIFT    20
#define WEFT_TAG_TAG_BITS     23
#define WEFT_TAG_SRC_BITS     19
#define WEFT_TAG_CTX_BITS     20
#define WEFT_TAG_MAX_RANKS    (1 << WEFT_TAG_SRC_BITS)
#define WEFT_TAG_MAX_CONTEXTS (1u << WEFT_TAG_CTX_BITS)
_Static_assert(WEFT_CTX_BITS <= WEFT_TAG_CTX_BITS, "a context id must fit the tag's context field");

#define WEFT_TAG_MASK_CLASS (UINT64_C(3) << WEFT_TAG_CLASS_SHIFT)
#define WEFT_TAG_MASK_TAG   (((UINT64_C(1) << WEFT_TAG_TAG_BITS) - 1) << WEFT_TAG_TAG_SHIFT)
#define WEFT_TAG_MASK_SRC   (((UINT64_C(1) << WEFT_TAG_SRC_BITS) - 1) << WEFT_TAG_SRC_SHIFT)
#define WEFT_TAG_MASK_CTX   ((UINT64_C(1) << WEFT_TAG_CTX_BITS) - 1)

static inline ucp_tag_t weft_tag_make(unsigned cls, unsigned tag, unsigned src, unsigned ctx)
{
    return ((ucp_tag_t)cls << WEFT_TAG_CLASS_SHIFT) | ((ucp_tag_t)tag << WEFT_TAG_TAG_SHIFT) |
           ((ucp_tag_t)src << WEFT_TAG_SRC_SHIFT) | (ucp_tag_t)ctx;
}
static inline int weft_tag_source(ucp_tag_t t)
{
    return (int)((t & WEFT_TAG_MASK_SRC) >> WEFT_TAG_SRC_SHIFT);
}
static inline int weft_tag_tag(ucp_tag_t t)
{
    return (int)((t & WEFT_TAG_MASK_TAG) >> WEFT_TAG_TAG_SHIFT);
}

typedef struct weft_peer {
    ucp_ep_h ep;
    int lost;         /* UCX reported this peer's endpoint failed */
    ucs_status_t why; /* the UCX status that failed it */
    int undelivered;  /* finalize's flush to it did not finish: its endpoint is closed by force */
} weft_peer_t;

typedef struct weft_pt2pt {
    ucp_context_h context;
    ucp_worker_h worker;
    /* Worker addresses are published through the bootstrap at init and a
     * peer's is fetched when the first endpoint to it is made: no rank
     * holds every address (docs/SCALING.md). */
    struct weft_bootstrap *bs;
    weft_job_key_t key; /* what a fetched address's seal is checked with */
    uint64_t fetched;   /* addresses fetched so far */
    weft_peer_t *peers; /* by world rank */
    int npeers;
    int lost_count;
    int recv_inline; /* the UCX in use reports the sender and length of a receive it completes inline */
} weft_pt2pt_t;

/* ucx.c */
int weft_p2p_progress(void);
/* Tagged sends UCX has not completed yet (finalize waits a moment for them). */
extern int weft_p2p_sends_inflight;
/* The endpoint to a world rank, created on first use. */
int weft_p2p_ep(int world_rank, ucp_ep_h *ep);
int weft_p2p_status_to_weft(ucs_status_t status);

/* tag.c: the engine behind the public send/recv family, also used by the
 * collective schedules (class WEFT_TAG_CLASS_COLL). */
int weft_p2p_isend(const void *buf, size_t bytes, int dest, unsigned cls, int tag, weft_comm_t comm,
                   weft_request_t *out);
int weft_p2p_irecv(void *buf, size_t bytes, int source, unsigned cls, int tag, weft_comm_t comm, weft_request_t *out);
int weft_p2p_arrived(int source, unsigned cls, int tag, weft_comm_t comm);

#endif
