// SPDX-License-Identifier: Apache-2.0
// Batch-norm folding, vectorized: scale = gamma / sqrt(var + eps), shift = beta -
// mean * scale for a run of channels, in float. Every operation is a correctly
// rounded IEEE one (no FMA), so the result is bit for bit the plain scalar float
// formula's, on every SIMD target and on the CUDA path.
#ifndef NORMKIT_CPU_KERNELS_BATCH_NORM_FOLD_H_
#define NORMKIT_CPU_KERNELS_BATCH_NORM_FOLD_H_

#include <cstdint>

namespace normkit {
namespace kernels {

struct BatchNormFoldJob {
  const float* gamma;  // null: 1
  const float* beta;   // null: 0
  const float* mean;
  const float* var;
  float eps;
  float* scale;  // may equal any input array (all of a channel's inputs are read first)
  float* shift;
};

void BatchNormFold(const BatchNormFoldJob& job, int64_t channels);

// Whether FoldsExactly (core/batch_norm_math.h) holds for every channel. Vectorized: it runs on
// every batch-norm call.
bool FoldIsExact(const float* mean, const float* var, float eps, int64_t channels);

// The first c with var[c] not in [0, FLT_MAX] (negative, infinite or NaN), or
// `channels` when there is none. Vectorized: it runs on every batch-norm call.
int64_t FirstInvalidVariance(const float* var, int64_t channels);

}  // namespace kernels
}  // namespace normkit

#endif  // NORMKIT_CPU_KERNELS_BATCH_NORM_FOLD_H_
