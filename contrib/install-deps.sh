#!/bin/sh
# Installs everything weft needs to build, test and benchmark on a fresh
# Debian 12 machine (run as root, or with sudo available).
set -eu
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
PKGS="build-essential autoconf automake libtool pkg-config
      libucx-dev ucx-utils libpmix-dev libhwloc-dev libssl-dev libcriterion-dev
      openmpi-bin libopenmpi-dev
      slurm-wlm slurm-wlm-basic-plugins munge
      iproute2 procps psmisc python3
      clang libclang-rt-dev
      python3-numpy python3-pytest python3-pip python3-venv"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "install-deps: installing:$missing"
    $SUDO apt-get update -qq
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $missing
else
    echo "install-deps: all packages present"
fi
