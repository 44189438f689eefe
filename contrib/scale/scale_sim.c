/* weft-scale-sim: many simulated ranks in one process, for the scale
 * harness (contrib/scale/run_scale.py, docs/PERFORMANCE.md section 11).
 *
 * Each simulated rank is a few hundred bytes of state and one TCP
 * connection to rank 0's real store, driven by one epoll loop. It speaks
 * the env bootstrap's wire protocol with weft's own code for it
 * (bootstrap/env_wire.h: headers, the handshake's proofs with the job
 * key; pt2pt/ucx_addr.h: the sealed address; the node-map record from
 * topo/node.c), and sends what a real rank's weft_init and weft_finalize
 * send, in the same order, with the same lengths:
 *   handshake (HELLO, CHALLENGE checked, PROOF, WELCOME)
 *   init: the node-map record gathered at rank 0, rank 0's map broadcast
 *         back; the sealed UCX address published (PUT), or, in worlds of
 *         at most WEFT_ADDRESSES_AT_INIT ranks, allgathered (lengths,
 *         then the addresses padded to the longest)
 *   sync A (an empty round the real ranks of the harness also run), then
 *   sync B (meanwhile the real ranks build communicators among themselves)
 *   first collective: the addresses of the peers a recursive-doubling
 *         exchange over the world sends to (rank ^ 1, ^ 2, ^ 4, ...: log2 N
 *         of them, --lookups sets how many), fetched in one GET of up to 16
 *         as a real rank's schedule fetches them when it starts
 *   sync C
 *   finalize: the closing barrier (an empty round), BYE, the store closes.
 * What it does not do is UCX: a simulated rank has no worker, so the real
 * ranks never talk to one (they run their collectives among themselves).
 *
 * With --torch 1 the same steps go through torch's TCPStore, as the
 * torchstore bootstrap of a torchrun worker sends them (worlds above
 * WEFT_ADDRESSES_AT_INIT).
 *
 * With --relay 1 each simulated node's ranks share one connection, as
 * their node relay (src/bootstrap/env_relay.c) carries them: RELAY, then
 * each rank's stream in ROUTE messages of its number on the node.
 *
 * Usage: weft-scale-sim --size N --first A --count K [--ppn P] [--real R]
 *        [--window W] [--addr-len B] [--bind-base X] [--lookups L] [--torch 1] [--relay 1]
 * Ranks A .. A+K-1 of N. Simulated nodes of P ranks (default 8) start
 * after the R real ranks, which are node 0. At most W handshakes are in
 * flight at once (0: no limit). MASTER_ADDR / MASTER_PORT / WEFT_JOB_SECRET
 * as for a real rank; SCALE_T0 the run's start (CLOCK_REALTIME seconds).
 * Prints one JSON line: counts, bytes and the times (since SCALE_T0) at
 * which the last of its ranks finished each phase. */
#include "bootstrap/env_wire.h"
#include "bootstrap/jobkey.h"
#include "pt2pt/ucx_addr.h"
#include "weft_internal.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { PH_IDLE, PH_CONNECTING, PH_HELLO, PH_PROOF, PH_MEMBER, PH_BYE, PH_DONE, PH_FAILED };

/* The steps after the handshake: what a real rank sends, in order. */
enum {
    ST_GATHER,
    ST_BCAST,
    ST_ADDR_LEN,
    ST_ADDR,
    ST_PUT,
    ST_SYNC_A,
    ST_SYNC_B,
    ST_LOOKUP,
    ST_SYNC_C,
    ST_BARRIER,
    ST_BYE,
    ST_END
};
enum { MARK_WELCOME, MARK_GATHER, MARK_INIT, MARK_SYNC_A, MARK_SYNC_B, MARK_LOOKUP, MARK_SYNC_C, MARK_DONE, NMARKS };
static const char *const mark_name[NMARKS] = {"welcome", "gather", "init",   "sync_a",
                                              "sync_b",  "lookup", "sync_c", "done"};

typedef struct sim {
    int fd;
    int rank;
    int phase;
    int step;
    uint64_t seq;
    uint8_t nc[STORE_NONCE];
    uint8_t hbuf[STORE_HDR];
    size_t hgot;
    store_hdr_t h;
    int in_body;
    uint64_t body_len, body_got;
    uint8_t small[STORE_CHALLENGE];
    int lookups;      /* ST_LOOKUP: peers asked for so far */
    int pending;      /* ST_LOOKUP: answers still due */
    uint64_t max_len; /* ST_ADDR_LEN's result: the longest sealed address */
    uint8_t carry[8];
    int ncarry;
    uint8_t *out;
    size_t out_len, out_off;
    double retry_at;
    struct sim *next_retry;
    /* --torch: the replies asked for, in order, and the one being read */
    uint8_t expect[2 + STORE_GET_MAX];
    int nexp, head, rph;
    uint64_t rgot, val_len;
    uint8_t rb[8], val[16];
    int64_t ival;
    int sub;
    /* --relay: the node link that carries this rank, its route there, and whether its ROUTE_CLOSE went out */
    int link, route, sent_close;
} sim_t;

/* --relay: one simulated node's connection to the store. */
typedef struct link {
    int fd;
    int state; /* LINK_IDLE, LINK_CONNECTING, LINK_UP */
    uint8_t *out;
    size_t out_len, out_off;
    uint8_t hbuf[STORE_HDR];
    size_t hgot;
    uint64_t chunk_left;
    int chunk_to;       /* the sim the chunk being read is for (-1: none) */
    int first, nsims;   /* its sims in g.sims */
} link_t;
enum { LINK_IDLE, LINK_CONNECTING, LINK_UP };

