/* The MPI standard ABI over weft.h: the objects behind MPI's handles.
 *
 * A handle of the ABI (mpi_abi.h) is a pointer to an incomplete struct;
 * here those structs are complete. Predefined handles are small integers
 * (below 0x1000) that map through tables to static objects; every other
 * handle points into a slab of its kind (handle.c), so a null, garbage or
 * freed handle is recognised without dereferencing it blindly. weft does
 * the communication: there is no second runtime and no progress engine
 * here, only the waits that the program calls. */
#ifndef WEFT_MPI_IMPL_H
#define WEFT_MPI_IMPL_H

#include "mpi_abi.h"
#include "weft.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Every MPI_X is a weak alias of PMPI_X (the profiling interface), both
 * exported; the header's prototypes check the definition's. */
#define MPI_EXPORT __attribute__((visibility("default")))
#define MPI_DEF(ret, name, params)                                                                                     \
    MPI_EXPORT ret MPI_##name params __attribute__((weak, alias("PMPI_" #name)));                                      \
    MPI_EXPORT ret PMPI_##name params
#define MPIX_DEF(ret, name, params)                                                                                    \
    MPI_EXPORT ret MPIX_##name params __attribute__((weak, alias("PMPIX_" #name)));                                    \
    MPI_EXPORT ret PMPIX_##name params

#define MPI_LIKELY(x)   __builtin_expect(!!(x), 1)
#define MPI_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ------------------------------------------------------------------ */
/* Handle slabs (handle.c)                                             */
/* ------------------------------------------------------------------ */
enum mpi_kind {
    MPI_K_COMM,
    MPI_K_GROUP,
    MPI_K_DTYPE,
    MPI_K_OP,
    MPI_K_REQUEST,
    MPI_K_INFO,
    MPI_K_ERRH,
    MPI_K_MESSAGE,
    MPI_K_KEYVAL,
    MPI_K_SESSION,
    MPI_K_COUNT
};

/* The head of every object: a kind-specific magic while alive, refs for
 * objects that others hold (datatypes inside datatypes, groups, ...). */
typedef struct mpi_obj {
    uint32_t magic;
    int32_t refs;
} mpi_obj_t;

#define MPI_MAGIC_BASE    0x57465400u /* "WFT\0" + kind */
#define MPI_MAGIC_FREED   0xdeadf4eeu
#define MPI_MAGIC_RETIRED 0xdeadf4e1u

void *mpi_obj_alloc(enum mpi_kind kind);
void mpi_obj_release(enum mpi_kind kind, void *obj);
/* The program freed its handle while others still hold the object: the
 * handle is invalid from now on (as a freed one), the slot stays taken
 * (no new object gets the same handle) until mpi_obj_release. */
void mpi_obj_retire(void *obj);
/* The live object at p of this kind, or NULL (p outside the kind's slab,
 * not at a slot, or freed). */
void *mpi_obj_check(enum mpi_kind kind, const void *p);
/* Slot index <-> small integer for the toint / fromint converters. */
int mpi_obj_index(enum mpi_kind kind, const void *p);
void *mpi_obj_at(enum mpi_kind kind, int index);
/* Calls fn on every live object of a kind (finalize's cleanup). */
void mpi_obj_foreach(enum mpi_kind kind, void (*fn)(void *obj, void *arg), void *arg);
#define MPI_HANDLE_INT_BASE 0x1000

/* ------------------------------------------------------------------ */
/* Objects                                                             */
/* ------------------------------------------------------------------ */
typedef struct mpi_attr mpi_attr_t;

struct MPI_ABI_Errhandler {
    mpi_obj_t h;
    int predefined;                   /* MPI_ERRORS_* value or 0 */
    int kind;                         /* MPI_K_COMM (comm), or 'w' 'f' 's' for win / file / session */
    MPI_Comm_errhandler_function *fn; /* all kinds share the calling convention (object *, int *, ...) */
    MPIX_Comm_errhandler_function_x *fn_x;
    MPIX_Destructor_function *destructor;
    void *extra_state;
};

struct MPI_ABI_Group {
    mpi_obj_t h;
    int size;
    int rank;   /* this process's rank in the group, or MPI_UNDEFINED */
    int *world; /* world rank of each member */
};

