// SPDX-License-Identifier: Apache-2.0
// Moments of spans (channels-first groups, rows of layer / RMS norm): pivot, shifted sums
// in float within runs and double across them, a second pass when the pivot was too far,
// and the lane-parallel statistics of many short spans at once.
// Included once per SIMD target (the caller's foreach_target), in the style of
// hwy/contrib: the building blocks of the kernels, not exported on their own.

#if defined(NORMKIT_CPU_KERNELS_MOMENTS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NORMKIT_CPU_KERNELS_MOMENTS_INL_H_
#undef NORMKIT_CPU_KERNELS_MOMENTS_INL_H_
#else
#define NORMKIT_CPU_KERNELS_MOMENTS_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/moments.h"
#include "cpu/kernels/float_tags-inl.h"
#include "cpu/kernels/group_norm.h"
#include "cpu/kernels/storage-inl.h"
#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
#include "cpu/kernels/vec_slots-inl.h"
#include "hwy/highway.h"

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Adds the two halves of v, widened to double, to lo and hi.
HWY_INLINE void AccumulateWide(hn::Vec<DF> v, hn::Vec<DD>& lo, hn::Vec<DD>& hi) {
#if HWY_TARGET == HWY_SCALAR  // one lane: no halves, and hi receives nothing
  lo = hn::Add(lo, hn::PromoteTo(DD(), v));
#else
  const DD dd;
  const DH dh;
  lo = hn::Add(lo, hn::PromoteTo(dd, hn::LowerHalf(dh, v)));
  hi = hn::Add(hi, hn::PromoteTo(dd, hn::UpperHalf(dh, v)));
#endif
}

// Adds the squares of v's lanes, widened to double, to lo and hi.
HWY_INLINE void AccumulateWideSquares(hn::Vec<DF> v, hn::Vec<DD>& lo, hn::Vec<DD>& hi) {
#if HWY_TARGET == HWY_SCALAR
  const auto w = hn::PromoteTo(DD(), v);
  lo = hn::MulAdd(w, w, lo);
#else
  const DD dd;
  const DH dh;
  const auto l = hn::PromoteTo(dd, hn::LowerHalf(dh, v));
  const auto h = hn::PromoteTo(dd, hn::UpperHalf(dh, v));
  lo = hn::MulAdd(l, l, lo);
  hi = hn::MulAdd(h, h, hi);
#endif
}

HWY_INLINE double SumLanes(hn::Vec<DD> v) {
  return hn::GetLane(hn::SumOfLanes(DD(), v));
}

// Float partial sums are flushed into double accumulators every kFlushVectors
// vectors (contiguous spans: two chains; channel columns: kFlushVectors rows): a
// float lane sums at most 66 terms (a contiguous span's last run takes its last two
// vectors too; relative error of a run's s2 below 66 * 2^-24 = 3.9e-6 at worst, about
// 8 * 2^-24 typically), the long sums are carried in double.
// Against runs of 16 vectors, the group-norm edge shapes' statistics took about 5%
// less time (1x32x112x112 G=8, 1 thread: 0.53-0.55 -> 0.65 of memcpy).
constexpr size_t kFlushVectors = 64;

// A pivot for the shifted sums: the mean of kPivotVectors vectors spread over the
// span (SampledSpanOffset). Only its distance from the true mean (in units of the
// spread) matters, and SpanMoments checks it; spread rather than the first values,
// which in an image plane are its top border. Vector loads: a chain of 64 scalar
// adds cost more than the statistics of a 1.5K-element group.
template <typename T>
HWY_INLINE float SamplePivot(const T* x, size_t n) {
  const DF d;
  const size_t N = hn::Lanes(d);
  if (n < kPivotVectors * N) {  // short spans: their first whole vectors, then lanes
    size_t i = 0;
    float sum = 0.0f;
    if (n >= N) {
      auto acc = LoadF(d, x);
      for (i = N; i + N <= n; i += N) acc = hn::Add(acc, LoadF(d, x + i));
      sum = hn::GetLane(hn::SumOfLanes(d, acc));
    }
    for (; i < n; ++i) sum += FloatAt(x + i);
    return sum / static_cast<float>(n);
  }
  auto acc = hn::Zero(d);
  for (size_t j = 0; j < kPivotVectors; ++j) {
    acc = hn::Add(acc, LoadF(d, x + SampledSpanOffset(j, static_cast<int64_t>(n))));
  }
  return hn::GetLane(hn::SumOfLanes(d, acc)) / static_cast<float>(kPivotVectors * N);
}

