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
