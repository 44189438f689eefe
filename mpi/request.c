/* Requests: an MPI request wraps the weft request in flight (or none, for
 * one completed at creation) and what must happen when it completes (a
 * receive's unpack, a collective's next stage). Waits are weft's waits;
 * several requests are driven by testing each in turn. Persistent
 * requests keep their arguments and start a new weft request each time;
 * generalized requests complete when the program says so. */
#include "mpi_impl.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Requests the program freed while they were in flight: driven to their
 * end by later calls, then released. */
static mpi_req_t **orphans;
static int n_orphans, cap_orphans;

static void req_release(mpi_req_t *r)
{
    free(r->tmp);
    free(r->tmp2);
    if (r->coll) mpi_coll_free(r->coll);
    if (r->utype) mpi_dtype_unref(r->utype);
    if (r->ptype) mpi_dtype_unref(r->ptype);
    if (r->kind == MPI_REQ_GREQ && r->gfree) r->gfree(r->gstate);
    mpi_req_untrack(r); /* released in flight (a blocking call whose wait failed) */
    struct MPI_ABI_Comm *c = r->comm;
    mpi_obj_release(MPI_K_REQUEST, r);
    mpi_comm_unref(c);
}

int mpi_req_new(int kind, struct MPI_ABI_Comm *comm, const char *fn, mpi_req_t **out)
{
    mpi_req_t *r = mpi_obj_alloc(MPI_K_REQUEST);
    if (MPI_UNLIKELY(!r)) return mpi_err(comm, MPI_ERR_NO_MEM, fn, "out of request handles");
    r->kind = kind;
    r->comm = comm;
    mpi_comm_ref(comm);
    r->fn = fn;
    r->source = MPI_ANY_SOURCE;
    r->tag = MPI_ANY_TAG;
    *out = r;
    return MPI_SUCCESS;
}

void mpi_req_done(mpi_req_t *r, int err, int source, int tag, MPI_Count bytes)
{
    mpi_req_untrack(r);
    r->complete = 1;
    r->error = err;
    r->source = source;
    r->tag = tag;
    r->bytes = bytes;
}

/* The weft request in flight ended with rc and st. */
static void req_step(mpi_req_t *r, int rc, const weft_status_t *st)
{
    if (r->step) {
        int err = r->step(r, rc, st);
        if (r->wr) return; /* a next stage is in flight */
        mpi_req_untrack(r);
        r->complete = 1;
        r->error = err;
        return;
    }
    if (rc == WEFT_ERR_CANCELED) {
        r->cancelled = 1;
        rc = WEFT_SUCCESS;
    }
    mpi_req_untrack(r);
    r->complete = 1;
    r->error = mpi_class_of_weft(rc);
    if (r->kind == MPI_REQ_RECV || r->kind == MPI_REQ_PRECV) {
        r->source = st->source;
        r->tag = st->tag;
        r->bytes = (MPI_Count)st->bytes;
    }
}

int mpi_req_poll(mpi_req_t *r, int *done)
{
    if (r->complete || (!r->wr && r->kind != MPI_REQ_GREQ)) {
        *done = 1;
        return MPI_SUCCESS;
    }
    if (r->kind == MPI_REQ_GREQ) {
        weft_progress();
        *done = r->complete;
        return MPI_SUCCESS;
    }
    int flag = 0;
    weft_status_t st;
    int rc = weft_test(&r->wr, &flag, &st);
    if (flag) req_step(r, rc, &st);
    *done = r->complete;
    return MPI_SUCCESS;
}

int mpi_req_block(mpi_req_t *r)
{
    while (!r->complete) {
        if (r->kind == MPI_REQ_GREQ || !r->wr) {
            if (!r->wr && r->kind != MPI_REQ_GREQ) break; /* inactive */
            weft_progress();
            sched_yield();
            continue;
        }
        weft_status_t st;
        memset(&st, 0, sizeof(st));
        int rc = weft_wait(&r->wr, &st);
        if (r->wr) /* the wait itself failed (its deadline passed): the request stays */
            return mpi_err(r->comm, mpi_class_of_weft(rc), r->fn, "waiting: %s (%s)", weft_last_error(),
                           weft_strerror(rc));
        req_step(r, rc, &st);
    }
    return MPI_SUCCESS;
}

static void status_set(MPI_Status *s, int source, int tag, MPI_Count bytes, int cancelled)
{
    s->MPI_SOURCE = source;
    s->MPI_TAG = tag;
    s->MPI_internal[0] = (int)(uint32_t)((uint64_t)bytes & 0xffffffffu);
    s->MPI_internal[1] = (int)(uint32_t)((uint64_t)bytes >> 32);
    s->MPI_internal[2] = cancelled;
}