static struct {
    int size, first, count, ppn, real, window, addr_len, bind_base, lookups;
    int eager; /* WEFT_ADDRESSES_AT_INIT: every address allgathered at init, nothing fetched */
    int torch; /* --torch 1: torchrun's agent store (torch's TCPStore) instead of rank 0's */
    int relay; /* --relay 1: a connection per simulated node, as node relays make */
    link_t *links;
    int nlinks;
    char prefix[320];
    const char *host;
    int port;
    double t0;
    weft_job_key_t key;
    int ep;
    int in_flight; /* handshakes under way */
    int next_start;
    sim_t *sims;
    sim_t *retry_head, *retry_tail;
    int remaining;
    int failed;
    uint64_t bytes_in, bytes_out, connects, refused, fetched;
    double mark[NMARKS];
    int marked[NMARKS];
    uint8_t scratch[1 << 20];
} g;

static double now_real(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void mark(int m)
{
    double t = now_real() - g.t0;
    if (t > g.mark[m]) g.mark[m] = t;
    g.marked[m]++;
}

/* Closes rank s's connection. */
static void sim_close(sim_t *s)
{
    if (s->fd < 0) return;
    epoll_ctl(g.ep, EPOLL_CTL_DEL, s->fd, NULL);
    close(s->fd);
    s->fd = -1;
}

static void sim_fail(sim_t *s, const char *fmt, ...) WEFT_PRINTF(2, 3);
static void sim_fail(sim_t *s, const char *fmt, ...)
{
    va_list ap;
    if (g.failed < 5) {
        fprintf(stderr, "weft-scale-sim: rank %d: ", s->rank);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    g.failed++;
    if (s->phase >= PH_CONNECTING && s->phase <= PH_PROOF) g.in_flight--;
    s->phase = PH_FAILED;
    if (s->fd >= 0) sim_close(s);
    g.remaining--;
}

static void want_out(sim_t *s, int on)
{
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = s};
    epoll_ctl(g.ep, EPOLL_CTL_MOD, s->fd, &ev);
}

static void route_out(sim_t *s, uint64_t arg, const uint8_t *d, size_t n);

static void flush_out(sim_t *s)
{
    if (g.relay) { /* onto the node's connection, in ROUTE messages */
        for (size_t off = 0; off < s->out_len;) {
            size_t n = s->out_len - off < STORE_ROUTE_CHUNK ? s->out_len - off : STORE_ROUTE_CHUNK;
            route_out(s, ROUTE_DATA, s->out + off, n);
            off += n;
        }
        free(s->out);
        s->out = NULL;
        s->out_len = s->out_off = 0;
        return;
    }
    while (s->out_off < s->out_len) {
        ssize_t k = send(s->fd, s->out + s->out_off, s->out_len - s->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            want_out(s, 1);
            return;
        }
        if (k < 0) {
            sim_fail(s, "send: %s", strerror(errno));
            return;
        }
        s->out_off += (size_t)k;
        g.bytes_out += (uint64_t)k;
    }
    free(s->out);
    s->out = NULL;
    s->out_len = s->out_off = 0;
}

/* Appends len bytes to what goes out next (the caller flushes). */
static uint8_t *out_room(sim_t *s, size_t len)
{
    uint8_t *b = realloc(s->out, s->out_len + len);
    if (!b) {
        sim_fail(s, "out of memory");
        return NULL;
    }
    s->out = b;
    s->out_len += len;
    return b + s->out_len - len;
}

/* Queues header + payload (p1, p2) and sends what the socket takes. */
static void sim_send(sim_t *s, unsigned kind, uint64_t seq, uint64_t arg, const void *p1, size_t n1, const void *p2,
                     size_t n2)
{
    uint8_t *b = out_room(s, STORE_HDR + n1 + n2);
    if (!b) return;
    weft_env_hdr_pack(b, kind, (uint32_t)s->rank, (uint32_t)g.size, seq, arg, n1 + n2);
    if (n1) memcpy(b + STORE_HDR, p1, n1);
    if (n2) memcpy(b + STORE_HDR + n1, p2, n2);
    flush_out(s);
}

/* A round: the contribution a real rank makes at this step. */
static void contrib(sim_t *s, unsigned kind, const void *data, size_t len)
{
    sim_send(s, kind, s->seq++, 600000, data, len, NULL, 0);
}

static void step_done(sim_t *s);
static void t_start(sim_t *s);
static void t_bytes_in(sim_t *s, const uint8_t *p, size_t n);

/* Fetches the addresses of the next peers the first collective sends to
 * (rank ^ 2^i, i < --lookups, within the world), up to 16 in one GET as a
 * real rank's schedule does when it starts, or ends the step. */
static void next_lookup(sim_t *s)
{
    uint32_t be[STORE_GET_MAX];
    int k = 0;
    for (; s->lookups < g.lookups && s->lookups < 30 && k < STORE_GET_MAX; s->lookups++)
        if ((s->rank ^ (1 << s->lookups)) < g.size) be[k++] = htonl((uint32_t)(s->rank ^ (1 << s->lookups)));
    if (!k) {
        mark(MARK_LOOKUP);
        step_done(s);
        return;
    }
    s->pending = k;
    sim_send(s, K_GET, 0, 600000, be, 4 * (size_t)k, NULL, 0);
}

static uint64_t machine_of_node(int64_t node)
{
    return UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(node + 1) ^ UINT64_C(0x5eed5eed);
}

static int64_t node_of_rank(int rank)
{
    return rank < g.real ? 0 : 1 + (rank - g.real) / g.ppn;
}

/* The node-map record rank s sends (its simulated node's), into buf. */
static size_t node_record(const sim_t *s, uint8_t *buf, size_t cap)
{
    int64_t node = node_of_rank(s->rank);
    return weft_topo_node_record(buf, cap, machine_of_node(node), node);
}

/* A fake worker address of --addr-len bytes, sealed for rank s as a real
 * rank seals its own, into blob (at least weft_ucx_addr_sealed_len bytes). */
static size_t sealed_address(const sim_t *s, uint8_t *blob)
{
    uint8_t addr[WEFT_UCX_ADDR_MAX];
    for (int i = 0; i < g.addr_len; i++)
        addr[i] = (uint8_t)(s->rank * 31 + i);
    weft_ucx_addr_seal(&g.key, (uint32_t)s->rank, (uint32_t)g.size, addr, (size_t)g.addr_len, blob);
    return weft_ucx_addr_sealed_len((size_t)g.addr_len);
}

static void t_step(sim_t *s);

static void run_step(sim_t *s)
{
    uint8_t buf[512];
    if (g.torch) {
        t_step(s);
        return;
    }
    switch (s->step) {
    case ST_GATHER: contrib(s, K_GATHER, buf, node_record(s, buf, sizeof(buf))); break;
    case ST_BCAST: contrib(s, K_BCAST, NULL, 0); break;
    case ST_ADDR_LEN: {
        if (!g.eager) {
            s->step = ST_PUT;
            run_step(s);
            break;
        }
        uint64_t sealed = weft_ucx_addr_sealed_len((size_t)g.addr_len);
        contrib(s, K_CONTRIB, &sealed, sizeof(sealed));
        s->max_len = 0;
        s->ncarry = 0;
        break;
    }
    case ST_ADDR: {
        size_t sealed = weft_ucx_addr_sealed_len((size_t)g.addr_len);
        uint8_t *blob = calloc(1, s->max_len > sealed ? s->max_len : sealed);
        if (!blob) {
            sim_fail(s, "out of memory");
            return;
        }
        sealed_address(s, blob);
        contrib(s, K_CONTRIB, blob, s->max_len);
        free(blob);
        break;
    }
    case ST_PUT: {
        uint8_t blob[WEFT_UCX_ADDR_MAX + 64];
        size_t sealed = sealed_address(s, blob);
        sim_send(s, K_PUT, 0, 0, blob, sealed, NULL, 0);
        if (s->phase == PH_FAILED) return;
        mark(MARK_INIT); /* no answer: init is done */
        s->step++;
        run_step(s);
        break;
    }
    case ST_SYNC_A:
    case ST_SYNC_B:
    case ST_SYNC_C:
    case ST_BARRIER: contrib(s, K_CONTRIB, NULL, 0); break;
    case ST_LOOKUP:
        s->lookups = g.eager ? g.lookups : 0; /* every address is here already */
        next_lookup(s);
        break;
    case ST_BYE:
        sim_send(s, K_BYE, s->seq, 0, NULL, 0, NULL, 0);
        if (s->phase != PH_FAILED) {
            if (g.relay) { /* the relay reports the rank's end of stream */
                route_out(s, ROUTE_CLOSE, NULL, 0);
                s->sent_close = 1;
            } else {
                shutdown(s->fd, SHUT_WR);
            }
            s->phase = PH_BYE;
        }
        break;
    }
}

/* A step is done: the next one. */
static void step_done(sim_t *s)
{
    if (s->step == ST_GATHER) mark(MARK_GATHER);
    if (s->step == ST_ADDR) { /* the addresses came with init: nothing to publish */
        mark(MARK_INIT);
        s->step = ST_SYNC_A;
        run_step(s);
        return;
    }
    if (s->step == ST_SYNC_A) mark(MARK_SYNC_A);
    if (s->step == ST_SYNC_B) mark(MARK_SYNC_B);
    if (s->step == ST_SYNC_C) mark(MARK_SYNC_C);
    s->step++;
    run_step(s);
}

static void start_handshake(sim_t *s)
{
    weft_random_bytes(s->nc, sizeof(s->nc));
    s->phase = PH_HELLO;
    sim_send(s, K_HELLO, 0, HELLO_WANTS_LOST | (g.key.keyed ? FLAG_KEYED : 0), s->nc, STORE_NONCE, NULL, 0);
}

static void retry_later(sim_t *s)
{
    g.refused++;
    s->phase = PH_IDLE;
    s->retry_at = now_real() + 0.05;
    s->next_retry = NULL;
    if (g.retry_tail)
        g.retry_tail->next_retry = s;
    else
        g.retry_head = s;
    g.retry_tail = s;
}

/* The handshake failed as a busy or restarting store makes it fail: close
 * and connect again later, as a real rank does. */
static void handshake_retry(sim_t *s)
{
    sim_close(s);
    g.in_flight--;
    s->sent_close = 0; /* a route: both sides closed it, its number is free again */
    retry_later(s);
}

static void link_connect(link_t *l);

static void start_connect(sim_t *s)
{
    if (g.relay) {
        link_t *l = &g.links[s->link];
        s->phase = PH_CONNECTING;
        g.in_flight++;
        g.connects++;
        if (l->state == LINK_UP)
            start_handshake(s);
        else if (l->state == LINK_IDLE)
            link_connect(l);
        return;
    }
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET};
    int idx = (int)(s - g.sims);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        sim_fail(s, "socket: %s", strerror(errno));
        return;
    }
    /* ~28k source ports per source address towards one port, and connect() looks for a free one
     * in them: 2000 connections per address keep that short */
    src.sin_addr.s_addr = htonl(0x7f000000u | ((uint32_t)(g.bind_base + idx / 2000) & 0xffffffu));
    int one = 1;
    /* the port is picked at connect, per destination: binding one per socket costs O(sockets) each */
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    dst.sin_port = htons((uint16_t)g.port);
    inet_pton(AF_INET, g.host, &dst.sin_addr);
    if (bind(fd, (struct sockaddr *)&src, sizeof(src)) != 0) {
        close(fd);
        sim_fail(s, "bind: %s", strerror(errno));
        return;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    s->fd = fd;
    s->phase = PH_CONNECTING;
    g.in_flight++;
    g.connects++;
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.ptr = s};
    epoll_ctl(g.ep, EPOLL_CTL_ADD, fd, &ev);
    if (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) != 0 && errno != EINPROGRESS) {
        int e = errno;
        epoll_ctl(g.ep, EPOLL_CTL_DEL, fd, NULL);
        close(fd);
        s->fd = -1;
        g.in_flight--;
        if (e == ECONNREFUSED || e == EAGAIN)
            retry_later(s);
        else
            sim_fail(s, "connect: %s", strerror(e));
    }
}

