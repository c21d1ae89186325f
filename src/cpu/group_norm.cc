// SPDX-License-Identifier: Apache-2.0
#include "cpu/group_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/aligned_array.h"
#include "core/exact_stats.h"
#include "core/parallel.h"
#include "cpu/memory_plan.h"
#include "hwy/cache_control.h"

namespace normkit {
namespace cpu {
namespace {

using kernels::Moments;

// The work of one group-norm call. A unit is what one group's statistics need:
// the group itself (channels-first, contiguous) or the whole sample (channels-last,
// where a group is strided across every row). Units split into statistics blocks.
struct GroupNormPlan {
  // x and y in their storage (float32, bfloat16, float16): the kernels load x's elements
  // widened to float and store y's rounded, so a half x gets the float32 plan's bits for
  // its values without a float copy of it.
  const char* x;
  char* y;
  kernels::Storage x_storage, y_storage;
  int64_t N, C, S, G, Cg;
  bool channels_last;
  bool stream;
  // x larger than the last-level cache: its rows come from DRAM (even a fused unit's
  // second read: measured, the apply's row streams beat its L1 tiles there too).
  bool from_memory;
  GroupNormArgs args;
  int64_t units;
  int64_t unit_elems;
  int64_t block_rows;   // channels-last: rows (spatial positions) per block
  int64_t block_elems;  // elements per block (the last block of a unit may be shorter)
  int64_t blocks;       // per unit
  int64_t unit_groups;  // groups whose moments a block yields: 1, or G channels-last

