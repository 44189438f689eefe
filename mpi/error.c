/* Error classes, codes, strings and error handlers.
 *
 * An error raised here gets a code of its own that carries the message
 * (which function, which argument), so MPI_Error_string on a code
 * returned under MPI_ERRORS_RETURN says what went wrong, not only the
 * class: codes MSG_BASE.. hold the class in their low CLS_BITS bits (an
 * old code's class stays right however many errors came since) and a slot
 * of that class's ring of the last MSG_SLOTS messages above them.
 * Classes and codes that the program adds (MPI_Add_error_*) are numbered
 * from USER_BASE up. */
#include "mpi_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSG_BASE  0x3000
#define MSG_RING  0x1000
#define USER_BASE 0x4000
#define CLS_BITS  6
#define MSG_SLOTS (MSG_RING >> CLS_BITS)

static struct {
    int used;
    char text[256];
} ring[MSG_RING]; /* by code - MSG_BASE: slot << CLS_BITS | class */
static unsigned ring_next[1 << CLS_BITS];

typedef struct user_code {
    int cls; /* itself for a class */
    char *text;
} user_code_t;
static user_code_t *user_codes;
static int n_user_codes;
int mpi_last_used_code = MPI_ERR_ABI;

struct MPI_ABI_Errhandler mpi_errh_fatal = {.h = {MPI_MAGIC_BASE + MPI_K_ERRH, 1}, .predefined = 0x141};
struct MPI_ABI_Errhandler mpi_errh_abort = {.h = {MPI_MAGIC_BASE + MPI_K_ERRH, 1}, .predefined = 0x142};
struct MPI_ABI_Errhandler mpi_errh_return = {.h = {MPI_MAGIC_BASE + MPI_K_ERRH, 1}, .predefined = 0x143};
/* Errors of files go to MPI_FILE_NULL's handler (MPI_ERRORS_RETURN by default). */
static struct MPI_ABI_Errhandler *file_null_errh = &mpi_errh_return;
/* Before MPI_Init, after MPI_Finalize and for errors tied to no object. */
static struct MPI_ABI_Errhandler *initial_errh = &mpi_errh_fatal;

