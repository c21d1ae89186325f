// SPDX-License-Identifier: Apache-2.0
// The slow, always-right statistics behind the fast ones. The fast statistics sum
// (x - pivot) and its square in float over short runs: a square past FLT_MAX (a
// deviation over about 1.8e19), a pivot sampled from values near FLT_MAX, or a NaN / Inf
// in the values makes them infinite or NaN. Such a group or row is recomputed here, two
// passes in double (which holds the square of any float), so every finite input gets
// its exact statistics and every input holding a NaN or Inf gets NaN ones, whatever
// plan the shape selected.
#ifndef NORMKIT_CORE_EXACT_STATS_H_
#define NORMKIT_CORE_EXACT_STATS_H_

#include <cmath>
#include <cstdint>
#include <limits>

namespace normkit {

struct MeanRstd {
  double mean;
  double rstd;  // 1 / sqrt(variance + eps), the variance biased
};

// Whether the fast statistics hold: false when the mean is not finite or the
// variance overflowed (rstd 0), true for every set of moderate finite values.
inline bool FastStatisticsHold(double mean, double rstd) {
  return std::isfinite(mean) && rstd > 0.0;  // false for NaN
}

// Mean and rstd of `runs` runs of `len` values, run k at x + k * stride (rms: mean 0 and
// rstd = 1 / sqrt(mean(x^2) + eps)), value(i) giving x[i] (any storage). NaN and NaN when
// the values hold a NaN or an Inf.
template <class Value>
MeanRstd ExactMeanRstdOf(const Value& value, int64_t runs, int64_t len, int64_t stride, float eps,
                         bool rms) {
  const double count = static_cast<double>(runs) * static_cast<double>(len);
  double mean = 0.0;
  if (!rms) {
    double sum = 0.0;
    for (int64_t k = 0; k < runs; ++k) {
      for (int64_t i = 0; i < len; ++i) sum += static_cast<double>(value(k * stride + i));
    }
    mean = sum / count;
  }
  double m2 = 0.0;
  for (int64_t k = 0; k < runs; ++k) {
    for (int64_t i = 0; i < len; ++i) {
      const double d = static_cast<double>(value(k * stride + i)) - mean;
      m2 += d * d;
    }
  }
  if (!std::isfinite(mean) || !std::isfinite(m2)) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return {nan, nan};
  }
  return {mean, 1.0 / std::sqrt(m2 / count + static_cast<double>(eps))};
}

// ExactMeanRstdOf of float32 values.
inline MeanRstd ExactMeanRstd(const float* x, int64_t runs, int64_t len, int64_t stride, float eps,
                              bool rms) {
  return ExactMeanRstdOf([x](int64_t i) { return x[i]; }, runs, len, stride, eps, rms);
}

}  // namespace normkit

#endif  // NORMKIT_CORE_EXACT_STATS_H_