static MPI_Count status_bytes(const MPI_Status *s)
{
    return (MPI_Count)(((uint64_t)(uint32_t)s->MPI_internal[1] << 32) | (uint32_t)s->MPI_internal[0]);
}

void mpi_req_fill_status(const mpi_req_t *r, MPI_Status *status)
{
    if (!status) return;
    if (r->kind == MPI_REQ_GREQ) {
        MPI_Status s = r->gstatus;
        if (r->gquery) {
            /* the query function fills in what it knows; keep our fields otherwise */
            r->gquery(r->gstate, &s);
        }
        status->MPI_SOURCE = s.MPI_SOURCE;
        status->MPI_TAG = s.MPI_TAG;
        memcpy(status->MPI_internal, s.MPI_internal, sizeof(s.MPI_internal));
        return;
    }
    status_set(status, r->source, r->tag, r->bytes, r->cancelled);
}

/* MPI's empty status: what a null or inactive request completes with. */
static void empty_status(MPI_Status *status)
{
    if (!status) return;
    status_set(status, MPI_ANY_SOURCE, MPI_ANY_TAG, 0, 0);
    status->MPI_ERROR = MPI_SUCCESS;
}

static int is_persistent(const mpi_req_t *r)
{
    return r->kind == MPI_REQ_PSEND || r->kind == MPI_REQ_PRECV || r->kind == MPI_REQ_PCOLL;
}

void mpi_req_finish(mpi_req_t *r, MPI_Request *handle)
{
    if (is_persistent(r)) {
        mpi_req_untrack(r);
        r->active = 0;
        r->complete = 0;
        free(r->tmp);
        r->tmp = NULL;
        return;
    }
    req_release(r);
    *handle = MPI_REQUEST_NULL;
}

static void reap(void)
{
    for (int i = 0; i < n_orphans;) {
        int done;
        mpi_req_poll(orphans[i], &done);
        if (done) {
            req_release(orphans[i]);
            orphans[i] = orphans[--n_orphans];
        } else {
            i++;
        }
    }
}

/* ---- MPI_Comm_disconnect: everything in flight on a communicator ------------- */

typedef struct {
    struct MPI_ABI_Comm *comm;
    mpi_req_t **v;
    int n, cap, nomem;
} inflight_t;

static void collect_inflight(void *obj, void *arg)
{
    mpi_req_t *r = obj;
    inflight_t *p = arg;
    if (!r->tracked || r->comm != p->comm || p->nomem) return;
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        mpi_req_t **v = realloc(p->v, sizeof(*v) * (size_t)cap);
        if (!v) {
            p->nomem = 1;
            return;
        }
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n++] = r;
}

/* r to its end (through every stage of a chained collective) by the
 * deadline, as mpi_req_block. */
static int req_block_until(mpi_req_t *r, double deadline, int pending, const char *fn)
{
    while (!r->complete && r->wr) {
        weft_status_t st;
        memset(&st, 0, sizeof(st));
        int rc = weft_wait_timeout(&r->wr, mpi_time_left(deadline), &st);
        if (r->wr) /* the deadline passed (or the wait failed): the request stays in flight */
            return mpi_err(r->comm, mpi_class_of_weft(rc), fn,
                           "%d operation%s still in flight on the communicator, the %srequest of %s: %s (%s)", pending,
                           pending == 1 ? "" : "s", r->freed ? "freed " : "", r->fn, weft_last_error(),
                           weft_strerror(rc));
        req_step(r, rc, &st);
    }
    mpi_req_untrack(r); /* (no weft request left: nothing is in flight) */
    return MPI_SUCCESS;
}

int mpi_comm_drain(struct MPI_ABI_Comm *c, double deadline, const char *fn)
{
    inflight_t p = {.comm = c};
    int rc = MPI_SUCCESS;
    mpi_obj_foreach(MPI_K_REQUEST, collect_inflight, &p);
    if (p.nomem) {
        free(p.v);
        return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
    }
    for (int i = 0; i < p.n && !rc; i++) {
        mpi_req_t *r = p.v[i];
        if ((rc = req_block_until(r, deadline, c->inflight, fn))) break;
        /* a freed request's error has no other place to go */
        if (r->freed && r->error)
            rc = mpi_err(c, r->error, fn, "the request of %s, freed while in flight, failed: %s", r->fn,
                         weft_last_error());
    }
    free(p.v);
    if (n_orphans) reap(); /* releases the freed requests that ended */
    if (!rc) rc = mpi_bsend_drain(c, deadline, fn);
    if (!rc && c->inflight)
        rc = mpi_err(c, MPI_ERR_INTERN, fn, "%d operations counted in flight on the communicator, none found",
                     c->inflight);
    return rc;
}

