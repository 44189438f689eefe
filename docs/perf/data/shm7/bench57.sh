#!/bin/bash
# Issue 6: shm_ll spinning in its step (64 scans before returning to the schedule) vs returning after each scan.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/spin
{
lscpu | grep -E "Model name"
for np in 16 32; do
  timeout 150 contrib/bench/compare.sh -b build-dev -o $R/spin -n $np -r 5 -p openmpi \
    -v "spin:LD_LIBRARY_PATH=$PWD/build-dev/lib-spin:$PWD/build-dev/lib" allreduce -m 256:2k -i 5000 -x 500 | tail -n +4
done
} > $OUT/bench57.log 2>&1
tar czf $OUT/r57.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench57.log | tail -c 5000
