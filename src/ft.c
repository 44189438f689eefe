/* Surviving a lost rank: revoke, shrink and agree, in the spirit of ULFM's
 * MPI_Comm_revoke / MPI_Comm_shrink / MPI_Comm_agree and NCCL's revoke /
 * shrink; and weft_finalize's closing barrier once ranks are lost.
 *
 * Everything here travels as control messages (pt2pt's active messages,
 * weft_xport->ctrl_send): they reach a rank whatever it waits on, cost the
 * tagged traffic nothing, and are handled by this file's progress hook
 * right after the transport's progress (weft_ft_deliver only queues them,
 * from inside UCX).
 *
 * Revoke: the revoking rank fails its own pending operations on the
 * communicator and sends a notice to every other member; each fails its
 * own on arrival. A revoked communicator's incoming traffic is discarded,
 * so the senders' pending sends complete (reporting WEFT_ERR_REVOKED). If
 * the revoking rank dies before every member has the notice, the members
 * that have it send it on once they learn of that death.
 *
 * Agreement (shrink and agree share it): consensus among the members still
 * alive, with the liveness record as failure detector (the env store's
 * notices, PMIx, UCX: it names a rank only once its process is gone).
 * Paxos with a fixed order of leaders: the leader is the lowest-ranked
 * member not known lost, its ballot its rank.
 *   - Every member sends its contribution (its flag, epoch, free context
 *     slots, the members it knows lost, and a value it accepted before,
 *     if any) to the member it believes leads.
 *   - The leader waits for a contribution from every member not known lost
 *     (a member lost meanwhile is no longer waited for). If one reports a
 *     decision, that is the decision. Else, if one accepted a value from an
 *     earlier leader, the leader proposes the value of the highest ballot;
 *     else it proposes a new one: the contributors are the live set, the
 *     flag their AND, the slot the lowest free on all, the epoch their
 *     highest.
 *   - Members accept a proposal unless they promised a higher ballot, and
 *     acknowledge. Once every member not known lost acknowledged, the
 *     leader decides and tells them.
 *   - A leader taking over (all below it lost) first asks every member for
 *     its state: members that already decided, even after they returned
 *     and freed the communicator, answer with the decision (decisions are
 *     kept, see `done`), so every survivor ends with the same one.
 * No wait is without a deadline (the communicator's timeout). */
#include "request.h"
#include "weft_internal.h"

#include <stdlib.h>
#include <string.h>

#define FT_MAGIC     0x77465431u /* "wFT1" */
#define SLOT_WORDS   (WEFT_MAX_CONTEXTS / 64)
#define DONE_KEPT    64  /* decisions kept to answer a later leader */
#define PENDING_KEPT 256 /* messages kept for communicators not built here yet */
#define DRAIN_EVERY  64  /* progress passes between discards of revoked traffic */

enum { FT_REVOKE = 1, FT_CONTRIB, FT_QUERY, FT_ACCEPT, FT_ACK, FT_DECIDE };
enum { FT_HAS_ACCEPTED = 1, FT_IS_DECIDED = 2 };

/* Every control message of this file: this header, then `nbytes`. */
typedef struct ft_msg {
    uint32_t magic;
    uint16_t kind;
    uint16_t flags;     /* CONTRIB: FT_HAS_ACCEPTED, FT_IS_DECIDED */
    uint32_t ctx;       /* the communicator's context id */
    uint32_t seq;       /* which agreement on it (they run in call order) */
    int32_t from;       /* the sender's rank in the communicator */
    int32_t ballot;     /* the leader this is about */
    int32_t acc_ballot; /* CONTRIB with FT_HAS_ACCEPTED: the ballot of the value */
    uint32_t nbytes;
} ft_msg_t;

/* A decision (the value agreed on), followed by a bitmap of the members
 * agreed alive. */
typedef struct ft_dec {
    uint32_t slot;  /* the shrunk communicator's context slot (UINT32_MAX: none free) */
    uint32_t epoch; /* its generation comes from this */
    int32_t flag;   /* AND of the live members' flags */
    int32_t nlive;
} ft_dec_t;

/* A contribution, followed by a bitmap of the members its sender knows
 * lost, then (FT_HAS_ACCEPTED or FT_IS_DECIDED) a decision. */
typedef struct ft_contrib {
    int32_t flag;
    uint32_t epoch;
    uint64_t free_slots[SLOT_WORDS];
} ft_contrib_t;

typedef struct ft_got {
    uint16_t flags;
    int32_t acc_ballot;
    ft_contrib_t c;
    uint8_t *dec; /* the decision it carried, or NULL */
} ft_got_t;

enum { PHASE_GATHER, PHASE_ACCEPT };

