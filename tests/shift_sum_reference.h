// SPDX-License-Identifier: Apache-2.0
// Plain double-precision references of the shift-sum family: loops over x's logical
// (b, c, h, w) indices, scattering into the shifted domain. Shared by the CPU tests and
// the tests of the CUDA element code.
#ifndef NORMKIT_TESTS_SHIFT_SUM_REFERENCE_H_
#define NORMKIT_TESTS_SHIFT_SUM_REFERENCE_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "normkit/normkit.h"

namespace normkit_test {

// A problem in logical coordinates: x[b][c][h][w], y[b][r][v] (r, v: rows and
// columns of the shifted domain).
struct Geometry {
  int64_t B, C, H, W, S;
  bool along_h;
  int32_t mask_kind;
  double scale = 1.0;

  int64_t Spread() const { return (C - 1) * (S < 0 ? -S : S); }
  int64_t Base() const { return S < 0 ? Spread() : 0; }
  int64_t Hout() const { return along_h ? H + Spread() : H; }
  int64_t Wout() const { return along_h ? W : W + Spread(); }
  int64_t Off(int64_t c) const { return c * S + Base(); }
  // Where x (c, h, w) lands in y.
  int64_t R(int64_t c, int64_t h) const { return along_h ? h + Off(c) : h; }
  int64_t V(int64_t c, int64_t w) const { return along_h ? w : w + Off(c); }
  int64_t MaskElems() const {
    switch (mask_kind) {
      case NORMKIT_MASK_HW: return H * W;
      case NORMKIT_MASK_CHW: return C * H * W;
      case NORMKIT_MASK_BCHW: return B * C * H * W;
      case NORMKIT_MASK_PHI_CHW: return C * Hout() * Wout();
      case NORMKIT_MASK_PHI_BCHW: return B * C * Hout() * Wout();
    }
    return 0;
  }
  bool PerSample() const {
    return mask_kind == NORMKIT_MASK_BCHW || mask_kind == NORMKIT_MASK_PHI_BCHW;
  }
  // The mask value multiplying x (b, c, h, w).
  double M(const std::vector<double>& m, int64_t b, int64_t c, int64_t h, int64_t w) const {
    const int64_t r = R(c, h), v = V(c, w);
    switch (mask_kind) {
      case NORMKIT_MASK_HW: return m[h * W + w];
      case NORMKIT_MASK_CHW: return m[(c * H + h) * W + w];
      case NORMKIT_MASK_BCHW: return m[((b * C + c) * H + h) * W + w];
      case NORMKIT_MASK_PHI_CHW: return m[(c * Hout() + r) * Wout() + v];
      case NORMKIT_MASK_PHI_BCHW: return m[((b * C + c) * Hout() + r) * Wout() + v];
    }
    return 1.0;
  }
  int64_t XIndex(int64_t b, int64_t c, int64_t h, int64_t w, bool channels_last) const {
    return channels_last ? ((b * H + h) * W + w) * C + c : ((b * C + c) * H + h) * W + w;
  }
  int64_t YIndex(int64_t b, int64_t r, int64_t v) const { return (b * Hout() + r) * Wout() + v; }
};

// The call parameters of g, with `mask` (ignored for NORMKIT_MASK_NONE).
inline normkit_shift_sum_params ParamsFor(const Geometry& g, const void* mask) {
  normkit_shift_sum_params params;
  normkit_shift_sum_params_init(&params, g.S);
  params.axis = g.along_h ? NORMKIT_SHIFT_ALONG_H : NORMKIT_SHIFT_ALONG_W;
  params.scale = g.scale;
  params.mask_kind = g.mask_kind;
  params.mask = g.mask_kind == NORMKIT_MASK_NONE ? nullptr : mask;
  return params;
}

inline std::vector<double> RefForward(const Geometry& g, const std::vector<double>& x,
                                      const std::vector<double>& m, bool cl) {
  std::vector<double> y(g.B * g.Hout() * g.Wout(), 0.0);
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t h = 0; h < g.H; ++h)
        for (int64_t w = 0; w < g.W; ++w)
          y[g.YIndex(b, g.R(c, h), g.V(c, w))] +=
              g.scale * g.M(m, b, c, h, w) * x[g.XIndex(b, c, h, w, cl)];
  return y;
}

inline std::vector<double> RefAdjoint(const Geometry& g, const std::vector<double>& y,
                                      const std::vector<double>& m, bool cl) {
  std::vector<double> x(g.B * g.C * g.H * g.W);
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t h = 0; h < g.H; ++h)
        for (int64_t w = 0; w < g.W; ++w)
          x[g.XIndex(b, c, h, w, cl)] =
              g.scale * g.M(m, b, c, h, w) * y[g.YIndex(b, g.R(c, h), g.V(c, w))];
  return x;
}

// Phi_s over covered positions; `count` ignores the mask.
inline std::vector<double> RefNormalizer(const Geometry& g, const std::vector<double>& m,
                                         bool count) {
  const int64_t samples = g.PerSample() ? g.B : 1;
  std::vector<double> p(samples * g.Hout() * g.Wout(), 0.0);
  for (int64_t b = 0; b < samples; ++b)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t h = 0; h < g.H; ++h)
        for (int64_t w = 0; w < g.W; ++w) {
          const double v = count ? 1.0 : g.M(m, b, c, h, w);
          p[g.YIndex(b, g.R(c, h), g.V(c, w))] += v * v;
        }
  return p;
}

// Within a few roundings per summed term (C terms), relative to the sum of |terms|.
template <class T>
void ExpectClose(const std::vector<T>& got, const std::vector<double>& want,
                 const std::vector<double>& magnitude, int64_t terms, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double eps = sizeof(T) == 8 ? 2.3e-16 : 1.2e-7;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 4.0 * static_cast<double>(terms + 2) * eps * magnitude[i] + 1e-300;
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol) && ++bad <= 5) {
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

}  // namespace normkit_test

#endif  // NORMKIT_TESTS_SHIFT_SUM_REFERENCE_H_
