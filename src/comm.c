/* Communicator objects: world, dup, split (color/key), split_ranks (a
 * member list per group, torchcomms style), split_type (node, NUMA,
 * socket), free, abort, warm-up, and per-peer transport reports.
 *
 * Creation is an allreduce and an allgather over the parent: the AND of
 * the members' masks of free context slots, and from each member its
 * color and key (or its list's hash), its creation epoch and a nonce (32
 * bytes: at 10^5 members 3.2 MB per rank). Every member then computes the
 * same answer locally, in O(n log n): the groups, the ranks in each, the
 * lowest slot free on every member of the parent (disjoint groups may
 * share it: their traffic never meets) and the generation (the highest
 * epoch; every member moves its own past it). The communicator's derived node, leader and rail
 * sub-communicators share its slot and generation under their own kind
 * (weft_internal.h has the layout); they are built later, locally, from
 * the node map (weft_comm_derived): no member needs to talk to another to
 * build them. weft_comm_shrink (ft.c) agrees on the same things among the
 * survivors and builds its communicator with weft_comm_build. */
#include "bootstrap/bootstrap.h"
#include "request.h"
#include "topo/topo.h"
#include "weft_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* The collectives' services to the runtime: src/ owns the slot, coll/ fills it in at its init. */
const weft_coll_services_t *weft_coll_svc;

#define CTX_WORDS (WEFT_MAX_CONTEXTS / 64)

static struct weft_comm_s world_comm;
static uint64_t ctx_used[CTX_WORDS];           /* context slots in use here */
static weft_comm_t by_slot[WEFT_MAX_CONTEXTS]; /* the live communicator on each slot (control messages find it) */
static uint32_t ctx_epoch;                     /* this process's creation epoch (weft_comm_epoch) */
static struct weft_comm_s *comm_free_list;     /* freed objects, reused (a stale handle fails the magic check) */
static int live_comms;

/* ---- nonces ------------------------------------------------------------- */

uint64_t weft_random64(void)
{
    uint64_t v = 0;
    ssize_t got;
    do
        got = getrandom(&v, sizeof(v), 0);
    while (got < 0 && errno == EINTR);
    if (got == (ssize_t)sizeof(v)) return v;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        got = read(fd, &v, sizeof(v));
        close(fd);
        if (got == (ssize_t)sizeof(v)) return v;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    weft_warn("no random bytes from the kernel (getrandom, /dev/urandom): communicator nonces fall back to the clock "
              "and process id, which other users may guess");
    return weft_prf64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30), (uint64_t)getpid(), (uint64_t)(uintptr_t)&v);
}

#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND(v0, v1, v2, v3)                                                                                       \
    do {                                                                                                               \
        v0 += v1;                                                                                                      \
        v1 = ROTL(v1, 13);                                                                                             \
        v1 ^= v0;                                                                                                      \
        v0 = ROTL(v0, 32);                                                                                             \
        v2 += v3;                                                                                                      \
        v3 = ROTL(v3, 16);                                                                                             \
        v3 ^= v2;                                                                                                      \
        v0 += v3;                                                                                                      \
        v3 = ROTL(v3, 21);                                                                                             \
        v3 ^= v0;                                                                                                      \
        v2 += v1;                                                                                                      \
        v1 = ROTL(v1, 17);                                                                                             \
        v1 ^= v2;                                                                                                      \
        v2 = ROTL(v2, 32);                                                                                             \
    } while (0)

/* SipHash-2-4 (Aumasson and Bernstein) of the 16-byte message m0, m1
 * (little-endian words) under the key (key, 0). */
uint64_t weft_prf64(uint64_t key, uint64_t m0, uint64_t m1)
{
    uint64_t v0 = key ^ UINT64_C(0x736f6d6570736575), v1 = UINT64_C(0x646f72616e646f6d),
             v2 = key ^ UINT64_C(0x6c7967656e657261), v3 = UINT64_C(0x7465646279746573);
    const uint64_t m[3] = {m0, m1, (uint64_t)16 << 56}; /* the last block: the length, no bytes left */
    for (int i = 0; i < 3; i++) {
        v3 ^= m[i];
        SIPROUND(v0, v1, v2, v3);
        SIPROUND(v0, v1, v2, v3);
        v0 ^= m[i];
    }
    v2 ^= 0xff;
    for (int i = 0; i < 4; i++)
        SIPROUND(v0, v1, v2, v3);
    return v0 ^ v1 ^ v2 ^ v3;
}

/* ---- context ids -------------------------------------------------------- */

static void ctx_release(uint32_t slot)
{
    ctx_used[slot / 64] &= ~(UINT64_C(1) << (slot % 64));
}

static void ctx_take(uint32_t slot)
{
    ctx_used[slot / 64] |= UINT64_C(1) << (slot % 64);
}

uint32_t weft_comm_epoch(void)
{
    return ctx_epoch;
}

void weft_comm_free_slots(uint64_t *bits)
{
    for (int w = 0; w < CTX_WORDS; w++)
        bits[w] = ~ctx_used[w];
}

weft_comm_t weft_comm_lookup(uint32_t ctx)
{
    weft_comm_t c = by_slot[ctx & WEFT_CTX_SLOT_MASK];
    return c && c->magic == WEFT_COMM_MAGIC && c->context_id == ctx ? c : NULL;
}

void weft_comm_foreach(void (*fn)(weft_comm_t comm, void *arg), void *arg)
{
    for (int s = 0; s < WEFT_MAX_CONTEXTS; s++)
        if (by_slot[s] && by_slot[s]->magic == WEFT_COMM_MAGIC) fn(by_slot[s], arg);
}

/* A new communicator takes a slot that older ones (freed here) used:
 * messages of theirs that arrived late sit unmatched in UCX's queue, where
 * their generation keeps them from matching the new one; they are dropped
 * here so they do not pile up. */
static void ctx_discard_stale(uint32_t slot, uint32_t gen)
{
    if (!weft_xport || !weft_xport->discard) return;
    for (uint32_t g = 0; g < WEFT_CTX_GENS; g++)
        if (g != gen % WEFT_CTX_GENS) weft_xport->discard(weft_ctx_make(slot, 0, g), WEFT_CTX_FAMILY_MASK);
}

