#!/bin/bash
# Issue 6: payload floors: allread vs CLDEMOTE vs flag-per-line (plain stores, tail-first, MOVDIR64B).
F=build-dev/contrib/bench/shm-floor
{
for n in 8 16; do
  for b in 128 512 1024 2048; do
    $F -n $n -i 20000 -b $b arb-allread arb-demote arb-ll arb-ll-tail arb-ll-dir arb-tree
  done
done
} > $OUT/bench34.log 2>&1
cat $OUT/bench34.log
