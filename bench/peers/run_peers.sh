#!/usr/bin/env bash
# The peer report in one command: installs what it needs (Debian packages via setup.sh,
# a virtual environment .venv-peers with the normkit wheel built from this tree and the
# peers from PyPI, each optional: a peer that fails to install is skipped with a line), then
# runs bench/peers/run_peers.py "$@". Output: bench/results/<machine>.md / .json / .png
# (NORMKIT_MACHINE names the machine; default: the host name).
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/setup.sh
[ -x .venv-peers/bin/python ] || /usr/bin/python3 -m venv .venv-peers
.venv-peers/bin/pip install -q --upgrade pip scikit-build-core nanobind numpy >/dev/null
for pkg in onnx onnxruntime matplotlib torch ncnn; do
  .venv-peers/bin/pip install -q "$pkg" || echo "peer package $pkg could not be installed: skipped"
done
# The wheel of this tree (Release, the CPU's own SIMD targets dispatched at run time).
launcher=()
command -v ccache >/dev/null && launcher=(-C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
.venv-peers/bin/pip install -q --no-deps --force-reinstall --no-build-isolation "${launcher[@]}" .
NORMKIT_MACHINE="${NORMKIT_MACHINE:-$(hostname)}" .venv-peers/bin/python bench/peers/run_peers.py "$@"
