/* How ranks find each other. One vtable, five implementations:
 * pmix.c (mpirun / prterun / srun --mpi=pmix), torchstore.c (torchrun's
 * workers: RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT name the agent's
 * torch TCPStore, every rank is its client), env.c (the same variables
 * without an agent store: rank 0 serves a TCP store), oob.c (a host code's
 * allgather callback), single.c (one rank); env.c also runs on a
 * rendezvous handle (rendezvous.c: weft_comm_join's store, its address and
 * secret in the handle). bootstrap.c picks one. */
#ifndef WEFT_BOOTSTRAP_H
#define WEFT_BOOTSTRAP_H

#include "weft.h"

#include <stddef.h>
#include <stdint.h>

typedef struct weft_bootstrap weft_bootstrap_t;

struct weft_bootstrap {
    const char *name; /* "pmix", "torchstore", "env", "oob", "single" */
    int rank;
    int size;
    int local_rank; /* -1 when the bootstrap does not know */
    int local_size; /* -1 when the bootstrap does not know */
    /* Gathers `len` bytes from every rank into recv (rank-major). Every rank
     * passes the same len. Fails with WEFT_ERR_TIMEOUT when `deadline`
     * (weft_wtime() seconds; <= 0 means none) passes; the error message
     * (weft_set_error) names the ranks that did not arrive when known. */
    int (*allgather)(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline);
    /* Releases the bootstrap. Collective when `graceful` (all ranks call it). */
    void (*finalize)(weft_bootstrap_t *bs, int graceful, double deadline);
    /* Ends the whole job when the launcher can (NULL: it cannot; the caller
     * exits and relies on the launcher to end the other ranks). */
    void (*abort)(weft_bootstrap_t *bs, int code, const char *msg);
    /* Reports the ranks the bootstrap has learnt are dead since the last
     * call, through weft_rank_lost, without blocking (NULL: it learns
     * nothing of the kind). Called by idle waits, every few milliseconds;
     * blocked_s: how long the calling wait has waited so far (0: unknown). */
    void (*poll_lost)(weft_bootstrap_t *bs, double blocked_s);
    /* Optional: a barrier cheaper than an allgather of one byte (NULL: the
     * allgather is used). */
    int (*barrier)(weft_bootstrap_t *bs, double deadline);
    /* The scalable exchanges (each optional: NULL means the wrapper below
     * builds it on the allgather, at O(size) bytes per rank). What they are
     * for: init's node map is gathered at rank 0, which computes it, and
     * broadcast compressed; each rank publishes its UCX address, and a rank
     * fetches a peer's when it first makes an endpoint to it. So no rank,
     * and not rank 0's store, handles more than O(size) bytes.
     * gather: `len` bytes from every rank into rank 0's recv (size * len,
     * rank-major; recv unused elsewhere); every rank passes the same len. */
    int (*gather)(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline);
    /* bcast: rank 0's `len` bytes (send) to every rank: the others get a
     * malloc'd copy in *out and its length in *out_len (len unused there). */
    int (*bcast)(weft_bootstrap_t *bs, const void *send, size_t len, void **out, size_t *out_len, double deadline);
    /* put: publishes this rank's blob (once per rank, at init). get: the
     * published blobs of ranks[0..n-1] (distinct, n <= WEFT_BOOTSTRAP_GET_MAX),
     * each malloc'd into blobs[i]; waits for them until the deadline. On
     * failure every blobs[i] is NULL. */
    int (*put)(weft_bootstrap_t *bs, const void *blob, size_t len, double deadline);
    int (*get)(weft_bootstrap_t *bs, const int *ranks, int n, void **blobs, size_t *lens, double deadline);
    /* What the wrappers' allgather-based put keeps (every rank's blob). */
    void *published;
    size_t *published_lens, published_stride;
    void *impl;
};

/* Constructors: fill *bs or return an error (message already set). */
int weft_bootstrap_single_init(weft_bootstrap_t *bs);
int weft_bootstrap_oob_init(weft_bootstrap_t *bs, int rank, int size, weft_oob_allgather_fn fn, void *ctx);
int weft_bootstrap_env_init(weft_bootstrap_t *bs, double deadline);
int weft_bootstrap_pmix_init(weft_bootstrap_t *bs, double deadline);
int weft_bootstrap_torchstore_init(weft_bootstrap_t *bs, double deadline);

