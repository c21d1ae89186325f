#!/usr/bin/env bash
# aarch64 under emulation: cross-builds the library (every aarch64 SIMD target: NEON, SVE,
# SVE2, SVE_256, SVE2_128) and its GoogleTest suite with Debian's cross compiler, then runs
# the suite under qemu-aarch64 on CPUs that make Highway dispatch to each target:
#   NEON      (-cpu cortex-a72, no SVE)        the suite but its large-tensor tests
#   SVE2_128  (-cpu max, 128-bit vectors)      the suite but its large-tensor tests
#   SVE_256   (-cpu max, 256-bit vectors)      the SIMD-target tests and golden vectors
#   SVE2      (-cpu max, 512-bit vectors)      the SIMD-target tests and golden vectors
# The large-tensor tests (tens of MB, streaming stores, several threads) take minutes each
# under emulation and exercise no code the smaller ones do not on these targets. The
# SIMD-target tests loop over every target the emulated CPU supports (NEON, SVE / SVE2 and
# the fixed-width SVE target of its vector length), so each run covers several.
# qemu runs the binaries with the arm64 multiarch glibc (-L /): with the cross toolchain's
# copy (-L /usr/aarch64-linux-gnu) pthread_create hangs under qemu-user, so every threaded
# call did. Threading backend POOL (normkit's own; the arm64 OpenMP runtime is not
# installed by default).
# Installs what it needs (arm64 multiarch packages) when missing. Usage:
#   scripts/run_arm64_tests.sh [build folder, default build-arm64]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-arm64}
jobs=$(nproc)

need=()
for p in g++-aarch64-linux-gnu qemu-user-static libhwy-dev:arm64 libgtest-dev:arm64; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "arm64: installing ${need[*]}"
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$dir" -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
      -DCMAKE_BUILD_TYPE=Release -DNORMKIT_THREADING=POOL -DNORMKIT_CUDA=OFF \
      -DNORMKIT_BUILD_BENCH=OFF -DNORMKIT_BUILD_EXAMPLES=OFF "${launcher[@]}" >/dev/null
cmake --build "$dir" -j"$jobs" --target normkit_tests

qemu=(qemu-aarch64-static -L /)
tests="$dir/tests/normkit_tests"
# Large tensors: minutes each under emulation.
large='*Large*:*FromMemory*:Streaming.*:ShiftSum.SeedChannelCounts'
large+=':Affine.LargeOutputStreamingPath:*AffineChannelsLastPeriodsOnEveryTarget'
large+=':HalfShiftSum.LargeCallsAndOverflow:HalfShiftSum.Streamed*'  # covered natively
targets='SimdTargets.*:HalfConversions.*:GoldenVectors.*:ShiftSum.PhaseWalksOnEveryTarget'
targets+=':FloatEdges.*OnEveryTarget:GroupNorm.SiluWithinAFewUlpsOverItsRange'
targets+=':BatchNormTraining.EverySimdTarget*:BatchNormBackward.EverySimdTarget*'
targets+=':HalfShiftSum.StoredXEveryPathOnEveryTarget*:HalfAddNorm.EveryTarget'
targets+=':HalfBatchNormTraining.*EverySimdTarget'
targets+='-*AffineChannelsLastPeriodsOnEveryTarget'  # minutes under SVE emulation
run() {  # name, cpu, gtest filter
  echo "=== aarch64 $1 (qemu -cpu $2)"
  local start=$SECONDS
  "${qemu[@]}" -cpu "$2" "$tests" --gtest_filter="$3" --gtest_brief=1 2>&1 | tail -4
  echo "($((SECONDS - start)) s)"
}
run NEON cortex-a72 "-$large"
run SVE2_128 max,sve-default-vector-length=16 "-$large"
run SVE_256 max,sve-default-vector-length=32 "$targets"
run SVE2 max,sve-default-vector-length=64 "$targets"
