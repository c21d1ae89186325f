// SPDX-License-Identifier: Apache-2.0
// The edges of the API: aliasing the header allows gives the defined result, aliasing it
// forbids is rejected before anything is written, misaligned pointers are rejected by
// name, thread counts and the environment variable follow their documented rules, and
// the exported descriptor helpers fill the same bytes as the inline ones.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/context.h"
#include "test_util.h"

namespace normkit_test {
namespace {

::testing::AssertionResult RejectedNaming(normkit_status status, const std::string& word) {
  if (status != NORMKIT_ERROR_INVALID_ARGUMENT) {
    return ::testing::AssertionFailure()
           << "status " << status << " (" << normkit_last_error() << ")";
  }
  const std::string message = normkit_last_error();
  if (message.find(word) == std::string::npos) {
    return ::testing::AssertionFailure() << "message '" << message << "' lacks '" << word << "'";
  }
  return ::testing::AssertionSuccess();
}

// --- batch norm: parameters overlapping y --------------------------------------------------

TEST(ApiEdges, BatchNormRejectsParametersInsideY) {
  const std::vector<int64_t> shape = {1, 64, 64, 64};
  const int64_t numel = Numel(shape), C = 64;
  const std::vector<float> x = RandomVector(numel, 1);
  std::vector<float> params = RandomVector(C, 2, 0.5f, 1.5f);
  const char* names[] = {"gamma", "beta", "running_mean", "running_var"};
  for (int which = 0; which < 4; ++which) {
    std::vector<float> y(numel, 7.0f);
    for (int64_t c = 0; c < C; ++c) y[numel - C + c] = params[c];  // a parameter stored in y
    const std::vector<float> before = y;
    const float* p[4] = {params.data(), params.data(), params.data(), params.data()};
    p[which] = y.data() + numel - C;
    normkit_tensor xt = Desc(const_cast<float*>(x.data()), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
    normkit_tensor yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
    EXPECT_TRUE(RejectedNaming(
        normkit_batch_norm_inference(nullptr, &xt, p[0], p[1], p[2], p[3], 1e-5f, &yt),
        names[which]));
    EXPECT_EQ(y, before) << names[which];
  }
}

// --- the folds: outputs that are the very same array as an input -------------------------

TEST(ApiEdges, FoldOutputsMayBeAnyInputArray) {
  const int64_t C = 37;  // whole vectors and a scalar tail
  const std::vector<float> g0 = RandomVector(C, 3, 0.5f, 2.0f), b0 = RandomVector(C, 4),
                           m0 = RandomVector(C, 5), v0 = RandomVector(C, 6, 0.1f, 3.0f);
  const float eps = 1e-3f;
  // Which input array scale / shift are: 0 gamma, 1 beta, 2 mean, 3 var, 4 its own.
  for (int scale_at = 0; scale_at < 5; ++scale_at) {
    for (int shift_at = 0; shift_at < 5; ++shift_at) {
      if (scale_at == shift_at && scale_at < 4) continue;  // scale and shift must differ
      std::vector<float> in[4] = {g0, b0, m0, v0};
      std::vector<float> own_scale(C), own_shift(C);
      float* scale = scale_at < 4 ? in[scale_at].data() : own_scale.data();
      float* shift = shift_at < 4 ? in[shift_at].data() : own_shift.data();
      ASSERT_EQ(normkit_batch_norm_fold(C, in[0].data(), in[1].data(), in[2].data(), in[3].data(),
                                        eps, scale, shift),
                NORMKIT_SUCCESS)
          << normkit_last_error();
      for (int64_t c = 0; c < C; ++c) {
        const double s = g0[c] / std::sqrt(static_cast<double>(v0[c]) + eps);
        const double h = b0[c] - m0[c] * s;
        EXPECT_NEAR(scale[c], s, 3e-7 * std::fabs(s)) << scale_at << shift_at << " c=" << c;
        EXPECT_NEAR(shift[c], h, 3e-7 * (std::fabs(m0[c] * s) + std::fabs(h)))
            << scale_at << shift_at << " c=" << c;
      }
    }
  }
  // The case: scale = running_mean, one channel: shift = 1 - 3 * 1 = -2.
  float g = 2, b = 1, m = 3, v = 3, shift = 0;
  ASSERT_EQ(normkit_batch_norm_fold(1, &g, &b, &m, &v, 1.0f, &m, &shift), NORMKIT_SUCCESS);
  EXPECT_EQ(m, 1.0f);
  EXPECT_EQ(shift, -2.0f);
}

TEST(ApiEdges, FoldIntoConvBiasMayBeABatchNormArray) {
  const int64_t O = 5, I = 3, K = 4;
  const std::vector<float> w0 = RandomVector(O * I * K, 7), g0 = RandomVector(O, 8, 0.5f, 2.f),
                           b0 = RandomVector(O, 9), m0 = RandomVector(O, 10),
                           v0 = RandomVector(O, 11, 0.1f, 2.f), bias = RandomVector(O, 12);
  for (int at = 0; at < 4; ++at) {
    std::vector<float> w = w0, in[4] = {g0, b0, m0, v0};
    ASSERT_EQ(normkit_fold_batch_norm_into_conv(w.data(), O, I, 1, K, NORMKIT_CONV_WEIGHT_OIHW,
                                                bias.data(), in[at].data(), in[0].data(),
                                                in[1].data(), in[2].data(), in[3].data(), 1e-5f),
              NORMKIT_SUCCESS)
        << normkit_last_error();
    for (int64_t o = 0; o < O; ++o) {
      const double s = g0[o] / std::sqrt(static_cast<double>(v0[o]) + 1e-5);
      const double want = bias[o] * s + (b0[o] - m0[o] * s);
      EXPECT_NEAR(in[at][o], want, 1e-6 * (std::fabs(want) + std::fabs(m0[o] * s))) << at;
    }
  }
}

// --- misaligned pointers --------------------------------------------------------------------

TEST(ApiEdges, MisalignedPointersAreRejectedByName) {
  const std::vector<int64_t> shape = {2, 8, 5};
  const int64_t numel = Numel(shape);
  std::vector<float> storage(numel + 8, 1.0f), ystore(numel + 8, 3.0f), params(16, 1.0f);
  const std::vector<float> before = ystore;
  for (int off = 1; off < 4; ++off) {
    auto* odd_x = reinterpret_cast<float*>(reinterpret_cast<char*>(storage.data()) + off);
    auto* odd_p = reinterpret_cast<float*>(reinterpret_cast<char*>(params.data()) + off);
    normkit_tensor bad_x = Desc(odd_x, NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
    normkit_tensor xt = Desc(storage.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
    normkit_tensor yt = Desc(ystore.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
    EXPECT_TRUE(
        RejectedNaming(normkit_affine(nullptr, &bad_x, nullptr, nullptr, 0, &yt), "x->data"));
    EXPECT_TRUE(RejectedNaming(normkit_affine(nullptr, &xt, odd_p, nullptr, 0, &yt), "scale"));
    EXPECT_TRUE(RejectedNaming(normkit_batch_norm_inference(nullptr, &xt, nullptr, nullptr, odd_p,
                                                            params.data(), 1e-5f, &yt),
                               "running_mean"));
    EXPECT_TRUE(RejectedNaming(
        normkit_group_norm(nullptr, &xt, 2, odd_p, nullptr, 1e-5f, 0, &yt, nullptr, nullptr),
        "gamma"));
    float scale[8], shift[8];
    EXPECT_TRUE(RejectedNaming(normkit_batch_norm_fold(8, nullptr, odd_p, params.data(),
                                                       params.data(), 1e-5f, scale, shift),
                               "beta"));
    EXPECT_EQ(ystore, before);
  }
  // float64 shift-sum data 4 bytes off: element size 8.
  std::vector<double> xd(2 * 3 * 4 * 5 + 1), yd(2 * 1 * 4 * 7 + 1);
  auto* odd = reinterpret_cast<double*>(reinterpret_cast<char*>(xd.data()) + 4);
  const int64_t xs[4] = {2, 3, 4, 5}, ys[4] = {2, 1, 4, 7};
  normkit_tensor x64, y64;
  normkit_tensor_init(&x64, odd, NORMKIT_DTYPE_FLOAT64, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, xs);
  normkit_tensor_init(&y64, yd.data(), NORMKIT_DTYPE_FLOAT64, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, ys);
  normkit_shift_sum_params params64;
  normkit_shift_sum_params_init(&params64, 1);
  EXPECT_TRUE(RejectedNaming(normkit_shift_sum(nullptr, &x64, &params64, &y64), "x->data"));
}

// --- threads ----------------------------------------------------------------------------------

TEST(ApiEdges, ContextThreadCountsHaveALimit) {
  normkit_context* ctx = nullptr;
  EXPECT_TRUE(RejectedNaming(normkit_context_create(NORMKIT_MAX_THREADS + 1, &ctx), "num_threads"));
  EXPECT_TRUE(RejectedNaming(normkit_context_create(INT32_MAX, &ctx), "num_threads"));
  EXPECT_TRUE(RejectedNaming(normkit_context_create(-1, &ctx), "num_threads"));
  EXPECT_EQ(ctx, nullptr);
  ASSERT_EQ(normkit_context_create(3, &ctx), NORMKIT_SUCCESS);
  EXPECT_EQ(normkit_context_num_threads(ctx), 3);
  normkit_context_destroy(ctx);
}

TEST(ApiEdges, NumThreadsVariableParsing) {
  EXPECT_EQ(normkit::ParseNumThreads("4"), 4);
  EXPECT_EQ(normkit::ParseNumThreads("4 "), 4);
  EXPECT_EQ(normkit::ParseNumThreads(" 8\n"), 8);
  EXPECT_EQ(normkit::ParseNumThreads("4096"), 4096);
  for (const char* bad : {"", " ", "0", "-3", "+4", "4x", "x4", "4 4", "4097", "99999999999999"}) {
    EXPECT_EQ(normkit::ParseNumThreads(bad), 0) << "'" << bad << "'";
  }
  EXPECT_EQ(normkit::ParseNumThreads(nullptr), 0);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NORMKIT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define NORMKIT_SANITIZED 1
#endif
#endif

// The process's mapped bytes (VmSize).
int64_t MappedBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long pages = -1;
  const int got = std::fscanf(f, "%ld", &pages);
  std::fclose(f);
  return got == 1 ? static_cast<int64_t>(pages) * sysconf(_SC_PAGESIZE) : -1;
}

// A library must not end its host: with no room for more thread stacks, a call that wants
// 16 threads runs on those it can have (OpenMP's runtime exits the process instead).
TEST(ApiEdges, ThreadCreationFailureDoesNotEndTheProcess) {
#if defined(NORMKIT_SANITIZED)
  GTEST_SKIP() << "sanitizers map far more address space than a limit can leave room for";
#else
  const std::vector<int64_t> shape = {256, 4096};  // 4 MiB: threaded
  const int64_t numel = Numel(shape);
  const std::vector<float> x = RandomVector(numel, 30);
  std::vector<float> want(numel), y(numel);
  normkit_tensor xt = Desc(const_cast<float*>(x.data()), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
  normkit_tensor wt = Desc(want.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
  normkit_tensor yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, shape);
  ASSERT_EQ(normkit_layer_norm(nullptr, &xt, nullptr, nullptr, 1e-5f, &wt, nullptr, nullptr),
            NORMKIT_SUCCESS);
  normkit_context* ctx = nullptr;
  ASSERT_EQ(normkit_context_create(16, &ctx), NORMKIT_SUCCESS);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A fresh calling thread (its own OpenMP pool), then 16 MiB of address space to spare:
    // two 8 MiB default stacks at most.
    int code = 3;
    std::thread caller([&] {
      const int64_t mapped = MappedBytes();
      const rlimit limit{static_cast<rlim_t>(mapped + (16 << 20)),
                         static_cast<rlim_t>(mapped + (16 << 20))};
      if (mapped < 0 || setrlimit(RLIMIT_AS, &limit) != 0) return;
      const normkit_status st =
          normkit_layer_norm(ctx, &xt, nullptr, nullptr, 1e-5f, &yt, nullptr, nullptr);
      code = st != NORMKIT_SUCCESS ? 2 : (y == want ? 0 : 1);
    });
    caller.join();
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  normkit_context_destroy(ctx);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed";
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: wrong result, 2: an error status, 3: no limit set, else the process was ended";
#endif
}

// --- shift-sum: one rule for the step, a shape-only x, a normalizer pinv cannot use --------

TEST(ApiEdges, ShiftSumStepRule) {
  const int64_t one[4] = {1, 1, 3, 4}, two[4] = {1, 2, 3, 4}, yshape[4] = {1, 1, 3, 4};
  std::vector<float> x = RandomVector(24, 13), y(12, 0.0f), want(12, 0.0f);
  normkit_tensor xt, yt, wt;
  normkit_tensor_init(&xt, x.data(), NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, one);
  normkit_tensor_init(&yt, y.data(), NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4,
                      yshape);
  normkit_tensor_init(&wt, want.data(), NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4,
                      yshape);
  normkit_shift_sum_params p;
  normkit_shift_sum_params_init(&p, 0);
  ASSERT_EQ(normkit_shift_sum(nullptr, &xt, &p, &wt), NORMKIT_SUCCESS);
  for (int64_t step : {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    normkit_shift_sum_params_init(&p, step);
    ASSERT_EQ(normkit_shift_sum(nullptr, &xt, &p, &yt), NORMKIT_SUCCESS) << normkit_last_error();
    EXPECT_EQ(y, want) << step;  // one channel never moves
  }
  normkit_tensor x2;
  normkit_tensor_init(&x2, x.data(), NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, two);
  for (int64_t step : {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    normkit_shift_sum_params_init(&p, step);
    EXPECT_TRUE(RejectedNaming(normkit_shift_sum(nullptr, &x2, &p, &yt), "step"));
  }
}

TEST(ApiEdges, ShiftSumShapeOnlyXAndPinvNormalizer) {
  const int64_t xs[4] = {1, 3, 4, 5}, ys[4] = {1, 1, 4, 7};
  normkit_shift_sum_params p;
  normkit_shift_sum_params_init(&p, 1);
  std::vector<float> x(60, 1.0f), phi(28), phi_null(28);
  normkit_tensor xt, shape_only;
  normkit_tensor_init(&xt, x.data(), NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, xs);
  normkit_tensor_init(&shape_only, nullptr, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4,
                      xs);
  ASSERT_EQ(normkit_shift_sum_normalizer(nullptr, &xt, &p, phi.data()), NORMKIT_SUCCESS);
  ASSERT_EQ(normkit_shift_sum_normalizer(nullptr, &shape_only, &p, phi_null.data()),
            NORMKIT_SUCCESS)
      << normkit_last_error();
  EXPECT_EQ(phi, phi_null);
  // Without a mask each position counts its covering channels: 1, 2, 3, 3, 3, 2, 1.
  const float count[7] = {1, 2, 3, 3, 3, 2, 1};
  for (int h = 0; h < 4; ++h) {
    for (int w = 0; w < 7; ++w) EXPECT_EQ(phi[h * 7 + w], count[w]);
  }
  std::vector<float> y(28, 1.0f), out(60, 9.0f);
  normkit_tensor yt;
  normkit_tensor_init(&yt, y.data(), NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, ys);
  normkit_tensor ot;
  normkit_tensor_init(&ot, out.data(), NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, xs);
  EXPECT_TRUE(RejectedNaming(
      normkit_shift_sum_pinv(nullptr, &yt, &p, NORMKIT_PINV_DIVIDE_BY_MASK, phi.data(), &ot),
      "normalizer"));
  EXPECT_EQ(out, std::vector<float>(60, 9.0f));
}

// One GAP step from x = 0 with lambda = 1, gamma = 0 is the Moore-Penrose pinv, for any
// scale s, mask and layout: A^T(y / (s^2 Phi_s)).
TEST(ApiEdges, GapStepFromZeroIsThePinv) {
  const int64_t B = 2, C = 3, H = 4, W = 5, Wo = W + (C - 1) * 2;
  const int64_t xs[4] = {B, C, H, W}, ys[4] = {B, 1, H, Wo};
  const std::vector<double> mask = [] {
    std::vector<float> m = RandomVector(H * W, 20, 0.0f, 1.0f);
    return std::vector<double>(m.begin(), m.end());
  }();
  const std::vector<float> yf = RandomVector(B * H * Wo, 21);
  const std::vector<double> y(yf.begin(), yf.end());
  for (double s : {0.5, 1.0, 2.0 / 3.0, -1.5}) {
    for (normkit_layout layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      for (bool masked : {false, true}) {
        normkit_shift_sum_params p;
        normkit_shift_sum_params_init(&p, 2);
        p.scale = s;
        if (masked) {
          p.mask_kind = NORMKIT_MASK_HW;
          p.mask = mask.data();
        }
        std::vector<double> pinv(B * C * H * W, -1.0), step(B * C * H * W, 0.0);
        normkit_tensor yt, pt, st;
        normkit_tensor_init(&yt, const_cast<double*>(y.data()), NORMKIT_DTYPE_FLOAT64,
                            NORMKIT_LAYOUT_CHANNELS_FIRST, 4, ys);
        normkit_tensor_init(&pt, pinv.data(), NORMKIT_DTYPE_FLOAT64, layout, 4, xs);
        normkit_tensor_init(&st, step.data(), NORMKIT_DTYPE_FLOAT64, layout, 4, xs);
        ASSERT_EQ(
            normkit_shift_sum_pinv(nullptr, &yt, &p, NORMKIT_PINV_MOORE_PENROSE, nullptr, &pt),
            NORMKIT_SUCCESS);
        ASSERT_EQ(normkit_shift_sum_gap_step(nullptr, &st, &yt, &p, 1.0, 0.0, nullptr),
                  NORMKIT_SUCCESS)
            << normkit_last_error();
        for (size_t i = 0; i < pinv.size(); ++i) {
          ASSERT_NEAR(step[i], pinv[i], 1e-12 * (1.0 + std::fabs(pinv[i])))
              << "s=" << s << " layout " << layout << " masked " << masked << " i=" << i;
        }
      }
    }
  }
}

// --- exported descriptor helpers ------------------------------------------------------------

TEST(ApiEdges, ExportedDescriptorHelpersFillTheInlineBytes) {
  ASSERT_EQ(normkit_tensor_struct_size(), sizeof(normkit_tensor));
  ASSERT_EQ(normkit_shift_sum_params_struct_size(), sizeof(normkit_shift_sum_params));
  float data[6];
  const int64_t shape[3] = {1, 2, 3};
  normkit_tensor a, b;
  std::memset(&a, 0, sizeof a);
  std::memset(&b, 0xAB, sizeof b);
  normkit_tensor_init(&a, data, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_LAST, 3, shape);
  normkit_tensor_set(&b, data, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_LAST, 3, shape);
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0);
  normkit_tensor_set_device(&b, NORMKIT_DEVICE_CUDA, 1);
  EXPECT_EQ(b.device, NORMKIT_DEVICE_CUDA);
  EXPECT_EQ(b.device_index, 1);
  // A call through the exported helper works like one through the inline one.
  float y[6];
  normkit_tensor yt;
  normkit_tensor_set(&yt, y, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_LAST, 3, shape);
  for (int i = 0; i < 6; ++i) data[i] = static_cast<float>(i);
  ASSERT_EQ(normkit_affine(nullptr, &a, nullptr, nullptr, 0, &yt), NORMKIT_SUCCESS);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], data[i]);

  normkit_shift_sum_params p, q;
  std::memset(&p, 0, sizeof p);
  std::memset(&q, 0xCD, sizeof q);
  const float mask[4] = {1, 0, 1, 0};
  normkit_shift_sum_params_init(&p, -3);
  p.axis = NORMKIT_SHIFT_ALONG_H;
  p.scale = 0.5;
  p.mask_kind = NORMKIT_MASK_HW;
  p.mask = mask;
  normkit_shift_sum_params_set(&q, -3, NORMKIT_SHIFT_ALONG_H, 0.5, NORMKIT_MASK_HW, mask);
  EXPECT_EQ(std::memcmp(&p, &q, sizeof p), 0);
}

}  // namespace
}  // namespace normkit_test
