// SPDX-License-Identifier: Apache-2.0
// CPU batch norm in training mode: the forward pass (per-channel statistics over the
// batch and the spatial positions, the running averages, the normalized output) and the
// backward pass (the gradients of x, gamma and beta).
#ifndef NORMKIT_CPU_BATCH_NORM_TRAINING_H_
#define NORMKIT_CPU_BATCH_NORM_TRAINING_H_

#include <cstdint>

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

// Channels-first planes of a few values (128x1024x16, rank-2 [N, C]) are walked in channel
// blocks by both passes (kernels::ShortPlaneBlockMoments / ShortPlaneBlockGradSums): blocks
// of `width` floats of each sample (whole planes and whole vectors of the SIMD target),
// walked down chunks of samples. From the shape alone, so the bits are; width 0: the shape
// does not take this path.
struct ChannelBlocks {
  int64_t width = 0;           // floats of a block's sample
  int64_t block_channels = 0;  // width / S
  int64_t blocks = 0;          // over C, the last one maybe narrower
  int64_t chunk_rows = 0;      // samples a chunk: about 64 KiB of a block
  int64_t chunks = 0;

  // Task t (of chunks * blocks, chunk-major): chunk `chunk`'s samples [n0, n0 + rows) of
  // channels [c0, c0 + channels), the first at element `offset` of x.
  struct Task {
    int64_t chunk, c0, channels, n0, rows, offset;
  };
  Task At(int64_t t, int64_t N, int64_t C, int64_t S) const;
};
ChannelBlocks PlanChannelBlocks(int64_t N, int64_t C, int64_t S);

}  // namespace cpu
}  // namespace normkit

#endif  // NORMKIT_CPU_BATCH_NORM_TRAINING_H_
