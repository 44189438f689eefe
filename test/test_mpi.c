/* The MPI standard ABI layer (mpi/): programs written to mpi.h, run as
 * forked ranks over the env bootstrap. Point to point, collectives against
 * straightforward references (native and here-computed reductions, user
 * ops in rank order, in place, derived datatypes, nonblocking and
 * persistent forms), datatypes, communicators, groups, attributes,
 * topologies; and bad input: null, garbage, freed and wrong-kind handles,
 * bad counts, ranks, tags, roots and ops give their error class under
 * MPI_ERRORS_RETURN (never a crash), abort naming the function under
 * MPI_ERRORS_ARE_FATAL, and unimplemented functions name themselves. */
#include "harness.h"
#include "mpi.h"

#include <complex.h>
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT 60.0

/* An MPI call that must succeed. */
#define M_OK(call)                                                                                                     \
    do {                                                                                                               \
        int m_rc_ = (call);                                                                                            \
        if (m_rc_ != MPI_SUCCESS) {                                                                                    \
            char m_s_[MPI_MAX_ERROR_STRING];                                                                           \
            int m_l_;                                                                                                  \
            MPI_Error_string(m_rc_, m_s_, &m_l_);                                                                      \
            TH_CHECK(0, "%s returned %d: %s", #call, m_rc_, m_s_);                                                     \
        }                                                                                                              \
    } while (0)

/* An MPI call that must fail with error class cls (under MPI_ERRORS_RETURN). */
#define M_FAILS(call, cls)                                                                                             \
    do {                                                                                                               \
        int m_rc_ = (call), m_c_ = -1;                                                                                 \
        TH_CHECK(m_rc_ != MPI_SUCCESS, "%s succeeded, expected class %d", #call, cls);                                 \
        MPI_Error_class(m_rc_, &m_c_);                                                                                 \
        TH_CHECK(m_c_ == (cls), "%s: class %d, expected %d (%s)", #call, m_c_, cls, #cls);                             \
    } while (0)

static void run(int n, th_body_fn body)
{
    th_result_t r = th_run(n, body, NULL, TIMEOUT, NULL);
    cr_assert_eq(r.failed, 0, "%d of %d ranks failed%s", r.failed, n, r.timed_out ? " (timed out)" : "");
}

static void init_return(int *rank, int *size)
{
    M_OK(MPI_Init(NULL, NULL));
    M_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    M_OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    M_OK(MPI_Comm_rank(MPI_COMM_WORLD, rank));
    M_OK(MPI_Comm_size(MPI_COMM_WORLD, size));
}

static int done(void)
{
    M_OK(MPI_Finalize());
    return 0;
}

/* ---- environment ------------------------------------------------------------ */

static int body_environment(int rank, int size, void *arg)
{
    (void)arg;
    int flag, me, n, v, sv, provided, len;
    M_OK(MPI_Initialized(&flag));
    TH_CHECK(!flag, "initialized before MPI_Init");
    M_OK(MPI_Get_version(&v, &sv));
    TH_CHECK(v == 5 && sv == 0, "version %d.%d", v, sv);
    M_OK(MPI_Abi_get_version(&v, &sv));
    TH_CHECK(v == 1 && sv == 0, "ABI version %d.%d", v, sv);
    M_OK(MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided));
    TH_CHECK(provided == MPI_THREAD_SERIALIZED, "provided %d", provided);
    M_OK(MPI_Query_thread(&provided));
    TH_CHECK(provided == MPI_THREAD_SERIALIZED, "query %d", provided);
    M_OK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    M_OK(MPI_Comm_size(MPI_COMM_WORLD, &n));
    TH_CHECK(me == rank && n == size, "rank %d/%d, expected %d/%d", me, n, rank, size);
    M_OK(MPI_Comm_rank(MPI_COMM_SELF, &me));
    M_OK(MPI_Comm_size(MPI_COMM_SELF, &n));
    TH_CHECK(me == 0 && n == 1, "self %d/%d", me, n);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING], host[MPI_MAX_PROCESSOR_NAME];
    M_OK(MPI_Get_library_version(lib, &len));
    TH_CHECK(strstr(lib, "weft") && len == (int)strlen(lib), "library version \"%s\"", lib);
    M_OK(MPI_Get_processor_name(host, &len));
    TH_CHECK(len > 0 && len == (int)strlen(host), "processor name");
    double t0 = MPI_Wtime(), t1 = MPI_Wtime();
    TH_CHECK(t1 >= t0 && MPI_Wtick() > 0 && MPI_Wtick() < 1, "Wtime / Wtick");
    int *tag_ub, *appnum, *usize;
    M_OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag));
    TH_CHECK(flag && *tag_ub >= 32767, "MPI_TAG_UB");
    M_OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag));
    TH_CHECK(flag && *appnum == 0, "MPI_APPNUM");
    M_OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &usize, &flag));
    TH_CHECK(flag && *usize == size, "MPI_UNIVERSE_SIZE");
    M_OK(MPI_Finalize());
    M_OK(MPI_Finalized(&flag));
    TH_CHECK(flag, "finalized");
    return 0;
}

Test(mpi, environment)
{
    run(1, body_environment);
    run(3, body_environment);
}

/* ---- bad input ---------------------------------------------------------------- */

