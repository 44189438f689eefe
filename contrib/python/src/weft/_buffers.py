"""Turning Python objects into (address, count, dtype) for the C calls.

Accepted: anything with the buffer protocol (bytearray, bytes, memoryview,
array.array, numpy arrays), numpy-like arrays (``__array_interface__``, which
covers numpy dtypes without a buffer format such as ml_dtypes' bfloat16), and
CPU DLPack objects when numpy is installed. Device arrays
(``__cuda_array_interface__``, DLPack on a device) are recognised and refused
with WeftUnsupportedError. Nothing is ever copied to make a buffer fit:
non-contiguous buffers and read-only outputs are rejected with a message.
"""

from __future__ import annotations

import ctypes
import enum
import struct
import sys
from typing import Any, Optional, Tuple

from .errors import WeftArgumentError, WeftUnsupportedError


class DType(enum.IntEnum):
    """weft_dtype_t (fixed values of include/weft.h)."""

    INT8 = 0
    UINT8 = 1
    INT16 = 2
    UINT16 = 3
    INT32 = 4
    UINT32 = 5
    INT64 = 6
    UINT64 = 7
    FLOAT16 = 8
    BFLOAT16 = 9
    FLOAT32 = 10
    FLOAT64 = 11
    BYTE = 12


DTYPE_SIZE = {
    DType.INT8: 1,
    DType.UINT8: 1,
    DType.INT16: 2,
    DType.UINT16: 2,
    DType.INT32: 4,
    DType.UINT32: 4,
    DType.INT64: 8,
    DType.UINT64: 8,
    DType.FLOAT16: 2,
    DType.BFLOAT16: 2,
    DType.FLOAT32: 4,
    DType.FLOAT64: 8,
    DType.BYTE: 1,
}

_INTS = {
    (True, 1): DType.INT8,
    (False, 1): DType.UINT8,
    (True, 2): DType.INT16,
    (False, 2): DType.UINT16,
    (True, 4): DType.INT32,
    (False, 4): DType.UINT32,
    (True, 8): DType.INT64,
    (False, 8): DType.UINT64,
}
_FLOATS = {2: DType.FLOAT16, 4: DType.FLOAT32, 8: DType.FLOAT64}

# numpy dtype names -> weft dtypes (bfloat16 is ml_dtypes').
_NUMPY_NAMES = {
    "int8": DType.INT8,
    "uint8": DType.UINT8,
    "int16": DType.INT16,
    "uint16": DType.UINT16,
    "int32": DType.INT32,
    "uint32": DType.UINT32,
    "int64": DType.INT64,
    "uint64": DType.UINT64,
    "float16": DType.FLOAT16,
    "bfloat16": DType.BFLOAT16,
    "float32": DType.FLOAT32,
    "float64": DType.FLOAT64,
}

_LITTLE = sys.byteorder == "little"
_KDLCPU = 1  # DLPack's kDLCPU device type


class _PyBuffer(ctypes.Structure):
    """CPython's Py_buffer (stable ABI layout), used only to read a buffer's address."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    ]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


def _address_of(mv: memoryview) -> int:
    """Address of a C-contiguous memoryview's data; valid while ``mv`` is alive."""
    view = _PyBuffer()
    _get_buffer(mv, ctypes.byref(view), 0)  # PyBUF_SIMPLE: contiguous bytes
    try:
        return view.buf or 0
    finally:
        _release_buffer(ctypes.byref(view))


class Buffer:
    """A validated view of a user buffer: address, element count, weft dtype.

    It holds a reference to the user's object (and to the memoryview that
    pins it) for as long as it lives; a Work keeps its Buffers until the
    operation completes.
    """

    __slots__ = ("obj", "_pin", "addr", "nbytes", "count", "dtype", "shape", "readonly", "what")

    def __init__(
        self,
        obj: Any,
        pin: Any,
        addr: int,
        nbytes: int,
        dtype: DType,
        shape: Tuple[int, ...],
        readonly: bool,
        what: str,
    ):
        self.obj = obj
        self._pin = pin
        self.addr = addr
        self.nbytes = nbytes
        self.dtype = dtype
        self.count = nbytes // DTYPE_SIZE[dtype]
        self.shape = shape
        self.readonly = readonly
        self.what = what

    @property
    def ptr(self) -> Optional[int]:
        return self.addr or None

    def rows(self) -> Tuple[int, int]:
        """(rows along dimension 0, elements per row) for split sizes."""
        if not self.shape:
            raise WeftArgumentError(f"{self.what}: a 0-d buffer has no dimension 0 to split")
        rows = self.shape[0]
        per_row = self.count // rows if rows else 0
        return rows, per_row


