// SPDX-License-Identifier: Apache-2.0
// bfloat16 and float16 storage: the conversions on every bit pattern and every SIMD target,
// and the affine family (affine, batch norm) in every dtype pair, against double
// references rounded plainly (half_reference.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu/kernels/group_norm.h"
#include "half_reference.h"
#include "half_targets.h"
#include "half_tensor.h"
#include "hwy/cache_control.h"
#include "hwy/targets.h"
#include "normkit/normkit.h"
#include "test_util.h"
#include "vectors.h"

namespace normkit_test {
namespace {

// y = x through affine with no scale and no shift: the conversion from x's dtype to y's.
void Convert(Storage* x, Storage* y, int64_t n) {
  const normkit_tensor xt = Tensor(x, {1, 1, n}, NORMKIT_LAYOUT_CHANNELS_FIRST);
  const normkit_tensor yt = Tensor(y, {1, 1, n}, NORMKIT_LAYOUT_CHANNELS_FIRST);
  ASSERT_EQ(normkit_affine(nullptr, &xt, nullptr, nullptr, NORMKIT_PARAMS_PER_CHANNEL, &yt),
            NORMKIT_SUCCESS)
      << normkit_last_error();
}

// Floats that probe a format's rounding: every value of the format, the midpoints between
// neighbours (ties) and the floats on either side of each, float subnormals, the
// overflow threshold, NaNs with payloads.
std::vector<float> RoundingProbes(HalfFormat f) {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double a = Decode(static_cast<uint16_t>(h), f);
    if (std::isnan(a)) continue;
    v.push_back(static_cast<float>(a));
    const double b = Decode(static_cast<uint16_t>(h + 1), f);  // next away from zero
    if ((h & 0x7FFF) == 0x7FFF || std::isnan(b) || std::isinf(a)) continue;
    const auto mid = static_cast<float>((a + b) / 2);  // exact: one more bit
    v.push_back(mid);
    v.push_back(std::nextafter(mid, 0.0f));
    v.push_back(std::nextafter(mid, mid > 0 ? INFINITY : -INFINITY));
  }
  for (float s : {1.0f, -1.0f}) {
    v.push_back(s * std::numeric_limits<float>::denorm_min());
    v.push_back(s * std::numeric_limits<float>::min());
    v.push_back(s * std::nextafter(std::numeric_limits<float>::min(), 0.0f));
    v.push_back(s * std::numeric_limits<float>::max());
    v.push_back(s * 65504.0f);
    v.push_back(s * 65519.99f);
    v.push_back(s * 65520.0f);
    v.push_back(s * 1e-8f);
    v.push_back(s * 3e38f);
    for (uint32_t payload : {0x400000u, 0x000001u, 0x7FFFFFu, 0x200000u, 0x002000u}) {
      v.push_back(FloatOfBits((s < 0 ? 0xFF800000u : 0x7F800000u) | payload));
    }
  }
  return v;
}

class EveryTarget : public ::testing::Test {
 protected:
  template <class F>
  void ForEachTarget(F&& f) {
    ForEachHalfTarget(f);
  }
};

using HalfConversions = EveryTarget;

// float32 -> half: bitwise the plain rounding, on every probe (both streaming and plain
// stores: the probes fill a tensor whose data starts on and off a vector boundary).
TEST_F(HalfConversions, NarrowingRoundsToNearestEvenOnEveryTarget) {
  for (int32_t dtype : {kBF16, kF16}) {
    SCOPED_TRACE(DtypeLabel(dtype));
    const HalfFormat f = FormatOf(dtype);
    const std::vector<float> probes = RoundingProbes(f);
    const auto n = static_cast<int64_t>(probes.size());
    ForEachTarget([&] {
      Storage x(kF32, n), y(dtype, n);
      for (int64_t i = 0; i < n; ++i) x.Set(i, probes[static_cast<size_t>(i)]);
      Convert(&x, &y, n);
      int64_t wrong = 0;
      for (int64_t i = 0; i < n && wrong < 5; ++i) {
        const float v = probes[static_cast<size_t>(i)];
        const uint16_t want = Narrow(v, f);
        if (y.Bits(i) != want) {
          ADD_FAILURE() << "x = " << v << " (0x" << std::hex << BitsOf(v) << "): got 0x"
                        << y.Bits(i) << ", want 0x" << want << std::dec;
          ++wrong;
        }
      }
    });
  }
}

// The norms' and shift-sum's chunked rounding (kernels::NarrowFromFloat: AVX512_BF16's
// instruction for bfloat16 on the AVX-512 target where the CPU has it, with float
// subnormals rounded apart): bitwise the plain rounding on every probe and target, plain
// and streaming stores, y on and off a 32-byte boundary, short spans (peel and tail only).
TEST_F(HalfConversions, ChunkNarrowingRoundsToNearestEvenOnEveryTarget) {
  for (int32_t dtype : {kBF16, kF16}) {
    SCOPED_TRACE(DtypeLabel(dtype));
    const HalfFormat f = FormatOf(dtype);
    const std::vector<float> probes = RoundingProbes(f);
    const size_t n = probes.size();
    const normkit::kernels::Storage storage = normkit::kernels::StorageOf(dtype);
    ForEachTarget([&] {
      std::vector<uint16_t> y(n + 64);
      // 64-byte aligned storage for the y offsets below.
      auto* base = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(y.data()) + 63) &
                                               ~uintptr_t{63});
      const size_t room = n + 64 - static_cast<size_t>(base - y.data());
      int64_t wrong = 0;
      for (bool stream : {false, true}) {
        for (size_t offset : {size_t{0}, size_t{1}, size_t{7}, size_t{15}}) {
          for (size_t len :
               {n - 64, size_t{0}, size_t{1}, size_t{5}, size_t{16}, size_t{17}, size_t{33}}) {
            const size_t first = (len * 7 + offset) % 97;  // which probes: not always the same
            if (offset + len > room || first + len > n) continue;
            std::fill(base, base + room, uint16_t{0xABCD});
            normkit::kernels::NarrowFromFloat(probes.data() + first, static_cast<int64_t>(len),
                                              base + offset, storage, stream);
            hwy::FlushStream();
            for (size_t i = 0; i < room && wrong < 5; ++i) {
              const bool inside = i >= offset && i < offset + len;
              const uint16_t want = inside ? Narrow(probes[first + i - offset], f) : 0xABCD;
              if (base[i] != want) {
                ADD_FAILURE() << "stream " << stream << " offset " << offset << " length " << len
                              << " element " << i << ": got 0x" << std::hex << base[i]
                              << ", want 0x" << want << std::dec;
                ++wrong;
              }
            }
          }
        }
      }
    });
  }
}

