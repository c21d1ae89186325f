// SPDX-License-Identifier: Apache-2.0
// Moments of channels-last blocks: per-channel (column) shifted sums over rows, walked
// a few vectors of channels at a time or as row streams, with sampled pivots.
// Included once per SIMD target (the caller's foreach_target), in the style of
// hwy/contrib: the building blocks of the kernels, not exported on their own.

#if defined(NORMKIT_CPU_KERNELS_COLUMN_MOMENTS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NORMKIT_CPU_KERNELS_COLUMN_MOMENTS_INL_H_
#undef NORMKIT_CPU_KERNELS_COLUMN_MOMENTS_INL_H_
#else
#define NORMKIT_CPU_KERNELS_COLUMN_MOMENTS_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "cpu/kernels/float_tags-inl.h"
#include "cpu/kernels/moments-inl.h"
#include "cpu/kernels/storage-inl.h"
#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
#include "hwy/cache_control.h"
#include "hwy/highway.h"

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Channels-last rows of at most four vectors are walked a few vectors of channels at
// a time down all rows of the block (a walk that stays within a few KiB), with the
// accumulators in registers; wider rows go through ShiftedSumsRowStreams. Channels
// past the last whole vector go one at a time: shifted sums of one channel, in double.
template <typename T>
HWY_INLINE void ShiftedSumsChannel(const T* HWY_RESTRICT x, size_t R, size_t C, size_t c,
                                   const float* HWY_RESTRICT pivot, double* HWY_RESTRICT s1,
                                   double* HWY_RESTRICT s2) {
  const hn::CappedTag<float, 1> d;
  const hn::Rebind<double, decltype(d)> dw;
  const auto vp = hn::LoadU(d, pivot + c);
  auto w1 = hn::Zero(dw), w2 = hn::Zero(dw);
  for (size_t r = 0; r < R; ++r) {
    const auto dev = hn::PromoteTo(dw, hn::Sub(LoadF(d, x + r * C + c), vp));
    w1 = hn::Add(w1, dev);
    w2 = hn::MulAdd(dev, dev, w2);
  }
  s1[c] = hn::GetLane(w1);
  s2[c] = hn::GetLane(w2);
}

// Adds the four vectors at `row` minus their pivots p0..p3 to a0..a3 and the squares
// of those differences to b0..b3.
template <class V, typename T>
HWY_INLINE void AddShiftedFour(const T* HWY_RESTRICT row, V p0, V p1, V p2, V p3, V& a0, V& a1,
                               V& a2, V& a3, V& b0, V& b1, V& b2, V& b3) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const auto d0 = hn::Sub(LoadF(d, row), p0);
  const auto d1 = hn::Sub(LoadF(d, row + N), p1);
  const auto d2 = hn::Sub(LoadF(d, row + 2 * N), p2);
  const auto d3 = hn::Sub(LoadF(d, row + 3 * N), p3);
  a0 = hn::Add(a0, d0);
  a1 = hn::Add(a1, d1);
  a2 = hn::Add(a2, d2);
  a3 = hn::Add(a3, d3);
  b0 = hn::MulAdd(d0, d0, b0);
  b1 = hn::MulAdd(d1, d1, b1);
  b2 = hn::MulAdd(d2, d2, b2);
  b3 = hn::MulAdd(d3, d3, b3);
}

