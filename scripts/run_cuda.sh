#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: builds with the CUDA module required, runs the CUDA
# tests (golden vectors, GPU vs CPU, device checks) and the GPU benchmark against
# cudaMemcpy device-to-device. Needs the CUDA toolkit (nvcc) and a driver; no network.
#   ./scripts/run_cuda.sh            # tests + full benchmark
#   ./scripts/run_cuda.sh --quick    # tests + small benchmark
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh || echo "setup: could not install missing packages; building with what is here"
export PATH="$PATH:/usr/local/cuda/bin"
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DNORMKIT_CUDA=ON >/dev/null
cmake --build build-cuda -j"$(nproc)" --target normkit_cuda_tests normkit_cuda_bench normkit_tests
./build-cuda/tests/normkit_cuda_tests
./build-cuda/tests/normkit_tests --gtest_filter='CudaKernelMath.*:Validation.*'
./build-cuda/bench/normkit_cuda_bench "$@"
