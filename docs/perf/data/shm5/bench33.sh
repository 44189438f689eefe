#!/bin/bash
# Issue 6: the chunked allreduce on head-line flags and line-aligned chunks (new) vs the previous library (old),
# and chunked from 512 B / 1 KiB (c512, c1k) against shm_allread / the tree, 8/16/32 ranks; large sizes new vs old.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/small $R/large
T="WEFT_COLL_TUNE=allreduce:0-8k:shm"
OLD="LD_LIBRARY_PATH=$PWD/build-dev/lib-old:$PWD/build-dev/lib"
{
T0=$SECONDS
lscpu | grep -E "Model name"; grep -o -w -E "cldemote|movdir64b|avx512f" /proc/cpuinfo | sort | uniq -c
(cd build-dev/bin && timeout 100 ./test_shm --jobs 8 2>&1 | grep -E "Synthesis|\[FAIL\]|check failed" | head -8)
for np in 8 16 32; do
  timeout 170 contrib/bench/compare.sh -b build-dev -o $R/small -n $np -r 3 -p openmpi -v "old:$OLD" -v "c512:$T;WEFT_SHM_CHUNK_MIN=512" -v "c1k:$T;WEFT_SHM_CHUNK_MIN=1024" allreduce -m 64:8k -i 2000 -x 200 | tail -n +4
  echo "-- np $np at $((SECONDS-T0)) s"
done
for np in 8 16 32; do
  timeout 100 contrib/bench/compare.sh -b build-dev -o $R/large -n $np -r 3 -p openmpi -v "old:$OLD" allreduce -m 16k:512k -i 300 -x 30 --iters-large 100 --warmup-large 10 | tail -n +4
  echo "-- large np $np at $((SECONDS-T0)) s"
done
} > $OUT/bench33.log 2>&1
tar czf $OUT/r33.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench33.log | tail -c 11000
