#!/bin/bash
# Runs the Python package's pytest suite on several local ranks:
#   - the env bootstrap (weftrun: RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1,
#     MASTER_PORT, LOCAL_RANK, LOCAL_WORLD_SIZE) on 2 and on 3 ranks;
#   - mpirun -np 2 (PMIx bootstrap), when mpirun is installed;
# then runs examples/python/*.py on 3 ranks (each checks its own results).
# Every rank runs pytest on the same tests; a test counts as failed when it
# fails on any rank, and a rank that dies without a report counts as a failure.
# Prints "N passed, M failed[, K skipped]" last; exits non-zero on any failure.
#
# usage: contrib/python/run-tests.sh [BUILD_DIR]
#   BUILD_DIR   where weft was built (holds .libs/libweft.so.0 and tools/weftrun);
#               default: this checkout
#   WEFT_LIBRARY        the library to test (default: BUILD_DIR/.libs/libweft.so.0)
#   PYTHON              interpreter with numpy and pytest (default: the first of
#                       /usr/bin/python3, python3 that has both)
#   WEFT_PY_INSTALLED=1 test the installed package instead of contrib/python/src
#   WEFT_PY_TEST_LOGS   directory for the per-rank logs, kept (default: a new temporary
#                       one, removed at exit)
#   WEFT_TEST_PY_GPU=0 skip tests/test_gpu.py (it runs in env2 where a CUDA device, CuPy
#                       or torch, and a libweft built with GPU support are found)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:-$here/../..}" && pwd)"
export WEFT_LIBRARY="${WEFT_LIBRARY:-$build/.libs/libweft.so.0}"
weftrun="$build/tools/weftrun"

if [ -z "${PYTHON:-}" ]; then
    for p in /usr/bin/python3 python3; do
        if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy, pytest' 2>/dev/null; then
            PYTHON="$(command -v "$p")"
            break
        fi
    done
fi
if [ -z "${PYTHON:-}" ]; then
    echo "run-tests.sh: no python3 with numpy and pytest (Debian: apt-get install python3-numpy python3-pytest)"
    echo "0 passed, 1 failed"
    exit 1
fi
for f in "$WEFT_LIBRARY" "$weftrun"; do
    if [ ! -e "$f" ]; then
        echo "run-tests.sh: $f not found: build weft first (./configure && make)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done
if [ "${WEFT_PY_INSTALLED:-0}" != 1 ]; then
    export PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -n "${WEFT_PY_TEST_LOGS:-}" ]; then
    logs=$WEFT_PY_TEST_LOGS logs_note=""
    mkdir -p "$logs"
else # ours: removed at exit (the failing ranks' logs are printed first)
    logs=$(mktemp -d "${TMPDIR:-/tmp}/weft-pytest.XXXXXX") || exit 1
    logs_note=" (removed at exit; WEFT_PY_TEST_LOGS=DIR keeps them)"
    trap 'rm -rf "$logs"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
