"""Error cases: each raises the right class with the C status and texts, on every rank
alike, and never leaves the ranks out of step."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import weft
from weft import ReduceOp


def test_exception_hierarchy():
    for cls in (
        weft.WeftArgumentError,
        weft.WeftTimeoutError,
        weft.WeftPeerLostError,
        weft.WeftTruncateError,
        weft.WeftUnsupportedError,
        weft.WeftCommError,
        weft.WeftNotInitializedError,
        weft.WeftLibraryNotFoundError,
    ):
        assert issubclass(cls, weft.WeftError)
    assert issubclass(weft.WeftArgumentError, ValueError)
    assert issubclass(weft.WeftTimeoutError, TimeoutError)


def test_dtype_mismatch(comm):
    with pytest.raises(weft.WeftArgumentError) as e:
        comm.all_gather_single(np.zeros(comm.size, np.float32), np.zeros(1, np.int32))
    assert "float32" in str(e.value) and "int32" in str(e.value)
    assert e.value.code == -1 and e.value.strerror == weft.strerror(-1)


def test_messages_name_the_operation_once(comm):
    """Each buffer's label names its operation; a message about two of them says it once."""
    with pytest.raises(weft.WeftArgumentError) as e:
        comm.all_gather_single(np.zeros(comm.size, np.float64), np.zeros(1, np.float32))
    assert e.value.detail == (
        "all_gather_single: output is float64 but input is float32; "
        "every buffer of one call has the same dtype"
    )
    with pytest.raises(weft.WeftArgumentError) as e:
        comm.all_gather([np.zeros(2, np.int32)] * comm.size, np.zeros(2))
    assert e.value.detail.startswith("all_gather: tensor_list[0] is int32 but tensor is float64;")
    with pytest.raises(weft.WeftArgumentError) as e:
        comm.all_to_all_single(np.zeros(4 * comm.size), np.zeros(4 * comm.size), [3] * comm.size)
    assert e.value.detail == (
        f"all_to_all_single: output_split_sizes add up to {3 * comm.size} rows but output has "
        f"{4 * comm.size} (along dimension 0)"
    )
    if comm.size > 1:
        with pytest.raises(weft.WeftArgumentError) as e:
            comm.all_to_all_single(
                np.zeros(comm.size), np.zeros(comm.size + 1), output_split_sizes=[1] * comm.size
            )
        assert e.value.detail.startswith(
            f"all_to_all_single: input: {comm.size + 1} rows do not split into {comm.size} equal parts"
        )


def test_short_output_buffer(comm):
    with pytest.raises(weft.WeftArgumentError, match="too short"):
        comm.all_gather_single(np.zeros(2 * comm.size - 1, np.int64), np.zeros(2, np.int64))
    with pytest.raises(weft.WeftArgumentError, match="too short"):
        comm.reduce_scatter_single(np.zeros(3), np.zeros(3 * comm.size - 1))
    with pytest.raises(weft.WeftArgumentError, match="list of"):
        comm.all_gather([np.zeros(2)] * (comm.size + 1), np.zeros(2))


def test_non_contiguous_output_rejected(comm):
    x = np.zeros(10, dtype=np.float64)[::2]
    with pytest.raises(weft.WeftArgumentError, match="non-contiguous"):
        comm.all_reduce(x)
    y = np.zeros((4, 4), dtype=np.int32).T  # Fortran order
    with pytest.raises(weft.WeftArgumentError, match="non-contiguous"):
        comm.all_reduce(y)
    m = memoryview(bytearray(16))[::2]
    with pytest.raises(weft.WeftArgumentError, match="non-contiguous"):
        comm.all_reduce(m)


def test_read_only_output_rejected_input_fine(comm):
    x = np.ones(4, dtype=np.float32)
    x.setflags(write=False)
    with pytest.raises(weft.WeftArgumentError, match="read-only"):
        comm.all_reduce(x)
    with pytest.raises(weft.WeftArgumentError, match="read-only"):
        comm.all_reduce(bytes(8))
    out = np.zeros(4 * comm.size, dtype=np.float32)
    comm.all_gather_single(out, x)  # a read-only input is fine
    np.testing.assert_array_equal(out, np.ones(4 * comm.size))
    out8 = bytearray(3 * comm.size)
    comm.all_gather_single(out8, b"abc")
    assert bytes(out8) == b"abc" * comm.size


def test_unsupported_numpy_dtypes(comm):
    with pytest.raises(weft.WeftArgumentError, match="bool"):
        comm.all_reduce(np.zeros(3, dtype=bool))
    with pytest.raises(weft.WeftArgumentError, match="complex"):
        comm.all_reduce(np.zeros(3, dtype=np.complex64))
    with pytest.raises(weft.WeftArgumentError, match="byte order"):
        comm.all_reduce(np.zeros(3, dtype=">i4"))
    with pytest.raises(weft.WeftArgumentError, match="not a buffer"):
        comm.all_reduce([1, 2, 3])


def test_bitwise_on_float_is_refused_by_the_library(comm):
    with pytest.raises(weft.WeftArgumentError) as e:
        comm.all_reduce(np.zeros(3, np.float32), ReduceOp.BXOR)
    # The text is the C library's (weft_last_error), not the package's.
    assert "weft_iallreduce" in e.value.detail and "bxor" in e.value.detail
    assert weft.last_error() == e.value.detail


