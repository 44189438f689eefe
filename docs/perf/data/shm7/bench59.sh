#!/bin/bash
# Issue 6: shm_ll with one flagged line per 128-byte pair (the adjacent-line prefetcher pulls no other writer's line) vs packed lines.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/pad
{
lscpu | grep -E "Model name|NUMA|Thread|Socket"
for np in 16 32; do
  timeout 150 contrib/bench/compare.sh -b build-dev -o $R/pad -n $np -r 5 -p openmpi \
    -v "pad:LD_LIBRARY_PATH=$PWD/build-dev/lib-pad:$PWD/build-dev/lib" allreduce -m 256:4k -i 5000 -x 500 | tail -n +4
done
} > $OUT/bench59.log 2>&1
tar czf $OUT/r59.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench59.log | tail -c 5000
