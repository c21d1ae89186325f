// SPDX-License-Identifier: Apache-2.0
// Batch norm's backward pass (training mode) against a plain float64 reference: seed
// 001's ranks and layouts (every channels-last path: channel counts that divide a
// vector, whole vectors, and neither), a mean 1e4 times the spread, every allowed
// aliasing (dx on x, dx on dy, x == dy), misaligned tensors, values near FLT_MAX, past
// its square root, subnormal and NaN, an intermediate past FLT_MAX of finite sums,
// bitwise identical across thread counts, and the validation rules with nothing written
// on a rejected call.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "normkit/normkit.hpp"
#include "test_util.h"

namespace normkit_test {
namespace {

constexpr double kFloatEps = 1.1920928955078125e-7;

int64_t Spatial(const Shape& s) {
  int64_t S = 1;
  for (size_t k = 2; k < s.dims.size(); ++k) S *= s.dims[k];
  return S;
}

// The inputs of a backward call: x, dy, the forward's saved statistics, gamma.
struct Inputs {
  std::vector<float> x, dy, save_mean, save_rstd, gamma;
};

// Saved statistics from normkit's own forward pass (what a training step passes).
Inputs MakeInputs(const Shape& s, uint32_t seed, float x_lo = -2.0f, float x_hi = 3.0f) {
  const int64_t C = s.dims[1];
  Inputs in;
  in.x = RandomVector(Numel(s.dims), seed, x_lo, x_hi);
  in.dy = RandomVector(Numel(s.dims), seed + 1, -1.0f, 1.0f);
  in.gamma = RandomVector(C, seed + 2, 0.5f, 1.5f);
  in.save_mean.assign(static_cast<size_t>(C), 0.0f);
  in.save_rstd.assign(static_cast<size_t>(C), 0.0f);
  std::vector<float> y(in.x.size());
  const normkit_tensor xt = Desc(in.x.data(), s.layout, s.dims);
  const normkit_tensor yt = Desc(y.data(), s.layout, s.dims);
  EXPECT_EQ(normkit_batch_norm_training(nullptr, &xt, nullptr, nullptr, 1e-5f, 0.1f, nullptr,
                                        nullptr, &yt, in.save_mean.data(), in.save_rstd.data()),
            NORMKIT_SUCCESS)
      << normkit_last_error();
  return in;
}

struct Grads {
  std::vector<float> dx, grad_gamma, grad_beta;
};

enum class Alias { kNone, kDxOnX, kDxOnDy, kXIsDy };

const char* AliasName(Alias a) {
  return a == Alias::kNone     ? "dx apart"
         : a == Alias::kDxOnX  ? "dx on x"
         : a == Alias::kDxOnDy ? "dx on dy"
                               : "x == dy";
}

// Runs the backward; `offset` floats into its buffers (1: tensors off vector alignment).
Grads RunBackward(const Shape& s, const Inputs& in, int threads, Alias alias = Alias::kNone,
                  bool with_gamma = true, size_t offset = 0) {
  const int64_t C = s.dims[1];
  const size_t n = in.x.size();
  std::vector<float> xb(n + offset), dyb(n + offset), dxb(n + offset, -7.0f);
  std::memcpy(xb.data() + offset, in.x.data(), n * sizeof(float));
  std::memcpy(dyb.data() + offset, (alias == Alias::kXIsDy ? in.x : in.dy).data(),
              n * sizeof(float));
  float* x = xb.data() + offset;
  float* dy = alias == Alias::kXIsDy ? x : dyb.data() + offset;
  float* dx = alias == Alias::kDxOnX ? x : alias == Alias::kDxOnDy ? dy : dxb.data() + offset;
  Grads g;
  g.grad_gamma.assign(static_cast<size_t>(C), -7.0f);
  g.grad_beta.assign(static_cast<size_t>(C), -7.0f);
  const normkit_tensor xt = Desc(x, s.layout, s.dims), dyt = Desc(dy, s.layout, s.dims);
  const normkit_tensor dxt = Desc(dx, s.layout, s.dims);
  Context ctx(threads);
  EXPECT_EQ(normkit_batch_norm_training_backward(ctx.ctx, &xt, &dyt, in.save_mean.data(),
                                                 in.save_rstd.data(),
                                                 with_gamma ? in.gamma.data() : nullptr, &dxt,
                                                 g.grad_gamma.data(), g.grad_beta.data()),
            NORMKIT_SUCCESS)
      << normkit_last_error();
  g.dx.assign(dx, dx + n);
  return g;
}

// got within tol of want, or the same infinity where want rounds past FLT_MAX in float.
void ExpectClose(float got, double want, double tol, const char* what, int64_t channel) {
  if (std::isinf(static_cast<float>(want))) {
    EXPECT_EQ(got, static_cast<float>(want)) << what << ", channel " << channel;
  } else {
    EXPECT_NEAR(got, want, tol) << what << ", channel " << channel;
  }
}

// The float64 reference, written plainly: per channel the two sums over its N * spatial
// values, then every element; the tolerances are float's rounding of the terms that
// make each output (sums in float runs of at most 64 terms a lane).
void ExpectMatchesReference(const Shape& s, const Inputs& in, const Grads& g, bool with_gamma,
                            bool x_is_dy = false) {
  const int64_t N = s.dims[0], C = s.dims[1], S = Spatial(s);
  const bool cl = s.layout == NORMKIT_LAYOUT_CHANNELS_LAST && S > 1;
  const std::vector<float>& dyv = x_is_dy ? in.x : in.dy;
  const double count = static_cast<double>(N * S);
  int64_t wrong = 0;
  for (int64_t c = 0; c < C; ++c) {
    const size_t cs = static_cast<size_t>(c);
    const double mean = in.save_mean[cs], rstd = in.save_rstd[cs];
    const double gamma = with_gamma ? in.gamma[cs] : 1.0;
    double sum_dy = 0, sum_dot = 0, abs_dy = 0, abs_dot = 0;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < S; ++i) {
        const size_t at = static_cast<size_t>(Offset(n, c, i, C, S, cl));
        const double dy = dyv[at], t = static_cast<double>(in.x[at]) - mean;
        sum_dy += dy;
        sum_dot += dy * t;
        abs_dy += std::fabs(dy);
        abs_dot += std::fabs(dy * t);
      }
    }
    const double sum_eps = 80 * kFloatEps;  // a float run's error, relative to its |terms|
    ExpectClose(g.grad_beta[cs], sum_dy, sum_eps * abs_dy + kFloatEps * std::fabs(sum_dy) + 1e-44,
                "grad_beta", c);
    ExpectClose(g.grad_gamma[cs], rstd * sum_dot,
                rstd * (sum_eps * abs_dot + kFloatEps * std::fabs(sum_dot)) + 1e-44, "grad_gamma",
                c);
    const double mean_dy = sum_dy / count, mean_dy_xhat = rstd * sum_dot / count;
    const double p = gamma * rstd;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < S; ++i) {
        const size_t at = static_cast<size_t>(Offset(n, c, i, C, S, cl));
        const double xhat = (static_cast<double>(in.x[at]) - mean) * rstd;
        const double dy = dyv[at];
        const double want = p * ((dy - mean_dy) - xhat * mean_dy_xhat);
        const double terms = std::fabs(dy) + std::fabs(mean_dy) + std::fabs(xhat * mean_dy_xhat);
        const double tol =
            std::fabs(p) * (6 * kFloatEps * terms +
                            sum_eps * (abs_dy + std::fabs(xhat) * rstd * abs_dot) / count) +
            kFloatEps * std::fabs(want) + 4 * std::fabs(p) * 1.4e-45 + 1.4e-45;
        if (std::isinf(static_cast<float>(want))) {
          if (g.dx[at] != static_cast<float>(want) && wrong++ < 5) {
            ADD_FAILURE() << "element " << at << ": got " << g.dx[at] << ", want " << want;
          }
        } else if (!(std::fabs(g.dx[at] - want) <= tol) && wrong++ < 5) {
          ADD_FAILURE() << "element " << at << " (channel " << c << "): got " << g.dx[at]
                        << ", want " << want << " (tolerance " << tol << ")";
        }
      }
    }
  }
  EXPECT_EQ(wrong, 0);
}