/* ---- single requests --------------------------------------------------------- */

/* The request behind a handle: NULL with *err 0 for MPI_REQUEST_NULL. */
static mpi_req_t *req_of(MPI_Request h, const char *fn, int *err)
{
    *err = MPI_SUCCESS;
    if (h == MPI_REQUEST_NULL) return NULL;
    mpi_req_t *r = mpi_req_get(h);
    if (MPI_UNLIKELY(!r)) *err = mpi_err(NULL, MPI_ERR_REQUEST, fn, "invalid request handle (freed or not a request)");
    return r;
}

/* A generalized request's end: its query fills the status, its free
 * function releases the program's state; an error either returns goes
 * through the error handler as the request's. */
static int greq_outcome(mpi_req_t *r, MPI_Request *h, MPI_Status *status, const char *fn)
{
    MPI_Status s = r->gstatus;
    int qrc = r->gquery ? r->gquery(r->gstate, &s) : MPI_SUCCESS;
    if (status) {
        status->MPI_SOURCE = s.MPI_SOURCE;
        status->MPI_TAG = s.MPI_TAG;
        memcpy(status->MPI_internal, s.MPI_internal, sizeof(s.MPI_internal));
    }
    int frc = r->gfree ? r->gfree(r->gstate) : MPI_SUCCESS;
    r->gfree = NULL;
    req_release(r);
    *h = MPI_REQUEST_NULL;
    int err = qrc ? qrc : frc;
    return err ? mpi_errh_invoke(NULL, err, fn) : MPI_SUCCESS;
}

/* The outcome of a completed request for a single-completion call. */
static int outcome(mpi_req_t *r, MPI_Request *h, MPI_Status *status, const char *fn)
{
    if (r->kind == MPI_REQ_GREQ) return greq_outcome(r, h, status, fn);
    int rc = MPI_SUCCESS;
    mpi_req_fill_status(r, status);
    /* raised while the request (and so its communicator) is still held */
    if (MPI_UNLIKELY(r->error))
        rc = mpi_err(r->comm, r->error, fn, "the request of %s failed: %s", r->fn, weft_last_error());
    mpi_req_finish(r, h);
    return rc;
}

MPI_DEF(int, Wait, (MPI_Request * request, MPI_Status *status))
{
    if (MPI_UNLIKELY(!request)) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Wait", "NULL request pointer");
    int err;
    mpi_req_t *r = req_of(*request, "MPI_Wait", &err);
    if (!r) {
        if (!err) empty_status(status);
        return err;
    }
    if (MPI_UNLIKELY(n_orphans)) reap();
    if (is_persistent(r) && !r->active) {
        empty_status(status);
        return MPI_SUCCESS;
    }
    if ((err = mpi_req_block(r))) return err;
    return outcome(r, request, status, "MPI_Wait");
}

MPI_DEF(int, Test, (MPI_Request * request, int *flag, MPI_Status *status))
{
    if (MPI_UNLIKELY(!request || !flag)) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Test", "NULL request or flag");
    int err, done;
    mpi_req_t *r = req_of(*request, "MPI_Test", &err);
    if (!r) {
        if (!err) {
            *flag = 1;
            empty_status(status);
        }
        return err;
    }
    if (MPI_UNLIKELY(n_orphans)) reap();
    if (is_persistent(r) && !r->active) {
        *flag = 1;
        empty_status(status);
        return MPI_SUCCESS;
    }
    mpi_req_poll(r, &done);
    *flag = done;
    if (!done) return MPI_SUCCESS;
    return outcome(r, request, status, "MPI_Test");
}

MPI_DEF(int, Request_get_status, (MPI_Request request, int *flag, MPI_Status *status))
{
    if (!flag) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Request_get_status", "NULL flag");
    int err, done;
    mpi_req_t *r = req_of(request, "MPI_Request_get_status", &err);
    if (!r) {
        if (!err) {
            *flag = 1;
            empty_status(status);
        }
        return err;
    }
    if (is_persistent(r) && !r->active) {
        *flag = 1;
        empty_status(status);
        return MPI_SUCCESS;
    }
    mpi_req_poll(r, &done);
    *flag = done;
    if (done) mpi_req_fill_status(r, status);
    return MPI_SUCCESS;
}

