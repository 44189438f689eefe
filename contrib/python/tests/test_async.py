"""Async work: handles, polling, many in flight, buffers kept alive until completion."""

from __future__ import annotations

import gc
import time
import weakref

import numpy as np

import weft


def test_work_keeps_buffers_alive(comm):
    x = np.full(1000, comm.rank, dtype=np.float64)
    ref = weakref.ref(x)
    work = comm.all_reduce(x, async_op=True)
    del x
    gc.collect()
    assert ref() is not None  # the Work holds it
    work.wait()
    gc.collect()
    assert ref() is None  # released at completion


def test_result_lands_in_a_buffer_only_the_work_holds(comm):
    x = np.full(1000, comm.rank, dtype=np.float64)
    view = x[:]  # keeps x's memory alive; x itself is only held by the Work
    work = comm.all_reduce(x, async_op=True)
    del x
    gc.collect()
    work.wait()
    np.testing.assert_array_equal(view, np.full(1000, comm.size * (comm.size - 1) / 2))


def test_temporary_buffers_survive(comm):
    """Buffers only the Work refers to (temporaries, list members) stay valid."""
    outs = [np.zeros(4, dtype=np.int32) for _ in range(comm.size)]
    work = comm.all_gather(outs, np.arange(4, dtype=np.int32) * (comm.rank + 1), async_op=True)
    keep = list(outs)
    outs.clear()
    gc.collect()
    work.wait()
    for r, o in enumerate(keep):
        np.testing.assert_array_equal(o, np.arange(4) * (r + 1))


def test_is_completed_polls(comm):
    x = np.ones(10, dtype=np.int64)
    work = comm.all_reduce(x, async_op=True)
    deadline = time.monotonic() + 20
    while not work.is_completed():
        assert time.monotonic() < deadline
    work.wait()
    assert x.tolist() == [comm.size] * 10
    assert "completed" in repr(work)


def test_many_in_flight_waited_in_reverse(comm):
    bufs = [np.full(100 + i, i + comm.rank, dtype=np.float32) for i in range(8)]
    works = [comm.all_reduce(b, weft.ReduceOp.MAX, async_op=True) for b in bufs]
    gather_out = np.zeros(comm.size, dtype=np.int64)
    works.append(
        comm.all_gather_single(gather_out, np.array([comm.rank], dtype=np.int64), async_op=True)
    )
    works.append(comm.barrier(async_op=True))
    for w in reversed(works):
        w.wait()
    for i, b in enumerate(bufs):
        assert b.tolist() == [i + comm.size - 1] * (100 + i)
    assert gather_out.tolist() == list(range(comm.size))


def test_async_with_per_call_timeout(comm):
    x = np.ones(3)
    work = comm.all_reduce(x, async_op=True, timeout=15)
    assert work.wait() is True
    assert x.tolist() == [comm.size] * 3


def test_gather_list_copy_out_happens_at_completion(comm):
    outs = [np.full(2, -1, dtype=np.int16) for _ in range(comm.size)] if comm.rank == 0 else None
    work = comm.gather(outs, np.array([comm.rank, comm.rank], dtype=np.int16), 0, async_op=True)
    work.wait()
    if comm.rank == 0:
        assert [o.tolist() for o in outs] == [[r, r] for r in range(comm.size)]
