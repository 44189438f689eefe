/* Status codes, their names, and each thread's last error message. */
#include "weft_internal.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[1024];

WEFT_API const char *weft_strerror(int status)
{
    WEFT_API_ENTER();
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
    return last_error;
}

void weft_error_clear(void)
{
    last_error[0] = '\0';
}

int weft_error_at(int level, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    weft_log(level, "%s (%s)", last_error, weft_strerror(status));
    return status;
}