// kVectors (1 to 4) vectors of channels from c down the rows, with the accumulators in
// registers. Fewer than four vectors take rows kPhases at a time into separate float
// chains (summed in a fixed order at each flush), so that the adds do not wait on one
// another: walked one chain a column, 1x32x112x112 G=8 channels-last statistics took
// 0.7 of a same-size memcpy, latency-bound. Four vectors are four chains already.
template <size_t kVectors, typename T>
HWY_INLINE void ShiftedSumsColumns(const T* HWY_RESTRICT x, size_t R, size_t C, size_t c,
                                   const float* HWY_RESTRICT pivot, double* HWY_RESTRICT s1,
                                   double* HWY_RESTRICT s2) {
  const DF d;
  const DD dd;
  const size_t N = hn::Lanes(d);
  constexpr size_t K = kVectors;
  constexpr size_t kPhases = K == 1 ? 4 : K == 4 ? 1 : 2;
  // Slots: the pivots; the double sums ul, uh (sums) and ql, qh (squares), each K.
  VecSlots<DF, K> p;
  VecSlots<DD, 4 * K> w;
  enum : size_t { kUl = 0, kUh = K, kQl = 2 * K, kQh = 3 * K };
  for (size_t v = 0; v < K; ++v) {
    p.Set(v, hn::LoadU(d, pivot + c + v * N));
    for (size_t k = 0; k < 4; ++k) w.Set(k * K + v, hn::Zero(dd));
  }
  // The float chains of phase u, vector v: slot u * K + v.
  VecSlots<DF, kPhases * K> a, b;
  const auto add_row = [&](size_t row, size_t u) {
    HWY_UNROLL(4)
    for (size_t v = 0; v < K; ++v) {
      const auto dev = hn::Sub(LoadF(d, x + row * C + c + v * N), p.Get(v));
      a.Set(u * K + v, hn::Add(a.Get(u * K + v), dev));
      b.Set(u * K + v, hn::MulAdd(dev, dev, b.Get(u * K + v)));
    }
  };
  const auto accumulate = [&](hn::Vec<DF> sum, size_t lo, size_t hi) {
    auto l = w.Get(lo), h = w.Get(hi);
    AccumulateWide(sum, l, h);
    w.Set(lo, l);
    w.Set(hi, h);
  };
  for (size_t r = 0; r < R;) {
    for (size_t k = 0; k < kPhases * K; ++k) {
      a.Set(k, hn::Zero(d));
      b.Set(k, hn::Zero(d));
    }
    const size_t run_end = std::min(R, r + kFlushVectors);
    for (; r + kPhases <= run_end; r += kPhases) {
      HWY_UNROLL(4)
      for (size_t u = 0; u < kPhases; ++u) add_row(r + u, u);
    }
    for (size_t u = 0; r < run_end; ++r, ++u) add_row(r, u);  // fewer than kPhases left
    for (size_t v = 0; v < K; ++v) {
      auto sa = a.Get(v), sb = b.Get(v);
      if constexpr (kPhases >= 2) {
        sa = hn::Add(sa, a.Get(K + v));
        sb = hn::Add(sb, b.Get(K + v));
      }
      if constexpr (kPhases == 4) {
        sa = hn::Add(sa, hn::Add(a.Get(2 * K + v), a.Get(3 * K + v)));
        sb = hn::Add(sb, hn::Add(b.Get(2 * K + v), b.Get(3 * K + v)));
      }
      accumulate(sa, kUl + v, kUh + v);
      accumulate(sb, kQl + v, kQh + v);
    }
  }
  for (size_t v = 0; v < K; ++v) {
#if HWY_TARGET == HWY_SCALAR
    s1[c + v] = hn::GetLane(w.Get(kUl + v));
    s2[c + v] = hn::GetLane(w.Get(kQl + v));
#else
    const size_t h = hn::Lanes(dd);
    hn::StoreU(w.Get(kUl + v), dd, s1 + c + v * N),
        hn::StoreU(w.Get(kUh + v), dd, s1 + c + v * N + h);
    hn::StoreU(w.Get(kQl + v), dd, s2 + c + v * N),
        hn::StoreU(w.Get(kQh + v), dd, s2 + c + v * N + h);
#endif
  }
}

