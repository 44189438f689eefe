#!/usr/bin/env bash
# GPU point to point on a single-GPU host: weft-osu latency, bw, bibw with
# device buffers (-d cuda D D, D H, H D), 2 ranks on the one GPU under
# mpirun --bind-to core (without Open MPI: weftrun, each rank under taskset
# -c LOCAL_RANK), beside their floors, in alternating rounds;
# medians over rounds and ratios, as compare.sh does for host memory.
#
#   contrib/bench/gpu-pt2pt.sh [options] [-- more weft-osu options]
#     -b BUILDDIR   weft build tree (default .): contrib/bench/weft-osu, and cuda-floor,
#                   mpi-osu when built
#     -U UCXDIR     a UCX with CUDA transports as contrib/bench/ucx-cuda-wheel.sh extracts the
#                   libucx-cu13 wheel (UCXDIR/libucx/lib/libucp.so.0): adds weft over it
#                   (LD_LIBRARY_PATH, UCX_MODULE_DIR) and its ucx_perftest -m cuda
#     -o OUTDIR     raw runs, CSVs, tables (default ${TMPDIR:-/tmp}/weft-gpu). Runs accumulate:
#                   the tables cover every CSV there, so several calls (-C) add up; rm -r it
#                   for a fresh start
#     -r ROUNDS     alternating rounds (default 3)
#     -p PROGRAMS   comma list (default latency,bw,bibw; mbw-mr, multi-lat also work)
#     -P PLACES     buffer placements, rank 0's then rank 1's (default DD,DH,HD; HH, M.. and P (pinned host) too)
#     -C PARTS      what to run (default: every part there is):
#                     sys       weft over the system UCX (no CUDA transports there: weft stages
#                               through pinned host buffers)
#                     ucx       weft over UCXDIR's UCX (cuda_copy, cuda_ipc)
#                     ompi      Open MPI's mpi-osu, when it says it is CUDA-aware (see --ompi-force)
#                     perftest  UCXDIR's ucx_perftest -m MEM,MEM (contrib/bench/ucx-floor.sh)
#                     floor     contrib/bench/cuda-floor: cuMemcpy DtoD, DtoH, HtoD
#                   none: only print the tables of what OUTDIR holds
#     -t SECONDS    limit per run (default 90); a failed run is reported, its CSV dropped
#     -T SECONDS    start no round that would end past this many seconds (default 540, under a
#                   10-minute job limit; the last round's time is the estimate); 0: no limit
#     -e VAR=VALUE  environment for the weft runs (repeatable), e.g. -e UCX_TLS=^cuda_ipc
#     --lat-sizes MIN:MAX    latency sizes (default 1:4m)
#     --bw-sizes MIN:MAX     bw and bibw sizes (default 1:16m)
#     --floor-bw MIN:MAX     cuda-floor's bandwidth sizes (default 1m:1g; its latency sizes
#                            are 1 B to the largest latency size)
#     --validate    first one -c pass (small sizes) per part, program and placement
#     --ompi-force  run Open MPI although it is not CUDA-aware: OSU_CUDA=force, pml ucx,
#                   over UCXDIR's UCX when -U is given (label openmpi-ucx; may crash)
#     --all-sizes   print every size (default: every 16th power of two and the largest);
#                   OUTDIR/summary-full.txt always has every size (and the floor's own tables)
#     --mps         run under an MPS control daemon of this script's own (started before the
#                   first run, stopped at exit; needs nvidia-cuda-mps-control and a GPU in
#                   Default compute mode). Without MPS, two processes on one GPU take turns
#                   (time-sliced contexts): device writes in both cost ~150 us a message.
#                   Use a fresh -o OUTDIR: the tables would mix the two otherwise
#     --copy DIR    copy summary-full.txt, medians.csv, gpu-pt2pt.log (every failure) and
#                   gpu-pt2pt-raw.tar.gz (every run's output) to DIR
#   e.g. contrib/bench/gpu-pt2pt.sh -b build -U ucx-cu13 -r 3 --copy "$OUT"
#
# Columns: weft-sys, weft-ucx (weft over the two UCXs), openmpi, ucx_perftest
# (tag_lat, tag_bw; no bibw), floor (cuda-floor's median at that size:
# latency D D: DtoD copy latency; D H, H D: the mean of DtoH and HtoD, a
# ping-pong goes both ways; bw: DtoD, DtoH (D H), HtoD (H D); bibw D D: DtoD,
# the two copies share one device's memory; bibw D H, H D: DtoH + HtoD).
# Ratios weft / peer: latency below 1 is weft faster, bandwidth above 1.
# weft-osu's defaults but for latency -i 1000 -x 100 (large sizes: a tenth).
set -euo pipefail
# shellcheck source=contrib/bench/gpu-lib.sh
. "$(dirname "$0")/gpu-lib.sh"

