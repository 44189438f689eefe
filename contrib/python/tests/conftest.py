"""Shared fixtures. Every rank runs the same tests in the same order (pytest's
collection order is deterministic), so collectives line up; every communicator
the tests use has a short timeout, so a rank that fails early makes the others
fail within seconds rather than hang.

Start under a launcher, e.g. ``weftrun -n 3 python3 -m pytest`` or
``mpirun -np 2 python3 -m pytest`` (contrib/python/run-tests.sh does both).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, List

import numpy as np
import pytest

import weft

# Deadline of every wait in the tests (seconds).
TEST_TIMEOUT = float(os.environ.get("WEFT_TEST_TIMEOUT", "20"))

try:
    import ml_dtypes  # type: ignore

    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bfloat16 tests are skipped (on every rank alike)
    ml_dtypes = None
    BFLOAT16 = None

INT_DTYPES: List[np.dtype] = [
    np.dtype(t)
    for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64)
]
FLOAT_DTYPES: List[np.dtype] = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)]
if BFLOAT16 is not None:
    FLOAT_DTYPES.append(BFLOAT16)
ALL_DTYPES = INT_DTYPES + FLOAT_DTYPES

REPO_ROOT = Path(__file__).resolve().parents[3]


def dtype_id(dt: np.dtype) -> str:
    return dt.name


def is_float(dt: np.dtype) -> bool:
    return dt in FLOAT_DTYPES


def rank_data(dt: np.dtype, rank: int, shape, seed: int) -> np.ndarray:
    """Rank ``rank``'s input: small integer values, exact in every dtype, so sums,
    products, min and max have one right answer whatever the reduction order."""
    rng = np.random.default_rng([seed, rank])
    lo, hi = (0, 7) if dt.kind == "u" else (-3, 4)
    return rng.integers(lo, hi, size=shape).astype(np.float64).astype(dt)


def tolerance(dt: np.dtype) -> float:
    return {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-6, "float64": 1e-12}.get(dt.name, 0)


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    """Bit-exact for integers; within the format's rounding for floats."""
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if is_float(got.dtype):
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), rtol=tolerance(got.dtype), atol=0
        )
    else:
        np.testing.assert_array_equal(got, want)


@pytest.fixture(scope="session")
def world() -> Iterator[weft.Comm]:
    w = weft.init()
    w.timeout = TEST_TIMEOUT
    yield w


@pytest.fixture(scope="session")
def comm(world: weft.Comm) -> Iterator[weft.Comm]:
    """A communicator of every rank, with the tests' timeout."""
    c = weft.new_comm(name="pytest", timeout=TEST_TIMEOUT)
    yield c
    c.finalize()


@pytest.fixture()
def seed(request: pytest.FixtureRequest) -> int:
    """A seed that is the same on every rank for one test, different between tests."""
    return sum(ord(ch) * (i + 1) for i, ch in enumerate(request.node.nodeid)) % (2**31)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    weft.finalize()  # nothing when weft was never initialized
