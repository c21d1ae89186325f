// SPDX-License-Identifier: Apache-2.0
// Batch norm in training mode (forward and backward) on bfloat16 / float16 tensors: every
// dtype pair of the forward and each half dtype of the backward, on every plan the shape
// picks (channels-first planes long and short, in channel blocks; channels-last flat,
// whole-vector and padded rows; a tensor past the cache), in place, off a vector boundary,
// values near FLT_MAX, 1 / 2 / 3 threads and every SIMD target. Each output is checked
// twice: bitwise against the float32 call on the widened values, rounded plainly to the
// output's format (half_reference.h), and within one unit of that format of a float64
// reference written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "half_reference.h"
#include "half_targets.h"
#include "half_tensor.h"
#include "normkit/normkit.h"
#include "test_util.h"
#include "vectors.h"

namespace normkit_test {
namespace {

const char* DtypeName(int32_t dtype) {
  return dtype == kBF16 ? "bfloat16" : dtype == kF16 ? "float16" : "float32";
}

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

int64_t Spatial(const Shape& s) {
  int64_t S = 1;
  for (size_t k = 2; k < s.dims.size(); ++k) S *= s.dims[k];
  return S;
}

// x's values (random, `mean` + `spread` * [-1, 1]) stored in x's dtype, and those values
// widened to float.
void FillInput(Storage* x, std::vector<float>* widened, uint32_t seed, float mean, float spread,
               bool shifted) {
  const std::vector<float> r = RandomVector(x->n, seed, -1.0f, 1.0f);
  widened->resize(static_cast<size_t>(x->n));
  for (int64_t i = 0; i < x->n; ++i) {
    x->Set(i, mean + spread * r[static_cast<size_t>(i)], shifted);
    (*widened)[static_cast<size_t>(i)] = static_cast<float>(x->Get(i, shifted));
  }
}

// out (the half call's output) holds the float32 call's result `want` rounded to its format.
void ExpectRoundedBitwise(Storage& out, const std::vector<float>& want, bool shifted) {
  Storage ref(out.dtype, out.n);
  int64_t wrong = 0;
  for (int64_t i = 0; i < out.n && wrong < 5; ++i) {
    ref.Set(i, want[static_cast<size_t>(i)]);
    if (out.Bits(i, shifted) != ref.Bits(i)) {
      ADD_FAILURE() << "element " << i << ": " << out.Get(i, shifted) << " is not the float32 "
                    << "call's " << want[static_cast<size_t>(i)] << " rounded";
      ++wrong;
    }
  }
}

void ExpectSameFloats(const std::vector<float>& got, const std::vector<float>& want,
                      const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(FloatBits(got[i]), FloatBits(want[i])) << what << "[" << i << "]";
  }
}

// Per-channel arrays of a forward call.
struct ForwardArrays {
  std::vector<float> running_mean, running_var, save_mean, save_rstd;
  explicit ForwardArrays(int64_t C)
      : running_mean(RandomVector(C, 91)),
        running_var(RandomVector(C, 92, 0.5f, 2.0f)),
        save_mean(static_cast<size_t>(C), -7.0f),
        save_rstd(static_cast<size_t>(C), -7.0f) {}
};

void Forward(const normkit_tensor& xt, const normkit_tensor& yt, const std::vector<float>& gamma,
             const std::vector<float>& beta, ForwardArrays* a, int threads) {
  Context ctx(threads);
  ASSERT_EQ(normkit_batch_norm_training(ctx.ctx, &xt, gamma.data(), beta.data(), 1e-5f, 0.1f,
                                        a->running_mean.data(), a->running_var.data(), &yt,
                                        a->save_mean.data(), a->save_rstd.data()),
            NORMKIT_SUCCESS)
      << normkit_last_error();
}

struct ForwardCase {
  Pair pair;
  Shape shape;
  bool in_place = false;
  bool shifted = false;
  int threads = 1;
  float mean = 0.5f, spread = 2.0f;
};

// Runs the half forward and the float32 forward on its widened x; returns y.
Storage RunForwardCase(const ForwardCase& k, bool check_reference = true) {
  const Shape& s = k.shape;
  const int64_t n = Numel(s.dims), C = s.dims[1];
  SCOPED_TRACE(::testing::Message() << "x " << DtypeName(k.pair.x) << ", y " << DtypeName(k.pair.y)
                                    << ", " << Describe(s) << (k.in_place ? ", in place" : "")
                                    << (k.shifted ? ", off a vector boundary" : "") << ", "
                                    << k.threads << " thread(s)");
  Storage x(k.pair.x, n), y(k.pair.y, n);
  std::vector<float> xf;
  FillInput(&x, &xf, static_cast<uint32_t>(n + C), k.mean, k.spread, k.shifted);
  const std::vector<float> gamma = RandomVector(C, 5, 0.5f, 1.5f);
  const std::vector<float> beta = RandomVector(C, 6);
  const normkit_tensor xt = Tensor(&x, s.dims, s.layout, k.shifted);
  const normkit_tensor yt = k.in_place ? xt : Tensor(&y, s.dims, s.layout, k.shifted);
  ForwardArrays half(C), single(C);
  Forward(xt, yt, gamma, beta, &half, k.threads);
  Storage& out = k.in_place ? x : y;
  // The float32 call on the widened values.
  std::vector<float> yf(static_cast<size_t>(n));
  const normkit_tensor xft = Desc(xf.data(), s.layout, s.dims);
  const normkit_tensor yft = Desc(yf.data(), s.layout, s.dims);
  Forward(xft, yft, gamma, beta, &single, 1);
  ExpectRoundedBitwise(out, yf, k.shifted);
  ExpectSameFloats(half.save_mean, single.save_mean, "save_mean");
  ExpectSameFloats(half.save_rstd, single.save_rstd, "save_rstd");
  ExpectSameFloats(half.running_mean, single.running_mean, "running_mean");
  ExpectSameFloats(half.running_var, single.running_var, "running_var");
  if (!check_reference) return std::move(out);
  // The float64 reference on the widened values: each y within one unit of its format.
  const int64_t N = s.dims[0], S = Spatial(s);
  const bool cl = s.layout == NORMKIT_LAYOUT_CHANNELS_LAST && S > 1;
  int64_t wrong = 0;
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0.0, m2 = 0.0;
    for (int64_t j = 0; j < N; ++j)
      for (int64_t i = 0; i < S; ++i) sum += xf[static_cast<size_t>(Offset(j, c, i, C, S, cl))];
    const double mean = sum / static_cast<double>(N * S);
    for (int64_t j = 0; j < N; ++j)
      for (int64_t i = 0; i < S; ++i) {
        const double d = xf[static_cast<size_t>(Offset(j, c, i, C, S, cl))] - mean;
        m2 += d * d;
      }
    const double rstd = 1.0 / std::sqrt(m2 / static_cast<double>(N * S) + 1e-5);
    const double g = gamma[static_cast<size_t>(c)], b = beta[static_cast<size_t>(c)];
    for (int64_t j = 0; j < N; ++j)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t at = Offset(j, c, i, C, S, cl);
        const double z = (xf[static_cast<size_t>(at)] - mean) * rstd * g;
        ExpectOutput(out, at, z + b, 5.0 * (std::fabs(z) + std::fabs(b) + std::fabs(g)), k.shifted,
                     &wrong, true);
      }
  }
  EXPECT_EQ(wrong, 0);
  return std::move(out);
}

