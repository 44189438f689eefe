/* Results, messages and the log: ncclGetVersion, ncclGetErrorString,
 * ncclGetLastError, NCCL_DEBUG. Every failure keeps its full text (which
 * call, which argument, weft's own message) for ncclGetLastError, and is
 * logged at WARN. */
#include "nccl_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

pthread_mutex_t nccl_lock = PTHREAD_MUTEX_INITIALIZER;

int nccl_log_level = -1;
static FILE *log_file;
static _Thread_local char thread_error[1024];
static char process_error[1024]; /* the latest, from any thread (NCCL keeps one) */
static pthread_mutex_t error_lock = PTHREAD_MUTEX_INITIALIZER;

/* NCCL_DEBUG_FILE's %h and %p. */
static FILE *open_log_file(const char *pattern)
{
    char path[512], host[128] = "host";
    size_t n = 0;
    gethostname(host, sizeof(host) - 1);
    for (const char *p = pattern; *p && n + 1 < sizeof(path); p++) {
        if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
            int k = p[1] == 'h' ? snprintf(path + n, sizeof(path) - n, "%s", host)
                                : snprintf(path + n, sizeof(path) - n, "%d", (int)getpid());
            n += k > 0 ? (size_t)k : 0;
            if (n >= sizeof(path)) n = sizeof(path) - 1;
            p++;
        } else {
            path[n++] = *p;
        }
    }
    path[n] = '\0';
    return fopen(path, "a");
}

void nccl_log_init(void)
{
    const char *d = getenv("NCCL_DEBUG"), *f = getenv("NCCL_DEBUG_FILE");
    int level = NL_WARN;
    if (d && *d) {
        if (!strcasecmp(d, "VERSION"))
            level = NL_VERSION;
        else if (!strcasecmp(d, "WARN"))
            level = NL_WARN;
        else if (!strcasecmp(d, "INFO"))
            level = NL_INFO;
        else if (!strcasecmp(d, "TRACE"))
            level = NL_TRACE;
        else if (!strcasecmp(d, "NONE") || !strcasecmp(d, "0"))
            level = NL_NONE;
    }
    if (f && *f && !log_file) log_file = open_log_file(f);
    nccl_log_level = level;
}

void nccl_log(int level, const char *fmt, ...)
{
    if (NCCL_UNLIKELY(nccl_log_level < 0)) nccl_log_init();
    if (level > nccl_log_level) return;
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    static const char *const names[] = {"", "VERSION", "WARN", "INFO", "TRACE"};
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    FILE *out = log_file ? log_file : stderr;
    fprintf(out, "%s:%d weft-nccl %s %s\n", host, (int)getpid(), names[level], msg);
    fflush(out);
}

ncclResult_t nccl_fail(ncclResult_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(thread_error, sizeof(thread_error), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&error_lock);
    snprintf(process_error, sizeof(process_error), "%s", thread_error);
    pthread_mutex_unlock(&error_lock);
    nccl_log(NL_WARN, "%s (%s)", thread_error, nccl_result_name(code));
    return code;
}

const char *nccl_result_name(ncclResult_t r)
{
    static const char *const names[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                        "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                        "ncclRemoteError",   "ncclInProgress"};
    return (unsigned)r < sizeof(names) / sizeof(names[0]) ? names[r] : "ncclResult_t?";
}

ncclResult_t nccl_result_of(int status)
{
    switch (status) {
    case WEFT_SUCCESS: return ncclSuccess;
    case WEFT_ERR_ARG:
    case WEFT_ERR_COMM:
    case WEFT_ERR_TRUNCATE: return ncclInvalidArgument;
    case WEFT_ERR_UNSUPPORTED:
    case WEFT_ERR_NOT_INITIALIZED:
    case WEFT_ERR_ALREADY: return ncclInvalidUsage;
    case WEFT_ERR_TIMEOUT:
    case WEFT_ERR_PEER_LOST:
    case WEFT_ERR_REVOKED:
    case WEFT_ERR_CANCELED: return ncclRemoteError;
    case WEFT_ERR_NO_MEMORY:
    case WEFT_ERR_BOOTSTRAP:
    case WEFT_ERR_TRANSPORT: return ncclSystemError;
    default: return ncclInternalError;
    }
}

ncclResult_t nccl_weft_fail(int status, const char *fn)
{
    return nccl_fail(nccl_result_of(status), "%s: %s (weft: %s)", fn, weft_last_error(), weft_strerror(status));
}

NCCL_DEF(ncclResult_t, GetVersion, (int *version))
{
    if (!version) return nccl_fail(ncclInvalidArgument, "ncclGetVersion: NULL version pointer");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

NCCL_DEF(const char *, GetErrorString, (ncclResult_t result))
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (a CUDA call failed)";
    case ncclSystemError: return "unhandled system error (a system call, the network or memory failed)";
    case ncclInternalError: return "internal error - please report this issue to the weft developers";
    case ncclInvalidArgument: return "invalid argument (see ncclGetLastError for which)";
    case ncclInvalidUsage: return "invalid usage (weft cannot do this; ncclGetLastError says why)";
    case ncclRemoteError: return "remote process exited, timed out or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

NCCL_DEF(const char *, GetLastError, (ncclComm_t comm))
{
    (void)comm; /* one per thread, else the process's latest, as NCCL keeps one */
    if (thread_error[0]) return thread_error;
    return process_error;
}

NCCL_DEF(void, ResetDebugInit, (void))
{
    nccl_log_init();
}