// half -> float32 and half -> half: all 65536 patterns, exactly (NaNs quieted).
TEST_F(HalfConversions, WideningIsExactOnEveryPattern) {
  for (int32_t dtype : {kBF16, kF16}) {
    SCOPED_TRACE(DtypeLabel(dtype));
    const HalfFormat f = FormatOf(dtype);
    ForEachTarget([&] {
      Storage x(dtype, 0x10000), wide(kF32, 0x10000), same(dtype, 0x10000);
      for (uint32_t h = 0; h < 0x10000; ++h) x.SetBits(h, static_cast<uint16_t>(h));
      Convert(&x, &wide, 0x10000);
      Convert(&x, &same, 0x10000);
      int64_t wrong = 0;
      for (uint32_t h = 0; h < 0x10000 && wrong < 5; ++h) {
        const auto bits = static_cast<uint16_t>(h);
        const double want = Decode(bits, f);
        const double got = wide.Get(h);
        const uint32_t quiet = 1u << (f.mantissa_bits - 1);
        const bool ok = std::isnan(want) ? std::isnan(got) &&
                                               Narrow(static_cast<float>(got), f) == (bits | quiet)
                                         : got == want && std::signbit(got) == std::signbit(want);
        const bool same_ok = same.Bits(h) == (IsNaNBits(bits, f) ? (bits | quiet) : bits);
        if (!ok || !same_ok) {
          ADD_FAILURE() << "0x" << std::hex << h << std::dec << ": float " << got << " want "
                        << want << ", same-dtype copy 0x" << std::hex << same.Bits(h) << std::dec;
          ++wrong;
        }
      }
    });
  }
}

// ---- The affine family in every dtype pair ----------------------------------------------

struct AffineCase {
  std::vector<int64_t> shape;
  normkit_layout layout;
  bool per_sample;
  bool in_place;
  bool shifted;  // data off a vector boundary
};

