#!/bin/bash
# weft's GPU tests on a host with an NVIDIA GPU: builds the tests when this
# checkout is not built yet (the build needs the packages of
# contrib/install-deps.sh and the CUDA toolkit), then runs
#   - test/test_cuda: device buffers in point-to-point on 2 and 4 ranks
#     sharing the GPU, staged and through UCX (WEFT_CUDA=staged / auto);
#   - test/test_cuda_coll: collectives on device buffers (coll/cuda) on 2-4
#     ranks sharing the GPU, against the same calls on host buffers (without
#     MPS every barrier costs the ranks a GPU time slice: minutes, not
#     seconds; under MPS, nvidia-cuda-mps-control -d, much less);
#   - every GPU algorithm by name (weft_info --coll: coll/cuda's cuda_* rows),
#     forced by WEFT_COLL_TUNE, through weft-osu's validation (-c) on 2 and 3
#     ranks at 4 B - 4 MiB (where a form declines a size, the rules' choice
#     runs it);
#   - contrib/python/tests/test_gpu.py and test_device_arrays.py on 2 ranks,
#     with CuPy / torch arrays, when a python with numpy and pytest is found
#     (PYTHON=...; skipped with the reason otherwise);
#   - contrib/python/tests/run-torch-cuda.sh: weft as a torch.distributed
#     backend on CUDA tensors, 2 ranks (skipped with the reason without torch);
#   - with WEFT_TEST_WHEELS=DIR (weft's wheel and libucx-cu13's): the two
#     Python cases again from the wheel installed offline in a venv over this
#     host's python and torch;
#   - contrib/torch-dist-tests.sh with TORCH_DIST_DEVICE=cuda: PyTorch's own
#     distributed tests (CUDA, backend "nccl") on weft's libnccl.so.2 against
#     NVIDIA's, at 1, 2 and 4 ranks where each rank has a GPU of its own
#     (one GPU: 1 rank, the tests that need one; part torchdist);
#   - test/nccl/torch_nccl_gpu.sh: PyTorch's own "nccl" backend on weft's
#     libnccl.so.2 (LD_PRELOAD), 1, 2 and 4 ranks, eager and lazy, against
#     gloo, NVIDIA's library alongside where it runs, and weft-nccl-tests
#     through weft's library (skipped with the reason without torch);
# Ranks take GPU LOCAL_RANK modulo the GPUs visible: one GPU shared, or one
# each (CUDA_VISIBLE_DEVICES=0 shares the first of several);
# and prints one summary line: "gpu tests: N passed, M failed, K skipped".
# WEFT_TEST_GPU_MPS=1 runs it under MPS (see below).
# WEFT_TEST_GPU_PARTS picks parts (default all): suites (test_cuda,
# test_cuda_coll), algs, python, wheel, nccl, torchdist; e.g. "suites algs" on a host
# whose commands must end within a time limit, then "python wheel nccl".
#
#   contrib/gpu-test.sh [BUILD_DIR]     (default: this checkout)
# UCX with CUDA transports: put its libraries first on LD_LIBRARY_PATH (and
# UCX_MODULE_DIR at its modules) before running; weft_info's "memory:" line
# says which path device buffers take. A host that cannot build weft or
# download: contrib/gpu-bundle.sh builds everything here, and its run.sh runs
# this script there (gpu-bundle/run.sh contrib/gpu-test.sh gpu-bundle/build).
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src}" && pwd)
parts=" ${WEFT_TEST_GPU_PARTS:-suites algs python wheel nccl torchdist} "
for p in $parts; do
    case $p in suites | algs | python | wheel | nccl | torchdist) ;; *)
        echo "gpu-test: WEFT_TEST_GPU_PARTS: unknown part '$p' (suites algs python wheel nccl torchdist)" >&2
        exit 2
        ;;
    esac
done
part() { [[ $parts == *" $1 "* ]]; }
# A script's exit status counted: 0 passed, 77 skipped, else failed.
tally() {
    case $1 in
        0) passed=$((passed + 1)) ;;
        77) skipped=$((skipped + 1)) ;;
        *) failed=$((failed + 1)) ;;
    esac
}
# The build, when this checkout is not built yet (the suites need it).
if part suites && { [ ! -x "$build/test/test_cuda" ] || [ ! -x "$build/test/test_cuda_coll" ]; }; then
    (cd "$build" && { [ -x configure ] || ./autogen.sh; } && { [ -f Makefile ] || ./configure --with-cuda; } &&
        make -j"$(nproc)" && make -j"$(nproc)" test/test_cuda test/test_cuda_coll) ||
        { echo "gpu-test: build failed" >&2; exit 1; }
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# NVLink multicast stays off on shared GPU hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The logs: WEFT_TEST_GPU_LOGS=DIR keeps them there (each test's result line
# is written as it ends, so a run cut short still shows how far it got). A
# WEFT_TEST_ name: weft ignores that prefix (any other unknown WEFT_* variable
# makes every rank warn); the old name WEFT_GPU_TEST_LOGS is taken too, and
# unset so that the ranks never see it.
WEFT_TEST_GPU_LOGS=${WEFT_TEST_GPU_LOGS:-${WEFT_GPU_TEST_LOGS:-}}
unset WEFT_GPU_TEST_LOGS
# Commands run at exit (single-quoted: expanded then, by at_exit's eval).
cleanup=()
# shellcheck disable=SC2317 # the EXIT trap calls it
at_exit() { for c in ${cleanup[@]+"${cleanup[@]}"}; do eval "$c"; done; }
trap at_exit EXIT
if [ -n "$WEFT_TEST_GPU_LOGS" ]; then
    log=$WEFT_TEST_GPU_LOGS
    mkdir -p "$log"
