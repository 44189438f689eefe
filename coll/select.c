/* The selection table. Rules map (collective, memory type, message-size
 * range, communicator shape) to an algorithm with a score; the built-in
 * rules are coll/rules.conf (compiled in: coll/rules.inc), one per line
 * with the note that names the measurement behind it, in the grammar
 * users override with through WEFT_COLL_TUNE:
 *
 *   rule  := coll ":" [lo "-" hi ":"] [cond ":"]* algorithm
 *   cond  := "np=" a ["-" (b | "inf")]  |  "nodes=" ("1" | "multi")  |  "mem=" ("host" | "cuda")
 *          |  "gpu=" ("shared" | "own")   (mem=cuda rules: two ranks share a GPU, or every rank has its own)
 *          |  "xport=" ("cuda" | "host")  (mem=cuda rules: the UCX in use moves device memory itself, or not)
 *   sizes are bytes per rank with optional k/m/g (powers of 1024) or "inf";
 *   lo is inclusive, hi exclusive; no mem= means host buffers; rules are
 *   separated by "," or ";" (in the file: one per line, '#' starts a note).
 *   e.g. WEFT_COLL_TUNE="allreduce:0-4k:recursive_doubling,allreduce:4k-inf:ring"
 *
 * Candidates for a call: a communicator's <coll>_algorithm hint first,
 * then matching WEFT_COLL_TUNE rules, then matching built-in rules, then
 * every other algorithm of the collective that takes the call's memory
 * type, so a declined algorithm always has a successor. */
#include "coll/coll.h"
#include "pt2pt/cuda.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char builtin_rules[] =
#include "coll/rules.inc"
    ;

static char coll_tune[4096]; /* WEFT_COLL_TUNE */
int weft_coll_check;         /* WEFT_COLL_CHECK (coll.c runs the check) */
const weft_var_t weft_coll_select_vars[] = {
    {"WEFT_COLL_TUNE", WEFT_VAR_STRING | WEFT_VAR_AGREE, "",
     "collective selection rules ahead of the built-in table, e.g. "
     "allreduce:0-4k:recursive_doubling,allreduce:4k-inf:ring (weft_info --coll shows the result); the same on every "
     "rank",
     coll_tune, sizeof(coll_tune)},
    {"WEFT_COLL_CHECK", WEFT_VAR_BOOL | WEFT_VAR_AGREE, "0",
     "1: every collective first checks that all members called the same collective with the same datatype, op, "
     "root and count (allgatherv, reduce_scatter: the same counts), and every rank fails with WEFT_ERR_ARG naming "
     "the first rank that differs; costs an allgather of 32 bytes per rank before each call (ceil(log2 n) rounds "
     "of messages), and shared-memory calls lose their inline fast path: for debugging; the same on every rank",
     &weft_coll_check, 0},
};
const int weft_coll_select_nvars = (int)(sizeof(weft_coll_select_vars) / sizeof(weft_coll_select_vars[0]));

enum { NODES_ANY = 0, NODES_ONE = 1, NODES_MULTI = 2 };
enum { GPU_ANY = 0, GPU_SHARED = 1, GPU_OWN = 2 };
enum { XPORT_ANY = 0, XPORT_CUDA = 1, XPORT_HOST = 2 };

typedef struct {
    weft_coll_kind_t kind;
    size_t lo, hi;
    int np_lo, np_hi;
    int nodes;
    int gpu;
    int xport;
    weft_memtype_t mem;
    const weft_coll_alg_t *alg;
    int score;
    int user;   /* from WEFT_COLL_TUNE */
    char *note; /* the built-in rule's note (NULL: none) */
} rule_t;

static rule_t *rules;
static int nrules;
/* rules[kind_first[k] .. kind_first[k + 1]) are collective k's, best score first */
static int kind_first[WEFT_COLL_KINDS + 1];
/* Per collective, every algorithm in registry order with the memory types
 * its component takes: the fallbacks. */
typedef struct {
    const weft_coll_alg_t *alg;
    unsigned memtypes;
} fallback_t;
static fallback_t *fallbacks;
static int fb_first[WEFT_COLL_KINDS + 1];

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