void RunAffineCase(const Pair& pair, const AffineCase& c, int threads) {
  const int64_t n = Numel(c.shape), N = c.shape[0], C = c.shape[1];
  const int64_t S = n / (N * C);
  const bool last = c.layout == NORMKIT_LAYOUT_CHANNELS_LAST;
  const int64_t P = c.per_sample ? N * C : C;
  const std::vector<float> scale = RandomVector(P, 3, -3.0f, 3.0f);
  const std::vector<float> shift = RandomVector(P, 4, -1.0f, 1.0f);
  const std::vector<float> values = RandomVector(n, 5, -8.0f, 8.0f);
  Storage x(pair.x, n), y_own(pair.y, n);
  for (int64_t i = 0; i < n; ++i) x.Set(i, values[static_cast<size_t>(i)], c.shifted);
  std::vector<double> xs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) xs[static_cast<size_t>(i)] = x.Get(i, c.shifted);
  Storage& y = c.in_place ? x : y_own;
  const normkit_tensor xt = Tensor(&x, c.shape, c.layout, c.shifted);
  const normkit_tensor yt = Tensor(&y, c.shape, c.layout, c.shifted);
  Context ctx(threads);
  const int32_t kind =
      c.per_sample ? NORMKIT_PARAMS_PER_SAMPLE_CHANNEL : NORMKIT_PARAMS_PER_CHANNEL;
  ASSERT_EQ(normkit_affine(ctx.ctx, &xt, scale.data(), shift.data(), kind, &yt), NORMKIT_SUCCESS)
      << normkit_last_error();
  int64_t wrong = 0;
  for (int64_t b = 0; b < N; ++b) {
    for (int64_t ch = 0; ch < C; ++ch) {
      const int64_t p = c.per_sample ? b * C + ch : ch;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = Offset(b, ch, s, C, S, last);
        const double v = xs[static_cast<size_t>(i)];
        const double want = v * scale[static_cast<size_t>(p)] + shift[static_cast<size_t>(p)];
        ExpectOutput(
            y, i, want,
            std::fabs(v * scale[static_cast<size_t>(p)]) + std::fabs(shift[static_cast<size_t>(p)]),
            c.shifted, &wrong);
      }
    }
  }
}

TEST(HalfStorage, AffineEveryPairLayoutAndAlignment) {
  const std::vector<std::vector<int64_t>> shapes = {{2, 13, 9, 11}, {3, 24, 16}, {2, 64, 7, 7},
                                                    {1, 300, 5, 5}, {2, 8, 4},   {1, 3, 1000}};
  for (const Pair& pair : kPairs) {
    for (const auto& shape : shapes) {
      for (normkit_layout layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
        for (bool per_sample : {false, true}) {
          for (bool shifted : {false, true}) {
            for (bool in_place : {false, true}) {
              if (in_place && pair.x != pair.y) continue;
              SCOPED_TRACE(std::string(DtypeLabel(pair.x)) + " -> " + DtypeLabel(pair.y) +
                           " shape[1] " + std::to_string(shape[1]) + (layout ? " NHWC" : " NCHW") +
                           (per_sample ? " per-sample" : "") + (shifted ? " shifted" : "") +
                           (in_place ? " in place" : ""));
              RunAffineCase(pair, {shape, layout, per_sample, in_place, shifted}, 2);
            }
          }
        }
      }
    }
  }
}

// Tensors past the streaming-store threshold (24 MiB of output), on several threads.
TEST(HalfStorage, AffineLargeTensorsStreamAndThread) {
  for (const Pair& pair : {Pair{kBF16, kBF16}, Pair{kF32, kF16}}) {
    for (normkit_layout layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      SCOPED_TRACE(std::string(DtypeLabel(pair.x)) + " -> " + DtypeLabel(pair.y) +
                   (layout ? " NHWC" : ""));
      RunAffineCase(pair, {{3, 64, 256, 256}, layout, false, false, false}, 3);
    }
  }
  // In place past the in-cache size: channels-last walks each span's two halves in step.
  for (const Pair& pair : {Pair{kBF16, kBF16}, Pair{kF16, kF16}}) {
    for (bool per_sample : {false, true}) {
      SCOPED_TRACE(std::string(DtypeLabel(pair.x)) + " in place NHWC" +
                   (per_sample ? " per-sample" : ""));
      RunAffineCase(pair, {{2, 256, 96, 96}, NORMKIT_LAYOUT_CHANNELS_LAST, per_sample, true, false},
                    3);
    }
  }
}

// Affine with absent terms (the half kernels apply 1 and -0 instead): scale-only and
// copy keep -0, shift-only adds exactly.
TEST_F(HalfConversions, AffineAbsentTermsOnEveryTarget) {
  const int64_t n = 999;
  const std::vector<float> values = RandomVector(n, 8, -4.0f, 4.0f);
  const float scale[1] = {1.5f}, shift[1] = {0.75f};
  ForEachTarget([&] {
    for (const Pair& pair : kPairs) {
      SCOPED_TRACE(std::string(DtypeLabel(pair.x)) + " -> " + DtypeLabel(pair.y));
      for (int terms = 0; terms < 4; ++terms) {
        Storage x(pair.x, n), y(pair.y, n);
        for (int64_t i = 0; i < n; ++i) x.Set(i, i == 0 ? -0.0f : values[static_cast<size_t>(i)]);
        const normkit_tensor xt = Tensor(&x, {1, 1, n}, NORMKIT_LAYOUT_CHANNELS_FIRST);
        const normkit_tensor yt = Tensor(&y, {1, 1, n}, NORMKIT_LAYOUT_CHANNELS_FIRST);
        const float* s = terms == 0 || terms == 2 ? scale : nullptr;
        const float* b = terms == 1 || terms == 2 ? shift : nullptr;
        ASSERT_EQ(normkit_affine(nullptr, &xt, s, b, NORMKIT_PARAMS_PER_CHANNEL, &yt),
                  NORMKIT_SUCCESS);
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double want = x.Get(i) * (s ? s[0] : 1.0) + (b ? b[0] : 0.0);
          ExpectOutput(y, i, want, std::fabs(want) + 1, false, &wrong);
        }
        if (!b) EXPECT_TRUE(std::signbit(y.Get(0))) << "terms " << terms << " lost -0";
      }
    }
  });
}

