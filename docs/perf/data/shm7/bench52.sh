#!/bin/bash
# Issue 6: shm_ll at 16/32 ranks: base (HEAD) vs staggered LL span vs stagger + inline float-sum line reduce; floor arb-chunked-ll.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/stag
T="WEFT_COLL_TUNE=allreduce:0-8k:shm_ll"
{
lscpu | grep -E "Model name"
for np in 16 32; do for b in 256 1024 2048 4096; do
  timeout 60 build-dev/contrib/bench/shm-floor -n $np -b $b -i 20000 arb-chunked-ll arb-chunked-seen
done; done
for np in 16 32; do
  timeout 250 contrib/bench/compare.sh -b build-dev -o $R/stag -n $np -r 5 -p openmpi \
    -v "base:LD_LIBRARY_PATH=$PWD/build-dev/lib-base:$PWD/build-dev/lib;$T" \
    -v "stag:LD_LIBRARY_PATH=$PWD/build-dev/lib-stag:$PWD/build-dev/lib;$T" \
    -v "fused:LD_LIBRARY_PATH=$PWD/build-dev/lib-fused:$PWD/build-dev/lib;$T" \
    allreduce -m 256:4k -i 5000 -x 500 | tail -n +4
done
} > $OUT/bench52.log 2>&1
tar czf $OUT/r52.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench52.log | tail -c 12000
