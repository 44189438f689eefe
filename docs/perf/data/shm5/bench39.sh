#!/bin/bash
# Issue 6: the result buffer prefetched before the wait (weft) vs not (nopf: the padded head only),
# and the chunked allreduce from 1 KiB (c1k), 8/16/32 ranks.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/pf
NOPF="LD_LIBRARY_PATH=$PWD/build-dev/lib-pad:$PWD/build-dev/lib"
C1K="WEFT_COLL_TUNE=allreduce:1k-8k:shm;WEFT_SHM_CHUNK_MIN=1024"
{
for np in 8 16 32; do
  timeout 170 contrib/bench/compare.sh -b build-dev -o $R/pf -n $np -r 5 -p openmpi -v "nopf:$NOPF" -v "c1k:$C1K" allreduce -m 64:4k -i 3000 -x 300 | tail -n +4
done
} > $OUT/bench39.log 2>&1
tar czf $OUT/r39.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench39.log | tail -c 8000
