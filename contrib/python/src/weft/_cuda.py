"""The CUDA driver calls that device arrays need: stream synchronisation before
an operation is posted, the stream handed to DLPack producers, and the stream
a stream-ordered collective is enqueued on (the producer's current stream).

libcuda.so.1 is loaded through ctypes on the first device array, never
before, so hosts without CUDA never load it; nothing here needs CuPy or
torch. Tests put a stand-in in ``_driver`` (consumer_stream / synchronize)
and set ``_library_ok`` to check what would be synchronised without a GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import sys
import threading
from ctypes import byref, c_char_p, c_int, c_uint, c_uint64, c_void_p
from typing import Any, Dict, Iterator, Optional

from . import _lib
from ._ints import UINTPTR_MAX, c_int_arg
from .errors import WeftArgumentError, WeftCudaError, WeftUnsupportedError

# Special CUstream handles (cuda.h), the same numbers the CUDA Array Interface
# and DLPack use for the default streams.
STREAM_LEGACY = 1
STREAM_PER_THREAD = 2

_CU_POINTER_ATTRIBUTE_CONTEXT = 1
_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_CU_STREAM_NON_BLOCKING = 1

_PROTOTYPES = {
    "cuInit": [c_uint],
    "cuGetErrorName": [c_int, ctypes.POINTER(c_char_p)],
    "cuGetErrorString": [c_int, ctypes.POINTER(c_char_p)],
    "cuDeviceGet": [ctypes.POINTER(c_int), c_int],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(c_void_p), c_int],
    "cuCtxGetCurrent": [ctypes.POINTER(c_void_p)],
    "cuCtxPushCurrent_v2": [c_void_p],
    "cuCtxPopCurrent_v2": [ctypes.POINTER(c_void_p)],
    "cuCtxSynchronize": [],
    "cuPointerGetAttribute": [c_void_p, c_int, c_uint64],
    "cuStreamCreate": [ctypes.POINTER(c_void_p), c_uint],
    "cuStreamGetCtx": [c_void_p, ctypes.POINTER(c_void_p)],
    "cuStreamSynchronize": [c_void_p],
}


def describe_stream(stream: Optional[int]) -> str:
    if stream is None:
        return "the whole context (cuCtxSynchronize)"
    if stream == STREAM_LEGACY:
        return "the legacy default stream"
    if stream == STREAM_PER_THREAD:
        return "the per-thread default stream"
    return f"stream {stream:#x}"


class CudaDriver:
    """libcuda.so.1 through ctypes. Raises WeftUnsupportedError when it cannot be
    loaded or initialised, WeftCudaError when a call fails."""

    def __init__(self, what: str):
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise WeftUnsupportedError(
                f"{what}: a CUDA device array, but the CUDA driver (libcuda.so.1) could not be "
                f"loaded: {e}"
            ) from None
        try:
            for name, argtypes in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype = c_int
                fn.argtypes = argtypes
        except AttributeError as e:
            raise WeftUnsupportedError(
                f"{what}: a CUDA device array, but libcuda.so.1 is too old: {e}"
            ) from None
        self._lib = lib
        self._lock = threading.Lock()
        self._primary: Dict[int, int] = {}  # device ordinal -> its retained primary context
        self._streams: Dict[int, int] = {}  # device ordinal -> weft's stream for DLPack
        rc = lib.cuInit(0)
        if rc != 0:
            raise WeftUnsupportedError(
                f"{what}: a CUDA device array, but cuInit failed: {self._error_text(rc)}"
            )

    def _error_text(self, rc: int) -> str:
        name, text = c_char_p(), c_char_p()
        self._lib.cuGetErrorName(rc, byref(name))
        self._lib.cuGetErrorString(rc, byref(text))
        n = (name.value or b"").decode() or f"CUresult {rc}"
        t = (text.value or b"").decode()
        return f"{n} ({t})" if t else n

    def _check(self, rc: int, call: str, what: str) -> None:
        if rc != 0:
            raise WeftCudaError(f"{what}: {call} failed: {self._error_text(rc)}", cuda_status=rc)

    def _primary_context(self, device: int, what: str) -> int:
        with self._lock:
            ctx = self._primary.get(device)
            if ctx is None:
                dev, c = c_int(), c_void_p()
                self._check(
                    self._lib.cuDeviceGet(byref(dev), device), f"cuDeviceGet({device})", what
                )
                self._check(
                    self._lib.cuDevicePrimaryCtxRetain(byref(c), dev.value),
                    f"cuDevicePrimaryCtxRetain(device {device})",
                    what,
                )
                ctx = self._primary[device] = c.value or 0
            return ctx

    def _pointer_context(self, ptr: int, device: Optional[int], what: str) -> Optional[int]:
        """The context the legacy / per-thread stream or cuCtxSynchronize refers to:
        the one that owns ``ptr``, else the primary context of its device (or of
        ``device``), else None (the calling thread's current one)."""
        if ptr:
            c = c_void_p()
            if self._lib.cuPointerGetAttribute(byref(c), _CU_POINTER_ATTRIBUTE_CONTEXT, ptr) == 0:
                if c.value:
                    return c.value
            d = c_int(-1)
            attr = _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
            rc = self._lib.cuPointerGetAttribute(byref(d), attr, ptr)
            if rc == 0 and d.value >= 0:
                device = d.value
        if device is not None:
            return self._primary_context(device, what)
        return None

    @contextlib.contextmanager
    def _current(self, ctx: Optional[int], what: str) -> Iterator[None]:
        cur = c_void_p()
        self._lib.cuCtxGetCurrent(byref(cur))
        if not ctx or ctx == cur.value:
            yield
            return
        self._check(self._lib.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent", what)
        try:
            yield
        finally:
            self._lib.cuCtxPopCurrent_v2(byref(c_void_p()))

    def consumer_stream(self, device: int, what: str) -> int:
        """weft's own non-blocking stream on ``device`` (created once, kept for the
        process): handed to DLPack producers, which order their work before it."""
        with self._lock:
            s = self._streams.get(device)
        if s is not None:
            return s
        ctx = self._primary_context(device, what)
        with self._current(ctx, what):
            h = c_void_p()
            self._check(
                self._lib.cuStreamCreate(byref(h), _CU_STREAM_NON_BLOCKING),
                f"cuStreamCreate(device {device})",
                what,
            )
        with self._lock:
            # Another thread may have made one meanwhile: keep the first (one
            # stream per device, never destroyed; this one leaks, harmlessly).
            return self._streams.setdefault(device, h.value or 0)

    def synchronize(
        self, stream: Optional[int], ptr: int, device: Optional[int], what: str
    ) -> None:
        """Waits until ``stream`` (a CUstream handle; 1: legacy default, 2: per-thread
        default; None: every stream of the context) has finished its work so far,
        in the context of the data at ``ptr`` where the handle needs one."""
        if stream is None or stream in (0, STREAM_LEGACY, STREAM_PER_THREAD):
            ctx = self._pointer_context(ptr, device, what)
        else:
            c = c_void_p()
            ctx = c.value if self._lib.cuStreamGetCtx(stream, byref(c)) == 0 else None
        with self._current(ctx, what):
            if stream is None:
                self._check(self._lib.cuCtxSynchronize(), "cuCtxSynchronize", what)
            else:
                self._check(
                    self._lib.cuStreamSynchronize(stream),
                    f"cuStreamSynchronize({describe_stream(stream)})",
                    what,
                )


_lock = threading.Lock()
# The driver in use: None until the first device array; tests put a stand-in here.
_driver: Optional[Any] = None
# Whether the loaded libweft takes device pointers: None until asked.
_library_ok: Optional[bool] = None
_library_why = ""


def driver(what: str) -> Any:
    """The CUDA driver, loaded on first use."""
    global _driver
    d = _driver
    if d is None:
        with _lock:
            if _driver is None:
                _driver = CudaDriver(what)
            d = _driver
    return d


def check_library(what: str) -> None:
    """WeftUnsupportedError unless the loaded libweft was built to take device
    pointers: its weft_build_info() says ``cuda=no`` or ``cuda=...no-gpu-paths...``
    in builds that would read device memory as host memory."""
    global _library_ok, _library_why
    if _library_ok is None:
        info = (_lib.load().weft_build_info() or b"").decode("utf-8", "replace")
        m = re.search(r"(?:^| )cuda=(\S*)", info)
        value = m.group(1) if m else ""
        _library_ok = value != "no" and "no-gpu-paths" not in value
        _library_why = f"cuda={value}" if m else "no cuda= entry"
    if not _library_ok:
        raise WeftUnsupportedError(
            f"{what}: a CUDA device array, but {_lib.path()} was built without GPU support "
            f"(weft_build_info: {_library_why}); build weft with --with-cuda, or copy the array "
            "to host memory first"
        )


def _same_stream(a: int, b: int) -> bool:
    """Whether two CUstream handles name the same stream (0 and 1 are both the
    legacy default stream)."""
    return (a or STREAM_LEGACY) == (b or STREAM_LEGACY)


def framework_stream(obj: Any, device: Optional[int], what: str) -> Optional[int]:
    """The current stream (a CUstream handle, 0: the legacy default) that the
    framework ``obj`` comes from would run its next kernel on, on ``device``
    (None: its current device): torch.cuda.current_stream(device).cuda_stream
    for a torch tensor, cupy.cuda.get_current_stream(device).ptr for a CuPy
    array; None for anything else. Neither framework is ever imported: an
    object of theirs means they are loaded already."""
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None) if torch is not None else None
    if isinstance(tensor, type) and isinstance(obj, tensor):
        try:
            s = torch.cuda.current_stream(device)  # type: ignore[union-attr]
            return int(s.cuda_stream)
        except Exception as e:
            raise WeftCudaError(
                f"{what}: torch.cuda.current_stream({device}) failed: {e!r}"
            ) from None
    cupy = sys.modules.get("cupy")
    ndarray = getattr(cupy, "ndarray", None) if cupy is not None else None
    if isinstance(ndarray, type) and isinstance(obj, ndarray):
        get = cupy.cuda.get_current_stream  # type: ignore[union-attr]
        try:
            try:
                s = get(device) if device is not None else get()
            except TypeError:  # CuPy before get_current_stream(device_id)
                s = get()
            return int(s.ptr)
        except Exception as e:
            raise WeftCudaError(
                f"{what}: cupy.cuda.get_current_stream() failed: {e!r}"
            ) from None
    return None


def stream_handle(stream: Any, what: str) -> int:
    """A stream argument as a CUstream handle: an int (0: the legacy default
    stream, 1: legacy, 2: per-thread default, else a handle), an object with
    ``__cuda_stream__()`` (CUDA Python's protocol), a torch.cuda.Stream
    (``cuda_stream``) or a CuPy stream (``ptr``)."""
    if isinstance(stream, bool):
        raise WeftArgumentError(f"{what}: stream {stream!r} is not a CUDA stream")
    if hasattr(stream, "__index__"):
        return c_int_arg(stream, what, 0, UINTPTR_MAX)
    proto = getattr(stream, "__cuda_stream__", None)
    try:
        if callable(proto):
            return c_int_arg(proto()[1], what, 0, UINTPTR_MAX)
        for attr in ("cuda_stream", "ptr"):
            h = getattr(stream, attr, None)
            if h is not None:
                return c_int_arg(h, what, 0, UINTPTR_MAX)
    except WeftArgumentError:
        raise
    except Exception as e:
        raise WeftArgumentError(
            f"{what}: cannot read the stream handle of {stream!r}: {e!r}"
        ) from None
    raise WeftArgumentError(
        f"{what}: {type(stream).__module__}.{type(stream).__qualname__} is not a CUDA stream "
        "(pass torch.cuda.Stream, cupy.cuda.Stream, an object with __cuda_stream__, or a "
        "CUstream handle as an int; 0: the legacy default stream)"
    )