typedef struct mpi_topo {
    int kind; /* MPI_CART, MPI_GRAPH, MPI_DIST_GRAPH */
    int ndims;
    int *dims, *periods;
    /* graph: nnodes, index[], edges[]; dist graph: in / out neighbours */
    int nnodes, nedges;
    int *index, *edges;
    int indegree, outdegree, weighted;
    int *sources, *sourceweights, *dests, *destweights;
} mpi_topo_t;

/* An attached buffer for buffered sends (MPI_Buffer_attach and the
 * communicator's and session's forms): its space, and how much the sends
 * in flight hold. */
typedef struct mpi_bbuf {
    void *buf;
    MPI_Count size, used;
} mpi_bbuf_t;

struct MPI_ABI_Comm {
    mpi_obj_t h;
    weft_comm_t wc; /* NULL for MPI_COMM_NULL */
    int rank, size;
    int *world; /* world rank of each member */
    struct MPI_ABI_Errhandler *errh;
    mpi_attr_t *attrs;
    mpi_topo_t *topo;
    struct MPI_ABI_Info *info; /* hints given at creation / set_info (never NULL once created) */
    int predefined;            /* the handle's value for WORLD / SELF, else 0 */
    mpi_bbuf_t *bbuf;          /* the communicator's own buffer (MPI_Comm_attach_buffer), or NULL */
    mpi_bbuf_t *session_bbuf;  /* that of the session it was made in, or NULL */
    weft_comm_t nbr_wc;        /* the shadow neighbourhood collectives use (neighbor.c), or NULL */
    unsigned nbr_seq;
    /* Operations in flight on it: requests started and not yet complete
     * (held by the program, or freed by it while in flight) and buffered
     * sends not yet sent. MPI_Comm_disconnect waits until it is 0. */
    int inflight;
    char name[MPI_MAX_OBJECT_NAME];
};

struct MPI_ABI_Session {
    mpi_obj_t h;
    struct MPI_ABI_Errhandler *errh;
    struct MPI_ABI_Info *info;
    mpi_bbuf_t bbuf;
};

/* One run of a datatype's type map: `reps` copies (reps >= 1) of n
 * elements of basic type `basic`, the i-th copy starting disp + i * stride
 * bytes from the buffer, in that order. A run with reps > 1 never has
 * adjacent copies (stride != n * the basic size: those are one longer run
 * of reps 1), and stride is 0 when reps == 1. So a vector of any count of
 * blocks of a contiguous type is one run. */
typedef struct mpi_run {
    MPI_Aint disp;
    MPI_Count n;
    int basic; /* index of a predefined basic type (mpi_basic_*) */
    MPI_Count reps;
    MPI_Aint stride;
} mpi_run_t;

struct MPI_ABI_Datatype {
    mpi_obj_t h;
    int predefined; /* handle value of a predefined type, else 0 */
    int committed;
    MPI_Count size;                /* bytes of data in one element */
    MPI_Aint lb, extent;           /* as set (resized) */
    MPI_Aint true_lb, true_extent; /* of the data */
    MPI_Count nelem;               /* basic elements in one element */
    int contig;                    /* one element's data is [true_lb, true_lb+size) and extent == size */
    int basic;                     /* the one basic type of every run, or -1 when mixed */
    int nruns;
    mpi_run_t *runs;  /* one element's type map, in order (disp ascending is NOT assumed) */
    weft_dtype_t wdt; /* weft's type when basic maps to one, else -1 */
    /* the constructor, for get_envelope / get_contents */
    int combiner;
    int ni, na, nc, nt;
    int *ints;
    MPI_Aint *addrs;
    MPI_Count *counts;
    MPI_Datatype *types;
    mpi_attr_t *attrs;
    char name[MPI_MAX_OBJECT_NAME];
};

struct MPI_ABI_Op {
    mpi_obj_t h;
    int predefined; /* handle value of a predefined op, else 0 */
    int commute;
    MPI_User_function *fn;
    MPI_User_function_c *fn_c;
};

struct MPI_ABI_Info {
    mpi_obj_t h;
    int n, cap;
    char **keys, **vals;
};

