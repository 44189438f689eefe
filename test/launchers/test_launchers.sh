#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions are called indirectly (trap, run_case)
# Runs the example programs under real launchers and checks what they print:
#   mpirun -np 4 --oversubscribe   hello, ring, embed_mpi (Open MPI: PMIx bootstrap; embed_mpi: oob);
#                                  shrink_loop with a rank killed (--enable-recovery): the survivors
#                                  learn of it from PMIx within a second, shrink and finish
#   srun --mpi=pmix -n 4           hello, ring (one-node Slurm from contrib/scripts/slurm-local.sh)
#   weftrun -n 4                   hello, ring (env bootstrap: RANK/WORLD_SIZE/MASTER_ADDR/...),
#                                  a fresh WEFT_JOB_SECRET per job, the store authenticated with it,
#                                  shrink_loop with rank 0 (the store's host) killed
#
# An automake TESTS script: exit 0 pass, 77 skip (nothing could run), 1 fail.
# make sets top_builddir/top_srcdir; by hand, from an in-tree build:
#   test/launchers/test_launchers.sh
# A missing launcher (mpirun, Slurm) is a SKIP, or a FAIL when CI=true.
#
# Settings: WEFT_TEST_TIMEOUT (seconds per run, default 120), WEFT_TEST_NP
# (ranks, default 4), WEFT_SLURM_* (passed on to slurm-local.sh). A cluster
# the script starts keeps its state in its temporary directory (unless
# WEFT_SLURM_DIR says where), removed with it at the end.

set -u

here=$(cd "$(dirname "$0")" && pwd)
top_srcdir=$(cd "${top_srcdir:-$here/../..}" && pwd) || exit 1
top_builddir=$(cd "${top_builddir:-.}" && pwd) || exit 1
SLURM_LOCAL=(bash "$top_srcdir/contrib/scripts/slurm-local.sh")
WEFTRUN=$top_builddir/tools/weftrun
EX=$top_builddir/examples
NP=${WEFT_TEST_NP:-4}
LIMIT=${WEFT_TEST_TIMEOUT:-120}
LAPS=10

# shellcheck source=test/launchers/lib.sh
. "$here/lib.sh"

# Start from a clean launch environment: variables left by an enclosing
# launcher (a Slurm allocation, mpirun, torchrun) or a forced WEFT_BOOTSTRAP
# would change which bootstrap the programs pick.
while IFS= read -r var; do
    case $var in
        PMIX_* | PMI_* | SLURM_* | SRUN_* | SALLOC_* | SBATCH_* | OMPI_COMM_WORLD_* | OMPI_UNIVERSE_SIZE | \
            OMPI_MCA_ess* | OMPI_MCA_orte* | OMPI_MCA_pmix* | PRTE_* | \
            RANK | WORLD_SIZE | LOCAL_RANK | LOCAL_WORLD_SIZE | MASTER_ADDR | MASTER_PORT | \
            GROUP_RANK | ROLE_RANK | ROLE_WORLD_SIZE | TORCHELASTIC_* | WEFT_BOOTSTRAP | WEFT_JOB_SECRET*)
            unset "$var" ;;
    esac
done < <(compgen -e)

work=$(mktemp -d "${TMPDIR:-/tmp}/weft-launchers.XXXXXX") || exit 1
slurm_started=
child=

cleanup() {
    # Interrupted mid-run: end the running launcher (timeout passes the
    # signal on to its whole process group).
    if [ -n "$child" ]; then
        kill -TERM "$child" 2>/dev/null
        wait "$child" 2>/dev/null
    fi
    if [ -n "$slurm_started" ]; then
        "${SLURM_LOCAL[@]}" stop >"$work/slurm-stop.log" 2>&1 || {
            echo "warning: slurm-local.sh stop failed:"
            sed 's/^/    /' "$work/slurm-stop.log"
        }
    fi
    rm -rf "$work"
}
trap_cleanup

fail() {
    echo "FAIL: $1${2:+ ($2)}"
    failed=$((failed + 1))
    if [ -n "${3:-}" ] && [ -s "$3" ]; then
        echo "    --- output (last 40 lines) ---"
        tail -n 40 "$3" | sed 's/^/    /'
    fi
}

