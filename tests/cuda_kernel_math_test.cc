// SPDX-License-Identifier: Apache-2.0
// The CUDA kernels' arithmetic, run on the CPU. Everything a CUDA thread computes lives
// in host-and-device headers (cuda/*_math.h); here each kernel's grid is replayed on
// the host (every block, every thread, the same index walks, chunk plans and merges)
// and the result is compared with the double references. The half storage paths replay
// with host bfloat16 / float16 types (HostHalf) in place of __nv_bfloat16 / __half. This runs in
// every build, GPU or not; what it cannot check (launches, shared-memory reductions, device math
// libraries) is covered by tests/cuda_test.cc on a machine with a GPU.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/affine_math.h"
#include "cuda/channel_cursor.h"
#include "cuda/norm_cluster_math.h"
#include "cuda/norm_math.h"
#include "cuda/shift_sum_math.h"
#include "half_reference.h"
#include "norm_reference.h"
#include "shift_sum_reference.h"
#include "test_util.h"

namespace normkit_test {

// bfloat16 / float16 storage on the host: the bits, widened and rounded by the plain
// reference conversions (half_reference.h), so the kernels' half template paths (device
// code with __nv_bfloat16 / __half) replay here too.
template <int kFormat>  // 0: bfloat16, 1: float16
struct HostHalf {
  uint16_t bits;
  static HalfFormat Format() { return kFormat == 0 ? kBFloat16 : kFloat16; }
};
using HostBF16 = HostHalf<0>;
using HostF16 = HostHalf<1>;

// Found by argument-dependent lookup from the kernels' Load4 / Store4 calls.
template <int kFormat>
normkit::cuda::Float4 Load4(const HostHalf<kFormat>* p) {
  const auto f = [&](int i) {
    return static_cast<float>(Decode(p[i].bits, HostHalf<kFormat>::Format()));
  };
  return {f(0), f(1), f(2), f(3)};
}
template <int kFormat>
void Store4(HostHalf<kFormat>* p, const normkit::cuda::Float4& v) {
  const HalfFormat fmt = HostHalf<kFormat>::Format();
  p[0].bits = Narrow(v.x, fmt), p[1].bits = Narrow(v.y, fmt);
  p[2].bits = Narrow(v.z, fmt), p[3].bits = Narrow(v.w, fmt);
}

}  // namespace normkit_test

namespace normkit {
namespace cuda {
template <int kFormat>
struct Element<normkit_test::HostHalf<kFormat>> {
  using H = normkit_test::HostHalf<kFormat>;
  static float ToFloat(H v) {
    return static_cast<float>(normkit_test::Decode(v.bits, H::Format()));
  }
  static H FromFloat(float v) { return {normkit_test::Narrow(v, H::Format())}; }
};
}  // namespace cuda
}  // namespace normkit

