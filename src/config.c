/* Every WEFT_* runtime variable is declared once, here: name, type,
 * default, one-line description. weft_info prints this table, and
 * weft_config_load() is the only place that reads them. */
#include "weft_internal.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

weft_config_t weft_cfg;

typedef enum { VAR_STRING, VAR_DOUBLE, VAR_BOOL, VAR_INT, VAR_INT_AUTO, VAR_LOGLEVEL } var_kind_t;

typedef struct {
    const char *name;
    var_kind_t kind;
    const char *def;
    const char *desc;
    size_t offset; /* into weft_config_t */
    size_t size;   /* for strings */
} var_t;

#define FIELD(f) offsetof(weft_config_t, f)

static const var_t vars[] = {
    {"WEFT_BOOTSTRAP", VAR_STRING, "auto",
     "how ranks find each other: auto (PMIx, then RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, then a singleton), "
     "pmix, env, single",
     FIELD(bootstrap), sizeof(((weft_config_t *)0)->bootstrap)},
    {"WEFT_TIMEOUT", VAR_DOUBLE, "600",
     "default deadline in seconds of every wait (communicators inherit it; 0 disables deadlines)", FIELD(timeout), 0},
    {"WEFT_INIT_TIMEOUT", VAR_DOUBLE, "120",
     "deadline in seconds for all ranks to arrive at init; the error names the missing ranks", FIELD(init_timeout), 0},
    {"WEFT_EAGER_CONNECT", VAR_BOOL, "0", "create every UCX endpoint at init instead of on first use",
     FIELD(eager_connect), 0},
    {"WEFT_PEER_FAILURE", VAR_BOOL, "0",
     "ask UCX to detect failed peers (endpoint error handling) so waits on a dead rank fail before their deadline; "
     "off by default because UCX 1.13's shared-memory transports cannot detect failures and UCX then moves "
     "traffic to TCP",
     FIELD(peer_failure), 0},
    {"WEFT_LOG_LEVEL", VAR_LOGLEVEL, "warn", "error, warn, info, debug or trace", FIELD(log_level), 0},
    {"WEFT_SPIN_BEFORE_YIELD", VAR_INT_AUTO, "auto",
     "empty progress polls before a waiting rank yields its core; auto: 2000, or 1 when this machine runs more ranks "
     "than it has CPUs (oversubscribed; ranks of simulated nodes on it count together); a blocking shared-memory "
     "collective also polls inline for this many polls (at most 4096) before the ordinary wait takes over",
     FIELD(spin_before_yield), 0},
    {"WEFT_HOST_ID", VAR_STRING, "",
     "host identity used to group ranks into nodes (default: hash of hostname and kernel boot id)", FIELD(host_id),
     sizeof(((weft_config_t *)0)->host_id)},
    {"WEFT_NODE_ID", VAR_STRING, "",
     "this rank's node id (a number), overriding host grouping: simulate nodes on one machine", FIELD(node_id),
     sizeof(((weft_config_t *)0)->node_id)},
    {"WEFT_RANKS_PER_NODE", VAR_INT, "0",
     "split the ranks of each host into simulated nodes of this many consecutive ranks (0: off)", FIELD(ranks_per_node),
     0},
    {"WEFT_COLL_TUNE", VAR_STRING, "",
     "collective selection rules ahead of the built-in table, e.g. "
     "allreduce:0-4k:recursive_doubling,allreduce:4k-inf:ring (weft_info --coll shows the result)",
     FIELD(coll_tune), sizeof(((weft_config_t *)0)->coll_tune)},
    {"WEFT_SHM_CMA", VAR_INT, "1",
     "0: the single-copy shared-memory collectives (shm_cma, process_vm_readv) decline and the base algorithms run",
     FIELD(shm_cma), 0},
    {"WEFT_SHM_RADIX", VAR_INT, "8",
     "radix of the shared-memory flag trees (tree barrier, bcast, reduce, small allreduce; groups of this many "
     "consecutive ranks meet first) and group size of shm_allread allreduce (over this many ranks it reads in "
     "two rounds: its group's inputs, then one partial per group); 2 or more; the segment's creator decides for "
     "every member",
     FIELD(shm_radix), 0},
    {"WEFT_SHM_CHUNK_MIN", VAR_INT, "2048",
     "shared-memory allreduce: vectors from this many bytes (on 4 or more ranks) are reduced one chunk per rank; "
     "smaller ones go up the flag tree (the segment's creator decides for every member)",
     FIELD(shm_chunk_min), 0},
    {"WEFT_SHM_FLAT_MAX", VAR_INT, "2048",
     "shared-memory bcast and small allreduce: messages (results) up to this many bytes are read by every rank "
     "straight from the root's slot (one hop) instead of flowing down the flag tree (the segment's creator "
     "decides for every member)",
     FIELD(shm_flat_max), 0},
};

