#!/bin/bash
# weft's libnccl.so.2 against PyTorch: every NCCL function libtorch_cuda.so
# imports is defined (and exported) by it, its SONAME is libnccl.so.2, its
# header's ABI is that of NVIDIA's nccl.h (which torch's nvidia-nccl package
# carries), and,
# put first with LD_PRELOAD, torch loads it instead of NVIDIA's and reports
# its version through torch.cuda.nccl.version() (no GPU needed: torch's CUDA
# build imports without one). Skipped (77) without an importable torch;
# contrib/install-torch.sh makes the checkout's .venv (or set
# WEFT_TORCH_PYTHON).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
top="$(cd "$here/../.." && pwd)"
build="$(cd "${top_builddir:-$top}" && pwd)"
lib="$build/.libs/libnccl.so.2"
[ -e "$lib" ] || { echo "FAIL: $lib was not built"; exit 1; }
fail=0
soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = libnccl.so.2 ] || { echo "FAIL: SONAME is '$soname', not libnccl.so.2"; fail=1; }

py=
for p in "${WEFT_TORCH_PYTHON:-}" "$top/.venv/bin/python" "$(command -v python3 || true)"; do
    [ -n "$p" ] && [ -x "$p" ] || continue
    if "$p" -c 'import torch' >/dev/null 2>&1; then py=$p; break; fi
done
if [ -z "$py" ]; then
    echo "SKIP: torch is not importable (contrib/install-torch.sh makes .venv; or set WEFT_TORCH_PYTHON)"
    exit $((fail ? 1 : 77))
fi
torch_lib=$("$py" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')
if [ ! -e "$torch_lib" ]; then
    echo "SKIP: $torch_lib is missing (a CPU-only torch has no NCCL to stand in for)"
    exit $((fail ? 1 : 77))
fi
want=$(nm -D --undefined-only "$torch_lib" | awk '$2 ~ /^nccl/ {print $2}' | sort -u)
have=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
missing=$(comm -23 <(echo "$want") <(echo "$have"))
nwant=$(echo "$want" | grep -c .)
if [ -n "$missing" ]; then
    echo "FAIL: libtorch_cuda.so imports $(echo "$missing" | wc -l) NCCL functions weft's libnccl.so.2 lacks:" \
        "$(echo "$missing" | tr '\n' ' ')"
    fail=1
else
    echo "ok: all $nwant NCCL functions libtorch_cuda.so imports are exported ($(echo "$have" | grep -c '^nccl') in all)"
fi
# The header's ABI: test/nccl/abi_probe.c prints sizes, offsets, initialiser
# values and enum values; built against weft's nccl.h and NVIDIA's (from the
# nvidia-nccl package torch brings, with the CUDA runtime's headers beside
# it), the two must print the same.
nv=$("$py" -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "include"))' 2>/dev/null)
cudainc=
for d in "$(dirname "$nv")/../cu13/include" /usr/local/cuda/include; do
    [ -f "$d/cuda_runtime.h" ] && { cudainc=$d; break; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-nccl-abi.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ -n "$nv" ] && [ -f "$nv/nccl.h" ] && [ -n "$cudainc" ]; then
    if ${CC:-cc} -std=c11 -I"$nv" -I"$cudainc" -o "$work/nvidia" "$here/abi_probe.c" 2>"$work/cc.log" &&
        ${CC:-cc} -std=c11 -I"$top/nccl" -DNCCL_WEFT_NO_CUDA_INCLUDE -o "$work/weft" "$here/abi_probe.c" 2>>"$work/cc.log"; then
        if diff <("$work/nvidia") <("$work/weft") >"$work/diff"; then
            echo "ok: nccl.h's ABI is NVIDIA's ($(grep -c . <("$work/weft")) sizes, offsets and values; $nv/nccl.h)"
        else
            echo "FAIL: nccl.h differs from NVIDIA's ($nv/nccl.h): < NVIDIA's, > weft's"
            cat "$work/diff"
            fail=1
        fi
    else
        echo "FAIL: test/nccl/abi_probe.c does not build:"
        cat "$work/cc.log"
        fail=1
    fi
else
    echo "note: no NVIDIA nccl.h with CUDA headers beside torch: the header's ABI is not compared"
fi
# torch with weft's library first: which libnccl it mapped, and the version it reads.
out=$(LD_PRELOAD="$lib" LD_LIBRARY_PATH="$build/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$py" -c '
import torch, torch.cuda.nccl as n
maps = [l.split()[-1] for l in open("/proc/self/maps") if "libnccl.so" in l]
print(n.version(), sorted(set(maps)))' 2>&1)
case $out in
    "(2, 28, 9) ['$build/.libs/libnccl.so.2.28.9']"*) echo "ok: torch under LD_PRELOAD maps only weft's library and reads version 2.28.9" ;;
    *) echo "FAIL: torch with LD_PRELOAD=$lib: $out"; fail=1 ;;
esac
exit $fail
