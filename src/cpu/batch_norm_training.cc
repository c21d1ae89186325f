// SPDX-License-Identifier: Apache-2.0
// CPU batch norm in training mode. Two passes over x: block moments (channels-first: a
// block of one channel plane; channels-last: per-channel column moments of a block of
// rows), merged per channel in block order into double mean / variance; then the
// group-norm apply kernels with each channel's mean, scale and shift (the mean
// subtracted first, so a mean far from the spread loses nothing to a fold). x and y in any
// storage pair: the kernels widen half x as they load it and round half y as they store
// it, and the plan is the float32 call's (from the shape alone), so a half call has the
// bits of the float32 call on its widened values.
#include "cpu/batch_norm_training.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/aligned_array.h"
#include "core/exact_stats.h"
#include "core/parallel.h"
#include "cpu/group_norm.h"
#include "cpu/kernels/batch_norm_training.h"
#include "cpu/kernels/group_norm.h"
#include "cpu/memory_plan.h"

namespace normkit {
namespace cpu {
namespace {

using kernels::Moments;

// Elements (channels-first) or about that many values in rows (channels-last) of one
// statistics block, and per task of the apply pass: the group norm's block size.
constexpr int64_t kBlockElems = kStatsBlockElems;

struct Plan {
  const char* x;
  char* y;
  kernels::Storage x_storage, y_storage;
  int64_t N, C, S;
  bool channels_last, stream, from_memory;
  // Channels-last with fewer channels than lanes, a divisor of them (kernels::FlatChannels):
  // 2-channel rows took the group-norm kernels' one-channel-at-a-time path, a third of the
  // memory bound (128x2x128x128).
  bool flat = false;
  // Channels-first: blocks per (n, c) plane; channels-last: rows per block and blocks.
  int64_t plane_blocks = 0, block_rows = 0, row_blocks = 0;
  // Channels-first planes of a few values in channel blocks (width 0: not this path).
  ChannelBlocks blocks;