namespace normkit_test {
namespace {

using normkit::Moments;
using normkit::cuda::AffineShape;
using normkit::cuda::ClusterRuns;
using normkit::cuda::ClusterUnits;
using normkit::cuda::DivModCursor;
using normkit::cuda::FlatUnits;
using normkit::cuda::NormPlan;
using normkit::cuda::NormShape;
using normkit::cuda::ShiftedSums;
using normkit::cuda::UnitAffine;

constexpr int64_t kThreads = 256;  // kBlockThreads of the kernels

TEST(CudaKernelMath, DivModCursorMatchesDivision) {
  for (int64_t divisor : {1, 2, 3, 7, 16, 255, 256, 257, 1000}) {
    for (int64_t stride : {1, 32, 255, 256, 257, 1024}) {
      for (int64_t start : {0, 1, 5, 300}) {
        DivModCursor at(start, stride, divisor);
        for (int64_t i = start; i < start + 40 * stride; i += stride, at.Next()) {
          ASSERT_EQ(at.quot, i / divisor) << i << " / " << divisor << " stride " << stride;
          ASSERT_EQ(at.rem, i % divisor) << i << " % " << divisor << " stride " << stride;
        }
      }
    }
  }
}

TEST(CudaKernelMath, AffineGridMatchesReference) {
  struct Case {
    int64_t N, C, S;
  };
  for (const Case& k :
       {Case{2, 3, 5}, Case{1, 17, 1000}, Case{3, 5, 4099}, Case{2, 1024, 1}, Case{1, 3, 9000}}) {
    for (bool cl : {false, true}) {
      for (bool per_sample : {false, true}) {
        SCOPED_TRACE("N=" + std::to_string(k.N) + " C=" + std::to_string(k.C) +
                     " S=" + std::to_string(k.S) + (cl ? " NHWC" : " NCHW") +
                     (per_sample ? " per-sample" : ""));
        const std::vector<float> x = RandomVector(k.N * k.C * k.S, 1);
        const int64_t params = per_sample ? k.N * k.C : k.C;
        const std::vector<float> scale = RandomVector(params, 2), shift = RandomVector(params, 3);
        std::vector<float> y(x.size(), NAN);
        const AffineShape shape = AffineShape::Of(k.C, k.S, per_sample, cl);
        for (int64_t block = 0; block < k.N * shape.chunks; ++block)
          for (int64_t t = 0; t < kThreads; ++t)
            normkit::cuda::AffineThread(x.data(), y.data(), scale.data(), shift.data(), shape,
                                        block, t, kThreads);
        const std::vector<double> want =
            ReferenceAffine(x, k.N, k.C, k.S, cl, scale.data(), shift.data(), per_sample);
        for (size_t i = 0; i < y.size(); ++i) {
          const double mag = std::fabs(want[i]) + 8.0;  // |x * scale| + |shift| <= 8
          ASSERT_NEAR(y[i], want[i], 4 * 1.2e-7 * mag) << "element " << i;
        }
      }
    }
  }
}

// Batch norm's mean-first form on the 64-bit kernel: (x - center) * scale + shift per
// channel, exact when the centers are 10^6 times the spread.
TEST(CudaKernelMath, AffineWithCenterMatchesReference) {
  for (bool cl : {false, true}) {
    const int64_t N = 2, C = 7, S = 1000;
    std::vector<float> center = RandomVector(C, 4), x = RandomVector(N * C * S, 5);
    for (float& c : center) c *= 1e6f;
    for (int64_t i = 0; i < N * C * S; ++i) x[i] += center[cl ? i % C : (i / S) % C];
    const std::vector<float> scale = RandomVector(C, 6), shift = RandomVector(C, 7);
    std::vector<float> y(x.size(), NAN);
    const AffineShape shape = AffineShape::Of(C, S, false, cl);
    for (int64_t block = 0; block < N * shape.chunks; ++block)
      for (int64_t t = 0; t < kThreads; ++t)
        normkit::cuda::AffineThread(x.data(), y.data(), scale.data(), shift.data(), shape, block, t,
                                    kThreads, center.data());
    for (int64_t i = 0; i < N * C * S; ++i) {
      const int64_t c = cl ? i % C : (i / S) % C;
      const double want = (static_cast<double>(x[i]) - center[c]) * scale[c] + shift[c];
      ASSERT_NEAR(y[i], want, 4 * 1.2e-7 * (std::fabs(want) + 8.0)) << "element " << i;
    }
  }
}

// The CUDA norm: PlanNorm's chunks, each block's threads, the in-order merge, then the
// apply pass; `multiprocessors` steers the plan as the GPU's size does.
// The flat plan's block of one unit: pass 1 of every thread, the retry about the mean if
// the first element was a poor pivot, then pass 2 of every thread.
// TX / TY: how x and y are stored (float, or a host half type); the cache holds x as stored
// and a half block runs 8 items a thread, as on the device.
template <class TX, class TY>
void ReplayFlatUnit(const std::vector<TX>& x, std::vector<TY>* y, const FlatUnits& f, uint32_t unit,
                    const float* gamma, const float* beta, float eps, int32_t activation, bool rms,
                    float* mean_out, float* rstd_out) {
  const uint32_t threads =
      static_cast<uint32_t>(normkit::cuda::FlatThreads(f, sizeof(TX) == 2 ? 8 : 4));
  std::vector<TX> cache(f.count);
  const auto block_sums = [&](const auto& thread_sums) {
    ShiftedSums total;
    for (uint32_t t = 0; t < threads; ++t) {
      const ShiftedSums s = thread_sums(t);
      total.s1 += s.s1;
      total.s2 += s.s2;
    }
    return total;
  };
  float pivot = rms ? 0.0f : normkit::cuda::Element<TX>::ToFloat(x[f.Offset(unit, 0)]);
  ShiftedSums s = block_sums([&](uint32_t t) {
    return normkit::cuda::FlatLoadSums(x.data(), f, unit, t, threads, pivot, cache.data());
  });
  double mean, var;
  if (!normkit::cuda::FlatMoments(rms, s, f.count, true, &pivot, &mean, &var)) {
    s = block_sums([&](uint32_t t) {
      return normkit::cuda::FlatCacheSums(cache.data(), f, t, threads, pivot);
    });
    normkit::cuda::FlatMoments(rms, s, f.count, false, &pivot, &mean, &var);
  }
  const UnitAffine ua = UnitAffine::From(mean, var, eps, rms);
  if (mean_out) *mean_out = static_cast<float>(mean);
  if (rstd_out) *rstd_out = ua.rstd;
  for (uint32_t t = 0; t < threads; ++t)
    normkit::cuda::FlatApply(cache.data(), y->data(), f, unit, t, threads, ua, gamma, beta,
                             activation);
}

// Shared memory a block of an H100 may opt into (less the kernels' own): the flat plan;
// 0: the fused and split plans.
constexpr int64_t kH100SharedBytes = 227 * 1024 - 1024;

template <class TX, class TY>
void ReplayNorm(const std::vector<TX>& x, std::vector<TY>* y, const NormShape& s,
                int64_t multiprocessors, int64_t max_shared, const float* gamma, const float* beta,
                float eps, int32_t activation, bool rms, std::vector<float>* mean_out,
                std::vector<float>* rstd_out, NormPlan* plan_out) {
  const NormPlan plan = normkit::cuda::PlanNorm(s, multiprocessors);
  *plan_out = plan;
  if (normkit::cuda::UseFlatNorm(s, plan, max_shared, sizeof(TX))) {
    const FlatUnits f = FlatUnits::Of(s, /*aligned=*/true);
    for (int64_t unit = 0; unit < s.units; ++unit) {
      ReplayFlatUnit(x, y, f, static_cast<uint32_t>(unit), gamma, beta, eps, activation, rms,
                     mean_out ? &(*mean_out)[unit] : nullptr,
                     rstd_out ? &(*rstd_out)[unit] : nullptr);
    }
    return;
  }
  const bool cached = plan.chunks == 1 && s.count * 4 <= normkit::cuda::kCachedUnitBytes;
  std::vector<float> cache(static_cast<size_t>(plan.chunk));
  for (int64_t unit = 0; unit < s.units; ++unit) {
    Moments merged;
    for (int64_t q = 0; q < plan.chunks; ++q) {
      const int64_t begin = q * plan.chunk, end = std::min(begin + plan.chunk, s.count);
      ASSERT_LT(begin, end) << "empty chunk";
      Moments m;
      m.count = static_cast<double>(end - begin);
      double sum = 0.0;
      for (int64_t t = 0; t < kThreads; ++t)
        sum += normkit::cuda::ThreadSum(x.data(), s, unit, begin, end, t, kThreads, rms,
                                        cached ? cache.data() : nullptr);
      m.mean = sum / m.count;
      if (!rms) {
        for (int64_t t = 0; t < kThreads; ++t)
          m.m2 += normkit::cuda::ThreadDeviations(x.data(), s, unit, begin, end, t, kThreads,
                                                  m.mean, cached ? cache.data() : nullptr);
      }
      merged = normkit::MergeMoments(merged, m);
    }
    const double var = rms ? merged.mean : merged.m2 / merged.count;
    const UnitAffine ua = UnitAffine::From(merged.mean, var, eps, rms);
    if (mean_out) (*mean_out)[unit] = static_cast<float>(merged.mean);
    if (rstd_out) (*rstd_out)[unit] = ua.rstd;
    for (int64_t q = 0; q < plan.chunks; ++q) {
      const int64_t begin = q * plan.chunk, end = std::min(begin + plan.chunk, s.count);
      for (int64_t t = 0; t < kThreads; ++t)
        normkit::cuda::ThreadApply(x.data(), y->data(), s, unit, begin, end, t, kThreads, ua, gamma,
                                   beta, activation, cached ? cache.data() : nullptr);
    }
  }
}

TEST(CudaKernelMath, GroupNormGridMatchesReference) {
  struct Case {
    int64_t N, C, S, G;
  };
  // The last two have units of 65536 elements: split into chunks on a large GPU.
  for (const Case& k : {Case{2, 6, 7, 3}, Case{1, 64, 49, 32}, Case{3, 5, 13, 5},
                        Case{2, 12, 300, 1}, Case{1, 32, 4096, 2}, Case{1, 4, 65536, 4}}) {
    for (bool cl : {false, true}) {
      for (int64_t multiprocessors : {1, 132}) {
        for (int64_t max_shared : {int64_t{0}, kH100SharedBytes})
          for (int32_t act : {NORMKIT_ACTIVATION_NONE, NORMKIT_ACTIVATION_SILU}) {
            SCOPED_TRACE("N=" + std::to_string(k.N) + " C=" + std::to_string(k.C) +
                         " S=" + std::to_string(k.S) + " G=" + std::to_string(k.G) +
                         (cl ? " NHWC" : " NCHW") + " SMs=" + std::to_string(multiprocessors) +
                         " shared=" + std::to_string(max_shared) + " act=" + std::to_string(act));
            std::vector<float> x = RandomVector(k.N * k.C * k.S, 7);
            for (auto& v : x) v = 300.0f + 0.01f * v;  // mean 3e4 x std: needs the exact path
            const std::vector<float> gamma = RandomVector(k.C, 8), beta = RandomVector(k.C, 9);
            std::vector<float> y(x.size(), NAN), mean(k.N * k.G), rstd(k.N * k.G);
            const NormShape s = NormShape::ForGroups(k.N, k.C, k.S, k.G, cl);
            NormPlan plan;
            ReplayNorm(x, &y, s, multiprocessors, max_shared, gamma.data(), beta.data(), 1e-5f, act,
                       false, &mean, &rstd, &plan);
            if (multiprocessors == 132 && k.N * k.G < 264 && s.count > 32768) {
              EXPECT_GT(plan.chunks, 1);
            }
            const NormReference want =
                ReferenceGroupNorm(x, k.N, k.C, k.S, k.G, cl, gamma.data(), beta.data(), 1e-5, act);
            ExpectNormNear(y, want, "y");
            for (int64_t u = 0; u < k.N * k.G; ++u) {
              EXPECT_NEAR(mean[u], want.mean[u], 1e-6 * std::fabs(want.mean[u]));
              EXPECT_NEAR(rstd[u], want.rstd[u], 1e-5 * want.rstd[u]);
            }
          }
      }
    }
  }
}

// y within one unit in the last place of its format of the double reference rounded to it,
// or (float's error at the element's magnitude, where beta cancels the normalized value)
// one unit and that error; float32 y within 1e-5 of the magnitude.
template <class TY>
void ExpectStoredNormNear(const std::vector<TY>& y, const NormReference& want) {
  int bad = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double w = want.y[i];
    bool ok;
    if constexpr (std::is_same<TY, float>::value) {
      ok = std::fabs(y[i] - w) <= 1e-5 * want.magnitude[i] + 1e-7;
    } else {
      const HalfFormat f = TY::Format();
      const uint16_t got = y[i].bits, ref = Encode(w, f);
      const int d = static_cast<int>(got & 0x7FFF) - static_cast<int>(ref & 0x7FFF);
      const double unit =
          std::fabs(Decode(static_cast<uint16_t>((got & 0x7FFF) + 1), f) - Decode(got & 0x7FFF, f));
      ok = got == ref || ((got & 0x8000) == (ref & 0x8000) && (d == 1 || d == -1)) ||
           std::fabs(Decode(got, f) - w) <= unit + 1e-5 * want.magnitude[i];
    }
    if (!ok && ++bad <= 5) ADD_FAILURE() << "element " << i << " want " << w;
  }
  EXPECT_EQ(bad, 0);
}

// x's values stored as TX, and their widened floats.
template <class TX>
std::vector<TX> StoreAs(const std::vector<float>& values) {
  std::vector<TX> x(values.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = normkit::cuda::Element<TX>::FromFloat(values[i]);
  return x;
}
template <class TX>
std::vector<float> WidenAll(const std::vector<TX>& x) {
  std::vector<float> v(x.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = normkit::cuda::Element<TX>::ToFloat(x[i]);
  return v;
}

// The group norm grid with bfloat16 / float16 on either side (the kernels' half template
// paths: the flat plan with the unit cached as stored and 8 items a thread, the fused and
// split plans), against the double reference of x's stored values.
template <class TX, class TY>
void CheckHalfGroupNormGrid() {
  struct Case {
    int64_t N, C, S, G;
  };
  // Units of 4-element items (3600, 256 elements) and of single elements; units split
  // into chunks (65536).
  for (const Case& k : {Case{2, 6, 7, 3}, Case{1, 64, 49, 32}, Case{3, 5, 13, 5},
                        Case{2, 12, 300, 1}, Case{2, 8, 64, 2}, Case{1, 4, 65536, 4}}) {
    for (bool cl : {false, true}) {
      for (int64_t max_shared : {int64_t{0}, kH100SharedBytes}) {
        SCOPED_TRACE("N=" + std::to_string(k.N) + " C=" + std::to_string(k.C) + " S=" +
                     std::to_string(k.S) + " G=" + std::to_string(k.G) + (cl ? " NHWC" : " NCHW") +
                     " shared=" + std::to_string(max_shared) + " x bytes " +
                     std::to_string(sizeof(TX)) + " y bytes " + std::to_string(sizeof(TY)));
        std::vector<float> values = RandomVector(k.N * k.C * k.S, 17, -2.0f, 2.0f);
        for (auto& v : values) v += 3.0f;
        const std::vector<TX> x = StoreAs<TX>(values);
        const std::vector<float> gamma = RandomVector(k.C, 8), beta = RandomVector(k.C, 9);
        std::vector<TY> y(x.size());
        std::vector<float> mean(k.N * k.G), rstd(k.N * k.G);
        const NormShape s = NormShape::ForGroups(k.N, k.C, k.S, k.G, cl);
        NormPlan plan;
        ReplayNorm(x, &y, s, 132, max_shared, gamma.data(), beta.data(), 1e-5f,
                   NORMKIT_ACTIVATION_SILU, false, &mean, &rstd, &plan);
        const NormReference want =
            ReferenceGroupNorm(WidenAll(x), k.N, k.C, k.S, k.G, cl, gamma.data(), beta.data(), 1e-5,
                               NORMKIT_ACTIVATION_SILU);
        ExpectStoredNormNear(y, want);
        for (int64_t u = 0; u < k.N * k.G; ++u) {
          EXPECT_NEAR(mean[u], want.mean[u], 1e-6 * std::fabs(want.mean[u]));
          EXPECT_NEAR(rstd[u], want.rstd[u], 1e-5 * want.rstd[u]);
        }
      }
    }
  }
}

TEST(CudaKernelMath, HalfStorageGroupNormGridMatchesReference) {
  CheckHalfGroupNormGrid<HostBF16, HostBF16>();
  CheckHalfGroupNormGrid<HostF16, HostF16>();
  CheckHalfGroupNormGrid<HostBF16, float>();
  CheckHalfGroupNormGrid<float, HostF16>();
}

TEST(CudaKernelMath, RowNormGridMatchesReference) {
  for (int64_t D : {1, 7, 768, 40000}) {
    for (bool rms : {false, true}) {
      for (int64_t multiprocessors : {1, 132}) {
        for (int64_t max_shared : {int64_t{0}, kH100SharedBytes}) {
          SCOPED_TRACE("D=" + std::to_string(D) + (rms ? " rms" : " layer") + " SMs=" +
                       std::to_string(multiprocessors) + " shared=" + std::to_string(max_shared));
          const int64_t rows = 3;
          const std::vector<float> x = RandomVector(rows * D, 11);
          const std::vector<float> gamma = RandomVector(D, 12), beta = RandomVector(D, 13);
          std::vector<float> y(x.size(), NAN), rstd(rows);
          NormPlan plan;
          ReplayNorm(x, &y, NormShape::ForRows(rows, D), multiprocessors, max_shared, gamma.data(),
                     rms ? nullptr : beta.data(), 1e-5f, NORMKIT_ACTIVATION_NONE, rms, nullptr,
                     &rstd, &plan);
          const NormReference want =
              ReferenceRowNorm(x, rows, D, gamma.data(), rms ? nullptr : beta.data(), 1e-5, rms);
          ExpectNormNear(y, want, "y");
          for (int64_t r = 0; r < rows; ++r)
            EXPECT_NEAR(rstd[r], want.rstd[r], 1e-5 * want.rstd[r]);
        }
      }
    }
  }
}

// The warp-per-row plan: each row's 32 lanes (their items in registers), the float lane
// sums, the double butterfly, the corrected mean and the output, replayed lane by lane.
void ReplayWarpRows(const std::vector<float>& x, std::vector<float>* y, int64_t rows, uint32_t D,
                    const float* gamma, const float* beta, float eps, bool rms,
                    std::vector<float>* mean_out, std::vector<float>* rstd_out) {
  using normkit::cuda::Float4;
  constexpr uint32_t K = normkit::cuda::kWarpRowItems;
  const auto butterfly = [](std::vector<float> lane) {
    std::vector<double> s(lane.begin(), lane.end());
    for (uint32_t offset = 16; offset > 0; offset /= 2) {
      std::vector<double> next(32);
      for (uint32_t l = 0; l < 32; ++l) next[l] = s[l] + s[l ^ offset];
      s = next;
    }
    for (uint32_t l = 1; l < 32; ++l) EXPECT_EQ(s[l], s[0]);  // every lane the same bits
    return s[0];
  };
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x.data() + row * D;
    std::vector<std::vector<Float4>> v(32, std::vector<Float4>(K));
    std::vector<uint32_t> n(32);
    for (uint32_t l = 0; l < 32; ++l) {
      n[l] = normkit::cuda::WarpRowLaneItems(D, l);
      for (uint32_t i = 0; i < n[l]; ++i)
        v[l][i] = normkit::cuda::LoadFloat4(xr + 4 * (l + 32 * i));
    }
    const auto lane_sums = [&](float pivot, bool squares, std::vector<float>* s1,
                               std::vector<float>* s2) {
      s1->assign(32, 0.0f), s2->assign(32, 0.0f);
      for (uint32_t l = 0; l < 32; ++l) {
        Float4 regs[K];
        std::copy(v[l].begin(), v[l].end(), regs);
        normkit::cuda::WarpRowLaneSums(regs, n[l], pivot, squares, &(*s1)[l], &(*s2)[l]);
      }
    };
    std::vector<float> s1, s2;
    float m1 = 0.0f;
    if (!rms) {
      lane_sums(xr[0], false, &s1, &s2);
      m1 = normkit::cuda::WarpRowFirstMean(xr[0], butterfly(s1), D);
    }
    lane_sums(m1, true, &s1, &s2);
    double mean, var;
    normkit::cuda::WarpRowMoments(rms, m1, rms ? 0.0 : butterfly(s1), butterfly(s2), D, &mean,
                                  &var);
    const UnitAffine ua = UnitAffine::From(mean, var, eps, rms);
    (*mean_out)[row] = static_cast<float>(mean);
    (*rstd_out)[row] = ua.rstd;
    for (uint32_t c = 0; c < D; ++c)
      (*y)[row * D + c] = ua.Apply(xr[c], gamma ? gamma[c] : 1.0f, beta ? beta[c] : 0.0f, 0);
  }
}

// Rows of 1 to 16 items a lane, some lanes with one item fewer (D = 132, 1028) or none
// (D = 4, 12), the mean 1e4 standard deviations, and first elements (the pivots) 500
// standard deviations off: the corrected mean keeps every output within 1e-5.
TEST(CudaKernelMath, WarpRowsGridMatchesReference) {
  using normkit::cuda::NormShape;
  EXPECT_TRUE(normkit::cuda::UseWarpRows(NormShape::ForRows(4096, 768), true));
  EXPECT_TRUE(normkit::cuda::UseWarpRows(NormShape::ForRows(3, 2048), true));
  EXPECT_FALSE(normkit::cuda::UseWarpRows(NormShape::ForRows(3, 2052), true));
  EXPECT_FALSE(normkit::cuda::UseWarpRows(NormShape::ForRows(3, 766), true));
  EXPECT_FALSE(normkit::cuda::UseWarpRows(NormShape::ForRows(3, 768), false));
  for (uint32_t D : {4u, 12u, 132u, 768u, 1028u, 2048u}) {
    for (bool rms : {false, true}) {
      for (bool outlier : {false, true}) {
        SCOPED_TRACE("D=" + std::to_string(D) + (rms ? " rms" : " layer") +
                     (outlier ? " outlier pivots" : ""));
        const int64_t rows = 3;
        std::vector<float> x = RandomVector(rows * D, 14);
        if (!rms) {
          for (auto& v : x) v = 1000.0f + 0.1f * v;
        }
        if (outlier) {
          for (int64_t r = 0; r < rows; ++r) x[r * D] += 50.0f;
        }
        const std::vector<float> gamma = RandomVector(D, 15), beta = RandomVector(D, 16);
        std::vector<float> y(x.size(), NAN), mean(rows), rstd(rows);
        ReplayWarpRows(x, &y, rows, D, gamma.data(), rms ? nullptr : beta.data(), 1e-5f, rms, &mean,
                       &rstd);
        const NormReference want =
            ReferenceRowNorm(x, rows, D, gamma.data(), rms ? nullptr : beta.data(), 1e-5, rms);
        ExpectNormNear(y, want, "y");
        for (int64_t r = 0; r < rows; ++r) {
          EXPECT_NEAR(rstd[r], want.rstd[r], 1e-5 * want.rstd[r]);
          if (!rms) EXPECT_NEAR(mean[r], want.mean[r], 1e-7 * std::fabs(want.mean[r]));
        }
      }
    }
  }
}

TEST(CudaKernelMath, ConstantGroupGivesBeta) {
  const std::vector<float> x(2 * 4 * 9, 3.25f), beta = {0.5f, -1.0f, 2.0f, 0.0f};
  for (int64_t max_shared : {int64_t{0}, kH100SharedBytes}) {
    std::vector<float> y(x.size(), NAN);
    NormPlan plan;
    ReplayNorm(x, &y, NormShape::ForGroups(2, 4, 9, 2, false), 1, max_shared, nullptr, beta.data(),
               1e-5f, NORMKIT_ACTIVATION_NONE, false, nullptr, nullptr, &plan);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], beta[(i / 9) % 4]) << i;
  }
}

