// SPDX-License-Identifier: Apache-2.0
// Statistics kernels of the normalization family (group / instance / layer / RMS norm):
// moments of spans, channel columns and short rows side by side.
// Compiled for every SIMD target and dispatched at run time; the kernels themselves are
// the -inl.h building blocks, this file exports them.
#include "cpu/kernels/group_norm.h"

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/norm_stats.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep: must precede highway.h
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernels/column_moments-inl.h"
#include "cpu/kernels/moments-inl.h"
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

}  // namespace kernels
}  // namespace normkit
#endif  // HWY_ONCE
