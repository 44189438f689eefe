"""Training-step cost of the weft torch.distributed backend against gloo, same job, same host.

Run under torchrun with N local ranks, e.g.::

    PYTHONPATH=contrib/python/src WEFT_LIBRARY=.libs/libweft.so.0 OMP_NUM_THREADS=1 \\
        python -m torch.distributed.run --standalone --nproc-per-node 4 \\
        contrib/python/bench/bench_torch_step.py [--steps 30] [--hidden 256] [--batch 32]

Each rank builds two DDP replicas of one small MLP (same seed): one on the default
group (weft), one on a gloo group of the same ranks. Steps alternate weft, gloo,
weft, gloo, ... (after --warmup untimed steps of each), so drift of the machine hits
both alike. A step is forward + backward (DDP's bucket allreduces) + SGD step, timed
between two barriers on that step's own backend; the step time is the slowest
rank's. Rank 0 prints the median (and p10 / p90) per backend and the ratio weft / gloo.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time

import torch
import torch.distributed as dist

import weft.torch  # noqa: F401  (registers "weft")

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--hidden", type=int, default=256)
ap.add_argument("--layers", type=int, default=3)
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
args = ap.parse_args()

dist.init_process_group(backend="weft", timeout=datetime.timedelta(seconds=60))
rank, n = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
torch.set_num_threads(1)


def make(group):
    torch.manual_seed(0)
    layers, d = [], 64
    for _ in range(args.layers):
        layers += [torch.nn.Linear(d, args.hidden), torch.nn.ReLU()]
        d = args.hidden
    layers.append(torch.nn.Linear(d, 1))
    model = torch.nn.Sequential(*layers)
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                    bucket_cap_mb=args.bucket_mb)
    return ddp, torch.optim.SGD(ddp.parameters(), lr=0.01)


runs = {"weft": make(None), "gloo": make(gloo)}
groups = {"weft": None, "gloo": gloo}
nparams = sum(p.numel() for p in runs["weft"][0].parameters())
gen = torch.Generator().manual_seed(100 + rank)
times = {"weft": [], "gloo": []}


def step(name):
    ddp, opt = runs[name]
    xb, yb = torch.randn(args.batch, 64, generator=gen), torch.randn(args.batch, 1, generator=gen)
    dist.barrier(group=groups[name])
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(ddp(xb), yb)
    loss.backward()
    opt.step()
    dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    # the step's cost is its slowest rank's (reduced on gloo, outside the timed part)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=gloo)
    return dt.item()


for i in range(args.warmup + args.steps):
    for name in (("weft", "gloo") if i % 2 == 0 else ("gloo", "weft")):
        t = step(name)
        if i >= args.warmup:
            times[name].append(t)

if rank == 0:
    def q(v, p):
        return statistics.quantiles(v, n=10)[p] if len(v) >= 2 else v[0]

    print(f"bench_torch_step: {n} ranks, MLP {args.layers}x{args.hidden} ({nparams} parameters, "
          f"{nparams * 4 / 1e6:.2f} MB of gradients), batch {args.batch}, {args.steps} steps each, "
          f"torch {torch.__version__}", flush=True)
    med = {}
    for name, v in times.items():
        med[name] = statistics.median(v)
        print(f"  {name}: median {med[name] * 1e3:.2f} ms/step "
              f"(p10 {q(v, 0) * 1e3:.2f}, p90 {q(v, 8) * 1e3:.2f})", flush=True)
    print(f"  ratio weft/gloo (medians): {med['weft'] / med['gloo']:.2f}", flush=True)
dist.destroy_process_group()
