#!/usr/bin/env bash
# Simulated nodes on one host whose traffic between them costs something
# real: one network namespace per node, joined by veth pairs to a bridge,
# each link rate-limited with tc tbf (this kernel has tbf; netem's delay is
# not available). Ranks of node k run inside namespace k with WEFT_NODE_ID=k
# and the env bootstrap (rank 0's store listens on node 0's address), and
# UCX is limited to TCP (UCX_TLS=tcp,self), so every byte between ranks
# crosses a veth; inside a node, weft's shared-memory collectives (coll/shm)
# do not use UCX at all.
#
#   netns-nodes.sh up NODES [RATE] [BURST]   e.g. up 4 10gbit   (root; default 10gbit, 512kb)
#   netns-nodes.sh run NODES PPN PROG [ARGS...]
#                                           NODES x PPN ranks, rank = node * PPN + local rank,
#                                           bound to core `rank` (WEFT_NETNS_NOBIND=1: unbound)
#   netns-nodes.sh mpirun NODES PPN PROG [ARGS...]
#                                           the same layout under Open MPI's mpirun (its own
#                                           bootstrap; btl tcp between all ranks, PMIx over
#                                           the bridge) for an MPI built program
#   netns-nodes.sh down
#   netns-nodes.sh status
#
# Names: namespaces weftnode0.., host-side links wnh0.., in-namespace links
# wnn0.. (10.77.0.(k+1)/24), bridge weftbr (10.77.0.254).
set -euo pipefail
BR=weftbr NET=10.77.0

up() {
    local nodes=$1 rate=${2:-10gbit} burst=${3:-512kb}
    down >/dev/null 2>&1 || true
    ip link add "$BR" type bridge
    ip addr add "$NET.254/24" dev "$BR"
    ip link set "$BR" up
    for ((k = 0; k < nodes; k++)); do
        ip netns add "weftnode$k"
        ip link add "wnh$k" type veth peer name "wnn$k"
        ip link set "wnn$k" netns "weftnode$k"
        ip link set "wnh$k" master "$BR"
        ip link set "wnh$k" up
        ip netns exec "weftnode$k" ip addr add "$NET.$((k + 1))/24" dev "wnn$k"
        ip netns exec "weftnode$k" ip link set "wnn$k" up
        ip netns exec "weftnode$k" ip link set lo up
        # Both directions of the node's link: into the node (host side) and out of it.
        tc qdisc add dev "wnh$k" root tbf rate "$rate" burst "$burst" latency 50ms
        ip netns exec "weftnode$k" tc qdisc add dev "wnn$k" root tbf rate "$rate" burst "$burst" latency 50ms
    done
    echo "netns-nodes: $nodes nodes, links limited to $rate (tbf burst $burst)"
}

down() {
    for ns in $(ip netns list 2>/dev/null | awk '/^weftnode/ { print $1 }'); do ip netns del "$ns"; done
    ip link del "$BR" 2>/dev/null || true
}

status() {
    ip netns list | grep weftnode || echo "no weft nodes"
    for ns in $(ip netns list 2>/dev/null | awk '/^weftnode/ { print $1 }'); do
        ip netns exec "$ns" tc qdisc show | sed "s/^/$ns: /"
    done
}

run() {
    local nodes=$1 ppn=$2
    shift 2
    local size=$((nodes * ppn)) port=$((20000 + RANDOM % 20000)) pids=() rc=0 secret
    # A fresh job secret, as weftrun gives its ranks (docs/SECURITY.md); one already set is kept.
    secret=${WEFT_JOB_SECRET:-}
    [ -n "$secret" ] || [ -n "${WEFT_JOB_SECRET_FILE:-}" ] || secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
    for ((r = 0; r < size; r++)); do
        local k=$((r / ppn)) bind=()
        [ "${WEFT_NETNS_NOBIND:-0}" = 1 ] || bind=(taskset -c "$((r % $(nproc)))")
        ip netns exec "weftnode$k" env RANK=$r WORLD_SIZE=$size LOCAL_RANK=$((r % ppn)) LOCAL_WORLD_SIZE=$ppn \
            MASTER_ADDR="$NET.1" MASTER_PORT=$port WEFT_NODE_ID=$k WEFT_JOB_SECRET="$secret" \
            UCX_TLS="${UCX_TLS:-tcp,self}" UCX_NET_DEVICES="${UCX_NET_DEVICES:-wnn$k}" \
            "${bind[@]}" "$@" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
}

# Open MPI: each rank enters its node's namespace before MPI_Init; its PMIx
# client reaches mpirun over the bridge (PMIx's TCP listener on weftbr), and
# the tcp BTL uses the veth links. vader would join ranks across namespaces
# (same host, same /dev/shm) and bypass the links, so it is left out.
ompi() {
    local nodes=$1 ppn=$2
    shift 2
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_MCA_ptl_tcp_if_include=$BR \
        mpirun -np $((nodes * ppn)) --oversubscribe --bind-to "$([ $((nodes * ppn)) -le "$(nproc)" ] && echo core || echo none)" --mca btl tcp,self \
        --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$BR" -x PPN="$ppn" \
        bash -c 'exec ip netns exec "weftnode$((OMPI_COMM_WORLD_RANK / PPN))" "$0" "$@"' "$@"
}

cmd=${1:-}
shift || true
case $cmd in
    up) up "$@" ;;
    down) down ;;
    status) status ;;
    run) run "$@" ;;
    mpirun) ompi "$@" ;;
    *) sed -n '2,26p' "$0"; exit 2 ;;
esac
