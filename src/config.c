/* Every WEFT_* runtime variable is declared once: the runtime's here, each
 * collective component's in its descriptor (coll/). weft_info prints them
 * all, and weft_config_load() is the only place that reads them. */
#include "bootstrap/bootstrap.h"
#include "weft_internal.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

weft_config_t weft_cfg;

#define FIELD(f) &weft_cfg.f
#define STR_(x)  #x
#define STR(x)   STR_(x)

static const weft_var_t vars[] = {
    {"WEFT_BOOTSTRAP", WEFT_VAR_STRING, "auto",
     "how ranks find each other: auto (torchrun's workers: its agent's store (torchstore) or env; then PMIx, then "
     "RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (env), then a singleton), pmix, torchstore, env (torchstore when "
     "TORCHELASTIC_USE_AGENT_STORE=True), single",
     FIELD(bootstrap), sizeof(weft_cfg.bootstrap)},
    {"WEFT_TIMEOUT", WEFT_VAR_DOUBLE, "600",
     "default deadline in seconds of every wait (communicators inherit it; 0 disables deadlines)", FIELD(timeout), 0},
    {"WEFT_INIT_TIMEOUT", WEFT_VAR_DOUBLE, "120",
     "deadline in seconds for all ranks to arrive at init (resolving MASTER_ADDR and reaching the store included); "
     "the error names the missing ranks, or what was tried",
     FIELD(init_timeout), 0},
    {"WEFT_EAGER_CONNECT", WEFT_VAR_BOOL, "0", "create every UCX endpoint at init instead of on first use",
     FIELD(eager_connect), 0},
    {"WEFT_ADDRESSES_AT_INIT", WEFT_VAR_INT | WEFT_VAR_AGREE, "256",
     "worlds of at most this many ranks give every rank every UCX worker address at init (an allgather); larger "
     "ones publish them and a rank fetches a peer's when it first makes an endpoint to it (docs/SCALING.md: under "
     "the env bootstrap, a rank that outlives rank 0 then reaches only peers it had talked to)",
     FIELD(addresses_at_init), 0},
    {"WEFT_PEER_FAILURE", WEFT_VAR_BOOL, "0",
     "ask UCX to detect failed peers (endpoint error handling) so waits on a dead rank fail before their deadline; "
     "off by default because UCX 1.13's shared-memory transports cannot detect failures and UCX then moves "
     "traffic to TCP (kept then also in a job on one machine, where weft otherwise leaves tcp out)",
     FIELD(peer_failure), 0},
    {"WEFT_LOG_LEVEL", WEFT_VAR_LOGLEVEL, "warn", "error, warn, info, debug or trace", FIELD(log_level), 0},
    {"WEFT_SPIN_BEFORE_YIELD", WEFT_VAR_INT_AUTO, "auto",
     "empty progress polls before a waiting rank yields its core; auto: 2000, or 1 when more of this machine's ranks "
     "may run on this rank's CPUs than it has (oversubscribed; ranks of simulated nodes on it count together); a "
     "blocking shared-memory collective also polls inline for this many polls (at most 4096) before the ordinary "
     "wait takes over",
     FIELD(spin_before_yield), 0},
    {"WEFT_WAIT_SPIN_US", WEFT_VAR_INT_AUTO, "auto",
     "microseconds a blocking wait polls without news before it sleeps until UCX's event fd fires (while a "
     "shared-memory operation is pending it naps, and past 1 ms, unless oversubscribed, sleeps until a peer's flag "
     "rings its futex; while the progress thread has other work, until it completes the request), "
     "its deadline or the next liveness check; auto: " STR(WEFT_WAIT_SPIN_US_DEDICATED) ", or " STR(
         WEFT_WAIT_SPIN_US_SHARED) " when the ranks bound to this rank's CPUs outnumber them (weft_info shows which "
                                   "is in effect; docs/PERFORMANCE.md section 5 has the measurement)",
     FIELD(wait_spin_us), 0},
    {"WEFT_PROGRESS_THREAD", WEFT_VAR_STRING, "auto",
     "auto, on, off, or N (on, polling at most every N microseconds, 1..1000000, while an operation that raises "
     "no events is pending): a thread of weft's own advances pending operations (nonblocking collectives, "
     "rendezvous messages, stream-ordered host steps, Python futures) while the application computes, sleeping "
     "on UCX's event fd when nothing it can advance is pending; auto starts it where this rank's CPUs leave one "
     "spare (a hyperthread or core beyond the ranks that share them) or, for ranks bound apart, where the "
     "machine has CPUs no rank is bound to (the thread runs outside the rank's binding), off keeps every wait on the "
     "caller's polling",
     FIELD(progress_thread_text), sizeof(weft_cfg.progress_thread_text)},
    {"WEFT_PROGRESS_SPIN_US", WEFT_VAR_INT_AUTO, "auto",
     "microseconds the progress thread keeps polling without news before it naps (while a shared-memory "
     "operation is pending) or sleeps until new work (after the last one completed); auto: " STR(
         WEFT_PROGRESS_SPIN_US_SPARE) " where the thread has a CPU no rank of this machine is bound to or one this "
                                      "rank leaves spare, 0 (at once) where it shares the rank's (docs/PERFORMANCE.md "
                                      "section 7b)",
     FIELD(progress_spin_us), 0},
    {"WEFT_HOST_ID", WEFT_VAR_STRING, "",
     "host identity used to group ranks into nodes (default: hash of hostname and kernel boot id)", FIELD(host_id),
     sizeof(weft_cfg.host_id)},
    {"WEFT_NODE_ID", WEFT_VAR_STRING, "",
     "this rank's node id (a number), overriding host grouping: simulate nodes on one machine", FIELD(node_id),
     sizeof(weft_cfg.node_id)},
    {"WEFT_RANKS_PER_NODE", WEFT_VAR_INT | WEFT_VAR_AGREE, "0",
     "split the ranks of each host into simulated nodes of this many consecutive ranks (0: off; the same on every "
     "rank)",
     FIELD(ranks_per_node), 0},
    {"WEFT_CUDA", WEFT_VAR_STRING, "auto",
     "device buffers in point-to-point: auto (through UCX when it carries CUDA memory, else staged), ucx, staged "
     "(through pinned host chunks, pipelined), off (device buffers fail with WEFT_ERR_UNSUPPORTED)",
     FIELD(cuda), sizeof(weft_cfg.cuda)},
    {"WEFT_CUDA_STAGE_CHUNK", WEFT_VAR_INT | WEFT_VAR_AGREE, "524288",
     "staged path: bytes per pinned host chunk (messages up to 8 KiB are copied straight to or from UCX's "
     "buffers; larger ones through chunks of at most this size; the same on every rank)",
     FIELD(cuda_stage_chunk), 0},
    {"WEFT_CUDA_STAGE_PIPE", WEFT_VAR_INT | WEFT_VAR_AGREE, "65536",
     "staged path: collectives' device messages of at least this many bytes go as one host message per pinned "
     "chunk (UCX's zero-copy paths); 0: never; the same on every rank",
     FIELD(cuda_stage_pipe), 0},
    {"WEFT_CUDA_STAGE_DEPTH", WEFT_VAR_INT, "4",
     "staged path: chunks of one message in flight (the copy of chunk k + 1 runs while chunk k is sent); 1..16",
     FIELD(cuda_stage_depth), 0},
    {"WEFT_CUDA_SMALL", WEFT_VAR_INT, "1024",
     "WEFT_CUDA=auto over a UCX that carries CUDA memory: device buffers up to this many bytes are copied through "
     "weft's pinned host buffer instead of UCX's CUDA transports (one copy each side, no IPC handshake); 0: never",
     FIELD(cuda_small), 0},
    {"WEFT_RDMA_SELECT", WEFT_VAR_BOOL, "1",
     "at init, choose the RDMA port nearest this rank's GPU (or on the route to MASTER_ADDR) and its RoCE GID index "
     "and hand them to UCX as UCX_NET_DEVICES / UCX_IB_GID_INDEX unless those are set (docs/RDMA.md; "
     "weft_info --rdma shows the candidates)",
     FIELD(rdma_select), 0},
    {"WEFT_RDMA_FSROOT", WEFT_VAR_STRING, "/",
     "directory read in place of / for sys/class/infiniband and proc/net/route when choosing the RDMA port "
     "(tests point it at a synthetic tree)",
     FIELD(rdma_fsroot), sizeof(weft_cfg.rdma_fsroot)},
    {"WEFT_JOB_SECRET", WEFT_VAR_STRING, "",
     "the job's shared secret, the same on every rank (weftrun sets a random one): ranks prove with it that they "
     "belong to the job (challenge-response at rank 0's env store, which proves itself too) and it authenticates "
     "each rank's UCX address; it never crosses the network. Unset: derived from TORCHELASTIC_RUN_ID under "
     "torchrun, else none (docs/SECURITY.md)",
     FIELD(job_secret), sizeof(weft_cfg.job_secret)},
    {"WEFT_JOB_SECRET_FILE", WEFT_VAR_STRING, "",
     "a file holding the job secret (a mounted Kubernetes Secret, a file on a shared volume), read when "
     "WEFT_JOB_SECRET is unset; a trailing newline is ignored",
     FIELD(job_secret_file), sizeof(weft_cfg.job_secret_file)},
    {"WEFT_JOB_SECRET_ALLOW_WEAK", WEFT_VAR_BOOL, "0",
     "1: accept a job secret that holds fewer than 128 bits (by its length and alphabet), with a warning; by default "
     "such a secret is refused, since one recorded exchange lets anyone test guesses offline",
     FIELD(job_secret_allow_weak), 0},
    {"WEFT_STORE_BIND_ANY", WEFT_VAR_BOOL, "0",
     "let rank 0's env store listen on every interface when MASTER_ADDR is 0.0.0.0 / :: or not an address of rank "
     "0's host (a Kubernetes ClusterIP service in front of it); otherwise it listens only on MASTER_ADDR's address",
     FIELD(store_bind_any), 0},
    {"WEFT_STORE_FD", WEFT_VAR_STRING, "",
     "set by weftrun for rank 0 only: a socket it bound to MASTER_ADDR:MASTER_PORT and listens on, inherited, on "
     "which rank 0 serves the env store (so no other process can take the port between weftrun's choice and rank "
     "0's start); anything but a socket listening on MASTER_PORT under the number (a job started from inside a "
     "rank, with a copy of its environment) is ignored with a warning",
     FIELD(store_fd), sizeof(weft_cfg.store_fd)},
    {"WEFT_STORE_RELAY", WEFT_VAR_STRING, "auto",
     "env bootstrap: a node's ranks reach rank 0's store through one connection that the node's first rank relays "
     "(LOCAL_RANK 0; the node's ranks are RANK - LOCAL_RANK onwards), so rank 0 needs a descriptor per node, not "
     "per rank. on, off, or auto: on in worlds of more than 1024 ranks. Needs LOCAL_RANK, LOCAL_WORLD_SIZE > 1 and "
     "a job secret; a rank that cannot reach its relay within 3 s connects directly",
     FIELD(store_relay), sizeof(weft_cfg.store_relay)},
};

