#!/usr/bin/env bash
# The CUDA path on a machine with an NVIDIA GPU: the CUDA tests (golden vectors, GPU vs
# CPU for every op, device checks, streams), the CPU replays of the kernels' arithmetic,
# the GPU benchmark against cudaMemcpy device-to-device of the same bytes and, when the
# machine's python3 has PyTorch with CUDA, the same ops against PyTorch in one process.
#
#   ./scripts/run_cuda.sh                 # build here (needs the Debian packages), run all
#   ./scripts/run_cuda.sh --build-only    # build build-cuda/ on a machine without a GPU
#   ./scripts/run_cuda.sh --prebuilt      # run build-cuda/ built elsewhere (--build-only)
#   ./scripts/run_cuda.sh --build-only --bundle  # also build-cuda-bundle/: the test and
#                                         # benchmark binaries and their libraries alone
#   ... --quick                           # small benchmark shapes
#   ... --sanitize                        # also compute-sanitizer memcheck, racecheck, synccheck
#
# --build-only copies the libraries the binaries need beyond glibc and libstdc++ (Highway,
# libgomp) into build-cuda/rt, so build-cuda/ runs on a GPU machine that has neither, as
# the H100 / H200 machines this project borrows (no network there) do. Those machines
# take a copy of the working tree plus at most 64 MiB of build output: --bundle puts what
# --prebuilt needs into build-cuda-bundle/ (about 50 MB with
# NORMKIT_CUDA_ARCHITECTURES=90-real in the environment, Hopper only), and --prebuilt runs
# from it where there is no build-cuda/ (the PyTorch comparison, which loads
# libnormkit.so, is then skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=all quick="" sanitize="" bundle=""
for a in "$@"; do
  case "$a" in
    --build-only) mode=build ;;
    --prebuilt) mode=run ;;
    --quick) quick=--quick ;;
    --sanitize) sanitize=1 ;;
    --bundle) bundle=1 ;;
    *) echo "unknown argument $a" >&2; exit 2 ;;
  esac
done
export PATH="$PATH:/usr/local/cuda/bin"

if [ "$mode" != run ]; then
  ./scripts/setup.sh || echo "setup: could not install missing packages; building with what is here"
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DNORMKIT_CUDA=ON \
    ${NORMKIT_CUDA_ARCHITECTURES:+-DNORMKIT_CUDA_ARCHITECTURES=$NORMKIT_CUDA_ARCHITECTURES} >/dev/null
  cmake --build build-cuda -j"$(nproc)" --target normkit normkit_cuda_tests normkit_cuda_bench normkit_tests
  mkdir -p build-cuda/rt
  for lib in $(ldd build-cuda/libnormkit.so build-cuda/tests/normkit_cuda_tests | awk '/=>/ {print $3}' |
               grep -E 'libhwy|libgomp|libtbb' | sort -u); do
    cp -L "$lib" build-cuda/rt/
  done
  if [ -n "$bundle" ]; then
    rm -rf build-cuda-bundle
    mkdir -p build-cuda-bundle/tests build-cuda-bundle/bench
    cp build-cuda/tests/normkit_cuda_tests build-cuda/tests/normkit_tests build-cuda-bundle/tests/
    cp build-cuda/bench/normkit_cuda_bench build-cuda-bundle/bench/
    cp -r build-cuda/rt build-cuda-bundle/
    echo "built build-cuda-bundle/ ($(du -sh build-cuda-bundle | cut -f1)): carry it to the GPU machine"
  fi
  [ "$mode" = build ] && { echo "built build-cuda/ (runtime libraries in build-cuda/rt)"; exit 0; }
fi

# The build to run: build-cuda/, or on a machine that only has the bundle, the bundle.
dir=build-cuda
[ "$mode" = run ] && [ ! -x build-cuda/tests/normkit_cuda_tests ] && [ -d build-cuda-bundle ] &&
  dir=build-cuda-bundle
export LD_LIBRARY_PATH="$PWD/$dir:$PWD/$dir/rt${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NORMKIT_VECTORS_DIR="$PWD/tests/vectors"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
echo "=== CUDA tests"
./$dir/tests/normkit_cuda_tests
echo "=== CPU replays of the kernels, validation"
./$dir/tests/normkit_tests --gtest_filter='CudaKernelMath.*:Validation.*' | tail -3
echo "=== GPU benchmark (ratio = same-run cudaMemcpy D2D time / op time, same bytes)"
./$dir/bench/normkit_cuda_bench $quick
if [ -e "$dir/libnormkit.so" ] &&
   python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "=== against PyTorch CUDA"
  python3 bench/cuda_torch_peer.py "$dir/libnormkit.so" $quick
else
  echo "=== no PyTorch with CUDA here: peer comparison skipped"
fi
if [ -n "$sanitize" ]; then
  echo "=== compute-sanitizer memcheck"
  compute-sanitizer --tool memcheck --error-exitcode 1 ./$dir/tests/normkit_cuda_tests | tail -3
  echo "=== compute-sanitizer racecheck (shared memory)"
  compute-sanitizer --tool racecheck --error-exitcode 1 ./$dir/tests/normkit_cuda_tests \
    --gtest_filter='Cuda.NormsMatchReference:Cuda.ShiftSumFamilyMatchesCpu:Cuda.ClusterPlans:Cuda.HalfStorageGroupNorm*:Cuda.HalfStorageShiftSum*' | tail -3
  echo "=== compute-sanitizer synccheck (barriers, mbarriers, cluster barriers)"
  compute-sanitizer --tool synccheck --error-exitcode 1 ./$dir/tests/normkit_cuda_tests \
    --gtest_filter='Cuda.NormsMatchReference:Cuda.ShiftSumFamilyMatchesCpu:Cuda.ClusterPlans:Cuda.HalfStorageGroupNorm*:Cuda.HalfStorageShiftSum*' | tail -3
fi
