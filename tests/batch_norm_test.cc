// SPDX-License-Identifier: Apache-2.0
// Batch-norm inference and its fold against (x - mean) / sqrt(var + eps) * gamma + beta
// computed in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "test_util.h"

namespace normkit_test {
namespace {

struct BatchNormData {
  std::vector<float> gamma, beta, mean, var;
  explicit BatchNormData(int64_t C, uint32_t seed)
      : gamma(RandomVector(C, seed, 0.5f, 2.0f)),
        beta(RandomVector(C, seed + 1)),
        mean(RandomVector(C, seed + 2)),
        var(RandomVector(C, seed + 3, 0.0f, 3.0f)) {}
};

double ReferenceBatchNorm(double x, double gamma, double beta, double mean, double var,
                          double eps) {
  return (x - mean) / std::sqrt(var + eps) * gamma + beta;
}

// The fold's documented operations, one float rounding each (the product kept apart
// from the subtraction so the compiler cannot fuse them).
void FloatFold(float gamma, float beta, float mean, float var, float eps, float* scale,
               float* shift) {
  const float s = gamma / std::sqrt(var + eps);
  const volatile float mean_scaled = mean * s;
  *scale = s;
  *shift = beta - mean_scaled;
}

TEST(BatchNorm, FoldMatchesDefinition) {
  const int64_t C = 37;
  BatchNormData bn(C, 10);
  bn.var[3] = 0.0f;  // a dead channel: only eps keeps it finite
  std::vector<float> scale(C), shift(C);
  const float eps = 1e-5f;
  for (bool affine : {true, false}) {  // false: BatchNorm(affine=False), gamma / beta NULL
    ASSERT_EQ(normkit_batch_norm_fold(C, affine ? bn.gamma.data() : nullptr,
                                      affine ? bn.beta.data() : nullptr, bn.mean.data(),
                                      bn.var.data(), eps, scale.data(), shift.data()),
              NORMKIT_SUCCESS);
    for (int64_t c = 0; c < C; ++c) {
      const float g = affine ? bn.gamma[c] : 1.0f, b = affine ? bn.beta[c] : 0.0f;
      // Within float rounding of the double formula: var + eps, the square root and
      // the division round once each (under 2.5 * 2^-24 relative), the shift's
      // product and difference once each.
      const double s = g / std::sqrt(static_cast<double>(bn.var[c]) + eps);
      const double h = b - bn.mean[c] * s;
      EXPECT_NEAR(scale[c], s, 2.5 * 0x1p-24 * std::fabs(s)) << c;
      EXPECT_NEAR(shift[c], h, 4.5 * 0x1p-24 * (std::fabs(bn.mean[c] * s) + std::fabs(h))) << c;
      // And bit for bit the float formula the header documents.
      float want_scale, want_shift;
      FloatFold(g, b, bn.mean[c], bn.var[c], eps, &want_scale, &want_shift);
      EXPECT_EQ(scale[c], want_scale) << c;
      EXPECT_EQ(shift[c], want_shift) << c;
    }
  }
}

TEST(BatchNorm, FoldInPlaceOverGammaBeta) {
  const int64_t C = 37;  // whole vectors and a tail
  BatchNormData bn(C, 20);
  std::vector<float> scale(C), shift(C);
  ASSERT_EQ(normkit_batch_norm_fold(C, bn.gamma.data(), bn.beta.data(), bn.mean.data(),
                                    bn.var.data(), 1e-3f, scale.data(), shift.data()),
            NORMKIT_SUCCESS);
  ASSERT_EQ(normkit_batch_norm_fold(C, bn.gamma.data(), bn.beta.data(), bn.mean.data(),
                                    bn.var.data(), 1e-3f, bn.gamma.data(), bn.beta.data()),
            NORMKIT_SUCCESS);
  EXPECT_EQ(bn.gamma, scale);
  EXPECT_EQ(bn.beta, shift);
}

TEST(BatchNorm, InferenceMatchesReference) {
  const std::vector<std::vector<int64_t>> shapes = {
      {4, 3}, {2, 5, 9}, {2, 17, 13, 7}, {1, 1024, 7, 7}, {3, 4, 2, 3, 5}, {8, 32, 16}};
  for (const auto& shape : shapes) {
    const int64_t N = shape[0], C = shape[1], numel = Numel(shape), S = numel / (N * C);
    BatchNormData bn(C, 30);
    const std::vector<float> x = RandomVector(numel, 31, -4.0f, 4.0f);
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      for (bool affine : {true, false}) {
        for (bool in_place : {false, true}) {
          for (int threads : {1, 2, 3}) {
            SCOPED_TRACE(::testing::Message()
                         << "numel=" << numel << " layout=" << layout << " affine=" << affine
                         << " in_place=" << in_place << " threads=" << threads);
            std::vector<float> xb = x, yb(numel, -1.0f);
            float* yd = in_place ? xb.data() : yb.data();
            normkit_tensor xt = Desc(xb.data(), layout, shape), yt = Desc(yd, layout, shape);
            Context ctx(threads);
            const float eps = 1e-5f;
            ASSERT_EQ(normkit_batch_norm_inference(ctx.ctx, &xt, affine ? bn.gamma.data() : nullptr,
                                                   affine ? bn.beta.data() : nullptr,
                                                   bn.mean.data(), bn.var.data(), eps, &yt),
                      NORMKIT_SUCCESS)
                << normkit_last_error();
            const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST;
            for (int64_t n = 0; n < N; ++n) {
              for (int64_t c = 0; c < C; ++c) {
                const double g = affine ? bn.gamma[c] : 1.0, b = affine ? bn.beta[c] : 0.0;
                const double s = g / std::sqrt(static_cast<double>(bn.var[c]) + eps);
                for (int64_t i = 0; i < S; ++i) {
                  const int64_t o = Offset(n, c, i, C, S, cl);
                  const double want = ReferenceBatchNorm(x[o], g, b, bn.mean[c], bn.var[c], eps);
                  // Folding rounds scale (at most 2.5 * 2^-24 relative) and shift, then
                  // one FMA.
                  const double tol =
                      4 * 1.19e-7 *
                      (std::fabs(x[o] * s) + std::fabs(b) + std::fabs(bn.mean[c] * s));
                  ASSERT_NEAR(yd[o], want, tol) << "n=" << n << " c=" << c << " i=" << i;
                }
              }
            }
          }
        }
      }
    }
  }
}

// Batch norm folds its parameters per range (only the channels of the range's planes,
// rotated to its first plane): bit for bit the affine of normkit_batch_norm_fold's
// output, on shapes that split into ranges starting mid-plane and mid-sample, with
// planes under a vector, short planes, C past the per-thread row, and both layouts.
// (Running means within kExactFoldRatio = 64 standard deviations: beyond, the mean is
// subtracted first; see FloatEdges.BatchNormLargeRunningMean*.)
TEST(BatchNorm, InferenceIsTheAffineOfTheFold) {
  const std::vector<std::vector<int64_t>> shapes = {{5, 37, 23, 29}, {2, 1024, 7, 7},
                                                    {3, 96, 14, 14}, {4, 3000, 5},
                                                    {2, 5000, 3, 3}, {7, 300, 2, 2, 11}};
  for (const auto& shape : shapes) {
    const int64_t C = shape[1], numel = Numel(shape);
    BatchNormData bn(C, 40);
    for (float& v : bn.var) v = std::max(v, 0.02f);  // |mean| <= 2 <= 64 * sqrt(var)
    std::vector<float> scale(C), shift(C);
    ASSERT_EQ(normkit_batch_norm_fold(C, bn.gamma.data(), bn.beta.data(), bn.mean.data(),
                                      bn.var.data(), 1e-5f, scale.data(), shift.data()),
              NORMKIT_SUCCESS);
    const std::vector<float> x = RandomVector(numel, 41, -4.0f, 4.0f);
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      std::vector<float> want(numel);
      normkit_tensor xt = Desc(const_cast<float*>(x.data()), layout, shape),
                     wt = Desc(want.data(), layout, shape);
      ASSERT_EQ(
          normkit_affine(nullptr, &xt, scale.data(), shift.data(), NORMKIT_PARAMS_PER_CHANNEL, &wt),
          NORMKIT_SUCCESS);
      for (bool in_place : {false, true}) {
        for (int threads : {1, 2, 3, 8}) {
          SCOPED_TRACE(::testing::Message() << "numel=" << numel << " layout=" << layout
                                            << " in_place=" << in_place << " threads=" << threads);
          std::vector<float> xb = x, yb(numel, -1.0f);
          float* yd = in_place ? xb.data() : yb.data();
          normkit_tensor xbt = Desc(xb.data(), layout, shape), yt = Desc(yd, layout, shape);
          Context ctx(threads);
          ASSERT_EQ(normkit_batch_norm_inference(ctx.ctx, &xbt, bn.gamma.data(), bn.beta.data(),
                                                 bn.mean.data(), bn.var.data(), 1e-5f, &yt),
                    NORMKIT_SUCCESS)
              << normkit_last_error();
          for (int64_t i = 0; i < numel; ++i) {
            ASSERT_EQ(yd[i], want[i]) << "i=" << i;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace normkit_test
