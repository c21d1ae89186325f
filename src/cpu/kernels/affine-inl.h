// SPDX-License-Identifier: Apache-2.0
// SIMD spans for per-channel affines (affine and batch norm, through
// cpu/kernels/affine.cc). Included once per target.

#if defined(NORMKIT_CPU_KERNELS_AFFINE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NORMKIT_CPU_KERNELS_AFFINE_INL_H_
#undef NORMKIT_CPU_KERNELS_AFFINE_INL_H_
#else
#define NORMKIT_CPU_KERNELS_AFFINE_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cpu/kernels/storage-inl.h"
#include "cpu/kernels/store-inl.h"
#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
#include "cpu/kernels/vec_slots-inl.h"
#include "hwy/highway.h"

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// kCenter (batch norm with running means far from the spread): (x - center) * scale +
// shift, the subtraction first (the folded shift would lose the mean's digits).
template <bool kScale, bool kShift, bool kCenter = false, class V>
HWY_INLINE V ApplyAffine(V x, V scale, V shift, V center) {
  if constexpr (kCenter) {
    static_assert(kScale && kShift, "a center comes with both terms");
    return hn::MulAdd(hn::Sub(x, center), scale, shift);
  } else if constexpr (kScale && kShift) {
    return hn::MulAdd(x, scale, shift);
  } else if constexpr (kScale) {
    return hn::Mul(x, scale);
  } else if constexpr (kShift) {
    return hn::Add(x, shift);
  } else {
    return x;
  }
}

// One element through a 1-lane vector: the same instruction (FMA or not) as the
// vector body, so an element's result never depends on where a span starts.
template <bool kScale, bool kShift, bool kCenter = false, class TX, class TY>
HWY_INLINE void AffineOne(const TX* x, TY* y, float scale, float shift, float center = 0.0f) {
  const hn::CappedTag<float, 1> d1;
  StoreF(d1,
         ApplyAffine<kScale, kShift, kCenter>(LoadF(d1, x), hn::Set(d1, scale), hn::Set(d1, shift),
                                              hn::Set(d1, center)),
         y);
}

// Splices a per-plane parameter into a vector whose lanes cross plane boundaries:
// lanes < first keep `v`, lanes >= first take `value`.
template <class D, class V>
HWY_INLINE V SpliceFrom(D d, V v, size_t first, float value) {
  return hn::IfThenElse(hn::FirstN(d, first), v, hn::Set(d, value));
}

// The body of periodic spans: kRows periods at a time, each parameter vector loaded
// once for kRows x vectors (a load of x, scale and shift per vector would make loads,
// not the store, the bottleneck of in-cache calls). period is a multiple of Lanes;
// scale_rep / shift_rep hold the period's parameters from the span's first element.
// Returns the elements done (whole blocks of kRows periods).
template <size_t kRows, bool kScale, bool kShift, bool kStream, bool kCenter, class TX, class TY>
HWY_INLINE size_t AffinePeriodRows(const TX* x, TY* y, size_t n, const float* scale_rep,
                                   const float* shift_rep, const float* center_rep, size_t period) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const size_t block = kRows * period;
  size_t i = 0;
  for (; n - i >= block; i += block) {
    for (size_t k = 0; k < period; k += lanes) {
      const auto vscale = kScale ? hn::LoadU(d, scale_rep + k) : hn::Zero(d);
      const auto vshift = kShift ? hn::LoadU(d, shift_rep + k) : hn::Zero(d);
      const auto vcenter = kCenter ? hn::LoadU(d, center_rep + k) : hn::Zero(d);
      // All loads before any store: a store to one row and the next row's load
      // may share address bits 0-11, and the load would wait on it (4K aliasing).
      const auto x0 = LoadF(d, x + i + k);
      const auto x1 = LoadF(d, x + i + period + k);
      if constexpr (kRows == 2) {
        PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(x0, vscale, vshift, vcenter),
                      y + i + k);
        PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(x1, vscale, vshift, vcenter),
                      y + i + period + k);
      } else {
        static_assert(kRows == 4, "2 or 4 rows");
        const auto x2 = LoadF(d, x + i + 2 * period + k);
        const auto x3 = LoadF(d, x + i + 3 * period + k);
        PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(x0, vscale, vshift, vcenter),
                      y + i + k);
        PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(x1, vscale, vshift, vcenter),
                      y + i + period + k);
        PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(x2, vscale, vshift, vcenter),
                      y + i + 2 * period + k);
        PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(x3, vscale, vshift, vcenter),
                      y + i + 3 * period + k);
      }
    }
  }
  return i;
}

