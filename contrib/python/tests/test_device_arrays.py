"""Device arrays without a GPU: objects exposing ``__cuda_array_interface__`` and
DLPack producers (built here with ctypes) over host memory, labelled as CUDA.
A stand-in driver records which stream would be synchronised; the library's
GPU-support check is bypassed, so the point-to-point tests move the (host)
memory through the real library. The stream-ordered collectives' C calls
(weft_*_on_stream) are replaced by recorders that keep what the package
passed (pointers, counts, dtypes, stream) and post the host form (weft_i*)
in their place, so the results are real too. The real GPU paths are in
test_gpu.py."""

from __future__ import annotations

import builtins
import ctypes
import re
import subprocess
import sys
import types
from ctypes import c_int32, c_int64, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest

import weft
from weft import DType, _buffers, _comm, _cuda, _lib

# ---- stand-ins ---------------------------------------------------------------------------


class FakeDriver:
    """Records what weft would ask of the CUDA driver."""

    STREAM_BASE = 0xC0DE00

    def __init__(self) -> None:
        self.syncs: List[Tuple[Optional[int], int, Optional[int]]] = []
        self.stream_devices: List[int] = []

    def consumer_stream(self, device: int, what: str) -> int:
        self.stream_devices.append(device)
        return self.STREAM_BASE + device

    def synchronize(self, stream: Optional[int], ptr: int, device: Optional[int], what: str):
        self.syncs.append((stream, ptr, device))


@pytest.fixture()
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> FakeDriver:
    drv = FakeDriver()
    monkeypatch.setattr(_cuda, "_driver", drv)
    monkeypatch.setattr(_cuda, "_library_ok", True)
    return drv


_MISSING = object()


class FakeCAI:
    """A device array as the CUDA Array Interface describes it, over host memory."""

    def __init__(
        self,
        arr: np.ndarray,
        stream: Any = _MISSING,
        version: int = 3,
        readonly: bool = False,
        strides: Any = None,
        typestr: Optional[str] = None,
        **extra: Any,
    ):
        self.arr = arr
        cai: Dict[str, Any] = {
            "shape": arr.shape,
            "typestr": typestr or arr.dtype.str,
            "data": (arr.ctypes.data if arr.size else 0, readonly),
            "version": version,
            "strides": strides,
        }
        if stream is not _MISSING:
            cai["stream"] = stream
        cai.update(extra)
        self.__cuda_array_interface__ = cai


# dlpack.h's structs, written out here independently of the package's.
class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device_type", c_int32),
        ("device_id", c_int32),
        ("ndim", c_int32),
        ("code", c_uint8),
        ("bits", c_uint8),
        ("lanes", c_uint16),
        ("shape", ctypes.POINTER(c_int64)),
        ("strides", ctypes.POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", c_uint32),
        ("minor", c_uint32),
        ("manager_ctx", c_void_p),
        ("deleter", c_void_p),
        ("flags", c_uint64),
        ("dl_tensor", DLTensor),
    ]


_capsule_new = ctypes.pythonapi["PyCapsule_New"]
_capsule_new.argtypes = [c_void_p, c_void_p, c_void_p]
_capsule_new.restype = ctypes.py_object
_capsule_is_valid_raw = ctypes.pythonapi["PyCapsule_IsValid"]
_capsule_is_valid_raw.argtypes = [c_void_p, c_void_p]
_capsule_is_valid_raw.restype = ctypes.c_int
_capsule_pointer_raw = ctypes.pythonapi["PyCapsule_GetPointer"]
_capsule_pointer_raw.argtypes = [c_void_p, c_void_p]
_capsule_pointer_raw.restype = c_void_p
_capsule_name = ctypes.pythonapi["PyCapsule_GetName"]
_capsule_name.argtypes = [ctypes.py_object]
_capsule_name.restype = ctypes.c_char_p

# Capsule names outlive every capsule (module globals of a module never unloaded).
_NAME_LEGACY = ctypes.create_string_buffer(b"dltensor")
_NAME_VERSIONED = ctypes.create_string_buffer(b"dltensor_versioned")
_EXPORTS: Dict[int, "FakeDLPack"] = {}  # managed tensor address -> its producer


@ctypes.CFUNCTYPE(None, c_void_p)
def _deleter(addr: int, _exports: Dict[int, "FakeDLPack"] = _EXPORTS) -> None:
    prod = _exports[addr]
    prod.deleter_calls[addr] = prod.deleter_calls.get(addr, 0) + 1


@ctypes.CFUNCTYPE(None, c_void_p)
def _capsule_destructor(
    capsule: int,
    _names: Tuple[Any, ...] = (_NAME_LEGACY, _NAME_VERSIONED),
    _valid: Any = _capsule_is_valid_raw,
    _pointer: Any = _capsule_pointer_raw,
    _deleter: Any = _deleter,
) -> None:
    """The producer's side of the protocol: a capsule nobody consumed frees its tensor."""
    for name in _names:
        if _valid(capsule, ctypes.addressof(name)):
            _deleter(_pointer(capsule, ctypes.addressof(name)))


# Never freed: a capsule that outlives this module (at exit) still calls them.
for _cb in (_deleter, _capsule_destructor):
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(_cb))
_PRODUCERS: List["FakeDLPack"] = []


@pytest.fixture(autouse=True)
def _drop_capsules_after_each_test():
    yield
    for p in _PRODUCERS:
        p.drop_capsules()
    _PRODUCERS.clear()


_NUMPY_CODES = {"i": 0, "u": 1, "f": 2}