static void on_connected(sim_t *s)
{
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
        sim_close(s);
        g.in_flight--;
        if (err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET)
            retry_later(s);
        else
            sim_fail(s, "connect: %s", strerror(err));
        return;
    }
    want_out(s, 0);
    if (g.torch)
        t_start(s);
    else
        start_handshake(s);
}

/* A header arrived; decide what its body is. */
static void on_header(sim_t *s)
{
    weft_env_hdr_unpack(s->hbuf, &s->h);
    s->hgot = 0;
    if (s->h.magic != STORE_MAGIC || s->h.version != STORE_VERSION) {
        sim_fail(s, "bad header from the store (magic 0x%08x version %u)", s->h.magic, s->h.version);
        return;
    }
    s->in_body = 1;
    s->body_len = s->h.len;
    s->body_got = 0;
}

static void body_bytes(sim_t *s, const uint8_t *p, size_t n)
{
    if (s->h.kind == K_CHALLENGE) {
        if (s->body_got + n <= sizeof(s->small)) memcpy(s->small + s->body_got, p, n);
    } else if (s->h.kind == K_RESULT && s->step == ST_ADDR_LEN) {
        /* every rank's sealed length, host order: the longest sets the padding */
        for (size_t i = 0; i < n; i++) {
            s->carry[s->ncarry++] = p[i];
            if (s->ncarry == 8) {
                uint64_t v;
                memcpy(&v, s->carry, 8);
                if (v > s->max_len) s->max_len = v;
                s->ncarry = 0;
            }
        }
    } else if (s->h.kind == K_ERROR || s->h.kind == K_LOST || (s->h.kind == K_VALUE && s->h.arg)) {
        if (s->body_got + n < sizeof(g.scratch)) memcpy(g.scratch + s->body_got, p, n);
    }
}

