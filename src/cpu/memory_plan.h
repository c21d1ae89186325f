// SPDX-License-Identifier: Apache-2.0
// Size thresholds every CPU op plans with (measured on the benchmarks; see README).
#ifndef NORMKIT_CPU_MEMORY_PLAN_H_
#define NORMKIT_CPU_MEMORY_PLAN_H_

#include <cstdint>

#include "core/context.h"

namespace normkit {
namespace cpu {

// Out-of-place outputs at least this large bypass the cache (streaming stores):
// they cannot stay in the LLC anyway, and skipping the write-allocate read saves
// a third of the traffic. Smaller outputs use plain stores so the next op finds
// them in cache.
constexpr int64_t kStreamingStoreBytes = int64_t{24} << 20;

// Calls that move fewer bytes than this (input plus output) run on the calling
// thread: below it, waking another thread costs more than it saves. Against a build
// at 256 KiB, alternating, 2 threads: the 200 KB N=1 edge shapes (1x1024x7x7,
// 1x256x14x14) ran affine / batch norm at 0.27-0.94 of a 2-thread memcpy before,
// 0.47-1.38 on one thread here (most rows up; 14x14 NCHW affine out of place
// 0.76-0.77 -> 0.55-0.95).
constexpr int64_t kMinParallelBytes = int64_t{1024} << 10;

// Affine, batch norm and group norm split from a quarter of that. Against
// kMinParallelBytes, alternating builds, 8 rounds, 2 threads, medians: the 200 KB edge
// shapes' affine and scale-only rows went from 0.47-1.02 of a 2-thread copy to
// 0.59-0.88 (14 of 16 rows up; 1x256x14x14 out of place 0.65 -> 0.84, 1x1024x7x7
// 0.53 -> 0.74). Batch norm lost at the split (0.43-0.77 -> 0.35-0.64) while the
// calling thread folded the parameters for all threads; folded per range by the
// threads that read them, it gains (1x256x14x14 0.57-0.72 -> 0.73-0.81).
constexpr int64_t kMinParallelAffineBytes = int64_t{256} << 10;

// `context`, or the calling thread alone for a call that moves fewer than `min_bytes`.
inline const normkit_context& ContextForBytes(const normkit_context& context, int64_t bytes,
                                              int64_t min_bytes = kMinParallelBytes) {
  return bytes < min_bytes ? SerialContext() : context;
}

}  // namespace cpu
}  // namespace normkit

#endif  // NORMKIT_CPU_MEMORY_PLAN_H_
