"""PyTorch's own "nccl" process group on weft's libnccl.so.2.

Run by test/nccl/torch_nccl_gpu.sh under torchrun, with LD_PRELOAD naming
weft's library (torch's libtorch_cuda.so finds NVIDIA's through its RPATH
otherwise). Every rank checks, on CUDA tensors:

- that torch's NCCL calls bind to the library under test (dladdr; torch may
  map NVIDIA's alongside by path) and torch reads version 2.28.9;
- every collective of torch.distributed's API against the same call on a
  gloo group of the same job (CPU copies of the inputs), bit-exact: inputs
  are small integers, so every reduction order gives the same bits in every
  type (and gloo's own result is compared where gloo has the type);
- point to point: send / recv, isend / irecv, batch_isend_irecv;
- a subgroup, PREMUL_SUM, the object collectives, barrier;
- DDP for a few steps against DDP on gloo (CPU), and FSDP2 (fully_shard)
  against the same model trained alone, within float tolerance.

usage: torch_nccl_worker.py eager|lazy
  eager: init_process_group(device_id=...): nonblocking communicators,
         subgroups split from the world's, point to point on the world's;
  lazy:  PyTorch's default: a communicator per group and per pair of
         point-to-point ranks, made on first use (the world's first here:
         weft's world is the first communicator's; docs/NCCL.md).
Prints "ok NAME" / "FAIL NAME: why" per check and exits 1 on any failure.
"""

from __future__ import annotations

import ctypes
import os
import sys
import traceback

import torch
import torch.distributed as dist


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
LOCAL = int(os.environ.get("LOCAL_RANK", RANK))
failures: list[str] = []


def check(name: str, fn) -> None:
    try:
        fn()
        print(f"ok {name}", flush=True)
    except Exception as e:  # noqa: BLE001 - every failure is reported, not raised
        failures.append(name)
        print(f"FAIL {name}: rank {RANK}: {e}", flush=True)
        traceback.print_exc()


def same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    got = got.detach().cpu()
    want = want.detach().cpu().to(got.dtype)
    if got.shape != want.shape or not torch.equal(got, want):
        diff = (
            (got.double() - want.double()).abs().max().item()
            if got.shape == want.shape
            else "shape"
        )
        raise AssertionError(
            f"{what}: got {got.flatten()[:6].tolist()} want {want.flatten()[:6].tolist()} ({diff})"
        )


DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int32,
    torch.int64,
    torch.uint8,
]
GLOO_DTYPES = {torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8, torch.float16}


