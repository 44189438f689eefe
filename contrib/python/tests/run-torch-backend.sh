#!/bin/bash
# The weft torch.distributed backend test: tests/torch_backend_worker.py under
# torchrun --standalone on 2 and on 4 local processes (each rank checks every
# collective against gloo in the same job, DDP against gloo, async work,
# subgroups, a timeout that raises). Exit 0 pass, 77 skip (no torch), 1 fail.
#
# usage: contrib/python/tests/run-torch-backend.sh [BUILD_DIR]
#   WEFT_TORCH_PYTHON  interpreter with torch (default: the checkout's .venv/bin/python, python3)
#   WEFT_TEST_TIMEOUT  seconds per torchrun (default 120)
set -u
here="$(cd "$(dirname "$0")" && pwd)"
top="$(cd "$here/../../.." && pwd)"
build="$(cd "${1:-${top_builddir:-$top}}" && pwd)" # make check passes top_builddir
py=
for p in "${WEFT_TORCH_PYTHON:-}" "$top/.venv/bin/python" "$(command -v python3 || true)"; do
    [ -n "$p" ] && [ -x "$p" ] || continue
    if "$p" -c 'import torch, torch.distributed.run' >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
    echo "SKIP: torch is not importable (contrib/install-torch.sh makes .venv; or set WEFT_TORCH_PYTHON)"
    [ "${CI:-}" = true ] && { echo "FAIL: CI=true, and CI installs torch"; exit 1; }
    exit 77
fi
# A clean launch environment: an enclosing launcher's variables would change weft's bootstrap.
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
limit=${WEFT_TEST_TIMEOUT:-120}
echo "torch: $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null) ($py), library $WEFT_LIBRARY"
passed=0 failed=0
for np in 2 4; do
    out=$(mktemp "${TMPDIR:-/tmp}/weft-torch-backend.XXXXXX")
    t0=$SECONDS
    timeout -k 10 "$limit" "$py" -m torch.distributed.run --standalone --nproc-per-node "$np" \
        --monitor-interval 0.2 "$here/torch_backend_worker.py" >"$out" 2>&1
    rc=$?
    ok=$(grep -c "^torch backend worker: rank [0-9]* of $np, ok$" "$out")
    grep -E "^DDP 5 steps|timeout raised" "$out" | sed 's/^/    /'
    if [ $rc = 0 ] && [ "$ok" = "$np" ]; then
        echo "PASS: $np ranks ($((SECONDS - t0)) s)"
        passed=$((passed + 1))
    else
        echo "FAIL: $np ranks: exit status $rc, $ok of $np ranks ok ($((SECONDS - t0)) s)"
        grep -v 'UserWarning\|_conversion_method_template' "$out" | tail -n 40 | sed 's/^/    /'
        failed=$((failed + 1))
    fi
    rm -f "$out"
done
echo "$passed passed, $failed failed"
[ $failed = 0 ]
