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
#include "cuda/storage.h"
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
  if (activation == NORMKIT_ACTIVATION_SILU) {
    // As on CPU: v enters clamped at -88, so the far tail (|silu(v)| < 1.5e-36) stays
    // within 1.5e-36 of the exact value (-1e30 or -Inf give a tiny negative, not -Inf).
    v = v < -88.0f ? -88.0f : v;  // NaN < -88 is false: NaN kept
#if defined(__CUDA_ARCH__)
    // The hardware exponential and reciprocal: within 2e-6 relative of the exact SiLU,
    // and the exact one costs more than the bytes do.
    return __fdividef(v, 1.0f + __expf(-v));
#else
    return v / (1.0f + expf(-v));
#endif
  }
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

  // y = act(fmaf(x - mean_f, Scale(gamma), Shift(Scale(gamma), beta))).
  NORMKIT_HOST_DEVICE float Scale(float gamma) const { return gamma * rstd; }
  NORMKIT_HOST_DEVICE float Shift(float scale, float beta) const {
    return fmaf(-residual, scale, beta);
  }
  NORMKIT_HOST_DEVICE float Apply(float x, float gamma, float beta, int32_t activation) const {
    const float a = Scale(gamma);
    return Activate(fmaf(x - mean_f, a, Shift(a, beta)), activation);
  }
};

// ---- What one thread of a block does (thread `tid` of `threads`, indices k = begin +
// tid, begin + tid + threads, ... below end). The kernels add the partial results of
// all threads with a fixed tree; the CPU tests run every thread in turn. ----

// x and y are arrays of a storage type (cuda/storage.h): widened to float on load, the
// float result rounded to nearest even on store.

// Sum of x (or of x^2 for RMS) over the thread's elements; copies them to `cache`
// (index k - begin) when it is not NULL.
template <class TX>
NORMKIT_HOST_DEVICE inline double ThreadSum(const TX* x, const NormShape& s, int64_t unit,
                                            int64_t begin, int64_t end, int64_t tid,
                                            int64_t threads, bool rms, float* cache) {
  double sum = 0.0;
  DivModCursor at = s.Cursor(begin + tid, threads);
  for (int64_t k = begin + tid; k < end; k += threads, at.Next()) {
    const float v = Element<TX>::ToFloat(x[s.Offset(unit, k, at)]);
    if (cache != nullptr) cache[k - begin] = v;
    sum += rms ? static_cast<double>(v) * v : static_cast<double>(v);
  }
  return sum;
}

// Sum of (x - mean)^2 over the thread's elements, read from `cache` when not NULL.
template <class TX>
NORMKIT_HOST_DEVICE inline double ThreadDeviations(const TX* x, const NormShape& s, int64_t unit,
                                                   int64_t begin, int64_t end, int64_t tid,
                                                   int64_t threads, double mean,
                                                   const float* cache) {
  double dev = 0.0;
  DivModCursor at = s.Cursor(begin + tid, threads);
  for (int64_t k = begin + tid; k < end; k += threads, at.Next()) {
    const float v =
        cache != nullptr ? cache[k - begin] : Element<TX>::ToFloat(x[s.Offset(unit, k, at)]);
    const double d = static_cast<double>(v) - mean;
    dev += d * d;
  }
  return dev;
}

