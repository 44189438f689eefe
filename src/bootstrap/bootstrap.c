/* Helpers every bootstrap shares, built on its fixed-length allgather. */
#include "bootstrap/bootstrap.h"

#include "weft_internal.h"

#include <stdlib.h>
#include <string.h>

/* Started by torchrun (its agent sets these for every worker). */
static int under_torchrun(void)
{
    const char *run = getenv("TORCHELASTIC_RUN_ID");
    return (run && *run) || getenv("TORCHELASTIC_USE_AGENT_STORE");
}

/* A launcher's variables that name more than one rank, when no bootstrap
 * took them: the job must not go on as singletons (each rank would run
 * alone as rank 0 of 1 and exit 0). WEFT_ERR_ARG naming what is missing,
 * or WEFT_SUCCESS when nothing names other ranks. */
static int several_ranks_named(void)
{
    static const char *const env_vars[] = {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
    /* other launchers' world size variables, with what weft needs to join them */
    static const struct {
        const char *var, *how;
    } launchers[] = {
        {"OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun without a PMIx server weft can reach (weft's PMIx support "
                                 "is missing from this build, or PMIX_* variables are unset)"},
        {"PMI_SIZE", "a PMI-1/2 launcher (MPICH's hydra, srun --mpi=pmi2): weft speaks PMIx; use srun --mpi=pmix, "
                     "Open MPI's mpirun, weftrun or torchrun"},
        {"SLURM_STEP_NUM_TASKS", "srun without --mpi=pmix"},
    };
    const char *ws = getenv("WORLD_SIZE"), *rk = getenv("RANK");
    if ((ws && *ws && strcmp(ws, "1")) || (rk && *rk && strcmp(rk, "0"))) {
        char missing[96] = "";
        size_t len = 0;
        for (size_t i = 0; i < sizeof(env_vars) / sizeof(env_vars[0]); i++) {
            const char *v = getenv(env_vars[i]);
            if (!v || !*v)
                len += (size_t)snprintf(missing + len, sizeof(missing) - len, "%s%s", len ? ", " : "", env_vars[i]);
        }
        return weft_error(WEFT_ERR_ARG,
                          "weft_init: RANK='%.16s' WORLD_SIZE='%.16s' name a job of several ranks, but %s %s unset or "
                          "empty: cannot reach rank 0's store (set MASTER_ADDR and MASTER_PORT as torchrun does, or "
                          "WEFT_BOOTSTRAP=single to run alone)",
                          rk ? rk : "(unset)", ws ? ws : "(unset)", missing, strchr(missing, ',') ? "are" : "is");
    }
    for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
        const char *v = getenv(launchers[i].var);
        if (v && *v && strcmp(v, "1"))
            return weft_error(WEFT_ERR_ARG,
                              "weft_init: %s=%.16s names a job of several ranks, but no bootstrap weft has reaches "
                              "them: %s (WEFT_BOOTSTRAP=single runs each process alone)",
                              launchers[i].var, v, launchers[i].how);
    }
    return WEFT_SUCCESS;
}

int weft_bootstrap_start(weft_bootstrap_t *bs, const char *want, double deadline)
{
    int is_auto = !strcmp(want, "auto"), is_env = !strcmp(want, "env");
    /* torchrun's variables come first: under `srun torchrun ...` the workers
     * also inherit the agent's PMIx variables, which name the agent, not them. */
    int torchrun = is_auto && under_torchrun() && weft_bootstrap_env_detected();
    if (!strcmp(want, "torchstore") || ((is_auto || is_env) && weft_bootstrap_torchstore_detected()))
        return weft_bootstrap_torchstore_init(bs, deadline);
    if (torchrun) return weft_bootstrap_env_init(bs, deadline);
    if (!strcmp(want, "pmix") || (is_auto && weft_bootstrap_pmix_detected()))
        return weft_bootstrap_pmix_init(bs, deadline);
    if (is_env || (is_auto && weft_bootstrap_env_detected())) return weft_bootstrap_env_init(bs, deadline);
    if (is_auto) {
        int rc = several_ranks_named();
        if (rc != WEFT_SUCCESS) return rc;
    }
    return weft_bootstrap_single_init(bs);
}

