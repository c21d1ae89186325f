// SPDX-License-Identifier: Apache-2.0
// Bitwise-identical output for 1, 2, 3 and 8 threads, and from run to run.
#include <cstring>
#include <vector>

#include "test_util.h"

namespace normkit_test {
namespace {

template <class Op>
void ExpectSameBitsForAllThreadCounts(const std::vector<int64_t>& shape, Op op) {
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    const std::vector<float> x = RandomVector(Numel(shape), 99);
    std::vector<float> first;
    for (int threads : {1, 2, 3, 8, 1}) {
      for (bool in_place : {false, true}) {
        std::vector<float> xb = x, yb(x.size());
        float* yd = in_place ? xb.data() : yb.data();
        Context ctx(threads);
        normkit_tensor xt = Desc(xb.data(), layout, shape), yt = Desc(yd, layout, shape);
        ASSERT_EQ(op(ctx.ctx, &xt, &yt), NORMKIT_SUCCESS) << normkit_last_error();
        if (first.empty()) {
          first.assign(yd, yd + x.size());
        } else {
          ASSERT_EQ(std::memcmp(first.data(), yd, first.size() * sizeof(float)), 0)
              << "threads=" << threads << " in_place=" << in_place << " layout=" << layout;
        }
      }
    }
  }
}

TEST(Determinism, Affine) {
  const int64_t C = 19;
  const std::vector<float> scale = RandomVector(3 * C, 1), shift = RandomVector(3 * C, 2);
  for (const auto& shape :
       std::vector<std::vector<int64_t>>{{3, C, 97, 101}, {3, C, 5}, {3, C, 1, 2, 1}}) {
    ExpectSameBitsForAllThreadCounts(
        shape, [&](normkit_context* ctx, normkit_tensor* x, normkit_tensor* y) {
          return normkit_affine(ctx, x, scale.data(), shift.data(), NORMKIT_PARAMS_PER_CHANNEL, y);
        });
    ExpectSameBitsForAllThreadCounts(shape, [&](normkit_context* ctx, normkit_tensor* x,
                                                normkit_tensor* y) {
      return normkit_affine(ctx, x, scale.data(), nullptr, NORMKIT_PARAMS_PER_SAMPLE_CHANNEL, y);
    });
  }
}

TEST(Determinism, BatchNorm) {
  const int64_t C = 64;
  const std::vector<float> g = RandomVector(C, 1), b = RandomVector(C, 2), m = RandomVector(C, 3),
                           v = RandomVector(C, 4, 0.1f, 2.0f);
  ExpectSameBitsForAllThreadCounts({2, C, 57, 61}, [&](normkit_context* ctx, normkit_tensor* x,
                                                       normkit_tensor* y) {
    return normkit_batch_norm_inference(ctx, x, g.data(), b.data(), m.data(), v.data(), 1e-5f, y);
  });
}

}  // namespace
}  // namespace normkit_test