/* The runtime's table first, then the tables the layers above register
 * (coll/: the framework's and each component's), in registration order. */
enum { MAX_TABLES = 16 };
static struct {
    const weft_var_t *vars;
    int n;
} tables[MAX_TABLES] = {{vars, (int)(sizeof(vars) / sizeof(vars[0]))}};
static int ntables = 1;

int weft_config_register(const weft_var_t *table, int n)
{
    for (int t = 0; t < ntables; t++)
        if (tables[t].vars == table) return WEFT_SUCCESS; /* registered already */
    if (ntables == MAX_TABLES) return weft_error(WEFT_ERR_INTERNAL, "config: more than %d variable tables", MAX_TABLES);
    tables[ntables].vars = table;
    tables[ntables].n = n;
    ntables++;
    return WEFT_SUCCESS;
}

static int var_count(void)
{
    int n = 0;
    for (int t = 0; t < ntables; t++)
        n += tables[t].n;
    return n;
}
static const weft_var_t *var_at(int i)
{
    for (int t = 0; t < ntables; i -= tables[t].n, t++)
        if (i < tables[t].n) return &tables[t].vars[i];
    return NULL;
}

/* The type weft_info prints; a '*' marks a variable every rank must set alike. */
static const char *kind_name(weft_var_kind_t k)
{
    int agree = (k & WEFT_VAR_AGREE) != 0;
    switch (k & WEFT_VAR_KIND) {
    case WEFT_VAR_STRING: return agree ? "string*" : "string";
    case WEFT_VAR_DOUBLE: return agree ? "seconds*" : "seconds";
    case WEFT_VAR_BOOL: return agree ? "bool*" : "bool";
    case WEFT_VAR_INT: return agree ? "int*" : "int";
    case WEFT_VAR_INT_AUTO: return agree ? "int|auto*" : "int|auto";
    case WEFT_VAR_LOGLEVEL: return agree ? "level*" : "level";
    }
    return "?";
}

