/* The process's weft state and clock, and what can be asked of them
 * before or after init: src/ owns them, init/init.c fills them in. */
#include "bootstrap/bootstrap.h"
#include "weft_internal.h"

#include <signal.h>
#include <time.h>

weft_state_t weft_g;

int weft_thread_start(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg, const char *name)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(t, attr, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err == 0 && name) (void)pthread_setname_np(*t, name);
    return err;
}

WEFT_API double weft_wtime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

WEFT_API int weft_get_version(int *major, int *minor, int *patch)
{
    WEFT_API_ENTER();
    if (major) *major = WEFT_BUILD_VERSION_MAJOR;
    if (minor) *minor = WEFT_BUILD_VERSION_MINOR;
    if (patch) *patch = WEFT_BUILD_VERSION_PATCH;
    return WEFT_SUCCESS;
}

WEFT_API const char *weft_version_string(void)
{
    WEFT_API_ENTER();
    return PACKAGE_VERSION;
}

WEFT_API int weft_initialized(int *flag)
{
    WEFT_API_ENTER();
    if (!flag) return weft_error(WEFT_ERR_ARG, "weft_initialized: NULL flag pointer");
    *flag = weft_g.initialized;
    return WEFT_SUCCESS;
}

WEFT_API const char *weft_bootstrap_name(void)
{
    WEFT_API_ENTER();
    return weft_g.initialized && weft_g.bs ? weft_g.bs->name : "none";
}