static const char *const class_text[] = {
    [MPI_SUCCESS] = "no error",
    [MPI_ERR_BUFFER] = "invalid buffer pointer",
    [MPI_ERR_COUNT] = "invalid count argument",
    [MPI_ERR_TYPE] = "invalid datatype",
    [MPI_ERR_TAG] = "invalid tag",
    [MPI_ERR_COMM] = "invalid communicator",
    [MPI_ERR_RANK] = "invalid rank",
    [MPI_ERR_REQUEST] = "invalid request",
    [MPI_ERR_ROOT] = "invalid root",
    [MPI_ERR_GROUP] = "invalid group",
    [MPI_ERR_OP] = "invalid operation",
    [MPI_ERR_TOPOLOGY] = "invalid topology",
    [MPI_ERR_DIMS] = "invalid dimension argument",
    [MPI_ERR_ARG] = "invalid argument of some other kind",
    [MPI_ERR_UNKNOWN] = "unknown error",
    [MPI_ERR_TRUNCATE] = "message truncated",
    [MPI_ERR_OTHER] = "known error not in this list",
    [MPI_ERR_INTERN] = "internal error",
    [MPI_ERR_PENDING] = "pending request",
    [MPI_ERR_IN_STATUS] = "error code is in status",
    [MPI_ERR_ACCESS] = "permission denied",
    [MPI_ERR_AMODE] = "invalid file access mode",
    [MPI_ERR_ASSERT] = "invalid assert argument",
    [MPI_ERR_BAD_FILE] = "invalid file name",
    [MPI_ERR_BASE] = "invalid base address",
    [MPI_ERR_CONVERSION] = "data conversion error",
    [MPI_ERR_DISP] = "invalid displacement",
    [MPI_ERR_DUP_DATAREP] = "data representation already defined",
    [MPI_ERR_FILE_EXISTS] = "file exists",
    [MPI_ERR_FILE_IN_USE] = "file in use",
    [MPI_ERR_FILE] = "invalid file handle",
    [MPI_ERR_INFO_KEY] = "info key too long",
    [MPI_ERR_INFO_NOKEY] = "info key not defined",
    [MPI_ERR_INFO_VALUE] = "info value too long",
    [MPI_ERR_INFO] = "invalid info object",
    [MPI_ERR_IO] = "I/O error",
    [MPI_ERR_KEYVAL] = "invalid attribute key",
    [MPI_ERR_LOCKTYPE] = "invalid lock type",
    [MPI_ERR_NAME] = "invalid service name",
    [MPI_ERR_NO_MEM] = "out of memory",
    [MPI_ERR_NOT_SAME] = "collective arguments not identical",
    [MPI_ERR_NO_SPACE] = "not enough space",
    [MPI_ERR_NO_SUCH_FILE] = "no such file",
    [MPI_ERR_PORT] = "invalid port name",
    [MPI_ERR_QUOTA] = "quota exceeded",
    [MPI_ERR_READ_ONLY] = "read-only file or file system",
    [MPI_ERR_RMA_ATTACH] = "memory cannot be attached",
    [MPI_ERR_RMA_CONFLICT] = "conflicting accesses to a window",
    [MPI_ERR_RMA_RANGE] = "target memory outside the window",
    [MPI_ERR_RMA_SHARED] = "memory cannot be shared",
    [MPI_ERR_RMA_SYNC] = "wrong synchronization of RMA calls",
    [MPI_ERR_SERVICE] = "invalid service name",
    [MPI_ERR_SIZE] = "invalid size argument",
    [MPI_ERR_SPAWN] = "error spawning processes",
    [MPI_ERR_UNSUPPORTED_DATAREP] = "unsupported data representation",
    [MPI_ERR_UNSUPPORTED_OPERATION] = "unsupported operation",
    [MPI_ERR_WIN] = "invalid window",
    [MPI_ERR_RMA_FLAVOR] = "wrong window flavor",
    [MPI_ERR_PROC_ABORTED] = "a process was aborted or lost",
    [MPI_ERR_VALUE_TOO_LARGE] = "value too large to store",
    [MPI_ERR_SESSION] = "invalid session",
    [MPI_ERR_ERRHANDLER] = "invalid error handler",
    [MPI_ERR_ABI] = "ABI mismatch",
};
#define N_CLASSES ((int)(sizeof(class_text) / sizeof(class_text[0])))
_Static_assert(N_CLASSES <= 1 << CLS_BITS, "an error class fits a message code's class bits");

static const char *class_name(int cls)
{
    static const char *const names[] = {"MPI_SUCCESS",
                                        "MPI_ERR_BUFFER",
                                        "MPI_ERR_COUNT",
                                        "MPI_ERR_TYPE",
                                        "MPI_ERR_TAG",
                                        "MPI_ERR_COMM",
                                        "MPI_ERR_RANK",
                                        "MPI_ERR_REQUEST",
                                        "MPI_ERR_ROOT",
                                        "MPI_ERR_GROUP",
                                        "MPI_ERR_OP",
                                        "MPI_ERR_TOPOLOGY",
                                        "MPI_ERR_DIMS",
                                        "MPI_ERR_ARG",
                                        "MPI_ERR_UNKNOWN",
                                        "MPI_ERR_TRUNCATE",
                                        "MPI_ERR_OTHER",
                                        "MPI_ERR_INTERN",
                                        "MPI_ERR_PENDING",
                                        "MPI_ERR_IN_STATUS",
                                        "MPI_ERR_ACCESS",
                                        "MPI_ERR_AMODE",
                                        "MPI_ERR_ASSERT",
                                        "MPI_ERR_BAD_FILE",
                                        "MPI_ERR_BASE",
                                        "MPI_ERR_CONVERSION",
                                        "MPI_ERR_DISP",
                                        "MPI_ERR_DUP_DATAREP",
                                        "MPI_ERR_FILE_EXISTS",
                                        "MPI_ERR_FILE_IN_USE",
                                        "MPI_ERR_FILE",
                                        "MPI_ERR_INFO_KEY",
                                        "MPI_ERR_INFO_NOKEY",
                                        "MPI_ERR_INFO_VALUE",
                                        "MPI_ERR_INFO",
                                        "MPI_ERR_IO",
                                        "MPI_ERR_KEYVAL",
                                        "MPI_ERR_LOCKTYPE",
                                        "MPI_ERR_NAME",
                                        "MPI_ERR_NO_MEM",
                                        "MPI_ERR_NOT_SAME",
                                        "MPI_ERR_NO_SPACE",
                                        "MPI_ERR_NO_SUCH_FILE",
                                        "MPI_ERR_PORT",
                                        "MPI_ERR_QUOTA",
                                        "MPI_ERR_READ_ONLY",
                                        "MPI_ERR_RMA_ATTACH",
                                        "MPI_ERR_RMA_CONFLICT",
                                        "MPI_ERR_RMA_RANGE",
                                        "MPI_ERR_RMA_SHARED",
                                        "MPI_ERR_RMA_SYNC",
                                        "MPI_ERR_SERVICE",
                                        "MPI_ERR_SIZE",
                                        "MPI_ERR_SPAWN",
                                        "MPI_ERR_UNSUPPORTED_DATAREP",
                                        "MPI_ERR_UNSUPPORTED_OPERATION",
                                        "MPI_ERR_WIN",
                                        "MPI_ERR_RMA_FLAVOR",
                                        "MPI_ERR_PROC_ABORTED",
                                        "MPI_ERR_VALUE_TOO_LARGE",
                                        "MPI_ERR_SESSION",
                                        "MPI_ERR_ERRHANDLER",
                                        "MPI_ERR_ABI"};
    return cls >= 0 && cls < (int)(sizeof(names) / sizeof(names[0])) ? names[cls] : "user error class";
}

