// SPDX-License-Identifier: Apache-2.0
// Outputs large enough for streaming (non-temporal) stores, at misaligned addresses:
// the peel, body and tail of every streaming path against the double references.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "norm_reference.h"
#include "test_util.h"

namespace normkit_test {
namespace {

// 3 x 37 x 241 x 239 floats = 25.6 MB > the 24 MiB streaming threshold; planes and rows
// are not multiples of any vector width.
const std::vector<int64_t> kShape = {3, 37, 241, 239};

TEST(Streaming, AffineMisalignedOutput) {
  const int64_t N = kShape[0], C = kShape[1], numel = Numel(kShape), S = numel / (N * C);
  const std::vector<float> x = RandomVector(numel, 3), scale = RandomVector(C, 4),
                           shift = RandomVector(C, 5);
  std::vector<float> ybuf(numel + 1);
  float* y = ybuf.data() + 1;  // 4 bytes off any vector alignment
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    normkit_tensor xt = Desc(const_cast<float*>(x.data()), layout, kShape),
                   yt = Desc(y, layout, kShape);
    ASSERT_EQ(
        normkit_affine(nullptr, &xt, scale.data(), shift.data(), NORMKIT_PARAMS_PER_CHANNEL, &yt),
        NORMKIT_SUCCESS);
    const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST;
    std::vector<float> ax(x), as(scale), ab(shift);
    for (auto* v : {&ax, &as, &ab})
      for (auto& e : *v) e = std::fabs(e);
    ExpectNear(std::vector<float>(y, y + numel),
               ReferenceAffine(x, N, C, S, cl, scale.data(), shift.data(), false),
               ReferenceAffine(ax, N, C, S, cl, as.data(), ab.data(), false), "affine streamed");
  }
}

// Tensors larger than the last-level cache with whole vectors of channels (C = 64):
// the loops picked for inputs from memory (each load next to its store; channels-last
// in place, two halves in step also when every term fits the registers), in place and
// out of place, with both terms, scale only and shift only.
TEST(Streaming, AffineFromMemoryWholeVectorChannels) {
  const std::vector<int64_t> shape = {2, 64, 229, 231};  // 27 MB
  const int64_t N = shape[0], C = shape[1], numel = Numel(shape), S = numel / (N * C);
  const std::vector<float> x = RandomVector(numel, 9), scale = RandomVector(C, 10),
                           shift = RandomVector(C, 11);
  std::vector<float> ax(x), as(scale), ab(shift);
  for (auto* v : {&ax, &as, &ab})
    for (auto& e : *v) e = std::fabs(e);
  std::vector<float> y(numel);
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST;
    for (int terms = 0; terms < 3; ++terms) {  // both, scale only, shift only
      const float* sc = terms == 2 ? nullptr : scale.data();
      const float* sh = terms == 1 ? nullptr : shift.data();
      const std::vector<double> ref = ReferenceAffine(x, N, C, S, cl, sc, sh, false);
      const std::vector<double> mag = ReferenceAffine(ax, N, C, S, cl, sc ? as.data() : nullptr,
                                                      sh ? ab.data() : nullptr, false);
      for (bool in_place : {false, true}) {
        if (in_place) y = x;
        normkit_tensor xt = Desc(in_place ? y.data() : const_cast<float*>(x.data()), layout, shape),
                       yt = Desc(y.data(), layout, shape);
        ASSERT_EQ(normkit_affine(nullptr, &xt, sc, sh, NORMKIT_PARAMS_PER_CHANNEL, &yt),
                  NORMKIT_SUCCESS);
        const std::string what = std::string("affine from memory, ") + (cl ? "NHWC" : "NCHW") +
                                 ", terms " + std::to_string(terms) +
                                 (in_place ? ", in place" : ", out of place");
        ExpectNear(y, ref, mag, what.c_str());
      }
    }
  }
}

