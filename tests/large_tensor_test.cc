// SPDX-License-Identifier: Apache-2.0
// Tensors of more than 2^31 elements (float32, 8.6 GB, in place), so that a 32-bit
// index anywhere would show: affine and group norm, checked on a sample of outputs
// against values recomputed in double. Skips (exit 0 with a message) when the machine
// does not have the memory. Run by scripts/run_tests.sh once, not by ctest.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "normkit/normkit.h"

namespace {

// Deterministic values in [-1, 1) from the index alone: no copy of x is kept.
float Pattern(int64_t i) {
  const uint64_t h = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  return static_cast<float>((h >> 40) % 2000) / 1000.0f - 1.0f;
}

int64_t AvailableBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

int Fail(const char* what, int64_t i, double got, double want) {
  std::printf("FAILED: %s at element %lld: got %.9g want %.9g\n", what, static_cast<long long>(i),
              got, want);
  return 1;
}

}  // namespace

int main() {
  // N=1, C=32, 2^26 + 3 positions: 2^31 + 96 elements, the last ones past index 2^31.
  constexpr int64_t C = 32;
  const int64_t S = (int64_t{1} << 26) + 3, numel = C * S;
  const int64_t bytes = numel * static_cast<int64_t>(sizeof(float));
  if (AvailableBytes() < bytes + (int64_t{2} << 30)) {
    std::printf("large tensor test SKIPPED: needs %.1f GB free, /proc/meminfo has %.1f GB\n",
                (bytes + (int64_t{2} << 30)) / 1e9, AvailableBytes() / 1e9);
    return 0;
  }
  std::unique_ptr<float[]> x(new (std::nothrow) float[static_cast<size_t>(numel)]);
  if (!x) {
    std::printf("large tensor test SKIPPED: allocation of %.1f GB failed\n", bytes / 1e9);
    return 0;
  }
  const int64_t shape[3] = {1, C, S};
  std::vector<int64_t> samples;
  for (int64_t k = 0; k < 4000; ++k) samples.push_back(k * (numel / 4000) + k % 7);
  for (int64_t i = numel - 16; i < numel; ++i) samples.push_back(i);
  for (int64_t i = (int64_t{1} << 31) - 8; i < (int64_t{1} << 31) + 8; ++i) samples.push_back(i);

  for (normkit_layout layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST;
    const char* name = cl ? "channels-last" : "channels-first";
    normkit_tensor t;
    normkit_tensor_init(&t, x.get(), NORMKIT_DTYPE_FLOAT32, layout, 3, shape);

    // Affine in place.
    for (int64_t i = 0; i < numel; ++i) x[i] = Pattern(i);
    float scale[C], shift[C];
    for (int64_t c = 0; c < C; ++c) scale[c] = 0.5f + 0.03f * c, shift[c] = 0.1f * c - 1.0f;
    if (normkit_affine(nullptr, &t, scale, shift, NORMKIT_PARAMS_PER_CHANNEL, &t) !=
        NORMKIT_SUCCESS) {
      std::printf("FAILED: affine: %s\n", normkit_last_error());
      return 1;
    }
    for (int64_t i : samples) {
      const int64_t c = cl ? i % C : i / S;
      const double want = static_cast<double>(Pattern(i)) * scale[c] + shift[c];
      if (std::fabs(x[i] - want) > 1e-6 * (1 + std::fabs(want))) {
        return Fail("affine", i, x[i], want);
      }
    }
    std::printf("affine %s, %lld elements: ok\n", name, static_cast<long long>(numel));

    // Group norm in place, one group per channel: statistics over 2^26 values each.
    for (int64_t i = 0; i < numel; ++i) x[i] = Pattern(i) + (cl ? i % C : i / S) * 3.0f;
    double sum[C] = {}, sq[C] = {}, mean[C], rstd[C];
    for (int64_t i = 0; i < numel; ++i) sum[cl ? i % C : i / S] += x[i];
    for (int64_t c = 0; c < C; ++c) mean[c] = sum[c] / S;
    for (int64_t i = 0; i < numel; ++i) {
      const int64_t c = cl ? i % C : i / S;
      sq[c] += (x[i] - mean[c]) * (x[i] - mean[c]);
    }
    for (int64_t c = 0; c < C; ++c) rstd[c] = 1 / std::sqrt(sq[c] / S + 1e-5);
    float got_mean[C], got_rstd[C];
    if (normkit_group_norm(nullptr, &t, C, nullptr, nullptr, 1e-5f, NORMKIT_ACTIVATION_NONE, &t,
                           got_mean, got_rstd) != NORMKIT_SUCCESS) {
      std::printf("FAILED: group_norm: %s\n", normkit_last_error());
      return 1;
    }
    for (int64_t c = 0; c < C; ++c) {
      if (std::fabs(got_mean[c] - mean[c]) > 1e-5 * (1 + std::fabs(mean[c])) ||
          std::fabs(got_rstd[c] - rstd[c]) > 1e-5 * rstd[c]) {
        return Fail("group_norm statistics", c, got_mean[c], mean[c]);
      }
    }
    for (int64_t i : samples) {
      const int64_t c = cl ? i % C : i / S;
      const double xi = static_cast<double>(Pattern(i) + c * 3.0f);
      const double want = (xi - mean[c]) * rstd[c];
      if (std::fabs(x[i] - want) > 1e-5 * (1 + std::fabs(want))) {
        return Fail("group_norm", i, x[i], want);
      }
    }
    std::printf("group_norm %s, %lld groups of %lld elements: ok\n", name,
                static_cast<long long>(C), static_cast<long long>(S));
  }
  return 0;
}
