// SPDX-License-Identifier: Apache-2.0
// The normalization's output pass: y = act((x - mean) * scale + offset) over
// channels-first planes, channels-last rows and layer / RMS norm rows, with plain, aligned
// or streaming stores.
// Included once per SIMD target (the caller's foreach_target), in the style of
// hwy/contrib: the building blocks of the kernels, not exported on their own.

#if defined(NORMKIT_CPU_KERNELS_NORM_APPLY_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NORMKIT_CPU_KERNELS_NORM_APPLY_INL_H_
#undef NORMKIT_CPU_KERNELS_NORM_APPLY_INL_H_
#else
#define NORMKIT_CPU_KERNELS_NORM_APPLY_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cpu/kernels/activation-inl.h"
#include "cpu/kernels/bf16_hardware.h"
#include "cpu/kernels/column_moments-inl.h"  // kRowStreams
#include "cpu/kernels/float_tags-inl.h"
#include "cpu/kernels/moments-inl.h"
#include "cpu/kernels/storage-inl.h"
#include "cpu/kernels/store-inl.h"
#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
#include "cpu/kernels/vec_slots-inl.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// y[i] = f(d, i, x[i..]) for i < n: whole vectors, a 1-lane tag for spans shorter than a
// vector (and the streaming peel), and an overlapping last vector whose lanes already
// written are kept (right in place as well). Never touches memory outside [0, n). x and y
// are float or half storage (storage-inl.h); f sees float vectors.
template <bool kStream, class TX, class TY, class F>
HWY_INLINE void MapSpan(const TX* x, TY* y, size_t n, const F& f) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const hn::CappedTag<float, 1> d1;
  size_t i = 0;
  if (n < N) {
    for (; i < n; ++i) StoreF(d1, f(d1, i, LoadF(d1, x + i)), y + i);
    return;
  }
  if constexpr (kStream) {
    for (; i < n && !IsVectorAligned(d, y + i); ++i) StoreF(d1, f(d1, i, LoadF(d1, x + i)), y + i);
    for (; i + N <= n; i += N) PutF<true>(d, f(d, i, LoadF(d, x + i)), y + i);
  } else {
    for (; i + N <= n; i += N) StoreF(d, f(d, i, LoadF(d, x + i)), y + i);
  }
  if constexpr (kStream) {
    // Streamed lines must not be read back (that waits for them to reach memory):
    // the tail goes one element at a time.
    for (; i < n; ++i) StoreF(d1, f(d1, i, LoadF(d1, x + i)), y + i);
  }
  if (i < n) {
    const size_t t = n - N;
    StoreFreshLanes(d, f(d, t, LoadF(d, x + t)), i - t, y + t);
  }
}

// act((x - mean) * scale + shift) for one vector.
template <Activation kAct, typename TX>
HWY_INLINE hn::Vec<DF> NormOf(const TX* HWY_RESTRICT x, hn::Vec<DF> mean, hn::Vec<DF> scale,
                              hn::Vec<DF> shift) {
  const DF d;
  return Activate<kAct>(d, hn::MulAdd(hn::Sub(LoadF(d, x), mean), scale, shift));
}

// y[i] = act((x[i] - mean[i]) * scale[i] + shift[i]) for i < n (MapSpan: NormOf's
// operations, so the same bits as the vector walks).
template <Activation kAct, bool kStream, typename TX, typename TY>
HWY_INLINE void NormSpan(const TX* x, TY* y, size_t n, const float* mean, const float* scale,
                         const float* shift) {
  MapSpan<kStream>(x, y, n, [&](auto d, size_t c, auto v) {
    const auto dev = hn::Sub(v, hn::LoadU(d, mean + c));
    return Activate<kAct>(d, hn::MulAdd(dev, hn::LoadU(d, scale + c), hn::LoadU(d, shift + c)));
  });
}

// Channels-first apply over consecutive planes (per-plane mean, scale and shift):
// walks the elements flat, so a vector crossing a plane boundary takes its
// parameters spliced from both planes. Plane-by-plane spans would end
// every short plane (14x14, 7x7) in a partial vector. on_vector(i) runs after each
// whole vector, in order; they start at 0, N, 2N, ... when y is aligned or when
// kAlignStores is false (no scalar peel before the first vector). Means: a pointer
// (a mean per plane), or OneMean (planes of one group).
struct NoVectorHook {
  HWY_INLINE void operator()(size_t) const {}
};
struct OneMean {
  float value;
  HWY_INLINE float operator[](size_t) const { return value; }
};
template <Activation kAct, bool kStream, class OnVector = NoVectorHook, bool kAlignStores = true,
          class Means = const float*, typename TX = float, typename TY = float>
