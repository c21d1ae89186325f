// SPDX-License-Identifier: Apache-2.0
// Group norm (and its instance / channel layer norm forms) against the double
// reference: layouts, ranks 2..5, group sizes, fused activations, in place, threads,
// ill-conditioned and degenerate groups, NaN isolation, bitwise determinism.
#include "cpu/group_norm.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "norm_reference.h"
#include "test_util.h"

namespace normkit_test {
namespace {

struct GroupNormCase {
  std::vector<int64_t> shape;
  int64_t groups;
  normkit_layout layout;
  int32_t activation = NORMKIT_ACTIVATION_NONE;
  bool has_gamma = true;
  bool has_beta = true;
  bool in_place = false;
  int threads = 1;
  float offset = 0.0f;  // added to x: mean / std = offset / ~1.15
};

std::string Describe(const GroupNormCase& k) {
  std::string s = "shape=";
  for (auto d : k.shape) s += std::to_string(d) + "x";
  s += " G=" + std::to_string(k.groups);
  s += k.layout == NORMKIT_LAYOUT_CHANNELS_LAST ? " channels_last" : " channels_first";
  s += " act=" + std::to_string(k.activation) + (k.has_gamma ? " gamma" : "") +
       (k.has_beta ? " beta" : "") + (k.in_place ? " in_place" : "") +
       " threads=" + std::to_string(k.threads) + " offset=" + std::to_string(k.offset);
  return s;
}

void RunGroupNormCase(const GroupNormCase& k) {
  SCOPED_TRACE(Describe(k));
  const int64_t N = k.shape[0], C = k.shape[1], numel = Numel(k.shape), S = numel / (N * C);
  std::vector<float> x = RandomVector(numel, 11 + static_cast<uint32_t>(numel));
  for (auto& v : x) v += k.offset;
  const std::vector<float> gamma = RandomVector(C, 12, 0.5f, 1.5f), beta = RandomVector(C, 13);
  const float* gp = k.has_gamma ? gamma.data() : nullptr;
  const float* bp = k.has_beta ? beta.data() : nullptr;
  const float eps = 1e-5f;
  const bool cl = k.layout == NORMKIT_LAYOUT_CHANNELS_LAST;
  const NormReference want =
      ReferenceGroupNorm(x, N, C, S, k.groups, cl, gp, bp, eps, k.activation);

  std::vector<float> xb = x, yb(numel, -7.0f), mean(N * k.groups), rstd(N * k.groups);
  float* yd = k.in_place ? xb.data() : yb.data();
  Context ctx(k.threads);
  normkit_tensor xt = Desc(xb.data(), k.layout, k.shape), yt = Desc(yd, k.layout, k.shape);
  ASSERT_EQ(normkit_group_norm(ctx.ctx, &xt, k.groups, gp, bp, eps, k.activation, &yt, mean.data(),
                               rstd.data()),
            NORMKIT_SUCCESS)
      << normkit_last_error();
  ExpectNormNear(std::vector<float>(yd, yd + numel), want, "group_norm");
  for (size_t i = 0; i < mean.size(); ++i) {
    EXPECT_NEAR(mean[i], want.mean[i], 1e-6 * std::fabs(want.mean[i]) + 1e-7) << "mean " << i;
    EXPECT_NEAR(rstd[i], want.rstd[i], 1e-6 * want.rstd[i]) << "rstd " << i;
  }
}

TEST(GroupNorm, MatchesReferenceAcrossShapesAndGroups) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes_groups = {
      {{2, 6, 5, 7}, {1, 2, 3, 6}},
      {{1, 32, 9, 9}, {8, 32}},
      {{3, 20, 17}, {4, 5, 20}},
      {{2, 12, 3, 4, 5}, {3, 12}},
      {{2, 48}, {1, 4, 48}},
      {{1, 4, 64, 64}, {2}},
      {{2, 24, 33, 31}, {6}},
      {{1, 64, 7, 7}, {32}},
      {{2, 3, 1, 1}, {1, 3}},
      {{1, 40, 70}, {8}},
      {{2, 96, 11, 13}, {32, 1}},
      // Channels-last rows of four vectors and one or three more (at 16 lanes), and
      // row counts that leave a statistics run a partial step.
      {{2, 80, 9, 11}, {4, 80}},
      {{1, 112, 13, 5}, {14}},
      {{1, 544, 3, 70}, {17}},
      // Channels-last samples larger than one slab: several slab units per sample.
      {{2, 64, 60, 70}, {16, 64}},
      {{1, 48, 70, 80}, {12}},
      // Instance norm with rows wider than the stack scratch (channels-last), and
      // planes of 7x7 in batches of 16 planes and a last one of 8 (channels-first).
      {{1, 600, 3, 5}, {600}},
      {{2, 44, 7, 7}, {44}}};
  for (const auto& [shape, groups] : shapes_groups) {
    for (int64_t g : groups) {
      for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
        GroupNormCase k{shape, g, layout};
        RunGroupNormCase(k);
      }
    }
  }
}

