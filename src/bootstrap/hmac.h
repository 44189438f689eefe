/* SHA-256 and HMAC-SHA256 from libcrypto (OpenSSL), over messages in
 * pieces (a MAC over several fields without the caller copying them
 * together), a constant-time comparison (CRYPTO_memcmp) and random bytes
 * from the kernel. weft writes no cryptography of its own: this is the
 * one place that calls the library. */
#ifndef WEFT_BOOTSTRAP_HMAC_H
#define WEFT_BOOTSTRAP_HMAC_H

#include <stddef.h>
#include <stdint.h>

#define WEFT_SHA256_LEN 32

/* One piece of a message. */
typedef struct weft_bytes {
    const void *p;
    size_t len;
} weft_bytes_t;

/* The digest / MAC of the pieces' concatenation. 0, or -1 when libcrypto
 * failed (out of memory): then out holds random bytes, which match
 * nothing, so a caller that ignores the failure still fails closed. */
int weft_sha256(const weft_bytes_t *parts, int n, uint8_t out[WEFT_SHA256_LEN]);
int weft_hmac_sha256(const void *key, size_t key_len, const weft_bytes_t *parts, int n,
                     uint8_t out[WEFT_SHA256_LEN]);

/* 1 when a and b (n bytes each) are equal. Its time does not depend on
 * where they differ, so a forger learns nothing from how long a refusal
 * took. */
int weft_ct_equal(const void *a, const void *b, size_t n);

/* Fills buf with n random bytes from the kernel (getrandom). Returns 0,
 * or an errno value when no randomness could be had. */
int weft_random_bytes(void *buf, size_t n);

#endif
