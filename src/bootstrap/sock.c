/* TCP helpers of the store bootstraps (see sock.h): deadline-bounded I/O,
 * resolution with a deadline, and weft_dial's retry loop and report. */
#include "bootstrap/sock.h"

#include "weft_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DIAL_ATTEMPT_CAP 5.0 /* one connect may take this long: a black-holed address must not eat the deadline */
#define DIAL_BACKOFF_MIN 0.01
#define DIAL_BACKOFF_MAX 0.5

/* This thread's (the caller's of weft_finalize, never the store's). */
static __thread void (*idle_hook)(void);

void weft_bootstrap_set_idle_hook(void (*fn)(void))
{
    idle_hook = fn;
}

void weft_bootstrap_idle(void)
{
    if (idle_hook) idle_hook();
}

#define IDLE_HOOK_MS 2

int weft_io_wait(int fd, short events, double io_deadline, int *err)
{
    for (;;) {
        int ms = -1;
        if (io_deadline > 0) {
            double left = io_deadline - weft_wtime();
            if (left <= 0) return IO_TIMEOUT;
            ms = left > 3600.0 ? 3600000 : (int)(left * 1000.0) + 1;
        }
        if (idle_hook) {
            idle_hook();
            if (ms < 0 || ms > IDLE_HOOK_MS) ms = IDLE_HOOK_MS;
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

int weft_io_send(int fd, const void *buf, size_t len, int more, double io_deadline, int *err)
{
    const unsigned char *p = buf;
    while (len > 0) {
        ssize_t k = send(fd, p, len, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
        if (k > 0) {
            p += k;
            len -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int w = weft_io_wait(fd, POLLOUT, io_deadline, err);
            if (w != IO_OK) return w;
            continue;
        }
        *err = errno;
        return (errno == EPIPE || errno == ECONNRESET) ? IO_CLOSED : IO_ERROR;
    }
    return IO_OK;
}

int weft_io_recv(int fd, void *buf, size_t len, double io_deadline, int *err)
{
    unsigned char *p = buf;
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
            int w = weft_io_wait(fd, POLLIN, io_deadline, err);
            if (w != IO_OK) return w;
            continue;
        }
        *err = errno;
        return errno == ECONNRESET ? IO_CLOSED : IO_ERROR;
    }
    return IO_OK;
}

void weft_sock_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- resolution with a deadline ----------------------------------------- */

/* A lookup shared by the caller and its thread; whoever lets go last frees
 * it, so a caller that gave up at its deadline need not wait for DNS. */
typedef struct lookup {
    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    int refs;
    int done;
    int gai;
    struct addrinfo *res;
    char host[256];
    char port[16];
} lookup_t;

static void lookup_put(lookup_t *l)
{
    pthread_mutex_lock(&l->lock);
    int last = --l->refs == 0;
    pthread_mutex_unlock(&l->lock);
    if (!last) return;
    if (l->res) freeaddrinfo(l->res);
    pthread_cond_destroy(&l->done_cv);
    pthread_mutex_destroy(&l->lock);
    free(l);
}

static void lookup_run(lookup_t *l)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(l->host, l->port, &hints, &res);
    pthread_mutex_lock(&l->lock);
    l->gai = gai;
    l->res = gai == 0 ? res : NULL;
    l->done = 1;
    pthread_cond_signal(&l->done_cv);
    pthread_mutex_unlock(&l->lock);
}

static void *lookup_main(void *arg)
{
    lookup_run(arg);
    lookup_put(arg);
    return NULL;
}

int weft_resolve(const char *host, int port, double deadline, struct addrinfo **res, int *gai)
{
    pthread_condattr_t ca;
    pthread_attr_t ta;
    pthread_t tid;
    int rc = IO_OK, started;

    *res = NULL;
    *gai = 0;
    /* An address needs no resolver, nor a thread. */
    struct addrinfo numeric = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    if (getaddrinfo(host, portstr, &numeric, res) == 0) return IO_OK;
    *res = NULL;
    lookup_t *l = calloc(1, sizeof(*l));
    if (!l) {
        *gai = EAI_MEMORY;
        return IO_ERROR;
    }
    snprintf(l->host, sizeof(l->host), "%s", host);
    memcpy(l->port, portstr, sizeof(l->port));
    pthread_mutex_init(&l->lock, NULL);
    /* The deadline is weft_wtime()'s clock. */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    l->refs = 2;
    pthread_attr_init(&ta);
    pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
    started = weft_thread_start(&tid, &ta, lookup_main, l, NULL) == 0;
    pthread_attr_destroy(&ta);
    if (!started) {
        /* No thread to spare: look up inline (the deadline then only bounds the retries). */
        l->refs = 1;
        lookup_run(l);
    }
    pthread_mutex_lock(&l->lock);
    while (!l->done) {
        if (deadline <= 0) {
            pthread_cond_wait(&l->done_cv, &l->lock);
            continue;
        }
        struct timespec ts = {.tv_sec = (time_t)deadline};
        ts.tv_nsec = (long)((deadline - (double)ts.tv_sec) * 1e9);
        if (pthread_cond_timedwait(&l->done_cv, &l->lock, &ts) == ETIMEDOUT && !l->done) break;
    }
    if (!l->done) {
        rc = IO_TIMEOUT;
    } else if (l->gai != 0) {
        *gai = l->gai;
        rc = IO_ERROR;
    } else {
        *res = l->res; /* the caller's now */
        l->res = NULL;
    }
    pthread_mutex_unlock(&l->lock);
    lookup_put(l);
    return rc;
}

/* ---- connecting, with a record of what was tried ------------------------- */

/* Appends to buf at *used; truncation is fine for messages. */
static void appendf(char *buf, size_t cap, size_t *used, const char *fmt, ...) WEFT_PRINTF(4, 5);
static void appendf(char *buf, size_t cap, size_t *used, const char *fmt, ...)
{
    va_list ap;
    if (*used + 1 >= cap) return;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *used, cap - *used, fmt, ap);
    va_end(ap);
    if (k > 0) *used += (size_t)k < cap - *used ? (size_t)k : cap - *used - 1;
}