// Batch norm inference, folded and mean-first (running means far from the spread).
TEST(HalfStorage, BatchNormEveryPair) {
  for (const Pair& pair : kPairs) {
    for (normkit_layout layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      for (float mean_scale : {1.0f, 3000.0f}) {
        SCOPED_TRACE(std::string(DtypeLabel(pair.x)) + " -> " + DtypeLabel(pair.y) +
                     (layout ? " NHWC" : " NCHW") + " mean x" + std::to_string(mean_scale));
        const std::vector<int64_t> shape = {2, 24, 13, 7};
        const int64_t n = Numel(shape), C = 24, S = 13 * 7;
        std::vector<float> gamma = RandomVector(C, 1, 0.5f, 2.0f), beta = RandomVector(C, 2);
        std::vector<float> mean = RandomVector(C, 3), var = RandomVector(C, 4, 0.1f, 3.0f);
        for (float& m : mean) m *= mean_scale;
        const std::vector<float> values = RandomVector(n, 6, -3.0f, 3.0f);
        Storage x(pair.x, n), y(pair.y, n);
        const bool last = layout == NORMKIT_LAYOUT_CHANNELS_LAST;
        for (int64_t b = 0; b < 2; ++b) {
          for (int64_t c = 0; c < C; ++c) {
            for (int64_t s = 0; s < S; ++s) {
              const int64_t i = Offset(b, c, s, C, S, last);
              x.Set(i, mean[static_cast<size_t>(c)] + values[static_cast<size_t>(i)]);
            }
          }
        }
        const normkit_tensor xt = Tensor(&x, shape, layout);
        const normkit_tensor yt = Tensor(&y, shape, layout);
        const float eps = 1e-5f;
        ASSERT_EQ(normkit_batch_norm_inference(nullptr, &xt, gamma.data(), beta.data(), mean.data(),
                                               var.data(), eps, &yt),
                  NORMKIT_SUCCESS)
            << normkit_last_error();
        int64_t wrong = 0;
        for (int64_t b = 0; b < 2; ++b) {
          for (int64_t c = 0; c < C; ++c) {
            const auto k = static_cast<size_t>(c);
            const double rstd = 1.0 / std::sqrt(static_cast<double>(var[k]) + eps);
            for (int64_t s = 0; s < S; ++s) {
              const int64_t i = Offset(b, c, s, C, S, last);
              const double v = x.Get(i);
              const double want = (v - mean[k]) * rstd * gamma[k] + beta[k];
              // The folded shift's rounding scales with |mean| * scale.
              const double magnitude =
                  (std::fabs(v) + std::fabs(mean[k])) * rstd * gamma[k] + std::fabs(beta[k]);
              ExpectOutput(y, i, want, magnitude, false, &wrong);
            }
          }
        }
      }
    }
  }
}

// The same bits for any thread count.
TEST(HalfStorage, BitwiseIdenticalForAnyThreadCount) {
  const std::vector<int64_t> shape = {4, 96, 64, 64};
  const int64_t n = Numel(shape);
  const std::vector<float> values = RandomVector(n, 9);
  const std::vector<float> scale = RandomVector(96, 10), shift = RandomVector(96, 11);
  for (normkit_layout layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    Storage x(kBF16, n);
    for (int64_t i = 0; i < n; ++i) x.Set(i, values[static_cast<size_t>(i)]);
    std::vector<unsigned char> first;
    for (int threads : {1, 2, 3}) {
      Storage y(kBF16, n);
      const normkit_tensor xt = Tensor(&x, shape, layout);
      const normkit_tensor yt = Tensor(&y, shape, layout);
      Context ctx(threads);
      ASSERT_EQ(
          normkit_affine(ctx.ctx, &xt, scale.data(), shift.data(), NORMKIT_PARAMS_PER_CHANNEL, &yt),
          NORMKIT_SUCCESS);
      if (first.empty()) {
        first = y.raw;
      } else {
        EXPECT_TRUE(first == y.raw) << threads << " threads";
      }
    }
  }
}

}  // namespace
}  // namespace normkit_test

