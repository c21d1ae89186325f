#!/usr/bin/env bash
# The whole test suite: set up, then for each threading backend (OpenMP, TBB, pool, serial)
# build and run the GoogleTest suite, the C / C++ / Python examples and the quick demo
# (TBB, pool and serial: the tests that use threads); then the aarch64 cross build and its
# suite under qemu (scripts/run_arm64_tests.sh);
# then install the library and build an example against the installed CMake package;
# then build the Python wheel, install it into a fresh venv and run its pytest suite;
# then the sanitizer builds and the bounded fuzzing (scripts/run_sanitizers.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's title, after how long the one before took (CI's time is budgeted).
stage_start=$SECONDS
stage() {
  echo "(stage time: $((SECONDS - stage_start)) s; total $SECONDS s)"
  stage_start=$SECONDS
  echo "=== $*"
}
stage "set-up (scripts/setup.sh)"
./scripts/setup.sh
jobs=$(nproc)
# System python with Debian's numpy, whatever python3 comes first on PATH.
py=/usr/bin/python3

# A compiler cache: only the parallel layer differs between threading backends, so the
# TBB, pool and serial builds reuse the OpenMP build's objects (seconds instead of minutes).
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/normkit-ccache}" CCACHE_NOHASHDIR=1
launcher=()
wheel_launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  wheel_launcher=(-C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# One compiler name for every build, the wheel's included (scikit-build-core names g++):
# the cache keys on it.
export CC=gcc CXX=g++

# The CUDA module is compiled (when nvcc is there) in the OpenMP build, the default one and
# the one installed below; the TBB, pool and serial builds leave it out, which tests the
# CPU-only binary's answers to CUDA tensors. Without a GPU the CUDA tests skip, saying why.
for backend in OPENMP TBB POOL SERIAL; do
  dir="build-test-${backend,,}"
  cuda=OFF
  if [ "$backend" = OPENMP ]; then cuda=AUTO; fi
  stage "threading backend ${backend}, CUDA module ${cuda} (${dir})"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DNORMKIT_THREADING="$backend" \
        -DNORMKIT_CUDA="$cuda" "${launcher[@]}" -DPython3_EXECUTABLE="$py" >/dev/null
  cmake --build "$dir" -j"$jobs"
  if [ "$backend" = OPENMP ]; then
    (cd "$dir" && ctest --output-on-failure -j"$jobs")
  else
    # The other backends differ only in core/parallel.cc and core/context.cc: the tests
    # that use threads, contexts and thread counts (every op's determinism across thread
    # counts, concurrent callers, out-of-memory, the examples), not the single-thread ones.
    (cd "$dir" && ctest --output-on-failure -j"$jobs" \
        -R 'Concurrency|Determinism|BitwiseIdentical|ThreadCount|Threads|Context|ThreadPool|HostPool|ApiEdges|OutOfMemory|example|demo')
  fi
done

# aarch64: a cross build with every aarch64 SIMD target, its suite under qemu on NEON and
# SVE (NORMKIT_SKIP_ARM64=1 skips it for a quick local run).
stage "aarch64 cross build and qemu runs (scripts/run_arm64_tests.sh)"
if [ -z "${NORMKIT_SKIP_ARM64:-}" ]; then ./scripts/run_arm64_tests.sh build-test-arm64; fi

stage "Python package: a wheel (pip wheel .), installed into a fresh venv, and its pytest suite"
pydir="$PWD/build-test-python"
rm -rf "$pydir"
"$py" -m venv "$pydir/venv"
"$pydir/venv/bin/pip" install -q --upgrade pip
"$pydir/venv/bin/pip" install -q numpy pytest
# PyTorch for normkit.torch's tests (about 2 minutes and 5 GB from PyPI); without it those
# tests skip, and this says so.
if [ -z "${NORMKIT_SKIP_TORCH:-}" ] && ! "$pydir/venv/bin/pip" install -q torch; then
  echo "WARNING: pip install torch failed: the normkit.torch tests will be skipped"
fi
"$pydir/venv/bin/pip" wheel -q . -w "$pydir/dist" --no-deps "${wheel_launcher[@]}"
"$pydir/venv/bin/pip" install -q "$pydir"/dist/normkit-*.whl
# From outside the source tree, so that `import normkit` is the installed wheel.
(cd "$pydir" && venv/bin/python -m pytest -q -rs "$OLDPWD/tests/python")
# The peer report, every section on its small shapes, one round (peers it cannot import
# are skipped): it must run, check every output against float64 and write its report; its
# verdicts are not asserted.
(cd "$pydir" && venv/bin/python "$OLDPWD/bench/peers/run_peers.py" --quick --rounds 1 \
   --machine smoke --output "$pydir" >/dev/null && grep -q "^## Summary" smoke.md \
   && ! grep -q "normkit off float64" smoke.md)

stage "more than 2^31 elements (8.6 GB; skips itself when the memory is not there)"
./build-test-openmp/tests/normkit_large_test

stage "install + find_package(normkit) + pkg-config"
prefix="$PWD/build-test-openmp/install"
rm -rf "$prefix"
cmake --install build-test-openmp --prefix "$prefix" >/dev/null
cmake -S examples/installed -B build-test-installed -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build build-test-installed -j"$jobs"
LD_LIBRARY_PATH="$prefix/lib" ./build-test-installed/installed_example
./build-test-installed/installed_example_static
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs normkit
exported=$(nm -D --defined-only "$prefix/lib/libnormkit.so" | awk '{print $3}' | grep -v '^normkit_' || true)
if [ -n "$exported" ]; then echo "symbols other than normkit_* are exported: $exported"; exit 1; fi
echo "installed package: ok"

# Sanitizer builds, bounded fuzzing and the concurrency test under TSan
# (NORMKIT_SKIP_SANITIZERS=1 skips them for a quick local run).
stage "sanitizers and fuzzing (scripts/run_sanitizers.sh)"
if [ -z "${NORMKIT_SKIP_SANITIZERS:-}" ]; then ./scripts/run_sanitizers.sh; fi
stage "done"

# Last, so CI reads ctest's summary line for the default backend.
(cd build-test-openmp && ctest -j"$jobs" | tail -3)
