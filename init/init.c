/* weft_init / weft_finalize: configuration, bootstrap, UCX, world. The
 * top floor: the one file that composes every layer (src/, pt2pt/, coll/);
 * the state and the clock it fills in live in src/state.c. */
#include "bootstrap/bootstrap.h"
#include "request.h"
#include "schedule.h"
#include "topo/topo.h"
#include "weft_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static weft_bootstrap_t g_bs;

/* Everything after the bootstrap is the same for every way of starting. */
static int init_common(double deadline)
{
    int rc;
    weft_g.bs = &g_bs;
    weft_g.rank = g_bs.rank;
    weft_g.size = g_bs.size;
    weft_log_set_rank(g_bs.rank);
    WEFT_CHECK_GOTO(weft_liveness_init(g_bs.size), rc, fail);
    WEFT_CHECK_GOTO(weft_topo_node_map(&g_bs, deadline), rc, fail);
    /* the machine's ranks: simulated nodes (WEFT_NODE_ID, WEFT_RANKS_PER_NODE) share its CPUs */
    int host_ranks = g_bs.local_size > weft_g.machine_ranks ? g_bs.local_size : weft_g.machine_ranks;
    /* Before the transport: it asks UCX for an event fd only for a thread that will run. */
    weft_progress_thread_resolve(host_ranks);
    /* Spinning only helps when every rank of this host has a CPU; when
     * they share CPUs, a waiting rank must yield at once and soon sleep,
     * or it steals the time of the rank it waits for. */
    int oversubscribed = weft_g.cpu_sharers > weft_g.cpus_shared;
    if (weft_cfg.spin_before_yield < 0) weft_cfg.spin_before_yield = oversubscribed ? 1 : 2000;
    if (weft_cfg.wait_spin_us < 0)
        weft_cfg.wait_spin_us = oversubscribed ? WEFT_WAIT_SPIN_US_SHARED : WEFT_WAIT_SPIN_US_DEDICATED;
    if (oversubscribed)
        weft_info_log("%d ranks share this rank's %d CPUs: waits yield after %d polls and sleep after %d us "
                      "(WEFT_SPIN_BEFORE_YIELD, WEFT_WAIT_SPIN_US)",
                      weft_g.cpu_sharers, weft_g.cpus_shared, weft_cfg.spin_before_yield, weft_cfg.wait_spin_us);
    /* Before UCX reads its configuration: the RDMA port and GID index it should use. */
    weft_rdma_init(weft_g.local_rank, weft_p2p_ucx_has_verbs());
    WEFT_CHECK_GOTO(weft_p2p_init(&weft_g.p2p, &g_bs, deadline), rc, fail);
    WEFT_CHECK_GOTO(weft_comm_world_create(), rc, fail);
    WEFT_CHECK_GOTO(weft_sched_init(), rc, fail);
    WEFT_CHECK_GOTO(weft_ft_init(), rc, fail);
    WEFT_CHECK_GOTO(weft_coll_init(), rc, fail);
    weft_g.initialized = 1;
    weft_info_log("initialized: rank %d of %d (local %d of %d), bootstrap %s, UCX %s", weft_g.rank, weft_g.size,
                  weft_g.local_rank, weft_g.local_size, g_bs.name, weft_ucx_version());
    /* last: from here on the thread may run weft_progress() */
    if (weft_progress_thread_start() != WEFT_SUCCESS) weft_warn("%s; weft runs without it", weft_last_error());
    return WEFT_SUCCESS;
fail:
    weft_g.initialized = 0;
    weft_sched_finalize();
    weft_comm_world_destroy();
    weft_ft_finalize();
    weft_coll_finalize();
    if (weft_g.p2p) weft_p2p_finalize(weft_g.p2p, 0);
    weft_g.p2p = NULL;
    weft_sched_cleanup();
    g_bs.finalize(&g_bs, 0, 0);
    weft_bootstrap_release(&g_bs);
    weft_g.bs = NULL;
    weft_topo_node_map_free();
    weft_liveness_finalize();
    weft_rdma_finalize();
    return rc;
}

