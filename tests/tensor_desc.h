// SPDX-License-Identifier: Apache-2.0
// Descriptor helpers shared by the tests and the benchmarks (no test framework here).
#ifndef NORMKIT_TESTS_TENSOR_DESC_H_
#define NORMKIT_TESTS_TENSOR_DESC_H_

#include <cstdint>
#include <vector>

#include "normkit/normkit.h"

namespace normkit_testing {

inline normkit_tensor Desc(void* data, normkit_layout layout, const std::vector<int64_t>& shape) {
  normkit_tensor t;
  normkit_tensor_init(&t, data, NORMKIT_DTYPE_FLOAT32, layout, static_cast<int32_t>(shape.size()),
                      shape.data());
  return t;
}

inline int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace normkit_testing

#endif  // NORMKIT_TESTS_TENSOR_DESC_H_
