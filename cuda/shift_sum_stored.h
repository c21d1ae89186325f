// SPDX-License-Identifier: Apache-2.0
// Between the two files of the CUDA shift-sum family: the row walks of shift_sum.cu on
// bfloat16 / float16 tensors, for shift_sum_half.cu.
#ifndef NORMKIT_CUDA_SHIFT_SUM_STORED_H_
#define NORMKIT_CUDA_SHIFT_SUM_STORED_H_

#include "cuda/ops.h"

namespace normkit {
namespace cuda {

// The forward, the adjoint, the Moore-Penrose pseudo-inverse and the GAP step of
// channels-first x shifted along W (the row walks), reading and writing x and y as stored: half
// values widened as they are loaded, float sums, the result rounded as it is stored. The same
// arithmetic in the same order as the float32 kernels, so bitwise the float32 call on
// the widened values, rounded. *taken = false, with nothing launched, for other calls.
normkit_status ShiftSumRowsStored(const char* op, const normkit_context* ctx, int32_t device,
                                  const ShiftSumProblem<float>& p, const ShiftSumStoredCall& call,
                                  bool* taken);

}  // namespace cuda
}  // namespace normkit

#endif  // NORMKIT_CUDA_SHIFT_SUM_STORED_H_
