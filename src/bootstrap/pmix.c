/* PMIx bootstrap: mpirun / prterun / srun --mpi=pmix. Each allgather is a
 * Put + Commit, a data-collecting fence, and a Get per rank. The fence is
 * nonblocking so weft's own deadline holds even if the server has none.
 *
 * Liveness: an event handler for process-termination events records the
 * ranks a launcher reports dead. Launchers differ: Open MPI's mpirun usually
 * kills the whole job when one rank dies, so the event may never arrive (or
 * arrive with the job's own end); then waits end at their deadline. */
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

/* PMIx calls the handler on its own thread: it queues, pmix_poll_lost
 * reports on the main thread. A full queue drops events (the deadline
 * still holds). */
#define LOST_QUEUE 64
static pthread_mutex_t lost_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    pmix_rank_t rank;
    pmix_status_t status;
} lost_queue[LOST_QUEUE];
static int lost_queued;

static void lost_push(const pmix_proc_t *proc, pmix_status_t status)
{
    if (!proc || !PMIX_CHECK_NSPACE(proc->nspace, g_pmix.me.nspace) || proc->rank >= PMIX_RANK_VALID ||
        proc->rank == g_pmix.me.rank)
        return;
    pthread_mutex_lock(&lost_lock);
    if (lost_queued < LOST_QUEUE) {
        lost_queue[lost_queued].rank = proc->rank;
        lost_queue[lost_queued].status = status;
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
            lost_push(info[i].value.data.proc, status);
            found = 1;
        } else if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROCS) && info[i].value.type == PMIX_DATA_ARRAY &&
                   info[i].value.data.darray && info[i].value.data.darray->type == PMIX_PROC) {
            const pmix_proc_t *procs = info[i].value.data.darray->array;
            for (size_t k = 0; k < info[i].value.data.darray->size; k++)
                lost_push(&procs[k], status);
            found = 1;
        }
    }
    if (!found) lost_push(source, status); /* older servers name the dead process as the source */
    if (cbfunc) cbfunc(PMIX_EVENT_NO_ACTION_TAKEN, NULL, 0, NULL, NULL, cbdata);
}

static void pmix_poll_lost(weft_bootstrap_t *bs)
{
    (void)bs;
    if (!__atomic_load_n(&lost_queued, __ATOMIC_ACQUIRE)) return; /* the common case: no lock */
    pthread_mutex_lock(&lost_lock);
    for (int i = 0; i < lost_queued; i++)
        weft_rank_lost((int)lost_queue[i].rank, "the launcher (PMIx) reports %s",
                       PMIx_Error_string(lost_queue[i].status));
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

static int pmix_allgather(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline)
{
    pmix_bs_t *p = bs->impl;
    pmix_status_t st;
    pmix_key_t key;
    pmix_value_t val;
    pmix_proc_t wild;
    pmix_info_t info[2];
    bool collect = true;
    int secs = deadline > 0 ? (int)(deadline - weft_wtime()) + 1 : 0;

    snprintf(key, sizeof(key), "weft.ag.%u", p->seq++);
    PMIX_VALUE_CONSTRUCT(&val);
    val.type = PMIX_BYTE_OBJECT;
    val.data.bo.bytes = (char *)(len ? send : "");
    val.data.bo.size = len;
    if ((st = PMIx_Put(PMIX_GLOBAL, key, &val)) != PMIX_SUCCESS || (st = PMIx_Commit()) != PMIX_SUCCESS)
        return weft_error(WEFT_ERR_BOOTSTRAP, "PMIx put/commit of %s failed: %s", key, PMIx_Error_string(st));

    PMIX_LOAD_PROCID(&wild, p->me.nspace, PMIX_RANK_WILDCARD);
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &secs, PMIX_INT);
    fence_done = 0;
    st = PMIx_Fence_nb(&wild, 1, info, secs > 0 ? 2 : 1, fence_cb, NULL);
    if (st != PMIX_SUCCESS)
        return weft_error(WEFT_ERR_BOOTSTRAP, "PMIx fence could not start: %s", PMIx_Error_string(st));
    while (!__atomic_load_n(&fence_done, __ATOMIC_ACQUIRE)) {
        if (deadline > 0 && weft_wtime() > deadline) {
            char missing[512];
            name_missing(p, bs->size, key, missing, sizeof(missing));
            return weft_error(WEFT_ERR_TIMEOUT,
                              "PMIx fence (%s) did not complete within the deadline: ranks that did not arrive: %s",
                              key, missing);
        }
        sched_yield();
    }
    if (fence_status != PMIX_SUCCESS)
        return weft_error(fence_status == PMIX_ERR_TIMEOUT ? WEFT_ERR_TIMEOUT : WEFT_ERR_BOOTSTRAP,
                          "PMIx fence (%s) failed: %s", key, PMIx_Error_string(fence_status));

    for (int r = 0; r < bs->size; r++) {
        pmix_proc_t proc;
        pmix_value_t *v = NULL;
        PMIX_LOAD_PROCID(&proc, p->me.nspace, (pmix_rank_t)r);
        st = PMIx_Get(&proc, key, NULL, 0, &v);
        if (st != PMIX_SUCCESS || !v || v->type != PMIX_BYTE_OBJECT || v->data.bo.size != len) {
            int rc = weft_error(WEFT_ERR_BOOTSTRAP, "PMIx get of %s from rank %d failed: %s%s", key, r,
                                PMIx_Error_string(st), st == PMIX_SUCCESS ? " (wrong type or length)" : "");
            if (v) PMIX_VALUE_RELEASE(v);
            return rc;
        }
        if (len) memcpy((char *)recv + (size_t)r * len, v->data.bo.bytes, len);
        PMIX_VALUE_RELEASE(v);
    }
    return WEFT_SUCCESS;
}

static void pmix_finalize(weft_bootstrap_t *bs, int graceful, double deadline)
{
    (void)graceful;
    (void)deadline;
    PMIx_Finalize(NULL, 0);
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
    (void)deadline;

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
    bs->impl = &g_pmix;
    lost_queued = 0;
    register_lost_handler();
    return WEFT_SUCCESS;
}
