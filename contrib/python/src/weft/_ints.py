"""Integers on their way to C: range-checked, never truncated.

ctypes passes a Python int to a C ``int`` by keeping its low 32 bits (and to
``int64_t`` its low 64) without a word: ``send(x, dst=2**32 + 1, tag=2**32 + 5)``
would reach rank 1 with tag 5. Every integer the package hands to the library
goes through :func:`c_int_arg` first, which raises WeftArgumentError (a
ValueError) naming the argument when the value does not fit, or is negative
where the library wants a count, a rank or a tag.
"""

from __future__ import annotations

import operator
from typing import Any, Mapping, Optional

from .errors import WeftArgumentError

INT_MIN = -(1 << 31)
INT_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
UINTPTR_MAX = (1 << 64) - 1


def c_int_arg(
    value: Any,
    what: str,
    lo: int = INT_MIN,
    hi: int = INT_MAX,
    special: Optional[Mapping[int, str]] = None,
) -> int:
    """``value`` as an int in lo..hi (default: C int's range), or one of the
    ``special`` values ({value: its name}, e.g. {-1: "weft.ANY_SOURCE"}).
    WeftArgumentError naming ``what`` otherwise; bools count as 0 and 1."""
    try:
        v = operator.index(value)
    except TypeError:
        raise WeftArgumentError(
            f"{what} must be an integer, not {type(value).__name__}"
        ) from None
    if lo <= v <= hi or (special is not None and v in special):
        return v
    also = ""
    if special:
        also = " or " + ", ".join(f"{name} ({k})" for k, name in sorted(special.items()))
    if hi == INT_MAX:
        ctype = "C int"
    elif hi == INT64_MAX:
        ctype = "int64"
    else:
        ctype = "C pointer" if hi == UINTPTR_MAX else ""
    if v < lo and lo == 0:
        why = f"is negative: it must be >= 0{also}"
    elif v < lo:
        why = f"is below {lo}{also}"
    else:
        why = f"does not fit in a {ctype} (at most {hi}){also}" if ctype else f"is above {hi}{also}"
    raise WeftArgumentError(
        f"{what} = {v} {why}; it was not passed on (ctypes would have truncated it)"
        if v > hi or v < INT_MIN
        else f"{what} = {v} {why}"
    )
