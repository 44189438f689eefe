"""The runtime, communicators and work handles (torchcomms-shaped)."""

from __future__ import annotations

import ctypes
import datetime
import enum
import atexit
import os
import re
import sys
import threading
from ctypes import byref, c_char_p, c_double, c_int, c_int64, c_void_p
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _cuda, _lib
from ._ints import INT64_MAX, c_int_arg
from ._buffers import (
    DTYPE_SIZE,
    Buffer,
    _describe,
    as_buffer,
    check_count,
    device_array,
    label_in,
    same_dtype,
)
from .errors import (
    ERR_ALREADY,
    ERR_PEER_LOST,
    ERR_TIMEOUT,
    WeftArgumentError,
    WeftCommError,
    WeftError,
    WeftNotInitializedError,
    WeftTimeoutError,
    WeftUnsupportedError,
    make_error,
)

ANY_SOURCE = -1
ANY_TAG = -1
TAG_UB = (1 << 23) - 1
UNDEFINED = -32766
_IN_PLACE = c_void_p(1)  # WEFT_IN_PLACE
_TIMEOUT_DEFAULT = -1.0  # WEFT_TIMEOUT_DEFAULT
_TIMEOUT_NONE = 0.0  # WEFT_TIMEOUT_NONE

Timeout = Union[None, float, int, datetime.timedelta]


class ReduceOp(enum.IntEnum):
    """weft_op_t. SUM/PRODUCT/MIN/MAX/AVG on every numeric dtype, BAND/BOR/BXOR on
    integers and bytes; the library rejects other pairings (WeftArgumentError)."""

    SUM = 0
    PRODUCT = 1
    MIN = 2
    MAX = 3
    AVG = 4
    BAND = 5
    BOR = 6
    BXOR = 7


class HintState(enum.IntEnum):
    """What became of a hint (WEFT_HINT_*)."""

    APPLIED = 0
    IGNORED = 1
    REJECTED = 2
    NOT_SET = 3


class HintStatus(NamedTuple):
    """``comm.hint_status(key)``: the hint's state and why."""

    state: HintState
    reason: str


class RecvStatus(NamedTuple):
    """What a receive got: the sender's rank and tag, and the bytes received."""

    source: int
    tag: int
    nbytes: int


class _Runtime:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Bumped by finalize(): handles of an older generation are stale.
        self.generation = 0
        self.world: Optional[Comm] = None
        # Buffers of operations given up on (timed out, dropped while pending):
        # the C side may still touch them, so they are never released.
        self.abandoned: List[Any] = []
        self.exit_hooks = False
        self.uncaught = False  # an uncaught exception is ending the program
        # Stream-ordered collectives on device arrays whose GPU work may still
        # run: their Works (request and buffers) are held here until they
        # complete, whether the caller kept the Work (async_op=True) or not.
        self.inflight: List["Work"] = []
        self.inflight_lock = threading.RLock()
        # init(allgather=...)'s callback, kept alive for weft_finalize.
        self.oob: Any = None


_rt = _Runtime()


def _install_exit_hooks() -> None:
    """weft.finalize() at exit for programs that do not call it (mpirun counts a
    PMIx process that exits unfinalized as failed), except after an uncaught
    exception: finalizing then would wait for ranks that may be waiting for
    this one, so the process exits at once and the launcher ends the job."""
    if _rt.exit_hooks:
        return
    _rt.exit_hooks = True
    previous = sys.excepthook

    def excepthook(*args: Any) -> None:
        _rt.uncaught = True
        previous(*args)

    sys.excepthook = excepthook
    atexit.register(_finalize_at_exit)


def _finalize_at_exit() -> None:
    if _rt.uncaught:
        return
    try:
        finalize()
    except Exception as e:  # the program is ending: report, do not raise
        sys.stderr.write(f"weft: finalize at exit: {e}\n")


def _seconds(timeout: Timeout, what: str) -> float:
    """A Python timeout as the C argument: None -> the communicator's default,
    inf -> no deadline, else seconds > 0."""
    if timeout is None:
        return _TIMEOUT_DEFAULT
    if isinstance(timeout, datetime.timedelta):
        t = timeout.total_seconds()
    else:
        try:
            t = float(timeout)
        except (TypeError, ValueError):
            raise WeftArgumentError(
                f"{what}: timeout {timeout!r} is not a number of seconds"
            ) from None
    if t == float("inf"):
        return _TIMEOUT_NONE
    if not t > 0:
        raise WeftArgumentError(
            f"{what}: timeout {timeout!r} must be > 0 seconds (None: the communicator's default, "
            "float('inf'): no deadline; poll with is_completed())"
        )
    return t


def _op(op: Any, what: str) -> int:
    if not hasattr(op, "__index__"):
        raise WeftArgumentError(f"{what}: op {op!r} is not a weft.ReduceOp")
    return c_int_arg(op, f"{what}: op")


_ANY_SOURCE = {ANY_SOURCE: "weft.ANY_SOURCE"}
_ANY_TAG = {ANY_TAG: "weft.ANY_TAG"}


# --------------------------------------------------------------------------------------------
# Work
# --------------------------------------------------------------------------------------------