# --- output checks: each prints what is wrong, and fails, or prints nothing --

# check_hello FILE BOOTSTRAP: NP lines "hello from rank R of NP (bootstrap B,
# local rank L of M)", one per rank, all on this one node (M = NP, L distinct).
check_hello() {
    local out=$1 boot=$2 r n lines locals
    n=$(grep -c '^hello from rank ' "$out")
    [ "$n" = "$NP" ] || { echo "expected $NP hello lines, got $n"; return 1; }
    for ((r = 0; r < NP; r++)); do
        n=$(grep -cE "^hello from rank $r of $NP \(bootstrap $boot, local rank [0-9]+ of $NP\)\$" "$out")
        if [ "$n" != 1 ]; then
            lines=$(grep "^hello from rank $r " "$out" | head -n 2 | paste -sd '|')
            echo "rank $r: expected one line 'hello from rank $r of $NP (bootstrap $boot, local rank L of $NP)', got: ${lines:-nothing}"
            return 1
        fi
    done
    locals=$(sed -nE "s/^hello from rank [0-9]+ of $NP \(bootstrap $boot, local rank ([0-9]+) of $NP\)\$/\1/p" "$out" | sort -n | tr '\n' ' ')
    [ "$locals" = "$(seq -s ' ' 0 $((NP - 1))) " ] || { echo "local ranks are not 0..$((NP - 1)): $locals"; return 1; }
}

check_line() {
    local out=$1 want=$2 n
    n=$(grep -cxF "$want" "$out")
    [ "$n" = 1 ] || { echo "expected the line '$want' once, found it $n times"; return 1; }
}
check_ring() { check_line "$1" "ring: token passed $NP ranks x $LAPS laps, ok"; }

# check_secret FILE [WANT]: NP lines "secret R LEN HASH" from the ranks: every
# rank has the same 64-hex-digit secret (or the one whose hash is WANT).
check_secret() {
    local out=$1 want=${2:-} n hashes
    n=$(grep -cE '^secret [0-9]+ [0-9]+ [0-9a-f]+$' "$out")
    [ "$n" = "$NP" ] || { echo "expected $NP secret lines, got $n"; return 1; }
    hashes=$(awk '/^secret /{print $4}' "$out" | sort -u)
    [ "$(wc -l <<<"$hashes")" = 1 ] || { echo "the ranks got different secrets"; return 1; }
    if [ -n "$want" ]; then
        [ "$hashes" = "$want" ] || { echo "the ranks' secret is not the one set before weftrun"; return 1; }
    else
        grep -qvE '^secret [0-9]+ 64 ' <(grep '^secret ' "$out") && { echo "a secret is not 64 hex digits"; return 1; }
        [ "$hashes" != "$(cat "$work/weftrun-secret.last" 2>/dev/null)" ] || { echo "two jobs got the same secret"; return 1; }
        echo "$hashes" >"$work/weftrun-secret.last"
    fi
    return 0
}

# check_hello_authenticated FILE: hello's lines, and every rank said (at info)
# that the store is authenticated with weftrun's secret.
check_hello_authenticated() {
    local n
    check_hello "$1" env || return 1
    n=$(grep -c 'env bootstrap: the store at .* is authenticated with the job secret from WEFT_JOB_SECRET' "$1")
    [ "$n" = "$NP" ] || { echo "expected $NP ranks to say the store is authenticated, got $n"; return 1; }
}
check_embed() { check_line "$1" "embed_mpi: weft bootstrapped from MPI_Allgather on $NP ranks, ok"; }

# check_topo FILE NODES: weft_info --topo --peers printed the node map (NP
# ranks on NODES nodes), one placement line and one transport line per rank.
check_topo() {
    local out=$1 nodes=$2 r
    check_line "$out" "node map: $NP ranks on $nodes node$([ "$nodes" = 1 ] || echo s)" || return 1
    for ((r = 0; r < NP; r++)); do
        grep -qE "^  rank $r +node [0-9]+ +local [0-9]+/[0-9]+ +host .* numa .* cpus " "$out" ||
            { echo "no placement line for rank $r"; return 1; }
        grep -qE "^  rank $r +-> rank [0-9]+ +[a-z_0-9]+/" "$out" ||
            { echo "no transport line for rank $r"; return 1; }
    done
}

