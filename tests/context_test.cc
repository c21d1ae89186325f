// SPDX-License-Identifier: Apache-2.0
#include <cstring>
#include <new>
#include <string>

#include "core/parallel.h"
#include "test_util.h"

namespace normkit_test {
namespace {

TEST(Context, CreateQueryDestroy) {
  normkit_context* ctx = nullptr;
  ASSERT_EQ(normkit_context_create(3, &ctx), NORMKIT_SUCCESS);
  EXPECT_EQ(normkit_context_num_threads(ctx), 3);
  normkit_context_destroy(ctx);
  ASSERT_EQ(normkit_context_create(0, &ctx), NORMKIT_SUCCESS);
  EXPECT_GE(normkit_context_num_threads(ctx), 1);
  EXPECT_EQ(normkit_context_num_threads(ctx), normkit_context_num_threads(nullptr));
  normkit_context_destroy(ctx);
  normkit_context_destroy(nullptr);
}

TEST(Context, RejectsBadArguments) {
  normkit_context* ctx = nullptr;
  EXPECT_EQ(normkit_context_create(-1, &ctx), NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(std::string(normkit_last_error()).find("num_threads = -1"), std::string::npos);
  EXPECT_EQ(normkit_context_create(2, nullptr), NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(normkit_last_error(), "context_create: out is NULL");
}

TEST(Info, VersionTargetBackend) {
  EXPECT_EQ(normkit_version(),
            (NORMKIT_VERSION_MAJOR << 16) | (NORMKIT_VERSION_MINOR << 8) | NORMKIT_VERSION_PATCH);
  EXPECT_STREQ(normkit_version_string(), "0.1.0");
  EXPECT_GT(std::strlen(normkit_simd_target()), 0u);
  const std::string backend = normkit_threading_backend();
  EXPECT_TRUE(backend == "tbb" || backend == "openmp" || backend == "pool" || backend == "serial")
      << backend;
}

TEST(Info, ErrorMessageIsPerThreadAndClearedOnSuccess) {
  normkit_context* ctx = nullptr;
  EXPECT_EQ(normkit_context_create(-5, &ctx), NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_STRNE(normkit_last_error(), "");
  ASSERT_EQ(normkit_context_create(1, &ctx), NORMKIT_SUCCESS);
  EXPECT_STREQ(normkit_last_error(), "");
  normkit_context_destroy(ctx);
}

}  // namespace
}  // namespace normkit_test

namespace normkit_test {
namespace {

TEST(Context, CarriesACudaStream) {
  // The stream is an opaque handle to the context: set, read back, reset.
  Context ctx(1);
  EXPECT_EQ(normkit_context_cuda_stream(ctx.ctx), nullptr);
  int fake_stream = 0;
  ASSERT_EQ(normkit_context_set_cuda_stream(ctx.ctx, &fake_stream), NORMKIT_SUCCESS);
  EXPECT_EQ(normkit_context_cuda_stream(ctx.ctx), &fake_stream);
  ASSERT_EQ(normkit_context_set_cuda_stream(ctx.ctx, nullptr), NORMKIT_SUCCESS);
  EXPECT_EQ(normkit_context_cuda_stream(ctx.ctx), nullptr);
  EXPECT_EQ(normkit_context_cuda_stream(nullptr), nullptr);  // the default context's
  EXPECT_EQ(normkit_context_set_cuda_stream(nullptr, &fake_stream), NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(normkit_last_error()).find("context is NULL"), std::string::npos);
  EXPECT_GE(normkit_cuda_device_count(), 0);
}

// A task's exception reaches the caller of the parallel loop on every backend (an
// exception leaving an OpenMP region would call std::terminate), and the loop
// still runs every task when none throws.
TEST(Context, ParallelLoopsCarryATaskExceptionToTheCaller) {
  for (int threads : {1, 2, 3, 8}) {
    Context ctx(threads);
    const normkit_context& context = *ctx.ctx;
    for (int64_t bad : {0, 5, 11}) {
      EXPECT_THROW(normkit::ParallelFor(context, 12,
                                        [&](int64_t task) {
                                          if (task == bad) throw std::bad_alloc();
                                        }),
                   std::bad_alloc)
          << "threads=" << threads << " bad task " << bad;
      EXPECT_THROW(normkit::ParallelForRuns(context, 12,
                                            [&](int64_t begin, int64_t end) {
                                              if (begin <= bad && bad < end) throw std::bad_alloc();
                                            }),
                   std::bad_alloc)
          << "threads=" << threads << " bad task " << bad;
    }
    std::vector<int> ran(12, 0);
    normkit::ParallelFor(context, 12, [&](int64_t task) { ran[static_cast<size_t>(task)] += 1; });
    EXPECT_EQ(ran, std::vector<int>(12, 1)) << "threads=" << threads;
  }
}

}  // namespace
}  // namespace normkit_test
