#!/bin/bash
# The weft torch.distributed backend on CUDA tensors, under torchrun --standalone, two runs
# of tests/torch_cuda_worker.py on NP local processes (default 2) that share the host's GPUs
# (rank r takes GPU LOCAL_RANK mod the GPU count: one GPU shared by every rank, or one each):
#   main: every collective on CUDA tensors against gloo on CPU tensors and against weft's
#     rounding, async_op / wait() ordering without host blocking, futures, CUDA
#     point-to-point and barrier, what is refused, split_group / new_group with a bound
#     device, a "cpu:gloo,cuda:weft" group, DDP on CUDA against gloo, FSDP on CUDA
#     (FULL_SHARD on the world and on a "cpu:gloo,cuda:weft" group, FSDP2 fully_shard; with
#     NP >= 4 and even, HYBRID_SHARD and FSDP2 HSDP on two simulated nodes of NP/2 ranks,
#     skipped with the reason at 2) against the same on the hostgloo reference
#     (torch_host_gloo.py: the same GPU math, collectives staged through the host over gloo
#     and reduced in weft's order: bit-identical) and against FSDP on gloo with CPU tensors
#     (within float32 rounding), a GPU collective whose peer never comes failing within the
#     group's timeout, polled and with nobody waiting (the backend's watchdog);
#   kill: the last rank SIGKILLs itself while the others are in a CUDA all_reduce on a group
#     with a short timeout: each survivor must raise weft's error within it, naming the
#     killed rank (read from the survivors' own lines, not from torchrun's failure).
# Exit 0 pass, 77 skip (no torch, no CUDA device, or a libweft without GPU support; the
# reason is printed), 1 fail.
#
# usage: contrib/python/tests/run-torch-cuda.sh [BUILD_DIR]
#   --sim              (first argument) no GPU: CPU tensors through the backend's CUDA code
#                      paths with stand-ins for torch.cuda (run-torch-backend.sh runs the
#                      main worker this way; here both cases run so)
#   WEFT_TORCH_PYTHON  interpreter with torch (default: the checkout's .venv/bin/python, python3)
#   WEFT_TORCH_CUDA_NP ranks (default 2)
#   WEFT_TORCH_CUDA_CASES which runs (default "main kill")
#   WEFT_TEST_TIMEOUT  seconds for the main torchrun (default 300); the kill run gets
#                      WEFT_TORCH_KILL_MONITOR + 60
#   WEFT_TEST_HANG_DUMP seconds after which a rank still running prints every thread's stack
#                      and exits (default: 30 s before WEFT_TEST_TIMEOUT): a hang fails within
#                      the limit, and the failure shows where each rank was
#   WEFT_TORCH_KILL_TIMEOUT the kill case's group timeout in seconds (default 5)
#   WEFT_TORCH_KILL_MONITOR torchrun's monitor interval in the kill run (default 40): it must
#                      exceed the ranks' start (torch, CUDA, weft: ~10-20 s) + 1 s + the
#                      timeout + ~2 s, or torchrun may end the survivors (SIGTERM: their
#                      stacks are shown) before they raised
set -u
sim=0
if [ "${1:-}" = --sim ]; then
    sim=1
    shift
fi
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:-${top_builddir:-$here/../../..}}" && pwd)"
# shellcheck source=contrib/python/tests/torch-env.sh
. "$here/torch-env.sh"
np=${WEFT_TORCH_CUDA_NP:-2}
limit=${WEFT_TEST_TIMEOUT:-300}
if [ $sim = 1 ]; then
    export WEFT_TORCH_CUDA_SIM=1
    what="CUDA code paths simulated on CPU tensors"