class FakeDLPack:
    """A DLPack producer over a numpy array, labelled with any device: capsules,
    deleter and destructor as a C producer makes them. ``deleter_calls`` counts
    the deleter's calls per exported tensor; ``calls`` keeps __dlpack__'s kwargs."""

    def __init__(
        self,
        arr: np.ndarray,
        device: Tuple[int, int] = (1, 0),
        *,
        versioned: bool = False,
        version: Tuple[int, int] = (1, 0),
        flags: int = 0,
        dtype: Optional[Tuple[int, int, int]] = None,
        strides: Optional[Tuple[int, ...]] = None,
        byte_offset: int = 0,
        keywords: Tuple[str, ...] = ("stream", "max_version", "copy"),
    ):
        self.arr = arr
        self.device = device
        self.versioned = versioned
        self.version = version
        self.flags = flags
        self.dtype = dtype or (_NUMPY_CODES[arr.dtype.kind], arr.dtype.itemsize * 8, 1)
        self.strides = strides
        self.byte_offset = byte_offset
        self.keywords = keywords
        self.calls: List[Dict[str, Any]] = []
        self.deleter_calls: Dict[int, int] = {}
        self.capsules: List[Any] = []
        self._keep: List[Any] = []
        _PRODUCERS.append(self)

    def __dlpack_device__(self) -> Tuple[int, int]:
        return self.device

    def __dlpack__(self, **kwargs: Any) -> Any:
        unknown = set(kwargs) - set(self.keywords)
        if unknown:
            raise TypeError(f"__dlpack__() got an unexpected keyword argument {unknown.pop()!r}")
        self.calls.append(kwargs)
        a = self.arr
        shape = (c_int64 * max(a.ndim, 1))(*a.shape)
        strides = (c_int64 * len(self.strides))(*self.strides) if self.strides else None
        t = DLTensor(
            data=(a.ctypes.data - self.byte_offset) if a.size else None,
            device_type=self.device[0],
            device_id=self.device[1],
            ndim=a.ndim,
            code=self.dtype[0],
            bits=self.dtype[1],
            lanes=self.dtype[2],
            shape=ctypes.cast(shape, ctypes.POINTER(c_int64)),
            strides=ctypes.cast(strides, ctypes.POINTER(c_int64)) if strides else None,
            byte_offset=self.byte_offset,
        )
        deleter = ctypes.cast(_deleter, c_void_p).value
        mv = kwargs.get("max_version")
        if self.versioned and mv is not None and mv[0] >= 1:
            m: Any = DLManagedTensorVersioned(
                major=self.version[0],
                minor=self.version[1],
                deleter=deleter,
                flags=self.flags,
                dl_tensor=t,
            )
            name = _NAME_VERSIONED
        else:
            m = DLManagedTensor(dl_tensor=t, deleter=deleter)
            name = _NAME_LEGACY
        self._keep += [shape, strides, m]  # never freed: addresses stay unique
        _EXPORTS[ctypes.addressof(m)] = self
        cap = _capsule_new(
            ctypes.addressof(m), ctypes.addressof(name), ctypes.cast(_capsule_destructor, c_void_p)
        )
        self.capsules.append(cap)
        return cap

    def capsule_names(self) -> List[bytes]:
        return [_capsule_name(c) for c in self.capsules]

    def drop_capsules(self) -> None:
        self.capsules.clear()  # their destructors run now


def test_dlpack_struct_layouts():
    assert ctypes.sizeof(DLTensor) == 48 == ctypes.sizeof(_buffers._DLTensor)
    assert ctypes.sizeof(DLManagedTensor) == 64 == ctypes.sizeof(_buffers._DLManagedTensor)
    assert (
        ctypes.sizeof(DLManagedTensorVersioned)
        == 80
        == ctypes.sizeof(_buffers._DLManagedTensorVersioned)
    )


def resolve(obj: Any, what: str = "send: tensor", output: bool = False) -> _buffers.Buffer:
    return _buffers.as_buffer(obj, what, output=output, device=True)


# ---- __cuda_array_interface__ ------------------------------------------------------------


@pytest.mark.parametrize(
    "dt,want",
    [
        ("int8", DType.INT8),
        ("uint8", DType.UINT8),
        ("int16", DType.INT16),
        ("uint16", DType.UINT16),
        ("int32", DType.INT32),
        ("uint32", DType.UINT32),
        ("int64", DType.INT64),
        ("uint64", DType.UINT64),
        ("float16", DType.FLOAT16),
        ("float32", DType.FLOAT32),
        ("float64", DType.FLOAT64),
    ],
)
def test_cai_dtypes_and_shape(fake_cuda, dt, want):
    a = np.zeros((3, 4), dtype=dt)
    b = resolve(FakeCAI(a, stream=None))
    assert (b.dtype, b.count, b.shape) == (want, 12, (3, 4))
    assert (b.addr, b.nbytes) == (a.ctypes.data, a.nbytes)
    assert b.device and not b.readonly


@pytest.mark.parametrize(
    "stream,version,want",
    [
        (0x7F00, 3, [0x7F00]),  # a stream handle: that stream
        (1, 3, [1]),  # the legacy default stream
        (2, 3, [2]),  # the per-thread default stream
        (None, 3, []),  # v3, None: nothing pending
        (_MISSING, 3, []),  # v3 without the key: nothing pending
        (_MISSING, 2, [None]),  # v2 (no stream key yet): the whole context
    ],
    ids=["handle", "legacy", "per-thread", "v3-None", "v3-absent", "v2-absent"],
)
def test_cai_stream_synchronised(fake_cuda, stream, version, want):
    a = np.arange(8, dtype=np.float32)
    resolve(FakeCAI(a, stream=stream, version=version))
    assert fake_cuda.syncs == [(s, a.ctypes.data, None) for s in want]
    fake_cuda.syncs.clear()
    resolve(FakeCAI(a, stream=stream, version=version), "recv: tensor", output=True)
    assert fake_cuda.syncs == [(s, a.ctypes.data, None) for s in want]


