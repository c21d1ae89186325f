// SPDX-License-Identifier: Apache-2.0
// Range drivers for the affine spans of float32 x and y, compiled for every SIMD target and
// dispatched at run time to the best one the CPU supports. The half-storage pairs are in
// affine_half.cc; both instantiate kernels/affine_ranges-inl.h.
#include "cpu/kernels/affine.h"

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/affine.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep: must precede highway.h
#include "hwy/highway.h"
#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
// clang-format on
#include "cpu/kernels/affine_ranges-inl.h"

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {

void AffineBroadcastImpl(const AffineBroadcastJob& job, int64_t begin, int64_t end) {
  DispatchTerms<BroadcastFn, float, float>(job, begin, end);
}

void AffinePeriodicImpl(const AffinePeriodicJob& job, int64_t begin, int64_t end) {
  DispatchTerms<PeriodicFn, float, float>(job, begin, end);
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
NORMKIT_AFTER_NAMESPACE();

#if HWY_ONCE
namespace normkit {
namespace kernels {

HWY_EXPORT(AffineBroadcastImpl);
HWY_EXPORT(AffinePeriodicImpl);
HWY_EXPORT(AffineLanesImpl);
HWY_EXPORT(TargetNameImpl);

namespace {
bool BothFloat32(Storage x, Storage y) {
  return x == Storage::kFloat32 && y == Storage::kFloat32;
}
}  // namespace

void AffineBroadcast(const AffineBroadcastJob& job, int64_t begin, int64_t end) {
  if (!BothFloat32(job.x_storage, job.y_storage)) return AffineBroadcastHalf(job, begin, end);
  HWY_DYNAMIC_DISPATCH(AffineBroadcastImpl)(job, begin, end);
}

void AffinePeriodic(const AffinePeriodicJob& job, int64_t begin, int64_t end) {
  if (!BothFloat32(job.x_storage, job.y_storage)) return AffinePeriodicHalf(job, begin, end);
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
