#!/bin/bash
# The release tarball as a packager gets it: `make distcheck` on this
# checkout (make dist; the tarball unpacked read-only, configured in a VPATH
# build folder as this checkout was configured, built, `make check`, make
# install / uninstall leaving nothing behind, make dist again from there,
# make distclean leaving nothing behind), then:
#   - the tarball holds every file git tracks, less .ci/ and .gitignore files,
#     and nothing else but what autoreconf writes (configure, Makefile.in,
#     ...): no build outputs, no logs, no generated coll/rules.inc or fatbin;
#   - one version everywhere: configure.ac's, in the tarball's name,
#     weft_info, weft_get_version (config.h), weft.pc, weft_version.h, the
#     tarball's .tarball-version and the Python package (its build backend,
#     weft.__version__).
# Exits non-zero when anything fails. Leaves weft-VERSION.tar.gz here.
#
# The checkout must be configured (contrib/test.sh does it; without a
# Makefile this configures it as test.sh does). With the GPU kernels on, the
# tarball's build takes the checkout's own nvcc outputs where make says they
# are up to date there (the same sources: the tarball is made from them):
# nvcc is most of a build's time. Every other step,
# kernels_fatbin.inc from the fatbin included, runs in the tarball's build.
#
# Settings:
#   DIST_TEST_TESTS  the tests `make check` runs in the tarball's build: "all"
#                    for the Makefile's list; default: the Criterion tests,
#                    the install flow, the benchmarks' checks and the
#                    launchers (the torch and fuzz tests run in contrib/test.sh's
#                    pass over the checkout, and need the checkout's .venv)
#   JOBS             make -j (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
JOBS=${JOBS:-$(nproc)}
default_tests="test/test_units test/test_op test/test_store test/test_p2p test/test_init
    test/test_sched test/test_comm test/test_topo test/test_coll test/test_coll_async test/test_shm
    test/test_hier test/test_rdma test/test_cuda test/test_cuda_coll test/test_ft
    test/install/test_install.sh test/bench/test_osu_validate.sh test/bench/test_soak.sh
    test/launchers/test_launchers.sh"
tests=$(tr -s ' \n' '  ' <<<"${DIST_TEST_TESTS:-$default_tests}" | sed 's/^ //; s/ $//')
[ "$tests" != all ] || tests=
t0=$SECONDS
phase() { echo "dist-test.sh: $1 ($((SECONDS - t0)) s)"; }

if [ ! -f Makefile ] || [ ! -x config.status ]; then
    [ -x configure ] || ./autogen.sh
    # shellcheck disable=SC2086 # CONFIGURE_FLAGS: several words
    ./configure --enable-werror ${CONFIGURE_FLAGS:-}
fi
version=$(sed -n 's/^PACKAGE_VERSION = //p' Makefile)
tarball=weft-$version.tar.gz
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-dist.XXXXXX")
status=1
cleanup() {
    if [ "$status" -eq 0 ]; then rm -rf "$work"; else echo "dist-test.sh: logs in $work"; fi
}
trap cleanup EXIT

# The tarball's configure gets this checkout's options (contrib/test.sh's:
# --enable-werror, CONFIGURE_FLAGS), less those distcheck sets itself.
cfg=()
eval "cfg=($(./config.status --config))"
flags=()
for a in ${cfg[@]+"${cfg[@]}"}; do
    case $a in --prefix=* | --srcdir=* | NVCC=*) ;; *) flags+=("$a") ;; esac
done
if grep -q '^#define WEFT_HAVE_CUDA_KERNELS 1' config.h; then
    nvcc=$(sed -n 's/^NVCC = //p' Makefile)
    # An output nvcc would write (-o X, or X.tmp for X) that this checkout
    # has up to date under the same relative name is copied from it.
    cat >"$work/nvcc" <<EOF
#!/bin/bash
out= prev=
for a in "\$@"; do [ "\$prev" = -o ] && out=\$a; prev=\$a; done
rel=\${out%.tmp}
if [ -n "\$out" ] && [ "\${out#/}" = "\$out" ] && [ -f "$src/\$rel" ] &&
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$src" -q "\$rel" 2>/dev/null; then
    echo "dist-test.sh: nvcc: \$rel as built in $src" >&2
    exec cp "$src/\$rel" "\$out"
fi
exec "$nvcc" "\$@"
EOF
    chmod +x "$work/nvcc"
    flags+=("NVCC=$work/nvcc")
elif grep -q '^NVCC = ' Makefile; then
    flags+=("NVCC=$(sed -n 's/^NVCC = //p' Makefile)")
fi
dc_flags=$(printf '%q ' ${flags[@]+"${flags[@]}"})
phase "make distcheck of weft $version, configure options: $dc_flags; tests: ${tests:-all}"
rm -f "$tarball"
check=0
# (the default list leaves out the torch tests: the unpacked tarball has no
# .venv, and under CI=true a missing torch is a failure)
make -j"$JOBS" distcheck DISTCHECK_CONFIGURE_FLAGS="$dc_flags" ${tests:+TESTS="$tests"} \
    >"$work/distcheck.log" 2>&1 || check=$?
