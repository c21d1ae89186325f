#!/usr/bin/env bash
# The main job: set up, build Release, run every op on the seed workloads, check each
# result against a double reference, and print time, GB/s and the ratio to memcpy.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DNORMKIT_BUILD_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" --target normkit_demo
./build/bench/normkit_demo "$@"
