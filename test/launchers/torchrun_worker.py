"""A worker for test_torchrun.sh: weft from Python under torchrun.

    torchrun ... test/launchers/torchrun_worker.py [--torch] [--fail-rank R]

Initialises weft (the torchstore bootstrap when torchrun's agent serves a
store), checks rank and size against torchrun's RANK / WORLD_SIZE, runs an
all-reduce and a barrier, and prints one line per rank:

    torchrun worker: rank R of N, bootstrap B, attempt A, torch|no torch, ok

--torch       import torch first and reduce a torch CPU tensor (through
              DLPack), as a training script would hold its data
--fail-rank R on the first attempt (TORCHELASTIC_RESTART_COUNT=0), rank R
              exits with status 3 right after init, while the others wait in
              an all-reduce: torchrun must restart the group (--max-restarts),
              and the new attempt must start cleanly
"""

import argparse
import os
import sys
from array import array

ap = argparse.ArgumentParser()
ap.add_argument("--torch", action="store_true")
ap.add_argument("--fail-rank", type=int, default=-1)
args = ap.parse_args()

if args.torch:
    import torch  # noqa: F401  (before weft, as in a training script)

import weft

attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
comm = weft.new_comm(name="torchrun-test", timeout=60)
rank, size = comm.rank, comm.size
want = (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
assert (rank, size) == want, f"weft says rank {rank} of {size}, torchrun {want}"


def say(line: str) -> None:
    # One write per line: the ranks share torchrun's stdout.
    os.write(1, (line + "\n").encode())


if attempt == 0 and rank == args.fail_rank:
    say(f"torchrun worker: rank {rank} fails its first attempt on purpose")
    os._exit(3)

expect = size * (size + 1) / 2
if args.torch:
    t = torch.full((16,), float(rank + 1), dtype=torch.float32)
    comm.all_reduce(t, weft.ReduceOp.SUM)
    assert bool((t == expect).all()), f"all_reduce gave {t.tolist()}, expected {expect}"
else:
    x = array("d", [rank + 1.0] * 16)
    comm.all_reduce(x, weft.ReduceOp.SUM)
    assert all(v == expect for v in x), f"all_reduce gave {list(x)}, expected {expect}"
comm.barrier()
say(
    f"torchrun worker: rank {rank} of {size}, bootstrap {weft.bootstrap_name()}, attempt {attempt}, "
    f"{'torch' if args.torch else 'no torch'}, ok"
)
comm.finalize()
weft.finalize()
sys.exit(0)