struct MPI_ABI_Message {
    mpi_obj_t h;
    struct MPI_ABI_Comm *comm;
    void *data; /* the message, received at probe time */
    size_t bytes;
    int source, tag;
};

typedef struct mpi_keyval {
    mpi_obj_t h;
    int id;
    int kind; /* MPI_K_COMM or MPI_K_DTYPE, or 'w' (window) */
    MPI_Comm_copy_attr_function *copy;
    MPI_Comm_delete_attr_function *del;
    void *extra_state;
    int freed; /* MPI_*_free_keyval was called; kept while attributes use it */
} mpi_keyval_t;

/* ------------------------------------------------------------------ */
/* Requests (request.c)                                                */
/* ------------------------------------------------------------------ */
enum mpi_req_kind {
    MPI_REQ_SEND,
    MPI_REQ_RECV,
    MPI_REQ_COLL,
    MPI_REQ_PSEND, /* persistent */
    MPI_REQ_PRECV,
    MPI_REQ_PCOLL,
    MPI_REQ_GREQ,
    MPI_REQ_DONE /* completed at creation (MPI_PROC_NULL, a matched message, ...) */
};

typedef struct MPI_ABI_Request mpi_req_t;
/* Called when the weft request in flight completed (err: its status);
 * may start another weft request (a chained collective): then the MPI
 * request is not complete yet. Returns the MPI error class. */
typedef int (*mpi_req_step_fn)(mpi_req_t *r, int err, const weft_status_t *st);

struct MPI_ABI_Request {
    mpi_obj_t h;
    int kind;
    int active;   /* persistent: started and not yet completed */
    int complete; /* the operation is over; status holds its outcome */
    int freed;    /* MPI_Request_free was called while in flight */
    int cancelled;
    struct MPI_ABI_Comm *comm; /* for the error handler */
    weft_request_t wr;         /* in flight, or NULL */
    weft_request_t wr2;        /* a second one that must end too (sendrecv's send) */
    mpi_req_step_fn step;
    int error; /* MPI error class of the outcome */
    int source, tag;
    MPI_Count bytes;
    /* deferred unpack of a non-contiguous receive, temporaries */
    void *tmp, *tmp2;
    void *ubuf;
    MPI_Count ucount;
    struct MPI_ABI_Datatype *utype;
    /* persistent point to point: the arguments of Start */
    const void *pbuf;
    MPI_Count pcount;
    struct MPI_ABI_Datatype *ptype;
    int ppeer, ptag, pmode;
    /* collectives: their arguments and state (coll.c) */
    struct mpi_coll *coll;
    /* generalized requests */
    MPI_Grequest_query_function *gquery;
    MPI_Grequest_free_function *gfree;
    MPI_Grequest_cancel_function *gcancel;
    void *gstate;
    MPI_Status gstatus;
    const char *fn; /* the call that created it, for messages */
    int listed;     /* 1 + its index in the array a call is checking, else 0 */
    int tracked;    /* counted in comm->inflight: its operation is in flight */
};

/* A request's operation started on its communicator (once per start: a
 * request in flight is not started again), and its end (any path that
 * completes or releases a request; a no-op when it was not counted). One
 * increment and one decrement per operation: the hot path's whole cost of
 * MPI_Comm_disconnect's bookkeeping. */
static inline void mpi_req_track(mpi_req_t *r)
{
    r->tracked = 1;
    r->comm->inflight++;
}
static inline void mpi_req_untrack(mpi_req_t *r)
{
    if (r->tracked) {
        r->tracked = 0;
        r->comm->inflight--;
    }
}
/* What is left of a wait with an absolute deadline (weft_wtime(); 0: none)
 * as a weft timeout argument: WEFT_TIMEOUT_NONE for none, and a passed
 * deadline a last short poll rather than "no deadline". */
static inline double mpi_time_left(double deadline)
{
    if (deadline <= 0) return WEFT_TIMEOUT_NONE;
    double left = deadline - weft_wtime();
    return left > 1e-6 ? left : 1e-6;
}

