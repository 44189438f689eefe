/* The env bootstrap's client side, on every rank (rank 0 included):
 * connecting to rank 0's store and the HELLO, allgather rounds, LOST notices
 * between rounds, and the goodbye at finalize. The protocol is in
 * env_wire.h. */
#include "bootstrap/env.h"
#include "bootstrap/sock.h"

#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CLIENT_GRACE 1.0 /* how long a client waits past its deadline for the store's verdict */

static int status_from_wire(uint64_t arg)
{
    int64_t v = (int64_t)arg;
    switch (v) {
    case WEFT_ERR_ARG:
    case WEFT_ERR_NO_MEMORY:
    case WEFT_ERR_TIMEOUT:
    case WEFT_ERR_PEER_LOST:
    case WEFT_ERR_BOOTSTRAP:
    case WEFT_ERR_ALREADY: return (int)v;
    default: return WEFT_ERR_BOOTSTRAP;
    }
}

/* Reads an ERROR's text (h->len bytes) into text[cap], escaped. */
static int read_error_text(int fd, const store_hdr_t *h, char *text, size_t cap, double io_deadline, int *err)
{
    if (h->len >= cap) {
        *err = EPROTO;
        return IO_ERROR;
    }
    char raw[STORE_MAX_TEXT];
    int io = weft_io_recv(fd, raw, (size_t)h->len, io_deadline, err);
    /* whoever answered may not be the store yet (the handshake): its text is printed escaped, bounded */
    weft_escape(text, cap < STORE_PRINT_TEXT ? cap : STORE_PRINT_TEXT, raw, io == IO_OK ? (size_t)h->len : 0);
    return io;
}

static double io_deadline_of(double deadline)
{
    return deadline > 0 ? deadline + CLIENT_GRACE : 0.0;
}

/* The store's answer to a step of the handshake was an ERROR: its text
 * says why. Returns 1 (retry: a previous run's store) or an error. */
static int handshake_refused(env_boot_t *eb, int fd, const store_hdr_t *h, double io_dl, char *last, size_t cap)
{
    char text[STORE_MAX_TEXT + 1];
    int err = 0;
    if (read_error_text(fd, h, text, sizeof(text), io_dl, &err) != IO_OK)
        weft_env_textf(text, sizeof(text), "(its message could not be read: %s)",
                       err ? strerror(err) : "end of stream");
    if (status_from_wire(h->arg) == WEFT_ERR_ALREADY) {
        weft_env_textf(last, cap, "the store refused: %s", text);
        return 1;
    }
    return weft_error(status_from_wire(h->arg), "env bootstrap: rank 0's store at %s refused rank %d: %s", eb->where,
                      eb->rank, text);
}

/* Checks the store's CHALLENGE (header h, payload body) against our nonce
 * nc: it must prove it knows the job key before we prove anything or send
 * a byte of data, so a fake store learns nothing. */
static int check_challenge(env_boot_t *eb, const store_hdr_t *h, const uint8_t *body, const uint8_t *nc)
{
    uint8_t want[STORE_PROOF];
    int store_keyed = (h->arg & FLAG_KEYED) != 0;

    if (eb->key.keyed && !store_keyed)
        return weft_error(WEFT_ERR_BOOTSTRAP,
                          "env bootstrap: rank 0's store at %s has no job secret but rank %d has one (from %s): give "
                          "every rank the same WEFT_JOB_SECRET, or none (or is something else holding MASTER_PORT?); "
                          "nothing was sent to it",
                          eb->where, eb->rank, eb->key.source);
    if (!eb->key.keyed && store_keyed)
        return weft_error(WEFT_ERR_BOOTSTRAP,
                          "env bootstrap: rank 0's store at %s requires the job secret and rank %d has none: set "
                          "WEFT_JOB_SECRET (or WEFT_JOB_SECRET_FILE) to rank 0's secret on every rank",
                          eb->where, eb->rank);
    weft_env_proof(eb->key.key, PROOF_BY_STORE, nc, body, (uint32_t)eb->rank, (uint32_t)eb->size, want);
    if (!weft_ct_equal(want, body + STORE_NONCE, STORE_PROOF))
        return weft_error(WEFT_ERR_BOOTSTRAP,
                          "env bootstrap: the service at %s failed to prove it knows the job secret (from %s): it is "
                          "not this job's store (rank 0 has a different secret, or another process holds MASTER_PORT); "
                          "rank %d sent it nothing",
                          eb->where, eb->key.source, eb->rank);
    return WEFT_SUCCESS;
}

