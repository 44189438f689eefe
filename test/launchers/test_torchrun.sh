#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions are called indirectly (trap, run_case)
# weft under real torchrun, and started the way a Kubernetes operator starts
# it (variables only). Checks what the programs print and how they exit:
#
#   torchrun (its agent serves a torch TCPStore; weft's torchstore bootstrap):
#     --standalone                               C hello, Python without torch
#     --nnodes 1 --master-addr --master-port     C ring
#     two agents as two nodes on this host       C hello (--node-rank 0|1)
#     c10d rendezvous, two agents                C ring, Python with torch
#     --max-restarts 1                           C ring whose rank 1 exits before init on
#                                                attempt 0; Python whose rank 1 exits after init
#     c10d without the shared store              C hello (env bootstrap: rank 0 serves)
#     torch's TCPStore alone, a rank missing     the others name it
#   Kubernetes style (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT only):
#     a service name that resolves 3 s late      (private /etc/hosts in a mount namespace)
#     rank 0 starting 4 s after the others
#     a name that never resolves                 the error says what was tried
#
# An automake TESTS script: exit 0 pass, 77 skip (nothing could run), 1 fail.
# torch comes from a virtual environment (contrib/install-torch.sh): the
# first of $WEFT_TORCH_PYTHON, $WEFT_TORCH_VENV/bin/python, the checkout's
# .venv/bin/python, python3 that imports torch. Without torch the torchrun
# cases are skipped with the reason, or fail when CI=true; the Kubernetes
# cases need no torch.
#
# Settings: WEFT_TEST_TIMEOUT (seconds per run, default 120).

set -u

here=$(cd "$(dirname "$0")" && pwd)
top_srcdir=$(cd "${top_srcdir:-$here/../..}" && pwd) || exit 1
top_builddir=$(cd "${top_builddir:-.}" && pwd) || exit 1
EX=$top_builddir/examples
LIMIT=${WEFT_TEST_TIMEOUT:-120}
NPROC=2 # ranks per torchrun agent
LAPS=10

# --- inside a private mount namespace: the late-DNS scenario ----------------
# test_torchrun.sh --late-dns-inner WORK PORT NAME: /etc/hosts is replaced (in
# this namespace only) by a copy that learns NAME 3 s after the ranks start.
if [ "${1:-}" = --late-dns-inner ]; then
    work=$2 port=$3 name=$4
    cp /etc/hosts "$work/hosts" && mount --bind "$work/hosts" /etc/hosts || exit 2
    if getent hosts "$name" >/dev/null; then
        echo "$name resolves before the test made it: pick another name"
        exit 2
    fi
    pids=()
    for r in 0 1 2; do
        env RANK=$r WORLD_SIZE=3 MASTER_ADDR="$name" MASTER_PORT="$port" WEFT_LOG_LEVEL=debug \
            "$EX/hello" >"$work/dns-rank$r.out" 2>&1 &
        pids+=($!)
    done
    sleep 3
    echo "127.0.0.1 $name" >>"$work/hosts"
    status=0
    for p in "${pids[@]}"; do wait "$p" || status=1; done
    cat "$work"/dns-rank*.out
    exit $status
fi

# shellcheck source=test/launchers/lib.sh
. "$here/lib.sh"

# A clean launch environment: variables of an enclosing launcher would
# change which bootstrap the programs pick.
while IFS= read -r var; do
    case $var in
        PMIX_* | PMI_* | SLURM_* | OMPI_COMM_WORLD_* | OMPI_UNIVERSE_SIZE | PRTE_* | \
            RANK | WORLD_SIZE | LOCAL_RANK | LOCAL_WORLD_SIZE | MASTER_ADDR | MASTER_PORT | \
            GROUP_RANK | ROLE_RANK | ROLE_WORLD_SIZE | TORCHELASTIC_* | TORCH_DISABLE_SHARE_RDZV_TCP_STORE | \
            WEFT_BOOTSTRAP)
            unset "$var" ;;
    esac
done < <(compgen -e)
export WEFT_INIT_TIMEOUT=${WEFT_INIT_TIMEOUT:-60}
# The Python worker uses this build's library and package.
export WEFT_LIBRARY=$top_builddir/.libs/libweft.so.0
export PYTHONPATH=$top_srcdir/contrib/python/src${PYTHONPATH:+:$PYTHONPATH}

work=$(mktemp -d "${TMPDIR:-/tmp}/weft-torchrun.XXXXXX") || exit 1
children=()

cleanup() {
    local p
    for p in "${children[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${children[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$work"
}
trap_cleanup