def ints(r: int, n: int, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """Rank r's input: small integers (exact sums, products of at most 2^world)."""
    base = torch.arange(n, dtype=torch.int64)
    v = (base * 7 + r * 3 + salt) % 5
    return v.to(dtype)


def small(r: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """1 or 2: products stay exact in every type."""
    return (((torch.arange(n) + r) % 2) + 1).to(dtype)


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "eager"
    ngpu = torch.cuda.device_count()
    dev = torch.device("cuda", LOCAL % ngpu)
    torch.cuda.set_device(dev)
    if mode == "eager":
        dist.init_process_group("nccl", device_id=dev)
    else:
        dist.init_process_group("nccl")
    gloo = dist.new_group(backend="gloo")

    def library():
        # torch's own __init__ may dlopen NVIDIA's libnccl.so.2 by its path, so
        # both can be mapped; what counts is where the NCCL calls that torch
        # makes bind: the global scope (the preloaded library first), read
        # back with dladdr.
        want = os.path.realpath(os.environ.get("WEFT_NCCL_LIB", ""))
        libc = ctypes.CDLL(None)
        # NVIDIA's library, opened by torch without RTLD_GLOBAL, is not in the
        # global scope: then the one libnccl.so.2 loaded (by its SONAME) is it.
        try:
            libc.ncclGetVersion
            lib = libc
        except AttributeError:
            lib = ctypes.CDLL("libnccl.so.2", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        for name in ("ncclGetVersion", "ncclCommInitRankConfig", "ncclAllReduce", "ncclGroupEnd"):
            addr = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
            info = DlInfo()
            assert libc.dladdr(ctypes.c_void_p(addr), ctypes.byref(info)), f"dladdr({name}) failed"
            got = os.path.realpath(info.dli_fname.decode())
            assert got == want, f"{name} binds to {got}, want {want}"
        assert torch.cuda.nccl.version() == (2, 28, 9), torch.cuda.nccl.version()

    check("NCCL's calls bind to the library under test, version 2.28.9", library)

    n = 1000

    def all_reduce():
        ops = [
            dist.ReduceOp.SUM,
            dist.ReduceOp.PRODUCT,
            dist.ReduceOp.MIN,
            dist.ReduceOp.MAX,
            dist.ReduceOp.AVG,
        ]
        for dt in DTYPES:
            for op in ops:
                if op == dist.ReduceOp.AVG and not dt.is_floating_point:
                    continue
                mk = small if op == dist.ReduceOp.PRODUCT else ints
                t = mk(RANK, n, dt).to(dev)
                dist.all_reduce(t, op=op)
                ins = [mk(r, n, torch.float64) for r in range(WORLD)]
                if op == dist.ReduceOp.SUM:
                    want = sum(ins)
                elif op == dist.ReduceOp.PRODUCT:
                    want = torch.stack(ins).prod(0)
                elif op == dist.ReduceOp.MIN:
                    want = torch.stack(ins).min(0).values
                elif op == dist.ReduceOp.MAX:
                    want = torch.stack(ins).max(0).values
                else:
                    want = sum(ins) / WORLD
                want = want.to(dt)
                if op == dist.ReduceOp.AVG and dt in (torch.float16, torch.bfloat16):
                    same(t, (sum(x.to(torch.float32) for x in ins) / WORLD).to(dt), f"avg {dt}")
                else:
                    same(t, want, f"all_reduce {op} {dt}")
                if dt in GLOO_DTYPES and op != dist.ReduceOp.AVG:
                    g = mk(RANK, n, dt)
                    dist.all_reduce(g, op=op, group=gloo)
                    same(t, g, f"against gloo: all_reduce {op} {dt}")
        # in place on a view, and a large one (past weft's one-launch sizes)
        big = ints(RANK, 8 << 20, torch.float32).to(dev)
        dist.all_reduce(big)
        same(big, sum(ints(r, 8 << 20, torch.float64) for r in range(WORLD)), "all_reduce 32 MiB")

    check("all_reduce: every type and op, against gloo", all_reduce)

    def broadcast_reduce():
        for src in {0, WORLD - 1}:
            t = (
                ints(RANK, n, torch.bfloat16).to(dev)
                if RANK == src
                else torch.zeros(n, dtype=torch.bfloat16, device=dev)
            )
            dist.broadcast(t, src=src)
            same(t, ints(src, n, torch.bfloat16), f"broadcast from {src}")
        dst = 1 % WORLD
        t = ints(RANK, n, torch.float32).to(dev)
        dist.reduce(t, dst=dst)
        if RANK == dst:
            same(t, sum(ints(r, n, torch.float64) for r in range(WORLD)), "reduce")

    check("broadcast and reduce", broadcast_reduce)

    def gathers():
        x = ints(RANK, n, torch.float16).to(dev)
        out = torch.empty(WORLD * n, dtype=torch.float16, device=dev)
        dist.all_gather_into_tensor(out, x)
        same(
            out,
            torch.cat([ints(r, n, torch.float16) for r in range(WORLD)]),
            "all_gather_into_tensor",
        )
        lst = [torch.empty(n, dtype=torch.float16, device=dev) for _ in range(WORLD)]
        dist.all_gather(lst, x)
        for r in range(WORLD):
            same(lst[r], ints(r, n, torch.float16), f"all_gather [{r}]")
        # uneven sizes (torch groups broadcasts / point to point underneath)
        y = torch.full((RANK + 1,), RANK, dtype=torch.int64, device=dev)
        lst = [torch.empty(r + 1, dtype=torch.int64, device=dev) for r in range(WORLD)]
        dist.all_gather(lst, y)
        for r in range(WORLD):
            same(lst[r], torch.full((r + 1,), r), f"uneven all_gather [{r}]")
        g = (
            [torch.empty(n, dtype=torch.float16, device=dev) for _ in range(WORLD)]
            if RANK == 0
            else None
        )
        dist.gather(x, g, dst=0)
        if RANK == 0:
            for r in range(WORLD):
                same(g[r], ints(r, n, torch.float16), f"gather [{r}]")
        s = [ints(r, n, torch.int32).to(dev) for r in range(WORLD)] if RANK == WORLD - 1 else None
        o = torch.empty(n, dtype=torch.int32, device=dev)
        dist.scatter(o, s, src=WORLD - 1)
        same(o, ints(RANK, n, torch.int32), "scatter")

    check("all_gather (tensor, list, uneven), gather, scatter", gathers)

    def reduce_scatters():
        x = ints(RANK, WORLD * n, torch.bfloat16).to(dev)
        o = torch.empty(n, dtype=torch.bfloat16, device=dev)
        dist.reduce_scatter_tensor(o, x)
        full = sum(ints(r, WORLD * n, torch.float64) for r in range(WORLD))
        same(o, full[RANK * n : (RANK + 1) * n], "reduce_scatter_tensor")
        ins = [ints(RANK, n, torch.float32, salt=r).to(dev) for r in range(WORLD)]
        o2 = torch.empty(n, dtype=torch.float32, device=dev)
        dist.reduce_scatter(o2, ins)
        same(
            o2,
            sum(ints(r, n, torch.float64, salt=RANK) for r in range(WORLD)),
            "reduce_scatter (list)",
        )
        g = ints(RANK, WORLD * n, torch.float32)
        dist.all_reduce(g, group=gloo)  # gloo's answer, then this rank's block
        same(o, g[RANK * n : (RANK + 1) * n], "against gloo: reduce_scatter_tensor")

    check("reduce_scatter (tensor, list), against gloo", reduce_scatters)

    def all_to_all():
        x = torch.cat(
            [torch.full((4,), RANK * 100 + r, dtype=torch.int64) for r in range(WORLD)]
        ).to(dev)
        o = torch.empty_like(x)
        dist.all_to_all_single(o, x)
        same(
            o,
            torch.cat([torch.full((4,), r * 100 + RANK) for r in range(WORLD)]),
            "all_to_all_single",
        )
        # uneven splits: rank r sends (r + d + 1) elements to rank d
        ins = [r_d + 1 + RANK for r_d in range(WORLD)]
        outs = [RANK + 1 + r for r in range(WORLD)]
        x = torch.cat(
            [torch.full((ins[d],), RANK * 10 + d, dtype=torch.float32) for d in range(WORLD)]
        ).to(dev)
        o = torch.empty(sum(outs), dtype=torch.float32, device=dev)
        dist.all_to_all_single(o, x, output_split_sizes=outs, input_split_sizes=ins)
        same(
            o,
            torch.cat([torch.full((outs[r],), r * 10 + RANK) for r in range(WORLD)]),
            "uneven all_to_all_single",
        )
        xs = [
            torch.full((3,), RANK * 10 + d, dtype=torch.float32, device=dev) for d in range(WORLD)
        ]
        os_ = [torch.empty(3, dtype=torch.float32, device=dev) for _ in range(WORLD)]
        dist.all_to_all(os_, xs)
        for r in range(WORLD):
            same(os_[r], torch.full((3,), r * 10 + RANK), f"all_to_all [{r}]")

    check("all_to_all (single, uneven, list)", all_to_all)

    def p2p():
        if WORLD == 1:
            return
        right, left = (RANK + 1) % WORLD, (RANK - 1) % WORLD
        s = torch.full((n,), float(RANK), device=dev)
        r = torch.empty(n, device=dev)
        ops = [dist.P2POp(dist.isend, s, right), dist.P2POp(dist.irecv, r, left)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        same(r, torch.full((n,), float(left)), "batch_isend_irecv ring")
        pair = RANK ^ 1
        if pair < WORLD:
            t = torch.full((17,), float(RANK), device=dev)
            if RANK % 2 == 0:
                dist.send(t, pair)
                dist.recv(t, pair)
            else:
                got = torch.empty(17, device=dev)
                dist.recv(got, pair)
                dist.send(t, pair)
                t = got
            same(t, torch.full((17,), float(pair)), "send / recv pair")
            a = torch.full((5,), float(RANK), device=dev)
            b = torch.empty(5, device=dev)
            req = [dist.isend(a, pair), dist.irecv(b, pair)]
            for q in req:
                q.wait()
            same(b, torch.full((5,), float(pair)), "isend / irecv pair")

    check("send / recv, isend / irecv, batch_isend_irecv", p2p)

    def subgroup():
        half = list(range(max(1, WORLD // 2)))
        sub = dist.new_group(half)
        if RANK in half:
            t = torch.full((n,), float(RANK), device=dev)
            dist.all_reduce(t, group=sub)
            same(t, torch.full((n,), float(sum(half))), "subgroup all_reduce")
        dist.barrier()

    check("subgroup, barrier", subgroup)

    def premul():
        t = ints(RANK, n, torch.float32).to(dev)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        same(t, sum(ints(r, n, torch.float64) for r in range(WORLD)) * 0.5, "premul_sum 0.5")

    check("PREMUL_SUM", premul)

    def objects():
        objs = [{"rank": RANK}] if RANK == 0 else [None]
        dist.broadcast_object_list(objs, src=0)
        assert objs[0] == {"rank": 0}, objs
        out = [None] * WORLD
        dist.all_gather_object(out, ("r", RANK))
        assert out == [("r", r) for r in range(WORLD)], out

    check("broadcast_object_list, all_gather_object", objects)

    def ddp():
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
        )
        ref = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
        ref.load_state_dict(model.state_dict())
        a = torch.nn.parallel.DistributedDataParallel(model.to(dev), device_ids=[dev])
        b = torch.nn.parallel.DistributedDataParallel(ref, process_group=gloo)
        oa = torch.optim.SGD(a.parameters(), lr=0.1)
        ob = torch.optim.SGD(b.parameters(), lr=0.1)
        for step in range(5):
            g = torch.Generator().manual_seed(100 * step + RANK)
            x, y = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
            for m, o, xx, yy in ((a, oa, x.to(dev), y.to(dev)), (b, ob, x, y)):
                o.zero_grad()
                torch.nn.functional.mse_loss(m(xx), yy).backward()
                o.step()
        for (name, p), q in zip(a.module.named_parameters(), b.module.parameters()):
            d = (p.detach().cpu() - q.detach()).abs().max().item()
            assert d < 1e-5, f"{name}: DDP on weft's nccl and on gloo differ by {d}"

    check("DDP, 5 steps, against gloo", ddp)

    def fsdp2():
        from torch.distributed.fsdp import fully_shard

        torch.manual_seed(1)
        model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(3)])
        ref = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(3)])
        ref.load_state_dict(model.state_dict())
        model = model.to(dev)
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        oa = torch.optim.SGD(model.parameters(), lr=0.05)
        ob = torch.optim.SGD(ref.parameters(), lr=0.05)
        for step in range(3):
            g = torch.Generator().manual_seed(step)
            x, y = torch.randn(8 * WORLD, 64, generator=g), torch.randn(8 * WORLD, 64, generator=g)
            mine = slice(RANK * 8, (RANK + 1) * 8)
            oa.zero_grad()
            la = torch.nn.functional.mse_loss(model(x[mine].to(dev)), y[mine].to(dev))
            la.backward()
            oa.step()
            ob.zero_grad()
            lb = torch.nn.functional.mse_loss(ref(x), y)
            lb.backward()
            ob.step()
        full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
        for k, v in ref.state_dict().items():
            d = (full[k] - v).abs().max().item()
            assert d < 1e-4, f"{k}: FSDP2 on weft's nccl and one process differ by {d}"

    check("FSDP2 (fully_shard), 3 steps, against one process", fsdp2)

    def ran_on_weft():
        # weft's library did the work: libweft is mapped and initialised
        # (its NCCL communicators are weft communicators); on NVIDIA's, it is not mapped.
        weft = [m for m in {line.split()[-1] for line in open("/proc/self/maps")} if "libweft.so" in m]
        if os.environ.get("WEFT_TEST_NCCL_UNDER") == "nvidia":
            assert not weft, f"libweft mapped under NVIDIA's library: {weft}"
            return
        assert weft, "libweft.so is not mapped: the calls did not reach weft"
        if WORLD == 1:
            return  # a communicator of one rank needs no weft communicator (docs/NCCL.md)
        flag = ctypes.c_int(0)
        assert ctypes.CDLL(weft[0]).weft_initialized(ctypes.byref(flag)) == 0 and flag.value == 1
    check("the collectives ran on the library under test", ran_on_weft)

    dist.barrier()
    dist.destroy_process_group()
    if failures:
        print(f"rank {RANK}: {len(failures)} failed: {', '.join(failures)}", flush=True)
        return 1
    if RANK == 0:
        print(f"all checks passed on {WORLD} ranks ({mode})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
