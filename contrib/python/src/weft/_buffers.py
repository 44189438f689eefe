"""Turning Python objects into (address, count, dtype) for the C calls.

Accepted: anything with the buffer protocol (bytearray, bytes, memoryview,
array.array, numpy arrays), numpy-like arrays (``__array_interface__``, which
covers numpy dtypes without a buffer format such as ml_dtypes' bfloat16), and
DLPack objects on the CPU. Device arrays (``__cuda_array_interface__``, DLPack
on a CUDA device) are accepted where the caller allows them: point-to-point
synchronises their producer's stream before the operation is posted; the
stream-ordered collectives (``on_stream``) order the producer's work before
the stream they enqueue on instead (see _cuda). Nothing is ever copied to
make a buffer fit: non-contiguous buffers and read-only outputs are rejected
with a message.
"""

from __future__ import annotations

import ctypes
import enum
import re
import struct
import sys
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

from . import _cuda
from ._ints import INT64_MAX, c_int_arg
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
# DLPack device types (dlpack.h's DLDeviceType).
_KDLCPU = 1
_KDLCUDA = 2
_KDLCUDAHOST = 3  # pinned host memory
_KDLCUDAMANAGED = 13
_DLPACK_CUDA = (_KDLCUDA, _KDLCUDAHOST, _KDLCUDAMANAGED)
_DLPACK_DEVICE_NAMES = {
    4: "OpenCL",
    7: "Vulkan",
    8: "Metal",
    9: "VPI",
    10: "ROCm",
    11: "ROCm host",
    12: "ExtDev",
    14: "oneAPI",
    15: "WebGPU",
    16: "Hexagon",
    17: "MAIA",
}


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

    It holds a reference to the user's object (and to the memoryview or the
    DLPack tensor that pins it) for as long as it lives; a Work keeps its
    Buffers until the operation completes. ``device`` is True for CUDA memory.
    """

    __slots__ = (
        "obj",
        "_pin",
        "addr",
        "nbytes",
        "count",
        "dtype",
        "shape",
        "readonly",
        "what",
        "device",
    )

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
        device: bool = False,
    ):
        self.obj = obj
        self._pin = pin
        self.addr = addr
        self.nbytes = c_int_arg(nbytes, f"{what}: size in bytes", 0, INT64_MAX)
        self.dtype = dtype
        self.count = nbytes // DTYPE_SIZE[dtype]
        self.shape = shape
        self.readonly = readonly
        self.what = what
        self.device = device

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
    """The fallback for numpy-like objects that offer neither the buffer protocol nor
    DLPack: their ``__array_interface__`` is taken at its word (nothing can check
    that the memory it names is theirs, and this many bytes of it)."""
    dtype = _numpy_dtype(obj.dtype, what)
    try:
        addr, readonly = ai["data"]
        shape = tuple(int(s) for s in ai["shape"])
        itemsize = int(obj.dtype.itemsize)
    except (KeyError, TypeError, ValueError) as e:
        raise WeftArgumentError(
            f"{what}: a malformed __array_interface__ ({_describe(obj)}): {e!r}"
        ) from None
    strides = ai.get("strides")
    count = 1
    for s in shape:
        if s < 0:
            raise WeftArgumentError(
                f"{what}: __array_interface__ shape {shape} has a negative size"
            )
        count *= s
    if not _is_c_contiguous(shape, strides, itemsize):
        raise WeftArgumentError(
            f"{what}: a non-contiguous array (shape {shape}, strides {tuple(strides)}); "
            "weft needs C-contiguous memory and never copies it behind your back: pass "
            "numpy.ascontiguousarray(x) (and copy results back yourself)"
        )
    return Buffer(obj, obj, int(addr or 0), count * itemsize, dtype, shape, bool(readonly), what)


def _from_memoryview(obj: Any, mv: Optional[memoryview], what: str) -> Buffer:
    if mv is None:
        raise WeftArgumentError(
            f"{what}: {_describe(obj)} is not a buffer (weft takes numpy arrays, bytearray, "
            "memoryview, array.array or anything else with the buffer protocol, DLPack "
            "producers such as torch tensors, and device arrays)"
        )
    if not mv.c_contiguous:
        raise WeftArgumentError(
            f"{what}: a non-contiguous buffer (shape {mv.shape}, strides {mv.strides}); weft needs "
            "C-contiguous memory and never copies it behind your back"
        )
    try:
        dtype = _format_dtype(mv.format, mv.itemsize, what)
    except WeftArgumentError:
        if not hasattr(obj, "dtype"):
            raise
        # A numpy-like dtype: its name says more (bool -> view it as uint8, ...).
        dtype = _numpy_dtype(obj.dtype, what)
    if mv.itemsize != DTYPE_SIZE[dtype]:
        raise WeftArgumentError(f"{what}: buffer format '{mv.format}' of {mv.itemsize} bytes")
    addr = _address_of(mv) if mv.nbytes else 0
    return Buffer(obj, mv, addr, mv.nbytes, dtype, tuple(mv.shape or ()), mv.readonly, what)


def _memoryview(obj: Any) -> Optional[memoryview]:
    """A memoryview of ``obj``, or None when it has no buffer protocol (or none
    Python can describe: numpy dtypes without a buffer format, e.g. ml_dtypes')."""
    if isinstance(obj, memoryview):
        return obj
    try:
        return memoryview(obj)
    except (TypeError, ValueError, BufferError, NotImplementedError):
        return None


def _array_interface(obj: Any) -> Optional[dict]:
    try:
        ai = getattr(obj, "__array_interface__", None)
    except Exception:
        return None
    return ai if isinstance(ai, dict) and hasattr(obj, "dtype") else None


def _classify(obj: Any, what: str) -> Tuple[str, Any]:
    """How ``obj`` is read: ("buffer", memoryview), ("dlpack", (device type, id)),
    ("cai", __cuda_array_interface__) or ("array", __array_interface__).

    The buffer protocol and DLPack come from the memory's owner and carry its real
    extent, so they are preferred; the interface dicts (which any class can write,
    naming any address and size) are the fallback for objects offering nothing else.
    ("buffer", None): nothing at all, refused by _from_memoryview."""
    mv = _memoryview(obj)
    if mv is not None:
        return "buffer", mv
    dl_device = _dlpack_device(obj, what)
    if dl_device is not None:
        # DLPack before the CUDA Array Interface (CuPy and torch offer both): its
        # stream hand-over is exact, where a CAI may name no stream (torch's is v2).
        return "dlpack", dl_device
    cai = _cuda_array_interface(obj)
    if cai is not None:
        return "cai", cai
    ai = _array_interface(obj)
    if ai is not None:
        return "array", ai
    return "buffer", None


class DeviceArray(NamedTuple):
    """What a device array says about itself before it is read (device_array)."""

    how: str  # "__cuda_array_interface__" or "DLPack, device type 2 id 0"
    device: Optional[int]  # the device ordinal DLPack names (None: a CAI, which does not say)
    stream: Optional[int]  # the producer's current stream (torch, CuPy) or the CAI's 'stream'


def device_array(obj: Any, what: str) -> Optional[DeviceArray]:
    """A DeviceArray when ``obj`` would be read as CUDA memory, else None (host
    memory, or something as_buffer will refuse). Exports nothing."""
    if obj is None:
        return None
    kind, info = _classify(obj, what)
    if kind == "dlpack" and info[0] in _DLPACK_CUDA:
        how = f"DLPack, device type {info[0]} id {info[1]}"
        return DeviceArray(how, info[1], _cuda.framework_stream(obj, info[1], what))
    if kind == "cai":
        stream = _cuda.framework_stream(obj, None, what)
        if stream is None:
            s = info.get("stream")
            try:
                stream = None if s is None else int(s)
            except (TypeError, ValueError):
                raise WeftArgumentError(
                    f"{what}: __cuda_array_interface__ stream {s!r} is not a stream handle"
                ) from None
        return DeviceArray("__cuda_array_interface__", None, stream)
    return None


def as_buffer(
    obj: Any,
    what: str,
    *,
    output: bool,
    device: bool = False,
    sync: bool = True,
    on_stream: Optional[int] = None,
) -> Buffer:
    """Validates ``obj`` as an input (read) or output (written) buffer.

    device: whether the operation takes CUDA memory (point-to-point and the
    stream-ordered collectives do, the other collectives do not:
    WeftUnsupportedError). sync: the operation is about to be posted, so a
    device array's producer stream is synchronised here; False only inspects
    (dtype_of). on_stream: the operation will be enqueued on this CUstream
    (0: the legacy default stream): a device array's pending work is ordered
    before it (DLPack's stream hand-over) rather than waited for; only a CAI
    stream other than this one (or a v2 CAI, which names none) is synchronised.
    """
    if obj is None:
        raise WeftArgumentError(f"{what}: None is not a buffer")
    kind, info = _classify(obj, what)
    if kind == "dlpack":
        try:
            buf = _from_dlpack(obj, info, what, output, device, sync, on_stream)
        except _DLPackExportError:
            # A CPU producer that cannot export this array (numpy: a dtype DLPack has
            # no code for, e.g. ml_dtypes' bfloat16) and has no buffer protocol
            # either: its own __array_interface__, if it has one.
            ai = _array_interface(obj) if info[0] == _KDLCPU else None
            if ai is None:
                raise
            buf = _from_array_interface(obj, ai, what)
    elif kind == "cai":
        buf = _from_cuda_array_interface(obj, info, what, output, device, sync, on_stream)
    elif kind == "array":
        buf = _from_array_interface(obj, info, what)
    else:
        buf = _from_memoryview(obj, info, what)
    if output and buf.readonly:
        raise WeftArgumentError(
            f"{what}: the buffer is read-only ({_describe(obj)}) but weft writes into it; "
            "pass a writable buffer (e.g. numpy.array(x) or bytearray(x))"
        )
    return buf


def _is_c_contiguous(shape: Sequence[int], strides: Optional[Sequence[int]], unit: int) -> bool:
    """Whether ``strides`` (in units of ``unit``; None: C order) lay ``shape`` out in C order."""
    count = 1
    for d in shape:
        count *= d
    if strides is None or count <= 1:
        return True
    expect = unit
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim != 1 and stride != expect:
            return False
        expect *= dim
    return True


# What takes device arrays, for the messages of what does not.
DEVICE_OPERATIONS = (
    "send, recv, isend, irecv and the collectives all_reduce, reduce, broadcast, "
    "all_gather_single, reduce_scatter_single, all_to_all_single (equal splits) and barrier "
    "take device arrays"
)


def _device_refused(obj: Any, how: str, what: str) -> WeftUnsupportedError:
    return WeftUnsupportedError(
        f"{what}: a CUDA device array ({_describe(obj)}, {how}); this operation takes host "
        f"memory only ({DEVICE_OPERATIONS}): copy it to host memory first"
    )


def _non_contiguous_device(shape: Tuple[int, ...], strides: Sequence[int], unit: str, what: str):
    return WeftArgumentError(
        f"{what}: a non-contiguous device array (shape {shape}, strides {tuple(strides)} in "
        f"{unit}); weft needs C-contiguous memory and never copies it behind your back: pass "
        "x.contiguous() (torch) or cupy.ascontiguousarray(x)"
    )


def _read_only_device(obj: Any, why: str, what: str) -> WeftArgumentError:
    return WeftArgumentError(
        f"{what}: the device array is read-only ({_describe(obj)}, {why}) but weft writes into "
        "it; pass a writable array"
    )


# ---- CUDA Array Interface ------------------------------------------------------------------


def _cuda_array_interface(obj: Any) -> Optional[Dict[str, Any]]:
    """obj.__cuda_array_interface__, or None (absent, or refused: torch raises
    AttributeError for a CPU tensor)."""
    try:
        cai = getattr(obj, "__cuda_array_interface__", None)
    except Exception:
        return None
    return cai if isinstance(cai, dict) else None


def _typestr_dtype(typestr: Any, what: str) -> DType:
    """A NumPy-style typestr ('<f4', '|u1') as a weft datatype."""
    ts = str(typestr)
    m = re.fullmatch(r"([<>|=])([a-zA-Z])(\d+)", ts)
    if m is None:
        raise WeftArgumentError(f"{what}: typestr {ts!r} is not a NumPy type string")
    order, kind, size = m.group(1), m.group(2), int(m.group(3))
    if size > 1 and order == (">" if _LITTLE else "<"):
        raise WeftArgumentError(f"{what}: typestr {ts!r} is not in native byte order")
    code: Optional[DType] = None
    if kind in "iu":
        code = _INTS.get((kind == "i", size))
    elif kind == "f":
        code = _FLOATS.get(size)
    if code is None:
        hint = ""
        if kind == "b":
            hint = " (view it as uint8)"
        elif kind == "c":
            hint = " (view it as its float components)"
        elif kind == "V" and size == 2:
            hint = " (a bfloat16 array? its typestr cannot say so: pass it through DLPack)"
        raise WeftArgumentError(
            f"{what}: typestr {ts!r} has no weft datatype{hint}; weft has int8..uint64, "
            "float16, bfloat16, float32, float64"
        )
    return code


def _from_cuda_array_interface(
    obj: Any,
    cai: Dict[str, Any],
    what: str,
    output: bool,
    device: bool,
    sync: bool,
    on_stream: Optional[int] = None,
) -> Buffer:
    if not device:
        raise _device_refused(obj, "__cuda_array_interface__", what)
    try:
        ptr, readonly = cai["data"]
        shape = tuple(int(d) for d in cai["shape"])
        typestr = cai["typestr"]
    except (KeyError, TypeError, ValueError) as e:
        raise WeftArgumentError(
            f"{what}: a malformed __cuda_array_interface__ ({_describe(obj)}): {e!r}"
        ) from None
    dtype = _typestr_dtype(typestr, what)
    if cai.get("mask") is not None:
        raise WeftArgumentError(f"{what}: a masked device array; weft sends every element")
    itemsize = DTYPE_SIZE[dtype]
    strides = cai.get("strides")
    if not _is_c_contiguous(shape, strides, itemsize):
        raise _non_contiguous_device(shape, strides, "bytes", what)
    if output and readonly:
        raise _read_only_device(obj, "its __cuda_array_interface__ data is read-only", what)
    count = 1
    for d in shape:
        count *= d
    addr = int(ptr or 0)
    nbytes = count * itemsize
    if sync:
        _cuda.check_library(what)
        # v3: 'stream' names the stream that may still work on the data (None:
        # nothing pending). Before v3 there was no such key: wait for every
        # stream of the data's context, since the producer's is unknown.
        if "stream" in cai:
            stream = cai["stream"]
            stream = None if stream is None else int(stream)
            wait = stream is not None
        else:
            stream = None
            wait = int(cai.get("version", 0) or 0) < 3
        if wait and stream is not None and on_stream is not None:
            # Stream-ordered: the work is enqueued behind the array's own stream,
            # so only another stream's work needs waiting for.
            wait = not _cuda._same_stream(stream, on_stream)
        if wait and nbytes:
            _cuda.driver(what).synchronize(stream, addr, None, what)
    return Buffer(obj, obj, addr, nbytes, dtype, shape, bool(readonly), what, device=True)


# ---- DLPack ----------------------------------------------------------------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),  # in elements; NULL: C order
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    """The legacy capsule's ("dltensor") payload."""

    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    """The DLPack 1.x capsule's ("dltensor_versioned") payload."""

    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_DLPACK_FLAG_READ_ONLY = 1 << 0
_DLPACK_FLAG_IS_COPIED = 1 << 1
_DLPACK_MAX_VERSION = (1, 0)

# PyCapsule calls: new function objects (not ctypes.pythonapi's shared attributes).
_capsule_is_valid = ctypes.pythonapi["PyCapsule_IsValid"]
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_is_valid.restype = ctypes.c_int
_capsule_get_pointer = ctypes.pythonapi["PyCapsule_GetPointer"]
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_set_name = ctypes.pythonapi["PyCapsule_SetName"]
_capsule_set_name.argtypes = [ctypes.py_object, ctypes.c_void_p]
_capsule_set_name.restype = ctypes.c_int


def _static_name(name: bytes) -> int:
    """A C string that is never freed: PyCapsule_SetName keeps the pointer, and
    the producer's capsule destructor reads the name whenever it runs."""
    libc = ctypes.CDLL(None)
    libc.strdup.restype = ctypes.c_void_p
    libc.strdup.argtypes = [ctypes.c_char_p]
    p = libc.strdup(name)
    if not p:
        raise MemoryError("strdup")
    return int(p)


_USED_DLTENSOR = _static_name(b"used_dltensor")
_USED_DLTENSOR_VERSIONED = _static_name(b"used_dltensor_versioned")
# Called with the GIL held: some producers' deleters touch Python objects.
_Deleter = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)


