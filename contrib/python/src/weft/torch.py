"""weft as a torch.distributed backend, in pure Python (``import weft.torch``).

Importing this module registers the backend ``"weft"`` with torch.distributed::

    import torch.distributed as dist
    import weft.torch  # noqa: F401  (registers "weft")

    dist.init_process_group(backend="weft")            # under torchrun, weftrun, mpirun
    dist.init_process_group(backend="weft",
                            device_id=torch.device("cuda", local_rank % torch.cuda.device_count()))
    dist.init_process_group(backend="cpu:gloo,cuda:weft")

``import weft`` never imports this module (the package works without torch).

What it is
    :class:`ProcessGroupWeft` is a ``torch.distributed.ProcessGroup`` subclass
    (torch 2.x has no Python-constructible ``Backend``; Python backends are
    ProcessGroups, as in torch's test_c10d_pypg.py). Each group owns one weft
    communicator: the default group a ``dup`` of weft's world (bootstrapped
    from torchrun's variables / TCPStore, weftrun, PMIx), every ``new_group``
    a ``split`` of it by rank list, named after torch's group name, with the
    group's ``timeout=`` as the communicator's timeout. Without a launcher's
    variables (torch's own tests: ``init_method="file://..."`` with ``rank=``
    and ``world_size=``) weft's world is bootstrapped over the default group's
    store (``weft.init(rank, size, allgather)``), as gloo's is.

    Because torch calls a backend's creator on the members of a new group
    only, while weft's split is collective over the parent, this module wraps
    ``torch.distributed.distributed_c10d._new_process_group_helper``: a rank
    that is not a member of a new weft group joins the split with an empty
    list. ``new_group(..., use_local_synchronization=True)`` is therefore not
    supported with weft (the non-members never call new_group).

split_group
    ``torch.distributed.split_group(parent_pg, split_ranks, ...)`` and
    ``ProcessGroup.split_group(ranks, ...)`` are weft's split of the parent
    group's communicator by rank list (ranks of the parent group, in
    ascending order), named ``torch:<group name>``; every rank of the parent
    calls it, a rank outside every list gets None. torch's split_group needs
    a device bound to the default group (``init_process_group(...,
    device_id=torch.device("cuda", i))``). A weft group acts as its own
    torch ``Backend`` for the devices it serves (``_get_backend``), with
    ``supports_splitting`` True; ``new_group`` with a bound device keeps
    splitting weft's world by rank list, as without one.

Device maps
    torch returns a Python ProcessGroup as the whole group (it cannot be
    registered per device beside a C++ backend). With a map such as
    ``"cpu:gloo,cuda:weft"`` the group is this ProcessGroup, and it forwards
    the tensors of the devices the map gives to gloo (or nccl:
    ``"cpu:weft,cuda:nccl"``) to a ProcessGroupGloo (ProcessGroupNCCL) of its
    own, created on the group's store, so the map is honoured: CUDA tensors
    go to weft only where the map gives cuda to weft. Other backends in a map
    with weft are refused at creation.

Tensors
    CPU and CUDA tensors of every dtype weft has (int8..int64, uint8,
    float16/32/64, bfloat16; bool as uint8 with SUM->MAX, PRODUCT->MIN;
    complex as its float pairs). Non-contiguous tensors go through a
    contiguous copy (on the tensor's device) that is copied back, as gloo
    does. Nothing is ever copied to the host.

CUDA tensors
    Collectives are stream-ordered, as with NCCL: enqueued on
    ``torch.cuda.current_stream(tensor.device)`` through weft's
    ``weft_*_on_stream`` GPU collectives (coll/cuda: the ranks of one node),
    returning without waiting for the GPU. all_reduce, reduce, broadcast,
    all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single with
    equal splits (and their coalesced forms) are one weft call each. The
    others are composed from those, on the same stream, with device-to-device
    copies only:

    * all_gather (list): all_gather_into_tensor into a flat buffer, copied
      out to the list (every tensor the input's size);
    * reduce_scatter (list): the inputs concatenated, reduce_scatter_tensor;
    * gather: an all_gather (each rank receives every block; the root
      keeps them);
    * scatter: a broadcast of the root's concatenated inputs, each rank
      keeping its block;
    * all_to_all (list) and all_to_all_single with uneven splits: one host
      all_reduce (MAX) of the largest and smallest split over the group
      (sizes only: the host learns them, no data), then one all-to-all of
      blocks padded to the largest split, copied out.

    Reductions on CUDA tensors take SUM, PRODUCT, MIN, MAX, AVG (weft's
    GPU kernels; float16/bfloat16 accumulate in float32, left to right in
    rank order, rounded once) and PREMUL_SUM; BAND/BOR/BXOR raise
    WeftUnsupportedError (use CPU tensors, or "cpu:weft,cuda:nccl").

    barrier with a CUDA device (``init_process_group(device_id=...)``,
    ``barrier(device_ids=[i])``) is weft's barrier on the current stream,
    and its wait blocks the host until every member's stream reached it (as
    NCCL's barrier). send / recv /
    isend / irecv of CUDA tensors are weft's point-to-point on device memory
    (UCX moves it): not stream-ordered but CUDA-aware-MPI style: posting
    synchronises the tensor's current stream, and ``wait()`` blocks the
    host until the transfer is done.

    A stream-ordered operation's deadline is its group's timeout (or the
    call's ``timeout``), counted from when it was posted. libweft enforces
    a deadline only inside a wait, and nobody waits for stream-ordered work
    on the host, so this backend enforces it: a watchdog thread (started
    with the first stream-ordered operation) looks every 50 ms at the
    operations past their deadline and gives up those still running (weft
    then sets the abort word their kernels watch: the kernels end, the
    stream goes on, and the group's later GPU collectives fail at once,
    naming the rank the kernels waited for). A polled Work
    (``is_completed()``, ``wait()``) does the same. Without it a peer that
    never comes would hang the stream, and every host synchronisation with
    it (``torch.cuda.synchronize()``), for good. A failure found after the
    call returned is raised by ``wait()`` (``is_completed()`` then says
    True and ``exception()`` holds it) and by the group's next CUDA
    collective. On a group that spans nodes all_gather runs coll/hier's GPU
    path and all_reduce coll/hier's with its node steps in GPU kernels; the
    others (and what the kernels lack) run on the host through copies:
    staged on the stream where weft's progress thread runs (the call
    returns at once), otherwise returning when done.

As gloo
    ``all_gather_coalesced``; sparse COO ``all_reduce`` (SUM: indices and
    values gathered, coalesced, written into the tensor; the call waits);
    tensors that require grad (exported detached: DLPack refuses them
    otherwise); ``dist.recv(t)`` without a source (``Work._source_rank()``);
    timeouts saying " Timed out " and what was awaited; and
    ``group.monitored_barrier(timeout, wait_all_ranks)`` with gloo's
    behaviour and messages (torch's ``dist.monitored_barrier()`` refuses
    every backend but gloo before it calls the group).

Reductions
    SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR map to weft's ops (weft
    decides which dtype pairings are valid; its message is raised).
    PREMUL_SUM (``torch.distributed._make_nccl_premul_sum(factor)``, which
    FSDP uses) is SUM over inputs multiplied by the factor first, on their
    device (the factor from the ReduceOp's ``__getstate__``), as NCCL's:
    floating-point tensors only; an in-place result tensor is scaled in
    place, pure inputs (reduce_scatter's, reduce's off the root) through a
    scaled copy.

Work objects
    Every operation is posted nonblocking; the returned :class:`WeftWork`
    has ``wait(timeout)``, ``is_completed()``, ``get_future()``,
    ``exception()``, ``result()``. ``async_op=False`` callers get the same
    Work, waited on by torch.distributed. Errors are ``WeftDistError`` (a
    ``torch.distributed.DistBackendError``) carrying weft's text (peer lost,
    the rank a timeout waited for); timeouts are ``WeftDistTimeoutError``
    (also a ``TimeoutError``).

    CPU (and CUDA point-to-point, barrier): ``wait()`` blocks the host; the
    deadline is the group's timeout from when the operation was posted
    (``wait(timeout)`` sets its own). With weft's progress thread on
    (``WEFT_PROGRESS_THREAD``, auto where a CPU is spare) the operation
    completes by itself: ``get_future()`` returns at once and the Future
    completes, its ``then()`` callbacks run, and its waiters wake, from one
    thread of this module woken by the library (``weft_request_on_complete``),
    so DDP's communication hooks overlap backward; a Work nobody waits for
    fails at its deadline all the same. A Work whose Future nobody asked for
    is waited for as without the thread (below): the hand-over through that
    thread would cost more than the wait. Without the thread ``get_future()``
    waits for the operation before returning its Future (completed), so DDP's
    CPU communication does not overlap backward (correct, slower).

    Stream-ordered CUDA collectives: ``wait()`` makes the caller's current
    stream wait for the operation (a CUDA event recorded after it) and
    returns without blocking the host (it raises a failure already known);
    ``is_completed()`` polls the GPU work; ``get_future()`` returns a
    CUDA-aware Future (``devices=[device]``) completed with the outputs in
    stream order: its ``wait()`` / ``value()`` / ``then()`` callbacks run
    after the operation, as NCCL's Future, so DDP overlaps backward.

Threads (the decision)
    libweft is built ``threads=funneled``: one thread at a time may call into
    it (MPI's SERIALIZED). DDP and FSDP call collectives from hook threads
    while the main thread may too, and ctypes releases the GIL in every
    call. So this backend serialises every weft call with one process-wide
    lock (``_LOCK``), and never holds it across an unbounded wait. The wait
    for a Work whose Future was asked for (progress thread on) holds no lock:
    it sleeps until the completion thread (see Work objects) says the
    operation is done, so threads posting meanwhile take the lock for their
    calls only. Any other wait is a loop of short ``weft_wait_timeout`` slices (at most
    ``_SLICE`` seconds each) taken under the lock, released in between (with
    a yield when another thread is waiting to post), until the operation
    completes or its deadline passes. A blocking call thus cannot deadlock against a
    nonblocking one posted from another thread: the poster gets the lock
    within one slice. The watchdog of stream-ordered work takes the same
    lock for its calls. Making weft THREAD_MULTIPLE is the other option in
    issue 23; it needs C changes and is left to the library.

Warm-up
    ``WEFT_TORCH_WARMUP=1`` (or ``ProcessGroupWeft.Options(warmup=True)`` /
    ``weft.torch.set_warmup(True)``) runs ``Comm.warmup()`` (every endpoint
    connected) and a one-element allreduce on each new group at creation.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import functools
import os
import re
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as _c10d

from . import _comm as _weft_comm
from ._comm import Comm, ReduceOp, Work, init as _weft_init
from .errors import WeftArgumentError, WeftError, WeftTimeoutError, WeftUnsupportedError

__all__ = [
    "BACKEND_NAME",
    "ProcessGroupWeft",
    "WeftDistError",
    "WeftDistTimeoutError",
    "WeftWork",
    "set_warmup",
]

BACKEND_NAME = "weft"

# One lock around every call into libweft made by this backend (threads=funneled).
_LOCK = threading.Lock()
# Threads waiting to take _LOCK to post an operation (a waiter yields to them).
_posters = 0
_posters_lock = threading.Lock()
# Longest time one wait slice holds _LOCK (seconds).
_SLICE = 0.01
_warmup_default: Optional[bool] = None
_INF = float("inf")
# weft's "... timed out after 0.01 s ..." (the length of one wait): left out where a
# message says the whole wait's own length.
_TIMED_OUT_AFTER = re.compile(r" timed out after \S+ s")


def set_warmup(enabled: bool) -> None:
    """Warm up every weft group created from now on (overrides WEFT_TORCH_WARMUP)."""
    global _warmup_default
    _warmup_default = bool(enabled)


def _warmup_enabled(opt: Optional[bool]) -> bool:
    if opt is not None:
        return bool(opt)
    if _warmup_default is not None:
        return _warmup_default
    return os.environ.get("WEFT_TORCH_WARMUP", "0").strip().lower() in ("1", "true", "yes", "on")


class WeftDistError(dist.DistBackendError):
    """A weft operation failed; the message carries weft's text."""