/* Every layer's WEFT_* variables, registered with config once (this file
 * is the top floor: it may call every layer). */
static void register_vars(void)
{
    static int done;
    if (done++) return;
    weft_coll_register_vars();
}

WEFT_API int weft_var_count(void)
{
    WEFT_API_ENTER();
    register_vars();
    return weft_config_var_count();
}

WEFT_API int weft_var_get(int index, const char **name, const char **type, const char **default_value,
                          const char **description)
{
    WEFT_API_ENTER();
    register_vars();
    return weft_config_var_get(index, name, type, default_value, description);
}

static int init_prologue(const char *fn)
{
    int rc;
    weft_error_clear();
    if (weft_g.initialized) return weft_error(WEFT_ERR_ALREADY, "%s: weft is already initialized", fn);
    register_vars();
    if ((rc = weft_config_load()) != WEFT_SUCCESS) return rc;
    weft_log_init();
    memset(&weft_g, 0, sizeof(weft_g));
    memset(&g_bs, 0, sizeof(g_bs));
    return WEFT_SUCCESS;
}

WEFT_API int weft_init(int *argc, char ***argv)
{
    WEFT_API_ENTER();
    (void)argc;
    (void)argv;
    int rc = init_prologue("weft_init");
    if (rc) return rc;
    double deadline = weft_deadline_from(weft_cfg.init_timeout, weft_wtime());
    if ((rc = weft_bootstrap_start(&g_bs, weft_cfg.bootstrap, deadline)) != WEFT_SUCCESS) return rc;
    return init_common(deadline);
}

WEFT_API int weft_init_oob(int rank, int size, weft_oob_allgather_fn allgather, void *ctx)
{
    WEFT_API_ENTER();
    int rc = init_prologue("weft_init_oob");
    if (rc) return rc;
    double deadline = weft_deadline_from(weft_cfg.init_timeout, weft_wtime());
    if ((rc = weft_bootstrap_oob_init(&g_bs, rank, size, allgather, ctx)) != WEFT_SUCCESS) return rc;
    return init_common(deadline);
}

/* ---- joining by a rendezvous handle ------------------------------------- */

/* Round 0 on the rendezvous's store: who is joining, and with which world. */
enum { JOIN_INITIALIZED = 1, JOIN_INVALID = 2 };
typedef struct {
    uint32_t magic;
    uint32_t flags;
    uint64_t world_id; /* the world's nonce through weft_prf64 (it stays secret); 0 without a world */
    int32_t world_rank;
    int32_t world_size;
} join_info_t;
#define JOIN_MAGIC    0x4a4f494eu /* "JOIN" */
#define JOIN_ID_LABEL UINT64_C(0x776f726c642d6964)

/* Why the joining processes cannot make one communicator (every member
 * computes the same from the same table), or WEFT_SUCCESS. */
static int join_verdict(const join_info_t *all, int size, int *members, const char *fn)
{
    int *none = malloc(sizeof(int) * (size_t)size), *other = malloc(sizeof(int) * (size_t)size);
    int nnone = 0, nother = 0, rc = WEFT_SUCCESS;
    uint64_t world = 0;
    if (!none || !other) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", fn);
        goto out;
    }
    for (int r = 0; r < size; r++) {
        if (all[r].magic != JOIN_MAGIC) {
            rc = weft_error(WEFT_ERR_BOOTSTRAP, "%s: rank %d sent no join record (another program's handle?)", fn, r);
            goto out;
        }
        if (all[r].flags & JOIN_INVALID) {
            rc = weft_error(WEFT_ERR_ARG, "%s: rank %d passed a NULL output pointer", fn, r);
            goto out;
        }
        if (!(all[r].flags & JOIN_INITIALIZED))
            none[nnone++] = r;
        else if (!world)
            world = all[r].world_id;
    }
    if (nnone == size) goto out; /* a new world */
    for (int r = 0; r < size; r++) {
        if ((all[r].flags & JOIN_INITIALIZED) && all[r].world_id != world) other[nother++] = r;
        members[r] = all[r].world_rank;
    }
    if (!nnone && !nother)
        for (int r = 0; r < size; r++)
            for (int q = 0; q < r; q++)
                if (members[q] == members[r]) {
                    rc = weft_error(WEFT_ERR_ARG, "%s: ranks %d and %d are one process (world rank %d)", fn, q, r,
                                    members[r]);
                    goto out;
                }
    if (nnone || nother) {
        char a[256] = "", b[256] = "";
        if (nnone) weft_format_ranks(a, sizeof(a), none, nnone);
        if (nother) weft_format_ranks(b, sizeof(b), other, nother);
        rc = weft_error(WEFT_ERR_ARG,
                        "%s: the %d joining processes are not in one weft world: %s%s%s%s%s. A process has one world "
                        "(the first join forms it, or weft_init): form it with a join of every process first",
                        fn, size, nnone ? a : "", nnone ? (nnone == 1 ? " has none yet" : " have none yet") : "",
                        nnone && nother ? "; " : "", nother ? b : "",
                        nother ? (nother == 1 ? " is in another world than the first initialised rank's"
                                              : " are in another world than the first initialised rank's")
                               : "");
    }