TEST(Streaming, GroupNormMisalignedOutput) {
  const int64_t N = kShape[0], C = kShape[1], numel = Numel(kShape), S = numel / (N * C);
  const std::vector<float> x = RandomVector(numel, 6), gamma = RandomVector(C, 7),
                           beta = RandomVector(C, 8);
  std::vector<float> ybuf(numel + 3);
  float* y = ybuf.data() + 3;
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    for (int32_t act : {NORMKIT_ACTIVATION_NONE, NORMKIT_ACTIVATION_SILU}) {
      normkit_tensor xt = Desc(const_cast<float*>(x.data()), layout, kShape),
                     yt = Desc(y, layout, kShape);
      ASSERT_EQ(normkit_group_norm(nullptr, &xt, C, gamma.data(), beta.data(), 1e-5f, act, &yt,
                                   nullptr, nullptr),
                NORMKIT_SUCCESS);
      ExpectNormNear(std::vector<float>(y, y + numel),
                     ReferenceGroupNorm(x, N, C, S, C, layout == NORMKIT_LAYOUT_CHANNELS_LAST,
                                        gamma.data(), beta.data(), 1e-5, act),
                     "group_norm streamed");
    }
  }
}

// Layer / RMS norm rows longer than their blocked threshold (1024) into a y of 25+ MB:
// a task's rows' statistics first, then their outputs walked in column chunks across
// the rows (the last chunk partial), streamed into a y 4 bytes off any vector, with the
// next task's rows prefetched as these are written; also in place (no streaming) and at
// one thread. Against the double reference, and bitwise the same at 1 and 2 threads.
TEST(Streaming, RowNormsLongRowsMisalignedOutput) {
  const int64_t rows = 1303, D = 4999;  // 26 MB; tasks of 6 rows, chunks 1024 x 4 + 903
  const int64_t numel = rows * D;
  const std::vector<float> x = RandomVector(numel, 31, -3.0f, 5.0f), gamma = RandomVector(D, 32),
                           beta = RandomVector(D, 33);
  std::vector<float> ybuf(numel + 1), first;
  float* y = ybuf.data() + 1;
  for (bool rms : {false, true}) {
    const NormReference want = ReferenceRowNorm(x, rows, D, gamma.data(), beta.data(), 1e-5, rms);
    for (int threads : {2, 1}) {
      SCOPED_TRACE(std::string(rms ? "rms_norm" : "layer_norm") + " threads " +
                   std::to_string(threads));
      Context ctx(threads);
      normkit_tensor xt = Desc(const_cast<float*>(x.data()), NORMKIT_LAYOUT_CHANNELS_FIRST,
                               {rows, D}),
                     yt = Desc(y, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
      const auto run = [&](const normkit_tensor* in, const normkit_tensor* out) {
        return rms ? normkit_rms_norm(ctx.ctx, in, gamma.data(), 1e-5f, out, nullptr)
                   : normkit_layer_norm(ctx.ctx, in, gamma.data(), beta.data(), 1e-5f, out, nullptr,
                                        nullptr);
      };
      ASSERT_EQ(run(&xt, &yt), NORMKIT_SUCCESS) << normkit_last_error();
      const std::vector<float> got(y, y + numel);
      ExpectNormNear(got, want, "row norm streamed");
      if (threads == 2) first = got;
      EXPECT_TRUE(first == got) << "not the two-thread call's bits";
      std::vector<float> z(x);  // in place: plain stores
      normkit_tensor zt = Desc(z.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
      ASSERT_EQ(run(&zt, &zt), NORMKIT_SUCCESS) << normkit_last_error();
      EXPECT_TRUE(z == got) << "in place is not the streamed call's bits";
    }
  }
}

// Channels-last rows of whole vectors (C = 64 and 256: the narrow and the wide walks on
// every x86 target) into a y 1 to 15 floats off a 64-byte line, and x as misaligned
// (NumPy's large arrays sit 16 bytes past one): the shifted walk (a peel, rows from
// the next vector boundary with their parameters rotated, the last row's rest) against
// the double reference, and bitwise the same as with y and x aligned.
TEST(Streaming, GroupNormChannelsLastWholeVectorRowsMisaligned) {
  const std::vector<std::vector<int64_t>> shapes = {{4, 64, 160, 170}, {2, 256, 112, 120}};
  for (const auto& shape : shapes) {
    const int64_t N = shape[0], C = shape[1], numel = Numel(shape), S = numel / (N * C);
    ASSERT_GE(numel * 4, int64_t{24} << 20);
    const std::vector<float> x = RandomVector(numel, 9), gamma = RandomVector(C, 10),
                             beta = RandomVector(C, 11);
    std::vector<float> xbuf(numel + 32), ybuf(numel + 32);  // 15 to align, 15 off
    float* x0 = xbuf.data();
    while (reinterpret_cast<uintptr_t>(x0) % 64 != 0) ++x0;
    float* y0 = ybuf.data();
    while (reinterpret_cast<uintptr_t>(y0) % 64 != 0) ++y0;
    for (int32_t act : {NORMKIT_ACTIVATION_NONE, NORMKIT_ACTIVATION_SILU}) {
      const NormReference want =
          ReferenceGroupNorm(x, N, C, S, 8, true, gamma.data(), beta.data(), 1e-5, act);
      std::vector<float> aligned;
      for (int64_t off : {0, 1, 4, 15}) {
        SCOPED_TRACE("C=" + std::to_string(C) + " act=" + std::to_string(act) +
                     " off=" + std::to_string(off));
        // x as far off as y (0 or 4 floats; 1 and 15 keep x aligned).
        float* xp = x0 + (off == 4 ? 4 : 0);
        std::copy(x.begin(), x.end(), xp);
        float* y = y0 + off;
        normkit_tensor xt = Desc(xp, NORMKIT_LAYOUT_CHANNELS_LAST, shape),
                       yt = Desc(y, NORMKIT_LAYOUT_CHANNELS_LAST, shape);
        ASSERT_EQ(normkit_group_norm(nullptr, &xt, 8, gamma.data(), beta.data(), 1e-5f, act, &yt,
                                     nullptr, nullptr),
                  NORMKIT_SUCCESS);
        const std::vector<float> got(y, y + numel);
        if (off == 0) {
          ExpectNormNear(got, want, "group_norm channels-last streamed");
          aligned = got;
        } else {
          EXPECT_TRUE(got == aligned) << "output bits depend on y's alignment";
        }
      }
    }
  }
}

// The divide-by-mask pinv's x element of window column v = w + c * S of y row `yrow`: z =
// y / (s * count of channels covering v), then z / m (0 where m is 0), the kernels' two
// roundings.
float DivideByMaskPinv(const float* yrow, int64_t v, int64_t C, int64_t S, int64_t W, float s,
                       float m) {
  int64_t count = 0;
  for (int64_t k = 0; k < C; ++k) count += v - k * S >= 0 && v - k * S < W;
  const float z = yrow[v] / (s * static_cast<float>(count));
  return m == 0.0f ? 0.0f : z / m;
}

// Shift-sum adjoint and pseudo-inverses into a channels-last x of 25+ MB: streamed
// 128-bit tile rows when x is aligned and C a multiple of 4, plain stores otherwise.
// x[b, h, w, c] = (s * y[b, h, w + c*S]) * M[h, w] exactly (the kernels' two roundings).
TEST(Streaming, ShiftSumChannelsLastAdjoint) {
  for (const auto& [C, offset] : std::vector<std::pair<int64_t, int64_t>>{{8, 0}, {8, 1}, {6, 0}}) {
    const int64_t B = 2, H = 130, W = 6301 / C * 4, S = 2, Wo = W + (C - 1) * S;
    SCOPED_TRACE("C=" + std::to_string(C) + " offset=" + std::to_string(offset));
    const std::vector<float> y = RandomVector(B * H * Wo, 41), m = RandomVector(H * W, 42);
    std::vector<float> xbuf(B * H * W * C + offset, -9.0f);
    float* x = xbuf.data() + offset;
    ASSERT_GE(B * H * W * C * 4, int64_t{24} << 20);
    normkit_shift_sum_params params;
    normkit_shift_sum_params_init(&params, S);
    params.scale = 0.25;
    params.mask_kind = NORMKIT_MASK_HW;
    params.mask = m.data();
    const int64_t yshape[3] = {B, H, Wo}, xshape[4] = {B, C, H, W};
    normkit_tensor yt, xt;
    normkit_tensor_init(&yt, const_cast<float*>(y.data()), NORMKIT_DTYPE_FLOAT32,
                        NORMKIT_LAYOUT_CHANNELS_FIRST, 3, yshape);
    normkit_tensor_init(&xt, x, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_LAST, 4, xshape);
    ASSERT_EQ(normkit_shift_sum_adjoint(nullptr, &yt, &params, &xt), NORMKIT_SUCCESS);
    int64_t wrong = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          for (int64_t c = 0; c < C; ++c) {
            const float v = 0.25f * y[(b * H + h) * Wo + w + c * S];
            wrong += x[((b * H + h) * W + w) * C + c] != v * m[h * W + w];
          }
    EXPECT_EQ(wrong, 0);
    // Divide-by-mask pinv streams through the same kernel: 0 where the mask is 0.
    ASSERT_EQ(
        normkit_shift_sum_pinv(nullptr, &yt, &params, NORMKIT_PINV_DIVIDE_BY_MASK, nullptr, &xt),
        NORMKIT_SUCCESS);
    wrong = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          for (int64_t c = 0; c < C; ++c) {
            wrong +=
                x[((b * H + h) * W + w) * C + c] !=
                DivideByMaskPinv(&y[(b * H + h) * Wo], w + c * S, C, S, W, 0.25f, m[h * W + w]);
          }
    EXPECT_EQ(wrong, 0);
  }
}

// Divide-by-mask pinv into a channels-first x of 24+ MB: x's rows streamed straight from
// z = y / (s * count) (aligned, and one float off alignment: peeled to the next vector),
// with the mask and without it, y holding NaN and +-FLT_MAX and the mask 1e-30 in places
// (the quotient overflows to Inf). x[b, c, h, w] = m != 0 ? z / m : 0 exactly (NaN where
// that is NaN), the same bits for either alignment.
TEST(Streaming, ShiftSumChannelsFirstDivideByMaskPinv) {
  const int64_t B = 2, C = 12, H = 130, W = 2053, S = 3, Wo = W + (C - 1) * S;
  ASSERT_GE(B * C * H * W * 4, int64_t{24} << 20);
  std::vector<float> y = RandomVector(B * H * Wo, 43);
  std::vector<float> m = RandomVector(H * W, 44);
  for (int64_t i = 0; i < H * W; i += 7) m[i] = 0.0f;  // pixels no channel's mask covers
  // Edges: NaN and +-FLT_MAX in y, and a mask of 1e-30 whose quotient overflows to Inf.
  for (int64_t i = 5; i < B * H * Wo; i += 997) y[i] = NAN;
  for (int64_t i = 11; i < B * H * Wo; i += 1009) y[i] = (i & 1) ? FLT_MAX : -FLT_MAX;
  for (int64_t i = 3; i < H * W; i += 101) m[i] = 1e-30f;
  for (const bool masked : {true, false}) {
    std::vector<float> aligned;
    for (const int64_t offset : {0, 1}) {
      SCOPED_TRACE(std::string(masked ? "mask" : "no mask") + " offset=" + std::to_string(offset));
      std::vector<float> xbuf(B * C * H * W + 16, -9.0f);
      float* x = xbuf.data() + offset;
      normkit_shift_sum_params params;
      normkit_shift_sum_params_init(&params, S);
      params.scale = 0.25;
      params.mask_kind = masked ? NORMKIT_MASK_HW : NORMKIT_MASK_NONE;
      params.mask = masked ? m.data() : nullptr;
      const int64_t yshape[4] = {B, 1, H, Wo}, xshape[4] = {B, C, H, W};
      normkit_tensor yt, xt;
      normkit_tensor_init(&yt, const_cast<float*>(y.data()), NORMKIT_DTYPE_FLOAT32,
                          NORMKIT_LAYOUT_CHANNELS_FIRST, 4, yshape);
      normkit_tensor_init(&xt, x, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, xshape);
      ASSERT_EQ(
          normkit_shift_sum_pinv(nullptr, &yt, &params, NORMKIT_PINV_DIVIDE_BY_MASK, nullptr, &xt),
          NORMKIT_SUCCESS);
      int64_t wrong = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t w = 0; w < W; ++w) {
              // Without a mask x is z itself (z / 1: the same bits).
              const float want = DivideByMaskPinv(&y[(b * H + h) * Wo], w + c * S, C, S, W, 0.25f,
                                                  masked ? m[h * W + w] : 1.0f);
              const float got = x[((b * C + c) * H + h) * W + w];
              wrong += !(got == want || (std::isnan(got) && std::isnan(want)));
            }
      EXPECT_EQ(wrong, 0);
      EXPECT_EQ(xbuf[B * C * H * W + offset], -9.0f) << "written past x";
      const std::vector<float> got(x, x + B * C * H * W);
      if (offset == 0) {
        aligned = got;
      } else {
        EXPECT_EQ(std::memcmp(got.data(), aligned.data(), got.size() * sizeof(float)), 0)
            << "output bits depend on x's alignment";
      }
    }
  }
}

}  // namespace
}  // namespace normkit_test
