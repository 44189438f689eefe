#!/usr/bin/env bash
# shellcheck disable=SC2317  # cleanup is called by the trap
# README's install flow on a copy of this build tree: ./configure --prefix=DIR
# (the build's own options plus a new prefix, as a user who built with the
# default prefix and then follows README's `PREFIX=$HOME/weft`), make install,
# then with LD_LIBRARY_PATH unset:
#   - the installed weft_info --vars and weft-osu-latency --help start and load
#     DIR/lib/libweft.so.0 (not a library of an earlier prefix);
#   - DIR/lib/weft/nccl/libnccl.so.2 (and not DIR/lib/libnccl.so.2), SONAME
#     libnccl.so.2, loads DIR/lib/libweft.so.0; nccl.h in DIR/include/weft/nccl;
#   - PKG_CONFIG_PATH=DIR/lib/pkgconfig pkg-config finds weft.pc, and
#     examples/hello.c built with its flags runs.
# Only the library and the programs are relinked in the copy, so this takes
# seconds.
#
# An automake TESTS script: exit 0 pass, 77 skip, 1 fail. make sets
# top_builddir/top_srcdir; by hand, from the build tree (in-tree or VPATH):
#   SRCDIR/test/install/test_install.sh

set -u

here=$(cd "$(dirname "$0")" && pwd)
top_srcdir=$(cd "${top_srcdir:-$here/../..}" && pwd) || exit 1
top_builddir=$(cd "${top_builddir:-.}" && pwd) || exit 1
if [ ! -x "$top_builddir/config.status" ] || [ ! -f "$top_builddir/Makefile" ]; then
    echo "SKIP: $top_builddir is not a configured build tree"
    echo "0 passed, 0 failed, 1 skipped"
    exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/weft-install.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
tree=$work/tree
prefix=$work/prefix
# A VPATH build (make distcheck's, or ../configure from a build folder): the
# copy must see the sources where the build's Makefiles and dependency files
# name them. An absolute srcdir stays valid as it is; a relative one
# (../..) is a folder of links to the source tree's entries, $work/src,
# with the copy as many levels below it (.copy/.copy) as the build is below
# the sources.
srcdir_rel=.
if [ "$top_srcdir" != "$top_builddir" ]; then
    srcdir_rel=$(sed -n 's/^srcdir = //p' "$top_builddir/Makefile")
    case $srcdir_rel in
        /*) ;;
        ..*)
            ups=$(printf '%s\n' "$srcdir_rel" | sed -n 's|^\(\(\.\./\)*\.\.\)/*$|\1|p')
            if [ -z "$ups" ]; then
                echo "SKIP: srcdir $srcdir_rel is neither absolute nor only ../ steps"
                echo "0 passed, 0 failed, 1 skipped"
                exit 77
            fi
            mkdir "$work/src" || exit 1
            for f in "$top_srcdir"/* "$top_srcdir"/.[!.]*; do
                [ -e "$f" ] && ln -s "$f" "$work/src/"
            done
            tree=$work/src
            for _ in $(printf '%s\n' "$ups" | tr '/' ' '); do tree=$tree/.copy; done
            mkdir -p "$(dirname "$tree")" || exit 1
            ;;
        *)
            echo "SKIP: srcdir $srcdir_rel is neither absolute nor only ../ steps"
            echo "0 passed, 0 failed, 1 skipped"
            exit 77
            ;;
    esac
fi
failed=0
fail() {
    echo "FAIL: $1"
    failed=1
    if [ -n "${2:-}" ] && [ -s "$2" ]; then tail -n 30 "$2" | sed 's/^/    /'; fi
}

# The copy keeps the objects' times, so make relinks only what libdir changes.
if ! mkdir "$tree" ||
    ! tar -C "$top_builddir" -cf - --exclude=./.git --exclude='./test/*.log' --exclude='./test/*.trs' . |
    tar -C "$tree" -xf -; then
    echo "FAIL: cannot copy the build tree"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi
eval "set -- $("$top_builddir/config.status" --config)"
# The enclosing make's job server and overrides are not this make's.
unset MAKEFLAGS MFLAGS MAKELEVEL
if ! (cd "$tree" && "$srcdir_rel/configure" -q "$@" --prefix="$prefix" && make -s install) >"$work/install.log" 2>&1; then
    fail "$srcdir_rel/configure --prefix=$prefix && make install in a copy of the build tree" "$work/install.log"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi
unset LD_LIBRARY_PATH

# run NAME COMMAND...: exit status 0; its output stays in $work/NAME.out.
run() {
    local name=$1
    shift
    if timeout 60 "$@" >"$work/$name.out" 2>&1; then return 0; fi
    fail "$name: exit status $? ($*)" "$work/$name.out"
    return 1
}
for prog in weft_info weft-osu-latency; do
    [ -x "$prefix/bin/$prog" ] || { fail "$prog not installed in $prefix/bin"; continue; }
    # ld.so's own trace: which libweft the program would load.
    lib=$(LD_TRACE_LOADED_OBJECTS=1 "$prefix/bin/$prog" 2>&1 | sed -n 's/^[[:space:]]*libweft\.so\.0 => \([^ ]*\) .*/\1/p')
    if [ "$lib" != "$prefix/lib/libweft.so.0" ]; then
        fail "$prog loads libweft.so.0 from '${lib:-nowhere}', not $prefix/lib ($(readelf -d "$prefix/bin/$prog" 2>&1 | grep -E 'R(UN)?PATH' || echo 'no RUNPATH'))"
    fi
