/* Node map: which ranks share a node. Derived from one exchange of node
 * ids at init; node, leader and rail groupings are computed from it
 * locally. Host identity is a hash of the hostname and the kernel boot id
 * (WEFT_HOST_ID overrides it); WEFT_NODE_ID or WEFT_RANKS_PER_NODE simulate
 * several nodes on one machine for tests. */
#include "bootstrap/bootstrap.h"
#include "weft_internal.h"

#include <errno.h>
#include <sched.h>
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
    int16_t cpu_lo;      /* this rank's CPUs (sched_getaffinity): the lowest, */
    int16_t cpu_hi;      /* the highest */
    int16_t cpus;        /* and how many (0: unknown) */
    int16_t pad;
} node_key_t;
/* The UCX addresses stay the first exchange of init over 64 bytes (test_init garbles that one). */
_Static_assert(sizeof(node_key_t) <= 64, "the node map's key outgrew 64 bytes");

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
    k->cpu_lo = k->cpu_hi = k->pad = 0;
    k->cpus = 0; /* unknown */
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && (k->cpus = (int16_t)CPU_COUNT(&set)) > 0) {
        while (!CPU_ISSET(k->cpu_lo, &set))
            k->cpu_lo++;
        for (k->cpu_hi = CPU_SETSIZE - 1; !CPU_ISSET(k->cpu_hi, &set);)
            k->cpu_hi--;
    }
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

/* ---- rank 0's computation ----------------------------------------------------
 * Every rank sends its record to rank 0 (a gather); rank 0 computes the
 * node of every rank and the machine of every rank, and broadcasts them
 * compressed with its verdict. Each rank then derives its local rank and
 * size, and the count of ranks on its machine. Nothing here is quadratic,
 * and no rank but rank 0 receives more than the compressed maps. */

/* A small open-addressing map from up to three 64-bit words to an int. */
typedef struct {
    uint64_t k[3];
    int value, used;
} slot_t;

typedef struct {
    slot_t *slots;
    size_t mask;
} idmap_t;

static int idmap_init(idmap_t *m, int n)
{
    size_t cap = 16;
    while (cap < 2 * (size_t)n)
        cap *= 2;
    m->slots = calloc(cap, sizeof(*m->slots));
    m->mask = cap - 1;
    return m->slots ? 0 : -1;
}

/* The value stored under k, or stores `fresh` there and returns it. */
static int idmap_get(idmap_t *m, uint64_t a, uint64_t b, uint64_t c, int fresh, int *is_new)
{
    uint64_t h = fnv1a(fnv1a(fnv1a(UINT64_C(0xcbf29ce484222325), (const char *)&a, 8), (const char *)&b, 8),
                       (const char *)&c, 8);
    for (size_t i = (size_t)h & m->mask;; i = (i + 1) & m->mask) {
        slot_t *s = &m->slots[i];
        if (!s->used) {
            s->used = 1;
            s->k[0] = a, s->k[1] = b, s->k[2] = c;
            s->value = fresh;
            *is_new = 1;
            return fresh;
        }
        if (s->k[0] == a && s->k[1] == b && s->k[2] == c) {
            *is_new = 0;
            return s->value;
        }
    }
}

/* node_of (nodes numbered by first rank; with WEFT_RANKS_PER_NODE a
 * rank's position among its host's ranks splits the host) and machine_of. */
static int compute_maps(const node_key_t *all, int n, int k, int *node_of, int *machine_of, int *nnodes)
{
    idmap_t hosts = {0}, nodes = {0}, machines = {0};
    int *host_count = malloc(sizeof(int) * (size_t)n), nh = 0, nn = 0, nm = 0, fresh;
    int rc = idmap_init(&hosts, n) || idmap_init(&nodes, n) || idmap_init(&machines, n) || !host_count ? -1 : 0;
    for (int r = 0; r < n && rc == 0; r++) {
        int h = idmap_get(&hosts, all[r].host, (uint64_t)all[r].sim, 0, nh, &fresh);
        if (fresh) host_count[nh++] = 0;
        int sub = k > 0 ? host_count[h] / k : 0;
        host_count[h]++;
        node_of[r] = idmap_get(&nodes, (uint64_t)h, (uint64_t)sub, 1, nn, &fresh);
        nn += fresh;
        machine_of[r] = idmap_get(&machines, all[r].machine, 0, 2, nm, &fresh);
        nm += fresh;
    }
    *nnodes = nn;
    free(hosts.slots);
    free(nodes.slots);
    free(machines.slots);
    free(host_count);
    return rc;
}

