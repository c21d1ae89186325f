// SPDX-License-Identifier: Apache-2.0
// Channels-last rows as channel planes and back, transposed in registers a tile at a
// time (the shift-sum family's channels-last paths). Included once per SIMD target.

#if defined(NORMKIT_CPU_KERNELS_CHANNEL_PLANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NORMKIT_CPU_KERNELS_CHANNEL_PLANES_INL_H_
#undef NORMKIT_CPU_KERNELS_CHANNEL_PLANES_INL_H_
#else
#define NORMKIT_CPU_KERNELS_CHANNEL_PLANES_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "cpu/kernels/storage-inl.h"
#include "cpu/kernels/store-inl.h"
#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
#include "hwy/cache_control.h"
#include "hwy/highway.h"

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Tiles of the channels-last <-> planes transposition: K x K values, K the lanes of a
// 128-bit vector, transposed in registers. (8 x 8 tiles of 256-bit vectors take fewer
// shuffles, but measured slower here: seed 003's NHWC adjoint 0.73-0.80 of memcpy
// against 0.92-0.99, more of their loads and stores split cache lines.)
#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE  // fixed 128-bit tiles
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

#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE  // fixed 128-bit tiles
// Channels-last -> planes in 256-bit tiles (8 x 8 floats, 4 x 4 doubles) where the
// target has them: half the stores and fewer shuffles per value than 128-bit tiles.
// The forward sum along W transposes every x value once; with 128-bit tiles the
// transposition took 60% of its time.
#undef NORMKIT_WIDE_TILES  // set per target: this file is compiled once for each
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define NORMKIT_WIDE_TILES 1
template <class T>
using DWide = hn::Full256<T>;

