// SPDX-License-Identifier: Apache-2.0
// The edges of float: means far larger than the spread, sums of squares past FLT_MAX,
// constants near FLT_MAX, NaN / Inf statistics and SiLU's tail, each against a plain
// double reference written from the definitions, in both layouts and on every plan
// the shapes select (small / batched / blocked / chained groups, rows).
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "hwy/targets.h"
#include "norm_reference.h"
#include "test_util.h"

namespace normkit_test {
namespace {

constexpr normkit_layout kLayouts[] = {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST};

// Group norm of x (logical [N, C, S]) against the double reference: every output within
// `rel` of the output's scale (|gamma| + |beta|), and mean_out / rstd_out within float
// rounding of the reference's.
void CheckGroupNorm(const std::vector<float>& x, int64_t N, int64_t C, int64_t S, int64_t G,
                    normkit_layout layout, const std::vector<float>& gamma,
                    const std::vector<float>& beta, float eps, double rel, const char* what) {
  const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST;
  const std::vector<int64_t> shape = {N, C, S};
  std::vector<float> xs = x, y(x.size()), mean(N * G), rstd(N * G);
  const NormReference want = ReferenceGroupNorm(x, N, C, S, G, cl, gamma.data(), beta.data(), eps,
                                                NORMKIT_ACTIVATION_NONE);
  for (int threads : {1, 2}) {
    Context ctx(threads);
    for (bool in_place : {false, true}) {
      std::vector<float> out = in_place ? xs : y;
      normkit_tensor xt = Desc(const_cast<float*>(x.data()), layout, shape);
      normkit_tensor yt = Desc(out.data(), layout, shape);
      if (in_place) xt = yt;
      ASSERT_EQ(normkit_group_norm(ctx.ctx, &xt, G, gamma.data(), beta.data(), eps,
                                   NORMKIT_ACTIVATION_NONE, &yt, mean.data(), rstd.data()),
                NORMKIT_SUCCESS)
          << normkit_last_error();
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t g = 0; g < G; ++g) {
          const double m = want.mean[n * G + g], r = want.rstd[n * G + g];
          EXPECT_NEAR(mean[n * G + g], m, 2e-7 * std::fabs(m) + 1e-6 / r)
              << what << " mean n=" << n << " g=" << g;
          EXPECT_NEAR(rstd[n * G + g], r, 1e-6 * r) << what << " rstd n=" << n << " g=" << g;
          for (int64_t c = g * (C / G); c < (g + 1) * (C / G); ++c) {
            for (int64_t s = 0; s < S; ++s) {
              const int64_t i = Offset(n, c, s, C, S, cl);
              const double tol = rel * (std::fabs(gamma[c]) + std::fabs(beta[c])) + 1e-30;
              ASSERT_NEAR(out[i], want.y[i], tol)
                  << what << " n=" << n << " c=" << c << " s=" << s << " threads=" << threads
                  << " in_place=" << in_place;
            }
          }
        }
      }
    }
  }
}

std::vector<float> Params(int64_t C, uint32_t seed, float lo, float hi) {
  return RandomVector(C, seed, lo, hi);
}

// --- batch norm inference: a running mean far from x's spread --------------------------

