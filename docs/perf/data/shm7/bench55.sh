#!/bin/bash
# Issue 6: does the OSU loop's barrier (outside the timed call) change weft's measured allreduce at 16 ranks / 1 KiB?
# weft's default barrier (shm_allread) vs the tree barrier (shm) vs Open MPI, interleaved, 5 reps each.
B=$PWD/build-dev
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OSU="-i 20000 -x 2000"
{
lscpu | grep -E "Model name"
for np in 16 32; do
for rep in 1 2 3 4 5; do
  for v in default barrier:shm barrier:dissemination; do
    T=""; [ $v != default ] && T="-x WEFT_COLL_TUNE=$v"
    echo "np $np rep $rep weft $v $(timeout 60 mpirun -np $np --bind-to core --map-by core $T $B/contrib/bench/weft-osu allreduce -m 1024:1024 $OSU | tail -1)"
  done
  echo "np $np rep $rep openmpi $(timeout 60 mpirun -np $np --bind-to core --map-by core $B/contrib/bench/mpi-osu allreduce -m 1024:1024 $OSU | tail -1)"
done
done
} > $OUT/bench55.log 2>&1
cat $OUT/bench55.log
