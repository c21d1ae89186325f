// SPDX-License-Identifier: Apache-2.0
// bfloat16 and float16, written plainly in double: decoding with ldexp, rounding to
// nearest even with nearbyint on the scaled value. The reference the storage tests check
// normkit's conversions (integer tricks, F16C) against.
#ifndef NORMKIT_TESTS_HALF_REFERENCE_H_
#define NORMKIT_TESTS_HALF_REFERENCE_H_

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "normkit/normkit.h"

namespace normkit_test {

struct HalfFormat {
  int mantissa_bits;
  int exponent_bits;
  int bias;
  const char* name;
};

inline constexpr HalfFormat kBFloat16{7, 8, 127, "bfloat16"};
inline constexpr HalfFormat kFloat16{10, 5, 15, "float16"};

// The storage dtypes the half tests pair, and their names in messages.
inline constexpr int32_t kF32 = NORMKIT_DTYPE_FLOAT32;
inline constexpr int32_t kBF16 = NORMKIT_DTYPE_BFLOAT16;
inline constexpr int32_t kF16 = NORMKIT_DTYPE_FLOAT16;

inline const char* DtypeLabel(int32_t dtype) {
  return dtype == kF32 ? "float32" : dtype == kBF16 ? "bfloat16" : "float16";
}

inline HalfFormat FormatOf(int32_t dtype) {
  return dtype == NORMKIT_DTYPE_BFLOAT16 ? kBFloat16 : kFloat16;
}

inline uint32_t BitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float FloatOfBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bool IsNaNBits(uint16_t h, HalfFormat f) {
  const uint32_t e = (h >> f.mantissa_bits) & ((1u << f.exponent_bits) - 1);
  return e == (1u << f.exponent_bits) - 1 && (h & ((1u << f.mantissa_bits) - 1)) != 0;
}

// The value of `h` (NaN for NaNs).
inline double Decode(uint16_t h, HalfFormat f) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int e = (h >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int m = h & ((1 << f.mantissa_bits) - 1);
  if (e == (1 << f.exponent_bits) - 1) return m ? std::nan("") : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, 1 - f.bias - f.mantissa_bits);
  return sign * std::ldexp(m + (1 << f.mantissa_bits), e - f.bias - f.mantissa_bits);
}

// `v` (not NaN) rounded to nearest even in the format; past the largest finite value
// (and its half ulp) Inf.
inline uint16_t Encode(double v, HalfFormat f) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const uint16_t inf =
      static_cast<uint16_t>(sign | (((1 << f.exponent_bits) - 1) << f.mantissa_bits));
  double a = std::fabs(v);
  if (a == 0) return sign;
  if (std::isinf(a)) return inf;
  int e;
  std::frexp(a, &e);
  const int min_exp = 1 - f.bias, max_exp = f.bias;
  int lead = e - 1 < min_exp ? min_exp : e - 1;  // exponent of the leading bit's place
  const double q = std::ldexp(a, f.mantissa_bits - lead);
  const int fe = std::fegetround();
  std::fesetround(FE_TONEAREST);
  double r = std::nearbyint(q);  // ties to even
  std::fesetround(fe);
  if (r == std::ldexp(1.0, f.mantissa_bits + 1)) {  // carried into the next binade
    ++lead;
    r /= 2;
  }
  if (lead > max_exp) return inf;
  const auto m = static_cast<uint32_t>(r);
  if (m < (1u << f.mantissa_bits)) return static_cast<uint16_t>(sign | m);  // subnormal or 0
  return static_cast<uint16_t>(sign | ((lead + f.bias) << f.mantissa_bits) |
                               (m - (1u << f.mantissa_bits)));
}

// The NaN a float NaN narrows to: quieted, the top bits of its payload kept.
inline uint16_t EncodeNaN(float nan, HalfFormat f) {
  const uint32_t u = BitsOf(nan);
  const uint32_t top = (u & 0x7FFFFF) >> (23 - f.mantissa_bits);
  return static_cast<uint16_t>(((u >> 16) & 0x8000) |
                               (((1u << f.exponent_bits) - 1) << f.mantissa_bits) |
                               (1u << (f.mantissa_bits - 1)) | top);
}

// The storage bits of float `v` in the format: Encode, or EncodeNaN.
inline uint16_t Narrow(float v, HalfFormat f) {
  return std::isnan(v) ? EncodeNaN(v, f) : Encode(v, f);
}

}  // namespace normkit_test

#endif  // NORMKIT_TESTS_HALF_REFERENCE_H_
