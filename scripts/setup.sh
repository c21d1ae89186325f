#!/usr/bin/env bash
# Installs the Debian packages normkit builds, tests and benchmarks with, when missing.
# Sourced or run by run_demo.sh and run_tests.sh; safe to run again.
set -euo pipefail
PACKAGES=(cmake make g++ pkg-config libhwy-dev libtbb-dev libeigen3-dev libgtest-dev
          libbenchmark-dev python3 python3-numpy clang libclang-rt-14-dev libomp-dev
          ccache python3-venv python3-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
