"""Integers on their way to C: a value beyond C int's range (ctypes would keep its
low 32 bits) or negative where the library wants a rank, a tag or a count raises
ValueError naming the argument, before anything is posted."""

from __future__ import annotations

import time

import numpy as np
import pytest

import weft

BIG = 2**32  # truncated by ctypes to 0: the value a silent bug would use
FAR = 2**63  # not even an int64


def _peer(comm: weft.Comm) -> int:
    return (comm.rank + 1) % comm.size


def test_send_dst_and_tag_beyond_c_int(comm):
    x = np.zeros(2, np.int32)
    # dst 2**32 + 1 used to reach rank 1, with tag 2**32 + 5 arriving as tag 5
    with pytest.raises(ValueError, match=r"send: dst = 4294967297 does not fit in a C int"):
        comm.send(x, dst=BIG + 1, tag=BIG + 5)
    with pytest.raises(ValueError, match=r"send: tag = 4294967301 does not fit"):
        comm.send(x, dst=_peer(comm), tag=BIG + 5)
    with pytest.raises(ValueError, match="recv: src"):
        comm.recv(x, src=BIG + 1)
    with pytest.raises(ValueError, match="recv: tag"):
        comm.irecv(x, src=_peer(comm), tag=BIG)
    comm.barrier()


def test_negative_ranks_and_tags(comm):
    x = np.zeros(1, np.float64)
    with pytest.raises(ValueError, match=r"send: dst = -1 is negative"):
        comm.send(x, -1)
    with pytest.raises(ValueError, match=r"send: tag = -1 is negative"):
        comm.isend(x, _peer(comm), tag=-1)
    with pytest.raises(ValueError, match=r"recv: src = -2 is negative: .*weft.ANY_SOURCE \(-1\)"):
        comm.recv(x, src=-2)
    with pytest.raises(ValueError, match=r"recv: tag = -3 is negative: .*weft.ANY_TAG \(-1\)"):
        comm.recv(x, src=0, tag=-3)
    # weft.ANY_SOURCE / weft.ANY_TAG are still taken: a ring exchange through them
    w = comm.irecv(x, src=weft.ANY_SOURCE, tag=weft.ANY_TAG)
    comm.send(np.full(1, comm.rank, np.float64), _peer(comm), tag=7)
    w.wait()
    assert w.status.source == (comm.rank - 1) % comm.size and w.status.tag == 7


@pytest.mark.parametrize("root", [BIG, -1, FAR])
def test_roots(comm, root):
    x = np.zeros(2, np.float32)
    outs = [np.zeros(2, np.float32) for _ in range(comm.size)]
    for what, call in [
        ("broadcast", lambda: comm.broadcast(x, root)),
        ("reduce", lambda: comm.reduce(x, root)),
        ("gather", lambda: comm.gather(outs, x, root)),
        ("scatter", lambda: comm.scatter(x, outs, root)),
    ]:
        with pytest.raises(ValueError, match=f"{what}: root = {root} "):
            call()


def test_op_beyond_c_int(comm):
    """op 2**32 used to arrive as 0 (SUM) and run."""
    x = np.ones(2, np.int32)
    with pytest.raises(ValueError, match="all_reduce: op = 4294967296 does not fit"):
        comm.all_reduce(x, BIG)
    with pytest.raises(ValueError, match="reduce_scatter_single: op"):
        comm.reduce_scatter_single(np.zeros(1, np.int32), np.ones(comm.size, np.int32), BIG)
    np.testing.assert_array_equal(x, [1, 1])


def test_split_sizes_beyond_int64(comm):
    n = comm.size
    x = np.zeros(n, np.int64)
    with pytest.raises(ValueError, match=r"input_split_sizes\[\] = 9223372036854775808"):
        comm.all_to_all_single(x, x, [1] * n, [FAR] + [1] * (n - 1))


def test_queries(comm):
    with pytest.raises(ValueError, match="world_rank: rank = 4294967296"):
        comm.world_rank(BIG)
    with pytest.raises(ValueError, match="peer_info: rank = -1 is negative"):
        comm.peer_info(-1)
    with pytest.raises(ValueError, match="abort: code"):
        comm.abort(BIG)  # refused before the call: nothing is aborted
    with pytest.raises(ValueError, match="strerror: code"):
        weft.strerror(BIG - 1)  # 2**32 - 1 was -1's text
    with pytest.raises(ValueError, match="agree: flag"):
        comm.agree(BIG + 1)  # every rank: refused before the call
    with pytest.raises(ValueError, match="barrier: stream"):
        comm.barrier(stream=2**64)


def test_bad_color_on_one_rank_leaves_nobody_waiting(comm):
    """A creation call is collective: the rank whose color is refused here still
    joins the library's call as an invalid member (as the library's own checks
    do), so the others go on at once, in a communicator without it, instead of
    waiting out the timeout. (color 2**32 used to arrive as 0: rank 0 joined.)"""
    t0 = time.monotonic()
    if comm.rank == 0:
        with pytest.raises(ValueError, match="split_color: color = 4294967296"):
            comm.split_color(BIG)
    else:
        sub = comm.split_color(0)
        assert sub.size == comm.size - 1
        sub.finalize()
    assert time.monotonic() - t0 < comm.timeout / 2
    comm.barrier()


def test_bad_rank_list_on_one_rank_fails_its_group(comm):
    t0 = time.monotonic()
    everyone = list(range(comm.size))
    if comm.rank == 0:
        with pytest.raises(ValueError, match=r"split: ranks\[\] = 4294967296"):
            comm.split([BIG + r for r in everyone])
    elif comm.size > 1:
        with pytest.raises(weft.WeftArgumentError):
            comm.split(everyone)
    with pytest.raises(ValueError, match="split_node: key"):
        comm.split_node(key=-BIG)  # every rank
    assert time.monotonic() - t0 < comm.timeout / 2
    comm.barrier()


def test_helper_messages():
    from weft._ints import INT64_MAX, c_int_arg

    assert c_int_arg(True, "x") == 1
    assert c_int_arg(np.int64(7), "x", 0) == 7
    assert c_int_arg(-1, "src", 0, special={-1: "weft.ANY_SOURCE"}) == -1
    with pytest.raises(ValueError, match="x must be an integer, not float"):
        c_int_arg(1.0, "x")
    with pytest.raises(ValueError, match="n = -2 is negative: it must be >= 0"):
        c_int_arg(-2, "n", 0, INT64_MAX)
    with pytest.raises(ValueError, match=r"n = 2147483648 does not fit in a C int \(at most 2147483647\)"):
        c_int_arg(2**31, "n")
    with pytest.raises(ValueError, match=r"k = -2147483649 is below -2147483648"):
        c_int_arg(-(2**31) - 1, "k")
