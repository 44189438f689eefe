/* The PMIx client library, loaded when a PMIx launcher started this process
 * (weft_bootstrap_pmix_init) instead of linked: a libweft without libpmix
 * among its needed libraries runs where no PMIx is installed (the wheel, a
 * torchrun job), and under mpirun / srun uses the launcher host's own
 * libpmix.so.2, the one that speaks its server's protocol. pmix.c calls the
 * PMIx_* names as usual; these definitions (not exported: libweft exports
 * weft_* only) forward them to the loaded library. */
#include "bootstrap/bootstrap.h"
#include "weft_internal.h"

#include <dlfcn.h>
#include <pmix.h>
#include <pthread.h>

#define PMIX_FUNCS(X)                                                                                  \
    X(pmix_status_t, Init, (pmix_proc_t * proc, pmix_info_t info[], size_t ninfo), (proc, info, ninfo)) \
    X(pmix_status_t, Finalize, (const pmix_info_t info[], size_t ninfo), (info, ninfo))                  \
    X(pmix_status_t, Abort, (int status, const char msg[], pmix_proc_t procs[], size_t nprocs),          \
      (status, msg, procs, nprocs))                                                                    \
    X(pmix_status_t, Put, (pmix_scope_t scope, const char key[], pmix_value_t *val), (scope, key, val))  \
    X(pmix_status_t, Commit, (void), ())                                                                 \
    X(pmix_status_t, Fence_nb,                                                                           \
      (const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[], size_t ninfo,                 \
       pmix_op_cbfunc_t cbfunc, void *cbdata),                                                           \
      (procs, nprocs, info, ninfo, cbfunc, cbdata))                                                      \
    X(pmix_status_t, Get,                                                                                \
      (const pmix_proc_t *proc, const char key[], const pmix_info_t info[], size_t ninfo,                \
       pmix_value_t **val),                                                                              \
      (proc, key, info, ninfo, val))                                                                     \
    X(pmix_status_t, Get_nb,                                                                             \
      (const pmix_proc_t *proc, const char key[], const pmix_info_t info[], size_t ninfo,                \
       pmix_value_cbfunc_t cbfunc, void *cbdata),                                                        \
      (proc, key, info, ninfo, cbfunc, cbdata))                                                          \
    X(pmix_status_t, Query_info_nb,                                                                      \
      (pmix_query_t queries[], size_t nqueries, pmix_info_cbfunc_t cbfunc, void *cbdata),                \
      (queries, nqueries, cbfunc, cbdata))                                                               \
    X(pmix_status_t, Register_event_handler,                                                             \
      (pmix_status_t codes[], size_t ncodes, pmix_info_t info[], size_t ninfo,                           \
       pmix_notification_fn_t evhdlr, pmix_hdlr_reg_cbfunc_t cbfunc, void *cbdata),                      \
      (codes, ncodes, info, ninfo, evhdlr, cbfunc, cbdata))                                              \
    X(pmix_status_t, Info_load,                                                                          \
      (pmix_info_t * info, const char *key, const void *data, pmix_data_type_t type),                    \
      (info, key, data, type))

#define PMIX_PTR(ret, name, params, args) ret(*name) params;
static struct {
    PMIX_FUNCS(PMIX_PTR)
    const char *(*Error_string)(pmix_status_t);
    const char *(*Proc_state_string)(pmix_proc_state_t);
    void (*Value_destruct)(pmix_value_t *);
} fn;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded;
static char why[512];

static void load(void)
{
    /* RTLD_GLOBAL: PMIx's own plugins (pmix_mca_*.so) resolve against it. */
    const char *names[] = {"libpmix.so.2", "libpmix.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !h; i++)
        if (!(h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL)) && i == 0)
            snprintf(why, sizeof(why), "%s", dlerror());
    if (!h) return;
    const char *missing = NULL;
#define PMIX_SYM(ret, name, params, args)                                                              \
    if (!(*(void **)&fn.name = dlsym(h, "PMIx_" #name)) && !missing) missing = "PMIx_" #name;
    PMIX_FUNCS(PMIX_SYM)
    PMIX_SYM(, Error_string, , )
    PMIX_SYM(, Proc_state_string, , )
    PMIX_SYM(, Value_destruct, , )
    if (missing) {
        snprintf(why, sizeof(why), "libpmix.so.2 has no %s (a PMIx older than 4?)", missing);
        return;
    }
    loaded = 1;
}

int weft_pmix_load(void)
{
    pthread_once(&once, load);
    if (loaded) return WEFT_SUCCESS;
    return weft_error(WEFT_ERR_BOOTSTRAP,
                      "started by a PMIx launcher (PMIX_* variables are set) but the PMIx client library "
                      "could not be loaded: %s; install it (Debian / Ubuntu: libpmix2) or put its "
                      "directory on LD_LIBRARY_PATH, or launch with torchrun / weftrun instead",
                      why);
}

/* Before weft_pmix_load succeeded, every call fails as PMIx does uninitialised. */
#define PMIX_FORWARD(ret, name, params, args)                                                          \
    ret PMIx_##name params { return loaded ? fn.name args : PMIX_ERR_INIT; }
PMIX_FUNCS(PMIX_FORWARD)

const char *PMIx_Error_string(pmix_status_t status)
{
    return loaded ? fn.Error_string(status) : "PMIx not loaded";
}

const char *PMIx_Proc_state_string(pmix_proc_state_t state)
{
    return loaded ? fn.Proc_state_string(state) : "PMIx not loaded";
}

void PMIx_Value_destruct(pmix_value_t *val)
{
    if (loaded) fn.Value_destruct(val);
}