/* The class of a code, or -1 when the code is not one. */
static int code_class(int code)
{
    if (code >= 0 && code < N_CLASSES) return code;
    if (code >= MSG_BASE && code < MSG_BASE + MSG_RING)
        return ring[code - MSG_BASE].used ? (code - MSG_BASE) & ((1 << CLS_BITS) - 1) : -1;
    if (code >= USER_BASE && code < USER_BASE + n_user_codes)
        return user_codes[code - USER_BASE].cls ? user_codes[code - USER_BASE].cls : -1;
    return -1;
}

int mpi_class_of_weft(int wrc)
{
    switch (wrc) {
    case WEFT_SUCCESS: return MPI_SUCCESS;
    case WEFT_ERR_ARG: return MPI_ERR_ARG;
    case WEFT_ERR_NO_MEMORY: return MPI_ERR_NO_MEM;
    case WEFT_ERR_TIMEOUT: return MPI_ERR_OTHER;
    case WEFT_ERR_PEER_LOST: return MPI_ERR_PROC_ABORTED;
    case WEFT_ERR_TRUNCATE: return MPI_ERR_TRUNCATE;
    case WEFT_ERR_UNSUPPORTED: return MPI_ERR_UNSUPPORTED_OPERATION;
    case WEFT_ERR_COMM: return MPI_ERR_COMM;
    case WEFT_ERR_REVOKED: return MPI_ERR_PROC_ABORTED;
    case WEFT_ERR_CANCELED: return MPI_SUCCESS;
    case WEFT_ERR_INTERNAL: return MPI_ERR_INTERN;
    default: return MPI_ERR_OTHER;
    }
}

/* cls: a predefined class (below N_CLASSES). */
static int make_code(int cls, const char *text)
{
    if (cls < 0 || cls >= N_CLASSES) cls = MPI_ERR_UNKNOWN;
    unsigned i = (ring_next[cls]++ % MSG_SLOTS) << CLS_BITS | (unsigned)cls;
    ring[i].used = 1;
    snprintf(ring[i].text, sizeof(ring[i].text), "%s", text);
    return MSG_BASE + (int)i;
}

static struct MPI_ABI_Errhandler *handler_of(struct MPI_ABI_Comm *comm)
{
    if (comm && comm->errh) return comm->errh;
    if (mpi_state == 1 && mpi_comm_self_obj.errh) return mpi_comm_self_obj.errh;
    return initial_errh;
}