class WeftDistTimeoutError(WeftDistError, TimeoutError):
    """A weft operation did not complete within its deadline."""


class _Posting:
    """Context: take _LOCK to post, telling waiters to yield."""

    def __enter__(self) -> None:
        global _posters
        with _posters_lock:
            _posters += 1
        _LOCK.acquire()
        with _posters_lock:
            _posters -= 1

    def __exit__(self, *exc: Any) -> None:
        _LOCK.release()


def _seconds(t: Any) -> Optional[float]:
    """A torch timeout (timedelta, ms) as seconds; None for unset/none (<= 0)."""
    if t is None:
        return None
    if isinstance(t, datetime.timedelta):
        s = t.total_seconds()
    else:
        s = float(t)
    return s if s > 0 else None


# --------------------------------------------------------------------------------------------
# CUDA helpers (torch.cuda is touched only for CUDA tensors)
# --------------------------------------------------------------------------------------------

# Per device: a stream that CUDA-aware Futures record their events on (it waits for the
# operation's event first, so the Future completes with the operation, not with whatever
# was queued on the caller's stream after it).
_future_streams: Dict[int, Any] = {}
_future_streams_lock = threading.Lock()


def _future_stream(device: torch.device) -> Any:
    with _future_streams_lock:
        s = _future_streams.get(device.index)
        if s is None:
            s = _future_streams[device.index] = torch.cuda.Stream(device=device)
        return s


def _device_of(tensors: Sequence[Optional[torch.Tensor]], what: str) -> Optional[torch.device]:
    """The CUDA device of a call's tensors, or None when they are CPU tensors.
    WeftUnsupportedError for CPU and CUDA tensors mixed, two CUDA devices, or
    another device type."""
    devs = {t.device for t in tensors if t is not None}
    types = {d.type for d in devs}
    other = types - {"cpu", "cuda"}
    if other:
        raise WeftUnsupportedError(
            f"weft {what}: {', '.join(sorted(other))} tensors are not supported by the weft torch "
            "backend (CPU and CUDA tensors are)"
        )
    if len(types) > 1:
        raise WeftUnsupportedError(
            f"weft {what}: CPU and CUDA tensors in one call ({', '.join(sorted(map(str, devs)))}); "
            "the tensors of one collective are all on the CPU or all on one CUDA device. Nothing "
            "was copied: move them yourself"
        )
    if "cuda" not in types:
        return None
    if len(devs) > 1:
        raise WeftUnsupportedError(
            f"weft {what}: tensors on several CUDA devices ({', '.join(sorted(map(str, devs)))}); "
            "one call takes the tensors of one device"
        )
    d = next(iter(devs))
    return d if d.index is not None else torch.device("cuda", torch.cuda.current_device())


def _as_weft(t: torch.Tensor) -> torch.Tensor:
    """A view of ``t`` in a dtype weft has (complex: its float pairs, bool: uint8);
    the same memory, contiguous or not. Detached: DLPack refuses to export a
    tensor that requires grad, and a collective is no autograd operation."""
    t = t.detach()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype is torch.bool:
        t = t.view(torch.uint8)
    return t


# --------------------------------------------------------------------------------------------
# Work
# --------------------------------------------------------------------------------------------


