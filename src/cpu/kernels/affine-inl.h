// SPDX-License-Identifier: Apache-2.0
// SIMD spans for per-channel affines, shared by every op that ends in one
// (affine, batch norm, and later group norm's apply pass). Included once per target.

#if defined(NORMKIT_CPU_KERNELS_AFFINE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NORMKIT_CPU_KERNELS_AFFINE_INL_H_
#undef NORMKIT_CPU_KERNELS_AFFINE_INL_H_
#else
#define NORMKIT_CPU_KERNELS_AFFINE_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <bool kScale, bool kShift, class V>
HWY_INLINE V ApplyAffine(V x, V scale, V shift) {
  if constexpr (kScale && kShift) {
    return hn::MulAdd(x, scale, shift);
  } else if constexpr (kScale) {
    return x * scale;
  } else if constexpr (kShift) {
    return x + shift;
  } else {
    return x;
  }
}

// One element through a 1-lane vector: the same instruction (FMA or not) as the
// vector body, so an element's result never depends on where a span starts.
template <bool kScale, bool kShift>
HWY_INLINE void AffineOne(const float* x, float* y, float scale, float shift) {
  const hn::CappedTag<float, 1> d1;
  hn::StoreU(ApplyAffine<kScale, kShift>(hn::LoadU(d1, x), hn::Set(d1, scale), hn::Set(d1, shift)),
             d1, y);
}

template <class D>
HWY_INLINE bool IsVectorAligned(D d, const float* p) {
  return reinterpret_cast<uintptr_t>(p) % (hn::Lanes(d) * sizeof(float)) == 0;
}

// y[i] = x[i] * scale + shift for i < n. x may equal y (in place).
template <bool kScale, bool kShift, bool kStream>
HWY_INLINE void AffineBroadcastSpan(const float* x, float* y, size_t n, float scale, float shift) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  if (n < lanes) {
    for (; i < n; ++i) AffineOne<kScale, kShift>(x + i, y + i, scale, shift);
    return;
  }
  const auto vscale = hn::Set(d, scale);
  const auto vshift = hn::Set(d, shift);
  if constexpr (kStream) {
    for (; i < n && !IsVectorAligned(d, y + i); ++i) {
      AffineOne<kScale, kShift>(x + i, y + i, scale, shift);
    }
    for (; i + lanes <= n; i += lanes) {
      hn::Stream(ApplyAffine<kScale, kShift>(hn::LoadU(d, x + i), vscale, vshift), d, y + i);
    }
  } else {
    for (; i + lanes <= n; i += lanes) {
      hn::StoreU(ApplyAffine<kScale, kShift>(hn::LoadU(d, x + i), vscale, vshift), d, y + i);
    }
  }
  if constexpr (kStream) {
    // Streamed lines must not be read back (that waits for them to reach memory):
    // the tail goes one element at a time.
    for (; i < n; ++i) AffineOne<kScale, kShift>(x + i, y + i, scale, shift);
  }
  if (i < n) {
    // Last vector overlaps what is done: keep those lanes as already written
    // (correct in place too), compute only the new ones. Never reads past n.
    const size_t t = n - lanes;
    const auto fresh = hn::Not(hn::FirstN(d, i - t));
    const auto v = ApplyAffine<kScale, kShift>(hn::LoadU(d, x + t), vscale, vshift);
    hn::StoreU(hn::IfThenElse(fresh, v, hn::LoadU(d, y + t)), d, y + t);
  }
}

// y[i] = x[i] * scale_rep[o_i] + shift_rep[o_i], o_i = (o + i) % period.
// Requires period >= Lanes and rep arrays of period + Lanes values.
template <bool kScale, bool kShift, bool kStream>
HWY_INLINE void AffinePeriodicSpan(const float* x, float* y, size_t n, const float* scale_rep,
                                   const float* shift_rep, size_t period, size_t o) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  const auto one = [&](size_t k, size_t ok) {
    AffineOne<kScale, kShift>(x + k, y + k, kScale ? scale_rep[ok] : 0.0f,
                              kShift ? shift_rep[ok] : 0.0f);
  };
  if (n < lanes || period < lanes) {
    for (; i < n; ++i) {
      one(i, o);
      if (++o == period) o = 0;
    }
    return;
  }
  if constexpr (kStream) {
    for (; i < n && !IsVectorAligned(d, y + i); ++i) {
      one(i, o);
      if (++o == period) o = 0;
    }
  }
  // Runs of whole vectors that do not wrap the period: a tight loop with no
  // index arithmetic beyond the pointer bump. rep holds period + lanes values,
  // so a run may also be one vector that straddles the wrap.
  while (i + lanes <= n) {
    // lanes is a power of two: round down with a mask, not a division.
    size_t run = (period - o) & ~(lanes - 1);
    if (run == 0) run = lanes;
    const size_t avail = (n - i) & ~(lanes - 1);
    if (run > avail) run = avail;
    // (An absent term's rep is null: no arithmetic on it, found by fuzz_affine.)
    const float* HWY_RESTRICT sr = kScale ? scale_rep + o : nullptr;
    const float* HWY_RESTRICT br = kShift ? shift_rep + o : nullptr;
    for (size_t k = 0; k < run; k += lanes) {
      const auto vscale = kScale ? hn::LoadU(d, sr + k) : hn::Zero(d);
      const auto vshift = kShift ? hn::LoadU(d, br + k) : hn::Zero(d);
      const auto v = ApplyAffine<kScale, kShift>(hn::LoadU(d, x + i + k), vscale, vshift);
      if constexpr (kStream) {
        hn::Stream(v, d, y + i + k);
      } else {
        hn::StoreU(v, d, y + i + k);
      }
    }
    i += run;
    o += run;
    if (o >= period) o -= period;
  }
  if constexpr (kStream) {  // no read-back of streamed lines (see AffineBroadcastSpan)
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
    const auto fresh = hn::Not(hn::FirstN(d, back));
    const auto v = ApplyAffine<kScale, kShift>(hn::LoadU(d, x + t), vscale, vshift);
    hn::StoreU(hn::IfThenElse(fresh, v, hn::LoadU(d, y + t)), d, y + t);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
HWY_AFTER_NAMESPACE();

#endif  // include guard
