"""Every collective against a numpy reference, for every dtype, blocking and async."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ALL_DTYPES, INT_DTYPES, assert_close, dtype_id, is_float, rank_data

import weft
from weft import ReduceOp

OPS = list(ReduceOp)
BITWISE = (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR)
N = 13  # an odd count: blocks never divide evenly


def reduce_ref(op: ReduceOp, stack: np.ndarray, dt: np.dtype) -> np.ndarray:
    """The reduction over axis 0 as weft defines it: integers wrap, AVG of integers
    truncates toward zero, floats are computed exactly here (inputs are small
    integers) and rounded once to the format."""
    n = stack.shape[0]
    if is_float(dt):
        f = stack.astype(np.float64)
        if op == ReduceOp.SUM:
            r = f.sum(0)
        elif op == ReduceOp.PRODUCT:
            r = f.prod(0)
        elif op == ReduceOp.MIN:
            r = f.min(0)
        elif op == ReduceOp.MAX:
            r = f.max(0)
        elif op == ReduceOp.AVG:
            r = f.sum(0) / n
        else:
            raise AssertionError(op)
        return r.astype(dt)
    if op == ReduceOp.SUM:
        return np.sum(stack, axis=0, dtype=dt)
    if op == ReduceOp.PRODUCT:
        return np.prod(stack, axis=0, dtype=dt)
    if op == ReduceOp.MIN:
        return stack.min(0)
    if op == ReduceOp.MAX:
        return stack.max(0)
    if op == ReduceOp.AVG:
        s = np.sum(stack, axis=0, dtype=dt)
        return np.trunc(s.astype(np.float64) / n).astype(dt)
    if op == ReduceOp.BAND:
        return np.bitwise_and.reduce(stack, axis=0)
    if op == ReduceOp.BOR:
        return np.bitwise_or.reduce(stack, axis=0)
    return np.bitwise_xor.reduce(stack, axis=0)


def all_inputs(comm: weft.Comm, dt: np.dtype, shape, seed: int) -> np.ndarray:
    return np.stack([rank_data(dt, r, shape, seed) for r in range(comm.size)])


def finish(work, async_op: bool) -> None:
    if async_op:
        assert isinstance(work, weft.Work)
        work.wait()
        assert work.is_completed()
    else:
        assert work is None


@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=dtype_id)
def test_all_reduce_every_op_and_dtype(comm, dt, op, seed):
    stack = all_inputs(comm, dt, (N,), seed)
    x = stack[comm.rank].copy()
    if is_float(dt) and op in BITWISE:
        with pytest.raises(weft.WeftArgumentError) as e:
            comm.all_reduce(x, op)
        assert e.value.code == -1 and "integer type" in e.value.detail
        return
    comm.all_reduce(x, op)
    assert_close(x, reduce_ref(op, stack, dt))


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
@pytest.mark.parametrize("count", [0, 1, 1031])
def test_all_reduce_counts(comm, count, async_op, seed):
    dt = np.dtype(np.float32)
    stack = all_inputs(comm, dt, (count,), seed)
    x = stack[comm.rank].copy()
    finish(comm.all_reduce(x, ReduceOp.SUM, async_op=async_op), async_op)
    assert_close(x, reduce_ref(ReduceOp.SUM, stack, dt))


def test_all_reduce_integers_wrap(comm):
    x = np.full(5, 100, dtype=np.int8)
    comm.all_reduce(x)
    want = np.array([(100 * comm.size + 128) % 256 - 128] * 5, dtype=np.int8)
    np.testing.assert_array_equal(x, want)


def test_all_reduce_2d_random_floats(comm, seed):
    rng = np.random.default_rng([seed, comm.rank])
    x = rng.standard_normal((7, 9))
    inputs = [np.random.default_rng([seed, r]).standard_normal((7, 9)) for r in range(comm.size)]
    comm.all_reduce(x, ReduceOp.AVG)
    np.testing.assert_allclose(x, np.mean(inputs, axis=0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MAX], ids=lambda o: o.name)
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=dtype_id)
def test_reduce(comm, dt, op, async_op, seed):
    root = comm.size - 1
    stack = all_inputs(comm, dt, (N,), seed)
    x = stack[comm.rank].copy()
    finish(comm.reduce(x, root, op, async_op=async_op), async_op)
    if comm.rank == root:
        assert_close(x, reduce_ref(op, stack, dt))
    else:
        assert_close(x, stack[comm.rank])  # only read


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=dtype_id)
def test_broadcast(comm, dt, async_op, seed):
    for root in sorted({0, comm.size - 1}):
        data = rank_data(dt, root, (N,), seed)
        x = data.copy() if comm.rank == root else np.zeros(N, dtype=dt)
        finish(comm.broadcast(x, root, async_op=async_op), async_op)
        assert_close(x, data)


def test_broadcast_root_may_be_read_only(comm, seed):
    data = rank_data(np.dtype(np.int32), 0, (N,), seed)
    if comm.rank == 0:
        x = data.copy()
        x.setflags(write=False)
    else:
        x = np.zeros(N, dtype=np.int32)
    comm.broadcast(x, 0)
    np.testing.assert_array_equal(x, data)


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=dtype_id)
def test_all_gather_list(comm, dt, async_op, seed):
    stack = all_inputs(comm, dt, (N,), seed)
    outs = [np.zeros(N, dtype=dt) for _ in range(comm.size)]
    finish(comm.all_gather(outs, stack[comm.rank], async_op=async_op), async_op)
    for r in range(comm.size):
        assert_close(outs[r], stack[r])


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=dtype_id)
def test_all_gather_single(comm, dt, async_op, seed):
    stack = all_inputs(comm, dt, (2, 3), seed)
    out = np.zeros((comm.size * 2, 3), dtype=dt)
    finish(comm.all_gather_single(out, stack[comm.rank], async_op=async_op), async_op)
    assert_close(out, stack.reshape(comm.size * 2, 3))


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=dtype_id)
def test_reduce_scatter_list(comm, dt, async_op, seed):
    stack = all_inputs(comm, dt, (comm.size, N), seed)  # [rank][block][N]
    out = np.zeros(N, dtype=dt)
    inputs = [stack[comm.rank][b] for b in range(comm.size)]
    finish(comm.reduce_scatter(out, inputs, ReduceOp.SUM, async_op=async_op), async_op)
    assert_close(out, reduce_ref(ReduceOp.SUM, stack[:, comm.rank], dt))


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
@pytest.mark.parametrize("op", [ReduceOp.SUM, ReduceOp.MIN], ids=lambda o: o.name)
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=dtype_id)
def test_reduce_scatter_single(comm, dt, op, async_op, seed):
    stack = all_inputs(comm, dt, (comm.size * N,), seed)
    out = np.zeros(N, dtype=dt)
    finish(comm.reduce_scatter_single(out, stack[comm.rank], op, async_op=async_op), async_op)
    block = slice(comm.rank * N, (comm.rank + 1) * N)
    assert_close(out, reduce_ref(op, stack[:, block], dt))


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=dtype_id)
def test_all_to_all_single_equal(comm, dt, async_op, seed):
    n = comm.size
    stack = all_inputs(comm, dt, (n * 3,), seed)
    out = np.zeros(n * 3, dtype=dt)
    finish(comm.all_to_all_single(out, stack[comm.rank], async_op=async_op), async_op)
    want = np.concatenate([stack[r][comm.rank * 3 : (comm.rank + 1) * 3] for r in range(n)])
    assert_close(out, want)


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
@pytest.mark.parametrize("dt", [np.dtype(np.int64), np.dtype(np.float32)], ids=dtype_id)
def test_all_to_all_single_splits(comm, dt, async_op, seed):
    """Rank r sends (r + i) % 3 rows of 4 elements to rank i."""
    n = comm.size

    def rows(src: int, dst: int) -> int:
        return (src + dst) % 3

    def block(src: int, dst: int) -> np.ndarray:
        base = rank_data(dt, src * 100 + dst, (rows(src, dst), 4), seed)
        return base

    me = comm.rank
    inp = np.concatenate([block(me, i) for i in range(n)]).reshape(-1, 4)
    out = np.zeros((sum(rows(i, me) for i in range(n)), 4), dtype=dt)
    work = comm.all_to_all_single(
        out,
        inp,
        output_split_sizes=[rows(i, me) for i in range(n)],
        input_split_sizes=[rows(me, i) for i in range(n)],
        async_op=async_op,
    )
    finish(work, async_op)
    want = np.concatenate([block(i, me) for i in range(n)]).reshape(-1, 4)
    assert_close(out, want)


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=dtype_id)
def test_gather(comm, dt, async_op, seed):
    root = comm.size // 2
    stack = all_inputs(comm, dt, (N,), seed)
    # One output buffer...
    out = np.zeros((comm.size, N), dtype=dt) if comm.rank == root else None
    finish(comm.gather(out, stack[comm.rank], root, async_op=async_op), async_op)
    if comm.rank == root:
        assert_close(out, stack)
    # ... or a list of them.
    outs = [np.zeros(N, dtype=dt) for _ in range(comm.size)] if comm.rank == root else None
    finish(comm.gather(outs, stack[comm.rank], root, async_op=async_op), async_op)
    if comm.rank == root:
        for r in range(comm.size):
            assert_close(outs[r], stack[r])


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
@pytest.mark.parametrize("dt", ALL_DTYPES, ids=dtype_id)
def test_scatter(comm, dt, async_op, seed):
    root = comm.size - 1
    stack = all_inputs(comm, dt, (N,), seed)  # block r goes to rank r
    out = np.zeros(N, dtype=dt)
    finish(
        comm.scatter(out, stack if comm.rank == root else None, root, async_op=async_op), async_op
    )
    assert_close(out, stack[comm.rank])
    out2 = np.zeros(N, dtype=dt)
    inputs = [stack[r] for r in range(comm.size)] if comm.rank == root else None
    finish(comm.scatter(out2, inputs, root, async_op=async_op), async_op)
    assert_close(out2, stack[comm.rank])


@pytest.mark.parametrize("async_op", [False, True], ids=["blocking", "async"])
def test_barrier(comm, async_op):
    finish(comm.barrier(async_op=async_op), async_op)


def test_bitwise_ops_on_every_integer_dtype(comm, seed):
    """A second look at BAND/BOR/BXOR with full-range bit patterns."""
    for dt in INT_DTYPES:
        stack = np.stack(
            [
                np.random.default_rng([seed, r])
                .integers(0, 256, size=N * dt.itemsize, dtype=np.uint8)
                .view(dt)
                for r in range(comm.size)
            ]
        )
        for op in BITWISE:
            x = stack[comm.rank].copy()
            comm.all_reduce(x, op)
            assert_close(x, reduce_ref(op, stack, dt))