// Shifted sums s1 = sum(x - p), s2 = sum((x - p)^2) of a span fed two vectors at a
// time: the first of each pair on one float chain, the second on another, the
// chains flushed into double after each run of kFlushVectors vectors; Finish adds
// the span's last elements (fewer than two vectors) to the run in flight and
// flushes it. A walk that feeds the same pairs and flushes at the same points gets
// the same bits: SpanShiftedSums and the fused apply below both do.
// AddQuad feeds four vectors to four chains instead (the row moments: below). Group
// norm's statistics stay in pairs: its chained apply, which must match them bit for
// bit, took 1.25 times as long (1x256x14x14 G=32) walking quads.
class ShiftedSumsAcc {
 public:
  static constexpr size_t kPairsPerRun = kFlushVectors / 2;

  explicit ShiftedSumsAcc(float p) : p_(p) {
    f_.Set(kPivot, hn::Set(DF(), p));
    for (size_t k = kA1; k <= kE2; ++k) f_.Set(k, hn::Zero(DF()));
    for (size_t k = 0; k < 4; ++k) w_.Set(k, hn::Zero(DD()));
  }

  HWY_INLINE void Add(hn::Vec<DF> v0, hn::Vec<DF> v1) {
    AddTo(v0, kA1, kA2);
    AddTo(v1, kB1, kB2);
  }

  HWY_INLINE void AddQuad(hn::Vec<DF> v0, hn::Vec<DF> v1, hn::Vec<DF> v2, hn::Vec<DF> v3) {
    AddTo(v0, kA1, kA2);
    AddTo(v1, kB1, kB2);
    AddTo(v2, kC1, kC2);
    AddTo(v3, kE1, kE2);
  }

  // Pairs leave the last two chains at zero, and adding them changes no bit.
  HWY_INLINE void Flush() {
    AccumulateWide(hn::Add(hn::Add(f_.Get(kA1), f_.Get(kB1)), hn::Add(f_.Get(kC1), f_.Get(kE1))),
                   kS1Lo, kS1Hi);
    AccumulateWide(hn::Add(hn::Add(f_.Get(kA2), f_.Get(kB2)), hn::Add(f_.Get(kC2), f_.Get(kE2))),
                   kS2Lo, kS2Hi);
    for (size_t k = kA1; k <= kE2; ++k) f_.Set(k, hn::Zero(DF()));
  }

  // The sums of the span x[0, n), with its elements from i on (fewer than two
  // vectors) added to the run in flight: a whole vector, then the span's last vector
  // with the lanes already counted set to zero; then the run's flush. Spans shorter
  // than a vector go one element at a time in double. (One at a time, the 17 left of
  // a 7x7 plane cost instance norm on 1x1024x7x7 four tenths of its time.)
  template <typename T>
  HWY_INLINE void Finish(const T* HWY_RESTRICT x, size_t n, size_t i, double* s1_out,
                         double* s2_out) {
    const DF d;
    const size_t N = hn::Lanes(d);
    if (n >= N && i < n) {
      if (n - i >= N) {
        AddDeviation(hn::Sub(LoadF(d, x + i), f_.Get(kPivot)), kA1, kA2);
        i += N;
      }
      if (i < n) {
        const auto fresh = hn::Not(hn::FirstN(d, N - (n - i)));
        AddDeviation(hn::IfThenElseZero(fresh, hn::Sub(LoadF(d, x + n - N), f_.Get(kPivot))), kB1,
                     kB2);
        i = n;
      }
    }
    Flush();
    double s1 = SumLanes(hn::Add(w_.Get(kS1Lo), w_.Get(kS1Hi)));
    double s2 = SumLanes(hn::Add(w_.Get(kS2Lo), w_.Get(kS2Hi)));
    for (; i < n; ++i) {
      const double dev = static_cast<double>(FloatAt(x + i) - p_);
      s1 += dev;
      s2 += dev * dev;
    }
    *s1_out = s1;
    *s2_out = s2;
  }

 private:
  // The float slots: the pivot, then the chains' sums (1) and sums of squares (2).
  enum : size_t { kPivot, kA1, kA2, kB1, kB2, kC1, kC2, kE1, kE2, kFloatSlots };
  // The double slots: the flushed sums, each in two halves.
  enum : size_t { kS1Lo, kS1Hi, kS2Lo, kS2Hi };

  HWY_INLINE void AddTo(hn::Vec<DF> v, size_t sum, size_t squares) {
    AddDeviation(hn::Sub(v, f_.Get(kPivot)), sum, squares);
  }

