"""Posting from many Python threads on the weft torch.distributed backend: the time per
operation with T threads against one thread, same job, same host.

Run under torchrun with N local ranks, e.g.::

    PYTHONPATH=contrib/python/src WEFT_LIBRARY=.libs/libweft.so.0 OMP_NUM_THREADS=1 \\
        python -m torch.distributed.run --standalone --nproc-per-node 4 \\
        contrib/python/bench/bench_torch_threads.py [--threads 8] [--ops 12] [--reps 7]

Each thread posts --ops async all_reduces of --elems float32 elements on the default
group, one at a time (post, then wait), racing the other threads (every rank posts the
same shapes, so whatever pairs with whatever, each completes). A repetition is timed
from a barrier to the last thread's end on every rank (the slowest rank's time counts);
the time per operation is that over threads x ops. Repetitions alternate one thread and
--threads threads. Rank 0 prints the median (min, max) per operation for each and their
ratio. WEFT_PROGRESS_THREAD decides how the waits work (see weft.torch's notes).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import torch
import torch.distributed as dist

import weft.torch  # noqa: F401  (registers "weft")

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=8)
ap.add_argument("--ops", type=int, default=12)
ap.add_argument("--reps", type=int, default=7)
ap.add_argument("--elems", type=int, default=16)
args = ap.parse_args()

dist.init_process_group(backend="weft")
rank, n = dist.get_rank(), dist.get_world_size()


def worker(errors: list) -> None:
    try:
        for _ in range(args.ops):
            x = torch.ones(args.elems)
            dist.all_reduce(x, async_op=True).wait()
            if x[0].item() != n:
                errors.append(f"all_reduce gave {x[0].item()}, not {n}")
    except Exception as e:  # noqa: BLE001
        errors.append(f"{type(e).__name__}: {e}")


def rep(nthreads: int) -> float:
    errors: list = []
    dist.barrier()
    t0 = time.monotonic()
    ths = [threading.Thread(target=worker, args=(errors,)) for _ in range(nthreads)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    took = torch.tensor([time.monotonic() - t0], dtype=torch.float64)
    if errors:
        raise SystemExit(f"rank {rank}: {errors[0]}")
    dist.all_reduce(took, op=dist.ReduceOp.MAX)
    return took.item() / (nthreads * args.ops)


rep(1)  # warm-up
rep(args.threads)
per_op = {1: [], args.threads: []}
for _ in range(args.reps):
    for t in (1, args.threads):
        per_op[t].append(rep(t))
if rank == 0:
    one, many = statistics.median(per_op[1]), statistics.median(per_op[args.threads])

    def fmt(v: list) -> str:
        med, lo, hi = statistics.median(v) * 1e6, min(v) * 1e6, max(v) * 1e6
        return f"{med:.0f} us (min {lo:.0f}, max {hi:.0f})"

    import os

    print(f"{n} ranks, WEFT_PROGRESS_THREAD={os.environ.get('WEFT_PROGRESS_THREAD', 'auto')}, "
          f"{args.ops} async all_reduce of {args.elems} floats per thread, "
          f"{args.reps} repetitions:")
    print(f"  1 thread:  {fmt(per_op[1])} per operation")
    print(f"  {args.threads} threads: {fmt(per_op[args.threads])} per operation")
    print(f"  ratio {args.threads} threads / 1 thread: {many / one:.2f}")
dist.destroy_process_group()
