// SPDX-License-Identifier: Apache-2.0
// Outputs large enough for streaming (non-temporal) stores, at misaligned addresses:
// the peel, body and tail of every streaming path against the double references.
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

}  // namespace
}  // namespace normkit_test
