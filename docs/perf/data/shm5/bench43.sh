#!/bin/bash
# Issue 6: allreduce 256 KiB - 4 MiB on 8 and 4 ranks: slot pieces (shm) vs the default (Rabenseifner at 512 KiB - 2 MiB), a second run.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/large8b
{
for np in 8 4; do
timeout 200 contrib/bench/compare.sh -b build-dev -o $R/large8b -n $np -r 3 -p openmpi -v "pieces:WEFT_COLL_TUNE=allreduce:256k-4m:shm" allreduce -m 256k:4m -i 100 -x 10 --iters-large 100 --warmup-large 10 | tail -n +4
done
} > $OUT/bench43.log 2>&1
tar czf $OUT/r43.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench43.log | tail -c 8000
