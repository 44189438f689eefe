/* PMIx bootstrap: mpirun / prterun / srun --mpi=pmix. Each allgather is a
 * Put + Commit, a data-collecting fence, and a Get per rank. The fence is
 * nonblocking so weft's own deadline holds even if the server has none.
 * UCX addresses are put without a fence and fetched on demand (direct
 * modex: pmix_put, pmix_get); init's gather and broadcast are allgathers
 * (each node's server then holds every rank's node-map record: O(size)).
 *
 * Liveness, two sources, because launchers differ:
 *   - an event handler for the process-termination events (PRRTE, Open MPI
 *     5's mpirun);
 *   - the server's process table (PMIX_QUERY_PROC_TABLE), asked on behalf of
 *     a wait that has been stuck for PTABLE_AFTER seconds, at most every
 *     ptable_interval(): Open MPI 4.1's mpirun never delivers the event
 *     (with --enable-recovery its ORTE notifies PMIx 4's server with a custom
 *     range but the session range, and the server refuses it: "PMIX ERROR:
 *     BAD-PARAM in pmix_event_notification.c"), but its table has a dead
 *     rank's state ("ABORTED BY SIGNAL") within milliseconds. A waiting
 *     rank's question costs its local server a table of every rank, so
 *     short waits (a collective between busy ranks) never ask, and big jobs
 *     ask less often. A server that cannot answer is not asked again.
 * Without either, waits end at their deadline. (Open MPI 4.1's mpirun also
 * kills the whole job when a rank dies unless started with
 * --enable-recovery; docs/LAUNCHING.md.) */
#include "bootstrap/bootstrap.h"
#include "weft_internal.h"

#include <pmix.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    pmix_proc_t me;
    unsigned seq;
} pmix_bs_t;

static pmix_bs_t g_pmix;

/* Completion flags live in static storage: a fence we stopped waiting
 * for may still call back after the caller has returned. */
static volatile int fence_done;
static volatile pmix_status_t fence_status;

static void fence_cb(pmix_status_t status, void *cbdata)
{
    (void)cbdata;
    fence_status = status;
    __atomic_store_n(&fence_done, 1, __ATOMIC_RELEASE);
}

typedef struct {
    volatile int done;
    volatile pmix_status_t status;
} probe_t;

static void probe_cb(pmix_status_t status, pmix_value_t *kv, void *cbdata)
{
    probe_t *p = cbdata;
    (void)kv;
    p->status = status;
    __atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
}

/* PMIx calls the handler (and the table query's callback) on its own
 * thread: they queue, pmix_poll_lost reports on the main thread. Each rank
 * is queued once. A full queue drops events (the deadline still holds). */
#define LOST_QUEUE 64
static pthread_mutex_t lost_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    pmix_rank_t rank;
    int from_table;       /* state (the process table) rather than status (an event) */
    pmix_status_t status; /* the event */
    pmix_proc_state_t state;
} lost_queue[LOST_QUEUE];
static int lost_queued;
static unsigned char *lost_noted; /* per rank: queued once already */
static int lost_noted_size;

static void lost_push(const pmix_proc_t *proc, int from_table, pmix_status_t status, pmix_proc_state_t state)
{
    if (!proc || !PMIX_CHECK_NSPACE(proc->nspace, g_pmix.me.nspace) || proc->rank >= PMIX_RANK_VALID ||
        proc->rank == g_pmix.me.rank)
        return;
    pthread_mutex_lock(&lost_lock);
    int r = (int)proc->rank;
    if (lost_queued < LOST_QUEUE && (!lost_noted || r >= lost_noted_size || !lost_noted[r])) {
        if (lost_noted && r < lost_noted_size) lost_noted[r] = 1;
        lost_queue[lost_queued].rank = proc->rank;
        lost_queue[lost_queued].from_table = from_table;
        lost_queue[lost_queued].status = status;
        lost_queue[lost_queued].state = state;
        __atomic_store_n(&lost_queued, lost_queued + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&lost_lock);
}

static void lost_handler(size_t id, pmix_status_t status, const pmix_proc_t *source, pmix_info_t info[], size_t ninfo,
                         pmix_info_t *results, size_t nresults, pmix_event_notification_cbfunc_fn_t cbfunc,
                         void *cbdata)
{
    int found = 0;
    (void)id, (void)results, (void)nresults;
    for (size_t i = 0; i < ninfo; i++) {
        if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROC) && info[i].value.type == PMIX_PROC) {
            lost_push(info[i].value.data.proc, 0, status, 0);
            found = 1;
        } else if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROCS) && info[i].value.type == PMIX_DATA_ARRAY &&
                   info[i].value.data.darray && info[i].value.data.darray->type == PMIX_PROC) {
            const pmix_proc_t *procs = info[i].value.data.darray->array;
            for (size_t k = 0; k < info[i].value.data.darray->size; k++)
                lost_push(&procs[k], 0, status, 0);
            found = 1;
        }
    }
    if (!found) lost_push(source, 0, status, 0); /* older servers name the dead process as the source */
    if (cbfunc) cbfunc(PMIX_EVENT_NO_ACTION_TAKEN, NULL, 0, NULL, NULL, cbdata);
}

