# shellcheck shell=bash disable=SC2034,SC2154 # variables of the driver: set here, read there (and osu_run reads its caller's)
# Sourced by the single-GPU benchmark drivers (gpu-pt2pt.sh, gpu-coll.sh):
# the options they share, the setup (directories, launcher, log, MPS
# daemon, the host lines), failure notes, one weft-osu / mpi-osu run, the
# rounds under the time limit and the copy at the end. Messages name the
# sourcing script ($me); its log is OUTDIR/NAME.log, NAME the script's name
# without .sh.

# shellcheck source=contrib/lib-mps.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib-mps.sh"

me=${0##*/}
name=${me%.sh}

# The shared options' defaults (a driver sets outdir and limit, and its own).
builddir=. rounds=3 deadline=540 validate=0 all_sizes=0 copy_to="" mps=0
weft_env=()

# common_option ARG...: takes one of the shared options off the front of ARG
# and sets opt_shift to the number of words it took (0: "--", the options
# end); -h prints the script's header comment; anything else is an error.
common_option() {
    case $1 in
        -b) builddir=$2; opt_shift=2 ;;
        -o) outdir=$2; opt_shift=2 ;;
        -r) rounds=$2; opt_shift=2 ;;
        -t) limit=$2; opt_shift=2 ;;
        -T) deadline=$2; opt_shift=2 ;;
        -e) weft_env+=("$2"); opt_shift=2 ;;
        --validate) validate=1; opt_shift=1 ;;
        --all-sizes) all_sizes=1; opt_shift=1 ;;
        --mps) mps=1; opt_shift=1 ;;
        --copy) copy_to=$2; opt_shift=2 ;;
        -h | --help) awk 'NR > 1 { if (!/^#/) exit; print }' "$0"; exit 0 ;;
        --) opt_shift=0 ;;
        *) echo "$me: unknown option $1 (see -h)" >&2; exit 2 ;;
    esac
}

