"""Splitting communicators, torchcomms style and MPI style, with hints.

weftrun -n 4 python3 examples/python/split.py
mpirun -np 4 python3 examples/python/split.py
"""

import numpy as np

import weft

world = weft.init()
rank, size = world.rank, world.size

# torchcomms's split: every rank passes the ranks of its own new group.
evens = list(range(0, size, 2))
odds = list(range(1, size, 2))
mine = evens if rank % 2 == 0 else odds
half = world.split(
    mine, name="evens" if rank % 2 == 0 else "odds", hints={"max_ctas": 8}, timeout=30
)

total = np.array([rank], dtype=np.int64)
half.all_reduce(total)  # the sum over my group only
st = half.hint_status("max_ctas")  # nothing is dropped silently: ask what became of a hint
print(
    f"rank {rank}: {half.name} rank {half.rank} of {half.size}, sum of world ranks {total[0]}; "
    f"hint max_ctas {st.state.name}: {st.reason}"
)

# Ranks that join no group pass an empty list and get None.
leaders = world.split([0] if rank == 0 else [], name="leader")
assert (leaders is not None) == (rank == 0)

# MPI's split (color, key) and the ranks of this node.
rev = world.split_color(0, key=-rank, name="reversed")  # one group, reversed order
node = world.split_node(name="node")
print(f"rank {rank}: reversed rank {rev.rank}, node rank {node.rank} of {node.size}")

for c in (half, rev, node) + ((leaders,) if leaders else ()):
    c.finalize()
weft.finalize()
