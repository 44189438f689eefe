#!/usr/bin/env bash
# The benchmarks' validation mode (-c) as a correctness check, not a timing:
# every weft-osu program on 2 and 3 ranks (weftrun, env bootstrap) with small
# sizes and few iterations, and every mpi-osu program on 2 ranks under
# mpirun, so both backends of the one harness stay right. A program passes
# when it exits 0 and its table says Pass on every row.
#
# An automake TESTS script: exit 0 pass, 1 fail. make sets top_builddir;
# by hand, from an in-tree build: test/bench/test_osu_validate.sh
# Settings: WEFT_TEST_TIMEOUT (seconds per run, default 60).

set -u
top_builddir=$(cd "${top_builddir:-.}" && pwd) || exit 1
BENCH=$top_builddir/contrib/bench
WEFTRUN=$top_builddir/src/tools/weftrun
LIMIT=${WEFT_TEST_TIMEOUT:-60}
OPTS=(-c -m 1:16k -i 4 -x 1 -f)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# A clean launch environment (an enclosing launcher's variables would change
# the bootstrap weft picks).
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT WEFT_BOOTSTRAP
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-osu.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
passed=0 failed=0 skipped=0

run_case() { # name, command...
    local name=$1 out=$work/out
    shift
    if timeout -k 5 "$LIMIT" "$@" >"$out" 2>&1 && grep -q "Pass" "$out" && ! grep -q "Fail" "$out"; then
        passed=$((passed + 1))
        echo "PASS $name"
    else
        failed=$((failed + 1))
        echo "FAIL $name"
        sed 's/^/    /' "$out" | tail -25
    fi
}

if [ ! -x "$BENCH/weft-osu" ]; then
    echo "FAIL: $BENCH/weft-osu is not built"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi
programs=$("$BENCH/weft-osu" --list)
for np in 2 3; do
    for p in $programs; do
        run_case "weft-osu-$p np=$np" "$WEFTRUN" -n "$np" --timeout "$LIMIT" "$BENCH/weft-osu-$p" "${OPTS[@]}"
    done
done
if [ -x "$BENCH/mpi-osu" ] && command -v mpirun >/dev/null; then
    for p in $programs; do
        run_case "mpi-osu-$p np=2" mpirun -np 2 --oversubscribe "$BENCH/mpi-osu-$p" "${OPTS[@]}"
    done
else
    echo "SKIP mpi-osu-* np=2: mpi-osu not built (no mpicc) or no mpirun: the MPI backend was not checked"
    skipped=$((skipped + $(wc -w <<<"$programs")))
fi
# -d cuda must be refused clearly on this build.
if "$WEFTRUN" -n 2 --timeout "$LIMIT" "$BENCH/weft-osu-allreduce" -d cuda >"$work/cuda" 2>&1; then
    failed=$((failed + 1))
    echo "FAIL -d cuda was accepted by a build without GPU support"
elif grep -q "GPU support" "$work/cuda"; then
    passed=$((passed + 1))
    echo "PASS -d cuda refused with a reason"
else
    failed=$((failed + 1))
    echo "FAIL -d cuda: no reason given"
    cat "$work/cuda"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