int mpi_errh_invoke(struct MPI_ABI_Comm *comm, int code, const char *fn)
{
    struct MPI_ABI_Errhandler *e = handler_of(comm);
    if (e == &mpi_errh_return) return code;
    if (e == &mpi_errh_fatal || e == &mpi_errh_abort) {
        char text[MPI_MAX_ERROR_STRING];
        int len, cls = code_class(code);
        PMPI_Error_string(code, text, &len);
        fprintf(stderr, "weft MPI: %s: %s (%s)%s\n", fn, text, class_name(cls < 0 ? MPI_ERR_UNKNOWN : cls),
                e == &mpi_errh_fatal ? "; MPI_ERRORS_ARE_FATAL: aborting the job" : "; MPI_ERRORS_ABORT: aborting");
        fflush(stderr);
        if (mpi_state == 1 && mpi_comm_world_obj.wc) weft_comm_abort(mpi_comm_world_obj.wc, cls > 0 ? cls : 1);
        _Exit(cls > 0 ? cls : 1);
    }
    /* A user handler gets the handle the program knows. */
    MPI_Comm h = comm ? (comm->predefined ? (MPI_Comm)(uintptr_t)comm->predefined : comm) : MPI_COMM_SELF;
    if (e->fn_x)
        e->fn_x(h, code, e->extra_state);
    else if (e->fn)
        e->fn(&h, &code, fn);
    return code;
}

int mpi_verr(struct MPI_ABI_Comm *comm, int cls, const char *fn, const char *fmt, va_list ap)
{
    /* A code of the program's own (an attribute callback's return): passed on as it is */
    if (cls >= N_CLASSES && code_class(cls) >= 0) return mpi_errh_invoke(comm, cls, fn);
    char text[256];
    int n = snprintf(text, sizeof(text), "%s: ", fn);
    vsnprintf(text + n, sizeof(text) - (size_t)n, fmt, ap);
    return mpi_errh_invoke(comm, make_code(cls, text), fn);
}

int mpi_err(struct MPI_ABI_Comm *comm, int cls, const char *fn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = mpi_verr(comm, cls, fn, fmt, ap);
    va_end(ap);
    return rc;
}

int mpi_err_weft(struct MPI_ABI_Comm *comm, int wrc, const char *fn)
{
    return mpi_err(comm, mpi_class_of_weft(wrc), fn, "%s (%s)", weft_last_error(), weft_strerror(wrc));
}

int mpi_unsupported(const char *fn)
{
    return mpi_err(NULL, MPI_ERR_UNSUPPORTED_OPERATION, fn, "not supported by weft's MPI library");
}

/* ---- classes, codes, strings -------------------------------------- */

MPI_DEF(int, Error_class, (int errorcode, int *errorclass))
{
    int cls = code_class(errorcode);
    if (cls < 0) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Error_class", "%d is not an error code", errorcode);
    if (!errorclass) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Error_class", "NULL errorclass");
    *errorclass = cls;
    return MPI_SUCCESS;
}

MPI_DEF(int, Error_string, (int errorcode, char *string, int *resultlen))
{
    const char *text;
    if (!string || !resultlen) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Error_string", "NULL string or resultlen");
    if (errorcode >= 0 && errorcode < N_CLASSES)
        text = class_text[errorcode];
    else if (code_class(errorcode) >= 0 && errorcode < MSG_BASE + MSG_RING)
        text = ring[errorcode - MSG_BASE].text;
    else if (code_class(errorcode) >= 0)
        text = user_codes[errorcode - USER_BASE].text ? user_codes[errorcode - USER_BASE].text : "";
    else
        return mpi_err(NULL, MPI_ERR_ARG, "MPI_Error_string", "%d is not an error code", errorcode);
    snprintf(string, MPI_MAX_ERROR_STRING, "%s", text);
    *resultlen = (int)strlen(string);
    return MPI_SUCCESS;
}

static int add_code(int cls, int *out, const char *fn)
{
    if (!out) return mpi_err(NULL, MPI_ERR_ARG, fn, "NULL output");
    user_code_t *n = realloc(user_codes, sizeof(*n) * (size_t)(n_user_codes + 1));
    if (!n) return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    user_codes = n;
    int code = USER_BASE + n_user_codes;
    user_codes[n_user_codes].cls = cls < 0 ? code : cls;
    user_codes[n_user_codes].text = NULL;
    n_user_codes++;
    mpi_last_used_code = code;
    *out = code;
    return MPI_SUCCESS;
}

MPI_DEF(int, Add_error_class, (int *errorclass))
{
    return add_code(-1, errorclass, "MPI_Add_error_class");
}

