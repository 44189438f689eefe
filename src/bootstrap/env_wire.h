/* The env bootstrap's wire protocol, shared by the store (env_server.c)
 * and its clients (env_client.c): constants, message kinds, the header
 * layout and its pack / unpack, the handshake's proofs, the store's
 * checks of what a connection sends (pure functions: test/fuzz drives
 * them with arbitrary bytes), and small helpers both sides use.
 *
 * Wire protocol (version 3): every message is a 40-byte header, then `len`
 * payload bytes; integers are big-endian.
 *   u32 magic "WFTS" | u16 version | u16 kind | u32 rank | u32 size |
 *   u64 seq | u64 arg | u64 len
 * The handshake: a challenge-response in both directions over the job key
 * (bootstrap/jobkey.h), so the secret never crosses the wire and neither
 * side can be impersonated without it.
 *   HELLO     client -> store  first message: rank, size = WORLD_SIZE,
 *                              arg bit 0: send this client LOST notices,
 *                              arg bit 1: the client has a job secret;
 *                              payload: the client's 32-byte nonce Nc
 *   CHALLENGE store -> client  arg bit 1: the store has a job secret;
 *                              payload: the store's nonce Ns (32 bytes),
 *                              then its proof HMAC(key, "weft store v2
 *                              store" || Nc || Ns || rank || size) (32 bytes)
 *   PROOF     client -> store  (after checking the store's proof) rank,
 *                              size as in the HELLO; payload: HMAC(key,
 *                              "weft store v2 rank" || Ns || Nc || rank || size)
 *   WELCOME   store -> client  the proof was right and the rank is free, len 0.
 * A rank is a member once WELCOMEd; only then does it hold its slot.
 *   CONTRIB client -> store  allgather round `seq` (0, 1, 2, ... on every
 *                            client, whatever the round's kind), arg = the
 *                            client's remaining time in ms (0: no
 *                            deadline), len bytes of data
 *   GATHER  client -> store  a round like CONTRIB whose result only rank 0
 *                            gets (size * len bytes); the others get an
 *                            empty RESULT once every rank contributed
 *   BCAST   client -> store  a round in which rank 0 contributes len bytes
 *                            and every other rank none: the others get
 *                            rank 0's bytes, rank 0 an empty RESULT
 *   RESULT  store -> client  round `seq` complete: CONTRIB's size * len
 *                            bytes, rank-major, or as GATHER / BCAST say
 *   PUT     client -> store  this rank's blob (its UCX address, <= 64 KiB),
 *                            kept for the job; no answer
 *   GET     client -> store  arg = remaining time in ms; payload: 1 to 16
 *                            u32 ranks whose blobs are wanted. Each is
 *                            answered by a VALUE when that rank has PUT
 *                            (at once, or when it does: the answers may
 *                            come in any order), or by a failing VALUE at
 *                            the deadline or when the rank left without one
 *   VALUE   store -> client  rank = whose blob, arg = the weft status: 0
 *                            and the blob, or the status and why (text)
 *   ERROR   store -> client  round `seq` (or the handshake) failed: arg = the
 *                            weft status, payload = the message text (<= 4 KiB).
 *                            WEFT_ERR_ALREADY refusing a PROOF means "a previous
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
 * Node relays (env_relay.c): a node's ranks may reach the store through
 * one connection that its first local rank opens, so rank 0 holds one
 * descriptor per node, not per rank. The relay only multiplexes: each rank
 * runs the protocol above end to end with the store (its handshake
 * included), and the relay moves bytes.
 *   RELAY   relay -> store   a connection's first message instead of a
 *                            HELLO: size = WORLD_SIZE, rank = the relay's
 *                            leader rank (for messages), len 0
 *   ROUTE   both ways        on a relay's connection only: rank = the
 *                            route (the relay's number for one local
 *                            connection, < STORE_RELAY_ROUTES), arg =
 *                            ROUTE_DATA and len bytes of that
 *                            connection's stream follow (a relay sends at
 *                            most STORE_ROUTE_CHUNK at once, the store one
 *                            message of its own), or
 *                            ROUTE_CLOSE and len 0: the connection closed
 *                            (relay -> store) or is to be closed once what
 *                            was routed to it is written (store -> relay)
 * Limits the store enforces: magic and version, kind valid for the
 * connection's state, a right proof before anything else, rank < size,
 * size == WORLD_SIZE, one connection per rank, seq == that rank's next
 * round, a contribution <= 64 MiB, a round (size * len) <= 2 GiB, the same
 * len from every rank (a BCAST: none but rank 0's), the same kind from
 * every rank, one PUT per rank, WORLD_SIZE <= 2^22, at most WORLD_SIZE + 256
 * connections (the oldest unauthenticated one makes room for a new one),
 * the handshake within 10 s of connecting. A connection that breaks a rule
 * is closed, logged at a bounded rate; a stranger's does not disturb the
 * job, a rank's fails the rounds it is part of. After the handshake the
 * stream is not authenticated message by message: an attacker on the path
 * can still disrupt it (docs/SECURITY.md).
 */
#ifndef WEFT_BOOTSTRAP_ENV_WIRE_H
#define WEFT_BOOTSTRAP_ENV_WIRE_H

#include "bootstrap/hmac.h"
#include "weft_internal.h"

#include <stddef.h>
#include <stdint.h>

