#!/bin/bash
# Issue 6: per-phase TSC marks of shm_ll (staggered lines, inline float-sum line reduce) against shm-floor's arb-chunked-ll on the same host.
B=$PWD/build-dev
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R
OSU="-i 20000 -x 2000"
{
lscpu | grep -E "Model name"
for np in 16 32; do
  for b in 256 1024 2048; do
    WEFT_X_PROF=1 $B/contrib/bench/shm-floor-xt -n $np -b $b -i 20000 arb-chunked-ll > $R/floor-$np-$b.txt 2> $R/floor-$np-$b.xt
    cat $R/floor-$np-$b.txt
    for rep in 1 2; do
      echo "== np $np b $b rep $rep (prof)"
      timeout 60 mpirun -np $np --bind-to core --map-by core -x LD_LIBRARY_PATH=$B/lib-prof:$B/lib -x WEFT_X_PROF=1 -x WEFT_COLL_TUNE=allreduce:0-8k:shm_ll \
        $B/contrib/bench/weft-osu allreduce -m $b:$b $OSU 2> $R/weft-$np-$b-$rep.xt | tail -1
      echo "== np $np b $b rep $rep (plain fused)"
      timeout 60 mpirun -np $np --bind-to core --map-by core -x LD_LIBRARY_PATH=$B/lib-fused:$B/lib -x WEFT_COLL_TUNE=allreduce:0-8k:shm_ll \
        $B/contrib/bench/weft-osu allreduce -m $b:$b $OSU | tail -1
    done
  done
done
} > $OUT/bench53.log 2>&1
cd $R && for f in *.xt; do echo "$f $(awk '/^XT/{for(i=8;i<=17;i++)s[i]+=$i; c++} END{printf "n=%d:", c; for(i=8;i<=17;i++) printf " %.0f", s[i]/c}' $f)"; done > $OUT/xt-summary.txt
cd $OUT && tar czf $OUT/r53.tgz r && rm -rf $OUT/r
cat $OUT/bench53.log | tail -c 5000; cat $OUT/xt-summary.txt
