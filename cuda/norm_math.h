// SPDX-License-Identifier: Apache-2.0
// The arithmetic of the CUDA normalizations that is not about threads: where element k
// of a unit (one (n, group), or one row) lives, how chunk moments merge, and the
// affine + activation applied to each element. Host-and-device code, so the CPU tests
// check it against the double references in every build with CUDA.
#ifndef NORMKIT_CUDA_NORM_MATH_H_
#define NORMKIT_CUDA_NORM_MATH_H_

#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "core/moments.h"
#include "cuda/channel_cursor.h"
#include "normkit/normkit.h"

namespace normkit {
namespace cuda {

// A group norm over N x C x spatial with G groups; a unit is one (n, g) and holds
// count = (C / G) * spatial elements. Row norms are G = 1, spatial = 1, channels-first.
struct NormShape {
  int64_t units = 0;  // N * G
  int64_t groups = 1;
  int64_t C = 1, spatial = 1, Cg = 1;
  int64_t count = 0;  // elements per unit
  bool channels_last = false;

  static NormShape ForGroups(int64_t N, int64_t C, int64_t spatial, int64_t groups,
                             bool channels_last) {
    NormShape s;
    s.units = N * groups;
    s.groups = groups;
    s.C = C;
    s.Cg = C / groups;
    s.spatial = spatial;
    s.count = s.Cg * spatial;
    s.channels_last = channels_last;
    return s;
  }
  // [rows, D]: one unit per row.
  static NormShape ForRows(int64_t rows, int64_t D) { return ForGroups(rows, D, 1, 1, false); }

  // Cursor over the unit's elements: channels-first quot = channel in group, channels-
  // last quot = position and rem = channel in group.
  NORMKIT_HOST_DEVICE DivModCursor Cursor(int64_t k, int64_t stride) const {
    return DivModCursor(k, stride, channels_last ? Cg : spatial);
  }
  // Memory offset of the element the cursor (at unit-local index k) points at.
  NORMKIT_HOST_DEVICE int64_t Offset(int64_t unit, int64_t k, const DivModCursor& at) const {
    if (!channels_last) return unit * count + k;  // a group is contiguous
    const int64_t n = unit / groups, g = unit - n * groups;
    return (n * spatial + at.quot) * C + g * Cg + at.rem;
  }
  NORMKIT_HOST_DEVICE int64_t Channel(int64_t unit, const DivModCursor& at) const {
    const int64_t g = unit % groups;
    return g * Cg + (channels_last ? at.rem : at.quot);
  }
};

NORMKIT_HOST_DEVICE inline float Activate(float v, int32_t activation) {
  if (activation == NORMKIT_ACTIVATION_RELU) return v < 0.0f ? 0.0f : v;  // NaN stays NaN
  if (activation == NORMKIT_ACTIVATION_SILU) return v / (1.0f + expf(-v));
  return v;
}

// The statistics of a unit turned into what each element needs:
// y = act((x - mean_f) * a + (beta - (mean - mean_f) * a)), a = gamma * rstd, as on CPU
// (x - mean_f is exact for x near the mean, which keeps ill-conditioned groups exact).
struct UnitAffine {
  float mean_f = 0;    // the float nearest the mean (0 for RMS norm)
  float residual = 0;  // mean - mean_f
  float rstd = 1;

  NORMKIT_HOST_DEVICE static UnitAffine From(double mean, double var, float eps, bool rms) {
    UnitAffine u;
    u.mean_f = rms ? 0.0f : static_cast<float>(mean);
    u.residual = rms ? 0.0f : static_cast<float>(mean - static_cast<double>(u.mean_f));
    u.rstd = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
    return u;
  }