else
    unset WEFT_TORCH_CUDA_SIM
    # Why not, in one line, or nothing: torch's CUDA build and device, then libweft's GPU support.
    why=$("$py" - <<'EOF' 2>&1
import torch
if torch.version.cuda is None:
    print(f"torch {torch.__version__} is a build without CUDA")
elif not torch.cuda.is_available():
    try:
        torch.cuda.init()
        print("torch.cuda.is_available() is False")
    except Exception as e:
        print(f"no usable CUDA device: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
else:
    import weft
    info = weft.build_info()
    cuda = next((f for f in info.split() if f.startswith("cuda=")), "")
    if cuda in ("", "cuda=no") or "no-gpu-paths" in cuda:
        print(f"{weft.library_path()} has no GPU support ({cuda or 'no cuda= in weft_build_info'}): "
              "build weft with --with-cuda")
EOF
    )
    if [ -n "$why" ]; then
        echo "SKIP: no GPU for the weft torch CUDA test: $(echo "$why" | tail -n 1)"
        exit 77
    fi
    what="$("$py" -c 'import torch; n = torch.cuda.device_count(); print(f"{n} GPU(s), {torch.cuda.get_device_name(0)}")' 2>/dev/null)"
fi
echo "torch: $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null) ($py), library $("$py" -c 'import weft; print(weft.library_path())' 2>&1 | tail -n 1); $np ranks, $what"
# cuBLAS picks the same kernels whatever the stream (the FSDP cases compare bits across runs)
export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}
hang_dump=${WEFT_TEST_HANG_DUMP:-$((limit > 60 ? limit - 30 : limit * 3 / 4))}
kill_t=${WEFT_TORCH_KILL_TIMEOUT:-5}
kill_monitor=${WEFT_TORCH_KILL_MONITOR:-40}
kill_limit=$((kill_monitor + 60))
passed=0 failed=0

# torchrun_case NAME WORKER_ENV... -- LIMIT TORCHRUN_OPTIONS...: runs the worker on $np ranks
# under torchrun within LIMIT seconds (output in $out, each rank's stacks on a hang or a signal in $hang); sets rc.
torchrun_case() {
    local name=$1
    shift
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    out=$(mktemp "${TMPDIR:-/tmp}/weft-torch-cuda.XXXXXX")
    hang=$(mktemp -d "${TMPDIR:-/tmp}/weft-torch-cuda-hang.XXXXXX")
    t0=$SECONDS
    env WEFT_TEST_HANG_DIR="$hang" "${envs[@]}" timeout -k 10 "$1" "$py" -m torch.distributed.run --standalone \
        --nproc-per-node "$np" "${@:2}" "$here/torch_cuda_worker.py" >"$out" 2>&1
    rc=$?
}