// The flat plan's pivot is the unit's first element: an outlier there (100 standard
// deviations off) must send the block back over its cache about the mean, and the
// result must stay exact.
TEST(CudaKernelMath, FlatPlanRetriesAboutTheMeanAfterAnOutlierPivot) {
  const int64_t N = 2, C = 8, S = 64, G = 2;
  for (bool cl : {false, true}) {
    std::vector<float> x = RandomVector(N * C * S, 21);
    for (auto& v : x) v = 1e4f + v;
    const NormShape s = NormShape::ForGroups(N, C, S, G, cl);
    const FlatUnits f = FlatUnits::Of(s, true);
    for (uint32_t unit = 0; unit < s.units; ++unit) x[f.Offset(unit, 0)] += 100.0f;
    const float pivot = x[f.Offset(0, 0)];
    ShiftedSums sums;
    std::vector<float> cache(f.count);
    for (uint32_t t = 0; t < 64; ++t) {
      const ShiftedSums p = normkit::cuda::FlatLoadSums(x.data(), f, 0, t, 64, pivot, cache.data());
      sums.s1 += p.s1, sums.s2 += p.s2;
    }
    float moved = pivot;
    double mean, var;
    EXPECT_FALSE(normkit::cuda::FlatMoments(false, sums, f.count, true, &moved, &mean, &var));
    EXPECT_NE(moved, pivot);
    std::vector<float> y(x.size(), NAN), means(N * G), rstds(N * G);
    NormPlan plan;
    ReplayNorm(x, &y, s, 132, kH100SharedBytes, nullptr, nullptr, 1e-5f, NORMKIT_ACTIVATION_NONE,
               false, &means, &rstds, &plan);
    const NormReference want =
        ReferenceGroupNorm(x, N, C, S, G, cl, nullptr, nullptr, 1e-5, NORMKIT_ACTIVATION_NONE);
    ExpectNormNear(y, want, cl ? "NHWC" : "NCHW");
  }
}