static void on_message(sim_t *s)
{
    uint8_t proof[STORE_PROOF];
    s->in_body = 0;
    switch (s->h.kind) {
    case K_CHALLENGE:
        if (s->phase != PH_HELLO || s->h.len != STORE_CHALLENGE) {
            sim_fail(s, "unexpected CHALLENGE");
            return;
        }
        weft_env_proof(g.key.key, PROOF_BY_STORE, s->nc, s->small, (uint32_t)s->rank, (uint32_t)g.size, proof);
        if (!weft_ct_equal(proof, s->small + STORE_NONCE, STORE_PROOF)) {
            sim_fail(s, "the store's proof is wrong (another job secret?)");
            return;
        }
        weft_env_proof(g.key.key, PROOF_BY_RANK, s->nc, s->small, (uint32_t)s->rank, (uint32_t)g.size, proof);
        s->phase = PH_PROOF;
        sim_send(s, K_PROOF, 0, 0, proof, STORE_PROOF, NULL, 0);
        break;
    case K_WELCOME:
        if (s->phase != PH_PROOF) {
            sim_fail(s, "unexpected WELCOME");
            return;
        }
        s->phase = PH_MEMBER;
        g.in_flight--;
        mark(MARK_WELCOME);
        s->step = ST_GATHER;
        run_step(s);
        break;
    case K_VALUE:
        if (s->phase != PH_MEMBER || s->step != ST_LOOKUP || s->h.arg) {
            size_t n = s->h.len < 300 ? (size_t)s->h.len : 300;
            sim_fail(s, "unexpected VALUE for rank %u: %.*s", s->h.rank, (int)n, (const char *)g.scratch);
            return;
        }
        g.fetched++;
        if (--s->pending == 0) next_lookup(s);
        break;
    case K_RESULT:
        if (s->phase != PH_MEMBER || s->h.seq != s->seq - 1) {
            sim_fail(s, "unexpected RESULT (round %llu)", (unsigned long long)s->h.seq);
            return;
        }
        step_done(s);
        break;
    case K_LOST: break;
    case K_ERROR: {
        size_t n = s->h.len < 300 ? (size_t)s->h.len : 300;
        if (s->phase >= PH_CONNECTING && s->phase <= PH_PROOF && s->h.arg == (uint64_t)(int64_t)WEFT_ERR_ALREADY) {
            if (!g.relay) handshake_retry(s); /* through a relay: at the store's ROUTE_CLOSE, which follows */
            return;
        }
        sim_fail(s, "the store said: %.*s", (int)n, (const char *)g.scratch);
        return;
    }
    default: sim_fail(s, "unexpected message kind %u", s->h.kind); return;
    }
}

static void sim_bytes(sim_t *s, const uint8_t *p, size_t n);

/* The rank's stream from the store ended. */
static void sim_eof(sim_t *s)
{
    {
        if (s->phase == PH_BYE) {
            sim_close(s);
            s->phase = PH_DONE;
            mark(MARK_DONE);
            g.remaining--;
        } else if (s->phase >= PH_HELLO && s->phase <= PH_PROOF) {
            handshake_retry(s);
        } else {
            sim_fail(s, "the store closed the connection (step %d)", s->step);
        }
    }
}