static int parse_var(const weft_var_t *v, const char *text)
{
    char *base = v->addr;
    char *end = NULL;

    switch (v->kind & WEFT_VAR_KIND) {
    case WEFT_VAR_STRING:
        if (strlen(text) >= v->size && !strcmp(v->name, "WEFT_JOB_SECRET")) /* a message must not show it */
            return weft_error(WEFT_ERR_ARG, "%s is too long (%zu characters; at most %zu)", v->name, strlen(text),
                              v->size - 1);
        if (strlen(text) >= v->size)
            return weft_error(WEFT_ERR_ARG, "%s='%s' is too long (at most %zu characters)", v->name, text, v->size - 1);
        strcpy(base, text);
        return WEFT_SUCCESS;
    case WEFT_VAR_DOUBLE: {
        errno = 0;
        double d = strtod(text, &end);
        if (errno || end == text || *end != '\0' || !isfinite(d) || d < 0)
            return weft_error(WEFT_ERR_ARG, "%s='%s' is not a number of seconds >= 0", v->name, text);
        *(double *)base = d;
        return WEFT_SUCCESS;
    }
    case WEFT_VAR_INT_AUTO:
        if (!strcmp(text, "auto")) {
            *(int *)base = -1; /* resolved at init */
            return WEFT_SUCCESS;
        }
        /* fall through */
    case WEFT_VAR_INT: {
        errno = 0;
        long l = strtol(text, &end, 10);
        if (errno || end == text || *end != '\0' || l < 0 || l > 1000000000)
            return weft_error(WEFT_ERR_ARG, "%s='%s' is not a non-negative integer", v->name, text);
        *(int *)base = (int)l;
        return WEFT_SUCCESS;
    }
    case WEFT_VAR_BOOL:
        if (!strcmp(text, "1") || !strcasecmp(text, "yes") || !strcasecmp(text, "true") || !strcasecmp(text, "on"))
            *(int *)base = 1;
        else if (!strcmp(text, "0") || !strcasecmp(text, "no") || !strcasecmp(text, "false") ||
                 !strcasecmp(text, "off"))
            *(int *)base = 0;
        else
            return weft_error(WEFT_ERR_ARG, "%s='%s' is not a boolean (1/0, yes/no, true/false, on/off)", v->name,
                              text);
        return WEFT_SUCCESS;
    case WEFT_VAR_LOGLEVEL: {
        static const char *const names[] = {"error", "warn", "info", "debug", "trace"};
        for (int i = 0; i < 5; i++)
            if (!strcasecmp(text, names[i])) {
                *(int *)base = i;
                return WEFT_SUCCESS;
            }
        return weft_error(WEFT_ERR_ARG, "%s='%s' is not one of error, warn, info, debug, trace", v->name, text);
    }
    }
    return WEFT_ERR_INTERNAL;
}

