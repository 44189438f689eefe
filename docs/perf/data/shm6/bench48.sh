#!/bin/bash
# Issue 6: shm_ll (the chunked shape on flagged lines) forced at 8 B - 4 KiB vs the defaults and Open MPI.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/ll
{
lscpu | grep -E "Model name"
for np in ${NPS:-8 16 32}; do
  timeout 200 contrib/bench/compare.sh -b build-dev -o $R/ll -n $np -r 5 -p openmpi -v "ll:WEFT_COLL_TUNE=allreduce:0-8k:shm_ll" allreduce -m 8:4k -i 5000 -x 500 | tail -n +4
done
} > $OUT/bench48.log 2>&1
tar czf $OUT/r48.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench48.log | tail -c 8000