out:
    free(none);
    free(other);
    return rc;
}

WEFT_API int weft_comm_join(const weft_rendezvous_t *handle, int rank, int size, weft_options_t opts,
                            weft_comm_t *newcomm)
{
    WEFT_API_ENTER();
    static const char fn[] = "weft_comm_join";
    weft_rdv_info_t info;
    weft_bootstrap_t tmp_bs, *bs = &tmp_bs;
    join_info_t mine, *all = NULL;
    int *members = NULL, rc, initialized = weft_g.initialized;

    weft_error_clear();
    if (newcomm) *newcomm = WEFT_COMM_NULL;
    if ((rc = weft_rendezvous_parse(handle, &info, fn))) return rc;
    if (size < 1 || rank < 0 || rank >= size)
        return weft_error(WEFT_ERR_ARG, "%s: rank %d of %d: need 0 <= rank < size", fn, rank, size);
    if (opts && opts->magic != WEFT_OPTIONS_MAGIC)
        return weft_error(WEFT_ERR_ARG, "%s: %p is not a live options object", fn, (void *)opts);
    int fd = weft_rendezvous_take(handle);
    if (fd >= 0 && rank != 0) {
        close(fd);
        return weft_error(WEFT_ERR_ARG,
                          "%s: this process opened the rendezvous, so it serves its store and must join as rank 0, not "
                          "rank %d (the others cannot join it now)",
                          fn, rank);
    }
    if (!initialized) {
        if ((rc = init_prologue(fn))) {
            if (fd >= 0) close(fd);
            return rc;
        }
        bs = &g_bs;
    }
    memset(&tmp_bs, 0, sizeof(tmp_bs));
    double deadline = weft_deadline_from(weft_cfg.init_timeout, weft_wtime());
    if ((rc = weft_bootstrap_rendezvous_init(bs, &info, rank, size, fd, !initialized, deadline))) return rc;

    memset(&mine, 0, sizeof(mine));
    mine.magic = JOIN_MAGIC;
    mine.flags = (initialized ? JOIN_INITIALIZED : 0) | (newcomm ? 0 : JOIN_INVALID);
    mine.world_rank = initialized ? weft_g.rank : -1;
    mine.world_size = initialized ? weft_g.size : 0;
    mine.world_id = initialized ? weft_prf64(weft_g.world_nonce, JOIN_ID_LABEL, 0) | 1 : 0;
    all = malloc(sizeof(*all) * (size_t)size);
    members = malloc(sizeof(int) * (size_t)size);
    if (!all || !members) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory for %d ranks", fn, size);
        bs->finalize(bs, 0, 0);
        goto out;
    }
    if ((rc = bs->allgather(bs, &mine, all, sizeof(mine), deadline))) {
        bs->finalize(bs, 0, 0);
        goto out;
    }
    rc = join_verdict(all, size, members, fn);
    if (rc == WEFT_SUCCESS && !initialized) {
        /* Nobody has a world: these processes are it, over this store. */
        if ((rc = init_common(deadline)) == WEFT_SUCCESS) rc = weft_comm_dup(weft_g.world, opts, newcomm);
        goto out;
    }
    /* Everyone reached the same verdict: the store is no longer needed. */
    bs->finalize(bs, 1, deadline);
    if (rc == WEFT_SUCCESS) {
        /* The handle's secret is shared by exactly the joining processes:
         * their creation's tag. */
        int tag = (int)(((unsigned)info.secret[0] << 16 | (unsigned)info.secret[1] << 8 | info.secret[2]) &
                        (unsigned)WEFT_TAG_UB);
        rc = weft_comm_create_group(weft_g.world, members, size, tag, opts, newcomm);
    }
