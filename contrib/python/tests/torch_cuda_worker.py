"""One rank of the weft torch.distributed test on CUDA tensors (run under torchrun by
run-torch-cuda.sh: 2 local processes sharing one GPU, or one GPU each where there are
more). The default group is init_process_group(backend="weft", device_id=cuda:i).

Every collective on CUDA tensors is checked against a reference with weft's GPU rounding
(reductions left to right in rank order, float16/bfloat16 accumulated in float32 and
rounded once), bit-exact, and against gloo on CPU tensors in the same job: bit-exact
where the order of the sums cannot matter (2 ranks: a + b is one rounding either way;
MIN/MAX; integers), else within rounding. Also: async_op and wait() ordering (wait()
makes the current stream wait without blocking the host; is_completed() polls;
get_future() in stream order), async_op=False returning while the stream is busy, CUDA
point-to-point, the CUDA barrier, PREMUL_SUM, what is refused (BAND on CUDA, PREMUL_SUM
on integers, CPU and CUDA tensors in one call), split_group and new_group with a bound
device, a "cpu:gloo,cuda:weft" group routing CUDA tensors to weft, a 5-step DDP model on
CUDA against DDP on gloo, FSDP on CUDA (FULL_SHARD on the world and on a
"cpu:gloo,cuda:weft" group, FSDP2 fully_shard; HYBRID_SHARD and FSDP2 HSDP on two
simulated nodes where N >= 4 is even, skipped with the reason otherwise) against the same
training on the hostgloo reference backend (torch_host_gloo.py: the same GPU math, the
collectives staged through the host over gloo and reduced in weft's order: bit-identical)
and on gloo with CPU tensors (within float32 rounding), and a GPU collective whose peer
never comes failing within the group's timeout: polled with is_completed(), and posted by
a blocking call that nobody waits for (the backend's watchdog stops the kernels; the device
becomes idle). Prints "torch cuda worker: rank R of N, ok".

WEFT_TORCH_CUDA_CASE=kill (run-torch-cuda.sh's second torchrun): only the killed-rank case
(kill_case() below): the last rank SIGKILLs itself while the others are in a CUDA
all_reduce; each survivor must raise weft's error within the group's timeout.

WEFT_TORCH_CUDA_SIM=1 (no GPU needed; run-torch-backend.sh runs it in make check): CPU
tensors stand for CUDA tensors. weft.torch takes its CUDA code paths (stream-ordered
posting, the compositions, CUDA Works and Futures) with stand-ins for torch.cuda's
streams and events, and each operation is waited for as it is posted (the order a
stream would give). That checks the compositions and this script's references on any
host, and the watchdog, on a host all_reduce that stands for GPU work nobody polls; timing,
streams and the GPU timeout cases run on a GPU only. FSDP runs on the CPU there (device_id
and meshes on "cpu"), and the kill case's all_reduce waits in the call, up to the group's
timeout.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import signal
import sys
import time
import types

import faulthandler

import torch
import torch.distributed as dist

import weft.torch as wt
from weft.errors import WeftTimeoutError

# Where a hang is, when the test's own limit would only kill it: WEFT_TEST_HANG_DUMP=SECONDS
# (run-torch-cuda.sh sets it below its limit) prints every thread's stack after that long,
# then exits 1; SIGTERM (torchrun ending the other ranks once one failed) prints them too.
# To stderr, or with WEFT_TEST_HANG_DIR to DIR/rank<R>.txt (one file a rank: the ranks'
# dumps do not interleave).
_hang_file = sys.stderr
if os.environ.get("WEFT_TEST_HANG_DIR"):
    _hang_file = open(os.path.join(os.environ["WEFT_TEST_HANG_DIR"],
                                   f"rank{os.environ.get('RANK', '0')}.txt"), "w")
if os.environ.get("WEFT_TEST_HANG_DUMP"):
    faulthandler.dump_traceback_later(float(os.environ["WEFT_TEST_HANG_DUMP"]), exit=True, file=_hang_file)
faulthandler.register(signal.SIGTERM, file=_hang_file, all_threads=True, chain=True)

SIM = os.environ.get("WEFT_TORCH_CUDA_SIM", "0") == "1"
LOCAL = int(os.environ.get("LOCAL_RANK", "0"))


def install_cpu_standins() -> None:
    """CPU tensors through weft.torch's CUDA code paths (see the module's notes)."""

    class Stream:
        def wait_event(self, event):
            pass

        def synchronize(self):
            pass

    class Event:
        def record(self, stream=None):
            pass

        def query(self):
            return True

    fake_cuda = types.SimpleNamespace(
        device=lambda d: contextlib.nullcontext(),
        current_stream=lambda device=None: Stream(),
        Event=Event,
        Stream=lambda device=None: Stream(),
        stream=lambda s: contextlib.nullcontext(),
        current_device=lambda: 0,
    )

    class TorchWithFakeCuda:
        cuda = fake_cuda

        def __getattr__(self, name):
            return getattr(torch, name)

    real_device_of = wt._device_of
    real_post = wt.ProcessGroupWeft._post
    wt.torch = TorchWithFakeCuda()
    wt._device_of = lambda tensors, what: real_device_of(tensors, what) or torch.device("cpu")
    wt.WeftWork._new_future = lambda self: torch.futures.Future()

    def post(self, kind, outputs, staged, fn, opts=None, finish=None, device=None,
             host_wait=False, after=None):
        if device is not None and not host_wait:
            def fn_waited():
                works = list(fn())
                # within the group's timeout, as the backend's watchdog gives up GPU work
                # (a killed peer: the kill case); the failure raises from the call
                t = self._op_timeout(opts)
                try:
                    for w in works:
                        w.wait(timeout=t)
                except WeftTimeoutError:
                    for w in works:
                        w._abandon()
                    raise
                return works
            return real_post(self, kind, outputs, staged, fn_waited, opts, finish, device,
                             host_wait, after)
        return real_post(self, kind, outputs, staged, fn, opts, finish, device, host_wait, after)

    wt.ProcessGroupWeft._post = post


if SIM:
    install_cpu_standins()
    DEV = torch.device("cpu")
    dist.init_process_group(backend="weft", timeout=datetime.timedelta(seconds=60))
else:
    DEV = torch.device("cuda", LOCAL % torch.cuda.device_count())
    torch.cuda.set_device(DEV)
    dist.init_process_group(backend="weft", timeout=datetime.timedelta(seconds=60), device_id=DEV)
rank, n = dist.get_rank(), dist.get_world_size()
world_pg = dist.distributed_c10d._get_default_group()
gloo = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=120))  # a hang raises
failures = []
counts = {"exact": 0, "close": 0}
F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
       "MAX": dist.ReduceOp.MAX, "AVG": dist.ReduceOp.AVG}
# dtypes gloo reduces (the CPU test's); int8 / uint8 are checked against the reference only
GLOO_DTYPES = (F32, F64, F16, BF16, torch.int32, torch.int64)


def on_dev(t):
    """A copy of a CPU tensor on the test's device (a copy in SIM too)."""
    return t.to(DEV, copy=True)


