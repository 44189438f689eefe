#!/bin/bash
# Issue 6: lines fetched (chunked: copied) as each rank's flag is seen instead of after the last one (new),
# vs the previous library (weft) and Open MPI; newc: the same forced to the chunked path at 512 B - 4 KiB.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/seen
NEW="LD_LIBRARY_PATH=$PWD/build-dev/lib-new:$PWD/build-dev/lib"
{
lscpu | grep -E "Model name"
for np in ${NPS:-8 16 32}; do
  timeout 200 contrib/bench/compare.sh -b build-dev -o $R/seen -n $np -r 5 -p openmpi -v "new:$NEW" -v "newc:$NEW;WEFT_COLL_TUNE=allreduce:512-4k:shm_chunked" allreduce -m 64:4k -i 5000 -x 500 | tail -n +4
done
} > $OUT/bench46.log 2>&1
tar czf $OUT/r46.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench46.log | tail -c 8000
