// SPDX-License-Identifier: Apache-2.0
// Batch norm's training-mode kernels for every SIMD target, dispatched at run time. Every
// pass is memory-bound: float vectors, sums in float runs carried in double, the last
// partial vector of a span or row padded through a stack buffer so that every element
// takes the same operations. Each kernel is a template on the stored type T of its tensors
// (float, bfloat16, float16: storage-inl.h's LoadF / StoreF), so a half call gets the bits
// of the float32 call on its widened values, rounded once when stored.
#include "cpu/kernels/batch_norm_training.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "hwy/cache_control.h"

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/batch_norm_training.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep: must precede highway.h
#include "hwy/highway.h"
#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
// clang-format on
#include "cpu/kernels/moments-inl.h"
#include "cpu/kernels/storage-inl.h"

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using VF = hn::Vec<DF>;
using VD = hn::Vec<DD>;

// Stack buffers of one vector of any target.
constexpr size_t kMaxFloatLanes = static_cast<size_t>(kWidestVectorFloats);
static_assert(HWY_MAX_BYTES / sizeof(float) <= kMaxFloatLanes, "a vector wider than the buffers");

// buf[0, count) = x[0, count) widened to float: a span's last partial vector.
template <typename T>
HWY_INLINE void WidenTail(const T* x, size_t count, float* buf) {
  if constexpr (std::is_same<T, float>::value) {
    std::memcpy(buf, x, count * sizeof(float));
  } else {
    for (size_t j = 0; j < count; ++j) buf[j] = FloatAt(x + j);
  }
}

// y[0, count) = v's first count lanes stored as T (count < Lanes(d)).
template <typename T>
HWY_INLINE void StoreTail(VF v, size_t count, T* y) {
  HWY_ALIGN T buf[kMaxFloatLanes];
  StoreF(DF(), v, buf);
  std::memcpy(y, buf, count * sizeof(T));
}

// fn(x, y) with x and y cast to their stored types: a kernel on an input and an output
// tensor, called for run-time Storages.
template <class Fn>
HWY_INLINE void WithStorages(const void* x, Storage xs, void* y, Storage ys, const Fn& fn) {
  WithStorage(x, xs, [&](auto xt) {
    WithStorage(y, ys, [&](auto yt) {
      using TY = std::remove_const_t<std::remove_pointer_t<decltype(yt)>>;
      fn(xt, const_cast<TY*>(yt));
    });
  });
}

// ---- the forward: channels-last blocks of fewer channels than lanes ----

bool FlatChannelsImpl(int64_t channels) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  return channels < N && N % channels == 0;
}

// Adds v - m to a and, kSquares, its square to q.
template <bool kSquares>
HWY_INLINE void AddDeviation(VF v, VF m, VF& a, VF& q) {
  const VF dev = hn::Sub(v, m);
  a = hn::Add(a, dev);
  if (kSquares) q = hn::MulAdd(dev, dev, q);
}

// Lane-wise sums of x - m over the flat span x[0, n) (two float chains of vector pairs,
// flushed into lo / hi every kFlushVectors vectors) and, kSquares, of its squares into
// sq_lo / sq_hi; the last partial vector is padded with `pad`'s lanes.
template <bool kSquares, typename T>
HWY_INLINE void FlatSums(const T* HWY_RESTRICT x, size_t n, VF m, VF pad, VD& lo, VD& hi, VD& sq_lo,
                         VD& sq_hi) {
  const DF d;
  const size_t N = hn::Lanes(d);
  VF a0 = hn::Zero(d), a1 = hn::Zero(d), q0 = hn::Zero(d), q1 = hn::Zero(d);
  size_t i = 0, pairs = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    AddDeviation<kSquares>(LoadF(d, x + i), m, a0, q0);
    AddDeviation<kSquares>(LoadF(d, x + i + N), m, a1, q1);
    if (++pairs == kFlushVectors / 2) {
      AccumulateWide(hn::Add(a0, a1), lo, hi);
      if (kSquares) AccumulateWide(hn::Add(q0, q1), sq_lo, sq_hi);
      a0 = a1 = q0 = q1 = hn::Zero(d);
      pairs = 0;
    }
  }
  if (i + N <= n) {
    AddDeviation<kSquares>(LoadF(d, x + i), m, a0, q0);
    i += N;
  }
  if (i < n) {
    HWY_ALIGN float buf[kMaxFloatLanes];
    hn::Store(pad, d, buf);
    WidenTail(x + i, n - i, buf);
    AddDeviation<kSquares>(hn::Load(d, buf), m, a1, q1);
  }
  AccumulateWide(hn::Add(a0, a1), lo, hi);
  if (kSquares) AccumulateWide(hn::Add(q0, q1), sq_lo, sq_hi);
}

// Lane l's double sum (lo holds the lower half of the lanes, hi the upper) added to
// out[l % C], lanes in order.
HWY_INLINE void AddLanesToChannels(VD lo, VD hi, size_t C, double* out) {
  const DD dd;
  HWY_ALIGN double lanes[kMaxFloatLanes + 1];
  const size_t half = hn::Lanes(dd);
  hn::StoreU(lo, dd, lanes);
  hn::StoreU(hi, dd, lanes + half);
  const size_t N = hn::Lanes(DF());
  for (size_t l = 0; l < N; ++l) out[l % C] += lanes[l];
}

