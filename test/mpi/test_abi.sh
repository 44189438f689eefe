#!/bin/bash
# libmpi_abi.so.1 as a program sees it: its SONAME, every function of
# mpi_abi.h exported (MPI_ and PMPI_ names) and nothing but MPI's names;
# and examples/mpi/stencil, a program written to MPI, giving the same
# answer on 1, 2 and 4 ranks under weftrun.
set -u
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
lib="$top_builddir/.libs/libmpi_abi.so.1"
fail=0
[ -f "$lib" ] || { echo "no $lib"; exit 1; }

soname=$(readelf -d "$lib" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
[ "$soname" = libmpi_abi.so.1 ] || { echo "SONAME is '$soname', not libmpi_abi.so.1"; fail=1; }

declared=$(grep -oE '\bP?MPIX?_[A-Za-z0-9_]+\(' "$top_srcdir/include/mpi_abi.h" | tr -d '(' | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
extra=$(comm -13 <(echo "$declared") <(echo "$exported") | grep -v '^PMPIX_Op_create_x$')
[ -z "$missing" ] || { echo "declared in mpi_abi.h, not exported:"; echo "$missing" | head -20; fail=1; }
[ -z "$extra" ] || { echo "exported, not in mpi_abi.h:"; echo "$extra" | head -20; fail=1; }
echo "$(echo "$declared" | wc -l) functions declared, $(echo "$exported" | wc -l) exported"

prog="$top_builddir/examples/mpi/stencil"
run="$top_builddir/tools/weftrun"
ref=
for n in 1 2 4; do
    out=$(LD_LIBRARY_PATH="$top_builddir/.libs" timeout 120 "$run" -n "$n" "$prog" 96 50 2>&1)
    line=$(grep '^stencil' <<<"$out")
    echo "$n ranks: $line"
    sum=$(sed -n 's/.*checksum \([0-9.e+-]*\).*/\1/p' <<<"$line")
    if [ -z "$sum" ]; then
        echo "$out" | tail -5
        fail=1
    elif [ -z "$ref" ]; then
        ref=$sum
    elif ! awk -v a="$sum" -v b="$ref" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-9 * b) }'; then
        echo "checksum $sum on $n ranks differs from $ref on 1"
        fail=1
    fi
done
exit $fail
