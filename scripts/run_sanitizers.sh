#!/usr/bin/env bash
# Hostile-input checks, bounded in time (part of the test command):
#  1. one clang build with AddressSanitizer + UndefinedBehaviorSanitizer (OpenMP backend)
#     that holds both the test suite, run under the sanitizers, and the libFuzzer targets;
#  2. the concurrency, determinism, validation and thread-pool tests under
#     ThreadSanitizer, pool backend: the callers' own threads racing through every op
#     while normkit's own workers run the parts of each call. (Debian's libgomp and
#     libtbb are not TSan-instrumented, so TSan reports their internal work stealing as
#     races, e.g. tbb/partitioner.h check_being_stolen; those backends are covered by the
#     bitwise determinism tests instead.)
#  3. each libFuzzer target for FUZZ_SECONDS (default 30), one thread, from its seed corpus
#     fuzz/corpus/<target>.tar.gz (if it has one), printing how many executions ran.
#     fuzz_values compares values with a double reference.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
jobs=$(nproc)
fuzz_seconds=${FUZZ_SECONDS:-30}
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/normkit-ccache}" CCACHE_NOHASHDIR=1
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# Only the SIMD targets this machine can run (the others' kernels could not be run under the
# sanitizers here: AVX-512 on a CPU without it), and of those the widest and the one-lane
# fallback: SSSE3 and SSE4 differ from AVX2 only in lane count, their values are tested in
# every release build, and each target compiled under ASan costs minutes of CI.
common=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DNORMKIT_BUILD_BENCH=OFF -DNORMKIT_BUILD_EXAMPLES=OFF
        -DNORMKIT_SKIP_UNRUNNABLE_TARGETS=ON "-DNORMKIT_DISABLED_TARGETS=HWY_SSSE3|HWY_SSE4"
        "${launcher[@]}")

# One sanitized build for the tests and the fuzzers: a second one (gcc ASan for the tests,
# clang for the fuzzers) took a quarter of CI's time for no path this one leaves out.
asan=build-asan
echo "=== ASan + UBSan, OpenMP, clang: the test suite (${asan})"
cmake -S . -B "$asan" "${common[@]}" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
      -DNORMKIT_THREADING=OPENMP -DNORMKIT_BUILD_FUZZERS=ON \
      -DNORMKIT_SANITIZE=address,undefined >/dev/null
cmake --build "$asan" -j"$jobs" >/dev/null
# LLVM's libomp keeps per-thread allocations to the end of the process (scripts/lsan.supp).
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp"
if ! (cd "$asan" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --output-on-failure -j"$jobs" > ctest.log 2>&1); then
  # Each failing test's output (what the sanitizer said, and where), then the summary.
  grep -B3 -A30 "runtime error\|ERROR: \|SUMMARY: \|Failure\|\*\*\*Failed\|\*\*\*Exception" \
    "$asan/ctest.log" | head -150
  tail -12 "$asan/ctest.log"
  exit 1
fi
tail -3 "$asan/ctest.log"

for backend in POOL; do
  dir="build-tsan-${backend,,}"
  echo "=== TSan, ${backend} (${dir})"
  cmake -S . -B "$dir" "${common[@]}" -DNORMKIT_THREADING="$backend" \
        -DNORMKIT_SANITIZE=thread >/dev/null
  cmake --build "$dir" -j"$jobs" --target normkit_tests >/dev/null  # the one binary it runs
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" "$dir/tests/normkit_tests" \
    --gtest_filter='Concurrency.*:Determinism.*:*BitwiseIdentical*:Context*:Validation.*:ThreadPool.*:HostPool.*' \
    --gtest_brief=1
done

echo "=== libFuzzer, ${fuzz_seconds} s per target"
dir="$asan"
# One thread (the fuzzers call with the default context): more executions per second.
export NORMKIT_NUM_THREADS=1
for target in fuzz_affine fuzz_group_norm fuzz_shift_sum fuzz_values; do
  work=$(mktemp -d)
  if [ -f fuzz/corpus/"$target".tar.gz ]; then tar xzf fuzz/corpus/"$target".tar.gz -C "$work"; fi
  "$dir/fuzz/$target" -max_total_time="$fuzz_seconds" -print_final_stats=1 \
    -artifact_prefix="$dir/$target-" "$work" \
    > "$dir/$target.log" 2>&1 || {
    # The report's head (what and where) and its tail (the input that did it).
    sed -n '/==ERROR\|runtime error\|deadly signal\|Timeout\|out-of-memory/,$p' "$dir/$target.log" | head -40
    echo "..."
    tail -8 "$dir/$target.log"
    exit 1
  }
  echo "$target: $(grep -m1 stat::number_of_executed_units "$dir/$target.log" | awk '{print $2}') executions, no crash"
  rm -rf "$work"
done
echo "sanitizers and fuzzing: ok"
