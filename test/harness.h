/* Multi-rank test helper: forks N ranks that find each other through the
 * env bootstrap (RANK / WORLD_SIZE / MASTER_ADDR=127.0.0.1 / a free
 * MASTER_PORT, and a fresh random WEFT_JOB_SECRET as weftrun sets), so
 * tests need no launcher. Children report failures with
 * TH_CHECK (message on stderr, exit status 1); Criterion assertions are
 * made only in the parent. */
#ifndef WEFT_TEST_HARNESS_H
#define WEFT_TEST_HARNESS_H

#include "weft.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*th_body_fn)(int rank, int size, void *arg);

typedef struct th_result {
    int nranks;
    int exit_code[64]; /* per rank: exit status, 128+signal, or -1 when killed at the deadline */
    int failed;        /* number of ranks with a non-zero exit_code */
    int timed_out;     /* 1 when the harness had to kill ranks at its deadline */
} th_result_t;

/* Runs body in n forked ranks (n <= 64); each child exits with body's
 * return value. env: NULL or a NULL-terminated list of "NAME=VALUE" set in
 * every child. Ranks still running after timeout_s are killed. */
th_result_t th_run(int n, th_body_fn body, void *arg, double timeout_s, const char *const *env);

/* Runs fn(arg) with stderr going to a temporary file; returns what it
 * wrote (malloc'd, NUL-terminated; "" when it could not be read). */
char *th_stderr_of(void (*fn)(void *), void *arg);

/* The environment of one process on its own (WEFT_BOOTSTRAP=single, no
 * launcher's variables), for single-process tests that call weft_init. */
void th_single_env(void);
/* A board the forked ranks share (made before th_run, so every child
 * inherits it): a rank posts a small blob (at most 256 bytes) in a slot
 * (0..15), the others wait for it there, e.g. a rendezvous handle or an
 * NCCL unique id that one rank makes. */
typedef struct th_board th_board_t;
th_board_t *th_board_new(void);
void th_board_free(th_board_t *b);
void th_board_post(th_board_t *b, int slot, const void *data, size_t len);
/* 0 once slot holds a blob (copied to data), -1 after timeout_s. */
int th_board_wait(th_board_t *b, int slot, void *data, size_t len, double timeout_s);
/* th_run with a fresh board as every rank's arg (freed afterwards). */
th_result_t th_run_with_board(int n, th_body_fn body, double timeout_s);
/* Sleeps ms milliseconds (no weft call). */
void th_nap_ms(int ms);
/* CPU time of the whole process (every thread), seconds. */
double th_cpu_seconds(void);

/* A free TCP port on 127.0.0.1 (bound and released; the kernel does not
 * hand it out again at once). */
int th_free_port(void);

/* Fills buf with a pattern derived from (seed, index), and checks it. */
void th_fill(void *buf, size_t bytes, unsigned seed);
int th_verify(const void *buf, size_t bytes, unsigned seed, size_t *bad_index);

/* A reduction input: n elements of dtype d, rank's for (seed, salt),
 * small integers held in every dtype, so every reduction order gives the
 * same bits and results compare exactly. */
void th_fill_input(void *buf, weft_dtype_t d, int64_t n, unsigned seed, int rank, int salt);
/* The reference: ranks lo..hi-1's inputs reduced with op and finalised
 * over hi - lo (malloc'd, n + 1 elements). */
void *th_reference(weft_dtype_t d, weft_op_t op, int64_t n, unsigned seed, int lo, int hi, int salt);
/* A duplicate of w whose `coll`_algorithm hint forces alg. */
weft_comm_t th_forced(weft_comm_t w, const char *coll, const char *alg);

#define TH_CHECK(cond, ...)                                                                                            \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "[%s:%d] check failed: %s: ", __FILE__, __LINE__, #cond);                                  \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, "\n");                                                                                     \
            fflush(stderr);                                                                                            \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* A weft call that must succeed. */
#define TH_OK(call)                                                                                                    \
    do {                                                                                                               \
        int th_rc_ = (call);                                                                                           \
        TH_CHECK(th_rc_ == 0, "%s returned %d (%s): %s", #call, th_rc_, weft_strerror(th_rc_), weft_last_error());     \
    } while (0)

#endif
