#!/bin/bash
# Issue 6: 8 ranks, 256 KiB - 2 MiB: session 8's library vs session 7's (base) vs Open MPI (is 512 KiB - 1 MiB a regression?).
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/large8
{
for np in 8; do
  timeout 200 contrib/bench/compare.sh -b build-dev -o $R/large8 -n $np -r 5 -p openmpi \
    -v "base:LD_LIBRARY_PATH=$PWD/build-dev/lib-base:$PWD/build-dev/lib" \
    -v "cma:WEFT_COLL_TUNE=allreduce:256k-inf:shm_cma" allreduce -m 256k:2m -i 100 -x 10 --iters-large 100 --warmup-large 10 | tail -n +4
done
} > $OUT/bench62.log 2>&1
tar czf $OUT/r62.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench62.log | tail -c 5000
