// SPDX-License-Identifier: Apache-2.0
// Batch norm in training mode (the forward pass) against a plain float64 reference:
// seed 001's ranks and layouts (1-D features, 2-D and 3-D), a mean 1e4 times the
// standard deviation, in place, the running averages with the unbiased variance,
// bitwise identical across thread counts, values past FLT_MAX's square root, and the
// validation rules with nothing written on a rejected call.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "test_util.h"

namespace normkit_test {
namespace {

struct Outputs {
  std::vector<float> y, running_mean, running_var, save_mean, save_rstd;
};

Outputs RunTraining(const Shape& s, const std::vector<float>& x, const std::vector<float>& gamma,
                    const std::vector<float>& beta, float momentum, int threads, bool in_place) {
  const int64_t C = s.dims[1];
  Outputs o;
  o.y = in_place ? x : std::vector<float>(x.size(), -7.0f);
  std::vector<float> xin = x;
  o.running_mean = RandomVector(C, 91);
  o.running_var = RandomVector(C, 92, 0.5f, 2.0f);
  o.save_mean.assign(static_cast<size_t>(C), -7.0f);
  o.save_rstd.assign(static_cast<size_t>(C), -7.0f);
  const normkit_tensor xt = Desc(in_place ? o.y.data() : xin.data(), s.layout, s.dims);
  const normkit_tensor yt = Desc(o.y.data(), s.layout, s.dims);
  Context ctx(threads);
  EXPECT_EQ(normkit_batch_norm_training(ctx.ctx, &xt, gamma.data(), beta.data(), 1e-5f, momentum,
                                        o.running_mean.data(), o.running_var.data(), &yt,
                                        o.save_mean.data(), o.save_rstd.data()),
            NORMKIT_SUCCESS)
      << normkit_last_error();
  return o;
}

// The float64 reference: per channel, two passes over its N * spatial values.
void ExpectMatchesReference(const Shape& s, const std::vector<float>& x,
                            const std::vector<float>& gamma, const std::vector<float>& beta,
                            float momentum, const Outputs& o) {
  const int64_t N = s.dims[0], C = s.dims[1];
  int64_t S = 1;
  for (size_t k = 2; k < s.dims.size(); ++k) S *= s.dims[k];
  const bool cl = s.layout == NORMKIT_LAYOUT_CHANNELS_LAST && S > 1;
  const std::vector<float> rm0 = RandomVector(C, 91), rv0 = RandomVector(C, 92, 0.5f, 2.0f);
  const double eps = 1e-5, count = static_cast<double>(N * S);
  int64_t wrong = 0;
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0, m2 = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) sum += x[static_cast<size_t>(Offset(n, c, i, C, S, cl))];
    const double mean = sum / count;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) {
        const double d = x[static_cast<size_t>(Offset(n, c, i, C, S, cl))] - mean;
        m2 += d * d;
      }
    const double var = m2 / count, rstd = 1.0 / std::sqrt(var + eps);
    const size_t cs = static_cast<size_t>(c);
    EXPECT_NEAR(o.save_mean[cs], mean, 1e-6 * (std::fabs(mean) + 1.0 / rstd)) << "channel " << c;
    EXPECT_NEAR(o.save_rstd[cs], rstd, 1e-6 * rstd) << "channel " << c;
    const double rm = (1.0 - momentum) * rm0[cs] + momentum * mean;
    const double rv = (1.0 - momentum) * rv0[cs] + momentum * var * count / (count - 1.0);
    EXPECT_NEAR(o.running_mean[cs], rm, 1e-6 * (std::fabs(rm) + 1.0 / rstd)) << "channel " << c;
    if (std::isinf(static_cast<float>(rv))) {  // a variance past FLT_MAX: Inf, as float holds it
      EXPECT_EQ(o.running_var[cs], static_cast<float>(rv)) << "channel " << c;
    } else {
      EXPECT_NEAR(o.running_var[cs], rv, 1e-6 * std::fabs(rv) + 1e-30) << "channel " << c;
    }
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < S; ++i) {
        const size_t at = static_cast<size_t>(Offset(n, c, i, C, S, cl));
        const double z = (x[at] - mean) * rstd * gamma[cs];
        const double want = z + beta[cs];
        // Within float's rounding of its terms, and of statistics good to a few float
        // units of the standard deviation (|gamma| in y's units).
        const double tol = 2e-6 * (std::fabs(z) + std::fabs(beta[cs]) + std::fabs(gamma[cs]));
        if (!(std::fabs(o.y[at] - want) <= tol) && wrong++ < 5) {
          ADD_FAILURE() << "element " << at << ": got " << o.y[at] << ", want " << want;
        }
      }
    }
  }
  EXPECT_EQ(wrong, 0);
}

