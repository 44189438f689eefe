#!/usr/bin/env bash
# GPU collectives on a single-GPU host: weft-osu allreduce, allgather,
# bcast, reduce-scatter-block, alltoall and barrier with device buffers
# (-d cuda) on 2 and 4 ranks sharing the one GPU, under mpirun --bind-to
# core (without mpirun: weftrun, each rank under taskset -c LOCAL_RANK),
# beside contrib/bench/coll-floor's floors, in alternating rounds; medians
# over rounds and the ratio to the larger floor.
#
#   contrib/bench/gpu-coll.sh [options] [-- more weft-osu options]
#     -b BUILDDIR   weft build tree (default .): contrib/bench/weft-osu, contrib/bench/coll-floor
#                   (configure found nvcc), tools/weftrun without mpirun. A copy of the pieces
#                   does: contrib/bench/weft-osu may be a script that sets LD_LIBRARY_PATH to
#                   BUILDDIR/.libs and execs the binary
#     -o OUTDIR     raw runs, CSVs, tables (default ${TMPDIR:-/tmp}/weft-gpu-coll). Runs accumulate:
#                   the tables cover every CSV there; rm -r it for a fresh start
#     -r ROUNDS     alternating rounds (default 3)
#     -n RANKS      comma list of rank counts (default 2,4; at most 8, coll/cuda's limit)
#     -p PROGRAMS   comma list (default allreduce,allgather,bcast,reduce-scatter-block,alltoall,barrier;
#                   reduce and the i-programs also run on device buffers; the others end with weft's
#                   error, reported as a failure)
#     -m MIN:MAX    message sizes (default 4:16m; weft-osu's sizes: bytes per rank's block,
#                   reduce-scatter-block: the whole vector)
#     -t SECONDS    limit per run (default 120); a failed run is reported, its CSV dropped
#     -T SECONDS    start no round that would end past this many seconds (default 540, under a
#                   10-minute job limit; the last round's time is the estimate); 0: no limit
#     -e VAR=VALUE  environment for the weft runs (repeatable), e.g. -e WEFT_CUDA_COLL_SLOT=1048576
#     --no-floor    no coll-floor runs (the floor columns stay empty unless OUTDIR has some)
#     --validate    first one -c pass (4 B..1 MiB, 3 iterations) per program and rank count
#     --all-sizes   print every size (default: every 4th power of two and the largest);
#                   OUTDIR/summary-full.txt always has every size
#     --mps         run under an MPS control daemon of this script's own (started before the
#                   first run, stopped at exit; needs nvidia-cuda-mps-control and a GPU in
#                   Default compute mode). Without MPS the ranks' contexts take turns on the GPU
#                   (time slices) and every barrier kernel waits for the others' turns. Use a
#                   fresh -o OUTDIR: the tables would mix the two otherwise
#     --copy DIR    copy summary-full.txt, medians.csv, gpu-coll.log (every failure) and
#                   gpu-coll-raw.tar.gz (every run's output) to DIR
#   e.g. contrib/bench/gpu-coll.sh -b build -r 3 --copy "$OUT"
#
# weft-osu runs: -d cuda -i 200 -x 20 --iters-large 40 --warmup-large 4
# (then the options after --). coll-floor runs: --sync -r RANKS, and
# --traffic -r 1,RANKS over the sizes (and down to MIN / the most ranks,
# for reduce-scatter-block's blocks), -n 11 -k 10.
# Columns: weft (weft-osu's average latency, us), traffic (coll-floor's
# call time of a bare kernel with one rank's traffic: allreduce and reduce:
# reduce of R x S; reduce-scatter-block: reduce of R x S/R; allgather,
# alltoall: gather of R blocks of S; bcast: gather of one block; barrier:
# none), xR (R such kernels, one synchronise: the one GPU's work when R
# ranks share it), sync (a launch plus one flag round trip among R
# processes), weft/max = weft / max(traffic, sync).
set -euo pipefail
# shellcheck source=contrib/bench/gpu-lib.sh
. "$(dirname "$0")/gpu-lib.sh"

args="$*"
outdir=${TMPDIR:-/tmp}/weft-gpu-coll limit=120 ranks_list=2,4
programs=allreduce,allgather,bcast,reduce-scatter-block,alltoall,barrier sizes=4:16m floor=1
while [ $# -gt 0 ]; do
    case $1 in
        -n) ranks_list=$2; shift 2 ;;
        -p) programs=$2; shift 2 ;;
        -m) sizes=$2; shift 2 ;;
        --no-floor) floor=0; shift ;;
        *) common_option "$@"; [ "$opt_shift" -gt 0 ] || { shift; break; }; shift "$opt_shift" ;;
    esac