TEST(FloatEdges, BatchNormLargeRunningMeanSingleValue) {
  for (float m : {1e4f, 1e6f}) {
    float x = m + 0.5f, y = 0.0f;
    const float gamma = 1.0f, beta = 0.0f, var = 1.0f, eps = 1e-5f;
    const std::vector<int64_t> shape = {1, 1};
    normkit_tensor xt = Desc(&x, NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
    normkit_tensor yt = Desc(&y, NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
    ASSERT_EQ(normkit_batch_norm_inference(nullptr, &xt, &gamma, &beta, &m, &var, eps, &yt),
              NORMKIT_SUCCESS);
    const double want = 0.5 / std::sqrt(1.0 + 1e-5);
    EXPECT_NEAR(y, want, 1e-5 * want) << "mean " << m;
  }
}

// A running mean near FLT_MAX with a variance near it too: 256 * var overflows, which
// must not let the folded form through (found by fuzz_values).
TEST(FloatEdges, BatchNormMeanAndVarianceNearFltMax) {
  const int64_t C = 16, S = 5;
  const std::vector<float> gamma(C, 1.25f), beta(C, 0.25f), mean(C, 2e38f), var(C, 1e38f);
  for (normkit_layout layout : kLayouts) {
    std::vector<float> x(C * S, 2e38f), y(C * S);
    const std::vector<int64_t> shape = {1, C, S};
    normkit_tensor xt = Desc(x.data(), layout, shape), yt = Desc(y.data(), layout, shape);
    ASSERT_EQ(normkit_batch_norm_inference(nullptr, &xt, gamma.data(), beta.data(), mean.data(),
                                           var.data(), 1e-5f, &yt),
              NORMKIT_SUCCESS);
    for (float v : y) EXPECT_EQ(v, 0.25f);  // x == mean: exactly beta
  }
}

// Shapes that take each affine path: planes of one vector, short planes, long planes,
// channels-last periods in registers, long periods, cached and streamed tensors.
void CheckLargeRunningMean(const std::vector<std::vector<int64_t>>& shapes) {
  // 60: the folded form's worst case (below kExactFoldRatio = 64); beyond, mean first.
  for (double ratio : {60.0, 1e4, 1e6}) {
    for (const auto& shape : shapes) {
      const int64_t N = shape[0], C = shape[1], S = Numel(shape) / N / C;
      const std::vector<float> gamma = Params(C, 1, 0.5f, 2.0f), beta = Params(C, 2, -1.0f, 1.0f);
      std::vector<float> mean(C), var(C);
      const std::vector<float> unit = Params(C, 3, -1.0f, 1.0f), sd = Params(C, 4, 0.5f, 2.0f);
      for (int64_t c = 0; c < C; ++c) {
        mean[c] = static_cast<float>(unit[c] * ratio * sd[c]);
        var[c] = sd[c] * sd[c];
      }
      for (normkit_layout layout : kLayouts) {
        const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST;
        std::vector<float> x = RandomVector(Numel(shape), 5, -3.0f, 3.0f);
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t c = 0; c < C; ++c) {
            for (int64_t s = 0; s < S; ++s) {
              float& v = x[Offset(n, c, s, C, S, cl)];
              v = mean[c] + v * sd[c];
            }
          }
        }
        for (bool in_place : {false, true}) {
          std::vector<float> y = in_place ? x : std::vector<float>(x.size());
          normkit_tensor xt = Desc(in_place ? y.data() : x.data(), layout, shape);
          normkit_tensor yt = Desc(y.data(), layout, shape);
          ASSERT_EQ(normkit_batch_norm_inference(nullptr, &xt, gamma.data(), beta.data(),
                                                 mean.data(), var.data(), 1e-5f, &yt),
                    NORMKIT_SUCCESS);
          double worst = 0;
          for (int64_t n = 0; n < N; ++n) {
            for (int64_t c = 0; c < C; ++c) {
              for (int64_t s = 0; s < S; ++s) {
                const int64_t i = Offset(n, c, s, C, S, cl);
                const double want = (static_cast<double>(x[i]) - mean[c]) /
                                        std::sqrt(double{var[c]} + 1e-5) * gamma[c] +
                                    beta[c];
                // In units of the output's scale |gamma| + |beta|.
                worst = std::max(
                    worst, std::fabs(y[i] - want) / (std::fabs(gamma[c]) + std::fabs(beta[c])));
              }
            }
          }
          EXPECT_LE(worst, 1e-5) << "mean/std " << ratio << " C=" << C << " layout " << layout
                                 << " in_place " << in_place;
          for (int threads : {2, 3}) {  // the same bits on any thread count
            Context ctx(threads);
            std::vector<float> again = in_place ? x : std::vector<float>(x.size());
            normkit_tensor xa = Desc(in_place ? again.data() : x.data(), layout, shape);
            normkit_tensor ya = Desc(again.data(), layout, shape);
            ASSERT_EQ(normkit_batch_norm_inference(ctx.ctx, &xa, gamma.data(), beta.data(),
                                                   mean.data(), var.data(), 1e-5f, &ya),
                      NORMKIT_SUCCESS);
            ASSERT_EQ(std::memcmp(again.data(), y.data(), y.size() * sizeof(float)), 0) << threads;
          }
        }
      }
    }
  }
}

TEST(FloatEdges, BatchNormLargeRunningMeanEveryPath) {
  CheckLargeRunningMean({{2, 13, 9, 11},
                         {3, 24, 16},
                         {2, 64, 7, 7},
                         {1, 300, 5, 5},
                         {2, 5000, 3},
                         {4, 32, 64, 64},
                         {3, 16, 16},
                         {2, 1024, 4}});
}