# check_shrink FILE VICTIM STEP: examples/shrink_loop lost world rank VICTIM
# before step STEP; every survivor's step failed well before the deadline
# (WEFT_TIMEOUT=30: a second at most), it continued on NP-1 ranks, and the
# survivors finished with correct sums.
check_shrink() {
    local out=$1 victim=$2 step=$3 r line ms
    check_line "$out" "shrink_loop: rank $victim: dying before step $step" || return 1
    for ((r = 0; r < NP; r++)); do
        [ "$r" = "$victim" ] && continue
        line=$(grep -E "^shrink_loop: rank $r: step [0-9]+ failed after [0-9]+ ms" "$out" | head -n 1)
        [ -n "$line" ] || { echo "rank $r: no failed step reported"; return 1; }
        ms=$(sed -nE 's/.* failed after ([0-9]+) ms.*/\1/p' <<<"$line")
        [ "$ms" -lt 1000 ] || { echo "rank $r: the failure took $ms ms (the loss was not noticed): $line"; return 1; }
        grep -qE "^shrink_loop: rank $r: continuing on $((NP - 1)) of $NP ranks" "$out" ||
            { echo "rank $r: did not continue on $((NP - 1)) ranks"; return 1; }
    done
    grep -q ": peer lost$" "$out" || { echo "no survivor saw the loss itself (peer lost)"; return 1; }
    check_line "$out" "shrink_loop: $((NP - 1)) of $NP ranks finished 40 steps, sums ok"
}

# run_case NAME CHECK [ARGS...] -- COMMAND...: run under a wall-clock limit,
# then require exit status 0 (WANT_STATUS, when set) and CHECK FILE ARGS...
# to pass.
run_case() {
    local name=$1 check=$2 args=() out rc why want=${WANT_STATUS:-0}
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
    shift
    out=$work/$(echo "$name" | tr -c 'A-Za-z0-9_.\n' '_').out
    # In the background + wait, so that INT/TERM reach our trap at once.
    timeout -k 10 "$LIMIT" "$@" >"$out" 2>&1 </dev/null &
    child=$!
    wait "$child"
    rc=$?
    child=
    # (137 is also what weftrun returns when a rank was SIGKILLed on purpose.)
    if [ $rc = 124 ] || { [ $rc = 137 ] && [ "$want" != 137 ]; }; then
        fail "$name" "timed out after ${LIMIT}s: $*" "$out"
    elif [ $rc != "$want" ]; then
        fail "$name" "exit status $rc (expected $want): $*" "$out"
    elif ! why=$("$check" "$out" ${args[@]+"${args[@]}"}); then
        fail "$name" "$why" "$out"
    else
        pass "$name"
    fi
}

need_prog() { # need_prog NAME PATH: the program must be built
    [ -x "$2" ] && return 0
    fail "$1" "$2 not built (run make first)"
    return 1
}

echo "launcher tests: $NP ranks, ${LIMIT}s limit per run, build tree $top_builddir"

# --- mpirun ------------------------------------------------------------------
mpirun_cmd=() is_ompi=
if ! command -v mpirun >/dev/null 2>&1; then
    for p in hello ring embed_mpi; do missing "mpirun $p" "mpirun not found (apt-get install openmpi-bin)"; done