// A block's rows of x from channel c0 on; nullptr for a block without rows (no offset
// is applied to the null data() of an empty vector).
const float* RowsFrom(const std::vector<float>& rows, uint32_t c0) {
  return rows.empty() ? nullptr : rows.data() + c0;
}

// The cluster plan's grid: for each cluster (a slice of a sample's channels), every
// block takes its groups' moments (its threads' sums about the block's pivots, again
// about the block's means where a pivot was far off), the moments are merged in rank
// order, then every thread writes its rows. Each block sees its cached rows only in its
// own copy (`cache`, rows of the slice's C channels): in the copy of x it reads (rows of
// the tensor's channels, `stride`), the slice's part of them is NaN, so a block that
// read a cached row from memory would spoil its group.
void ReplayCluster(const std::vector<float>& x, std::vector<float>* y, const ClusterUnits& p,
                   const float* gamma, const float* beta, float eps, int32_t activation,
                   std::vector<float>* mean_out, std::vector<float>* rstd_out, int* retries) {
  const uint32_t C = p.C, G = p.groups, stride = p.stride;
  for (uint32_t cl = 0; cl < p.samples * p.slices; ++cl) {
    const uint32_t n = cl / p.slices, c0 = cl % p.slices * C;
    const size_t sample = static_cast<size_t>(n) * p.positions * stride;
    std::vector<Moments> merged(G);
    std::vector<std::vector<float>> memory(p.blocks), cache(p.blocks);
    for (uint32_t r = 0; r < p.blocks; ++r) {
      const uint32_t rows = p.RowsOf(r), cached = std::min(rows, p.cached_rows);
      const float* first = x.data() + sample + static_cast<size_t>(r) * p.rows * stride;
      memory[r].assign(first, first + static_cast<size_t>(rows) * stride);
      for (uint32_t i = 0; i < cached; ++i) {
        cache[r].insert(cache[r].end(), first + i * stride + c0, first + i * stride + c0 + C);
        std::fill(memory[r].begin() + i * stride + c0, memory[r].begin() + i * stride + c0 + C,
                  NAN);
      }
      const auto group_sums = [&](const std::vector<float>& pivots) {
        std::vector<ShiftedSums> sums(G);
        for (uint32_t t = 0; t < p.Active(); ++t) {
          const uint32_t col = t % p.cols, lane = t / p.cols;
          float pivot[4];
          for (int l = 0; l < 4; ++l) pivot[l] = pivots[(4 * col + l) / p.Cg];
          const normkit::cuda::LaneSums s = normkit::cuda::ClusterThreadSums(
              RowsFrom(memory[r], c0), cache[r].data(), p, rows, col, lane, pivot);
          for (int l = 0; l < 4; ++l) {
            sums[(4 * col + l) / p.Cg].s1 += s.s1[l];
            sums[(4 * col + l) / p.Cg].s2 += s.s2[l];
          }
        }
        return sums;
      };
      std::vector<float> pivots(G);
      for (uint32_t g = 0; g < G; ++g)
        pivots[g] =
            normkit::cuda::ClusterPivot(RowsFrom(memory[r], c0), cache[r].data(), p, rows, g);
      const double count = static_cast<double>(p.Cg) * rows;
      const std::vector<ShiftedSums> first_sums = group_sums(pivots);
      std::vector<Moments> block(G);
      std::vector<bool> retry(G);
      for (uint32_t g = 0; g < G; ++g)
        retry[g] =
            !normkit::cuda::ClusterMoments(first_sums[g], count, true, &pivots[g], &block[g]);
      if (std::find(retry.begin(), retry.end(), true) != retry.end()) {
        const std::vector<ShiftedSums> second = group_sums(pivots);
        for (uint32_t g = 0; g < G; ++g) {
          if (!retry[g]) continue;
          ++*retries;
          normkit::cuda::ClusterMoments(second[g], count, false, &pivots[g], &block[g]);
        }
      }
      for (uint32_t g = 0; g < G; ++g) merged[g] = normkit::MergeMoments(merged[g], block[g]);
    }
    std::vector<UnitAffine> affine(G);
    for (uint32_t g = 0; g < G; ++g) {
      affine[g] = UnitAffine::From(merged[g].mean, merged[g].m2 / merged[g].count, eps, false);
      (*mean_out)[cl * G + g] = static_cast<float>(merged[g].mean);
      (*rstd_out)[cl * G + g] = affine[g].rstd;
    }
    for (uint32_t r = 0; r < p.blocks; ++r) {
      float* out = y->data() + sample + static_cast<size_t>(r) * p.rows * stride + c0;
      for (uint32_t t = 0; t < p.Active(); ++t) {
        const uint32_t col = t % p.cols, lane = t / p.cols;
        float mean_f[4], scale[4], shift[4];
        for (int l = 0; l < 4; ++l) {
          const uint32_t c = 4 * col + l;
          const UnitAffine& ua = affine[c / p.Cg];
          mean_f[l] = ua.mean_f;
          scale[l] = ua.Scale(gamma != nullptr ? gamma[c0 + c] : 1.0f);
          shift[l] = ua.Shift(scale[l], beta != nullptr ? beta[c0 + c] : 0.0f);
        }
        normkit::cuda::ClusterThreadApply(RowsFrom(memory[r], c0), cache[r].data(), out, p,
                                          p.RowsOf(r), col, lane, mean_f, scale, shift, activation);
      }
    }
  }
}

// Adds `offset` to every element the cluster plan's pivots read (channels-last x).
void OffsetClusterPivots(const ClusterUnits& p, float offset, std::vector<float>* x) {
  for (uint32_t n = 0; n < p.samples; ++n)
    for (uint32_t r = 0; r < p.blocks; ++r)
      for (uint32_t i = 0; i < normkit::cuda::ClusterPivotRows(p, p.RowsOf(r)); ++i)
        for (uint32_t g = 0; g < p.groups * p.slices; ++g)
          for (uint32_t c = 0; c < normkit::cuda::ClusterPivotChannels(p); ++c)
            (*x)[(static_cast<size_t>(n) * p.positions + r * p.rows + i) * p.stride + g * p.Cg +
                 c] += offset;
}