typedef struct dial_log {
    int attempts;
    int lookups, lookup_failures, lookup_timeouts;
    char lookup_err[128]; /* the last failed lookup's error */
    char resolved[200];   /* what the last successful lookup gave */
    int connects, connect_failures;
    char connect_err[200]; /* "10.0.0.5:29500: Connection refused" */
    int greet_retries;
    char greet_err[256];
} dial_log_t;

static void format_addr(const struct sockaddr *sa, socklen_t len, char *buf, size_t cap, int with_port)
{
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    size_t used = 0;
    buf[0] = '\0';
    if (getnameinfo(sa, len, host, sizeof(host), serv, sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        appendf(buf, cap, &used, "(unprintable address)");
    else if (!with_port)
        appendf(buf, cap, &used, "%s", host);
    else if (sa->sa_family == AF_INET6)
        appendf(buf, cap, &used, "[%s]:%s", host, serv);
    else
        appendf(buf, cap, &used, "%s:%s", host, serv);
}

/* "10.0.0.5, fd00::5": the distinct addresses of a lookup. */
static void format_resolved(const struct addrinfo *res, char *buf, size_t cap)
{
    size_t used = 0;
    int shown = 0, more = 0;
    char seen[4][NI_MAXHOST];
    buf[0] = '\0';
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        char a[NI_MAXHOST];
        int dup = 0;
        format_addr(ai->ai_addr, ai->ai_addrlen, a, sizeof(a), 0);
        for (int i = 0; i < shown && !dup; i++)
            dup = !strcmp(seen[i], a);
        if (dup) continue;
        if (shown == 4) {
            more++;
            continue;
        }
        memcpy(seen[shown++], a, sizeof(seen[0]));
        appendf(buf, cap, &used, "%s%s", used ? ", " : "", a);
    }
    if (more) appendf(buf, cap, &used, " and %d more", more);
}

/* One connection to one address, capped so that a black hole cannot eat the
 * deadline. Returns the fd or -1 with *err set. */
static int connect_one(const struct sockaddr *sa, socklen_t len, double deadline, int *err)
{
    socklen_t el = sizeof(*err);
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    *err = 0;
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if (connect(fd, sa, len) != 0) {
        if (errno != EINPROGRESS) {
            *err = errno;
        } else {
            double until = weft_wtime() + DIAL_ATTEMPT_CAP;
            if (deadline > 0 && deadline < until) until = deadline;
            int w = weft_io_wait(fd, POLLOUT, until, err);
            if (w == IO_TIMEOUT)
                *err = ETIMEDOUT;
            else if (w == IO_OK && getsockopt(fd, SOL_SOCKET, SO_ERROR, err, &el) != 0)
                *err = errno;
        }
    }
    if (*err != 0) {
        close(fd);
        return -1;
    }
    weft_sock_nodelay(fd);
    return fd;
}

/* One round: resolve (unless direct), then each address in turn until one
 * connects. Returns the fd or -1; the log says what happened. */
static int dial_once(const weft_dial_t *d, double deadline, dial_log_t *log)
{
    struct addrinfo *res = NULL, direct = {0};
    int fd = -1, gai = 0, err = 0;

    if (d->direct) {
        direct.ai_family = d->direct->sa_family;
        direct.ai_addr = (struct sockaddr *)d->direct;
        direct.ai_addrlen = d->direct_len;
    } else {
        /* Looked up on every round: a Kubernetes service name appears late. */
        log->lookups++;
        int r = weft_resolve(d->host, d->port, deadline, &res, &gai);
        if (r == IO_TIMEOUT) {
            log->lookup_timeouts++; /* not an answer: keep the last real error */
            return -1;
        }
        if (r != IO_OK) {
            size_t used = 0;
            log->lookup_failures++;
            appendf(log->lookup_err, sizeof(log->lookup_err), &used, "%s",
                    gai == EAI_SYSTEM ? strerror(errno) : gai_strerror(gai));
            return -1;
        }
        format_resolved(res, log->resolved, sizeof(log->resolved));
    }
    for (const struct addrinfo *ai = d->direct ? &direct : res; ai && fd < 0; ai = ai->ai_next) {
        if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6 && !(d->direct && ai->ai_family == AF_UNIX)) continue;
        log->connects++;
        fd = connect_one(ai->ai_addr, ai->ai_addrlen, deadline, &err);
        if (fd < 0) {
            char a[NI_MAXHOST + 16];
            log->connect_failures++;
            format_addr(ai->ai_addr, ai->ai_addrlen, a, sizeof(a), 1);
            size_t used = 0;
            appendf(log->connect_err, sizeof(log->connect_err), &used, "%s: %s", a, strerror(err));
        }
    }
    if (res) freeaddrinfo(res);
    return fd;
}

