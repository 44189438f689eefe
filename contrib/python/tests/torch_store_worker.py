"""One rank of a weft process group made without a launcher's variables (run by
run-torch-backend.sh: two plain processes, no RANK / MASTER_ADDR / torchrun):
init_process_group(init_method="file://...", rank=, world_size=), as torch's own
distributed tests do. weft bootstraps over the group's store (weft_init_oob).
Prints "torch store worker: rank R of N, ok" at the end.

usage: python torch_store_worker.py RANK WORLD_SIZE STORE_FILE"""

from __future__ import annotations

import datetime
import sys

import torch
import torch.distributed as dist

import weft
import weft.torch  # noqa: F401  (registers "weft")

rank, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group(
    "weft", init_method=f"file://{path}", rank=rank, world_size=n,
    timeout=datetime.timedelta(seconds=60),
)
assert weft.bootstrap_name() == "oob", weft.bootstrap_name()
t = torch.ones(4) * (rank + 1)
dist.all_reduce(t)
assert t.tolist() == [n * (n + 1) / 2] * 4, t
sub = dist.new_group([0, n - 1])
if rank in (0, n - 1):
    s = torch.ones(1)
    dist.all_reduce(s, group=sub)
    assert s.item() == (2 if n > 1 else 1), s
dist.destroy_process_group()
print(f"torch store worker: rank {rank} of {n}, ok", flush=True)
