"""Device arrays on a real GPU (CuPy and/or torch): send / recv / isend / irecv
device to device, host to device and back, and producers whose last kernel is
still queued on a side stream when weft is called; the stream-ordered
collectives (all_reduce, reduce, broadcast, all_gather_single,
reduce_scatter_single, all_to_all_single, barrier) against the same
collective on host copies through weft, async_op=True, and a call on a side
stream whose later kernels read the result without a host synchronisation.

Skipped, with the reason, where there is no CUDA device (probed in a child
process, so this one never loads libcuda), where neither CuPy nor torch is
importable, where libweft was built without GPU support, on fewer than 2
ranks, or with WEFT_TEST_PY_GPU=0 (run-tests.sh sets it for every
configuration but env2, so the GPU tests run once). The same tests without a
GPU, over host memory, are in test_device_arrays.py.

Negative control: with WEFT_PY_GPU_TEST_NO_SYNC=1 weft synchronises nothing
and the two *_waits_* tests should fail.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from typing import Any, Tuple

import numpy as np
import pytest

import weft

_PROBE = r"""
import ctypes, sys
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print("0 libcuda.so.1 cannot be loaded (%s)" % e)
    sys.exit()
rc = lib.cuInit(0)
if rc:
    print("0 cuInit failed (CUresult %d)" % rc)
    sys.exit()
n = ctypes.c_int(0)
rc = lib.cuDeviceGetCount(ctypes.byref(n))
if rc:
    print("0 cuDeviceGetCount failed (CUresult %d)" % rc)
else:
    print("%d cuDeviceGetCount found %d devices" % (n.value, n.value))
