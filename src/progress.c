/* The progress engine: drives UCX and every registered hook (collective
 * schedules later). All waiting in weft goes through weft_progress(). */
#include "weft_internal.h"

#include <sched.h>
#include <stdlib.h>

#define MAX_HOOKS 32

static struct {
    weft_progress_fn fn;
    void *arg;
} hooks[MAX_HOOKS];
static int nhooks;

int weft_progress_register(weft_progress_fn fn, void *arg)
{
    if (nhooks == MAX_HOOKS) return weft_error(WEFT_ERR_NO_MEMORY, "progress engine: more than %d hooks", MAX_HOOKS);
    hooks[nhooks].fn = fn;
    hooks[nhooks].arg = arg;
    nhooks++;
    return WEFT_SUCCESS;
}

void weft_progress_unregister(weft_progress_fn fn, void *arg)
{
    for (int i = 0; i < nhooks; i++)
        if (hooks[i].fn == fn && hooks[i].arg == arg) {
            hooks[i] = hooks[--nhooks];
            return;
        }
}

const weft_transport_ops_t *weft_xport;

WEFT_API int weft_progress(void)
{
    if (WEFT_UNLIKELY(!weft_xport)) return 0;
    int events = weft_xport->progress();
    for (int i = 0; i < nhooks; i++)
        events += hooks[i].fn(hooks[i].arg);
    return events;
}

void weft_progress_idle(unsigned *idle_polls, int events)
{
    if (events) {
        *idle_polls = 0;
        return;
    }
    if (++*idle_polls >= (unsigned)weft_cfg.spin_before_yield) {
        *idle_polls = 0;
        sched_yield();
    }
}