fi
rm -f "$logs"/*.xml "$logs"/*.log

# Deadlines: every wait in the tests 20 s, weft's own 30 s, a whole run 100 s.
export WEFT_TIMEOUT=30 WEFT_INIT_TIMEOUT=30 WEFT_TEST_TIMEOUT=20
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHON logs

# One rank: pytest with its own log and JUnit report, named after its rank.
# shellcheck disable=SC2016 # expanded by each rank's shell
rank_cmd='r=${RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}}
exec "$PYTHON" -m pytest -q -p no:cacheprovider -o junit_family=xunit2 --basetemp="$logs/$CFG-rank$r.tmp" \
    --junitxml="$logs/$CFG-rank$r.xml" tests >"$logs/$CFG-rank$r.log" 2>&1'

echo "python: $PYTHON ($("$PYTHON" -c 'import numpy, sys; print(sys.version.split()[0], "numpy", numpy.__version__)'))"
echo "library: $WEFT_LIBRARY"
echo "logs: $logs$logs_note"
cd "$here" || exit 1
configs=()
run_config() { # name nranks launcher...
    local name="$1" n="$2"
    shift 2
    local t0=$SECONDS rc
    CFG="$name" timeout -k 10 110 "$@" bash -c "$rank_cmd"
    rc=$?
    echo "$name: $n ranks, exit status $rc, $((SECONDS - t0)) s"
    configs+=("$name:$n:$rc")
}
# tests/test_gpu.py runs where a CUDA device is found, in env2 only (WEFT_TEST_PY_GPU=0
# elsewhere): once is enough, and its imports (CuPy, torch) are slow.
WEFT_TEST_BOOTSTRAP="env" run_config env2 2 "$weftrun" -n 2 --timeout 100
WEFT_TEST_BOOTSTRAP="env" WEFT_TEST_PY_GPU=0 run_config env3 3 "$weftrun" -n 3 --timeout 100
if command -v mpirun >/dev/null 2>&1; then
    pass_env=()
    for v in PYTHONPATH WEFT_LIBRARY WEFT_TIMEOUT WEFT_INIT_TIMEOUT WEFT_TEST_TIMEOUT \
        WEFT_TEST_BOOTSTRAP WEFT_TEST_PY_GPU PYTHON logs CFG; do
        case "$v" in WEFT_TEST_BOOTSTRAP | WEFT_TEST_PY_GPU | CFG) ;; *) [ -n "${!v+x}" ] || continue ;; esac
        pass_env+=(-x "$v")
    done
    WEFT_TEST_BOOTSTRAP=pmix WEFT_TEST_PY_GPU=0 run_config mpirun2 2 mpirun -np 2 "${pass_env[@]}"
else
    echo "mpirun2: skipped (mpirun not installed)"
fi

# The examples a new user copies from: each on 3 ranks, checked by its own asserts.
for ex in "$build"/examples/python/*.py "$here"/../../examples/python/*.py; do
    [ -f "$ex" ] || continue
    name="example-$(basename "$ex" .py)"
    case " ${configs[*]} " in *" $name:"*) continue ;; esac
    timeout -k 10 70 "$weftrun" -n 3 --timeout 60 "$PYTHON" "$ex" >"$logs/$name.log" 2>&1
    rc=$?
    echo "$name: 3 ranks, exit status $rc"
    configs+=("$name:0:$rc")
done

# Merge the ranks' reports: a test passes when it passed on every rank.
"$PYTHON" - "$logs" "${configs[@]}" <<'EOF'
import os, sys
import xml.etree.ElementTree as ET

logs, configs = sys.argv[1], sys.argv[2:]
passed = failed = skipped = 0
bad_logs = []
for cfg in configs:
    name, n, status = cfg.split(":")
    if n == "0":  # an example: its exit status is its result
        if status == "0":
            passed += 1
        else:
            failed += 1
            print(f"{name}: FAILED (exit status {status})")
            bad_logs.append(os.path.join(logs, f"{name}.log"))
        continue
    outcome = {}  # test id -> worst outcome over ranks
    rank_failures = 0
    for r in range(int(n)):
        xml = os.path.join(logs, f"{name}-rank{r}.xml")
        log = os.path.join(logs, f"{name}-rank{r}.log")
        try:
            root = ET.parse(xml).getroot()
        except (OSError, ET.ParseError) as e:
            print(f"{name}: rank {r} left no report ({e.__class__.__name__})")
            rank_failures += 1
            bad_logs.append(log)
            continue
        cases = root.iter("testcase")
        seen = 0
        for tc in cases:
            seen += 1
            tid = f"{tc.get('classname')}::{tc.get('name')}"
            if tc.find("failure") is not None or tc.find("error") is not None:
                o = 2
            elif tc.find("skipped") is not None:
                o = 0
            else:
                o = 1
            outcome[tid] = max(outcome.get(tid, 0), o)
            if o == 2:
                print(f"{name}: FAILED on rank {r}: {tid}")
                if log not in bad_logs:
                    bad_logs.append(log)
        if seen == 0:
            print(f"{name}: rank {r} ran no test")
            rank_failures += 1
            bad_logs.append(log)
    if status != "0" and not rank_failures and 2 not in outcome.values():
        print(f"{name}: the launcher exited with status {status} (a rank failed outside the tests)")
        rank_failures += 1
        bad_logs += [os.path.join(logs, f"{name}-rank{r}.log") for r in range(int(n))]
    p = sum(1 for o in outcome.values() if o == 1)
    f = sum(1 for o in outcome.values() if o == 2) + rank_failures
    s = sum(1 for o in outcome.values() if o == 0)
    print(f"{name}: {p} passed, {f} failed, {s} skipped")
    passed, failed, skipped = passed + p, failed + f, skipped + s
for log in bad_logs:
    print(f"=== {log} (last 60 lines)")
    try:
        with open(log, errors="replace") as fh:
            print("".join(fh.readlines()[-60:]), end="")
    except OSError as e:
        print(e)
print("weft python tests:")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
EOF
