#!/bin/bash
# The binary wheel as a Python user gets it: contrib/build-wheel.sh builds it
# from this checkout; a fresh virtual environment (torch put in by
# contrib/install-torch.sh, as a user has it) gets `pip install` of the wheel
# (libucx-cu13 and numpy from PyPI); then, with a PATH that holds the venv and
# a few shell tools only (no compiler, no make, no pkg-config), no WEFT_*
# variable and no LD_LIBRARY_PATH:
#   1. weft_info runs and names the wheel's version and the libucx wheel's UCX;
#   2. a 4-rank Python allreduce (examples/python/allreduce.py) under weftrun,
#      each rank checking that libweft, UCX, hwloc and libcrypto were loaded
#      from the venv, none from the system's library folders;
#   3. a 2-rank DDP step under torchrun with backend="weft", gradients checked;
#   4. torch with the wheel's libnccl.so.2 preloaded maps it and no other libnccl.
# Prints the wheel's size. Exits non-zero when anything fails.
# Settings: WHEEL_TEST_TORCH=0 skips torch (step 3); KEEP=1 keeps the work folder.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-wheel-test.XXXXXX")
status=1
cleanup() {
    if [ "$status" -eq 0 ] && [ "${KEEP:-0}" = 0 ]; then rm -rf "$work"; else echo "wheel-test.sh: work folder $work"; fi
}
trap cleanup EXIT
t0=$SECONDS
phase() { echo "wheel-test.sh: $1 ($((SECONDS - t0)) s)"; }

