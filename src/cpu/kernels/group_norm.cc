// SPDX-License-Identifier: Apache-2.0
// Normalization kernels, compiled for every SIMD target and dispatched at run time. The
// kernels themselves are the -inl.h building blocks; this file exports them.
#include "cpu/kernels/group_norm.h"

#include <algorithm>
#include <type_traits>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/group_norm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep: must precede highway.h
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernels/column_moments-inl.h"
#include "cpu/kernels/moments-inl.h"
#include "cpu/kernels/norm_apply-inl.h"
#if HWY_ONCE
namespace normkit {
namespace kernels {

HWY_EXPORT(SpanMomentsImpl);
HWY_EXPORT(RowMomentsImpl);
HWY_EXPORT(SpanMeanRstdEachImpl);
HWY_EXPORT(SpanRmsEachImpl);
HWY_EXPORT(ChannelParametersEachImpl);
HWY_EXPORT(SpanSumSquaresImpl);
HWY_EXPORT(ColumnBlockMomentsImpl);
HWY_EXPORT(ColumnMeanRstdImpl);
HWY_EXPORT(ApplyNormPlanesImpl);
HWY_EXPORT(ApplyNormGroupPlanesImpl);
HWY_EXPORT(ApplyNormPlanesThenMomentsImpl);
HWY_EXPORT(ApplyNormRowsImpl);
HWY_EXPORT(ApplyRowNormImpl);
HWY_EXPORT(WidenToFloatImpl);
HWY_EXPORT(NarrowFromFloatImpl);
HWY_EXPORT(ResidualAddImpl);

Moments SpanMoments(const void* x, Storage x_storage, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(SpanMomentsImpl)(x, x_storage, n);
}

Moments RowMoments(const void* x, Storage x_storage, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(RowMomentsImpl)(x, x_storage, n);
}

void SpanMeanRstdEach(const void* x, Storage x_storage, int64_t n, int64_t count, float eps,
                      double* mean, double* rstd) {
  HWY_DYNAMIC_DISPATCH(SpanMeanRstdEachImpl)(x, x_storage, n, count, eps, mean, rstd);
}

void SpanRmsEach(const void* x, Storage x_storage, int64_t n, int64_t count, float eps,
                 double* rstd) {
  HWY_DYNAMIC_DISPATCH(SpanRmsEachImpl)(x, x_storage, n, count, eps, rstd);
}

void ChannelParametersEach(const double* mean, const double* rstd, const float* gamma,
                           const float* beta, int64_t count, float* mean_f, float* scale,
                           float* shift) {
  HWY_DYNAMIC_DISPATCH(ChannelParametersEachImpl)
  (mean, rstd, gamma, beta, count, mean_f, scale, shift);
}

double SpanSumSquares(const void* x, Storage x_storage, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(SpanSumSquaresImpl)(x, x_storage, n);
}

void ColumnBlockMoments(const void* x, Storage x_storage, int64_t rows, int64_t channels,
                        int64_t groups, int64_t samples, bool from_memory,
                        const ColumnScratch& scratch, Moments* out) {
  HWY_DYNAMIC_DISPATCH(ColumnBlockMomentsImpl)
  (x, x_storage, rows, channels, groups, samples, from_memory, scratch, out);
}

void ColumnMeanRstd(const void* x, Storage x_storage, int64_t rows, int64_t channels,
                    int64_t samples, float eps, bool from_memory, float* pivot, double* s1,
                    double* s2, float* scratch, double* mean, double* rstd) {
  HWY_DYNAMIC_DISPATCH(ColumnMeanRstdImpl)
  (x, x_storage, rows, channels, samples, eps, from_memory, pivot, s1, s2, scratch, mean, rstd);
}

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

void ApplyNormRows(const void* x, Storage x_storage, void* y, Storage y_storage, int64_t rows,
                   int64_t channels, const NormRows& p, Activation act, bool stream,
                   bool from_memory) {
  HWY_DYNAMIC_DISPATCH(ApplyNormRowsImpl)
  (x, x_storage, y, y_storage, rows, channels, p, act, stream, from_memory);
}

void ApplyRowNorm(const void* x, Storage x_storage, void* y, Storage y_storage, int64_t n,
                  float mean, float rstd, float offset, const float* gamma, const float* beta,
                  bool stream) {
  HWY_DYNAMIC_DISPATCH(ApplyRowNormImpl)
  (x, x_storage, y, y_storage, n, mean, rstd, offset, gamma, beta, stream);
}

void WidenToFloat(const void* x, Storage storage, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(WidenToFloatImpl)(x, storage, n, out);
}

void NarrowFromFloat(const float* x, int64_t n, void* y, Storage storage, bool stream) {
  HWY_DYNAMIC_DISPATCH(NarrowFromFloatImpl)(x, n, y, storage, stream);
}

void ResidualAdd(const float* x, const float* r, const float* bias, int64_t n, float* h) {
  HWY_DYNAMIC_DISPATCH(ResidualAddImpl)(x, r, bias, n, h);
}

}  // namespace kernels
}  // namespace normkit
#endif  // HWY_ONCE
