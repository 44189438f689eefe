"""A data-parallel SGD step on numpy: each rank holds a shard of the data, computes its
gradient, and an all-reduce (AVG) makes every rank take the same step.

Fits y = X w + noise (linear regression) with the same model on every rank.

    weftrun -n 4 python3 examples/python/sgd.py
    mpirun -np 4 python3 examples/python/sgd.py
"""

import numpy as np

import weft

comm = weft.new_comm(name="data-parallel", timeout=60)
rank, size = comm.rank, comm.size

# The same true model everywhere; each rank draws its own shard of the data.
features, shard, steps, lr = 8, 256, 200, 0.1
w_true = np.random.default_rng(0).standard_normal(features)
rng = np.random.default_rng(1000 + rank)
X = rng.standard_normal((shard, features))
y = X @ w_true + 0.01 * rng.standard_normal(shard)

# Same initial weights on every rank: rank 0's, broadcast.
w = np.random.default_rng(500 + rank).standard_normal(features)
comm.broadcast(w, root=0)


def global_loss(w: np.ndarray) -> float:
    loss = np.array([np.mean((X @ w - y) ** 2)])
    comm.all_reduce(loss, weft.ReduceOp.AVG)
    return float(loss[0])


first = global_loss(w)
for step in range(steps):
    grad = 2.0 / shard * X.T @ (X @ w - y)  # this shard's gradient
    comm.all_reduce(grad, weft.ReduceOp.AVG)  # the gradient over all the data
    w -= lr * grad
last = global_loss(w)

# Every rank must hold bit-identical weights.
everyone = [np.empty_like(w) for _ in range(size)]
comm.all_gather(everyone, w)
assert all(np.array_equal(everyone[0], v) for v in everyone)
assert last < first / 100, (first, last)
if rank == 0:
    print(
        f"{size} ranks, {steps} steps: loss {first:.4f} -> {last:.6f}, "
        f"|w - w_true| = {np.linalg.norm(w - w_true):.4f}"
    )
comm.finalize()
weft.finalize()
