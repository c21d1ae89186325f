// SPDX-License-Identifier: Apache-2.0
// Shift-sum row kernels, compiled for every SIMD target and dispatched at run time.
#include "cpu/kernels/shift_sum.h"

#include <algorithm>
#include <cstdint>

// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/shift_sum.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep: must precede highway.h
#include "hwy/highway.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls f(d, i) over [0, n): whole vectors, then the tail with a 1-lane tag, so each
// element gets the same instruction sequence wherever the row starts.
template <class T, class F>
HWY_INLINE void ForRow(size_t n, const F& f) {
  const hn::ScalableTag<T> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) f(d, i);
  const hn::CappedTag<T, 1> d1;
  for (; i < n; ++i) f(d1, i);
}

template <class T>
void AccumulateT(T* HWY_RESTRICT y, const T* HWY_RESTRICT x, const T* HWY_RESTRICT m, size_t n) {
  if (m) {
    ForRow<T>(n, [&](auto d, size_t i) {
      hn::StoreU(hn::MulAdd(hn::LoadU(d, m + i), hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d,
                 y + i);
    });
  } else {
    ForRow<T>(n, [&](auto d, size_t i) {
      hn::StoreU(hn::LoadU(d, y + i) + hn::LoadU(d, x + i), d, y + i);
    });
  }
}

template <class T>
void AccumulateTileT(const ShiftSumTile<T>& t) {
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));
  for (int64_t c = 0; c < t.channels; ++c) {
    const T* x = t.x + c * t.x_channel_stride;
    const T* m = t.m ? t.m + c * t.m_channel_stride : nullptr;
    T* y = t.y + c * t.y_channel_step;
    for (int64_t i = 0; i < t.prefetch_count; i += kLine) {
      __builtin_prefetch(x + t.prefetch_offset + i, 0, 2);  // into L2 (prefetcht1)
    }
    for (int64_t r = 0; r < t.rows; ++r) {
      AccumulateT(y + r * t.y_row_stride, x + r * t.x_row_stride,
                  m ? m + r * t.m_row_stride : nullptr, static_cast<size_t>(t.n));
    }
  }
}

template <bool kStream, class D, class V, class T>
HWY_INLINE void Put(D d, V v, T* y) {
  if constexpr (kStream && hn::MaxLanes(D()) > 1) {
    hn::Stream(v, d, y);
  } else {
    hn::StoreU(v, d, y);
  }
}

template <bool kStream, class T>
void ScaledProductT(T* HWY_RESTRICT y, const T* HWY_RESTRICT x, const T* HWY_RESTRICT m, T s,
                    size_t n) {
  const hn::ScalableTag<T> d;
  const hn::CappedTag<T, 1> d1;
  const size_t N = hn::Lanes(d);
  const auto one = [&](auto dt, size_t i) {
    const auto v = hn::Set(dt, s) * hn::LoadU(dt, x + i);
    Put<kStream>(dt, m ? v * hn::LoadU(dt, m + i) : v, y + i);
  };
  size_t i = 0;
  if constexpr (kStream) {  // Stream needs aligned addresses: peel to the next one
    for (; i < n && reinterpret_cast<uintptr_t>(y + i) % (N * sizeof(T)) != 0; ++i) one(d1, i);
  }
  for (; i + N <= n; i += N) one(d, i);
  for (; i < n; ++i) one(d1, i);
}

// Tiles of the channels-last <-> planes transposition: K x K values, K the lanes of a
// 128-bit vector, transposed in registers. (8 x 8 tiles of 256-bit vectors take fewer
// shuffles, but measured slower here: seed 003's NHWC adjoint 0.73-0.80 of memcpy
// against 0.92-0.99, more of their loads and stores split cache lines.)
#if HWY_TARGET != HWY_SCALAR
template <class T>
using DTile = hn::Full128<T>;