/* A map v[0..n-1] of small ids, compressed: "runs" (first id, run length,
 * count): `count` runs of `run length` equal ids, first, first + 1, ... So
 * ranks placed in blocks of equal nodes take one triple, ranks dealt
 * round-robin over M nodes one per round, and anything else at most the
 * plain list (form 0). Returns the words written (out: 1 + n words). */
enum { MAP_PLAIN = 0, MAP_RUNS = 1 };

static size_t map_encode(const int *v, int n, uint32_t *out)
{
    size_t w = 1;
    out[0] = MAP_RUNS;
    for (int i = 0; i < n;) {
        int len = 1;
        while (i + len < n && v[i + len] == v[i])
            len++;
        /* extend the previous triple when this run continues its progression */
        if (w > 1 && out[w - 2] == (uint32_t)len && out[w - 3] + out[w - 1] == (uint32_t)v[i]) {
            out[w - 1]++;
        } else if (w + 3 > 1 + (size_t)n) {
            w = SIZE_MAX; /* longer than the plain list */
            break;
        } else {
            out[w++] = (uint32_t)v[i];
            out[w++] = (uint32_t)len;
            out[w++] = 1;
        }
        i += len;
    }
    if (w != SIZE_MAX) return w;
    out[0] = MAP_PLAIN;
    for (int i = 0; i < n; i++)
        out[1 + i] = (uint32_t)v[i];
    return 1 + (size_t)n;
}

/* The inverse, checked: every id < limit, exactly n entries. 0 or -1. */
static int map_decode(const uint32_t *w, size_t nw, int n, int limit, int *v)
{
    if (nw < 1) return -1;
    if (w[0] == MAP_PLAIN) {
        if (nw != 1 + (size_t)n) return -1;
        for (int i = 0; i < n; i++) {
            if (w[1 + i] >= (uint32_t)limit) return -1;
            v[i] = (int)w[1 + i];
        }
        return 0;
    }
    if (w[0] != MAP_RUNS || (nw - 1) % 3) return -1;
    size_t at = 0;
    for (size_t t = 1; t < nw; t += 3) {
        uint64_t first = w[t], len = w[t + 1], count = w[t + 2];
        if (!len || !count || first + count > (uint64_t)limit || at + len * count > (size_t)n) return -1;
        for (uint64_t c = 0; c < count; c++)
            for (uint64_t j = 0; j < len; j++)
                v[at++] = (int)(first + c);
    }
    return at == (size_t)n ? 0 : -1;
}

enum { VERDICT_OK = 0, VERDICT_BAD_NODE_ID = 1, VERDICT_SETTINGS = 2 };
#define NODEMAP_MAGIC 0x57464e4du /* "WFNM" */

/* What rank 0 broadcasts: this header, then the node map's words, the
 * machine map's, the CPU sharers' and the shared CPUs' (cpu_sharing), then
 * (a bad WEFT_NODE_ID) the ranks as text. */
typedef struct {
    uint32_t magic, verdict;
    uint64_t job, nonce;
    uint32_t size, nnodes, nmachines;
    uint32_t node_words, machine_words, sharers_words, cpus_words, text_len;
} map_hdr_t;

