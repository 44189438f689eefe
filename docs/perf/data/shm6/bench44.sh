#!/bin/bash
# Issue 6: where weft's small allreduce spends its time against the bare
# protocol on the same host: per-phase TSC marks (phase-patch.py) in weft's
# chunked / allread paths and in shm-floor's arb-chunked / arb-allread; plain
# weft and Open MPI at the same sizes for the totals.
B=$PWD/build-dev
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R
lscpu > $R/lscpu.txt
OSU="-i 20000 -x 2000"
{
for np in 8 16; do
  for b in 256 1024 2048; do
    WEFT_X_PROF=1 $B/contrib/bench/shm-floor-xt -n $np -b $b -i 20000 arb-chunked arb-allread > $R/floor-$np-$b.txt 2> $R/floor-$np-$b.xt
    cat $R/floor-$np-$b.txt
  done
  for rep in 1 2; do
  for b in 256 1024 2048; do
    for alg in shm_chunked shm_allread shm; do
      echo "== np $np alg $alg b $b rep $rep (prof)"
      timeout 60 mpirun -np $np --bind-to core --map-by core -x LD_LIBRARY_PATH=$B/lib-prof:$B/lib -x WEFT_X_PROF=1 -x WEFT_COLL_TUNE=allreduce:0-4k:$alg \
        $B/contrib/bench/weft-osu allreduce -m $b:$b $OSU 2> $R/weft-$np-$alg-$b-$rep.xt | tail -1
      echo "== np $np alg $alg b $b rep $rep (plain)"
      timeout 60 mpirun -np $np --bind-to core --map-by core -x LD_LIBRARY_PATH=$B/lib -x WEFT_COLL_TUNE=allreduce:0-4k:$alg \
        $B/contrib/bench/weft-osu allreduce -m $b:$b $OSU | tail -1
    done
    echo "== np $np openmpi b $b rep $rep"
    timeout 60 mpirun -np $np --bind-to core --map-by core $B/contrib/bench/mpi-osu allreduce -m $b:$b $OSU | tail -1
  done
  done
done
} > $OUT/bench44.log 2>&1
tar czf $OUT/r44.tgz -C $OUT r
rm -rf $R
tail -c 9000 $OUT/bench44.log
