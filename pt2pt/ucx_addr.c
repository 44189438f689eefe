/* Sealing and checking UCX worker addresses (see ucx_addr.h). */
#include "pt2pt/ucx_addr.h"

#include <endian.h>
#include <stdio.h>
#include <string.h>

static const char label[] = "weft ucx address v1";

static void put32(uint8_t *p, uint32_t v)
{
    v = htobe32(v);
    memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return be32toh(v);
}

static void tag_of(const weft_job_key_t *k, const uint8_t *frame, size_t len, uint8_t out[WEFT_UCX_ADDR_TAG])
{
    const weft_bytes_t parts[] = {{label, sizeof(label)}, {frame, len}};
    weft_hmac_sha256(k->key, sizeof(k->key), parts, 2, out);
}

size_t weft_ucx_addr_sealed_len(size_t addr_len)
{
    return WEFT_UCX_ADDR_HDR + addr_len + WEFT_UCX_ADDR_TAG;
}

void weft_ucx_addr_seal(const weft_job_key_t *k, uint32_t rank, uint32_t size, const void *addr, size_t len,
                        uint8_t *out)
{
    put32(out, WEFT_UCX_ADDR_MAGIC);
    out[4] = (uint8_t)WEFT_UCX_ADDR_VERSION;
    out[5] = k->keyed ? 1 : 0;
    out[6] = out[7] = 0;
    put32(out + 8, rank);
    put32(out + 12, size);
    put32(out + 16, (uint32_t)len);
    memcpy(out + WEFT_UCX_ADDR_HDR, addr, len);
    tag_of(k, out, WEFT_UCX_ADDR_HDR + len, out + WEFT_UCX_ADDR_HDR + len);
}

int weft_ucx_addr_open(const weft_job_key_t *k, uint32_t rank, uint32_t size, const uint8_t *blob, size_t blob_len,
                       size_t *addr_len, char *why, size_t cap)
{
    uint8_t want[WEFT_UCX_ADDR_TAG];
    size_t len;

    if (blob_len < WEFT_UCX_ADDR_HDR + WEFT_UCX_ADDR_TAG) {
        snprintf(why, cap, "%zu bytes are too few for a sealed address", blob_len);
        return -1;
    }
    len = get32(blob + 16);
    if (get32(blob) != WEFT_UCX_ADDR_MAGIC || blob[4] != WEFT_UCX_ADDR_VERSION) {
        snprintf(why, cap, "it is not a sealed address (magic 0x%08x, version %u: a different weft, or garbage)",
                 get32(blob), blob[4]);
        return -1;
    }
    if (len < WEFT_UCX_ADDR_MIN || len > WEFT_UCX_ADDR_MAX || weft_ucx_addr_sealed_len(len) != blob_len) {
        snprintf(why, cap, "its length %zu is outside [%d, %d] or disagrees with the %zu bytes received", len,
                 WEFT_UCX_ADDR_MIN, WEFT_UCX_ADDR_MAX, blob_len);
        return -1;
    }
    if (get32(blob + 8) != rank || get32(blob + 12) != size) {
        snprintf(why, cap, "it was sealed by rank %u of %u, not rank %u of %u", get32(blob + 8), get32(blob + 12), rank,
                 size);
        return -1;
    }
    if ((blob[5] & 1) != (k->keyed ? 1 : 0)) {
        snprintf(why, cap, "%s (give every rank the same WEFT_JOB_SECRET, or none)",
                 k->keyed ? "it was sealed without a job secret and this rank has one"
                          : "it was sealed with a job secret and this rank has none");
        return -1;
    }
    tag_of(k, blob, WEFT_UCX_ADDR_HDR + len, want);
    if (!weft_ct_equal(want, blob + WEFT_UCX_ADDR_HDR + len, WEFT_UCX_ADDR_TAG)) {
        snprintf(why, cap, "%s",
                 k->keyed ? "its tag is wrong: it was altered on the way, or sealed with a different job secret"
                          : "its checksum is wrong: it was altered on the way");
        return -1;
    }
    *addr_len = len;
    return 0;
}