class Work:
    """The handle of a nonblocking operation (``async_op=True``, isend, irecv).

    It keeps every buffer of the operation alive until the operation has
    completed. ``wait()`` raises the operation's error, if any; a wait that
    times out raises WeftTimeoutError and leaves the work pending (wait
    again). Dropping a pending Work releases its request (a pending receive
    is canceled, anything else finishes in the background) and keeps its
    buffers alive for good, since the library may still use them.

    A collective on device arrays (stream-ordered) completes when its GPU
    work is done: ``wait()`` blocks the calling thread until then
    (weft_wait), ``is_completed()`` polls it (weft_test); kernels queued
    later on the array's stream see the result without either. Dropping
    such a Work cancels nothing: the package holds it until it completes.
    """

    def __init__(
        self,
        comm: "Comm",
        kind: str,
        keep: Tuple[Any, ...],
        timeout: Timeout = None,
        finish: Optional[Callable[[], None]] = None,
    ):
        # A bad timeout is refused before anything is posted: an operation
        # posted and then dropped would leave this rank out of step.
        _seconds(timeout, kind)
        self._comm = comm
        self._kind = kind
        self._keep: Optional[Tuple[Any, ...]] = keep
        self._timeout = timeout
        self._finish = finish
        self._req = c_void_p()
        self._gen = _rt.generation
        self._done = False
        self._posted = False
        self._error: Optional[BaseException] = None
        self._status: Optional[RecvStatus] = None
        # A stream-ordered collective posted by a blocking call (nobody holds
        # this Work: a failure is raised by the communicator's next device call).
        self._blocking = False
        if _rt.inflight:
            _reap_stream_work()

    def _post(self, fn: Callable[..., int], *args: Any) -> None:
        _lib.check(fn(*args, byref(self._req)))
        self._posted = True

    def _alive(self) -> bool:
        return self._gen == _rt.generation

    def _check_alive(self) -> None:
        if not self._alive():
            raise WeftNotInitializedError(
                f"{self._kind}: this work belongs to a weft runtime that weft.finalize() ended"
            )

    def _complete(self, rc: int, status: _lib.WeftStatus) -> None:
        self._done = True
        self._req = c_void_p()
        if rc != 0:
            self._error = make_error(rc, _lib.last_error())
        else:
            if self._kind == "recv":
                self._status = RecvStatus(status.source, status.tag, int(status.bytes))
            if self._finish is not None:
                try:
                    self._finish()
                except BaseException as e:  # surface copy-out failures at wait()
                    self._error = e
        self._keep = None
        self._finish = None

    def is_completed(self) -> bool:
        """True once the operation has finished (successfully or not); never blocks."""
        if self._done:
            return True
        self._check_alive()
        flag = c_int(0)
        status = _lib.WeftStatus()
        rc = _lib.load().weft_test(byref(self._req), byref(flag), byref(status))
        if flag.value:
            self._complete(rc, status)
            return True
        _lib.check(rc)
        return False

    def wait(self, timeout: Timeout = None) -> bool:
        """Waits for completion and returns True, or raises the operation's error.

        timeout: seconds or a timedelta; None: the timeout given to the call
        that started the work, else the communicator's default. A wait that
        times out raises WeftTimeoutError and the work stays pending.
        """
        if not self._done:
            self._check_alive()
            t = _seconds(timeout if timeout is not None else self._timeout, f"{self._kind}.wait")
            status = _lib.WeftStatus()
            rc = _lib.load().weft_wait_timeout(byref(self._req), t, byref(status))
            if rc != 0 and self._req.value is not None:
                # Timed out (the request stays valid) or the wait itself was refused.
                raise make_error(rc, _lib.last_error())
            self._complete(rc, status)
        if self._error is not None:
            raise self._error
        return True

    @property
    def status(self) -> Optional[RecvStatus]:
        """For a completed receive: its source, tag and byte count (None before)."""
        return self._status

    def _release_pending(self) -> None:
        """Lets go of a pending request: cancels it where the library can (receives,
        collectives) and waits briefly for the cancellation; otherwise (sends) the
        request is released to finish in the background. The buffers stay
        referenced for good unless the request is known to be over."""
        lib = _lib.load()
        over = False
        if lib.weft_request_cancel(byref(self._req)) == 0:
            flag = c_int(0)
            deadline = lib.weft_wtime() + 1.0
            while self._req.value is not None and lib.weft_wtime() < deadline:
                lib.weft_test(byref(self._req), byref(flag), None)  # no error policy here
                if flag.value:
                    over = True
                    break
        if self._req.value is not None:
            lib.weft_request_free(byref(self._req))
        if not over:
            _rt.abandoned.append(self._keep)
        self._keep = None

    def _time_out(self, why: str) -> None:
        """Fails a pending operation whose deadline passed while no wait enforced
        it: the library applies a deadline only inside a wait, and a
        stream-ordered collective on device arrays may never be waited for
        (weft_test never times out). One last short wait (it may still complete;
        otherwise weft's text says what it waits for), then a cancel: coll/cuda
        then sets the abort word, the kernels end, and the communicator's later
        GPU collectives fail at once. The work completes with a WeftTimeoutError
        that starts with ``why``."""
        if self._done or not self._posted:
            return
        if not self._alive() or self._req.value is None:
            self._abandon()
            self._error = make_error(ERR_TIMEOUT, f"{why} (its weft runtime was finalized)")
            return
        lib = _lib.load()
        status = _lib.WeftStatus()
        rc = lib.weft_wait_timeout(byref(self._req), 0.001, byref(status))
        if self._req.value is None:  # it completed after all, or failed on its own
            self._complete(rc, status)
            return
        detail = ""
        if rc == ERR_TIMEOUT:  # what it waits for (not the length of this last look)
            detail = re.sub(r" timed out after \S+ s", "", _lib.last_error(), count=1)
        self._done = True
        self._release_pending()
        # coll/cuda's failure hook names the rank its kernels were waiting for
        stopped = re.search(r"the GPU kernels were waiting for rank \d+[^)]*", _lib.last_error())
        msg = why
        if detail:
            msg += f"; weft: {detail}"
        if stopped:
            msg += f" ({stopped.group(0)})"
        self._error = make_error(ERR_TIMEOUT, msg)

    def _abandon(self) -> None:
        """Gives up on a pending operation (a blocking call timed out)."""
        if self._done or not self._posted:
            return
        self._done = True
        if self._alive() and self._req.value is not None:
            self._release_pending()
        else:
            _rt.abandoned.append(self._keep)
            self._keep = None

    def __del__(self) -> None:
        try:
            if not self._done and self._posted and self._alive() and self._req.value is not None:
                self._done = True
                self._release_pending()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "completed" if self._done else "pending"
        if self._error is not None:
            state = f"failed: {self._error}"
        return f"<weft.Work {self._kind} {state}>"


def _reap_stream_work() -> None:
    """Forgets the stream-ordered works whose GPU work has completed (their
    buffers are let go then). A failed one that a blocking call posted is
    kept on its communicator for its next device collective to raise."""
    with _rt.inflight_lock:
        if not _rt.inflight:
            return
        still: List[Work] = []
        for w in _rt.inflight:
            try:
                done = w.is_completed()
            except Exception as e:  # weft_test refused the request: give it up
                w._abandon()
                if w._error is None:
                    w._error = e
                done = True
            if not done:
                still.append(w)
            elif w._blocking and w._error is not None and w._comm._async_error is None:
                w._comm._async_error = (w._kind, w._error)
        _rt.inflight[:] = still


def _drain_stream_work(comm: Optional["Comm"]) -> None:
    """Waits for the stream-ordered works of ``comm`` (None: of every
    communicator) before it is freed or the runtime finalized; their errors are
    not raised here (a timed-out one is given up)."""
    with _rt.inflight_lock:
        mine = [w for w in _rt.inflight if comm is None or w._comm is comm]
        _rt.inflight[:] = [w for w in _rt.inflight if not (comm is None or w._comm is comm)]
    for w in mine:
        try:
            w.wait()
        except WeftTimeoutError:
            w._abandon()
        except WeftError:
            pass


# --------------------------------------------------------------------------------------------
# Communicators
# --------------------------------------------------------------------------------------------


def _encode(s: Optional[str]) -> Optional[bytes]:
    return None if s is None else str(s).encode("utf-8")


def _hint_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, datetime.timedelta):
        return repr(v.total_seconds())
    return str(v)


