#!/usr/bin/env bash
# Batches of benchmark runs for the performance report and for choosing
# weft's selection defaults.
#
#   contrib/bench/sweep.sh algs    [options]   every algorithm of every collective, forced
#                                              through WEFT_COLL_TUNE, one run each; table of
#                                              medians per size and the fastest algorithm
#   contrib/bench/sweep.sh compare [options]   compare.sh for every blocking collective
#   options:
#     -b BUILDDIR   weft build tree (default .)
#     -o OUTDIR     raw runs and CSVs (default ${TMPDIR:-/tmp}/weft-bench, outside the
#                   repository; a directory under docs/ is refused)
#     --np "8 16"   rank counts (default "2")        -r ROUNDS   rounds (default 3)
#     --bind core|none (default core)                -- ARGS     benchmark options
#                                                    (default: -m 8:4m -i 200 -x 20)
#     --colls "allreduce bcast ..." (default: every collective with algorithms)
# Open MPI's mpirun launches weft (PMIx bootstrap), as in compare.sh.
set -euo pipefail
mode=${1:-}
[ "$mode" = algs ] || [ "$mode" = compare ] || { sed -n '2,18p' "$0"; exit 2; }
shift
builddir=. outdir=${TMPDIR:-/tmp}/weft-bench nps=2 rounds=3 bind=core
colls="allreduce allgather bcast reduce reduce_scatter reduce_scatter_block alltoall gather scatter"
bargs=(-m 8:4m -i 200 -x 20)
while [ $# -gt 0 ]; do
    case $1 in
        -b) builddir=$2; shift 2 ;;
        -o) outdir=$2; shift 2 ;;
        --np) nps=$2; shift 2 ;;
        -r) rounds=$2; shift 2 ;;
        --bind) bind=$2; shift 2 ;;
        --colls) colls=$2; shift 2 ;;
        --) shift; bargs=("$@"); break ;;
        *) echo "sweep.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
here=$(cd "$(dirname "$0")" && pwd)
builddir=$(cd "$builddir" && pwd)
outdir=$(realpath -m "$outdir")
case $outdir/ in "$(realpath "$here/../..")"/docs/*)
    echo "sweep.sh: raw runs do not go under docs/ (-o elsewhere; default \${TMPDIR:-/tmp}/weft-bench)" >&2; exit 2 ;;
esac
mkdir -p "$outdir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
case $bind in
    core) bindopt=(--bind-to core --map-by core) ;;
    *) bindopt=(--bind-to none --oversubscribe) ;;
esac

if [ "$mode" = compare ]; then
    for np in $nps; do
        for c in $colls barrier; do
            "$here/compare.sh" -b "$builddir" -o "$outdir" -n "$np" -r "$rounds" --bind "$bind" "${c//_/-}" \
                "${bargs[@]}"
        done
    done
    exit 0
fi

# algs: the algorithms weft_info lists for each collective.
mkdir -p "$outdir/algs"
for np in $nps; do
    for c in $colls; do
        algs=$("$builddir/tools/weft_info" --coll 2>/dev/null | awk -v c="$c" '$1 == c && NF > 2 { print $2 }')
        for alg in $algs; do
            for ((k = 1; k <= rounds; k++)); do
                csv=$outdir/algs/${c//_/-}-np$np-$alg-r$k.csv
                rm -f "$csv"
                WEFT_COLL_TUNE="$c:$alg" mpirun -np "$np" "${bindopt[@]}" -x WEFT_COLL_TUNE \
                    "$builddir/contrib/bench/weft-osu" "${c//_/-}" "${bargs[@]}" --csv "$csv" --label "$alg" \
                    >"$outdir/algs/${c//_/-}-np$np-$alg-r$k.out" 2>&1 ||
                    { echo "sweep.sh: $c $alg np=$np failed:"; tail -5 "$outdir/algs/${c//_/-}-np$np-$alg-r$k.out"; }
            done
        done
    done
done
python3 - "$outdir/algs" <<'EOF'
import csv, glob, os, statistics, sys
d = sys.argv[1]
vals = {}  # (bench, np) -> alg -> size -> [avg_us]
for path in glob.glob(os.path.join(d, "*-r*.csv")):
    for row in csv.DictReader(open(path)):
        if row["avg_us"]:
            key = (row["benchmark"], int(row["ranks"]))
            vals.setdefault(key, {}).setdefault(row["library"], {}).setdefault(int(row["size"]), []).append(float(row["avg_us"]))
summary = open(os.path.join(d, "summary.csv"), "w")
summary.write("benchmark,ranks,size,algorithm,median_us,best\n")
for (bench, np), algs in sorted(vals.items()):
    names = sorted(algs)
    print(f"# {bench}, {np} ranks: median avg latency (us) per algorithm")
    print(f"{'size':>10} " + " ".join(f"{a[:20]:>20}" for a in names) + "  fastest")
    sizes = sorted({s for a in algs.values() for s in a})
    for s in sizes:
        med = {a: statistics.median(algs[a][s]) for a in names if s in algs[a]}
        best = min(med, key=med.get)
        print(f"{s:>10} " + " ".join(f"{med[a]:>20.2f}" if a in med else f"{'-':>20}" for a in names) + f"  {best}")
        for a, m in med.items():
            summary.write(f"{bench},{np},{s},{a},{m:.4f},{int(a == best)}\n")
print(f"# summary: {os.path.join(d, 'summary.csv')}")
EOF
