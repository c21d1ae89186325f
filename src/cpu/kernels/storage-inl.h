// SPDX-License-Identifier: Apache-2.0
// Loads and stores of float vectors from / to a tensor's storage type (float, bfloat16,
// float16): what lets one kernel body serve every dtype. Loads widen exactly; stores
// round to nearest even, keep NaN a NaN (quieted, its payload's top bits kept, as F16C and
// AVX512_BF16 do) and overflow to Inf. Included once per SIMD target.
//
// float16 uses the CPU's conversions where Highway 1.0 has them (F16C on AVX2 and AVX-512,
// aarch64's NEON / SVE); elsewhere the integer conversions below: Highway 1.0's own
// emulation truncates and maps Inf and NaN to finite values. bfloat16 stores use AVX512_BF16's
// instruction on the AVX-512 targets where the CPU has it, else the integer rounding
// (Highway 1.0 truncates, and has no AVX512_BF16 target).

#if defined(NORMKIT_CPU_KERNELS_STORAGE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NORMKIT_CPU_KERNELS_STORAGE_INL_H_
#undef NORMKIT_CPU_KERNELS_STORAGE_INL_H_
#else
#define NORMKIT_CPU_KERNELS_STORAGE_INL_H_
#endif

#include <cstdint>

#include "cpu/kernels/storage.h"
#include "cpu/kernels/store-inl.h"
#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
#include "hwy/highway.h"

#undef NORMKIT_HARDWARE_F16
#if (HWY_ARCH_X86 && HWY_TARGET < HWY_SSE4 && !defined(HWY_DISABLE_F16C)) || \
    (HWY_ARCH_ARM_A64 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128)
#define NORMKIT_HARDWARE_F16 1
#else
#define NORMKIT_HARDWARE_F16 0
#endif

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using hwy::bfloat16_t;
using hwy::float16_t;

// float16 bits (in the low half of u32 lanes) to float, exactly: Inf and NaN (payload
// kept) included, subnormals through one float subtraction.
template <class D, class VU>
HWY_INLINE hn::Vec<D> FloatFromF16Bits(D d, VU h) {
  const hn::RebindToUnsigned<D> du;
  const auto sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
  const auto shifted = hn::ShiftLeft<13>(hn::And(h, hn::Set(du, 0x7FFFu)));
  const auto exponent = hn::And(shifted, hn::Set(du, 0x7C00u << 13));
  const auto normal = hn::Add(shifted, hn::Set(du, 112u << 23));  // rebias 15 -> 127
  const auto special = hn::Add(normal, hn::Set(du, 112u << 23));  // exponent 31 -> 255
  // Subnormal: m * 2^-24 = (2^-14 + m * 2^-24) - 2^-14, exact.
  const auto magic = hn::Set(du, 113u << 23);
  const auto subnormal =
      hn::BitCast(du, hn::Sub(hn::BitCast(d, hn::Add(shifted, magic)), hn::BitCast(d, magic)));
  auto bits = hn::IfThenElse(hn::Eq(exponent, hn::Zero(du)), subnormal, normal);
  bits = hn::IfThenElse(hn::Eq(exponent, hn::Set(du, 0x7C00u << 13)), special, bits);
  return hn::BitCast(d, hn::Or(bits, sign));
}

// float to float16 bits (u32 lanes), rounded to nearest even; NaN quieted with the top
// ten bits of its payload (F16C's result).
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> F16BitsFromFloat(D d, hn::Vec<D> v) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto u = hn::BitCast(du, v);
  const auto sign = hn::ShiftRight<16>(hn::And(u, hn::Set(du, 0x80000000u)));
  const auto a = hn::And(u, hn::Set(du, 0x7FFFFFFFu));  // |v|, below 2^31: signed compares
  const auto ai = hn::BitCast(di, a);
  // Normal results: rebias 127 -> 15, then add half an ulp less one plus the kept ulp's
  // lowest bit (ties to even); a carry out of the mantissa bumps the exponent, to Inf
  // from 65520 up.
  const auto odd = hn::And(hn::ShiftRight<13>(a), hn::Set(du, 1u));
  const auto normal =
      hn::ShiftRight<13>(hn::Add(hn::Add(a, hn::Set(du, 0xC8000FFFu)), odd));  // -112 << 23
  // Subnormal results (|v| < 2^-14): one float addition of 0.5 rounds at 2^-24.
  const auto half = hn::Set(du, 126u << 23);
  const auto subnormal =
      hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(d, a), hn::BitCast(d, half))), half);
  const auto nan =
      hn::Or(hn::Set(du, 0x7E00u), hn::And(hn::ShiftRight<13>(a), hn::Set(du, 0x3FFu)));
  auto bits =
      hn::IfThenElse(hn::RebindMask(du, hn::Lt(ai, hn::Set(di, 113 << 23))), subnormal, normal);
  bits = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x7F800000))), nan, bits);
  bits = hn::IfThenElse(hn::RebindMask(du, hn::And(hn::Gt(ai, hn::Set(di, (143 << 23) - 1)),
                                                   hn::Not(hn::Gt(ai, hn::Set(di, 0x7F800000))))),
                        hn::Set(du, 0x7C00u), bits);
  return hn::Or(bits, sign);
}

