// SPDX-License-Identifier: Apache-2.0
// Output kernels of the normalization family over rows: channels-last rows of group /
// instance norm, and the rows of layer / RMS norm. Apart from norm_apply.cc so that a
// build compiles the two in parallel.
// Compiled for every SIMD target and dispatched at run time; the kernels themselves are
// the -inl.h building blocks, this file exports them.
#include "cpu/kernels/group_norm.h"

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/norm_apply_rows.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep: must precede highway.h
#include "hwy/highway.h"
// clang-format on
#include "cpu/kernels/norm_apply-inl.h"
#if HWY_ONCE
namespace normkit {
namespace kernels {

HWY_EXPORT(ApplyNormRowsImpl);
HWY_EXPORT(ApplyRowNormImpl);
HWY_EXPORT(ApplyRowNormsImpl);

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

void ApplyRowNorms(const void* x, Storage x_storage, void* y, Storage y_storage, int64_t rows,
                   int64_t D, const RowScales& s, const float* gamma, const float* beta,
                   bool stream, const void* next, int64_t next_rows) {
  HWY_DYNAMIC_DISPATCH(ApplyRowNormsImpl)
  (x, x_storage, y, y_storage, rows, D, s, gamma, beta, stream, next, next_rows);
}

}  // namespace kernels
}  // namespace normkit
#endif  // HWY_ONCE
