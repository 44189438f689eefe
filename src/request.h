/* Requests: one object for every nonblocking operation (pt2pt now,
 * collective schedules later). The owner layer supplies the ops. */
#ifndef WEFT_REQUEST_H
#define WEFT_REQUEST_H

#include "weft_internal.h"

typedef struct weft_request_ops {
    const char *kind; /* "send", "recv", ... for messages */
    /* Cancels a pending request (NULL: not cancelable). Completion, with
     * WEFT_ERR_CANCELED, may come later through progress. */
    int (*cancel)(weft_request_t req);
    /* Called on a pending request while a wait polls without news: lets
     * the owner fail it early (a receive from a peer known to be lost). */
    void (*check)(weft_request_t req);
    /* The user released a still-pending request: the owner completes it in
     * the background and then calls weft_request_release. */
    void (*orphan)(weft_request_t req);
    /* Optional: what the request is, for timeout messages and pending lists. */
    int (*describe)(weft_request_t req, char *buf, size_t len);
    /* Optional: the comm rank a pending request is waiting for now, or -1
     * (a schedule: the peer of its round's first unfinished exchange). */
    int (*waiting_for)(weft_request_t req);
    /* 1: the transport's progress alone completes it (a point-to-point
     * message): a wait on it polls UCX and runs the other hooks (schedules,
     * revoke notices) only after an event or every few idle polls. */
    int transport_completes;
    /* Optional: what the progress thread must do to advance a pending
     * request that it polled without news (WEFT_NEEDS_EVENTS: the
     * transport's events will say when, WEFT_NEEDS_BELL: flags in shared
     * memory whose posters ring *bell (filled), WEFT_NEEDS_POLL: poll it,
     * it raises none), and the time it must run again whatever happens
     * (*wake_at, lowered only; a schedule's own deadline). Without it: a
     * request the transport completes needs events, any other polling. */
    int (*idle_needs)(weft_request_t req, double *wake_at, weft_bell_ref_t *bell);
} weft_request_ops_t;
enum { WEFT_NEEDS_NOTHING = 0, WEFT_NEEDS_EVENTS = 1, WEFT_NEEDS_BELL = 2, WEFT_NEEDS_POLL = 3 };

#define WEFT_REQUEST_MAGIC 0x77526571u /* "wReq" */

struct weft_request_s {
    uint32_t magic;
    volatile int complete; /* set once, by the owner's completion path */
    int orphaned;          /* user let go while pending */
    int peer;              /* comm rank of the peer, or WEFT_ANY_SOURCE */
    int tag;
    int cancel_reason;    /* the error a cancel completes with (0: WEFT_ERR_CANCELED) */
    size_t capacity;      /* receive buffer length in bytes */
    weft_status_t status; /* status.error holds the outcome */
    const weft_request_ops_t *ops;
    weft_comm_t comm;
    void *owner_data; /* the owner's handle (a UCX request, a schedule) */
    void *owner_extra; /* a second one (pt2pt: the staging state of a device buffer) */
    /* Owner scratch that must outlive the posting call (UCX writes a
     * receive's tag info here, also on later completion). */
    uint64_t owner_scratch[2];
    struct weft_request_s *next_free;
    struct weft_request_s *live_prev, *live_next; /* every allocated request */
    weft_request_callback_t on_complete;          /* weft_request_on_complete's, called once at completion */
    void *on_complete_arg;
    int on_complete_given; /* one was given (it may have run already) */
    /* The owner's hook, run once when the request is released (a failed
     * collective's message still in flight: its scratch is kept till then). */
    void (*on_release)(void *arg);
    void *on_release_arg;
};

weft_request_t weft_request_alloc(const weft_request_ops_t *ops, weft_comm_t comm);
/* Makes sure the next weft_request_alloc needs no malloc (one request is
 * kept free): for a caller that must not fail to allocate later, after it
 * changed state it cannot undo. WEFT_SUCCESS or WEFT_ERR_NO_MEMORY. */
int weft_request_reserve(void);
/* Returns a request to the free list (the owner has nothing left in it). */
void weft_request_release(weft_request_t req);
/* Runs req's completion callback (weft_request_on_complete). */
void weft_request_fire(weft_request_t req);
/* Marks the request complete with `error` (WEFT_SUCCESS or a status). */
static inline void weft_request_complete(weft_request_t req, int error)
{
    req->status.error = error;
    if (WEFT_LIKELY(!req->complete)) weft_request_pending--;
    req->complete = 1;
    if (WEFT_UNLIKELY(req->on_complete != NULL)) weft_request_fire(req);
}
/* For the progress thread, after a pass without news: the most any pending
 * request needs (WEFT_NEEDS_*; BELL only when every request that needs one
 * names the same bell, in *bell), and in *wake_at (absolute, lowered only)
 * the time one of them must be looked at again. */
int weft_request_idle_needs(double *wake_at, weft_bell_ref_t *bell);
/* Runs every pending request's ops->check (as an idle wait does for the
 * request it waits on): a receive from a rank known lost fails, a
 * collective with a lost member fails, with nobody waiting for them. */
void weft_request_check_pending(void);
/* Waits until complete or `deadline` (absolute, 0 = none). Does not release.
 * While idle it asks for news of dead ranks (weft_liveness_poll) and lets
 * the owner fail the request early (ops->check); once more, forced, at the
 * deadline, so a timeout is reported as such only when no loss explains it. */
int weft_request_wait_until(weft_request_t req, double deadline);
/* The same with a relative timeout (seconds, 0 = none), the clock read only
 * once the wait turns out not to be immediate. */
int weft_request_wait_for(weft_request_t req, double timeout_s);
/* Before comm is freed: stops the collectives on it the user released,
 * and lets go of released messages only UCX still owns (a send to a dead
 * rank); returns the requests still pending on comm (the user's). */
int weft_request_detach_comm(weft_comm_t comm);
/* Lists comm's pending requests ("recv from rank 1 tag 5, ...") into buf. */
void weft_request_describe_pending(weft_comm_t comm, char *buf, size_t len);
/* Number of requests allocated and not yet released (at finalize). */
int weft_request_live_count(void);
/* Frees the free list (at finalize). */
void weft_request_cleanup(void);

#endif