else
    if mpirun --version 2>&1 | grep -q 'Open MPI\|OpenRTE'; then
        is_ompi=1
        mpirun_cmd=(mpirun -np "$NP" --oversubscribe)
        # Open MPI refuses root unless told twice.
        if [ "$(id -u)" = 0 ]; then
            export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        fi
    else
        mpirun_cmd=(mpirun -np "$NP")
    fi
    need_prog "mpirun hello" "$EX/hello" &&
        run_case "mpirun hello" check_hello pmix -- "${mpirun_cmd[@]}" "$EX/hello"
    need_prog "mpirun ring" "$EX/ring" &&
        run_case "mpirun ring" check_ring -- "${mpirun_cmd[@]}" "$EX/ring"
    need_prog "mpirun weft_info --topo" "$top_builddir/tools/weft_info" &&
        run_case "mpirun weft_info --topo --peers" check_topo 1 -- "${mpirun_cmd[@]}" \
            "$top_builddir/tools/weft_info" --topo --peers
    # A rank killed mid-run: Open MPI 4.1's mpirun ends the whole job unless
    # told to recover; the survivors learn of it from PMIx (the process
    # table: this mpirun sends no event), shrink and finish (mpirun: 0).
    if [ -n "$is_ompi" ] && need_prog "mpirun shrink_loop (rank killed)" "$EX/shrink_loop"; then
        run_case "mpirun --enable-recovery shrink_loop (rank 2 killed)" check_shrink 2 10 -- "${mpirun_cmd[@]}" \
            --enable-recovery -x WEFT_TIMEOUT=30 "$EX/shrink_loop" 2 10
    fi
    if [ ! -x "$EX/embed_mpi" ]; then
        skip "mpirun embed_mpi" "examples/embed_mpi not built: configure found no mpicc"
    elif [ -n "$is_ompi" ]; then
        # embed_mpi calls MPI_Init: keep Open MPI on its single-node transports
        # (no UCX/openib probing, no CMA, which containers often forbid).
        run_case "mpirun embed_mpi" check_embed -- "${mpirun_cmd[@]}" \
            --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism none "$EX/embed_mpi"
    else
        run_case "mpirun embed_mpi" check_embed -- "${mpirun_cmd[@]}" "$EX/embed_mpi"
    fi
fi

# --- srun --mpi=pmix on a one-node Slurm -------------------------------------
slurm_why=
if ! command -v srun >/dev/null 2>&1 || ! command -v slurmctld >/dev/null 2>&1; then
    slurm_why="Slurm not installed (apt-get install slurm-wlm slurm-wlm-basic-plugins munge libpmix-dev)"
elif [ "$(id -u)" != 0 ]; then
    slurm_why="starting a local Slurm needs root"
elif "${SLURM_LOCAL[@]}" status >/dev/null 2>&1; then
    # Someone's cluster is already up: use it, and leave it running.
    eval "$("${SLURM_LOCAL[@]}" env)"
    echo "using the Slurm cluster already running ($SLURM_CONF); it stays up"
elif export WEFT_SLURM_DIR=${WEFT_SLURM_DIR:-$work/slurm} && # ours goes with $work
    env_lines=$(timeout -k 10 180 "${SLURM_LOCAL[@]}" start 2>"$work/slurm-start.log"); then
    slurm_started=1
    eval "$env_lines"
else
    slurm_started=1 # stop whatever half-started
    slurm_why="slurm-local.sh start failed"
    echo "slurm-local.sh start failed:"
    sed 's/^/    /' "$work/slurm-start.log"
fi
if [ -n "$slurm_why" ]; then
    for p in hello ring; do missing "srun $p" "$slurm_why"; done
else
    srun_cmd=(srun --mpi=pmix -n "$NP" --kill-on-bad-exit=1 --time=10)
    need_prog "srun hello" "$EX/hello" &&
        run_case "srun hello" check_hello pmix -- "${srun_cmd[@]}" "$EX/hello"
    need_prog "srun ring" "$EX/ring" &&
        run_case "srun ring" check_ring -- "${srun_cmd[@]}" "$EX/ring"
fi

# --- weftrun: the env bootstrap ----------------------------------------------
if need_prog "weftrun without arguments" "$WEFTRUN"; then
    # A first try with no arguments gets the usage, not a complaint about -n.
    out=$work/weftrun-usage.out
    "$WEFTRUN" >"$out" 2>&1 </dev/null
    rc=$?
    if [ "$rc" = 2 ] && head -n 1 "$out" | grep -q '^usage: weftrun -n N ' && ! grep -q 'must be' "$out"; then
        pass "weftrun without arguments prints its usage"
    else
        fail "weftrun without arguments prints its usage" "exit status $rc" "$out"
    fi