// The plan the GPU gets for the seed shapes: clusters of 16 blocks, rows that fit in
// shared memory where the sample allows.
TEST(CudaKernelMath, ClusterPlanForTheSeedShapes) {
  ClusterUnits p;
  ASSERT_TRUE(ClusterUnits::Of(NormShape::ForGroups(128, 256, 784, 32, true), true,
                               kH100SharedBytes, 132, 16, &p));
  EXPECT_EQ(p.blocks, 16u);
  EXPECT_EQ(p.rows, 49u);
  EXPECT_EQ(p.cached_rows, 49u);
  EXPECT_EQ(p.threads, 256u);
  EXPECT_LE(p.SharedBytes(), 96u * 1024);  // two blocks per multiprocessor at least
  ASSERT_TRUE(ClusterUnits::Of(NormShape::ForGroups(32, 512, 3136, 32, true), true,
                               kH100SharedBytes, 132, 16, &p));
  EXPECT_EQ(p.blocks, 16u);
  EXPECT_EQ(p.rows, 196u);
  EXPECT_LT(p.cached_rows, p.rows);  // 392 KiB a block: the rest comes again from L2
  EXPECT_EQ(p.threads, 512u);        // one block a multiprocessor: more loads in flight
  EXPECT_LE(p.SharedBytes(), static_cast<size_t>(kH100SharedBytes));
  ASSERT_TRUE(ClusterUnits::Of(NormShape::ForGroups(8, 64, 16384, 64, true), true, kH100SharedBytes,
                               132, 16, &p));  // instance norm
  EXPECT_EQ(p.blocks, 16u);
  EXPECT_EQ(p.lanes, 32u);
  EXPECT_GT(p.cached_rows, 700u);
  EXPECT_LT(p.cached_rows, p.rows);
  ASSERT_TRUE(ClusterUnits::Of(NormShape::ForGroups(1, 64, 3136, 32, true), true, kH100SharedBytes,
                               132, 16, &p));
  EXPECT_EQ(p.blocks, 16u);
  EXPECT_EQ(p.samples, 1u);
  EXPECT_EQ(p.slices, 4u);  // N = 1: four clusters of 16 channels fill 64 multiprocessors
  // The VAE decoder's batch-1 group norms: eight clusters of 64 and of 16 channels.
  ASSERT_TRUE(ClusterUnits::Of(NormShape::ForGroups(1, 512, 4096, 32, true), true, kH100SharedBytes,
                               132, 16, &p));
  EXPECT_EQ(p.slices, 8u);
  EXPECT_EQ(p.blocks, 16u);
  EXPECT_EQ(p.cached_rows, p.rows);  // 256 rows of 256 bytes
  ASSERT_TRUE(ClusterUnits::Of(NormShape::ForGroups(1, 128, 65536, 32, true), true,
                               kH100SharedBytes, 132, 16, &p));
  EXPECT_EQ(p.slices, 8u);
  EXPECT_EQ(p.C, 16u);
  EXPECT_LT(p.cached_rows, p.rows);  // 4096 rows of 64 bytes: most of them
  EXPECT_GT(4 * p.cached_rows, 3 * p.rows);
  // The seed shapes' batches fill the GPU without slices.
  ASSERT_TRUE(ClusterUnits::Of(NormShape::ForGroups(8, 64, 16384, 64, true), true, kH100SharedBytes,
                               132, 16, &p));
  EXPECT_EQ(p.slices, 1u);
  // Channels-first, few large groups: 16 runs of 784 items (12.25 KiB) a group.
  ClusterRuns c;
  const NormShape edge = NormShape::ForGroups(1, 32, 12544, 8, false);
  ASSERT_TRUE(ClusterRuns::Of(edge, FlatUnits::Of(edge, true), kH100SharedBytes, 132, 16, &c));
  EXPECT_EQ(c.blocks, 16u);
  EXPECT_EQ(c.run_items, 784u);
  EXPECT_FALSE(ClusterRuns::Of(edge, FlatUnits::Of(edge, false), kH100SharedBytes, 132, 16, &c));
  // Not for it: channels-first, C not a multiple of 4, misaligned, C over 2048 (blocks of
  // more threads than the kernel's registers allow).
  EXPECT_FALSE(ClusterUnits::Of(NormShape::ForGroups(2, 4096, 49, 4096, true), true,
                                kH100SharedBytes, 132, 16, &p));
  EXPECT_FALSE(ClusterUnits::Of(NormShape::ForGroups(2, 64, 49, 32, false), true, kH100SharedBytes,
                                132, 16, &p));
  EXPECT_FALSE(ClusterUnits::Of(NormShape::ForGroups(2, 6, 49, 3, true), true, kH100SharedBytes,
                                132, 16, &p));
  EXPECT_FALSE(ClusterUnits::Of(NormShape::ForGroups(2, 64, 49, 32, true), false, kH100SharedBytes,
                                132, 16, &p));
}

// The cluster plans' test cases: their name, and data whose mean is 1e4 times its
// standard deviation.
std::string ClusterCaseName(int64_t N, int64_t C, int64_t S, int64_t G, uint32_t blocks,
                            bool outlier) {
  return "N=" + std::to_string(N) + " C=" + std::to_string(C) + " S=" + std::to_string(S) +
         " G=" + std::to_string(G) + " blocks=" + std::to_string(blocks) +
         (outlier ? " outlier pivots" : "");
}
std::vector<float> MeanFarFromSpread(int64_t n, uint32_t seed) {
  std::vector<float> x = RandomVector(n, seed);
  for (auto& v : x) v = 1000.0f + 0.1f * v;
  return x;
}

// A cluster plan's y (SiLU, eps 1e-5), mean and rstd against the double reference.
void ExpectClusterCaseNear(const std::vector<float>& x, const std::vector<float>& y,
                           const std::vector<float>& mean, const std::vector<float>& rstd,
                           int64_t N, int64_t C, int64_t S, int64_t G, bool channels_last,
                           const std::vector<float>& gamma, const std::vector<float>& beta) {
  const NormReference want = ReferenceGroupNorm(x, N, C, S, G, channels_last, gamma.data(),
                                                beta.data(), 1e-5, NORMKIT_ACTIVATION_SILU);
  ExpectNormNear(y, want, "y", 2e-5);
  for (int64_t u = 0; u < N * G; ++u) {
    EXPECT_NEAR(mean[u], want.mean[u], 1e-6 * std::fabs(want.mean[u]));
    EXPECT_NEAR(rstd[u], want.rstd[u], 1e-5 * want.rstd[u]);
  }
}

TEST(CudaKernelMath, ClusterPlanGridMatchesReference) {
  struct Case {
    int64_t N, C, S, G;
    uint32_t blocks, cached_rows;  // forced, to reach every split on small tensors
  };
  for (const Case& k :
       {Case{2, 64, 49, 32, 4, 13}, Case{1, 16, 300, 16, 16, 19}, Case{3, 12, 37, 3, 8, 5},
        Case{2, 4, 101, 1, 16, 0}, Case{1, 256, 30, 1, 7, 30}, Case{2, 8, 5, 2, 4, 1},
        Case{1, 1024, 9, 4, 2, 3}, Case{1, 128, 50, 32, 16, 2}, Case{2, 48, 20, 12, 4, 3}}) {
    for (bool outlier : {false, true}) {
      SCOPED_TRACE(ClusterCaseName(k.N, k.C, k.S, k.G, k.blocks, outlier));
      std::vector<float> x = MeanFarFromSpread(k.N * k.C * k.S, 31);
      const std::vector<float> gamma = RandomVector(k.C, 32), beta = RandomVector(k.C, 33);
      ClusterUnits p;
      ASSERT_TRUE(ClusterUnits::Of(NormShape::ForGroups(k.N, k.C, k.S, k.G, true), true,
                                   kH100SharedBytes, 132, 16, &p));
      // Few samples: slices of whole groups, 16 channels at least, 132 multiprocessors.
      SCOPED_TRACE("slices=" + std::to_string(p.slices));
      if (k.C == 64 || k.C == 1024) EXPECT_EQ(p.slices, 4u);
      if (k.C == 128) EXPECT_EQ(p.slices, 8u);
      if (k.C == 48) EXPECT_EQ(p.slices, 2u);
      EXPECT_EQ(p.C * p.slices, static_cast<uint32_t>(k.C));
      EXPECT_EQ(p.stride, static_cast<uint32_t>(k.C));
      p.blocks = k.blocks;
      p.rows = static_cast<uint32_t>((k.S + k.blocks - 1) / k.blocks);
      p.cached_rows = std::min(k.cached_rows, p.rows);
      // Every element the pivots read 500 standard deviations off.
      if (outlier) OffsetClusterPivots(p, 50.0f, &x);
      std::vector<float> y(x.size(), NAN), mean(k.N * k.G), rstd(k.N * k.G);
      int retries = 0;
      ReplayCluster(x, &y, p, gamma.data(), beta.data(), 1e-5f, NORMKIT_ACTIVATION_SILU, &mean,
                    &rstd, &retries);
      // Outliers on the pivots' elements move them far from the mean, unless they are
      // much of a block's part of the group.
      const bool few =
          4 * normkit::cuda::ClusterPivotRows(p, p.rows) * normkit::cuda::ClusterPivotChannels(p) <
          p.Cg * p.rows;
      if (!outlier) EXPECT_EQ(retries, 0);
      if (outlier && few) EXPECT_GT(retries, 0);
      ExpectClusterCaseNear(x, y, mean, rstd, k.N, k.C, k.S, k.G, true, gamma, beta);
    }
  }
}