template <typename T>
void FlatColumnMomentsT(const T* HWY_RESTRICT x, int64_t rows, int64_t channels, Moments* out) {
  const DF d;
  const DD dd;
  const size_t N = hn::Lanes(d), C = static_cast<size_t>(channels);
  const size_t n = static_cast<size_t>(rows) * C;
  const double count = static_cast<double>(rows);
  // Pass 1: each channel's sum, hence its mean (in float: the pivot of pass 2).
  double sum[kMaxFloatLanes] = {}, s1[kMaxFloatLanes] = {}, s2[kMaxFloatLanes] = {};
  VD lo = hn::Zero(dd), hi = hn::Zero(dd), unused_lo = hn::Zero(dd), unused_hi = hn::Zero(dd);
  FlatSums<false>(x, n, hn::Zero(d), hn::Zero(d), lo, hi, unused_lo, unused_hi);
  AddLanesToChannels(lo, hi, C, sum);
  HWY_ALIGN float pivot[kMaxFloatLanes];
  for (size_t l = 0; l < N; ++l) pivot[l] = static_cast<float>(sum[l % C] / count);
  // Pass 2: shifted sums about the pivots (the padding: the pivots, deviation 0).
  const VF m = hn::Load(d, pivot);
  VD q_lo = hn::Zero(dd), q_hi = hn::Zero(dd);
  lo = hi = hn::Zero(dd);
  FlatSums<true>(x, n, m, m, lo, hi, q_lo, q_hi);
  AddLanesToChannels(lo, hi, C, s1);
  AddLanesToChannels(q_lo, q_hi, C, s2);
  for (size_t c = 0; c < C; ++c) {
    const double shift = s1[c] / count;
    out[c] = Moments{count, static_cast<double>(pivot[c]) + shift, s2[c] - s1[c] * shift};
  }
}

void FlatColumnMomentsImpl(const void* x, Storage xs, int64_t rows, int64_t channels,
                           Moments* out) {
  WithStorage(x, xs, [&](auto xt) { FlatColumnMomentsT(xt, rows, channels, out); });
}

template <typename TX, typename TY>
void ApplyFlatNormT(const TX* x, TY* y, int64_t rows, int64_t channels, const float* mean,
                    const float* scale, const float* shift) {
  const DF d;
  const size_t N = hn::Lanes(d), C = static_cast<size_t>(channels);
  const size_t n = static_cast<size_t>(rows) * C;
  HWY_ALIGN float lanes[3][kMaxFloatLanes];
  for (size_t l = 0; l < N; ++l) {
    lanes[0][l] = mean[l % C];
    lanes[1][l] = scale[l % C];
    lanes[2][l] = shift[l % C];
  }
  const VF m = hn::Load(d, lanes[0]), s = hn::Load(d, lanes[1]), b = hn::Load(d, lanes[2]);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    StoreF(d, hn::MulAdd(hn::Sub(LoadF(d, x + i), m), s, b), y + i);
  }
  if (i < n) {
    HWY_ALIGN float buf[kMaxFloatLanes] = {};
    WidenTail(x + i, n - i, buf);
    StoreTail(hn::MulAdd(hn::Sub(hn::Load(d, buf), m), s, b), n - i, y + i);
  }
}

void ApplyFlatNormImpl(const void* x, Storage xs, void* y, Storage ys, int64_t rows,
                       int64_t channels, const float* mean, const float* scale,
                       const float* shift) {
  WithStorages(x, xs, y, ys, [&](auto xt, auto yt) {
    ApplyFlatNormT(xt, yt, rows, channels, mean, scale, shift);
  });
}

// ---- the forward: channels-first planes of a few values, in channel blocks ----

// Vectors of a channel block: its sums stay in registers on every target with 32.
constexpr size_t kBlockVectors = 8;

// Samples ahead whose block lines a walk requests (its rows are a sample's stride apart,
// where the hardware prefetchers do not follow).
constexpr size_t kPrefetchRows = 16;

int64_t ShortPlaneBlockWidthImpl(int64_t plane) {
  const size_t N = hn::Lanes(DF());
  const size_t S = static_cast<size_t>(plane);
  if (plane <= 0) return 0;
  size_t a = S, b = N;  // gcd, then lcm(S, N): the narrowest block of whole planes and vectors
  while (b != 0) {
    const size_t t = a % b;
    a = b;
    b = t;
  }
  const size_t unit = S / a * N;
  if (unit > kBlockVectors * N) return 0;
  return static_cast<int64_t>(kBlockVectors * N / unit * unit);
}

// Adds v's lanes, widened, to out[0, lanes).
HWY_INLINE void AddToDoubleLanes(VF v, double* HWY_RESTRICT out) {
  const DF d;
  HWY_ALIGN float lanes[kMaxFloatLanes];
  hn::Store(v, d, lanes);
  for (size_t l = 0; l < hn::Lanes(d); ++l) out[l] += static_cast<double>(lanes[l]);
}

// Requests the `width` values of the row kPrefetchRows rows after `row` (stride values a
// row), when the walk reaches that far.
template <typename T>
HWY_INLINE void PrefetchAhead(const T* row, size_t r, size_t rows, size_t stride, size_t width) {
  if (r + kPrefetchRows >= rows) return;
  const T* ahead = row + kPrefetchRows * stride;
  for (size_t i = 0; i < width; i += 64 / sizeof(T)) hwy::Prefetch(ahead + i);
}

// Lane-wise sums over `rows` rows of the block (width floats of each row, rows `stride`
// floats apart) of x - pivot and, kSquares, of its squares, in float runs of kFlushVectors
// rows added to the double lanes sum / squares. Lanes past width are zero in x and pivot.
// kPartial: the last of the V vectors holds fewer than a vector's floats (read through a
// zeroed buffer). The pivots are loaded from L1 each row and the vector loop unrolled:
// held in registers beside the sums, 24 vectors and temporaries spilled the sums.
template <size_t V, bool kSquares, bool kPartial, typename T>
HWY_INLINE void BlockSumsT(const T* HWY_RESTRICT x, size_t rows, size_t stride, size_t width,
                           const float* HWY_RESTRICT pivot, double* sum, double* squares) {
  const DF d;
  const size_t N = hn::Lanes(d);
  constexpr size_t kWhole = kPartial ? V - 1 : V;
  const size_t last = width - (V - 1) * N;  // floats of the last vector, 1..N
  HWY_ALIGN float padded[kMaxFloatLanes] = {};
  VecSlots<DF, V> a, q;
  const auto add = [&](size_t v, VF xv) {
    const VF dev = hn::Sub(xv, hn::Load(d, pivot + v * N));
    a.Set(v, hn::Add(a.Get(v), dev));
    if (kSquares) q.Set(v, hn::MulAdd(dev, dev, q.Get(v)));
  };
  for (size_t r0 = 0; r0 < rows; r0 += kFlushVectors) {
    for (size_t v = 0; v < V; ++v) a.Set(v, hn::Zero(d)), q.Set(v, hn::Zero(d));
    const size_t r1 = std::min(rows, r0 + kFlushVectors);
    for (size_t r = r0; r < r1; ++r) {
      const T* row = x + r * stride;
      PrefetchAhead(row, r, rows, stride, width);
      HWY_UNROLL(8)
      for (size_t v = 0; v < kWhole; ++v) add(v, LoadF(d, row + v * N));
      if (kPartial) {
        WidenTail(row + (V - 1) * N, last, padded);
        add(V - 1, hn::Load(d, padded));
      }
    }
    for (size_t v = 0; v < V; ++v) {
      AddToDoubleLanes(a.Get(v), sum + v * N);
      if (kSquares) AddToDoubleLanes(q.Get(v), squares + v * N);
    }
  }
}