/* ---- the process table ------------------------------------------------- */

#define PTABLE_AFTER 0.01 /* seconds a wait is stuck before it asks */
static pmix_query_t ptable_query;
static int ptable_ready, ptable_off;
static volatile int ptable_busy; /* a query in flight (its callback clears it) */
static double ptable_next;

/* At most every 10 ms for small jobs, every 2 s for 10,000 ranks. */
static double ptable_interval(int size)
{
    double t = (double)size * 2e-4;
    return t > WEFT_LIVENESS_POLL_S ? t : WEFT_LIVENESS_POLL_S;
}

static void ptable_entry(const pmix_proc_info_t *p)
{
    /* Abnormal ends only (PMIX_PROC_STATE_ERROR and on): a rank that
     * finalized and exited is no death. */
    if (p->state >= PMIX_PROC_STATE_ERROR) lost_push(&p->proc, 1, 0, p->state);
}

static void ptable_cb(pmix_status_t status, pmix_info_t *info, size_t ninfo, void *cbdata,
                      pmix_release_cbfunc_t release_fn, void *release_cbdata)
{
    (void)cbdata;
    for (size_t i = 0; (status == PMIX_SUCCESS || status == PMIX_ERR_PARTIAL_SUCCESS) && i < ninfo; i++) {
        if (!PMIX_CHECK_KEY(&info[i], PMIX_QUERY_PROC_TABLE) || info[i].value.type != PMIX_DATA_ARRAY ||
            !info[i].value.data.darray)
            continue;
        const pmix_data_array_t *d = info[i].value.data.darray;
        if (d->type == PMIX_PROC_INFO) { /* PMIx's own servers */
            const pmix_proc_info_t *p = d->array;
            for (size_t k = 0; k < d->size; k++)
                ptable_entry(&p[k]);
        } else if (d->type == PMIX_INFO) { /* Open MPI 4.1's ORTE: each entry wrapped in an info */
            const pmix_info_t *in = d->array;
            for (size_t k = 0; k < d->size; k++)
                if (in[k].value.type == PMIX_PROC_INFO && in[k].value.data.pinfo) ptable_entry(in[k].value.data.pinfo);
        }
    }
    if (status != PMIX_SUCCESS && status != PMIX_ERR_PARTIAL_SUCCESS) ptable_off = 1; /* not answered: stop asking */
    if (release_fn) release_fn(release_cbdata);
    __atomic_store_n(&ptable_busy, 0, __ATOMIC_RELEASE);
}

static void ptable_ask(void)
{
    if (!ptable_ready) {
        PMIX_QUERY_CONSTRUCT(&ptable_query);
        ptable_query.keys = calloc(2, sizeof(char *));
        if (!ptable_query.keys || !(ptable_query.keys[0] = strdup(PMIX_QUERY_PROC_TABLE))) {
            ptable_off = 1;
            return;
        }
        PMIX_QUERY_QUALIFIERS_CREATE(&ptable_query, 1);
        PMIX_INFO_LOAD(&ptable_query.qualifiers[0], PMIX_NSPACE, g_pmix.me.nspace, PMIX_STRING);
        ptable_ready = 1;
    }
    __atomic_store_n(&ptable_busy, 1, __ATOMIC_RELEASE);
    pmix_status_t st = PMIx_Query_info_nb(&ptable_query, 1, ptable_cb, NULL);
    if (st != PMIX_SUCCESS) {
        weft_debug("PMIx: the process table cannot be asked (%s): deaths are learnt from events only",
                   PMIx_Error_string(st));
        ptable_off = 1;
        __atomic_store_n(&ptable_busy, 0, __ATOMIC_RELEASE);
    }
}

