/* Options objects and hints. A hint is APPLIED (weft acted on it),
 * IGNORED (understood or not, with the reason nothing was done), or
 * REJECTED (a value weft cannot accept); one table says what each known
 * key means, and an unknown key is ignored with a reason, never dropped. */
#include "weft_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Options objects need no initialised weft: weft_comm_join takes one
 * before the world exists. */
static int options_check(weft_options_t o, const char *fn)
{
    if (!o || o->magic != WEFT_OPTIONS_MAGIC)
        return weft_error(WEFT_ERR_ARG, "%s: %p is not a live options object", fn, (void *)o);
    return WEFT_SUCCESS;
}

WEFT_API int weft_options_create(weft_options_t *options)
{
    WEFT_API_ENTER();
    if (!options) return weft_error(WEFT_ERR_ARG, "weft_options_create: NULL output pointer");
    weft_options_t o = calloc(1, sizeof(*o));
    if (!o) return weft_error(WEFT_ERR_NO_MEMORY, "weft_options_create: out of memory");
    o->magic = WEFT_OPTIONS_MAGIC;
    o->device = -1;
    *options = o;
    return WEFT_SUCCESS;
}

void weft_hints_free(weft_hint_t *hints, int n)
{
    for (int i = 0; i < n; i++) {
        free(hints[i].key);
        free(hints[i].value);
    }
    free(hints);
}

WEFT_API int weft_options_free(weft_options_t *options)
{
    WEFT_API_ENTER();
    if (!options) return weft_error(WEFT_ERR_ARG, "weft_options_free: NULL pointer");
    if (*options == WEFT_OPTIONS_NULL) return WEFT_SUCCESS;
    int rc = options_check(*options, "weft_options_free");
    if (rc) return rc;
    weft_hints_free((*options)->hints, (*options)->nhints);
    (*options)->magic = 0;
    free(*options);
    *options = WEFT_OPTIONS_NULL;
    return WEFT_SUCCESS;
}

WEFT_API int weft_options_set_name(weft_options_t o, const char *name)
{
    WEFT_API_ENTER();
    int rc = options_check(o, "weft_options_set_name");
    if (rc) return rc;
    if (!name || !name[0] || strlen(name) >= sizeof(o->name))
        return weft_error(WEFT_ERR_ARG, "weft_options_set_name: the name must have 1..%zu characters",
                          sizeof(o->name) - 1);
    strcpy(o->name, name);
    o->set |= WEFT_OPT_NAME;
    return WEFT_SUCCESS;
}

WEFT_API int weft_options_set_timeout(weft_options_t o, double timeout_s)
{
    WEFT_API_ENTER();
    int rc = options_check(o, "weft_options_set_timeout");
    if (rc) return rc;
    if (!(timeout_s >= 0) || !isfinite(timeout_s))
        return weft_error(WEFT_ERR_ARG, "weft_options_set_timeout: %g s is not >= 0 (0 = no deadline)", timeout_s);
    o->timeout = timeout_s;
    o->set |= WEFT_OPT_TIMEOUT;
    return WEFT_SUCCESS;
}

WEFT_API int weft_options_set_abort_on_error(weft_options_t o, int abort_on_error)
{
    WEFT_API_ENTER();
    int rc = options_check(o, "weft_options_set_abort_on_error");
    if (rc) return rc;
    o->abort_on_error = abort_on_error != 0;
    o->set |= WEFT_OPT_ABORT;
    return WEFT_SUCCESS;
}

WEFT_API int weft_options_set_device(weft_options_t o, int device)
{
    WEFT_API_ENTER();
    int rc = options_check(o, "weft_options_set_device");
    if (rc) return rc;
    if (device < -1) return weft_error(WEFT_ERR_ARG, "weft_options_set_device: device %d is not >= -1", device);
    o->device = device;
    o->set |= WEFT_OPT_DEVICE;
    return WEFT_SUCCESS;
}

/* Adds or replaces key in a hint list. */
static int hint_put(weft_hint_t **hints, int *n, const char *key, const char *value)
{
    for (int i = 0; i < *n; i++)
        if (!strcmp((*hints)[i].key, key)) {
            char *v = strdup(value);
            if (!v) return WEFT_ERR_NO_MEMORY;
            free((*hints)[i].value);
            (*hints)[i].value = v;
            return WEFT_SUCCESS;
        }
    weft_hint_t *nh = realloc(*hints, sizeof(weft_hint_t) * (size_t)(*n + 1));
    if (!nh) return WEFT_ERR_NO_MEMORY;
    *hints = nh;
    memset(&nh[*n], 0, sizeof(nh[*n]));
    nh[*n].key = strdup(key);
    nh[*n].value = strdup(value);
    if (!nh[*n].key || !nh[*n].value) {
        free(nh[*n].key);
        free(nh[*n].value);
        return WEFT_ERR_NO_MEMORY;
    }
    (*n)++;
    return WEFT_SUCCESS;
}

