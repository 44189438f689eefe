/* Request life cycle and the wait / test family. Every wait has a
 * deadline: the communicator's timeout unless the call gives its own. */
#include "request.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static weft_request_t free_list;
static weft_request_t live_list;
static int live_count;
int weft_request_pending;

weft_request_t weft_request_alloc(const weft_request_ops_t *ops, weft_comm_t comm)
{
    weft_request_t req = free_list;
    if (req)
        free_list = req->next_free;
    else if (!(req = malloc(sizeof(*req))))
        return NULL;
    memset(req, 0, sizeof(*req));
    req->magic = WEFT_REQUEST_MAGIC;
    req->ops = ops;
    req->comm = comm;
    if (comm) comm->pending++;
    req->live_next = live_list;
    if (live_list) live_list->live_prev = req;
    live_list = req;
    live_count++;
    weft_request_pending++;
    req->peer = WEFT_ANY_SOURCE;
    req->status.source = WEFT_ANY_SOURCE;
    req->status.tag = WEFT_ANY_TAG;
    return req;
}

int weft_request_reserve(void)
{
    if (free_list) return WEFT_SUCCESS;
    weft_request_t req = malloc(sizeof(*req));
    if (!req) return weft_error(WEFT_ERR_NO_MEMORY, "out of memory for a request");
    req->next_free = NULL;
    free_list = req;
    return WEFT_SUCCESS;
}

void weft_request_release(weft_request_t req)
{
    if (req->comm) req->comm->pending--;
    if (!req->complete) weft_request_pending--; /* released pending: completes in the background, uncounted */
    if (req->live_prev)
        req->live_prev->live_next = req->live_next;
    else
        live_list = req->live_next;
    if (req->live_next) req->live_next->live_prev = req->live_prev;
    live_count--;
    req->magic = 0;
    if (WEFT_UNLIKELY(req->on_release != NULL)) {
        void (*fn)(void *) = req->on_release;
        req->on_release = NULL;
        fn(req->on_release_arg);
    }
    req->next_free = free_list;
    free_list = req;
}

void weft_request_describe_pending(weft_comm_t comm, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (weft_request_t r = live_list; r; r = r->live_next) {
        if (r->comm != comm) continue;
        char what[200];
        if (!r->ops->describe || r->ops->describe(r, what, sizeof(what)) <= 0)
            snprintf(what, sizeof(what), "%s %s rank %d tag %d%s", r->ops->kind,
                     strcmp(r->ops->kind, "send") ? "from" : "to", r->peer, r->tag,
                     r->orphaned ? " (released, still in flight)" : "");
        int waiting = r->ops->waiting_for ? r->ops->waiting_for(r) : -1;
        char wf[48] = "";
        if (waiting >= 0) snprintf(wf, sizeof(wf), " waiting for rank %d", waiting);
        int n = snprintf(buf + used, len - used, "%s%s%s", used ? ", " : "", what, wf);
        if (n < 0 || used + (size_t)n >= len) break;
        used += (size_t)n;
    }
}

int weft_request_live_count(void)
{
    return live_count;
}

void weft_request_fire(weft_request_t req)
{
    weft_request_callback_t fn = req->on_complete;
    req->on_complete = NULL;
    fn(req->on_complete_arg, req->status.error);
}

int weft_request_idle_needs(double *wake_at, weft_bell_ref_t *bell)
{
    int needs = WEFT_NEEDS_NOTHING;
    bell->bell = NULL;
    for (weft_request_t r = live_list; r && needs < WEFT_NEEDS_POLL; r = r->live_next) {
        if (r->complete) continue;
        weft_bell_ref_t b = {0};
        int n = r->ops->idle_needs            ? r->ops->idle_needs(r, wake_at, &b)
                : r->ops->transport_completes ? WEFT_NEEDS_EVENTS
                                              : WEFT_NEEDS_POLL;
        if (n == WEFT_NEEDS_BELL) {
            if (!bell->bell)
                *bell = b;
            else if (bell->bell != b.bell)
                n = WEFT_NEEDS_POLL; /* flags of two groups: no one bell rings for both */
        }
        if (n > needs) needs = n;
    }
    return needs;
}

void weft_request_check_pending(void)
{
    int n = 0;
    weft_request_t *todo = live_count ? malloc(sizeof(*todo) * (size_t)live_count) : NULL;
    if (!todo) return;
    for (weft_request_t r = live_list; r; r = r->live_next)
        if (!r->complete && r->ops->check) todo[n++] = r;
    /* A check may end other requests (a collective's own messages): they
     * stay on the free list, magic cleared, and are passed over. */
    for (int i = 0; i < n; i++)
        if (todo[i]->magic == WEFT_REQUEST_MAGIC && !todo[i]->complete) todo[i]->ops->check(todo[i]);
    free(todo);
}

