/* SHA-256 and HMAC-SHA256 through libcrypto (see hmac.h); the test
 * vectors (FIPS 180-4, RFC 4231) are in test/test_units.c. */
#include "bootstrap/hmac.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

enum { JOIN_ON_STACK = 512 };

/* The pieces joined (one piece: as it is). *heap is set when the result
 * was allocated; the caller wipes and frees it. NULL: out of memory. */
static const unsigned char *join(const weft_bytes_t *parts, int n, unsigned char *stack, unsigned char **heap,
                                 size_t *len)
{
    size_t total = 0;
    *heap = NULL;
    for (int i = 0; i < n; i++)
        total += parts[i].len;
    *len = total;
    if (n == 1) return parts[0].p ? parts[0].p : (const unsigned char *)"";
    unsigned char *b = total <= JOIN_ON_STACK ? stack : (*heap = malloc(total));
    if (!b) return NULL;
    size_t at = 0;
    for (int i = 0; i < n; at += parts[i].len, i++)
        if (parts[i].len) memcpy(b + at, parts[i].p, parts[i].len);
    return b;
}

static int failed(uint8_t out[WEFT_SHA256_LEN])
{
    weft_random_bytes(out, WEFT_SHA256_LEN);
    return -1;
}

int weft_sha256(const weft_bytes_t *parts, int n, uint8_t out[WEFT_SHA256_LEN])
{
    unsigned char stack[JOIN_ON_STACK], *heap;
    size_t len;
    const unsigned char *msg = join(parts, n, stack, &heap, &len);
    unsigned int olen = 0;
    int ok = msg && EVP_Digest(msg, len, out, &olen, EVP_sha256(), NULL) == 1 && olen == WEFT_SHA256_LEN;
    if (msg && msg != parts[0].p) OPENSSL_cleanse((void *)msg, len); /* it may hold the job secret */
    free(heap);
    return ok ? 0 : failed(out);
}

int weft_hmac_sha256(const void *key, size_t key_len, const weft_bytes_t *parts, int n, uint8_t out[WEFT_SHA256_LEN])
{
    unsigned char stack[JOIN_ON_STACK], *heap;
    size_t len;
    const unsigned char *msg = join(parts, n, stack, &heap, &len);
    unsigned int olen = 0;
    int ok = msg && key_len <= INT32_MAX && HMAC(EVP_sha256(), key, (int)key_len, msg, len, out, &olen) != NULL &&
             olen == WEFT_SHA256_LEN;
    if (msg && msg != parts[0].p) OPENSSL_cleanse((void *)msg, len);
    free(heap);
    return ok ? 0 : failed(out);
}

int weft_ct_equal(const void *a, const void *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

int weft_random_bytes(void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        /* Blocks only until the kernel's pool is first initialised, at boot. */
        ssize_t k = getrandom(p, n, 0);
        if (k < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}
