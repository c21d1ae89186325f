// SPDX-License-Identifier: Apache-2.0
// What channels-first group norm can reach on one core, against what normkit reaches.
//
//   normkit_group_norm_bound C H W G [rounds]
//
// For x of 1xCxHxW floats in groups of C/G planes, one thread, times (median of
// `rounds`) and prints each as a ratio to memcpy of the same bytes:
//   read      the statistics pass alone (shifted sums of every group);
//   two-pass  per group, its statistics then its output (y = (x - m) * s + b);
//   chained   per group, its output while the next group's statistics are read;
//   normkit   normkit_group_norm on the same tensor.
// The loops hold constant parameters and no per-group arithmetic: they are the
// memory traffic of the op, and the gap to `normkit` is the op's own cost.
//
// Why it exists: every cache line that enters L1 costs about the same on this
// kind of core, wherever it comes from (L2 or L3). A copy brings in two lines per
// output line (x, and y for the write); group norm brings in x twice plus y when a
// group and its output do not stay in L1 between the two passes, which caps it
// near 2/3 of a copy; groups small enough to stay there can reach a copy's speed.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "normkit/normkit.h"

namespace hn = hwy::HWY_NAMESPACE;

namespace {

using DF = hn::ScalableTag<float>;

double NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

// Shifted sums about a fixed pivot in four accumulators (two chains of pairs, as normkit).
struct Sums {
  hn::Vec<DF> pivot = hn::Set(DF(), 0.5f);
  hn::Vec<DF> a1 = hn::Zero(DF()), a2 = hn::Zero(DF()), b1 = hn::Zero(DF()), b2 = hn::Zero(DF());
  HWY_INLINE void Add(hn::Vec<DF> v0, hn::Vec<DF> v1) {
    const auto d0 = v0 - pivot, d1 = v1 - pivot;
    a1 = a1 + d0;
    a2 = hn::MulAdd(d0, d0, a2);
    b1 = b1 + d1;
    b2 = hn::MulAdd(d1, d1, b2);
  }
  // x[0, n) in whole pairs of vectors (every loop here skips the rest).
  HWY_INLINE void AddSpan(const float* x, size_t n) {
    const size_t N = hn::Lanes(DF());
    for (size_t i = 0; i + 2 * N <= n; i += 2 * N)
      Add(hn::LoadU(DF(), x + i), hn::LoadU(DF(), x + i + N));
  }
  float Total() const { return hn::GetLane(hn::SumOfLanes(DF(), a1 + a2 + b1 + b2)); }
};

volatile float g_sink;

HWY_NOINLINE void ReadPass(const float* x, size_t n) {
  Sums s;
  s.AddSpan(x, n);
  g_sink = s.Total();
}

HWY_INLINE void ApplyPair(const float* x, float* y, size_t i) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const auto mean = hn::Set(d, 0.2f), scale = hn::Set(d, 1.1f), shift = hn::Set(d, 0.3f);
  hn::StoreU(hn::MulAdd(hn::LoadU(d, x + i) - mean, scale, shift), d, y + i);
  hn::StoreU(hn::MulAdd(hn::LoadU(d, x + i + N) - mean, scale, shift), d, y + i + N);
}

HWY_NOINLINE void TwoPass(const float* x, float* y, size_t n, size_t group) {
  const size_t N = hn::Lanes(DF());
  Sums s;
  for (size_t g = 0; g + group <= n; g += group) {
    s.AddSpan(x + g, group);
    for (size_t i = 0; i + 2 * N <= group; i += 2 * N) ApplyPair(x + g, y + g, i);
  }
  g_sink = s.Total();
}

HWY_NOINLINE void Chained(const float* x, float* y, size_t n, size_t group) {
  const DF d;
  const size_t N = hn::Lanes(d);
  Sums s;
  s.AddSpan(x, group);
  for (size_t g = 0; g + group <= n; g += group) {
    const float* next = x + g + group;
    const bool last = g + 2 * group > n;
    for (size_t i = 0; i + 2 * N <= group; i += 2 * N) {
      ApplyPair(x + g, y + g, i);
      if (!last) s.Add(hn::LoadU(d, next + i), hn::LoadU(d, next + i + N));
    }
  }
  g_sink = s.Total();
}

template <class F>
double TimeNs(F&& f) {
  const double t0 = NowNs();
  f();
  return NowNs() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s C H W G [rounds]\n", argv[0]);
    return 2;
  }
  const int64_t C = std::atoll(argv[1]), H = std::atoll(argv[2]), W = std::atoll(argv[3]);
  const int64_t G = std::atoll(argv[4]);
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 2000;
  if (C < 1 || H < 1 || W < 1 || G < 1 || C % G != 0 || rounds < 1) {
    std::fprintf(stderr, "need C, H, W, G >= 1, G dividing C, rounds >= 1\n");
    return 2;
  }
  const size_t n = static_cast<size_t>(C * H * W);
  const size_t group = n / static_cast<size_t>(G);
  auto x = hwy::AllocateAligned<float>(n), y = hwy::AllocateAligned<float>(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 97) * 0.01f, y[i] = 0.0f;

  normkit_context* one = nullptr;
  if (normkit_context_create(1, &one) != NORMKIT_SUCCESS) {
    std::fprintf(stderr, "context_create: %s\n", normkit_last_error());
    return 1;
  }
  const int64_t shape[4] = {1, C, H, W};
  normkit_tensor xt, yt;
  normkit_tensor_init(&xt, x.get(), NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, shape);
  normkit_tensor_init(&yt, y.get(), NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, shape);

  // Each loop is timed in turn within a round, so a noisy stretch of the machine
  // hits them alike; medians over rounds.
  std::vector<double> t[5];
  for (int r = 0; r < rounds; ++r) {
    const auto time = [&](int k, auto&& f) { t[k].push_back(TimeNs(f)); };
    time(0, [&] { std::memcpy(y.get(), x.get(), n * sizeof(float)); });
    time(1, [&] { ReadPass(x.get(), n); });
    time(2, [&] { TwoPass(x.get(), y.get(), n, group); });
    time(3, [&] { Chained(x.get(), y.get(), n, group); });
    time(4, [&] {
      if (normkit_group_norm(one, &xt, G, nullptr, nullptr, 1e-5f, NORMKIT_ACTIVATION_NONE, &yt,
                             nullptr, nullptr) != NORMKIT_SUCCESS) {
        std::fprintf(stderr, "group_norm: %s\n", normkit_last_error());
        std::exit(1);
      }
    });
  }
  double med[5];
  for (int k = 0; k < 5; ++k) {
    std::sort(t[k].begin(), t[k].end());
    med[k] = t[k][t[k].size() / 2];
  }
  std::printf("1x%lldx%lldx%lld G=%lld (groups of %zu floats, %zu KiB), one thread, target %s\n",
              static_cast<long long>(C), static_cast<long long>(H), static_cast<long long>(W),
              static_cast<long long>(G), group, group * sizeof(float) >> 10,
              hwy::TargetName(HWY_TARGET));
  const char* names[5] = {"memcpy", "read", "two-pass", "chained", "normkit"};
  for (int k = 0; k < 5; ++k) {
    std::printf("  %-9s %8.2f us   ratio to memcpy %.2f\n", names[k], med[k] / 1e3,
                med[0] / med[k]);
  }
  normkit_context_destroy(one);
  return 0;
}
