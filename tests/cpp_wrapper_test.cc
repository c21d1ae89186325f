// SPDX-License-Identifier: Apache-2.0
// The C++ wrapper: views with shapes known only at run time, const inputs, float64, half
// tensors, and the shift-sum functions, each giving the C API's result; errors as
// normkit::Error.
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "normkit/normkit.hpp"
#include "test_util.h"

namespace normkit_test {
namespace {

TEST(CppWrapper, RuntimeShapesAndConstInputs) {
  const std::vector<int64_t> shape = {2, 6, 5, 7};  // known at run time
  const std::vector<long> long_shape(shape.begin(), shape.end());
  const std::array<int, 4> int_shape = {2, 6, 5, 7};
  const std::vector<float> x = RandomVector(Numel(shape), 1);
  std::vector<float> want(x.size()), a(x.size()), b(x.size());
  normkit_tensor xt = Desc(const_cast<float*>(x.data()), NORMKIT_LAYOUT_CHANNELS_LAST, shape);
  normkit_tensor wt = Desc(want.data(), NORMKIT_LAYOUT_CHANNELS_LAST, shape);
  ASSERT_EQ(normkit_group_norm(nullptr, &xt, 3, nullptr, nullptr, 1e-5f, NORMKIT_ACTIVATION_SILU,
                               &wt, nullptr, nullptr),
            NORMKIT_SUCCESS);
  const float* cx = x.data();  // a const input
  normkit::GroupNorm(
      normkit::Tensor(cx, long_shape, normkit::Layout::kChannelsLast), 3, nullptr, nullptr, 1e-5f,
      normkit::Tensor(a.data(), shape, normkit::Layout::kChannelsLast), NORMKIT_ACTIVATION_SILU);
  normkit::GroupNorm(normkit::Tensor(cx, int_shape, normkit::Layout::kChannelsLast), 3, nullptr,
                     nullptr, 1e-5f,
                     normkit::Tensor(b.data(), int_shape, normkit::Layout::kChannelsLast),
                     NORMKIT_ACTIVATION_SILU);
  EXPECT_EQ(a, want);
  EXPECT_EQ(b, want);
}

TEST(CppWrapper, ErrorsCarryTheStatusAndMessage) {
  std::vector<float> x(30);
  const std::vector<int64_t> shape = {1, 6, 5};
  try {
    normkit::GroupNorm(normkit::Tensor(x.data(), shape), 4, nullptr, nullptr, 1e-5f,
                       normkit::Tensor(x.data(), shape));
    FAIL() << "no exception";
  } catch (const normkit::Error& e) {
    EXPECT_EQ(e.status(), NORMKIT_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("groups"), std::string::npos) << e.what();
  }
  EXPECT_THROW(normkit::Tensor(x.data(), std::vector<int64_t>{1, 2, 3, 4, 5, 6}), normkit::Error);
}

// Half tensors through the wrapper (Tensor(Dtype, data, shape)): batch norm training's
// forward and backward in bfloat16, bitwise the C API's; an element size unlike the
// dtype's throws.
TEST(CppWrapper, HalfTensorsNameTheirDtype) {
  const std::vector<int64_t> shape = {4, 6, 5, 7};
  const int64_t n = Numel(shape);
  std::vector<uint16_t> x(static_cast<size_t>(n)), dy(x.size());
  const std::vector<float> xs = RandomVector(n, 3), dys = RandomVector(n, 4);
  for (size_t i = 0; i < x.size(); ++i) {  // the top halves: bfloat16 values (truncated)
    uint32_t u, v;
    std::memcpy(&u, &xs[i], 4);
    std::memcpy(&v, &dys[i], 4);
    x[i] = static_cast<uint16_t>(u >> 16);
    dy[i] = static_cast<uint16_t>(v >> 16);
  }
  const auto layout = normkit::Layout::kChannelsLast;
  std::vector<uint16_t> y(x.size()), want_y(x.size()), dx(x.size()), want_dx(x.size());
  std::vector<float> sm(6), sr(6), want_sm(6), want_sr(6), gg(6), gb(6), want_gg(6), want_gb(6);
  normkit_tensor xt = Desc(x.data(), NORMKIT_LAYOUT_CHANNELS_LAST, shape);
  normkit_tensor yt = Desc(want_y.data(), NORMKIT_LAYOUT_CHANNELS_LAST, shape);
  normkit_tensor dyt = Desc(dy.data(), NORMKIT_LAYOUT_CHANNELS_LAST, shape);
  normkit_tensor dxt = Desc(want_dx.data(), NORMKIT_LAYOUT_CHANNELS_LAST, shape);
  for (auto* t : {&xt, &yt, &dyt, &dxt}) t->dtype = NORMKIT_DTYPE_BFLOAT16;
  ASSERT_EQ(normkit_batch_norm_training(nullptr, &xt, nullptr, nullptr, 1e-5f, 0.1f, nullptr,
                                        nullptr, &yt, want_sm.data(), want_sr.data()),
            NORMKIT_SUCCESS);
  ASSERT_EQ(normkit_batch_norm_training_backward(nullptr, &xt, &dyt, want_sm.data(), want_sr.data(),
                                                 nullptr, &dxt, want_gg.data(), want_gb.data()),
            NORMKIT_SUCCESS);
  const auto bf16 = normkit::Dtype::kBFloat16;
  const uint16_t* cx = x.data();  // a const input
  normkit::BatchNormTraining(normkit::Tensor(bf16, cx, shape, layout), nullptr, nullptr, 1e-5f,
                             0.1f, nullptr, nullptr, normkit::Tensor(bf16, y.data(), shape, layout),
                             sm.data(), sr.data());
  const normkit::Tensor dxv(bf16, dx.data(), shape, layout);
  normkit::BatchNormTrainingBackward(
      normkit::Tensor(bf16, cx, shape, layout),
      normkit::Tensor(bf16, static_cast<const void*>(dy.data()), shape, layout), sm.data(),
      sr.data(), nullptr, &dxv, gg.data(), gb.data());
  EXPECT_EQ(y, want_y);
  EXPECT_EQ(dx, want_dx);
  EXPECT_EQ(sm, want_sm);
  EXPECT_EQ(gg, want_gg);
  EXPECT_EQ(gb, want_gb);
  EXPECT_THROW(normkit::Tensor(normkit::Dtype::kFloat16, xs.data(), shape), normkit::Error);
}

TEST(CppWrapper, ShiftSumFamilyMatchesTheCApi) {
  const int64_t B = 2, C = 3, H = 4, W = 5, S = 2, Wo = W + (C - 1) * S;
  const std::vector<int64_t> xs = {B, C, H, W}, ys = {B, 1, H, Wo};
  std::vector<double> x(B * C * H * W), mask(H * W);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3 * static_cast<double>(i));
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = (i % 3) ? 1.0 : 0.5;
  const normkit::ShiftSumParams params =
      normkit::ShiftSumParams(S).Scale(0.5).Mask(NORMKIT_MASK_HW, mask.data());
  normkit_shift_sum_params cp;
  normkit_shift_sum_params_init(&cp, S);
  cp.scale = 0.5;
  cp.mask_kind = NORMKIT_MASK_HW;
  cp.mask = mask.data();
  const double* cx = x.data();
  std::vector<double> y(B * H * Wo), want_y(y.size());
  normkit::ShiftSum(normkit::Tensor(cx, xs), params, normkit::Tensor(y.data(), ys));
  normkit_tensor xt, yt;
  normkit_tensor_init(&xt, x.data(), NORMKIT_DTYPE_FLOAT64, NORMKIT_LAYOUT_CHANNELS_FIRST, 4,
                      xs.data());
  normkit_tensor_init(&yt, want_y.data(), NORMKIT_DTYPE_FLOAT64, NORMKIT_LAYOUT_CHANNELS_FIRST, 4,
                      ys.data());
  ASSERT_EQ(normkit_shift_sum(nullptr, &xt, &cp, &yt), NORMKIT_SUCCESS);
  EXPECT_EQ(y, want_y);

