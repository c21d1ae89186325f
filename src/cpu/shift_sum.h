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

namespace normkit {
namespace cpu {

using ::normkit::FinishShiftSumProblem;
using ::normkit::PinvMode;
using ::normkit::ShiftMask;
using ::normkit::ShiftSumProblem;

template <class T>
void ShiftSumForward(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* x, T* y);

template <class T>
void ShiftSumAdjoint(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* y, T* x);

// Phi_s = sum_c Phi_c^2 over the positions each channel covers ([H', W'], or
// [B, H', W'] for per-sample masks); without a mask, the count of covering channels.
template <class T>
void ShiftSumNormalizer(const normkit_context& ctx, const ShiftSumProblem<T>& p, T* phi_s);

// Moore-Penrose: x = A^T(y / (s^2 Phi_s)), 0 where no channel covers a position.
// Divide-by-mask (seed 003): x_c = window_c(y / (s * count)) / M_c, 0 where M_c = 0.
// `normalizer` (Phi_s, optional) is used by Moore-Penrose instead of computing it.
template <class T>
void ShiftSumPinv(const normkit_context& ctx, const ShiftSumProblem<T>& p, PinvMode mode,
                  const T* normalizer, const T* y, T* x);

// x += lambda * A^T((y - A x) / (s^2 Phi_s + gamma)), x read once and written once (along
// W; along H the residual is formed first, so x is read twice).
template <class T>
void ShiftSumGapStep(const normkit_context& ctx, const ShiftSumProblem<T>& p, T lambda, T gamma,
                     const T* normalizer, const T* y, T* x);

// xs = the zero-padded [B, C, H', W'] stack of shifted channels (x's layout), and back.
template <class T>
void Shift(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* x, T* xs);
template <class T>
void Unshift(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* xs, T* x);

}  // namespace cpu
}  // namespace normkit

#endif  // NORMKIT_CPU_SHIFT_SUM_H_
