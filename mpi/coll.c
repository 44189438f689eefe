/* Collectives. Each MPI collective becomes one weft collective on bytes:
 * contiguous data goes as it is, other layouts are packed before and
 * unpacked after. Reductions that weft computes (its ops on its types)
 * go to weft's reductions; the others (user ops, MPI_MINLOC / MAXLOC,
 * logical ops, complex and other types weft lacks) gather the packed
 * contributions with one weft collective and reduce them here, in rank
 * order, so non-commutative ops get MPI's order. Blocking, nonblocking
 * and persistent forms share one description (struct mpi_coll) and one
 * start; a collective's completion step unpacks or reduces. */
#include "mpi/coll.h"

#include "mpi_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mpi_coll_free(struct mpi_coll *c)
{
    mpi_nbr_reset(c);
    free(c->ts), free(c->tr);
    free(c->wc1), free(c->wd1), free(c->wc2), free(c->wd2);
    free(c->scounts), free(c->sdispls), free(c->rcounts), free(c->rdispls);
    mpi_dtype_unref(c->stype);
    mpi_dtype_unref(c->rtype);
    for (int i = 0; i < c->ntypes; i++) {
        if (c->stypes) mpi_dtype_unref(c->stypes[i]);
        if (c->rtypes) mpi_dtype_unref(c->rtypes[i]);
    }
    free(c->stypes);
    free(c->rtypes);
    if (c->op && !c->op->predefined && --c->op->h.refs <= 0) mpi_obj_release(MPI_K_OP, c->op);
    free(c);
}

static void reset_state(struct mpi_coll *c)
{
    mpi_nbr_reset(c);
    free(c->ts), free(c->tr);
    free(c->wc1), free(c->wd1), free(c->wc2), free(c->wd2);
    c->ts = c->tr = NULL;
    c->wc1 = c->wd1 = c->wc2 = c->wd2 = NULL;
}

/* ---- helpers ----------------------------------------------------------------- */

static int64_t *new_i64(int n)
{
    return mpi_malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
}

/* Element i of buf (count elements of t each) */
static char *elem_at(const void *buf, MPI_Count i, MPI_Count count, const struct MPI_ABI_Datatype *t)
{
    return (char *)buf + (MPI_Aint)(i * count) * t->extent;
}

/* MPI allows negative displacements (the memory before the buffer is the
 * program's too); weft's are offsets into its buffer and not negative:
 * weft's buffer starts at the lowest block with data, the displacements
 * count from there (an empty block's, below it, from the start). */
static void *rebase(const void *base, int n, const int64_t *counts, int64_t *displs)
{
    int64_t lo = 0;
    for (int i = 0; i < n; i++)
        if (counts[i] && displs[i] < lo) lo = displs[i];
    for (int i = 0; i < n; i++)
        displs[i] = displs[i] - lo < 0 ? 0 : displs[i] - lo;
    return (char *)base + lo;
}

/* Packed send data of (buf, count, t): the data itself when contiguous,
 * else a packed copy in *tmp. */
static const void *send_view(const void *buf, MPI_Count count, const struct MPI_ABI_Datatype *t, void **tmp)
{
    if (t->contig) return mpi_dtype_data(buf, t);
    *tmp = mpi_malloc((size_t)mpi_dtype_bytes(t, count));
    if (*tmp) mpi_pack(buf, count, t, *tmp);
    return *tmp;
}

/* Rank-order fold: rbuf = x_lo op (x_lo+1 op ... op x_hi), contributions
 * packed in `all` (block bytes each, count elements of t). */
static int fold(struct mpi_coll *c, const char *all, int lo, int hi, MPI_Count count, void *rbuf)
{
    struct MPI_ABI_Datatype *t = c->rtype;
    MPI_Count B = c->block;
    mpi_unpack(all + (MPI_Aint)hi * B, B, rbuf, count, t);
    if (hi == lo) return MPI_SUCCESS;
    MPI_Aint lo_off, span;
    mpi_dtype_span(t, count, &lo_off, &span);
    char *tmp = mpi_malloc((size_t)span);
    if (!tmp) return MPI_ERR_NO_MEM;
    char *base = tmp - lo_off;
    for (int i = hi - 1; i >= lo; i--) {
        mpi_unpack(all + (MPI_Aint)i * B, B, base, count, t);
        int rc = mpi_reduce_local(base, rbuf, count, t, c->op);
        if (rc) {
            free(tmp);
            return rc;
        }
    }
    free(tmp);
    return MPI_SUCCESS;
}

/* ---- start and completion --------------------------------------------------------- */

static int coll_step(mpi_req_t *r, int rc, const weft_status_t *st);

#define NOMEM()                                                                                                        \
    do {                                                                                                               \
        return MPI_ERR_NO_MEM;                                                                                         \
    } while (0)