class WeftWork(dist._Work):
    """The Work of one weft operation (or of a few posted together).

    Host-waited (CPU tensors; CUDA point-to-point and barrier): ``wait()``
    blocks until the operation is done. Stream-ordered (CUDA collectives,
    ``event`` set): ``wait()`` makes the caller's current stream wait for
    ``event`` (recorded after the operation on its stream) and returns."""

    def __init__(
        self,
        pg: "ProcessGroupWeft",
        kind: str,
        works: Sequence[Work],
        outputs: Any,
        finish: Optional[Callable[[], None]] = None,
        timeout: Optional[float] = None,
        device: Optional[torch.device] = None,
        event: Optional[Any] = None,
        notify: bool = False,
    ):
        super().__init__()
        self._pg_name = pg._desc()
        self._kind = kind
        self._works = list(works)
        self._outputs = outputs
        self._finish = finish
        self._timeout = timeout if timeout is not None else pg._timeout_s
        self._posted_at = time.monotonic()
        self._done = False
        self._error: Optional[BaseException] = None
        self._future: Optional[torch.futures.Future] = None
        self._state_lock = threading.Lock()
        self._device = device  # the CUDA device of the tensors (None: CPU)
        self._event = event  # stream-ordered: the operation's end on its stream
        # Stream-ordered: when the watchdog (or a poll) gives the operation up.
        self._deadline = (
            self._posted_at + self._timeout
            if event is not None and self._timeout is not None
            else _INF
        )
        self._stream_key: Any = None  # stream-ordered: (device, CUDA stream handle)
        # Host-waited work the completion thread settles (weft's progress thread
        # completes it): waiters sleep on _done_event; the Future is completed
        # by _fire, outside _state_lock, once.
        self._notify = notify
        self._done_event = threading.Event()
        self._fire_lock = threading.Lock()
        self._future_set = False

    # -- completion ---------------------------------------------------------------------

    def _settle(self, error: Optional[BaseException]) -> None:
        if self._done:
            return
        if error is None and self._finish is not None:
            try:
                self._finish()
            except BaseException as e:  # copy-back failed
                error = WeftDistError(f"weft {self._kind} on {self._pg_name}: {e}")
        self._finish = None
        self._error = error
        self._done = True
        if self._notify:
            return  # the Future and the waiters: _fire, outside _state_lock
        fut = self._future
        if fut is not None and not fut.done():
            if error is None:
                fut.set_result(self._outputs)
            else:
                fut.set_exception(error)

    def _wrap(self, e: WeftError) -> WeftDistError:
        if isinstance(e, WeftTimeoutError):
            # "Timed out" as torch's own backends say it (users' retry logic and
            # torch's tests match on it), then weft's text: what was awaited.
            err: WeftDistError = WeftDistTimeoutError(
                f"weft {self._kind} on {self._pg_name}: Timed out: {e}"
            )
        else:
            err = WeftDistError(f"weft {self._kind} on {self._pg_name} failed: {e}")
        err.__cause__ = e
        return err

    def _poll(self) -> bool:
        """One nonblocking look at every sub-work; True when all are done. A
        stream-ordered operation past its deadline is given up here (_expire)."""
        for w in self._works:
            try:
                with _Posting():
                    done = w.is_completed()
            except WeftError as e:
                self._settle(self._wrap(e))
                return True
            if not done:
                if (
                    self._event is not None
                    and time.monotonic() >= self._deadline
                    and not _waits_behind(self)
                ):
                    self._expire()
                    return True
                return False
        try:
            for w in self._works:
                w.wait()  # completed: raises its error, if any, without calling C
        except WeftError as e:
            self._settle(self._wrap(e))
            return True
        self._settle(None)
        return True

    def _expire(self) -> None:
        """A stream-ordered operation still running at its deadline (posted + the
        group's timeout): weft gives it up (Work._time_out: its kernels are stopped
        through the abort word, and the group's later GPU collectives fail at
        once), and this Work fails with WeftDistTimeoutError. Only a wait enforces
        a deadline inside the library, and nobody waits for stream-ordered work on
        the host: without this a peer that never comes hangs the stream (and every
        host synchronisation with it) for good."""
        why = (
            f"the stream-ordered {self._kind} did not complete within {self._timeout:g} s of "
            "being posted (the group's timeout); weft stopped its GPU kernels, and the group's "
            "later GPU collectives fail"
        )
        with _Posting():
            for w in self._works:
                try:
                    w._time_out(why)
                except WeftError as e:  # the runtime is gone: nothing left to stop
                    if w._error is None:
                        w._error = e
                    w._done = True
        error = next((w._error for w in self._works if w._error is not None), None)
        if error is None:
            self._settle(None)  # it completed during the last look
        elif isinstance(error, WeftError):
            self._settle(self._wrap(error))
        else:
            self._settle(error)

    def _finished(self) -> bool:
        """Settled, or every sub-work known complete (no C call, no lock)."""
        return self._done or all(w._done for w in self._works)

    # -- completed by weft's progress thread (notify) ------------------------------------

    def _fire(self) -> None:
        """A settled notify Work: completes its Future once (its then() callbacks run
        here, with no lock of this module held) and wakes its waiters."""
        with self._fire_lock:
            fut = None
            if self._future is not None and not self._future_set:
                fut, self._future_set = self._future, True
        if fut is not None and not fut.done():
            if self._error is None:
                fut.set_result(self._outputs)
            else:
                fut.set_exception(self._error)
        self._done_event.set()

    def _host_deadline(self) -> float:
        return self._posted_at + self._timeout if self._timeout is not None else _INF

    def _time_out_host(self, limit: float, what: str) -> None:
        """A host-waited operation still pending at its deadline: weft's text says
        what it waits for (one last short wait), then it is given up, so a later
        operation on the group does not match it; _state_lock held."""
        detail = ""
        with _Posting():
            for x in self._works:
                if x._done:
                    continue
                try:
                    x.wait(timeout=0.001)
                except WeftTimeoutError as e:
                    detail = e.detail if getattr(e, "detail", None) else str(e)
                except WeftError:
                    pass
                break
        if all(x._done for x in self._works):  # it ended during that last look
            self._poll()
            return
        msg = (
            f"weft {self._kind} on {self._pg_name}: Timed out after {limit:g} s waiting for the "
            f"{self._kind} to complete ({what})"
        )
        if detail:
            msg += "; weft: " + _TIMED_OUT_AFTER.sub("", detail, count=1)
        with _Posting():
            for x in self._works:
                x._abandon()
        self._settle(WeftDistTimeoutError(msg))

    def _notified(self, now: float) -> bool:
        """The completion thread's look: settles the Work if it is done, or gives it
        up at its deadline (nobody need wait for it). False, without a look, while a
        waiter holds the Work (a sliced wait settles it itself)."""
        if not self._state_lock.acquire(blocking=False):
            return False
        try:
            if not self._done:
                self._poll()
            if not self._done and now >= self._host_deadline():
                self._time_out_host(self._timeout, "the group's timeout; nothing waited for it")
        finally:
            self._state_lock.release()
        if self._done and self._notify:
            self._fire()
        return True

    def _wait_notified(self, deadline: float, limit: float) -> None:
        """wait() of a notify Work: sleeps until the completion thread settles it,
        holding no lock; every _NOTIFY_LOOK seconds without news it looks itself (one
        weft_test: progress, should the library's thread be unable to run). First, while
        no other thread waits to post and no other wait does the same, it looks for
        itself for up to _NOTIFY_SPIN: a short operation then ends without crossing two
        threads. (One such wait at a time: more, on as many cores, would only contend
        for the GIL and the lock, and delay the posts and the completion thread.)"""
        global _spinning
        with _posters_lock:
            spin = not _spinning
            _spinning += spin
        if spin:
            try:
                spin_until = time.monotonic() + _NOTIFY_SPIN
                while not self._done and not _posters and time.monotonic() < spin_until:
                    with self._state_lock:
                        if not self._done:
                            self._poll()
            finally:
                with _posters_lock:
                    _spinning -= 1
        while not self._done_event.is_set() and not self._done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                with self._state_lock:
                    if not self._done:
                        self._poll()
                    if not self._done:
                        self._time_out_host(limit, "the group's timeout, or wait(timeout)")
                break
            if self._done_event.wait(min(remaining, _NOTIFY_LOOK)):
                break
            with self._state_lock:
                if not self._done:
                    self._poll()
            if self._done:
                break
        self._fire()

    def _look(self) -> None:
        """The watchdog's poll (past the deadline, it gives the operation up)."""
        with self._state_lock:
            if not self._done:
                self._poll()

    def is_completed(self) -> bool:
        with self._state_lock:
            if not self._done:
                self._poll()
        if not self._done:
            return False
        if self._notify:
            self._fire()
        if self._error is None and self._event is not None:
            return bool(self._event.query())  # the copies queued after it, too
        return True

    def is_success(self) -> bool:
        return self.is_completed() and self._error is None

    def _source_rank(self) -> int:
        """The rank (in the group) a completed receive came from: torch's
        ``dist.recv(t)`` without a source asks it (``Work.sourceRank()``)."""
        if self._kind != "recv":
            raise ValueError(f"weft {self._kind}: source_rank() is for the Work of a receive only")
        status = self._works[0].status if self._works else None
        if status is None:
            raise ValueError("weft recv: source_rank() before the receive completed (wait() first)")
        return int(status.source)

    def source_rank(self) -> int:  # torch's older name
        return self._source_rank()

    def exception(self) -> Optional[BaseException]:
        return self._error

    def result(self) -> Any:
        self.wait()
        return self._outputs

    def wait(self, timeout: Any = None) -> bool:
        """Host-waited work: waits until the operation is done and returns True, or
        raises its error. timeout: seconds or a timedelta from now (0 / None /
        negative: the group's timeout, counted from when the operation was posted).

        Stream-ordered work (CUDA collectives): makes the current stream wait for
        the operation and returns True at once (raising a failure already known);
        the deadline is the group's timeout from posting, enforced by the
        watchdog (see the module's notes)."""
        if self._event is not None:
            with self._state_lock:
                if not self._done:
                    self._poll()
            if self._error is not None:
                raise self._error
            torch.cuda.current_stream(self._device).wait_event(self._event)
            return True
        t = _seconds(timeout)
        if t is not None:
            deadline, limit = time.monotonic() + t, t
        elif self._timeout is not None:
            deadline, limit = self._posted_at + self._timeout, self._timeout
        else:
            deadline, limit = _INF, _INF
        # Which way is decided under _state_lock: get_future() makes a Work a notify
        # one under it (a sliced wait holds it throughout, so the way cannot change).
        with self._state_lock:
            notify = self._notify
            if not notify and not self._done:
                self._wait_until(deadline, limit)
        if notify:
            self._wait_notified(deadline, limit)
        if self._error is not None:
            raise self._error
        return True

    def _wait_until(self, deadline: float, limit: float) -> None:
        last_detail = ""
        for w in self._works:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    msg = (
                        f"weft {self._kind} on {self._pg_name}: Timed out after {limit:g} s "
                        f"waiting for the {self._kind} to complete (the group's timeout, or "
                        "wait(timeout))"
                    )
                    if last_detail:
                        # weft's text says what the operation waits for; its "timed out
                        # after" is the last wait slice's length (_SLICE), not the wait's.
                        msg += "; weft: " + _TIMED_OUT_AFTER.sub("", last_detail, count=1)
                    # The operation stays pending in weft: give it up so a later
                    # operation on the group does not match it.
                    with _Posting():
                        for x in self._works:
                            x._abandon()
                    self._settle(WeftDistTimeoutError(msg))
                    return
                with _LOCK:
                    try:
                        w.wait(timeout=min(_SLICE, remaining))
                        break
                    except WeftTimeoutError as e:
                        last_detail = e.detail if getattr(e, "detail", None) else str(e)
                    except WeftError as e:
                        self._settle(self._wrap(e))
                        return
                if _posters:
                    time.sleep(0)  # let a poster take the lock
        self._settle(None)

    def _new_future(self) -> torch.futures.Future:
        if self._device is not None:
            return torch.futures.Future(devices=[self._device])
        return torch.futures.Future()

    def get_future(self) -> torch.futures.Future:
        """A Future completed with the output tensors. Host-waited work: with weft's
        progress thread on, returned at once and completed by the completion thread;
        without it, the operation is waited for first (see the module's notes); while
        another thread waits for the Work, after that wait. Stream-ordered work: a
        CUDA-aware Future completed at once, in stream order (its events follow
        the operation's), or failed with an error already known."""
        if self._event is not None:
            with self._state_lock:
                if self._future is None:
                    if not self._done:
                        self._poll()
                    fut = self._new_future()
                    if self._error is not None:
                        fut.set_exception(self._error)
                    else:
                        side = _future_stream(self._device)
                        side.wait_event(self._event)
                        with torch.cuda.stream(side):
                            fut.set_result(self._outputs)
                    self._future = fut
            return self._future
        with self._state_lock:
            if self._future is None:
                self._future = self._new_future()
            if not self._done and not self._notify:
                # weft's progress thread on: from now on the completion thread completes
                # this Work (and its Future) with nobody waiting.
                with _Posting():
                    self._notify = _completions.watch(self._works)
            notify = self._notify
            if self._done and not notify:
                self._complete_future()
        if notify:
            if self._done:
                self._fire()
            else:
                # a notice that came while this held the Work (the completion thread
                # left it then): the thread looks again now
                _completions._poke()
            return self._future
        if not self._done:
            try:
                self.wait()
            except BaseException:
                pass  # set on the future by _settle
        return self._future

    def _complete_future(self) -> None:
        assert self._future is not None
        if self._future.done():
            return
        if self._error is None:
            self._future.set_result(self._outputs)
        else:
            self._future.set_exception(self._error)


# --------------------------------------------------------------------------------------------
# Host-waited work completed by weft's progress thread
# --------------------------------------------------------------------------------------------

# Seconds a notify wait sleeps before it looks for itself, and between the completion
# thread's looks at deadlines (and at its pending Works, should a notice be lost).
_NOTIFY_LOOK = 0.05
# Seconds a notify wait first polls for itself (while nobody waits to post).
_NOTIFY_SPIN = 0.0005
# Seconds until the completion thread looks again at a Work it found held by a waiter.
_NOTIFY_BUSY = 0.001
# Notify waits polling for themselves now (at most one; under _posters_lock).
_spinning = 0


