/* Rank 0's store for the env bootstrap: a thread that accepts connections
 * on MASTER_ADDR:MASTER_PORT (only there: see server_listen), makes each
 * prove it belongs to the job (the handshake in env_wire.h), runs the
 * rounds (arrivals, deadlines, failures that name the missing ranks),
 * keeps the blobs ranks publish and answers fetches of them, tells the
 * ranks about lost peers and closes when every rank said goodbye. What it
 * refuses is logged at a bounded rate. It holds a connection per rank, or
 * one per node where ranks come through their node's relay (env_relay.c):
 * a relay's connection carries routes, each a rank's stream that the store
 * treats as a connection of its own. An epoll loop whose work per wake-up
 * follows the connections that are ready, not the number open (a sweep of
 * the handshake deadlines runs a few times a second). */
#include "bootstrap/env.h"
#include "bootstrap/sock.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define STORE_EXTRA_CONNS     256
#define STORE_OWN_FDS         16 /* rank 0's descriptors beside the ranks' connections, at the least */
#define STORE_HELLO_TIMEOUT   10.0              /* a connection must finish the handshake this soon */
#define STORE_CLOSING_TIMEOUT 5.0               /* time to flush a refusal before closing */
#define STORE_READ_BUDGET     ((size_t)4 << 20) /* per connection per poll pass: fairness */
#define STORE_MAX_LISTEN      4                 /* addresses of MASTER_ADDR (and of the pod's name) served */
#define STORE_SWEEP_PERIOD    0.25              /* how often handshake and closing deadlines are looked at */
#define RELAY_STRANGER_ROUTES 16                /* routes a relay may open before one becomes a member, beyond 2 per local rank */
#define RELAY_STRANGER_OUT    ((size_t)1 << 20) /* bytes queued to a relay without a member that it does not read */
/* Rejections are logged at a bounded rate: a flood of bad connections must
 * not flood rank 0's stderr. A burst, then one line a second that also
 * says how many were not logged. */
#define REJECT_LOG_BURST  5
#define REJECT_LOG_PERIOD 1.0

/* A reference-counted message; one RESULT is shared by every rank's queue. */
typedef struct blob {
    size_t refs;
    size_t len;
    uint8_t data[];
} blob_t;

typedef struct outmsg {
    struct outmsg *next;
    blob_t *blob;
    size_t off;
} outmsg_t;

typedef struct round round_t;
typedef struct server server_t;

enum { RX_HDR, RX_SMALL, RX_BODY, RX_DISCARD };

typedef struct conn {
    server_t *srv;
    int idx; /* in srv->conns */
    int fd;
    unsigned events; /* what epoll watches for it */
    int dirty;       /* on srv->dirty: output queued, or its events may change */
    struct conn *next_dead, *next_dirty;
    int phase;   /* PHASE_HELLO, PHASE_PROOF, then PHASE_MEMBER once WELCOMEd */
    int rank;    /* -1 until its proof and its claim are accepted */
    int dead;    /* closed by server_reap */
    int route_closed; /* a route its relay closed (it sent ROUTE_CLOSE): its number is free once ours is sent */
    int closing; /* a refusal is queued: flush it, then close */
    int notices; /* its HELLO asked for LOST notices */
    double opened;
    double closing_since;
    char peer[64];
    char why[192]; /* why a rank's connection died, for the other ranks */
    int rx;        /* what the bytes read next are */
    uint8_t hbuf[STORE_HDR];
    size_t hgot;
    store_hdr_t hdr;
    store_hdr_t hello;              /* the HELLO its PROOF must match */
    uint8_t nc[STORE_NONCE];        /* the client's nonce */
    uint8_t ns[STORE_NONCE];        /* ours */
    uint8_t small[STORE_SMALL_MAX]; /* RX_SMALL: a handshake payload */
    uint8_t *dst;                   /* RX_BODY: where the payload goes (inside a round's blob, or a PUT's) */
    size_t want, got;
    round_t *round; /* RX_BODY: the round that payload belongs to */
    blob_t *put;    /* RX_BODY: the VALUE message a PUT's payload completes */
    outmsg_t *out_head, *out_tail;
    /* A route (fd -1): a rank's stream on a node relay's connection. */
    struct conn *via; /* the relay connection (NULL once it closed) */
    uint32_t route;   /* its number there */
    /* A node relay's connection (is_relay): its routes, and the chunk being read. */
    int is_relay;
    int members;          /* routes that became members, ever */
    int opened_routes;    /* routes it opened, ever: a relay without a member may open few */
    size_t out_bytes;     /* queued to send */
    int notice_cut;       /* server_notify_close: a short send; nothing more goes on it */
    struct conn **routes; /* [nroutes]: grown as the relay numbers its routes (< STORE_RELAY_ROUTES) */
    uint32_t nroutes;
    struct conn *chunk_to;
    size_t chunk_left;
} conn_t;

enum { ARR_NONE = 0, ARR_ARRIVING = 1, ARR_DONE = 2 };

struct round {
    round_t *next;
    uint64_t seq;
    unsigned kind; /* K_CONTRIB, K_GATHER or K_BCAST: every rank's must agree */
    int kind_rank; /* the rank that set it */
    size_t len;    /* every rank's contribution length (BCAST: rank 0's, once it came) */
    int len_rank;  /* the rank that set it */
    double start;
    double deadline; /* earliest client deadline seen; 0 = none */
    int done;
    uint8_t *arrival; /* per rank: ARR_* */
    blob_t *blob;     /* header + size * len (BCAST: + len): becomes the RESULT as is */
};

/* A GET waiting for a rank's PUT. */
typedef struct waiter {
    struct waiter *next;
    conn_t *c;
    int rank; /* whose blob */
    double deadline;
} waiter_t;

/* A failed round is remembered so that late ranks get the same verdict. */
typedef struct failed {
    struct failed *next;
    uint64_t seq;
    blob_t *err;
} failed_t;

enum { RANK_NONE = 0, RANK_LIVE, RANK_BYE, RANK_LOST };

/* The rate limit of rejection lines (a token bucket). */
typedef struct reject_log {
    double tokens, refilled;
    unsigned long long suppressed; /* rejections not logged since the last line */
    double suppressed_since;
    int suppressed_level; /* the most severe among them */
    char last[320];       /* the last of them */
} reject_log_t;

struct server {
    int listen_fd[STORE_MAX_LISTEN];
    int nlisten;
    int wake_rd, wake_wr;
    int ep;               /* epoll: the wake pipe, the listening sockets, the connections */
    conn_t *dead, *dirty; /* connections to close; connections to write to */
    int listen_paused;    /* the listening sockets are out of the epoll set (descriptors ran out) */
    double next_sweep;
    int size;
    char where[300];
    conn_t **conns; /* descriptors and routes */
    int nconns, max_conns;
    int nfds; /* of them, connections with a descriptor */
    int relay; /* the ranks are expected through node relays (the open-file limit is judged per node) */
    int relay_routes; /* routes a relay may open before one becomes a member (its node's ranks, twice, and some) */
    conn_t **by_rank;
    uint8_t *rank_state;
    uint64_t *next_seq;
    int nbye, nlost;
    int gone_rank; /* first rank that left (bye or lost), -1 when none */
    char gone_why[192];
    round_t *rounds;
    failed_t *failed;
    blob_t **value; /* per rank: its PUT as the VALUE message that answers a GET */
    waiter_t *waiters;
    double accept_pause_until;
    int warned_fd_limit;
    long long fd_limit_short; /* > 0: the open-file limit, too low for a connection per rank */
    weft_job_key_t key;
    reject_log_t rejects;
    struct sockaddr_storage self; /* where this process's own client connects */
    socklen_t self_len;
    weft_store_stats_t stats; /* written by the store's thread, read by others (relaxed atomics) */
    pthread_mutex_t lock;
    int stop;       /* leave now (non-graceful) */
    int finalizing; /* leave once every rank said goodbye, or at fin_deadline */
    double fin_deadline;
    uint8_t scratch[1 << 16];
    uint8_t rbuf[1 << 16]; /* what relay_read takes in at once (every byte is handed on before the next read) */
};

static int fds_needed(const server_t *s);
static void become_relay(server_t *s, conn_t *c);
static int evict_oldest_stranger(server_t *s, const char *newcomer);

/* Counters other threads read while the store runs (weft_env_server_stats). */
static void stat_add(uint64_t *counter, uint64_t n)
{
    __atomic_fetch_add(counter, n, __ATOMIC_RELAXED);
}

static blob_t *blob_new(size_t len)
{
    if (len > SIZE_MAX - sizeof(blob_t)) return NULL;
    blob_t *b = malloc(sizeof(*b) + len);
    if (b) {
        b->refs = 1;
        b->len = len;
    }
    return b;
}

static void blob_put(blob_t *b)
{
    if (b && --b->refs == 0) free(b);
}

static blob_t *blob_error(uint64_t seq, int status, const char *text)
{
    size_t n = strnlen(text, STORE_MAX_TEXT);
    blob_t *b = blob_new(STORE_HDR + n);
    if (!b) return NULL;
    weft_env_hdr_pack(b->data, K_ERROR, 0, 0, seq, (uint64_t)(int64_t)status, n);
    memcpy(b->data + STORE_HDR, text, n);
    return b;
}

static void conn_kill(conn_t *c, const char *fmt, ...) WEFT_PRINTF(2, 3);
static void conn_kill(conn_t *c, const char *fmt, ...)
{
    va_list ap;
    if (c->dead) return;
    c->dead = 1;
    c->next_dead = c->srv->dead;
    c->srv->dead = c;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof(c->why), fmt, ap);
    va_end(ap);
}

/* Its output goes out (or its events change) at the end of this pass. */
static void conn_dirty(conn_t *c)
{
    if (c->dirty || c->dead) return;
    c->dirty = 1;
    c->next_dirty = c->srv->dirty;
    c->srv->dirty = c;
}

static blob_t *route_msg(uint32_t route, uint64_t arg, size_t len)
{
    blob_t *h = blob_new(STORE_HDR);
    if (h) weft_env_hdr_pack(h->data, K_ROUTE, route, 0, 0, arg, len);
    return h;
}

