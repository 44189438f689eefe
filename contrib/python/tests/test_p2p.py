"""Point-to-point: blocking and nonblocking, statuses, truncation, deadlines."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import ALL_DTYPES, assert_close, dtype_id, rank_data

import weft

pytestmark = pytest.mark.skipif(
    weft.init().size < 2, reason="point-to-point tests need 2 or more ranks"
)


def neighbours(comm: weft.Comm):
    return (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=dtype_id)
def test_ring_send_recv(comm, dt, seed):
    right, left = neighbours(comm)
    data = rank_data(dt, comm.rank, (17,), seed)
    got = np.zeros(17, dtype=dt)
    # Even ranks send first: blocking sends of small messages complete eagerly
    # anyway, but this keeps the test honest for any message size.
    if comm.rank % 2 == 0:
        comm.send(data, right, tag=3)
        st = comm.recv(got, left, tag=3)
    else:
        st = comm.recv(got, left, tag=3)
        comm.send(data, right, tag=3)
    assert_close(got, rank_data(dt, left, (17,), seed))
    assert st == weft.RecvStatus(left, 3, got.nbytes)


def test_isend_irecv_large(comm, seed):
    right, left = neighbours(comm)
    n = 1 << 20  # 8 MiB of float64: UCX rendezvous
    data = np.random.default_rng([seed, comm.rank]).standard_normal(n)
    got = np.empty(n)
    rw = comm.irecv(got, left, tag=9)
    sw = comm.isend(data, right, tag=9)
    assert isinstance(rw, weft.Work) and isinstance(sw, weft.Work)
    sw.wait()
    rw.wait()
    assert rw.status == weft.RecvStatus(left, 9, got.nbytes)
    np.testing.assert_array_equal(got, np.random.default_rng([seed, left]).standard_normal(n))


def test_any_source_any_tag(comm):
    if comm.rank == 0:
        got = np.zeros(1, dtype=np.int32)
        seen = set()
        for _ in range(comm.size - 1):
            st = comm.recv(got, None, None)
            assert got[0] == st.source * 10 and st.tag == st.source + 100
            seen.add(st.source)
        assert seen == set(range(1, comm.size))
    else:
        comm.send(np.array([comm.rank * 10], dtype=np.int32), 0, tag=comm.rank + 100)
    comm.barrier()


def test_messages_arrive_in_order(comm):
    right, left = neighbours(comm)
    works = [comm.isend(np.array([i], dtype=np.int64), right, tag=4) for i in range(20)]
    got = np.zeros(1, dtype=np.int64)
    for i in range(20):
        comm.recv(got, left, tag=4)
        assert got[0] == i
    for w in works:
        w.wait()


def test_recv_buffer_larger_than_message(comm):
    right, left = neighbours(comm)
    sw = comm.isend(np.arange(3, dtype=np.float32), right, tag=5)
    got = np.full(8, -1, dtype=np.float32)
    st = comm.recv(got, left, tag=5)
    sw.wait()
    assert st.nbytes == 12
    np.testing.assert_array_equal(got, [0, 1, 2, -1, -1, -1, -1, -1])


def test_truncation_raises(comm):
    right, left = neighbours(comm)
    sw = comm.isend(np.arange(8, dtype=np.int32), right, tag=6)
    with pytest.raises(weft.WeftTruncateError) as e:
        comm.recv(np.zeros(4, dtype=np.int32), left, tag=6)
    assert e.value.code == -5 and e.value.strerror == weft.strerror(-5)
    sw.wait()
    comm.barrier()


def test_recv_timeout(comm):
    """A receive from a rank that never sends fails after its timeout, naming the peer."""
    _, left = neighbours(comm)
    t0 = time.monotonic()
    with pytest.raises(weft.WeftTimeoutError) as e:
        comm.recv(np.zeros(1), left, tag=77, timeout=1)
    took = time.monotonic() - t0
    assert 0.9 <= took < 10, took
    assert e.value.code == -3 and e.value.status_name == "WEFT_ERR_TIMEOUT"
    assert e.value.strerror == weft.strerror(-3)
    assert f"rank {left}" in e.value.detail and "did not complete" in e.value.detail
    assert isinstance(e.value, TimeoutError)
    comm.barrier()


def test_work_wait_timeout_then_complete(comm):
    """A wait that times out leaves the work pending; a later wait completes it."""
    right, left = neighbours(comm)
    got = np.zeros(4, dtype=np.int16)
    work = comm.irecv(got, left, tag=8)
    with pytest.raises(weft.WeftTimeoutError):
        work.wait(timeout=0.3)
    assert not work.is_completed()
    comm.barrier()  # every rank's first wait has timed out before anyone sends
    comm.send(np.arange(4, dtype=np.int16) + comm.rank, right, tag=8)
    assert work.wait(timeout=10) is True
    assert work.is_completed()
    np.testing.assert_array_equal(got, np.arange(4) + left)
    work.wait()  # waiting again on a completed work is fine


def test_dropped_pending_irecv_is_released(comm):
    """A Work dropped while pending releases its request; traffic goes on."""
    right, left = neighbours(comm)
    comm.irecv(np.zeros(2), left, tag=12)  # never matched, dropped at once
    got = np.zeros(2)
    w = comm.irecv(got, left, tag=13)
    comm.send(np.array([1.5, 2.5]), right, tag=13)
    w.wait()
    np.testing.assert_array_equal(got, [1.5, 2.5])
    comm.barrier()


def test_bad_peer_and_tag(comm):
    with pytest.raises(weft.WeftArgumentError) as e:
        comm.send(np.zeros(1), comm.size, tag=0)
    assert "out of range" in e.value.detail or str(comm.size) in e.value.detail
    with pytest.raises(weft.WeftArgumentError):
        comm.send(np.zeros(1), 0, tag=weft.TAG_UB + 1)
