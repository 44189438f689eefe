/* Logging: one line per event on stderr, prefixed with the rank. */
#include "weft_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int weft_log_level = WEFT_LOG_WARN;
static int log_rank = -1;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

void weft_log_init(void)
{
    weft_log_level = weft_cfg.log_level;
}

void weft_log_set_rank(int rank)
{
    log_rank = rank;
}

void weft_log_write(int level, const char *fmt, ...)
{
    char line[1024];
    int n;
    va_list ap;

    if (level < 0) level = 0;
    if (level > WEFT_LOG_TRACE) level = WEFT_LOG_TRACE;
    if (log_rank >= 0)
        n = snprintf(line, sizeof(line), "[weft %d:%d] %s: ", log_rank, (int)getpid(), level_names[level]);
    else
        n = snprintf(line, sizeof(line), "[weft %d] %s: ", (int)getpid(), level_names[level]);
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof(line)) vsnprintf(line + n, sizeof(line) - n, fmt, ap);
    va_end(ap);
    /* One write per line so concurrent ranks do not interleave mid-line. */
    fprintf(stderr, "%s\n", line);
}

size_t weft_escape(char *out, size_t cap, const char *in, size_t len)
{
    size_t o = 0, i = 0;
    if (!cap) return 0;
    for (; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        char one[8];
        if (c == '\\')
            snprintf(one, sizeof(one), "\\\\");
        else if (c == '\n')
            snprintf(one, sizeof(one), "\\n");
        else if (c >= 0x20 && c < 0x7f)
            snprintf(one, sizeof(one), "%c", c);
        else
            snprintf(one, sizeof(one), "\\x%02x", c);
        size_t k = strlen(one);
        if (o + k + 4 > cap) break; /* room for "..." and the NUL */
        memcpy(out + o, one, k);
        o += k;
    }
    if (i < len) {
        size_t k = cap - o > 3 ? 3 : cap - o - 1;
        memcpy(out + o, "...", k);
        o += k;
    }
    out[o] = '\0';
    return o;
}

void weft_format_ranks(char *buf, size_t cap, const int *v, int n)
{
    size_t used = (size_t)snprintf(buf, cap, "%s ", n == 1 ? "rank" : "ranks");
    for (int i = 0; i < n && used < cap;) {
        int j = i;
        while (j + 1 < n && v[j + 1] == v[j] + 1)
            j++;
        if (cap - used < 48) {
            snprintf(buf + used, cap - used, "... (%d more)", n - i);
            return;
        }
        if (j > i)
            used += (size_t)snprintf(buf + used, cap - used, "%s%d-%d", i ? ", " : "", v[i], v[j]);
        else
            used += (size_t)snprintf(buf + used, cap - used, "%s%d", i ? ", " : "", v[i]);
        i = j + 1;
    }
}
