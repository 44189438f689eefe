"""Exceptions raised by the weft package.

Every failure of a weft call raises a :class:`WeftError` subclass chosen by the
C status code. The exception carries the status (``code``), its name
(``status_name``), ``weft_strerror``'s text (``strerror``) and the library's
message saying what exactly went wrong (``detail``: which argument, which rank,
how long it waited). Checks the package makes itself before calling C (a short
output buffer, a dtype mismatch) raise the same classes with the same fields.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Type

# Status codes of include/weft.h (fixed values).
SUCCESS = 0
ERR_ARG = -1
ERR_NO_MEMORY = -2
ERR_TIMEOUT = -3
ERR_PEER_LOST = -4
ERR_TRUNCATE = -5
ERR_UNSUPPORTED = -6
ERR_NOT_INITIALIZED = -7
ERR_BOOTSTRAP = -8
ERR_TRANSPORT = -9
ERR_CANCELED = -10
ERR_INTERNAL = -11
ERR_ALREADY = -12
ERR_COMM = -13
ERR_REVOKED = -14

STATUS_NAMES: Dict[int, str] = {
    SUCCESS: "WEFT_SUCCESS",
    ERR_ARG: "WEFT_ERR_ARG",
    ERR_NO_MEMORY: "WEFT_ERR_NO_MEMORY",
    ERR_TIMEOUT: "WEFT_ERR_TIMEOUT",
    ERR_PEER_LOST: "WEFT_ERR_PEER_LOST",
    ERR_TRUNCATE: "WEFT_ERR_TRUNCATE",
    ERR_UNSUPPORTED: "WEFT_ERR_UNSUPPORTED",
    ERR_NOT_INITIALIZED: "WEFT_ERR_NOT_INITIALIZED",
    ERR_BOOTSTRAP: "WEFT_ERR_BOOTSTRAP",
    ERR_TRANSPORT: "WEFT_ERR_TRANSPORT",
    ERR_CANCELED: "WEFT_ERR_CANCELED",
    ERR_INTERNAL: "WEFT_ERR_INTERNAL",
    ERR_ALREADY: "WEFT_ERR_ALREADY",
    ERR_COMM: "WEFT_ERR_COMM",
    ERR_REVOKED: "WEFT_ERR_REVOKED",
}

# weft_strerror's texts, used only when the library cannot be asked (it is
# not loaded yet); the library's own answer wins otherwise.
_FALLBACK_STRERROR: Dict[int, str] = {
    SUCCESS: "success",
    ERR_ARG: "invalid argument",
    ERR_NO_MEMORY: "out of memory",
    ERR_TIMEOUT: "timed out",
    ERR_PEER_LOST: "peer lost",
    ERR_TRUNCATE: "message truncated",
    ERR_UNSUPPORTED: "not supported",
    ERR_NOT_INITIALIZED: "not initialized",
    ERR_BOOTSTRAP: "bootstrap failed",
    ERR_TRANSPORT: "transport error",
    ERR_CANCELED: "canceled",
    ERR_INTERNAL: "internal error",
    ERR_ALREADY: "already done",
    ERR_COMM: "invalid communicator",
    ERR_REVOKED: "communicator revoked",
}


class WeftError(Exception):
    """Base class of every weft failure.

    Attributes:
        code: the C status (negative), or None when no C status applies
            (the library could not be loaded).
        status_name: the status's name in weft.h, e.g. ``"WEFT_ERR_TIMEOUT"``.
        strerror: ``weft_strerror(code)``.
        detail: the library's last error message (``weft_last_error()``), or
            the package's own message for checks made before calling C.
    """

    code: Optional[int]

    def __init__(
        self, detail: str = "", code: Optional[int] = None, strerror: Optional[str] = None
    ):
        if code is None:
            code = getattr(type(self), "default_code", None)
        if strerror is None and code is not None:
            strerror = _strerror(code)
        name = STATUS_NAMES.get(code, "unknown status") if code is not None else ""
        if code is None:
            message = detail
        else:
            message = f"{strerror} ({name} = {code})" + (f": {detail}" if detail else "")
        super().__init__(message)
        # Set after Exception.__init__: OSError subclasses (TimeoutError) reset strerror there.
        self.code = code
        self.status_name = name
        self.strerror = strerror or ""
        self.detail = detail


class WeftArgumentError(WeftError, ValueError):
    """WEFT_ERR_ARG: a bad argument (buffer, dtype, count, rank, op...)."""

    default_code = ERR_ARG


class WeftNoMemoryError(WeftError, MemoryError):
    """WEFT_ERR_NO_MEMORY: an allocation failed."""

    default_code = ERR_NO_MEMORY


class WeftTimeoutError(WeftError, TimeoutError):  # type: ignore[misc]  # strerror: str
    """WEFT_ERR_TIMEOUT: a deadline passed (the message names the peer and tag)."""

    default_code = ERR_TIMEOUT


class WeftPeerLostError(WeftError):
    """WEFT_ERR_PEER_LOST: a peer process died or its connection failed."""

    default_code = ERR_PEER_LOST


class WeftTruncateError(WeftError):
    """WEFT_ERR_TRUNCATE: a message was longer than the receive buffer."""

    default_code = ERR_TRUNCATE


class WeftUnsupportedError(WeftError, NotImplementedError):
    """WEFT_ERR_UNSUPPORTED: not available in this build or for this case."""

    default_code = ERR_UNSUPPORTED


class WeftNotInitializedError(WeftError):
    """WEFT_ERR_NOT_INITIALIZED: called before weft.init() or after weft.finalize()."""

    default_code = ERR_NOT_INITIALIZED


class WeftBootstrapError(WeftError):
    """WEFT_ERR_BOOTSTRAP: the ranks could not find each other."""

    default_code = ERR_BOOTSTRAP


class WeftTransportError(WeftError):
    """WEFT_ERR_TRANSPORT: UCX reported an error."""

    default_code = ERR_TRANSPORT


class WeftCanceledError(WeftError):
    """WEFT_ERR_CANCELED: the request was canceled."""

    default_code = ERR_CANCELED


class WeftInternalError(WeftError):
    """WEFT_ERR_INTERNAL: a bug in weft (please report it)."""

    default_code = ERR_INTERNAL


class WeftAlreadyError(WeftError):
    """WEFT_ERR_ALREADY: already initialized / already done."""

    default_code = ERR_ALREADY


class WeftCommError(WeftError):
    """WEFT_ERR_COMM: an invalid or freed communicator."""

    default_code = ERR_COMM


class WeftRevokedError(WeftError):
    """WEFT_ERR_REVOKED: the communicator was revoked (``Comm.revoke()``, here or
    by another member): shrink it, or free it."""

    default_code = ERR_REVOKED


class WeftLibraryNotFoundError(WeftError, OSError):  # type: ignore[misc]
    """libweft.so could not be loaded; the message lists every place tried."""

    default_code = None


class WeftCudaError(WeftError, RuntimeError):
    """A CUDA driver call the package made for a device array failed (e.g. the
    stream synchronisation before posting reported an earlier kernel's fault).
    ``code`` is None; ``cuda_status`` is the CUresult."""

    default_code = None

    def __init__(self, detail: str = "", cuda_status: int = 0):
        super().__init__(detail)
        self.cuda_status = cuda_status


_CLASSES: Dict[int, Type[WeftError]] = {
    ERR_ARG: WeftArgumentError,
    ERR_NO_MEMORY: WeftNoMemoryError,
    ERR_TIMEOUT: WeftTimeoutError,
    ERR_PEER_LOST: WeftPeerLostError,
    ERR_TRUNCATE: WeftTruncateError,
    ERR_UNSUPPORTED: WeftUnsupportedError,
    ERR_NOT_INITIALIZED: WeftNotInitializedError,
    ERR_BOOTSTRAP: WeftBootstrapError,
    ERR_TRANSPORT: WeftTransportError,
    ERR_CANCELED: WeftCanceledError,
    ERR_INTERNAL: WeftInternalError,
    ERR_ALREADY: WeftAlreadyError,
    ERR_COMM: WeftCommError,
    ERR_REVOKED: WeftRevokedError,
}

# Set by weft._lib once the library is loaded: int -> weft_strerror text.
_strerror_hook: Optional[Callable[[int], str]] = None


def _strerror(code: int) -> str:
    if _strerror_hook is not None:
        try:
            return _strerror_hook(code)
        except Exception:  # the library is gone (interpreter shutdown)
            pass
    return _FALLBACK_STRERROR.get(code, "unknown status")


def error_class(code: int) -> Type[WeftError]:
    """The exception class raised for C status ``code``."""
    return _CLASSES.get(code, WeftError)


def make_error(code: int, detail: str = "") -> WeftError:
    """An exception instance of the right class for C status ``code``."""
    return error_class(code)(detail, code=code)
