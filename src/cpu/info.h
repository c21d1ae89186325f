// SPDX-License-Identifier: Apache-2.0
// What the CPU backend runs on, for the library's info functions.
#ifndef NORMKIT_CPU_INFO_H_
#define NORMKIT_CPU_INFO_H_

#include "cpu/kernels/affine.h"

namespace normkit {
namespace cpu {

// The SIMD target the kernels dispatch to on this CPU, e.g. "AVX2".
inline const char* SimdTargetName() {
  return kernels::DispatchedTargetName();
}

}  // namespace cpu
}  // namespace normkit

#endif  // NORMKIT_CPU_INFO_H_