HWY_INLINE void NormPlanesT(const TX* x, TY* y, size_t n, size_t plane, size_t offset, Means mean,
                            const float* scale, const float* shift,
                            OnVector&& on_vector = OnVector()) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const hn::CappedTag<float, 1> d1;
  size_t j = 0;         // plane of element i, counted from the first
  size_t off = offset;  // its offset in that plane
  size_t i = 0;
  const auto one = [&] {
    const auto v = hn::Sub(LoadF(d1, x + i), hn::Set(d1, mean[j]));
    StoreF(d1, Activate<kAct>(d1, hn::MulAdd(v, hn::Set(d1, scale[j]), hn::Set(d1, shift[j]))),
           y + i);
    ++i;
    if (++off == plane) off = 0, ++j;
  };
  const auto put = [&](hn::Vec<DF> v, size_t at) { PutF<kStream>(DF(), v, y + at); };
  // Aligned stores: required to stream, and a split-line store costs two.
  if constexpr (kAlignStores || kStream) {
    while (i < n && !IsVectorAligned(d, y + i)) one();
  }
  while (n - i >= N) {
    if (plane - off >= N) {
      size_t run = std::min(plane - off, n - i);
      run -= run % N;
      const auto vmean = hn::Set(d, mean[j]);
      const auto vs = hn::Set(d, scale[j]);
      const auto vb = hn::Set(d, shift[j]);
      size_t k = 0;
      if constexpr (kAct == Activation::kSilu) {
        // Two vectors an iteration: SiLU's chain of ~20 dependent operations keeps too
        // few vectors in flight one at a time.
        for (; k + 2 * N <= run; k += 2 * N) {
          // Both loads first: through NormOf each sat inside its chain (4% slower).
          const auto v0 = hn::MulAdd(hn::Sub(LoadF(d, x + i + k), vmean), vs, vb);
          const auto v1 = hn::MulAdd(hn::Sub(LoadF(d, x + i + k + N), vmean), vs, vb);
          const auto a0 = Activate<kAct>(d, v0);
          const auto a1 = Activate<kAct>(d, v1);
          put(a0, i + k);
          on_vector(i + k);
          put(a1, i + k + N);
          on_vector(i + k + N);
        }
      }
      for (; k < run; k += N) {
        put(NormOf<kAct>(x + i + k, vmean, vs, vb), i + k);
        on_vector(i + k);
      }
      i += run;
      off += run;
      if (off == plane) off = 0, ++j;
      continue;
    }
    auto vm = hn::Set(d, mean[j]);
    auto vs = hn::Set(d, scale[j]);
    auto vb = hn::Set(d, shift[j]);
    size_t first = plane - off;  // first lane of the next plane
    size_t q = j;
    for (; first < N; first += plane) {
      ++q;
      const auto earlier = hn::FirstN(d, first);
      if constexpr (!std::is_same_v<Means, OneMean>) {
        vm = hn::IfThenElse(earlier, vm, hn::Set(d, mean[q]));
      }
      vs = hn::IfThenElse(earlier, vs, hn::Set(d, scale[q]));
      vb = hn::IfThenElse(earlier, vb, hn::Set(d, shift[q]));
    }
    put(NormOf<kAct>(x + i, vm, vs, vb), i);
    on_vector(i);
    i += N;
    j = q;
    off = N - (first - plane);  // lanes [first - plane, N) are plane q's
    if (off == plane) off = 0, ++j;
  }
  while (i < n) one();
  if constexpr (kStream) hwy::FlushStream();
}

// NormPlanesT over one group while the next group's shifted sums (about its sampled
// pivot) ride along, one vector of `next` loaded per vector stored: the next group
// is read while this one is written, as a copy interleaves its reads and writes.
// Both groups hold n elements. The sums are SpanShiftedSums' bits: the same pairs,
// flushed at the same points. So the vectors stay on the grid 0, N, 2N, ... and the
// stores are not aligned first: with y one float off, 1x256x14x14 G=32 still took
// 6.5 us chained against 7.0 us in separate passes (aligned: 5.9 us). One mean: a
// pointer to a mean per plane took this loop a register it needed (spills; 1x256x14x14
// G=32, one thread: 5.72-5.88 us against 5.19-5.29 us).
template <Activation kAct, bool kStream, typename TX>
inline Moments NormPlanesThenMomentsT(const TX* x, float* y, size_t n, size_t plane, size_t offset,
                                      float mean, const float* scale, const float* shift,
                                      const TX* next) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const size_t paired = n / (2 * N) * (2 * N);  // elements the pairs cover
  const float p = SamplePivot(next, n);
  ShiftedSumsAcc acc(p);
  hn::Vec<DF> first = hn::Zero(d);
  size_t pairs = 0;
  const auto hook = [&](size_t i) {
    if (i >= paired) return;
    const auto v = LoadF(d, next + i);
    if ((i / N) % 2 == 0) {
      first = v;
      return;
    }
    acc.Add(first, v);
    if (++pairs == ShiftedSumsAcc::kPairsPerRun) acc.Flush(), pairs = 0;
  };
  // Streaming only into an aligned y (the dispatch checks): no peel, the grid holds.
  NormPlanesT<kAct, kStream, const decltype(hook)&, false, OneMean, TX>(
      x, y, n, plane, offset, OneMean{mean}, scale, shift, hook);
  double s1, s2;
  acc.Finish(next, n, paired, &s1, &s2);
  return MomentsAbout(next, n, p, s1, s2);
}

