#!/usr/bin/env bash
# The raw UCX floor beside weft's pt2pt numbers: ucx_perftest tag_lat and
# tag_bw between two processes on this host, bound to cores 0 and 1 (-c),
# written as rows of the benchmarks' CSV, so compare.sh's CSVs and plot.py
# take them as one more curve. One server/client pair per test and round
# runs every size (ucx_perftest's batch mode, -b).
#
#   contrib/bench/ucx-floor.sh [-o OUTDIR] [-r ROUNDS] [-k FIRST] [-m MIN:MAX] [-n ITERS] [-M SEND,RECV] [-u PERFTEST] [-L LABEL]
#     -o OUTDIR    where the CSVs go (default ${TMPDIR:-/tmp}/weft-bench, compare.sh's
#                  default, outside the repository; a directory under docs/ is refused)
#     -r ROUNDS    rounds (default 3), numbered from -k FIRST (default 1): files ...-rK.csv
#     -M MEM,MEM   memory of the sender's and the receiver's buffers, ucx_perftest -m:
#                  host (default), cuda, cuda-managed; e.g. -M cuda,cuda (both processes on
#                  GPU 0, UCX's cuda_copy / cuda_ipc transports; needs a UCX built with CUDA).
#                  Each process sends from MEM 1 and receives into MEM 2, so tag_lat cuda,host
#                  measures device-to-host both ways (OSU's D H: rank 0's buffers on the
#                  device, rank 1's on the host; the same as ucx_perftest for bw, D D, H H)
#     -u PERFTEST  the ucx_perftest to run (default: the one on PATH, apt's ucx-utils). One
#                  inside a UCX prefix (PREFIX/bin, with PREFIX/lib/libucp.so.0, as the libucx-cu13
#                  wheel's libucx/ that contrib/bench/ucx-cuda-wheel.sh extracts) runs on that
#                  prefix's libraries and modules (LD_LIBRARY_PATH, UCX_MODULE_DIR set here)
#     -L LABEL     library column and file name (default ucx_perftest for host memory,
#                  ucx_perftest-XY for others: X, Y = D device, M managed, H host; -M cuda,cuda
#                  gives ucx_perftest-DD)
#   e.g. contrib/bench/ucx-floor.sh -r 3 -M cuda,cuda -u ucx-cu13/libucx/bin/ucx_perftest
#
# latency rows: avg_us = ucx_perftest's average one-way latency, min_us its
# median (50th percentile); bw rows: bw_mbs = overall bandwidth converted
# from MiB/s to OSU's MB/s (10^6 bytes). UCX picks its transports as it does
# for weft (UCX_TLS and friends apply to both). Prints the CSV paths.
set -euo pipefail
outdir=${TMPDIR:-/tmp}/weft-bench rounds=3 first=1 range=1:4m iters="" mem=host,host perftest="" label=""
while [ $# -gt 0 ]; do
    case $1 in
        -o) outdir=$2; shift 2 ;;
        -r) rounds=$2; shift 2 ;;
        -k) first=$2; shift 2 ;;
        -m) range=$2; shift 2 ;;
        -n) iters=$2; shift 2 ;;
        -M) mem=$2; shift 2 ;;
        -u) perftest=$2; shift 2 ;;
        -L) label=$2; shift 2 ;;
        -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "ucx-floor.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
if [ -z "$perftest" ]; then
    perftest=$(command -v ucx_perftest) || { echo "ucx-floor.sh: ucx_perftest not found (apt install ucx-utils, or -u PATH)" >&2; exit 2; }
fi
[ -x "$perftest" ] || { echo "ucx-floor.sh: $perftest is not an executable" >&2; exit 2; }
prefix=$(cd "$(dirname "$perftest")/.." && pwd)
if [ -e "$prefix/lib/libucp.so.0" ] && [ "$prefix" != /usr ]; then
    export LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" UCX_MODULE_DIR="$prefix/lib/ucx"
fi
[[ $mem == *,* ]] || mem=$mem,$mem
code() { case $1 in host) echo H ;; cuda) echo D ;; cuda-managed) echo M ;; *) echo X ;; esac; }
if [ -z "$label" ]; then
    label=ucx_perftest
    [ "$mem" = host,host ] || label=ucx_perftest-$(code "${mem%%,*}")$(code "${mem##*,}")