// The plans of the forward and the backward (as batch_norm_training_test.cc's shapes):
// channels-first planes past 256 values (of one and of two statistics blocks), short
// planes one by one and in channel blocks (planes of 16, 12, 1: rank 2); channels-last
// with channels dividing a vector (1, 2, 4: one flat span), one or two whole vectors (8,
// 16, 32: the backward's register rows), more (64) and padded rows (3, 7, 19).
const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {{8, 3, 1000}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{8, 3, 1000}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{2, 5, 40000}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{16, 64, 9, 9}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{16, 64, 9, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{4, 7, 33, 31}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{4, 19, 9, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{2, 4, 5, 6, 7}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{4, 2, 33, 31}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{4, 1, 33, 31}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{3, 4, 100, 77}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{20, 37, 16}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{70, 130}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{9, 11, 3, 4}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{5, 6, 45}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{3, 8, 9, 11}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{3, 16, 9, 11}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{3, 32, 9, 11}, NORMKIT_LAYOUT_CHANNELS_LAST},
  };
  return shapes;
}

TEST(HalfBatchNormTraining, ForwardEveryPairAndPlan) {
  for (const Pair& pair : kPairs) {
    for (const Shape& s : Shapes()) {
      RunForwardCase({pair, s});
      if (pair.x == pair.y) RunForwardCase({pair, s, /*in_place=*/true});
    }
  }
}