TEST(GroupNorm, ActivationsParamsInPlaceAndThreads) {
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    for (int32_t act :
         {NORMKIT_ACTIVATION_NONE, NORMKIT_ACTIVATION_RELU, NORMKIT_ACTIVATION_SILU}) {
      for (int threads : {1, 2, 3}) {
        GroupNormCase k{{3, 24, 13, 11}, 6, layout, act};
        k.threads = threads;
        k.in_place = threads == 2;
        k.has_gamma = threads != 3;
        k.has_beta = act != NORMKIT_ACTIVATION_RELU;
        RunGroupNormCase(k);
      }
    }
  }
}

// Activations on the apply paths that take several vectors at a time: channels-last
// rows of more than four vectors (1280 channels: over 4 KiB, two rows a step, and an
// odd row count leaves a step of one), and channels-first planes whose runs end in an
// odd vector after the SiLU pairs.
TEST(GroupNorm, ActivationsOnWideRowsAndLongPlanes) {
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> shapes_groups = {
      {{1, 1280, 3, 3}, 32}, {{2, 128, 5, 3}, 8}, {{1, 8, 21, 23}, 4}};
  for (const auto& [shape, g] : shapes_groups) {
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      for (int32_t act :
           {NORMKIT_ACTIVATION_NONE, NORMKIT_ACTIVATION_RELU, NORMKIT_ACTIVATION_SILU}) {
        RunGroupNormCase(GroupNormCase{shape, g, layout, act});
      }
    }
  }
}

// One group larger than a fused task takes (split over threads) and one sample per
// call: the statistics are then merged across blocks of several tasks.
TEST(GroupNorm, LargeGroupsSplitAcrossThreads) {
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    for (int threads : {1, 2}) {
      GroupNormCase k{{1, 16, 130, 129}, 1, layout, NORMKIT_ACTIVATION_SILU};
      k.threads = threads;
      RunGroupNormCase(k);
      k.groups = 4;
      RunGroupNormCase(k);
    }
  }
}

// Mean 1e4 times the standard deviation: E[x^2] - E[x]^2 in float32 would lose every
// digit (the classic LayerNorm NaN reports); the result must still be within 1e-5.
TEST(GroupNorm, LargeMeanSmallVariance) {
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    for (const auto& [shape, g] : std::vector<std::pair<std::vector<int64_t>, int64_t>>{
             {{2, 32, 28, 28}, 8}, {{1, 16, 130, 129}, 1}, {{2, 6, 5, 7}, 3}}) {
      GroupNormCase k{shape, g, layout};
      k.offset = 1.15e4f;
      k.threads = 2;
      RunGroupNormCase(k);
    }
  }
}

