"""Communicators: creation, options and hints, torchcomms split, MPI split, node split."""

from __future__ import annotations

import datetime
import os

import numpy as np
import pytest

import weft
from weft import HintState


def test_world_identity(world):
    assert world.name == "world"
    assert 0 <= world.rank < world.size
    assert world is weft.world() and world is weft.init()
    assert weft.is_initialized()
    env_size = os.environ.get("WORLD_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE")
    if env_size:
        assert world.size == int(env_size)
    expected = os.environ.get("WEFT_TEST_BOOTSTRAP")
    if expected:
        assert weft.bootstrap_name() == expected


def test_version_and_library():
    assert weft.version_info()[0] == 0
    assert weft.version().startswith("0.")
    assert os.path.exists(weft.library_path()) or "libweft" in weft.library_path()
    assert "cuda=" in weft.build_info()


def test_local_rank_and_node(world):
    assert 0 <= weft.local_rank() < weft.local_size() <= world.size
    node, nnodes = weft.node_info()
    assert 0 <= node < nnodes
    assert isinstance(weft.placement(), str)


def test_new_comm_options(world):
    c = weft.new_comm(name="opts", timeout=datetime.timedelta(seconds=12))
    assert (c.name, c.size, c.rank) == ("opts", world.size, world.rank)
    assert c.timeout == 12
    c.timeout = 7.5
    assert c.timeout == 7.5
    c.barrier()
    c.finalize()


def test_hint_status(world):
    hints = {
        "timeout": 9,
        "max_ctas": 16,
        "is_high_priority_stream": True,
        "allreduce_algorithm": "no_such_algorithm",
        "bcast_algorithm": "binomial",
        "color_of_the_sky": "blue",
    }
    with weft.new_comm(name="hinted", timeout=20, hints=hints) as c:
        st = c.hint_status("timeout")
        assert st.state == HintState.APPLIED and c.timeout == 9  # the hint wins
        # GPU hints: applied where coll/cuda's kernels are built, ignored with the reason elsewhere
        gpu = "collectives: coll/cuda" in weft.build_info()
        want = HintState.APPLIED if gpu else HintState.IGNORED
        assert c.hint_status("max_ctas").state == want
        reason = c.hint_status("max_ctas").reason
        if gpu:
            assert "at most 16 blocks" in reason, reason
        else:  # "this build has no GPU collectives (...)" (older: "... no CUDA ...")
            assert "GPU" in reason or "CUDA" in reason, reason
        assert c.hint_status("is_high_priority_stream").state == want
        assert c.hint_status("allreduce_algorithm").state == HintState.REJECTED
        assert c.hint_status("bcast_algorithm").state == HintState.APPLIED
        st = c.hint_status("color_of_the_sky")
        assert st.state == HintState.IGNORED and "unknown hint" in st.reason
        assert c.hint_status("never_given").state == HintState.NOT_SET
        listed = c.hints()
        assert listed["is_high_priority_stream"][0] == "true"
        assert set(listed) == set(hints)
        # A rejected algorithm hint does not break the collective.
        x = np.ones(3)
        c.all_reduce(x)
        np.testing.assert_array_equal(x, [c.size] * 3)
    with pytest.raises(weft.WeftCommError):
        c.barrier()


def test_split_torchcomms_even_odd(comm):
    """Each rank names its own group's ranks, in new-rank order."""
    mine = [r for r in range(comm.size) if r % 2 == comm.rank % 2]
    sub = comm.split(mine, name="parity", hints={"allreduce_algorithm": "ring"}, timeout=15)
    assert sub is not None
    assert sub.size == len(mine) and sub.rank == mine.index(comm.rank)
    assert sub.name == "parity" and sub.timeout == 15
    assert [sub.world_rank(i) for i in range(sub.size)] == [comm.world_rank(r) for r in mine]
    assert sub.hint_status("allreduce_algorithm").state == HintState.APPLIED
    x = np.array([comm.rank], dtype=np.int64)
    sub.all_reduce(x)
    assert x[0] == sum(mine)
    sub.finalize()


def test_split_non_members_get_none(comm):
    """Ranks that join no group pass an empty list and get None."""
    group = [0] if comm.size < 3 else [2, 0]  # new-rank order as listed
    sub = comm.split(group if comm.rank in group else [], name="some")
    if comm.rank not in group:
        assert sub is None
        return
    assert sub is not None and sub.rank == group.index(comm.rank) and sub.size == len(group)
    y = np.array([comm.rank + 1.0])
    sub.all_reduce(y, weft.ReduceOp.MAX)
    assert y[0] == max(group) + 1
    sub.finalize()


def test_split_color_key(comm):
    """MPI split: color groups, ordered by key (here: reversed rank order)."""
    color = comm.rank % 2
    sub = comm.split_color(color, key=-comm.rank, name="colored")
    members = [r for r in range(comm.size) if r % 2 == color]
    assert sub.size == len(members)
    assert sub.rank == sorted(members, reverse=True).index(comm.rank)
    sub.finalize()
    none = comm.split_color(None if comm.rank == 0 else 1)
    if comm.rank == 0:
        assert none is None
    else:
        assert none.size == comm.size - 1
        none.finalize()


def test_split_node(comm):
    node = comm.split_node(name="node")
    me = np.array([weft.node_info()[0]], dtype=np.int32)
    everyone = np.zeros(comm.size, dtype=np.int32)
    comm.all_gather_single(everyone, me)
    assert node.size == int(np.sum(everyone == me[0]))
    assert node.name == "node"
    node.finalize()


def test_nested_split_and_dup(comm):
    half = comm.split_color(comm.rank * 2 // comm.size)
    dup = half.dup(name="half-dup")
    assert (dup.size, dup.rank) == (half.size, half.rank)
    one = dup.split([dup.rank])
    assert one.size == 1 and one.rank == 0
    x = np.array([5])
    one.all_reduce(x)
    assert x[0] == 5
    for c in (one, dup, half):
        c.finalize()


def test_peer_info_and_warmup(comm):
    comm.warmup()
    info = comm.peer_info((comm.rank + 1) % comm.size)
    assert isinstance(info, str) and info
    with pytest.raises(weft.WeftArgumentError, match="out of range"):
        comm.peer_info(comm.size)


def test_comm_as_context_manager(world):
    with world.dup(name="ctx") as c:
        c.barrier()
    assert "finalized" in repr(c)
    with pytest.raises(weft.WeftCommError):
        c.all_reduce(np.zeros(1))