class _Completions:
    """Host-waited Works while weft's progress thread runs. Each is listed here when
    posted; once its Future is asked for (get_future(), as DDP does), each of its
    requests calls ``weft_notify_fd`` on a descriptor of this module when it
    completes (on the library's thread, no Python involved). One daemon thread here
    sleeps on that descriptor (or _NOTIFY_LOOK), looks at the listed Works (a
    ``weft_test`` each under _LOCK, never a blocking call; a Work a waiter holds is
    left to it), settles those that are done (their Future's then() callbacks run
    on it, as NCCL's on its own thread) and wakes their waiters; a Work past its
    deadline that nobody waits for is given up here. A Work only waited for is
    waited in slices by its waiter: a notice through this thread would cost two
    more hand-overs of the GIL per operation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: List[WeftWork] = []
        self._rfd = -1
        self._wfd = -1
        self._fn: Any = None
        self._thread: Optional[threading.Thread] = None
        self._stop = False
        self._gen = -1
        self._on = False

    def active(self) -> bool:
        """Whether weft's progress thread runs (asked once per weft runtime); called
        with _LOCK held."""
        import ctypes

        from . import _lib as _weft_lib

        if self._stop:
            return False
        gen = _weft_comm._rt.generation
        if gen != self._gen:
            flag = ctypes.c_int(0)
            lib = _weft_lib.load()
            self._on = lib.weft_progress_thread_active(ctypes.byref(flag)) == 0 and flag.value == 1
            self._gen = gen
        return self._on

    def track(self, work: WeftWork) -> None:
        """Lists a host-waited Work (weft's progress thread on): given up at its
        deadline should nobody wait for it; no notice asked (a wait slices)."""
        from . import _lib as _weft_lib

        with self._lock:
            if self._thread is None:
                self._start(_weft_lib.load())
            self._pending.append(work)

    def watch(self, works: Sequence[Work]) -> bool:
        """Asks weft to say when each of works completes (its Future was asked for);
        called with _LOCK held, for a tracked Work. False when weft's progress thread
        does not run (nothing completes without a weft call then)."""
        import ctypes

        from . import _lib as _weft_lib

        if not works or not self.active() or self._thread is None:
            return False
        lib = _weft_lib.load()
        arg = ctypes.c_void_p(self._wfd)
        for w in works:
            if w._req.value is None:
                continue
            if lib.weft_request_on_complete(w._req, self._fn, arg) != 0:
                return False  # (callbacks already given only poke the thread)
        return True

    def _poke(self) -> None:
        try:
            os.write(self._wfd, (1).to_bytes(8, sys.byteorder))
        except OSError:
            pass  # full: the thread is being woken anyway

    def _start(self, lib: Any) -> None:
        import ctypes

        if hasattr(os, "eventfd"):
            self._rfd = self._wfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        else:  # Python < 3.10: a pipe (weft writes 8 bytes a notice; never blocks)
            self._rfd, self._wfd = os.pipe()
            os.set_blocking(self._rfd, False)
            os.set_blocking(self._wfd, False)
        self._fn = ctypes.cast(lib.weft_notify_fd, ctypes.c_void_p)
        self._thread = threading.Thread(
            target=self._main, name="weft-torch-completions", daemon=True
        )
        self._thread.start()
        atexit.register(self._at_exit)  # after weft's exit hook: runs before it

    def _main(self) -> None:
        import select

        reported = False
        look = _NOTIFY_LOOK
        while not self._stop:
            try:
                select.select([self._rfd], [], [], look)
                try:
                    os.read(self._rfd, 4096)
                except (BlockingIOError, InterruptedError):
                    pass
                with self._lock:
                    pending = list(self._pending)
                now = time.monotonic()
                look = _NOTIFY_LOOK
                for w in pending:
                    if not w._notified(now) and w._notify:
                        look = _NOTIFY_BUSY  # its waiter held it: a notice may have been missed
                with self._lock:  # a notify Work stays until it has fired
                    self._pending = [
                        w for w in self._pending if not w._done or (w._notify and not w._done_event.is_set())
                    ]
            except Exception as e:  # noqa: BLE001 (a thread must not die: say it once, go on)
                if not reported:
                    reported = True
                    sys.stderr.write(
                        f"weft.torch: the completion thread: {type(e).__name__}: {e}\n"
                    )

    def _at_exit(self) -> None:
        self._stop = True
        self._poke()
        if self._thread is not None:
            self._thread.join(timeout=5)


_completions = _Completions()


# --------------------------------------------------------------------------------------------
# The watchdog of stream-ordered CUDA work: deadlines when nobody waits
# --------------------------------------------------------------------------------------------

# Stream-ordered Works, in posting order, until they are known complete.
_watched: List[WeftWork] = []
_watched_lock = threading.Lock()
_watchdog: Optional[threading.Thread] = None
_watchdog_stop = threading.Event()
_watchdog_ended = False  # stopped at exit: not started again
# Seconds between the watchdog's passes (how late past its deadline an operation may fail).
_WATCH_INTERVAL = 0.05


def _watch(work: WeftWork) -> None:
    """Hands a stream-ordered Work to the watchdog (started here, the first time);
    one without a deadline is there for _waits_behind only."""
    global _watchdog
    with _watched_lock:
        _watched.append(work)
        if _watchdog is None and not _watchdog_ended:
            _watchdog = threading.Thread(
                target=_watchdog_main, name="weft-torch-watchdog", daemon=True
            )
            _watchdog.start()
            # Registered after weft's exit hook (weft.init ran before any post): runs first.
            atexit.register(_watchdog_at_exit)


def _pending_watched() -> List[WeftWork]:
    with _watched_lock:
        _watched[:] = [w for w in _watched if not w._finished()]
        return list(_watched)


def _waits_behind(work: WeftWork) -> bool:
    """Whether an operation posted earlier on work's stream is not known complete:
    work's kernels may not have started. Giving work up now would block (weft
    waits for the kernels of an operation it gives up) until that one ends, with
    the lock held, so that one never would: work is given up after it."""
    key = work._stream_key
    if key is None:
        return False
    with _watched_lock:
        for w in _watched:
            if w is work:
                return False
            if w._stream_key == key and not w._finished():
                return True
    return False


def _watchdog_pass(poll_all: bool = False) -> None:
    """Gives up the operations past their deadline, in posting order; an earlier
    operation on the same stream is polled first, and while it runs the later one
    waits (_waits_behind). Works whose sub-works completed (weft learns it from
    any later call's poll) are dropped; the others cost no C call until a
    deadline passes (poll_all: every one is polled)."""
    now = time.monotonic()
    pending = _pending_watched()
    overdue = {w._stream_key for w in pending if now >= w._deadline}
    for w in pending:
        behind = w._stream_key is not None and w._stream_key in overdue
        if poll_all or behind or now >= w._deadline:
            w._look()


def _watchdog_main() -> None:
    reported = False
    while not _watchdog_stop.wait(_WATCH_INTERVAL):
        try:
            _watchdog_pass()
        except Exception as e:  # noqa: BLE001 (a thread must not die: say it once, go on)
            if not reported:
                reported = True
                sys.stderr.write(
                    f"weft.torch: the stream-ordered work watchdog: {type(e).__name__}: {e}\n"
                )


def _watchdog_at_exit() -> None:
    """Before weft's exit hook finalizes (it waits for every stream-ordered
    operation, without a deadline, on one thread): the watchdog stops, and what it
    watched is waited for here until done or given up at its deadline. After an
    uncaught exception weft does not finalize: nothing is waited for."""
    global _watchdog_ended
    _watchdog_ended = True
    _watchdog_stop.set()
    if _watchdog is not None:
        _watchdog.join(timeout=5)
    if _weft_comm._rt.uncaught:
        return
    try:
        while True:
            pending = _pending_watched()
            if not pending:
                return
            _watchdog_pass(poll_all=True)
            time.sleep(_WATCH_INTERVAL)
    except Exception as e:  # noqa: BLE001 (the program is ending: report, do not raise)
        sys.stderr.write(f"weft.torch: at exit: {type(e).__name__}: {e}\n")


def _done_work(pg: "ProcessGroupWeft", kind: str, outputs: Any) -> WeftWork:
    w = WeftWork(pg, kind, [], outputs)
    w._settle(None)
    return w


# --------------------------------------------------------------------------------------------
# Tensors
# --------------------------------------------------------------------------------------------

_REDUCE_OPS: Dict[Any, ReduceOp] = {
    dist.ReduceOp.RedOpType.SUM: ReduceOp.SUM,
    dist.ReduceOp.RedOpType.PRODUCT: ReduceOp.PRODUCT,
    dist.ReduceOp.RedOpType.MIN: ReduceOp.MIN,
    dist.ReduceOp.RedOpType.MAX: ReduceOp.MAX,
    dist.ReduceOp.RedOpType.AVG: ReduceOp.AVG,
    dist.ReduceOp.RedOpType.BAND: ReduceOp.BAND,
    dist.ReduceOp.RedOpType.BOR: ReduceOp.BOR,
    dist.ReduceOp.RedOpType.BXOR: ReduceOp.BXOR,
}
# What weft's GPU reductions (coll/cuda) take.
_GPU_OPS = (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG)


def _weft_op(
    op: Any, what: str, dtype: Optional[torch.dtype] = None, cuda: bool = False
) -> ReduceOp:
    kind = op.op if hasattr(op, "op") and not isinstance(op, dist.ReduceOp.RedOpType) else op
    if kind == dist.ReduceOp.RedOpType.PREMUL_SUM:
        raise WeftUnsupportedError(
            f"weft {what}: PREMUL_SUM is not supported here; multiply the tensor, then use SUM"
        )
    try:
        r = _REDUCE_OPS[kind]
    except (KeyError, TypeError):
        raise WeftUnsupportedError(f"weft {what}: reduce op {op!r} is not supported") from None
    if dtype is torch.bool:
        r = {ReduceOp.SUM: ReduceOp.MAX, ReduceOp.PRODUCT: ReduceOp.MIN}.get(r, r)
    if cuda and r not in _GPU_OPS:
        raise WeftUnsupportedError(
            f"weft {what}: {r.name} on CUDA tensors is not supported: weft's GPU reductions "
            "(coll/cuda) take SUM, PRODUCT, MIN, MAX and AVG. Nothing was copied: use CPU "
            "tensors for bitwise reductions, or map cuda to nccl (backend='cpu:weft,cuda:nccl')"
        )
    return r


def _reduction(op: Any, what: str, t: torch.Tensor, cuda: bool) -> Tuple[ReduceOp, Any]:
    """weft's op for torch's, and PREMUL_SUM's factor (None for the others): PREMUL_SUM
    is SUM over the inputs multiplied by the factor first (on their device), as NCCL's;
    floating-point tensors only."""
    kind = op.op if hasattr(op, "op") and not isinstance(op, dist.ReduceOp.RedOpType) else op
    if kind != dist.ReduceOp.RedOpType.PREMUL_SUM:
        return _weft_op(op, what, t.dtype, cuda), None
    try:
        factor = op.__getstate__()[1]
    except Exception:  # a torch whose ReduceOp does not give its factor
        factor = None
    if factor is None:
        raise WeftUnsupportedError(
            f"weft {what}: PREMUL_SUM without a readable factor (this torch's ReduceOp does "
            "not give it to Python backends); multiply the tensor, then use SUM"
        )
    if not (t.is_floating_point() or t.is_complex()):
        raise WeftUnsupportedError(
            f"weft {what}: PREMUL_SUM on {t.dtype} tensors is not supported (floating-point "
            "tensors only); multiply the tensor, then use SUM"
        )
    if isinstance(factor, torch.Tensor):
        factor = factor.to(t.device)
    return ReduceOp.SUM, factor


class _Staged:
    """A tensor as weft sees it: itself, or a contiguous copy (on its device) written
    back by finish()."""

    def __init__(self, t: torch.Tensor, what: str, output: bool):
        if t.device.type not in ("cpu", "cuda"):
            raise WeftUnsupportedError(
                f"weft {what}: {t.device} tensors are not supported by the weft torch backend "
                "(CPU and CUDA tensors are). Nothing was copied"
            )
        # Detached (the same storage): DLPack refuses to export a tensor that
        # requires grad ("Can't export tensors that require gradient"), and gloo
        # reduces such tensors in place too.
        t = t.detach()
        if t.is_complex():
            t = torch.view_as_real(t)
        self.orig = t
        self.copy_back = False
        c = t if t.is_contiguous() else t.contiguous()
        self.copy_back = output and c is not t
        if c.dtype is torch.bool:
            c = c.view(torch.uint8)
        self.t = c

    def finish(self) -> None:
        if self.copy_back:
            src = self.t.view(torch.bool) if self.orig.dtype is torch.bool else self.t
            self.orig.copy_(src)


def _finisher(staged: Sequence[_Staged]) -> Optional[Callable[[], None]]:
    backs = [s for s in staged if s.copy_back]
    if not backs:
        return None
    return lambda: [s.finish() for s in backs] and None


def _same_blocks(what: str, like: torch.Tensor, views: Sequence[torch.Tensor], n: int) -> int:
    """The element count of ``like`` after checking that ``views`` are n tensors of its
    dtype and count (the list forms composed on CUDA tensors)."""
    if len(views) != n:
        raise WeftArgumentError(f"weft {what}: needs a list of {n} tensors (got {len(views)})")
    k = like.numel()
    for i, v in enumerate(views):
        if v.dtype != like.dtype or v.numel() != k:
            raise WeftUnsupportedError(
                f"weft {what}: tensor {i} is {v.dtype} x {v.numel()} but the call's tensor is "
                f"{like.dtype} x {k}; on CUDA tensors every tensor of the list has the size and "
                "dtype of the other side"
            )
    return k


def _rows(t: torch.Tensor) -> Tuple[int, int]:
    """(rows along dimension 0, elements per row) of a tensor."""
    if t.dim() == 0:
        return 1, 1
    rows = int(t.shape[0])
    return rows, (t.numel() // rows if rows else 0)


def _split_counts(
    t: torch.Tensor, sizes: Sequence[int], n: int, what: str, label: str
) -> List[int]:
    """torch's split sizes (rows along dimension 0; empty: equal parts) as element counts."""
    rows, per = _rows(t)
    if not sizes:
        if rows % n:
            raise WeftArgumentError(
                f"weft {what}: {label} has {rows} rows, which do not split into {n} equal parts"
            )
        return [rows // n * per] * n
    sizes = [int(x) for x in sizes]
    if len(sizes) != n or any(x < 0 for x in sizes) or sum(sizes) != rows:
        raise WeftArgumentError(
            f"weft {what}: {label} split sizes {sizes} for {n} ranks do not cover its {rows} rows"
        )
    return [x * per for x in sizes]


# --------------------------------------------------------------------------------------------
# weft's world: from the launcher, or from the group's store
# --------------------------------------------------------------------------------------------

# Variables with which libweft finds the other ranks itself (weft_init's bootstraps).
_LAUNCHER_VARS = (
    "WEFT_BOOTSTRAP",
    "PMIX_RANK",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
)


def _launcher_describes(rank: int, size: int) -> bool:
    """Whether weft_init's own bootstrap finds this group's ranks: PMIx, torchrun's
    agent store, WEFT_BOOTSTRAP, or RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT
    naming this rank of a world of this size."""
    env = os.environ
    if any(env.get(v) for v in _LAUNCHER_VARS):
        return True
    if not all(env.get(v) for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return False
    return env["RANK"].strip() == str(rank) and env["WORLD_SIZE"].strip() == str(size)


class _StoreAllgather:
    """weft's bootstrap exchange over the default group's torch store (any
    init_method: file://, tcp://, env:// with an explicit rank): each round, every
    rank sets its key and reads everyone's, then says so; rank 0 (which hosts a
    TCPStore) returns only once every rank has read, so that after the closing
    barrier of weft_finalize it does not exit, taking the store along, while
    another rank still reads. Used at init and by that barrier; the latter waits
    no longer than weft's world timeout."""

    def __init__(self, store: Any, rank: int, size: int, timeout: Optional[float]):
        self.store = dist.PrefixStore("weft-bootstrap/", store)
        self.rank = rank
        self.size = size
        self.timeout = timeout
        self.round = 0

    def __call__(self, data: bytes) -> List[bytes]:
        n = self.round
        self.round += 1
        self.store.set(f"{n}/{self.rank}", data)
        keys = [f"{n}/{r}" for r in range(self.size)]
        self._wait(keys)
        out = [bytes(self.store.get(k)) for k in keys]
        self.store.set(f"{n}/read/{self.rank}", b"")
        if self.rank == 0:
            self._wait([f"{n}/read/{r}" for r in range(self.size)])
        if n:  # every rank has read round n-1 (it set its round-n key after)
            for k in (f"{n - 1}/{self.rank}", f"{n - 1}/read/{self.rank}"):
                try:
                    self.store.delete_key(k)
                except Exception:  # noqa: BLE001 (a store without delete: the keys stay)
                    pass
        return out

    def _wait(self, keys: List[str]) -> None:
        if self.timeout is not None:
            self.store.wait(keys, datetime.timedelta(seconds=self.timeout))
        else:
            self.store.wait(keys)


def _world_for(
    store: Any,
    rank: int,
    size: int,
    global_ranks: Optional[Sequence[int]],
    timeout: Optional[float],
) -> Comm:
    """weft's world communicator, initialising weft for the default group: with
    its own bootstrap where the launcher's variables describe this group, else
    (init_process_group with a file:// or tcp:// init_method, or rank= and
    world_size= given in code) through the group's store, as gloo and NCCL do."""
    if _weft_comm.is_initialized() or global_ranks or _launcher_describes(rank, size):
        return _weft_init()
    exchange = _StoreAllgather(store, rank, size, timeout)
    world = _weft_init(rank, size, exchange)
    # At finalize (the closing barrier) wait no longer than weft's own deadline.
    t = world.timeout
    exchange.timeout = t if t != _INF else None
    return world


# --------------------------------------------------------------------------------------------
# The process group
# --------------------------------------------------------------------------------------------


class ProcessGroupWeft(dist.ProcessGroup):
    """torch.distributed ProcessGroup over one weft communicator (see the module's notes)."""

    class Options:
        """Backend options (``init_process_group(..., pg_options=...)`` or the creator)."""

        def __init__(self, warmup: Optional[bool] = None, hints: Optional[Dict[str, Any]] = None):
            self.warmup = warmup
            self.hints = hints

    def __init__(
        self,
        store: Any,
        rank: int,
        size: int,
        timeout: Optional[datetime.timedelta] = None,
        global_ranks: Optional[Sequence[int]] = None,
        group_name: Optional[str] = None,
        options: Optional["ProcessGroupWeft.Options"] = None,
        other_devices: Optional[Dict[str, str]] = None,
        comm: Optional[Comm] = None,
    ):
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self._store = store
        self._timeout_s = _seconds(timeout)
        self._group_name_given = group_name or ""
        self._pg_group_name = ""
        self._pg_group_desc = ""
        self._global_ranks = list(global_ranks) if global_ranks else list(range(size))
        self._split_count = 0
        opts = options if isinstance(options, ProcessGroupWeft.Options) else ProcessGroupWeft.Options()
        self._options = opts
        self._other_devices = dict(other_devices or {})
        if comm is None:
            world = _world_for(store, rank, size, global_ranks, self._timeout_s)
            name = f"torch:{group_name}" if group_name else None
            with _LOCK:
                if not global_ranks:
                    comm = world.dup(name=name, timeout=self._timeout_s, hints=opts.hints)
                else:
                    comm = world.split(
                        list(global_ranks), name=name, timeout=self._timeout_s, hints=opts.hints
                    )
        if comm is None or comm.size != size or comm.rank != rank:
            raise WeftDistError(
                f"weft: group {group_name!r}: weft made {comm!r}, torch expects rank {rank} of {size}"
            )
        self._comm: Comm = comm
        # Devices the backend map gives to gloo / nccl: served by a backend of our own.
        self._others: Dict[str, Any] = {}
        for dev, backend in sorted(self._other_devices.items()):
            self._others[dev] = self._forward_backend(dev, backend, store, rank, size, timeout)
        if _warmup_enabled(opts.warmup):
            self.warmup()

    def _forward_backend(
        self, dev: str, backend: str, store: Any, rank: int, size: int, timeout: Any
    ) -> Any:
        td = timeout if timeout is not None else datetime.timedelta(minutes=30)
        b = str(backend).lower()
        if b == "gloo":
            return dist.ProcessGroupGloo(dist.PrefixStore("weft-gloo/", store), rank, size, td)
        if b == "nccl" and dist.is_nccl_available():
            o = dist.ProcessGroupNCCL.Options()
            o._timeout = td
            o.global_ranks_in_group = list(self._global_ranks)
            o.group_name = self._group_name_given
            return dist.ProcessGroupNCCL(dist.PrefixStore("weft-nccl/", store), rank, size, o)
        raise WeftUnsupportedError(
            f"weft: the device map gives {dev} to {backend!r}; a weft group serves a device "
            "itself or forwards its tensors to gloo or nccl"
            + (" (this torch has no NCCL)" if b == "nccl" else "")
        )

    # -- identity -----------------------------------------------------------------------

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return BACKEND_NAME

    def getRank(self) -> int:  # noqa: N802
        return self._rank

    def getSize(self) -> int:  # noqa: N802
        return self._size

    def setGroupName(self, name: str) -> None:  # noqa: N802
        self._pg_group_name = name

    def getGroupName(self) -> str:  # noqa: N802
        return self._pg_group_name or self._group_name_given

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        self._pg_group_desc = desc

    def getGroupDesc(self) -> str:  # noqa: N802
        return self._pg_group_desc

    @property
    def comm(self) -> Comm:
        """The weft communicator of this group."""
        return self._comm

    def _desc(self) -> str:
        return f"group '{self._comm.name}' (rank {self._rank} of {self._size})"

    def __repr__(self) -> str:
        return f"<weft.torch.ProcessGroupWeft {self._desc()}>"

    def warmup(self) -> None:
        """Connects every endpoint and runs a one-element allreduce (collective)."""
        with _LOCK:
            self._comm.warmup()
        self.allreduce([torch.zeros(1)], dist.AllreduceOptions()).wait()

    def abort(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    # -- the group as its own torch Backend (split_group, bound devices) ----------------

    def _get_backend(self, device: Any) -> Any:
        """torch's per-device backend lookup: the forwarded backend of a device the
        map gives to gloo / nccl, else this group (it serves CPU and CUDA)."""
        d = device if isinstance(device, torch.device) else torch.device(device)
        other = self._others.get(d.type)
        if other is not None:
            return other
        if d.type not in ("cpu", "cuda"):
            raise RuntimeError(f"No backend type associated with device type {d.type}")
        return self

    @property
    def supports_splitting(self) -> bool:
        return True

    @property
    def supports_coalescing(self) -> bool:
        return False

    @property
    def supports_time_estimate(self) -> bool:
        return False

    def supports_tensor_alloc(self, device: Any) -> bool:
        return False

    @property
    def options(self) -> "ProcessGroupWeft.Options":
        return self._options

    def comm_split_count(self) -> int:
        return self._split_count

    def _set_sequence_number_for_group(self) -> None:
        pass  # weft numbers a communicator's collectives itself

    def eager_connect_single_device(self, device: Any) -> None:
        """init_process_group / new_group with device_id: the group is bound to it."""
        if device is not None and self.bound_device_id is None:
            self.bound_device_id = device

    def perform_nocolor_split(self, device: Any) -> None:
        """A rank outside a new group (torch, when the default group has a bound
        device): nothing here; it joined weft's split in _new_process_group_helper."""

    def split_group(
        self,
        new_ranks: Sequence[int],
        timeout: Optional[datetime.timedelta] = None,
        opts: Any = None,
        group_name: Optional[str] = None,
        group_desc: Optional[str] = None,
    ) -> Optional["ProcessGroupWeft"]:
        """weft's split of this group's communicator: collective over this group;
        ``new_ranks`` are ranks of this group (taken in ascending order), the same
        on every rank of the new group. Returns the new group, or None on a rank
        outside ``new_ranks``."""
        ranks = sorted(int(r) for r in new_ranks)
        if not ranks or len(set(ranks)) != len(ranks) or ranks[0] < 0 or ranks[-1] >= self._size:
            raise ValueError(
                f"weft split_group: ranks {list(new_ranks)} are not distinct ranks of a group of "
                f"{self._size}"
            )
        self._split_count += 1
        options = opts if isinstance(opts, ProcessGroupWeft.Options) else self._options
        t = _seconds(timeout) if timeout is not None else self._timeout_s
        if self._rank not in ranks:
            with _LOCK:
                self._comm.split([], timeout=t)
            return None
        name = group_name or f"{self.getGroupName()}:split:{self._split_count}"
        with _LOCK:
            comm = self._comm.split(
                ranks, name=f"torch:{name}", timeout=t, hints=options.hints
            )
        store = dist.PrefixStore(f"weft-split/{name}/{'-'.join(map(str, ranks))}/", self._store)
        pg = ProcessGroupWeft(
            store,
            ranks.index(self._rank),
            len(ranks),
            datetime.timedelta(seconds=t) if t is not None else None,
            [self._global_ranks[r] for r in ranks],
            name,
            options,
            self._other_devices,
            comm=comm,
        )
        pg._set_group_name(name)
        pg._set_group_desc(group_desc or f"{self.getGroupDesc() or self.getGroupName()}:split")
        if self.bound_device_id is not None:
            pg.bound_device_id = self.bound_device_id
        return pg

    # -- helpers ------------------------------------------------------------------------

    def _other_for(self, tensors: Sequence[torch.Tensor]) -> Optional[Any]:
        """The forwarded backend serving the tensors' device, if the map names one."""
        if self._others and tensors and tensors[0] is not None:
            return self._others.get(tensors[0].device.type)
        return None

    def _op_timeout(self, opts: Any) -> Optional[float]:
        t = _seconds(getattr(opts, "timeout", None))
        return t if t is not None else self._timeout_s

    def _post(
        self,
        kind: str,
        outputs: Any,
        staged: Sequence[_Staged],
        post: Callable[[], Sequence[Work]],
        opts: Any = None,
        finish: Optional[Callable[[], None]] = None,
        device: Optional[torch.device] = None,
        host_wait: bool = False,
        after: Optional[Callable[[], None]] = None,
    ) -> WeftWork:
        """Posts weft operations under the lock and returns their Work.

        device None (CPU tensors) or host_wait: the Work waits on the host; the
        staged copy-backs and ``finish`` run when it completes. Otherwise (a CUDA
        device): stream-ordered on the device's current stream; ``after`` (copies
        out of a composed call's buffers) and the staged copy-backs are queued on
        that stream right after the operation, and a CUDA event after them."""
        timeout = self._op_timeout(opts)
        if device is None or host_wait:
            fin = _finisher(staged)
            if finish is not None:
                f0 = fin
                fin = (lambda: (f0() if f0 else None, finish()) and None) if f0 else finish
            # CUDA point-to-point: the tensor's device current (DLPack's stream hand-over
            # compares streams of the current device).
            ctx = torch.cuda.device(device) if device is not None else contextlib.nullcontext()
            try:
                with ctx, _Posting():
                    works = list(post())
                    tracked = _completions.active()
            except WeftError as e:
                raise WeftDistError(f"weft {kind} on {self._desc()}: {e}") from e
            work = WeftWork(self, kind, works, outputs, fin, timeout, device=device)
            if tracked:
                _completions.track(work)
            return work
        with torch.cuda.device(device):
            stream = torch.cuda.current_stream(device)
            try:
                with _Posting():
                    works = list(post())
                    for w in works:
                        # A failure found after this call returned is also raised by the
                        # group's next CUDA collective (nobody may ask this Work).
                        w._blocking = True
            except WeftError as e:
                raise WeftDistError(f"weft {kind} on {self._desc()}: {e}") from e
            if after is not None:
                after()
            for s in staged:
                s.finish()
            event = torch.cuda.Event()
            event.record(stream)
        work = WeftWork(self, kind, works, outputs, None, timeout, device=device, event=event)
        handle = getattr(stream, "cuda_stream", None)
        work._stream_key = (device.index, handle) if handle is not None else None
        _watch(work)
        return work

    @staticmethod
    def _one(tensors: Sequence[Any], what: str) -> Any:
        if len(tensors) != 1:
            raise WeftUnsupportedError(f"weft {what}: one tensor per call (got {len(tensors)})")
        return tensors[0]

    def _alltoallv_cuda(
        self,
        kind: str,
        outputs: Any,
        staged: Sequence[_Staged],
        send: torch.Tensor,
        scounts: Sequence[int],
        recv: torch.Tensor,
        rcounts: Sequence[int],
        opts: Any,
        device: torch.device,
        unpack: Optional[Callable[[], None]] = None,
    ) -> WeftWork:
        """An all-to-all-v of flat device tensors (scounts[j] elements of ``send`` in
        order to rank j, rcounts[j] from rank j into ``recv``) from weft's GPU
        all-to-all, which takes equal blocks: one host all_reduce (MAX) of the
        largest and smallest count over the group (every rank takes the same
        path), then an all-to-all of equal blocks, or of blocks padded to the
        largest count (copied in and out on the stream)."""
        n = self._size
        counts = list(scounts) + list(rcounts)
        mm = torch.tensor([max(counts, default=0), -min(counts, default=0)], dtype=torch.int64)
        self._post(
            f"{kind} (the split sizes' bounds)",
            [mm],
            [],
            lambda: [self._comm.all_reduce(mm, ReduceOp.MAX, async_op=True, timeout=_INF)],
            opts,
        ).wait()
        big, small = int(mm[0]), -int(mm[1])
        if big == small:  # every block of every rank has one size
            return self._post(
                kind,
                outputs,
                staged,
                lambda: [self._comm.all_to_all_single(recv, send, async_op=True, timeout=_INF)],
                opts,
                device=device,
                after=unpack,
            )
        with torch.cuda.device(device):
            spad = torch.empty(n * big, dtype=send.dtype, device=device)
            rpad = torch.empty(n * big, dtype=send.dtype, device=device)
            off = 0
            for j, c in enumerate(scounts):
                if c:
                    spad[j * big : j * big + c].copy_(send[off : off + c])
                off += c

        def copy_out() -> None:
            o = 0
            for j, c in enumerate(rcounts):
                if c:
                    recv[o : o + c].copy_(rpad[j * big : j * big + c])
                o += c
            if unpack is not None:
                unpack()

        return self._post(
            kind,
            outputs,
            staged,
            lambda: [self._comm.all_to_all_single(rpad, spad, async_op=True, timeout=_INF)],
            opts,
            device=device,
            after=copy_out,
        )

    # -- collectives --------------------------------------------------------------------

    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        g = self._other_for(tensors)
        if g is not None:
            return g.allreduce(tensors, opts)
        opts = opts or dist.AllreduceOptions()
        t = self._one(tensors, "allreduce")
        if t.layout == torch.sparse_coo:
            return self._sparse_allreduce(t, opts)
        dev = _device_of([t], "allreduce")
        s = _Staged(t, "allreduce", output=True)
        op, factor = _reduction(opts.reduceOp, "allreduce", t, dev is not None)
        if factor is not None:
            s.t.mul_(factor)  # in place: the result overwrites it
        return self._post(
            "allreduce",
            tensors,
            [s],
            lambda: [self._comm.all_reduce(s.t, op, async_op=True, timeout=_INF)],
            opts,
            device=dev,
        )

    def _all_gather_into(self, what: str, out: torch.Tensor, inp: torch.Tensor, opts: Any) -> None:
        """Every rank's ``inp`` into ``out`` in rank order (one all_gather), waited for."""
        i, o = _Staged(inp, what, output=False), _Staged(out, what, output=True)
        self._post(
            what,
            [out],
            [o],
            lambda: [self._comm.all_gather_single(o.t, i.t, async_op=True, timeout=_INF)],
            opts,
        ).wait()

    def _gather_rows(
        self, what: str, rows: torch.Tensor, counts: List[int], opts: Any
    ) -> torch.Tensor:
        """Every rank's ``rows`` (counts[r] rows from rank r, the rest of the shape
        alike) concatenated in rank order: one all_gather of blocks padded to the
        largest count."""
        big = max(counts)
        pad = torch.zeros((big,) + tuple(rows.shape[1:]), dtype=rows.dtype)
        pad[: rows.shape[0]].copy_(rows)
        out = torch.empty((self._size * big,) + tuple(rows.shape[1:]), dtype=rows.dtype)
        self._all_gather_into(what, out, pad, opts)
        return torch.cat([out[r * big : r * big + c] for r, c in enumerate(counts)])

    def _sparse_allreduce(self, t: torch.Tensor, opts: Any) -> WeftWork:
        """all_reduce (SUM) of a sparse COO tensor, as gloo does it: every rank's
        indices and values gathered (after their counts), summed by coalescing, the
        result written into ``t``. Waits until done (the counts must be known
        before the data moves); the returned Work is complete."""
        what = "allreduce (sparse)"
        kind = opts.reduceOp.op if hasattr(opts.reduceOp, "op") else opts.reduceOp
        if kind != dist.ReduceOp.RedOpType.SUM:
            raise WeftUnsupportedError(f"weft {what}: only SUM reduces sparse tensors (as gloo)")
        if t.device.type != "cpu":
            raise WeftUnsupportedError(f"weft {what}: CPU sparse tensors only")
        src = t.detach().coalesce()
        idx, val = src.indices(), src.values()
        nnz = torch.tensor([idx.shape[1]], dtype=torch.int64)
        counts_t = torch.empty(self._size, dtype=torch.int64)
        self._all_gather_into(what, counts_t, nnz, opts)
        counts = [int(c) for c in counts_t]
        all_idx = self._gather_rows(what, idx.t().contiguous(), counts, opts).t()
        all_val = self._gather_rows(what, val.contiguous(), counts, opts)
        total = torch.sparse_coo_tensor(all_idx, all_val, src.shape).coalesce()
        # A sparse copy_ replaces t's indices and values (not on a detached alias).
        with torch.no_grad():
            t.copy_(total)
        return _done_work(self, what, [t])

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        g = self._other_for(tensors)
        if g is not None:
            return g.allreduce_coalesced(tensors, opts)
        opts = opts or dist.AllreduceCoalescedOptions()
        dev = _device_of(tensors, "allreduce_coalesced")
        staged = [_Staged(t, "allreduce_coalesced", output=True) for t in tensors]
        ops = []
        for t, st in zip(tensors, staged):
            op, factor = _reduction(opts.reduceOp, "allreduce_coalesced", t, dev is not None)
            if factor is not None:
                st.t.mul_(factor)
            ops.append(op)
        return self._post(
            "allreduce_coalesced",
            tensors,
            staged,
            lambda: [
                self._comm.all_reduce(s.t, op, async_op=True, timeout=_INF)
                for s, op in zip(staged, ops)
            ],
            opts,
            device=dev,
        )

    def broadcast(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        g = self._other_for(tensors)
        if g is not None:
            return g.broadcast(tensors, opts)
        opts = opts or dist.BroadcastOptions()
        t = self._one(tensors, "broadcast")
        dev = _device_of([t], "broadcast")
        s = _Staged(t, "broadcast", output=True)
        root = opts.rootRank
        return self._post(
            "broadcast",
            tensors,
            [s],
            lambda: [self._comm.broadcast(s.t, root, async_op=True, timeout=_INF)],
            opts,
            device=dev,
        )

    def reduce(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        g = self._other_for(tensors)
        if g is not None:
            return g.reduce(tensors, opts)
        opts = opts or dist.ReduceOptions()
        t = self._one(tensors, "reduce")
        dev = _device_of([t], "reduce")
        s = _Staged(t, "reduce", output=True)
        op, factor = _reduction(opts.reduceOp, "reduce", t, dev is not None)
        root = opts.rootRank
        src = s.t
        if factor is not None:
            if self._rank == root:
                s.t.mul_(factor)  # the root's tensor receives the result
            else:
                src = s.t * factor  # the others' are inputs only: left as they are
        return self._post(
            "reduce",
            tensors,
            [s],
            lambda: [self._comm.reduce(src, root, op, async_op=True, timeout=_INF)],
            opts,
            device=dev,
        )

    def allgather(
        self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor], opts: Any = None
    ) -> Any:
        g = self._other_for(input_tensors)
        if g is not None:
            return g.allgather(output_tensors, input_tensors, opts)
        inp_t = self._one(input_tensors, "allgather")
        out_ts = self._one(output_tensors, "allgather")
        dev = _device_of([inp_t] + list(out_ts), "allgather")
        inp = _Staged(inp_t, "allgather", output=False)
        if dev is not None:
            # CUDA: all_gather_into_tensor into a flat buffer, copied out to the list.
            views = [_as_weft(o) for o in out_ts]
            k = _same_blocks("allgather", inp.t, views, self._size)
            flat = torch.empty(self._size * k, dtype=inp.t.dtype, device=dev)

            def copy_out() -> None:
                for r, v in enumerate(views):
                    v.copy_(flat[r * k : (r + 1) * k].view(v.shape))

            return self._post(
                "allgather",
                output_tensors,
                [],
                lambda: [self._comm.all_gather_single(flat, inp.t, async_op=True, timeout=_INF)],
                opts,
                device=dev,
                after=copy_out,
            )
        outs = [_Staged(o, "allgather", output=True) for o in out_ts]
        return self._post(
            "allgather",
            output_tensors,
            outs,
            lambda: [
                self._comm.all_gather([o.t for o in outs], inp.t, async_op=True, timeout=_INF)
            ],
            opts,
        )

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        g = self._other_for([input])
        if g is not None:
            return g._allgather_base(output, input, opts or dist.AllgatherOptions())
        dev = _device_of([output, input], "all_gather_into_tensor")
        i = _Staged(input, "all_gather_into_tensor", output=False)
        o = _Staged(output, "all_gather_into_tensor", output=True)
        return self._post(
            "all_gather_into_tensor",
            [output],
            [o],
            lambda: [self._comm.all_gather_single(o.t, i.t, async_op=True, timeout=_INF)],
            opts,
            device=dev,
        )

    def allgather_coalesced(
        self,
        output_lists: List[List[torch.Tensor]],
        inputs: List[torch.Tensor],
        opts: Any = None,
    ) -> Any:
        """torch's all_gather_coalesced: output_lists[r][i] receives rank r's
        inputs[i] (shapes may differ between the inputs, not between ranks); one
        weft all_gather per input, posted together."""
        g = self._other_for(inputs)
        if g is not None:
            return g.allgather_coalesced(output_lists, inputs, opts or dist.AllgatherOptions())
        what = "all_gather_coalesced"
        if len(output_lists) != self._size or any(len(o) != len(inputs) for o in output_lists):
            raise WeftArgumentError(
                f"weft {what}: needs {self._size} output lists of {len(inputs)} tensors each "
                f"(got {[len(o) for o in output_lists]})"
            )
        flat_outs = [t for lst in output_lists for t in lst]
        dev = _device_of(list(inputs) + flat_outs, what)
        if dev is not None:
            raise WeftUnsupportedError(
                f"weft {what}: CUDA tensors are not supported (all_gather_into_tensor_coalesced is)"
            )
        ins = [_Staged(t, what, output=False) for t in inputs]
        outs = [[_Staged(t, what, output=True) for t in lst] for lst in output_lists]
        return self._post(
            what,
            output_lists,
            [o for lst in outs for o in lst],
            lambda: [
                self._comm.all_gather(
                    [outs[r][i].t for r in range(self._size)], x.t, async_op=True, timeout=_INF
                )
                for i, x in enumerate(ins)
            ],
            opts,
        )

    def allgather_into_tensor_coalesced(
        self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], opts: Any = None
    ) -> Any:
        g = self._other_for(inputs)
        if g is not None:
            return g.allgather_into_tensor_coalesced(
                outputs, inputs, opts or dist.AllgatherOptions()
            )
        dev = _device_of(list(outputs) + list(inputs), "allgather_into_tensor_coalesced")
        ins = [_Staged(t, "allgather_into_tensor_coalesced", output=False) for t in inputs]
        outs = [_Staged(t, "allgather_into_tensor_coalesced", output=True) for t in outputs]
        return self._post(
            "allgather_into_tensor_coalesced",
            outputs,
            outs,
            lambda: [
                self._comm.all_gather_single(o.t, i.t, async_op=True, timeout=_INF)
                for o, i in zip(outs, ins)
            ],
            opts,
            device=dev,
        )

    def reduce_scatter(
        self, output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]], opts: Any = None
    ) -> Any:
        g = self._other_for(output_tensors)
        if g is not None:
            return g.reduce_scatter(output_tensors, input_tensors, opts)
        opts = opts or dist.ReduceScatterOptions()
        out = self._one(output_tensors, "reduce_scatter")
        in_ts = self._one(input_tensors, "reduce_scatter")
        dev = _device_of([out] + list(in_ts), "reduce_scatter")
        o = _Staged(out, "reduce_scatter", output=True)
        op, factor = _reduction(opts.reduceOp, "reduce_scatter", out, dev is not None)
        if dev is not None:
            # CUDA: the inputs concatenated (on the device), then reduce_scatter_tensor.
            views = [_as_weft(t) for t in in_ts]
            _same_blocks("reduce_scatter", o.t, views, self._size)
            flat = torch.cat([v.reshape(-1) for v in views])
            if factor is not None:
                flat.mul_(factor)
            return self._post(
                "reduce_scatter",
                output_tensors,
                [o],
                lambda: [
                    self._comm.reduce_scatter_single(o.t, flat, op, async_op=True, timeout=_INF)
                ],
                opts,
                device=dev,
            )
        ins = [_Staged(t, "reduce_scatter", output=False).t for t in in_ts]
        if factor is not None:
            ins = [i * factor for i in ins]
        return self._post(
            "reduce_scatter",
            output_tensors,
            [o],
            lambda: [self._comm.reduce_scatter(o.t, ins, op, async_op=True, timeout=_INF)],
            opts,
        )

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        g = self._other_for([input])
        if g is not None:
            return g._reduce_scatter_base(output, input, opts or dist.ReduceScatterOptions())
        opts = opts or dist.ReduceScatterOptions()
        dev = _device_of([output, input], "reduce_scatter_tensor")
        i = _Staged(input, "reduce_scatter_tensor", output=False)
        o = _Staged(output, "reduce_scatter_tensor", output=True)
        op, factor = _reduction(opts.reduceOp, "reduce_scatter_tensor", output, dev is not None)
        src = i.t * factor if factor is not None else i.t
        return self._post(
            "reduce_scatter_tensor",
            [output],
            [o],
            lambda: [self._comm.reduce_scatter_single(o.t, src, op, async_op=True, timeout=_INF)],
            opts,
            device=dev,
        )

    def reduce_scatter_tensor_coalesced(
        self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], opts: Any = None
    ) -> Any:
        g = self._other_for(inputs)
        if g is not None:
            return g.reduce_scatter_tensor_coalesced(
                outputs, inputs, opts or dist.ReduceScatterOptions()
            )
        opts = opts or dist.ReduceScatterOptions()
        dev = _device_of(list(outputs) + list(inputs), "reduce_scatter_tensor_coalesced")
        ins = [_Staged(t, "reduce_scatter_tensor_coalesced", output=False) for t in inputs]
        outs = [_Staged(t, "reduce_scatter_tensor_coalesced", output=True) for t in outputs]
        ops, srcs = [], []
        for t, i in zip(outputs, ins):
            op, factor = _reduction(
                opts.reduceOp, "reduce_scatter_tensor_coalesced", t, dev is not None
            )
            ops.append(op)
            srcs.append(i.t * factor if factor is not None else i.t)
        return self._post(
            "reduce_scatter_tensor_coalesced",
            outputs,
            outs,
            lambda: [
                self._comm.reduce_scatter_single(o.t, i, op, async_op=True, timeout=_INF)
                for o, i, op in zip(outs, srcs, ops)
            ],
            opts,
            device=dev,
        )

    def alltoall_base(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: List[int],
        input_split_sizes: List[int],
        opts: Any = None,
    ) -> Any:
        g = self._other_for([input])
        if g is not None:
            return g.alltoall_base(
                output, input, output_split_sizes, input_split_sizes, opts or dist.AllToAllOptions()
            )
        dev = _device_of([output, input], "all_to_all_single")
        i = _Staged(input, "all_to_all_single", output=False)
        o = _Staged(output, "all_to_all_single", output=True)
        osz = list(output_split_sizes) or None
        isz = list(input_split_sizes) or None
        if dev is not None and (osz is not None or isz is not None):
            # CUDA with split sizes: equal blocks or padded ones (_alltoallv_cuda).
            what = "all_to_all_single"
            scounts = _split_counts(i.t, isz or [], self._size, what, "input")
            rcounts = _split_counts(o.t, osz or [], self._size, what, "output")
            return self._alltoallv_cuda(
                what, [output], [o], i.t.reshape(-1), scounts, o.t.view(-1), rcounts, opts, dev
            )
        return self._post(
            "all_to_all_single",
            [output],
            [o],
            lambda: [self._comm.all_to_all_single(o.t, i.t, osz, isz, async_op=True, timeout=_INF)],
            opts,
            device=dev,
        )

    def alltoall(
        self, output_tensors: List[torch.Tensor], input_tensors: List[torch.Tensor], opts: Any = None
    ) -> Any:
        g = self._other_for(input_tensors)
        if g is not None:
            return g.alltoall(output_tensors, input_tensors, opts or dist.AllToAllOptions())
        # Pack along a flat dimension and unpack on completion (sizes may differ per peer).
        n = self._size
        if len(output_tensors) != n or len(input_tensors) != n:
            raise WeftDistError(f"weft all_to_all: needs {n} input and {n} output tensors")
        dev = _device_of(list(input_tensors) + list(output_tensors), "all_to_all")
        ins = [_as_weft(t) for t in input_tensors]
        outs = [_as_weft(t) for t in output_tensors]
        dtype = ins[0].dtype if n else torch.uint8
        for t in ins + outs:
            if t.dtype != dtype:
                raise WeftDistError("weft all_to_all: every tensor must have one dtype")
        send = torch.cat([t.reshape(-1) for t in ins]) if n else torch.empty(0, dtype=dtype)
        recv = torch.empty(sum(t.numel() for t in outs), dtype=dtype, device=send.device)
        isz = [t.numel() for t in ins]
        osz = [t.numel() for t in outs]

        def unpack() -> None:
            off = 0
            for t, k in zip(outs, osz):
                t.copy_(recv[off : off + k].view(t.shape))
                off += k

        if dev is not None:
            return self._alltoallv_cuda(
                "all_to_all", output_tensors, [], send, isz, recv, osz, opts, dev, unpack=unpack
            )
        return self._post(
            "all_to_all",
            output_tensors,
            [],
            lambda: [
                self._comm.all_to_all_single(recv, send, osz, isz, async_op=True, timeout=_INF)
            ],
            opts,
            finish=unpack,
        )

    def gather(
        self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor], opts: Any = None
    ) -> Any:
        g = self._other_for(input_tensors)
        if g is not None:
            return g.gather(output_tensors, input_tensors, opts)
        opts = opts or dist.GatherOptions()
        root = opts.rootRank
        inp_t = self._one(input_tensors, "gather")
        out_ts = self._one(output_tensors, "gather") if self._rank == root else []
        dev = _device_of([inp_t] + list(out_ts), "gather")
        i = _Staged(inp_t, "gather", output=False)
        if dev is not None:
            # CUDA: an all_gather into a flat buffer; the root copies the blocks out.
            views = [_as_weft(o) for o in out_ts]
            k = i.t.numel()
            if self._rank == root:
                _same_blocks("gather", i.t, views, self._size)
            flat = torch.empty(self._size * k, dtype=i.t.dtype, device=dev)

            def copy_out() -> None:
                for r, v in enumerate(views):
                    v.copy_(flat[r * k : (r + 1) * k].view(v.shape))

            return self._post(
                "gather",
                output_tensors,
                [],
                lambda: [self._comm.all_gather_single(flat, i.t, async_op=True, timeout=_INF)],
                opts,
                device=dev,
                after=copy_out,
            )
        if self._rank == root:
            outs = [_Staged(o, "gather", output=True) for o in out_ts]
            target: Any = [o.t for o in outs]
        else:
            outs, target = [], None
        return self._post(
            "gather",
            output_tensors,
            outs,
            lambda: [self._comm.gather(target, i.t, root, async_op=True, timeout=_INF)],
            opts,
        )

    def scatter(
        self, output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]], opts: Any = None
    ) -> Any:
        g = self._other_for(output_tensors)
        if g is not None:
            return g.scatter(output_tensors, input_tensors, opts)
        opts = opts or dist.ScatterOptions()
        root = opts.rootRank
        out_t = self._one(output_tensors, "scatter")
        in_ts = self._one(input_tensors, "scatter") if self._rank == root else []
        dev = _device_of([out_t] + list(in_ts), "scatter")
        o = _Staged(out_t, "scatter", output=True)
        if dev is not None:
            # CUDA: a broadcast of the root's inputs, concatenated; each rank keeps its block.
            k = o.t.numel()
            if self._rank == root:
                views = [_as_weft(t) for t in in_ts]
                _same_blocks("scatter", o.t, views, self._size)
                flat = torch.cat([v.reshape(-1) for v in views])
            else:
                flat = torch.empty(self._size * k, dtype=o.t.dtype, device=dev)
            me = self._rank

            def copy_out() -> None:
                o.t.view(-1).copy_(flat[me * k : (me + 1) * k])

            return self._post(
                "scatter",
                output_tensors,
                [o],
                lambda: [self._comm.broadcast(flat, root, async_op=True, timeout=_INF)],
                opts,
                device=dev,
                after=copy_out,
            )
        if self._rank == root:
            ins = [_Staged(t, "scatter", output=False) for t in in_ts]
            source: Any = [s.t for s in ins]
        else:
            source = None
        return self._post(
            "scatter",
            output_tensors,
            [o],
            lambda: [self._comm.scatter(o.t, source, root, async_op=True, timeout=_INF)],
            opts,
        )

    def barrier(self, opts: Any = None) -> Any:
        dev = getattr(opts, "device", None) if opts is not None else None
        if dev is not None and dev.type in self._others:
            return self._others[dev.type].barrier(opts)
        if dev is not None and dev.type == "cuda":
            # weft's barrier on the device's current stream; waiting on it blocks the host
            # until every member's stream reached it (as NCCL's barrier).
            d = dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())
            with torch.cuda.device(d):
                stream = torch.cuda.current_stream(d)
            return self._post(
                "barrier",
                [],
                [],
                lambda: [self._comm.barrier(async_op=True, timeout=_INF, stream=stream)],
                opts,
                device=d,
                host_wait=True,
            )
        return self._post(
            "barrier",
            [],
            [],
            lambda: [self._comm.barrier(async_op=True, timeout=_INF)],
            opts,
        )

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        """gloo's monitored barrier: every rank reports to rank 0 and waits for its
        answer. Rank 0 waits for the reports one rank after another within
        ``timeout`` in all ("Rank 0 timed out in monitoredBarrier after N ms" once
        it is spent), or ``timeout`` each with ``wait_all_ranks``, and raises
        naming the first rank that did not report ("Rank 1 failed to pass
        monitoredBarrier in N ms"), or all of them with ``wait_all_ranks``; the
        others then raise too, naming rank 0. Point-to-point on tag TAG_UB of the
        group's communicator (a user message with that tag could be taken for a
        report). torch's ``dist.monitored_barrier()`` refuses every backend but
        gloo before it calls the group: call it on the group,
        ``group.monitored_barrier(timedelta(...))`` (the default group:
        ``torch.distributed.distributed_c10d._get_default_group()``)."""
        if timeout is None:
            t = self._timeout_s if self._timeout_s is not None else 1800.0
        elif isinstance(timeout, datetime.timedelta):
            t = timeout.total_seconds()
        else:
            t = float(timeout)
        ms = int(round(t * 1000))
        start = time.monotonic()
        tag = _weft_comm.TAG_UB

        def within(seconds: float) -> datetime.timedelta:
            return datetime.timedelta(seconds=max(seconds, 0.001))

        if self._rank != 0:
            try:
                self.send([torch.ones(1, dtype=torch.uint8)], 0, tag).wait(within(t))
                self.recv([torch.zeros(1, dtype=torch.uint8)], 0, tag).wait(within(t))
            except (WeftError, WeftDistError) as e:
                raise WeftDistError(
                    f"Rank {self._rank} successfully reached monitoredBarrier, but received "
                    f"errors while waiting for send/recv from rank 0. Please check rank 0 logs "
                    f"for faulty rank. (weft: {e})"
                ) from e
            return
        reports = {
            r: self.recv([torch.zeros(1, dtype=torch.uint8)], r, tag) for r in range(1, self._size)
        }
        processed: List[int] = []
        failed: List[int] = []
        for r, w in reports.items():
            left = t if wait_all_ranks else t - (time.monotonic() - start)
            if left <= 0 and not wait_all_ranks:
                done = ", ".join(map(str, processed))
                raise WeftDistError(
                    f"Rank 0 timed out in monitoredBarrier after {ms} ms.\n"
                    + (f"Successfully processed ranks: {done}" if processed else
                       "No ranks successfully processed in monitoredBarrier.")
                )
            try:
                w.wait(within(left))
                processed.append(r)
            except (WeftError, WeftDistError) as e:
                if not wait_all_ranks:
                    raise WeftDistError(
                        f"[Rank 0]: Rank {r} failed to pass monitoredBarrier in {ms} ms\n "
                        f"Original exception: \n{e}"
                    ) from e
                failed.append(r)
        if failed:
            raise WeftDistError(
                f"[Rank 0]: Ranks {', '.join(map(str, failed))} failed to pass monitoredBarrier "
                f"in {ms} ms"
            )
        for r in range(1, self._size):
            self.send([torch.ones(1, dtype=torch.uint8)], r, tag).wait(within(t))

    # -- point-to-point -----------------------------------------------------------------
    # CUDA tensors: weft's point-to-point on device memory, CUDA-aware MPI style (posting
    # synchronises the tensor's current stream; wait() blocks the host until it is done).

    def send(self, tensors: List[torch.Tensor], dst: int, tag: int = 0) -> Any:
        g = self._other_for(tensors)
        if g is not None:
            return g.send(tensors, dst, tag)
        t = self._one(tensors, "send")
        dev = _device_of([t], "send")
        s = _Staged(t, "send", output=False)
        return self._post(
            "send",
            tensors,
            [],
            lambda: [self._comm.isend(s.t, dst, tag, timeout=_INF)],
            device=dev,
            host_wait=True,
        )

    def recv(self, tensors: List[torch.Tensor], src: int, tag: int = 0) -> Any:
        g = self._other_for(tensors)
        if g is not None:
            return g.recv(tensors, src, tag)
        t = self._one(tensors, "recv")
        dev = _device_of([t], "recv")
        s = _Staged(t, "recv", output=True)
        return self._post(
            "recv",
            tensors,
            [s],
            lambda: [self._comm.irecv(s.t, src, tag, timeout=_INF)],
            device=dev,
            host_wait=True,
        )

    def recv_anysource(self, tensors: List[torch.Tensor], tag: int = 0) -> Any:
        g = self._other_for(tensors)
        if g is not None:
            return g.recv_anysource(tensors, tag)
        t = self._one(tensors, "recv")
        dev = _device_of([t], "recv")
        s = _Staged(t, "recv", output=True)
        return self._post(
            "recv",
            tensors,
            [s],
            lambda: [self._comm.irecv(s.t, None, tag, timeout=_INF)],
            device=dev,
            host_wait=True,
        )


