/* TCP for the bootstraps that talk to a store (env_client.c, torchstore.c):
 * deadline-bounded waits, sends and receives; name resolution that gives up
 * at a deadline; and connecting to a service that may not exist yet. In
 * Kubernetes the master's service name resolves only once its pod is up,
 * and rank 0 or the agent may start late: weft_dial resolves and connects
 * with backoff until the deadline and, when it gives up, says what it
 * tried (the name, what it resolved to, how connecting failed). */
#ifndef WEFT_BOOTSTRAP_SOCK_H
#define WEFT_BOOTSTRAP_SOCK_H

#include <netdb.h>
#include <stddef.h>
#include <sys/socket.h>

/* Outcome of one I/O step. */
enum { IO_OK = 0, IO_TIMEOUT, IO_CLOSED, IO_ERROR };

/* Waits for `events` on fd until io_deadline (weft_wtime() seconds; 0 =
 * forever). *err gets errno on IO_ERROR. */
int weft_io_wait(int fd, short events, double io_deadline, int *err);
/* Sends / receives exactly len bytes on a non-blocking socket. `more`:
 * more data follows at once (MSG_MORE). A peer that closed is IO_CLOSED. */
int weft_io_send(int fd, const void *buf, size_t len, int more, double io_deadline, int *err);
int weft_io_recv(int fd, void *buf, size_t len, double io_deadline, int *err);

/* getaddrinfo(host, port) for a TCP stream that gives up at `deadline`
 * (0: waits as long as the resolver does): the lookup runs on its own
 * thread, which is left to finish alone when the deadline passes. IO_OK
 * (*res to freeaddrinfo), IO_TIMEOUT, or IO_ERROR with *gai set. */
int weft_resolve(const char *host, int port, double deadline, struct addrinfo **res, int *gai);

/* The protocol's first exchange on a fresh connection. Returns
 * WEFT_SUCCESS, 1 to close and retry later (`why` says what happened), or
 * a weft error status (message set) to give up. */
typedef int (*weft_greet_fn)(int fd, void *ctx, double deadline, char *why, size_t cap);

typedef struct weft_dial {
    const char *who;  /* message prefix: "env bootstrap" */
    int rank;         /* the calling rank, for messages */
    const char *what; /* what is being reached: "rank 0's store" */
    const char *host; /* MASTER_ADDR as given: a name or an address */
    int port;
    const struct sockaddr *direct; /* non-NULL: connect here instead of resolving host */
    socklen_t direct_len;
    weft_greet_fn greet; /* NULL: connecting is enough */
    void *ctx;
    const char *hint; /* ends the timeout message: what to check */
} weft_dial_t;

/* Connects to d->host:d->port (or d->direct) and runs d->greet, retrying
 * with jittered backoff (10 ms doubling to 0.5 s) until `deadline`. On
 * success *fd is the connected, non-blocking socket (TCP_NODELAY set).
 * On timeout the WEFT_ERR_TIMEOUT message lists the lookups and what the
 * name resolved to, the connection attempts and the last error of each. */
int weft_dial(const weft_dial_t *d, double deadline, int *fd);

/* TCP_NODELAY: bootstrap exchanges are small request/response messages. */
void weft_sock_nodelay(int fd);

#endif