// The channels-first cluster plan's grid: each block's run (its own copy, as shared
// memory holds it), its moments about the run's pivot (again about its mean where that
// was far off), the merge in rank order, then each thread's output from the run.
void ReplayClusterRuns(const std::vector<float>& x, std::vector<float>* y, const FlatUnits& f,
                       const ClusterRuns& c, const float* gamma, const float* beta, float eps,
                       int32_t activation, std::vector<float>* mean_out,
                       std::vector<float>* rstd_out, int* retries) {
  for (uint32_t unit = 0; unit < c.units; ++unit) {
    Moments merged;
    std::vector<std::vector<float>> runs(c.blocks);
    for (uint32_t r = 0; r < c.blocks; ++r) {
      const uint32_t items = c.ItemsOf(r);
      const float* first = x.data() + f.Offset(unit, 4 * r * c.run_items);
      runs[r].assign(first, first + 4 * items);
      FlatUnits local = f;
      local.items = items;
      const auto block_sums = [&](float pivot) {
        ShiftedSums total;
        for (uint32_t t = 0; t < c.threads; ++t) {
          const ShiftedSums s =
              normkit::cuda::FlatCacheSums(runs[r].data(), local, t, c.threads, pivot);
          total.s1 += s.s1, total.s2 += s.s2;
        }
        return total;
      };
      float pivot = normkit::cuda::RunPivot(runs[r].data(), 4 * items);
      Moments m;
      if (!normkit::cuda::ClusterMoments(block_sums(pivot), 4.0 * items, true, &pivot, &m)) {
        ++*retries;
        normkit::cuda::ClusterMoments(block_sums(pivot), 4.0 * items, false, &pivot, &m);
      }
      merged = normkit::MergeMoments(merged, m);
    }
    const UnitAffine ua = UnitAffine::From(merged.mean, merged.m2 / merged.count, eps, false);
    (*mean_out)[unit] = static_cast<float>(merged.mean);
    (*rstd_out)[unit] = ua.rstd;
    for (uint32_t r = 0; r < c.blocks; ++r) {
      for (uint32_t t = 0; t < c.threads; ++t)
        normkit::cuda::FlatApplyRun(runs[r].data(), y->data(), f, unit, r * c.run_items,
                                    c.ItemsOf(r), t, c.threads, ua, gamma, beta, activation);
    }
  }
}

TEST(CudaKernelMath, ClusterRunsGridMatchesReference) {
  struct Case {
    int64_t N, C, S, G;
    uint32_t blocks;  // forced, to reach every split on small tensors
  };
  // HW = 9999 puts channel boundaries inside items; 12 items in 5 blocks leave one empty.
  for (const Case& k : {Case{1, 8, 9999, 2, 16}, Case{2, 6, 64, 3, 5}, Case{1, 4, 12, 1, 5},
                        Case{3, 16, 100, 4, 7}}) {
    for (bool outlier : {false, true}) {
      SCOPED_TRACE(ClusterCaseName(k.N, k.C, k.S, k.G, k.blocks, outlier));
      std::vector<float> x = MeanFarFromSpread(k.N * k.C * k.S, 41);
      const std::vector<float> gamma = RandomVector(k.C, 42), beta = RandomVector(k.C, 43);
      const NormShape s = NormShape::ForGroups(k.N, k.C, k.S, k.G, false);
      const FlatUnits f = FlatUnits::Of(s, true);
      ClusterRuns c;
      ASSERT_TRUE(ClusterRuns::Of(s, f, kH100SharedBytes, 132, 16, &c));
      c.blocks = k.blocks;
      c.run_items = (f.items + k.blocks - 1) / k.blocks;
      if (outlier) {  // each run's first 32 elements (its pivot's) 500 standard deviations off
        for (uint32_t unit = 0; unit < c.units; ++unit)
          for (uint32_t r = 0; r < c.blocks; ++r)
            for (uint32_t e = 0; e < std::min(32u, 4 * c.ItemsOf(r)); ++e)
              x[f.Offset(unit, 4 * r * c.run_items + e)] += 50.0f;
      }
      std::vector<float> y(x.size(), NAN), mean(k.N * k.G), rstd(k.N * k.G);
      int retries = 0;
      ReplayClusterRuns(x, &y, f, c, gamma.data(), beta.data(), 1e-5f, NORMKIT_ACTIVATION_SILU,
                        &mean, &rstd, &retries);
      if (!outlier) EXPECT_EQ(retries, 0);
      if (outlier && 4 * 32 < 4 * c.run_items) EXPECT_GT(retries, 0);
      ExpectClusterCaseNear(x, y, mean, rstd, k.N, k.C, k.S, k.G, false, gamma, beta);
    }
  }
}

TEST(CudaKernelMath, U32DividerMatchesDivision) {
  using normkit::cuda::U32Divider;
  std::vector<uint32_t> divisors = {
      1, 2, 3, 7, 49, 196, 3136, 12544, 65536, 1u << 30, (1u << 30) + 1, (1u << 31) - 1, 1u << 31};
  std::vector<uint32_t> dividends = {
      0, 1, 2, 48, 49, 50, 65535, 65536, (1u << 31) - 1, (1u << 31) - 2, 1u << 30};
  uint32_t r = 12345;
  for (int i = 0; i < 200; ++i) {
    r = r * 1664525u + 1013904223u;
    divisors.push_back((r >> 1) % 100000 + 1);
    r = r * 1664525u + 1013904223u;
    dividends.push_back(r >> 1);
  }
  for (uint32_t d : divisors) {
    const U32Divider div = U32Divider::Of(d);
    for (uint32_t n : dividends) {
      ASSERT_EQ(div.Div(n), n / d) << n << " / " << d;
      ASSERT_EQ(div.Mod(n), n % d) << n << " % " << d;
    }
  }
}

// The flat affine kernel: each element's parameter index, and, where the tensor takes
// vector items of 4 (floats) or 8 (halves) elements, the lanes of an item (one plane
// channels-first; c..c+lanes-1 channels-last).
TEST(CudaKernelMath, AffineIndexMatchesCoordinates) {
  using normkit::cuda::AffineIndex;
  struct Case {
    int64_t N, C, S;
  };
  for (const Case& k :
       {Case{2, 3, 5}, Case{3, 8, 12}, Case{2, 1024, 1}, Case{1, 4, 9000}, Case{2, 16, 8}}) {
    for (bool cl : {false, true}) {
      for (bool per_sample : {false, true}) {
        const AffineIndex ix = AffineIndex::Of(k.C, k.S, per_sample, cl);
        for (int lanes : {4, 8}) {
          const bool vector =
              normkit::cuda::AffineVectorizable(k.C, k.S, cl, nullptr, 2, nullptr, 2, lanes);
          for (int64_t e = 0; e < k.N * k.C * k.S; ++e) {
            const int64_t n = e / (k.C * k.S);
            const int64_t c = cl ? e % k.C : (e / k.S) % k.C;
            const int64_t want = per_sample ? n * k.C + c : c;
            ASSERT_EQ(ix.Param(static_cast<uint32_t>(e)), want) << "element " << e;
            if (vector) {
              const int64_t lane = e % lanes;
              const uint32_t first = ix.Param(static_cast<uint32_t>(e - lane));
              ASSERT_EQ(first + (cl ? lane : 0), want)
                  << "lane " << lane << " of " << lanes << ", element " << e;
            }
          }
        }
      }
    }
  }
}

// ---- shift-sum ----

template <class T>
std::vector<double> Abs(const std::vector<T>& v) {
  std::vector<double> a(v.size());
  for (size_t i = 0; i < v.size(); ++i) a[i] = std::fabs(static_cast<double>(v[i]));
  return a;
}

