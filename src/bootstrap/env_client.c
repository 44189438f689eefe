/* The env bootstrap's client side, on every rank (rank 0 included):
 * connecting to rank 0's store and the HELLO, allgather rounds, LOST notices
 * between rounds, and the goodbye at finalize. The protocol is in
 * env_wire.h. */
#include "bootstrap/env.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CLIENT_GRACE 1.0 /* how long a client waits past its deadline for the store's verdict */

enum { IO_OK = 0, IO_TIMEOUT, IO_CLOSED, IO_ERROR };

/* Waits for `events` on fd until io_deadline (0 = forever). */
static int io_wait(int fd, short events, double io_deadline, int *err)
{
    for (;;) {
        int ms = -1;
        if (io_deadline > 0) {
            double left = io_deadline - weft_wtime();
            if (left <= 0) return IO_TIMEOUT;
            ms = left > 3600.0 ? 3600000 : (int)(left * 1000.0) + 1;
        }
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, ms);
        if (n > 0) return IO_OK; /* errors and hang-ups show in the next send/recv */
        if (n < 0 && errno != EINTR) {
            *err = errno;
            return IO_ERROR;
        }
    }
}

static int io_send(int fd, const void *buf, size_t len, int more, double io_deadline, int *err)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t k = send(fd, p, len, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
        if (k > 0) {
            p += k;
            len -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int w = io_wait(fd, POLLOUT, io_deadline, err);
            if (w != IO_OK) return w;
            continue;
        }
        *err = errno;
        return (errno == EPIPE || errno == ECONNRESET) ? IO_CLOSED : IO_ERROR;
    }
    return IO_OK;
}

static int io_recv(int fd, void *buf, size_t len, double io_deadline, int *err)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t k = recv(fd, p, len, 0);
        if (k > 0) {
            p += k;
            len -= (size_t)k;
            continue;
        }
        if (k == 0) {
            *err = 0;
            return IO_CLOSED;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int w = io_wait(fd, POLLIN, io_deadline, err);
            if (w != IO_OK) return w;
            continue;
        }
        *err = errno;
        return errno == ECONNRESET ? IO_CLOSED : IO_ERROR;
    }
    return IO_OK;
}

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

/* Reads an ERROR's text (h->len bytes) into text[cap]. */
static int read_error_text(int fd, const store_hdr_t *h, char *text, size_t cap, double io_deadline, int *err)
{
    if (h->len >= cap) {
        *err = EPROTO;
        return IO_ERROR;
    }
    int io = io_recv(fd, text, (size_t)h->len, io_deadline, err);
    text[io == IO_OK ? h->len : 0] = '\0';
    return io;
}

static double io_deadline_of(double deadline)
{
    return deadline > 0 ? deadline + CLIENT_GRACE : 0.0;
}

/* One connection attempt to every address MASTER_ADDR resolves to (rank 0:
 * straight to its own store). Returns a connected fd or -1 with `last` set. */
static int client_try_connect(env_boot_t *eb, double deadline, char *last, size_t cap)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL, self = {0};
    char portstr[16];
    int fd = -1, gai;

    if (eb->srv) {
        weft_env_server_self(eb->srv, &self);
    } else {
        snprintf(portstr, sizeof(portstr), "%d", eb->port);
        /* Resolved on every attempt: a Kubernetes service name may appear late. */
        if ((gai = getaddrinfo(eb->addr, portstr, &hints, &res)) != 0) {
            weft_env_textf(last, cap, "cannot resolve MASTER_ADDR %s: %s", eb->addr, gai_strerror(gai));
            return -1;
        }
    }
    for (struct addrinfo *ai = eb->srv ? &self : res; ai && fd < 0; ai = ai->ai_next) {
        int err = 0, w;
        socklen_t el = sizeof(err);
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            weft_env_textf(last, cap, "socket: %s", strerror(errno));
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            if (errno != EINPROGRESS) {
                err = errno;
            } else {
                /* Cap one attempt so a black-holed address does not eat the deadline. */
                double until = weft_wtime() + 5.0;
                if (deadline > 0 && deadline < until) until = deadline;
                w = io_wait(fd, POLLOUT, until, &err);
                if (w == IO_TIMEOUT)
                    err = ETIMEDOUT;
                else if (w == IO_OK && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
                    err = errno;
            }
        }
        if (err != 0) {
            weft_env_textf(last, cap, "connect: %s", strerror(err));
            close(fd);
            fd = -1;
        }
    }
    if (res) freeaddrinfo(res);
    if (fd >= 0) weft_env_set_nodelay(fd);
    return fd;
}

/* HELLO / WELCOME. Returns WEFT_SUCCESS, 1 to retry (the store closed the
 * connection: overloaded or restarting), or an error status. */