/* One agreement on one communicator, as this rank sees it. */
typedef struct ft_inst {
    uint32_t seq;
    int started; /* this rank called in (its contribution is set) */
    ft_contrib_t mine;
    uint8_t *dead;  /* members counted lost in this agreement (own record, and what others reported) */
    int promised;   /* the highest ballot this rank contributed to or accepted */
    int acc_ballot; /* -1: nothing accepted */
    uint8_t *accepted;
    uint8_t *decided; /* NULL until decided */
    int told;         /* this rank (as leader) sent the decision to the others */
    int contributed_to;
    /* as leader */
    int leading, phase;
    ft_got_t *got;  /* per member: its contribution to this rank (epoch 0: none yet) */
    uint8_t *acked; /* per member */
    uint8_t *proposal;
    struct ft_inst *next;
} ft_inst_t;

struct weft_ft_comm {
    ft_inst_t *insts;
    uint32_t next_seq;
};

typedef struct ft_queued {
    int from;
    size_t len;
    struct ft_queued *next;
    char data[];
} ft_queued_t;

static ft_queued_t *queue_head, *queue_tail; /* arrived, not handled yet */
static ft_queued_t *pending;                 /* for communicators not built here yet */
static int npending;
static struct {
    uint32_t ctx, seq;
    int rank, size;
    uint8_t *dec;
} done[DONE_KEPT];
static int done_next;
void (*weft_ft_test_hook)(const char *what, int to);
static weft_comm_t *revoked; /* live revoked communicators (their traffic is discarded) */
static int nrevoked, revoked_cap;
static unsigned lost_seen, drain_count;
static int hook_registered;

/* ---- helpers ------------------------------------------------------------ */

static size_t bm_bytes(int n)
{
    return ((size_t)n + 7) / 8;
}
static int bm_get(const uint8_t *b, int i)
{
    return (b[i / 8] >> (i % 8)) & 1;
}
static void bm_set(uint8_t *b, int i)
{
    b[i / 8] |= (uint8_t)(1u << (i % 8));
}
static size_t dec_bytes(int n)
{
    return sizeof(ft_dec_t) + bm_bytes(n);
}

static void msg_init(ft_msg_t *m, int kind, weft_comm_t comm, uint32_t seq, int ballot)
{
    memset(m, 0, sizeof(*m));
    m->magic = FT_MAGIC;
    m->kind = (uint16_t)kind;
    m->ctx = comm->context_id;
    m->seq = seq;
    m->from = comm->rank;
    m->ballot = ballot;
    m->acc_ballot = -1;
}

/* Sends header + payload to comm rank `to`; a failure (a dead rank) is the
 * liveness record's business, not the sender's. */
static void send_to(weft_comm_t comm, int to, ft_msg_t *m, const void *payload, size_t len)
{
    char stack[1024], *buf = sizeof(*m) + len <= sizeof(stack) ? stack : malloc(sizeof(*m) + len);
    if (!buf) return;
    m->nbytes = (uint32_t)len;
    memcpy(buf, m, sizeof(*m));
    if (len) memcpy(buf + sizeof(*m), payload, len);
    int world = weft_comm_world_rank_of(comm, to);
    if (weft_rank_lost_why(world)) {
        if (buf != stack) free(buf);
        return;
    }
    if (weft_xport->ctrl_send(world, buf, sizeof(*m) + len))
        weft_debug("control message to rank %d (comm %s) not sent: %s", to, comm->name, weft_last_error());
    if (buf != stack) free(buf);
}

/* ---- agreement state ---------------------------------------------------- */

static void got_clear(ft_got_t *g)
{
    free(g->dec);
    memset(g, 0, sizeof(*g));
}

static void inst_free(ft_inst_t *in, int n)
{
    if (in->got)
        for (int m = 0; m < n; m++)
            got_clear(&in->got[m]);
    free(in->got);
    free(in->dead);
    free(in->accepted);
    free(in->decided);
    free(in->acked);
    free(in->proposal);
    free(in);
}

/* comm's agreement number seq (created when `create`), or NULL. */
static ft_inst_t *inst_get(weft_comm_t comm, uint32_t seq, int create)
{
    if (!comm->ft) {
        if (!create || !(comm->ft = calloc(1, sizeof(*comm->ft)))) return NULL;
    }
    for (ft_inst_t *in = comm->ft->insts; in; in = in->next)
        if (in->seq == seq) return in;
    if (!create) return NULL;
    int n = comm->size;
    ft_inst_t *in = calloc(1, sizeof(*in));
    if (!in) return NULL;
    in->seq = seq;
    in->promised = -1;
    in->acc_ballot = -1;
    in->contributed_to = -1;
    in->dead = calloc(1, bm_bytes(n));
    in->got = calloc((size_t)n, sizeof(*in->got));
    in->acked = calloc((size_t)n, 1);
    if (!in->dead || !in->got || !in->acked) {
        inst_free(in, n);
        return NULL;
    }
    in->next = comm->ft->insts;
    comm->ft->insts = in;
    return in;
}

/* Agreements older than the one this rank just finished are over for it:
 * what a later leader may still ask is kept in `done`. */
