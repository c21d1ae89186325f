// SPDX-License-Identifier: Apache-2.0
// One element of each shift-sum operator, in logical coordinates: x (b, c, h, w), the
// shifted domain (b, r, v) with r, v the row and column of y. The CUDA kernels call
// these per element; they are host-and-device code, so the CPU tests run them over
// whole tensors and compare with the double references in every build with CUDA.
#ifndef NORMKIT_CUDA_SHIFT_SUM_MATH_H_
#define NORMKIT_CUDA_SHIFT_SUM_MATH_H_

#include <cstdint>

#include "core/shift_geometry.h"

namespace normkit {
namespace cuda {

// A row of x (i = h) or of the shifted stack (i = r): channels-first rows are (b, c, i)
// with columns j along W; channels-last rows are (b, i) with columns (j, c) interleaved.
struct PlaneCoord {
  int64_t b, c, i;
};

template <class T>
struct ShiftSumMath {
  ShiftSumProblem<T> p;

  // ---- How the kernels enumerate elements: rows of a 2-D grid, columns along a row ----
  // Shifted-domain rows are (b, r), columns v.
  NORMKIT_HOST_DEVICE void ShiftedRow(int64_t row, int64_t* b, int64_t* r) const {
    *b = row / p.H_out;
    *r = row - *b * p.H_out;
  }
  // Planes of `per_plane` rows (H for x, H' for the stack) and `width` columns (W, W').
  NORMKIT_HOST_DEVICE int64_t PlaneRows(int64_t per_plane) const {
    return p.channels_last ? p.B * per_plane : p.B * p.C * per_plane;
  }
  NORMKIT_HOST_DEVICE int64_t PlaneCols(int64_t width) const {
    return p.channels_last ? width * p.C : width;
  }
  NORMKIT_HOST_DEVICE PlaneCoord PlaneRow(int64_t row, int64_t per_plane) const {
    const int64_t t = row / per_plane, i = row - t * per_plane;
    if (p.channels_last) return {t, 0, i};
    return {t / p.C, t % p.C, i};
  }
  // Channel and position along the row of column `col`.
  NORMKIT_HOST_DEVICE void PlaneCol(const PlaneCoord& at, int64_t col, int64_t* c,
                                    int64_t* j) const {
    if (p.channels_last) {
      *j = col / p.C;
      *c = col - *j * p.C;
    } else {
      *c = at.c;
      *j = col;
    }
  }

  NORMKIT_HOST_DEVICE int64_t XOffset(int64_t b, int64_t c, int64_t h, int64_t w) const {
    return p.channels_last ? ((b * p.H + h) * p.W + w) * p.C + c
                           : ((b * p.C + c) * p.H + h) * p.W + w;
  }
  // xs: [B, C, H', W'] in x's layout.
  NORMKIT_HOST_DEVICE int64_t StackOffset(int64_t b, int64_t c, int64_t r, int64_t v) const {
    return p.channels_last ? ((b * p.H_out + r) * p.W_out + v) * p.C + c
                           : ((b * p.C + c) * p.H_out + r) * p.W_out + v;
  }
  NORMKIT_HOST_DEVICE int64_t YOffset(int64_t b, int64_t r, int64_t v) const {
    return (b * p.H_out + r) * p.W_out + v;
  }
  // Phi_s is [H', W'], or [B, H', W'] for per-sample masks.
  NORMKIT_HOST_DEVICE int64_t NormalizerOffset(int64_t b, int64_t r, int64_t v) const {
    return ((p.PerSampleMask() ? b : 0) * p.H_out + r) * p.W_out + v;
  }
  NORMKIT_HOST_DEVICE int64_t Row(int64_t c, int64_t h) const {
    return p.along_h ? h + p.Offset(c) : h;
  }
  NORMKIT_HOST_DEVICE int64_t Col(int64_t c, int64_t w) const {
    return p.along_h ? w : w + p.Offset(c);
  }
  // The pixel (h, w) of channel c that lands on (r, v); false if none does.
  NORMKIT_HOST_DEVICE bool Source(int64_t c, int64_t r, int64_t v, int64_t* h, int64_t* w) const {
    *h = p.along_h ? r - p.Offset(c) : r;
    *w = p.along_h ? v : v - p.Offset(c);
    return *h >= 0 && *h < p.H && *w >= 0 && *w < p.W;
  }
  // The mask value multiplying x (b, c, h, w), which lands on (r, v).
  NORMKIT_HOST_DEVICE T Mask(int64_t b, int64_t c, int64_t h, int64_t w, int64_t r,
                             int64_t v) const {
    switch (p.mask_kind) {
      case ShiftMask::kNone: return T(1);
      case ShiftMask::kHW: return p.mask[h * p.W + w];
      case ShiftMask::kCHW: return p.mask[(c * p.H + h) * p.W + w];
      case ShiftMask::kBCHW: return p.mask[((b * p.C + c) * p.H + h) * p.W + w];
      case ShiftMask::kPhiCHW: return p.mask[(c * p.H_out + r) * p.W_out + v];
      case ShiftMask::kPhiBCHW: return p.mask[((b * p.C + c) * p.H_out + r) * p.W_out + v];
    }
    return T(1);
  }

