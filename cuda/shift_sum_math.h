// SPDX-License-Identifier: Apache-2.0
// One element of each shift-sum operator, in logical coordinates: x (b, c, h, w), the
// shifted domain (b, r, v) with r, v the row and column of y. The CUDA kernels call
// these per element; they are host-and-device code, so the CPU tests run them over
// whole tensors and compare with the double references in every build with CUDA.
#ifndef NORMKIT_CUDA_SHIFT_SUM_MATH_H_
#define NORMKIT_CUDA_SHIFT_SUM_MATH_H_

#include <cstdint>

#include "core/shift_geometry.h"
#include "cuda/channel_cursor.h"
#include "cuda/storage.h"

namespace normkit {
namespace cuda {

// Flat element indices (tensors below 2^31 elements) of channels-first x or y -> their
// coordinates, with 32-bit divisions by constants; the kernels of the row walks below
// give each thread a few consecutive elements this way.
struct FlatDecode {
  U32Divider w, h, c;  // x: W, H, C; y: W', H' (c unused)

  NORMKIT_HOST_DEVICE void X(uint32_t i, int64_t* b, int64_t* c_out, int64_t* h_out,
                             int64_t* w_out) const {
    const uint32_t row = w.Div(i), t = h.Div(row), bb = c.Div(t);
    *w_out = i - row * w.divisor;
    *h_out = row - t * h.divisor;
    *c_out = t - bb * c.divisor;
    *b = bb;
  }
  NORMKIT_HOST_DEVICE void Y(uint32_t i, int64_t* b, int64_t* r, int64_t* v) const {
    const uint32_t row = w.Div(i), bb = h.Div(row);
    *v = i - row * w.divisor;
    *r = row - bb * h.divisor;
    *b = bb;
  }
};

// A row of x (i = h) or of the shifted stack (i = r): channels-first rows are (b, c, i)
// with columns j along W; channels-last rows are (b, i) with columns (j, c) interleaved.
struct PlaneCoord {
  int64_t b, c, i;
};

// The arrays x, y and z (y, or the GAP residual) the functions below read are T, or a
// storage type S they widen (template parameter S); masks and Phi_s are T.
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

  // The channels covering (r, v) (seed 003's alpha counts them), in closed form: channel
  // c covers position t of the shift axis when 0 <= t - base - c*S < L. They are
  // [*lo, *hi], empty when *lo > *hi.
  NORMKIT_HOST_DEVICE void CoverRange(int64_t r, int64_t v, int64_t* lo_out,
                                      int64_t* hi_out) const {
    const int64_t t = (p.along_h ? r : v) - p.base, L = p.along_h ? p.H : p.W;
    int64_t lo = 0, hi = p.C - 1;
    if (p.step == 0) {
      if (t < 0 || t >= L) hi = -1;
    } else if (p.step > 0) {  // c*S in [t - L + 1, t]
      lo = Max(lo, CeilDiv(t - L + 1, p.step));
      hi = Min(hi, FloorDiv(t, p.step));
    } else {  // c*|S| in [-t, L - 1 - t]
      lo = Max(lo, CeilDiv(-t, -p.step));
      hi = Min(hi, FloorDiv(L - 1 - t, -p.step));
    }
    *lo_out = lo;
    *hi_out = hi;
  }
  NORMKIT_HOST_DEVICE int64_t CoverCount(int64_t r, int64_t v) const {
    int64_t lo, hi;
    CoverRange(r, v, &lo, &hi);
    return hi >= lo ? hi - lo + 1 : 0;
  }