static void inst_prune(weft_comm_t comm, uint32_t finished)
{
    for (ft_inst_t **pp = &comm->ft->insts; *pp;) {
        ft_inst_t *in = *pp;
        if (in->seq < finished && in->decided) {
            *pp = in->next;
            inst_free(in, comm->size);
        } else {
            pp = &in->next;
        }
    }
}

static void done_record(weft_comm_t comm, uint32_t seq, const uint8_t *dec)
{
    size_t len = dec_bytes(comm->size);
    uint8_t *copy = malloc(len);
    if (!copy) return;
    memcpy(copy, dec, len);
    free(done[done_next].dec);
    done[done_next].ctx = comm->context_id;
    done[done_next].seq = seq;
    done[done_next].rank = comm->rank;
    done[done_next].size = comm->size;
    done[done_next].dec = copy;
    done_next = (done_next + 1) % DONE_KEPT;
}

static void decide(weft_comm_t comm, ft_inst_t *in, const uint8_t *dec)
{
    if (in->decided) return;
    size_t len = dec_bytes(comm->size);
    if (!(in->decided = malloc(len))) return; /* the deadline ends the wait */
    memcpy(in->decided, dec, len);
    done_record(comm, in->seq, dec);
}

/* Marks what the liveness record knows on in->dead; 1 if anything changed. */
static int refresh_dead(weft_comm_t comm, ft_inst_t *in)
{
    int changed = 0;
    for (int m = 0; m < comm->size; m++)
        if (m != comm->rank && !bm_get(in->dead, m) && weft_rank_lost_why(weft_comm_world_rank_of(comm, m))) {
            bm_set(in->dead, m);
            changed = 1;
        }
    return changed;
}

static int lowest_alive(weft_comm_t comm, const ft_inst_t *in)
{
    for (int m = 0; m < comm->size; m++)
        if (m == comm->rank || !bm_get(in->dead, m)) return m;
    return comm->rank;
}

/* This rank's contribution to leader `to` (its state, as CONTRIB). */
static void send_contrib(weft_comm_t comm, ft_inst_t *in, int to)
{
    int n = comm->size;
    size_t bm = bm_bytes(n), len = sizeof(ft_contrib_t) + bm + dec_bytes(n);
    uint8_t *p = malloc(len);
    if (!p) return;
    ft_msg_t m;
    msg_init(&m, FT_CONTRIB, comm, in->seq, to);
    memcpy(p, &in->mine, sizeof(ft_contrib_t));
    memcpy(p + sizeof(ft_contrib_t), in->dead, bm);
    len = sizeof(ft_contrib_t) + bm;
    const uint8_t *dec = in->decided ? in->decided : in->accepted;
    if (dec) {
        m.flags = in->decided ? FT_IS_DECIDED : FT_HAS_ACCEPTED;
        m.acc_ballot = in->acc_ballot;
        memcpy(p + len, dec, dec_bytes(n));
        len += dec_bytes(n);
    }
    if (to == comm->rank) { /* the leader's own: stored as any other */
        ft_got_t *g = &in->got[to];
        got_clear(g);
        g->flags = m.flags;
        g->acc_ballot = m.acc_ballot;
        g->c = in->mine;
        if (dec && (g->dec = malloc(dec_bytes(n)))) memcpy(g->dec, dec, dec_bytes(n));
    } else {
        send_to(comm, to, &m, p, len);
    }
    if (in->promised < to) in->promised = to;
    free(p);
}

static void send_dec(weft_comm_t comm, ft_inst_t *in, int kind, int ballot, const uint8_t *dec, int to)
{
    ft_msg_t m;
    msg_init(&m, kind, comm, in->seq, ballot);
    send_to(comm, to, &m, dec, dec_bytes(comm->size));
}

/* A new value from the contributions of every live member (leader only). */
static uint8_t *propose(weft_comm_t comm, ft_inst_t *in)
{
    int n = comm->size;
    uint8_t *p = calloc(1, dec_bytes(n));
    if (!p) return NULL;
    ft_dec_t d = {.slot = UINT32_MAX, .epoch = 0, .flag = ~0, .nlive = 0};
    uint64_t slots[SLOT_WORDS];
    memset(slots, 0xff, sizeof(slots));
    for (int m = 0; m < n; m++) {
        if (bm_get(in->dead, m) && m != comm->rank) continue;
        const ft_contrib_t *c = &in->got[m].c;
        d.flag &= c->flag;
        if (c->epoch > d.epoch) d.epoch = c->epoch;
        for (int w = 0; w < SLOT_WORDS; w++)
            slots[w] &= c->free_slots[w];
        bm_set(p + sizeof(d), m);
        d.nlive++;
    }
    for (int w = 0; w < SLOT_WORDS && d.slot == UINT32_MAX; w++)
        if (slots[w]) d.slot = (uint32_t)(w * 64 + __builtin_ctzll(slots[w]));
    memcpy(p, &d, sizeof(d));
    return p;
}