int mpi_req_new(int kind, struct MPI_ABI_Comm *comm, const char *fn, mpi_req_t **out);
void mpi_req_done(mpi_req_t *r, int err, int source, int tag, MPI_Count bytes);
/* Drives r once (weft_test); *done = 1 when complete. */
int mpi_req_poll(mpi_req_t *r, int *done);
/* Blocks until r completes (or its deadline passes). */
int mpi_req_block(mpi_req_t *r);
void mpi_req_fill_status(const mpi_req_t *r, MPI_Status *status);
/* Releases what a completed request holds and the request itself
 * (persistent ones only go inactive). */
void mpi_req_finish(mpi_req_t *r, MPI_Request *handle);
/* MPI_Comm_disconnect's wait: drives every operation in flight on c (the
 * program's requests, freed ones, buffered sends) to its end by the
 * absolute deadline (weft_wtime(); 0: none). Requests the program holds
 * stay its own (complete, for its Wait); freed ones are released. Returns
 * 0, or the error raised on c naming fn: an operation that did not end in
 * time (it stays in flight), or a freed one or a buffered send that
 * failed. */
int mpi_comm_drain(struct MPI_ABI_Comm *c, double deadline, const char *fn);

/* ------------------------------------------------------------------ */
/* Errors (error.c)                                                    */
/* ------------------------------------------------------------------ */
extern int mpi_state; /* the runtime: 0 not yet up, 1 up, 2 ended */
extern int mpi_sessions;
int mpi_runtime_up(int *argc, char ***argv, const char *fn);
int mpi_runtime_down_if_unused(const char *fn);
extern int mpi_thread_level;
extern struct MPI_ABI_Comm mpi_comm_world_obj, mpi_comm_self_obj;
extern struct MPI_ABI_Errhandler mpi_errh_fatal, mpi_errh_abort, mpi_errh_return;

/* Raises an error of MPI class cls in function fn on comm (NULL: the
 * error handler of MPI_COMM_SELF, as MPI 4 says for errors tied to no
 * object): formats the message, makes an error code that carries it,
 * calls the handler (aborts under MPI_ERRORS_ARE_FATAL, naming fn) and
 * returns the code. */
