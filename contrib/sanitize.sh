#!/bin/bash
# The sanitizer pass: builds this checkout (its working tree: tracked and
# untracked files, without build outputs) with AddressSanitizer and
# UndefinedBehaviorSanitizer in a copy under a temporary directory, runs
# `make check` there, and fails when a test fails or any sanitizer wrote a
# report, even one in a forked rank whose test ignored its exit status.
#
# The tree is configured in place (autotools, in-tree build), so the
# sanitized build cannot share it: the copy gets its own configure.
#
# Settings:
#   SANITIZE_DIR     where to build (default: a new mktemp directory, removed
#                    at the end unless KEEP=1 or a check failed)
#   SANITIZE         default: -fsanitize=address,undefined (part of CC and
#                    MPICC, so programs the tests compile themselves, against
#                    the installed library or with mpicc, get the runtime)
#   SANITIZE_CFLAGS  default: -fno-omit-frame-pointer -g -O1
#   TESTS            the tests `make check` runs (default: the Makefile's)
#   JOBS             make -j (default: nproc)
#
# Leak detection is off: UCX and PMIx keep allocations for the life of
# the process, and weft's own life-cycle leaks are the soak test's job
# (test/test_soak: RSS over 10^5 collectives and 10^3 communicators). The
# suppressions (contrib/sanitize.supp) are for code outside weft only.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=contrib/lib-test-logs.sh
. "$src/contrib/lib-test-logs.sh"
JOBS=${JOBS:-$(nproc)}
SAN=${SANITIZE:--fsanitize=address,undefined}
CFLAGS_SAN=${SANITIZE_CFLAGS:--fno-omit-frame-pointer -g -O1}
if [ -n "${SANITIZE_DIR:-}" ]; then
    work=$SANITIZE_DIR
    mkdir -p "$work"
else
    work=$(mktemp -d /tmp/weft-sanitize.XXXXXX)
fi
status=1
cleanup() {
    if [ "$status" -eq 0 ] && [ -z "${KEEP:-}" ] && [ -z "${SANITIZE_DIR:-}" ]; then
        rm -rf "$work"
    else
        echo "sanitize.sh: the build and its logs stay in $work"
    fi
}
trap cleanup EXIT

# The working tree's files (what `git status` would show, less ignored
# build outputs), so uncommitted changes are checked too.
echo "sanitize.sh: copying the source to $work"
git -C "$src" ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$src/$f" ] && printf '%s\0' "$f"; done |
    tar -C "$src" --null -T - -cf - | tar -C "$work" -xf -

# The GPU kernels are device code the sanitizers do not instrument: the
# copy takes this checkout's built fatbins with their times (make rebuilds
# any older than its sources, as it would here) instead of running nvcc
# again. Without them the copy builds its own, as the checkout would.
if ls "$src"/coll/cuda/kernels/*.fatbin >/dev/null 2>&1; then
    echo "sanitize.sh: reusing this checkout's GPU kernels (coll/cuda/kernels/*.fatbin)"
    (cd "$src" && built=(coll/cuda/kernels/*.fatbin) &&
        { [ ! -f coll/cuda/kernels_fatbin.inc ] || built+=(coll/cuda/kernels_fatbin.inc); } &&
        tar -cf - "${built[@]}") | tar -C "$work" -xf -
fi

reports=$work/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
cd "$work"
./autogen.sh >autogen.log 2>&1 || { cat autogen.log; exit 1; }
cc_san="${CC:-gcc} $SAN"
mpicc=$(command -v mpicc.openmpi || command -v mpicc || true)
mpicc_san=${mpicc:+$mpicc $SAN}
echo "sanitize.sh: configure with CC='$cc_san' CFLAGS='$CFLAGS_SAN' MPICC='${mpicc_san:-none}'"
# No --enable-werror: instrumented code makes GCC's flow-based warnings
# (-Wformat-truncation, -Wmaybe-uninitialized) report false positives,
# which the ordinary -Werror build (contrib/test.sh) does not have.
./configure CC="$cc_san" CFLAGS="$CFLAGS_SAN" ${mpicc_san:+MPICC="$mpicc_san"} >configure.log 2>&1 ||
    { tail -40 configure.log; exit 1; }
make -j"$JOBS" >build.log 2>&1 || { grep -E "error|warning" build.log | head -40; tail -20 build.log; exit 1; }

# Reports go to files ($reports/asan.PID, ubsan.PID) instead of stderr,
# so none is lost in a rank's captured output or a test that expects a
# rank to fail. exitcode: a report still fails the process that hit it.
export ASAN_OPTIONS="detect_leaks=0:log_path=$reports/asan:exitcode=86"
export UBSAN_OPTIONS="print_stacktrace=1:log_path=$reports/ubsan:suppressions=$src/contrib/sanitize.supp"
export LSAN_OPTIONS="detect_leaks=0"
# ASan keeps freed memory in quarantine, so resident memory grows by
# design: the soak test checks its results only here.
export WEFT_TEST_SOAK_LIMIT=0
# CI=true makes tests whose tools are missing fail instead of skipping; the
# copy has no .venv (torch) and an instrumented libweft cannot load into an
# uninstrumented python anyway: the torchrun cases run in contrib/test.sh's
# pass, here they are skipped.
unset CI
echo "sanitize.sh: make check"
check=0
if [ -n "${TESTS:-}" ]; then
    make -j"$JOBS" check TESTS="$TESTS" >check.log 2>&1 || check=$?
else
    make -j"$JOBS" check >check.log 2>&1 || check=$?
fi
grep -E "^(PASS|FAIL|SKIP|ERROR|XFAIL|XPASS):" check.log || true
found=0
for f in "$reports"/*; do
    [ -f "$f" ] || continue
    found=$((found + 1))
    echo "=== sanitizer report $f"
    head -60 "$f"
done
if [ "$check" -ne 0 ]; then
    echo "sanitize.sh: make check failed (status $check); failing logs:"
    failing_test_logs 40
fi
if [ "$found" -ne 0 ]; then
    echo "sanitize.sh: $found sanitizer report(s)"
    exit 1
fi
[ "$check" -eq 0 ] || exit 1
status=0
echo "sanitize.sh: no sanitizer report, every test passed"