MPI_DEF(int, Request_free, (MPI_Request * request))
{
    if (!request) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Request_free", "NULL request pointer");
    int err;
    mpi_req_t *r = req_of(*request, "MPI_Request_free", &err);
    if (!r) return err ? err : mpi_err(NULL, MPI_ERR_REQUEST, "MPI_Request_free", "MPI_REQUEST_NULL");
    int done = 1;
    if (r->wr || (r->kind == MPI_REQ_GREQ && !r->complete)) mpi_req_poll(r, &done);
    if (done || r->kind == MPI_REQ_GREQ) {
        if (r->kind == MPI_REQ_GREQ && !r->complete) {
            r->freed = 1; /* released by MPI_Grequest_complete */
        } else {
            req_release(r);
        }
    } else {
        if (n_orphans == cap_orphans) {
            int cap = cap_orphans ? 2 * cap_orphans : 16;
            mpi_req_t **n = realloc(orphans, sizeof(*n) * (size_t)cap);
            if (!n) return mpi_err(r->comm, MPI_ERR_NO_MEM, "MPI_Request_free", "out of memory");
            orphans = n;
            cap_orphans = cap;
        }
        r->freed = 1;
        orphans[n_orphans++] = r;
    }
    *request = MPI_REQUEST_NULL;
    return MPI_SUCCESS;
}

MPI_DEF(int, Cancel, (MPI_Request * request))
{
    if (!request) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Cancel", "NULL request pointer");
    int err;
    mpi_req_t *r = req_of(*request, "MPI_Cancel", &err);
    if (!r) return err ? err : mpi_err(NULL, MPI_ERR_REQUEST, "MPI_Cancel", "MPI_REQUEST_NULL");
    if (r->kind == MPI_REQ_GREQ) {
        int rc = r->gcancel ? r->gcancel(r->gstate, r->complete) : MPI_SUCCESS;
        return rc ? mpi_errh_invoke(NULL, rc, "MPI_Cancel") : MPI_SUCCESS;
    }
    /* Receives are canceled in weft; sends cannot be (MPI allows a cancel
     * to fail: the send then completes normally). */
    if ((r->kind == MPI_REQ_RECV || r->kind == MPI_REQ_PRECV) && r->wr && !r->complete) {
        weft_request_cancel(&r->wr);
    }
    return MPI_SUCCESS;
}

/* ---- many requests ------------------------------------------------------------ */

/* Every handle null or a request, and none twice: completing the first
 * copy would free the request under the second (MPI calls a repeated
 * handle erroneous). */
static int check_array(int count, MPI_Request reqs[], const char *fn)
{
    if (count < 0) return mpi_err(NULL, MPI_ERR_COUNT, fn, "negative count");
    if (count > 0 && !reqs) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL request array");
    int i, first = -1;
    for (i = 0; i < count; i++) {
        if (reqs[i] == MPI_REQUEST_NULL) continue;
        mpi_req_t *r = mpi_req_get(reqs[i]);
        if (!r) break;
        if (r->listed) {
            first = r->listed - 1;
            break;
        }
        r->listed = i + 1;
    }
    for (int k = 0; k < i; k++)
        if (reqs[k] != MPI_REQUEST_NULL) mpi_req_get(reqs[k])->listed = 0;
    if (i == count) return MPI_SUCCESS;
    if (first >= 0) return mpi_err(NULL, MPI_ERR_REQUEST, fn, "requests %d and %d are the same request", first, i);
    return mpi_err(NULL, MPI_ERR_REQUEST, fn, "request %d is invalid (freed or not a request)", i);
}

/* Whether request i takes part (not null, not an inactive persistent one). */
static mpi_req_t *active_req(MPI_Request h)
{
    if (h == MPI_REQUEST_NULL) return NULL;
    mpi_req_t *r = mpi_req_get(h);
    if (is_persistent(r) && !r->active) return NULL;
    return r;
}

/* Completes request i of an array (status filled, error recorded). */
static int complete_one(MPI_Request reqs[], int i, MPI_Status *statuses, int *first_err_comm_set,
                        struct MPI_ABI_Comm **err_comm)
{
    mpi_req_t *r = mpi_req_get(reqs[i]);
    int err = r->error;
    if (statuses) {
        mpi_req_fill_status(r, &statuses[i]);
        statuses[i].MPI_ERROR = err;
    }
    if (err && !*first_err_comm_set) {
        *first_err_comm_set = 1;
        *err_comm = r->comm;
        mpi_comm_ref(r->comm); /* the request may be its last holder */
    }
    mpi_req_finish(r, &reqs[i]);
    return err;
}

/* MPI_ERR_IN_STATUS on the communicator of the first failed request, held
 * since that request was released. */
static int in_status_error(struct MPI_ABI_Comm *err_comm, const char *fn)
{
    int rc = mpi_err(err_comm, MPI_ERR_IN_STATUS, fn, "one or more requests failed (see the statuses)");
    mpi_comm_unref(err_comm);
    return rc;
}

static void idle(unsigned *spins)
{
    if (++*spins > 64) sched_yield();
}

/* Waits for every weft request in flight at once (weft_waitall), runs
 * their completion steps, and again while steps start new stages. */
