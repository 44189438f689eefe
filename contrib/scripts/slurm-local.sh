#!/usr/bin/env bash
# slurm-local.sh {start|stop|status|env}
#
# A one-node Slurm cluster on localhost, for `srun --mpi=pmix -n 4 prog` in
# tests and CI (Debian 12: slurm-wlm, slurm-wlm-basic-plugins, munge,
# libpmix-dev). Runs as root. Everything it writes lives under one directory,
# ${WEFT_SLURM_DIR:-/tmp/weft-slurm}; the only exception is the munge key
# (/etc/munge/munge.key), created if missing.
#
#   eval "$(contrib/scripts/slurm-local.sh start)"   # or: . $WEFT_SLURM_DIR/env.sh
#   srun --mpi=pmix -n 4 ./examples/hello
#   contrib/scripts/slurm-local.sh stop
#
# stdout carries only the `export ...` lines the caller needs; progress and
# diagnostics go to stderr.
#
# Settings (environment):
#   WEFT_SLURM_DIR        state directory                    [/tmp/weft-slurm]
#   WEFT_SLURM_CPUS       CPUs the node advertises           [8]
#   WEFT_SLURM_CTLD_PORT  slurmctld port                     [16817]
#   WEFT_SLURM_SLURMD_PORT slurmd port                       [16818]
#   WEFT_SLURM_SRUN_PORTS srun port range                    [16900-16999]
#   WEFT_SLURM_TIMEOUT    seconds to wait for an idle node   [60]
#   WEFT_SLURM_MUNGE_KEY  munge key file                     [/etc/munge/munge.key]
#   WEFT_SLURM_KEEP_ON_FAIL=1  leave daemons running when start fails

set -u
umask 022

DIR=${WEFT_SLURM_DIR:-/tmp/weft-slurm}
CPUS=${WEFT_SLURM_CPUS:-8}
CTLD_PORT=${WEFT_SLURM_CTLD_PORT:-16817}
SLURMD_PORT=${WEFT_SLURM_SLURMD_PORT:-16818}
SRUN_PORTS=${WEFT_SLURM_SRUN_PORTS:-16900-16999}
TIMEOUT=${WEFT_SLURM_TIMEOUT:-60}
MUNGE_KEY=${WEFT_SLURM_MUNGE_KEY:-/etc/munge/munge.key}
NODE=$(hostname -s)
CLUSTER=weft
PARTITION=weft

CONF=$DIR/etc/slurm.conf
ENVFILE=$DIR/env.sh
MUNGE_SOCKET=$DIR/munge/munge.socket
PID_MUNGED=$DIR/run/munged.pid
PID_CTLD=$DIR/run/slurmctld.pid
PID_SLURMD=$DIR/run/slurmd.pid
LOG_MUNGED=$DIR/log/munged.log
LOG_CTLD=$DIR/log/slurmctld.log
LOG_SLURMD=$DIR/log/slurmd.log

# The clients and daemons started below read the config from here.
export SLURM_CONF=$CONF

# Extra environment for the PMIx server in slurmstepd (slurmd's environment)
# and for the clients (env.sh; srun forwards it), e.g.
# WEFT_SLURM_PMIX_ENV="PMIX_MCA_gds=hash PMIX_MCA_psec=native". None is needed
# with Debian 12's Slurm 22.05 + PMIx 4.2 as root (see the notes at the end).
read -r -a PMIX_ENV <<<"${WEFT_SLURM_PMIX_ENV:-}"

msg() { printf 'slurm-local: %s\n' "$*" >&2; }
die() { msg "error: $*"; exit 1; }

# --- helpers -----------------------------------------------------------------

# pid_of NAME PIDFILE: prints the pid if the pid file names a live process whose
# command is NAME (a stale pid file after an unclean kill may name a reused pid).
pid_of() {
    local name=$1 file=$2 pid comm
    [ -r "$file" ] || return 1
    pid=$(tr -dc '0-9' <"$file")
    [ -n "$pid" ] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [ "$comm" = "$name" ] && alive "$pid" || return 1
    echo "$pid"
}

# alive PID: the process exists and is not a zombie (a killed daemon whose
# parent has not reaped it yet still has a /proc entry).
alive() {
    local st
    st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "${st:0:1}" != Z ] && [ "${st:0:1}" != X ]
}

# ours NAME: pids of processes named NAME that belong to this cluster (their
# environment carries SLURM_CONF=$CONF, or for munged the command line names
# our socket). Used when a pid file is gone; never matches another cluster.
ours() {
    local name=$1 p comm
    for p in /proc/[0-9]*; do
        comm=$(cat "$p/comm" 2>/dev/null) || continue
        { [ "$comm" = "$name" ] && alive "${p#/proc/}"; } || continue
        if [ "$name" = munged ]; then
            tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -qxF -- "--socket=$MUNGE_SOCKET" || continue
        else
            tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$CONF" || continue
        fi
        echo "${p#/proc/}"
    done
}