args="$*"
ucxdir="" outdir=${TMPDIR:-/tmp}/weft-gpu programs=latency,bw,bibw places=DD,DH,HD
parts="" limit=90 lat_sizes=1:4m bw_sizes=1:16m floor_bw=1m:1g ompi_force=0
ucx_env=()
while [ $# -gt 0 ]; do
    case $1 in
        -U) ucxdir=$2; shift 2 ;;
        -p) programs=$2; shift 2 ;;
        -P) places=$2; shift 2 ;;
        -C) parts=$2; shift 2 ;;
        --lat-sizes) lat_sizes=$2; shift 2 ;;
        --bw-sizes) bw_sizes=$2; shift 2 ;;
        --floor-bw) floor_bw=$2; shift 2 ;;
        --ompi-force) ompi_force=1; shift ;;
        *) common_option "$@"; [ "$opt_shift" -gt 0 ] || { shift; break; }; shift "$opt_shift" ;;
    esac
done
extra=("$@")
setup_dirs
setup_launcher
if [ -n "$ucxdir" ]; then
    ucxdir=$(cd "$ucxdir" && pwd)
    [ -e "$ucxdir/libucx/lib/libucp.so.0" ] ||
        { echo "gpu-pt2pt.sh: $ucxdir/libucx/lib/libucp.so.0 missing (contrib/bench/ucx-cuda-wheel.sh DIR makes it)" >&2; exit 2; }
    ucx_env=(LD_LIBRARY_PATH="$ucxdir/libucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" UCX_MODULE_DIR="$ucxdir/libucx/lib/ucx")
fi
# The parts: asked for, else all that can run here.
if [ -z "$parts" ]; then
    parts=sys
    [ -n "$ucxdir" ] && parts=$parts,ucx,perftest
    [ -x "$bench/mpi-osu" ] && [ $launcher = mpirun ] && parts=$parts,ompi
    [ -x "$bench/cuda-floor" ] && parts=$parts,floor
fi
has() { [[ ",$parts," == *,$1,* ]]; }
if { has sys || has ucx; } && [ ! -x "$bench/weft-osu" ]; then
    echo "gpu-pt2pt.sh: $bench/weft-osu not built (make first; -b BUILDDIR)" >&2
    exit 2
fi
for p in ucx perftest; do
    if has $p && [ -z "$ucxdir" ]; then echo "gpu-pt2pt.sh: -C $p needs -U UCXDIR" >&2; exit 2; fi
