#!/bin/bash
# The weft torch.distributed backend on CUDA tensors, under torchrun --standalone:
#   tests/torch_cuda_worker.py on NP local processes (default 2) that share the host's GPU
#   (rank r takes GPU r mod the GPU count: one GPU shared by every rank, or one GPU each):
#   every collective on CUDA tensors against gloo on CPU tensors and against weft's
#   rounding, async_op / wait() ordering without host blocking, futures, CUDA
#   point-to-point and barrier, what is refused, split_group / new_group with a bound
#   device, a "cpu:gloo,cuda:weft" group, DDP on CUDA against gloo, a GPU collective
#   whose peer never comes failing within the group's timeout, polled and with nobody waiting
#   (the backend's watchdog).
# Exit 0 pass, 77 skip (no torch, no CUDA device, or a libweft without GPU support; the
# reason is printed), 1 fail.
#
# usage: contrib/python/tests/run-torch-cuda.sh [BUILD_DIR]
#   --sim              (first argument) no GPU: CPU tensors through the backend's CUDA code
#                      paths with stand-ins for torch.cuda (run-torch-backend.sh runs this)
#   WEFT_TORCH_PYTHON  interpreter with torch (default: the checkout's .venv/bin/python, python3)
#   WEFT_TORCH_CUDA_NP ranks (default 2)
#   WEFT_TEST_TIMEOUT  seconds for the torchrun (default 300)
#   WEFT_TEST_HANG_DUMP seconds after which a rank still running prints every thread's stack
#                      and exits (default: 30 s before WEFT_TEST_TIMEOUT): a hang fails within
#                      the limit, and the failure shows where each rank was
set -u
sim=0
if [ "${1:-}" = --sim ]; then
    sim=1
    shift
fi
here="$(cd "$(dirname "$0")" && pwd)"
top="$(cd "$here/../../.." && pwd)"
build="$(cd "${1:-${top_builddir:-$top}}" && pwd)"
py=
for p in "${WEFT_TORCH_PYTHON:-}" "$top/.venv/bin/python" "$(command -v python3 || true)"; do
    [ -n "$p" ] && [ -x "$p" ] || continue
    if "$p" -c 'import torch, torch.distributed.run' >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
    echo "SKIP: torch is not importable (contrib/install-torch.sh makes .venv; or set WEFT_TORCH_PYTHON)"
    exit 77
fi
while IFS= read -r var; do
    case $var in
        PMIX_* | PMI_* | SLURM_* | OMPI_COMM_WORLD_* | PRTE_* | RANK | WORLD_SIZE | LOCAL_RANK | \
            LOCAL_WORLD_SIZE | MASTER_ADDR | MASTER_PORT | GROUP_RANK | TORCHELASTIC_* | WEFT_BOOTSTRAP)
            unset "$var" ;;
    esac
done < <(compgen -e)
export WEFT_LIBRARY="${WEFT_LIBRARY:-$build/.libs/libweft.so.0}"
export PYTHONPATH="$here/../src${PYTHONPATH:+:$PYTHONPATH}"
export OMP_NUM_THREADS=1 WEFT_INIT_TIMEOUT=${WEFT_INIT_TIMEOUT:-60}
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
echo "torch: $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null) ($py), library $WEFT_LIBRARY; $np ranks, $what"
out=$(mktemp "${TMPDIR:-/tmp}/weft-torch-cuda.XXXXXX")
# Each rank's stacks if it hangs (or torchrun ends it): one file a rank.
hang=$(mktemp -d "${TMPDIR:-/tmp}/weft-torch-cuda-hang.XXXXXX")
export WEFT_TEST_HANG_DIR=$hang
export WEFT_TEST_HANG_DUMP=${WEFT_TEST_HANG_DUMP:-$((limit > 60 ? limit - 30 : limit * 3 / 4))}
t0=$SECONDS
timeout -k 10 "$limit" "$py" -m torch.distributed.run --standalone --nproc-per-node "$np" \
    --monitor-interval 0.2 "$here/torch_cuda_worker.py" >"$out" 2>&1
rc=$?
ok=$(grep -o "torch cuda worker: rank [0-9]* of $np, ok" "$out" | wc -l)
grep -E "^DDP 5 steps|^async: |^checks: |timeout raised|GPU collective nobody waited" "$out" |
    cut -c1-400 | sed 's/^/    /'
if [ $rc = 0 ] && [ "$ok" = "$np" ]; then
    echo "PASS: CUDA tensors ($what), $np ranks ($((SECONDS - t0)) s)"
    rm -rf "$out" "$hang"
    exit 0
fi
echo "FAIL: CUDA tensors ($what), $np ranks: exit status $rc, $ok of $np ranks ok ($((SECONDS - t0)) s)"
grep -v 'UserWarning\|_conversion_method_template\|warnings.warn' "$out" | grep -E "FAIL|Error|error|Traceback|File \"" | head -n 60 | sed 's/^/    /'
echo "    --- last lines:"
tail -n 30 "$out" | sed 's/^/    /'
for f in "$hang"/rank*.txt; do
    [ -s "$f" ] || continue
    r=${f##*/rank}
    r=${r%.txt}
    if grep -q "^Timeout (" "$f"; then
        echo "    --- rank $r hung: still running after WEFT_TEST_HANG_DUMP=$WEFT_TEST_HANG_DUMP s; its threads (most recent call first):"
    else
        echo "    --- rank $r was ended by a signal (torchrun, after another rank failed); its threads then:"
    fi
    # each thread: its 6 innermost frames, and every frame of the worker and of weft
    awk '!/^  File /{print; n = 0; gap = 0; next}
         {n++} n <= 6 || /torch_cuda_worker\.py|\/weft\//{print; gap = 0; next}
         !gap{print "  ..."; gap = 1}' "$f" | head -n 120 | sed 's/^/    /'
done
rm -rf "$out" "$hang"
exit 1