WEFT_API int weft_options_set_hint(weft_options_t o, const char *key, const char *value)
{
    WEFT_API_ENTER();
    int rc = options_check(o, "weft_options_set_hint");
    if (rc) return rc;
    if (!key || !key[0] || !value)
        return weft_error(WEFT_ERR_ARG, "weft_options_set_hint: a hint needs a non-empty key and a value");
    if (strlen(key) > 128 || strlen(value) > 1024)
        return weft_error(WEFT_ERR_ARG, "weft_options_set_hint: key '%.40s...' or its value is too long", key);
    if (hint_put(&o->hints, &o->nhints, key, value))
        return weft_error(WEFT_ERR_NO_MEMORY, "weft_options_set_hint: out of memory");
    return WEFT_SUCCESS;
}

/* ---- the hint table ------------------------------------------------------ */

static int parse_double(const char *v, double *out)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(d)) return -1;
    *out = d;
    return 0;
}

static int parse_bool(const char *v, int *out)
{
    if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on"))
        *out = 1;
    else if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off"))
        *out = 0;
    else
        return -1;
    return 0;
}

static int parse_positive_int(const char *v, long *out)
{
    char *end;
    errno = 0;
    long l = strtol(v, &end, 10);
    if (errno || end == v || *end || l < 1 || l > 1 << 20) return -1;
    *out = l;
    return 0;
}

#define SET(h, st, ...)                                                                                                \
    do {                                                                                                               \
        (h)->status = (st);                                                                                            \
        snprintf((h)->reason, sizeof((h)->reason), __VA_ARGS__);                                                       \
    } while (0)

#if defined(WEFT_HAVE_CUDA_KERNELS)
#define NO_GPU_REASON NULL
#elif defined(WEFT_HAVE_CUDA)
#define NO_GPU_REASON "this build has no GPU collectives (configure found no nvcc to compile coll/cuda's kernels)"
#else
#define NO_GPU_REASON "no CUDA in this build"
#endif

static void evaluate(weft_comm_t comm, weft_hint_t *h)
{
    const char *k = h->key, *v = h->value;
    double d;
    int b;
    long l;
    if (!strcmp(k, "timeout")) {
        if (parse_double(v, &d) || d < 0)
            SET(h, WEFT_HINT_REJECTED, "'%s' is not a number of seconds >= 0", v);
        else {
            comm->timeout = d;
            SET(h, WEFT_HINT_APPLIED, "default deadline of every wait on this communicator: %g s", d);
        }
        return;
    }
    const char *no_gpu = NO_GPU_REASON;
    if (!strcmp(k, "is_high_priority_stream")) {
        if (parse_bool(v, &b)) {
            SET(h, WEFT_HINT_REJECTED, "'%s' is not a boolean", v);
        } else if (no_gpu) {
            SET(h, WEFT_HINT_IGNORED, "%s", no_gpu);
        } else {
            comm->gpu_high_priority = b;
            SET(h, WEFT_HINT_APPLIED, "coll/cuda's stream for blocking GPU collectives: %s priority",
                b ? "highest" : "default");
        }
        return;
    }
    if (!strcmp(k, "max_ctas") || !strcmp(k, "min_ctas") || !strcmp(k, "cga_cluster_size")) {
        if (parse_positive_int(v, &l)) {
            SET(h, WEFT_HINT_REJECTED, "'%s' is not a positive integer", v);
        } else if (no_gpu) {
            SET(h, WEFT_HINT_IGNORED, "%s", no_gpu);
        } else if (!strcmp(k, "cga_cluster_size")) {
            SET(h, WEFT_HINT_IGNORED,
                "coll/cuda's kernels launch without thread-block clusters (memory-bound copies and reductions)");
        } else if (k[1] == 'a') {
            comm->gpu_max_ctas = (int)l;
            SET(h, WEFT_HINT_APPLIED, "coll/cuda's multi-block kernels use at most %ld blocks (fused, barrier: one)",
                l);
        } else {
            comm->gpu_min_ctas = (int)l;
            SET(h, WEFT_HINT_APPLIED, "coll/cuda's multi-block kernels use at least %ld blocks (fused, barrier: one)",
                l);
        }
        return;
    }
    size_t klen = strlen(k), slen = strlen("_algorithm");
    if (klen > slen && !strcmp(k + klen - slen, "_algorithm")) {
        char why[140];
        int found = weft_coll_svc->force_algorithm(comm, k, klen - slen, v, why, sizeof(why));
        if (found == 1) {
            SET(h, WEFT_HINT_APPLIED, "%.*s runs %s first on this communicator (the next candidate if it declines)",
                (int)(klen - slen), k, v);
        } else if (found == -2) {
            SET(h, WEFT_HINT_REJECTED, "%s", why);
        } else {
            SET(h, WEFT_HINT_IGNORED, "%s", why);
        }
        return;
    }
    SET(h, WEFT_HINT_IGNORED,
        "unknown hint: weft knows timeout, <collective>_algorithm, is_high_priority_stream, "
        "max_ctas, min_ctas, cga_cluster_size");
}