static void topo_free(weft_comm_t c);

/* ---- life cycle ---------------------------------------------------------- */

int weft_comm_world_create(void)
{
    memset(&world_comm, 0, sizeof(world_comm));
    memset(ctx_used, 0, sizeof(ctx_used));
    memset(by_slot, 0, sizeof(by_slot));
    ctx_used[0] = 1; /* slot 0, generation 0 is the world's */
    ctx_epoch = 1;
    world_comm.magic = WEFT_COMM_MAGIC;
    world_comm.context_id = weft_ctx_make(0, 0, 0);
    world_comm.rank = weft_g.rank;
    world_comm.size = weft_g.size;
    world_comm.world_ranks = NULL;
    world_comm.timeout = weft_cfg.timeout;
    world_comm.device = -1;
    world_comm.nnodes = weft_g.nnodes;
    for (int k = 0; k < WEFT_SUB_KINDS; k++)
        world_comm.sub_ctx[k] = weft_ctx_make(0, (uint32_t)(1 + k), 0);
    world_comm.nonce = weft_g.world_nonce;
    snprintf(world_comm.name, sizeof(world_comm.name), "world");
    weft_g.world = &world_comm;
    by_slot[0] = &world_comm;
    live_comms = 0;
    return WEFT_SUCCESS;
}

/* Releases what the collective module keeps on c (every communicator,
 * derived ones included, goes through here). */
static void coll_release(weft_comm_t c)
{
    if (c->coll && weft_coll_svc) weft_coll_svc->comm_release(c);
}

static void comm_release(weft_comm_t c)
{
    coll_release(c);
    weft_ft_comm_release(c);
    uint32_t slot = c->context_id & WEFT_CTX_SLOT_MASK;
    ctx_release(slot);
    if (by_slot[slot] == c) by_slot[slot] = NULL;
    topo_free(c);
    free(c->world_ranks);
    weft_hints_free(c->hints, c->nhints);
    c->world_ranks = NULL;
    c->hints = NULL;
    c->nhints = 0;
    c->magic = 0;
    c->next_free = comm_free_list;
    comm_free_list = c;
    live_comms--;
}

void weft_comm_world_destroy(void)
{
    if (live_comms > 0)
        weft_info_log("weft_finalize: %d communicator%s not freed by the program", live_comms,
                      live_comms == 1 ? " was" : "s were");
    /* Objects stay on the free list (a stale handle fails the magic check)
     * until the process ends; a new init reuses them. */
    coll_release(&world_comm);
    weft_ft_comm_release(&world_comm);
    topo_free(&world_comm);
    memset(by_slot, 0, sizeof(by_slot));
    weft_hints_free(world_comm.hints, world_comm.nhints);
    world_comm.hints = NULL;
    world_comm.nhints = 0;
    world_comm.magic = 0;
    weft_g.world = WEFT_COMM_NULL;
}

int weft_comm_check(weft_comm_t comm, const char *fn)
{
    if (comm == WEFT_COMM_NULL) return weft_error(WEFT_ERR_COMM, "%s: the communicator is WEFT_COMM_NULL", fn);
    if (comm->magic != WEFT_COMM_MAGIC)
        return weft_error(WEFT_ERR_COMM, "%s: %p is not a live communicator (freed, or never created)", fn,
                          (void *)comm);
    return WEFT_SUCCESS;
}

int weft_comm_revoked_error(weft_comm_t comm, const char *fn)
{
    int by = -1;
    for (int r = 0; r < comm->size && by < 0; r++)
        if (weft_comm_world_rank_of(comm, r) == comm->revoked_by) by = r;
    weft_comm_t top = comm->parent ? comm->parent : comm;
    if (by < 0 && top != comm)
        for (int r = 0; r < top->size && by < 0; r++)
            if (weft_comm_world_rank_of(top, r) == comm->revoked_by) by = r;
    return weft_error(WEFT_ERR_REVOKED, "%s: comm %s was revoked by %s rank %d (world rank %d)", fn, comm->name,
                      top == comm ? "its" : top->name, by, comm->revoked_by);
}

int weft_comm_check_usable(weft_comm_t comm, const char *fn)
{
    int rc = weft_comm_check(comm, fn);
    if (rc) return rc;
    if (WEFT_UNLIKELY(comm->revoked)) return weft_comm_revoked_error(comm, fn);
    return WEFT_SUCCESS;
}

void weft_comm_error_policy(weft_comm_t comm, int rc)
{
    if (!comm || comm->magic != WEFT_COMM_MAGIC || !comm->abort_on_error) return;
    if (rc != WEFT_ERR_TIMEOUT && rc != WEFT_ERR_PEER_LOST && rc != WEFT_ERR_TRANSPORT) return;
    weft_log(WEFT_LOG_ERROR, "comm %s asked to abort on errors: %s: %s", comm->name, weft_strerror(rc),
             weft_last_error());
    weft_comm_abort(comm, 1);
}

/* ---- creation ------------------------------------------------------------ */

enum { MODE_SPLIT, MODE_RANKS };

typedef struct {
    int32_t color; /* MODE_SPLIT: color (WEFT_UNDEFINED = none); MODE_RANKS: list length */
    int32_t key;
    int32_t invalid; /* this member's own arguments were bad: it takes part in no group */
    uint32_t epoch;  /* weft_comm_epoch() */
    uint64_t list_hash;
    uint64_t nonce; /* this member's random contribution: the lowest parent rank's becomes the comm's */
} create_info_t;

/* A member of a split group: ordered by key, then parent rank. */
typedef struct {
    int32_t key, rank;
} split_member_t;

static int member_cmp(const void *a, const void *b)
{
    const split_member_t *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static uint64_t hash_ranks(const int *ranks, int n)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325) ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)ranks[i];
        h *= UINT64_C(0x100000001b3);
        h ^= h >> 29;
    }
    return h;
}

/* The lowest context slot set in free_and (the slots free on every member,
 * and-ed), or WEFT_ERR_NO_MEMORY naming fn when there is none. */