// The statistics pivot on values sampled from a block (kernels::SampledSpanOffset,
// kernels::SampledRow). Here the sampled values are outliers and all the others are
// equal, so the pivot is far from the mean and float sums of the squared deviations
// about it round the same way every time: a single pass is off by ~1e-4. The second
// pass, about the mean the first one found, must give the exact result.
TEST(GroupNorm, OutliersWhereThePivotIsSampled) {
  struct Case {
    normkit_layout layout;
    int64_t C, G;
    int threads;
  };
  // C = 256 channels-last: samples in cache, one statistics block each, at 1 and 3 threads.
  for (const auto& [layout, C, G, threads] :
       {Case{NORMKIT_LAYOUT_CHANNELS_FIRST, 32, 8, 1}, Case{NORMKIT_LAYOUT_CHANNELS_LAST, 32, 2, 1},
        Case{NORMKIT_LAYOUT_CHANNELS_LAST, 256, 16, 1},
        Case{NORMKIT_LAYOUT_CHANNELS_LAST, 256, 16, 3},
        Case{NORMKIT_LAYOUT_CHANNELS_LAST, 256, 256, 1}}) {
    SCOPED_TRACE("layout=" + std::to_string(layout) + " C=" + std::to_string(C) +
                 " threads=" + std::to_string(threads));
    const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST;
    // One statistics block per group (per sample channels-last), one sampled row
    // channels-last: as few sampled values next to the block as possible.
    const int64_t N = 2, Cg = C / G;
    const int64_t S = normkit::cpu::kStatsBlockElems / (cl ? C : Cg);
    const std::vector<int64_t> shape = {N, C, S};
    std::vector<float> x = RandomVector(Numel(shape), 71), y(x.size());
    if (cl) {
      // Sample 0, all its groups.
      const int64_t samples = normkit::cpu::PivotSamples(S, Cg, false);
      for (int64_t i = 0; i < S * C; ++i) x[i] = 0.1f;
      for (int64_t j = 0; j < samples; ++j) {
        for (int64_t c = 0; c < C; ++c) {
          x[normkit::kernels::SampledRow(j, samples, S) * C + c] = 3.0e3f;
        }
      }
    } else {
      // Group 0 of sample 0; the vectors at the sampled offsets (16 lanes at most).
      for (int64_t i = 0; i < Cg * S; ++i) x[i] = 0.1f;
      for (size_t j = 0; j < normkit::kernels::kPivotVectors; ++j) {
        const int64_t at = normkit::kernels::SampledSpanOffset(j, Cg * S);
        for (int64_t i = 0; i < 16; ++i) x[at + i] = 3.0e3f;
      }
    }
    normkit_tensor xt = Desc(x.data(), layout, shape), yt = Desc(y.data(), layout, shape);
    Context ctx(threads);
    ASSERT_EQ(normkit_group_norm(ctx.ctx, &xt, G, nullptr, nullptr, 1e-5f, NORMKIT_ACTIVATION_NONE,
                                 &yt, nullptr, nullptr),
              NORMKIT_SUCCESS);
    ExpectNormNear(y, ReferenceGroupNorm(x, N, C, S, G, cl, nullptr, nullptr, 1e-5, 0),
                   "group_norm with outliers");
  }
}

// The same from memory (x over the 24 MiB streaming threshold): blocks of about 1 MiB,
// at least four sampled rows each, all of them outliers in every block of sample 0.
// Every group of those blocks needs its second pass; sample 1 is random. One and two
// threads (a sample's blocks split over them).
TEST(GroupNorm, OutliersWhereThePivotIsSampledFromMemory) {
  const int64_t N = 2, C = 256, G = 16, S = 13000;
  const std::vector<int64_t> shape = {N, C, S};
  ASSERT_GE(Numel(shape) * 4, int64_t{24} << 20);
  std::vector<float> x = RandomVector(Numel(shape), 72), y(x.size());
  const int64_t block_rows = normkit::cpu::ChannelsLastBlockRows(S, C, true);
  ASSERT_LT(block_rows, S);  // several blocks
  for (int64_t i = 0; i < S * C; ++i) x[i] = 0.1f;
  for (int64_t r0 = 0; r0 < S; r0 += block_rows) {
    const int64_t rows = std::min(block_rows, S - r0);
    const int64_t samples = normkit::cpu::PivotSamples(rows, C / G, true);
    ASSERT_GE(samples, 4);
    for (int64_t j = 0; j < samples; ++j) {
      const int64_t r = r0 + normkit::kernels::SampledRow(j, samples, rows);
      for (int64_t c = 0; c < C; ++c) x[r * C + c] = 3.0e3f;
    }
  }
  const NormReference want =
      ReferenceGroupNorm(x, N, C, S, G, true, nullptr, nullptr, 1e-5, NORMKIT_ACTIVATION_NONE);
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_LAST, shape),
                   yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_LAST, shape);
    Context ctx(threads);
    ASSERT_EQ(normkit_group_norm(ctx.ctx, &xt, G, nullptr, nullptr, 1e-5f, NORMKIT_ACTIVATION_NONE,
                                 &yt, nullptr, nullptr),
              NORMKIT_SUCCESS);
    ExpectNormNear(y, want, "group_norm with outliers, from memory");
  }
}

