/* Init and finalize, thread levels, versions, time, abort, and the ABI's
 * own queries. MPI_Init is weft_init (whichever bootstrap the launcher
 * implies); MPI_COMM_SELF is a split of the world made at init. */
#include "mpi_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int mpi_state;
int mpi_thread_level = MPI_THREAD_SINGLE;
static pthread_t main_thread;
struct MPI_ABI_Comm mpi_comm_world_obj, mpi_comm_self_obj;

static int predefined_comm(struct MPI_ABI_Comm *c, weft_comm_t wc, int handle, const char *name)
{
    memset(c, 0, sizeof(*c));
    c->h.magic = MPI_MAGIC_BASE + MPI_K_COMM;
    c->h.refs = 1;
    c->wc = wc;
    c->predefined = handle;
    c->errh = &mpi_errh_fatal;
    c->info = mpi_info_new();
    snprintf(c->name, sizeof(c->name), "%s", name);
    return mpi_comm_fill_world(c);
}

/* The runtime (weft and the predefined communicators) is up while the
 * world model (MPI_Init .. MPI_Finalize) or a session needs it. */
static int world_model; /* 0 before MPI_Init, 1 after, 2 after MPI_Finalize */
int mpi_sessions;

int mpi_runtime_up(int *argc, char ***argv, const char *fn)
{
    if (mpi_state == 1) return MPI_SUCCESS;
    if (mpi_state == 2) return mpi_err(NULL, MPI_ERR_OTHER, fn, "MPI cannot be initialized again once finalized");
    int rc = weft_init(argc, argv);
    if (rc) return mpi_err(NULL, mpi_class_of_weft(rc), fn, "weft_init failed: %s", weft_last_error());
    mpi_dtype_init();
    weft_comm_t world = weft_comm_world(), self = NULL;
    int rank;
    weft_comm_rank(world, &rank);
    if ((rc = weft_comm_split(world, rank, 0, WEFT_OPTIONS_NULL, &self))) {
        weft_finalize();
        return mpi_err(NULL, mpi_class_of_weft(rc), fn, "cannot make MPI_COMM_SELF: %s", weft_last_error());
    }
    mpi_state = 1;
    if (predefined_comm(&mpi_comm_world_obj, world, 0x101, "MPI_COMM_WORLD") ||
        predefined_comm(&mpi_comm_self_obj, self, 0x102, "MPI_COMM_SELF"))
        return mpi_err(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    main_thread = pthread_self();
    return MPI_SUCCESS;
}

/* Ends the runtime when neither the world model nor a session uses it. */
int mpi_runtime_down_if_unused(const char *fn)
{
    if (mpi_state != 1 || world_model == 1 || mpi_sessions > 0) return MPI_SUCCESS;
    mpi_bsend_detach_all();
    if (mpi_comm_self_obj.nbr_wc) weft_comm_free(&mpi_comm_self_obj.nbr_wc);
    if (mpi_comm_world_obj.nbr_wc) weft_comm_free(&mpi_comm_world_obj.nbr_wc);
    weft_comm_free(&mpi_comm_self_obj.wc);
    int rc = weft_finalize();
    mpi_comm_world_obj.wc = NULL;
    mpi_state = 2;
    if (rc) return mpi_err(NULL, mpi_class_of_weft(rc), fn, "weft_finalize failed: %s", weft_last_error());
    return MPI_SUCCESS;
}

static int init(int *argc, char ***argv, int required, int *provided, const char *fn)
{
    if (world_model == 1) return mpi_err(NULL, MPI_ERR_OTHER, fn, "MPI is already initialized");
    if (world_model == 2) return mpi_err(NULL, MPI_ERR_OTHER, fn, "MPI cannot be initialized again after MPI_Finalize");
    int rc = mpi_runtime_up(argc, argv, fn);
    if (rc) return rc;
    world_model = 1;
    /* weft takes one thread at a time: MPI_THREAD_SERIALIZED at most. */
    mpi_thread_level = required > MPI_THREAD_SERIALIZED ? MPI_THREAD_SERIALIZED : required;
    if (mpi_thread_level < MPI_THREAD_SINGLE) mpi_thread_level = MPI_THREAD_SINGLE;
    if (provided) *provided = mpi_thread_level;
    return MPI_SUCCESS;
}

MPI_DEF(int, Init, (int *argc, char ***argv))
{
    return init(argc, argv, MPI_THREAD_SINGLE, NULL, "MPI_Init");
}

MPI_DEF(int, Init_thread, (int *argc, char ***argv, int required, int *provided))
{
    if (required != MPI_THREAD_SINGLE && required != MPI_THREAD_FUNNELED && required != MPI_THREAD_SERIALIZED &&
        required != MPI_THREAD_MULTIPLE)
        return mpi_err(NULL, MPI_ERR_ARG, "MPI_Init_thread", "invalid thread level %d", required);
    return init(argc, argv, required, provided, "MPI_Init_thread");
}

MPI_DEF(int, Initialized, (int *flag))
{
    if (!flag) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Initialized", "NULL flag");
    *flag = world_model >= 1;
    return MPI_SUCCESS;
}

MPI_DEF(int, Finalized, (int *flag))
{
    if (!flag) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Finalized", "NULL flag");
    *flag = world_model == 2;
    return MPI_SUCCESS;
}

MPI_DEF(int, Query_thread, (int *provided))
{
    if (!provided) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Query_thread", "NULL provided");
    *provided = mpi_thread_level;
    return MPI_SUCCESS;
}

MPI_DEF(int, Is_thread_main, (int *flag))
{
    MPI_CHECK_INIT("MPI_Is_thread_main");
    if (!flag) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Is_thread_main", "NULL flag");
    *flag = pthread_equal(main_thread, pthread_self());
    return MPI_SUCCESS;
}

MPI_DEF(int, Finalize, (void))
{
    if (world_model != 1)
        return mpi_err(NULL, MPI_ERR_OTHER, "MPI_Finalize", "%s",
                       world_model ? "called after MPI_Finalize" : "called before MPI_Init");
    /* MPI says: MPI_COMM_SELF's attributes are deleted first, as if it were freed. */
    mpi_attr_delete_all(MPI_K_COMM, &mpi_comm_self_obj, &mpi_comm_self_obj.attrs);
    mpi_attr_delete_all(MPI_K_COMM, &mpi_comm_world_obj, &mpi_comm_world_obj.attrs);
    mpi_bsend_detach_all();
    world_model = 2;
    return mpi_runtime_down_if_unused("MPI_Finalize");
}

MPI_DEF(int, Abort, (MPI_Comm comm, int errorcode))
{
    struct MPI_ABI_Comm *c = mpi_comm_get(comm);
    fprintf(stderr, "weft MPI: MPI_Abort(%s, %d) called\n", c ? c->name : "invalid communicator", errorcode);
    fflush(stderr);
    if (mpi_state == 1) weft_comm_abort(mpi_comm_world_obj.wc, errorcode);
    _Exit(errorcode ? errorcode : 1);
}

MPI_DEF(int, Get_version, (int *version, int *subversion))
{
    if (!version || !subversion) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Get_version", "NULL output");
    *version = MPI_VERSION;
    *subversion = MPI_SUBVERSION;
    return MPI_SUCCESS;
}

MPI_DEF(int, Get_library_version, (char *version, int *resultlen))
{
    if (!version || !resultlen) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Get_library_version", "NULL output");
    int n = snprintf(version, MPI_MAX_LIBRARY_VERSION_STRING, "weft %s (MPI %d.%d standard ABI %d.%d; UCX %s)",
                     weft_version_string(), MPI_VERSION, MPI_SUBVERSION, MPI_ABI_VERSION, MPI_ABI_SUBVERSION,
                     weft_ucx_version());
    *resultlen = n < MPI_MAX_LIBRARY_VERSION_STRING ? n : MPI_MAX_LIBRARY_VERSION_STRING - 1;
    return MPI_SUCCESS;
}

MPI_DEF(int, Get_processor_name, (char *name, int *resultlen))
{
    if (!name || !resultlen) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Get_processor_name", "NULL output");
    if (gethostname(name, MPI_MAX_PROCESSOR_NAME)) snprintf(name, MPI_MAX_PROCESSOR_NAME, "localhost");
    name[MPI_MAX_PROCESSOR_NAME - 1] = '\0';
    *resultlen = (int)strlen(name);
    return MPI_SUCCESS;
}

MPI_DEF(double, Wtime, (void))
{
    return weft_wtime();
}

MPI_DEF(double, Wtick, (void))
{
    struct timespec ts;
    if (clock_getres(CLOCK_MONOTONIC, &ts)) return 1e-9;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

MPI_DEF(int, Pcontrol, (const int level, ...))
{
    (void)level;
    return MPI_SUCCESS;
}

MPI_DEF(int, Abi_get_version, (int *abi_major, int *abi_minor))
{
    if (!abi_major || !abi_minor) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Abi_get_version", "NULL output");
    *abi_major = MPI_ABI_VERSION;
    *abi_minor = MPI_ABI_SUBVERSION;
    return MPI_SUCCESS;
}

MPI_DEF(int, Abi_get_info, (MPI_Info * info))
{
    if (!info) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Abi_get_info", "NULL output");
    struct MPI_ABI_Info *i = mpi_info_new();
    char v[32];
    if (!i) return mpi_err(NULL, MPI_ERR_NO_MEM, "MPI_Abi_get_info", "out of memory");
    snprintf(v, sizeof(v), "%zu", sizeof(MPI_Aint));
    mpi_info_set(i, "mpi_aint_size", v);
    snprintf(v, sizeof(v), "%zu", sizeof(MPI_Count));
    mpi_info_set(i, "mpi_count_size", v);
    snprintf(v, sizeof(v), "%zu", sizeof(MPI_Offset));
    mpi_info_set(i, "mpi_offset_size", v);
    mpi_info_set(i, "mpi_library", "weft");
    *info = i;
    return MPI_SUCCESS;
}

/* No Fortran here: MPI_INFO_NULL says so; the setters are accepted. */
MPI_DEF(int, Abi_get_fortran_info, (MPI_Info * info))
{
    if (!info) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Abi_get_fortran_info", "NULL output");
    *info = MPI_INFO_NULL;
    return MPI_SUCCESS;
}

MPI_DEF(int, Abi_set_fortran_info, (MPI_Info info))
{
    (void)info;
    return MPI_SUCCESS;
}

MPI_DEF(int, Abi_get_fortran_booleans, (int logical_size, void *logical_true, void *logical_false, int *is_set))
{
    (void)logical_size, (void)logical_true, (void)logical_false;
    if (!is_set) return mpi_err(NULL, MPI_ERR_ARG, "MPI_Abi_get_fortran_booleans", "NULL is_set");
    *is_set = 0;
    return MPI_SUCCESS;
}

MPI_DEF(int, Abi_set_fortran_booleans, (int logical_size, void *logical_true, void *logical_false))
{
    (void)logical_size, (void)logical_true, (void)logical_false;
    return MPI_SUCCESS;
}