static void conn_queue(conn_t *c, blob_t *b)
{
    if (c->dead || !b) return;
    if (c->fd < 0) { /* a route: the relay's connection carries it, after a ROUTE header */
        blob_t *h = c->via ? route_msg(c->route, ROUTE_DATA, b->len) : NULL;
        if (!h) {
            conn_kill(c, "was dropped: %s", c->via ? "the store ran out of memory" : "its node relay closed");
            return;
        }
        conn_queue(c->via, h);
        blob_put(h);
        conn_queue(c->via, b);
        return;
    }
    outmsg_t *m = malloc(sizeof(*m));
    if (!m) {
        conn_kill(c, "was dropped: the store ran out of memory");
        return;
    }
    b->refs++;
    m->next = NULL;
    m->blob = b;
    m->off = 0;
    c->out_bytes += b->len;
    if (c->out_tail)
        c->out_tail->next = m;
    else
        c->out_head = m;
    c->out_tail = m;
    conn_dirty(c);
}

static void conn_queue_error(conn_t *c, uint64_t seq, int status, const char *text)
{
    blob_t *b = blob_error(seq, status, text);
    if (!b) {
        conn_kill(c, "was dropped: the store ran out of memory");
        return;
    }
    conn_queue(c, b);
    blob_put(b);
}

static void reject_refill(reject_log_t *rl, double now)
{
    rl->tokens += (now - rl->refilled) / REJECT_LOG_PERIOD;
    if (rl->tokens > REJECT_LOG_BURST) rl->tokens = REJECT_LOG_BURST;
    rl->refilled = now;
}

/* Logs a rejected connection at `level`, or counts it when the rate limit
 * is reached; the next line that gets out says how many were not shown. */
static void reject(server_t *s, int level, const char *fmt, ...) WEFT_PRINTF(3, 4);
static void reject(server_t *s, int level, const char *fmt, ...)
{
    reject_log_t *rl = &s->rejects;
    double now = weft_wtime();
    char line[320];
    va_list ap;

    if (level > weft_log_level) return; /* not shown anyway: nothing to limit */
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    reject_refill(rl, now);
    if (rl->tokens < 1.0) {
        if (!rl->suppressed++) {
            rl->suppressed_since = now;
            rl->suppressed_level = level;
        }
        if (level < rl->suppressed_level) rl->suppressed_level = level;
        memcpy(rl->last, line, sizeof(line));
        return;
    }
    rl->tokens -= 1.0;
    if (rl->suppressed) {
        weft_log(level, "env store at %s: %s (and %llu more rejected connections not shown in the last %.1f s)",
                 s->where, line, rl->suppressed, now - rl->suppressed_since);
        rl->suppressed = 0;
    } else {
        weft_log(level, "env store at %s: %s", s->where, line);
    }
}

/* Once the flood stops, the count of what was not shown still gets out. */
static void reject_flush(server_t *s, double now, int force)
{
    reject_log_t *rl = &s->rejects;
    if (!rl->suppressed) return;
    reject_refill(rl, now);
    if (rl->tokens < 1.0 && !force) return;
    rl->tokens -= 1.0;
    weft_log(rl->suppressed_level,
             "env store at %s: %llu more rejected connections not shown in the last %.1f s (the last: %s)", s->where,
             rl->suppressed, now - rl->suppressed_since, rl->last);
    rl->suppressed = 0;
}

/* Refuses a connection that is not (yet) a rank: tell it why, then close. */
static void conn_refuse(server_t *s, conn_t *c, int status, const char *text)
{
    /* WEFT_ERR_ALREADY is expected while a re-init races our shutdown. */
    reject(s, status == WEFT_ERR_ALREADY ? WEFT_LOG_DEBUG : WEFT_LOG_WARN, "refused the connection from %s: %s",
           c->peer, text);
    conn_queue_error(c, 0, status, text);
    if (c->fd < 0) { /* a route: its relay closes it after writing the refusal (conn_finish) */
        conn_kill(c, "refused");
        return;
    }
    c->closing = 1;
    c->closing_since = weft_wtime();
    conn_dirty(c);
}

static round_t *round_find(server_t *s, uint64_t seq)
{
    for (round_t *r = s->rounds; r; r = r->next)
        if (r->seq == seq) return r;
    return NULL;
}

static failed_t *failed_find(server_t *s, uint64_t seq)
{
    for (failed_t *f = s->failed; f; f = f->next)
        if (f->seq == seq) return f;
    return NULL;
}