fi
if need_prog "weftrun hello" "$WEFTRUN" && need_prog "weftrun hello" "$EX/hello"; then
    run_case "weftrun hello" check_hello env -- "$WEFTRUN" -n "$NP" "$EX/hello"
fi
if need_prog "weftrun ring" "$WEFTRUN" && need_prog "weftrun ring" "$EX/ring"; then
    run_case "weftrun ring" check_ring -- "$WEFTRUN" -n "$NP" "$EX/ring"
fi
# weftrun listens on the store's port itself and hands that socket to rank 0
# only (WEFT_STORE_FD): nobody can take the port between its choice and rank 0.
# shellcheck disable=SC2016 # expanded by the ranks' shell
show_store_fd='if [ -n "${WEFT_STORE_FD:-}" ] && [ -S "/proc/$$/fd/$WEFT_STORE_FD" ]; then echo "store fd $RANK socket"; else echo "store fd $RANK none"; fi'
check_store_fd() {
    local out=$1 r
    check_line "$out" "store fd 0 socket" || return 1
    for ((r = 1; r < NP; r++)); do check_line "$out" "store fd $r none" || return 1; done
}
if need_prog "weftrun store socket" "$WEFTRUN"; then
    run_case "weftrun hands its listening socket to rank 0 only" check_store_fd -- "$WEFTRUN" -n "$NP" sh -c "$show_store_fd"
fi
# The job secret (issue 21): fresh per job, the same on every rank, and used.
# shellcheck disable=SC2016 # expanded by the ranks' shell
show_secret='echo "secret $RANK ${#WEFT_JOB_SECRET} $(printf %s "$WEFT_JOB_SECRET" | sha256sum | cut -c1-16)"'
if need_prog "weftrun job secret" "$WEFTRUN"; then
    run_case "weftrun gives its ranks a fresh job secret" check_secret -- "$WEFTRUN" -n "$NP" sh -c "$show_secret"
    run_case "weftrun gives the next job another secret" check_secret -- "$WEFTRUN" -n "$NP" sh -c "$show_secret"
    run_case "weftrun keeps a WEFT_JOB_SECRET set before it" check_secret \
        "$(printf %s 'set by the user, long enough' | sha256sum | cut -c1-16)" -- \
        env WEFT_JOB_SECRET='set by the user, long enough' "$WEFTRUN" -n "$NP" sh -c "$show_secret"
fi
if need_prog "weftrun hello (authenticated)" "$WEFTRUN" && need_prog "weftrun hello (authenticated)" "$EX/hello"; then
    run_case "weftrun hello: the store is authenticated" check_hello_authenticated -- \
        env WEFT_LOG_LEVEL=info "$WEFTRUN" -n "$NP" "$EX/hello"
fi
if need_prog "weftrun shrink_loop (rank 0 killed)" "$WEFTRUN" && need_prog "weftrun shrink_loop" "$EX/shrink_loop"; then
    # weftrun's status is the first failure's: the victim's SIGKILL.
    WANT_STATUS=137 run_case "weftrun shrink_loop (rank 0, the store's host, killed)" check_shrink 0 7 -- \
        env WEFT_TIMEOUT=30 "$WEFTRUN" -n "$NP" "$EX/shrink_loop" 0 7
fi
if need_prog "weftrun weft_info --topo" "$top_builddir/tools/weft_info"; then
    # Simulated nodes of 2 ranks each: NP/2 nodes in the map.
    run_case "weftrun weft_info --topo --peers (simulated nodes)" check_topo $(((NP + 1) / 2)) -- \
        env WEFT_RANKS_PER_NODE=2 "$WEFTRUN" -n "$NP" "$top_builddir/tools/weft_info" --topo --peers
fi

echo "$passed passed, $failed failed, $skipped skipped"
if [ "$failed" -gt 0 ]; then exit 1; fi
if [ "$passed" = 0 ]; then exit 77; fi
exit 0
