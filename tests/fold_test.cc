// SPDX-License-Identifier: Apache-2.0
// Folding BN into convolution / transposed convolution / linear weights, checked by
// running the layer then BN, and the folded layer alone, with a plain double conv.
#include <cmath>
#include <vector>

#include "test_util.h"

namespace normkit_test {
namespace {

struct ConvSpec {
  int64_t in_channels, out_channels, groups, kh, kw;
};

// Direct 2-D convolution (stride 1, no padding), grouped, weights [O, I/g, kh, kw].
std::vector<double> Conv2d(const std::vector<float>& x, int64_t I, int64_t H, int64_t W,
                           const std::vector<float>& w, const float* bias, const ConvSpec& s) {
  const int64_t OH = H - s.kh + 1, OW = W - s.kw + 1, ipg = I / s.groups,
                opg = s.out_channels / s.groups;
  std::vector<double> y(s.out_channels * OH * OW);
  for (int64_t o = 0; o < s.out_channels; ++o) {
    const int64_t g = o / opg;
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double acc = bias ? bias[o] : 0.0;
        for (int64_t il = 0; il < ipg; ++il)
          for (int64_t a = 0; a < s.kh; ++a)
            for (int64_t b = 0; b < s.kw; ++b)
              acc += static_cast<double>(w[((o * ipg + il) * s.kh + a) * s.kw + b]) *
                     x[((g * ipg + il) * H + oh + a) * W + ow + b];
        y[(o * OH + oh) * OW + ow] = acc;
      }
  }
  return y;
}

// Transposed 2-D convolution (stride 1, no padding), weights [I, O/g, kh, kw].
std::vector<double> ConvTranspose2d(const std::vector<float>& x, int64_t I, int64_t H, int64_t W,
                                    const std::vector<float>& w, const float* bias,
                                    const ConvSpec& s) {
  const int64_t OH = H + s.kh - 1, OW = W + s.kw - 1, ipg = I / s.groups,
                opg = s.out_channels / s.groups;
  std::vector<double> y(s.out_channels * OH * OW, 0.0);
  for (int64_t o = 0; o < s.out_channels; ++o)
    for (int64_t p = 0; p < OH * OW; ++p) y[o * OH * OW + p] = bias ? bias[o] : 0.0;
  for (int64_t i = 0; i < I; ++i) {
    const int64_t g = i / ipg;
    for (int64_t ol = 0; ol < opg; ++ol) {
      const int64_t o = g * opg + ol;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t ww = 0; ww < W; ++ww)
          for (int64_t a = 0; a < s.kh; ++a)
            for (int64_t b = 0; b < s.kw; ++b)
              y[(o * OH + h + a) * OW + ww + b] +=
                  static_cast<double>(w[((i * opg + ol) * s.kh + a) * s.kw + b]) *
                  x[(i * H + h) * W + ww];
    }
  }
  return y;
}

void CheckFold(const ConvSpec& s, bool transposed, bool with_bias) {
  SCOPED_TRACE(::testing::Message() << "I=" << s.in_channels << " O=" << s.out_channels
                                    << " g=" << s.groups << " k=" << s.kh << "x" << s.kw
                                    << " transposed=" << transposed << " bias=" << with_bias);
  const int64_t H = 6, W = 5, O = s.out_channels, I = s.in_channels;
  const int64_t wcount = (transposed ? I * (O / s.groups) : O * (I / s.groups)) * s.kh * s.kw;
  std::vector<float> w = RandomVector(wcount, 40), bias = RandomVector(O, 41);
  const std::vector<float> x = RandomVector(I * H * W, 42);
  const std::vector<float> gamma = RandomVector(O, 43, 0.5f, 2.0f), beta = RandomVector(O, 44),
                           mean = RandomVector(O, 45), var = RandomVector(O, 46, 0.1f, 2.0f);
  const float eps = 1e-5f;
  const float* bp = with_bias ? bias.data() : nullptr;

  // Layer, then BN, in double.
  std::vector<double> want =
      transposed ? ConvTranspose2d(x, I, H, W, w, bp, s) : Conv2d(x, I, H, W, w, bp, s);
  const int64_t plane = static_cast<int64_t>(want.size()) / O;
  for (int64_t o = 0; o < O; ++o)
    for (int64_t p = 0; p < plane; ++p) {
      double& v = want[o * plane + p];
      v = (v - mean[o]) / std::sqrt(static_cast<double>(var[o]) + eps) * gamma[o] + beta[o];
    }

  std::vector<float> folded_bias(O, 123.0f);
  ASSERT_EQ(normkit_fold_batch_norm_into_conv(
                w.data(), O, I, s.groups, s.kh * s.kw,
                transposed ? NORMKIT_CONV_WEIGHT_IOHW_TRANSPOSED : NORMKIT_CONV_WEIGHT_OIHW, bp,
                folded_bias.data(), gamma.data(), beta.data(), mean.data(), var.data(), eps),
            NORMKIT_SUCCESS)
      << normkit_last_error();
  const std::vector<double> got = transposed ? ConvTranspose2d(x, I, H, W, w, folded_bias.data(), s)
                                             : Conv2d(x, I, H, W, w, folded_bias.data(), s);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 * (1.0 + std::fabs(want[i]))) << "output " << i;
  }
}

TEST(FoldBatchNorm, IntoConvolution) {
  for (bool bias : {true, false}) {
    CheckFold({4, 6, 1, 3, 3}, false, bias);
    CheckFold({4, 6, 2, 3, 2}, false, bias);   // grouped
    CheckFold({5, 5, 5, 3, 3}, false, bias);   // depthwise
    CheckFold({3, 10, 1, 1, 1}, false, bias);  // 1x1
  }
}

TEST(FoldBatchNorm, IntoTransposedConvolution) {
  for (bool bias : {true, false}) {
    CheckFold({4, 6, 1, 3, 3}, true, bias);
    CheckFold({4, 6, 2, 2, 3}, true, bias);
    CheckFold({6, 6, 6, 3, 3}, true, bias);
  }
}

TEST(FoldBatchNorm, IntoLinear) {
  const int64_t in = 7, out = 5;
  std::vector<float> w = RandomVector(out * in, 50), bias = RandomVector(out, 51),
                     x = RandomVector(in, 52);
  const std::vector<float> gamma = RandomVector(out, 53, 0.5f, 2.0f), beta = RandomVector(out, 54),
                           mean = RandomVector(out, 55), var = RandomVector(out, 56, 0.1f, 2.0f);
  std::vector<double> want(out);
  for (int64_t o = 0; o < out; ++o) {
    double acc = bias[o];
    for (int64_t i = 0; i < in; ++i) acc += static_cast<double>(w[o * in + i]) * x[i];
    want[o] = (acc - mean[o]) / std::sqrt(static_cast<double>(var[o]) + 1e-3) * gamma[o] + beta[o];
  }
  // In place over the bias.
  ASSERT_EQ(
      normkit_fold_batch_norm_into_linear(w.data(), out, in, bias.data(), bias.data(), gamma.data(),
                                          beta.data(), mean.data(), var.data(), 1e-3f),
      NORMKIT_SUCCESS);
  for (int64_t o = 0; o < out; ++o) {
    double acc = bias[o];
    for (int64_t i = 0; i < in; ++i) acc += static_cast<double>(w[o * in + i]) * x[i];
    EXPECT_NEAR(acc, want[o], 1e-5 * (1 + std::fabs(want[o])));
  }
}

}  // namespace
}  // namespace normkit_test
