/* The host time weft's NCCL layer adds to a call: ncclAllReduce against
 * weft_allreduce_on_stream on the same weft communicator, one float of
 * host memory, NULL stream, alternating, best of 7 rounds. Two forked
 * ranks form a world through a unique id; a one-rank communicator of it
 * (a weft group: its allreduce is a copy) shows the layer alone, the
 * two-rank one the layer beside a real collective. No GPU needed; on a GPU
 * host, weft-nccl-tests --nccl-lib weft's libnccl.so.2 gives the same with
 * device buffers (its CSV's host_us).
 *
 *   contrib/bench/nccl-overhead [ITERS]     (default 200000) */
#include "nccl_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    volatile int ready;
    ncclUniqueId id;
} board_t;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void measure(const char *what, ncclComm_t c, int rank, long iters)
{
    float x = 1, y = 0;
    double best_nccl = 1e9, best_weft = 1e9;
    for (int round = 0; round < 7; round++) {
        double t0 = now();
        for (long i = 0; i < iters; i++)
            if (ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, c, NULL)) exit(1);
        double t = (now() - t0) / (double)iters;
        best_nccl = t < best_nccl ? t : best_nccl;
        t0 = now();
        for (long i = 0; i < iters; i++)
            if (weft_allreduce_on_stream(&x, &y, 1, WEFT_FLOAT32, WEFT_SUM, c->wc, NULL, NULL)) exit(1);
        t = (now() - t0) / (double)iters;
        best_weft = t < best_weft ? t : best_weft;
    }
    if (rank == 0)
        printf("%-22s ncclAllReduce %7.3f us  weft_allreduce_on_stream %7.3f us  layer %+7.3f us\n", what,
               best_nccl * 1e6, best_weft * 1e6, (best_nccl - best_weft) * 1e6);
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 200000;
    board_t *b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED || iters < 1) return 1;
    memset(b, 0, sizeof(*b));
    fflush(stdout);
    for (int rank = 0; rank < 2; rank++) {
        if (fork() != 0) continue;
        ncclComm_t world, one;
        ncclUniqueId mine;
        if (rank == 0) {
            if (ncclGetUniqueId(&b->id)) _exit(1);
            __sync_synchronize();
            b->ready = 1;
        }
        while (!b->ready)
            usleep(100);
        if (ncclCommInitRank(&world, 2, b->id, rank) || ncclGetUniqueId(&mine) || ncclCommInitRank(&one, 1, mine, 0)) {
            fprintf(stderr, "nccl-overhead: %s\n", ncclGetLastError(NULL));
            _exit(1);
        }
        measure("1 rank (the layer)", one, rank, iters);
        measure("2 ranks, one host", world, rank, iters / 10 > 0 ? iters / 10 : 1);
        fflush(stdout);
        ncclCommDestroy(one);
        ncclCommDestroy(world);
        _exit(0);
    }
    int status, failed = 0;
    while (wait(&status) > 0)
        failed |= !WIFEXITED(status) || WEXITSTATUS(status);
    return failed;
}
