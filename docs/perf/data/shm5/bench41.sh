#!/bin/bash
# Issue 6: final defaults of session 6 (chunked path on head flags, padded heads, shm_chunked at 1-2 KiB on 8 ranks),
# one node, 8 B - 4 MiB vs Open MPI; at 32 ranks barrier and allreduce also against flat. NPS: which rank counts.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/final
FLAT="WEFT_COLL_TUNE=barrier:dissemination,bcast:binomial,reduce:0-64k:binomial,reduce:64k-inf:reduce_scatter_gather,allreduce:0-16k:recursive_doubling,allreduce:16k-2m:rabenseifner,allreduce:2m-inf:ring"
{
T0=$SECONDS
lscpu | grep -E "Model name"
(cd build-dev/bin && timeout 100 ./test_shm --jobs 8 2>&1 | grep -E "Synthesis|\[FAIL\]|check failed" | head -8)
for np in ${NPS:-8 16}; do
  V=(); [ $np = 32 ] && V=(-v "flat:$FLAT")
  timeout 60 contrib/bench/compare.sh -b build-dev -o $R/final -n $np -r 3 -p openmpi "${V[@]}" barrier -i 10000 -x 1000 | tail -n +4
  for p in allreduce bcast reduce; do
    [ $p = bcast ] && V=()
    timeout 150 contrib/bench/compare.sh -b build-dev -o $R/final -n $np -r 3 -p openmpi "${V[@]}" $p -m 8:4m -i 1000 -x 100 --iters-large 100 --warmup-large 10 | tail -n +4
  done
  echo "-- np $np at $((SECONDS-T0)) s"
done
} > $OUT/bench41.log 2>&1
tar czf $OUT/r41.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench41.log | tail -c 11000