template <size_t V, bool kSquares, typename T>
HWY_INLINE void BlockSums(const T* HWY_RESTRICT x, size_t rows, size_t stride, size_t width,
                          const float* HWY_RESTRICT pivot, double* sum, double* squares) {
  if (width % hn::Lanes(DF()) != 0) {
    return BlockSumsT<V, kSquares, true>(x, rows, stride, width, pivot, sum, squares);
  }
  BlockSumsT<V, kSquares, false>(x, rows, stride, width, pivot, sum, squares);
}

// Values of each channel a pivot is the mean of: its planes in the block's first rows.
constexpr size_t kPivotValues = 16;

// The block's moments from its lanes' shifted sums about `pivot` (a pivot a channel, the
// same in its S lanes), summed per channel in double; with check_pivot, false when a
// channel's pivot was too far from its mean to keep the digits (PivotTooFar), out then
// unset.
HWY_INLINE bool ChannelMoments(const double* s1, const double* s2, const float* pivot,
                               size_t channels, size_t S, double count, bool check_pivot,
                               Moments* out) {
  for (size_t c = 0; c < channels; ++c) {
    double t1 = 0.0, t2 = 0.0;
    for (size_t j = c * S; j < (c + 1) * S; ++j) t1 += s1[j], t2 += s2[j];
    if (check_pivot && PivotTooFar(count, t1, t2)) return false;
    const double shift = t1 / count;
    const double m2 = t2 - t1 * shift;
    out[c] = Moments{count, static_cast<double>(pivot[c * S]) + shift, m2 > 0.0 ? m2 : 0.0};
  }
  return true;
}

// One pass over the block (the caller's rows: L2-sized) of shifted sums about each
// channel's pivot, the mean of its first kPivotValues values (its planes in the first
// rows): float runs of at most 64 terms a lane carried in double. A block with a channel
// whose pivot was too far from its mean (more than its spread: rare for a mean of 16
// values) takes a second pass from L2 about the means the first found, rounded to float.
// (Two passes always, the sums then the shifted sums about the float means, took 1.3
// times as long on 128x1024x16.)
template <size_t V, typename T>
void ShortPlaneBlockMomentsT(const T* x, size_t rows, size_t stride, size_t width, size_t S,
                             Moments* out) {
  constexpr size_t kMax = kBlockVectors * kMaxFloatLanes;
  double s1[kMax] = {}, s2[kMax] = {};
  HWY_ALIGN float pivot[kMax] = {};
  const size_t channels = width / S;
  const size_t pivot_rows = std::min(rows, (kPivotValues + S - 1) / S);
  for (size_t c = 0; c < channels; ++c) {
    float total = 0.0f;
    for (size_t r = 0; r < pivot_rows; ++r) {
      for (size_t j = c * S; j < (c + 1) * S; ++j) total += FloatAt(x + r * stride + j);
    }
    const float mean = total / static_cast<float>(pivot_rows * S);
    for (size_t j = c * S; j < (c + 1) * S; ++j) pivot[j] = mean;
  }
  const double count = static_cast<double>(rows) * static_cast<double>(S);
  BlockSums<V, true>(x, rows, stride, width, pivot, s1, s2);
  if (ChannelMoments(s1, s2, pivot, channels, S, count, true, out)) return;
  for (size_t c = 0; c < channels; ++c) {
    double t1 = 0.0;
    for (size_t j = c * S; j < (c + 1) * S; ++j) t1 += s1[j];
    const float mean = static_cast<float>(static_cast<double>(pivot[c * S]) + t1 / count);
    for (size_t j = c * S; j < (c + 1) * S; ++j) pivot[j] = mean, s1[j] = s2[j] = 0.0;
  }
  BlockSums<V, true>(x, rows, stride, width, pivot, s1, s2);
  ChannelMoments(s1, s2, pivot, channels, S, count, false, out);
}

void ShortPlaneBlockMomentsImpl(const void* x, Storage xs, int64_t rows, int64_t row_stride,
                                int64_t width, int64_t plane, Moments* out) {
  const size_t N = hn::Lanes(DF());
  const size_t w = static_cast<size_t>(width), V = (w + N - 1) / N;
  const auto run = [&](auto vectors) {
    WithStorage(x, xs, [&](auto xt) {
      ShortPlaneBlockMomentsT<decltype(vectors)::value>(xt, static_cast<size_t>(rows),
                                                        static_cast<size_t>(row_stride), w,
                                                        static_cast<size_t>(plane), out);
    });
  };
  switch (V) {
    case 1: return run(std::integral_constant<size_t, 1>());
    case 2: return run(std::integral_constant<size_t, 2>());
    case 3: return run(std::integral_constant<size_t, 3>());
    case 4: return run(std::integral_constant<size_t, 4>());
    case 5: return run(std::integral_constant<size_t, 5>());
    case 6: return run(std::integral_constant<size_t, 6>());
    case 7: return run(std::integral_constant<size_t, 7>());
    default: return run(std::integral_constant<size_t, 8>());
  }
}

// ---- the backward ----

// One vector of x and dy about the lane-wise mean m: sum(dy), sum(dy * (x - m)) and the
// maxima of |dy| and |x - m|.
HWY_INLINE void AddGrad(VF x, VF dy, VF m, VF& s, VF& t, VF& max_dy, VF& max_xmu) {
  const VF xmu = hn::Sub(x, m);
  s = hn::Add(s, dy);
  t = hn::MulAdd(dy, xmu, t);
  max_dy = hn::Max(max_dy, hn::Abs(dy));
  max_xmu = hn::Max(max_xmu, hn::Abs(xmu));
}