  NORMKIT_HOST_DEVICE float Apply(float x, float gamma, float beta, int32_t activation) const {
    const float a = gamma * rstd;
    const float b = fmaf(-residual, a, beta);
    return Activate(fmaf(x - mean_f, a, b), activation);
  }
};

// ---- What one thread of a block does (thread `tid` of `threads`, indices k = begin +
// tid, begin + tid + threads, ... below end). The kernels add the partial results of
// all threads with a fixed tree; the CPU tests run every thread in turn. ----

// Sum of x (or of x^2 for RMS) over the thread's elements; copies them to `cache`
// (index k - begin) when it is not NULL.
NORMKIT_HOST_DEVICE inline double ThreadSum(const float* x, const NormShape& s, int64_t unit,
                                            int64_t begin, int64_t end, int64_t tid,
                                            int64_t threads, bool rms, float* cache) {
  double sum = 0.0;
  DivModCursor at = s.Cursor(begin + tid, threads);
  for (int64_t k = begin + tid; k < end; k += threads, at.Next()) {
    const float v = x[s.Offset(unit, k, at)];
    if (cache != nullptr) cache[k - begin] = v;
    sum += rms ? static_cast<double>(v) * v : static_cast<double>(v);
  }
  return sum;
}

// Sum of (x - mean)^2 over the thread's elements, read from `cache` when not NULL.
NORMKIT_HOST_DEVICE inline double ThreadDeviations(const float* x, const NormShape& s, int64_t unit,
                                                   int64_t begin, int64_t end, int64_t tid,
                                                   int64_t threads, double mean,
                                                   const float* cache) {
  double dev = 0.0;
  DivModCursor at = s.Cursor(begin + tid, threads);
  for (int64_t k = begin + tid; k < end; k += threads, at.Next()) {
    const float v = cache != nullptr ? cache[k - begin] : x[s.Offset(unit, k, at)];
    const double d = static_cast<double>(v) - mean;
    dev += d * d;
  }
  return dev;
}

// Writes y for the thread's elements (x from `cache` when not NULL).
NORMKIT_HOST_DEVICE inline void ThreadApply(const float* x, float* y, const NormShape& s,
                                            int64_t unit, int64_t begin, int64_t end, int64_t tid,
                                            int64_t threads, const UnitAffine& ua,
                                            const float* gamma, const float* beta,
                                            int32_t activation, const float* cache) {
  DivModCursor at = s.Cursor(begin + tid, threads);
  for (int64_t k = begin + tid; k < end; k += threads, at.Next()) {
    const int64_t offset = s.Offset(unit, k, at);
    const int64_t c = s.Channel(unit, at);
    const float v = cache != nullptr ? cache[k - begin] : x[offset];
    y[offset] = ua.Apply(v, gamma ? gamma[c] : 1.0f, beta ? beta[c] : 0.0f, activation);
  }
}

// Fused (one block per unit, chunks == 1) or split (units x chunks blocks, then a merge):
// fused when the units alone fill the GPU or are small.
struct NormPlan {
  int64_t chunks = 1;
  int64_t chunk = 0;  // elements per chunk (the last may be shorter)
};

constexpr int64_t kSplitChunkElems = 16384;

// Fused units up to this size are kept in shared memory (x read from memory once):
// the 48 KiB a block gets without opting in, less room for the block's own reductions.
constexpr int64_t kCachedUnitBytes = 44 * 1024;

inline NormPlan PlanNorm(const NormShape& s, int64_t multiprocessors) {
  NormPlan plan;
  plan.chunk = s.count;
  const int64_t fill = 2 * multiprocessors;
  if (s.units >= fill || s.count <= 2 * kSplitChunkElems) return plan;
  // Enough chunks to give every multiprocessor a few blocks, none below kSplitChunkElems.
  const int64_t max_chunks = (s.count + kSplitChunkElems - 1) / kSplitChunkElems;
  const int64_t want = (2 * fill + s.units - 1) / s.units;
  plan.chunks = want < max_chunks ? want : max_chunks;
  plan.chunk = (s.count + plan.chunks - 1) / plan.chunks;
  plan.chunks = (s.count + plan.chunk - 1) / plan.chunk;  // no empty trailing chunk
  return plan;
}

}  // namespace cuda
}  // namespace normkit

#endif  // NORMKIT_CUDA_NORM_MATH_H_