class _Options:
    """A weft_options_t for one creation call (WEFT_OPTIONS_NULL when nothing is set)."""

    def __init__(
        self,
        name: Optional[str],
        timeout: Timeout,
        abort_on_error: Optional[bool],
        hints: Optional[Dict[str, Any]],
    ):
        self.handle = c_void_p()
        if name is None and timeout is None and abort_on_error is None and not hints:
            return
        lib = _lib.load()
        _lib.check(lib.weft_options_create(byref(self.handle)))
        try:
            if name is not None:
                _lib.check(lib.weft_options_set_name(self.handle, _encode(name)))
            if timeout is not None:
                _lib.check(lib.weft_options_set_timeout(self.handle, _seconds(timeout, "timeout")))
            if abort_on_error is not None:
                _lib.check(
                    lib.weft_options_set_abort_on_error(self.handle, 1 if abort_on_error else 0)
                )
            for key, value in (hints or {}).items():
                _lib.check(
                    lib.weft_options_set_hint(
                        self.handle, _encode(key), _encode(_hint_value(value))
                    )
                )
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.handle.value is not None:
            _lib.load().weft_options_free(byref(self.handle))

    def __enter__(self) -> c_void_p:
        return self.handle

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _concat(bufs: Sequence[Buffer]) -> ctypes.Array:
    """One contiguous copy of several input buffers (inputs only: never for outputs)."""
    total = sum(b.nbytes for b in bufs)
    tmp = ctypes.create_string_buffer(max(total, 1))
    off = 0
    for b in bufs:
        if b.nbytes:
            ctypes.memmove(ctypes.addressof(tmp) + off, b.addr, b.nbytes)
        off += b.nbytes
    return tmp