def host(t):
    return t.detach().to("cpu", copy=True)


def same(name, got, want):
    """Bit-exact (the data has no NaNs; -0 and +0 are not compared)."""
    got = host(got)
    counts["exact"] += 1
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        diff = ""
        if got.shape == want.shape and got.dtype == want.dtype and got.numel():
            d = (got.double() - want.double()).abs()
            diff = f", {int((d > 0).sum())} of {d.numel()} differ, max |diff| {d.max().item():.3g}"
        failures.append(f"{name}: got {got.dtype} {tuple(got.shape)} {got.flatten()[:6].tolist()}, "
                        f"want {want.dtype} {tuple(want.shape)} {want.flatten()[:6].tolist()}{diff}")


EPS = {F16: 2.0 ** -10, BF16: 2.0 ** -7, F32: 2.0 ** -23, F64: 2.0 ** -52}


def close(name, got, want, dtype, xs=None):
    """Within the rounding of n - 1 additions or multiplications in another order (or with
    a rounding at each step): relative to the result, and for sums relative to the
    inputs' magnitudes (a sum near zero cancels)."""
    got = host(got)
    counts["close"] += 1
    tol = n * EPS.get(dtype, 0.0)
    bound = want.double().abs() * tol
    if xs is not None:
        bound = bound + torch.stack([x.double().abs() for x in xs]).sum(0) * tol
    if got.shape != want.shape or not bool(((got.double() - want.double()).abs() <= bound).all()):
        d = (got.double() - want.double()).abs() if got.shape == want.shape else None
        failures.append(f"{name}: got {got.flatten()[:6].tolist()}, want ~{want.flatten()[:6].tolist()}"
                        + (f", max |diff| {d.max().item():.3g}" if d is not None and d.numel() else ""))


def order_free(opname, dt):
    """Whether every summation order gives the same bits: 2 ranks (a + b is one rounding
    either way), MIN / MAX, integers."""
    return n == 2 or opname in ("MIN", "MAX") or not dt.is_floating_point


def check_reduce(name, got, xs, opname, dt):
    """Against weft's rounding, bit-exact: always on a GPU (coll/cuda reduces left to right
    in rank order, half types in float32); in SIM, weft's host reductions round half types
    at every step and may add in another order: exact only where order_free()."""
    want = ref_reduce(xs, opname, dt)
    if not SIM or order_free(opname, dt):
        same(name, got, want)
    else:
        close(name, got, want, dt, xs if opname in ("SUM", "AVG") else None)


def vs_gloo(name, got, g, opname, dt, xs):
    if order_free(opname, dt):
        same(name, got, g)
    else:
        close(name, got, g, dt, xs if opname in ("SUM", "AVG") else None)


def make(dtype, k, seed, r):
    """Rank r's input of case `seed`: the same on every rank (each computes every rank's)."""
    g = torch.Generator().manual_seed(seed * 131 + r)
    if dtype == torch.bool:
        return torch.randint(0, 2, (k,), generator=g).bool()
    if dtype.is_complex:
        return torch.complex(torch.randn(k, generator=g), torch.randn(k, generator=g)).to(dtype)
    if dtype.is_floating_point:
        x = torch.randn(k, generator=g, dtype=F64) * 3
        x = torch.where(x.abs() < 1e-2, torch.full_like(x, 0.75), x)  # no zeros (+0 / -0)
        return x.to(dtype)
    if dtype == torch.uint8:
        return torch.randint(1, 16, (k,), generator=g, dtype=torch.int64).to(dtype)
    return torch.randint(-40, 40, (k,), generator=g, dtype=torch.int64).to(dtype)


def ref_reduce(xs, opname, dtype):
    """weft's reduction: left to right over ranks; float16/bfloat16 SUM/PRODUCT/AVG in
    float32, rounded once; integers wrap; integer AVG truncates the wrapped sum."""
    if opname in ("MIN", "MAX"):
        acc = xs[0].clone()
        for x in xs[1:]:
            acc = torch.minimum(acc, x) if opname == "MIN" else torch.maximum(acc, x)
        return acc
    acc_dt = F32 if dtype in (F16, BF16) else dtype
    acc = xs[0].to(acc_dt)
    for x in xs[1:]:
        acc = acc * x.to(acc_dt) if opname == "PRODUCT" else acc + x.to(acc_dt)
    if opname == "AVG":
        acc = acc / n if dtype.is_floating_point else torch.div(acc, n, rounding_mode="trunc")
    return acc.to(dtype)


def expect_error(name, fn, text):
    try:
        fn()
        failures.append(f"{name}: no error (expected one saying {text!r})")
    except Exception as e:  # noqa: BLE001
        if text not in str(e):
            failures.append(f"{name}: {type(e).__name__}: {e} (expected {text!r})")