static void on_readable(sim_t *s)
{
    ssize_t k = recv(s->fd, g.scratch + 8192, sizeof(g.scratch) - 8192, 0);
    if (k == 0) {
        sim_eof(s);
        return;
    }
    if (k < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        if (s->phase >= PH_HELLO && s->phase <= PH_PROOF) { /* as a real rank: retry the handshake */
            handshake_retry(s);
            return;
        }
        sim_fail(s, "recv: %s", strerror(errno));
        return;
    }
    g.bytes_in += (uint64_t)k;
    sim_bytes(s, g.scratch + 8192, (size_t)k);
}

static void sim_bytes(sim_t *s, const uint8_t *p, size_t n)
{
    if (g.torch) {
        t_bytes_in(s, p, n);
        return;
    }
    while (n > 0 && s->phase != PH_FAILED) {
        if (!s->in_body) {
            size_t take = STORE_HDR - s->hgot < n ? STORE_HDR - s->hgot : n;
            memcpy(s->hbuf + s->hgot, p, take);
            s->hgot += take;
            p += take;
            n -= take;
            if (s->hgot == STORE_HDR) on_header(s);
            if (s->in_body && s->body_len == 0) on_message(s);
        } else {
            uint64_t left = s->body_len - s->body_got;
            size_t take = left < n ? (size_t)left : n;
            body_bytes(s, p, take);
            s->body_got += take;
            p += take;
            n -= take;
            if (s->body_got == s->body_len) on_message(s);
        }
    }
}

/* ---- --relay: a simulated node's connection ------------------------------------ */

static void link_flush(link_t *l)
{
    while (l->state == LINK_UP && l->out_off < l->out_len) {
        ssize_t k = send(l->fd, l->out + l->out_off, l->out_len - l->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = l};
            epoll_ctl(g.ep, EPOLL_CTL_MOD, l->fd, &ev);
            return;
        }
        if (k < 0) return; /* the read side sees the connection fail */
        l->out_off += (size_t)k;
        g.bytes_out += (uint64_t)k;
    }
    if (l->out_off == l->out_len) {
        l->out_off = l->out_len = 0;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
        if (l->state == LINK_UP) epoll_ctl(g.ep, EPOLL_CTL_MOD, l->fd, &ev);
    }
}

static void link_put(link_t *l, const void *d, size_t n)
{
    if (l->out_off > 0 && l->out_off == l->out_len) l->out_off = l->out_len = 0;
    uint8_t *b = realloc(l->out, l->out_len + n);
    if (!b) abort();
    l->out = b;
    memcpy(b + l->out_len, d, n);
    l->out_len += n;
}

static void route_out(sim_t *s, uint64_t arg, const uint8_t *d, size_t n)
{
    link_t *l = &g.links[s->link];
    uint8_t h[STORE_HDR];
    weft_env_hdr_pack(h, K_ROUTE, (uint32_t)s->route, 0, 0, arg, n);
    link_put(l, h, STORE_HDR);
    if (n) link_put(l, d, n);
    link_flush(l);
}

static void link_connect(link_t *l)
{
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET};
    int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) abort();
    src.sin_addr.s_addr = htonl(0x7f000000u | ((uint32_t)(g.bind_base + (int)(l - g.links) / 2000) & 0xffffffu));
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    dst.sin_port = htons((uint16_t)g.port);
    inet_pton(AF_INET, g.host, &dst.sin_addr);
    l->fd = fd;
    l->state = LINK_CONNECTING;
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.ptr = l};
    epoll_ctl(g.ep, EPOLL_CTL_ADD, fd, &ev);
    if (bind(fd, (struct sockaddr *)&src, sizeof(src)) != 0 ||
        (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) != 0 && errno != EINPROGRESS)) {
        /* the link's waiting ranks retry later (on_link_connected sees the error) */
    }
}

/* Its ranks waiting for it start their handshakes, or retry later. */
static void on_link_connected(link_t *l)
{
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
        epoll_ctl(g.ep, EPOLL_CTL_DEL, l->fd, NULL);
        close(l->fd);
        l->fd = -1;
        l->state = LINK_IDLE;
        for (int i = l->first; i < l->first + l->nsims; i++)
            if (g.sims[i].phase == PH_CONNECTING) {
                g.in_flight--;
                retry_later(&g.sims[i]);
            }
        return;
    }
    l->state = LINK_UP;
    uint8_t h[STORE_HDR];
    weft_env_hdr_pack(h, K_RELAY, (uint32_t)g.sims[l->first].rank, (uint32_t)g.size, 0, 0, 0);
    link_put(l, h, STORE_HDR);
    link_flush(l);
    for (int i = l->first; i < l->first + l->nsims; i++)
        if (g.sims[i].phase == PH_CONNECTING) start_handshake(&g.sims[i]);
}