# --------------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------------


def _device_map_of_caller() -> Dict[str, str]:
    """The device -> backend map of the group being created (torch does not pass it
    to a creator): read from _new_process_group_helper's frame, {} if not found."""
    import sys

    f = sys._getframe(1)
    while f is not None:
        cfg = f.f_locals.get("backend_config")
        if cfg is not None and hasattr(cfg, "get_device_backend_map"):
            return {str(d): str(b) for d, b in cfg.get_device_backend_map().items()}
        f = f.f_back
    return {}


def _create(dist_opts: Any, backend_options: Any) -> ProcessGroupWeft:
    """torch's creator (extended API): the store, rank, size, timeout, group name and
    global ranks of the new group."""
    dmap = _device_map_of_caller()
    others = {d: b for d, b in dmap.items() if b != BACKEND_NAME}
    return ProcessGroupWeft(
        dist_opts.store,
        dist_opts.group_rank,
        dist_opts.group_size,
        dist_opts.timeout,
        list(dist_opts.global_ranks_in_group),
        dist_opts.group_id,
        backend_options,
        others,
    )


def _uses_weft(backend: Any) -> bool:
    s = str(backend).lower()
    return s == BACKEND_NAME or any(
        part.split(":")[-1].strip() == BACKEND_NAME for part in s.split(",")
    )


def _wrap_group_helper() -> None:
    """Non-members of a new weft group join weft's split (collective over the world)
    with an empty list; torch never calls the creator on them."""
    orig = _c10d._new_process_group_helper
    if getattr(orig, "_weft_wrapped", False):
        return

    @functools.wraps(orig)
    def helper(group_size: int, group_rank: int, global_ranks_in_group: Any, backend: Any, *a: Any, **kw: Any) -> Any:
        if (
            global_ranks_in_group
            and _uses_weft(backend)
            and dist.is_initialized()
            and _c10d._get_default_group().rank() not in global_ranks_in_group
        ):
            pg_tag = kw.get("pg_tag", a[4] if len(a) > 4 else None)
            if pg_tag in (None, "") or not _c10d._find_pg_by_ranks_and_tag(pg_tag, global_ranks_in_group):
                with _LOCK:
                    _weft_init().split([])
        return orig(group_size, group_rank, global_ranks_in_group, backend, *a, **kw)

    helper._weft_wrapped = True  # type: ignore[attr-defined]
    _c10d._new_process_group_helper = helper


def _register() -> None:
    if BACKEND_NAME.upper() not in getattr(dist.Backend, "_plugins", {}):
        dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu", "cuda"])
    _wrap_group_helper()


_register()