static void pmix_poll_lost(weft_bootstrap_t *bs, double blocked_s)
{
    if (blocked_s >= PTABLE_AFTER && !ptable_off && !__atomic_load_n(&ptable_busy, __ATOMIC_ACQUIRE)) {
        double now = weft_wtime();
        if (now >= ptable_next) {
            ptable_next = now + ptable_interval(bs->size);
            ptable_ask();
        }
    }
    if (!__atomic_load_n(&lost_queued, __ATOMIC_ACQUIRE)) return; /* the common case: no lock */
    pthread_mutex_lock(&lost_lock);
    for (int i = 0; i < lost_queued; i++) {
        if (lost_queue[i].from_table)
            weft_rank_lost((int)lost_queue[i].rank, "the launcher's process table (PMIx) has it %s",
                           PMIx_Proc_state_string(lost_queue[i].state));
        else
            weft_rank_lost((int)lost_queue[i].rank, "the launcher (PMIx) reports %s",
                           PMIx_Error_string(lost_queue[i].status));
    }
    __atomic_store_n(&lost_queued, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lost_lock);
}

/* Best effort: without the handler, waits end at their deadline. */
static void register_lost_handler(void)
{
    pmix_status_t codes[] = {PMIX_EVENT_PROC_TERMINATED,   PMIX_PROC_TERMINATED,        PMIX_ERR_PROC_TERM_WO_SYNC,
                             PMIX_ERR_PROC_ABORTED_BY_SIG, PMIX_ERR_PROC_KILLED_BY_CMD, PMIX_ERR_PROC_REQUESTED_ABORT,
                             PMIX_ERR_EXIT_NONZERO_TERM};
    pmix_info_t info;
    PMIX_INFO_LOAD(&info, PMIX_EVENT_HDLR_NAME, "weft-liveness", PMIX_STRING);
    /* No callback: the call blocks and returns the handler's id (>= 0) or an error. */
    pmix_status_t st =
        PMIx_Register_event_handler(codes, sizeof(codes) / sizeof(codes[0]), &info, 1, lost_handler, NULL, NULL);
    PMIX_INFO_DESTRUCT(&info);
    if (st < 0)
        weft_debug("PMIx: no process-termination events (registering the handler failed: %s)", PMIx_Error_string(st));
}

int weft_bootstrap_pmix_detected(void)
{
    return getenv("PMIX_RANK") || getenv("PMIX_NAMESPACE") || getenv("PMIX_SERVER_URI41") ||
           getenv("PMIX_SERVER_URI4") || getenv("PMIX_SERVER_URI3") || getenv("PMIX_SERVER_URI21") ||
           getenv("PMIX_SERVER_URI2");
}

/* After a fence timeout: ask the server, briefly, which ranks committed this
 * round's key. Best effort: a launcher without direct modex answers none. */