# kill_wait SECONDS PID...: SIGTERM, wait, then SIGKILL what is left.
kill_wait() {
    local secs=$1 p i left
    shift
    [ $# -gt 0 ] || return 0
    kill -TERM "$@" 2>/dev/null
    for ((i = 0; i < secs * 10; i++)); do
        left=
        for p in "$@"; do alive "$p" && left=1; done
        [ -n "$left" ] || return 0
        sleep 0.1
    done
    kill -KILL "$@" 2>/dev/null
    sleep 0.2
}

check_prereqs() {
    local missing=() pkgs=()
    command -v munged >/dev/null || { missing+=(munged); pkgs+=(munge); }
    command -v munge >/dev/null || { missing+=(munge); pkgs+=(munge); }
    command -v slurmctld >/dev/null || { missing+=(slurmctld); pkgs+=(slurm-wlm); }
    command -v slurmd >/dev/null || { missing+=(slurmd); pkgs+=(slurm-wlm); }
    command -v srun >/dev/null || { missing+=(srun); pkgs+=(slurm-wlm); }
    command -v sinfo >/dev/null || { missing+=(sinfo); pkgs+=(slurm-wlm); }
    command -v scontrol >/dev/null || { missing+=(scontrol); pkgs+=(slurm-wlm); }
    if ! compgen -G '/usr/lib/*/slurm-wlm/mpi_pmix*.so' >/dev/null && ! compgen -G '/usr/lib*/slurm/mpi_pmix*.so' >/dev/null; then
        missing+=(mpi_pmix.so); pkgs+=(slurm-wlm-basic-plugins)
    fi
    # Slurm's mpi/pmix plugin dlopen()s the unversioned "libpmix.so", which only
    # the -dev package ships; without it `srun --mpi=pmix` fails at step launch.
    if ! compgen -G '/usr/lib/*/libpmix.so' >/dev/null && ! compgen -G '/usr/lib*/libpmix.so' >/dev/null; then
        missing+=(libpmix.so); pkgs+=(libpmix-dev)
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        msg "missing: ${missing[*]}"
        msg "install with: apt-get install $(printf '%s\n' "${pkgs[@]}" | sort -u | tr '\n' ' ')"
        msg "(the full set: apt-get install slurm-wlm slurm-wlm-basic-plugins munge libpmix-dev)"
        exit 2
    fi
    [ "$(id -u)" = 0 ] || die "must run as root (SlurmUser=root, SlurmdUser=root)"
    case $CPUS in '' | *[!0-9]*) die "WEFT_SLURM_CPUS must be a number: $CPUS" ;; esac
    # Unix socket paths (munge, slurmstepd, PMIx) must fit in 108 bytes.
    [ ${#DIR} -le 64 ] || die "WEFT_SLURM_DIR is too long for unix socket paths (${#DIR} > 64 chars): $DIR"
    case $DIR in /*) ;; *) die "WEFT_SLURM_DIR must be an absolute path: $DIR" ;; esac
}

write_config() {
    mkdir -p "$DIR"/{etc,state,spool,log,run,munge,tmp} || die "cannot create $DIR"
    chmod 0755 "$DIR" "$DIR"/{etc,state,spool,log,run,munge}
    chmod 1777 "$DIR/tmp"
    cat >"$CONF.new" <<EOF
# Written by contrib/scripts/slurm-local.sh: a one-node test cluster.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SrunPortRange=$SRUN_PORTS
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$PID_CTLD
SlurmdPidFile=$PID_SLURMD
SlurmctldLogFile=$LOG_CTLD
SlurmdLogFile=$LOG_SLURMD
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$DIR/etc/plugstack.conf
TmpFS=$DIR/tmp
# No cgroups: works in containers and VMs without a delegated cgroup tree.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=pmix
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# The node advertises more CPUs than it has, so that -n 8 fits on 2 cores.
SlurmdParameters=config_overrides
ReturnToService=2
# Generous timeouts for a slow, shared CI machine.
SlurmctldTimeout=300
SlurmdTimeout=300
MessageTimeout=60
TCPTimeout=30
BatchStartTimeout=120
PrologEpilogTimeout=120
UnkillableStepTimeout=120
KillWait=5
InactiveLimit=0
MinJobAge=30
Waittime=0
MailProg=/bin/true
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
    mv -f "$CONF.new" "$CONF"
    # Empty: no SPANK plugins from /etc/slurm/plugstack.conf.d. No cgroup.conf:
    # nothing here uses cgroups.
    : >"$DIR/etc/plugstack.conf"
    {
        echo "# source this file to use the one-node Slurm of slurm-local.sh"
        echo "export SLURM_CONF=$CONF"
        local kv
        for kv in ${PMIX_ENV[@]+"${PMIX_ENV[@]}"}; do echo "export $kv"; done
    } >"$ENVFILE"
}

# Keep the previous run's log next to the new one.
rotate_log() { [ -f "$1" ] && mv -f "$1" "$1.old"; return 0; }

ensure_munge_key() {
    [ -s "$MUNGE_KEY" ] && return 0
    msg "creating munge key $MUNGE_KEY"
    mkdir -p "$(dirname "$MUNGE_KEY")"
    chmod 0700 "$(dirname "$MUNGE_KEY")"
    if command -v mungekey >/dev/null; then
        mungekey --create --keyfile="$MUNGE_KEY" || { msg "mungekey failed"; return 1; }
    else
        dd if=/dev/urandom of="$MUNGE_KEY" bs=1 count=1024 status=none || { msg "cannot write $MUNGE_KEY"; return 1; }
    fi
    if id munge >/dev/null 2>&1; then
        chown munge:munge "$(dirname "$MUNGE_KEY")" "$MUNGE_KEY"
    fi
    chmod 0400 "$MUNGE_KEY"
}

# daemon_env CMD...: run a daemon with a clean environment (nothing of the
# caller's PMIX_*, LD_LIBRARY_PATH, ... leaks into slurmstepd), except the
# config path and WEFT_SLURM_PMIX_ENV.
daemon_env() {
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C SLURM_CONF="$CONF" \
        ${PMIX_ENV[@]+"${PMIX_ENV[@]}"} "$@"
}

munge_works() {
    munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1
}

start_munged() {
    if pid_of munged "$PID_MUNGED" >/dev/null && munge_works; then
        msg "munged already running"
        return 0
    fi
    # A munged of ours that does not answer (or lost its pid file) goes first.
    local pids=()
    mapfile -t pids < <({ pid_of munged "$PID_MUNGED"; ours munged; } | sort -u)
    kill_wait 5 ${pids[@]+"${pids[@]}"}
    ensure_munge_key || return 1
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock" "$PID_MUNGED"
    rotate_log "$LOG_MUNGED"
    # --force: munged refuses to run as root without it (and also complains
    # about the key belonging to user munge).
    daemon_env munged --force --socket="$MUNGE_SOCKET" --key-file="$MUNGE_KEY" \
        --log-file="$LOG_MUNGED" --pid-file="$PID_MUNGED" \
        --seed-file="$DIR/munge/munged.seed" || { msg "munged failed to start"; return 1; }
    local i
    for ((i = 0; i < 50; i++)); do munge_works && return 0; sleep 0.2; done
    msg "munged started but munge/unmunge through $MUNGE_SOCKET fails"
    return 1
}

ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

start_slurmctld() {
    if pid_of slurmctld "$PID_CTLD" >/dev/null; then
        msg "slurmctld already running"
        return 0
    fi
    local p; for p in $(ours slurmctld); do kill_wait 5 "$p"; done
    # -c: start from a clean state (no jobs/node states left by an unclean stop).
    rotate_log "$LOG_CTLD"
    daemon_env slurmctld -c -f "$CONF" || { msg "slurmctld failed to start"; return 1; }
    local i
    for ((i = 0; i < TIMEOUT * 5; i++)); do ctld_up && return 0; sleep 0.2; done
    msg "slurmctld does not answer scontrol ping after ${TIMEOUT}s"
    return 1
}

start_slurmd() {
    if pid_of slurmd "$PID_SLURMD" >/dev/null; then
        msg "slurmd already running"
        return 0
    fi
    local p; for p in $(ours slurmd); do kill_wait 5 "$p"; done
    # -c: clear stale step state after an unclean kill. The PMIx settings go
    # into slurmd's environment, which slurmstepd (the PMIx server) inherits.
    rotate_log "$LOG_SLURMD"
    daemon_env slurmd -c -f "$CONF" || { msg "slurmd failed to start"; return 1; }
}

node_state() { sinfo -h -n "$NODE" -o '%T' 2>/dev/null | head -n 1; }

wait_idle() {
    local i st resumed=
    for ((i = 0; i < TIMEOUT * 2; i++)); do
        st=$(node_state)
        case $st in
            idle | mixed | allocated) return 0 ;;
            down* | drain* | fail*)
                # ReturnToService=2 should make this unnecessary; a leftover
                # DOWN/DRAIN from an earlier unclean stop is cleared once.
                if [ -z "$resumed" ] && pid_of slurmd "$PID_SLURMD" >/dev/null; then
                    scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1
                    resumed=1
                fi
                ;;
        esac
        sleep 0.5
    done
    msg "node $NODE not idle after ${TIMEOUT}s (state: ${st:-unknown})"
    return 1
}

print_logs() {
    local f
    for f in "$LOG_MUNGED" "$LOG_CTLD" "$LOG_SLURMD"; do
        # Only logs written by this start (older ones are from earlier runs).
        { [ -r "$f" ] && [ "$f" -nt "$DIR/run/start.stamp" ]; } || continue
        echo "----- $f (last 40 lines) -----" >&2
        tail -n 40 "$f" >&2
    done
    sinfo -N -l >&2 2>&1
}

print_env() {
    [ -r "$ENVFILE" ] || die "no $ENVFILE: run '$0 start' first"
    grep '^export ' "$ENVFILE"
}

do_start() {
    check_prereqs
    write_config
    touch -d '-1 second' "$DIR/run/start.stamp"
    if ! start_munged || ! start_slurmctld || ! start_slurmd || ! wait_idle; then
        print_logs
        if [ "${WEFT_SLURM_KEEP_ON_FAIL:-0}" != 1 ]; then do_stop >/dev/null 2>&1; fi
        die "start failed (see logs above, and $DIR/log)"
    fi
    msg "node $NODE is $(node_state): $CPUS CPUs, partition $PARTITION; source $ENVFILE or:"
    print_env
}

do_stop() {
    local pids=() left
    # Cancel jobs first so slurmstepd tears the tasks down cleanly.
    if pid_of slurmctld "$PID_CTLD" >/dev/null; then
        scancel --quiet --partition="$PARTITION" >/dev/null 2>&1
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            [ -z "$(squeue -h -p "$PARTITION" -o %A 2>/dev/null)" ] && break
            sleep 0.5
        done
    fi
    mapfile -t pids < <({ pid_of slurmd "$PID_SLURMD"; pid_of slurmctld "$PID_CTLD"
                          ours slurmd; ours slurmctld; } | sort -u)
    kill_wait 15 ${pids[@]+"${pids[@]}"}
    # Steps whose slurmd went away (e.g. after an unclean kill).
    mapfile -t pids < <(ours slurmstepd; ours slurmscriptd)
    kill_wait 5 ${pids[@]+"${pids[@]}"}
    mapfile -t pids < <({ pid_of munged "$PID_MUNGED"; ours munged; } | sort -u)
    kill_wait 5 ${pids[@]+"${pids[@]}"}
    rm -f "$PID_MUNGED" "$PID_CTLD" "$PID_SLURMD" "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    left=$({ ours slurmd; ours slurmctld; ours slurmscriptd; ours slurmstepd; ours munged; } | tr '\n' ' ')
    if [ -n "$left" ]; then
        msg "still running after stop: $left"
        return 1
    fi
    msg "stopped"
}

do_status() {
    local rc=0 name file p
    for name in munged slurmctld slurmd; do
        case $name in
            munged) file=$PID_MUNGED ;; slurmctld) file=$PID_CTLD ;; slurmd) file=$PID_SLURMD ;;
        esac
        if p=$(pid_of "$name" "$file"); then
            echo "$name: running (pid $p)"
        else
            echo "$name: not running"
            rc=3
        fi
    done
    if [ $rc = 0 ]; then
        echo "node $NODE: $(node_state)"
        sinfo 2>&1
        squeue 2>&1
        echo "export SLURM_CONF=$CONF   (or: . $ENVFILE)"
    fi
    return $rc
}

case ${1:-} in
    start) do_start ;;
    stop) do_stop ;;
    restart) do_stop; do_start ;;
    status) do_status ;;
    env) print_env ;;
    *)
        echo "usage: $0 {start|stop|restart|status|env}" >&2
        exit 2
        ;;
esac

# Notes (Debian 12: Slurm 22.05.8, PMIx 4.2.2, munge 0.5.15, as root in a VM):
# - munged refuses to run as root without --force; it then only warns that
#   /etc/munge/munge.key belongs to user munge. It runs on a private socket
#   (AuthInfo=socket=...), so a system munged, if any, is left alone.
# - Slurm's mpi/pmix_v4 plugin dlopen()s "libpmix.so", shipped only by
#   libpmix-dev (libpmix2 has just libpmix.so.2).
# - slurmd registers the real core count (2) unless SlurmdParameters=
#   config_overrides; without it a node with CPUs=8 is marked invalid.
# - No PMIX_MCA_* / SLURM_PMIX_* settings were needed: PMIx_Init, PMIx_Get
#   (job size, local rank/size, hostname), Put/Commit/Fence(collect data) and
#   Finalize work under `srun --mpi=pmix` with the defaults. Slurm's PMIx
#   server does not provide PMIX_LOCALITY_STRING; PMIX_TMPDIR is TmpFS
#   ($DIR/tmp).
# - Daemons killed with SIGKILL stay zombies for a moment when PID 1 reaps
#   slowly; the pid checks look at the process state, not just /proc/PID.
# - munged logs "Unauthorized credential for client UID=0" (level Info) on
#   each step launch; jobs run normally, so it is left alone.
