"""FSDP on the weft torch.distributed backend against gloo (run under torchrun on 4
local processes by run-torch-backend.sh; 2 also works for FULL_SHARD): a tiny model
wrapped with torch.distributed.fsdp.FullyShardedDataParallel on CPU, FULL_SHARD on the
whole world, and HYBRID_SHARD on a 2x2 layout (two simulated "nodes" of 2 ranks: shard
inside a node, replicate across) given as a (shard, replicate) pair of new_group's and as
an init_device_mesh("cpu", (2, 2)); and FSDP2's fully_shard on that 2-D mesh (HSDP).
3 SGD steps each on weft and on gloo (gloo's mesh through backend_override), same losses
and parameters within float32 rounding. Prints "torch fsdp worker: rank R of N, ok"."""

from __future__ import annotations

import datetime
import sys
import warnings

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import ShardingStrategy, fully_shard

import weft.torch as wt

warnings.filterwarnings("ignore")
dist.init_process_group(backend="weft", timeout=datetime.timedelta(seconds=30))
rank, n = dist.get_rank(), dist.get_world_size()
failures = []


def groups(backend):
    """(world, shard group, replicate group) on backend; every rank creates every group."""
    world = dist.new_group(list(range(n)), backend=backend)
    half = n // 2
    shard = replicate = None
    if n >= 4 and n % 2 == 0:
        for node in range(2):  # shard within a node: [0, 1], [2, 3]
            g = dist.new_group(list(range(node * half, (node + 1) * half)), backend=backend)
            if rank // half == node:
                shard = g
        for local in range(half):  # replicate across nodes: [0, 2], [1, 3]
            g = dist.new_group([local, local + half], backend=backend)
            if rank % half == local:
                replicate = g
    return world, shard, replicate


def fsdp1(strategy, **kw):
    return lambda model: FSDP(model, sharding_strategy=strategy, device_id=torch.device("cpu"),
                              use_orig_params=True, **kw)


def fsdp2(mesh):
    def wrap(model):
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh)
    return wrap


def train(wrap):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4),
                                torch.nn.ReLU(), torch.nn.Linear(4, 1))
    sharded = wrap(model)
    opt = torch.optim.SGD(sharded.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(3):
        xb, yb = torch.randn(4, 8, generator=g), torch.randn(4, 1, generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(sharded(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    if isinstance(sharded, FSDP):
        with FSDP.summon_full_params(sharded):
            params = torch.cat([p.detach().reshape(-1).clone() for p in sharded.parameters()])
    else:  # FSDP2: DTensor parameters
        params = torch.cat([p.full_tensor().detach().reshape(-1) for p in sharded.parameters()])
    return torch.stack(losses), params


gw, gg = groups(None), groups("gloo")  # default backend = weft
cases = [("FULL_SHARD", fsdp1(ShardingStrategy.FULL_SHARD, process_group=gw[0]),
          fsdp1(ShardingStrategy.FULL_SHARD, process_group=gg[0]))]
if gw[1] is not None:
    assert isinstance(gw[1], wt.ProcessGroupWeft) and isinstance(gw[2], wt.ProcessGroupWeft)
    hy = ShardingStrategy.HYBRID_SHARD
    cases.append(("HYBRID_SHARD 2x2 groups", fsdp1(hy, process_group=(gw[1], gw[2])),
                  fsdp1(hy, process_group=(gg[1], gg[2]))))
    if n == 4:
        names = ("replicate", "shard")
        mw = init_device_mesh("cpu", (2, 2), mesh_dim_names=names)
        mg = init_device_mesh("cpu", (2, 2), mesh_dim_names=names,
                              backend_override={"replicate": "gloo", "shard": "gloo"})
        assert isinstance(mw.get_group("shard"), wt.ProcessGroupWeft), mw.get_group("shard")
        assert not isinstance(mg.get_group("shard"), wt.ProcessGroupWeft), mg.get_group("shard")
        cases.append(("HYBRID_SHARD 2x2 device mesh", fsdp1(hy, device_mesh=mw),
                      fsdp1(hy, device_mesh=mg)))
        cases.append(("fully_shard (FSDP2) 2x2 mesh", fsdp2(mw), fsdp2(mg)))
for name, wrap_w, wrap_g in cases:
    lw, pw = train(wrap_w)
    lg, pg = train(wrap_g)
    for what, a, b in (("losses", lw, lg), ("parameters", pw, pg)):
        if a.shape != b.shape or not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
            failures.append(f"FSDP {name} {what}: weft {a} != gloo {b}")
    if rank == 0:
        print(f"FSDP {name} 3 steps, weft vs gloo: losses {[round(x, 5) for x in lw.tolist()]}, "
              f"max |diff| {(lw - lg).abs().max().item():.3g}, "
              f"parameters max |diff| {(pw - pg).abs().max().item():.3g}", flush=True)

dist.barrier()
if failures:
    for f in failures:
        print(f"rank {rank}: FAIL {f}", flush=True)
    sys.exit(1)
dist.destroy_process_group()
print(f"torch fsdp worker: rank {rank} of {n}, ok", flush=True)
