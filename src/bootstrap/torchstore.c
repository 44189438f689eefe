/* The torchstore bootstrap: ranks started by torchrun find each other
 * through the store torchrun's agent already serves. The agent tells its
 * workers with TORCHELASTIC_USE_AGENT_STORE=True that MASTER_ADDR:MASTER_PORT
 * is its torch TCPStore (in every rendezvous mode: --standalone, static
 * --master-addr/--master-port, c10d); weft must not serve its own store
 * there (the port is taken), so every rank is a client of the agent's.
 *
 * Wire protocol (torch's TCPStore, as served by torch 2.11's libuv and
 * classic backends; written from its documented behaviour, verified
 * against the real store by test/launchers/test_torchrun.sh): a client
 * opens with VALIDATE (u8 0, u32 0x3C85F7CE) and may PING (u8 13, u32
 * nonce; the store echoes the nonce). Then requests, one byte of query
 * type followed by its arguments; strings and values are a u64 length and
 * the bytes; integers are the host's byte order, which is little-endian
 * wherever torch runs, and written as such here:
 *   SET 1 key value                 no answer
 *   GET 3 key                       value (only after WAIT: the classic
 *                                   backend drops a client that gets a missing key)
 *   ADD 4 key i64                   i64, the new value (kept as decimal text)
 *   CHECK 5 u64 n, n keys           u8 0 all exist / 1 not
 *   WAIT 6 u64 n, n keys            u8 0 once all exist (no deadline of its own)
 *   DELETE_KEY 8 key                i64 keys deleted
 *   MULTI_GET 10 u64 n, n keys      n values
 *   CANCEL_WAIT 12                  u8 1 (after a u8 0 when the WAIT had just ended)
 * Limits of the libuv store: keys <= 8 KiB, values <= 8 MiB, <= 128 Ki keys
 * per request.
 *
 * Allgather over it, round `seq`: every rank SETs its block under
 * P/seq/r<rank>; rank 0 WAITs for all of them, MULTI_GETs them, and
 * publishes the result (or a verdict: who never arrived) as P/seq/all<c>,
 * chunks of <= 4 MiB whose first carries a header; the other ranks WAIT
 * for chunk 0 and read the rest. Rank 0 then deletes the rank keys and
 * the last reader the chunks, so a finished round leaves nothing behind
 * and nothing stale to read. Each rank needs one connection and the store
 * holds one waiter per rank per round, not size^2. A gather at rank 0 is
 * the same round with only the header published (the others learn it is
 * complete, or who never came); a broadcast is rank 0's publication alone.
 * So init's node map costs the store O(size) bytes, not size^2 (its
 * allgathers carry size * len to every rank).
 *
 * A rank's published blob (its sealed UCX address) is P/0/addr<rank>;
 * another rank WAITs for it and reads it when it first makes an endpoint
 * to that rank (up to 16 in one WAIT and one MULTI_GET). Each rank deletes
 * its own at finalize, after the closing barrier.
 *
 * P = /weft/<TORCHELASTIC_RUN_ID>/<TORCHELASTIC_RESTART_COUNT>/<n>, n
 * counting this process's inits: a restarted worker group (torchrun
 * --max-restarts) runs in a fresh namespace of the same agent store, so it
 * never reads a failed attempt's keys.
 *
 * Deadlines: every wait ends at the caller's deadline (a WAIT is canceled
 * with CANCEL_WAIT, keeping the stream in step); rank 0 then publishes
 * the ranks that never arrived and the others, who wait up to TS_GRACE
 * longer for that verdict, fail with the same message. Liveness is
 * torchrun's: it ends the whole worker group when a worker dies.
 *
 * Who may write here is torch's business, and its TCPStore checks no one:
 * anything that reaches MASTER_PORT can read, overwrite or delete these
 * keys. weft seals the UCX addresses it publishes with the job key
 * (WEFT_JOB_SECRET, else one derived from TORCHELASTIC_RUN_ID unless that
 * is "none"): with a key, a stranger can make init fail but cannot slip
 * in an address; without one, the seal is only a checksum
 * (pt2pt/ucx_addr.h, docs/SECURITY.md).
 */
#include "bootstrap/env.h"
#include "bootstrap/sock.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

enum {
    Q_VALIDATE = 0,
    Q_SET = 1,
    Q_GET = 3,
    Q_ADD = 4,
    Q_CHECK = 5,
    Q_WAIT = 6,
    Q_DELETE_KEY = 8,
    Q_MULTI_GET = 10,
    Q_CANCEL_WAIT = 12,
    Q_PING = 13
};
enum { CHECK_READY = 0, CHECK_NOT_READY = 1 };
enum { WAIT_STOP_WAITING = 0, WAIT_CANCELED = 1 };

#define TS_VALIDATE_MAGIC 0x3C85F7CEu
#define TS_MAX_VALUE      ((uint64_t)8 << 20) /* the libuv store refuses longer values */
#define TS_MAX_ROUND      ((uint64_t)2 << 30)
#define TS_CHUNK          ((uint64_t)4 << 20) /* one published value */
#define TS_BATCH          4096                /* keys per WAIT / MULTI_GET / pipelined batch */
#define TS_MAX_TEXT       4096
#define TS_GRACE          2.0         /* waiting past the deadline for rank 0's verdict, and for replies */
#define TS_PING_TIMEOUT   10.0        /* a TCPStore answers a ping at once */
#define TS_RESULT_MAGIC   0x57465452u /* "WFTR": the header of a published result */
#define TS_RESULT_HDR     16          /* u32 magic, i32 weft status, u64 payload length */
#define TS_RUN_ID_MAX     256

