/* The job key (see jobkey.h): where the secret comes from, and its
 * derivation. */
#include "bootstrap/jobkey.h"

#include "weft_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SECRET_FILE_MAX 4096

/* SHA-256(label || 0 || secret): a fixed-size key, separate per kind of source. */
static void derive(weft_job_key_t *k, const char *label, const void *secret, size_t len)
{
    weft_sha256_t c;
    uint8_t zero = 0;
    weft_sha256_init(&c);
    weft_sha256_update(&c, label, strlen(label));
    weft_sha256_update(&c, &zero, 1);
    weft_sha256_update(&c, secret, len);
    weft_sha256_final(&c, k->key);
    k->keyed = 1;
}

static void warn_if_short(size_t len, const char *source)
{
    static int warned;
    if (len >= WEFT_JOB_SECRET_MIN || warned++) return;
    weft_warn("the job secret from %s is only %zu characters: anyone who records the store's traffic can test "
              "guesses offline; use at least %d random characters (weftrun uses 64 hex digits)",
              source, len, WEFT_JOB_SECRET_MIN);
}

static int read_secret_file(weft_job_key_t *k, const char *path, const char *who)
{
    char *buf = malloc(SECRET_FILE_MAX + 1);
    size_t len = 0;
    int rc = WEFT_SUCCESS, fd = -1;

    if (!buf) return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", who);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        rc = weft_error(WEFT_ERR_ARG, "%s: cannot read the job secret: WEFT_JOB_SECRET_FILE='%s': %s", who, path,
                        strerror(errno));
        goto out;
    }
    for (;;) {
        ssize_t n = read(fd, buf + len, SECRET_FILE_MAX + 1 - len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            rc = weft_error(WEFT_ERR_ARG, "%s: cannot read the job secret: WEFT_JOB_SECRET_FILE='%s': %s", who, path,
                            strerror(errno));
            goto out;
        }
        if (n == 0) break;
        len += (size_t)n;
        if (len > SECRET_FILE_MAX) {
            rc = weft_error(WEFT_ERR_ARG, "%s: WEFT_JOB_SECRET_FILE='%s' is longer than %d bytes (is it the secret?)",
                            who, path, SECRET_FILE_MAX);
            goto out;
        }
    }
    /* `echo secret > file` and Kubernetes Secrets made from files end in a newline. */
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        len--;
    if (len == 0) {
        rc = weft_error(WEFT_ERR_ARG, "%s: WEFT_JOB_SECRET_FILE='%s' is empty", who, path);
        goto out;
    }
    derive(k, "weft job secret v1", buf, len);
    snprintf(k->source, sizeof(k->source), "WEFT_JOB_SECRET_FILE=%.120s", path);
    warn_if_short(len, k->source);
out:
    if (fd >= 0) close(fd);
    memset(buf, 0, SECRET_FILE_MAX + 1);
    free(buf);
    return rc;
}

int weft_job_key_load(weft_job_key_t *k, const char *who)
{
    const char *run_id = getenv("TORCHELASTIC_RUN_ID");

    memset(k, 0, sizeof(*k));
    if (weft_cfg.job_secret[0]) {
        size_t len = strlen(weft_cfg.job_secret);
        derive(k, "weft job secret v1", weft_cfg.job_secret, len);
        snprintf(k->source, sizeof(k->source), "WEFT_JOB_SECRET");
        warn_if_short(len, k->source);
        return WEFT_SUCCESS;
    }
    if (weft_cfg.job_secret_file[0]) return read_secret_file(k, weft_cfg.job_secret_file, who);
    /* torchrun's run id: a random UUID with --standalone, the --rdzv-id
     * otherwise ("none", the static default, is no secret at all). Every
     * worker of the job has it; docs/SECURITY.md says how strong it is. */
    if (run_id && *run_id && strcmp(run_id, "none")) {
        derive(k, "weft torchrun run id v1", run_id, strlen(run_id));
        snprintf(k->source, sizeof(k->source), "TORCHELASTIC_RUN_ID (torchrun)");
        return WEFT_SUCCESS;
    }
    snprintf(k->source, sizeof(k->source), "none");
    return WEFT_SUCCESS;
}
