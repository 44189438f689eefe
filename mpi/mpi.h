/* weft's MPI: programs include <mpi.h>; it is the MPI 5.0 standard ABI. */
#include "mpi_abi.h"