namespace normkit_test {
namespace {

// Layer norm and RMS norm of [rows, D] in a dtype pair: against the double definition, and
// a half x gives bitwise what its float32 values give (the kernels widen x exactly as they
// load it). magnitude scales the values (past sqrt(FLT_MAX) their float sums overflow and
// the exact statistics take over).
void RunRowNormCase(bool rms, const Pair& pair, int64_t D, bool in_place, float magnitude = 1.0f,
                    int64_t rows = 0) {
  if (rows == 0) rows = D >= 768 ? 9 : 37;
  SCOPED_TRACE(std::string(rms ? "rms_norm " : "layer_norm ") + DtypeLabel(pair.x) + " -> " +
               DtypeLabel(pair.y) + " D=" + std::to_string(D) + (in_place ? " in place" : "") +
               " magnitude " + std::to_string(magnitude));
  const int64_t n = rows * D;
  std::vector<float> values = RandomVector(n, 21, -3.0f, 5.0f);
  for (float& v : values) v *= magnitude;
  const std::vector<float> gamma = RandomVector(D, 22, 0.5f, 1.5f);
  const std::vector<float> beta = RandomVector(D, 23);
  Storage x(pair.x, n), y_own(pair.y, n), wide(kF32, n), wide_y(kF32, n);
  for (int64_t i = 0; i < n; ++i) x.Set(i, values[static_cast<size_t>(i)]);
  for (int64_t i = 0; i < n; ++i) wide.Set(i, static_cast<float>(x.Get(i)));
  std::vector<double> xs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) xs[static_cast<size_t>(i)] = x.Get(i);
  Storage& y = in_place ? x : y_own;
  const normkit_tensor xt = Tensor(&x, {rows, D}, NORMKIT_LAYOUT_CHANNELS_FIRST);
  const normkit_tensor yt = Tensor(&y, {rows, D}, NORMKIT_LAYOUT_CHANNELS_FIRST);
  const normkit_tensor wt = Tensor(&wide, {rows, D}, NORMKIT_LAYOUT_CHANNELS_FIRST);
  const normkit_tensor wyt = Tensor(&wide_y, {rows, D}, NORMKIT_LAYOUT_CHANNELS_FIRST);
  std::vector<float> rstd(static_cast<size_t>(rows)), rstd_wide(rstd.size());
  Context ctx(2);
  const float eps = 1e-5f;
  const auto run = [&](const normkit_tensor* a, const normkit_tensor* b, float* r) {
    return rms ? normkit_rms_norm(ctx.ctx, a, gamma.data(), eps, b, r)
               : normkit_layer_norm(ctx.ctx, a, gamma.data(), beta.data(), eps, b, nullptr, r);
  };
  ASSERT_EQ(run(&wt, &wyt, rstd_wide.data()), NORMKIT_SUCCESS) << normkit_last_error();
  ASSERT_EQ(run(&xt, &yt, rstd.data()), NORMKIT_SUCCESS) << normkit_last_error();
  EXPECT_EQ(rstd, rstd_wide) << "the statistics of the widened values";
  int64_t wrong = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, ms = 0;
    for (int64_t d = 0; d < D; ++d) mean += xs[static_cast<size_t>(r * D + d)];
    mean = rms ? 0.0 : mean / static_cast<double>(D);
    for (int64_t d = 0; d < D; ++d) {
      const double dev = xs[static_cast<size_t>(r * D + d)] - mean;
      ms += dev * dev;
    }
    const double inv = 1.0 / std::sqrt(ms / static_cast<double>(D) + eps);
    for (int64_t d = 0; d < D; ++d) {
      const int64_t i = r * D + d;
      const double t = (xs[static_cast<size_t>(i)] - mean) * inv;
      const double g = gamma[static_cast<size_t>(d)];
      const double b = rms ? 0.0 : beta[static_cast<size_t>(d)];
      // float32 outputs: the row norms' own bound (a few float ulps of the output's
      // scale); half outputs: one unit of the format, or of float's error where t * g + b
      // cancels (large tensors have such elements: 1e-8 from values of 1).
      ExpectOutput(y, i, t * g + b, 8 * (std::fabs(t * g) + std::fabs(b) + 1), false, &wrong, true);
      // The float32 result of the same values, stored as y's dtype: bitwise.
      const float w = static_cast<float>(wide_y.Get(i));
      const uint32_t same = y.dtype == kF32 ? BitsOf(w) : Narrow(w, FormatOf(y.dtype));
      if (y.Bits(i) != same && wrong < 5) {
        ADD_FAILURE() << "element " << i << " is not the float32 input's result";
        ++wrong;
      }
    }
  }
}

