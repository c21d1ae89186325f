// SPDX-License-Identifier: Apache-2.0
// Output kernels of the normalization family over channel planes: the fused
// normalize-affine-activation pass, the chained apply-then-next-moments, and the storage
// conversions of the half paths.
// Compiled for every SIMD target and dispatched at run time; the kernels themselves are
// the -inl.h building blocks, this file exports them.
#include "cpu/kernels/group_norm.h"

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/norm_apply.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep: must precede highway.h
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernels/norm_apply-inl.h"
#if HWY_ONCE
namespace normkit {
namespace kernels {

HWY_EXPORT(ApplyNormPlanesImpl);
HWY_EXPORT(ApplyNormGroupPlanesImpl);
HWY_EXPORT(ApplyNormPlanesThenMomentsImpl);
HWY_EXPORT(WidenToFloatImpl);
HWY_EXPORT(NarrowFromFloatImpl);
HWY_EXPORT(ResidualAddImpl);
HWY_EXPORT(CopyElementsImpl);

void ApplyNormPlanes(const void* x, Storage x_storage, void* y, Storage y_storage, int64_t n,
                     int64_t plane, int64_t offset, const float* mean, const float* scale,
                     const float* shift, Activation act, bool stream) {
  HWY_DYNAMIC_DISPATCH(ApplyNormPlanesImpl)
  (x, x_storage, y, y_storage, n, plane, offset, mean, scale, shift, act, stream);
}

void ApplyNormGroupPlanes(const void* x, Storage x_storage, void* y, Storage y_storage, int64_t n,
                          int64_t plane, int64_t offset, float mean, const float* scale,
                          const float* shift, Activation act, bool stream) {
  HWY_DYNAMIC_DISPATCH(ApplyNormGroupPlanesImpl)
  (x, x_storage, y, y_storage, n, plane, offset, mean, scale, shift, act, stream);
}

Moments ApplyNormPlanesThenMoments(const void* x, Storage x_storage, float* y, int64_t n,
                                   int64_t plane, int64_t offset, float mean, const float* scale,
                                   const float* shift, Activation act, bool stream,
                                   const void* next) {
  return HWY_DYNAMIC_DISPATCH(ApplyNormPlanesThenMomentsImpl)(
      x, x_storage, y, n, plane, offset, mean, scale, shift, act, stream, next);
}

void WidenToFloat(const void* x, Storage storage, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(WidenToFloatImpl)(x, storage, n, out);
}

void NarrowFromFloat(const float* x, int64_t n, void* y, Storage storage, bool stream) {
  HWY_DYNAMIC_DISPATCH(NarrowFromFloatImpl)(x, n, y, storage, stream);
}

void ResidualAdd(const void* x, const void* r, Storage storage, const float* bias, int64_t n,
                 void* h) {
  HWY_DYNAMIC_DISPATCH(ResidualAddImpl)(x, r, storage, bias, n, h);
}

void CopyElements(const void* x, Storage storage, int64_t n, void* y, bool stream) {
  HWY_DYNAMIC_DISPATCH(CopyElementsImpl)(x, storage, n, y, stream);
}

}  // namespace kernels
}  // namespace normkit
#endif  // HWY_ONCE