static int is_address(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

static int dial_timeout(const weft_dial_t *d, const dial_log_t *log, double waited)
{
    char tried[1024];
    size_t used = 0;

    tried[0] = '\0';
    if (!d->direct && !is_address(d->host)) {
        appendf(tried, sizeof(tried), &used, "name '%s': %d lookups", d->host, log->lookups);
        if (log->lookup_failures)
            appendf(tried, sizeof(tried), &used, ", %d failed (last: %s)", log->lookup_failures, log->lookup_err);
        if (log->lookup_timeouts)
            appendf(tried, sizeof(tried), &used, ", %d unanswered by the deadline", log->lookup_timeouts);
        if (log->resolved[0])
            appendf(tried, sizeof(tried), &used, ", resolved to %s", log->resolved);
        else
            appendf(tried, sizeof(tried), &used, ", never resolved");
    }
    if (log->connects) {
        appendf(tried, sizeof(tried), &used, "%s%d connection attempts to port %d", used ? "; " : "", log->connects,
                d->port);
        if (log->connect_failures)
            appendf(tried, sizeof(tried), &used, ", %d failed (last: %s)", log->connect_failures, log->connect_err);
    } else if (d->direct || log->resolved[0]) {
        appendf(tried, sizeof(tried), &used, "%sno connection attempted", used ? "; " : "");
    }
    if (log->greet_retries)
        appendf(tried, sizeof(tried), &used, "; %d connections dropped (last: %s)", log->greet_retries, log->greet_err);
    return weft_error(
        WEFT_ERR_TIMEOUT, "%s: rank %d could not reach %s at %s:%d within %.1f s (%d attempts). Tried: %s.%s%s", d->who,
        d->rank, d->what, d->host, d->port, waited, log->attempts, tried, d->hint ? " " : "", d->hint ? d->hint : "");
}

int weft_dial(const weft_dial_t *d, double deadline, int *fd_out)
{
    double start = weft_wtime(), backoff = DIAL_BACKOFF_MIN;
    unsigned seed = (unsigned)getpid() ^ (unsigned)d->rank * 2654435761u;
    dial_log_t log;

    memset(&log, 0, sizeof(log));
    *fd_out = -1;
    for (;;) {
        int fd = dial_once(d, deadline, &log);
        log.attempts++;
        if (fd >= 0) {
            int rc = d->greet ? d->greet(fd, d->ctx, deadline, log.greet_err, sizeof(log.greet_err)) : WEFT_SUCCESS;
            if (rc == WEFT_SUCCESS) {
                *fd_out = fd;
                weft_debug("%s: rank %d reached %s at %s:%d after %d attempts (%.2f s)", d->who, d->rank, d->what,
                           d->host, d->port, log.attempts, weft_wtime() - start);
                return WEFT_SUCCESS;
            }
            close(fd);
            if (rc < 0) return rc;
            log.greet_retries++;
        }
        double now = weft_wtime();
        if (deadline > 0 && now >= deadline) return dial_timeout(d, &log, now - start);
        /* Back off with jitter, so thousands of ranks do not knock in step. */
        double pause = backoff * (0.5 + (double)rand_r(&seed) / RAND_MAX);
        if (deadline > 0 && now + pause > deadline) pause = deadline - now;
        struct timespec ts = {.tv_sec = (time_t)pause, .tv_nsec = (long)((pause - (double)(time_t)pause) * 1e9)};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > DIAL_BACKOFF_MAX ? DIAL_BACKOFF_MAX : backoff * 2;
        /* An attempt started at the deadline could only time out, and its
         * report would hide the real reason of the attempts before it. */
        now = weft_wtime();
        if (deadline > 0 && now >= deadline) return dial_timeout(d, &log, now - start);
    }
}
