// SPDX-License-Identifier: Apache-2.0
// Row kernels of the shift-sum (CASSI) operators, templates on the math type T (float
// and double). Each works on one row of n values; the caller (src/cpu/shift_sum.cc) owns
// the geometry and threads. A null mask `m` means all ones. Every function below calls
// through the dispatched target's ShiftSumKernelTable<T> (defined at the end).
//
// The kernels that read x (the forward's: the tile, skewed and phase sums and the
// transposition to planes) also take x stored as X = bfloat16 / float16 with T = float:
// they widen it as they load it (exactly), so a half x is read in its own bytes, with
// the bits of the float kernel on the widened values. The kernels that write x (the
// adjoint's and the pseudo-inverses': scaled products, planes back to rows, phases back
// to rows, the division by the mask; the GAP step's updates) round the float result to X
// as they store it, to nearest even (ShiftSumStoredXKernelTable).
#ifndef NORMKIT_CPU_KERNELS_SHIFT_SUM_H_
#define NORMKIT_CPU_KERNELS_SHIFT_SUM_H_

#include <cstdint>
#include <type_traits>

#include "hwy/base.h"

namespace normkit {
namespace kernels {

// y[i] += m[i] * x[i]
template <class T>
void ShiftSumAccumulate(T* y, const T* x, const T* m, int64_t n);

// A tile of the forward sum along W: for each channel c in [0, channels) and row r
// in [0, rows), y_row(c, r)[i] += m_row(c, r)[i] * x_row(c, r)[i] for i in [0, n), where
//   y_row(c, r) = y + r * y_row_stride + c * y_channel_step   (the channel's shift),
//   x_row(c, r) = x + r * x_row_stride + c * x_channel_stride,
//   m_row(c, r) = m + r * m_row_stride + c * m_channel_stride (m null: all ones).
// Each y position sums its terms in channel order 0, 1, ... (channels in groups of up to
// eight, each group over all rows before the next; within a group a position's sum is
// carried in a register where all of its channels reach it).
// As channel c's rows are read, prefetch_count elements from x_row(c, 0) +
// prefetch_offset are requested into L2 (0: none), row r its share [r * n, (r + 1) * n)
// of them, a line for each line of x it reads. One dispatch per tile, not one per
// channel: seed 003's forward went from 0.78 to 0.83 of memcpy at 1 thread, 0.88 to
// 0.95 at 2.
template <class T, class X = T>
struct ShiftSumTile {
  T* y;
  int64_t y_row_stride, y_channel_step;
  const X* x;
  int64_t x_row_stride, x_channel_stride;
  const T* m;
  int64_t m_row_stride, m_channel_stride;
  int64_t channels, rows, n;
  int64_t prefetch_offset, prefetch_count;
};

template <class T, class X>
void ShiftSumAccumulateTile(const ShiftSumTile<T, X>& tile);

// Zero padding before and after every plane that ShiftSumSumPlanes reads: at least
// the widest vector of any target.
constexpr int64_t kShiftSumPlanePadBytes = 256;

// One y row of the forward sum along W from channel planes, summed in registers, for
// j in [y_begin, y_end):
//   y[j] = scale * (sum over c = 0, 1, ... of m_c[i] * p_c[i], i = j - (offset0 + c * step),
//                   over the c with 0 <= i < n),
// where p_c = planes + c * plane_stride and m_c = m + c * m_channel_stride (m null: 1;
// then plain adds). Each term is the ShiftSumAccumulate step (one fused multiply-add,
// or one add, from 0) in the same channel order, then the one scaling: the bits of the
// tile kernel and ShiftSumScale. Every p_c and m_c must be readable over [-pad, n + pad), pad =
// kShiftSumPlanePadBytes / sizeof(T), and hold zeros outside [0, n): a vector that a
// channel covers only in part adds m * 0 = 0 in its other lanes, with no masking.
template <class T>
struct ShiftSumPlanesRow {
  T* y;
  int64_t y_begin, y_end;
  const T* planes;
  int64_t plane_stride, n;
  int64_t offset0, step;
  const T* m;
  int64_t m_channel_stride;
  int64_t channels;
  T scale;
};

template <class T>
void ShiftSumSumPlanes(const ShiftSumPlanesRow<T>& row);

// The forward sum along W straight from channels-last rows, no transposition: up to
// two y rows, each from one x row of [W, C] values and an optional mask row of W
// (null: all ones):
//   y[j] = scale * (sum over c = 0, 1, ... of m[t] * x[t * C + c], t = j - (offset0 + c * step),
//                   over the c with 0 <= t < W),
// offset0 = (C - 1) * |step| when step < 0, else 0; y rows hold W + (C - 1) * |step|
// values. The vectors of a pixel's channels form a systolic array: every step adds one
// pixel's channels to it and moves each partial sum one channel up, so a y element
// sums its channels in order 0, 1, ... with ShiftSumAccumulate's steps (the bits of
// the planes and tile kernels). Requires 2 <= C <= ShiftSumSkewMaxChannels<T>() and
// 1 <= |step| <= W. Loads read up to ShiftSumSkewMaxChannels<T>() values past a row's
// last pixel: they must be readable (their values do not matter). As the walk goes,
// it requests prefetch[0, prefetch_count) into L2, spread evenly over its steps (the
// rows it reads next; 0: none).
template <class T, class X = T>
struct ShiftSumSkewRows {
  T* y[2];  // y[1] null: one row
  const X* x[2];
  const T* m[2];
  int64_t W, C, step;
  T scale;
  const X* prefetch;
  int64_t prefetch_count;
};

template <class T, class X>
void ShiftSumSkew(const ShiftSumSkewRows<T, X>& rows);

// The most channels ShiftSumSkew takes on the dispatched target (four vectors).
template <class T>
int64_t ShiftSumSkewMaxChannels();

// The forward sum along W of one channels-last x row ([W, C] values, mask row m of W
// or null) into the phases of its y row, for C past ShiftSumSkew's four vectors. The
// y elements a pixel t reaches, t + offset0 + c * step, are |step| apart: within the
// phase j mod |step| they are consecutive, so each pixel is one contiguous multiply-add
// of its C channels (m[t] * x + y; no mask: y + x) into a phase row. Phase r holds
// y[r + k * |step|] at k (step > 0) or at len - 1 - k (step < 0, so a pixel's channels
// still run forwards); `phases` is |step| rows of `len` = ceil(y row / |step|) values,
// zero on entry. Pixels go in the order that meets channel 0 of every y element first
// (descending for step > 0), so each sums its channels in order 0, 1, ... with
// ShiftSumAccumulate's steps: the bits of the channels-first kernels. Each pixel
// requests the pixel `ahead` places further on in the walk into L2 (past the row's
// last: next_x's pixels, in the order its own walk takes them).
template <class T, class X = T>
struct ShiftSumPhaseRow {
  T* phases;
  int64_t len;
  const X* x;
  const T* m;
  int64_t W, C, step;
  const X* next_x;  // the row walked after this one (null: none)
  int64_t ahead;    // pixels
};

template <class T, class X>
void ShiftSumPhases(const ShiftSumPhaseRow<T, X>& row);

// The adjoint of ShiftSumPhases for one channels-last x row: x[t * C + c] =
// (scale * y[t + offset0 + c * step]) * m[t] (m null: no second product; the roundings
// of ShiftSumScaledProduct), y's row given as its phases in ShiftSumPhases' order, so
// each pixel's C values are one contiguous run. `stream`: non-temporal stores where x's
// alignment allows them (the caller fences). `update` (the GAP step): x[t * C + c] +=
// (scale * m[t]) * y[...] instead, one fused multiply-add (ShiftSumAxpy's steps).
template <class T, class X = T>
struct ShiftSumPhaseAdjointRow {
  const T* phases;
  int64_t len;
  X* x;
  const T* m;
  int64_t W, C, step;
  T scale;
  bool stream;
  bool update;
};

template <class T, class X>
void ShiftSumPhasesAdjoint(const ShiftSumPhaseAdjointRow<T, X>& row);

// The GAP step's update of up to two channels-last rows straight from their residual
// rows, no transposition: x[t * C + c] += (a * m[t]) * r[t + offset0 + c * step] (one
// fused multiply-add: ShiftSumAxpy's steps; m null: a), offset0 as in ShiftSumSkew.
// Each vector of channels carries its residual values from pixel to pixel (|step|
// apart): one lane moves in, the rest move one lane over. Requires
// ShiftSumSkewAxpyMinChannels<T>() <= C <= ShiftSumSkewMaxChannels<T>() and
// 1 <= |step| <= W; reads and writes only x's rows.
template <class T, class X = T>
struct ShiftSumSkewAxpyRows {
  X* x[2];  // x[1] null: one row
  const T* r[2];
  const T* m[2];
  int64_t W, C, step;
  T a;
};

template <class T, class X>
void ShiftSumSkewAxpy(const ShiftSumSkewAxpyRows<T, X>& rows);

// The fewest channels ShiftSumSkewAxpy takes on the dispatched target (one vector).
template <class T>
int64_t ShiftSumSkewAxpyMinChannels();

// y[i] = s * m[i] * x[i]. `stream`: non-temporal stores (an output larger than the
// last-level cache); the caller fences them (hwy::FlushStream) before its task ends.
template <class T, class Y>
void ShiftSumScaledProduct(Y* y, const T* x, const T* m, T s, int64_t n, bool stream);

// Channels-last x rows as channel planes and back: x is [pixels, channels] (one row of
// a [B, H, W, C] tensor), a plane holds one channel's pixels contiguously, so the
// channels-first kernels above run on it. Both walk x in memory order, in tiles
// transposed in registers: ToPlanes in 256-bit tiles (8 x 8 floats, 4 x 4 doubles) where
// the target has them, then 128-bit tiles (4 x 4, 2 x 2); FromPlanes in 128-bit tiles.

// planes[c * plane_stride + w] = x[w * pixel_stride + c] for w < pixels, c < channels
// (pixel_stride > channels: a slice of each pixel's channels). As the walk goes, it
// requests prefetch[0, prefetch_count) into L2, spread evenly over its steps (so the
// requests of a later row keep the DRAM busy while this one is worked on; one burst
// per row is partly dropped); prefetch_count 0: none.
template <class T, class X>
void ShiftSumToPlanes(const X* x, int64_t pixels, int64_t channels, int64_t pixel_stride, T* planes,
                      int64_t plane_stride, const X* prefetch = nullptr,
                      int64_t prefetch_count = 0);

// x[w * channels + c] = (s * a[c * a_stride + w]) * m[c * m_stride + w] (m null: 1; the
// same two roundings as ShiftSumScaledProduct). Strides may be 0 or negative: the
// adjoint reads the planes as windows of one y row, a_stride = the shift step.
// `stream`: non-temporal stores where x's alignment allows them (the caller fences).
template <class T, class X>
void ShiftSumFromPlanes(const T* a, int64_t a_stride, const T* m, int64_t m_stride, T s,
                        int64_t pixels, int64_t channels, X* x, bool stream = false);

// A channels-last x row from one y-shaped row along W with no transposition, for
// |step| <= 2: x[w * channels + c] = (s * a[w + c * step]) * m[w] (m null: no second
// product; the roundings of ShiftSumScaledProduct and ShiftSumFromPlanes), or with
// `divide` a[w + c * step] / m[w] (0 where m[w] = 0: ShiftSumDivideByMask's). A pixel's
// channels are one vector of a (|step| = 2: the even lanes of two; negative steps
// reversed), not a tile of planes transposed. a must be readable over
// [lowest - pad, highest + pad] of the indices above, pad = 2 * kShiftSumPlanePadBytes /
// sizeof(T) (a padded copy of the row). x is written pixel by pixel in whole vectors:
// the lanes past a pixel's channels land on the next pixel's, written after them, and
// the last pixel's on up to kShiftSumPlanePadBytes / sizeof(T) values past x's end,
// which must be writable (a row in cache, then narrowed or copied out).
template <class T>
void ShiftSumWindowsToPixels(const T* a, int64_t step, const T* m, T s, int64_t pixels,
                             int64_t channels, T* x, bool divide = false);

// The GAP step's update of a channels-last row from its planes, ShiftSumAxpy and the
// transposition back in one walk: x[w * channels + c] = p_c[w] + (a * m_c[w]) *
// r[c * r_step + w] (one fused multiply-add, ShiftSumAxpy's steps), with
// p_c = planes + c * plane_stride and m_c = m + c * m_stride (m null: 1).
template <class T>
void ShiftSumFromPlanesAxpy(const T* planes, int64_t plane_stride, const T* r, int64_t r_step,
                            const T* m, int64_t m_stride, T a, int64_t pixels, int64_t channels,
                            T* x);

// y[i] *= s
template <class T>
void ShiftSumScale(T* y, T s, int64_t n);

// p[i] += m[i]^2 (m null: p[i] += 1)
template <class T>
void ShiftSumAddSquares(T* p, const T* m, int64_t n);

// z[i] = y[i] / (a * p[i] + b), or 0 where a * p[i] + b == 0 (no column coverage).
template <class T>
void ShiftSumDivide(T* z, const T* y, const T* p, T a, T b, int64_t n);

// The GAP step's divided residual, in place: r[i] = (y[i] - scale * r[i]) / (a * p[i] + b),
// 0 where a * p[i] + b == 0; y - r after ShiftSumScale (when scale != 1), then
// ShiftSumDivide, in one pass over the row, with their bits.
template <class T>
void ShiftSumGapResidual(T* r, const T* y, const T* p, T scale, T a, T b, int64_t n);

// x[i] = m[i] != 0 ? z[i] / m[i] : 0; stream: non-temporal stores of x (same bits)
template <class T, class X>
void ShiftSumDivideByMask(X* x, const T* z, const T* m, int64_t n, bool stream);

// x[i] += a * m[i] * r[i]
template <class T, class X>
void ShiftSumAxpy(X* x, const T* r, const T* m, T a, int64_t n);

// Rows of the shifted stack or of x, for shift / unshift: `rows` rows of `width` values,
// contiguous from dst; row k is zeros but [at[k], at[k] + len) = src[k][0, len) (src[k]
// null: all zeros), each value widened from XI and stored as XO (a half XO rounded to
// nearest even: the float copy's bits, a signalling NaN quieted). `stream`:
// non-temporal stores (the caller fences).
template <class XI, class XO>
struct ShiftSumWindowRows {
  const XI* const* src;
  const int64_t* at;
  int64_t len;
  int64_t rows;
  int64_t width;
  XO* dst;
  bool stream;
};
template <class XI, class XO>
void ShiftSumPlaceWindows(const ShiftSumWindowRows<XI, XO>& rows);

// The entry points of one stored type on one SIMD target (kernels/shift_sum.cc fills
// it from the kernel templates); the functions above call through it.
template <class T>
struct ShiftSumKernelTable {
  void (*accumulate)(T* y, const T* x, const T* m, int64_t n);
  void (*accumulate_tile)(const ShiftSumTile<T>& tile);
  void (*sum_planes)(const ShiftSumPlanesRow<T>& row);
  void (*skew)(const ShiftSumSkewRows<T>& rows);
  int64_t (*skew_max_channels)();
  void (*phases)(const ShiftSumPhaseRow<T>& row);
  void (*phases_adjoint)(const ShiftSumPhaseAdjointRow<T>& row);
  void (*skew_axpy)(const ShiftSumSkewAxpyRows<T>& rows);
  int64_t (*skew_axpy_min_channels)();
  void (*scaled_product)(T* y, const T* x, const T* m, T s, int64_t n, bool stream);
  void (*to_planes)(const T* x, int64_t pixels, int64_t channels, int64_t pixel_stride, T* planes,
                    int64_t plane_stride, const T* prefetch, int64_t prefetch_count);
  void (*from_planes)(const T* a, int64_t a_stride, const T* m, int64_t m_stride, T s,
                      int64_t pixels, int64_t channels, T* x, bool stream);
  void (*windows_to_pixels)(const T* a, int64_t step, const T* m, T s, int64_t pixels,
                            int64_t channels, T* x, bool divide);
  void (*from_planes_axpy)(const T* planes, int64_t plane_stride, const T* r, int64_t r_step,
                           const T* m, int64_t m_stride, T a, int64_t pixels, int64_t channels,
                           T* x);
  void (*scale)(T* y, T s, int64_t n);
  void (*add_squares)(T* p, const T* m, int64_t n);
  void (*divide)(T* z, const T* y, const T* p, T a, T b, int64_t n);
  void (*gap_residual)(T* r, const T* y, const T* p, T scale, T a, T b, int64_t n);
  void (*divide_by_mask)(T* x, const T* z, const T* m, int64_t n, bool stream);
  void (*axpy)(T* x, const T* r, const T* m, T a, int64_t n);
  void (*place_windows)(const ShiftSumWindowRows<T, T>& rows);
};

// The table of the SIMD target this CPU dispatches to (float and double).
template <class T>
const ShiftSumKernelTable<T>& ShiftSumKernels();

// The kernels above that read x, for x stored as X (hwy::bfloat16_t, hwy::float16_t)
// and float math: the forward operator on a half x reads it in its own bytes.
template <class X>
struct ShiftSumStoredXKernelTable {
  void (*accumulate_tile)(const ShiftSumTile<float, X>& tile);
  void (*skew)(const ShiftSumSkewRows<float, X>& rows);
  void (*phases)(const ShiftSumPhaseRow<float, X>& row);
  void (*to_planes)(const X* x, int64_t pixels, int64_t channels, int64_t pixel_stride,
                    float* planes, int64_t plane_stride, const X* prefetch, int64_t prefetch_count);
  void (*phases_adjoint)(const ShiftSumPhaseAdjointRow<float, X>& row);
  void (*scaled_product)(X* y, const float* x, const float* m, float s, int64_t n, bool stream);
  void (*from_planes)(const float* a, int64_t a_stride, const float* m, int64_t m_stride, float s,
                      int64_t pixels, int64_t channels, X* x, bool stream);
  void (*divide_by_mask)(X* x, const float* z, const float* m, int64_t n, bool stream);
  void (*skew_axpy)(const ShiftSumSkewAxpyRows<float, X>& rows);
  void (*axpy)(X* x, const float* r, const float* m, float a, int64_t n);
  // ShiftSumPlaceWindows from X to X, from X to float, from float to X.
  void (*place_windows)(const ShiftSumWindowRows<X, X>& rows);
  void (*place_windows_widened)(const ShiftSumWindowRows<X, float>& rows);
  void (*place_windows_narrowed)(const ShiftSumWindowRows<float, X>& rows);
};

template <class X>
const ShiftSumStoredXKernelTable<X>& ShiftSumStoredXKernels();

template <class T>
void ShiftSumAccumulate(T* y, const T* x, const T* m, int64_t n) {
  ShiftSumKernels<T>().accumulate(y, x, m, n);
}
template <class T, class X>
void ShiftSumAccumulateTile(const ShiftSumTile<T, X>& tile) {
  if constexpr (std::is_same_v<T, X>) {
    ShiftSumKernels<T>().accumulate_tile(tile);
  } else {
    ShiftSumStoredXKernels<X>().accumulate_tile(tile);
  }
}
template <class T>
void ShiftSumSumPlanes(const ShiftSumPlanesRow<T>& row) {
  ShiftSumKernels<T>().sum_planes(row);
}
template <class T, class X>
void ShiftSumSkew(const ShiftSumSkewRows<T, X>& rows) {
  if constexpr (std::is_same_v<T, X>) {
    ShiftSumKernels<T>().skew(rows);
  } else {
    ShiftSumStoredXKernels<X>().skew(rows);
  }
}
template <class T>
int64_t ShiftSumSkewMaxChannels() {
  return ShiftSumKernels<T>().skew_max_channels();
}
template <class T, class X>
void ShiftSumPhases(const ShiftSumPhaseRow<T, X>& row) {
  if constexpr (std::is_same_v<T, X>) {
    ShiftSumKernels<T>().phases(row);
  } else {
    ShiftSumStoredXKernels<X>().phases(row);
  }
}
template <class T, class X>
void ShiftSumPhasesAdjoint(const ShiftSumPhaseAdjointRow<T, X>& row) {
  if constexpr (std::is_same_v<T, X>) {
    ShiftSumKernels<T>().phases_adjoint(row);
  } else {
    ShiftSumStoredXKernels<X>().phases_adjoint(row);
  }
}
template <class T, class X>
void ShiftSumSkewAxpy(const ShiftSumSkewAxpyRows<T, X>& rows) {
  if constexpr (std::is_same_v<T, X>) {
    ShiftSumKernels<T>().skew_axpy(rows);
  } else {
    ShiftSumStoredXKernels<X>().skew_axpy(rows);
  }
}
template <class T>
int64_t ShiftSumSkewAxpyMinChannels() {
  return ShiftSumKernels<T>().skew_axpy_min_channels();
}
template <class T, class Y>
void ShiftSumScaledProduct(Y* y, const T* x, const T* m, T s, int64_t n, bool stream) {
  if constexpr (std::is_same_v<T, Y>) {
    ShiftSumKernels<T>().scaled_product(y, x, m, s, n, stream);
  } else {
    ShiftSumStoredXKernels<Y>().scaled_product(y, x, m, s, n, stream);
  }
}
template <class T, class X>
void ShiftSumToPlanes(const X* x, int64_t pixels, int64_t channels, int64_t pixel_stride, T* planes,
                      int64_t plane_stride, const X* prefetch, int64_t prefetch_count) {
  if constexpr (std::is_same_v<T, X>) {
    ShiftSumKernels<T>().to_planes(x, pixels, channels, pixel_stride, planes, plane_stride,
                                   prefetch, prefetch_count);
  } else {
    ShiftSumStoredXKernels<X>().to_planes(x, pixels, channels, pixel_stride, planes, plane_stride,
                                          prefetch, prefetch_count);
  }
}
template <class T, class X>
void ShiftSumFromPlanes(const T* a, int64_t a_stride, const T* m, int64_t m_stride, T s,
                        int64_t pixels, int64_t channels, X* x, bool stream) {
  if constexpr (std::is_same_v<T, X>) {
    ShiftSumKernels<T>().from_planes(a, a_stride, m, m_stride, s, pixels, channels, x, stream);
  } else {
    ShiftSumStoredXKernels<X>().from_planes(a, a_stride, m, m_stride, s, pixels, channels, x,
                                            stream);
  }
}
template <class T>
void ShiftSumWindowsToPixels(const T* a, int64_t step, const T* m, T s, int64_t pixels,
                             int64_t channels, T* x, bool divide) {
  ShiftSumKernels<T>().windows_to_pixels(a, step, m, s, pixels, channels, x, divide);
}
template <class T>
void ShiftSumFromPlanesAxpy(const T* planes, int64_t plane_stride, const T* r, int64_t r_step,
                            const T* m, int64_t m_stride, T a, int64_t pixels, int64_t channels,
                            T* x) {
  ShiftSumKernels<T>().from_planes_axpy(planes, plane_stride, r, r_step, m, m_stride, a, pixels,
                                        channels, x);
}
template <class T>
void ShiftSumScale(T* y, T s, int64_t n) {
  ShiftSumKernels<T>().scale(y, s, n);
}
template <class T>
void ShiftSumAddSquares(T* p, const T* m, int64_t n) {
  ShiftSumKernels<T>().add_squares(p, m, n);
}
template <class T>
void ShiftSumDivide(T* z, const T* y, const T* p, T a, T b, int64_t n) {
  ShiftSumKernels<T>().divide(z, y, p, a, b, n);
}
template <class T>
void ShiftSumGapResidual(T* r, const T* y, const T* p, T scale, T a, T b, int64_t n) {
  ShiftSumKernels<T>().gap_residual(r, y, p, scale, a, b, n);
}
template <class T, class X>
void ShiftSumDivideByMask(X* x, const T* z, const T* m, int64_t n, bool stream) {
  if constexpr (std::is_same_v<T, X>) {
    ShiftSumKernels<T>().divide_by_mask(x, z, m, n, stream);
  } else {
    ShiftSumStoredXKernels<X>().divide_by_mask(x, z, m, n, stream);
  }
}
template <class T, class X>
void ShiftSumAxpy(X* x, const T* r, const T* m, T a, int64_t n) {
  if constexpr (std::is_same_v<T, X>) {
    ShiftSumKernels<T>().axpy(x, r, m, a, n);
  } else {
    ShiftSumStoredXKernels<X>().axpy(x, r, m, a, n);
  }
}
template <class XI, class XO>
void ShiftSumPlaceWindows(const ShiftSumWindowRows<XI, XO>& rows) {
  constexpr bool kWide = std::is_same_v<XI, float> || std::is_same_v<XI, double>;
  if constexpr (std::is_same_v<XI, XO> && kWide) {
    ShiftSumKernels<XI>().place_windows(rows);
  } else if constexpr (std::is_same_v<XI, XO>) {
    ShiftSumStoredXKernels<XI>().place_windows(rows);
  } else if constexpr (std::is_same_v<XO, float>) {
    ShiftSumStoredXKernels<XI>().place_windows_widened(rows);
  } else {
    static_assert(std::is_same_v<XI, float>, "half to half of another format");
    ShiftSumStoredXKernels<XO>().place_windows_narrowed(rows);
  }
}

}  // namespace kernels
}  // namespace normkit

#endif  // NORMKIT_CPU_KERNELS_SHIFT_SUM_H_