  HWY_INLINE void AddDeviation(hn::Vec<DF> dev, size_t sum, size_t squares) {
    f_.Set(sum, hn::Add(f_.Get(sum), dev));
    f_.Set(squares, hn::MulAdd(dev, dev, f_.Get(squares)));
  }

  HWY_INLINE void AccumulateWide(hn::Vec<DF> v, size_t lo, size_t hi) {
    auto l = w_.Get(lo), h = w_.Get(hi);
    kernels::HWY_NAMESPACE::AccumulateWide(v, l, h);
    w_.Set(lo, l);
    w_.Set(hi, h);
  }

  float p_;
  VecSlots<DF, kFloatSlots> f_;
  VecSlots<DD, 4> w_;
};

// kQuads: the span fed four vectors at a time to four chains (then its last pair), the
// layer-norm rows' walk; otherwise in pairs, the walk every group-norm statistic takes.
template <bool kQuads = false, typename T>
HWY_INLINE void SpanShiftedSums(const T* HWY_RESTRICT x, size_t n, float p, double* s1_out,
                                double* s2_out) {
  const DF d;
  const size_t N = hn::Lanes(d);
  constexpr size_t kStep = kQuads ? 4 : 2;  // vectors a step
  ShiftedSumsAcc acc(p);
  const auto add_steps = [&](size_t i, size_t end) {
    for (; i < end; i += kStep * N) {
      if constexpr (kQuads) {
        acc.AddQuad(LoadF(d, x + i), LoadF(d, x + i + N), LoadF(d, x + i + 2 * N),
                    LoadF(d, x + i + 3 * N));
      } else {
        acc.Add(LoadF(d, x + i), LoadF(d, x + i + N));
      }
    }
  };
  // Whole runs, each flushed; then the steps (and a quad walk's last pair) of the last
  // run, which Finish flushes. (A step counter in one loop, as the chained hook and
  // TwoSpansMoments need, cost 1x64x56x56 G=32 about 3%: a branch per pair in the loop
  // of all its statistics.)
  size_t i = 0;
  for (; i + kFlushVectors * N <= n; i += kFlushVectors * N) {
    add_steps(i, i + kFlushVectors * N);
    acc.Flush();
  }
  const size_t steps_end = i + (n - i) / (kStep * N) * (kStep * N);
  add_steps(i, steps_end);
  i = steps_end;
  if (kQuads && i + 2 * N <= n) {
    acc.Add(LoadF(d, x + i), LoadF(d, x + i + N));
    i += 2 * N;
  }
  acc.Finish(x, n, i, s1_out, s2_out);
}

// The rare second pass, out of line: inlined, it changed the code of every kernel
// that ends in MomentsAbout; the chained one ran 10% slower for it (1x256x14x14 G=32,
// one thread).
template <typename T>
inline HWY_NOINLINE void SecondPassShiftedSums(const T* HWY_RESTRICT x, size_t n, float p,
                                               double* s1_out, double* s2_out) {
  SpanShiftedSums(x, n, p, s1_out, s2_out);
}

// Moments of x[0, n) from its shifted sums about p, with a second pass about the
// mean they found when p was too far from it to keep the digits.
template <typename T>
HWY_INLINE Moments MomentsAbout(const T* HWY_RESTRICT x, size_t n, float p, double s1, double s2) {
  const double dn = static_cast<double>(n);
  if (PivotTooFar(dn, s1, s2)) {
    p = static_cast<float>(static_cast<double>(p) + s1 / dn);
    SecondPassShiftedSums(x, n, p, &s1, &s2);
  }
  return FromShiftedSums(dn, p, s1, s2);
}

// One pass of shifted sums about a sampled pivot (and the second when needed).
template <bool kQuads, typename T>
HWY_INLINE Moments SpanMomentsT(const T* HWY_RESTRICT x, int64_t count) {
  if (count <= 0) return Moments();
  const size_t n = static_cast<size_t>(count);
  const float p = SamplePivot(x, n);
  double s1, s2;
  SpanShiftedSums<kQuads>(x, n, p, &s1, &s2);
  return MomentsAbout(x, n, p, s1, s2);
}

inline Moments SpanMomentsImpl(const void* x, Storage storage, int64_t count) {
  return WithStorage(x, storage,
                     [count](const auto* xs) { return SpanMomentsT<false>(xs, count); });
}

