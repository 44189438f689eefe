/* Point to point over weft's tagged messages. Contiguous data goes to weft
 * as it is; other layouts are packed into a temporary (and unpacked when
 * a receive completes). MPI_PROC_NULL completes at once. Synchronous mode
 * is weft_issend; ready mode is standard mode; buffered mode copies into
 * space accounted against the attached buffer. A matched probe (MPI_Mprobe)
 * receives the message at once, so no other receive can take it. */
#include "mpi_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MODE_STD, MODE_SYNC, MODE_BUFFERED, MODE_READY };

/* ---- argument checks ------------------------------------------------------ */

static int check_peer(struct MPI_ABI_Comm *c, int peer, int recv, const char *fn)
{
    if (MPI_LIKELY(peer >= 0 && peer < c->size)) return MPI_SUCCESS;
    if (peer == MPI_PROC_NULL || (recv && peer == MPI_ANY_SOURCE)) return MPI_SUCCESS;
    return mpi_err(c, MPI_ERR_RANK, fn, "%s rank %d out of range 0..%d of %s", recv ? "source" : "destination", peer,
                   c->size - 1, c->name[0] ? c->name : "the communicator");
}

static int check_tag(struct MPI_ABI_Comm *c, int tag, int recv, const char *fn)
{
    if (MPI_LIKELY(tag >= 0 && tag <= WEFT_TAG_UB)) return MPI_SUCCESS;
    if (recv && tag == MPI_ANY_TAG) return MPI_SUCCESS;
    return mpi_err(c, MPI_ERR_TAG, fn, "tag %d out of range 0..%d (MPI_TAG_UB)%s", tag, WEFT_TAG_UB,
                   recv ? " or MPI_ANY_TAG" : "");
}

static int p2p_check(MPI_Comm comm, const void *buf, MPI_Count count, MPI_Datatype datatype, int peer, int tag,
                     int recv, const char *fn, struct MPI_ABI_Comm **c, struct MPI_ABI_Datatype **t)
{
    int rc = mpi_check_comm(comm, fn, c);
    if (MPI_UNLIKELY(rc)) return rc;
    if (MPI_UNLIKELY((rc = mpi_check_dtype(*c, datatype, fn, t)))) return rc;
    if (MPI_UNLIKELY((rc = mpi_check_buf(*c, buf, count, *t, fn)))) return rc;
    if (MPI_UNLIKELY(!buf && count > 0 && (*t)->predefined))
        return mpi_err(*c, MPI_ERR_BUFFER, fn, "NULL buffer with count %lld", (long long)count);
    if (MPI_UNLIKELY((rc = check_peer(*c, peer, recv, fn)))) return rc;
    if (MPI_UNLIKELY((rc = check_tag(*c, tag, recv, fn)))) return rc;
    return MPI_SUCCESS;
}

/* The blocking calls' fast path (send_entry, recv_entry): a live communicator, a committed
 * contiguous type, a count whose bytes fit, a peer and a tag in range (a
 * receive: MPI_ANY_SOURCE / MPI_ANY_TAG too). Everything else, and every
 * error's message, goes through p2p_check. Inline: the checks cost a few
 * instructions, not calls into three files. */
static inline int p2p_fast(MPI_Comm comm, const void *buf, MPI_Count count, MPI_Datatype datatype, int peer, int tag,
                           int recv, struct MPI_ABI_Comm **c, struct MPI_ABI_Datatype **t)
{
    *c = mpi_comm_get(comm);
    *t = mpi_dtype_get(datatype);
    return MPI_LIKELY(*c && *t && (*t)->committed && (*t)->contig && count >= 0 && (buf || !count) &&
                      count <= INT64_MAX / ((*t)->size ? (*t)->size : 1) &&
                      ((unsigned)peer < (unsigned)(*c)->size || (recv && peer == MPI_ANY_SOURCE)) &&
                      ((unsigned)tag <= (unsigned)WEFT_TAG_UB || (recv && tag == MPI_ANY_TAG)));
}

/* ---- buffered mode ---------------------------------------------------------- */

/* A buffered send's data is copied at once and sent from the copy; the
 * attached buffer (the communicator's, its session's or the process's)
 * only accounts for the space, as MPI's rules on its size require. */
typedef struct bsend {
    weft_request_t wr;
    void *copy;
    MPI_Count charge;
    mpi_bbuf_t *acct;
    struct MPI_ABI_Comm *comm; /* held: the send is pending on it */
} bsend_t;

static mpi_bbuf_t proc_bbuf;
static struct {
    bsend_t *pending;
    int n, cap;
} bsb;

static void bsend_release(int i)
{
    bsend_t b = bsb.pending[i];
    bsb.pending[i] = bsb.pending[--bsb.n];
    free(b.copy);
    b.acct->used -= b.charge;
    b.comm->inflight--;
    mpi_comm_unref(b.comm); /* last: it may free the communicator and its buffer */
}

void mpi_bsend_reap(void)
{
    for (int i = 0; i < bsb.n;) {
        int flag = 0;
        weft_test(&bsb.pending[i].wr, &flag, NULL);
        if (flag)
            bsend_release(i);
        else
            i++;
    }
}

/* Waits for the buffered sends charged to acct (NULL: all). */
int mpi_bbuf_flush(mpi_bbuf_t *acct)
{
    for (int i = 0; i < bsb.n;) {
        if (acct && bsb.pending[i].acct != acct) {
            i++;
            continue;
        }
        weft_wait(&bsb.pending[i].wr, NULL);
        if (bsb.pending[i].wr) weft_request_free(&bsb.pending[i].wr);
        bsend_release(i);
    }
    return MPI_SUCCESS;
}

int mpi_bsend_detach_all(void)
{
    return mpi_bbuf_flush(NULL);
}