// y = act((x - mean) * scale + shift) for one vector.
template <Activation kAct, bool kStream, typename TX, typename TY>
HWY_INLINE void NormVector(const TX* HWY_RESTRICT x, TY* HWY_RESTRICT y, hn::Vec<DF> mean,
                           hn::Vec<DF> scale, hn::Vec<DF> shift) {
  PutF<kStream>(DF(), NormOf<kAct>(x, mean, scale, shift), y);
}

// Rows of kVectors whole vectors (one to four): all parameters in registers and the
// rows walked in order, one stream. The steps below walk rows of fewer than four
// vectors a vector column at a time, strided: 1x32x112x112 G=8 channels-last spent
// 1.3 times a same-size memcpy in its apply pass that way (and 1x64x56x56 G=32, rows
// of four vectors, went from 0.55 to 0.57 of memcpy here, C driver).
template <Activation kAct, bool kStream, size_t kVectors, typename TX, typename TY>
HWY_INLINE void NormNarrowRowsT(const TX* x, TY* y, size_t rows, const NormRows& p) {
  const DF d;
  const size_t N = hn::Lanes(d);
  constexpr size_t K = kVectors;
  VecSlots<DF, K> m, s, b;
  for (size_t v = 0; v < K; ++v) {
    m.Set(v, hn::LoadU(d, p.mean + v * N));
    s.Set(v, hn::LoadU(d, p.scale + v * N));
    b.Set(v, hn::LoadU(d, p.shift + v * N));
  }
  // Steps of four vectors (whole rows), their loads before their stores.
  constexpr size_t kRowsPerStep = K == 3 ? 4 : 4 / K;  // four vectors or 12
  constexpr size_t kStepVectors = kRowsPerStep * K;
  const size_t step = kStepVectors * N;
  const size_t n = rows * K * N;
  size_t i = 0;
  for (; i + step <= n; i += step) {
    VecSlots<DF, kStepVectors> v;
    HWY_UNROLL(12)
    for (size_t j = 0; j < kStepVectors; ++j) v.Set(j, LoadF(d, x + i + j * N));
    HWY_UNROLL(12)
    for (size_t j = 0; j < kStepVectors; ++j) {
      const size_t c = j % K;
      const auto r = Activate<kAct>(d, hn::MulAdd(hn::Sub(v.Get(j), m.Get(c)), s.Get(c), b.Get(c)));
      PutF<kStream>(DF(), r, y + i + j * N);
    }
  }
  for (; i < n; i += K * N) {
    HWY_UNROLL(4)
    for (size_t c = 0; c < K; ++c)
      NormVector<kAct, kStream>(x + i + c * N, y + i + c * N, m.Get(c), s.Get(c), b.Get(c));
  }
}

template <Activation kAct, typename TX, typename TY>
inline void NormRowsShiftedT(const TX* x, TY* y, size_t rows, size_t C, const NormRows& p,
                             bool from_memory);