// float to bfloat16 bits (u32 lanes): the top half rounded to nearest even, NaN quieted.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<D>> BF16BitsFromFloat(D d, hn::Vec<D> v) {
  const hn::RebindToUnsigned<D> du;
  const auto u = hn::BitCast(du, v);
  const auto odd = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(hn::Add(u, hn::Set(du, 0x7FFFu)), odd));
  const auto quiet = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x40u));
  return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet, rounded);
}

// u32 lanes holding 16-bit values, as a vector of T (bfloat16_t / float16_t).
template <class D, class VU, typename T>
HWY_INLINE hn::Vec<hn::Rebind<T, D>> Narrow16(D, VU bits, T*) {
  const hn::Rebind<uint16_t, D> du16;
  const hn::Rebind<int32_t, D> di32;
  return hn::BitCast(hn::Rebind<T, D>(), hn::DemoteTo(du16, hn::BitCast(di32, bits)));
}

// ---- Loads: float lanes of d from storage of T.

template <class D>
HWY_INLINE hn::Vec<D> LoadF(D d, const float* p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadF(D d, const bfloat16_t* p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<bfloat16_t, D>(), p));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadF(D d, const float16_t* p) {
#if NORMKIT_HARDWARE_F16
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<float16_t, D>(), p));
#else
  const hn::Rebind<uint16_t, D> du16;
  const hn::RebindToUnsigned<D> du;
  return FloatFromF16Bits(d,
                          hn::PromoteTo(du, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(p))));
#endif
}

// double math (the shift-sum family's double kernels): x is double too.
template <class D>
HWY_INLINE hn::Vec<D> LoadF(D d, const double* p) {
  return hn::LoadU(d, p);
}

// Lanes [lo, hi) of d as a mask (0 <= lo <= hi <= Lanes(d)).
template <class D>
HWY_INLINE hn::Mask<D> LanesBetween(D d, size_t lo, size_t hi) {
  const hn::RebindToSigned<D> di;
  using TI = hn::TFromD<decltype(di)>;
  const auto lane = hn::Iota(di, 0);
  return hn::RebindMask(d, hn::AndNot(hn::Lt(lane, hn::Set(di, static_cast<TI>(lo))),
                                      hn::Lt(lane, hn::Set(di, static_cast<TI>(hi)))));
}