  // Element `at` of x, and of y.
  const void* X(int64_t at) const { return x + at * kernels::StorageBytes(x_storage); }
  void* Y(int64_t at) const { return y + at * kernels::StorageBytes(y_storage); }
};

// Planes up to this many elements are summed side by side, a vector's worth of planes at
// a time (SpanMeanRstdEach) instead of a SpanMoments call each: 128x1024x16 spent most of
// its time in per-plane calls.
constexpr int64_t kShortPlane = 256;

// Channels-first planes of at most kShortPlane elements: the moments of each, from
// SpanMeanRstdEach with eps = 0 (rstd = 1 / sqrt(m2 / S), so m2 = S / rstd^2, to double's
// precision; a constant plane gives rstd = Inf and m2 = 0). Tasks of whole runs of
// planes of about kBlockElems elements.
void ShortPlaneMoments(const normkit_context& ctx, const Plan& p, Moments* partial) {
  constexpr int64_t kStackPlanes = 256;
  const int64_t planes = p.N * p.C;
  const int64_t per_task = std::max<int64_t>(kStackPlanes, kBlockElems / p.S);
  ParallelFor(ctx, (planes + per_task - 1) / per_task, [&](int64_t t) {
    double mean[kStackPlanes], rstd[kStackPlanes];
    const int64_t end = std::min(planes, (t + 1) * per_task);
    for (int64_t k = t * per_task; k < end; k += kStackPlanes) {
      const int64_t count = std::min(kStackPlanes, end - k);
      kernels::SpanMeanRstdEach(p.X(k * p.S), p.x_storage, p.S, count, 0.0f, mean, rstd);
      for (int64_t j = 0; j < count; ++j) {
        const double S = static_cast<double>(p.S);
        partial[static_cast<size_t>(k + j)] = {S, mean[j], S / (rstd[j] * rstd[j])};
      }
    }
  });
}

// Channels-first planes of a few values: the moments of chunk k's channel c at
// partial[k * C + c] (kernels::ShortPlaneBlockMoments). Against ShortPlaneMoments
// (SpanMeanRstdEach over runs of 256 planes, then a merge of the N partials of each
// channel), 128x1024x16 went from 0.15-0.26 of its memory bound to 0.70-0.78 at one thread
// and 0.44-0.59 at two (bench, two runs).
void ChannelBlockMoments(const normkit_context& ctx, const Plan& p, Moments* partial) {
  ParallelFor(ctx, p.blocks.chunks * p.blocks.blocks, [&](int64_t t) {
    const ChannelBlocks::Task k = p.blocks.At(t, p.N, p.C, p.S);
    kernels::ShortPlaneBlockMoments(p.X(k.offset), p.x_storage, k.rows, p.C * p.S, k.channels * p.S,
                                    p.S, &partial[static_cast<size_t>(k.chunk * p.C + k.c0)]);
  });
}

// Channels-first: moments of every block of every (n, c) plane, in memory order (plane
// n * C + c, block b at partial[(n * C + c) * plane_blocks + b]).
void PlaneBlockMoments(const normkit_context& ctx, const Plan& p, Moments* partial) {
  if (p.S <= kShortPlane) return ShortPlaneMoments(ctx, p, partial);
  const int64_t items = p.N * p.C * p.plane_blocks;
  const int64_t block = (p.S + p.plane_blocks - 1) / p.plane_blocks;
  ParallelFor(ctx, items, [&](int64_t i) {
    const int64_t plane = i / p.plane_blocks, b = i % p.plane_blocks;
    const int64_t begin = b * block, len = std::min(block, p.S - begin);
    partial[static_cast<size_t>(i)] =
        kernels::SpanMoments(p.X(plane * p.S + begin), p.x_storage, len);
  });
}

// Channels-last: per-channel moments of each block of rows (C partials a block).
void RowBlockMoments(const normkit_context& ctx, const Plan& p, Moments* partial) {
  const int64_t rows = p.N * p.S;
  if (p.flat) {  // fewer channels than lanes: a block is one flat span (two passes in L2)
    ParallelFor(ctx, p.row_blocks, [&](int64_t b) {
      const int64_t r0 = b * p.block_rows, count = std::min(p.block_rows, rows - r0);
      kernels::FlatColumnMoments(p.X(r0 * p.C), p.x_storage, count, p.C,
                                 &partial[static_cast<size_t>(b * p.C)]);
    });
    return;
  }
  const int64_t workers = ParallelWorkers(ctx, p.row_blocks);
  const size_t C = static_cast<size_t>(p.C);
  auto floats = AllocateAligned<float>(static_cast<size_t>(workers) * 3 * C);
  auto doubles = AllocateAligned<double>(static_cast<size_t>(workers) * 2 * C);
  const int64_t samples = PivotSamples(p.block_rows, 1, p.from_memory);
  ParallelForWorkers(ctx, p.row_blocks, [&](int64_t b, int64_t worker) {
    float* f = floats.get() + static_cast<size_t>(worker) * 3 * C;
    double* d = doubles.get() + static_cast<size_t>(worker) * 2 * C;
    const kernels::ColumnScratch scratch{f, f + C, d, d + C};
    const int64_t r0 = b * p.block_rows, count = std::min(p.block_rows, rows - r0);
    kernels::ColumnBlockMoments(p.X(r0 * p.C), p.x_storage, count, p.C, p.C,
                                std::min(samples, count), p.from_memory, scratch,
                                &partial[static_cast<size_t>(b) * C]);
  });
}

// Channel c's values x at (run k, position i): for the exact statistics.
MeanRstd ExactChannelStats(const Plan& p, int64_t c, float eps) {
  const int64_t first = p.channels_last ? c : c * p.S;
  const auto value = [&](int64_t i) { return kernels::ElementAt(p.x, p.x_storage, first + i); };
  if (p.channels_last) return ExactMeanRstdOf(value, p.N * p.S, 1, p.C, eps, false);
  return ExactMeanRstdOf(value, p.N, p.S, p.C * p.S, eps, false);
}

}  // namespace

// A channel block's samples per chunk: about this many bytes (a second pass, when a pivot
// was too far, reads them again from L2).
constexpr int64_t kChunkBytes = int64_t{64} << 10;

ChannelBlocks PlanChannelBlocks(int64_t N, int64_t C, int64_t S) {
  ChannelBlocks b;
  if (S > kShortPlane) return b;
  b.width = kernels::ShortPlaneBlockWidth(S);
  if (b.width == 0) return b;
  b.block_channels = b.width / S;
  b.blocks = (C + b.block_channels - 1) / b.block_channels;
  b.chunk_rows = std::max<int64_t>(1, kChunkBytes / (b.width * int64_t{sizeof(float)}));
  b.chunks = (N + b.chunk_rows - 1) / b.chunk_rows;
  return b;
}

ChannelBlocks::Task ChannelBlocks::At(int64_t t, int64_t N, int64_t C, int64_t S) const {
  Task k;
  k.chunk = t / blocks;
  k.c0 = (t % blocks) * block_channels;
  k.channels = std::min(block_channels, C - k.c0);
  k.n0 = k.chunk * chunk_rows;
  k.rows = std::min(chunk_rows, N - k.n0);
  k.offset = (k.n0 * C + k.c0) * S;
  return k;
}

void BatchNormTraining(const normkit_context& context, const TensorView& x, const TensorView& y,
                       const BatchNormTrainingArgs& args) {
  Plan p;
  p.x = static_cast<const char*>(x.data);
  p.y = static_cast<char*>(y.data);
  p.x_storage = kernels::StorageOf(x.dtype);
  p.y_storage = kernels::StorageOf(y.dtype);
  p.N = x.batch;
  p.C = x.channels;
  p.S = x.spatial;
  p.channels_last = x.channels_last() && p.S > 1;
  p.stream = x.data != y.data && y.bytes >= kStreamingStoreBytes;
  // From x's float32 size (it picks the order of sums): a half x gets the float32 bits.
  p.from_memory = x.numel * int64_t{sizeof(float)} >= kStreamingStoreBytes;
  p.flat = p.channels_last && kernels::FlatChannels(p.C);
  const normkit_context& ctx = ContextForBytes(context, 2 * x.bytes, kMinParallelAffineBytes);
  // Block boundaries come from the shape alone: they fix the bits.
  AlignedArray<Moments> partial;
  if (p.channels_last) {
    const int64_t rows = p.N * p.S;
    p.block_rows = std::max<int64_t>(kMinStatsBlockRows, kBlockElems / p.C);
    p.row_blocks = (rows + p.block_rows - 1) / p.block_rows;
    partial = AllocateAligned<Moments>(static_cast<size_t>(p.row_blocks * p.C));
  } else {
    p.blocks = PlanChannelBlocks(p.N, p.C, p.S);
    p.plane_blocks = (p.S + kBlockElems - 1) / kBlockElems;
    const int64_t partials =
        p.blocks.width > 0 ? p.blocks.chunks * p.C : p.N * p.C * p.plane_blocks;
    partial = AllocateAligned<Moments>(static_cast<size_t>(partials));
  }
  const size_t C = static_cast<size_t>(p.C);
  std::vector<double> mean(C), rstd(C), var(C);
  auto params = AllocateAligned<float>(3 * AlignedCount<float>(C));
  float* mean_f = params.get();
  float* scale = mean_f + AlignedCount<float>(C);
  float* shift = scale + AlignedCount<float>(C);
  if (p.channels_last) {
    RowBlockMoments(ctx, p, partial.get());
  } else if (p.blocks.width > 0) {
    ChannelBlockMoments(ctx, p, partial.get());
  } else {
    PlaneBlockMoments(ctx, p, partial.get());
  }
  // Per channel, its blocks merged in memory order: (n, block) channels-first, chunks of
  // samples for channel blocks, row blocks channels-last; the partials walked in memory
  // order too (a channel at a time, stride C, took 128x1024x16 a sixth of its time).
  std::vector<Moments> merged(C);
  const int64_t runs = p.channels_last ? p.row_blocks : p.blocks.width > 0 ? p.blocks.chunks : p.N;
  const int64_t per_channel = p.channels_last || p.blocks.width > 0 ? 1 : p.plane_blocks;
  for (int64_t r = 0; r < runs; ++r) {
    const Moments* run = &partial[static_cast<size_t>(r * p.C * per_channel)];
    for (size_t c = 0; c < C; ++c) {
      for (int64_t b = 0; b < per_channel; ++b) {
        merged[c] = kernels::MergeMoments(merged[c], run[c * static_cast<size_t>(per_channel) + b]);
      }
    }
  }
  const double count = static_cast<double>(p.N) * static_cast<double>(p.S);
  for (int64_t c = 0; c < p.C; ++c) {
    const Moments& m = merged[static_cast<size_t>(c)];
    double mu = m.mean, r = kernels::ReciprocalStd(m, args.eps), v = m.m2 / count;
    if (!FastStatisticsHold(mu, r)) {
      // A sum past FLT_MAX, a NaN or an Inf: the exact statistics (core/exact_stats.h),
      // and the variance they imply.
      const MeanRstd s = ExactChannelStats(p, c, args.eps);
      mu = s.mean;
      r = s.rstd;
      v = 1.0 / (s.rstd * s.rstd) - static_cast<double>(args.eps);
    }
    mean[static_cast<size_t>(c)] = mu;
    rstd[static_cast<size_t>(c)] = r;
    var[static_cast<size_t>(c)] = v;
  }
  kernels::ChannelParametersEach(mean.data(), rstd.data(), args.gamma, args.beta, p.C, mean_f,
                                 scale, shift);
  // The small outputs, in double, rounded once.
  const double momentum = static_cast<double>(args.momentum);
  for (size_t c = 0; c < C; ++c) {
    if (args.save_mean) args.save_mean[c] = static_cast<float>(mean[c]);
    if (args.save_rstd) args.save_rstd[c] = static_cast<float>(rstd[c]);
    if (args.running_mean) {
      args.running_mean[c] = static_cast<float>(
          (1.0 - momentum) * static_cast<double>(args.running_mean[c]) + momentum * mean[c]);
      args.running_var[c] =
          static_cast<float>((1.0 - momentum) * static_cast<double>(args.running_var[c]) +
                             momentum * var[c] * (count / (count - 1.0)));
    }
  }
  // The output pass: tasks of about kBlockElems elements, whole rows (channels-last) or
  // runs of one sample's planes (channels-first).
  if (p.channels_last) {
    const kernels::NormRows rows_params{mean_f, scale, shift};
    const int64_t rows = p.N * p.S;
    const int64_t per_task = std::max<int64_t>(1, kBlockElems / p.C);
    ParallelFor(ctx, (rows + per_task - 1) / per_task, [&](int64_t t) {
      const int64_t r0 = t * per_task, count_rows = std::min(per_task, rows - r0);
      if (p.flat) {
        kernels::ApplyFlatNorm(p.X(r0 * p.C), p.x_storage, p.Y(r0 * p.C), p.y_storage, count_rows,
                               p.C, mean_f, scale, shift);
        return;
      }
      kernels::ApplyNormRows(p.X(r0 * p.C), p.x_storage, p.Y(r0 * p.C), p.y_storage, count_rows,
                             p.C, rows_params, kernels::Activation::kNone, p.stream, p.from_memory);
    });
    return;
  }
  const int64_t planes_per_task = std::max<int64_t>(1, kBlockElems / p.S);
  const int64_t tasks_per_sample = (p.C + planes_per_task - 1) / planes_per_task;
  ParallelFor(ctx, p.N * tasks_per_sample, [&](int64_t t) {
    const int64_t n = t / tasks_per_sample;
    const int64_t c0 = (t % tasks_per_sample) * planes_per_task;
    const int64_t c1 = std::min(p.C, c0 + planes_per_task);
    const int64_t at = (n * p.C + c0) * p.S;
    kernels::ApplyNormPlanes(p.X(at), p.x_storage, p.Y(at), p.y_storage, (c1 - c0) * p.S, p.S, 0,
                             mean_f + c0, scale + c0, shift + c0, kernels::Activation::kNone,
                             p.stream);
  });
}

}  // namespace cpu
}  // namespace normkit
