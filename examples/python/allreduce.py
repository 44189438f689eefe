"""All-reduce with weft from Python: every rank adds its numbers, every rank gets the sum.

weftrun -n 4 python3 examples/python/allreduce.py
mpirun -np 4 python3 examples/python/allreduce.py
"""

import numpy as np

import weft

comm = weft.new_comm(name="example", timeout=60)  # initialises weft on first use
rank, size = comm.rank, comm.size

# Blocking, in place: each rank contributes rank + 1.
x = np.full(4, rank + 1, dtype=np.float32)
comm.all_reduce(x, weft.ReduceOp.SUM)
assert (x == size * (size + 1) / 2).all()

# Nonblocking: start it, do other work, then wait.
y = np.arange(8, dtype=np.int64) * (rank + 1)
work = comm.all_reduce(y, weft.ReduceOp.MAX, async_op=True)
work.wait(timeout=30)
assert (y == np.arange(8) * size).all()

print(f"rank {rank} of {size} ({weft.bootstrap_name()} bootstrap): sum {x[0]:g}, max {y.tolist()}")
comm.finalize()
weft.finalize()