done
extra=("$@")
setup_dirs
IFS=, read -r -a nps <<<"$ranks_list"
IFS=, read -r -a progs <<<"$programs"
for np in "${nps[@]}"; do
    [[ $np =~ ^[2-8]$ ]] || { echo "gpu-coll.sh: -n: rank counts 2..8 (coll/cuda's limit is 8), not '$np'" >&2; exit 2; }
done
[ -x "$bench/weft-osu" ] || { echo "gpu-coll.sh: $bench/weft-osu not built (make first; -b BUILDDIR)" >&2; exit 2; }
if [ "$floor" = 1 ] && [ ! -x "$bench/coll-floor" ]; then
    echo "gpu-coll.sh: $bench/coll-floor not built (configure found no nvcc): no floor columns" >&2
    floor=0
fi
setup_launcher
start_log "$args"

# The host, once per call.
host_lines | tee -a "$log"

# One weft-osu run: program ranks round (a number, or "check": a validation run, no CSV) [options...]
run_osu() {
    local prog=$1 np=$2 k=$3 osu_env=("${weft_env[@]}") osu_mpirun=()
    shift 3
    osu_run "weft $prog $np ranks" "$np" "$k" "$outdir/$prog-np$np-r$k" "$bench/weft-osu" "$prog" -d cuda \
        -i 200 -x 20 --iters-large 40 --warmup-large 4 "$@"
}

# coll-floor's sizes: the run's, down to the smallest block of reduce-scatter-block.
lo=$(to_bytes "${sizes%%:*}") hi=$(to_bytes "${sizes##*:}")
maxnp=$(printf '%s\n' "${nps[@]}" | sort -n | tail -1)
flo=$((lo / maxnp))
[ "$flo" -ge 1 ] || flo=1
run_floor() { # round
    local k=$1 csv sync_out traffic_out
    csv=$outdir/coll-floor-r$k.csv sync_out=$outdir/coll-floor-sync-r$k.out traffic_out=$outdir/coll-floor-traffic-r$k.out
    rm -f "$csv" "$csv.sync" "$csv.traffic"
    if ! timeout -k 5 "$limit" "$bench/coll-floor" --sync -r "$ranks_list" -n 11 -k 10 --csv "$csv.sync" >"$sync_out" 2>&1; then
        note_failure "coll-floor --sync round $k ($sync_out)" "$sync_out"
        rm -f "$csv.sync"
    fi
    if ! timeout -k 5 "$limit" "$bench/coll-floor" --traffic -r "1,$ranks_list" -m "$flo:$hi" -n 11 -k 10 \
        --csv "$csv.traffic" >"$traffic_out" 2>&1; then
        note_failure "coll-floor --traffic round $k ($traffic_out)" "$traffic_out"
        rm -f "$csv.traffic"
    fi
    # one CSV a round, the header once
    for f in "$csv.sync" "$csv.traffic"; do [ ! -f "$f" ] || cat "$f"; done | awk 'NR == 1 || !/^test,/' >"$csv"
    rm -f "$csv.sync" "$csv.traffic"
    [ -s "$csv" ] || rm -f "$csv"
}

if [ "$validate" = 1 ]; then
    for np in "${nps[@]}"; do
        for prog in "${progs[@]}"; do run_osu "$prog" "$np" check -c -m 4:1m -i 3 -x 1 --iters-large 3 --warmup-large 1 "${extra[@]}"; done
    done
    echo "# validation (-c, 4 B..1 MiB): ${#progs[@]} programs x ${#nps[@]} rank counts, $failures failed" | tee -a "$log"
fi

one_round() { # round
    local k=$1 np prog
    [ "$floor" = 0 ] || run_floor "$k"
    for np in "${nps[@]}"; do
        for prog in "${progs[@]}"; do run_osu "$prog" "$np" "$k" -m "$sizes" "${extra[@]}"; done
    done
}
run_rounds one_round

# The library and device lines of the last run, and the floor's headers.
f=$(find "$outdir" -maxdepth 1 -name "*-np*-r*.out" | sort | tail -n 1)
[ -z "$f" ] || grep -m 2 '^# weft OSU-style\|^# CUDA:' "$f" | tee -a "$log" || true
for part in sync traffic; do
    f=$(find "$outdir" -maxdepth 1 -name "coll-floor-$part-r*.out" | sort -V | tail -n 1)
    [ -z "$f" ] || grep '^# weft coll-floor' "$f" | tee -a "$log" || true
done