// SpanMoments with the span fed in quads to four chains (then its last pair, if any):
// the statistics of a layer norm row, which depend on the row alone and need match no
// other walk. A row's sums, from L1, were bound by the latency of two chains: against
// SpanMoments, one thread, same-process A/B, [4096, 768] took 0.89-0.90 of the time,
// [256, 768] 0.94-0.95.
inline Moments RowMomentsImpl(const void* x, Storage storage, int64_t count) {
  return WithStorage(x, storage, [count](const auto* xs) { return SpanMomentsT<true>(xs, count); });
}

// SpanMoments of the two spans x[0, n) and x[n, 2n), their instructions
// interleaved: each span's pivot, reductions and division are a latency chain too
// long for the core to overlap with the next span's on its own (1x256x14x14
// instance norm, one thread: 10.5 -> 9.9 us; 1x1024x7x7: 29.8 -> 26.2 us). Written
// out for two: an array of accumulators left registers for memory (20.5 us).
template <typename T>
HWY_INLINE void TwoSpansMoments(const T* HWY_RESTRICT x, size_t n, Moments* out) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const T* HWY_RESTRICT x1 = x + n;
  const float p0 = SamplePivot(x, n), p1 = SamplePivot(x1, n);
  ShiftedSumsAcc acc0(p0), acc1(p1);
  size_t i = 0, pairs = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    acc0.Add(LoadF(d, x + i), LoadF(d, x + i + N));
    acc1.Add(LoadF(d, x1 + i), LoadF(d, x1 + i + N));
    if (++pairs == ShiftedSumsAcc::kPairsPerRun) acc0.Flush(), acc1.Flush(), pairs = 0;
  }
  double s1[2], s2[2];
  acc0.Finish(x, n, i, &s1[0], &s2[0]);
  acc1.Finish(x1, n, i, &s1[1], &s2[1]);
  out[0] = MomentsAbout(x, n, p0, s1[0], s2[0]);
  out[1] = MomentsAbout(x1, n, p1, s1[1], s2[1]);
}

#if HWY_TARGET != HWY_SCALAR
// FromShiftedSums and ReciprocalStd of each lane (pivot p, shifted sums t1, t2 of
// `count` values): the same operations as those scalar functions, so the same bits.
// Stores the means and rstds; returns whether a lane's pivot was too far from its
// mean (PivotTooFar).
HWY_INLINE bool LanesMeanRstd(hn::Vec<DD> p, hn::Vec<DD> t1, hn::Vec<DD> t2, double count,
                              float eps, double* HWY_RESTRICT mean, double* HWY_RESTRICT rstd) {
  const DD dd;
  const auto n = hn::Set(dd, count);
  const auto m2 = hn::Sub(t2, hn::Mul(t1, hn::Div(t1, n)));
  const auto var = hn::Div(hn::IfThenElseZero(hn::Gt(m2, hn::Zero(dd)), m2), n);
  hn::StoreU(hn::Add(p, hn::Div(t1, n)), dd, mean);
  hn::StoreU(
      hn::Div(hn::Set(dd, 1.0), hn::Sqrt(hn::Add(var, hn::Set(dd, static_cast<double>(eps))))), dd,
      rstd);
  return !hn::AllFalse(dd, hn::Gt(hn::Mul(t1, t1), hn::Mul(hn::Set(dd, 0.5 * count), t2)));
}

#endif

#if NORMKIT_FIXED_BLOCKS
// Lane k of the result in each 128-bit block: the sum of that block's lanes of the
// k-th argument. Every lane's four are added in the same order.
HWY_INLINE hn::Vec<DF> BlockSumsOfFour(hn::Vec<DF> a, hn::Vec<DF> b, hn::Vec<DF> c, hn::Vec<DF> e) {
  const DF d;
  const hn::Repartition<uint64_t, DF> du;
  const auto ab = hn::InterleaveLower(d, a, b) + hn::InterleaveUpper(d, a, b);
  const auto ce = hn::InterleaveLower(d, c, e) + hn::InterleaveUpper(d, c, e);
  const auto abq = hn::BitCast(du, ab), ceq = hn::BitCast(du, ce);
  return hn::BitCast(d, hn::InterleaveLower(du, abq, ceq)) +
         hn::BitCast(d, hn::InterleaveUpper(du, abq, ceq));
}