/* Which ranks share a rank's CPUs, and how many CPUs they may run on
 * together: the ranks of its machine whose CPU ranges overlap its own; the
 * span of their ranges, at most the sum of their CPUs (ranks bound to
 * interleaved CPUs share none) and the machine's. Ranks bound one per core
 * share with none; unbound ranks with every rank of the machine; ranks
 * started under one taskset with each other. A rank whose CPUs are unknown
 * counts as sharing every CPU. Rank 0 works it out per distinct CPU range
 * of each machine (ranks sorted by machine and range), so a machine of m
 * ranks over d ranges costs m log m + d^2. */
static const node_key_t *sort_keys;
static int range_cmp(const void *a, const void *b)
{
    const node_key_t *x = &sort_keys[*(const int *)a], *y = &sort_keys[*(const int *)b];
    if (x->machine != y->machine) return x->machine < y->machine ? -1 : 1;
    if (x->cpus != y->cpus) return x->cpus < y->cpus ? -1 : 1;
    if (x->cpu_lo != y->cpu_lo) return x->cpu_lo < y->cpu_lo ? -1 : 1;
    return (x->cpu_hi > y->cpu_hi) - (x->cpu_hi < y->cpu_hi);
}

static int same_range(const node_key_t *x, const node_key_t *y)
{
    return x->machine == y->machine && x->cpus == y->cpus && x->cpu_lo == y->cpu_lo && x->cpu_hi == y->cpu_hi;
}

static int cpu_sharing(const node_key_t *all, int n, int *sharers_of, int *cpus_of)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int *order = malloc(sizeof(int) * (size_t)n), *first = malloc(sizeof(int) * ((size_t)n + 1)), ng = 0;
    if (!order || !first) {
        free(order);
        free(first);
        return -1;
    }
    for (int r = 0; r < n; r++)
        order[r] = r;
    sort_keys = all;
    qsort(order, (size_t)n, sizeof(int), range_cmp);
    for (int i = 0; i < n; i++) /* groups of equal (machine, range): order[first[g] .. first[g + 1]) */
        if (i == 0 || !same_range(&all[order[i]], &all[order[i - 1]])) first[ng++] = i;
    first[ng] = n;
    for (int g = 0, m0 = 0; g < ng; g++) {
        const node_key_t *mine = &all[order[first[g]]];
        if (g > 0 && all[order[first[g]]].machine != all[order[first[g - 1]]].machine) m0 = g;
        int lo = mine->cpu_lo, hi = mine->cpu_hi, sharers = 0;
        long sum = 0;
        for (int h = m0; h < ng && all[order[first[h]]].machine == mine->machine; h++) {
            const node_key_t *k = &all[order[first[h]]];
            int count = first[h + 1] - first[h], any = k->cpus <= 0 || mine->cpus <= 0;
            if (!any && (k->cpu_hi < mine->cpu_lo || k->cpu_lo > mine->cpu_hi)) continue;
            sharers += count;
            sum += (long)count * (any ? online : k->cpus);
            if (!any && k->cpu_lo < lo) lo = k->cpu_lo;
            if (!any && k->cpu_hi > hi) hi = k->cpu_hi;
        }
        long cpus = mine->cpus > 0 ? hi - lo + 1 : online;
        if (sum < cpus) cpus = sum;
        if (online > 0 && online < cpus) cpus = online;
        if (cpus < 1) cpus = 1;
        if (cpus > 65535) cpus = 65535;
        for (int i = first[g]; i < first[g + 1]; i++) {
            sharers_of[order[i]] = sharers > 0 ? sharers : 1;
            cpus_of[order[i]] = (int)cpus;
        }
    }
    free(order);
    free(first);
    return 0;
}

