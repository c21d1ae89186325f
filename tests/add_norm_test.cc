// SPDX-License-Identifier: Apache-2.0
// The fused residual add + layer / RMS norm (normkit_add_layer_norm, normkit_add_rms_norm):
// h against the two float adds written plainly, y against the double reference of the
// norm of h and bitwise against normkit_layer_norm / normkit_rms_norm on h, every in-place
// pairing, thread counts, and the validation of every argument.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "add_norm_pairings.h"
#include "norm_reference.h"
#include "test_util.h"

namespace normkit_test {
namespace {

// h = (x + r) + bias, one float add at a time: the definition of the fused op's h.
std::vector<float> PlainResidual(const std::vector<float>& x, const std::vector<float>& r,
                                 const float* bias, int64_t D) {
  std::vector<float> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float s = x[i] + r[i];
    h[i] = bias != nullptr ? s + bias[i % static_cast<size_t>(D)] : s;
  }
  return h;
}

struct AddNormCase {
  int64_t rows, D;
  bool rms, has_bias, has_gamma, has_beta, write_h;
  int threads;
  float offset;  // added to x (a large mean, cancelled by a residual of -offset)
};

// The unfused call on h: what the fused op's y and statistics must be, bit for bit.
void Unfused(const AddNormCase& k, std::vector<float> h, const float* gamma, const float* beta,
             std::vector<float>* y, std::vector<float>* mean, std::vector<float>* rstd) {
  Context ctx(k.threads);
  y->assign(h.size(), 0.0f);
  mean->assign(static_cast<size_t>(k.rows), 0.0f);
  rstd->assign(static_cast<size_t>(k.rows), 0.0f);
  normkit_tensor ht = Desc(h.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {k.rows, k.D});
  normkit_tensor yt = Desc(y->data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {k.rows, k.D});
  const normkit_status s =
      k.rms ? normkit_rms_norm(ctx.ctx, &ht, gamma, 1e-6f, &yt, rstd->data())
            : normkit_layer_norm(ctx.ctx, &ht, gamma, beta, 1e-6f, &yt, mean->data(), rstd->data());
  ASSERT_EQ(s, NORMKIT_SUCCESS) << normkit_last_error();
}

void RunAddNorm(const AddNormCase& k) {
  SCOPED_TRACE(testing::Message() << "rows=" << k.rows << " D=" << k.D << " rms=" << k.rms
                                  << " bias=" << k.has_bias << " gamma=" << k.has_gamma
                                  << " beta=" << k.has_beta << " h=" << k.write_h
                                  << " threads=" << k.threads << " offset=" << k.offset);
  const int64_t n = k.rows * k.D;
  std::vector<float> x = RandomVector(n, 71 + static_cast<uint32_t>(k.D));
  std::vector<float> r = RandomVector(n, 72, -1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    x[i] += k.offset;
    r[i] -= k.offset * 0.5f;
  }
  const std::vector<float> bias = RandomVector(k.D, 73), gamma = RandomVector(k.D, 74),
                           beta = RandomVector(k.D, 75);
  const float* bp = k.has_bias ? bias.data() : nullptr;
  const float* gp = k.has_gamma ? gamma.data() : nullptr;
  const float* betap = k.has_beta ? beta.data() : nullptr;
  const std::vector<float> h_want = PlainResidual(x, r, bp, k.D);
  const NormReference want = ReferenceRowNorm(h_want, k.rows, k.D, gp, betap, 1e-6, k.rms);

  std::vector<float> y(n, -9.0f), h(n, -9.0f), mean(k.rows, -9.0f), rstd(k.rows, -9.0f);
  Context ctx(k.threads);
  const auto layout = NORMKIT_LAYOUT_CHANNELS_FIRST;
  normkit_tensor xt = Desc(x.data(), layout, {k.rows, k.D}),
                 rt = Desc(r.data(), layout, {k.rows, k.D});
  normkit_tensor yt = Desc(y.data(), layout, {k.rows, k.D}),
                 ht = Desc(h.data(), layout, {k.rows, k.D});
  const normkit_tensor* hp = k.write_h ? &ht : nullptr;
  const normkit_status s =
      k.rms ? normkit_add_rms_norm(ctx.ctx, &xt, &rt, bp, gp, 1e-6f, &yt, hp, rstd.data())
            : normkit_add_layer_norm(ctx.ctx, &xt, &rt, bp, gp, betap, 1e-6f, &yt, hp, mean.data(),
                                     rstd.data());
  ASSERT_EQ(s, NORMKIT_SUCCESS) << normkit_last_error();
  if (k.write_h) {
    EXPECT_EQ(std::memcmp(h.data(), h_want.data(), n * sizeof(float)), 0) << "h = (x + r) + bias";
  } else {
    EXPECT_EQ(h, std::vector<float>(n, -9.0f)) << "h written without h_out";
  }
  ExpectNormNear(y, want, k.rms ? "add_rms_norm" : "add_layer_norm");
  for (int64_t i = 0; i < k.rows; ++i) {
    if (!k.rms) EXPECT_NEAR(mean[i], want.mean[i], 1e-6 * std::fabs(want.mean[i]) + 1e-7);
    EXPECT_NEAR(rstd[i], want.rstd[i], 1e-6 * want.rstd[i]);
  }
  std::vector<float> y_unfused, mean_unfused, rstd_unfused;
  Unfused(k, h_want, gp, betap, &y_unfused, &mean_unfused, &rstd_unfused);
  EXPECT_EQ(std::memcmp(y.data(), y_unfused.data(), n * sizeof(float)), 0)
      << "y differs from the unfused norm of h";
  EXPECT_EQ(std::memcmp(rstd.data(), rstd_unfused.data(), k.rows * sizeof(float)), 0);
  if (!k.rms) EXPECT_EQ(std::memcmp(mean.data(), mean_unfused.data(), k.rows * sizeof(float)), 0);
}

TEST(AddNorm, LayerNormMatchesReference) {
  for (int64_t D : {1, 3, 16, 17, 100, 768, 4096, 5000}) {
    RunAddNorm({7, D, false, true, true, true, true, 2, 0.0f});
    RunAddNorm({5, D, false, false, true, false, false, 1, 0.0f});
  }
  // Batches of short rows from the scratch (no h) and from h, the last batch partial.
  RunAddNorm({300, 64, false, true, true, true, false, 2, 0.0f});
  RunAddNorm({101, 200, false, true, false, true, true, 3, 0.0f});
  // A mean 1e4 times the spread left by the residual.
  RunAddNorm({9, 768, false, true, true, true, true, 2, 2.0e4f});
}

TEST(AddNorm, RmsNormMatchesReference) {
  for (int64_t D : {1, 7, 16, 31, 768, 4096}) {
    RunAddNorm({6, D, true, true, true, false, true, 2, 0.0f});
    RunAddNorm({6, D, true, false, false, false, false, 1, 0.0f});
  }
  RunAddNorm({300, 64, true, true, true, false, false, 2, 0.0f});
  RunAddNorm({101, 200, true, false, true, false, true, 3, 1.0e3f});
}

// Every way the outputs may be the inputs: the same bits as out of place. Rows of up to
// 1024 values go one at a time; longer ones with h an output a task's rows at a time (h
// of all of them made before any y is written).
void ExpectInPlaceOnEveryInput(int64_t rows, int64_t D) {
  SCOPED_TRACE("[" + std::to_string(rows) + ", " + std::to_string(D) + "]");
  const int64_t n = rows * D;
  const std::vector<float> x0 = RandomVector(n, 81), r0 = RandomVector(n, 82);
  const std::vector<float> bias = RandomVector(D, 83), gamma = RandomVector(D, 84),
                           beta = RandomVector(D, 85);
  for (bool rms : {false, true}) {
    // Out of place first: the expected y and h.
    std::vector<float> x = x0, r = r0, y(n), h(n);
    const auto call = [&](float* xp, float* rp, float* yp, float* hp) {
      normkit_tensor xt = Desc(xp, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
      normkit_tensor rt = Desc(rp, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
      normkit_tensor yt = Desc(yp, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
      normkit_tensor ht = Desc(hp, NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
      const normkit_tensor* htp = hp != nullptr ? &ht : nullptr;
      return rms ? normkit_add_rms_norm(nullptr, &xt, &rt, bias.data(), gamma.data(), 1e-5f, &yt,
                                        htp, nullptr)
                 : normkit_add_layer_norm(nullptr, &xt, &rt, bias.data(), gamma.data(), beta.data(),
                                          1e-5f, &yt, htp, nullptr, nullptr);
    };
    ASSERT_EQ(call(x.data(), r.data(), y.data(), h.data()), NORMKIT_SUCCESS)
        << normkit_last_error();
    const std::vector<float> y_want = y, h_want = h;
    for (const AddNormPairing& p : kAddNormPairings) {
      SCOPED_TRACE(std::string(p.name) + (rms ? " rms" : " layer"));
      x = x0, r = r0;
      std::vector<float> own_y(n), own_h(n);
      const auto pick = [&](int on, std::vector<float>& own) {
        return on == 1 ? x.data() : on == 2 ? r.data() : own.data();
      };
      float* yp = pick(p.y_on, own_y);
      float* hp = p.h_on < 0 ? nullptr : pick(p.h_on, own_h);
      ASSERT_EQ(call(x.data(), r.data(), yp, hp), NORMKIT_SUCCESS) << normkit_last_error();
      EXPECT_EQ(std::memcmp(yp, y_want.data(), n * sizeof(float)), 0) << "y";
      if (hp != nullptr) EXPECT_EQ(std::memcmp(hp, h_want.data(), n * sizeof(float)), 0) << "h";
    }
    // x and residual one array: h = x + x.
    x = x0;
    std::vector<float> twice(n);
    ASSERT_EQ(call(x.data(), x.data(), y.data(), twice.data()), NORMKIT_SUCCESS);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(twice[i], (x0[i] + x0[i]) + bias[i % D]) << i;
  }
}

TEST(AddNorm, InPlaceOnEveryInput) {
  ExpectInPlaceOnEveryInput(37, 96);
  ExpectInPlaceOnEveryInput(21, 1500);
  ExpectInPlaceOnEveryInput(13, 5000);
}

// Calls whose arrays together reach twice kStreamingStoreBytes (48 MiB: here 4 x 12.6
// MB) stream y and h past the cache, h through the worker's scratch: the same values as
// every other path (against the double reference and the unfused norm, inside
// RunAddNorm), and with h written onto x (y still streamed, h in place) the same bits.
TEST(AddNorm, StreamedOutputsOfLargeCalls) {
  const int64_t rows = 3072, D = 1024, n = rows * D;
  RunAddNorm({rows, D, false, true, true, true, true, 2, 0.0f});
  RunAddNorm({rows, D, true, false, true, false, true, 1, 0.0f});
  const std::vector<float> x = RandomVector(n, 95), r = RandomVector(n, 96),
                           gamma = RandomVector(D, 97);
  std::vector<float> y(n), h(n), xh = x, y_on_x(n);
  Context ctx(2);
  const auto layout = NORMKIT_LAYOUT_CHANNELS_FIRST;
  std::vector<float> xb = x, rb = r;
  normkit_tensor xt = Desc(xb.data(), layout, {rows, D}), rt = Desc(rb.data(), layout, {rows, D});
  normkit_tensor yt = Desc(y.data(), layout, {rows, D}), ht = Desc(h.data(), layout, {rows, D});
  ASSERT_EQ(normkit_add_layer_norm(ctx.ctx, &xt, &rt, nullptr, gamma.data(), nullptr, 1e-5f, &yt,
                                   &ht, nullptr, nullptr),
            NORMKIT_SUCCESS);
  normkit_tensor xht = Desc(xh.data(), layout, {rows, D}),
                 y2 = Desc(y_on_x.data(), layout, {rows, D});
  ASSERT_EQ(normkit_add_layer_norm(ctx.ctx, &xht, &rt, nullptr, gamma.data(), nullptr, 1e-5f, &y2,
                                   &xht, nullptr, nullptr),
            NORMKIT_SUCCESS);
  EXPECT_EQ(std::memcmp(xh.data(), h.data(), n * sizeof(float)), 0) << "h written onto x";
  EXPECT_EQ(std::memcmp(y_on_x.data(), y.data(), n * sizeof(float)), 0) << "y with h onto x";
}

TEST(AddNorm, BitwiseIdenticalAcrossThreadCounts) {
  for (int64_t D : {64, 768}) {
    const int64_t rows = 301, n = rows * D;
    const std::vector<float> x = RandomVector(n, 91), r = RandomVector(n, 92),
                             gamma = RandomVector(D, 93);
    for (bool rms : {false, true}) {
      std::vector<float> first_y, first_h;
      for (int threads : {1, 2, 3, 8}) {
        Context ctx(threads);
        std::vector<float> xb = x, rb = r, y(n), h(n);
        normkit_tensor xt = Desc(xb.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
        normkit_tensor rt = Desc(rb.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
        normkit_tensor yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
        normkit_tensor ht = Desc(h.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
        ASSERT_EQ(rms ? normkit_add_rms_norm(ctx.ctx, &xt, &rt, nullptr, gamma.data(), 1e-5f, &yt,
                                             &ht, nullptr)
                      : normkit_add_layer_norm(ctx.ctx, &xt, &rt, nullptr, gamma.data(), nullptr,
                                               1e-5f, &yt, &ht, nullptr, nullptr),
                  NORMKIT_SUCCESS);
        if (first_y.empty()) {
          first_y = y, first_h = h;
          continue;
        }
        EXPECT_EQ(std::memcmp(y.data(), first_y.data(), n * sizeof(float)), 0) << threads;
        EXPECT_EQ(std::memcmp(h.data(), first_h.data(), n * sizeof(float)), 0) << threads;
      }
    }
  }
}

// Overflow in the add reaches only its row (Inf in h: that row's y is NaN, as
// normkit_layer_norm gives); the other rows are untouched by it.
TEST(AddNorm, OverflowingSumStaysInItsRow) {
  const int64_t rows = 4, D = 40, n = rows * D;
  std::vector<float> x = RandomVector(n, 95), r = RandomVector(n, 96), y(n), h(n);
  x[D + 3] = 3.0e38f;
  r[D + 3] = 3.0e38f;  // x + r = Inf
  normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
  normkit_tensor rt = Desc(r.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
  normkit_tensor yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
  normkit_tensor ht = Desc(h.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {rows, D});
  ASSERT_EQ(normkit_add_layer_norm(nullptr, &xt, &rt, nullptr, nullptr, nullptr, 1e-5f, &yt, &ht,
                                   nullptr, nullptr),
            NORMKIT_SUCCESS);
  EXPECT_TRUE(std::isinf(h[D + 3]));
  const NormReference want =
      ReferenceRowNorm(PlainResidual(x, r, nullptr, D), rows, D, nullptr, nullptr, 1e-5, false);
  for (int64_t i = 0; i < n; ++i) {
    if (i / D == 1) {
      EXPECT_TRUE(std::isnan(y[i])) << i;
    } else {
      EXPECT_NEAR(y[i], want.y[i], 1e-5 * want.magnitude[i] + 1e-7) << i;
    }
  }
}

// Each rejected call names the argument, and writes neither y nor h nor the statistics.
TEST(AddNorm, ValidationNamesTheArgumentAndWritesNothing) {
  struct Call {
    std::vector<float> x = RandomVector(32, 1), r = RandomVector(32, 2),
                       y = std::vector<float>(64, -3.0f), h = std::vector<float>(64, -4.0f),
                       params = RandomVector(64, 3);
    normkit_tensor xt, rt, yt, ht;
    const float* bias;
    float* mean_out = nullptr;
    bool use_h = true;
    Call() {
      xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {4, 8});
      rt = Desc(r.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {4, 8});
      yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {4, 8});
      ht = Desc(h.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {4, 8});
      bias = params.data();
    }
  };
  struct Rule {
    const char* name;
    void (*breaks)(Call&);
    normkit_status status;
    const char* message;
  };
  const Rule rules[] = {
      {"NULL residual", [](Call& c) { c.rt.data = nullptr; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "residual"},
      {"residual shape", [](Call& c) { c.rt.shape[1] = 4; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "residual->shape[1] = 4 differs from x->shape[1] = 8"},
      {"residual dtype", [](Call& c) { c.rt.dtype = NORMKIT_DTYPE_BFLOAT16; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "residual->dtype = bfloat16 differs from x->dtype"},
      {"float64 x",
       [](Call& c) { c.xt.dtype = c.yt.dtype = c.rt.dtype = c.ht.dtype = NORMKIT_DTYPE_FLOAT64; },
       NORMKIT_ERROR_UNSUPPORTED, "x->dtype = float64 is not supported"},
      {"h_out dtype", [](Call& c) { c.ht.dtype = NORMKIT_DTYPE_FLOAT16; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "h_out->dtype = float16 differs from x->dtype"},
      {"y on residual in another dtype",
       [](Call& c) {
         c.yt.data = c.r.data();
         c.yt.dtype = NORMKIT_DTYPE_BFLOAT16;
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "y->data == residual->data with y->dtype = bfloat16"},
      {"rank 3",
       [](Call& c) {
         for (auto* t : {&c.xt, &c.rt, &c.yt, &c.ht}) {
           t->rank = 3;
           t->shape[0] = 2, t->shape[1] = 2, t->shape[2] = 8;
         }
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "x->rank = 3, expected 2"},
      {"y partially over residual", [](Call& c) { c.yt.data = c.r.data() + 1; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "y partially overlaps residual"},
      {"h partially over x", [](Call& c) { c.ht.data = c.x.data() + 2; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "h_out partially overlaps x"},
      {"h partially over residual", [](Call& c) { c.ht.data = c.r.data() + 2; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "h_out partially overlaps residual"},
      {"h is y", [](Call& c) { c.ht.data = c.y.data(); }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "h_out overlaps y"},
      {"h shape", [](Call& c) { c.ht.shape[0] = 2; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "h_out->shape[0] = 2 differs from x->shape[0] = 4"},
      {"bias not float-aligned",
       [](Call& c) {
         c.bias =
             reinterpret_cast<const float*>(reinterpret_cast<const char*>(c.params.data()) + 1);
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "bias"},
      {"residual not float-aligned",
       [](Call& c) { c.rt.data = reinterpret_cast<char*>(c.r.data()) + 2; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "residual"},
      {"bias over y", [](Call& c) { c.bias = c.y.data() + 4; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "bias overlaps the output y"},
      {"bias over h", [](Call& c) { c.bias = c.h.data() + 4; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "bias overlaps the output h_out"},
      {"mean_out over residual", [](Call& c) { c.mean_out = c.r.data(); },
       NORMKIT_ERROR_INVALID_ARGUMENT, "mean_out overlaps residual"},
      {"mean_out over h", [](Call& c) { c.mean_out = c.h.data() + 8; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "mean_out overlaps the output h_out"},
      {"CUDA tensors",
       [](Call& c) {
         for (auto* t : {&c.xt, &c.rt, &c.yt, &c.ht}) t->device = NORMKIT_DEVICE_CUDA;
       },
       NORMKIT_ERROR_UNSUPPORTED, "CUDA tensors are not supported"},
  };
  for (const Rule& rule : rules) {
    SCOPED_TRACE(rule.name);
    Call c;
    rule.breaks(c);
    const std::vector<float> x0 = c.x, r0 = c.r, y0 = c.y, h0 = c.h, p0 = c.params;
    const normkit_status s =
        normkit_add_layer_norm(nullptr, &c.xt, &c.rt, c.bias, nullptr, nullptr, 1e-5f, &c.yt,
                               c.use_h ? &c.ht : nullptr, c.mean_out, nullptr);
    EXPECT_EQ(s, rule.status) << normkit_last_error();
    EXPECT_NE(std::string(normkit_last_error()).find(rule.message), std::string::npos)
        << normkit_last_error();
    EXPECT_EQ(c.x, x0);
    EXPECT_EQ(c.r, r0);
    EXPECT_EQ(c.y, y0);
    EXPECT_EQ(c.h, h0);
    EXPECT_EQ(c.params, p0);
  }
}

}  // namespace
}  // namespace normkit_test