template <Activation kAct, bool kStream, typename TX, typename TY>
inline void NormRowsT(const TX* x, TY* y, size_t rows, size_t C, const NormRows& p,
                      bool from_memory) {
  const DF d;
  const size_t N = hn::Lanes(d);
  if (C % N == 0 && kStream && !IsVectorAligned(d, y)) {
    // Each row would need a peel and a tail to stream: shifted rows instead.
    return NormRowsShiftedT<kAct>(x, y, rows, C, p, from_memory);
  }
  if (C % N == 0 && C <= 4 * N) {
    if (C == 4 * N) {
      NormNarrowRowsT<kAct, kStream, 4>(x, y, rows, p);
    } else if (C == N) {
      NormNarrowRowsT<kAct, kStream, 1>(x, y, rows, p);
    } else if (C == 2 * N) {
      NormNarrowRowsT<kAct, kStream, 2>(x, y, rows, p);
    } else {
      NormNarrowRowsT<kAct, kStream, 3>(x, y, rows, p);
    }
  } else if (C % N == 0 && !from_memory) {
    // Rows in cache: in order, a row's vectors in order, each with its three
    // parameters (aligned: GroupNorm's arrays start on a cache line). Walked in
    // steps of a few rows down four vectors of channels instead (the parameters
    // loaded once a step), the stores and loads strided by a row took 1.5 times as
    // long: 1x256x14x14 G=32 NHWC's output pass, one thread, 3.1 us against 2.0.
    // (The step below, one row a step, is the same arithmetic but took 1.16-1.20
    // times as long: 1x256x14x14 and 1x1024x7x7 G=32, same-process A/B.)
    const float* HWY_RESTRICT mean = p.mean;
    const float* HWY_RESTRICT scale = p.scale;
    const float* HWY_RESTRICT shift = p.shift;
    for (size_t r = 0; r < rows; ++r) {
      const TX* HWY_RESTRICT xr = x + r * C;
      TY* HWY_RESTRICT yr = y + r * C;
      size_t c = 0;
      for (; c + 4 * N <= C; c += 4 * N) {
        // All four results before any store: SiLU's long chains then overlap.
        const auto r0 = NormOf<kAct>(xr + c, hn::LoadU(d, mean + c), hn::LoadU(d, scale + c),
                                     hn::LoadU(d, shift + c));
        const auto r1 = NormOf<kAct>(xr + c + N, hn::LoadU(d, mean + c + N),
                                     hn::LoadU(d, scale + c + N), hn::LoadU(d, shift + c + N));
        const auto r2 =
            NormOf<kAct>(xr + c + 2 * N, hn::LoadU(d, mean + c + 2 * N),
                         hn::LoadU(d, scale + c + 2 * N), hn::LoadU(d, shift + c + 2 * N));
        const auto r3 =
            NormOf<kAct>(xr + c + 3 * N, hn::LoadU(d, mean + c + 3 * N),
                         hn::LoadU(d, scale + c + 3 * N), hn::LoadU(d, shift + c + 3 * N));
        PutF<kStream>(DF(), r0, yr + c);
        PutF<kStream>(DF(), r1, yr + c + N);
        PutF<kStream>(DF(), r2, yr + c + 2 * N);
        PutF<kStream>(DF(), r3, yr + c + 3 * N);
      }
      for (; c < C; c += N) {
        NormVector<kAct, kStream>(xr + c, yr + c, hn::LoadU(d, mean + c), hn::LoadU(d, scale + c),
                                  hn::LoadU(d, shift + c));
      }
    }
  } else if (C % N == 0) {
    // From DRAM, whole vectors in every row (and with streaming every store aligned):
    // a step applies four vectors of channels at a time, their parameters loaded once,
    // to one row of each of kRowStreams sequential streams a quarter of the rows apart
    // (see ShiftedSumsRowStreams: a few distant streams read at memory speed, a tile
    // walked column by column does not).
    const auto step = [&](const size_t* at, size_t count) {
      size_t c = 0;
      for (; c + 4 * N <= C; c += 4 * N) {
        const auto m0 = hn::LoadU(d, p.mean + c), m1 = hn::LoadU(d, p.mean + c + N),
                   m2 = hn::LoadU(d, p.mean + c + 2 * N), m3 = hn::LoadU(d, p.mean + c + 3 * N);
        const auto s0 = hn::LoadU(d, p.scale + c), s1 = hn::LoadU(d, p.scale + c + N),
                   s2 = hn::LoadU(d, p.scale + c + 2 * N), s3 = hn::LoadU(d, p.scale + c + 3 * N);
        const auto b0 = hn::LoadU(d, p.shift + c), b1 = hn::LoadU(d, p.shift + c + N),
                   b2 = hn::LoadU(d, p.shift + c + 2 * N), b3 = hn::LoadU(d, p.shift + c + 3 * N);
        for (size_t k = 0; k < count; ++k) {
          // All four results before any store: the stores through y could alias the
          // captures, and one vector at a time SiLU's long chains barely overlap.
          const size_t o = at[k] + c;
          const auto r0 = NormOf<kAct>(x + o, m0, s0, b0);
          const auto r1 = NormOf<kAct>(x + o + N, m1, s1, b1);
          const auto r2 = NormOf<kAct>(x + o + 2 * N, m2, s2, b2);
          const auto r3 = NormOf<kAct>(x + o + 3 * N, m3, s3, b3);
          PutF<kStream>(DF(), r0, y + o);
          PutF<kStream>(DF(), r1, y + o + N);
          PutF<kStream>(DF(), r2, y + o + 2 * N);
          PutF<kStream>(DF(), r3, y + o + 3 * N);
        }
      }
      for (; c < C; c += N) {
        const auto m = hn::LoadU(d, p.mean + c), s = hn::LoadU(d, p.scale + c),
                   b = hn::LoadU(d, p.shift + c);
        for (size_t k = 0; k < count; ++k) {
          NormVector<kAct, kStream>(x + at[k] + c, y + at[k] + c, m, s, b);
        }
      }
    };
    const size_t D = rows / kRowStreams;
    for (size_t i = 0; i < D; ++i) {
      size_t at[kRowStreams];
      for (size_t k = 0; k < kRowStreams; ++k) at[k] = (k * D + i) * C;
      step(at, kRowStreams);
    }
    for (size_t r = kRowStreams * D; r < rows; ++r) {
      const size_t at = r * C;
      step(&at, 1);
    }
  } else {
    for (size_t r = 0; r < rows; ++r) {
      NormSpan<kAct, kStream>(x + r * C, y + r * C, C, p.mean, p.scale, p.shift);
    }
  }
  if constexpr (kStream) hwy::FlushStream();
}

// Streamed rows of whole vectors start as misaligned as y (NumPy's large arrays sit 16
// bytes past a line), and plain stores in their place read each output line first:
// 128x256x28x28 G=32 NHWC with y 16 bytes off took 8.0 ms against 6.4 aligned, one
// thread. Walked shifted by the `peel` floats to y's next vector boundary instead: row
// 0's first peel floats on their own, then rows of C floats from x + peel, whose
// channels start at peel (parameters rotated by peel, so the shifted rows stream on the
// aligned walk), then the last row's C - peel floats. Same operations per element as
// the aligned walk: the same bits wherever y is.
constexpr size_t kMaxRotatedChannels = 1024;