static void round_unlink_free(server_t *s, round_t *r)
{
    for (round_t **p = &s->rounds; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    blob_put(r->blob);
    free(r->arrival);
    free(r);
}

/* Fails round r for every rank: those that contributed get the ERROR now,
 * those still sending get it when their payload is in, later ones on
 * arrival (through the failed list). */
static void round_fail(server_t *s, round_t *r, int status, const char *text)
{
    failed_t *f = calloc(1, sizeof(*f));
    blob_t *err = blob_error(r->seq, status, text);

    weft_debug("env store at %s: allgather round %llu failed: %s", s->where, (unsigned long long)r->seq, text);
    for (int i = 0; i < s->nconns; i++) {
        conn_t *c = s->conns[i];
        if (c->round == r) { /* its payload has nowhere to go now */
            c->round = NULL;
            c->dst = NULL;
            c->rx = RX_DISCARD;
        }
    }
    for (int rk = 0; rk < s->size; rk++) {
        if (r->arrival[rk] != ARR_DONE || !s->by_rank[rk]) continue;
        if (err)
            conn_queue(s->by_rank[rk], err);
        else
            conn_kill(s->by_rank[rk], "was dropped: the store ran out of memory");
    }
    if (f && err) {
        f->seq = r->seq;
        f->err = err;
        f->next = s->failed;
        s->failed = f;
    } else {
        free(f);
        blob_put(err);
    }
    round_unlink_free(s, r);
}

static const char *kind_name(unsigned kind)
{
    return kind == K_GATHER ? "gather" : kind == K_BCAST ? "broadcast" : "allgather";
}

/* Every rank contributed: an allgather's result goes to every rank; a
 * gather's to rank 0 and a broadcast's to every other rank, the rest get
 * an empty RESULT (they only learn the round is complete). */
static void round_complete(server_t *s, round_t *r)
{
    uint64_t total = r->kind == K_BCAST ? (uint64_t)r->len : (uint64_t)r->len * (uint64_t)s->size;
    blob_t *empty = NULL;
    weft_env_hdr_pack(r->blob->data, K_RESULT, 0, (uint32_t)s->size, r->seq, 0, total);
    if (r->kind != K_CONTRIB && (empty = blob_new(STORE_HDR)) != NULL)
        weft_env_hdr_pack(empty->data, K_RESULT, 0, (uint32_t)s->size, r->seq, 0, 0);
    for (int rk = 0; rk < s->size; rk++) {
        conn_t *c = s->by_rank[rk];
        if (!c) continue;
        int full = r->kind == K_CONTRIB || (r->kind == K_GATHER) == (rk == 0);
        if (full)
            conn_queue(c, r->blob);
        else if (empty)
            conn_queue(c, empty);
        else
            conn_kill(c, "was dropped: the store ran out of memory");
    }
    blob_put(empty);
    weft_debug("env store at %s: %s round %llu complete (%d x %zu bytes)", s->where, kind_name(r->kind),
               (unsigned long long)r->seq, s->size, r->len);
    round_unlink_free(s, r);
}

enum { MISS_NEVER, MISS_BEHIND, MISS_SENDING };

/* Why rank rk is not (fully) in round r, as one of MISS_*, or -1. */
static int missing_as(const server_t *s, const round_t *r, int rk)
{
    if (r->arrival[rk] == ARR_ARRIVING) return MISS_SENDING;
    if (r->arrival[rk] == ARR_DONE) return -1;
    return s->rank_state[rk] == RANK_NONE ? MISS_NEVER : MISS_BEHIND;
}

/* Appends "[ and ]rank 3 never arrived" for the ranks missing as `why`. */
static void missing_clause(const server_t *s, const round_t *r, int *list, int why, const char *one, const char *many,
                           char *text, size_t cap)
{
    char ranks[384];
    size_t used = strlen(text);
    int n = 0;

    for (int rk = 0; rk < s->size; rk++)
        if (missing_as(s, r, rk) == why) list[n++] = rk;
    if (n == 0 || used >= cap) return;
    weft_format_ranks(ranks, sizeof(ranks), list, n);
    weft_env_textf(text + used, cap - used, "%s%s%s", used ? " and " : "", ranks, n == 1 ? one : many);
}

static void round_timeout(server_t *s, round_t *r, double now)
{
    int *list = malloc(sizeof(int) * (size_t)s->size);
    char text[1024] = "";
    size_t used;

    if (list) {
        missing_clause(s, r, list, MISS_NEVER, " never arrived", " never arrived", text, sizeof(text));
        missing_clause(s, r, list, MISS_BEHIND, " is connected but did not reach this round",
                       " are connected but did not reach this round", text, sizeof(text));
        /* A big payload still in flight at the deadline. */
        missing_clause(s, r, list, MISS_SENDING, " was still sending its data", " were still sending their data", text,
                       sizeof(text));
        free(list);
    }
    used = strlen(text);
    weft_env_textf(text + used, sizeof(text) - used,
                   "%s(%d of %d missing) at the store %s (%s round %llu, waited %.1f s)",
                   used ? " " : "bootstrap round timed out ", s->size - r->done, s->size, s->where, kind_name(r->kind),
                   (unsigned long long)r->seq, now - r->start);
    weft_warn("env store: %s", text);
    round_fail(s, r, WEFT_ERR_TIMEOUT, text);
}

/* A rank left (disconnected or said goodbye): no pending round can finish. */
static void fail_rounds_gone(server_t *s, int rank, const char *why)
{
    while (s->rounds) {
        round_t *r = s->rounds;
        char text[512];
        weft_env_textf(text, sizeof(text),
                       "rank %d %s during %s round %llu (%d of %d ranks had contributed) at the store %s", rank, why,
                       kind_name(r->kind), (unsigned long long)r->seq, r->done, s->size, s->where);
        round_fail(s, r, WEFT_ERR_PEER_LOST, text);
    }
}

/* Tells every other live rank that asked for it that `rank` is lost, ahead
 * of the round failures this causes. Best effort: out of memory, the rounds
 * still fail. */
static void notify_lost(server_t *s, int rank, const char *why)
{
    char text[512];
    weft_env_textf(text, sizeof(text), "%s at the store %s", why, s->where);
    size_t n = strnlen(text, STORE_MAX_TEXT);
    blob_t *b = blob_new(STORE_HDR + n);
    if (!b) return;
    weft_env_hdr_pack(b->data, K_LOST, (uint32_t)rank, (uint32_t)s->size, 0, (uint64_t)(int64_t)WEFT_ERR_PEER_LOST, n);
    memcpy(b->data + STORE_HDR, text, n);
    for (int rk = 0; rk < s->size; rk++) {
        conn_t *c = s->by_rank[rk];
        if (c && rk != rank && c->notices && s->rank_state[rk] == RANK_LIVE) conn_queue(c, b);
    }
    blob_put(b);
}

/* ---- the blobs ranks publish (PUT) and fetch (GET) --------------------------- */

/* A VALUE that fails a GET for `rank`'s blob. */
static void value_error(conn_t *c, int size, int rank, int status, const char *text)
{
    size_t n = strnlen(text, STORE_MAX_TEXT);
    blob_t *b = blob_new(STORE_HDR + n);
    if (!b) {
        conn_kill(c, "was dropped: the store ran out of memory");
        return;
    }
    weft_env_hdr_pack(b->data, K_VALUE, (uint32_t)rank, (uint32_t)size, 0, (uint64_t)(int64_t)status, n);
    memcpy(b->data + STORE_HDR, text, n);
    conn_queue(c, b);
    blob_put(b);
}

/* Answers the GETs waiting for `rank`'s blob: with it, or (status != 0)
 * with why there will be none. */
static void waiters_answer(server_t *s, int rank, int status, const char *text)
{
    for (waiter_t **p = &s->waiters; *p;) {
        waiter_t *w = *p;
        if (w->rank != rank) {
            p = &w->next;
            continue;
        }
        if (status == WEFT_SUCCESS)
            conn_queue(w->c, s->value[rank]);
        else
            value_error(w->c, s->size, rank, status, text);
        *p = w->next;
        free(w);
    }
}

/* A PUT's header: its payload becomes the VALUE that answers GETs. */
static void on_put(server_t *s, conn_t *c)
{
    blob_t *b;
    if (s->value[c->rank]) {
        conn_kill(c, "published its blob twice");
        return;
    }
    if (!(b = blob_new(STORE_HDR + (size_t)c->hdr.len))) {
        conn_kill(c, "was dropped: the store ran out of memory for its blob");
        return;
    }
    weft_env_hdr_pack(b->data, K_VALUE, (uint32_t)c->rank, (uint32_t)s->size, 0, 0, c->hdr.len);
    c->put = b;
    c->dst = b->data + STORE_HDR;
    c->want = (size_t)c->hdr.len;
    c->got = 0;
    c->rx = RX_BODY;
}

/* A GET's payload (the ranks wanted) is in: each is answered now, or
 * when its rank publishes, leaves or the deadline passes. */
static void on_get(server_t *s, conn_t *c, double now)
{
    char text[256];
    c->rx = RX_HDR;
    c->hgot = 0;
    for (size_t i = 0; i + 4 <= c->hdr.len && !c->dead; i += 4) {
        uint32_t be, want;
        memcpy(&be, c->small + i, sizeof(be));
        want = be32toh(be);
        if (want >= (uint32_t)s->size) {
            weft_env_textf(text, sizeof(text), "no rank %u in a world of %d", want, s->size);
            value_error(c, s->size, (int)want, WEFT_ERR_ARG, text);
        } else if (s->value[want]) {
            conn_queue(c, s->value[want]);
        } else if (s->rank_state[want] == RANK_LOST || s->rank_state[want] == RANK_BYE) {
            weft_env_textf(text, sizeof(text), "rank %u left before it published its address (at the store %s)",
                           want, s->where);
            value_error(c, s->size, (int)want, WEFT_ERR_PEER_LOST, text);
        } else {
            waiter_t *w = calloc(1, sizeof(*w));
            if (!w) {
                conn_kill(c, "was dropped: the store ran out of memory");
                return;
            }
            w->c = c;
            w->rank = (int)want;
            w->deadline = c->hdr.arg ? now + (double)c->hdr.arg * 1e-3 : 0;
            w->next = s->waiters;
            s->waiters = w;
        }
    }
}

/* GETs whose deadline passed (returns the next deadline, or `next`). */
static double waiters_expire(server_t *s, double now, double next)
{
    for (waiter_t **p = &s->waiters; *p;) {
        waiter_t *w = *p;
        if (w->deadline <= 0 || now < w->deadline) {
            if (w->deadline > 0 && w->deadline < next) next = w->deadline;
            p = &w->next;
            continue;
        }
        char text[320];
        weft_env_textf(text, sizeof(text), "rank %d %s by the deadline (at the store %s)", w->rank,
                       s->rank_state[w->rank] == RANK_NONE ? "never arrived" : "did not publish its address", s->where);
        value_error(w->c, s->size, w->rank, WEFT_ERR_TIMEOUT, text);
        *p = w->next;
        free(w);
    }
    return next;
}

static void waiters_drop_conn(server_t *s, conn_t *c)
{
    for (waiter_t **p = &s->waiters; *p;) {
        waiter_t *w = *p;
        if (w->c == c) {
            *p = w->next;
            free(w);
        } else {
            p = &w->next;
        }
    }
}

static void rank_gone(server_t *s, int rank, int state, const char *why)
{
    s->rank_state[rank] = (uint8_t)state;
    if (state == RANK_BYE)
        s->nbye++;
    else
        s->nlost++;
    if (s->gone_rank < 0) {
        s->gone_rank = rank;
        weft_env_textf(s->gone_why, sizeof(s->gone_why), "%s", why);
    }
    if (state == RANK_LOST) notify_lost(s, rank, why);
    fail_rounds_gone(s, rank, why);
    if (!s->value[rank]) {
        char text[320];
        weft_env_textf(text, sizeof(text), "rank %d %s before it published its address (at the store %s)", rank, why,
                       s->where);
        waiters_answer(s, rank, WEFT_ERR_PEER_LOST, text);
    }
}

/* A HELLO's nonce is in: answer with ours and our proof. */
static void on_hello(server_t *s, conn_t *c)
{
    uint8_t *p;
    int err;
    blob_t *b;

    c->hello = c->hdr;
    memcpy(c->nc, c->small, STORE_NONCE);
    if ((err = weft_random_bytes(c->ns, STORE_NONCE)) != 0) {
        reject(s, WEFT_LOG_WARN, "dropped the connection from %s: no random nonce for its challenge: %s", c->peer,
               strerror(err));
        conn_kill(c, "no nonce");
        return;
    }
    if (!(b = blob_new(STORE_HDR + STORE_CHALLENGE))) {
        conn_kill(c, "was dropped: the store ran out of memory");
        return;
    }
    p = b->data + STORE_HDR;
    weft_env_hdr_pack(b->data, K_CHALLENGE, c->hello.rank, (uint32_t)s->size, 0, s->key.keyed ? FLAG_KEYED : 0,
                      STORE_CHALLENGE);
    memcpy(p, c->ns, STORE_NONCE);
    weft_env_proof(s->key.key, PROOF_BY_STORE, c->nc, c->ns, c->hello.rank, c->hello.size, p + STORE_NONCE);
    conn_queue(c, b);
    blob_put(b);
    c->phase = PHASE_PROOF;
}

/* The proof is right: the connection may take the rank it claims. */
static void on_claim(server_t *s, conn_t *c)
{
    const store_hdr_t *h = &c->hello;
    char text[384];

    if (h->size != (uint32_t)s->size) {
        weft_env_textf(text, sizeof(text), "rank %u says WORLD_SIZE=%u but the store at %s serves WORLD_SIZE=%d",
                       h->rank, h->size, s->where, s->size);
        conn_refuse(s, c, WEFT_ERR_ARG, text);
    } else if (s->fd_limit_short) {
        weft_env_textf(text, sizeof(text),
                       "the store at %s (rank 0) holds a connection per %s, but its open-file limit is %lld, below "
                       "the %d it needs: raise the hard limit on rank 0's host (ulimit -Hn, systemd's "
                       "LimitNOFILE, /etc/security/limits.conf)%s",
                       s->where, s->relay ? "node" : "rank", s->fd_limit_short, fds_needed(s),
                       s->relay ? "" : ", or let ranks come through node relays (WEFT_STORE_RELAY)");
        conn_refuse(s, c, WEFT_ERR_BOOTSTRAP, text);
    } else if (h->rank >= (uint32_t)s->size) {
        weft_env_textf(text, sizeof(text), "rank %u is out of range for WORLD_SIZE=%d", h->rank, s->size);
        conn_refuse(s, c, WEFT_ERR_ARG, text);
    } else if (s->rank_state[h->rank] == RANK_LIVE) {
        weft_env_textf(text, sizeof(text), "rank %u is already connected (two processes with the same RANK?)", h->rank);
        conn_refuse(s, c, WEFT_ERR_ARG, text);
    } else if (s->rank_state[h->rank] != RANK_NONE) {
        /* A re-init (or a restarted rank) that reached the previous run's store
         * before it closed: WEFT_ERR_ALREADY tells the client to try again. */
        weft_env_textf(text, sizeof(text), "rank %u already left this store (a previous run on this port is finishing)",
                       h->rank);
        conn_refuse(s, c, WEFT_ERR_ALREADY, text);
    } else {
        blob_t *w = blob_new(STORE_HDR);
        if (!w) {
            conn_kill(c, "was dropped: the store ran out of memory");
            return;
        }
        c->rank = (int)h->rank;
        c->phase = PHASE_MEMBER;
        if (c->via) c->via->members++;
        c->notices = (h->arg & HELLO_WANTS_LOST) != 0;
        s->by_rank[c->rank] = c;
        s->rank_state[c->rank] = RANK_LIVE;
        weft_env_hdr_pack(w->data, K_WELCOME, h->rank, (uint32_t)s->size, 0, 0, 0);
        conn_queue(c, w);
        blob_put(w);
        weft_debug("env store at %s: rank %d connected from %s", s->where, c->rank, c->peer);
    }
}

/* A PROOF is in: only a connection that knows the job key gets further. */
static void on_proof(server_t *s, conn_t *c)
{
    const store_hdr_t *h = &c->hello;
    int client_keyed = (h->arg & FLAG_KEYED) != 0;
    char text[384];

    if (weft_env_proof_ok(s->key.key, h, &c->hdr, c->small, c->nc, c->ns)) {
        on_claim(s, c);
        return;
    }
    if (s->key.keyed && !client_keyed)
        weft_env_textf(text, sizeof(text),
                       "authentication failed for rank %u: the store requires the job secret and the client has none "
                       "(set WEFT_JOB_SECRET, the same on every rank)",
                       h->rank);
    else if (!s->key.keyed && client_keyed)
        weft_env_textf(text, sizeof(text),
                       "authentication failed for rank %u: the client has a job secret and this store has none "
                       "(give every rank the same WEFT_JOB_SECRET, or none)",
                       h->rank);
    else
        weft_env_textf(text, sizeof(text),
                       "authentication failed for rank %u: wrong proof of the job secret (a different WEFT_JOB_SECRET, "
                       "or not a member of this job)",
                       h->rank);
    conn_refuse(s, c, WEFT_ERR_BOOTSTRAP, text);
}

/* A handshake payload is complete. */
static void on_small(server_t *s, conn_t *c)
{
    c->rx = RX_HDR;
    c->hgot = 0;
    if (c->phase == PHASE_HELLO)
        on_hello(s, c);
    else if (c->phase == PHASE_PROOF)
        on_proof(s, c);
    else
        on_get(s, c, weft_wtime());
}

static void on_contrib(server_t *s, conn_t *c, double now)
{
    const store_hdr_t *h = &c->hdr;
    int rk = c->rank;
    round_t *r;

    /* Rank, size and length were checked with the header (weft_env_judge_header). */
    if (h->seq != s->next_seq[rk]) {
        conn_kill(c, "sent allgather round %llu when round %llu was due", (unsigned long long)h->seq,
                  (unsigned long long)s->next_seq[rk]);
        return;
    }
    s->next_seq[rk]++;
    c->want = (size_t)h->len;
    c->got = 0;
    c->rx = RX_DISCARD; /* until a round takes the payload */
    c->dst = NULL;
    c->round = NULL;
    if (failed_find(s, h->seq)) return; /* answered when the payload is in */

    if (!(r = round_find(s, h->seq))) {
        r = calloc(1, sizeof(*r));
        if (r) {
            r->arrival = calloc((size_t)s->size, 1);
            /* a broadcast's blob is rank 0's contribution: made when it comes */
            r->blob = h->kind == K_BCAST ? blob_new(0) : blob_new(STORE_HDR + (size_t)h->len * (size_t)s->size);
        }
        if (!r || !r->arrival || !r->blob) {
            if (r) {
                free(r->arrival);
                blob_put(r->blob);
                free(r);
            }
            conn_kill(c, "was dropped: the store ran out of memory for allgather round %llu",
                      (unsigned long long)h->seq);
            return;
        }
        r->seq = h->seq;
        r->kind = h->kind;
        r->kind_rank = rk;
        r->len = h->kind == K_BCAST ? 0 : (size_t)h->len;
        r->len_rank = h->kind == K_BCAST ? -1 : rk;
        r->start = now;
        r->next = s->rounds;
        s->rounds = r;
    }
    if (h->arg > 0) {
        double d = now + (double)h->arg * 1e-3;
        if (r->deadline <= 0 || d < r->deadline) r->deadline = d;
    }
    char text[384] = "";
    if (h->kind != r->kind)
        weft_env_textf(text, sizeof(text),
                       "rank %d sent %s round %llu but rank %d sent it as %s (every rank must run the same "
                       "program and weft version)",
                       rk, kind_name(h->kind), (unsigned long long)h->seq, r->kind_rank, kind_name(r->kind));
    else if (r->kind == K_BCAST && rk != 0 && h->len != 0)
        weft_env_textf(text, sizeof(text), "rank %d passed %llu bytes to broadcast round %llu, which only rank 0 fills",
                       rk, (unsigned long long)h->len, (unsigned long long)h->seq);
    else if (r->kind != K_BCAST && h->len != r->len)
        weft_env_textf(text, sizeof(text),
                       "rank %d passed %llu bytes to %s round %llu but rank %d passed %zu bytes (every rank must "
                       "pass the same length)",
                       rk, (unsigned long long)h->len, kind_name(r->kind), (unsigned long long)h->seq, r->len_rank,
                       r->len);
    if (text[0]) {
        weft_warn("env store: %s", text);
        round_fail(s, r, WEFT_ERR_ARG, text);
        return;
    }
    if (r->kind == K_BCAST && rk == 0) {
        blob_t *b = blob_new(STORE_HDR + (size_t)h->len);
        if (!b) {
            conn_kill(c, "was dropped: the store ran out of memory for broadcast round %llu",
                      (unsigned long long)h->seq);
            return;
        }
        blob_put(r->blob);
        r->blob = b;
        r->len = (size_t)h->len;
        r->len_rank = 0;
    }
    r->arrival[rk] = ARR_ARRIVING;
    c->round = r;
    if (h->len > 0)
        c->dst = r->kind == K_BCAST ? r->blob->data + STORE_HDR : r->blob->data + STORE_HDR + (size_t)rk * r->len;
    c->rx = RX_BODY;
    if (s->gone_rank >= 0) {
        char text[512];
        weft_env_textf(text, sizeof(text), "rank %d %s before %s round %llu at the store %s", s->gone_rank, s->gone_why,
                       kind_name(r->kind), (unsigned long long)r->seq, s->where);
        round_fail(s, r, WEFT_ERR_PEER_LOST, text);
    }
}

/* A payload (possibly empty) is complete. */
static void on_body(server_t *s, conn_t *c)
{
    if (c->put) {
        s->value[c->rank] = c->put;
        c->put = NULL;
        waiters_answer(s, c->rank, WEFT_SUCCESS, NULL);
    } else if (c->rx == RX_BODY && c->round) {
        round_t *r = c->round;
        r->arrival[c->rank] = ARR_DONE;
        r->done++;
        c->round = NULL;
        if (r->done == s->size) round_complete(s, r);
    } else {
        failed_t *f = failed_find(s, c->hdr.seq);
        if (f)
            conn_queue(c, f->err);
        else /* the round could not even be created (out of memory) */
            conn_kill(c, "was dropped: the store ran out of memory");
    }
    c->rx = RX_HDR;
    c->hgot = 0;
    c->dst = NULL;
}

static void on_header(server_t *s, conn_t *c, double now)
{
    store_hdr_t *h = &c->hdr;
    store_judgement_t j;

    weft_env_judge_header(c->hbuf, c->phase, (uint32_t)s->size, c->rank >= 0 ? (uint32_t)c->rank : 0, h, &j);
    c->hgot = 0;
    if (j.action == JUDGE_DROP && c->phase == PHASE_MEMBER) {
        conn_kill(c, "%s", j.why);
    } else if (j.action == JUDGE_DROP) {
        reject(s, WEFT_LOG_WARN, "dropped the connection from %s: %s", c->peer, j.why);
        conn_kill(c, "dropped");
    } else if (j.action == JUDGE_REFUSE) {
        conn_refuse(s, c, j.status, j.why);
    } else if (h->kind == K_RELAY) {
        if (c->fd < 0) /* a relay's route cannot be a relay in turn */
            conn_kill(c, "sent RELAY on a route");
        else if (!s->relay)
            conn_refuse(s, c, WEFT_ERR_ARG,
                        "a node relay, but this store expects none (WEFT_STORE_RELAY, LOCAL_WORLD_SIZE and the job "
                        "secret must be alike on every rank)");
        else
            become_relay(s, c);
    } else if (c->phase != PHASE_MEMBER || h->kind == K_GET) { /* a handshake payload or a GET (bounded) */
        c->rx = RX_SMALL;
        c->want = (size_t)h->len;
        c->got = 0;
    } else if (weft_env_is_round(h->kind)) {
        on_contrib(s, c, now);
        if (!c->dead && c->want == 0) on_body(s, c);
    } else if (h->kind == K_PUT) {
        on_put(s, c);
        if (!c->dead && c->want == 0) on_body(s, c);
    } else { /* BYE */
        if (h->seq != s->next_seq[c->rank])
            weft_debug("env store at %s: rank %d said goodbye after %llu rounds, rank 0 expected %llu", s->where,
                       c->rank, (unsigned long long)h->seq, (unsigned long long)s->next_seq[c->rank]);
        rank_gone(s, c->rank, RANK_BYE, "said goodbye (finalized)");
        /* Closing tells the client its goodbye was processed (see weft_env_finalize). */
        conn_kill(c, "said goodbye");
    }
}

/* Where c's next bytes go, and at most how many. */
static size_t conn_want(server_t *s, conn_t *c, uint8_t **p)
{
    if (c->rx == RX_HDR) {
        *p = c->hbuf + c->hgot;
        return STORE_HDR - c->hgot;
    }
    if (c->rx == RX_SMALL) {
        *p = c->small + c->got;
        return c->want - c->got;
    }
    if (c->rx == RX_BODY) {
        *p = c->dst + c->got;
        return c->want - c->got;
    }
    *p = s->scratch;
    return c->want - c->got < sizeof(s->scratch) ? c->want - c->got : sizeof(s->scratch);
}

/* k bytes arrived where conn_want said. */
static void conn_advance(server_t *s, conn_t *c, size_t k, double now)
{
    if (c->rx == RX_HDR) {
        c->hgot += k;
        if (c->hgot == STORE_HDR) on_header(s, c, now);
    } else if (c->rx == RX_SMALL) {
        c->got += k;
        if (c->got == c->want) on_small(s, c);
    } else {
        c->got += k;
        if (c->got == c->want) on_body(s, c);
    }
}

/* c's stream ended (its socket, or its relay's close of the route). */
static void conn_eof(server_t *s, conn_t *c)
{
    if (c->rank >= 0 && s->rank_state[c->rank] == RANK_BYE)
        conn_kill(c, "closed after its goodbye");
    else if (c->rank >= 0)
        conn_kill(c, "disconnected (connection closed)");
    else {
        if (c->hgot > 0 || c->rx != RX_HDR)
            reject(s, WEFT_LOG_WARN, "the connection from %s closed in the middle of a message", c->peer);
        else if (c->phase == PHASE_PROOF) /* a client that found our proof wrong leaves here */
            reject(s, WEFT_LOG_WARN,
                   "the connection from %s (claiming rank %u) left after the challenge without a proof (a "
                   "different job secret, or not a weft rank)",
                   c->peer, c->hello.rank);
        else /* port probes (Kubernetes TCP checks) do just this */
            reject(s, WEFT_LOG_DEBUG, "%s connected and left without a word", c->peer);
        conn_kill(c, "closed");
    }
}

static void relay_read(server_t *s, conn_t *c, double now);

static void conn_read(server_t *s, conn_t *c, double now)
{
    size_t budget = STORE_READ_BUDGET;

    while (!c->dead && !c->closing && !c->is_relay && budget > 0) {
        uint8_t *p;
        size_t n = conn_want(s, c, &p);
        if (n > budget) n = budget;
        ssize_t k = recv(c->fd, p, n, 0);
        if (k == 0) {
            conn_eof(s, c);
            return;
        }
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            if (c->rank < 0) reject(s, WEFT_LOG_WARN, "connection from %s failed: %s", c->peer, strerror(errno));
            conn_kill(c, "disconnected (%s)", strerror(errno));
            return;
        }
        budget -= (size_t)k;
        stat_add(&s->stats.bytes_in, (uint64_t)k);
        conn_advance(s, c, (size_t)k, now);
    }
    if (c->is_relay && !c->dead) relay_read(s, c, now); /* a relay's connection (it said RELAY): routes */
}