/* Starts the weft collective of r->coll; returns an MPI class (0: started). */
static int coll_post(mpi_req_t *r)
{
    struct mpi_coll *c = r->coll;
    struct MPI_ABI_Comm *cm = r->comm;
    weft_comm_t wc = cm->wc;
    int n = cm->size, me = cm->rank, wrc = 0;
    struct MPI_ABI_Datatype *st = c->stype, *rt = c->rtype;
    const void *sdata = NULL;
    void *rdata = NULL;
    weft_request_t *w = &r->wr;
    reset_state(c);

    if (c->kind >= C_NALLGATHER) {
        int rc = mpi_nbr_post(r);
        if (!rc) r->step = coll_step;
        return rc;
    }
    switch (c->kind) {
    case C_BARRIER: wrc = weft_ibarrier(wc, w); break;

    case C_BCAST: {
        MPI_Count B = mpi_dtype_bytes(rt, c->rcount);
        if (rt->contig) {
            wrc = weft_ibcast(mpi_dtype_data(c->rbuf, rt), B, WEFT_BYTE, c->root, wc, w);
        } else {
            if (!(c->tr = mpi_malloc((size_t)B))) NOMEM();
            if (me == c->root) mpi_pack(c->rbuf, c->rcount, rt, c->tr);
            wrc = weft_ibcast(c->tr, B, WEFT_BYTE, c->root, wc, w);
        }
        break;
    }

    case C_GATHER:
    case C_ALLGATHER: {
        int rooted = c->kind == C_GATHER, is_root = !rooted || me == c->root;
        MPI_Count B = is_root ? mpi_dtype_bytes(rt, c->rcount) : mpi_dtype_bytes(st, c->scount);
        int slot = rooted ? c->root : me;
        if (is_root) {
            if (rt->contig) {
                rdata = mpi_dtype_data(c->rbuf, rt);
            } else {
                if (!(rdata = c->tr = mpi_malloc((size_t)(B * n)))) NOMEM();
                if (c->sbuf == MPI_IN_PLACE)
                    mpi_pack(elem_at(c->rbuf, slot, c->rcount, rt), c->rcount, rt, (char *)c->tr + slot * B);
            }
        }
        if (c->sbuf == MPI_IN_PLACE) {
            sdata = WEFT_IN_PLACE;
        } else if (!(sdata = send_view(c->sbuf, c->scount, st, &c->ts)) && B) {
            NOMEM();
        }
        wrc = rooted ? weft_igather(sdata, rdata, B, WEFT_BYTE, c->root, wc, w)
                     : weft_iallgather(sdata, rdata, B, WEFT_BYTE, wc, w);
        break;
    }

    case C_GATHERV:
    case C_ALLGATHERV: {
        int rooted = c->kind == C_GATHERV, is_root = !rooted || me == c->root;
        MPI_Count sendB = 0;
        if (is_root) {
            if (!(c->wc1 = new_i64(n)) || !(c->wd1 = new_i64(n))) NOMEM();
            MPI_Count off = 0;
            for (int i = 0; i < n; i++) {
                c->wc1[i] = mpi_dtype_bytes(rt, c->rcounts[i]);
                c->wd1[i] = rt->contig ? c->rdispls[i] * rt->extent : off;
                off += c->wc1[i];
            }
            if (rt->contig) {
                rdata = rebase(mpi_dtype_data(c->rbuf, rt), n, c->wc1, c->wd1);
            } else {
                if (!(rdata = c->tr = mpi_malloc((size_t)off))) NOMEM();
            }
        }
        int slot = rooted ? c->root : me;
        if (c->sbuf == MPI_IN_PLACE) {
            sdata = WEFT_IN_PLACE;
            sendB = c->wc1[slot];
            if (!rt->contig)
                mpi_pack((char *)c->rbuf + c->rdispls[slot] * rt->extent, c->rcounts[slot], rt,
                         (char *)c->tr + c->wd1[slot]);
        } else {
            sendB = mpi_dtype_bytes(st, c->scount);
            if (!(sdata = send_view(c->sbuf, c->scount, st, &c->ts)) && sendB) NOMEM();
        }
        wrc = rooted ? weft_igatherv(sdata, sendB, rdata, c->wc1, c->wd1, WEFT_BYTE, c->root, wc, w)
                     : weft_iallgatherv(sdata, sendB, rdata, c->wc1, c->wd1, WEFT_BYTE, wc, w);
        break;
    }

    case C_SCATTER: {
        int is_root = me == c->root;
        MPI_Count B = is_root ? mpi_dtype_bytes(st, c->scount) : mpi_dtype_bytes(rt, c->rcount);
        if (is_root) {
            if (st->contig) {
                sdata = mpi_dtype_data(c->sbuf, st);
            } else {
                if (!(c->ts = mpi_malloc((size_t)(B * n)))) NOMEM();
                for (int i = 0; i < n; i++)
                    mpi_pack(elem_at(c->sbuf, i, c->scount, st), c->scount, st, (char *)c->ts + i * B);
                sdata = c->ts;
            }
        }
        if (c->rbuf == MPI_IN_PLACE) {
            rdata = WEFT_IN_PLACE;
        } else if (rt->contig) {
            rdata = mpi_dtype_data(c->rbuf, rt);
        } else if (!(rdata = c->tr = mpi_malloc((size_t)B))) {
            NOMEM();
        }
        wrc = weft_iscatter(sdata, rdata, B, WEFT_BYTE, c->root, wc, w);
        break;
    }

    case C_SCATTERV: {
        int is_root = me == c->root;
        MPI_Count recvB;
        if (is_root) {
            if (!(c->wc1 = new_i64(n)) || !(c->wd1 = new_i64(n))) NOMEM();
            MPI_Count off = 0;
            for (int i = 0; i < n; i++) {
                c->wc1[i] = mpi_dtype_bytes(st, c->scounts[i]);
                c->wd1[i] = st->contig ? c->sdispls[i] * st->extent : off;
                off += c->wc1[i];
            }
            if (st->contig) {
                sdata = rebase(mpi_dtype_data(c->sbuf, st), n, c->wc1, c->wd1);
            } else {
                if (!(c->ts = mpi_malloc((size_t)off))) NOMEM();
                for (int i = 0; i < n; i++)
                    mpi_pack((char *)c->sbuf + c->sdispls[i] * st->extent, c->scounts[i], st,
                             (char *)c->ts + c->wd1[i]);
                sdata = c->ts;
            }
        }
        if (c->rbuf == MPI_IN_PLACE) {
            rdata = WEFT_IN_PLACE;
            recvB = c->wc1[me];
        } else {
            recvB = mpi_dtype_bytes(rt, c->rcount);
            if (rt->contig)
                rdata = mpi_dtype_data(c->rbuf, rt);
            else if (!(rdata = c->tr = mpi_malloc((size_t)recvB)))
                NOMEM();
        }
        wrc = weft_iscatterv(sdata, c->wc1, c->wd1, rdata, recvB, WEFT_BYTE, c->root, wc, w);
        break;
    }

    case C_ALLTOALL: {
        MPI_Count B = mpi_dtype_bytes(rt, c->rcount);
        if (c->sbuf == MPI_IN_PLACE) {
            if (rt->contig) {
                sdata = WEFT_IN_PLACE;
            } else {
                if (!(c->ts = mpi_malloc((size_t)(B * n)))) NOMEM();
                mpi_pack(c->rbuf, c->rcount * n, rt, c->ts);
                sdata = c->ts;
            }
        } else if (st->contig) {
            sdata = mpi_dtype_data(c->sbuf, st);
        } else {
            MPI_Count SB = mpi_dtype_bytes(st, c->scount);
            if (!(c->ts = mpi_malloc((size_t)(SB * n)))) NOMEM();
            for (int i = 0; i < n; i++)
                mpi_pack(elem_at(c->sbuf, i, c->scount, st), c->scount, st, (char *)c->ts + i * SB);
            sdata = c->ts;
        }
        if (rt->contig)
            rdata = mpi_dtype_data(c->rbuf, rt);
        else if (!(rdata = c->tr = mpi_malloc((size_t)(B * n))))
            NOMEM();
        wrc = weft_ialltoall(sdata, rdata, B, WEFT_BYTE, wc, w);
        break;
    }

    case C_ALLTOALLV:
    case C_ALLTOALLW: {
        int wform = c->kind == C_ALLTOALLW, inplace = c->sbuf == MPI_IN_PLACE;
        if (!(c->wc1 = new_i64(n)) || !(c->wd1 = new_i64(n)) || !(c->wc2 = new_i64(n)) || !(c->wd2 = new_i64(n)))
            NOMEM();
        /* receive side: packed unless a contiguous single type */
        int rpacked = wform || !rt->contig;
        MPI_Count roff = 0, soff = 0;
        for (int i = 0; i < n; i++) {
            struct MPI_ABI_Datatype *ti = wform ? c->rtypes[i] : rt;
            c->wc2[i] = mpi_dtype_bytes(ti, c->rcounts[i]);
            c->wd2[i] = rpacked ? roff : c->rdispls[i] * rt->extent;
            roff += c->wc2[i];
        }
        int spacked = wform || inplace || !st->contig;
        for (int i = 0; i < n; i++) {
            struct MPI_ABI_Datatype *ti = inplace ? (wform ? c->rtypes[i] : rt) : (wform ? c->stypes[i] : st);
            MPI_Count cnt = inplace ? c->rcounts[i] : c->scounts[i];
            c->wc1[i] = mpi_dtype_bytes(ti, cnt);
            c->wd1[i] = spacked ? soff : c->sdispls[i] * st->extent;
            soff += c->wc1[i];
        }
        if (spacked) {
            if (!(c->ts = mpi_malloc((size_t)soff))) NOMEM();
            for (int i = 0; i < n; i++) {
                struct MPI_ABI_Datatype *ti = inplace ? (wform ? c->rtypes[i] : rt) : (wform ? c->stypes[i] : st);
                const void *base = inplace ? c->rbuf : c->sbuf;
                MPI_Count disp = inplace ? c->rdispls[i] : c->sdispls[i], cnt = inplace ? c->rcounts[i] : c->scounts[i];
                const char *at = (const char *)base + (wform ? disp : disp * ti->extent);
                mpi_pack(at, cnt, ti, (char *)c->ts + c->wd1[i]);
            }
            sdata = c->ts;
        } else {
            sdata = rebase(mpi_dtype_data(c->sbuf, st), n, c->wc1, c->wd1);
        }
        if (rpacked) {
            if (!(rdata = c->tr = mpi_malloc((size_t)roff))) NOMEM();
        } else {
            rdata = rebase(mpi_dtype_data(c->rbuf, rt), n, c->wc2, c->wd2);
        }
        wrc = weft_ialltoallv(sdata, c->wc1, c->wd1, rdata, c->wc2, c->wd2, WEFT_BYTE, wc, w);
        break;
    }

    case C_REDUCE:
    case C_ALLREDUCE:
    case C_SCAN:
    case C_EXSCAN:
    case C_RSB:
    case C_RS: {
        weft_op_t wop;
        struct MPI_ABI_Datatype *t = rt;
        int is_root = c->kind != C_REDUCE || me == c->root;
        int inplace = c->sbuf == MPI_IN_PLACE;
        /* elements of input: count, or the sum of the blocks */
        MPI_Count in_count = c->rcount, out_count = c->rcount;
        if (c->kind == C_RSB) in_count = c->rcount * n;
        if (c->kind == C_RS) {
            in_count = 0;
            for (int i = 0; i < n; i++)
                in_count += c->rcounts[i];
            out_count = c->rcounts[me];
        }
        const void *input = inplace ? c->rbuf : c->sbuf;
        c->fallback = !mpi_op_native(c->op, t, &wop);
        if (!c->fallback) {
            weft_dtype_t wdt = t->wdt;
            MPI_Count per = t->nelem;
            void *out;
            if (t->contig && !(inplace && (c->kind == C_RS || c->kind == C_RSB))) {
                sdata = inplace ? WEFT_IN_PLACE : mpi_dtype_data(c->sbuf, t);
                out = is_root || c->kind != C_REDUCE ? mpi_dtype_data(c->rbuf, t) : NULL;
            } else {
                if (!(sdata = c->ts = mpi_malloc((size_t)mpi_dtype_bytes(t, in_count)))) NOMEM();
                mpi_pack(input, in_count, t, c->ts);
                if (!(out = c->tr = mpi_malloc((size_t)mpi_dtype_bytes(t, out_count)))) NOMEM();
                if (c->kind == C_EXSCAN && me == 0) mpi_pack(c->rbuf, out_count, t, c->tr);
            }
            switch (c->kind) {
            case C_REDUCE: wrc = weft_ireduce(sdata, out, c->rcount * per, wdt, wop, c->root, wc, w); break;
            case C_ALLREDUCE: wrc = weft_iallreduce(sdata, out, c->rcount * per, wdt, wop, wc, w); break;
            case C_SCAN: wrc = weft_iscan(sdata, out, c->rcount * per, wdt, wop, wc, w); break;
            case C_EXSCAN: wrc = weft_iexscan(sdata, out, c->rcount * per, wdt, wop, wc, w); break;
            case C_RSB: wrc = weft_ireduce_scatter_block(sdata, out, c->rcount * per, wdt, wop, wc, w); break;
            case C_RS:
                if (!(c->wc1 = new_i64(n))) NOMEM();
                for (int i = 0; i < n; i++)
                    c->wc1[i] = c->rcounts[i] * per;
                wrc = weft_ireduce_scatter(sdata, out, c->wc1, wdt, wop, wc, w);
                break;
            }
            break;
        }
        /* computed here: gather the packed inputs, fold them in rank order */
        MPI_Count inB = mpi_dtype_bytes(t, in_count);
        c->block = mpi_dtype_bytes(t, out_count);
        if (!(c->ts = mpi_malloc((size_t)inB))) NOMEM();
        mpi_pack(input, in_count, t, c->ts);
        switch (c->kind) {
        case C_REDUCE:
            if (is_root && !(c->tr = mpi_malloc((size_t)(inB * n)))) NOMEM();
            wrc = weft_igather(c->ts, c->tr, inB, WEFT_BYTE, c->root, wc, w);
            break;
        case C_ALLREDUCE:
        case C_SCAN:
        case C_EXSCAN:
            if (!(c->tr = mpi_malloc((size_t)(inB * n)))) NOMEM();
            wrc = weft_iallgather(c->ts, c->tr, inB, WEFT_BYTE, wc, w);
            break;
        case C_RSB:
            if (!(c->tr = mpi_malloc((size_t)(c->block * n)))) NOMEM();
            wrc = weft_ialltoall(c->ts, c->tr, c->block, WEFT_BYTE, wc, w);
            break;
        case C_RS: {
            if (!(c->wc1 = new_i64(n)) || !(c->wd1 = new_i64(n)) || !(c->wc2 = new_i64(n)) || !(c->wd2 = new_i64(n)))
                NOMEM();
            MPI_Count off = 0;
            for (int i = 0; i < n; i++) {
                c->wc1[i] = mpi_dtype_bytes(t, c->rcounts[i]);
                c->wd1[i] = off;
                off += c->wc1[i];
                c->wc2[i] = c->block;
                c->wd2[i] = (int64_t)i * c->block;
            }
            if (!(c->tr = mpi_malloc((size_t)(c->block * n)))) NOMEM();
            wrc = weft_ialltoallv(c->ts, c->wc1, c->wd1, c->tr, c->wc2, c->wd2, WEFT_BYTE, wc, w);
            break;
        }
        }
        break;
    }
    }
    if (wrc) return wrc; /* a weft status (negative), made an MPI error by the caller */
    r->step = coll_step;
    return MPI_SUCCESS;
}