// The mean-first affine (kCenterScaleShift) on every SIMD target this CPU runs.
TEST(FloatEdges, BatchNormLargeRunningMeanOnEveryTarget) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    CheckLargeRunningMean({{2, 13, 9, 11}, {3, 24, 16}, {2, 64, 7, 7}, {1, 300, 5, 5}, {2, 8, 4}});
  }
  hwy::SetSupportedTargetsForTest(0);
}

// --- sums of squares past FLT_MAX, constants near it ----------------------------------

// Shapes [N, C, S] with G that reach each group-norm plan (tiny, batched instance norm,
// channels-last one channel a group, blocked groups, chained large groups).
struct GroupCase {
  int64_t N, C, S, G;
};
const GroupCase kGroupCases[] = {{1, 1, 16, 1},   {2, 16, 35, 16},  {2, 4, 9, 2},
                                 {1, 8, 3000, 2}, {2, 6, 40000, 3}, {1, 32, 49, 32}};

TEST(FloatEdges, GroupNormSquaresPastFltMax) {
  for (const GroupCase& k : kGroupCases) {
    for (double spread : {1e19, 3e18 * 1e4, 1e30, 2e38}) {
      const std::vector<float> gamma = Params(k.C, 7, 0.5f, 2.0f), beta = Params(k.C, 8, -1.f, 1.f);
      std::vector<float> x = RandomVector(k.N * k.C * k.S, 9, -1.0f, 1.0f);
      for (float& v : x) v = static_cast<float>(v * spread);
      for (normkit_layout layout : kLayouts) {
        CheckGroupNorm(x, k.N, k.C, k.S, k.G, layout, gamma, beta, 1e-5f, 2e-5,
                       "squares past FLT_MAX");
      }
    }
  }
}

TEST(FloatEdges, GroupNormAlternatingSigns) {
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[i] = i % 2 ? -1e19f : 1e19f;
  const std::vector<float> gamma(1, 1.0f), beta(1, 0.0f);
  for (normkit_layout layout : kLayouts) {
    CheckGroupNorm(x, 1, 1, 16, 1, layout, gamma, beta, 1e-5f, 1e-6, "alternating 1e19");
  }
}

TEST(FloatEdges, GroupNormConstantNearFltMax) {
  for (const GroupCase& k : kGroupCases) {
    for (float value : {2e38f, 1e38f, -3e38f, 1e30f, 1e25f}) {
      const std::vector<float> gamma = Params(k.C, 7, 0.5f, 2.0f), beta = Params(k.C, 8, -1.f, 1.f);
      const std::vector<float> x(k.N * k.C * k.S, value);
      for (normkit_layout layout : kLayouts) {
        CheckGroupNorm(x, k.N, k.C, k.S, k.G, layout, gamma, beta, 1e-5f, 1e-6, "constant");
      }
    }
  }
}

TEST(FloatEdges, InstanceNormOneConstantChannel) {
  // [1, 16, 3, 3] channels-last, G = 16: channel 0 is 1e30, the others 0.
  const int64_t C = 16, S = 9;
  for (float value : {1e30f, 3e38f}) {
    for (normkit_layout layout : kLayouts) {
      std::vector<float> x(C * S, 0.0f);
      for (int64_t s = 0; s < S; ++s) x[Offset(0, 0, s, C, S, layout)] = value;
      const std::vector<float> gamma(C, 1.0f), beta(C, 0.25f);
      CheckGroupNorm(x, 1, C, S, C, layout, gamma, beta, 1e-5f, 1e-6, "constant channel");
    }
  }
}

