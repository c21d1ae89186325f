// SPDX-License-Identifier: Apache-2.0
// The geometry of a validated shift-sum call, shared by the CPU and CUDA paths: x is
// [B, C, H, W] (channels-first, or channels-last [B, H, W, C]), y is [B, H', W'] (one
// channel), masks are channels-first. Plain data: it is passed to CUDA kernels by value.
#ifndef NORMKIT_CORE_SHIFT_GEOMETRY_H_
#define NORMKIT_CORE_SHIFT_GEOMETRY_H_

#include <cstdint>

#include "core/host_device.h"

namespace normkit {

enum class ShiftMask : int {
  kNone = 0,
  kHW = 1,       // [H, W] before shifting, shared by channels and samples
  kCHW = 2,      // [C, H, W] per channel
  kBCHW = 3,     // [B, C, H, W] per sample and channel
  kPhiCHW = 4,   // [C, H', W'] in the shifted domain
  kPhiBCHW = 5,  // [B, C, H', W']
};

enum class PinvMode : int { kMoorePenrose = 0, kDivideByMask = 1 };

// The operators of the family, as the half-storage paths name them.
enum class ShiftSumOp { kForward, kAdjoint, kPinv, kGapStep, kShift, kUnshift };

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

  NORMKIT_HOST_DEVICE int64_t Offset(int64_t c) const { return c * step + base; }
  NORMKIT_HOST_DEVICE bool PerSampleMask() const {
    return mask_kind == ShiftMask::kBCHW || mask_kind == ShiftMask::kPhiBCHW;
  }
  NORMKIT_HOST_DEVICE bool PhiMask() const {
    return mask_kind == ShiftMask::kPhiCHW || mask_kind == ShiftMask::kPhiBCHW;
  }
};

// Samples [b0, b0 + samples) of p: per-sample masks start at sample b0.
template <class T>
ShiftSumProblem<T> SampleRange(const ShiftSumProblem<T>& p, int64_t b0, int64_t samples) {
  ShiftSumProblem<T> sub = p;
  sub.B = samples;
  if (p.mask_kind == ShiftMask::kBCHW) sub.mask += b0 * p.C * p.H * p.W;
  if (p.mask_kind == ShiftMask::kPhiBCHW) sub.mask += b0 * p.C * p.H_out * p.W_out;
  return sub;
}

// Elements per sample of the tensor `op` reads (first) and of the one it writes.
template <class T>
void SampleElems(const ShiftSumProblem<T>& p, ShiftSumOp op, int64_t* in, int64_t* out) {
  const int64_t x_elems = p.C * p.H * p.W, y_elems = p.H_out * p.W_out;
  const int64_t xs_elems = p.C * y_elems;
  switch (op) {
    case ShiftSumOp::kForward: *in = x_elems, *out = y_elems; return;
    case ShiftSumOp::kShift: *in = x_elems, *out = xs_elems; return;
    case ShiftSumOp::kUnshift: *in = xs_elems, *out = x_elems; return;
    case ShiftSumOp::kAdjoint:
    case ShiftSumOp::kPinv:
    case ShiftSumOp::kGapStep: *in = y_elems, *out = x_elems; return;
  }
}

// Whether the operator uses Phi_s (computed when not given).
inline bool UsesNormalizer(ShiftSumOp op, PinvMode mode) {
  return (op == ShiftSumOp::kPinv && mode == PinvMode::kMoorePenrose) || op == ShiftSumOp::kGapStep;
}

// Fills the derived sizes (H_out, W_out, base) from B, C, H, W, step and along_h.
template <class T>
void FinishShiftSumProblem(ShiftSumProblem<T>* p) {
  // One channel never moves: any step is 0, and no step arithmetic (the Phi mask's
  // channel stride adds it to a plane size) can overflow on a huge one.
  if (p->C == 1) p->step = 0;
  const int64_t spread = (p->C - 1) * (p->step < 0 ? -p->step : p->step);
  p->base = p->step < 0 ? spread : 0;
  p->H_out = p->along_h ? p->H + spread : p->H;
  p->W_out = p->along_h ? p->W : p->W + spread;
}

}  // namespace normkit

#endif  // NORMKIT_CORE_SHIFT_GEOMETRY_H_