static int wait_all_inflight(int count, MPI_Request reqs[], const char *fn)
{
    weft_request_t wbuf[16], *w = wbuf;
    weft_status_t sbuf[16], *st = sbuf;
    mpi_req_t *rbuf[16], **rs = rbuf;
    if (count > 16) {
        w = malloc(sizeof(*w) * (size_t)count);
        st = malloc(sizeof(*st) * (size_t)count);
        rs = malloc(sizeof(*rs) * (size_t)count);
        if (!w || !st || !rs) {
            free(w), free(st), free(rs);
            return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
        }
    }
    int rc = MPI_SUCCESS;
    unsigned spins = 0;
    for (;;) {
        int n = 0, greqs = 0;
        for (int i = 0; i < count; i++) {
            mpi_req_t *r = active_req(reqs[i]);
            if (!r || r->complete) continue;
            if (r->kind == MPI_REQ_GREQ) {
                greqs++;
            } else if (r->wr) {
                rs[n] = r;
                w[n++] = r->wr;
            }
        }
        if (n == 0 && greqs == 0) break;
        if (n == 0) {
            weft_progress();
            idle(&spins);
            continue;
        }
        memset(st, 0, sizeof(*st) * (size_t)n);
        int wrc = weft_waitall(n, w, st);
        for (int k = 0; k < n; k++) {
            if (w[k]) { /* still pending: the wait's deadline passed */
                rs[k]->wr = w[k];
                continue;
            }
            rs[k]->wr = NULL;
            req_step(rs[k], st[k].error, &st[k]);
        }
        for (int k = 0; k < n; k++)
            if (w[k]) {
                rc = mpi_err(rs[k]->comm, mpi_class_of_weft(wrc), fn, "waiting: %s (%s)", weft_last_error(),
                             weft_strerror(wrc));
                goto out;
            }
    }
out:
    if (w != wbuf) free(w), free(st), free(rs);
    return rc;
}

MPI_DEF(int, Waitall, (int count, MPI_Request reqs[], MPI_Status statuses[]))
{
    const char *fn = "MPI_Waitall";
    int rc = check_array(count, reqs, fn);
    if (rc) return rc;
    if (n_orphans) reap();
    if ((rc = wait_all_inflight(count, reqs, fn))) return rc;
    int set = 0, any_err = 0;
    struct MPI_ABI_Comm *ec = NULL;
    for (int i = 0; i < count; i++) {
        if (!active_req(reqs[i])) {
            if (statuses) empty_status(&statuses[i]);
            continue;
        }
        if (complete_one(reqs, i, statuses, &set, &ec)) any_err = 1;
    }
    if (any_err) return in_status_error(ec, fn);
    return MPI_SUCCESS;
}

MPI_DEF(int, Testall, (int count, MPI_Request reqs[], int *flag, MPI_Status statuses[]))
{
    const char *fn = "MPI_Testall";
    int rc = check_array(count, reqs, fn);
    if (rc) return rc;
    if (!flag) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL flag");
    if (n_orphans) reap();
    int all = 1;
    for (int i = 0; i < count; i++) {
        mpi_req_t *r = active_req(reqs[i]);
        if (!r) continue;
        int done;
        mpi_req_poll(r, &done);
        if (!done) all = 0;
    }
    *flag = all;
    if (!all) return MPI_SUCCESS;
    int set = 0, any_err = 0;
    struct MPI_ABI_Comm *ec = NULL;
    for (int i = 0; i < count; i++) {
        if (!active_req(reqs[i])) {
            if (statuses) empty_status(&statuses[i]);
            continue;
        }
        if (complete_one(reqs, i, statuses, &set, &ec)) any_err = 1;
    }
    if (any_err) return in_status_error(ec, fn);
    return MPI_SUCCESS;
}

static int any(int count, MPI_Request reqs[], int *index, int *flag, MPI_Status *status, int block, const char *fn)
{
    int rc = check_array(count, reqs, fn);
    if (rc) return rc;
    if (!index || (!block && !flag)) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL index or flag");
    if (n_orphans) reap();
    unsigned spins = 0;
    for (;;) {
        int active = 0;
        for (int i = 0; i < count; i++) {
            mpi_req_t *r = active_req(reqs[i]);
            if (!r) continue;
            active++;
            int done;
            mpi_req_poll(r, &done);
            if (done) {
                if (flag) *flag = 1;
                *index = i;
                return outcome(r, &reqs[i], status, fn);
            }
        }
        if (!active) {
            if (flag) *flag = 1;
            *index = MPI_UNDEFINED;
            empty_status(status);
            return MPI_SUCCESS;
        }
        if (!block) {
            *flag = 0;
            *index = MPI_UNDEFINED;
            return MPI_SUCCESS;
        }
        idle(&spins);
    }
}

