// SPDX-License-Identifier: Apache-2.0
// Folding inference batch norm into a scale / shift, and into the layer before it.
// Arguments are validated by the caller (src/api); these functions only compute.
#ifndef NORMKIT_CPU_FOLD_H_
#define NORMKIT_CPU_FOLD_H_

#include <cstdint>

#include "core/batch_norm_math.h"

namespace normkit {
namespace cpu {

// scale = gamma / sqrt(var + eps), shift = beta - mean * scale, in float, each
// operation correctly rounded (no FMA): the same bits on every target and on CUDA.
// Every input of channel c is read before channel c's outputs are written, so the
// outputs may alias gamma / beta element for element.
void BatchNormScaleShift(int64_t channels, const BatchNormParams& bn, float* scale, float* shift);

// The first channel whose running variance is negative, infinite or NaN, or
// `channels` when all are valid.
int64_t FirstInvalidVariance(int64_t channels, const float* var);

enum class ConvWeightOrder { kOIHW, kIOHWTransposed };

struct ConvShape {
  int64_t out_channels;
  int64_t in_channels;
  int64_t groups;
  int64_t kernel_elems;
  ConvWeightOrder order;
};

// weight[o-slice] *= scale[o]; folded_bias[o] = bias[o] * scale[o] + shift[o]
// (bias null: 0). folded_bias may equal bias.
void FoldBatchNormIntoConv(const ConvShape& shape, float* weight, const float* bias,
                           float* folded_bias, const BatchNormParams& bn);

}  // namespace cpu
}  // namespace normkit

#endif  // NORMKIT_CPU_FOLD_H_
