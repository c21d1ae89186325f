// SPDX-License-Identifier: Apache-2.0
// C++ caller through normkit.hpp: per-sample affine (seed 000's N x C parameters),
// scale only (seed 004), folding BN into a linear layer, and an exception on bad input.
#include <cmath>
#include <cstdio>
#include <vector>

#include "normkit/normkit.hpp"

int main() {
  const int64_t N = 2, C = 4, H = 3, W = 5, count = N * C * H * W;
  std::vector<float> x(count), y(count);
  for (int64_t i = 0; i < count; ++i) x[i] = std::sin(0.1f * static_cast<float>(i));
  std::vector<float> w(N * C), b(N * C);
  for (int64_t i = 0; i < N * C; ++i) {
    w[i] = 1.0f + 0.25f * static_cast<float>(i);
    b[i] = -0.5f * static_cast<float>(i);
  }
  int failures = 0;
  const auto expect = [&](bool ok, const char* what) {
    std::printf("%s: %s\n", what, ok ? "ok" : "FAILED");
    failures += ok ? 0 : 1;
  };

  normkit::Context ctx(2);
  const normkit::Tensor xt(x.data(), {N, C, H, W}, normkit::Layout::kChannelsLast);
  const normkit::Tensor yt(y.data(), {N, C, H, W}, normkit::Layout::kChannelsLast);

  normkit::Affine(xt, w.data(), b.data(), yt, NORMKIT_PARAMS_PER_SAMPLE_CHANNEL, &ctx);
  bool ok = true;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = i / (C * H * W), c = i % C, p = n * C + c;
    ok = ok && std::fabs(y[i] - (static_cast<double>(x[i]) * w[p] + b[p])) < 1e-5;
  }
  expect(ok, "per-sample affine NHWC");

  normkit::Affine(xt, w.data(), nullptr, yt);  // scale only, default context
  ok = true;
  for (int64_t i = 0; i < count; ++i)
    ok = ok && std::fabs(y[i] - static_cast<double>(x[i]) * w[i % C]) < 1e-5;
  expect(ok, "scale only NHWC");

  // Linear(3 -> 2) followed by BatchNorm1d(2), folded into the linear layer.
  std::vector<float> lw = {1, 2, 3, -1, 0.5f, 2}, lb = {0.1f, -0.2f}, in = {0.3f, -1.0f, 2.0f};
  const float gamma[2] = {1.5f, 0.5f}, beta[2] = {0.0f, 1.0f}, mean[2] = {0.2f, -0.1f},
              var[2] = {2.0f, 0.5f};
  double before[2];
  for (int o = 0; o < 2; ++o) {
    double acc = lb[o];
    for (int i = 0; i < 3; ++i) acc += lw[o * 3 + i] * in[i];
    before[o] = (acc - mean[o]) / std::sqrt(var[o] + 1e-5) * gamma[o] + beta[o];
  }
  normkit::FoldBatchNormIntoLinear(lw.data(), 2, 3, lb.data(), lb.data(), gamma, beta, mean, var,
                                   1e-5f);
  ok = true;
  for (int o = 0; o < 2; ++o) {
    double acc = lb[o];
    for (int i = 0; i < 3; ++i) acc += lw[o * 3 + i] * in[i];
    ok = ok && std::fabs(acc - before[o]) < 1e-5;
  }
  expect(ok, "BN folded into linear");

  try {
    normkit::BatchNormInference(xt, nullptr, nullptr, mean, var, -1.0f, yt);
    expect(false, "negative eps rejected");
  } catch (const normkit::Error& e) {
    std::printf("expected exception: %s\n", e.what());
    expect(e.status() == NORMKIT_ERROR_INVALID_ARGUMENT, "negative eps rejected");
  }
  std::printf("%s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