template <Activation kAct, typename TX, typename TY>
inline void NormRowsShiftedT(const TX* x, TY* y, size_t rows, size_t C, const NormRows& p,
                             bool from_memory) {
  const size_t vector_bytes = hn::Lanes(DF()) * sizeof(TY);
  const size_t misalign = reinterpret_cast<uintptr_t>(y) % vector_bytes;
  if (misalign % sizeof(TY) != 0 || C > kMaxRotatedChannels || rows < 2) {
    return NormRowsT<kAct, false>(x, y, rows, C, p, from_memory);
  }
  const size_t peel = (vector_bytes - misalign) / sizeof(TY);  // < Lanes <= C
  alignas(64) float mean[kMaxRotatedChannels], scale[kMaxRotatedChannels],
      shift[kMaxRotatedChannels];
  for (size_t c = 0; c < C; ++c) {
    const size_t from = c + peel < C ? c + peel : c + peel - C;
    mean[c] = p.mean[from], scale[c] = p.scale[from], shift[c] = p.shift[from];
  }
  NormSpan<kAct, false>(x, y, peel, p.mean, p.scale, p.shift);
  NormRowsT<kAct, true>(x + peel, y + peel, rows - 1, C, NormRows{mean, scale, shift}, from_memory);
  const size_t last = (rows - 1) * C + peel;
  NormSpan<kAct, false>(x + last, y + last, C - peel, mean, scale, shift);
}

// One row of a layer / RMS norm, y[d] = ((x[d] - mean) * rstd + offset) * gamma[d] +
// beta[d] for d < n (not fenced).
template <bool kGamma, bool kBeta, bool kStream, class TX, class TY>
HWY_INLINE void RowNormSpan(const TX* x, TY* y, size_t n, float mean, float rstd, float offset,
                            const float* gamma, const float* beta) {
  MapSpan<kStream>(x, y, n, [&](auto d, size_t c, auto v) {
    const auto t = hn::MulAdd(hn::Sub(v, hn::Set(d, mean)), hn::Set(d, rstd), hn::Set(d, offset));
    if constexpr (kGamma && kBeta) {
      return hn::MulAdd(t, hn::LoadU(d, gamma + c), hn::LoadU(d, beta + c));
    } else if constexpr (kGamma) {
      return hn::Mul(t, hn::LoadU(d, gamma + c));
    } else if constexpr (kBeta) {
      return hn::Add(t, hn::LoadU(d, beta + c));
    } else {
      return t;
    }
  });
}

template <bool kGamma, bool kBeta, bool kStream, class TX, class TY>
inline void RowNormT(const TX* x, TY* y, size_t n, float mean, float rstd, float offset,
                     const float* gamma, const float* beta) {
  RowNormSpan<kGamma, kBeta, kStream>(x, y, n, mean, rstd, offset, gamma, beta);
  if constexpr (kStream) hwy::FlushStream();
}

// Rows [0, rows) of a [rows, D] layer / RMS norm, row r at x + r * D and y + r * D, each
// RowNormSpan'd with its own mean, rstd and offset, kRowNormColumns columns at a time
// across the rows, so that those columns of gamma and beta stay in L1 for every row.
// Row by row, a bfloat16 row of 4096 (8 KiB) and its 32 KiB of gamma and beta overflowed
// the 32 KiB L1 and the rows missed on all of them: [16384, 4096] without gamma and beta
// took 0.68 of the time. Elementwise: the same bits in any walk. next: the next_rows rows
// read after these (D apart), each chunk's share prefetched into L2 before it is written.
constexpr size_t kRowNormColumns = 1024;

template <bool kGamma, bool kBeta, bool kStream, class TX, class TY>
inline void RowNormsT(const TX* x, TY* y, size_t rows, size_t D, const RowScales& s,
                      const float* gamma, const float* beta, const TX* next, size_t next_rows) {
  for (size_t c0 = 0; c0 < D; c0 += kRowNormColumns) {
    const size_t n = std::min(kRowNormColumns, D - c0);
    for (size_t r = 0; r < rows; ++r) {
      if (r < next_rows) {
        const char* ahead = reinterpret_cast<const char*>(next + r * D + c0);
        for (size_t b = 0; b < n * sizeof(TX); b += 64) __builtin_prefetch(ahead + b, 0, 2);
      }
      RowNormSpan<kGamma, kBeta, kStream>(x + r * D + c0, y + r * D + c0, n, s.mean[r], s.rstd[r],
                                          s.offset[r], kGamma ? gamma + c0 : nullptr,
                                          kBeta ? beta + c0 : nullptr);
    }
  }
  if constexpr (kStream) hwy::FlushStream();
}

