// SPDX-License-Identifier: Apache-2.0
// Normalization kernels, compiled for every SIMD target and dispatched at run time.
#include "cpu/kernels/group_norm.h"

#include <algorithm>
#include <type_traits>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/group_norm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep: must precede highway.h
#include "hwy/highway.h"
// clang-format on
#include "hwy/cache_control.h"

HWY_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
#if HWY_TARGET == HWY_SCALAR
using DD = hn::Rebind<double, DF>;
#else
using DD = hn::Repartition<double, DF>;
using DH = hn::Half<DF>;
#endif

// Adds the two halves of v, widened to double, to lo and hi.
HWY_INLINE void AccumulateWide(hn::Vec<DF> v, hn::Vec<DD>& lo, hn::Vec<DD>& hi) {
#if HWY_TARGET == HWY_SCALAR  // one lane: no halves, and hi receives nothing
  lo = lo + hn::PromoteTo(DD(), v);
#else
  const DD dd;
  const DH dh;
  lo = lo + hn::PromoteTo(dd, hn::LowerHalf(dh, v));
  hi = hi + hn::PromoteTo(dd, hn::UpperHalf(dh, v));
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
HWY_INLINE float SamplePivot(const float* x, size_t n) {
  const DF d;
  const size_t N = hn::Lanes(d);
  if (n < kPivotVectors * N) {  // short spans: their first whole vectors, then lanes
    size_t i = 0;
    float sum = 0.0f;
    if (n >= N) {
      auto acc = hn::LoadU(d, x);
      for (i = N; i + N <= n; i += N) acc = acc + hn::LoadU(d, x + i);
      sum = hn::GetLane(hn::SumOfLanes(d, acc));
    }
    for (; i < n; ++i) sum += x[i];
    return sum / static_cast<float>(n);
  }
  auto acc = hn::Zero(d);
  for (size_t j = 0; j < kPivotVectors; ++j) {
    acc = acc + hn::LoadU(d, x + SampledSpanOffset(j, static_cast<int64_t>(n)));
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

  explicit ShiftedSumsAcc(float p) : p_(p), vp_(hn::Set(DF(), p)) {}

  HWY_INLINE void Add(hn::Vec<DF> v0, hn::Vec<DF> v1) {
    AddTo(v0, a1_, a2_);
    AddTo(v1, b1_, b2_);
  }

  HWY_INLINE void AddQuad(hn::Vec<DF> v0, hn::Vec<DF> v1, hn::Vec<DF> v2, hn::Vec<DF> v3) {
    AddTo(v0, a1_, a2_);
    AddTo(v1, b1_, b2_);
    AddTo(v2, c1_, c2_);
    AddTo(v3, e1_, e2_);
  }

  // Pairs leave the last two chains at zero, and adding them changes no bit.
  HWY_INLINE void Flush() {
    AccumulateWide((a1_ + b1_) + (c1_ + e1_), s1lo_, s1hi_);
    AccumulateWide((a2_ + b2_) + (c2_ + e2_), s2lo_, s2hi_);
    a1_ = a2_ = b1_ = b2_ = c1_ = c2_ = e1_ = e2_ = hn::Zero(DF());
  }

  // The sums of the span x[0, n), with its elements from i on (fewer than two
  // vectors) added to the run in flight: a whole vector, then the span's last vector
  // with the lanes already counted set to zero; then the run's flush. Spans shorter
  // than a vector go one element at a time in double. (One at a time, the 17 left of
  // a 7x7 plane cost instance norm on 1x1024x7x7 four tenths of its time.)
  HWY_INLINE void Finish(const float* HWY_RESTRICT x, size_t n, size_t i, double* s1_out,
                         double* s2_out) {
    const DF d;
    const size_t N = hn::Lanes(d);
    if (n >= N && i < n) {
      if (n - i >= N) {
        const auto dev = hn::LoadU(d, x + i) - vp_;
        a1_ = a1_ + dev;
        a2_ = hn::MulAdd(dev, dev, a2_);
        i += N;
      }
      if (i < n) {
        const auto fresh = hn::Not(hn::FirstN(d, N - (n - i)));
        const auto dev = hn::IfThenElseZero(fresh, hn::LoadU(d, x + n - N) - vp_);
        b1_ = b1_ + dev;
        b2_ = hn::MulAdd(dev, dev, b2_);
        i = n;
      }
    }
    Flush();
    double s1 = SumLanes(s1lo_ + s1hi_), s2 = SumLanes(s2lo_ + s2hi_);
    for (; i < n; ++i) {
      const double dev = static_cast<double>(x[i] - p_);
      s1 += dev;
      s2 += dev * dev;
    }
    *s1_out = s1;
    *s2_out = s2;
  }

 private:
  HWY_INLINE void AddTo(hn::Vec<DF> v, hn::Vec<DF>& sum, hn::Vec<DF>& squares) const {
    const auto dev = v - vp_;
    sum = sum + dev;
    squares = hn::MulAdd(dev, dev, squares);
  }

  float p_;
  hn::Vec<DF> vp_;
  hn::Vec<DF> a1_ = hn::Zero(DF()), a2_ = hn::Zero(DF()), b1_ = hn::Zero(DF()),
              b2_ = hn::Zero(DF()), c1_ = hn::Zero(DF()), c2_ = hn::Zero(DF()),
              e1_ = hn::Zero(DF()), e2_ = hn::Zero(DF());
  hn::Vec<DD> s1lo_ = hn::Zero(DD()), s1hi_ = hn::Zero(DD()), s2lo_ = hn::Zero(DD()),
              s2hi_ = hn::Zero(DD());
};

// kQuads: the span fed four vectors at a time to four chains (then its last pair), the
// layer-norm rows' walk; otherwise in pairs, the walk every group-norm statistic takes.
template <bool kQuads = false>
HWY_INLINE void SpanShiftedSums(const float* HWY_RESTRICT x, size_t n, float p, double* s1_out,
                                double* s2_out) {
  const DF d;
  const size_t N = hn::Lanes(d);
  constexpr size_t kStep = kQuads ? 4 : 2;  // vectors a step
  ShiftedSumsAcc acc(p);
  const auto add_steps = [&](size_t i, size_t end) {
    for (; i < end; i += kStep * N) {
      if constexpr (kQuads) {
        acc.AddQuad(hn::LoadU(d, x + i), hn::LoadU(d, x + i + N), hn::LoadU(d, x + i + 2 * N),
                    hn::LoadU(d, x + i + 3 * N));
      } else {
        acc.Add(hn::LoadU(d, x + i), hn::LoadU(d, x + i + N));
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
    acc.Add(hn::LoadU(d, x + i), hn::LoadU(d, x + i + N));
    i += 2 * N;
  }
  acc.Finish(x, n, i, s1_out, s2_out);
}

// The rare second pass, out of line: inlined, it changed the code of every kernel
// that ends in MomentsAbout; the chained one ran 10% slower for it (1x256x14x14 G=32,
// one thread).
HWY_NOINLINE void SecondPassShiftedSums(const float* HWY_RESTRICT x, size_t n, float p,
                                        double* s1_out, double* s2_out) {
  SpanShiftedSums(x, n, p, s1_out, s2_out);
}

// Moments of x[0, n) from its shifted sums about p, with a second pass about the
// mean they found when p was too far from it to keep the digits.
HWY_INLINE Moments MomentsAbout(const float* HWY_RESTRICT x, size_t n, float p, double s1,
                                double s2) {
  const double dn = static_cast<double>(n);
  if (PivotTooFar(dn, s1, s2)) {
    p = static_cast<float>(static_cast<double>(p) + s1 / dn);
    SecondPassShiftedSums(x, n, p, &s1, &s2);
  }
  return FromShiftedSums(dn, p, s1, s2);
}

// One pass of shifted sums about a sampled pivot (and the second when needed).
template <bool kQuads>
HWY_INLINE Moments SpanMomentsT(const float* HWY_RESTRICT x, int64_t count) {
  if (count <= 0) return Moments();
  const size_t n = static_cast<size_t>(count);
  const float p = SamplePivot(x, n);
  double s1, s2;
  SpanShiftedSums<kQuads>(x, n, p, &s1, &s2);
  return MomentsAbout(x, n, p, s1, s2);
}

Moments SpanMomentsImpl(const float* HWY_RESTRICT x, int64_t count) {
  return SpanMomentsT<false>(x, count);
}

// SpanMoments with the span fed in quads to four chains (then its last pair, if any):
// the statistics of a layer norm row, which depend on the row alone and need match no
// other walk. A row's sums, from L1, were bound by the latency of two chains: against
// SpanMoments, one thread, same-process A/B, [4096, 768] took 0.89-0.90 of the time,
// [256, 768] 0.94-0.95.
Moments RowMomentsImpl(const float* HWY_RESTRICT x, int64_t count) {
  return SpanMomentsT<true>(x, count);
}

// SpanMoments of the two spans x[0, n) and x[n, 2n), their instructions
// interleaved: each span's pivot, reductions and division are a latency chain too
// long for the core to overlap with the next span's on its own (1x256x14x14
// instance norm, one thread: 10.5 -> 9.9 us; 1x1024x7x7: 29.8 -> 26.2 us). Written
// out for two: an array of accumulators left registers for memory (20.5 us).
HWY_INLINE void TwoSpansMoments(const float* HWY_RESTRICT x, size_t n, Moments* out) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const float* HWY_RESTRICT x1 = x + n;
  const float p0 = SamplePivot(x, n), p1 = SamplePivot(x1, n);
  ShiftedSumsAcc acc0(p0), acc1(p1);
  size_t i = 0, pairs = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    acc0.Add(hn::LoadU(d, x + i), hn::LoadU(d, x + i + N));
    acc1.Add(hn::LoadU(d, x1 + i), hn::LoadU(d, x1 + i + N));
    if (++pairs == ShiftedSumsAcc::kPairsPerRun) acc0.Flush(), acc1.Flush(), pairs = 0;
  }
  double s1[2], s2[2];
  acc0.Finish(x, n, i, &s1[0], &s2[0]);
  acc1.Finish(x1, n, i, &s1[1], &s2[1]);
  out[0] = MomentsAbout(x, n, p0, s1[0], s2[0]);
  out[1] = MomentsAbout(x1, n, p1, s1[1], s2[1]);
}

#if HWY_TARGET != HWY_SCALAR
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

// FromShiftedSums and ReciprocalStd of each lane (pivot p, shifted sums t1, t2 of
// `count` values): the same operations as those scalar functions, so the same bits.
// Stores the means and rstds; returns whether a lane's pivot was too far from its
// mean (PivotTooFar).
HWY_INLINE bool LanesMeanRstd(hn::Vec<DD> p, hn::Vec<DD> t1, hn::Vec<DD> t2, double count,
                              float eps, double* HWY_RESTRICT mean, double* HWY_RESTRICT rstd) {
  const DD dd;
  const auto n = hn::Set(dd, count);
  const auto m2 = t2 - t1 * (t1 / n);
  const auto var = hn::IfThenElseZero(m2 > hn::Zero(dd), m2) / n;
  hn::StoreU(p + t1 / n, dd, mean);
  hn::StoreU(hn::Set(dd, 1.0) / hn::Sqrt(var + hn::Set(dd, static_cast<double>(eps))), dd, rstd);
  return !hn::AllFalse(dd, t1 * t1 > hn::Set(dd, 0.5 * count) * t2);
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
void ShortSpansMeanRstd(const float* HWY_RESTRICT x, size_t n, size_t spans, float eps,
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
    const float* HWY_RESTRICT xs = x + j * n;
    V acc = hn::LoadU(d, xs);
    for (size_t k = 1; k < samples; ++k) {
      acc = acc + hn::LoadU(d, xs + (whole > kPivotVectors ? SampledSpanOffset(k, n) : k * N));
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
    const float* HWY_RESTRICT xs = x + j * n;
    const V p = hn::Set(d, pivots[j]);
    V b1 = hn::Zero(d), b2 = hn::Zero(d);  // odd vectors' chains
    size_t i = 0;
    for (; i + 2 <= whole; i += 2) {
      const V dev0 = hn::LoadU(d, xs + i * N) - p;
      const V dev1 = hn::LoadU(d, xs + i * N + N) - p;
      a1 = a1 + dev0;
      a2 = hn::MulAdd(dev0, dev0, a2);
      b1 = b1 + dev1;
      b2 = hn::MulAdd(dev1, dev1, b2);
    }
    if (i < whole) {
      const V dev = hn::LoadU(d, xs + i * N) - p;
      a1 = a1 + dev;
      a2 = hn::MulAdd(dev, dev, a2);
    }
    if (tail) {
      const V dev = hn::IfThenElseZero(fresh, hn::LoadU(d, xs + n - N) - p);
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
void ShortSpansRms(const float* HWY_RESTRICT x, size_t n, size_t spans, float eps,
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
    const float* HWY_RESTRICT xs = x + j * n;
    V a = hn::Zero(d), b = hn::Zero(d);  // even and odd vectors' chains
    size_t i = 0;
    for (; i + 2 <= whole; i += 2) {
      const V v0 = hn::LoadU(d, xs + i * N), v1 = hn::LoadU(d, xs + i * N + N);
      a = hn::MulAdd(v0, v0, a);
      b = hn::MulAdd(v1, v1, b);
    }
    if (i < whole) {
      const V v = hn::LoadU(d, xs + i * N);
      a = hn::MulAdd(v, v, a);
    }
    if (tail) {
      const V v = hn::IfThenElseZero(fresh, hn::LoadU(d, xs + n - N));
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
#endif  // HWY_TARGET != HWY_SCALAR

void SpanMeanRstdEachImpl(const float* HWY_RESTRICT x, int64_t n, int64_t count, float eps,
                          double* mean, double* rstd) {
  const size_t un = n > 0 ? static_cast<size_t>(n) : 0;
  int64_t k = 0;
#if HWY_TARGET != HWY_SCALAR
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
    m[0] = SpanMomentsImpl(x + k * n, n);
    mean[k] = m[0].mean;
    rstd[k] = ReciprocalStd(m[0], eps);
  }
}

void ChannelParametersEachImpl(const double* HWY_RESTRICT mean, const double* HWY_RESTRICT rstd,
                               const float* HWY_RESTRICT gamma, const float* HWY_RESTRICT beta,
                               int64_t count, float* HWY_RESTRICT mean_f, float* HWY_RESTRICT scale,
                               float* HWY_RESTRICT shift) {
  const size_t n = count > 0 ? static_cast<size_t>(count) : 0;
  size_t i = 0;
#if HWY_TARGET != HWY_SCALAR
  const DD dd;
  const hn::Rebind<float, DD> df;  // as many floats as doubles
  const size_t N = hn::Lanes(dd);
  for (; i + N <= n; i += N) {
    const auto m = hn::LoadU(dd, mean + i);
    const auto g = gamma ? hn::PromoteTo(dd, hn::LoadU(df, gamma + i)) : hn::Set(dd, 1.0);
    const auto b = beta ? hn::PromoteTo(dd, hn::LoadU(df, beta + i)) : hn::Zero(dd);
    const auto mf = hn::DemoteTo(df, m);
    const auto sc = hn::DemoteTo(df, g * hn::LoadU(dd, rstd + i));
    const auto residual = m - hn::PromoteTo(dd, mf);
    hn::StoreU(mf, df, mean_f + i);
    hn::StoreU(sc, df, scale + i);
    hn::StoreU(hn::DemoteTo(df, b - residual * hn::PromoteTo(dd, sc)), df, shift + i);
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

double SpanSumSquaresImpl(const float* HWY_RESTRICT x, int64_t count) {
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
      const auto v0 = hn::LoadU(d, x + i), v1 = hn::LoadU(d, x + i + N);
      const auto v2 = hn::LoadU(d, x + i + 2 * N), v3 = hn::LoadU(d, x + i + 3 * N);
      a = hn::MulAdd(v0, v0, a);
      b = hn::MulAdd(v1, v1, b);
      c = hn::MulAdd(v2, v2, c);
      e = hn::MulAdd(v3, v3, e);
    }
    if (i + 2 * N <= run_end) {
      const auto v0 = hn::LoadU(d, x + i), v1 = hn::LoadU(d, x + i + N);
      a = hn::MulAdd(v0, v0, a);
      b = hn::MulAdd(v1, v1, b);
      i += 2 * N;
    }
    AccumulateWide((a + b) + (c + e), lo, hi);
  }
  double sum = SumLanes(lo + hi);
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return sum;
}

void SpanRmsEachImpl(const float* HWY_RESTRICT x, int64_t n, int64_t count, float eps,
                     double* rstd) {
  int64_t k = 0;
#if HWY_TARGET != HWY_SCALAR
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
    const double ms = SpanSumSquaresImpl(x + k * n, n) / static_cast<double>(n);
    rstd[k] = 1.0 / std::sqrt(ms + static_cast<double>(eps));
  }
}

// Channels-last rows of at most four vectors are walked a few vectors of channels at
// a time down all rows of the block (a walk that stays within a few KiB), with the
// accumulators in registers; wider rows go through ShiftedSumsRowStreams. Channels
// past the last whole vector go one at a time: shifted sums of one channel, in double.
HWY_INLINE void ShiftedSumsChannel(const float* HWY_RESTRICT x, size_t R, size_t C, size_t c,
                                   const float* HWY_RESTRICT pivot, double* HWY_RESTRICT s1,
                                   double* HWY_RESTRICT s2) {
  const hn::CappedTag<float, 1> d;
  const hn::Rebind<double, decltype(d)> dw;
  const auto vp = hn::LoadU(d, pivot + c);
  auto w1 = hn::Zero(dw), w2 = hn::Zero(dw);
  for (size_t r = 0; r < R; ++r) {
    const auto dev = hn::PromoteTo(dw, hn::LoadU(d, x + r * C + c) - vp);
    w1 = w1 + dev;
    w2 = hn::MulAdd(dev, dev, w2);
  }
  s1[c] = hn::GetLane(w1);
  s2[c] = hn::GetLane(w2);
}

// Adds the four vectors at `row` minus their pivots p0..p3 to a0..a3 and the squares
// of those differences to b0..b3.
template <class V>
HWY_INLINE void AddShiftedFour(const float* HWY_RESTRICT row, V p0, V p1, V p2, V p3, V& a0, V& a1,
                               V& a2, V& a3, V& b0, V& b1, V& b2, V& b3) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const auto d0 = hn::LoadU(d, row) - p0;
  const auto d1 = hn::LoadU(d, row + N) - p1;
  const auto d2 = hn::LoadU(d, row + 2 * N) - p2;
  const auto d3 = hn::LoadU(d, row + 3 * N) - p3;
  a0 = a0 + d0;
  a1 = a1 + d1;
  a2 = a2 + d2;
  a3 = a3 + d3;
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
template <size_t kVectors>
HWY_INLINE void ShiftedSumsColumns(const float* HWY_RESTRICT x, size_t R, size_t C, size_t c,
                                   const float* HWY_RESTRICT pivot, double* HWY_RESTRICT s1,
                                   double* HWY_RESTRICT s2) {
  const DF d;
  const DD dd;
  const size_t N = hn::Lanes(d);
  constexpr size_t K = kVectors;
  constexpr size_t kPhases = K == 1 ? 4 : K == 4 ? 1 : 2;
  hn::Vec<DF> p[K];
  hn::Vec<DD> ul[K], uh[K], ql[K], qh[K];
  for (size_t v = 0; v < K; ++v) {
    p[v] = hn::LoadU(d, pivot + c + v * N);
    ul[v] = uh[v] = ql[v] = qh[v] = hn::Zero(dd);
  }
  for (size_t r = 0; r < R;) {
    hn::Vec<DF> a[kPhases][K], b[kPhases][K];
    for (size_t u = 0; u < kPhases; ++u) {
      for (size_t v = 0; v < K; ++v) a[u][v] = b[u][v] = hn::Zero(d);
    }
    const size_t run_end = std::min(R, r + kFlushVectors);
    for (; r + kPhases <= run_end; r += kPhases) {
      HWY_UNROLL(4)
      for (size_t u = 0; u < kPhases; ++u) {
        HWY_UNROLL(4)
        for (size_t v = 0; v < K; ++v) {
          const auto dev = hn::LoadU(d, x + (r + u) * C + c + v * N) - p[v];
          a[u][v] = a[u][v] + dev;
          b[u][v] = hn::MulAdd(dev, dev, b[u][v]);
        }
      }
    }
    for (size_t u = 0; r < run_end; ++r, ++u) {  // the run's last rows, fewer than kPhases
      for (size_t v = 0; v < K; ++v) {
        const auto dev = hn::LoadU(d, x + r * C + c + v * N) - p[v];
        a[u][v] = a[u][v] + dev;
        b[u][v] = hn::MulAdd(dev, dev, b[u][v]);
      }
    }
    for (size_t v = 0; v < K; ++v) {
      auto sa = a[0][v], sb = b[0][v];
      if constexpr (kPhases >= 2) {
        sa = sa + a[1][v];
        sb = sb + b[1][v];
      }
      if constexpr (kPhases == 4) {
        sa = sa + (a[2][v] + a[3][v]);
        sb = sb + (b[2][v] + b[3][v]);
      }
      AccumulateWide(sa, ul[v], uh[v]);
      AccumulateWide(sb, ql[v], qh[v]);
    }
  }
  for (size_t v = 0; v < K; ++v) {
#if HWY_TARGET == HWY_SCALAR
    s1[c + v] = hn::GetLane(ul[v]);
    s2[c + v] = hn::GetLane(ql[v]);
#else
    const size_t h = hn::Lanes(dd);
    hn::StoreU(ul[v], dd, s1 + c + v * N), hn::StoreU(uh[v], dd, s1 + c + v * N + h);
    hn::StoreU(ql[v], dd, s2 + c + v * N), hn::StoreU(qh[v], dd, s2 + c + v * N + h);
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
template <size_t kRows>
HWY_INLINE void AddRowsToRunSums(const float* const* rows, size_t C4,
                                 const float* HWY_RESTRICT pivot, float* HWY_RESTRICT run1,
                                 float* HWY_RESTRICT run2) {
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

HWY_INLINE void ShiftedSumsRowStreams(const float* HWY_RESTRICT x, size_t R, size_t C, size_t C4,
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
    const float* rows[kRowStreams];
    for (size_t k = 0; k < kRowStreams; ++k) rows[k] = x + (k * D + i) * C;
    AddRowsToRunSums<kRowStreams>(rows, C4, pivot, run1, run2);
    added(kRowStreams);
  }
  for (size_t r = kRowStreams * D; r < R; ++r) {
    const float* row = x + r * C;
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

void ChannelShiftedSumsImpl(const float* HWY_RESTRICT x, int64_t rows, int64_t channels,
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

void SampledRowSumsImpl(const float* HWY_RESTRICT x, int64_t rows, int64_t channels,
                        int64_t samples, float* HWY_RESTRICT out) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t C = static_cast<size_t>(channels);
  size_t c = 0;
  for (; c + N <= C; c += N) {
    auto acc = hn::Zero(d);
    for (int64_t j = 0; j < samples; ++j) {
      acc = acc + hn::LoadU(d, x + static_cast<size_t>(SampledRow(j, samples, rows)) * C + c);
    }
    hn::StoreU(acc, d, out + c);
  }
  for (; c < C; ++c) {
    float acc = 0.0f;
    for (int64_t j = 0; j < samples; ++j) {
      acc += x[static_cast<size_t>(SampledRow(j, samples, rows)) * C + c];
    }
    out[c] = acc;
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

void ColumnMeanRstdImpl(const float* HWY_RESTRICT x, int64_t rows, int64_t channels,
                        int64_t samples, float eps, bool from_memory, float* HWY_RESTRICT pivot,
                        double* HWY_RESTRICT s1, double* HWY_RESTRICT s2,
                        float* HWY_RESTRICT scratch, double* HWY_RESTRICT mean,
                        double* HWY_RESTRICT rstd) {
  const size_t C = static_cast<size_t>(channels);
  const double count = static_cast<double>(rows);
  SampledRowSumsImpl(x, rows, channels, samples, pivot);
  // The pivot of a group of one channel, as group norm's channels-last statistics
  // take it (the same bits): the double mean of its sampled values, rounded.
  const double dsamples = static_cast<double>(samples);
  size_t c = 0;
#if HWY_TARGET != HWY_SCALAR
  const DD dd;
  const hn::Rebind<float, DD> df;
  for (; c + hn::Lanes(dd) <= C; c += hn::Lanes(dd)) {
    const auto sum = hn::PromoteTo(dd, hn::LoadU(df, pivot + c));
    hn::StoreU(hn::DemoteTo(df, sum / hn::Set(dd, dsamples)), df, pivot + c);
  }
#endif
  for (; c < C; ++c) pivot[c] = static_cast<float>(static_cast<double>(pivot[c]) / dsamples);
  ChannelShiftedSumsImpl(x, rows, channels, pivot, s1, s2, scratch, from_memory);
  if (!ColumnsMeanRstd(C, count, pivot, s1, s2, eps, mean, rstd)) return;
  // A second pass about the means the first found, for the channels that need it
  // (the others keep their pivots, so their sums and results do not change).
  for (c = 0; c < C; ++c) {
    if (PivotTooFar(count, s1[c], s2[c])) pivot[c] = static_cast<float>(mean[c]);
  }
  ChannelShiftedSumsImpl(x, rows, channels, pivot, s1, s2, scratch, from_memory);
  ColumnsMeanRstd(C, count, pivot, s1, s2, eps, mean, rstd);
}

// SiLU's exponential is clamped to v in [kSiluLo, 87]: e^-v stays a finite float.
constexpr float kSiluLo = -88.0f;

// e^-v for v clamped to [kSiluLo, 87] (normal results): 2^k * P(f) with k = round(-v / ln2)
// and f = -v - k ln2 in [-ln2/2, ln2/2]; P is a degree-5 fit of e^f (relative error
// 1.4e-7, below a float ulp). Adding 1.5 * 2^23 + 127 rounds -v / ln2 to an integer
// in the low mantissa bits, already biased: shifted into the exponent field they are
// 2^k. Written in g = v + k ln2 = -f, with P's odd coefficients negated: 14 operations
// where e^t of a negated v with a separate rounding, conversion and bias took 17.
// max(kSiluLo, v), a NaN v kept: x86's max returns its second operand for NaN, NEON's,
// SVE's and WASM's return NaN; the emulated targets' return the other operand.
template <class D, class V>
HWY_INLINE V AtLeastSiluLo(D d, V v) {
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
  return hn::IfThenElse(v < hn::Set(d, kSiluLo), hn::Set(d, kSiluLo), v);
#else
  return hn::Max(hn::Set(d, kSiluLo), v);
#endif
}

// The caller clamps v from below (AtLeastSiluLo, shared with SiLU's product).
template <class D, class V>
HWY_INLINE V ExpOfNegClamped(D d, V v) {
  const hn::RebindToSigned<D> di;
  constexpr float kBiasedRound = 12582912.0f + 127.0f;  // 1.5 * 2^23 + exponent bias
  v = hn::Min(v, hn::Set(d, 87.0f));  // NaN: 87 on x86, NaN elsewhere; the product keeps it
  const auto biased = hn::MulAdd(v, hn::Set(d, -1.44269504f), hn::Set(d, kBiasedRound));
  const auto k = biased - hn::Set(d, kBiasedRound);
  auto g = hn::MulAdd(k, hn::Set(d, 0.693145752f), v);  // ln2 split hi / lo
  g = hn::MulAdd(k, hn::Set(d, 1.42860677e-06f), g);
  auto p = hn::Set(d, -0.008297654f);
  p = hn::MulAdd(p, g, hn::Set(d, 0.041915383f));
  p = hn::MulAdd(p, g, hn::Set(d, -0.16667575f));
  p = hn::MulAdd(p, g, hn::Set(d, 0.49998894f));
  p = hn::MulAdd(p, g, hn::Set(d, -0.9999997f));
  p = hn::MulAdd(p, g, hn::Set(d, 1.0000001f));
  return p * hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, biased)));
}

template <Activation kAct, class D, class V>
HWY_INLINE V Activate(D d, V v) {
  if constexpr (kAct == Activation::kRelu) {
    // Not Max(v, 0): x86 max returns the second operand for NaN, and NaN must survive.
    return hn::IfThenZeroElse(v < hn::Zero(d), v);
  } else if constexpr (kAct == Activation::kSilu) {
    if constexpr (hn::MaxLanes(D()) < hn::MaxLanes(DF())) {
      // Partial vectors (peels, tails) go through a full one: the reciprocal estimate
      // of a 128-bit vector may differ from a 512-bit one's, and an element's result
      // must not depend on where its span starts.
      const DF df;
      return hn::Set(d, hn::GetLane(Activate<kAct>(df, hn::Set(df, hn::GetLane(v)))));
    }
    // v * 1 / (1 + e^-v): within 8 * 2^-24 relative of the exact value for v >= -87.
    // Below, 1 / (1 + e^-v) nears FLT_MIN (the clamp holds e^-v at e^88, and the
    // reciprocal estimate may flush): there |silu(v)| < 1.5e-36 and the result is within
    // 1.5e-36 of it (v enters the product clamped at kSiluLo, so -1e30 or -Inf give
    // -5.3e-37, not -6e-9 or -Inf). Exact subnormal results cost a branch or three more
    // operations a vector, about 10% of a SiLU-bound group norm (AVX2, measured). The
    // reciprocal is the hardware estimate plus one Newton step (~2^-23 relative),
    // cheaper than a division on most cores. Not on Zen 5: there v / a took 0.80 of
    // this one's time (1x64x56x56 G=32 NCHW SiLU, one thread), but Intel's 512-bit
    // division is slower, and a per-core choice would change bits by machine model.
    const auto vm = AtLeastSiluLo(d, v);  // the exponential's clamp too: no extra operation
    const auto a = hn::Set(d, 1.0f) + ExpOfNegClamped(d, vm);
    const auto r0 = hn::ApproximateReciprocal(a);
    const auto r = r0 * hn::NegMulAdd(a, r0, hn::Set(d, 2.0f));
    return vm * r;
  } else {
    return v;
  }
}

template <class D>
HWY_INLINE bool IsAligned(D d, const float* p) {
  return reinterpret_cast<uintptr_t>(p) % (hn::Lanes(d) * sizeof(float)) == 0;
}

// y[i] = f(d, i, x[i..]) for i < n: whole vectors, a 1-lane tag for spans shorter than a
// vector (and the streaming peel), and an overlapping last vector whose lanes already
// written are kept (right in place as well). Never touches memory outside [0, n).
template <bool kStream, class F>
HWY_INLINE void MapSpan(const float* x, float* y, size_t n, const F& f) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const hn::CappedTag<float, 1> d1;
  size_t i = 0;
  if (n < N) {
    for (; i < n; ++i) hn::StoreU(f(d1, i, hn::LoadU(d1, x + i)), d1, y + i);
    return;
  }
  if constexpr (kStream) {
    for (; i < n && !IsAligned(d, y + i); ++i)
      hn::StoreU(f(d1, i, hn::LoadU(d1, x + i)), d1, y + i);
    for (; i + N <= n; i += N) hn::Stream(f(d, i, hn::LoadU(d, x + i)), d, y + i);
  } else {
    for (; i + N <= n; i += N) hn::StoreU(f(d, i, hn::LoadU(d, x + i)), d, y + i);
  }
  if constexpr (kStream) {
    // Streamed lines must not be read back (that waits for them to reach memory):
    // the tail goes one element at a time.
    for (; i < n; ++i) hn::StoreU(f(d1, i, hn::LoadU(d1, x + i)), d1, y + i);
  }
  if (i < n) {
    const size_t t = n - N;
    const auto fresh = hn::Not(hn::FirstN(d, i - t));
    const auto v = f(d, t, hn::LoadU(d, x + t));
    hn::StoreU(hn::IfThenElse(fresh, v, hn::LoadU(d, y + t)), d, y + t);
  }
}

template <bool kStream>
HWY_INLINE void PutVector(hn::Vec<DF> v, float* HWY_RESTRICT y) {
  if constexpr (kStream) {
    hn::Stream(v, DF(), y);
  } else {
    hn::StoreU(v, DF(), y);
  }
}

// act((x - mean) * scale + shift) for one vector.
template <Activation kAct>
HWY_INLINE hn::Vec<DF> NormOf(const float* HWY_RESTRICT x, hn::Vec<DF> mean, hn::Vec<DF> scale,
                              hn::Vec<DF> shift) {
  const DF d;
  return Activate<kAct>(d, hn::MulAdd(hn::LoadU(d, x) - mean, scale, shift));
}

// y[i] = act((x[i] - mean[i]) * scale[i] + shift[i]) for i < n (MapSpan: NormOf's
// operations, so the same bits as the vector walks).
template <Activation kAct, bool kStream>
HWY_INLINE void NormSpan(const float* x, float* y, size_t n, const float* mean, const float* scale,
                         const float* shift) {
  MapSpan<kStream>(x, y, n, [&](auto d, size_t c, auto v) {
    const auto dev = v - hn::LoadU(d, mean + c);
    return Activate<kAct>(d, hn::MulAdd(dev, hn::LoadU(d, scale + c), hn::LoadU(d, shift + c)));
  });
}

// Channels-first apply over consecutive planes (per-plane mean, scale and shift):
// walks the elements flat, so a vector crossing a plane boundary takes its
// parameters spliced from both planes. Plane-by-plane spans would end
// every short plane (14x14, 7x7) in a partial vector. on_vector(i) runs after each
// whole vector, in order; they start at 0, N, 2N, ... when y is aligned or when
// kAlignStores is false (no scalar peel before the first vector). Means: a pointer
// (a mean per plane), or OneMean (planes of one group).
struct NoVectorHook {
  HWY_INLINE void operator()(size_t) const {}
};
struct OneMean {
  float value;
  HWY_INLINE float operator[](size_t) const { return value; }
};
template <Activation kAct, bool kStream, class OnVector = NoVectorHook, bool kAlignStores = true,
          class Means = const float*>
HWY_INLINE void NormPlanesT(const float* x, float* y, size_t n, size_t plane, size_t offset,
                            Means mean, const float* scale, const float* shift,
                            OnVector&& on_vector = OnVector()) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const hn::CappedTag<float, 1> d1;
  size_t j = 0;         // plane of element i, counted from the first
  size_t off = offset;  // its offset in that plane
  size_t i = 0;
  const auto one = [&] {
    const auto v = hn::LoadU(d1, x + i) - hn::Set(d1, mean[j]);
    hn::StoreU(Activate<kAct>(d1, hn::MulAdd(v, hn::Set(d1, scale[j]), hn::Set(d1, shift[j]))), d1,
               y + i);
    ++i;
    if (++off == plane) off = 0, ++j;
  };
  const auto put = [&](hn::Vec<DF> v, size_t at) { PutVector<kStream>(v, y + at); };
  // Aligned stores: required to stream, and a split-line store costs two.
  if constexpr (kAlignStores || kStream) {
    while (i < n && !IsAligned(d, y + i)) one();
  }
  while (n - i >= N) {
    if (plane - off >= N) {
      size_t run = std::min(plane - off, n - i);
      run -= run % N;
      const auto vmean = hn::Set(d, mean[j]);
      const auto vs = hn::Set(d, scale[j]);
      const auto vb = hn::Set(d, shift[j]);
      size_t k = 0;
      if constexpr (kAct == Activation::kSilu) {
        // Two vectors an iteration: SiLU's chain of ~20 dependent operations keeps too
        // few vectors in flight one at a time.
        for (; k + 2 * N <= run; k += 2 * N) {
          // Both loads first: through NormOf each sat inside its chain (4% slower).
          const auto v0 = hn::MulAdd(hn::LoadU(d, x + i + k) - vmean, vs, vb);
          const auto v1 = hn::MulAdd(hn::LoadU(d, x + i + k + N) - vmean, vs, vb);
          const auto a0 = Activate<kAct>(d, v0);
          const auto a1 = Activate<kAct>(d, v1);
          put(a0, i + k);
          on_vector(i + k);
          put(a1, i + k + N);
          on_vector(i + k + N);
        }
      }
      for (; k < run; k += N) {
        put(NormOf<kAct>(x + i + k, vmean, vs, vb), i + k);
        on_vector(i + k);
      }
      i += run;
      off += run;
      if (off == plane) off = 0, ++j;
      continue;
    }
    auto vm = hn::Set(d, mean[j]);
    auto vs = hn::Set(d, scale[j]);
    auto vb = hn::Set(d, shift[j]);
    size_t first = plane - off;  // first lane of the next plane
    size_t q = j;
    for (; first < N; first += plane) {
      ++q;
      const auto earlier = hn::FirstN(d, first);
      if constexpr (!std::is_same_v<Means, OneMean>) {
        vm = hn::IfThenElse(earlier, vm, hn::Set(d, mean[q]));
      }
      vs = hn::IfThenElse(earlier, vs, hn::Set(d, scale[q]));
      vb = hn::IfThenElse(earlier, vb, hn::Set(d, shift[q]));
    }
    put(NormOf<kAct>(x + i, vm, vs, vb), i);
    on_vector(i);
    i += N;
    j = q;
    off = N - (first - plane);  // lanes [first - plane, N) are plane q's
    if (off == plane) off = 0, ++j;
  }
  while (i < n) one();
  if constexpr (kStream) hwy::FlushStream();
}

// NormPlanesT over one group while the next group's shifted sums (about its sampled
// pivot) ride along, one vector of `next` loaded per vector stored: the next group
// is read while this one is written, as a copy interleaves its reads and writes.
// Both groups hold n elements. The sums are SpanShiftedSums' bits: the same pairs,
// flushed at the same points. So the vectors stay on the grid 0, N, 2N, ... and the
// stores are not aligned first: with y one float off, 1x256x14x14 G=32 still took
// 6.5 us chained against 7.0 us in separate passes (aligned: 5.9 us). One mean: a
// pointer to a mean per plane took this loop a register it needed (spills; 1x256x14x14
// G=32, one thread: 5.72-5.88 us against 5.19-5.29 us).
template <Activation kAct, bool kStream>
Moments NormPlanesThenMomentsT(const float* x, float* y, size_t n, size_t plane, size_t offset,
                               float mean, const float* scale, const float* shift,
                               const float* next) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t paired = n / (2 * N) * (2 * N);  // elements the pairs cover
  const float p = SamplePivot(next, n);
  ShiftedSumsAcc acc(p);
  hn::Vec<DF> first = hn::Zero(d);
  size_t pairs = 0;
  const auto hook = [&](size_t i) {
    if (i >= paired) return;
    const auto v = hn::LoadU(d, next + i);
    if ((i / N) % 2 == 0) {
      first = v;
      return;
    }
    acc.Add(first, v);
    if (++pairs == ShiftedSumsAcc::kPairsPerRun) acc.Flush(), pairs = 0;
  };
  // Streaming only into an aligned y (the dispatch checks): no peel, the grid holds.
  NormPlanesT<kAct, kStream, const decltype(hook)&, false, OneMean>(
      x, y, n, plane, offset, OneMean{mean}, scale, shift, hook);
  double s1, s2;
  acc.Finish(next, n, paired, &s1, &s2);
  return MomentsAbout(next, n, p, s1, s2);
}

// y = act((x - mean) * scale + shift) for one vector.
template <Activation kAct, bool kStream>
HWY_INLINE void NormVector(const float* HWY_RESTRICT x, float* HWY_RESTRICT y, hn::Vec<DF> mean,
                           hn::Vec<DF> scale, hn::Vec<DF> shift) {
  PutVector<kStream>(NormOf<kAct>(x, mean, scale, shift), y);
}

// Rows of kVectors whole vectors (one to four): all parameters in registers and the
// rows walked in order, one stream. The steps below walk rows of fewer than four
// vectors a vector column at a time, strided: 1x32x112x112 G=8 channels-last spent
// 1.3 times a same-size memcpy in its apply pass that way (and 1x64x56x56 G=32, rows
// of four vectors, went from 0.55 to 0.57 of memcpy here, C driver).
template <Activation kAct, bool kStream, size_t kVectors>
HWY_INLINE void NormNarrowRowsT(const float* x, float* y, size_t rows, const NormRows& p) {
  const DF d;
  const size_t N = hn::Lanes(d);
  constexpr size_t K = kVectors;
  hn::Vec<DF> m[K], s[K], b[K];
  for (size_t v = 0; v < K; ++v) {
    m[v] = hn::LoadU(d, p.mean + v * N);
    s[v] = hn::LoadU(d, p.scale + v * N);
    b[v] = hn::LoadU(d, p.shift + v * N);
  }
  // Steps of four vectors (whole rows), their loads before their stores.
  constexpr size_t kRowsPerStep = K == 3 ? 4 : 4 / K;  // four vectors or 12
  constexpr size_t kStepVectors = kRowsPerStep * K;
  const size_t step = kStepVectors * N;
  const size_t n = rows * K * N;
  size_t i = 0;
  for (; i + step <= n; i += step) {
    hn::Vec<DF> v[kStepVectors];
    HWY_UNROLL(12)
    for (size_t j = 0; j < kStepVectors; ++j) v[j] = hn::LoadU(d, x + i + j * N);
    HWY_UNROLL(12)
    for (size_t j = 0; j < kStepVectors; ++j) {
      const size_t c = j % K;
      const auto r = Activate<kAct>(d, hn::MulAdd(v[j] - m[c], s[c], b[c]));
      PutVector<kStream>(r, y + i + j * N);
    }
  }
  for (; i < n; i += K * N) {
    HWY_UNROLL(4)
    for (size_t c = 0; c < K; ++c)
      NormVector<kAct, kStream>(x + i + c * N, y + i + c * N, m[c], s[c], b[c]);
  }
}

template <Activation kAct>
void NormRowsShiftedT(const float* x, float* y, size_t rows, size_t C, const NormRows& p,
                      bool from_memory);

template <Activation kAct, bool kStream>
void NormRowsT(const float* x, float* y, size_t rows, size_t C, const NormRows& p,
               bool from_memory) {
  const DF d;
  const size_t N = hn::Lanes(d);
  if (C % N == 0 && kStream && !IsAligned(d, y)) {
    // Each row would need a peel and a tail to stream: shifted rows instead.
    return NormRowsShiftedT<kAct>(x, y, rows, C, p, from_memory);
  }
  if (C % N == 0 && C <= 4 * N) {
    if (C == 4 * N) {
      NormNarrowRowsT<kAct, kStream, 4>(x, y, rows, p);
    } else if (C == N) {
      NormNarrowRowsT<kAct, kStream, 1>(x, y, rows, p);
    } else if (C == 2 * N) {
      NormNarrowRowsT<kAct, kStream, 2>(x, y, rows, p);
    } else {
      NormNarrowRowsT<kAct, kStream, 3>(x, y, rows, p);
    }
  } else if (C % N == 0 && !from_memory) {
    // Rows in cache: in order, a row's vectors in order, each with its three
    // parameters (aligned: GroupNorm's arrays start on a cache line). Walked in
    // steps of a few rows down four vectors of channels instead (the parameters
    // loaded once a step), the stores and loads strided by a row took 1.5 times as
    // long: 1x256x14x14 G=32 NHWC's output pass, one thread, 3.1 us against 2.0.
    // (The step below, one row a step, is the same arithmetic but took 1.16-1.20
    // times as long: 1x256x14x14 and 1x1024x7x7 G=32, same-process A/B.)
    const float* HWY_RESTRICT mean = p.mean;
    const float* HWY_RESTRICT scale = p.scale;
    const float* HWY_RESTRICT shift = p.shift;
    for (size_t r = 0; r < rows; ++r) {
      const float* HWY_RESTRICT xr = x + r * C;
      float* HWY_RESTRICT yr = y + r * C;
      size_t c = 0;
      for (; c + 4 * N <= C; c += 4 * N) {
        // All four results before any store: SiLU's long chains then overlap.
        const auto r0 = NormOf<kAct>(xr + c, hn::LoadU(d, mean + c), hn::LoadU(d, scale + c),
                                     hn::LoadU(d, shift + c));
        const auto r1 = NormOf<kAct>(xr + c + N, hn::LoadU(d, mean + c + N),
                                     hn::LoadU(d, scale + c + N), hn::LoadU(d, shift + c + N));
        const auto r2 =
            NormOf<kAct>(xr + c + 2 * N, hn::LoadU(d, mean + c + 2 * N),
                         hn::LoadU(d, scale + c + 2 * N), hn::LoadU(d, shift + c + 2 * N));
        const auto r3 =
            NormOf<kAct>(xr + c + 3 * N, hn::LoadU(d, mean + c + 3 * N),
                         hn::LoadU(d, scale + c + 3 * N), hn::LoadU(d, shift + c + 3 * N));
        PutVector<kStream>(r0, yr + c);
        PutVector<kStream>(r1, yr + c + N);
        PutVector<kStream>(r2, yr + c + 2 * N);
        PutVector<kStream>(r3, yr + c + 3 * N);
      }
      for (; c < C; c += N) {
        NormVector<kAct, kStream>(xr + c, yr + c, hn::LoadU(d, mean + c), hn::LoadU(d, scale + c),
                                  hn::LoadU(d, shift + c));
      }
    }
  } else if (C % N == 0) {
    // From DRAM, whole vectors in every row (and with streaming every store aligned):
    // a step applies four vectors of channels at a time, their parameters loaded once,
    // to one row of each of kRowStreams sequential streams a quarter of the rows apart
    // (see ShiftedSumsRowStreams: a few distant streams read at memory speed, a tile
    // walked column by column does not).
    const auto step = [&](const size_t* at, size_t count) {
      size_t c = 0;
      for (; c + 4 * N <= C; c += 4 * N) {
        const auto m0 = hn::LoadU(d, p.mean + c), m1 = hn::LoadU(d, p.mean + c + N),
                   m2 = hn::LoadU(d, p.mean + c + 2 * N), m3 = hn::LoadU(d, p.mean + c + 3 * N);
        const auto s0 = hn::LoadU(d, p.scale + c), s1 = hn::LoadU(d, p.scale + c + N),
                   s2 = hn::LoadU(d, p.scale + c + 2 * N), s3 = hn::LoadU(d, p.scale + c + 3 * N);
        const auto b0 = hn::LoadU(d, p.shift + c), b1 = hn::LoadU(d, p.shift + c + N),
                   b2 = hn::LoadU(d, p.shift + c + 2 * N), b3 = hn::LoadU(d, p.shift + c + 3 * N);
        for (size_t k = 0; k < count; ++k) {
          // All four results before any store: the stores through y could alias the
          // captures, and one vector at a time SiLU's long chains barely overlap.
          const size_t o = at[k] + c;
          const auto r0 = NormOf<kAct>(x + o, m0, s0, b0);
          const auto r1 = NormOf<kAct>(x + o + N, m1, s1, b1);
          const auto r2 = NormOf<kAct>(x + o + 2 * N, m2, s2, b2);
          const auto r3 = NormOf<kAct>(x + o + 3 * N, m3, s3, b3);
          PutVector<kStream>(r0, y + o);
          PutVector<kStream>(r1, y + o + N);
          PutVector<kStream>(r2, y + o + 2 * N);
          PutVector<kStream>(r3, y + o + 3 * N);
        }
      }
      for (; c < C; c += N) {
        const auto m = hn::LoadU(d, p.mean + c), s = hn::LoadU(d, p.scale + c),
                   b = hn::LoadU(d, p.shift + c);
        for (size_t k = 0; k < count; ++k) {
          NormVector<kAct, kStream>(x + at[k] + c, y + at[k] + c, m, s, b);
        }
      }
    };
    const size_t D = rows / kRowStreams;
    for (size_t i = 0; i < D; ++i) {
      size_t at[kRowStreams];
      for (size_t k = 0; k < kRowStreams; ++k) at[k] = (k * D + i) * C;
      step(at, kRowStreams);
    }
    for (size_t r = kRowStreams * D; r < rows; ++r) {
      const size_t at = r * C;
      step(&at, 1);
    }
  } else {
    for (size_t r = 0; r < rows; ++r) {
      NormSpan<kAct, kStream>(x + r * C, y + r * C, C, p.mean, p.scale, p.shift);
    }
  }
  if constexpr (kStream) hwy::FlushStream();
}

// Streamed rows of whole vectors start as misaligned as y (NumPy's large arrays sit 16
// bytes past a line), and plain stores in their place read each output line first:
// 128x256x28x28 G=32 NHWC with y 16 bytes off took 8.0 ms against 6.4 aligned, one
// thread. Walked shifted by the `peel` floats to y's next vector boundary instead: row
// 0's first peel floats on their own, then rows of C floats from x + peel, whose
// channels start at peel (parameters rotated by peel, so the shifted rows stream on the
// aligned walk), then the last row's C - peel floats. Same operations per element as
// the aligned walk: the same bits wherever y is.
constexpr size_t kMaxRotatedChannels = 1024;

template <Activation kAct>
void NormRowsShiftedT(const float* x, float* y, size_t rows, size_t C, const NormRows& p,
                      bool from_memory) {
  const size_t vector_bytes = hn::Lanes(DF()) * sizeof(float);
  const size_t misalign = reinterpret_cast<uintptr_t>(y) % vector_bytes;
  if (misalign % sizeof(float) != 0 || C > kMaxRotatedChannels || rows < 2) {
    return NormRowsT<kAct, false>(x, y, rows, C, p, from_memory);
  }
  const size_t peel = (vector_bytes - misalign) / sizeof(float);  // < Lanes <= C
  alignas(64) float mean[kMaxRotatedChannels], scale[kMaxRotatedChannels],
      shift[kMaxRotatedChannels];
  for (size_t c = 0; c < C; ++c) {
    const size_t from = c + peel < C ? c + peel : c + peel - C;
    mean[c] = p.mean[from], scale[c] = p.scale[from], shift[c] = p.shift[from];
  }
  NormSpan<kAct, false>(x, y, peel, p.mean, p.scale, p.shift);
  NormRowsT<kAct, true>(x + peel, y + peel, rows - 1, C, NormRows{mean, scale, shift}, from_memory);
  const size_t last = (rows - 1) * C + peel;
  NormSpan<kAct, false>(x + last, y + last, C - peel, mean, scale, shift);
}

template <bool kGamma, bool kBeta, bool kStream>
void RowNormT(const float* x, float* y, size_t n, float mean, float rstd, float offset,
              const float* gamma, const float* beta) {
  MapSpan<kStream>(x, y, n, [&](auto d, size_t c, auto v) {
    const auto t = hn::MulAdd(v - hn::Set(d, mean), hn::Set(d, rstd), hn::Set(d, offset));
    if constexpr (kGamma && kBeta) {
      return hn::MulAdd(t, hn::LoadU(d, gamma + c), hn::LoadU(d, beta + c));
    } else if constexpr (kGamma) {
      return t * hn::LoadU(d, gamma + c);
    } else if constexpr (kBeta) {
      return t + hn::LoadU(d, beta + c);
    } else {
      return t;
    }
  });
  if constexpr (kStream) hwy::FlushStream();
}

// Run-time (activation, stream) -> one of the six instantiations.
template <template <Activation, bool> class Fn, class... Args>
auto DispatchActivation(Activation act, bool stream, Args&&... args) {
  switch (act) {
    case Activation::kRelu:
      return stream ? Fn<Activation::kRelu, true>::Run(args...)
                    : Fn<Activation::kRelu, false>::Run(args...);
    case Activation::kSilu:
      return stream ? Fn<Activation::kSilu, true>::Run(args...)
                    : Fn<Activation::kSilu, false>::Run(args...);
    case Activation::kNone:
    default:
      return stream ? Fn<Activation::kNone, true>::Run(args...)
                    : Fn<Activation::kNone, false>::Run(args...);
  }
}

template <class Means>
struct NormPlanesOf {
  template <Activation kAct, bool kStream>
  struct Fn {
    static void Run(const float* x, float* y, int64_t n, int64_t plane, int64_t offset, Means mean,
                    const float* scale, const float* shift) {
      NormPlanesT<kAct, kStream, NoVectorHook, true, Means>(
          x, y, static_cast<size_t>(n), static_cast<size_t>(plane), static_cast<size_t>(offset),
          mean, scale, shift);
    }
  };
};
template <Activation kAct, bool kStream>
struct NormRowsFn {
  static void Run(const float* x, float* y, int64_t rows, int64_t C, const NormRows& p,
                  bool from_memory) {
    NormRowsT<kAct, kStream>(x, y, static_cast<size_t>(rows), static_cast<size_t>(C), p,
                             from_memory);
  }
};

void ApplyNormPlanesImpl(const float* x, float* y, int64_t n, int64_t plane, int64_t offset,
                         const float* mean, const float* scale, const float* shift, Activation act,
                         bool stream) {
  DispatchActivation<NormPlanesOf<const float*>::Fn>(act, stream, x, y, n, plane, offset, mean,
                                                     scale, shift);
}

void ApplyNormGroupPlanesImpl(const float* x, float* y, int64_t n, int64_t plane, int64_t offset,
                              float mean, const float* scale, const float* shift, Activation act,
                              bool stream) {
  DispatchActivation<NormPlanesOf<OneMean>::Fn>(act, stream, x, y, n, plane, offset, OneMean{mean},
                                                scale, shift);
}

template <Activation kAct, bool kStream>
struct NormPlanesThenMomentsFn {
  static Moments Run(const float* x, float* y, size_t n, size_t plane, size_t offset, float mean,
                     const float* scale, const float* shift, const float* next) {
    return NormPlanesThenMomentsT<kAct, kStream>(x, y, n, plane, offset, mean, scale, shift, next);
  }
};

Moments ApplyNormPlanesThenMomentsImpl(const float* x, float* y, int64_t n, int64_t plane,
                                       int64_t offset, float mean, const float* scale,
                                       const float* shift, Activation act, bool stream,
                                       const float* next) {
  if (n <= 0) return Moments();
  return DispatchActivation<NormPlanesThenMomentsFn>(
      act, stream && IsAligned(DF(), y), x, y, static_cast<size_t>(n), static_cast<size_t>(plane),
      static_cast<size_t>(offset), mean, scale, shift, next);
}

void ApplyNormRowsImpl(const float* x, float* y, int64_t rows, int64_t channels, const NormRows& p,
                       Activation act, bool stream, bool from_memory) {
  DispatchActivation<NormRowsFn>(act, stream, x, y, rows, channels, p, from_memory);
}

void ApplyRowNormImpl(const float* x, float* y, int64_t count, float mean, float rstd, float offset,
                      const float* gamma, const float* beta, bool stream) {
  const size_t n = static_cast<size_t>(count);
  const int which = (gamma ? 2 : 0) + (beta ? 1 : 0);
  switch (which * 2 + (stream ? 1 : 0)) {
    case 0: return RowNormT<false, false, false>(x, y, n, mean, rstd, offset, gamma, beta);
    case 1: return RowNormT<false, false, true>(x, y, n, mean, rstd, offset, gamma, beta);
    case 2: return RowNormT<false, true, false>(x, y, n, mean, rstd, offset, gamma, beta);
    case 3: return RowNormT<false, true, true>(x, y, n, mean, rstd, offset, gamma, beta);
    case 4: return RowNormT<true, false, false>(x, y, n, mean, rstd, offset, gamma, beta);
    case 5: return RowNormT<true, false, true>(x, y, n, mean, rstd, offset, gamma, beta);
    case 6: return RowNormT<true, true, false>(x, y, n, mean, rstd, offset, gamma, beta);
    default: return RowNormT<true, true, true>(x, y, n, mean, rstd, offset, gamma, beta);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace normkit {
namespace kernels {

HWY_EXPORT(SpanMomentsImpl);
HWY_EXPORT(RowMomentsImpl);
HWY_EXPORT(SpanMeanRstdEachImpl);
HWY_EXPORT(SpanRmsEachImpl);
HWY_EXPORT(ChannelParametersEachImpl);
HWY_EXPORT(SpanSumSquaresImpl);
HWY_EXPORT(ChannelShiftedSumsImpl);
HWY_EXPORT(SampledRowSumsImpl);
HWY_EXPORT(ColumnMeanRstdImpl);
HWY_EXPORT(ApplyNormPlanesImpl);
HWY_EXPORT(ApplyNormGroupPlanesImpl);
HWY_EXPORT(ApplyNormPlanesThenMomentsImpl);
HWY_EXPORT(ApplyNormRowsImpl);
HWY_EXPORT(ApplyRowNormImpl);

Moments SpanMoments(const float* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(SpanMomentsImpl)(x, n);
}

Moments RowMoments(const float* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(RowMomentsImpl)(x, n);
}

void SpanMeanRstdEach(const float* x, int64_t n, int64_t count, float eps, double* mean,
                      double* rstd) {
  HWY_DYNAMIC_DISPATCH(SpanMeanRstdEachImpl)(x, n, count, eps, mean, rstd);
}

void SpanRmsEach(const float* x, int64_t n, int64_t count, float eps, double* rstd) {
  HWY_DYNAMIC_DISPATCH(SpanRmsEachImpl)(x, n, count, eps, rstd);
}

void ChannelParametersEach(const double* mean, const double* rstd, const float* gamma,
                           const float* beta, int64_t count, float* mean_f, float* scale,
                           float* shift) {
  HWY_DYNAMIC_DISPATCH(ChannelParametersEachImpl)
  (mean, rstd, gamma, beta, count, mean_f, scale, shift);
}

double SpanSumSquares(const float* x, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(SpanSumSquaresImpl)(x, n);
}

void ChannelShiftedSums(const float* x, int64_t rows, int64_t channels, const float* pivot,
                        double* s1, double* s2, float* scratch, bool from_memory) {
  HWY_DYNAMIC_DISPATCH(ChannelShiftedSumsImpl)
  (x, rows, channels, pivot, s1, s2, scratch, from_memory);
}

void SampledRowSums(const float* x, int64_t rows, int64_t channels, int64_t samples, float* out) {
  HWY_DYNAMIC_DISPATCH(SampledRowSumsImpl)(x, rows, channels, samples, out);
}

void ColumnMeanRstd(const float* x, int64_t rows, int64_t channels, int64_t samples, float eps,
                    bool from_memory, float* pivot, double* s1, double* s2, float* scratch,
                    double* mean, double* rstd) {
  HWY_DYNAMIC_DISPATCH(ColumnMeanRstdImpl)
  (x, rows, channels, samples, eps, from_memory, pivot, s1, s2, scratch, mean, rstd);
}

void ApplyNormPlanes(const float* x, float* y, int64_t n, int64_t plane, int64_t offset,
                     const float* mean, const float* scale, const float* shift, Activation act,
                     bool stream) {
  HWY_DYNAMIC_DISPATCH(ApplyNormPlanesImpl)
  (x, y, n, plane, offset, mean, scale, shift, act, stream);
}

void ApplyNormGroupPlanes(const float* x, float* y, int64_t n, int64_t plane, int64_t offset,
                          float mean, const float* scale, const float* shift, Activation act,
                          bool stream) {
  HWY_DYNAMIC_DISPATCH(ApplyNormGroupPlanesImpl)
  (x, y, n, plane, offset, mean, scale, shift, act, stream);
}

Moments ApplyNormPlanesThenMoments(const float* x, float* y, int64_t n, int64_t plane,
                                   int64_t offset, float mean, const float* scale,
                                   const float* shift, Activation act, bool stream,
                                   const float* next) {
  return HWY_DYNAMIC_DISPATCH(ApplyNormPlanesThenMomentsImpl)(x, y, n, plane, offset, mean, scale,
                                                              shift, act, stream, next);
}

void ApplyNormRows(const float* x, float* y, int64_t rows, int64_t channels, const NormRows& p,
                   Activation act, bool stream, bool from_memory) {
  HWY_DYNAMIC_DISPATCH(ApplyNormRowsImpl)(x, y, rows, channels, p, act, stream, from_memory);
}

void ApplyRowNorm(const float* x, float* y, int64_t n, float mean, float rstd, float offset,
                  const float* gamma, const float* beta, bool stream) {
  HWY_DYNAMIC_DISPATCH(ApplyRowNormImpl)(x, y, n, mean, rstd, offset, gamma, beta, stream);
}

}  // namespace kernels
}  // namespace normkit
#endif  // HWY_ONCE