/* The conditions of two values: "key=a" sets the rule's field to 1, "key=b" to 2 (NODES_ONE / NODES_MULTI,
 * GPU_SHARED / GPU_OWN, XPORT_CUDA / XPORT_HOST); parsed and printed (weft_coll_table) from here. */
static const struct {
    const char *key, *a, *b;
    size_t at; /* offsetof the rule's int field */
} pairs[] = {
    {"nodes", "1", "multi", offsetof(rule_t, nodes)},
    {"gpu", "shared", "own", offsetof(rule_t, gpu)},
    {"xport", "cuda", "host", offsetof(rule_t, xport)},
};

/* 1 when f is one of those conditions (*rc: set, or the error naming it), 0 when it is none. */
static int parse_pair(const char *f, rule_t *r, const char *source, int *rc)
{
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        size_t kl = strlen(pairs[i].key);
        if (strncmp(f, pairs[i].key, kl) || f[kl] != '=') continue;
        int v = !strcmp(f + kl + 1, pairs[i].a) ? 1 : !strcmp(f + kl + 1, pairs[i].b) ? 2 : 0;
        if (v) *(int *)(void *)((char *)r + pairs[i].at) = v;
        *rc = v ? WEFT_SUCCESS
                : weft_error(WEFT_ERR_ARG, "%s: '%s' is not %s=%s or %s=%s", source, f, pairs[i].key, pairs[i].a,
                             pairs[i].key, pairs[i].b);
        return 1;
    }
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
    int k = kind_from_name(fields[0], strlen(fields[0])), rc;
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
        } else if (parse_pair(f, r, source, &rc)) {
            if (rc) return rc;
        } else if (!strcmp(f, "mem=host")) {
            r->mem = WEFT_MEM_HOST;
        } else if (!strcmp(f, "mem=cuda")) {
            r->mem = WEFT_MEM_CUDA;
        } else if (!strncmp(f, "mem=", 4)) {
            return weft_error(WEFT_ERR_ARG, "%s: '%s' is not mem=host or mem=cuda", source, f);
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

static int add_rule(const char *text, const char *note, int *score, int user, const char *source)
{
    rule_t r;
    char one[256];
    if (strlen(text) >= sizeof(one)) return weft_error(WEFT_ERR_ARG, "%s: rule '%.40s...' is too long", source, text);
    snprintf(one, sizeof(one), "%s", text);
    int rc = parse_rule(one, &r, source);
    if (rc) return rc;
    const weft_coll_component_t *comp = weft_coll_component_of(r.alg);
    if (!(comp->memtypes & WEFT_MEM_BIT(r.mem)))
        return weft_error(WEFT_ERR_ARG, "%s: rule '%s': %s %s (component %s) does not take %s buffers", source, text,
                          weft_coll_kind_name(r.kind), r.alg->name, comp->name, weft_memtype_name(r.mem));
    if ((r.gpu || r.xport) && r.mem != WEFT_MEM_CUDA)
        return weft_error(WEFT_ERR_ARG, "%s: rule '%s': %s is a condition of mem=cuda rules", source, text,
                          r.gpu ? "gpu=" : "xport=");
    r.score = (*score)--;
    r.user = user;
    r.note = note && *note ? strdup(note) : NULL;
    rule_t *n = realloc(rules, sizeof(rule_t) * (size_t)(nrules + 1));
    if (!n || (note && *note && !r.note)) {
        free(r.note);
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", source);
    }
    rules = n;
    rules[nrules++] = r;
    return WEFT_SUCCESS;
}

/* WEFT_COLL_TUNE: rules separated by ',', ';' or blanks. */
static int parse_rules(const char *text, int score, int user, const char *source)
{
    char *copy = strdup(text);
    if (!copy) return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", source);
    int rc = WEFT_SUCCESS;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",; \t\n", &save); tok && !rc; tok = strtok_r(NULL, ",; \t\n", &save))
        rc = add_rule(tok, NULL, &score, user, source);
    free(copy);
    return rc;
}

/* The rules file: one rule per line, its note after '#'; lines that start
 * with '#' and blank lines are comments. */