// s[c] += widen(run[c]) for c < C4 (whole vectors).
HWY_INLINE void FlushRunSums(const float* HWY_RESTRICT run, size_t C4, double* HWY_RESTRICT s) {
  const DF d;
  const DD dd;
  const size_t N = hn::Lanes(d);
  for (size_t c = 0; c < C4; c += N) {
#if HWY_TARGET == HWY_SCALAR
    auto lo = hn::LoadU(dd, s + c), hi = lo;
    AccumulateWide(hn::LoadU(d, run + c), lo, hi);
    hn::StoreU(lo, dd, s + c);
#else
    const size_t h = hn::Lanes(dd);
    auto lo = hn::LoadU(dd, s + c), hi = hn::LoadU(dd, s + c + h);
    AccumulateWide(hn::LoadU(d, run + c), lo, hi);
    hn::StoreU(lo, dd, s + c);
    hn::StoreU(hi, dd, s + c + h);
#endif
  }
}

// Adds rows[0..kRows) (each C4 channels: a multiple of four vectors) minus the pivot,
// and their squares, to the float run sums run1 / run2.
template <size_t kRows, typename T>
HWY_INLINE void AddRowsToRunSums(const T* const* rows, size_t C4, const float* HWY_RESTRICT pivot,
                                 float* HWY_RESTRICT run1, float* HWY_RESTRICT run2) {
  const DF d;
  const size_t N = hn::Lanes(d);
  for (size_t c = 0; c < C4; c += 4 * N) {
    const auto p0 = hn::LoadU(d, pivot + c), p1 = hn::LoadU(d, pivot + c + N),
               p2 = hn::LoadU(d, pivot + c + 2 * N), p3 = hn::LoadU(d, pivot + c + 3 * N);
    auto a0 = hn::LoadU(d, run1 + c), a1 = hn::LoadU(d, run1 + c + N),
         a2 = hn::LoadU(d, run1 + c + 2 * N), a3 = hn::LoadU(d, run1 + c + 3 * N);
    auto b0 = hn::LoadU(d, run2 + c), b1 = hn::LoadU(d, run2 + c + N),
         b2 = hn::LoadU(d, run2 + c + 2 * N), b3 = hn::LoadU(d, run2 + c + 3 * N);
    for (size_t k = 0; k < kRows; ++k) {
      AddShiftedFour(rows[k] + c, p0, p1, p2, p3, a0, a1, a2, a3, b0, b1, b2, b3);
    }
    hn::StoreU(a0, d, run1 + c), hn::StoreU(a1, d, run1 + c + N);
    hn::StoreU(a2, d, run1 + c + 2 * N), hn::StoreU(a3, d, run1 + c + 3 * N);
    hn::StoreU(b0, d, run2 + c), hn::StoreU(b1, d, run2 + c + N);
    hn::StoreU(b2, d, run2 + c + 2 * N), hn::StoreU(b3, d, run2 + c + 3 * N);
  }
}

// Channels [0, C4) of a block (C4 a multiple of four vectors), read as kRowStreams
// sequential streams a quarter of the block apart, one row of each per step. Walking
// the block column by column, or rows next to each other in turn, reads DRAM at half
// speed on the machines we measured: the prefetchers follow a few distant streams,
// not many close ones. Per channel, float run sums take kFlushVectors rows and are
// carried in double, like the column walk's. run1 / run2: 2 * C4 floats of scratch.
constexpr size_t kRowStreams = 4;

