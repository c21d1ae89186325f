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

// Layer norm or RMS norm over the last dimension of a [rows, D] tensor.
void RowNorm(const normkit_context& context, const TensorView& x, const TensorView& y,
             const RowNormArgs& args);

// Statistics are taken over blocks of about this many elements (one pass; a second
// one, from L2, only when the pivot was poor), and the block moments merged in block
// order: the block boundaries come from the shape alone, so results never depend on
// the threads. Larger blocks amortize the per-block merge and per-group bookkeeping,
// and put a channels-last block's four row streams further apart (128 KiB blocks:
// 32 KiB apart; 32x512x56x56 NHWC at 1 thread went from 0.80 to 0.84-0.95 of memcpy
// against 64 KiB blocks).
constexpr int64_t kStatsBlockElems = 32768;

// Channels-last tensors larger than the last-level cache take their statistics over
// blocks of about this many elements (1 MiB) instead: a block is read as four row
// streams a quarter of it apart (kernels::ChannelShiftedSums), and each block start
// makes the prefetchers find four new streams. One thread, A/B against 128 KiB blocks
// (normkit_ab_compare, Zen 5): 128x256x28x28 G=32 NHWC (one block a sample) took 0.83-0.87
// of the time, 32x512x56x56 0.91-0.94, 8x64x128x128 G=64 0.83-0.86, 64x32x112x112 G=8
// 0.94-0.96; a standalone read of 4 streams ran at 26 GB/s in 128 KiB blocks, 29.5 in
// 1 MiB ones and 31 as one stream. A block's second pass (a poor pivot; see
// kFromMemoryPivotRows) reads it from L2 or L3, not DRAM.
constexpr int64_t kFromMemoryStatsBlockElems = int64_t{1} << 18;

// Channels-last blocks take at least this many rows (or half the sample's, when it
// has fewer), above kStatsBlockElems where rows are wider than 256 channels: a
// block's bookkeeping (pivots, per-group sums) is per channel, and over 32-row blocks
// of 1024 channels it cost more than a third of a same-size memcpy.
constexpr int64_t kMinStatsBlockRows = 128;

// Rows per channels-last statistics block of a sample of S rows of C channels.
// Blocks of equal rows (the block size above, or kMinStatsBlockRows rows where rows are
// wider): a short last block would leave a thread idle where a sample has only a few
// blocks (1x256x14x14 G=32 at 2 threads: blocks of 128 and 68 rows took 7.1 us a
// call, 98 and 98 6.2). From memory, samples over a block are split over the threads by
// blocks, and an even count splits evenly in two (32x512x56x56: 7 blocks would leave
// one thread 4). (GroupNorm then takes small cached samples whole: below.)
inline int64_t ChannelsLastBlockRows(int64_t S, int64_t C, bool from_memory) {
  const int64_t block_elems = from_memory ? kFromMemoryStatsBlockElems : kStatsBlockElems;
  const int64_t max_rows = std::max(block_elems / C, std::min((S + 1) / 2, kMinStatsBlockRows));
  int64_t count = (S + max_rows - 1) / max_rows;
  if (from_memory && count > 1) count += count % 2;
  return (S + count - 1) / count;
}

// A channels-last sample up to this size, with the whole tensor in cache, takes its
// statistics in one block of all rows, and one thread takes it whole: the per-block
// bookkeeping (pivots, per-group sums, the merge) is then paid once. Bench, alternating,
// medians of 3, 1 / 2 threads: 1x256x14x14 G=32 0.58 / 0.42 -> 0.60 / 0.40 of memcpy,
// in place 0.46 / 0.34 -> 0.52 / 0.37. At 512 KiB 1x1280x8x8 went 0.37 / 0.27 -> 0.41 /
// 0.21: a second thread on row blocks is worth more there. Split in chunks of channels
// instead (each thread its groups' statistics and output, one parallel region), two
// threads lost: each core's prefetchers pull in lines the other core then writes
// (1x256x14x14 0.38 -> 0.27, 1x640x16x16 0.47 -> 0.26).
constexpr int64_t kOneBlockSampleBytes = int64_t{256} << 10;