/* A rendezvous handle's contents (rendezvous.c). */
#define WEFT_RDV_SECRET 32
typedef struct weft_rdv_info {
    char addr[64]; /* numeric address */
    int port;
    char where[80]; /* "addr:port" for messages */
    uint8_t secret[WEFT_RDV_SECRET];
} weft_rdv_info_t;
/* Checks and decodes a handle (WEFT_ERR_ARG naming fn when it is not one). */
int weft_rendezvous_parse(const weft_rendezvous_t *handle, weft_rdv_info_t *info, const char *fn);
/* The listening socket of a handle this process opened and nobody took
 * yet (the caller owns it from now on), or -1. */
int weft_rendezvous_take(const weft_rendezvous_t *handle);
/* The env bootstrap on a rendezvous (env.c): the store at info's address,
 * keyed by its secret; listen_fd >= 0: this process opened the handle and
 * serves the store on that socket (then rank must be 0). want_lost: ask
 * the store for LOST notices (only a bootstrap that may become the
 * world's). */
int weft_bootstrap_rendezvous_init(weft_bootstrap_t *bs, const weft_rdv_info_t *info, int rank, int size, int listen_fd,
                                   int want_lost, double deadline);

/* Environment probes used by automatic selection. */
int weft_bootstrap_env_detected(void);
int weft_bootstrap_pmix_detected(void);
/* Loads the PMIx client library (pmix_dl.c); an error naming why when it cannot. */
int weft_pmix_load(void);
int weft_bootstrap_torchstore_detected(void);

/* Starts the bootstrap `want` names (WEFT_BOOTSTRAP: auto, pmix,
 * torchstore, env, single). auto: a torchrun worker's variables first
 * (torchstore when the agent serves a store, else env), then PMIx, then
 * the env variables, then a singleton; env under torchrun with an agent
 * store is torchstore (the agent holds MASTER_PORT). */
int weft_bootstrap_start(weft_bootstrap_t *bs, const char *want, double deadline);

/* Variable-length allgather on top of bs->allgather: every rank passes
 * `len` bytes; *out receives size blocks of *stride bytes each (rank r's
 * data at out + r * stride, its length at lens[r]). Caller frees *out and
 * *lens. */
int weft_bootstrap_allgatherv(weft_bootstrap_t *bs, const void *send, size_t len, void **out, size_t **lens,
                              size_t *stride, double deadline);

/* A barrier over the bootstrap (an allgather of one byte). */
int weft_bootstrap_barrier(weft_bootstrap_t *bs, double deadline);
/* While fn is set (for the calling thread), the bootstraps' waits (the
 * stores' sockets, PMIx's nonblocking fence) call it every few
 * milliseconds, through weft_bootstrap_idle: weft_finalize's closing
 * barrier keeps the transport moving (a peer's flush may need this rank to
 * receive). NULL: unset. */
void weft_bootstrap_set_idle_hook(void (*fn)(void));
void weft_bootstrap_idle(void);

/* The scalable exchanges: the bootstrap's own when it has them, else built
 * on its allgather (see the vtable). weft_bootstrap_put is collective when
 * built on the allgather, which it is when the bootstrap has no put or
 * `everywhere` asks every rank to keep every blob (every rank calls it
 * once, at init); weft_bootstrap_get then reads the kept table, and
 * weft_bootstrap_release frees it (at finalize). */
int weft_bootstrap_gather(weft_bootstrap_t *bs, const void *send, void *recv, size_t len, double deadline);
int weft_bootstrap_bcast(weft_bootstrap_t *bs, const void *send, size_t len, void **out, size_t *out_len,
                         double deadline);
int weft_bootstrap_put(weft_bootstrap_t *bs, const void *blob, size_t len, int everywhere, double deadline);
#define WEFT_BOOTSTRAP_GET_MAX 16
int weft_bootstrap_get(weft_bootstrap_t *bs, const int *ranks, int n, void **blobs, size_t *lens, double deadline);
void weft_bootstrap_release(weft_bootstrap_t *bs);

#endif
