/* The selection table. Rules map (collective, message-size range,
 * communicator shape) to an algorithm with a score; the defaults below are
 * written in the same grammar as WEFT_COLL_TUNE, which users set:
 *
 *   rule  := coll ":" [lo "-" hi ":"] [cond ":"]* algorithm
 *   cond  := "np=" a ["-" (b | "inf")]  |  "nodes=" ("1" | "multi")
 *   sizes are bytes per rank with optional k/m/g (powers of 1024) or "inf";
 *   lo is inclusive, hi exclusive; rules are separated by "," or ";".
 *   e.g. WEFT_COLL_TUNE="allreduce:0-4k:recursive_doubling,allreduce:4k-inf:ring"
 *
 * Candidates for a call: a communicator's <coll>_algorithm hint first,
 * then matching WEFT_COLL_TUNE rules, then matching defaults, then every
 * other algorithm of the collective, so a declined algorithm always has a
 * successor. */
#include "coll/coll.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Thresholds measured with contrib/bench/sweep.sh algs (every algorithm
 * forced, 8 B - 4 MiB, 8 / 16 / 32 ranks on a 32-core host; 2 ranks on a
 * 2-core one). The medians behind each row are in docs/perf/ (algs-*.csv)
 * and docs/COLLECTIVES.md says which numbers decided each threshold.
 * Sizes are bytes per rank (allgather, gather, scatter, alltoall: one
 * rank's block; reduce_scatter: the whole vector). */
static const char default_rules[] =
    /* Across nodes (coll/hier/), first: a communicator spanning several
     * nodes composes node, leader and rail steps; each algorithm declines
     * on one node or one rank per node and the flat rules run. Measured with 4 simulated nodes x 8 ranks in network
     * namespaces, 10 Gbit/s tbf links, TCP between ranks (docs/PERFORMANCE.md,
     * section 6): allreduce hier is 1.3-3.7x faster than flat at every size
     * (hier_rail from 64 KiB: 2-3x at 256 KiB - 1 MiB); bcast hier 1.2-2x
     * faster to 16 KiB and ~1.1-1.3x slower from 32 KiB; allgather hier wins
     * 4-16 KiB (2-5x) and loses below 2 KiB (2-3.5x); barrier hier 0.20 of
     * flat, reduce hier 0.09-0.43 of flat at 8 B - 1 MiB; alltoall hier
     * within 15 % of flat (both over TCP). hier_rail declines on uneven
     * nodes and hier takes over. */
    "barrier:nodes=multi:hier,"
    "bcast:0-32k:nodes=multi:hier,"
    "reduce:nodes=multi:hier,"
    "allreduce:0-64k:nodes=multi:hier,"
    "allreduce:64k-inf:nodes=multi:hier_rail,"
    "allreduce:64k-inf:nodes=multi:hier,"
    "allgather:4k-32k:nodes=multi:hier,"
    "alltoall:nodes=multi:hier,"
    "alltoallv:nodes=multi:hier,"
    /* coll/shm inside one node. Measured at 8/16/32 ranks of one 32-core
     * node (docs/PERFORMANCE.md, section 6, third round) against Open
     * MPI's default: barrier 0.48-0.61; bcast 0.22-0.52 at 8 B - 64 KiB
     * and, in slot-sized pieces down the tree, 0.25-0.81 at 128 KiB - 4
     * MiB (the binomial tree over UCX: 0.7-2.3); reduce up the flag tree
     * 0.27-0.63 to 64 KiB, in pieces 0.31-0.36 at 128-256 KiB but 0.57-1.1
     * from 512 KiB, where reduce-scatter + gather over UCX (0.45-0.65)
     * wins; allreduce 0.41-0.82 to 64 KiB, in pieces 0.67-0.92 at 128 KiB
     * (Rabenseifner 0.9-1.37), even at 256 KiB. allgather and
     * reduce_scatter keep their first, 16 KiB limit (not re-measured). */
    /* every rank reads every flag: 0.30-0.38 of Open MPI's time at 8-32
     * ranks, 1.3-1.5x faster than the tree barrier (not measured above 32) */
    "barrier:np=2-32:nodes=1:shm_allread,"
    "barrier:nodes=1:shm,"
    "bcast:2m-inf:nodes=1:shm_cma,"
    "bcast:nodes=1:shm,"
    "reduce:0-512k:nodes=1:shm,"
    /* every rank reduces the inputs itself (two rounds over WEFT_SHM_RADIX
     * ranks): faster than the tree below 2 KiB at 8 ranks, below 1 KiB at
     * 16 and 32 (at 32, one round was up to 1.8x slower than two); at 1-2
     * KiB on 8 ranks the chunked path (2/n of the data read per rank, two
     * flag rounds) measured 1.1x faster than it in three runs */
    /* shm_ll (the chunked shape on flagged lines: a line's one transfer
     * brings data and flag) measured 1.1-1.2x faster than shm_allread at
     * 64-512 B on 16 ranks and 1.04-1.5x at 128 B - 1 KiB on 32, in two
     * runs; on 8 ranks within 10 % either way, from 2 KiB 1.6-3x slower.
     * With its lines staggered across cache sets and reduced by one
     * strided fold per line (session 8) also 1.2x faster than the tree at
     * 1 KiB on 16 ranks, still 1.3x slower at 2 KiB */
    "allreduce:64-2k:np=9-16:nodes=1:shm_ll,"
    "allreduce:128-2k:np=17-32:nodes=1:shm_ll,"
    "allreduce:1k-2k:np=8-8:nodes=1:shm_chunked,"
    "allreduce:0-2k:np=2-8:nodes=1:shm_allread,"
    "allreduce:0-1k:np=9-32:nodes=1:shm_allread,"
    /* Rabenseifner over UCX measured 1.2x faster than the slot pieces at
     * 256 KiB on 32 ranks, 1.1-1.25x faster than shm_cma at 512 KiB - 1
     * MiB on 8 */
    "allreduce:256k-512k:np=17-32:nodes=1:rabenseifner,"
    /* on 4 ranks the slot pieces measured 1.1-1.4x faster than
     * Rabenseifner at 512 KiB - 2 MiB (which was 1.05x Open MPI's time);
     * on 8 the two traded places in earlier runs, then (session 8) the
     * pieces were 1.6-1.7x faster at 512 KiB - 1 MiB (0.77 of Open MPI's
     * time, where Rabenseifner took 1.03-1.32 of it in four runs) */
    "allreduce:512k-2m:np=4-8:nodes=1:shm,"
    "allreduce:512k-2m:np=2-8:nodes=1:rabenseifner,"
    "allreduce:0-512k:nodes=1:shm,"
    "allgather:0-16k:nodes=1:shm,"
    "reduce_scatter:0-16k:nodes=1:shm,"
    "reduce_scatter_block:0-16k:nodes=1:shm,"
    /* single copy with CMA (declines where process_vm_readv does not
     * work). allgather 1.2-2.8x faster than Open MPI at 16 KiB - 4 MiB;
     * allreduce 0.5-0.97 of Open MPI's time from 1 MiB; at 512 KiB on 32
     * ranks 1.2-1.26, where Rabenseifner over UCX measured 0.96 in the same
     * run (1.31x faster than shm_cma), so 512 KiB - 1 MiB keeps it. bcast
     * shm_cma (each rank reads its parent's buffer, a pipelined binary
     * tree; its rule is above, ahead of the pieces) from 2 MiB: it
     * measured 0.43-0.95 of Open MPI's time there against 0.31-1.11 for
     * the slot pieces, which lost at 16 ranks, and it copies once; below
     * 2 MiB the pieces are 1.1-2.9x faster than it. */
    "allgather:16k-inf:nodes=1:shm_cma,"
    "allreduce:1m-inf:nodes=1:shm_cma,"
    "barrier:dissemination,"
    /* scatter_allgather never beat binomial up to 4 MiB at 32 ranks */
    "bcast:0-inf:binomial,"
    /* reduce-scatter + gather wins from 64 KiB (32 ranks) / 128 KiB (8, 16) */
    "reduce:0-64k:binomial,"
    "reduce:64k-inf:reduce_scatter_gather,"
    /* RD below 16 KiB; Rabenseifner 16 KiB - 2 MiB (1.5-3x over RD);
     * ring from 2 MiB (ties Rabenseifner at 16 ranks, wins at 32) */
    "allreduce:0-16k:recursive_doubling,"
    "allreduce:16k-2m:rabenseifner,"
    "allreduce:2m-inf:ring,"
    /* RD below 32 KiB at every rank count; ring above (RD is 10-20%
     * faster again from 256 KiB at 32 ranks, but needs extra steps
     * for other rank counts) */
    "allgather:0-32k:recursive_doubling,"
    "allgather:32k-inf:ring,"
    "allgatherv:ring,"
    /* binomial to 128 KiB (16 ranks: to 1 MiB), linear above */
    "gather:0-128k:binomial,"
    "gather:128k-inf:linear,"
    "gatherv:linear,"
    /* binomial below 8 KiB at 8, 16, 32 ranks */
    "scatter:0-8k:binomial,"
    "scatter:8k-inf:linear,"
    "scatterv:linear,"
    /* recursive halving to 512 KiB; ring above at 8, 16 ranks */
    "reduce_scatter:0-512k:recursive_halving,"
    "reduce_scatter:512k-inf:ring,"
    "reduce_scatter_block:0-512k:recursive_halving,"
    "reduce_scatter_block:512k-inf:ring,"
    /* linear (one round) wins to 64 KiB at 8, 16, 32 ranks; Bruck
     * wins 16-256 B blocks at 32 ranks; pairwise ties linear at 64 KiB
     * and keeps one message in flight per rank above */
    "alltoall:0-512:np=24-inf:bruck,"
    "alltoall:0-64k:linear,"
    "alltoall:64k-inf:pairwise,"
    "alltoallv:pairwise,"
    "scan:linear,"
    "exscan:linear";

enum { NODES_ANY = 0, NODES_ONE = 1, NODES_MULTI = 2 };

typedef struct {
    weft_coll_kind_t kind;
    size_t lo, hi;
    int np_lo, np_hi;
    int nodes;
    const weft_coll_alg_t *alg;
    int score;
    int user; /* from WEFT_COLL_TUNE */
} rule_t;

static rule_t *rules;
static int nrules;
/* rules[kind_first[k] .. kind_first[k + 1]) are collective k's, best score first */
static int kind_first[WEFT_COLL_KINDS + 1];

static const char *const kind_names[WEFT_COLL_KINDS] = {
    [WEFT_COLL_BARRIER] = "barrier",
    [WEFT_COLL_BCAST] = "bcast",
    [WEFT_COLL_REDUCE] = "reduce",
    [WEFT_COLL_ALLREDUCE] = "allreduce",
    [WEFT_COLL_ALLGATHER] = "allgather",
    [WEFT_COLL_ALLGATHERV] = "allgatherv",
    [WEFT_COLL_GATHER] = "gather",
    [WEFT_COLL_GATHERV] = "gatherv",
    [WEFT_COLL_SCATTER] = "scatter",
    [WEFT_COLL_SCATTERV] = "scatterv",
    [WEFT_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [WEFT_COLL_REDUCE_SCATTER_BLOCK] = "reduce_scatter_block",
    [WEFT_COLL_ALLTOALL] = "alltoall",
    [WEFT_COLL_ALLTOALLV] = "alltoallv",
    [WEFT_COLL_SCAN] = "scan",
    [WEFT_COLL_EXSCAN] = "exscan",
};

const char *weft_coll_kind_name(weft_coll_kind_t kind)
{
    return (int)kind >= 0 && kind < WEFT_COLL_KINDS ? kind_names[kind] : "?";
}

static int kind_from_name(const char *s, size_t n)
{
    for (int k = 0; k < WEFT_COLL_KINDS; k++)
        if (strlen(kind_names[k]) == n && !strncmp(kind_names[k], s, n)) return k;
    return -1;
}

const weft_coll_alg_t *weft_coll_find(weft_coll_kind_t kind, const char *name)
{
    for (int i = 0; weft_coll_algorithms[i]; i++)
        if (weft_coll_algorithms[i]->kind == kind && !strcmp(weft_coll_algorithms[i]->name, name))
            return weft_coll_algorithms[i];
    return NULL;
}

static int parse_size(const char *s, size_t *out)
{
    if (!strcmp(s, "inf")) {
        *out = SIZE_MAX;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-') return -1;
    switch (tolower((unsigned char)*end)) {
    case 'k':
        v <<= 10;
        end++;
        break;
    case 'm':
        v <<= 20;
        end++;
        break;
    case 'g':
        v <<= 30;
        end++;
        break;
    default: break;
    }
    if (*end) return -1;
    *out = (size_t)v;
    return 0;
}

/* Parses one rule (NUL-terminated, no separators) into r. */
static int parse_rule(char *text, rule_t *r, const char *source)
{
    char *fields[8];
    int nf = 0;
    for (char *tok = strtok(text, ":"); tok && nf < 8; tok = strtok(NULL, ":"))
        fields[nf++] = tok;
    memset(r, 0, sizeof(*r));
    r->hi = SIZE_MAX;
    r->np_hi = 1 << 30;
    if (nf < 2) return weft_error(WEFT_ERR_ARG, "%s: rule '%s' needs at least collective:algorithm", source, text);
    int k = kind_from_name(fields[0], strlen(fields[0]));
    if (k < 0) return weft_error(WEFT_ERR_ARG, "%s: '%s' is not a collective", source, fields[0]);
    r->kind = (weft_coll_kind_t)k;
    for (int i = 1; i < nf - 1; i++) {
        char *f = fields[i];
        if (!strncmp(f, "np=", 3)) {
            char *end;
            long a = strtol(f + 3, &end, 10), b = a;
            if (*end == '-' && !strcmp(end + 1, "inf")) {
                b = INT_MAX;
                end += 4;
            } else if (*end == '-') {
                b = strtol(end + 1, &end, 10);
            }
            if (*end || a < 1 || b < a || b > INT_MAX)
                return weft_error(WEFT_ERR_ARG, "%s: '%s' is not np=A, np=A-B or np=A-inf", source, f);
            r->np_lo = (int)a;
            r->np_hi = (int)b;
        } else if (!strcmp(f, "nodes=1")) {
            r->nodes = NODES_ONE;
        } else if (!strcmp(f, "nodes=multi")) {
            r->nodes = NODES_MULTI;
        } else {
            char *dash = strchr(f, '-');
            if (!dash) return weft_error(WEFT_ERR_ARG, "%s: '%s' is not a size range lo-hi", source, f);
            *dash = '\0';
            if (parse_size(f, &r->lo) || parse_size(dash + 1, &r->hi) || r->hi <= r->lo) {
                *dash = '-';
                return weft_error(WEFT_ERR_ARG, "%s: '%s' is not a size range lo-hi (k/m/g, inf)", source, f);
            }
        }
    }
    r->alg = weft_coll_find(r->kind, fields[nf - 1]);
    if (!r->alg) {
        char known[256] = "";
        for (int i = 0; weft_coll_algorithms[i]; i++)
            if (weft_coll_algorithms[i]->kind == r->kind) {
                strncat(known, " ", sizeof(known) - strlen(known) - 1);
                strncat(known, weft_coll_algorithms[i]->name, sizeof(known) - strlen(known) - 1);
            }
        return weft_error(WEFT_ERR_ARG, "%s: no %s algorithm '%s' (known:%s)", source, kind_names[k], fields[nf - 1],
                          known);
    }
    return WEFT_SUCCESS;
}

static int parse_rules(const char *text, int score, int user, const char *source)
{
    char *copy = strdup(text);
    if (!copy) return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", source);
    int rc = WEFT_SUCCESS;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",; \t\n", &save); tok; tok = strtok_r(NULL, ",; \t\n", &save)) {
        rule_t r;
        char one[256];
        snprintf(one, sizeof(one), "%s", tok);
        if ((rc = parse_rule(one, &r, source))) break;
        r.score = score--;
        r.user = user;
        rule_t *n = realloc(rules, sizeof(rule_t) * (size_t)(nrules + 1));
        if (!n) {
            rc = weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", source);
            break;
        }
        rules = n;
        rules[nrules++] = r;
    }
    free(copy);
    return rc;
}

static int by_kind_score_desc(const void *x, const void *y)
{
    const rule_t *a = x, *b = y;
    if (a->kind != b->kind) return (a->kind > b->kind) - (a->kind < b->kind);
    return (a->score < b->score) - (a->score > b->score);
}

int weft_coll_select_init(void)
{
    weft_coll_select_finalize();
    int rc = parse_rules(default_rules, 1000, 0, "built-in selection table");
    if (rc) return rc;
    if (weft_cfg.coll_tune[0]) rc = parse_rules(weft_cfg.coll_tune, 100000, 1, "WEFT_COLL_TUNE");
    /* Grouped by collective, best score first, so a call's selection is
     * one pass over its collective's rules. */
    if (!rc && nrules > 1) qsort(rules, (size_t)nrules, sizeof(rule_t), by_kind_score_desc);
    for (int k = 0, i = 0; k <= WEFT_COLL_KINDS; k++) {
        while (i < nrules && (int)rules[i].kind < k)
            i++;
        kind_first[k] = i;
    }
    return rc;
}

void weft_coll_select_finalize(void)
{
    free(rules);
    rules = NULL;
    nrules = 0;
    memset(kind_first, 0, sizeof(kind_first));
}

static int add_candidate(const weft_coll_alg_t **out, int n, int max, const weft_coll_alg_t *alg)
{
    for (int i = 0; i < n; i++)
        if (out[i] == alg) return n;
    if (n < max) out[n++] = alg;
    return n;
}

int weft_coll_select(const weft_coll_args_t *a, const weft_coll_alg_t **out, int max)
{
    int n = 0, np = a->comm->size;
    int multi = weft_comm_spans_nodes(a->comm);
    const weft_coll_alg_t *forced = a->comm->coll_forced[a->kind];
    if (forced) n = add_candidate(out, n, max, forced);
    /* Matching rules, best score first (the table is kept sorted). */
    for (int i = kind_first[a->kind]; i < kind_first[a->kind + 1] && n < max; i++) {
        const rule_t *r = &rules[i];
        if (a->bytes < r->lo || a->bytes >= r->hi || np < r->np_lo || np > r->np_hi ||
            (r->nodes == NODES_ONE && multi) || (r->nodes == NODES_MULTI && !multi))
            continue;
        n = add_candidate(out, n, max, r->alg);
    }
    for (int i = 0; weft_coll_algorithms[i] && n < max; i++)
        if (weft_coll_algorithms[i]->kind == a->kind) n = add_candidate(out, n, max, weft_coll_algorithms[i]);
    return n;
}

static void size_text(size_t v, char *buf, size_t len)
{
    if (v == SIZE_MAX)
        snprintf(buf, len, "inf");
    else if (v && v % (1u << 30) == 0)
        snprintf(buf, len, "%zug", v >> 30);
    else if (v && v % (1u << 20) == 0)
        snprintf(buf, len, "%zum", v >> 20);
    else if (v && v % 1024 == 0)
        snprintf(buf, len, "%zuk", v >> 10);
    else
        snprintf(buf, len, "%zu", v);
}

WEFT_API int weft_coll_table(char *buf, size_t len)
{
    WEFT_CHECK_INIT("weft_coll_table");
    if (!buf || !len) return weft_error(WEFT_ERR_ARG, "weft_coll_table: NULL or empty buffer");
    size_t used = 0;
#define OUT(...)                                                                                                       \
    do {                                                                                                               \
        int w_ = snprintf(buf + used, len - used, __VA_ARGS__);                                                        \
        if (w_ > 0) used = used + (size_t)w_ < len ? used + (size_t)w_ : len - 1;                                      \
    } while (0)
    OUT("algorithms:\n");
    for (int i = 0; weft_coll_algorithms[i]; i++)
        OUT("  %-22s %-22s %s\n", kind_names[weft_coll_algorithms[i]->kind], weft_coll_algorithms[i]->name,
            weft_coll_algorithms[i]->description);
    OUT("selection (first match by score; a declined algorithm falls back to the next, then to any other):\n");
    for (int pass = 1; pass >= 0; pass--)
        for (int i = 0; i < nrules; i++) {
            const rule_t *r = &rules[i];
            if (r->user != pass) continue;
            char lo[32], hi[32], cond[48] = "";
            size_text(r->lo, lo, sizeof(lo));
            size_text(r->hi, hi, sizeof(hi));
            if (r->np_lo == r->np_hi)
                snprintf(cond, sizeof(cond), ":np=%d", r->np_lo);
            else if (r->np_hi == INT_MAX)
                snprintf(cond, sizeof(cond), ":np=%d-inf", r->np_lo);
            else if (r->np_lo)
                snprintf(cond, sizeof(cond), ":np=%d-%d", r->np_lo, r->np_hi);
            if (r->nodes)
                snprintf(cond + strlen(cond), sizeof(cond) - strlen(cond), ":nodes=%s",
                         r->nodes == NODES_ONE ? "1" : "multi");
            OUT("  %s:%s-%s%s:%s   (%s, score %d)\n", kind_names[r->kind], lo, hi, cond, r->alg->name,
                r->user ? "WEFT_COLL_TUNE" : "default", r->score);
        }
#undef OUT
    return WEFT_SUCCESS;
}
