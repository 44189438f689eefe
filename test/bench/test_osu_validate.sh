#!/usr/bin/env bash
# The benchmarks' validation mode (-c) as a correctness check, not a timing:
# every weft-osu program on 2 and 3 ranks (weftrun, env bootstrap) with small
# sizes and few iterations, and every mpi-osu program on 2 ranks under
# mpirun, so both backends of the one harness stay right. A program passes
# when it exits 0 and its table says Pass on every row. Then -d cuda: a
# clean refusal (exit 2, a reason) without a GPU, device-buffer validation
# with one.
#
# An automake TESTS script: exit 0 pass, 1 fail. make sets top_builddir;
# by hand, from an in-tree build: test/bench/test_osu_validate.sh
# Settings: WEFT_TEST_TIMEOUT (seconds per run, default 60).

set -u
top_builddir=$(cd "${top_builddir:-.}" && pwd) || exit 1
BENCH=$top_builddir/contrib/bench
WEFTRUN=$top_builddir/tools/weftrun
LIMIT=${WEFT_TEST_TIMEOUT:-60}
OPTS=(-c -m 1:16k -i 4 -x 1 -f)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# A clean launch environment (an enclosing launcher's variables would change
# the bootstrap weft picks).
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT WEFT_BOOTSTRAP
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-osu.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
# shellcheck source=test/bench/lib.sh
. "$(dirname "$0")/lib.sh"

run_case() { # name, command...
    local name=$1 out=$work/out
    shift
    if timeout -k 5 "$LIMIT" "$@" >"$out" 2>&1 && grep -q "Pass" "$out" && ! grep -q "Fail" "$out"; then
        pass "$name"
    else
        fail "$name"
        show_tail 25 "$out"
    fi
}

require_built "$BENCH/weft-osu"
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
# -d cuda. Collectives refuse device buffers with a reason (exit 2). The
# point-to-point programs: where there is no CUDA driver or device (a CPU
# machine) they must stop cleanly, exit 2 with a reason naming what is
# missing; where a library refuses device pointers (a weft without GPU
# paths, an MPI that is not CUDA-aware) likewise; where a GPU and a capable
# weft are present, latency, bw and bibw must validate (-c) with device
# buffers on either side.
expect_exit2() { # name, pattern, command...
    local name=$1 pattern=$2 out=$work/cuda rc
    shift 2
    timeout -k 5 "$LIMIT" "$@" >"$out" 2>&1
    rc=$?
    if [ "$rc" -eq 2 ] && grep -Eq "$pattern" "$out"; then
        pass "$name: exit 2, $(grep -Eo "$pattern" "$out" | head -1)"
    else
        fail "$name: exit $rc (expected 2 and /$pattern/)"
        show_tail 10 "$out"
    fi
}
expect_exit2 "weft-osu-allreduce: buffer locations refused (point-to-point only)" "point-to-point programs" \
    "$WEFTRUN" -n 2 --timeout "$LIMIT" "$BENCH/weft-osu-allreduce" -d cuda D H
expect_exit2 "weft-osu-latency: a lone buffer location refused" "come in pairs" \
    "$WEFTRUN" -n 2 --timeout "$LIMIT" "$BENCH/weft-osu-latency" D
no_gpu="libcuda\.so\.1[^:]*cannot be loaded|no CUDA device|not an NVIDIA driver|cuInit\(\) failed"
refused="no GPU code paths|not CUDA-aware"
probe=$work/probe
timeout -k 5 "$LIMIT" "$WEFTRUN" -n 2 --timeout "$LIMIT" "$BENCH/weft-osu-latency" -d cuda D D "${OPTS[@]}" >"$probe" 2>&1
probe_rc=$?
if [ "$probe_rc" -eq 2 ] && grep -Eq "$no_gpu|$refused" "$probe"; then
    pass "weft-osu-latency -d cuda D D stops cleanly: exit 2, $(grep -Eo "$no_gpu|$refused" "$probe" | head -1)"
    echo "SKIP device-buffer validation (latency, bw, bibw x D D, D H, H D): no usable GPU here"
    skipped=$((skipped + 9))
else
    for p in latency bw bibw; do
        for where in "D D" "D H" "H D"; do
            # shellcheck disable=SC2086 # where: two words
            run_case "weft-osu-$p -d cuda $where" "$WEFTRUN" -n 2 --timeout "$LIMIT" "$BENCH/weft-osu-$p" -d cuda $where \
                "${OPTS[@]}"
        done
    done
fi
if [ -x "$BENCH/mpi-osu" ] && command -v mpirun >/dev/null; then
    if [ "$probe_rc" -eq 2 ] && grep -Eq "$no_gpu" "$probe"; then
        expect_exit2 "mpi-osu-latency -d cuda D D stops cleanly" "$no_gpu" \
            mpirun -np 2 --oversubscribe "$BENCH/mpi-osu-latency" -d cuda D D "${OPTS[@]}"
    else # a GPU: Open MPI must either validate or refuse with its reason
        out=$work/mpicuda
        timeout -k 5 "$LIMIT" mpirun -np 2 --oversubscribe "$BENCH/mpi-osu-latency" -d cuda D D "${OPTS[@]}" >"$out" 2>&1
        rc=$?
        if { [ "$rc" -eq 0 ] && grep -q Pass "$out" && ! grep -q Fail "$out"; } ||
            { [ "$rc" -ne 0 ] && grep -q "not CUDA-aware" "$out"; }; then
            pass "mpi-osu-latency -d cuda D D: $([ "$rc" -eq 0 ] && echo validated || echo refused, not CUDA-aware)"
        else
            fail "mpi-osu-latency -d cuda D D: exit $rc"
            show_tail 10 "$out"
        fi
    fi
fi
summary