static void on_link_readable(link_t *l)
{
    ssize_t k = recv(l->fd, g.scratch + 8192, sizeof(g.scratch) - 8192, 0);
    if (k < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (k <= 0) {
        epoll_ctl(g.ep, EPOLL_CTL_DEL, l->fd, NULL);
        close(l->fd);
        l->fd = -1;
        l->state = LINK_IDLE;
        for (int i = l->first; i < l->first + l->nsims; i++)
            if (g.sims[i].phase == PH_BYE) /* as a real rank's goodbye: the close is the answer */
                sim_eof(&g.sims[i]);
            else if (g.sims[i].phase != PH_DONE && g.sims[i].phase != PH_FAILED)
                sim_fail(&g.sims[i], "the store closed its node's connection");
        return;
    }
    g.bytes_in += (uint64_t)k;
    const uint8_t *p = g.scratch + 8192;
    size_t n = (size_t)k;
    while (n > 0) {
        if (l->chunk_left) {
            size_t take = l->chunk_left < n ? (size_t)l->chunk_left : n;
            if (l->chunk_to >= 0 && g.sims[l->chunk_to].phase != PH_FAILED) sim_bytes(&g.sims[l->chunk_to], p, take);
            l->chunk_left -= take;
            p += take;
            n -= take;
            continue;
        }
        size_t take = STORE_HDR - l->hgot < n ? STORE_HDR - l->hgot : n;
        memcpy(l->hbuf + l->hgot, p, take);
        l->hgot += take;
        p += take;
        n -= take;
        if (l->hgot < STORE_HDR) continue;
        l->hgot = 0;
        store_hdr_t h;
        store_judgement_t j;
        weft_env_judge_route(l->hbuf, UINT64_MAX, &h, &j);
        if (j.action != JUDGE_BODY || (int)h.rank >= l->nsims) {
            fprintf(stderr, "weft-scale-sim: bad ROUTE from the store: %s\n", j.why);
            exit(1);
        }
        sim_t *s = &g.sims[l->first + (int)h.rank];
        if (h.arg == ROUTE_CLOSE) {
            if (!s->sent_close) route_out(s, ROUTE_CLOSE, NULL, 0);
            s->sent_close = 0;
            if (s->phase != PH_FAILED && s->phase != PH_DONE) sim_eof(s);
            continue;
        }
        l->chunk_to = l->first + (int)h.rank;
        l->chunk_left = h.len;
    }
}

/* ---- --torch: the same steps through torch's TCPStore -------------------------
 * What a real rank's torchstore bootstrap sends (src/bootstrap/torchstore.c):
 * VALIDATE and PING; a gather round: SET its block, WAIT for rank 0's
 * header, GET it, ADD to the readers' count (the last reader deletes the
 * result); a broadcast: the same without the SET; an allgather of nothing
 * (sync rounds, the closing barrier): as a gather; its address: SET
 * P/0/addr<rank>; fetches: WAIT for up to 16 address keys, MULTI_GET them;
 * at finalize: DELETE its address key. Integers little-endian. */
enum { Q_VALIDATE = 0, Q_SET = 1, Q_GET = 3, Q_ADD = 4, Q_WAIT = 6, Q_DELETE = 8, Q_MULTI_GET = 10, Q_PING = 13 };
enum { R_BYTE, R_U32, R_I64, R_VALUE };

static void t_u8(sim_t *s, uint8_t v)
{
    uint8_t *b = out_room(s, 1);
    if (b) *b = v;
}

static void t_u64(sim_t *s, uint64_t v)
{
    uint8_t *b = out_room(s, 8);
    v = htole64(v);
    if (b) memcpy(b, &v, 8);
}

static void t_bytes(sim_t *s, const void *p, size_t n)
{
    uint8_t *b = n ? out_room(s, n) : NULL;
    if (b) memcpy(b, p, n);
}

/* P/seq/<what><idx> (idx < 0: none), as tb_key writes it. */
static void t_key(sim_t *s, uint64_t seq, const char *what, long idx)
{
    char k[sizeof(g.prefix) + 64];
    int n = idx >= 0 ? snprintf(k, sizeof(k), "%s/%llu/%s%ld", g.prefix, (unsigned long long)seq, what, idx)
                     : snprintf(k, sizeof(k), "%s/%llu/%s", g.prefix, (unsigned long long)seq, what);
    t_u64(s, (uint64_t)n);
    t_bytes(s, k, (size_t)n);
}

static void t_expect(sim_t *s, int kind)
{
    s->expect[s->nexp++] = (uint8_t)kind;
}

static void t_set(sim_t *s, uint64_t seq, const char *what, long idx, const void *v, size_t n)
{
    t_u8(s, Q_SET);
    t_key(s, seq, what, idx);
    t_u64(s, n);
    t_bytes(s, v, n);
}

static void t_simple(sim_t *s, int q, uint64_t seq, const char *what, long idx, int reply)
{
    t_u8(s, (uint8_t)q);
    t_key(s, seq, what, idx);
    if (q == Q_ADD) t_u64(s, 1);
    t_expect(s, reply);
}

/* A round's reading part: WAIT for rank 0's header, GET it, count the read. */
static void t_fetch(sim_t *s)
{
    uint64_t seq = s->seq;
    switch (s->sub++) {
    case 0:
        t_u8(s, Q_WAIT);
        t_u64(s, 1);
        t_key(s, seq, "all", 0);
        t_expect(s, R_BYTE);
        break;
    case 1: t_simple(s, Q_GET, seq, "all", 0, R_VALUE); break;
    case 2:
        if (s->val_len < 16 || s->val[4] | s->val[5] | s->val[6] | s->val[7]) {
            sim_fail(s, "rank 0 published a failed round %llu", (unsigned long long)seq);
            return;
        }
        t_simple(s, Q_ADD, seq, "done", -1, R_I64);
        break;
    case 3:
        if (s->ival == g.size - 1) { /* the last reader cleans up */
            t_simple(s, Q_DELETE, seq, "all", 0, R_I64);
            t_simple(s, Q_DELETE, seq, "done", -1, R_I64);
            break;
        }
        /* fall through */
    default:
        s->seq++;
        s->sub = 0;
        step_done(s);
        return;
    }
    flush_out(s);
}

static void t_lookup(sim_t *s)
{
    long peers[STORE_GET_MAX];
    int k = 0;
    if (s->sub == 1) { /* the WAIT is over: read them */
        s->sub = 0;
        t_u8(s, Q_MULTI_GET);
        t_u64(s, (uint64_t)s->pending);
        for (int i = s->lookups - 1, j = 0; j < s->pending; i--)
            if ((s->rank ^ (1 << i)) < g.size) {
                t_key(s, 0, "addr", s->rank ^ (1 << i));
                t_expect(s, R_VALUE);
                j++;
            }
        g.fetched += (uint64_t)s->pending;
        flush_out(s);
        return;
    }
    for (; s->lookups < g.lookups && s->lookups < 30 && k < STORE_GET_MAX; s->lookups++)
        if ((s->rank ^ (1 << s->lookups)) < g.size) peers[k++] = s->rank ^ (1 << s->lookups);
    if (!k) {
        mark(MARK_LOOKUP);
        step_done(s);
        return;
    }
    s->pending = k;
    s->sub = 1;
    t_u8(s, Q_WAIT);
    t_u64(s, (uint64_t)k);
    for (int i = 0; i < k; i++)
        t_key(s, 0, "addr", peers[i]);
    t_expect(s, R_BYTE);
    flush_out(s);
}

static void t_step(sim_t *s)
{
    uint8_t buf[512];
    if (s->phase == PH_FAILED) return;
    switch (s->step) {
    case ST_GATHER:
        if (s->sub == 0) t_set(s, s->seq, "r", s->rank, buf, node_record(s, buf, sizeof(buf)));
        t_fetch(s);
        break;
    case ST_SYNC_A:
    case ST_SYNC_B:
    case ST_SYNC_C:
    case ST_BARRIER:
        if (s->sub == 0) t_set(s, s->seq, "r", s->rank, NULL, 0);
        t_fetch(s);
        break;
    case ST_BCAST: t_fetch(s); break;
    case ST_ADDR_LEN:
    case ST_ADDR: /* --torch runs worlds above WEFT_ADDRESSES_AT_INIT: the address is published */
        s->step = ST_PUT;
        /* fall through */
    case ST_PUT: {
        uint8_t blob[WEFT_UCX_ADDR_MAX + 64];
        size_t sealed = sealed_address(s, blob);
        t_set(s, 0, "addr", s->rank, blob, sealed);
        flush_out(s);
        mark(MARK_INIT);
        step_done(s);
        break;
    }
    case ST_LOOKUP: t_lookup(s); break;
    case ST_BYE:
        if (s->sub++ == 0) {
            t_simple(s, Q_DELETE, 0, "addr", s->rank, R_I64);
            flush_out(s);
            break;
        }
        sim_close(s);
        s->phase = PH_DONE;
        mark(MARK_DONE);
        g.remaining--;
        break;
    }
}

/* Connected: VALIDATE, and a PING whose echo says a TCPStore listens. */
static void t_start(sim_t *s)
{
    uint32_t magic = htole32(0x3C85F7CEu), nonce = htole32((uint32_t)s->rank);
    s->phase = PH_PROOF; /* a handshake under way, as far as the window goes */
    t_u8(s, Q_VALIDATE);
    t_bytes(s, &magic, 4);
    t_u8(s, Q_PING);
    t_bytes(s, &nonce, 4);
    t_expect(s, R_U32);
    flush_out(s);
}

/* A reply is complete: when the last one asked for is in, the next move. */
static void t_reply(sim_t *s)
{
    s->rph = 0;
    s->rgot = 0;
    if (++s->head < s->nexp) return;
    s->head = s->nexp = 0;
    if (s->phase == PH_PROOF) { /* the ping's echo */
        s->phase = PH_MEMBER;
        g.in_flight--;
        mark(MARK_WELCOME);
        s->step = ST_GATHER;
        s->sub = 0;
    }
    t_step(s);
}

static void t_bytes_in(sim_t *s, const uint8_t *p, size_t n)
{
    while (n > 0 && s->phase != PH_FAILED) {
        if (s->head >= s->nexp) {
            sim_fail(s, "torch's store sent %zu bytes nobody asked for", n);
            return;
        }
        int kind = s->expect[s->head];
        if (s->rph == 0) {
            size_t need = kind == R_BYTE ? 1 : kind == R_U32 ? 4 : 8;
            size_t take = need - s->rgot < n ? need - s->rgot : n;
            memcpy(s->rb + s->rgot, p, take);
            s->rgot += take, p += take, n -= take;
            if (s->rgot < need) continue;
            uint64_t v = 0;
            memcpy(&v, s->rb, need);
            v = le64toh(v);
            if (kind != R_VALUE) {
                s->ival = (int64_t)v;
                t_reply(s);
                continue;
            }
            s->val_len = v;
            s->rph = 1;
            s->rgot = 0;
            if (v == 0) t_reply(s);
        } else {
            uint64_t left = s->val_len - s->rgot;
            size_t take = left < n ? (size_t)left : n;
            if (s->rgot < sizeof(s->val))
                memcpy(s->val + s->rgot, p, s->rgot + take > sizeof(s->val) ? sizeof(s->val) - s->rgot : take);
            s->rgot += take, p += take, n -= take;
            if (s->rgot == s->val_len) t_reply(s);
        }
    }
}

static int arg_int(const char *v, const char *name)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > 1 << 24) {
        fprintf(stderr, "weft-scale-sim: %s '%s' is not a count\n", name, v);
        exit(2);
    }
    return (int)x;
}

