// SPDX-License-Identifier: Apache-2.0
// NORMKIT_BEFORE_NAMESPACE() / NORMKIT_AFTER_NAMESPACE(): Highway's HWY_BEFORE_NAMESPACE /
// HWY_AFTER_NAMESPACE for normkit's kernels, which on x86's AVX-512 targets also allow
// AVX512_BF16's rounding instruction (Highway 1.0 has no target with it). The kernels use
// it only behind UseBF16Instruction(), a run-time test of the CPU, so the AVX-512 code
// still runs on CPUs without it; the compiler emits it nowhere else (no __bf16 types).
// NORMKIT_TARGET_BF16 says whether the current target allows it. NORMKIT_ATTR is HWY_ATTR
// for lambdas with the same targets.
//
// Included again for every SIMD target (no include guard): each inclusion redefines the
// macros for the target being compiled, after hwy/highway.h.

#undef NORMKIT_TARGET_BF16
#undef NORMKIT_BEFORE_NAMESPACE
#undef NORMKIT_AFTER_NAMESPACE
#undef NORMKIT_ATTR
#undef NORMKIT_TARGET_STR

#include "cpu/kernels/bf16_hardware.h"

#if NORMKIT_BF16_INSTRUCTION && (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)
#define NORMKIT_TARGET_BF16 1
#define NORMKIT_TARGET_STR HWY_TARGET_STR ",avx512bf16"
#define NORMKIT_BEFORE_NAMESPACE()        \
  HWY_PUSH_ATTRIBUTES(NORMKIT_TARGET_STR) \
  static_assert(true, "For requiring trailing semicolon")
#define NORMKIT_AFTER_NAMESPACE() \
  HWY_POP_ATTRIBUTES              \
  static_assert(true, "For requiring trailing semicolon")
#define NORMKIT_ATTR __attribute__((target(NORMKIT_TARGET_STR)))
#else
#define NORMKIT_TARGET_BF16 0
#define NORMKIT_BEFORE_NAMESPACE() HWY_BEFORE_NAMESPACE()
#define NORMKIT_AFTER_NAMESPACE() HWY_AFTER_NAMESPACE()
#define NORMKIT_ATTR HWY_ATTR
#endif