MPI_DEF(int, Add_error_code, (int errorclass, int *errorcode))
{
    int cls = code_class(errorclass);
    if (cls != errorclass || (errorclass >= MSG_BASE && errorclass < MSG_BASE + MSG_RING))
        return mpi_err(NULL, MPI_ERR_ARG, "MPI_Add_error_code", "%d is not an error class", errorclass);
    return add_code(errorclass, errorcode, "MPI_Add_error_code");
}

MPI_DEF(int, Add_error_string, (int errorcode, const char *string))
{
    if (errorcode < USER_BASE || errorcode >= USER_BASE + n_user_codes)
        return mpi_err(NULL, MPI_ERR_ARG, "MPI_Add_error_string", "%d is not a code added by the program", errorcode);
    if (!string) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Add_error_string", "NULL string");
    if (strlen(string) >= MPI_MAX_ERROR_STRING)
        return mpi_err(NULL, MPI_ERR_ARG, "MPI_Add_error_string", "string longer than MPI_MAX_ERROR_STRING");
    char *s = strdup(string);
    if (!s) return mpi_err(NULL, MPI_ERR_NO_MEM, "MPI_Add_error_string", "out of memory");
    free(user_codes[errorcode - USER_BASE].text);
    user_codes[errorcode - USER_BASE].text = s;
    return MPI_SUCCESS;
}

/* MPI 5: a class or code the program added can be removed once its string
 * is (and a class once its codes are); numbers are never reused. */
static int user_index(int code)
{
    return code >= USER_BASE && code < USER_BASE + n_user_codes && user_codes[code - USER_BASE].cls ? code - USER_BASE
                                                                                                    : -1;
}

MPI_DEF(int, Remove_error_class, (int errorclass))
{
    int i = user_index(errorclass);
    if (i < 0 || user_codes[i].cls != errorclass)
        return mpi_err(NULL, MPI_ERR_ARG, "MPI_Remove_error_class", "%d is not a class the program added", errorclass);
    for (int k = 0; k < n_user_codes; k++)
        if (k != i && user_codes[k].cls == errorclass)
            return mpi_err(NULL, MPI_ERR_ARG, "MPI_Remove_error_class", "class %d still has codes", errorclass);
    if (user_codes[i].text)
        return mpi_err(NULL, MPI_ERR_ARG, "MPI_Remove_error_class", "class %d still has a string", errorclass);
    free(user_codes[i].text);
    user_codes[i].text = NULL;
    user_codes[i].cls = 0;
    return MPI_SUCCESS;
}

MPI_DEF(int, Remove_error_code, (int errorcode))
{
    int i = user_index(errorcode);
    if (i < 0 || user_codes[i].cls == errorcode)
        return mpi_err(NULL, MPI_ERR_ARG, "MPI_Remove_error_code", "%d is not a code the program added", errorcode);
    if (user_codes[i].text)
        return mpi_err(NULL, MPI_ERR_ARG, "MPI_Remove_error_code", "code %d still has a string", errorcode);
    user_codes[i].text = NULL;
    user_codes[i].cls = 0;
    return MPI_SUCCESS;
}

MPI_DEF(int, Remove_error_string, (int errorcode))
{
    int i = user_index(errorcode);
    if (i < 0)
        return mpi_err(NULL, MPI_ERR_ARG, "MPI_Remove_error_string", "%d is not a code the program added", errorcode);
    free(user_codes[i].text);
    user_codes[i].text = NULL;
    return MPI_SUCCESS;
}

/* ---- error handler objects ----------------------------------------- */

struct MPI_ABI_Errhandler *mpi_errh_get(MPI_Errhandler h)
{
    switch ((uintptr_t)h) {
    case 0x141: return &mpi_errh_fatal;
    case 0x142: return &mpi_errh_abort;
    case 0x143: return &mpi_errh_return;
    default: return (uintptr_t)h < MPI_HANDLE_INT_BASE ? NULL : mpi_obj_check(MPI_K_ERRH, h);
    }
}

static MPI_Errhandler errh_handle(struct MPI_ABI_Errhandler *e)
{
    return e->predefined ? (MPI_Errhandler)(uintptr_t)e->predefined : e;
}

