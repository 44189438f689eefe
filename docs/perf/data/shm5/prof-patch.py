p='src/schedule.c'
s=open(p).read()
old='''int weft_sched_run(weft_sched_t *s)
{
    int rc = weft_sched_end_round(s);'''
new='''#include <time.h>
#include <unistd.h>
#include <stdio.h>
static double xp_now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
static struct { double t_run, t_prog, t_first; long calls, polls, progs, handover; } xp[2];
double weft_xp_entry;
static void xp_dump(void)
{
    for (int i = 0; i < 2; i++)
        if (xp[i].calls)
            fprintf(stderr, "XPROF pid %d %s calls %ld run %.3f us first-poll %.3f us polls %.1f progs %.2f prog %.3f us handover %ld\\n",
                    (int)getpid(), i ? "other" : "allreduce", xp[i].calls, xp[i].t_run / xp[i].calls, xp[i].t_first / xp[i].calls,
                    (double)xp[i].polls / xp[i].calls, (double)xp[i].progs / xp[i].calls, xp[i].t_prog / xp[i].calls, xp[i].handover);
}
int weft_sched_run(weft_sched_t *s)
{
    static int xp_on = -1;
    if (xp_on < 0) { xp_on = getenv("WEFT_X_PROF") != NULL; if (xp_on) atexit(xp_dump); }
    int xi = weft_xp_entry > 0 ? 0 : 1; (void)s;
    double xt0 = xp_on ? xp_now() : 0;
    if (xp_on) { xp[xi].calls++; if (weft_xp_entry > 0) xp[xi].t_first += xt0 - weft_xp_entry; weft_xp_entry = 0; }
    int rc = weft_sched_end_round(s);'''
assert old in s; s=s.replace(old,new)
old='''            rc = run_locals(s);
            if (rc != SCHED_PENDING) {'''
new='''            rc = run_locals(s);
            if (xp_on) xp[xi].polls++;
            if (rc != SCHED_PENDING) {
                if (xp_on) xp[xi].t_run += xp_now() - xt0;'''
assert old in s; s=s.replace(old,new)
old='''            if (active || polls % INLINE_PROGRESS_EVERY == 0) weft_progress();
        }
    }'''
new='''            if (active || polls % INLINE_PROGRESS_EVERY == 0) {
                double xa = xp_on ? xp_now() : 0;
                weft_progress();
                if (xp_on) { xp[xi].progs++; xp[xi].t_prog += xp_now() - xa; }
            }
        }
    }
    if (xp_on) xp[xi].handover++;'''
assert old in s; s=s.replace(old,new)
open(p,'w').write(s)
p='coll/coll.c'
s=open(p).read()
old='''WEFT_API int weft_allreduce(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, weft_comm_t c)
{
'''
new='''extern double weft_xp_entry;
#include <time.h>
WEFT_API int weft_allreduce(const void *s, void *r, int64_t n, weft_dtype_t d, weft_op_t op, weft_comm_t c)
{
    { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); weft_xp_entry = t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
'''
assert old in s; s=s.replace(old,new)
open(p,'w').write(s)
