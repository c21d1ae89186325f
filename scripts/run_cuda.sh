#!/usr/bin/env bash
# The CUDA path on a machine with an NVIDIA GPU: the CUDA tests (golden vectors, GPU vs
# CPU for every op, device checks, streams), the CPU replays of the kernels' arithmetic,
# the GPU benchmark against cudaMemcpy device-to-device of the same bytes and, when the
# machine's python3 has PyTorch with CUDA, the same ops against PyTorch in one process.
#
#   ./scripts/run_cuda.sh                 # build here (needs the Debian packages), run all
#   ./scripts/run_cuda.sh --build-only    # build build-cuda/ on a machine without a GPU
#   ./scripts/run_cuda.sh --prebuilt      # run build-cuda/ built elsewhere (--build-only)
#   ... --quick                           # small benchmark shapes
#   ... --sanitize                        # also compute-sanitizer memcheck, racecheck, synccheck
#
# --build-only copies the libraries the binaries need beyond glibc and libstdc++ (Highway,
# libgomp) into build-cuda/rt, so build-cuda/ runs on a GPU machine that has neither, as
# the H100 machines this project borrows (no network there) do.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=all quick="" sanitize=""
for a in "$@"; do
  case "$a" in
    --build-only) mode=build ;;
    --prebuilt) mode=run ;;
    --quick) quick=--quick ;;
    --sanitize) sanitize=1 ;;
    *) echo "unknown argument $a" >&2; exit 2 ;;
  esac
done
export PATH="$PATH:/usr/local/cuda/bin"

if [ "$mode" != run ]; then
  ./scripts/setup.sh || echo "setup: could not install missing packages; building with what is here"
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DNORMKIT_CUDA=ON >/dev/null
  cmake --build build-cuda -j"$(nproc)" --target normkit normkit_cuda_tests normkit_cuda_bench normkit_tests
  mkdir -p build-cuda/rt
  for lib in $(ldd build-cuda/libnormkit.so build-cuda/tests/normkit_cuda_tests | awk '/=>/ {print $3}' |
               grep -E 'libhwy|libgomp|libtbb' | sort -u); do
    cp -L "$lib" build-cuda/rt/
  done
  [ "$mode" = build ] && { echo "built build-cuda/ (runtime libraries in build-cuda/rt)"; exit 0; }
fi

export LD_LIBRARY_PATH="$PWD/build-cuda:$PWD/build-cuda/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NORMKIT_VECTORS_DIR="$PWD/tests/vectors"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
echo "=== CUDA tests"
./build-cuda/tests/normkit_cuda_tests
echo "=== CPU replays of the kernels, validation"
./build-cuda/tests/normkit_tests --gtest_filter='CudaKernelMath.*:Validation.*' | tail -3
echo "=== GPU benchmark (ratio = same-run cudaMemcpy D2D time / op time, same bytes)"
./build-cuda/bench/normkit_cuda_bench $quick
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "=== against PyTorch CUDA"
  python3 bench/cuda_torch_peer.py build-cuda/libnormkit.so $quick
else
  echo "=== no PyTorch with CUDA here: peer comparison skipped"
fi
if [ -n "$sanitize" ]; then
  echo "=== compute-sanitizer memcheck"
  compute-sanitizer --tool memcheck --error-exitcode 1 ./build-cuda/tests/normkit_cuda_tests | tail -3
  echo "=== compute-sanitizer racecheck (shared memory)"
  compute-sanitizer --tool racecheck --error-exitcode 1 ./build-cuda/tests/normkit_cuda_tests \
    --gtest_filter='Cuda.NormsMatchReference:Cuda.ShiftSumFamilyMatchesCpu:Cuda.ClusterPlans' | tail -3
  echo "=== compute-sanitizer synccheck (barriers, mbarriers, cluster barriers)"
  compute-sanitizer --tool synccheck --error-exitcode 1 ./build-cuda/tests/normkit_cuda_tests \
    --gtest_filter='Cuda.NormsMatchReference:Cuda.ShiftSumFamilyMatchesCpu:Cuda.ClusterPlans' | tail -3
fi