// Seed 001's ranks, and the channels-last paths: C = 1, 2, 4 (a divisor of the vector:
// one flat span), 3, 5, 7 (neither: padded rows), 16, 32 (one or two whole vectors on
// AVX-512: the register rows), 64, 1024, 300 (whole vectors, a padded tail), 1030 (past
// 1024, a padded tail); channels-first planes of two sum blocks, short planes, rank 2.
const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> shapes = {
      {{8, 3, 1000}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{8, 3, 1000}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{2, 5, 40000}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{16, 64, 9, 9}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{16, 64, 9, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{4, 7, 33, 31}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{4, 2, 33, 31}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{4, 1, 33, 31}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{2, 4, 5, 6, 7}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{2, 4, 5, 6, 7}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{128, 300}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{3, 300, 5, 7}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{1, 1024, 3, 3}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{300, 5, 17}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{5, 16, 7, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
      {{3, 32, 9, 11}, NORMKIT_LAYOUT_CHANNELS_LAST},
      // Rows past 1024 channels: a partial last vector, two row blocks, float runs
      // flushed twice.
      {{10, 1030, 15}, NORMKIT_LAYOUT_CHANNELS_LAST},
      // Channels-first planes of a few values in channel blocks (planes of 16, 1, 12, 6;
      // tails with a partial vector, two chunks of samples).
      {{20, 37, 16}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{70, 130}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{9, 11, 3, 4}, NORMKIT_LAYOUT_CHANNELS_FIRST},
      {{300, 3, 2, 3}, NORMKIT_LAYOUT_CHANNELS_FIRST},
  };
  return shapes;
}

TEST(BatchNormBackward, MatchesReferenceEveryRankAndLayout) {
  uint32_t seed = 20;
  for (const Shape& s : Shapes()) {
    SCOPED_TRACE(Describe(s));
    const Inputs in = MakeInputs(s, seed += 3);
    for (bool with_gamma : {true, false}) {
      SCOPED_TRACE(with_gamma ? "gamma" : "no gamma");
      ExpectMatchesReference(s, in, RunBackward(s, in, 2, Alias::kNone, with_gamma), with_gamma);
    }
    for (size_t offset : {1, 3}) {  // tensors 4 and 12 bytes off vector alignment
      SCOPED_TRACE("offset " + std::to_string(offset));
      ExpectMatchesReference(s, in, RunBackward(s, in, 3, Alias::kNone, true, offset), true);
    }
  }
}

// Every SIMD target this CPU runs: the pattern lanes (C = 2, 4), rows of one or two whole
// vectors in registers (C = 8, 16, 32: which ones depends on the lanes), padded rows (C = 3,
// 19, 1030), padded span tails (planes of 45), the double flushes (planes of 3000).
TEST(BatchNormBackward, EverySimdTargetMatchesReference) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (const Shape& s : {Shape{{3, 2, 5, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
                           Shape{{3, 4, 5, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
                           Shape{{3, 3, 5, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
                           Shape{{3, 19, 5, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
                           Shape{{3, 8, 5, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
                           Shape{{3, 16, 5, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
                           Shape{{3, 32, 5, 9}, NORMKIT_LAYOUT_CHANNELS_LAST},
                           Shape{{3, 19, 5, 9}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                           Shape{{7, 1030, 10}, NORMKIT_LAYOUT_CHANNELS_LAST},
                           Shape{{2, 3, 3000}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                           Shape{{70, 19, 12}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                           Shape{{70, 150}, NORMKIT_LAYOUT_CHANNELS_FIRST}}) {
      SCOPED_TRACE(Describe(s));
      const Inputs in = MakeInputs(s, 90);
      ExpectMatchesReference(s, in, RunBackward(s, in, 2, Alias::kNone, true, 1), true);
    }
  }
  hwy::SetSupportedTargetsForTest(0);  // back to what the CPU reports
}

TEST(BatchNormBackward, EveryAllowedAliasing) {
  for (const Shape& s : {Shape{{4, 6, 13, 11}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{4, 6, 13, 11}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         Shape{{4, 2, 13, 11}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         Shape{{4, 19, 13, 11}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         // Channel blocks: planes of 4 values, and rank 2 (planes of one).
                         Shape{{40, 5, 2, 2}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{64, 37}, NORMKIT_LAYOUT_CHANNELS_FIRST}}) {
    SCOPED_TRACE(Describe(s));
    const Inputs in = MakeInputs(s, 40);
    const Grads apart = RunBackward(s, in, 2);
    for (Alias alias : {Alias::kDxOnX, Alias::kDxOnDy}) {
      SCOPED_TRACE(AliasName(alias));
      const Grads g = RunBackward(s, in, 2, alias);
      EXPECT_TRUE(g.dx == apart.dx && g.grad_gamma == apart.grad_gamma &&
                  g.grad_beta == apart.grad_beta)
          << "in place differs from out of place";
    }
    // x == dy (the same tensor passed twice): a valid call with its own result.
    ExpectMatchesReference(s, in, RunBackward(s, in, 2, Alias::kXIsDy), true, true);
  }
}

// A mean 1e4 times the spread: x - mean is exact in float there, so dx and the
// gradients keep every digit of the spread.
TEST(BatchNormBackward, MeanFarFromTheSpread) {
  for (const Shape& s : {Shape{{8, 4, 32, 32}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{8, 4, 32, 32}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         Shape{{8, 12, 32, 32}, NORMKIT_LAYOUT_CHANNELS_LAST}}) {
    SCOPED_TRACE(Describe(s));
    const Inputs in = MakeInputs(s, 50, 1e4f - 1.0f, 1e4f + 1.0f);
    ExpectMatchesReference(s, in, RunBackward(s, in, 2), true);
  }
}

TEST(BatchNormBackward, BitwiseIdenticalAcrossThreadCounts) {
  for (const Shape& s : {Shape{{8, 32, 56, 56}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{8, 32, 56, 56}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         Shape{{64, 32, 7, 7}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{300, 32, 4, 4}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{32, 2, 64, 64}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         Shape{{2, 3, 200000}, NORMKIT_LAYOUT_CHANNELS_FIRST}}) {
    SCOPED_TRACE(Describe(s));
    const Inputs in = MakeInputs(s, 60);
    const Grads one = RunBackward(s, in, 1);
    for (int threads : {2, 3, 8}) {
      const Grads g = RunBackward(s, in, threads);
      EXPECT_TRUE(g.dx == one.dx && g.grad_gamma == one.grad_gamma && g.grad_beta == one.grad_beta)
          << threads << " threads";
    }
  }
}

// The edges of float, each in one channel beside ordinary ones, both layouts: dy near
// FLT_MAX of both signs (dy - mean(dy) would overflow in float: that channel goes through
// double), x spread past FLT_MAX's square root with large dy (products past FLT_MAX:
// summed again in double), subnormal dy, and a NaN (its channel NaN, the others exact).
TEST(BatchNormBackward, EdgesOfFloat) {
  for (normkit_layout layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    const Shape s{{4, 5, 9, 9}, layout};
    SCOPED_TRACE(Describe(s));
    const int64_t N = 4, C = 5, S = 81;
    const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST;
    Inputs in = MakeInputs(s, 70);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < S; ++i) {
        const auto at = [&](int64_t c) { return static_cast<size_t>(Offset(n, c, i, C, S, cl)); };
        in.dy[at(1)] *= 0.7f * FLT_MAX;  // channel 1: |dy| near FLT_MAX
        in.x[at(2)] *= 1e25f;            // channel 2: spread past sqrt(FLT_MAX)...
        in.dy[at(2)] *= 1e20f;           // ...and dy * (x - mean) past FLT_MAX
        in.dy[at(3)] *= 1e-39f;          // channel 3: subnormal dy
      }
    }
    // The saved statistics of channel 2 from its values (the forward handles them too).
    std::vector<float> y(in.x.size());
    const normkit_tensor xt = Desc(in.x.data(), layout, s.dims),
                         yt = Desc(y.data(), layout, s.dims);
    ASSERT_EQ(normkit_batch_norm_training(nullptr, &xt, nullptr, nullptr, 1e-5f, 0.1f, nullptr,
                                          nullptr, &yt, in.save_mean.data(), in.save_rstd.data()),
              NORMKIT_SUCCESS);
    ExpectMatchesReference(s, in, RunBackward(s, in, 2), true);
    // A NaN in channel 4: its outputs NaN, the other channels as before.
    Inputs with_nan = in;
    with_nan.dy[static_cast<size_t>(Offset(1, 4, 7, C, S, cl))] = NAN;
    const Grads g = RunBackward(s, with_nan, 2);
    EXPECT_TRUE(std::isnan(g.grad_beta[4]) && std::isnan(g.grad_gamma[4]));
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < S; ++i) {
        ASSERT_TRUE(std::isnan(g.dx[static_cast<size_t>(Offset(n, 4, i, C, S, cl))]));
      }
    }
    Inputs first_four = in;
    Grads g4 = g;
    // Channels 0-3 of the NaN call against the reference (channel 4 dropped from both).
    const Shape s4{{4, 4, 9, 9}, layout};
    first_four.x.clear();
    first_four.dy.clear();
    g4.dx.clear();
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = 0; c < 4; ++c) {
        for (int64_t i = 0; i < S; ++i) {
          const size_t from = static_cast<size_t>(Offset(n, c, i, C, S, cl));
          const size_t to = static_cast<size_t>(Offset(n, c, i, 4, S, cl));
          if (first_four.x.size() <= to) {
            first_four.x.resize(to + 1);
            first_four.dy.resize(to + 1);
            g4.dx.resize(to + 1);
          }
          first_four.x[to] = in.x[from];
          first_four.dy[to] = in.dy[from];
          g4.dx[to] = g.dx[from];
        }
      }
    }
    for (auto* v : {&first_four.save_mean, &first_four.save_rstd, &first_four.gamma}) v->resize(4);
    g4.grad_gamma.resize(4);
    g4.grad_beta.resize(4);
    ExpectMatchesReference(s4, first_four, g4, true);
  }
}

// The same edges in channel blocks (channels-first planes of 4 values, the block walked
// down the samples): each edge channel gets the reference's values, and a NaN in channel
// 4 leaves channels 0-3 bitwise as they were.
TEST(BatchNormBackward, EdgesOfFloatInChannelBlocks) {
  const Shape s{{40, 5, 2, 2}, NORMKIT_LAYOUT_CHANNELS_FIRST};
  const int64_t N = 40, C = 5, S = 4;
  Inputs in = MakeInputs(s, 71);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < S; ++i) {
      const auto at = [&](int64_t c) { return static_cast<size_t>((n * C + c) * S + i); };
      in.dy[at(1)] *= 0.7f * FLT_MAX;
      in.x[at(2)] *= 1e25f;
      in.dy[at(2)] *= 1e20f;
      in.dy[at(3)] *= 1e-39f;
    }
  }
  std::vector<float> y(in.x.size());
  const normkit_tensor xt = Desc(in.x.data(), s.layout, s.dims),
                       yt = Desc(y.data(), s.layout, s.dims);
  ASSERT_EQ(normkit_batch_norm_training(nullptr, &xt, nullptr, nullptr, 1e-5f, 0.1f, nullptr,
                                        nullptr, &yt, in.save_mean.data(), in.save_rstd.data()),
            NORMKIT_SUCCESS);
  const Grads clean = RunBackward(s, in, 2);
  ExpectMatchesReference(s, in, clean, true);
  Inputs with_nan = in;
  with_nan.dy[static_cast<size_t>((7 * C + 4) * S + 1)] = NAN;
  const Grads g = RunBackward(s, with_nan, 2);
  EXPECT_TRUE(std::isnan(g.grad_beta[4]) && std::isnan(g.grad_gamma[4]));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t i = 0; i < S; ++i) {
        const size_t at = static_cast<size_t>((n * C + c) * S + i);
        if (c == 4) {
          ASSERT_TRUE(std::isnan(g.dx[at])) << n << " " << i;
        } else {
          ASSERT_EQ(std::memcmp(&g.dx[at], &clean.dx[at], sizeof(float)), 0) << n << " " << c;
        }
      }
    }
  }
  for (int64_t c = 0; c < 4; ++c) {
    EXPECT_EQ(std::memcmp(&g.grad_gamma[c], &clean.grad_gamma[c], sizeof(float)), 0) << c;
    EXPECT_EQ(std::memcmp(&g.grad_beta[c], &clean.grad_beta[c], sizeof(float)), 0) << c;
  }
}

// Finite sums, an intermediate past FLT_MAX: channel 1 holds one dy of 3.3e38 and the rest
// equal and negative, so that mean_dy is -6e37 (each lane's float run finite on the vector
// targets) and dy - mean_dy is 3.9e38; with gamma 1e-3 the true dx (about 1e36) is finite.
// Only the per-lane maxima of |dy| can send this channel's second pass to double: its means
// alone stay under FLT_MAX / 4. A plane of 16 values, channels-last rows, and channel blocks
// (planes of 2 values).
TEST(BatchNormBackward, IntermediatePastFltMaxOfFiniteSums) {
  for (const Shape& s : {Shape{{1, 2, 4, 4}, NORMKIT_LAYOUT_CHANNELS_FIRST},
                         Shape{{1, 2, 4, 4}, NORMKIT_LAYOUT_CHANNELS_LAST},
                         Shape{{16, 2, 1, 2}, NORMKIT_LAYOUT_CHANNELS_FIRST}}) {
    SCOPED_TRACE(Describe(s));
    const int64_t N = s.dims[0], C = 2, S = Spatial(s), count = N * S;
    const bool cl = s.layout == NORMKIT_LAYOUT_CHANNELS_LAST;
    Inputs in = MakeInputs(s, 74, 0.0f, 1.0f);  // |x - mean| <= 1: dy * (x - mean) finite
    const float rest = static_cast<float>((3.3e38 + 6e37 * static_cast<double>(count)) /
                                          static_cast<double>(count - 1));
    for (int64_t k = 0; k < count; ++k) {
      const size_t at = static_cast<size_t>(Offset(k / S, 1, k % S, C, S, cl));
      in.dy[at] = k == 5 ? 3.3e38f : -rest;
    }
    in.gamma[1] = 1e-3f;
    const Grads g = RunBackward(s, in, 1);
    ExpectMatchesReference(s, in, g, true);
    for (int64_t k = 0; k < count; ++k) {
      ASSERT_TRUE(std::isfinite(g.dx[static_cast<size_t>(Offset(k / S, 1, k % S, C, S, cl))])) << k;
    }
  }
}

TEST(BatchNormBackward, OnlyTheParameterGradients) {
  const Shape s{{4, 6, 10, 10}, NORMKIT_LAYOUT_CHANNELS_LAST};
  const Inputs in = MakeInputs(s, 80);
  const Grads full = RunBackward(s, in, 2);
  std::vector<float> gg(6, -7.0f), gb(6, -7.0f);
  const normkit_tensor xt = Desc(const_cast<float*>(in.x.data()), s.layout, s.dims);
  const normkit_tensor dyt = Desc(const_cast<float*>(in.dy.data()), s.layout, s.dims);
  ASSERT_EQ(normkit_batch_norm_training_backward(nullptr, &xt, &dyt, in.save_mean.data(),
                                                 in.save_rstd.data(), in.gamma.data(), nullptr,
                                                 gg.data(), gb.data()),
            NORMKIT_SUCCESS)
      << normkit_last_error();
  EXPECT_TRUE(gg == full.grad_gamma && gb == full.grad_beta);
  // dx alone, through the C++ wrapper.
  std::vector<float> dx(in.x.size(), -7.0f);
  const normkit::Layout layout = normkit::Layout::kChannelsLast;
  const normkit::Tensor dxt(dx.data(), {4, 6, 10, 10}, layout);
  normkit::BatchNormTrainingBackward(normkit::Tensor(in.x.data(), {4, 6, 10, 10}, layout),
                                     normkit::Tensor(in.dy.data(), {4, 6, 10, 10}, layout),
                                     in.save_mean.data(), in.save_rstd.data(), in.gamma.data(),
                                     &dxt, nullptr, nullptr);
  EXPECT_TRUE(dx == full.dx);
}

TEST(BatchNormBackward, ValidationNamesTheArgumentAndWritesNothing) {
  const std::vector<int64_t> dims = {2, 3, 4, 4};
  struct Call {
    std::vector<float> x = RandomVector(96, 1), dy = RandomVector(96, 2);
    std::vector<float> dx = std::vector<float>(96, -7.0f);
    std::vector<float> sm = RandomVector(3, 3), sr = RandomVector(3, 4, 0.5f, 1.0f);
    std::vector<float> gamma = std::vector<float>(3, 1.0f);
    std::vector<float> gg = std::vector<float>(3, -7.0f), gb = std::vector<float>(3, -7.0f);
    normkit_tensor xt, dyt, dxt;
    const normkit_tensor* dxp;
    const float *smp, *srp, *gp;
    float *ggp, *gbp;
    explicit Call(const std::vector<int64_t>& dims) {
      xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, dims);
      dyt = Desc(dy.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, dims);
      dxt = Desc(dx.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, dims);
      dxp = &dxt;
      smp = sm.data(), srp = sr.data(), gp = gamma.data(), ggp = gg.data(), gbp = gb.data();
    }
    normkit_status operator()() {
      return normkit_batch_norm_training_backward(nullptr, &xt, &dyt, smp, srp, gp, dxp, ggp, gbp);
    }
  };
  struct Rule {
    const char* name;
    void (*breaks)(Call&);
    normkit_status status;
    const char* message;
  };
  const Rule rules[] = {
      {"x NULL", [](Call& c) { c.xt.data = nullptr; }, NORMKIT_ERROR_INVALID_ARGUMENT, "x"},
      {"dy another shape", [](Call& c) { c.dyt.shape[3] = 3; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "dy->shape[3] = 3 differs from x->shape[3] = 4"},
      {"dy another layout", [](Call& c) { c.dyt.layout = NORMKIT_LAYOUT_CHANNELS_LAST; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "dy->layout"},
      {"dx another rank", [](Call& c) { c.dxt.rank = 3; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "dx->rank = 3 differs"},
      {"dy float16", [](Call& c) { c.dyt.dtype = NORMKIT_DTYPE_FLOAT16; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "dy->dtype = float16 differs"},
      {"all float64",
       [](Call& c) { c.xt.dtype = c.dyt.dtype = c.dxt.dtype = NORMKIT_DTYPE_FLOAT64; },
       NORMKIT_ERROR_UNSUPPORTED, "x->dtype = float64 is not supported"},
      {"save_mean NULL", [](Call& c) { c.smp = nullptr; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "save_mean is NULL"},
      {"save_rstd NULL", [](Call& c) { c.srp = nullptr; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "save_rstd is NULL"},
      {"dx partly over x", [](Call& c) { c.dxt.data = c.x.data() + 1; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "dx partially overlaps x"},
      {"dx partly over dy", [](Call& c) { c.dxt.data = c.dy.data() + 4; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "dx partially overlaps dy"},
      {"save_mean inside dx", [](Call& c) { c.smp = c.dx.data() + 5; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "save_mean overlaps the output dx"},
      {"gamma inside dx", [](Call& c) { c.gp = c.dx.data(); }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "gamma overlaps the output dx"},
      {"grad_gamma inside x", [](Call& c) { c.ggp = c.x.data() + 5; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "grad_gamma overlaps the input x"},
      {"grad_beta inside dy", [](Call& c) { c.gbp = c.dy.data() + 5; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "grad_beta overlaps the input dy"},
      {"grad_beta is grad_gamma", [](Call& c) { c.gbp = c.gg.data(); },
       NORMKIT_ERROR_INVALID_ARGUMENT, "overlaps"},
      {"grad_gamma over save_rstd", [](Call& c) { c.ggp = c.sr.data() + 1; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "overlaps"},
      {"grad_gamma misaligned",
       [](Call& c) { c.ggp = reinterpret_cast<float*>(reinterpret_cast<char*>(c.gg.data()) + 1); },
       NORMKIT_ERROR_INVALID_ARGUMENT, "grad_gamma"},
  };
  for (const Rule& rule : rules) {
    SCOPED_TRACE(rule.name);
    Call call(dims);
    rule.breaks(call);
    const std::vector<float> x0 = call.x, dy0 = call.dy, dx0 = call.dx, sm0 = call.sm,
                             sr0 = call.sr, gg0 = call.gg, gb0 = call.gb;
    EXPECT_EQ(call(), rule.status) << normkit_last_error();
    const std::string message = normkit_last_error();
    EXPECT_NE(message.find("batch_norm_training_backward: "), std::string::npos) << message;
    EXPECT_NE(message.find(rule.message), std::string::npos) << message;
    EXPECT_TRUE(call.x == x0 && call.dy == dy0 && call.dx == dx0 && call.sm == sm0 &&
                call.sr == sr0 && call.gg == gg0 && call.gb == gb0)
        << "a rejected call wrote";
  }
  Call fine(dims);
  EXPECT_EQ(fine(), NORMKIT_SUCCESS) << normkit_last_error();
  // No outputs at all: a valid call that writes nothing.
  Call none(dims);
  none.dxp = nullptr;
  none.ggp = none.gbp = nullptr;
  EXPECT_EQ(none(), NORMKIT_SUCCESS) << normkit_last_error();
}

}  // namespace
}  // namespace normkit_test
