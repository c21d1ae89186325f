// SPDX-License-Identifier: Apache-2.0
// The vector tags the normalization kernels share, per SIMD target: DF (float), DD (the
// doubles of DF's bits, for sums) and DH (half of DF, the halves widened to DD).

// Whether a target's vectors are whole 128-bit blocks of a width fixed at compile time
// (x86, NEON): the transposed reductions (lane-parallel short spans) rely on that
// layout. The scalable targets (SVE) and the one-lane ones take the per-span paths.
#ifndef NORMKIT_FIXED_BLOCKS
#define NORMKIT_FIXED_BLOCKS (HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE)
#endif

#if defined(NORMKIT_CPU_KERNELS_FLOAT_TAGS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NORMKIT_CPU_KERNELS_FLOAT_TAGS_INL_H_
#undef NORMKIT_CPU_KERNELS_FLOAT_TAGS_INL_H_
#else
#define NORMKIT_CPU_KERNELS_FLOAT_TAGS_INL_H_
#endif

#include "cpu/kernels/target_attributes-inl.h"  // IWYU pragma: keep: per target
#include "hwy/highway.h"

NORMKIT_BEFORE_NAMESPACE();
namespace normkit {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
#if HWY_TARGET == HWY_SCALAR
using DD = hn::Rebind<double, DF>;
#else
using DD = hn::Repartition<double, DF>;
using DH = hn::Half<DF>;
#endif

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace normkit
NORMKIT_AFTER_NAMESPACE();

#endif  // NORMKIT_CPU_KERNELS_FLOAT_TAGS_INL_H_ toggle
