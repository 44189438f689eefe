"""The weft torch.distributed backend (weft.torch): runs tests/run-torch-backend.sh
(torchrun on 2 and 4 local processes, every collective against gloo, DDP against
gloo, async work, subgroups, split_group, 8 threads on one group, a timeout that
raises; the backend's CUDA code paths on CPU tensors with stand-ins for torch.cuda;
FSDP FULL_SHARD / HYBRID_SHARD / fully_shard against gloo on 4; a SIGKILLed rank
on 4) and tests/run-torch-cuda.sh (CUDA tensors on a GPU; skipped, with its reason,
where there is none). Skips with the reason when torch is not importable, and inside
a multi-rank pytest run (run-tests.sh launches every test on every rank; these
launch their own ranks)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def test_import_weft_does_not_import_torch_backend() -> None:
    code = "import sys, weft; assert 'weft.torch' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_torch_backend_under_torchrun() -> None:
    if any(v in os.environ for v in ("RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK")):
        pytest.skip("launches its own ranks: run tests/run-torch-backend.sh (or pytest on this file alone)")
    out = subprocess.run(
        ["bash", os.path.join(HERE, "run-torch-backend.sh")],
        capture_output=True,
        text=True,
        timeout=320,
    )
    if out.returncode == 77:
        pytest.skip(out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "torch not importable")
    assert out.returncode == 0, out.stdout + out.stderr


def test_torch_backend_cuda_under_torchrun() -> None:
    if any(v in os.environ for v in ("RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK")):
        pytest.skip("launches its own ranks: run tests/run-torch-cuda.sh (or pytest on this file alone)")
    out = subprocess.run(
        ["bash", os.path.join(HERE, "run-torch-cuda.sh")],
        capture_output=True,
        text=True,
        timeout=420,
    )
    if out.returncode == 77:
        pytest.skip(out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "no GPU")
    assert out.returncode == 0, out.stdout + out.stderr
