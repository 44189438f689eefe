"""weft as a torch.distributed backend, in pure Python (``import weft.torch``).

Importing this module registers the backend ``"weft"`` with torch.distributed::

    import torch.distributed as dist
    import weft.torch  # noqa: F401  (registers "weft")

    dist.init_process_group(backend="weft")            # under torchrun, weftrun, mpirun
    dist.init_process_group(backend="cpu:weft,cuda:nccl")

``import weft`` never imports this module (the package works without torch).

What it is
    :class:`ProcessGroupWeft` is a ``torch.distributed.ProcessGroup`` subclass
    (torch 2.x has no Python-constructible ``Backend``; Python backends are
    ProcessGroups, as in torch's test_c10d_pypg.py). Each group owns one weft
    communicator: the default group a ``dup`` of weft's world (bootstrapped
    from torchrun's variables / TCPStore, weftrun, PMIx), every ``new_group``
    a ``split`` of it by rank list, named after torch's group name, with the
    group's ``timeout=`` as the communicator's timeout.

    Because torch calls a backend's creator on the members of a new group
    only, while weft's split is collective over the parent, this module wraps
    ``torch.distributed.distributed_c10d._new_process_group_helper``: a rank
    that is not a member of a new weft group joins the split with an empty
    list. ``new_group(..., use_local_synchronization=True)`` is therefore not
    supported with weft (the non-members never call new_group).

Device maps
    torch returns a Python ProcessGroup as the whole group (it cannot be
    registered per device beside a C++ backend). With a map such as
    ``"cpu:gloo,cuda:weft"`` the group is this ProcessGroup, and it forwards
    the tensors of the devices the map gives to gloo to a ProcessGroupGloo of
    its own (created on the group's store), so the map is honoured.

Tensors
    CPU tensors of every dtype weft has (int8..int64, uint8, float16/32/64,
    bfloat16; bool as uint8 with SUM->MAX, PRODUCT->MIN). Non-contiguous
    tensors go through a contiguous copy that is copied back on completion,
    as gloo does. CUDA tensors are refused with WeftUnsupportedError: the GPU
    collectives exist in C (weft_*_on_stream) and the package's Comm takes
    device arrays, but wiring CUDA tensors through this backend (streams,
    events, futures) is a follow-up; nothing is ever copied to the host
    silently.

Reductions
    SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR map to weft's ops (weft
    decides which dtype pairings are valid; its message is raised).
    PREMUL_SUM is refused: torch does not expose its factor to Python.

Work objects
    Every operation is posted nonblocking; the returned :class:`WeftWork`
    has ``wait(timeout)``, ``is_completed()``, ``get_future()`` (a
    torch.futures.Future completed with the output tensors), ``exception()``,
    ``result()``. ``async_op=False`` callers get the same Work, waited on by
    torch.distributed. Errors are ``WeftDistError`` (a
    ``torch.distributed.DistBackendError``) carrying weft's text (peer lost,
    the rank a timeout waited for); timeouts are ``WeftDistTimeoutError``
    (also a ``TimeoutError``). The deadline of an operation is its group's
    timeout from when it was posted (``wait(timeout)`` sets its own).

    ``get_future()`` waits for the operation before returning its Future
    (completed). DDP calls it right after each bucket's allreduce, so on this
    backend DDP's communication does not overlap backward (correct, slower);
    a progress thread completing futures is a follow-up.

Threads (the decision)
    libweft is built ``threads=funneled``: one thread at a time may call into
    it (MPI's SERIALIZED). DDP and FSDP call collectives from hook threads
    while the main thread may too, and ctypes releases the GIL in every
    call. So this backend serialises every weft call with one process-wide
    lock (``_LOCK``), and never holds it across an unbounded wait: a wait is
    a loop of short ``weft_wait_timeout`` slices (at most ``_SLICE`` seconds
    each) taken under the lock, released in between (with a yield when
    another thread is waiting to post), until the operation completes or its
    deadline passes. A blocking call thus cannot deadlock against a
    nonblocking one posted from another thread: the poster gets the lock
    within one slice. Making weft THREAD_MULTIPLE is the other option in
    issue 23; it needs C changes and is left to the library.

Warm-up
    ``WEFT_TORCH_WARMUP=1`` (or ``ProcessGroupWeft.Options(warmup=True)`` /
    ``weft.torch.set_warmup(True)``) runs ``Comm.warmup()`` (every endpoint
    connected) and a one-element allreduce on each new group at creation.
"""

from __future__ import annotations

import ctypes
import datetime
import functools
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as _c10d

