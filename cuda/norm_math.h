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

// ---- The flat plan: tensors below 2^31 elements whose units fit in shared memory.
// One block per unit; pass 1 reads the unit once into shared memory and takes its sums
// about the unit's first element, pass 2 writes y from shared memory (between them, a
// second sum over shared memory in the rare case the first element was far from the
// mean). An item is 4 floats (one 16-byte load) where the layout allows it, else 1.
// Floats are summed in float over one item, then in double: one conversion per item
// instead of per element (conversions, not bytes, bound the double-per-element form). ----

struct Float4 {
  float x, y, z, w;
};

NORMKIT_HOST_DEVICE inline Float4 LoadFloat4(const float* p) {
#if defined(__CUDA_ARCH__)
  const float4 v = *reinterpret_cast<const float4*>(p);
  return {v.x, v.y, v.z, v.w};
#else
  return {p[0], p[1], p[2], p[3]};
#endif
}

NORMKIT_HOST_DEVICE inline void StoreFloat4(float* p, const Float4& v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<float4*>(p) = make_float4(v.x, v.y, v.z, v.w);
#else
  p[0] = v.x, p[1] = v.y, p[2] = v.z, p[3] = v.w;
#endif
}

struct FlatUnits {
  U32Divider groups_div, spatial_div, cg_div;
  uint32_t C = 1, Cg = 1, spatial = 1, count = 0;
  bool channels_last = false;
  bool vector = false;  // items of 4 floats
  uint32_t items = 0;   // per unit

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

// Pass 1 of thread `tid`: copies its items of the unit into `cache` (unit-local order)
// and sums them about `pivot`.
NORMKIT_HOST_DEVICE inline ShiftedSums FlatLoadSums(const float* x, const FlatUnits& f,
                                                    uint32_t unit, uint32_t tid, uint32_t threads,
                                                    float pivot, float* cache) {
  ShiftedSums sums;
  for (uint32_t q0 = tid; q0 < f.items; q0 += kFlatBatch * threads) {
    if (f.vector) {
      Float4 v[kFlatBatch];
      for (uint32_t j = 0; j < kFlatBatch; ++j) {
        const uint32_t q = q0 + j * threads;
        if (q < f.items) v[j] = LoadFloat4(x + f.Offset(unit, 4 * q));
      }
      for (uint32_t j = 0; j < kFlatBatch; ++j) {
        const uint32_t q = q0 + j * threads;
        if (q >= f.items) break;
        StoreFloat4(cache + 4 * q, v[j]);
        sums.Add(v[j], pivot);
      }
    } else {
      float v[kFlatBatch];
      for (uint32_t j = 0; j < kFlatBatch; ++j) {
        const uint32_t q = q0 + j * threads;
        if (q < f.items) v[j] = x[f.Offset(unit, q)];
      }
      for (uint32_t j = 0; j < kFlatBatch; ++j) {
        const uint32_t q = q0 + j * threads;
        if (q >= f.items) break;
        cache[q] = v[j];
        sums.Add(v[j], pivot);
      }
    }
  }
  return sums;
}

// The same sums from the cache, about another pivot.
NORMKIT_HOST_DEVICE inline ShiftedSums FlatCacheSums(const float* cache, const FlatUnits& f,
                                                     uint32_t tid, uint32_t threads, float pivot) {
  ShiftedSums sums;
  for (uint32_t q = tid; q < f.items; q += threads) {
    if (f.vector) {
      sums.Add(LoadFloat4(cache + 4 * q), pivot);
    } else {
      sums.Add(cache[q], pivot);
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
// and a unit in the shared memory a block may have.
inline bool UseFlatNorm(const NormShape& s, const NormPlan& plan, int64_t max_shared_bytes) {
  return plan.chunks == 1 && s.units * s.count < kMaxIndex32 &&
         s.count * static_cast<int64_t>(sizeof(float)) <= max_shared_bytes;
}

// Pass 2: y for the thread's items.
NORMKIT_HOST_DEVICE inline void FlatApply(const float* cache, float* y, const FlatUnits& f,
                                          uint32_t unit, uint32_t tid, uint32_t threads,
                                          const UnitAffine& ua, const float* gamma,
                                          const float* beta, int32_t activation) {
  const auto affine = [&](uint32_t k, float v) {
    const uint32_t c = f.Channel(unit, k);
    return ua.Apply(v, gamma ? gamma[c] : 1.0f, beta ? beta[c] : 0.0f, activation);
  };
  for (uint32_t q = tid; q < f.items; q += threads) {
    if (f.vector) {
      const uint32_t k = 4 * q;
      const Float4 v = LoadFloat4(cache + k);
      StoreFloat4(y + f.Offset(unit, k),
                  {affine(k, v.x), affine(k + 1, v.y), affine(k + 2, v.z), affine(k + 3, v.w)});
    } else {
      y[f.Offset(unit, q)] = affine(q, cache[q]);
    }
  }
}

// Threads of a flat block: about 4 items each, whole warps, 64 to 1024.
inline int FlatThreads(const FlatUnits& f) {
  const int64_t want = ((f.items + 3) / 4 + 31) / 32 * 32;
  return static_cast<int>(want < 64 ? 64 : (want > 1024 ? 1024 : want));
}

// ---- Rows of a [rows, D] layer / RMS norm in registers: a warp per row. Lane l holds
// the float4 items l, l + 32, ... of its row (kWarpRowItems at most: D up to 2048), so
// the statistics take two passes over registers and the row is read from memory once,
// with no shared memory and no block barrier. The mean comes from sums about a pivot
// (the row's first element), then is corrected by sums of the deviations from it (the
// corrected two-pass algorithm: exact when the mean is 1e4 standard deviations, and
// when the pivot is an outlier); the variance from the squares of those deviations.
// A lane sums in float (at most 64 values), the warp in double over a fixed butterfly
// (offsets 16, 8, 4, 2, 1), which leaves every lane the same bits. ----

constexpr uint32_t kWarpRowItems = 16;

// Whether a [rows, D] norm takes the warp-per-row kernel: whole float4 items (D a
// multiple of 4; x, y, gamma and beta 16-byte aligned: `aligned`), D up to
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

// ---- The cluster plan (Hopper, channels-last group norm): a cluster of `blocks` thread
// blocks per sample. A channels-last group is strided by C, so a block per (n, group)
// reads Cg floats out of every C (32 bytes per position at C / G = 8, 4 bytes for
// instance norm) and the memory system moves more than the block uses. Here each block
// takes a contiguous run of the sample's positions with all C channels and takes the
// moments of every group's part of it; the blocks of the cluster then merge each other's
// moments through distributed shared memory in rank order (Chan), so every block holds
// the same bits of every statistic. The run is read from memory once where it fits in
// shared memory; rows beyond that are read again (from L2) by the later passes.
// Thread t owns the float4 column t % cols (4 channels) of the rows t / cols,
// t / cols + lanes, ...: its 4 channels never change.
// Few samples (batch 1) would leave most of the GPU idle with a cluster per sample
// (16 blocks), so a sample's channels split into `slices` of whole groups, a cluster
// each: a block then reads a 64-byte or longer segment of every row.
// A block sums each group about a pivot of its own (ClusterPivot); where the pivot
// turns out far from the block's mean (FlatMoments' test), the block sums again about
// that mean, from shared memory for its cached rows. ----

constexpr uint32_t kClusterMaxBlocks = 16;  // a non-portable cluster size (Hopper allows 16)
constexpr uint32_t kClusterThreads = 256;   // threads a block aims for (see Of)
// Bytes of rows a block aims for where the sample allows: three blocks per H100
// multiprocessor, so the loads of one overlap the sums and stores of the others.
constexpr int64_t kClusterRowTarget = 64 * 1024;
// Rows a thread loads before it uses any.
constexpr uint32_t kClusterBatch = 4;

struct ClusterUnits {
  // C and groups: a slice's channels and groups; stride: the floats between rows in
  // memory (the tensor's C).
  uint32_t C = 0, groups = 0, Cg = 0, positions = 0, samples = 0, stride = 0;
  uint32_t slices = 1;  // clusters per sample, each C channels

  uint32_t blocks = 1;       // per sample: the size of the cluster
  uint32_t rows = 0;         // positions per block; the last blocks may have fewer
  uint32_t cached_rows = 0;  // of a block's rows, the first ones held in shared memory
  uint32_t cols = 0;         // C / 4
  uint32_t lanes = 1;        // threads per column
  uint32_t threads = 0;      // cols * lanes rounded up to whole warps

  NORMKIT_HOST_DEVICE uint32_t RowsOf(uint32_t rank) const {
    const uint32_t begin = rank * rows;
    if (begin >= positions) return 0;
    return positions - begin < rows ? positions - begin : rows;
  }
  NORMKIT_HOST_DEVICE uint32_t Active() const { return cols * lanes; }

  // Dynamic shared memory, in this order: the cached rows (floats), the threads' sums per
  // lane and channel (lanes x C x {s1, s2} doubles), the block's group sums (G x {s1, s2}
  // doubles), the block's group moments (G Moments, read by the whole cluster), the
  // groups' UnitAffine, pivots (floats) and retry flags (bytes).
  NORMKIT_HOST_DEVICE size_t LaneSumsOffset() const {
    return static_cast<size_t>(cached_rows) * C * sizeof(float);
  }
  NORMKIT_HOST_DEVICE size_t GroupSumsOffset() const {
    return LaneSumsOffset() + static_cast<size_t>(lanes) * C * 2 * sizeof(double);
  }
  NORMKIT_HOST_DEVICE size_t MomentsOffset() const {
    return GroupSumsOffset() + static_cast<size_t>(groups) * 2 * sizeof(double);
  }
  NORMKIT_HOST_DEVICE size_t AffineOffset() const {
    return MomentsOffset() + static_cast<size_t>(groups) * sizeof(Moments);
  }
  NORMKIT_HOST_DEVICE size_t PivotsOffset() const {
    return AffineOffset() + static_cast<size_t>(groups) * sizeof(UnitAffine);
  }
  NORMKIT_HOST_DEVICE size_t RetryOffset() const {
    return PivotsOffset() + static_cast<size_t>(groups) * sizeof(float);
  }
  NORMKIT_HOST_DEVICE size_t SharedBytes() const { return (RetryOffset() + groups + 15) / 16 * 16; }

  // The plan for a channels-last group norm of `s`, or false where it does not apply
  // (16-byte aligned x and y, C a multiple of 4 up to 2048, the fixed parts within
  // `max_shared`). C = 2048 gives blocks of 512 threads; the kernel's 80 registers a
  // thread leave no room for blocks of more than 768. With few samples, each splits into
  // slices of whole groups (of 16 channels at least) while the clusters still fit the
  // `multiprocessors` side by side. Blocks hold about kClusterRowTarget bytes of rows,
  // at most `max_blocks` a cluster; with few clusters, more blocks (of 8 KiB of rows at
  // least) fill the `multiprocessors`.
  static bool Of(const NormShape& s, bool aligned, int64_t max_shared, int64_t multiprocessors,
                 uint32_t max_blocks, ClusterUnits* out) {
    if (!s.channels_last || !aligned || s.C % 4 != 0 || s.C > 2048 || s.groups > s.C ||
        s.units / s.groups > 65535 || s.spatial * s.C >= kMaxIndex32) {
      return false;
    }
    ClusterUnits p;
    p.Cg = static_cast<uint32_t>(s.Cg);
    p.positions = static_cast<uint32_t>(s.spatial);
    p.samples = static_cast<uint32_t>(s.units / s.groups);
    p.stride = static_cast<uint32_t>(s.C);
    const auto slice_fits = [&](int64_t slices) {
      return s.groups % slices == 0 && (s.C / slices) % 4 == 0 && s.C / slices >= 16 &&
             p.samples * slices * max_blocks <= multiprocessors;
    };
    while (slice_fits(2 * p.slices)) p.slices *= 2;
    p.C = static_cast<uint32_t>(s.C) / p.slices;
    p.groups = static_cast<uint32_t>(s.groups) / p.slices;
    p.cols = p.C / 4;
    const int64_t clusters = static_cast<int64_t>(p.samples) * p.slices;
    const int64_t row_bytes = p.C * static_cast<int64_t>(sizeof(float));
    const auto rows_for = [&](int64_t blocks) { return (s.spatial + blocks - 1) / blocks; };
    int64_t blocks = 1;
    while (blocks < max_blocks && rows_for(blocks) * row_bytes > kClusterRowTarget) blocks *= 2;
    while (blocks < max_blocks && clusters * blocks < 2 * multiprocessors &&
           rows_for(2 * blocks) * row_bytes >= 8 * 1024) {
      blocks *= 2;
    }
    if (blocks > s.spatial) blocks = s.spatial;
    p.blocks = static_cast<uint32_t>(blocks);
    p.rows = static_cast<uint32_t>(rows_for(blocks));
    // kClusterThreads; twice as many where the rows do not fit and one block holds the
    // multiprocessor (H100: 32x512x56x56 0.47 -> 0.52 of a copy, instance norm
    // 8x64x128x128 0.32 -> 0.35; with three blocks a multiprocessor, 512 threads halve
    // the speed, the registers allowing only one).
    const auto with_threads = [&](uint32_t threads, ClusterUnits* q) {
      *q = p;
      q->cached_rows = 0;
      q->lanes = q->cols >= threads ? 1 : threads / q->cols;
      q->threads = (q->Active() + 31) / 32 * 32;
      const int64_t fixed = static_cast<int64_t>(q->SharedBytes());  // no cached rows yet
      if (fixed > max_shared) return false;
      const int64_t fit = (max_shared - fixed) / row_bytes;
      q->cached_rows = static_cast<uint32_t>(fit < q->rows ? fit : q->rows);
      return true;
    };
    ClusterUnits wide;
    if (!with_threads(kClusterThreads, &p)) return false;
    if (p.cached_rows < p.rows && with_threads(2 * kClusterThreads, &wide)) p = wide;
    *out = p;
    return true;
  }
};

// A block's pivot for group g: the mean of about 32 of its elements in the block's first
// rows (the first min(Cg, 32) channels of ClusterPivotRows rows), in float: any value
// near the mean serves, and a far one only costs the second pass. Random data put the
// block's first element past FlatMoments' limit half the time; a mean of 32 almost never.
NORMKIT_HOST_DEVICE inline uint32_t ClusterPivotChannels(const ClusterUnits& p) {
  return p.Cg < 32 ? p.Cg : 32;
}
NORMKIT_HOST_DEVICE inline uint32_t ClusterPivotRows(const ClusterUnits& p, uint32_t rows) {
  const uint32_t want = (32 + p.Cg - 1) / p.Cg;
  return want < rows ? want : rows;
}
// Row r of a block's slice: in shared memory (`cache`, rows of C) for r < cached, else
// in memory (`x`, rows `stride` apart).
NORMKIT_HOST_DEVICE inline const float* ClusterRow(const float* x, const float* cache,
                                                   const ClusterUnits& p, uint32_t cached,
                                                   uint32_t r) {
  return r < cached ? cache + static_cast<size_t>(r) * p.C : x + static_cast<size_t>(r) * p.stride;
}
NORMKIT_HOST_DEVICE inline float ClusterPivot(const float* x, const float* cache,
                                              const ClusterUnits& p, uint32_t rows, uint32_t g) {
  const uint32_t k = ClusterPivotRows(p, rows), channels = ClusterPivotChannels(p);
  if (k == 0) return 0.0f;
  float sum = 0.0f;
  for (uint32_t r = 0; r < k; ++r) {
    const float* row = ClusterRow(x, cache, p, p.cached_rows, r) + g * p.Cg;
    for (uint32_t c = 0; c < channels; ++c) sum += row[c];
  }
  return sum / static_cast<float>(k * channels);
}

// A block's moments of a group from its sums about `pivot` (count: the group's elements
// in the block); false, with *pivot moved to the block's mean, where the pivot was too
// far from it to trust the sums and `may_retry`.
NORMKIT_HOST_DEVICE inline bool ClusterMoments(const ShiftedSums& s, double count, bool may_retry,
                                               float* pivot, Moments* m) {
  m->count = count;
  if (count == 0.0) {
    m->mean = m->m2 = 0.0;
    return true;
  }
  double mean, var;
  if (!FlatMoments(false, s, count, may_retry, pivot, &mean, &var)) return false;
  m->mean = mean;
  m->m2 = var * count;
  return true;
}

struct LaneSums {
  double s1[4] = {0.0, 0.0, 0.0, 0.0};
  double s2[4] = {0.0, 0.0, 0.0, 0.0};
};

NORMKIT_HOST_DEVICE inline float LaneOf(const Float4& v, int l) {
  return l == 0 ? v.x : l == 1 ? v.y : l == 2 ? v.z : v.w;
}

// Loads rows r0, r0 + lanes, ... (at most kClusterBatch, below `rows`) of column `col`
// into v (ClusterRow); returns how many.
NORMKIT_HOST_DEVICE inline uint32_t ClusterLoadRows(const float* x, const float* cache,
                                                    const ClusterUnits& p, uint32_t rows,
                                                    uint32_t cached, uint32_t col, uint32_t r0,
                                                    Float4 v[kClusterBatch]) {
  uint32_t n = 0;
  for (uint32_t r = r0; n < kClusterBatch && r < rows; r += p.lanes, ++n) {
    v[n] = LoadFloat4(ClusterRow(x, cache, p, cached, r) + 4 * col);
  }
  return n;
}

// A cluster block's pass over its rows for thread (col, lane): the sums of each of the
// thread's 4 channels about its group's pivot, in float over up to kClusterBatch rows
// (loaded before any is used), in double across them.
NORMKIT_HOST_DEVICE inline LaneSums ClusterThreadSums(const float* x, const float* cache,
                                                      const ClusterUnits& p, uint32_t rows,
                                                      uint32_t col, uint32_t lane,
                                                      const float pivot[4]) {
  LaneSums sums;
  const uint32_t cached = rows < p.cached_rows ? rows : p.cached_rows;
  for (uint32_t r0 = lane; r0 < rows; r0 += kClusterBatch * p.lanes) {
    Float4 v[kClusterBatch];
    const uint32_t n = ClusterLoadRows(x, cache, p, rows, cached, col, r0, v);
    for (int l = 0; l < 4; ++l) {
      float a1 = 0.0f, a2 = 0.0f;
      for (uint32_t j = 0; j < n; ++j) {
        const float d = LaneOf(v[j], l) - pivot[l];
        a1 += d;
        a2 += d * d;
      }
      sums.s1[l] += static_cast<double>(a1);
      sums.s2[l] += static_cast<double>(a2);
    }
  }
  return sums;
}

// The output pass of thread (col, lane): y = act(fmaf(x - mean_f, a, b)) with each of its
// channels' UnitAffine terms (mean_f[l], a[l] = Scale(gamma), b[l] = Shift(a, beta)).
NORMKIT_HOST_DEVICE inline void ClusterThreadApply(const float* x, const float* cache, float* y,
                                                   const ClusterUnits& p, uint32_t rows,
                                                   uint32_t col, uint32_t lane,
                                                   const float mean_f[4], const float a[4],
                                                   const float b[4], int32_t activation) {
  const uint32_t cached = rows < p.cached_rows ? rows : p.cached_rows;
  for (uint32_t r0 = lane; r0 < rows; r0 += kClusterBatch * p.lanes) {
    Float4 v[kClusterBatch];
    const uint32_t n = ClusterLoadRows(x, cache, p, rows, cached, col, r0, v);
    for (uint32_t j = 0; j < n; ++j) {
      const uint32_t r = r0 + j * p.lanes;
      StoreFloat4(y + static_cast<size_t>(r) * p.stride + 4 * col,
                  {Activate(fmaf(v[j].x - mean_f[0], a[0], b[0]), activation),
                   Activate(fmaf(v[j].y - mean_f[1], a[1], b[1]), activation),
                   Activate(fmaf(v[j].z - mean_f[2], a[2], b[2]), activation),
                   Activate(fmaf(v[j].w - mean_f[3], a[3], b[3]), activation)});
    }
  }
}

// ---- The cluster plan for channels-first units (Hopper): a unit (one (n, group),
// contiguous) too large for one block's shared memory, or one of too few units to fill
// the GPU, is split over a cluster of blocks, each holding a contiguous run of its
// items in shared memory. A block takes the moments of its run as the flat plan does
// (sums about a pivot from its own first elements, again about its mean where that was
// far off); the cluster merges them in rank order (Chan) and every block writes its run
// from shared memory. One launch and one read of x, where the split plan needs three
// launches, scratch memory and two reads. ----
struct ClusterRuns {
  uint32_t units = 0;
  uint32_t blocks = 1;     // per unit: the size of the cluster
  uint32_t run_items = 0;  // items of 4 floats a block; the last blocks may have fewer
  uint32_t items = 0;      // per unit
  uint32_t threads = kClusterThreads;

  NORMKIT_HOST_DEVICE uint32_t ItemsOf(uint32_t rank) const {
    const uint32_t begin = rank * run_items;
    if (begin >= items) return 0;
    return items - begin < run_items ? items - begin : run_items;
  }
  size_t SharedBytes() const { return static_cast<size_t>(run_items) * 4 * sizeof(float); }

  // The plan for the channels-first units of `f` (items of 4 floats), or false where it
  // does not apply: units of items of 1 float, or too large for `max_blocks` blocks of
  // `max_shared` bytes. Runs of about kClusterRowTarget bytes; with few units, more
  // blocks (runs of 8 KiB at least) fill the `multiprocessors`.
  static bool Of(const NormShape& s, const FlatUnits& f, int64_t max_shared,
                 int64_t multiprocessors, uint32_t max_blocks, ClusterRuns* out) {
    if (s.channels_last || !f.vector || s.units > 65535 || s.units * s.count >= kMaxIndex32) {
      return false;
    }
    ClusterRuns c;
    c.units = static_cast<uint32_t>(s.units);
    c.items = f.items;
    const auto run_for = [&](int64_t blocks) { return (int64_t{c.items} + blocks - 1) / blocks; };
    const int64_t item_bytes = 4 * sizeof(float);
    int64_t blocks = 1;
    while (blocks < max_blocks && run_for(blocks) * item_bytes > kClusterRowTarget) blocks *= 2;
    while (blocks < max_blocks && c.units * blocks < 2 * multiprocessors &&
           run_for(2 * blocks) * item_bytes >= 8 * 1024) {
      blocks *= 2;
    }
    if (blocks > c.items) blocks = c.items;
    c.blocks = static_cast<uint32_t>(blocks);
    c.run_items = static_cast<uint32_t>(run_for(blocks));
    if (static_cast<int64_t>(c.SharedBytes()) > max_shared) return false;
    *out = c;
    return true;
  }
};

// A block's pivot for its run (in shared memory, `elems` floats): the mean of its first
// 32 elements (or all of them), in float.
NORMKIT_HOST_DEVICE inline float RunPivot(const float* run, uint32_t elems) {
  const uint32_t n = elems < 32 ? elems : 32;
  if (n == 0) return 0.0f;
  float sum = 0.0f;
  for (uint32_t k = 0; k < n; ++k) sum += run[k];
  return sum / static_cast<float>(n);
}

// The output pass of thread `tid` over a block's run: items [first, first + items) of
// `unit`, read from `run` (item first at run[0]).
NORMKIT_HOST_DEVICE inline void FlatApplyRun(const float* run, float* y, const FlatUnits& f,
                                             uint32_t unit, uint32_t first, uint32_t items,
                                             uint32_t tid, uint32_t threads, const UnitAffine& ua,
                                             const float* gamma, const float* beta,
                                             int32_t activation) {
  const auto affine = [&](uint32_t k, float v) {
    const uint32_t c = f.Channel(unit, k);
    return ua.Apply(v, gamma ? gamma[c] : 1.0f, beta ? beta[c] : 0.0f, activation);
  };
  for (uint32_t q = tid; q < items; q += threads) {
    const uint32_t k = 4 * (first + q);
    const Float4 v = LoadFloat4(run + 4 * q);
    StoreFloat4(y + f.Offset(unit, k),
                {affine(k, v.x), affine(k + 1, v.y), affine(k + 2, v.z), affine(k + 3, v.w)});
  }
}

}  // namespace cuda
}  // namespace normkit

#endif  // NORMKIT_CUDA_NORM_MATH_H_