fi
outdir=$(realpath -m "$outdir")
case $outdir/ in "$(realpath "$(dirname "$0")/../..")"/docs/*)
    echo "ucx-floor.sh: raw runs do not go under docs/ (-o elsewhere; default \${TMPDIR:-/tmp}/weft-bench)" >&2; exit 2 ;;
esac
mkdir -p "$outdir"
to_bytes() { numfmt --from=iec "$(tr 'km' 'KM' <<<"$1")"; }
lo=$(to_bytes "${range%%:*}") hi=$(to_bytes "${range##*:}")
port=$((20000 + RANDOM % 20000))

# The batch: one line per size, "NAME -s SIZE -n ITERS".
batch=$(mktemp "${TMPDIR:-/tmp}/ucx-floor.XXXXXX")
trap 'rm -f "$batch" "$batch.out" "$batch.srv"' EXIT
sizes=()
size=$lo
while [ "$size" -le "$hi" ]; do
    sizes+=("$size")
    echo "$size -s $size -n ${iters:-$([ "$size" -le 8192 ] && echo 10000 || echo 1000)}" >>"$batch"
    [ "$size" -eq 0 ] && size=1 || size=$((size * 2))
done
version=$("$(dirname "$perftest")/ucx_info" -v 2>/dev/null | grep -Eo '[0-9]+\.[0-9]+\.[0-9]+' | head -1 || true)
echo "# $perftest (UCX ${version:-?}), memory $mem, ${#sizes[@]} sizes, $rounds rounds" >&2

perftest_run() { # test -> one "Final:" line per size
    port=$((port + 1)) # a fresh port per pair: no wait on the last one's TIME_WAIT
    "$perftest" -p "$port" -c 0 -b "$batch" >"$batch.srv" 2>&1 &
    local server=$! lines="" n
    for _ in $(seq 50); do # the server needs a moment to listen
        # (UCX logs its errors to stdout)
        "$perftest" 127.0.0.1 -p "$port" -c 1 -t "$1" -m "$mem" -b "$batch" >"$batch.out" 2>&1 || true
        if lines=$(grep '^Final:' "$batch.out"); then
            break
        fi
        kill -0 "$server" 2>/dev/null || break
        grep -qi 'refused' "$batch.out" || break # not the server's start-up: no retry
        sleep 0.2
    done
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    n=$(grep -c . <<<"$lines" || true)
    if [ "$n" -ne "${#sizes[@]}" ]; then
        echo "ucx-floor.sh: ucx_perftest -t $1 -m $mem: $n of ${#sizes[@]} sizes measured; the client said:" >&2
        grep -v '^[+|]' "$batch.out" | tail -n 5 >&2
        echo "  server:" >&2
        grep -v '^[+|]' "$batch.srv" | tail -n 5 >&2
        exit 1
    fi
    echo "$lines"
}

for ((k = first; k < first + rounds; k++)); do
    for test in tag_lat tag_bw; do
        bench=latency
        [ "$test" = tag_bw ] && bench=bw
        csv=$outdir/$bench-np2-$label-r$k.csv
        echo "benchmark,library,ranks,size,avg_us,min_us,max_us,bw_mbs,msg_rate,overall_us,compute_us,pure_comm_us,overlap_pct,iterations,validation" >"$csv"
        lines=$(perftest_run "$test")
        i=0
        # Final: iters typical_lat avg_lat overall_lat avg_bw overall_bw avg_mr overall_mr
        while read -r _ it typ avg _ _ obw _ omr; do
            size=${sizes[i]}
            i=$((i + 1))
            if [ "$bench" = latency ]; then
                echo "latency,$label,2,$size,$avg,$typ,,,,,,,,$it," >>"$csv"
            else
                mbs=$(awk -v b="$obw" 'BEGIN { printf "%.4f", b * 1.048576 }')
                echo "bw,$label,2,$size,,,,$mbs,$omr,,,,,$it," >>"$csv"
            fi
        done <<<"$lines"
        echo "$csv"
    done
done