void mpi_errh_ref(struct MPI_ABI_Errhandler *e)
{
    if (e && !e->predefined) e->h.refs++;
}

void mpi_errh_unref(struct MPI_ABI_Errhandler *e)
{
    if (!e || e->predefined || --e->h.refs > 0) return;
    if (e->destructor) e->destructor(e->extra_state);
    mpi_obj_release(MPI_K_ERRH, e);
}

static int errh_create(int kind, MPI_Comm_errhandler_function *fn, MPIX_Comm_errhandler_function_x *fn_x,
                       MPIX_Destructor_function *destructor, void *extra, MPI_Errhandler *out, const char *name)
{
    if ((!fn && !fn_x) || !out) return mpi_err(NULL, MPI_ERR_ARG, name, "NULL function or output handle");
    struct MPI_ABI_Errhandler *e = mpi_obj_alloc(MPI_K_ERRH);
    if (!e) return mpi_err(NULL, MPI_ERR_NO_MEM, name, "out of handles");
    e->kind = kind;
    e->fn = fn;
    e->fn_x = fn_x;
    e->destructor = destructor;
    e->extra_state = extra;
    *out = e;
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_create_errhandler, (MPI_Comm_errhandler_function * fn, MPI_Errhandler *errhandler))
{
    return errh_create(MPI_K_COMM, fn, NULL, NULL, NULL, errhandler, "MPI_Comm_create_errhandler");
}

MPI_DEF(int, Win_create_errhandler, (MPI_Win_errhandler_function * fn, MPI_Errhandler *errhandler))
{
    return errh_create('w', (MPI_Comm_errhandler_function *)(void *)fn, NULL, NULL, NULL, errhandler,
                       "MPI_Win_create_errhandler");
}

MPI_DEF(int, File_create_errhandler, (MPI_File_errhandler_function * fn, MPI_Errhandler *errhandler))
{
    return errh_create('f', (MPI_Comm_errhandler_function *)(void *)fn, NULL, NULL, NULL, errhandler,
                       "MPI_File_create_errhandler");
}

MPI_DEF(int, Session_create_errhandler, (MPI_Session_errhandler_function * fn, MPI_Errhandler *errhandler))
{
    return errh_create('s', (MPI_Comm_errhandler_function *)(void *)fn, NULL, NULL, NULL, errhandler,
                       "MPI_Session_create_errhandler");
}

MPIX_DEF(int, Comm_create_errhandler_x,
         (MPIX_Comm_errhandler_function_x * fn, MPIX_Destructor_function *destructor, void *extra,
          MPI_Errhandler *errhandler))
{
    return errh_create(MPI_K_COMM, NULL, fn, destructor, extra, errhandler, "MPIX_Comm_create_errhandler_x");
}

MPI_DEF(int, Errhandler_free, (MPI_Errhandler * errhandler))
{
    if (!errhandler) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Errhandler_free", "NULL handle pointer");
    struct MPI_ABI_Errhandler *e = mpi_errh_get(*errhandler);
    if (!e) return mpi_err(NULL, MPI_ERR_ERRHANDLER, "MPI_Errhandler_free", "invalid error handler");
    mpi_errh_unref(e);
    *errhandler = MPI_ERRHANDLER_NULL;
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_set_errhandler, (MPI_Comm comm, MPI_Errhandler errhandler))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_set_errhandler", &c);
    if (rc) return rc;
    struct MPI_ABI_Errhandler *e = mpi_errh_get(errhandler);
    if (!e || (!e->predefined && e->kind != MPI_K_COMM))
        return mpi_err(c, MPI_ERR_ERRHANDLER, "MPI_Comm_set_errhandler", "invalid error handler for a communicator");
    mpi_errh_ref(e);
    mpi_errh_unref(c->errh);
    c->errh = e;
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_get_errhandler, (MPI_Comm comm, MPI_Errhandler *errhandler))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_get_errhandler", &c);
    if (rc) return rc;
    if (!errhandler) return mpi_err(c, MPI_ERR_ARG, "MPI_Comm_get_errhandler", "NULL output");
    mpi_errh_ref(c->errh);
    *errhandler = errh_handle(c->errh);
    return MPI_SUCCESS;
}