done
if has floor && [ ! -x "$bench/cuda-floor" ]; then
    echo "gpu-pt2pt.sh: $bench/cuda-floor not built (configure found no CUDA): no floor column" >&2
    parts=${parts//floor/}
fi
start_log "$args"

# The host, once per call.
{
    host_lines
    sys_ucx=$(ucx_info -v 2>/dev/null | grep -Eo '[0-9]+\.[0-9]+\.[0-9]+' | head -1 || true)
    cuda_tls() { "$@" -d 2>/dev/null | grep -Eo 'Transport: (cuda|gdr)[a-z_]*' | sort -u | sed 's/Transport: //' | tr '\n' ' ' || true; }
    t=$(cuda_tls ucx_info)
    echo "# system UCX ${sys_ucx:-?}: CUDA transports: ${t:-none}"
    if [ -n "$ucxdir" ]; then
        w=$(env "${ucx_env[@]}" "$ucxdir/libucx/bin/ucx_info" -v 2>/dev/null | grep -Eo '[0-9]+\.[0-9]+\.[0-9]+' | head -1 || true)
        t=$(cuda_tls env "${ucx_env[@]}" "$ucxdir/libucx/bin/ucx_info")
        echo "# $ucxdir UCX ${w:-?}: CUDA transports: ${t:-none}"
    fi
} | tee -a "$log"

# Open MPI: CUDA-aware by its own word (mpi-osu asks MPIX_Query_cuda_support).
ompi_label="" ompi_args=() ompi_envs=()
if has ompi; then
    if [ ! -x "$bench/mpi-osu" ] || [ $launcher != mpirun ]; then
        echo "# openmpi: mpi-osu not built (configure found no mpicc) or no mpirun" | tee -a "$log"
    elif timeout -k 5 "$limit" mpirun -np 2 "${bind[@]}" "$bench/mpi-osu" latency -d cuda D D -m 1:1 -i 1 -x 0 \
        >"$outdir/ompi-probe.out" 2>&1; then
        ompi_label=openmpi
        echo "# openmpi: $(grep -o '[^;]*CUDA-aware[^;]*' "$outdir/ompi-probe.out" | head -1)" | tee -a "$log"
    elif [ "$ompi_force" = 1 ]; then
        ompi_label=openmpi-ucx
        ompi_args=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any)
        ompi_envs=(OSU_CUDA=force)
        [ -n "$ucxdir" ] && ompi_envs+=("${ucx_env[@]}")
        echo "# openmpi: not CUDA-aware; --ompi-force: pml ucx${ucxdir:+ over $ucxdir}, OSU_CUDA=force" | tee -a "$log"
    else
        echo "# openmpi: skipped: $(grep -o 'is not CUDA-aware[^:]*\|-d cuda: .*' "$outdir/ompi-probe.out" | head -1)" | tee -a "$log"
    fi
fi

sizes_of() { [ "$1" = latency ] || [ "$1" = multi-lat ] && echo "$lat_sizes" || echo "$bw_sizes"; }
iters_of() { [ "$1" = latency ] || [ "$1" = multi-lat ] && echo "-i 1000 -x 100"; }

# One weft-osu / mpi-osu run: part program placement round (a number, or
# "check": a validation run, no CSV) [options...]
run_osu() {
    local part=$1 prog=$2 xy=$3 k=$4 label bin osu_env=() osu_mpirun=()
    shift 4
    case $part in
        sys) label=weft-sys bin=$bench/weft-osu osu_env=("${weft_env[@]}") ;;
        ucx) label=weft-ucx bin=$bench/weft-osu osu_env=("${weft_env[@]}" "${ucx_env[@]}") ;;
        ompi) label=$ompi_label bin=$bench/mpi-osu osu_env=("${ompi_envs[@]}") osu_mpirun=("${ompi_args[@]}") ;;
    esac
    # shellcheck disable=SC2046 # iters_of: words
    osu_run "$label $prog ${xy:0:1} ${xy:1:1}" 2 "$k" "$outdir/$prog-$xy-$label-r$k" "$bin" "$prog" \
        -d cuda "${xy:0:1}" "${xy:1:1}" --label "$label" $(iters_of "$prog") "$@"
}

osu_parts=()
for p in sys ucx ompi; do
    has $p || continue
    [ $p = ompi ] && [ -z "$ompi_label" ] && continue
    osu_parts+=("$p")
done
IFS=, read -r -a progs <<<"$programs"
IFS=, read -r -a xys <<<"$places"
mem_of() { case $1 in D) echo cuda ;; H | P) echo host ;; M) echo cuda-managed ;; esac; }

if [ "$validate" = 1 ]; then
    for p in "${osu_parts[@]}"; do
        for prog in "${progs[@]}"; do
            for xy in "${xys[@]}"; do run_osu "$p" "$prog" "$xy" check -c -m 1:1m -i 4 -x 1 "${extra[@]}"; done
        done
    done
    echo "# validation (-c, 1 B..1 MiB): ${#osu_parts[@]} parts x ${#progs[@]} programs x ${#xys[@]} placements, $failures failed" | tee -a "$log"
fi

