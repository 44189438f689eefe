"""A reference torch.distributed backend for the weft GPU tests: "hostgloo".

FSDP on CUDA tensors over weft is checked against the same model, the same GPU
arithmetic (the same kernels on the same device), and another communication path:
this backend. Each collective copies its CUDA inputs to the host, moves them with a
gloo group on CPU tensors, and copies the result back on the caller's current stream
(synchronously: the Work it returns is complete). Reductions are not gloo's: every
rank's input is all-gathered through gloo and reduced here, left to right in rank
order, float16 / bfloat16 in float32 rounded once, AVG the correctly rounded quotient
of that sum, PREMUL_SUM the inputs times the factor (in their dtype) first. That is
weft's documented GPU reduction (coll/cuda), so FSDP on weft must give the same bits
as FSDP on this backend, for any number of ranks (gloo's own order would make them
equal only for 2 ranks, where a + b is one rounding either way).

Importing registers the backend ("hostgloo", CPU and CUDA tensors); groups come from
``dist.new_group(ranks, backend="hostgloo")``. It serves what FSDP (FULL_SHARD,
HYBRID_SHARD, fully_shard / HSDP) and DDP use: all_reduce, all_gather (tensor and
list), reduce_scatter (tensor and list), their coalesced forms, broadcast, barrier.
A test fixture, not a backend to use: every call blocks the host.
"""

from __future__ import annotations

import datetime
from typing import Any, List, Optional, Sequence

import torch
import torch.distributed as dist

BACKEND_NAME = "hostgloo"

_R = dist.ReduceOp.RedOpType


def _kind_and_factor(op: Any) -> tuple:
    kind = op.op if hasattr(op, "op") and not isinstance(op, _R) else op
    factor = None
    if kind == _R.PREMUL_SUM:
        factor = op.__getstate__()[1]
        if isinstance(factor, torch.Tensor):
            factor = factor.detach().to("cpu")
    return kind, factor


def reduce_in_rank_order(xs: Sequence[torch.Tensor], op: Any, n: int) -> torch.Tensor:
    """weft's GPU reduction of xs (one tensor a rank, in rank order), on the host."""
    kind, factor = _kind_and_factor(op)
    dtype = xs[0].dtype
    if factor is not None:
        xs = [x * factor for x in xs]
    if kind in (_R.MIN, _R.MAX):
        acc = xs[0].clone()
        for x in xs[1:]:
            acc = torch.minimum(acc, x) if kind == _R.MIN else torch.maximum(acc, x)
        return acc
    if kind not in (_R.SUM, _R.AVG, _R.PRODUCT, _R.PREMUL_SUM):
        raise RuntimeError(f"hostgloo: reduce op {op!r} is not supported")
    acc_dt = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    acc = xs[0].to(acc_dt)
    for x in xs[1:]:
        acc = acc * x.to(acc_dt) if kind == _R.PRODUCT else acc + x.to(acc_dt)
    if kind == _R.AVG:
        acc = acc / n if dtype.is_floating_point else torch.div(acc, n, rounding_mode="trunc")
    return acc.to(dtype)


class _Done(dist._Work):
    """A completed Work (the operation ran during the call)."""

    def __init__(self, outputs: List[torch.Tensor]):
        super().__init__()
        self._outputs = outputs
        self._future: Optional[torch.futures.Future] = None

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self) -> Optional[BaseException]:
        return None

    def result(self) -> Any:
        return self._outputs

    def get_future(self) -> torch.futures.Future:
        if self._future is None:
            devs = sorted({t.device for t in self._outputs if t.device.type == "cuda"}, key=str)
            self._future = torch.futures.Future(devices=devs) if devs else torch.futures.Future()
            self._future.set_result(self._outputs)
        return self._future


def _host(t: torch.Tensor) -> torch.Tensor:
    """A contiguous host copy (the caller's current stream is synchronised)."""
    return t.detach().to("cpu", copy=True).contiguous()


