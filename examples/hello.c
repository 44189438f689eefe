/* The smallest weft program: start, say who we are, stop.
 *   mpirun -np 4 ./hello      srun --mpi=pmix -n 4 ./hello      weftrun -n 4 ./hello */
#include <stdio.h>
#include <weft.h>

int main(int argc, char **argv)
{
    int rank, size, local_rank, local_size;
    int rc = weft_init(&argc, &argv);
    if (rc != WEFT_SUCCESS) {
        fprintf(stderr, "weft_init: %s: %s\n", weft_strerror(rc), weft_last_error());
        return 1;
    }
    weft_comm_rank(weft_comm_world(), &rank);
    weft_comm_size(weft_comm_world(), &size);
    weft_local_rank(&local_rank);
    weft_local_size(&local_size);
    printf("hello from rank %d of %d (bootstrap %s, local rank %d of %d)\n", rank, size, weft_bootstrap_name(),
           local_rank, local_size);
    fflush(stdout);
    rc = weft_finalize();
    if (rc != WEFT_SUCCESS) fprintf(stderr, "weft_finalize: %s: %s\n", weft_strerror(rc), weft_last_error());
    return rc == WEFT_SUCCESS ? 0 : 1;
}
