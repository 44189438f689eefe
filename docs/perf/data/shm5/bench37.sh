#!/bin/bash
# Issue 6: head line alone in its 128-byte line pair (pad) vs adjacent to the body, chunked from 512 B and allread.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/pad
T="WEFT_COLL_TUNE=allreduce:0-8k:shm;WEFT_SHM_CHUNK_MIN=512"
PAD="LD_LIBRARY_PATH=$PWD/build-dev/lib-pad:$PWD/build-dev/lib"
{
for np in 8 16; do
  timeout 170 contrib/bench/compare.sh -b build-dev -o $R/pad -n $np -r 3 -p openmpi -v "pad:$PAD" -v "c512:$T" -v "pad-c512:$PAD;$T" allreduce -m 8:4k -i 3000 -x 300 | tail -n +4
done
} > $OUT/bench37.log 2>&1
tar czf $OUT/r37.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench37.log | tail -c 8000
