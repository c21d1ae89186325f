// SPDX-License-Identifier: Apache-2.0
// normkit_affine against the double-precision reference: every layout, rank 2..5,
// odd sizes, per-channel and per-sample parameters, NULL scale / shift, in place,
// misaligned buffers and thread counts 1, 2, 3.
#include <cmath>
#include <string>
#include <vector>

#include "test_util.h"

namespace normkit_test {
namespace {

struct AffineCase {
  std::vector<int64_t> shape;
  normkit_layout layout;
  bool per_sample;
  bool has_scale;
  bool has_shift;
  bool in_place;
  int64_t misalign;  // floats the buffers are offset from a 64-byte boundary
  int threads;
};

std::string Describe(const AffineCase& k) {
  std::string s = "shape=";
  for (auto d : k.shape) s += std::to_string(d) + "x";
  s += k.layout == NORMKIT_LAYOUT_CHANNELS_LAST ? " channels_last" : " channels_first";
  s += k.per_sample ? " per_sample" : " per_channel";
  s += k.has_scale ? " scale" : " no-scale";
  s += k.has_shift ? " shift" : " no-shift";
  s += k.in_place ? " in_place" : " out_of_place";
  s += " misalign=" + std::to_string(k.misalign) + " threads=" + std::to_string(k.threads);
  return s;
}

void RunAffineCase(const AffineCase& k) {
  SCOPED_TRACE(Describe(k));
  const int64_t N = k.shape[0], C = k.shape[1], numel = Numel(k.shape);
  const int64_t S = numel / (N * C);
  const int64_t params = k.per_sample ? N * C : C;
  const std::vector<float> x = RandomVector(numel, 1 + static_cast<uint32_t>(numel));
  const std::vector<float> scale = RandomVector(params, 2);
  const std::vector<float> shift = RandomVector(params, 3);
  const float* sp = k.has_scale ? scale.data() : nullptr;
  const float* bp = k.has_shift ? shift.data() : nullptr;

  // Buffers with a controlled offset from 64-byte alignment, plus guard values.
  const int64_t pad = 16;
  std::vector<float> xbuf(numel + 2 * pad + 16, 777.0f), ybuf(numel + 2 * pad + 16, 555.0f);
  float* xd = xbuf.data() + pad + k.misalign;
  float* yd = k.in_place ? xd : ybuf.data() + pad + k.misalign;
  std::copy(x.begin(), x.end(), xd);

  Context ctx(k.threads);
  normkit_tensor xt = Desc(xd, k.layout, k.shape), yt = Desc(yd, k.layout, k.shape);
  const int32_t kind =
      k.per_sample ? NORMKIT_PARAMS_PER_SAMPLE_CHANNEL : NORMKIT_PARAMS_PER_CHANNEL;
  ASSERT_EQ(normkit_affine(ctx.ctx, &xt, sp, bp, kind, &yt), NORMKIT_SUCCESS)
      << normkit_last_error();

  const bool cl = k.layout == NORMKIT_LAYOUT_CHANNELS_LAST;
  const std::vector<double> want = ReferenceAffine(x, N, C, S, cl, sp, bp, k.per_sample);
  std::vector<float> ax(x.size()), as(scale.size()), ab(shift.size());
  for (size_t i = 0; i < x.size(); ++i) ax[i] = std::fabs(x[i]);
  for (size_t i = 0; i < scale.size(); ++i) as[i] = std::fabs(scale[i]);
  for (size_t i = 0; i < shift.size(); ++i) ab[i] = std::fabs(shift[i]);
  const std::vector<double> mag =
      ReferenceAffine(ax, N, C, S, cl, k.has_scale ? as.data() : nullptr,
                      k.has_shift ? ab.data() : nullptr, k.per_sample);
  ExpectNear(std::vector<float>(yd, yd + numel), want, mag, "affine");

  // Nothing outside y was touched.
  const std::vector<float>& buf = k.in_place ? xbuf : ybuf;
  const float guard = k.in_place ? 777.0f : 555.0f;
  const float* base = k.in_place ? xbuf.data() : ybuf.data();
  for (const float* p = base; p < yd; ++p) ASSERT_EQ(*p, guard) << "wrote before y";
  for (const float* p = yd + numel; p < base + buf.size(); ++p)
    ASSERT_EQ(*p, guard) << "wrote after y";
}

const std::vector<std::vector<int64_t>>& Shapes() {
  static const std::vector<std::vector<int64_t>> shapes = {
      {1, 1},          {5, 3},          {2, 17},         {1, 1, 1},        {5, 3, 7},
      {2, 17, 13},     {1, 1, 7, 7},    {1, 3, 13, 13},  {5, 17, 1, 1},    {2, 4, 5, 3},
      {1, 1024, 7, 7}, {3, 16, 8, 8},   {2, 3, 1, 3, 5}, {1, 17, 2, 3, 4}, {5, 1, 3, 3, 3},
      {2, 33, 40, 1},  {1, 100, 3, 11}, {4, 5, 64, 64}};
  return shapes;
}

TEST(Affine, MatchesReferenceEverywhere) {
  for (const auto& shape : Shapes()) {
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      for (bool per_sample : {false, true}) {
        for (int terms = 0; terms < 4; ++terms) {
          for (bool in_place : {false, true}) {
            AffineCase k{shape,    layout, per_sample, (terms & 1) != 0, (terms & 2) != 0,
                         in_place, 0,      1};
            RunAffineCase(k);
          }
        }
      }
    }
  }
}

TEST(Affine, ThreadCountsAndMisalignment) {
  for (const auto& shape : Shapes()) {
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      for (int threads : {2, 3}) {
        for (int64_t misalign : {1, 3}) {
          RunAffineCase({shape, layout, false, true, true, false, misalign, threads});
          RunAffineCase({shape, layout, true, true, false, true, misalign, threads});
        }
      }
    }
  }
}