static int on_comm(weft_request_t r, weft_comm_t comm)
{
    return r->comm && (r->comm == comm || r->comm->parent == comm);
}

/* Cancels, with status err, what is pending on comm (and its derived
 * comms): collectives first, so each fails as a whole rather than through
 * one of its own messages, then receives. Nothing is allocated meanwhile,
 * so a request released on the way (a collective's own receive) stays on
 * the free list with its magic cleared and is passed over. */
void weft_request_fail_comm(weft_comm_t comm, int err)
{
    int n = 0;
    weft_request_t *todo = live_count ? malloc(sizeof(*todo) * (size_t)live_count) : NULL;
    if (!todo) return; /* nothing pending, or no memory: the waits' deadlines still hold */
    for (weft_request_t r = live_list; r; r = r->live_next)
        if (on_comm(r, comm) && !r->complete && r->ops->cancel) todo[n++] = r;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            weft_request_t r = todo[i];
            int coll = !strcmp(r->ops->kind, "collective");
            if (r->magic != WEFT_REQUEST_MAGIC || r->complete || coll != (pass == 0)) continue;
            if (!coll && r->orphaned) continue; /* its cancel is already under way */
            r->cancel_reason = err;
            r->ops->cancel(r);
        }
    free(todo);
}

int weft_request_detach_comm(weft_comm_t comm)
{
    /* Collectives the user let go of still run on comm: stop them (their
     * receives are canceled, their sends released). */
    for (int again = 1; again;) {
        again = 0;
        for (weft_request_t r = live_list; r && !again; r = r->live_next)
            if (on_comm(r, comm) && r->orphaned && !r->complete && !strcmp(r->ops->kind, "collective")) {
                r->ops->cancel(r);
                again = 1; /* the list changed */
            }
    }
    /* What is left of them are messages only UCX still owns (a send to a
     * dead rank never completes): they no longer count on comm. */
    for (weft_request_t r = live_list; r; r = r->live_next)
        if (on_comm(r, comm) && r->orphaned) {
            r->comm->pending--;
            r->comm = NULL;
        }
    return comm->pending;
}

void weft_request_cleanup(void)
{
    live_list = NULL;
    live_count = 0;
    weft_request_pending = 0;
    while (free_list) {
        weft_request_t next = free_list->next_free;
        free(free_list);
        free_list = next;
    }
}

static int request_check(weft_request_t *request, const char *fn)
{
    WEFT_CHECK_INIT(fn);
    if (request == NULL) return weft_error(WEFT_ERR_ARG, "%s: NULL request pointer", fn);
    if (*request != WEFT_REQUEST_NULL && (*request)->magic != WEFT_REQUEST_MAGIC)
        return weft_error(WEFT_ERR_ARG, "%s: invalid or already released request %p", fn, (void *)*request);
    return WEFT_SUCCESS;
}

/* The timeout's message names what the request waits for and, when the
 * liveness record knows of a dead rank, that rank: the likelier culprit. */
static int describe_timeout(weft_request_t req, double timeout_s)
{
    const char *name = req->comm ? req->comm->name : "?";
    char what[256], waiting[48] = "", lost[320] = "";
    int r = weft_comm_lost_member(req->comm), w;
    if (r >= 0) {
        char d[300];
        weft_lost_describe(req->comm, r, d, sizeof(d));
        snprintf(lost, sizeof(lost), "; %s", d);
    } else if ((w = weft_world_lost_rank()) >= 0) {
        snprintf(lost, sizeof(lost), "; world rank %d (not in comm %s) lost: %s", w, name, weft_rank_lost_why(w));
    }
    if (req->ops->waiting_for && (r = req->ops->waiting_for(req)) >= 0)
        snprintf(waiting, sizeof(waiting), " waiting for rank %d", r);
    if (req->ops->describe && req->ops->describe(req, what, sizeof(what)) > 0)
        return weft_error_quiet(WEFT_ERR_TIMEOUT, "%s timed out after %.3g s%s%s", what, timeout_s, waiting, lost);
    if (req->peer >= 0)
        return weft_error_quiet(WEFT_ERR_TIMEOUT, "%s %s rank %d (tag %d, comm %s) did not complete within %.3g s%s",
                                req->ops->kind, strcmp(req->ops->kind, "send") ? "from" : "to", req->peer, req->tag,
                                name, timeout_s, lost);
    return weft_error_quiet(WEFT_ERR_TIMEOUT, "%s from any rank (tag %d, comm %s) did not complete within %.3g s%s",
                            req->ops->kind, req->tag, name, timeout_s, lost);
}

/* Empty polls between clock readings: a wait that completes within a few
 * polls never reads the clock, and an idle one checks its deadline and
 * the liveness news every ~1 us instead of on every poll (after every
 * yield: on a shared core one may last a time slice). */