MPI_DEF(int, Waitany, (int count, MPI_Request reqs[], int *index, MPI_Status *status))
{
    return any(count, reqs, index, NULL, status, 1, "MPI_Waitany");
}

MPI_DEF(int, Testany, (int count, MPI_Request reqs[], int *index, int *flag, MPI_Status *status))
{
    return any(count, reqs, index, flag, status, 0, "MPI_Testany");
}

static int some(int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[], int block,
                const char *fn)
{
    int rc = check_array(incount, reqs, fn);
    if (rc) return rc;
    if (!outcount || (incount > 0 && !indices)) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL outcount or indices");
    if (n_orphans) reap();
    unsigned spins = 0;
    for (;;) {
        int active = 0, n = 0;
        for (int i = 0; i < incount; i++) {
            mpi_req_t *r = active_req(reqs[i]);
            if (!r) continue;
            active++;
            int done;
            mpi_req_poll(r, &done);
            if (done) indices[n++] = i;
        }
        if (!active) {
            *outcount = MPI_UNDEFINED;
            return MPI_SUCCESS;
        }
        if (n > 0 || !block) {
            int set = 0, any_err = 0;
            struct MPI_ABI_Comm *ec = NULL;
            for (int k = 0; k < n; k++) {
                int i = indices[k];
                mpi_req_t *r = mpi_req_get(reqs[i]);
                int err = r->error;
                if (statuses) {
                    mpi_req_fill_status(r, &statuses[k]);
                    statuses[k].MPI_ERROR = err;
                }
                if (err && !set) {
                    set = 1;
                    ec = r->comm;
                    mpi_comm_ref(ec);
                    any_err = 1;
                }
                mpi_req_finish(r, &reqs[i]);
            }
            *outcount = n;
            if (any_err) return in_status_error(ec, fn);
            return MPI_SUCCESS;
        }
        idle(&spins);
    }
}

MPI_DEF(int, Waitsome, (int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[]))
{
    return some(incount, reqs, outcount, indices, statuses, 1, "MPI_Waitsome");
}

MPI_DEF(int, Testsome, (int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[]))
{
    return some(incount, reqs, outcount, indices, statuses, 0, "MPI_Testsome");
}

/* MPI 4.1's non-destructive queries over arrays */
MPI_DEF(int, Request_get_status_all, (int count, const MPI_Request reqs[], int *flag, MPI_Status statuses[]))
{
    const char *fn = "MPI_Request_get_status_all";
    int rc = check_array(count, (MPI_Request *)reqs, fn);
    if (rc) return rc;
    if (!flag) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL flag");
    int all = 1;
    for (int i = 0; i < count; i++) {
        mpi_req_t *r = active_req(reqs[i]);
        int done = 1;
        if (r) mpi_req_poll(r, &done);
        all &= done;
    }
    *flag = all;
    if (all && statuses)
        for (int i = 0; i < count; i++) {
            mpi_req_t *r = active_req(reqs[i]);
            if (r) {
                mpi_req_fill_status(r, &statuses[i]);
                statuses[i].MPI_ERROR = r->error;
            } else {
                empty_status(&statuses[i]);
            }
        }
    return MPI_SUCCESS;
}

MPI_DEF(int, Request_get_status_any, (int count, const MPI_Request reqs[], int *index, int *flag, MPI_Status *status))
{
    const char *fn = "MPI_Request_get_status_any";
    int rc = check_array(count, (MPI_Request *)reqs, fn);
    if (rc) return rc;
    if (!index || !flag) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL index or flag");
    int active = 0;
    for (int i = 0; i < count; i++) {
        mpi_req_t *r = active_req(reqs[i]);
        if (!r) continue;
        active++;
        int done;
        mpi_req_poll(r, &done);
        if (done) {
            *index = i;
            *flag = 1;
            mpi_req_fill_status(r, status);
            if (status) status->MPI_ERROR = r->error;
            return MPI_SUCCESS;
        }
    }
    *index = MPI_UNDEFINED;
    *flag = !active;
    if (!active) empty_status(status);
    return MPI_SUCCESS;
}

MPI_DEF(int, Request_get_status_some,
        (int incount, const MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[]))
{
    const char *fn = "MPI_Request_get_status_some";
    int rc = check_array(incount, (MPI_Request *)reqs, fn);
    if (rc) return rc;
    if (!outcount) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL outcount");
    int active = 0, n = 0;
    for (int i = 0; i < incount; i++) {
        mpi_req_t *r = active_req(reqs[i]);
        if (!r) continue;
        active++;
        int done;
        mpi_req_poll(r, &done);
        if (done) {
            if (statuses) {
                mpi_req_fill_status(r, &statuses[n]);
                statuses[n].MPI_ERROR = r->error;
            }
            indices[n++] = i;
        }
    }
    *outcount = active ? n : MPI_UNDEFINED;
    return MPI_SUCCESS;
}

