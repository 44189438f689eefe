/* The job key: what ranks prove membership with. It comes from
 * WEFT_JOB_SECRET, else from the file WEFT_JOB_SECRET_FILE names, else
 * (under torchrun) from TORCHELASTIC_RUN_ID, else there is none and the
 * key is all zeros, which authenticates nothing but keeps one code path.
 * The secret itself is only ever hashed: the key is SHA-256 over a
 * domain label and the secret, and what crosses the wire are HMACs made
 * with it (docs/SECURITY.md). */
#ifndef WEFT_BOOTSTRAP_JOBKEY_H
#define WEFT_BOOTSTRAP_JOBKEY_H

#include "bootstrap/hmac.h"

#include <stddef.h>
#include <stdint.h>

/* Weaker secrets are refused (WEFT_JOB_SECRET_ALLOW_WEAK accepts them): one recorded exchange lets
 * guesses be tested offline. */
#define WEFT_JOB_SECRET_MIN_BITS 128

typedef struct weft_job_key {
    int keyed; /* 1: a secret was configured or derived; 0: none (key all zeros) */
    uint8_t key[WEFT_SHA256_LEN];
    char source[160]; /* for messages: "WEFT_JOB_SECRET", "WEFT_JOB_SECRET_FILE=/run/secret", ... */
} weft_job_key_t;

/* Fills *k from weft_cfg (weft_config_load() has run) and the
 * environment; fails with WEFT_ERR_ARG when WEFT_JOB_SECRET_FILE cannot
 * be read or is empty, naming the file. `who` prefixes messages. */
int weft_job_key_load(weft_job_key_t *k, const char *who);

/* Fills *k from a rendezvous handle's random secret (`source` names it in
 * messages). */
int weft_job_key_from_secret(weft_job_key_t *k, const void *secret, size_t len, const char *source);

#endif
