/* Schedules: every collective is a small state machine of rounds. A round
 * posts its sends and receives together; when all of them completed, its
 * local steps (copies, reductions, callbacks) run in order, and the next
 * round is posted. The progress engine advances every active schedule, so
 * a blocking collective is post + wait and a nonblocking one is post. */
#ifndef WEFT_SCHEDULE_H
#define WEFT_SCHEDULE_H

#include "request.h"
#include "weft_internal.h"

typedef struct weft_sched weft_sched_t;
/* The fields polling steps read on their fast path, inline: the first
 * member of struct weft_sched (schedule.c). */
typedef struct {
    int posting; /* weft_sched_posting */
} weft_sched_hot_t;
/* A local step. Returns WEFT_SUCCESS or an error that fails the schedule. */
typedef int (*weft_sched_fn)(weft_sched_t *s, void *arg);

/* A new, empty schedule on comm, named for messages ("allgather_bruck").
 * Starting it takes the communicator's next collective sequence number:
 * every member must start its schedules on comm in the same order. */
weft_sched_t *weft_sched_create(weft_comm_t comm, const char *name);
/* Adds to the current round. buf must stay valid until the schedule ends. */
int weft_sched_send(weft_sched_t *s, const void *buf, size_t bytes, int peer);
int weft_sched_recv(weft_sched_t *s, void *buf, size_t bytes, int peer);
int weft_sched_copy(weft_sched_t *s, void *dst, const void *src, size_t bytes);
/* The schedule's buffers may be device memory: its messages are classified
 * as user messages are (UCX's CUDA transports or the staged path) and its
 * copies go through the CUDA driver. Reductions stay host-only. */
void weft_sched_device(weft_sched_t *s);
/* fn(arg) runs once when the schedule is freed, however it ends (done,
 * failed, timed out, canceled, never started), after those given before
 * it: an algorithm's release of its device state, then coll.c's release
 * of a stream that waits for a host-driven collective. Two per schedule
 * (WEFT_ERR_INTERNAL past that). */
int weft_sched_on_end(weft_sched_t *s, void (*fn)(void *), void *arg);
/* Messages of failed schedules still in flight: the transport may yet read
 * or write their buffers (a failed schedule's scratch is kept meanwhile). */
int weft_sched_adrift(void);
/* The steps added so far (a build that declines must have added none). */
int weft_sched_nops(const weft_sched_t *s);
int weft_sched_call(weft_sched_t *s, weft_sched_fn fn, void *arg);
/* A polling local step: waits on memory (flags in a shared segment), not
 * on messages. fn returns 1 when done, 0 for "not yet" (the round stays
 * pending and the progress engine calls fn again; the steps before it are
 * not repeated), or a negative status that fails the schedule. A pending
 * poll times out like any wait; fn names what it waits on with
 * weft_sched_waiting for the timeout message. */
typedef int (*weft_sched_poll_fn)(weft_sched_t *s, void *arg);
int weft_sched_poll(weft_sched_t *s, weft_sched_poll_fn fn, void *arg);
/* For messages about a pending poll: the comm rank it waits on (-1: none
 * in particular) and what, e.g. "rank 3's arrival flag" (a static string). */
void weft_sched_waiting(weft_sched_t *s, int peer, const char *what);
/* A polling step that is not done got further (a piece of a pipeline): its
 * pass counts as news for the waits, which then keep polling rather than
 * nap as after a pass without any. */
void weft_sched_progressed(weft_sched_t *s);
/* The same for a flag of comm rank peer in shared memory (flag: a static
 * string such as "arrival flag"; bell: the bell its poster rings, whose
 * bell may be NULL); the message is formatted only when a timeout needs
 * it, so a poll that waits costs no formatting. */
void weft_sched_waiting_flag(weft_sched_t *s, int peer, const char *flag, const weft_bell_ref_t *bell);
/* 1 during the pass a nonblocking collective's post runs while the
 * progress thread is on: a polling step that found what it waits for and
 * would now copy or reduce the data returns "not done" instead, so the
 * post returns at once and the thread does that work on its own CPU
 * while the caller computes (the caller's wait does it when it comes
 * first). Its own contribution (a flag, a lent buffer) it still
 * publishes at once. */
static inline int weft_sched_posting(const weft_sched_t *s)
{
    return ((const weft_sched_hot_t *)(const void *)s)->posting;
}
/* A fallback behind the steps added so far: the steps added after this
 * call (from a new round on) run only if a polling step before them
 * returns WEFT_SCHED_FALLBACK, which a component does where its shared
 * state turned out unusable on every member alike (coll/shm: a segment its
 * creator could not make, /dev/shm full); the watch is then dropped and the
 * schedule goes on at the fallback's first round, with the same sequence
 * number (so the same tags) as a schedule of the fallback alone. Otherwise
 * the schedule ends where the fallback begins. weft_sched_fallback_drop
 * forgets the mark (no fallback was built after it). */