static int body_bad_handles(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    int x = 0, n;
    MPI_Comm garbage = (MPI_Comm)(uintptr_t)0x7f0000001234, dup, stale;
    MPI_Comm heap = (MPI_Comm)malloc(64);
    /* communicators: null, garbage, heap memory, freed, a predefined value of another kind */
    M_FAILS(MPI_Comm_size(MPI_COMM_NULL, &n), MPI_ERR_COMM);
    M_FAILS(MPI_Comm_size(garbage, &n), MPI_ERR_COMM);
    M_FAILS(MPI_Comm_size(heap, &n), MPI_ERR_COMM);
    M_FAILS(MPI_Comm_size((MPI_Comm)MPI_INT, &n), MPI_ERR_COMM);
    M_FAILS(MPI_Send(&x, 1, MPI_INT, 0, 0, (MPI_Comm)MPI_SUM), MPI_ERR_COMM);
    M_OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    stale = dup;
    M_OK(MPI_Comm_free(&dup));
    TH_CHECK(dup == MPI_COMM_NULL, "freed handle not nulled");
    M_FAILS(MPI_Comm_rank(stale, &n), MPI_ERR_COMM);
    M_FAILS(MPI_Barrier(stale), MPI_ERR_COMM);
    M_FAILS(MPI_Comm_free(&stale), MPI_ERR_COMM);
    MPI_Comm world = MPI_COMM_WORLD;
    M_FAILS(MPI_Comm_free(&world), MPI_ERR_COMM);
    /* datatypes */
    MPI_Datatype t, tstale;
    M_FAILS(MPI_Send(&x, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    M_FAILS(MPI_Send(&x, 1, (MPI_Datatype)(uintptr_t)0x7f0000004321, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    M_FAILS(MPI_Send(&x, 1, (MPI_Datatype)MPI_COMM_WORLD, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    M_FAILS(MPI_Send(&x, 1, (MPI_Datatype)(uintptr_t)0x2ff, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    M_OK(MPI_Type_contiguous(2, MPI_INT, &t));
    M_FAILS(MPI_Send(&x, 1, t, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE); /* not committed */
    tstale = t;
    M_OK(MPI_Type_free(&t));
    M_FAILS(MPI_Type_commit(&tstale), MPI_ERR_TYPE);
    t = MPI_INT;
    M_FAILS(MPI_Type_free(&t), MPI_ERR_TYPE);
    /* counts, ranks, tags, roots */
    M_FAILS(MPI_Send(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    M_FAILS(MPI_Send_c(&x, INT64_MAX / 2, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    M_FAILS(MPI_Send(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    M_FAILS(MPI_Send(&x, 1, MPI_INT, -7, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    M_FAILS(MPI_Recv(&x, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), MPI_ERR_RANK);
    M_FAILS(MPI_Send(&x, 1, MPI_INT, 0, -5, MPI_COMM_WORLD), MPI_ERR_TAG);
    M_FAILS(MPI_Send(&x, 1, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD), MPI_ERR_TAG);
    M_FAILS(MPI_Bcast(&x, 1, MPI_INT, size, MPI_COMM_WORLD), MPI_ERR_ROOT);
    M_FAILS(MPI_Send(NULL, 3, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    /* ops */
    double d = 1, e;
    M_FAILS(MPI_Allreduce(&x, &n, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD), MPI_ERR_OP);
    M_FAILS(MPI_Allreduce(&x, &n, 1, MPI_INT, (MPI_Op)(uintptr_t)0x7f00000a000, MPI_COMM_WORLD), MPI_ERR_OP);
    M_FAILS(MPI_Allreduce(&d, &e, 1, MPI_DOUBLE, MPI_LAND, MPI_COMM_WORLD), MPI_ERR_OP);
    M_FAILS(MPI_Allreduce(&d, &e, 1, MPI_DOUBLE, MPI_BXOR, MPI_COMM_WORLD), MPI_ERR_OP);
    M_FAILS(MPI_Allreduce(&x, &n, 1, MPI_INT, MPI_MINLOC, MPI_COMM_WORLD), MPI_ERR_OP);
    MPI_Op op = MPI_SUM;
    M_FAILS(MPI_Op_free(&op), MPI_ERR_OP);
    /* requests */
    MPI_Request req = (MPI_Request)(uintptr_t)0x7f0000009990, kept;
    M_FAILS(MPI_Wait(&req, MPI_STATUS_IGNORE), MPI_ERR_REQUEST);
    M_OK(MPI_Isend(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &req));
    kept = req;
    M_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    TH_CHECK(req == MPI_REQUEST_NULL, "completed request not nulled");
    M_FAILS(MPI_Wait(&kept, MPI_STATUS_IGNORE), MPI_ERR_REQUEST);
    MPI_Request two[2] = {MPI_REQUEST_NULL, (MPI_Request)(uintptr_t)0x1234};
    M_FAILS(MPI_Waitall(2, two, MPI_STATUSES_IGNORE), MPI_ERR_REQUEST);
    /* groups, info, error handlers, keyvals */
    MPI_Group g = (MPI_Group)(uintptr_t)0x7f0000005550;
    M_FAILS(MPI_Group_size(g, &n), MPI_ERR_GROUP);
    M_FAILS(MPI_Group_size(MPI_GROUP_NULL, &n), MPI_ERR_GROUP);
    M_FAILS(MPI_Info_set((MPI_Info)(uintptr_t)0x7f0000006660, "a", "b"), MPI_ERR_INFO);
    M_FAILS(MPI_Info_set(MPI_INFO_NULL, "a", "b"), MPI_ERR_INFO);
    M_FAILS(MPI_Comm_set_errhandler(MPI_COMM_WORLD, (MPI_Errhandler)(uintptr_t)0x7f0000007770), MPI_ERR_ERRHANDLER);
    void *v;
    M_FAILS(MPI_Comm_get_attr(MPI_COMM_WORLD, 123456, &v, &n), MPI_ERR_KEYVAL);
    free(heap);
    /* more live requests than one slab chunk holds: all valid, all converted */
    enum { MANY = 300000 };
    MPI_Request *many = malloc(sizeof(MPI_Request) * MANY);
    for (int i = 0; i < MANY; i++)
        M_OK(MPI_Isend(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &many[i]));
    TH_CHECK(MPI_Request_fromint(MPI_Request_toint(many[MANY - 1])) == many[MANY - 1], "toint / fromint");
    M_OK(MPI_Waitall(MANY, many, MPI_STATUSES_IGNORE));
    TH_CHECK(many[MANY - 1] == MPI_REQUEST_NULL, "waitall");
    free(many);
    return done();
}

Test(mpi, bad_handles_return_their_class)
{
    run(2, body_bad_handles);
}

static int body_unsupported(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Win win;
    char s[MPI_MAX_ERROR_STRING];
    int len, x;
    M_FAILS(MPI_Win_create(&x, sizeof(x), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win), MPI_ERR_UNSUPPORTED_OPERATION);
    int rc = MPI_Win_create(&x, sizeof(x), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    M_OK(MPI_Error_string(rc, s, &len));
    TH_CHECK(strstr(s, "MPI_Win_create") != NULL, "message \"%s\" does not name the function", s);
    MPI_File fh;
    M_FAILS(MPI_File_open(MPI_COMM_WORLD, "x", MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), MPI_ERR_UNSUPPORTED_OPERATION);
    /* an error's code carries what went wrong */
    rc = MPI_Send(&x, 1, MPI_INT, 99, 0, MPI_COMM_WORLD);
    M_OK(MPI_Error_string(rc, s, &len));
    TH_CHECK(strstr(s, "MPI_Send") && strstr(s, "99"), "message \"%s\"", s);
    return done();
}

Test(mpi, unsupported_functions_name_themselves)
{
    run(1, body_unsupported);
}

/* An error code keeps its class and its message however many errors of
 * other classes come after it (the codes' space is 4,096 wide). */
static int body_old_codes(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    int x = 0, cls, len;
    char s[MPI_MAX_ERROR_STRING];
    int early = MPI_Send(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD);
    M_OK(MPI_Error_class(early, &cls));
    TH_CHECK(cls == MPI_ERR_COUNT, "class %d", cls);
    for (int i = 0; i < 5000; i++) {
        int rc = MPI_Send(&x, 1, MPI_INT, 99, 0, MPI_COMM_WORLD);
        TH_CHECK(rc != MPI_SUCCESS, "a send to rank 99 succeeded");
    }
    M_OK(MPI_Error_class(early, &cls));
    TH_CHECK(cls == MPI_ERR_COUNT, "after 5,000 other errors the first one's class is %d, not MPI_ERR_COUNT", cls);
    M_OK(MPI_Error_string(early, s, &len));
    TH_CHECK(strstr(s, "MPI_Send") && strstr(s, "-1"), "after 5,000 other errors the first one says \"%s\"", s);
    return done();
}

Test(mpi, old_error_codes_keep_their_class)
{
    run(1, body_old_codes);
}

/* Under MPI_ERRORS_ARE_FATAL (the default) an error aborts the job and
 * says which function failed. */
static char fatal_log[256];

static int body_fatal(int rank, int size, void *arg)
{
    (void)arg, (void)rank, (void)size;
    FILE *f = freopen(fatal_log, "w", stderr);
    (void)f;
    MPI_Init(NULL, NULL);
    int n;
    MPI_Comm_size(MPI_COMM_NULL, &n);
    return 0; /* not reached */
}

Test(mpi, errors_are_fatal_by_default_and_name_the_function)
{
    snprintf(fatal_log, sizeof(fatal_log), "%s/weft-mpi-fatal-%d.log", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    th_result_t r = th_run(1, body_fatal, NULL, TIMEOUT, NULL);
    cr_assert_neq(r.exit_code[0], 0, "the rank did not abort");
    FILE *f = fopen(fatal_log, "r");
    char text[4096] = "";
    if (f) {
        size_t n = fread(text, 1, sizeof(text) - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    unlink(fatal_log);
    cr_assert(strstr(text, "MPI_Comm_size") && strstr(text, "MPI_ERR_COMM"), "stderr: %s", text);
}

static int handler_calls, handler_code;
static void my_handler(MPI_Comm *comm, int *code, ...)
{
    (void)comm;
    handler_calls++;
    handler_code = *code;
}

static int body_user_handler(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Errhandler eh, got;
    MPI_Comm c;
    M_OK(MPI_Comm_create_errhandler(my_handler, &eh));
    M_OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    M_OK(MPI_Comm_set_errhandler(c, eh));
    M_OK(MPI_Errhandler_free(&eh));
    int x = 0, cls;
    int rc = MPI_Send(&x, 1, MPI_INT, size + 1, 0, c);
    TH_CHECK(handler_calls == 1 && handler_code == rc, "handler %d calls, code %d vs %d", handler_calls, handler_code,
             rc);
    MPI_Error_class(rc, &cls);
    TH_CHECK(cls == MPI_ERR_RANK, "class %d", cls);
    M_OK(MPI_Comm_call_errhandler(c, MPI_ERR_OTHER));
    TH_CHECK(handler_calls == 2 && handler_code == MPI_ERR_OTHER, "call_errhandler");
    M_OK(MPI_Comm_get_errhandler(c, &got));
    M_OK(MPI_Errhandler_free(&got));
    int ecls, ecode;
    M_OK(MPI_Add_error_class(&ecls));
    M_OK(MPI_Add_error_code(ecls, &ecode));
    M_OK(MPI_Add_error_string(ecode, "my code"));
    char s[MPI_MAX_ERROR_STRING];
    int len;
    M_OK(MPI_Error_string(ecode, s, &len));
    M_OK(MPI_Error_class(ecode, &cls));
    TH_CHECK(!strcmp(s, "my code") && cls == ecls, "added code: \"%s\" class %d", s, cls);
    M_OK(MPI_Comm_free(&c));
    return done();
}

Test(mpi, user_error_handlers_and_codes)
{
    run(2, body_user_handler);
}

/* The message of an error code (for checks on what it says). */
static const char *message_of(int code)
{
    static char s[MPI_MAX_ERROR_STRING];
    int len;
    if (MPI_Error_string(code, s, &len) != MPI_SUCCESS) s[0] = '\0';
    return s;
}

/* A request twice in an array: completing the first copy would free the
 * request under the second (MPI calls it erroneous); an error naming both. */
static int body_duplicate_requests(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    int x = 7, y = -1, flag, outcount, idx[2];
    MPI_Request rs[2];
    M_OK(MPI_Irecv(&y, 1, MPI_INT, rank, 0, MPI_COMM_WORLD, &rs[0]));
    rs[1] = rs[0];
    M_OK(MPI_Send(&x, 1, MPI_INT, rank, 0, MPI_COMM_WORLD));
    M_FAILS(MPI_Waitall(2, rs, MPI_STATUSES_IGNORE), MPI_ERR_REQUEST);
    M_FAILS(MPI_Testall(2, rs, &flag, MPI_STATUSES_IGNORE), MPI_ERR_REQUEST);
    M_FAILS(MPI_Waitsome(2, rs, &outcount, idx, MPI_STATUSES_IGNORE), MPI_ERR_REQUEST);
    const char *s = message_of(MPI_Waitany(2, rs, &idx[0], MPI_STATUS_IGNORE));
    TH_CHECK(strstr(s, "MPI_Waitany") && strstr(s, "0 and 1"), "message \"%s\"", s);
    /* the request itself is untouched */
    M_OK(MPI_Wait(&rs[0], MPI_STATUS_IGNORE));
    TH_CHECK(y == 7, "received %d", y);
    return done();
}

Test(mpi, a_request_twice_in_an_array_is_an_error)
{
    run(1, body_duplicate_requests);
}

/* A null or inactive request completes with MPI's empty status, whose
 * error field is MPI_SUCCESS. */
static int body_empty_status(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Request r = MPI_REQUEST_NULL, p;
    MPI_Status st;
    int flag, idx, x;
#define EMPTY(call)                                                                                                    \
    do {                                                                                                               \
        memset(&st, 0x41, sizeof(st));                                                                                 \
        M_OK(call);                                                                                                    \
        TH_CHECK(st.MPI_ERROR == MPI_SUCCESS && st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG,          \
                 "%s: error %d source %d tag %d", #call, st.MPI_ERROR, st.MPI_SOURCE, st.MPI_TAG);                     \
    } while (0)
    EMPTY(MPI_Wait(&r, &st));
    EMPTY(MPI_Test(&r, &flag, &st));
    EMPTY(MPI_Waitany(1, &r, &idx, &st));
    M_OK(MPI_Recv_init(&x, 1, MPI_INT, rank, 0, MPI_COMM_WORLD, &p));
    EMPTY(MPI_Wait(&p, &st));
    EMPTY(MPI_Request_get_status(p, &flag, &st));
#undef EMPTY
    M_OK(MPI_Request_free(&p));
    return done();
}

Test(mpi, null_and_inactive_requests_give_the_empty_status)
{
    run(1, body_empty_status);
}

/* MPI_REPLACE and MPI_NO_OP are one-sided communication's ops, not
 * reductions'. */
static int body_rma_ops(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    int x = 1, y = -1;
    MPI_Request r;
    M_FAILS(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_REPLACE, MPI_COMM_WORLD), MPI_ERR_OP);
    M_FAILS(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_NO_OP, MPI_COMM_WORLD), MPI_ERR_OP);
    M_FAILS(MPI_Ireduce(&x, &y, 1, MPI_INT, MPI_REPLACE, 0, MPI_COMM_WORLD, &r), MPI_ERR_OP);
    M_FAILS(MPI_Reduce_local(&x, &y, 1, MPI_INT, MPI_REPLACE), MPI_ERR_OP);
    M_FAILS(MPI_Reduce_local(&x, &y, 1, MPI_INT, MPI_NO_OP), MPI_ERR_OP);
    TH_CHECK(y == -1, "the result buffer was written (%d)", y);
    TH_CHECK(strstr(message_of(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_REPLACE, MPI_COMM_WORLD)), "MPI_REPLACE"),
             "the message does not name the op");
    return done();
}

Test(mpi, replace_and_no_op_are_not_reductions)
{
    run(1, body_rma_ops);
}

/* One buffer as both the send and the receive buffer of a collective:
 * MPI_ERR_BUFFER (MPI_IN_PLACE is how to say that), unless nothing moves. */
static int body_aliased_buffers(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    int buf[4] = {1, 2, 3, 4}, one[1] = {1};
    M_FAILS(MPI_Allreduce(buf, buf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    M_FAILS(MPI_Reduce(buf, buf, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    M_FAILS(MPI_Reduce_scatter(buf, buf, one, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    M_FAILS(MPI_Allgather(buf, 1, MPI_INT, buf, 1, MPI_INT, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    M_FAILS(MPI_Gather(buf, 1, MPI_INT, buf, 1, MPI_INT, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    M_FAILS(MPI_Scatter(buf, 1, MPI_INT, buf, 1, MPI_INT, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    int zero[1] = {0};
    M_FAILS(MPI_Gatherv(buf, 1, MPI_INT, buf, one, zero, MPI_INT, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    M_FAILS(MPI_Alltoallv(buf, one, zero, MPI_INT, buf, one, zero, MPI_INT, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    TH_CHECK(buf[0] == 1, "the buffer was written (%d)", buf[0]);
    M_OK(MPI_Allreduce(buf, buf, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    M_OK(MPI_Allreduce(MPI_IN_PLACE, buf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    return done();
}

Test(mpi, aliased_collective_buffers_are_an_error)
{
    run(1, body_aliased_buffers);
}

/* A truncated matched receive says how large the message was. */
static int body_mrecv_truncation(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    int v[4] = {5, 6, 7, 8}, got[4] = {0}, count;
    MPI_Message m;
    MPI_Status st;
    MPI_Request r;
    M_OK(MPI_Isend(v, 4, MPI_INT, rank, 3, MPI_COMM_WORLD, &r));
    M_OK(MPI_Mprobe(rank, 3, MPI_COMM_WORLD, &m, &st));
    int rc = MPI_Mrecv(got, 2, MPI_INT, &m, &st), cls = -1;
    MPI_Error_class(rc, &cls);
    const char *s = message_of(rc);
    TH_CHECK(cls == MPI_ERR_TRUNCATE && strstr(s, "16 bytes") && strstr(s, "8 bytes"), "class %d, \"%s\"", cls, s);
    M_OK(MPI_Get_count(&st, MPI_INT, &count));
    TH_CHECK(count == 2 && got[1] == 6 && got[2] == 0, "count %d, got %d %d", count, got[1], got[2]);
    M_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    return done();
}

Test(mpi, mrecv_truncation_names_the_message_size)
{
    run(1, body_mrecv_truncation);
}

/* A derived type without a name is named by its kind in messages. */
static int body_unnamed_type(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Datatype t;
    int bl[2] = {1, 1};
    MPI_Aint d[2] = {0, 8};
    MPI_Datatype ts[2] = {MPI_INT, MPI_DOUBLE};
    char x[16] = {0}, y[16];
    M_OK(MPI_Type_create_struct(2, bl, d, ts, &t));
    M_OK(MPI_Type_commit(&t));
    int rc = MPI_Allreduce(x, y, 1, t, MPI_SUM, MPI_COMM_WORLD), cls = -1;
    MPI_Error_class(rc, &cls);
    const char *s = message_of(rc);
    TH_CHECK(cls == MPI_ERR_OP && strstr(s, "struct"), "class %d, \"%s\"", cls, s);
    s = message_of(MPI_Reduce_local(x, y, 1, t, MPI_MAX));
    TH_CHECK(strstr(s, "struct"), "\"%s\"", s);
    M_OK(MPI_Type_free(&t));
    return done();
}

Test(mpi, unnamed_derived_types_are_named_by_kind)
{
    run(1, body_unnamed_type);
}

static int body_group_stride(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Group g, n;
    int zero_stride[1][3] = {{0, 0, 0}};
    M_OK(MPI_Comm_group(MPI_COMM_WORLD, &g));
    M_FAILS(MPI_Group_range_incl(g, 1, zero_stride, &n), MPI_ERR_ARG);
    M_FAILS(MPI_Group_range_excl(g, 1, zero_stride, &n), MPI_ERR_ARG);
    M_OK(MPI_Group_free(&g));
    return done();
}

Test(mpi, a_group_range_of_stride_zero_is_an_argument_error)
{
    run(1, body_group_stride);
}

/* A communicator constructor that fails leaves MPI_COMM_NULL. */
static int body_failed_constructors(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Comm c = MPI_COMM_WORLD;
    M_FAILS(MPI_Comm_split_type(MPI_COMM_WORLD, 12345, 0, MPI_INFO_NULL, &c), MPI_ERR_ARG);
    TH_CHECK(c == MPI_COMM_NULL, "split_type left %p", (void *)c);
    c = MPI_COMM_WORLD;
    M_FAILS(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, (MPI_Info)(uintptr_t)0x7f0000006660, &c),
            MPI_ERR_INFO);
    TH_CHECK(c == MPI_COMM_NULL, "split_type with a bad info left %p", (void *)c);
    c = MPI_COMM_WORLD;
    int dims[2] = {size + 1, 1}, periods[2] = {0, 0};
    M_FAILS(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &c), MPI_ERR_DIMS);
    TH_CHECK(c == MPI_COMM_NULL, "cart_create left %p", (void *)c);
    c = MPI_COMM_WORLD;
    M_FAILS(MPI_Cart_create(MPI_COMM_WORLD, -1, dims, periods, 0, &c), MPI_ERR_ARG);
    TH_CHECK(c == MPI_COMM_NULL, "cart_create (ndims -1) left %p", (void *)c);
    c = MPI_COMM_WORLD;
    M_FAILS(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, -1, NULL, MPI_UNWEIGHTED, 0, NULL, MPI_UNWEIGHTED,
                                           MPI_INFO_NULL, 0, &c),
            MPI_ERR_ARG);
    TH_CHECK(c == MPI_COMM_NULL, "dist_graph_create_adjacent left %p", (void *)c);
    return done();
}

Test(mpi, failed_communicator_constructors_leave_comm_null)
{
    run(1, body_failed_constructors);
}

/* Persistent collectives check their info as other calls do. */
static int body_persistent_info(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Info bad = (MPI_Info)(uintptr_t)0x7f0000006660, info, freed;
    MPI_Request r;
    int x = 1, y;
    M_OK(MPI_Info_create(&info));
    freed = info;
    M_OK(MPI_Info_free(&info));
    M_FAILS(MPI_Barrier_init(MPI_COMM_WORLD, bad, &r), MPI_ERR_INFO);
    M_FAILS(MPI_Bcast_init(&x, 1, MPI_INT, 0, MPI_COMM_WORLD, bad, &r), MPI_ERR_INFO);
    M_FAILS(MPI_Allreduce_init(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, bad, &r), MPI_ERR_INFO);
    M_FAILS(MPI_Alltoallv_init_c(&x, NULL, NULL, MPI_INT, &y, NULL, NULL, MPI_INT, MPI_COMM_WORLD, freed, &r),
            MPI_ERR_INFO);
    M_FAILS(MPI_Neighbor_allgather_init(&x, 1, MPI_INT, &y, 1, MPI_INT, MPI_COMM_WORLD, bad, &r), MPI_ERR_INFO);
    MPI_Info ok;
    M_OK(MPI_Info_create(&ok));
    M_OK(MPI_Bcast_init(&x, 1, MPI_INT, 0, MPI_COMM_WORLD, ok, &r));
    M_OK(MPI_Request_free(&r));
    M_OK(MPI_Info_free(&ok));
    return done();
}

Test(mpi, persistent_collectives_check_their_info)
{
    run(1, body_persistent_info);
}

/* MPI_Session_init's errors go to the handler it is given (there is no
 * session yet): before MPI_Init, MPI_ERRORS_RETURN returns them. */
static int session_handler_calls;
static void session_handler(MPI_Session *s, int *code, ...)
{
    (void)s, (void)code;
    session_handler_calls++;
}

static int body_session_init_errors(int rank, int size, void *arg)
{
    (void)arg, (void)rank, (void)size;
    MPI_Session s;
    MPI_Errhandler eh, ceh;
    M_FAILS(MPI_Session_init((MPI_Info)(uintptr_t)0x7f0000006660, MPI_ERRORS_RETURN, &s), MPI_ERR_INFO);
    M_FAILS(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, NULL), MPI_ERR_ARG);
    M_OK(MPI_Session_create_errhandler(session_handler, &eh));
    M_FAILS(MPI_Session_init(MPI_INFO_NULL, eh, NULL), MPI_ERR_ARG);
    TH_CHECK(session_handler_calls == 1, "the session's handler ran %d times", session_handler_calls);
    M_OK(MPI_Session_init(MPI_INFO_NULL, eh, &s));
    M_OK(MPI_Comm_create_errhandler(my_handler, &ceh));
    M_FAILS(MPI_Session_set_errhandler(s, ceh), MPI_ERR_ERRHANDLER);
    TH_CHECK(session_handler_calls == 2, "the session's handler ran %d times", session_handler_calls);
    M_OK(MPI_Errhandler_free(&ceh));
    M_OK(MPI_Errhandler_free(&eh));
    M_OK(MPI_Session_finalize(&s));
    return 0;
}

Test(mpi, session_init_errors_go_to_the_handler_given)
{
    run(1, body_session_init_errors);
}

/* ---- point to point --------------------------------------------------------------- */

static int body_p2p(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size, count;
    int out[16], in[16];
    MPI_Status st;
    for (int i = 0; i < 16; i++)
        out[i] = rank * 100 + i;
    /* send / recv with wildcards and status (on a communicator of their own:
     * the wildcards would match the ring's messages on the world) */
    MPI_Comm wild;
    M_OK(MPI_Comm_dup(MPI_COMM_WORLD, &wild));
    if (rank == 0) {
        for (int r = 1; r < size; r++) {
            M_OK(MPI_Recv(in, 16, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, wild, &st));
            M_OK(MPI_Get_count(&st, MPI_INT, &count));
            TH_CHECK(st.MPI_TAG == st.MPI_SOURCE + 10 && count == st.MPI_SOURCE && in[0] == st.MPI_SOURCE * 100,
                     "status source %d tag %d count %d", st.MPI_SOURCE, st.MPI_TAG, count);
        }
    } else {
        M_OK(MPI_Send(out, rank, MPI_INT, 0, rank + 10, wild));
    }
    M_OK(MPI_Comm_free(&wild));
    /* MPI_PROC_NULL */
    M_OK(MPI_Recv(in, 4, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
    M_OK(MPI_Get_count(&st, MPI_INT, &count));
    TH_CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG && count == 0, "PROC_NULL status");
    M_OK(MPI_Send(out, 4, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
    /* sendrecv around the ring, and in place */
    M_OK(MPI_Sendrecv(out, 16, MPI_INT, right, 1, in, 16, MPI_INT, left, 1, MPI_COMM_WORLD, &st));
    TH_CHECK(in[5] == left * 100 + 5 && st.MPI_SOURCE == left, "sendrecv");
    memcpy(in, out, sizeof(in));
    M_OK(MPI_Sendrecv_replace(in, 16, MPI_INT, right, 2, left, 2, MPI_COMM_WORLD, &st));
    TH_CHECK(in[15] == left * 100 + 15, "sendrecv_replace");
    /* truncation */
    if (size > 1) {
        if (rank == 1) M_OK(MPI_Send(out, 8, MPI_INT, 0, 3, MPI_COMM_WORLD));
        if (rank == 0) M_FAILS(MPI_Recv(in, 4, MPI_INT, 1, 3, MPI_COMM_WORLD, &st), MPI_ERR_TRUNCATE);
    }
    /* a strided datatype: every other int, sent and received */
    MPI_Datatype vec;
    M_OK(MPI_Type_vector(4, 1, 2, MPI_INT, &vec));
    M_OK(MPI_Type_commit(&vec));
    for (int i = 0; i < 16; i++)
        in[i] = -1;
    M_OK(MPI_Sendrecv(out, 2, vec, right, 4, in, 8, MPI_INT, left, 4, MPI_COMM_WORLD, &st));
    /* the second element starts one extent (7 ints) after the first */
    for (int i = 0; i < 8; i++)
        TH_CHECK(in[i] == left * 100 + (i < 4 ? 2 * i : 7 + 2 * (i - 4)), "vector send: in[%d] = %d", i, in[i]);
    for (int i = 0; i < 16; i++)
        in[i] = -1;
    M_OK(MPI_Sendrecv(out, 8, MPI_INT, right, 5, in, 2, vec, left, 5, MPI_COMM_WORLD, &st));
    int elems;
    M_OK(MPI_Get_count(&st, vec, &count));
    M_OK(MPI_Get_elements(&st, vec, &elems));
    TH_CHECK(elems == 8, "elements %d", elems);
    static const int slot[16] = {0, -1, 1, -1, 2, -1, 3, 4, -1, 5, -1, 6, -1, 7, -1, -1};
    for (int i = 0; i < 16; i++)
        TH_CHECK(in[i] == (slot[i] < 0 ? -1 : left * 100 + slot[i]), "vector recv: in[%d] = %d", i, in[i]);
    TH_CHECK(count == 2, "count of vectors %d", count);
    M_OK(MPI_Type_free(&vec));
    return done();
}

Test(mpi, point_to_point)
{
    run(1, body_p2p);
    run(3, body_p2p);
}

static int body_p2p_modes(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    int x = rank, y = -1, flag;
    MPI_Status st;
    MPI_Request r, rr;
    /* synchronous mode: an issend to self stays pending until it is received */
    M_OK(MPI_Issend(&x, 1, MPI_INT, rank, 9, MPI_COMM_WORLD, &r));
    M_OK(MPI_Probe(MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &st));
    TH_CHECK(st.MPI_SOURCE == rank, "probe source %d", st.MPI_SOURCE);
    M_OK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
    TH_CHECK(!flag, "issend completed before its receive was posted");
    M_OK(MPI_Recv(&y, 1, MPI_INT, rank, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    M_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    TH_CHECK(y == rank, "issend data");
    /* buffered mode: needs an attached buffer, accounts for it */
    M_FAILS(MPI_Bsend(&x, 1, MPI_INT, rank, 1, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    int bsize = 2 * (MPI_BSEND_OVERHEAD + (int)sizeof(int));
    char *buf = malloc((size_t)bsize), *back;
    M_OK(MPI_Buffer_attach(buf, bsize));
    M_OK(MPI_Bsend(&x, 1, MPI_INT, rank, 1, MPI_COMM_WORLD));
    M_OK(MPI_Bsend(&x, 1, MPI_INT, rank, 2, MPI_COMM_WORLD));
    int big[300] = {0};
    M_FAILS(MPI_Bsend(big, 300, MPI_INT, rank, 3, MPI_COMM_WORLD), MPI_ERR_BUFFER); /* more than the buffer */
    M_OK(MPI_Recv(&y, 1, MPI_INT, rank, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    M_OK(MPI_Recv(&y, 1, MPI_INT, rank, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    M_OK(MPI_Buffer_detach(&back, &bsize));
    TH_CHECK(back == buf, "detached buffer");
    free(buf);
    /* matched probe: the message is this receive's, whatever is posted after */
    MPI_Message m;
    x = 100 + rank;
    M_OK(MPI_Isend(&x, 1, MPI_INT, rank, 4, MPI_COMM_WORLD, &r));
    M_OK(MPI_Mprobe(rank, 4, MPI_COMM_WORLD, &m, &st));
    M_OK(MPI_Irecv(&y, 1, MPI_INT, MPI_ANY_SOURCE, 4, MPI_COMM_WORLD, &rr));
    int z = -1;
    M_OK(MPI_Mrecv(&z, 1, MPI_INT, &m, &st));
    TH_CHECK(z == 100 + rank && m == MPI_MESSAGE_NULL, "mrecv %d", z);
    M_OK(MPI_Test(&rr, &flag, MPI_STATUS_IGNORE));
    TH_CHECK(!flag, "the later receive took the matched message");
    M_OK(MPI_Cancel(&rr));
    M_OK(MPI_Wait(&rr, &st));
    M_OK(MPI_Test_cancelled(&st, &flag));
    TH_CHECK(flag, "receive not cancelled");
    M_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    /* persistent requests, started three times */
    int right = (rank + 1) % size, left = (rank + size - 1) % size, in = -1, out;
    MPI_Request pr[2];
    M_OK(MPI_Recv_init(&in, 1, MPI_INT, left, 5, MPI_COMM_WORLD, &pr[0]));
    M_OK(MPI_Send_init(&out, 1, MPI_INT, right, 5, MPI_COMM_WORLD, &pr[1]));
    for (int k = 0; k < 3; k++) {
        out = rank * 10 + k;
        M_OK(MPI_Startall(2, pr));
        M_OK(MPI_Waitall(2, pr, MPI_STATUSES_IGNORE));
        TH_CHECK(in == left * 10 + k, "persistent round %d: %d", k, in);
        TH_CHECK(pr[0] != MPI_REQUEST_NULL, "persistent request freed by its wait");
    }
    M_OK(MPI_Request_free(&pr[0]));
    M_OK(MPI_Request_free(&pr[1]));
    /* waitany / waitsome / testall over mixed requests */
    int vals[4] = {-1, -1, -1, -1}, idx, outcount, indices[4];
    MPI_Request q[4] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    M_OK(MPI_Irecv(&vals[1], 1, MPI_INT, left, 6, MPI_COMM_WORLD, &q[1]));
    M_OK(MPI_Irecv(&vals[3], 1, MPI_INT, left, 7, MPI_COMM_WORLD, &q[3]));
    M_OK(MPI_Send(&rank, 1, MPI_INT, right, 7, MPI_COMM_WORLD));
    M_OK(MPI_Waitany(4, q, &idx, &st));
    TH_CHECK(idx == 3 && vals[3] == left && st.MPI_TAG == 7, "waitany index %d", idx);
    /* Tag 6 only once every rank's waitany returned: with weft's progress
     * thread both receives may complete before a late rank's waitany, which
     * then may return either (MPI promises any completed one). */
    M_OK(MPI_Barrier(MPI_COMM_WORLD));
    M_OK(MPI_Send(&rank, 1, MPI_INT, right, 6, MPI_COMM_WORLD));
    M_OK(MPI_Waitsome(4, q, &outcount, indices, MPI_STATUSES_IGNORE));
    TH_CHECK(outcount == 1 && indices[0] == 1 && vals[1] == left, "waitsome %d", outcount);
    M_OK(MPI_Waitsome(4, q, &outcount, indices, MPI_STATUSES_IGNORE));
    TH_CHECK(outcount == MPI_UNDEFINED, "waitsome on nulls: %d", outcount);
    M_OK(MPI_Testall(4, q, &flag, MPI_STATUSES_IGNORE));
    TH_CHECK(flag, "testall on nulls");
    /* a generalized request completes when the program says so */
    MPI_Request g;
    M_OK(MPI_Grequest_start(NULL, NULL, NULL, NULL, &g));
    M_OK(MPI_Test(&g, &flag, MPI_STATUS_IGNORE));
    TH_CHECK(!flag, "grequest complete early");
    M_OK(MPI_Grequest_complete(g));
    M_OK(MPI_Wait(&g, MPI_STATUS_IGNORE));
    return done();
}

Test(mpi, modes_probes_persistent_and_request_arrays)
{
    run(2, body_p2p_modes);
}

/* ---- collectives ------------------------------------------------------------------ */

/* A non-commutative op on int pairs (a, b) meaning the affine map x -> a*x + b:
 * composing in rank order is checkable. */
static void compose(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    int *a = in, *b = inout;
    for (int i = 0; i < *len; i++) {
        /* inout = in o inout: x -> a1 * (a2 * x + b2) + b1 */
        int a1 = a[2 * i], b1 = a[2 * i + 1], a2 = b[2 * i], b2 = b[2 * i + 1];
        b[2 * i] = a1 * a2;
        b[2 * i + 1] = a1 * b2 + b1;
    }
}

static void compose_ref(int lo, int hi, int *a, int *b)
{
    /* rank r's map: x -> (r + 2) x + r; the result is map_lo o ... o map_hi */
    *a = 1, *b = 0;
    for (int r = hi; r >= lo; r--) {
        int ra = r + 2, rb = r;
        *b = ra * *b + rb;
        *a = ra * *a;
    }
}

static int body_collectives(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    enum { N = 5 };
    int in[N], out[N], all[64 * N];
    for (int i = 0; i < N; i++)
        in[i] = rank * 10 + i;
    /* native reductions (weft's) */
    M_OK(MPI_Allreduce(in, out, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++)
        TH_CHECK(out[i] == 10 * size * (size - 1) / 2 + size * i, "allreduce sum [%d] = %d", i, out[i]);
    double d = rank + 0.5, dmax;
    M_OK(MPI_Allreduce(&d, &dmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    TH_CHECK(dmax == size - 0.5, "allreduce max %g", dmax);
    memcpy(out, in, sizeof(in));
    M_OK(MPI_Allreduce(MPI_IN_PLACE, out, N, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    TH_CHECK(out[2] == 2, "in-place min %d", out[2]);
    /* reductions done here: MINLOC on a padded pair, logical and on bool,
     * complex sums, a user op in rank order */
    struct {
        double v;
        int i;
    } p = {(double)((rank * 7) % size), rank}, pr;
    M_OK(MPI_Allreduce(&p, &pr, 1, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
    TH_CHECK(pr.v == 0 && pr.i == 0, "minloc (%g, %d)", pr.v, pr.i);
    M_OK(MPI_Allreduce(&p, &pr, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
    TH_CHECK(pr.v == size - 1, "maxloc (%g, %d)", pr.v, pr.i);
    bool b = rank != 1, ball;
    M_OK(MPI_Allreduce(&b, &ball, 1, MPI_C_BOOL, MPI_LAND, MPI_COMM_WORLD));
    TH_CHECK(ball == (size == 1), "land %d", ball);
    double _Complex z = rank + 1.0 * I, zs;
    M_OK(MPI_Allreduce(&z, &zs, 1, MPI_C_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
    TH_CHECK(creal(zs) == size * (size - 1) / 2.0 && cimag(zs) == size, "complex sum");
    MPI_Op op;
    MPI_Datatype pair;
    M_OK(MPI_Op_create(compose, 0, &op));
    M_OK(MPI_Type_contiguous(2, MPI_INT, &pair));
    M_OK(MPI_Type_commit(&pair));
    int mine[2] = {rank + 2, rank}, res[2], ea, eb;
    M_OK(MPI_Allreduce(mine, res, 1, pair, op, MPI_COMM_WORLD));
    compose_ref(0, size - 1, &ea, &eb);
    TH_CHECK(res[0] == ea && res[1] == eb, "user op allreduce (%d, %d) vs (%d, %d)", res[0], res[1], ea, eb);
    res[0] = res[1] = -9;
    M_OK(MPI_Reduce(mine, res, 1, pair, op, size - 1, MPI_COMM_WORLD));
    if (rank == size - 1) TH_CHECK(res[0] == ea && res[1] == eb, "user op reduce");
    M_OK(MPI_Scan(mine, res, 1, pair, op, MPI_COMM_WORLD));
    compose_ref(0, rank, &ea, &eb);
    TH_CHECK(res[0] == ea && res[1] == eb, "user op scan");
    res[0] = res[1] = -9;
    M_OK(MPI_Exscan(mine, res, 1, pair, op, MPI_COMM_WORLD));
    if (rank > 0) {
        compose_ref(0, rank - 1, &ea, &eb);
        TH_CHECK(res[0] == ea && res[1] == eb, "user op exscan");
    } else {
        TH_CHECK(res[0] == -9, "exscan touched rank 0's buffer");
    }
    /* nonblocking and persistent reductions, a user op and a native one */
    MPI_Request rq[2];
    M_OK(MPI_Iallreduce(mine, res, 1, pair, op, MPI_COMM_WORLD, &rq[0]));
    M_OK(MPI_Iallreduce(in, out, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq[1]));
    M_OK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
    compose_ref(0, size - 1, &ea, &eb);
    TH_CHECK(res[0] == ea && res[1] == eb && out[0] == 10 * size * (size - 1) / 2, "iallreduce");
    MPI_Request per;
    M_OK(MPI_Allreduce_init(mine, res, 1, pair, op, MPI_COMM_WORLD, MPI_INFO_NULL, &per));
    for (int k = 0; k < 3; k++) {
        res[0] = res[1] = 0;
        M_OK(MPI_Start(&per));
        M_OK(MPI_Wait(&per, MPI_STATUS_IGNORE));
        TH_CHECK(res[0] == ea && res[1] == eb, "persistent allreduce round %d", k);
    }
    M_OK(MPI_Request_free(&per));
    /* reduce_scatter(_block) */
    int rsin[64], rsout[4];
    for (int i = 0; i < size * 4 && i < 64; i++)
        rsin[i] = rank + i;
    M_OK(MPI_Reduce_scatter_block(rsin, rsout, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int k = 0; k < 2; k++)
        TH_CHECK(rsout[k] == size * (size - 1) / 2 + size * (2 * rank + k), "reduce_scatter_block");
    int counts[64];
    for (int r = 0; r < size; r++)
        counts[r] = r % 2 + 1;
    int off = 0;
    for (int r = 0; r < rank; r++)
        off += counts[r];
    M_OK(MPI_Reduce_scatter(rsin, rsout, counts, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    for (int k = 0; k < counts[rank]; k++)
        TH_CHECK(rsout[k] == size - 1 + off + k, "reduce_scatter [%d] = %d", k, rsout[k]);
    /* the same counts of a contiguous type of two ints: twice the elements each */
    MPI_Datatype two;
    M_OK(MPI_Type_contiguous(2, MPI_INT, &two));
    M_OK(MPI_Type_commit(&two));
    int rs2out[8];
    M_OK(MPI_Reduce_scatter(rsin, rs2out, counts, two, MPI_MAX, MPI_COMM_WORLD));
    for (int k = 0; k < 2 * counts[rank]; k++)
        TH_CHECK(rs2out[k] == size - 1 + 2 * off + k, "reduce_scatter of pairs [%d] = %d", k, rs2out[k]);
    M_OK(MPI_Type_free(&two));
    M_OK(MPI_Type_free(&pair));
    M_OK(MPI_Op_free(&op));
    /* data movement: bcast of a strided type, gather / allgather / alltoall, in place */
    int grid[8] = {0};
    MPI_Datatype every2;
    M_OK(MPI_Type_vector(4, 1, 2, MPI_INT, &every2));
    M_OK(MPI_Type_commit(&every2));
    if (rank == 0)
        for (int i = 0; i < 8; i++)
            grid[i] = i + 1;
    M_OK(MPI_Bcast(grid, 1, every2, 0, MPI_COMM_WORLD));
    for (int i = 0; i < 8; i++)
        TH_CHECK(grid[i] == (rank == 0 || i % 2 == 0 ? i + 1 : 0), "strided bcast [%d] = %d", i, grid[i]);
    M_OK(MPI_Type_free(&every2));
    M_OK(MPI_Allgather(in, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
        TH_CHECK(all[2 * r + 1] == r * 10 + 1, "allgather");
    for (int i = 0; i < size; i++)
        all[i] = i == rank ? rank * 3 : -1;
    M_OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, 1, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
        TH_CHECK(all[r] == r * 3, "in-place allgather");
    M_OK(MPI_Gather(&rank, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (rank == 0)
        for (int r = 0; r < size; r++)
            TH_CHECK(all[r] == r, "gather");
    int a2a_in[64], a2a_out[64];
    for (int r = 0; r < size; r++)
        a2a_in[r] = rank * 100 + r;
    M_OK(MPI_Alltoall(a2a_in, 1, MPI_INT, a2a_out, 1, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
        TH_CHECK(a2a_out[r] == r * 100 + rank, "alltoall");
    int sc[64], sd[64], rc[64], rd[64];
    for (int r = 0; r < size; r++) {
        sc[r] = 1;
        sd[r] = size - 1 - r;
        rc[r] = 1;
        rd[r] = r;
        a2a_in[size - 1 - r] = rank * 100 + r;
    }
    M_OK(MPI_Alltoallv(a2a_in, sc, sd, MPI_INT, a2a_out, rc, rd, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
        TH_CHECK(a2a_out[r] == r * 100 + rank, "alltoallv");
    /* zero counts */
    M_OK(MPI_Alltoall(NULL, 0, MPI_INT, NULL, 0, MPI_INT, MPI_COMM_WORLD));
    M_OK(MPI_Allreduce(NULL, NULL, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    M_OK(MPI_Bcast(NULL, 0, MPI_INT, 0, MPI_COMM_WORLD));
    M_OK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_Request bq;
    M_OK(MPI_Ibarrier(MPI_COMM_WORLD, &bq));
    M_OK(MPI_Wait(&bq, MPI_STATUS_IGNORE));
    return done();
}

Test(mpi, collectives)
{
    run(1, body_collectives);
    run(2, body_collectives);
    run(3, body_collectives);
    run(4, body_collectives);
}

/* Negative displacements are MPI's (the memory before the buffer is the
 * program's too): every block at buf + displacement. */
static int body_negative_displacements(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    int in[2 * 64], out[2 * 64], counts[64], sd[64], rd[64];
    for (int i = 0; i < size; i++) {
        counts[i] = 1;
        sd[i] = i - size; /* from in + size: in[i] */
        rd[i] = -1 - i;   /* from out + size: out[size - 1 - i] */
        in[i] = rank * 100 + i;
    }
    for (int i = 0; i < 2 * size; i++)
        out[i] = -1;
    M_OK(MPI_Alltoallv(in + size, counts, sd, MPI_INT, out + size, counts, rd, MPI_INT, MPI_COMM_WORLD));
    for (int i = 0; i < size; i++)
        TH_CHECK(out[size - 1 - i] == i * 100 + rank, "alltoallv: out[%d] = %d", size - 1 - i, out[size - 1 - i]);
    for (int i = 0; i < 2 * size; i++)
        out[i] = -1;
    M_OK(MPI_Allgatherv(&rank, 1, MPI_INT, out + size, counts, rd, MPI_INT, MPI_COMM_WORLD));
    for (int i = 0; i < size; i++)
        TH_CHECK(out[size - 1 - i] == i, "allgatherv: out[%d] = %d", size - 1 - i, out[size - 1 - i]);
    for (int i = 0; i < 2 * size; i++)
        out[i] = -1;
    M_OK(MPI_Gatherv(&rank, 1, MPI_INT, out + size, counts, rd, MPI_INT, 0, MPI_COMM_WORLD));
    for (int i = 0; rank == 0 && i < size; i++)
        TH_CHECK(out[size - 1 - i] == i, "gatherv: out[%d] = %d", size - 1 - i, out[size - 1 - i]);
    int mine = -1;
    M_OK(MPI_Scatterv(in + size, counts, sd, MPI_INT, &mine, 1, MPI_INT, 0, MPI_COMM_WORLD));
    TH_CHECK(mine == rank, "scatterv: %d", mine);
    MPI_Request r;
    for (int i = 0; i < 2 * size; i++)
        out[i] = -1;
    M_OK(MPI_Ialltoallv(in + size, counts, sd, MPI_INT, out + size, counts, rd, MPI_INT, MPI_COMM_WORLD, &r));
    M_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    TH_CHECK(out[size - 1] == rank, "ialltoallv: %d", out[size - 1]);
    return done();
}

Test(mpi, negative_displacements)
{
    run(1, body_negative_displacements);
    run(3, body_negative_displacements);
}

/* ---- datatypes --------------------------------------------------------------------- */

static int body_datatypes(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Aint lb, ext;
    int sz;
    MPI_Datatype v, s, r, sub, d;
    M_OK(MPI_Type_vector(3, 2, 4, MPI_DOUBLE, &v));
    M_OK(MPI_Type_size(v, &sz));
    M_OK(MPI_Type_get_extent(v, &lb, &ext));
    TH_CHECK(sz == 48 && lb == 0 && ext == (2 * 4 + 2) * 8, "vector size %d extent %ld", sz, (long)ext);
    int bl[2] = {1, 1};
    MPI_Aint disp[2] = {0, 8};
    MPI_Datatype types[2] = {MPI_DOUBLE, MPI_CHAR};
    M_OK(MPI_Type_create_struct(2, bl, disp, types, &s));
    M_OK(MPI_Type_size(s, &sz));
    M_OK(MPI_Type_get_extent(s, &lb, &ext));
    TH_CHECK(sz == 9 && ext == 16, "struct size %d extent %ld (C padding)", sz, (long)ext);
    M_OK(MPI_Type_create_resized(MPI_INT, -4, 12, &r));
    M_OK(MPI_Type_get_extent(r, &lb, &ext));
    TH_CHECK(lb == -4 && ext == 12, "resized");
    int sizes[2] = {4, 5}, subs[2] = {2, 3}, starts[2] = {1, 1};
    M_OK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &sub));
    M_OK(MPI_Type_commit(&sub));
    M_OK(MPI_Type_size(sub, &sz));
    M_OK(MPI_Type_get_extent(sub, &lb, &ext));
    TH_CHECK(sz == 24 && ext == 80, "subarray size %d extent %ld", sz, (long)ext);
    int a[20], packed[6], back[20] = {0}, pos = 0;
    for (int i = 0; i < 20; i++)
        a[i] = i;
    M_OK(MPI_Pack(a, 1, sub, packed, sizeof(packed), &pos, MPI_COMM_WORLD));
    TH_CHECK(pos == 24 && packed[0] == 6 && packed[2] == 8 && packed[3] == 11, "subarray pack");
    pos = 0;
    M_OK(MPI_Unpack(packed, sizeof(packed), &pos, back, 1, sub, MPI_COMM_WORLD));
    TH_CHECK(back[6] == 6 && back[13] == 13 && back[0] == 0 && back[9] == 0, "subarray unpack");
    /* envelope and contents */
    int ni, na, nd, comb, ints[8];
    MPI_Aint addrs[4];
    MPI_Datatype dts[4];
    M_OK(MPI_Type_get_envelope(v, &ni, &na, &nd, &comb));
    TH_CHECK(comb == MPI_COMBINER_VECTOR && ni == 3 && na == 0 && nd == 1, "vector envelope");
    M_OK(MPI_Type_get_contents(v, 8, 4, 4, ints, addrs, dts));
    TH_CHECK(ints[0] == 3 && ints[1] == 2 && ints[2] == 4 && dts[0] == MPI_DOUBLE, "vector contents");
    M_OK(MPI_Type_get_envelope(MPI_INT, &ni, &na, &nd, &comb));
    TH_CHECK(comb == MPI_COMBINER_NAMED, "named");
    /* dup keeps the layout; the old type can be freed under a new one */
    M_OK(MPI_Type_dup(s, &d));
    M_OK(MPI_Type_free(&s));
    M_OK(MPI_Type_get_extent(d, &lb, &ext));
    TH_CHECK(ext == 16, "dup extent");
    M_OK(MPI_Type_free(&d));
    M_OK(MPI_Type_free(&v));
    M_OK(MPI_Type_free(&r));
    M_OK(MPI_Type_free(&sub));
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    M_OK(MPI_Type_get_name(MPI_DOUBLE_INT, name, &len));
    TH_CHECK(!strcmp(name, "MPI_DOUBLE_INT"), "name %s", name);
    /* handles to integers and back */
    MPI_Comm dup;
    M_OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    TH_CHECK(MPI_Comm_fromint(MPI_Comm_toint(dup)) == dup, "comm toint / fromint");
    TH_CHECK(MPI_Comm_fromint(MPI_Comm_toint(MPI_COMM_WORLD)) == MPI_COMM_WORLD, "predefined toint");
    TH_CHECK(MPI_Type_fromint(MPI_Type_toint(MPI_FLOAT)) == MPI_FLOAT, "type toint");
    M_OK(MPI_Comm_free(&dup));
    return done();
}

Test(mpi, datatypes)
{
    run(1, body_datatypes);
}

/* ---- datatypes against a reference ------------------------------------------------- */

/* One element's type map, made the straightforward way: a walk of the
 * constructors (get_envelope / get_contents) down to the basic elements,
 * each (displacement, size), in order. Independent of how the library keeps
 * a type. Pair types are their two members. */
typedef struct refmap {
    MPI_Aint *disp;
    int *size;
    long n, cap;
} refmap_t;

static void ref_add(refmap_t *m, MPI_Aint disp, int size)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        m->disp = realloc(m->disp, sizeof(*m->disp) * (size_t)m->cap);
        m->size = realloc(m->size, sizeof(*m->size) * (size_t)m->cap);
        TH_CHECK(m->disp && m->size, "out of memory");
    }
    m->disp[m->n] = disp;
    m->size[m->n++] = size;
}

static MPI_Aint ext_of(MPI_Datatype t)
{
    MPI_Aint lb, ext;
    M_OK(MPI_Type_get_extent(t, &lb, &ext));
    return ext;
}

/* Whether index i of a dimension of g is coordinate c's of p (darray). */
static int darray_owns(int distrib, int darg, int g, int p, int c, int i)
{
    if (distrib == MPI_DISTRIBUTE_NONE) return 1;
    if (distrib == MPI_DISTRIBUTE_BLOCK) {
        int b = darg == MPI_DISTRIBUTE_DFLT_DARG ? (g + p - 1) / p : darg;
        return i / b == c;
    }
    int b = darg == MPI_DISTRIBUTE_DFLT_DARG ? 1 : darg;
    return (i / b) % p == c;
}

static void ref_map(MPI_Datatype t, MPI_Aint base, refmap_t *m)
{
    int ni, na, nd, comb;
    M_OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
    if (comb == MPI_COMBINER_NAMED) {
        int size;
        if (t == MPI_FLOAT_INT || t == MPI_DOUBLE_INT || t == MPI_2INT) {
            int first = t == MPI_DOUBLE_INT ? 8 : 4;
            ref_add(m, base, first);
            ref_add(m, base + first, 4);
            return;
        }
        M_OK(MPI_Type_size(t, &size));
        ref_add(m, base, size);
        return;
    }
    int *ints = malloc(sizeof(int) * (size_t)(ni + 1));
    MPI_Aint *addrs = malloc(sizeof(MPI_Aint) * (size_t)(na + 1));
    MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * (size_t)(nd + 1));
    TH_CHECK(ints && addrs && types, "out of memory");
    M_OK(MPI_Type_get_contents(t, ni, na, nd, ints, addrs, types));
    MPI_Aint e = ext_of(types[0]);
    switch (comb) {
    case MPI_COMBINER_DUP:
    case MPI_COMBINER_RESIZED: ref_map(types[0], base, m); break;
    case MPI_COMBINER_CONTIGUOUS:
        for (int i = 0; i < ints[0]; i++)
            ref_map(types[0], base + i * e, m);
        break;
    case MPI_COMBINER_VECTOR:
    case MPI_COMBINER_HVECTOR:
        for (int i = 0; i < ints[0]; i++)
            for (int j = 0; j < ints[1]; j++)
                ref_map(types[0], base + (comb == MPI_COMBINER_VECTOR ? (MPI_Aint)ints[2] * e : addrs[0]) * i + j * e,
                        m);
        break;
    case MPI_COMBINER_INDEXED:
    case MPI_COMBINER_HINDEXED:
        for (int i = 0; i < ints[0]; i++)
            for (int j = 0; j < ints[1 + i]; j++)
                ref_map(types[0], base + (comb == MPI_COMBINER_INDEXED ? ints[1 + ints[0] + i] * e : addrs[i]) + j * e,
                        m);
        break;
    case MPI_COMBINER_INDEXED_BLOCK:
    case MPI_COMBINER_HINDEXED_BLOCK:
        for (int i = 0; i < ints[0]; i++)
            for (int j = 0; j < ints[1]; j++)
                ref_map(types[0], base + (comb == MPI_COMBINER_INDEXED_BLOCK ? ints[2 + i] * e : addrs[i]) + j * e, m);
        break;
    case MPI_COMBINER_STRUCT:
        for (int i = 0; i < ints[0]; i++)
            for (int j = 0; j < ints[1 + i]; j++)
                ref_map(types[i], base + addrs[i] + j * ext_of(types[i]), m);
        break;
    case MPI_COMBINER_SUBARRAY:
    case MPI_COMBINER_DARRAY: {
        /* every index of the array in its order, kept where it is in the subarray / this rank's */
        int sub = comb == MPI_COMBINER_SUBARRAY, nd_ = sub ? ints[0] : ints[2], order = ints[ni - 1], idx[8] = {0};
        const int *g = sub ? ints + 1 : ints + 3;
        long total = 1;
        int coord[8];
        for (int d = 0; d < nd_; d++)
            total *= g[d];
        if (!sub)
            for (int d = nd_ - 1, r = ints[1]; d >= 0; d--) {
                coord[d] = r % ints[3 + 3 * nd_ + d];
                r /= ints[3 + 3 * nd_ + d];
            }
        for (long k = 0; k < total; k++) {
            int in = 1;
            long lin = 0;
            for (int s = 0; s < nd_; s++) { /* the linear index, slowest dimension first */
                int d = order == MPI_ORDER_C ? s : nd_ - 1 - s;
                lin = lin * g[d] + idx[d];
                if (sub)
                    in &= idx[d] >= ints[1 + 2 * nd_ + d] && idx[d] < ints[1 + 2 * nd_ + d] + ints[1 + nd_ + d];
                else
                    in &= darray_owns(ints[3 + nd_ + d], ints[3 + 2 * nd_ + d], g[d], ints[3 + 3 * nd_ + d], coord[d],
                                      idx[d]);
            }
            if (in) ref_map(types[0], base + lin * e, m);
            for (int s = nd_ - 1; s >= 0; s--) { /* the next index, the fastest dimension first */
                int d = order == MPI_ORDER_C ? s : nd_ - 1 - s;
                if (++idx[d] < g[d]) break;
                idx[d] = 0;
            }
        }
        break;
    }
    default: TH_CHECK(0, "combiner %d not in the reference", comb);
    }
    for (int i = 0; i < nd; i++) {
        int ni2, na2, nd2, comb2;
        M_OK(MPI_Type_get_envelope(types[i], &ni2, &na2, &nd2, &comb2));
        if (comb2 != MPI_COMBINER_NAMED) M_OK(MPI_Type_free(&types[i]));
    }
    free(ints), free(addrs), free(types);
}

static unsigned char pattern(long i, int salt)
{
    return (unsigned char)(i * 131 + salt * 17 + (i >> 8) * 7 + 1);
}

/* Packs and unpacks count elements of t (committed here) with the library
 * and with the reference map, whole and cut short (a receive of fewer
 * bytes, ending between elements and inside one), and compares every byte;
 * MPI_Get_elements and MPI_Status_set_elements at those points too. Frees t. */
static void check_against_reference(MPI_Datatype *tp, int count, const char *what)
{
    MPI_Datatype t = *tp;
    refmap_t m = {0};
    ref_map(t, 0, &m);
    M_OK(MPI_Type_commit(&t));
    MPI_Aint ext = ext_of(t), lo = 0, hi = 0;
    MPI_Count size, esize = 0, total = 0;
    M_OK(MPI_Type_size_c(t, &size));
    for (long k = 0; k < m.n; k++)
        esize += m.size[k];
    TH_CHECK(size == esize, "%s: size %lld, the reference's %lld", what, (long long)size, (long long)esize);
    for (int i = 0; i < count; i++)
        for (long k = 0; k < m.n; k++) {
            MPI_Aint d = i * ext + m.disp[k];
            if ((i == 0 && k == 0) || d < lo) lo = d;
            if ((i == 0 && k == 0) || d + m.size[k] > hi) hi = d + m.size[k];
        }
    if (lo > 0) lo = 0;
    total = size * count;
    size_t span = (size_t)(hi - lo) + 1;
    unsigned char *mem = malloc(span), *mine = malloc(span), *ref = malloc(span);
    unsigned char *packed = malloc((size_t)total + 1), *rpacked = malloc((size_t)total + 1);
    TH_CHECK(mem && mine && ref && packed && rpacked, "out of memory");
    for (size_t i = 0; i < span; i++)
        mem[i] = pattern((long)i, 1);
    unsigned char *base = mem - lo;
    /* pack */
    MPI_Count pos = 0;
    M_OK(MPI_Pack_c(base, count, t, packed, total, &pos, MPI_COMM_WORLD));
    TH_CHECK(pos == total, "%s: packed %lld of %lld bytes", what, (long long)pos, (long long)total);
    size_t o = 0;
    for (int i = 0; i < count; i++)
        for (long k = 0; k < m.n; k++) {
            memcpy(rpacked + o, base + i * ext + m.disp[k], (size_t)m.size[k]);
            o += (size_t)m.size[k];
        }
    TH_CHECK(!memcmp(packed, rpacked, (size_t)total), "%s: MPI_Pack differs from the reference", what);
    /* external32: the same elements, each big-endian (every basic type here keeps its size) */
    MPI_Count esz;
    M_OK(MPI_Pack_external_size_c("external32", count, t, &esz));
    TH_CHECK(esz == total, "%s: external32 size %lld, expected %lld", what, (long long)esz, (long long)total);
    o = 0;
    for (int i = 0; i < count; i++)
        for (long k = 0; k < m.n; k++) {
            for (int j = 0; j < m.size[k] / 2; j++) {
                unsigned char x = rpacked[o + (size_t)j];
                rpacked[o + (size_t)j] = rpacked[o + (size_t)(m.size[k] - 1 - j)];
                rpacked[o + (size_t)(m.size[k] - 1 - j)] = x;
            }
            o += (size_t)m.size[k];
        }
    pos = 0;
    M_OK(MPI_Pack_external_c("external32", base, count, t, packed, total, &pos));
    TH_CHECK(pos == total && !memcmp(packed, rpacked, (size_t)total), "%s: MPI_Pack_external differs", what);
    memcpy(mine, mem, span);
    memset(mem, 0, span);
    pos = 0;
    M_OK(MPI_Unpack_external_c("external32", packed, total, &pos, base, count, t));
    for (int i = 0; i < count; i++)
        for (long k = 0; k < m.n; k++) {
            MPI_Aint d = i * ext + m.disp[k] - lo;
            TH_CHECK(!memcmp(mem + d, mine + d, (size_t)m.size[k]), "%s: MPI_Unpack_external of element %ld", what, k);
        }
    memcpy(mem, mine, span);
    /* unpack, whole and cut short at a few points (through a receive from self) */
    for (MPI_Count i = 0; i < total; i++)
        packed[i] = pattern((long)i, 2);
    int first = m.n ? m.size[0] : 0;
    MPI_Count cuts[6] = {total, total / 2, total - 1, size, size + (first > 1 ? 1 : 0), first};
    for (int c = 0; c < 6; c++) {
        MPI_Count bytes = cuts[c];
        if (bytes < 0 || bytes > total) continue;
        memset(mine, 0xa5, span);
        memset(ref, 0xa5, span);
        MPI_Status st;
        if (bytes == total) {
            pos = 0;
            M_OK(MPI_Unpack_c(packed, total, &pos, mine - lo, count, t, MPI_COMM_WORLD));
            M_OK(MPI_Status_set_elements_x(&st, MPI_BYTE, bytes));
        } else {
            int me;
            M_OK(MPI_Comm_rank(MPI_COMM_SELF, &me));
            M_OK(MPI_Sendrecv(packed, (int)bytes, MPI_BYTE, me, 7, mine - lo, count, t, me, 7, MPI_COMM_SELF, &st));
        }
        /* the reference: the bytes in type map order, the last basic element perhaps in part */
        MPI_Count left = bytes, elems = 0;
        int inside = 0;
        o = 0;
        for (int i = 0; i < count && left > 0; i++)
            for (long k = 0; k < m.n && left > 0; k++) {
                MPI_Count n = m.size[k] < left ? m.size[k] : left;
                memcpy(ref - lo + i * ext + m.disp[k], packed + o, (size_t)n);
                o += (size_t)n;
                left -= n;
                if (n == m.size[k])
                    elems++;
                else
                    inside = 1;
            }
        TH_CHECK(!memcmp(mine, ref, span), "%s: unpacking %lld of %lld bytes differs from the reference", what,
                 (long long)bytes, (long long)total);
        /* elements in the status: whole basic elements, or MPI_UNDEFINED when it ends inside one */
        MPI_Count got, want = inside ? MPI_UNDEFINED : elems;
        M_OK(MPI_Get_elements_x(&st, t, &got));
        TH_CHECK(got == want, "%s: MPI_Get_elements after %lld bytes: %lld, expected %lld", what, (long long)bytes,
                 (long long)got, (long long)want);
        if (!inside) { /* and back: that many elements are that many bytes */
            MPI_Status st2;
            M_OK(MPI_Status_set_elements_x(&st2, t, elems));
            M_OK(MPI_Get_elements_x(&st2, MPI_BYTE, &got));
            TH_CHECK(got == bytes, "%s: MPI_Status_set_elements of %lld elements: %lld bytes, expected %lld", what,
                     (long long)elems, (long long)got, (long long)bytes);
        }
    }
    free(mem), free(mine), free(ref), free(packed), free(rpacked);
    free(m.disp), free(m.size);
    M_OK(MPI_Type_free(tp));
}

static int body_datatypes_reference(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Datatype v, t, r, s;
    M_OK(MPI_Type_vector(5, 2, 3, MPI_INT, &v));
    M_OK(MPI_Type_dup(v, &t));
    check_against_reference(&t, 3, "vector");
    /* vector of vectors (the inner one is one run of several copies) */
    M_OK(MPI_Type_vector(4, 1, 3, v, &t));
    check_against_reference(&t, 2, "vector of vectors");
    M_OK(MPI_Type_vector(4, 3, 5, v, &t));
    check_against_reference(&t, 2, "vector of blocks of vectors");
    M_OK(MPI_Type_create_hvector(3, 2, 200, v, &t));
    check_against_reference(&t, 2, "hvector of vectors");
    /* copies of a vector resized to its stride: one longer run */
    M_OK(MPI_Type_vector(4, 1, 2, MPI_INT, &s));
    M_OK(MPI_Type_create_resized(s, 0, 32, &r));
    M_OK(MPI_Type_contiguous(3, r, &t));
    check_against_reference(&t, 2, "contiguous of a resized vector");
    M_OK(MPI_Type_vector(2, 2, 7, r, &t));
    check_against_reference(&t, 2, "vector of a resized vector");
    M_OK(MPI_Type_free(&s));
    M_OK(MPI_Type_free(&r));
    /* several runs per copy: written out */
    M_OK(MPI_Type_vector(6, 2, 5, MPI_FLOAT_INT, &t));
    check_against_reference(&t, 2, "vector of MPI_FLOAT_INT");
    M_OK(MPI_Type_contiguous(5, MPI_2INT, &t));
    check_against_reference(&t, 2, "contiguous of MPI_2INT");
    int bl3[3] = {2, 1, 2};
    MPI_Aint d3[3] = {0, 16, 32};
    MPI_Datatype ty3[3] = {MPI_INT, MPI_DOUBLE, MPI_DATATYPE_NULL};
    M_OK(MPI_Type_vector(3, 1, 2, MPI_SHORT, &ty3[2]));
    M_OK(MPI_Type_create_struct(3, bl3, d3, ty3, &s));
    M_OK(MPI_Type_dup(s, &t));
    check_against_reference(&t, 3, "struct");
    M_OK(MPI_Type_create_resized(s, -8, 100, &t));
    check_against_reference(&t, 2, "resized struct");
    M_OK(MPI_Type_vector(3, 2, 3, s, &t));
    check_against_reference(&t, 2, "vector of structs");
    M_OK(MPI_Type_free(&ty3[2]));
    M_OK(MPI_Type_free(&s));
    /* indexed: regular displacements make one strided run, irregular ones several */
    int dreg[8] = {0, 5, 10, 15, 20, 25, 30, 35}, blk[4] = {1, 3, 2, 1}, dirr[4] = {0, 4, 9, 20};
    M_OK(MPI_Type_create_indexed_block(8, 2, dreg, MPI_DOUBLE, &t));
    check_against_reference(&t, 2, "indexed_block");
    M_OK(MPI_Type_indexed(4, blk, dirr, MPI_INT, &t));
    check_against_reference(&t, 2, "indexed");
    M_OK(MPI_Type_indexed(4, blk, dirr, v, &t));
    check_against_reference(&t, 2, "indexed of vectors");
    MPI_Aint hd[3] = {64, 0, 32};
    M_OK(MPI_Type_create_hindexed_block(3, 1, hd, v, &t));
    check_against_reference(&t, 2, "hindexed_block of vectors (out of order)");
    /* negative and zero strides */
    M_OK(MPI_Type_vector(4, 2, -3, MPI_INT, &t));
    check_against_reference(&t, 2, "vector with a negative stride");
    M_OK(MPI_Type_create_hvector(3, 1, 0, MPI_INT, &t));
    check_against_reference(&t, 2, "hvector with a zero stride");
    M_OK(MPI_Type_create_hvector(3, 2, -40, v, &t));
    check_against_reference(&t, 2, "hvector of vectors with a negative stride");
    /* subarrays: C and Fortran order, whole dimensions, an old type of its own runs */
    int sz3[3] = {5, 6, 7}, sub3[3] = {2, 3, 4}, st3[3] = {1, 2, 3};
    M_OK(MPI_Type_create_subarray(3, sz3, sub3, st3, MPI_ORDER_C, MPI_INT, &t));
    check_against_reference(&t, 2, "subarray, C order");
    M_OK(MPI_Type_create_subarray(3, sz3, sub3, st3, MPI_ORDER_FORTRAN, MPI_DOUBLE, &t));
    check_against_reference(&t, 2, "subarray, Fortran order");
    int subw[3] = {2, 6, 7}, stw[3] = {1, 0, 0};
    M_OK(MPI_Type_create_subarray(3, sz3, subw, stw, MPI_ORDER_C, MPI_INT, &t));
    check_against_reference(&t, 2, "subarray of whole planes");
    int subm[3] = {3, 6, 4}, stm[3] = {2, 0, 1};
    M_OK(MPI_Type_create_subarray(3, sz3, subm, stm, MPI_ORDER_C, MPI_INT, &t));
    check_against_reference(&t, 2, "subarray whole in the middle dimension");
    M_OK(MPI_Type_create_subarray(3, sz3, subm, stm, MPI_ORDER_FORTRAN, MPI_INT, &t));
    check_against_reference(&t, 2, "subarray whole in the middle dimension, Fortran order");
    int sz4[4] = {3, 4, 5, 6}, sub4[4] = {2, 4, 3, 6}, st4[4] = {1, 0, 1, 0};
    M_OK(MPI_Type_create_subarray(4, sz4, sub4, st4, MPI_ORDER_C, MPI_SHORT, &t));
    check_against_reference(&t, 2, "4-d subarray");
    M_OK(MPI_Type_create_subarray(4, sz4, sub4, st4, MPI_ORDER_FORTRAN, MPI_SHORT, &t));
    check_against_reference(&t, 2, "4-d subarray, Fortran order");
    int sz1[1] = {9}, sub1[1] = {4}, st1[1] = {3};
    M_OK(MPI_Type_create_subarray(1, sz1, sub1, st1, MPI_ORDER_C, MPI_INT, &t));
    check_against_reference(&t, 2, "1-d subarray");
    int sz2[2] = {4, 5}, sub2[2] = {2, 3}, st2[2] = {1, 1};
    M_OK(MPI_Type_create_subarray(2, sz2, sub2, st2, MPI_ORDER_C, v, &t));
    check_against_reference(&t, 2, "subarray of vectors");
    M_OK(MPI_Type_create_subarray(2, sz2, sub2, st2, MPI_ORDER_C, MPI_DOUBLE_INT, &t));
    check_against_reference(&t, 2, "subarray of MPI_DOUBLE_INT");
    M_OK(MPI_Type_create_subarray(3, sz3, sub3, st3, MPI_ORDER_C, MPI_INT, &s));
    M_OK(MPI_Type_vector(2, 1, 3, s, &t));
    check_against_reference(&t, 1, "vector of subarrays");
    M_OK(MPI_Type_free(&s));
    /* darray: block and cyclic (repeated blocks) */
    int gs[2] = {8, 10}, dist[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC},
        darg[2] = {MPI_DISTRIBUTE_DFLT_DARG, 2}, ps[2] = {2, 2};
    for (int rk = 0; rk < 4; rk++) {
        M_OK(MPI_Type_create_darray(4, rk, 2, gs, dist, darg, ps, MPI_ORDER_C, MPI_INT, &t));
        check_against_reference(&t, 2, "darray, block x cyclic(2)");
        M_OK(MPI_Type_create_darray(4, rk, 2, gs, dist, darg, ps, MPI_ORDER_FORTRAN, MPI_INT, &t));
        check_against_reference(&t, 2, "darray, block x cyclic(2), Fortran order");
    }
    int gs3[2] = {7, 11}, cyc[2] = {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_CYCLIC},
        dflt[2] = {MPI_DISTRIBUTE_DFLT_DARG, 3}, ps3[2] = {3, 1};
    M_OK(MPI_Type_create_darray(3, 1, 2, gs3, cyc, dflt, ps3, MPI_ORDER_C, MPI_DOUBLE, &t));
    check_against_reference(&t, 2, "darray, cyclic x cyclic(3)");
    M_OK(MPI_Type_free(&v));
    return done();
}

Test(mpi, datatypes_pack_as_their_reference_type_map)
{
    run(1, body_datatypes_reference);
}

/* Random nested types (fixed seed): each against the reference. */
static int rnd(unsigned *seed, int n)
{
    *seed = *seed * 1103515245u + 12345u;
    return (int)((*seed >> 16) % (unsigned)n);
}

static MPI_Datatype rand_type(unsigned *seed, int depth)
{
    static const MPI_Datatype named[] = {MPI_INT, MPI_DOUBLE, MPI_SHORT, MPI_CHAR, MPI_FLOAT_INT, MPI_2INT};
    if (depth == 0 || rnd(seed, 4) == 0) return named[rnd(seed, 6)];
    MPI_Datatype o = rand_type(seed, depth - 1), t;
    MPI_Aint e = ext_of(o);
    int count = 1 + rnd(seed, 4), bl = rnd(seed, 4), stride = rnd(seed, 9) - 3;
    int bls[4], disps[4];
    MPI_Aint hd[4];
    for (int i = 0; i < 4; i++) {
        bls[i] = rnd(seed, 3);
        disps[i] = i * (1 + rnd(seed, 3)) * (rnd(seed, 3) ? 1 : -1);
        hd[i] = disps[i] * (e ? e : 1) + rnd(seed, 2) * 4;
    }
    switch (rnd(seed, 9)) {
    case 0: M_OK(MPI_Type_contiguous(count, o, &t)); break;
    case 1: M_OK(MPI_Type_vector(count, bl, stride, o, &t)); break;
    case 2: M_OK(MPI_Type_create_hvector(count, bl, stride * (e + rnd(seed, 3) * 4), o, &t)); break;
    case 3: M_OK(MPI_Type_create_indexed_block(count, bl, disps, o, &t)); break;
    case 4: M_OK(MPI_Type_indexed(count, bls, disps, o, &t)); break;
    case 5: M_OK(MPI_Type_create_hindexed(count, bls, hd, o, &t)); break;
    case 6: {
        MPI_Datatype ty[2] = {o, named[rnd(seed, 6)]};
        int b2[2] = {1 + rnd(seed, 2), 1 + rnd(seed, 2)};
        MPI_Aint d2[2] = {0, (e > 0 ? e : 0) * b2[0] + rnd(seed, 3) * 8};
        M_OK(MPI_Type_create_struct(2, b2, d2, ty, &t));
        break;
    }
    case 7: M_OK(MPI_Type_create_resized(o, -rnd(seed, 2) * 4, e + (rnd(seed, 5) - 2) * 4, &t)); break;
    default: {
        int sz[3], sub[3], st[3], nd = 1 + rnd(seed, 3);
        for (int d = 0; d < nd; d++) {
            sz[d] = 1 + rnd(seed, 4);
            sub[d] = 1 + rnd(seed, sz[d]);
            st[d] = rnd(seed, sz[d] - sub[d] + 1);
        }
        M_OK(MPI_Type_create_subarray(nd, sz, sub, st, rnd(seed, 2) ? MPI_ORDER_C : MPI_ORDER_FORTRAN, o, &t));
    }
    }
    int ni, na, nd, comb;
    M_OK(MPI_Type_get_envelope(o, &ni, &na, &nd, &comb));
    if (comb != MPI_COMBINER_NAMED) M_OK(MPI_Type_free(&o));
    return t;
}

static int body_datatypes_random(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    unsigned seed = 20240611u;
    for (int i = 0; i < 400; i++) {
        MPI_Datatype t = rand_type(&seed, 3), d;
        int ni, na, nd, comb;
        M_OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
        if (comb == MPI_COMBINER_NAMED) continue;
        char what[64];
        snprintf(what, sizeof(what), "random type %d", i);
        M_OK(MPI_Type_dup(t, &d)); /* the reference map walks the dup down to t */
        M_OK(MPI_Type_free(&t));
        check_against_reference(&d, 1 + i % 3, what);
    }
    return done();
}

Test(mpi, random_nested_datatypes_pack_as_their_reference_type_map)
{
    run(1, body_datatypes_random);
}

/* ---- large vectors ------------------------------------------------------------------- */

static long maxrss_kb(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A vector of 2^26 (and 2^30) blocks is one strided run: made at once in
 * no memory, not 2^26 runs (gigabytes). Received through in part, sent and
 * received through a vector of 2^20 blocks, all bit-exact. */
static int body_large_vectors(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Datatype v26, v30, v20;
    for (int lg = 26; lg <= 30; lg += 4) { /* the larger only once the smaller was small */
        long rss0 = maxrss_kb();
        double t0 = now_s();
        MPI_Datatype *vp = lg == 26 ? &v26 : &v30;
        M_OK(MPI_Type_vector(1 << lg, 1, 2, MPI_INT, vp));
        M_OK(MPI_Type_commit(vp));
        double dt = now_s() - t0;
        long drss = maxrss_kb() - rss0;
        TH_CHECK(drss < 8 * 1024, "making a vector of 2^%d blocks took %ld KB", lg, drss);
        TH_CHECK(dt < 1.0, "making a vector of 2^%d blocks took %.2f s", lg, dt);
    }
    MPI_Count sz, lb, ext;
    int isz;
    M_OK(MPI_Type_size_c(v26, &sz));
    M_OK(MPI_Type_get_extent_c(v26, &lb, &ext));
    TH_CHECK(sz == (MPI_Count)4 << 26 && lb == 0 && ext == (((MPI_Count)1 << 27) - 1) * 4,
             "2^26 vector: size %lld extent %lld", (long long)sz, (long long)ext);
    M_OK(MPI_Type_size_c(v30, &sz));
    M_OK(MPI_Type_get_extent_c(v30, &lb, &ext));
    TH_CHECK(sz == (MPI_Count)4 << 30 && lb == 0 && ext == (((MPI_Count)1 << 31) - 1) * 4,
             "2^30 vector: size %lld extent %lld", (long long)sz, (long long)ext);
    M_OK(MPI_Type_size(v30, &isz));
    TH_CHECK(isz == MPI_UNDEFINED, "MPI_Type_size of 2^32 bytes: %d", isz);
    MPI_Aint tlb, text;
    M_OK(MPI_Type_get_true_extent(v26, &tlb, &text));
    TH_CHECK(tlb == 0 && text == (((MPI_Aint)1 << 27) - 1) * 4, "true extent %ld", (long)text);
    /* a vector of 2^20 blocks, sent and received both ways, and packed */
    const int n = 1 << 20;
    M_OK(MPI_Type_vector(n, 1, 2, MPI_INT, &v20));
    M_OK(MPI_Type_commit(&v20));
    int *strided = malloc(sizeof(int) * 2 * (size_t)n), *flat = malloc(sizeof(int) * (size_t)n);
    TH_CHECK(strided && flat, "out of memory");
    int peer = (rank + 1) % size, from = (rank + size - 1) % size;
    for (int i = 0; i < 2 * n; i++)
        strided[i] = rank * 7 + i * 3;
    M_OK(MPI_Sendrecv(strided, 1, v20, peer, 1, flat, n, MPI_INT, from, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    for (int i = 0; i < n; i++)
        TH_CHECK(flat[i] == from * 7 + 2 * i * 3, "received through the vector: [%d] = %d", i, flat[i]);
    for (int i = 0; i < 2 * n; i++)
        strided[i] = -1;
    for (int i = 0; i < n; i++)
        flat[i] = rank * 5 + i;
    M_OK(MPI_Sendrecv(flat, n, MPI_INT, peer, 2, strided, 1, v20, from, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    for (int i = 0; i < 2 * n; i++)
        TH_CHECK(strided[i] == (i % 2 ? -1 : from * 5 + i / 2), "unpacked into the vector: [%d] = %d", i, strided[i]);
    int pos = 0;
    M_OK(MPI_Pack(strided, 1, v20, flat, n * 4, &pos, MPI_COMM_WORLD));
    for (int i = 0; i < n; i++)
        TH_CHECK(flat[i] == from * 5 + i, "packed: [%d] = %d", i, flat[i]);
    /* 1000 ints received through one 2^26-block vector: the first 1000 blocks, elements counted */
    const int few = 1000;
    int *big = malloc(((size_t)1 << 29)); /* the vector's extent; only its start is written */
    TH_CHECK(big, "out of memory");
    for (int i = 0; i < 2 * few + 2; i++)
        big[i] = -1;
    for (int i = 0; i < few; i++)
        flat[i] = rank * 11 + i;
    MPI_Status st;
    M_OK(MPI_Sendrecv(flat, few, MPI_INT, peer, 3, big, 1, v26, from, 3, MPI_COMM_WORLD, &st));
    for (int i = 0; i < 2 * few + 2; i++)
        TH_CHECK(big[i] == (i % 2 || i >= 2 * few ? -1 : from * 11 + i / 2), "part received: [%d] = %d", i, big[i]);
    MPI_Count elems, count;
    M_OK(MPI_Get_elements_x(&st, v26, &elems));
    M_OK(MPI_Get_count_c(&st, v26, &count));
    TH_CHECK(elems == few && count == MPI_UNDEFINED, "elements %lld count %lld", (long long)elems, (long long)count);
    M_OK(MPI_Status_set_elements_x(&st, v30, ((MPI_Count)1 << 30) + 3));
    M_OK(MPI_Get_elements_x(&st, MPI_BYTE, &elems));
    TH_CHECK(elems == ((MPI_Count)4 << 30) + 12, "set_elements of 2^30 + 3: %lld bytes", (long long)elems);
    free(big), free(strided), free(flat);
    M_OK(MPI_Type_free(&v20));
    M_OK(MPI_Type_free(&v26));
    M_OK(MPI_Type_free(&v30));
    return done();
}

Test(mpi, large_vectors_are_one_strided_run)
{
    run(1, body_large_vectors);
    run(2, body_large_vectors);
}

/* Types that would still need too many runs, or whose size or extent does
 * not fit 64 bits, fail their constructor with an error naming it. */
static int body_types_too_large(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Datatype t = MPI_DATATYPE_NULL;
    char msg[MPI_MAX_ERROR_STRING];
    int len, rc;
    long rss0 = maxrss_kb();
    rc = MPI_Type_contiguous(1 << 30, MPI_FLOAT_INT, &t);
    M_FAILS(rc, MPI_ERR_NO_MEM);
    MPI_Error_string(rc, msg, &len);
    TH_CHECK(strstr(msg, "MPI_Type_contiguous") && strstr(msg, "runs"), "message: %s", msg);
    rc = MPI_Type_vector(1 << 30, 1, 3, MPI_FLOAT_INT, &t);
    M_FAILS(rc, MPI_ERR_NO_MEM);
    MPI_Error_string(rc, msg, &len);
    TH_CHECK(strstr(msg, "MPI_Type_vector"), "message: %s", msg);
    MPI_Datatype v;
    M_OK(MPI_Type_vector(1 << 20, 1, 2, MPI_INT, &v));
    rc = MPI_Type_vector(1 << 25, 1, 3, v, &t); /* 2^25 runs of 2^20 copies each */
    M_FAILS(rc, MPI_ERR_NO_MEM);
    M_OK(MPI_Type_free(&v));
    TH_CHECK(maxrss_kb() - rss0 < 64 * 1024, "failing took %ld KB", maxrss_kb() - rss0);
    rc = MPI_Type_vector_c((MPI_Count)1 << 40, 1, (MPI_Count)1 << 40, MPI_INT, &t);
    M_FAILS(rc, MPI_ERR_ARG);
    MPI_Error_string(rc, msg, &len);
    TH_CHECK(strstr(msg, "MPI_Type_vector_c"), "message: %s", msg);
    rc = MPI_Type_contiguous_c((MPI_Count)1 << 62, MPI_DOUBLE, &t);
    M_FAILS(rc, MPI_ERR_ARG);
    TH_CHECK(t == MPI_DATATYPE_NULL, "a failed constructor gave a type");
    return done();
}

Test(mpi, types_too_large_fail_their_constructor)
{
    run(1, body_types_too_large);
}

/* ---- communicators, groups, attributes, topologies ----------------------------------- */

static int copies, deletes;
static int copy_fn(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag)
{
    (void)c, (void)k, (void)extra;
    copies++;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}
static int delete_fn(MPI_Comm c, int k, void *val, void *extra)
{
    (void)c, (void)k, (void)val, (void)extra;
    deletes++;
    return MPI_SUCCESS;
}

static int body_comms(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Comm dup, half, node, cart, sub;
    int result, n, me;
    M_OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    M_OK(MPI_Comm_compare(MPI_COMM_WORLD, dup, &result));
    TH_CHECK(result == MPI_CONGRUENT, "compare %d", result);
    M_OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half));
    M_OK(MPI_Comm_size(half, &n));
    M_OK(MPI_Comm_rank(half, &me));
    TH_CHECK(n == (size + 1 - rank % 2) / 2 && me == n - 1 - rank / 2, "split %d/%d", me, n);
    M_OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
    M_OK(MPI_Comm_size(node, &n));
    TH_CHECK(n == size, "one host: shared split of %d", n);
    /* groups */
    MPI_Group wg, hg, eg;
    M_OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    M_OK(MPI_Comm_group(half, &hg));
    int ranks[64], out[64];
    for (int i = 0; i < size; i++)
        ranks[i] = i;
    M_OK(MPI_Group_translate_ranks(wg, size, ranks, hg, out));
    for (int i = 0; i < size; i++)
        TH_CHECK(i % 2 == rank % 2 ? out[i] != MPI_UNDEFINED : out[i] == MPI_UNDEFINED, "translate %d", i);
    M_OK(MPI_Group_excl(wg, 1, ranks, &eg));
    MPI_Comm made;
    M_OK(MPI_Comm_create(MPI_COMM_WORLD, eg, &made));
    TH_CHECK(rank == 0 ? made == MPI_COMM_NULL : made != MPI_COMM_NULL, "comm_create");
    if (made != MPI_COMM_NULL) M_OK(MPI_Comm_free(&made));
    M_OK(MPI_Group_free(&eg));
    M_OK(MPI_Group_free(&hg));
    M_OK(MPI_Group_free(&wg));
    /* attributes: copied by dup through the callback, deleted on free */
    int key, flag;
    void *val;
    M_OK(MPI_Comm_create_keyval(copy_fn, delete_fn, &key, NULL));
    M_OK(MPI_Comm_set_attr(dup, key, (void *)(uintptr_t)42));
    MPI_Comm dup2;
    M_OK(MPI_Comm_dup(dup, &dup2));
    M_OK(MPI_Comm_get_attr(dup2, key, &val, &flag));
    TH_CHECK(flag && (uintptr_t)val == 42 && copies == 1, "attribute copied");
    M_OK(MPI_Comm_free(&dup2));
    M_OK(MPI_Comm_delete_attr(dup, key));
    TH_CHECK(deletes == 2, "deletes %d", deletes);
    M_OK(MPI_Comm_free_keyval(&key));
    /* Cartesian topology */
    int dims[2] = {0, 0}, periods[2] = {1, 0}, coords[2], src, dst;
    M_OK(MPI_Dims_create(size, 2, dims));
    TH_CHECK(dims[0] * dims[1] == size && dims[0] >= dims[1], "dims %d x %d", dims[0], dims[1]);
    M_OK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart));
    M_OK(MPI_Cart_coords(cart, rank, 2, coords));
    M_OK(MPI_Cart_rank(cart, coords, &me));
    TH_CHECK(me == rank, "cart rank");
    M_OK(MPI_Cart_shift(cart, 0, 1, &src, &dst));
    TH_CHECK(dst == ((coords[0] + 1) % dims[0]) * dims[1] + coords[1], "periodic shift");
    M_OK(MPI_Cart_shift(cart, 1, 1, &src, &dst));
    TH_CHECK(coords[1] + 1 < dims[1] ? dst == rank + 1 : dst == MPI_PROC_NULL, "non-periodic shift");
    int remain[2] = {0, 1};
    M_OK(MPI_Cart_sub(cart, remain, &sub));
    M_OK(MPI_Comm_size(sub, &n));
    TH_CHECK(n == dims[1], "cart_sub size %d", n);
    int d5[3] = {0, 3, 0};
    M_OK(MPI_Dims_create(12, 3, d5));
    TH_CHECK(d5[0] * d5[2] == 4 && d5[1] == 3, "dims with a fixed one");
    M_FAILS(MPI_Dims_create(7, 2, (int[]){2, 0}), MPI_ERR_DIMS);
    M_OK(MPI_Comm_free(&sub));
    M_OK(MPI_Comm_free(&cart));
    M_OK(MPI_Comm_free(&node));
    M_OK(MPI_Comm_free(&half));
    M_OK(MPI_Comm_free(&dup));
    return done();
}

Test(mpi, communicators_groups_attributes_topologies)
{
    run(1, body_comms);
    run(4, body_comms);
}

/* MPI_Comm_free only marks a communicator for deallocation: operations
 * pending on it, its persistent requests and its matched messages go on
 * (on it, not on a communicator made later), their errors go to its
 * handler, and its attributes are deleted at the free. */
static int lifetime_deletes;
static int count_delete(MPI_Comm c, int k, void *val, void *extra)
{
    (void)c, (void)k, (void)val, (void)extra;
    lifetime_deletes++;
    return MPI_SUCCESS;
}

static int body_freed_comm_lives_on(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    int n;
    MPI_Comm c, stale, later;
    MPI_Request r;
    /* a persistent collective, started after the free and after a
     * one-rank communicator was made */
    int in = rank + 1, out = -1;
    M_OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    M_OK(MPI_Allreduce_init(&in, &out, 1, MPI_INT, MPI_SUM, c, MPI_INFO_NULL, &r));
    M_OK(MPI_Comm_free(&c));
    M_OK(MPI_Comm_split(MPI_COMM_WORLD, rank, 0, &later));
    M_OK(MPI_Start(&r));
    M_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    TH_CHECK(out == 3, "persistent allreduce after the free: %d", out);
    M_OK(MPI_Request_free(&r));
    M_OK(MPI_Comm_free(&later));
    /* persistent point to point, with the ranks of the later one reversed */
    int v = -1, x = 100 + rank;
    M_OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    if (rank == 0)
        M_OK(MPI_Send_init(&x, 1, MPI_INT, 1, 0, c, &r));
    else
        M_OK(MPI_Recv_init(&v, 1, MPI_INT, 0, 0, c, &r));
    M_OK(MPI_Comm_free(&c));
    M_OK(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &later));
    M_OK(MPI_Start(&r));
    M_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    TH_CHECK(rank == 0 || v == 100, "persistent receive after the free: %d", v);
    M_OK(MPI_Request_free(&r));
    M_OK(MPI_Comm_free(&later));
    /* pending operations: a receive whose message is sent after the free,
     * a large send, a nonblocking allreduce */
    enum { BIG = 1 << 18 };
    int *big = calloc(BIG, sizeof(int)), key, got = -1, sum = -1;
    MPI_Request q[3];
    M_OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, count_delete, &key, NULL));
    M_OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    M_OK(MPI_Comm_set_attr(c, key, NULL));
    if (rank == 0) {
        M_OK(MPI_Irecv(&got, 1, MPI_INT, 1, 1, c, &q[0]));
        M_OK(MPI_Isend(big, BIG, MPI_INT, 1, 2, c, &q[1]));
    } else {
        q[0] = q[1] = MPI_REQUEST_NULL;
    }
    M_OK(MPI_Iallreduce(&in, &sum, 1, MPI_INT, MPI_SUM, c, &q[2]));
    stale = c;
    if (rank == 0) {
        M_OK(MPI_Comm_free(&c));
        TH_CHECK(c == MPI_COMM_NULL && lifetime_deletes == 1, "free: handle %p, %d deletes", (void *)c,
                 lifetime_deletes);
        M_FAILS(MPI_Comm_rank(stale, &n), MPI_ERR_COMM);
        M_OK(MPI_Barrier(MPI_COMM_WORLD));
    } else {
        M_OK(MPI_Barrier(MPI_COMM_WORLD));
        M_OK(MPI_Send(&x, 1, MPI_INT, 0, 1, c));
        M_OK(MPI_Recv(big, BIG, MPI_INT, 0, 2, c, MPI_STATUS_IGNORE));
        M_OK(MPI_Comm_free(&c));
    }
    M_OK(MPI_Waitall(3, q, MPI_STATUSES_IGNORE));
    TH_CHECK(sum == 3 && (rank == 1 || got == 101), "after the free: sum %d, received %d", sum, got);
    M_OK(MPI_Comm_free_keyval(&key));
    free(big);
    /* a matched message: its receive's error goes to the freed
     * communicator's handler (MPI_ERRORS_RETURN), not to one made later */
    M_OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    if (rank == 1) {
        int four[4] = {1, 2, 3, 4};
        M_OK(MPI_Send(four, 4, MPI_INT, 0, 3, c));
        M_OK(MPI_Comm_free(&c));
    } else {
        MPI_Message m;
        MPI_Status st;
        int two[2];
        M_OK(MPI_Mprobe(1, 3, c, &m, &st));
        M_OK(MPI_Comm_free(&c));
        M_OK(MPI_Comm_dup(MPI_COMM_SELF, &later));
        M_OK(MPI_Comm_set_errhandler(later, MPI_ERRORS_ARE_FATAL));
        M_FAILS(MPI_Mrecv(two, 2, MPI_INT, &m, &st), MPI_ERR_TRUNCATE);
        TH_CHECK(two[1] == 2, "matched receive after the free: %d", two[1]);
        M_OK(MPI_Comm_free(&later));
    }
    return done();
}

Test(mpi, a_freed_communicator_lives_while_operations_hold_it)
{
    /* a bound on waits: a receive on the wrong communicator would hang */
    static const char *const env[] = {"WEFT_TIMEOUT=20", NULL};
    th_result_t r = th_run(2, body_freed_comm_lives_on, NULL, TIMEOUT, env);
    cr_assert_eq(r.failed, 0, "%d of 2 ranks failed%s", r.failed, r.timed_out ? " (timed out)" : "");
}

/* MPI_Comm_disconnect waits, inside the call, for everything in flight on
 * the communicator: a send the program freed (large: it ends only when the
 * peer receives), a buffered send, the program's own pending receives and
 * collectives (which stay its handles: complete, for a later Wait), within
 * the communicator's timeout; then frees it as MPI_Comm_free. */
enum { DISC_BIG = 8 << 20, DISC_BUFFERED = 4 << 20 };
#define DISC_DELAY_MS 500

static int body_disconnect_sends(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Comm c, w = MPI_COMM_WORLD, nul = MPI_COMM_NULL;
    /* nothing pending: at once */
    M_OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    double t0 = MPI_Wtime();
    M_OK(MPI_Comm_disconnect(&c));
    double took = MPI_Wtime() - t0;
    TH_CHECK(c == MPI_COMM_NULL && took < 0.25, "idle disconnect: handle %p after %.3f s", (void *)c, took);
    M_FAILS(MPI_Comm_disconnect(&w), MPI_ERR_COMM);
    M_FAILS(MPI_Comm_disconnect(&nul), MPI_ERR_COMM);
    M_FAILS(MPI_Comm_disconnect(NULL), MPI_ERR_ARG);
    /* a freed rendezvous send and a buffered send, received late */
    char *big = malloc(DISC_BIG), *buffered = malloc(DISC_BUFFERED);
    int bsize = DISC_BUFFERED + MPI_BSEND_OVERHEAD;
    void *attached = malloc((size_t)bsize);
    TH_CHECK(big && buffered && attached, "out of memory");
    M_OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    if (rank == 0) {
        MPI_Request r;
        th_fill(big, DISC_BIG, 41);
        th_fill(buffered, DISC_BUFFERED, 42);
        M_OK(MPI_Buffer_attach(attached, bsize));
        M_OK(MPI_Barrier(MPI_COMM_WORLD));
        M_OK(MPI_Isend(big, DISC_BIG, MPI_BYTE, 1, 1, c, &r));
        M_OK(MPI_Request_free(&r));
        M_OK(MPI_Bsend(buffered, DISC_BUFFERED, MPI_BYTE, 1, 2, c));
        t0 = MPI_Wtime();
        M_OK(MPI_Comm_disconnect(&c));
        took = MPI_Wtime() - t0;
        TH_CHECK(c == MPI_COMM_NULL, "handle %p after the disconnect", (void *)c);
        /* rank 1 receives the first after one delay, the second after two */
        TH_CHECK(took > 1.6 * DISC_DELAY_MS / 1000.0, "disconnect returned after %.3f s, before rank 1 received", took);
        void *b;
        int bs;
        M_OK(MPI_Buffer_detach(&b, &bs));
        TH_CHECK(b == attached && bs == bsize, "detached %p, %d bytes", b, bs);
    } else {
        MPI_Status st;
        int n;
        size_t bad = 0;
        M_OK(MPI_Barrier(MPI_COMM_WORLD));
        th_nap_ms(DISC_DELAY_MS);
        M_OK(MPI_Recv(big, DISC_BIG, MPI_BYTE, 0, 1, c, &st));
        M_OK(MPI_Get_count(&st, MPI_BYTE, &n));
        TH_CHECK(n == DISC_BIG && th_verify(big, DISC_BIG, 41, &bad), "freed send: %d bytes, byte %zu", n, bad);
        th_nap_ms(DISC_DELAY_MS);
        M_OK(MPI_Recv(buffered, DISC_BUFFERED, MPI_BYTE, 0, 2, c, &st));
        M_OK(MPI_Get_count(&st, MPI_BYTE, &n));
        TH_CHECK(n == DISC_BUFFERED && th_verify(buffered, DISC_BUFFERED, 42, &bad),
                 "buffered send: %d bytes, byte %zu", n, bad);
        M_OK(MPI_Comm_disconnect(&c));
        TH_CHECK(c == MPI_COMM_NULL, "handle %p after the disconnect", (void *)c);
    }
    free(big), free(buffered), free(attached);
    return done();
}

Test(mpi, comm_disconnect_waits_for_freed_and_buffered_sends)
{
    static const char *const env[] = {"WEFT_TIMEOUT=20", NULL};
    th_result_t r = th_run(2, body_disconnect_sends, NULL, TIMEOUT, env);
    cr_assert_eq(r.failed, 0, "%d of 2 ranks failed%s", r.failed, r.timed_out ? " (timed out)" : "");
}

/* Requests the program holds complete inside the disconnect (their buffers
 * are written before it returns) and stay valid: a later Wait returns
 * their status. Rank 0 sends and joins the collective only after a delay. */
static int body_disconnect_held(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Comm c;
    MPI_Request rq[3];
    MPI_Status st;
    int in = rank + 1, sum = -1, got = -1, pgot = -1, n;
    M_OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    if (rank == 0) {
        int x = 42, y = 43;
        th_nap_ms(DISC_DELAY_MS);
        M_OK(MPI_Send(&x, 1, MPI_INT, 1, 7, c));
        M_OK(MPI_Send(&y, 1, MPI_INT, 1, 8, c));
        M_OK(MPI_Iallreduce(&in, &sum, 1, MPI_INT, MPI_SUM, c, &rq[0]));
        M_OK(MPI_Comm_disconnect(&c));
        TH_CHECK(c == MPI_COMM_NULL && sum == 3, "handle %p, sum %d after the disconnect", (void *)c, sum);
        M_OK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
        TH_CHECK(rq[0] == MPI_REQUEST_NULL, "request not released");
        return done();
    }
    M_OK(MPI_Irecv(&got, 1, MPI_INT, 0, 7, c, &rq[0]));
    M_OK(MPI_Recv_init(&pgot, 1, MPI_INT, 0, 8, c, &rq[1]));
    M_OK(MPI_Start(&rq[1]));
    M_OK(MPI_Iallreduce(&in, &sum, 1, MPI_INT, MPI_SUM, c, &rq[2]));
    double t0 = MPI_Wtime();
    M_OK(MPI_Comm_disconnect(&c));
    double took = MPI_Wtime() - t0;
    TH_CHECK(c == MPI_COMM_NULL, "handle %p after the disconnect", (void *)c);
    TH_CHECK(got == 42 && pgot == 43 && sum == 3, "after the disconnect (%.3f s): received %d and %d, sum %d", took,
             got, pgot, sum);
    M_OK(MPI_Wait(&rq[0], &st));
    M_OK(MPI_Get_count(&st, MPI_INT, &n));
    TH_CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 7 && n == 1, "held receive's status: source %d tag %d count %d",
             st.MPI_SOURCE, st.MPI_TAG, n);
    M_OK(MPI_Wait(&rq[1], &st));
    TH_CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 8, "persistent receive's status: source %d tag %d", st.MPI_SOURCE,
             st.MPI_TAG);
    M_OK(MPI_Request_free(&rq[1]));
    M_OK(MPI_Wait(&rq[2], MPI_STATUS_IGNORE));
    TH_CHECK(rq[0] == MPI_REQUEST_NULL && rq[1] == MPI_REQUEST_NULL && rq[2] == MPI_REQUEST_NULL,
             "requests not released");
    return done();
}

Test(mpi, comm_disconnect_completes_held_requests)
{
    static const char *const env[] = {"WEFT_TIMEOUT=20", NULL};
    th_result_t r = th_run(2, body_disconnect_held, NULL, TIMEOUT, env);
    cr_assert_eq(r.failed, 0, "%d of 2 ranks failed%s", r.failed, r.timed_out ? " (timed out)" : "");
}

/* A send the peer does not receive: the disconnect fails after the
 * communicator's timeout (WEFT_TIMEOUT), through the error handler naming
 * it, and leaves the communicator as it was; once the peer receives, a
 * second disconnect succeeds. Rank 1 waits for the go-ahead by testing
 * (a test has no deadline), so no wait of its own times out meanwhile. */
#define DISC_TIMEOUT 2.0
static int body_disconnect_times_out(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    MPI_Comm c;
    char *big = malloc(DISC_BIG);
    int go = 1;
    size_t bad = 0;
    TH_CHECK(big != NULL, "out of memory");
    M_OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    if (rank == 0) {
        MPI_Request r;
        char text[MPI_MAX_ERROR_STRING];
        int len, cls = -1;
        th_fill(big, DISC_BIG, 43);
        M_OK(MPI_Isend(big, DISC_BIG, MPI_BYTE, 1, 3, c, &r));
        M_OK(MPI_Request_free(&r));
        double t0 = MPI_Wtime();
        int rc = MPI_Comm_disconnect(&c);
        double took = MPI_Wtime() - t0;
        MPI_Error_class(rc, &cls);
        MPI_Error_string(rc, text, &len);
        TH_CHECK(rc != MPI_SUCCESS && cls == MPI_ERR_OTHER, "disconnect: rc %d class %d after %.3f s", rc, cls, took);
        TH_CHECK(took > 0.9 * DISC_TIMEOUT && took < DISC_TIMEOUT + 3, "failed after %.3f s (timeout %.1f s)", took,
                 DISC_TIMEOUT);
        TH_CHECK(strstr(text, "MPI_Comm_disconnect") != NULL, "the message does not name the call: %s", text);
        TH_CHECK(c != MPI_COMM_NULL, "a failed disconnect took the handle");
        M_OK(MPI_Send(&go, 1, MPI_INT, 1, 9, MPI_COMM_WORLD));
        M_OK(MPI_Comm_disconnect(&c));
        TH_CHECK(c == MPI_COMM_NULL, "handle %p after the second disconnect", (void *)c);
    } else {
        MPI_Request g;
        int flag = 0;
        M_OK(MPI_Irecv(&go, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, &g));
        while (!flag) {
            M_OK(MPI_Test(&g, &flag, MPI_STATUS_IGNORE));
            if (!flag) th_nap_ms(1);
        }
        M_OK(MPI_Recv(big, DISC_BIG, MPI_BYTE, 0, 3, c, MPI_STATUS_IGNORE));
        TH_CHECK(th_verify(big, DISC_BIG, 43, &bad), "late receive: byte %zu", bad);
        M_OK(MPI_Comm_disconnect(&c));
    }
    free(big);
    return done();
}

Test(mpi, comm_disconnect_fails_within_the_timeout)
{
    static const char *const env[] = {"WEFT_TIMEOUT=2", NULL};
    th_result_t r = th_run(2, body_disconnect_times_out, NULL, TIMEOUT, env);
    cr_assert_eq(r.failed, 0, "%d of 2 ranks failed%s", r.failed, r.timed_out ? " (timed out)" : "");
}

/* A graph's index[] must be where each node's edges end: not negative,
 * not decreasing (the neighbour queries index edges[] with it). */
static int body_graph_index(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    int edges[2] = {1, 0}, decreasing[2] = {1, 0}, negative[2] = {-3, -1}, good[2] = {1, 2};
    MPI_Comm g = MPI_COMM_WORLD;
    M_FAILS(MPI_Graph_create(MPI_COMM_WORLD, 2, decreasing, edges, 0, &g), MPI_ERR_ARG);
    TH_CHECK(g == MPI_COMM_NULL, "graph_create left %p", (void *)g);
    M_FAILS(MPI_Graph_create(MPI_COMM_WORLD, 2, negative, edges, 0, &g), MPI_ERR_ARG);
    M_OK(MPI_Graph_create(MPI_COMM_WORLD, 2, good, edges, 0, &g));
    int nb[2] = {-1, -1}, n;
    M_OK(MPI_Graph_neighbors_count(g, rank, &n));
    M_OK(MPI_Graph_neighbors(g, rank, 2, nb));
    TH_CHECK(n == 1 && nb[0] == 1 - rank, "neighbours %d: %d", n, nb[0]);
    M_OK(MPI_Comm_free(&g));
    return done();
}

Test(mpi, graph_create_checks_its_index)
{
    run(2, body_graph_index);
}

/* ---- neighbourhood collectives and sessions ------------------------------------------- */

static int body_neighbors(int rank, int size, void *arg)
{
    (void)arg;
    init_return(&rank, &size);
    /* a periodic ring: with 2 ranks both neighbours are one rank, each
     * message must still land in its slot (left, then right) */
    MPI_Comm ring;
    int dims[1] = {size}, periods[1] = {1}, src, dst;
    M_OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
    M_OK(MPI_Cart_shift(ring, 0, 1, &src, &dst));
    int mine[2] = {rank * 10, rank * 10 + 1}, got[2] = {-1, -1};
    M_OK(MPI_Neighbor_alltoall(mine, 1, MPI_INT, got, 1, MPI_INT, ring));
    /* my left neighbour sent me its "right" block, my right one its "left" block */
    TH_CHECK(got[0] == src * 10 + 1 && got[1] == dst * 10, "neighbor_alltoall (%d, %d), left %d right %d", got[0],
             got[1], src, dst);
    M_OK(MPI_Neighbor_allgather(&rank, 1, MPI_INT, got, 1, MPI_INT, ring));
    TH_CHECK(got[0] == src && got[1] == dst, "neighbor_allgather (%d, %d)", got[0], got[1]);
    MPI_Request r;
    M_OK(MPI_Ineighbor_allgather(&rank, 1, MPI_INT, got, 1, MPI_INT, ring, &r));
    M_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    TH_CHECK(got[0] == src && got[1] == dst, "ineighbor_allgather");
    /* a distributed graph: everyone sends to rank 0 only */
    MPI_Comm star;
    int zero = 0, indeg = rank == 0 ? size : 0, *sources = malloc(sizeof(int) * (size_t)size), *all = sources;
    for (int i = 0; i < size; i++)
        sources[i] = i;
    M_OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, indeg, sources, MPI_UNWEIGHTED, 1, &zero, MPI_UNWEIGHTED,
                                        MPI_INFO_NULL, 0, &star));
    int *in = malloc(sizeof(int) * (size_t)size);
    M_OK(MPI_Neighbor_allgather(&rank, 1, MPI_INT, in, 1, MPI_INT, star));
    if (rank == 0)
        for (int i = 0; i < size; i++)
            TH_CHECK(in[i] == i, "dist graph gather [%d] = %d", i, in[i]);
    M_FAILS(MPI_Neighbor_allgather(&rank, 1, MPI_INT, in, 1, MPI_INT, MPI_COMM_WORLD), MPI_ERR_TOPOLOGY);
    free(all);
    free(in);
    M_OK(MPI_Comm_free(&star));
    M_OK(MPI_Comm_free(&ring));
    /* a session: its process sets, a communicator from the world's group */
    MPI_Session s;
    MPI_Group g;
    MPI_Comm sc;
    int n, len = 0;
    char name[64];
    M_OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    M_OK(MPI_Session_get_num_psets(s, MPI_INFO_NULL, &n));
    TH_CHECK(n == 2, "psets %d", n);
    M_OK(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, 0, &len, NULL));
    TH_CHECK(len == (int)sizeof("mpi://WORLD"), "pset name length %d", len);
    M_OK(MPI_Session_get_nth_pset(s, MPI_INFO_NULL, 0, &len, name));
    M_OK(MPI_Group_from_session_pset(s, name, &g));
    M_OK(MPI_Comm_create_from_group(g, "weft.test", MPI_INFO_NULL, MPI_ERRORS_RETURN, &sc));
    M_OK(MPI_Comm_size(sc, &n));
    TH_CHECK(n == size, "session comm size %d", n);
    M_OK(MPI_Barrier(sc));
    M_OK(MPI_Comm_free(&sc));
    M_OK(MPI_Group_free(&g));
    M_FAILS(MPI_Group_from_session_pset(s, "mpi://nowhere", &g), MPI_ERR_ARG);
    M_OK(MPI_Session_finalize(&s));
    M_FAILS(MPI_Session_finalize(&s), MPI_ERR_SESSION);
    return done();
}

Test(mpi, neighbourhood_collectives_and_sessions)
{
    run(1, body_neighbors);
    run(2, body_neighbors);
    run(3, body_neighbors);
}