/* The handshake: HELLO (our nonce), CHALLENGE (the store's nonce and
 * proof, checked), PROOF (ours), WELCOME. Returns WEFT_SUCCESS, 1 to
 * retry (the store closed the connection: overloaded or restarting), or
 * an error status. */
static int client_hello(int fd, void *ctx, double deadline, char *last, size_t cap)
{
    env_boot_t *eb = ctx;
    uint8_t b[STORE_HDR + STORE_CHALLENGE], nc[STORE_NONCE], proof[STORE_PROOF];
    store_hdr_t h = {0};
    double io_dl = io_deadline_of(deadline);
    int err = 0, io, rc;

    if ((err = weft_random_bytes(nc, sizeof(nc))) != 0)
        return weft_error(WEFT_ERR_BOOTSTRAP, "env bootstrap: no random nonce for the store's handshake: %s",
                          strerror(err));
    weft_env_hdr_pack(b, K_HELLO, (uint32_t)eb->rank, (uint32_t)eb->size, 0,
                      (eb->no_lost ? 0 : HELLO_WANTS_LOST) | (eb->key.keyed ? FLAG_KEYED : 0), STORE_NONCE);
    memcpy(b + STORE_HDR, nc, STORE_NONCE);
    io = weft_io_send(fd, b, STORE_HDR + STORE_NONCE, 0, io_dl, &err);
    for (int step = 0; io == IO_OK; step++) {
        if ((io = weft_io_recv(fd, b, STORE_HDR, io_dl, &err)) != IO_OK) break;
        weft_env_hdr_unpack(b, &h);
        if (h.magic != STORE_MAGIC)
            return weft_error(WEFT_ERR_BOOTSTRAP, "env bootstrap: the service at %s is not a weft store (magic 0x%08x)",
                              eb->where, h.magic);
        if (h.version != STORE_VERSION)
            return weft_error(WEFT_ERR_BOOTSTRAP,
                              "env bootstrap: rank 0's store at %s speaks protocol version %u and rank %d version %u: "
                              "every rank must run the same weft",
                              eb->where, h.version, eb->rank, STORE_VERSION);
        if (h.kind == K_ERROR) return handshake_refused(eb, fd, &h, io_dl, last, cap);
        if (step == 1 && h.kind == K_WELCOME && h.len == 0) return WEFT_SUCCESS;
        if (step != 0 || h.kind != K_CHALLENGE || h.len != STORE_CHALLENGE) break;
        if ((io = weft_io_recv(fd, b + STORE_HDR, STORE_CHALLENGE, io_dl, &err)) != IO_OK) break;
        if ((rc = check_challenge(eb, &h, b + STORE_HDR, nc)) != WEFT_SUCCESS) return rc;
        weft_env_proof(eb->key.key, PROOF_BY_RANK, nc, b + STORE_HDR, (uint32_t)eb->rank, (uint32_t)eb->size, proof);
        weft_env_hdr_pack(b, K_PROOF, (uint32_t)eb->rank, (uint32_t)eb->size, 0, 0, STORE_PROOF);
        memcpy(b + STORE_HDR, proof, STORE_PROOF);
        io = weft_io_send(fd, b, STORE_HDR + STORE_PROOF, 0, io_dl, &err);
    }
    if (io == IO_CLOSED || io == IO_ERROR) {
        weft_env_textf(last, cap, "the store closed the connection during the handshake (%s)",
                       err ? strerror(err) : "end of stream");
        return 1;
    }
    if (io == IO_TIMEOUT)
        return weft_error(WEFT_ERR_TIMEOUT,
                          "env bootstrap: rank %d connected to %s but the store did not answer its HELLO by the "
                          "deadline (is something other than rank 0's weft store listening there?)",
                          eb->rank, eb->where);
    return weft_error(WEFT_ERR_BOOTSTRAP,
                      "env bootstrap: rank 0's store at %s answered rank %d's handshake with an unexpected message "
                      "(kind %u, %llu bytes)",
                      eb->where, eb->rank, h.kind, (unsigned long long)h.len);
}