/* The weft collective ended: unpack, or reduce here. */
static int coll_step(mpi_req_t *r, int rc, const weft_status_t *st)
{
    (void)st;
    struct mpi_coll *c = r->coll;
    struct MPI_ABI_Comm *cm = r->comm;
    int n = cm->size, me = cm->rank, err = MPI_SUCCESS;
    struct MPI_ABI_Datatype *rt = c->rtype;
    if (c->kind >= C_NALLGATHER) return mpi_nbr_step(r, rc);
    if (rc) return mpi_class_of_weft(rc);
    switch (c->kind) {
    case C_BCAST:
        if (c->tr && me != c->root) mpi_unpack(c->tr, mpi_dtype_bytes(rt, c->rcount), c->rbuf, c->rcount, rt);
        break;
    case C_GATHER:
    case C_ALLGATHER:
        if (c->tr && (c->kind == C_ALLGATHER || me == c->root)) {
            MPI_Count B = mpi_dtype_bytes(rt, c->rcount);
            for (int i = 0; i < n; i++)
                mpi_unpack((char *)c->tr + i * B, B, elem_at(c->rbuf, i, c->rcount, rt), c->rcount, rt);
        }
        break;
    case C_GATHERV:
    case C_ALLGATHERV:
        if (c->tr && (c->kind == C_ALLGATHERV || me == c->root))
            for (int i = 0; i < n; i++)
                mpi_unpack((char *)c->tr + c->wd1[i], c->wc1[i], (char *)c->rbuf + c->rdispls[i] * rt->extent,
                           c->rcounts[i], rt);
        break;
    case C_SCATTER:
    case C_SCATTERV:
        if (c->tr) mpi_unpack(c->tr, mpi_dtype_bytes(rt, c->rcount), c->rbuf, c->rcount, rt);
        break;
    case C_ALLTOALL:
        if (c->tr) {
            MPI_Count B = mpi_dtype_bytes(rt, c->rcount);
            for (int i = 0; i < n; i++)
                mpi_unpack((char *)c->tr + i * B, B, elem_at(c->rbuf, i, c->rcount, rt), c->rcount, rt);
        }
        break;
    case C_ALLTOALLV:
    case C_ALLTOALLW:
        if (c->tr)
            for (int i = 0; i < n; i++) {
                struct MPI_ABI_Datatype *ti = c->kind == C_ALLTOALLW ? c->rtypes[i] : rt;
                char *at = (char *)c->rbuf + (c->kind == C_ALLTOALLW ? c->rdispls[i] : c->rdispls[i] * ti->extent);
                mpi_unpack((char *)c->tr + c->wd2[i], c->wc2[i], at, c->rcounts[i], ti);
            }
        break;
    case C_REDUCE:
    case C_ALLREDUCE:
    case C_SCAN:
    case C_EXSCAN:
    case C_RSB:
    case C_RS: {
        MPI_Count out_count = c->kind == C_RS ? c->rcounts[me] : c->rcount;
        if (!c->fallback) {
            if (c->tr && (c->kind != C_REDUCE || me == c->root) && !(c->kind == C_EXSCAN && me == 0))
                mpi_unpack(c->tr, mpi_dtype_bytes(rt, out_count), c->rbuf, out_count, rt);
            break;
        }
        switch (c->kind) {
        case C_REDUCE:
            if (me == c->root) err = fold(c, c->tr, 0, n - 1, c->rcount, c->rbuf);
            break;
        case C_ALLREDUCE:
        case C_RSB:
        case C_RS: err = fold(c, c->tr, 0, n - 1, out_count, c->rbuf); break;
        case C_SCAN: err = fold(c, c->tr, 0, me, c->rcount, c->rbuf); break;
        case C_EXSCAN:
            if (me > 0) err = fold(c, c->tr, 0, me - 1, c->rcount, c->rbuf);
            break;
        }
        break;
    }
    default: break;
    }
    free(c->ts), free(c->tr);
    c->ts = c->tr = NULL;
    return err;
}

int mpi_coll_start(mpi_req_t *r)
{
    int rc = coll_post(r);
    if (rc > 0) return mpi_err(r->comm, rc, r->fn, "out of memory");
    if (rc < 0) {
        r->active = 0;
        return mpi_err_weft(r->comm, rc, r->fn);
    }
    if (r->wr && !r->complete) mpi_req_track(r);
    return MPI_SUCCESS;
}

/* ---- front ends -------------------------------------------------------------------- */

/* Runs a described collective in one of the three forms. *c is copied to
 * the heap (arrays it points to are owned already). */
int mpi_coll_run(struct MPI_ABI_Comm *cm, struct mpi_coll *c, int form, MPI_Request *request, const char *fn)
{
    mpi_dtype_ref(c->stype);
    mpi_dtype_ref(c->rtype);
    if (c->op && !c->op->predefined) c->op->h.refs++;
    struct mpi_coll *h = malloc(sizeof(*h));
    if (!h) {
        c->ts = c->tr = NULL;
        c->wc1 = c->wd1 = c->wc2 = c->wd2 = NULL;
        struct mpi_coll *tmp = malloc(sizeof(*tmp)); /* mpi_coll_free frees its argument */
        if (tmp) {
            *tmp = *c;
            mpi_coll_free(tmp);
        }
        return mpi_err(cm, MPI_ERR_NO_MEM, fn, "out of memory");
    }
    *h = *c;
    mpi_req_t *r = NULL;
    int rc = mpi_req_new(form == PERSIST ? MPI_REQ_PCOLL : MPI_REQ_COLL, cm, fn, &r);
    if (rc) {
        mpi_coll_free(h);
        return rc;
    }
    r->coll = h;
    if (form == PERSIST) {
        *request = r;
        return MPI_SUCCESS;
    }
    r->active = 1;
    MPI_Request handle = r;
    if ((rc = mpi_coll_start(r))) {
        r->complete = 1;
        mpi_req_finish(r, &handle);
        return rc;
    }
    if (form == NONBLOCK) {
        *request = r;
        return MPI_SUCCESS;
    }
    rc = mpi_req_block(r);
    if (!rc && r->error) rc = mpi_err(cm, r->error, fn, "%s", weft_last_error());
    r->complete = 1;
    mpi_req_finish(r, &handle);
    return rc;
}