/* ---- node relays ------------------------------------------------------------ */

/* A new connection (a descriptor's, or a route's) joins the table as a
 * stranger that must say HELLO. */
static void conn_add(server_t *s, conn_t *c, const char *peer, double now)
{
    c->srv = s;
    c->phase = PHASE_HELLO;
    c->rank = -1;
    c->opened = now;
    c->rx = RX_HDR;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    c->idx = s->nconns;
    s->conns[s->nconns++] = c;
}

/* A route number the store ended and its relay has not yet: DATA for it is
 * dropped and the number is not reused until the relay's ROUTE_CLOSE. Each
 * side sends ROUTE_CLOSE once per route; a number is free on a side that
 * has sent and received one. */
static conn_t route_ending;

/* A connection's first message was RELAY: from now on it carries routes. */
static void become_relay(server_t *s, conn_t *c)
{
    if (!(c->routes = calloc(16, sizeof(*c->routes)))) {
        conn_kill(c, "was dropped: the store ran out of memory");
        return;
    }
    c->is_relay = 1;
    c->nroutes = 16;
    c->hgot = 0;
    c->rx = RX_HDR;
    weft_debug("env store at %s: %s is the node relay of rank %u", s->where, c->peer, c->hdr.rank);
}

/* A route's first bytes: a connection of its own, without a descriptor. */
static conn_t *route_open(server_t *s, conn_t *relay, uint32_t id, double now)
{
    char peer[64];
    snprintf(peer, sizeof(peer), "%.40s/route %u", relay->peer, id);
    if (!relay->members && ++relay->opened_routes > s->relay_routes) {
        reject(s, WEFT_LOG_WARN, "dropped the node relay %s: %d routes and none became a member", relay->peer,
               relay->opened_routes - 1);
        conn_kill(relay, "lost its node relay (%s): it carried no member", relay->peer);
        return NULL;
    }
    if (s->nconns >= s->max_conns && !evict_oldest_stranger(s, peer)) {
        reject(s, WEFT_LOG_WARN, "refused %s: already %d connections", peer, s->nconns);
        return NULL;
    }
    conn_t *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->fd = -1;
    c->via = relay;
    c->route = id;
    conn_add(s, c, peer, now);
    relay->routes[id] = c;
    return c;
}

