#!/usr/bin/env bash
# Side-by-side OSU-style numbers: weft and peer MPIs run the same benchmark
# program (one harness, contrib/bench/osu), with the same ranks and binding,
# alternating A B A B ... for several rounds; prints the median over rounds
# per size and the weft/peer ratio.
#
#   contrib/bench/compare.sh [options] PROGRAM [benchmark options]
#     -n NP            ranks (default 2)
#     -r ROUNDS        alternating rounds (default 5)
#     -p PEERS         comma list of peers: openmpi (its default pml), openmpi-ucx (pml ucx
#                      forced onto every UCX transport), mpich (default: openmpi,openmpi-ucx and
#                      mpich when installed), mpich-abi and mpich-abi-async (MPICH's
#                      libmpi_abi.so.1 under -m PREFIX running contrib/bench/mpi-abi-osu, the
#                      second with MPIR_CVAR_ASYNC_PROGRESS=1: its progress thread)
#     -m PREFIX        MPICH for the mpich-abi peers: lib/libmpi_abi.so.1 and bin/mpiexec (the
#                      `mpich` package from PyPI)
#     -b BUILDDIR      weft build tree with contrib/bench/weft-osu (default: .)
#     -o OUTDIR        where the raw runs and CSVs go (default: ${TMPDIR:-/tmp}/weft-bench,
#                      outside the repository; a directory under docs/ is refused: raw runs
#                      are not committed, docs/PERFORMANCE.md quotes the medians)
#     --bind POLICY    core (default; needs NP <= cores) or none
#     -e VAR=VALUE     environment for the weft runs only (e.g. WEFT_COLL_TUNE=...)
#     -v LABEL:VAR=VALUE[;VAR=VALUE]
#                      one more weft configuration as its own column, e.g.
#                      -v flat:WEFT_COLL_TUNE=allreduce:recursive_doubling (repeatable)
#     --netns NODES    simulated nodes in network namespaces (contrib/scripts/netns-nodes.sh,
#                      which must be "up" with NODES nodes): NP / NODES ranks per node; weft
#                      runs with the env bootstrap, Open MPI with its tcp BTL (peer openmpi only)
#   PROGRAM: latency, bw, allreduce, iallreduce, ... (weft-osu --list)
#   e.g. contrib/bench/compare.sh -n 2 -r 5 allreduce -m 8:1m -i 200
#
# weft runs under Open MPI's mpirun (PMIx bootstrap), like the Open MPI runs;
# MPICH runs under its own mpiexec (hydra) with the same binding. The MPICH
# binary (BUILDDIR/contrib/bench/mpich-osu, a build output that git ignores) is
# built from the same sources with mpicc.mpich when missing.
# Output: OUTDIR/PROGRAM-npNP-LIB-rK.csv and .out per run, OUTDIR/PROGRAM-npNP.csv
# with the medians, and the table on stdout (with a column for ucx_perftest
# when contrib/bench/ucx-floor.sh wrote its rows into OUTDIR). Ratio: weft / peer of the
# program's main metric (time: below 1 is weft faster; bandwidth: above 1). For the
# nonblocking programs (i*) the main metric is the overall time of post + compute + wait,
# and a second table gives each library's overlap (OSU's: 100% when the compute hid the
# whole communication).
set -euo pipefail

np=2 rounds=5 peers="" builddir=. outdir=${TMPDIR:-/tmp}/weft-bench bind=core netns=0 mpich_prefix=""
weft_env=() variants=()
while [ $# -gt 0 ]; do
    case $1 in
        -n) np=$2; shift 2 ;;
        -r) rounds=$2; shift 2 ;;
        -p) peers=$2; shift 2 ;;
        -b) builddir=$2; shift 2 ;;
        -o) outdir=$2; shift 2 ;;
        -m) mpich_prefix=$2; shift 2 ;;
        --bind) bind=$2; shift 2 ;;
        -e) weft_env+=("$2"); shift 2 ;;
        -v) variants+=("$2"); shift 2 ;;
        --netns) netns=$2; shift 2 ;;
        -h | --help) sed -n '2,35p' "$0"; exit 0 ;;
        -*) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || { echo "compare.sh: which program? (see -h)" >&2; exit 2; }
