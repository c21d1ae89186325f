#!/usr/bin/env bash
# The peers report: builds normkit (Release), makes a virtual environment .venv-peers,
# installs the peers from PyPI (each optional: a peer that fails to install is skipped
# with a line), and runs bench/peers/run_peers.py. Output: bench/results/<machine>.md/.png
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/setup.sh
apt_missing=()
dpkg-query -W -f='${Status}' python3-venv 2>/dev/null | grep -q "install ok installed" || apt_missing+=(python3-venv)
if ((${#apt_missing[@]})); then
  SUDO=""; [ "$(id -u)" != 0 ] && SUDO=sudo
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${apt_missing[@]}" >/dev/null
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target normkit >/dev/null
[ -x .venv-peers/bin/python ] || /usr/bin/python3 -m venv .venv-peers
for pkg in numpy onnx onnxruntime matplotlib torch ncnn; do
  .venv-peers/bin/pip install -q "$pkg" || echo "peer package $pkg could not be installed: skipped"
done
NORMKIT_MACHINE="${NORMKIT_MACHINE:-$(hostname)}" .venv-peers/bin/python bench/peers/run_peers.py