// Every pair; rows taken in lane-parallel batches (D up to 32 vectors), in batches of
// spans, and one by one (768, 5000).
TEST(HalfStorage, RowNormsEveryPair) {
  for (bool rms : {false, true}) {
    for (const Pair& pair : kPairs) {
      for (int64_t D : {1, 7, 64, 100, 768, 5000}) {
        for (bool in_place : {false, true}) {
          if (in_place && pair.x != pair.y) continue;
          RunRowNormCase(rms, pair, D, in_place);
        }
      }
    }
  }
}

// bfloat16 rows near FLT_MAX (float sums overflow: the exact statistics read the half
// values), and a share of the cases on every SIMD target.
TEST(HalfStorage, RowNormsHugeValuesAndEveryTarget) {
  for (bool rms : {false, true}) {
    for (int64_t D : {64, 768}) {
      RunRowNormCase(rms, {kBF16, kBF16}, D, false, 6e37f);
      RunRowNormCase(rms, {kBF16, kF32}, D, false, 6e37f);
    }
  }
  ForEachHalfTarget([] {
    int k = 0;
    for (const Pair& pair : kPairs) {
      for (int64_t D : {7, 100, 768}) {
        const bool rms = k++ % 2 == 1;
        RunRowNormCase(rms, pair, D, pair.x == pair.y && D == 100);
      }
    }
  });
}

// Half rows past the cache: a y of 26 MB (streamed), the rows' outputs in column chunks
// across each task's rows with the next rows prefetched, out of place and in place.
TEST(HalfStorage, RowNormsLargeTensorsStream) {
  RunRowNormCase(false, {kBF16, kBF16}, 4999, false, 1.0f, 2603);
  RunRowNormCase(true, {kF16, kF16}, 4999, false, 1.0f, 2603);
  RunRowNormCase(true, {kBF16, kBF16}, 4999, true, 1.0f, 1303);
}

}  // namespace
}  // namespace normkit_test

namespace normkit_test {
namespace {

// The golden vectors of tests/vectors/half.txt: every output within one unit of its format
// of the float64 result rounded to it (float32 outputs: within 1e-5 of the output's scale).
TEST(GoldenVectors, HalfStorage) {
  const std::string path = std::string(NORMKIT_VECTORS_DIR) + "/half.txt";
  const auto cases = ReadVectorFile(path);
  ASSERT_GE(cases.size(), 15u) << "cannot read " << path;
  for (const auto& k : cases) {
    SCOPED_TRACE(k.name);
    const auto shape = k.Shape();
    const int32_t xd = DtypeNamed(k.scalars.at("x_dtype")),
                  yd = DtypeNamed(k.scalars.at("y_dtype"));
    const auto layout = static_cast<normkit_layout>(std::stoi(k.scalars.at("layout")));
    const std::vector<float> xs = k.Floats("x");
    const auto n = static_cast<int64_t>(xs.size());
    Storage x(xd, n), y(yd, n);
    for (int64_t i = 0; i < n; ++i) {
      x.Set(i, xs[static_cast<size_t>(i)]);
      ASSERT_EQ(x.Get(i), xs[static_cast<size_t>(i)]) << "input not representable";
    }
    const normkit_tensor xt = Tensor(&x, shape, layout), yt = Tensor(&y, shape, layout);
    normkit_status st;
    if (k.op == "affine") {
      st = normkit_affine(nullptr, &xt, k.Floats("scale").data(), k.Floats("shift").data(),
                          NORMKIT_PARAMS_PER_CHANNEL, &yt);
    } else if (k.op == "batch_norm") {
      st = normkit_batch_norm_inference(
          nullptr, &xt, k.Floats("gamma").data(), k.Floats("beta").data(), k.Floats("mean").data(),
          k.Floats("var").data(), static_cast<float>(k.Scalar("eps")), &yt);
    } else if (k.op == "group_norm") {
      st = normkit_group_norm(nullptr, &xt, static_cast<int64_t>(k.Scalar("groups")),
                              k.Floats("gamma").data(), k.Floats("beta").data(),
                              static_cast<float>(k.Scalar("eps")),
                              static_cast<int32_t>(k.Scalar("activation")), &yt, nullptr, nullptr);
    } else if (k.op == "layer_norm") {
      st = normkit_layer_norm(nullptr, &xt, k.Floats("gamma").data(), k.Floats("beta").data(),
                              static_cast<float>(k.Scalar("eps")), &yt, nullptr, nullptr);
    } else {
      st = normkit_rms_norm(nullptr, &xt, k.Floats("gamma").data(),
                            static_cast<float>(k.Scalar("eps")), &yt, nullptr);
    }
    ASSERT_EQ(st, NORMKIT_SUCCESS) << normkit_last_error();
    const std::vector<double>& want = k.arrays.at("y");
    double scale = 0;
    for (double w : want) scale = std::max(scale, std::fabs(w));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      // Group norm's beta can cancel the normalized value: float32's error at the scale.
      ExpectOutput(y, i, want[static_cast<size_t>(i)], 25 * scale, false, &wrong,
                   k.op == "group_norm");
    }
  }
}

}  // namespace
}  // namespace normkit_test