# setup_dirs: srcdir, builddir and outdir as absolute paths, bench; raw runs
# stay out of the source tree's docs/.
setup_dirs() {
    srcdir=$(cd "$(dirname "$0")/../.." && pwd)
    builddir=$(cd "$builddir" && pwd)
    bench=$builddir/contrib/bench
    outdir=$(realpath -m "$outdir")
    case $outdir/ in "$(realpath "$srcdir")"/docs/*)
        echo "$me: raw runs do not go under docs/ (-o elsewhere)" >&2; exit 2 ;;
    esac
}

# setup_launcher: makes outdir; launcher: mpirun (ranks bound to cores), else
# weftrun of the build with taskset.
setup_launcher() {
    mkdir -p "$outdir"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    launcher=mpirun
    if ! command -v mpirun >/dev/null; then
        launcher=weftrun
        if [ ! -x "$builddir/tools/weftrun" ] || ! command -v taskset >/dev/null; then
            echo "$me: neither mpirun nor $builddir/tools/weftrun with taskset" >&2
            exit 2
        fi
    fi
}
bind=(--bind-to core --map-by core)

# start_log ARGS: the log's line for this call; with --mps, an MPS control
# daemon of this script's own, stopped at exit.
start_log() {
    log=$outdir/$name.log
    echo "# $(date -u +%FT%TZ) $me $1 (launcher: $launcher)" >>"$log"
    [ "$mps" = 1 ] || return 0
    mps_start "$outdir" "$me --mps"
    trap mps_stop EXIT
    echo "# MPS: on (a control daemon of this run, pipe $CUDA_MPS_PIPE_DIRECTORY)" | tee -a "$log"
}

# host_lines: the GPU (nvidia-smi) and weft's CUDA build line (weft_info).
host_lines() {
    local gpu w
    gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode --format=csv,noheader 2>/dev/null | head -1 || true)
    echo "# GPU: ${gpu:-unknown (no nvidia-smi)}; $(nproc) cores; $(uname -r)"
    w=$(LD_LIBRARY_PATH=$builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$builddir/tools/weft_info" 2>/dev/null |
        grep -o 'cuda=[^)]*)\?' | head -1 || true)
    [ -z "$w" ] || echo "# weft: $w (weft_info)"
}

failures=0
note_failure() { # what, output file: its first lines that are neither table nor mpirun's boilerplate
    failures=$((failures + 1))
    local line
    line="FAILED: $1: $(grep -v '^#\|^[0-9]\|^---\|^ *$' "$2" | grep -Eiv 'primary job|per user-direction|mpirun detected|process name|exit code|to be terminated|first process to do so|has been aborted' |
        head -n 2 | tr '\n' ' ' | cut -c1-300)"
    echo "$line" >>"$log"
    [ "$failures" -gt 5 ] || echo "$line" # the first five on stdout, every one in the log
}

# to_bytes SIZE: 4k, 16m... in bytes.
to_bytes() { numfmt --from=iec "$(tr 'km' 'KM' <<<"$1")"; }

# osu_run WHAT NP ROUND STEM BINARY PROGRAM ARG...: one weft-osu / mpi-osu
# run on NP ranks under the launcher and the -t limit, its output in
# STEM.out. ROUND: a number (--csv STEM.csv after PROGRAM; dropped when the
# run fails) or "check" (a validation run, no CSV: its output must say Pass
# and no Fail). The caller's arrays osu_env (VAR=VALUE, the run's
# environment; mpirun passes each name on with -x) and osu_mpirun (more
# mpirun options) complete it. A failure is noted as WHAT.
osu_run() {
    local what=$1 np=$2 k=$3 csv=$4.csv out=$4.out margs=("${osu_mpirun[@]}") csvargs=() x
    shift 4
    for x in "${osu_env[@]}"; do margs+=(-x "${x%%=*}"); done
    if [ "$k" != check ]; then
        rm -f "$csv"
        csvargs=(--csv "$csv")
    fi
    local launch=(mpirun -np "$np" "${bind[@]}" "${margs[@]}")
    # shellcheck disable=SC2016 # expanded by each rank's sh
    [ "$launcher" = mpirun ] || launch=("$builddir/tools/weftrun" -n "$np" sh -c 'exec taskset -c "$LOCAL_RANK" "$0" "$@"')
    if ! env "${osu_env[@]}" timeout -k 5 "$limit" "${launch[@]}" "$1" "$2" "${csvargs[@]}" "${@:3}" >"$out" 2>&1; then
        note_failure "$what round $k ($out)" "$out"
        [ "$k" = check ] || rm -f "$csv"
        return 0
    fi
    if [ "$k" = check ] && { ! grep -q Pass "$out" || grep -q Fail "$out"; }; then
        note_failure "$what: validation" "$out"
    fi
}

# run_rounds FUNCTION [NOTE]: FUNCTION ROUND for rounds 1..-r, none started
# that would end past -T (the last round's time the estimate); a line each.
run_rounds() {
    local k t0 last=0
    for ((k = 1; k <= rounds; k++)); do
        if [ "$deadline" -gt 0 ] && [ "$k" -gt 1 ] && [ $((SECONDS + last)) -gt "$deadline" ]; then
            echo "# stopping after round $((k - 1)) of $rounds: another ${last} s would pass -T $deadline" | tee -a "$log"
            break
        fi
        t0=$SECONDS
        "$1" "$k"
        last=$((SECONDS - t0))
        echo "# round $k/$rounds: $last s (${2:-}$failures failed so far)" | tee -a "$log"
    done
}

# finish: --copy's files, and the failure count.
finish() {
    if [ -n "$copy_to" ]; then
        mkdir -p "$copy_to"
        cp "$outdir/summary-full.txt" "$outdir/medians.csv" "$log" "$copy_to/"
        tar czf "$copy_to/$name-raw.tar.gz" -C "$(dirname "$outdir")" "$(basename "$outdir")"
        echo "# copied to $copy_to: summary-full.txt medians.csv $name.log $name-raw.tar.gz"
    fi
    [ "$failures" -eq 0 ] || echo "# $failures runs failed (the first 5 above; all in $log, raw output in $outdir)"
}