static int client_hello(env_boot_t *eb, int fd, double deadline, char *last, size_t cap)
{
    uint8_t b[STORE_HDR];
    store_hdr_t h;
    char text[STORE_MAX_TEXT + 1];
    double io_dl = io_deadline_of(deadline);
    int err = 0, io;

    weft_env_hdr_pack(b, K_HELLO, (uint32_t)eb->rank, (uint32_t)eb->size, 0, HELLO_WANTS_LOST, 0);
    io = io_send(fd, b, sizeof(b), 0, io_dl, &err);
    if (io == IO_OK) io = io_recv(fd, b, sizeof(b), io_dl, &err);
    if (io == IO_CLOSED || io == IO_ERROR) {
        weft_env_textf(last, cap, "the store closed the connection during the HELLO (%s)",
                       err ? strerror(err) : "end of stream");
        return 1;
    }
    if (io == IO_TIMEOUT)
        return weft_error(WEFT_ERR_TIMEOUT,
                          "env bootstrap: rank %d connected to %s but the store did not answer its HELLO by the "
                          "deadline (is something other than rank 0's weft store listening there?)",
                          eb->rank, eb->where);
    weft_env_hdr_unpack(b, &h);
    if (h.magic != STORE_MAGIC || h.version != STORE_VERSION)
        return weft_error(WEFT_ERR_BOOTSTRAP,
                          "env bootstrap: the service at %s is not a weft store (magic 0x%08x, version %u)", eb->where,
                          h.magic, h.version);
    if (h.kind == K_WELCOME && h.len == 0) return WEFT_SUCCESS;
    if (h.kind == K_ERROR && read_error_text(fd, &h, text, sizeof(text), io_dl, &err) == IO_OK) {
        if (status_from_wire(h.arg) == WEFT_ERR_ALREADY) {
            weft_env_textf(last, cap, "the store refused: %s", text);
            return 1;
        }
        return weft_error(status_from_wire(h.arg), "env bootstrap: rank 0's store at %s refused rank %d: %s", eb->where,
                          eb->rank, text);
    }
    return weft_error(WEFT_ERR_BOOTSTRAP,
                      "env bootstrap: rank 0's store at %s answered rank %d's HELLO with an unexpected message "
                      "(kind %u, %llu bytes)",
                      eb->where, eb->rank, h.kind, (unsigned long long)h.len);
}

int weft_env_client_connect(env_boot_t *eb, double deadline)
{
    double start = weft_wtime(), backoff = 0.01;
    unsigned seed = (unsigned)getpid() ^ (unsigned)eb->rank * 2654435761u;
    char last[256] = "no attempt";
    int attempts = 0;

    for (;;) {
        int fd = client_try_connect(eb, deadline, last, sizeof(last));
        attempts++;
        if (fd >= 0) {
            int rc = client_hello(eb, fd, deadline, last, sizeof(last));
            if (rc == WEFT_SUCCESS) {
                eb->fd = fd;
                weft_debug("env bootstrap: rank %d connected to the store at %s after %d attempts", eb->rank, eb->where,
                           attempts);
                return WEFT_SUCCESS;
            }
            close(fd);
            if (rc < 0) return rc;
        }
        double now = weft_wtime();
        if (deadline > 0 && now >= deadline)
            return weft_error(WEFT_ERR_TIMEOUT,
                              "env bootstrap: rank 0's store at %s could not be reached within %.1f s: is rank 0 "
                              "running, and do MASTER_ADDR and MASTER_PORT point at it? (rank %d, %d attempts, "
                              "last: %s)",
                              eb->where, now - start, eb->rank, attempts, last);
        /* Back off with jitter, so thousands of ranks do not knock in step. */
        double pause = backoff * (0.5 + (double)rand_r(&seed) / RAND_MAX);
        if (deadline > 0 && now + pause > deadline) pause = deadline - now;
        struct timespec ts = {.tv_sec = (time_t)pause, .tv_nsec = (long)((pause - (double)(time_t)pause) * 1e9)};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 0.5 ? 0.5 : backoff * 2;
    }
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
        int io = io_recv(eb->fd, b, STORE_HDR, io_deadline, err);
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
    if (io == IO_CLOSED && eb->rank != 0)
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

int weft_env_allgather(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline)
{
    env_boot_t *eb = bs ? bs->impl : NULL;
    uint8_t b[STORE_HDR];
    store_hdr_t h;
    char text[STORE_MAX_TEXT + 1];
    uint64_t seq, total;
    int err = 0, io;

    if (!eb || eb->fd < 0) return weft_error(WEFT_ERR_ARG, "env bootstrap: allgather on a closed bootstrap");
    if (eb->broken && eb->broken_why[0]) return weft_error(WEFT_ERR_PEER_LOST, "env bootstrap: %s", eb->broken_why);
    if (eb->broken)
        return weft_error(WEFT_ERR_PEER_LOST,
                          "env bootstrap: the connection to rank 0's store at %s broke in an earlier round", eb->where);
    total = (uint64_t)len * (uint64_t)eb->size;
    if ((uint64_t)len > STORE_MAX_CONTRIB || total > STORE_MAX_ROUND)
        return weft_error(WEFT_ERR_ARG,
                          "env bootstrap: allgather of %zu bytes per rank x %d ranks is over the store's limits "
                          "(%llu per rank, %llu per round)",
                          len, eb->size, (unsigned long long)STORE_MAX_CONTRIB, (unsigned long long)STORE_MAX_ROUND);
    if (len > 0 && (!send || !recv)) return weft_error(WEFT_ERR_ARG, "env bootstrap: allgather with a NULL buffer");

    seq = eb->seq++;
    double now = weft_wtime(), io_dl = io_deadline_of(deadline);
    uint64_t left_ms = 0;
    if (deadline > 0) /* already past: 1 ms still makes the store say who is missing */
        left_ms = deadline - now > 0.001 ? (uint64_t)((deadline - now) * 1000.0) : 1;
    weft_env_hdr_pack(b, K_CONTRIB, (uint32_t)eb->rank, (uint32_t)eb->size, seq, left_ms, len);
    io = io_send(eb->fd, b, sizeof(b), len > 0, io_dl, &err);
    if (io == IO_OK && len > 0) io = io_send(eb->fd, send, len, 0, io_dl, &err);
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
        return weft_error(WEFT_ERR_PEER_LOST, "env bootstrap: allgather round %llu: %s", (unsigned long long)seq, text);
    }
    if (h.magic != STORE_MAGIC || h.version != STORE_VERSION || h.seq != seq ||
        (h.kind == K_RESULT && h.len != total) || (h.kind != K_RESULT && h.kind != K_ERROR)) {
        eb->broken = 1;
        return weft_error(WEFT_ERR_BOOTSTRAP,
                          "env bootstrap: rank 0's store at %s answered allgather round %llu with a bad message "
                          "(magic 0x%08x, kind %u, round %llu, %llu bytes; expected %llu)",
                          eb->where, (unsigned long long)seq, h.magic, h.kind, (unsigned long long)h.seq,
                          (unsigned long long)h.len, (unsigned long long)total);
    }
    if (h.kind == K_RESULT) {
        if (total > 0) io = io_recv(eb->fd, recv, (size_t)total, io_dl, &err);
        if (io != IO_OK) return client_io_failure(eb, io, err, seq);
        return WEFT_SUCCESS;
    }
    io = read_error_text(eb->fd, &h, text, sizeof(text), io_dl, &err);
    if (io != IO_OK) return client_io_failure(eb, io, err, seq);
    return weft_error(status_from_wire(h.arg), "env bootstrap: %s", text);
}

