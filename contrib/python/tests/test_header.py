"""The package's constants mirror include/weft.h (checked when the header is at hand)."""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT

import weft
from weft import _comm, _lib, errors

HEADER = Path(os.environ.get("WEFT_HEADER", REPO_ROOT / "include" / "weft.h"))
pytestmark = pytest.mark.skipif(not HEADER.exists(), reason=f"{HEADER} not found")


def header_values() -> dict:
    text = HEADER.read_text()
    vals = {m[0]: int(m[1]) for m in re.findall(r"\b(WEFT_[A-Z0-9_]+)\s*=\s*(-?\d+)", text)}
    for name, expr in re.findall(r"#define\s+(WEFT_[A-Z0-9_]+)\s+\(?(-?[\d.]+)\)?\s*$", text, re.M):
        vals[name] = float(expr) if "." in expr else int(expr)
    return vals


def test_dtypes_match_header():
    h = header_values()
    for d in weft.DType:
        assert h[f"WEFT_{d.name}"] == d.value, d


def test_ops_match_header():
    h = header_values()
    names = {"PRODUCT": "PROD"}
    for op in weft.ReduceOp:
        assert h[f"WEFT_{names.get(op.name, op.name)}"] == op.value, op


def test_status_codes_match_header():
    h = header_values()
    for code, name in errors.STATUS_NAMES.items():
        assert h[name] == code, name


def test_special_values_match_header():
    h = header_values()
    assert h["WEFT_HINT_APPLIED"] == weft.HintState.APPLIED
    assert h["WEFT_HINT_NOT_SET"] == weft.HintState.NOT_SET
    assert h["WEFT_UNDEFINED"] == _comm.UNDEFINED
    assert h["WEFT_ANY_SOURCE"] == weft.ANY_SOURCE and h["WEFT_ANY_TAG"] == weft.ANY_TAG
    assert h["WEFT_STATUS_LAYOUT"] == _lib.STATUS_LAYOUT
    assert h["WEFT_VERSION_MAJOR"] == _lib.API_MAJOR
    assert h["WEFT_TIMEOUT_DEFAULT"] == _comm._TIMEOUT_DEFAULT
    assert h["WEFT_SPLIT_NODE"] == 0
    assert ctypes.sizeof(_lib.WeftStatus) == 24
    assert "int32_t source;   /* rank" in HEADER.read_text()  # layout 1 field order


def test_every_prototype_exists_in_header():
    text = HEADER.read_text()
    for name in _lib._PROTOTYPES:
        assert re.search(rf"\b{name}\(", text), name