#define RELAY_WAIT 3.0 /* how long a rank looks for its node relay before it connects directly */

/* Through the node relay of eb->via_leader: WEFT_SUCCESS, or an error (the
 * caller connects directly). */
static int client_via_relay(env_boot_t *eb, double deadline)
{
    struct sockaddr_un sa;
    unsigned len;
    char what[64];
    weft_env_relay_addr(eb->key.key, eb->size, eb->via_leader, eb->where, &sa, &len);
    snprintf(what, sizeof(what), "the node relay of rank %d", eb->via_leader);
    weft_dial_t d = {
        .who = "env bootstrap",
        .rank = eb->rank,
        .what = what,
        .host = eb->addr,
        .port = eb->port,
        .direct = (struct sockaddr *)&sa,
        .direct_len = len,
    };
    /* Connecting is bounded by RELAY_WAIT; the handshake through it has the
     * whole deadline (the store may be busy with the job's other nodes). */
    double until = weft_wtime() + RELAY_WAIT;
    char why[256];
    int fd = -1, rc = weft_dial(&d, deadline > 0 && deadline < until ? deadline : until, &fd);
    if (rc != WEFT_SUCCESS) return rc;
    /* The name shows in /proc/net/unix once a relay holds it: a socket
     * another user bound first (a secret reused across jobs) is not ours. */
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != geteuid()) {
        close(fd);
        weft_warn("env bootstrap: rank %d: the node relay's socket of rank %d belongs to user %d, not to this job's "
                  "user: connecting to the store directly",
                  eb->rank, eb->via_leader, cl == sizeof(cred) ? (int)cred.uid : -1);
        return weft_error(WEFT_ERR_TIMEOUT, "env bootstrap: the node relay's socket is another user's");
    }
    rc = client_hello(fd, eb, deadline, why, sizeof(why));
    if (rc == WEFT_SUCCESS) {
        eb->fd = fd;
        return WEFT_SUCCESS;
    }
    close(fd);
    return rc > 0 ? weft_error(WEFT_ERR_TIMEOUT, "env bootstrap: the node relay of rank %d: %s", eb->via_leader, why)
                  : rc;
}

int weft_env_client_connect(env_boot_t *eb, double deadline)
{
    struct addrinfo self = {0};
    if (eb->via_leader >= 0 && !eb->srv) {
        int rc = client_via_relay(eb, deadline);
        if (rc != WEFT_ERR_TIMEOUT) return rc; /* the store's own verdict, through the relay */
        weft_debug("env bootstrap: rank %d connects to the store directly: %s", eb->rank, weft_last_error());
        weft_error_clear();
    }
    weft_dial_t d = {
        .who = "env bootstrap",
        .rank = eb->rank,
        .what = "rank 0's store",
        .host = eb->addr,
        .port = eb->port,
        .greet = client_hello,
        .ctx = eb,
        .hint = "Is rank 0 running, and do MASTER_ADDR and MASTER_PORT point at it?",
    };
    /* Rank 0 reaches its own store directly: MASTER_ADDR may be a name that
     * resolves only from other pods, or not yet. */
    if (eb->srv) {
        weft_env_server_self(eb->srv, &self);
        d.direct = self.ai_addr;
        d.direct_len = self.ai_addrlen;
    }
    return weft_dial(&d, deadline, &eb->fd);
}

