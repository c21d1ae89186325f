// SPDX-License-Identifier: Apache-2.0
// Runs the kernels on every SIMD target this CPU supports (not only the best one)
// and checks each against the double reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu/kernels/group_norm.h"
#include "hwy/highway.h"
#include "hwy/targets.h"
#include "norm_reference.h"
#include "test_util.h"

namespace normkit_test {
namespace {

// normkit_affine on a 3-thread context (ranges then start inside planes / periods).
normkit_status AffineOnThreeThreads(const normkit_tensor* x, const normkit_tensor* y,
                                    const float* scale, const float* shift, bool per_sample) {
  Context ctx(3);
  return normkit_affine(ctx.ctx, x, scale, shift,
                        per_sample ? NORMKIT_PARAMS_PER_SAMPLE_CHANNEL : NORMKIT_PARAMS_PER_CHANNEL,
                        y);
}

TEST(SimdTargets, EverySupportedTargetMatchesReference) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  ASSERT_FALSE(targets.empty());
  std::string names;
  for (int64_t target : targets) names += std::string(hwy::TargetName(target)) + " ";
  RecordProperty("targets", names);
  std::printf("SIMD targets exercised: %s\n", names.c_str());
  const std::vector<std::vector<int64_t>> shapes = {
      {2, 3, 5, 7}, {1, 17, 40}, {3, 4, 1, 1}, {2, 33, 9, 31}};
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    EXPECT_EQ(std::string(normkit_simd_target()), hwy::TargetName(target));
    for (const auto& shape : shapes) {
      const int64_t N = shape[0], C = shape[1], numel = Numel(shape), S = numel / (N * C);
      const std::vector<float> x = RandomVector(numel, 7), scale = RandomVector(N * C, 8),
                               shift = RandomVector(N * C, 9);
      for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
        for (bool per_sample : {false, true}) {
          std::vector<float> y(numel);
          normkit_tensor xt = Desc(const_cast<float*>(x.data()), layout, shape),
                         yt = Desc(y.data(), layout, shape);
          ASSERT_EQ(
              normkit_affine(
                  nullptr, &xt, scale.data(), shift.data(),
                  per_sample ? NORMKIT_PARAMS_PER_SAMPLE_CHANNEL : NORMKIT_PARAMS_PER_CHANNEL, &yt),
              NORMKIT_SUCCESS);
          const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST;
          const auto want = ReferenceAffine(x, N, C, S, cl, scale.data(), shift.data(), per_sample);
          std::vector<float> ax(x), as(scale), ab(shift);
          for (auto* v : {&ax, &as, &ab})
            for (auto& e : *v) e = std::fabs(e);
          ExpectNear(y, want, ReferenceAffine(ax, N, C, S, cl, as.data(), ab.data(), per_sample),
                     "affine");
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);  // back to what the CPU reports
}

// Channels-first planes of one to four vectors take the table-lookup walk (blocks of
// lcm(S, lanes) elements); around it, planes shorter than a vector and longer than
// four. Small C makes the block's planes wrap around the parameters; an odd offset
// misaligns the stores; three threads start ranges inside blocks.
TEST(SimdTargets, AffineShortPlanesOnEveryTarget) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int64_t S :
         {3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 20, 24, 31, 32, 33, 40, 49, 50, 63, 64, 65, 100}) {
      for (const auto& nc :
           std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 3}, {3, 17}, {2, 1024}}) {
        const int64_t N = nc.first, C = nc.second, numel = N * C * S;
        const std::vector<int64_t> shape = {N, C, S};
        const std::vector<float> x = RandomVector(numel, 17), scale = RandomVector(N * C, 18),
                                 shift = RandomVector(N * C, 19);
        for (bool per_sample : {false, true}) {
          for (int terms : {1, 2, 3}) {
            const float* sp = terms & 1 ? scale.data() : nullptr;
            const float* bp = terms & 2 ? shift.data() : nullptr;
            for (int64_t misalign : {0, 1}) {
              SCOPED_TRACE("S=" + std::to_string(S) + " N=" + std::to_string(N) +
                           " C=" + std::to_string(C) + " per_sample=" + std::to_string(per_sample) +
                           " terms=" + std::to_string(terms) +
                           " misalign=" + std::to_string(misalign));
              std::vector<float> buf(numel + 16);
              float* y = buf.data() + misalign;
              normkit_tensor xt = Desc(const_cast<float*>(x.data()), NORMKIT_LAYOUT_CHANNELS_FIRST,
                                       shape),
                             yt = Desc(y, NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
              ASSERT_EQ(AffineOnThreeThreads(&xt, &yt, sp, bp, per_sample), NORMKIT_SUCCESS);
              const auto want = ReferenceAffine(x, N, C, S, false, sp, bp, per_sample);
              std::vector<float> ax(x), as(scale), ab(shift);
              for (auto* v : {&ax, &as, &ab})
                for (auto& e : *v) e = std::fabs(e);
              ExpectNear(std::vector<float>(y, y + numel), want,
                         ReferenceAffine(ax, N, C, S, false, sp ? as.data() : nullptr,
                                         bp ? ab.data() : nullptr, per_sample),
                         "affine");
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Channels-last periods of lcm(C, lanes): one to 16 vectors keep their parameters
// in registers (both terms up to half the register file, else the shift; short
// periods repeated to fill them), longer ones take the row walks. An odd offset
// starts the registers inside the period; 37 pixels leave whole periods after the
// last full step and a tail; 3 threads start ranges mid-period. Every C runs at
// 4 MiB and under (in-cache calls, where C = 256 keeps rows) and C = 64 / 256 also
// above (registers for every term mix; C = 256 with both terms: the shift only), as
// do two long periods (paired halves).
TEST(SimdTargets, AffineChannelsLastPeriodsOnEveryTarget) {
  struct Shape {
    int64_t N, C, S;
  };
  std::vector<Shape> shapes;
  for (int64_t C : {1, 2, 3, 5, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 240, 256, 272, 512}) {
    shapes.push_back({2, C, 37});
  }
  shapes.push_back({1, 64, 17000});  // 4.2 MiB: past the in-cache row walk
  // 1-4 MiB, periods past the registers: the row walk, four rows (C = 512, 272) and
  // two (C = 1024: periods of 4 KiB).
  shapes.push_back({1, 512, 640});
  shapes.push_back({2, 272, 620});
  shapes.push_back({1, 1024, 300});
  shapes.push_back({1, 256, 4500});
  // Periods past the registers over 4 MiB walk two halves in step: 125 vectors of
  // C = 1000 (4-vector steps), 65 of C = 520 with samples split across threads.
  shapes.push_back({1, 1000, 1300});
  shapes.push_back({2, 520, 1100});
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (const Shape& s : shapes) {
      const int64_t numel = s.N * s.C * s.S;
      const std::vector<int64_t> logical = {s.N, s.C, s.S};
      const std::vector<float> x = RandomVector(numel, 27), scale = RandomVector(s.N * s.C, 28),
                               shift = RandomVector(s.N * s.C, 29);
      std::vector<float> ax(x), as(scale), ab(shift);
      for (auto* v : {&ax, &as, &ab})
        for (auto& e : *v) e = std::fabs(e);
      for (bool per_sample : {false, true}) {
        for (int terms : {1, 2, 3}) {
          const float* sp = terms & 1 ? scale.data() : nullptr;
          const float* bp = terms & 2 ? shift.data() : nullptr;
          const auto want = ReferenceAffine(x, s.N, s.C, s.S, true, sp, bp, per_sample);
          const auto mag = ReferenceAffine(ax, s.N, s.C, s.S, true, sp ? as.data() : nullptr,
                                           bp ? ab.data() : nullptr, per_sample);
          for (bool in_place : {false, true}) {
            for (int64_t misalign : {0, 1}) {
              SCOPED_TRACE(
                  "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) +
                  " S=" + std::to_string(s.S) + " per_sample=" + std::to_string(per_sample) +
                  " terms=" + std::to_string(terms) + " in_place=" + std::to_string(in_place) +
                  " misalign=" + std::to_string(misalign));
              std::vector<float> xbuf(numel + 16), ybuf(numel + 16);
              float* xd = xbuf.data() + misalign;
              float* yd = in_place ? xd : ybuf.data() + misalign;
              std::copy(x.begin(), x.end(), xd);
              normkit_tensor xt = Desc(xd, NORMKIT_LAYOUT_CHANNELS_LAST, logical),
                             yt = Desc(yd, NORMKIT_LAYOUT_CHANNELS_LAST, logical);
              ASSERT_EQ(AffineOnThreeThreads(&xt, &yt, sp, bp, per_sample), NORMKIT_SUCCESS);
              ExpectNear(std::vector<float>(yd, yd + numel), want, mag, "affine");
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The batch-norm fold is IEEE float arithmetic without FMA on every target: the same
// bits as the plain formula, vector body and scalar tail alike.
TEST(SimdTargets, BatchNormFoldIsTheFloatFormulaOnEveryTarget) {
  const int64_t C = 45;
  const std::vector<float> gamma = RandomVector(C, 11), beta = RandomVector(C, 12),
                           mean = RandomVector(C, 13), var = RandomVector(C, 14, 0.0f, 4.0f);
  const float eps = 1e-5f;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    std::vector<float> scale(C), shift(C);
    ASSERT_EQ(normkit_batch_norm_fold(C, gamma.data(), beta.data(), mean.data(), var.data(), eps,
                                      scale.data(), shift.data()),
              NORMKIT_SUCCESS);
    for (int64_t c = 0; c < C; ++c) {
      const float s = gamma[c] / std::sqrt(var[c] + eps);
      const volatile float mean_scaled = mean[c] * s;  // not fused with the subtraction
      EXPECT_EQ(scale[c], s) << c;
      EXPECT_EQ(shift[c], beta[c] - mean_scaled) << c;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The running-variance check is vectorized per target: every position of a vector
// and of the tail, every kind of bad value, and the first of two offenders is named.
TEST(SimdTargets, BatchNormVarianceCheckNamesTheFirstOffenderOnEveryTarget) {
  constexpr float kSentinel = 31.0f;
  const int64_t C = 37;  // two 16-lane vectors and a tail of 5
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  const std::vector<float> gamma(C, 1.0f), beta(C, 0.0f), mean(C, 0.0f);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    // Valid at the edges of the range: -0, the smallest subnormal, FLT_MAX.
    std::vector<float> var(C, 1.0f);
    var[3] = -0.0f;
    var[17] = std::numeric_limits<float>::denorm_min();
    var[36] = std::numeric_limits<float>::max();
    std::vector<float> scale(C), shift(C);
    EXPECT_EQ(normkit_batch_norm_fold(C, gamma.data(), beta.data(), mean.data(), var.data(), 1e-5f,
                                      scale.data(), shift.data()),
              NORMKIT_SUCCESS);
    for (float bad : {-1e-30f, -1.0f, nan, inf, -inf}) {
      for (int64_t c = 0; c < C; ++c) {
        std::vector<float> v(C, 1.0f);
        v[c] = bad;
        if (c + 7 < C) v[c + 7] = -2.0f;  // a later offender is not the one named
        std::vector<float> sc(C, kSentinel), sh(C, kSentinel);
        ASSERT_EQ(normkit_batch_norm_fold(C, gamma.data(), beta.data(), mean.data(), v.data(),
                                          1e-5f, sc.data(), sh.data()),
                  NORMKIT_ERROR_INVALID_ARGUMENT)
            << bad << " at " << c;
        const std::string want = "running_var[" + std::to_string(c) + "] = ";
        EXPECT_NE(std::string(normkit_last_error()).find(want), std::string::npos)
            << normkit_last_error();
        EXPECT_EQ(sc, std::vector<float>(C, kSentinel));
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Group norm and the row norms on every target: the double accumulation, the 1-lane
// channel tails and the activation code differ per target.
// Group norm chains (cpu::kChainedUnitBytes) take a group's statistics from the
// output pass of the group before it. Those must be SpanMoments' bits and that output
// ApplyNormPlanes' bits, or results would depend on where chains start (the thread
// count). Spans cover tails of a vector and of a pair, a partial flush run, planes
// shorter than a vector, a mean 1e4 standard deviations from the sampled pivot (the
// second pass), every activation, in place, y aligned or one float off, streamed or
// stored (streaming applies only to an aligned y), and spans that start mid-plane (the
// blocks of groups chained from memory).
TEST(SimdTargets, GroupNormChainGivesTheSeparatePassesBitsOnEveryTarget) {
  using normkit::kernels::Activation;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int64_t n : {1, 5, 16, 31, 32, 33, 100, 1292, 1568, 2051}) {
      for (int64_t plane : {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{49}, n}) {
        if (n % plane != 0) continue;
        const std::vector<int64_t> offsets =
            plane > 1 ? std::vector<int64_t>{0, plane / 2} : std::vector<int64_t>{0};
        for (int64_t offset : offsets) {
          for (bool far_pivot : {false, true}) {
            std::vector<float> x = RandomVector(2 * n, 91 + static_cast<uint32_t>(n));
            if (far_pivot) {
              for (int64_t i = n; i < 2 * n; ++i) x[i] = 1.0e4f + 1.0e-2f * x[i];
              for (size_t j = 0; j < normkit::kernels::kPivotVectors; ++j) {
                const int64_t at = normkit::kernels::SampledSpanOffset(j, n);
                for (int64_t k = at; k < std::min(n, at + 16); ++k) x[n + k] = 2.0e4f;
              }
            }
            const int64_t planes = (offset + n + plane - 1) / plane;
            const std::vector<float> scale = RandomVector(planes, 92),
                                     shift = RandomVector(planes, 93);
            const float mean = 0.375f;  // one group: one mean for all its planes
            const std::vector<float> means(static_cast<size_t>(planes), mean);
            const normkit::Moments want = normkit::kernels::SpanMoments(x.data() + n, n);
            for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kSilu}) {
              std::vector<float> want_y(n), one_mean_y(n);
              normkit::kernels::ApplyNormPlanes(
                  x.data(), want_y.data(), normkit::kernels::Storage::kFloat32, n, plane, offset,
                  means.data(), scale.data(), shift.data(), act, false);
              normkit::kernels::ApplyNormGroupPlanes(
                  x.data(), one_mean_y.data(), normkit::kernels::Storage::kFloat32, n, plane,
                  offset, mean, scale.data(), shift.data(), act, false);
              EXPECT_EQ(std::memcmp(one_mean_y.data(), want_y.data(), sizeof(float) * n), 0);
              // 0 aligned, 1 unaligned, 2 in place; 3, 4: 0 and 1 streamed.
              for (int mode = 0; mode < 5; ++mode) {
                SCOPED_TRACE("n=" + std::to_string(n) + " plane=" + std::to_string(plane) +
                             " offset=" + std::to_string(offset) +
                             " far=" + std::to_string(far_pivot) +
                             " act=" + std::to_string(static_cast<int>(act)) +
                             " mode=" + std::to_string(mode));
                std::vector<float> xb = x, buf(n + 32);
                float* y = buf.data();
                while (reinterpret_cast<uintptr_t>(y) % 64 != 0) ++y;
                if (mode == 1 || mode == 4) ++y;
                if (mode == 2) y = xb.data();
                const normkit::Moments got = normkit::kernels::ApplyNormPlanesThenMoments(
                    xb.data(), y, n, plane, offset, mean, scale.data(), shift.data(), act,
                    mode >= 3, xb.data() + n);
                EXPECT_EQ(std::memcmp(&got.count, &want.count, sizeof(double)), 0);
                EXPECT_EQ(std::memcmp(&got.mean, &want.mean, sizeof(double)), 0)
                    << got.mean << " vs " << want.mean;
                EXPECT_EQ(std::memcmp(&got.m2, &want.m2, sizeof(double)), 0)
                    << got.m2 << " vs " << want.m2;
                EXPECT_EQ(std::memcmp(y, want_y.data(), sizeof(float) * n), 0);
              }
            }
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Channels-last rows streamed into a y off a vector boundary take a shifted walk (row 0's
// first floats alone, rows from y's next boundary with their parameters rotated, the
// last row's rest): on every target, the bits of the same rows into an aligned y, and
// act((x - mean) * scale + shift) within float rounding. Rows of 8 to 1024 channels
// (whole vectors on some targets, not on others), 1 to 37 rows, y 1 to 15 floats off.
TEST(SimdTargets, StreamedChannelsLastRowsAtAnyAlignmentOnEveryTarget) {
  using normkit::kernels::Activation;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int64_t C : {8, 16, 24, 64, 256, 1024}) {
      for (int64_t rows : {1, 2, 5, 37}) {
        const int64_t n = rows * C;
        const std::vector<float> x = RandomVector(n, 95), mean = RandomVector(C, 96),
                                 scale = RandomVector(C, 97), shift = RandomVector(C, 98);
        const normkit::kernels::NormRows params{mean.data(), scale.data(), shift.data()};
        for (Activation act : {Activation::kNone, Activation::kSilu}) {
          std::vector<float> buf(n + 32);
          float* y0 = buf.data();
          while (reinterpret_cast<uintptr_t>(y0) % 64 != 0) ++y0;
          normkit::kernels::ApplyNormRows(x.data(), y0, normkit::kernels::Storage::kFloat32, rows,
                                          C, params, act, true, true);
          const std::vector<float> aligned(y0, y0 + n);
          for (int64_t i = 0; i < n; ++i) {
            const int64_t c = i % C;
            double v = (static_cast<double>(x[i]) - mean[c]) * scale[c] + shift[c];
            if (act == Activation::kSilu) v = v / (1.0 + std::exp(-v));
            ASSERT_NEAR(aligned[i], v, 4e-6 * (1.0 + std::fabs(v)))
                << "C=" << C << " rows=" << rows << " i=" << i;
          }
          for (int64_t off : {1, 3, 4, 8, 15}) {
            SCOPED_TRACE("C=" + std::to_string(C) + " rows=" + std::to_string(rows) + " act=" +
                         std::to_string(static_cast<int>(act)) + " off=" + std::to_string(off));
            std::fill(buf.begin(), buf.end(), -7.0f);
            float* y = y0 + off;
            normkit::kernels::ApplyNormRows(x.data(), y, normkit::kernels::Storage::kFloat32, rows,
                                            C, params, act, true, true);
            EXPECT_EQ(std::memcmp(y, aligned.data(), sizeof(float) * n), 0);
            // Nothing written outside y[0, n).
            for (float* q = buf.data(); q < y; ++q) ASSERT_EQ(*q, -7.0f);
            for (float* q = y + n; q < buf.data() + buf.size(); ++q) ASSERT_EQ(*q, -7.0f);
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Batched group norm (cpu::kBatchedUnitBytes) takes its groups' mean and rstd from
// SpanMeanRstdEach, a vector's worth of spans side by side. Against a double
// reference: random spans, spans whose mean is 1e6 times their spread, spans whose
// sampled pivot is far from their mean (a second pass), constant spans, and a NaN
// span next to finite ones. A span's bits must not depend on the batch it is in.
TEST(SimdTargets, SpanMeanRstdEachMatchesReferenceOnEveryTarget) {
  const float eps = 1e-10f;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int64_t n : {1, 5, 9, 16, 33, 49, 196, 1000, 1100}) {
      const int64_t count = 21;  // a partial last vector of spans on every target
      std::vector<float> x = RandomVector(n * count, 95 + static_cast<uint32_t>(n));
      float* far = x.data() + 2 * n;
      for (int64_t i = n; i < 2 * n; ++i) x[i] = 1.0e4f + 1.0e-2f * x[i];
      for (size_t j = 0; j < normkit::kernels::kPivotVectors; ++j) {
        const int64_t at = normkit::kernels::SampledSpanOffset(j, n);
        for (int64_t k = at; k < std::min(n, at + 16); ++k) far[k] = 2.0e4f;
      }
      for (int64_t i = 3 * n; i < 4 * n; ++i) x[i] = 7.25f;
      x[5 * n + n / 2] = std::numeric_limits<float>::quiet_NaN();
      std::vector<double> mean(count), rstd(count);
      normkit::kernels::SpanMeanRstdEach(x.data(), n, count, eps, mean.data(), rstd.data());
      for (int64_t k = 0; k < count; ++k) {
        SCOPED_TRACE("n=" + std::to_string(n) + " span=" + std::to_string(k));
        const float* xs = x.data() + k * n;
        if (k == 5) {
          EXPECT_TRUE(std::isnan(mean[k]));
          continue;
        }
        double sum = 0.0, ss = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += xs[i];
        const double want_mean = sum / static_cast<double>(n);
        for (int64_t i = 0; i < n; ++i) ss += (xs[i] - want_mean) * (xs[i] - want_mean);
        const double var = ss / static_cast<double>(n);
        const double want_rstd = 1.0 / std::sqrt(var + static_cast<double>(eps));
        EXPECT_NEAR(mean[k], want_mean, 1e-6 * std::sqrt(var) + 1e-12 * std::fabs(want_mean));
        EXPECT_NEAR(rstd[k], want_rstd, 1e-5 * want_rstd);
        double one_mean, one_rstd;  // the span alone
        normkit::kernels::SpanMeanRstdEach(xs, n, 1, eps, &one_mean, &one_rstd);
        EXPECT_EQ(std::memcmp(&one_mean, &mean[k], sizeof(double)), 0);
        EXPECT_EQ(std::memcmp(&one_rstd, &rstd[k], sizeof(double)), 0);
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// SpanRmsEach (RMS norm of short rows), spans side by side. Against a double
// reference; a span's bits alone equal its bits in the batch; a NaN stays in its span.
TEST(SimdTargets, SpanRmsEachMatchesReferenceOnEveryTarget) {
  const float eps = 1e-6f;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int64_t n : {1, 5, 9, 16, 33, 49, 196, 512, 513, 1000}) {
      const int64_t count = 21;  // a partial last vector of spans on every target
      std::vector<float> x = RandomVector(n * count, 97 + static_cast<uint32_t>(n));
      for (int64_t i = n; i < 2 * n; ++i) x[i] = 1.0e4f + x[i];
      for (int64_t i = 3 * n; i < 4 * n; ++i) x[i] = 0.0f;  // rstd = 1 / sqrt(eps)
      x[5 * n + n / 2] = std::numeric_limits<float>::quiet_NaN();
      std::vector<double> rstd(count);
      normkit::kernels::SpanRmsEach(x.data(), n, count, eps, rstd.data());
      for (int64_t k = 0; k < count; ++k) {
        SCOPED_TRACE("n=" + std::to_string(n) + " span=" + std::to_string(k));
        const float* xs = x.data() + k * n;
        if (k == 5) {
          EXPECT_TRUE(std::isnan(rstd[k]));
          continue;
        }
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xs[i]) * xs[i];
        const double want = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
        EXPECT_NEAR(rstd[k], want, 1e-6 * want);
        double one;  // the span alone
        normkit::kernels::SpanRmsEach(xs, n, 1, eps, &one);
        EXPECT_EQ(std::memcmp(&one, &rstd[k], sizeof(double)), 0);
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// RowMoments (layer norm rows): spans that end in every way its walk has (whole runs,
// quads, a last pair, a whole vector, a masked last vector, shorter than a vector),
// around a mean 1e4 times their spread, against a double reference (shifted by the
// exact mean, so the reference itself is exact); a NaN makes the mean NaN (the row's
// outputs then are: FromShiftedSums clamps the NaN m2 to 0).
TEST(SimdTargets, RowMomentsMatchReferenceOnEveryTarget) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int64_t n : {1, 3, 15, 17, 33, 64, 100, 127, 768, 1024, 1030, 4099, 5000}) {
      SCOPED_TRACE("n=" + std::to_string(n));
      std::vector<float> x = RandomVector(n, 131 + static_cast<uint32_t>(n));
      for (auto& v : x) v = 1.0e4f + v;
      double mean = 0.0;
      for (float v : x) mean += v;
      mean /= static_cast<double>(n);
      double m2 = 0.0;
      for (float v : x) m2 += (v - mean) * (v - mean);
      const normkit::Moments got = normkit::kernels::RowMoments(x.data(), n);
      EXPECT_EQ(got.count, static_cast<double>(n));
      EXPECT_NEAR(got.mean, mean, 1e-9 * std::abs(mean));
      EXPECT_NEAR(got.m2, m2, 1e-5 * m2 + 1e-12);
      x[static_cast<size_t>(n / 2)] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_TRUE(std::isnan(normkit::kernels::RowMoments(x.data(), n).mean));
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(SimdTargets, NormalizationsMatchReferenceOnEveryTarget) {
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  for (int64_t target : targets) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (const auto& [shape, g] :
         std::vector<std::pair<std::vector<int64_t>, int64_t>>{{{2, 20, 9, 7}, 5},
                                                               {{1, 64, 33}, 16},
                                                               {{2, 6, 4097}, 2},
                                                               {{2, 40, 7, 7}, 40},
                                                               {{1, 24, 3, 3}, 24}}) {
      const int64_t N = shape[0], C = shape[1], numel = Numel(shape), S = numel / (N * C);
      std::vector<float> x = RandomVector(numel, 81), gamma = RandomVector(C, 82),
                         beta = RandomVector(C, 83);
      for (auto& v : x) v += 300.0f;
      for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
        for (int32_t act : {NORMKIT_ACTIVATION_NONE, NORMKIT_ACTIVATION_SILU}) {
          std::vector<float> y(numel);
          normkit_tensor xt = Desc(x.data(), layout, shape), yt = Desc(y.data(), layout, shape);
          ASSERT_EQ(normkit_group_norm(nullptr, &xt, g, gamma.data(), beta.data(), 1e-5f, act, &yt,
                                       nullptr, nullptr),
                    NORMKIT_SUCCESS);
          ExpectNormNear(y,
                         ReferenceGroupNorm(x, N, C, S, g, layout == NORMKIT_LAYOUT_CHANNELS_LAST,
                                            gamma.data(), beta.data(), 1e-5, act),
                         "group_norm");
        }
      }
      const int64_t rows = N * C, D = S;
      std::vector<float> y(numel);
      normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D}),
                     yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
      ASSERT_EQ(normkit_layer_norm(nullptr, &xt, nullptr, nullptr, 1e-5f, &yt, nullptr, nullptr),
                NORMKIT_SUCCESS);
      ExpectNormNear(y, ReferenceRowNorm(x, rows, D, nullptr, nullptr, 1e-5, false), "layer_norm");
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
}  // namespace normkit_test
