// SPDX-License-Identifier: Apache-2.0
// Every validation rule: the status, a message naming the argument, and an output
// left byte-for-byte untouched.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "test_util.h"

namespace normkit_test {
namespace {

constexpr float kSentinel = 31.0f;

// A valid call's arguments, which each case breaks in one way.
struct Call {
  std::vector<float> x = RandomVector(2 * 3 * 4 * 5, 1);
  std::vector<float> y = std::vector<float>(2 * 3 * 4 * 5, kSentinel);
  std::vector<float> scale = {1.0f, 2.0f, 3.0f}, shift = {0.5f, 0.5f, 0.5f};
  std::vector<float> mean = {0.0f, 1.0f, 2.0f}, var = {1.0f, 1.0f, 1.0f};
  normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {2, 3, 4, 5});
  normkit_tensor yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {2, 3, 4, 5});
  int32_t kind = NORMKIT_PARAMS_PER_CHANNEL;
  float eps = 1e-5f;
  const float* scale_p = scale.data();
  const float* shift_p = shift.data();
  // Normalizations: groups, activation and the statistics outputs (N x groups).
  int64_t groups = 3;
  int32_t activation = NORMKIT_ACTIVATION_SILU;
  std::vector<float> stats = std::vector<float>(12, kSentinel);
  float* mean_out = stats.data();
  float* rstd_out = stats.data() + 6;
};

struct Rule {
  const char* name;
  std::function<void(Call&)> breaks;
  normkit_status status;
  const char* message;  // a substring the message must contain
};

