#!/bin/bash
# From a fresh Debian 12 machine to weft running: installs the dependencies,
# builds, and runs the examples on 4 local ranks under each launcher.
set -euo pipefail
cd "$(dirname "$0")/.."
contrib/install-deps.sh
[ -x configure ] || ./autogen.sh
[ -f Makefile ] || ./configure
make -j"$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "== weft_info"
./src/tools/weft_info
echo "== hello, 4 ranks, env bootstrap (weftrun sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)"
./src/tools/weftrun -n 4 --timeout 120 ./examples/hello | sort
echo "== ring, 4 ranks, env bootstrap"
./src/tools/weftrun -n 4 --timeout 120 ./examples/ring
echo "== ring, 4 ranks, mpirun (PMIx bootstrap)"
timeout 120 mpirun -np 4 --oversubscribe ./examples/ring
if [ -x examples/embed_mpi ]; then
    echo "== embed_mpi, 4 ranks: weft bootstrapped from MPI_Allgather"
    timeout 120 mpirun -np 4 --oversubscribe ./examples/embed_mpi
fi