#define POLLS_PER_CLOCK 32
#define HOOKS_EVERY     8

/* deadline < 0: not fixed yet; the first clock reading sets it to now +
 * timeout_s (a wait that finishes quickly never pays for it). Past
 * WEFT_WAIT_SPIN_US without news the wait sleeps between polls
 * (weft_wait_sleep), reading the clock after each sleep. */
static int wait_loop(weft_request_t req, double deadline, double timeout_s)
{
    unsigned idle = 0, polls = 0, spins = 0;
    double since = 0, spin_s = weft_cfg.wait_spin_us * 1e-6;
    weft_wait_sleep_t ws = {0};
    /* A message completes in UCX's progress: poll it alone, the hooks after
     * any event and every HOOKS_EVERY idle polls (measured: see PERFORMANCE.md
     * section 2); anything else polls everything every time. */
    int lean = req->ops->transport_completes && weft_xport;
    while (!req->complete) {
        int events;
        if (lean) {
            events = weft_xport->progress();
            if (req->complete) break;
            if (events || ++spins % HOOKS_EVERY == 0) events += weft_progress_hooks();
        } else {
            events = weft_progress();
        }
        if (req->complete) break;
        if (events) {
            ws.quiet_since = 0;
            ws.busy_arms = 0;
        } else if (++polls >= POLLS_PER_CLOCK) {
            polls = 0;
            double now = weft_wtime();
            if (deadline < 0) deadline = weft_deadline_from(timeout_s, now);
            if (since == 0) since = now;
            if (ws.quiet_since == 0) ws.quiet_since = now;
            int late = deadline > 0 && now >= deadline;
            weft_liveness_poll(now, since, late);
            if (req->ops->check) req->ops->check(req);
            if (req->complete) break;
            if (late) return WEFT_ERR_TIMEOUT;
            if (now - ws.quiet_since >= spin_s) {
                weft_wait_sleep(&ws, req, now, deadline);
                polls = POLLS_PER_CLOCK - 1; /* the clock again after the next empty poll */
                continue;
            }
        }
        if (weft_progress_idle(&idle, events)) polls = POLLS_PER_CLOCK - 1;
    }
    return WEFT_SUCCESS;
}

int weft_request_wait_until(weft_request_t req, double deadline) { return wait_loop(req, deadline, 0); }

int weft_request_wait_for(weft_request_t req, double timeout_s) { return wait_loop(req, -1.0, timeout_s); }

/* Hands the outcome to the user and releases the request. */
static int request_finish(weft_request_t *request, weft_status_t *status)
{
    weft_request_t req = *request;
    int rc = req->status.error;
    /* Failed by a revoke (maybe while this thread did something else): say who. */
    if (WEFT_UNLIKELY(rc == WEFT_ERR_REVOKED) && req->comm) weft_comm_revoked_error(req->comm, req->ops->kind);
    if (status) *status = req->status;
    weft_request_release(req);
    *request = WEFT_REQUEST_NULL;
    return rc;
}

static double effective_timeout(weft_request_t req, double timeout_s)
{
    if (timeout_s < 0) return req->comm ? req->comm->timeout : weft_cfg.timeout;
    return timeout_s;
}

WEFT_API int weft_wait_timeout(weft_request_t *request, double timeout_s, weft_status_t *status)
{
    WEFT_API_ENTER();
    int rc = request_check(request, "weft_wait");
    if (rc) return rc;
    if (*request == WEFT_REQUEST_NULL) {
        if (status) memset(status, 0, sizeof(*status));
        return WEFT_SUCCESS;
    }
    weft_request_t req = *request;
    double t = effective_timeout(req, timeout_s);
    rc = weft_request_wait_for(req, t);
    if (rc == WEFT_ERR_TIMEOUT) {
        if (status) {
            *status = req->status;
            status->error = WEFT_ERR_TIMEOUT;
        }
        rc = describe_timeout(req, t);
        weft_comm_error_policy(req->comm, rc);
        return rc;
    }
    weft_comm_t comm = req->comm;
    rc = request_finish(request, status);
    if (rc) weft_comm_error_policy(comm, rc);
    return rc;
}

WEFT_API int weft_wait(weft_request_t *request, weft_status_t *status)
{
    WEFT_API_ENTER();
    return weft_wait_timeout(request, WEFT_TIMEOUT_DEFAULT, status);
}