  // Scratch, sized before any output is written.
  std::vector<Moments> partial;  // [unit][block][unit_groups]
  // Groups' means, then their rstds: batched units' ([unit]), channels-last instance
  // norm's ([N][C]).
  std::unique_ptr<double[]> unit_stats;
  // The apply pass's parameters, [N][C] each, each array from a cache line (the
  // channels-last output pass loads three a vector: see core/aligned_array.h).
  AlignedArray<float> parameters;
  float* mean;
  float* scale;
  float* shift;
  // Channels-last statistics scratch of each run when C is too large for the stack,
  // allocated here so that no parallel loop allocates (an exception may not leave an
  // OpenMP region).
  AlignedArray<float> scratch_floats;
  AlignedArray<double> scratch_doubles;
};

// Element `at` of x, and of y.
const void* InputAt(const GroupNormPlan& p, int64_t at) {
  return p.x + at * kernels::StorageBytes(p.x_storage);
}

void* OutputAt(const GroupNormPlan& p, int64_t at) {
  return p.y + at * kernels::StorageBytes(p.y_storage);
}

// Scratch of the channels-last statistics (C values each; run: 2C): on the stack of
// BlockStats, or one run's share of the plan's buffers.
using ChannelScratch = kernels::ColumnScratch;

// Up to this many channels the scratch is on the stack (14 KiB): two allocations a
// call measured 0.1-0.2 us of a 6-7 us 1x256x14x14 group norm.
constexpr int64_t kStackScratchChannels = 512;

// Scratch views over floats[3C] and doubles[2C].
ChannelScratch ScratchIn(float* f, double* d, int64_t channels) {
  const size_t C = static_cast<size_t>(channels);
  return {f, f + C, d, d + C};
}

// Run `run`'s channels-last scratch: the stack arrays (3 and 2 * kStackScratchChannels)
// or, for wider rows, the run's share of the plan's buffers.
ChannelScratch ScratchOfRun(GroupNormPlan& p, int64_t run, float* stack_floats,
                            double* stack_doubles) {
  if (p.C <= kStackScratchChannels) return ScratchIn(stack_floats, stack_doubles, p.C);
  const size_t at = static_cast<size_t>(run * p.C);
  return ScratchIn(p.scratch_floats.get() + 3 * at, p.scratch_doubles.get() + 2 * at, p.C);
}

Moments* PartialOf(GroupNormPlan& p, int64_t unit, int64_t block) {
  return &p.partial[static_cast<size_t>((unit * p.blocks + block) * p.unit_groups)];
}

// Moments of block `k` of unit `u` into its own partial slots; `run`: the scratch
// of the run of blocks it is part of.
void BlockStats(GroupNormPlan& p, int64_t u, int64_t k, int64_t run) {
  Moments* out = PartialOf(p, u, k);
  const int64_t begin = k * p.block_elems;
  const int64_t len = std::min(p.block_elems, p.unit_elems - begin);
  const void* xb = InputAt(p, u * p.unit_elems + begin);
  if (!p.channels_last) {
    out[0] = kernels::SpanMoments(xb, p.x_storage, len);
    return;
  }
  const int64_t r0 = k * p.block_rows;
  const int64_t rows = std::min(p.block_rows, p.S - r0);
  if (p.G == 1) {
    out[0] = kernels::SpanMoments(xb, p.x_storage, rows * p.C);
    return;
  }
  alignas(64) float stack_floats[3 * kStackScratchChannels];
  alignas(64) double stack_doubles[2 * kStackScratchChannels];
  const ChannelScratch s = ScratchOfRun(p, run, stack_floats, stack_doubles);
  kernels::ColumnBlockMoments(xb, p.x_storage, rows, p.C, p.G,
                              PivotSamples(rows, p.Cg, p.from_memory), p.from_memory, s, out);
}

// From a group's mean and reciprocal standard deviation: the optional mean / rstd
// outputs (at `at`), and the apply pass's parameters of its channels [c0, c1)
// (params + c: the sample's row). The arrays are disjoint (the API rejects mean_out /
// rstd_out overlapping gamma or beta; the parameters are the plan's): saying so drops
// the compiler's alias checks and the loop versions they select between.
inline void ChannelParameters(double group_mean, double rstd, const GroupNormArgs& args, int64_t at,
                              int64_t c0, int64_t c1, float* __restrict mean,
                              float* __restrict scale, float* __restrict shift) {
  const float* __restrict gamma_in = args.gamma;
  const float* __restrict beta_in = args.beta;
  if (args.mean) args.mean[at] = static_cast<float>(group_mean);
  if (args.rstd) args.rstd[at] = static_cast<float>(rstd);
  // The apply pass subtracts the float nearest the mean and folds the rest of it
  // (group_mean - mean_f, below float resolution) into the shift.
  const float mean_f = static_cast<float>(group_mean);
  const double residual = group_mean - static_cast<double>(mean_f);
  for (int64_t c = c0; c < c1; ++c) {
    const double gamma = gamma_in ? static_cast<double>(gamma_in[c]) : 1.0;
    const double beta = beta_in ? static_cast<double>(beta_in[c]) : 0.0;
    const float sc = static_cast<float>(gamma * rstd);
    mean[c] = mean_f;
    scale[c] = sc;
    shift[c] = static_cast<float>(beta - residual * static_cast<double>(sc));
  }
}

// Group g of sample n's mean and rstd: the fast ones, or where they do not hold (a sum
// past FLT_MAX, a NaN or Inf: core/exact_stats.h) the exact ones, from x, which no
// plan has overwritten when its group's parameters are made.
MeanRstd GroupMeanRstd(const GroupNormPlan& p, int64_t n, int64_t g, double mean, double rstd) {
  if (FastStatisticsHold(mean, rstd)) return {mean, rstd};
  const int64_t first = p.channels_last ? n * p.S * p.C + g * p.Cg : (n * p.C + g * p.Cg) * p.S;
  const auto value = [&](int64_t i) { return kernels::ElementAt(p.x, p.x_storage, first + i); };
  if (p.channels_last) return ExactMeanRstdOf(value, p.S, p.Cg, p.C, p.args.eps, false);
  return ExactMeanRstdOf(value, 1, p.Cg * p.S, 0, p.args.eps, false);
}

// Group g of sample n's parameters (in the sample's rows mean / scale / shift) from its
// merged moments.
inline void GroupParameters(const GroupNormPlan& p, const Moments& m, int64_t n, int64_t g,
                            float* mean, float* scale, float* shift) {
  const MeanRstd s = GroupMeanRstd(p, n, g, m.mean, kernels::ReciprocalStd(m, p.args.eps));
  ChannelParameters(s.mean, s.rstd, p.args, n * p.G + g, g * p.Cg, (g + 1) * p.Cg, mean, scale,
                    shift);
}

// Instance norm's `count` channels from flat channel nc on (within one sample): their
// statistics made exact where the fast ones do not hold.
void CheckChannelStats(const GroupNormPlan& p, int64_t nc, int64_t count, double* mean,
                       double* rstd) {
  for (int64_t i = 0; i < count; ++i) {
    if (FastStatisticsHold(mean[i], rstd[i])) continue;
    const MeanRstd s = GroupMeanRstd(p, (nc + i) / p.C, (nc + i) % p.C, mean[i], rstd[i]);
    mean[i] = s.mean;
    rstd[i] = s.rstd;
  }
}

// Instance norm (groups of one channel): the parameters of the `count` channels from
// flat channel `nc` = n * C + c on (within one sample), from their groups' means and
// rstds, and the optional outputs.
void InstanceNormParameters(GroupNormPlan& p, int64_t nc, int64_t count, const double* mean,
                            const double* rstd) {
  const GroupNormArgs& args = p.args;
  const int64_t c = nc % p.C;
  kernels::ChannelParametersEach(mean, rstd, args.gamma ? args.gamma + c : nullptr,
                                 args.beta ? args.beta + c : nullptr, count, &p.mean[nc],
                                 &p.scale[nc], &p.shift[nc]);
  for (int64_t i = 0; i < count && args.mean; ++i) args.mean[nc + i] = static_cast<float>(mean[i]);
  for (int64_t i = 0; i < count && args.rstd; ++i) args.rstd[nc + i] = static_cast<float>(rstd[i]);
}

// Channels-last instance norm of sample u in one statistics block: its channels'
// statistics and parameters, vectorized across channels (BlockStats' and FinishUnit's
// per-group loops, a division or a square root a channel each, took over 40% of
// 1x1024x7x7 NHWC). The same bits as those loops.
void InstanceNormSampleRows(GroupNormPlan& p, int64_t u, int64_t run) {
  alignas(64) float stack_floats[3 * kStackScratchChannels];
  alignas(64) double stack_doubles[2 * kStackScratchChannels];
  const ChannelScratch s = ScratchOfRun(p, run, stack_floats, stack_doubles);
  double* mean = p.unit_stats.get() + u * p.C;
  double* rstd = mean + p.N * p.C;
  kernels::ColumnMeanRstd(InputAt(p, u * p.unit_elems), p.x_storage, p.S, p.C,
                          PivotSamples(p.S, 1, p.from_memory), p.args.eps, p.from_memory, s.pivot,
                          s.s1, s.s2, s.run, mean, rstd);
  CheckChannelStats(p, u * p.C, p.C, mean, rstd);
  InstanceNormParameters(p, u * p.C, p.C, mean, rstd);
}

// Merges unit u's block moments in block order and finishes its groups: unit u is
// sample n's group g (channels-first), or sample u's groups (channels-last).
// The moments of group j of unit u: its blocks' merged in block order.
Moments MergedBlocks(GroupNormPlan& p, int64_t u, int64_t j) {
  Moments m;
  for (int64_t k = 0; k < p.blocks; ++k) m = kernels::MergeMoments(m, PartialOf(p, u, k)[j]);
  return m;
}

void FinishUnit(GroupNormPlan& p, int64_t u) {
  const int64_t n = p.channels_last ? u : u / p.G;
  const size_t row = static_cast<size_t>(n * p.C);
  for (int64_t j = 0; j < p.unit_groups; ++j) {
    const int64_t g = p.channels_last ? j : u % p.G;
    GroupParameters(p, MergedBlocks(p, u, j), n, g, &p.mean[row], &p.scale[row], &p.shift[row]);
  }
}

// Normalizes elements [begin, end) of unit u (channels-last: whole rows).
void ApplyRange(const GroupNormPlan& p, int64_t u, int64_t begin, int64_t end) {
  const int64_t off = u * p.unit_elems + begin;
  const auto act = static_cast<Activation>(p.args.activation);
  if (p.channels_last) {
    const size_t nc = static_cast<size_t>(u * p.C);
    const kernels::NormRows rows{&p.mean[nc], &p.scale[nc], &p.shift[nc]};
    kernels::ApplyNormRows(InputAt(p, off), p.x_storage, OutputAt(p, off), p.y_storage,
                           (end - begin) / p.C, p.C, rows, act, p.stream, p.from_memory);
    return;
  }
  // Channels-first: unit u is group g of sample n, channels g * Cg.. contiguous.
  const int64_t n = u / p.G, g = u % p.G;
  const size_t nc = static_cast<size_t>(n * p.C + g * p.Cg + begin / p.S);
  kernels::ApplyNormGroupPlanes(InputAt(p, off), p.x_storage, OutputAt(p, off), p.y_storage,
                                end - begin, p.S, begin % p.S, p.mean[nc], &p.scale[nc],
                                &p.shift[nc], act, p.stream);
}

// Channels-first: units [u0, u1) (contiguous, as are their channels' parameters) in
// three steps: the statistics of each, the parameters of each, one output pass.
void BatchOfUnits(GroupNormPlan& p, int64_t u0, int64_t u1) {
  double* group_mean = p.unit_stats.get() + u0;
  double* group_rstd = group_mean + p.units;
  const void* xb = InputAt(p, u0 * p.unit_elems);
  kernels::SpanMeanRstdEach(xb, p.x_storage, p.unit_elems, u1 - u0, p.args.eps, group_mean,
                            group_rstd);
  if (p.Cg == 1) {
    CheckChannelStats(p, u0, u1 - u0, group_mean, group_rstd);
  } else {
    for (int64_t u = u0; u < u1; ++u) {
      const MeanRstd s = GroupMeanRstd(p, u / p.G, u % p.G, group_mean[u - u0], group_rstd[u - u0]);
      group_mean[u - u0] = s.mean;
      group_rstd[u - u0] = s.rstd;
    }
  }
  // The plan's fields in locals and n, g counted along (FinishUnit's general loops
  // took a third of the instructions of 1x1024x7x7 instance norm).
  const GroupNormArgs args = p.args;
  const int64_t C = p.C, Cg = p.Cg, G = p.G;
  float *mean = p.mean, *scale = p.scale, *shift = p.shift;
  if (Cg == 1) {
    // Instance norm: unit u is channel u of the [N][C] parameters; vectorized per
    // sample (one ChannelParameters call a channel took a sixth of 1x1024x7x7's time).
    for (int64_t u = u0; u < u1;) {
      const int64_t end = std::min(u1, u - u % C + C);
      InstanceNormParameters(p, u, end - u, group_mean + (u - u0), group_rstd + (u - u0));
      u = end;
    }
  } else {
    for (int64_t u = u0, n = u0 / G, g = u0 % G; u < u1; ++u) {
      ChannelParameters(group_mean[u - u0], group_rstd[u - u0], args, u, g * Cg, (g + 1) * Cg,
                        mean + n * C, scale + n * C, shift + n * C);
      if (++g == G) g = 0, ++n;
    }
  }
  const int64_t off = u0 * p.unit_elems, nc = u0 * Cg;  // units' channels are consecutive
  kernels::ApplyNormPlanes(xb, p.x_storage, OutputAt(p, off), p.y_storage, (u1 - u0) * p.unit_elems,
                           p.S, 0, mean + nc, scale + nc, shift + nc,
                           static_cast<Activation>(args.activation), p.stream);
}

// Channels-first, float32 y: normalizes block k of unit u and returns the moments of
// block k of unit u + 1 (BlockStats' bits).
Moments ApplyBlockThenNextMoments(const GroupNormPlan& p, int64_t u, int64_t k) {
  const int64_t n = u / p.G, g = u % p.G;
  const int64_t begin = k * p.block_elems;
  const int64_t len = std::min(p.block_elems, p.unit_elems - begin);
  const int64_t off = u * p.unit_elems + begin;
  const size_t nc = static_cast<size_t>(n * p.C + g * p.Cg + begin / p.S);
  return kernels::ApplyNormPlanesThenMoments(
      InputAt(p, off), p.x_storage, reinterpret_cast<float*>(p.y) + off, len, p.S, begin % p.S,
      p.mean[nc], &p.scale[nc], &p.shift[nc], static_cast<Activation>(p.args.activation), p.stream,
      InputAt(p, off + p.unit_elems));
}

}  // namespace

void GroupNorm(const normkit_context& context, const TensorView& x, const TensorView& y,
               const GroupNormArgs& args) {
  GroupNormPlan p;
  p.x_storage = kernels::StorageOf(x.dtype);
  p.y_storage = kernels::StorageOf(y.dtype);
  p.x = static_cast<const char*>(x.data);
  p.y = static_cast<char*>(y.data);
  p.N = x.batch;
  p.C = x.channels;
  p.S = x.spatial;
  p.G = args.groups;
  p.Cg = p.C / p.G;
  p.channels_last = x.channels_last() && p.S > 1;  // with one position both layouts agree
  p.stream = x.data != y.data && y.bytes >= kStreamingStoreBytes;
  // The plan (which fixes the bits) from x's float32 size: a half x gets the bits of its
  // values stored as float32.
  const int64_t x_float_bytes = x.numel * static_cast<int64_t>(sizeof(float));
  p.from_memory = x_float_bytes >= kStreamingStoreBytes;
  p.args = args;
  if (p.channels_last) {
    p.units = p.N;
    p.unit_elems = p.C * p.S;
    p.block_rows = ChannelsLastBlockRows(p.S, p.C, p.from_memory);
    p.block_elems = p.block_rows * p.C;
    p.blocks = (p.S + p.block_rows - 1) / p.block_rows;
    p.unit_groups = p.G;
    if (!p.from_memory && p.unit_elems * int64_t{sizeof(float)} <= kOneBlockSampleBytes) {
      p.block_rows = p.S;
      p.block_elems = p.unit_elems;
      p.blocks = 1;
    }
  } else {
    p.units = p.N * p.G;
    p.unit_elems = p.Cg * p.S;
    p.block_rows = 0;
    p.block_elems = kStatsBlockElems;
    p.blocks = (p.unit_elems + p.block_elems - 1) / p.block_elems;
    p.unit_groups = 1;
  }
  const size_t nc = static_cast<size_t>(p.N * p.C);
  const size_t stride = AlignedCount<float>(nc);
  p.parameters = AllocateAligned<float>(3 * stride);
  p.mean = p.parameters.get();
  p.scale = p.mean + stride;
  p.shift = p.scale + stride;

  // A fused SiLU costs several times the memory traffic in arithmetic (its
  // exponential), so a second thread pays off at a quarter of the bytes: 1x256x14x14
  // G=32 + SiLU, 2 threads, went from 0.11-0.14 to 0.21-0.28 of a 2-thread memcpy.
  // Without it, from affine's threshold: 1x256x14x14 G=32 NCHW at 2 threads, against
  // kMinParallelBytes (4 rounds alternating builds, medians), 0.41 -> 0.47 of a 2-thread
  // memcpy out of place, 0.35 -> 0.47 in place; NHWC unchanged (0.32).
  const int64_t traffic = x.bytes * (args.activation == NORMKIT_ACTIVATION_SILU ? 8 : 2);
  const normkit_context& ctx = ContextForBytes(context, traffic, kMinParallelAffineBytes);
  const int64_t unit_bytes = p.unit_elems * static_cast<int64_t>(sizeof(float));
  if (!p.channels_last && unit_bytes <= kBatchedUnitBytes) {
    // Batches fixed by the shape; each thread takes a contiguous run of them.
    int64_t per_batch = std::max<int64_t>(1, kUnitBatchBytes / unit_bytes);
    if (per_batch > kUnitBatchMultiple) per_batch -= per_batch % kUnitBatchMultiple;
    const int64_t batches = (p.units + per_batch - 1) / per_batch;
    const int64_t batch_runs = std::min<int64_t>(ctx.num_threads, batches);
    p.unit_stats.reset(new double[static_cast<size_t>(2 * p.units)]);
    ParallelFor(ctx, batch_runs, [&](int64_t t) {
      const int64_t end = (t + 1) * batches / batch_runs;
      for (int64_t b = t * batches / batch_runs; b < end; ++b) {
        BatchOfUnits(p, b * per_batch, std::min(p.units, (b + 1) * per_batch));
      }
    });
    return;
  }
  p.partial.resize(static_cast<size_t>(p.units * p.blocks * p.unit_groups));
  // Block moments are merged in the same order whichever way the work is split, so
  // the choices below (which do look at the threads) never change a result bit.
  const bool chained_from_memory = p.stream && x.bytes >= kChainedFromMemoryBytes &&
                                   args.activation != NORMKIT_ACTIVATION_SILU &&
                                   unit_bytes <= kChainedFromMemoryUnitBytes;
  // Chains read the next group while writing a float32 y.
  const bool float_y = p.y_storage == kernels::Storage::kFloat32;
  const bool chained = float_y && !p.channels_last && p.units >= 2 * ctx.num_threads &&
                       (unit_bytes <= kChainedUnitBytes || chained_from_memory);
  const bool fused =
      !chained && unit_bytes <= kFusedUnitBytes && (p.units >= ctx.num_threads || p.blocks == 1);
  // Runs: each thread's contiguous share of the units (fused) or of a unit's blocks.
  const int64_t runs = std::min<int64_t>(ctx.num_threads, fused ? p.units : p.blocks);
  // Run t takes items [run_start(t), run_start(t + 1)): ceil(items / runs) each, as
  // OpenMP's static split of the blocks did before, so the calling thread, which
  // starts first, gets the larger share.
  const auto run_start = [runs](int64_t items, int64_t t) {
    return std::min(items, t * ((items + runs - 1) / runs));
  };
  if (p.channels_last && p.C > kStackScratchChannels) {
    const size_t floats = static_cast<size_t>(runs * p.C);
    p.scratch_floats = AllocateAligned<float>(3 * floats);
    p.scratch_doubles = AllocateAligned<double>(2 * floats);
  }
  if (chained) {
    // A chain's first group has statistics of its own; each other group's come from
    // the output pass of the one before it, block by block, to the same bits.
    // n, g counted along, as in BatchOfUnits: through FinishUnit's general loops,
    // 1x256x14x14 G=32 took 3-5% longer (one thread, same-process A/B).
    const int64_t chains = ctx.num_threads;
    ParallelFor(ctx, chains, [&](int64_t t) {
      const int64_t first = t * p.units / chains, end = (t + 1) * p.units / chains;
      for (int64_t k = 0; k < p.blocks; ++k) BlockStats(p, first, k, 0);
      for (int64_t u = first, n = first / p.G, g = first % p.G; u < end; ++u) {
        const size_t row = static_cast<size_t>(n * p.C);
        GroupParameters(p, MergedBlocks(p, u, 0), n, g, &p.mean[row], &p.scale[row], &p.shift[row]);
        if (++g == p.G) g = 0, ++n;
        if (u + 1 == end) {
          ApplyRange(p, u, 0, p.unit_elems);
        } else {
          for (int64_t k = 0; k < p.blocks; ++k) {
            *PartialOf(p, u + 1, k) = ApplyBlockThenNextMoments(p, u, k);
          }
        }
      }
    });
    return;
  }
  if (fused && p.channels_last && p.Cg == 1 && p.blocks == 1) {
    p.unit_stats.reset(new double[static_cast<size_t>(2 * p.N * p.C)]);
    ParallelFor(ctx, runs, [&](int64_t t) {
      for (int64_t u = run_start(p.units, t); u < run_start(p.units, t + 1); ++u) {
        InstanceNormSampleRows(p, u, t);
        ApplyRange(p, u, 0, p.unit_elems);
      }
    });
    return;
  }
  if (fused) {
    ParallelFor(ctx, runs, [&](int64_t t) {
      for (int64_t u = run_start(p.units, t); u < run_start(p.units, t + 1); ++u) {
        // A fused unit is read from memory once, then normalized from cache.
        for (int64_t k = 0; k < p.blocks; ++k) BlockStats(p, u, k, t);
        FinishUnit(p, u);
        ApplyRange(p, u, 0, p.unit_elems);
      }
    });
    return;
  }
  for (int64_t u = 0; u < p.units; ++u) {
    ParallelFor(ctx, runs, [&](int64_t t) {
      for (int64_t k = run_start(p.blocks, t); k < run_start(p.blocks, t + 1); ++k) {
        BlockStats(p, u, k, t);
      }
    });
    FinishUnit(p, u);
    // The same runs: each thread writes the blocks it read (in place, a block read
    // on another core cost 2 threads a third of their speed, 1x64x56x56 G=32 NHWC).
    ParallelFor(ctx, runs, [&](int64_t t) {
      // (A ceil split may leave the last runs empty.)
      const int64_t begin = std::min(p.unit_elems, run_start(p.blocks, t) * p.block_elems);
      const int64_t end = std::min(p.unit_elems, run_start(p.blocks, t + 1) * p.block_elems);
      if (begin < end) ApplyRange(p, u, begin, end);
    });
  }
}

// Layer and RMS norm batch the statistics of rows of up to kBatchedRowFloats floats in
// tensors of up to kBatchedRowsMaxBytes, kMaxRowBatch rows at most (their means and
// rstds are on the stack). Layer norm, same-process A/B against row by row, one thread,
// time ratio: 4096x64 0.50, 4096x256 0.65-0.67, 1024x200 0.63, 1024x384 0.73, 2048x512
// (4 MiB) 0.80-0.83; but 4096x512 (8 MiB, from memory) 1.35-1.7. Rows of 768 and 2048
// floats (batches of 5 and 2, through TwoSpansMoments) gained nothing or lost: 128x768
// 1.0, 256x2048 1.12. RMS norm: 4096x64 0.58, 4096x128 0.67-0.71, 2048x512 0.89-0.91.
constexpr int64_t kBatchedRowFloats = 512;
constexpr int64_t kBatchedRowsMaxBytes = int64_t{4} << 20;
constexpr int64_t kMaxRowBatch = 256;
// Rows longer than this (and made in no scratch) are normalized a task's rows at a time:
// see RowNorm.
constexpr int64_t kBlockedRowFloats = 1024;

// gamma and beta as the row loops load them, a vector a row position: the caller's
// arrays where they start on a cache line, else aligned copies in `storage` (a NumPy
// array of 768 floats starts 16 bytes past one, and every load of it then splits
// across two lines: layer norm [4096, 768], one thread, took 1.11 times as long).
struct RowParameters {
  const float* gamma;
  const float* beta;
  AlignedArray<float> storage;
};

RowParameters AlignedRowParameters(const float* gamma, const float* beta, int64_t D) {
  const auto aligned = [](const float* p) {
    return p == nullptr || reinterpret_cast<uintptr_t>(p) % kArrayAlign == 0;
  };
  RowParameters r{gamma, beta, {}};
  if (aligned(gamma) && aligned(beta)) return r;
  const size_t stride = AlignedCount<float>(static_cast<size_t>(D));  // beta's copy: a new line
  r.storage = AllocateAligned<float>(2 * stride);
  if (gamma) r.gamma = std::copy(gamma, gamma + D, r.storage.get()) - D;
  if (beta) r.beta = std::copy(beta, beta + D, r.storage.get() + stride) - D;
  return r;
}

void RowNorm(const normkit_context& context, const TensorView& x, const TensorView& y,
             const RowNormArgs& args, const RowResidual* residual) {
  const kernels::Storage xs = kernels::StorageOf(x.dtype), ys = kernels::StorageOf(y.dtype);
  const int64_t y_elem = kernels::StorageBytes(ys);
  const auto* xd = static_cast<const char*>(x.data);
  auto* yd = static_cast<char*>(y.data);
  const int64_t rows = x.batch;
  const int64_t D = x.numel / rows;
  const RowParameters params = AlignedRowParameters(args.gamma, args.rms ? nullptr : args.beta, D);
  const bool add = residual != nullptr;
  // y streams past the cache where it could not stay there anyway: y of at least
  // kStreamingStoreBytes, or (the fused add) x, residual, y and h together at least twice
  // that. Else on [4096, 768] the fused op's y and h (12 MiB each, 50 MB in all) were
  // plain stores, each line read before it was written: 0.64-0.87 of a copy of its
  // bytes, one and two threads. Outputs on an input are in cache: plain stores.
  const bool y_apart = x.data != y.data && !(add && residual->residual == y.data);
  const int64_t footprint = (add ? 2 : 1) * (x.bytes + y.bytes);
  const bool stream = y_apart && (y.bytes >= kStreamingStoreBytes ||
                                  (add && footprint >= 2 * kStreamingStoreBytes));
  // h likewise, when it is apart from x and residual: made in the worker's L1 scratch,
  // normalized from there and streamed out (written in place it would be read first).
  const bool stream_h = stream && add && residual->h != nullptr && residual->h != x.data &&
                        residual->h != residual->residual;
  const int64_t rows_per_task = std::max<int64_t>(1, (int64_t{1} << 15) / D);
  const int64_t tasks = (rows + rows_per_task - 1) / rows_per_task;
  // The fused add reads residual and may write h: twice the bytes of x and y.
  const normkit_context& ctx =
      ContextForBytes(context, (residual != nullptr ? 2 : 1) * (x.bytes + y.bytes));
  // The rows the statistics and outputs are made from: x in its storage (the kernels
  // widen a half x as they load it), or with the fused residual add h = x + residual,
  // stored as x is (so that y is the norm of the h the caller gets), made into h itself
  // when the caller wants it, else into the worker's L1 scratch (also where a streamed h
  // is made): x and residual read once, h normalized from cache.
  const kernels::Storage rs = xs;
  const int64_t row_bytes = D * kernels::StorageBytes(rs);
  // Row r's scales (and its optional mean / rstd outputs) from its values xr (stored as
  // rs), its mean (0 for RMS norm) and rstd.
  const auto row_scales = [&](int64_t r, const char* xr, double mean, double rstd, float* mean_f,
                              float* rstd_f, float* offset) {
    if (!FastStatisticsHold(mean, rstd)) {
      const auto value = [xr, rs](int64_t i) { return kernels::ElementAt(xr, rs, i); };
      const MeanRstd exact = ExactMeanRstdOf(value, 1, D, 0, args.eps, args.rms);
      mean = exact.mean;
      rstd = exact.rstd;
    }
    if (args.mean && !args.rms) args.mean[r] = static_cast<float>(mean);
    if (args.rstd) args.rstd[r] = static_cast<float>(rstd);
    // As in group norm: subtract the float nearest the mean, fold the residual
    // into an offset added before gamma.
    *mean_f = static_cast<float>(mean);
    *rstd_f = static_cast<float>(rstd);
    *offset = static_cast<float>(-(mean - static_cast<double>(*mean_f)) * *rstd_f);
  };
  // Row r's outputs from its values xr, its mean and rstd.
  const auto apply_row = [&](int64_t r, const char* xr, double mean, double rstd) {
    float mean_f, rstd_f, offset;
    row_scales(r, xr, mean, rstd, &mean_f, &rstd_f, &offset);
    kernels::ApplyRowNorm(xr, rs, yd + r * D * y_elem, ys, D, mean_f, rstd_f, offset, params.gamma,
                          params.beta, stream);
  };
  // A cache-resident tensor of short rows: the statistics of a batch of rows side by
  // side (kernels::SpanMeanRstdEach / SpanRmsEach), then the batch's outputs. Row by
  // row, each row's chain of reductions, divisions and square root (about 40 ns for
  // layer norm) was most of the time of short rows.
  const bool batched = D <= kBatchedRowFloats && x.bytes <= kBatchedRowsMaxBytes;
  const int64_t D_bytes = D * static_cast<int64_t>(sizeof(float));
  int64_t batch_rows = std::clamp<int64_t>(kUnitBatchBytes / D_bytes, 1, kMaxRowBatch);
  if (batch_rows > kUnitBatchMultiple) batch_rows -= batch_rows % kUnitBatchMultiple;
  const bool use_scratch = add && (residual->h == nullptr || stream_h);
  // Rows longer than kBlockedRowFloats (and made in no scratch): a task's rows'
  // statistics first, then their outputs in one call, which walks columns across the
  // rows so that gamma and beta stay in L1 (kernels::ApplyRowNorms), and past the cache
  // prefetches the rows read next as it writes these.
  const bool blocked = !batched && D > kBlockedRowFloats && !use_scratch;
  static_assert((int64_t{1} << 15) / kBlockedRowFloats <= kMaxRowBatch, "a task's rows fit");
  const int64_t scratch_floats = use_scratch ? (batched ? batch_rows : 1) * D : 0;  // >= h's
  const int64_t workers = use_scratch ? ParallelWorkers(ctx, tasks) : 0;
  std::vector<AlignedArray<float>> scratch(static_cast<size_t>(workers));
  for (auto& s : scratch) s = AllocateAligned<float>(static_cast<size_t>(scratch_floats));
  // The values of rows [r, r + count): x's, or h made from them.
  const auto rows_of = [&](int64_t r, int64_t count, int64_t worker) -> const char* {
    if (!add) return xd + r * row_bytes;
    const char* x_rows = xd + r * row_bytes;
    const char* r_rows = static_cast<const char*>(residual->residual) + r * row_bytes;
    char* h_out = static_cast<char*>(residual->h);
    char* h = h_out != nullptr && !stream_h
                  ? h_out + r * row_bytes
                  : reinterpret_cast<char*>(scratch[static_cast<size_t>(worker)].get());
    for (int64_t k = 0; k < count; ++k) {
      kernels::ResidualAdd(x_rows + k * row_bytes, r_rows + k * row_bytes, rs, residual->bias, D,
                           h + k * row_bytes);
    }
    if (stream_h) {  // fenced at the end of the task
      kernels::CopyElements(h, rs, count * D, h_out + r * row_bytes, true);
    }
    return h;
  };
  const auto run_rows = [&](int64_t task, int64_t worker) {
    const int64_t r0 = task * rows_per_task;
    const int64_t r_end = std::min(rows, r0 + rows_per_task);
    if (batched) {
      double mean[kMaxRowBatch], rstd[kMaxRowBatch];
      for (int64_t b0 = r0; b0 < r_end; b0 += batch_rows) {
        const int64_t b1 = std::min(r_end, b0 + batch_rows);
        const char* xb = rows_of(b0, b1 - b0, worker);
        if (args.rms) {
          kernels::SpanRmsEach(xb, rs, D, b1 - b0, args.eps, rstd);
        } else {
          kernels::SpanMeanRstdEach(xb, rs, D, b1 - b0, args.eps, mean, rstd);
        }
        for (int64_t r = b0; r < b1; ++r) {
          apply_row(r, xb + (r - b0) * row_bytes, args.rms ? 0.0 : mean[r - b0], rstd[r - b0]);
        }
      }
      return;
    }
    const int64_t elem = kernels::StorageBytes(rs);
    // The mean (0 for RMS norm) and rstd of the row at xr.
    const auto statistics = [&](const char* xr, double* mean, double* rstd) {
      double ms;
      *mean = 0.0;
      if (args.rms) {
        double sum = 0.0;
        for (int64_t b = 0; b < D; b += kStatsBlockElems) {
          sum += kernels::SpanSumSquares(xr + b * elem, rs, std::min(kStatsBlockElems, D - b));
        }
        ms = sum / static_cast<double>(D);
      } else {
        Moments m;
        for (int64_t b = 0; b < D; b += kStatsBlockElems) {
          m = kernels::MergeMoments(
              m, kernels::RowMoments(xr + b * elem, rs, std::min(kStatsBlockElems, D - b)));
        }
        ms = m.m2 / m.count;
        *mean = m.mean;
      }
      *rstd = 1.0 / std::sqrt(ms + static_cast<double>(args.eps));
    };
    if (blocked) {
      const int64_t count = r_end - r0;
      const char* xb = rows_of(r0, count, worker);
      float mean_f[kMaxRowBatch], rstd_f[kMaxRowBatch], offset[kMaxRowBatch];
      for (int64_t k = 0; k < count; ++k) {
        double mean, rstd;
        statistics(xb + k * row_bytes, &mean, &rstd);
        row_scales(r0 + k, xb + k * row_bytes, mean, rstd, &mean_f[k], &rstd_f[k], &offset[k]);
      }
      // Past the cache, the rows read next (this thread's, mostly: tasks are split in
      // contiguous runs) are fetched into L2 while these rows are written.
      const int64_t ahead = stream && !add ? std::min(count, rows - r_end) : 0;
      kernels::ApplyRowNorms(xb, rs, yd + r0 * D * y_elem, ys, count, D,
                             kernels::RowScales{mean_f, rstd_f, offset}, params.gamma, params.beta,
                             stream, xd + r_end * row_bytes, ahead);
      return;
    }
    for (int64_t r = r0; r < r_end; ++r) {
      const char* xr = rows_of(r, 1, worker);
      double mean, rstd;
      statistics(xr, &mean, &rstd);
      apply_row(r, xr, mean, rstd);
    }
  };
  const auto run_task = [&](int64_t task, int64_t worker) {
    run_rows(task, worker);
    if (stream_h) hwy::FlushStream();  // this thread's streamed h
  };
  if (use_scratch) {
    ParallelForWorkers(ctx, tasks, run_task);
  } else {
    ParallelFor(ctx, tasks, [&](int64_t task) { run_task(task, 0); });
  }
}

}  // namespace cpu
}  // namespace normkit
