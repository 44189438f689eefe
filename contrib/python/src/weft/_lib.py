"""Finding and loading libweft.so, and the ctypes prototypes of its calls.

Search order (the first that loads wins):

1. ``WEFT_LIBRARY``: a path to the library file, or a directory holding it
   (a build directory works: its ``.libs/`` is looked into). When set, it is
   the only place tried, so a wrong value is reported instead of silently
   loading another copy.
2. The library inside this package, where it was installed from weft's binary
   wheel (``weft/lib``); UCX comes from the ``libucx`` package (libucx-cu13).
3. The install prefix recorded when weft was configured: ``pkg-config
   --variable=libdir weft`` (weft.pc is installed with the library).
4. ``../lib`` and ``../lib64`` next to a ``weft_info`` found on ``PATH``.
5. ``/usr/local/lib`` (configure's default prefix).
6. The system loader: ``libweft.so.0`` (``LD_LIBRARY_PATH``, ldconfig's
   cache), then ``ctypes.util.find_library("weft")``.

On failure :class:`weft.WeftLibraryNotFoundError` lists every place tried and
why each failed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import threading
from ctypes import POINTER, c_char_p, c_double, c_int, c_int64, c_size_t, c_void_p
from typing import List, Optional, Tuple

from . import errors
from .errors import WeftLibraryNotFoundError

SONAME = "libweft.so.0"
_NAMES = (SONAME, "libweft.so")
# The C API generation this package speaks (weft.h's WEFT_VERSION_MAJOR).
API_MAJOR = 0
# weft.h's WEFT_STATUS_LAYOUT that WeftStatus mirrors.
STATUS_LAYOUT = 1


class WeftStatus(ctypes.Structure):
    """weft_status_t, layout version 1 (WEFT_STATUS_LAYOUT):
    int32 source, int32 tag, int32 error, int32 reserved, uint64 bytes."""

    _fields_ = [
        ("source", ctypes.c_int32),
        ("tag", ctypes.c_int32),
        ("error", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("bytes", ctypes.c_uint64),
    ]


assert ctypes.sizeof(WeftStatus) == 24

_handle = c_void_p
_p_handle = POINTER(c_void_p)
_p_int = POINTER(c_int)
_p_i64 = POINTER(c_int64)
_p_status = POINTER(WeftStatus)
_buf = c_void_p
_dt = c_int
_req = _p_handle
_stream = c_void_p

# name: (restype, argtypes). Every int-returning call is a status.
_PROTOTYPES = {
    "weft_init": (c_int, [c_void_p, c_void_p]),
    "weft_init_oob": (c_int, [c_int, c_int, c_void_p, c_void_p]),
    "weft_finalize": (c_int, []),
    "weft_initialized": (c_int, [_p_int]),
    "weft_progress": (c_int, []),
    "weft_wtime": (c_double, []),
    "weft_get_version": (c_int, [_p_int, _p_int, _p_int]),
    "weft_version_string": (c_char_p, []),
    "weft_strerror": (c_char_p, [c_int]),
    "weft_last_error": (c_char_p, []),
    "weft_bootstrap_name": (c_char_p, []),
    "weft_dtype_size": (c_size_t, [_dt]),
    "weft_dtype_name": (c_char_p, [_dt]),
    "weft_build_info": (c_char_p, []),
    "weft_comm_world": (_handle, []),
    "weft_comm_rank": (c_int, [_handle, _p_int]),
    "weft_comm_size": (c_int, [_handle, _p_int]),
    "weft_local_rank": (c_int, [_p_int]),
    "weft_local_size": (c_int, [_p_int]),
    "weft_comm_get_timeout": (c_int, [_handle, POINTER(c_double)]),
    "weft_comm_set_timeout": (c_int, [_handle, c_double]),
    "weft_options_create": (c_int, [_p_handle]),
    "weft_options_free": (c_int, [_p_handle]),
    "weft_options_set_name": (c_int, [_handle, c_char_p]),
    "weft_options_set_timeout": (c_int, [_handle, c_double]),
    "weft_options_set_abort_on_error": (c_int, [_handle, c_int]),
    "weft_options_set_device": (c_int, [_handle, c_int]),
    "weft_options_set_hint": (c_int, [_handle, c_char_p, c_char_p]),
    "weft_comm_hint_status": (c_int, [_handle, c_char_p, _p_int, ctypes.c_char_p, c_size_t]),
    "weft_comm_hint_count": (c_int, [_handle, _p_int]),
    "weft_comm_hint_get": (
        c_int,
        [_handle, c_int, POINTER(c_char_p), POINTER(c_char_p), _p_int, POINTER(c_char_p)],
    ),
    "weft_comm_dup": (c_int, [_handle, _handle, _p_handle]),
    "weft_comm_split": (c_int, [_handle, c_int, c_int, _handle, _p_handle]),
    "weft_comm_split_ranks": (c_int, [_handle, _p_int, c_int, c_char_p, _handle, _p_handle]),
    "weft_comm_split_type": (c_int, [_handle, c_int, c_int, _handle, _p_handle]),
    "weft_comm_free": (c_int, [_p_handle]),
    "weft_comm_abort": (c_int, [_handle, c_int]),
    "weft_comm_name": (c_char_p, [_handle]),
    "weft_comm_world_rank": (c_int, [_handle, c_int, _p_int]),
    "weft_comm_warmup": (c_int, [_handle]),
    "weft_comm_revoke": (c_int, [_handle]),
    "weft_comm_is_revoked": (c_int, [_handle, _p_int]),
    "weft_comm_shrink": (c_int, [_handle, _p_handle]),
    "weft_comm_agree": (c_int, [_handle, _p_int]),
    "weft_comm_peer_info": (c_int, [_handle, c_int, ctypes.c_char_p, c_size_t]),
    "weft_node_info": (c_int, [_p_int, _p_int]),
    "weft_placement": (c_int, [ctypes.c_char_p, c_size_t]),
    "weft_isend": (c_int, [_buf, c_int64, _dt, c_int, c_int, _handle, _req]),
    "weft_irecv": (c_int, [_buf, c_int64, _dt, c_int, c_int, _handle, _req]),
    "weft_ibarrier": (c_int, [_handle, _req]),
    "weft_ibcast": (c_int, [_buf, c_int64, _dt, c_int, _handle, _req]),
    "weft_ireduce": (c_int, [_buf, _buf, c_int64, _dt, c_int, c_int, _handle, _req]),
    "weft_iallreduce": (c_int, [_buf, _buf, c_int64, _dt, c_int, _handle, _req]),
    "weft_iallgather": (c_int, [_buf, _buf, c_int64, _dt, _handle, _req]),
    "weft_iallgather_list": (c_int, [_buf, POINTER(c_void_p), c_int64, _dt, _handle, _req]),
    "weft_igather": (c_int, [_buf, _buf, c_int64, _dt, c_int, _handle, _req]),
    "weft_iscatter": (c_int, [_buf, _buf, c_int64, _dt, c_int, _handle, _req]),
    "weft_ireduce_scatter_block": (c_int, [_buf, _buf, c_int64, _dt, c_int, _handle, _req]),
    "weft_ialltoall": (c_int, [_buf, _buf, c_int64, _dt, _handle, _req]),
    "weft_ialltoallv": (c_int, [_buf, _p_i64, _p_i64, _buf, _p_i64, _p_i64, _dt, _handle, _req]),
    # Stream-ordered collectives: (..., comm, stream (a CUstream; NULL: legacy default), request*).
    "weft_barrier_on_stream": (c_int, [_handle, _stream, _req]),
    "weft_bcast_on_stream": (c_int, [_buf, c_int64, _dt, c_int, _handle, _stream, _req]),
    "weft_reduce_on_stream": (
        c_int,
        [_buf, _buf, c_int64, _dt, c_int, c_int, _handle, _stream, _req],
    ),
    "weft_allreduce_on_stream": (c_int, [_buf, _buf, c_int64, _dt, c_int, _handle, _stream, _req]),
    "weft_allgather_on_stream": (c_int, [_buf, _buf, c_int64, _dt, _handle, _stream, _req]),
    "weft_alltoall_on_stream": (c_int, [_buf, _buf, c_int64, _dt, _handle, _stream, _req]),
    "weft_reduce_scatter_block_on_stream": (
        c_int,
        [_buf, _buf, c_int64, _dt, c_int, _handle, _stream, _req],
    ),
    "weft_test": (c_int, [_p_handle, _p_int, _p_status]),
    "weft_wait_timeout": (c_int, [_p_handle, c_double, _p_status]),
    "weft_request_cancel": (c_int, [_p_handle]),
    "weft_request_free": (c_int, [_p_handle]),
    "weft_request_on_complete": (c_int, [_handle, c_void_p, c_void_p]),
    "weft_notify_fd": (None, [c_void_p, c_int]),
    "weft_progress_thread_active": (c_int, [_p_int]),
}

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_path: Optional[str] = None


def _pkg_config_libdir() -> Tuple[Optional[str], str]:
    exe = shutil.which("pkg-config")
    if not exe:
        return None, "pkg-config: not on PATH"
    try:
        out = subprocess.run(
            [exe, "--variable=libdir", "weft"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=10,
            check=False,
            text=True,
        )
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"pkg-config --variable=libdir weft: {e}"
    libdir = out.stdout.strip()
    if out.returncode != 0 or not libdir:
        why = out.stderr.strip().splitlines()
        return None, "pkg-config --variable=libdir weft: " + (
            why[0] if why else f"exit status {out.returncode}"
        )
    return libdir, ""


def _files_in(directory: str) -> List[str]:
    return [os.path.join(directory, n) for n in _NAMES]


# A binary wheel's own copy of the library (contrib/build-wheel.sh).
PACKAGE_LIBDIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")


def _load_libucx() -> None:
    """The wheel's libweft needs UCX's libraries (libucp.so.0, ...) from the
    libucx package (libucx-cu13): its loader puts them in the process by
    SONAME, so libweft's own dependencies resolve to them."""
    try:
        import libucx  # type: ignore[import-not-found]

        libucx.load_library()
    except (ImportError, OSError):  # a missing or broken UCX shows when libweft loads
        pass


