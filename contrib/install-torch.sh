#!/bin/sh
# Installs PyTorch from PyPI into a virtual environment, for the torchrun
# tests (test/launchers/test_torchrun.sh) and for trying weft under torchrun
# by hand. Run after contrib/install-deps.sh (python3-venv); CI runs it from
# .ci/run. Idempotent: a venv that already has this torch is kept.
#
#   contrib/install-torch.sh            venv in .venv of this checkout (git ignores it)
#   WEFT_TORCH_VENV=DIR                 the venv's directory
#   WEFT_TORCH_VERSION=X.Y.Z            another torch (default 2.11.0)
#   PYTHON=python3.X                    the interpreter the venv is made from (default /usr/bin/python3)
#
# torch 2.11.0 from PyPI is the CUDA build: importing it needs the NVIDIA
# libraries it links (cuBLAS, cuDNN, NCCL, ...) even without a GPU. For
# 2.11.0 this installs torch without its declared dependencies and then
# exactly those it needs to import (the CUDA libraries torch's own modules
# link, pinned as torch pins them) and its small pure-Python ones, leaving
# out triton (torch.compile), cuSOLVER, NVRTC, NVTX and cuda-bindings, which
# are loaded only when used: 2.1 GB to download instead of 2.6 GB, 3.6 GB
# on disk instead of 4.7 GB, about 50 s instead of 85 s on a fast link.
# numpy lets the Python package take torch tensors. Another version gets a
# plain `pip install torch==X.Y.Z`.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${WEFT_TORCH_VENV:-$here/.venv}
version=${WEFT_TORCH_VERSION:-2.11.0}
python=${PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=python3

if [ -x "$venv/bin/python" ] &&
    "$venv/bin/python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
    echo "install-torch: torch $version is already in $venv"
    exit 0
fi
start=$(date +%s)
echo "install-torch: making $venv with torch $version from PyPI"
"$python" -m venv "$venv"
log=$(mktemp "${TMPDIR:-/tmp}/install-torch.XXXXXX")
trap 'rm -f "$log"' EXIT
# pip's output goes to a log, shown when pip fails: it complains, rightly,
# that torch's triton and cuda-bindings are missing (left out on purpose).
pip() {
    "$venv/bin/python" -m pip --disable-pip-version-check --no-cache-dir -q "$@" >>"$log" 2>&1 || {
        echo "install-torch: pip $* failed:"
        cat "$log"
        exit 1
    }
}
if [ "$version" = 2.11.0 ]; then
    pip install --no-deps torch==2.11.0
    pip install filelock 'typing-extensions>=4.10.0' 'setuptools<82' 'sympy>=1.13.3' 'networkx>=2.5.1' jinja2 \
        'fsspec>=0.8.5' numpy \
        'cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusparse,nvjitlink]==13.0.2' \
        nvidia-cudnn-cu13==9.19.0.56 nvidia-cusparselt-cu13==0.8.0 nvidia-nccl-cu13==2.28.9 \
        nvidia-nvshmem-cu13==3.4.5
else
    pip install "torch==$version" numpy
fi
# torch's own distributed tests (contrib/torch-dist-tests.sh) import it.
pip install expecttest
# What the tests need: import torch, and torchrun.
"$venv/bin/python" -c 'import torch, torch.distributed.run; print("install-torch: torch", torch.__version__)' \
    2>&1 | grep -v 'Failed to initialize NumPy\|_conversion_method_template' || true
"$venv/bin/python" -c 'import torch.distributed.run' 2>/dev/null || {
    echo "install-torch: import torch fails in $venv:"
    "$venv/bin/python" -c 'import torch'
    exit 1
}
"$venv/bin/python" -m torch.distributed.run --help >/dev/null
echo "install-torch: done in $(($(date +%s) - start)) s, $(du -sh "$venv" | cut -f1) in $venv"
