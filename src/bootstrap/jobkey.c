/* The job key (see jobkey.h): where the secret comes from, and its
 * derivation. */
#include "bootstrap/jobkey.h"

#include "weft_internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET_FILE_MAX 4096

/* SHA-256(label || 0 || secret): a fixed-size key, separate per kind of source. */
static int derive(weft_job_key_t *k, const char *label, const void *secret, size_t len)
{
    static const uint8_t zero = 0;
    const weft_bytes_t parts[] = {{label, strlen(label)}, {&zero, 1}, {secret, len}};
    if (weft_sha256(parts, 3, k->key))
        return weft_error(WEFT_ERR_INTERNAL, "the job key: libcrypto could not compute SHA-256");
    k->keyed = 1;
    return WEFT_SUCCESS;
}

/* At most how many bits of entropy a secret of this text holds: its length
 * times log2 of the alphabet its characters come from (hex digits, with
 * a UUID's hyphens not counted; else digits, lower case, upper case,
 * other printable, other bytes). An upper bound: "aaaa..." scores like a
 * random string of lower case letters. */
static double secret_bits(const char *s, size_t len)
{
    size_t hex = 0, other_hex = 0;
    int digit = 0, lower = 0, upper = 0, punct = 0, high = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (isxdigit(c))
            hex++;
        else if (c != '-')
            other_hex = 1;
        if (isdigit(c))
            digit = 1;
        else if (islower(c))
            lower = 1;
        else if (isupper(c))
            upper = 1;
        else if (isprint(c))
            punct = 1;
        else
            high = 1;
    }
    if (!other_hex) return 4.0 * (double)hex;
    int alphabet = 10 * digit + 26 * lower + 26 * upper + 33 * punct + 161 * high;
    return (double)len * log2((double)alphabet);
}

/* Secrets that could be guessed offline from one recorded exchange are
 * refused unless the user says they know (WEFT_JOB_SECRET_ALLOW_WEAK). */
static int check_strength(const char *secret, size_t len, const char *source, const char *who)
{
    static int warned;
    double bits = secret_bits(secret, len);
    if (bits >= WEFT_JOB_SECRET_MIN_BITS) return WEFT_SUCCESS;
    if (!weft_cfg.job_secret_allow_weak)
        return weft_error(WEFT_ERR_ARG,
                          "%s: the job secret from %s (%zu characters) holds at most %.0f bits, below %d: anyone who "
                          "records one exchange with the store can test guesses offline. Use at least 32 random hex "
                          "digits (weftrun makes 64; `openssl rand -hex 32`), or set "
                          "WEFT_JOB_SECRET_ALLOW_WEAK=1 to accept it",
                          who, source, len, bits, WEFT_JOB_SECRET_MIN_BITS);
    if (!warned++)
        weft_warn("the job secret from %s holds at most %.0f bits (below %d), accepted because "
                  "WEFT_JOB_SECRET_ALLOW_WEAK is set: guesses can be tested offline",
                  source, bits, WEFT_JOB_SECRET_MIN_BITS);
    return WEFT_SUCCESS;
}

static int read_secret_file(weft_job_key_t *k, const char *path, const char *who)
{
    char *buf = malloc(SECRET_FILE_MAX + 1);
    size_t len = 0;
    int rc = WEFT_SUCCESS, fd = -1;

    if (!buf) return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", who);
    /* Non-blocking: a FIFO (or a device) there must fail at once, not stop init. Links are followed:
     * Kubernetes mounts a Secret's files as links. */
    struct stat st;
    if ((fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)) < 0) {
        rc = weft_error(WEFT_ERR_ARG, "%s: cannot read the job secret: WEFT_JOB_SECRET_FILE='%s': %s", who, path,
                        strerror(errno));
        goto out;
    }
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        rc = weft_error(WEFT_ERR_ARG, "%s: WEFT_JOB_SECRET_FILE='%s' is not a regular file", who, path);
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
    snprintf(k->source, sizeof(k->source), "WEFT_JOB_SECRET_FILE=%.120s", path);
    WEFT_CHECK_GOTO(check_strength(buf, len, k->source, who), rc, out);
    rc = derive(k, "weft job secret v1", buf, len);
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
        snprintf(k->source, sizeof(k->source), "WEFT_JOB_SECRET");
        int rc = check_strength(weft_cfg.job_secret, len, k->source, who);
        return rc ? rc : derive(k, "weft job secret v1", weft_cfg.job_secret, len);
    }
    if (weft_cfg.job_secret_file[0]) return read_secret_file(k, weft_cfg.job_secret_file, who);
    /* torchrun's run id: a random UUID with --standalone, the --rdzv-id
     * otherwise ("none", the static default, is no secret at all). Every
     * worker of the job has it; docs/SECURITY.md says how strong it is. */
    if (run_id && *run_id && strcmp(run_id, "none")) {
        snprintf(k->source, sizeof(k->source), "TORCHELASTIC_RUN_ID (torchrun)");
        return derive(k, "weft torchrun run id v1", run_id, strlen(run_id));
    }
    snprintf(k->source, sizeof(k->source), "none");
    return WEFT_SUCCESS;
}

int weft_job_key_from_secret(weft_job_key_t *k, const void *secret, size_t len, const char *source)
{
    memset(k, 0, sizeof(*k));
    snprintf(k->source, sizeof(k->source), "%s", source);
    return derive(k, "weft rendezvous secret v1", secret, len);
}