def test_cai_empty_array_needs_no_sync(fake_cuda):
    b = resolve(FakeCAI(np.zeros(0, np.float32), stream=5))
    assert b.count == 0 and b.ptr is None and fake_cuda.syncs == []


def test_cai_contiguity(fake_cuda):
    a = np.zeros((4, 6), dtype=np.float32)
    resolve(FakeCAI(a, stream=None, strides=(24, 4)))  # C order spelled out
    resolve(FakeCAI(np.zeros((1, 6), np.float32), stream=None, strides=(999, 4)))  # size-1 dim
    with pytest.raises(weft.WeftArgumentError) as e:
        resolve(FakeCAI(a, stream=3, strides=(4, 16)))  # Fortran order
    assert e.value.detail.startswith(
        "send: tensor: a non-contiguous device array (shape (4, 6), strides (4, 16) in bytes); "
    )
    assert e.value.detail.count("send") == 1 and "contiguous()" in e.value.detail
    assert fake_cuda.syncs == []  # refused before anything is synchronised


def test_cai_read_only(fake_cuda):
    a = np.zeros(4, np.int32)
    assert resolve(FakeCAI(a, readonly=True, stream=None)).readonly  # fine to send
    with pytest.raises(weft.WeftArgumentError) as e:
        resolve(FakeCAI(a, readonly=True, stream=9), "recv: tensor", output=True)
    assert e.value.detail.startswith("recv: tensor: the device array is read-only (")
    assert fake_cuda.syncs == []


@pytest.mark.parametrize(
    "typestr,match",
    [
        ("|b1", "uint8"),
        ("<c8", "float components"),
        ("<V2", "DLPack"),
        (">f4" if sys.byteorder == "little" else "<f4", "byte order"),
        ("f4", "not a NumPy type string"),
    ],
)
def test_cai_unknown_typestr(fake_cuda, typestr, match):
    with pytest.raises(weft.WeftArgumentError, match=match) as e:
        resolve(FakeCAI(np.zeros(4, np.uint8), typestr=typestr, stream=None))
    assert e.value.detail.startswith("send: tensor: ")


def test_cai_masked_and_malformed(fake_cuda):
    with pytest.raises(weft.WeftArgumentError, match="masked"):
        resolve(FakeCAI(np.zeros(4, np.uint8), mask=FakeCAI(np.ones(4, np.uint8))))
    bad = FakeCAI(np.zeros(4, np.uint8))
    del bad.__cuda_array_interface__["data"]
    with pytest.raises(weft.WeftArgumentError, match="malformed __cuda_array_interface__"):
        resolve(bad)


# ---- DLPack --------------------------------------------------------------------------------


@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
def test_dlpack_cpu_capsule_protocol(versioned):
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    p = FakeDLPack(a, versioned=versioned)
    b = _buffers.as_buffer(p, "all_reduce: tensor", output=True)  # CPU memory: any operation
    assert (b.addr, b.shape, b.dtype, b.device) == (a.ctypes.data, (3, 4), DType.INT64, False)
    assert p.calls == [{"stream": None, "max_version": (1, 0), "copy": False}]
    used = b"used_dltensor_versioned" if versioned else b"used_dltensor"
    assert p.capsule_names() == [used]
    p.drop_capsules()
    assert p.deleter_calls == {}  # consumed: the capsule's destructor left it alone
    del b  # the operation is over
    assert list(p.deleter_calls.values()) == [1]


def test_dlpack_cuda_stream_handed_over_and_synchronised(fake_cuda):
    a = np.arange(5, dtype=np.float32)
    p = FakeDLPack(a, device=(2, 3))
    b = resolve(p)
    stream = FakeDriver.STREAM_BASE + 3
    assert fake_cuda.stream_devices == [3]
    assert [c["stream"] for c in p.calls] == [stream]
    assert "copy" not in p.calls[0]  # an input may be a copy
    assert fake_cuda.syncs == [(stream, a.ctypes.data, 3)]
    assert b.device and b.addr == a.ctypes.data
    del b
    p.drop_capsules()
    assert list(p.deleter_calls.values()) == [1]


def test_dlpack_cuda_host_and_managed_are_device_memory(fake_cuda):
    for dev in ((3, 0), (13, 1)):
        b = resolve(FakeDLPack(np.zeros(2, np.float64), device=dev))
        assert b.device
    assert [s[2] for s in fake_cuda.syncs] == [0, 1]


def test_dlpack_older_signatures(fake_cuda):
    a = np.zeros(3, np.uint16)
    p = FakeDLPack(a, versioned=True, keywords=("stream",))  # knows no max_version
    b = resolve(p)
    assert b.dtype == DType.UINT16 and p.capsule_names() == [b"used_dltensor"]
    cpu = FakeDLPack(a, keywords=())  # from before the stream keyword
    assert resolve(cpu).count == 3 and cpu.calls == [{}]


