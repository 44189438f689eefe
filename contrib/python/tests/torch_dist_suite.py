"""PyTorch's own distributed test class on weft or gloo (driven by contrib/torch-dist-tests.sh).

``--backend nccl`` runs the class as torch's driver does for its "nccl"
backend (CUDA tensors, a GPU per rank), on whichever libnccl.so.2 the ranks
load: NVIDIA's, or weft's put first by LD_PRELOAD (contrib/torch-dist-tests.sh
with TORCH_DIST_DEVICE=cuda runs both).

torch's test/distributed/test_distributed_spawn.py in a file of our own (the
wheel ships torch.testing._internal.distributed.distributed_test, the tests,
but not that driver): every test starts WORLD_SIZE processes that join a
process group through a file:// store (weft bootstraps over it).

torch gates its tests by the name of the backend under test (BACKEND ==
"gloo" in many places, and feature tables naming gloo): a backend of another
name skips them. So that weft runs exactly gloo's selection, ``--backend
weft`` runs the class as torch would for gloo (BACKEND=gloo) with every
process group it creates made by weft instead: init_process_group and
new_group get backend "weft" where they ask for gloo or name none. The tests
that then assert gloo's own name fail on weft; contrib/torch-dist-tests.sh
excludes them by name, with the reason. ``--backend weft-named`` runs it as
torch's own driver would for a backend named weft (BACKEND=weft, declared
with DDP and subgroups): the gloo-only tests skip.

    WORLD_SIZE=2 TEMP_DIR=$(mktemp -d) python torch_dist_suite.py --backend weft \\
        --results out.jsonl [--fork] [-k SUBSTRING ...] [--exclude NAME ...] [TEST_NAME ...]

Appends one JSON line per test ({"test", "outcome", "seconds", "detail"};
outcome passed / failed / skipped) to --results as each ends, and prints the
counts. --fork starts the ranks with fork instead of spawn (no torch import per
rank: about five times faster on a small machine; the parent never makes a
process group, so the ranks inherit nothing but imported modules).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import unittest

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("weft", "gloo", "weft-named", "nccl"), required=True)
    parser.add_argument("--results", required=True)
    parser.add_argument("--fork", action="store_true")
    parser.add_argument("-k", dest="keywords", action="append", default=[])
    parser.add_argument("--exclude", action="append", default=[])
    parser.add_argument("--list", action="store_true", help="list the selected tests and exit")
    parser.add_argument("tests", nargs="*")
    ARGS = parser.parse_args()
    # torch's common_utils parses sys.argv itself at import time
    sys.argv = sys.argv[:1]
    # The ranks (spawned ones import this module anew) read these.
    os.environ["TORCH_DIST_SUITE_FORK"] = "1" if ARGS.fork else "0"
    os.environ["TORCH_DIST_SUITE_BACKEND"] = ARGS.backend
    os.environ["BACKEND"] = {"weft-named": "weft", "nccl": "nccl"}.get(ARGS.backend, "gloo")

SUITE_BACKEND = os.environ.get("TORCH_DIST_SUITE_BACKEND", "gloo")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed import distributed_c10d  # noqa: E402

if SUITE_BACKEND not in ("gloo", "nccl"):
    import weft.torch  # noqa: E402,F401  (registers "weft"; spawned ranks import it with this module)

from torch.testing._internal import common_distributed  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

torch.backends.cuda.matmul.allow_tf32 = False


def _weft_in_place_of_gloo(fn):  # type: ignore[no-untyped-def]
    """fn with backend "gloo" (or none) replaced by "weft"."""

    def call(*args, **kwargs):  # type: ignore[no-untyped-def]
        b = kwargs.get("backend")
        if b is None or str(b).lower() == "gloo":
            kwargs["backend"] = "weft"
        return fn(*args, **kwargs)

    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call


if SUITE_BACKEND == "weft":
    # The tests pass backend= by keyword, or none (new_group: the default group's).
    for _name in ("init_process_group", "new_group"):
        _fn = _weft_in_place_of_gloo(getattr(distributed_c10d, _name))
        setattr(distributed_c10d, _name, _fn)
        setattr(dist, _name, _fn)
elif SUITE_BACKEND == "weft-named":
    # As torch's driver would declare a backend with DDP and subgroups on CPU.
    for _feature in ("ddp", "subgroup"):
        common_distributed.DistTestCases.backend_feature[_feature].add("weft")


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self) -> None:
        super().setUp()
        if os.environ.get("TORCH_DIST_SUITE_FORK") == "1":
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


class _Recorder(unittest.TextTestResult):
    """Writes each test's outcome as one JSON line when it ends."""

    def __init__(self, stream, descriptions, verbosity, out=None):  # type: ignore[no-untyped-def]
        super().__init__(stream, descriptions, verbosity)
        self.out = out
        self.counts = {"passed": 0, "failed": 0, "skipped": 0}

    def startTest(self, test):  # type: ignore[no-untyped-def]  # noqa: N802
        self._t0 = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome: str, detail: str = "") -> None:  # type: ignore[no-untyped-def]
        self.counts[outcome] += 1
        line = {
            "test": test.id().split(".")[-1],
            "outcome": outcome,
            "seconds": round(time.monotonic() - self._t0, 2),
            "detail": detail[-3000:],
        }
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()

    def addSuccess(self, test):  # type: ignore[no-untyped-def]  # noqa: N802
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):  # type: ignore[no-untyped-def]  # noqa: N802
        super().addFailure(test, err)
        self._record(test, "failed", self.failures[-1][1])

    def addError(self, test, err):  # type: ignore[no-untyped-def]  # noqa: N802
        super().addError(test, err)
        self._record(test, "failed", self.errors[-1][1])

    def addSkip(self, test, reason):  # type: ignore[no-untyped-def]  # noqa: N802
        super().addSkip(test, reason)
        self._record(test, "skipped", str(reason))

    def addExpectedFailure(self, test, err):  # type: ignore[no-untyped-def]  # noqa: N802
        super().addExpectedFailure(test, err)
        self._record(test, "passed", "expected failure")

    def addUnexpectedSuccess(self, test):  # type: ignore[no-untyped-def]  # noqa: N802
        super().addUnexpectedSuccess(test)
        self._record(test, "failed", "unexpected success")


def _selected(args: argparse.Namespace) -> list:
    names = sorted(n for n in dir(TestDistBackendWithSpawn) if n.startswith("test_"))
    if args.tests:
        names = [n for n in names if n in set(args.tests)]
    if args.keywords:
        names = [n for n in names if any(k in n for k in args.keywords)]
    return [n for n in names if n not in set(args.exclude)]


def main(args: argparse.Namespace) -> int:
    names = _selected(args)
    if args.list:
        print("\n".join(names))
        return 0
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    with open(args.results, "a") as out:
        runner = unittest.TextTestRunner(
            stream=sys.stdout,
            verbosity=2,
            resultclass=lambda s, d, v: _Recorder(s, d, v, out),  # type: ignore[arg-type,return-value]
        )
        result = runner.run(suite)
    c = result.counts  # type: ignore[attr-defined]
    print(f"{SUITE_BACKEND} {os.environ.get('WORLD_SIZE')} ranks: "
          f"{c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