static void client_note_lost(env_boot_t *eb, const store_hdr_t *h, const char *text)
{
    if (h->rank >= (uint32_t)eb->size || (int)h->rank == eb->rank) return;
    if (eb->first_lost < 0) {
        eb->first_lost = (int)h->rank;
        snprintf(eb->first_lost_why, sizeof(eb->first_lost_why), "%s", text);
    }
    weft_rank_lost((int)h->rank, "%s", text);
}

/* Reads the next message's header, taking LOST notices on the way. */
static int client_recv_hdr(env_boot_t *eb, uint8_t *b, store_hdr_t *h, double io_deadline, int *err)
{
    char text[STORE_MAX_TEXT + 1];
    for (;;) {
        int io = weft_io_recv(eb->fd, b, STORE_HDR, io_deadline, err);
        if (io != IO_OK) return io;
        weft_env_hdr_unpack(b, h);
        if (h->magic != STORE_MAGIC || h->version != STORE_VERSION || h->kind != K_LOST) return IO_OK;
        if ((io = read_error_text(eb->fd, h, text, sizeof(text), io_deadline, err)) != IO_OK) return io;
        client_note_lost(eb, h, text);
    }
}

static int client_io_failure(env_boot_t *eb, int io, int err, uint64_t seq)
{
    eb->broken = 1;
    if (io == IO_CLOSED && eb->rank != 0 && !eb->no_lost) /* a rendezvous group's ranks are not the world's */
        weft_rank_lost(0, "the connection to its store at %s closed during allgather round %llu", eb->where,
                       (unsigned long long)seq);
    if (io == IO_TIMEOUT)
        return weft_error(WEFT_ERR_TIMEOUT,
                          "env bootstrap: rank 0's store at %s did not answer allgather round %llu by the deadline "
                          "(+%.0f s grace): rank 0 is hung or overloaded",
                          eb->where, (unsigned long long)seq, CLIENT_GRACE);
    if (io == IO_CLOSED) {
        /* A LOST notice read before the close names the cause: the store
         * host may simply have finished after failing the round. */
        if (eb->first_lost >= 0)
            return weft_error(WEFT_ERR_PEER_LOST,
                              "env bootstrap: rank %d %s (then the connection to rank 0's store at %s closed during "
                              "allgather round %llu)",
                              eb->first_lost, eb->first_lost_why, eb->where, (unsigned long long)seq);
        return weft_error(WEFT_ERR_PEER_LOST,
                          "env bootstrap: the connection to rank 0's store at %s closed during allgather round %llu "
                          "(rank 0 died, or the store dropped rank %d)",
                          eb->where, (unsigned long long)seq, eb->rank);
    }
    return weft_error(WEFT_ERR_PEER_LOST, "env bootstrap: allgather round %llu with rank 0's store at %s failed: %s",
                      (unsigned long long)seq, eb->where, strerror(err));
}

static const char *round_name(unsigned kind)
{
    return kind == K_GATHER ? "gather" : kind == K_BCAST ? "broadcast" : "allgather";
}

/* Checks the connection can carry another request. */
static int client_usable(env_boot_t *eb, const char *what)
{
    if (!eb || eb->fd < 0) return weft_error(WEFT_ERR_ARG, "env bootstrap: %s on a closed bootstrap", what);
    if (eb->broken && eb->broken_why[0]) return weft_error(WEFT_ERR_PEER_LOST, "env bootstrap: %s", eb->broken_why);
    if (eb->broken)
        return weft_error(WEFT_ERR_PEER_LOST,
                          "env bootstrap: the connection to rank 0's store at %s broke in an earlier round", eb->where);
    return WEFT_SUCCESS;
}

static uint64_t ms_left(double deadline)
{
    if (deadline <= 0) return 0; /* already past: 1 ms still makes the store say who is missing */
    double now = weft_wtime();
    return deadline - now > 0.001 ? (uint64_t)((deadline - now) * 1000.0) : 1;
}