template <typename T>
HWY_INLINE void ShiftedSumsRowStreams(const T* HWY_RESTRICT x, size_t R, size_t C, size_t C4,
                                      const float* HWY_RESTRICT pivot, double* HWY_RESTRICT s1,
                                      double* HWY_RESTRICT s2, float* HWY_RESTRICT run1,
                                      float* HWY_RESTRICT run2) {
  const DF d;
  const DD dd;
  const size_t N = hn::Lanes(d);
  const auto zero_runs = [&] {
    for (size_t c = 0; c < C4; c += N) {
      hn::StoreU(hn::Zero(d), d, run1 + c);
      hn::StoreU(hn::Zero(d), d, run2 + c);
    }
  };
  for (size_t c = 0; c < C4; c += hn::Lanes(dd)) {
    hn::StoreU(hn::Zero(dd), dd, s1 + c);
    hn::StoreU(hn::Zero(dd), dd, s2 + c);
  }
  zero_runs();
  size_t in_run = 0;  // rows in the float run sums
  const auto added = [&](size_t rows) {
    in_run += rows;
    if (in_run < kFlushVectors) return;
    FlushRunSums(run1, C4, s1);
    FlushRunSums(run2, C4, s2);
    zero_runs();
    in_run = 0;
  };
  const size_t D = R / kRowStreams;
  for (size_t i = 0; i < D; ++i) {
    const T* rows[kRowStreams];
    for (size_t k = 0; k < kRowStreams; ++k) rows[k] = x + (k * D + i) * C;
    AddRowsToRunSums<kRowStreams>(rows, C4, pivot, run1, run2);
    added(kRowStreams);
  }
  for (size_t r = kRowStreams * D; r < R; ++r) {
    const T* row = x + r * C;
    AddRowsToRunSums<1>(&row, C4, pivot, run1, run2);
    added(1);
  }
  if (in_run > 0) {
    FlushRunSums(run1, C4, s1);
    FlushRunSums(run2, C4, s2);
  }
}

// From cache too, rows of at least this many floats: the column walk's loads, strided
// by a row, found their lines in L2 more slowly than the streams' (their sums in L1,
// not registers). Same-process A/B, one thread, channels-last G=32, time streams /
// columns: 1x192x14x14 0.93, 1x256x14x14 0.91-0.92, 1x384x14x14 0.93, 1x1024x7x7
// 0.92-0.96, 1x2048x7x7 0.96-0.99; but 1x160x14x14 1.00, 1x128x28x28 1.03-1.07 and
// 1x96x28x28 1.08-1.10.
constexpr size_t kCachedRowStreamsMinFloats = 192;

template <typename T>
inline void ChannelShiftedSums(const T* HWY_RESTRICT x, int64_t rows, int64_t channels,
                               const float* HWY_RESTRICT pivot, double* HWY_RESTRICT s1,
                               double* HWY_RESTRICT s2, float* HWY_RESTRICT scratch,
                               bool from_memory) {
  const size_t R = static_cast<size_t>(rows), C = static_cast<size_t>(channels);
  const size_t N = hn::Lanes(DF());
  size_t c = 0;
  if (C > 4 * N && (from_memory || C >= kCachedRowStreamsMinFloats)) {
    // Rows wider than four vectors, from DRAM (or wide ones from cache): a column
    // walk would interleave them.
    c = C / (4 * N) * (4 * N);
    ShiftedSumsRowStreams(x, R, C, c, pivot, s1, s2, scratch, scratch + C);
  }
  for (; c + 4 * N <= C; c += 4 * N) ShiftedSumsColumns<4>(x, R, C, c, pivot, s1, s2);
  switch ((C - c) / N) {  // whole vectors left: 0 to 3
    case 3: ShiftedSumsColumns<3>(x, R, C, c, pivot, s1, s2), c += 3 * N; break;
    case 2: ShiftedSumsColumns<2>(x, R, C, c, pivot, s1, s2), c += 2 * N; break;
    case 1: ShiftedSumsColumns<1>(x, R, C, c, pivot, s1, s2), c += N; break;
    default: break;
  }
  for (; c < C; ++c) ShiftedSumsChannel(x, R, C, c, pivot, s1, s2);
}