@pytest.mark.parametrize(
    "code_bits,want",
    [
        ((0, 8), DType.INT8),
        ((0, 64), DType.INT64),
        ((1, 8), DType.UINT8),
        ((1, 32), DType.UINT32),
        ((2, 16), DType.FLOAT16),
        ((2, 64), DType.FLOAT64),
        ((4, 16), DType.BFLOAT16),
    ],
)
def test_dlpack_dtypes(fake_cuda, code_bits, want):
    a = np.zeros(16, np.uint8)
    n = 16 // (code_bits[1] // 8)
    p = FakeDLPack(a.view(f"u{code_bits[1] // 8}"), device=(2, 0), dtype=(*code_bits, 1))
    b = resolve(p)
    assert b.dtype == want and b.count == n


@pytest.mark.parametrize(
    "dtype,match",
    [
        ((6, 8, 1), "bool8 has no weft datatype (view it as uint8)"),
        ((5, 64, 1), "complex64 has no weft datatype (view it as its float"),
        ((2, 32, 4), "float32x4 has no weft datatype"),
        ((2, 8, 1), "float8 has no weft datatype"),
        ((9, 8, 1), "type code 9"),
    ],
)
def test_dlpack_unknown_dtype_releases_the_tensor(fake_cuda, dtype, match):
    p = FakeDLPack(np.zeros(8, np.uint8), device=(2, 0), dtype=dtype)
    with pytest.raises(weft.WeftArgumentError, match=re.escape(match)) as e:
        resolve(p)
    assert e.value.detail.startswith("send: tensor: DLPack dtype ")
    assert list(p.deleter_calls.values()) == [1]  # consumed and freed at once
    p.drop_capsules()
    assert list(p.deleter_calls.values()) == [1]
    assert fake_cuda.syncs == []


def test_dlpack_strides_and_byte_offset(fake_cuda):
    a = np.zeros((4, 6), np.float32)
    b = resolve(FakeDLPack(a, device=(2, 0), strides=(6, 1), byte_offset=64))
    assert b.addr == a.ctypes.data and b.count == 24
    p = FakeDLPack(a, device=(2, 0), strides=(1, 4))
    with pytest.raises(weft.WeftArgumentError) as e:
        resolve(p)
    assert e.value.detail.startswith(
        "send: tensor: a non-contiguous device array (shape (4, 6), strides (1, 4) in elements)"
    )
    assert list(p.deleter_calls.values()) == [1]
    cpu = FakeDLPack(a, strides=(1, 4))
    with pytest.raises(weft.WeftArgumentError, match="non-contiguous array"):
        _buffers.as_buffer(cpu, "all_reduce: tensor", output=True)


def test_dlpack_read_only_and_copied_outputs(fake_cuda):
    a = np.zeros(4, np.float32)
    ro = FakeDLPack(a, device=(2, 0), versioned=True, flags=1)
    assert resolve(ro).readonly  # fine to send
    with pytest.raises(weft.WeftArgumentError) as e:
        resolve(ro, "recv: tensor", output=True)
    assert e.value.detail.startswith("recv: tensor: the device array is read-only (")
    assert "FakeDLPack, DLPack flags it read-only) but weft writes into it" in e.value.detail
    assert ro.calls[-1]["copy"] is False  # a receive asks for no copy
    copied = FakeDLPack(a, device=(2, 0), versioned=True, flags=2)
    with pytest.raises(weft.WeftArgumentError, match="exported a copy"):
        resolve(copied, "recv: tensor", output=True)
    ro.drop_capsules()
    copied.drop_capsules()
    assert list(ro.deleter_calls.values()) == [1, 1]
    assert list(copied.deleter_calls.values()) == [1]


def test_dlpack_newer_major_version_not_consumed(fake_cuda):
    p = FakeDLPack(np.zeros(4, np.int8), device=(2, 0), versioned=True, version=(2, 0))
    with pytest.raises(weft.WeftUnsupportedError, match="DLPack 2.0 tensor"):
        resolve(p)
    assert p.capsule_names() == [b"dltensor_versioned"] and p.deleter_calls == {}
    p.drop_capsules()  # the producer's destructor frees it
    assert list(p.deleter_calls.values()) == [1]


def test_dlpack_other_devices_refused_before_export(fake_cuda):
    p = FakeDLPack(np.zeros(4, np.int8), device=(10, 0))
    with pytest.raises(weft.WeftUnsupportedError, match=r"device type 10 \(ROCm"):
        resolve(p)
    assert p.calls == []


def test_dtype_of_device_array_synchronises_nothing(fake_cuda, monkeypatch):
    monkeypatch.setattr(_cuda, "_library_ok", False)  # not even asked
    p = FakeDLPack(np.zeros(4, np.float16), device=(2, 0))
    assert weft.dtype_of(p) == DType.FLOAT16
    assert p.calls[0]["stream"] == -1  # "do not synchronise"
    assert weft.dtype_of(FakeCAI(np.zeros(2, np.int8), stream=4)) == DType.INT8
    assert fake_cuda.syncs == [] and fake_cuda.stream_devices == []


# ---- where device arrays are taken ---------------------------------------------------------


def test_library_without_gpu_support_refuses(fake_cuda, monkeypatch):
    monkeypatch.setattr(_cuda, "_library_ok", None)  # ask the loaded library
    info = weft.build_info()
    if " cuda=no" not in info and "no-gpu-paths" not in info:
        pytest.skip(f"this libweft takes device memory ({info})")
    p = FakeDLPack(np.zeros(4, np.float32), device=(2, 0))
    with pytest.raises(weft.WeftUnsupportedError) as e:
        resolve(p)
    assert e.value.detail.startswith("send: tensor: a CUDA device array, but ")
    assert "built without GPU support (weft_build_info: cuda=" in e.value.detail
    assert p.calls == []


