// SPDX-License-Identifier: Apache-2.0
// Batch-norm folding for every SIMD target, dispatched at run time. A per-call fold
// of C channels costs a division and a square root each; done one channel at a
// time it took a quarter of a 1x1024x7x7 batch norm.
#include "cpu/kernels/batch_norm_fold.h"

#include <cmath>
#include <cstddef>
#include <limits>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/batch_norm_fold.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep: must precede highway.h
#include "hwy/highway.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One channel, the same operations as a vector lane.
inline void FoldOne(const BatchNormFoldJob& job, int64_t c) {
  const double gamma = job.gamma ? job.gamma[c] : 1.0;
  const double beta = job.beta ? job.beta[c] : 0.0;
  const double scale = gamma / std::sqrt(static_cast<double>(job.var[c]) + job.eps);
  const double mean_scaled = static_cast<double>(job.mean[c]) * scale;
  job.scale[c] = static_cast<float>(scale);
  job.shift[c] = static_cast<float>(beta - mean_scaled);
}

void BatchNormFoldImpl(const BatchNormFoldJob& job, int64_t channels) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // as many floats as dd has doubles
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(dd));
  const auto eps = hn::Set(dd, job.eps);
  int64_t c = 0;
  for (; c + lanes <= channels; c += lanes) {
    // All inputs of these channels are loaded before their outputs are stored.
    const auto gamma =
        job.gamma ? hn::PromoteTo(dd, hn::LoadU(df, job.gamma + c)) : hn::Set(dd, 1.0);
    const auto beta = job.beta ? hn::PromoteTo(dd, hn::LoadU(df, job.beta + c)) : hn::Zero(dd);
    const auto mean = hn::PromoteTo(dd, hn::LoadU(df, job.mean + c));
    const auto var = hn::PromoteTo(dd, hn::LoadU(df, job.var + c));
    const auto scale = hn::Div(gamma, hn::Sqrt(hn::Add(var, eps)));
    const auto shift = hn::Sub(beta, hn::Mul(mean, scale));
    hn::StoreU(hn::DemoteTo(df, scale), df, job.scale + c);
    hn::StoreU(hn::DemoteTo(df, shift), df, job.shift + c);
  }
  for (; c < channels; ++c) FoldOne(job, c);
}

inline bool ValidVariance(float v) {
  return v >= 0.0f && v <= std::numeric_limits<float>::max();  // false for NaN
}

int64_t FirstInvalidVarianceImpl(const float* var, int64_t channels) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto zero = hn::Zero(d);
  const auto max = hn::Set(d, std::numeric_limits<float>::max());
  int64_t c = 0;
  for (; c + lanes <= channels; c += lanes) {
    const auto v = hn::LoadU(d, var + c);
    const auto valid = hn::And(v >= zero, v <= max);  // comparisons with NaN are false
    if (!hn::AllTrue(d, valid)) return c + hn::FindFirstTrue(d, hn::Not(valid));
  }
  for (; c < channels; ++c) {
    if (!ValidVariance(var[c])) return c;
  }
  return channels;
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace normkit {
namespace kernels {

HWY_EXPORT(BatchNormFoldImpl);
HWY_EXPORT(FirstInvalidVarianceImpl);

void BatchNormFold(const BatchNormFoldJob& job, int64_t channels) {
  HWY_DYNAMIC_DISPATCH(BatchNormFoldImpl)(job, channels);
}

int64_t FirstInvalidVariance(const float* var, int64_t channels) {
  return HWY_DYNAMIC_DISPATCH(FirstInvalidVarianceImpl)(var, channels);
}

}  // namespace kernels
}  // namespace normkit
#endif  // HWY_ONCE