// Rows of [rows, D]: layer norm and RMS norm of values whose squares overflow float.
void CheckRows(const std::vector<float>& x, int64_t rows, int64_t D, const char* what) {
  const std::vector<int64_t> shape = {rows, D};
  const std::vector<float> gamma = Params(D, 3, 0.5f, 2.0f), beta = Params(D, 4, -1.0f, 1.0f);
  std::vector<float> y(x.size()), mean(rows), rstd(rows);
  normkit_tensor xt = Desc(const_cast<float*>(x.data()), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
  normkit_tensor yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
  ASSERT_EQ(normkit_layer_norm(nullptr, &xt, gamma.data(), beta.data(), 1e-5f, &yt, mean.data(),
                               rstd.data()),
            NORMKIT_SUCCESS);
  // A row is a group of D channels at one position.
  const NormReference want = ReferenceGroupNorm(x, rows, D, 1, 1, false, gamma.data(), beta.data(),
                                                1e-5, NORMKIT_ACTIVATION_NONE);
  for (int64_t r = 0; r < rows; ++r) {
    const double m = want.mean[r], rs = want.rstd[r];
    EXPECT_NEAR(mean[r], m, 2e-7 * std::fabs(m) + 1e-6 / rs) << what << " row " << r;
    EXPECT_NEAR(rstd[r], rs, 1e-6 * rs) << what << " row " << r;
    for (int64_t d = 0; d < D; ++d) {
      ASSERT_NEAR(y[r * D + d], want.y[r * D + d],
                  2e-5 * (std::fabs(gamma[d]) + std::fabs(beta[d])))
          << what << " layer norm row " << r << " d " << d;
    }
  }
  ASSERT_EQ(normkit_rms_norm(nullptr, &xt, gamma.data(), 1e-5f, &yt, rstd.data()), NORMKIT_SUCCESS);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += double{x[r * D + d]} * x[r * D + d];
    const double rs = 1.0 / std::sqrt(ss / D + 1e-5);
    EXPECT_NEAR(rstd[r], rs, 1e-6 * rs) << what << " rms row " << r;
    for (int64_t d = 0; d < D; ++d) {
      const double want = x[r * D + d] * rs * gamma[d];
      ASSERT_NEAR(y[r * D + d], want, 2e-5 * std::fabs(gamma[d])) << what << " rms row " << r;
    }
  }
}

TEST(FloatEdges, RowNormsSquaresPastFltMax) {
  for (int64_t D : {2, 16, 100, 768, 5000}) {
    for (int64_t rows : {1, 3, 40}) {
      for (double spread : {1e19, 1e30, 2e38}) {
        std::vector<float> x = RandomVector(rows * D, 11, -1.0f, 1.0f);
        for (float& v : x) v = static_cast<float>(v * spread);
        CheckRows(x, rows, D, "spread");
        std::vector<float> c(rows * D, static_cast<float>(spread));
        CheckRows(c, rows, D, "constant");
      }
    }
  }
}

// --- NaN / Inf statistics: one rule for every plan -------------------------------------

TEST(FloatEdges, NonFiniteGroupStatisticsAreNaN) {
  const GroupCase cases[] = {
      {2, 10, 750, 5}, {1, 6, 40200, 3}, {1, 1, 16, 1}, {2, 16, 35, 16}, {2, 4, 9, 2}};
  for (const GroupCase& k : cases) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY}) {
      for (normkit_layout layout : kLayouts) {
        const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST;
        std::vector<float> x = RandomVector(k.N * k.C * k.S, 12);
        x[Offset(0, 0, k.S / 2, k.C, k.S, cl)] = bad;  // in group 0 of sample 0
        std::vector<float> y(x.size()), mean(k.N * k.G), rstd(k.N * k.G);
        const std::vector<int64_t> shape = {k.N, k.C, k.S};
        normkit_tensor xt = Desc(x.data(), layout, shape), yt = Desc(y.data(), layout, shape);
        ASSERT_EQ(normkit_group_norm(nullptr, &xt, k.G, nullptr, nullptr, 1e-5f,
                                     NORMKIT_ACTIVATION_NONE, &yt, mean.data(), rstd.data()),
                  NORMKIT_SUCCESS);
        EXPECT_TRUE(std::isnan(mean[0])) << mean[0] << " C=" << k.C << " S=" << k.S;
        EXPECT_TRUE(std::isnan(rstd[0])) << rstd[0] << " C=" << k.C << " S=" << k.S;
        const int64_t Cg = k.C / k.G;
        for (int64_t c = 0; c < Cg; ++c) {
          for (int64_t s = 0; s < k.S; ++s) {
            ASSERT_TRUE(std::isnan(y[Offset(0, c, s, k.C, k.S, cl)])) << c << " " << s;
          }
        }
        // Other groups and samples are untouched by it.
        for (int64_t i = 1; i < k.N * k.G; ++i) {
          EXPECT_TRUE(std::isfinite(mean[i]) && std::isfinite(rstd[i])) << i;
        }
      }
    }
  }
}

