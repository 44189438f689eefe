#!/bin/bash
# Issue 6: payload floors of the chunked allreduce (two flag rounds) vs allread vs tree.
F=build-dev/contrib/bench/shm-floor
{
for n in 8 16 32; do
  for b in 256 512 1024 2048 4096; do
    $F -n $n -i 20000 -b $b arb-chunked arb-allread arb-tree
  done
done
} > $OUT/bench36.log 2>&1
cat $OUT/bench36.log
