/* Message sizes on the command line, shared by the OSU-style harness
 * (osu.c: -m, --rotate) and contrib/bench/cuda-floor (-b, -l): a decimal
 * count with an optional suffix k, m or g (binary: 2^10, 2^20, 2^30). */
#ifndef WEFT_OSU_SIZE_H
#define WEFT_OSU_SIZE_H

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

/* Parses the size at the start of s into *out and points *end_out at what
 * follows it; 0 on success, -1 (nothing written) when s does not start with
 * a number or it overflows. */
static inline int osu_parse_size(const char *s, size_t *out, const char **end_out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    if (*end == 'k' || *end == 'K')
        v <<= 10, end++;
    else if (*end == 'm' || *end == 'M')
        v <<= 20, end++;
    else if (*end == 'g' || *end == 'G')
        v <<= 30, end++;
    *out = (size_t)v;
    *end_out = end;
    return 0;
}

#endif