int mpi_bsend_drain(struct MPI_ABI_Comm *c, double deadline, const char *fn)
{
    for (int i = 0; i < bsb.n;) {
        if (bsb.pending[i].comm != c) {
            i++;
            continue;
        }
        int rc = weft_wait_timeout(&bsb.pending[i].wr, mpi_time_left(deadline), NULL);
        if (bsb.pending[i].wr) /* the deadline passed: the send stays in flight */
            return mpi_err(c, mpi_class_of_weft(rc), fn,
                           "%d operation%s still in flight on the communicator, a buffered send: %s (%s)", c->inflight,
                           c->inflight == 1 ? "" : "s", weft_last_error(), weft_strerror(rc));
        bsend_release(i); /* the last one moves to i */
        if (rc) return mpi_err(c, mpi_class_of_weft(rc), fn, "a buffered send failed: %s", weft_last_error());
    }
    return MPI_SUCCESS;
}

static mpi_bbuf_t *acct_of(struct MPI_ABI_Comm *c)
{
    if (c->bbuf && c->bbuf->buf) return c->bbuf;
    if (c->session_bbuf && c->session_bbuf->buf) return c->session_bbuf;
    return &proc_bbuf;
}

static int bsend(struct MPI_ABI_Comm *c, const void *buf, MPI_Count count, struct MPI_ABI_Datatype *t, int dest,
                 int tag, const char *fn)
{
    MPI_Count bytes = mpi_dtype_bytes(t, count), charge = bytes + MPI_BSEND_OVERHEAD;
    mpi_bbuf_t *acct = acct_of(c);
    mpi_bsend_reap();
    if (!acct->buf) return mpi_err(c, MPI_ERR_BUFFER, fn, "no buffer attached (MPI_Buffer_attach)");
    if (acct->used + charge > acct->size)
        return mpi_err(c, MPI_ERR_BUFFER, fn, "the attached buffer (%lld bytes) has %lld free, %lld needed",
                       (long long)acct->size, (long long)(acct->size - acct->used), (long long)charge);
    if (bsb.n == bsb.cap) {
        int cap = bsb.cap ? 2 * bsb.cap : 16;
        bsend_t *p = realloc(bsb.pending, sizeof(*p) * (size_t)cap);
        if (!p) return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
        bsb.pending = p;
        bsb.cap = cap;
    }
    void *copy = mpi_malloc((size_t)bytes);
    if (!copy) return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
    mpi_pack(buf, count, t, copy);
    weft_request_t wr;
    int rc = weft_isend(copy, bytes, WEFT_BYTE, dest, tag, c->wc, &wr);
    if (rc) {
        free(copy);
        return mpi_err_weft(c, rc, fn);
    }
    bsb.pending[bsb.n++] = (bsend_t){wr, copy, charge, acct, c};
    mpi_comm_ref(c);
    c->inflight++;
    acct->used += charge;
    return MPI_SUCCESS;
}

int mpi_bbuf_attach(struct MPI_ABI_Comm *ec, mpi_bbuf_t *acct, void *buffer, MPI_Count size, const char *fn)
{
    if (acct->buf) return mpi_err(ec, MPI_ERR_BUFFER, fn, "a buffer is already attached");
    if (buffer == MPI_BUFFER_AUTOMATIC) {
        acct->buf = buffer;
        acct->size = INT64_MAX / 2;
        return MPI_SUCCESS;
    }
    if (size < 0 || (!buffer && size > 0)) return mpi_err(ec, MPI_ERR_BUFFER, fn, "invalid buffer or size");
    acct->buf = buffer ? buffer : (void *)acct;
    acct->size = size;
    return MPI_SUCCESS;
}

int mpi_bbuf_detach(struct MPI_ABI_Comm *ec, mpi_bbuf_t *acct, void *buffer_addr, MPI_Count *size, const char *fn)
{
    if (!buffer_addr || !size) return mpi_err(ec, MPI_ERR_ARG, fn, "NULL output");
    if (!acct->buf) return mpi_err(ec, MPI_ERR_BUFFER, fn, "no buffer attached");
    mpi_bbuf_flush(acct);
    *(void **)buffer_addr = acct->buf == (void *)acct ? NULL : acct->buf;
    *size = acct->buf == MPI_BUFFER_AUTOMATIC ? 0 : acct->size;
    acct->buf = NULL;
    acct->size = 0;
    return MPI_SUCCESS;
}

MPI_DEF(int, Buffer_attach, (void *buffer, int size))
{
    return mpi_bbuf_attach(NULL, &proc_bbuf, buffer, size, "MPI_Buffer_attach");
}

MPI_DEF(int, Buffer_attach_c, (void *buffer, MPI_Count size))
{
    return mpi_bbuf_attach(NULL, &proc_bbuf, buffer, size, "MPI_Buffer_attach_c");
}

MPI_DEF(int, Buffer_detach, (void *buffer_addr, int *size))
{
    MPI_Count s = 0;
    int rc = mpi_bbuf_detach(NULL, &proc_bbuf, buffer_addr, &s, "MPI_Buffer_detach");
    if (!rc && size) mpi_count_to_int(s, size);
    return rc;
}

MPI_DEF(int, Buffer_detach_c, (void *buffer_addr, MPI_Count *size))
{
    return mpi_bbuf_detach(NULL, &proc_bbuf, buffer_addr, size, "MPI_Buffer_detach_c");
}

MPI_DEF(int, Buffer_flush, (void))
{
    MPI_CHECK_INIT("MPI_Buffer_flush");
    return mpi_bbuf_flush(&proc_bbuf);
}

/* The flush is done before the request is handed out. */
int mpi_done_request(struct MPI_ABI_Comm *c, MPI_Request *request, const char *fn)
{
    if (!request) return mpi_err(c, MPI_ERR_ARG, fn, "NULL request");
    mpi_req_t *r = NULL;
    int rc = mpi_req_new(MPI_REQ_DONE, c, fn, &r);
    if (rc) return rc;
    mpi_req_done(r, MPI_SUCCESS, MPI_ANY_SOURCE, MPI_ANY_TAG, 0);
    *request = r;
    return MPI_SUCCESS;
}