def candidates() -> Tuple[List[Tuple[str, str]], List[str]]:
    """Returns ([(where-it-came-from, path-or-name)], [notes on sources that gave nothing])."""
    found: List[Tuple[str, str]] = []
    notes: List[str] = []
    env = os.environ.get("WEFT_LIBRARY")
    if env:
        if os.path.isdir(env):
            for d in (env, os.path.join(env, ".libs"), os.path.join(env, "lib")):
                found += [("WEFT_LIBRARY", p) for p in _files_in(d)]
        else:
            found.append(("WEFT_LIBRARY", env))
        return found, notes
    notes.append("WEFT_LIBRARY: not set")
    if os.path.isdir(PACKAGE_LIBDIR):
        _load_libucx()
        found += [("this package (wheel)", p) for p in _files_in(PACKAGE_LIBDIR)]
    libdir, why = _pkg_config_libdir()
    if libdir:
        found += [("pkg-config libdir", p) for p in _files_in(libdir)]
    else:
        notes.append(why)
    info = shutil.which("weft_info")
    if info:
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(info)))
        for sub in ("lib", "lib64"):
            found += [
                (f"weft_info on PATH ({info})", p) for p in _files_in(os.path.join(prefix, sub))
            ]
    else:
        notes.append("weft_info: not on PATH")
    found += [("default prefix", p) for p in _files_in("/usr/local/lib")]
    found.append(("system loader", SONAME))
    name = ctypes.util.find_library("weft")
    if name and name != SONAME:
        found.append(("ctypes.util.find_library", name))
    elif not name:
        notes.append('ctypes.util.find_library("weft"): nothing')
    return found, notes