static int first_free_slot(const uint64_t *free_and, const char *fn, int *slot)
{
    *slot = -1;
    for (int w = 0; w < CTX_WORDS && *slot < 0; w++)
        if (free_and[w]) *slot = w * 64 + __builtin_ctzll(free_and[w]);
    if (*slot < 0)
        return weft_error(WEFT_ERR_NO_MEMORY,
                          "%s: no context slot is free on every member (at most %d live communicators per process, "
                          "world included)",
                          fn, WEFT_MAX_CONTEXTS);
    return WEFT_SUCCESS;
}

static weft_comm_t comm_alloc(void)
{
    weft_comm_t c = comm_free_list;
    if (c)
        comm_free_list = c->next_free;
    else if (!(c = malloc(sizeof(*c))))
        return NULL;
    memset(c, 0, sizeof(*c));
    return c;
}

typedef struct {
    int mode;
    int color, key;
    const int *ranks;
    int nranks;
    int invalid;
    char why[200];    /* this rank's own argument error */
    const char *name; /* default name (split_ranks), else derived from the parent */
    const char *fn;
} create_args_t;

static int comm_build(weft_comm_t parent, const int *members, int nmembers, uint32_t slot, uint32_t epoch,
                      uint64_t nonce, weft_options_t opts, const char *name, const char *fn, weft_comm_t *out);

/* One collective over parent; *out is the new communicator or WEFT_COMM_NULL. */
static int comm_create(weft_comm_t parent, create_args_t *a, weft_options_t opts, weft_comm_t *out)
{
    int n = parent->size, me = parent->rank, rc;
    create_info_t mine, *all = NULL;
    int *members = NULL, nmembers = 0;
    split_member_t *group = NULL;
    uint64_t free_mine[CTX_WORDS], free_all[CTX_WORDS];
    weft_comm_t c = NULL;

    memset(&mine, 0, sizeof(mine));
    mine.invalid = a->invalid;
    if (a->mode == MODE_SPLIT) {
        mine.color = a->color;
        mine.key = a->key;
    } else {
        mine.color = a->nranks;
        mine.list_hash = a->invalid ? (uint64_t)me ^ UINT64_C(0xdeadbeef) : hash_ranks(a->ranks, a->nranks);
    }
    for (int w = 0; w < CTX_WORDS; w++)
        free_mine[w] = ~ctx_used[w];
    mine.epoch = ctx_epoch;
    mine.nonce = weft_random64();

    all = malloc(sizeof(*all) * (size_t)n);
    members = malloc(sizeof(int) * (size_t)n);
    if (!all || !members) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory for %d members", a->fn, n);
        goto out;
    }
    WEFT_CHECK_GOTO(weft_coll_svc->allreduce(parent, free_mine, free_all, CTX_WORDS, WEFT_UINT64, WEFT_BAND), rc, out);
    WEFT_CHECK_GOTO(weft_coll_svc->allgather(parent, &mine, all, sizeof(mine)), rc, out);
    if (a->invalid) {
        rc = weft_error(WEFT_ERR_ARG, "%s: %s", a->fn, a->why);
        goto out;
    }

    if (a->mode == MODE_SPLIT) {
        if (a->color == WEFT_UNDEFINED) {
            rc = WEFT_SUCCESS;
            goto out;
        }
        /* Members: equal color, ordered by (key, parent rank). */
        if (!(group = malloc(sizeof(*group) * (size_t)n))) {
            rc = weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory for %d members", a->fn, n);
            goto out;
        }
        for (int r = 0; r < n; r++)
            if (!all[r].invalid && all[r].color == a->color) group[nmembers++] = (split_member_t){all[r].key, r};
        qsort(group, (size_t)nmembers, sizeof(*group), member_cmp);
        for (int i = 0; i < nmembers; i++)
            members[i] = group[i].rank;
    } else {
        if (a->nranks == 0) {
            rc = WEFT_SUCCESS;
            goto out;
        }
        /* Everyone on my list must have passed the same list. */
        for (int i = 0; i < a->nranks; i++) {
            int r = a->ranks[i];
            if (all[r].invalid || all[r].color != a->nranks || all[r].list_hash != mine.list_hash) {
                rc = weft_error(WEFT_ERR_ARG,
                                "%s: rank %d's member list differs from rank %d's (%d ranks given here%s); every "
                                "member of a group must pass the same list",
                                a->fn, r, me, a->nranks, all[r].invalid ? ", and rank's own arguments were bad" : "");
                goto out;
            }
            members[nmembers++] = r;
        }
    }

    /* The lowest slot free on every member of the parent, and the highest
     * epoch among them (so the generation is new to every member). */
    int slot;
    uint32_t epoch = 0;
    WEFT_CHECK_GOTO(first_free_slot(free_all, a->fn, &slot), rc, out);
    for (int r = 0; r < n; r++)
        if (all[r].epoch > epoch) epoch = all[r].epoch;
    int lowest = me; /* a member itself; every member finds the same lowest */
    for (int i = 0; i < nmembers; i++)
        if (members[i] < lowest) lowest = members[i];
    rc = comm_build(parent, members, nmembers, (uint32_t)slot, epoch, all[lowest].nonce, opts, a->name, a->fn, &c);
out:
    free(all);
    free(members);
    free(group);
    *out = c;
    return rc;
}

/* The communicator of parent's ranks members[0..n-1] on slot, generation
 * from epoch; every member of it computes the same from the same inputs. */