// dx of one vector from its lane-wise coefficients.
HWY_INLINE VF GradOf(VF x, VF dy, VF m, VF r, VF mean_dy, VF mean_dy_xhat, VF p) {
  const VF xhat = hn::Mul(hn::Sub(x, m), r);
  return hn::Mul(hn::NegMulAdd(xhat, mean_dy_xhat, hn::Sub(dy, mean_dy)), p);
}

// Lane-wise sums of the flat span x[0, n), dy[0, n) about the lane-wise mean m: two float
// chains of vector pairs, flushed into double (lo: the lower half of the lanes, hi: the
// upper) every kFlushVectors vectors; the last partial vector padded with x = m, dy = 0.
template <typename T>
HWY_INLINE void FlatGradSums(const T* HWY_RESTRICT x, const T* HWY_RESTRICT dy, size_t n, VF m,
                             VD& s_lo, VD& s_hi, VD& t_lo, VD& t_hi, VF& max_dy, VF& max_xmu) {
  const DF d;
  const size_t N = hn::Lanes(d);
  VF s0 = hn::Zero(d), s1 = hn::Zero(d), t0 = hn::Zero(d), t1 = hn::Zero(d);
  size_t i = 0, pairs = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    AddGrad(LoadF(d, x + i), LoadF(d, dy + i), m, s0, t0, max_dy, max_xmu);
    AddGrad(LoadF(d, x + i + N), LoadF(d, dy + i + N), m, s1, t1, max_dy, max_xmu);
    if (++pairs == kFlushVectors / 2) {
      AccumulateWide(hn::Add(s0, s1), s_lo, s_hi);
      AccumulateWide(hn::Add(t0, t1), t_lo, t_hi);
      s0 = s1 = t0 = t1 = hn::Zero(d);
      pairs = 0;
    }
  }
  if (i + N <= n) {
    AddGrad(LoadF(d, x + i), LoadF(d, dy + i), m, s0, t0, max_dy, max_xmu);
    i += N;
  }
  if (i < n) {
    HWY_ALIGN float bx[kMaxFloatLanes];
    HWY_ALIGN float bdy[kMaxFloatLanes] = {};
    hn::Store(m, d, bx);
    WidenTail(x + i, n - i, bx);
    WidenTail(dy + i, n - i, bdy);
    AddGrad(hn::Load(d, bx), hn::Load(d, bdy), m, s1, t1, max_dy, max_xmu);
  }
  AccumulateWide(hn::Add(s0, s1), s_lo, s_hi);
  AccumulateWide(hn::Add(t0, t1), t_lo, t_hi);
}

template <typename T>
GradSums SpanGradSumsT(const T* HWY_RESTRICT x, const T* HWY_RESTRICT dy, int64_t n, float mean) {
  const DF d;
  const DD dd;
  VD s_lo = hn::Zero(dd), s_hi = hn::Zero(dd), t_lo = hn::Zero(dd), t_hi = hn::Zero(dd);
  VF max_dy = hn::Zero(d), max_xmu = hn::Zero(d);
  FlatGradSums(x, dy, static_cast<size_t>(n), hn::Set(d, mean), s_lo, s_hi, t_lo, t_hi, max_dy,
               max_xmu);
  GradSums out;
  out.sum_dy = SumLanes(hn::Add(s_lo, s_hi));
  out.sum_dy_xmu = SumLanes(hn::Add(t_lo, t_hi));
  out.max_abs_dy = hn::GetLane(hn::MaxOfLanes(d, max_dy));
  out.max_abs_xmu = hn::GetLane(hn::MaxOfLanes(d, max_xmu));
  return out;
}

GradSums SpanGradSumsImpl(const void* x, const void* dy, Storage s, int64_t n, float mean) {
  return WithStorage(
      x, s, [&](auto xt) { return SpanGradSumsT(xt, static_cast<decltype(xt)>(dy), n, mean); });
}

void PlaneGradSumsImpl(const void* x, const void* dy, Storage s, int64_t n, int64_t count,
                       const float* HWY_RESTRICT mean, int64_t channels, int64_t first_channel,
                       GradSums* out) {
  WithStorage(x, s, [&](auto xt) {
    const auto* dyt = static_cast<decltype(xt)>(dy);
    int64_t c = first_channel % channels;
    for (int64_t j = 0; j < count; ++j) {
      out[j] = SpanGradSumsT(xt + j * n, dyt + j * n, n, mean[c]);
      if (++c == channels) c = 0;
    }
  });
}

// Channels-first planes of a few values in channel blocks (ShortPlaneBlockWidth), the
// block walked down the samples a sub-block of at most kGradBlockVectors vectors at a
// time: its four accumulators a vector (the two sums, the two maxima) stay in registers.
constexpr size_t kGradBlockVectors = 4;