def _describe(obj: Any) -> str:
    return type(obj).__module__ + "." + type(obj).__qualname__


def _check_device(obj: Any, what: str) -> None:
    if hasattr(obj, "__cuda_array_interface__"):
        raise WeftUnsupportedError(
            f"{what}: a CUDA device array ({_describe(obj)}, __cuda_array_interface__) is not "
            "supported in this build: weft's Python package handles host memory only until GPU "
            "support lands; copy it to host memory first"
        )
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is not None:
        try:
            dev_type = int(dev()[0])
        except Exception:
            return
        if dev_type != _KDLCPU:
            raise WeftUnsupportedError(
                f"{what}: a DLPack array on device type {dev_type} ({_describe(obj)}) is not "
                "supported in this build: weft's Python package handles host memory only until "
                "GPU support lands; copy it to host memory first"
            )


def _numpy_dtype(dt: Any, what: str) -> DType:
    name = getattr(dt, "name", str(dt))
    order = getattr(dt, "byteorder", "=")
    if order == ("<" if not _LITTLE else ">"):
        raise WeftArgumentError(
            f"{what}: byte-swapped dtype {dt.str}; weft needs native byte order"
        )
    code = _NUMPY_NAMES.get(name)
    if code is None:
        hint = ""
        if name == "bool":
            hint = " (view it as uint8: arr.view(numpy.uint8))"
        elif name.startswith("complex"):
            hint = " (view it as its float components: arr.view(numpy.float32/64))"
        raise WeftArgumentError(
            f"{what}: numpy dtype {name} has no weft datatype{hint}; weft has int8..uint64, "
            "float16, bfloat16 (ml_dtypes), float32, float64"
        )
    return code


def _format_dtype(fmt: str, itemsize: int, what: str) -> DType:
    f = fmt
    if f and f[0] in "@=<>!":
        order, f = f[0], f[1:]
        foreign = ">!" if _LITTLE else "<"
        if order in foreign:
            raise WeftArgumentError(f"{what}: buffer format '{fmt}' is not in native byte order")
    if len(f) != 1:
        raise WeftArgumentError(f"{what}: buffer format '{fmt}' has no weft datatype")
    if f in "bhilqn":
        return _INTS[(True, itemsize)]
    if f in "BHILQN":
        return _INTS[(False, itemsize)]
    if f in "efd":
        return _FLOATS[itemsize]
    if f == "c":
        return DType.BYTE
    raise WeftArgumentError(
        f"{what}: buffer format '{fmt}' has no weft datatype (weft has signed and unsigned "
        "integers of 1, 2, 4, 8 bytes, float16/32/64 and bytes)"
    )


def _from_array_interface(obj: Any, ai: dict, what: str) -> Buffer:
    dtype = _numpy_dtype(obj.dtype, what)
    addr, readonly = ai["data"]
    shape = tuple(int(s) for s in ai["shape"])
    itemsize = int(obj.dtype.itemsize)
    strides = ai.get("strides")
    count = 1
    for s in shape:
        count *= s
    if strides is not None and count > 1:
        expect = itemsize
        for dim, stride in zip(reversed(shape), reversed(strides)):
            if dim != 1 and stride != expect:
                raise WeftArgumentError(
                    f"{what}: a non-contiguous array (shape {shape}, strides {tuple(strides)}); "
                    "weft needs C-contiguous memory and never copies it behind your back: pass "
                    "numpy.ascontiguousarray(x) (and copy results back yourself)"
                )
            expect *= dim
    return Buffer(obj, obj, int(addr or 0), count * itemsize, dtype, shape, bool(readonly), what)