def test_avg_on_bytes_is_refused_by_the_library(comm):
    b = memoryview(bytearray(4)).cast("c")
    assert weft.dtype_of(b) == weft.DType.BYTE
    with pytest.raises(weft.WeftArgumentError, match="byte takes only band, bor, bxor"):
        comm.all_reduce(b, ReduceOp.AVG)
    comm.all_reduce(b, ReduceOp.BOR)


def test_unknown_op_and_bad_root(comm):
    with pytest.raises(weft.WeftArgumentError, match="unknown op 42"):
        comm.all_reduce(np.zeros(2, np.int32), 42)
    with pytest.raises(weft.WeftArgumentError, match="root"):
        comm.broadcast(np.zeros(2), comm.size)
    with pytest.raises(weft.WeftArgumentError, match="op"):
        comm.all_reduce(np.zeros(2), "sum")


def test_bad_timeout_values(comm):
    with pytest.raises(weft.WeftArgumentError, match="timeout"):
        comm.barrier(timeout=0)
    with pytest.raises(weft.WeftArgumentError, match="timeout"):
        comm.barrier(timeout="soon")


def test_host_only_collectives_refuse_device_arrays(comm):
    """Collectives without a GPU form refuse device arrays before touching them
    (point-to-point and the stream-ordered collectives take them:
    test_device_arrays.py)."""
    class FakeCuda:
        __cuda_array_interface__ = {
            "shape": (4,),
            "typestr": "<f4",
            "data": (0, False),
            "version": 3,
        }

    class FakeDLPackGPU:
        def __dlpack__(self, stream=None):
            raise AssertionError("must not be called")

        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

    for obj in (FakeCuda(), FakeDLPackGPU()):
        with pytest.raises(weft.WeftUnsupportedError, match="takes host memory only") as e:
            comm.gather(np.zeros(4 * comm.size, np.float32) if comm.rank == 0 else None, obj, 0)
        assert e.value.code == -6
        assert e.value.detail.startswith("gather: input: a CUDA device array (")
        assert "all_reduce, reduce, broadcast, all_gather_single" in e.value.detail
        with pytest.raises(weft.WeftUnsupportedError, match="all device arrays or all host"):
            comm.all_gather_single(np.zeros(4 * comm.size, np.float32), obj)


_KEEP = []  # communicators left out of step: never freed, so their context id is never reused


def test_collective_timeout_when_a_rank_stays_away(world):
    """Rank 0 enters a barrier the others never join: WeftTimeoutError after ~1 s."""
    if world.size < 2:
        pytest.skip("needs 2 ranks")
    side = world.dup(name="stay-away")
    if side.rank == 0:
        t0 = time.monotonic()
        with pytest.raises(weft.WeftTimeoutError):
            side.barrier(timeout=1.0)
        assert time.monotonic() - t0 < 10
    _KEEP.append(side)  # out of step now: never used again
    world.barrier()


def test_split_list_without_caller_fails_everywhere(comm):
    if comm.size < 2:
        pytest.skip("needs 2 ranks")
    with pytest.raises(weft.WeftArgumentError):
        comm.split([(comm.rank + 1) % comm.size], name="bad")
    comm.barrier()


def test_finalized_comm_raises(world):
    c = world.dup(name="short-lived")
    c.finalize()
    with pytest.raises(weft.WeftCommError, match="finalized"):
        c.barrier()
    c.finalize()  # twice is harmless


def _run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    e = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PMIX_", "OMPI_", "PMI_", "PRTE_"))
        and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    e.update(env)
    return subprocess.run(
        [sys.executable, "-c", code],
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
    )


def test_library_not_found_lists_every_place(tmp_path):
    code = "import weft\ntry:\n    weft.init()\nexcept weft.WeftLibraryNotFoundError as e:\n    print(e)\n"
    p = _run_python(code, WEFT_LIBRARY=str(tmp_path))
    assert str(tmp_path / "libweft.so.0") in p.stdout
    assert str(tmp_path / ".libs" / "libweft.so.0") in p.stdout
    assert "WEFT_LIBRARY" in p.stdout
    p = _run_python(code, WEFT_LIBRARY="", PATH=str(tmp_path), LD_LIBRARY_PATH="")
    if "could not load" in p.stdout:  # (a weft installed system-wide would load)
        for where in (
            "WEFT_LIBRARY: not set",
            "pkg-config",
            "weft_info",
            "/usr/local/lib",
            "system loader",
        ):
            assert where in p.stdout, p.stdout


def test_abort_on_timeout_option_aborts_the_process():
    """abort_process_on_timeout_or_error=True: a timeout ends the process (singleton)."""
    code = (
        "import weft, numpy\n"
        "c = weft.new_comm(name='fragile', timeout=0.5, abort_process_on_timeout_or_error=True)\n"
        "c.recv(numpy.zeros(1), 0, tag=1)\n"
        "print('still alive')\n"
    )
    p = _run_python(code, WEFT_BOOTSTRAP="single")
    assert p.returncode != 0 and "still alive" not in p.stdout, p.stdout


def test_comm_abort_exits_with_code():
    p = _run_python("import weft\nweft.init().abort(7)\n", WEFT_BOOTSTRAP="single")
    assert p.returncode == 7, p.stdout