MPI_DEF(int, Buffer_iflush, (MPI_Request * request))
{
    MPI_CHECK_INIT("MPI_Buffer_iflush");
    mpi_bbuf_flush(&proc_bbuf);
    return mpi_done_request(NULL, request, "MPI_Buffer_iflush");
}

static int comm_acct(MPI_Comm comm, const char *fn, struct MPI_ABI_Comm **c)
{
    int rc = mpi_check_comm(comm, fn, c);
    if (rc) return rc;
    if (!(*c)->bbuf && !((*c)->bbuf = calloc(1, sizeof(mpi_bbuf_t))))
        return mpi_err(*c, MPI_ERR_NO_MEM, fn, "out of memory");
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_attach_buffer, (MPI_Comm comm, void *buffer, int size))
{
    struct MPI_ABI_Comm *c;
    int rc = comm_acct(comm, "MPI_Comm_attach_buffer", &c);
    return rc ? rc : mpi_bbuf_attach(c, c->bbuf, buffer, size, "MPI_Comm_attach_buffer");
}

MPI_DEF(int, Comm_attach_buffer_c, (MPI_Comm comm, void *buffer, MPI_Count size))
{
    struct MPI_ABI_Comm *c;
    int rc = comm_acct(comm, "MPI_Comm_attach_buffer_c", &c);
    return rc ? rc : mpi_bbuf_attach(c, c->bbuf, buffer, size, "MPI_Comm_attach_buffer_c");
}

MPI_DEF(int, Comm_detach_buffer, (MPI_Comm comm, void *buffer_addr, int *size))
{
    struct MPI_ABI_Comm *c;
    MPI_Count s = 0;
    int rc = comm_acct(comm, "MPI_Comm_detach_buffer", &c);
    if (!rc) rc = mpi_bbuf_detach(c, c->bbuf, buffer_addr, &s, "MPI_Comm_detach_buffer");
    if (!rc && size) mpi_count_to_int(s, size);
    return rc;
}

MPI_DEF(int, Comm_detach_buffer_c, (MPI_Comm comm, void *buffer_addr, MPI_Count *size))
{
    struct MPI_ABI_Comm *c;
    int rc = comm_acct(comm, "MPI_Comm_detach_buffer_c", &c);
    return rc ? rc : mpi_bbuf_detach(c, c->bbuf, buffer_addr, size, "MPI_Comm_detach_buffer_c");
}

MPI_DEF(int, Comm_flush_buffer, (MPI_Comm comm))
{
    struct MPI_ABI_Comm *c;
    int rc = comm_acct(comm, "MPI_Comm_flush_buffer", &c);
    return rc ? rc : mpi_bbuf_flush(acct_of(c));
}

MPI_DEF(int, Comm_iflush_buffer, (MPI_Comm comm, MPI_Request *request))
{
    struct MPI_ABI_Comm *c;
    int rc = comm_acct(comm, "MPI_Comm_iflush_buffer", &c);
    if (rc) return rc;
    mpi_bbuf_flush(acct_of(c));
    return mpi_done_request(c, request, "MPI_Comm_iflush_buffer");
}

/* ---- the engine: one send or receive as an MPI request ------------------------- */

/* A completed non-contiguous receive: unpack what arrived. */
static int recv_unpack_step(mpi_req_t *r, int rc, const weft_status_t *st)
{
    if (rc == WEFT_ERR_CANCELED) {
        r->cancelled = 1;
        return MPI_SUCCESS;
    }
    r->source = st->source;
    r->tag = st->tag;
    r->bytes = (MPI_Count)st->bytes;
    if (rc == WEFT_SUCCESS) mpi_unpack(r->tmp, r->bytes, r->ubuf, r->ucount, r->utype);
    free(r->tmp);
    r->tmp = NULL;
    return mpi_class_of_weft(rc);
}

static int start_send(mpi_req_t *r, struct MPI_ABI_Comm *c, const void *buf, MPI_Count count,
                      struct MPI_ABI_Datatype *t, int dest, int tag, int mode, const char *fn)
{
    if (dest == MPI_PROC_NULL) {
        mpi_req_done(r, MPI_SUCCESS, MPI_PROC_NULL, MPI_ANY_TAG, 0);
        return MPI_SUCCESS;
    }
    if (mode == MODE_BUFFERED) {
        int rc = bsend(c, buf, count, t, dest, tag, fn);
        if (!rc) mpi_req_done(r, MPI_SUCCESS, MPI_ANY_SOURCE, MPI_ANY_TAG, 0);
        return rc;
    }
    MPI_Count bytes = mpi_dtype_bytes(t, count);
    const void *data;
    if (MPI_LIKELY(t->contig)) {
        data = mpi_dtype_data(buf, t);
    } else {
        if (!(r->tmp = mpi_malloc((size_t)bytes))) return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
        mpi_pack(buf, count, t, r->tmp);
        data = r->tmp;
    }
    int rc = mode == MODE_SYNC ? weft_issend(data, bytes, WEFT_BYTE, dest, tag, c->wc, &r->wr)
                               : weft_isend(data, bytes, WEFT_BYTE, dest, tag, c->wc, &r->wr);
    if (MPI_UNLIKELY(rc)) return mpi_err_weft(c, rc, fn);
    mpi_req_track(r);
    return MPI_SUCCESS;
}

static int start_recv(mpi_req_t *r, struct MPI_ABI_Comm *c, void *buf, MPI_Count count, struct MPI_ABI_Datatype *t,
                      int source, int tag, const char *fn)
{
    if (source == MPI_PROC_NULL) {
        mpi_req_done(r, MPI_SUCCESS, MPI_PROC_NULL, MPI_ANY_TAG, 0);
        return MPI_SUCCESS;
    }
    MPI_Count bytes = mpi_dtype_bytes(t, count);
    void *data;
    if (MPI_LIKELY(t->contig)) {
        data = mpi_dtype_data(buf, t);
        r->step = NULL;
    } else {
        if (!(r->tmp = mpi_malloc((size_t)bytes))) return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
        data = r->tmp;
        r->ubuf = buf;
        r->ucount = count;
        if (r->utype != t) {
            if (r->utype) mpi_dtype_unref(r->utype);
            mpi_dtype_ref(t);
            r->utype = t;
        }
        r->step = recv_unpack_step;
    }
    int rc = weft_irecv(data, bytes, WEFT_BYTE, source == MPI_ANY_SOURCE ? WEFT_ANY_SOURCE : source,
                        mpi_tag_to_weft(tag), c->wc, &r->wr);
    if (MPI_UNLIKELY(rc)) return mpi_err_weft(c, rc, fn);
    mpi_req_track(r);
    return MPI_SUCCESS;
}