WEFT_API int weft_test(weft_request_t *request, int *flag, weft_status_t *status)
{
    WEFT_API_ENTER();
    int rc = request_check(request, "weft_test");
    if (rc) return rc;
    if (flag == NULL) return weft_error(WEFT_ERR_ARG, "weft_test: NULL flag pointer");
    if (*request == WEFT_REQUEST_NULL) {
        *flag = 1;
        if (status) memset(status, 0, sizeof(*status));
        return WEFT_SUCCESS;
    }
    weft_request_t req = *request;
    if (!req->complete) {
        int events = weft_progress();
        if (!req->complete) {
            if (!events) weft_liveness_poll(weft_wtime(), 0, 0);
            if (req->ops->check) req->ops->check(req);
        }
    }
    *flag = req->complete;
    if (!req->complete) return WEFT_SUCCESS;
    return request_finish(request, status);
}

WEFT_API int weft_waitall_timeout(int count, weft_request_t requests[], double timeout_s, weft_status_t statuses[])
{
    WEFT_API_ENTER();
    if (count < 0) return weft_error(WEFT_ERR_ARG, "weft_waitall: negative count %d", count);
    if (count > 0 && requests == NULL) return weft_error(WEFT_ERR_ARG, "weft_waitall: NULL request array");
    for (int i = 0; i < count; i++) {
        int rc = request_check(&requests[i], "weft_waitall");
        if (rc) return rc;
    }
    double now = weft_wtime();
    int first_error = WEFT_SUCCESS;
    for (int i = 0; i < count; i++) {
        weft_request_t req = requests[i];
        weft_status_t *st = statuses ? &statuses[i] : NULL;
        if (req == WEFT_REQUEST_NULL) {
            if (st) memset(st, 0, sizeof(*st));
            continue;
        }
        /* One deadline for the whole set, measured from the call. */
        double t = effective_timeout(req, timeout_s);
        if (weft_request_wait_until(req, weft_deadline_from(t, now)) == WEFT_ERR_TIMEOUT) {
            if (st) {
                *st = req->status;
                st->error = WEFT_ERR_TIMEOUT;
            }
            if (first_error == WEFT_SUCCESS) first_error = describe_timeout(req, t);
            weft_comm_error_policy(req->comm, WEFT_ERR_TIMEOUT);
            continue;
        }
        weft_comm_t comm = req->comm;
        int rc = request_finish(&requests[i], st);
        if (rc != WEFT_SUCCESS && first_error == WEFT_SUCCESS) first_error = rc;
        if (rc != WEFT_SUCCESS) weft_comm_error_policy(comm, rc);
    }
    return first_error;
}

WEFT_API int weft_waitall(int count, weft_request_t requests[], weft_status_t statuses[])
{
    WEFT_API_ENTER();
    return weft_waitall_timeout(count, requests, WEFT_TIMEOUT_DEFAULT, statuses);
}

WEFT_API int weft_request_cancel(weft_request_t *request)
{
    WEFT_API_ENTER();
    int rc = request_check(request, "weft_request_cancel");
    if (rc) return rc;
    weft_request_t req = *request;
    if (req == WEFT_REQUEST_NULL || req->complete) return WEFT_SUCCESS;
    if (!req->ops->cancel)
        return weft_error(WEFT_ERR_UNSUPPORTED, "weft_request_cancel: a pending %s cannot be canceled", req->ops->kind);
    return req->ops->cancel(req);
}

WEFT_API int weft_request_free(weft_request_t *request)
{
    WEFT_API_ENTER();
    int rc = request_check(request, "weft_request_free");
    if (rc) return rc;
    weft_request_t req = *request;
    if (req == WEFT_REQUEST_NULL) return WEFT_SUCCESS;
    *request = WEFT_REQUEST_NULL;
    if (req->complete) {
        weft_request_release(req);
        return WEFT_SUCCESS;
    }
    req->orphaned = 1;
    if (req->ops->orphan) req->ops->orphan(req);
    return WEFT_SUCCESS;
}

WEFT_API int weft_request_on_complete(weft_request_t request, weft_request_callback_t fn, void *arg)
{
    WEFT_API_ENTER();
    weft_request_t req = request;
    int rc = request_check(&req, "weft_request_on_complete");
    if (rc) return rc;
    if (req == WEFT_REQUEST_NULL) return weft_error(WEFT_ERR_ARG, "weft_request_on_complete: null request");
    if (!fn) return weft_error(WEFT_ERR_ARG, "weft_request_on_complete: NULL callback");
    if (req->on_complete_given)
        return weft_error(WEFT_ERR_ALREADY, "weft_request_on_complete: the request already has a callback");
    req->on_complete_given = 1;
    req->on_complete = fn;
    req->on_complete_arg = arg;
    if (req->complete) weft_request_fire(req);
    return WEFT_SUCCESS;
}

WEFT_API void weft_notify_fd(void *fd, int status)
{
    uint64_t one = 1;
    (void)status;
    /* an eventfd adds it up; a pipe gets 8 bytes (a full one already says so) */
    ssize_t n = write((int)(intptr_t)fd, &one, sizeof(one));
    (void)n;
}