out:
    memset(&info, 0, sizeof(info));
    free(all);
    free(members);
    return rc;
}

/* Over the bootstrap while every rank is alive; among the survivors once
 * some are lost: the bootstrap's barrier cannot complete without them (the
 * env store fails it at once) or would wait for them. A rank that learns
 * of the loss only from the bootstrap's failure joins the survivors'. */
static int closing_barrier(double deadline)
{
    if (weft_lost_count == 0) {
        weft_bootstrap_set_idle_hook(weft_p2p_drop_unreceived); /* a late peer's flush may wait on this rank */
        int rc = weft_bootstrap_barrier(&g_bs, deadline);
        weft_bootstrap_set_idle_hook(NULL);
        if (rc == WEFT_SUCCESS) return rc;
        weft_liveness_poll(weft_wtime(), 0, 1);
        if (weft_lost_count == 0) return rc;
    }
    int w = weft_world_lost_rank();
    weft_info_log("weft_finalize: world rank %d %s lost (%s): the closing barrier is among the %s", w,
                  weft_lost_count == 1 ? "is" : "and others are", weft_rank_lost_why(w), "survivors");
    int rc = weft_ft_barrier(deadline);
    /* Its last messages (the decision) reach the others before the endpoints close. */
    return rc ? rc : weft_p2p_flush(deadline);
}

WEFT_API int weft_finalize(void)
{
    WEFT_API_ENTER();
    int rc = WEFT_SUCCESS;
    WEFT_CHECK_INIT("weft_finalize");
    weft_progress_thread_stop();
    double deadline = weft_deadline_from(weft_cfg.timeout, weft_wtime());
    weft_sched_finalize();
    weft_liveness_poll(weft_wtime(), 0, 1); /* the latest news of dead ranks */
    /* Every rank's sends to the live ranks are delivered before any rank
     * closes its endpoints (what was sent to a dead rank is given up). */
    int flush_rc = weft_p2p_flush(deadline);
    char flush_msg[1024] = "";
    if (flush_rc != WEFT_SUCCESS) snprintf(flush_msg, sizeof(flush_msg), "%s", weft_last_error());
    int barrier_rc = closing_barrier(deadline);
    weft_p2p_settle(deadline);
    if (flush_rc != WEFT_SUCCESS) {
        /* The flush's status is returned: the barrier's failure goes no further than this warning. */
        if (barrier_rc != WEFT_SUCCESS)
            weft_warn("weft_finalize: the closing barrier failed too: %s (%s)", weft_last_error(),
                      weft_strerror(barrier_rc));
        rc = weft_error(flush_rc, "%s", flush_msg);
    } else if (barrier_rc != WEFT_SUCCESS) {
        rc = barrier_rc;
    }
    weft_g.initialized = 0;
    weft_comm_world_destroy();
    weft_coll_finalize(); /* after the communicators released their collective state */
    weft_p2p_finalize(weft_g.p2p, deadline);
    weft_g.p2p = NULL;
    weft_sched_cleanup(); /* no transport writes into memory any more */
    g_bs.finalize(&g_bs, barrier_rc == WEFT_SUCCESS, deadline);
    weft_bootstrap_release(&g_bs);
    weft_g.bs = NULL;
    weft_request_cleanup();
    weft_liveness_finalize();
    weft_topo_node_map_free();
    weft_topo_release();
    weft_rdma_finalize();
    weft_log_set_rank(-1);
    return rc;
}
