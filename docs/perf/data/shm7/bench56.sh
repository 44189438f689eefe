#!/bin/bash
# Issue 6: the barrier between calls. shm-floor's arb-chunked-ll with a tree vs an allread barrier between calls;
# weft with its default barrier (shm_allread at 2-32 ranks) vs the tree barrier (tbar), all small collectives, vs Open MPI.
B=$PWD/build-dev
export LD_LIBRARY_PATH=$B/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/bar
{
T0=$SECONDS
lscpu | grep -E "Model name"
for np in 8 16 32; do for b in 256 1024 4096; do for bb in tree allread; do
  echo "B=$bb $(timeout 60 $B/contrib/bench/shm-floor -n $np -b $b -i 20000 -B $bb arb-chunked-ll)"
done; done; done
for np in 16 8 32; do
  timeout 60 contrib/bench/compare.sh -b build-dev -o $R/bar -n $np -r 5 -p openmpi -v "tbar:WEFT_COLL_TUNE=barrier:shm" barrier -i 10000 -x 1000 | tail -n +4
  timeout 150 contrib/bench/compare.sh -b build-dev -o $R/bar -n $np -r 5 -p openmpi -v "tbar:WEFT_COLL_TUNE=barrier:shm" allreduce -m 8:4k -i 5000 -x 500 | tail -n +4
  for p in bcast reduce; do
    timeout 100 contrib/bench/compare.sh -b build-dev -o $R/bar -n $np -r 3 -p openmpi -v "tbar:WEFT_COLL_TUNE=barrier:shm" $p -m 8:4k -i 5000 -x 500 | tail -n +4
  done
  echo "-- np $np at $((SECONDS-T0)) s"
done
} > $OUT/bench56.log 2>&1
tar czf $OUT/r56.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench56.log | tail -c 16000
