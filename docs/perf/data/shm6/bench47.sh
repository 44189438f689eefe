#!/bin/bash
# Issue 6: floors of the chunked shape with fetch-on-flag (arb-chunked-seen) and on flagged lines
# (arb-chunked-ll) vs arb-chunked / arb-allread / arb-tree; then weft with fetch-on-flag in the chunked
# path only (new2) vs the previous library and Open MPI.
export LD_LIBRARY_PATH=$PWD/build-dev/lib:${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R/seen2
NEW="LD_LIBRARY_PATH=$PWD/build-dev/lib-new2:$PWD/build-dev/lib"
{
lscpu | grep -E "Model name"
for np in 8 16 32; do for b in 256 512 1024 2048 4096; do
  timeout 60 build-dev/contrib/bench/shm-floor -n $np -b $b -i 20000 arb-chunked arb-chunked-seen arb-chunked-ll arb-allread arb-tree
done; done
for np in 8 16 32; do
  timeout 200 contrib/bench/compare.sh -b build-dev -o $R/seen2 -n $np -r 5 -p openmpi -v "new2:$NEW" allreduce -m 64:4k -i 5000 -x 500 | tail -n +4
done
} > $OUT/bench47.log 2>&1
tar czf $OUT/r47.tgz -C $OUT r
rm -rf $OUT/r
grep -v "medians" $OUT/bench47.log | tail -c 12000