# ---- WEFT_TORCH_CUDA_CASE=kill: a rank SIGKILLed while the others are in a CUDA all_reduce -----
def kill_case() -> None:
    """run-torch-cuda.sh's second torchrun (a monitor interval longer than the group's
    timeout, so torchrun does not end the survivors before they raised): every rank does
    a CUDA all_reduce on a group with a short timeout (KILL_TEST_TIMEOUT, default 5 s),
    then the others post the next one and the last rank SIGKILLs itself a second later,
    while their kernels wait for it. Each survivor, with nothing but torch calls
    (all_reduce(async_op=True), wait(), torch.cuda.synchronize(), wait()), must raise
    WeftDistError within the timeout plus a margin, weft's text naming the killed rank,
    and the group's next all_reduce must raise too (at once on a GPU: the group is
    broken); it prints "torch cuda kill worker: rank R raised ..." and exits 0 (no
    orderly destroy_process_group: the world has a dead member), or prints a line with
    FAIL and exits 1. In SIM the all_reduce waits in the call, within the group's
    timeout (the stand-ins), and raises there."""
    limit = float(os.environ.get("KILL_TEST_TIMEOUT", "5"))
    victim = n - 1
    kg = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=limit))
    k = 1 << 16  # 256 KiB: past the LL allreduce (64 KiB at most), whose kernels also name the rank
    x = on_dev(torch.ones(k))
    dist.all_reduce(x, group=kg)
    same("the all_reduce before the kill", x, torch.full((k,), float(n)))  # (host(): synchronises)
    if failures:
        print(f"torch cuda kill worker: rank {rank} FAIL before the kill: {failures}", flush=True)
        os._exit(1)
    if rank == victim:
        time.sleep(1.0)  # the others' next all_reduce is posted by now: its kernels wait for this rank
        print(f"torch cuda kill worker: rank {rank} kills itself", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    bad = []
    y = on_dev(torch.ones(k))
    where, err = "all_reduce(async_op=True)", None
    t0 = time.monotonic()
    try:
        wk = dist.all_reduce(y, group=kg, async_op=True)  # stream-ordered: returns at once
        where = "wait()"
        wk.wait()  # the current stream waits; raises only a failure already known
        where = "torch.cuda.synchronize()"
        if not SIM:
            torch.cuda.synchronize()  # the kernels end: done, or stopped at the deadline (the watchdog)
        where = "wait() after torch.cuda.synchronize()"
        wk.wait()  # raises what the watchdog found
        where = None
    except Exception as e:  # noqa: BLE001 (weft's error is expected; another is reported)
        err = e
    dt = time.monotonic() - t0
    msg = " ".join(str(err).split()) if err is not None else ""
    if err is not None and not isinstance(err, wt.WeftDistError):
        bad.append(f"raised {type(err).__name__}, not weft's WeftDistError (in {where})")
    if err is None:
        bad.append(f"the all_reduce with a killed rank completed ({dt:.2f} s): {host(y)[:4].tolist()}")
    elif dt > limit + 5:
        bad.append(f"raised after {dt:.2f} s, over the {limit:g} s timeout + 5 s")
    # the group's next all_reduce: refused (a GPU group whose kernels were stopped is broken)
    err2, t1 = None, time.monotonic()
    try:
        z = on_dev(torch.ones(k))
        dist.all_reduce(z, group=kg)
        if not SIM:
            torch.cuda.synchronize()
        dist.all_reduce(z, group=kg)  # the failure of the one before, if found after the call
    except Exception as e:  # noqa: BLE001
        err2 = e
    dt2 = time.monotonic() - t1
    msg2 = " ".join(str(err2).split()) if err2 is not None else ""
    if err2 is not None and not isinstance(err2, wt.WeftDistError):
        bad.append(f"the next all_reduce raised {type(err2).__name__}, not weft's WeftDistError")
    if err2 is None:
        bad.append(f"the next all_reduce on the group completed ({dt2:.2f} s)")
    elif dt2 > limit + 5:
        bad.append(f"the next all_reduce raised after {dt2:.2f} s, over the {limit:g} s timeout + 5 s")
    # weft's text names the rank its kernels (or its wait) waited for: rank <victim>, outside
    # the "(rank R of N)" that says which member raised
    named = re.sub(r"\(rank \d+ of \d+\)", "", msg + " " + msg2)
    if err is not None and not re.search(rf"\brank {victim}\b", named):
        bad.append(f"weft's text does not name rank {victim}, the killed one")
    head = f"torch cuda kill worker: rank {rank}"
    if err is not None:
        print(f"{head} raised {type(err).__name__} after {dt:.2f} s (in {where}): {msg}", flush=True)
    if err2 is not None:
        print(f"{head}: the next all_reduce raised {type(err2).__name__} after {dt2:.2f} s: {msg2}", flush=True)
    for b in bad:
        print(f"{head} FAIL {b}", flush=True)
    if not bad:
        print(f"{head} ok: raised within {limit:g} s + 5 s, naming rank {victim}", flush=True)
    sys.stdout.flush()
    os._exit(1 if bad else 0)


if os.environ.get("WEFT_TORCH_CUDA_CASE", "") == "kill":
    kill_case()

seed = 0

# ---- all_reduce: every dtype and op, several sizes ------------------------------------------
for dt in (F32, F64, F16, BF16, torch.int32, torch.int64, torch.int8, torch.uint8):
    for opname, op in OPS.items():
        seed += 1
        xs = [make(dt, 1000, seed, r) for r in range(n)]
        w = on_dev(xs[rank])
        dist.all_reduce(w, op)
        check_reduce(f"all_reduce {opname} {dt}", w, xs, opname, dt)
        if opname != "AVG" and dt in GLOO_DTYPES:
            g = xs[rank].clone()
            dist.all_reduce(g, op, group=gloo)
            vs_gloo(f"all_reduce {opname} {dt} vs gloo", w, g, opname, dt, xs)
for k in (0, 1, 7, (1 << 21) + 3):  # empty, tiny, odd, larger than a coll/cuda slot (chunks)
    seed += 1
    xs = [make(F32, k, seed, r) for r in range(n)]
    w = on_dev(xs[rank])
    dist.all_reduce(w)
    check_reduce(f"all_reduce SUM float32 x {k}", w, xs, "SUM", F32)
# bool (SUM -> MAX, PRODUCT -> MIN) and complex (its float pairs)
seed += 1
bs = [make(torch.bool, 64, seed, r) for r in range(n)]
w = on_dev(bs[rank])
dist.all_reduce(w)
same("all_reduce SUM bool", w, torch.stack(bs).any(0))
w = on_dev(bs[rank])
dist.all_reduce(w, dist.ReduceOp.PRODUCT)
same("all_reduce PRODUCT bool", w, torch.stack(bs).all(0))
seed += 1
cs = [make(torch.complex64, 64, seed, r) for r in range(n)]
w = on_dev(cs[rank])
dist.all_reduce(w)
check_reduce("all_reduce SUM complex64", torch.view_as_real(w), [torch.view_as_real(c) for c in cs], "SUM", F32)
# non-contiguous (a transposed view), written back in place, against gloo
nc_w = on_dev(torch.arange(12.0).view(3, 4) + rank).t()
nc_g = (torch.arange(12.0).view(3, 4) + rank).t()
dist.all_reduce(nc_w)
dist.all_reduce(nc_g, group=gloo)
same("all_reduce non-contiguous vs gloo", nc_w, nc_g)  # small integers: exact in any order
# allreduce_coalesced (the group's method)
seed += 1
xa, xb = [make(F32, 33, seed, r) for r in range(n)], [make(BF16, 5, seed + 1, r) for r in range(n)]
ta, tb = on_dev(xa[rank]), on_dev(xb[rank])
world_pg.allreduce_coalesced([ta, tb], dist.AllreduceCoalescedOptions()).wait()
check_reduce("allreduce_coalesced float32", ta, xa, "SUM", F32)
check_reduce("allreduce_coalesced bfloat16", tb, xb, "SUM", BF16)

# PREMUL_SUM (FSDP's): the inputs times the factor (exact here: a power of two), then SUM
seed += 1
xs = [make(F32, 50, seed, r) for r in range(n)]
w = on_dev(xs[rank])
dist.all_reduce(w, dist._make_nccl_premul_sum(0.25))
check_reduce("all_reduce PREMUL_SUM", w, [x * 0.25 for x in xs], "SUM", F32)
blocks = [make(BF16, 3 * n, seed + 1, r) for r in range(n)]
w = torch.zeros(3, dtype=BF16, device=DEV)
inp = on_dev(blocks[rank])
dist.reduce_scatter_tensor(w, inp, op=dist._make_nccl_premul_sum(0.5))
check_reduce("reduce_scatter_tensor PREMUL_SUM bfloat16", w,
             [b[rank * 3:(rank + 1) * 3] * 0.5 for b in blocks], "SUM", BF16)
same("reduce_scatter_tensor PREMUL_SUM leaves its input", inp, blocks[rank])

# ---- broadcast, reduce ---------------------------------------------------------------------
for dt in (F32, BF16, torch.int64, torch.bool, torch.complex64):
    seed += 1
    xs = [make(dt, 100, seed, r) for r in range(n)]
    w = on_dev(xs[rank])
    dist.broadcast(w, src=n - 1)
    same(f"broadcast {dt}", w, xs[n - 1])
    if dt == F32:
        g = xs[rank].clone()
        dist.broadcast(g, src=n - 1, group=gloo)
        same("broadcast vs gloo", w, g)
for opname in ("SUM", "MAX"):
    seed += 1
    xs = [make(F32, 100, seed, r) for r in range(n)]
    w, g = on_dev(xs[rank]), xs[rank].clone()
    dist.reduce(w, dst=1 % n, op=OPS[opname])
    dist.reduce(g, dst=1 % n, op=OPS[opname], group=gloo)
    if rank == 1 % n:  # only the root's result is defined
        check_reduce(f"reduce {opname}", w, xs, opname, F32)
        vs_gloo(f"reduce {opname} vs gloo", w, g, opname, F32, xs)

# ---- all_gather (list, tensor, coalesced) ----------------------------------------------------
seed += 1
xs = [make(F32, 9, seed, r) for r in range(n)]
outs = [torch.zeros(9, device=DEV) for _ in range(n)]
dist.all_gather(outs, on_dev(xs[rank]))
same("all_gather (list)", torch.stack([host(o) for o in outs]), torch.stack(xs))
gouts = [torch.zeros(9) for _ in range(n)]
dist.all_gather(gouts, xs[rank].clone(), group=gloo)
same("all_gather (list) vs gloo", torch.stack([host(o) for o in outs]), torch.stack(gouts))
cols = torch.zeros(9, n, device=DEV)  # outputs that are non-contiguous views
dist.all_gather([cols[:, r] for r in range(n)], on_dev(xs[rank]))
same("all_gather into non-contiguous views", cols, torch.stack(xs, 1))
bs = [make(torch.bool, 10, seed, r) for r in range(n)]
bouts = [torch.zeros(10, dtype=torch.bool, device=DEV) for _ in range(n)]
dist.all_gather(bouts, on_dev(bs[rank]))
same("all_gather bool", torch.stack([host(o) for o in bouts]), torch.stack(bs))
out = torch.zeros(n * 9, device=DEV)
dist.all_gather_into_tensor(out, on_dev(xs[rank]))
same("all_gather_into_tensor", out, torch.cat(xs))
out2 = torch.zeros(n, 9, device=DEV)
dist.all_gather_into_tensor(out2, on_dev(xs[rank]))
same("all_gather_into_tensor stacked", out2, torch.stack(xs))
ys = [make(BF16, 4, seed + 1, r) for r in range(n)]
o1, o2 = torch.zeros(n * 9, device=DEV), torch.zeros(n * 4, dtype=BF16, device=DEV)
world_pg.allgather_into_tensor_coalesced([o1, o2], [on_dev(xs[rank]), on_dev(ys[rank])]).wait()
same("allgather_into_tensor_coalesced 0", o1, torch.cat(xs))
same("allgather_into_tensor_coalesced 1", o2, torch.cat(ys))

# ---- reduce_scatter (list, tensor, coalesced) ------------------------------------------------
for dt in (F32, F16):
    seed += 1
    blocks = [[make(dt, 6, seed * 10 + j, r) for j in range(n)] for r in range(n)]  # [rank][block]
    w = torch.zeros(6, dtype=dt, device=DEV)
    dist.reduce_scatter(w, [on_dev(b) for b in blocks[rank]])
    mine = [blocks[r][rank] for r in range(n)]  # every rank's block for this rank
    check_reduce(f"reduce_scatter (list) {dt}", w, mine, "SUM", dt)
    g = torch.zeros(6, dtype=dt)
    dist.reduce_scatter(g, [b.clone() for b in blocks[rank]], group=gloo)
    vs_gloo(f"reduce_scatter (list) {dt} vs gloo", w, g, "SUM", dt, mine)
    w = torch.zeros(6, dtype=dt, device=DEV)
    dist.reduce_scatter_tensor(w, on_dev(torch.cat(blocks[rank])), op=dist.ReduceOp.MAX)
    check_reduce(f"reduce_scatter_tensor MAX {dt}", w, mine, "MAX", dt)
seed += 1
blocks = [[make(F32, 3, seed * 10 + j, r) for j in range(n)] for r in range(n)]
o1, o2 = torch.zeros(3, device=DEV), torch.zeros(3, device=DEV)
world_pg.reduce_scatter_tensor_coalesced(
    [o1, o2], [on_dev(torch.cat(blocks[rank])), on_dev(torch.cat(blocks[rank]) * 2)],
    dist.ReduceScatterOptions()).wait()
check_reduce("reduce_scatter_tensor_coalesced 0", o1, [blocks[r][rank] for r in range(n)], "SUM", F32)
check_reduce("reduce_scatter_tensor_coalesced 1", o2, [blocks[r][rank] * 2 for r in range(n)], "SUM", F32)

# ---- all_to_all_single (equal, equal splits, uneven splits), all_to_all (list) ---------------
seed += 1
x = make(F32, 4 * n, seed, rank)
w, g = torch.zeros(4 * n, device=DEV), torch.zeros(4 * n)
dist.all_to_all_single(w, on_dev(x))
dist.all_to_all_single(g, x.clone(), group=gloo)
same("all_to_all_single equal", w, g)
w = torch.zeros(4 * n, device=DEV)
dist.all_to_all_single(w, on_dev(x), [4] * n, [4] * n)
same("all_to_all_single equal splits", w, g)
# uneven: rank r sends (j + 1) rows of 2 to rank j and receives (r + 1) rows from each
in_s, out_s = [j + 1 for j in range(n)], [rank + 1] * n
inp = torch.arange(sum(in_s) * 2, dtype=F32).view(-1, 2) + 100 * rank
w, g = torch.zeros(sum(out_s), 2, device=DEV), torch.zeros(sum(out_s), 2)
dist.all_to_all_single(w, on_dev(inp), out_s, in_s)
dist.all_to_all_single(g, inp.clone(), out_s, in_s, group=gloo)
same("all_to_all_single uneven splits vs gloo", w, g)
# all_to_all (list): gloo has none; against the known values (rank j sends make(k=r+1) to r)
got = [torch.zeros(rank + 1, device=DEV) for _ in range(n)]
dist.all_to_all(got, [on_dev(make(F32, j + 1, 77 + rank, j)) for j in range(n)])
same("all_to_all (list) uneven", torch.cat([host(t) for t in got]),
     torch.cat([make(F32, rank + 1, 77 + j, rank) for j in range(n)]))
got = [torch.zeros(3, dtype=torch.int64, device=DEV) for _ in range(n)]
dist.all_to_all(got, [on_dev(make(torch.int64, 3, 88 + rank, j)) for j in range(n)])
same("all_to_all (list) equal", torch.cat([host(t) for t in got]),
     torch.cat([make(torch.int64, 3, 88 + j, rank) for j in range(n)]))

# ---- gather, scatter -------------------------------------------------------------------------
seed += 1
xs = [make(F32, 5, seed, r) for r in range(n)]
gl = [torch.zeros(5, device=DEV) for _ in range(n)] if rank == 0 else None
dist.gather(on_dev(xs[rank]), gl, dst=0)
ggl = [torch.zeros(5) for _ in range(n)] if rank == 0 else None
dist.gather(xs[rank].clone(), ggl, dst=0, group=gloo)
if rank == 0:
    same("gather", torch.stack([host(t) for t in gl]), torch.stack(xs))
    same("gather vs gloo", torch.stack([host(t) for t in gl]), torch.stack(ggl))
src = n - 1
pieces = [make(F32, 5, seed + 1, j) for j in range(n)]
w = torch.zeros(5, device=DEV)
dist.scatter(w, [on_dev(p) for p in pieces] if rank == src else None, src=src)
g = torch.zeros(5)
dist.scatter(g, [p.clone() for p in pieces] if rank == src else None, src=src, group=gloo)
same("scatter", w, pieces[rank])
same("scatter vs gloo", w, g)
wnc = torch.zeros(5, 2, device=DEV)[:, 1]  # a non-contiguous output
dist.scatter(wnc, [on_dev(p) for p in pieces] if rank == src else None, src=src)
same("scatter into a non-contiguous view", wnc, pieces[rank])

# ---- barrier (on the bound device: weft's barrier on the stream; wait() blocks the host) ------
dist.barrier()
dist.barrier(async_op=True).wait()

# ---- point-to-point on CUDA tensors: a ring ----------------------------------------------------
nxt, prv = (rank + 1) % n, (rank - 1) % n
ref = make(F32, 6, 99, prv)
r = torch.zeros(6, device=DEV)
if rank % 2 == 0:
    dist.send(on_dev(make(F32, 6, 99, rank)), nxt)
    dist.recv(r, prv)
else:
    dist.recv(r, prv)
    dist.send(on_dev(make(F32, 6, 99, rank)), nxt)
same("send/recv", r, ref)
r2 = torch.zeros(6, 2, device=DEV)[:, 0]  # a non-contiguous receive buffer
works = [dist.isend(on_dev(make(F32, 6, 99, rank)), nxt), dist.irecv(r2, prv)]
for wk in works:
    wk.wait()
same("isend/irecv (non-contiguous receive)", r2, ref)
r3 = torch.zeros(6, device=DEV)
for wk in dist.batch_isend_irecv([dist.P2POp(dist.isend, on_dev(make(F32, 6, 99, rank)), nxt),
                                  dist.P2POp(dist.irecv, r3, prv)]):
    wk.wait()
same("batch_isend_irecv", r3, ref)

# ---- what is refused, saying so ----------------------------------------------------------------
expect_error("BAND on CUDA", lambda: dist.all_reduce(on_dev(torch.ones(4, dtype=torch.int32)), dist.ReduceOp.BAND),
             "BAND on CUDA tensors is not supported")
expect_error("PREMUL_SUM on int32", lambda: dist.all_reduce(on_dev(torch.ones(4, dtype=torch.int32)),
                                                            dist._make_nccl_premul_sum(2.0)),
             "PREMUL_SUM on torch.int32 tensors is not supported")
if not SIM:
    expect_error("CPU and CUDA tensors", lambda: dist.all_gather_into_tensor(torch.zeros(4 * n), on_dev(torch.ones(4))),
                 "CPU and CUDA tensors in one call")
dist.barrier()

# ---- async_op, wait() ordering, futures -----------------------------------------------------------
SLEEP = 400_000_000  # GPU clock cycles: a few hundred ms
x = torch.zeros(1 << 16, device=DEV)
want = torch.full((1 << 16,), float(sum(r + 1 for r in range(n))))
if not SIM:
    # (a) posted on a side stream whose queue is busy: wait() makes the current stream wait
    # (no host block); work queued after it on the current stream sees the sum.
    side = torch.cuda.Stream(device=DEV)
    side.wait_stream(torch.cuda.current_stream(DEV))
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP)
        x.fill_(rank + 1)
        t0 = time.monotonic()
        wk = dist.all_reduce(x, async_op=True)
        post_s = time.monotonic() - t0
    busy = not wk.is_completed()  # the side stream is still asleep
    t0 = time.monotonic()
    wk.wait()
    wait_s = time.monotonic() - t0
    y = x * 2  # the current stream, after wait(): no host synchronisation
    same("async all_reduce on a side stream, wait(), then the current stream", y, want * 2)
    if not busy:
        failures.append("is_completed() was True right after posting behind a sleeping stream")
    if wait_s > 0.1:
        failures.append(f"wait() blocked the host for {wait_s:.3f} s (it should only order streams)")
    t0 = time.monotonic()
    while not wk.is_completed() and time.monotonic() - t0 < 30:
        time.sleep(0.001)
    if not wk.is_completed():
        failures.append("is_completed() never became True")
    # (b) async_op=False on a busy stream returns without waiting for the GPU
    torch.cuda._sleep(SLEEP)
    z = torch.full((1 << 16,), float(rank + 1), device=DEV)
    t0 = time.monotonic()
    dist.all_reduce(z)
    block_s = time.monotonic() - t0
    same("all_reduce (async_op=False) behind a sleeping stream", z, want)
    if block_s > 0.1:
        failures.append(f"all_reduce(async_op=False) blocked the host for {block_s:.3f} s")
    if rank == 0:
        print(f"async: post {post_s * 1e3:.2f} ms, wait() {wait_s * 1e3:.2f} ms, all_reduce "
              f"(async_op=False) behind a busy stream {block_s * 1e3:.2f} ms", flush=True)
