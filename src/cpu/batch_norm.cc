// SPDX-License-Identifier: Apache-2.0
#include "cpu/batch_norm.h"

#include "cpu/affine.h"

namespace normkit {
namespace cpu {

void BatchNormInference(const normkit_context& context, const TensorView& x, const TensorView& y,
                        const fold::BatchNormParams& bn) {
  // The affine folds the parameters per range, on the threads that read them.
  AffineParams params;
  params.fold_from = &bn;
  Affine(context, x, y, params);
}

}  // namespace cpu
}  // namespace normkit
