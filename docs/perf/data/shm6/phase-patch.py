#!/usr/bin/env python3
# Per-phase timestamps (TSC) in weft's shared-memory allreduce (chunked and
# shm_allread) and in shm-floor's arb-chunked / arb-allread, to compare the
# same protocol's phases on one host. A measurement build only: apply to a
# scratch copy of the tree, never commit the result. Output at exit, one
# line per rank when WEFT_X_PROF is set: "XT <who> calls C ph0 .. ph9" (ns
# per call between consecutive marks; a phase not passed stays 0). Applies
# to b1a7a0d (the chunked path before it fetched on each flag).
import re, sys
root = sys.argv[1] if len(sys.argv) > 1 else '.'
def patch(path, pairs):
    p = f'{root}/{path}'
    s = open(p).read()
    for old, new in pairs:
        assert s.count(old) == 1, (path, old)
        s = s.replace(old, new)
    open(p, 'w').write(s)

XT = r'''
#include <x86intrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static unsigned long long xt_acc[10], xt_last, xt_calls, xt_tsc0;
static double xt_ns0;
static int xt_on = -1, xt_in;
static double xt_wall(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static void xt_dump(void)
{
    double ghz = (double)(__rdtsc() - xt_tsc0) / (xt_wall() - xt_ns0);
    char line[512];
    int o = snprintf(line, sizeof line, "XT %s pid %d calls %llu ns", XT_WHO, (int)getpid(), xt_calls);
    for (int i = 0; i < 10; i++) o += snprintf(line + o, sizeof line - o, " %.0f", xt_calls ? xt_acc[i] / ghz / xt_calls : 0.0);
    fprintf(stderr, "%s\n", line);
}
XT_API void xt_begin(void)
{
    if (xt_on < 0) { xt_on = getenv("WEFT_X_PROF") != NULL; if (xt_on) { atexit(xt_dump); xt_tsc0 = __rdtsc(); xt_ns0 = xt_wall(); } }
    if (!xt_on) return;
    xt_in = 1; xt_calls++; xt_last = __rdtsc();
}
XT_API void xt_mark(int i)
{
    if (!xt_in) return;
    unsigned long long t = __rdtsc(); xt_acc[i] += t - xt_last; xt_last = t;
    if (i == 9) xt_in = 0;
}
'''
patch('coll/shm/segment.c', [
    ('/* ---- reduce and allreduce', XT.replace('XT_WHO', '"weft"').replace('XT_API', '') + '\n/* ---- reduce and allreduce'),
    ('''        if (!weft_shm_claim(s, op, WEFT_SHM_READ_ALL, 0)) return 0;
        memcpy(weft_shm_slot(op, sh->me), x->send, x->count * x->esize);
        weft_shm_head_publish_msg(op, WEFT_SHM_PARTIAL, CHUNKED_LEN(x));''',
     '''        if (!weft_shm_claim(s, op, WEFT_SHM_READ_ALL, 0)) return 0;
        xt_mark(2);
        memcpy(weft_shm_slot(op, sh->me), x->send, x->count * x->esize);
        weft_shm_head_publish_msg(op, WEFT_SHM_PARTIAL, CHUNKED_LEN(x));
        xt_mark(3);'''),
    ('''        if (!weft_shm_wait_heads(s, op, WEFT_SHM_PARTIAL, NULL, 0, "input flag")) return 0;''',
     '''        if (!weft_shm_wait_heads(s, op, WEFT_SHM_PARTIAL, NULL, 0, "input flag")) return 0;
        xt_mark(4);'''),
    ('''        weft_shm_head_publish(op, WEFT_SHM_RESULT);
        if (x->rc) break;''', '''        weft_shm_head_publish(op, WEFT_SHM_RESULT);
        xt_mark(5);
        if (x->rc) break;'''),
    ('''        if (!weft_shm_wait_heads(s, op, WEFT_SHM_RESULT, NULL, 0, "reduced-chunk flag")) return 0;''',
     '''        if (!weft_shm_wait_heads(s, op, WEFT_SHM_RESULT, NULL, 0, "reduced-chunk flag")) return 0;
        xt_mark(6);'''),
    ('''                memcpy((char *)x->recv + off * x->esize, weft_shm_slot(op, r) + off * x->esize, len * x->esize);
        }
        break;''', '''                memcpy((char *)x->recv + off * x->esize, weft_shm_slot(op, r) + off * x->esize, len * x->esize);
        }
        xt_mark(7);
        break;'''),
    ('''    if (op->phase == 0) {
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        x->k0 = op->k;''', '''    if (op->phase == 0) {
        xt_mark(0);
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        xt_mark(1);
        x->k0 = op->k;'''),
])
patch('coll/shm/allreduce_shm.c', [
    ('#include "op.h"\n', '#include "op.h"\nvoid xt_mark(int);\n'),
    ('''    case 0:
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        x->k0 = op->k;''', '''    case 0:
        xt_mark(0);
        if ((rc = weft_shm_op_begin(s, op)) <= 0) return rc;
        xt_mark(1);
        x->k0 = op->k;'''),
    ('''        if (!weft_shm_claim(s, op, WEFT_SHM_READ_ALL, 0)) return 0;
        memcpy(weft_shm_buf(op, sh->me, x->bytes), x->send, x->bytes);
        weft_shm_head_publish_msg(op, WEFT_SHM_RESULT, ALLREAD_LEN(x));''',
     '''        if (!weft_shm_claim(s, op, WEFT_SHM_READ_ALL, 0)) return 0;
        xt_mark(2);
        memcpy(weft_shm_buf(op, sh->me, x->bytes), x->send, x->bytes);
        weft_shm_head_publish_msg(op, WEFT_SHM_RESULT, ALLREAD_LEN(x));
        xt_mark(3);'''),
    ('''            if (!weft_shm_wait_heads(s, op, ALLREAD_EVENT, NULL, 0, "input flag")) return 0;
            x->rc = check_lens(x, NULL, sh->n);''', '''            if (!weft_shm_wait_heads(s, op, ALLREAD_EVENT, NULL, 0, "input flag")) return 0;
            xt_mark(4);
            x->rc = check_lens(x, NULL, sh->n);'''),
    ('''                weft_op_finalize((weft_op_t)x->rop, (weft_dtype_t)x->dtype, x->recv, x->count, sh->n);
            }
            if (op->nk == 2)''', '''                weft_op_finalize((weft_op_t)x->rop, (weft_dtype_t)x->dtype, x->recv, x->count, sh->n);
            }
            xt_mark(5);
            if (op->nk == 2)'''),
])
patch('coll/coll.c', [
    ('''WEFT_API int weft_allreduce(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, weft_comm_t c)
{
    return reduction(WEFT_COLL_ALLREDUCE, s, r, n, d, op, 0, c, NULL, "weft_allreduce");''',
     '''void xt_begin(void);
void xt_mark(int);
WEFT_API int weft_allreduce(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, weft_comm_t c)
{
    xt_begin();
    int xrc = reduction(WEFT_COLL_ALLREDUCE, s, r, n, d, op, 0, c, NULL, "weft_allreduce");
    xt_mark(9);
    return xrc;'''),
])
# shm-floor: the same marks in its arb-chunked and arb-allread
patch('contrib/bench/shm-floor.c', [
    ('static void arb_allread(int me, uint64_t k, int dem)', XT.replace('XT_WHO', '"floor"').replace('XT_API', 'static') + '\nstatic void arb_allread(int me, uint64_t k, int dem)'),
    ('''    reuse_wait(k);
    memcpy(payload(me, b), in_buf, bytes);
    if (dem) demote(payload(me, b), bytes);
    atomic_store_explicit(&S->slot[me][b].seq, k, memory_order_release);
    if (dem) demote(&S->slot[me][b], 64);
    wait_all(&S->slot[0][b], 4, NULL, n, k);''', '''    xt_begin();
    reuse_wait(k);
    xt_mark(2);
    memcpy(payload(me, b), in_buf, bytes);
    if (dem) demote(payload(me, b), bytes);
    atomic_store_explicit(&S->slot[me][b].seq, k, memory_order_release);
    if (dem) demote(&S->slot[me][b], 64);
    xt_mark(3);
    wait_all(&S->slot[0][b], 4, NULL, n, k);
    xt_mark(4);'''),
    ('''        add(out_buf, payload(r, b), m);
    allread_done(me, k);''', '''        add(out_buf, payload(r, b), m);
    xt_mark(5);
    allread_done(me, k);
    xt_mark(9);'''),
    ('''    reuse_wait(k);
    memcpy(S->body[me][b], in_buf, bytes);
    atomic_store_explicit(&S->slot[me][b].seq, 2 * k + 1, memory_order_release);
    wait_all(&S->slot[0][b], 4, NULL, n, 2 * k + 1);''', '''    xt_begin();
    reuse_wait(k);
    xt_mark(2);
    memcpy(S->body[me][b], in_buf, bytes);
    atomic_store_explicit(&S->slot[me][b].seq, 2 * k + 1, memory_order_release);
    xt_mark(3);
    wait_all(&S->slot[0][b], 4, NULL, n, 2 * k + 1);
    xt_mark(4);'''),
    ('''    atomic_store_explicit(&S->slot[me][b].seq, 2 * k + 2, memory_order_release);
    wait_all(&S->slot[0][b], 4, NULL, n, 2 * k + 2);''', '''    atomic_store_explicit(&S->slot[me][b].seq, 2 * k + 2, memory_order_release);
    xt_mark(5);
    wait_all(&S->slot[0][b], 4, NULL, n, 2 * k + 2);
    xt_mark(6);'''),
    ('''        if (r != me && len) memcpy(out_buf + off, S->body[r][b] + off, len * sizeof(float));
    }
    allread_done(me, k);''', '''        if (r != me && len) memcpy(out_buf + off, S->body[r][b] + off, len * sizeof(float));
    }
    xt_mark(7);
    allread_done(me, k);
    xt_mark(9);'''),
    ('''                    S->result[r] = run(proto, r);
                    _exit(0);''', '''                    S->result[r] = run(proto, r);
                    if (xt_on > 0) xt_dump();
                    _exit(0);'''),
])
print('patched', root)