class Comm:
    """A communicator: a group of ranks with its own traffic, name, timeout and hints.

    Collectives are called by every member, in the same order. Each operation
    takes ``async_op`` (return a :class:`Work` instead of waiting) and
    ``timeout`` (seconds or timedelta; None: the communicator's default, see
    :attr:`timeout`). Buffers are numpy arrays or anything with the buffer
    protocol; outputs must be writable and C-contiguous and are written in
    place. Point-to-point also takes CUDA device arrays (CuPy, torch,
    ``__cuda_array_interface__``, DLPack), synchronising their producer's
    stream before posting. all_reduce, reduce, broadcast, all_gather_single,
    reduce_scatter_single and all_to_all_single (equal splits) take device
    arrays too (every buffer of the call on the same device), stream-ordered
    as torch.distributed with NCCL: the collective is enqueued on the array's
    stream (the producer's current stream: torch.cuda.current_stream(),
    cupy.cuda.get_current_stream(); a CAI's ``stream``; else the legacy
    default stream) and the call returns without waiting for the GPU, the
    result in place for later work on that stream. ``async_op=True`` returns
    a Work whose ``wait()`` blocks the host until the GPU work is done.
    ``barrier(stream=s)`` is the barrier in ``s``'s order.
    """

    def __init__(self, handle: c_void_p, *, is_world: bool = False):
        lib = _lib.load()
        self._h = c_void_p(handle.value)
        self._gen = _rt.generation
        self._is_world = is_world
        r, s = c_int(), c_int()
        _lib.check(lib.weft_comm_rank(self._h, byref(r)))
        _lib.check(lib.weft_comm_size(self._h, byref(s)))
        self._rank = r.value
        self._size = s.value
        self._name = (lib.weft_comm_name(self._h) or b"").decode("utf-8", "replace")
        # (kind, error) of a blocking stream-ordered collective that failed after
        # its call returned: raised by the next device collective on this comm.
        self._async_error: Optional[Tuple[str, BaseException]] = None

    # ---- identity -----------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """This process's rank in the communicator."""
        return self._rank

    @property
    def size(self) -> int:
        """Number of ranks."""
        return self._size

    @property
    def name(self) -> str:
        """The communicator's name ("world", or as given / derived at creation)."""
        return self._name

    def get_rank(self) -> int:
        return self._rank

    def get_size(self) -> int:
        return self._size

    def get_name(self) -> str:
        return self._name

    def _handle(self) -> c_void_p:
        if self._gen != _rt.generation:
            raise WeftCommError(f"communicator {self._name}: weft.finalize() released it")
        if self._h.value is None:
            raise WeftCommError(f"communicator {self._name} was finalized")
        return self._h

    @property
    def timeout(self) -> float:
        """Default deadline (seconds) of every wait on this communicator (inf: none)."""
        t = c_double()
        _lib.check(_lib.load().weft_comm_get_timeout(self._handle(), byref(t)))
        return float("inf") if t.value == 0 else t.value

    @timeout.setter
    def timeout(self, value: Timeout) -> None:
        if value is None:
            raise WeftArgumentError("timeout: None is not a number of seconds")
        _lib.check(_lib.load().weft_comm_set_timeout(self._handle(), _seconds(value, "timeout")))

    def world_rank(self, rank: int) -> int:
        """The world rank of ``rank`` of this communicator."""
        out = c_int()
        r = c_int_arg(rank, "world_rank: rank", 0)
        _lib.check(_lib.load().weft_comm_world_rank(self._handle(), r, byref(out)))
        return out.value

    def __repr__(self) -> str:
        state = "" if self._h.value is not None and self._gen == _rt.generation else " finalized"
        return f"<weft.Comm {self._name!r} rank {self._rank} of {self._size}{state}>"

    # ---- creation (collective over this communicator) ------------------------------------

    def _new(self, out: c_void_p) -> Optional["Comm"]:
        return Comm(out) if out.value is not None else None

    def split(
        self,
        ranks: Sequence[int],
        name: Optional[str] = None,
        hints: Optional[Dict[str, Any]] = None,
        timeout: Timeout = None,
        abort_process_on_timeout_or_error: Optional[bool] = None,
    ) -> Optional["Comm"]:
        """torchcomms's split. Every rank of this communicator calls it, each
        passing the ranks (of this communicator) of its own new group, in new-rank
        order; a rank that joins no group passes an empty list and gets None.
        A list without the caller, with duplicates or out-of-range ranks, or
        differing between the members of a group raises WeftArgumentError (on
        every rank concerned, within the timeout).
        """
        try:
            lst = [c_int_arg(r, "split: ranks[]", 0) for r in ranks]
        except WeftArgumentError as bad:
            # Still take part, as the library's own checks do, so that the other
            # members fail at once rather than wait: a NULL output joins as invalid.
            self._join_invalid(
                bad, lambda h, o: _lib.load().weft_comm_split_ranks(h, None, 0, None, o, None)
            )
        arr = (c_int * max(len(lst), 1))(*lst)
        out = c_void_p()
        with _Options(None, timeout, abort_process_on_timeout_or_error, hints) as opts:
            _lib.check(
                _lib.load().weft_comm_split_ranks(
                    self._handle(), arr if lst else None, len(lst), _encode(name), opts, byref(out)
                )
            )
        return self._new(out)

    def _join_invalid(
        self, bad: WeftArgumentError, call: Callable[[c_void_p, c_void_p], int]
    ) -> None:
        """A creation call (collective) with an argument refused here: joins the
        library's call as an invalid member (``call(handle, options)`` passes a
        NULL output), so the others get WEFT_ERR_ARG instead of waiting for this
        rank, then raises ``bad``."""
        with _Options(None, None, None, None) as opts:
            call(self._handle(), opts)
        raise bad

    def split_color(
        self,
        color: Optional[int],
        key: int = 0,
        name: Optional[str] = None,
        hints: Optional[Dict[str, Any]] = None,
        timeout: Timeout = None,
        abort_process_on_timeout_or_error: Optional[bool] = None,
    ) -> Optional["Comm"]:
        """MPI's split: ranks with equal ``color`` form a communicator, ordered by
        ``key`` (ties by rank). ``color=None`` joins none and returns None."""
        try:
            c = UNDEFINED if color is None else c_int_arg(
                color, "split_color: color", 0, special={UNDEFINED: "weft's UNDEFINED"}
            )
            k = c_int_arg(key, "split_color: key")
        except WeftArgumentError as bad:
            self._join_invalid(bad, lambda h, o: _lib.load().weft_comm_split(h, 0, 0, o, None))
        out = c_void_p()
        with _Options(name, timeout, abort_process_on_timeout_or_error, hints) as opts:
            _lib.check(_lib.load().weft_comm_split(self._handle(), c, k, opts, byref(out)))
        return self._new(out)

    def split_node(
        self,
        key: int = 0,
        name: Optional[str] = None,
        hints: Optional[Dict[str, Any]] = None,
        timeout: Timeout = None,
        abort_process_on_timeout_or_error: Optional[bool] = None,
    ) -> "Comm":
        """The ranks on this rank's node (host, or simulated node with
        WEFT_RANKS_PER_NODE / WEFT_NODE_ID), ordered by ``key`` then rank."""
        return self._split_type(0, key, name, hints, timeout, abort_process_on_timeout_or_error)

    def _split_type(
        self,
        kind: int,
        key: int,
        name: Optional[str],
        hints: Optional[Dict[str, Any]],
        timeout: Timeout,
        abort: Optional[bool],
    ) -> "Comm":
        try:
            k = c_int_arg(key, "split_node: key")
        except WeftArgumentError as bad:
            self._join_invalid(
                bad, lambda h, o: _lib.load().weft_comm_split_type(h, kind, 0, o, None)
            )
        out = c_void_p()
        with _Options(name, timeout, abort, hints) as opts:
            _lib.check(_lib.load().weft_comm_split_type(self._handle(), kind, k, opts, byref(out)))
        comm = self._new(out)
        assert comm is not None
        return comm

    def dup(
        self,
        name: Optional[str] = None,
        hints: Optional[Dict[str, Any]] = None,
        timeout: Timeout = None,
        abort_process_on_timeout_or_error: Optional[bool] = None,
    ) -> "Comm":
        """Same members and order, a new context (traffic apart from this one's)."""
        out = c_void_p()
        with _Options(name, timeout, abort_process_on_timeout_or_error, hints) as opts:
            _lib.check(_lib.load().weft_comm_dup(self._handle(), opts, byref(out)))
        comm = self._new(out)
        assert comm is not None
        return comm

    # ---- hints and diagnostics ----------------------------------------------------------

    def hint_status(self, key: str) -> HintStatus:
        """Whether hint ``key`` was APPLIED, IGNORED or REJECTED (or NOT_SET), and why."""
        st = c_int()
        reason = ctypes.create_string_buffer(512)
        _lib.check(
            _lib.load().weft_comm_hint_status(
                self._handle(), _encode(key), byref(st), reason, len(reason)
            )
        )
        return HintStatus(HintState(st.value), reason.value.decode("utf-8", "replace"))

    def hints(self) -> Dict[str, Tuple[str, HintStatus]]:
        """Every hint this communicator was given: key -> (value, status)."""
        lib = _lib.load()
        h = self._handle()
        n = c_int()
        _lib.check(lib.weft_comm_hint_count(h, byref(n)))
        out: Dict[str, Tuple[str, HintStatus]] = {}
        for i in range(n.value):
            k, v, r = c_char_p(), c_char_p(), c_char_p()
            st = c_int()
            _lib.check(lib.weft_comm_hint_get(h, i, byref(k), byref(v), byref(st), byref(r)))
            dec = lambda b: (b.value or b"").decode("utf-8", "replace")  # noqa: E731
            out[dec(k)] = (dec(v), HintStatus(HintState(st.value), dec(r)))
        return out

    def peer_info(self, rank: int) -> str:
        """The UCX transports/devices that reach ``rank`` (connects if needed)."""
        buf = ctypes.create_string_buffer(1024)
        _lib.check(
            _lib.load().weft_comm_peer_info(
                self._handle(), c_int_arg(rank, "peer_info: rank", 0), buf, len(buf)
            )
        )
        return buf.value.decode("utf-8", "replace")

    def warmup(self) -> None:
        """Collective: connects every endpoint now, not at the first operation."""
        _lib.check(_lib.load().weft_comm_warmup(self._handle()))

    # ---- surviving a lost rank (ULFM's revoke / shrink / agree) --------------------------

    def revoke(self) -> None:
        """Revokes the communicator on every member: pending and later operations
        on it fail with WeftRevokedError, here at once and on the others as soon
        as the notice arrives. Local (does not wait for the others). Afterwards
        only :meth:`shrink`, :meth:`agree`, queries and :meth:`finalize` work."""
        _lib.check(_lib.load().weft_comm_revoke(self._handle()))

    def is_revoked(self) -> bool:
        """True once the communicator is revoked (here, or a notice arrived)."""
        flag = c_int()
        _lib.check(_lib.load().weft_comm_is_revoked(self._handle(), byref(flag)))
        return bool(flag.value)

    def shrink(self) -> "Comm":
        """Collective over the surviving members (revoked or not): they agree on
        who is alive and each gets the same new communicator of exactly those
        ranks, in this communicator's order, with its options. A member dying
        during the shrink does not make it hang."""
        out = c_void_p()
        _lib.check(_lib.load().weft_comm_shrink(self._handle(), byref(out)))
        comm = self._new(out)
        assert comm is not None
        return comm

    def agree(self, flag: int = 1) -> int:
        """Fault-tolerant agreement: returns the bitwise AND of ``flag`` over the
        members agreed to be alive, the same on every survivor. When members
        were lost, raises WeftPeerLostError whose ``flag`` attribute holds that
        agreed value (also the same everywhere)."""
        f = c_int(c_int_arg(flag, "agree: flag"))
        rc = _lib.load().weft_comm_agree(self._handle(), byref(f))
        if rc == ERR_PEER_LOST:
            e = make_error(rc, _lib.last_error())
            e.flag = f.value  # type: ignore[attr-defined]
            raise e
        _lib.check(rc)
        return f.value

    # ---- life cycle ---------------------------------------------------------------------

    def finalize(self) -> None:
        """Releases the communicator (for the world: finalizes the runtime, as
        weft.finalize()). Fails while operations on it are still pending;
        stream-ordered collectives on device arrays are waited for first."""
        if self._is_world:
            if self._gen == _rt.generation:
                finalize()
            return
        if self._h.value is None or self._gen != _rt.generation:
            return
        _drain_stream_work(self)
        _lib.check(_lib.load().weft_comm_free(byref(self._h)))

    def abort(self, code: int = 1) -> None:
        """Terminates every process of the job (the launcher ends the others)."""
        _lib.check(_lib.load().weft_comm_abort(self._handle(), c_int_arg(code, "abort: code")))

    def __enter__(self) -> "Comm":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.finalize()

    def __del__(self) -> None:
        try:
            if not self._is_world and self._h.value is not None and self._gen == _rt.generation:
                _lib.load().weft_comm_free(byref(self._h))
        except Exception:
            pass

    # ---- helpers ------------------------------------------------------------------------

    def _run(self, work: Work, async_op: bool) -> Optional[Work]:
        if async_op:
            return work
        try:
            work.wait()
        except WeftTimeoutError:
            work._abandon()
            raise
        return None

    def _root(self, root: Any, what: str) -> int:
        return c_int_arg(root, f"{what}: root", 0)

    # ---- stream-ordered collectives on device arrays ----------------------------------------

    def _reap(self, op: str) -> None:
        """Forgets completed stream-ordered work; raises (once) the failure of an
        earlier blocking one on this communicator, found after its call returned."""
        _reap_stream_work()
        failed, self._async_error = self._async_error, None
        if failed is not None:
            kind, e = failed
            code = getattr(e, "code", None)
            if not isinstance(e, WeftError) or code is None:
                raise e
            raise make_error(
                code,
                f"{op}: not started: the stream-ordered {kind} called earlier on communicator "
                f"{self._name} failed after its call returned: {e.detail}",
            ) from e

    def _device_buffers(
        self, op: str, specs: Sequence[Tuple[str, Any, bool]]
    ) -> Optional[Tuple[List[Buffer], int]]:
        """The buffers of a stream-ordered collective and the CUstream it goes on
        (0: the legacy default stream), or None when no argument is a device
        array (the host path). specs: (label, object, written?) per argument.

        The stream is the first device array's: its framework's current stream
        (torch, CuPy), else the stream its CUDA Array Interface names, else the
        legacy default stream. DLPack producers order their pending work before
        it (``__dlpack__(stream=...)``); a CAI naming another stream, or none
        (v2), is synchronised first.
        """
        found = [(label, obj, out, device_array(obj, label)) for label, obj, out in specs]
        dev = [f for f in found if f[3] is not None]
        if not dev:
            return None
        host = [f for f in found if f[3] is None and f[1] is not None]
        if host:
            d_names = " and ".join(label_in(op, f[0]) for f in dev)
            h_names = " and ".join(label_in(op, f[0]) for f in host)
            d_what = ", ".join(f"{_describe(f[1])}, {f[3].how}" for f in dev)
            h_what = ", ".join(_describe(f[1]) for f in host)
            d_is = "is a CUDA device array" if len(dev) == 1 else "are CUDA device arrays"
            h_is = "is" if len(host) == 1 else "are"
            raise WeftUnsupportedError(
                f"{op}: {d_names} {d_is} ({d_what}) but {h_names} {h_is} host memory ({h_what}); "
                "the buffers of one collective are all device arrays or all host memory: copy one "
                "side first"
            )
        devices = sorted({f[3].device for f in dev if f[3].device is not None})
        if len(devices) > 1:
            where = ", ".join(f"{label_in(op, f[0])} on device {f[3].device}" for f in dev)
            raise WeftUnsupportedError(
                f"{op}: the device arrays are on different devices ({where}); one collective "
                "works on the arrays of one device"
            )
        self._reap(op)
        stream = next((f[3].stream for f in dev if f[3].stream is not None), 0)
        bufs = [
            as_buffer(obj, label, output=out, device=True, on_stream=stream)
            for label, obj, out, _ in dev
        ]
        return bufs, stream

    def _buffers(
        self, op: str, specs: Sequence[Tuple[str, Any, bool]]
    ) -> Tuple[List[Buffer], Optional[int]]:
        """The buffers of a collective that takes device arrays, one per spec
        ((label, object, written?), in order), and the CUstream it goes on
        (_device_buffers), or None for the stream when no argument is a device
        array: host buffers, the host path."""
        dev = self._device_buffers(op, specs)
        if dev is not None:
            return dev
        return [as_buffer(obj, label, output=out) for label, obj, out in specs], None

    def _start(
        self,
        kind: str,
        keep: Tuple[Any, ...],
        stream: Optional[int],
        async_op: bool,
        timeout: Timeout,
        host_fn: Callable[..., int],
        stream_fn: Callable[..., int],
        *args: Any,
    ) -> Optional[Work]:
        """Posts a collective with the buffers and stream of _buffers: host memory
        (stream None) through host_fn (weft_i*), run as _run does; device arrays
        enqueued on the stream through stream_fn (weft_*_on_stream, the same
        arguments and the stream), as _post_on_stream does."""
        if stream is not None:
            return self._post_on_stream(kind, keep, stream, async_op, timeout, stream_fn, *args)
        w = Work(self, kind, keep, timeout)
        w._post(host_fn, *args)
        return self._run(w, async_op)

    def _post_on_stream(
        self,
        kind: str,
        keep: Tuple[Any, ...],
        stream: int,
        async_op: bool,
        timeout: Timeout,
        fn: Callable[..., int],
        *args: Any,
    ) -> Optional[Work]:
        """Enqueues a weft_*_on_stream call on ``stream`` and returns at once: the
        Work (async_op) or None. Either way the Work is held until its GPU work
        completes, so the buffers outlive it."""
        w = Work(self, kind, keep, timeout)
        w._blocking = not async_op
        w._post(fn, *args, stream or None)
        with _rt.inflight_lock:
            _rt.inflight.append(w)
        return w if async_op else None

    # ---- point-to-point -----------------------------------------------------------------

    def send(
        self, tensor: Any, dst: int, tag: int = 0, async_op: bool = False, timeout: Timeout = None
    ) -> Optional[Work]:
        """Sends ``tensor`` to rank ``dst`` (messages between a pair arrive in order)."""
        b = as_buffer(tensor, "send: tensor", output=False, device=True)
        w = Work(self, "send", (b,), timeout)
        w._post(
            _lib.load().weft_isend,
            b.ptr,
            b.count,
            b.dtype,
            c_int_arg(dst, "send: dst", 0),
            c_int_arg(tag, "send: tag", 0),
            self._handle(),
        )
        return self._run(w, async_op)

    def recv(
        self,
        tensor: Any,
        src: Optional[int] = None,
        tag: Optional[int] = 0,
        async_op: bool = False,
        timeout: Timeout = None,
    ) -> Union[RecvStatus, Work]:
        """Receives into ``tensor`` from ``src`` (None: any source) with ``tag``
        (None: any tag). Returns a RecvStatus (or a Work whose ``status`` tells
        after completion). A longer message raises WeftTruncateError."""
        b = as_buffer(tensor, "recv: tensor", output=True, device=True)
        w = Work(self, "recv", (b,), timeout)
        w._post(
            _lib.load().weft_irecv,
            b.ptr,
            b.count,
            b.dtype,
            ANY_SOURCE if src is None else c_int_arg(src, "recv: src", 0, special=_ANY_SOURCE),
            ANY_TAG if tag is None else c_int_arg(tag, "recv: tag", 0, special=_ANY_TAG),
            self._handle(),
        )
        if async_op:
            return w
        self._run(w, False)
        assert w.status is not None
        return w.status

    def isend(self, tensor: Any, dst: int, tag: int = 0, timeout: Timeout = None) -> Work:
        """Nonblocking send: ``send(..., async_op=True)``."""
        w = self.send(tensor, dst, tag, True, timeout)
        assert w is not None
        return w

    def irecv(
        self,
        tensor: Any,
        src: Optional[int] = None,
        tag: Optional[int] = 0,
        timeout: Timeout = None,
    ) -> Work:
        """Nonblocking receive: ``recv(..., async_op=True)``."""
        w = self.recv(tensor, src, tag, True, timeout)
        assert isinstance(w, Work)
        return w

    # ---- collectives --------------------------------------------------------------------

    def barrier(
        self, async_op: bool = False, timeout: Timeout = None, stream: Any = None
    ) -> Optional[Work]:
        """Returns once every member has entered the barrier.

        stream: a CUDA stream (torch.cuda.Stream, cupy.cuda.Stream, an object
        with ``__cuda_stream__``, or a CUstream handle as an int; 0: the legacy
        default stream): weft_barrier_on_stream, the barrier in that stream's
        order (with the CUDA driver loaded, a barrier kernel queued behind the
        stream's work so far; otherwise the stream is synchronised, then the
        host barrier). async_op=False waits on the host, as the host barrier
        and torch.distributed.barrier do, until this rank's barrier has
        completed: every member's stream reached it. async_op=True returns a
        Work at once; later work on ``stream`` runs after the barrier, and the
        package holds the Work until it completes."""
        if stream is None:
            w = Work(self, "barrier", (), timeout)
            w._post(_lib.load().weft_ibarrier, self._handle())
            return self._run(w, async_op)
        h = _cuda.stream_handle(stream, "barrier: stream")
        self._reap("barrier")
        if async_op:
            return self._post_on_stream(
                "barrier",
                (stream,),
                h,
                True,
                timeout,
                _lib.load().weft_barrier_on_stream,
                self._handle(),
            )
        w = Work(self, "barrier", (stream,), timeout)
        w._post(_lib.load().weft_barrier_on_stream, self._handle(), h or None)
        return self._run(w, False)

    def all_reduce(
        self, tensor: Any, op: Any = ReduceOp.SUM, async_op: bool = False, timeout: Timeout = None
    ) -> Optional[Work]:
        """Reduces ``tensor`` over all ranks, in place: every rank gets the result.
        A device array: enqueued on its stream (see the class), no host wait."""
        (b,), stream = self._buffers("all_reduce", [("all_reduce: tensor", tensor, True)])
        lib = _lib.load()
        return self._start(
            "all_reduce",
            (b,),
            stream,
            async_op,
            timeout,
            lib.weft_iallreduce,
            lib.weft_allreduce_on_stream,
            _IN_PLACE,
            b.ptr,
            b.count,
            b.dtype,
            _op(op, "all_reduce"),
            self._handle(),
        )

    def reduce(
        self,
        tensor: Any,
        root: int,
        op: Any = ReduceOp.SUM,
        async_op: bool = False,
        timeout: Timeout = None,
    ) -> Optional[Work]:
        """Reduces ``tensor`` over all ranks into ``root``'s ``tensor`` (in place);
        the other ranks' tensors are only read. A device array: stream-ordered."""
        root = self._root(root, "reduce")
        is_root = root == self._rank
        (b,), stream = self._buffers("reduce", [("reduce: tensor", tensor, is_root)])
        lib = _lib.load()
        return self._start(
            "reduce",
            (b,),
            stream,
            async_op,
            timeout,
            lib.weft_ireduce,
            lib.weft_reduce_on_stream,
            _IN_PLACE if is_root else b.ptr,
            b.ptr if is_root else None,
            b.count,
            b.dtype,
            _op(op, "reduce"),
            root,
            self._handle(),
        )

    def broadcast(
        self, tensor: Any, root: int, async_op: bool = False, timeout: Timeout = None
    ) -> Optional[Work]:
        """Copies ``root``'s ``tensor`` into every other rank's ``tensor``. A device
        array: stream-ordered."""
        root = self._root(root, "broadcast")
        (b,), stream = self._buffers(
            "broadcast", [("broadcast: tensor", tensor, root != self._rank)]
        )
        lib = _lib.load()
        return self._start(
            "broadcast",
            (b,),
            stream,
            async_op,
            timeout,
            lib.weft_ibcast,
            lib.weft_bcast_on_stream,
            b.ptr,
            b.count,
            b.dtype,
            root,
            self._handle(),
        )

    def all_gather(
        self,
        tensor_list: Sequence[Any],
        tensor: Any,
        async_op: bool = False,
        timeout: Timeout = None,
    ) -> Optional[Work]:
        """Gathers every rank's ``tensor`` into ``tensor_list`` (one buffer per rank,
        each written directly). Host memory only: all_gather_single takes
        device arrays."""
        inp = as_buffer(tensor, "all_gather: tensor", output=False)
        outs = self._out_list(tensor_list, "all_gather: tensor_list", inp)
        ptrs = (c_void_p * self._size)(*[o.ptr for o in outs])
        w = Work(self, "all_gather", (inp, outs, ptrs), timeout)
        w._post(
            _lib.load().weft_iallgather_list, inp.ptr, ptrs, inp.count, inp.dtype, self._handle()
        )
        return self._run(w, async_op)

    def all_gather_single(
        self, output: Any, input: Any, async_op: bool = False, timeout: Timeout = None
    ) -> Optional[Work]:
        """Gathers every rank's ``input`` into ``output`` (size x input elements, rank
        order). Device arrays: stream-ordered."""
        (inp, out), stream = self._buffers(
            "all_gather_single",
            [
                ("all_gather_single: input", input, False),
                ("all_gather_single: output", output, True),
            ],
        )
        dt = same_dtype(inp, out)
        check_count(out, inp.count * self._size, f"{self._size} ranks x {inp.count}")
        lib = _lib.load()
        return self._start(
            "all_gather_single",
            (inp, out),
            stream,
            async_op,
            timeout,
            lib.weft_iallgather,
            lib.weft_allgather_on_stream,
            inp.ptr,
            out.ptr,
            inp.count,
            dt,
            self._handle(),
        )

    def reduce_scatter(
        self,
        output: Any,
        input_list: Sequence[Any],
        op: Any = ReduceOp.SUM,
        async_op: bool = False,
        timeout: Timeout = None,
    ) -> Optional[Work]:
        """Reduces ``input_list[r]`` over all ranks into rank r's ``output``.
        (The inputs are copied into one contiguous vector first.) Host memory
        only: reduce_scatter_single takes device arrays."""
        out = as_buffer(output, "reduce_scatter: output", output=True)
        ins = self._in_list(input_list, "reduce_scatter: input_list", out)
        tmp = _concat(ins)
        w = Work(self, "reduce_scatter", (out, ins, tmp), timeout)
        w._post(
            _lib.load().weft_ireduce_scatter_block,
            ctypes.addressof(tmp),
            out.ptr,
            out.count,
            out.dtype,
            _op(op, "reduce_scatter"),
            self._handle(),
        )
        return self._run(w, async_op)

    def reduce_scatter_single(
        self,
        output: Any,
        input: Any,
        op: Any = ReduceOp.SUM,
        async_op: bool = False,
        timeout: Timeout = None,
    ) -> Optional[Work]:
        """Reduces ``input`` (size x output elements) over all ranks; rank r gets block r.
        Device arrays: stream-ordered."""
        (inp, out), stream = self._buffers(
            "reduce_scatter_single",
            [
                ("reduce_scatter_single: input", input, False),
                ("reduce_scatter_single: output", output, True),
            ],
        )
        dt = same_dtype(out, inp)
        check_count(inp, out.count * self._size, f"{self._size} ranks x output's {out.count}")
        lib = _lib.load()
        return self._start(
            "reduce_scatter_single",
            (inp, out),
            stream,
            async_op,
            timeout,
            lib.weft_ireduce_scatter_block,
            lib.weft_reduce_scatter_block_on_stream,
            inp.ptr,
            out.ptr,
            out.count,
            dt,
            _op(op, "reduce_scatter_single"),
            self._handle(),
        )

    def all_to_all_single(
        self,
        output: Any,
        input: Any,
        output_split_sizes: Optional[Sequence[int]] = None,
        input_split_sizes: Optional[Sequence[int]] = None,
        async_op: bool = False,
        timeout: Timeout = None,
    ) -> Optional[Work]:
        """Rank r's block i of ``input`` goes to rank i's block r of ``output``.

        Without split sizes the blocks are equal (input and output hold the
        same count, a multiple of size). With them (torch semantics), the sizes
        count rows along dimension 0: ``input_split_sizes[i]`` rows go to rank
        i, ``output_split_sizes[i]`` rows come from rank i; a None side splits
        its rows equally. Device arrays (stream-ordered) take equal blocks only:
        no split sizes, or split sizes that are all equal.
        """
        (inp, out), stream = self._buffers(
            "all_to_all_single",
            [
                ("all_to_all_single: input", input, False),
                ("all_to_all_single: output", output, True),
            ],
        )
        dt = same_dtype(inp, out)
        n = self._size
        lib = _lib.load()
        if output_split_sizes is None and input_split_sizes is None:
            check_count(out, inp.count, "the same count as input")
            if inp.count % n:
                raise WeftArgumentError(
                    f"all_to_all_single: input: {inp.count} elements do not split into {n} "
                    "equal blocks" + ("; pass split sizes" if stream is None else "")
                )
            block = inp.count // n
        else:
            sc, sd = self._splits(inp, input_split_sizes, "input_split_sizes")
            rc, rd = self._splits(out, output_split_sizes, "output_split_sizes")
            if stream is None:  # host memory: any splits (all-to-all-v)
                w = Work(self, "all_to_all_single", (inp, out, sc, sd, rc, rd), timeout)
                w._post(lib.weft_ialltoallv, inp.ptr, sc, sd, out.ptr, rc, rd, dt, self._handle())
                return self._run(w, async_op)
            if len(set(sc)) > 1 or list(sc) != list(rc):
                raise WeftUnsupportedError(
                    f"all_to_all_single: device arrays take equal blocks only (the GPU "
                    f"collectives have no all-to-all-v): {list(sc)} elements to send, "
                    f"{list(rc)} to receive per rank; use host arrays for unequal splits"
                )
            block = sc[0] if n else 0
        return self._start(
            "all_to_all_single",
            (inp, out),
            stream,
            async_op,
            timeout,
            lib.weft_ialltoall,
            lib.weft_alltoall_on_stream,
            inp.ptr,
            out.ptr,
            block,
            dt,
            self._handle(),
        )

    def gather(
        self,
        output: Any,
        input: Any,
        root: int,
        async_op: bool = False,
        timeout: Timeout = None,
    ) -> Optional[Work]:
        """Gathers every rank's ``input`` at ``root``: ``output`` is a list of size
        buffers or one buffer of size x input elements (only used at the root;
        pass None elsewhere). A list is filled from a staging buffer on completion."""
        root = self._root(root, "gather")
        inp = as_buffer(input, "gather: input", output=False)
        lib = _lib.load()
        keep: List[Any] = [inp]
        finish = None
        recv: Optional[int] = None
        if root == self._rank:
            if isinstance(output, (list, tuple)):
                outs = self._out_list(output, "gather: output", inp)
                tmp = ctypes.create_string_buffer(max(inp.nbytes * self._size, 1))
                keep += [outs, tmp]
                recv = staging = ctypes.addressof(tmp)

                def finish() -> None:
                    for r, o in enumerate(outs):
                        if o.nbytes:
                            ctypes.memmove(o.addr, staging + r * inp.nbytes, o.nbytes)

            else:
                out = as_buffer(output, "gather: output", output=True)
                same_dtype(inp, out)
                check_count(out, inp.count * self._size, f"{self._size} ranks x {inp.count}")
                keep.append(out)
                recv = out.ptr
        w = Work(self, "gather", tuple(keep), timeout, finish)
        w._post(lib.weft_igather, inp.ptr, recv, inp.count, inp.dtype, root, self._handle())
        return self._run(w, async_op)

    def scatter(
        self,
        output: Any,
        input: Any,
        root: int,
        async_op: bool = False,
        timeout: Timeout = None,
    ) -> Optional[Work]:
        """Sends block r of ``root``'s ``input`` to rank r's ``output``. ``input``
        is a list of size buffers or one buffer of size x output elements (only
        read at the root; pass None elsewhere)."""
        root = self._root(root, "scatter")
        out = as_buffer(output, "scatter: output", output=True)
        keep: List[Any] = [out]
        send: Optional[int] = None
        if root == self._rank:
            if isinstance(input, (list, tuple)):
                ins = self._in_list(input, "scatter: input", out)
                tmp = _concat(ins)
                keep += [ins, tmp]
                send = ctypes.addressof(tmp)
            else:
                inp = as_buffer(input, "scatter: input", output=False)
                same_dtype(out, inp)
                check_count(inp, out.count * self._size, f"{self._size} ranks x {out.count}")
                keep.append(inp)
                send = inp.ptr
        w = Work(self, "scatter", tuple(keep), timeout)
        w._post(
            _lib.load().weft_iscatter, send, out.ptr, out.count, out.dtype, root, self._handle()
        )
        return self._run(w, async_op)

    # ---- argument helpers ---------------------------------------------------------------

    def _out_list(self, lst: Sequence[Any], what: str, like: Buffer) -> List[Buffer]:
        if not isinstance(lst, (list, tuple)) or len(lst) != self._size:
            got = len(lst) if isinstance(lst, (list, tuple)) else type(lst).__name__
            raise WeftArgumentError(f"{what}: needs a list of {self._size} buffers (got {got})")
        outs = [as_buffer(t, f"{what}[{i}]", output=True) for i, t in enumerate(lst)]
        for o in outs:
            same_dtype(like, o)
            check_count(o, like.count, "the input's count")
        return outs

    def _in_list(self, lst: Sequence[Any], what: str, like: Buffer) -> List[Buffer]:
        if not isinstance(lst, (list, tuple)) or len(lst) != self._size:
            got = len(lst) if isinstance(lst, (list, tuple)) else type(lst).__name__
            raise WeftArgumentError(f"{what}: needs a list of {self._size} buffers (got {got})")
        ins = [as_buffer(t, f"{what}[{i}]", output=False) for i, t in enumerate(lst)]
        for b in ins:
            same_dtype(like, b)
            check_count(b, like.count, "the output's count")
        return ins

    def _splits(
        self, buf: Buffer, sizes: Optional[Sequence[int]], what: str
    ) -> Tuple[ctypes.Array, ctypes.Array]:
        n = self._size
        rows, per_row = buf.rows()
        if sizes is None:
            if rows % n:
                raise WeftArgumentError(
                    f"{buf.what}: {rows} rows do not split into {n} equal parts; pass {what}"
                )
            split = [rows // n] * n
        else:
            split = [c_int_arg(s, f"all_to_all_single: {what}[]", 0, INT64_MAX) for s in sizes]
            if len(split) != n:
                raise WeftArgumentError(
                    f"all_to_all_single: {what}: {len(split)} sizes for {n} ranks"
                )
            if any(s < 0 for s in split):
                raise WeftArgumentError(f"all_to_all_single: {what}: negative size in {split}")
            if sum(split) != rows:
                raise WeftArgumentError(
                    f"all_to_all_single: {what} add up to {sum(split)} rows but "
                    f"{label_in('all_to_all_single', buf.what)} has {rows} (along dimension 0)"
                )
        counts = (c_int64 * n)(*[s * per_row for s in split])
        displs = (c_int64 * n)()
        off = 0
        for i in range(n):
            displs[i] = off
            off += counts[i]
        return counts, displs


# --------------------------------------------------------------------------------------------
# The runtime
# --------------------------------------------------------------------------------------------


def is_initialized() -> bool:
    """True between init() and finalize()."""
    lib = _lib.load()
    flag = c_int(0)
    _lib.check(lib.weft_initialized(byref(flag)))
    return bool(flag.value)


# weft_oob_allgather_fn: int (*)(const void *send, void *recv, size_t len, void *ctx).
_OOB_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, ctypes.c_size_t, c_void_p)