// Lane-wise sums over `rows` rows of a sub-block (width floats of each row of x and dy,
// rows `stride` floats apart) about the lanes' means: float runs of kFlushVectors rows
// added to the double lanes s, t; the maxima into max_dy, max_xmu. kPartial: the last of
// the V vectors is read through zeroed buffers (dy 0 and x - mean 0 add nothing).
template <size_t V, bool kPartial, typename T>
HWY_INLINE void BlockGradSumsT(const T* HWY_RESTRICT x, const T* HWY_RESTRICT dy, size_t rows,
                               size_t stride, size_t width, const float* HWY_RESTRICT mean,
                               double* s, double* t, float* max_dy, float* max_xmu) {
  const DF d;
  const size_t N = hn::Lanes(d);
  constexpr size_t kWhole = kPartial ? V - 1 : V;
  const size_t last = width - (V - 1) * N;
  HWY_ALIGN float px[kMaxFloatLanes] = {};
  HWY_ALIGN float pdy[kMaxFloatLanes] = {};
  VecSlots<DF, V> a, b, mdy, mxmu;
  for (size_t v = 0; v < V; ++v) mdy.Set(v, hn::Zero(d)), mxmu.Set(v, hn::Zero(d));
  const auto add = [&](size_t v, VF xv, VF dyv) {
    VF sv = a.Get(v), tv = b.Get(v), m1 = mdy.Get(v), m2 = mxmu.Get(v);
    AddGrad(xv, dyv, hn::Load(d, mean + v * N), sv, tv, m1, m2);
    a.Set(v, sv), b.Set(v, tv), mdy.Set(v, m1), mxmu.Set(v, m2);
  };
  for (size_t r0 = 0; r0 < rows; r0 += kFlushVectors) {
    for (size_t v = 0; v < V; ++v) a.Set(v, hn::Zero(d)), b.Set(v, hn::Zero(d));
    const size_t r1 = std::min(rows, r0 + kFlushVectors);
    for (size_t r = r0; r < r1; ++r) {
      const T* xr = x + r * stride;
      const T* dyr = dy + r * stride;
      PrefetchAhead(xr, r, rows, stride, width);
      PrefetchAhead(dyr, r, rows, stride, width);
      HWY_UNROLL(4)
      for (size_t v = 0; v < kWhole; ++v) add(v, LoadF(d, xr + v * N), LoadF(d, dyr + v * N));
      if (kPartial) {
        WidenTail(xr + (V - 1) * N, last, px);
        WidenTail(dyr + (V - 1) * N, last, pdy);
        add(V - 1, hn::Load(d, px), hn::Load(d, pdy));
      }
    }
    for (size_t v = 0; v < V; ++v) {
      AddToDoubleLanes(a.Get(v), s + v * N);
      AddToDoubleLanes(b.Get(v), t + v * N);
    }
  }
  for (size_t v = 0; v < V; ++v) {
    hn::Store(mdy.Get(v), d, max_dy + v * N);
    hn::Store(mxmu.Get(v), d, max_xmu + v * N);
  }
}

template <size_t V, typename T>
HWY_INLINE void BlockGradSums(const T* HWY_RESTRICT x, const T* HWY_RESTRICT dy, size_t rows,
                              size_t stride, size_t width, const float* HWY_RESTRICT mean,
                              double* s, double* t, float* max_dy, float* max_xmu) {
  if (width % hn::Lanes(DF()) != 0) {
    return BlockGradSumsT<V, true>(x, dy, rows, stride, width, mean, s, t, max_dy, max_xmu);
  }
  BlockGradSumsT<V, false>(x, dy, rows, stride, width, mean, s, t, max_dy, max_xmu);
}

template <typename T>
void ShortPlaneBlockGradSumsT(const T* x, const T* dy, int64_t rows, int64_t row_stride,
                              int64_t width, int64_t plane, const float* mean, GradSums* out) {
  const size_t N = hn::Lanes(DF());
  const size_t W = static_cast<size_t>(width), S = static_cast<size_t>(plane);
  const size_t R = static_cast<size_t>(rows), stride = static_cast<size_t>(row_stride);
  constexpr size_t kMax = kBlockVectors * kMaxFloatLanes;
  HWY_ALIGN float lane_mean[kMax] = {};
  HWY_ALIGN float max_dy[kMax] = {};
  HWY_ALIGN float max_xmu[kMax] = {};
  double s[kMax] = {}, t[kMax] = {};
  for (size_t j = 0; j < W; ++j) lane_mean[j] = mean[j / S];
  for (size_t f = 0; f < W; f += kGradBlockVectors * N) {
    const size_t w = std::min(W - f, kGradBlockVectors * N);
    const size_t V = (w + N - 1) / N;
    const auto run = [&](auto vectors) {
      BlockGradSums<decltype(vectors)::value>(x + f, dy + f, R, stride, w, lane_mean + f, s + f,
                                              t + f, max_dy + f, max_xmu + f);
    };
    switch (V) {
      case 1: run(std::integral_constant<size_t, 1>()); break;
      case 2: run(std::integral_constant<size_t, 2>()); break;
      case 3: run(std::integral_constant<size_t, 3>()); break;
      default: run(std::integral_constant<size_t, 4>()); break;
    }
  }
  for (size_t c = 0; c < W / S; ++c) {
    GradSums g;
    for (size_t j = c * S; j < (c + 1) * S; ++j) {
      MergeGradSums(g, GradSums{s[j], t[j], max_dy[j], max_xmu[j]});
    }
    out[c] = g;
  }
}

// Channels-last with fewer channels than lanes, a divisor of them (1, 2, 4 on AVX2): the
// block is one flat span whose lane l is always channel l % channels.
template <typename T>
void PatternGradSums(const T* HWY_RESTRICT x, const T* HWY_RESTRICT dy, size_t rows, size_t C,
                     const float* HWY_RESTRICT mean, GradSums* out) {
  const DF d;
  const DD dd;
  const size_t N = hn::Lanes(d);
  HWY_ALIGN float lanes[kMaxFloatLanes];
  for (size_t l = 0; l < N; ++l) lanes[l] = mean[l % C];
  VD s_lo = hn::Zero(dd), s_hi = hn::Zero(dd), t_lo = hn::Zero(dd), t_hi = hn::Zero(dd);
  VF max_dy = hn::Zero(d), max_xmu = hn::Zero(d);
  FlatGradSums(x, dy, rows * C, hn::Load(d, lanes), s_lo, s_hi, t_lo, t_hi, max_dy, max_xmu);
  // Lane l of the lower half is lane l of DF; the upper half follows.
  HWY_ALIGN double s[kMaxFloatLanes + 1], t[kMaxFloatLanes + 1];
  HWY_ALIGN float mdy[kMaxFloatLanes], mxmu[kMaxFloatLanes];
  const size_t half = hn::Lanes(dd);
  hn::StoreU(s_lo, dd, s);
  hn::StoreU(s_hi, dd, s + half);
  hn::StoreU(t_lo, dd, t);
  hn::StoreU(t_hi, dd, t + half);
  hn::Store(max_dy, d, mdy);
  hn::Store(max_xmu, d, mxmu);
  for (size_t c = 0; c < C; ++c) out[c] = GradSums();
  for (size_t l = 0; l < N; ++l) {
    const GradSums lane{s[l], t[l], mdy[l], mxmu[l]};
    MergeGradSums(out[l % C], lane);
  }
}