done
if run weft_info "$prefix/bin/weft_info" --vars; then
    grep -q '^  WEFT_TIMEOUT ' "$work/weft_info.out" ||
        fail "weft_info --vars printed no WEFT_TIMEOUT row" "$work/weft_info.out"
fi
run weft-osu-latency "$prefix/bin/weft-osu-latency" --help
# weft's libnccl.so.2: in its own directory (never beside NVIDIA's), SONAME
# libnccl.so.2, loading the prefix's libweft; its header beside it.
nccl=$prefix/lib/weft/nccl/libnccl.so.2
if [ ! -e "$nccl" ] || [ -e "$prefix/lib/libnccl.so.2" ]; then
    fail "libnccl.so.2 is not in $prefix/lib/weft/nccl only ($(find "$prefix" -name 'libnccl*' | tr '\n' ' '))"
elif [ "$(readelf -d "$nccl" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')" != libnccl.so.2 ]; then
    fail "$nccl: SONAME is not libnccl.so.2"
else
    lib=$(LD_TRACE_LOADED_OBJECTS=1 /lib64/ld-linux-x86-64.so.2 "$nccl" 2>&1 | sed -n 's/^[[:space:]]*libweft\.so\.0 => \([^ ]*\) .*/\1/p')
    [ "$lib" = "$prefix/lib/libweft.so.0" ] || [ ! -x /lib64/ld-linux-x86-64.so.2 ] ||
        fail "$nccl loads libweft.so.0 from '${lib:-nowhere}', not $prefix/lib"
fi
[ -f "$prefix/include/weft/nccl/nccl.h" ] || fail "nccl.h is not in $prefix/include/weft/nccl"

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
if ! flags=$(pkg-config --cflags --libs weft 2>&1); then
    fail "PKG_CONFIG_PATH=$PKG_CONFIG_PATH pkg-config --cflags --libs weft: $flags"
else
    # shellcheck disable=SC2086 # CC and pkg-config's flags are words
    if run cc-hello ${CC:-cc} -o "$work/hello" "$top_srcdir/examples/hello.c" $flags -Wl,-rpath,"$prefix/lib"; then
        if run hello env WEFT_BOOTSTRAP=single "$work/hello"; then
            grep -q '^hello from rank 0 of 1 ' "$work/hello.out" ||
                fail "hello built with pkg-config's flags did not say hello" "$work/hello.out"
        fi
    fi
fi

if [ "$failed" = 0 ]; then
    echo "PASS: installed to $prefix; weft_info, weft-osu-latency, libnccl.so.2 in lib/weft/nccl and a pkg-config build run"
fi
echo "$((1 - failed)) passed, $failed failed, 0 skipped"
exit "$failed"
