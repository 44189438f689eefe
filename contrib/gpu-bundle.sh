#!/usr/bin/env bash
# weft's GPU tests and benchmarks for a GPU host that cannot build weft or
# reach a package registry (a lent machine, a cluster's compute node), built
# here: the tree configured with the CUDA toolkit for one architecture, built,
# and pruned to what contrib/gpu-test.sh and the benchmark drivers run
# (object files, static archives, the CPU-only test programs and debug
# sections go: about 20 MB), with
#   DIR/syslibs    Criterion and the libraries it needs that a bare Ubuntu lacks
#   DIR/ucx-cu13   UCX 1.22 with CUDA transports (contrib/bench/ucx-cuda-wheel.sh)
#   DIR/pylib      expecttest, which PyTorch's distributed tests import
#   DIR/mpich      with --mpich: MPICH's libmpi_abi.so.1 and mpiexec (PyPI's mpich),
#                  for contrib/bench/mpi-abi-compare.sh -m DIR/mpich
#   DIR/run.sh     runs a command in the bundle's environment (below)
# about 35 MB in all (55 MB with --mpich). Needs the packages of
# contrib/install-deps.sh, nvcc, and PyPI for the wheels.
#
#   contrib/gpu-bundle.sh [-a ARCHS] [--no-ucx] [--mpich] [DIR]   (default DIR: gpu-bundle here)
#     -a ARCHS   NVCC_ARCHS of the kernels (default 90: H100, H200; 100: B200)
#     --no-ucx   leave UCX 1.22 out (device buffers then take weft's staged path
#                over the host's UCX)
#
# On the GPU host, from a copy of this checkout holding DIR at the same place:
#   WEFT_TEST_GPU_MPS=1 DIR/run.sh contrib/gpu-test.sh DIR/build   (MPS: ranks share the GPU)
#   DIR/run.sh contrib/bench/mpi-abi-compare.sh -b DIR/build -m DIR/mpich -n 8
# run.sh puts the bundle's libraries on the library path (UCX 1.22 first,
# Criterion's last), its Python modules on PYTHONPATH, and runs the command
# from the checkout's root. The build names its own directory (libtool's
# wrappers, the libraries' RUNPATH): where the copy lives elsewhere, run.sh
# links that path to it (it needs the right to create it).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
archs=90 ucx=1 mpich=0 dir=""
while [ $# -gt 0 ]; do
    case $1 in
        -a) archs=$2; shift 2 ;;
        --no-ucx) ucx=0; shift ;;
        --mpich) mpich=1; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "gpu-bundle: unknown option $1 (see -h)" >&2; exit 2 ;;
        *) dir=$1; shift ;;
    esac