// LoadF of lanes [lo, hi) only, the others zero. Reads no other lane's memory only where
// hn::MaskedLoad suppresses faults for X's lane size (MaskedLoadsSafe below).
template <class D>
HWY_INLINE hn::Vec<D> LoadLanesF(D d, const float* p, size_t lo, size_t hi) {
  return hn::MaskedLoad(LanesBetween(d, lo, hi), d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadLanesF(D d, const double* p, size_t lo, size_t hi) {
  return hn::MaskedLoad(LanesBetween(d, lo, hi), d, p);
}
template <class D, typename T, hwy::EnableIf<sizeof(T) == 2>* = nullptr>
HWY_INLINE hn::Vec<D> LoadLanesF(D d, const T* p, size_t lo, size_t hi) {
  const hn::Rebind<uint16_t, D> du16;
  const auto bits =
      hn::MaskedLoad(LanesBetween(du16, lo, hi), du16, reinterpret_cast<const uint16_t*>(p));
  if constexpr (std::is_same<T, bfloat16_t>::value) {
    return hn::PromoteTo(d, hn::BitCast(hn::Rebind<bfloat16_t, D>(), bits));
  } else {
#if NORMKIT_HARDWARE_F16
    return hn::PromoteTo(d, hn::BitCast(hn::Rebind<float16_t, D>(), bits));
#else
    return FloatFromF16Bits(d, hn::PromoteTo(hn::RebindToUnsigned<D>(), bits));
#endif
  }
}

// Whether LoadLanesF of storage X never reads a masked-off lane's memory on this
// target: AVX-512's masked loads of every lane size, AVX2's of 32 and 64 bits.
template <class X>
constexpr bool MaskedLoadsSafe() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return true;
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  return sizeof(X) >= 4;
#else
  return false;
#endif
}

// Element 0 at p widened to float: the scalar paths of the kernels templated on storage.
HWY_INLINE float FloatAt(const float* p) {
  return *p;
}
template <typename T>
HWY_INLINE float FloatAt(const T* p) {
  return hn::GetLane(LoadF(hn::CappedTag<float, 1>(), p));
}

// Element 0 at p as the math type T (float, or double from double storage).
template <typename T, typename X>
HWY_INLINE T ScalarAt(const X* p) {
  if constexpr (sizeof(X) == 2) {
    return FloatAt(p);
  } else {
    return *p;
  }
}

// fn(x), x cast to a pointer to its storage type: a kernel templated on the storage of
// its input, called for a run-time Storage.
template <class Fn>
HWY_INLINE decltype(auto) WithStorage(const void* x, Storage s, const Fn& fn) {
  switch (s) {
    case Storage::kBFloat16: return fn(static_cast<const bfloat16_t*>(x));
    case Storage::kFloat16: return fn(static_cast<const float16_t*>(x));
    case Storage::kFloat32:
    default: return fn(static_cast<const float*>(x));
  }
}

// ---- Stores: float lanes of d to storage of T.

// The lanes of v as stored in T (T's own vector; float: v).
template <class D>
HWY_INLINE hn::Vec<D> Narrowed(D, hn::Vec<D> v, const float*) {
  return v;
}
template <class D>
HWY_INLINE hn::Vec<D> Narrowed(D, hn::Vec<D> v, const double*) {  // double math and storage
  return v;
}
template <class D>
HWY_INLINE hn::Vec<hn::Rebind<bfloat16_t, D>> Narrowed(D d, hn::Vec<D> v, const bfloat16_t*) {
#if NORMKIT_TARGET_BF16
  // A whole AVX-512 vector: AVX512_BF16's instruction where the CPU has it (one
  // instruction against the integer rounding's ten, which bound the bfloat16 kernels).
  if constexpr (hn::MaxLanes(D()) == 16) {
    if (UseBF16Instruction()) return hn::Vec<hn::Rebind<bfloat16_t, D>>{RoundToBF16(v.raw)};
  }
#endif
  return Narrow16(d, BF16BitsFromFloat(d, v), static_cast<bfloat16_t*>(nullptr));
}
template <class D>
HWY_INLINE hn::Vec<hn::Rebind<float16_t, D>> Narrowed(D d, hn::Vec<D> v, const float16_t*) {
#if NORMKIT_HARDWARE_F16
  return hn::DemoteTo(hn::Rebind<float16_t, D>(), v);
#else
  return Narrow16(d, F16BitsFromFloat(d, v), static_cast<float16_t*>(nullptr));
#endif
}

template <class D, typename T>
HWY_INLINE void StoreF(D d, hn::Vec<D> v, T* p) {
  hn::StoreU(Narrowed(d, v, static_cast<const T*>(p)), hn::Rebind<T, D>(), p);
}

// StoreF, non-temporally when kStream (p vector aligned, IsVectorAligned(d, p)). 16-bit
// vectors narrower than 16 bytes (SSE4's four lanes) store plainly: Highway 1.0's
// x86 Stream writes a whole 16 bytes.
template <bool kStream, class D, typename T>
HWY_INLINE void PutF(D d, hn::Vec<D> v, T* p) {
  constexpr bool kWhole = !HWY_ARCH_X86 || sizeof(T) * hn::MaxLanes(D()) >= 16;
  const auto narrowed = Narrowed(d, v, static_cast<const T*>(p));
  if constexpr (sizeof(T) == 2) {  // as integers: SVE has no Stream of 16-bit floats
    const hn::Rebind<uint16_t, D> du16;
    PutVector<kStream && kWhole>(du16, hn::BitCast(du16, narrowed), reinterpret_cast<uint16_t*>(p));
  } else {
    PutVector<kStream && kWhole>(hn::Rebind<T, D>(), narrowed, p);
  }
}

// Stores lanes [kept, Lanes(d)) of v at p, keeping the first `kept` elements there: the
// overlapping last vector of a span, whose first lanes were already written.
template <class D, typename T>
HWY_INLINE void StoreFreshLanes(D d, hn::Vec<D> v, size_t kept, T* p) {
  const hn::Rebind<T, D> dt;
  const auto narrowed = Narrowed(d, v, static_cast<const T*>(p));
  if constexpr (sizeof(T) == 2) {  // blend as integers: Highway 1.0 has no 16-bit float masks
    const hn::RebindToUnsigned<decltype(dt)> du16;
    const auto* q = reinterpret_cast<const uint16_t*>(p);
    hn::StoreU(hn::BitCast(dt, hn::IfThenElse(hn::FirstN(du16, kept), hn::LoadU(du16, q),
                                              hn::BitCast(du16, narrowed))),
               dt, p);
  } else {
    hn::StoreU(hn::IfThenElse(hn::FirstN(dt, kept), hn::LoadU(dt, p), narrowed), dt, p);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
NORMKIT_AFTER_NAMESPACE();

#endif  // NORMKIT_CPU_KERNELS_STORAGE_INL_H_ toggle