"""


@functools.lru_cache(maxsize=None)
def _probe_cuda() -> Tuple[int, str]:
    """(number of CUDA devices, why none) from a child process."""
    try:
        p = subprocess.run(
            [sys.executable, "-c", _PROBE],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return 0, f"the CUDA probe failed: {e}"
    m = re.match(r"(\d+) (.*)", p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "")
    if m is None:
        return 0, f"the CUDA probe said {p.stdout.strip()!r}"
    n = int(m.group(1))
    return n, (m.group(2) if n == 0 else "")


def _skip_reason() -> str:
    if os.environ.get("WEFT_TEST_PY_GPU", "1") == "0":
        return "GPU tests are off here (WEFT_TEST_PY_GPU=0; run-tests.sh runs them in env2 only)"
    if weft.init().size < 2:
        return "GPU point-to-point tests need 2 or more ranks"
    n, why = _probe_cuda()
    if n == 0:
        return f"no CUDA device: {why}"
    info = weft.build_info()
    m = re.search(r"(?:^| )cuda=(\S*)", info)
    if m is None or m.group(1) == "no" or "no-gpu-paths" in m.group(1):
        value = m.group(0).strip() if m else "no cuda= entry"
        return f"libweft was built without GPU support (weft_build_info: {value})"
    return ""


_REASON = _skip_reason()
pytestmark = pytest.mark.skipif(bool(_REASON), reason=_REASON)

N = 1 << 16
BIG = 1 << 21  # 8 MiB of float32: UCX rendezvous / staging in chunks
SPIN_CYCLES = 200_000_000  # ~0.1 s of GPU clock: the queued kernel is still running


class CaiOnly:
    """Shows only __cuda_array_interface__ (read when weft asks, so CuPy names the
    stream current then), to test that path with arrays that also speak DLPack."""

    def __init__(self, x: Any):
        self._x = x

    @property
    def __cuda_array_interface__(self) -> dict:
        return self._x.__cuda_array_interface__


class CupyArrays:
    name = "cupy"
    has_bf16 = False

    def __init__(self, device: int):
        import cupy

        self.cp = cupy
        cupy.cuda.Device(device).use()
        self.spin_problem = ""
        try:  # compiled now (NVRTC), before any test communicates
            self._spin = cupy.RawKernel(
                'extern "C" __global__ void weft_test_spin(long long cycles) {'
                "  long long t0 = clock64(); while (clock64() - t0 < cycles) { } }",
                "weft_test_spin",
            )
            self.spin(0)
            self.synchronize()
        except Exception as e:  # no NVRTC: the same on every rank
            self.spin_problem = f"CuPy cannot run the spin kernel: {e!r}"

    def full(self, n: int, value: float, dtype: str = "float32") -> Any:
        return self.cp.full(n, value, dtype=dtype)

    def host(self, x: Any) -> np.ndarray:
        return self.cp.asnumpy(x)

    def array(self, a: np.ndarray, dtype: str) -> Any:
        return self.cp.asarray(a.astype(dtype))

    def zeros(self, n: int, dtype: str) -> Any:
        return self.cp.zeros(n, dtype=dtype)

    def host_copy(self, x: Any) -> Any:
        """A host copy of ``x`` that weft reads as host memory, same dtype."""
        return self.cp.asnumpy(x)

    def numpy(self, x: Any) -> np.ndarray:
        return np.asarray(x) if isinstance(x, np.ndarray) else self.cp.asnumpy(x)

    def current_stream(self) -> Any:
        return self.cp.cuda.get_current_stream()

    def idle(self, stream: Any) -> bool:
        return bool(stream.done)

    def stream(self) -> Any:
        return self.cp.cuda.Stream(non_blocking=True)

    def on(self, stream: Any) -> Any:
        return stream  # a CuPy stream is its own context manager

    def spin(self, cycles: int) -> None:
        self._spin((1,), (1,), (self.cp.int64(cycles),))

    def fill(self, x: Any, value: float) -> None:
        x.fill(value)

    def synchronize(self) -> None:
        self.cp.cuda.runtime.deviceSynchronize()


class TorchArrays:
    name = "torch"
    has_bf16 = True

    def __init__(self, device: int):
        import torch

        self.torch = torch
        torch.cuda.set_device(device)
        self.spin_problem = "" if hasattr(torch.cuda, "_sleep") else "torch.cuda._sleep is gone"

    def full(self, n: int, value: float, dtype: str = "float32") -> Any:
        return self.torch.full((n,), value, dtype=getattr(self.torch, dtype), device="cuda")

    def host(self, x: Any) -> np.ndarray:
        return x.cpu().float().numpy() if x.dtype == self.torch.bfloat16 else x.cpu().numpy()

    def array(self, a: np.ndarray, dtype: str) -> Any:
        t = self.torch.from_numpy(np.ascontiguousarray(a))
        return t.to(device="cuda", dtype=getattr(self.torch, dtype))

    def zeros(self, n: int, dtype: str) -> Any:
        return self.torch.zeros(n, dtype=getattr(self.torch, dtype), device="cuda")

    def host_copy(self, x: Any) -> Any:
        """A host copy of ``x`` that weft reads as host memory, same dtype: a numpy
        array, or for bfloat16 (no numpy dtype) a CPU tensor (DLPack on the CPU)."""
        return x.cpu() if x.dtype == self.torch.bfloat16 else x.cpu().numpy()

    def numpy(self, x: Any) -> np.ndarray:
        return x if isinstance(x, np.ndarray) else self.host(x)

    def current_stream(self) -> Any:
        return self.torch.cuda.current_stream()

    def idle(self, stream: Any) -> bool:
        return bool(stream.query())

    def stream(self) -> Any:
        return self.torch.cuda.Stream()

    def on(self, stream: Any) -> Any:
        return self.torch.cuda.stream(stream)

    def spin(self, cycles: int) -> None:
        self.torch.cuda._sleep(cycles)

    def fill(self, x: Any, value: float) -> None:
        x.fill_(value)

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()


_FRAMEWORKS = {"cupy": CupyArrays, "torch": TorchArrays}


@pytest.fixture(scope="module", params=sorted(_FRAMEWORKS))
def fw(request: pytest.FixtureRequest) -> Any:
    name = request.param
    try:
        __import__(name)
    except Exception as e:  # ImportError, or a broken install
        pytest.skip(f"{name} is not importable: {e!r}")
    n, _ = _probe_cuda()
    return _FRAMEWORKS[name](weft.local_rank() % n)


@pytest.fixture(autouse=True)
def _no_sync_control(monkeypatch: pytest.MonkeyPatch) -> None:
    """WEFT_PY_GPU_TEST_NO_SYNC=1 is a negative control: weft then synchronises
    no stream, and the *_waits_* tests should fail, showing that they see a
    missing synchronisation."""
    if os.environ.get("WEFT_PY_GPU_TEST_NO_SYNC") == "1":
        from weft import _cuda

        monkeypatch.setattr(_cuda.driver("negative control"), "synchronize", lambda *a: None)


def neighbours(comm: weft.Comm) -> Tuple[int, int]:
    return (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size


def test_gpu_ring_device_to_device(comm, fw):
    right, left = neighbours(comm)
    x = fw.full(N, comm.rank + 1)
    got = fw.full(N, -1)
    fw.synchronize()
    w = comm.isend(x, right, tag=41)
    st = comm.recv(got, left, tag=41)
    w.wait()
    assert st == weft.RecvStatus(left, 41, N * 4)
    np.testing.assert_array_equal(fw.host(got), np.full(N, left + 1, np.float32))


def test_gpu_host_to_device_and_back(comm, fw):
    right, left = neighbours(comm)
    dev = fw.full(N, -1)
    fw.synchronize()
    w = comm.isend(np.arange(N, dtype=np.float32) + comm.rank, right, tag=42)
    comm.recv(dev, left, tag=42)  # host -> device
    w.wait()
    np.testing.assert_array_equal(fw.host(dev), np.arange(N, dtype=np.float32) + left)
    host = np.zeros(N, np.float32)
    w = comm.isend(dev, right, tag=43)  # device -> host
    comm.recv(host, left, tag=43)
    w.wait()
    np.testing.assert_array_equal(host, np.arange(N, dtype=np.float32) + (left - 1) % comm.size)


def test_gpu_isend_irecv_large(comm, fw):
    right, left = neighbours(comm)
    x = fw.full(BIG, comm.rank + 0.5)
    got = fw.full(BIG, -1)
    fw.synchronize()
    rw = comm.irecv(got, left, tag=44)
    sw = comm.isend(x, right, tag=44)
    sw.wait()
    rw.wait()
    assert rw.status == weft.RecvStatus(left, 44, BIG * 4)
    np.testing.assert_array_equal(fw.host(got), np.full(BIG, left + 0.5, np.float32))


@pytest.mark.parametrize("via", ["dlpack", "cai"])
def test_gpu_send_waits_for_the_producer_stream(comm, fw, via):
    """The fill is still queued behind a spinning kernel on a side stream when
    isend is called (no synchronisation by the caller): weft synchronises
    the stream the array names (CAI) or hands over (DLPack) first."""
    if fw.spin_problem:
        pytest.skip(fw.spin_problem)
    right, left = neighbours(comm)
    x = fw.full(BIG, -1)
    got = np.zeros(BIG, np.float32)
    fw.synchronize()
    rw = comm.irecv(got, left, tag=45)
    s = fw.stream()
    with fw.on(s):
        fw.spin(SPIN_CYCLES)
        fw.fill(x, comm.rank + 7)
        sw = comm.isend(x if via == "dlpack" else CaiOnly(x), right, tag=45)
    rw.wait()
    sw.wait()
    np.testing.assert_array_equal(got, np.full(BIG, left + 7, np.float32))


@pytest.mark.parametrize("via", ["dlpack", "cai"])
def test_gpu_recv_waits_for_pending_writes(comm, fw, via):
    """A fill of the receive buffer still queued on a side stream finishes before
    the message lands, so it cannot overwrite it."""
    if fw.spin_problem:
        pytest.skip(fw.spin_problem)
    right, left = neighbours(comm)
    x = fw.full(BIG, 0)
    fw.synchronize()
    sw = comm.isend(np.full(BIG, comm.rank + 3, np.float32), right, tag=46)
    s = fw.stream()
    with fw.on(s):
        fw.spin(SPIN_CYCLES)
        fw.fill(x, -1)
        comm.recv(x if via == "dlpack" else CaiOnly(x), left, tag=46)
    sw.wait()
    fw.synchronize()
    np.testing.assert_array_equal(fw.host(x), np.full(BIG, left + 3, np.float32))


def test_gpu_torch_bfloat16(comm, fw):
    if fw.name != "torch":
        pytest.skip("bfloat16 device arrays: torch only (DLPack type code 4)")
    right, left = neighbours(comm)
    x = fw.full(N, comm.rank + 0.5, dtype="bfloat16")
    got = fw.full(N, -1, dtype="bfloat16")
    fw.synchronize()
    assert weft.dtype_of(x) == weft.DType.BFLOAT16
    w = comm.isend(x, right, tag=47)
    comm.recv(got, left, tag=47)
    w.wait()
    np.testing.assert_array_equal(fw.host(got), np.full(N, left + 0.5, np.float32))


# ---- stream-ordered collectives -------------------------------------------------------------

M = 4096  # elements per rank: small, each collective one round of kernels
_INFO = weft.build_info()
needs_coll_cuda = pytest.mark.skipif(
    "coll/cuda" not in _INFO, reason=f"libweft has no GPU collectives (coll/cuda): {_INFO}"
)


def rank_values(rank: int, n: int = M, seed: int = 0) -> np.ndarray:
    """Small integers (exact in bfloat16, sums too), different on every rank."""
    return ((np.arange(n) * (3 + seed) + 7 * rank) % 17 - 8).astype(np.float64)


def assert_same(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    if dtype == "bfloat16":
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1.6e-2)
    elif dtype.startswith("float"):
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


@needs_coll_cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64"])
@pytest.mark.parametrize("op", ["SUM", "MAX", "AVG"])
def test_gpu_all_reduce(comm, fw, op, dtype):
    """Enqueued on the current stream behind the array's creation; read back on
    the same stream (no synchronisation by the caller)."""
    if dtype == "bfloat16" and not fw.has_bf16:
        pytest.skip(f"{fw.name} has no bfloat16")
    x = fw.array(rank_values(comm.rank), dtype)
    h = fw.host_copy(x)
    assert comm.all_reduce(x, getattr(weft.ReduceOp, op)) is None
    comm.all_reduce(h, getattr(weft.ReduceOp, op))
    assert_same(fw.numpy(x), fw.numpy(h), dtype)


@needs_coll_cuda
def test_gpu_broadcast_and_reduce(comm, fw):
    root = comm.size - 1
    x = fw.array(rank_values(comm.rank), "float32")
    h = fw.host_copy(x)
    comm.broadcast(x, root)
    comm.broadcast(h, root)
    assert_same(fw.numpy(x), fw.numpy(h), "float32")
    assert_same(fw.numpy(x), rank_values(root), "float32")
    y = fw.array(rank_values(comm.rank, seed=1), "int64")
    hy = fw.host_copy(y)
    comm.reduce(y, 0, weft.ReduceOp.SUM)
    comm.reduce(hy, 0, weft.ReduceOp.SUM)
    assert_same(fw.numpy(y), fw.numpy(hy), "int64")


@needs_coll_cuda
def test_gpu_all_gather_single(comm, fw):
    x = fw.array(rank_values(comm.rank), "float32")
    out = fw.zeros(M * comm.size, "float32")
    hout = np.zeros(M * comm.size, np.float32)
    comm.all_gather_single(out, x)
    comm.all_gather_single(hout, fw.host_copy(x))
    assert_same(fw.numpy(out), hout, "float32")
    assert_same(hout[:M], rank_values(0), "float32")


@needs_coll_cuda
def test_gpu_reduce_scatter_single(comm, fw):
    x = fw.array(rank_values(comm.rank, M * comm.size), "float32")
    out = fw.zeros(M, "float32")
    hout = np.zeros(M, np.float32)
    comm.reduce_scatter_single(out, x, weft.ReduceOp.SUM)
    comm.reduce_scatter_single(hout, fw.host_copy(x), weft.ReduceOp.SUM)
    assert_same(fw.numpy(out), hout, "float32")


@needs_coll_cuda
def test_gpu_all_to_all_single(comm, fw):
    x = fw.array(rank_values(comm.rank, M * comm.size, seed=2), "int64")
    out = fw.zeros(M * comm.size, "int64")
    hout = np.zeros(M * comm.size, np.int64)
    comm.all_to_all_single(out, x)
    comm.all_to_all_single(hout, fw.host_copy(x))
    assert_same(fw.numpy(out), hout, "int64")


@needs_coll_cuda
def test_gpu_all_reduce_async_wait(comm, fw):
    x = fw.array(rank_values(comm.rank), "float32")
    h = fw.host_copy(x)
    w = comm.all_reduce(x, weft.ReduceOp.MAX, async_op=True)
    assert isinstance(w, weft.Work)
    assert w.wait() is True  # the GPU work is done
    assert w.is_completed()
    comm.all_reduce(h, weft.ReduceOp.MAX)
    assert_same(fw.numpy(x), h, "float32")


@needs_coll_cuda
def test_gpu_all_reduce_on_a_side_stream(comm, fw):
    """On a non-default stream made current (``with torch.cuda.stream(s):`` /
    ``with s:``): the fill, queued behind a spinning kernel, the all_reduce and
    a kernel reading its result all go on s in that order; only
    s.synchronize() waits, after them."""
    x = fw.zeros(M, "float32")
    fw.synchronize()
    s = fw.stream()
    with fw.on(s):
        if not fw.spin_problem:
            fw.spin(SPIN_CYCLES // 2)
        fw.fill(x, comm.rank + 1)
        assert comm.all_reduce(x) is None
        y = x * 2
    s.synchronize()
    total = comm.size * (comm.size + 1) / 2
    assert_same(fw.host(y), np.full(M, 2 * total), "float32")
    assert_same(fw.host(x), np.full(M, total), "float32")


@needs_coll_cuda
def test_gpu_all_reduce_through_cai(comm, fw):
    """An array seen through __cuda_array_interface__ only: CuPy's names its
    stream (the collective goes there); torch's (v2) names none (the context
    is synchronised first, the collective goes on the legacy default stream)."""
    x = fw.zeros(M, "float32")
    fw.synchronize()
    s = fw.stream()
    with fw.on(s):
        fw.fill(x, comm.rank + 2)
        comm.all_reduce(CaiOnly(x), weft.ReduceOp.MAX)
    fw.synchronize()
    assert_same(fw.host(x), np.full(M, comm.size + 1), "float32")


@needs_coll_cuda
def test_gpu_barrier_on_a_stream(comm, fw):
    """barrier(stream=s): the barrier in s's order (a barrier kernel behind s's
    work); the blocking call returns once it has completed, so s is idle then."""
    s = fw.stream()
    with fw.on(s):
        if not fw.spin_problem:
            fw.spin(SPIN_CYCLES // 2)
        x = fw.full(M, 1)
    assert comm.barrier(stream=s) is None
    assert fw.idle(s)  # drained before the barrier
    comm.barrier(stream=fw.current_stream())
    w = comm.barrier(stream=s, async_op=True)
    w.wait()
    assert_same(fw.host(x), np.ones(M), "float32")


def test_gpu_other_collectives_refuse_device_arrays(comm, fw):
    x = fw.full(4, 1)
    with pytest.raises(weft.WeftUnsupportedError, match="takes host memory only") as e:
        comm.all_gather([fw.full(4, 0) for _ in range(comm.size)], x)
    assert "all_gather_single" in e.value.detail
    with pytest.raises(weft.WeftUnsupportedError, match="all device arrays or all host memory"):
        comm.all_gather_single(np.zeros(4 * comm.size, np.float32), x)