/* ---- persistent requests ------------------------------------------------------ */

static int start_one(MPI_Request *h, const char *fn)
{
    int err;
    mpi_req_t *r = req_of(*h, fn, &err);
    if (!r) return err ? err : mpi_err(NULL, MPI_ERR_REQUEST, fn, "MPI_REQUEST_NULL");
    if (!is_persistent(r)) return mpi_err(r->comm, MPI_ERR_REQUEST, fn, "not a persistent request");
    if (r->active) return mpi_err(r->comm, MPI_ERR_REQUEST, fn, "the request is already active");
    r->active = 1;
    r->complete = 0;
    r->cancelled = 0;
    r->error = 0;
    return r->kind == MPI_REQ_PCOLL ? mpi_coll_start(r) : mpi_p2p_start(r);
}

MPI_DEF(int, Start, (MPI_Request * request))
{
    if (!request) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Start", "NULL request pointer");
    return start_one(request, "MPI_Start");
}

MPI_DEF(int, Startall, (int count, MPI_Request reqs[]))
{
    int rc = check_array(count, reqs, "MPI_Startall");
    if (rc) return rc;
    for (int i = 0; i < count; i++)
        if ((rc = start_one(&reqs[i], "MPI_Startall"))) return rc;
    return MPI_SUCCESS;
}

/* ---- generalized requests -------------------------------------------------------- */

MPI_DEF(int, Grequest_start,
        (MPI_Grequest_query_function * query_fn, MPI_Grequest_free_function *free_fn,
         MPI_Grequest_cancel_function *cancel_fn, void *extra_state, MPI_Request *request))
{
    const char *fn = "MPI_Grequest_start";
    MPI_CHECK_INIT(fn);
    if (!request) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL request");
    mpi_req_t *r = NULL;
    int rc = mpi_req_new(MPI_REQ_GREQ, NULL, fn, &r);
    if (rc) return rc;
    r->gquery = query_fn;
    r->gfree = free_fn;
    r->gcancel = cancel_fn;
    r->gstate = extra_state;
    status_set(&r->gstatus, MPI_ANY_SOURCE, MPI_ANY_TAG, 0, 0);
    *request = r;
    return MPI_SUCCESS;
}

MPI_DEF(int, Grequest_complete, (MPI_Request request))
{
    mpi_req_t *r = mpi_req_get(request);
    if (!r || r->kind != MPI_REQ_GREQ)
        return mpi_err(NULL, MPI_ERR_REQUEST, "MPI_Grequest_complete", "not a generalized request");
    r->complete = 1;
    if (r->freed) req_release(r);
    return MPI_SUCCESS;
}

MPI_DEF(MPI_Request, Request_fromint, (int request))
{
    if (request == 0x180) return MPI_REQUEST_NULL;
    void *o = mpi_obj_at(MPI_K_REQUEST, request - MPI_HANDLE_INT_BASE);
    return o ? o : MPI_REQUEST_NULL;
}

MPI_DEF(int, Request_toint, (MPI_Request request))
{
    uintptr_t v = (uintptr_t)request;
    if (v < MPI_HANDLE_INT_BASE) return (int)v;
    int i = mpi_obj_index(MPI_K_REQUEST, request);
    return i < 0 ? 0x180 : MPI_HANDLE_INT_BASE + i;
}

/* ---- statuses ---------------------------------------------------------------------- */

static int get_count(const MPI_Status *status, MPI_Datatype datatype, MPI_Count *count, const char *fn)
{
    struct MPI_ABI_Datatype *t = mpi_dtype_get(datatype);
    if (!status || !count) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL status or count");
    if (!t) return mpi_err(NULL, MPI_ERR_TYPE, fn, "invalid datatype");
    MPI_Count bytes = status_bytes(status);
    if (t->size == 0)
        *count = 0;
    else
        *count = bytes % t->size ? MPI_UNDEFINED : bytes / t->size;
    return MPI_SUCCESS;
}

MPI_DEF(int, Get_count, (const MPI_Status *status, MPI_Datatype datatype, int *count))
{
    MPI_Count c = 0;
    int rc = get_count(status, datatype, &c, "MPI_Get_count");
    if (!rc) mpi_count_to_int(c, count);
    return rc;
}

MPI_DEF(int, Get_count_c, (const MPI_Status *status, MPI_Datatype datatype, MPI_Count *count))
{
    return get_count(status, datatype, count, "MPI_Get_count_c");
}