/* One step of leading agreement `in`; 1 when something moved. */
static int lead(weft_comm_t comm, ft_inst_t *in)
{
    int n = comm->size, me = comm->rank;
    if (!in->leading) {
        in->leading = 1;
        in->phase = PHASE_GATHER;
        if (in->promised < me) in->promised = me;
        send_contrib(comm, in, me);
        in->contributed_to = me;
        /* Taking over from a lost leader: ask everyone, the members that
         * already decided included (they no longer contribute by themselves). */
        if (me > 0) {
            ft_msg_t m;
            for (int r = 0; r < n; r++)
                if (r != me && !bm_get(in->dead, r)) {
                    msg_init(&m, FT_QUERY, comm, in->seq, me);
                    send_to(comm, r, &m, NULL, 0);
                }
        }
    }
    if (in->phase == PHASE_GATHER) {
        const uint8_t *best = NULL;
        int best_ballot = -1;
        for (int m = 0; m < n; m++) {
            if (m != me && bm_get(in->dead, m)) continue;
            ft_got_t *g = &in->got[m];
            if (!g->c.epoch) return 0; /* not heard from it yet (every epoch is >= 1) */
            if (g->flags & FT_IS_DECIDED) {
                decide(comm, in, g->dec);
                return 1;
            }
            if ((g->flags & FT_HAS_ACCEPTED) && g->acc_ballot > best_ballot) {
                best = g->dec;
                best_ballot = g->acc_ballot;
            }
        }
        size_t len = dec_bytes(n);
        free(in->proposal);
        if (best) {
            if ((in->proposal = malloc(len))) memcpy(in->proposal, best, len);
        } else {
            in->proposal = propose(comm, in);
        }
        if (!in->proposal) return 0;
        free(in->accepted);
        if (!(in->accepted = malloc(len))) return 0;
        memcpy(in->accepted, in->proposal, len);
        in->acc_ballot = me;
        memset(in->acked, 0, (size_t)n);
        in->acked[me] = 1;
        in->phase = PHASE_ACCEPT;
        for (int r = 0; r < n; r++)
            if (r != me && !bm_get(in->dead, r)) {
                send_dec(comm, in, FT_ACCEPT, me, in->proposal, r);
                if (weft_ft_test_hook) weft_ft_test_hook("accept", r);
            }
        return 1;
    }
    for (int m = 0; m < n; m++)
        if (m != me && !bm_get(in->dead, m) && !in->acked[m]) return 0;
    decide(comm, in, in->proposal);
    return 1;
}

/* ---- control messages --------------------------------------------------- */

static void pending_keep(int from, const void *buf, size_t len)
{
    ft_queued_t *q = malloc(sizeof(*q) + len);
    if (!q) return;
    q->from = from;
    q->len = len;
    memcpy(q->data, buf, len);
    q->next = pending;
    pending = q;
    if (++npending > PENDING_KEPT) { /* the oldest goes: a notice for a communicator that never came */
        ft_queued_t **pp = &pending;
        while ((*pp)->next)
            pp = &(*pp)->next;
        free(*pp);
        *pp = NULL;
        npending--;
    }
}

static const uint8_t *done_find(uint32_t ctx, uint32_t seq, int *rank, int *size)
{
    for (int i = 0; i < DONE_KEPT; i++)
        if (done[i].dec && done[i].ctx == ctx && done[i].seq == seq) {
            *rank = done[i].rank;
            *size = done[i].size;
            return done[i].dec;
        }
    return NULL;
}

/* A leader asks about an agreement this rank finished on a communicator
 * it already freed: the decision is the answer. */
static void answer_from_done(int from_world, const ft_msg_t *m)
{
    int rank, size;
    const uint8_t *dec = done_find(m->ctx, m->seq, &rank, &size);
    if (!dec || (m->kind != FT_QUERY && m->kind != FT_CONTRIB && m->kind != FT_ACCEPT)) return;
    ft_msg_t r = {.magic = FT_MAGIC,
                  .kind = FT_DECIDE,
                  .ctx = m->ctx,
                  .seq = m->seq,
                  .from = rank,
                  .ballot = m->ballot,
                  .acc_ballot = -1,
                  .nbytes = (uint32_t)dec_bytes(size)};
    char *out = malloc(sizeof(r) + r.nbytes);
    if (!out) return;
    memcpy(out, &r, sizeof(r));
    memcpy(out + sizeof(r), dec, r.nbytes);
    weft_xport->ctrl_send(from_world, out, sizeof(r) + r.nbytes);
    free(out);
}

static void handle(int from_world, const char *buf, size_t len);