int weft_options_apply(weft_comm_t comm, weft_comm_t parent, weft_options_t opts, const char *default_name)
{
    /* Inherit the parent's settings and hints, then override with opts. */
    comm->timeout = parent->timeout;
    comm->abort_on_error = parent->abort_on_error;
    comm->device = parent->device;
    snprintf(comm->name, sizeof(comm->name), "%s", default_name);
    for (int i = 0; i < parent->nhints; i++)
        if (hint_put(&comm->hints, &comm->nhints, parent->hints[i].key, parent->hints[i].value))
            return weft_error(WEFT_ERR_NO_MEMORY, "communicator creation: out of memory for hints");
    if (opts) {
        if (opts->set & WEFT_OPT_NAME) snprintf(comm->name, sizeof(comm->name), "%s", opts->name);
        if (opts->set & WEFT_OPT_TIMEOUT) comm->timeout = opts->timeout;
        if (opts->set & WEFT_OPT_ABORT) comm->abort_on_error = opts->abort_on_error;
        if (opts->set & WEFT_OPT_DEVICE) comm->device = opts->device;
        for (int i = 0; i < opts->nhints; i++)
            if (hint_put(&comm->hints, &comm->nhints, opts->hints[i].key, opts->hints[i].value))
                return weft_error(WEFT_ERR_NO_MEMORY, "communicator creation: out of memory for hints");
    }
    for (int i = 0; i < comm->nhints; i++) {
        weft_hint_t *h = &comm->hints[i];
        evaluate(comm, h);
        if (h->status != WEFT_HINT_APPLIED)
            weft_log(comm->rank == 0 ? WEFT_LOG_WARN : WEFT_LOG_DEBUG, "comm %s: hint %s=%s %s: %s", comm->name, h->key,
                     h->value, h->status == WEFT_HINT_REJECTED ? "rejected" : "ignored", h->reason);
    }
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_hint_status(weft_comm_t comm, const char *key, int *status, char *reason, size_t reason_len)
{
    WEFT_API_ENTER();
    int rc;
    WEFT_CHECK_INIT("weft_comm_hint_status");
    if ((rc = weft_comm_check(comm, "weft_comm_hint_status"))) return rc;
    if (!key || !status) return weft_error(WEFT_ERR_ARG, "weft_comm_hint_status: NULL key or status pointer");
    for (int i = 0; i < comm->nhints; i++)
        if (!strcmp(comm->hints[i].key, key)) {
            *status = comm->hints[i].status;
            if (reason && reason_len) snprintf(reason, reason_len, "%s", comm->hints[i].reason);
            return WEFT_SUCCESS;
        }
    *status = WEFT_HINT_NOT_SET;
    if (reason && reason_len) snprintf(reason, reason_len, "hint %s was not given to this communicator", key);
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_hint_count(weft_comm_t comm, int *count)
{
    WEFT_API_ENTER();
    int rc;
    WEFT_CHECK_INIT("weft_comm_hint_count");
    if ((rc = weft_comm_check(comm, "weft_comm_hint_count"))) return rc;
    if (!count) return weft_error(WEFT_ERR_ARG, "weft_comm_hint_count: NULL count pointer");
    *count = comm->nhints;
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_hint_get(weft_comm_t comm, int index, const char **key, const char **value, int *status,
                                const char **reason)
{
    WEFT_API_ENTER();
    int rc;
    WEFT_CHECK_INIT("weft_comm_hint_get");
    if ((rc = weft_comm_check(comm, "weft_comm_hint_get"))) return rc;
    if (index < 0 || index >= comm->nhints)
        return weft_error(WEFT_ERR_ARG, "weft_comm_hint_get: index %d out of range 0..%d", index, comm->nhints - 1);
    const weft_hint_t *h = &comm->hints[index];
    if (key) *key = h->key;
    if (value) *value = h->value;
    if (status) *status = h->status;
    if (reason) *reason = h->reason;
    return WEFT_SUCCESS;
}