#define NVARS ((int)(sizeof(vars) / sizeof(vars[0])))

static const char *kind_name(var_kind_t k)
{
    switch (k) {
    case VAR_STRING: return "string";
    case VAR_DOUBLE: return "seconds";
    case VAR_BOOL: return "bool";
    case VAR_INT: return "int";
    case VAR_INT_AUTO: return "int|auto";
    case VAR_LOGLEVEL: return "level";
    }
    return "?";
}

static int parse_var(const var_t *v, const char *text)
{
    char *base = (char *)&weft_cfg + v->offset;
    char *end = NULL;

    switch (v->kind) {
    case VAR_STRING:
        if (strlen(text) >= v->size)
            return weft_error(WEFT_ERR_ARG, "%s='%s' is too long (at most %zu characters)", v->name, text, v->size - 1);
        strcpy(base, text);
        return WEFT_SUCCESS;
    case VAR_DOUBLE: {
        errno = 0;
        double d = strtod(text, &end);
        if (errno || end == text || *end != '\0' || !isfinite(d) || d < 0)
            return weft_error(WEFT_ERR_ARG, "%s='%s' is not a number of seconds >= 0", v->name, text);
        *(double *)base = d;
        return WEFT_SUCCESS;
    }
    case VAR_INT_AUTO:
        if (!strcmp(text, "auto")) {
            *(int *)base = -1; /* resolved at init */
            return WEFT_SUCCESS;
        }
        /* fall through */
    case VAR_INT: {
        errno = 0;
        long l = strtol(text, &end, 10);
        if (errno || end == text || *end != '\0' || l < 0 || l > 1000000000)
            return weft_error(WEFT_ERR_ARG, "%s='%s' is not a non-negative integer", v->name, text);
        *(int *)base = (int)l;
        return WEFT_SUCCESS;
    }
    case VAR_BOOL:
        if (!strcmp(text, "1") || !strcasecmp(text, "yes") || !strcasecmp(text, "true") || !strcasecmp(text, "on"))
            *(int *)base = 1;
        else if (!strcmp(text, "0") || !strcasecmp(text, "no") || !strcasecmp(text, "false") ||
                 !strcasecmp(text, "off"))
            *(int *)base = 0;
        else
            return weft_error(WEFT_ERR_ARG, "%s='%s' is not a boolean (1/0, yes/no, true/false, on/off)", v->name,
                              text);
        return WEFT_SUCCESS;
    case VAR_LOGLEVEL: {
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

int weft_config_load(void)
{
    int rc = WEFT_SUCCESS;
    memset(&weft_cfg, 0, sizeof(weft_cfg));
    for (int i = 0; i < NVARS; i++) {
        int r = parse_var(&vars[i], vars[i].def);
        if (r != WEFT_SUCCESS) return WEFT_ERR_INTERNAL;
    }
    /* Every malformed variable is reported, not just the first. */
    for (int i = 0; i < NVARS; i++) {
        const char *text = getenv(vars[i].name);
        if (text && parse_var(&vars[i], text) != WEFT_SUCCESS) rc = WEFT_ERR_ARG;
    }
    if (rc == WEFT_SUCCESS && strcmp(weft_cfg.bootstrap, "auto") && strcmp(weft_cfg.bootstrap, "pmix") &&
        strcmp(weft_cfg.bootstrap, "env") && strcmp(weft_cfg.bootstrap, "single"))
        rc = weft_error(WEFT_ERR_ARG, "WEFT_BOOTSTRAP='%s' is not one of auto, pmix, env, single", weft_cfg.bootstrap);
    /* A typo in a WEFT_* name would otherwise be dropped silently. */
    extern char **environ;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "WEFT_", 5)) continue;
        size_t len = strcspn(*e, "=");
        int known = 0;
        for (int i = 0; i < NVARS && !known; i++)
            known = strlen(vars[i].name) == len && !strncmp(vars[i].name, *e, len);
        if (!known && strncmp(*e, "WEFT_TEST_", 10) && strncmp(*e, "WEFT_LIBRARY", 12) &&
            strncmp(*e, "WEFT_SLURM_", 11))
            weft_warn("unknown variable %.*s is ignored (weft_info lists the known ones)", (int)len, *e);
    }
    return rc;
}

WEFT_API int weft_var_count(void)
{
    return NVARS;
}

WEFT_API int weft_var_get(int index, const char **name, const char **type, const char **default_value,
                          const char **description)
{
    if (index < 0 || index >= NVARS)
        return weft_error(WEFT_ERR_ARG, "weft_var_get: index %d out of range 0..%d", index, NVARS - 1);
    if (name) *name = vars[index].name;
    if (type) *type = kind_name(vars[index].kind);
    if (default_value) *default_value = vars[index].def;
    if (description) *description = vars[index].desc;
    return WEFT_SUCCESS;
}