// Many parallel blocks whose boundaries fall inside planes and pixels.
TEST(Affine, ManyBlocksOddSizes) {
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    for (int threads : {1, 2, 3}) {
      RunAffineCase({{3, 17, 61, 67}, layout, false, true, true, false, 1, threads});
      RunAffineCase({{3, 17, 61, 67}, layout, true, true, true, true, 0, threads});
      RunAffineCase({{2, 1023, 7, 9}, layout, false, true, true, false, 0, threads});
    }
  }
}

// Outputs beyond the streaming-store threshold take the non-temporal path;
// an odd offset makes it peel up to alignment first.
TEST(Affine, LargeOutputStreamingPath) {
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    RunAffineCase({{2, 3, 1031, 1553}, layout, false, true, true, false, 1, 2});
    RunAffineCase({{2, 3, 1031, 1553}, layout, true, true, false, false, 0, 2});
  }
}

TEST(Affine, BothNullIsACopyAndScaleOnlyKeepsNegativeZero) {
  std::vector<float> x = {-0.0f, 1.5f, -2.0f, 0.0f}, y(4, 9.0f);
  const float scale[2] = {1.0f, 1.0f};
  normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {1, 2, 2});
  normkit_tensor yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {1, 2, 2});
  ASSERT_EQ(normkit_affine(nullptr, &xt, nullptr, nullptr, NORMKIT_PARAMS_PER_CHANNEL, &yt),
            NORMKIT_SUCCESS);
  EXPECT_EQ(std::vector<float>(y.begin(), y.end()), x);
  ASSERT_EQ(normkit_affine(nullptr, &xt, scale, nullptr, NORMKIT_PARAMS_PER_CHANNEL, &yt),
            NORMKIT_SUCCESS);
  EXPECT_TRUE(std::signbit(y[0])) << "-0 * 1 must stay -0 when no shift is given";
}

TEST(Affine, NanAndInfStayInTheirElements) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = RandomVector(2 * 3 * 20, 5);
  x[7] = std::nanf("");
  x[45] = inf;
  std::vector<float> y(x.size());
  const float scale[3] = {2.0f, 3.0f, 4.0f}, shift[3] = {1.0f, 1.0f, 1.0f};
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    normkit_tensor xt = Desc(x.data(), layout, {2, 3, 20}), yt = Desc(y.data(), layout, {2, 3, 20});
    ASSERT_EQ(normkit_affine(nullptr, &xt, scale, shift, NORMKIT_PARAMS_PER_CHANNEL, &yt),
              NORMKIT_SUCCESS);
    for (size_t i = 0; i < y.size(); ++i) {
      if (i == 7)
        EXPECT_TRUE(std::isnan(y[i]));
      else if (i == 45)
        EXPECT_TRUE(std::isinf(y[i]));
      else
        EXPECT_TRUE(std::isfinite(y[i])) << i;
    }
  }
}

}  // namespace
}  // namespace normkit_test