template <class T>
std::vector<double> AsDouble(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Replays the kernels' grids: fn(b, r, v) over the shifted domain, fn(b, c, i, j) over
// the planes of x or of the stack, checking each element is visited exactly once.
template <class T, class Fn>
void ForShifted(const normkit::cuda::ShiftSumMath<T>& m, int64_t samples, const Fn& fn) {
  for (int64_t row = 0; row < samples * m.p.H_out; ++row) {
    int64_t b, r;
    m.ShiftedRow(row, &b, &r);
    for (int64_t v = 0; v < m.p.W_out; ++v) fn(b, r, v);
  }
}

template <class T, class Fn>
void ForPlanes(const normkit::cuda::ShiftSumMath<T>& m, int64_t per_plane, int64_t width,
               const Fn& fn) {
  std::vector<int> seen(static_cast<size_t>(m.p.B * m.p.C * per_plane * width), 0);
  for (int64_t row = 0; row < m.PlaneRows(per_plane); ++row) {
    const normkit::cuda::PlaneCoord at = m.PlaneRow(row, per_plane);
    for (int64_t col = 0; col < m.PlaneCols(width); ++col) {
      int64_t c, j;
      m.PlaneCol(at, col, &c, &j);
      ASSERT_TRUE(at.b < m.p.B && c < m.p.C && at.i < per_plane && j < width);
      ++seen[static_cast<size_t>(((at.b * m.p.C + c) * per_plane + at.i) * width + j)];
      fn(at.b, c, at.i, j);
    }
  }
  for (int s : seen) ASSERT_EQ(s, 1) << "an element was not visited exactly once";
}

// The problem of geometry g in layout cl, with `mask` (g's mask kind; unused for none).
template <class T>
normkit::ShiftSumProblem<T> ProblemOf(const Geometry& g, bool cl, const T* mask) {
  normkit::ShiftSumProblem<T> p;
  p.B = g.B, p.C = g.C, p.H = g.H, p.W = g.W, p.step = g.S;
  p.along_h = g.along_h;
  p.channels_last = cl;
  p.mask_kind = static_cast<normkit::ShiftMask>(g.mask_kind);
  p.mask = g.mask_kind == NORMKIT_MASK_NONE ? nullptr : mask;
  p.scale = static_cast<T>(g.scale);
  normkit::FinishShiftSumProblem(&p);
  return p;
}

template <class T>
void CheckShiftSum(const Geometry& g, bool cl) {
  using Math = normkit::cuda::ShiftSumMath<T>;
  const int64_t nx = g.B * g.C * g.H * g.W, ny = g.B * g.Hout() * g.Wout();
  std::vector<T> x(nx), y(ny), mask(std::max<int64_t>(g.MaskElems(), 1));
  {
    const auto fx = RandomVector(nx, 21, -1, 1), fy = RandomVector(ny, 22, -1, 1),
               fm = RandomVector(static_cast<int64_t>(mask.size()), 23, 0, 1);
    std::copy(fx.begin(), fx.end(), x.begin());
    std::copy(fy.begin(), fy.end(), y.begin());
    std::copy(fm.begin(), fm.end(), mask.begin());
    for (size_t i = 0; i < mask.size(); i += 7) mask[i] = T(0);
  }
  const normkit::ShiftSumProblem<T> p = ProblemOf(g, cl, mask.data());
  const Math m{p};
  const std::vector<double> xd = AsDouble(x), yd = AsDouble(y), md = AsDouble(mask);
  Geometry ga = g;
  ga.scale = std::fabs(g.scale);

  // Forward, normalizer and the count of covering channels.
  std::vector<T> yo(ny, T(-9));
  ForShifted(m, g.B, [&](int64_t b, int64_t r, int64_t v) {
    yo[m.YOffset(b, r, v)] = m.Forward(x.data(), b, r, v);
  });
  ExpectClose(yo, RefForward(g, xd, md, cl), RefForward(ga, Abs(x), Abs(mask), cl), g.C, "forward");
  const int64_t samples = g.PerSample() ? g.B : 1;
  const std::vector<double> phi_s = RefNormalizer(g, md, false);
  std::vector<T> po(phi_s.size(), T(-9));
  ForShifted(m, samples, [&](int64_t b, int64_t r, int64_t v) {
    po[m.NormalizerOffset(b, r, v)] = m.Normalizer(b, r, v, false);
  });
  ExpectClose(po, phi_s, phi_s, g.C, "normalizer");
  const std::vector<double> count = RefNormalizer(g, md, true);
  for (int64_t r = 0; r < g.Hout(); ++r)
    for (int64_t v = 0; v < g.Wout(); ++v)
      ASSERT_EQ(m.CoverCount(r, v), count[r * g.Wout() + v]) << "cover count at " << r << "," << v;

  // Adjoint, both pseudo-inverses, GAP step: over x's planes.
  std::vector<T> xo(nx, T(-9));
  ForPlanes(m, g.H, g.W, [&](int64_t b, int64_t c, int64_t h, int64_t w) {
    xo[m.XOffset(b, c, h, w)] = m.Adjoint(y.data(), b, c, h, w);
  });
  ExpectClose(xo, RefAdjoint(g, yd, md, cl), RefAdjoint(ga, Abs(y), Abs(mask), cl), 1, "adjoint");

  std::vector<double> z(ny);
  for (int64_t k = 0; k < ny; ++k) {
    const double pv = phi_s[(g.PerSample() ? k : k % (g.Hout() * g.Wout()))];
    z[k] = pv == 0 ? 0.0 : yd[k] / (g.scale * g.scale * pv);
  }
  for (const T* normalizer : {static_cast<const T*>(nullptr), static_cast<const T*>(po.data())}) {
    std::fill(xo.begin(), xo.end(), T(-9));
    ForPlanes(m, g.H, g.W, [&](int64_t b, int64_t c, int64_t h, int64_t w) {
      xo[m.XOffset(b, c, h, w)] = m.PinvMoorePenrose(y.data(), normalizer, b, c, h, w);
    });
    ExpectClose(xo, RefAdjoint(g, z, md, cl), RefAdjoint(ga, Abs(z), Abs(mask), cl), g.C, "pinv");
  }
  {
    std::vector<double> want(nx), mag(nx);
    for (int64_t b = 0; b < g.B; ++b)
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t h = 0; h < g.H; ++h)
          for (int64_t w = 0; w < g.W; ++w) {
            const int64_t r = g.R(c, h), v = g.V(c, w), i = g.XIndex(b, c, h, w, cl);
            const double mv = g.M(md, b, c, h, w);
            want[i] =
                mv == 0.0 ? 0.0 : yd[g.YIndex(b, r, v)] / (g.scale * count[r * g.Wout() + v]) / mv;
            mag[i] = std::fabs(want[i]);
          }
    ForPlanes(m, g.H, g.W, [&](int64_t b, int64_t c, int64_t h, int64_t w) {
      xo[m.XOffset(b, c, h, w)] = m.PinvDivideByMask(y.data(), b, c, h, w);
    });
    ExpectClose(xo, want, mag, 4, "pinv divide-by-mask");
  }
  {
    const double lambda = 0.7, gamma = 0.25;
    const std::vector<double> ax = RefForward(g, xd, md, cl),
                              axmag = RefForward(ga, Abs(x), Abs(mask), cl);
    std::vector<double> res(ny), resmag(ny);
    for (int64_t k = 0; k < ny; ++k) {
      const double d =
          g.scale * g.scale * phi_s[(g.PerSample() ? k : k % (g.Hout() * g.Wout()))] + gamma;
      res[k] = (yd[k] - ax[k]) / d;
      resmag[k] = (std::fabs(yd[k]) + axmag[k]) / d;
    }
    std::vector<T> residual(ny);
    ForShifted(m, g.B, [&](int64_t b, int64_t r, int64_t v) {
      residual[m.YOffset(b, r, v)] =
          m.GapResidual(x.data(), y.data(), nullptr, static_cast<T>(gamma), b, r, v);
    });
    std::vector<T> xg = x;
    ForPlanes(m, g.H, g.W, [&](int64_t b, int64_t c, int64_t h, int64_t w) {
      xg[m.XOffset(b, c, h, w)] += static_cast<T>(lambda) * m.Adjoint(residual.data(), b, c, h, w);
    });
    const std::vector<double> upd = RefAdjoint(g, res, md, cl),
                              updmag = RefAdjoint(ga, resmag, Abs(mask), cl);
    std::vector<double> want(nx), mag(nx);
    for (int64_t i = 0; i < nx; ++i) {
      want[i] = xd[i] + lambda * upd[i];
      mag[i] = std::fabs(xd[i]) + lambda * updmag[i] * g.C;
    }
    ExpectClose(xg, want, mag, g.C, "gap step");
  }

  // Shift over the stack's planes, unshift over x's: exact windows back.
  std::vector<T> xs(static_cast<size_t>(g.B * g.C * g.Hout() * g.Wout()), T(-9)), back(nx);
  ForPlanes(m, g.Hout(), g.Wout(), [&](int64_t b, int64_t c, int64_t r, int64_t v) {
    int64_t h, w;
    xs[m.StackOffset(b, c, r, v)] = m.Source(c, r, v, &h, &w) ? x[m.XOffset(b, c, h, w)] : T(0);
  });
  ForPlanes(m, g.H, g.W, [&](int64_t b, int64_t c, int64_t h, int64_t w) {
    back[m.XOffset(b, c, h, w)] = xs[m.StackOffset(b, c, m.Row(c, h), m.Col(c, w))];
  });
  EXPECT_EQ(back, x) << "unshift(shift(x)) != x";
  int64_t nonzero = 0;
  for (T v : xs) nonzero += v != T(0);
  EXPECT_LE(nonzero, nx) << "shift wrote outside the windows";

  // The row walks of the flat kernels (channels-first, along W) give the generic
  // per-element functions' bits, and the flat decoders the tensors' coordinates.
  if (!m.RowWalks()) return;
  using normkit::cuda::U32Divider;
  const auto div = [](int64_t d) { return U32Divider::Of(static_cast<uint32_t>(d)); };
  const normkit::cuda::FlatDecode dx{div(p.W), div(p.H), div(p.C)},
      dy{div(p.W_out), div(p.H_out), div(1)};
  std::vector<T> phi(static_cast<size_t>((p.PerSampleMask() ? g.B : 1) * p.H_out * p.W_out));
  ForShifted(m, p.PerSampleMask() ? g.B : 1, [&](int64_t b, int64_t r, int64_t v) {
    phi[m.NormalizerOffset(b, r, v)] = m.Normalizer(b, r, v, false);
  });
  std::vector<T> scaled(ny);
  for (int64_t i = 0; i < ny; ++i) {
    int64_t b, r, v;
    dy.Y(static_cast<uint32_t>(i), &b, &r, &v);
    ASSERT_EQ(m.YOffset(b, r, v), i);
    ASSERT_EQ(m.ForwardWalk(x.data(), b, r, v), m.Forward(x.data(), b, r, v)) << "y " << i;
    if (p.mask_kind == normkit::ShiftMask::kNone || p.mask_kind == normkit::ShiftMask::kHW) {
      std::vector<T> rows(static_cast<size_t>(p.C * p.W));  // what the row kernel copies
      for (int64_t c = 0; c < p.C; ++c)
        for (int64_t w = 0; w < p.W; ++w) rows[c * p.W + w] = x[m.XOffset(b, c, r, w)];
      const T* mask_row = p.mask_kind == normkit::ShiftMask::kHW ? p.mask + r * p.W : nullptr;
      ASSERT_EQ(m.ForwardFromRows(rows.data(), mask_row, r, v), m.Forward(x.data(), b, r, v))
          << "y " << i << " from rows";
    }
    ASSERT_EQ(m.GapResidualWalk(x.data(), y.data(), phi.data(), T(0.25), b, r, v),
              m.GapResidual(x.data(), y.data(), phi.data(), T(0.25), b, r, v))
        << "residual " << i;
    const T n = phi[m.NormalizerOffset(b, r, v)];  // the pinv kernel's first step
    scaled[i] = n == T(0) ? T(0) : y[i] / (p.scale * p.scale * n);
  }
  for (int64_t i = 0; i < nx; ++i) {
    int64_t b, c, h, w;
    dx.X(static_cast<uint32_t>(i), &b, &c, &h, &w);
    ASSERT_EQ(m.XOffset(b, c, h, w), i);
    const typename Math::XRow row = m.XRowAt(b, c, h);
    ASSERT_EQ(m.AdjointRow(y.data(), row, w), m.Adjoint(y.data(), b, c, h, w)) << "x " << i;
    const T pinv = m.PinvMoorePenrose(y.data(), phi.data(), b, c, h, w);
    ASSERT_EQ(m.PinvMoorePenroseRow(y.data(), phi.data(), row, w), pinv) << "pinv " << i;
    ASSERT_EQ(m.AdjointRow(scaled.data(), row, w), pinv) << "pinv in two steps " << i;
  }
}

