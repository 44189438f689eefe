#!/bin/bash
# From a fresh Debian 12 machine to weft running: installs the dependencies,
# builds, runs the examples on 4 local ranks under each launcher and the Python
# example, then prints OSU-style tables (weft alone, and weft next to Open MPI).
set -euo pipefail
cd "$(dirname "$0")/.."
# Scratch files (the benchmark's CSVs) go to a directory removed at exit.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/weft-quickstart.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
contrib/install-deps.sh
[ -x configure ] || ./autogen.sh
[ -f Makefile ] || ./configure
make -j"$(nproc)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "== weft_info"
./tools/weft_info
echo "== hello, 4 ranks, env bootstrap (weftrun sets RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)"
./tools/weftrun -n 4 --timeout 120 ./examples/hello | sort
echo "== ring, 4 ranks, env bootstrap"
./tools/weftrun -n 4 --timeout 120 ./examples/ring
echo "== ring, 4 ranks, mpirun (PMIx bootstrap)"
timeout 120 mpirun -np 4 --oversubscribe ./examples/ring
if [ -x examples/embed_mpi ]; then
    echo "== embed_mpi, 4 ranks: weft bootstrapped from MPI_Allgather"
    timeout 120 mpirun -np 4 --oversubscribe ./examples/embed_mpi
fi
# Python (contrib/python, from the tree): Debian's python3 has python3-numpy;
# a pyenv or conda python3 first on PATH has not, so it is not taken first.
py=""
for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' 2>/dev/null; then
        py=$(command -v "$p")
        break
    fi
done
if [ -n "$py" ]; then
    echo "== Python: examples/python/allreduce.py, 4 ranks ($py)"
    # Buffered output: each rank's line reaches the shared pipe in one write.
    PYTHONPATH="$PWD/contrib/python/src" WEFT_LIBRARY="$PWD" env -u PYTHONUNBUFFERED \
        ./tools/weftrun -n 4 --timeout 120 "$py" examples/python/allreduce.py | sort
else
    echo "== Python: skipped (no python3 with numpy: apt-get install python3-numpy)"
fi
echo "== OSU-style tables (weft; docs/PERFORMANCE.md has the side-by-side numbers)"
./tools/weftrun -n 2 --timeout 120 ./contrib/bench/weft-osu-latency -m 0:4k -i 2000 -x 200
./tools/weftrun -n 4 --timeout 120 ./contrib/bench/weft-osu-allreduce -m 8:64k -i 200 -x 20
if [ -x contrib/bench/mpi-osu ]; then
    echo "== the same allreduce benchmark over Open MPI, median of 3 alternating rounds each"
    contrib/bench/compare.sh -n 4 -r 3 --bind none -p openmpi -o "$scratch" allreduce -m 8:64k -i 200 -x 20
fi