# (c) futures: in stream order
x.fill_(rank + 1)
wk = dist.all_reduce(x, async_op=True)
fut = wk.get_future()
v = fut.wait()[0]
same("get_future().wait() value", v, want)
same("get_future().then()", fut.then(lambda f: f.value()[0] * 3).wait(), want * 3)
wk.wait()
if not wk.is_completed() and SIM:
    failures.append("SIM: is_completed() False after wait()")

# ---- split_group, new_group with a bound device, a "cpu:gloo,cuda:weft" group ---------------------
if SIM:
    world_pg.bound_device_id = torch.device("cpu", 0)  # torch's split_group needs a bound device
try:
    sg = dist.split_group(split_ranks=[list(range(n))], group_desc="all")
    solo = dist.split_group(split_ranks=[[0]])
finally:
    if SIM:
        world_pg.bound_device_id = None
if not isinstance(sg, wt.ProcessGroupWeft) or dist.get_process_group_ranks(sg) != list(range(n)):
    failures.append(f"dist.split_group: {sg!r}")
else:
    t = on_dev(torch.full((5,), float(rank + 1)))
    dist.all_reduce(t, group=sg)
    same("split_group all_reduce", t, torch.full((5,), float(sum(r + 1 for r in range(n)))))
if (solo is None) != (rank != 0):
    failures.append(f"dist.split_group([[0]]) on rank {rank}: {solo!r}")
