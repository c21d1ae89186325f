// SPDX-License-Identifier: Apache-2.0
#include "cpu/batch_norm.h"

#include <vector>

#include "cpu/affine.h"

namespace normkit {
namespace cpu {

void BatchNormInference(const normkit_context& context, const TensorView& x, const TensorView& y,
                        const fold::BatchNormParams& bn) {
  std::vector<float> scale(static_cast<size_t>(x.channels));
  std::vector<float> shift(static_cast<size_t>(x.channels));
  fold::BatchNormScaleShift(x.channels, bn, scale.data(), shift.data());
  AffineParams params;
  params.scale = scale.data();
  params.shift = shift.data();
  Affine(context, x, y, params);
}

}  // namespace cpu
}  // namespace normkit