MPI_DEF(int, Comm_call_errhandler, (MPI_Comm comm, int errorcode))
{
    struct MPI_ABI_Comm *c;
    int rc = mpi_check_comm(comm, "MPI_Comm_call_errhandler", &c);
    if (rc) return rc;
    mpi_errh_invoke(c, errorcode, "MPI_Comm_call_errhandler");
    return MPI_SUCCESS;
}

/* Files: only MPI_FILE_NULL exists here (MPI-IO is not supported), and
 * its handler is the one file errors would use. */
MPI_DEF(int, File_set_errhandler, (MPI_File file, MPI_Errhandler errhandler))
{
    if (file != MPI_FILE_NULL) return mpi_err(NULL, MPI_ERR_FILE, "MPI_File_set_errhandler", "invalid file");
    struct MPI_ABI_Errhandler *e = mpi_errh_get(errhandler);
    if (!e || (!e->predefined && e->kind != 'f'))
        return mpi_err(NULL, MPI_ERR_ERRHANDLER, "MPI_File_set_errhandler", "invalid error handler for a file");
    mpi_errh_ref(e);
    mpi_errh_unref(file_null_errh);
    file_null_errh = e;
    return MPI_SUCCESS;
}

MPI_DEF(int, File_get_errhandler, (MPI_File file, MPI_Errhandler *errhandler))
{
    if (file != MPI_FILE_NULL) return mpi_err(NULL, MPI_ERR_FILE, "MPI_File_get_errhandler", "invalid file");
    if (!errhandler) return mpi_err(NULL, MPI_ERR_ARG, "MPI_File_get_errhandler", "NULL output");
    mpi_errh_ref(file_null_errh);
    *errhandler = errh_handle(file_null_errh);
    return MPI_SUCCESS;
}

MPI_DEF(int, File_call_errhandler, (MPI_File file, int errorcode))
{
    if (file != MPI_FILE_NULL) return mpi_err(NULL, MPI_ERR_FILE, "MPI_File_call_errhandler", "invalid file");
    struct MPI_ABI_Errhandler *e = file_null_errh;
    if (e == &mpi_errh_return) return MPI_SUCCESS;
    if (e->predefined) {
        mpi_errh_invoke(NULL, errorcode, "MPI_File_call_errhandler");
        return MPI_SUCCESS;
    }
    MPI_File f = MPI_FILE_NULL;
    ((MPI_File_errhandler_function *)(void *)e->fn)(&f, &errorcode, "MPI_File_call_errhandler");
    return MPI_SUCCESS;
}

/* Windows cannot be created here: any handle is invalid. */
MPI_DEF(int, Win_set_errhandler, (MPI_Win win, MPI_Errhandler errhandler))
{
    (void)win, (void)errhandler;
    return mpi_err(NULL, MPI_ERR_WIN, "MPI_Win_set_errhandler", "invalid window (one-sided is not supported)");
}

MPI_DEF(int, Win_get_errhandler, (MPI_Win win, MPI_Errhandler *errhandler))
{
    (void)win, (void)errhandler;
    return mpi_err(NULL, MPI_ERR_WIN, "MPI_Win_get_errhandler", "invalid window (one-sided is not supported)");
}

MPI_DEF(int, Win_call_errhandler, (MPI_Win win, int errorcode))
{
    (void)win, (void)errorcode;
    return mpi_err(NULL, MPI_ERR_WIN, "MPI_Win_call_errhandler", "invalid window (one-sided is not supported)");
}

MPI_DEF(MPI_Errhandler, Errhandler_fromint, (int errhandler))
{
    if (errhandler >= 0x140 && errhandler <= 0x143) return (MPI_Errhandler)(uintptr_t)errhandler;
    void *o = mpi_obj_at(MPI_K_ERRH, errhandler - MPI_HANDLE_INT_BASE);
    return o ? o : MPI_ERRHANDLER_NULL;
}

MPI_DEF(int, Errhandler_toint, (MPI_Errhandler errhandler))
{
    uintptr_t v = (uintptr_t)errhandler;
    if (v < MPI_HANDLE_INT_BASE) return (int)v;
    int i = mpi_obj_index(MPI_K_ERRH, errhandler);
    return i < 0 ? 0x140 : MPI_HANDLE_INT_BASE + i;
}
