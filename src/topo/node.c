/* Node map: which ranks share a node. Derived from one exchange of node
 * ids at init; node, leader and rail groupings are computed from it
 * locally. Host identity is a hash of the hostname and the kernel boot id
 * (WEFT_HOST_ID overrides it); WEFT_NODE_ID or WEFT_RANKS_PER_NODE simulate
 * several nodes on one machine for tests. */
#include "bootstrap/bootstrap.h"
#include "weft_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t fnv1a(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

/* The machine: hostname and boot id, whatever WEFT_HOST_ID says. */
static uint64_t machine_id(void)
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

uint64_t weft_topo_host_id(void)
{
    if (weft_cfg.host_id[0]) return fnv1a(UINT64_C(0xcbf29ce484222325), weft_cfg.host_id, strlen(weft_cfg.host_id));
    return machine_id();
}

typedef struct {
    uint64_t host;       /* host identity */
    uint64_t machine;    /* the machine (its CPUs), even when nodes are simulated */
    int64_t sim;         /* explicit node id, or -1 */
    uint64_t job;        /* hash of host, pid and start time: world rank 0's names the job */
    uint64_t nonce;      /* random: world rank 0's is the world communicator's nonce */
    uint64_t cfg;        /* weft_config_agree_hash(): the settings every rank must share */
    int64_t bad_node_id; /* 1: this rank's WEFT_NODE_ID is malformed (every rank fails, naming it) */
} node_key_t;

static void node_key(node_key_t *k)
{
    k->host = weft_topo_host_id();
    k->machine = machine_id();
    k->sim = -1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t pid = (uint64_t)getpid(), t = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    k->job = fnv1a(fnv1a(k->host, (const char *)&pid, sizeof(pid)), (const char *)&t, sizeof(t));
    k->nonce = weft_random64();
    k->cfg = weft_config_agree_hash();
    k->bad_node_id = 0;
    if (weft_cfg.node_id[0]) {
        char *end;
        errno = 0;
        long long v = strtoll(weft_cfg.node_id, &end, 10);
        if (errno || *end || v < 0 || end == weft_cfg.node_id) {
            k->bad_node_id = 1; /* said after the exchange, so the other ranks fail at once too */
            return;
        }
        k->sim = v;
        k->host = 0; /* the explicit id alone names the node */
    }
}

/* What the exchange shows wrong on some rank: every rank sees the same and
 * fails alike, at once. */
static int check_keys(weft_bootstrap_t *bs, const node_key_t *all, double deadline)
{
    int n = bs->size, nbad = 0, rc = WEFT_SUCCESS;
    int *bad = malloc(sizeof(int) * (size_t)n);
    uint64_t *cfg = malloc(sizeof(uint64_t) * (size_t)n);
    if (!bad || !cfg) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory for the node map of %d ranks", n);
        goto out;
    }
    for (int r = 0; r < n; r++) {
        if (all[r].bad_node_id) bad[nbad++] = r;
        cfg[r] = all[r].cfg;
    }
    if (nbad) {
        char ranks[160], here[80] = "";
        weft_format_ranks(ranks, sizeof(ranks), bad, nbad);
        if (all[bs->rank].bad_node_id) weft_escape(here, sizeof(here), weft_cfg.node_id, strlen(weft_cfg.node_id));
        rc = weft_error(WEFT_ERR_ARG, "WEFT_NODE_ID is not a non-negative integer on %s%s%s%s", ranks,
                        here[0] ? " (here: '" : "", here, here[0] ? "')" : "");
        goto out;
    }
    rc = weft_config_agree_check(bs, cfg, deadline);
out:
    free(bad);
    free(cfg);
    return rc;
}

size_t weft_topo_node_record(void *out, size_t cap, uint64_t machine, int64_t node_id)
{
    node_key_t k;
    if (cap < sizeof(k)) return 0;
    node_key(&k);
    k.host = 0;
    k.machine = machine;
    k.sim = node_id;
    k.bad_node_id = 0;
    memcpy(out, &k, sizeof(k));
    return sizeof(k);
}

void weft_topo_node_map_free(void)
{
    free(weft_g.node_of);
    weft_g.node_of = NULL;
}

int weft_topo_node_map(weft_bootstrap_t *bs, double deadline)
{
    int rc, n = bs->size;
    node_key_t mine, *all = NULL;
    int *host_rank = NULL;

    node_key(&mine);
    all = malloc(sizeof(*all) * (size_t)n);
    host_rank = malloc(sizeof(int) * (size_t)n);
    weft_g.node_of = malloc(sizeof(int) * (size_t)n);
    if (!all || !host_rank || !weft_g.node_of) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory for the node map of %d ranks", n);
        goto out;
    }
    WEFT_CHECK_GOTO(bs->allgather(bs, &mine, all, sizeof(mine), deadline), rc, out);
    WEFT_CHECK_GOTO(check_keys(bs, all, deadline), rc, out);
    /* With simulated nodes, a rank's position among its host's ranks decides its node. */
    for (int r = 0; r < n; r++) {
        host_rank[r] = 0;
        for (int q = 0; q < r; q++)
            if (all[q].host == all[r].host && all[q].sim == all[r].sim) host_rank[r]++;
    }
    int k = weft_cfg.ranks_per_node;
    int nnodes = 0;
    for (int r = 0; r < n; r++) {
        weft_g.node_of[r] = -1;
        for (int q = 0; q < r; q++) {
            int same = all[q].host == all[r].host && all[q].sim == all[r].sim &&
                       (k <= 0 || host_rank[q] / k == host_rank[r] / k);
            if (same) {
                weft_g.node_of[r] = weft_g.node_of[q];
                break;
            }
        }
        if (weft_g.node_of[r] < 0) weft_g.node_of[r] = nnodes++;
    }
    weft_g.nnodes = nnodes;
    weft_g.job_id = all[0].job;
    weft_g.world_nonce = all[0].nonce;
    weft_g.node = weft_g.node_of[bs->rank];
    int lr = 0, ls = 0;
    for (int r = 0; r < n; r++)
        if (weft_g.node_of[r] == weft_g.node) {
            if (r < bs->rank) lr++;
            ls++;
        }
    int simulated = k > 0 || weft_cfg.node_id[0];
    if (!simulated && bs->local_rank >= 0 && bs->local_size > 0) {
        if (bs->local_rank >= bs->local_size) {
            rc = weft_error(WEFT_ERR_ARG, "local rank %d is not below local size %d (LOCAL_RANK/LOCAL_WORLD_SIZE?)",
                            bs->local_rank, bs->local_size);
            goto out;
        }
        if (bs->local_size != ls)
            weft_info_log("the launcher says %d local ranks, host grouping finds %d; using the launcher's",
                          bs->local_size, ls);
        lr = bs->local_rank;
        ls = bs->local_size;
    }
    weft_g.local_rank = lr;
    weft_g.local_size = ls;
    weft_g.machine_ranks = 0;
    for (int r = 0; r < n; r++)
        weft_g.machine_ranks += all[r].machine == mine.machine;
    rc = WEFT_SUCCESS;
out:
    free(all);
    free(host_rank);
    if (rc) weft_topo_node_map_free();
    return rc;
}

WEFT_API int weft_node_info(int *node, int *nnodes)
{
    WEFT_API_ENTER();
    WEFT_CHECK_INIT("weft_node_info");
    if (!node || !nnodes) return weft_error(WEFT_ERR_ARG, "weft_node_info: NULL output pointer");
    *node = weft_g.node;
    *nnodes = weft_g.nnodes;
    return WEFT_SUCCESS;
}
