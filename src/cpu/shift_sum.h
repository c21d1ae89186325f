// SPDX-License-Identifier: Apache-2.0
// CPU shift-sum: the CASSI forward operator A (shift channel c by c*S and sum), its
// adjoint, normalizer, pseudo-inverses, the plain shift / unshift, and the fused GAP
// data-consistency step. Parallel over output rows; each row is computed by one task
// in a fixed channel order, so results never depend on the thread count.
#ifndef NORMKIT_CPU_SHIFT_SUM_H_
#define NORMKIT_CPU_SHIFT_SUM_H_

#include <cstdint>

#include "core/context.h"

namespace normkit {
namespace cpu {

enum class ShiftMask : int {
  kNone = 0,
  kHW = 1,       // [H, W] before shifting, shared by channels and samples
  kCHW = 2,      // [C, H, W] per channel
  kBCHW = 3,     // [B, C, H, W] per sample and channel
  kPhiCHW = 4,   // [C, H', W'] in the shifted domain
  kPhiBCHW = 5,  // [B, C, H', W']
};

// Shapes and parameters of a validated call. x is [B, C, H, W] (channels-first, or
// channels-last [B, H, W, C]); y is [B, H', W'] (one channel); masks channels-first.
template <class T>
struct ShiftSumProblem {
  int64_t B = 0, C = 0, H = 0, W = 0;
  int64_t step = 0;
  bool along_h = false;
  bool channels_last = false;
  int64_t H_out = 0, W_out = 0;
  int64_t base = 0;  // (C-1) * max(0, -step): makes every channel's offset >= 0
  ShiftMask mask_kind = ShiftMask::kNone;
  const T* mask = nullptr;
  T scale = T(1);

  int64_t Offset(int64_t c) const { return c * step + base; }
  bool PerSampleMask() const {
    return mask_kind == ShiftMask::kBCHW || mask_kind == ShiftMask::kPhiBCHW;
  }
};

// Fills the derived sizes (H_out, W_out, base) from B, C, H, W, step and along_h.
template <class T>
void FinishShiftSumProblem(ShiftSumProblem<T>* p);

template <class T>
void ShiftSumForward(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* x, T* y);

template <class T>
void ShiftSumAdjoint(const normkit_context& ctx, const ShiftSumProblem<T>& p, const T* y, T* x);

// Phi_s = sum_c Phi_c^2 over the positions each channel covers ([H', W'], or
// [B, H', W'] for per-sample masks); without a mask, the count of covering channels.
template <class T>
void ShiftSumNormalizer(const normkit_context& ctx, const ShiftSumProblem<T>& p, T* phi_s);

enum class PinvMode : int { kMoorePenrose = 0, kDivideByMask = 1 };

// Moore-Penrose: x = A^T(y / (s^2 Phi_s)), 0 where no channel covers a position.
// Divide-by-mask (seed 003): x_c = window_c(y / (s * count)) / M_c, 0 where M_c = 0.
// `normalizer` (Phi_s, optional) is used by Moore-Penrose instead of computing it.
template <class T>
void ShiftSumPinv(const normkit_context& ctx, const ShiftSumProblem<T>& p, PinvMode mode,
                  const T* normalizer, const T* y, T* x);

// x += lambda * A^T((y - A x) / (Phi_s + gamma)), x read once and written once (along
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