/* One round of `kind` (CONTRIB, GATHER, BCAST): sends len bytes, then reads
 * the RESULT: `want` bytes into recv, or (out != NULL) whatever length the
 * store sends into a malloc'd *out. */
static int env_round(env_boot_t *eb, unsigned kind, const void *send, size_t len, void *recv, uint64_t want, void **out,
                     size_t *out_len, double deadline)
{
    uint8_t b[STORE_HDR];
    store_hdr_t h;
    char text[STORE_MAX_TEXT + 1];
    int err = 0, io, rc;

    if ((rc = client_usable(eb, round_name(kind))) != WEFT_SUCCESS) return rc;
    uint64_t seq = eb->seq++;
    double io_dl = io_deadline_of(deadline);
    weft_env_hdr_pack(b, kind, (uint32_t)eb->rank, (uint32_t)eb->size, seq, ms_left(deadline), len);
    io = weft_io_send(eb->fd, b, sizeof(b), len > 0, io_dl, &err);
    if (io == IO_OK && len > 0) io = weft_io_send(eb->fd, send, len, 0, io_dl, &err);
    if (io == IO_OK || io == IO_CLOSED) {
        /* Even when the send failed, the store may have left a closing notice. */
        int rio = client_recv_hdr(eb, b, &h, io == IO_OK ? io_dl : weft_wtime() + 0.1, &err);
        if (io == IO_OK || rio == IO_OK) io = rio;
    }
    if (io != IO_OK) return client_io_failure(eb, io, err, seq);
    if (h.magic == STORE_MAGIC && h.kind == K_ERROR && h.seq == STORE_NOTICE_SEQ) {
        eb->broken = 1;
        if (read_error_text(eb->fd, &h, text, sizeof(text), weft_wtime() + 1.0, &err) != IO_OK)
            weft_env_textf(text, sizeof(text), "rank 0 closed its store at %s", eb->where);
        return weft_error(WEFT_ERR_PEER_LOST, "env bootstrap: %s round %llu: %s", round_name(kind),
                          (unsigned long long)seq, text);
    }
    if (h.magic != STORE_MAGIC || h.version != STORE_VERSION || h.seq != seq ||
        (h.kind == K_RESULT && !out && h.len != want) || (h.kind == K_RESULT && out && h.len > STORE_MAX_CONTRIB) ||
        (h.kind != K_RESULT && h.kind != K_ERROR)) {
        eb->broken = 1;
        return weft_error(WEFT_ERR_BOOTSTRAP,
                          "env bootstrap: rank 0's store at %s answered %s round %llu with a bad message "
                          "(magic 0x%08x, kind %u, round %llu, %llu bytes; expected %llu)",
                          eb->where, round_name(kind), (unsigned long long)seq, h.magic, h.kind,
                          (unsigned long long)h.seq, (unsigned long long)h.len, (unsigned long long)want);
    }
    if (h.kind == K_RESULT) {
        if (out) {
            if (!(*out = malloc(h.len ? (size_t)h.len : 1))) {
                eb->broken = 1;
                return weft_error(WEFT_ERR_NO_MEMORY, "env bootstrap: out of memory for %llu bytes",
                                  (unsigned long long)h.len);
            }
            *out_len = (size_t)h.len;
            recv = *out;
        }
        if (h.len > 0) io = weft_io_recv(eb->fd, recv, (size_t)h.len, io_dl, &err);
        if (io != IO_OK) {
            if (out) {
                free(*out);
                *out = NULL;
            }
            return client_io_failure(eb, io, err, seq);
        }
        return WEFT_SUCCESS;
    }
    io = read_error_text(eb->fd, &h, text, sizeof(text), io_dl, &err);
    if (io != IO_OK) return client_io_failure(eb, io, err, seq);
    return weft_error(status_from_wire(h.arg), "env bootstrap: %s", text);
}

/* An allgather (K_CONTRIB) or a gather at rank 0 (K_GATHER) of len bytes
 * per rank: within the store's limits, then the round. */