static void handle_agreement(weft_comm_t comm, const ft_msg_t *m, const uint8_t *p)
{
    int n = comm->size, from = m->from, me = comm->rank;
    size_t bm = bm_bytes(n), dl = dec_bytes(n);
    ft_inst_t *in = inst_get(comm, m->seq, 1);
    if (!in) return;
    switch (m->kind) {
    case FT_CONTRIB: {
        size_t want = sizeof(ft_contrib_t) + bm + ((m->flags & (FT_HAS_ACCEPTED | FT_IS_DECIDED)) ? dl : 0);
        if (m->nbytes != want) return;
        if (in->decided) { /* it thinks this rank leads; the matter is settled */
            send_dec(comm, in, FT_DECIDE, m->ballot, in->decided, from);
            return;
        }
        ft_got_t *g = &in->got[from];
        got_clear(g);
        g->flags = m->flags;
        g->acc_ballot = m->acc_ballot;
        memcpy(&g->c, p, sizeof(ft_contrib_t));
        if (g->c.epoch == 0) g->c.epoch = 1; /* "heard from" (lead() tests it) */
        if ((m->flags & (FT_HAS_ACCEPTED | FT_IS_DECIDED)) && (g->dec = malloc(dl)))
            memcpy(g->dec, p + sizeof(ft_contrib_t) + bm, dl);
        for (int r = 0; r < n; r++) /* what it knows lost counts here too */
            if (r != me && bm_get(p + sizeof(ft_contrib_t), r)) bm_set(in->dead, r);
        break;
    }
    case FT_QUERY:
        /* A leader leads only once all below it are lost. */
        for (int r = 0; r < m->ballot && r < n; r++)
            if (r != me) bm_set(in->dead, r);
        if (in->decided)
            send_dec(comm, in, FT_DECIDE, m->ballot, in->decided, from);
        else if (in->started)
            in->contributed_to = -1; /* the wait loop contributes to it again */
        break;
    case FT_ACCEPT:
        if (m->nbytes != dl) return;
        if (in->decided) {
            ft_msg_t a;
            msg_init(&a, FT_ACK, comm, in->seq, m->ballot);
            send_to(comm, from, &a, NULL, 0);
        } else if (m->ballot >= in->promised) {
            uint8_t *copy = malloc(dl);
            if (!copy) return;
            memcpy(copy, p, dl);
            free(in->accepted);
            in->accepted = copy;
            in->acc_ballot = m->ballot;
            in->promised = m->ballot;
            ft_msg_t a;
            msg_init(&a, FT_ACK, comm, in->seq, m->ballot);
            send_to(comm, from, &a, NULL, 0);
        }
        break;
    case FT_ACK:
        if (in->leading && in->phase == PHASE_ACCEPT && m->ballot == me) in->acked[from] = 1;
        break;
    case FT_DECIDE:
        if (m->nbytes == dl) decide(comm, in, p);
        break;
    }
}

static void handle(int from_world, const char *buf, size_t len)
{
    ft_msg_t m;
    if (len < sizeof(m)) return;
    memcpy(&m, buf, sizeof(m));
    if (m.magic != FT_MAGIC || len != sizeof(m) + m.nbytes) {
        weft_warn("control message of %zu bytes from rank %d is malformed: dropped", len, from_world);
        return;
    }
    weft_comm_t comm = weft_comm_lookup(m.ctx);
    if (!comm) {
        /* Not built here yet (its members may run ahead), or already freed. */
        int rank, size;
        if (done_find(m.ctx, m.seq, &rank, &size))
            answer_from_done(from_world, &m);
        else
            pending_keep(from_world, buf, len);
        return;
    }
    if (m.from < 0 || m.from >= comm->size || weft_comm_world_rank_of(comm, m.from) != from_world) {
        weft_warn("control message from world rank %d claims to be rank %d of comm %s: dropped", from_world, m.from,
                  comm->name);
        return;
    }
    if (m.kind == FT_REVOKE) {
        /* ballot: the world rank that revoked it (the sender may pass it on) */
        if (!comm->revoked) weft_ft_revoke_local(comm, m.ballot >= 0 && m.ballot < weft_g.size ? m.ballot : from_world);
        return; /* this rank passes it on only if the revoking rank dies (ft_progress) */
    }
    handle_agreement(comm, &m, (const uint8_t *)buf + sizeof(m));
}

void weft_ft_deliver(int from, const void *buf, size_t len)
{
    ft_queued_t *q = malloc(sizeof(*q) + len);
    if (!q) {
        weft_warn("control message from rank %d dropped: out of memory", from);
        return;
    }
    q->from = from;
    q->len = len;
    q->next = NULL;
    memcpy(q->data, buf, len);
    if (queue_tail)
        queue_tail->next = q;
    else
        queue_head = q;
    queue_tail = q;
}