def init(
    rank: Optional[int] = None,
    size: Optional[int] = None,
    allgather: Optional[Callable[[bytes], Sequence[bytes]]] = None,
) -> Comm:
    """Initialises weft (once; later calls return the same world) and returns the
    world communicator. The bootstrap is chosen by the library: PMIx under
    mpirun / srun, RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (weftrun,
    torchrun), else a singleton. WEFT_* variables configure it.

    With ``rank``, ``size`` and ``allgather`` the ranks find each other through
    the caller's own exchange instead (weft_init_oob): ``allgather(data)`` is
    called by every rank alike (at init, and at finalize for its closing
    barrier) with this rank's bytes and returns every rank's, in rank order
    (all of one length): an MPI allgather, a key-value store. The callable is
    kept until finalize; an exception in it fails weft's call.

    A program that does not call finalize() is finalized at exit, unless it
    ends with an uncaught exception (then it exits at once, and the launcher
    ends the other ranks)."""
    with _rt.lock:
        lib = _lib.load()
        if _rt.world is not None and is_initialized():
            return _rt.world
        if not is_initialized():
            if allgather is not None:
                r = c_int_arg(rank, "init: rank", 0)
                n = c_int_arg(size, "init: size", 1)
                cb = _oob_callback(allgather, r, n)
                rc = lib.weft_init_oob(r, n, cb, None)
                if rc == 0:
                    _rt.oob = cb  # called again by weft_finalize's closing barrier
            else:
                rc = lib.weft_init(None, None)
            if rc != ERR_ALREADY:
                _lib.check(rc)
            # weftrun's socket for rank 0's store is taken: a job this process starts gets no stale number
            os.environ.pop("WEFT_STORE_FD", None)
        _rt.world = Comm(c_void_p(lib.weft_comm_world()), is_world=True)
        _install_exit_hooks()
        return _rt.world