  std::vector<double> adj(x.size()), pinv(x.size()), want_pinv(x.size()), phi(H * Wo);
  normkit::ShiftSumAdjoint(normkit::Tensor(y.data(), ys), params, normkit::Tensor(adj.data(), xs));
  normkit::ShiftSumNormalizer(normkit::Tensor(static_cast<double*>(nullptr), xs), params,
                              phi.data());
  normkit::ShiftSumPinv(normkit::Tensor(y.data(), ys), params, normkit::Tensor(pinv.data(), xs),
                        NORMKIT_PINV_MOORE_PENROSE, phi.data());
  normkit_tensor pt;
  normkit_tensor_init(&pt, want_pinv.data(), NORMKIT_DTYPE_FLOAT64, NORMKIT_LAYOUT_CHANNELS_FIRST,
                      4, xs.data());
  normkit_tensor_init(&yt, y.data(), NORMKIT_DTYPE_FLOAT64, NORMKIT_LAYOUT_CHANNELS_FIRST, 4,
                      ys.data());
  ASSERT_EQ(normkit_shift_sum_pinv(nullptr, &yt, &cp, NORMKIT_PINV_MOORE_PENROSE, nullptr, &pt),
            NORMKIT_SUCCESS);
  EXPECT_EQ(pinv, want_pinv);
  // <A x, y> = <x, A^T y> with y = A x: the adjoint is wired to the adjoint.
  double ax_y = 0, x_aty = 0;
  for (size_t i = 0; i < y.size(); ++i) ax_y += y[i] * y[i];
  for (size_t i = 0; i < x.size(); ++i) x_aty += x[i] * adj[i];
  EXPECT_NEAR(ax_y, x_aty, 1e-12 * ax_y);

  std::vector<double> step(x.size(), 0.0);
  normkit::ShiftSumGapStep(normkit::Tensor(step.data(), xs), normkit::Tensor(y.data(), ys), params,
                           1.0, 0.0);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(step[i], pinv[i], 1e-12) << i;

  std::vector<double> stacked(B * C * H * Wo), back(x.size());
  normkit::Shift(normkit::Tensor(cx, xs), params, normkit::Tensor(stacked.data(), {B, C, H, Wo}));
  normkit::Unshift(normkit::Tensor(stacked.data(), {B, C, H, Wo}), params,
                   normkit::Tensor(back.data(), xs));
  EXPECT_EQ(back, x);
}

}  // namespace
}  // namespace normkit_test
