// SPDX-License-Identifier: Apache-2.0
#include "cpu/batch_norm.h"

#include "cpu/affine.h"
#include "cpu/kernels/batch_norm_fold.h"

namespace normkit {
namespace cpu {
void BatchNormInference(const normkit_context& context, const TensorView& x, const TensorView& y,
                        const BatchNormParams& bn) {
  // The affine folds the parameters per range, on the threads that read them; running
  // means far from the spread are subtracted first (kernels::FoldIsExact).
  AffineParams params;
  params.fold_from = &bn;
  params.centered = !kernels::FoldIsExact(bn.mean, bn.var, bn.eps, x.channels);
  Affine(context, x, y, params);
}

}  // namespace cpu
}  // namespace normkit