elif solo is not None:
    t = on_dev(torch.full((5,), 3.0))
    dist.all_reduce(t, group=solo)
    same("split_group of one rank", t, torch.full((5,), 3.0))
if not SIM:
    ng = dist.new_group([0])  # rank 1.. are non-members: weft's split with an empty list
    if rank == 0:
        t = on_dev(torch.full((5,), 2.0))
        dist.all_reduce(t, group=ng)
        same("new_group([0]) all_reduce", t, torch.full((5,), 2.0))
dm = dist.new_group(backend="cpu:gloo,cuda:weft")
if not isinstance(dm, wt.ProcessGroupWeft) or set(dm._others) != {"cpu"}:
    failures.append(f"'cpu:gloo,cuda:weft' group: {dm!r}, forwarding {getattr(dm, '_others', None)}")
else:
    t = on_dev(torch.full((5,), float(rank + 1)))
    if not SIM and dm._other_for([t]) is not None:
        failures.append("'cpu:gloo,cuda:weft': a CUDA tensor would go to gloo")
    dist.all_reduce(t, group=dm)
    same("'cpu:gloo,cuda:weft' all_reduce on the device", t, torch.full((5,), float(sum(r + 1 for r in range(n)))))
    c = torch.full((5,), float(rank + 1))
    dist.all_reduce(c, group=dm)  # CPU: to the group's gloo
    same("'cpu:gloo,cuda:weft' all_reduce on the CPU", c, torch.full((5,), float(sum(r + 1 for r in range(n)))))