/* WEFT_PROGRESS_THREAD: auto | on | off | N microseconds (on). */
static int parse_progress_thread(const char *text)
{
    weft_cfg.progress_poll_us = WEFT_PROGRESS_POLL_US_DEFAULT;
    if (!strcasecmp(text, "auto")) {
        weft_cfg.progress_thread = WEFT_PT_AUTO;
        return WEFT_SUCCESS;
    }
    if (!strcasecmp(text, "on") || !strcasecmp(text, "yes") || !strcasecmp(text, "true")) {
        weft_cfg.progress_thread = WEFT_PT_ON;
        return WEFT_SUCCESS;
    }
    if (!strcasecmp(text, "off") || !strcasecmp(text, "no") || !strcasecmp(text, "false") || !strcmp(text, "0")) {
        weft_cfg.progress_thread = WEFT_PT_OFF;
        return WEFT_SUCCESS;
    }
    char *end = NULL;
    errno = 0;
    long us = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0' || us < 1 || us > 1000000)
        return weft_error(WEFT_ERR_ARG,
                          "WEFT_PROGRESS_THREAD='%s' is not auto, on, off, or 1..1000000 microseconds (on, polling at "
                          "most that often while an operation that raises no events is pending)",
                          text);
    weft_cfg.progress_thread = WEFT_PT_ON;
    weft_cfg.progress_poll_us = (int)us;
    return WEFT_SUCCESS;
}