def test_cuda_driver_loaded_only_for_device_arrays():
    """Host buffers never load libcuda (checked in a fresh process)."""
    code = (
        "import numpy, weft\n"
        "from weft import _buffers, _cuda\n"
        "_buffers.as_buffer(numpy.zeros(3), 'send: tensor', output=False, device=True)\n"
        "_buffers.as_buffer(bytearray(3), 'recv: tensor', output=True, device=True)\n"
        "maps = open('/proc/self/maps').read()\n"
        "print(_cuda._driver is None, 'libcuda' in maps)\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert p.stdout.split() == ["True", "False"], p.stdout


# ---- through the library ---------------------------------------------------------------------

needs_2 = pytest.mark.skipif(
    weft.init().size < 2, reason="point-to-point tests need 2 or more ranks"
)


@needs_2
def test_send_recv_device_labelled_arrays(comm, fake_cuda):
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    data = np.arange(10, dtype=np.int32) + 100 * comm.rank
    got_cai = np.zeros(10, np.int32)
    got_dl = np.zeros(10, np.int32)
    src = FakeDLPack(data, device=(2, 0))
    dst = FakeDLPack(got_dl, device=(2, 0))
    w1 = comm.isend(FakeCAI(data, stream=0x51), right, tag=31)
    comm.recv(FakeCAI(got_cai, stream=0x52), left, tag=31)
    w1.wait()
    w2 = comm.isend(src, right, tag=32)
    st = comm.recv(dst, left, tag=32)
    w2.wait()
    want = np.arange(10, dtype=np.int32) + 100 * left
    np.testing.assert_array_equal(got_cai, want)
    np.testing.assert_array_equal(got_dl, want)
    assert st == weft.RecvStatus(left, 32, 40)
    s = FakeDriver.STREAM_BASE
    assert fake_cuda.syncs == [
        (0x51, data.ctypes.data, None),
        (0x52, got_cai.ctypes.data, None),
        (s, data.ctypes.data, 0),
        (s, got_dl.ctypes.data, 0),
    ]
    assert list(src.deleter_calls.values()) == [1] and list(dst.deleter_calls.values()) == [1]


@needs_2
def test_pending_work_holds_the_dlpack_tensor(comm, fake_cuda):
    """isend / irecv keep the consumed tensor until wait(); the deleter runs once, then."""
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    got = np.zeros(1000, np.float64)
    dst = FakeDLPack(got, device=(2, 0), versioned=True)
    src = FakeDLPack(np.full(1000, comm.rank + 0.5), device=(2, 0))
    rw = comm.irecv(dst, left, tag=33)
    sw = comm.isend(src, right, tag=33)
    src.drop_capsules()
    dst.drop_capsules()
    assert src.deleter_calls == {} and dst.deleter_calls == {}  # the Works hold them
    rw.wait()
    sw.wait()
    assert list(src.deleter_calls.values()) == [1] and list(dst.deleter_calls.values()) == [1]
    np.testing.assert_array_equal(got, np.full(1000, left + 0.5))
    rw.wait()  # waiting again releases nothing twice
    assert list(dst.deleter_calls.values()) == [1]


@needs_2
def test_numpy_point_to_point_touches_no_driver(comm, fake_cuda):
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    got = np.zeros(3)
    w = comm.isend(np.array([1.0, 2.0, comm.rank]), right, tag=34)
    comm.recv(got, left, tag=34)
    w.wait()
    assert got.tolist() == [1.0, 2.0, left]
    assert fake_cuda.syncs == [] and fake_cuda.stream_devices == []


# ---- stream-ordered collectives, through recorders of the C calls ---------------------------

# Each weft_*_on_stream call and its host form (the same arguments less the stream).
_HOST_FORM = {
    "weft_allreduce_on_stream": "weft_iallreduce",
    "weft_reduce_on_stream": "weft_ireduce",
    "weft_bcast_on_stream": "weft_ibcast",
    "weft_allgather_on_stream": "weft_iallgather",
    "weft_alltoall_on_stream": "weft_ialltoall",
    "weft_reduce_scatter_block_on_stream": "weft_ireduce_scatter_block",
    "weft_barrier_on_stream": "weft_ibarrier",
}
IN_PLACE = 1
LEGACY = 1  # the legacy default stream as DLPack names it


class StreamCalls:
    """What the package passed to weft_*_on_stream: (name, arguments without the
    communicator, request and stream, stream). c_void_p arguments are recorded
    as their value (WEFT_IN_PLACE: 1, NULL: None)."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, Tuple[Any, ...], Any]] = []

    def only(self) -> Tuple[str, Tuple[Any, ...], Any]:
        assert len(self.calls) == 1, self.calls
        return self.calls[0]


@pytest.fixture()
def on_stream(monkeypatch: pytest.MonkeyPatch, fake_cuda: FakeDriver) -> StreamCalls:
    lib = _lib.load()
    rec = StreamCalls()
    for name, host in _HOST_FORM.items():

        def fake(*args: Any, _name: str = name, _host: Any = getattr(lib, host)) -> int:
            *call, stream, req = args
            vals = tuple(a.value if isinstance(a, c_void_p) else a for a in call[:-1])
            rec.calls.append((_name, vals, stream))
            return _host(*call, req)

        monkeypatch.setattr(lib, name, fake)
    yield rec
    settle()


def settle() -> None:
    """Waits for the stream-ordered works the package holds (as a later stream
    synchronisation would find them done) and lets the package forget them."""
    for w in list(_comm._rt.inflight):
        w.wait()
    _comm._reap_stream_work()
    assert _comm._rt.inflight == []


def dev(arr: np.ndarray, device: int = 0, **kw: Any) -> FakeDLPack:
    return FakeDLPack(arr, device=(2, device), **kw)


def test_all_reduce_dlpack_is_enqueued_on_the_legacy_stream(comm, on_stream, fake_cuda):
    """A DLPack producer that is neither torch nor CuPy: the legacy default
    stream (NULL to C, 1 to the producer), nothing synchronised on the host."""
    a = np.arange(6, dtype=np.float32) + comm.rank
    p = dev(a)
    assert comm.all_reduce(p, weft.ReduceOp.MAX) is None
    assert on_stream.only() == (
        "weft_allreduce_on_stream",
        (IN_PLACE, a.ctypes.data, 6, DType.FLOAT32, weft.ReduceOp.MAX),
        None,
    )
    assert p.calls == [{"stream": LEGACY, "max_version": (1, 0), "copy": False}]
    assert fake_cuda.syncs == [] and fake_cuda.stream_devices == []
    settle()
    np.testing.assert_array_equal(a, np.arange(6, dtype=np.float32) + comm.size - 1)


@pytest.mark.parametrize(
    "stream,version,c_stream,syncs",
    [
        (0x5100, 3, 0x5100, []),  # its stream: enqueued there, nothing waited for
        (2, 3, 2, []),  # the per-thread default stream
        (None, 3, None, []),  # nothing pending: the legacy default stream
        (_MISSING, 3, None, []),
        (_MISSING, 2, None, [None]),  # v2 names no stream: the context is synchronised
    ],
    ids=["handle", "per-thread", "v3-None", "v3-absent", "v2-absent"],
)
def test_all_reduce_cai_stream(comm, on_stream, fake_cuda, stream, version, c_stream, syncs):
    a = np.full(5, comm.rank + 1, dtype=np.int64)
    comm.all_reduce(FakeCAI(a, stream=stream, version=version))
    assert on_stream.only() == (
        "weft_allreduce_on_stream",
        (IN_PLACE, a.ctypes.data, 5, DType.INT64, weft.ReduceOp.SUM),
        c_stream,
    )
    assert fake_cuda.syncs == [(s, a.ctypes.data, None) for s in syncs]
    settle()
    assert a.tolist() == [comm.size * (comm.size + 1) // 2] * 5


_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
_DTYPES += ["float16", "float32", "float64"]


@pytest.mark.parametrize("dt", _DTYPES)
def test_all_reduce_dtypes(comm, on_stream, dt):
    a = np.full(3, 2, dtype=dt)
    comm.all_reduce(FakeCAI(a, stream=None), weft.ReduceOp.SUM)
    assert on_stream.only()[1][3] == _buffers._NUMPY_NAMES[dt]
    settle()
    assert a.tolist() == [2 * comm.size] * 3


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def test_all_reduce_bfloat16_dlpack(comm, on_stream):
    bits = _bf16_bits(np.array([1.0, 2.5, -3.0, 0.5]) * (comm.rank + 1))
    comm.all_reduce(dev(bits, dtype=(4, 16, 1)), weft.ReduceOp.AVG)
    assert on_stream.only()[1][2:] == (4, DType.BFLOAT16, weft.ReduceOp.AVG)
    settle()
    mean = (comm.size + 1) / 2
    np.testing.assert_allclose(
        _bf16_value(bits), np.array([1.0, 2.5, -3.0, 0.5]) * mean, rtol=1.6e-2
    )


def test_broadcast_and_reduce(comm, on_stream):
    root = comm.size - 1
    a = np.arange(4, dtype=np.float64) * (comm.rank + 1)
    p = dev(a)
    comm.broadcast(p, root)
    assert on_stream.only() == (
        "weft_bcast_on_stream",
        (a.ctypes.data, 4, DType.FLOAT64, root),
        None,
    )
    # the root's array is only read: an input may be a copy, the others' may not
    assert ("copy" in p.calls[0]) == (comm.rank != root)
    settle()
    np.testing.assert_array_equal(a, np.arange(4) * comm.size)
    on_stream.calls.clear()

    b = np.full(3, comm.rank + 1, dtype=np.int32)
    comm.reduce(FakeCAI(b, stream=0x61), 0, weft.ReduceOp.SUM)
    want_args = (IN_PLACE, b.ctypes.data) if comm.rank == 0 else (b.ctypes.data, None)
    assert on_stream.only() == (
        "weft_reduce_on_stream",
        want_args + (3, DType.INT32, weft.ReduceOp.SUM, 0),
        0x61,
    )
    settle()
    want = comm.size * (comm.size + 1) // 2 if comm.rank == 0 else comm.rank + 1
    assert b.tolist() == [want] * 3


def test_all_gather_single_first_array_names_the_stream(comm, on_stream, fake_cuda):
    """The input (a CAI on stream 0x71) names the stream; the output (DLPack) is
    handed it; an output CAI on another stream would be synchronised."""
    inp = np.array([comm.rank, 10 + comm.rank], dtype=np.uint16)
    out = np.zeros(2 * comm.size, dtype=np.uint16)
    q = dev(out)
    comm.all_gather_single(q, FakeCAI(inp, stream=0x71))
    assert on_stream.only() == (
        "weft_allgather_on_stream",
        (inp.ctypes.data, out.ctypes.data, 2, DType.UINT16),
        0x71,
    )
    assert q.calls[0]["stream"] == 0x71 and q.calls[0]["copy"] is False
    assert fake_cuda.syncs == []
    settle()
    assert out.tolist() == [v for r in range(comm.size) for v in (r, 10 + r)]
    on_stream.calls.clear()

    out2 = np.zeros(2 * comm.size, dtype=np.uint16)
    comm.all_gather_single(FakeCAI(out2, stream=0x72), FakeCAI(inp, stream=0x71))
    assert on_stream.only()[2] == 0x71
    assert fake_cuda.syncs == [(0x72, out2.ctypes.data, None)]
    settle()
    assert out2.tolist() == out.tolist()


def test_reduce_scatter_single(comm, on_stream):
    n = comm.size
    inp = np.arange(3 * n, dtype=np.float32) * (comm.rank + 1)
    out = np.zeros(3, dtype=np.float32)
    comm.reduce_scatter_single(dev(out), dev(inp), weft.ReduceOp.SUM)
    assert on_stream.only() == (
        "weft_reduce_scatter_block_on_stream",
        (inp.ctypes.data, out.ctypes.data, 3, DType.FLOAT32, weft.ReduceOp.SUM),
        None,
    )
    settle()
    total = n * (n + 1) / 2
    np.testing.assert_array_equal(out, np.arange(3 * comm.rank, 3 * comm.rank + 3) * total)


@pytest.mark.parametrize("splits", [False, True], ids=["no-splits", "equal-splits"])
def test_all_to_all_single(comm, on_stream, splits):
    n = comm.size
    inp = (np.arange(2 * n, dtype=np.int16) + 100 * comm.rank).reshape(n, 2)
    out = np.zeros((n, 2), dtype=np.int16)
    sizes = [1] * n if splits else None
    comm.all_to_all_single(dev(out), dev(inp), sizes, sizes)
    assert on_stream.only() == (
        "weft_alltoall_on_stream",
        (inp.ctypes.data, out.ctypes.data, 2, DType.INT16),
        None,
    )
    settle()
    want = [[100 * r + 2 * comm.rank, 100 * r + 2 * comm.rank + 1] for r in range(n)]
    assert out.tolist() == want


def test_all_to_all_single_unequal_splits_refused(comm, on_stream):
    n = comm.size
    if n < 2:
        pytest.skip("unequal splits need 2 or more ranks")
    inp, out = dev(np.zeros(n + 1, np.float32)), dev(np.zeros(n + 1, np.float32))
    sizes = [2] + [1] * (n - 1)
    with pytest.raises(weft.WeftUnsupportedError) as e:
        comm.all_to_all_single(out, inp, sizes, sizes)
    assert e.value.detail.startswith("all_to_all_single: device arrays take equal blocks only")
    assert on_stream.calls == []


def test_framework_stream_is_used(comm, on_stream, monkeypatch):
    """torch tensors and CuPy arrays go on their framework's current stream for
    their device (stand-in modules here; 0, the default stream, is NULL to C
    and 1 to DLPack)."""
    asked: List[Any] = []
    current = {"torch": 0x7100, "cupy": 0}

    class TorchStream:
        def __init__(self, device: int) -> None:
            self.cuda_stream = current["torch"] + device if current["torch"] else 0

    torch = types.ModuleType("torch")
    torch.Tensor = type("Tensor", (FakeDLPack,), {})  # type: ignore[attr-defined]
    torch.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        current_stream=lambda device=None: (asked.append(("torch", device)), TorchStream(device))[1]
    )
    cupy = types.ModuleType("cupy")
    cupy.ndarray = type("ndarray", (FakeDLPack,), {})  # type: ignore[attr-defined]
    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        get_current_stream=lambda device_id=-1: (
            asked.append(("cupy", device_id)),
            types.SimpleNamespace(ptr=current["cupy"]),
        )[1]
    )
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    a = np.ones(4, np.float32)
    t = torch.Tensor(a, device=(2, 1))
    comm.all_reduce(t)
    assert asked == [("torch", 1)]
    assert on_stream.calls[-1][2] == 0x7101 and t.calls[0]["stream"] == 0x7101
    c = cupy.ndarray(a, device=(2, 0))
    comm.all_reduce(c)
    assert asked[-1] == ("cupy", 0)
    assert on_stream.calls[-1][2] is None and c.calls[0]["stream"] == LEGACY
    settle()
    assert a.tolist() == [comm.size**2] * 4


def test_no_framework_is_imported(comm, on_stream, monkeypatch):
    imported: List[str] = []
    real = builtins.__import__

    def spy(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] in ("torch", "cupy"):
            imported.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", spy)
    a = np.zeros(2, np.float64)
    comm.all_reduce(dev(a))
    comm.all_reduce(FakeCAI(a, stream=None))
    settle()
    assert imported == []


def test_async_work_waits_through_the_request(comm, on_stream):
    a = np.full(1000, comm.rank, dtype=np.float64)
    p = dev(a, versioned=True)
    w = comm.all_reduce(p, async_op=True)
    assert isinstance(w, weft.Work)
    p.drop_capsules()
    assert p.deleter_calls == {}  # the Work holds the tensor
    assert w.wait() is True and w.is_completed()
    assert list(p.deleter_calls.values()) == [1]
    np.testing.assert_array_equal(a, np.full(1000, comm.size * (comm.size - 1) / 2))
    _comm._reap_stream_work()
    assert _comm._rt.inflight == []


def test_blocking_call_holds_its_arrays_until_the_work_is_done(comm, on_stream):
    """A blocking call returns once enqueued; the package keeps the Work (and the
    consumed DLPack tensor) until it completes, found by a later call."""
    a = np.full(10, 1.5, dtype=np.float32)
    p = dev(a)
    assert comm.all_reduce(p) is None
    p.drop_capsules()
    assert p.deleter_calls == {}
    held = [w for w in _comm._rt.inflight if w._comm is comm]
    assert len(held) == 1 and held[0]._blocking
    held[0].wait()  # as a later call finds it completed
    assert list(p.deleter_calls.values()) == [1]  # let go at completion
    comm.all_reduce(dev(np.zeros(1, np.float32)))  # the next call forgets it
    assert held[0] not in _comm._rt.inflight
    settle()
    np.testing.assert_array_equal(a, np.full(10, 1.5 * comm.size, np.float32))


def test_failure_after_return_is_raised_by_the_next_device_call(comm, on_stream):
    class FailedWork:  # stands for a blocking call's work that failed on the GPU
        _blocking = True
        _kind = "all_reduce"
        _comm = comm
        _error = weft.errors.make_error(weft.errors.ERR_TIMEOUT, "rank 1 never came")

        def is_completed(self) -> bool:
            return True

    with _comm._rt.inflight_lock:
        _comm._rt.inflight.append(FailedWork())  # type: ignore[arg-type]
    with pytest.raises(weft.WeftTimeoutError) as e:
        comm.broadcast(dev(np.zeros(2, np.int8)), 0)
    assert e.value.detail == (
        "broadcast: not started: the stream-ordered all_reduce called earlier on communicator "
        "pytest failed after its call returned: rank 1 never came"
    )
    assert on_stream.calls == []
    comm.broadcast(dev(np.zeros(2, np.int8)), 0)  # raised once
    assert len(on_stream.calls) == 1


def test_barrier_on_a_stream(comm, on_stream):
    class CudaStreamProtocol:
        def __cuda_stream__(self) -> Tuple[int, int]:
            return (0, 0x8300)

    streams = [
        (0x8100, 0x8100),
        (0, None),
        (types.SimpleNamespace(cuda_stream=0x8200), 0x8200),  # torch.cuda.Stream
        (types.SimpleNamespace(ptr=0x8400), 0x8400),  # cupy.cuda.Stream
        (CudaStreamProtocol(), 0x8300),
    ]
    for s, want in streams:
        assert comm.barrier(stream=s) is None  # blocking: every member has entered
    assert _comm._rt.inflight == []  # waited for: not held
    w = comm.barrier(stream=0x8500, async_op=True)
    assert _comm._rt.inflight == [w]  # held until it completes
    assert w.wait()
    assert [c[0] for c in on_stream.calls] == ["weft_barrier_on_stream"] * 6
    assert [c[2] for c in on_stream.calls] == [want for _, want in streams] + [0x8500]
    with pytest.raises(weft.WeftArgumentError, match="barrier: stream: builtins.str is not a CUDA"):
        comm.barrier(stream="default")


# ---- what is refused ---------------------------------------------------------------------------


def test_mixing_host_and_device_arrays_refused(comm, on_stream):
    p = dev(np.zeros(4, np.float32))
    host = np.zeros(4 * comm.size, np.float32)
    with pytest.raises(weft.WeftUnsupportedError) as e:
        comm.all_gather_single(host, p)
    assert e.value.detail == (
        "all_gather_single: input is a CUDA device array (test_device_arrays.FakeDLPack, "
        "DLPack, device type 2 id 0) but output is host memory (numpy.ndarray); the buffers "
        "of one collective are all device arrays or all host memory: copy one side first"
    )
    with pytest.raises(weft.WeftUnsupportedError, match="output is a CUDA device array"):
        comm.reduce_scatter_single(FakeCAI(np.zeros(4, np.float32)), host)
    with pytest.raises(weft.WeftUnsupportedError, match="but input is host memory"):
        comm.all_to_all_single(p, np.zeros(4, np.float32))
    assert p.calls == [] and on_stream.calls == []  # refused before anything is exported


def test_arrays_on_two_devices_refused(comm, on_stream):
    a, b = dev(np.zeros(2, np.int32), 0), dev(np.zeros(2 * comm.size, np.int32), 1)
    with pytest.raises(weft.WeftUnsupportedError) as e:
        comm.all_gather_single(b, a)
    assert e.value.detail.startswith(
        "all_gather_single: the device arrays are on different devices (input on device 0, "
        "output on device 1)"
    )
    assert a.calls == [] and b.calls == []


def test_other_collectives_refuse_device_arrays(comm, on_stream, fake_cuda):
    p = dev(np.zeros(4, np.float32))
    cai = FakeCAI(np.zeros(4, np.float32), stream=3)
    n = comm.size
    cases = [
        ("gather: input", lambda x: comm.gather(None, x, 0) if comm.rank else comm.gather(
            np.zeros(4 * n, np.float32), x, 0)),
        ("scatter: output", lambda x: comm.scatter(x, None, 0) if comm.rank else comm.scatter(
            x, np.zeros(4 * n, np.float32), 0)),
        ("all_gather: tensor", lambda x: comm.all_gather([np.zeros(4, np.float32)] * n, x)),
        ("reduce_scatter: output", lambda x: comm.reduce_scatter(
            x, [np.zeros(4, np.float32)] * n)),
    ]
    for label, call in cases:
        for obj, how in ((cai, "FakeCAI, __cuda_array_interface__"), (p, "FakeDLPack, DLPack")):
            with pytest.raises(weft.WeftUnsupportedError) as e:
                call(obj)
            assert e.value.detail.startswith(f"{label}: a CUDA device array (")
            assert how in e.value.detail
            assert "this operation takes host memory only (send, recv, isend, irecv and the " \
                "collectives all_reduce, reduce, broadcast, all_gather_single, " \
                "reduce_scatter_single, all_to_all_single (equal splits) and barrier take " \
                "device arrays)" in e.value.detail
    assert p.calls == [] and fake_cuda.syncs == [] and on_stream.calls == []