// Run-time (activation, stream) -> one of the six instantiations.
template <template <Activation, bool> class Fn, class... Args>
auto DispatchActivation(Activation act, bool stream, Args&&... args) {
  switch (act) {
    case Activation::kRelu:
      return stream ? Fn<Activation::kRelu, true>::Run(args...)
                    : Fn<Activation::kRelu, false>::Run(args...);
    case Activation::kSilu:
      return stream ? Fn<Activation::kSilu, true>::Run(args...)
                    : Fn<Activation::kSilu, false>::Run(args...);
    case Activation::kNone:
    default:
      return stream ? Fn<Activation::kNone, true>::Run(args...)
                    : Fn<Activation::kNone, false>::Run(args...);
  }
}

template <class Means>
struct NormPlanesOf {
  template <Activation kAct, bool kStream>
  struct Fn {
    template <typename TX, typename TY>
    static void Run(const TX* x, TY* y, int64_t n, int64_t plane, int64_t offset, Means mean,
                    const float* scale, const float* shift) {
      NormPlanesT<kAct, kStream, NoVectorHook, true, Means, TX, TY>(
          x, y, static_cast<size_t>(n), static_cast<size_t>(plane), static_cast<size_t>(offset),
          mean, scale, shift);
    }
  };
};
template <Activation kAct, bool kStream>
struct NormRowsFn {
  template <typename TX, typename TY>
  static void Run(const TX* x, TY* y, int64_t rows, int64_t C, const NormRows& p,
                  bool from_memory) {
    NormRowsT<kAct, kStream>(x, y, static_cast<size_t>(rows), static_cast<size_t>(C), p,
                             from_memory);
  }
};

// y = x rounded to y's storage, for i < n (the half outputs of the float kernels). The
// AVX-512 target rounds bfloat16 with AVX512_BF16's instruction where the CPU has it (the
// same bits; a bfloat16 group norm 128x256x28x28 spent a fifth of its time in the
// integer rounding, 0.10 ns an element against 0.04 for float16's F16C).
template <bool kStream, class TY>
HWY_INLINE void NarrowSpan(const float* x, TY* y, size_t n) {
#if NORMKIT_TARGET_BF16
  if constexpr (std::is_same_v<TY, hwy::bfloat16_t>) {
    if (UseBF16Instruction()) {
      return NarrowToBF16Hardware(x, n, reinterpret_cast<uint16_t*>(y), kStream);
    }
  }
#endif
  MapSpan<kStream>(x, y, n, [](auto, size_t, auto v) { return v; });
}

// The apply passes over planes: x of `x_storage`, loaded widened (exactly) into float
// vectors, y stored in its storage (a half y rounded from the float vectors: bitwise the
// float32 output rounded). The pairs the API takes: a half y with float32 x or the same
// half x.
template <class Means>
inline void ApplyPlanes(const void* x, Storage x_storage, void* y, Storage y_storage, int64_t n,
                        int64_t plane, int64_t offset, Means mean, const float* scale,
                        const float* shift, Activation act, bool stream) {
  WithStorage(x, x_storage, [&](const auto* xs) {
    using TX = std::remove_cv_t<std::remove_pointer_t<decltype(xs)>>;
    const auto apply = [&](auto* ys) {
      DispatchActivation<NormPlanesOf<Means>::template Fn>(act, stream, xs, ys, n, plane, offset,
                                                           mean, scale, shift);
    };
    if constexpr (!std::is_same_v<TX, hwy::float16_t>) {
      if (y_storage == Storage::kBFloat16) return apply(static_cast<hwy::bfloat16_t*>(y));
    }
    if constexpr (!std::is_same_v<TX, hwy::bfloat16_t>) {
      if (y_storage == Storage::kFloat16) return apply(static_cast<hwy::float16_t*>(y));
    }
    apply(static_cast<float*>(y));
  });
}

inline void ApplyNormPlanesImpl(const void* x, Storage x_storage, void* y, Storage y_storage,
                                int64_t n, int64_t plane, int64_t offset, const float* mean,
                                const float* scale, const float* shift, Activation act,
                                bool stream) {
  ApplyPlanes(x, x_storage, y, y_storage, n, plane, offset, mean, scale, shift, act, stream);
}

inline void ApplyNormGroupPlanesImpl(const void* x, Storage x_storage, void* y, Storage y_storage,
                                     int64_t n, int64_t plane, int64_t offset, float mean,
                                     const float* scale, const float* shift, Activation act,
                                     bool stream) {
  ApplyPlanes(x, x_storage, y, y_storage, n, plane, offset, OneMean{mean}, scale, shift, act,
              stream);
}

template <Activation kAct, bool kStream>
struct NormPlanesThenMomentsFn {
  template <typename TX>
  static Moments Run(const TX* x, float* y, size_t n, size_t plane, size_t offset, float mean,
                     const float* scale, const float* shift, const TX* next) {
    return NormPlanesThenMomentsT<kAct, kStream>(x, y, n, plane, offset, mean, scale, shift, next);
  }
};