// Seed 001's ranks: 1-D features (N, C, L), 2-D images, 3-D volumes, and rank 2 [N, C].
const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {{8, 3, 1000}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{8, 3, 1000}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{2, 5, 40000}, NORMKIT_LAYOUT_CHANNELS_FIRST},  // planes of two statistics blocks
      {{16, 64, 9, 9}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{16, 64, 9, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{4, 7, 33, 31}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{2, 4, 5, 6, 7}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{2, 4, 5, 6, 7}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{128, 300}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{1, 1024, 3, 3}, NORMKIT_LAYOUT_CHANNELS_LAST},
      // Channels-last with fewer channels than lanes (one flat span a block): C = 1, 2, 4,
      // row blocks with a padded tail.
      {{4, 2, 33, 31}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{4, 1, 33, 31}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{3, 4, 100, 77}, NORMKIT_LAYOUT_CHANNELS_LAST},
      // Channels-first planes of a few values in channel blocks (planes of 1, 6, 12, 16
      // values: whole vectors of every x86 target), tail blocks with a partial vector,
      // samples in two chunks and two float runs.
      {{20, 37, 16}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{70, 130}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{9, 11, 3, 4}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{300, 3, 2, 3}, NORMKIT_LAYOUT_CHANNELS_FIRST},
  };
  return shapes;
}

TEST(BatchNormTraining, MatchesReferenceEveryRankAndLayout) {
  for (const Shape& s : Shapes()) {
    SCOPED_TRACE(Describe(s));
    const int64_t C = s.dims[1];
    const std::vector<float> x = RandomVector(Numel(s.dims), 3, -2.0f, 3.0f);
    const std::vector<float> gamma = RandomVector(C, 4, 0.5f, 1.5f), beta = RandomVector(C, 5);
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(in_place ? "in place" : "out of place");
      ExpectMatchesReference(s, x, gamma, beta, 0.1f,
                             RunTraining(s, x, gamma, beta, 0.1f, 2, in_place));
    }
  }
}