template <typename T>
inline void SampledRowSums(const T* HWY_RESTRICT x, int64_t rows, int64_t channels, int64_t samples,
                           float* HWY_RESTRICT out) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t C = static_cast<size_t>(channels);
  size_t c = 0;
  for (; c + N <= C; c += N) {
    auto acc = hn::Zero(d);
    for (int64_t j = 0; j < samples; ++j) {
      acc = hn::Add(acc, LoadF(d, x + static_cast<size_t>(SampledRow(j, samples, rows)) * C + c));
    }
    hn::StoreU(acc, d, out + c);
  }
  for (; c < C; ++c) {
    float acc = 0.0f;
    for (int64_t j = 0; j < samples; ++j) {
      acc += FloatAt(x + static_cast<size_t>(SampledRow(j, samples, rows)) * C + c);
    }
    out[c] = acc;
  }
}

// Sum of a[0..n) in double, in four interleaved chains combined at the end: one chain
// of dependent adds, a group's channels one at a time, took 1280 adds' latency for a
// 1x1280x8x8 NHWC sample, twice (pivots, then shifted sums).
template <class T>
HWY_INLINE double SumOfChannels(const T* a, int64_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += static_cast<double>(a[i]);
    s1 += static_cast<double>(a[i + 1]);
    s2 += static_cast<double>(a[i + 2]);
    s3 += static_cast<double>(a[i + 3]);
  }
  for (; i < n; ++i) s0 += static_cast<double>(a[i]);
  return (s0 + s1) + (s2 + s3);
}

// ColumnBlockMoments: groups strided across rows; per-channel shifted sums about a pivot
// per group add up to the group's.
template <typename T>
inline void ColumnBlockMomentsT(const T* HWY_RESTRICT x, int64_t rows, int64_t channels,
                                int64_t groups, int64_t samples, bool from_memory,
                                const ColumnScratch& s, Moments* HWY_RESTRICT out) {
  const int64_t Cg = channels / groups;
  const double count = static_cast<double>(rows * Cg);
  // s.pivot holds the per-channel sample sums first; each group's are read, then
  // overwritten by the group's pivot (groups own disjoint channels).
  SampledRowSums(x, rows, channels, samples, s.pivot);
  for (int64_t g = 0; g < groups; ++g) {
    const double sum = SumOfChannels(s.pivot + g * Cg, Cg);
    const float pivot = static_cast<float>(sum / static_cast<double>(samples * Cg));
    for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) s.pivot[c] = pivot;
  }
  for (int pass = 0; pass < 2; ++pass) {
    ChannelShiftedSums(x, rows, channels, s.pivot, s.s1, s.s2, s.run, from_memory);
    bool again = false;
    for (int64_t g = 0; g < groups; ++g) {
      const double s1 = SumOfChannels(s.s1 + g * Cg, Cg);
      const double s2 = SumOfChannels(s.s2 + g * Cg, Cg);
      const float pivot = s.pivot[g * Cg];
      out[g] = FromShiftedSums(count, pivot, s1, s2);
      if (pass == 0 && PivotTooFar(count, s1, s2)) {
        again = true;
        const float better = static_cast<float>(out[g].mean);
        for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) s.pivot[c] = better;
      }
    }
    if (!again) break;
  }
}

// pivot[c] = float(sum[c] / samples) in place, and FromShiftedSums / ReciprocalStd
// of each channel: the same operations as the scalar functions, lanes side by side.
// Returns whether a channel's pivot was too far from its mean (PivotTooFar).
HWY_INLINE bool ColumnsMeanRstd(size_t C, double count, const float* HWY_RESTRICT pivot,
                                const double* HWY_RESTRICT s1, const double* HWY_RESTRICT s2,
                                float eps, double* HWY_RESTRICT mean, double* HWY_RESTRICT rstd) {
  size_t c = 0;
  bool any_far = false;
#if HWY_TARGET != HWY_SCALAR
  const DD dd;
  const hn::Rebind<float, DD> df;
  const size_t N = hn::Lanes(dd);
  for (; c + N <= C; c += N) {
    any_far |= LanesMeanRstd(hn::PromoteTo(dd, hn::LoadU(df, pivot + c)), hn::LoadU(dd, s1 + c),
                             hn::LoadU(dd, s2 + c), count, eps, mean + c, rstd + c);
  }
#endif
  for (; c < C; ++c) {
    const Moments m = FromShiftedSums(count, pivot[c], s1[c], s2[c]);
    mean[c] = m.mean;
    rstd[c] = ReciprocalStd(m, eps);
    any_far |= PivotTooFar(count, s1[c], s2[c]);
  }
  return any_far;
}

