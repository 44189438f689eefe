/* Status codes, their names, and each thread's last error message. */
#include "weft_internal.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[1024];
/* While the progress thread runs (weft_progress_thread_running), it and the
 * application take turns under one lock and share one message: a failure
 * the thread meets (a schedule's step, a receive's check) is the
 * application's to read after its wait. One byte more than a message, left
 * 0: a reader never runs past the end while the thread writes. */
static char shared_error[1024 + 1];

static char *error_buf(void)
{
    return weft_progress_thread_running() ? shared_error : last_error;
}

WEFT_API const char *weft_strerror(int status)
{
    switch (status) {
    case WEFT_SUCCESS: return "success";
    case WEFT_ERR_ARG: return "invalid argument";
    case WEFT_ERR_NO_MEMORY: return "out of memory";
    case WEFT_ERR_TIMEOUT: return "timed out";
    case WEFT_ERR_PEER_LOST: return "peer lost";
    case WEFT_ERR_TRUNCATE: return "message truncated";
    case WEFT_ERR_UNSUPPORTED: return "not supported";
    case WEFT_ERR_NOT_INITIALIZED: return "not initialized";
    case WEFT_ERR_BOOTSTRAP: return "bootstrap failed";
    case WEFT_ERR_TRANSPORT: return "transport error";
    case WEFT_ERR_CANCELED: return "canceled";
    case WEFT_ERR_INTERNAL: return "internal error";
    case WEFT_ERR_ALREADY: return "already done";
    case WEFT_ERR_COMM: return "invalid communicator";
    case WEFT_ERR_REVOKED: return "communicator revoked";
    default: return "unknown status";
    }
}

WEFT_API const char *weft_last_error(void)
{
    WEFT_API_ENTER();
    return error_buf();
}

void weft_error_clear(void)
{
    error_buf()[0] = '\0';
}

int weft_error_at(int level, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *buf = error_buf();
    vsnprintf(buf, sizeof(last_error), fmt, ap);
    va_end(ap);
    weft_log(level, "%s (%s)", buf, weft_strerror(status));
    return status;
}
