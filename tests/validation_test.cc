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

// The rules of every op's tensors; storage_pairs: the op runs float32, bfloat16 and
// float16 in the pairs normkit allows (affine, batch norm, the norms), else float32 alone.
std::vector<Rule> TensorRules(bool storage_pairs = false) {
  std::vector<Rule> rules = {
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

      {"bad layout", [](Call& c) { c.yt.layout = 7; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "y->layout = 7"},
      {"layout mismatch", [](Call& c) { c.yt.layout = NORMKIT_LAYOUT_CHANNELS_LAST; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "differs from x->layout"},

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
  if (!storage_pairs) {
    rules.push_back({"unsupported dtype",
                     [](Call& c) {
                       c.xt.dtype = NORMKIT_DTYPE_FLOAT16;
                       c.yt.dtype = NORMKIT_DTYPE_FLOAT16;
                     },
                     NORMKIT_ERROR_UNSUPPORTED, "float16 is not supported"});
    rules.push_back({"dtype mismatch", [](Call& c) { c.yt.dtype = NORMKIT_DTYPE_FLOAT64; },
                     NORMKIT_ERROR_INVALID_ARGUMENT, "differs from x->dtype"});
    return rules;
  }
  rules.push_back({"unsupported dtype",
                   [](Call& c) {
                     c.xt.dtype = NORMKIT_DTYPE_FLOAT64;
                     c.yt.dtype = NORMKIT_DTYPE_FLOAT64;
                     c.xt.shape[3] = 2;  // the same bytes as float32's 2x3x4x5
                     c.yt.shape[3] = 2;
                   },
                   NORMKIT_ERROR_UNSUPPORTED,
                   "x->dtype = float64 is not supported (float32, bfloat16 or float16)"});
  rules.push_back({"float64 y",
                   [](Call& c) {
                     c.yt.dtype = NORMKIT_DTYPE_FLOAT64;
                     c.xt.shape[3] = 2;
                     c.yt.shape[3] = 2;
                   },
                   NORMKIT_ERROR_UNSUPPORTED, "y->dtype = float64 is not supported"});
  rules.push_back({"two half dtypes",
                   [](Call& c) {
                     c.xt.dtype = NORMKIT_DTYPE_BFLOAT16;
                     c.yt.dtype = NORMKIT_DTYPE_FLOAT16;
                   },
                   NORMKIT_ERROR_UNSUPPORTED,
                   "y->dtype = float16 with x->dtype = bfloat16 is not supported"});
  rules.push_back({"in place with two dtypes",
                   [](Call& c) {
                     c.yt.data = c.x.data();
                     c.yt.dtype = NORMKIT_DTYPE_BFLOAT16;
                   },
                   NORMKIT_ERROR_INVALID_ARGUMENT, "in place needs one dtype"});
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
  for (const Rule& rule : TensorRules(/*storage_pairs=*/true)) {
    ExpectRejected(rule, [](Call& c) {
      return normkit_affine(nullptr, &c.xt, c.scale_p, c.shift_p, c.kind, &c.yt);
    });
  }
}

TEST(Validation, BatchNormTensorRules) {
  for (const Rule& rule : TensorRules(/*storage_pairs=*/true)) {
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
  for (const Rule& rule : TensorRules(/*storage_pairs=*/true)) {
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
      // mean_out's 6 floats must lie inside beta's buffer: past its end they could reach
      // gamma's allocation (under TSan's allocator they did, and named gamma instead).
      {"mean_out overlapping beta",
       [](Call& c) {
         c.shift.assign(8, 0.5f);
         c.shift_p = c.shift.data();
         c.mean_out = c.shift.data() + 1;
       },
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

// Shift-sum: x [2, 3, 4, 5], step 2 along W, so W' = 9 and y [2, 1, 4, 9]; an [H, W] mask.
struct ShiftCall {
  std::vector<float> x = RandomVector(2 * 3 * 4 * 5, 2);
  std::vector<float> y = RandomVector(2 * 4 * 9, 3);
  std::vector<float> mask = RandomVector(4 * 5, 4, 0.0f, 1.0f);
  std::vector<float> normalizer = std::vector<float>(4 * 9, 1.0f);
  std::vector<float> xs = std::vector<float>(2 * 3 * 4 * 9, kSentinel);  // shifted stack
  std::vector<float> phi_s = std::vector<float>(4 * 9, kSentinel);
  normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {2, 3, 4, 5});
  normkit_tensor yt = Desc(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {2, 1, 4, 9});
  normkit_tensor xst = Desc(xs.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {2, 3, 4, 9});
  normkit_shift_sum_params params = Params(this);
  const normkit_shift_sum_params* params_p = &params;
  int32_t pinv_mode = NORMKIT_PINV_MOORE_PENROSE;
  const float* normalizer_p = normalizer.data();
  float* phi_s_p = phi_s.data();
  double lambda = 0.5, gamma = 0.1;

  static normkit_shift_sum_params Params(ShiftCall* c) {
    normkit_shift_sum_params p;
    normkit_shift_sum_params_init(&p, 2);
    p.mask_kind = NORMKIT_MASK_HW;
    p.mask = c->mask.data();
    return p;
  }
};

struct ShiftRule {
  const char* name;
  std::function<void(ShiftCall&)> breaks;
  normkit_status status;
  const char* message;
};

using ShiftOp = std::function<normkit_status(ShiftCall&)>;

// Every shift-sum entry point, by name.
const std::vector<std::pair<const char*, ShiftOp>>& ShiftOps() {
  static const std::vector<std::pair<const char*, ShiftOp>> ops = {
      {"shift_sum",
       [](ShiftCall& c) { return normkit_shift_sum(nullptr, &c.xt, c.params_p, &c.yt); }},
      {"shift_sum_adjoint",
       [](ShiftCall& c) { return normkit_shift_sum_adjoint(nullptr, &c.yt, c.params_p, &c.xt); }},
      {"shift_sum_pinv",
       [](ShiftCall& c) {
         return normkit_shift_sum_pinv(nullptr, &c.yt, c.params_p, c.pinv_mode, c.normalizer_p,
                                       &c.xt);
       }},
      {"shift_sum_gap_step",
       [](ShiftCall& c) {
         return normkit_shift_sum_gap_step(nullptr, &c.xt, &c.yt, c.params_p, c.lambda, c.gamma,
                                           c.normalizer_p);
       }},
      {"shift_sum_normalizer",
       [](ShiftCall& c) {
         return normkit_shift_sum_normalizer(nullptr, &c.xt, c.params_p, c.phi_s_p);
       }},
      {"shift", [](ShiftCall& c) { return normkit_shift(nullptr, &c.xt, c.params_p, &c.xst); }},
      {"unshift", [](ShiftCall& c) { return normkit_unshift(nullptr, &c.xst, c.params_p, &c.xt); }},
  };
  return ops;
}

// Runs the broken call and checks status, message, and that no buffer changed.
void ExpectShiftRejected(const char* op_name, const ShiftOp& op, const ShiftRule& rule) {
  SCOPED_TRACE(std::string(op_name) + ": " + rule.name);
  ShiftCall call;
  rule.breaks(call);
  const ShiftCall before = call;
  EXPECT_EQ(op(call), rule.status) << normkit_last_error();
  const std::string message = normkit_last_error();
  EXPECT_NE(message.find(std::string(op_name) + ": "), std::string::npos) << message;
  EXPECT_NE(message.find(rule.message), std::string::npos) << "message: " << message;
  EXPECT_EQ(call.x, before.x) << "rejected call wrote into x";
  EXPECT_EQ(call.y, before.y) << "rejected call wrote into y";
  EXPECT_EQ(call.xs, before.xs) << "rejected call wrote into xs";
  EXPECT_EQ(call.phi_s, before.phi_s) << "rejected call wrote into phi_s";
}

TEST(Validation, ShiftSumUnbrokenCallsSucceed) {
  for (const auto& [name, op] : ShiftOps()) {
    ShiftCall call;
    EXPECT_EQ(op(call), NORMKIT_SUCCESS) << name << ": " << normkit_last_error();
  }
}

// Rules on params and x, which every shift-sum entry point checks first.
TEST(Validation, ShiftSumParamsAndXRules) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<ShiftRule> rules = {
      {"params NULL", [](ShiftCall& c) { c.params_p = nullptr; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "params is NULL"},
      {"params->struct_size too small", [](ShiftCall& c) { c.params.struct_size = 8; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "params->struct_size = 8"},
      {"bad axis", [](ShiftCall& c) { c.params.axis = 5; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "params->axis = 5 is not a normkit_shift_axis"},
      {"bad mask kind", [](ShiftCall& c) { c.params.mask_kind = 9; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "params->mask_kind = 9"},
      {"mask without a kind", [](ShiftCall& c) { c.params.mask_kind = NORMKIT_MASK_NONE; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "params->mask is set but params->mask_kind is NONE"},
      {"kind without a mask", [](ShiftCall& c) { c.params.mask = nullptr; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "params->mask is NULL but"},
      {"scale zero", [](ShiftCall& c) { c.params.scale = 0.0; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "params->scale = 0"},
      {"scale NaN", [&](ShiftCall& c) { c.params.scale = nan; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "params->scale = nan"},
      {"x NULL data", [](ShiftCall& c) { c.xt.data = nullptr; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "x->data is NULL"},
      {"x rank 3",
       [](ShiftCall& c) {
         c.xt.rank = 3;
         c.xt.shape[2] = 20;
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "x->rank = 3, expected 4"},
      {"x not a dtype", [](ShiftCall& c) { c.xt.dtype = 9; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "x->dtype = 9 is not a normkit_dtype"},
      {"step overflowing the shifted width", [](ShiftCall& c) { c.params.step = int64_t{1} << 62; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "makes the shifted sizes overflow"},
      // y [1, 1, 1, 2^61 + 5] times C = 3 is 6.9e18 elements, which fit int64; the bytes do not.
      {"step overflowing the shifted bytes",
       [](ShiftCall& c) {
         c.xt.shape[0] = 1;
         c.xt.shape[2] = 1;
         c.params.step = int64_t{1} << 60;
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "makes the shifted sizes overflow"},
      {"step INT64_MIN", [](ShiftCall& c) { c.params.step = std::numeric_limits<int64_t>::min(); },
       NORMKIT_ERROR_INVALID_ARGUMENT, "makes the shifted sizes overflow"},
  };
  for (const auto& [name, op] : ShiftOps()) {
    for (const ShiftRule& rule : rules) {
      // The normalizer's x only gives a shape: NULL data is fine there (ApiEdges tests it).
      if (std::string(name) == "shift_sum_normalizer" && std::string(rule.name) == "x NULL data") {
        continue;
      }
      ExpectShiftRejected(name, op, rule);
    }
  }
}

// Rules on y, and on what may overlap the output, for A, A^T, pinv and the GAP step.
TEST(Validation, ShiftSumOperatorRules) {
  const std::vector<ShiftRule> rules = {
      {"y without the shifted width", [](ShiftCall& c) { c.yt.shape[3] = 5; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "y must be [B, 1, H', W'] = [2, 1, 4, 9]"},
      {"y with C channels", [](ShiftCall& c) { c.yt.shape[1] = 3; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "y must be [B, 1, H', W']"},
      {"y rank 3 channels-last",
       [](ShiftCall& c) {
         c.yt.rank = 3;
         c.yt.shape[0] = 2, c.yt.shape[1] = 4, c.yt.shape[2] = 9;
         c.yt.layout = NORMKIT_LAYOUT_CHANNELS_LAST;
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "y must be [B, 1, H', W']"},
      {"y float64", [](ShiftCall& c) { c.yt.dtype = NORMKIT_DTYPE_FLOAT64; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "y->dtype = float64 differs from x->dtype = float32"},
      {"y bfloat16 with x float64",
       [](ShiftCall& c) {
         c.xt.dtype = NORMKIT_DTYPE_FLOAT64;
         c.xt.shape[3] /= 2;  // the same bytes
         c.yt.dtype = NORMKIT_DTYPE_BFLOAT16;
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "y->dtype = bfloat16 differs from x->dtype = float64"},
      {"y bfloat16 with x float16",
       [](ShiftCall& c) {
         c.xt.dtype = NORMKIT_DTYPE_FLOAT16;
         c.yt.dtype = NORMKIT_DTYPE_BFLOAT16;
       },
       NORMKIT_ERROR_UNSUPPORTED,
       "y->dtype = bfloat16 with x->dtype = float16 is not supported (the same dtype, or one of "
       "them float32)"},
      {"mask off float alignment with half tensors",
       [](ShiftCall& c) {
         c.xt.dtype = NORMKIT_DTYPE_BFLOAT16;
         c.yt.dtype = NORMKIT_DTYPE_BFLOAT16;
         c.params.mask_kind = NORMKIT_MASK_HW;
         c.params.mask = reinterpret_cast<const char*>(c.mask.data()) + 2;
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "params->mask"},
      {"y NULL data", [](ShiftCall& c) { c.yt.data = nullptr; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "y->data is NULL"},
      {"y inside x", [](ShiftCall& c) { c.yt.data = c.x.data() + 8; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "x overlaps y"},
      {"x and y on different devices", [](ShiftCall& c) { c.yt.device = NORMKIT_DEVICE_CUDA; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "must live on one device"},
  };
  for (const auto& [name, op] : ShiftOps()) {
    if (std::string(name) == "shift_sum_normalizer" || std::string(name) == "shift" ||
        std::string(name) == "unshift") {
      continue;
    }
    for (const ShiftRule& rule : rules) ExpectShiftRejected(name, op, rule);
  }
  const ShiftOp* forward = &ShiftOps()[0].second;
  ExpectShiftRejected("shift_sum", *forward,
                      {"mask inside y", [](ShiftCall& c) { c.params.mask = c.y.data() + 1; },
                       NORMKIT_ERROR_INVALID_ARGUMENT, "params->mask overlaps the output y"});
  for (int i = 1; i <= 3; ++i) {  // the ops that write x
    ExpectShiftRejected(ShiftOps()[i].first, ShiftOps()[i].second,
                        {"mask inside x", [](ShiftCall& c) { c.params.mask = c.x.data() + 100; },
                         NORMKIT_ERROR_INVALID_ARGUMENT, "params->mask overlaps the output x"});
  }
  for (int i = 2; i <= 3; ++i) {  // pinv and the GAP step take a normalizer
    ExpectShiftRejected(ShiftOps()[i].first, ShiftOps()[i].second,
                        {"normalizer inside x", [](ShiftCall& c) { c.normalizer_p = c.x.data(); },
                         NORMKIT_ERROR_INVALID_ARGUMENT, "normalizer overlaps the output x"});
  }
  ExpectShiftRejected("shift_sum_pinv", ShiftOps()[2].second,
                      {"bad pinv mode", [](ShiftCall& c) { c.pinv_mode = 7; },
                       NORMKIT_ERROR_INVALID_ARGUMENT, "mode = 7 is not a normkit_pinv_mode"});
  const double inf = std::numeric_limits<double>::infinity();
  ExpectShiftRejected(
      "shift_sum_gap_step", ShiftOps()[3].second,
      {"lambda infinite", [&](ShiftCall& c) { c.lambda = inf; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "lambda = inf and gamma = 0.1 must be finite"});
  ExpectShiftRejected("shift_sum_gap_step", ShiftOps()[3].second,
                      {"gamma NaN", [&](ShiftCall& c) { c.gamma = std::nan(""); },
                       NORMKIT_ERROR_INVALID_ARGUMENT, "must be finite"});
}

TEST(Validation, ShiftSumNormalizerAndStackRules) {
  const ShiftOp& normalizer = ShiftOps()[4].second;
  ExpectShiftRejected("shift_sum_normalizer", normalizer,
                      {"phi_s NULL", [](ShiftCall& c) { c.phi_s_p = nullptr; },
                       NORMKIT_ERROR_INVALID_ARGUMENT, "phi_s is NULL"});
  ExpectShiftRejected(
      "shift_sum_normalizer", normalizer,
      {"mask inside phi_s", [](ShiftCall& c) { c.params.mask = c.phi_s.data() + 3; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "params->mask overlaps the output phi_s"});
  const std::vector<ShiftRule> stack_rules = {
      {"xs without the shifted width", [](ShiftCall& c) { c.xst.shape[3] = 5; },
       NORMKIT_ERROR_INVALID_ARGUMENT,
       "xs must be x's layout with shape [B, C, H', W'] = "
       "[2, 3, 4, 9]"},
      {"xs in the other layout", [](ShiftCall& c) { c.xst.layout = NORMKIT_LAYOUT_CHANNELS_LAST; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "xs must be x's layout"},
      {"xs float16 with x bfloat16",
       [](ShiftCall& c) {
         c.xt.dtype = NORMKIT_DTYPE_BFLOAT16;
         c.xst.dtype = NORMKIT_DTYPE_FLOAT16;
       },
       NORMKIT_ERROR_UNSUPPORTED, "xs->dtype = float16 with x->dtype = bfloat16 is not supported"},
      {"xs float64 with x float32", [](ShiftCall& c) { c.xst.dtype = NORMKIT_DTYPE_FLOAT64; },
       NORMKIT_ERROR_INVALID_ARGUMENT, "xs->dtype = float64 differs from x->dtype = float32"},
      {"xs NULL data", [](ShiftCall& c) { c.xst.data = nullptr; }, NORMKIT_ERROR_INVALID_ARGUMENT,
       "xs->data is NULL"},
      {"xs over x",
       [](ShiftCall& c) {
         c.xs = std::vector<float>(2 * 3 * 4 * 9 + 120, kSentinel);
         c.xst.data = c.xs.data();
         c.xt.data = c.xs.data() + 100;
       },
       NORMKIT_ERROR_INVALID_ARGUMENT, "x overlaps xs"},
  };
  for (int i = 5; i <= 6; ++i) {
    for (const ShiftRule& rule : stack_rules) {
      ExpectShiftRejected(ShiftOps()[i].first, ShiftOps()[i].second, rule);
    }
  }
}

TEST(Validation, StatusStrings) {
  EXPECT_STREQ(normkit_status_string(NORMKIT_SUCCESS), "success");
  EXPECT_STREQ(normkit_status_string(NORMKIT_ERROR_INVALID_ARGUMENT), "invalid argument");
  EXPECT_STREQ(normkit_status_string(static_cast<normkit_status>(42)), "unknown status");
}

}  // namespace
}  // namespace normkit_test