static int parse_rules_file(const char *text, int score, const char *source)
{
    char *copy = strdup(text);
    if (!copy) return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", source);
    int rc = WEFT_SUCCESS, lineno = 0;
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line && !rc; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        char *note = strchr(line, '#');
        if (note) *note++ = '\0';
        char *end = line + strlen(line);
        while (end > line && isspace((unsigned char)end[-1]))
            *--end = '\0';
        while (isspace((unsigned char)*line))
            line++;
        if (!*line) continue;
        while (note && isspace((unsigned char)*note))
            note++;
        rc = add_rule(line, note, &score, 0, source);
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

static int fallbacks_build(void)
{
    int n = 0;
    while (weft_coll_algorithms[n])
        n++;
    if (!(fallbacks = malloc(sizeof(fallback_t) * (size_t)(n ? n : 1))))
        return weft_error(WEFT_ERR_NO_MEMORY, "coll: out of memory for the selection table");
    int used = 0;
    for (int k = 0; k < WEFT_COLL_KINDS; k++) {
        fb_first[k] = used;
        for (int i = 0; i < n; i++)
            if ((int)weft_coll_algorithms[i]->kind == k)
                fallbacks[used++] =
                    (fallback_t){weft_coll_algorithms[i], weft_coll_component_of(weft_coll_algorithms[i])->memtypes};
    }
    fb_first[WEFT_COLL_KINDS] = used;
    return WEFT_SUCCESS;
}

int weft_coll_select_init(void)
{
    weft_coll_select_finalize();
    int rc = fallbacks_build();
    if (!rc) rc = parse_rules_file(builtin_rules, 1000, "built-in selection table (coll/rules.conf)");
    if (!rc && coll_tune[0]) rc = parse_rules(coll_tune, 100000, 1, "WEFT_COLL_TUNE");
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
    for (int i = 0; i < nrules; i++)
        free(rules[i].note);
    free(rules);
    free(fallbacks);
    rules = NULL;
    fallbacks = NULL;
    nrules = 0;
    memset(kind_first, 0, sizeof(kind_first));
    memset(fb_first, 0, sizeof(fb_first));
}

static int add_candidate(const weft_coll_alg_t **out, int n, int max, const weft_coll_alg_t *alg)
{
    for (int i = 0; i < n; i++)
        if (out[i] == alg) return n;
    if (n < max) out[n++] = alg;
    return n;
}

/* The rules' gpu= condition: asked of the component that takes the buffers (-1: unknown). */
static int gpu_shared(const weft_coll_args_t *a)
{
    for (int c = 0; weft_coll_components[c]; c++)
        if ((weft_coll_components[c]->memtypes & WEFT_MEM_BIT(a->mem)) && weft_coll_components[c]->gpu_shared)
            return weft_coll_components[c]->gpu_shared(a);
    return -1;
}

int weft_coll_select(const weft_coll_args_t *a, const weft_coll_alg_t **out, int max)
{
    int n = 0, np = a->comm->size, shared = -2; /* -2: not asked yet (only a gpu= rule that matches asks) */
    int multi = weft_comm_spans_nodes(a->comm);
    unsigned mem = WEFT_MEM_BIT(a->mem);
    const weft_coll_alg_t *forced = weft_coll_forced(a->comm, a->kind, a->mem);
    if (forced) n = add_candidate(out, n, max, forced);
    /* Matching rules, best score first (the table is kept sorted). */
    for (int i = kind_first[a->kind]; i < kind_first[a->kind + 1] && n < max; i++) {
        const rule_t *r = &rules[i];
        if (a->bytes < r->lo || a->bytes >= r->hi || np < r->np_lo || np > r->np_hi || r->mem != a->mem ||
            (r->nodes == NODES_ONE && multi) || (r->nodes == NODES_MULTI && !multi))
            continue;
        if (r->gpu && shared == -2) shared = gpu_shared(a);
        if (r->gpu && (shared < 0 || shared != (r->gpu == GPU_SHARED))) continue;
        if (r->xport && weft_cuda_ucx_carries() != (r->xport == XPORT_CUDA)) continue;
        n = add_candidate(out, n, max, r->alg);
    }
    for (int i = fb_first[a->kind]; i < fb_first[a->kind + 1] && n < max; i++)
        if (fallbacks[i].memtypes & mem) n = add_candidate(out, n, max, fallbacks[i].alg);
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
    WEFT_API_ENTER();
    WEFT_CHECK_INIT("weft_coll_table");
    if (!buf || !len) return weft_error(WEFT_ERR_ARG, "weft_coll_table: NULL or empty buffer");
    size_t used = 0;
#define OUT(...)                                                                                                       \
    do {                                                                                                               \
        int w_ = snprintf(buf + used, len - used, __VA_ARGS__);                                                        \
        if (w_ > 0) used = used + (size_t)w_ < len ? used + (size_t)w_ : len - 1;                                      \
    } while (0)
    OUT("components:\n");
    for (int c = 0; weft_coll_components[c]; c++) {
        const weft_coll_component_t *comp = weft_coll_components[c];
        char mems[32] = "";
        for (int m = 0; m < WEFT_MEM_TYPES; m++)
            if (comp->memtypes & WEFT_MEM_BIT(m))
                snprintf(mems + strlen(mems), sizeof(mems) - strlen(mems), "%s%s", mems[0] ? "," : "",
                         weft_memtype_name((weft_memtype_t)m));
        OUT("  %-6s mem=%-10s %s\n", comp->name, mems, comp->description);
    }
    OUT("algorithms (component, collective, name):\n");
    for (int i = 0; weft_coll_algorithms[i]; i++)
        OUT("  %-6s %-22s %-22s %s\n", weft_coll_component_of(weft_coll_algorithms[i])->name,
            kind_names[weft_coll_algorithms[i]->kind], weft_coll_algorithms[i]->name,
            weft_coll_algorithms[i]->description);
    OUT("parameters inside algorithms (component.name = value: where; what; set by):\n");
    for (int c = 0; weft_coll_components[c]; c++)
        for (int i = 0; i < weft_coll_components[c]->nparams; i++) {
            const weft_coll_param_t *p = &weft_coll_components[c]->params[i];
            char val[32];
            if (*p->value < 0) /* an int|auto variable left at auto: the component resolves it */
                snprintf(val, sizeof(val), "auto");
            else
                snprintf(val, sizeof(val), "%d %s", *p->value, p->unit);
            OUT("  %s.%s = %s: %s; %s; %s\n", weft_coll_components[c]->name, p->name, val, p->algs, p->desc,
                p->var ? p->var : "built in");
        }
    OUT("selection (first match by score; a declined algorithm falls back to the next, then to any other):\n");
    for (int pass = 1; pass >= 0; pass--)
        for (int i = 0; i < nrules; i++) {
            const rule_t *r = &rules[i];
            if (r->user != pass) continue;
            char lo[32], hi[32], cond[64] = "";
            size_text(r->lo, lo, sizeof(lo));
            size_text(r->hi, hi, sizeof(hi));
            if (r->np_lo == r->np_hi)
                snprintf(cond, sizeof(cond), ":np=%d", r->np_lo);
            else if (r->np_hi == INT_MAX)
                snprintf(cond, sizeof(cond), ":np=%d-inf", r->np_lo);
            else if (r->np_lo)
                snprintf(cond, sizeof(cond), ":np=%d-%d", r->np_lo, r->np_hi);
            for (size_t p = 0; p < sizeof(pairs) / sizeof(pairs[0]); p++) {
                int v = *(const int *)(const void *)((const char *)r + pairs[p].at);
                if (v)
                    snprintf(cond + strlen(cond), sizeof(cond) - strlen(cond), ":%s=%s", pairs[p].key,
                             v == 1 ? pairs[p].a : pairs[p].b);
            }
            snprintf(cond + strlen(cond), sizeof(cond) - strlen(cond), ":mem=%s", weft_memtype_name(r->mem));
            OUT("  %s:%s-%s%s:%s   (%s, score %d)%s%s\n", kind_names[r->kind], lo, hi, cond, r->alg->name,
                r->user ? "WEFT_COLL_TUNE" : "built in", r->score, r->note ? "  # " : "", r->note ? r->note : "");
        }
#undef OUT
    return WEFT_SUCCESS;
}