from . import _lib
from ._comm import Comm, ReduceOp, Work, init as _weft_init
from .errors import WeftError, WeftTimeoutError, WeftUnsupportedError, make_error

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
# Work
# --------------------------------------------------------------------------------------------


class WeftWork(dist._Work):
    """The Work of one weft operation (or of a few posted together)."""

    def __init__(
        self,
        pg: "ProcessGroupWeft",
        kind: str,
        works: Sequence[Work],
        outputs: Any,
        finish: Optional[Callable[[], None]] = None,
        timeout: Optional[float] = None,
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
        fut = self._future
        if fut is not None and not fut.done():
            if error is None:
                fut.set_result(self._outputs)
            else:
                fut.set_exception(error)

    def _wrap(self, e: WeftError) -> WeftDistError:
        cls = WeftDistTimeoutError if isinstance(e, WeftTimeoutError) else WeftDistError
        err = cls(f"weft {self._kind} on {self._pg_name} failed: {e}")
        err.__cause__ = e
        return err

    def _poll(self) -> bool:
        """One nonblocking look at every sub-work; True when all are done."""
        for w in self._works:
            try:
                with _Posting():
                    done = w.is_completed()
            except WeftError as e:
                self._settle(self._wrap(e))
                return True
            if not done:
                return False
        try:
            for w in self._works:
                w.wait()  # completed: raises its error, if any, without calling C
        except WeftError as e:
            self._settle(self._wrap(e))
            return True
        self._settle(None)
        return True

    def is_completed(self) -> bool:
        with self._state_lock:
            if self._done:
                return True
            return self._poll()

    def is_success(self) -> bool:
        return self.is_completed() and self._error is None

    def exception(self) -> Optional[BaseException]:
        return self._error

    def result(self) -> Any:
        self.wait()
        return self._outputs

    def wait(self, timeout: Any = None) -> bool:
        """Waits until the operation is done and returns True, or raises its error.

        timeout: seconds or a timedelta from now (0 / None / negative: the
        group's timeout, counted from when the operation was posted)."""
        with self._state_lock:
            if not self._done:
                t = _seconds(timeout)
                now = time.monotonic()
                if t is not None:
                    deadline = now + t
                    limit = t
                elif self._timeout is not None:
                    deadline = self._posted_at + self._timeout
                    limit = self._timeout
                else:
                    deadline = float("inf")
                    limit = float("inf")
                self._wait_until(deadline, limit)
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
                        f"weft {self._kind} on {self._pg_name} timed out after {limit:g} s "
                        "(the group's timeout, or wait(timeout))"
                    )
                    if last_detail:
                        msg += f"; weft: {last_detail}"
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

    def get_future(self) -> torch.futures.Future:
        """A Future completed with the output tensors (waits for the operation first:
        see the module's notes)."""
        with self._state_lock:
            if self._future is None:
                self._future = torch.futures.Future()
                if self._done:
                    self._complete_future()
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


def _weft_op(op: Any, what: str, dtype: Optional[torch.dtype] = None) -> ReduceOp:
    kind = op.op if hasattr(op, "op") and not isinstance(op, dist.ReduceOp.RedOpType) else op
    if kind == dist.ReduceOp.RedOpType.PREMUL_SUM:
        raise WeftUnsupportedError(
            f"weft {what}: PREMUL_SUM is not supported (torch does not expose its factor to "
            "Python backends); multiply the tensor, then use SUM"
        )
    try:
        r = _REDUCE_OPS[kind]
    except (KeyError, TypeError):
        raise WeftUnsupportedError(f"weft {what}: reduce op {op!r} is not supported") from None
    if dtype is torch.bool:
        r = {ReduceOp.SUM: ReduceOp.MAX, ReduceOp.PRODUCT: ReduceOp.MIN}.get(r, r)
    return r