// The shift-sum math on bfloat16 / float16 x and y (how the half kernels read them, through
// ValueAt) gives bitwise what it gives on their widened float values, for every element
// function and, channels-first along W, every row walk.
template <class H>
void CheckHalfShiftSumMath(const Geometry& g, bool cl) {
  const int64_t nx = g.B * g.C * g.H * g.W, ny = g.B * g.Hout() * g.Wout();
  const std::vector<H> xh = StoreAs<H>(RandomVector(nx, 31, -1, 1)),
                       yh = StoreAs<H>(RandomVector(ny, 32, -1, 1));
  const std::vector<float> xw = WidenAll(xh), yw = WidenAll(yh);
  std::vector<float> mask = RandomVector(std::max<int64_t>(g.MaskElems(), 1), 33, 0, 1);
  for (size_t i = 0; i < mask.size(); i += 7) mask[i] = 0.0f;
  const normkit::ShiftSumProblem<float> p = ProblemOf(g, cl, mask.data());
  const normkit::cuda::ShiftSumMath<float> m{p};
  std::vector<float> phi(static_cast<size_t>((p.PerSampleMask() ? g.B : 1) * p.H_out * p.W_out));
  ForShifted(m, p.PerSampleMask() ? g.B : 1, [&](int64_t b, int64_t r, int64_t v) {
    phi[m.NormalizerOffset(b, r, v)] = m.Normalizer(b, r, v, false);
  });
  ForShifted(m, g.B, [&](int64_t b, int64_t r, int64_t v) {
    ASSERT_EQ(m.Forward(xh.data(), b, r, v), m.Forward(xw.data(), b, r, v));
    ASSERT_EQ(m.GapResidual(xh.data(), yh.data(), phi.data(), 0.25f, b, r, v),
              m.GapResidual(xw.data(), yw.data(), phi.data(), 0.25f, b, r, v));
    if (m.RowWalks()) {
      ASSERT_EQ(m.ForwardWalk(xh.data(), b, r, v), m.Forward(xw.data(), b, r, v));
      ASSERT_EQ(m.GapResidualWalk(xh.data(), yh.data(), phi.data(), 0.25f, b, r, v),
                m.GapResidual(xw.data(), yw.data(), phi.data(), 0.25f, b, r, v));
      std::vector<H> rows(static_cast<size_t>(p.C * p.W));  // what the row kernel copies
      for (int64_t c = 0; c < p.C; ++c)
        for (int64_t w = 0; w < p.W; ++w) rows[c * p.W + w] = xh[m.XOffset(b, c, r, w)];
      if (p.mask_kind == normkit::ShiftMask::kNone) {
        ASSERT_EQ(m.ForwardFromRows(rows.data(), nullptr, r, v), m.Forward(xw.data(), b, r, v));
      }
    }
  });
  ForPlanes(m, g.H, g.W, [&](int64_t b, int64_t c, int64_t h, int64_t w) {
    ASSERT_EQ(m.Adjoint(yh.data(), b, c, h, w), m.Adjoint(yw.data(), b, c, h, w));
    ASSERT_EQ(m.PinvMoorePenrose(yh.data(), phi.data(), b, c, h, w),
              m.PinvMoorePenrose(yw.data(), phi.data(), b, c, h, w));
    ASSERT_EQ(m.PinvDivideByMask(yh.data(), b, c, h, w), m.PinvDivideByMask(yw.data(), b, c, h, w));
    if (m.RowWalks()) {
      const auto row = m.XRowAt(b, c, h);
      ASSERT_EQ(m.AdjointRow(yh.data(), row, w), m.Adjoint(yw.data(), b, c, h, w));
      ASSERT_EQ(m.PinvMoorePenroseRow(yh.data(), phi.data(), row, w),
                m.PinvMoorePenrose(yw.data(), phi.data(), b, c, h, w));
    }
  });
}

TEST(CudaKernelMath, ShiftSumGridsMatchReference) {
  const std::vector<Geometry> shapes = {
      {2, 3, 5, 19, 2, false, 0, 1.0},  {1, 1, 4, 7, 3, false, 0, 0.5},
      {2, 4, 1, 33, -3, false, 0, 1.0}, {1, 5, 6, 17, -1, true, 0, 2.0 / 5},
      {2, 3, 7, 9, 2, true, 0, 1.0},    {1, 6, 3, 40, 0, false, 0, 1.0},
      {2, 12, 3, 8, 3, false, 0, 0.75}};
  for (Geometry g : shapes) {
    for (int32_t kind = NORMKIT_MASK_NONE; kind <= NORMKIT_MASK_PHI_BCHW; ++kind) {
      g.mask_kind = kind;
      for (bool cl : {false, true}) {
        SCOPED_TRACE("B=" + std::to_string(g.B) + " C=" + std::to_string(g.C) +
                     " H=" + std::to_string(g.H) + " W=" + std::to_string(g.W) +
                     " S=" + std::to_string(g.S) + (g.along_h ? " along H" : " along W") +
                     " mask=" + std::to_string(kind) + (cl ? " NHWC" : " NCHW"));
        CheckShiftSum<float>(g, cl);
        CheckShiftSum<double>(g, cl);
        CheckHalfShiftSumMath<HostBF16>(g, cl);
        CheckHalfShiftSumMath<HostF16>(g, cl);
      }
    }
  }
}

}  // namespace
}  // namespace normkit_test