done
dir=${dir:-$src/gpu-bundle}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
case $dir/ in "$src"/*) ;; *) echo "gpu-bundle: DIR must lie inside this checkout (the GPU host gets a copy of it)" >&2; exit 2 ;; esac
git -C "$src" check-ignore -q "$dir" ||
    echo "gpu-bundle: note: git does not ignore $dir (a copy of the working tree may leave it out)" >&2
say() { echo "gpu-bundle: $*"; }
t0=$SECONDS

# The build, from clean: its directory is the bundle's.
rm -rf "$dir/build" && mkdir -p "$dir/build"
[ -x "$src/configure" ] || (cd "$src" && ./autogen.sh >/dev/null)
say "configure --with-cuda NVCC_ARCHS=$archs, make (log: $dir/build.log)"
(cd "$dir/build" && "$src/configure" --with-cuda NVCC_ARCHS="$archs" && make -j"$(nproc)" &&
    make -j"$(nproc)" check TESTS=) >"$dir/build.log" 2>&1 ||
    { tail -n 20 "$dir/build.log"; echo "gpu-bundle: the build failed" >&2; exit 1; }
say "built in $((SECONDS - t0)) s; pruning"
(
    cd "$dir/build"
    find . \( -name '*.o' -o -name '*.a' -o -name '*.lo' -o -name '*.fatbin' -o -name '*_fatbin.inc' \
        -o -name '*.log' -o -name '*.trs' \) -delete
    for t in test/test_*; do
        case $t in test/test_cuda | test/test_cuda_coll | *.c | *.sh) ;; *) [ -f "$t" ] && rm -f "$t" ;; esac
    done
    find . -type f -perm -u+x -print0 | while IFS= read -r -d '' f; do
        case $(head -c 4 "$f" | od -An -c | tr -d ' ') in *ELF*) strip --strip-debug "$f" ;; esac
    done
)

# Criterion's libraries (the GPU test programs link it) and what it needs beyond a base system.
rm -rf "$dir/syslibs" && mkdir -p "$dir/syslibs"
crit=$(ldd "$dir/build/test/test_cuda" | awk '$1 ~ /^libcriterion/ { print $3 }')
[ -n "$crit" ] || { echo "gpu-bundle: test_cuda does not link Criterion where expected" >&2; exit 1; }
cp -L "$crit" "$dir/syslibs/"
ldd "$crit" | awk '$1 ~ /^lib(git2|nanomsg|mbed|http_parser|ssh2)/ { print $3 }' | while read -r l; do cp -L "$l" "$dir/syslibs/"; done

if [ "$ucx" = 1 ]; then
    say "UCX 1.22 with CUDA transports from libucx-cu13"
    "$src/contrib/bench/ucx-cuda-wheel.sh" "$dir/ucx-cu13" >/dev/null
else
    rm -rf "$dir/ucx-cu13"
fi
rm -rf "$dir/pylib" "$dir/wheels" && mkdir -p "$dir/pylib" "$dir/wheels"
python3 -m pip download -q --no-deps -d "$dir/wheels" expecttest
python3 -m zipfile -e "$dir"/wheels/expecttest-*.whl "$dir/pylib"
rm -rf "$dir/wheels"
if [ "$mpich" = 1 ]; then
    say "MPICH's standard-ABI library from PyPI"
    rm -rf "$dir/mpich" "$dir/venv-mpich"
    python3 -m venv "$dir/venv-mpich" && "$dir/venv-mpich/bin/python" -m pip install -q mpich==5.0.2
    mkdir -p "$dir/mpich/lib" "$dir/mpich/bin"
    cp -a "$dir"/venv-mpich/lib/libmpi_abi.so* "$dir/venv-mpich/lib/mpich" "$dir/mpich/lib/"
    cp -a "$dir"/venv-mpich/bin/{mpiexec,mpiexec.hydra,hydra_pmi_proxy} "$dir/mpich/bin/"
    rm -rf "$dir/venv-mpich"
fi

# The runner: the path the build names, and the environment.
cat >"$dir/run.sh" <<EOF
#!/usr/bin/env bash
# Runs a command in this bundle's environment (contrib/gpu-bundle.sh made it).
set -euo pipefail
here=\$(cd "\$(dirname "\$0")" && pwd)
built=$dir
if [ "\$here" != "\$built" ] && [ ! -e "\$built" ]; then
    mkdir -p "\$(dirname "\$built")" && ln -s "\$here" "\$built" ||
        { echo "run.sh: the build names \$built: cannot link it to \$here" >&2; exit 1; }
fi
if [ -f "\$here/ucx-cu13/env.sh" ]; then . "\$here/ucx-cu13/env.sh"; fi
export LD_LIBRARY_PATH=\${LD_LIBRARY_PATH:+\$LD_LIBRARY_PATH:}\$here/syslibs
export PYTHONPATH=\$here/pylib\${PYTHONPATH:+:\$PYTHONPATH}
cd "\$here/$(realpath --relative-to="$dir" "$src")"
exec "\$@"
EOF
chmod +x "$dir/run.sh"
say "$dir: $(du -sh "$dir" | cut -f1) in $((SECONDS - t0)) s; on the GPU host: $(realpath --relative-to="$src" "$dir")/run.sh contrib/gpu-test.sh $(realpath --relative-to="$src" "$dir")/build"