static int comm_build(weft_comm_t parent, const int *members, int nmembers, uint32_t slot, uint32_t epoch,
                      uint64_t nonce, weft_options_t opts, const char *name, const char *fn, weft_comm_t *out)
{
    int rc;
    weft_comm_t c = comm_alloc();
    *out = WEFT_COMM_NULL;
    if (!c || !(c->world_ranks = malloc(sizeof(int) * (size_t)nmembers))) {
        if (c) {
            c->next_free = comm_free_list;
            comm_free_list = c;
        }
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", fn);
    }
    c->size = nmembers;
    c->rank = -1;
    for (int i = 0; i < nmembers; i++) {
        c->world_ranks[i] = weft_comm_world_rank_of(parent, members[i]);
        if (members[i] == parent->rank) c->rank = i;
    }
    uint8_t *seen = calloc((size_t)weft_g.nnodes + 1, 1); /* world nodes met among the members */
    for (int i = 0; i < nmembers; i++) {
        int wn = weft_g.node_of[c->world_ranks[i]];
        if (!seen) { /* out of memory: the count only steers algorithm choice */
            c->nnodes = 2;
            break;
        }
        c->nnodes += !seen[wn];
        seen[wn] = 1;
    }
    free(seen);
    uint32_t gen = epoch % WEFT_CTX_GENS;
    c->magic = WEFT_COMM_MAGIC;
    c->context_id = weft_ctx_make(slot, 0, gen);
    c->device = -1;
    c->nonce = nonce;
    c->revoked_by = -1;
    ctx_take(slot);
    by_slot[slot] = c;
    if (epoch >= ctx_epoch) ctx_epoch = epoch + 1;
    for (int k = 0; k < WEFT_SUB_KINDS; k++)
        c->sub_ctx[k] = weft_ctx_make(slot, (uint32_t)(1 + k), gen);
    live_comms++;
    char defname[64];
    if (name)
        snprintf(defname, sizeof(defname), "%s", name);
    else
        snprintf(defname, sizeof(defname), "%.40s.%u", parent->name, (unsigned)slot);
    if ((rc = weft_options_apply(c, parent, opts, defname))) {
        comm_release(c);
        return rc;
    }
    ctx_discard_stale(slot, gen);
    weft_ft_comm_created(c);
    weft_debug("%s: comm %s: rank %d of %d, context slot %u generation %u", fn, c->name, c->rank, c->size,
               (unsigned)slot, (unsigned)gen);
    *out = c;
    return WEFT_SUCCESS;
}

int weft_comm_build(weft_comm_t parent, const int *members, int nmembers, uint32_t slot, uint32_t epoch,
                    const char *name, weft_comm_t *out)
{
    /* Every survivor derives the same secret from the parent's (no member
     * sends one: the agreement decided everything else). */
    uint64_t nonce = weft_prf64(parent->nonce, UINT64_C(0x736872696e6b00) | epoch, slot);
    return comm_build(parent, members, nmembers, slot, epoch, nonce, WEFT_OPTIONS_NULL, name, "weft_comm_shrink", out);
}

/* Checks what must hold before this rank can take part at all. Bad
 * arguments found later (a NULL output pointer, a bad color or list) still
 * take part, flagged invalid, so the other members are never left waiting. */
static int create_prologue(weft_comm_t comm, weft_options_t opts, const char *fn)
{
    int rc;
    WEFT_CHECK_INIT(fn);
    if ((rc = weft_comm_check_usable(comm, fn))) return rc;
    if (opts && opts->magic != WEFT_OPTIONS_MAGIC)
        return weft_error(WEFT_ERR_ARG, "%s: %p is not a live options object", fn, (void *)opts);
    return WEFT_SUCCESS;
}

/* A NULL output pointer: this rank joins as invalid and gets WEFT_ERR_ARG. */
static weft_comm_t *output_or_sink(weft_comm_t *newcomm, create_args_t *a, weft_comm_t *sink)
{
    if (newcomm) {
        *newcomm = WEFT_COMM_NULL;
        return newcomm;
    }
    a->invalid = 1;
    snprintf(a->why, sizeof(a->why), "NULL output pointer");
    return sink;
}

WEFT_API int weft_comm_split(weft_comm_t comm, int color, int key, weft_options_t opts, weft_comm_t *newcomm)
{
    WEFT_API_ENTER();
    int rc = create_prologue(comm, opts, "weft_comm_split");
    if (rc) return rc;
    weft_comm_t sink;
    create_args_t a = {.mode = MODE_SPLIT, .color = color, .key = key, .fn = "weft_comm_split"};
    newcomm = output_or_sink(newcomm, &a, &sink);
    if (!a.invalid && color < 0 && color != WEFT_UNDEFINED) {
        a.invalid = 1;
        snprintf(a.why, sizeof(a.why), "color %d is negative (use WEFT_UNDEFINED to opt out)", color);
    }
    return comm_create(comm, &a, opts, newcomm);
}

WEFT_API int weft_comm_dup(weft_comm_t comm, weft_options_t opts, weft_comm_t *newcomm)
{
    WEFT_API_ENTER();
    int rc = create_prologue(comm, opts, "weft_comm_dup");
    if (rc) return rc;
    weft_comm_t sink;
    create_args_t a = {.mode = MODE_SPLIT, .color = 0, .key = comm->rank, .fn = "weft_comm_dup"};
    newcomm = output_or_sink(newcomm, &a, &sink);
    return comm_create(comm, &a, opts, newcomm);
}