static int gathering_round(weft_bootstrap_t *bs, unsigned kind, const void *send, void *recv, size_t len,
                           double deadline)
{
    env_boot_t *eb = bs ? bs->impl : NULL;
    uint64_t total = (uint64_t)len * (uint64_t)(eb ? eb->size : 0);
    int all = kind == K_CONTRIB, gets = eb && (all || eb->rank == 0);
    if (eb && ((uint64_t)len > STORE_MAX_CONTRIB || total > STORE_MAX_ROUND))
        return weft_error(WEFT_ERR_ARG,
                          "env bootstrap: %s of %zu bytes per rank x %d ranks is over the store's limits (%llu per "
                          "rank, %llu per round)",
                          round_name(kind), len, eb->size, (unsigned long long)STORE_MAX_CONTRIB,
                          (unsigned long long)STORE_MAX_ROUND);
    if (len > 0 && (!send || (gets && !recv)))
        return weft_error(WEFT_ERR_ARG, "env bootstrap: %s with a NULL buffer", round_name(kind));
    return env_round(eb, kind, send, len, recv, gets ? total : 0, NULL, NULL, deadline);
}

int weft_env_allgather(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline)
{
    return gathering_round(bs, K_CONTRIB, send, recv, len, deadline);
}

int weft_env_gather(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline)
{
    return gathering_round(bs, K_GATHER, send, recv, len, deadline);
}

int weft_env_bcast(weft_bootstrap_t *bs, const void *send, size_t len, void **out, size_t *out_len, double deadline)
{
    env_boot_t *eb = bs ? bs->impl : NULL;
    *out = NULL;
    *out_len = 0;
    if (!eb) return weft_error(WEFT_ERR_ARG, "env bootstrap: broadcast on a closed bootstrap");
    if (eb->rank != 0) return env_round(eb, K_BCAST, NULL, 0, NULL, 0, out, out_len, deadline);
    if ((uint64_t)len > STORE_MAX_CONTRIB)
        return weft_error(WEFT_ERR_ARG, "env bootstrap: a broadcast of %zu bytes is over the store's limit (%llu)", len,
                          (unsigned long long)STORE_MAX_CONTRIB);
    if (len > 0 && !send) return weft_error(WEFT_ERR_ARG, "env bootstrap: broadcast with a NULL buffer");
    return env_round(eb, K_BCAST, send, len, NULL, 0, NULL, NULL, deadline);
}

int weft_env_barrier(weft_bootstrap_t *bs, double deadline)
{
    return weft_env_allgather(bs, NULL, NULL, 0, deadline);
}

int weft_env_put(weft_bootstrap_t *bs, const void *blob, size_t len, double deadline)
{
    env_boot_t *eb = bs ? bs->impl : NULL;
    uint8_t b[STORE_HDR];
    int err = 0, io, rc;
    if ((rc = client_usable(eb, "publishing")) != WEFT_SUCCESS) return rc;
    if ((uint64_t)len > STORE_MAX_BLOB || (len && !blob))
        return weft_error(WEFT_ERR_ARG, "env bootstrap: a blob of %zu bytes cannot be published (at most %llu)", len,
                          (unsigned long long)STORE_MAX_BLOB);
    double io_dl = io_deadline_of(deadline);
    weft_env_hdr_pack(b, K_PUT, (uint32_t)eb->rank, (uint32_t)eb->size, 0, 0, len);
    io = weft_io_send(eb->fd, b, sizeof(b), len > 0, io_dl, &err);
    if (io == IO_OK && len > 0) io = weft_io_send(eb->fd, blob, len, 0, io_dl, &err);
    if (io != IO_OK) return client_io_failure(eb, io, err, eb->seq);
    return WEFT_SUCCESS;
}

/* Frees what a failed fetch had read. */
static void drop_blobs(void **blobs, int n)
{
    for (int i = 0; i < n; i++) {
        free(blobs[i]);
        blobs[i] = NULL;
    }
}

