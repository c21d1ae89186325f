// SPDX-License-Identifier: Apache-2.0
// Activations fused into the normalization's output pass: ReLU, and SiLU with a
// clamped exponential and a Newton-refined reciprocal.
// Included once per SIMD target (the caller's foreach_target), in the style of
// hwy/contrib: the building blocks of the kernels, not exported on their own.

#if defined(NORMKIT_CPU_KERNELS_ACTIVATION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NORMKIT_CPU_KERNELS_ACTIVATION_INL_H_
#undef NORMKIT_CPU_KERNELS_ACTIVATION_INL_H_
#else
#define NORMKIT_CPU_KERNELS_ACTIVATION_INL_H_
#endif

#include "cpu/kernels/float_tags-inl.h"
#include "cpu/kernels/group_norm.h"
#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
#include "hwy/highway.h"

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// SiLU's exponential is clamped to v in [kSiluLo, 87]: e^-v stays a finite float.
constexpr float kSiluLo = -88.0f;

// e^-v for v clamped to [kSiluLo, 87] (normal results): 2^k * P(f) with k = round(-v / ln2)
// and f = -v - k ln2 in [-ln2/2, ln2/2]; P is a degree-5 fit of e^f (relative error
// 1.4e-7, below a float ulp). Adding 1.5 * 2^23 + 127 rounds -v / ln2 to an integer
// in the low mantissa bits, already biased: shifted into the exponent field they are
// 2^k. Written in g = v + k ln2 = -f, with P's odd coefficients negated: 14 operations
// where e^t of a negated v with a separate rounding, conversion and bias took 17.
// max(kSiluLo, v), a NaN v kept: x86's max returns its second operand for NaN, NEON's,
// SVE's and WASM's return NaN; the emulated targets' return the other operand.
template <class D, class V>
HWY_INLINE V AtLeastSiluLo(D d, V v) {
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
  return hn::IfThenElse(hn::Lt(v, hn::Set(d, kSiluLo)), hn::Set(d, kSiluLo), v);
#else
  return hn::Max(hn::Set(d, kSiluLo), v);
#endif
}

// The caller clamps v from below (AtLeastSiluLo, shared with SiLU's product).
template <class D, class V>
HWY_INLINE V ExpOfNegClamped(D d, V v) {
  const hn::RebindToSigned<D> di;
  constexpr float kBiasedRound = 12582912.0f + 127.0f;  // 1.5 * 2^23 + exponent bias
  v = hn::Min(v, hn::Set(d, 87.0f));  // NaN: 87 on x86, NaN elsewhere; the product keeps it
  const auto biased = hn::MulAdd(v, hn::Set(d, -1.44269504f), hn::Set(d, kBiasedRound));
  const auto k = hn::Sub(biased, hn::Set(d, kBiasedRound));
  auto g = hn::MulAdd(k, hn::Set(d, 0.693145752f), v);  // ln2 split hi / lo
  g = hn::MulAdd(k, hn::Set(d, 1.42860677e-06f), g);
  auto p = hn::Set(d, -0.008297654f);
  p = hn::MulAdd(p, g, hn::Set(d, 0.041915383f));
  p = hn::MulAdd(p, g, hn::Set(d, -0.16667575f));
  p = hn::MulAdd(p, g, hn::Set(d, 0.49998894f));
  p = hn::MulAdd(p, g, hn::Set(d, -0.9999997f));
  p = hn::MulAdd(p, g, hn::Set(d, 1.0000001f));
  return hn::Mul(p, hn::BitCast(d, hn::ShiftLeft<23>(hn::BitCast(di, biased))));
}

template <Activation kAct, class D, class V>
HWY_INLINE V Activate(D d, V v) {
  if constexpr (kAct == Activation::kRelu) {
    // Not Max(v, 0): x86 max returns the second operand for NaN, and NaN must survive.
    return hn::IfThenZeroElse(hn::Lt(v, hn::Zero(d)), v);
  } else if constexpr (kAct == Activation::kSilu) {
    if constexpr (hn::MaxLanes(D()) < hn::MaxLanes(DF())) {
      // Partial vectors (peels, tails) go through a full one: the reciprocal estimate
      // of a 128-bit vector may differ from a 512-bit one's, and an element's result
      // must not depend on where its span starts.
      const DF df;
      return hn::Set(d, hn::GetLane(Activate<kAct>(df, hn::Set(df, hn::GetLane(v)))));
    }
    // v * 1 / (1 + e^-v): within 8 * 2^-24 relative of the exact value for v >= -87.
    // Below, 1 / (1 + e^-v) nears FLT_MIN (the clamp holds e^-v at e^88, and the
    // reciprocal estimate may flush): there |silu(v)| < 1.5e-36 and the result is within
    // 1.5e-36 of it (v enters the product clamped at kSiluLo, so -1e30 or -Inf give
    // -5.3e-37, not -6e-9 or -Inf). Exact subnormal results cost a branch or three more
    // operations a vector, about 10% of a SiLU-bound group norm (AVX2, measured). The
    // reciprocal is the hardware estimate plus one Newton step (~2^-23 relative),
    // cheaper than a division on most cores. Not on Zen 5: there v / a took 0.80 of
    // this one's time (1x64x56x56 G=32 NCHW SiLU, one thread), but Intel's 512-bit
    // division is slower, and a per-core choice would change bits by machine model.
    const auto vm = AtLeastSiluLo(d, v);  // the exponential's clamp too: no extra operation
    const auto a = hn::Add(hn::Set(d, 1.0f), ExpOfNegClamped(d, vm));
    const auto r0 = hn::ApproximateReciprocal(a);
    auto r = hn::Mul(r0, hn::NegMulAdd(a, r0, hn::Set(d, 2.0f)));
#if HWY_ARCH_ARM
    // ARM's estimate has 8 bits (x86's 12): a second Newton step for the same bound, and
    // NaN kept explicitly (NEON's minimum of NaN and 87 is 87: the estimate of a
    // finite a then carries no NaN into the product on every path).
    r = hn::Mul(r, hn::NegMulAdd(a, r, hn::Set(d, 2.0f)));
    return hn::IfThenElse(hn::IsNaN(v), v, hn::Mul(vm, r));
#else
    return hn::Mul(vm, r);
#endif
  } else {
    return v;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
NORMKIT_AFTER_NAMESPACE();

#endif  // NORMKIT_CPU_KERNELS_ACTIVATION_INL_H_ toggle