// Vector registers a periodic span may fill with parameters: half the register file.
#if HWY_TARGET <= HWY_AVX3
constexpr size_t kParamRegs = 16;
#else
constexpr size_t kParamRegs = 8;
#endif

// Whether a period of `vectors` vectors keeps every term AffinePeriodInRegisters
// applies in registers (else only the shift, when it fits).
// With a center (three terms), "held" means the center and the shift, half the registers
// each; the scale is then loaded per vector.
template <bool kScale, bool kShift, bool kCenter = false>
HWY_INLINE bool AllTermsHeld(size_t vectors) {
  return vectors <= (kCenter || (kScale && kShift) ? kParamRegs / 2 : kParamRegs);
}

// The body of periodic spans whose period is at most kParamRegs vectors: the
// parameters stay in registers, both terms when they fit (one load per vector, as in
// a flat x = a*x + b), else the shift (two loads, not three). Three loads a vector
// cost DRAM-bound in-place calls their pace: 64x256x64x64 channels-last in place,
// one thread, a standalone loop ran at 0.83-0.93 of the flat scale's speed with both
// terms loaded, 0.98-1.03 with the shift in registers. Short periods are repeated to
// fill the registers, so each step is several vectors, four loads before their
// stores (as in AffinePeriodicSpan). period is a multiple of Lanes; scale_rep /
// shift_rep hold the period from the span's first element. Returns the elements
// done (whole periods).
// kCenter: the center and the shift held (half the registers each), the scale loaded
// (from offsets precomputed for the step: a step may hold several short periods); periods
// of more than half the registers hold the center alone and load the scale and shift.
template <bool kScale, bool kShift, bool kStream, bool kCenter, class TX, class TY>
HWY_INLINE size_t AffinePeriodInRegisters(const TX* x, TY* y, size_t n, const float* scale_rep,
                                          const float* shift_rep, const float* center_rep,
                                          size_t period, bool from_memory) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const size_t vectors = period / lanes;
  size_t i = 0;
  const auto body = [&](auto scale_held_tag, auto shift_held_tag) {
    constexpr bool kScaleHeld = decltype(scale_held_tag)::value;
    constexpr bool kShiftHeld = decltype(shift_held_tag)::value;  // false: kCenter only
    // Registers per term: two terms held share the file.
    constexpr size_t kCount =
        (kCenter && kShiftHeld) || (kScaleHeld && kScale && kShift) ? kParamRegs / 2 : kParamRegs;
    const size_t step_vectors = vectors * (kCount / vectors);  // whole periods
    const size_t step = step_vectors * lanes;
    VecSlots<std::remove_const_t<decltype(d)>, kCount> vscale, vshift, vcenter;
    size_t scale_at[kCount];  // kCenter: where vector j's scale is in the period
    for (size_t j = 0; j < kCount; ++j) {
      const bool used = j < step_vectors;
      const size_t at = j * lanes % period;
      vscale.Set(j, kScale && kScaleHeld && used ? hn::LoadU(d, scale_rep + at) : hn::Zero(d));
      vshift.Set(j, kShift && kShiftHeld && used ? hn::LoadU(d, shift_rep + at) : hn::Zero(d));
      vcenter.Set(j, kCenter && used ? hn::LoadU(d, center_rep + at) : hn::Zero(d));
      scale_at[j] = at;
    }
    const auto apply = [&](auto xv, size_t j) {
      // Without a center the scale is loaded only for periods of a step (at = j * lanes).
      const size_t at = kCenter ? scale_at[j] : j * lanes;
      const auto s = kScaleHeld || !kScale ? vscale.Get(j) : hn::LoadU(d, scale_rep + at);
      const auto b = kShiftHeld || !kShift ? vshift.Get(j) : hn::LoadU(d, shift_rep + at);
      PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(xv, s, b, vcenter.Get(j)),
                    y + i + j * lanes);
    };
    for (; n - i >= step; i += step) {
      // Constant indices in every unrolled copy keep vscale[j] / vshift[j] registers.
      HWY_UNROLL(4)
      for (size_t j = 0; j < kCount; j += 4) {
        if (j + 4 <= step_vectors && from_memory) {
          // From memory each load next to its store (Zen 5, 64x256x64x64 channels-last
          // scale-only out of place: 1.23 -> 1.40 of memcpy); in cache loads first.
          apply(LoadF(d, x + i + j * lanes), j);
          apply(LoadF(d, x + i + (j + 1) * lanes), j + 1);
          apply(LoadF(d, x + i + (j + 2) * lanes), j + 2);
          apply(LoadF(d, x + i + (j + 3) * lanes), j + 3);
        } else if (j + 4 <= step_vectors) {
          const auto x0 = LoadF(d, x + i + j * lanes);
          const auto x1 = LoadF(d, x + i + (j + 1) * lanes);
          const auto x2 = LoadF(d, x + i + (j + 2) * lanes);
          const auto x3 = LoadF(d, x + i + (j + 3) * lanes);
          apply(x0, j);
          apply(x1, j + 1);
          apply(x2, j + 2);
          apply(x3, j + 3);
        } else {
          HWY_UNROLL(4)
          for (size_t k = j; k < j + 4; ++k) {
            if (k < step_vectors) apply(LoadF(d, x + i + k * lanes), k);
          }
        }
      }
    }
    for (; n - i >= period; i += period) {  // the last whole periods, fewer than a step
      HWY_UNROLL(16)
      for (size_t j = 0; j < kCount; ++j) {
        if (j < vectors) apply(LoadF(d, x + i + j * lanes), j);
      }
    }
  };
  if constexpr (kCenter) {
    // The center and the shift held, or (longer periods) the center alone.
    if (AllTermsHeld<kScale, kShift, kCenter>(vectors)) {
      body(std::false_type(), std::true_type());
    } else {
      body(std::false_type(), std::false_type());
    }
  } else if (AllTermsHeld<kScale, kShift>(vectors) || !kScale) {
    body(std::true_type(), std::true_type());
  } else {
    body(std::false_type(), std::true_type());
  }
  return i;
}

