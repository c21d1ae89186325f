// SPDX-License-Identifier: Apache-2.0
// Range drivers for the affine spans with bfloat16 / float16 storage on either side (the
// pairs kernels/affine.cc hands over), compiled for every SIMD target and dispatched at
// run time.
#include "cpu/kernels/affine.h"

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/affine_half.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep: must precede highway.h
#include "hwy/highway.h"
#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
// clang-format on
#include "cpu/kernels/affine_ranges-inl.h"

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {

// Turns the run-time storage pair into one of the six half pairs: both the same half
// dtype, or one of them float32 (normalize-and-widen, normalize-and-narrow).
template <template <bool, bool, bool, bool, class, class> class Fn, class Job>
void DispatchStorage(const Job& job, int64_t begin, int64_t end) {
  using hwy::bfloat16_t;
  using hwy::float16_t;
  const Storage xs = job.x_storage, ys = job.y_storage;
  if (xs == Storage::kFloat32) {
    if (ys == Storage::kBFloat16) return DispatchTerms<Fn, float, bfloat16_t>(job, begin, end);
    HWY_DASSERT(ys == Storage::kFloat16);  // float32 to float32: kernels/affine.cc
    return DispatchTerms<Fn, float, float16_t>(job, begin, end);
  }
  if (xs == Storage::kBFloat16) {
    if (ys == Storage::kFloat32) return DispatchTerms<Fn, bfloat16_t, float>(job, begin, end);
    return DispatchTerms<Fn, bfloat16_t, bfloat16_t>(job, begin, end);
  }
  if (ys == Storage::kFloat32) return DispatchTerms<Fn, float16_t, float>(job, begin, end);
  return DispatchTerms<Fn, float16_t, float16_t>(job, begin, end);
}

void AffineBroadcastHalfImpl(const AffineBroadcastJob& job, int64_t begin, int64_t end) {
  DispatchStorage<BroadcastFn>(job, begin, end);
}

void AffinePeriodicHalfImpl(const AffinePeriodicJob& job, int64_t begin, int64_t end) {
  DispatchStorage<PeriodicFn>(job, begin, end);
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
NORMKIT_AFTER_NAMESPACE();

#if HWY_ONCE
namespace normkit {
namespace kernels {

HWY_EXPORT(AffineBroadcastHalfImpl);
HWY_EXPORT(AffinePeriodicHalfImpl);

void AffineBroadcastHalf(const AffineBroadcastJob& job, int64_t begin, int64_t end) {
  HWY_DYNAMIC_DISPATCH(AffineBroadcastHalfImpl)(job, begin, end);
}

void AffinePeriodicHalf(const AffinePeriodicJob& job, int64_t begin, int64_t end) {
  HWY_DYNAMIC_DISPATCH(AffinePeriodicHalfImpl)(job, begin, end);
}

}  // namespace kernels
}  // namespace normkit
#endif  // HWY_ONCE
