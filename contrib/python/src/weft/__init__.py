"""weft for Python: MPI-style message passing with a torchcomms-shaped API.

A pure-Python package over ctypes: it loads libweft.so (see ``weft._lib`` for
where it looks: WEFT_LIBRARY first) and needs no compiler. Buffers are numpy
arrays or anything with the buffer protocol; results are written in place.
send / recv / isend / irecv also take CUDA device arrays (CuPy, torch), and
so do all_reduce, reduce, broadcast, all_gather_single, reduce_scatter_single
and all_to_all_single, stream-ordered: enqueued on the array's current
stream, returning without waiting for the GPU (see Comm).

    import numpy as np, weft

    comm = weft.new_comm(name="main", timeout=30)
    x = np.full(4, comm.rank, dtype=np.float32)
    comm.all_reduce(x, weft.ReduceOp.SUM)            # in place, every rank
    work = comm.all_reduce(x, async_op=True)         # a Work: wait() / is_completed()
    work.wait(timeout=10)
    comm.finalize()
    weft.finalize()

Start it like any weft program: ``weftrun -n 4 python3 prog.py``,
``mpirun -np 4 python3 prog.py``, torchrun-style variables, or alone.
Failures raise WeftError subclasses that carry the C status, weft_strerror's
text and the library's message.
"""

from __future__ import annotations

from typing import Tuple

from . import _lib
from ._buffers import Buffer, DType, dtype_of
from ._comm import (
    ANY_SOURCE,
    ANY_TAG,
    TAG_UB,
    Comm,
    HintState,
    HintStatus,
    RecvStatus,
    ReduceOp,
    Work,
    finalize,
    init,
    is_initialized,
    new_comm,
    world,
)
from .errors import (
    WeftAlreadyError,
    WeftArgumentError,
    WeftBootstrapError,
    WeftCanceledError,
    WeftCommError,
    WeftCudaError,
    WeftError,
    WeftInternalError,
    WeftLibraryNotFoundError,
    WeftNoMemoryError,
    WeftNotInitializedError,
    WeftPeerLostError,
    WeftRevokedError,
    WeftTimeoutError,
    WeftTransportError,
    WeftTruncateError,
    WeftUnsupportedError,
)

try:  # written into wheels and sdists by the build backend (configure.ac's version)
    from ._version import __version__
except ImportError:  # a source checkout on PYTHONPATH: the library's own version

    def __getattr__(name: str) -> str:
        if name == "__version__":
            return version()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ANY_SOURCE",
    "ANY_TAG",
    "TAG_UB",
    "Buffer",
    "Comm",
    "DType",
    "HintState",
    "HintStatus",
    "RecvStatus",
    "ReduceOp",
    "Work",
    "WeftAlreadyError",
    "WeftArgumentError",
    "WeftBootstrapError",
    "WeftCanceledError",
    "WeftCommError",
    "WeftCudaError",
    "WeftError",
    "WeftInternalError",
    "WeftLibraryNotFoundError",
    "WeftNoMemoryError",
    "WeftNotInitializedError",
    "WeftPeerLostError",
    "WeftRevokedError",
    "WeftTimeoutError",
    "WeftTransportError",
    "WeftTruncateError",
    "WeftUnsupportedError",
    "bootstrap_name",
    "build_info",
    "dtype_of",
    "finalize",
    "init",
    "is_initialized",
    "last_error",
    "library_path",
    "local_rank",
    "local_size",
    "new_comm",
    "node_info",
    "placement",
    "strerror",
    "version",
    "version_info",
    "world",
    "wtime",
]


def library_path() -> str:
    """Where libweft was loaded from (loads it if needed)."""
    _lib.load()
    p = _lib.path()
    assert p is not None
    return p


def version() -> str:
    """The C library's version string."""
    return (_lib.load().weft_version_string() or b"").decode()


def version_info() -> Tuple[int, int, int]:
    """The C library's (major, minor, patch)."""
    import ctypes

    v = [ctypes.c_int() for _ in range(3)]
    _lib.check(_lib.load().weft_get_version(*[ctypes.byref(x) for x in v]))
    return (v[0].value, v[1].value, v[2].value)


def strerror(code: int) -> str:
    """weft_strerror(code)."""
    from ._ints import c_int_arg

    return (_lib.load().weft_strerror(c_int_arg(code, "strerror: code")) or b"").decode()


def last_error() -> str:
    """This thread's last failure message from the library ("" when none)."""
    return _lib.last_error()


def bootstrap_name() -> str:
    """The bootstrap in use: "pmix", "env", "oob", "single", or "none"."""
    return (_lib.load().weft_bootstrap_name() or b"").decode()


def build_info() -> str:
    """Build facts of the loaded library, "key=value" space separated."""
    return (_lib.load().weft_build_info() or b"").decode()


def wtime() -> float:
    """Seconds on a monotonic clock."""
    return float(_lib.load().weft_wtime())


def _int_out(fn_name: str) -> int:
    import ctypes

    v = ctypes.c_int()
    _lib.check(getattr(_lib.load(), fn_name)(ctypes.byref(v)))
    return v.value


def local_rank() -> int:
    """This process's rank on its host (LOCAL_RANK, or the launcher's view)."""
    return _int_out("weft_local_rank")


def local_size() -> int:
    """Number of ranks on this host (LOCAL_WORLD_SIZE, or the launcher's view)."""
    return _int_out("weft_local_size")


def node_info() -> Tuple[int, int]:
    """(this rank's node index, number of nodes)."""
    import ctypes

    node, nnodes = ctypes.c_int(), ctypes.c_int()
    _lib.check(_lib.load().weft_node_info(ctypes.byref(node), ctypes.byref(nnodes)))
    return node.value, nnodes.value


def placement() -> str:
    """This rank's hwloc placement on one line (NUMA node, socket, CPUs, GPU, NIC)."""
    import ctypes

    buf = ctypes.create_string_buffer(512)
    _lib.check(_lib.load().weft_placement(buf, len(buf)))
    return buf.value.decode("utf-8", "replace")