int mpi_p2p_start(mpi_req_t *r)
{
    struct MPI_ABI_Comm *c = r->comm;
    if (r->kind == MPI_REQ_PSEND)
        return start_send(r, c, r->pbuf, r->pcount, r->ptype, r->ppeer, r->ptag, r->pmode, "MPI_Start");
    return start_recv(r, c, (void *)r->pbuf, r->pcount, r->ptype, r->ppeer, r->ptag, "MPI_Start");
}

/* Frees a request whose start failed. */
static void drop(mpi_req_t *r)
{
    MPI_Request h = r;
    r->complete = 1;
    mpi_req_finish(r, &h);
}

static int isend_common(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                        MPI_Request *request, int mode, const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *t;
    int rc = p2p_check(comm, buf, count, datatype, dest, tag, 0, fn, &c, &t);
    if (MPI_UNLIKELY(rc)) return rc;
    if (MPI_UNLIKELY(!request)) return mpi_err(c, MPI_ERR_ARG, fn, "NULL request");
    mpi_req_t *r = NULL;
    if ((rc = mpi_req_new(MPI_REQ_SEND, c, fn, &r))) return rc;
    if ((rc = start_send(r, c, buf, count, t, dest, tag, mode, fn))) {
        drop(r);
        return rc;
    }
    *request = r;
    return MPI_SUCCESS;
}

static int irecv_common(void *buf, MPI_Count count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                        MPI_Request *request, const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *t;
    int rc = p2p_check(comm, buf, count, datatype, source, tag, 1, fn, &c, &t);
    if (MPI_UNLIKELY(rc)) return rc;
    if (MPI_UNLIKELY(!request)) return mpi_err(c, MPI_ERR_ARG, fn, "NULL request");
    mpi_req_t *r = NULL;
    if ((rc = mpi_req_new(MPI_REQ_RECV, c, fn, &r))) return rc;
    if ((rc = start_recv(r, c, buf, count, t, source, tag, fn))) {
        drop(r);
        return rc;
    }
    *request = r;
    return MPI_SUCCESS;
}

/* ---- blocking forms ------------------------------------------------------------ */

static void fill_status(MPI_Status *status, int source, int tag, MPI_Count bytes)
{
    if (!status) return;
    status->MPI_SOURCE = source;
    status->MPI_TAG = tag;
    status->MPI_internal[0] = (int)(uint32_t)((uint64_t)bytes & 0xffffffffu);
    status->MPI_internal[1] = (int)(uint32_t)((uint64_t)bytes >> 32);
    status->MPI_internal[2] = 0;
}

static int send_common(const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
                       int mode, const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *t;
    int rc = p2p_check(comm, buf, count, datatype, dest, tag, 0, fn, &c, &t);
    if (MPI_UNLIKELY(rc)) return rc;
    if (MPI_UNLIKELY(dest == MPI_PROC_NULL)) return MPI_SUCCESS;
    if (mode == MODE_BUFFERED) return bsend(c, buf, count, t, dest, tag, fn);
    MPI_Count bytes = mpi_dtype_bytes(t, count);
    if (MPI_LIKELY(t->contig && mode != MODE_SYNC)) {
        rc = weft_send(mpi_dtype_data(buf, t), bytes, WEFT_BYTE, dest, tag, c->wc);
        if (MPI_UNLIKELY(rc)) return mpi_err_weft(c, rc, fn);
        return MPI_SUCCESS;
    }
    mpi_req_t *r = NULL;
    if ((rc = mpi_req_new(MPI_REQ_SEND, c, fn, &r))) return rc;
    if (!(rc = start_send(r, c, buf, count, t, dest, tag, mode, fn))) rc = mpi_req_block(r);
    if (!rc && r->error) rc = mpi_err(c, r->error, fn, "%s", weft_last_error());
    drop(r);
    return rc;
}

static int recv_common(void *buf, MPI_Count count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
                       MPI_Status *status, const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *t;
    weft_status_t st;
    int rc = p2p_check(comm, buf, count, datatype, source, tag, 1, fn, &c, &t);
    if (MPI_UNLIKELY(rc)) return rc;
    if (MPI_UNLIKELY(source == MPI_PROC_NULL)) {
        fill_status(status, MPI_PROC_NULL, MPI_ANY_TAG, 0);
        return MPI_SUCCESS;
    }
    MPI_Count bytes = mpi_dtype_bytes(t, count);
    if (MPI_LIKELY(t->contig)) {
        rc = weft_recv(mpi_dtype_data(buf, t), bytes, WEFT_BYTE, source == MPI_ANY_SOURCE ? WEFT_ANY_SOURCE : source,
                       mpi_tag_to_weft(tag), c->wc, &st);
    } else {
        void *tmp = mpi_malloc((size_t)bytes);
        if (!tmp) return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
        rc = weft_recv(tmp, bytes, WEFT_BYTE, source == MPI_ANY_SOURCE ? WEFT_ANY_SOURCE : source, mpi_tag_to_weft(tag),
                       c->wc, &st);
        if (!rc) mpi_unpack(tmp, (MPI_Count)st.bytes, buf, count, t);
        free(tmp);
    }
    if (MPI_UNLIKELY(rc)) {
        if (rc == WEFT_ERR_TRUNCATE) fill_status(status, st.source, st.tag, (MPI_Count)st.bytes);
        return mpi_err_weft(c, rc, fn);
    }
    fill_status(status, st.source, st.tag, (MPI_Count)st.bytes);
    return MPI_SUCCESS;
}

