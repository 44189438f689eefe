/* The env bootstrap's wire protocol, shared by the store (env_server.c)
 * and its clients (env_client.c): constants, message kinds, the header
 * layout and its pack / unpack, and small helpers both sides use.
 *
 * Wire protocol: every message is a 40-byte header, then `len` payload
 * bytes; integers are big-endian.
 *   u32 magic "WFTS" | u16 version | u16 kind | u32 rank | u32 size |
 *   u64 seq | u64 arg | u64 len
 *   HELLO   client -> store  first message: rank, size = WORLD_SIZE, len 0,
 *                            arg bit 0: send this client LOST notices
 *   WELCOME store -> client  the HELLO was accepted, len 0
 *   CONTRIB client -> store  round `seq` (0, 1, 2, ... on every client),
 *                            arg = the client's remaining time in ms
 *                            (0: no deadline), len bytes of data
 *   RESULT  store -> client  round `seq` complete: size * len bytes, rank-major
 *   ERROR   store -> client  round `seq` (or the HELLO) failed: arg = the
 *                            weft status, payload = the message text (<= 4 KiB).
 *                            WEFT_ERR_ALREADY refusing a HELLO means "a previous
 *                            run's store, retry"; seq = UINT64_MAX is the notice
 *                            a closing store sends every rank still connected.
 *   BYE     client -> store  graceful finalize, seq = rounds done, len 0; the
 *                            store acknowledges by closing the connection.
 *   LOST    store -> client  (only to clients that asked in their HELLO) rank
 *                            `rank` is gone without a goodbye: arg = the weft
 *                            status, payload = why (<= 4 KiB). Sent between
 *                            other messages, at any time, before the failures
 *                            of rounds it causes; clients read it between
 *                            rounds without blocking (weft_env_poll_lost) and
 *                            while they wait for a round's answer.
 * Limits the store enforces: magic and version, kind valid for the
 * connection's state, rank < size, size == WORLD_SIZE, one connection per
 * rank, seq == that rank's next round, a contribution <= 64 MiB, a round
 * (size * len) <= 2 GiB, the same len from every rank, WORLD_SIZE <= 2^22,
 * at most WORLD_SIZE + 256 connections, a HELLO within 10 s of connecting.
 * A connection that breaks a rule is closed with a warning; a stranger's
 * does not disturb the job, a rank's fails the rounds it is part of.
 */
#ifndef WEFT_BOOTSTRAP_ENV_WIRE_H
#define WEFT_BOOTSTRAP_ENV_WIRE_H

#include "weft_internal.h"

#include <stddef.h>
#include <stdint.h>

#define STORE_MAGIC       0x57465453u /* "WFTS" */
#define STORE_VERSION     1u
#define STORE_HDR         40
#define STORE_MAX_CONTRIB ((uint64_t)64 << 20)
#define STORE_MAX_ROUND   ((uint64_t)2 << 30)
#define STORE_MAX_TEXT    4096
#define STORE_MAX_WORLD   (1 << 22)
#define STORE_NOTICE_SEQ  UINT64_MAX /* an ERROR not tied to a round: the store is closing */

enum { K_HELLO = 1, K_WELCOME = 2, K_CONTRIB = 3, K_RESULT = 4, K_ERROR = 5, K_BYE = 6, K_LOST = 7 };

#define HELLO_WANTS_LOST 1u /* HELLO arg bit: send LOST notices */

typedef struct store_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t kind;
    uint32_t rank;
    uint32_t size;
    uint64_t seq;
    uint64_t arg;
    uint64_t len;
} store_hdr_t;

/* Writes a header with this protocol's magic and version into b[STORE_HDR]. */
void weft_env_hdr_pack(uint8_t *b, unsigned kind, uint32_t rank, uint32_t size, uint64_t seq, uint64_t arg,
                       uint64_t len);
/* Reads b[STORE_HDR] into *h; checking magic, version and kind is the caller's. */
void weft_env_hdr_unpack(const uint8_t *b, store_hdr_t *h);

/* Writes "rank 3" or "ranks 3, 5, 10-19" (v: n ascending ranks) into buf;
 * long lists end in "... (N more)". */
void weft_env_format_ranks(char *buf, size_t cap, const int *v, int n);

/* snprintf for messages: truncation is fine (and expected for huge rank lists). */
void weft_env_textf(char *buf, size_t cap, const char *fmt, ...) WEFT_PRINTF(3, 4);

#endif
