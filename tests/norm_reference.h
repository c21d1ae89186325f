// SPDX-License-Identifier: Apache-2.0
// Plain double-precision references of the normalization family: loops over the
// logical (n, c, s) indices, no blocking, no SIMD, no merging.
#ifndef NORMKIT_TESTS_NORM_REFERENCE_H_
#define NORMKIT_TESTS_NORM_REFERENCE_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "test_util.h"

namespace normkit_test {

struct NormReference {
  std::vector<double> y;           // expected output
  std::vector<double> magnitude;   // |normalized * gamma| + |beta|: the scale of rounding errors
  std::vector<double> mean, rstd;  // per (n, g) or per row
};

inline double ActivateRef(double v, int32_t activation) {
  if (activation == NORMKIT_ACTIVATION_RELU) return v < 0.0 ? 0.0 : v;
  if (activation == NORMKIT_ACTIVATION_SILU) return v / (1.0 + std::exp(-v));
  return v;
}

inline NormReference ReferenceGroupNorm(const std::vector<float>& x, int64_t N, int64_t C,
                                        int64_t S, int64_t G, bool channels_last,
                                        const float* gamma, const float* beta, double eps,
                                        int32_t activation) {
  NormReference r;
  r.y.resize(x.size());
  r.magnitude.resize(x.size());
  const int64_t Cg = C / G;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      double sum = 0.0;
      for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c)
        for (int64_t s = 0; s < S; ++s) sum += x[Offset(n, c, s, C, S, channels_last)];
      const double count = static_cast<double>(Cg * S);
      const double mean = sum / count;
      double sq = 0.0;
      for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) {
        for (int64_t s = 0; s < S; ++s) {
          const double d = x[Offset(n, c, s, C, S, channels_last)] - mean;
          sq += d * d;
        }
      }
      const double rstd = 1.0 / std::sqrt(sq / count + eps);
      r.mean.push_back(mean);
      r.rstd.push_back(rstd);
      for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c) {
        const double gm = gamma ? gamma[c] : 1.0, bt = beta ? beta[c] : 0.0;
        for (int64_t s = 0; s < S; ++s) {
          const int64_t i = Offset(n, c, s, C, S, channels_last);
          const double t = (x[i] - mean) * rstd * gm;
          r.y[i] = ActivateRef(t + bt, activation);
          r.magnitude[i] = std::fabs(t) + std::fabs(bt);
        }
      }
    }
  }
  return r;
}

// Layer norm (rms = false) or RMS norm over the last dim of [rows, D].
inline NormReference ReferenceRowNorm(const std::vector<float>& x, int64_t rows, int64_t D,
                                      const float* gamma, const float* beta, double eps, bool rms) {
  NormReference r;
  r.y.resize(x.size());
  r.magnitude.resize(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = &x[i * D];
    double mean = 0.0;
    if (!rms) {
      for (int64_t d = 0; d < D; ++d) mean += xr[d];
      mean /= static_cast<double>(D);
    }
    double sq = 0.0;
    for (int64_t d = 0; d < D; ++d) sq += (xr[d] - mean) * (xr[d] - mean);
    const double rstd = 1.0 / std::sqrt(sq / static_cast<double>(D) + eps);
    r.mean.push_back(mean);
    r.rstd.push_back(rstd);
    for (int64_t d = 0; d < D; ++d) {
      const double t = (xr[d] - mean) * rstd * (gamma ? gamma[d] : 1.0);
      const double b = (!rms && beta) ? beta[d] : 0.0;
      r.y[i * D + d] = t + b;
      r.magnitude[i * D + d] = std::fabs(t) + std::fabs(b);
    }
  }
  return r;
}

// The normalization contract: within 1e-5 of the reference, relative to the scale of
// the terms (normalized value times gamma, plus beta), with NaN where it expects NaN.
inline void ExpectNormNear(const std::vector<float>& got, const NormReference& want,
                           const char* what, double rel = 1e-5) {
  ASSERT_EQ(got.size(), want.y.size());
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want.y[i];
    const bool ok = std::isnan(w) ? std::isnan(got[i])
                                  : std::fabs(static_cast<double>(got[i]) - w) <=
                                        rel * want.magnitude[i] + 1e-7;
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << w
                    << " (magnitude " << want.magnitude[i] << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

}  // namespace normkit_test

#endif  // NORMKIT_TESTS_NORM_REFERENCE_H_
