"""Training-step cost of the weft torch.distributed backend against gloo, same job, same host.

Run under torchrun with N local ranks, e.g.::

    PYTHONPATH=contrib/python/src WEFT_LIBRARY=.libs/libweft.so.0 OMP_NUM_THREADS=1 \\
        python -m torch.distributed.run --standalone --nproc-per-node 4 \\
        contrib/python/bench/bench_torch_step.py [--steps 30] [--hidden 256] [--batch 32]

Each rank builds one DDP replica of one small MLP (same seed) per backend: one on the
default group (weft), one on a group of the same ranks for each other backend
(--against, default gloo; with --device cuda, e.g. --against nccl,gloo: NCCL needs one
GPU per rank). Steps rotate through the backends (after --warmup untimed steps of
each), so drift of the machine hits all alike. A step is forward + backward (DDP's
bucket allreduces) + SGD step, timed between a barrier on that step's own backend and
the end of its GPU work (--device cuda: the rank's GPU, LOCAL_RANK modulo the GPUs);
the step time is the slowest rank's. Rank 0 prints the median (and p10 / p90) per
backend and the ratio weft / each other backend.
"""

from __future__ import annotations

import argparse
import datetime
import os
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
ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
ap.add_argument("--against", default="gloo", help="comma list of backends to compare with (gloo, nccl)")
args = ap.parse_args()

dist.init_process_group(backend="weft", timeout=datetime.timedelta(seconds=60))
rank, n = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
torch.set_num_threads(1)
dev = torch.device("cpu")
if args.device == "cuda":
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
others = [b for b in args.against.split(",") if b]


def make(group):
    torch.manual_seed(0)
    layers, d = [], 64
    for _ in range(args.layers):
        layers += [torch.nn.Linear(d, args.hidden), torch.nn.ReLU()]
        d = args.hidden
    layers.append(torch.nn.Linear(d, 1))
    model = torch.nn.Sequential(*layers).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                    bucket_cap_mb=args.bucket_mb)
    return ddp, torch.optim.SGD(ddp.parameters(), lr=0.01)


groups = {"weft": None}
for b in others:
    groups[b] = gloo if b == "gloo" else dist.new_group(backend=b)
runs = {name: make(g) for name, g in groups.items()}
nparams = sum(p.numel() for p in runs["weft"][0].parameters())
gen = torch.Generator().manual_seed(100 + rank)
times = {name: [] for name in groups}


def step(name):
    ddp, opt = runs[name]
    xb = torch.randn(args.batch, 64, generator=gen).to(dev)
    yb = torch.randn(args.batch, 1, generator=gen).to(dev)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    dist.barrier(group=groups[name])
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(ddp(xb), yb)
    loss.backward()
    opt.step()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    # the step's cost is its slowest rank's (reduced on gloo, outside the timed part)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=gloo)
    return dt.item()


names = list(groups)
for i in range(args.warmup + args.steps):
    for k in range(len(names)):
        name = names[(i + k) % len(names)]
        t = step(name)
        if i >= args.warmup:
            times[name].append(t)

if rank == 0:
    def q(v, p):
        return statistics.quantiles(v, n=10)[p] if len(v) >= 2 else v[0]

    print(f"bench_torch_step: {n} ranks on {args.device}, MLP {args.layers}x{args.hidden} ({nparams} parameters, "
          f"{nparams * 4 / 1e6:.2f} MB of gradients), batch {args.batch}, {args.steps} steps each, "
          f"torch {torch.__version__}", flush=True)
    med = {}
    for name, v in times.items():
        med[name] = statistics.median(v)
        print(f"  {name}: median {med[name] * 1e3:.2f} ms/step "
              f"(p10 {q(v, 0) * 1e3:.2f}, p90 {q(v, 8) * 1e3:.2f})", flush=True)
    for b in others:
        print(f"  ratio weft/{b} (medians): {med['weft'] / med[b]:.2f}", flush=True)
dist.destroy_process_group()