// Channels-last rows of one or two whole vectors of channels (16 or 32 on AVX-512): the
// four accumulators of each vector stay in registers, in the same order of adds as
// ColumnGradSumsT's (the same bits). In scratch memory every row's adds waited on the last
// row's stores: bfloat16 8x32x128x128 NHWC read 0.4-0.65 of its memory bound.
template <size_t V, typename T>
void RegisterColumnGradSums(const T* HWY_RESTRICT x, const T* HWY_RESTRICT dy, size_t R,
                            const float* HWY_RESTRICT mean, GradSums* out) {
  const DF d;
  const size_t N = hn::Lanes(d), C = V * N;
  VecSlots<DF, V> m, s, t, mdy, mxmu;
  for (size_t v = 0; v < V; ++v) {
    m.Set(v, hn::LoadU(d, mean + v * N));
    mdy.Set(v, hn::Zero(d));
    mxmu.Set(v, hn::Zero(d));
  }
  for (size_t c = 0; c < C; ++c) out[c] = GradSums();
  HWY_ALIGN float lanes[kMaxFloatLanes];
  for (size_t r = 0; r < R;) {
    for (size_t v = 0; v < V; ++v) s.Set(v, hn::Zero(d)), t.Set(v, hn::Zero(d));
    for (const size_t run_end = std::min(R, r + kFlushVectors); r < run_end; ++r) {
      HWY_UNROLL(2)
      for (size_t v = 0; v < V; ++v) {
        VF sv = s.Get(v), tv = t.Get(v), m1 = mdy.Get(v), m2 = mxmu.Get(v);
        AddGrad(LoadF(d, x + r * C + v * N), LoadF(d, dy + r * C + v * N), m.Get(v), sv, tv, m1,
                m2);
        s.Set(v, sv), t.Set(v, tv), mdy.Set(v, m1), mxmu.Set(v, m2);
      }
    }
    for (size_t v = 0; v < V; ++v) {
      hn::Store(s.Get(v), d, lanes);
      for (size_t l = 0; l < N; ++l) out[v * N + l].sum_dy += static_cast<double>(lanes[l]);
      hn::Store(t.Get(v), d, lanes);
      for (size_t l = 0; l < N; ++l) out[v * N + l].sum_dy_xmu += static_cast<double>(lanes[l]);
    }
  }
  for (size_t v = 0; v < V; ++v) {
    hn::Store(mdy.Get(v), d, lanes);
    for (size_t l = 0; l < N; ++l) out[v * N + l].max_abs_dy = lanes[l];
    hn::Store(mxmu.Get(v), d, lanes);
    for (size_t l = 0; l < N; ++l) out[v * N + l].max_abs_xmu = lanes[l];
  }
}

// Channels-last, the general case: each row's whole vectors of channels, then its last
// channels padded, into float sums per channel (scratch) flushed into out every
// kFlushVectors rows.
template <typename T>
void ColumnGradSumsT(const T* HWY_RESTRICT x, const T* HWY_RESTRICT dy, int64_t rows,
                     int64_t channels, const float* HWY_RESTRICT mean, float* HWY_RESTRICT scratch,
                     GradSums* out) {
  const DF d;
  const size_t N = hn::Lanes(d), C = static_cast<size_t>(channels);
  const size_t R = static_cast<size_t>(rows);
  if (C < N && N % C == 0) return PatternGradSums(x, dy, R, C, mean, out);
  if (C == N) return RegisterColumnGradSums<1>(x, dy, R, mean, out);
  if (C == 2 * N) return RegisterColumnGradSums<2>(x, dy, R, mean, out);
  const size_t padded = (C + N - 1) / N * N, whole = C - C % N;
  const size_t stride = static_cast<size_t>(PaddedChannels(channels));
  float* HWY_RESTRICT sum_dy = scratch;
  float* HWY_RESTRICT sum_dot = scratch + stride;
  float* HWY_RESTRICT max_dy = scratch + 2 * stride;
  float* HWY_RESTRICT max_xmu = scratch + 3 * stride;
  std::fill(scratch, scratch + 4 * stride, 0.0f);
  for (size_t c = 0; c < C; ++c) out[c] = GradSums();
  // One vector of channels at c: its float sums in scratch.
  const auto add_at = [&](size_t c, VF xv, VF dyv) {
    VF s = hn::Load(d, sum_dy + c), t = hn::Load(d, sum_dot + c);
    VF mdy = hn::Load(d, max_dy + c), mxmu = hn::Load(d, max_xmu + c);
    AddGrad(xv, dyv, hn::Load(d, mean + c), s, t, mdy, mxmu);
    hn::Store(s, d, sum_dy + c);
    hn::Store(t, d, sum_dot + c);
    hn::Store(mdy, d, max_dy + c);
    hn::Store(mxmu, d, max_xmu + c);
  };
  for (size_t r = 0; r < R;) {
    const size_t run_end = std::min(R, r + kFlushVectors);
    for (; r < run_end; ++r) {
      const T* HWY_RESTRICT xr = x + r * C;
      const T* HWY_RESTRICT dr = dy + r * C;
      for (size_t c = 0; c < whole; c += N) add_at(c, LoadF(d, xr + c), LoadF(d, dr + c));
      if (whole < C) {
        HWY_ALIGN float bx[kMaxFloatLanes];
        HWY_ALIGN float bdy[kMaxFloatLanes] = {};
        std::memcpy(bx, mean + whole, N * sizeof(float));
        WidenTail(xr + whole, C - whole, bx);
        WidenTail(dr + whole, C - whole, bdy);
        add_at(whole, hn::Load(d, bx), hn::Load(d, bdy));
      }
    }
    for (size_t c = 0; c < C; ++c) {
      out[c].sum_dy += static_cast<double>(sum_dy[c]);
      out[c].sum_dy_xmu += static_cast<double>(sum_dot[c]);
    }
    std::fill(sum_dy, sum_dy + padded, 0.0f);
    std::fill(sum_dot, sum_dot + padded, 0.0f);
  }
  for (size_t c = 0; c < C; ++c) {
    out[c].max_abs_dy = max_dy[c];
    out[c].max_abs_xmu = max_xmu[c];
  }
}