# The perftest range covers both tables.
pt_lo=$(to_bytes "${lat_sizes%%:*}") pt_hi=$(to_bytes "${bw_sizes##*:}")
[ "$(to_bytes "${bw_sizes%%:*}")" -lt "$pt_lo" ] && pt_lo=$(to_bytes "${bw_sizes%%:*}")
[ "$(to_bytes "${lat_sizes##*:}")" -gt "$pt_hi" ] && pt_hi=$(to_bytes "${lat_sizes##*:}")
[ "$pt_lo" -lt 1 ] && pt_lo=1
fl_lat_hi=$(to_bytes "${lat_sizes##*:}")

one_round() { # round
    local k=$1 xy prog p
    if has floor; then
        "$bench/cuda-floor" -n 11 -k 20 -b "$floor_bw" -l "1:$fl_lat_hi" --csv "$outdir/cuda-floor-r$k.csv" \
            >"$outdir/cuda-floor-r$k.out" 2>&1 || { note_failure "cuda-floor round $k" "$outdir/cuda-floor-r$k.out"; rm -f "$outdir/cuda-floor-r$k.csv"; }
    fi
    for xy in "${xys[@]}"; do
        for prog in "${progs[@]}"; do
            for p in "${osu_parts[@]}"; do
                run_osu "$p" "$prog" "$xy" "$k" -m "$(sizes_of "$prog")" "${extra[@]}"
            done
        done
        if has perftest; then
            "$srcdir/contrib/bench/ucx-floor.sh" -o "$outdir" -r 1 -k "$k" -m "$pt_lo:$pt_hi" \
                -M "$(mem_of "${xy:0:1}"),$(mem_of "${xy:1:1}")" -u "$ucxdir/libucx/bin/ucx_perftest" \
                -L "ucx_perftest-$xy" >"$outdir/perftest-$xy-r$k.out" 2>&1 ||
                note_failure "ucx_perftest -m $(mem_of "${xy:0:1}"),$(mem_of "${xy:1:1}") round $k" "$outdir/perftest-$xy-r$k.out"
        fi
    done
}
has sys || has ucx || has ompi || has perftest || has floor || rounds=0 # -C none: the tables only
run_rounds one_round "parts: ${parts//,/ }; "

# The library lines weft-osu printed (which UCX each part ran on).
for label in weft-sys weft-ucx openmpi openmpi-ucx; do
    f=$(find "$outdir" -maxdepth 1 -name "*-$label-r*.out" | sort | tail -n 1)
    lib=$([ -z "$f" ] || sed -n 's/^# .* OSU-style [^(]*(\(.*\), [0-9]* ranks)$/\1/p' "$f" | head -1)
    [ -z "$lib" ] || echo "# $label: $lib"
done | tee -a "$log"

python3 - "$outdir" "$programs" "$places" "$all_sizes" <<'EOF' | tee "$outdir/summary.txt"
import csv, glob, os, re, statistics, sys
outdir, programs, places, all_sizes = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), sys.argv[4] == "1"
runs = {}   # (prog, xy, label, size) -> [per-round values]
floor = {}  # (test, direction, size) -> [per-round medians]
def add(d, key, v):
    d.setdefault(key, []).append(v)
for path in glob.glob(os.path.join(outdir, "*-r*.csv")):
    name = os.path.basename(path)
    m = re.match(r"^(latency|bw|bibw|mbw-mr|multi-lat)-([DHMP]{2})-(.+)-r\d+\.csv$", name)
    p = re.match(r"^(latency|bw)-np2-ucx_perftest-([DHMP]{2})-r\d+\.csv$", name)
    f = re.match(r"^cuda-floor-r\d+\.csv$", name)
    if not (m or p or f):
        continue
    for row in csv.DictReader(open(path)):
        if f:
            add(floor, (row["test"], row["direction"], int(row["size"])), float(row["mbs" if row["test"] == "bw" else "median_us"]))
            continue
        prog, xy, label = (m.group(1), m.group(2), m.group(3)) if m else (p.group(1), p.group(2), "ucx_perftest")
        metric = "avg_us" if prog in ("latency", "multi-lat") else "bw_mbs"
        if row.get(metric):
            add(runs, (prog, xy, label, int(row["size"])), float(row[metric]))
med = {k: statistics.median(v) for k, v in runs.items()}
nrounds = {k: len(v) for k, v in runs.items()}
fmed = {k: statistics.median(v) for k, v in floor.items()}

def floor_of(prog, xy, size):
    lat = lambda d: fmed.get(("lat", d, size))
    bw = lambda d: fmed.get(("bw", d, size))
    if prog == "latency":
        if xy == "DD": return lat("DtoD")
        if xy in ("DH", "HD") and lat("DtoH") and lat("HtoD"): return (lat("DtoH") + lat("HtoD")) / 2
    elif prog == "bw":
        return {"DD": bw("DtoD"), "DH": bw("DtoH"), "HD": bw("HtoD")}.get(xy)
    elif prog == "bibw":
        if xy == "DD": return bw("DtoD")
        if xy in ("DH", "HD") and bw("DtoH") and bw("HtoD"): return bw("DtoH") + bw("HtoD")
    return None

weft_labels = [l for l in ("weft-sys", "weft-ucx") if any(k[2] == l for k in med)]
ompi = next((l for l in ("openmpi", "openmpi-ucx") if any(k[2] == l for k in med)), None)
has_pt = any(k[2] == "ucx_perftest" for k in med)
has_floor = bool(fmed)
short = {"weft-sys": "sys", "weft-ucx": "ucx"}
shown = {"ucx_perftest": "perftest"}
def num(v, w=10):
    if v is None: return f"{'-':>{w}}"
    return f"{v:>{w}.0f}" if v >= 10000 else f"{v:>{w}.2f}"
def ratio(v, w=8):
    return f"{v:>{w}.2f}" if v is not None else f"{'-':>{w}}"
def show(size, sizes):
    return all_sizes or size == max(sizes) or (size & (size - 1) == 0 and (size.bit_length() - 1) % 4 == 0)

if not med and not fmed:
    print("# no results in", outdir)
full = []
for prog in programs:
    unit = "us" if prog in ("latency", "multi-lat") else "MB/s"
    better = "below 1: weft faster" if unit == "us" else "above 1: weft faster"
    pt = ["ucx_perftest"] if has_pt and prog in ("latency", "bw") else []  # tag_lat, tag_bw
    fl = ["floor"] if has_floor and prog in ("latency", "bw", "bibw") else []
    vals = weft_labels + ([ompi] if ompi else []) + pt + fl
    ratios = [(w, peer) for w in weft_labels for peer in pt + fl + ([ompi] if ompi else [])]
    head = f"{'place':>5} {'size':>9}" + "".join(f" {shown.get(v, v)[:9]:>9}" for v in vals) + "".join(f" {short[w] + '/' + {'ucx_perftest': 'pt', 'floor': 'fl'}.get(p, 'mpi'):>7}" for w, p in ratios)
    lines = []
    for xy in places:
        sizes = sorted({k[3] for k in med if k[0] == prog and k[1] == xy})
        for s in sizes:
            get = lambda l: floor_of(prog, xy, s) if l == "floor" else med.get((prog, xy, l, s))
            line = f"{xy[0] + ' ' + xy[1]:>5} {s:>9}" + "".join(num(get(v)) for v in vals)
            for w, peer in ratios:
                a, b = get(w), get(peer)
                line += ratio(a / b if a is not None and b else None)
            lines.append((show(s, sizes), line))
    if not lines:
        continue
    n = max(nrounds.get(k, 0) for k in nrounds if k[0] == prog)
    title = f"# {prog} ({unit}), median of up to {n} rounds; ratio = weft / peer ({better}); pt: ucx_perftest, fl: floor"
    print(title); print(head)
    for keep, line in lines:
        if keep: print(line)
    full += [title, head] + [line for _, line in lines]
with open(os.path.join(outdir, "summary-full.txt"), "w") as f:
    f.write("\n".join(full) + "\n")
    if fmed:
        f.write("# cuda-floor medians: test direction size value (bw: MB/s, lat: us)\n")
        for (t, d, s), v in sorted(fmed.items()):
            f.write(f"{t} {d} {s} {v:.3f}\n")
with open(os.path.join(outdir, "medians.csv"), "w") as f:
    f.write("benchmark,placement,library,size,median,rounds,unit\n")
    for (prog, xy, label, s), v in sorted(med.items()):
        f.write(f"{prog},{xy},{label},{s},{v:.4f},{nrounds[(prog, xy, label, s)]},{'us' if prog in ('latency', 'multi-lat') else 'MB/s'}\n")
    for (t, d, s), v in sorted(fmed.items()):
        f.write(f"copy-{t},{d},cuda-floor,{s},{v:.4f},{len(floor[(t, d, s)])},{'MB/s' if t == 'bw' else 'us'}\n")
print(f"# every size: {os.path.join(outdir, 'summary-full.txt')}; medians: {os.path.join(outdir, 'medians.csv')}")
EOF
finish
