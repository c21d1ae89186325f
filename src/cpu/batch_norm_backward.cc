// SPDX-License-Identifier: Apache-2.0
// CPU batch norm backward (training mode). Two passes over x and dy: per-channel sums of
// dy and dy * (x - mean) over blocks (channels-first: a block of one (n, c) plane;
// channels-last: the channels of a block of rows), merged per channel in block order in
// double; then dx from five float coefficients a channel (mean, rstd, the two means and gamma *
// rstd). A channel whose float sums or whose float dx could overflow (values near FLT_MAX, spreads
// past its square root, NaN / Inf) is summed and applied again in double. x, dy and dx share
// one storage (float32, bfloat16, float16): the kernels widen as they load and round dx as
// they store it, so a half call has the bits of the float32 call on its widened values.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/aligned_array.h"
#include "core/parallel.h"
#include "cpu/batch_norm_training.h"
#include "cpu/group_norm.h"
#include "cpu/kernels/batch_norm_training.h"
#include "cpu/kernels/group_norm.h"
#include "cpu/memory_plan.h"

namespace normkit {
namespace cpu {
namespace {

using kernels::GradSums;

struct Plan {
  const char* x;
  const char* dy;
  char* dx;
  kernels::Storage storage;  // of x, dy and dx
  int64_t N, C, S;
  bool channels_last;
  // Channels-first: blocks per (n, c) plane; channels-last: rows per block and blocks.
  int64_t plane_blocks = 0, block_rows = 0, row_blocks = 0;
  // Channels-first planes of a few values in the forward's channel blocks (width 0: not
  // this path).
  ChannelBlocks blocks;

  // Index of value i of run k of channel c (runs: samples channels-first, rows
  // channels-last).
  int64_t Index(int64_t k, int64_t i, int64_t c) const {
    return channels_last ? k * C + c : (k * C + c) * S + i;
  }
  int64_t Runs() const { return channels_last ? N * S : N; }
  int64_t RunLength() const { return channels_last ? 1 : S; }

