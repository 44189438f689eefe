/* Every rank's UCX worker address travels through the bootstrap's
 * allgather sealed in a small frame, and is checked before UCX sees it:
 * UCX 1.13 has no call that validates a remote address (ucp_ep_create
 * unpacks it and asserts on garbage, killing the process), so a bad
 * address must never reach it.
 *
 * Frame (big-endian): u32 magic "WUCA" | u8 version | u8 flags (bit 0:
 * keyed) | u16 0 | u32 rank | u32 size | u32 address length | the
 * address | 32-byte tag. The tag is HMAC-SHA256 over everything before
 * it, with the job key (bootstrap/jobkey.h): with a job secret it proves
 * a member of the job sealed this address for this rank (through any
 * bootstrap, torch's unauthenticated agent store included); without one
 * the key is zeros and the tag is a checksum that catches corruption and
 * garbage, not forgery. What is checked: the frame, the length bounds
 * [WEFT_UCX_ADDR_MIN, WEFT_UCX_ADDR_MAX] against the length the
 * allgather delivered, the rank and world size, and the tag. What is not:
 * whether a sealed address is one UCX will accept (only UCX can say). */
#ifndef WEFT_PT2PT_UCX_ADDR_H
#define WEFT_PT2PT_UCX_ADDR_H

#include "bootstrap/jobkey.h"

#include <stddef.h>
#include <stdint.h>

#define WEFT_UCX_ADDR_MAGIC   0x57554341u /* "WUCA" */
#define WEFT_UCX_ADDR_VERSION 1u
#define WEFT_UCX_ADDR_HDR     20
#define WEFT_UCX_ADDR_TAG     WEFT_SHA256_LEN
#define WEFT_UCX_ADDR_MIN     8     /* no UCX worker address is shorter */
#define WEFT_UCX_ADDR_MAX     65536 /* nor longer (a few hundred bytes per device and transport) */

/* The frame's size for an address of addr_len bytes. */
size_t weft_ucx_addr_sealed_len(size_t addr_len);

/* Writes rank's address (len bytes, within the bounds) sealed into
 * out[weft_ucx_addr_sealed_len(len)]. */
void weft_ucx_addr_seal(const weft_job_key_t *k, uint32_t rank, uint32_t size, const void *addr, size_t len,
                        uint8_t *out);

/* Checks blob[blob_len], what the allgather delivered as rank's frame.
 * Returns 0 with *addr_len (the address starts at blob +
 * WEFT_UCX_ADDR_HDR), or -1 with why (a sentence fragment) filled. Pure:
 * test/fuzz feeds it arbitrary bytes. */
int weft_ucx_addr_open(const weft_job_key_t *k, uint32_t rank, uint32_t size, const uint8_t *blob, size_t blob_len,
                       size_t *addr_len, char *why, size_t cap);

#endif
