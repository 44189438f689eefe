#!/usr/bin/env bash
# weft's MPI library against MPICH's, one benchmark binary: contrib/bench/mpi-abi-osu
# (the OSU-style programs built once against the MPI 5.0 standard ABI) runs on
# weft's libmpi_abi.so.1 and on MPICH's (the `mpich` package from PyPI), and
# weft-osu (the same programs on weft's own API) runs beside them, alternating
# the three for several rounds. Prints, per program and size, the median of each
# and the ratios weft-mpi / mpich (time: below 1 is weft faster; bandwidth: above
# 1) and the ABI layer's own cost, weft-mpi - weft, in the program's unit.
#
#   contrib/bench/mpi-abi-compare.sh [options] [PROGRAM...] [-- benchmark options]
#     -n NP          ranks (default 2)
#     -r ROUNDS      alternating rounds (default 3)
#     -b BUILDDIR    weft build tree (default .): contrib/bench/mpi-abi-osu, weft-osu, .libs
#     -m PREFIX      MPICH: the prefix holding lib/libmpi_abi.so.1 and bin/mpiexec (default:
#                    BUILDDIR/.mpi-abi/venv, where contrib/mpi-abi-tests.sh installs it;
#                    made there with pip when missing)
#     -o OUTDIR      raw runs and the medians' CSV (default ${TMPDIR:-/tmp}/weft-bench/mpi-abi)
#     --bind POLICY  core (default; needs NP <= cores) or none
#   PROGRAM: latency bw allreduce bcast allgather alltoall reduce-scatter ... (default:
#   latency bw allreduce bcast allgather alltoall reduce-scatter)
#   e.g. contrib/bench/mpi-abi-compare.sh -n 16 -r 3 latency allreduce -- -m 1:4m
#
# weft's runs (both) use Open MPI's mpirun (PMIx bootstrap), MPICH's its own
# mpiexec (hydra), with the same binding.
set -euo pipefail
np=2 rounds=3 builddir=. mpich="" outdir=${TMPDIR:-/tmp}/weft-bench/mpi-abi bind=core
progs=()
while [ $# -gt 0 ]; do
    case $1 in
        -n) np=$2; shift 2 ;;
        -r) rounds=$2; shift 2 ;;
        -b) builddir=$2; shift 2 ;;
        -m) mpich=$2; shift 2 ;;
        -o) outdir=$2; shift 2 ;;
        --bind) bind=$2; shift 2 ;;
        --) shift; break ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) progs+=("$1"); shift ;;
    esac
done
[ ${#progs[@]} -gt 0 ] || progs=(latency bw allreduce bcast allgather alltoall reduce-scatter)
builddir=$(cd "$builddir" && pwd)
abi="$builddir/contrib/bench/.libs/mpi-abi-osu"
native="$builddir/contrib/bench/weft-osu"
[ -x "$abi" ] || { echo "no $abi: make contrib/bench/mpi-abi-osu"; exit 1; }
if [ -z "$mpich" ]; then
    mpich="$builddir/.mpi-abi/venv"
    if [ ! -f "$mpich/lib/libmpi_abi.so.1" ]; then
        python3 -m venv "$mpich" && "$mpich/bin/python" -m pip install -q mpich==5.0.2
    fi
fi
mkdir -p "$outdir"
case $outdir in */docs/*) echo "raw runs are not committed: pick an OUTDIR outside docs/"; exit 1 ;; esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ompi_bind=(--bind-to core) hydra_bind=(-bind-to core)
[ "$bind" = core ] || { ompi_bind=(--bind-to none); hydra_bind=(-bind-to none); }

run() { # run NAME PROGRAM OUT: one run of one configuration
    local name=$1 prog=$2 out=$3
    shift 3
    case $name in
        weft) mpirun -np "$np" "${ompi_bind[@]}" -x LD_LIBRARY_PATH="$builddir/.libs" "$native" "$prog" "$@" ;;
        weft-mpi) mpirun -np "$np" "${ompi_bind[@]}" -x LD_LIBRARY_PATH="$builddir/.libs" "$abi" "$prog" "$@" ;;
        mpich) env PATH="$mpich/bin:$PATH" LD_LIBRARY_PATH="$mpich/lib" "$mpich/bin/mpiexec" -n "$np" \
            "${hydra_bind[@]}" "$abi" "$prog" "$@" ;;
    esac >"$out" 2>&1
}
extra=("$@")
for prog in "${progs[@]}"; do
    for r in $(seq 1 "$rounds"); do
        for name in weft weft-mpi mpich; do
            out="$outdir/$prog-np$np-$name-r$r.out"
            # shellcheck disable=SC2068 # extra: the benchmark's options
            (set -- ${extra[@]+"${extra[@]}"}; run "$name" "$prog" "$out" "$@") ||
                echo "$prog $name round $r failed: $(tail -2 "$out")"
        done
    done
done

python3 - "$outdir" "$np" "$rounds" "${progs[@]}" <<'EOF'
import os, re, statistics, sys
outdir, np_, rounds, progs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
names = ["weft", "weft-mpi", "mpich"]
for prog in progs:
    vals, unit = {}, ""
    for name in names:
        for r in range(1, rounds + 1):
            path = os.path.join(outdir, f"{prog}-np{np_}-{name}-r{r}.out")
            if not os.path.exists(path):
                continue
            for line in open(path):
                if line.startswith("# Size"):
                    unit = line[6:].strip()
                m = re.match(r"^(\d+)\s+([0-9.]+)", line)
                if m:
                    vals.setdefault(int(m.group(1)), {}).setdefault(name, []).append(float(m.group(2)))
    bandwidth = "MB/s" in unit
    print(f"== {prog}, {np_} ranks, {rounds} rounds, median {unit}")
    print(f"{'size':>10} {'weft':>10} {'weft-mpi':>10} {'mpich':>10} {'mpi/mpich':>10} {'abi cost':>10}")
    rows = []
    for size in sorted(vals):
        med = {n: statistics.median(v) for n, v in vals[size].items()}
        w, a, m = med.get("weft"), med.get("weft-mpi"), med.get("mpich")
        ratio = a / m if a and m else float("nan")
        cost = a - w if a is not None and w is not None else float("nan")
        f = lambda x: f"{x:10.2f}" if x is not None else f"{'-':>10}"
        print(f"{size:>10} {f(w)} {f(a)} {f(m)} {ratio:10.3f} {cost:10.2f}")
        rows.append(f"{size},{w},{a},{m},{ratio},{cost}")
    with open(os.path.join(outdir, f"{prog}-np{np_}.csv"), "w") as fh:
        fh.write("size,weft,weft_mpi,mpich,ratio,abi_cost\n" + "\n".join(rows) + "\n")
    if bandwidth:
        print("(bandwidth: a ratio above 1 is weft faster)")
EOF