  // Element `at` of x, dy and dx.
  int64_t Bytes(int64_t at) const { return at * kernels::StorageBytes(storage); }
  const void* X(int64_t at) const { return x + Bytes(at); }
  const void* Dy(int64_t at) const { return dy + Bytes(at); }
  void* Dx(int64_t at) const { return dx + Bytes(at); }
  float XValue(int64_t at) const { return kernels::ElementAt(x, storage, at); }
  float DyValue(int64_t at) const { return kernels::ElementAt(dy, storage, at); }
};

// A channel's statistics and sums in double, the same for the float and the exact paths.
struct ChannelGrad {
  double mean, rstd, p, mean_dy, mean_dy_xhat;
};

// Sums of channel c again, in double: for channels whose float sums overflowed or hold a
// NaN / Inf.
void ExactChannelSums(const Plan& p, int64_t c, double mean, GradSums* sums) {
  double s = 0.0, t = 0.0;
  for (int64_t k = 0; k < p.Runs(); ++k) {
    for (int64_t i = 0; i < p.RunLength(); ++i) {
      const int64_t at = p.Index(k, i, c);
      const double dy = p.DyValue(at);
      s += dy;
      t += dy * (static_cast<double>(p.XValue(at)) - mean);
    }
  }
  sums->sum_dy = s;
  sums->sum_dy_xmu = t;
}

// dx of element `at` in double, rounded to float, then stored (a half dx: that float
// rounded to nearest even, as the kernels round theirs).
inline void StoreExactGrad(const Plan& p, int64_t at, const ChannelGrad& g) {
  const double xhat = (static_cast<double>(p.XValue(at)) - g.mean) * g.rstd;
  const float dx = static_cast<float>(
      g.p * ((static_cast<double>(p.DyValue(at)) - g.mean_dy) - xhat * g.mean_dy_xhat));
  if (p.storage == kernels::Storage::kFloat32) {
    std::memcpy(p.Dx(at), &dx, sizeof(dx));
    return;
  }
  kernels::NarrowFromFloat(&dx, 1, p.Dx(at), p.storage, false);
}

// The block sums, merged per channel in memory order.
std::vector<GradSums> ChannelSums(const normkit_context& ctx, const Plan& p,
                                  const float* padded_mean) {
  const size_t C = static_cast<size_t>(p.C);
  std::vector<GradSums> merged(C);
  if (p.channels_last) {
    auto partial = AllocateAligned<GradSums>(static_cast<size_t>(p.row_blocks) * C);
    const int64_t rows = p.N * p.S;
    const size_t stride = static_cast<size_t>(kernels::PaddedChannels(p.C));
    const int64_t workers = ParallelWorkers(ctx, p.row_blocks);
    auto scratch = AllocateAligned<float>(static_cast<size_t>(workers) * 4 * stride);
    ParallelForWorkers(ctx, p.row_blocks, [&](int64_t b, int64_t worker) {
      const int64_t r0 = b * p.block_rows, count = std::min(p.block_rows, rows - r0);
      kernels::ColumnGradSums(p.X(r0 * p.C), p.Dy(r0 * p.C), p.storage, count, p.C, padded_mean,
                              scratch.get() + static_cast<size_t>(worker) * 4 * stride,
                              &partial[static_cast<size_t>(b) * C]);
    });
    for (int64_t b = 0; b < p.row_blocks; ++b) {
      for (size_t c = 0; c < C; ++c) {
        kernels::MergeGradSums(merged[c], partial[static_cast<size_t>(b) * C + c]);
      }
    }
    return merged;
  }
  if (p.blocks.width > 0) {
    // Planes of a few values: channel blocks walked down chunks of samples
    // (kernels::ShortPlaneBlockGradSums), chunk k's channel c at partial[k * C + c].
    // Plane by plane (PlaneGradSums, a span's reductions each), 128x1024x16's sums took
    // three times a read of x and dy.
    auto partial = AllocateAligned<GradSums>(static_cast<size_t>(p.blocks.chunks * p.C));
    ParallelFor(ctx, p.blocks.chunks * p.blocks.blocks, [&](int64_t t) {
      const ChannelBlocks::Task k = p.blocks.At(t, p.N, p.C, p.S);
      kernels::ShortPlaneBlockGradSums(p.X(k.offset), p.Dy(k.offset), p.storage, k.rows, p.C * p.S,
                                       k.channels * p.S, p.S, padded_mean + k.c0,
                                       &partial[static_cast<size_t>(k.chunk * p.C + k.c0)]);
    });
    for (int64_t k = 0; k < p.blocks.chunks; ++k) {
      for (size_t c = 0; c < C; ++c) {
        kernels::MergeGradSums(merged[c], partial[static_cast<size_t>(k) * C + c]);
      }
    }
    return merged;
  }
  const int64_t items = p.N * p.C * p.plane_blocks;
  const int64_t block = (p.S + p.plane_blocks - 1) / p.plane_blocks;
  auto partial = AllocateAligned<GradSums>(static_cast<size_t>(items));
  // Tasks of whole runs of blocks of about kStatsBlockElems elements (planes of 16 took
  // 128x1024x16 most of its time as a task each); each block's sums its own.
  const int64_t per_task = std::max<int64_t>(1, kStatsBlockElems / block);
  ParallelFor(ctx, (items + per_task - 1) / per_task, [&](int64_t t) {
    const int64_t first = t * per_task, end = std::min(items, first + per_task);
    if (p.plane_blocks == 1) {  // whole planes
      kernels::PlaneGradSums(p.X(first * p.S), p.Dy(first * p.S), p.storage, p.S, end - first,
                             padded_mean, p.C, first % p.C, &partial[first]);
      return;
    }
    for (int64_t i = first; i < end; ++i) {
      const int64_t plane = i / p.plane_blocks, b = i % p.plane_blocks;
      const int64_t begin = b * block, len = std::min(block, p.S - begin);
      const int64_t at = plane * p.S + begin;
      partial[i] =
          kernels::SpanGradSums(p.X(at), p.Dy(at), p.storage, len, padded_mean[plane % p.C]);
    }
  });
  for (int64_t i = 0; i < items; ++i) {
    const size_t c = static_cast<size_t>((i / p.plane_blocks) % p.C);
    kernels::MergeGradSums(merged[c], partial[i]);
  }
  return merged;
}

// Whether dx = p * ((dy - mean_dy) - (x - mean) * rstd * mean_dy_xhat) stays finite in
// float at every step for this channel's values (bounded by its maxima), with the
// coefficients rounded to float.
bool FloatGradHolds(const GradSums& s, float rstd, float mean_dy, float mean_dy_xhat, float p) {
  const double bound =
      (static_cast<double>(s.max_abs_dy) + std::fabs(mean_dy)) +
      static_cast<double>(s.max_abs_xmu) * std::fabs(rstd) * std::fabs(mean_dy_xhat);
  return bound * std::max(1.0, std::fabs(static_cast<double>(p))) <= FLT_MAX / 4.0;  // NaN: false
}

}  // namespace

void BatchNormTrainingBackward(const normkit_context& context, const TensorView& x,
                               const TensorView& dy, const TensorView* dx,
                               const BatchNormBackwardArgs& args) {
  Plan p;
  p.x = static_cast<const char*>(x.data);
  p.dy = static_cast<const char*>(dy.data);
  p.dx = dx ? static_cast<char*>(dx->data) : nullptr;
  p.storage = kernels::StorageOf(x.dtype);
  p.N = x.batch;
  p.C = x.channels;
  p.S = x.spatial;
  p.channels_last = x.channels_last() && p.S > 1;
  const normkit_context& ctx = ContextForBytes(context, 3 * x.bytes, kMinParallelAffineBytes);
  // Block boundaries come from the shape alone: they fix the bits.
  if (p.channels_last) {
    p.block_rows = std::max<int64_t>(kMinStatsBlockRows, kStatsBlockElems / p.C);
    p.row_blocks = (p.N * p.S + p.block_rows - 1) / p.block_rows;
  } else {
    p.plane_blocks = (p.S + kStatsBlockElems - 1) / kStatsBlockElems;
    p.blocks = PlanChannelBlocks(p.N, p.C, p.S);
  }
  const size_t C = static_cast<size_t>(p.C);
  const size_t padded = static_cast<size_t>(kernels::PaddedChannels(p.C));
  // Per-channel float arrays, padded with zeros: mean, rstd, mean_dy, mean_dy_xhat, p.
  auto coefficients = AllocateAligned<float>(5 * padded);
  std::fill(coefficients.get(), coefficients.get() + 5 * padded, 0.0f);
  float* mean_f = coefficients.get();
  float* rstd_f = mean_f + padded;
  float* mean_dy_f = rstd_f + padded;
  float* mean_dy_xhat_f = mean_dy_f + padded;
  float* p_f = mean_dy_xhat_f + padded;
  std::copy(args.save_mean, args.save_mean + C, mean_f);
  std::copy(args.save_rstd, args.save_rstd + C, rstd_f);
  std::vector<GradSums> sums = ChannelSums(ctx, p, mean_f);
  std::vector<ChannelGrad> grad(C);
  std::vector<char> exact(C, 0);
  bool any_exact = false;
  const double count = static_cast<double>(p.N) * static_cast<double>(p.S);
  for (size_t c = 0; c < C; ++c) {
    GradSums& s = sums[c];
    ChannelGrad& g = grad[c];
    g.mean = mean_f[c];
    g.rstd = rstd_f[c];
    if (!std::isfinite(s.sum_dy) || !std::isfinite(s.sum_dy_xmu)) {
      ExactChannelSums(p, static_cast<int64_t>(c), g.mean, &s);
      exact[c] = 1;
    }
    g.p = static_cast<double>(args.gamma ? args.gamma[c] : 1.0f) * g.rstd;
    g.mean_dy = s.sum_dy / count;
    g.mean_dy_xhat = g.rstd * s.sum_dy_xmu / count;
    mean_dy_f[c] = static_cast<float>(g.mean_dy);
    mean_dy_xhat_f[c] = static_cast<float>(g.mean_dy_xhat);
    p_f[c] = static_cast<float>(g.p);
    if (!FloatGradHolds(s, rstd_f[c], mean_dy_f[c], mean_dy_xhat_f[c], p_f[c])) exact[c] = 1;
    any_exact = any_exact || exact[c];
  }
  // Every scratch array is allocated: from here on nothing throws.
  for (size_t c = 0; c < C; ++c) {
    if (args.grad_beta) args.grad_beta[c] = static_cast<float>(sums[c].sum_dy);
    if (args.grad_gamma) args.grad_gamma[c] = static_cast<float>(grad[c].rstd * sums[c].sum_dy_xmu);
  }
  if (!p.dx) return;
  const kernels::GradCoefficients k{mean_f, rstd_f, mean_dy_f, mean_dy_xhat_f, p_f};
  if (p.channels_last) {
    const int64_t rows = p.N * p.S;
    const int64_t per_task = std::max<int64_t>(1, kStatsBlockElems / p.C);
    ParallelFor(ctx, (rows + per_task - 1) / per_task, [&](int64_t t) {
      const int64_t r0 = t * per_task, r1 = std::min(rows, r0 + per_task);
      if (!any_exact) {
        kernels::ApplyGradRows(p.X(r0 * p.C), p.Dy(r0 * p.C), p.Dx(r0 * p.C), p.storage, r1 - r0,
                               p.C, k);
        return;
      }
      // Rare (extreme values): every element in double, channel by channel of each row.
      for (int64_t r = r0; r < r1; ++r) {
        for (size_t c = 0; c < C; ++c) {
          const int64_t at = r * p.C + static_cast<int64_t>(c);
          StoreExactGrad(p, at, grad[c]);
        }
      }
    });
    return;
  }
  const int64_t planes_per_task = std::max<int64_t>(1, kStatsBlockElems / p.S);
  const int64_t tasks_per_sample = (p.C + planes_per_task - 1) / planes_per_task;
  ParallelFor(ctx, p.N * tasks_per_sample, [&](int64_t t) {
    const int64_t n = t / tasks_per_sample;
    const int64_t c0 = (t % tasks_per_sample) * planes_per_task;
    const int64_t c1 = std::min(p.C, c0 + planes_per_task);
    if (!any_exact) {
      const int64_t at = (n * p.C + c0) * p.S;
      kernels::ApplyGradPlanes(p.X(at), p.Dy(at), p.Dx(at), p.storage, p.S, c1 - c0, k, c0);
      return;
    }
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t at = (n * p.C + c) * p.S;
      if (!exact[static_cast<size_t>(c)]) {
        kernels::ApplyGradSpan(p.X(at), p.Dy(at), p.Dx(at), p.storage, p.S, k, c);
        continue;
      }
      for (int64_t i = 0; i < p.S; ++i) StoreExactGrad(p, at + i, grad[static_cast<size_t>(c)]);
    }
  });
}

}  // namespace cpu
}  // namespace normkit
