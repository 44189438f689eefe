#!/bin/bash
# PyTorch's own "nccl" backend on weft's libnccl.so.2, on a host with an
# NVIDIA GPU (contrib/gpu-test.sh runs it; CI has no GPU and skips it):
#   1. test/nccl/torch_nccl_worker.py under torchrun --standalone on 1, 2 and
#      4 ranks (GPU = LOCAL_RANK modulo the GPUs visible: ranks share one GPU
#      where there are fewer; under MPS, nvidia-cuda-mps-control -d, sharing
#      is much faster), eager (device_id) and lazy (PyTorch's default), every
#      collective of torch's API against gloo in the same job, DDP against
#      gloo, FSDP2 against one process;
#   2. the same worker on NVIDIA's library (no LD_PRELOAD), where it runs
#      (one rank per GPU: NVIDIA's refuses ranks sharing a GPU), so the two
#      columns of the summary compare;
#   3. contrib/bench/weft-nccl-tests with --nccl-lib weft's library: the
#      calls through NCCL's API against weft's own on the same buffers
#      (host_us in its CSV: the binding's cost per call), when it is built.
# weft's library goes first by LD_PRELOAD: libtorch_cuda.so finds
# libnccl.so.2 through its RPATH (nvidia/nccl/lib), which the loader searches
# before LD_LIBRARY_PATH, so LD_LIBRARY_PATH alone leaves NVIDIA's in place;
# a preloaded library whose SONAME is libnccl.so.2 satisfies torch's NEEDED
# entry and comes first in the global scope, so torch's calls bind to it even
# where torch's __init__ maps NVIDIA's by its path (the worker checks where
# the symbols bind, and that weft ran the collectives).
#
#   test/nccl/torch_nccl_gpu.sh [BUILD_DIR]
#   WEFT_TORCH_PYTHON  interpreter with torch (default: the checkout's .venv, python3)
#   WEFT_TEST_TIMEOUT  seconds per torchrun (default 600)
#   WEFT_NCCL_RANKS    rank counts (default "1 2 4")
# Exit 0 pass, 77 skip (no torch, no GPU), 1 fail.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
top="$(cd "$here/../.." && pwd)"
build="$(cd "${1:-${top_builddir:-$top}}" && pwd)"
lib="$build/.libs/libnccl.so.2"
[ -e "$lib" ] || { echo "FAIL: $lib was not built (make in $build)"; exit 1; }
py=
for p in "${WEFT_TORCH_PYTHON:-}" "$top/.venv/bin/python" "$(command -v python3 || true)"; do
    [ -n "$p" ] && [ -x "$p" ] || continue
    if "$p" -c 'import torch, torch.distributed.run' >/dev/null 2>&1; then py=$p; break; fi
done
[ -n "$py" ] || { echo "SKIP: torch is not importable (contrib/install-torch.sh, or WEFT_TORCH_PYTHON)"; exit 77; }
ngpu=$("$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
[ "$ngpu" -gt 0 ] || { echo "SKIP: torch sees no GPU"; exit 77; }
# An enclosing launcher's variables would change how the ranks meet.
for v in $(compgen -e); do
    case $v in PMIX_* | PMI_* | SLURM_* | OMPI_COMM_WORLD_* | RANK | WORLD_SIZE | LOCAL_RANK | LOCAL_WORLD_SIZE | \
        MASTER_ADDR | MASTER_PORT | TORCHELASTIC_* | WEFT_BOOTSTRAP) unset "$v" ;; esac
done
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$build/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
limit=${WEFT_TEST_TIMEOUT:-600}
log=$(mktemp -d "${TMPDIR:-/tmp}/weft-nccl-gpu.XXXXXX")
trap 'rm -rf "$log"' EXIT
echo "torch $("$py" -c 'import torch; print(torch.__version__)'), $ngpu GPU(s), weft's library $lib"
passed=0 failed=0 skipped=0
nvidia_lib=$("$py" -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib", "libnccl.so.2"))' \
    2>/dev/null)

# case NAME NP MODE LIBRARY: LIBRARY "weft" (preloaded) or "nvidia".
run_case() {
    local name=$1 np=$2 mode=$3 which=$4 st=0
    local env=(WEFT_NCCL_LIB="$lib")
    [ "$which" = weft ] && env+=(LD_PRELOAD="$lib")
    if [ "$which" = nvidia ]; then
        env+=(WEFT_NCCL_LIB="$nvidia_lib" WEFT_TEST_NCCL_UNDER=nvidia)
        if [ "$np" -gt "$ngpu" ]; then
            echo "skip $name: NVIDIA's library needs a GPU per rank ($np ranks, $ngpu GPUs)"
            skipped=$((skipped + 1))
            return
        fi
    fi
    env "${env[@]}" timeout "$limit" "$py" -m torch.distributed.run --standalone --nproc-per-node "$np" \
        "$here/torch_nccl_worker.py" "$mode" >"$log/$name.log" 2>&1 || st=$?
    local ok fail
    ok=$(grep -c "^ok " "$log/$name.log")
    fail=$(grep -c "^FAIL " "$log/$name.log")
    if [ "$st" -eq 0 ] && [ "$fail" -eq 0 ]; then
        echo "PASS $name ($ok checks over $np ranks)"
        passed=$((passed + 1))
    else
        echo "FAIL $name (exit $st, $fail failed checks):"
        grep -E "^FAIL |Error|error" "$log/$name.log" | head -20
        tail -n 20 "$log/$name.log"
        failed=$((failed + 1))
    fi
}

for np in ${WEFT_NCCL_RANKS:-1 2 4}; do
    for mode in eager lazy; do
        run_case "weft-$mode-$np" "$np" "$mode" weft
        run_case "nvidia-$mode-$np" "$np" "$mode" nvidia
    done
done

bench="$build/contrib/bench/weft-nccl-tests"
if [ -x "$bench" ]; then
    np=$((ngpu < 2 ? 2 : ngpu))
    [ "$np" -gt 4 ] && np=4
    if "$build/tools/weftrun" -n "$np" --timeout "$limit" "$bench" --nccl-lib "$lib" -c allreduce,allgather \
        -t bf16,fp32 -m 8:64m -r 3 -g 0,1 --csv "$log/bench.csv" >"$log/bench.log" 2>&1; then
        echo "PASS weft-nccl-tests through weft's libnccl.so.2 ($np ranks): its 'nccl' column is weft by NCCL's API"
        grep -E "^#|^ *[0-9]" "$log/bench.log" | head -40
        passed=$((passed + 1))
    else
        echo "FAIL weft-nccl-tests through weft's libnccl.so.2:"
        tail -n 30 "$log/bench.log"
        failed=$((failed + 1))
    fi
else
    echo "skip weft-nccl-tests: not built (configure found no static CUDA runtime)"
    skipped=$((skipped + 1))
fi
echo "torch nccl on weft: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
