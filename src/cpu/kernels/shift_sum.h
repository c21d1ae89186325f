// SPDX-License-Identifier: Apache-2.0
// Row kernels of the shift-sum (CASSI) operators, for float and double. Each works on
// one row of n values; the caller (src/cpu/shift_sum.cc) owns the geometry and threads.
// A null mask `m` means all ones.
#ifndef NORMKIT_CPU_KERNELS_SHIFT_SUM_H_
#define NORMKIT_CPU_KERNELS_SHIFT_SUM_H_

#include <cstdint>

namespace normkit {
namespace kernels {

// y[i] += m[i] * x[i]
template <class T>
void ShiftSumAccumulate(T* y, const T* x, const T* m, int64_t n);

// ShiftSumAccumulate over `rows` rows: row r uses y + r * y_stride, x + r * x_stride and
// m + r * m_stride (one dispatch for a channel's rows of a tile).
template <class T>
void ShiftSumAccumulateRows(T* y, int64_t y_stride, const T* x, int64_t x_stride, const T* m,
                            int64_t m_stride, int64_t rows, int64_t n);

// y[i] = s * m[i] * x[i]. `stream`: non-temporal stores (an output larger than the
// last-level cache); the caller fences them (hwy::FlushStream) before its task ends.
template <class T>
void ShiftSumScaledProduct(T* y, const T* x, const T* m, T s, int64_t n, bool stream);

// y[i] *= s
template <class T>
void ShiftSumScale(T* y, T s, int64_t n);

// p[i] += m[i]^2 (m null: p[i] += 1)
template <class T>
void ShiftSumAddSquares(T* p, const T* m, int64_t n);

// z[i] = y[i] / (a * p[i] + b), or 0 where a * p[i] + b == 0 (no column coverage).
template <class T>
void ShiftSumDivide(T* z, const T* y, const T* p, T a, T b, int64_t n);

// z[i] = r[i] - z[i]  (the residual r - A x, in place in z)
template <class T>
void ShiftSumResidual(T* z, const T* r, int64_t n);

// x[i] = m[i] != 0 ? z[i] / m[i] : 0
template <class T>
void ShiftSumDivideByMask(T* x, const T* z, const T* m, int64_t n);

// x[i] += a * m[i] * r[i]
template <class T>
void ShiftSumAxpy(T* x, const T* r, const T* m, T a, int64_t n);

}  // namespace kernels
}  // namespace normkit

#endif  // NORMKIT_CPU_KERNELS_SHIFT_SUM_H_
