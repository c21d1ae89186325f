// SPDX-License-Identifier: Apache-2.0
// Size thresholds every CPU op plans with (measured on the benchmarks; see README).
#ifndef NORMKIT_CPU_MEMORY_PLAN_H_
#define NORMKIT_CPU_MEMORY_PLAN_H_

#include <cstdint>

namespace normkit {
namespace cpu {

// Out-of-place outputs at least this large bypass the cache (streaming stores):
// they cannot stay in the LLC anyway, and skipping the write-allocate read saves
// a third of the traffic. Smaller outputs use plain stores so the next op finds
// them in cache.
constexpr int64_t kStreamingStoreBytes = int64_t{24} << 20;

// Calls that move fewer bytes than this (input plus output) run on the calling
// thread: below it, waking another thread costs more than it saves. At 256 KiB, the
// 200 KB N=1 edge shapes (1x1024x7x7, 1x256x14x14) ran at 0.31-0.99 of a 2-thread
// memcpy on 2 threads; on one thread (1 MiB) at 0.45-1.46, in the same runs.
constexpr int64_t kMinParallelBytes = int64_t{1024} << 10;

}  // namespace cpu
}  // namespace normkit

#endif  // NORMKIT_CPU_MEMORY_PLAN_H_