# ---- DDP: 5 steps of a tiny model on the device, weft against gloo ------------------------------
def train(group):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).to(DEV)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=None if SIM else [DEV.index], process_group=group)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(5):
        xb, yb = torch.randn(4, 8, generator=gen).to(DEV), torch.randn(4, 1, generator=gen).to(DEV)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return host(torch.stack(losses)), host(params)


lw, pw = train(None)
lg, pg = train(gloo)  # gloo on the same device's tensors: the same compute, gloo's sums
if n == 2:  # a + b is one rounding either way: bit-identical
    same("DDP losses vs gloo", lw, lg)
    same("DDP parameters vs gloo", pw, pg)
else:  # sums in another order: float32 rounding, through 5 steps
    for what, a, b in (("losses", lw, lg), ("parameters", pw, pg)):
        counts["close"] += 1
        if not torch.allclose(a, b, rtol=1e-5, atol=1e-6):
            failures.append(f"DDP {what} vs gloo: weft {a[:6].tolist()} != gloo {b[:6].tolist()}")
if rank == 0:
    print(f"DDP 5 steps on {DEV}, weft vs gloo: losses {[round(v, 5) for v in lw.tolist()]}, "
          f"max |diff| {(lw - lg).abs().max().item():.3g}, parameters max |diff| "
          f"{(pw - pg).abs().max().item():.3g}", flush=True)

# ---- FSDP on the device: FULL_SHARD, fully_shard (FSDP2); HYBRID_SHARD and HSDP on 4+ ranks ------
# Each case trains a small model 3 SGD steps, on weft (device_id / the mesh: this rank's GPU),
# and twice more for reference, the same model with the same seeds:
#   * on "hostgloo" (torch_host_gloo.py) on the same GPU: the same CUDA kernels, the
#     collectives staged through the host and moved by gloo on CPU tensors, reductions done
#     in weft's order (left to right in rank order): bit-identical to weft on a GPU;
#   * on gloo with CPU tensors (FSDP on the CPU): the CPU's matmuls, not cuBLAS', so equal
#     only within float32 rounding through 3 steps (rtol FSDP_RTOL, atol FSDP_ATOL).
# In SIM the device is the CPU: weft's host reductions may add in another order than rank
# order where a group has more than 2 ranks (within rounding there; bit-exact with 2, where
# a + b is one rounding), and the gloo run does the same arithmetic (bit-exact with 2).
import traceback  # noqa: E402

import torch_host_gloo  # noqa: E402  (registers the "hostgloo" backend)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh  # noqa: E402
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP  # noqa: E402
from torch.distributed.fsdp import ShardingStrategy, fully_shard  # noqa: E402

torch.set_float32_matmul_precision("highest")  # no TF32 in the matmuls compared with the CPU's
CPU = torch.device("cpu")
FSDP_RTOL, FSDP_ATOL = 1e-4, 1e-5


def fsdp1(strategy, pg, device):
    return lambda m: FSDP(m, sharding_strategy=strategy, process_group=pg, device_id=device,
                          use_orig_params=True)


def fsdp2(mesh):
    def wrap(m):
        for layer in m:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        return fully_shard(m, mesh=mesh)
    return wrap


