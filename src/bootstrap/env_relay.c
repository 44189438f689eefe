/* A node relay for the env bootstrap: the first local rank of a node
 * carries its node's connections to rank 0's store over one, so the store
 * holds a descriptor per node instead of one per rank (10^5 ranks would
 * need 10^5 on rank 0; env_wire.h: RELAY, ROUTE).
 *
 * The relay only moves bytes. Each rank runs the store's protocol end to
 * end, its handshake included, so a relay can neither join the job nor
 * learn a proof it could replay, and a rank trusts the store's proof, not
 * the relay. It listens on an abstract unix socket whose name is derived
 * from the job key (env_wire.c: weft_env_relay_addr), so no file is left
 * behind and nobody without the key can find or squat it, and it accepts
 * only processes of its own user (SO_PEERCRED). A rank that cannot reach
 * its relay in a few seconds, or whose relay cannot reach the store,
 * connects to the store directly (env_client.c): a relay never makes a
 * job fail that would have run without it.
 *
 * The relay reaches the store when its first member comes.
 * One thread, one epoll loop: a member's readable bytes go upstream as
 * ROUTE messages of its number; ROUTE messages from the store go to the
 * member they name. A member that closes is reported with ROUTE_CLOSE;
 * the store's ROUTE_CLOSE closes the member once what was routed to it is
 * written. Each side sends one ROUTE_CLOSE per route, and a number is
 * reused only after both. */
#include "bootstrap/env.h"
#include "bootstrap/sock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define RELAY_SPARE 16 /* members beyond LOCAL_WORLD_SIZE (a re-init racing a close) */
#define RELAY_DRAIN 1.0  /* seconds a leaving relay hands on what the store sent, at most */
#define RELAY_QUIET 0.05 /* ... or until the store has been quiet this long and every member has it */

typedef struct bq {
    uint8_t *p;
    size_t head, tail, cap;
} bq_t;

enum { SLOT_FREE = 0, SLOT_LIVE, SLOT_SENT_CLOSE, SLOT_ENDING };

typedef struct member {
    int fd;
    int state;
    int sent; /* bytes of it went to the store: the store knows its route */
    unsigned events;
    bq_t out;
} member_t;

struct relay {
    int lfd, up, ep, wake_rd, wake_wr;
    int nslots, live;
    member_t *slot;
    bq_t upq;
    unsigned up_events;
    uint8_t hbuf[STORE_HDR];
    size_t hgot, chunk_left;
    int chunk_to; /* -1: drop the chunk */
    int leader, size;
    char where[300], host[256];
    int port;
    struct sockaddr_storage direct; /* rank 0's own store, when this relay runs beside it */
    socklen_t direct_len;
    double dial_deadline;
    pthread_t thread;
    pthread_mutex_t lock;
    int stop, finalizing;
    double fin_deadline;
    int draining;      /* leaving: members are no longer read */
    double last_up;    /* when the store last sent something */
    double warned_at;  /* refusals are logged at most once a second */
    unsigned refused;  /* ... and counted meanwhile */
    uint8_t buf[64 << 10];
};

/* ---- byte queues ------------------------------------------------------------ */

static int bq_add(bq_t *q, const void *d, size_t n)
{
    if (q->head == q->tail) q->head = q->tail = 0;
    if (q->tail + n > q->cap) {
        if (q->head > 0) {
            memmove(q->p, q->p + q->head, q->tail - q->head);
            q->tail -= q->head;
            q->head = 0;
        }
        if (q->tail + n > q->cap) {
            size_t cap = q->cap ? q->cap : 4096;
            while (cap < q->tail + n)
                cap *= 2;
            uint8_t *p = realloc(q->p, cap);
            if (!p) return -1;
            q->p = p;
            q->cap = cap;
        }
    }
    memcpy(q->p + q->tail, d, n);
    q->tail += n;
    return 0;
}