static void name_missing(pmix_bs_t *p, int size, const char *key, char *out, size_t outlen)
{
    probe_t *probes = calloc((size_t)size, sizeof(*probes));
    size_t used = 0;
    int nmissing = 0;
    out[0] = '\0';
    if (!probes) return;
    pmix_info_t info;
    int secs = 2;
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &secs, PMIX_INT);
    for (int r = 0; r < size; r++) {
        pmix_proc_t proc;
        PMIX_LOAD_PROCID(&proc, p->me.nspace, (pmix_rank_t)r);
        if ((int)p->me.rank == r || PMIx_Get_nb(&proc, key, &info, 1, probe_cb, &probes[r]) != PMIX_SUCCESS) {
            probes[r].done = 1;
            probes[r].status = (int)p->me.rank == r ? PMIX_SUCCESS : PMIX_ERROR;
        }
    }
    double until = weft_wtime() + 3.0;
    for (int r = 0; r < size; r++)
        while (!__atomic_load_n(&probes[r].done, __ATOMIC_ACQUIRE) && weft_wtime() < until)
            sched_yield();
    for (int r = 0; r < size; r++) {
        if (__atomic_load_n(&probes[r].done, __ATOMIC_ACQUIRE) && probes[r].status == PMIX_SUCCESS) continue;
        nmissing++;
        int n = snprintf(out + used, outlen - used, "%s%d", used ? ", " : "", r);
        if (n > 0 && used + (size_t)n < outlen) used += (size_t)n;
    }
    if (nmissing == 0) snprintf(out, outlen, "unknown");
    /* Probes that never answered keep pointing at this array: leak it. */
    for (int r = 0; r < size; r++)
        if (!__atomic_load_n(&probes[r].done, __ATOMIC_ACQUIRE)) return;
    free(probes);
}

/* A fence over the whole job (collecting the data put before it or not),
 * nonblocking so weft's deadline holds even if the server has none. */
static int fence(pmix_bs_t *p, int size, int collect, const char *key, double deadline)
{
    pmix_status_t st;
    pmix_proc_t wild;
    pmix_info_t info[2];
    bool want = collect != 0;
    int secs = deadline > 0 ? (int)(deadline - weft_wtime()) + 1 : 0;

    PMIX_LOAD_PROCID(&wild, p->me.nspace, PMIX_RANK_WILDCARD);
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &want, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
    fence_done = 0;
    st = PMIx_Fence_nb(&wild, 1, info, secs > 0 ? 2 : 1, fence_cb, NULL);
    if (st != PMIX_SUCCESS)
        return weft_error(WEFT_ERR_BOOTSTRAP, "PMIx fence could not start: %s", PMIx_Error_string(st));
    while (!__atomic_load_n(&fence_done, __ATOMIC_ACQUIRE)) {
        if (deadline > 0 && weft_wtime() > deadline) {
            char missing[512] = "unknown";
            if (collect) name_missing(p, size, key, missing, sizeof(missing));
            return weft_error(WEFT_ERR_TIMEOUT,
                              "PMIx fence (%s) did not complete within the deadline: ranks that did not arrive: %s",
                              key, missing);
        }
        weft_bootstrap_idle();
        sched_yield();
    }
    if (fence_status != PMIX_SUCCESS)
        return weft_error(fence_status == PMIX_ERR_TIMEOUT ? WEFT_ERR_TIMEOUT : WEFT_ERR_BOOTSTRAP,
                          "PMIx fence (%s) failed: %s", key, PMIx_Error_string(fence_status));
    return WEFT_SUCCESS;
}

/* Puts len bytes under key for every rank (PMIX_GLOBAL) and commits them. */
static int put_commit(const char *key, const void *data, size_t len)
{
    pmix_status_t st;
    pmix_value_t val;
    PMIX_VALUE_CONSTRUCT(&val);
    val.type = PMIX_BYTE_OBJECT;
    val.data.bo.bytes = (char *)(len ? data : "");
    val.data.bo.size = len;
    if ((st = PMIx_Put(PMIX_GLOBAL, key, &val)) != PMIX_SUCCESS || (st = PMIx_Commit()) != PMIX_SUCCESS)
        return weft_error(WEFT_ERR_BOOTSTRAP, "PMIx put/commit of %s failed: %s", key, PMIx_Error_string(st));
    return WEFT_SUCCESS;
}

