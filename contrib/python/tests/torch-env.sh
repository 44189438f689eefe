# Sourced by run-torch-backend.sh and run-torch-cuda.sh (after setting `here`, the tests
# folder, and `build`, the build tree): finds a python with torch (WEFT_TORCH_PYTHON, the
# checkout's .venv, python3) into `py`, or skips (exit 77; with CI=true and
# TORCH_ENV_CI_NEEDS_TORCH=1, fails: CI installs torch); clears an enclosing launcher's
# variables, which would change weft's bootstrap; points the ranks at this checkout's
# package and library.
top="$(cd "$here/../../.." && pwd)"
py=
for p in "${WEFT_TORCH_PYTHON:-}" "$top/.venv/bin/python" "$(command -v python3 || true)"; do
    [ -n "$p" ] && [ -x "$p" ] || continue
    if "$p" -c 'import torch, torch.distributed.run' >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
    echo "SKIP: torch is not importable (contrib/install-torch.sh makes .venv; or set WEFT_TORCH_PYTHON)"
    if [ "${CI:-}" = true ] && [ "${TORCH_ENV_CI_NEEDS_TORCH:-0}" = 1 ]; then
        echo "FAIL: CI=true, and CI installs torch"
        exit 1
    fi
    exit 77
fi
while IFS= read -r var; do
    case $var in
        PMIX_* | PMI_* | SLURM_* | OMPI_COMM_WORLD_* | PRTE_* | RANK | WORLD_SIZE | LOCAL_RANK | \
            LOCAL_WORLD_SIZE | MASTER_ADDR | MASTER_PORT | GROUP_RANK | TORCHELASTIC_* | WEFT_BOOTSTRAP)
            unset "$var" ;;
    esac
done < <(compgen -e)
# WEFT_TEST_INSTALLED=1: the weft package installed in that python (a wheel) is the one
# tested, with the library it finds itself.
if [ "${WEFT_TEST_INSTALLED:-0}" = 1 ]; then
    unset WEFT_LIBRARY
else
    export WEFT_LIBRARY="${WEFT_LIBRARY:-$build/.libs/libweft.so.0}"
    export PYTHONPATH="$here/../src${PYTHONPATH:+:$PYTHONPATH}"
fi
export OMP_NUM_THREADS=1 WEFT_INIT_TIMEOUT=${WEFT_INIT_TIMEOUT:-60}
