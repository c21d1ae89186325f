// SPDX-License-Identifier: Apache-2.0
// Tensors of float32, bfloat16 or float16 storage for the half-storage tests, the dtype
// pairs the ops take, and the check of an output against its double reference within
// one unit of the output format's last place.
#ifndef NORMKIT_TESTS_HALF_TENSOR_H_
#define NORMKIT_TESTS_HALF_TENSOR_H_

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "half_reference.h"
#include "normkit/normkit.h"
#include "test_util.h"

namespace normkit_test {

// A tensor's storage: bytes holding elements of `dtype`, one element of slack in front
// so that the data can start off a vector boundary.
struct Storage {
  Storage(int32_t dtype, int64_t n) : dtype(dtype), n(n), raw((n + 2) * Size()) {}
  int64_t Size() const { return dtype == kF32 ? 4 : 2; }
  void* data(bool shifted = false) { return raw.data() + (shifted ? Size() : 0); }
  // Element i as a double (exact).
  double Get(int64_t i, bool shifted = false) {
    const unsigned char* p = static_cast<unsigned char*>(data(shifted)) + i * Size();
    if (dtype == kF32) {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    return Decode(h, FormatOf(dtype));
  }
  uint32_t Bits(int64_t i, bool shifted = false) {
    const unsigned char* p = static_cast<unsigned char*>(data(shifted)) + i * Size();
    uint32_t u = 0;
    std::memcpy(&u, p, static_cast<size_t>(Size()));
    return u;
  }
  // Stores v (rounded plainly for the half formats).
  void Set(int64_t i, float v, bool shifted = false) {
    unsigned char* p = static_cast<unsigned char*>(data(shifted)) + i * Size();
    if (dtype == kF32) {
      std::memcpy(p, &v, 4);
    } else {
      const uint16_t h = Narrow(v, FormatOf(dtype));
      std::memcpy(p, &h, 2);
    }
  }
  void SetBits(int64_t i, uint16_t h) { std::memcpy(raw.data() + i * 2, &h, 2); }

  int32_t dtype;
  int64_t n;
  std::vector<unsigned char> raw;
};

inline normkit_tensor Tensor(Storage* s, const std::vector<int64_t>& shape, normkit_layout layout,
                             bool shifted = false) {
  normkit_tensor t = Desc(s->data(shifted), layout, shape);
  t.dtype = s->dtype;
  return t;
}

struct Pair {
  int32_t x, y;
};
inline const Pair kPairs[] = {{kF32, kBF16}, {kF32, kF16},  {kBF16, kBF16},
                              {kF16, kF16},  {kBF16, kF32}, {kF16, kF32}};

// Checks y against the double result `want` of its element: within one unit in the
// last place of the output format (the float32 result rounded once more), exactly
// when that is exact. float_error: the float32 result itself may be off by float's
// error at `magnitude` (a sum that cancels, as beta's with a normalized value), so a half
// output may also be that far and one unit from want.
inline void ExpectOutput(Storage& y, int64_t i, double want, double magnitude, bool shifted,
                         int64_t* wrong, bool float_error = false) {
  if (*wrong >= 5) return;
  const double got = y.Get(i, shifted);
  bool ok;
  if (y.dtype == kF32) {
    ok = std::fabs(got - want) <= 4e-7 * magnitude + 1e-30;
  } else {
    const HalfFormat f = FormatOf(y.dtype);
    const uint16_t ref = Encode(want, f);
    const auto bits = static_cast<uint16_t>(y.Bits(i, shifted));
    const int d = static_cast<int>(bits & 0x7FFF) - static_cast<int>(ref & 0x7FFF);
    ok = bits == ref || ((bits & 0x8000) == (ref & 0x8000) && (d == 1 || d == -1)) ||
         ((bits & 0x7FFF) <= 1 && (ref & 0x7FFF) <= 1);  // +-0 and the smallest subnormal
    if (!ok && float_error) {
      const double unit = std::fabs(Decode(static_cast<uint16_t>((bits & 0x7FFF) + 1), f) -
                                    Decode(bits & 0x7FFF, f));
      ok = std::fabs(got - want) <= unit + 4e-7 * magnitude;
    }
  }
  if (!ok) {
    ADD_FAILURE() << "element " << i << ": got " << got << ", want " << want;
    ++*wrong;
  }
}

// The dtype a golden-vector file's x_dtype / y_dtype field names (the rest of its line,
// leading blanks included).
inline int32_t DtypeNamed(const std::string& field) {
  const std::string name = field.substr(field.find_first_not_of(' '));
  if (name == "bfloat16") return kBF16;
  if (name == "float16") return kF16;
  EXPECT_EQ(name, "float32");
  return kF32;
}

}  // namespace normkit_test

#endif  // NORMKIT_TESTS_HALF_TENSOR_H_
