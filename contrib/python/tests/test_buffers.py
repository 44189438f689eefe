"""Buffers: the buffer protocol without numpy, dtype mapping, bfloat16, DLPack on the CPU."""

from __future__ import annotations

import array
import struct

import numpy as np
import pytest
from conftest import BFLOAT16

import weft
from weft import DType


@pytest.mark.parametrize(
    "obj,want",
    [
        (np.zeros(1, np.int8), DType.INT8),
        (np.zeros(1, np.uint8), DType.UINT8),
        (np.zeros(1, np.int16), DType.INT16),
        (np.zeros(1, np.uint16), DType.UINT16),
        (np.zeros(1, np.int32), DType.INT32),
        (np.zeros(1, np.uint32), DType.UINT32),
        (np.zeros(1, np.int64), DType.INT64),
        (np.zeros(1, np.uint64), DType.UINT64),
        (np.zeros(1, np.float16), DType.FLOAT16),
        (np.zeros(1, np.float32), DType.FLOAT32),
        (np.zeros(1, np.float64), DType.FLOAT64),
        (bytearray(2), DType.UINT8),
        (b"xy", DType.UINT8),
        (memoryview(bytearray(8)).cast("i"), DType.INT32),
        (memoryview(np.zeros(2, np.float16)), DType.FLOAT16),
        (memoryview(bytearray(8)).cast("c"), DType.BYTE),
        (array.array("d", [1.0]), DType.FLOAT64),
        (array.array("l", [1]), DType.INT64 if struct.calcsize("l") == 8 else DType.INT32),
        (array.array("H", [1]), DType.UINT16),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, DType) else v.name,
)
def test_dtype_mapping(obj, want):
    assert weft.dtype_of(obj) == want


@pytest.mark.skipif(BFLOAT16 is None, reason="ml_dtypes is not installed")
def test_bfloat16_mapping_and_allreduce(comm):
    x = np.array([1.5, -2.0, 0.25, 3.0], dtype=BFLOAT16)
    assert weft.dtype_of(x) == DType.BFLOAT16
    comm.all_reduce(x)
    np.testing.assert_array_equal(
        x.astype(np.float64), np.array([1.5, -2.0, 0.25, 3.0]) * comm.size
    )


