/* A 2-D heat stencil written to MPI (no weft in sight): the grid is split
 * over a Cartesian grid of ranks (MPI_Dims_create, MPI_Cart_create), each
 * step swaps halo rows and columns with the four neighbours (MPI_Cart_shift,
 * MPI_Sendrecv; a column is an MPI_Type_vector) and relaxes the interior
 * (Jacobi); MPI_Allreduce sums the residual. Fixed boundary: the top edge
 * is hot. Prints the residual and a checksum that do not depend on the
 * number of ranks.
 *
 *   weft-mpicc -O2 -o stencil stencil.c && weftrun -n 4 ./stencil [N] [steps]
 *   (or any MPI standard-ABI library: mpicc_abi ... && mpiexec -n 4 ./stencil) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The local block with a one-cell halo: (rows + 2) x (cols + 2). */
#define AT(a, i, j) (a)[(size_t)(i) * (size_t)(cols + 2) + (size_t)(j)]

/* The part of n cells that coordinate c of p gets, and where it starts. */
static int share(int n, int p, int c, int *start)
{
    int base = n / p, extra = n % p;
    *start = c * base + (c < extra ? c : extra);
    return base + (c < extra);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int n = argc > 1 ? atoi(argv[1]) : 256, steps = argc > 2 ? atoi(argv[2]) : 200;
    int size, rank, dims[2] = {0, 0}, periods[2] = {0, 0}, coords[2];
    MPI_Comm grid;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Dims_create(size, 2, dims);
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 1, &grid);
    MPI_Comm_rank(grid, &rank);
    MPI_Cart_coords(grid, rank, 2, coords);
    int up, down, left, right;
    MPI_Cart_shift(grid, 0, 1, &up, &down);
    MPI_Cart_shift(grid, 1, 1, &left, &right);

    int row0, col0;
    int rows = share(n, dims[0], coords[0], &row0), cols = share(n, dims[1], coords[1], &col0);
    size_t cells = (size_t)(rows + 2) * (size_t)(cols + 2);
    double *u = calloc(cells, sizeof(double)), *v = calloc(cells, sizeof(double));
    if (!u || !v) MPI_Abort(grid, 1);
    /* the global top edge (outside the grid) is held at 1 */
    if (up == MPI_PROC_NULL)
        for (int j = 0; j < cols + 2; j++)
            AT(u, 0, j) = AT(v, 0, j) = 1.0;

    MPI_Datatype column;
    MPI_Type_vector(rows, 1, cols + 2, MPI_DOUBLE, &column);
    MPI_Type_commit(&column);

    double residual = 0;
    for (int s = 0; s < steps; s++) {
        /* halos: rows are contiguous, columns strided */
        MPI_Sendrecv(&AT(u, 1, 1), cols, MPI_DOUBLE, up, 0, &AT(u, rows + 1, 1), cols, MPI_DOUBLE, down, 0, grid,
                     MPI_STATUS_IGNORE);
        MPI_Sendrecv(&AT(u, rows, 1), cols, MPI_DOUBLE, down, 1, &AT(u, 0, 1), cols, MPI_DOUBLE, up, 1, grid,
                     MPI_STATUS_IGNORE);
        MPI_Sendrecv(&AT(u, 1, 1), 1, column, left, 2, &AT(u, 1, cols + 1), 1, column, right, 2, grid,
                     MPI_STATUS_IGNORE);
        MPI_Sendrecv(&AT(u, 1, cols), 1, column, right, 3, &AT(u, 1, 0), 1, column, left, 3, grid, MPI_STATUS_IGNORE);
        double local = 0;
        for (int i = 1; i <= rows; i++)
            for (int j = 1; j <= cols; j++) {
                double x = 0.25 * (AT(u, i - 1, j) + AT(u, i + 1, j) + AT(u, i, j - 1) + AT(u, i, j + 1));
                local += (x - AT(u, i, j)) * (x - AT(u, i, j));
                AT(v, i, j) = x;
            }
        double *t = u;
        u = v;
        v = t;
        MPI_Allreduce(&local, &residual, 1, MPI_DOUBLE, MPI_SUM, grid);
    }

    /* a checksum weighted by global position, summed in a fixed order
     * (rank 0 adds the blocks' sums in rank order) */
    double sum = 0;
    for (int i = 1; i <= rows; i++)
        for (int j = 1; j <= cols; j++)
            sum += AT(u, i, j) * (double)((row0 + i) % 7 + (col0 + j) % 5);
    double *sums = rank == 0 ? malloc(sizeof(double) * (size_t)size) : NULL;
    MPI_Gather(&sum, 1, MPI_DOUBLE, sums, 1, MPI_DOUBLE, 0, grid);
    if (rank == 0) {
        double total = 0;
        for (int r = 0; r < size; r++)
            total += sums[r];
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len;
        MPI_Get_library_version(lib, &len);
        printf("stencil %dx%d, %d steps, %d ranks (%d x %d): residual %.6e checksum %.6f\n", n, n, steps, size, dims[0],
               dims[1], residual, total);
        printf("library: %.*s\n", (int)strcspn(lib, "\n"), lib);
        free(sums);
    }
    MPI_Type_free(&column);
    MPI_Comm_free(&grid);
    free(u);
    free(v);
    MPI_Finalize();
    return 0;
}
