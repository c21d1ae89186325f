// SPDX-License-Identifier: Apache-2.0
// Batch-norm inference parameters, and when its folded form may be applied; shared by the
// CPU and CUDA paths.
#ifndef NORMKIT_CORE_BATCH_NORM_MATH_H_
#define NORMKIT_CORE_BATCH_NORM_MATH_H_

#include "core/host_device.h"

namespace normkit {

// Running statistics and affine parameters of an inference batch norm, per channel.
struct BatchNormParams {
  const float* gamma;  // null: 1
  const float* beta;   // null: 0
  const float* mean;
  const float* var;
  float eps;
};

// The folded form x * scale + (beta - mean * scale) rounds the shift to a float ulp of
// mean * scale, so its error in units of the output's scale |gamma| + |beta| grows with
// |mean| / std, about 1.5 * 2^-24 * |mean| / std: up to kExactFoldRatio under 6e-6 (plus
// a few ulps of the output); beyond, batch norm subtracts the mean first,
// (x - mean) * scale + beta, which costs a third parameter stream.
constexpr float kExactFoldRatio = 64.0f;

// |mean| <= kExactFoldRatio * sqrt(var + eps), as (mean / ratio)^2 <= var + eps: no square
// root, the ratio a power of two (an exact division), nothing on the right to overflow
// (var + eps <= FLT_MAX), and a mean whose square overflows, or a NaN mean, fails it.
constexpr float kInverseExactFoldRatio = 1.0f / kExactFoldRatio;
NORMKIT_HOST_DEVICE inline bool FoldsExactly(float mean, float var, float eps) {
  const float scaled = mean * kInverseExactFoldRatio;
  return scaled * scaled <= var + eps;
}

}  // namespace normkit

#endif  // NORMKIT_CORE_BATCH_NORM_MATH_H_
