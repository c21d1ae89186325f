// SPDX-License-Identifier: Apache-2.0
// CPU batch norm in training mode: the forward pass (per-channel statistics over the
// batch and the spatial positions, the running averages, the normalized output) and the
// backward pass (the gradients of x, gamma and beta).
#ifndef NORMKIT_CPU_BATCH_NORM_TRAINING_H_
#define NORMKIT_CPU_BATCH_NORM_TRAINING_H_

#include "core/context.h"
#include "core/tensor.h"

namespace normkit {
namespace cpu {

// The arrays of a training-mode batch norm: C floats each. gamma / beta may be null (1 and
// 0); running_mean / running_var both or neither (not updated); save_mean / save_rstd
// each may be null.
struct BatchNormTrainingArgs {
  const float* gamma = nullptr;
  const float* beta = nullptr;
  float eps = 1e-5f;
  float momentum = 0.1f;
  float* running_mean = nullptr;
  float* running_var = nullptr;
  float* save_mean = nullptr;
  float* save_rstd = nullptr;
};

// y = (x - mean[c]) * rstd[c] * gamma[c] + beta[c], mean and the biased variance of channel
// c over N and the spatial positions (at least 2 values), rstd = 1 / sqrt(var + eps);
// running_mean = (1 - momentum) * running_mean + momentum * mean, running_var likewise with
// the unbiased variance var * n / (n - 1). Statistics in double from block moments merged
// in a fixed order: bitwise the same for any thread count. x float32, y may be x.
// Throws std::bad_alloc before writing anything if its scratch fails.
void BatchNormTraining(const normkit_context& context, const TensorView& x, const TensorView& y,
                       const BatchNormTrainingArgs& args);

// The arrays of the backward pass: save_mean / save_rstd (the forward's, C floats),
// gamma (C floats or null: 1), and the parameter gradients (each may be null).
struct BatchNormBackwardArgs {
  const float* save_mean = nullptr;
  const float* save_rstd = nullptr;
  const float* gamma = nullptr;
  float* grad_gamma = nullptr;
  float* grad_beta = nullptr;
};

// The backward pass of BatchNormTraining: with xhat = (x - mean[c]) * rstd[c] and n = N *
// spatial values a channel,
//   grad_beta[c]  = sum(dy),  grad_gamma[c] = sum(dy * xhat),
//   dx = gamma[c] * rstd[c] * (dy - sum(dy) / n - xhat * sum(dy * xhat) / n).
// Sums in double from block sums merged in a fixed order: bitwise the same for any thread
// count. x and dy float32 of one shape and layout; dx (null: not computed) may be x or dy.
// Throws std::bad_alloc before writing anything if its scratch fails.
void BatchNormTrainingBackward(const normkit_context& context, const TensorView& x,
                               const TensorView& dy, const TensorView* dx,
                               const BatchNormBackwardArgs& args);

}  // namespace cpu
}  // namespace normkit

#endif  // NORMKIT_CPU_BATCH_NORM_TRAINING_H_
