"""A killed rank on the weft torch.distributed backend (run under torchrun by
run-torch-backend.sh, with a monitor interval longer than the group's timeout so that
torchrun does not tear the survivors down before they have raised): every rank does one
all_reduce, then the last rank SIGKILLs itself and the others post another all_reduce
on the default group (timeout TIMEOUT s). Each survivor must raise WeftDistError within
the timeout (plus a margin) and prints
"torch kill worker: rank R raised <class> after S s: <weft's message>", then exits 0;
torchrun reports the killed rank's failure (exit status nonzero)."""

from __future__ import annotations

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import weft.torch as wt

TIMEOUT = float(os.environ.get("KILL_TEST_TIMEOUT", "5"))
dist.init_process_group(backend="weft", timeout=datetime.timedelta(seconds=TIMEOUT))
rank, n = dist.get_rank(), dist.get_world_size()
x = torch.ones(4)
dist.all_reduce(x)
assert torch.equal(x, torch.full((4,), float(n)))
if rank == n - 1:
    print(f"torch kill worker: rank {rank} kills itself", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
t0 = time.monotonic()
try:
    for _ in range(3):  # the first may complete where the dead rank's part was not needed yet
        dist.all_reduce(torch.ones(1 << 16))
    print(f"torch kill worker: rank {rank} FAIL: the all_reduce with a killed rank completed",
          flush=True)
    sys.exit(1)
except wt.WeftDistError as e:
    dt = time.monotonic() - t0
    msg = " ".join(str(e).split())
    ok = dt < TIMEOUT + 5
    print(f"torch kill worker: rank {rank} raised {type(e).__name__} after {dt:.2f} s"
          f"{'' if ok else ' FAIL (over the timeout)'}: {msg}", flush=True)
    sys.stdout.flush()
    os._exit(0 if ok else 1)  # the world has a dead member: no orderly destroy_process_group