def _from_memoryview(obj: Any, what: str) -> Buffer:
    try:
        mv = obj if isinstance(obj, memoryview) else memoryview(obj)
    except TypeError:
        raise WeftArgumentError(
            f"{what}: {_describe(obj)} is not a buffer (weft takes numpy arrays, bytearray, "
            "memoryview, array.array or anything else with the buffer protocol)"
        ) from None
    if not mv.c_contiguous:
        raise WeftArgumentError(
            f"{what}: a non-contiguous buffer (shape {mv.shape}, strides {mv.strides}); weft needs "
            "C-contiguous memory and never copies it behind your back"
        )
    dtype = _format_dtype(mv.format, mv.itemsize, what)
    if mv.itemsize != DTYPE_SIZE[dtype]:
        raise WeftArgumentError(f"{what}: buffer format '{mv.format}' of {mv.itemsize} bytes")
    addr = _address_of(mv) if mv.nbytes else 0
    return Buffer(obj, mv, addr, mv.nbytes, dtype, tuple(mv.shape or ()), mv.readonly, what)


def as_buffer(obj: Any, what: str, *, output: bool) -> Buffer:
    """Validates ``obj`` as an input (read) or output (written) buffer."""
    if obj is None:
        raise WeftArgumentError(f"{what}: None is not a buffer")
    _check_device(obj, what)
    ai = getattr(obj, "__array_interface__", None)
    if isinstance(ai, dict) and hasattr(obj, "dtype"):
        buf = _from_array_interface(obj, ai, what)
    elif hasattr(obj, "__dlpack__") and not _has_buffer_protocol(obj):
        buf = _from_dlpack(obj, what)
    else:
        buf = _from_memoryview(obj, what)
    if output and buf.readonly:
        raise WeftArgumentError(
            f"{what}: the buffer is read-only ({_describe(obj)}) but weft writes into it; "
            "pass a writable buffer (e.g. numpy.array(x) or bytearray(x))"
        )
    return buf


def _has_buffer_protocol(obj: Any) -> bool:
    try:
        memoryview(obj).release()
        return True
    except TypeError:
        return False


def _from_dlpack(obj: Any, what: str) -> Buffer:
    try:
        import numpy
    except ImportError:
        raise WeftArgumentError(
            f"{what}: {_describe(obj)} offers only DLPack; reading it needs numpy "
            "(numpy.from_dlpack)"
        ) from None
    arr = numpy.from_dlpack(obj)
    buf = _from_array_interface(arr, arr.__array_interface__, what)
    buf.obj = obj  # keep the producer alive too (arr holds its capsule)
    buf._pin = arr
    return buf


def label_in(context: str, label: str) -> str:
    """``label`` as said in a message that already names ``context``'s operation.

    Labels name their operation ("all_gather_single: input"); a message about
    that operation names it once: "all_gather_single: output is float64 but
    input is float32", not "... but all_gather_single: input is ...".
    ``context`` is the operation or a label of it ("all_gather_single: output").
    """
    op = context.split(": ", 1)[0]
    return label[len(op) + 2 :] if label.startswith(op + ": ") else label


def same_dtype(*bufs: Buffer) -> DType:
    """The common dtype of ``bufs``, or WeftArgumentError naming the mismatch
    (the buffers' labels name the operation; the message says it once)."""
    first = bufs[0]
    for b in bufs[1:]:
        if b.dtype != first.dtype:
            op = first.what.split(": ", 1)[0]
            if ": " in first.what and b.what.startswith(op + ": "):
                head, this, that = op + ": ", label_in(op, b.what), label_in(op, first.what)
            else:  # no operation in common: each label says its own
                head, this, that = "", b.what, first.what
            raise WeftArgumentError(
                f"{head}{this} is {b.dtype.name.lower()} but {that} is "
                f"{first.dtype.name.lower()}; every buffer of one call has the same dtype"
            )
    return first.dtype


def check_count(buf: Buffer, expect: int, why: str) -> None:
    """WeftArgumentError unless ``buf`` holds exactly ``expect`` elements."""
    if buf.count != expect:
        size = "too short" if buf.count < expect else "too long"
        raise WeftArgumentError(
            f"{buf.what}: {buf.count} elements, {size}: it must hold {expect} ({why})"
        )


def dtype_of(obj: Any) -> DType:
    """The weft datatype a buffer would be sent as (WeftArgumentError if none)."""
    return as_buffer(obj, "buffer", output=False).dtype