def _declare(lib: ctypes.CDLL) -> None:
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def load() -> ctypes.CDLL:
    """The loaded library (loads it on first use)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried: List[str] = []
        found, notes = candidates()
        for where, path in found:
            is_file = os.sep in path
            if is_file and not os.path.exists(path):
                tried.append(f"  {path} ({where}): no such file")
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"  {path} ({where}): {e}")
                continue
            try:
                _declare(lib)
            except AttributeError as e:
                tried.append(f"  {path} ({where}): not a usable libweft: {e}")
                continue
            major, minor, patch = c_int(), c_int(), c_int()
            lib.weft_get_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
            if major.value != API_MAJOR:
                tried.append(
                    f"  {path} ({where}): weft {major.value}.{minor.value}.{patch.value}, "
                    f"this package speaks the {API_MAJOR}.x API"
                )
                continue
            _lib, _path = lib, path
            errors._strerror_hook = lambda code: (lib.weft_strerror(code) or b"").decode(
                "utf-8", "replace"
            )
            return lib
        msg = "could not load libweft (" + SONAME + "). Tried, in order:\n" + "\n".join(tried)
        if notes:
            msg += "\nAlso looked at:\n" + "\n".join("  " + n for n in notes)
        msg += (
            "\nSet WEFT_LIBRARY to the library file or to the directory that holds it "
            "(a build directory works), or install weft (make install) where pkg-config finds weft.pc."
        )
        raise WeftLibraryNotFoundError(msg)


def path() -> Optional[str]:
    """The path or name the library was loaded from (None before it is loaded)."""
    return _path


def last_error() -> str:
    lib = load()
    return (lib.weft_last_error() or b"").decode("utf-8", "replace")


def check(rc: int) -> None:
    """Raises the WeftError subclass for a failing status, with weft_last_error's text."""
    if rc != 0:
        raise errors.make_error(rc, last_error())
