// SPDX-License-Identifier: Apache-2.0
// Overflow-checked size arithmetic for shapes that come from callers.
#ifndef NORMKIT_CORE_SIZE_MATH_H_
#define NORMKIT_CORE_SIZE_MATH_H_

#include <cstdint>

namespace normkit {

// *out = a * b; false if the product overflows int64.
inline bool CheckedMul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

// Half-open byte ranges [a, a + a_bytes) and [b, b + b_bytes) share a byte.
inline bool RangesOverlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + static_cast<uint64_t>(b_bytes) && pb < pa + static_cast<uint64_t>(a_bytes);
}

}  // namespace normkit

#endif  // NORMKIT_CORE_SIZE_MATH_H_