/* Writes what it can: 0, or -1 when the socket failed. */
static int bq_write(int fd, bq_t *q)
{
    while (q->head < q->tail) {
        ssize_t k = send(fd, q->p + q->head, q->tail - q->head, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        q->head += (size_t)k;
    }
    return 0;
}

static void bq_free(bq_t *q)
{
    free(q->p);
    memset(q, 0, sizeof(*q));
}

/* ---- the loop ---------------------------------------------------------------- */

static void watch(weft_relay_t *r, int fd, void *ptr, unsigned *have, unsigned want)
{
    if (*have == want) return;
    struct epoll_event ev = {.events = want, .data.ptr = ptr};
    if (epoll_ctl(r->ep, *have ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) == 0) *have = want;
}

static int up_route(weft_relay_t *r, int id, uint64_t arg, const void *d, size_t n)
{
    uint8_t h[STORE_HDR];
    weft_env_hdr_pack(h, K_ROUTE, (uint32_t)id, 0, 0, arg, n);
    return bq_add(&r->upq, h, STORE_HDR) || (n && bq_add(&r->upq, d, n)) ? -1 : 0;
}

static void slot_close_fd(weft_relay_t *r, member_t *m)
{
    if (m->fd < 0) return;
    (void)epoll_ctl(r->ep, EPOLL_CTL_DEL, m->fd, NULL);
    close(m->fd);
    m->fd = -1;
    m->events = 0;
    bq_free(&m->out);
}

static void slot_free(weft_relay_t *r, member_t *m)
{
    slot_close_fd(r, m);
    m->state = SLOT_FREE;
    r->live--;
}

static void member_watch(weft_relay_t *r, member_t *m)
{
    if (m->fd >= 0)
        watch(r, m->fd, m, &m->events,
              (m->state == SLOT_LIVE && !r->draining ? (unsigned)EPOLLIN : 0u) |
                  (m->out.head < m->out.tail ? (unsigned)EPOLLOUT : 0u));
}

/* The member's stream ended (it said goodbye and shut its side, or it is
 * gone: close_fd). The store is told once; the number stays taken until
 * its answer, and the socket stays open for what the store still sends
 * (its close is a rank's acknowledgment of its goodbye). A member that
 * never sent a byte is unknown to the store: its number is free at once. */
static void member_close_up(weft_relay_t *r, member_t *m, int close_fd)
{
    if (!m->sent) {
        slot_free(r, m);
        return;
    }
    if (m->state == SLOT_LIVE) {
        m->state = SLOT_SENT_CLOSE;
        (void)up_route(r, (int)(m - r->slot), ROUTE_CLOSE, NULL, 0);
    }
    if (close_fd)
        slot_close_fd(r, m);
    else
        member_watch(r, m);
}

/* The store's ROUTE_CLOSE was flushed to the member (or cannot be): close
 * it and answer, unless the member's own close crossed it. */
static void member_ended(weft_relay_t *r, member_t *m)
{
    if (m->state == SLOT_ENDING) (void)up_route(r, (int)(m - r->slot), ROUTE_CLOSE, NULL, 0);
    slot_free(r, m);
}

static void member_flush(weft_relay_t *r, member_t *m)
{
    if (m->fd >= 0 && bq_write(m->fd, &m->out) != 0) {
        if (m->state == SLOT_ENDING)
            member_ended(r, m);
        else
            member_close_up(r, m, 1);
        return;
    }
    if (m->state == SLOT_ENDING && m->out.head == m->out.tail) {
        shutdown(m->fd, SHUT_WR);
        member_ended(r, m);
        return;
    }
    member_watch(r, m);
}

static void member_read(weft_relay_t *r, member_t *m)
{
    for (int pass = 0; pass < 16 && m->state == SLOT_LIVE; pass++) {
        ssize_t k = recv(m->fd, r->buf, sizeof(r->buf), 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (k <= 0) {
            member_close_up(r, m, k < 0);
            return;
        }
        if (up_route(r, (int)(m - r->slot), ROUTE_DATA, r->buf, (size_t)k) != 0) {
            weft_warn("node relay of rank %d: out of memory", r->leader);
            member_close_up(r, m, 1);
            return;
        }
        m->sent = 1;
    }
}

/* A refused connection, logged at most once a second with a count. */
static void refused(weft_relay_t *r, const char *why, int pid, int uid)
{
    double now = weft_wtime();
    r->refused++;
    if (now - r->warned_at < 1.0) return;
    weft_warn("node relay of rank %d: refused %u connection%s (the last: pid %d, user %d): %s", r->leader, r->refused,
              r->refused == 1 ? "" : "s", pid, uid, why);
    r->warned_at = now;
    r->refused = 0;
}

#define RELAY_ACCEPT_BATCH 64 /* connections accepted per pass: a flood must not starve the members */

static void relay_accept(weft_relay_t *r)
{
    for (int batch = 0; batch < RELAY_ACCEPT_BATCH; batch++) {
        int fd = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        struct ucred cred;
        socklen_t cl = sizeof(cred);
        int known = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 && cl == sizeof(cred);
        if (!known || cred.uid != geteuid()) {
            refused(r, "only this job's user's processes may use it", known ? (int)cred.pid : -1,
                    known ? (int)cred.uid : -1);
            close(fd);
            continue;
        }
        int id = -1;
        for (int i = 0; i < r->nslots && id < 0; i++)
            if (r->slot[i].state == SLOT_FREE) id = i;
        if (id < 0) {
            refused(r, "every route is in use", (int)cred.pid, (int)cred.uid);
            close(fd);
            continue;
        }
        member_t *m = &r->slot[id];
        memset(m, 0, sizeof(*m));
        m->fd = fd;
        m->state = SLOT_LIVE;
        r->live++;
        watch(r, fd, m, &m->events, EPOLLIN);
    }
}

/* ROUTE messages from the store. Returns -1 when the stream is broken. */
static int up_read(weft_relay_t *r)
{
    for (int pass = 0; pass < 64; pass++) {
        uint8_t *p;
        size_t n;
        if (r->chunk_left) {
            p = r->buf;
            n = r->chunk_left < sizeof(r->buf) ? r->chunk_left : sizeof(r->buf);
        } else {
            p = r->hbuf + r->hgot;
            n = STORE_HDR - r->hgot;
        }
        ssize_t k = recv(r->up, p, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (k <= 0) return -1;
        r->last_up = weft_wtime();
        if (r->chunk_left) {
            r->chunk_left -= (size_t)k;
            member_t *m = r->chunk_to >= 0 ? &r->slot[r->chunk_to] : NULL;
            if (m && m->fd >= 0 && (m->state == SLOT_LIVE || m->state == SLOT_SENT_CLOSE)) {
                if (bq_add(&m->out, r->buf, (size_t)k) != 0)
                    member_close_up(r, m, 1);
                else
                    member_flush(r, m);
            }
            continue;
        }
        if ((r->hgot += (size_t)k) < STORE_HDR) continue;
        store_hdr_t h;
        store_judgement_t j;
        r->hgot = 0;
        weft_env_judge_route(r->hbuf, UINT64_MAX, &h, &j);
        if (j.action != JUDGE_BODY || (int)h.rank >= r->nslots) {
            weft_warn("node relay of rank %d: the store at %s sent %s", r->leader, r->where,
                      j.action != JUDGE_BODY ? j.why : "a route this relay never opened");
            return -1;
        }
        member_t *m = &r->slot[h.rank];
        if (h.arg == ROUTE_CLOSE) {
            if (m->state == SLOT_SENT_CLOSE) {
                slot_free(r, m);
            } else if (m->state == SLOT_LIVE) {
                m->state = SLOT_ENDING;
                member_flush(r, m);
            }
            continue;
        }
        r->chunk_to = (int)h.rank;
        r->chunk_left = (size_t)h.len;
    }
    return 0;
}

static int relay_greet(int fd, void *ctx, double deadline, char *why, size_t cap)
{
    weft_relay_t *r = ctx;
    uint8_t h[STORE_HDR];
    int err = 0;
    weft_env_hdr_pack(h, K_RELAY, (uint32_t)r->leader, (uint32_t)r->size, 0, 0, 0);
    if (weft_io_send(fd, h, STORE_HDR, 0, deadline, &err) == IO_OK) return WEFT_SUCCESS;
    weft_env_textf(why, cap, "%s", err ? strerror(err) : "closed");
    return 1;
}

static int relay_should_stop(weft_relay_t *r, double now)
{
    pthread_mutex_lock(&r->lock);
    int stop = r->stop || (r->finalizing && (r->live == 0 || (r->fin_deadline > 0 && now >= r->fin_deadline)));
    pthread_mutex_unlock(&r->lock);
    return stop;
}

/* Whether every member has been sent all the store routed to it. */
static int members_flushed(const weft_relay_t *r)
{
    for (int i = 0; i < r->nslots; i++)
        if (r->slot[i].fd >= 0 && r->slot[i].out.head < r->slot[i].out.tail) return 0;
    return 1;
}

/* Reaches the store (when the first member comes: a relay that never
 * carries anyone never bothers it). Its members see the relay's socket
 * close when it cannot, and connect directly. */
static int relay_dial(weft_relay_t *r)
{
    weft_dial_t d = {.who = "node relay",
                     .rank = r->leader,
                     .what = "rank 0's store",
                     .host = r->host,
                     .port = r->port,
                     .direct = r->direct_len ? (struct sockaddr *)&r->direct : NULL,
                     .direct_len = r->direct_len,
                     .greet = relay_greet,
                     .ctx = r};
    if (weft_dial(&d, r->dial_deadline, &r->up) != WEFT_SUCCESS) {
        weft_warn("node relay of rank %d: %s; this node's ranks connect to the store directly", r->leader,
                  weft_last_error());
        weft_error_clear();
        return -1;
    }
    r->last_up = weft_wtime();
    return 0;
}

static void *relay_main(void *arg)
{
    weft_relay_t *r = arg;
    struct epoll_event evs[64];
    unsigned lfd_events = 0;
    watch(r, r->lfd, &r->lfd, &lfd_events, EPOLLIN);
    /* Leaving (stopped, or the store closed): no new members and nothing
     * more from them, but what the store sent them (a verdict that ends
     * their init, its closing notice) is handed on first: until every
     * member has all of it and the store's stream ended or went quiet for
     * RELAY_QUIET, at most RELAY_DRAIN seconds. */
    double drain_until = 0;
    int up_closed = 0;
    for (;;) {
        double now = weft_wtime();
        if (!drain_until && (up_closed || relay_should_stop(r, now))) {
            drain_until = now + RELAY_DRAIN;
            r->draining = 1;
            (void)epoll_ctl(r->ep, EPOLL_CTL_DEL, r->lfd, NULL);
            for (int i = 0; i < r->nslots; i++)
                if (r->slot[i].fd >= 0) member_flush(r, &r->slot[i]);
        }
        if (drain_until &&
            (now >= drain_until || r->live == 0 ||
             (members_flushed(r) && (up_closed || r->up < 0 || now - r->last_up >= RELAY_QUIET))))
            break;
        if (r->up < 0 && r->live > 0 && !r->draining) {
            if (relay_dial(r) != 0) break;
            watch(r, r->up, &r->up, &r->up_events, EPOLLIN | EPOLLOUT);
        }
        int n = epoll_wait(r->ep, evs, (int)(sizeof(evs) / sizeof(evs[0])), drain_until ? 20 : 1000);
        if (n < 0 && errno != EINTR) break;
        int broken = 0;
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            unsigned ev = evs[i].events;
            if (p == &r->wake_rd) {
                char junk[64];
                while (read(r->wake_rd, junk, sizeof(junk)) > 0) {
                }
            } else if (p == &r->lfd) {
                relay_accept(r);
            } else if (p == &r->up) {
                if (up_closed) continue;
                if ((ev & EPOLLOUT) && bq_write(r->up, &r->upq) != 0) broken = 1;
                if (!broken && (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) && up_read(r) != 0) broken = 1;
            } else {
                member_t *m = p;
                if (m->fd < 0) continue;
                if (ev & EPOLLOUT) member_flush(r, m);
                if (m->fd < 0) continue;
                if (m->state == SLOT_LIVE && !r->draining && (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                    member_read(r, m);
                else if (ev & (EPOLLHUP | EPOLLERR)) { /* gone (reported even when not asked for) */
                    if (m->state == SLOT_ENDING)
                        member_ended(r, m);
                    else
                        member_close_up(r, m, 1);
                }
            }
        }
        if (r->up < 0) continue;
        if (!up_closed && !broken && bq_write(r->up, &r->upq) != 0) broken = 1;
        if (broken && !up_closed) {
            /* The store is gone: so is every member's connection to it, once it has what came before. */
            weft_debug("node relay of rank %d: the store at %s closed", r->leader, r->where);
            (void)epoll_ctl(r->ep, EPOLL_CTL_DEL, r->up, NULL);
            up_closed = 1;
        }
        if (!up_closed)
            watch(r, r->up, &r->up, &r->up_events, EPOLLIN | (r->upq.head < r->upq.tail ? (unsigned)EPOLLOUT : 0u));
    }
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->nslots; i++)
        if (r->slot[i].state != SLOT_FREE) slot_free(r, &r->slot[i]);
    if (r->lfd >= 0) close(r->lfd); /* members that come later connect directly */
    r->lfd = -1;
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* ---- start and stop ------------------------------------------------------------ */

static void relay_free(weft_relay_t *r)
{
    if (!r) return;
    if (r->lfd >= 0) close(r->lfd);
    if (r->up >= 0) close(r->up);
    if (r->ep >= 0) close(r->ep);
    if (r->wake_rd >= 0) close(r->wake_rd);
    if (r->wake_wr >= 0) close(r->wake_wr);
    for (int i = 0; r->slot && i < r->nslots; i++)
        bq_free(&r->slot[i].out);
    bq_free(&r->upq);
    free(r->slot);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

int weft_env_relay_start(weft_relay_t **out, const env_boot_t *eb, int leader, int local_size, double deadline)
{
    weft_relay_t *r = calloc(1, sizeof(*r));
    int wake[2], err;
    unsigned alen;
    struct sockaddr_un sa;

    *out = NULL;
    if (!r) return weft_error(WEFT_ERR_NO_MEMORY, "node relay: out of memory");
    r->lfd = r->up = r->ep = r->wake_rd = r->wake_wr = -1;
    r->chunk_to = -1;
    r->leader = leader;
    r->size = eb->size;
    r->port = eb->port;
    r->dial_deadline = deadline;
    pthread_mutex_init(&r->lock, NULL);
    snprintf(r->where, sizeof(r->where), "%s", eb->where);
    snprintf(r->host, sizeof(r->host), "%s", eb->addr);
    if (eb->srv) { /* beside rank 0's store: reach it as rank 0's own client does */
        struct addrinfo self = {0};
        weft_env_server_self(eb->srv, &self);
        memcpy(&r->direct, self.ai_addr, self.ai_addrlen);
        r->direct_len = self.ai_addrlen;
    }
    r->nslots = local_size + RELAY_SPARE;
    if (r->nslots > STORE_RELAY_ROUTES) r->nslots = STORE_RELAY_ROUTES;
    if (!(r->slot = calloc((size_t)r->nslots, sizeof(*r->slot)))) goto nomem;
    for (int i = 0; i < r->nslots; i++)
        r->slot[i].fd = -1;
    if (pipe2(wake, O_NONBLOCK | O_CLOEXEC) != 0) goto sys;
    r->wake_rd = wake[0];
    r->wake_wr = wake[1];
    if ((r->ep = epoll_create1(EPOLL_CLOEXEC)) < 0) goto sys;
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &r->wake_rd};
    if (epoll_ctl(r->ep, EPOLL_CTL_ADD, r->wake_rd, &wev) != 0) goto sys;
    weft_env_relay_addr(eb->key.key, eb->size, leader, eb->where, &sa, &alen);
    if ((r->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0) goto sys;
    if (bind(r->lfd, (struct sockaddr *)&sa, alen) != 0 || listen(r->lfd, 1024) != 0) {
        /* Taken: another relay of this job (ranks of simulated nodes share a host), or a leftover of a
         * previous run on this port. The node's ranks use whichever answers, or the store. */
        weft_debug("node relay of rank %d: cannot listen (%s); this node's ranks use the relay that holds the name, "
                   "or the store directly",
                   leader, strerror(errno));
        relay_free(r);
        return WEFT_SUCCESS;
    }
    if ((err = weft_thread_start(&r->thread, NULL, relay_main, r, "weft-relay")) != 0) {
        errno = err;
        goto sys;
    }
    weft_debug("node relay of rank %d: serving up to %d local ranks for the store at %s", leader, r->nslots,
               r->where);
    *out = r;
    return WEFT_SUCCESS;
nomem:
    relay_free(r);
    return weft_error(WEFT_ERR_NO_MEMORY, "node relay: out of memory");
sys:
    err = errno;
    relay_free(r);
    return weft_error(WEFT_ERR_BOOTSTRAP, "node relay of rank %d: %s", leader, strerror(err));
}

void weft_env_relay_stop(weft_relay_t *r, int graceful, double deadline)
{
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    if (graceful) {
        r->finalizing = 1;
        r->fin_deadline = deadline;
    } else {
        r->stop = 1;
    }
    pthread_mutex_unlock(&r->lock);
    if (write(r->wake_wr, "x", 1) < 0) {
        /* Only EAGAIN is possible: the pipe is full, so the thread wakes anyway. */
    }
    pthread_join(r->thread, NULL);
    relay_free(r);
}
