// SPDX-License-Identifier: Apache-2.0
// Shared test helpers: descriptors, random data, thread counts, and the plainly
// written double-precision references (Eigen) every kernel is checked against.
#ifndef NORMKIT_TESTS_TEST_UTIL_H_
#define NORMKIT_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "normkit/normkit.h"
#include "tensor_desc.h"

namespace normkit_test {

using normkit_testing::Desc;
using normkit_testing::Numel;

inline std::vector<float> RandomVector(int64_t n, uint32_t seed, float lo = -2.0f,
                                       float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& e : v) e = dist(rng);
  return v;
}

// RAII context.
struct Context {
  explicit Context(int threads) {
    EXPECT_EQ(normkit_context_create(threads, &ctx), NORMKIT_SUCCESS);
  }
  ~Context() { normkit_context_destroy(ctx); }
  normkit_context* ctx = nullptr;
};

// A tensor's logical dims [N, C, spatial...] and layout, for the tests' shape lists.
struct Shape {
  std::vector<int64_t> dims;
  normkit_layout layout;
};

// "8x3x1000 NCHW".
inline std::string Describe(const Shape& s) {
  std::string name;
  for (int64_t d : s.dims) name += (name.empty() ? "" : "x") + std::to_string(d);
  return name + (s.layout == NORMKIT_LAYOUT_CHANNELS_LAST ? " NHWC" : " NCHW");
}

// Logical (n, c, s) of a dense tensor -> memory offset.
inline int64_t Offset(int64_t n, int64_t c, int64_t s, int64_t C, int64_t S, bool channels_last) {
  return channels_last ? (n * S + s) * C + c : (n * C + c) * S + s;
}

// y = x * scale + shift in double. Each sample is viewed as a C x S matrix (channels
// first) or S x C (channels last) and the parameters broadcast along the other axis.
inline std::vector<double> ReferenceAffine(const std::vector<float>& x, int64_t N, int64_t C,
                                           int64_t S, bool channels_last, const float* scale,
                                           const float* shift, bool per_sample) {
  using RowMajor = Eigen::Array<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < N; ++n) {
    Eigen::ArrayXd s = Eigen::ArrayXd::Ones(C), b = Eigen::ArrayXd::Zero(C);
    for (int64_t c = 0; c < C; ++c) {
      const int64_t p = per_sample ? n * C + c : c;
      if (scale) s[c] = scale[p];
      if (shift) b[c] = shift[p];
    }
    RowMajor xs(channels_last ? S : C, channels_last ? C : S);
    for (int64_t i = 0; i < C * S; ++i) xs.data()[i] = x[n * C * S + i];
    RowMajor ys = channels_last ? RowMajor((xs.rowwise() * s.transpose()).rowwise() + b.transpose())
                                : RowMajor((xs.colwise() * s).colwise() + b);
    for (int64_t i = 0; i < C * S; ++i) y[n * C * S + i] = ys.data()[i];
  }
  return y;
}

// |got - want| within a few float roundings of the terms that produced `want`
// (fused or unfused multiply-add): scale-aware, never a fixed absolute guess.
inline void ExpectNear(const std::vector<float>& got, const std::vector<double>& want,
                       const std::vector<double>& magnitude, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = 4.0 * 1.1920929e-7 * magnitude[i] + 1e-30;
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol)) {
      if (++bad <= 5) {
        ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want[i]
                      << " (tolerance " << tol << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// Keeps the first result of a series (thread counts, say) in `first` and requires each
// later one to be bitwise identical to it.
inline void ExpectSameBitsAsFirst(std::vector<float>* first, const std::vector<float>& got,
                                  int threads) {
  if (first->empty()) {
    *first = got;
    return;
  }
  ASSERT_EQ(first->size(), got.size());
  EXPECT_EQ(std::memcmp(first->data(), got.data(), got.size() * sizeof(float)), 0)
      << "threads=" << threads;
}

}  // namespace normkit_test

#endif  // NORMKIT_TESTS_TEST_UTIL_H_
