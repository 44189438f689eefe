"""Surviving a lost rank: revoke, shrink and agree from Python. Every rank runs
these; the test that kills a rank runs its own small job of three processes
(the env bootstrap on 127.0.0.1), from rank 0 only."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from conftest import TEST_TIMEOUT

import weft


def test_agree_ands_the_flags(world):
    c = world.dup(name="agree", timeout=TEST_TIMEOUT)
    flag = 0b101 if c.rank == 1 % c.size else 0b111 | (c.rank << 4)
    assert c.agree(flag) == 0b101
    assert c.agree() == 1
    with pytest.raises(weft.WeftArgumentError):
        c.agree("yes")  # type: ignore[arg-type]
    c.finalize()


def test_shrink_with_every_rank_alive(world):
    c = world.dup(name="to-shrink", timeout=TEST_TIMEOUT)
    s = c.shrink()
    assert (s.rank, s.size) == (c.rank, c.size)
    assert s.name == "to-shrink.shrink"
    assert s.timeout == c.timeout
    x = np.array([s.rank], np.int64)
    s.all_reduce(x)
    assert x[0] == s.size * (s.size - 1) // 2
    s.finalize()
    c.finalize()


def test_revoke_fails_pending_and_later_operations(world):
    c = world.dup(name="revoked", timeout=TEST_TIMEOUT)
    c.barrier()
    buf = np.zeros(1, np.int32)
    start = time.monotonic()
    if c.rank == 0:
        pending = c.irecv(buf, src=c.size - 1, tag=99)  # never sent
        time.sleep(0.2)  # the others are blocked by now
        c.revoke()
        with pytest.raises(weft.WeftRevokedError, match="revoked by its rank 0"):
            pending.wait()
    else:
        with pytest.raises(weft.WeftRevokedError, match="revoked by its rank 0") as e:
            c.recv(buf, src=0, tag=99)  # never sent either
        assert e.value.code == weft.errors.ERR_REVOKED
    assert time.monotonic() - start < TEST_TIMEOUT / 4
    assert c.is_revoked()
    with pytest.raises(weft.WeftRevokedError):
        c.all_reduce(buf)
    with pytest.raises(weft.WeftRevokedError):
        c.dup()
    c.revoke()  # twice: harmless
    world.barrier()  # the world is untouched
    s = c.shrink()  # a revoked communicator still shrinks
    assert s.size == c.size and not s.is_revoked()
    s.finalize()
    c.finalize()


_JOB = textwrap.dedent(
    """
    import os, signal, sys
    import numpy as np
    import weft

    comm = weft.init()
    comm.timeout = 30
    victim, steps = 1, 30
    step = 0
    while step < steps:
        if comm.rank == victim and step == 12 and comm.size == 3:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        x = np.full(64, float(weft.world().rank + 1) * (step + 1))
        try:
            comm.all_reduce(x)
        except (weft.WeftPeerLostError, weft.WeftRevokedError) as e:
            print(f"rank {weft.world().rank}: step {step}: {type(e).__name__}", flush=True)
            comm.revoke()
            comm = comm.shrink()
            s = np.array([step], np.int64)
            comm.all_reduce(s, weft.ReduceOp.MIN)
            step = int(s[0])
            continue
        members = [comm.world_rank(r) for r in range(comm.size)]
        want = sum(float(m + 1) * (step + 1) for m in members)
        assert np.all(x == want), (step, x[0], want)
        step += 1
    try:
        comm.agree(1)
    except weft.WeftPeerLostError as e:  # not expected: the shrunk comm is whole
        print(f"rank {weft.world().rank}: agree: {e}", flush=True)
        sys.exit(3)
    members = sorted(comm.world_rank(r) for r in range(comm.size))
    print(f"rank {weft.world().rank}: done on {comm.size} ranks: {members}", flush=True)
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_survivors_shrink_after_a_rank_is_killed(world, tmp_path):
    """Three processes of their own (not this job's ranks): rank 1 is killed in
    the middle of a loop of all_reduce; ranks 0 and 2 shrink and finish."""
    if world.rank == 0:
        script = tmp_path / "job.py"
        script.write_text(_JOB)
        port = _free_port()
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PMIX_", "OMPI_", "PMI_", "PRTE_", "TORCHELASTIC_"))
        }
        procs = []
        for r in range(3):
            env = dict(
                base,
                RANK=str(r),
                WORLD_SIZE="3",
                LOCAL_RANK=str(r),
                LOCAL_WORLD_SIZE="3",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                WEFT_BOOTSTRAP="env",
                WEFT_LOG_LEVEL="error",
            )
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(script)],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        outs = []
        for p in procs:
            try:
                out, _ = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                pytest.fail("the three-process job hung")
            outs.append(out)
        assert procs[1].returncode == -9, outs[1]
        for r in (0, 2):
            assert procs[r].returncode == 0, outs[r]
            assert f"rank {r}: done on 2 ranks: [0, 2]" in outs[r], outs[r]
            assert f"rank {r}: step 12:" in outs[r], outs[r]
    world.barrier()  # the other ranks wait here for rank 0's job