// dx of the flat span x[0, n) with lane-wise coefficients; the last partial vector
// through a stack buffer (dx may be x or dy: every input is read before its dx is stored).
template <typename T>
HWY_INLINE void FlatGrad(const T* x, const T* dy, T* dx, size_t n, VF m, VF r, VF mean_dy,
                         VF mean_dy_xhat, VF p) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    StoreF(d, GradOf(LoadF(d, x + i), LoadF(d, dy + i), m, r, mean_dy, mean_dy_xhat, p), dx + i);
  }
  if (i < n) {
    HWY_ALIGN float bx[kMaxFloatLanes] = {};
    HWY_ALIGN float bdy[kMaxFloatLanes] = {};
    WidenTail(x + i, n - i, bx);
    WidenTail(dy + i, n - i, bdy);
    StoreTail(GradOf(hn::Load(d, bx), hn::Load(d, bdy), m, r, mean_dy, mean_dy_xhat, p), n - i,
              dx + i);
  }
}

template <typename T>
void ApplyGradSpanT(const T* x, const T* dy, T* dx, int64_t n, const GradCoefficients& k,
                    int64_t channel) {
  const DF d;
  const size_t c = static_cast<size_t>(channel);
  FlatGrad(x, dy, dx, static_cast<size_t>(n), hn::Set(d, k.mean[c]), hn::Set(d, k.rstd[c]),
           hn::Set(d, k.mean_dy[c]), hn::Set(d, k.mean_dy_xhat[c]), hn::Set(d, k.p[c]));
}

template <typename T>
void ApplyGradPlanesT(const T* x, const T* dy, T* dx, int64_t n, int64_t count,
                      const GradCoefficients& k, int64_t first_channel) {
  for (int64_t j = 0; j < count; ++j) {
    ApplyGradSpanT(x + j * n, dy + j * n, dx + j * n, n, k, first_channel + j);
  }
}

// dx of channels-last rows of one or two whole vectors of channels, the five coefficient
// vectors of each held in registers (ApplyGradRowsT reloaded them every row).
template <size_t V, typename T>
void RegisterApplyGradRows(const T* x, const T* dy, T* dx, size_t R, const GradCoefficients& k) {
  const DF d;
  const size_t N = hn::Lanes(d), C = V * N;
  VecSlots<DF, V> m, r, mdy, mdx, p;
  for (size_t v = 0; v < V; ++v) {
    m.Set(v, hn::LoadU(d, k.mean + v * N));
    r.Set(v, hn::LoadU(d, k.rstd + v * N));
    mdy.Set(v, hn::LoadU(d, k.mean_dy + v * N));
    mdx.Set(v, hn::LoadU(d, k.mean_dy_xhat + v * N));
    p.Set(v, hn::LoadU(d, k.p + v * N));
  }
  for (size_t row = 0; row < R; ++row) {
    HWY_UNROLL(2)
    for (size_t v = 0; v < V; ++v) {
      const size_t at = row * C + v * N;
      StoreF(d,
             GradOf(LoadF(d, x + at), LoadF(d, dy + at), m.Get(v), r.Get(v), mdy.Get(v), mdx.Get(v),
                    p.Get(v)),
             dx + at);
    }
  }
}

template <typename T>
void ApplyGradRowsT(const T* x, const T* dy, T* dx, int64_t rows, int64_t channels,
                    const GradCoefficients& k) {
  const DF d;
  const size_t N = hn::Lanes(d), C = static_cast<size_t>(channels);
  const size_t R = static_cast<size_t>(rows);
  if (C < N && N % C == 0) {  // one flat span, lane l always channel l % C
    HWY_ALIGN float lanes[5][kMaxFloatLanes];
    const float* arrays[5] = {k.mean, k.rstd, k.mean_dy, k.mean_dy_xhat, k.p};
    for (size_t a = 0; a < 5; ++a) {
      for (size_t l = 0; l < N; ++l) lanes[a][l] = arrays[a][l % C];
    }
    return FlatGrad(x, dy, dx, R * C, hn::Load(d, lanes[0]), hn::Load(d, lanes[1]),
                    hn::Load(d, lanes[2]), hn::Load(d, lanes[3]), hn::Load(d, lanes[4]));
  }
  if (C == N) return RegisterApplyGradRows<1>(x, dy, dx, R, k);
  if (C == 2 * N) return RegisterApplyGradRows<2>(x, dy, dx, R, k);
  const size_t whole = C - C % N;
  const auto grad_at = [&](size_t c, VF xv, VF dyv) {
    return GradOf(xv, dyv, hn::LoadU(d, k.mean + c), hn::LoadU(d, k.rstd + c),
                  hn::LoadU(d, k.mean_dy + c), hn::LoadU(d, k.mean_dy_xhat + c),
                  hn::LoadU(d, k.p + c));
  };
  for (size_t r = 0; r < R; ++r) {
    const T* xr = x + r * C;
    const T* dr = dy + r * C;
    T* out = dx + r * C;
    for (size_t c = 0; c < whole; c += N) {
      StoreF(d, grad_at(c, LoadF(d, xr + c), LoadF(d, dr + c)), out + c);
    }
    if (whole < C) {
      HWY_ALIGN float bx[kMaxFloatLanes] = {};
      HWY_ALIGN float bdy[kMaxFloatLanes] = {};
      WidenTail(xr + whole, C - whole, bx);
      WidenTail(dr + whole, C - whole, bdy);
      StoreTail(grad_at(whole, hn::Load(d, bx), hn::Load(d, bdy)), C - whole, out + whole);
    }
  }
}

// The backward's exported kernels: x, dy and dx all stored as s.
void ShortPlaneBlockGradSumsImpl(const void* x, const void* dy, Storage s, int64_t rows,
                                 int64_t row_stride, int64_t width, int64_t plane,
                                 const float* mean, GradSums* out) {
  WithStorage(x, s, [&](auto xt) {
    ShortPlaneBlockGradSumsT(xt, static_cast<decltype(xt)>(dy), rows, row_stride, width, plane,
                             mean, out);
  });
}