int weft_config_load(void)
{
    int rc = WEFT_SUCCESS;
    int n = var_count();
    memset(&weft_cfg, 0, sizeof(weft_cfg));
    for (int i = 0; i < n; i++) {
        int r = parse_var(var_at(i), var_at(i)->def);
        if (r != WEFT_SUCCESS) return WEFT_ERR_INTERNAL;
    }
    /* Every malformed variable is reported, not just the first. */
    for (int i = 0; i < n; i++) {
        const char *text = getenv(var_at(i)->name);
        if (text && parse_var(var_at(i), text) != WEFT_SUCCESS) rc = WEFT_ERR_ARG;
    }
    if (rc == WEFT_SUCCESS && strcmp(weft_cfg.bootstrap, "auto") && strcmp(weft_cfg.bootstrap, "pmix") &&
        strcmp(weft_cfg.bootstrap, "torchstore") && strcmp(weft_cfg.bootstrap, "env") &&
        strcmp(weft_cfg.bootstrap, "single"))
        rc = weft_error(WEFT_ERR_ARG, "WEFT_BOOTSTRAP='%s' is not one of auto, pmix, torchstore, env, single",
                        weft_cfg.bootstrap);
    if (rc == WEFT_SUCCESS && strcasecmp(weft_cfg.store_relay, "auto") && strcasecmp(weft_cfg.store_relay, "on") &&
        strcasecmp(weft_cfg.store_relay, "off"))
        rc = weft_error(WEFT_ERR_ARG, "WEFT_STORE_RELAY='%s' is not one of auto, on, off", weft_cfg.store_relay);
    if (rc == WEFT_SUCCESS) rc = parse_progress_thread(weft_cfg.progress_thread_text);
    /* A typo in a WEFT_* name would otherwise be dropped silently. These
     * prefixes are the scripts' and the Python package's own settings
     * (contrib/, test/), not the library's. */
    static const char *const not_ours[] = {"WEFT_TEST_", "WEFT_TORCH_", "WEFT_SLURM_", "WEFT_LIBRARY"};
    extern char **environ;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "WEFT_", 5)) continue;
        size_t len = strcspn(*e, "=");
        int known = 0;
        for (int i = 0; i < n && !known; i++)
            known = strlen(var_at(i)->name) == len && !strncmp(var_at(i)->name, *e, len);
        for (size_t p = 0; p < sizeof(not_ours) / sizeof(not_ours[0]) && !known; p++)
            known = !strncmp(*e, not_ours[p], strlen(not_ours[p]));
        if (!known) weft_warn("unknown variable %.*s is ignored (weft_info lists the known ones)", (int)len, *e);
    }
    return rc;
}

/* ---- variables every rank must set alike --------------------------------------- */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

/* The parsed value (so "8" and "08" agree), after the name. */
static uint64_t var_hash(const weft_var_t *v)
{
    uint64_t h = fnv1a(UINT64_C(0xcbf29ce484222325), v->name, strlen(v->name) + 1);
    if ((v->kind & WEFT_VAR_KIND) == WEFT_VAR_STRING) return fnv1a(h, v->addr, strlen(v->addr));
    if ((v->kind & WEFT_VAR_KIND) == WEFT_VAR_DOUBLE) return fnv1a(h, v->addr, sizeof(double));
    return fnv1a(h, v->addr, sizeof(int));
}

static void var_text(const weft_var_t *v, char *buf, size_t cap)
{
    weft_var_kind_t kind = v->kind & WEFT_VAR_KIND;
    if (kind == WEFT_VAR_STRING)
        weft_escape(buf, cap, v->addr, strlen(v->addr));
    else if (kind == WEFT_VAR_DOUBLE)
        snprintf(buf, cap, "%g", *(const double *)v->addr);
    else if (kind == WEFT_VAR_INT_AUTO && *(const int *)v->addr < 0)
        snprintf(buf, cap, "auto");
    else
        snprintf(buf, cap, "%d", *(const int *)v->addr);
}

uint64_t weft_config_agree_hash(void)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (int i = 0; i < var_count(); i++)
        if ((var_at(i)->kind & WEFT_VAR_AGREE)) {
            uint64_t x = var_hash(var_at(i));
            h = fnv1a(h, &x, sizeof(x));
        }
    return h;
}

/* What each rank sends when the settings differ: how many of its variables
 * must agree, then their hashes (a fixed size: every rank sends the same
 * length, whatever its build). */
#define AGREE_MAX 120
typedef struct {
    uint64_t n;
    uint64_t h[AGREE_MAX];
} agree_rec_t;

/* Rank 0's verdict, broadcast: per variable of rank 0's list that some
 * rank sets otherwise, "k<TAB>ranks<NL>"; the other ranks compose the same
 * sentence with their own value. */