  // y (b, r, v) = s * sum_c M * x, channels summed in order.
  template <class S>
  NORMKIT_HOST_DEVICE T Forward(const S* x, int64_t b, int64_t r, int64_t v) const {
    T acc = T(0);
    for (int64_t c = 0; c < p.C; ++c) {
      int64_t h, w;
      if (Source(c, r, v, &h, &w)) {
        acc += Mask(b, c, h, w, r, v) * ValueAt<T>(x, XOffset(b, c, h, w));
      }
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
  template <class S>
  NORMKIT_HOST_DEVICE T Adjoint(const S* z, int64_t b, int64_t c, int64_t h, int64_t w) const {
    const int64_t r = Row(c, h), v = Col(c, w);
    return p.scale * Mask(b, c, h, w, r, v) * ValueAt<T>(z, YOffset(b, r, v));
  }
  // Moore-Penrose: A^T(y / (s^2 Phi_s)), 0 where Phi_s = 0. `phi_s` may be NULL.
  template <class S>
  NORMKIT_HOST_DEVICE T PinvMoorePenrose(const S* y, const T* phi_s, int64_t b, int64_t c,
                                         int64_t h, int64_t w) const {
    const int64_t r = Row(c, h), v = Col(c, w);
    const T n = phi_s != nullptr ? phi_s[NormalizerOffset(b, r, v)] : Normalizer(b, r, v, false);
    if (n == T(0)) return T(0);
    const T z = ValueAt<T>(y, YOffset(b, r, v)) / (p.scale * p.scale * n);
    return p.scale * Mask(b, c, h, w, r, v) * z;
  }
  // Seed 003: window(y / (s * count)) / M, 0 where M = 0.
  template <class S>
  NORMKIT_HOST_DEVICE T PinvDivideByMask(const S* y, int64_t b, int64_t c, int64_t h,
                                         int64_t w) const {
    const int64_t r = Row(c, h), v = Col(c, w);
    const T m = Mask(b, c, h, w, r, v);
    if (m == T(0)) return T(0);
    return ValueAt<T>(y, YOffset(b, r, v)) / (p.scale * Normalizer(b, r, v, true)) / m;
  }
  // GAP residual (y - A x) / (s^2 Phi_s + gamma), 0 where the denominator is 0 (s^2 Phi_s:
  // the diagonal of A A^T, as the pinv divides by); `forward` is (A x) at (b, r, v). The
  // denominator is one FMA, as the CPU's.
  template <class S>
  NORMKIT_HOST_DEVICE T GapResidualOf(const S* y, const T* phi_s, T gamma, int64_t b, int64_t r,
                                      int64_t v, T forward) const {
    const T n = phi_s != nullptr ? phi_s[NormalizerOffset(b, r, v)] : Normalizer(b, r, v, false);
    const T s2 = p.scale * p.scale;
    T d;
    if constexpr (sizeof(T) == sizeof(float)) {
      d = fmaf(s2, n, gamma);
    } else {
      d = fma(s2, n, gamma);
    }
    if (d == T(0)) return T(0);
    return (ValueAt<T>(y, YOffset(b, r, v)) - forward) / d;
  }
  template <class SX, class SY>
  NORMKIT_HOST_DEVICE T GapResidual(const SX* x, const SY* y, const T* phi_s, T gamma, int64_t b,
                                    int64_t r, int64_t v) const {
    return GapResidualOf(y, phi_s, gamma, b, r, v, Forward(x, b, r, v));
  }

  // ---- Row walks for channels-first x shifted along W (the seed's case). Per element,
  // the generic functions above decode coordinates and multiply 64-bit offsets, which
  // costs more than the memory traffic; here a row is decoded once and every array an
  // element touches lies at (row base) + column, or one channel stride further. Same
  // arithmetic in the same order as the generic functions, so the same bits. ----
  NORMKIT_HOST_DEVICE bool RowWalks() const { return !p.channels_last && !p.along_h; }

  // Bases of row (b, c, h) of x: element w of that row reads y (or Phi_s, the mask) at
  // base + w.
  struct XRow {
    int64_t x, y, normalizer, mask;
  };
  NORMKIT_HOST_DEVICE XRow XRowAt(int64_t b, int64_t c, int64_t h) const {
    const int64_t row = (b * p.C + c) * p.H + h;
    const int64_t o = p.Offset(c);
    XRow r;
    r.x = row * p.W;
    r.y = (b * p.H_out + h) * p.W_out + o;
    r.normalizer = ((p.PerSampleMask() ? b : 0) * p.H_out + h) * p.W_out + o;
    switch (p.mask_kind) {
      case ShiftMask::kNone: r.mask = 0; break;
      case ShiftMask::kHW: r.mask = h * p.W; break;
      case ShiftMask::kCHW: r.mask = (c * p.H + h) * p.W; break;
      case ShiftMask::kBCHW: r.mask = row * p.W; break;
      case ShiftMask::kPhiCHW: r.mask = (c * p.H_out + h) * p.W_out + o; break;
      case ShiftMask::kPhiBCHW: r.mask = ((b * p.C + c) * p.H_out + h) * p.W_out + o; break;
    }
    return r;
  }
  NORMKIT_HOST_DEVICE T RowMask(const XRow& r, int64_t w) const {
    return p.mask_kind == ShiftMask::kNone ? T(1) : p.mask[r.mask + w];
  }
  // Adjoint (b, c, h, w) of the row, as Adjoint.
  template <class S>
  NORMKIT_HOST_DEVICE T AdjointRow(const S* z, const XRow& r, int64_t w) const {
    return p.scale * RowMask(r, w) * ValueAt<T>(z, r.y + w);
  }
  // PinvMoorePenrose with a normalizer array.
  template <class S>
  NORMKIT_HOST_DEVICE T PinvMoorePenroseRow(const S* y, const T* phi_s, const XRow& r,
                                            int64_t w) const {
    const T n = phi_s[r.normalizer + w];
    if (n == T(0)) return T(0);
    const T z = ValueAt<T>(y, r.y + w) / (p.scale * p.scale * n);
    return p.scale * RowMask(r, w) * z;
  }

  // Forward (b, r, v): the covering channels are a contiguous range, and from one to the
  // next x moves by a plane less S and the mask by its own channel stride.
  template <class S>
  NORMKIT_HOST_DEVICE T ForwardWalk(const S* x, int64_t b, int64_t r, int64_t v) const {
    int64_t lo, hi;
    CoverRange(r, v, &lo, &hi);
    T acc = T(0);
    if (lo > hi) return p.scale * acc;
    const int64_t w = v - p.Offset(lo);
    int64_t xi = ((b * p.C + lo) * p.H + r) * p.W + w;
    const int64_t x_step = p.H * p.W - p.step;
    if (p.mask_kind == ShiftMask::kNone) {
      NORMKIT_UNROLL(4)
      for (int64_t c = lo; c <= hi; ++c, xi += x_step) acc += T(1) * ValueAt<T>(x, xi);
      return p.scale * acc;
    }
    int64_t mi = 0, m_step = 0;
    switch (p.mask_kind) {
      case ShiftMask::kNone: break;
      case ShiftMask::kHW: mi = r * p.W + w, m_step = -p.step; break;
      case ShiftMask::kCHW: mi = (lo * p.H + r) * p.W + w, m_step = x_step; break;
      case ShiftMask::kBCHW: mi = xi, m_step = x_step; break;
      case ShiftMask::kPhiCHW:
        mi = (lo * p.H_out + r) * p.W_out + v, m_step = p.H_out * p.W_out;
        break;
      case ShiftMask::kPhiBCHW:
        mi = ((b * p.C + lo) * p.H_out + r) * p.W_out + v, m_step = p.H_out * p.W_out;
        break;
    }
    NORMKIT_UNROLL(4)
    for (int64_t c = lo; c <= hi; ++c, xi += x_step, mi += m_step) {
      acc += p.mask[mi] * ValueAt<T>(x, xi);
    }
    return p.scale * acc;
  }
  // ForwardWalk of (b, r, v) from copies of the rows it reads: rows[c * W + w] holds
  // x (b, c, r, w), mask_row[w] the HW mask's row r (NULL without a mask). The same
  // expression in the same order: the same bits.
  template <class S>
  NORMKIT_HOST_DEVICE T ForwardFromRows(const S* rows, const T* mask_row, int64_t r,
                                        int64_t v) const {
    int64_t lo, hi;
    CoverRange(r, v, &lo, &hi);
    T acc = T(0);
    for (int64_t c = lo; c <= hi; ++c) {
      const int64_t w = v - p.Offset(c);
      acc += (mask_row != nullptr ? mask_row[w] : T(1)) * ValueAt<T>(rows, c * p.W + w);
    }
    return p.scale * acc;
  }

  // GapResidual through ForwardWalk.
  template <class SX, class SY>
  NORMKIT_HOST_DEVICE T GapResidualWalk(const SX* x, const SY* y, const T* phi_s, T gamma,
                                        int64_t b, int64_t r, int64_t v) const {
    return GapResidualOf(y, phi_s, gamma, b, r, v, ForwardWalk(x, b, r, v));
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
