#!/bin/bash
# Builds weft from this checkout and runs every test: Criterion units,
# multi-rank tests, and launcher tests (mpirun, srun --mpi=pmix, weftrun).
# Exits non-zero when anything fails. Assumes contrib/install-deps.sh ran.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
[ -x configure ] || ./autogen.sh
[ -f Makefile ] || ./configure --enable-werror ${CONFIGURE_FLAGS:-}
make -j"$JOBS"
status=0
make -j"$JOBS" check || status=$?

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

# One summary line over every runner, counted from the test logs.
passed=0
failed=0
for log in test/*.log test/*/*.log; do
    [ -f "$log" ] || continue
    case "$log" in */test-suite.log) continue ;; esac
    if line=$(grep -E "Synthesis: Tested: [0-9]+" "$log" | tail -1); then
        p=$(sed -E 's/.*Passing: ([0-9]+).*/\1/' <<<"$line")
        f=$(sed -E 's/.*Failing: ([0-9]+) \| Crashing: ([0-9]+).*/\1+\2/' <<<"$line")
        passed=$((passed + p))
        failed=$((failed + f))
    elif line=$(grep -E "^[0-9]+ passed, [0-9]+ failed" "$log" | tail -1); then
        p=$(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$line")
        f=$(sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/' <<<"$line")
        passed=$((passed + p))
        failed=$((failed + f))
    fi
done
if [ "$status" -ne 0 ]; then
    echo "--- failing test logs ---"
    for log in test/*.log test/*/*.log; do
        [ -f "$log" ] || continue
        case "$log" in */test-suite.log) continue ;; esac
        trs="${log%.log}.trs"
        if [ -f "$trs" ] && grep -q ":test-result: FAIL\|:test-result: ERROR" "$trs"; then
            echo "=== $log"
            tail -60 "$log"
        fi
    done
    [ "$failed" -gt 0 ] || failed=1
fi
echo "weft tests:"
echo "$passed passed, $failed failed"
exit "$status"