void weft_ft_comm_created(weft_comm_t comm)
{
    /* Replays what came for it before; drops what came for the slot's
     * earlier communicators. */
    ft_queued_t *mine = NULL, **pp = &pending;
    while (*pp) {
        ft_queued_t *q = *pp;
        ft_msg_t m;
        memcpy(&m, q->data, sizeof(m));
        int same_slot = (m.ctx & WEFT_CTX_SLOT_MASK) == (comm->context_id & WEFT_CTX_SLOT_MASK);
        if (same_slot) {
            *pp = q->next;
            npending--;
            if (m.ctx == comm->context_id) {
                q->next = mine;
                mine = q;
            } else {
                free(q);
            }
        } else {
            pp = &q->next;
        }
    }
    while (mine) { /* newest first in `pending`: reversed back into arrival order */
        ft_queued_t *q = mine;
        mine = q->next;
        q->next = NULL;
        if (queue_tail)
            queue_tail->next = q;
        else
            queue_head = q;
        queue_tail = q;
    }
}

/* ---- revoke ------------------------------------------------------------- */

static void revoked_remove(weft_comm_t comm)
{
    for (int i = 0; i < nrevoked; i++)
        if (revoked[i] == comm) {
            revoked[i] = revoked[--nrevoked];
            return;
        }
}

void weft_ft_revoke_local(weft_comm_t comm, int by)
{
    if (comm->revoked) return;
    comm->revoked = 1;
    comm->revoked_by = by;
    if (comm->topo)
        for (int k = 0; k < WEFT_SUB_KINDS; k++)
            if (comm->topo->sub[k]) {
                comm->topo->sub[k]->revoked = 1;
                comm->topo->sub[k]->revoked_by = by;
            }
    if (nrevoked == revoked_cap) {
        int cap = revoked_cap ? 2 * revoked_cap : 8;
        weft_comm_t *n = realloc(revoked, sizeof(*n) * (size_t)cap);
        if (n) {
            revoked = n;
            revoked_cap = cap;
        }
    }
    if (nrevoked < revoked_cap) revoked[nrevoked++] = comm;
    weft_request_fail_comm(comm, WEFT_ERR_REVOKED);
    weft_xport->discard(comm->context_id, WEFT_CTX_FAMILY_MASK);
    int rrank = -1;
    for (int r = 0; r < comm->size && rrank < 0; r++)
        if (weft_comm_world_rank_of(comm, r) == by) rrank = r;
    weft_log(by == weft_g.rank ? WEFT_LOG_DEBUG : WEFT_LOG_INFO, "comm %s revoked by its rank %d (world rank %d)",
             comm->name, rrank, by);
    /* The failing waits return with this as their message. */
    weft_error(WEFT_ERR_REVOKED, "comm %s was revoked by its rank %d (world rank %d)", comm->name, rrank, by);
}

static void revoke_broadcast(weft_comm_t comm)
{
    ft_msg_t m;
    comm->revoke_sent = 1;
    for (int r = 0; r < comm->size; r++) {
        if (r == comm->rank || weft_rank_lost_why(weft_comm_world_rank_of(comm, r))) continue;
        msg_init(&m, FT_REVOKE, comm, 0, comm->revoked_by);
        send_to(comm, r, &m, NULL, 0);
    }
}