def test_bytearray_and_array_module_without_numpy(comm):
    a = array.array("d", [comm.rank + 0.5] * 3)
    comm.all_reduce(a, weft.ReduceOp.MAX)
    assert list(a) == [comm.size - 0.5] * 3
    b = bytearray([comm.rank + 1] * 4)
    comm.all_reduce(b, weft.ReduceOp.SUM)
    assert list(b) == [comm.size * (comm.size + 1) // 2] * 4
    m = memoryview(bytearray(8)).cast("i")
    m[0], m[1] = comm.rank, 1
    comm.all_reduce(m)
    assert m.tolist() == [comm.size * (comm.size - 1) // 2, comm.size]


def test_memoryview_slice_is_zero_copy(comm):
    """A contiguous slice of a bigger buffer is written in place; around it nothing changes."""
    backing = np.full(10, -1, dtype=np.int32)
    backing[3:7] = comm.rank
    comm.all_reduce(memoryview(backing)[3:7])
    assert backing[3:7].tolist() == [comm.size * (comm.size - 1) // 2] * 4
    assert backing[:3].tolist() == [-1] * 3 and backing[7:].tolist() == [-1] * 3


def test_numpy_views_in_place(comm):
    big = np.zeros((4, 6), dtype=np.float64)
    row = big[1]  # a contiguous view
    row[:] = comm.rank + 1
    comm.all_reduce(row)
    assert big[1].tolist() == [comm.size * (comm.size + 1) / 2] * 6
    assert big[0].tolist() == [0] * 6 and big[2:].sum() == 0


def test_zero_d_and_empty_arrays(comm):
    s = np.array(comm.rank, dtype=np.int64)
    comm.all_reduce(s)
    assert int(s) == comm.size * (comm.size - 1) // 2
    e = np.zeros(0, dtype=np.float32)
    comm.all_reduce(e)
    out = bytearray(0)
    comm.all_gather_single(out, b"")


class CpuDLPack:
    """A DLPack producer without the buffer protocol (as a torch CPU tensor is)."""

    def __init__(self, arr: np.ndarray):
        self._arr = arr

    def __dlpack__(self, stream=None, **kw):
        return self._arr.__dlpack__(**kw) if kw else self._arr.__dlpack__()

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


def test_cpu_dlpack_input(comm):
    src = np.arange(3, dtype=np.float32) + comm.rank
    out = np.zeros(3 * comm.size, dtype=np.float32)
    comm.all_gather_single(out, CpuDLPack(src))
    want = np.concatenate([np.arange(3, dtype=np.float32) + r for r in range(comm.size)])
    np.testing.assert_array_equal(out, want)


# ---- objects whose __array_interface__ claims more than they own ----------------------------
# The buffer protocol and DLPack come from the memory's owner and carry its real
# extent: they are preferred. A hand-written __array_interface__ (any class can name
# any address and size in one) is only the fallback for objects offering nothing else.

_CLAIM = 1 << 28  # 256 MiB: what the liars claim (they own 16 bytes)


def _lie(real: dict) -> dict:
    d = dict(real)
    d["shape"] = (_CLAIM,)
    d["strides"] = None
    return d


class LyingBytes(bytearray):
    """16 bytes with the buffer protocol, and an __array_interface__ claiming 256 MiB."""

    dtype = np.dtype(np.uint8)

    @property
    def __array_interface__(self):
        return _lie(np.frombuffer(self, np.uint8).__array_interface__)


class LyingArray(np.ndarray):
    """A numpy subclass (buffer protocol, DLPack) whose __array_interface__ lies."""

    @property
    def __array_interface__(self):
        return _lie(self.view(np.ndarray).__array_interface__)


class LyingDLPack:
    """DLPack (no buffer protocol), and an __array_interface__ claiming 256 MiB."""

    def __init__(self, arr: np.ndarray):
        self._arr = arr
        self.dtype = arr.dtype

    def __dlpack__(self, stream=None, **kw):
        return self._arr.__dlpack__(**kw) if kw else self._arr.__dlpack__()

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()

    @property
    def __array_interface__(self):
        return _lie(self._arr.__array_interface__)


class OnlyArrayInterface:
    """Nothing but a (truthful) __array_interface__: still taken, as the fallback."""

    def __init__(self, arr: np.ndarray):
        self._arr = arr
        self.dtype = arr.dtype
        self.__array_interface__ = arr.__array_interface__


def test_lying_array_interface_is_sized_by_the_buffer_protocol(comm):
    from weft._buffers import as_buffer

    b = LyingBytes(16)
    assert as_buffer(b, "x", output=True).nbytes == 16  # was 256 MiB
    backing = np.full(8, -1, np.int32)
    a = backing[2:6].view(LyingArray)
    assert as_buffer(a, "x", output=True).nbytes == 16
    d = LyingDLPack(np.full(4, comm.rank, np.int32))
    assert as_buffer(d, "x", output=False).nbytes == 16
    # and they work: in place, nothing around them touched (this used to crash the rank)
    b[:] = bytes([comm.rank + 1]) * 16
    comm.all_reduce(b, weft.ReduceOp.MAX)
    assert bytes(b) == bytes([comm.size]) * 16
    a[:] = comm.rank
    comm.all_reduce(a)
    assert backing.tolist() == [-1, -1] + [comm.size * (comm.size - 1) // 2] * 4 + [-1, -1]
    out = np.zeros(4 * comm.size, np.int32)
    comm.all_gather_single(out, d)
    assert out.tolist() == [r for r in range(comm.size) for _ in range(4)]


def test_array_interface_alone_is_the_fallback(comm):
    arr = np.full(3, comm.rank, np.float64)
    comm.all_reduce(OnlyArrayInterface(arr))
    assert arr.tolist() == [comm.size * (comm.size - 1) / 2] * 3
    from weft._buffers import as_buffer

    huge = OnlyArrayInterface(np.zeros(1, np.int64))
    huge.__array_interface__ = dict(huge.__array_interface__, shape=(2**61, 8))
    with pytest.raises(ValueError, match="size in bytes"):
        as_buffer(huge, "x", output=False)  # 2**67 bytes: not even an int64


def test_common_buffers_keep_their_extent():
    from weft._buffers import as_buffer

    cases = [
        (np.zeros((3, 5), np.float32), 60),
        (np.zeros(10, np.int16)[2:7], 10),
        (bytearray(7), 7),
        (b"abc", 3),
        (memoryview(bytearray(12)).cast("i"), 12),
        (memoryview(np.zeros(6, np.float64))[1:4], 24),
        (array.array("H", [1, 2, 3]), 6),
        (CpuDLPack(np.zeros(5, np.uint8)), 5),
    ]
    for obj, nbytes in cases:
        assert as_buffer(obj, "x", output=False).nbytes == nbytes, type(obj)