  // The number of channels covering (r, v) (seed 003's alpha), in closed form: channel
  // c covers position t of the shift axis when 0 <= t - base - c*S < L.
  NORMKIT_HOST_DEVICE int64_t CoverCount(int64_t r, int64_t v) const {
    const int64_t t = (p.along_h ? r : v) - p.base, L = p.along_h ? p.H : p.W;
    int64_t lo = 0, hi = p.C - 1;
    if (p.step == 0) {
      if (t < 0 || t >= L) return 0;
    } else if (p.step > 0) {  // c*S in [t - L + 1, t]
      lo = Max(lo, CeilDiv(t - L + 1, p.step));
      hi = Min(hi, FloorDiv(t, p.step));
    } else {  // c*|S| in [-t, L - 1 - t]
      lo = Max(lo, CeilDiv(-t, -p.step));
      hi = Min(hi, FloorDiv(L - 1 - t, -p.step));
    }
    return hi >= lo ? hi - lo + 1 : 0;
  }

  // y (b, r, v) = s * sum_c M * x, channels summed in order.
  NORMKIT_HOST_DEVICE T Forward(const T* x, int64_t b, int64_t r, int64_t v) const {
    T acc = T(0);
    for (int64_t c = 0; c < p.C; ++c) {
      int64_t h, w;
      if (Source(c, r, v, &h, &w)) acc += Mask(b, c, h, w, r, v) * x[XOffset(b, c, h, w)];
    }
    return p.scale * acc;
  }
  // Phi_s (b, r, v) = sum of M^2 over the channels covering (r, v); without a mask, their
  // count. Also the count alone (`count_only`), seed 003's alpha.
  NORMKIT_HOST_DEVICE T Normalizer(int64_t b, int64_t r, int64_t v, bool count_only) const {
    if (count_only || p.mask_kind == ShiftMask::kNone) return static_cast<T>(CoverCount(r, v));
    T acc = T(0);
    for (int64_t c = 0; c < p.C; ++c) {
      int64_t h, w;
      if (!Source(c, r, v, &h, &w)) continue;
      const T m = Mask(b, c, h, w, r, v);
      acc += m * m;
    }
    return acc;
  }
  // x (b, c, h, w) = s * M * z at the position it lands on.
  NORMKIT_HOST_DEVICE T Adjoint(const T* z, int64_t b, int64_t c, int64_t h, int64_t w) const {
    const int64_t r = Row(c, h), v = Col(c, w);
    return p.scale * Mask(b, c, h, w, r, v) * z[YOffset(b, r, v)];
  }
  // Moore-Penrose: A^T(y / (s^2 Phi_s)), 0 where Phi_s = 0. `phi_s` may be NULL.
  NORMKIT_HOST_DEVICE T PinvMoorePenrose(const T* y, const T* phi_s, int64_t b, int64_t c,
                                         int64_t h, int64_t w) const {
    const int64_t r = Row(c, h), v = Col(c, w);
    const T n = phi_s != nullptr ? phi_s[NormalizerOffset(b, r, v)] : Normalizer(b, r, v, false);
    if (n == T(0)) return T(0);
    const T z = y[YOffset(b, r, v)] / (p.scale * p.scale * n);
    return p.scale * Mask(b, c, h, w, r, v) * z;
  }
  // Seed 003: window(y / (s * count)) / M, 0 where M = 0.
  NORMKIT_HOST_DEVICE T PinvDivideByMask(const T* y, int64_t b, int64_t c, int64_t h,
                                         int64_t w) const {
    const int64_t r = Row(c, h), v = Col(c, w);
    const T m = Mask(b, c, h, w, r, v);
    if (m == T(0)) return T(0);
    return y[YOffset(b, r, v)] / (p.scale * Normalizer(b, r, v, true)) / m;
  }
  // GAP residual (y - A x) / (Phi_s + gamma), 0 where the denominator is 0.
  NORMKIT_HOST_DEVICE T GapResidual(const T* x, const T* y, const T* phi_s, T gamma, int64_t b,
                                    int64_t r, int64_t v) const {
    const T n = phi_s != nullptr ? phi_s[NormalizerOffset(b, r, v)] : Normalizer(b, r, v, false);
    const T d = n + gamma;
    if (d == T(0)) return T(0);
    return (y[YOffset(b, r, v)] - Forward(x, b, r, v)) / d;
  }

 private:
  NORMKIT_HOST_DEVICE static int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }
  NORMKIT_HOST_DEVICE static int64_t Max(int64_t a, int64_t b) { return a > b ? a : b; }
  // Rounding toward -inf / +inf of a / b for b > 0.
  NORMKIT_HOST_DEVICE static int64_t FloorDiv(int64_t a, int64_t b) {
    const int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
  }
  NORMKIT_HOST_DEVICE static int64_t CeilDiv(int64_t a, int64_t b) {
    const int64_t q = a / b;
    return (a % b != 0 && a > 0) ? q + 1 : q;
  }
};

}  // namespace cuda
}  // namespace normkit

#endif  // NORMKIT_CUDA_SHIFT_SUM_MATH_H_
