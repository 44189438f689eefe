#!/usr/bin/env bash
# A UCX with CUDA transports (cuda_copy, cuda_ipc) for a GPU host without
# network access, taken from PyPI's libucx-cu13 wheel (UCX 1.22 built with
# CUDA 13, no verbs): run this where PyPI is reachable, carry DIR over.
#
#   contrib/bench/ucx-cuda-wheel.sh [-w WHEEL] [-v VERSION] [--arch x86_64|aarch64] [--no-strip] [DIR]
#     DIR         where the files go (default ./ucx-cu13, which git ignores); emptied first
#     -w WHEEL    use this wheel file instead of downloading one
#     -v VERSION  libucx-cu13 version (default: the newest)
#     --arch A    the GPU host's machine (default x86_64)
#     --no-strip  keep the symbol tables (38 MB instead of about 12 MB)
#
# Only what ucx_perftest -m cuda and weft need is extracted (the wheel holds
# 153 MB uncompressed: static archives, headers, each library three times):
#   libucx/bin/ucx_perftest, ucx_info
#   libucx/lib/lib{ucp,uct,ucs,ucm}.so.0              (the sonames weft links)
#   libucx/lib/ucx/libuct_cuda.so.0, libucm_cuda.so.0, libuct_cma.so.0,
#                  libucx_perftest_cuda.so.0           (UCX's modules)
#   libucx/etc/ucx/ucx.conf                             (UCX's per-CPU tuning)
#   libucx_cu13.libs/libcudart-*.so.*, libgomp-*.so.*   (bundled, found by RPATH)
# The layout stays the wheel's (the RPATHs are relative). On the GPU host the
# NVIDIA driver provides libcuda.so.1 and libnvidia-ml.so.1.
#
# Use: DIR/env.sh sets LD_LIBRARY_PATH (DIR/libucx/lib first: weft's libucp.so.0
# resolves there instead of the system UCX) and UCX_MODULE_DIR; or give DIR
# to contrib/bench/gpu-pt2pt.sh -U DIR, or DIR/libucx/bin/ucx_perftest to
# contrib/bench/ucx-floor.sh -u. Check: DIR/libucx/bin/ucx_info -d | grep cuda
set -euo pipefail
dir=ucx-cu13 wheel="" version="" arch=x86_64 strip=1
while [ $# -gt 0 ]; do
    case $1 in
        -w) wheel=$2; shift 2 ;;
        -v) version=$2; shift 2 ;;
        --arch) arch=$2; shift 2 ;;
        --no-strip) strip=0; shift ;;
        -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
        -*) echo "ucx-cuda-wheel.sh: unknown option $1" >&2; exit 2 ;;
        *) dir=$1; shift ;;
    esac
done
case $dir in /* | ./* | ../*) ;; *) dir=./$dir ;; esac
rm -rf "$dir"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ -z "$wheel" ]; then
    dl=$(mktemp -d "${TMPDIR:-/tmp}/ucx-wheel.XXXXXX")
    trap 'rm -rf "$dl"' EXIT
    ${PIP:-python3 -m pip} download --quiet --no-deps --only-binary=:all: --platform "manylinux_2_28_$arch" \
        -d "$dl" "libucx-cu13${version:+==$version}"
    wheel=$(ls "$dl"/libucx_cu13-*.whl)
fi
echo "# $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"

# Extract the set, with the wheel's file modes (zipfile drops them).
python3 - "$wheel" "$dir" <<'EOF'
import fnmatch, os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
want = ["libucx/bin/ucx_perftest", "libucx/bin/ucx_info",
        "libucx/lib/libucp.so.0", "libucx/lib/libuct.so.0", "libucx/lib/libucs.so.0", "libucx/lib/libucm.so.0",
        "libucx/lib/ucx/libuct_cuda.so.0", "libucx/lib/ucx/libucm_cuda.so.0", "libucx/lib/ucx/libuct_cma.so.0",
        "libucx/lib/ucx/libucx_perftest_cuda.so.0", "libucx/etc/ucx/ucx.conf",
        "libucx_cu13.libs/libcudart-*.so*", "libucx_cu13.libs/libgomp-*.so*"]
z = zipfile.ZipFile(wheel)
names = [i.filename for i in z.infolist()]
total = sum(i.file_size for i in z.infolist())
for pattern in want:
    hits = fnmatch.filter(names, pattern)
    if not hits:
        sys.exit(f"ucx-cuda-wheel.sh: {pattern} is not in {os.path.basename(wheel)}")
    for name in hits:
        info = z.getinfo(name)
        z.extract(info, out)
        mode = (info.external_attr >> 16) & 0o777
        os.chmod(os.path.join(out, name), mode or (0o755 if "/bin/" in name or ".so" in name else 0o644))
print(f"# wheel: {len(names)} entries, {total / 1e6:.1f} MB uncompressed")
EOF
chmod +x "$dir"/libucx/bin/*
if [ "$strip" = 1 ] && command -v strip >/dev/null; then
    strip --strip-unneeded "$dir"/libucx/bin/* "$dir"/libucx/lib/*.so.0 "$dir"/libucx/lib/ucx/*.so.0
fi
cat >"$dir/env.sh" <<'EOF'
# . ./env.sh: weft, ucx_perftest and ucx_info on this UCX instead of the system one.
ucx_cu13=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)
export LD_LIBRARY_PATH="$ucx_cu13/libucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR="$ucx_cu13/libucx/lib/ucx"
export PATH="$ucx_cu13/libucx/bin:$PATH"
EOF
(cd "$dir" && find . -type f ! -name env.sh -printf '%s %p\n' | sort -k2 | awk '{ printf "%10d  %s\n", $1, $2; t += $1 } END { printf "%10d  total (%.1f MB)\n", t, t / 1e6 }')
# The libraries must resolve among themselves (the driver's excepted).
missing=$(LD_LIBRARY_PATH="$dir/libucx/lib" ldd "$dir"/libucx/bin/* "$dir"/libucx/lib/ucx/*.so.0 2>/dev/null |
    grep 'not found' | grep -v 'libcuda.so.1\|libnvidia-ml.so.1' | sort -u || true)
[ -z "$missing" ] || { echo "ucx-cuda-wheel.sh: unresolved: $missing" >&2; exit 1; }
echo "# $(LD_LIBRARY_PATH="$dir/libucx/lib" "$dir/libucx/bin/ucx_info" -v | head -1 | sed 's/^# *//') in $dir; . $dir/env.sh to use it"
