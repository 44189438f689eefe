/* Node map: which ranks share a host. Host identity is a hash of the
 * hostname and the kernel boot id (containers on one host with equal
 * hostnames still differ by boot id only if they are separate kernels). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "weft_internal.h"

static uint64_t fnv1a(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

uint64_t weft_topo_host_id(void)
{
    char host[256] = {0}, boot[64] = {0};
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    gethostname(host, sizeof(host) - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof(boot), f)) boot[0] = '\0';
        fclose(f);
    }
    h = fnv1a(h, host, strlen(host));
    h = fnv1a(h, "/", 1);
    return fnv1a(h, boot, strcspn(boot, "\n"));
}

int weft_topo_local_ranks(weft_bootstrap_t *bs, double deadline, int *local_rank, int *local_size)
{
    if (bs->local_rank >= 0 && bs->local_size > 0) {
        if (bs->local_rank >= bs->local_size)
            return weft_error(WEFT_ERR_ARG, "local rank %d is not below local size %d (LOCAL_RANK/LOCAL_WORLD_SIZE?)",
                              bs->local_rank, bs->local_size);
        *local_rank = bs->local_rank;
        *local_size = bs->local_size;
        return WEFT_SUCCESS;
    }
    uint64_t mine = weft_topo_host_id();
    uint64_t *all = malloc(sizeof(uint64_t) * (size_t)bs->size);
    if (!all) return weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory for the node map");
    int rc = bs->allgather(bs, &mine, all, sizeof(mine), deadline);
    if (rc == WEFT_SUCCESS) {
        int lr = 0, ls = 0;
        for (int r = 0; r < bs->size; r++)
            if (all[r] == mine) {
                if (r < bs->rank) lr++;
                ls++;
            }
        *local_rank = lr;
        *local_size = ls;
    }
    free(all);
    return rc;
}
