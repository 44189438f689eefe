/* SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), small and
 * self-contained: weft authenticates its bootstrap with them and has no
 * cryptography library among its dependencies. Checked against the
 * FIPS 180-4 examples and RFC 4231's HMAC test vectors (test_units.c).
 * Also: a constant-time comparison and random bytes from the kernel. */
#ifndef WEFT_BOOTSTRAP_HMAC_H
#define WEFT_BOOTSTRAP_HMAC_H

#include <stddef.h>
#include <stdint.h>

#define WEFT_SHA256_LEN   32
#define WEFT_SHA256_BLOCK 64

typedef struct weft_sha256 {
    uint32_t h[8];
    uint64_t bytes; /* message length so far */
    uint8_t buf[WEFT_SHA256_BLOCK];
    size_t used; /* bytes waiting in buf */
} weft_sha256_t;

void weft_sha256_init(weft_sha256_t *c);
void weft_sha256_update(weft_sha256_t *c, const void *data, size_t len);
void weft_sha256_final(weft_sha256_t *c, uint8_t out[WEFT_SHA256_LEN]);
void weft_sha256(const void *data, size_t len, uint8_t out[WEFT_SHA256_LEN]);

/* HMAC-SHA256, incrementally (a MAC over several fields without copying
 * them together) or in one call. Keys longer than a block are hashed
 * first, as RFC 2104 says. */
typedef struct weft_hmac {
    weft_sha256_t inner, outer;
} weft_hmac_t;

void weft_hmac_init(weft_hmac_t *m, const void *key, size_t key_len);
void weft_hmac_update(weft_hmac_t *m, const void *data, size_t len);
void weft_hmac_final(weft_hmac_t *m, uint8_t out[WEFT_SHA256_LEN]);
void weft_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len, uint8_t out[WEFT_SHA256_LEN]);

/* 1 when a and b (n bytes each) are equal. Its time does not depend on
 * where they differ, so a forger learns nothing from how long a refusal
 * took. */
int weft_ct_equal(const void *a, const void *b, size_t n);

/* Fills buf with n random bytes from the kernel (getrandom). Returns 0,
 * or an errno value when no randomness could be had. */
int weft_random_bytes(void *buf, size_t n);

#endif