WEFT_API int weft_comm_revoke(weft_comm_t comm)
{
    WEFT_API_ENTER();
    int rc;
    WEFT_CHECK_INIT("weft_comm_revoke");
    if ((rc = weft_comm_check(comm, "weft_comm_revoke"))) return rc;
    if (comm->parent) return weft_error(WEFT_ERR_COMM, "weft_comm_revoke: comm %s is weft's own", comm->name);
    if (comm->revoked) return WEFT_SUCCESS;
    weft_ft_revoke_local(comm, weft_g.rank);
    revoke_broadcast(comm);
    weft_error_clear();
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_is_revoked(weft_comm_t comm, int *flag)
{
    WEFT_API_ENTER();
    int rc;
    WEFT_CHECK_INIT("weft_comm_is_revoked");
    if ((rc = weft_comm_check(comm, "weft_comm_is_revoked"))) return rc;
    if (!flag) return weft_error(WEFT_ERR_ARG, "weft_comm_is_revoked: NULL flag pointer");
    weft_progress(); /* a notice that arrived is taken into account */
    *flag = comm->revoked;
    return WEFT_SUCCESS;
}

/* ---- the progress hook -------------------------------------------------- */

static int ft_progress(void *arg)
{
    (void)arg;
    if (WEFT_LIKELY(!queue_head && !nrevoked)) return 0;
    int events = 0;
    while (queue_head) {
        ft_queued_t *q = queue_head;
        queue_head = q->next;
        if (!queue_head) queue_tail = NULL;
        handle(q->from, q->data, q->len);
        free(q);
        events++;
    }
    if (nrevoked && lost_seen != weft_lost_count) {
        /* A revoking rank died: maybe before every member had its notice. */
        lost_seen = weft_lost_count;
        for (int i = 0; i < nrevoked; i++)
            if (!revoked[i]->revoke_sent && weft_rank_lost_why(revoked[i]->revoked_by)) revoke_broadcast(revoked[i]);
    }
    if (nrevoked && ++drain_count % DRAIN_EVERY == 0)
        for (int i = 0; i < nrevoked; i++)
            events += weft_xport->discard(revoked[i]->context_id, WEFT_CTX_FAMILY_MASK) > 0;
    return events;
}

int weft_ft_init(void)
{
    queue_head = queue_tail = NULL;
    lost_seen = 0;
    if (hook_registered) return WEFT_SUCCESS;
    int rc = weft_progress_register(ft_progress, NULL);
    if (!rc) hook_registered = 1;
    return rc;
}

void weft_ft_finalize(void)
{
    while (queue_head) {
        ft_queued_t *q = queue_head;
        queue_head = q->next;
        free(q);
    }
    queue_tail = NULL;
    while (pending) {
        ft_queued_t *q = pending;
        pending = q->next;
        free(q);
    }
    npending = 0;
    for (int i = 0; i < DONE_KEPT; i++) {
        free(done[i].dec);
        done[i].dec = NULL;
    }
    done_next = 0;
    free(revoked);
    revoked = NULL;
    nrevoked = revoked_cap = 0;
    if (hook_registered) weft_progress_unregister(ft_progress, NULL);
    hook_registered = 0;
}

void weft_ft_comm_release(weft_comm_t comm)
{
    if (comm->revoked) revoked_remove(comm);
    if (!comm->ft) return;
    while (comm->ft->insts) {
        ft_inst_t *in = comm->ft->insts;
        comm->ft->insts = in->next;
        inst_free(in, comm->size);
    }
    free(comm->ft);
    comm->ft = NULL;
}

/* ---- agreement ---------------------------------------------------------- */

/* Runs the next agreement on comm with this rank's flag; *dec receives the
 * decision (malloc'd). */
static int agreement(weft_comm_t comm, int32_t flag, double deadline, const char *fn, uint8_t **dec)
{
    *dec = NULL;
    if (!comm->ft && !(comm->ft = calloc(1, sizeof(*comm->ft))))
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", fn);
    uint32_t seq = comm->ft->next_seq++;
    ft_inst_t *in = inst_get(comm, seq, 1);
    if (!in) return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory for %d members", fn, comm->size);
    in->started = 1;
    in->mine.flag = flag;
    in->mine.epoch = weft_comm_epoch();
    weft_comm_free_slots(in->mine.free_slots);
    double start = weft_wtime();
    weft_liveness_poll(start, 0, 1); /* what is known now: no message to a rank already gone */
    unsigned idle = 0, polls = 0, seen = weft_lost_count;
    refresh_dead(comm, in);
    for (;;) {
        int events = weft_progress();
        if (seen != weft_lost_count) {
            seen = weft_lost_count;
            refresh_dead(comm, in);
        }
        int leader = lowest_alive(comm, in);
        if (in->decided) {
            if (leader == comm->rank && !in->told) { /* the leader tells the others */
                in->told = 1;
                for (int r = 0; r < comm->size; r++)
                    if (r != comm->rank && !bm_get(in->dead, r)) {
                        send_dec(comm, in, FT_DECIDE, comm->rank, in->decided, r);
                        if (weft_ft_test_hook) weft_ft_test_hook("decide", r);
                    }
            }
            break;
        }
        if (leader == comm->rank)
            events += lead(comm, in);
        else if (in->contributed_to != leader) {
            send_contrib(comm, in, leader);
            in->contributed_to = leader;
            events++;
        }
        if (in->decided) continue; /* tell them, above */
        if (events == 0 && ++polls >= 32) {
            polls = 0;
            double now = weft_wtime();
            int late = deadline > 0 && now >= deadline;
            weft_liveness_poll(now, start, late);
            if (late && seen == weft_lost_count) {
                char who[256] = "";
                size_t used = 0;
                if (leader != comm->rank) snprintf(who, sizeof(who), "the decision of its leader, rank %d", leader);
                for (int r = 0; r < comm->size && leader == comm->rank; r++) {
                    int missing = in->phase == PHASE_GATHER ? !in->got[r].c.epoch : !in->acked[r];
                    if (r == comm->rank || bm_get(in->dead, r) || !missing) continue;
                    int k = snprintf(who + used, sizeof(who) - used, "%s%d", used ? ", " : "rank(s) ", r);
                    if (k > 0 && used + (size_t)k < sizeof(who)) used += (size_t)k;
                }
                return weft_error(WEFT_ERR_TIMEOUT, "%s (comm %s): no agreement within %.3g s: still waiting for %s",
                                  fn, comm->name, deadline - start, who);
            }
        }
        weft_progress_idle(&idle, events);
    }
    /* The members left out are lost for every survivor alike (some may have
     * learnt it only from the others): later waits, and weft_finalize's
     * choice of closing barrier, see the same. */
    for (int r = 0; r < comm->size; r++)
        if (r != comm->rank && !bm_get(in->decided + sizeof(ft_dec_t), r))
            weft_rank_lost(weft_comm_world_rank_of(comm, r), "the survivors of comm %s agreed it is lost", comm->name);
    size_t len = dec_bytes(comm->size);
    if (!(*dec = malloc(len))) return weft_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", fn);
    memcpy(*dec, in->decided, len);
    inst_prune(comm, seq);
    return WEFT_SUCCESS;
}

/* "2, 5 (world ranks 7, 9)": the members not in the decision's live set. */
static void describe_missing(weft_comm_t comm, const uint8_t *dec, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int r = 0; r < comm->size; r++) {
        if (bm_get(dec + sizeof(ft_dec_t), r)) continue;
        const char *why = weft_rank_lost_why(weft_comm_world_rank_of(comm, r));
        int k = snprintf(buf + used, len - used, "%srank %d (world rank %d%s%s)", used ? ", " : "", r,
                         weft_comm_world_rank_of(comm, r), why ? ": " : "", why ? why : "");
        if (k < 0 || used + (size_t)k >= len) break;
        used += (size_t)k;
    }
}