static int pmix_allgather(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline)
{
    pmix_bs_t *p = bs->impl;
    pmix_status_t st;
    pmix_key_t key;
    int rc;

    snprintf(key, sizeof(key), "weft.ag.%u", p->seq++);
    if ((rc = put_commit(key, send, len))) return rc;
    if ((rc = fence(p, bs->size, 1, key, deadline))) return rc;

    for (int r = 0; r < bs->size; r++) {
        pmix_proc_t proc;
        pmix_value_t *v = NULL;
        pmix_info_t tinfo;
        /* A rank that died before it put its value would make the server
         * ask it forever (a launcher that lets the job go on after a death
         * completes the fence without it): the deadline holds here too. */
        int secs = deadline > 0 ? (int)(deadline - weft_wtime()) + 1 : 0;
        if (secs > 0) PMIX_INFO_LOAD(&tinfo, PMIX_TIMEOUT, &secs, PMIX_INT);
        if (weft_rank_lost_why(r))
            return weft_error(WEFT_ERR_PEER_LOST, "PMIx allgather (%s): rank %d is lost: %s", key, r,
                              weft_rank_lost_why(r));
        PMIX_LOAD_PROCID(&proc, p->me.nspace, (pmix_rank_t)r);
        st = PMIx_Get(&proc, key, secs > 0 ? &tinfo : NULL, secs > 0 ? 1 : 0, &v);
        if (st != PMIX_SUCCESS || !v || v->type != PMIX_BYTE_OBJECT || v->data.bo.size != len) {
            rc = weft_error(st == PMIX_ERR_TIMEOUT ? WEFT_ERR_TIMEOUT : WEFT_ERR_BOOTSTRAP,
                            "PMIx get of %s from rank %d failed: %s%s", key, r, PMIx_Error_string(st),
                            st == PMIX_SUCCESS ? " (wrong type or length)" : "");
            if (v) PMIX_VALUE_RELEASE(v);
            return rc;
        }
        if (len) memcpy((char *)recv + (size_t)r * len, v->data.bo.bytes, len);
        PMIX_VALUE_RELEASE(v);
    }
    return WEFT_SUCCESS;
}

/* A rank's blob (its sealed UCX address), committed without a fence: PMIx
 * serves a peer's Get of it on demand (direct modex), so no server holds
 * every rank's address unless its ranks ask for them. Init's later fences
 * collect no data, so they do not carry it everywhere either. */
#define PMIX_ADDR_KEY "weft.addr"

static int pmix_put(weft_bootstrap_t *bs, const void *blob, size_t len, double deadline)
{
    (void)bs;
    (void)deadline;
    return put_commit(PMIX_ADDR_KEY, blob, len);
}

static int pmix_get(weft_bootstrap_t *bs, const int *ranks, int n, void **blobs, size_t *lens, double deadline)
{
    pmix_bs_t *p = bs->impl;
    int rc = WEFT_SUCCESS;
    for (int i = 0; i < n && rc == WEFT_SUCCESS; i++) {
        pmix_proc_t proc;
        pmix_value_t *v = NULL;
        pmix_info_t tinfo;
        int secs = deadline > 0 ? (int)(deadline - weft_wtime()) + 1 : 0;
        if (secs > 0) PMIX_INFO_LOAD(&tinfo, PMIX_TIMEOUT, &secs, PMIX_INT);
        PMIX_LOAD_PROCID(&proc, p->me.nspace, (pmix_rank_t)ranks[i]);
        pmix_status_t st = PMIx_Get(&proc, PMIX_ADDR_KEY, secs > 0 ? &tinfo : NULL, secs > 0 ? 1 : 0, &v);
        if (st != PMIX_SUCCESS || !v || v->type != PMIX_BYTE_OBJECT)
            rc = weft_error(st == PMIX_ERR_TIMEOUT ? WEFT_ERR_TIMEOUT : WEFT_ERR_BOOTSTRAP,
                            "PMIx get of rank %d's address failed: %s%s", ranks[i], PMIx_Error_string(st),
                            st == PMIX_SUCCESS ? " (wrong type)" : "");
        else if (!(blobs[i] = malloc(v->data.bo.size ? v->data.bo.size : 1)))
            rc = weft_error(WEFT_ERR_NO_MEMORY, "PMIx: out of memory");
        else {
            if (v->data.bo.size) memcpy(blobs[i], v->data.bo.bytes, v->data.bo.size);
            lens[i] = v->data.bo.size;
        }
        if (v) PMIX_VALUE_RELEASE(v);
    }
    if (rc != WEFT_SUCCESS)
        for (int i = 0; i < n; i++) {
            free(blobs[i]);
            blobs[i] = NULL;
        }
    return rc;
}

/* No data to exchange: a fence alone (no put, no get of every rank's key). */
static int pmix_barrier(weft_bootstrap_t *bs, double deadline)
{
    pmix_bs_t *p = bs->impl;
    char key[32];
    snprintf(key, sizeof(key), "barrier %u", p->seq++);
    return fence(p, bs->size, 0, key, deadline);
}

