// SPDX-License-Identifier: Apache-2.0
// CPU group norm (with instance norm and channel layer norm as its G = C and G = 1 forms)
// and the row-wise layer / RMS norm of [rows, D] tensors.
#ifndef NORMKIT_CPU_GROUP_NORM_H_
#define NORMKIT_CPU_GROUP_NORM_H_

#include <algorithm>
#include <cstdint>

#include "core/context.h"
#include "core/norm_args.h"
#include "core/tensor.h"
#include "cpu/kernels/group_norm.h"

namespace normkit {
namespace cpu {

using kernels::Activation;

using GroupNormArgs = NormArgs;  // groups, gamma, beta, eps, activation, mean, rstd

// y = act((x - mean) * rstd * gamma + beta) per (sample, group), on validated float32
// CPU tensors of one shape; y may be x. Throws std::bad_alloc before writing anything
// if scratch cannot be allocated.
void GroupNorm(const normkit_context& context, const TensorView& x, const TensorView& y,
               const GroupNormArgs& args);

using RowNormArgs = NormArgs;  // gamma, beta, eps, rms, mean, rstd

// The residual add of the fused add + norm: the rows normalized are
// h = (x + residual) + bias, computed in float and stored as x is (residual and h share
// x's dtype), written to h when it is not null.
struct RowResidual {
  const void* residual = nullptr;  // [rows, D]
  const float* bias = nullptr;     // D floats, or null
  void* h = nullptr;               // [rows, D], or null
};

// Layer norm or RMS norm over the last dimension of a [rows, D] tensor; with `residual`,
// of h = x + residual (+ bias) as stored.
void RowNorm(const normkit_context& context, const TensorView& x, const TensorView& y,
             const RowNormArgs& args, const RowResidual* residual = nullptr);

// Tuning constants of the group-norm plans, each with its reason in one line; the
// measurements behind them are in docs/tuning.md.

// Statistics block (elements): block moments merge in block order, so the block
// boundaries, from the shape alone, fix the bits; large enough to amortize the merge.
constexpr int64_t kStatsBlockElems = 32768;

// Channels-last blocks of tensors larger than the cache (1 MiB): fewer new prefetch
// streams per block.
constexpr int64_t kFromMemoryStatsBlockElems = int64_t{1} << 18;

// Channels-last blocks take at least this many rows: a block's bookkeeping is per channel.
constexpr int64_t kMinStatsBlockRows = 128;

// Rows per channels-last statistics block of a sample of S rows of C channels: equal
// blocks (no short last one to idle a thread), an even count from memory (two threads
// split a sample evenly).
inline int64_t ChannelsLastBlockRows(int64_t S, int64_t C, bool from_memory) {
  const int64_t block_elems = from_memory ? kFromMemoryStatsBlockElems : kStatsBlockElems;
  const int64_t max_rows = std::max(block_elems / C, std::min((S + 1) / 2, kMinStatsBlockRows));
  int64_t count = (S + max_rows - 1) / max_rows;
  if (from_memory && count > 1) count += count % 2;
  return (S + count - 1) / count;
}

// A cached channels-last sample up to this size is one statistics block, taken whole by
// one thread: the per-block bookkeeping is paid once.
constexpr int64_t kOneBlockSampleBytes = int64_t{256} << 10;

// Channels-last pivots: the mean of at least kPivotValues values of a group (rarely a
// standard deviation off on random data), from at least kFromMemoryPivotRows rows from
// memory (cheap next to a second pass over a 1 MiB block).
constexpr int64_t kPivotValues = 16;
constexpr int64_t kFromMemoryPivotRows = 4;
inline int64_t PivotSamples(int64_t rows, int64_t channels_per_group, bool from_memory) {
  const int64_t samples = (kPivotValues + channels_per_group - 1) / channels_per_group;
  return std::min(rows, from_memory ? std::max(samples, kFromMemoryPivotRows) : samples);
}

// A group (channels-first) or sample (channels-last) up to this size is normalized by one
// task, statistics then output while it stays in L2: one pass over DRAM.
constexpr int64_t kFusedUnitBytes = int64_t{1} << 20;

// Channels-first groups up to this size go in chains (a group's output written while the
// next group's statistics are read, as a copy interleaves reads and writes); from memory
// (x of kChainedFromMemoryBytes and more, out of place, no SiLU) every fused group does.
constexpr int64_t kChainedUnitBytes = int64_t{8} << 10;
constexpr int64_t kChainedFromMemoryBytes = int64_t{48} << 20;
constexpr int64_t kChainedFromMemoryUnitBytes = kFusedUnitBytes;

// Channels-first groups up to kBatchedUnitBytes go in batches of up to kUnitBatchBytes
// (statistics of all, then parameters, then one output pass): the groups' fixed costs
// overlap. A batch holds a multiple of kUnitBatchMultiple groups (a vector of them).
constexpr int64_t kBatchedUnitBytes = int64_t{4} << 10;
constexpr int64_t kUnitBatchBytes = int64_t{16} << 10;
constexpr int64_t kUnitBatchMultiple = 16;

}  // namespace cpu
}  // namespace normkit

#endif  // NORMKIT_CPU_GROUP_NORM_H_
