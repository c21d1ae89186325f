// SPDX-License-Identifier: Apache-2.0
// Many threads calling every op at once, on one shared context and on their own
// contexts, for a bounded time: every result must equal the single-threaded one, bit
// for bit. Run under ThreadSanitizer in CI.
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace normkit_test {
namespace {

// One op on fixed inputs, writing into the given output buffer.
struct OpCase {
  std::string name;
  size_t out_size;
  std::function<normkit_status(normkit_context*, float*)> run;
};

std::vector<OpCase> MakeCases() {
  static const std::vector<float> x = RandomVector(2 * 24 * 15 * 17, 91);
  static const std::vector<float> p = RandomVector(24, 92, 0.5f, 1.5f);
  static const std::vector<float> q = RandomVector(24, 93);
  static const std::vector<float> mask = RandomVector(15 * 17, 94, 0.0f, 1.0f);
  const std::vector<int64_t> shape = {2, 24, 15, 17};
  const size_t n = x.size();
  std::vector<OpCase> cases;
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    const std::string lay = layout == NORMKIT_LAYOUT_CHANNELS_LAST ? " NHWC" : " NCHW";
    cases.push_back({"affine" + lay, n, [=](normkit_context* ctx, float* y) {
                       normkit_tensor xt = Desc(const_cast<float*>(x.data()), layout, shape),
                                      yt = Desc(y, layout, shape);
                       return normkit_affine(ctx, &xt, p.data(), q.data(),
                                             NORMKIT_PARAMS_PER_CHANNEL, &yt);
                     }});
    cases.push_back({"batch_norm" + lay, n, [=](normkit_context* ctx, float* y) {
                       normkit_tensor xt = Desc(const_cast<float*>(x.data()), layout, shape),
                                      yt = Desc(y, layout, shape);
                       return normkit_batch_norm_inference(ctx, &xt, p.data(), q.data(), q.data(),
                                                           p.data(), 1e-5f, &yt);
                     }});
    cases.push_back({"group_norm" + lay, n, [=](normkit_context* ctx, float* y) {
                       normkit_tensor xt = Desc(const_cast<float*>(x.data()), layout, shape),
                                      yt = Desc(y, layout, shape);
                       return normkit_group_norm(ctx, &xt, 6, p.data(), q.data(), 1e-5f,
                                                 NORMKIT_ACTIVATION_SILU, &yt, nullptr, nullptr);
                     }});
  }
  cases.push_back({"layer_norm", n, [=](normkit_context* ctx, float* y) {
                     normkit_tensor xt = Desc(const_cast<float*>(x.data()),
                                              NORMKIT_LAYOUT_CHANNELS_FIRST, {48, 255}),
                                    yt = Desc(y, NORMKIT_LAYOUT_CHANNELS_FIRST, {48, 255});
                     return normkit_layer_norm(ctx, &xt, nullptr, nullptr, 1e-5f, &yt, nullptr,
                                               nullptr);
                   }});
  cases.push_back({"shift_sum", 2 * 15 * (17 + 23 * 2), [=](normkit_context* ctx, float* y) {
                     normkit_shift_sum_params params;
                     normkit_shift_sum_params_init(&params, 2);
                     params.mask_kind = NORMKIT_MASK_HW;
                     params.mask = mask.data();
                     normkit_tensor xt = Desc(const_cast<float*>(x.data()),
                                              NORMKIT_LAYOUT_CHANNELS_FIRST, shape),
                                    yt = Desc(y, NORMKIT_LAYOUT_CHANNELS_FIRST,
                                              {2, 1, 15, 17 + 23 * 2});
                     return normkit_shift_sum(ctx, &xt, &params, &yt);
                   }});
  return cases;
}

TEST(Concurrency, ManyCallersSharedAndOwnContexts) {
  const std::vector<OpCase> cases = MakeCases();
  std::vector<std::vector<float>> expected;
  {
    Context serial(1);
    for (const OpCase& c : cases) {
      std::vector<float> out(c.out_size);
      ASSERT_EQ(c.run(serial.ctx, out.data()), NORMKIT_SUCCESS) << c.name;
      expected.push_back(out);
    }
  }
  Context shared(2);
  std::atomic<int64_t> calls{0}, mismatches{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      Context own(1 + t % 3);
      std::vector<float> out;
      for (int64_t i = t; std::chrono::steady_clock::now() < deadline; ++i) {
        const OpCase& c = cases[static_cast<size_t>(i) % cases.size()];
        out.assign(c.out_size, -1.0f);
        normkit_context* ctx = (i / 3) % 2 ? own.ctx : shared.ctx;
        if (c.run(ctx, out.data()) != NORMKIT_SUCCESS ||
            std::memcmp(out.data(), expected[static_cast<size_t>(i) % cases.size()].data(),
                        out.size() * sizeof(float)) != 0) {
          ++mismatches;
        }
        ++calls;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GT(calls.load(), 8);
  std::printf("%lld concurrent calls, %lld mismatches\n", static_cast<long long>(calls.load()),
              static_cast<long long>(mismatches.load()));
}

// The last-error message is per thread: one thread's failure never shows in another.
TEST(Concurrency, ErrorMessagesArePerThread) {
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> x(2 * 4 * 3), y(x.size());
      for (int i = 0; i < 200; ++i) {
        normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {2, 4, 3});
        normkit_tensor yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {2, 4, 3});
        const int64_t groups = 3 + t % 2 * 2;  // 3 or 5: neither divides 4
        normkit_group_norm(nullptr, &xt, groups, nullptr, nullptr, 1e-5f, 0, &yt, nullptr, nullptr);
        const std::string want =
            "group_norm: C=4 is not divisible by groups=" + std::to_string(groups);
        if (want != normkit_last_error()) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace normkit_test
