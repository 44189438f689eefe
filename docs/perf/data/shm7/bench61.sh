#!/bin/bash
# Issue 6: final defaults of session 8 (shm_ll staggered lines, strided fold, to 2 KiB on 9-16 ranks), one node,
# 8 B - 4 KiB (allreduce 7 rounds, the others 5) and allreduce 8 KiB - 4 MiB (5 rounds) vs Open MPI.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/final $R/final-large
{
T0=$SECONDS
lscpu | grep -E "Model name"
(cd build-dev/bin && timeout 100 ./test_shm --jobs 8 2>&1 | grep -E "Synthesis|\[FAIL\]|check failed" | head -8)
for np in ${NPS:-8 16 32}; do
  timeout 60 contrib/bench/compare.sh -b build-dev -o $R/final -n $np -r 5 -p openmpi barrier -i 10000 -x 1000 | tail -n +4
  timeout 150 contrib/bench/compare.sh -b build-dev -o $R/final -n $np -r 7 -p openmpi allreduce -m 8:4k -i 5000 -x 500 | tail -n +4
  for p in bcast reduce; do
    timeout 120 contrib/bench/compare.sh -b build-dev -o $R/final -n $np -r 5 -p openmpi $p -m 8:4k -i 5000 -x 500 | tail -n +4
  done
  timeout 200 contrib/bench/compare.sh -b build-dev -o $R/final-large -n $np -r 5 -p openmpi allreduce -m 8k:4m -i 300 -x 30 --iters-large 100 --warmup-large 10 | tail -n +4
  echo "-- np $np at $((SECONDS-T0)) s"
done
} > $OUT/bench61.log 2>&1
tar czf $OUT/r61.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench61.log | tail -c 16000
