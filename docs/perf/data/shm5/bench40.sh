#!/bin/bash
# Issue 6: shm_allread's group size (WEFT_SHM_RADIX) 2 / 4 / 8 at every size to 4 KiB, against the defaults.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/radix
T="WEFT_COLL_TUNE=allreduce:0-4k:shm_allread"
{
for np in 16 8 32; do
  timeout 170 contrib/bench/compare.sh -b build-dev -o $R/radix -n $np -r 3 -p openmpi -v "r2:$T;WEFT_SHM_RADIX=2" -v "r4:$T;WEFT_SHM_RADIX=4" -v "r8:$T;WEFT_SHM_RADIX=8" allreduce -m 8:4k -i 3000 -x 300 | tail -n +4
done
} > $OUT/bench40.log 2>&1
tar czf $OUT/r40.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench40.log | tail -c 8000
