// SPDX-License-Identifier: Apache-2.0
// Layer norm and RMS norm over the last dimension of [rows, D] against the double
// reference: row lengths around the vector width and the statistics block, absent
// gamma / beta, in place, a large mean, and bitwise determinism across threads.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "norm_reference.h"
#include "test_util.h"

namespace normkit_test {
namespace {

void RunRowNorm(int64_t rows, int64_t D, bool rms, bool has_gamma, bool has_beta, bool in_place,
                int threads, float offset) {
  SCOPED_TRACE(testing::Message() << "rows=" << rows << " D=" << D << " rms=" << rms << " gamma="
                                  << has_gamma << " beta=" << has_beta << " in_place=" << in_place
                                  << " threads=" << threads << " offset=" << offset);
  std::vector<float> x = RandomVector(rows * D, 51 + static_cast<uint32_t>(D));
  for (auto& v : x) v += offset;
  const std::vector<float> gamma = RandomVector(D, 52), beta = RandomVector(D, 53);
  const float* gp = has_gamma ? gamma.data() : nullptr;
  const float* bp = has_beta ? beta.data() : nullptr;
  const NormReference want = ReferenceRowNorm(x, rows, D, gp, bp, 1e-6, rms);
  std::vector<float> xb = x, yb(x.size()), mean(rows), rstd(rows);
  float* yd = in_place ? xb.data() : yb.data();
  Context ctx(threads);
  const auto layout = rows % 2 ? NORMKIT_LAYOUT_CHANNELS_FIRST : NORMKIT_LAYOUT_CHANNELS_LAST;
  normkit_tensor xt = Desc(xb.data(), layout, {rows, D}), yt = Desc(yd, layout, {rows, D});
  if (rms) {
    ASSERT_EQ(normkit_rms_norm(ctx.ctx, &xt, gp, 1e-6f, &yt, rstd.data()), NORMKIT_SUCCESS)
        << normkit_last_error();
  } else {
    ASSERT_EQ(normkit_layer_norm(ctx.ctx, &xt, gp, bp, 1e-6f, &yt, mean.data(), rstd.data()),
              NORMKIT_SUCCESS)
        << normkit_last_error();
  }
  ExpectNormNear(std::vector<float>(yd, yd + x.size()), want, rms ? "rms_norm" : "layer_norm");
  for (int64_t r = 0; r < rows; ++r) {
    if (!rms) EXPECT_NEAR(mean[r], want.mean[r], 1e-6 * std::fabs(want.mean[r]) + 1e-7);
    EXPECT_NEAR(rstd[r], want.rstd[r], 1e-6 * want.rstd[r]);
  }
}

TEST(RowNorm, LayerNormMatchesReference) {
  for (int64_t D : {1, 3, 15, 16, 17, 100, 768, 4096, 5000}) {
    RunRowNorm(7, D, false, true, true, false, 2, 0.0f);
  }
  RunRowNorm(64, 768, false, false, true, true, 3, 0.0f);
  // Short rows of a cache-resident tensor take their statistics in batches (64 rows of
  // 64, 20 of 200): several batches per task, the last one partial.
  RunRowNorm(300, 64, false, true, true, false, 2, 0.0f);
  RunRowNorm(101, 200, false, true, true, true, 3, 0.0f);
  RunRowNorm(5, 33, false, true, false, false, 1, 0.0f);
  RunRowNorm(5, 33, false, false, false, true, 1, 0.0f);
}

TEST(RowNorm, RmsNormMatchesReference) {
  for (int64_t D : {1, 7, 16, 31, 768, 5000}) RunRowNorm(6, D, true, true, false, false, 2, 0.0f);
  RunRowNorm(33, 128, true, false, false, true, 3, 0.0f);
  // Batches of short rows (64 rows of 64, 20 of 200), the last one partial.
  RunRowNorm(300, 64, true, true, false, false, 2, 0.0f);
  RunRowNorm(101, 200, true, true, false, true, 3, 1.0e3f);
}

TEST(RowNorm, LargeMeanSmallVariance) {
  for (int64_t D : {64, 768, 5000}) RunRowNorm(9, D, false, true, true, false, 2, 1.15e4f);
  RunRowNorm(150, 48, false, true, true, false, 2, 1.15e4f);
}

TEST(RowNorm, BitwiseIdenticalAcrossThreadCounts) {
  const int64_t rows = 300, D = 200;
  const std::vector<float> x = RandomVector(rows * D, 61), gamma = RandomVector(D, 62);
  for (bool rms : {false, true}) {
    std::vector<float> first;
    for (int threads : {1, 2, 3, 8}) {
      std::vector<float> y(x.size());
      Context ctx(threads);
      normkit_tensor xt = Desc(const_cast<float*>(x.data()), NORMKIT_LAYOUT_CHANNELS_FIRST,
                               {rows, D}),
                     yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
      ASSERT_EQ(rms ? normkit_rms_norm(ctx.ctx, &xt, gamma.data(), 1e-5f, &yt, nullptr)
                    : normkit_layer_norm(ctx.ctx, &xt, gamma.data(), nullptr, 1e-5f, &yt, nullptr,
                                         nullptr),
                NORMKIT_SUCCESS);
      ExpectSameBitsAsFirst(&first, y, threads);
    }
  }
}

// gamma and beta wherever the caller's arrays start: on a cache line, or 4 or 16 bytes
// past one (NumPy's small arrays), each on its own (RowNorm then loads aligned copies).
// The same bits in every placement, and the double reference's values.
TEST(RowNorm, GammaAndBetaAtAnyAlignment) {
  const int64_t rows = 33, D = 200;
  const std::vector<float> x = RandomVector(rows * D, 81), gamma = RandomVector(D, 82),
                           beta = RandomVector(D, 83);
  // 64-byte aligned room for both arrays at any of the offsets below.
  std::unique_ptr<float, decltype(&std::free)> room(
      static_cast<float*>(std::aligned_alloc(64, 64 * sizeof(float) + 2 * 4096)), &std::free);
  for (bool rms : {false, true}) {
    std::vector<float> first;
    for (const auto& [gamma_at, beta_at] : std::vector<std::pair<int64_t, int64_t>>{
             {0, 512}, {1, 512}, {0, 516}, {4, 513}, {7, 519}}) {
      SCOPED_TRACE(testing::Message() << "rms=" << rms << " gamma at float " << gamma_at
                                      << ", beta at float " << beta_at);
      float* g = std::copy(gamma.begin(), gamma.end(), room.get() + gamma_at) - D;
      float* b = std::copy(beta.begin(), beta.end(), room.get() + beta_at) - D;
      std::vector<float> y(x.size());
      Context ctx(2);
      normkit_tensor xt = Desc(const_cast<float*>(x.data()), NORMKIT_LAYOUT_CHANNELS_FIRST,
                               {rows, D}),
                     yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
      ASSERT_EQ(rms ? normkit_rms_norm(ctx.ctx, &xt, g, 1e-5f, &yt, nullptr)
                    : normkit_layer_norm(ctx.ctx, &xt, g, b, 1e-5f, &yt, nullptr, nullptr),
                NORMKIT_SUCCESS)
          << normkit_last_error();
      ExpectNormNear(
          y, ReferenceRowNorm(x, rows, D, gamma.data(), rms ? nullptr : beta.data(), 1e-5, rms),
          rms ? "rms_norm" : "layer_norm");
      if (first.empty()) {
        first = y;
      } else {
        EXPECT_EQ(std::memcmp(first.data(), y.data(), sizeof(float) * y.size()), 0);
      }
    }
  }
}

// A row's result depends on the row alone, not on the batch around it: every row of a
// batch gets the bits the same row gets as a batch of one. Any walk that shares work
// across rows (rows in chains or in batches, tried in 2026-11) must keep this. Rows of
// 3 to 5000 floats, a large mean on every third row (its pivot then sits far from its
// mean), in place too.
TEST(RowNorm, EachRowGetsTheBitsItGetsAlone) {
  const int64_t rows = 45;
  for (int64_t D : {3, 33, 768, 2048, 2049, 5000}) {
    std::vector<float> x = RandomVector(rows * D, 71 + static_cast<uint32_t>(D));
    for (int64_t r = 0; r < rows; r += 3) {
      for (int64_t d = 0; d < D; ++d) x[r * D + d] = 1.0e4f + 1.0e-2f * x[r * D + d];
    }
    const std::vector<float> gamma = RandomVector(D, 72), beta = RandomVector(D, 73);
    for (bool rms : {false, true}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(testing::Message() << "D=" << D << " rms=" << rms << " in_place=" << in_place);
        const auto run = [&](float* xd, float* yd, int64_t n, float* mean, float* rstd) {
          normkit_tensor xt = Desc(xd, NORMKIT_LAYOUT_CHANNELS_FIRST, {n, D}),
                         yt = Desc(yd, NORMKIT_LAYOUT_CHANNELS_FIRST, {n, D});
          Context ctx(2);
          return rms ? normkit_rms_norm(ctx.ctx, &xt, gamma.data(), 1e-5f, &yt, rstd)
                     : normkit_layer_norm(ctx.ctx, &xt, gamma.data(), beta.data(), 1e-5f, &yt, mean,
                                          rstd);
        };
        std::vector<float> xb = x, yb(x.size()), mean(rows), rstd(rows);
        float* y = in_place ? xb.data() : yb.data();
        ASSERT_EQ(run(xb.data(), y, rows, mean.data(), rstd.data()), NORMKIT_SUCCESS);
        ExpectNormNear(
            std::vector<float>(y, y + rows * D),
            ReferenceRowNorm(x, rows, D, gamma.data(), rms ? nullptr : beta.data(), 1e-5, rms),
            rms ? "rms_norm" : "layer_norm");
        for (int64_t r = 0; r < rows; ++r) {
          std::vector<float> row(x.begin() + r * D, x.begin() + (r + 1) * D), alone(D);
          float mean1 = 0.0f, rstd1 = 0.0f;
          ASSERT_EQ(run(row.data(), alone.data(), 1, &mean1, &rstd1), NORMKIT_SUCCESS);
          ASSERT_EQ(std::memcmp(alone.data(), y + r * D, sizeof(float) * D), 0) << "row " << r;
          if (!rms) ASSERT_EQ(std::memcmp(&mean1, &mean[r], sizeof(float)), 0) << "row " << r;
          ASSERT_EQ(std::memcmp(&rstd1, &rstd[r], sizeof(float)), 0) << "row " << r;
        }
      }
    }
  }
}

}  // namespace
}  // namespace normkit_test