static int check_common(MPI_Comm comm, int form, MPI_Request *request, const char *fn, struct MPI_ABI_Comm **c)
{
    int rc = mpi_check_comm(comm, fn, c);
    if (MPI_UNLIKELY(rc)) return rc;
    if (form != BLOCK && !request) return mpi_err(*c, MPI_ERR_ARG, fn, "NULL request");
    return MPI_SUCCESS;
}

static int check_root(struct MPI_ABI_Comm *c, int root, const char *fn)
{
    if (root < 0 || root >= c->size)
        return mpi_err(c, MPI_ERR_ROOT, fn, "root %d out of range 0..%d", root, c->size - 1);
    return MPI_SUCCESS;
}

static int check_typebuf(struct MPI_ABI_Comm *c, MPI_Datatype h, MPI_Count count, const char *fn,
                         struct MPI_ABI_Datatype **t)
{
    int rc = mpi_check_dtype(c, h, fn, t);
    if (rc || (rc = mpi_check_buf(c, NULL, count, *t, fn))) return rc;
    return MPI_SUCCESS;
}

static int check_op(struct MPI_ABI_Comm *c, MPI_Op h, struct MPI_ABI_Datatype *t, const char *fn,
                    struct MPI_ABI_Op **op)
{
    *op = mpi_op_get(h);
    if (!*op) return mpi_err(c, MPI_ERR_OP, fn, "%s", h == MPI_OP_NULL ? "MPI_OP_NULL" : "invalid op handle");
    return mpi_op_check(c, *op, t, fn);
}

/* MPI forbids one buffer as both the send and the receive buffer of a
 * collective (MPI_IN_PLACE is how to say that): moves says whether data
 * moves both ways here. */
static int check_alias(struct MPI_ABI_Comm *c, const void *sbuf, const void *rbuf, int moves, const char *fn)
{
    if (!moves || !sbuf || sbuf != rbuf || sbuf == MPI_IN_PLACE) return MPI_SUCCESS;
    return mpi_err(c, MPI_ERR_BUFFER, fn,
                   "sendbuf and recvbuf are the same buffer %p (aliased; MPI_IN_PLACE is for that)", (void *)sbuf);
}

/* Copies count arrays (int or MPI_Count) to MPI_Count. */
static MPI_Count *copy_counts(const void *a, int is_large, int n, int *bad)
{
    if (!a) {
        *bad = 1;
        return NULL;
    }
    MPI_Count *r = mpi_malloc(sizeof(MPI_Count) * (size_t)(n > 0 ? n : 1));
    if (!r) {
        *bad = 2;
        return NULL;
    }
    for (int i = 0; i < n; i++)
        r[i] = is_large ? ((const MPI_Count *)a)[i] : ((const int *)a)[i];
    return r;
}

static MPI_Count *copy_displs(const void *a, int is_large, int n, int *bad)
{
    if (!a) {
        *bad = 1;
        return NULL;
    }
    MPI_Count *r = mpi_malloc(sizeof(MPI_Count) * (size_t)(n > 0 ? n : 1));
    if (!r) {
        *bad = 2;
        return NULL;
    }
    for (int i = 0; i < n; i++)
        r[i] = is_large ? ((const MPI_Aint *)a)[i] : ((const int *)a)[i];
    return r;
}

static int array_error(struct MPI_ABI_Comm *c, int bad, const char *fn)
{
    return bad == 2 ? mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory")
                    : mpi_err(c, MPI_ERR_ARG, fn, "NULL count or displacement array");
}

static int check_counts(struct MPI_ABI_Comm *c, const MPI_Count *a, int n, const char *fn)
{
    for (int i = 0; i < n; i++)
        if (a[i] < 0) return mpi_err(c, MPI_ERR_COUNT, fn, "negative count %lld at %d", (long long)a[i], i);
    return MPI_SUCCESS;
}

/* barrier */
static int barrier(MPI_Comm comm, int form, MPI_Request *request, const char *fn)
{
    struct MPI_ABI_Comm *c;
    int rc = check_common(comm, form, request, fn, &c);
    if (rc) return rc;
    if (form == BLOCK) {
        if ((rc = weft_barrier(c->wc))) return mpi_err_weft(c, rc, fn);
        return MPI_SUCCESS;
    }
    struct mpi_coll d = {.kind = C_BARRIER};
    return mpi_coll_run(c, &d, form, request, fn);
}

MPI_DEF(int, Barrier, (MPI_Comm comm))
{
    return barrier(comm, BLOCK, NULL, "MPI_Barrier");
}

MPI_DEF(int, Ibarrier, (MPI_Comm comm, MPI_Request *request))
{
    return barrier(comm, NONBLOCK, request, "MPI_Ibarrier");
}

