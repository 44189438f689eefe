/* libFuzzer harness for what weft parses from the network before it
 * trusts anyone: the env store's checks of a connection's messages
 * (src/bootstrap/env_wire.c: weft_env_judge_header and, on a node relay's
 * connection, weft_env_judge_route; the handshake's
 * payloads, weft_env_proof_ok) and the sealed UCX addresses every rank
 * checks (pt2pt/ucx_addr.c). The store runs exactly these functions on
 * every header and handshake payload it reads, so an input here is a
 * byte stream a stranger could send.
 *
 * Input: byte 0 picks the target and options, byte 1 the world size and
 * rank; the rest is the stream. Besides ASan/UBSan findings, the harness
 * aborts when a verdict breaks what the store relies on: a body it is
 * told to read is within the limits for the connection's phase, a
 * member's contribution fits the round, a verdict's text is terminated.
 *
 * Built and run by test/fuzz/run.sh; by hand:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Iinclude -Isrc -I. \
 *     test/fuzz/fuzz_store.c src/bootstrap/env_wire.c src/bootstrap/hmac.c pt2pt/ucx_addr.c -o fuzz_store */
#include "bootstrap/env_wire.h"
#include "pt2pt/ucx_addr.h"

#include <stdlib.h>
#include <string.h>

#define REQUIRE(cond)                                                                                                  \
    do {                                                                                                               \
        if (!(cond)) abort();                                                                                          \
    } while (0)

static void check_judgement(const store_judgement_t *j)
{
    REQUIRE(memchr(j->why, '\0', sizeof(j->why)) != NULL);
    REQUIRE(j->action == JUDGE_BODY || j->action == JUDGE_REFUSE || j->action == JUDGE_DROP);
}

/* A node relay's stream after its RELAY: ROUTE messages. */
static void fuzz_routes(const uint8_t *d, size_t n)
{
    while (n >= STORE_HDR) {
        store_hdr_t h;
        store_judgement_t j;
        weft_env_judge_route(d, STORE_ROUTE_CHUNK, &h, &j);
        check_judgement(&j);
        d += STORE_HDR, n -= STORE_HDR;
        if (j.action != JUDGE_BODY) return;
        REQUIRE(h.kind == K_ROUTE && h.rank < STORE_RELAY_ROUTES &&
                ((h.arg == ROUTE_CLOSE && h.len == 0) || (h.arg == ROUTE_DATA && h.len >= 1 && h.len <= STORE_ROUTE_CHUNK)));
        if (h.len > n) return;
        d += h.len, n -= (size_t)h.len;
    }
}

/* A connection's byte stream, message by message, as the store reads it.
 * `trust`: accept any proof, to explore what a member may send next. */
static void fuzz_stream(const uint8_t *d, size_t n, uint32_t world, int phase, uint32_t member, int trust)
{
    static const uint8_t ns[STORE_NONCE] = {1, 2, 3};
    weft_job_key_t key = {.keyed = 1};
    uint8_t nc[STORE_NONCE] = {0};
    store_hdr_t hello = {0};

    memset(key.key, 0x42, sizeof(key.key));
    while (n >= STORE_HDR) {
        store_hdr_t h;
        store_judgement_t j;
        weft_env_judge_header(d, phase, world, member, &h, &j);
        check_judgement(&j);
        d += STORE_HDR, n -= STORE_HDR;
        if (j.action != JUDGE_BODY) return;
        if (phase == PHASE_HELLO && h.kind == K_RELAY) {
            REQUIRE(h.len == 0 && h.size == world && h.magic == STORE_MAGIC && h.version == STORE_VERSION);
            fuzz_routes(d, n);
            return;
        }
        if (phase == PHASE_HELLO)
            REQUIRE(h.kind == K_HELLO && h.len == STORE_NONCE && h.magic == STORE_MAGIC);
        else if (phase == PHASE_PROOF)
            REQUIRE(h.kind == K_PROOF && h.len == STORE_PROOF && h.version == STORE_VERSION);
        else if (h.kind == K_CONTRIB || h.kind == K_GATHER)
            REQUIRE(h.rank == member && h.size == world && h.len <= STORE_MAX_CONTRIB &&
                    h.len * (uint64_t)world <= STORE_MAX_ROUND);
        else if (h.kind == K_BCAST)
            REQUIRE(h.rank == member && h.size == world && h.len <= STORE_MAX_CONTRIB);
        else if (h.kind == K_PUT)
            REQUIRE(h.rank == member && h.size == world && h.len <= STORE_MAX_BLOB);
        else if (h.kind == K_GET)
            REQUIRE(h.rank == member && h.size == world && h.len >= 4 && h.len <= 4 * STORE_GET_MAX &&
                    h.len % 4 == 0 && h.len <= STORE_SMALL_MAX);
        else
            REQUIRE(h.kind == K_BYE && h.len == 0);
        if (h.len > n) return; /* the store would wait for the rest */
        if (phase == PHASE_HELLO) {
            hello = h;
            memcpy(nc, d, STORE_NONCE);
            phase = PHASE_PROOF;
        } else if (phase == PHASE_PROOF) {
            int ok = weft_env_proof_ok(key.key, &hello, &h, d, nc, ns);
            if (!ok && !trust) return;
            if (hello.rank >= world) return; /* the store refuses the claim */
            member = hello.rank;
            phase = PHASE_MEMBER;
        }
        d += h.len, n -= (size_t)h.len;
    }
}

/* A frame claimed to be rank's sealed UCX address; and the round trip of
 * the input as an address, which must open again unchanged. */
static void fuzz_ucx_addr(const uint8_t *d, size_t n, uint32_t rank, uint32_t size, int keyed)
{
    weft_job_key_t key = {.keyed = keyed};
    char why[256];
    size_t len = 0;
    memset(key.key, keyed ? 0x17 : 0, sizeof(key.key));
    if (weft_ucx_addr_open(&key, rank, size, d, n, &len, why, sizeof(why)) == 0)
        REQUIRE(len >= WEFT_UCX_ADDR_MIN && len <= WEFT_UCX_ADDR_MAX && weft_ucx_addr_sealed_len(len) == n);
    else
        REQUIRE(memchr(why, '\0', sizeof(why)) != NULL);
    if (n >= WEFT_UCX_ADDR_MIN && n <= 4096) {
        uint8_t *b = malloc(weft_ucx_addr_sealed_len(n));
        REQUIRE(b);
        weft_ucx_addr_seal(&key, rank, size, d, n, b);
        REQUIRE(weft_ucx_addr_open(&key, rank, size, b, weft_ucx_addr_sealed_len(n), &len, why, sizeof(why)) == 0);
        REQUIRE(len == n && !memcmp(b + WEFT_UCX_ADDR_HDR, d, n));
        free(b);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    uint8_t opt = data[0], sel = data[1];
    /* Small worlds mostly; the largest one sometimes (overflow edges). */
    uint32_t world = (opt & 0x80) ? STORE_MAX_WORLD : 1u + sel % 64u;
    uint32_t rank = sel % world;
    switch (opt & 3) {
    case 0: fuzz_stream(data + 2, size - 2, world, PHASE_HELLO, 0, (opt & 4) != 0); break;
    case 1: fuzz_stream(data + 2, size - 2, world, PHASE_MEMBER, rank, 0); break;
    default: fuzz_ucx_addr(data + 2, size - 2, rank, world, (opt & 4) != 0); break;
    }
    return 0;
}