// Channels-last statistics pivot on the mean of a group's values in this many rows
// of a block (kernels::SampledRow): at least kPivotValues values, so that the pivot
// of random data is rarely a standard deviation from the mean (a first-row pivot
// was, for 1 or 2 channels a group, in almost every block of 32 groups and more,
// and each such block took a second pass).
// From memory (1 MiB blocks, kFromMemoryStatsBlockElems) at least kFromMemoryPivotRows
// rows: reading them costs under 1% of the block, and a second pass is a read of
// the block from L2 or L3. With data that steps along the rows (normkit_ab_compare's
// x), one row's pivot sent most blocks to a second pass (96 of 256 block-groups far,
// 128x256x28x28 G=32); four rows: one thread, 128x256x28x28 and 32x512x56x56 G=32
// NHWC took 0.94-0.96 of the time, and 1.00 with data without steps. In cache the
// sampled rows cost small tensors up to 9% (1x1280x8x8 G=32) and stay as they were.
constexpr int64_t kPivotValues = 16;
constexpr int64_t kFromMemoryPivotRows = 4;
inline int64_t PivotSamples(int64_t rows, int64_t channels_per_group, bool from_memory) {
  const int64_t samples = (kPivotValues + channels_per_group - 1) / channels_per_group;
  return std::min(rows, from_memory ? std::max(samples, kFromMemoryPivotRows) : samples);
}

// A group (channels-first) or sample (channels-last) up to this size is normalized
// by one task, statistics then output while it stays in L2: one pass over DRAM.
// Larger ones are split over all threads: statistics, then output.
constexpr int64_t kFusedUnitBytes = int64_t{1} << 20;

// Channels-first groups up to this size (and above kBatchedUnitBytes) go in chains: each group's
// output is written while the next group's statistics are read
// (kernels::ApplyNormPlanesThenMoments), as a copy interleaves reads and writes. A group, its
// output and the next group (three times this) then share L1. In a microbenchmark of 32 such groups
// the chain ran at 0.94 of memcpy against 0.76 for statistics-then-output with 6 KiB groups, and at
// 0.74 against 0.84 with 12 KiB ones.
constexpr int64_t kChainedUnitBytes = int64_t{8} << 10;
// From memory (x of at least kChainedFromMemoryBytes, out of place) every fused group
// goes in chains, except under SiLU: the next group's reads then come from DRAM while
// this one's output streams out, where statistics-then-output left the read and the
// write streams each idle half the time. Zen 5, one thread, same-process A/B, time
// chained / fused:
// 128x256x28x28 G=32 0.95-0.96, 32x512x56x56 G=32 0.93, 32x128x64x64 G=32 0.92-0.95,
// 8x64x128x128 G=8 0.95, 16x64x128x128 G=64 0.96-0.98. Below 48 MiB it gained nothing
// (8x64x128x128, 32 MiB: G=32 0.99-1.01, G=64 1.03-1.07), nor with SiLU, whose apply
// is bound by arithmetic (128x256x28x28 1.07-1.09, 32x512x56x56 0.97-1.04), nor in
// place (bench, one thread, ratio to the in-place reference 0.79-0.82 -> 0.67-0.69 at
// 128x256x28x28: the output's write-backs compete with the next group's reads).
// Groups up to kChainedUnitBytes chain from memory too, whatever the tensor's size and
// activation, their output streamed (kernels::ApplyNormPlanesThenMoments): one thread,
// time chained / statistics-then-output, 128x256x14x14 G=32 (6 KiB groups, 25 MiB) 0.83,
// with SiLU 0.80; 256x256x14x14 G=32 (49 MiB) 0.75.
constexpr int64_t kChainedFromMemoryBytes = int64_t{48} << 20;
constexpr int64_t kChainedFromMemoryUnitBytes = kFusedUnitBytes;

// Channels-first groups up to this size go in batches of up to kUnitBatchBytes:
// statistics of every group of the batch, then their parameters, then one output
// pass over the batch. In a chain (above) each group's fixed costs (pivot,
// reductions, the divisions and square root of its parameters) stand between its
// statistics and its output; in a batch they are independent and the core overlaps
// them. One thread, 1x256x14x14 NCHW, ratio to memcpy (C driver, 2 runs): G=64 (3 KiB
// groups) 0.46-0.48 chained, 0.54-0.55 batched; G=128 0.42-0.43 -> 0.43-0.44; with
// 8 KiB batches 0.47-0.50 and 0.42-0.43. 6 KiB groups (G=32) gained nothing batched.
constexpr int64_t kBatchedUnitBytes = int64_t{4} << 10;
constexpr int64_t kUnitBatchBytes = int64_t{16} << 10;
// A batch holds a multiple of this many units where it holds more: the statistics
// take a vector's worth of groups at a time (16 on AVX-512), and a batch of 20 left
// a last vector of 4 (1x256x14x14 instance norm, one thread: 8.4 -> 7.9 us).
constexpr int64_t kUnitBatchMultiple = 16;

}  // namespace cpu
}  // namespace normkit

#endif  // NORMKIT_CPU_GROUP_NORM_H_
