// SPDX-License-Identifier: Apache-2.0
#include "cpu/fold.h"

#include <cmath>
#include <vector>

#include "cpu/kernels/batch_norm_fold.h"

namespace normkit {
namespace cpu {
namespace {

// Folding into a layer's weights runs once per model, so it keeps the double
// formula and rounds each weight once.
struct ScaleShiftD {
  double scale;
  double shift;
};

ScaleShiftD ChannelScaleShift(const BatchNormParams& bn, int64_t c) {
  const double gamma = bn.gamma ? bn.gamma[c] : 1.0;
  const double beta = bn.beta ? bn.beta[c] : 0.0;
  const double scale = gamma / std::sqrt(static_cast<double>(bn.var[c]) + bn.eps);
  return {scale, beta - static_cast<double>(bn.mean[c]) * scale};
}

}  // namespace

void BatchNormScaleShift(int64_t channels, const BatchNormParams& bn, float* scale, float* shift) {
  // In float: this fold runs on every batch-norm call (see the kernel).
  kernels::BatchNormFold({bn.gamma, bn.beta, bn.mean, bn.var, bn.eps, scale, shift}, channels);
}

int64_t FirstInvalidVariance(int64_t channels, const float* var) {
  return kernels::FirstInvalidVariance(var, channels);
}

void FoldBatchNormIntoConv(const ConvShape& shape, float* weight, const float* bias,
                           float* folded_bias, const BatchNormParams& bn) {
  const int64_t O = shape.out_channels;
  std::vector<ScaleShiftD> ss(static_cast<size_t>(O));
  for (int64_t o = 0; o < O; ++o) ss[o] = ChannelScaleShift(bn, o);

  const int64_t K = shape.kernel_elems;
  const auto scale_run = [&](int64_t offset, int64_t count, double s) {
    for (int64_t k = 0; k < count; ++k) {
      weight[offset + k] = static_cast<float>(static_cast<double>(weight[offset + k]) * s);
    }
  };
  if (shape.order == ConvWeightOrder::kOIHW) {
    // [O, I/groups, K]: output channel o owns one contiguous run.
    const int64_t run = shape.in_channels / shape.groups * K;
    for (int64_t o = 0; o < O; ++o) scale_run(o * run, run, ss[o].scale);
  } else {
    // [I, O/groups, K]: input channel i feeds output channels of its group g.
    const int64_t in_per_group = shape.in_channels / shape.groups;
    const int64_t out_per_group = O / shape.groups;
    for (int64_t i = 0; i < shape.in_channels; ++i) {
      const int64_t g = i / in_per_group;
      for (int64_t ol = 0; ol < out_per_group; ++ol) {
        scale_run((i * out_per_group + ol) * K, K, ss[g * out_per_group + ol].scale);
      }
    }
  }
  for (int64_t o = 0; o < O; ++o) {
    const double b = bias ? bias[o] : 0.0;
    folded_bias[o] = static_cast<float>(b * ss[o].scale + ss[o].shift);
  }
}

}  // namespace cpu
}  // namespace normkit