#define STORE_MAGIC       0x57465453u /* "WFTS" */
#define STORE_VERSION     3u
#define STORE_HDR         40
#define STORE_MAX_CONTRIB ((uint64_t)64 << 20)
#define STORE_MAX_BLOB    ((uint64_t)64 << 10) /* a PUT */
#define STORE_GET_MAX     16                   /* ranks one GET may name (u32 each) */
#define STORE_MAX_ROUND   ((uint64_t)2 << 30)
#define STORE_MAX_TEXT    4096
#define STORE_PRINT_TEXT  1024 /* of a received text, escaped, at most this much is printed */
#define STORE_MAX_WORLD   (1 << 22)
#define STORE_NOTICE_SEQ  UINT64_MAX /* an ERROR not tied to a round: the store is closing */
#define STORE_NONCE       32
#define STORE_PROOF       WEFT_SHA256_LEN
#define STORE_CHALLENGE   (STORE_NONCE + STORE_PROOF) /* a CHALLENGE's payload */
#define STORE_SMALL_MAX   STORE_CHALLENGE             /* the most a connection sends before it is a member, and a GET */
_Static_assert(4 * STORE_GET_MAX <= STORE_SMALL_MAX, "a GET's ranks fit the store's small buffer");

enum {
    K_HELLO = 1,
    K_WELCOME = 2,
    K_CONTRIB = 3,
    K_RESULT = 4,
    K_ERROR = 5,
    K_BYE = 6,
    K_LOST = 7,
    K_CHALLENGE = 8,
    K_PROOF = 9,
    K_GATHER = 10,
    K_BCAST = 11,
    K_PUT = 12,
    K_GET = 13,
    K_VALUE = 14,
    K_RELAY = 15,
    K_ROUTE = 16
};

#define STORE_RELAY_ROUTES 1024        /* routes one relay may carry */
#define STORE_ROUTE_CHUNK  (256 << 10) /* the most a ROUTE carries */
enum { ROUTE_DATA = 0, ROUTE_CLOSE = 1 };

/* A round's contribution: CONTRIB, GATHER or BCAST. */
static inline int weft_env_is_round(unsigned kind)
{
    return kind == K_CONTRIB || kind == K_GATHER || kind == K_BCAST;
}

#define HELLO_WANTS_LOST 1u /* HELLO arg bit: send LOST notices */
#define FLAG_KEYED       2u /* HELLO / CHALLENGE arg bit: this side has a job secret */

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

/* ---- the handshake's proofs -------------------------------------------- */

enum { PROOF_BY_STORE = 0, PROOF_BY_RANK = 1 };

/* The proof `by` (the store or the rank) sends: HMAC(key, label || the
 * other side's nonce || its own || rank || size). Each side answers the
 * other's fresh nonce, so a recorded proof is worth nothing later, and
 * the labels differ, so the store cannot be used to make a rank's proof. */
void weft_env_proof(const uint8_t key[WEFT_SHA256_LEN], int by, const uint8_t nc[STORE_NONCE],
                    const uint8_t ns[STORE_NONCE], uint32_t rank, uint32_t size, uint8_t out[STORE_PROOF]);

/* ---- the store's checks of what a connection sends ---------------------- */

/* Where a connection is: it must say HELLO, then PROOF, then it is a member. */
enum { PHASE_HELLO = 0, PHASE_PROOF = 1, PHASE_MEMBER = 2 };

/* What to do with a header. */
enum {
    JUDGE_BODY = 0,   /* read its h->len payload bytes (always within the limits) */
    JUDGE_REFUSE = 1, /* answer ERROR `status` with `why`, then close */
    JUDGE_DROP = 2    /* close at once; `why` says why (for the log) */
};

typedef struct store_judgement {
    int action;
    int status;
    char why[256];
} store_judgement_t;

/* The store's check of the header b[STORE_HDR] on a connection in
 * `phase` (a member: of rank member_rank) of a world of `world` ranks:
 * unpacks it into *h and says what to do. Pure: no I/O, no state. */
void weft_env_judge_header(const uint8_t *b, int phase, uint32_t world, uint32_t member_rank, store_hdr_t *h,
                           store_judgement_t *j);

/* The store's check of a PROOF (header p, payload `proof`) against the
 * HELLO it answers (header hello; nonces nc, ns): 1 when the rank, size
 * and proof are right. The comparison takes constant time. */
int weft_env_proof_ok(const uint8_t key[WEFT_SHA256_LEN], const store_hdr_t *hello, const store_hdr_t *p,
                      const uint8_t proof[STORE_PROOF], const uint8_t nc[STORE_NONCE], const uint8_t ns[STORE_NONCE]);

/* The check of a ROUTE header b[STORE_HDR] on a relay's connection, by
 * the store (max_len STORE_ROUTE_CHUNK: what a relay reads at once) or by
 * the relay (a whole message of the store's: a round's result): JUDGE_BODY
 * (read h->len bytes of route h->rank's stream; 0 for a close) or
 * JUDGE_DROP with why. Pure. */
void weft_env_judge_route(const uint8_t *b, uint64_t max_len, store_hdr_t *h, store_judgement_t *j);

/* ---- node relays -------------------------------------------------------- */

/* The abstract unix socket on which the relay of the ranks led by `leader`
 * listens for the job of `size` ranks whose store is at `where`, keyed by
 * the job key (unguessable without it). Fills *sa and *len. */
struct sockaddr_un;
void weft_env_relay_addr(const uint8_t key[WEFT_SHA256_LEN], int size, int leader, const char *where,
                         struct sockaddr_un *sa, unsigned *len);

/* ---- helpers ------------------------------------------------------------ */

/* Writes "rank 3" or "ranks 3, 5, 10-19" (v: n ascending ranks) into buf;
 * long lists end in "... (N more)". */

/* snprintf for messages: truncation is fine (and expected for huge rank lists). */
void weft_env_textf(char *buf, size_t cap, const char *fmt, ...) WEFT_PRINTF(3, 4);

#endif