WEFT_API int weft_comm_split_ranks(weft_comm_t comm, const int *ranks, int nranks, const char *name,
                                   weft_options_t opts, weft_comm_t *newcomm)
{
    WEFT_API_ENTER();
    int rc = create_prologue(comm, opts, "weft_comm_split_ranks");
    if (rc) return rc;
    weft_comm_t sink;
    create_args_t a = {.mode = MODE_RANKS, .ranks = ranks, .nranks = nranks, .fn = "weft_comm_split_ranks"};
    newcomm = output_or_sink(newcomm, &a, &sink);
    if (a.invalid) {
        a.nranks = 0;
    } else if (nranks < 0 || (nranks > 0 && !ranks)) {
        a.invalid = 1;
        snprintf(a.why, sizeof(a.why), "%s", nranks < 0 ? "negative number of ranks" : "NULL rank list");
        a.nranks = 0;
    } else if (name && strlen(name) >= sizeof(comm->name)) {
        a.invalid = 1;
        snprintf(a.why, sizeof(a.why), "name longer than %zu characters", sizeof(comm->name) - 1);
    } else {
        int self = 0, *at = malloc(sizeof(int) * (size_t)comm->size); /* where each rank was listed first */
        if (!at) {
            a.invalid = 1;
            snprintf(a.why, sizeof(a.why), "out of memory checking a list of %d ranks", nranks);
        }
        for (int r = 0; at && r < comm->size; r++)
            at[r] = -1;
        for (int i = 0; i < nranks && !a.invalid; i++) {
            if (ranks[i] < 0 || ranks[i] >= comm->size) {
                a.invalid = 1;
                snprintf(a.why, sizeof(a.why), "ranks[%d] = %d is out of range 0..%d of comm %s", i, ranks[i],
                         comm->size - 1, comm->name);
            } else if (at[ranks[i]] >= 0) {
                a.invalid = 1;
                snprintf(a.why, sizeof(a.why), "rank %d is listed twice (positions %d and %d)", ranks[i], at[ranks[i]],
                         i);
            } else {
                at[ranks[i]] = i;
            }
            if (ranks[i] == comm->rank) self = 1;
        }
        free(at);
        if (!a.invalid && nranks > 0 && !self) {
            a.invalid = 1;
            snprintf(a.why, sizeof(a.why), "the list of %d ranks does not contain the caller (rank %d)", nranks,
                     comm->rank);
        }
    }
    /* The name argument names the communicator unless the options do. */
    if (!a.invalid && name && name[0]) a.name = name;
    return comm_create(comm, &a, opts, newcomm);
}

WEFT_API int weft_comm_split_type(weft_comm_t comm, int type, int key, weft_options_t opts, weft_comm_t *newcomm)
{
    WEFT_API_ENTER();
    int rc = create_prologue(comm, opts, "weft_comm_split_type");
    if (rc) return rc;
    weft_comm_t sink;
    create_args_t a = {.mode = MODE_SPLIT, .key = key, .fn = "weft_comm_split_type"};
    newcomm = output_or_sink(newcomm, &a, &sink);
    int node = weft_g.node_of[weft_comm_world_rank_of(comm, comm->rank)];
    if (type == WEFT_SPLIT_NODE) {
        a.color = node;
    } else if (type == WEFT_SPLIT_NUMA || type == WEFT_SPLIT_SOCKET) {
        weft_placement_t p;
        if ((rc = weft_topo_placement(&p))) {
            p.numa = p.socket = -1;
            a.invalid = 1;
            snprintf(a.why, sizeof(a.why), "hwloc could not tell this rank's placement: %s", weft_last_error());
        }
        int where = type == WEFT_SPLIT_NUMA ? p.numa : p.socket;
        /* Unbound ranks (binding spanning several) group together per node. */
        a.color = node * 4096 + (where < 0 ? 4095 : where % 4095);
        if (where < 0)
            weft_info_log("weft_comm_split_type: rank %d's binding spans several %s; it joins the node's "
                          "unbound group",
                          comm->rank, type == WEFT_SPLIT_NUMA ? "NUMA nodes" : "sockets");
    } else if (!a.invalid) {
        a.invalid = 1;
        a.color = WEFT_UNDEFINED;
        snprintf(a.why, sizeof(a.why), "unknown split type %d (WEFT_SPLIT_NODE, _NUMA or _SOCKET)", type);
    }
    return comm_create(comm, &a, opts, newcomm);
}

/* ---- creation among the members only (weft_comm_create_group) ------------- */

/* The first member gathers every member's info and hands the table back:
 * n - 1 messages in and n - 1 out, in the creation's own tag class on
 * comm's context, so nothing else on comm can match them. On failure a
 * send may still be pending: its buffer (*sendbuf, malloc'd) is then left
 * to it rather than freed under it. */
/* A member's entry in weft_comm_create_group's table: what a split's
 * members allgather, and its free context slots (a split and-s those in an
 * allreduce instead). */
typedef struct {
    create_info_t info;
    uint64_t free_ctx[CTX_WORDS];
} group_info_t;

static int group_exchange(weft_comm_t comm, const int *m, int n, int me, int tag, group_info_t *all, void **sendbuf)
{
    weft_request_t *reqs = calloc((size_t)n, sizeof(*reqs));
    int nreq = 0, rc = WEFT_SUCCESS, pending_send = 0;
    size_t one = sizeof(group_info_t), table = one * (size_t)n;
    if (!reqs) return weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_create_group: out of memory for %d members", n);
    if (me == 0) {
        for (int i = 1; i < n && !rc; i++)
            if (!(rc = weft_xport->irecv(&all[i], one, m[i], WEFT_TAG_CLASS_CREATE, tag, comm, &reqs[nreq]))) nreq++;
        if (!rc) rc = weft_waitall(nreq, reqs, NULL);
        for (int i = 0; i < nreq; i++)
            if (reqs[i] != WEFT_REQUEST_NULL) weft_request_free(&reqs[i]);
        nreq = 0;
        if (!rc) {
            memcpy(*sendbuf, all, table);
            for (int i = 1; i < n && !rc; i++)
                if (!(rc = weft_xport->isend(*sendbuf, table, m[i], WEFT_TAG_CLASS_CREATE, tag, comm, &reqs[nreq])))
                    nreq++;
            if (!rc) rc = weft_waitall(nreq, reqs, NULL);
        }
    } else {
        memcpy(*sendbuf, &all[me], one);
        rc = weft_xport->irecv(all, table, m[0], WEFT_TAG_CLASS_CREATE, tag, comm, &reqs[nreq]);
        if (!rc) nreq++;
        if (!rc && !(rc = weft_xport->isend(*sendbuf, one, m[0], WEFT_TAG_CLASS_CREATE, tag, comm, &reqs[nreq])))
            nreq++;
        if (!rc) rc = weft_waitall(nreq, reqs, NULL);
        if (rc == WEFT_ERR_TRUNCATE)
            rc = weft_error(WEFT_ERR_ARG,
                            "weft_comm_create_group: the table from rank %d (the first member) is not %d members "
                            "long: it was given another list",
                            m[0], n);
    }
    for (int i = 0; i < nreq; i++)
        if (reqs[i] != WEFT_REQUEST_NULL) {
            pending_send = 1; /* a receive is canceled; a send runs on with its buffer */
            weft_request_free(&reqs[i]);
        }
    if (pending_send) *sendbuf = NULL;
    free(reqs);
    return rc;
}