// A mean 1e4 times the spread: the statistics (and y) exact, where E[x^2] - E[x]^2 or a
// fold into x * scale + shift would lose every digit of the spread.
TEST(BatchNormTraining, MeanFarFromTheSpread) {
  for (const Shape& s : {Shape{{8, 4, 32, 32}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{8, 4, 32, 32}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         Shape{{64, 4, 4, 4}, NORMKIT_LAYOUT_CHANNELS_FIRST},     // short planes
                         Shape{{300, 4}, NORMKIT_LAYOUT_CHANNELS_FIRST},          // planes of 1
                         Shape{{8, 2, 32, 32}, NORMKIT_LAYOUT_CHANNELS_LAST}}) {  // flat rows
    SCOPED_TRACE(Describe(s));
    std::vector<float> x = RandomVector(Numel(s.dims), 6, -1.0f, 1.0f);
    for (float& v : x) v += 1e4f;
    const std::vector<float> gamma(4, 1.0f), beta(4, 0.0f);
    ExpectMatchesReference(s, x, gamma, beta, 0.25f,
                           RunTraining(s, x, gamma, beta, 0.25f, 2, false));
  }
}

// Channel blocks take each channel's pivot from its first 16 values (its planes in the
// first samples); where those samples sit far from the channel's mean (here 50 spreads
// above the rest) the block is summed again about the mean the first pass found.
TEST(BatchNormTraining, PivotFarFromTheMean) {
  for (const Shape& s : {Shape{{64, 5, 4}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{200, 3}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{40, 6, 16}, NORMKIT_LAYOUT_CHANNELS_FIRST}}) {
    SCOPED_TRACE(Describe(s));
    std::vector<float> x = RandomVector(Numel(s.dims), 15, -1.0f, 1.0f);
    const int64_t sample = Numel(s.dims) / s.dims[0];
    for (int64_t i = 0; i < 16 * sample && i < Numel(s.dims); ++i) x[i] += 50.0f;
    const int64_t C = s.dims[1];
    const std::vector<float> gamma(C, 1.0f), beta(C, 0.0f);
    ExpectMatchesReference(s, x, gamma, beta, 0.1f, RunTraining(s, x, gamma, beta, 0.1f, 2, false));
  }
}

// x and y 4 and 12 bytes off vector alignment (in place and not): the reference's values,
// and the aligned call's bits (every path's sums depend on the offsets within the tensor,
// not on its address).
TEST(BatchNormTraining, MisalignedTensors) {
  for (const Shape& s : {Shape{{20, 37, 16}, NORMKIT_LAYOUT_CHANNELS_FIRST},  // channel blocks
                         Shape{{70, 130}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{4, 7, 33, 31}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{4, 7, 33, 31}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         Shape{{4, 2, 33, 31}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         Shape{{3, 300, 5, 7}, NORMKIT_LAYOUT_CHANNELS_LAST}}) {
    SCOPED_TRACE(Describe(s));
    const int64_t C = s.dims[1], n = Numel(s.dims);
    const std::vector<float> x = RandomVector(n, 16, -2.0f, 3.0f);
    const std::vector<float> gamma = RandomVector(C, 17, 0.5f, 1.5f), beta = RandomVector(C, 18);
    const Outputs aligned = RunTraining(s, x, gamma, beta, 0.1f, 2, false);
    for (size_t offset : {1, 3}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(testing::Message() << offset << " floats off, in place " << in_place);
        std::vector<float> xbuf(static_cast<size_t>(n) + 16), ybuf(xbuf.size(), -7.0f);
        float* xp = xbuf.data() + offset;
        float* yp = in_place ? xp : ybuf.data() + offset;
        std::copy(x.begin(), x.end(), xp);
        std::vector<float> rm = RandomVector(C, 91), rv = RandomVector(C, 92, 0.5f, 2.0f);
        std::vector<float> sm(static_cast<size_t>(C)), sr(sm.size());
        const normkit_tensor xt = Desc(xp, s.layout, s.dims), yt = Desc(yp, s.layout, s.dims);
        ASSERT_EQ(normkit_batch_norm_training(nullptr, &xt, gamma.data(), beta.data(), 1e-5f, 0.1f,
                                              rm.data(), rv.data(), &yt, sm.data(), sr.data()),
                  NORMKIT_SUCCESS)
            << normkit_last_error();
        EXPECT_EQ(std::memcmp(yp, aligned.y.data(), static_cast<size_t>(n) * sizeof(float)), 0);
        EXPECT_TRUE(sm == aligned.save_mean && sr == aligned.save_rstd &&
                    rm == aligned.running_mean && rv == aligned.running_var);
      }
    }
    ExpectMatchesReference(s, x, gamma, beta, 0.1f, aligned);
  }
}

TEST(BatchNormTraining, BitwiseIdenticalAcrossThreadCounts) {
  for (const Shape& s : {Shape{{8, 32, 56, 56}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{8, 32, 56, 56}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         Shape{{64, 32, 7, 7}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{300, 32, 4, 4}, NORMKIT_LAYOUT_CHANNELS_FIRST},  // channel blocks
                         Shape{{32, 2, 64, 64}, NORMKIT_LAYOUT_CHANNELS_LAST}}) {
    SCOPED_TRACE(Describe(s));
    const std::vector<float> x = RandomVector(Numel(s.dims), 7);
    const std::vector<float> gamma = RandomVector(32, 8), beta = RandomVector(32, 9);
    const Outputs one = RunTraining(s, x, gamma, beta, 0.1f, 1, false);
    for (int threads : {2, 3, 8}) {
      const Outputs o = RunTraining(s, x, gamma, beta, 0.1f, threads, false);
      EXPECT_TRUE(o.y == one.y && o.save_mean == one.save_mean && o.save_rstd == one.save_rstd &&
                  o.running_mean == one.running_mean && o.running_var == one.running_var)
          << threads << " threads";
    }
  }
}

// Values whose squares pass FLT_MAX: the exact statistics (no Inf, no NaN).
TEST(BatchNormTraining, ValuesPastTheSquareRootOfFltMax) {
  for (normkit_layout layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    const Shape s{{4, 2, 16, 16}, layout};
    SCOPED_TRACE(Describe(s));
    std::vector<float> x = RandomVector(Numel(s.dims), 10);
    for (float& v : x) v *= 1e30f;
    const std::vector<float> gamma(2, 1.0f), beta(2, 0.5f);
    const Outputs o = RunTraining(s, x, gamma, beta, 0.1f, 2, false);
    for (size_t i = 0; i < o.y.size(); ++i) ASSERT_TRUE(std::isfinite(o.y[i])) << i;
    ExpectMatchesReference(s, x, gamma, beta, 0.1f, o);
  }
}

// Every SIMD target this CPU runs: the flat channels-last rows (C = 1, 2, 4 where they
// divide the target's lanes), the column path (C = 3, 19), channels-first planes (one by
// one, and in channel blocks: planes of 12 and of 1 value).
TEST(BatchNormTraining, EverySimdTargetMatchesReference) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (const Shape& s : {Shape{{3, 1, 50, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
                           Shape{{3, 2, 50, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
                           Shape{{3, 4, 50, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
                           Shape{{3, 3, 50, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
                           Shape{{3, 19, 5, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
                           Shape{{3, 19, 5, 9}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                           Shape{{70, 19, 12}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                           Shape{{70, 150}, NORMKIT_LAYOUT_CHANNELS_FIRST}}) {
      SCOPED_TRACE(Describe(s));
      const int64_t C = s.dims[1];
      const std::vector<float> x = RandomVector(Numel(s.dims), 12, 5.0f, 9.0f);
      const std::vector<float> gamma = RandomVector(C, 13, 0.5f, 1.5f), beta = RandomVector(C, 14);
      ExpectMatchesReference(s, x, gamma, beta, 0.1f,
                             RunTraining(s, x, gamma, beta, 0.1f, 2, false));
    }
  }
  hwy::SetSupportedTargetsForTest(0);  // back to what the CPU reports
}

TEST(BatchNormTraining, ValidationNamesTheArgumentAndWritesNothing) {
  const std::vector<int64_t> dims = {2, 3, 4, 4};
  struct Call {
    std::vector<float> x = RandomVector(96, 1), y = std::vector<float>(96, -7.0f);
    std::vector<float> rm = std::vector<float>(3, 0.0f), rv = std::vector<float>(3, 1.0f);
    std::vector<float> sm = std::vector<float>(3, -7.0f), sr = std::vector<float>(3, -7.0f);
    std::vector<float> gamma = std::vector<float>(3, 1.0f);
    normkit_tensor xt, yt;
    float eps = 1e-5f, momentum = 0.1f;
    float *rmp, *rvp, *smp, *srp;
    const float* gp;
    explicit Call(const std::vector<int64_t>& dims) {
      xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, dims);
      yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, dims);
      rmp = rm.data(), rvp = rv.data(), smp = sm.data(), srp = sr.data(), gp = gamma.data();
    }
    normkit_status operator()() {
      return normkit_batch_norm_training(nullptr, &xt, gp, nullptr, eps, momentum, rmp, rvp, &yt,
                                         smp, srp);
    }
  };
  struct Rule {
    const char* name;
    void (*breaks)(Call&);
    normkit_status status;
    const char* message;
  };
  const Rule rules[] = {
      {"one value per channel",
       [](Call& c) {
         c.xt.shape[0] = c.yt.shape[0] = 1;
         c.xt.shape[2] = c.yt.shape[2] = 1;
         c.xt.shape[3] = c.yt.shape[3] = 1;
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "training needs at least 2"},
      {"eps 0", [](Call& c) { c.eps = 0.0f; }, NORMKIT_ERROR_INVALID_ARGUMENT, "eps"},
      {"momentum 1.5", [](Call& c) { c.momentum = 1.5f; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "momentum = 1.5, must be in [0, 1]"},
      {"momentum NaN", [](Call& c) { c.momentum = NAN; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "momentum = nan"},
      {"running_var NULL alone", [](Call& c) { c.rvp = nullptr; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "(running_var is NULL)"},
      {"float64 x", [](Call& c) { c.xt.dtype = c.yt.dtype = NORMKIT_DTYPE_FLOAT64; },
       NORMKIT_ERROR_UNSUPPORTED, "x->dtype = float64 is not supported"},
      {"y another shape", [](Call& c) { c.yt.shape[3] = 3; }, NORMKIT_ERROR_INVALID_ARGUMENT, "y"},
      {"save_mean inside y", [](Call& c) { c.smp = c.y.data() + 5; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "save_mean"},
      {"running_mean inside x", [](Call& c) { c.rmp = c.x.data() + 5; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "running_mean overlaps the input x"},
      {"save_rstd over running_var", [](Call& c) { c.srp = c.rv.data() + 1; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "overlaps"},
      {"save_mean is gamma", [](Call& c) { c.smp = c.gamma.data(); },
       NORMKIT_ERROR_INVALID_ARGUMENT, "overlaps"},
      {"gamma inside y", [](Call& c) { c.gp = c.y.data() + 2; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "gamma"},
      {"running_var misaligned",
       [](Call& c) { c.rvp = reinterpret_cast<float*>(reinterpret_cast<char*>(c.rv.data()) + 1); },
       NORMKIT_ERROR_INVALID_ARGUMENT, "running_var"},
  };
  for (const Rule& rule : rules) {
    SCOPED_TRACE(rule.name);
    Call call(dims);
    rule.breaks(call);
    const std::vector<float> x0 = call.x, y0 = call.y, rm0 = call.rm, rv0 = call.rv, sm0 = call.sm,
                             sr0 = call.sr;
    EXPECT_EQ(call(), rule.status) << normkit_last_error();
    const std::string message = normkit_last_error();
    EXPECT_NE(message.find("batch_norm_training: "), std::string::npos) << message;
    EXPECT_NE(message.find(rule.message), std::string::npos) << message;
    EXPECT_TRUE(call.x == x0 && call.y == y0 && call.rm == rm0 && call.rv == rv0 &&
                call.sm == sm0 && call.sr == sr0)
        << "a rejected call wrote";
  }
  Call fine(dims);
  EXPECT_EQ(fine(), NORMKIT_SUCCESS) << normkit_last_error();
  // Without running statistics or saved ones.
  fine.rmp = fine.rvp = fine.smp = fine.srp = nullptr;
  EXPECT_EQ(fine(), NORMKIT_SUCCESS) << normkit_last_error();
}

}  // namespace
}  // namespace normkit_test