int main(int argc, char **argv)
{
    g.ppn = 8;
    g.window = 1024;
    g.addr_len = 215;
    g.bind_base = 2;
    g.lookups = -1;
    const struct {
        const char *name;
        int *value;
    } opts[] = {{"--size", &g.size},         {"--first", &g.first},         {"--count", &g.count},
                {"--ppn", &g.ppn},           {"--real", &g.real},           {"--window", &g.window},
                {"--addr-len", &g.addr_len}, {"--bind-base", &g.bind_base}, {"--lookups", &g.lookups},
                {"--torch", &g.torch},       {"--relay", &g.relay}};
    for (int i = 1; i + 1 < argc; i += 2) {
        size_t k = 0;
        while (k < sizeof(opts) / sizeof(opts[0]) && strcmp(argv[i], opts[k].name))
            k++;
        if (k == sizeof(opts) / sizeof(opts[0])) {
            fprintf(stderr, "weft-scale-sim: unknown option %s\n", argv[i]);
            return 2;
        }
        *opts[k].value = arg_int(argv[i + 1], argv[i]);
    }
    const char *port = getenv("MASTER_PORT"), *t0 = getenv("SCALE_T0");
    g.host = getenv("MASTER_ADDR");
    if (!g.size || !g.count || g.first + g.count > g.size || !g.host || !port || g.ppn < 1 ||
        g.addr_len < WEFT_UCX_ADDR_MIN) {
        fprintf(stderr, "usage: weft-scale-sim --size N --first A --count K [--ppn P] [--real R] [--window W] "
                        "[--addr-len B]; MASTER_ADDR, MASTER_PORT set\n");
        return 2;
    }
    g.port = atoi(port);
    if (g.lookups < 0) /* log2 N: a recursive-doubling exchange's peers */
        for (g.lookups = 0; (1 << g.lookups) < g.size; g.lookups++) {
        }
    g.t0 = t0 ? atof(t0) : now_real();
    (void)weft_var_count(); /* registers every component's variables, as weft_init does: the agreed hash covers them */
    if (weft_config_load() != WEFT_SUCCESS || weft_job_key_load(&g.key, "weft-scale-sim") != WEFT_SUCCESS) {
        fprintf(stderr, "weft-scale-sim: %s\n", weft_last_error());
        return 1;
    }
    g.eager = g.size <= weft_cfg.addresses_at_init && !g.torch;
    const char *run = getenv("TORCHELASTIC_RUN_ID"), *restart = getenv("TORCHELASTIC_RESTART_COUNT");
    snprintf(g.prefix, sizeof(g.prefix), "/weft/%s/%s/0", run && *run ? run : "none",
             restart && *restart ? restart : "0");
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    g.sims = calloc((size_t)g.count, sizeof(*g.sims));
    g.ep = epoll_create1(EPOLL_CLOEXEC);
    if (!g.sims || g.ep < 0) return 1;
    for (int i = 0; i < g.count; i++) {
        g.sims[i].fd = -1;
        g.sims[i].rank = g.first + i;
    }
    g.remaining = g.count;
    if (g.relay) { /* a link per simulated node (node 0, the real ranks', has its own relay) */
        g.links = calloc((size_t)g.count, sizeof(*g.links));
        if (!g.links) return 1;
        for (int i = 0; i < g.count; i++) {
            int64_t node = node_of_rank(g.sims[i].rank);
            if (!i || node != node_of_rank(g.sims[i - 1].rank)) {
                g.links[g.nlinks].fd = -1;
                g.links[g.nlinks].chunk_to = -1;
                g.links[g.nlinks++].first = i;
            }
            link_t *l = &g.links[g.nlinks - 1];
            g.sims[i].link = g.nlinks - 1;
            g.sims[i].route = l->nsims++;
        }
    }
    struct epoll_event evs[256];
    while (g.remaining > 0) {
        double now = now_real();
        while (g.retry_head && g.retry_head->retry_at <= now && (!g.window || g.in_flight < g.window)) {
            sim_t *s = g.retry_head;
            g.retry_head = s->next_retry;
            if (!g.retry_head) g.retry_tail = NULL;
            start_connect(s);
        }
        while (g.next_start < g.count && (!g.window || g.in_flight < g.window))
            start_connect(&g.sims[g.next_start++]);
        int timeout = g.retry_head ? 10 : 1000;
        int n = epoll_wait(g.ep, evs, 256, timeout);
        for (int i = 0; i < n; i++) {
            if (g.relay) {
                link_t *l = evs[i].data.ptr;
                if (l->fd < 0) continue;
                if (l->state == LINK_CONNECTING) {
                    on_link_connected(l);
                    continue;
                }
                if (evs[i].events & EPOLLOUT) link_flush(l);
                if (l->fd >= 0 && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) on_link_readable(l);
                continue;
            }
            sim_t *s = evs[i].data.ptr;
            if (s->fd < 0) continue;
            if (s->phase == PH_CONNECTING) {
                on_connected(s);
                continue;
            }
            if (evs[i].events & EPOLLOUT) {
                flush_out(s);
                if (s->phase != PH_FAILED && !s->out) want_out(s, 0);
            }
            if (s->fd >= 0 && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) on_readable(s);
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"sims\": %d, \"first\": %d, \"failed\": %d, \"connects\": %llu, \"refused\": %llu, "
           "\"fetched\": %llu, \"bytes_in\": %llu, \"bytes_out\": %llu, \"maxrss_kb\": %ld, \"cpu_s\": %.3f",
           g.count, g.first, g.failed, (unsigned long long)g.connects, (unsigned long long)g.refused,
           (unsigned long long)g.fetched, (unsigned long long)g.bytes_in, (unsigned long long)g.bytes_out, ru.ru_maxrss,
           (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
               ru.ru_stime.tv_usec * 1e-6);
    for (int m = 0; m < NMARKS; m++)
        printf(", \"t_%s\": %.4f", mark_name[m], g.marked[m] == g.count ? g.mark[m] : -1.0);
    printf("}\n");
    return g.failed ? 1 : 0;
}