const std::vector<Rule>& TensorRules() {
  static const std::vector<Rule> rules = {
      {"null x", [](Call& c) { c.xt.struct_size = 0; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "x->struct_size"},
      {"null x data", [](Call& c) { c.xt.data = nullptr; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "x->data is NULL"},
      {"null y data", [](Call& c) { c.yt.data = nullptr; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "y->data is NULL"},
      {"rank 1", [](Call& c) { c.xt.rank = 1; }, NORMKIT_ERROR_INVALID_ARGUMENT, "x->rank = 1"},
      {"rank 6", [](Call& c) { c.yt.rank = 6; }, NORMKIT_ERROR_INVALID_ARGUMENT, "y->rank = 6"},
      {"zero dim", [](Call& c) { c.xt.shape[2] = 0; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "x->shape[2] (H) = 0"},
      {"negative dim", [](Call& c) { c.xt.shape[1] = -3; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "x->shape[1] (C) = -3"},
      {"overflowing dims",
       [](Call& c) {
         c.xt.shape[0] = int64_t{1} << 40;
         c.xt.shape[2] = int64_t{1} << 40;
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "overflows"},
      {"bytes beyond address space",
       [](Call& c) {
         c.xt.shape[0] = int64_t{1} << 30;  // numel fits int64, bytes do not
         c.xt.shape[2] = int64_t{1} << 28;
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "address space"},
      {"bad dtype", [](Call& c) { c.xt.dtype = 99; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "x->dtype = 99"},
      {"unsupported dtype",
       [](Call& c) {
         c.xt.dtype = NORMKIT_DTYPE_FLOAT16;
         c.yt.dtype = NORMKIT_DTYPE_FLOAT16;
       },
       NORMKIT_ERROR_UNSUPPORTED, "float16 is not supported"},
      {"bad layout", [](Call& c) { c.yt.layout = 7; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "y->layout = 7"},
      {"layout mismatch", [](Call& c) { c.yt.layout = NORMKIT_LAYOUT_CHANNELS_LAST; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "differs from x->layout"},
      {"dtype mismatch", [](Call& c) { c.yt.dtype = NORMKIT_DTYPE_FLOAT64; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "differs from x->dtype"},
      {"shape mismatch",
       [](Call& c) {
         c.yt.shape[2] = 5;
         c.yt.shape[3] = 4;
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "y->shape[2] = 5 differs"},
      {"rank mismatch",
       [](Call& c) {
         c.yt.rank = 3;
         c.yt.shape[2] = 20;
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "y->rank = 3 differs"},
      {"cuda and cpu tensors mixed", [](Call& c) { c.xt.device = NORMKIT_DEVICE_CUDA; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "must live on one device"},
      // Without a GPU (or without the CUDA module): DEVICE_UNAVAILABLE. With one, the
      // host buffers of this call are what is wrong.
      {"cuda tensors holding host memory",
       [](Call& c) {
         c.xt.device = NORMKIT_DEVICE_CUDA;
         c.yt.device = NORMKIT_DEVICE_CUDA;
       },
       normkit_cuda_device_count() > 0 ? NORMKIT_ERROR_INVALID_ARGUMENT
                                       : NORMKIT_ERROR_DEVICE_UNAVAILABLE,
       "the tensors are CUDA tensors"},
      {"negative device_index",
       [](Call& c) {
         c.xt.device = NORMKIT_DEVICE_CUDA;
         c.xt.device_index = -1;
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "x->device_index = -1"},
      {"bad device", [](Call& c) { c.yt.device = 5; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "y->device = 5"},
      {"partial overlap",
       [](Call& c) {
         c.y = c.x;  // y aliases x shifted by one element, through x's own buffer
         c.yt.data = c.x.data() + 1;
         c.xt.shape[3] = 4;
         c.yt.shape[3] = 4;
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "partially overlaps"},
  };
  return rules;
}

// Runs the broken call and checks status, message and that y is untouched.
void ExpectRejected(const Rule& rule, const std::function<normkit_status(Call&)>& op) {
  SCOPED_TRACE(rule.name);
  Call call;
  rule.breaks(call);
  // Snapshot both buffers: y, or x when a case points y into it.
  const std::vector<float> x_before = call.x, y_before = call.y;
  const normkit_status status = op(call);
  EXPECT_EQ(status, rule.status) << normkit_last_error();
  const std::string message = normkit_last_error();
  EXPECT_NE(message.find(rule.message), std::string::npos) << "message: " << message;
  EXPECT_EQ(std::memcmp(call.y.data(), y_before.data(), y_before.size() * sizeof(float)), 0)
      << "rejected call wrote into y";
  EXPECT_EQ(std::memcmp(call.x.data(), x_before.data(), x_before.size() * sizeof(float)), 0)
      << "rejected call wrote into x";
}

TEST(Validation, AffineTensorRules) {
  for (const Rule& rule : TensorRules()) {
    ExpectRejected(rule, [](Call& c) {
      return normkit_affine(nullptr, &c.xt, c.scale_p, c.shift_p, c.kind, &c.yt);
    });
  }
}

TEST(Validation, BatchNormTensorRules) {
  for (const Rule& rule : TensorRules()) {
    ExpectRejected(rule, [](Call& c) {
      return normkit_batch_norm_inference(nullptr, &c.xt, c.scale_p, c.shift_p, c.mean.data(),
                                          c.var.data(), c.eps, &c.yt);
    });
  }
}

TEST(Validation, AffineParameterRules) {
  const std::vector<Rule> rules = {
      {"bad param kind", [](Call& c) { c.kind = 2; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "param_kind = 2"},
      {"scale inside y", [](Call& c) { c.scale_p = c.y.data() + 4; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "scale overlaps the output y"},
      {"shift inside y", [](Call& c) { c.shift_p = c.y.data(); }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "shift overlaps the output y"},
  };
  for (const Rule& rule : rules) {
    ExpectRejected(rule, [](Call& c) {
      return normkit_affine(nullptr, &c.xt, c.scale_p, c.shift_p, c.kind, &c.yt);
    });
  }
  {
    Call c;
    EXPECT_EQ(normkit_affine(nullptr, nullptr, c.scale_p, c.shift_p, c.kind, &c.yt),
              NORMKIT_ERROR_INVALID_ARGUMENT);
    EXPECT_STREQ(normkit_last_error(), "affine: x is NULL");
    EXPECT_EQ(normkit_affine(nullptr, &c.xt, c.scale_p, c.shift_p, c.kind, nullptr),
              NORMKIT_ERROR_INVALID_ARGUMENT);
    EXPECT_STREQ(normkit_last_error(), "affine: y is NULL");
  }
}

TEST(Validation, BatchNormParameterRules) {
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  const std::vector<Rule> rules = {
      {"eps zero", [](Call& c) { c.eps = 0.0f; }, NORMKIT_ERROR_INVALID_ARGUMENT, "eps = 0"},
      {"eps negative", [](Call& c) { c.eps = -1e-5f; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "eps = -1e-05"},
      {"eps nan", [nan](Call& c) { c.eps = nan; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "must be finite"},
      {"eps inf", [inf](Call& c) { c.eps = inf; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "must be finite"},
      {"negative var", [](Call& c) { c.var[2] = -0.5f; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "running_var[2] = -0.5"},
      {"nan var", [nan](Call& c) { c.var[1] = nan; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "running_var[1]"},
      {"null mean",
       [](Call& c) {
         c.mean.clear();
         c.mean.shrink_to_fit();
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "running_mean is NULL"},
  };
  for (const Rule& rule : rules) {
    ExpectRejected(rule, [](Call& c) {
      return normkit_batch_norm_inference(nullptr, &c.xt, c.scale_p, c.shift_p,
                                          c.mean.empty() ? nullptr : c.mean.data(), c.var.data(),
                                          c.eps, &c.yt);
    });
  }
}

TEST(Validation, FoldRules) {
  std::vector<float> gamma(4, 1.0f), beta(4, 0.0f), mean(4, 0.0f), var(4, 1.0f);
  std::vector<float> scale(4, kSentinel), shift(4, kSentinel);
  EXPECT_EQ(normkit_batch_norm_fold(0, gamma.data(), beta.data(), mean.data(), var.data(), 1e-5f,
                                    scale.data(), shift.data()),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(normkit_last_error(), "batch_norm_fold: channels = 0, must be >= 1");
  EXPECT_EQ(normkit_batch_norm_fold(4, gamma.data(), beta.data(), mean.data(), var.data(), 1e-5f,
                                    scale.data(), scale.data() + 1),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(normkit_last_error()).find("scale overlaps shift"), std::string::npos);
  EXPECT_EQ(normkit_batch_norm_fold(4, gamma.data(), beta.data(), mean.data(), var.data(), 1e-5f,
                                    scale.data(), nullptr),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(normkit_last_error(), "batch_norm_fold: shift is NULL");
  EXPECT_EQ(scale, std::vector<float>(4, kSentinel));

  std::vector<float> w(4 * 6 * 9, kSentinel), fb(6, kSentinel);
  const std::vector<float> w0 = w, fb0 = fb;
  std::vector<float> g6(6, 1.0f), b6(6, 0.0f), m6(6, 0.0f), v6(6, 1.0f);
  const auto conv = [&](int64_t O, int64_t I, int64_t G, int64_t K, int32_t order, float* folded,
                        float eps) {
    return normkit_fold_batch_norm_into_conv(w.data(), O, I, G, K, order, nullptr, folded,
                                             g6.data(), b6.data(), m6.data(), v6.data(), eps);
  };
  EXPECT_EQ(conv(6, 4, 3, 9, NORMKIT_CONV_WEIGHT_OIHW, fb.data(), 1e-5f),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(normkit_last_error()).find("groups = 3 must divide"), std::string::npos);
  EXPECT_EQ(conv(6, 4, 1, 0, NORMKIT_CONV_WEIGHT_OIHW, fb.data(), 1e-5f),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(normkit_last_error()).find("kernel_elems = 0"), std::string::npos);
  EXPECT_EQ(conv(6, 4, 1, 9, 3, fb.data(), 1e-5f), NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(normkit_last_error()).find("weight_order = 3"), std::string::npos);
  EXPECT_EQ(conv(6, 4, 1, 9, NORMKIT_CONV_WEIGHT_OIHW, w.data() + 10, 1e-5f),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(normkit_last_error()).find("weight overlaps folded_bias"),
            std::string::npos);
  EXPECT_EQ(conv(6, 4, 1, 9, NORMKIT_CONV_WEIGHT_OIHW, fb.data(), -1.0f),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(
      conv(int64_t{1} << 40, int64_t{1} << 40, 1, 9, NORMKIT_CONV_WEIGHT_OIHW, fb.data(), 1e-5f),
      NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(normkit_last_error()).find("overflows"), std::string::npos);
  EXPECT_EQ(w, w0);
  EXPECT_EQ(fb, fb0);
}

// Group norm and its forms, layer norm and RMS norm: every tensor rule, then their own.
TEST(Validation, NormTensorRules) {
  for (const Rule& rule : TensorRules()) {
    ExpectRejected(rule, [](Call& c) {
      return normkit_group_norm(nullptr, &c.xt, c.groups, c.scale_p, c.shift_p, c.eps, c.activation,
                                &c.yt, c.mean_out, c.rstd_out);
    });
  }
}

TEST(Validation, GroupNormRules) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Rule> rules = {
      {"groups not dividing C", [](Call& c) { c.groups = 2; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "group_norm: C=3 is not divisible by groups=2"},
      {"groups zero", [](Call& c) { c.groups = 0; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "groups = 0, must be >= 1"},
      {"groups negative", [](Call& c) { c.groups = -3; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "groups = -3"},
      {"eps NaN", [&](Call& c) { c.eps = nan; }, NORMKIT_ERROR_INVALID_ARGUMENT, "eps = nan"},
      {"eps negative", [](Call& c) { c.eps = -1.0f; }, NORMKIT_ERROR_INVALID_ARGUMENT, "eps = -1"},
      {"bad activation", [](Call& c) { c.activation = 9; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "activation = 9 is not a normkit_activation"},
      {"gamma inside y", [](Call& c) { c.scale_p = c.y.data() + 1; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "gamma overlaps the output y"},
      {"mean_out inside y", [](Call& c) { c.mean_out = c.y.data() + 10; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "mean_out overlaps the output y"},
      {"rstd_out inside x", [](Call& c) { c.rstd_out = c.x.data() + 3; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "rstd_out overlaps the input x"},
      {"rstd_out overlapping mean_out", [](Call& c) { c.rstd_out = c.stats.data() + 2; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "mean_out overlaps rstd_out"},
      {"mean_out overlapping beta", [](Call& c) { c.mean_out = c.shift.data(); },
       NORMKIT_ERROR_INVALID_ARGUMENT, "mean_out overlaps beta"},
  };
  for (const Rule& rule : rules) {
    ExpectRejected(rule, [](Call& c) {
      const std::vector<float> stats_before = c.stats;
      const normkit_status st =
          normkit_group_norm(nullptr, &c.xt, c.groups, c.scale_p, c.shift_p, c.eps, c.activation,
                             &c.yt, c.mean_out, c.rstd_out);
      EXPECT_EQ(c.stats, stats_before) << "rejected call wrote statistics";
      return st;
    });
  }
  {
    Call c;
    EXPECT_EQ(
        normkit_instance_norm(nullptr, &c.xt, nullptr, nullptr, 1e-5f, 3, &c.yt, nullptr, nullptr),
        NORMKIT_ERROR_INVALID_ARGUMENT);
    EXPECT_STREQ(normkit_last_error(), "instance_norm: activation = 3 is not a normkit_activation");
    EXPECT_EQ(normkit_channel_layer_norm(nullptr, &c.xt, nullptr, nullptr, 0.0f, 0, &c.yt, nullptr,
                                         nullptr),
              NORMKIT_ERROR_INVALID_ARGUMENT);
    EXPECT_STREQ(normkit_last_error(), "channel_layer_norm: eps = 0, must be finite and > 0");
  }
}

TEST(Validation, RowNormRules) {
  Call c;  // rank 4: the row forms want rank 2
  const std::vector<float> y_before = c.y;
  EXPECT_EQ(normkit_layer_norm(nullptr, &c.xt, nullptr, nullptr, 1e-5f, &c.yt, nullptr, nullptr),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(normkit_last_error()).find("layer_norm: x->rank = 4, expected 2"),
            std::string::npos);
  EXPECT_EQ(normkit_rms_norm(nullptr, &c.xt, nullptr, 1e-5f, &c.yt, nullptr),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(c.y, y_before);
  normkit_tensor x2 = Desc(c.x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {6, 20});
  normkit_tensor y2 = Desc(c.y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {6, 20});
  EXPECT_EQ(normkit_rms_norm(nullptr, &x2, c.y.data() + 5, 1e-5f, &y2, nullptr),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(normkit_last_error(), "rms_norm: gamma overlaps the output y");
  EXPECT_EQ(normkit_layer_norm(nullptr, &x2, nullptr, nullptr, 1e-5f, &y2, c.stats.data(),
                               c.stats.data()),
            NORMKIT_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(c.y, y_before);
  EXPECT_EQ(normkit_layer_norm(nullptr, &x2, nullptr, nullptr, 1e-5f, &y2, c.stats.data(),
                               c.stats.data() + 6),
            NORMKIT_SUCCESS);
}

TEST(Validation, StatusStrings) {
  EXPECT_STREQ(normkit_status_string(NORMKIT_SUCCESS), "success");
  EXPECT_STREQ(normkit_status_string(NORMKIT_ERROR_INVALID_ARGUMENT), "invalid argument");
  EXPECT_STREQ(normkit_status_string(static_cast<normkit_status>(42)), "unknown status");
}

}  // namespace
}  // namespace normkit_test
