// SPDX-License-Identifier: Apache-2.0
// What group norm's fused SiLU costs in arithmetic, and what cheaper forms would save:
// nanoseconds an element of `y = silu(x * s + b)` over 4096 floats in L1 (best of 15
// runs of 2000 passes), the library's own Activate<kSilu> (activation-inl.h) against
//   div:   the same exponential, v / (1 + e^-v) by a division (no estimate + Newton step),
//   t8:    e^-v from an 8-entry table of 2^(j/8) and a degree-3 Taylor polynomial,
//   t8div: both,
//   floor: v * rcp(1 + |v|) (not a sigmoid: the least a fused activation can cost),
//   none:  the affine step alone,
// and each form's largest error over [-87, 100] in units of 2^-24 relative. For the
// accuracy decision of docs/performance.md ("Group norm + SiLU: the arithmetic"). Built by
// hand for the CPU it runs on (one static SIMD target, not the library's dispatch):
//   g++ -O2 -march=native -std=c++17 -Isrc -Iinclude bench/silu_cost.cc -o /tmp/silu_cost
//   /tmp/silu_cost
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "cpu/kernels/activation-inl.h"

namespace nk = normkit::kernels::HWY_NAMESPACE;
namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

alignas(64) static float table8[16];  // 2^(j / 8), twice (one 512-bit vector)

// e^-v for v in [-88, 87]: n = round(-8 v / ln2), e^-v = 2^(n >> 3) * 2^((n & 7) / 8) * e^-g
// with g = v + n ln2 / 8 in [-ln2 / 16, ln2 / 16].
V ExpNegTable8(D d, V v) {
  const hn::RebindToSigned<D> di;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  v = hn::Min(v, hn::Set(d, 87.0f));
  const V biased = hn::MulAdd(v, hn::Set(d, -8.0f * 1.44269504f), hn::Set(d, kRound));
  const V n = hn::Sub(biased, hn::Set(d, kRound));
  V g = hn::MulAdd(n, hn::Set(d, 0.0866434f), v);
  g = hn::MulAdd(n, hn::Set(d, static_cast<float>(0.693147180559945 / 8 - 0.0866434)), g);
  V p = hn::Set(d, -1.0f / 6);
  p = hn::MulAdd(p, g, hn::Set(d, 0.5f));
  p = hn::MulAdd(p, g, hn::Set(d, -1.0f));
  p = hn::MulAdd(p, g, hn::Set(d, 1.0f));
  const auto bits = hn::BitCast(di, biased);
  const V t = hn::TableLookupLanes(hn::Load(d, table8),
                                   hn::IndicesFromVec(d, hn::And(bits, hn::Set(di, 7))));
  const auto scaled =
      hn::Add(hn::ShiftLeft<20>(hn::AndNot(hn::Set(di, 7), bits)), hn::BitCast(di, t));
  return hn::Mul(p, hn::BitCast(d, scaled));
}

template <int kForm>
HWY_NOINLINE void Run(const float* x, float* y, size_t n, float s, float b) {
  const D d;
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    const V v = hn::MulAdd(hn::Load(d, x + i), hn::Set(d, s), hn::Set(d, b));
    const V vm = nk::AtLeastSiluLo(d, v);
    V r;
    if (kForm == 0) {
      r = nk::Activate<normkit::kernels::Activation::kSilu>(d, v);
    } else if (kForm == 1) {
      r = hn::Div(vm, hn::Add(hn::Set(d, 1.0f), nk::ExpOfNegClamped(d, vm)));
    } else if (kForm == 2) {
      const V a = hn::Add(hn::Set(d, 1.0f), ExpNegTable8(d, vm));
      const V r0 = hn::ApproximateReciprocal(a);
      r = hn::Mul(vm, hn::Mul(r0, hn::NegMulAdd(a, r0, hn::Set(d, 2.0f))));
    } else if (kForm == 3) {
      r = hn::Div(vm, hn::Add(hn::Set(d, 1.0f), ExpNegTable8(d, vm)));
    } else if (kForm == 4) {
      r = hn::Mul(v, hn::ApproximateReciprocal(hn::Add(hn::Set(d, 1.0f), hn::Abs(v))));
    } else {
      r = v;
    }
    hn::Store(r, d, y + i);
  }
}

template <int kForm>
double NanosecondsAnElement(const float* x, float* y, size_t n) {
  double best = 1e30;
  for (int rep = 0; rep < 15; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int pass = 0; pass < 2000; ++pass) Run<kForm>(x, y, n, 1.01f, 0.001f * pass);
    const std::chrono::duration<double> t = std::chrono::steady_clock::now() - t0;
    best = std::min(best, t.count() / 2000 / static_cast<double>(n) * 1e9);
  }
  return best;
}

template <int kForm>
double LargestError(const float* x, float* y, size_t n) {
  Run<kForm>(x, y, n, 1.0f, 0.0f);
  double largest = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i], exact = v / (1.0 + std::exp(-v));
    largest = std::max(largest, std::fabs(y[i] - exact) / std::fabs(exact));
  }
  return largest * 16777216.0;
}

int main() {
  for (int j = 0; j < 16; ++j) table8[j] = static_cast<float>(std::exp2((j % 8) / 8.0));
  const size_t n = 4096;  // a multiple of every vector length
  std::vector<float> x(n), y(n);
  for (size_t i = 0; i < n; ++i) x[i] = -87.0f + 187.0f * static_cast<float>(i) / n;
  std::printf("target %s\nlargest error (2^-24 relative): silu %.1f div %.1f t8 %.1f t8div %.1f\n",
              hwy::TargetName(HWY_TARGET), LargestError<0>(x.data(), y.data(), n),
              LargestError<1>(x.data(), y.data(), n), LargestError<2>(x.data(), y.data(), n),
              LargestError<3>(x.data(), y.data(), n));
  for (size_t i = 0; i < n; ++i) x[i] = 3.0f * std::sin(0.37f * static_cast<float>(i));
  for (int round = 0; round < 2; ++round) {
    std::printf("ns an element: silu %.3f div %.3f t8 %.3f t8div %.3f floor %.3f none %.3f\n",
                NanosecondsAnElement<0>(x.data(), y.data(), n),
                NanosecondsAnElement<1>(x.data(), y.data(), n),
                NanosecondsAnElement<2>(x.data(), y.data(), n),
                NanosecondsAnElement<3>(x.data(), y.data(), n),
                NanosecondsAnElement<4>(x.data(), y.data(), n),
                NanosecondsAnElement<5>(x.data(), y.data(), n));
  }
}