// Transposes the K x K tile held in r[0..K) (r[i] = row i).
HWY_INLINE void TransposeTile(DTile<float> d, hn::Vec<DTile<float>> (&r)[4]) {
  const auto t0 = hn::InterleaveLower(d, r[0], r[1]);  // r00 r10 r01 r11
  const auto t1 = hn::InterleaveLower(d, r[2], r[3]);  // r20 r30 r21 r31
  const auto t2 = hn::InterleaveUpper(d, r[0], r[1]);  // r02 r12 r03 r13
  const auto t3 = hn::InterleaveUpper(d, r[2], r[3]);  // r22 r32 r23 r33
  r[0] = hn::ConcatLowerLower(d, t1, t0);
  r[1] = hn::ConcatUpperUpper(d, t1, t0);
  r[2] = hn::ConcatLowerLower(d, t3, t2);
  r[3] = hn::ConcatUpperUpper(d, t3, t2);
}
HWY_INLINE void TransposeTile(DTile<double> d, hn::Vec<DTile<double>> (&r)[2]) {
  const auto t0 = hn::InterleaveLower(d, r[0], r[1]);
  r[1] = hn::InterleaveUpper(d, r[0], r[1]);
  r[0] = t0;
}
template <class T>
constexpr int64_t kTileLanes = static_cast<int64_t>(hn::MaxLanes(DTile<T>()));
#endif

template <class T>
void ToPlanesT(const T* HWY_RESTRICT x, int64_t pixels, int64_t channels, int64_t pixel_stride,
               T* HWY_RESTRICT planes, int64_t plane_stride, int64_t prefetch_ahead) {
  int64_t w = 0;
#if HWY_TARGET != HWY_SCALAR
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));
  const DTile<T> d;
  constexpr int64_t K = kTileLanes<T>;
  for (; w + K <= pixels; w += K) {
    const T* xw = x + w * pixel_stride;  // K pixels: K * pixel_stride contiguous values
    if (prefetch_ahead > 0) {
      for (int64_t i = 0; i < K * pixel_stride; i += kLine)
        __builtin_prefetch(xw + prefetch_ahead + i, 0, 2);
    }
    int64_t c = 0;
    for (; c + K <= channels; c += K) {
      hn::Vec<DTile<T>> r[K];
      for (int64_t k = 0; k < K; ++k) r[k] = hn::LoadU(d, xw + k * pixel_stride + c);
      TransposeTile(d, r);
      for (int64_t k = 0; k < K; ++k) hn::StoreU(r[k], d, planes + (c + k) * plane_stride + w);
    }
    for (; c < channels; ++c) {
      for (int64_t k = 0; k < K; ++k) planes[c * plane_stride + w + k] = xw[k * pixel_stride + c];
    }
  }
#else
  (void)prefetch_ahead;
#endif
  for (; w < pixels; ++w) {
    for (int64_t c = 0; c < channels; ++c) planes[c * plane_stride + w] = x[w * pixel_stride + c];
  }
}

template <bool kStream, class T>
void FromPlanesT(const T* a, int64_t a_stride, const T* m, int64_t m_stride, T s, int64_t pixels,
                 int64_t channels, T* HWY_RESTRICT x) {
  const auto one = [&](int64_t w, int64_t c) {
    const T v = s * a[c * a_stride + w];
    x[w * channels + c] = m ? v * m[c * m_stride + w] : v;
  };
  int64_t w = 0;
#if HWY_TARGET != HWY_SCALAR
  const DTile<T> d;
  constexpr int64_t K = kTileLanes<T>;
  const auto sv = hn::Set(d, s);
  for (; w + K <= pixels; w += K) {
    T* xw = x + w * channels;
    int64_t c = 0;
    for (; c + K <= channels; c += K) {
      hn::Vec<DTile<T>> r[K];
      for (int64_t k = 0; k < K; ++k) {
        r[k] = sv * hn::LoadU(d, a + (c + k) * a_stride + w);
        if (m) r[k] = r[k] * hn::LoadU(d, m + (c + k) * m_stride + w);
      }
      TransposeTile(d, r);
      for (int64_t k = 0; k < K; ++k) Put<kStream>(d, r[k], xw + k * channels + c);
    }
    for (; c < channels; ++c) {
      for (int64_t k = 0; k < K; ++k) one(w + k, c);
    }
  }
#endif
  for (; w < pixels; ++w) {
    for (int64_t c = 0; c < channels; ++c) one(w, c);
  }
}