static void pmix_finalize(weft_bootstrap_t *bs, int graceful, double deadline)
{
    (void)graceful;
    /* A table query still out points at ptable_query: let it land first
     * (a second at most when there is no deadline: init failing). */
    double until = deadline > 0 ? deadline : weft_wtime() + 1.0;
    while (__atomic_load_n(&ptable_busy, __ATOMIC_ACQUIRE) && weft_wtime() < until)
        sched_yield();
    PMIx_Finalize(NULL, 0);
    if (ptable_ready && !__atomic_load_n(&ptable_busy, __ATOMIC_ACQUIRE)) {
        PMIX_QUERY_DESTRUCT(&ptable_query);
        ptable_ready = 0;
    }
    pthread_mutex_lock(&lost_lock);
    free(lost_noted);
    lost_noted = NULL;
    lost_noted_size = 0;
    pthread_mutex_unlock(&lost_lock);
    bs->impl = NULL;
}

static void pmix_abort(weft_bootstrap_t *bs, int code, const char *msg)
{
    (void)bs;
    PMIx_Abort(code, msg, NULL, 0);
}

static int get_uint(const pmix_proc_t *proc, const char *key, unsigned *out)
{
    pmix_value_t *v = NULL;
    pmix_status_t st = PMIx_Get(proc, key, NULL, 0, &v);
    if (st != PMIX_SUCCESS || !v) return -1;
    switch (v->type) {
    case PMIX_UINT32: *out = v->data.uint32; break;
    case PMIX_UINT16: *out = v->data.uint16; break;
    case PMIX_INT: *out = (unsigned)v->data.integer; break;
    case PMIX_UINT64: *out = (unsigned)v->data.uint64; break;
    default: PMIX_VALUE_RELEASE(v); return -1;
    }
    PMIX_VALUE_RELEASE(v);
    return 0;
}

int weft_bootstrap_pmix_init(weft_bootstrap_t *bs, double deadline)
{
    pmix_status_t st;
    pmix_proc_t wild;
    unsigned size = 0, lrank, lsize;
    int rc;
    (void)deadline;

    if ((rc = weft_pmix_load()) != WEFT_SUCCESS) return rc;
    memset(&g_pmix, 0, sizeof(g_pmix));
    if ((st = PMIx_Init(&g_pmix.me, NULL, 0)) != PMIX_SUCCESS)
        return weft_error(WEFT_ERR_BOOTSTRAP,
                          "PMIx_Init failed: %s (was this started by mpirun, prterun or srun --mpi=pmix?)",
                          PMIx_Error_string(st));
    PMIX_LOAD_PROCID(&wild, g_pmix.me.nspace, PMIX_RANK_WILDCARD);
    if (get_uint(&wild, PMIX_JOB_SIZE, &size) != 0 || size == 0) {
        PMIx_Finalize(NULL, 0);
        return weft_error(WEFT_ERR_BOOTSTRAP, "PMIx did not report the job size (PMIX_JOB_SIZE)");
    }
    bs->name = "pmix";
    bs->rank = (int)g_pmix.me.rank;
    bs->size = (int)size;
    bs->local_rank = get_uint(&g_pmix.me, PMIX_LOCAL_RANK, &lrank) == 0 ? (int)lrank : -1;
    bs->local_size = get_uint(&wild, PMIX_LOCAL_SIZE, &lsize) == 0 ? (int)lsize : -1;
    bs->allgather = pmix_allgather;
    bs->finalize = pmix_finalize;
    bs->abort = pmix_abort;
    bs->poll_lost = pmix_poll_lost;
    bs->barrier = pmix_barrier;
    bs->put = pmix_put;
    bs->get = pmix_get;
    bs->impl = &g_pmix;
    lost_queued = 0;
    free(lost_noted);
    lost_noted = calloc((size_t)size, 1);
    lost_noted_size = lost_noted ? (int)size : 0;
    ptable_off = 0;
    ptable_busy = 0;
    ptable_next = 0;
    register_lost_handler();
    return WEFT_SUCCESS;
}
