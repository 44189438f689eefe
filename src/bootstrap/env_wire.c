/* The env bootstrap's wire protocol (see env_wire.h): big-endian header
 * pack / unpack, and the message helper the store and its clients share. */
#include "bootstrap/env_wire.h"

#include <endian.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void put16(uint8_t *p, uint16_t v)
{
    v = htobe16(v);
    memcpy(p, &v, 2);
}
static void put32(uint8_t *p, uint32_t v)
{
    v = htobe32(v);
    memcpy(p, &v, 4);
}
static void put64(uint8_t *p, uint64_t v)
{
    v = htobe64(v);
    memcpy(p, &v, 8);
}
static uint16_t get16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return be16toh(v);
}
static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return be32toh(v);
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return be64toh(v);
}

void weft_env_hdr_pack(uint8_t *b, unsigned kind, uint32_t rank, uint32_t size, uint64_t seq, uint64_t arg,
                       uint64_t len)
{
    put32(b + 0, STORE_MAGIC);
    put16(b + 4, (uint16_t)STORE_VERSION);
    put16(b + 6, (uint16_t)kind);
    put32(b + 8, rank);
    put32(b + 12, size);
    put64(b + 16, seq);
    put64(b + 24, arg);
    put64(b + 32, len);
}

void weft_env_hdr_unpack(const uint8_t *b, store_hdr_t *h)
{
    h->magic = get32(b + 0);
    h->version = get16(b + 4);
    h->kind = get16(b + 6);
    h->rank = get32(b + 8);
    h->size = get32(b + 12);
    h->seq = get64(b + 16);
    h->arg = get64(b + 24);
    h->len = get64(b + 32);
}

void weft_env_textf(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

void weft_env_format_ranks(char *buf, size_t cap, const int *v, int n)
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