/* The blocking calls as the API sees them: the fast path inline in each
 * entry point (no frame of the general function), the rest in send_common
 * / recv_common, which check again and say what is wrong. */
static inline __attribute__((always_inline)) int send_entry(const void *buf, MPI_Count count, MPI_Datatype datatype,
                                                            int dest, int tag, MPI_Comm comm, int mode, const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *t;
    if (MPI_LIKELY((mode == MODE_STD || mode == MODE_READY) && p2p_fast(comm, buf, count, datatype, dest, tag, 0, &c, &t))) {
        int rc = weft_send(mpi_dtype_data(buf, t), t->size * count, WEFT_BYTE, dest, tag, c->wc);
        return MPI_LIKELY(!rc) ? MPI_SUCCESS : mpi_err_weft(c, rc, fn);
    }
    return send_common(buf, count, datatype, dest, tag, comm, mode, fn);
}

static inline __attribute__((always_inline)) int recv_entry(void *buf, MPI_Count count, MPI_Datatype datatype,
                                                            int source, int tag, MPI_Comm comm, MPI_Status *status,
                                                            const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *t;
    weft_status_t st;
    if (MPI_LIKELY(p2p_fast(comm, buf, count, datatype, source, tag, 1, &c, &t))) {
        int rc = weft_recv(mpi_dtype_data(buf, t), t->size * count, WEFT_BYTE,
                           source == MPI_ANY_SOURCE ? WEFT_ANY_SOURCE : source, mpi_tag_to_weft(tag), c->wc, &st);
        if (MPI_LIKELY(!rc)) {
            fill_status(status, st.source, st.tag, (MPI_Count)st.bytes);
            return MPI_SUCCESS;
        }
        if (rc == WEFT_ERR_TRUNCATE) fill_status(status, st.source, st.tag, (MPI_Count)st.bytes);
        return mpi_err_weft(c, rc, fn);
    }
    return recv_common(buf, count, datatype, source, tag, comm, status, fn);
}

/* ---- the API --------------------------------------------------------------------- */