// Writes y for the thread's elements (x from `cache` when not NULL).
template <class TX, class TY>
NORMKIT_HOST_DEVICE inline void ThreadApply(const TX* x, TY* y, const NormShape& s, int64_t unit,
                                            int64_t begin, int64_t end, int64_t tid,
                                            int64_t threads, const UnitAffine& ua,
                                            const float* gamma, const float* beta,
                                            int32_t activation, const float* cache) {
  DivModCursor at = s.Cursor(begin + tid, threads);
  for (int64_t k = begin + tid; k < end; k += threads, at.Next()) {
    const int64_t offset = s.Offset(unit, k, at);
    const int64_t c = s.Channel(unit, at);
    const float v = cache != nullptr ? cache[k - begin] : Element<TX>::ToFloat(x[offset]);
    y[offset] = Element<TY>::FromFloat(
        ua.Apply(v, gamma ? gamma[c] : 1.0f, beta ? beta[c] : 0.0f, activation));
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

// ---- The flat plan: tensors below 2^31 elements whose units fit in shared memory.
// One block per unit; pass 1 reads the unit once into shared memory and takes its sums
// about the unit's first element, pass 2 writes y from shared memory (between them, a
// second sum over shared memory in the rare case the first element was far from the
// mean). An item is 4 elements (one 16-byte load of floats, 8 bytes of a half type) where
// the layout allows it, else 1. The shared-memory copy of the unit holds x as stored (a
// half unit takes half the shared memory), widened where it is read.
// Floats are summed in float over one item, then in double: one conversion per item
// instead of per element (conversions, not bytes, bound the double-per-element form). ----

struct FlatUnits {
  U32Divider groups_div, spatial_div, cg_div;
  uint32_t C = 1, Cg = 1, spatial = 1, count = 0;
  bool channels_last = false;
  bool vector = false;  // items of 4 elements
  uint32_t items = 0;   // per unit

  // `aligned`: x and y start on a boundary of 4 of their elements.
  static FlatUnits Of(const NormShape& s, bool aligned) {
    FlatUnits f;
    f.groups_div = U32Divider::Of(static_cast<uint32_t>(s.groups));
    f.spatial_div = U32Divider::Of(static_cast<uint32_t>(s.spatial));
    f.cg_div = U32Divider::Of(static_cast<uint32_t>(s.Cg));
    f.C = static_cast<uint32_t>(s.C);
    f.Cg = static_cast<uint32_t>(s.Cg);
    f.spatial = static_cast<uint32_t>(s.spatial);
    f.count = static_cast<uint32_t>(s.count);
    f.channels_last = s.channels_last;
    // Channels-first units are contiguous; channels-last items are 4 channels of one
    // position, so Cg (and with it C) must be a multiple of 4.
    f.vector = aligned && (s.channels_last ? s.Cg % 4 == 0 && s.C % 4 == 0 : s.count % 4 == 0);
    f.items = f.vector ? f.count / 4 : f.count;
    return f;
  }
  // Memory offset of element k of unit `unit`.
  NORMKIT_HOST_DEVICE uint32_t Offset(uint32_t unit, uint32_t k) const {
    if (!channels_last) return unit * count + k;
    const uint32_t n = groups_div.Div(unit), g = unit - n * groups_div.divisor;
    const uint32_t pos = cg_div.Div(k);
    return (n * spatial + pos) * C + g * Cg + (k - pos * Cg);
  }
  NORMKIT_HOST_DEVICE uint32_t Channel(uint32_t unit, uint32_t k) const {
    const uint32_t g = groups_div.Mod(unit);
    return g * Cg + (channels_last ? cg_div.Mod(k) : spatial_div.Div(k));
  }
};

// Items a thread loads before it uses any: enough bytes in flight per multiprocessor
// even when one 200 KiB unit is all a multiprocessor holds.
constexpr uint32_t kFlatBatch = 4;

// Sums about a pivot p of a thread's items: s1 = sum (x - p), s2 = sum (x - p)^2 (RMS
// norm: p = 0, so s2 is the sum of squares). In float over one item, in double across
// items. With p within a few standard deviations of the mean, x - p loses nothing where
// it matters (exact for x near p) and s2 - s1^2 / n does not cancel.
struct ShiftedSums {
  double s1 = 0.0, s2 = 0.0;

  NORMKIT_HOST_DEVICE void Add(const Float4& v, float p) {
    const float a = v.x - p, b = v.y - p, c = v.z - p, d = v.w - p;
    s1 += static_cast<double>((a + b) + (c + d));
    s2 += static_cast<double>((a * a + b * b) + (c * c + d * d));
  }
  NORMKIT_HOST_DEVICE void Add(float v, float p) {
    const float a = v - p;
    s1 += static_cast<double>(a);
    s2 += static_cast<double>(a * a);
  }
};

// Pass 1 of thread `tid`: copies its items of the unit into `cache` (unit-local order,
// as stored: a widened half value rounds back to itself) and sums them about `pivot`.
template <class TX>
NORMKIT_HOST_DEVICE inline ShiftedSums FlatLoadSums(const TX* x, const FlatUnits& f, uint32_t unit,
                                                    uint32_t tid, uint32_t threads, float pivot,
                                                    TX* cache) {
  ShiftedSums sums;
  for (uint32_t q0 = tid; q0 < f.items; q0 += kFlatBatch * threads) {
    if (f.vector) {
      Float4 v[kFlatBatch];
      for (uint32_t j = 0; j < kFlatBatch; ++j) {
        const uint32_t q = q0 + j * threads;
        if (q < f.items) v[j] = Load4(x + f.Offset(unit, 4 * q));
      }
      for (uint32_t j = 0; j < kFlatBatch; ++j) {
        const uint32_t q = q0 + j * threads;
        if (q >= f.items) break;
        Store4(cache + 4 * q, v[j]);
        sums.Add(v[j], pivot);
      }
    } else {
      float v[kFlatBatch];
      for (uint32_t j = 0; j < kFlatBatch; ++j) {
        const uint32_t q = q0 + j * threads;
        if (q < f.items) v[j] = Element<TX>::ToFloat(x[f.Offset(unit, q)]);
      }
      for (uint32_t j = 0; j < kFlatBatch; ++j) {
        const uint32_t q = q0 + j * threads;
        if (q >= f.items) break;
        cache[q] = StoredAs<TX>(v[j]);
        sums.Add(v[j], pivot);
      }
    }
  }
  return sums;
}

// The same sums from the cache, about another pivot.
template <class TC>
NORMKIT_HOST_DEVICE inline ShiftedSums FlatCacheSums(const TC* cache, const FlatUnits& f,
                                                     uint32_t tid, uint32_t threads, float pivot) {
  ShiftedSums sums;
  for (uint32_t q = tid; q < f.items; q += threads) {
    if (f.vector) {
      sums.Add(Load4(cache + 4 * q), pivot);
    } else {
      sums.Add(Element<TC>::ToFloat(cache[q]), pivot);
    }
  }
  return sums;
}

// After a pass of sums about *pivot: the unit's mean and variance (RMS norm: both the
// mean of squares), true; or, when `may_retry` and the pivot was too far from the mean
// to trust the sums (PivotTooFar, the CPU kernels' test),
// false with *pivot moved to the mean they give, to sum again about it.
NORMKIT_HOST_DEVICE inline bool FlatMoments(bool rms, const ShiftedSums& s, double count,
                                            bool may_retry, float* pivot, double* mean,
                                            double* var) {
  if (rms) {
    *mean = *var = s.s2 / count;
    return true;
  }
  if (may_retry && PivotTooFar(count, s.s1, s.s2)) {
    *pivot = static_cast<float>(*pivot + s.s1 / count);
    return false;
  }
  *mean = static_cast<double>(*pivot) + s.s1 / count;
  const double v = (s.s2 - s.s1 * s.s1 / count) / count;
  *var = v > 0.0 ? v : 0.0;
  return true;
}

// The flat plan runs a norm when it fits: one launch (chunks == 1), 32-bit indices,
// and a unit (of `elem_bytes` elements) in the shared memory a block may have.
inline bool UseFlatNorm(const NormShape& s, const NormPlan& plan, int64_t max_shared_bytes,
                        int64_t elem_bytes = sizeof(float)) {
  return plan.chunks == 1 && s.units * s.count < kMaxIndex32 &&
         s.count * elem_bytes <= max_shared_bytes;
}

// Pass 2: y for the thread's items.
template <class TC, class TY>
NORMKIT_HOST_DEVICE inline void FlatApply(const TC* cache, TY* y, const FlatUnits& f, uint32_t unit,
                                          uint32_t tid, uint32_t threads, const UnitAffine& ua,
                                          const float* gamma, const float* beta,
                                          int32_t activation) {
  const auto affine = [&](uint32_t k, float v) {
    const uint32_t c = f.Channel(unit, k);
    return ua.Apply(v, gamma ? gamma[c] : 1.0f, beta ? beta[c] : 0.0f, activation);
  };
  for (uint32_t q = tid; q < f.items; q += threads) {
    if (f.vector) {
      const uint32_t k = 4 * q;
      const Float4 v = Load4(cache + k);
      Store4(y + f.Offset(unit, k),
             {affine(k, v.x), affine(k + 1, v.y), affine(k + 2, v.z), affine(k + 3, v.w)});
    } else {
      y[f.Offset(unit, q)] = Element<TY>::FromFloat(affine(q, Element<TC>::ToFloat(cache[q])));
    }
  }
}

// Threads of a flat block: about `per_thread` items each, whole warps, 64 to 1024.
inline int FlatThreads(const FlatUnits& f, int64_t per_thread = 4) {
  const int64_t want = ((f.items + per_thread - 1) / per_thread + 31) / 32 * 32;
  return static_cast<int>(want < 64 ? 64 : (want > 1024 ? 1024 : want));
}

// ---- Rows of a [rows, D] layer / RMS norm in registers: a warp per row. Lane l holds
// the 4-element items l, l + 32, ... of its row (kWarpRowItems at most: D up to 2048), so
// the statistics take two passes over registers and the row is read from memory once,
// with no shared memory and no block barrier. The mean comes from sums about a pivot
// (the row's first element), then is corrected by sums of the deviations from it (the
// corrected two-pass algorithm: exact when the mean is 1e4 standard deviations, and
// when the pivot is an outlier); the variance from the squares of those deviations.
// A lane sums in float (at most 64 values), the warp in double over a fixed butterfly
// (offsets 16, 8, 4, 2, 1), which leaves every lane the same bits. ----

constexpr uint32_t kWarpRowItems = 16;

// Whether a [rows, D] norm takes the warp-per-row kernel: whole 4-element items (D a
// multiple of 4; x and y aligned to 4 elements, gamma and beta to 16 bytes: `aligned`), D up to
// 32 * 4 * kWarpRowItems, 32-bit indices.
inline bool UseWarpRows(const NormShape& s, bool aligned) {
  return aligned && s.count % 4 == 0 && s.count <= 32 * 4 * kWarpRowItems &&
         s.units * s.count < kMaxIndex32;
}

// The items of a row lane `lane` holds.
NORMKIT_HOST_DEVICE inline uint32_t WarpRowLaneItems(uint32_t D, uint32_t lane) {
  const uint32_t items = D / 4;
  return items > lane ? (items - lane + 31) / 32 : 0;
}

// A lane's float sums over its first n of kItems items (registers: the loop unrolls):
// of (x - pivot) (s1) and, with `squares`, of (x - pivot)^2 (s2).
template <uint32_t kItems>
NORMKIT_HOST_DEVICE inline void WarpRowLaneSums(const Float4 (&v)[kItems], uint32_t n, float pivot,
                                                bool squares, float* s1, float* s2) {
  float a = 0.0f, b = 0.0f;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (uint32_t i = 0; i < kItems; ++i) {
    if (i >= n) break;
    const float d[4] = {v[i].x - pivot, v[i].y - pivot, v[i].z - pivot, v[i].w - pivot};
    for (int l = 0; l < 4; ++l) {
      a += d[l];
      if (squares) b = fmaf(d[l], d[l], b);
    }
  }
  *s1 = a;
  *s2 = b;
}

// The row's mean and (biased) variance from the warp's totals: S1 = sum(x - pivot),
// C1 = sum(x - m1) and Q = sum((x - m1)^2), where m1 = the float nearest
// pivot + S1 / count (WarpRowFirstMean). RMS norm: Q = sum(x^2) (m1 = 0); mean = var =
// Q / count, as FlatMoments gives it.
NORMKIT_HOST_DEVICE inline float WarpRowFirstMean(float pivot, double s1, double count) {
  return static_cast<float>(static_cast<double>(pivot) + s1 / count);
}
NORMKIT_HOST_DEVICE inline void WarpRowMoments(bool rms, float m1, double c1, double q,
                                               double count, double* mean, double* var) {
  if (rms) {
    *mean = *var = q / count;
    return;
  }
  *mean = static_cast<double>(m1) + c1 / count;
  const double v = (q - c1 * c1 / count) / count;
  *var = v > 0.0 ? v : 0.0;
}

}  // namespace cuda
}  // namespace normkit

#endif  // NORMKIT_CUDA_NORM_MATH_H_