int weft_env_get(weft_bootstrap_t *bs, const int *ranks, int n, void **blobs, size_t *lens, double deadline)
{
    env_boot_t *eb = bs ? bs->impl : NULL;
    uint8_t b[STORE_HDR + 4 * STORE_GET_MAX], done[STORE_GET_MAX] = {0};
    char text[STORE_MAX_TEXT + 1];
    store_hdr_t h;
    int err = 0, io, rc, got = 0, failed = WEFT_SUCCESS;
    if ((rc = client_usable(eb, "fetching addresses")) != WEFT_SUCCESS) return rc;
    if (n < 1 || n > STORE_GET_MAX) return weft_error(WEFT_ERR_ARG, "env bootstrap: a fetch of %d addresses", n);
    double io_dl = io_deadline_of(deadline);
    weft_env_hdr_pack(b, K_GET, (uint32_t)eb->rank, (uint32_t)eb->size, 0, ms_left(deadline), 4 * (uint64_t)n);
    for (int i = 0; i < n; i++) {
        uint32_t be = htobe32((uint32_t)ranks[i]);
        memcpy(b + STORE_HDR + 4 * i, &be, sizeof(be));
    }
    io = weft_io_send(eb->fd, b, STORE_HDR + 4 * (size_t)n, 0, io_dl, &err);
    /* One VALUE per rank asked for, in the order the store has them (each
     * comes by the deadline at the latest): all are read, failed or not,
     * so the stream stays in step. */
    while (io == IO_OK && got < n) {
        if ((io = client_recv_hdr(eb, b, &h, io_dl, &err)) != IO_OK) break;
        if (h.magic == STORE_MAGIC && h.kind == K_ERROR && h.seq == STORE_NOTICE_SEQ) {
            eb->broken = 1;
            drop_blobs(blobs, n);
            if (read_error_text(eb->fd, &h, text, sizeof(text), weft_wtime() + 1.0, &err) != IO_OK)
                weft_env_textf(text, sizeof(text), "rank 0 closed its store at %s", eb->where);
            return weft_error(WEFT_ERR_PEER_LOST, "env bootstrap: fetching rank %d's address: %s", ranks[0], text);
        }
        int at = -1;
        for (int i = 0; i < n && h.kind == K_VALUE; i++)
            if ((uint32_t)ranks[i] == h.rank && !done[i]) at = i;
        if (h.magic != STORE_MAGIC || h.version != STORE_VERSION || h.kind != K_VALUE || at < 0 ||
            h.len > (h.arg ? STORE_MAX_TEXT : STORE_MAX_BLOB)) {
            eb->broken = 1;
            drop_blobs(blobs, n);
            return weft_error(WEFT_ERR_BOOTSTRAP,
                              "env bootstrap: rank 0's store at %s answered a fetch of addresses with a bad message "
                              "(magic 0x%08x, kind %u, rank %u, %llu bytes)",
                              eb->where, h.magic, h.kind, h.rank, (unsigned long long)h.len);
        }
        done[at] = 1;
        got++;
        if (h.arg) {
            io = read_error_text(eb->fd, &h, text, sizeof(text), io_dl, &err);
            if (io == IO_OK && failed == WEFT_SUCCESS)
                failed = weft_error(status_from_wire(h.arg), "env bootstrap: fetching rank %u's address: %s", h.rank,
                                    text);
            continue;
        }
        if (!(blobs[at] = malloc(h.len ? (size_t)h.len : 1))) {
            eb->broken = 1;
            drop_blobs(blobs, n);
            return weft_error(WEFT_ERR_NO_MEMORY, "env bootstrap: out of memory");
        }
        lens[at] = (size_t)h.len;
        if (h.len) io = weft_io_recv(eb->fd, blobs[at], (size_t)h.len, io_dl, &err);
    }
    if (io != IO_OK) {
        drop_blobs(blobs, n);
        return client_io_failure(eb, io, err, eb->seq);
    }
    if (failed != WEFT_SUCCESS) drop_blobs(blobs, n);
    return failed;
}