template <typename T>
inline void ColumnMeanRstdT(const T* HWY_RESTRICT x, int64_t rows, int64_t channels,
                            int64_t samples, float eps, bool from_memory, float* HWY_RESTRICT pivot,
                            double* HWY_RESTRICT s1, double* HWY_RESTRICT s2,
                            float* HWY_RESTRICT scratch, double* HWY_RESTRICT mean,
                            double* HWY_RESTRICT rstd) {
  const size_t C = static_cast<size_t>(channels);
  const double count = static_cast<double>(rows);
  SampledRowSums(x, rows, channels, samples, pivot);
  // The pivot of a group of one channel, as group norm's channels-last statistics
  // take it (the same bits): the double mean of its sampled values, rounded.
  const double dsamples = static_cast<double>(samples);
  size_t c = 0;
// Not on EMU128: its DemoteTo clamps infinities to +-FLT_MAX (Highway's emulation avoids
// an out-of-range cast); the one-lane loop keeps them, as the hardware targets do.
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  const DD dd;
  const hn::Rebind<float, DD> df;
  for (; c + hn::Lanes(dd) <= C; c += hn::Lanes(dd)) {
    const auto sum = hn::PromoteTo(dd, hn::LoadU(df, pivot + c));
    hn::StoreU(hn::DemoteTo(df, hn::Div(sum, hn::Set(dd, dsamples))), df, pivot + c);
  }
#endif
  for (; c < C; ++c) pivot[c] = static_cast<float>(static_cast<double>(pivot[c]) / dsamples);
  ChannelShiftedSums(x, rows, channels, pivot, s1, s2, scratch, from_memory);
  if (!ColumnsMeanRstd(C, count, pivot, s1, s2, eps, mean, rstd)) return;
  // A second pass about the means the first found, for the channels that need it
  // (the others keep their pivots, so their sums and results do not change).
  for (c = 0; c < C; ++c) {
    if (PivotTooFar(count, s1[c], s2[c])) pivot[c] = static_cast<float>(mean[c]);
  }
  ChannelShiftedSums(x, rows, channels, pivot, s1, s2, scratch, from_memory);
  ColumnsMeanRstd(C, count, pivot, s1, s2, eps, mean, rstd);
}

inline void ColumnBlockMomentsImpl(const void* x, Storage storage, int64_t rows, int64_t channels,
                                   int64_t groups, int64_t samples, bool from_memory,
                                   const ColumnScratch& s, Moments* HWY_RESTRICT out) {
  WithStorage(x, storage, [&](const auto* xs) {
    ColumnBlockMomentsT(xs, rows, channels, groups, samples, from_memory, s, out);
  });
}

inline void ColumnMeanRstdImpl(const void* x, Storage storage, int64_t rows, int64_t channels,
                               int64_t samples, float eps, bool from_memory,
                               float* HWY_RESTRICT pivot, double* HWY_RESTRICT s1,
                               double* HWY_RESTRICT s2, float* HWY_RESTRICT scratch,
                               double* HWY_RESTRICT mean, double* HWY_RESTRICT rstd) {
  WithStorage(x, storage, [&](const auto* xs) {
    ColumnMeanRstdT(xs, rows, channels, samples, eps, from_memory, pivot, s1, s2, scratch, mean,
                    rstd);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
NORMKIT_AFTER_NAMESPACE();

#endif  // NORMKIT_CPU_KERNELS_COLUMN_MOMENTS_INL_H_ toggle