class _DLPackOwner:
    """Ownership of a consumed DLPack tensor: calls the producer's deleter once,
    when the Buffer holding it goes (the Work completes, or the blocking call
    returns), or at release()."""

    __slots__ = ("managed", "deleter")

    def __init__(self, managed: int, deleter: Optional[int]):
        self.managed = managed
        self.deleter = deleter

    def release(self) -> None:
        managed, self.managed = self.managed, 0
        if managed and self.deleter:
            _Deleter(self.deleter)(managed)

    def __del__(self) -> None:
        if not sys.is_finalizing():  # at exit the producer may be gone already: leave it
            self.release()


def _dlpack_device(obj: Any, what: str) -> Optional[Tuple[int, int]]:
    """(device type, device id) of a DLPack producer, or None if ``obj`` is none."""
    if not hasattr(obj, "__dlpack__"):
        return None
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is None:
        return (_KDLCPU, 0)  # a producer older than __dlpack_device__ exports CPU memory
    try:
        t, i = dev()
        return int(t), int(i)
    except Exception as e:
        raise WeftArgumentError(
            f"{what}: {_describe(obj)}.__dlpack_device__() failed: {e!r}"
        ) from None


def _dlpack_dtype(code: int, bits: int, lanes: int, what: str) -> DType:
    dtype: Optional[DType] = None
    if lanes == 1:
        if code in (0, 1) and bits in (8, 16, 32, 64):
            dtype = _INTS[(code == 0, bits // 8)]
        elif code == 2:
            dtype = _FLOATS.get(bits // 8) if bits % 8 == 0 else None
        elif code == 4 and bits == 16:
            dtype = DType.BFLOAT16
    if dtype is None:
        names = {0: "int", 1: "uint", 2: "float", 3: "opaque", 4: "bfloat", 5: "complex", 6: "bool"}
        name = f"{names.get(code, f'type code {code}')}{bits}" + (f"x{lanes}" if lanes != 1 else "")
        hint = ""
        if code == 6:
            hint = " (view it as uint8)"
        elif code == 5:
            hint = " (view it as its float components)"
        raise WeftArgumentError(
            f"{what}: DLPack dtype {name} has no weft datatype{hint}; weft has int8..uint64, "
            "float16, bfloat16, float32, float64"
        )
    return dtype


def _call_dlpack(obj: Any, stream: Optional[int], output: bool, what: str) -> Any:
    """obj.__dlpack__(...), asking for a versioned capsule (and, for an output,
    no copy) first, then falling back to the older signatures."""
    tries: list = [{"stream": stream, "max_version": _DLPACK_MAX_VERSION}, {"stream": stream}]
    if output:
        tries[0]["copy"] = False
    if stream is None:
        tries.append({})  # producers from before the stream keyword (CPU only)
    for i, kwargs in enumerate(tries):
        try:
            return obj.__dlpack__(**kwargs)
        except Exception as e:
            if isinstance(e, TypeError) and i < len(tries) - 1:
                continue  # an older signature: try the next
            raise _DLPackExportError(
                f"{what}: {_describe(obj)}.__dlpack__() failed: {e!r}"
            ) from None
    raise AssertionError("unreachable")


class _DLPackExportError(WeftArgumentError):
    """The producer's __dlpack__() refused to export."""


def _take_capsule(capsule: Any, what: str) -> Tuple[_DLPackOwner, _DLTensor, int]:
    """Consumes a DLPack capsule: renames it (so its destructor leaves the tensor
    alone) and returns (the owner that will call the deleter, the tensor, flags)."""
    if _capsule_is_valid(capsule, b"dltensor_versioned"):
        p = _capsule_get_pointer(capsule, b"dltensor_versioned")
        mv = _DLManagedTensorVersioned.from_address(p)
        if mv.version.major != _DLPACK_MAX_VERSION[0]:
            # Not consumed: the capsule's destructor frees it.
            raise WeftUnsupportedError(
                f"{what}: DLPack {mv.version.major}.{mv.version.minor} tensor; weft reads "
                f"DLPack {_DLPACK_MAX_VERSION[0]}.x and the legacy capsule"
            )
        _capsule_set_name(capsule, _USED_DLTENSOR_VERSIONED)
        return _DLPackOwner(p, mv.deleter), mv.dl_tensor, int(mv.flags)
    if _capsule_is_valid(capsule, b"dltensor"):
        p = _capsule_get_pointer(capsule, b"dltensor")
        m = _DLManagedTensor.from_address(p)
        _capsule_set_name(capsule, _USED_DLTENSOR)
        return _DLPackOwner(p, m.deleter), m.dl_tensor, 0
    raise WeftArgumentError(
        f"{what}: __dlpack__() returned {type(capsule).__name__}, not an unconsumed DLPack "
        "capsule ('dltensor' or 'dltensor_versioned')"
    )


def _from_dlpack(
    obj: Any,
    dl_device: Tuple[int, int],
    what: str,
    output: bool,
    device: bool,
    sync: bool,
    on_stream: Optional[int] = None,
) -> Buffer:
    dev_type, dev_id = dl_device
    is_cuda = dev_type in _DLPACK_CUDA
    if dev_type != _KDLCPU and not is_cuda:
        name = _DLPACK_DEVICE_NAMES.get(dev_type, "unknown")
        raise WeftUnsupportedError(
            f"{what}: a DLPack array on device type {dev_type} ({name}, {_describe(obj)}); weft "
            "takes CPU and CUDA memory"
        )
    if is_cuda and not device:
        raise _device_refused(obj, f"DLPack, device type {dev_type} id {dev_id}", what)
    stream: Optional[int] = None
    if is_cuda:
        if sync and on_stream is not None:
            _cuda.check_library(what)
            # Stream-ordered: the producer orders its pending work on the data
            # before the stream weft enqueues on (DLPack has no 0: the legacy
            # default stream is 1); nothing is waited for here.
            stream = on_stream or _cuda.STREAM_LEGACY
        elif sync:
            _cuda.check_library(what)
            # The producer orders its pending work on the data before this
            # stream; synchronising it below makes the data ready for weft.
            stream = _cuda.driver(what).consumer_stream(dev_id, what)
        else:
            stream = -1  # only inspecting: the producer need not synchronise
    capsule = _call_dlpack(obj, stream, output, what)
    owner, t, flags = _take_capsule(capsule, what)
    del capsule
    try:
        if (t.device.device_type, t.device.device_id) != (dev_type, dev_id):
            raise WeftArgumentError(
                f"{what}: {_describe(obj)}'s DLPack tensor is on device "
                f"({t.device.device_type}, {t.device.device_id}) but __dlpack_device__() says "
                f"({dev_type}, {dev_id})"
            )
        dtype = _dlpack_dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes, what)
        ndim = int(t.ndim)
        shape = tuple(int(t.shape[i]) for i in range(ndim)) if ndim else ()
        strides = [int(t.strides[i]) for i in range(ndim)] if ndim and t.strides else None
        if not _is_c_contiguous(shape, strides, 1):
            assert strides is not None
            if is_cuda:
                raise _non_contiguous_device(shape, strides, "elements", what)
            raise WeftArgumentError(
                f"{what}: a non-contiguous array (shape {shape}, strides {tuple(strides)} in "
                "elements); weft needs C-contiguous memory and never copies it behind your back"
            )
        readonly = bool(flags & _DLPACK_FLAG_READ_ONLY)
        if output and readonly:
            raise _read_only_device(obj, "DLPack flags it read-only", what)
        if output and flags & _DLPACK_FLAG_IS_COPIED:
            raise WeftArgumentError(
                f"{what}: {_describe(obj)} exported a copy through DLPack; what weft writes into "
                "it would be lost: pass an array whose memory it can share"
            )
        count = 1
        for d in shape:
            count *= d
        nbytes = count * DTYPE_SIZE[dtype]
        addr = (int(t.data or 0) + int(t.byte_offset)) if nbytes else 0
        if is_cuda and sync and nbytes and on_stream is None:
            _cuda.driver(what).synchronize(stream, addr, dev_id, what)
    except BaseException:
        owner.release()
        raise
    return Buffer(obj, owner, addr, nbytes, dtype, shape, readonly, what, device=is_cuda)


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
    """The weft datatype a buffer would be sent as (WeftArgumentError if none);
    device arrays too (nothing is synchronised)."""
    return as_buffer(obj, "buffer", output=False, device=True, sync=False).dtype
