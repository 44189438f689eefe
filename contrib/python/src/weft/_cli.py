"""Console entry points of weft's binary wheel: weft_info, weftrun and
weft-mpicc run the programs installed beside the package (weft/bin), with
the wheel's libraries and UCX's (the libucx package) on LD_LIBRARY_PATH so
that they, and the ranks weftrun starts, find them."""

from __future__ import annotations

import os
import sys
from typing import List, NoReturn

_HERE = os.path.dirname(os.path.abspath(__file__))


def _library_path() -> List[str]:
    dirs = [os.path.join(_HERE, "lib")]
    try:
        import libucx  # type: ignore[import-not-found]

        dirs.append(os.path.join(os.path.dirname(os.path.abspath(libucx.__file__)), "lib"))
    except ImportError:
        pass
    return dirs


def _run(program: str) -> NoReturn:
    path = os.path.join(_HERE, "bin", program)
    if not os.path.exists(path):
        sys.exit(f"{program}: not in this installation of weft ({path}); it comes with weft's binary wheel")
    old = os.environ.get("LD_LIBRARY_PATH")
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(_library_path() + ([old] if old else []))
    os.execv(path, [program] + sys.argv[1:])


def weft_info() -> NoReturn:
    _run("weft_info")


def weftrun() -> NoReturn:
    _run("weftrun")


def weft_mpicc() -> NoReturn:
    _run("weft-mpicc")
