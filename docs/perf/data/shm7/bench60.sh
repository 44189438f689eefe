#!/bin/bash
# Issue 6: shm_ll with the few lines over a multiple of the ranks reduced by every rank itself (tail) vs one more line for some owners.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/tail
{
lscpu | grep -E "Model name|NUMA|Thread|Socket"
for np in 16 9 15; do
  timeout 150 contrib/bench/compare.sh -b build-dev -o $R/tail -n $np -r 7 -p openmpi \
    -v "tail:LD_LIBRARY_PATH=$PWD/build-dev/lib-tail:$PWD/build-dev/lib" allreduce -m 512:2k -i 5000 -x 500 | tail -n +4
done
} > $OUT/bench60.log 2>&1
tar czf $OUT/r60.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench60.log | tail -c 5000