/* Rank 0: the verdict and the maps, as the broadcast's bytes (malloc'd). */
static int rank0_compute(const node_key_t *all, int n, void **out, size_t *out_len)
{
    int *node_of = malloc(sizeof(int) * (size_t)n), *machine_of = malloc(sizeof(int) * (size_t)n);
    int *bad = malloc(sizeof(int) * (size_t)n), nbad = 0, nnodes = 0, nmachines = 0, rc = WEFT_SUCCESS;
    int *sharers_of = malloc(sizeof(int) * (size_t)n), *cpus_of = malloc(sizeof(int) * (size_t)n);
    uint32_t *words = malloc(sizeof(uint32_t) * (4 * (size_t)n + 4)); /* four maps, each at most 1 + n words */
    char text[160] = "";
    map_hdr_t h = {.magic = NODEMAP_MAGIC, .job = all[0].job, .nonce = all[0].nonce, .size = (uint32_t)n};
    uint8_t *blob = NULL;

    if (!node_of || !machine_of || !bad || !words || !sharers_of || !cpus_of) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory for the node map of %d ranks", n);
        goto out;
    }
    for (int r = 0; r < n; r++) {
        if (all[r].bad_node_id) bad[nbad++] = r;
        if (all[r].cfg != all[0].cfg) h.verdict = VERDICT_SETTINGS;
    }
    if (nbad) {
        h.verdict = VERDICT_BAD_NODE_ID;
        weft_format_ranks(text, sizeof(text), bad, nbad);
        h.text_len = (uint32_t)strlen(text);
    } else if (h.verdict == VERDICT_OK) {
        if (compute_maps(all, n, weft_cfg.ranks_per_node, node_of, machine_of, &nnodes) ||
            cpu_sharing(all, n, sharers_of, cpus_of)) {
            rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory for the node map of %d ranks", n);
            goto out;
        }
        for (int r = 0; r < n; r++)
            if (machine_of[r] >= nmachines) nmachines = machine_of[r] + 1;
        h.nnodes = (uint32_t)nnodes;
        h.nmachines = (uint32_t)nmachines;
        h.node_words = (uint32_t)map_encode(node_of, n, words);
        h.machine_words = (uint32_t)map_encode(machine_of, n, words + h.node_words);
        h.sharers_words = (uint32_t)map_encode(sharers_of, n, words + h.node_words + h.machine_words);
        h.cpus_words = (uint32_t)map_encode(cpus_of, n, words + h.node_words + h.machine_words + h.sharers_words);
    }
    size_t nwords = (size_t)h.node_words + h.machine_words + h.sharers_words + h.cpus_words;
    size_t len = sizeof(h) + 4 * nwords + h.text_len;
    if (!(blob = malloc(len))) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory for the node map of %d ranks", n);
        goto out;
    }
    memcpy(blob, &h, sizeof(h));
    memcpy(blob + sizeof(h), words, 4 * nwords);
    memcpy(blob + len - h.text_len, text, h.text_len);
    *out = blob;
    *out_len = len;
out:
    free(node_of);
    free(machine_of);
    free(sharers_of);
    free(cpus_of);
    free(bad);
    free(words);
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