typedef struct ts_boot {
    int fd;
    int rank, size;
    int broken;    /* the stream is out of step (an I/O failure mid-request): no more rounds */
    int published; /* this rank's blob is at P/0/addr<rank> (deleted at finalize) */
    uint64_t seq;
    char addr[256];
    int port;
    char where[300];
    char prefix[TS_RUN_ID_MAX + 64];
} ts_boot_t;

static unsigned ts_inits; /* this process's torchstore inits: part of the namespace */

/* ---- requests ------------------------------------------------------------ */

typedef struct tsbuf {
    uint8_t *p;
    size_t len, cap;
    int oom;
} tsbuf_t;

static void tb_bytes(tsbuf_t *b, const void *d, size_t n)
{
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void tb_u8(tsbuf_t *b, uint8_t v)
{
    tb_bytes(b, &v, 1);
}

static void tb_u32(tsbuf_t *b, uint32_t v)
{
    v = htole32(v);
    tb_bytes(b, &v, 4);
}

static void tb_u64(tsbuf_t *b, uint64_t v)
{
    v = htole64(v);
    tb_bytes(b, &v, 8);
}

/* A key: P/seq/<what><idx> (idx < 0: no index). */
static void tb_key(tsbuf_t *b, const ts_boot_t *t, uint64_t seq, const char *what, long idx)
{
    char k[sizeof(t->prefix) + 64];
    int n = idx >= 0 ? snprintf(k, sizeof(k), "%s/%llu/%s%ld", t->prefix, (unsigned long long)seq, what, idx)
                     : snprintf(k, sizeof(k), "%s/%llu/%s", t->prefix, (unsigned long long)seq, what);
    if (n < 0 || (size_t)n >= sizeof(k)) n = (int)sizeof(k) - 1; /* cannot happen: the run id is bounded */
    tb_u64(b, (uint64_t)n);
    tb_bytes(b, k, (size_t)n);
}

static double ts_io_deadline(double deadline)
{
    if (deadline <= 0) return 0.0;
    double now = weft_wtime();
    return (deadline > now ? deadline : now) + TS_GRACE;
}

/* The stream failed mid-request: later requests would read the wrong answers. */
static int ts_broken(ts_boot_t *t, int io, int err, const char *doing)
{
    t->broken = 1;
    if (io == IO_TIMEOUT)
        return weft_error(WEFT_ERR_TIMEOUT,
                          "torchstore bootstrap: rank %d: torchrun's agent store at %s did not answer (%s) by the "
                          "deadline (+%.0f s): the agent is hung or overloaded",
                          t->rank, t->where, doing, TS_GRACE);
    if (io == IO_CLOSED)
        return weft_error(WEFT_ERR_PEER_LOST,
                          "torchstore bootstrap: rank %d: torchrun's agent store at %s closed the connection (%s): "
                          "the agent exited, or refused a request",
                          t->rank, t->where, doing);
    if (io == IO_ERROR && err == ENOMEM)
        return weft_error(WEFT_ERR_NO_MEMORY, "torchstore bootstrap: rank %d: out of memory (%s)", t->rank, doing);
    if (io == IO_ERROR && err == EPROTO)
        return weft_error(WEFT_ERR_BOOTSTRAP,
                          "torchstore bootstrap: rank %d: the store at %s answered %s with something a torch "
                          "TCPStore does not send",
                          t->rank, t->where, doing);
    return weft_error(WEFT_ERR_PEER_LOST, "torchstore bootstrap: rank %d: talking to the store at %s (%s) failed: %s",
                      t->rank, t->where, doing, strerror(err));
}

/* Sends a built request; the buffer is freed. */
static int tb_send(ts_boot_t *t, tsbuf_t *b, int more, double io_dl, int *err)
{
    int io = IO_ERROR;
    if (b->oom)
        *err = ENOMEM;
    else
        io = weft_io_send(t->fd, b->p, b->len, more, io_dl, err);
    free(b->p);
    memset(b, 0, sizeof(*b));
    return io;
}

static int recv_u64(ts_boot_t *t, uint64_t *v, double io_dl, int *err)
{
    int io = weft_io_recv(t->fd, v, 8, io_dl, err);
    *v = le64toh(*v);
    return io;
}

/* Reads and drops n bytes. */
static int recv_discard(ts_boot_t *t, uint64_t n, double io_dl, int *err)
{
    uint8_t sink[4096];
    int io = IO_OK;
    while (n > 0 && io == IO_OK) {
        size_t k = n > sizeof(sink) ? sizeof(sink) : (size_t)n;
        io = weft_io_recv(t->fd, sink, k, io_dl, err);
        n -= k;
    }
    return io;
}

/* SET P/seq/<what><idx> = data; the value goes out without a copy. */
static int ts_set(ts_boot_t *t, uint64_t seq, const char *what, long idx, const void *d1, size_t n1, const void *d2,
                  size_t n2, double io_dl)
{
    tsbuf_t b = {0};
    int err = 0, io;
    tb_u8(&b, Q_SET);
    tb_key(&b, t, seq, what, idx);
    tb_u64(&b, (uint64_t)(n1 + n2));
    io = tb_send(t, &b, n1 + n2 > 0, io_dl, &err);
    if (io == IO_OK && n1) io = weft_io_send(t->fd, d1, n1, n2 > 0, io_dl, &err);
    if (io == IO_OK && n2) io = weft_io_send(t->fd, d2, n2, 0, io_dl, &err);
    return io == IO_OK ? WEFT_SUCCESS : ts_broken(t, io, err, "setting a key");
}

/* WAIT until keys P/seq/<what>[lo, hi) exist or `until` passes (then the
 * wait is canceled). IO_OK, IO_TIMEOUT, or an error status (< 0). */
static int ts_wait_keys(ts_boot_t *t, uint64_t seq, const char *what, const long *list, long lo, long hi,
                        double until)
{
    tsbuf_t b = {0};
    uint8_t r = 0;
    int err = 0, io;
    double io_dl = ts_io_deadline(until);

    tb_u8(&b, Q_WAIT);
    tb_u64(&b, (uint64_t)(hi - lo));
    for (long i = lo; i < hi; i++)
        tb_key(&b, t, seq, what, list ? list[i] : i);
    io = tb_send(t, &b, 0, io_dl, &err);
    if (io == IO_OK) io = weft_io_recv(t->fd, &r, 1, until, &err);
    if (io == IO_OK) {
        if (r == WAIT_STOP_WAITING) return IO_OK;
        return ts_broken(t, IO_ERROR, EPROTO, "a wait");
    }
    if (io != IO_TIMEOUT) return ts_broken(t, io, err, "a wait");
    /* Cancel; the store may have ended the wait just before seeing it. */
    tb_u8(&b, Q_CANCEL_WAIT);
    io_dl = weft_wtime() + TS_GRACE;
    io = tb_send(t, &b, 0, io_dl, &err);
    if (io == IO_OK) io = weft_io_recv(t->fd, &r, 1, io_dl, &err);
    if (io == IO_OK && r == WAIT_CANCELED) return IO_TIMEOUT;
    if (io == IO_OK && r == WAIT_STOP_WAITING) {
        io = weft_io_recv(t->fd, &r, 1, io_dl, &err);
        if (io == IO_OK && r == WAIT_CANCELED) return IO_OK;
    }
    return ts_broken(t, io == IO_OK ? IO_ERROR : io, io == IO_OK ? EPROTO : err, "canceling a wait");
}

static int ts_wait(ts_boot_t *t, uint64_t seq, const char *what, long lo, long hi, double until)
{
    return ts_wait_keys(t, seq, what, NULL, lo, hi, until);
}

/* WAIT in batches (one request may name at most TS_BATCH keys). */
static int ts_wait_all(ts_boot_t *t, uint64_t seq, const char *what, long lo, long hi, double until)
{
    for (long b = lo; b < hi; b += TS_BATCH) {
        int r = ts_wait(t, seq, what, b, hi - b > TS_BATCH ? b + TS_BATCH : hi, until);
        if (r != IO_OK) return r;
    }
    return IO_OK;
}

/* CHECK each key P/seq/<what>[lo, hi) alone (pipelined): present[i - lo]. */
static int ts_check_each(ts_boot_t *t, uint64_t seq, const char *what, long lo, long hi, uint8_t *present)
{
    double io_dl = weft_wtime() + TS_GRACE;
    int err = 0, io = IO_OK;
    for (long b = lo; b < hi && io == IO_OK; b += TS_BATCH) {
        long e = hi - b > TS_BATCH ? b + TS_BATCH : hi;
        tsbuf_t q = {0};
        for (long i = b; i < e; i++) {
            tb_u8(&q, Q_CHECK);
            tb_u64(&q, 1);
            tb_key(&q, t, seq, what, i);
        }
        io = tb_send(t, &q, 0, io_dl, &err);
        if (io == IO_OK) io = weft_io_recv(t->fd, present + (b - lo), (size_t)(e - b), io_dl, &err);
        for (long i = b; i < e && io == IO_OK; i++) {
            uint8_t v = present[i - lo];
            if (v != CHECK_READY && v != CHECK_NOT_READY) {
                io = IO_ERROR;
                err = EPROTO;
            }
            present[i - lo] = v == CHECK_READY;
        }
    }
    return io == IO_OK ? WEFT_SUCCESS : ts_broken(t, io, err, "checking keys");
}

/* DELETE_KEY P/seq/<what>[lo, hi) (idx -1 alone when lo < 0), pipelined. */
static int ts_delete(ts_boot_t *t, uint64_t seq, const char *what, long lo, long hi, double io_dl)
{
    int err = 0, io = IO_OK;
    for (long b = lo; b < hi && io == IO_OK; b += TS_BATCH) {
        long e = hi - b > TS_BATCH ? b + TS_BATCH : hi;
        tsbuf_t q = {0};
        for (long i = b; i < e; i++) {
            tb_u8(&q, Q_DELETE_KEY);
            tb_key(&q, t, seq, what, i);
        }
        io = tb_send(t, &q, 0, io_dl, &err);
        for (long i = b; i < e && io == IO_OK; i++) {
            uint64_t n;
            io = recv_u64(t, &n, io_dl, &err);
        }
    }
    return io == IO_OK ? WEFT_SUCCESS : ts_broken(t, io, err, "deleting keys");
}

/* ---- naming who is missing ----------------------------------------------- */

/* "rank 2 never arrived (1 of 4 missing)": which rank keys of round seq do
 * not exist. Returns how many are missing (-1: could not tell). */
static int ts_missing(ts_boot_t *t, uint64_t seq, char *text, size_t cap)
{
    uint8_t *present = malloc((size_t)t->size);
    int *list = malloc(sizeof(int) * (size_t)t->size);
    int missing = -1;

    text[0] = '\0';
    if (present && list && ts_check_each(t, seq, "r", 0, t->size, present) == WEFT_SUCCESS) {
        char ranks[384];
        missing = 0;
        for (int r = 0; r < t->size; r++)
            if (!present[r]) list[missing++] = r;
        if (missing) {
            weft_format_ranks(ranks, sizeof(ranks), list, missing);
            weft_env_textf(text, cap, "%s never arrived (%d of %d missing)", ranks, missing, t->size);
        }
    }
    free(present);
    free(list);
    return missing;
}

/* ---- publishing and reading a round's result ----------------------------- */

/* Publishes blob = header + payload as chunks P/seq/all<c>, the first last:
 * its appearance means every chunk is there (the store handles one
 * connection's requests in order). */
static int ts_publish(ts_boot_t *t, uint64_t seq, int status, const void *payload, uint64_t plen, double io_dl)
{
    uint8_t hdr[TS_RESULT_HDR];
    uint32_t m = htole32(TS_RESULT_MAGIC), st = htole32((uint32_t)status);
    uint64_t pl = htole64(plen), blob = TS_RESULT_HDR + plen;
    long nchunks = (long)((blob + TS_CHUNK - 1) / TS_CHUNK);
    const uint8_t *p = payload;
    int rc = WEFT_SUCCESS;

    memcpy(hdr, &m, 4);
    memcpy(hdr + 4, &st, 4);
    memcpy(hdr + 8, &pl, 8);
    for (long c = nchunks - 1; c >= 1 && rc == WEFT_SUCCESS; c--) {
        uint64_t off = (uint64_t)c * TS_CHUNK - TS_RESULT_HDR; /* payload offset of chunk c */
        uint64_t n = plen - off > TS_CHUNK ? TS_CHUNK : plen - off;
        rc = ts_set(t, seq, "all", c, p + off, (size_t)n, NULL, 0, io_dl);
    }
    if (rc == WEFT_SUCCESS) {
        uint64_t n0 = plen > TS_CHUNK - TS_RESULT_HDR ? TS_CHUNK - TS_RESULT_HDR : plen;
        rc = ts_set(t, seq, "all", 0, hdr, sizeof(hdr), p, (size_t)n0, io_dl);
    }
    return rc;
}

/* Rank 0 of a failed round: tell the others why, then fail the same way. */
static int ts_fail_round(ts_boot_t *t, uint64_t seq, int status, const char *text)
{
    /* Best effort: when this fails, the others time out by themselves. */
    if (!t->broken) (void)ts_publish(t, seq, status, text, strlen(text), weft_wtime() + TS_GRACE);
    return weft_error(status, "torchstore bootstrap: %s", text);
}

/* Rank 0: gathers every rank's block (its own already in recv), then
 * publishes the result: every block (an allgather), or only that the
 * round is complete (`share` 0: a gather at rank 0). */
static int ts_gather(ts_boot_t *t, uint64_t seq, void *recv, size_t len, int share, double deadline)
{
    char text[TS_MAX_TEXT], who[TS_MAX_TEXT - 256];
    double io_dl = ts_io_deadline(deadline);
    int err = 0, io, rc = WEFT_SUCCESS, bad_rank = -1;
    uint64_t bad_len = 0;

    io = ts_wait_all(t, seq, "r", 1, t->size, deadline);
    if (io < 0) return io;
    if (io == IO_TIMEOUT) {
        int missing = ts_missing(t, seq, who, sizeof(who));
        if (missing > 0)
            weft_env_textf(text, sizeof(text), "%s at torchrun's agent store %s (bootstrap round %llu)", who, t->where,
                           (unsigned long long)seq);
        else
            weft_env_textf(text, sizeof(text),
                           "bootstrap round %llu at torchrun's agent store %s did not complete by the deadline",
                           (unsigned long long)seq, t->where);
        return ts_fail_round(t, seq, WEFT_ERR_TIMEOUT, text);
    }
    for (long b = 1; b < t->size && rc == WEFT_SUCCESS; b += TS_BATCH) {
        long e = t->size - b > TS_BATCH ? b + TS_BATCH : t->size;
        tsbuf_t q = {0};
        tb_u8(&q, Q_MULTI_GET);
        tb_u64(&q, (uint64_t)(e - b));
        for (long r = b; r < e; r++)
            tb_key(&q, t, seq, "r", r);
        io = tb_send(t, &q, 0, io_dl, &err);
        for (long r = b; r < e && io == IO_OK; r++) {
            uint64_t n = 0;
            io = recv_u64(t, &n, io_dl, &err);
            if (io != IO_OK) break;
            if (n == len) {
                io = weft_io_recv(t->fd, (uint8_t *)recv + (size_t)r * len, len, io_dl, &err);
                continue;
            }
            if (bad_rank < 0) {
                bad_rank = (int)r;
                bad_len = n;
            }
            io = recv_discard(t, n, io_dl, &err);
        }
        if (io != IO_OK) rc = ts_broken(t, io, err, "reading the ranks' blocks");
    }
    if (rc != WEFT_SUCCESS) return rc;
    if (bad_rank >= 0) {
        weft_env_textf(
            text, sizeof(text),
            "bootstrap round %llu: rank %d contributed %llu bytes, rank 0 %zu (every rank must pass the same "
            "length: do all ranks run the same program and weft version?)",
            (unsigned long long)seq, bad_rank, (unsigned long long)bad_len, len);
        return ts_fail_round(t, seq, WEFT_ERR_BOOTSTRAP, text);
    }
    WEFT_CHECK_GOTO(ts_publish(t, seq, WEFT_SUCCESS, share ? recv : NULL, share ? (uint64_t)len * (uint64_t)t->size : 0,
                               io_dl),
                    rc, out);
    rc = ts_delete(t, seq, "r", 0, t->size, io_dl);
out:
    return rc;
}

/* Ranks other than 0: waits for rank 0's result (or verdict) and reads
 * it: `total` bytes into recv, or (out != NULL, a broadcast) whatever
 * rank 0 published into a malloc'd *out. */
static int ts_fetch(ts_boot_t *t, uint64_t seq, void *recv, uint64_t total, void **out, size_t *out_len,
                    double deadline)
{
    char text[TS_MAX_TEXT + 1], who[TS_MAX_TEXT - 256];
    uint8_t hdr[TS_RESULT_HDR];
    uint64_t vlen = 0, plen, done = 0;
    uint32_t magic, status;
    double io_dl;
    int err = 0, io, rc = WEFT_SUCCESS;

    io = ts_wait(t, seq, "all", 0, 1, deadline > 0 ? deadline + TS_GRACE : 0.0);
    if (io < 0) return io;
    if (io == IO_TIMEOUT) {
        int missing = out ? 0 : ts_missing(t, seq, who, sizeof(who)); /* a broadcast waits for rank 0 alone */
        if (missing > 0)
            return weft_error(WEFT_ERR_TIMEOUT,
                              "torchstore bootstrap: %s at torchrun's agent store %s (bootstrap "
                              "round %llu, seen from rank %d)",
                              who, t->where, (unsigned long long)seq, t->rank);
        return weft_error(WEFT_ERR_TIMEOUT,
                          "torchstore bootstrap: rank %d: every rank arrived at bootstrap round %llu at torchrun's "
                          "agent store %s, but rank 0 did not publish the result by the deadline (+%.0f s): rank 0 "
                          "is hung or gone",
                          t->rank, (unsigned long long)seq, t->where, TS_GRACE);
    }
    io_dl = ts_io_deadline(deadline);
    tsbuf_t q = {0};
    tb_u8(&q, Q_GET);
    tb_key(&q, t, seq, "all", 0);
    io = tb_send(t, &q, 0, io_dl, &err);
    if (io == IO_OK) io = recv_u64(t, &vlen, io_dl, &err);
    if (io == IO_OK && vlen < TS_RESULT_HDR) {
        io = IO_ERROR;
        err = EPROTO;
    }
    if (io == IO_OK) io = weft_io_recv(t->fd, hdr, sizeof(hdr), io_dl, &err);
    if (io != IO_OK) return ts_broken(t, io, err, "reading rank 0's result");
    memcpy(&magic, hdr, 4);
    memcpy(&status, hdr + 4, 4);
    memcpy(&plen, hdr + 8, 8);
    magic = le32toh(magic);
    status = le32toh(status);
    plen = le64toh(plen);
    vlen -= TS_RESULT_HDR;
    if (out && magic == TS_RESULT_MAGIC && status == 0) total = plen; /* a broadcast: rank 0 says how much */
    if (magic != TS_RESULT_MAGIC || plen > TS_MAX_ROUND ||
        (status == 0 && (plen != total || vlen != (plen > TS_CHUNK - TS_RESULT_HDR ? TS_CHUNK - TS_RESULT_HDR : plen))))
        return weft_error(WEFT_ERR_BOOTSTRAP,
                          "torchstore bootstrap: rank %d: bootstrap round %llu's result at %s is not what rank 0 "
                          "writes (magic 0x%08x, %llu bytes, expected %llu): is another job using the same "
                          "TORCHELASTIC_RUN_ID on this store?",
                          t->rank, (unsigned long long)seq, t->where, magic, (unsigned long long)plen,
                          (unsigned long long)total);
    if (status != 0) {
        size_t n = vlen > TS_MAX_TEXT ? TS_MAX_TEXT : (size_t)vlen;
        char raw[TS_MAX_TEXT];
        io = weft_io_recv(t->fd, raw, n, io_dl, &err);
        if (io == IO_OK) io = recv_discard(t, vlen - n, io_dl, &err);
        if (io != IO_OK) return ts_broken(t, io, err, "reading rank 0's verdict");
        /* anything that reaches torch's store can write this key: printed escaped, bounded */
        weft_escape(text, sizeof(text) < 1024 ? sizeof(text) : 1024, raw, n);
        int st = (int)(int32_t)status;
        if (st != WEFT_ERR_TIMEOUT && st != WEFT_ERR_BOOTSTRAP && st != WEFT_ERR_ARG) st = WEFT_ERR_BOOTSTRAP;
        return weft_error(st, "torchstore bootstrap: %s", text);
    }
    if (out) {
        if (!(*out = malloc(plen ? (size_t)plen : 1))) {
            t->broken = 1; /* the value is still in the stream */
            return weft_error(WEFT_ERR_NO_MEMORY, "torchstore bootstrap: out of memory for %llu bytes",
                              (unsigned long long)plen);
        }
        *out_len = (size_t)plen;
        recv = *out;
    }
    /* The first chunk's payload, then the others in one request. */
    if (vlen) io = weft_io_recv(t->fd, recv, (size_t)vlen, io_dl, &err);
    long nchunks = (long)((TS_RESULT_HDR + plen + TS_CHUNK - 1) / TS_CHUNK);
    if (io == IO_OK && nchunks > 1) {
        tb_u8(&q, Q_MULTI_GET);
        tb_u64(&q, (uint64_t)(nchunks - 1));
        for (long c = 1; c < nchunks; c++)
            tb_key(&q, t, seq, "all", c);
        io = tb_send(t, &q, 0, io_dl, &err);
        for (long c = 1; c < nchunks && io == IO_OK; c++) {
            uint64_t off = (uint64_t)c * TS_CHUNK - TS_RESULT_HDR, n = 0;
            uint64_t want = plen - off > TS_CHUNK ? TS_CHUNK : plen - off;
            io = recv_u64(t, &n, io_dl, &err);
            if (io == IO_OK && n != want) {
                io = IO_ERROR;
                err = EPROTO;
            }
            if (io == IO_OK) io = weft_io_recv(t->fd, (uint8_t *)recv + off, (size_t)n, io_dl, &err);
        }
    }
    /* Count the readers; the last one cleans up after the round. */
    if (io == IO_OK) {
        tb_u8(&q, Q_ADD);
        tb_key(&q, t, seq, "done", -1);
        tb_u64(&q, 1);
        io = tb_send(t, &q, 0, io_dl, &err);
        if (io == IO_OK) io = recv_u64(t, &done, io_dl, &err);
    }
    if (io != IO_OK) {
        if (out) {
            free(*out);
            *out = NULL;
        }
        return ts_broken(t, io, err, "reading rank 0's result");
    }
    if (done == (uint64_t)t->size - 1) {
        WEFT_CHECK_GOTO(ts_delete(t, seq, "all", 0, nchunks, io_dl), rc, out);
        WEFT_CHECK_GOTO(ts_delete(t, seq, "done", -1, 0, io_dl), rc, out);
    }
out:
    return rc;
}

static int ts_allgather(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline)
{
    ts_boot_t *t = bs ? bs->impl : NULL;
    uint64_t seq;

    if (!t || t->fd < 0) return weft_error(WEFT_ERR_ARG, "torchstore bootstrap: allgather on a closed bootstrap");
    if (t->broken)
        return weft_error(WEFT_ERR_PEER_LOST,
                          "torchstore bootstrap: the connection to torchrun's agent store at %s broke in an earlier "
                          "round",
                          t->where);
    if ((uint64_t)len > TS_MAX_VALUE - TS_RESULT_HDR || (uint64_t)len * (uint64_t)t->size > TS_MAX_ROUND)
        return weft_error(WEFT_ERR_ARG,
                          "torchstore bootstrap: allgather of %zu bytes per rank x %d ranks is over the limits "
                          "(%llu per rank, torch's store's value limit; %llu per round)",
                          len, t->size, (unsigned long long)(TS_MAX_VALUE - TS_RESULT_HDR),
                          (unsigned long long)TS_MAX_ROUND);
    if (len > 0 && (!send || !recv))
        return weft_error(WEFT_ERR_ARG, "torchstore bootstrap: allgather with a NULL buffer");
    if (t->size == 1) {
        if (len) memcpy(recv, send, len);
        return WEFT_SUCCESS;
    }
    seq = t->seq++;
    int rc = ts_set(t, seq, "r", t->rank, send, len, NULL, 0, ts_io_deadline(deadline));
    if (rc != WEFT_SUCCESS) return rc;
    if (t->rank != 0) return ts_fetch(t, seq, recv, (uint64_t)len * (uint64_t)t->size, NULL, NULL, deadline);
    if (len) memcpy(recv, send, len);
    return ts_gather(t, seq, recv, len, 1, deadline);
}

/* Checks a request can go out on t. */
static int ts_usable(ts_boot_t *t, const char *what)
{
    if (!t || t->fd < 0) return weft_error(WEFT_ERR_ARG, "torchstore bootstrap: %s on a closed bootstrap", what);
    if (t->broken)
        return weft_error(WEFT_ERR_PEER_LOST,
                          "torchstore bootstrap: the connection to torchrun's agent store at %s broke in an earlier "
                          "round",
                          t->where);
    return WEFT_SUCCESS;
}

/* A gather at rank 0: every rank SETs its block, rank 0 reads them all and
 * publishes only that the round is complete (or who never came). */
static int ts_gather_root(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline)
{
    ts_boot_t *t = bs ? bs->impl : NULL;
    int rc = ts_usable(t, "gather");
    if (rc) return rc;
    if ((uint64_t)len > TS_MAX_VALUE || (uint64_t)len * (uint64_t)t->size > TS_MAX_ROUND)
        return weft_error(WEFT_ERR_ARG, "torchstore bootstrap: a gather of %zu bytes per rank x %d ranks is over the "
                          "limits", len, t->size);
    if (len > 0 && (!send || (t->rank == 0 && !recv)))
        return weft_error(WEFT_ERR_ARG, "torchstore bootstrap: gather with a NULL buffer");
    if (t->size == 1) {
        if (len) memcpy(recv, send, len);
        return WEFT_SUCCESS;
    }
    uint64_t seq = t->seq++;
    if ((rc = ts_set(t, seq, "r", t->rank, send, len, NULL, 0, ts_io_deadline(deadline))) != WEFT_SUCCESS) return rc;
    if (t->rank != 0) return ts_fetch(t, seq, NULL, 0, NULL, NULL, deadline);
    if (len) memcpy(recv, send, len);
    return ts_gather(t, seq, recv, len, 0, deadline);
}

/* A broadcast from rank 0: it publishes, the others read. */
static int ts_bcast(weft_bootstrap_t *bs, const void *send, size_t len, void **out, size_t *out_len, double deadline)
{
    ts_boot_t *t = bs ? bs->impl : NULL;
    int rc = ts_usable(t, "broadcast");
    *out = NULL;
    *out_len = 0;
    if (rc) return rc;
    if (t->rank == 0 && (uint64_t)len > TS_MAX_ROUND)
        return weft_error(WEFT_ERR_ARG, "torchstore bootstrap: a broadcast of %zu bytes is over the limit", len);
    if (t->size == 1) return WEFT_SUCCESS;
    uint64_t seq = t->seq++;
    if (t->rank != 0) return ts_fetch(t, seq, NULL, 0, out, out_len, deadline);
    return ts_publish(t, seq, WEFT_SUCCESS, send, len, ts_io_deadline(deadline));
}

static int ts_barrier(weft_bootstrap_t *bs, double deadline)
{
    return ts_allgather(bs, NULL, NULL, 0, deadline);
}

/* A rank's blob: P/0/addr<rank>, kept until that rank finalizes. */
static int ts_put(weft_bootstrap_t *bs, const void *blob, size_t len, double deadline)
{
    ts_boot_t *t = bs ? bs->impl : NULL;
    int rc = ts_usable(t, "publishing");
    if (rc) return rc;
    if ((uint64_t)len > TS_MAX_VALUE)
        return weft_error(WEFT_ERR_ARG, "torchstore bootstrap: a blob of %zu bytes cannot be published", len);
    if ((rc = ts_set(t, 0, "addr", t->rank, blob, len, NULL, 0, ts_io_deadline(deadline))) == WEFT_SUCCESS)
        t->published = 1;
    return rc;
}

/* WAITs for the ranks' blobs, then reads them in one MULTI_GET. */
static int ts_get(weft_bootstrap_t *bs, const int *ranks, int n, void **blobs, size_t *lens, double deadline)
{
    ts_boot_t *t = bs ? bs->impl : NULL;
    long idx[WEFT_BOOTSTRAP_GET_MAX];
    int rc = ts_usable(t, "fetching addresses"), err = 0, io;
    if (rc) return rc;
    for (int i = 0; i < n; i++)
        idx[i] = ranks[i];
    io = ts_wait_keys(t, 0, "addr", idx, 0, n, deadline);
    if (io < 0) return io;
    if (io == IO_TIMEOUT)
        return weft_error(WEFT_ERR_TIMEOUT,
                          "torchstore bootstrap: rank %d%s had not published its address at torchrun's agent store %s "
                          "by the deadline",
                          ranks[0], n > 1 ? " (or another of those fetched with it)" : "", t->where);
    double io_dl = ts_io_deadline(deadline);
    tsbuf_t q = {0};
    tb_u8(&q, Q_MULTI_GET);
    tb_u64(&q, (uint64_t)n);
    for (int i = 0; i < n; i++)
        tb_key(&q, t, 0, "addr", idx[i]);
    io = tb_send(t, &q, 0, io_dl, &err);
    for (int i = 0; i < n && io == IO_OK; i++) {
        uint64_t vlen = 0;
        if ((io = recv_u64(t, &vlen, io_dl, &err)) != IO_OK) break;
        if (vlen > TS_MAX_VALUE) {
            io = IO_ERROR;
            err = EPROTO;
            break;
        }
        if (!(blobs[i] = malloc(vlen ? (size_t)vlen : 1))) {
            io = IO_ERROR;
            err = ENOMEM;
            break;
        }
        lens[i] = (size_t)vlen;
        if (vlen) io = weft_io_recv(t->fd, blobs[i], (size_t)vlen, io_dl, &err);
    }
    if (io != IO_OK) {
        for (int i = 0; i < n; i++) {
            free(blobs[i]);
            blobs[i] = NULL;
        }
        return ts_broken(t, io, err, "reading addresses");
    }
    return WEFT_SUCCESS;
}

static void ts_finalize(weft_bootstrap_t *bs, int graceful, double deadline)
{
    ts_boot_t *t = bs ? bs->impl : NULL;
    (void)deadline;
    if (!t) return;
    /* After the closing barrier nobody fetches this rank's address any more. */
    if (graceful && t->published && !t->broken && t->fd >= 0)
        (void)ts_delete(t, 0, "addr", t->rank, t->rank + 1, weft_wtime() + TS_GRACE);
    if (t->fd >= 0) close(t->fd);
    free(t);
    bs->impl = NULL;
}

/* ---- connecting ---------------------------------------------------------- */

/* VALIDATE, then a PING whose echo proves a TCPStore listens there. */
static int ts_greet(int fd, void *ctx, double deadline, char *why, size_t cap)
{
    ts_boot_t *t = ctx;
    tsbuf_t b = {0};
    uint32_t nonce = (uint32_t)getpid() ^ ((uint32_t)t->rank << 16) ^ 0x5eedu, echo = 0;
    double start = weft_wtime(), until = start + TS_PING_TIMEOUT;
    int err = 0, io;

    if (deadline > 0 && deadline + TS_GRACE < until) until = deadline + TS_GRACE;
    tb_u8(&b, Q_VALIDATE);
    tb_u32(&b, TS_VALIDATE_MAGIC);
    tb_u8(&b, Q_PING);
    tb_u32(&b, nonce);
    io = b.oom ? IO_ERROR : weft_io_send(fd, b.p, b.len, 0, until, &err);
    free(b.p);
    if (io == IO_OK) io = weft_io_recv(fd, &echo, 4, until, &err);
    if (io == IO_CLOSED || io == IO_ERROR) {
        /* A store that is starting or shedding load; the deadline decides. */
        snprintf(why, cap, "the service closed the connection before answering torch's TCPStore ping (%s)",
                 err ? strerror(err) : "end of stream");
        return 1;
    }
    if (io == IO_TIMEOUT)
        return weft_error(WEFT_ERR_BOOTSTRAP,
                          "torchstore bootstrap: rank %d connected to %s, but it did not answer torch's TCPStore "
                          "ping within %.1f s: is MASTER_PORT torchrun's agent store? (TORCHELASTIC_USE_AGENT_STORE "
                          "says it is)",
                          t->rank, t->where, weft_wtime() - start);
    if (le32toh(echo) != nonce)
        return weft_error(WEFT_ERR_BOOTSTRAP,
                          "torchstore bootstrap: rank %d: the service at %s is not a torch TCPStore (it answered the "
                          "ping with 0x%08x, not 0x%08x)",
                          t->rank, t->where, le32toh(echo), nonce);
    return WEFT_SUCCESS;
}

int weft_bootstrap_torchstore_detected(void)
{
    const char *v = getenv("TORCHELASTIC_USE_AGENT_STORE");
    /* torch itself tests for "True" (Python's str(True)). */
    return v && (!strcasecmp(v, "true") || !strcmp(v, "1")) && weft_bootstrap_env_detected();
}

int weft_bootstrap_torchstore_init(weft_bootstrap_t *bs, double deadline)
{
    ts_boot_t *t = NULL;
    env_vars_t v;
    const char *run = getenv("TORCHELASTIC_RUN_ID"), *restart = getenv("TORCHELASTIC_RESTART_COUNT");
    char *end = NULL;
    int rc;

    if (!bs) return weft_error(WEFT_ERR_ARG, "torchstore bootstrap: NULL bootstrap");
    WEFT_CHECK_GOTO(weft_env_vars_read(&v, "torchstore bootstrap"), rc, out);
    if (!run || !*run) run = "none";
    if (!restart || !*restart) restart = "0";
    errno = 0;
    long long attempt = strtoll(restart, &end, 10);
    if (*end || errno || attempt < 0) {
        rc = weft_error(WEFT_ERR_ARG, "torchstore bootstrap: TORCHELASTIC_RESTART_COUNT='%.32s' is not a count",
                        restart);
        goto out;
    }
    if (strlen(run) > TS_RUN_ID_MAX) {
        rc = weft_error(WEFT_ERR_ARG, "torchstore bootstrap: TORCHELASTIC_RUN_ID is longer than %d characters",
                        TS_RUN_ID_MAX);
        goto out;
    }
    if (!(t = calloc(1, sizeof(*t)))) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "torchstore bootstrap: out of memory");
        goto out;
    }
    t->fd = -1;
    t->rank = v.rank;
    t->size = v.size;
    t->port = v.port;
    snprintf(t->addr, sizeof(t->addr), "%s", v.addr);
    snprintf(t->where, sizeof(t->where), "%s", v.where);
    snprintf(t->prefix, sizeof(t->prefix), "/weft/%s/%lld/%u", run, attempt, ts_inits++);
    weft_dial_t d = {
        .who = "torchstore bootstrap",
        .rank = t->rank,
        .what = "torchrun's agent store",
        .host = t->addr,
        .port = t->port,
        .greet = ts_greet,
        .ctx = t,
        .hint = "Is torchrun's agent running, and do MASTER_ADDR and MASTER_PORT point at its store?",
    };
    WEFT_CHECK_GOTO(weft_dial(&d, deadline, &t->fd), rc, out);
    weft_debug("torchstore bootstrap: rank %d of %d uses torchrun's agent store at %s, keys %s/...", t->rank, t->size,
               t->where, t->prefix);

    bs->name = "torchstore";
    bs->rank = t->rank;
    bs->size = t->size;
    bs->local_rank = v.local_rank;
    bs->local_size = v.local_size;
    bs->allgather = ts_allgather;
    bs->gather = ts_gather_root;
    bs->bcast = ts_bcast;
    bs->barrier = ts_barrier;
    bs->put = ts_put;
    bs->get = ts_get;
    bs->finalize = ts_finalize;
    bs->impl = t;
    return WEFT_SUCCESS;
out:
    free(t);
    return rc;
}