MPI_DEF(int, Barrier_init, (MPI_Comm comm, MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Barrier_init";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : barrier(comm, PERSIST, request, fn);
}

/* bcast */
static int bcast(void *buf, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm, int form,
                 MPI_Request *request, const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *t;
    int rc = check_common(comm, form, request, fn, &c);
    if (rc || (rc = check_typebuf(c, datatype, count, fn, &t)) || (rc = check_root(c, root, fn))) return rc;
    if (form == BLOCK && t->contig) {
        if ((rc = weft_bcast(mpi_dtype_data(buf, t), mpi_dtype_bytes(t, count), WEFT_BYTE, root, c->wc)))
            return mpi_err_weft(c, rc, fn);
        return MPI_SUCCESS;
    }
    struct mpi_coll d = {.kind = C_BCAST, .rbuf = buf, .rcount = count, .rtype = t, .root = root};
    return mpi_coll_run(c, &d, form, request, fn);
}

MPI_DEF(int, Bcast, (void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm))
{
    return bcast(buffer, count, datatype, root, comm, BLOCK, NULL, "MPI_Bcast");
}
MPI_DEF(int, Bcast_c, (void *buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm))
{
    return bcast(buffer, count, datatype, root, comm, BLOCK, NULL, "MPI_Bcast_c");
}
MPI_DEF(int, Ibcast, (void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request *request))
{
    return bcast(buffer, count, datatype, root, comm, NONBLOCK, request, "MPI_Ibcast");
}
MPI_DEF(int, Ibcast_c,
        (void *buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request *request))
{
    return bcast(buffer, count, datatype, root, comm, NONBLOCK, request, "MPI_Ibcast_c");
}
MPI_DEF(int, Bcast_init,
        (void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Bcast_init";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : bcast(buffer, count, datatype, root, comm, PERSIST, request, fn);
}
MPI_DEF(int, Bcast_init_c,
        (void *buffer, MPI_Count count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Info info,
         MPI_Request *request))
{
    const char *fn = "MPI_Bcast_init_c";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : bcast(buffer, count, datatype, root, comm, PERSIST, request, fn);
}

/* gather / allgather / scatter / alltoall: one count per rank */
static int per_rank(int kind, const void *sbuf, MPI_Count scount, MPI_Datatype stype, void *rbuf, MPI_Count rcount,
                    MPI_Datatype rtype, int root, MPI_Comm comm, int form, MPI_Request *request, const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *st = NULL, *rt = NULL;
    int rc = check_common(comm, form, request, fn, &c);
    if (rc) return rc;
    int rooted = kind == C_GATHER || kind == C_SCATTER;
    if (rooted && (rc = check_root(c, root, fn))) return rc;
    int is_root = !rooted || c->rank == root;
    /* which sides are significant here */
    int send_sig = kind == C_SCATTER ? is_root : sbuf != MPI_IN_PLACE;
    int recv_sig = kind == C_GATHER ? is_root : rbuf != MPI_IN_PLACE;
    if (sbuf == MPI_IN_PLACE && (kind == C_SCATTER || (rooted && !is_root)))
        return mpi_err(c, MPI_ERR_BUFFER, fn, "MPI_IN_PLACE as the send buffer is not allowed here");
    if (rbuf == MPI_IN_PLACE && (kind != C_SCATTER || !is_root))
        return mpi_err(c, MPI_ERR_BUFFER, fn, "MPI_IN_PLACE as the receive buffer is not allowed here");
    if (send_sig && (rc = check_typebuf(c, stype, scount, fn, &st))) return rc;
    if (recv_sig && (rc = check_typebuf(c, rtype, rcount, fn, &rt))) return rc;
    if ((rc = check_alias(c, sbuf, rbuf, send_sig && recv_sig && scount > 0 && rcount > 0, fn))) return rc;
    if (kind == C_SCATTER && rbuf == MPI_IN_PLACE) rt = st, rcount = scount;
    if ((kind == C_GATHER && !is_root) || (kind == C_SCATTER && !is_root && rbuf == MPI_IN_PLACE)) rt = st;
    if (kind == C_SCATTER && !is_root) st = rt;
    if ((kind == C_ALLGATHER || kind == C_ALLTOALL || (kind == C_GATHER && is_root)) && sbuf == MPI_IN_PLACE) st = rt;
    if (form == BLOCK && st && rt && st->contig && rt->contig && sbuf != MPI_IN_PLACE && rbuf != MPI_IN_PLACE &&
        (kind == C_ALLGATHER || kind == C_ALLTOALL)) {
        MPI_Count B = mpi_dtype_bytes(rt, rcount);
        rc = kind == C_ALLGATHER
                 ? weft_allgather(mpi_dtype_data(sbuf, st), mpi_dtype_data(rbuf, rt), B, WEFT_BYTE, c->wc)
                 : weft_alltoall(mpi_dtype_data(sbuf, st), mpi_dtype_data(rbuf, rt), B, WEFT_BYTE, c->wc);
        if (rc) return mpi_err_weft(c, rc, fn);
        return MPI_SUCCESS;
    }
    struct mpi_coll d = {.kind = kind,
                         .sbuf = sbuf,
                         .rbuf = rbuf,
                         .scount = scount,
                         .rcount = rcount,
                         .stype = st,
                         .rtype = rt,
                         .root = root};
    return mpi_coll_run(c, &d, form, request, fn);
}

#define PER_RANK_ROOTED(Name, IName, kind)                                                                             \
    MPI_DEF(int, Name,                                                                                                 \
            (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,                  \
             MPI_Datatype recvtype, int root, MPI_Comm comm))                                                          \
    {                                                                                                                  \
        return per_rank(kind, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, BLOCK, NULL,     \
                        "MPI_" #Name);                                                                                 \
    }                                                                                                                  \
    MPI_DEF(int, Name##_c,                                                                                             \
            (const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf, MPI_Count recvcount,      \
             MPI_Datatype recvtype, int root, MPI_Comm comm))                                                          \
    {                                                                                                                  \
        return per_rank(kind, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, BLOCK, NULL,     \
                        "MPI_" #Name "_c");                                                                            \
    }                                                                                                                  \
    MPI_DEF(int, IName,                                                                                                \
            (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,                  \
             MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request))                                    \
    {                                                                                                                  \
        return per_rank(kind, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, NONBLOCK,        \
                        request, "MPI_" #IName);                                                                       \
    }                                                                                                                  \
    MPI_DEF(int, IName##_c,                                                                                            \
            (const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf, MPI_Count recvcount,      \
             MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request))                                    \
    {                                                                                                                  \
        return per_rank(kind, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, NONBLOCK,        \
                        request, "MPI_" #IName "_c");                                                                  \
    }                                                                                                                  \
    MPI_DEF(int, Name##_init,                                                                                          \
            (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,                  \
             MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info, MPI_Request *request))                     \
    {                                                                                                                  \
        const char *fn = "MPI_" #Name "_init";                                                                         \
        int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);                                                   \
        return rc ? rc                                                                                                 \
                  : per_rank(kind, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, PERSIST,    \
                             request, fn);                                                                             \
    }                                                                                                                  \
    MPI_DEF(int, Name##_init_c,                                                                                        \
            (const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf, MPI_Count recvcount,      \
             MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info, MPI_Request *request))                     \
    {                                                                                                                  \
        const char *fn = "MPI_" #Name "_init_c";                                                                       \
        int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);                                                   \
        return rc ? rc                                                                                                 \
                  : per_rank(kind, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, PERSIST,    \
                             request, fn);                                                                             \
    }

#define PER_RANK_ALL(Name, IName, kind)                                                                                \
    MPI_DEF(int, Name,                                                                                                 \
            (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,                  \
             MPI_Datatype recvtype, MPI_Comm comm))                                                                    \
    {                                                                                                                  \
        return per_rank(kind, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0, comm, BLOCK, NULL,        \
                        "MPI_" #Name);                                                                                 \
    }                                                                                                                  \
    MPI_DEF(int, Name##_c,                                                                                             \
            (const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf, MPI_Count recvcount,      \
             MPI_Datatype recvtype, MPI_Comm comm))                                                                    \
    {                                                                                                                  \
        return per_rank(kind, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0, comm, BLOCK, NULL,        \
                        "MPI_" #Name "_c");                                                                            \
    }                                                                                                                  \
    MPI_DEF(int, IName,                                                                                                \
            (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,                  \
             MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request))                                              \
    {                                                                                                                  \
        return per_rank(kind, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0, comm, NONBLOCK, request,  \
                        "MPI_" #IName);                                                                                \
    }                                                                                                                  \
    MPI_DEF(int, IName##_c,                                                                                            \
            (const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf, MPI_Count recvcount,      \
             MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request))                                              \
    {                                                                                                                  \
        return per_rank(kind, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0, comm, NONBLOCK, request,  \
                        "MPI_" #IName "_c");                                                                           \
    }                                                                                                                  \
    MPI_DEF(int, Name##_init,                                                                                          \
            (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount,                  \
             MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request *request))                               \
    {                                                                                                                  \
        const char *fn = "MPI_" #Name "_init";                                                                         \
        int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);                                                   \
        return rc ? rc                                                                                                 \
                  : per_rank(kind, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0, comm, PERSIST,       \
                             request, fn);                                                                             \
    }                                                                                                                  \
    MPI_DEF(int, Name##_init_c,                                                                                        \
            (const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, void *recvbuf, MPI_Count recvcount,      \
             MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request *request))                               \
    {                                                                                                                  \
        const char *fn = "MPI_" #Name "_init_c";                                                                       \
        int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);                                                   \
        return rc ? rc                                                                                                 \
                  : per_rank(kind, sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, 0, comm, PERSIST,       \
                             request, fn);                                                                             \
    }

PER_RANK_ROOTED(Gather, Igather, C_GATHER)
PER_RANK_ROOTED(Scatter, Iscatter, C_SCATTER)
PER_RANK_ALL(Allgather, Iallgather, C_ALLGATHER)
PER_RANK_ALL(Alltoall, Ialltoall, C_ALLTOALL)

/* gatherv / allgatherv / scatterv: counts and displacements per rank */
static int vector_coll(int kind, const void *sbuf, MPI_Count scount, const void *scounts, const void *sdispls,
                       MPI_Datatype stype, void *rbuf, MPI_Count rcount, const void *rcounts, const void *rdispls,
                       MPI_Datatype rtype, int root, MPI_Comm comm, int large, int form, MPI_Request *request,
                       const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *st = NULL, *rt = NULL;
    int rc = check_common(comm, form, request, fn, &c);
    if (rc) return rc;
    int rooted = kind != C_ALLGATHERV, n = c->size;
    if (rooted && (rc = check_root(c, root, fn))) return rc;
    int is_root = !rooted || c->rank == root, bad = 0;
    struct mpi_coll d = {.kind = kind, .sbuf = sbuf, .rbuf = rbuf, .scount = scount, .rcount = rcount, .root = root};
    if (kind == C_SCATTERV) {
        if (sbuf == MPI_IN_PLACE) return mpi_err(c, MPI_ERR_BUFFER, fn, "MPI_IN_PLACE is not a send buffer here");
        if (rbuf == MPI_IN_PLACE && !is_root) return mpi_err(c, MPI_ERR_BUFFER, fn, "MPI_IN_PLACE only at the root");
        if (is_root) {
            if ((rc = mpi_check_dtype(c, stype, fn, &st))) return rc;
            d.scounts = copy_counts(scounts, large, n, &bad);
            d.sdispls = copy_displs(sdispls, large, n, &bad);
            if (bad || (rc = check_counts(c, d.scounts, n, fn))) goto fail;
        }
        if (rbuf != MPI_IN_PLACE && (rc = check_typebuf(c, rtype, rcount, fn, &rt))) goto fail;
        if ((rc = check_alias(c, sbuf, rbuf, is_root && rcount > 0, fn))) goto fail;
        if (!rt) rt = st;
        if (!st) st = rt;
    } else {
        if (sbuf == MPI_IN_PLACE && !is_root) return mpi_err(c, MPI_ERR_BUFFER, fn, "MPI_IN_PLACE only at the root");
        if (rbuf == MPI_IN_PLACE) return mpi_err(c, MPI_ERR_BUFFER, fn, "MPI_IN_PLACE is not a receive buffer");
        if (sbuf != MPI_IN_PLACE && (rc = check_typebuf(c, stype, scount, fn, &st))) return rc;
        if (is_root) {
            if ((rc = mpi_check_dtype(c, rtype, fn, &rt))) return rc;
            d.rcounts = copy_counts(rcounts, large, n, &bad);
            d.rdispls = copy_displs(rdispls, large, n, &bad);
            if (bad || (rc = check_counts(c, d.rcounts, n, fn))) goto fail;
        }
        if ((rc = check_alias(c, sbuf, rbuf, is_root && scount > 0, fn))) goto fail;
        if (!st) st = rt;
        if (!rt) rt = st;
    }
    d.stype = st;
    d.rtype = rt;
    return mpi_coll_run(c, &d, form, request, fn);
fail:
    free(d.scounts), free(d.sdispls), free(d.rcounts), free(d.rdispls);
    return bad ? array_error(c, bad, fn) : rc;
}

/* gatherv */
#define GATHERV_ARGS(CT, DT, ...)                                                                                      \
    (const void *sendbuf, CT sendcount, MPI_Datatype sendtype, void *recvbuf, const CT recvcounts[],                   \
     const DT displs[], MPI_Datatype recvtype, int root, MPI_Comm comm __VA_ARGS__)
#define GATHERV_CALL                                                                                                   \
    vector_coll(C_GATHERV, sendbuf, sendcount, NULL, NULL, sendtype, recvbuf, 0, recvcounts, displs, recvtype, root,  \
                comm
MPI_DEF(int, Gatherv, GATHERV_ARGS(int, int, ))
{
    return GATHERV_CALL, 0, BLOCK, NULL, "MPI_Gatherv");
}
MPI_DEF(int, Gatherv_c, GATHERV_ARGS(MPI_Count, MPI_Aint, ))
{
    return GATHERV_CALL, 1, BLOCK, NULL, "MPI_Gatherv_c");
}
MPI_DEF(int, Igatherv, GATHERV_ARGS(int, int, , MPI_Request *request))
{
    return GATHERV_CALL, 0, NONBLOCK, request, "MPI_Igatherv");
}
MPI_DEF(int, Igatherv_c, GATHERV_ARGS(MPI_Count, MPI_Aint, , MPI_Request *request))
{
    return GATHERV_CALL, 1, NONBLOCK, request, "MPI_Igatherv_c");
}
MPI_DEF(int, Gatherv_init, GATHERV_ARGS(int, int, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Gatherv_init";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : GATHERV_CALL, 0, PERSIST, request, fn);
}
MPI_DEF(int, Gatherv_init_c, GATHERV_ARGS(MPI_Count, MPI_Aint, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Gatherv_init_c";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : GATHERV_CALL, 1, PERSIST, request, fn);
}

/* allgatherv */
#define ALLGATHERV_ARGS(CT, DT, ...)                                                                                   \
    (const void *sendbuf, CT sendcount, MPI_Datatype sendtype, void *recvbuf, const CT recvcounts[],                   \
     const DT displs[], MPI_Datatype recvtype, MPI_Comm comm __VA_ARGS__)
#define ALLGATHERV_CALL                                                                                                \
    vector_coll(C_ALLGATHERV, sendbuf, sendcount, NULL, NULL, sendtype, recvbuf, 0, recvcounts, displs, recvtype, 0,  \
                comm
MPI_DEF(int, Allgatherv, ALLGATHERV_ARGS(int, int, ))
{
    return ALLGATHERV_CALL, 0, BLOCK, NULL, "MPI_Allgatherv");
}
MPI_DEF(int, Allgatherv_c, ALLGATHERV_ARGS(MPI_Count, MPI_Aint, ))
{
    return ALLGATHERV_CALL, 1, BLOCK, NULL, "MPI_Allgatherv_c");
}
MPI_DEF(int, Iallgatherv, ALLGATHERV_ARGS(int, int, , MPI_Request *request))
{
    return ALLGATHERV_CALL, 0, NONBLOCK, request, "MPI_Iallgatherv");
}
MPI_DEF(int, Iallgatherv_c, ALLGATHERV_ARGS(MPI_Count, MPI_Aint, , MPI_Request *request))
{
    return ALLGATHERV_CALL, 1, NONBLOCK, request, "MPI_Iallgatherv_c");
}
MPI_DEF(int, Allgatherv_init, ALLGATHERV_ARGS(int, int, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Allgatherv_init";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : ALLGATHERV_CALL, 0, PERSIST, request, fn);
}
MPI_DEF(int, Allgatherv_init_c, ALLGATHERV_ARGS(MPI_Count, MPI_Aint, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Allgatherv_init_c";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : ALLGATHERV_CALL, 1, PERSIST, request, fn);
}

/* scatterv */
#define SCATTERV_ARGS(CT, DT, ...)                                                                                     \
    (const void *sendbuf, const CT sendcounts[], const DT displs[], MPI_Datatype sendtype, void *recvbuf,              \
     CT recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm __VA_ARGS__)
#define SCATTERV_CALL                                                                                                  \
    vector_coll(C_SCATTERV, sendbuf, 0, sendcounts, displs, sendtype, recvbuf, recvcount, NULL, NULL, recvtype, root, \
                comm
MPI_DEF(int, Scatterv, SCATTERV_ARGS(int, int, ))
{
    return SCATTERV_CALL, 0, BLOCK, NULL, "MPI_Scatterv");
}
MPI_DEF(int, Scatterv_c, SCATTERV_ARGS(MPI_Count, MPI_Aint, ))
{
    return SCATTERV_CALL, 1, BLOCK, NULL, "MPI_Scatterv_c");
}
MPI_DEF(int, Iscatterv, SCATTERV_ARGS(int, int, , MPI_Request *request))
{
    return SCATTERV_CALL, 0, NONBLOCK, request, "MPI_Iscatterv");
}
MPI_DEF(int, Iscatterv_c, SCATTERV_ARGS(MPI_Count, MPI_Aint, , MPI_Request *request))
{
    return SCATTERV_CALL, 1, NONBLOCK, request, "MPI_Iscatterv_c");
}
MPI_DEF(int, Scatterv_init, SCATTERV_ARGS(int, int, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Scatterv_init";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : SCATTERV_CALL, 0, PERSIST, request, fn);
}
MPI_DEF(int, Scatterv_init_c, SCATTERV_ARGS(MPI_Count, MPI_Aint, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Scatterv_init_c";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : SCATTERV_CALL, 1, PERSIST, request, fn);
}

/* alltoallv / alltoallw */
static int alltoallvw(int w, const void *sbuf, const void *scounts, const void *sdispls, const MPI_Datatype *stypes,
                      void *rbuf, const void *rcounts, const void *rdispls, const MPI_Datatype *rtypes, MPI_Comm comm,
                      int large, int form, MPI_Request *request, const char *fn)
{
    struct MPI_ABI_Comm *c;
    int rc = check_common(comm, form, request, fn, &c);
    if (rc) return rc;
    int n = c->size, bad = 0, inplace = sbuf == MPI_IN_PLACE;
    if (rbuf == MPI_IN_PLACE) return mpi_err(c, MPI_ERR_BUFFER, fn, "MPI_IN_PLACE is not a receive buffer");
    struct mpi_coll d = {.kind = w ? C_ALLTOALLW : C_ALLTOALLV, .sbuf = sbuf, .rbuf = rbuf};
    if (!inplace) {
        d.scounts = copy_counts(scounts, large, n, &bad);
        d.sdispls = copy_displs(sdispls, large, n, &bad);
    }
    d.rcounts = copy_counts(rcounts, large, n, &bad);
    d.rdispls = copy_displs(rdispls, large, n, &bad);
    if (bad) goto fail;
    if ((!inplace && (rc = check_counts(c, d.scounts, n, fn))) || (rc = check_counts(c, d.rcounts, n, fn))) goto fail;
    if (!inplace) {
        MPI_Count sent = 0, received = 0;
        for (int i = 0; i < n; i++)
            sent += d.scounts[i], received += d.rcounts[i];
        if ((rc = check_alias(c, sbuf, rbuf, sent > 0 && received > 0, fn))) goto fail;
    }
    if (w) {
        if ((!inplace && !stypes) || !rtypes) {
            bad = 1;
            goto fail;
        }
        d.stypes = calloc((size_t)n + 1, sizeof(*d.stypes));
        d.rtypes = calloc((size_t)n + 1, sizeof(*d.rtypes));
        if (!d.stypes || !d.rtypes) {
            bad = 2;
            goto fail;
        }
        for (int i = 0; i < n; i++) {
            if ((!inplace && (rc = mpi_check_dtype(c, stypes[i], fn, &d.stypes[i]))) ||
                (rc = mpi_check_dtype(c, rtypes[i], fn, &d.rtypes[i])))
                goto fail;
        }
        /* MPI lets the program free the types once the call returns */
        for (int i = 0; i < n; i++) {
            mpi_dtype_ref(d.stypes[i]);
            mpi_dtype_ref(d.rtypes[i]);
        }
        d.ntypes = n;
    } else {
        if ((!inplace && (rc = mpi_check_dtype(c, *(const MPI_Datatype *)stypes, fn, &d.stype))) ||
            (rc = mpi_check_dtype(c, *(const MPI_Datatype *)rtypes, fn, &d.rtype)))
            goto fail;
        if (inplace) d.stype = d.rtype;
    }
    return mpi_coll_run(c, &d, form, request, fn);
fail:
    free(d.scounts), free(d.sdispls), free(d.rcounts), free(d.rdispls), free(d.stypes), free(d.rtypes);
    return bad ? array_error(c, bad, fn) : rc;
}

#define ALLTOALLV_ARGS(CT, DT, ...)                                                                                    \
    (const void *sendbuf, const CT sendcounts[], const DT sdispls[], MPI_Datatype sendtype, void *recvbuf,             \
     const CT recvcounts[], const DT rdispls[], MPI_Datatype recvtype, MPI_Comm comm __VA_ARGS__)
#define ALLTOALLV_CALL                                                                                                 \
    alltoallvw(0, sendbuf, sendcounts, sdispls, &sendtype, recvbuf, recvcounts, rdispls, &recvtype, comm
MPI_DEF(int, Alltoallv, ALLTOALLV_ARGS(int, int, ))
{
    return ALLTOALLV_CALL, 0, BLOCK, NULL, "MPI_Alltoallv");
}
MPI_DEF(int, Alltoallv_c, ALLTOALLV_ARGS(MPI_Count, MPI_Aint, ))
{
    return ALLTOALLV_CALL, 1, BLOCK, NULL, "MPI_Alltoallv_c");
}
MPI_DEF(int, Ialltoallv, ALLTOALLV_ARGS(int, int, , MPI_Request *request))
{
    return ALLTOALLV_CALL, 0, NONBLOCK, request, "MPI_Ialltoallv");
}
MPI_DEF(int, Ialltoallv_c, ALLTOALLV_ARGS(MPI_Count, MPI_Aint, , MPI_Request *request))
{
    return ALLTOALLV_CALL, 1, NONBLOCK, request, "MPI_Ialltoallv_c");
}
MPI_DEF(int, Alltoallv_init, ALLTOALLV_ARGS(int, int, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Alltoallv_init";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : ALLTOALLV_CALL, 0, PERSIST, request, fn);
}
MPI_DEF(int, Alltoallv_init_c, ALLTOALLV_ARGS(MPI_Count, MPI_Aint, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Alltoallv_init_c";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : ALLTOALLV_CALL, 1, PERSIST, request, fn);
}

#define ALLTOALLW_ARGS(CT, DT, ...)                                                                                    \
    (const void *sendbuf, const CT sendcounts[], const DT sdispls[], const MPI_Datatype sendtypes[], void *recvbuf,    \
     const CT recvcounts[], const DT rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm __VA_ARGS__)
#define ALLTOALLW_CALL                                                                                                 \
    alltoallvw(1, sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm
MPI_DEF(int, Alltoallw, ALLTOALLW_ARGS(int, int, ))
{
    return ALLTOALLW_CALL, 0, BLOCK, NULL, "MPI_Alltoallw");
}
MPI_DEF(int, Alltoallw_c, ALLTOALLW_ARGS(MPI_Count, MPI_Aint, ))
{
    return ALLTOALLW_CALL, 1, BLOCK, NULL, "MPI_Alltoallw_c");
}
MPI_DEF(int, Ialltoallw, ALLTOALLW_ARGS(int, int, , MPI_Request *request))
{
    return ALLTOALLW_CALL, 0, NONBLOCK, request, "MPI_Ialltoallw");
}
MPI_DEF(int, Ialltoallw_c, ALLTOALLW_ARGS(MPI_Count, MPI_Aint, , MPI_Request *request))
{
    return ALLTOALLW_CALL, 1, NONBLOCK, request, "MPI_Ialltoallw_c");
}
MPI_DEF(int, Alltoallw_init, ALLTOALLW_ARGS(int, int, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Alltoallw_init";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : ALLTOALLW_CALL, 0, PERSIST, request, fn);
}
MPI_DEF(int, Alltoallw_init_c, ALLTOALLW_ARGS(MPI_Count, MPI_Aint, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Alltoallw_init_c";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : ALLTOALLW_CALL, 1, PERSIST, request, fn);
}

/* reductions */
static int reduction(int kind, const void *sbuf, void *rbuf, MPI_Count count, const void *rcounts, int large,
                     MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm, int form, MPI_Request *request,
                     const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *t;
    struct MPI_ABI_Op *o;
    int rc = check_common(comm, form, request, fn, &c);
    if (rc || (rc = check_typebuf(c, datatype, count, fn, &t)) || (rc = check_op(c, op, t, fn, &o))) return rc;
    if (kind == C_REDUCE && (rc = check_root(c, root, fn))) return rc;
    if (rbuf == MPI_IN_PLACE) return mpi_err(c, MPI_ERR_BUFFER, fn, "MPI_IN_PLACE is not a receive buffer");
    if (sbuf == MPI_IN_PLACE && kind == C_REDUCE && c->rank != root)
        return mpi_err(c, MPI_ERR_BUFFER, fn, "MPI_IN_PLACE is only for the root");
    if (kind != C_RS && (rc = check_alias(c, sbuf, rbuf, count > 0 && (kind != C_REDUCE || c->rank == root), fn)))
        return rc;
    weft_op_t wop;
    if (form == BLOCK && kind != C_RS && t->contig && mpi_op_native(o, t, &wop) &&
        !(sbuf == MPI_IN_PLACE && kind == C_RSB)) {
        const void *s = sbuf == MPI_IN_PLACE ? WEFT_IN_PLACE : mpi_dtype_data(sbuf, t);
        void *r = kind == C_REDUCE && c->rank != root ? NULL : mpi_dtype_data(rbuf, t);
        int64_t n = count * t->nelem;
        switch (kind) {
        case C_REDUCE: rc = weft_reduce(s, r, n, t->wdt, wop, root, c->wc); break;
        case C_ALLREDUCE: rc = weft_allreduce(s, r, n, t->wdt, wop, c->wc); break;
        case C_SCAN: rc = weft_scan(s, r, n, t->wdt, wop, c->wc); break;
        case C_EXSCAN: rc = weft_exscan(s, r, n, t->wdt, wop, c->wc); break;
        case C_RSB: rc = weft_reduce_scatter_block(s, r, n, t->wdt, wop, c->wc); break;
        }
        if (rc) return mpi_err_weft(c, rc, fn);
        return MPI_SUCCESS;
    }
    struct mpi_coll d = {
        .kind = kind, .sbuf = sbuf, .rbuf = rbuf, .rcount = count, .stype = t, .rtype = t, .op = o, .root = root};
    if (kind == C_RS) {
        int bad = 0;
        d.rcounts = copy_counts(rcounts, large, c->size, &bad);
        if (bad) return array_error(c, bad, fn);
        MPI_Count total = 0;
        for (int i = 0; i < c->size; i++)
            total += d.rcounts[i];
        if ((rc = check_counts(c, d.rcounts, c->size, fn)) || (rc = check_alias(c, sbuf, rbuf, total > 0, fn))) {
            free(d.rcounts);
            return rc;
        }
        /* Blocking, contiguous, a native op, not in place: weft's call, without a request of ours. */
        if (form == BLOCK && t->contig && sbuf != MPI_IN_PLACE && mpi_op_native(o, t, &wop)) {
            int64_t stack[64], *wc = c->size <= 64 ? stack : new_i64(c->size);
            if (!wc) {
                free(d.rcounts);
                return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
            }
            for (int i = 0; i < c->size; i++)
                wc[i] = (int64_t)d.rcounts[i] * t->nelem;
            rc = weft_reduce_scatter(mpi_dtype_data(sbuf, t), mpi_dtype_data(rbuf, t), wc, t->wdt, wop, c->wc);
            if (wc != stack) free(wc);
            free(d.rcounts);
            return rc ? mpi_err_weft(c, rc, fn) : MPI_SUCCESS;
        }
    }
    return mpi_coll_run(c, &d, form, request, fn);
}

#define RED_ARGS(CT, ...)                                                                                              \
    (const void *sendbuf, void *recvbuf, CT count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm __VA_ARGS__)
#define REDUCTION_FORMS(Name, IName, kind)                                                                             \
    MPI_DEF(int, Name, RED_ARGS(int, ))                                                                                \
    {                                                                                                                  \
        return reduction(kind, sendbuf, recvbuf, count, NULL, 0, datatype, op, 0, comm, BLOCK, NULL, "MPI_" #Name);    \
    }                                                                                                                  \
    MPI_DEF(int, Name##_c, RED_ARGS(MPI_Count, ))                                                                      \
    {                                                                                                                  \
        return reduction(kind, sendbuf, recvbuf, count, NULL, 1, datatype, op, 0, comm, BLOCK, NULL,                   \
                         "MPI_" #Name "_c");                                                                           \
    }                                                                                                                  \
    MPI_DEF(int, IName, RED_ARGS(int, , MPI_Request *request))                                                         \
    {                                                                                                                  \
        return reduction(kind, sendbuf, recvbuf, count, NULL, 0, datatype, op, 0, comm, NONBLOCK, request,             \
                         "MPI_" #IName);                                                                               \
    }                                                                                                                  \
    MPI_DEF(int, IName##_c, RED_ARGS(MPI_Count, , MPI_Request *request))                                               \
    {                                                                                                                  \
        return reduction(kind, sendbuf, recvbuf, count, NULL, 1, datatype, op, 0, comm, NONBLOCK, request,             \
                         "MPI_" #IName "_c");                                                                          \
    }                                                                                                                  \
    MPI_DEF(int, Name##_init, RED_ARGS(int, , MPI_Info info, MPI_Request *request))                                    \
    {                                                                                                                  \
        const char *fn = "MPI_" #Name "_init";                                                                         \
        int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);                                                   \
        return rc ? rc                                                                                                 \
                  : reduction(kind, sendbuf, recvbuf, count, NULL, 0, datatype, op, 0, comm, PERSIST, request, fn);    \
    }                                                                                                                  \
    MPI_DEF(int, Name##_init_c, RED_ARGS(MPI_Count, , MPI_Info info, MPI_Request *request))                            \
    {                                                                                                                  \
        const char *fn = "MPI_" #Name "_init_c";                                                                       \
        int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);                                                   \
        return rc ? rc                                                                                                 \
                  : reduction(kind, sendbuf, recvbuf, count, NULL, 1, datatype, op, 0, comm, PERSIST, request, fn);    \
    }

REDUCTION_FORMS(Allreduce, Iallreduce, C_ALLREDUCE)
REDUCTION_FORMS(Scan, Iscan, C_SCAN)
REDUCTION_FORMS(Exscan, Iexscan, C_EXSCAN)

#define REDUCE_ARGS(CT, ...)                                                                                           \
    (const void *sendbuf, void *recvbuf, CT count, MPI_Datatype datatype, MPI_Op op, int root,                         \
     MPI_Comm comm __VA_ARGS__)
MPI_DEF(int, Reduce, REDUCE_ARGS(int, ))
{
    return reduction(C_REDUCE, sendbuf, recvbuf, count, NULL, 0, datatype, op, root, comm, BLOCK, NULL, "MPI_Reduce");
}
MPI_DEF(int, Reduce_c, REDUCE_ARGS(MPI_Count, ))
{
    return reduction(C_REDUCE, sendbuf, recvbuf, count, NULL, 1, datatype, op, root, comm, BLOCK, NULL, "MPI_Reduce_c");
}
MPI_DEF(int, Ireduce, REDUCE_ARGS(int, , MPI_Request *request))
{
    return reduction(C_REDUCE, sendbuf, recvbuf, count, NULL, 0, datatype, op, root, comm, NONBLOCK, request,
                     "MPI_Ireduce");
}
MPI_DEF(int, Ireduce_c, REDUCE_ARGS(MPI_Count, , MPI_Request *request))
{
    return reduction(C_REDUCE, sendbuf, recvbuf, count, NULL, 1, datatype, op, root, comm, NONBLOCK, request,
                     "MPI_Ireduce_c");
}
MPI_DEF(int, Reduce_init, REDUCE_ARGS(int, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Reduce_init";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc
              : reduction(C_REDUCE, sendbuf, recvbuf, count, NULL, 0, datatype, op, root, comm, PERSIST, request, fn);
}
MPI_DEF(int, Reduce_init_c, REDUCE_ARGS(MPI_Count, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Reduce_init_c";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc
              : reduction(C_REDUCE, sendbuf, recvbuf, count, NULL, 1, datatype, op, root, comm, PERSIST, request, fn);
}

#define RSB_ARGS(CT, ...)                                                                                              \
    (const void *sendbuf, void *recvbuf, CT recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm __VA_ARGS__)
MPI_DEF(int, Reduce_scatter_block, RSB_ARGS(int, ))
{
    return reduction(C_RSB, sendbuf, recvbuf, recvcount, NULL, 0, datatype, op, 0, comm, BLOCK, NULL,
                     "MPI_Reduce_scatter_block");
}
MPI_DEF(int, Reduce_scatter_block_c, RSB_ARGS(MPI_Count, ))
{
    return reduction(C_RSB, sendbuf, recvbuf, recvcount, NULL, 1, datatype, op, 0, comm, BLOCK, NULL,
                     "MPI_Reduce_scatter_block_c");
}
MPI_DEF(int, Ireduce_scatter_block, RSB_ARGS(int, , MPI_Request *request))
{
    return reduction(C_RSB, sendbuf, recvbuf, recvcount, NULL, 0, datatype, op, 0, comm, NONBLOCK, request,
                     "MPI_Ireduce_scatter_block");
}
MPI_DEF(int, Ireduce_scatter_block_c, RSB_ARGS(MPI_Count, , MPI_Request *request))
{
    return reduction(C_RSB, sendbuf, recvbuf, recvcount, NULL, 1, datatype, op, 0, comm, NONBLOCK, request,
                     "MPI_Ireduce_scatter_block_c");
}
MPI_DEF(int, Reduce_scatter_block_init, RSB_ARGS(int, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Reduce_scatter_block_init";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc
              : reduction(C_RSB, sendbuf, recvbuf, recvcount, NULL, 0, datatype, op, 0, comm, PERSIST, request, fn);
}
MPI_DEF(int, Reduce_scatter_block_init_c, RSB_ARGS(MPI_Count, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Reduce_scatter_block_init_c";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc
              : reduction(C_RSB, sendbuf, recvbuf, recvcount, NULL, 1, datatype, op, 0, comm, PERSIST, request, fn);
}

#define RS_ARGS(CT, ...)                                                                                               \
    (const void *sendbuf, void *recvbuf, const CT recvcounts[], MPI_Datatype datatype, MPI_Op op,                      \
     MPI_Comm comm __VA_ARGS__)
MPI_DEF(int, Reduce_scatter, RS_ARGS(int, ))
{
    return reduction(C_RS, sendbuf, recvbuf, 0, recvcounts, 0, datatype, op, 0, comm, BLOCK, NULL,
                     "MPI_Reduce_scatter");
}
MPI_DEF(int, Reduce_scatter_c, RS_ARGS(MPI_Count, ))
{
    return reduction(C_RS, sendbuf, recvbuf, 0, recvcounts, 1, datatype, op, 0, comm, BLOCK, NULL,
                     "MPI_Reduce_scatter_c");
}
MPI_DEF(int, Ireduce_scatter, RS_ARGS(int, , MPI_Request *request))
{
    return reduction(C_RS, sendbuf, recvbuf, 0, recvcounts, 0, datatype, op, 0, comm, NONBLOCK, request,
                     "MPI_Ireduce_scatter");
}
MPI_DEF(int, Ireduce_scatter_c, RS_ARGS(MPI_Count, , MPI_Request *request))
{
    return reduction(C_RS, sendbuf, recvbuf, 0, recvcounts, 1, datatype, op, 0, comm, NONBLOCK, request,
                     "MPI_Ireduce_scatter_c");
}
MPI_DEF(int, Reduce_scatter_init, RS_ARGS(int, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Reduce_scatter_init";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : reduction(C_RS, sendbuf, recvbuf, 0, recvcounts, 0, datatype, op, 0, comm, PERSIST, request, fn);
}
MPI_DEF(int, Reduce_scatter_init_c, RS_ARGS(MPI_Count, , MPI_Info info, MPI_Request *request))
{
    const char *fn = "MPI_Reduce_scatter_init_c";
    int rc = mpi_check_info(mpi_comm_get(comm), info, fn, NULL);
    return rc ? rc : reduction(C_RS, sendbuf, recvbuf, 0, recvcounts, 1, datatype, op, 0, comm, PERSIST, request, fn);
}
