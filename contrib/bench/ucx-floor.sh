#!/usr/bin/env bash
# The raw UCX floor beside weft's pt2pt numbers: ucx_perftest (ucx-utils)
# tag_lat and tag_bw between two processes on this host, bound to cores 0
# and 1, written as rows of the benchmarks' CSV (library "ucx_perftest"),
# so compare.sh's CSVs and plot.py take them as one more curve.
#
#   contrib/bench/ucx-floor.sh [-o OUTDIR] [-r ROUNDS] [-m MIN:MAX] [-n ITERS]
#     -o OUTDIR   where the CSVs go (default ${TMPDIR:-/tmp}/weft-bench, compare.sh's
#                 default, outside the repository; a directory under docs/ is refused)
#
# latency rows: avg_us = ucx_perftest's average one-way latency, min_us its
# median (50th percentile); bw rows: bw_mbs = overall bandwidth converted
# from MiB/s to OSU's MB/s (10^6 bytes). UCX picks its transports as it does
# for weft (UCX_TLS and friends apply to both).
set -euo pipefail
outdir=${TMPDIR:-/tmp}/weft-bench rounds=3 range=1:4m iters=
while [ $# -gt 0 ]; do
    case $1 in
        -o) outdir=$2; shift 2 ;;
        -r) rounds=$2; shift 2 ;;
        -m) range=$2; shift 2 ;;
        -n) iters=$2; shift 2 ;;
        -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "ucx-floor.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
command -v ucx_perftest >/dev/null || { echo "ucx-floor.sh: ucx_perftest not found (apt install ucx-utils)" >&2; exit 2; }
outdir=$(realpath -m "$outdir")
case $outdir/ in "$(realpath "$(dirname "$0")/../..")"/docs/*)
    echo "ucx-floor.sh: raw runs do not go under docs/ (-o elsewhere; default \${TMPDIR:-/tmp}/weft-bench)" >&2; exit 2 ;;
esac
mkdir -p "$outdir"
to_bytes() { numfmt --from=iec "$(tr 'km' 'KM' <<<"$1")"; }
lo=$(to_bytes "${range%%:*}") hi=$(to_bytes "${range##*:}")
port=$((20000 + RANDOM % 20000))

perftest() { # test size iterations -> the "Final:" line
    ucx_perftest -p "$port" -c 0 >/dev/null 2>&1 &
    local server=$! line=""
    for _ in $(seq 50); do # the server needs a moment to listen
        if line=$(ucx_perftest 127.0.0.1 -p "$port" -c 1 -t "$1" -s "$2" -n "$3" 2>/dev/null | grep '^Final:'); then
            break
        fi
        sleep 0.1
    done
    wait "$server" 2>/dev/null || true
    [ -n "$line" ] || { echo "ucx-floor.sh: ucx_perftest $1 -s $2 failed" >&2; exit 1; }
    echo "$line"
}

for ((k = 1; k <= rounds; k++)); do
    for test in tag_lat tag_bw; do
        bench=latency
        [ "$test" = tag_bw ] && bench=bw
        csv=$outdir/$bench-np2-ucx_perftest-r$k.csv
        echo "benchmark,library,ranks,size,avg_us,min_us,max_us,bw_mbs,msg_rate,overall_us,compute_us,pure_comm_us,overlap_pct,iterations,validation" >"$csv"
        size=$lo
        while [ "$size" -le "$hi" ]; do
            n=${iters:-$([ "$size" -le 8192 ] && echo 10000 || echo 1000)}
            # Final: iters typical_lat avg_lat overall_lat avg_bw overall_bw avg_mr overall_mr
            read -r _ it typ avg _ _ obw _ omr <<<"$(perftest "$test" "$size" "$n")"
            if [ "$bench" = latency ]; then
                echo "latency,ucx_perftest,2,$size,$avg,$typ,,,,,,,,$it," >>"$csv"
            else
                mbs=$(awk -v b="$obw" 'BEGIN { printf "%.4f", b * 1.048576 }')
                echo "bw,ucx_perftest,2,$size,,,,$mbs,$omr,,,,,$it," >>"$csv"
            fi
            [ "$size" -eq 0 ] && size=1 || size=$((size * 2))
        done
        echo "$csv"
    done
done
