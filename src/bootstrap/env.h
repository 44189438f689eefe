/* What the env bootstrap's files share: a rank's bootstrap state, rank 0's
 * store as env.c and the client see it (start, stop, its own address), and
 * the client's entry points that env.c wires into the vtable. The wire
 * protocol itself is in env_wire.h. */
#ifndef WEFT_BOOTSTRAP_ENV_H
#define WEFT_BOOTSTRAP_ENV_H

#include "bootstrap/bootstrap.h"
#include "bootstrap/env_wire.h"
#include "bootstrap/jobkey.h"

#include <netdb.h>
#include <pthread.h>

/* The variables an env-style launcher sets (weftrun, torchrun, a
 * Kubernetes operator), read and checked by env.c for both the env and
 * the torchstore bootstrap. */
typedef struct env_vars {
    int rank, size, port;       /* RANK, WORLD_SIZE, MASTER_PORT */
    int local_rank, local_size; /* LOCAL_RANK, LOCAL_WORLD_SIZE; -1 when unset */
    char addr[256];             /* MASTER_ADDR */
    char where[300];            /* "MASTER_ADDR:MASTER_PORT" for messages */
} env_vars_t;

/* Fills *v, or fails with WEFT_ERR_ARG naming the variable; `who`
 * prefixes the message ("env bootstrap"). */
int weft_env_vars_read(env_vars_t *v, const char *who);

/* Rank 0's store (env_server.c); its fields are private to that file. */
typedef struct server server_t;

/* What the store has handled so far: the load on the busiest process of a
 * job (contrib/scale measures it). */
typedef struct weft_store_stats {
    uint64_t accepted;   /* connections accepted (ranks, retries, strangers) */
    uint64_t peak_conns; /* the most open at once */
    uint64_t bytes_in;   /* received from every connection */
    uint64_t bytes_out;  /* sent to every connection */
} weft_store_stats_t;

typedef struct env_boot {
    int fd;
    int rank, size;
    uint64_t seq;
    int broken;                              /* a round ended mid-message: the stream cannot be trusted */
    char broken_why[400];                    /* set when the stream ended outside a round (weft_env_poll_lost) */
    int first_lost;                          /* the first rank a LOST notice named (-1: none yet) ... */
    char first_lost_why[STORE_MAX_TEXT + 1]; /* ... and why */
    char addr[256];
    int port;
    char where[300];
    weft_job_key_t key; /* what this rank proves membership with */
    int no_lost;        /* a rendezvous that cannot become the world's: no LOST notices asked for, and nobody's
                           loss reported to the world (its ranks are not world ranks) */
    server_t *srv;
    pthread_t thread;
    struct relay *relay; /* the node relay this rank serves (its node's first rank), or NULL */
    int via_leader;      /* >= 0: reach the store through the node relay of this rank, falling back to direct */
} env_boot_t;

/* ---- the store (env_server.c) ------------------------------------------ */

/* What rank 0's store serves, and where. */
typedef struct env_serve {
    int size;                  /* WORLD_SIZE */
    int local_size;            /* LOCAL_WORLD_SIZE; -1 when unset */
    const char *addr;          /* MASTER_ADDR: the store listens on its address(es) only */
    int port;                  /* MASTER_PORT */
    const char *where;         /* "MASTER_ADDR:MASTER_PORT" for messages */
    const weft_job_key_t *key; /* what connections must prove they know */
    int bind_any;              /* WEFT_STORE_BIND_ANY: every interface is allowed */
    double deadline;           /* for resolving MASTER_ADDR (0: none) */
    int listen_fd;             /* >= 0: a socket already bound and listening (a rendezvous): serve on it */
    int relay_nodes;           /* > 0: the ranks come through this many node relays (env_relay.c) */
} env_serve_t;

/* Serves the store from a new thread; fills *out and *thread. */
int weft_env_server_start(server_t **out, const env_serve_t *o, pthread_t *thread);
/* Stops the thread and frees the store. Graceful: wait until every rank
 * said goodbye or `deadline` passed. */
void weft_env_server_stop(server_t *s, pthread_t thread, int graceful, double deadline);
/* Copies the store's counters (any thread, while it runs). */
void weft_env_server_stats(server_t *s, weft_store_stats_t *out);
/* The counters of the store this rank serves: WEFT_SUCCESS, or
 * WEFT_ERR_UNSUPPORTED when bs is not the env bootstrap of rank 0. */
int weft_bootstrap_env_store_stats(weft_bootstrap_t *bs, weft_store_stats_t *out);
/* Fills ai's family, address and length with where this process's own
 * client connects (loopback when the store took the wildcard address). */
void weft_env_server_self(server_t *s, struct addrinfo *ai);

/* ---- node relays (env_relay.c) ------------------------------------------ */

typedef struct relay weft_relay_t;
/* Starts the relay of the node led by `leader` (this rank) for up to
 * local_size ranks; it reaches eb's store by `deadline`. *out stays NULL
 * (and WEFT_SUCCESS) when its name is taken: the node's ranks then use the
 * relay holding it, or the store. */
int weft_env_relay_start(weft_relay_t **out, const env_boot_t *eb, int leader, int local_size, double deadline);
/* Graceful: wait until every member's route ended or `deadline` passed. */
void weft_env_relay_stop(weft_relay_t *r, int graceful, double deadline);

/* ---- the client (env_client.c) ----------------------------------------- */

/* Connects eb to the store and says HELLO, retrying until `deadline`. */
int weft_env_client_connect(env_boot_t *eb, double deadline);
/* The vtable's allgather, gather, bcast, barrier, put, get, poll_lost and finalize. */
int weft_env_allgather(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline);
int weft_env_gather(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline);
int weft_env_bcast(weft_bootstrap_t *bs, const void *send, size_t len, void **out, size_t *out_len, double deadline);
int weft_env_barrier(weft_bootstrap_t *bs, double deadline);
int weft_env_put(weft_bootstrap_t *bs, const void *blob, size_t len, double deadline);
int weft_env_get(weft_bootstrap_t *bs, const int *ranks, int n, void **blobs, size_t *lens, double deadline);
void weft_env_poll_lost(weft_bootstrap_t *bs, double blocked_s);
void weft_env_finalize(weft_bootstrap_t *bs, int graceful, double deadline);
/* Stops rank 0's store (if this rank serves it), closes and frees eb. */
void weft_env_free(env_boot_t *eb, int graceful, double deadline);

#endif