/* Reads ROUTE messages off a relay's connection (through the store's
 * buffer: a relay's many small messages cost one system call per buffer,
 * not two each) and feeds each route's bytes to that route as its own
 * stream. Every byte read is handed on (to a route, or to the relay's
 * partial header) before the next read, so the buffer is shared. */
static void relay_read(server_t *s, conn_t *c, double now)
{
    size_t budget = STORE_READ_BUDGET, roff = 0, rlen = 0;

    while (!c->dead) {
        if (roff == rlen) {
            if (budget == 0) return;
            if (!c->members && c->out_bytes > RELAY_STRANGER_OUT) { /* answers it never reads */
                reject(s, WEFT_LOG_WARN, "dropped the node relay %s: %zu bytes it does not read", c->peer,
                       c->out_bytes);
                conn_kill(c, "lost its node relay (%s): it stopped reading", c->peer);
                return;
            }
            ssize_t k = recv(c->fd, s->rbuf, sizeof(s->rbuf), 0);
            if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
                conn_kill(c, "lost its node relay (%s): %s", c->peer, k == 0 ? "it closed" : strerror(errno));
                return;
            }
            if (k < 0) {
                if (errno == EINTR) continue;
                return;
            }
            rlen = (size_t)k;
            roff = 0;
            budget = (size_t)k < budget ? budget - (size_t)k : 0;
            stat_add(&s->stats.bytes_in, (uint64_t)k);
        }
        const uint8_t *in = s->rbuf + roff;
        size_t avail = rlen - roff;
        if (c->chunk_left) {
            conn_t *r = c->chunk_to;
            uint8_t *p = NULL;
            size_t n = r && !r->dead ? conn_want(s, r, &p) : avail; /* a dead route's rest is dropped */
            if (n > c->chunk_left) n = c->chunk_left;
            if (n > avail) n = avail;
            roff += n;
            c->chunk_left -= n;
            if (p) {
                memcpy(p, in, n);
                conn_advance(s, r, n, now);
            }
            continue;
        }
        size_t take = STORE_HDR - c->hgot < avail ? STORE_HDR - c->hgot : avail;
        memcpy(c->hbuf + c->hgot, in, take);
        roff += take;
        if ((c->hgot += take) < STORE_HDR) continue;
        store_hdr_t h;
        store_judgement_t j;
        c->hgot = 0;
        weft_env_judge_route(c->hbuf, STORE_ROUTE_CHUNK, &h, &j);
        if (j.action != JUDGE_BODY) {
            reject(s, WEFT_LOG_WARN, "dropped the node relay %s: %s", c->peer, j.why);
            conn_kill(c, "lost its node relay (%s): it broke the protocol", c->peer);
            return;
        }
        if (h.rank >= c->nroutes) { /* a number beyond the table: grow it (the judge bounds it) */
            uint32_t n = c->nroutes;
            while (n <= h.rank)
                n *= 2;
            conn_t **t = realloc(c->routes, sizeof(*t) * n);
            if (!t) {
                conn_kill(c, "was dropped: the store ran out of memory");
                return;
            }
            memset(t + c->nroutes, 0, sizeof(*t) * (n - c->nroutes));
            c->routes = t;
            c->nroutes = n;
        }
        conn_t *r = c->routes[h.rank];
        if (h.arg == ROUTE_CLOSE) {
            if (r == &route_ending) {
                c->routes[h.rank] = NULL;
            } else if (r) {
                r->route_closed = 1;
                conn_eof(s, r);
            }
            continue;
        }
        if (r == &route_ending) {
            r = NULL;
        } else if (!r && (r = route_open(s, c, h.rank, now)) == NULL) {
            c->routes[h.rank] = &route_ending;
            blob_t *b = route_msg(h.rank, ROUTE_CLOSE, 0);
            conn_queue(c, b);
            blob_put(b);
        }
        c->chunk_to = r;
        c->chunk_left = (size_t)h.len;
    }
}

#define WRITE_IOV 64 /* queued messages sent per system call (a relay's: a ROUTE header and its message each) */

static void conn_write(server_t *s, conn_t *c)
{
    while (c->out_head && !c->dead) {
        struct iovec iov[WRITE_IOV];
        int n = 0;
        for (outmsg_t *m = c->out_head; m && n < WRITE_IOV; m = m->next, n++) {
            iov[n].iov_base = m->blob->data + m->off;
            iov[n].iov_len = m->blob->len - m->off;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t k = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            if (c->rank < 0) reject(s, WEFT_LOG_DEBUG, "send to %s failed: %s", c->peer, strerror(errno));
            conn_kill(c, "disconnected (%s)", strerror(errno));
            return;
        }
        stat_add(&s->stats.bytes_out, (uint64_t)k);
        for (size_t left = (size_t)k; left > 0 || (c->out_head && c->out_head->off == c->out_head->blob->len);) {
            outmsg_t *m = c->out_head;
            size_t take = m->blob->len - m->off < left ? m->blob->len - m->off : left;
            m->off += take;
            left -= take;
            c->out_bytes -= take;
            if (m->off < m->blob->len) break;
            c->out_head = m->next;
            if (!c->out_head) c->out_tail = NULL;
            blob_put(m->blob);
            free(m);
        }
    }
    if (c->closing && !c->out_head && !c->dead) {
        shutdown(c->fd, SHUT_WR);
        conn_kill(c, "refused");
    }
}

/* Closes a dead connection; a rank's failure fails the rounds it was in. */
static void conn_finish(server_t *s, conn_t *c)
{
    c->round = NULL;
    waiters_drop_conn(s, c);
    blob_put(c->put);
    c->put = NULL;
    if (c->rank >= 0 && s->by_rank[c->rank] == c) {
        s->by_rank[c->rank] = NULL;
        if (s->rank_state[c->rank] == RANK_LIVE) {
            /* The first loss is news; the rest are usually the job shutting down. */
            if (s->gone_rank < 0)
                weft_warn("env store at %s: rank %d %s", s->where, c->rank, c->why);
            else
                weft_debug("env store at %s: rank %d %s", s->where, c->rank, c->why);
            rank_gone(s, c->rank, RANK_LOST, c->why);
        }
    }
    while (c->out_head) {
        outmsg_t *m = c->out_head;
        c->out_head = m->next;
        blob_put(m->blob);
        free(m);
    }
    if (c->fd < 0) { /* a route: its relay closes the rank's socket once what was routed to it is written */
        if (c->via) {
            c->via->routes[c->route] = c->route_closed ? NULL : &route_ending;
            if (c->via->chunk_to == c) c->via->chunk_to = NULL;
            blob_t *b = route_msg(c->route, ROUTE_CLOSE, 0);
            conn_queue(c->via, b);
            blob_put(b);
        }
        free(c);
        return;
    }
    if (c->is_relay) { /* its routes end with it */
        for (uint32_t i = 0; i < c->nroutes; i++) {
            conn_t *r = c->routes[i];
            if (!r || r == &route_ending) continue;
            r->via = NULL;
            conn_kill(r, "%s", c->why);
        }
        free(c->routes);
    }
    s->nfds--;
    close(c->fd);
    free(c);
}