TEST(GroupNorm, ConstantGroupsAndSingleElementGroupsGiveBeta) {
  const std::vector<float> beta = {0.5f, -1.0f, 2.0f, 0.25f, 3.0f, -2.5f};
  const std::vector<float> gamma = {2.0f, 3.0f, -1.0f, 1.0f, 0.5f, 7.0f};
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    // One element per group: rank 2, G = C.
    std::vector<float> x = RandomVector(2 * 6, 5), y(x.size());
    normkit_tensor xt = Desc(x.data(), layout, {2, 6}), yt = Desc(y.data(), layout, {2, 6});
    ASSERT_EQ(normkit_group_norm(nullptr, &xt, 6, gamma.data(), beta.data(), 1e-5f,
                                 NORMKIT_ACTIVATION_NONE, &yt, nullptr, nullptr),
              NORMKIT_SUCCESS);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], beta[i % 6]) << i;
    // Constant groups of many elements, with a large value.
    const std::vector<int64_t> shape = {2, 6, 9, 10};
    std::vector<float> xc(Numel(shape)), yc(xc.size());
    for (size_t i = 0; i < xc.size(); ++i) xc[i] = 12345.678f;
    xt = Desc(xc.data(), layout, shape);
    yt = Desc(yc.data(), layout, shape);
    ASSERT_EQ(normkit_group_norm(nullptr, &xt, 3, gamma.data(), beta.data(), 1e-5f,
                                 NORMKIT_ACTIVATION_NONE, &yt, nullptr, nullptr),
              NORMKIT_SUCCESS);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 6; ++c)
        for (int64_t s = 0; s < 90; ++s)
          ASSERT_EQ(yc[Offset(n, c, s, 6, 90, layout == NORMKIT_LAYOUT_CHANNELS_LAST)], beta[c]);
  }
}

// NaN or Inf in one group reaches that group's outputs and no other.
TEST(GroupNorm, NonFiniteStaysInItsGroup) {
  const std::vector<int64_t> shape = {2, 8, 6, 5};
  const int64_t N = 2, C = 8, S = 30, G = 4;
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST;
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      std::vector<float> x = RandomVector(Numel(shape), 21), y(x.size());
      x[Offset(1, 5, 7, C, S, cl)] = bad;  // sample 1, group 2
      normkit_tensor xt = Desc(x.data(), layout, shape), yt = Desc(y.data(), layout, shape);
      ASSERT_EQ(normkit_group_norm(nullptr, &xt, G, nullptr, nullptr, 1e-5f,
                                   NORMKIT_ACTIVATION_SILU, &yt, nullptr, nullptr),
                NORMKIT_SUCCESS);
      const NormReference clean =
          ReferenceGroupNorm(x, N, C, S, G, cl, nullptr, nullptr, 1e-5, NORMKIT_ACTIVATION_SILU);
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t c = 0; c < C; ++c) {
          for (int64_t s = 0; s < S; ++s) {
            const int64_t i = Offset(n, c, s, C, S, cl);
            if (n == 1 && c / 2 == 2) {
              EXPECT_TRUE(std::isnan(y[i])) << "poisoned group, element " << i;
            } else {
              EXPECT_NEAR(y[i], clean.y[i], 1e-5 * clean.magnitude[i] + 1e-7) << i;
            }
          }
        }
      }
    }
  }
}

