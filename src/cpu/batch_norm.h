// SPDX-License-Identifier: Apache-2.0
// CPU batch-norm inference: fold the statistics, then one affine pass; or, for running
// means far from the spread, subtract the mean first (see kernels::FoldIsExact).
#ifndef NORMKIT_CPU_BATCH_NORM_H_
#define NORMKIT_CPU_BATCH_NORM_H_

#include "core/context.h"
#include "core/tensor.h"
#include "cpu/fold.h"

namespace normkit {
namespace cpu {

// Throws std::bad_alloc before writing anything if scratch fails.
void BatchNormInference(const normkit_context& context, const TensorView& x, const TensorView& y,
                        const BatchNormParams& bn);

}  // namespace cpu
}  // namespace normkit

#endif  // NORMKIT_CPU_BATCH_NORM_H_
