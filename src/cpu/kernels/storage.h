// SPDX-License-Identifier: Apache-2.0
// The element types tensors are stored in. Kernels compute in float32 whatever the
// storage: each is a template over the types of its input and output, loading into float
// vectors and storing rounded to nearest even (cpu/kernels/storage-inl.h).
#ifndef NORMKIT_CPU_KERNELS_STORAGE_H_
#define NORMKIT_CPU_KERNELS_STORAGE_H_

#include <cstdint>

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

}  // namespace kernels
}  // namespace normkit

#endif  // NORMKIT_CPU_KERNELS_STORAGE_H_
