#!/bin/bash
# Issue 6: allreduce 256 KiB - 2 MiB on 8 ranks, every candidate (default: Rabenseifner at 512 KiB - 2 MiB);
# then allreduce 8 B - 4 KiB at 8 and 16 ranks, 5 rounds (the small-size ratios, again).
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/large8 $R/small5
{
timeout 200 contrib/bench/compare.sh -b build-dev -o $R/large8 -n 8 -r 3 -p openmpi -v "pieces:WEFT_COLL_TUNE=allreduce:256k-4m:shm" -v "cma:WEFT_COLL_TUNE=allreduce:256k-4m:shm_cma" -v "ring:WEFT_COLL_TUNE=allreduce:256k-4m:ring" allreduce -m 256k:2m -i 100 -x 10 --iters-large 100 --warmup-large 10 | tail -n +4
for np in 8 16; do
  timeout 150 contrib/bench/compare.sh -b build-dev -o $R/small5 -n $np -r 5 -p openmpi allreduce -m 8:4k -i 3000 -x 300 | tail -n +4
done
} > $OUT/bench42.log 2>&1
tar czf $OUT/r42.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench42.log | tail -c 8000