int weft_bootstrap_allgatherv(weft_bootstrap_t *bs, const void *send, size_t len, void **out, size_t **lens,
                              size_t *stride, double deadline)
{
    int rc;
    uint64_t mylen = len, maxlen = 0;
    uint64_t *all_lens = NULL;
    char *padded = NULL, *all = NULL;
    size_t *sizes = NULL;

    all_lens = malloc(sizeof(uint64_t) * (size_t)bs->size);
    sizes = malloc(sizeof(size_t) * (size_t)bs->size);
    if (!all_lens || !sizes) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "bootstrap: out of memory");
        goto out;
    }
    /* Round one: lengths; round two: blocks padded to the longest. */
    WEFT_CHECK_GOTO(bs->allgather(bs, &mylen, all_lens, sizeof(mylen), deadline), rc, out);
    for (int r = 0; r < bs->size; r++) {
        if (all_lens[r] > maxlen) maxlen = all_lens[r];
        sizes[r] = (size_t)all_lens[r];
    }
    padded = calloc(1, maxlen ? maxlen : 1);
    all = malloc(maxlen ? maxlen * (size_t)bs->size : 1);
    if (!padded || !all) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "bootstrap: out of memory for %d x %llu bytes", bs->size,
                        (unsigned long long)maxlen);
        goto out;
    }
    if (len) memcpy(padded, send, len);
    WEFT_CHECK_GOTO(bs->allgather(bs, padded, all, (size_t)maxlen, deadline), rc, out);
    *out = all;
    *lens = sizes;
    *stride = (size_t)maxlen;
    all = NULL;
    sizes = NULL;
out:
    free(all_lens);
    free(sizes);
    free(padded);
    free(all);
    return rc;
}

int weft_bootstrap_barrier(weft_bootstrap_t *bs, double deadline)
{
    if (bs->barrier) return bs->barrier(bs, deadline);
    char one = 1;
    char *all = malloc((size_t)bs->size);
    if (!all) return weft_error(WEFT_ERR_NO_MEMORY, "bootstrap barrier: out of memory");
    int rc = bs->allgather(bs, &one, all, 1, deadline);
    free(all);
    return rc;
}

int weft_bootstrap_gather(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline)
{
    if (bs->gather) return bs->gather(bs, send, recv, len, deadline);
    if (bs->rank == 0) return bs->allgather(bs, send, recv, len, deadline);
    void *all = malloc(len * (size_t)bs->size + 1);
    if (!all)
        return weft_error(WEFT_ERR_NO_MEMORY, "bootstrap gather: out of memory for %d x %zu bytes", bs->size, len);
    int rc = bs->allgather(bs, send, all, len, deadline);
    free(all);
    return rc;
}

int weft_bootstrap_bcast(weft_bootstrap_t *bs, const void *send, size_t len, void **out, size_t *out_len,
                         double deadline)
{
    void *all = NULL;
    size_t *lens = NULL, stride = 0;
    int rc;
    *out = NULL;
    *out_len = 0;
    if (bs->bcast) return bs->bcast(bs, send, len, out, out_len, deadline);
    /* Rank 0's block is the only one that is not empty: it comes first. */
    rc = weft_bootstrap_allgatherv(bs, send, bs->rank == 0 ? len : 0, &all, &lens, &stride, deadline);
    if (rc == WEFT_SUCCESS && bs->rank != 0) {
        *out_len = lens[0];
        *out = all; /* rank 0's block starts it */
        all = NULL;
    }
    free(all);
    free(lens);
    return rc;
}

int weft_bootstrap_put(weft_bootstrap_t *bs, const void *blob, size_t len, int everywhere, double deadline)
{
    if (bs->put && !everywhere) return bs->put(bs, blob, len, deadline);
    weft_bootstrap_release(bs);
    return weft_bootstrap_allgatherv(bs, blob, len, &bs->published, &bs->published_lens, &bs->published_stride,
                                     deadline);
}

int weft_bootstrap_get(weft_bootstrap_t *bs, const int *ranks, int n, void **blobs, size_t *lens, double deadline)
{
    for (int i = 0; i < n; i++) {
        blobs[i] = NULL;
        lens[i] = 0;
        if (ranks[i] < 0 || ranks[i] >= bs->size)
            return weft_error(WEFT_ERR_ARG, "bootstrap: no rank %d among %d", ranks[i], bs->size);
    }
    if (n < 1 || n > WEFT_BOOTSTRAP_GET_MAX)
        return weft_error(WEFT_ERR_ARG, "bootstrap: a fetch of %d blobs (1 to %d at a time)", n,
                          WEFT_BOOTSTRAP_GET_MAX);
    if (!bs->published && bs->get) return bs->get(bs, ranks, n, blobs, lens, deadline);
    if (!bs->published) return weft_error(WEFT_ERR_ARG, "bootstrap: rank %d's blob was never published", ranks[0]);
    for (int i = 0; i < n; i++) {
        size_t len = bs->published_lens[ranks[i]];
        if (!(blobs[i] = malloc(len ? len : 1))) {
            for (int j = 0; j < i; j++) {
                free(blobs[j]);
                blobs[j] = NULL;
            }
            return weft_error(WEFT_ERR_NO_MEMORY, "bootstrap: out of memory");
        }
        memcpy(blobs[i], (const char *)bs->published + (size_t)ranks[i] * bs->published_stride, len);
        lens[i] = len;
    }
    return WEFT_SUCCESS;
}

void weft_bootstrap_release(weft_bootstrap_t *bs)
{
    free(bs->published);
    free(bs->published_lens);
    bs->published = NULL;
    bs->published_lens = NULL;
    bs->published_stride = 0;
}
