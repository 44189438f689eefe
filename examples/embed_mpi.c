/* Embedding weft in a code that already has MPI: weft bootstraps from the
 * host's MPI_Allgather instead of a launcher of its own.
 *   mpirun -np 4 ./embed_mpi */
#include <mpi.h>
#include <stdio.h>
#include <weft.h>

static int mpi_allgather(const void *sendbuf, void *recvbuf, size_t len, void *ctx)
{
    MPI_Comm comm = *(MPI_Comm *)ctx;
    return MPI_Allgather(sendbuf, (int)len, MPI_BYTE, recvbuf, (int)len, MPI_BYTE, comm) == MPI_SUCCESS ? 0 : 1;
}

int main(int argc, char **argv)
{
    int mpi_rank, mpi_size, rank, size;
    MPI_Comm comm = MPI_COMM_WORLD;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(comm, &mpi_rank);
    MPI_Comm_size(comm, &mpi_size);

    int rc = weft_init_oob(mpi_rank, mpi_size, mpi_allgather, &comm);
    if (rc != WEFT_SUCCESS) {
        fprintf(stderr, "weft_init_oob: %s: %s\n", weft_strerror(rc), weft_last_error());
        MPI_Abort(comm, 1);
    }
    weft_comm_rank(weft_comm_world(), &rank);
    weft_comm_size(weft_comm_world(), &size);

    /* Use weft for traffic: every rank sends its rank to rank 0. */
    int ok = rank == mpi_rank && size == mpi_size;
    if (rank == 0) {
        for (int src = 1; src < size; src++) {
            int value = -1;
            weft_status_t st;
            rc = weft_recv(&value, 1, WEFT_INT32, WEFT_ANY_SOURCE, 3, weft_comm_world(), &st);
            ok = ok && rc == WEFT_SUCCESS && value == st.source;
        }
    } else {
        rc = weft_send(&rank, 1, WEFT_INT32, 0, 3, weft_comm_world());
        ok = ok && rc == WEFT_SUCCESS;
    }
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, comm);
    if (rank == 0 && all_ok) printf("embed_mpi: weft bootstrapped from MPI_Allgather on %d ranks, ok\n", size);
    weft_finalize();
    MPI_Finalize();
    return all_ok ? 0 : 1;
}