else
    log=$(mktemp -d "${TMPDIR:-/tmp}/weft-gpu-test.XXXXXX")
    # shellcheck disable=SC2016
    cleanup+=('rm -rf "$log"')
fi
# WEFT_TEST_GPU_MPS=1: the run under NVIDIA's MPS (ranks that share a GPU
# then run at once instead of taking turns in time slices), through a control
# daemon of its own, stopped at the end.
if [ "${WEFT_TEST_GPU_MPS:-0}" = 1 ]; then
    # shellcheck source=contrib/lib-mps.sh
    . "$src/contrib/lib-mps.sh"
    mps=$(mktemp -d "${TMPDIR:-/tmp}/weft-gpu-mps.XXXXXX")
    mps_start "$mps" "gpu-test: WEFT_TEST_GPU_MPS=1"
    # shellcheck disable=SC2016
    cleanup+=('mps_stop; rm -rf "$mps"')
    echo "== MPS: a control daemon of this run (pipe $CUDA_MPS_PIPE_DIRECTORY)"
fi
passed=0 failed=0 skipped=0 status=0

part suites && for t in test_cuda test_cuda_coll; do
    echo "== test/$t"
    st=0
    timeout 1800 "$build/test/$t" -j1 --verbose >"$log/$t.log" 2>&1 || st=1
    grep -E "^\[(PASS|FAIL|SKIP)\]" "$log/$t.log"
    line=$(grep -E "Synthesis: Tested" "$log/$t.log" | tail -1)
    passed=$((passed + $(sed -nE 's/.*Passing: ([0-9]+).*/\1/p' <<<"$line")))
    failed=$((failed + $(sed -nE 's/.*Failing: ([0-9]+) \| Crashing: ([0-9]+).*/\1+\2/p' <<<"$line")))
    skipped=$((skipped + $(grep -c "^\[SKIP\]" "$log/$t.log")))
    [ "$st" -eq 0 ] || { status=1; tail -40 "$log/$t.log"; }
done

part algs && echo "== every GPU algorithm by name (WEFT_COLL_TUNE), validated by weft-osu -c on 2 and 3 ranks"
if ! part algs; then
    :
elif [ ! -x "$build/contrib/bench/weft-osu" ] || [ ! -x "$build/tools/weft_info" ]; then
    echo "skipped: contrib/bench/weft-osu or tools/weft_info not built"
    skipped=$((skipped + 1))