// Lane j of the result: the sum of all lanes of vector j, from quad[q] =
// BlockSumsOfFour of vectors 4q..4q+3 (q < Lanes / 4). The blocks are added in the
// same tree for every lane, so a lane's sum does not depend on its position.
template <class D>
HWY_INLINE hn::Vec<D> LaneSumsOfQuads(D d, const hn::Vec<D>* quad) {
  constexpr size_t kLanes = hn::MaxLanes(D());
  if constexpr (kLanes == 4) {
    return quad[0];
  } else if constexpr (kLanes == 8) {
    return hn::ConcatLowerLower(d, quad[1], quad[0]) + hn::ConcatUpperUpper(d, quad[1], quad[0]);
  } else {
    static_assert(kLanes == 16, "four 128-bit blocks");
    // Halves first: blocks (0+2, 1+3) of quads 0 and 2, and of quads 1 and 3; then
    // the neighbouring blocks, which leaves quad q's sums in block q.
    const auto h02 =
        hn::ConcatLowerLower(d, quad[2], quad[0]) + hn::ConcatUpperUpper(d, quad[2], quad[0]);
    const auto h13 =
        hn::ConcatLowerLower(d, quad[3], quad[1]) + hn::ConcatUpperUpper(d, quad[3], quad[1]);
    return hn::OddEvenBlocks(h13, h02) +
           hn::OddEvenBlocks(hn::SwapAdjacentBlocks(h13), hn::SwapAdjacentBlocks(h02));
  }
}

// Whether ShortSpansMeanRstd takes spans of n elements: one vector to
// kLaneSpanVectors vectors. Longer spans amortize their own reductions (1x256x14x14
// G=64, 49-vector spans in batches of 5: 2.5% slower lane-parallel), and a float lane
// must sum at most kFlushVectors terms before the tree.
constexpr size_t kLaneSpanVectors = 32;
static_assert(kLaneSpanVectors <= kFlushVectors, "float lanes sum at most kFlushVectors terms");
HWY_INLINE bool LaneParallelSpans(size_t n) {
  const size_t N = hn::Lanes(DF());
  return N >= 4 && n >= N && n <= kLaneSpanVectors * N;
}

