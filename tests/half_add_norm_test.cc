// SPDX-License-Identifier: Apache-2.0
// The fused residual add + layer / RMS norm on bfloat16 / float16 tensors: h against the
// two float adds written plainly and rounded plainly to x's format, y bitwise the unfused
// normkit_layer_norm / normkit_rms_norm of that h and within one unit of the double
// reference of its norm; every dtype pair, in place on every input, data off a vector
// boundary, streamed large calls, every SIMD target, thread counts, overflow and
// subnormal sums, and the golden vectors of tests/vectors/add_norm.txt.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "add_norm_pairings.h"
#include "half_reference.h"
#include "half_targets.h"
#include "half_tensor.h"
#include "normkit/normkit.h"
#include "test_util.h"
#include "vectors.h"

namespace normkit_test {
namespace {

struct HalfAddCase {
  int64_t rows, D;
  bool rms, has_bias, write_h;
  float magnitude = 1.0f;  // scales x and the residual
  bool shifted = false;    // every tensor's data one element off its vector boundary
  int threads = 2;
  int64_t* overflowed_rows = nullptr;  // receives the count of rows with an infinite h
};

// One call of the fused op on tensors of x's dtype (x, residual, h) and y's; the outputs
// on arrays of their own unless the caller points them at an input.
struct AddNormCall {
  bool rms;
  const float *bias, *gamma, *beta;
  normkit_status operator()(const normkit_context* ctx, const normkit_tensor& x,
                            const normkit_tensor& r, const normkit_tensor& y,
                            const normkit_tensor* h, float* mean, float* rstd) const {
    return rms ? normkit_add_rms_norm(ctx, &x, &r, bias, gamma, 1e-5f, &y, h, rstd)
               : normkit_add_layer_norm(ctx, &x, &r, bias, gamma, beta, 1e-5f, &y, h, mean, rstd);
  }
};

// Fills x and the residual with values of their format (rounded plainly).
void Fill(Storage* x, Storage* r, int64_t n, float magnitude, bool shifted) {
  const std::vector<float> xv = RandomVector(n, 31, -3.0f, 5.0f), rv = RandomVector(n, 32);
  for (int64_t i = 0; i < n; ++i) {
    x->Set(i, xv[static_cast<size_t>(i)] * magnitude, shifted);
    r->Set(i, rv[static_cast<size_t>(i)] * magnitude, shifted);
  }
}

void RunHalfAddNorm(const Pair& pair, const HalfAddCase& k) {
  SCOPED_TRACE(std::string(k.rms ? "add_rms_norm " : "add_layer_norm ") + DtypeLabel(pair.x) +
               " -> " + DtypeLabel(pair.y) + " [" + std::to_string(k.rows) + ", " +
               std::to_string(k.D) + "] bias=" + std::to_string(k.has_bias) +
               " h=" + std::to_string(k.write_h) + " magnitude=" + std::to_string(k.magnitude) +
               " shifted=" + std::to_string(k.shifted) + " threads=" + std::to_string(k.threads));
  const int64_t rows = k.rows, D = k.D, n = rows * D;
  const bool sh = k.shifted;
  const std::vector<float> bias = RandomVector(D, 33), gamma = RandomVector(D, 34, 0.5f, 1.5f),
                           beta = RandomVector(D, 35);
  const AddNormCall call{k.rms, k.has_bias ? bias.data() : nullptr, gamma.data(), beta.data()};
  Storage x(pair.x, n), r(pair.x, n), y(pair.y, n), h(pair.x, n), h_want(pair.x, n),
      y_unfused(pair.y, n);
  Fill(&x, &r, n, k.magnitude, sh);
  // h by its definition: two float adds, then rounded plainly to x's format.
  for (int64_t i = 0; i < n; ++i) {
    float s = static_cast<float>(x.Get(i, sh)) + static_cast<float>(r.Get(i, sh));
    if (k.has_bias) s = s + bias[static_cast<size_t>(i % D)];
    h_want.Set(i, s, sh);
  }
  for (int64_t i = 0; i < n; ++i) h.Set(i, -7.0f, sh);
  const uint32_t untouched = h.Bits(0, sh);
  const auto layout = NORMKIT_LAYOUT_CHANNELS_FIRST;
  const normkit_tensor xt = Tensor(&x, {rows, D}, layout, sh),
                       rt = Tensor(&r, {rows, D}, layout, sh),
                       yt = Tensor(&y, {rows, D}, layout, sh),
                       ht = Tensor(&h, {rows, D}, layout, sh),
                       hwt = Tensor(&h_want, {rows, D}, layout, sh),
                       yut = Tensor(&y_unfused, {rows, D}, layout, sh);
  std::vector<float> mean(rows, -9.0f), rstd(rows, -9.0f), mean_u(rows), rstd_u(rows);
  Context ctx(k.threads);
  ASSERT_EQ(call(ctx.ctx, xt, rt, yt, k.write_h ? &ht : nullptr, mean.data(), rstd.data()),
            NORMKIT_SUCCESS)
      << normkit_last_error();
  // The unfused norm of h as stored: y and the statistics, bit for bit.
  ASSERT_EQ(k.rms ? normkit_rms_norm(ctx.ctx, &hwt, gamma.data(), 1e-5f, &yut, rstd_u.data())
                  : normkit_layer_norm(ctx.ctx, &hwt, gamma.data(), beta.data(), 1e-5f, &yut,
                                       mean_u.data(), rstd_u.data()),
            NORMKIT_SUCCESS)
      << normkit_last_error();
  int64_t wrong = 0;
  for (int64_t i = 0; i < n && wrong < 5; ++i) {
    const uint32_t want_h = k.write_h ? h_want.Bits(i, sh) : untouched;
    if (h.Bits(i, sh) != want_h) {
      ADD_FAILURE() << "h element " << i << ": got " << h.Get(i, sh) << ", want "
                    << (k.write_h ? h_want.Get(i, sh) : -7.0);
      ++wrong;
    }
    if (y.Bits(i, sh) != y_unfused.Bits(i, sh)) {
      ADD_FAILURE() << "y element " << i << " differs from the unfused norm of h: " << y.Get(i, sh)
                    << " vs " << y_unfused.Get(i, sh);
      ++wrong;
    }
  }
  const size_t stat_bytes = static_cast<size_t>(rows) * sizeof(float);  // NaN rows: bitwise
  EXPECT_EQ(std::memcmp(rstd.data(), rstd_u.data(), stat_bytes), 0) << "rstd";
  if (!k.rms) EXPECT_EQ(std::memcmp(mean.data(), mean_u.data(), stat_bytes), 0) << "mean";
  // y against the double reference of the norm of h's values (rows whose h is finite).
  for (int64_t row = 0; row < rows; ++row) {
    double mu = 0, ms = 0;
    bool finite = true;
    for (int64_t d = 0; d < D; ++d) {
      finite = finite && std::isfinite(h_want.Get(row * D + d, sh));
      mu += h_want.Get(row * D + d, sh);
    }
    if (!finite) {
      if (k.overflowed_rows != nullptr) ++*k.overflowed_rows;
      continue;
    }
    mu = k.rms ? 0.0 : mu / static_cast<double>(D);
    for (int64_t d = 0; d < D; ++d) {
      const double dev = h_want.Get(row * D + d, sh) - mu;
      ms += dev * dev;
    }
    const double inv = 1.0 / std::sqrt(ms / static_cast<double>(D) + 1e-5);
    for (int64_t d = 0; d < D; ++d) {
      const double t = (h_want.Get(row * D + d, sh) - mu) * inv * gamma[static_cast<size_t>(d)];
      const double b = k.rms ? 0.0 : beta[static_cast<size_t>(d)];
      ExpectOutput(y, row * D + d, t + b, 8 * (std::fabs(t) + std::fabs(b) + 1), sh, &wrong, true);
    }
  }
}

TEST(HalfAddNorm, EveryPairMatchesTheUnfusedNormOfRoundedH) {
  for (const Pair& pair : kPairs) {
    for (bool rms : {false, true}) {
      // Rows in lane-parallel batches (64), one by one (768), a task's rows at a time (5000).
      for (int64_t D : {1, 7, 64, 768, 5000}) {
        const int64_t rows = D >= 768 ? 9 : 41;
        RunHalfAddNorm(pair, {rows, D, rms, true, true});
        RunHalfAddNorm(pair, {rows, D, rms, false, false});
      }
      RunHalfAddNorm(pair, {37, 100, rms, true, true, 1.0f, true});   // off a vector boundary
      RunHalfAddNorm(pair, {37, 100, rms, true, false, 1.0f, true});  // h in the scratch
      RunHalfAddNorm(pair, {203, 96, rms, true, true, 1.0f, false, 1});
      RunHalfAddNorm(pair, {203, 96, rms, true, true, 1.0f, false, 3});
    }
  }
}

// Sums of subnormals of the format (float16's below 6.1e-5, bfloat16's below 1.2e-38:
// float's too) and huge values of which some sums overflow the format (float16's 65504,
// bfloat16's and float's 3.4e38; x and r themselves finite): h rounds (to Inf where it
// overflows) as the plain reference does, a row with an Inf h gives NaN as the unfused
// norm does, and the other rows match the reference.
TEST(HalfAddNorm, SubnormalAndOverflowingSums) {
  for (const Pair& pair : kPairs) {
    if (pair.x == kF32) continue;
    const bool f16 = pair.x == kF16;
    for (bool rms : {false, true}) {
      RunHalfAddNorm(pair, {11, 64, rms, true, true, f16 ? 2e-6f : 3e-39f});
      RunHalfAddNorm(pair, {11, 768, rms, false, true, f16 ? 2e-6f : 3e-39f});
      int64_t overflowed = 0;
      RunHalfAddNorm(pair,
                     {31, 64, rms, false, true, f16 ? 1.0e4f : 6.0e37f, false, 2, &overflowed});
      EXPECT_GT(overflowed, 0);  // the case has rows of both kinds
      EXPECT_LT(overflowed, 31);
    }
  }
}

// Outputs on inputs: y on x or on the residual (one dtype), h on x or on the residual:
// the same bits as out of place.
TEST(HalfAddNorm, InPlaceOnEveryInput) {
  for (const Pair& pair : kPairs) {
    for (bool rms : {false, true}) {
      for (int64_t D : {96, 1500, 5000}) {
        SCOPED_TRACE(std::string(DtypeLabel(pair.x)) + " -> " + DtypeLabel(pair.y) +
                     (rms ? " rms D=" : " layer D=") + std::to_string(D));
        const int64_t rows = 13, n = rows * D;
        const std::vector<float> bias = RandomVector(D, 43), gamma = RandomVector(D, 44),
                                 beta = RandomVector(D, 45);
        const AddNormCall call{rms, bias.data(), gamma.data(), beta.data()};
        const auto layout = NORMKIT_LAYOUT_CHANNELS_FIRST;
        Storage x0(pair.x, n), r0(pair.x, n), y_want(pair.y, n), h_want(pair.x, n);
        Fill(&x0, &r0, n, 1.0f, false);
        {  // out of place: the bits every pairing must give
          Storage x = x0, r = r0;
          const normkit_tensor ht = Tensor(&h_want, {rows, D}, layout);
          ASSERT_EQ(call(nullptr, Tensor(&x, {rows, D}, layout), Tensor(&r, {rows, D}, layout),
                         Tensor(&y_want, {rows, D}, layout), &ht, nullptr, nullptr),
                    NORMKIT_SUCCESS)
              << normkit_last_error();
        }
        for (const AddNormPairing& p : kAddNormPairings) {
          if (p.y_on > 0 && pair.x != pair.y) continue;  // in place needs one dtype
          SCOPED_TRACE(p.name);
          Storage x = x0, r = r0, own_y(pair.y, n), own_h(pair.x, n);
          const auto pick = [&](int on, Storage& own) {
            return on == 1 ? &x : on == 2 ? &r : &own;
          };
          Storage* yp = pick(p.y_on, own_y);
          Storage* hp = p.h_on < 0 ? nullptr : pick(p.h_on, own_h);
          const normkit_tensor ht = hp ? Tensor(hp, {rows, D}, layout) : normkit_tensor{};
          ASSERT_EQ(call(nullptr, Tensor(&x, {rows, D}, layout), Tensor(&r, {rows, D}, layout),
                         Tensor(yp, {rows, D}, layout), hp ? &ht : nullptr, nullptr, nullptr),
                    NORMKIT_SUCCESS)
              << normkit_last_error();
          EXPECT_EQ(yp->raw, y_want.raw) << "y";
          if (hp != nullptr) EXPECT_EQ(hp->raw, h_want.raw) << "h";
        }
      }
    }
  }
}

// Calls of 48 MiB and more stream y and h past the cache (h through the worker's scratch,
// copied out as stored): the same bits as the unfused norm, with h out of place and on x.
TEST(HalfAddNorm, LargeCallsStream) {
  RunHalfAddNorm({kBF16, kBF16}, {3100, 2048, false, true, true});
  RunHalfAddNorm({kF16, kF16}, {3100, 2048, true, false, true, 1.0f, true});
  RunHalfAddNorm({kBF16, kF32}, {1600, 4096, false, true, true});
}

// A share of the cases on every SIMD target (and AVX-512 without AVX512_BF16).
TEST(HalfAddNorm, EveryTarget) {
  ForEachHalfTarget([] {
    int k = 0;
    for (const Pair& pair : kPairs) {
      for (int64_t D : {7, 100, 768}) {
        const bool rms = k++ % 2 == 1;
        RunHalfAddNorm(pair, {9, D, rms, D != 100, true, 1.0f, D == 100});
      }
    }
  });
}

// Thread counts: the same bits.
TEST(HalfAddNorm, BitwiseIdenticalAcrossThreadCounts) {
  for (const Pair& pair : {Pair{kBF16, kBF16}, Pair{kF16, kF32}}) {
    for (int64_t D : {64, 2048}) {
      const int64_t rows = 301, n = rows * D;
      Storage x(pair.x, n), r(pair.x, n);
      Fill(&x, &r, n, 1.0f, false);
      const std::vector<float> gamma = RandomVector(D, 46);
      const AddNormCall call{false, nullptr, gamma.data(), nullptr};
      const auto layout = NORMKIT_LAYOUT_CHANNELS_FIRST;
      std::vector<unsigned char> first_y, first_h;
      for (int threads : {1, 2, 3, 8}) {
        Context ctx(threads);
        Storage y(pair.y, n), h(pair.x, n);
        const normkit_tensor ht = Tensor(&h, {rows, D}, layout);
        ASSERT_EQ(call(ctx.ctx, Tensor(&x, {rows, D}, layout), Tensor(&r, {rows, D}, layout),
                       Tensor(&y, {rows, D}, layout), &ht, nullptr, nullptr),
                  NORMKIT_SUCCESS);
        if (first_y.empty()) {
          first_y = y.raw, first_h = h.raw;
          continue;
        }
        EXPECT_EQ(y.raw, first_y) << threads << " threads";
        EXPECT_EQ(h.raw, first_h) << threads << " threads";
      }
    }
  }
}

// The golden vectors of tests/vectors/add_norm.txt (float32 and half, written by NumPy):
// h exactly, y within one unit of its format of the float64 norm of that h (float32: a
// few float ulps of the output's scale).
TEST(GoldenVectors, AddNorm) {
  const std::string path = std::string(NORMKIT_VECTORS_DIR) + "/add_norm.txt";
  const auto cases = ReadVectorFile(path);
  ASSERT_GE(cases.size(), 10u) << "cannot read " << path;
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    const auto shape = k.Shape();
    const int32_t xd = DtypeNamed(k.scalars.at("x_dtype")),
                  yd = DtypeNamed(k.scalars.at("y_dtype"));
    const std::vector<float> xs = k.Floats("x"), rs = k.Floats("residual"),
                             bias = k.FloatsOrEmpty("bias"), gamma = k.Floats("gamma"),
                             beta = k.FloatsOrEmpty("beta");
    const auto n = static_cast<int64_t>(xs.size());
    Storage x(xd, n), r(xd, n), h(xd, n), y(yd, n);
    for (int64_t i = 0; i < n; ++i) {
      x.Set(i, xs[static_cast<size_t>(i)]);
      r.Set(i, rs[static_cast<size_t>(i)]);
      ASSERT_EQ(x.Get(i), xs[static_cast<size_t>(i)]) << "input not representable";
      ASSERT_EQ(r.Get(i), rs[static_cast<size_t>(i)]) << "input not representable";
    }
    const auto layout = NORMKIT_LAYOUT_CHANNELS_FIRST;
    const normkit_tensor xt = Tensor(&x, shape, layout), rt = Tensor(&r, shape, layout),
                         ht = Tensor(&h, shape, layout), yt = Tensor(&y, shape, layout);
    const auto eps = static_cast<float>(k.Scalar("eps"));
    const normkit_status st =
        k.op == "add_rms_norm"
            ? normkit_add_rms_norm(nullptr, &xt, &rt, DataOrNull(bias), gamma.data(), eps, &yt, &ht,
                                   nullptr)
            : normkit_add_layer_norm(nullptr, &xt, &rt, DataOrNull(bias), gamma.data(),
                                     DataOrNull(beta), eps, &yt, &ht, nullptr, nullptr);
    ASSERT_EQ(st, NORMKIT_SUCCESS) << normkit_last_error();
    const std::vector<double>& want_h = k.arrays.at("h");
    const std::vector<double>& want_y = k.arrays.at("y");
    double scale = 0;
    for (double w : want_y) scale = std::max(scale, std::fabs(w));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n && wrong < 5; ++i) {
      if (h.Get(i) != want_h[static_cast<size_t>(i)]) {
        ADD_FAILURE() << "h element " << i << ": got " << h.Get(i) << ", want "
                      << want_h[static_cast<size_t>(i)];
        ++wrong;
      }
      // beta can cancel the normalized value: float32's error at the row's scale.
      ExpectOutput(y, i, want_y[static_cast<size_t>(i)], 25 * scale, false, &wrong, true);
    }
  }
}

}  // namespace
}  // namespace normkit_test