prog=$1
shift
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
builddir=$(cd "$builddir" && pwd)
bench=$builddir/contrib/bench
outdir=$(realpath -m "$outdir")
case $outdir/ in "$(realpath "$srcdir")"/docs/*)
    echo "compare.sh: raw runs do not go under docs/ (-o elsewhere; default \${TMPDIR:-/tmp}/weft-bench)" >&2; exit 2 ;;
esac
mkdir -p "$outdir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

[ -x "$bench/weft-osu" ] || { echo "compare.sh: $bench/weft-osu not built (make first)" >&2; exit 2; }
if ! "$bench/weft-osu" --list | grep -qx "$prog"; then
    echo "compare.sh: unknown program '$prog'; one of:" $("$bench/weft-osu" --list) >&2
    exit 2
fi
command -v mpirun >/dev/null || { echo "compare.sh: mpirun (Open MPI) not found" >&2; exit 2; }

# Peers present on this machine.
if [ -z "$peers" ] && [ "$netns" -gt 0 ]; then
    peers=openmpi
elif [ -z "$peers" ]; then
    peers=openmpi,openmpi-ucx
    command -v mpicc.mpich >/dev/null && command -v mpiexec.mpich >/dev/null && peers="$peers,mpich"
fi
mpich_bin=$bench/mpich-osu
osu=$srcdir/contrib/bench/osu
# (Re)built when missing or older than a harness source.
if [[ ",$peers," == *,mpich,* ]] && { [ ! -x "$mpich_bin" ] || [ -n "$(find "$osu" -newer "$mpich_bin" -name '*.[ch]')" ]; }; then
    mpicc.mpich -std=c11 -O2 -D_GNU_SOURCE -o "$mpich_bin" "$osu/osu.c" "$osu/pt2pt.c" "$osu/coll.c" \
        "$osu/cuda_mem.c" "$osu/backend_mpi.c" -ldl
fi
[[ ",$peers," != *,openmpi* ]] || [ -x "$bench/mpi-osu" ] ||
    { echo "compare.sh: $bench/mpi-osu not built (configure found no mpicc)" >&2; exit 2; }
abi_bin=$bench/.libs/mpi-abi-osu
if [[ ",$peers," == *,mpich-abi* ]]; then
    [ -x "$abi_bin" ] || { echo "compare.sh: $abi_bin not built (make contrib/bench/mpi-abi-osu)" >&2; exit 2; }
    [ -n "$mpich_prefix" ] && [ -f "$mpich_prefix/lib/libmpi_abi.so.1" ] && [ -x "$mpich_prefix/bin/mpiexec" ] ||
        { echo "compare.sh: the mpich-abi peers need -m PREFIX with lib/libmpi_abi.so.1 and bin/mpiexec" >&2; exit 2; }
    mpich_prefix=$(cd "$mpich_prefix" && pwd)
fi

case $bind in
    core) ompi_bind=(--bind-to core --map-by core) hydra_bind=(-bind-to core) ;;
    none) ompi_bind=(--bind-to none --oversubscribe) hydra_bind=(-bind-to none) ;;
    *) echo "compare.sh: --bind core|none" >&2; exit 2 ;;
esac

# weft with extra environment (VAR=VALUE words first, then the program's arguments).
run_weft() {
    local envs=()
    while [ $# -gt 0 ] && [[ $1 == *=* ]]; do envs+=("$1"); shift; done
    if [ "$netns" -gt 0 ]; then
        env "${weft_env[@]}" "${envs[@]}" "$srcdir/contrib/scripts/netns-nodes.sh" run "$netns" $((np / netns)) \
            "$bench/weft-osu" "$prog" "$@"
    else
        env "${weft_env[@]}" "${envs[@]}" mpirun -np "$np" "${ompi_bind[@]}" "$bench/weft-osu" "$prog" "$@"
    fi
}

run_one() { # lib round
    local lib=$1 k=$2 csv="$outdir/$prog-np$np-$1-r$2.csv"
    shift 2
    rm -f "$csv"
    case $lib in
        weft) run_weft --csv "$csv" "$@" ;;
        openmpi)
            if [ "$netns" -gt 0 ]; then
                "$srcdir/contrib/scripts/netns-nodes.sh" mpirun "$netns" $((np / netns)) "$bench/mpi-osu" "$prog" \
                    --csv "$csv" "$@"
            else
                mpirun -np "$np" "${ompi_bind[@]}" "$bench/mpi-osu" "$prog" --csv "$csv" "$@"
            fi ;;
        # Open MPI 4.1's pml ucx declines hosts without InfiniBand unless told
        # to use any transport; then it runs over the same UCX as weft.
        openmpi-ucx)
            mpirun -np "$np" "${ompi_bind[@]}" --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
                "$bench/mpi-osu" "$prog" --csv "$csv" --label openmpi-ucx "$@" ;;
        mpich) mpiexec.mpich -n "$np" "${hydra_bind[@]}" "$mpich_bin" "$prog" --csv "$csv" "$@" ;;
        mpich-abi | mpich-abi-async)
            local async=0
            [ "$lib" = mpich-abi-async ] && async=1
            env PATH="$mpich_prefix/bin:$PATH" LD_LIBRARY_PATH="$mpich_prefix/lib" MPIR_CVAR_ASYNC_PROGRESS=$async \
                "$mpich_prefix/bin/mpiexec" -n "$np" "${hydra_bind[@]}" "$abi_bin" "$prog" --csv "$csv" \
                --label "$lib" "$@" ;;
        *) # a weft variant (-v LABEL:VAR=VALUE;VAR=VALUE)
            local spec words
            for spec in "${variants[@]}"; do
                [ "${spec%%:*}" = "$lib" ] || continue
                IFS=';' read -r -a words <<<"${spec#*:}"
                run_weft "${words[@]}" --csv "$csv" --label "$lib" "$@"
            done ;;
    esac >"$outdir/$prog-np$np-$lib-r$k.out" 2>&1 || {
        echo "compare.sh: $lib round $k failed:" >&2
        tail -20 "$outdir/$prog-np$np-$lib-r$k.out" >&2
        exit 1
    }
}

[ "$netns" -gt 0 ] && [ $((np % netns)) -ne 0 ] && { echo "compare.sh: $np ranks do not split into $netns nodes" >&2; exit 2; }
libs=(weft)
for v in "${variants[@]}"; do libs+=("${v%%:*}"); done
libs+=(${peers//,/ })
echo "# $prog on $np ranks (bind: $bind), $rounds rounds alternating ${libs[*]}; options: $*"
pml=$(ompi_info --parsable 2>/dev/null | grep -o 'mca:pml:[a-z0-9]*' | sort -u | sed 's/mca:pml://' | tr '\n' ' ' || true)
echo "# Open MPI pml components available: ${pml:-unknown}"
for lib in "${libs[@]}"; do rm -f "$outdir/$prog-np$np-$lib-r"*.csv; done # an earlier run's rounds
for ((k = 1; k <= rounds; k++)); do
    for lib in "${libs[@]}"; do run_one "$lib" "$k" "$@"; done
done

python3 - "$outdir" "$prog" "$np" "${libs[@]}" <<'EOF'
import csv, glob, os, statistics, sys
outdir, prog, np, libs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
# The main metric: bandwidth programs report MB/s, the others time in us.
metric = "bw_mbs" if prog in ("bw", "bibw", "mbw-mr") else ("overall_us" if prog.startswith("i") else "avg_us")
higher_better = metric == "bw_mbs"
# Other libraries with rows for this program in OUTDIR (ucx-floor.sh's
# ucx_perftest) join the table as further columns.
for path in glob.glob(os.path.join(outdir, f"{prog}-np{np}-*-r*.csv")):
    lib = os.path.basename(path)[len(f"{prog}-np{np}-"):].rsplit("-r", 1)[0]
    if lib not in libs:
        libs.append(lib)
values = {}  # (lib, size) -> [per-round values]
for lib in libs:
    for path in sorted(glob.glob(os.path.join(outdir, f"{prog}-np{np}-{lib}-r*.csv"))):
        for row in csv.DictReader(open(path)):
            if row[metric]:
                values.setdefault((lib, int(row["size"])), []).append(float(row[metric]))
sizes = sorted({s for (_, s) in values})
med = {k: statistics.median(v) for k, v in values.items()}
unit = "MB/s" if higher_better else "us"
print(f"# median over rounds of {metric} ({unit}); ratio = weft / peer ({'above' if higher_better else 'below'} 1: weft better)")
head = f"{'size':>10} {'weft':>12}"
for p in libs[1:]:
    head += f" {p:>12} {'weft/' + p:>14}"
print(head)
summary = os.path.join(outdir, f"{prog}-np{np}.csv")
with open(summary, "w") as f:
    f.write("benchmark,ranks,size,library,median,rounds,metric\n")
    for s in sizes:
        line = f"{s:>10}"
        w = med.get(("weft", s))
        line += f" {w:>12.2f}" if w is not None else f" {'-':>12}"
        for p in libs[1:]:
            v = med.get((p, s))
            line += f" {v:>12.2f}" if v is not None else f" {'-':>12}"
            line += f" {w / v:>14.2f}" if w is not None and v else f" {'-':>14}"
        print(line)
        for lib in libs:
            if (lib, s) in med:
                f.write(f"{prog},{np},{s},{lib},{med[(lib, s)]:.4f},{len(values[(lib, s)])},{metric}\n")
if prog.startswith("i"):
    ov = {}
    for lib in libs:
        for path in sorted(glob.glob(os.path.join(outdir, f"{prog}-np{np}-{lib}-r*.csv"))):
            for row in csv.DictReader(open(path)):
                if row.get("overlap_pct"):
                    ov.setdefault((lib, int(row["size"])), []).append(float(row["overlap_pct"]))
    print("# overlap (%), median over rounds: the share of the communication the compute hid")
    print(f"{'size':>10}" + "".join(f" {lib:>16}" for lib in libs))
    for s in sizes:
        print(f"{s:>10}" + "".join(f" {statistics.median(ov[(lib, s)]):>16.1f}" if (lib, s) in ov
                                   else f" {'-':>16}" for lib in libs))
print(f"# medians: {summary}")
EOF