WEFT_API int weft_comm_create_group(weft_comm_t comm, const int *ranks, int nranks, int tag, weft_options_t opts,
                                    weft_comm_t *newcomm)
{
    WEFT_API_ENTER();
    static const char fn[] = "weft_comm_create_group";
    int rc = create_prologue(comm, opts, fn), me = -1;
    if (rc) return rc;
    if (newcomm) *newcomm = WEFT_COMM_NULL;
    if (nranks <= 0 || !ranks)
        return weft_error(WEFT_ERR_ARG, "%s: %s", fn, nranks <= 0 ? "no ranks listed" : "NULL rank list");
    if (tag < 0 || tag > WEFT_TAG_UB)
        return weft_error(WEFT_ERR_ARG, "%s: tag %d is not in 0..%d", fn, tag, WEFT_TAG_UB);
    for (int i = 0; i < nranks; i++) {
        if (ranks[i] < 0 || ranks[i] >= comm->size)
            return weft_error(WEFT_ERR_ARG, "%s: ranks[%d] = %d is out of range 0..%d of comm %s", fn, i, ranks[i],
                              comm->size - 1, comm->name);
        for (int j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return weft_error(WEFT_ERR_ARG, "%s: rank %d is listed twice (positions %d and %d)", fn, ranks[i], j,
                                  i);
        if (ranks[i] == comm->rank) me = i;
    }
    /* Without the caller in it, the list names a group this rank cannot
     * take part in: the members go on without it. */
    if (me < 0)
        return weft_error(WEFT_ERR_ARG, "%s: the list of %d ranks does not contain the caller (rank %d of comm %s)", fn,
                          nranks, comm->rank, comm->name);

    group_info_t *all = calloc((size_t)nranks, sizeof(*all));
    void *sendbuf = malloc(sizeof(*all) * (size_t)nranks);
    weft_comm_t c = WEFT_COMM_NULL;
    if (!all || !sendbuf) {
        free(all);
        free(sendbuf);
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory for %d members", fn, nranks);
    }
    create_info_t *mine = &all[me].info; /* color: the list's length; key: the tag */
    mine->invalid = newcomm == NULL;
    mine->color = nranks;
    mine->key = tag;
    mine->epoch = ctx_epoch;
    mine->list_hash = hash_ranks(ranks, nranks);
    mine->nonce = weft_random64();
    for (int w = 0; w < CTX_WORDS; w++)
        all[me].free_ctx[w] = ~ctx_used[w];
    create_info_t keep = *mine;
    WEFT_CHECK_GOTO(group_exchange(comm, ranks, nranks, me, tag, all, &sendbuf), rc, out);

    /* Every member checks the same table, so all fail or none. */
    uint64_t free_and[CTX_WORDS];
    uint32_t epoch = 0;
    for (int w = 0; w < CTX_WORDS; w++)
        free_and[w] = ~UINT64_C(0);
    for (int i = 0; i < nranks; i++) {
        const create_info_t *e = &all[i].info;
        for (int w = 0; w < CTX_WORDS; w++)
            free_and[w] &= all[i].free_ctx[w];
        if (e->epoch > epoch) epoch = e->epoch;
        if (e->color != keep.color || e->list_hash != keep.list_hash || e->key != keep.key) {
            rc = weft_error(WEFT_ERR_ARG,
                            "%s: rank %d of comm %s passed another list or tag (%d ranks, tag %d) than rank %d (%d "
                            "ranks, tag %d); every member must pass the same",
                            fn, ranks[i], comm->name, e->color, e->key, ranks[0], keep.color, keep.key);
            goto out;
        }
        if (e->invalid) {
            rc = weft_error(WEFT_ERR_ARG, "%s: rank %d of comm %s passed a NULL output pointer", fn, ranks[i],
                            comm->name);
            goto out;
        }
    }
    int slot;
    WEFT_CHECK_GOTO(first_free_slot(free_and, fn, &slot), rc, out);
    rc = comm_build(comm, ranks, nranks, (uint32_t)slot, epoch, all[0].info.nonce, opts, NULL, fn, &c);
    if (!rc) *newcomm = c;
out:
    free(all);
    free(sendbuf); /* NULL when a send still holds it */
    if (rc) weft_comm_error_policy(comm, rc);
    return rc;
}

WEFT_API int weft_comm_free(weft_comm_t *comm)
{
    WEFT_API_ENTER();
    int rc;
    WEFT_CHECK_INIT("weft_comm_free");
    if (!comm) return weft_error(WEFT_ERR_ARG, "weft_comm_free: NULL pointer");
    if ((rc = weft_comm_check(*comm, "weft_comm_free"))) return rc;
    weft_comm_t c = *comm;
    if (c == &world_comm) return weft_error(WEFT_ERR_COMM, "weft_comm_free: the world communicator cannot be freed");
    if (c->pending > 0 && weft_request_detach_comm(c) > 0) {
        char list[512];
        weft_request_describe_pending(c, list, sizeof(list));
        return weft_error(WEFT_ERR_ARG, "weft_comm_free: comm %s still has %d pending request%s: %s", c->name,
                          c->pending, c->pending == 1 ? "" : "s", list);
    }
    comm_release(c);
    *comm = WEFT_COMM_NULL;
    return WEFT_SUCCESS;
}

/* Without the API mutex: an abort from another thread (a watchdog) while
 * a call blocks must not wait for that call. */
WEFT_API int weft_comm_abort(weft_comm_t comm, int errorcode)
{
    const char *name = comm && comm->magic == WEFT_COMM_MAGIC ? comm->name : "?";
    weft_log(WEFT_LOG_ERROR, "weft_comm_abort(comm %s, %d) called by rank %d: ending the job", name, errorcode,
             weft_g.rank);
    fflush(stdout);
    fflush(stderr);
    if (weft_g.bs && weft_g.bs->abort) weft_g.bs->abort(weft_g.bs, errorcode, "weft_comm_abort");
    _exit(errorcode ? errorcode : 1);
}

/* ---- derived sub-communicators (node, leader, rail) ------------------------ */

static void derived_release(weft_comm_t c)
{
    coll_release(c);
    free(c->world_ranks);
    c->world_ranks = NULL;
    c->magic = 0;
    c->next_free = comm_free_list;
    comm_free_list = c;
}

static void topo_free(weft_comm_t c)
{
    weft_comm_topo_t *t = c->topo;
    if (!t) return;
    for (int k = 0; k < WEFT_SUB_KINDS; k++)
        if (t->sub[k]) derived_release(t->sub[k]);
    free(t->node_of);
    free(t->local_of);
    free(t->node_size);
    free(t->leader_of);
    free(t);
    c->topo = NULL;
}

const weft_comm_topo_t *weft_comm_topo(weft_comm_t comm)
{
    if (comm->topo) return comm->topo;
    int n = comm->size;
    weft_comm_topo_t *t = calloc(1, sizeof(*t));
    if (t) {
        t->node_of = malloc(sizeof(int) * (size_t)n);
        t->local_of = malloc(sizeof(int) * (size_t)n);
        t->node_size = calloc((size_t)n, sizeof(int));
        t->leader_of = malloc(sizeof(int) * (size_t)n);
    }
    if (!t || !t->node_of || !t->local_of || !t->node_size || !t->leader_of) {
        comm->topo = t;
        if (t) topo_free(comm);
        weft_error(WEFT_ERR_NO_MEMORY, "comm %s: out of memory for its node map", comm->name);
        return NULL;
    }
    /* Nodes numbered by first member, through the world's node of each. */
    int *node_of_world = malloc(sizeof(int) * ((size_t)weft_g.nnodes + 1));
    if (!node_of_world) {
        comm->topo = t;
        topo_free(comm);
        weft_error(WEFT_ERR_NO_MEMORY, "comm %s: out of memory for its node map", comm->name);
        return NULL;
    }
    for (int k = 0; k < weft_g.nnodes; k++)
        node_of_world[k] = -1;
    for (int r = 0; r < n; r++) {
        int wn = weft_g.node_of[weft_comm_world_rank_of(comm, r)], node = node_of_world[wn];
        if (node < 0) {
            node = node_of_world[wn] = t->nnodes++;
            t->leader_of[node] = r;
        }
        t->node_of[r] = node;
        t->local_of[r] = t->node_size[node]++;
    }
    free(node_of_world);
    t->equal = 1;
    for (int k = 1; k < t->nnodes; k++)
        t->equal &= t->node_size[k] == t->node_size[0];
    t->my_node = t->node_of[comm->rank];
    t->my_local = t->local_of[comm->rank];
    comm->topo = t;
    return t;
}

static int derived_member(const weft_comm_topo_t *t, int kind, int r)
{
    if (kind == WEFT_SUB_NODE) return t->node_of[r] == t->my_node;
    if (kind == WEFT_SUB_LEADER) return t->local_of[r] == 0;
    return t->local_of[r] == t->my_local;
}

int weft_comm_derived(weft_comm_t comm, int kind, weft_comm_t *out)
{
    static const char *const suffix[WEFT_SUB_KINDS] = {"node", "leader", "rail"};
    *out = WEFT_COMM_NULL;
    if (kind < 0 || kind >= WEFT_SUB_KINDS || comm->sub_ctx[kind] == WEFT_SUB_NONE)
        return weft_error_quiet(WEFT_ERR_UNSUPPORTED, "comm %s has no derived %s communicator", comm->name,
                                kind >= 0 && kind < WEFT_SUB_KINDS ? suffix[kind] : "?");
    weft_comm_topo_t *t = (weft_comm_topo_t *)weft_comm_topo(comm);
    if (!t) return WEFT_ERR_NO_MEMORY;
    if (t->built[kind]) {
        *out = t->sub[kind];
        return WEFT_SUCCESS;
    }
    if (kind == WEFT_SUB_LEADER && t->my_local != 0) { /* not a member */
        t->built[kind] = 1;
        return WEFT_SUCCESS;
    }
    weft_comm_t c = comm_alloc();
    if (!c || !(c->world_ranks = malloc(sizeof(int) * (size_t)comm->size))) {
        if (c) derived_release(c);
        return weft_error(WEFT_ERR_NO_MEMORY, "comm %s: out of memory for its %s communicator", comm->name,
                          suffix[kind]);
    }
    for (int r = 0; r < comm->size; r++)
        if (derived_member(t, kind, r)) {
            if (r == comm->rank) c->rank = c->size;
            c->world_ranks[c->size++] = weft_comm_world_rank_of(comm, r);
        }
    c->magic = WEFT_COMM_MAGIC;
    c->context_id = comm->sub_ctx[kind];
    for (int k = 0; k < WEFT_SUB_KINDS; k++)
        c->sub_ctx[k] = WEFT_SUB_NONE; /* a derived comm derives nothing (it has no ids for it) */
    c->timeout = comm->timeout;
    c->device = comm->device;
    c->nnodes = kind == WEFT_SUB_NODE ? 1 : c->size;
    c->parent = comm;
    c->revoked = comm->revoked; /* built after comm was revoked: born revoked */
    c->revoked_by = comm->revoked_by;
    /* Every member derives the same one; through the PRF, so a name made
     * from it says nothing about the parent's (nor the parent's names
     * about it). Rail comms of different ranks share it: their context
     * and members differ. */
    c->nonce = weft_prf64(comm->nonce, UINT64_C(0x6465726976656400) | (uint64_t)kind, c->context_id);
    snprintf(c->name, sizeof(c->name), "%.50s.%s", comm->name, suffix[kind]);
    t->sub[kind] = c;
    t->built[kind] = 1;
    *out = c;
    weft_debug("comm %s: derived %s: rank %d of %d, context %u", comm->name, c->name, c->rank, c->size,
               (unsigned)c->context_id);
    return WEFT_SUCCESS;
}

/* ---- queries ------------------------------------------------------------- */

WEFT_API weft_comm_t weft_comm_world(void)
{
    WEFT_API_ENTER();
    return weft_g.initialized ? weft_g.world : WEFT_COMM_NULL;
}

WEFT_API const char *weft_comm_name(weft_comm_t comm)
{
    WEFT_API_ENTER();
    if (!weft_g.initialized || !comm || comm->magic != WEFT_COMM_MAGIC) return "";
    return comm->name;
}

#define COMM_GETTER_PROLOGUE(fn, out)                                                                                  \
    int rc;                                                                                                            \
    WEFT_CHECK_INIT(fn);                                                                                               \
    if ((rc = weft_comm_check(comm, fn))) return rc;                                                                   \
    if (!(out)) return weft_error(WEFT_ERR_ARG, "%s: NULL output pointer", fn)

WEFT_API int weft_comm_rank(weft_comm_t comm, int *rank)
{
    WEFT_API_ENTER();
    COMM_GETTER_PROLOGUE("weft_comm_rank", rank);
    *rank = comm->rank;
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_size(weft_comm_t comm, int *size)
{
    WEFT_API_ENTER();
    COMM_GETTER_PROLOGUE("weft_comm_size", size);
    *size = comm->size;
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_get_timeout(weft_comm_t comm, double *timeout_s)
{
    WEFT_API_ENTER();
    COMM_GETTER_PROLOGUE("weft_comm_get_timeout", timeout_s);
    *timeout_s = comm->timeout;
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_get_device(weft_comm_t comm, int *device)
{
    WEFT_API_ENTER();
    COMM_GETTER_PROLOGUE("weft_comm_get_device", device);
    *device = comm->device;
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_world_rank(weft_comm_t comm, int rank, int *world_rank)
{
    WEFT_API_ENTER();
    COMM_GETTER_PROLOGUE("weft_comm_world_rank", world_rank);
    if (rank < 0 || rank >= comm->size)
        return weft_error(WEFT_ERR_ARG, "weft_comm_world_rank: rank %d out of range 0..%d of comm %s", rank,
                          comm->size - 1, comm->name);
    *world_rank = weft_comm_world_rank_of(comm, rank);
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_set_timeout(weft_comm_t comm, double timeout_s)
{
    WEFT_API_ENTER();
    int rc;
    WEFT_CHECK_INIT("weft_comm_set_timeout");
    if ((rc = weft_comm_check(comm, "weft_comm_set_timeout"))) return rc;
    if (!(timeout_s >= 0))
        return weft_error(WEFT_ERR_ARG, "weft_comm_set_timeout: timeout %g s is not >= 0 (0 = no deadline)", timeout_s);
    comm->timeout = timeout_s;
    return WEFT_SUCCESS;
}

WEFT_API int weft_local_rank(int *local_rank)
{
    WEFT_API_ENTER();
    WEFT_CHECK_INIT("weft_local_rank");
    if (!local_rank) return weft_error(WEFT_ERR_ARG, "weft_local_rank: NULL output pointer");
    *local_rank = weft_g.local_rank;
    return WEFT_SUCCESS;
}

WEFT_API int weft_local_size(int *local_size)
{
    WEFT_API_ENTER();
    WEFT_CHECK_INIT("weft_local_size");
    if (!local_size) return weft_error(WEFT_ERR_ARG, "weft_local_size: NULL output pointer");
    *local_size = weft_g.local_size;
    return WEFT_SUCCESS;
}

/* ---- warm-up and diagnostics --------------------------------------------- */

#define WARMUP_ROUNDS 3

WEFT_API int weft_comm_warmup(weft_comm_t comm)
{
    WEFT_API_ENTER();
    int rc;
    WEFT_CHECK_INIT("weft_comm_warmup");
    if ((rc = weft_comm_check_usable(comm, "weft_comm_warmup"))) return rc;
    int n = comm->size;
    uint64_t *in = calloc((size_t)n, sizeof(uint64_t)), out = (uint64_t)comm->rank;
    weft_request_t *reqs = calloc(2 * (size_t)n, sizeof(weft_request_t));
    if (!in || !reqs) {
        free(in);
        free(reqs);
        return weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_warmup: out of memory");
    }
    /* Every pair exchanges small messages both ways: every endpoint is
     * created and wired up before the first real collective. */
    for (int round = 0; round < WARMUP_ROUNDS && !rc; round++) {
        int nreq = 0;
        for (int p = 0; p < n && !rc; p++)
            rc = weft_xport->irecv(&in[p], sizeof(uint64_t), p, WEFT_TAG_CLASS_CTRL, round, comm, &reqs[nreq++]);
        for (int p = 0; p < n && !rc; p++)
            rc = weft_xport->isend(&out, sizeof(uint64_t), p, WEFT_TAG_CLASS_CTRL, round, comm, &reqs[nreq++]);
        if (rc) nreq--;
        int wrc = weft_waitall(nreq, reqs, NULL);
        for (int i = 0; i < nreq; i++)
            weft_request_free(&reqs[i]);
        if (!rc) rc = wrc;
        for (int p = 0; p < n && !rc; p++)
            if (in[p] != (uint64_t)p)
                rc = weft_error(WEFT_ERR_INTERNAL, "weft_comm_warmup: rank %d sent %llu", p, (unsigned long long)in[p]);
    }
    free(in);
    free(reqs);
    if (rc) weft_comm_error_policy(comm, rc);
    return rc;
}

WEFT_API int weft_comm_peer_info(weft_comm_t comm, int rank, char *buf, size_t len)
{
    WEFT_API_ENTER();
    int rc;
    WEFT_CHECK_INIT("weft_comm_peer_info");
    if ((rc = weft_comm_check(comm, "weft_comm_peer_info"))) return rc;
    if (!buf || len == 0) return weft_error(WEFT_ERR_ARG, "weft_comm_peer_info: NULL or empty buffer");
    if (rank < 0 || rank >= comm->size)
        return weft_error(WEFT_ERR_ARG, "weft_comm_peer_info: rank %d out of range 0..%d of comm %s", rank,
                          comm->size - 1, comm->name);
    return weft_xport->peer_info(weft_comm_world_rank_of(comm, rank), buf, len);
}
