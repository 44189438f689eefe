#!/bin/bash
# Issue 6: session 8 defaults (shm_ll lines staggered across cache sets, one strided fold per line, claim answered by
# all_done, shm_ll to 2 KiB on 9-16 ranks) vs HEAD of session 7 (base) at 16 ranks, then the final defaults at 8/16/32.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/ab $R/final $R/final-large
{
T0=$SECONDS
lscpu | grep -E "Model name"
(cd build-dev/bin && timeout 100 ./test_shm --jobs 8 2>&1 | grep -E "Synthesis|\[FAIL\]|check failed" | head -8)
for np in 16 32; do
  timeout 150 contrib/bench/compare.sh -b build-dev -o $R/ab -n $np -r 5 -p openmpi \
    -v "base:LD_LIBRARY_PATH=$PWD/build-dev/lib-base:$PWD/build-dev/lib" allreduce -m 64:4k -i 5000 -x 500 | tail -n +4
done
echo "-- ab at $((SECONDS-T0)) s"
for np in ${NPS:-8 16 32}; do
  timeout 60 contrib/bench/compare.sh -b build-dev -o $R/final -n $np -r 5 -p openmpi barrier -i 10000 -x 1000 | tail -n +4
  for p in allreduce bcast reduce; do
    timeout 120 contrib/bench/compare.sh -b build-dev -o $R/final -n $np -r 5 -p openmpi $p -m 8:4k -i 5000 -x 500 | tail -n +4
  done
  timeout 150 contrib/bench/compare.sh -b build-dev -o $R/final-large -n $np -r 3 -p openmpi allreduce -m 8k:4m -i 300 -x 30 --iters-large 100 --warmup-large 10 | tail -n +4
  echo "-- np $np at $((SECONDS-T0)) s"
done
} > $OUT/bench54.log 2>&1
tar czf $OUT/r54.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench54.log | tail -c 16000
