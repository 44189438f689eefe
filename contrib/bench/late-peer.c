/* late-peer: how soon the ranks waiting for a late one leave. Rank 0
 * computes (spins) LATE microseconds before each barrier while the others
 * wait in it; each waiter records when it left, rank 0 when it entered
 * (one clock: ranks of one host). Rank 0 prints the waiters' mean and
 * median of (left - entered) over the iterations, averaged over waiters:
 * the wake-up of a wait that ran past its spin (WEFT_WAIT_SPIN_US) and
 * sleeps (docs/PERFORMANCE.md section 5).
 *
 *   weftrun -n N contrib/bench/late-peer [LATE_US (5000)] [ITERS (200)]
 *   mpirun -np N --bind-to core contrib/bench/late-peer ... */
#include <stdio.h>
#include <stdlib.h>
#include <weft.h>

static void spin_us(double us)
{
    double t = weft_wtime();
    while ((weft_wtime() - t) * 1e6 < us)
        ;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int rank, n, rc = weft_init(&argc, &argv);
    if (rc != WEFT_SUCCESS) {
        fprintf(stderr, "late-peer: weft_init: %s\n", weft_last_error());
        return 1;
    }
    double late = argc > 1 ? atof(argv[1]) : 5000;
    int iters = argc > 2 ? atoi(argv[2]) : 200;
    weft_comm_t w = weft_comm_world();
    weft_comm_rank(w, &rank);
    weft_comm_size(w, &n);
    double *entered = calloc((size_t)iters, sizeof(double)), *left = calloc((size_t)iters, sizeof(double));
    if (n < 2 || iters < 1 || late < 0 || !entered || !left) {
        if (rank == 0) fprintf(stderr, "late-peer: needs 2 ranks or more, LATE_US >= 0 and ITERS >= 1\n");
        weft_finalize();
        return 2;
    }
    weft_barrier(w);
    weft_barrier(w);
    for (int i = 0; i < iters; i++) {
        if (rank == 0) {
            spin_us(late);
            entered[i] = weft_wtime();
        }
        weft_barrier(w);
        left[i] = weft_wtime();
    }
    weft_bcast(entered, iters, WEFT_FLOAT64, 0, w);
    double sum = 0;
    for (int i = 0; i < iters; i++) {
        left[i] = (left[i] - entered[i]) * 1e6;
        sum += left[i];
    }
    qsort(left, (size_t)iters, sizeof(double), by_value);
    double mine[2] = {rank ? sum / iters : 0, rank ? left[iters / 2] : 0}, all[2];
    weft_allreduce(mine, all, 2, WEFT_FLOAT64, WEFT_SUM, w);
    if (rank == 0)
        printf("rank 0 %.0f us late, %d ranks: waiters left %.1f us (mean), %.1f us (median) after it entered\n", late,
               n, all[0] / (n - 1), all[1] / (n - 1));
    free(entered);
    free(left);
    return weft_finalize() == WEFT_SUCCESS ? 0 : 1;
}
