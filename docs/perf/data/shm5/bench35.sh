#!/bin/bash
# Issue 6: payload floors by prefetch locality (-p 3: L1 .. 0: NTA, -1: none).
F=build-dev/contrib/bench/shm-floor
{
for n in 8 16; do
  for b in 512 1024 2048; do
    for p in 3 2 1 0 -1; do $F -n $n -i 20000 -b $b -p $p arb-allread arb-tree; done
  done
done
} > $OUT/bench35.log 2>&1
cat $OUT/bench35.log
