// SPDX-License-Identifier: Apache-2.0
// CPU shift-sum: the CASSI forward operator A (shift channel c by c*S and sum), its
// adjoint, normalizer, pseudo-inverses, the plain shift / unshift, and the fused GAP
// data-consistency step. Parallel over output rows; each row is computed by one task
// in a fixed channel order, so results never depend on the thread count.
#ifndef NORMKIT_CPU_SHIFT_SUM_H_
#define NORMKIT_CPU_SHIFT_SUM_H_

#include <cstdint>

#include "core/context.h"
#include "core/shift_geometry.h"
#include "cpu/kernels/storage.h"

namespace normkit {
namespace cpu {

using ::normkit::FinishShiftSumProblem;
using ::normkit::PinvMode;
using ::normkit::ShiftMask;
using ::normkit::ShiftSumProblem;

namespace shift_sum_rows {
template <class T>
struct ShiftSumScratch;
}
// What a driver allocates (shift_sum_rows.h). A caller that runs a driver more than once
// passes its own, so that only the first, largest, run allocates; null: the driver's own.
using shift_sum_rows::ShiftSumScratch;

template <class T>
void ShiftSumForward(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* x, T* y,
                     ShiftSumScratch<T>* scratch = nullptr);

template <class T>
void ShiftSumAdjoint(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* y, T* x,
                     ShiftSumScratch<T>* scratch = nullptr);

// Phi_s = sum_c Phi_c^2 over the positions each channel covers ([H', W'], or
// [B, H', W'] for per-sample masks); without a mask, the count of covering channels.
template <class T>
void ShiftSumNormalizer(const normkit_context& ctx, const ShiftSumProblem<T>& p, T* phi_s);

// Moore-Penrose: x = A^T(y / (s^2 Phi_s)), 0 where no channel covers a position.
// Divide-by-mask (seed 003): x_c = window_c(y / (s * count)) / M_c, 0 where M_c = 0.
// `normalizer` (Phi_s, optional) is used by Moore-Penrose instead of computing it.
template <class T>
void ShiftSumPinv(const normkit_context& ctx, const ShiftSumProblem<T>& p, PinvMode mode,
                  const T* normalizer, const T* y, T* x, ShiftSumScratch<T>* scratch = nullptr);

// x += lambda * A^T((y - A x) / (s^2 Phi_s + gamma)), x read once and written once (along
// W; along H the residual is formed first, so x is read twice).
template <class T>
void ShiftSumGapStep(const normkit_context& ctx, const ShiftSumProblem<T>& p, T lambda, T gamma,
                     const T* normalizer, const T* y, T* x, ShiftSumScratch<T>* scratch = nullptr);

// xs = the zero-padded [B, C, H', W'] stack of shifted channels (x's layout), and back.
template <class T>
void Shift(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* x, T* xs,
           ShiftSumScratch<T>* scratch = nullptr);
template <class T>
void Unshift(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* xs, T* x,
             ShiftSumScratch<T>* scratch = nullptr);

// bfloat16 / float16 tensors (shift_sum_half.cc): a tensor of the call and how it is
// stored. The operators read and write x as stored (ShiftSum*Stored below), except along
// H, where all but the forward run the float32 operators above on chunks of samples,
// each tensor of the chunk widened into a float scratch and its output rounded back to
// nearest even. Either way a half call gives bitwise the float32 call on the widened
// values, rounded. Masks, normalizers and parameters are float32.
// Every scratch is allocated before any output is written.
struct StoredTensor {
  void* data;
  kernels::Storage storage;
};

using ::normkit::ShiftSumOp;

// The operator `op` of the functions above on stored tensors: `in` is the tensor it
// reads (x of the forward and shift, y of the adjoint, pinv and GAP step, xs of unshift),
// `out` the one it writes (x in place for the GAP step, which also reads it). lambda,
// gamma: the GAP step's; mode: the pinv's; normalizer: theirs (null: computed).
struct ShiftSumStoredCall {
  ShiftSumOp op;
  StoredTensor in, out;
  PinvMode mode = PinvMode::kMoorePenrose;
  float lambda = 1.0f, gamma = 0.0f;
  const float* normalizer = nullptr;
};
void ShiftSumStored(const normkit_context& ctx, const ShiftSumProblem<float>& p,
                    const ShiftSumStoredCall& call);

// The forward operator on stored tensors, x read in its own bytes: the kernels widen it
// as they load it, and each task rounds its float y rows (shift_sum.cc). Bitwise the
// float32 forward on the widened x, rounded. ShiftSumStored's forward.
void ShiftSumForwardStored(const normkit_context& ctx, const ShiftSumProblem<float>& p,
                           StoredTensor x, StoredTensor y);

// The adjoint and the pseudo-inverses on stored tensors along W (a y row a task's x row
// reads: a half y row is widened in L1), x written in its own bytes: the kernels round
// each value as they store it. Bitwise the float32 call on the widened y, rounded.
void ShiftSumAdjointStored(const normkit_context& ctx, const ShiftSumProblem<float>& p,
                           StoredTensor y, StoredTensor x);
void ShiftSumPinvStored(const normkit_context& ctx, const ShiftSumProblem<float>& p, PinvMode mode,
                        const float* normalizer, StoredTensor y, StoredTensor x);
// The shift and unshift on stored tensors (shift_sum_gap.cc): channels-first in either
// direction, channels-last along W; each value widened and rounded as the float copy's.
void ShiftStored(const normkit_context& ctx, const ShiftSumProblem<float>& p, StoredTensor x,
                 StoredTensor xs);
void UnshiftStored(const normkit_context& ctx, const ShiftSumProblem<float>& p, StoredTensor xs,
                   StoredTensor x);

// The GAP step on stored tensors along W, x read and written in its own bytes
// (shift_sum_gap.cc).
void ShiftSumGapStepStored(const normkit_context& ctx, const ShiftSumProblem<float>& p,
                           float lambda, float gamma, const float* normalizer, StoredTensor y,
                           StoredTensor x);

}  // namespace cpu
}  // namespace normkit

#endif  // NORMKIT_CPU_SHIFT_SUM_H_
