#!/usr/bin/env bash
# Same bits on every SIMD target this machine can emulate: runs normkit_ab_compare OLD.so NEW.so
# on small shapes of every op, natively and under qemu-x86_64 with CPUs that make Highway
# dispatch to SSE4 (Westmere), SSSE3 (core2duo) and SCALAR (qemu64). Prints one line per
# case; any "DIFFER" is a change of bits. Needs qemu-user (apt-get install qemu-user).
# Usage: bench/ab_targets.sh OLD.so NEW.so [path/to/normkit_ab_compare]
set -euo pipefail
old=$1 new=$2 ab=${3:-build/bench/normkit_ab_compare}
cases=("64 28 28 affine 1 0 1 none 2" "64 28 28 affine 1 1 1 none 2" "64 28 28 bn 1 1 1 none 2"
       "64 28 28 bnfar 1 0 1 none 2" "64 28 28 8 1 0 1 silu 2" "64 28 28 8 1 1 1 silu 2"
       "256 14 14 32 1 0 1 none 1" "256 14 14 32 1 1 1 relu 1" "256 768 1 ln 1 0 1"
       "256 768 1 rms 1 0 1" "28 32 64 ssA 1 0 1 none 2" "28 32 64 ssA 1 1 1 none 2"
       "28 32 64 ssAt 1 0 1 none 2" "28 32 64 ssAt 1 1 1 none 2" "28 32 64 gap 1 0 1 none 2"
       "28 32 64 gap 1 1 1 none 2" "40 32 64 ssA 1 1 1 none 1" "40 32 64 gap 1 1 1 none 1")
for cpu in native Westmere core2duo qemu64; do
  run=()
  if [ "$cpu" != native ]; then run=(qemu-x86_64 -cpu "$cpu"); fi
  for c in "${cases[@]}"; do
    # shellcheck disable=SC2086
    echo "$cpu: $("${run[@]}" "$ab" "$old" "$new" $c | sed 's/: A .*outputs/:/')"
  done
done
