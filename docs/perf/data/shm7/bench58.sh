#!/bin/bash
# Issue 6: at 9-32 ranks, 512 B - 2 KiB: the chunked path (shm_chunked, fetch on each flag) forced vs the defaults (shm_ll).
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/chunk
{
lscpu | grep -E "Model name"
for np in 16 32 12; do
  timeout 150 contrib/bench/compare.sh -b build-dev -o $R/chunk -n $np -r 7 -p openmpi \
    -v "chunked:WEFT_COLL_TUNE=allreduce:0-8k:shm_chunked" allreduce -m 512:2k -i 5000 -x 500 | tail -n +4
done
} > $OUT/bench58.log 2>&1
tar czf $OUT/r58.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench58.log | tail -c 5000
