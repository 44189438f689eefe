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