// Streaming stores need every tile row aligned: x on a 16-byte boundary and whole tiles
// of channels (then the rows of a pixel's channels fill whole lines as the walk goes).
template <class T>
void FromPlanesAny(const T* a, int64_t a_stride, const T* m, int64_t m_stride, T s, int64_t pixels,
                   int64_t channels, T* x, bool stream) {
#if HWY_TARGET != HWY_SCALAR
  if (stream && reinterpret_cast<uintptr_t>(x) % 16 == 0 && channels % kTileLanes<T> == 0) {
    FromPlanesT<true>(a, a_stride, m, m_stride, s, pixels, channels, x);
    return;
  }
#else
  (void)stream;
#endif
  FromPlanesT<false>(a, a_stride, m, m_stride, s, pixels, channels, x);
}

template <class T>
void ScaleT(T* HWY_RESTRICT y, T s, size_t n) {
  ForRow<T>(n,
            [&](auto d, size_t i) { hn::StoreU(hn::Set(d, s) * hn::LoadU(d, y + i), d, y + i); });
}

template <class T>
void AddSquaresT(T* HWY_RESTRICT p, const T* HWY_RESTRICT m, size_t n) {
  if (m) {
    ForRow<T>(n, [&](auto d, size_t i) {
      const auto v = hn::LoadU(d, m + i);
      hn::StoreU(hn::MulAdd(v, v, hn::LoadU(d, p + i)), d, p + i);
    });
  } else {
    ForRow<T>(
        n, [&](auto d, size_t i) { hn::StoreU(hn::LoadU(d, p + i) + hn::Set(d, T(1)), d, p + i); });
  }
}

template <class T>
void DivideT(T* z, const T* y, const T* HWY_RESTRICT p, T a, T b, size_t n) {
  ForRow<T>(n, [&](auto d, size_t i) {
    const auto den = hn::MulAdd(hn::Set(d, a), hn::LoadU(d, p + i), hn::Set(d, b));
    const auto nonzero = hn::Ne(den, hn::Zero(d));
    // Divide by 1 where the denominator is 0, then zero those lanes: never 0/0.
    const auto q = hn::LoadU(d, y + i) / hn::IfThenElse(nonzero, den, hn::Set(d, T(1)));
    hn::StoreU(hn::IfThenElseZero(nonzero, q), d, z + i);
  });
}

template <class T>
void ResidualT(T* z, const T* HWY_RESTRICT r, size_t n) {
  ForRow<T>(n, [&](auto d, size_t i) {
    hn::StoreU(hn::LoadU(d, r + i) - hn::LoadU(d, z + i), d, z + i);
  });
}

template <class T>
void DivideByMaskT(T* HWY_RESTRICT x, const T* HWY_RESTRICT z, const T* HWY_RESTRICT m, size_t n) {
  ForRow<T>(n, [&](auto d, size_t i) {
    const auto mv = hn::LoadU(d, m + i);
    const auto nonzero = hn::Ne(mv, hn::Zero(d));
    const auto q = hn::LoadU(d, z + i) / hn::IfThenElse(nonzero, mv, hn::Set(d, T(1)));
    hn::StoreU(hn::IfThenElseZero(nonzero, q), d, x + i);
  });
}

template <class T>
void AxpyT(T* HWY_RESTRICT x, const T* HWY_RESTRICT r, const T* HWY_RESTRICT m, T a, size_t n) {
  ForRow<T>(n, [&](auto d, size_t i) {
    const auto t = m ? hn::Set(d, a) * hn::LoadU(d, m + i) : hn::Set(d, a);
    hn::StoreU(hn::MulAdd(t, hn::LoadU(d, r + i), hn::LoadU(d, x + i)), d, x + i);
  });
}