// A mean 1e4 times the spread (float32 x only: a half format cannot hold such values'
// spread), off a vector boundary, and in bfloat16 values near FLT_MAX whose float sums
// overflow: the exact statistics read the half values.
TEST(HalfBatchNormTraining, ForwardEdges) {
  for (const Shape& s : Shapes()) {
    RunForwardCase({{kF32, kBF16}, s, false, false, 1, 1e4f, 1.0f});
    RunForwardCase({{kF16, kF16}, s, false, /*shifted=*/true});
    RunForwardCase({{kBF16, kF32}, s, false, /*shifted=*/true});
  }
  for (const Shape& s : {Shape{{8, 3, 1000}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{4, 2, 33, 31}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         Shape{{16, 64, 9, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         Shape{{20, 37, 16}, NORMKIT_LAYOUT_CHANNELS_FIRST}}) {
    RunForwardCase({{kBF16, kBF16}, s, false, false, 1, 0.0f, 3e38f});
    RunForwardCase({{kBF16, kF32}, s, false, false, 1, 1e38f, 2e38f});
  }
}

// x of 32 MB as float32 (its sums then read from memory: another order of the
// channels-last sums) and y streamed; 1 / 2 / 3 threads give the same bits.
TEST(HalfBatchNormTraining, ForwardLargeTensorsAndThreads) {
  const Shape cl{{8, 64, 128, 128}, NORMKIT_LAYOUT_CHANNELS_LAST};
  const Shape cf{{8, 64, 128, 128}, NORMKIT_LAYOUT_CHANNELS_FIRST};
  for (const Shape& s : {cl, cf}) {
    const Storage one = RunForwardCase({{kBF16, kBF16}, s}, false);
    for (int threads : {2, 3}) {
      const Storage more = RunForwardCase({{kBF16, kBF16}, s, false, false, threads}, false);
      EXPECT_TRUE(one.raw == more.raw) << threads << " threads";
    }
  }
  for (const Shape& s : Shapes()) {
    const Storage one = RunForwardCase({{kF16, kF16}, s});
    const Storage three = RunForwardCase({{kF16, kF16}, s, false, false, 3});
    EXPECT_TRUE(one.raw == three.raw) << Describe(s);
  }
}

TEST(HalfBatchNormTraining, ForwardEverySimdTarget) {
  ForEachHalfTarget([] {
    int k = 0;
    for (const Shape& s : Shapes()) {
      RunForwardCase({kPairs[k++ % 6], s});
    }
  });
}

// ---- the backward ----

enum class Alias { kNone, kDxOnX, kDxOnDy, kXIsDy };

struct BackwardCase {
  int32_t dtype;
  Shape shape;
  Alias alias = Alias::kNone;
  bool shifted = false;
  int threads = 1;
  float x_mean = 0.5f, x_spread = 2.0f, dy_spread = 1.0f;
};

// Runs the half backward (its saved statistics from the half forward) and the float32
// backward on the widened x and dy; returns dx.
Storage RunBackwardCase(const BackwardCase& k) {
  const Shape& s = k.shape;
  const int64_t n = Numel(s.dims), C = s.dims[1];
  SCOPED_TRACE(::testing::Message()
               << DtypeName(k.dtype) << ", " << Describe(s) << ", alias "
               << static_cast<int>(k.alias) << (k.shifted ? ", off a vector boundary" : "") << ", "
               << k.threads << " thread(s)");
  Storage x(k.dtype, n), dy(k.dtype, n), dx(k.dtype, n), y(k.dtype, n);
  std::vector<float> xf, dyf;
  FillInput(&x, &xf, static_cast<uint32_t>(n), k.x_mean, k.x_spread, k.shifted);
  FillInput(&dy, &dyf, static_cast<uint32_t>(n + 1), 0.0f, k.dy_spread, k.shifted);
  if (k.alias == Alias::kXIsDy) dyf = xf;
  const std::vector<float> gamma = RandomVector(C, 7, 0.5f, 1.5f);
  const normkit_tensor xt = Tensor(&x, s.dims, s.layout, k.shifted);
  ForwardArrays stats(C);
  Forward(xt, Tensor(&y, s.dims, s.layout, k.shifted), gamma, gamma, &stats, 1);
  const normkit_tensor dyt =
      k.alias == Alias::kXIsDy ? xt : Tensor(&dy, s.dims, s.layout, k.shifted);
  const normkit_tensor dxt = k.alias == Alias::kDxOnX    ? xt
                             : k.alias == Alias::kDxOnDy ? dyt
                                                         : Tensor(&dx, s.dims, s.layout, k.shifted);
  std::vector<float> gg(static_cast<size_t>(C), -7.0f), gb(static_cast<size_t>(C), -7.0f);
  {
    Context ctx(k.threads);
    EXPECT_EQ(normkit_batch_norm_training_backward(ctx.ctx, &xt, &dyt, stats.save_mean.data(),
                                                   stats.save_rstd.data(), gamma.data(), &dxt,
                                                   gg.data(), gb.data()),
              NORMKIT_SUCCESS)
        << normkit_last_error();
  }
  Storage& out = k.alias == Alias::kDxOnX ? x : k.alias == Alias::kDxOnDy ? dy : dx;
  // The float32 call on the widened values.
  std::vector<float> dxf(static_cast<size_t>(n)), ggf(gg.size()), gbf(gb.size());
  const normkit_tensor xft = Desc(xf.data(), s.layout, s.dims);
  const normkit_tensor dyft = Desc(dyf.data(), s.layout, s.dims);
  const normkit_tensor dxft = Desc(dxf.data(), s.layout, s.dims);
  EXPECT_EQ(normkit_batch_norm_training_backward(nullptr, &xft, &dyft, stats.save_mean.data(),
                                                 stats.save_rstd.data(), gamma.data(), &dxft,
                                                 ggf.data(), gbf.data()),
            NORMKIT_SUCCESS)
      << normkit_last_error();
  ExpectRoundedBitwise(out, dxf, k.shifted);
  ExpectSameFloats(gg, ggf, "grad_gamma");
  ExpectSameFloats(gb, gbf, "grad_beta");
  // The float64 reference (from the saved statistics): dx within one unit of its format,
  // and float's error at the size of the terms that make it.
  const int64_t N = s.dims[0], S = Spatial(s);
  const bool cl = s.layout == NORMKIT_LAYOUT_CHANNELS_LAST && S > 1;
  const double count = static_cast<double>(N * S);
  int64_t wrong = 0;
  for (int64_t c = 0; c < C; ++c) {
    const size_t cs = static_cast<size_t>(c);
    const double mean = stats.save_mean[cs], rstd = stats.save_rstd[cs];
    double sum_dy = 0.0, sum_dot = 0.0;
    for (int64_t j = 0; j < N; ++j)
      for (int64_t i = 0; i < S; ++i) {
        const size_t at = static_cast<size_t>(Offset(j, c, i, C, S, cl));
        sum_dy += dyf[at];
        sum_dot += dyf[at] * (static_cast<double>(xf[at]) - mean);
      }
    const double mean_dy = sum_dy / count, mean_dy_xhat = rstd * sum_dot / count;
    const double p = gamma[cs] * rstd;
    for (int64_t j = 0; j < N; ++j)
      for (int64_t i = 0; i < S; ++i) {
        const int64_t at = Offset(j, c, i, C, S, cl);
        const double xhat = (xf[static_cast<size_t>(at)] - mean) * rstd;
        const double d = dyf[static_cast<size_t>(at)];
        const double want = p * ((d - mean_dy) - xhat * mean_dy_xhat);
        const double terms =
            std::fabs(p) * (std::fabs(d) + std::fabs(mean_dy) + std::fabs(xhat * mean_dy_xhat));
        ExpectOutput(out, at, want, 100.0 * terms, k.shifted, &wrong, true);
      }
  }
  EXPECT_EQ(wrong, 0);
  return std::move(out);
}

TEST(HalfBatchNormTraining, BackwardEveryDtypeAndPlan) {
  for (int32_t dtype : {kBF16, kF16}) {
    for (const Shape& s : Shapes()) {
      RunBackwardCase({dtype, s});
      RunBackwardCase({dtype, s, Alias::kDxOnX});
      RunBackwardCase({dtype, s, Alias::kDxOnDy, /*shifted=*/true});
    }
  }
}

// x == dy, channels of 1030 (past 1024, a padded tail), bfloat16 dy near FLT_MAX (its
// float sums overflow: those channels are summed and applied again in double, dx rounded
// to bfloat16 as the kernels round), 1 / 2 / 3 threads.
TEST(HalfBatchNormTraining, BackwardEdgesAndThreads) {
  for (const Shape& s : {Shape{{8, 3, 1000}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         Shape{{2, 1030, 3, 3}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         Shape{{20, 37, 16}, NORMKIT_LAYOUT_CHANNELS_FIRST}}) {
    RunBackwardCase({kF16, s, Alias::kXIsDy});
    RunBackwardCase({kBF16, s, Alias::kNone, false, 1, 0.5f, 2.0f, 3e38f});
    RunBackwardCase({kBF16, s, Alias::kDxOnDy, false, 1, 0.5f, 2.0f, 3e38f});
    const Storage one = RunBackwardCase({kBF16, s});
    for (int threads : {2, 3}) {
      const Storage more = RunBackwardCase({kBF16, s, Alias::kNone, false, threads});
      EXPECT_TRUE(one.raw == more.raw) << threads << " threads";
    }
  }
}

TEST(HalfBatchNormTraining, BackwardEverySimdTarget) {
  ForEachHalfTarget([] {
    int k = 0;
    for (const Shape& s : Shapes()) RunBackwardCase({k++ % 2 ? kBF16 : kF16, s});
  });
}

// Within float's rounding of the float64 reference: a per-channel array of the API.
void ExpectNearArray(const std::vector<float>& got, const std::vector<double>& want,
                     const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t j = 0; j < got.size(); ++j) {
    EXPECT_NEAR(got[j], want[j], 2e-6 * std::fabs(want[j]) + 1e-6 * scale)
        << what << "[" << j << "]";
  }
}

// The golden vectors of tests/vectors/half_batch_norm_training.txt (NumPy float64, outputs
// rounded to their dtype): y and dx within one unit of their format, the float32 arrays
// within float's rounding; 1 and 2 threads.
TEST(GoldenVectors, HalfBatchNormTraining) {
  const std::string path = std::string(NORMKIT_VECTORS_DIR) + "/half_batch_norm_training.txt";
  const auto cases = ReadVectorFile(path);
  ASSERT_GE(cases.size(), 12u) << "cannot read " << path;
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    const auto shape = k.Shape();
    const int32_t xd = DtypeNamed(k.scalars.at("x_dtype")),
                  yd = DtypeNamed(k.scalars.at("y_dtype"));
    const auto layout = static_cast<normkit_layout>(static_cast<int>(k.Scalar("layout")));
    const std::vector<float> xs = k.Floats("x"), gamma = k.Floats("gamma");
    const auto n = static_cast<int64_t>(xs.size());
    const size_t C = gamma.size();
    Storage x(xd, n), dy(xd, n);
    for (int64_t i = 0; i < n; ++i) {
      x.Set(i, xs[static_cast<size_t>(i)]);
      ASSERT_EQ(x.Get(i), xs[static_cast<size_t>(i)]) << "input not representable";
    }
    const normkit_tensor xt = Tensor(&x, shape, layout);
    for (int threads : {1, 2}) {
      Context ctx(threads);
      Storage out(yd, n);
      const normkit_tensor ot = Tensor(&out, shape, layout);
      std::string array = "y";
      if (k.op == "batch_norm_training") {
        std::vector<float> rm = k.Floats("running_mean"), rv = k.Floats("running_var");
        std::vector<float> sm(C), sr(C);
        ASSERT_EQ(normkit_batch_norm_training(ctx.ctx, &xt, gamma.data(), k.Floats("beta").data(),
                                              static_cast<float>(k.Scalar("eps")),
                                              static_cast<float>(k.Scalar("momentum")), rm.data(),
                                              rv.data(), &ot, sm.data(), sr.data()),
                  NORMKIT_SUCCESS)
            << normkit_last_error();
        ExpectNearArray(rm, k.arrays.at("running_mean_out"), "running_mean");
        ExpectNearArray(rv, k.arrays.at("running_var_out"), "running_var");
        ExpectNearArray(sm, k.arrays.at("save_mean"), "save_mean");
        ExpectNearArray(sr, k.arrays.at("save_rstd"), "save_rstd");
      } else {
        array = "dx";
        const std::vector<float> dys = k.Floats("dy");
        for (int64_t i = 0; i < n; ++i) dy.Set(i, dys[static_cast<size_t>(i)]);
        const normkit_tensor dyt = Tensor(&dy, shape, layout);
        std::vector<float> gg(C), gb(C);
        ASSERT_EQ(normkit_batch_norm_training_backward(
                      ctx.ctx, &xt, &dyt, k.Floats("save_mean").data(),
                      k.Floats("save_rstd").data(), gamma.data(), &ot, gg.data(), gb.data()),
                  NORMKIT_SUCCESS)
            << normkit_last_error();
        ExpectNearArray(gg, k.arrays.at("grad_gamma"), "grad_gamma");
        ExpectNearArray(gb, k.arrays.at("grad_beta"), "grad_beta");
      }
      const std::vector<double>& want = k.arrays.at(array);
      double scale = 0;
      for (double w : want) scale = std::max(scale, std::fabs(w));
      int64_t wrong = 0;
      for (int64_t i = 0; i < n; ++i) {
        ExpectOutput(out, i, want[static_cast<size_t>(i)], 25 * scale, false, &wrong, true);
      }
      EXPECT_EQ(wrong, 0) << array;
    }
  }
}

// Rejected dtypes, with nothing written: float64 x, dy or dx of another dtype than x, y
// in place on x with another dtype, and CUDA-only combinations aside.
TEST(HalfBatchNormTraining, ValidationNamesTheArgument) {
  const std::vector<int64_t> dims = {2, 3, 4};
  Storage x(kBF16, 24), dy(kF16, 24), dx(kBF16, 24);
  for (int64_t i = 0; i < 24; ++i) x.Set(i, static_cast<float>(i)), dy.Set(i, 1.0f);
  const std::vector<unsigned char> x_before = x.raw, dx_before = dx.raw;
  std::vector<float> mean(3, 0.0f), rstd(3, 1.0f), gg(3, -7.0f);
  const normkit_tensor xt = Tensor(&x, dims, NORMKIT_LAYOUT_CHANNELS_FIRST);
  normkit_tensor dyt = Tensor(&dy, dims, NORMKIT_LAYOUT_CHANNELS_FIRST);
  const normkit_tensor dxt = Tensor(&dx, dims, NORMKIT_LAYOUT_CHANNELS_FIRST);
  EXPECT_EQ(normkit_batch_norm_training_backward(nullptr, &xt, &dyt, mean.data(), rstd.data(),
                                                 nullptr, &dxt, gg.data(), nullptr),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(normkit_last_error()).find("dy->dtype = float16"), std::string::npos)
      << normkit_last_error();
  // In place with another dtype: y on x.
  normkit_tensor yt = xt;
  yt.dtype = NORMKIT_DTYPE_FLOAT32;
  std::vector<float> sm(3, -7.0f);
  EXPECT_NE(normkit_batch_norm_training(nullptr, &xt, nullptr, nullptr, 1e-5f, 0.1f, nullptr,
                                        nullptr, &yt, sm.data(), nullptr),
            NORMKIT_SUCCESS);
  EXPECT_NE(std::string(normkit_last_error()).find("in place needs one dtype"), std::string::npos)
      << normkit_last_error();
  // float64.
  std::vector<double> xd(24, 1.0), yd(24);
  normkit_tensor x64 = Desc(nullptr, NORMKIT_LAYOUT_CHANNELS_FIRST, dims);
  x64.data = xd.data();
  x64.dtype = NORMKIT_DTYPE_FLOAT64;
  normkit_tensor y64 = x64;
  y64.data = yd.data();
  EXPECT_EQ(normkit_batch_norm_training(nullptr, &x64, nullptr, nullptr, 1e-5f, 0.1f, nullptr,
                                        nullptr, &y64, sm.data(), nullptr),
            NORMKIT_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(normkit_last_error()).find("x->dtype = float64"), std::string::npos)
      << normkit_last_error();
  EXPECT_EQ(normkit_batch_norm_training_backward(nullptr, &x64, &x64, mean.data(), rstd.data(),
                                                 nullptr, &y64, gg.data(), nullptr),
            NORMKIT_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(normkit_last_error()).find("x->dtype = float64"), std::string::npos)
      << normkit_last_error();
  EXPECT_TRUE(x.raw == x_before);
  EXPECT_TRUE(dx.raw == dx_before);
  for (float v : gg) EXPECT_EQ(v, -7.0f);
  for (float v : sm) EXPECT_EQ(v, -7.0f);
  for (double v : yd) EXPECT_EQ(v, 0.0);
}

}  // namespace
}  // namespace normkit_test