// Mean and 1 / sqrt(var + eps) of `spans` (at most one vector's worth) consecutive
// spans of n elements, span j in lane j: each span's vectors are summed lane-wise
// (its last vector loaded whole, ending at the span's end, its lanes already counted
// set to zero), and one transposed reduction per quantity replaces two reductions per
// span, the latency chain that bound SpanMoments on short spans. The pivot of a span
// is the mean of its sampled vectors (SamplePivot's: spread over the span, or all of
// its whole vectors when it has fewer than kPivotVectors); the shifted sums about it,
// the moments and rstd follow, in double lanes side by side. Spans whose pivot was
// too far from their mean (PivotTooFar) get a second pass.
template <typename T>
inline void ShortSpansMeanRstd(const T* HWY_RESTRICT x, size_t n, size_t spans, float eps,
                               double* HWY_RESTRICT mean_out, double* HWY_RESTRICT rstd_out) {
  const DF d;
  const DD dd;
  const DH dh;
  using V = hn::Vec<DF>;
  constexpr size_t kLanes = hn::MaxLanes(DF());
  const size_t N = hn::Lanes(d);
  const size_t whole = n / N;
  const bool tail = whole * N < n;
  const auto fresh = hn::Not(hn::FirstN(d, N - (n - whole * N)));  // of the last vector

  // Pivots.
  const size_t samples = std::min(whole, kPivotVectors);
  const auto sampled_sum = [&](size_t j) {
    if (j >= spans) return hn::Zero(d);  // absent: their lanes are not stored
    const T* HWY_RESTRICT xs = x + j * n;
    V acc = LoadF(d, xs);
    for (size_t k = 1; k < samples; ++k) {
      acc = acc + LoadF(d, xs + (whole > kPivotVectors ? SampledSpanOffset(k, n) : k * N));
    }
    return acc;
  };
  V quad[kLanes / 4];
  for (size_t q = 0; q < N / 4; ++q) {
    quad[q] = BlockSumsOfFour(sampled_sum(4 * q), sampled_sum(4 * q + 1), sampled_sum(4 * q + 2),
                              sampled_sum(4 * q + 3));
  }
  const V pivot = LaneSumsOfQuads(d, quad) * hn::Set(d, 1.0f / static_cast<float>(samples * N));
  alignas(64) float pivots[kLanes];
  hn::Store(pivot, d, pivots);

  // Shifted sums about each span's pivot.
  const auto shifted_sums = [&](size_t j, V& a1, V& a2) {
    a1 = a2 = hn::Zero(d);
    if (j >= spans) return;
    const T* HWY_RESTRICT xs = x + j * n;
    const V p = hn::Set(d, pivots[j]);
    V b1 = hn::Zero(d), b2 = hn::Zero(d);  // odd vectors' chains
    size_t i = 0;
    for (; i + 2 <= whole; i += 2) {
      const V dev0 = LoadF(d, xs + i * N) - p;
      const V dev1 = LoadF(d, xs + i * N + N) - p;
      a1 = a1 + dev0;
      a2 = hn::MulAdd(dev0, dev0, a2);
      b1 = b1 + dev1;
      b2 = hn::MulAdd(dev1, dev1, b2);
    }
    if (i < whole) {
      const V dev = LoadF(d, xs + i * N) - p;
      a1 = a1 + dev;
      a2 = hn::MulAdd(dev, dev, a2);
    }
    if (tail) {
      const V dev = hn::IfThenElseZero(fresh, LoadF(d, xs + n - N) - p);
      b1 = b1 + dev;
      b2 = hn::MulAdd(dev, dev, b2);
    }
    a1 = a1 + b1;
    a2 = a2 + b2;
  };
  V quad1[kLanes / 4], quad2[kLanes / 4];
  for (size_t q = 0; q < N / 4; ++q) {
    V a1, a2, b1, b2, c1, c2, e1, e2;
    shifted_sums(4 * q, a1, a2);
    shifted_sums(4 * q + 1, b1, b2);
    shifted_sums(4 * q + 2, c1, c2);
    shifted_sums(4 * q + 3, e1, e2);
    quad1[q] = BlockSumsOfFour(a1, b1, c1, e1);
    quad2[q] = BlockSumsOfFour(a2, b2, c2, e2);
  }
  const V s1 = LaneSumsOfQuads(d, quad1), s2 = LaneSumsOfQuads(d, quad2);

  // The mean and rstd in double, a half vector of spans at a time.
  alignas(64) double mean[kLanes], rstd[kLanes];
  bool any_far = false;
  for (size_t h = 0; h < 2; ++h) {
    const auto take = [&](V v) {
      return h == 0 ? hn::PromoteTo(dd, hn::LowerHalf(dh, v))
                    : hn::PromoteTo(dd, hn::UpperHalf(dh, v));
    };
    any_far |= LanesMeanRstd(take(pivot), take(s1), take(s2), static_cast<double>(n), eps,
                             mean + h * N / 2, rstd + h * N / 2);
  }
  for (size_t j = 0; j < spans; ++j) {
    mean_out[j] = mean[j];
    rstd_out[j] = rstd[j];
  }
  if (!any_far) return;
  alignas(64) float f1[kLanes], f2[kLanes];
  hn::Store(s1, d, f1);
  hn::Store(s2, d, f2);
  for (size_t j = 0; j < spans; ++j) {
    const double dn1 = static_cast<double>(n), t1 = f1[j], t2 = f2[j];
    if (!PivotTooFar(dn1, t1, t2)) continue;
    const float better = static_cast<float>(static_cast<double>(pivots[j]) + t1 / dn1);
    double r1, r2;
    SecondPassShiftedSums(x + j * n, n, better, &r1, &r2);
    const Moments m = FromShiftedSums(dn1, better, r1, r2);
    mean_out[j] = m.mean;
    rstd_out[j] = ReciprocalStd(m, eps);
  }
}