grep -E "^(PASS|FAIL|SKIP|ERROR|XFAIL|XPASS):|^# (TOTAL|PASS|SKIP|FAIL|ERROR)|archives ready" \
    "$work/distcheck.log" || true
if [ "$check" -ne 0 ]; then
    echo "dist-test.sh: make distcheck failed (status $check):"
    tail -n 40 "$work/distcheck.log"
    # distcheck leaves its tree on failure: the failing tests' logs.
    if [ -d "weft-$version/_build" ]; then
        find "weft-$version/_build" -name '*.trs' -exec grep -lE '^:test-result: (FAIL|ERROR)' {} + |
            while read -r trs; do
                echo "=== ${trs%.trs}.log"
                tail -n 60 "${trs%.trs}.log"
            done
    fi
    exit 1
fi
phase "make distcheck passed"

failed=0
indent() { sed 's/^/    /'; }
fail() {
    echo "FAIL: $1"
    failed=1
}
# What the tarball holds against what git tracks.
tar -tzf "$tarball" | sed -e "s|^weft-$version/||" -e '/\/$/d' -e '/^$/d' | sort >"$work/tar.list"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$src" ls-files | grep -vE '^\.ci/|(^|/)\.gitignore$' | sort >"$work/git.list"
    missing=$(comm -23 "$work/git.list" "$work/tar.list")
    [ -z "$missing" ] || fail "tracked by git, not in $tarball (EXTRA_DIST in Makefile.am):
$(indent <<<"$missing")"
    extra=$(comm -13 "$work/git.list" "$work/tar.list" |
        grep -vE '^(\.tarball-version|configure|Makefile\.in|aclocal\.m4|config\.h\.in|build-aux/[^/]+|m4/(libtool|lt[^/]*)\.m4)$' || true)
    [ -z "$extra" ] || fail "in $tarball, not tracked by git:
$(indent <<<"$extra")"
else
    echo "dist-test.sh: not a git checkout: the tarball's list is not compared with git's"
fi
built=$(grep -E '\.(o|lo|la|so|log|trs|fatbin)$|(^|/)\.(deps|libs|dirstamp)(/|$)|^coll/rules\.inc$|_fatbin\.inc$' \
    "$work/tar.list" || true)
[ -z "$built" ] || fail "build outputs in $tarball:
$(indent <<<"$built")"

# One version: configure.ac's, which names the tarball.
v=$version
vmaj=${v%%.*} vrest=${v#*.}
vmin=${vrest%%.*} vpat=${vrest#*.}
vpat=${vpat%%[!0-9]*}
check_version() { # WHAT FOUND WANTED
    [ "$2" = "$3" ] || fail "version: $1 says '$2', configure.ac says '$3'"
}
make -s -j"$JOBS" tools/weft_info weft.pc >/dev/null
info=$(WEFT_BOOTSTRAP=single ./tools/weft_info --no-init 2>&1 | sed -n 1p) # sed reads it all: head could end the pipe early (SIGPIPE under pipefail)
check_version "weft_info (first line)" "$info" "weft $v"
for n in MAJOR:$vmaj MINOR:$vmin PATCH:$vpat; do
    check_version "config.h WEFT_BUILD_VERSION_${n%%:*} (weft_get_version)" \
        "$(sed -n "s/^#define WEFT_BUILD_VERSION_${n%%:*} //p" config.h)" "${n#*:}"
    check_version "include/weft_version.h WEFT_VERSION_${n%%:*}" \
        "$(sed -n "s/^#define WEFT_VERSION_${n%%:*} //p" include/weft_version.h)" "${n#*:}"
done
check_version "include/weft_version.h WEFT_VERSION_STRING" \
    "$(sed -n 's/^#define WEFT_VERSION_STRING "\(.*\)"/\1/p' include/weft_version.h)" "$v"
check_version "weft.pc" "$(sed -n 's/^Version: //p' weft.pc)" "$v"
check_version "the tarball's .tarball-version" "$(tar -xzOf "$tarball" "weft-$version/.tarball-version")" "$v"
check_version "the Python package's build backend (contrib/python/_build/weft_build.py)" \
    "$(python3 contrib/python/_build/weft_build.py)" "$v"
check_version "weft.__version__ (a source checkout: the library's)" \
    "$(WEFT_LIBRARY="$PWD/.libs/libweft.so" PYTHONPATH=contrib/python/src python3 -c 'import weft; print(weft.__version__)')" "$v"

[ "$failed" -eq 0 ] || exit 1
status=0
phase "$tarball: distcheck passed, its files are git's, one version ($v)"