TEST(GroupNorm, NamedFormsEqualGroupNorm) {
  const std::vector<int64_t> shape = {2, 12, 7, 9};
  const std::vector<float> x = RandomVector(Numel(shape), 31), gamma = RandomVector(12, 32),
                           beta = RandomVector(12, 33);
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    std::vector<float> a(x.size()), b(x.size()), ma(24), mb(24), ra(24), rb(24);
    normkit_tensor xt = Desc(const_cast<float*>(x.data()), layout, shape);
    normkit_tensor at = Desc(a.data(), layout, shape), bt = Desc(b.data(), layout, shape);
    ASSERT_EQ(normkit_instance_norm(nullptr, &xt, gamma.data(), beta.data(), 1e-5f,
                                    NORMKIT_ACTIVATION_RELU, &at, ma.data(), ra.data()),
              NORMKIT_SUCCESS);
    ASSERT_EQ(normkit_group_norm(nullptr, &xt, 12, gamma.data(), beta.data(), 1e-5f,
                                 NORMKIT_ACTIVATION_RELU, &bt, mb.data(), rb.data()),
              NORMKIT_SUCCESS);
    EXPECT_EQ(a, b);
    EXPECT_EQ(ma, mb);
    EXPECT_EQ(ra, rb);
    ASSERT_EQ(normkit_channel_layer_norm(nullptr, &xt, gamma.data(), beta.data(), 1e-5f,
                                         NORMKIT_ACTIVATION_NONE, &at, ma.data(), ra.data()),
              NORMKIT_SUCCESS);
    ASSERT_EQ(normkit_group_norm(nullptr, &xt, 1, gamma.data(), beta.data(), 1e-5f,
                                 NORMKIT_ACTIVATION_NONE, &bt, mb.data(), rb.data()),
              NORMKIT_SUCCESS);
    EXPECT_EQ(a, b);
    EXPECT_EQ(std::vector<float>(ma.begin(), ma.begin() + 2),
              std::vector<float>(mb.begin(), mb.begin() + 2));
  }
}

// Bitwise identical outputs and statistics for 1, 2, 3 and 8 threads, in place or not,
// for fused (small groups) and split (one large group) plans in both layouts.
// The fused SiLU against v / (1 + e^-v) in double, at the very pre-activation values
// v the kernel computed (the same call without the activation), over v in about
// [-277, 277]: the clamped exponential's ends, the sign change, and everything between.
TEST(GroupNorm, SiluWithinAFewUlpsOverItsRange) {
  const int64_t S = int64_t{1} << 18;
  std::vector<float> x(S), v(S), s(S);
  for (int64_t i = 0; i < S; ++i) x[i] = -1.0f + 2.0f * static_cast<float>(i) / (S - 1);
  const float gamma = 160.0f, beta = 0.5f;
  normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {1, 1, S});
  normkit_tensor vt = Desc(v.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {1, 1, S});
  normkit_tensor st = Desc(s.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {1, 1, S});
  ASSERT_EQ(normkit_group_norm(nullptr, &xt, 1, &gamma, &beta, 1e-5f, NORMKIT_ACTIVATION_NONE, &vt,
                               nullptr, nullptr),
            NORMKIT_SUCCESS);
  ASSERT_EQ(normkit_group_norm(nullptr, &xt, 1, &gamma, &beta, 1e-5f, NORMKIT_ACTIVATION_SILU, &st,
                               nullptr, nullptr),
            NORMKIT_SUCCESS);
  ASSERT_LT(v.front(), -250.0f);
  ASSERT_GT(v.back(), 250.0f);
  int64_t bad = 0;
  for (int64_t i = 0; i < S; ++i) {
    const double vi = v[i], want = vi / (1.0 + std::exp(-vi));
    // 8 units of 2^-24 relative; below ~1e-35 (v < -75) the clamp leaves a tiny value.
    if (std::fabs(s[i] - want) > 8 * 0x1p-24 * std::fabs(want) + 1e-35 && ++bad <= 5) {
      ADD_FAILURE() << "silu(" << vi << ") = " << s[i] << ", want " << want;
    }
  }
  EXPECT_EQ(bad, 0);
}

// Channels-last tensors larger than the last-level cache read their rows in another
// order (a few distant streams) than cached ones: a sample split over threads, and
// samples of one fused task each; rows wider than four vectors, with a tail.
TEST(GroupNorm, ChannelsLastFromMemory) {
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> cases = {{{2, 100, 180, 180}, 4},
                                                                       {{48, 136, 32, 32}, 8}};
  for (const auto& [shape, g] : cases) {
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      GroupNormCase k{shape, g, NORMKIT_LAYOUT_CHANNELS_LAST, NORMKIT_ACTIVATION_SILU};
      k.threads = threads;
      k.offset = 3.0f;
      RunGroupNormCase(k);
      // And bitwise the same for every thread count.
      const int64_t C = shape[1];
      const std::vector<float> x = RandomVector(Numel(shape), 51), gamma = RandomVector(C, 52);
      std::vector<float> y(x.size());
      Context ctx(threads);
      std::vector<float> xb = x;
      normkit_tensor xt = Desc(xb.data(), NORMKIT_LAYOUT_CHANNELS_LAST, shape),
                     yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_LAST, shape);
      ASSERT_EQ(normkit_group_norm(ctx.ctx, &xt, g, gamma.data(), nullptr, 1e-5f,
                                   NORMKIT_ACTIVATION_NONE, &yt, nullptr, nullptr),
                NORMKIT_SUCCESS);
      ExpectSameBitsAsFirst(&first, y, threads);
    }
  }
}