/* Out of the table (its memory stays until server_reap: events for it may
 * still be in the batch being handled). */
static void conns_remove(server_t *s, conn_t *c)
{
    if (c->idx < 0) return;
    s->conns[c->idx] = s->conns[--s->nconns];
    s->conns[c->idx]->idx = c->idx;
    c->idx = -1;
}

static void server_reap(server_t *s)
{
    /* Finishing one connection can kill another (out of memory on a queue). */
    while (s->dead) {
        /* a dead connection leaves the dirty list before it is freed */
        for (conn_t **p = &s->dirty; *p;) {
            if ((*p)->dead) {
                (*p)->dirty = 0;
                *p = (*p)->next_dirty;
            } else {
                p = &(*p)->next_dirty;
            }
        }
        conn_t *dead = s->dead;
        s->dead = NULL;
        while (dead) {
            conn_t *c = dead;
            dead = c->next_dead;
            conns_remove(s, c);
            conn_finish(s, c);
        }
    }
}

/* The table is full: a dead connection still in it, or the oldest one that
 * has not finished its handshake (a relay that carries no member yet is
 * one), makes room. It leaves the table at once and is freed by the next
 * server_reap, after the batch of events that may name it. Idle strangers
 * then cannot keep the ranks out:
 * a rank's own handshake takes one round trip. Returns 0 if none. */
static int evict_oldest_stranger(server_t *s, const char *newcomer)
{
    int oldest = -1;
    for (int i = 0; i < s->nconns; i++) {
        if (s->conns[i]->dead) {
            conns_remove(s, s->conns[i]);
            return 1;
        }
        if (s->conns[i]->rank < 0 && (!s->conns[i]->is_relay || !s->conns[i]->members) &&
            (oldest < 0 || s->conns[i]->opened < s->conns[oldest]->opened))
            oldest = i;
    }
    if (oldest < 0) return 0;
    conn_t *c = s->conns[oldest];
    reject(s, WEFT_LOG_WARN,
           "dropped the connection from %s (unauthenticated for %.1f s) to make room for %s: %d connections", c->peer,
           weft_wtime() - c->opened, newcomer, s->nconns);
    conn_kill(c, "evicted");
    conns_remove(s, c);
    return 1;
}

#define ACCEPT_BATCH 64 /* connections accepted per pass: a flood must not starve the ranks' reads */

static void server_accept(server_t *s, int lfd, double now)
{
    for (int batch = 0; batch < ACCEPT_BATCH; batch++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        char host[INET6_ADDRSTRLEN] = "?", serv[16] = "?", peer[64];
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* Leave the rest in the backlog; try again shortly rather than spin. */
                if (!s->warned_fd_limit++)
                    weft_warn("env store at %s: cannot accept more connections now: %s (raise `ulimit -n` on rank 0)",
                              s->where, strerror(errno));
                s->accept_pause_until = now + 0.1;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
                reject(s, WEFT_LOG_WARN, "accept failed: %s", strerror(errno));
            }
            return;
        }
        (void)getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), serv, sizeof(serv),
                          NI_NUMERICHOST | NI_NUMERICSERV);
        snprintf(peer, sizeof(peer), "%s:%s", host, serv);
        if (s->nconns >= s->max_conns && !evict_oldest_stranger(s, peer)) {
            reject(s, WEFT_LOG_WARN, "refused a connection from %s: already %d connections (WORLD_SIZE %d + %d)", peer,
                   s->nconns, s->size, STORE_EXTRA_CONNS);
            close(fd);
            continue;
        }
        conn_t *c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            continue;
        }
        weft_sock_nodelay(fd);
        c->fd = fd;
        c->events = EPOLLIN;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            reject(s, WEFT_LOG_WARN, "dropped a connection from %s: epoll: %s", peer, strerror(errno));
            close(fd);
            free(c);
            continue;
        }
        conn_add(s, c, peer, now);
        s->nfds++;
        stat_add(&s->stats.accepted, 1);
        if ((uint64_t)s->nfds > __atomic_load_n(&s->stats.peak_conns, __ATOMIC_RELAXED))
            __atomic_store_n(&s->stats.peak_conns, (uint64_t)s->nfds, __ATOMIC_RELAXED);
    }
}

/* Returns why the thread should leave now, or NULL to go on. */
static const char *server_should_stop(server_t *s, double now)
{
    int stop, fin;
    double fin_deadline;

    pthread_mutex_lock(&s->lock);
    stop = s->stop;
    fin = s->finalizing;
    fin_deadline = s->fin_deadline;
    pthread_mutex_unlock(&s->lock);
    if (stop) return "it finalized without waiting for the others, or gave up";
    if (!fin) return NULL;
    if (s->nbye + s->nlost == s->size) {
        if (s->nlost)
            weft_debug("env store at %s: closing; %d rank%s lost", s->where, s->nlost,
                       s->nlost == 1 ? " was" : "s were");
        return "every rank said goodbye";
    }
    if (fin_deadline > 0 && now >= fin_deadline) {
        int *left = malloc(sizeof(int) * (size_t)s->size), n = 0;
        char list[384] = "some ranks";
        if (left) {
            for (int rk = 0; rk < s->size; rk++)
                if (s->rank_state[rk] == RANK_LIVE || s->rank_state[rk] == RANK_NONE) left[n++] = rk;
            weft_format_ranks(list, sizeof(list), left, n);
            free(left);
        }
        weft_warn("env store at %s: finalize deadline passed; %s never said goodbye", s->where, list);
        return "its finalize deadline passed before every rank said goodbye";
    }
    return NULL;
}

/* Leaving while ranks are still connected: tell each why (best effort, one
 * nonblocking send), so a rank that comes late to a round does not just see
 * the connection drop. The last failed round is usually the real cause. */
static void server_notify_close(server_t *s, const char *why)
{
    char text[1024];
    blob_t *b;

    const failed_t *first = s->failed;
    while (first && first->next) /* the list is newest first; the oldest is the cause */
        first = first->next;
    if (first) {
        const blob_t *e = first->err;
        weft_env_textf(text, sizeof(text), "rank 0 closed its store at %s (%s) after allgather round %llu failed: %.*s",
                       s->where, why, (unsigned long long)first->seq, (int)(e->len - STORE_HDR), e->data + STORE_HDR);
    } else {
        weft_env_textf(text, sizeof(text), "rank 0 closed its store at %s (%s)", s->where, why);
    }
    if (!(b = blob_error(STORE_NOTICE_SEQ, WEFT_ERR_PEER_LOST, text))) return;
    for (int i = 0; i < s->nconns; i++) {
        conn_t *c = s->conns[i];
        if (c->rank < 0 || s->rank_state[c->rank] != RANK_LIVE || c->dead) continue;
        if (c->fd >= 0 && !c->out_head) (void)send(c->fd, b->data, b->len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (c->fd < 0 && c->via && !c->via->out_head && !c->via->dead && !c->via->notice_cut) {
            uint8_t m[STORE_HDR + 1024 + STORE_HDR];
            if (b->len > 1024 + STORE_HDR) continue;
            weft_env_hdr_pack(m, K_ROUTE, c->route, 0, 0, ROUTE_DATA, b->len);
            memcpy(m + STORE_HDR, b->data, b->len);
            /* a short send would cut the stream for the next route's notice: none follows it */
            if (send(c->via->fd, m, STORE_HDR + b->len, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)(STORE_HDR + b->len))
                c->via->notice_cut = 1;
        }
    }
    blob_put(b);
}

/* Handshakes and refusals that overstayed (every STORE_SWEEP_PERIOD). */
static void sweep_deadlines(server_t *s, double now)
{
    for (int i = 0; i < s->nconns; i++) {
        conn_t *c = s->conns[i];
        /* a relay must carry a member soon; one that did stays for the job */
        double limit = c->closing                    ? c->closing_since + STORE_CLOSING_TIMEOUT
                       : c->is_relay && c->members   ? 0
                       : c->rank < 0                 ? c->opened + STORE_HELLO_TIMEOUT
                                                     : 0;
        if (limit <= 0 || now < limit) continue;
        if (!c->closing)
            reject(s, WEFT_LOG_WARN, "dropped the connection from %s: no %s within %.0f s", c->peer,
                   c->is_relay ? "member through it" : c->phase == PHASE_HELLO ? "HELLO" : "PROOF",
                   STORE_HELLO_TIMEOUT);
        conn_kill(c, "timed out");
    }
}

/* Sends what this pass queued, and watches for writability only where
 * output is left (and for reads only where no refusal is being flushed). */
static void flush_dirty(server_t *s)
{
    while (s->dirty) {
        conn_t *c = s->dirty;
        s->dirty = c->next_dirty;
        c->dirty = 0;
        if (c->dead) continue;
        if (c->out_head) conn_write(s, c);
        if (c->dead) continue;
        unsigned want = (c->closing ? 0u : (unsigned)EPOLLIN) | (c->out_head ? (unsigned)EPOLLOUT : 0u);
        if (want == c->events) continue;
        struct epoll_event ev = {.events = want, .data.ptr = c};
        if (epoll_ctl(s->ep, EPOLL_CTL_MOD, c->fd, &ev) == 0)
            c->events = want;
        else
            conn_kill(c, "disconnected (epoll: %s)", strerror(errno));
    }
}

/* The listening sockets in the epoll set, or out of it (descriptors ran out). */
static void listen_watch(server_t *s, int on)
{
    if (on == !s->listen_paused) return;
    for (int l = 0; l < s->nlisten; l++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->listen_fd[l]};
        (void)epoll_ctl(s->ep, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, s->listen_fd[l], &ev);
    }
    s->listen_paused = !on;
}

/* Sends what is queued and closes the dead, until neither leaves work for
 * the other (reaping a route queues its ROUTE_CLOSE on the relay). */
static void flush_and_reap(server_t *s)
{
    do {
        flush_dirty(s);
        server_reap(s);
    } while (s->dirty);
}

