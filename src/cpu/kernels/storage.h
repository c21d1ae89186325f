// SPDX-License-Identifier: Apache-2.0
// The element types tensors are stored in. Kernels compute in float32 whatever the
// storage: each is a template over the types of its input and output, loading into float
// vectors and storing rounded to nearest even (cpu/kernels/storage-inl.h).
#ifndef NORMKIT_CPU_KERNELS_STORAGE_H_
#define NORMKIT_CPU_KERNELS_STORAGE_H_

#include <cstdint>
#include <cstring>

#include "normkit/normkit.h"

namespace normkit {
namespace kernels {

enum class Storage : int { kFloat32, kBFloat16, kFloat16 };

// The storage of a float32, bfloat16 or float16 tensor (callers validated the dtype).
inline Storage StorageOf(int32_t dtype) {
  return dtype == NORMKIT_DTYPE_BFLOAT16  ? Storage::kBFloat16
         : dtype == NORMKIT_DTYPE_FLOAT16 ? Storage::kFloat16
                                          : Storage::kFloat32;
}

inline int64_t StorageBytes(Storage s) {
  return s == Storage::kFloat32 ? 4 : 2;
}

// Element i of x (stored as `s`) widened to float, one at a time: for the rare scalar
// paths (the exact statistics); the kernels widen a vector at a time (storage-inl.h).
inline float ElementAt(const void* x, Storage s, int64_t i) {
  if (s == Storage::kFloat32) return static_cast<const float*>(x)[i];
  const uint32_t h = static_cast<const uint16_t*>(x)[i];
  uint32_t bits;
  if (s == Storage::kBFloat16) {
    bits = h << 16;
  } else {
    const uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
      const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
      return sign ? -magnitude : magnitude;
    }
    bits = sign | (exponent == 0x1f ? 0x7f800000u : (exponent + 112) << 23) | mantissa << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace kernels
}  // namespace normkit

#endif  // NORMKIT_CPU_KERNELS_STORAGE_H_
