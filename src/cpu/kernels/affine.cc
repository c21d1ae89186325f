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

template <bool kScale, bool kShift, bool kStream>
void BroadcastRange(const AffineBroadcastJob& job, int64_t begin, int64_t end) {
  int64_t i = begin;
  while (i < end) {
    const int64_t plane = i / job.plane_size;
    const int64_t plane_end = (plane + 1) * job.plane_size;
    const int64_t stop = plane_end < end ? plane_end : end;
    const int64_t p = plane % job.param_count;
    AffineBroadcastSpan<kScale, kShift, kStream>(
        job.x + i, job.y + i, static_cast<size_t>(stop - i), kScale ? job.scale[p] : 0.0f,
        kShift ? job.shift[p] : 0.0f);
    i = stop;
  }
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
        static_cast<size_t>((i - sample_begin) % job.period));
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