// Groups of up to 8 KiB go in chains, one per thread, each group's statistics read
// during the previous group's output pass (the chain's first group reads its own).
// Where chains start follows the thread count, so 1, 2, 3 and 8 threads put the
// separate and the chained statistics on different groups: the bits must not move.
// y is 64-byte aligned or one float off (the chained pass then stores unaligned);
// x is large enough to run threaded.
TEST(GroupNorm, ChainedGroupsGiveTheSameBitsWhereverChainsStart) {
  const std::vector<int64_t> shape = {4, 256, 14, 14};
  const int64_t N = 4, C = 256, S = 196, G = 32, numel = Numel(shape);
  std::vector<float> x = RandomVector(numel, 51);
  for (int64_t i = 0; i < numel; i += 7) x[i] += 40.0f;  // some groups' pivots land far
  const std::vector<float> gamma = RandomVector(C, 52), beta = RandomVector(C, 53);
  const NormReference want = ReferenceGroupNorm(x, N, C, S, G, false, gamma.data(), beta.data(),
                                                1e-5, NORMKIT_ACTIVATION_RELU);
  for (int64_t misalign : {0, 1}) {
    std::vector<float> first;
    for (int threads : {1, 2, 3, 8}) {
      SCOPED_TRACE("threads=" + std::to_string(threads) + " misalign=" + std::to_string(misalign));
      std::vector<float> buf(numel + 32);
      float* y = buf.data();
      while (reinterpret_cast<uintptr_t>(y) % 64 != 0) ++y;
      y += misalign;
      Context ctx(threads);
      normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape),
                     yt = Desc(y, NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
      ASSERT_EQ(normkit_group_norm(ctx.ctx, &xt, G, gamma.data(), beta.data(), 1e-5f,
                                   NORMKIT_ACTIVATION_RELU, &yt, nullptr, nullptr),
                NORMKIT_SUCCESS);
      const std::vector<float> got(y, y + numel);
      ExpectNormNear(got, want, "group_norm");
      ExpectSameBitsAsFirst(&first, got, threads);
    }
  }
}

// Out of place from memory (x of at least cpu::kChainedFromMemoryBytes) every group
// goes in chains, block by block where a group spans several statistics blocks; in place
// the same groups go statistics-then-output. Both, for 1, 2, 3 and 8 threads and into a
// y one float off a vector (no streaming stores there), must give the same bits, and
// the double reference's values; the mean / rstd outputs too. Groups of 392 KiB (four
// blocks, the last short) and of 24.5 KiB (one block), and of 6 KiB in a 24.5 MiB
// tensor (small groups chain, streamed, from 24 MiB on); +40 on every 7th value sends
// some groups' statistics through their second pass.
TEST(GroupNorm, ChainedFromMemoryGivesTheSameBitsAsStatisticsThenOutput) {
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> cases = {
      {{16, 64, 112, 112}, 8}, {{64, 256, 28, 28}, 32}, {{128, 256, 14, 14}, 32}};
  for (const auto& [shape, G] : cases) {
    const int64_t N = shape[0], C = shape[1], numel = Numel(shape), S = numel / (N * C);
    ASSERT_GE(numel * 4, int64_t{24} << 20);  // streamed (cpu::kStreamingStoreBytes)
    std::vector<float> x = RandomVector(numel, 61);
    for (int64_t i = 0; i < numel; i += 7) x[i] += 40.0f;
    const std::vector<float> gamma = RandomVector(C, 62), beta = RandomVector(C, 63);
    std::vector<float> first, first_stats;
    {
      const NormReference want = ReferenceGroupNorm(x, N, C, S, G, false, gamma.data(), beta.data(),
                                                    1e-5, NORMKIT_ACTIVATION_RELU);
      std::vector<float> y(numel);
      normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape),
                     yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
      ASSERT_EQ(normkit_group_norm(nullptr, &xt, G, gamma.data(), beta.data(), 1e-5f,
                                   NORMKIT_ACTIVATION_RELU, &yt, nullptr, nullptr),
                NORMKIT_SUCCESS);
      ExpectNormNear(y, want, "group_norm chained from memory");
      first = std::move(y);
    }
    // mode 0: out of place, y aligned; 1: y one float off; 2: in place.
    for (int mode = 0; mode < 3; ++mode) {
      for (int threads : {1, 2, 3, 8}) {
        if (mode > 0 && threads != 2) continue;
        SCOPED_TRACE("G=" + std::to_string(G) + " mode=" + std::to_string(mode) +
                     " threads=" + std::to_string(threads));
        std::vector<float> buf(numel + 16), xb, stats(2 * N * G);
        float* y = buf.data();
        while (reinterpret_cast<uintptr_t>(y) % 64 != 0) ++y;
        if (mode == 1) ++y;
        if (mode == 2) y = (xb = x).data();
        Context ctx(threads);
        normkit_tensor xt = Desc(mode == 2 ? y : x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape),
                       yt = Desc(y, NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
        ASSERT_EQ(
            normkit_group_norm(ctx.ctx, &xt, G, gamma.data(), beta.data(), 1e-5f,
                               NORMKIT_ACTIVATION_RELU, &yt, stats.data(), stats.data() + N * G),
            NORMKIT_SUCCESS);
        EXPECT_EQ(std::memcmp(y, first.data(), sizeof(float) * numel), 0);
        ExpectSameBitsAsFirst(&first_stats, stats, threads);
      }
    }
  }
}

