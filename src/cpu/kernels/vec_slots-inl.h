// SPDX-License-Identifier: Apache-2.0
// A fixed number of vectors kept together (register blocks, accumulators) in a form every
// SIMD target accepts. The scalable targets' vectors (SVE's svfloat32_t ...) are
// sizeless: they cannot be array elements or class members. There the slots are lanes
// in memory, loaded and stored per access (the compiler keeps what it can in registers);
// elsewhere they are an array of vectors, which the compiler keeps in registers.

#if defined(NORMKIT_CPU_KERNELS_VEC_SLOTS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NORMKIT_CPU_KERNELS_VEC_SLOTS_INL_H_
#undef NORMKIT_CPU_KERNELS_VEC_SLOTS_INL_H_
#else
#define NORMKIT_CPU_KERNELS_VEC_SLOTS_INL_H_
#endif

#include <cstddef>

#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
#include "hwy/highway.h"

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// K vectors of tag D: Get(k) and Set(k, v), k < K.
template <class D, size_t K>
class VecSlots {
 public:
  using V = hn::Vec<D>;
  // Declared here, inside the target's attribute region: an implicit constructor would
  // not carry the target's attributes, and GCC then refuses to inline the vectors' own.
  HWY_INLINE VecSlots() {}
#if HWY_HAVE_SCALABLE
  HWY_INLINE V Get(size_t k) const {
    return hn::Load(D(), lanes_ + k * kStride);
  }
  HWY_INLINE void Set(size_t k, V v) {
    hn::Store(v, D(), lanes_ + k * kStride);
  }

 private:
  static constexpr size_t kStride = hn::MaxLanes(D());
  HWY_ALIGN hn::TFromD<D> lanes_[K * kStride];
#else
  HWY_INLINE V Get(size_t k) const {
    return v_[k];
  }
  HWY_INLINE void Set(size_t k, V v) {
    v_[k] = v;
  }

 private:
  V v_[K];
#endif
};

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
NORMKIT_AFTER_NAMESPACE();

#endif  // NORMKIT_CPU_KERNELS_VEC_SLOTS_INL_H_ toggle