contrib/build-wheel.sh "$work/dist" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
whl=$(ls "$work"/dist/*.whl)
phase "built $(basename "$whl"), $(($(stat -c %s "$whl") / 1024)) KiB"
version=$(sed -n 's/^PACKAGE_VERSION = //p' Makefile)

venv=$work/venv
if [ "${WHEEL_TEST_TORCH:-1}" != 0 ]; then
    WEFT_TORCH_VENV=$venv contrib/install-torch.sh
else
    "${PYTHON:-/usr/bin/python3}" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --disable-pip-version-check -q "$whl" numpy
phase "installed into a fresh venv: $("$venv/bin/python" -m pip list --disable-pip-version-check 2>/dev/null |
    grep -iE '^(weft|libucx-cu13|torch|numpy) ' | tr -s ' ' | paste -sd, -)"

# A PATH without build tools: the venv, and these.
tools=$work/bin
mkdir -p "$tools"
for t in bash sh env cat grep sed head tail sleep kill ps rm mkdir mktemp hostname timeout uname id; do
    p=$(command -v "$t") && ln -s "$p" "$tools/$t"
done
run() { # the user's environment: no WEFT_*, no LD_LIBRARY_PATH, no compilers
    env -i HOME="$work" PATH="$venv/bin:$tools" LANG=C.UTF-8 TMPDIR="${TMPDIR:-/tmp}" "$@"
}
failed=0
fail() {
    echo "FAIL: $1"
    failed=1
}

# 1. weft_info
info=$(run weft_info 2>&1) || fail "weft_info exited $?: $info"
grep -qx "weft $version" <<<"$(head -n 1 <<<"$info")" || fail "weft_info's first line is not 'weft $version': $(head -n 1 <<<"$info")"
ucx_wheel=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("libucx-cu13"))')
grep -q "UCX: *${ucx_wheel%.*}" <<<"$info" || fail "weft_info does not report the libucx wheel's UCX ($ucx_wheel): $(grep UCX: <<<"$info")"
phase "weft_info: $(head -n 1 <<<"$info"), $(grep -m1 'UCX:' <<<"$info" | tr -s ' ')"

# 2. weftrun -n 4 python allreduce.py, and where each library came from
cat >"$work/allreduce.py" <<'EOF'
import os, runpy, sys
runpy.run_path(sys.argv[1], run_name="__main__")
venv = os.path.realpath(sys.prefix)
maps = {l.split()[-1] for l in open("/proc/self/maps") if "/" in l.split()[-1]}
wanted = ("libweft", "libucp", "libucs.", "libuct.", "libhwloc", "libcrypto")
outside = sorted(p for p in maps if any(w in os.path.basename(p) for w in wanted) and not p.startswith(venv))
# Python's own hashlib may map the system's libcrypto; weft's is the bundled one.
outside = [p for p in outside if "libcrypto" not in p or not any("weft.libs/libcrypto" in m for m in maps)]
inside = sorted(p for p in maps if any(w in os.path.basename(p) for w in wanted) and p.startswith(venv))
assert any("/weft/lib/libweft.so.0" in p for p in inside), inside
assert any("/libucx/lib/libucp.so" in p for p in inside), inside
assert not outside, f"loaded from outside the venv: {outside}"
EOF
out=$(cd "$work" && run timeout 120 weftrun -n 4 python "$work/allreduce.py" "$src/examples/python/allreduce.py" 2>&1) ||
    fail "weftrun -n 4 python allreduce.py: $out"
[ "$(grep -o 'rank [0-9] of 4 ([a-z]* bootstrap): sum 10, max' <<<"$out" | wc -l)" = 4 ] || fail "4 ranks did not report the sum: $out"
phase "weftrun -n 4: $(grep -c '^rank ' <<<"$out") ranks, libraries from the venv"

# 3. torchrun --nproc_per_node 2, a DDP step with backend="weft"
if [ "${WHEEL_TEST_TORCH:-1}" != 0 ]; then
    cat >"$work/ddp.py" <<'EOF'
import torch, torch.distributed as dist
import weft.torch  # noqa: F401  registers "weft"
dist.init_process_group(backend="weft")
rank, size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Linear(16, 4)
ddp = torch.nn.parallel.DistributedDataParallel(model)
x = torch.full((8, 16), float(rank + 1))
ddp(x).sum().backward()
# Each rank's gradient of the weight is 8 * (rank + 1) per element; DDP averages.
want = 8 * sum(r + 1 for r in range(size)) / size
assert torch.allclose(model.weight.grad, torch.full_like(model.weight.grad, want)), model.weight.grad
print(f"rank {rank}: DDP step ok, grad {model.weight.grad[0, 0].item():g}")
dist.destroy_process_group()
EOF
    out=$(cd "$work" && run timeout 300 torchrun --standalone --nproc_per_node 2 "$work/ddp.py" 2>&1) ||
        fail "torchrun --nproc_per_node 2 ddp.py: $(tail -n 30 <<<"$out")"
    [ "$(grep -o 'DDP step ok' <<<"$out" | wc -l)" = 2 ] || fail "2 ranks did not finish the DDP step: $(tail -n 30 <<<"$out")"
    phase "torchrun --nproc_per_node 2: DDP step on backend weft"

    # 4. torch takes the wheel's libnccl.so.2 by LD_PRELOAD (NCCL's API, docs/NCCL.md)
    nccl=$("$venv/bin/python" -c 'import os, weft; print(os.path.join(os.path.dirname(weft.__file__), "lib", "nccl", "libnccl.so.2"))')
    out=$(run env LD_PRELOAD="$nccl" python -c '
import torch
v = torch.cuda.nccl.version()
maps = {l.split()[-1] for l in open("/proc/self/maps") if "libnccl" in l}
print("nccl", v, sorted(maps))
assert all("/weft/lib/nccl/" in m for m in maps), maps
' 2>&1) || fail "torch with the wheel's libnccl.so.2 preloaded: $out"
    phase "torch under LD_PRELOAD of the wheel's libnccl.so.2: $(tail -n 1 <<<"$out")"
fi

[ "$failed" -eq 0 ] || exit 1
status=0
phase "passed: $(basename "$whl") ($(($(stat -c %s "$whl") / 1024)) KiB)"