class ProcessGroupHostGloo(dist.ProcessGroup):
    """See the module's notes."""

    def __init__(self, store: Any, rank: int, size: int, timeout: Any):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        td = timeout if timeout is not None else datetime.timedelta(minutes=5)
        self._g = dist.ProcessGroupGloo(dist.PrefixStore("hostgloo/", store), rank, size, td)
        self._name = ""
        self._desc = ""

    # -- identity, and the group as its own backend (as weft.torch's) ---------------------
    def getBackendName(self) -> str:  # noqa: N802
        return BACKEND_NAME

    def getRank(self) -> int:  # noqa: N802
        return self._rank

    def getSize(self) -> int:  # noqa: N802
        return self._size

    def setGroupName(self, name: str) -> None:  # noqa: N802
        self._name = name

    def getGroupName(self) -> str:  # noqa: N802
        return self._name

    def setGroupDesc(self, desc: str) -> None:  # noqa: N802
        self._desc = desc

    def getGroupDesc(self) -> str:  # noqa: N802
        return self._desc

    def _get_backend(self, device: Any) -> Any:
        return self

    @property
    def supports_splitting(self) -> bool:
        return False

    @property
    def supports_coalescing(self) -> bool:
        return False

    def supports_tensor_alloc(self, device: Any) -> bool:
        return False

    def eager_connect_single_device(self, device: Any) -> None:
        pass

    def _set_sequence_number_for_group(self) -> None:
        pass

    def abort(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    # -- helpers ------------------------------------------------------------------------
    def _gather(self, x: torch.Tensor) -> List[torch.Tensor]:
        """Every rank's host tensor x, in rank order, through gloo."""
        outs = [torch.empty_like(x) for _ in range(self._size)]
        self._g.allgather([outs], [x]).wait()
        return outs

    # -- collectives --------------------------------------------------------------------
    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        for t in tensors:
            t.copy_(reduce_in_rank_order(self._gather(_host(t)), op, self._size))
        return _Done(tensors)

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        for t in tensors:
            t.copy_(reduce_in_rank_order(self._gather(_host(t)), op, self._size))
        return _Done(tensors)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        parts = self._gather(_host(input))
        output.copy_(torch.cat([p.reshape(-1) for p in parts]).reshape(output.shape))
        return _Done([output])

    def allgather_into_tensor_coalesced(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                                        opts: Any = None) -> Any:
        for o, i in zip(outputs, inputs):
            self._allgather_base(o, i)
        return _Done(outputs)

    def allgather(self, output_lists: List[List[torch.Tensor]], inputs: List[torch.Tensor],
                  opts: Any = None) -> Any:
        for outs, i in zip(output_lists, inputs):
            for o, p in zip(outs, self._gather(_host(i))):
                o.copy_(p.reshape(o.shape))
        return _Done([t for outs in output_lists for t in outs])

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        full = reduce_in_rank_order(self._gather(_host(input)), op, self._size)
        output.copy_(full.reshape(self._size, -1)[self._rank].reshape(output.shape))
        return _Done([output])

    def reduce_scatter_tensor_coalesced(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                                        opts: Any = None) -> Any:
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_base(o, i, opts)
        return _Done(outputs)

    def reduce_scatter(self, outputs: List[torch.Tensor], input_lists: List[List[torch.Tensor]],
                       opts: Any = None) -> Any:
        for o, ins in zip(outputs, input_lists):  # equal blocks: the reduce_scatter of their concatenation
            self._reduce_scatter_base(o, torch.cat([p.reshape(-1) for p in ins]), opts)
        return _Done(outputs)

    def broadcast(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        root = opts.rootRank if opts is not None else 0
        for t in tensors:
            x = _host(t)
            o = dist.BroadcastOptions()
            o.rootRank, o.rootTensor = root, 0
            self._g.broadcast([x], o).wait()
            t.copy_(x)
        return _Done(tensors)

    def barrier(self, opts: Any = None) -> Any:
        self._g.barrier().wait()
        return _Done([])


def _create(dist_opts: Any, backend_options: Any) -> ProcessGroupHostGloo:
    return ProcessGroupHostGloo(dist_opts.store, dist_opts.group_rank, dist_opts.group_size,
                                dist_opts.timeout)


if BACKEND_NAME.upper() not in getattr(dist.Backend, "_plugins", {}):
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=["cpu", "cuda"])