namespace normkit_test {
namespace {

double Activated(double v, int32_t act) {
  if (act == NORMKIT_ACTIVATION_RELU) return v > 0 ? v : 0.0;
  if (act == NORMKIT_ACTIVATION_SILU) return v / (1.0 + std::exp(-v));
  return v;
}

struct GroupNormCase {
  std::vector<int64_t> shape;
  int64_t groups;
  normkit_layout layout;
  int32_t activation;
  bool shifted;  // data off a vector boundary
};

// Group norm of x in `pair`'s dtypes (and in place where they agree) against the double
// definition, and bitwise against the float32 run on x's values, stored as y's dtype:
// the kernels load a half x widened exactly (the float32 plan's bits for its values),
// a half y is the float result rounded. check_every: compare with the double reference
// every this many elements.
void RunGroupNormCase(const Pair& pair, const GroupNormCase& c, bool in_place, int threads,
                      int64_t check_every = 1, float magnitude = 1.0f) {
  const int64_t n = Numel(c.shape), N = c.shape[0], C = c.shape[1], G = c.groups;
  const int64_t S = n / (N * C), Cg = C / G;
  const bool last = c.layout == NORMKIT_LAYOUT_CHANNELS_LAST;
  std::vector<float> values = RandomVector(n, 31, -3.0f, 5.0f);
  for (float& v : values) v *= magnitude;
  const std::vector<float> gamma = RandomVector(C, 32, 0.5f, 1.5f);
  const std::vector<float> beta = RandomVector(C, 33);
  Storage x(pair.x, n), y_own(pair.y, n), wide(kF32, n), wide_y(kF32, n);
  for (int64_t i = 0; i < n; ++i) x.Set(i, values[static_cast<size_t>(i)], c.shifted);
  std::vector<double> xs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) xs[static_cast<size_t>(i)] = x.Get(i, c.shifted);
  for (int64_t i = 0; i < n; ++i) wide.Set(i, static_cast<float>(xs[static_cast<size_t>(i)]));
  Storage& y = in_place ? x : y_own;
  const normkit_tensor xt = Tensor(&x, c.shape, c.layout, c.shifted);
  const normkit_tensor yt = Tensor(&y, c.shape, c.layout, c.shifted);
  const normkit_tensor wt = Tensor(&wide, c.shape, c.layout);
  const normkit_tensor wyt = Tensor(&wide_y, c.shape, c.layout);
  std::vector<float> mean(static_cast<size_t>(N * G)), rstd(mean.size());
  std::vector<float> mean_wide(mean.size()), rstd_wide(mean.size());
  Context ctx(threads);
  const float eps = 1e-5f;
  ASSERT_EQ(normkit_group_norm(ctx.ctx, &wt, G, gamma.data(), beta.data(), eps, c.activation, &wyt,
                               mean_wide.data(), rstd_wide.data()),
            NORMKIT_SUCCESS)
      << normkit_last_error();
  ASSERT_EQ(normkit_group_norm(ctx.ctx, &xt, G, gamma.data(), beta.data(), eps, c.activation, &yt,
                               mean.data(), rstd.data()),
            NORMKIT_SUCCESS)
      << normkit_last_error();
  EXPECT_EQ(mean, mean_wide) << "the statistics of the widened values";
  EXPECT_EQ(rstd, rstd_wide) << "the statistics of the widened values";
  int64_t wrong = 0, not_same = 0;
  for (int64_t b = 0; b < N; ++b) {
    for (int64_t g = 0; g < G; ++g) {
      double sum = 0, m2 = 0;
      for (int64_t ch = g * Cg; ch < (g + 1) * Cg; ++ch) {
        for (int64_t s = 0; s < S; ++s)
          sum += xs[static_cast<size_t>(Offset(b, ch, s, C, S, last))];
      }
      const double count = static_cast<double>(Cg * S), mu = sum / count;
      for (int64_t ch = g * Cg; ch < (g + 1) * Cg; ++ch) {
        for (int64_t s = 0; s < S; ++s) {
          const double d = xs[static_cast<size_t>(Offset(b, ch, s, C, S, last))] - mu;
          m2 += d * d;
        }
      }
      const double inv = 1.0 / std::sqrt(m2 / count + eps);
      for (int64_t ch = g * Cg; ch < (g + 1) * Cg; ++ch) {
        for (int64_t s = 0; s < S; ++s) {
          const int64_t i = Offset(b, ch, s, C, S, last);
          const float w = static_cast<float>(wide_y.Get(i));
          const uint32_t same = y.dtype == kF32 ? BitsOf(w) : Narrow(w, FormatOf(y.dtype));
          if (y.Bits(i, c.shifted) != same && not_same++ < 5) {
            ADD_FAILURE() << "element " << i << " is not the float32 input's result";
          }
          if (i % check_every != 0) continue;
          const double scaled =
              (xs[static_cast<size_t>(i)] - mu) * inv * gamma[static_cast<size_t>(ch)];
          const double b = beta[static_cast<size_t>(ch)];
          ExpectOutput(y, i, Activated(scaled + b, c.activation),
                       8 * (std::fabs(scaled) + std::fabs(b) + 1), c.shifted, &wrong, true);
        }
      }
    }
  }
}

// Group norm, instance norm (G = C) and channel layer norm (G = 1) in every dtype pair,
// both layouts, in place, data off a vector boundary, with each activation, on shapes
// that take each of the plans (batched small groups, chained groups, fused groups or
// samples, blocks split across threads, channels-last rows longer than the output chunk,
// instance norm of channels-last samples). `every`: run every this many cases (the
// per-target run takes a share of them).
void RunGroupNormPlans(int every) {
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> shapes = {
      {{2, 32, 7, 7}, 8},   {{1, 64, 28, 28}, 4},  {{1, 2, 400, 400}, 1},
      {{2, 16, 9, 9}, 16},  {{1, 3000, 2, 2}, 3},  {{3, 6, 5}, 2},
      {{2, 32, 20, 20}, 8}, {{2, 48, 10, 10}, 48}, {{2, 37, 11, 13}, 37}};
  const int32_t acts[] = {NORMKIT_ACTIVATION_NONE, NORMKIT_ACTIVATION_RELU,
                          NORMKIT_ACTIVATION_SILU};
  int k = 0;
  for (const Pair& pair : kPairs) {
    for (const auto& [shape, groups] : shapes) {
      for (normkit_layout layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
        for (bool in_place : {false, true}) {
          if (in_place && pair.x != pair.y) continue;
          const int32_t act = acts[k % 3];
          const bool shifted = k % 2 == 1;
          if (k++ % every != 0) continue;
          SCOPED_TRACE(std::string(DtypeLabel(pair.x)) + " -> " + DtypeLabel(pair.y) +
                       " C=" + std::to_string(shape[1]) + " G=" + std::to_string(groups) +
                       (layout ? " NHWC" : " NCHW") + " act " + std::to_string(act) +
                       (shifted ? " shifted" : "") + (in_place ? " in place" : ""));
          RunGroupNormCase(pair, {shape, groups, layout, act, shifted}, in_place, 2);
        }
      }
    }
  }
}

TEST(HalfStorage, GroupNormEveryPairAndPlan) {
  RunGroupNormPlans(1);
}

// The kernels load half storage per SIMD target (F16C or NEON conversions, or the
// integer ones): a share of the cases on every target this CPU supports.
TEST(HalfStorage, GroupNormPlansOnEveryTarget) {
  ForEachHalfTarget([] {
    RunGroupNormPlans(5);  // prime to the 2 and 3 that pick alignment and activation
  });
}

// bfloat16 x near FLT_MAX (values to 3e38): the groups' float sums overflow, and the exact
// statistics read the half values; every plan the half-x kernels take (batched, chained
// into float32 y, fused, channels-last instance norm and blocks), x off a vector boundary.
TEST(HalfStorage, GroupNormNearFltMax) {
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> shapes = {{{2, 32, 7, 7}, 8},
                                                                        {{2, 32, 20, 20}, 8},
                                                                        {{1, 64, 28, 28}, 4},
                                                                        {{2, 48, 10, 10}, 48},
                                                                        {{1, 2, 400, 400}, 1}};
  for (const Pair& pair : {Pair{kBF16, kBF16}, Pair{kBF16, kF32}}) {
    for (const auto& [shape, groups] : shapes) {
      for (normkit_layout layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
        SCOPED_TRACE(std::string(DtypeLabel(pair.y)) + " C=" + std::to_string(shape[1]) +
                     (layout ? " NHWC" : " NCHW"));
        RunGroupNormCase(pair, {shape, groups, layout, NORMKIT_ACTIVATION_NONE, true}, false, 2, 1,
                         6e37f);
      }
    }
  }
}

// From memory, streaming half outputs (25.7 MB of bfloat16), on three threads.
TEST(HalfStorage, GroupNormLargeTensorsStreamAndThread) {
  for (normkit_layout layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    SCOPED_TRACE(layout ? "NHWC" : "NCHW");
    RunGroupNormCase({kBF16, kBF16},
                     {{4, 64, 224, 224}, 32, layout, NORMKIT_ACTIVATION_SILU, false}, false, 3, 97);
  }
}

}  // namespace
}  // namespace normkit_test
