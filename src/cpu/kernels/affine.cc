// SPDX-License-Identifier: Apache-2.0
// Range drivers for the affine spans, compiled for every SIMD target and dispatched
// at run time to the best one the CPU supports.
#include "cpu/kernels/affine.h"

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/affine.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep: must precede highway.h
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernels/affine-inl.h"
#include "hwy/cache_control.h"

HWY_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {

// Channels-first ranges walk the flat elements with a (plane, offset) cursor rather
// than plane by plane: a vector that crosses a plane boundary gets its parameters
// spliced from both planes, so short planes (7x7, 14x14) cost no partial vectors
// and no overlapping tail stores (which stall store forwarding, worst in place).
template <bool kScale, bool kShift, bool kStream>
void BroadcastRange(const AffineBroadcastJob& job, int64_t begin, int64_t end) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t S = job.plane_size;
  const int64_t P = job.param_count;
  const float* x = job.x;  // may equal y (in place)
  float* y = job.y;
  const auto scale = [&](int64_t p) { return kScale ? job.scale[p] : 0.0f; };
  const auto shift = [&](int64_t p) { return kShift ? job.shift[p] : 0.0f; };
  int64_t p = (begin / S) % P;  // parameter index of the element at i
  int64_t off = begin % S;      // its offset in its plane
  const auto next_plane = [&](int64_t q) { return q + 1 == P ? 0 : q + 1; };
  const auto one = [&](int64_t i) {
    AffineOne<kScale, kShift>(x + i, y + i, scale(p), shift(p));
    if (++off == S) {
      off = 0;
      p = next_plane(p);
    }
  };
  int64_t i = begin;
  // Align the stores (required to stream; a split-line store costs two otherwise).
  for (; i < end && !IsVectorAligned(d, y + i); ++i) one(i);
  while (end - i >= lanes) {
    if (S - off >= lanes) {
      // Whole vectors inside the plane: one broadcast, a tight loop.
      int64_t run = S - off < end - i ? S - off : end - i;
      run &= ~(lanes - 1);  // lanes is a power of two
      const auto vs = hn::Set(d, scale(p));
      const auto vb = hn::Set(d, shift(p));
      for (int64_t k = 0; k < run; k += lanes) {
        PutVector<kStream>(d, ApplyAffine<kScale, kShift>(hn::LoadU(d, x + i + k), vs, vb),
                           y + i + k);
      }
      i += run;
      off += run;
      if (off == S) {
        off = 0;
        p = next_plane(p);
      }
      continue;
    }
    // One vector over a plane boundary (several when planes are shorter than it).
    auto vs = hn::Set(d, scale(p));
    auto vb = hn::Set(d, shift(p));
    int64_t first = S - off;  // first lane of the next plane
    int64_t q = p;
    for (; first < lanes; first += S) {
      q = next_plane(q);
      const size_t lane = static_cast<size_t>(first);
      if constexpr (kScale) vs = SpliceFrom(d, vs, lane, scale(q));
      if constexpr (kShift) vb = SpliceFrom(d, vb, lane, shift(q));
    }
    PutVector<kStream>(d, ApplyAffine<kScale, kShift>(hn::LoadU(d, x + i), vs, vb), y + i);
    i += lanes;
    p = q;
    off = lanes - (first - S);  // lanes [first - S, lanes) are plane q's
    if (off == S) {
      off = 0;
      p = next_plane(p);
    }
  }
  // Fewer than a vector left (the end of the tensor): one element at a time.
  for (; i < end; ++i) one(i);
  if constexpr (kStream) hwy::FlushStream();
}

template <bool kScale, bool kShift, bool kStream>
void PeriodicRange(const AffinePeriodicJob& job, int64_t begin, int64_t end) {
  int64_t i = begin;
  while (i < end) {
    const int64_t sample = i / job.sample_elems;
    const int64_t sample_begin = sample * job.sample_elems;
    const int64_t sample_end = sample_begin + job.sample_elems;
    const int64_t stop = sample_end < end ? sample_end : end;
    const int64_t rep = sample * job.rep_stride;
    AffinePeriodicSpan<kScale, kShift, kStream>(
        job.x + i, job.y + i, static_cast<size_t>(stop - i), kScale ? job.scale_rep + rep : nullptr,
        kShift ? job.shift_rep + rep : nullptr, static_cast<size_t>(job.period),
        static_cast<size_t>((i - sample_begin) % job.period), job.rows_per_load);
    i = stop;
  }
  if constexpr (kStream) hwy::FlushStream();
}

// Turns the run-time (terms, stream) pair into one of the eight instantiations.
template <template <bool, bool, bool> class Fn, class Job>
void DispatchTerms(const Job& job, int64_t begin, int64_t end) {
  switch (job.terms) {
    case AffineTerms::kScaleShift:
      return job.stream ? Fn<true, true, true>::Run(job, begin, end)
                        : Fn<true, true, false>::Run(job, begin, end);
    case AffineTerms::kScale:
      return job.stream ? Fn<true, false, true>::Run(job, begin, end)
                        : Fn<true, false, false>::Run(job, begin, end);
    case AffineTerms::kShift:
      return job.stream ? Fn<false, true, true>::Run(job, begin, end)
                        : Fn<false, true, false>::Run(job, begin, end);
    case AffineTerms::kCopy:
      return job.stream ? Fn<false, false, true>::Run(job, begin, end)
                        : Fn<false, false, false>::Run(job, begin, end);
  }
}

template <bool kScale, bool kShift, bool kStream>
struct BroadcastFn {
  static void Run(const AffineBroadcastJob& job, int64_t b, int64_t e) {
    BroadcastRange<kScale, kShift, kStream>(job, b, e);
  }
};
template <bool kScale, bool kShift, bool kStream>
struct PeriodicFn {
  static void Run(const AffinePeriodicJob& job, int64_t b, int64_t e) {
    PeriodicRange<kScale, kShift, kStream>(job, b, e);
  }
};

void AffineBroadcastImpl(const AffineBroadcastJob& job, int64_t begin, int64_t end) {
  DispatchTerms<BroadcastFn>(job, begin, end);
}

void AffinePeriodicImpl(const AffinePeriodicJob& job, int64_t begin, int64_t end) {
  DispatchTerms<PeriodicFn>(job, begin, end);
}

size_t AffineLanesImpl() {
  return hn::Lanes(hn::ScalableTag<float>());
}

const char* TargetNameImpl() {
  return hwy::TargetName(HWY_TARGET);
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace normkit {
namespace kernels {

HWY_EXPORT(AffineBroadcastImpl);
HWY_EXPORT(AffinePeriodicImpl);
HWY_EXPORT(AffineLanesImpl);
HWY_EXPORT(TargetNameImpl);

void AffineBroadcast(const AffineBroadcastJob& job, int64_t begin, int64_t end) {
  HWY_DYNAMIC_DISPATCH(AffineBroadcastImpl)(job, begin, end);
}

void AffinePeriodic(const AffinePeriodicJob& job, int64_t begin, int64_t end) {
  HWY_DYNAMIC_DISPATCH(AffinePeriodicImpl)(job, begin, end);
}

size_t AffineLanes() {
  return HWY_DYNAMIC_DISPATCH(AffineLanesImpl)();
}

const char* DispatchedTargetName() {
  return HWY_DYNAMIC_DISPATCH(TargetNameImpl)();
}

}  // namespace kernels
}  // namespace normkit
#endif  // HWY_ONCE