def _oob_callback(allgather: Callable[[bytes], Sequence[bytes]], rank: int, size: int) -> Any:
    def call(send: Optional[int], recv: Optional[int], length: int, ctx: Any) -> int:
        try:
            mine = ctypes.string_at(send, length) if length else b""
            every = list(allgather(mine))
            if len(every) != size or any(len(b) != length for b in every):
                raise ValueError(
                    f"allgather returned {len(every)} items of lengths "
                    f"{sorted({len(b) for b in every})} for {size} ranks of {length} bytes"
                )
            if length:
                ctypes.memmove(recv, b"".join(every), length * size)
            return 0
        except BaseException as e:  # noqa: BLE001 (nothing may cross back into C)
            sys.stderr.write(f"weft: rank {rank}: the init allgather failed: {e!r}\n")
            return 1

    return _OOB_FN(call)


def world() -> Comm:
    """The world communicator (WeftNotInitializedError before init())."""
    if _rt.world is None or not is_initialized():
        raise WeftNotInitializedError("weft.world(): call weft.init() first")
    return _rt.world


def finalize() -> None:
    """Completes outstanding work (stream-ordered collectives on device arrays
    are waited for first), synchronises with the other ranks and releases
    everything; communicators and pending work become invalid. Does nothing
    when weft is not initialized. weft.init() may be called again."""
    with _rt.lock:
        if _lib.path() is None or not is_initialized():
            return
        _drain_stream_work(None)
        rc = _lib.load().weft_finalize()
        _rt.generation += 1
        _rt.oob = None
        _rt.world = None
        _lib.check(rc)


def new_comm(
    name: Optional[str] = None,
    timeout: Timeout = None,
    abort_process_on_timeout_or_error: Optional[bool] = None,
    hints: Optional[Dict[str, Any]] = None,
) -> Comm:
    """A new communicator over every rank (initialising weft if needed), with its
    own name, default timeout (seconds or timedelta), abort-on-error flag and
    string hints (see Comm.hint_status). Collective: every rank calls it."""
    w = init()
    return w.dup(name, hints, timeout, abort_process_on_timeout_or_error)
