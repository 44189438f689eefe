#!/usr/bin/env bash
# The scale harness at a small size (contrib/scale/run_scale.py): two and
# three real ranks among 128, 300 and 512 ranks (every address at init, and
# fetched on demand; directly and through node relays), the rest simulated
# ranks that speak the env store's protocol (job secret included); 300
# through torch's TCPStore when torch is there; and 4 and 8 real ranks
# under Open MPI's mpirun (PMIx) when it is there. Every rank must finish init, the real ranks their
# communicators and collectives, and every rank finalize.
#
# An automake TESTS script: exit 0 pass, 1 fail. make sets top_builddir;
# by hand, from an in-tree build: test/bench/test_scale.sh
set -u
top_builddir=$(cd "${top_builddir:-.}" && pwd) || exit 1
srcdir=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
SIM=$top_builddir/contrib/scale/weft-scale-sim
RUN=$srcdir/contrib/scale/run_scale.py
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT WEFT_BOOTSTRAP WEFT_RANKS_PER_NODE
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-scale.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
# shellcheck source=test/bench/lib.sh
. "$(dirname "$0")/lib.sh"

run_case() { # name, then run_scale.py's options
    local name=$1 out=$work/out
    shift
    if timeout -k 5 60 python3 "$RUN" --builddir "$top_builddir" --timeout 30 "$@" >"$out" 2>&1; then
        pass "$name"
    else
        fail "$name"
    fi
    show_tail 8 "$out"
}

require_built "$SIM"
require_built "$top_builddir/contrib/scale/weft-scale-rank"
run_case "scale harness, 2 real ranks of 128 and 512" --sizes 128,512 --real 2
run_case "scale harness, 3 real ranks of 300, no handshake window" --sizes 300 --real 3 --window 0
run_case "scale harness, node relays, 3 real ranks of 128 and 512" --sizes 128,512 --real 3 --relay
# torchrun's path: torch's TCPStore serves (an interpreter that imports torch:
# WEFT_TORCH_PYTHON, the checkout's .venv, python3)
torch_python=
for p in "${WEFT_TORCH_PYTHON:-}" "$srcdir/.venv/bin/python" python3; do
    [ -n "$p" ] && "$p" -c "import torch.distributed" >/dev/null 2>&1 && torch_python=$p && break
done
if [ -n "$torch_python" ]; then
    run_case "scale harness, torch's TCPStore, 2 real ranks of 300" --sizes 300 --real 2 --torch \
        --torch-python "$torch_python"
else
    skipped=$((skipped + 1))
    echo "SKIP scale harness, torch's TCPStore (no python that imports torch: WEFT_TORCH_PYTHON)"
fi
# PMIx: real ranks under Open MPI's mpirun, addresses by direct modex
if mpirun --version 2>/dev/null | grep -q "Open MPI"; then
    run_case "scale harness, PMIx under mpirun, 4 and 8 ranks" --sizes 4,8 --pmix
else
    skipped=$((skipped + 1))
    echo "SKIP scale harness, PMIx (no Open MPI mpirun)"
fi
summary