inline Moments ApplyNormPlanesThenMomentsImpl(const void* x, Storage x_storage, float* y, int64_t n,
                                              int64_t plane, int64_t offset, float mean,
                                              const float* scale, const float* shift,
                                              Activation act, bool stream, const void* next) {
  if (n <= 0) return Moments();
  return WithStorage(x, x_storage, [&](const auto* xs) {
    return DispatchActivation<NormPlanesThenMomentsFn>(
        act, stream && IsVectorAligned(DF(), y), xs, y, static_cast<size_t>(n),
        static_cast<size_t>(plane), static_cast<size_t>(offset), mean, scale, shift,
        static_cast<decltype(xs)>(next));
  });
}

inline void ApplyNormRowsImpl(const void* x, Storage x_storage, void* y, Storage y_storage,
                              int64_t rows, int64_t channels, const NormRows& p, Activation act,
                              bool stream, bool from_memory) {
  WithStorage(x, x_storage, [&](const auto* xs) {
    using TX = std::remove_cv_t<std::remove_pointer_t<decltype(xs)>>;
    const auto apply = [&](auto* ys) {
      DispatchActivation<NormRowsFn>(act, stream, xs, ys, rows, channels, p, from_memory);
    };
    // The pairs the API takes: a half y with float32 x or the same half x.
    if constexpr (!std::is_same_v<TX, hwy::float16_t>) {
      if (y_storage == Storage::kBFloat16) return apply(static_cast<hwy::bfloat16_t*>(y));
    }
    if constexpr (!std::is_same_v<TX, hwy::bfloat16_t>) {
      if (y_storage == Storage::kFloat16) return apply(static_cast<hwy::float16_t*>(y));
    }
    apply(static_cast<float*>(y));
  });
}

template <class TX, class TY>
inline void RowNormsDispatch(const TX* x, TY* y, size_t rows, size_t D, const RowScales& s,
                             const float* gamma, const float* beta, bool stream, const void* next,
                             size_t next_rows) {
  const TX* ahead = static_cast<const TX*>(next);
  const int which = (gamma ? 2 : 0) + (beta ? 1 : 0);
  switch (which * 2 + (stream ? 1 : 0)) {
    case 0: return RowNormsT<false, false, false>(x, y, rows, D, s, gamma, beta, ahead, next_rows);
    case 1: return RowNormsT<false, false, true>(x, y, rows, D, s, gamma, beta, ahead, next_rows);
    case 2: return RowNormsT<false, true, false>(x, y, rows, D, s, gamma, beta, ahead, next_rows);
    case 3: return RowNormsT<false, true, true>(x, y, rows, D, s, gamma, beta, ahead, next_rows);
    case 4: return RowNormsT<true, false, false>(x, y, rows, D, s, gamma, beta, ahead, next_rows);
    case 5: return RowNormsT<true, false, true>(x, y, rows, D, s, gamma, beta, ahead, next_rows);
    case 6: return RowNormsT<true, true, false>(x, y, rows, D, s, gamma, beta, ahead, next_rows);
    default: return RowNormsT<true, true, true>(x, y, rows, D, s, gamma, beta, ahead, next_rows);
  }
}

inline void ApplyRowNormsImpl(const void* x, Storage x_storage, void* y, Storage y_storage,
                              int64_t rows, int64_t D, const RowScales& s, const float* gamma,
                              const float* beta, bool stream, const void* next, int64_t next_rows) {
  const size_t r = static_cast<size_t>(rows), n = static_cast<size_t>(D);
  const size_t ahead = next != nullptr ? static_cast<size_t>(next_rows) : 0;
  WithStorage(x, x_storage, [&](const auto* xs) {
    using TX = std::remove_cv_t<std::remove_pointer_t<decltype(xs)>>;
    // The pairs the API takes: a half y with float32 x or the same half x.
    if constexpr (!std::is_same_v<TX, hwy::float16_t>) {
      if (y_storage == Storage::kBFloat16) {
        return RowNormsDispatch(xs, static_cast<hwy::bfloat16_t*>(y), r, n, s, gamma, beta, stream,
                                next, ahead);
      }
    }
    if constexpr (!std::is_same_v<TX, hwy::bfloat16_t>) {
      if (y_storage == Storage::kFloat16) {
        return RowNormsDispatch(xs, static_cast<hwy::float16_t*>(y), r, n, s, gamma, beta, stream,
                                next, ahead);
      }
    }
    RowNormsDispatch(xs, static_cast<float*>(y), r, n, s, gamma, beta, stream, next, ahead);
  });
}

template <class TX, class TY>
inline void RowNormDispatch(const TX* x, TY* y, size_t n, float mean, float rstd, float offset,
                            const float* gamma, const float* beta, bool stream) {
  const int which = (gamma ? 2 : 0) + (beta ? 1 : 0);
  switch (which * 2 + (stream ? 1 : 0)) {
    case 0: return RowNormT<false, false, false>(x, y, n, mean, rstd, offset, gamma, beta);
    case 1: return RowNormT<false, false, true>(x, y, n, mean, rstd, offset, gamma, beta);
    case 2: return RowNormT<false, true, false>(x, y, n, mean, rstd, offset, gamma, beta);
    case 3: return RowNormT<false, true, true>(x, y, n, mean, rstd, offset, gamma, beta);
    case 4: return RowNormT<true, false, false>(x, y, n, mean, rstd, offset, gamma, beta);
    case 5: return RowNormT<true, false, true>(x, y, n, mean, rstd, offset, gamma, beta);
    case 6: return RowNormT<true, true, false>(x, y, n, mean, rstd, offset, gamma, beta);
    default: return RowNormT<true, true, true>(x, y, n, mean, rstd, offset, gamma, beta);
  }
}