void ColumnGradSumsImpl(const void* x, const void* dy, Storage s, int64_t rows, int64_t channels,
                        const float* mean, float* scratch, GradSums* out) {
  WithStorage(x, s, [&](auto xt) {
    ColumnGradSumsT(xt, static_cast<decltype(xt)>(dy), rows, channels, mean, scratch, out);
  });
}

// dx's pointer of x's stored type.
template <typename T>
HWY_INLINE T* Output(const T*, void* dx) {
  return static_cast<T*>(dx);
}

void ApplyGradSpanImpl(const void* x, const void* dy, void* dx, Storage s, int64_t n,
                       const GradCoefficients& k, int64_t channel) {
  WithStorage(x, s, [&](auto xt) {
    ApplyGradSpanT(xt, static_cast<decltype(xt)>(dy), Output(xt, dx), n, k, channel);
  });
}

void ApplyGradPlanesImpl(const void* x, const void* dy, void* dx, Storage s, int64_t n,
                         int64_t count, const GradCoefficients& k, int64_t first_channel) {
  WithStorage(x, s, [&](auto xt) {
    ApplyGradPlanesT(xt, static_cast<decltype(xt)>(dy), Output(xt, dx), n, count, k, first_channel);
  });
}

void ApplyGradRowsImpl(const void* x, const void* dy, void* dx, Storage s, int64_t rows,
                       int64_t channels, const GradCoefficients& k) {
  WithStorage(x, s, [&](auto xt) {
    ApplyGradRowsT(xt, static_cast<decltype(xt)>(dy), Output(xt, dx), rows, channels, k);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
NORMKIT_AFTER_NAMESPACE();

#if HWY_ONCE
namespace normkit {
namespace kernels {

HWY_EXPORT(FlatChannelsImpl);
HWY_EXPORT(FlatColumnMomentsImpl);
HWY_EXPORT(ApplyFlatNormImpl);
HWY_EXPORT(ShortPlaneBlockWidthImpl);
HWY_EXPORT(ShortPlaneBlockMomentsImpl);
HWY_EXPORT(SpanGradSumsImpl);
HWY_EXPORT(ColumnGradSumsImpl);
HWY_EXPORT(ApplyGradSpanImpl);
HWY_EXPORT(PlaneGradSumsImpl);
HWY_EXPORT(ShortPlaneBlockGradSumsImpl);
HWY_EXPORT(ApplyGradPlanesImpl);
HWY_EXPORT(ApplyGradRowsImpl);

bool FlatChannels(int64_t channels) {
  return HWY_DYNAMIC_DISPATCH(FlatChannelsImpl)(channels);
}

int64_t ShortPlaneBlockWidth(int64_t plane) {
  return HWY_DYNAMIC_DISPATCH(ShortPlaneBlockWidthImpl)(plane);
}

void ShortPlaneBlockMoments(const void* x, Storage x_storage, int64_t rows, int64_t row_stride,
                            int64_t width, int64_t plane, Moments* out) {
  HWY_DYNAMIC_DISPATCH(ShortPlaneBlockMomentsImpl)
  (x, x_storage, rows, row_stride, width, plane, out);
}

void ShortPlaneBlockGradSums(const void* x, const void* dy, Storage storage, int64_t rows,
                             int64_t row_stride, int64_t width, int64_t plane, const float* mean,
                             GradSums* out) {
  HWY_DYNAMIC_DISPATCH(ShortPlaneBlockGradSumsImpl)
  (x, dy, storage, rows, row_stride, width, plane, mean, out);
}

void FlatColumnMoments(const void* x, Storage x_storage, int64_t rows, int64_t channels,
                       Moments* out) {
  HWY_DYNAMIC_DISPATCH(FlatColumnMomentsImpl)(x, x_storage, rows, channels, out);
}

void ApplyFlatNorm(const void* x, Storage x_storage, void* y, Storage y_storage, int64_t rows,
                   int64_t channels, const float* mean, const float* scale, const float* shift) {
  HWY_DYNAMIC_DISPATCH(ApplyFlatNormImpl)
  (x, x_storage, y, y_storage, rows, channels, mean, scale, shift);
}

GradSums SpanGradSums(const void* x, const void* dy, Storage storage, int64_t n, float mean) {
  return HWY_DYNAMIC_DISPATCH(SpanGradSumsImpl)(x, dy, storage, n, mean);
}

void PlaneGradSums(const void* x, const void* dy, Storage storage, int64_t n, int64_t count,
                   const float* mean, int64_t channels, int64_t first_channel, GradSums* out) {
  HWY_DYNAMIC_DISPATCH(PlaneGradSumsImpl)
  (x, dy, storage, n, count, mean, channels, first_channel, out);
}

void ApplyGradPlanes(const void* x, const void* dy, void* dx, Storage storage, int64_t n,
                     int64_t count, const GradCoefficients& k, int64_t first_channel) {
  HWY_DYNAMIC_DISPATCH(ApplyGradPlanesImpl)(x, dy, dx, storage, n, count, k, first_channel);
}

void ColumnGradSums(const void* x, const void* dy, Storage storage, int64_t rows, int64_t channels,
                    const float* mean, float* scratch, GradSums* out) {
  HWY_DYNAMIC_DISPATCH(ColumnGradSumsImpl)(x, dy, storage, rows, channels, mean, scratch, out);
}

void ApplyGradSpan(const void* x, const void* dy, void* dx, Storage storage, int64_t n,
                   const GradCoefficients& k, int64_t channel) {
  HWY_DYNAMIC_DISPATCH(ApplyGradSpanImpl)(x, dy, dx, storage, n, k, channel);
}

void ApplyGradRows(const void* x, const void* dy, void* dx, Storage storage, int64_t rows,
                   int64_t channels, const GradCoefficients& k) {
  HWY_DYNAMIC_DISPATCH(ApplyGradRowsImpl)(x, dy, dx, storage, rows, channels, k);
}

}  // namespace kernels
}  // namespace normkit
#endif  // HWY_ONCE