// Half-spans this long and more are far enough apart to walk in step (below).
constexpr size_t kPairedHalfFloats = size_t{64} << 10;  // 256 KiB

// The body of DRAM-sized periodic spans whose terms do not all fit in registers
// (C = 1024; C = 256 with scale and shift): the span's two halves walked in step,
// each parameter vector loaded once for both (two loads a vector, not three). A
// standalone in-place loop, C = 1024, one thread: 0.79-0.89 of the flat in-place
// scale walking one stream, 0.95-1.05 walking halves 256 KiB or more apart; halves
// 16-64 KiB apart ran at 0.58-0.87 and neighbouring pixels at 0.41. At C = 256 it
// also beat the shift held in registers (C driver, 64x256x64x64 in place: 0.92-0.96
// -> 0.96-1.03). period is a multiple of Lanes; scale_rep / shift_rep
// hold the period from the span's first element. Returns the elements done (two
// halves of whole periods).
template <bool kScale, bool kShift, bool kStream, bool kCenter, class TX, class TY>
HWY_INLINE size_t AffinePeriodPairs(const TX* x, TY* y, size_t n,
                                    const float* HWY_RESTRICT scale_rep,
                                    const float* HWY_RESTRICT shift_rep,
                                    const float* HWY_RESTRICT center_rep, size_t period) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const size_t half = n / 2 / period * period;
  const TX* xb = x + half;
  TY* yb = y + half;
  for (size_t i = 0; i < half; i += period) {
    const auto apply = [&](auto xa, auto xv, size_t k) {
      const auto vscale = kScale ? hn::LoadU(d, scale_rep + k) : hn::Zero(d);
      const auto vshift = kShift ? hn::LoadU(d, shift_rep + k) : hn::Zero(d);
      const auto vcenter = kCenter ? hn::LoadU(d, center_rep + k) : hn::Zero(d);
      PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(xa, vscale, vshift, vcenter),
                    y + i + k);
      PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(xv, vscale, vshift, vcenter),
                    yb + i + k);
    };
    size_t k = 0;
    for (; k + 4 * lanes <= period; k += 4 * lanes) {
      // All eight x loads before any store (as in AffinePeriodRows).
      const auto a0 = LoadF(d, x + i + k);
      const auto a1 = LoadF(d, x + i + k + lanes);
      const auto a2 = LoadF(d, x + i + k + 2 * lanes);
      const auto a3 = LoadF(d, x + i + k + 3 * lanes);
      const auto b0 = LoadF(d, xb + i + k);
      const auto b1 = LoadF(d, xb + i + k + lanes);
      const auto b2 = LoadF(d, xb + i + k + 2 * lanes);
      const auto b3 = LoadF(d, xb + i + k + 3 * lanes);
      apply(a0, b0, k);
      apply(a1, b1, k + lanes);
      apply(a2, b2, k + 2 * lanes);
      apply(a3, b3, k + 3 * lanes);
    }
    for (; k < period; k += lanes) {
      apply(LoadF(d, x + i + k), LoadF(d, xb + i + k), k);
    }
  }
  return 2 * half;
}