static void *server_main(void *arg)
{
    server_t *s = arg;
    const char *why;
    struct epoll_event evs[256];

    for (;;) {
        double now = weft_wtime();
        double next = now + 1.0; /* wake at least once a second */

        if ((why = server_should_stop(s, now))) break;
        reject_flush(s, now, 0);
        /* Deadlines: rounds, fetches, silent strangers, refusals that cannot be flushed. */
        for (round_t *r = s->rounds, *rn; r; r = rn) {
            rn = r->next;
            if (r->deadline > 0 && now >= r->deadline)
                round_timeout(s, r, now);
            else if (r->deadline > 0 && r->deadline < next)
                next = r->deadline;
        }
        if (now >= s->next_sweep) {
            sweep_deadlines(s, now);
            s->next_sweep = now + STORE_SWEEP_PERIOD;
        }
        next = waiters_expire(s, now, next);
        if (s->next_sweep < next) next = s->next_sweep;
        flush_and_reap(s);

        listen_watch(s, now >= s->accept_pause_until);
        if (s->accept_pause_until > now && s->accept_pause_until < next) next = s->accept_pause_until;
        int ms = (int)((next - now) * 1000.0) + 1;
        int n = epoll_wait(s->ep, evs, (int)(sizeof(evs) / sizeof(evs[0])), ms < 0 ? 0 : ms);
        if (n < 0) {
            if (errno == EINTR) continue;
            weft_warn("env store at %s: epoll_wait failed: %s; the store stops", s->where, strerror(errno));
            why = "its epoll_wait() failed";
            break;
        }
        now = weft_wtime();
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            unsigned re = evs[i].events;
            if (p == &s->wake_rd) {
                char junk[64];
                while (read(s->wake_rd, junk, sizeof(junk)) > 0) {
                }
            } else if (p >= (void *)&s->listen_fd[0] && p < (void *)&s->listen_fd[STORE_MAX_LISTEN]) {
                if (now >= s->accept_pause_until) server_accept(s, *(int *)p, now);
            } else {
                conn_t *c = p;
                if (c->dead) continue;
                if (re & EPOLLOUT) {
                    conn_write(s, c);
                    conn_dirty(c); /* its events may change */
                }
                if (re & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                    if (c->closing)
                        conn_kill(c, "closed");
                    else
                        conn_read(s, c, now);
                }
            }
        }
        /* Answers produced by these reads (a WELCOME, a round's RESULT to every
         * rank) go out now rather than after another wait. */
        flush_and_reap(s);
    }

    server_notify_close(s, why);
    reject_flush(s, weft_wtime(), 1);
    weft_debug("env store at %s: closing: %llu connections accepted (at most %llu open), %llu bytes received, %llu "
               "sent",
               s->where, (unsigned long long)s->stats.accepted, (unsigned long long)s->stats.peak_conns,
               (unsigned long long)s->stats.bytes_in, (unsigned long long)s->stats.bytes_out);
    server_reap(s); /* the dead, also those already out of the table */
    for (int i = 0; i < s->nconns; i++) {
        s->conns[i]->rank = -1; /* no round bookkeeping on the way out */
        conn_finish(s, s->conns[i]);
    }
    s->nconns = 0;
    return NULL;
}

static void server_free(server_t *s)
{
    if (!s) return;
    while (s->rounds)
        round_unlink_free(s, s->rounds);
    while (s->failed) {
        failed_t *f = s->failed;
        s->failed = f->next;
        blob_put(f->err);
        free(f);
    }
    while (s->waiters) {
        waiter_t *w = s->waiters;
        s->waiters = w->next;
        free(w);
    }
    for (int r = 0; s->value && r < s->size; r++)
        blob_put(s->value[r]);
    free(s->value);
    for (int i = 0; i < s->nconns; i++) {
        close(s->conns[i]->fd);
        free(s->conns[i]);
    }
    for (int l = 0; l < s->nlisten; l++)
        close(s->listen_fd[l]);
    if (s->wake_rd >= 0) close(s->wake_rd);
    if (s->wake_wr >= 0) close(s->wake_wr);
    pthread_mutex_destroy(&s->lock);
    memset(&s->key, 0, sizeof(s->key));
    free(s->conns);
    if (s->ep >= 0) close(s->ep);
    free(s->by_rank);
    free(s->rank_state);
    free(s->next_seq);
    free(s);
}

static int try_bind(const struct sockaddr *sa, socklen_t len, int *err)
{
    int one = 1, zero = 0;
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    /* A previous job's TIME_WAIT connections must not block the port. */
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (sa->sa_family == AF_INET6) (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (bind(fd, sa, len) != 0) {
        *err = errno;
        close(fd);
        return -1;
    }
    return fd;
}

static int is_unspecified(const char *addr)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, addr, &a4) == 1) return a4.s_addr == htonl(INADDR_ANY);
    if (inet_pton(AF_INET6, addr, &a6) == 1) return IN6_IS_ADDR_UNSPECIFIED(&a6);
    return 0;
}

static int is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family != AF_INET6) return 0;
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

static void addr_text(const struct sockaddr *sa, char *buf, size_t cap)
{
    if (getnameinfo(sa, sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in), buf,
                    (socklen_t)cap, NULL, 0, NI_NUMERICHOST) != 0)
        snprintf(buf, cap, "?");
}

/* "10.0.0.5, fd00::5": the distinct addresses of a lookup. */
static void resolved_text(const struct addrinfo *res, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const struct addrinfo *ai = res; ai && used + 1 < cap; ai = ai->ai_next) {
        char a[INET6_ADDRSTRLEN];
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
        addr_text(ai->ai_addr, a, sizeof(a));
        if (strstr(buf, a)) continue;
        int k = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", a);
        if (k > 0) used += (size_t)k < cap - used ? (size_t)k : cap - used - 1;
    }
}

/* Adds a listening socket on sa (once per address). Returns 0 or the errno. */
static int listen_on(server_t *s, const struct sockaddr *sa, socklen_t len)
{
    struct sockaddr_storage have;
    int err = 0, fd;
    for (int l = 0; l < s->nlisten; l++) {
        socklen_t hl = sizeof(have);
        if (getsockname(s->listen_fd[l], (struct sockaddr *)&have, &hl) == 0 && hl == len && !memcmp(&have, sa, len))
            return 0;
    }
    if (s->nlisten == STORE_MAX_LISTEN) return 0; /* enough ways in */
    if ((fd = try_bind(sa, len, &err)) < 0) return err;
    s->listen_fd[s->nlisten++] = fd;
    return 0;
}

/* Every interface: only when MASTER_ADDR says so and WEFT_STORE_BIND_ANY=1 allows it. */
static int listen_any(server_t *s, int family, int port)
{
    struct sockaddr_in6 any6 = {
        .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT, .sin6_port = htons((uint16_t)port)};
    struct sockaddr_in any4 = {
        .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY), .sin_port = htons((uint16_t)port)};
    int err = EAFNOSUPPORT;
    if (family == AF_INET6) err = listen_on(s, (struct sockaddr *)&any6, sizeof(any6));
    if (s->nlisten == 0) err = listen_on(s, (struct sockaddr *)&any4, sizeof(any4));
    return s->nlisten ? 0 : err;
}

/* Resolves MASTER_ADDR, again and again until `deadline` (0: no end): a
 * Kubernetes name may appear late. Returns 1 with *res, or 0 with why. */
static int resolve_until(const char *host, int port, double deadline, struct addrinfo **res, char *why, size_t cap)
{
    double pause = 0.05;
    for (;;) {
        int gai = 0, r = weft_resolve(host, port, deadline, res, &gai);
        if (r == IO_OK) return 1;
        if (r == IO_ERROR) snprintf(why, cap, "%s", gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
        double now = weft_wtime();
        if (r == IO_TIMEOUT || (deadline > 0 && now + pause >= deadline)) break;
        struct timespec ts = {.tv_sec = (time_t)pause, .tv_nsec = (long)((pause - (double)(time_t)pause) * 1e9)};
        nanosleep(&ts, NULL);
        pause = pause * 2 > 1.0 ? 1.0 : pause * 2;
    }
    if (!why[0]) snprintf(why, cap, "no answer by the deadline");
    return 0;
}

/* The Kubeflow training operator sets MASTER_ADDR=localhost on the master
 * pod (the other pods get its service name): loopback alone would keep
 * every other pod out, so the store also listens on the address of the
 * pod's own name, which the kubelet writes into /etc/hosts and which the
 * service name resolves to. Only that address: not every interface. */
static void listen_pod_address(server_t *s, const env_serve_t *o)
{
    struct addrinfo *res = NULL;
    char host[256], added[256] = "";
    size_t used = 0;
    int gai = 0, before = s->nlisten;
    double deadline = weft_wtime() + 5.0;

    if (gethostname(host, sizeof(host)) != 0) return;
    host[sizeof(host) - 1] = '\0';
    if (o->deadline > 0 && o->deadline < deadline) deadline = o->deadline;
    if (weft_resolve(host, o->port, deadline, &res, &gai) == IO_OK) {
        for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) || is_loopback(ai->ai_addr)) continue;
            int n = s->nlisten;
            if (listen_on(s, ai->ai_addr, ai->ai_addrlen) == 0 && s->nlisten > n && used + 1 < sizeof(added)) {
                char a[INET6_ADDRSTRLEN];
                addr_text(ai->ai_addr, a, sizeof(a));
                int k = snprintf(added + used, sizeof(added) - used, "%s%s", used ? ", " : "", a);
                if (k > 0) used += (size_t)k < sizeof(added) - used ? (size_t)k : sizeof(added) - used - 1;
            }
        }
        freeaddrinfo(res);
    }
    if (s->nlisten > before)
        weft_info_log("env store: MASTER_ADDR=%s is loopback but ranks run on other pods (Kubernetes): also listening "
                      "on %s, the address of this pod's name %s",
                      o->addr, added, host);
    else
        weft_warn("env store: MASTER_ADDR=%s on rank 0 is a loopback address and this pod's name %s gives no other "
                  "address of it: ranks on other hosts cannot reach the store (set MASTER_ADDR to rank 0's address)",
                  o->addr, host);
}

static int cannot_serve(server_t *s, int err)
{
    return weft_error(WEFT_ERR_BOOTSTRAP, "env bootstrap: rank 0 cannot serve the store on %s: %s%s", s->where,
                      strerror(err ? err : EADDRNOTAVAIL),
                      err == EADDRINUSE ? " (is another job using MASTER_PORT?)" : "");
}

