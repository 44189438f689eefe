/* A training-like loop of allreduces that survives the loss of a rank
 * (ULFM style): on an error, revoke the communicator (so every survivor
 * stops using it), shrink it to the survivors, agree on the step to resume
 * from, and carry on. Every step's sum is checked against the members of
 * the communicator that computed it.
 *
 *   shrink_loop [VICTIM STEP]   world rank VICTIM kills itself (SIGKILL)
 *                               before step STEP (default: nobody dies)
 *
 * Under Open MPI 4.1's mpirun, start it with --enable-recovery, or mpirun
 * ends the whole job when a rank dies (docs/LAUNCHING.md). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <weft.h>

#define STEPS 40
#define COUNT 1024

#define CHECK(call)                                                                                                    \
    do {                                                                                                               \
        int rc_ = (call);                                                                                              \
        if (rc_ != WEFT_SUCCESS) {                                                                                     \
            fprintf(stderr, "shrink_loop: rank %d: %s failed: %s: %s\n", rank, #call, weft_strerror(rc_),              \
                    weft_last_error());                                                                                \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

/* World rank r's gradient at a step (small integers: exact sums). */
static double grad(int r, int step, int i)
{
    return (double)((r + 1) * 100 + step + i % 7);
}

int main(int argc, char **argv)
{
    int rank = -1, size;
    CHECK(weft_init(&argc, &argv));
    weft_comm_t world = weft_comm_world(), comm = world;
    CHECK(weft_comm_rank(world, &rank));
    CHECK(weft_comm_size(world, &size));
    int victim = argc > 2 ? atoi(argv[1]) : -1, kill_step = argc > 2 ? atoi(argv[2]) : -1;
    static double x[COUNT], y[COUNT];

    for (int step = 0; step < STEPS;) {
        if (rank == victim && step == kill_step) {
            printf("shrink_loop: rank %d: dying before step %d\n", rank, step);
            fflush(stdout);
            kill(getpid(), SIGKILL);
        }
        for (int i = 0; i < COUNT; i++)
            x[i] = grad(rank, step, i);
        double t0 = weft_wtime();
        int rc = weft_allreduce(x, y, COUNT, WEFT_FLOAT64, WEFT_SUM, comm);
        if (rc == WEFT_SUCCESS) {
            int n;
            CHECK(weft_comm_size(comm, &n));
            for (int i = 0; i < COUNT; i++) {
                double want = 0;
                for (int m = 0; m < n; m++) {
                    int w;
                    CHECK(weft_comm_world_rank(comm, m, &w));
                    want += grad(w, step, i);
                }
                if (y[i] != want) {
                    fprintf(stderr, "shrink_loop: rank %d: step %d: sum[%d] = %g, expected %g\n", rank, step, i, y[i],
                            want);
                    return 1;
                }
            }
            step++;
            continue;
        }
        if (rc != WEFT_ERR_PEER_LOST && rc != WEFT_ERR_REVOKED) CHECK(rc);
        printf("shrink_loop: rank %d: step %d failed after %.0f ms: %s\n", rank, step, (weft_wtime() - t0) * 1e3,
               weft_strerror(rc));
        /* Every survivor must stop using comm: some may still be blocked in
         * a step that cannot finish, others may have finished it. */
        CHECK(weft_comm_revoke(comm));
        weft_comm_t survivors;
        CHECK(weft_comm_shrink(comm, &survivors));
        if (comm != world) CHECK(weft_comm_free(&comm));
        comm = survivors;
        /* Resume from the earliest step not every survivor completed. */
        CHECK(weft_allreduce(WEFT_IN_PLACE, &step, 1, WEFT_INT32, WEFT_MIN, comm));
        int n;
        CHECK(weft_comm_size(comm, &n));
        printf("shrink_loop: rank %d: continuing on %d of %d ranks from step %d\n", rank, n, size, step);
    }
    int n, me;
    CHECK(weft_comm_size(comm, &n));
    CHECK(weft_comm_rank(comm, &me));
    if (me == 0) printf("shrink_loop: %d of %d ranks finished %d steps, sums ok\n", n, size, STEPS);
    if (comm != world) CHECK(weft_comm_free(&comm));
    CHECK(weft_finalize());
    return 0;
}