def fsdp_train(wrap, device):
    """3 SGD steps of a small model on device (rank r's batches from seed 100 + r): the
    losses and the full parameters after them, on the host."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4),
                                torch.nn.ReLU(), torch.nn.Linear(4, 1)).to(device)
    sharded = wrap(model)
    opt = torch.optim.SGD(sharded.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(3):
        xb, yb = torch.randn(4, 8, generator=gen).to(device), torch.randn(4, 1, generator=gen).to(device)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(sharded(xb), yb)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    if isinstance(sharded, FSDP):
        with FSDP.summon_full_params(sharded):
            params = torch.cat([p.detach().reshape(-1).clone() for p in sharded.parameters()])
    else:  # FSDP2: DTensor parameters
        params = torch.cat([p.full_tensor().detach().reshape(-1) for p in sharded.parameters()])
    return host(torch.stack(losses)), host(params)


def attempt(what, fn):
    """fn(), or None with the failure recorded (the other cases still run)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        failures.append(f"{what}: {type(e).__name__}: {' '.join(str(e).split())[:600]}")
        return None


def max_diff(a, b):
    return f"{(a - b).abs().max().item():.3g}" if a.shape == b.shape else f"shapes {tuple(a.shape)} {tuple(b.shape)}"


def fsdp_close(name, a, b, rtol, atol):
    counts["close"] += 1
    if a.shape != b.shape or not torch.allclose(a, b, rtol=rtol, atol=atol):
        failures.append(f"{name}: {a[:6].tolist()} != {b[:6].tolist()} (rtol {rtol:g}, atol {atol:g}; "
                        f"max |diff| {max_diff(a, b)})")


FULL, HYBRID = ShardingStrategy.FULL_SHARD, ShardingStrategy.HYBRID_SHARD
hg = dist.new_group(backend=torch_host_gloo.BACKEND_NAME)
fsdp_refs = {}  # key: (wrap on hostgloo, wrap on gloo with CPU tensors)
fsdp_cases = []  # (name, wrap on weft, key of its references, whether every reducing group has 2 ranks)
fsdp_refs["full"] = (fsdp1(FULL, hg, DEV), fsdp1(FULL, gloo, CPU))
fsdp_cases.append(("FULL_SHARD", fsdp1(FULL, world_pg, DEV), "full", n == 2))
if isinstance(dm, wt.ProcessGroupWeft):
    fsdp_cases.append(("FULL_SHARD on a 'cpu:gloo,cuda:weft' group", fsdp1(FULL, dm, DEV), "full", n == 2))
names1 = ("shard",)
fsdp_refs["fsdp2"] = (fsdp2(DeviceMesh.from_group(hg, DEV.type, mesh_dim_names=names1)),
                      fsdp2(DeviceMesh.from_group(gloo, "cpu", mesh_dim_names=names1)))
fsdp_cases.append(("fully_shard (FSDP2)", fsdp2(init_device_mesh(DEV.type, (n,), mesh_dim_names=names1)),
                   "fsdp2", n == 2))
if n >= 4 and n % 2 == 0:  # two simulated nodes of n / 2 ranks: shard inside a node, replicate across
    half = n // 2

    def node_groups(backend):
        """(shard, replicate) groups of this rank on backend; every rank creates every group."""
        shard = replicate = None
        for node in range(2):  # [0, 1], [2, 3] at 4 ranks
            g = dist.new_group(list(range(node * half, (node + 1) * half)), backend=backend)
            if rank // half == node:
                shard = g
        for local in range(half):  # [0, 2], [1, 3] at 4 ranks
            g = dist.new_group([local, local + half], backend=backend)
            if rank % half == local:
                replicate = g
        return shard, replicate

    w_groups, h_groups, g_groups = node_groups(None), node_groups(torch_host_gloo.BACKEND_NAME), node_groups("gloo")
    fsdp_refs["hybrid"] = (fsdp1(HYBRID, h_groups, DEV), fsdp1(HYBRID, g_groups, CPU))
    fsdp_cases.append((f"HYBRID_SHARD on 2 simulated nodes of {half} ranks", fsdp1(HYBRID, w_groups, DEV),
                       "hybrid", half == 2))
    names2 = ("replicate", "shard")
    layout = torch.arange(n).view(2, half)
    fsdp_refs["hsdp"] = (
        fsdp2(DeviceMesh.from_group([h_groups[1], h_groups[0]], DEV.type, mesh=layout, mesh_dim_names=names2)),
        fsdp2(DeviceMesh.from_group([g_groups[1], g_groups[0]], "cpu", mesh=layout, mesh_dim_names=names2)))
    fsdp_cases.append((f"fully_shard (FSDP2) HSDP on a 2x{half} mesh",
                       fsdp2(init_device_mesh(DEV.type, (2, half), mesh_dim_names=names2)), "hsdp", half == 2))
elif rank == 0:
    print(f"FSDP HYBRID_SHARD and HSDP: skipped at {n} ranks (they need two simulated nodes of 2 ranks "
          "or more: WEFT_TORCH_CUDA_NP=4)", flush=True)
fsdp_ref_results = {}
for name, wrap_w, key, two in fsdp_cases:
    if key not in fsdp_ref_results:
        wrap_h, wrap_g = fsdp_refs[key]
        fsdp_ref_results[key] = (attempt(f"FSDP {key} on hostgloo (the reference)", lambda: fsdp_train(wrap_h, DEV)),
                                 attempt(f"FSDP {key} on gloo with CPU tensors", lambda: fsdp_train(wrap_g, CPU)))
    got = attempt(f"FSDP {name} on weft", lambda: fsdp_train(wrap_w, DEV))
    href, gref = fsdp_ref_results[key]
    if got is None:
        continue
    lw, pw = got
    said = [f"FSDP {name}, 3 steps on {DEV}: weft losses {[round(v, 5) for v in lw.tolist()]}"]
    if href is not None:
        lh, ph = href
        if not SIM or two:
            same(f"FSDP {name} losses vs hostgloo", lw, lh)
            same(f"FSDP {name} parameters vs hostgloo", pw, ph)
            how = "bit-exact"
        else:
            fsdp_close(f"FSDP {name} losses vs hostgloo", lw, lh, 1e-5, 1e-6)
            fsdp_close(f"FSDP {name} parameters vs hostgloo", pw, ph, 1e-5, 1e-6)
            how = "within rtol 1e-5: weft's host reductions in SIM"
        said.append(f"vs hostgloo (the same device math; host-staged gloo, weft's order): losses max |diff| "
                    f"{max_diff(lw, lh)}, parameters {max_diff(pw, ph)} ({how})")
    if gref is not None:
        lg, pg_ = gref
        if SIM and two:
            same(f"FSDP {name} losses vs gloo on CPU tensors", lw, lg)
            same(f"FSDP {name} parameters vs gloo on CPU tensors", pw, pg_)
            how = "bit-exact"
        else:
            fsdp_close(f"FSDP {name} losses vs gloo on CPU tensors", lw, lg, FSDP_RTOL, FSDP_ATOL)
            fsdp_close(f"FSDP {name} parameters vs gloo on CPU tensors", pw, pg_, FSDP_RTOL, FSDP_ATOL)
            how = f"within rtol {FSDP_RTOL:g}, atol {FSDP_ATOL:g}"
        said.append(f"vs gloo on CPU tensors: losses max |diff| {max_diff(lw, lg)}, parameters "
                    f"{max_diff(pw, pg_)} ({how})")
    if rank == 0:
        print("; ".join(said), flush=True)