int mpi_err(struct MPI_ABI_Comm *comm, int cls, const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int mpi_verr(struct MPI_ABI_Comm *comm, int cls, const char *fn, const char *fmt, va_list ap);
/* The same for errors in windows / files / sessions (handler of SELF). */
/* A weft status as an MPI class, and an error raised with weft's message. */
int mpi_class_of_weft(int wrc);
int mpi_err_weft(struct MPI_ABI_Comm *comm, int wrc, const char *fn);
/* MPI_ERR_UNSUPPORTED_OPERATION naming fn (the generated stubs call it). */
int mpi_unsupported(const char *fn);
int mpi_errh_invoke(struct MPI_ABI_Comm *comm, int code, const char *fn);

/* Init checks shared by most calls. */
#define MPI_CHECK_INIT(fn)                                                                                             \
    do {                                                                                                               \
        if (MPI_UNLIKELY(mpi_state != 1))                                                                              \
            return mpi_err(NULL, MPI_ERR_OTHER, fn, "%s",                                                              \
                           mpi_state == 0 ? "called before MPI_Init" : "called after MPI_Finalize");                   \
    } while (0)

/* ------------------------------------------------------------------ */
/* Handle lookups (inline: the hot path)                               */
/* ------------------------------------------------------------------ */
static inline struct MPI_ABI_Comm *mpi_comm_get(MPI_Comm h)
{
    uintptr_t v = (uintptr_t)h;
    if (MPI_LIKELY(v == (uintptr_t)MPI_COMM_WORLD)) return mpi_comm_world_obj.wc ? &mpi_comm_world_obj : NULL;
    if (v == (uintptr_t)MPI_COMM_SELF) return mpi_comm_self_obj.wc ? &mpi_comm_self_obj : NULL;
    if (v < MPI_HANDLE_INT_BASE) return NULL;
    return mpi_obj_check(MPI_K_COMM, h);
}

extern struct MPI_ABI_Datatype *mpi_dtype_table[]; /* by handle value - 0x200 */
#define MPI_DTYPE_TABLE_SIZE 0x100
static inline struct MPI_ABI_Datatype *mpi_dtype_get(MPI_Datatype h)
{
    uintptr_t v = (uintptr_t)h;
    if (v - 0x200u < MPI_DTYPE_TABLE_SIZE) return mpi_dtype_table[v - 0x200u];
    if (v < MPI_HANDLE_INT_BASE) return NULL;
    return mpi_obj_check(MPI_K_DTYPE, h);
}

struct MPI_ABI_Op *mpi_op_get(MPI_Op h);
struct MPI_ABI_Group *mpi_group_get(MPI_Group h);
struct MPI_ABI_Info *mpi_info_get(MPI_Info h);
struct MPI_ABI_Errhandler *mpi_errh_get(MPI_Errhandler h);
static inline mpi_req_t *mpi_req_get(MPI_Request h)
{
    if ((uintptr_t)h < MPI_HANDLE_INT_BASE) return NULL;
    return mpi_obj_check(MPI_K_REQUEST, h);
}

/* Common argument checks: each returns 0 or the raised error code. */
int mpi_check_comm(MPI_Comm h, const char *fn, struct MPI_ABI_Comm **out);
int mpi_check_dtype(struct MPI_ABI_Comm *c, MPI_Datatype h, const char *fn, struct MPI_ABI_Datatype **out);
int mpi_check_count(struct MPI_ABI_Comm *c, MPI_Count n, const char *fn);
int mpi_check_buf(struct MPI_ABI_Comm *c, const void *buf, MPI_Count n, struct MPI_ABI_Datatype *t, const char *fn);
/* An info argument: MPI_INFO_NULL (*out = NULL) or a valid info. */
int mpi_check_info(struct MPI_ABI_Comm *c, MPI_Info h, const char *fn, struct MPI_ABI_Info **out);

/* ------------------------------------------------------------------ */
/* Communicators (comm.c), groups (group.c), attributes (attr.c)       */
/* ------------------------------------------------------------------ */
/* Wraps a new weft communicator (NULL: MPI_COMM_NULL) as an MPI handle,
 * inheriting parent's error handler. */
int mpi_comm_wrap(struct MPI_ABI_Comm *parent, weft_comm_t wc, MPI_Comm *out, const char *fn);
int mpi_comm_fill_world(struct MPI_ABI_Comm *c);
void mpi_comm_destroy(struct MPI_ABI_Comm *c);
/* A communicator lives while the program's handle or an operation on it
 * holds it: requests (pending or persistent), matched messages and
 * buffered sends take a reference (NULL and predefined ones are ignored).
 * MPI_Comm_free drops the program's; the last release frees the weft
 * communicator, once nothing is pending on it. */
void mpi_comm_ref(struct MPI_ABI_Comm *c);
void mpi_comm_unref(struct MPI_ABI_Comm *c);
struct MPI_ABI_Group *mpi_group_new(int size);
void mpi_group_unref(struct MPI_ABI_Group *g);
int mpi_attr_copy_all(int kind, void *oldobj, mpi_attr_t *from, void *newobj, mpi_attr_t **to, int *err);
int mpi_attr_delete_all(int kind, void *obj, mpi_attr_t **list);
void mpi_info_unref(struct MPI_ABI_Info *info);
struct MPI_ABI_Info *mpi_info_new(void);
int mpi_info_set(struct MPI_ABI_Info *info, const char *key, const char *val);
struct MPI_ABI_Info *mpi_info_dup(const struct MPI_ABI_Info *info);
void mpi_errh_ref(struct MPI_ABI_Errhandler *e);
void mpi_errh_unref(struct MPI_ABI_Errhandler *e);
void mpi_topo_free(mpi_topo_t *t);
mpi_topo_t *mpi_topo_dup(const mpi_topo_t *t);

/* ------------------------------------------------------------------ */
/* Datatypes (datatype.c) and reductions (op.c)                         */
/* ------------------------------------------------------------------ */
void mpi_dtype_init(void);
/* For messages: the type's name, or what kind of derived type it is. */
const char *mpi_dtype_name(const struct MPI_ABI_Datatype *t);
void mpi_dtype_ref(struct MPI_ABI_Datatype *t);
void mpi_dtype_unref(struct MPI_ABI_Datatype *t);
/* Bytes of packed data for count elements; -1 on overflow. */
static inline MPI_Count mpi_dtype_bytes(const struct MPI_ABI_Datatype *t, MPI_Count count)
{
    if (t->size && count > INT64_MAX / t->size) return -1;
    return t->size * count;
}
/* Packs count elements at buf into out (mpi_dtype_bytes(t, count) bytes). */
void mpi_pack(const void *buf, MPI_Count count, const struct MPI_ABI_Datatype *t, void *out);
/* Unpacks at most `bytes` bytes of in into count elements at buf. */
void mpi_unpack(const void *in, MPI_Count bytes, void *buf, MPI_Count count, const struct MPI_ABI_Datatype *t);
/* The basic elements in `bytes` bytes of packed t (MPI_UNDEFINED when it
 * ends inside a basic element). */
MPI_Count mpi_dtype_elements(const struct MPI_ABI_Datatype *t, MPI_Count bytes);
/* The start of a buffer's data when t is contiguous. */
static inline void *mpi_dtype_data(const void *buf, const struct MPI_ABI_Datatype *t)
{
    return (char *)buf + t->true_lb;
}
/* Span of count elements in memory: [buf + *lo, buf + *lo + *span). */
void mpi_dtype_span(const struct MPI_ABI_Datatype *t, MPI_Count count, MPI_Aint *lo, MPI_Aint *span);

/* Basic types: size and the C type an op computes in. */
typedef struct mpi_basic {
    const char *name;
    int size;
    int cls; /* 'i' signed int, 'u' unsigned, 'f' float, 'c' complex, 'l' logical/bool, 'b' byte, 'p' pair, 'x' other */
    weft_dtype_t wdt; /* or -1 */
} mpi_basic_t;
/* By basic index (handle value - 0x200 of a predefined non-pair type). */
const mpi_basic_t *mpi_basic_of(int basic);
/* The predefined type (handle value) every element of t is made of, for
 * reductions, or 0 when mixed; *units: how many per element. */
int mpi_dtype_unit(const struct MPI_ABI_Datatype *t, MPI_Count *units);

/* Reduction: inout[i] = in[i] op inout[i] for count elements of t (user
 * layout). Returns an MPI class (MPI_ERR_OP when op does not apply to t). */
int mpi_reduce_local(const void *in, void *inout, MPI_Count count, struct MPI_ABI_Datatype *t, struct MPI_ABI_Op *op);
/* Whether op on t can be done by weft itself; *wop receives weft's op. */
int mpi_op_native(const struct MPI_ABI_Op *op, const struct MPI_ABI_Datatype *t, weft_op_t *wop);
/* Whether op reduces t in a collective or MPI_Reduce_local: 0, or the
 * error raised on c naming fn. */
int mpi_op_check(struct MPI_ABI_Comm *c, struct MPI_ABI_Op *op, struct MPI_ABI_Datatype *t, const char *fn);

/* ------------------------------------------------------------------ */
/* Point to point and collectives                                      */
/* ------------------------------------------------------------------ */
static inline int mpi_tag_to_weft(int tag)
{
    return tag == MPI_ANY_TAG ? WEFT_ANY_TAG : tag;
}
int mpi_p2p_start(mpi_req_t *r); /* (re)starts a persistent send / receive */
int mpi_bbuf_attach(struct MPI_ABI_Comm *ec, mpi_bbuf_t *acct, void *buffer, MPI_Count size, const char *fn);
int mpi_bbuf_detach(struct MPI_ABI_Comm *ec, mpi_bbuf_t *acct, void *buffer_addr, MPI_Count *size, const char *fn);
int mpi_bbuf_flush(mpi_bbuf_t *acct);
/* A request that is complete already (for calls done at once). */
int mpi_done_request(struct MPI_ABI_Comm *c, MPI_Request *request, const char *fn);
void mpi_bsend_reap(void);
int mpi_bsend_detach_all(void);
/* The buffered sends on c to their end by the deadline (mpi_comm_drain). */
int mpi_bsend_drain(struct MPI_ABI_Comm *c, double deadline, const char *fn);
int mpi_coll_start(mpi_req_t *r);
void mpi_coll_free(struct mpi_coll *c);

void *mpi_malloc(size_t n);
int mpi_count_to_int(MPI_Count c, int *out);

#endif