fail() {
    local f
    echo "FAIL: $1${2:+ ($2)}"
    failed=$((failed + 1))
    shift 2
    for f in "$@"; do
        [ -s "$f" ] || continue
        echo "    --- $(basename "$f") (last 40 lines) ---"
        grep -v 'UserWarning: Failed to initialize NumPy\|_conversion_method_template' "$f" | tail -n 40 | sed 's/^/    /'
    done
}

free_port() {
    local py
    py=$(command -v python3 || echo /usr/bin/python3)
    "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start OUT CMD...: one process of a case, in the background, under the limit.
start() {
    local out=$1
    shift
    timeout -k 10 "$LIMIT" "$@" >"$out" 2>&1 </dev/null &
    children+=($!)
}

# finish: waits for the case's processes; rc = the worst exit status (124:
# one timed out). Not in $(...): a subshell cannot wait for our children.
finish() {
    local p r
    rc=0
    for p in "${children[@]}"; do
        wait "$p"
        r=$?
        if [ $r = 124 ] || [ $r = 137 ]; then rc=124; elif [ $r != 0 ] && [ $rc != 124 ]; then rc=$r; fi
    done
    children=()
}

# verdict NAME WANT_RC RC CHECK-ARGS -- FILES...: exit status, then the check.
verdict() {
    local name=$1 want=$2 rc=$3 check=() files why
    shift 3
    while [ $# -gt 0 ] && [ "$1" != -- ]; do check+=("$1"); shift; done
    shift
    files=("$@")
    if [ "$rc" = 124 ]; then
        fail "$name" "timed out after ${LIMIT}s" "${files[@]}"
    elif [ "$want" = 0 ] && [ "$rc" != 0 ]; then
        fail "$name" "exit status $rc" "${files[@]}"
    elif [ "$want" != 0 ] && [ "$rc" = 0 ]; then
        fail "$name" "exit status 0, expected a failure" "${files[@]}"
    elif ! why=$("${check[@]}" "${files[@]}"); then
        fail "$name" "$why" "${files[@]}"
    else
        pass "$name"
    fi
}

# --- checks: each prints what is wrong and fails, or prints nothing ----------

# check_hello N BOOT LOCAL FILES...: N lines "hello from rank R of N (bootstrap
# BOOT, local rank L of LOCAL)", one per rank.
check_hello() {
    local n=$1 boot=$2 lsize=$3 r c
    shift 3
    for ((r = 0; r < n; r++)); do
        c=$(cat "$@" | grep -cE "^hello from rank $r of $n \(bootstrap $boot, local rank [0-9]+ of $lsize\)\$")
        if [ "$c" != 1 ]; then
            echo "rank $r: expected one line 'hello from rank $r of $n (bootstrap $boot, local rank L of $lsize)', got $c"
            return 1
        fi
    done
}

check_ring() { # check_ring N FILES...
    local n=$1 c
    shift
    c=$(cat "$@" | grep -cxF "ring: token passed $n ranks x $LAPS laps, ok")
    [ "$c" = 1 ] || { echo "expected the line 'ring: token passed $n ranks x $LAPS laps, ok' once, found it $c times"; return 1; }
}

# check_worker N BOOT TORCH ATTEMPT FILES...: the Python worker's line per rank.
check_worker() {
    local n=$1 boot=$2 torch=$3 attempt=$4 r c
    shift 4
    for ((r = 0; r < n; r++)); do
        c=$(cat "$@" | grep -cxF "torchrun worker: rank $r of $n, bootstrap $boot, attempt $attempt, $torch, ok")
        [ "$c" = 1 ] || { echo "rank $r: no line 'torchrun worker: rank $r of $n, bootstrap $boot, attempt $attempt, $torch, ok'"; return 1; }
    done
}

check_restart_c() { # the ring after one restart; attempt 0's rank 1 said it failed
    local n=$1
    shift
    grep -q "rank 1 fails its first attempt on purpose" "$@" || { echo "rank 1 did not fail attempt 0"; return 1; }
    check_ring "$n" "$@"
}

check_restart_py() {
    local n=$1
    shift
    grep -q "torchrun worker: rank 1 fails its first attempt on purpose" "$@" || { echo "rank 1 did not fail attempt 0"; return 1; }
    check_worker "$n" torchstore "no torch" 1 "$@"
}

# check_all_say TEXT FILES...: every file has TEXT.
check_all_say() {
    local text=$1 f
    shift
    for f in "$@"; do
        grep -qF -- "$text" "$f" || { echo "$(basename "$f") does not say '$text'"; return 1; }
    done
}

check_late_dns() { # the hello lines, and someone had to look the name up again
    check_hello 3 env 3 "$@" || return 1
    grep -qE "reached rank 0's store at .* after ([2-9]|[1-9][0-9]+) attempts" "$@" ||
        { echo "no rank needed more than one attempt: the name resolved at once"; return 1; }
}

check_never_resolves() {
    check_all_say "could not reach rank 0's store at weft-test-never-master-0:" "$@" || return 1
    check_all_say "name 'weft-test-never-master-0':" "$@" || return 1
    check_all_say "never resolved" "$@"
}

need_prog() {
    [ -x "$2" ] && return 0
    fail "$1" "$2 not built (run make first)"
    return 1
}

echo "torchrun tests: $NPROC ranks per agent, ${LIMIT}s limit per run, build tree $top_builddir"
if ! need_prog "examples" "$EX/hello" || ! need_prog "examples" "$EX/ring"; then
    echo "$passed passed, $failed failed"
    exit 1
fi

# --- torch -------------------------------------------------------------------
torch_py=
for p in "${WEFT_TORCH_PYTHON:-}" "${WEFT_TORCH_VENV:+$WEFT_TORCH_VENV/bin/python}" "$top_srcdir/.venv/bin/python" \
    "$(command -v python3 || true)"; do
    if [ -z "$p" ] || [ ! -x "$p" ]; then continue; fi
    if "$p" -c 'import torch, torch.distributed.run' >/dev/null 2>&1; then
        torch_py=$p
        break
    fi
done
torch_cases=("torchrun --standalone, C hello" "torchrun --nnodes 1 --master-addr/--master-port, C ring"
    "torchrun two agents as two nodes (static), C hello" "torchrun c10d rendezvous, two agents, C ring"
    "torchrun --standalone, Python without torch" "torchrun c10d, two agents, Python with torch"
    "torchrun --max-restarts 1, C ring (rank 1 exits before init)"
    "torchrun --max-restarts 1, Python (rank 1 exits after init)"
    "torchrun c10d without the shared store, C hello (env bootstrap)"
    "torch TCPStore, rank 3 of 4 missing: the others name it")
if [ -z "$torch_py" ]; then
    for c in "${torch_cases[@]}"; do
        missing "$c" "torch is not installed (contrib/install-torch.sh makes .venv; or set WEFT_TORCH_PYTHON)"
    done
else
    echo "torch: $("$torch_py" -c 'import torch; print(torch.__version__)' 2>/dev/null) ($torch_py)"
    # Quiet the agents: one OMP thread per worker is what we want anyway.
    export OMP_NUM_THREADS=1
    torchrun=("$torch_py" -m torch.distributed.run --nproc-per-node "$NPROC" --monitor-interval 0.2)
    worker=$here/torchrun_worker.py

    o=$work/standalone.out
    start "$o" "${torchrun[@]}" --standalone --no-python "$EX/hello"
    finish
    verdict "${torch_cases[0]}" 0 "$rc" check_hello $NPROC torchstore $NPROC -- "$o"

    o=$work/static1.out
    start "$o" "${torchrun[@]}" --nnodes 1 --master-addr 127.0.0.1 --master-port "$(free_port)" --no-python "$EX/ring"
    finish
    verdict "${torch_cases[1]}" 0 "$rc" check_ring $NPROC -- "$o"

    port=$(free_port)
    for nr in 0 1; do
        start "$work/static2-node$nr.out" "${torchrun[@]}" --nnodes 2 --node-rank $nr --master-addr 127.0.0.1 \
            --master-port "$port" --no-python "$EX/hello"
    done
    finish
    verdict "${torch_cases[2]}" 0 "$rc" check_hello $((2 * NPROC)) torchstore $NPROC -- \
        "$work"/static2-node*.out

    port=$(free_port)
    for a in 0 1; do
        start "$work/c10d-ring-agent$a.out" "${torchrun[@]}" --nnodes 2 --rdzv-backend c10d \
            --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "weft-c10d-ring-$$" --no-python "$EX/ring"
    done
    finish
    verdict "${torch_cases[3]}" 0 "$rc" check_ring $((2 * NPROC)) -- "$work"/c10d-ring-agent*.out

    o=$work/py-standalone.out
    start "$o" "${torchrun[@]}" --standalone "$worker"
    finish
    verdict "${torch_cases[4]}" 0 "$rc" check_worker $NPROC torchstore "no torch" 0 -- "$o"

    port=$(free_port)
    for a in 0 1; do
        start "$work/c10d-py-agent$a.out" "${torchrun[@]}" --nnodes 2 --rdzv-backend c10d \
            --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "weft-c10d-py-$$" "$worker" --torch
    done
    finish
    verdict "${torch_cases[5]}" 0 "$rc" check_worker $((2 * NPROC)) torchstore torch 0 -- \
        "$work"/c10d-py-agent*.out

    # Attempt 0: rank 1 exits before weft_init, rank 0 waits in init until
    # torchrun stops it; attempt 1 must come up in a fresh namespace.
    cat >"$work/flaky-ring.sh" <<EOF
#!/bin/sh
if [ "\$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "\$RANK" = 1 ]; then
    echo "rank 1 fails its first attempt on purpose"
    exit 3
fi
exec "$EX/ring"
EOF
    chmod +x "$work/flaky-ring.sh"
    o=$work/restart-c.out
    start "$o" "${torchrun[@]}" --standalone --max-restarts 1 --no-python "$work/flaky-ring.sh"
    finish
    verdict "${torch_cases[6]}" 0 "$rc" check_restart_c $NPROC -- "$o"

    o=$work/restart-py.out
    start "$o" "${torchrun[@]}" --standalone --max-restarts 1 "$worker" --fail-rank 1
    finish
    verdict "${torch_cases[7]}" 0 "$rc" check_restart_py $NPROC -- "$o"

    port=$(free_port)
    for a in 0 1; do
        start "$work/c10d-noshare-agent$a.out" env TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 "${torchrun[@]}" --nnodes 2 \
            --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "weft-c10d-noshare-$$" \
            --no-python "$EX/hello"
    done
    finish
    verdict "${torch_cases[8]}" 0 "$rc" check_hello $((2 * NPROC)) env $NPROC -- "$work"/c10d-noshare-agent*.out

    # torch's own TCPStore as the agent store, with rank 3 of 4 never coming:
    # ranks 0-2 must fail at their deadline and name it.
    port=$(free_port)
    start "$work/store.out" "$torch_py" -c "
import datetime, sys, time
from torch.distributed import TCPStore
s = TCPStore('127.0.0.1', $port, None, True, timeout=datetime.timedelta(seconds=60), wait_for_workers=False)
print('store up', flush=True)
time.sleep(90)
"
    store_pid=${children[0]}
    children=()
    # Importing torch takes seconds on a loaded machine.
    for _ in $(seq 600); do grep -q "store up" "$work/store.out" 2>/dev/null && break; sleep 0.1; done
    if ! grep -q "store up" "$work/store.out"; then
        fail "${torch_cases[9]}" "torch's TCPStore did not start within 60 s" "$work/store.out"
    else
        for r in 0 1 2; do
            start "$work/missing-rank$r.out" env RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
                TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RUN_ID="weft-missing-$$" WEFT_INIT_TIMEOUT=8 "$EX/hello"
        done
        finish
        verdict "${torch_cases[9]}" 1 "$rc" check_all_say "rank 3 never arrived (1 of 4 missing)" -- \
            "$work"/missing-rank*.out
    fi
    kill "$store_pid" 2>/dev/null
    wait "$store_pid" 2>/dev/null
fi

# --- Kubernetes style: the operator's variables, no agent store --------------
name="Kubernetes style: MASTER_ADDR resolves 3 s late"
if [ "$(id -u)" != 0 ]; then
    skip "$name" "a private /etc/hosts needs root (unshare --mount)"
elif ! unshare --mount --propagation private true 2>/dev/null; then
    skip "$name" "unshare --mount is not permitted here (a container without CAP_SYS_ADMIN?)"
else
    # A name under .invalid resolves nowhere else (RFC 6761), only from the
    # private hosts file once the entry is there.
    start "$work/late-dns.out" unshare --mount --propagation private bash "$0" --late-dns-inner "$work" \
        "$(free_port)" "weft-master-0.weft-test.invalid"
    finish
    verdict "$name" 0 "$rc" check_late_dns -- "$work/late-dns.out"
fi

port=$(free_port)
for r in 1 2; do
    start "$work/late0-rank$r.out" env RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" "$EX/ring"
done
sleep 4
start "$work/late0-rank0.out" env RANK=0 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" "$EX/ring"
finish
verdict "Kubernetes style: rank 0 starts 4 s after the others" 0 "$rc" check_ring 3 -- "$work"/late0-rank*.out

for r in 1 2; do
    start "$work/never-rank$r.out" env RANK=$r WORLD_SIZE=3 MASTER_ADDR=weft-test-never-master-0 \
        MASTER_PORT="$(free_port)" WEFT_INIT_TIMEOUT=3 "$EX/hello"
done
finish
verdict "Kubernetes style: MASTER_ADDR never resolves: the error says what was tried" 1 "$rc" \
    check_never_resolves -- "$work"/never-rank*.out

[ "$skipped" = 0 ] || echo "($skipped skipped)"
echo "$passed passed, $failed failed"
if [ "$failed" -gt 0 ]; then exit 1; fi
if [ "$passed" = 0 ]; then exit 77; fi
exit 0