/* Between rounds: takes the LOST notices the store has sent, without
 * blocking, and notices the store's connection closing without a word
 * (rank 0 died). Peeks first, so a partly arrived notice stays in the
 * socket for the next call and anything else for the next round. */
void weft_env_poll_lost(weft_bootstrap_t *bs, double blocked_s)
{
    env_boot_t *eb = bs ? bs->impl : NULL;
    uint8_t b[STORE_HDR + STORE_MAX_TEXT];
    char text[STORE_MAX_TEXT + 1];
    store_hdr_t h;
    int err = 0;
    (void)blocked_s; /* reading the store's connection costs nothing: every wait may */

    while (eb && eb->fd >= 0 && !eb->broken) {
        ssize_t k = recv(eb->fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (k <= 0) {
            eb->broken = 1;
            weft_env_textf(
                eb->broken_why, sizeof(eb->broken_why),
                "the connection to rank 0's store at %s closed without notice (%s): rank 0 exited or was killed",
                eb->where, k == 0 ? "end of stream" : strerror(errno));
            if (eb->rank != 0 && !eb->no_lost)
                weft_rank_lost(0, "its store at %s closed the connection without notice (%s)", eb->where,
                               k == 0 ? "end of stream" : strerror(errno));
            return;
        }
        if ((size_t)k < STORE_HDR) return;
        weft_env_hdr_unpack(b, &h);
        if (h.magic != STORE_MAGIC || h.version != STORE_VERSION || h.kind != K_LOST) return;
        if (h.len >= STORE_MAX_TEXT || (size_t)k < STORE_HDR + h.len) return;
        if (weft_io_recv(eb->fd, b, STORE_HDR, weft_wtime() + 1.0, &err) != IO_OK ||
            read_error_text(eb->fd, &h, text, sizeof(text), weft_wtime() + 1.0, &err) != IO_OK) {
            eb->broken = 1;
            return;
        }
        client_note_lost(eb, &h, text);
    }
}

void weft_env_free(env_boot_t *eb, int graceful, double deadline)
{
    /* Store first: rank 0's own connection closing is no news to report;
     * the node relay last (the store's goodbyes to this node pass it). */
    if (eb->srv) weft_env_server_stop(eb->srv, eb->thread, graceful, deadline);
    if (eb->fd >= 0) close(eb->fd); /* before the relay: it waits for its members, this rank among them */
    eb->fd = -1;
    weft_env_relay_stop(eb->relay, graceful, deadline);
    memset(&eb->key, 0, sizeof(eb->key));
    free(eb);
}

void weft_env_finalize(weft_bootstrap_t *bs, int graceful, double deadline)
{
    env_boot_t *eb = bs ? bs->impl : NULL;
    if (!eb) return;
    if (graceful && eb->fd >= 0 && !eb->broken) {
        uint8_t b[STORE_HDR];
        int err = 0;
        /* Wait (briefly) for the store to close the connection: then it has
         * seen the goodbye, and a re-init right after cannot race it. */
        double io_dl = weft_wtime() + 10.0;
        if (deadline > 0 && io_deadline_of(deadline) < io_dl) io_dl = io_deadline_of(deadline);
        weft_env_hdr_pack(b, K_BYE, (uint32_t)eb->rank, (uint32_t)eb->size, eb->seq, 0, 0);
        int io = weft_io_send(eb->fd, b, sizeof(b), 0, io_dl, &err);
        if (io == IO_OK) {
            shutdown(eb->fd, SHUT_WR);
            while ((io = weft_io_recv(eb->fd, b, sizeof(b), io_dl, &err)) == IO_OK) {
            }
        }
        if (io != IO_CLOSED)
            weft_debug("env bootstrap: rank %d's goodbye to the store at %s was not acknowledged", eb->rank, eb->where);
    }
    weft_env_free(eb, graceful, deadline);
    bs->impl = NULL;
}
