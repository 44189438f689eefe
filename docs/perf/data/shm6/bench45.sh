#!/bin/bash
# Issue 6: does the harness's buffer rotation (64 page-aligned buffers per
# side at small sizes) cost weft's reduce / copy-out phases? weft (phase
# marks) and Open MPI with --rotate 32m (default) and --rotate 0, same host.
B=$PWD/build-dev
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R
OSU="-i 20000 -x 2000"
{
for np in 8 16; do
  for rep in 1 2; do
  for b in 256 1024 2048; do
    for rot in 32m 0; do
      echo "== np $np b $b rot $rot rep $rep weft(prof)"
      timeout 60 mpirun -np $np --bind-to core --map-by core -x LD_LIBRARY_PATH=$B/lib-prof:$B/lib -x WEFT_X_PROF=1 \
        $B/contrib/bench/weft-osu allreduce -m $b:$b $OSU --rotate $rot 2> $R/weft-$np-$b-$rot-$rep.xt | tail -1
      echo "== np $np b $b rot $rot rep $rep openmpi"
      timeout 60 mpirun -np $np --bind-to core --map-by core $B/contrib/bench/mpi-osu allreduce -m $b:$b $OSU --rotate $rot | tail -1
    done
  done
  done
done
} > $OUT/bench45.log 2>&1
tar czf $OUT/r45.tgz -C $OUT r
rm -rf $R
tail -c 6000 $OUT/bench45.log