HWY_INLINE void TransposeWide(DWide<float> d, hn::Vec<DWide<float>> (&r)[8]) {
  const hn::Repartition<double, decltype(d)> dd;
  hn::Vec<DWide<float>> t[8], u[8];
  for (int k = 0; k < 4; ++k) {  // 32-bit pairs of rows 2k, 2k+1
    t[2 * k] = hn::InterleaveLower(d, r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = hn::InterleaveUpper(d, r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 2; ++k) {  // 64-bit pairs: columns (q, q+4) of rows 4k..4k+3
    for (int q = 0; q < 2; ++q) {
      const auto a = hn::BitCast(dd, t[4 * k + q]), b = hn::BitCast(dd, t[4 * k + q + 2]);
      u[4 * k + 2 * q] = hn::BitCast(d, hn::InterleaveLower(dd, a, b));
      u[4 * k + 2 * q + 1] = hn::BitCast(d, hn::InterleaveUpper(dd, a, b));
    }
  }
  for (int q = 0; q < 4; ++q) {  // 128-bit halves: column q and q + 4
    r[q] = hn::ConcatLowerLower(d, u[4 + q], u[q]);
    r[q + 4] = hn::ConcatUpperUpper(d, u[4 + q], u[q]);
  }
}
HWY_INLINE void TransposeWide(DWide<double> d, hn::Vec<DWide<double>> (&r)[4]) {
  const auto t0 = hn::InterleaveLower(d, r[0], r[1]), t1 = hn::InterleaveUpper(d, r[0], r[1]);
  const auto t2 = hn::InterleaveLower(d, r[2], r[3]), t3 = hn::InterleaveUpper(d, r[2], r[3]);
  r[0] = hn::ConcatLowerLower(d, t2, t0);
  r[1] = hn::ConcatLowerLower(d, t3, t1);
  r[2] = hn::ConcatUpperUpper(d, t2, t0);
  r[3] = hn::ConcatUpperUpper(d, t3, t1);
}
#endif

// Pixels [w, w + K) of channels [c, channels) to planes, in 128-bit tiles and then one
// value at a time; x stored as X (float, double, or a half type widened as loaded).
template <class T, class X>
HWY_INLINE void ToPlanesNarrow(const X* HWY_RESTRICT xw, int64_t w, int64_t c, int64_t channels,
                               int64_t pixel_stride, T* HWY_RESTRICT planes, int64_t plane_stride) {
  const DTile<T> d;
  constexpr int64_t K = kTileLanes<T>;
  for (; c + K <= channels; c += K) {
    hn::Vec<DTile<T>> r[K];
    for (int64_t k = 0; k < K; ++k) r[k] = LoadF(d, xw + k * pixel_stride + c);
    TransposeTile(d, r);
    for (int64_t k = 0; k < K; ++k) hn::StoreU(r[k], d, planes + (c + k) * plane_stride + w);
  }
  for (; c < channels; ++c) {
    for (int64_t k = 0; k < K; ++k) {
      planes[c * plane_stride + w + k] = ScalarAt<T>(xw + k * pixel_stride + c);
    }
  }
}
#endif

template <class T, class X>
void ToPlanesT(const X* HWY_RESTRICT x, int64_t pixels, int64_t channels, int64_t pixel_stride,
               T* HWY_RESTRICT planes, int64_t plane_stride, const X* prefetch,
               int64_t prefetch_count) {
  int64_t w = 0;
#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE  // fixed 128-bit tiles
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(X));
  constexpr int64_t K = kTileLanes<T>;
#if NORMKIT_WIDE_TILES
  const DWide<T> dw;
  constexpr int64_t KW = static_cast<int64_t>(hn::MaxLanes(DWide<T>()));
#else
  constexpr int64_t KW = K;
#endif
  // The prefetch requests, spread evenly over the walk's steps of KW pixels.
  const int64_t steps = pixels / KW;
  const int64_t per_step =
      steps > 0 ? ((prefetch_count + kLine - 1) / kLine + steps - 1) / steps : 0;
  int64_t requested = 0;
  for (; w + KW <= pixels; w += KW) {
    const X* xw = x + w * pixel_stride;  // KW pixels: KW * pixel_stride contiguous values
    for (int64_t i = 0; i < per_step && requested < prefetch_count; ++i, requested += kLine) {
      __builtin_prefetch(prefetch + requested, 0, 2);  // into L2 (prefetcht1)
    }
    int64_t c = 0;
#if NORMKIT_WIDE_TILES
    for (; c + KW <= channels; c += KW) {
      hn::Vec<DWide<T>> r[KW];
      for (int64_t k = 0; k < KW; ++k) r[k] = LoadF(dw, xw + k * pixel_stride + c);
      TransposeWide(dw, r);
      for (int64_t k = 0; k < KW; ++k) hn::StoreU(r[k], dw, planes + (c + k) * plane_stride + w);
    }
#endif
    for (int64_t k = 0; k < KW; k += K) {
      ToPlanesNarrow(xw + k * pixel_stride, w + k, c, channels, pixel_stride, planes, plane_stride);
    }
  }
  for (; w + K <= pixels; w += K) {
    ToPlanesNarrow(x + w * pixel_stride, w, 0, channels, pixel_stride, planes, plane_stride);
  }
#else
  (void)prefetch;
  (void)prefetch_count;
#endif
  for (; w < pixels; ++w) {
    for (int64_t c = 0; c < channels; ++c) {
      planes[c * plane_stride + w] = ScalarAt<T>(x + w * pixel_stride + c);
    }
  }
}

// Planes back to a channels-last row: x[w * channels + c] = value(d, c, w), lane i of
// the vector being pixel w + i of channel c. 128-bit tiles transposed in registers,
// then one value at a time (1-lane vectors) for the tails.
// x stored as X (T, or a half type: each value rounded as it is stored).
template <bool kStream, class T, class X, class Value>
HWY_INLINE void FromPlanesWalk(int64_t pixels, int64_t channels, X* HWY_RESTRICT x,
                               const Value& value) {
  const hn::CappedTag<T, 1> d1;
  const auto one = [&](int64_t w, int64_t c) { StoreF(d1, value(d1, c, w), x + w * channels + c); };
  int64_t w = 0;
#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE  // fixed 128-bit tiles
  const DTile<T> d;
  constexpr int64_t K = kTileLanes<T>;
  for (; w + K <= pixels; w += K) {
    X* xw = x + w * channels;
    int64_t c = 0;
    for (; c + K <= channels; c += K) {
      hn::Vec<DTile<T>> r[K];
      for (int64_t k = 0; k < K; ++k) r[k] = value(d, c + k, w);
      TransposeTile(d, r);
      for (int64_t k = 0; k < K; ++k) PutF<kStream>(d, r[k], xw + k * channels + c);
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

// x[w * channels + c] = (s * a[c * a_stride + w]) * m[c * m_stride + w]
template <bool kStream, class T, class X>
void FromPlanesT(const T* a, int64_t a_stride, const T* m, int64_t m_stride, T s, int64_t pixels,
                 int64_t channels, X* HWY_RESTRICT x) {
  FromPlanesWalk<kStream, T>(pixels, channels, x, [&](auto d, int64_t c, int64_t w) {
    const auto v = hn::Mul(hn::Set(d, s), hn::LoadU(d, a + c * a_stride + w));
    return m ? hn::Mul(v, hn::LoadU(d, m + c * m_stride + w)) : v;
  });
}

// x[w * channels + c] = p_c[w] + (a * m_c[w]) * r[c * r_step + w] (one fused
// multiply-add: ShiftSumAxpy's steps), p_c = planes + c * plane_stride.
template <class T>
void FromPlanesAxpyT(const T* planes, int64_t plane_stride, const T* r, int64_t r_step, const T* m,
                     int64_t m_stride, T a, int64_t pixels, int64_t channels, T* HWY_RESTRICT x) {
  FromPlanesWalk<false, T>(pixels, channels, x, [&](auto d, int64_t c, int64_t w) {
    const auto t = m ? hn::Mul(hn::Set(d, a), hn::LoadU(d, m + c * m_stride + w)) : hn::Set(d, a);
    return hn::MulAdd(t, hn::LoadU(d, r + c * r_step + w),
                      hn::LoadU(d, planes + c * plane_stride + w));
  });
}

// Streaming stores need every tile row aligned: x on a 16-byte boundary and whole tiles
// of channels (then the rows of a pixel's channels fill whole lines as the walk goes).
template <class T, class X>
void FromPlanesAny(const T* a, int64_t a_stride, const T* m, int64_t m_stride, T s, int64_t pixels,
                   int64_t channels, X* x, bool stream) {
#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE  // fixed 128-bit tiles
  if (stream && reinterpret_cast<uintptr_t>(x) % 16 == 0 && channels % kTileLanes<T> == 0) {
    FromPlanesT<true>(a, a_stride, m, m_stride, s, pixels, channels, x);
    return;
  }
#else
  (void)stream;
#endif
  FromPlanesT<false>(a, a_stride, m, m_stride, s, pixels, channels, x);
}
}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
NORMKIT_AFTER_NAMESPACE();

#endif  // NORMKIT_CPU_KERNELS_CHANNEL_PLANES_INL_H_ toggle