static int get_elements(const MPI_Status *status, MPI_Datatype datatype, MPI_Count *count, const char *fn)
{
    struct MPI_ABI_Datatype *t = mpi_dtype_get(datatype);
    if (!status || !count) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL status or count");
    if (!t) return mpi_err(NULL, MPI_ERR_TYPE, fn, "invalid datatype");
    *count = mpi_dtype_elements(t, status_bytes(status));
    return MPI_SUCCESS;
}

MPI_DEF(int, Get_elements, (const MPI_Status *status, MPI_Datatype datatype, int *count))
{
    MPI_Count c = 0;
    int rc = get_elements(status, datatype, &c, "MPI_Get_elements");
    if (!rc) mpi_count_to_int(c, count);
    return rc;
}

MPI_DEF(int, Get_elements_c, (const MPI_Status *status, MPI_Datatype datatype, MPI_Count *count))
{
    return get_elements(status, datatype, count, "MPI_Get_elements_c");
}

MPI_DEF(int, Get_elements_x, (const MPI_Status *status, MPI_Datatype datatype, MPI_Count *count))
{
    return get_elements(status, datatype, count, "MPI_Get_elements_x");
}

static int set_elements(MPI_Status *status, MPI_Datatype datatype, MPI_Count count, const char *fn)
{
    struct MPI_ABI_Datatype *t = mpi_dtype_get(datatype);
    if (!status) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL status");
    if (!t) return mpi_err(NULL, MPI_ERR_TYPE, fn, "invalid datatype");
    if (count < 0) return mpi_err(NULL, MPI_ERR_COUNT, fn, "negative count");
    MPI_Count bytes = 0;
    if (t->nelem > 0) {
        /* whole elements, then the basic elements of a partial one, run by run */
        if (__builtin_mul_overflow(count / t->nelem, t->size, &bytes))
            return mpi_err(NULL, MPI_ERR_COUNT, fn, "%lld elements of %s overflow the byte count", (long long)count,
                           mpi_dtype_name(t));
        MPI_Count rem = count % t->nelem;
        for (int r = 0; r < t->nruns && rem > 0; r++) {
            MPI_Count all = t->runs[r].n * t->runs[r].reps, n = all < rem ? all : rem;
            bytes += n * mpi_basic_of(t->runs[r].basic)->size;
            rem -= n;
        }
    }
    status->MPI_internal[0] = (int)(uint32_t)((uint64_t)bytes & 0xffffffffu);
    status->MPI_internal[1] = (int)(uint32_t)((uint64_t)bytes >> 32);
    return MPI_SUCCESS;
}

MPI_DEF(int, Status_set_elements, (MPI_Status * status, MPI_Datatype datatype, int count))
{
    return set_elements(status, datatype, count, "MPI_Status_set_elements");
}

MPI_DEF(int, Status_set_elements_c, (MPI_Status * status, MPI_Datatype datatype, MPI_Count count))
{
    return set_elements(status, datatype, count, "MPI_Status_set_elements_c");
}

MPI_DEF(int, Status_set_elements_x, (MPI_Status * status, MPI_Datatype datatype, MPI_Count count))
{
    return set_elements(status, datatype, count, "MPI_Status_set_elements_x");
}

MPI_DEF(int, Status_set_cancelled, (MPI_Status * status, int flag))
{
    if (!status) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Status_set_cancelled", "NULL status");
    status->MPI_internal[2] = flag != 0;
    return MPI_SUCCESS;
}

MPI_DEF(int, Test_cancelled, (const MPI_Status *status, int *flag))
{
    if (!status || !flag) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Test_cancelled", "NULL status or flag");
    *flag = status->MPI_internal[2] != 0;
    return MPI_SUCCESS;
}

#define STATUS_FIELD(getname, setname, field)                                                                          \
    MPI_DEF(int, getname, (const MPI_Status *status, int *value))                                                      \
    {                                                                                                                  \
        if (!status || !value) return mpi_err(NULL, MPI_ERR_ARG, "MPI_" #getname, "NULL status or output");            \
        *value = status->field;                                                                                        \
        return MPI_SUCCESS;                                                                                            \
    }                                                                                                                  \
    MPI_DEF(int, setname, (MPI_Status * status, int value))                                                            \
    {                                                                                                                  \
        if (!status) return mpi_err(NULL, MPI_ERR_ARG, "MPI_" #setname, "NULL status");                                \
        status->field = value;                                                                                         \
        return MPI_SUCCESS;                                                                                            \
    }

STATUS_FIELD(Status_get_source, Status_set_source, MPI_SOURCE)
STATUS_FIELD(Status_get_tag, Status_set_tag, MPI_TAG)
STATUS_FIELD(Status_get_error, Status_set_error, MPI_ERROR)