class _Staged:
    """A tensor as weft sees it: itself, or a contiguous copy written back on finish."""

    def __init__(self, t: torch.Tensor, what: str, output: bool):
        if t.device.type != "cpu":
            raise WeftUnsupportedError(
                f"weft {what}: {t.device} tensors are not supported by the weft torch backend yet "
                "(CPU tensors only; the GPU collectives exist in libweft and will be wired in a "
                "follow-up). Nothing was copied: move the tensor to the CPU yourself, or map this "
                "device to another backend (e.g. backend='cpu:weft,cuda:nccl')"
            )
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
    ):
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self._store = store
        self._timeout_s = _seconds(timeout)
        self._group_name_given = group_name or ""
        self._pg_group_name = ""
        self._pg_group_desc = ""
        opts = options if isinstance(options, ProcessGroupWeft.Options) else ProcessGroupWeft.Options()
        world = _weft_init()
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
        # Devices the backend map gives to gloo: served by a gloo backend of our own.
        self._gloo: Optional[Any] = None
        self._gloo_devices = {d for d, b in (other_devices or {}).items() if b == "gloo"}
        if self._gloo_devices:
            gstore = dist.PrefixStore("weft-gloo/", store)
            self._gloo = dist.ProcessGroupGloo(
                gstore, rank, size, timeout if timeout is not None else datetime.timedelta(minutes=30)
            )
        if _warmup_enabled(opts.warmup):
            self.warmup()

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

    # -- helpers ------------------------------------------------------------------------

    def _gloo_for(self, tensors: Sequence[torch.Tensor]) -> Optional[Any]:
        if self._gloo is not None and tensors and tensors[0].device.type in self._gloo_devices:
            return self._gloo
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
    ) -> WeftWork:
        timeout = self._op_timeout(opts)
        fin = _finisher(staged)
        if finish is not None:
            f0 = fin
            fin = (lambda: (f0() if f0 else None, finish()) and None) if f0 else finish
        try:
            with _Posting():
                works = list(post())
        except WeftError as e:
            raise WeftDistError(f"weft {kind} on {self._desc()}: {e}") from e
        return WeftWork(self, kind, works, outputs, fin, timeout)

    @staticmethod
    def _one(tensors: Sequence[torch.Tensor], what: str) -> torch.Tensor:
        if len(tensors) != 1:
            raise WeftUnsupportedError(f"weft {what}: one tensor per call (got {len(tensors)})")
        return tensors[0]

    # -- collectives --------------------------------------------------------------------

    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        g = self._gloo_for(tensors)
        if g is not None:
            return g.allreduce(tensors, opts)
        opts = opts or dist.AllreduceOptions()
        t = self._one(tensors, "allreduce")
        s = _Staged(t, "allreduce", output=True)
        op = _weft_op(opts.reduceOp, "allreduce", t.dtype)
        return self._post(
            "allreduce",
            tensors,
            [s],
            lambda: [self._comm.all_reduce(s.t, op, async_op=True, timeout=float("inf"))],
            opts,
        )

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        g = self._gloo_for(tensors)
        if g is not None:
            return g.allreduce_coalesced(tensors, opts)
        opts = opts or dist.AllreduceCoalescedOptions()
        staged = [_Staged(t, "allreduce_coalesced", output=True) for t in tensors]
        ops = [_weft_op(opts.reduceOp, "allreduce_coalesced", t.dtype) for t in tensors]
        return self._post(
            "allreduce_coalesced",
            tensors,
            staged,
            lambda: [
                self._comm.all_reduce(s.t, op, async_op=True, timeout=float("inf"))
                for s, op in zip(staged, ops)
            ],
            opts,
        )

    def broadcast(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        g = self._gloo_for(tensors)
        if g is not None:
            return g.broadcast(tensors, opts)
        opts = opts or dist.BroadcastOptions()
        s = _Staged(self._one(tensors, "broadcast"), "broadcast", output=True)
        root = opts.rootRank
        return self._post(
            "broadcast",
            tensors,
            [s],
            lambda: [self._comm.broadcast(s.t, root, async_op=True, timeout=float("inf"))],
            opts,
        )

    def reduce(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        g = self._gloo_for(tensors)
        if g is not None:
            return g.reduce(tensors, opts)
        opts = opts or dist.ReduceOptions()
        t = self._one(tensors, "reduce")
        s = _Staged(t, "reduce", output=True)
        op = _weft_op(opts.reduceOp, "reduce", t.dtype)
        root = opts.rootRank
        return self._post(
            "reduce",
            tensors,
            [s],
            lambda: [self._comm.reduce(s.t, root, op, async_op=True, timeout=float("inf"))],
            opts,
        )

    def allgather(
        self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor], opts: Any = None
    ) -> Any:
        g = self._gloo_for(input_tensors)
        if g is not None:
            return g.allgather(output_tensors, input_tensors, opts)
        inp = _Staged(self._one(input_tensors, "allgather"), "allgather", output=False)
        outs = [_Staged(o, "allgather", output=True) for o in self._one(output_tensors, "allgather")]
        return self._post(
            "allgather",
            output_tensors,
            outs,
            lambda: [
                self._comm.all_gather([o.t for o in outs], inp.t, async_op=True, timeout=float("inf"))
            ],
            opts,
        )

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        g = self._gloo_for([input])
        if g is not None:
            return g._allgather_base(output, input, opts or dist.AllgatherOptions())
        i = _Staged(input, "all_gather_into_tensor", output=False)
        o = _Staged(output, "all_gather_into_tensor", output=True)
        return self._post(
            "all_gather_into_tensor",
            [output],
            [o],
            lambda: [self._comm.all_gather_single(o.t, i.t, async_op=True, timeout=float("inf"))],
            opts,
        )

    def allgather_into_tensor_coalesced(
        self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], opts: Any = None
    ) -> Any:
        ins = [_Staged(t, "allgather_into_tensor_coalesced", output=False) for t in inputs]
        outs = [_Staged(t, "allgather_into_tensor_coalesced", output=True) for t in outputs]
        return self._post(
            "allgather_into_tensor_coalesced",
            outputs,
            outs,
            lambda: [
                self._comm.all_gather_single(o.t, i.t, async_op=True, timeout=float("inf"))
                for o, i in zip(outs, ins)
            ],
            opts,
        )

    def reduce_scatter(
        self, output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]], opts: Any = None
    ) -> Any:
        g = self._gloo_for(output_tensors)
        if g is not None:
            return g.reduce_scatter(output_tensors, input_tensors, opts)
        opts = opts or dist.ReduceScatterOptions()
        out = self._one(output_tensors, "reduce_scatter")
        o = _Staged(out, "reduce_scatter", output=True)
        ins = [_Staged(t, "reduce_scatter", output=False) for t in self._one(input_tensors, "reduce_scatter")]
        op = _weft_op(opts.reduceOp, "reduce_scatter", out.dtype)
        return self._post(
            "reduce_scatter",
            output_tensors,
            [o],
            lambda: [
                self._comm.reduce_scatter(o.t, [i.t for i in ins], op, async_op=True, timeout=float("inf"))
            ],
            opts,
        )

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        g = self._gloo_for([input])
        if g is not None:
            return g._reduce_scatter_base(output, input, opts or dist.ReduceScatterOptions())
        opts = opts or dist.ReduceScatterOptions()
        i = _Staged(input, "reduce_scatter_tensor", output=False)
        o = _Staged(output, "reduce_scatter_tensor", output=True)
        op = _weft_op(opts.reduceOp, "reduce_scatter_tensor", output.dtype)
        return self._post(
            "reduce_scatter_tensor",
            [output],
            [o],
            lambda: [
                self._comm.reduce_scatter_single(o.t, i.t, op, async_op=True, timeout=float("inf"))
            ],
            opts,
        )

    def reduce_scatter_tensor_coalesced(
        self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], opts: Any = None
    ) -> Any:
        opts = opts or dist.ReduceScatterOptions()
        ins = [_Staged(t, "reduce_scatter_tensor_coalesced", output=False) for t in inputs]
        outs = [_Staged(t, "reduce_scatter_tensor_coalesced", output=True) for t in outputs]
        ops = [_weft_op(opts.reduceOp, "reduce_scatter_tensor_coalesced", t.dtype) for t in outputs]
        return self._post(
            "reduce_scatter_tensor_coalesced",
            outputs,
            outs,
            lambda: [
                self._comm.reduce_scatter_single(o.t, i.t, op, async_op=True, timeout=float("inf"))
                for o, i, op in zip(outs, ins, ops)
            ],
            opts,
        )

    def alltoall_base(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: List[int],
        input_split_sizes: List[int],
        opts: Any = None,
    ) -> Any:
        g = self._gloo_for([input])
        if g is not None:
            return g.alltoall_base(
                output, input, output_split_sizes, input_split_sizes, opts or dist.AllToAllOptions()
            )
        i = _Staged(input, "all_to_all_single", output=False)
        o = _Staged(output, "all_to_all_single", output=True)
        osz = list(output_split_sizes) or None
        isz = list(input_split_sizes) or None
        return self._post(
            "all_to_all_single",
            [output],
            [o],
            lambda: [
                self._comm.all_to_all_single(
                    o.t, i.t, osz, isz, async_op=True, timeout=float("inf")
                )
            ],
            opts,
        )

    def alltoall(
        self, output_tensors: List[torch.Tensor], input_tensors: List[torch.Tensor], opts: Any = None
    ) -> Any:
        g = self._gloo_for(input_tensors)
        if g is not None:
            return g.alltoall(output_tensors, input_tensors, opts or dist.AllToAllOptions())
        # Pack along a flat dimension and unpack on completion (sizes may differ per peer).
        n = self._size
        if len(output_tensors) != n or len(input_tensors) != n:
            raise WeftDistError(f"weft all_to_all: needs {n} input and {n} output tensors")
        dtype = input_tensors[0].dtype
        for t in list(input_tensors) + list(output_tensors):
            if t.device.type != "cpu":
                _Staged(t, "all_to_all", output=False)  # raises the CUDA message
            if t.dtype != dtype:
                raise WeftDistError("weft all_to_all: every tensor must have one dtype")
        send = torch.cat([t.reshape(-1) for t in input_tensors]) if n else torch.empty(0, dtype=dtype)
        recv = torch.empty(sum(t.numel() for t in output_tensors), dtype=dtype)
        isz = [t.numel() for t in input_tensors]
        osz = [t.numel() for t in output_tensors]
        s_send = _Staged(send, "all_to_all", output=False)
        s_recv = _Staged(recv, "all_to_all", output=False)

        def unpack() -> None:
            off = 0
            for t, k in zip(output_tensors, osz):
                t.copy_(recv[off : off + k].view(t.shape))
                off += k

        return self._post(
            "all_to_all",
            output_tensors,
            [],
            lambda: [
                self._comm.all_to_all_single(
                    s_recv.t, s_send.t, osz, isz, async_op=True, timeout=float("inf")
                )
            ],
            opts,
            finish=unpack,
        )

    def gather(
        self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor], opts: Any = None
    ) -> Any:
        g = self._gloo_for(input_tensors)
        if g is not None:
            return g.gather(output_tensors, input_tensors, opts)
        opts = opts or dist.GatherOptions()
        root = opts.rootRank
        i = _Staged(self._one(input_tensors, "gather"), "gather", output=False)
        if self._rank == root:
            outs = [_Staged(o, "gather", output=True) for o in self._one(output_tensors, "gather")]
            target: Any = [o.t for o in outs]
        else:
            outs, target = [], None
        return self._post(
            "gather",
            output_tensors,
            outs,
            lambda: [self._comm.gather(target, i.t, root, async_op=True, timeout=float("inf"))],
            opts,
        )

    def scatter(
        self, output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]], opts: Any = None
    ) -> Any:
        g = self._gloo_for(output_tensors)
        if g is not None:
            return g.scatter(output_tensors, input_tensors, opts)
        opts = opts or dist.ScatterOptions()
        root = opts.rootRank
        o = _Staged(self._one(output_tensors, "scatter"), "scatter", output=True)
        if self._rank == root:
            ins = [_Staged(t, "scatter", output=False) for t in self._one(input_tensors, "scatter")]
            source: Any = [s.t for s in ins]
        else:
            source = None
        return self._post(
            "scatter",
            output_tensors,
            [o],
            lambda: [self._comm.scatter(o.t, source, root, async_op=True, timeout=float("inf"))],
            opts,
        )

    def barrier(self, opts: Any = None) -> Any:
        dev = getattr(opts, "device", None) if opts is not None else None
        if self._gloo is not None and dev is not None and dev.type in self._gloo_devices:
            return self._gloo.barrier(opts)
        return self._post(
            "barrier",
            [],
            [],
            lambda: [self._comm.barrier(async_op=True, timeout=float("inf"))],
            opts,
        )

    # -- point-to-point -----------------------------------------------------------------

    def send(self, tensors: List[torch.Tensor], dst: int, tag: int = 0) -> Any:
        g = self._gloo_for(tensors)
        if g is not None:
            return g.send(tensors, dst, tag)
        s = _Staged(self._one(tensors, "send"), "send", output=False)
        return self._post(
            "send",
            tensors,
            [],
            lambda: [self._comm.isend(s.t, dst, tag, timeout=float("inf"))],
        )

    def recv(self, tensors: List[torch.Tensor], src: int, tag: int = 0) -> Any:
        g = self._gloo_for(tensors)
        if g is not None:
            return g.recv(tensors, src, tag)
        s = _Staged(self._one(tensors, "recv"), "recv", output=True)
        return self._post(
            "recv",
            tensors,
            [s],
            lambda: [self._comm.irecv(s.t, src, tag, timeout=float("inf"))],
        )

    def recv_anysource(self, tensors: List[torch.Tensor], tag: int = 0) -> Any:
        g = self._gloo_for(tensors)
        if g is not None:
            return g.recv_anysource(tensors, tag)
        s = _Staged(self._one(tensors, "recv"), "recv", output=True)
        return self._post(
            "recv",
            tensors,
            [s],
            lambda: [self._comm.irecv(s.t, None, tag, timeout=float("inf"))],
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
