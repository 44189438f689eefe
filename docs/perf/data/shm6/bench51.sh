#!/bin/bash
# Issue 6: shm_ll with a progress call every 256 idle inline polls instead of 16 (llp) vs shm_ll (ll), 16 and 32 ranks.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/progress
LL="WEFT_COLL_TUNE=allreduce:0-8k:shm_ll"
{
for np in 16 32; do
  timeout 200 contrib/bench/compare.sh -b build-dev -o $R/progress -n $np -r 5 -v "ll:$LL" -v "llp:LD_LIBRARY_PATH=$PWD/build-dev/lib-p256:$PWD/build-dev/lib;$LL" allreduce -m 256:2k -i 5000 -x 500 | tail -n +4
done
} > $OUT/bench51.log 2>&1
tar czf $OUT/r51.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench51.log | tail -c 5000