static int ft_prologue(weft_comm_t comm, const char *fn)
{
    int rc;
    WEFT_CHECK_INIT(fn);
    if ((rc = weft_comm_check(comm, fn))) return rc;
    if (comm->parent) return weft_error(WEFT_ERR_COMM, "%s: comm %s is weft's own", fn, comm->name);
    return WEFT_SUCCESS;
}

WEFT_API int weft_comm_agree(weft_comm_t comm, int *flag)
{
    WEFT_API_ENTER();
    int rc = ft_prologue(comm, "weft_comm_agree");
    if (rc) return rc;
    if (!flag) return weft_error(WEFT_ERR_ARG, "weft_comm_agree: NULL flag pointer");
    uint8_t *dec;
    rc = agreement(comm, (int32_t)*flag, weft_deadline_from(comm->timeout, weft_wtime()), "weft_comm_agree", &dec);
    if (rc) return rc;
    ft_dec_t d;
    memcpy(&d, dec, sizeof(d));
    *flag = (int)d.flag;
    if (!bm_get(dec + sizeof(d), comm->rank)) {
        rc = weft_error(WEFT_ERR_PEER_LOST,
                        "weft_comm_agree (comm %s): the other members agreed that this rank (%d) is lost", comm->name,
                        comm->rank);
    } else if (d.nlive < comm->size) {
        char missing[768];
        describe_missing(comm, dec, missing, sizeof(missing));
        rc = weft_error(WEFT_ERR_PEER_LOST, "weft_comm_agree (comm %s): %d of %d members took part; lost: %s",
                        comm->name, d.nlive, comm->size, missing);
    }
    free(dec);
    return rc;
}

WEFT_API int weft_comm_shrink(weft_comm_t comm, weft_comm_t *newcomm)
{
    WEFT_API_ENTER();
    int rc = ft_prologue(comm, "weft_comm_shrink");
    if (rc) return rc;
    if (!newcomm) return weft_error(WEFT_ERR_ARG, "weft_comm_shrink: NULL output pointer");
    *newcomm = WEFT_COMM_NULL;
    uint8_t *dec;
    rc = agreement(comm, 1, weft_deadline_from(comm->timeout, weft_wtime()), "weft_comm_shrink", &dec);
    if (rc) return rc;
    ft_dec_t d;
    memcpy(&d, dec, sizeof(d));
    int *members = malloc(sizeof(int) * (size_t)(d.nlive > 0 ? d.nlive : 1)), n = 0;
    if (!members) {
        rc = weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_shrink: out of memory");
    } else if (!bm_get(dec + sizeof(d), comm->rank)) {
        rc = weft_error(WEFT_ERR_PEER_LOST,
                        "weft_comm_shrink (comm %s): the other members agreed that this rank (%d) is lost", comm->name,
                        comm->rank);
    } else if (d.slot == UINT32_MAX) {
        rc = weft_error(WEFT_ERR_NO_MEMORY,
                        "weft_comm_shrink (comm %s): no context slot is free on every survivor (at most %d live "
                        "communicators per process)",
                        comm->name, WEFT_MAX_CONTEXTS);
    } else {
        for (int r = 0; r < comm->size; r++)
            if (bm_get(dec + sizeof(d), r)) members[n++] = r;
        char name[64];
        snprintf(name, sizeof(name), "%.50s.shrink", comm->name);
        rc = weft_comm_build(comm, members, n, d.slot, d.epoch, name, newcomm);
        if (!rc && n < comm->size) {
            char missing[768];
            describe_missing(comm, dec, missing, sizeof(missing));
            weft_info_log("weft_comm_shrink: comm %s: %d of %d members survive in %s; lost: %s", comm->name, n,
                          comm->size, (*newcomm)->name, missing);
        }
    }
    free(members);
    free(dec);
    return rc;
}

int weft_ft_barrier(double deadline)
{
    uint8_t *dec;
    int rc = agreement(weft_g.world, 1, deadline, "weft_finalize's closing barrier", &dec);
    free(dec);
    return rc;
}