/* Between rounds: takes the LOST notices the store has sent, without
 * blocking, and notices the store's connection closing without a word
 * (rank 0 died). Peeks first, so a partly arrived notice stays in the
 * socket for the next call and anything else for the next round. */
void weft_env_poll_lost(weft_bootstrap_t *bs)
{
    env_boot_t *eb = bs ? bs->impl : NULL;
    uint8_t b[STORE_HDR + STORE_MAX_TEXT];
    char text[STORE_MAX_TEXT + 1];
    store_hdr_t h;
    int err = 0;

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
            if (eb->rank != 0)
                weft_rank_lost(0, "its store at %s closed the connection without notice (%s)", eb->where,
                               k == 0 ? "end of stream" : strerror(errno));
            return;
        }
        if ((size_t)k < STORE_HDR) return;
        weft_env_hdr_unpack(b, &h);
        if (h.magic != STORE_MAGIC || h.version != STORE_VERSION || h.kind != K_LOST) return;
        if (h.len >= STORE_MAX_TEXT || (size_t)k < STORE_HDR + h.len) return;
        if (io_recv(eb->fd, b, STORE_HDR, weft_wtime() + 1.0, &err) != IO_OK ||
            read_error_text(eb->fd, &h, text, sizeof(text), weft_wtime() + 1.0, &err) != IO_OK) {
            eb->broken = 1;
            return;
        }
        client_note_lost(eb, &h, text);
    }
}

void weft_env_free(env_boot_t *eb, int graceful, double deadline)
{
    /* Store first: rank 0's own connection closing is no news to report. */
    if (eb->srv) weft_env_server_stop(eb->srv, eb->thread, graceful, deadline);
    if (eb->fd >= 0) close(eb->fd);
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
        int io = io_send(eb->fd, b, sizeof(b), 0, io_dl, &err);
        if (io == IO_OK) {
            shutdown(eb->fd, SHUT_WR);
            while ((io = io_recv(eb->fd, b, sizeof(b), io_dl, &err)) == IO_OK) {
            }
        }
        if (io != IO_CLOSED)
            weft_debug("env bootstrap: rank %d's goodbye to the store at %s was not acknowledged", eb->rank, eb->where);
    }
    weft_env_free(eb, graceful, deadline);
    bs->impl = NULL;
}