// Exported entry points, one per (kernel, type): HWY_EXPORT takes plain functions.
void AccumulateF(float* y, const float* x, const float* m, int64_t n) {
  AccumulateT(y, x, m, n);
}
void AccumulateD(double* y, const double* x, const double* m, int64_t n) {
  AccumulateT(y, x, m, n);
}
void AccumulateTileF(const ShiftSumTile<float>& tile) {
  AccumulateTileT(tile);
}
void AccumulateTileD(const ShiftSumTile<double>& tile) {
  AccumulateTileT(tile);
}
void ScaledProductF(float* y, const float* x, const float* m, float s, int64_t n, bool stream) {
  stream ? ScaledProductT<true>(y, x, m, s, n) : ScaledProductT<false>(y, x, m, s, n);
}
void ScaledProductD(double* y, const double* x, const double* m, double s, int64_t n, bool stream) {
  stream ? ScaledProductT<true>(y, x, m, s, n) : ScaledProductT<false>(y, x, m, s, n);
}
void ToPlanesF(const float* x, int64_t pixels, int64_t channels, int64_t pixel_stride,
               float* planes, int64_t plane_stride, int64_t prefetch_ahead) {
  ToPlanesT(x, pixels, channels, pixel_stride, planes, plane_stride, prefetch_ahead);
}
void ToPlanesD(const double* x, int64_t pixels, int64_t channels, int64_t pixel_stride,
               double* planes, int64_t plane_stride, int64_t prefetch_ahead) {
  ToPlanesT(x, pixels, channels, pixel_stride, planes, plane_stride, prefetch_ahead);
}
void FromPlanesF(const float* a, int64_t a_stride, const float* m, int64_t m_stride, float s,
                 int64_t pixels, int64_t channels, float* x, bool stream) {
  FromPlanesAny(a, a_stride, m, m_stride, s, pixels, channels, x, stream);
}
void FromPlanesD(const double* a, int64_t a_stride, const double* m, int64_t m_stride, double s,
                 int64_t pixels, int64_t channels, double* x, bool stream) {
  FromPlanesAny(a, a_stride, m, m_stride, s, pixels, channels, x, stream);
}
void ScaleF(float* y, float s, int64_t n) {
  ScaleT(y, s, n);
}
void ScaleD(double* y, double s, int64_t n) {
  ScaleT(y, s, n);
}
void AddSquaresF(float* p, const float* m, int64_t n) {
  AddSquaresT(p, m, n);
}
void AddSquaresD(double* p, const double* m, int64_t n) {
  AddSquaresT(p, m, n);
}
void DivideF(float* z, const float* y, const float* p, float a, float b, int64_t n) {
  DivideT(z, y, p, a, b, n);
}
void DivideD(double* z, const double* y, const double* p, double a, double b, int64_t n) {
  DivideT(z, y, p, a, b, n);
}
void ResidualF(float* z, const float* r, int64_t n) {
  ResidualT(z, r, n);
}
void ResidualD(double* z, const double* r, int64_t n) {
  ResidualT(z, r, n);
}
void DivideByMaskF(float* x, const float* z, const float* m, int64_t n) {
  DivideByMaskT(x, z, m, n);
}
void DivideByMaskD(double* x, const double* z, const double* m, int64_t n) {
  DivideByMaskT(x, z, m, n);
}
void AxpyF(float* x, const float* r, const float* m, float a, int64_t n) {
  AxpyT(x, r, m, a, n);
}
void AxpyD(double* x, const double* r, const double* m, double a, int64_t n) {
  AxpyT(x, r, m, a, n);
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace normkit {
namespace kernels {

HWY_EXPORT(AccumulateF);
HWY_EXPORT(AccumulateD);
HWY_EXPORT(AccumulateTileF);
HWY_EXPORT(AccumulateTileD);
HWY_EXPORT(ScaledProductF);
HWY_EXPORT(ScaledProductD);
HWY_EXPORT(ToPlanesF);
HWY_EXPORT(ToPlanesD);
HWY_EXPORT(FromPlanesF);
HWY_EXPORT(FromPlanesD);
HWY_EXPORT(ScaleF);
HWY_EXPORT(ScaleD);
HWY_EXPORT(AddSquaresF);
HWY_EXPORT(AddSquaresD);
HWY_EXPORT(DivideF);
HWY_EXPORT(DivideD);
HWY_EXPORT(ResidualF);
HWY_EXPORT(ResidualD);
HWY_EXPORT(DivideByMaskF);
HWY_EXPORT(DivideByMaskD);
HWY_EXPORT(AxpyF);
HWY_EXPORT(AxpyD);

template <>
void ShiftSumAccumulate<float>(float* y, const float* x, const float* m, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AccumulateF)(y, x, m, n);
}
template <>
void ShiftSumAccumulate<double>(double* y, const double* x, const double* m, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AccumulateD)(y, x, m, n);
}
template <>
void ShiftSumAccumulateTile<float>(const ShiftSumTile<float>& tile) {
  HWY_DYNAMIC_DISPATCH(AccumulateTileF)(tile);
}
template <>
void ShiftSumAccumulateTile<double>(const ShiftSumTile<double>& tile) {
  HWY_DYNAMIC_DISPATCH(AccumulateTileD)(tile);
}
template <>
void ShiftSumScaledProduct<float>(float* y, const float* x, const float* m, float s, int64_t n,
                                  bool stream) {
  HWY_DYNAMIC_DISPATCH(ScaledProductF)(y, x, m, s, n, stream);
}
template <>
void ShiftSumScaledProduct<double>(double* y, const double* x, const double* m, double s, int64_t n,
                                   bool stream) {
  HWY_DYNAMIC_DISPATCH(ScaledProductD)(y, x, m, s, n, stream);
}
template <>
void ShiftSumToPlanes<float>(const float* x, int64_t pixels, int64_t channels, int64_t pixel_stride,
                             float* planes, int64_t plane_stride, int64_t prefetch_ahead) {
  HWY_DYNAMIC_DISPATCH(ToPlanesF)
  (x, pixels, channels, pixel_stride, planes, plane_stride, prefetch_ahead);
}
template <>
void ShiftSumToPlanes<double>(const double* x, int64_t pixels, int64_t channels,
                              int64_t pixel_stride, double* planes, int64_t plane_stride,
                              int64_t prefetch_ahead) {
  HWY_DYNAMIC_DISPATCH(ToPlanesD)
  (x, pixels, channels, pixel_stride, planes, plane_stride, prefetch_ahead);
}
template <>
void ShiftSumFromPlanes<float>(const float* a, int64_t a_stride, const float* m, int64_t m_stride,
                               float s, int64_t pixels, int64_t channels, float* x, bool stream) {
  HWY_DYNAMIC_DISPATCH(FromPlanesF)(a, a_stride, m, m_stride, s, pixels, channels, x, stream);
}
template <>
void ShiftSumFromPlanes<double>(const double* a, int64_t a_stride, const double* m,
                                int64_t m_stride, double s, int64_t pixels, int64_t channels,
                                double* x, bool stream) {
  HWY_DYNAMIC_DISPATCH(FromPlanesD)(a, a_stride, m, m_stride, s, pixels, channels, x, stream);
}
template <>
void ShiftSumScale<float>(float* y, float s, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ScaleF)(y, s, n);
}
template <>
void ShiftSumScale<double>(double* y, double s, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ScaleD)(y, s, n);
}
template <>
void ShiftSumAddSquares<float>(float* p, const float* m, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AddSquaresF)(p, m, n);
}
template <>
void ShiftSumAddSquares<double>(double* p, const double* m, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AddSquaresD)(p, m, n);
}
template <>
void ShiftSumDivide<float>(float* z, const float* y, const float* p, float a, float b, int64_t n) {
  HWY_DYNAMIC_DISPATCH(DivideF)(z, y, p, a, b, n);
}
template <>
void ShiftSumDivide<double>(double* z, const double* y, const double* p, double a, double b,
                            int64_t n) {
  HWY_DYNAMIC_DISPATCH(DivideD)(z, y, p, a, b, n);
}
template <>
void ShiftSumResidual<float>(float* z, const float* r, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ResidualF)(z, r, n);
}
template <>
void ShiftSumResidual<double>(double* z, const double* r, int64_t n) {
  HWY_DYNAMIC_DISPATCH(ResidualD)(z, r, n);
}
template <>
void ShiftSumDivideByMask<float>(float* x, const float* z, const float* m, int64_t n) {
  HWY_DYNAMIC_DISPATCH(DivideByMaskF)(x, z, m, n);
}
template <>
void ShiftSumDivideByMask<double>(double* x, const double* z, const double* m, int64_t n) {
  HWY_DYNAMIC_DISPATCH(DivideByMaskD)(x, z, m, n);
}
template <>
void ShiftSumAxpy<float>(float* x, const float* r, const float* m, float a, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyF)(x, r, m, a, n);
}
template <>
void ShiftSumAxpy<double>(double* x, const double* r, const double* m, double a, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyD)(x, r, m, a, n);
}

}  // namespace kernels
}  // namespace normkit
#endif  // HWY_ONCE