else
    # "coll alg" for each of coll/cuda's kernel algorithms (component cuda, name cuda_*)
    "$build/tools/weft_info" --coll 2>/dev/null | awk '$1 == "cuda" && $3 ~ /^cuda_/ {print $2, $3}' >"$log/algs.txt"
    while read -r coll alg; do
        for np in 2 3; do
            prog=${coll//_/-}
            st=0
            WEFT_COLL_TUNE="$coll:mem=cuda:$alg" timeout 600 "$build/tools/weftrun" -n "$np" --timeout 500 \
                "$build/contrib/bench/weft-osu" "$prog" -d cuda -c -m 4:4m -i 3 -x 1 --iters-large 3 \
                --warmup-large 1 >"$log/alg-$coll-$alg-np$np.log" 2>&1 || st=1
            if [ "$st" -eq 0 ]; then
                passed=$((passed + 1))
            else
                failed=$((failed + 1))
                status=1
                echo "[FAIL] $coll $alg on $np ranks"
                tail -5 "$log/alg-$coll-$alg-np$np.log"
            fi
        done
    done <"$log/algs.txt"
    echo "$(wc -l <"$log/algs.txt") algorithms run"
fi

py=${PYTHON:-}
for c in python3 /usr/bin/python3; do
    [ -n "$py" ] && break
    command -v "$c" >/dev/null && "$c" -c 'import numpy, pytest' 2>/dev/null && py=$c
done
# The Python cases: PY is the interpreter, WEFTRUN the launcher, TAG names the logs;
# INSTALLED=1 tests the weft package installed in PY (a wheel) with the library it
# finds itself, else this checkout's package and build.
python_cases() { # PY WEFTRUN TAG INSTALLED
    local py=$1 weftrun=$2 tag=$3 installed=$4 st sum
    local ftag=${tag// /} # in file names
    local env=(env PYTHONPATH="$src/contrib/python/src${PYTHONPATH:+:$PYTHONPATH}" WEFT_LIBRARY="$build/.libs/libweft.so.0")
    [ "$installed" = 1 ] && env=(env -u PYTHONPATH -u WEFT_LIBRARY)
    echo "== Python device arrays (2 ranks$tag)"
    (cd "$src/contrib/python" && "${env[@]}" WEFT_TEST_TIMEOUT=60 timeout 900 "$weftrun" -n 2 --timeout 600 bash -c \
        "exec $py -m pytest -q -rs -p no:cacheprovider tests/test_gpu.py tests/test_device_arrays.py >$log/py$ftag\$RANK.log 2>&1") ||
        status=1
    tail -n 15 "$log/py${ftag}0.log"
    sum=$(grep -E "[0-9]+ (passed|failed)" "$log/py${ftag}0.log" | tail -1)
    passed=$((passed + $(grep -oE "[0-9]+ passed" <<<"$sum" | grep -oE "[0-9]+" || echo 0)))
    failed=$((failed + $(grep -oE "[0-9]+ failed" <<<"$sum" | grep -oE "[0-9]+" || echo 0)))
    skipped=$((skipped + $(grep -oE "[0-9]+ skipped" <<<"$sum" | grep -oE "[0-9]+" || echo 0)))
    echo "== torch.distributed backend on CUDA tensors (2 ranks$tag)"
    st=0
    if [ "$installed" = 1 ]; then
        WEFT_TEST_INSTALLED=1 WEFT_TORCH_PYTHON=$py WEFT_TEST_TIMEOUT=${WEFT_TEST_TIMEOUT:-300} \
            "$src/contrib/python/tests/run-torch-cuda.sh" "$build" >"$log/torch$ftag.log" 2>&1 || st=$?
    else
        WEFT_TEST_TIMEOUT=${WEFT_TEST_TIMEOUT:-300} "$src/contrib/python/tests/run-torch-cuda.sh" "$build" \
            >"$log/torch$ftag.log" 2>&1 || st=$?
    fi
    tail -n 40 "$log/torch$ftag.log"
    tally "$st"
}
if ! part python; then
    :
elif [ -z "$py" ]; then
    echo "== Python: skipped: no python with numpy and pytest (set PYTHON=...)"
    skipped=$((skipped + 1))
else
    python_cases "$py" "$build/tools/weftrun" "" 0
fi
# WEFT_TEST_WHEELS=DIR: a folder with weft's wheel (contrib/build-wheel.sh) and
# libucx-cu13's, installed offline into a venv over this host's python and its
# torch; the same Python cases run from it.
if part wheel && [ -n "${WEFT_TEST_WHEELS:-}" ] && [ -n "$py" ]; then
    venv=$log/wheel-venv
    # A venv over $py's packages: where $py is itself a venv's (the torch
    # image's), --system-site-packages reaches only its base, so a .pth file
    # adds $py's own site-packages.
    if "$py" -m venv --system-site-packages "$venv" &&
        "$py" -c 'import site, sys; sys.prefix != sys.base_prefix and print("\n".join(site.getsitepackages()))' \
            >"$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/weft-test-parent.pth" &&
        "$venv/bin/python" -m pip install -q --no-index --find-links "$WEFT_TEST_WHEELS" weft >"$log/wheel-install.log" 2>&1; then
        echo "== the wheel: $(cd "$WEFT_TEST_WHEELS" && ls weft-*.whl) in $venv"
        "$venv/bin/weft_info" | head -n 3
        python_cases "$venv/bin/python" "$venv/bin/weftrun" " wheel" 1
    else
        echo "== the wheel: install failed"
        cat "$log/wheel-install.log"
        failed=$((failed + 1))
    fi
fi
if part nccl; then
    echo "== PyTorch's \"nccl\" backend on weft's libnccl.so.2 (1, 2, 4 ranks; NVIDIA's alongside where it runs)"
    st=0
    "$src/test/nccl/torch_nccl_gpu.sh" "$build" >"$log/torch-nccl.log" 2>&1 || st=$?
    grep -E "^(PASS|FAIL|skip) |^torch nccl on weft" "$log/torch-nccl.log"
    [ "$st" -eq 0 ] || [ "$st" -eq 77 ] || tail -n 40 "$log/torch-nccl.log"
    tally "$st"
fi
if part torchdist; then
    echo "== PyTorch's distributed tests, CUDA: weft's libnccl.so.2 against NVIDIA's"
    st=0
    TORCH_DIST_DEVICE=cuda TORCH_DIST_LOGS="$log/torch-dist-cuda" "$src/contrib/torch-dist-tests.sh" "$build" \
        >"$log/torch-dist-cuda.log" 2>&1 || st=$?
    grep -E "^(nccl|weft-nccl)-[0-9]+:|ranks: |passed, [0-9]+ failed" "$log/torch-dist-cuda.log" | tail -n 20
    tally "$st"
fi
[ "$failed" -eq 0 ] || status=1
echo "gpu tests: $passed passed, $failed failed, $skipped skipped"
exit "$status"
