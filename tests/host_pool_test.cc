// SPDX-License-Identifier: Apache-2.0
// A context on the host's parallel-for (normkit_context_create_with_parallel_for): every
// op's parallel parts run as the host's tasks, with the same bits as normkit's own threads.
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "test_util.h"

namespace normkit_test {
namespace {

// The simplest host pool: `threads` threads (the caller one of them) take the tasks from
// one counter. Counts the loops and tasks it was given.
struct HostPool {
  int threads = 1;
  std::atomic<int> loops{0};
  std::atomic<int64_t> tasks{0};
};

void HostParallelFor(void* pool, int64_t n, void (*task)(void*, int64_t), void* task_context) {
  auto* p = static_cast<HostPool*>(pool);
  p->loops.fetch_add(1);
  std::atomic<int64_t> next{0};
  const auto worker = [&] {
    for (int64_t i; (i = next.fetch_add(1)) < n;) {
      task(task_context, i);
      p->tasks.fetch_add(1);
    }
  };
  std::vector<std::thread> others;
  for (int t = 1; t < p->threads; ++t) others.emplace_back(worker);
  worker();
  for (auto& t : others) t.join();
}

// Runs `op` with a one-thread context, then with host contexts of 2 and 3 threads on a
// host pool of 3: the same bits, and the host pool did the loops.
template <class Op>
void ExpectSameBitsOnHostPool(int64_t n, Op op) {
  const std::vector<float> x = RandomVector(n, 5);
  std::vector<float> want(n);
  {
    Context one(1);
    op(one.ctx, x.data(), want.data());
  }
  for (int threads : {2, 3}) {
    HostPool pool;
    pool.threads = 3;
    normkit_context* ctx = nullptr;
    ASSERT_EQ(normkit_context_create_with_parallel_for(threads, HostParallelFor, &pool, &ctx),
              NORMKIT_SUCCESS);
    EXPECT_EQ(normkit_context_num_threads(ctx), threads);
    std::vector<float> got(n);
    op(ctx, x.data(), got.data());
    normkit_context_destroy(ctx);
    EXPECT_GT(pool.loops.load(), 0) << "threads=" << threads;
    EXPECT_GE(pool.tasks.load(), 2) << "threads=" << threads;
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
        << "threads=" << threads;
  }
}

TEST(HostPool, GroupNormBothLayouts) {
  const std::vector<int64_t> shape = {4, 64, 40, 40};  // 1.6 MiB: split over the threads
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    ExpectSameBitsOnHostPool(Numel(shape), [&](normkit_context* ctx, const float* x, float* y) {
      normkit_tensor xt = Desc(const_cast<float*>(x), layout, shape), yt = Desc(y, layout, shape);
      ASSERT_EQ(normkit_group_norm(ctx, &xt, 8, nullptr, nullptr, 1e-5f, NORMKIT_ACTIVATION_SILU,
                                   &yt, nullptr, nullptr),
                NORMKIT_SUCCESS)
          << normkit_last_error();
    });
  }
}

TEST(HostPool, BatchNormAndLayerNorm) {
  const std::vector<int64_t> shape = {8, 32, 32, 32};
  const std::vector<float> mean = RandomVector(32, 1), var = RandomVector(32, 2, 0.5f, 2.0f);
  ExpectSameBitsOnHostPool(Numel(shape), [&](normkit_context* ctx, const float* x, float* y) {
    normkit_tensor xt = Desc(const_cast<float*>(x), NORMKIT_LAYOUT_CHANNELS_LAST, shape);
    normkit_tensor yt = Desc(y, NORMKIT_LAYOUT_CHANNELS_LAST, shape);
    ASSERT_EQ(normkit_batch_norm_inference(ctx, &xt, nullptr, nullptr, mean.data(), var.data(),
                                           1e-5f, &yt),
              NORMKIT_SUCCESS)
        << normkit_last_error();
  });
  const std::vector<int64_t> rows = {1024, 768};
  ExpectSameBitsOnHostPool(Numel(rows), [&](normkit_context* ctx, const float* x, float* y) {
    normkit_tensor xt = Desc(const_cast<float*>(x), NORMKIT_LAYOUT_CHANNELS_FIRST, rows);
    normkit_tensor yt = Desc(y, NORMKIT_LAYOUT_CHANNELS_FIRST, rows);
    ASSERT_EQ(normkit_layer_norm(ctx, &xt, nullptr, nullptr, 1e-5f, &yt, nullptr, nullptr),
              NORMKIT_SUCCESS)
        << normkit_last_error();
  });
}

TEST(HostPool, ShiftSumWithPerWorkerScratch) {
  // The channels-last forward keeps a scratch per worker: the host's task index.
  const std::vector<int64_t> xs = {4, 28, 64, 64}, ys = {4, 1, 64, 64 + 27 * 2};
  ExpectSameBitsOnHostPool(Numel(xs), [&](normkit_context* ctx, const float* x, float* y) {
    std::vector<float> out(Numel(ys));
    normkit_tensor xt = Desc(const_cast<float*>(x), NORMKIT_LAYOUT_CHANNELS_LAST, xs);
    normkit_tensor yt = Desc(out.data(), NORMKIT_LAYOUT_CHANNELS_LAST, ys);
    normkit_shift_sum_params params;
    normkit_shift_sum_params_init(&params, 2);
    ASSERT_EQ(normkit_shift_sum(ctx, &xt, &params, &yt), NORMKIT_SUCCESS) << normkit_last_error();
    normkit_tensor back = Desc(y, NORMKIT_LAYOUT_CHANNELS_LAST, xs);
    ASSERT_EQ(normkit_shift_sum_adjoint(ctx, &yt, &params, &back), NORMKIT_SUCCESS)
        << normkit_last_error();
  });
}

TEST(HostPool, RejectsBadArguments) {
  HostPool pool;
  normkit_context* ctx = nullptr;
  EXPECT_EQ(normkit_context_create_with_parallel_for(2, nullptr, &pool, &ctx),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(normkit_last_error()).find("parallel_for"), std::string::npos);
  EXPECT_EQ(normkit_context_create_with_parallel_for(0, HostParallelFor, &pool, &ctx),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(normkit_context_create_with_parallel_for(2, HostParallelFor, &pool, nullptr),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, nullptr);
}

}  // namespace
}  // namespace normkit_test
