#!/bin/bash
# Builds weft from this checkout and runs every test: Criterion units,
# multi-rank tests, and launcher tests (mpirun, srun --mpi=pmix, weftrun).
# Exits non-zero when anything fails. Assumes contrib/install-deps.sh ran.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=contrib/lib-test-logs.sh
. contrib/lib-test-logs.sh
JOBS=${JOBS:-$(nproc)}
# werror_configured: config.status was made with --enable-werror (the last
# --enable-werror[=yes|no] / --disable-werror given wins, as in configure).
werror_configured() {
    local opt on=no args=()
    eval "args=($(./config.status --config))"
    for opt in ${args[@]+"${args[@]}"}; do
        case $opt in
            --enable-werror | --enable-werror=yes) on=yes ;;
            --disable-werror | --enable-werror=no) on=no ;;
        esac
    done
    [ "$on" = yes ]
}
[ -x configure ] || ./autogen.sh
if [ ! -f Makefile ] || [ ! -x config.status ]; then
    # shellcheck disable=SC2086 # CONFIGURE_FLAGS: several words
    ./configure --enable-werror ${CONFIGURE_FLAGS:-}
elif ! werror_configured; then
    # A tree configured without it (contrib/quickstart.sh, a plain ./configure):
    # the same options plus --enable-werror, and every object rebuilt, since
    # make does not recompile for changed flags.
    echo "test.sh: the build was configured without --enable-werror ($(./config.status --config)); reconfiguring with it and rebuilding from clean"
    eval "set -- $(./config.status --config)"
    # shellcheck disable=SC2086 # CONFIGURE_FLAGS: several words
    ./configure "$@" --enable-werror ${CONFIGURE_FLAGS:-}
    # The GPU kernels do not depend on the C flags: they survive the clean
    # (nvcc is the longest part of the build); CI's fresh build compiles
    # them with --Werror.
    keep=$(mktemp -d)
    tar -cf "$keep/kernels.tar" coll/cuda/kernels_fatbin.inc coll/cuda/kernels/*.fatbin 2>/dev/null || true
    make clean >/dev/null
    tar -xf "$keep/kernels.tar" 2>/dev/null || true
    rm -rf "$keep"
fi
make -j"$JOBS"
status=0
make -j"$JOBS" check || status=$?
# The multi-rank suites again with the progress thread forced on and off
# (make check ran them with the default, auto), and the bootstrap's with
# node relays on.
make -j"$JOBS" check-variants || status=$?

# The Python package (contrib/python): pytest on 2 and 3 ranks under weftrun
# and on 2 under mpirun, then examples/python; its last line "N passed, M
# failed, K skipped" joins the summary.
py_status=0
contrib/python/run-tests.sh "$PWD" >test/python.log 2>&1 || py_status=$?
tail -n 1 test/python.log
if [ "$py_status" -ne 0 ]; then
    status=$py_status
    echo "=== test/python.log"
    tail -n 80 test/python.log
fi

# PyTorch's own distributed tests (torch's DistributedTest class) on weft against
# gloo at 2 and 4 ranks (contrib/torch-dist-tests.sh): fails when a test gloo
# passes fails on weft; its last line joins the summary. Without torch it skips
# (exit 77), except under CI=true, which installs torch.
torch_status=0
contrib/torch-dist-tests.sh "$PWD" >test/torch-dist.log 2>&1 || torch_status=$?
tail -n 1 test/torch-dist.log
if [ "$torch_status" -ne 0 ] && [ "$torch_status" -ne 77 ]; then
    status=$torch_status
    echo "=== test/torch-dist.log"
    tail -n 60 test/torch-dist.log
fi

# mpi4py's own test suite on weft's MPI library (libmpi_abi.so.1) against
# MPICH's, same selection, 1 and 2 processes under weftrun and 2 under mpirun
# (contrib/mpi-abi-tests.sh): fails when a test MPICH passes fails on weft; its
# last line joins the summary. Without python3 or PyPI it skips (exit 77).
# About 80 s on 2 cores, plus 2-4 minutes when it builds mpi4py (the first run).
mpi_abi_status=0
contrib/mpi-abi-tests.sh "$PWD" >test/mpi-abi.log 2>&1 || mpi_abi_status=$?
tail -n 1 test/mpi-abi.log
if [ "$mpi_abi_status" -ne 0 ] && [ "$mpi_abi_status" -ne 77 ]; then
    status=$mpi_abi_status
    echo "=== test/mpi-abi.log"
    tail -n 60 test/mpi-abi.log
fi

# One summary line over every runner, counted from the test logs: Criterion's
# "Synthesis: Tested: T | Passing: P | Failing: F | Crashing: C" (Criterion
# 2.4 leaves skipped tests out of T and does not count them: they are the
# tests the binary lists, less T) and the scripts' "N passed, M failed, K
# skipped".
passed=0
failed=0
skipped=0
for log in test/*.log test/*/*.log; do
    [ -f "$log" ] || continue
    case "$log" in */test-suite.log) continue ;; esac
    if line=$(grep -E "Synthesis: Tested: [0-9]+" "$log" | tail -1); then
        t=$(sed -E 's/.*Tested: ([0-9]+).*/\1/' <<<"$line")
        p=$(sed -E 's/.*Passing: ([0-9]+).*/\1/' <<<"$line")
        f=$(sed -E 's/.*Failing: ([0-9]+) \| Crashing: ([0-9]+).*/\1+\2/' <<<"$line")
        if grep -qE "Skipped: [0-9]+" <<<"$line"; then
            s=$(sed -E 's/.*Skipped: ([0-9]+).*/\1/' <<<"$line")
        elif [ -x "${log%.log}" ]; then
            listed=$("./${log%.log}" --list 2>/dev/null | sed -nE 's/^.*: ([0-9]+) tests?$/\1/p' | paste -sd+ -)
            s=$((${listed:-0} - t))
            [ "$s" -ge 0 ] || s=0
        else
            s=0
        fi
        passed=$((passed + p))
        failed=$((failed + f))
        skipped=$((skipped + s))
    elif line=$(grep -E "^[0-9]+ passed, [0-9]+ failed" "$log" | tail -1); then
        p=$(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$line")
        f=$(sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/' <<<"$line")
        s=$(sed -nE 's/^[0-9]+ passed, [0-9]+ failed, ([0-9]+) skipped.*/\1/p' <<<"$line")
        passed=$((passed + p))
        failed=$((failed + f))
        skipped=$((skipped + ${s:-0}))
    fi
done
if [ "$status" -ne 0 ]; then
    echo "--- failing test logs ---"
    failing_test_logs 60
    [ "$failed" -gt 0 ] || failed=1
fi
# Why each skipped test was skipped (Criterion prints "[SKIP] suite::test:
# reason" at verbosity 1, which the Makefile sets; pytest's reasons are in
# test/python.log).
skips=$(grep -h "\[SKIP\]" test/*.log test/*/*.log 2>/dev/null | sed -E 's/^.*\[SKIP\] //' | sort -u || true)
[ -z "$skips" ] || { echo "skipped:"; sed 's/^/  /' <<<"$skips"; }
echo "weft tests:"
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
