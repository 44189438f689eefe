/* The env bootstrap's wire protocol (see env_wire.h): big-endian header
 * pack / unpack, the handshake's proofs, the store's checks of incoming
 * headers, and the message helpers the store and its clients share. */
#include "bootstrap/env_wire.h"

#include <endian.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

static void put16(uint8_t *p, uint16_t v)
{
    v = htobe16(v);
    memcpy(p, &v, 2);
}
static void put32(uint8_t *p, uint32_t v)
{
    v = htobe32(v);
    memcpy(p, &v, 4);
}
static void put64(uint8_t *p, uint64_t v)
{
    v = htobe64(v);
    memcpy(p, &v, 8);
}
static uint16_t get16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return be16toh(v);
}
static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return be32toh(v);
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return be64toh(v);
}

void weft_env_hdr_pack(uint8_t *b, unsigned kind, uint32_t rank, uint32_t size, uint64_t seq, uint64_t arg,
                       uint64_t len)
{
    put32(b + 0, STORE_MAGIC);
    put16(b + 4, (uint16_t)STORE_VERSION);
    put16(b + 6, (uint16_t)kind);
    put32(b + 8, rank);
    put32(b + 12, size);
    put64(b + 16, seq);
    put64(b + 24, arg);
    put64(b + 32, len);
}

void weft_env_hdr_unpack(const uint8_t *b, store_hdr_t *h)
{
    h->magic = get32(b + 0);
    h->version = get16(b + 4);
    h->kind = get16(b + 6);
    h->rank = get32(b + 8);
    h->size = get32(b + 12);
    h->seq = get64(b + 16);
    h->arg = get64(b + 24);
    h->len = get64(b + 32);
}

void weft_env_proof(const uint8_t key[WEFT_SHA256_LEN], int by, const uint8_t nc[STORE_NONCE],
                    const uint8_t ns[STORE_NONCE], uint32_t rank, uint32_t size, uint8_t out[STORE_PROOF])
{
    static const char by_store[] = "weft store v2 store", by_rank[] = "weft store v2 rank";
    uint8_t ids[8];
    put32(ids, rank);
    put32(ids + 4, size);
    /* the two labels differ, and each side's own nonce goes second */
    const weft_bytes_t store[] = {{by_store, sizeof(by_store)}, {nc, STORE_NONCE}, {ns, STORE_NONCE}, {ids, 8}};
    const weft_bytes_t rank_[] = {{by_rank, sizeof(by_rank)}, {ns, STORE_NONCE}, {nc, STORE_NONCE}, {ids, 8}};
    weft_hmac_sha256(key, WEFT_SHA256_LEN, by == PROOF_BY_STORE ? store : rank_, 4, out);
}

int weft_env_proof_ok(const uint8_t key[WEFT_SHA256_LEN], const store_hdr_t *hello, const store_hdr_t *p,
                      const uint8_t proof[STORE_PROOF], const uint8_t nc[STORE_NONCE], const uint8_t ns[STORE_NONCE])
{
    uint8_t want[STORE_PROOF];
    int ok;
    weft_env_proof(key, PROOF_BY_RANK, nc, ns, hello->rank, hello->size, want);
    ok = weft_ct_equal(want, proof, STORE_PROOF);
    return ok && p->rank == hello->rank && p->size == hello->size;
}

static void judge(store_judgement_t *j, int action, int status, const char *fmt, ...) WEFT_PRINTF(4, 5);
static void judge(store_judgement_t *j, int action, int status, const char *fmt, ...)
{
    va_list ap;
    j->action = action;
    j->status = status;
    va_start(ap, fmt);
    vsnprintf(j->why, sizeof(j->why), fmt, ap);
    va_end(ap);
}