#define SEND_FORMS(Name, IName, mode)                                                                                  \
    MPI_DEF(int, Name, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm))          \
    {                                                                                                                  \
        return send_entry(buf, count, datatype, dest, tag, comm, mode, "MPI_" #Name);                                  \
    }                                                                                                                  \
    MPI_DEF(int, Name##_c,                                                                                             \
            (const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm))               \
    {                                                                                                                  \
        return send_entry(buf, count, datatype, dest, tag, comm, mode, "MPI_" #Name "_c");                             \
    }                                                                                                                  \
    MPI_DEF(                                                                                                           \
        int, IName,                                                                                                    \
        (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request *request))   \
    {                                                                                                                  \
        return isend_common(buf, count, datatype, dest, tag, comm, request, mode, "MPI_" #IName);                      \
    }                                                                                                                  \
    MPI_DEF(int, IName##_c,                                                                                            \
            (const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,                \
             MPI_Request *request))                                                                                    \
    {                                                                                                                  \
        return isend_common(buf, count, datatype, dest, tag, comm, request, mode, "MPI_" #IName "_c");                 \
    }

SEND_FORMS(Send, Isend, MODE_STD)
SEND_FORMS(Ssend, Issend, MODE_SYNC)
SEND_FORMS(Bsend, Ibsend, MODE_BUFFERED)
SEND_FORMS(Rsend, Irsend, MODE_READY)

MPI_DEF(int, Recv,
        (void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Status *status))
{
    return recv_entry(buf, count, datatype, source, tag, comm, status, "MPI_Recv");
}

MPI_DEF(int, Recv_c,
        (void *buf, MPI_Count count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Status *status))
{
    return recv_entry(buf, count, datatype, source, tag, comm, status, "MPI_Recv_c");
}

MPI_DEF(int, Irecv,
        (void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Request *request))
{
    return irecv_common(buf, count, datatype, source, tag, comm, request, "MPI_Irecv");
}

MPI_DEF(int, Irecv_c,
        (void *buf, MPI_Count count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Request *request))
{
    return irecv_common(buf, count, datatype, source, tag, comm, request, "MPI_Irecv_c");
}

/* ---- persistent ------------------------------------------------------------------ */

static int init_common(const void *buf, MPI_Count count, MPI_Datatype datatype, int peer, int tag, MPI_Comm comm,
                       MPI_Request *request, int recv, int mode, const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *t;
    int rc = p2p_check(comm, buf, count, datatype, peer, tag, recv, fn, &c, &t);
    if (rc) return rc;
    if (!request) return mpi_err(c, MPI_ERR_ARG, fn, "NULL request");
    mpi_req_t *r = NULL;
    if ((rc = mpi_req_new(recv ? MPI_REQ_PRECV : MPI_REQ_PSEND, c, fn, &r))) return rc;
    r->pbuf = buf;
    r->pcount = count;
    r->ptype = t;
    mpi_dtype_ref(t);
    r->ppeer = peer;
    r->ptag = tag;
    r->pmode = mode;
    *request = r;
    return MPI_SUCCESS;
}

#define INIT_FORMS(Name, mode)                                                                                         \
    MPI_DEF(                                                                                                           \
        int, Name##_init,                                                                                              \
        (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request *request))   \
    {                                                                                                                  \
        return init_common(buf, count, datatype, dest, tag, comm, request, 0, mode, "MPI_" #Name "_init");             \
    }                                                                                                                  \
    MPI_DEF(int, Name##_init_c,                                                                                        \
            (const void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,                \
             MPI_Request *request))                                                                                    \
    {                                                                                                                  \
        return init_common(buf, count, datatype, dest, tag, comm, request, 0, mode, "MPI_" #Name "_init_c");           \
    }

INIT_FORMS(Send, MODE_STD)
INIT_FORMS(Ssend, MODE_SYNC)
INIT_FORMS(Bsend, MODE_BUFFERED)
INIT_FORMS(Rsend, MODE_READY)

MPI_DEF(int, Recv_init,
        (void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Request *request))
{
    return init_common(buf, count, datatype, source, tag, comm, request, 1, 0, "MPI_Recv_init");
}

MPI_DEF(int, Recv_init_c,
        (void *buf, MPI_Count count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Request *request))
{
    return init_common(buf, count, datatype, source, tag, comm, request, 1, 0, "MPI_Recv_init_c");
}

/* ---- send-receive ------------------------------------------------------------------ */

/* The receive completed first; then wait for the send (wr2). */
static int sendrecv_step(mpi_req_t *r, int rc, const weft_status_t *st)
{
    if (r->wr2) { /* the receive's end */
        if (r->utype) {
            r->source = st->source;
            r->tag = st->tag;
            r->bytes = (MPI_Count)st->bytes;
            if (rc == WEFT_SUCCESS) mpi_unpack(r->tmp, r->bytes, r->ubuf, r->ucount, r->utype);
        } else {
            r->source = st->source;
            r->tag = st->tag;
            r->bytes = (MPI_Count)st->bytes;
        }
        r->error = mpi_class_of_weft(rc);
        r->wr = r->wr2;
        r->wr2 = NULL;
        return r->error;
    }
    int err = r->error ? r->error : mpi_class_of_weft(rc);
    return err;
}

/* Starts a send and a receive as one request: the receive in wr, the send
 * in wr2. replace: the receive goes to a temporary that is unpacked into
 * the (already packed and sent) send buffer. */
static int sendrecv_start(mpi_req_t *r, struct MPI_ABI_Comm *c, const void *sbuf, MPI_Count scount,
                          struct MPI_ABI_Datatype *st_, int dest, int stag, void *rbuf, MPI_Count rcount,
                          struct MPI_ABI_Datatype *rt, int source, int rtag, int replace, const char *fn)
{
    MPI_Count sbytes = mpi_dtype_bytes(st_, scount), rbytes = mpi_dtype_bytes(rt, rcount);
    const void *sdata;
    void *rdata;
    int rc;
    if (st_->contig && !replace) {
        sdata = mpi_dtype_data(sbuf, st_);
    } else {
        if (!(r->tmp2 = mpi_malloc((size_t)sbytes))) return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
        mpi_pack(sbuf, scount, st_, r->tmp2);
        sdata = r->tmp2;
    }
    if (rt->contig && !replace) {
        rdata = mpi_dtype_data(rbuf, rt);
    } else {
        if (!(r->tmp = mpi_malloc((size_t)rbytes))) return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
        rdata = r->tmp;
        r->ubuf = rbuf;
        r->ucount = rcount;
        mpi_dtype_ref(rt);
        r->utype = rt;
    }
    if (source == MPI_PROC_NULL) {
        r->source = MPI_PROC_NULL;
        r->tag = MPI_ANY_TAG;
        r->bytes = 0;
    } else if ((rc = weft_irecv(rdata, rbytes, WEFT_BYTE, source == MPI_ANY_SOURCE ? WEFT_ANY_SOURCE : source,
                                mpi_tag_to_weft(rtag), c->wc, &r->wr))) {
        return mpi_err_weft(c, rc, fn);
    }
    if (dest != MPI_PROC_NULL && (rc = weft_isend(sdata, sbytes, WEFT_BYTE, dest, stag, c->wc, &r->wr2))) {
        if (r->wr) weft_request_cancel(&r->wr), weft_wait(&r->wr, NULL);
        return mpi_err_weft(c, rc, fn);
    }
    if (!r->wr) { /* no receive: the send alone */
        r->wr = r->wr2;
        r->wr2 = NULL;
        r->step = NULL;
        r->kind = MPI_REQ_SEND;
        if (r->wr)
            mpi_req_track(r);
        else
            mpi_req_done(r, MPI_SUCCESS, MPI_PROC_NULL, MPI_ANY_TAG, 0);
        r->source = MPI_PROC_NULL;
        return MPI_SUCCESS;
    }
    mpi_req_track(r);
    if (!r->wr2) { /* no send: the receive alone */
        r->step = r->utype ? recv_unpack_step : NULL;
        r->kind = MPI_REQ_RECV;
        return MPI_SUCCESS;
    }
    r->step = sendrecv_step;
    return MPI_SUCCESS;
}

static int sendrecv_common(const void *sbuf, MPI_Count scount, MPI_Datatype stype, int dest, int stag, void *rbuf,
                           MPI_Count rcount, MPI_Datatype rtype, int source, int rtag, MPI_Comm comm,
                           MPI_Status *status, MPI_Request *request, int replace, const char *fn)
{
    struct MPI_ABI_Comm *c;
    struct MPI_ABI_Datatype *st_, *rt;
    int rc = p2p_check(comm, sbuf, scount, stype, dest, stag, 0, fn, &c, &st_);
    if (rc || (rc = p2p_check(comm, rbuf, rcount, rtype, source, rtag, 1, fn, &c, &rt))) return rc;
    if (request == NULL && !replace && st_->contig && rt->contig && dest != MPI_PROC_NULL && source != MPI_PROC_NULL) {
        weft_status_t ws;
        rc = weft_sendrecv(mpi_dtype_data(sbuf, st_), mpi_dtype_bytes(st_, scount), WEFT_BYTE, dest, stag,
                           mpi_dtype_data(rbuf, rt), mpi_dtype_bytes(rt, rcount), WEFT_BYTE,
                           source == MPI_ANY_SOURCE ? WEFT_ANY_SOURCE : source, mpi_tag_to_weft(rtag), c->wc, &ws);
        if (rc) return mpi_err_weft(c, rc, fn);
        fill_status(status, ws.source, ws.tag, (MPI_Count)ws.bytes);
        return MPI_SUCCESS;
    }
    mpi_req_t *r = NULL;
    if ((rc = mpi_req_new(MPI_REQ_RECV, c, fn, &r))) return rc;
    if ((rc = sendrecv_start(r, c, sbuf, scount, st_, dest, stag, rbuf, rcount, rt, source, rtag, replace, fn))) {
        drop(r);
        return rc;
    }
    if (request) {
        *request = r;
        return MPI_SUCCESS;
    }
    rc = mpi_req_block(r);
    if (!rc) {
        mpi_req_fill_status(r, status);
        if (r->error) rc = mpi_err(c, r->error, fn, "%s", weft_last_error());
    }
    drop(r);
    return rc;
}

MPI_DEF(int, Sendrecv,
        (const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf, int recvcount,
         MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status *status))
{
    return sendrecv_common(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                           comm, status, NULL, 0, "MPI_Sendrecv");
}

MPI_DEF(int, Sendrecv_c,
        (const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf,
         MPI_Count recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status *status))
{
    return sendrecv_common(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                           comm, status, NULL, 0, "MPI_Sendrecv_c");
}

MPI_DEF(int, Isendrecv,
        (const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf, int recvcount,
         MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Request *request))
{
    if (!request) return mpi_err(mpi_comm_get(comm), MPI_ERR_ARG, "MPI_Isendrecv", "NULL request");
    return sendrecv_common(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                           comm, NULL, request, 0, "MPI_Isendrecv");
}

MPI_DEF(int, Isendrecv_c,
        (const void *sendbuf, MPI_Count sendcount, MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf,
         MPI_Count recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Request *request))
{
    if (!request) return mpi_err(mpi_comm_get(comm), MPI_ERR_ARG, "MPI_Isendrecv_c", "NULL request");
    return sendrecv_common(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                           comm, NULL, request, 0, "MPI_Isendrecv_c");
}

MPI_DEF(int, Sendrecv_replace,
        (void *buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source, int recvtag, MPI_Comm comm,
         MPI_Status *status))
{
    return sendrecv_common(buf, count, datatype, dest, sendtag, buf, count, datatype, source, recvtag, comm, status,
                           NULL, 1, "MPI_Sendrecv_replace");
}

MPI_DEF(int, Sendrecv_replace_c,
        (void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int sendtag, int source, int recvtag,
         MPI_Comm comm, MPI_Status *status))
{
    return sendrecv_common(buf, count, datatype, dest, sendtag, buf, count, datatype, source, recvtag, comm, status,
                           NULL, 1, "MPI_Sendrecv_replace_c");
}

MPI_DEF(int, Isendrecv_replace,
        (void *buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source, int recvtag, MPI_Comm comm,
         MPI_Request *request))
{
    if (!request) return mpi_err(mpi_comm_get(comm), MPI_ERR_ARG, "MPI_Isendrecv_replace", "NULL request");
    return sendrecv_common(buf, count, datatype, dest, sendtag, buf, count, datatype, source, recvtag, comm, NULL,
                           request, 1, "MPI_Isendrecv_replace");
}

MPI_DEF(int, Isendrecv_replace_c,
        (void *buf, MPI_Count count, MPI_Datatype datatype, int dest, int sendtag, int source, int recvtag,
         MPI_Comm comm, MPI_Request *request))
{
    if (!request) return mpi_err(mpi_comm_get(comm), MPI_ERR_ARG, "MPI_Isendrecv_replace_c", "NULL request");
    return sendrecv_common(buf, count, datatype, dest, sendtag, buf, count, datatype, source, recvtag, comm, NULL,
                           request, 1, "MPI_Isendrecv_replace_c");
}

/* ---- probes and matched probes ----------------------------------------------------- */

static int probe_common(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status, int block, const char *fn,
                        struct MPI_ABI_Comm **cout, weft_status_t *wst)
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, fn, &c);
    if (rc || (rc = check_peer(c, source, 1, fn)) || (rc = check_tag(c, tag, 1, fn))) return rc;
    if (!block && !flag) return mpi_err(c, MPI_ERR_ARG, fn, "NULL flag");
    if (cout) *cout = c;
    if (source == MPI_PROC_NULL) {
        if (flag) *flag = 1;
        fill_status(status, MPI_PROC_NULL, MPI_ANY_TAG, 0);
        if (wst) wst->source = -1;
        return MPI_SUCCESS;
    }
    weft_status_t st;
    int f = 1, s = source == MPI_ANY_SOURCE ? WEFT_ANY_SOURCE : source;
    if (block)
        rc = weft_probe(s, mpi_tag_to_weft(tag), c->wc, &st);
    else
        rc = weft_iprobe(s, mpi_tag_to_weft(tag), c->wc, &f, &st);
    if (rc) return mpi_err_weft(c, rc, fn);
    if (flag) *flag = f;
    if (f) fill_status(status, st.source, st.tag, (MPI_Count)st.bytes);
    if (wst) *wst = st;
    return MPI_SUCCESS;
}

MPI_DEF(int, Probe, (int source, int tag, MPI_Comm comm, MPI_Status *status))
{
    return probe_common(source, tag, comm, NULL, status, 1, "MPI_Probe", NULL, NULL);
}

MPI_DEF(int, Iprobe, (int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status))
{
    return probe_common(source, tag, comm, flag, status, 0, "MPI_Iprobe", NULL, NULL);
}

struct MPI_ABI_Message mpi_message_no_proc;

static struct MPI_ABI_Message *message_get(MPI_Message h)
{
    if (h == MPI_MESSAGE_NO_PROC) return &mpi_message_no_proc;
    if ((uintptr_t)h < MPI_HANDLE_INT_BASE) return NULL;
    return mpi_obj_check(MPI_K_MESSAGE, h);
}

/* A probed message, received now into a buffer of its own. */
static int mprobe_common(int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message, MPI_Status *status,
                         int block, const char *fn)
{
    struct MPI_ABI_Comm *c;
    weft_status_t st;
    int f = 1;
    memset(&st, 0, sizeof(st));
    if (!message) return mpi_err(mpi_comm_get(comm), MPI_ERR_ARG, fn, "NULL message");
    int rc = probe_common(source, tag, comm, block ? NULL : &f, NULL, block, fn, &c, &st);
    if (rc) return rc;
    if (flag) *flag = f;
    if (!f) {
        *message = MPI_MESSAGE_NULL;
        return MPI_SUCCESS;
    }
    if (source == MPI_PROC_NULL) {
        *message = MPI_MESSAGE_NO_PROC;
        fill_status(status, MPI_PROC_NULL, MPI_ANY_TAG, 0);
        return MPI_SUCCESS;
    }
    struct MPI_ABI_Message *m = mpi_obj_alloc(MPI_K_MESSAGE);
    if (!m) return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of handles");
    m->data = mpi_malloc(st.bytes);
    if (!m->data) {
        mpi_obj_release(MPI_K_MESSAGE, m);
        return mpi_err(c, MPI_ERR_NO_MEM, fn, "out of memory");
    }
    /* the oldest message from that source with that tag is the one probed */
    weft_status_t got;
    if ((rc = weft_recv(m->data, (int64_t)st.bytes, WEFT_BYTE, st.source, st.tag, c->wc, &got))) {
        free(m->data);
        mpi_obj_release(MPI_K_MESSAGE, m);
        return mpi_err_weft(c, rc, fn);
    }
    m->comm = c;
    mpi_comm_ref(c);
    m->bytes = got.bytes;
    m->source = got.source;
    m->tag = got.tag;
    fill_status(status, got.source, got.tag, (MPI_Count)got.bytes);
    *message = m;
    return MPI_SUCCESS;
}

MPI_DEF(int, Mprobe, (int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status))
{
    return mprobe_common(source, tag, comm, NULL, message, status, 1, "MPI_Mprobe");
}

MPI_DEF(int, Improbe, (int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message, MPI_Status *status))
{
    if (!flag) return mpi_err(mpi_comm_get(comm), MPI_ERR_ARG, "MPI_Improbe", "NULL flag");
    return mprobe_common(source, tag, comm, flag, message, status, 0, "MPI_Improbe");
}

/* Delivers a matched message into the receive buffer. The message holds
 * its communicator (the program may have freed it since the probe) until
 * the error, if any, is raised and the request made. */
static int mrecv_common(void *buf, MPI_Count count, MPI_Datatype datatype, MPI_Message *message, MPI_Status *status,
                        MPI_Request *request, const char *fn)
{
    if (!message) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL message");
    struct MPI_ABI_Message *m = message_get(*message);
    if (!m) return mpi_err(NULL, MPI_ERR_REQUEST, fn, "invalid message handle");
    struct MPI_ABI_Datatype *t;
    struct MPI_ABI_Comm *c = m == &mpi_message_no_proc ? NULL : m->comm;
    int rc = mpi_check_dtype(c, datatype, fn, &t);
    if (rc || (rc = mpi_check_buf(c, buf, count, t, fn))) return rc;
    int src = MPI_PROC_NULL, tag = MPI_ANY_TAG, err = MPI_SUCCESS;
    MPI_Count bytes = 0, cap = 0;
    if (m != &mpi_message_no_proc) {
        cap = mpi_dtype_bytes(t, count);
        bytes = (MPI_Count)m->bytes;
        if (bytes > cap) err = MPI_ERR_TRUNCATE;
        mpi_unpack(m->data, err ? cap : bytes, buf, count, t);
        src = m->source;
        tag = m->tag;
        free(m->data);
        mpi_obj_release(MPI_K_MESSAGE, m);
    }
    *message = MPI_MESSAGE_NULL;
    if (request) {
        mpi_req_t *r = NULL;
        if (!(rc = mpi_req_new(MPI_REQ_DONE, c, fn, &r))) {
            mpi_req_done(r, err, src, tag, err ? cap : bytes);
            *request = r;
        }
    } else {
        fill_status(status, src, tag, err ? cap : bytes);
        if (err)
            rc = mpi_err(c, err, fn, "the message (%lld bytes) does not fit the receive buffer (%lld bytes)",
                         (long long)bytes, (long long)cap);
    }
    mpi_comm_unref(c);
    return rc;
}

MPI_DEF(int, Mrecv, (void *buf, int count, MPI_Datatype datatype, MPI_Message *message, MPI_Status *status))
{
    return mrecv_common(buf, count, datatype, message, status, NULL, "MPI_Mrecv");
}

MPI_DEF(int, Mrecv_c, (void *buf, MPI_Count count, MPI_Datatype datatype, MPI_Message *message, MPI_Status *status))
{
    return mrecv_common(buf, count, datatype, message, status, NULL, "MPI_Mrecv_c");
}

MPI_DEF(int, Imrecv, (void *buf, int count, MPI_Datatype datatype, MPI_Message *message, MPI_Request *request))
{
    if (!request) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Imrecv", "NULL request");
    return mrecv_common(buf, count, datatype, message, NULL, request, "MPI_Imrecv");
}

MPI_DEF(int, Imrecv_c, (void *buf, MPI_Count count, MPI_Datatype datatype, MPI_Message *message, MPI_Request *request))
{
    if (!request) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Imrecv_c", "NULL request");
    return mrecv_common(buf, count, datatype, message, NULL, request, "MPI_Imrecv_c");
}

MPI_DEF(MPI_Message, Message_fromint, (int message))
{
    if (message == 0x128 || message == 0x129) return (MPI_Message)(uintptr_t)message;
    void *o = mpi_obj_at(MPI_K_MESSAGE, message - MPI_HANDLE_INT_BASE);
    return o ? o : MPI_MESSAGE_NULL;
}

MPI_DEF(int, Message_toint, (MPI_Message message))
{
    uintptr_t v = (uintptr_t)message;
    if (v < MPI_HANDLE_INT_BASE) return (int)v;
    int i = mpi_obj_index(MPI_K_MESSAGE, message);
    return i < 0 ? 0x128 : MPI_HANDLE_INT_BASE + i;
}
