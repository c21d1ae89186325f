// SPDX-License-Identifier: Apache-2.0
// CPU batch norm in training mode (the forward pass): per-channel statistics over the
// batch and the spatial positions, the running averages, and the normalized output.
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

}  // namespace cpu
}  // namespace normkit

#endif  // NORMKIT_CPU_BATCH_NORM_TRAINING_H_