# what went wrong: error lines, the last lines, each rank's stacks if it hung or was signalled
report_failure() {
    grep -v 'UserWarning\|_conversion_method_template\|warnings.warn' "$out" | grep -E "FAIL|Error|error|Traceback|File \"" | head -n 60 | sed 's/^/    /'
    echo "    --- last lines:"
    tail -n 30 "$out" | sed 's/^/    /'
    for f in "$hang"/rank*.txt; do
        [ -s "$f" ] || continue
        r=${f##*/rank}
        r=${r%.txt}
        if grep -q "^Timeout (" "$f"; then
            echo "    --- rank $r hung: still running after WEFT_TEST_HANG_DUMP=$1 s; its threads (most recent call first):"
        else
            echo "    --- rank $r was ended by a signal (torchrun, after another rank failed or died); its threads then:"
        fi
        # each thread: its 6 innermost frames, and every frame of the worker and of weft
        awk '!/^  File /{print; n = 0; gap = 0; next}
             {n++} n <= 6 || /torch_cuda_worker\.py|torch_host_gloo\.py|\/weft\//{print; gap = 0; next}
             !gap{print "  ..."; gap = 1}' "$f" | head -n 120 | sed 's/^/    /'
    done
}

for c in ${WEFT_TORCH_CUDA_CASES:-main kill}; do
    case $c in
    main)
        # Every collective, DDP, FSDP, the timeouts: all ranks print "..., ok".
        torchrun_case main WEFT_TORCH_CUDA_CASE=main WEFT_TEST_HANG_DUMP="$hang_dump" -- "$limit" --monitor-interval 0.2
        ok=$(grep -o "torch cuda worker: rank [0-9]* of $np, ok" "$out" | wc -l)
        grep -E "^DDP 5 steps|^FSDP |^async: |^checks: |timeout raised|GPU collective nobody waited" "$out" |
            cut -c1-640 | sed 's/^/    /'
        if [ $rc = 0 ] && [ "$ok" = "$np" ]; then
            echo "PASS: CUDA tensors ($what), $np ranks ($((SECONDS - t0)) s)"
            passed=$((passed + 1))
        else
            echo "FAIL: CUDA tensors ($what), $np ranks: exit status $rc, $ok of $np ranks ok ($((SECONDS - t0)) s)"
            report_failure "$hang_dump"
            failed=$((failed + 1))
        fi
        ;;
    kill)
        # A rank SIGKILLed while the others are in a CUDA all_reduce on a group with a
        # $kill_t s timeout. torchrun looks at its workers every $kill_monitor s (longer than
        # the start, the timeout and a margin): the survivors raise and exit 0 before it
        # notices the dead one and ends the job with its failure. The pass is read from the
        # survivors' own lines, not from torchrun: each of the NP - 1 says it raised weft's
        # error within the timeout naming the killed rank ("... ok: ..."), none says FAIL,
        # the victim said it kills itself, and torchrun reports its SIGKILL.
        if [ "$np" -lt 2 ]; then
            echo "SKIP: a killed rank on CUDA: needs 2 ranks or more (WEFT_TORCH_CUDA_NP=$np)"
            continue
        fi
        kd=$((kill_limit > 40 ? kill_limit - 20 : kill_limit * 3 / 4))
        torchrun_case kill WEFT_TORCH_CUDA_CASE=kill KILL_TEST_TIMEOUT="$kill_t" WEFT_TEST_HANG_DUMP="$kd" -- \
            "$kill_limit" --monitor-interval "$kill_monitor"
        want=$((np - 1))
        ok=$(grep -o "torch cuda kill worker: rank [0-9]* ok: raised within" "$out" | wc -l)
        raised=$(grep -o "torch cuda kill worker: rank [0-9]* raised WeftDist[A-Za-z]*Error after [0-9.]* s" "$out" | wc -l)
        killed=$(grep -c "torch cuda kill worker: rank $((np - 1)) kills itself" "$out")
        grep -E "^torch cuda kill worker: " "$out" | cut -c1-500 | sed 's/^/    /'
        if [ $rc != 0 ] && [ $rc != 124 ] && [ $rc != 137 ] && [ "$ok" = "$want" ] && [ "$raised" = "$want" ] &&
            [ "$killed" = 1 ] && grep -q "Signal 9 (SIGKILL)" "$out" && ! grep -q "torch cuda kill worker: .*FAIL" "$out"; then
            echo "PASS: a killed rank on CUDA ($what), $np ranks: $want survivors raised weft's error naming the killed rank, within the ${kill_t} s group timeout + 5 s ($((SECONDS - t0)) s)"
            passed=$((passed + 1))
        else
            echo "FAIL: a killed rank on CUDA ($what), $np ranks: exit status $rc (torchrun should fail on the SIGKILL), $ok of $want survivors ok, $raised raised, victim's line $killed of 1 ($((SECONDS - t0)) s)"
            report_failure "$kd"
            failed=$((failed + 1))
        fi
        ;;
    *)
        echo "FAIL: WEFT_TORCH_CUDA_CASES: no case '$c' (main, kill)"
        failed=$((failed + 1))
        continue
        ;;
    esac
    rm -rf "$out" "$hang"
done
echo "$passed passed, $failed failed"
[ $failed = 0 ]