// 1 / sqrt(mean square + eps) of `spans` (at most one vector's worth) consecutive spans
// of n elements, span j in lane j, as ShortSpansMeanRstd takes them: each span's
// squares summed lane-wise on two float chains (its last vector loaded whole, ending
// at the span's end, the lanes already counted set to zero), one transposed reduction,
// then the mean square and rstd in double lanes side by side.
template <typename T>
inline void ShortSpansRms(const T* HWY_RESTRICT x, size_t n, size_t spans, float eps,
                          double* HWY_RESTRICT rstd_out) {
  const DF d;
  const DD dd;
  const DH dh;
  using V = hn::Vec<DF>;
  constexpr size_t kLanes = hn::MaxLanes(DF());
  const size_t N = hn::Lanes(d);
  const size_t whole = n / N;
  const bool tail = whole * N < n;
  const auto fresh = hn::Not(hn::FirstN(d, N - (n - whole * N)));  // of the last vector
  const auto sum_squares = [&](size_t j) {
    if (j >= spans) return hn::Zero(d);  // absent: their lanes are not stored
    const T* HWY_RESTRICT xs = x + j * n;
    V a = hn::Zero(d), b = hn::Zero(d);  // even and odd vectors' chains
    size_t i = 0;
    for (; i + 2 <= whole; i += 2) {
      const V v0 = LoadF(d, xs + i * N), v1 = LoadF(d, xs + i * N + N);
      a = hn::MulAdd(v0, v0, a);
      b = hn::MulAdd(v1, v1, b);
    }
    if (i < whole) {
      const V v = LoadF(d, xs + i * N);
      a = hn::MulAdd(v, v, a);
    }
    if (tail) {
      const V v = hn::IfThenElseZero(fresh, LoadF(d, xs + n - N));
      b = hn::MulAdd(v, v, b);
    }
    return a + b;
  };
  V quad[kLanes / 4];
  for (size_t q = 0; q < N / 4; ++q) {
    quad[q] = BlockSumsOfFour(sum_squares(4 * q), sum_squares(4 * q + 1), sum_squares(4 * q + 2),
                              sum_squares(4 * q + 3));
  }
  const V sums = LaneSumsOfQuads(d, quad);
  alignas(64) double rstd[kLanes];
  const auto count = hn::Set(dd, static_cast<double>(n));
  const auto deps = hn::Set(dd, static_cast<double>(eps));
  const auto rstd_of = [&](hn::Vec<DD> sum) {
    return hn::Set(dd, 1.0) / hn::Sqrt(sum / count + deps);
  };
  hn::Store(rstd_of(hn::PromoteTo(dd, hn::LowerHalf(dh, sums))), dd, rstd);
  hn::Store(rstd_of(hn::PromoteTo(dd, hn::UpperHalf(dh, sums))), dd, rstd + N / 2);
  for (size_t j = 0; j < spans; ++j) rstd_out[j] = rstd[j];
}
#endif  // NORMKIT_FIXED_BLOCKS

template <typename T>
inline void SpanMeanRstdEachT(const T* HWY_RESTRICT x, int64_t n, int64_t count, float eps,
                              double* mean, double* rstd) {
  const size_t un = n > 0 ? static_cast<size_t>(n) : 0;
  int64_t k = 0;
#if NORMKIT_FIXED_BLOCKS
  if (LaneParallelSpans(un)) {
    const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
    for (; k < count; k += N) {
      ShortSpansMeanRstd(x + k * n, un, static_cast<size_t>(std::min(N, count - k)), eps, mean + k,
                         rstd + k);
    }
    return;
  }
#endif
  // Other lengths: SpanMoments' statistics, two spans at a time.
  Moments m[2];
  for (; k + 2 <= count && un > 0; k += 2) {
    TwoSpansMoments(x + k * n, un, m);
    for (int j = 0; j < 2; ++j) mean[k + j] = m[j].mean, rstd[k + j] = ReciprocalStd(m[j], eps);
  }
  for (; k < count; ++k) {
    m[0] = SpanMomentsT<false>(x + k * n, n);
    mean[k] = m[0].mean;
    rstd[k] = ReciprocalStd(m[0], eps);
  }
}

inline void SpanMeanRstdEachImpl(const void* x, Storage storage, int64_t n, int64_t count,
                                 float eps, double* mean, double* rstd) {
  WithStorage(x, storage,
              [&](const auto* xs) { SpanMeanRstdEachT(xs, n, count, eps, mean, rstd); });
}

inline void ChannelParametersEachImpl(const double* HWY_RESTRICT mean,
                                      const double* HWY_RESTRICT rstd,
                                      const float* HWY_RESTRICT gamma,
                                      const float* HWY_RESTRICT beta, int64_t count,
                                      float* HWY_RESTRICT mean_f, float* HWY_RESTRICT scale,
                                      float* HWY_RESTRICT shift) {
  const size_t n = count > 0 ? static_cast<size_t>(count) : 0;
  size_t i = 0;
// Not on EMU128: its DemoteTo clamps infinities to +-FLT_MAX (Highway's emulation avoids
// an out-of-range cast); the one-lane loop keeps them, as the hardware targets do.
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
  const DD dd;
  const hn::Rebind<float, DD> df;  // as many floats as doubles
  const size_t N = hn::Lanes(dd);
  for (; i + N <= n; i += N) {
    const auto m = hn::LoadU(dd, mean + i);
    const auto g = gamma ? hn::PromoteTo(dd, hn::LoadU(df, gamma + i)) : hn::Set(dd, 1.0);
    const auto b = beta ? hn::PromoteTo(dd, hn::LoadU(df, beta + i)) : hn::Zero(dd);
    const auto mf = hn::DemoteTo(df, m);
    const auto sc = hn::DemoteTo(df, hn::Mul(g, hn::LoadU(dd, rstd + i)));
    const auto residual = hn::Sub(m, hn::PromoteTo(dd, mf));
    hn::StoreU(mf, df, mean_f + i);
    hn::StoreU(sc, df, scale + i);
    hn::StoreU(hn::DemoteTo(df, hn::Sub(b, hn::Mul(residual, hn::PromoteTo(dd, sc)))), df,
               shift + i);
  }
#endif
  for (; i < n; ++i) {  // the same operations, one lane
    const double g = gamma ? static_cast<double>(gamma[i]) : 1.0;
    const double b = beta ? static_cast<double>(beta[i]) : 0.0;
    mean_f[i] = static_cast<float>(mean[i]);
    scale[i] = static_cast<float>(g * rstd[i]);
    shift[i] = static_cast<float>(b - (mean[i] - static_cast<double>(mean_f[i])) *
                                          static_cast<double>(scale[i]));
  }
}