static char *agree_verdict(const agree_rec_t *all, int n, size_t *len)
{
    int *differ = malloc(sizeof(int) * (size_t)n);
    size_t cap = 4096, used = 0;
    char *text = malloc(cap);
    if (!differ || !text) {
        free(differ);
        free(text);
        return NULL;
    }
    text[0] = '\0';
    for (uint64_t k = 0; k < all[0].n && k < AGREE_MAX; k++) {
        int nd = 0;
        for (int r = 1; r < n; r++) {
            int in0 = 1, inr = k < all[r].n; /* rank r's list is shorter than rank 0's: another build */
            if (in0 != inr || all[0].h[k] != all[r].h[k]) differ[nd++] = r;
        }
        if (!nd) continue;
        char ranks[160];
        weft_format_ranks(ranks, sizeof(ranks), differ, nd);
        if (used + 200 < cap)
            used += (size_t)snprintf(text + used, cap - used, "%llu\t%d\t%s\n", (unsigned long long)k, nd, ranks);
    }
    free(differ);
    *len = used;
    return text;
}

int weft_config_agree_fail(weft_bootstrap_t *bs, double deadline)
{
    int n = bs->size, rc = WEFT_SUCCESS, nvars = 0;
    agree_rec_t mine = {0}, *all = NULL;
    char *verdict = NULL, *msg = malloc(4096);
    void *got = NULL;
    size_t vlen = 0, got_len = 0;

    for (int i = 0; i < var_count() && nvars < AGREE_MAX; i++)
        if ((var_at(i)->kind & WEFT_VAR_AGREE)) mine.h[nvars++] = var_hash(var_at(i));
    mine.n = (uint64_t)nvars;
    if (bs->rank == 0 && !(all = malloc(sizeof(*all) * (size_t)n))) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory comparing settings");
        goto out;
    }
    if (!msg) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory comparing settings");
        goto out;
    }
    WEFT_CHECK_GOTO(weft_bootstrap_gather(bs, &mine, all, sizeof(mine), deadline), rc, out);
    if (bs->rank == 0 && !(verdict = agree_verdict(all, n, &vlen))) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_init: out of memory comparing settings");
        goto out;
    }
    WEFT_CHECK_GOTO(weft_bootstrap_bcast(bs, verdict, vlen, &got, &got_len, deadline), rc, out);
    const char *v = bs->rank == 0 ? verdict : got;
    size_t v_len = bs->rank == 0 ? vlen : got_len;
    size_t len = (size_t)snprintf(msg, 4096, "settings that must be the same on every rank differ:");
    int named = 0;
    for (size_t at = 0; at < v_len;) {
        const char *line = v + at, *nl = memchr(line, '\n', v_len - at);
        size_t ll = nl ? (size_t)(nl - line) : v_len - at;
        unsigned long long k = 0;
        int nd = 0, off = 0;
        char ranks[160];
        at += ll + 1;
        if (ll >= 200 || sscanf(line, "%llu\t%d\t%n", &k, &nd, &off) != 2 || (size_t)off > ll) continue;
        snprintf(ranks, sizeof(ranks), "%.*s", (int)(ll - (size_t)off), line + off);
        /* rank 0's k-th variable that must agree: the same build names the same one here */
        int seen = 0;
        for (int i = 0; i < var_count(); i++) {
            if (!(var_at(i)->kind & WEFT_VAR_AGREE) || (uint64_t)seen++ != k) continue;
            char val[160];
            var_text(var_at(i), val, sizeof(val));
            if (len < 4096)
                len += (size_t)snprintf(msg + len, 4096 - len, "%s %s (%s set%s it unlike rank 0; rank %d has '%s')",
                                        named++ ? ";" : "", var_at(i)->name, ranks, nd > 1 ? "" : "s", bs->rank, val);
            break;
        }
    }
    if (!named) /* the hashes differ, the variables do not: the ranks run different builds */
        snprintf(msg + len, 4096 - len, " the ranks run weft builds with different variables (weft_info --vars)");
    rc = weft_error(WEFT_ERR_ARG, "%s", msg);
out:
    free(all);
    free(verdict);
    free(got);
    free(msg);
    return rc;
}

int weft_config_var_count(void)
{
    return var_count();
}

int weft_config_var_get(int index, const char **name, const char **type, const char **default_value,
                        const char **description)
{
    if (index < 0 || index >= var_count())
        return weft_error(WEFT_ERR_ARG, "weft_var_get: index %d out of range 0..%d", index, var_count() - 1);
    const weft_var_t *v = var_at(index);
    if (name) *name = v->name;
    if (type) *type = kind_name(v->kind);
    if (default_value) *default_value = v->def;
    if (description) *description = v->desc;
    return WEFT_SUCCESS;
}