#define WEFT_SCHED_FALLBACK (-1000)
int weft_sched_fallback_begin(weft_sched_t *s);
/* The fallback's algorithm (a static string): the schedule's name once it runs. */
void weft_sched_fallback_name(weft_sched_t *s, const char *name);
void weft_sched_fallback_drop(weft_sched_t *s);
int weft_sched_has_fallback(const weft_sched_t *s);
/* The child steps added so far. */
int weft_sched_nchildren(const weft_sched_t *s);
/* A watch over a schedule of polling steps, for the component whose
 * shared state they poll (coll/shm: its segment). start(arg) runs once
 * when the schedule starts (weft_sched_start, or weft_sched_run before
 * its first poll), in the user's call order on every rank, before any
 * step: the place to take a ticket (coll/shm's sequence numbers; steps
 * run later, after rounds of messages before them). check(arg) runs after
 * every WEFT_SCHED_WATCH_POLLS polls that found a step not done yet: a
 * negative return fails the schedule with it, so a member's failure that
 * the component can see in its shared state ends the wait at once rather
 * than at the deadline. failed(arg, rc) runs once when the schedule ends
 * with an error (a failed step, a cancel, a timeout, finalize), before its
 * scratch is freed. Either may be NULL. Costs nothing while no poll waits. */
typedef struct weft_sched_watch {
    void (*start)(void *arg);
    int (*check)(void *arg);
    void (*failed)(void *arg, int rc);
} weft_sched_watch_t;
#define WEFT_SCHED_WATCH_POLLS 64
void weft_sched_watch(weft_sched_t *s, const weft_sched_watch_t *watch, void *arg);
/* A deadline of the schedule's own, timeout_s after this call (<= 0: none):
 * once it passed, the next progress (weft_test on any request, any wait,
 * any call that polls) fails the schedule with WEFT_ERR_TIMEOUT, whether or
 * not anyone waits on its request, and its watch's failed() runs (coll/cuda:
 * the abort word). For stream-ordered calls, which nobody may wait for. */
void weft_sched_deadline(weft_sched_t *s, double timeout_s);
/* A child step: posts one nonblocking operation (a collective on a
 * sub-communicator) when its round starts, and the round waits for its
 * request with the round's messages. post returns a status and *req, or
 * WEFT_SCHED_AGAIN when it may not post yet (collectives on a
 * sub-communicator must start in the same order on all its members; the
 * engine retries on later progress, posting a round's children in order).
 * post is called with req == NULL when the schedule ends without having
 * posted the child (failure, cancel). reserve, if not NULL, runs for every
 * child of the schedule, in order, when the schedule starts (which is in
 * the user's call order on every rank): the place to take a ticket. */
#define WEFT_SCHED_AGAIN 1
typedef int (*weft_sched_post_fn)(weft_sched_t *s, void *arg, weft_request_t *req);
int weft_sched_child(weft_sched_t *s, weft_sched_post_fn post, weft_sched_fn reserve, void *arg);
/* The sequence number a started schedule took (a child collective derives
 * its own from it, so concurrent parents never cross on a sub-comm). */
unsigned weft_sched_seq(const weft_sched_t *s);
/* inout[i] = inout[i] op in[i] for count elements (op: weft_op_t, dtype: weft_dtype_t). */
int weft_sched_reduce(weft_sched_t *s, int op, int dtype, void *inout, const void *in, size_t count);
/* After a reduction of nranks contributions: WEFT_AVG divides (no-op otherwise). */
int weft_sched_op_finalize(weft_sched_t *s, int op, int dtype, void *buf, size_t count, int nranks);
/* Ends the current round; later additions go to the next one. */
int weft_sched_end_round(weft_sched_t *s);
/* The communicator a schedule runs on. */
void weft_sched_comm(const weft_sched_t *s, weft_comm_t *comm);
/* Scratch memory owned by the schedule (freed with it); NULL on failure. */
void *weft_sched_scratch(weft_sched_t *s, size_t bytes);
/* The same in pinned host memory from the device runtime's pool (returned
 * to it with the schedule), for host copies of device buffers; pageable
 * scratch where no pinned block can be had. */
void *weft_sched_scratch_pinned(weft_sched_t *s, size_t bytes);
/* Starts the schedule and returns its request (wait/test/free as any other).
 * On failure the schedule is destroyed. */
int weft_sched_start(weft_sched_t *s, weft_request_t *req);
/* After a stream-ordered call (which returns before its work is done, with
 * nobody bound to wait for it): once many schedules are active, one
 * progress pass over them, so those whose work has ended are freed. Not
 * from within a progress pass. */
void weft_sched_reap(void);
/* Destroys a schedule that was never started. */
void weft_sched_discard(weft_sched_t *s);
/* Runs the schedule to its end with the communicator's deadline (the
 * blocking collectives): a schedule of local steps only (shared memory)
 * first polls on the caller's stack, then starts and waits as any other.
 * On failure the schedule is destroyed. */
int weft_sched_run(weft_sched_t *s);
/* Waits on a schedule's request; on timeout the schedule is canceled
 * before returning, so the caller may release its buffers. */
int weft_sched_wait(weft_request_t *req);

int weft_sched_init(void);
void weft_sched_finalize(void);
/* After the transport is closed: frees the scratch that failed collectives
 * kept for their messages in flight. */
void weft_sched_cleanup(void);

#endif