python3 - "$outdir" "$programs" "$ranks_list" "$all_sizes" <<'EOF' | tee "$outdir/summary.txt"
import csv, glob, os, re, statistics, sys
outdir, programs, ranks, all_sizes = sys.argv[1], sys.argv[2].split(","), [int(r) for r in sys.argv[3].split(",")], sys.argv[4] == "1"
runs = {}   # (prog, np, size) -> [per-round avg_us]
floor = {}  # (test, ranks, size, column) -> [per-round medians]
def add(d, key, v):
    d.setdefault(key, []).append(v)
for path in glob.glob(os.path.join(outdir, "*-r*.csv")):
    name = os.path.basename(path)
    m = re.match(r"^(.+)-np(\d+)-r\d+\.csv$", name)
    f = re.match(r"^coll-floor-r\d+\.csv$", name)
    if not (m or f):
        continue
    for row in csv.DictReader(open(path)):
        if f:
            for col in ("median_us", "shared_us"):
                if row.get(col):
                    add(floor, (row["test"], int(row["ranks"]), int(row["size"]), col), float(row[col]))
        elif row.get("avg_us"):
            add(runs, (m.group(1), int(m.group(2)), int(row["size"])), float(row["avg_us"]))
med = {k: statistics.median(v) for k, v in runs.items()}
nrounds = {k: len(v) for k, v in runs.items()}
fmed = {k: statistics.median(v) for k, v in floor.items()}

def traffic(prog, n, size, col):
    """coll-floor's kernel for one rank's traffic of this collective (None: no such floor)."""
    p = prog[1:] if prog.startswith("i") and prog[1:] in ("allreduce", "reduce", "allgather", "alltoall", "bcast", "reduce-scatter-block") else prog
    if p in ("allreduce", "reduce"):
        return fmed.get(("reduce", n, size, col))
    if p == "reduce-scatter-block":
        return fmed.get(("reduce", n, size // n, col)) if size % n == 0 else None
    if p in ("allgather", "alltoall"):
        return fmed.get(("gather", n, size, col))
    if p == "bcast":
        return fmed.get(("gather", 1, size, col))
    return None

def num(v, w=11):
    if v is None: return f"{'-':>{w}}"
    return f"{v:>{w}.0f}" if v >= 100000 else f"{v:>{w}.2f}"
def show(size, sizes):
    return all_sizes or size == max(sizes) or (size & (size - 1) == 0 and (size.bit_length() - 1) % 4 == 2)

if not med and not fmed:
    print("# no results in", outdir)
head = f"{'collective':<22} {'ranks':>5} {'size':>9} {'weft us':>11} {'traffic us':>11} {'xR us':>11} {'sync us':>11} {'weft/max':>9}"
n_max = max(nrounds.values()) if nrounds else 0
title = (f"# GPU collectives, device buffers, ranks sharing one GPU: median of up to {n_max} rounds (us); "
         "traffic: a bare kernel with one rank's traffic (launch + sync); xR: R of them (the GPU's share); "
         "sync: launch + flag round trip among R processes; weft/max = weft / max(traffic, sync)")
shown, full = [title, head], [title, head]
for prog in programs:
    for n in ranks:
        sizes = sorted({k[2] for k in med if k[0] == prog and k[1] == n})
        for s in sizes:
            w = med[(prog, n, s)]
            t, x, y = traffic(prog, n, s, "median_us"), traffic(prog, n, s, "shared_us"), fmed.get(("sync", n, 0, "median_us"))
            floors = [v for v in (t, y) if v]
            line = (f"{prog:<22} {n:>5} {s if prog not in ('barrier', 'ibarrier') else 0:>9}" + num(w, 12) + num(t, 12) + num(x, 12) + num(y, 12)
                    + (f"{w / max(floors):>10.2f}" if floors else f"{'-':>10}"))
            full.append(line)
            if show(s, sizes): shown.append(line)
print("\n".join(shown))
with open(os.path.join(outdir, "summary-full.txt"), "w") as f:
    f.write("\n".join(full) + "\n")
    if fmed:
        f.write("# coll-floor medians over rounds: test ranks size column us\n")
        for (t, r, s, c), v in sorted(fmed.items()):
            f.write(f"{t} {r} {s} {c} {v:.3f}\n")
with open(os.path.join(outdir, "medians.csv"), "w") as f:
    f.write("benchmark,ranks,size,median_us,rounds,source\n")
    for (prog, n, s), v in sorted(med.items()):
        f.write(f"{prog},{n},{s},{v:.4f},{nrounds[(prog, n, s)]},weft-osu\n")
    for (t, r, s, c), v in sorted(fmed.items()):
        f.write(f"floor-{t}{'-xR' if c == 'shared_us' else ''},{r},{s},{v:.4f},{len(floor[(t, r, s, c)])},coll-floor\n")
print(f"# every size: {os.path.join(outdir, 'summary-full.txt')}; medians: {os.path.join(outdir, 'medians.csv')}")
EOF
finish
