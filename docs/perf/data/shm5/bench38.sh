#!/bin/bash
# Issue 6: where weft's time goes in a blocking allreduce at 16 ranks (a profiling build, lib-prof, not committed).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LD_LIBRARY_PATH=$PWD/build-dev/lib-prof:$PWD/build-dev/lib
W=build-dev/contrib/bench/weft-osu
summ() { awk '/XPROF/ {k=$4; n[k]++; for(i=5;i<=NF;i++) if($i ~ /^[a-z-]+$/ && $(i+1) ~ /^[0-9.]+$/) s[k" "$i]+=$(i+1)} END {for (x in s) {split(x,a," "); printf "  %s %s %.3f\n", a[1], a[2], s[x]/n[a[1]]}}' | sort; }
{
for np in 16 8; do
  for m in 8 1024; do
    echo "== np $np size $m default"; WEFT_X_PROF=1 mpirun -np $np --bind-to core --map-by core $W allreduce -m $m:$m -i 20000 -x 2000 2>&1 | tee /tmp/o | grep -E "^$m " ; summ < /tmp/o
  done
  echo "== np $np size 1024 chunked"; WEFT_X_PROF=1 WEFT_COLL_TUNE=allreduce:0-8k:shm WEFT_SHM_CHUNK_MIN=512 mpirun -np $np --bind-to core --map-by core $W allreduce -m 1024:1024 -i 20000 -x 2000 2>&1 | tee /tmp/o | grep -E "^1024 "; summ < /tmp/o
  echo "== np $np barrier"; WEFT_X_PROF=1 mpirun -np $np --bind-to core --map-by core $W barrier -i 20000 -x 2000 2>&1 | tee /tmp/o | grep -E "^0 "; summ < /tmp/o
done
} > $OUT/bench38.log 2>&1
cat $OUT/bench38.log