/* Every rank: applies rank 0's broadcast (verdict, maps). */
static int apply_map(weft_bootstrap_t *bs, const node_key_t *mine, const uint8_t *blob, size_t len, double deadline)
{
    map_hdr_t h;
    int n = bs->size, *machine_of = NULL, *sharers_of = NULL, *cpus_of = NULL, rc = WEFT_SUCCESS;

    if (len < sizeof(h)) goto bad;
    memcpy(&h, blob, sizeof(h));
    if (h.magic != NODEMAP_MAGIC || h.size != (uint32_t)n ||
        len != sizeof(h) + 4 * ((size_t)h.node_words + h.machine_words + h.sharers_words + h.cpus_words) + h.text_len)
        goto bad;
    if (h.verdict == VERDICT_SETTINGS) return weft_config_agree_fail(bs, deadline);
    if (h.verdict == VERDICT_BAD_NODE_ID) {
        char here[80] = "";
        if (mine->bad_node_id) weft_escape(here, sizeof(here), weft_cfg.node_id, strlen(weft_cfg.node_id));
        return weft_error(WEFT_ERR_ARG, "WEFT_NODE_ID is not a non-negative integer on %.*s%s%s%s",
                          (int)(h.text_len < 160 ? h.text_len : 160), (const char *)blob + len - h.text_len,
                          here[0] ? " (here: '" : "", here, here[0] ? "')" : "");
    }
    if (h.verdict != VERDICT_OK || !h.nnodes || h.nnodes > (uint32_t)n || !h.nmachines || h.nmachines > (uint32_t)n)
        goto bad;
    weft_g.node_of = malloc(sizeof(int) * (size_t)n);
    machine_of = malloc(sizeof(int) * (size_t)n);
    sharers_of = malloc(sizeof(int) * (size_t)n);
    cpus_of = malloc(sizeof(int) * (size_t)n);
    if (!weft_g.node_of || !machine_of || !sharers_of || !cpus_of) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory for the node map of %d ranks", n);
        goto out;
    }
    const uint32_t *w = (const uint32_t *)(const void *)(blob + sizeof(h));
    size_t nwords = (size_t)h.node_words + h.machine_words + h.sharers_words + h.cpus_words;
    uint32_t *words = malloc(4 * nwords + 4);
    if (!words) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory for the node map of %d ranks", n);
        goto out;
    }
    memcpy(words, w, 4 * nwords); /* aligned */
    const uint32_t *ws = words + h.node_words + h.machine_words;
    int ok = !map_decode(words, h.node_words, n, (int)h.nnodes, weft_g.node_of) &&
             !map_decode(words + h.node_words, h.machine_words, n, (int)h.nmachines, machine_of) &&
             !map_decode(ws, h.sharers_words, n, n + 1, sharers_of) &&
             !map_decode(ws + h.sharers_words, h.cpus_words, n, 65536, cpus_of);
    free(words);
    if (!ok) goto bad;
    weft_g.nnodes = (int)h.nnodes;
    weft_g.job_id = h.job;
    weft_g.world_nonce = h.nonce;
    weft_g.node = weft_g.node_of[bs->rank];
    int lr = 0, ls = 0, mr = 0, my_machine = machine_of[bs->rank];
    for (int r = 0; r < n; r++) {
        if (weft_g.node_of[r] == weft_g.node) {
            if (r < bs->rank) lr++;
            ls++;
        }
        mr += machine_of[r] == my_machine;
    }
    int simulated = weft_cfg.ranks_per_node > 0 || weft_cfg.node_id[0];
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
    weft_g.machine_ranks = mr;
    weft_g.cpu_sharers = sharers_of[bs->rank] > 0 ? sharers_of[bs->rank] : 1;
    weft_g.cpus_shared = cpus_of[bs->rank] > 0 ? cpus_of[bs->rank] : 1;
    goto out;
bad:
    rc = weft_error(WEFT_ERR_BOOTSTRAP,
                    "weft_init: rank 0's node map (%zu bytes) is not what this weft writes: do all ranks run the "
                    "same weft?",
                    len);
out:
    free(machine_of);
    free(sharers_of);
    free(cpus_of);
    return rc;
}

int weft_topo_node_map(weft_bootstrap_t *bs, double deadline)
{
    int rc, n = bs->size;
    node_key_t mine, *all = NULL;
    void *blob = NULL;
    size_t len = 0;

    node_key(&mine);
    if (bs->rank == 0 && !(all = malloc(sizeof(*all) * (size_t)n))) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory for the node map of %d ranks", n);
        goto out;
    }
    WEFT_CHECK_GOTO(weft_bootstrap_gather(bs, &mine, all, sizeof(mine), deadline), rc, out);
    if (bs->rank == 0) WEFT_CHECK_GOTO(rank0_compute(all, n, &blob, &len), rc, send);
send:
    /* rank 0 broadcasts even when it failed (an empty map): the others must not wait for it */
    {
        void *got = NULL;
        size_t got_len = 0;
        int brc = weft_bootstrap_bcast(bs, blob, len, &got, &got_len, deadline);
        if (rc == WEFT_SUCCESS) rc = brc;
        if (rc == WEFT_SUCCESS)
            rc = apply_map(bs, &mine, bs->rank == 0 ? blob : got, bs->rank == 0 ? len : got_len, deadline);
        free(got);
    }
out:
    free(all);
    free(blob);
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