template <typename T>
inline double SpanSumSquaresT(const T* HWY_RESTRICT x, int64_t count) {
  const DF d;
  const DD dd;
  const size_t N = hn::Lanes(d);
  const size_t n = count > 0 ? static_cast<size_t>(count) : 0;
  auto lo = hn::Zero(dd), hi = hn::Zero(dd);
  size_t i = 0;
  // Four chains (quads, then a last pair): with two, the sums of a row in L1 waited on
  // the chains' latency (RMS norm, one thread, same-process A/B, time with four: [256,
  // 768] 0.93, [2048, 768] 0.94; [4096, 768], from L3, 0.99).
  while (i + 2 * N <= n) {
    auto a = hn::Zero(d), b = hn::Zero(d), c = hn::Zero(d), e = hn::Zero(d);
    const size_t run_end = std::min(n, i + kFlushVectors * N);
    for (; i + 4 * N <= run_end; i += 4 * N) {
      const auto v0 = LoadF(d, x + i), v1 = LoadF(d, x + i + N);
      const auto v2 = LoadF(d, x + i + 2 * N), v3 = LoadF(d, x + i + 3 * N);
      a = hn::MulAdd(v0, v0, a);
      b = hn::MulAdd(v1, v1, b);
      c = hn::MulAdd(v2, v2, c);
      e = hn::MulAdd(v3, v3, e);
    }
    if (i + 2 * N <= run_end) {
      const auto v0 = LoadF(d, x + i), v1 = LoadF(d, x + i + N);
      a = hn::MulAdd(v0, v0, a);
      b = hn::MulAdd(v1, v1, b);
      i += 2 * N;
    }
    AccumulateWide(hn::Add(hn::Add(a, b), hn::Add(c, e)), lo, hi);
  }
  double sum = SumLanes(hn::Add(lo, hi));
  for (; i < n; ++i) {
    const auto v = static_cast<double>(FloatAt(x + i));
    sum += v * v;
  }
  return sum;
}

inline double SpanSumSquaresImpl(const void* x, Storage storage, int64_t count) {
  return WithStorage(x, storage, [count](const auto* xs) { return SpanSumSquaresT(xs, count); });
}

template <typename T>
inline void SpanRmsEachT(const T* HWY_RESTRICT x, int64_t n, int64_t count, float eps,
                         double* rstd) {
  int64_t k = 0;
#if NORMKIT_FIXED_BLOCKS
  const size_t un = n > 0 ? static_cast<size_t>(n) : 0;
  if (LaneParallelSpans(un)) {
    const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
    for (; k < count; k += N) {
      ShortSpansRms(x + k * n, un, static_cast<size_t>(std::min(N, count - k)), eps, rstd + k);
    }
    return;
  }
#endif
  for (; k < count; ++k) {
    const double ms = SpanSumSquaresT(x + k * n, n) / static_cast<double>(n);
    rstd[k] = 1.0 / std::sqrt(ms + static_cast<double>(eps));
  }
}

inline void SpanRmsEachImpl(const void* x, Storage storage, int64_t n, int64_t count, float eps,
                            double* rstd) {
  WithStorage(x, storage, [&](const auto* xs) { SpanRmsEachT(xs, n, count, eps, rstd); });
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
NORMKIT_AFTER_NAMESPACE();

#endif  // NORMKIT_CPU_KERNELS_MOMENTS_INL_H_ toggle