dist.barrier(group=gloo)

# ---- a GPU collective whose peer never comes fails within the group's timeout --------------------
def rescue(group, what):
    """Stops what is still pending on the group's weft communicator (a cancel sets the abort
    word its kernels watch), so a backend that failed to give it up cannot hang the rest of
    the test: the failure is reported instead."""
    with wt._LOCK:
        for w in list(wt._weft_comm._rt.inflight):
            if w._comm is group.comm and not w._done:
                w._abandon()
    failures.append(what)


def device_idle_within(limit_s):
    """Seconds until this device's work so far is done (host polling of an event: no weft
    call drives anything meanwhile), or None after limit_s."""
    ev = torch.cuda.Event()
    ev.record()
    t0 = time.monotonic()
    while not ev.query():
        if time.monotonic() - t0 > limit_s:
            return None
        time.sleep(0.01)
    return time.monotonic() - t0


if SIM:
    # The watchdog on CPU stand-ins: a stream-ordered Work (a host all_reduce that rank 0
    # skips stands for the GPU work) that nothing polls is given up at its deadline.
    tw = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=3))
    dist.barrier(group=gloo)
    if rank != 0:
        t0 = time.monotonic()
        t = torch.ones(4)
        with wt._LOCK:
            inner = tw.comm.all_reduce(t, async_op=True, timeout=wt._INF)
        wk = wt.WeftWork(tw, "allreduce", [inner], [t], None, None, device=DEV, event=wt.torch.cuda.Event())
        wt._watch(wk)
        while not wk._done and time.monotonic() - t0 < 30:
            time.sleep(0.01)  # no call into the backend: only the watchdog acts
        dt_s = time.monotonic() - t0
        err = None
        try:
            wk.wait()
        except wt.WeftDistTimeoutError as e:
            err = e
        if err is None or not (2 < dt_s < 15) or "did not complete within 3 s" not in str(err):
            if not wk._done:
                with wt._LOCK:
                    inner._abandon()
            failures.append(f"SIM: a stream-ordered work nobody polls, after {dt_s:.1f} s: {err!r}")
        else:
            print(f"rank {rank}: stream-ordered work timeout raised after {dt_s:.1f} s: {err}", flush=True)
    dist.barrier(group=gloo)
else:
    tg = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=3))
    tg2 = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=3))
    for g in (tg, tg2):
        t = on_dev(torch.ones(4))
        dist.all_reduce(t, group=g)  # every rank: the group's GPU state is set up
    torch.cuda.synchronize()
    dist.barrier(group=gloo)
    if rank != 0:  # rank 0 skips the next ones
        # (a) polled: is_completed() turns True within the timeout, wait() raises
        t0 = time.monotonic()
        wk = dist.all_reduce(on_dev(torch.ones(4)), group=tg, async_op=True)
        post_s = time.monotonic() - t0
        while not wk.is_completed() and time.monotonic() - t0 < 30:
            time.sleep(0.01)
        dt_s = time.monotonic() - t0
        err = None
        try:
            wk.wait()
        except wt.WeftDistError as e:
            err = e
        if err is None:
            rescue(tg, f"the GPU all_reduce that rank 0 skipped did not fail ({dt_s:.1f} s; "
                       "stopped by the test)")
        else:
            if not (2 < dt_s < 15) or post_s > 1:
                failures.append(f"the skipped GPU all_reduce failed after {dt_s:.1f} s (posting took "
                                f"{post_s:.2f} s), expected ~3 s: {err}")
            else:
                print(f"rank {rank}: GPU collective timeout raised after {dt_s:.1f} s: "
                      f"{type(err).__name__}: {err}", flush=True)
            if device_idle_within(10) is None:
                rescue(tg, "the failed GPU all_reduce's kernels still run: the device is busy")
            expect_error("the next GPU collective on the failed group",
                         lambda: (dist.all_reduce(on_dev(torch.ones(4)), group=tg), torch.cuda.synchronize()),
                         "weft")
        # (b) nobody waits (the hang of a real run): a blocking all_reduce returns at once and
        # nothing polls weft; the kernels must stop at the deadline all the same (the backend's
        # watchdog), so the device becomes idle and torch.cuda.synchronize() returns.
        t0 = time.monotonic()
        dist.all_reduce(on_dev(torch.ones(4)), group=tg2)
        idle_s = device_idle_within(30)
        if idle_s is None:
            rescue(tg2, "a GPU all_reduce that rank 0 skipped, posted by a blocking call, still ran "
                        "after 30 s (nobody enforced the group's 3 s timeout; stopped by the test)")
        else:
            torch.cuda.synchronize()
            dt_s = time.monotonic() - t0
            if not (2 < dt_s < 15):
                failures.append(f"a skipped GPU all_reduce nobody waited for ended after {dt_s:.1f} s, "
                                "expected ~3 s")
            else:
                print(f"rank {rank}: GPU collective nobody waited for stopped after {dt_s:.1f} s",
                      flush=True)
            expect_error("the next GPU collective on a group whose collective nobody waited for failed",
                         lambda: (dist.all_reduce(on_dev(torch.ones(4)), group=tg2), torch.cuda.synchronize()),
                         "weft")
    dist.barrier(group=gloo)

if not SIM:
    torch.cuda.synchronize()
if rank == 0:
    print(f"checks: {counts['exact']} bit-exact, {counts['close']} within rounding"
          f"{' (CPU stand-ins for CUDA)' if SIM else ''}", flush=True)
if failures:
    for f in failures:
        print(f"rank {rank}: FAIL {f}", flush=True)
    sys.exit(1)
dist.destroy_process_group()
print(f"torch cuda worker: rank {rank} of {n}, ok", flush=True)