TEST(GroupNorm, BitwiseIdenticalAcrossThreadCounts) {
  struct Case {
    std::vector<int64_t> shape;
    int64_t g;
    bool far_pivots = false;  // +40 on every 7th value: some groups take a second pass
  };
  const std::vector<Case> cases = {
      {{3, 32, 17, 19}, 8},
      {{1, 16, 130, 129}, 1},
      {{1, 64, 56, 56}, 32},
      {{2, 20, 300}, 4},
      // Channels-last rows wider than the statistics' stack scratch (512 channels):
      // one sample split over the threads, and samples one per thread.
      {{1, 544, 3, 70}, 17},
      {{3, 544, 5, 13}, 32},
      // Channels-last samples in cache (up to kOneBlockSampleBytes): statistics in one
      // block of all rows, a sample to a thread; 8 channels past the last four vectors,
      // and second passes for some groups only.
      {{1, 256, 14, 14}, 32},
      {{2, 200, 19, 17}, 25},
      {{1, 256, 14, 14}, 32, true},
      {{2, 200, 19, 17}, 25, true},
      // Channels-first groups small enough to go in batches (kBatchedUnitBytes), the
      // batches crossing samples; instance norm on 7x7 planes.
      {{3, 96, 7, 7}, 96},
      {{2, 60, 9, 7}, 20, true}};
  for (const auto& [shape, g, far_pivots] : cases) {
    const int64_t N = shape[0], C = shape[1];
    std::vector<float> x = RandomVector(Numel(shape), 41);
    const std::vector<float> gamma = RandomVector(C, 42), beta = RandomVector(C, 43);
    if (far_pivots) {
      for (size_t i = 0; i < x.size(); i += 7) x[i] += 40.0f;
    }
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      std::vector<float> first, first_stats;
      for (int threads : {1, 2, 3, 8}) {
        for (bool in_place : {false, true}) {
          std::vector<float> xb = x, yb(x.size()), stats(2 * N * g);
          float* yd = in_place ? xb.data() : yb.data();
          Context ctx(threads);
          normkit_tensor xt = Desc(xb.data(), layout, shape), yt = Desc(yd, layout, shape);
          ASSERT_EQ(
              normkit_group_norm(ctx.ctx, &xt, g, gamma.data(), beta.data(), 1e-5f,
                                 NORMKIT_ACTIVATION_SILU, &yt, stats.data(), stats.data() + N * g),
              NORMKIT_SUCCESS);
          if (first.empty()) {
            first.assign(yd, yd + x.size());
            first_stats = stats;
          } else {
            ASSERT_EQ(std::memcmp(first.data(), yd, first.size() * sizeof(float)), 0)
                << "threads=" << threads << " in_place=" << in_place << " layout=" << layout
                << " G=" << g;
            ASSERT_EQ(first_stats, stats);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace normkit_test