// y[i] = x[i] * scale_rep[o_i] + shift_rep[o_i], o_i = (o + i) % period.
// Requires period >= Lanes and rep arrays of period + Lanes values.
// center_rep (kCenter): the centers, as scale_rep / shift_rep hold their terms.
template <bool kScale, bool kShift, bool kStream, bool kCenter = false, class TX, class TY>
HWY_INLINE void AffinePeriodicSpan(const TX* x, TY* y, size_t n, const float* scale_rep,
                                   const float* shift_rep, const float* center_rep, size_t period,
                                   size_t o, bool rows_per_load, bool in_cache, bool from_memory) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  const auto one = [&](size_t k, size_t ok) {
    AffineOne<kScale, kShift, kCenter>(x + k, y + k, kScale ? scale_rep[ok] : 0.0f,
                                       kShift ? shift_rep[ok] : 0.0f,
                                       kCenter ? center_rep[ok] : 0.0f);
  };
  if (n < lanes || period < lanes) {
    for (; i < n; ++i) {
      one(i, o);
      if (++o == period) o = 0;
    }
    return;
  }
  // Align the stores (required to stream; a split-line store costs two otherwise).
  for (; i < n && !IsVectorAligned(d, y + i); ++i) {
    one(i, o);
    if (++o == period) o = 0;
  }
  // Runs of whole vectors that do not wrap the period: a tight loop with no
  // index arithmetic beyond the pointer bump. rep holds period + lanes values,
  // so a run may also be one vector that straddles the wrap.
  // Parameters in registers where they fit, also in cache where only the shift fits
  // (the scale then loaded per vector). On Zen 4 the rows kept those in-cache calls
  // faster (1x256x14x14 channels-last in place, 1.12-1.24 of the flat scale with
  // rows, 1.03-1.14 without); on Zen 5 the rows lost by far more (same-process A/B,
  // one thread: 1x256x14x14, 1x192x14x14 and 1x160x14x14 out of place 0.69-0.70 of
  // the time without them; 1x256x14x14 in place 0.88-0.99 -> 1.10-1.16 of the flat
  // scale). Fixed for the span: decided once, not per run.
  const bool whole_vectors = period % lanes == 0;
  const size_t vectors = period / lanes;
  const bool in_registers = whole_vectors && vectors <= kParamRegs;
  // DRAM-sized in-place or plain-store calls whose terms are not all held: two
  // halves in step (spans too short for that keep the shift in registers). Also when
  // they are held, from memory: 64x256x64x64 channels-last scale-only in place, one
  // thread, 0.79 -> 0.98 of the flat in-place scale on Zen 5.
  const bool paired = whole_vectors && !in_cache && !kStream &&
                      (!AllTermsHeld<kScale, kShift, kCenter>(vectors) || from_memory);
  // The tuned bodies below are compiled for float32 storage only (each is instantiated
  // per term set, stream flag and SIMD target; per storage pair too they would take the
  // kernel's compile to minutes). Half storage takes the plain runs, except in place
  // (same type, plain stores), where it takes the paired halves too, as far apart in
  // bytes: 64x256x64x64 channels-last in place, one thread, 5 rounds alternating builds:
  // float16 0.75 -> 0.82-0.83 of a copy, bfloat16 0.72 -> 0.75.
  constexpr bool kTuned = std::is_same<TX, float>::value && std::is_same<TY, float>::value;
  constexpr bool kHalfPairs = std::is_same<TX, TY>::value && sizeof(TX) == 2 && !kStream;
  while (i + lanes <= n) {
    if constexpr (kHalfPairs) {
      if (paired && o < lanes && n - i >= 2 * kPairedHalfFloats * sizeof(float) / sizeof(TX)) {
        i += AffinePeriodPairs<kScale, kShift, kStream, kCenter>(
            x + i, y + i, n - i, kScale ? scale_rep + o : nullptr, kShift ? shift_rep + o : nullptr,
            kCenter ? center_rep + o : nullptr, period);
        if (i + lanes > n) break;
      }
    }
    if constexpr (kTuned) {
      if (paired && o < lanes && n - i >= 2 * kPairedHalfFloats) {
        i += AffinePeriodPairs<kScale, kShift, kStream, kCenter>(
            x + i, y + i, n - i, kScale ? scale_rep + o : nullptr, kShift ? shift_rep + o : nullptr,
            kCenter ? center_rep + o : nullptr, period);
        if (i + lanes > n) break;
      } else if (in_registers && o < lanes && n - i >= period) {
        i += AffinePeriodInRegisters<kScale, kShift, kStream, kCenter>(
            x + i, y + i, n - i, kScale ? scale_rep + o : nullptr, kShift ? shift_rep + o : nullptr,
            kCenter ? center_rep + o : nullptr, period, from_memory);
        if (i + lanes > n) break;
      } else if (rows_per_load && o < lanes && whole_vectors) {
        // Whole periods from offset o: rep[o, o + period) is inside the row. Four rows
        // share an L1 set when a period is a multiple of 4 KiB (C = 1024): then two,
        // so 2 x rows, 2 y rows and the parameters still fit its 8 ways.
        const float* sr = kScale ? scale_rep + o : nullptr;
        const float* br = kShift ? shift_rep + o : nullptr;
        const float* cr = kCenter ? center_rep + o : nullptr;
        i += (period * sizeof(TY)) % 4096 == 0
                 ? AffinePeriodRows<2, kScale, kShift, kStream, kCenter>(x + i, y + i, n - i, sr,
                                                                         br, cr, period)
                 : AffinePeriodRows<4, kScale, kShift, kStream, kCenter>(x + i, y + i, n - i, sr,
                                                                         br, cr, period);
        if (i + lanes > n) break;
      }
    }
    // lanes is a power of two: round down with a mask, not a division.
    size_t run = (period - o) & ~(lanes - 1);
    if (run == 0) run = lanes;
    const size_t avail = (n - i) & ~(lanes - 1);
    if (run > avail) run = avail;
    // (An absent term's rep is null: no arithmetic on it, found by fuzz_affine.)
    const float* HWY_RESTRICT sr = kScale ? scale_rep + o : nullptr;
    const float* HWY_RESTRICT br = kShift ? shift_rep + o : nullptr;
    const float* HWY_RESTRICT cr = kCenter ? center_rep + o : nullptr;
    size_t k = 0;
    // Eight x vectors loaded before their parameters: with two parameter loads
    // between x loads the core keeps fewer x misses in flight. 64x256x64x64 NHWC in
    // place, 1 thread: 0.7 of the flat in-place scale before, 0.8-0.9 after (a
    // standalone loop of this shape reaches 1.0).
    for (; k + 8 * lanes <= run; k += 8 * lanes) {
      const auto x0 = LoadF(d, x + i + k);
      const auto x1 = LoadF(d, x + i + k + lanes);
      const auto x2 = LoadF(d, x + i + k + 2 * lanes);
      const auto x3 = LoadF(d, x + i + k + 3 * lanes);
      const auto x4 = LoadF(d, x + i + k + 4 * lanes);
      const auto x5 = LoadF(d, x + i + k + 5 * lanes);
      const auto x6 = LoadF(d, x + i + k + 6 * lanes);
      const auto x7 = LoadF(d, x + i + k + 7 * lanes);
      const auto apply = [&](auto xv, size_t j) {
        const auto vscale = kScale ? hn::LoadU(d, sr + j) : hn::Zero(d);
        const auto vshift = kShift ? hn::LoadU(d, br + j) : hn::Zero(d);
        const auto vcenter = kCenter ? hn::LoadU(d, cr + j) : hn::Zero(d);
        PutF<kStream>(d, ApplyAffine<kScale, kShift, kCenter>(xv, vscale, vshift, vcenter),
                      y + i + j);
      };
      apply(x0, k);
      apply(x1, k + lanes);
      apply(x2, k + 2 * lanes);
      apply(x3, k + 3 * lanes);
      apply(x4, k + 4 * lanes);
      apply(x5, k + 5 * lanes);
      apply(x6, k + 6 * lanes);
      apply(x7, k + 7 * lanes);
    }
    for (; k < run; k += lanes) {
      const auto vscale = kScale ? hn::LoadU(d, sr + k) : hn::Zero(d);
      const auto vshift = kShift ? hn::LoadU(d, br + k) : hn::Zero(d);
      const auto vcenter = kCenter ? hn::LoadU(d, cr + k) : hn::Zero(d);
      PutF<kStream>(
          d, ApplyAffine<kScale, kShift, kCenter>(LoadF(d, x + i + k), vscale, vshift, vcenter),
          y + i + k);
    }
    i += run;
    o += run;
    if (o >= period) o -= period;
  }
  if constexpr (kStream) {  // streamed lines must not be read back (waits for memory)
    for (; i < n; ++i) {
      one(i, o);
      if (++o == period) o = 0;
    }
  }
  if (i < n) {
    const size_t t = n - lanes;
    const size_t back = i - t;  // < lanes <= period
    const size_t ot = o >= back ? o - back : o + period - back;
    const auto vscale = kScale ? hn::LoadU(d, scale_rep + ot) : hn::Zero(d);
    const auto vshift = kShift ? hn::LoadU(d, shift_rep + ot) : hn::Zero(d);
    const auto vcenter = kCenter ? hn::LoadU(d, center_rep + ot) : hn::Zero(d);
    StoreFreshLanes(d,
                    ApplyAffine<kScale, kShift, kCenter>(LoadF(d, x + t), vscale, vshift, vcenter),
                    back, y + t);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
NORMKIT_AFTER_NAMESPACE();

#endif  // include guard