inline void ApplyRowNormImpl(const void* x, Storage x_storage, void* y, Storage y_storage,
                             int64_t count, float mean, float rstd, float offset,
                             const float* gamma, const float* beta, bool stream) {
  const size_t n = static_cast<size_t>(count);
  WithStorage(x, x_storage, [&](const auto* xs) {
    using TX = std::remove_cv_t<std::remove_pointer_t<decltype(xs)>>;
    // The pairs the API takes: a half y with float32 x or the same half x.
    if constexpr (!std::is_same_v<TX, hwy::float16_t>) {
      if (y_storage == Storage::kBFloat16) {
        return RowNormDispatch(xs, static_cast<hwy::bfloat16_t*>(y), n, mean, rstd, offset, gamma,
                               beta, stream);
      }
    }
    if constexpr (!std::is_same_v<TX, hwy::bfloat16_t>) {
      if (y_storage == Storage::kFloat16) {
        return RowNormDispatch(xs, static_cast<hwy::float16_t*>(y), n, mean, rstd, offset, gamma,
                               beta, stream);
      }
    }
    RowNormDispatch(xs, static_cast<float*>(y), n, mean, rstd, offset, gamma, beta, stream);
  });
}

// out[i] = x[i] widened to float, for i < count (x of `storage`).
inline void WidenToFloatImpl(const void* x, Storage storage, int64_t count, float* out) {
  const size_t n = static_cast<size_t>(count);
  const auto widen = [&](const auto* p) {
    const DF d;
    const hn::CappedTag<float, 1> d1;
    const size_t N = hn::Lanes(d);
    size_t i = 0;
    for (; i + N <= n; i += N) hn::StoreU(LoadF(d, p + i), d, out + i);
    for (; i < n; ++i) hn::StoreU(LoadF(d1, p + i), d1, out + i);
  };
  if (storage == Storage::kBFloat16) return widen(static_cast<const hwy::bfloat16_t*>(x));
  if (storage == Storage::kFloat16) return widen(static_cast<const hwy::float16_t*>(x));
  widen(static_cast<const float*>(x));
}

// y[i] = x[i] rounded to y's half storage (nearest even), for i < count; `stream`:
// non-temporal stores (the caller fences).
inline void NarrowFromFloatImpl(const float* x, int64_t count, void* y, Storage storage,
                                bool stream) {
  const size_t n = static_cast<size_t>(count);
  const auto narrow = [&](auto* yt) {
    if (stream) return NarrowSpan<true>(x, yt, n);
    NarrowSpan<false>(x, yt, n);
  };
  if (storage == Storage::kBFloat16) return narrow(static_cast<hwy::bfloat16_t*>(y));
  if (storage == Storage::kFloat16) return narrow(static_cast<hwy::float16_t*>(y));
  narrow(static_cast<float*>(y));
}

// h[i] = (x[i] + r[i]) + bias[i] (bias null: x[i] + r[i]) for i < count, each add
// rounded to float in that order (a framework's two adds), h stored as x and r are (a
// half h: that float sum rounded to nearest even). h may be x or r.
inline void ResidualAddImpl(const void* x, const void* r, Storage storage, const float* bias,
                            int64_t count, void* h) {
  WithStorage(x, storage, [&](const auto* xs) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(xs)>>;
    const T* rs = static_cast<const T*>(r);
    MapSpan<false>(xs, static_cast<T*>(h), static_cast<size_t>(count),
                   [&](auto d, size_t i, auto v) {
                     v = hn::Add(v, LoadF(d, rs + i));
                     return bias != nullptr ? hn::Add(v, hn::LoadU(d, bias + i)) : v;
                   });
  });
}

// y[i] = x[i] for i < count, both stored as `storage`, non-temporally when `stream` (the
// caller fences): a half value survives its widening and rounding unchanged, NaN
// payloads aside (quieted; the callers copy results of float arithmetic, quiet already).
inline void CopyElementsImpl(const void* x, Storage storage, int64_t count, void* y, bool stream) {
  WithStorage(x, storage, [&](const auto* xs) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(xs)>>;
    const auto same = [](auto, size_t, auto v) { return v; };
    if (stream) return MapSpan<true>(xs, static_cast<T*>(y), static_cast<size_t>(count), same);
    MapSpan<false>(xs, static_cast<T*>(y), static_cast<size_t>(count), same);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
NORMKIT_AFTER_NAMESPACE();

#endif  // NORMKIT_CPU_KERNELS_NORM_APPLY_INL_H_ toggle
