// SPDX-License-Identifier: Apache-2.0
// The stores every kernel's output pass shares (affine, the norms, shift-sum): plain or
// streaming (non-temporal, for outputs too large to stay in cache), and the alignment
// test that streaming stores need. Included once per SIMD target.

#if defined(NORMKIT_CPU_KERNELS_STORE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NORMKIT_CPU_KERNELS_STORE_INL_H_
#undef NORMKIT_CPU_KERNELS_STORE_INL_H_
#else
#define NORMKIT_CPU_KERNELS_STORE_INL_H_
#endif

#include <cstdint>

#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
#include "hwy/highway.h"

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whether p sits on a boundary of a whole vector of d (where a streaming store may go).
template <class D, typename T>
HWY_INLINE bool IsVectorAligned(D d, const T* p) {
  return reinterpret_cast<uintptr_t>(p) % (hn::Lanes(d) * sizeof(T)) == 0;
}

// Stores one vector, non-temporally when kStream (then p must be vector aligned). Tags of
// one lane (tails, peels) always store plainly.
template <bool kStream, class D, class V, typename T>
HWY_INLINE void PutVector(D d, V v, T* p) {
  if constexpr (kStream && hn::MaxLanes(D()) > 1) {
    hn::Stream(v, d, p);
  } else {
    hn::StoreU(v, d, p);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
NORMKIT_AFTER_NAMESPACE();

#endif  // NORMKIT_CPU_KERNELS_STORE_INL_H_ toggle
