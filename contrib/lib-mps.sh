# shellcheck shell=bash
# Sourced by contrib/gpu-test.sh and contrib/bench/gpu-lib.sh: NVIDIA's MPS
# for ranks that share a GPU (they then run at once instead of taking turns
# in time slices), through a control daemon of the caller's own.

# mps_start DIR WHO: starts the daemon, its pipe and log directories in DIR;
# without it, says so in WHO's name and exits 2.
mps_start() {
    command -v nvidia-cuda-mps-control >/dev/null ||
        { echo "$2: MPS asked for, but there is no nvidia-cuda-mps-control" >&2; exit 2; }
    export CUDA_MPS_PIPE_DIRECTORY=$1/mps-pipe CUDA_MPS_LOG_DIRECTORY=$1/mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d || { echo "$2: nvidia-cuda-mps-control -d failed" >&2; exit 2; }
}

# mps_stop: stops the daemon mps_start started.
mps_stop() {
    echo quit | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1 || true
}