void weft_env_judge_header(const uint8_t *b, int phase, uint32_t world, uint32_t member_rank, store_hdr_t *h,
                           store_judgement_t *j)
{
    weft_env_hdr_unpack(b, h);
    judge(j, JUDGE_BODY, WEFT_SUCCESS, "ok");
    if (phase == PHASE_MEMBER) {
        /* A member's stream out of step is a broken rank, not a stranger. */
        if (h->magic != STORE_MAGIC || h->version != STORE_VERSION)
            judge(j, JUDGE_DROP, WEFT_ERR_BOOTSTRAP, "sent a corrupt message (magic 0x%08x, version %u)", h->magic,
                  h->version);
        else if ((weft_env_is_round(h->kind) || h->kind == K_PUT || h->kind == K_GET) &&
                 (h->rank != member_rank || h->size != world))
            judge(j, JUDGE_DROP, WEFT_ERR_BOOTSTRAP,
                  "sent a malformed message (rank %u, size %u on rank %u's connection)", h->rank, h->size, member_rank);
        else if (weft_env_is_round(h->kind) &&
                 (h->len > STORE_MAX_CONTRIB || (h->kind != K_BCAST && h->len * (uint64_t)world > STORE_MAX_ROUND)))
            judge(j, JUDGE_DROP, WEFT_ERR_BOOTSTRAP,
                  "announced a %llu-byte contribution (limits: %llu per rank, %llu per round)",
                  (unsigned long long)h->len, (unsigned long long)STORE_MAX_CONTRIB,
                  (unsigned long long)STORE_MAX_ROUND);
        else if (h->kind == K_PUT && h->len > STORE_MAX_BLOB)
            judge(j, JUDGE_DROP, WEFT_ERR_BOOTSTRAP, "published a %llu-byte blob (limit %llu)",
                  (unsigned long long)h->len, (unsigned long long)STORE_MAX_BLOB);
        else if (h->kind == K_GET && (h->len < 4 || h->len > 4 * STORE_GET_MAX || h->len % 4))
            judge(j, JUDGE_DROP, WEFT_ERR_BOOTSTRAP, "sent a %llu-byte GET", (unsigned long long)h->len);
        else if (!weft_env_is_round(h->kind) && h->kind != K_PUT && h->kind != K_GET &&
                 !(h->kind == K_BYE && h->len == 0))
            judge(j, JUDGE_DROP, WEFT_ERR_BOOTSTRAP, "sent an unexpected message (kind %u, %llu bytes)", h->kind,
                  (unsigned long long)h->len);
        return;
    }
    /* A stranger until its proof is accepted: check everything. */
    int relay = phase == PHASE_HELLO && h->kind == K_RELAY;
    unsigned want_kind = relay ? K_RELAY : phase == PHASE_HELLO ? K_HELLO : K_PROOF;
    uint64_t want_len = relay ? 0 : phase == PHASE_HELLO ? STORE_NONCE : STORE_PROOF;
    if (h->magic != STORE_MAGIC)
        judge(j, JUDGE_DROP, WEFT_ERR_BOOTSTRAP, "bad magic 0x%08x (not a weft client)", h->magic);
    else if (h->version != STORE_VERSION)
        judge(j, JUDGE_REFUSE, WEFT_ERR_BOOTSTRAP,
              "protocol version %u, but the store speaks version %u (every rank must run the same weft)", h->version,
              STORE_VERSION);
    else if (h->len > STORE_MAX_CONTRIB)
        judge(j, JUDGE_DROP, WEFT_ERR_BOOTSTRAP, "it announced a %llu-byte payload", (unsigned long long)h->len);
    else if (h->kind != want_kind || h->len != want_len)
        judge(j, JUDGE_DROP, WEFT_ERR_BOOTSTRAP, "message kind %u with %llu bytes %s", h->kind,
              (unsigned long long)h->len, phase == PHASE_HELLO ? "before a HELLO" : "where its PROOF was due");
    else if (relay && h->size != world)
        judge(j, JUDGE_REFUSE, WEFT_ERR_ARG, "a node relay says WORLD_SIZE=%u but the store serves WORLD_SIZE=%u",
              h->size, world);
}

void weft_env_judge_route(const uint8_t *b, uint64_t max_len, store_hdr_t *h, store_judgement_t *j)
{
    weft_env_hdr_unpack(b, h);
    judge(j, JUDGE_BODY, WEFT_SUCCESS, "ok");
    if (h->magic != STORE_MAGIC || h->version != STORE_VERSION || h->kind != K_ROUTE)
        judge(j, JUDGE_DROP, WEFT_ERR_BOOTSTRAP, "a node relay sent a corrupt message (magic 0x%08x, version %u, kind %u)",
              h->magic, h->version, h->kind);
    else if (h->rank >= STORE_RELAY_ROUTES)
        judge(j, JUDGE_DROP, WEFT_ERR_BOOTSTRAP, "a node relay named route %u (limit %u)", h->rank,
              (unsigned)STORE_RELAY_ROUTES);
    else if (h->arg == ROUTE_CLOSE ? h->len != 0 : h->arg != ROUTE_DATA || h->len == 0 || h->len > max_len)
        judge(j, JUDGE_DROP, WEFT_ERR_BOOTSTRAP, "a node relay sent a malformed route message (arg %llu, %llu bytes)",
              (unsigned long long)h->arg, (unsigned long long)h->len);
}

void weft_env_relay_addr(const uint8_t key[WEFT_SHA256_LEN], int size, int leader, const char *where,
                         struct sockaddr_un *sa, unsigned *len)
{
    static const char label[] = "weft node relay v1";
    static const char hex[] = "0123456789abcdef";
    uint8_t ids[8], mac[WEFT_SHA256_LEN];
    put32(ids, (uint32_t)size);
    put32(ids + 4, (uint32_t)leader);
    const weft_bytes_t parts[] = {{label, sizeof(label)}, {ids, 8}, {where, strlen(where)}};
    weft_hmac_sha256(key, WEFT_SHA256_LEN, parts, 3, mac);
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    /* abstract: a leading NUL, no file to create, clean up or squat */
    char *p = sa->sun_path + 1;
    memcpy(p, "weft-relay-", 11);
    p += 11;
    for (int i = 0; i < 16; i++) {
        *p++ = hex[mac[i] >> 4];
        *p++ = hex[mac[i] & 15];
    }
    *len = (unsigned)(offsetof(struct sockaddr_un, sun_path) + (size_t)(p - sa->sun_path));
}

void weft_env_textf(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