TEST(FloatEdges, NonFiniteRowStatisticsAreNaN) {
  for (int64_t D : {16, 768, 5000}) {
    std::vector<float> x = RandomVector(3 * D, 13);
    x[D + 5] = INFINITY;
    std::vector<float> y(x.size()), mean(3), rstd(3);
    const std::vector<int64_t> shape = {3, D};
    normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
    normkit_tensor yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
    ASSERT_EQ(
        normkit_layer_norm(nullptr, &xt, nullptr, nullptr, 1e-5f, &yt, mean.data(), rstd.data()),
        NORMKIT_SUCCESS);
    EXPECT_TRUE(std::isnan(mean[1]) && std::isnan(rstd[1])) << mean[1] << " " << rstd[1];
    EXPECT_TRUE(std::isfinite(mean[0]) && std::isfinite(mean[2]));
    ASSERT_EQ(normkit_rms_norm(nullptr, &xt, nullptr, 1e-5f, &yt, rstd.data()), NORMKIT_SUCCESS);
    EXPECT_TRUE(std::isnan(rstd[1])) << rstd[1];
    EXPECT_TRUE(std::isfinite(rstd[0]) && std::isfinite(rstd[2]));
  }
}

// --- SiLU's far tail ----------------------------------------------------------------------

// Every channel c is [1, -1], normalized to [1, -1] exactly, so gamma[c] = v makes the
// activation's input +v and -v: the fused SiLU over a sweep of v and its far tail, on
// every SIMD target this CPU runs.
TEST(FloatEdges, SiluTailOnEveryTarget) {
  std::vector<float> v;
  for (double t = -130.0; t <= 100.0; t += 0.37) v.push_back(static_cast<float>(t));
  for (float t : {-1000.0f, -200.0f, -120.5f, -103.9f, -103.0f, -89.0f, -88.5f, -87.0f, -1e30f,
                  -FLT_MAX, 1e30f, FLT_MAX, 0.0f, 1e-30f, -1e-30f}) {
    v.push_back(t);
  }
  const int64_t C = static_cast<int64_t>(v.size());
  std::vector<float> x(2 * C);
  for (int64_t c = 0; c < C; ++c) x[2 * c] = 1.0f, x[2 * c + 1] = -1.0f;
  const std::vector<int64_t> shape = {1, C, 2};
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    std::vector<float> y(2 * C);
    normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
    normkit_tensor yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
    ASSERT_EQ(normkit_instance_norm(nullptr, &xt, v.data(), nullptr, 1e-30f,
                                    NORMKIT_ACTIVATION_SILU, &yt, nullptr, nullptr),
              NORMKIT_SUCCESS);
    for (int64_t i = 0; i < 2 * C; ++i) {
      const double a = (i % 2 ? -1.0 : 1.0) * static_cast<double>(v[i / 2]);
      // a / (1 + e^-a), written so that neither factor overflows.
      const double want = a >= 0 ? a / (1.0 + std::exp(-a)) : a * std::exp(a) / (1.0 + std::exp(a));
      // The documented bound: 8 * 2^-24 relative for a >= -87; below, 1.5e-36 absolute
      // (where |silu(a)| < 1.5e-36 itself).
      const double tol = a >= -87.0 ? 8.0 * 0x1p-24 * std::fabs(want) : 1.5e-36;
      EXPECT_NEAR(y[i], want, tol) << "v=" << a;
      if (a < -87.0) EXPECT_LE(std::fabs(y[i]), 1.5e-36) << "v=" << a;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(FloatEdges, SiluKeepsNaNAndInfinities) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    // Groups of one element: the output is act(beta); beta NaN, +Inf, -Inf.
    const std::vector<float> x(3, 0.0f), beta = {NAN, INFINITY, -INFINITY};
    std::vector<float> y(3);
    const std::vector<int64_t> shape = {1, 3, 1};
    normkit_tensor xt = Desc(const_cast<float*>(x.data()), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
    normkit_tensor yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
    ASSERT_EQ(normkit_instance_norm(nullptr, &xt, nullptr, beta.data(), 1e-5f,
                                    NORMKIT_ACTIVATION_SILU, &yt, nullptr, nullptr),
              NORMKIT_SUCCESS);
    EXPECT_TRUE(std::isnan(y[0])) << y[0];
    EXPECT_EQ(y[1], INFINITY);
    EXPECT_LE(std::fabs(y[2]), 1.5e-36f) << y[2];  // the limit is -0
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace normkit_test
