#!/usr/bin/env bash
# Builds test/fuzz/fuzz_store.c with libFuzzer (clang -fsanitize=fuzzer,
# address,undefined) and runs it for a bounded time: the env store's message
# parser and the sealed UCX address check, fed arbitrary bytes.
#
#   test/fuzz/run.sh [SECONDS]     default: WEFT_TEST_FUZZ_SECONDS, else 45
#
# An automake TESTS script (make sets top_builddir/top_srcdir): exit 0 when
# the run ends without a finding, 1 on a crash, a leak or a broken invariant
# (the input is kept in test/fuzz/artifacts/ of the build tree and the
# command that replays it is printed), 77 when there is no clang with
# libFuzzer (a failure when CI=true). Seeds are written fresh each run: a
# valid handshake, a member's contribution, a sealed address.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top_srcdir=$(cd "${top_srcdir:-$here/../..}" && pwd) || exit 1
top_builddir=$(cd "${top_builddir:-.}" && pwd) || exit 1
seconds=${1:-${WEFT_TEST_FUZZ_SECONDS:-45}}
CLANG=${CLANG:-clang}

case $(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]') in
    true | 1 | yes) in_ci=1 ;;
    *) in_ci= ;;
esac
skip() {
    echo "SKIP: fuzz_store ($1)"
    if [ -n "$in_ci" ]; then
        echo "0 passed, 1 failed, 0 skipped"
        exit 1
    fi
    echo "0 passed, 0 failed, 1 skipped"
    exit 77
}
[ -f "$top_builddir/config.h" ] || skip "no config.h in $top_builddir: run ./configure first"
command -v "$CLANG" >/dev/null 2>&1 || skip "$CLANG not found (apt-get install clang libclang-rt-dev)"
command -v python3 >/dev/null 2>&1 || skip "python3 not found (it writes the seeds)"

work=$(mktemp -d "${TMPDIR:-/tmp}/weft-fuzz.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
artifacts=$top_builddir/test/fuzz/artifacts
mkdir -p "$artifacts" "$work/corpus"

# No probe: when clang lacks the fuzzer runtime (libclang-rt-dev), this is where it shows.
if ! "$CLANG" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -std=c11 \
    -Wall -Wextra -Werror -D_GNU_SOURCE -I"$top_builddir/include" -I"$top_srcdir/include" -I"$top_srcdir/src" -I"$top_srcdir" \
    -I"$top_builddir" "$top_srcdir/test/fuzz/fuzz_store.c" "$top_srcdir/src/bootstrap/env_wire.c" \
    "$top_srcdir/src/bootstrap/hmac.c" "$top_srcdir/pt2pt/ucx_addr.c" -lcrypto -o "$work/fuzz_store" 2>"$work/build.log"; then
    if grep -q "libclang_rt.fuzzer\|fuzzer.*No such file\|cannot find" "$work/build.log"; then
        skip "$CLANG has no libFuzzer runtime (apt-get install libclang-rt-dev): $(head -n 1 "$work/build.log")"
    fi
    echo "FAIL: fuzz_store does not build:"
    sed 's/^/    /' "$work/build.log"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi

# Seeds: byte 0 picks the target (0: a stranger's stream, 4: the same with any
# proof accepted, 1: a member's stream, 2: a sealed UCX address), byte 1 the
# world size (1 + b % 64) and rank (b % size). Headers as env_wire.h says.
python3 - "$work/corpus" <<'PY'
import hmac, hashlib, struct, sys, os
out = sys.argv[1]
def hdr(kind, rank, size, seq=0, arg=0, length=0):
    return struct.pack(">IHHIIQQQ", 0x57465453, 3, kind, rank, size, seq, arg, length)
HELLO, CONTRIB, BYE, PROOF, GATHER, BCAST, PUT, GET = 1, 3, 6, 9, 10, 11, 12, 13
seeds = {
    "handshake": bytes([0, 3]) + hdr(HELLO, 1, 4, 0, 3, 32) + b"n" * 32 + hdr(PROOF, 1, 4, 0, 0, 32) + b"p" * 32,
    "trusted": bytes([4, 3]) + hdr(HELLO, 1, 4, 0, 3, 32) + b"n" * 32 + hdr(PROOF, 1, 4, 0, 0, 32) + b"p" * 32
    + hdr(CONTRIB, 1, 4, 0, 1000, 8) + b"12345678" + hdr(BYE, 1, 4, 1),
    "member": bytes([1, 3]) + hdr(CONTRIB, 3, 4, 0, 0, 16) + b"x" * 16 + hdr(CONTRIB, 3, 4, 1, 0, 0) + hdr(BYE, 3, 4, 2),
    "member_v3": bytes([1, 3]) + hdr(GATHER, 3, 4, 0, 0, 8) + b"g" * 8 + hdr(BCAST, 3, 4, 1, 0, 0)
    + hdr(PUT, 3, 4, 0, 0, 12) + b"a" * 12 + hdr(GET, 3, 4, 0, 500, 4) + struct.pack(">I", 1) + hdr(BYE, 3, 4, 2),
    "old_client": bytes([0, 1]) + struct.pack(">IHHIIQQQ", 0x57465453, 1, HELLO, 0, 2, 0, 0, 0),
}
addr = bytes(range(40))
frame = struct.pack(">IBBHIII", 0x57554341, 1, 0, 0, 3, 4, len(addr)) + addr
tag = hmac.new(bytes(32), b"weft ucx address v1\0" + frame, hashlib.sha256).digest()
seeds["ucx_address"] = bytes([2, 3]) + frame + tag
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
PY

echo "fuzz_store: ${seconds}s of libFuzzer on the store's message parser and the UCX address check"
"$work/fuzz_store" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$work/corpus" >"$work/fuzz.log" 2>&1
rc=$?
grep -E "^#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb" "$work/fuzz.log" | sed 's/^/    /'
if [ "$rc" != 0 ]; then
    echo "FAIL: fuzz_store found a problem (exit status $rc):"
    grep -E "ERROR|SUMMARY|Test unit written|==[0-9]+==" "$work/fuzz.log" | head -n 20 | sed 's/^/    /'
    tail -n 30 "$work/fuzz.log" | sed 's/^/    /'
    echo "    replay: rebuild as above and run: fuzz_store $artifacts/crash-* (or leak-*, timeout-*)"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi
echo "PASS: fuzz_store"
echo "1 passed, 0 failed, 0 skipped"
exit 0