/* Listens on the address(es) MASTER_ADDR resolves to, which must be this
 * host's: rank 0 serves the store there and nowhere else, so it is not
 * open on interfaces the job does not use. MASTER_ADDR=0.0.0.0 / :: (every
 * interface) and an address that is not this host's (a Kubernetes
 * ClusterIP service in front of rank 0) are refused with the reason,
 * unless WEFT_STORE_BIND_ANY=1 asks for every interface. */
static int server_listen(server_t *s, const env_serve_t *o)
{
    struct addrinfo *res = NULL;
    char why[256] = "", resolved[256] = "";
    int rc = WEFT_SUCCESS, err = 0, first_family = 0, all_loopback = 1;

    if (o->listen_fd >= 0) {
        s->listen_fd[s->nlisten++] = o->listen_fd; /* a rendezvous: bound and listening already */
    } else if (is_unspecified(o->addr)) {
        if (!o->bind_any) {
            rc = weft_error(WEFT_ERR_ARG,
                            "env bootstrap: MASTER_ADDR=%s would make rank 0's store listen on every interface of its "
                            "host: set MASTER_ADDR to rank 0's address (the one the other ranks connect to), or "
                            "WEFT_STORE_BIND_ANY=1 to listen on every interface on purpose",
                            o->addr);
            goto out;
        }
        err = listen_any(s, strchr(o->addr, ':') ? AF_INET6 : AF_INET, o->port);
    } else if (!resolve_until(o->addr, o->port, o->deadline, &res, why, sizeof(why))) {
        if (!o->bind_any) {
            rc = weft_error(WEFT_ERR_BOOTSTRAP,
                            "env bootstrap: rank 0 serves the store on MASTER_ADDR's address, but MASTER_ADDR='%s' "
                            "does not resolve on rank 0 (%s): set MASTER_ADDR to an address or name of rank 0's host, "
                            "or WEFT_STORE_BIND_ANY=1 to listen on every interface",
                            o->addr, why);
            goto out;
        }
        err = listen_any(s, AF_INET6, o->port);
    } else {
        resolved_text(res, resolved, sizeof(resolved));
        for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
            if (!first_family) first_family = ai->ai_family;
            int e = listen_on(s, ai->ai_addr, ai->ai_addrlen);
            if (e == EADDRINUSE || e == EACCES) { /* the address is ours but the port is not */
                rc = cannot_serve(s, e);
                goto out;
            }
            if (e == 0) all_loopback &= is_loopback(ai->ai_addr);
        }
        if (s->nlisten == 0 && !o->bind_any) {
            rc = weft_error(WEFT_ERR_BOOTSTRAP,
                            "env bootstrap: rank 0 must serve the store at MASTER_ADDR=%s, which resolves to %s, not "
                            "an address of this host: start rank 0 where MASTER_ADDR points, or set "
                            "WEFT_STORE_BIND_ANY=1 to listen on every interface (e.g. behind a Kubernetes ClusterIP "
                            "service)",
                            o->addr, resolved[0] ? resolved : "nothing usable");
            goto out;
        }
        if (s->nlisten == 0) {
            weft_info_log("env store: MASTER_ADDR=%s (%s) is not an address of this host; listening on every "
                          "interface (WEFT_STORE_BIND_ANY=1)",
                          o->addr, resolved);
            err = listen_any(s, first_family, o->port);
        } else if (all_loopback && getenv("KUBERNETES_SERVICE_HOST") &&
                   o->size > (o->local_size > 0 ? o->local_size : 1)) {
            listen_pod_address(s, o);
        }
    }
    if (s->nlisten == 0) {
        rc = cannot_serve(s, err);
        goto out;
    }
    for (int l = 0; l < s->nlisten; l++)
        if (listen(s->listen_fd[l], s->size + 64 > 65535 ? 65535 : s->size + 64) != 0) {
            rc = cannot_serve(s, errno);
            goto out;
        }
    s->self_len = sizeof(s->self);
    getsockname(s->listen_fd[0], (struct sockaddr *)&s->self, &s->self_len);
    /* Rank 0's own client goes through loopback when the store took the wildcard. */
    if (s->self.ss_family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&s->self;
        if (in->sin_addr.s_addr == htonl(INADDR_ANY)) in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else if (s->self.ss_family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&s->self;
        if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr)) in6->sin6_addr = in6addr_loopback;
    }
    for (int l = 0; l < s->nlisten; l++) {
        struct sockaddr_storage a;
        socklen_t al = sizeof(a);
        char text[INET6_ADDRSTRLEN] = "?";
        if (getsockname(s->listen_fd[l], (struct sockaddr *)&a, &al) == 0)
            addr_text((struct sockaddr *)&a, text, sizeof(text));
        weft_debug("env store: listening on %s port %d", text, o->port);
    }
out:
    if (res) freeaddrinfo(res);
    return rc;
}

/* Descriptors the store needs: one per rank, or per node through relays
 * (with room for the extra connections strangers may hold). */
static int fds_needed(const server_t *s)
{
    return s->relay ? s->relay + STORE_EXTRA_CONNS + STORE_OWN_FDS : s->size + STORE_OWN_FDS;
}

/* Thousands of ranks need thousands of descriptors on rank 0: the soft
 * limit is raised toward want (within the hard one). Returns the limit now
 * in force (-1: none, or not known). */
static long long raise_fd_limit(int want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return -1;
    if (rl.rlim_cur >= (rlim_t)want) return (long long)rl.rlim_cur;
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > (rlim_t)want) ? (rlim_t)want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
        weft_debug("env store: raised the open-file limit from %llu to %llu", (unsigned long long)old,
                   (unsigned long long)rl.rlim_cur);
    else if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    return (long long)rl.rlim_cur; /* too low for what the store needs: every rank is told (on_claim) */
}

int weft_env_server_start(server_t **out, const env_serve_t *o, pthread_t *thread)
{
    server_t *s = calloc(1, sizeof(*s));
    int rc = WEFT_SUCCESS, wake[2], err, size = o->size;

    if (!s) return weft_error(WEFT_ERR_NO_MEMORY, "env bootstrap: out of memory for the store");
    s->wake_rd = s->wake_wr = s->ep = -1;
    s->listen_paused = 1; /* the loop adds the listening sockets */
    s->size = size;
    s->gone_rank = -1;
    s->relay = o->relay_nodes;
    s->relay_routes = 2 * (o->local_size > 0 ? o->local_size : 1) + RELAY_STRANGER_ROUTES;
    /* routes and descriptors: a rank's route and its relay's connection may both be open */
    s->max_conns = size + o->relay_nodes + STORE_EXTRA_CONNS;
    s->key = *o->key;
    s->rejects.tokens = REJECT_LOG_BURST;
    s->rejects.refilled = weft_wtime();
    snprintf(s->where, sizeof(s->where), "%s", o->where);
    pthread_mutex_init(&s->lock, NULL);
    s->conns = calloc((size_t)s->max_conns, sizeof(*s->conns));
    s->by_rank = calloc((size_t)size, sizeof(*s->by_rank));
    s->rank_state = calloc((size_t)size, 1);
    s->next_seq = calloc((size_t)size, sizeof(*s->next_seq));
    s->value = calloc((size_t)size, sizeof(*s->value));
    if (!s->conns || !s->by_rank || !s->rank_state || !s->next_seq || !s->value) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "env bootstrap: out of memory for a store of %d ranks", size);
        goto out;
    }
    if (pipe2(wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        rc = weft_error(WEFT_ERR_BOOTSTRAP, "env bootstrap: pipe: %s", strerror(errno));
        goto out;
    }
    s->wake_rd = wake[0];
    s->wake_wr = wake[1];
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &s->wake_rd};
    if ((s->ep = epoll_create1(EPOLL_CLOEXEC)) < 0 || epoll_ctl(s->ep, EPOLL_CTL_ADD, s->wake_rd, &wev) != 0) {
        rc = weft_error(WEFT_ERR_BOOTSTRAP, "env bootstrap: epoll: %s", strerror(errno));
        goto out;
    }
    /* The store holds a connection per rank for the whole job: where the
     * limit cannot reach WORLD_SIZE and the store's own few, every rank is
     * refused at once (on_claim) instead of those past the limit waiting in
     * the backlog and the others timing out at the deadline. */
    long long limit = raise_fd_limit(size + STORE_EXTRA_CONNS + 64);
    if (limit >= 0 && limit < (long long)fds_needed(s)) s->fd_limit_short = limit;
    WEFT_CHECK_GOTO(server_listen(s, o), rc, out);
    err = weft_thread_start(thread, NULL, server_main, s, "weft-store");
    if (err != 0) {
        rc = weft_error(WEFT_ERR_BOOTSTRAP, "env bootstrap: cannot start the store thread: %s", strerror(err));
        goto out;
    }
    weft_debug("env store: serving %d ranks on %s (%s)", size, o->where,
               s->key.keyed ? "authenticated with the job secret" : "unauthenticated: no job secret");
    *out = s;
    return WEFT_SUCCESS;
out:
    server_free(s);
    return rc;
}

/* Graceful: wait until every rank said goodbye or `deadline` passed. */
void weft_env_server_stop(server_t *s, pthread_t thread, int graceful, double deadline)
{
    pthread_mutex_lock(&s->lock);
    if (graceful) {
        s->finalizing = 1;
        s->fin_deadline = deadline;
    } else {
        s->stop = 1;
    }
    pthread_mutex_unlock(&s->lock);
    if (write(s->wake_wr, "x", 1) < 0) {
        /* Only EAGAIN is possible: the pipe is full, so the thread wakes anyway. */
    }
    pthread_join(thread, NULL);
    server_free(s);
}

void weft_env_server_stats(server_t *s, weft_store_stats_t *out)
{
    out->accepted = __atomic_load_n(&s->stats.accepted, __ATOMIC_RELAXED);
    out->peak_conns = __atomic_load_n(&s->stats.peak_conns, __ATOMIC_RELAXED);
    out->bytes_in = __atomic_load_n(&s->stats.bytes_in, __ATOMIC_RELAXED);
    out->bytes_out = __atomic_load_n(&s->stats.bytes_out, __ATOMIC_RELAXED);
}

void weft_env_server_self(server_t *s, struct addrinfo *ai)
{
    ai->ai_family = s->self.ss_family;
    ai->ai_addr = (struct sockaddr *)&s->self;
    ai->ai_addrlen = s->self_len;
}
