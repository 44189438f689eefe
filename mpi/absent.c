/* What weft's MPI does not provide, beyond the generated stubs: windows,
 * files and sessions have only their null handles (the converters are
 * here because they return handles), and the tool interface starts and
 * ends with nothing to offer (no control or performance variables). */
#include "mpi_impl.h"

MPI_DEF(MPI_Win, Win_fromint, (int win))
{
    (void)win;
    return MPI_WIN_NULL;
}

MPI_DEF(int, Win_toint, (MPI_Win win))
{
    (void)win;
    return (int)(uintptr_t)MPI_WIN_NULL;
}

MPI_DEF(MPI_File, File_fromint, (int file))
{
    (void)file;
    return MPI_FILE_NULL;
}

MPI_DEF(int, File_toint, (MPI_File file))
{
    (void)file;
    return (int)(uintptr_t)MPI_FILE_NULL;
}

static int t_initialized;

MPI_DEF(int, T_init_thread, (int required, int *provided))
{
    if (provided) *provided = required > MPI_THREAD_SERIALIZED ? MPI_THREAD_SERIALIZED : required;
    t_initialized++;
    return MPI_SUCCESS;
}

MPI_DEF(int, T_finalize, (void))
{
    if (!t_initialized) return MPI_T_ERR_NOT_INITIALIZED;
    t_initialized--;
    return MPI_SUCCESS;
}

#define T_NONE(name)                                                                                                   \
    MPI_DEF(int, name, (int *num))                                                                                     \
    {                                                                                                                  \
        if (!t_initialized) return MPI_T_ERR_NOT_INITIALIZED;                                                          \
        if (num) *num = 0;                                                                                             \
        return MPI_SUCCESS;                                                                                            \
    }

T_NONE(T_cvar_get_num)
T_NONE(T_pvar_get_num)
T_NONE(T_category_get_num)
T_NONE(T_source_get_num)
T_NONE(T_event_get_num)
