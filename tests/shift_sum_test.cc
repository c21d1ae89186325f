// SPDX-License-Identifier: Apache-2.0
// Shift-sum operators against plain double references: forward, adjoint, normalizer,
// both pseudo-inverses, the GAP step, shift / unshift; every mask form, both layouts,
// both axes, float and double, odd sizes, negative steps. Plus the adjoint identity,
// seed 003's three formulations, and bitwise determinism across thread counts.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "hwy/targets.h"
#include "shift_sum_reference.h"
#include "test_util.h"

namespace normkit_test {
namespace {

// Values of type T in a test buffer; the reference reads them as double.
template <class T>
struct Data {
  std::vector<T> v;
  std::vector<double> d() const { return std::vector<double>(v.begin(), v.end()); }
};

template <class T>
Data<T> Random(int64_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  const std::vector<float> f =
      RandomVector(n, seed, static_cast<float>(lo), static_cast<float>(hi));
  return Data<T>{std::vector<T>(f.begin(), f.end())};
}

template <class T>
normkit_dtype DtypeOf() {
  return sizeof(T) == 8 ? NORMKIT_DTYPE_FLOAT64 : NORMKIT_DTYPE_FLOAT32;
}

template <class T>
normkit_tensor TensorOf(T* data, normkit_layout layout, const std::vector<int64_t>& shape) {
  normkit_tensor t;
  normkit_tensor_init(&t, data, DtypeOf<T>(), layout, static_cast<int32_t>(shape.size()),
                      shape.data());
  return t;
}

std::string Name(const Geometry& g, bool cl) {
  return "B=" + std::to_string(g.B) + " C=" + std::to_string(g.C) + " H=" + std::to_string(g.H) +
         " W=" + std::to_string(g.W) + " S=" + std::to_string(g.S) +
         (g.along_h ? " along H" : " along W") + " mask=" + std::to_string(g.mask_kind) +
         (cl ? " channels_last" : " channels_first");
}

template <class T>
void CheckAllOps(const Geometry& g, bool cl, int threads) {
  SCOPED_TRACE(Name(g, cl) + (sizeof(T) == 8 ? " double" : " float") +
               " threads=" + std::to_string(threads));
  const auto layout = cl ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
  const int64_t nx = g.B * g.C * g.H * g.W, ny = g.B * g.Hout() * g.Wout();
  Data<T> x = Random<T>(nx, 1), y = Random<T>(ny, 2);
  Data<T> mask = Random<T>(std::max<int64_t>(g.MaskElems(), 1), 3, 0.0, 1.0);
  for (size_t i = 0; i < mask.v.size(); i += 7) mask.v[i] = T(0);  // masked-out pixels
  const std::vector<double> md = mask.d();
  std::vector<double> absx(nx), absy(ny), absm(md.size());
  for (int64_t i = 0; i < nx; ++i) absx[i] = std::fabs(static_cast<double>(x.v[i]));
  for (int64_t i = 0; i < ny; ++i) absy[i] = std::fabs(static_cast<double>(y.v[i]));
  for (size_t i = 0; i < md.size(); ++i) absm[i] = std::fabs(md[i]);
  Geometry ga = g;
  ga.scale = std::fabs(g.scale);

  const normkit_shift_sum_params params = ParamsFor(g, mask.v.data());
  Context ctx(threads);
  const std::vector<int64_t> xshape = {g.B, g.C, g.H, g.W};
  const std::vector<int64_t> yshape = {g.B, 1, g.Hout(), g.Wout()};

  // Forward.
  std::vector<T> yo(ny, T(-9));
  normkit_tensor xt = TensorOf(x.v.data(), layout, xshape);
  normkit_tensor yt = TensorOf(yo.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, yshape);
  ASSERT_EQ(normkit_shift_sum(ctx.ctx, &xt, &params, &yt), NORMKIT_SUCCESS) << normkit_last_error();
  ExpectClose(yo, RefForward(g, x.d(), md, cl), RefForward(ga, absx, absm, cl), g.C, "forward");

  // Adjoint.
  std::vector<T> xo(nx, T(-9));
  normkit_tensor yin = TensorOf(y.v.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, yshape);
  normkit_tensor xot = TensorOf(xo.data(), layout, xshape);
  ASSERT_EQ(normkit_shift_sum_adjoint(ctx.ctx, &yin, &params, &xot), NORMKIT_SUCCESS)
      << normkit_last_error();
  ExpectClose(xo, RefAdjoint(g, y.d(), md, cl), RefAdjoint(ga, absy, absm, cl), 1, "adjoint");

  // Normalizer.
  const std::vector<double> phi_s = RefNormalizer(g, md, false);
  std::vector<T> po(phi_s.size(), T(-9));
  ASSERT_EQ(normkit_shift_sum_normalizer(ctx.ctx, &xt, &params, po.data()), NORMKIT_SUCCESS);
  ExpectClose(po, phi_s, phi_s, g.C, "normalizer");

  // Moore-Penrose pseudo-inverse, with the normalizer computed and given.
  std::vector<double> z(ny);
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t i = 0; i < g.Hout() * g.Wout(); ++i) {
      const double p = phi_s[(g.PerSample() ? b * g.Hout() * g.Wout() : 0) + i];
      z[b * g.Hout() * g.Wout() + i] =
          p == 0 ? 0.0
                 : static_cast<double>(y.v[b * g.Hout() * g.Wout() + i]) / (g.scale * g.scale * p);
    }
  const std::vector<double> want_mp = RefAdjoint(g, z, md, cl);
  std::vector<double> absz(z.size());
  for (size_t i = 0; i < z.size(); ++i) absz[i] = std::fabs(z[i]);
  for (const T* normalizer : {static_cast<const T*>(nullptr), static_cast<const T*>(po.data())}) {
    std::fill(xo.begin(), xo.end(), T(-9));
    ASSERT_EQ(normkit_shift_sum_pinv(ctx.ctx, &yin, &params, NORMKIT_PINV_MOORE_PENROSE, normalizer,
                                     &xot),
              NORMKIT_SUCCESS);
    ExpectClose(xo, want_mp, RefAdjoint(ga, absz, absm, cl), g.C, "pinv");
  }

  // Seed 003's pinv: window(y / (s * alpha)) / mask, 0 where the mask is 0.
  {
    const std::vector<double> alpha = RefNormalizer(
        Geometry{g.B, g.C, g.H, g.W, g.S, g.along_h, NORMKIT_MASK_NONE, g.scale}, md, true);
    std::vector<double> want(nx), mag(nx);
    for (int64_t b = 0; b < g.B; ++b)
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t h = 0; h < g.H; ++h)
          for (int64_t w = 0; w < g.W; ++w) {
            const int64_t r = g.R(c, h), v = g.V(c, w);
            const double zz =
                static_cast<double>(y.v[g.YIndex(b, r, v)]) / (g.scale * alpha[r * g.Wout() + v]);
            const double mv = g.M(md, b, c, h, w);
            const int64_t i = g.XIndex(b, c, h, w, cl);
            want[i] = mv == 0.0 ? 0.0 : zz / mv;
            mag[i] = std::fabs(want[i]);
          }
    std::fill(xo.begin(), xo.end(), T(-9));
    ASSERT_EQ(
        normkit_shift_sum_pinv(ctx.ctx, &yin, &params, NORMKIT_PINV_DIVIDE_BY_MASK, nullptr, &xot),
        NORMKIT_SUCCESS);
    ExpectClose(xo, want, mag, 4, "pinv divide-by-mask");
  }

  // GAP step: x + lambda * A^T((y - A x) / (s^2 Phi_s + gamma)).
  {
    const double lambda = 0.7, gamma = 0.25;
    const std::vector<double> ax = RefForward(g, x.d(), md, cl);
    std::vector<double> r(ny), absr(ny);
    for (int64_t b = 0; b < g.B; ++b)
      for (int64_t i = 0; i < g.Hout() * g.Wout(); ++i) {
        const int64_t k = b * g.Hout() * g.Wout() + i;
        const double p = phi_s[(g.PerSample() ? b * g.Hout() * g.Wout() : 0) + i];
        const double den = g.scale * g.scale * p + gamma;
        r[k] = (static_cast<double>(y.v[k]) - ax[k]) / den;
        absr[k] = (std::fabs(static_cast<double>(y.v[k])) + RefForward(ga, absx, absm, cl)[k] * 0 +
                   std::fabs(ax[k])) /
                  den;
      }
    const std::vector<double> upd = RefAdjoint(g, r, md, cl);
    const std::vector<double> updmag = RefAdjoint(ga, absr, absm, cl);
    std::vector<double> want(nx), mag(nx);
    for (int64_t i = 0; i < nx; ++i) {
      want[i] = static_cast<double>(x.v[i]) + lambda * upd[i];
      mag[i] = std::fabs(static_cast<double>(x.v[i])) + lambda * updmag[i] * g.C;
    }
    std::vector<T> xg = x.v;
    normkit_tensor xgt = TensorOf(xg.data(), layout, xshape);
    ASSERT_EQ(normkit_shift_sum_gap_step(ctx.ctx, &xgt, &yin, &params, lambda, gamma, nullptr),
              NORMKIT_SUCCESS)
        << normkit_last_error();
    ExpectClose(xg, want, mag, g.C, "gap step");
  }

  // Shift then unshift: the exact windows back.
  {
    std::vector<T> xs(g.B * g.C * g.Hout() * g.Wout(), T(-9)), back(nx, T(-9));
    normkit_tensor xst = TensorOf(xs.data(), layout, {g.B, g.C, g.Hout(), g.Wout()});
    ASSERT_EQ(normkit_shift(ctx.ctx, &xt, &params, &xst), NORMKIT_SUCCESS) << normkit_last_error();
    for (int64_t b = 0; b < g.B; ++b)
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t r = 0; r < g.Hout(); ++r)
          for (int64_t v = 0; v < g.Wout(); ++v) {
            const int64_t h = g.along_h ? r - g.Off(c) : r, w = g.along_h ? v : v - g.Off(c);
            const bool in = h >= 0 && h < g.H && w >= 0 && w < g.W;
            const int64_t i = cl ? ((b * g.Hout() + r) * g.Wout() + v) * g.C + c
                                 : ((b * g.C + c) * g.Hout() + r) * g.Wout() + v;
            ASSERT_EQ(xs[i], in ? x.v[g.XIndex(b, c, h, w, cl)] : T(0)) << "shift " << i;
          }
    normkit_tensor backt = TensorOf(back.data(), layout, xshape);
    ASSERT_EQ(normkit_unshift(ctx.ctx, &xst, &params, &backt), NORMKIT_SUCCESS);
    EXPECT_EQ(back, x.v) << "unshift(shift(x)) != x";
  }
}

TEST(ShiftSum, AllOpsMatchReference) {
  const int32_t kinds[] = {NORMKIT_MASK_NONE, NORMKIT_MASK_HW,      NORMKIT_MASK_CHW,
                           NORMKIT_MASK_BCHW, NORMKIT_MASK_PHI_CHW, NORMKIT_MASK_PHI_BCHW};
  const std::vector<Geometry> shapes = {
      {2, 3, 5, 19, 2, false, 0, 1.0},
      {1, 1, 4, 7, 3, false, 0, 0.5},
      {2, 4, 1, 33, -3, false, 0, 1.0},
      {1, 5, 6, 17, -1, true, 0, 2.0 / 5},
      {2, 3, 7, 9, 2, true, 0, 1.0},
      {1, 6, 3, 40, 0, false, 0, 1.0},
      // One channel never moves, whatever the step (fuzzer: a Phi mask's channel
      // stride once added INT64_MAX to the plane size).
      {1, 1, 3, 22, INT64_MAX, false, 0, 1.0},
      {2, 1, 5, 3, -INT64_MAX, true, 0, 1.0}};
  for (const Geometry& shape : shapes) {
    for (int32_t kind : kinds) {
      Geometry g = shape;
      g.mask_kind = kind;
      for (bool cl : {false, true}) {
        CheckAllOps<float>(g, cl, 2);
        CheckAllOps<double>(g, cl, 1);
      }
    }
  }
}

// The seed's channel counts with every mask form: the channels-first forward sums
// them in groups of channels, over tiles of 16 rows (18 rows: a whole and a part).
TEST(ShiftSum, SeedChannelCounts) {
  const int32_t kinds[] = {NORMKIT_MASK_NONE, NORMKIT_MASK_HW,      NORMKIT_MASK_CHW,
                           NORMKIT_MASK_BCHW, NORMKIT_MASK_PHI_CHW, NORMKIT_MASK_PHI_BCHW};
  for (int64_t C : {28, 31}) {
    for (int64_t S : {1, 2}) {
      for (int32_t kind : kinds) {
        if (S == 1 && kind != NORMKIT_MASK_HW) continue;  // every form once per C
        Geometry g{1, C, 18, 37, S, false, kind, 2.0 / static_cast<double>(C)};
        CheckAllOps<float>(g, false, 3);
        CheckAllOps<float>(g, true, 2);
      }
    }
  }
}

// Every op's outputs in one layout (x-shaped outputs in that layout): forward, adjoint,
// both pseudo-inverses and the GAP step.
template <class T>
std::vector<std::vector<T>> AllOutputs(const Geometry& g, bool cl, const std::vector<T>& x_first,
                                       const std::vector<T>& y, const std::vector<T>& mask) {
  const auto layout = cl ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
  const int64_t nx = g.B * g.C * g.H * g.W;
  // x in the layout under test.
  std::vector<T> x(nx);
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t h = 0; h < g.H; ++h)
        for (int64_t w = 0; w < g.W; ++w)
          x[g.XIndex(b, c, h, w, cl)] = x_first[g.XIndex(b, c, h, w, false)];
  const normkit_shift_sum_params params = ParamsFor(g, mask.data());
  const std::vector<int64_t> xshape = {g.B, g.C, g.H, g.W}, yshape = {g.B, g.Hout(), g.Wout()};
  std::vector<std::vector<T>> out(5, std::vector<T>(nx, T(-9)));
  out[0].assign(y.size(), T(-9));
  normkit_tensor xt = TensorOf(x.data(), layout, xshape);
  normkit_tensor yt = TensorOf(const_cast<T*>(y.data()), NORMKIT_LAYOUT_CHANNELS_FIRST, yshape);
  normkit_tensor ft = TensorOf(out[0].data(), NORMKIT_LAYOUT_CHANNELS_FIRST, yshape);
  EXPECT_EQ(normkit_shift_sum(nullptr, &xt, &params, &ft), NORMKIT_SUCCESS);
  normkit_tensor o1 = TensorOf(out[1].data(), layout, xshape);
  EXPECT_EQ(normkit_shift_sum_adjoint(nullptr, &yt, &params, &o1), NORMKIT_SUCCESS);
  normkit_tensor o2 = TensorOf(out[2].data(), layout, xshape);
  EXPECT_EQ(normkit_shift_sum_pinv(nullptr, &yt, &params, NORMKIT_PINV_MOORE_PENROSE, nullptr, &o2),
            NORMKIT_SUCCESS);
  normkit_tensor o3 = TensorOf(out[3].data(), layout, xshape);
  EXPECT_EQ(
      normkit_shift_sum_pinv(nullptr, &yt, &params, NORMKIT_PINV_DIVIDE_BY_MASK, nullptr, &o3),
      NORMKIT_SUCCESS);
  out[4] = x;
  normkit_tensor o4 = TensorOf(out[4].data(), layout, xshape);
  EXPECT_EQ(normkit_shift_sum_gap_step(nullptr, &o4, &yt, &params, 0.7, 0.25, nullptr),
            NORMKIT_SUCCESS);
  // x-shaped outputs back to channels-first order.
  for (int k = 1; k < 5; ++k) {
    std::vector<T> first(nx);
    for (int64_t b = 0; b < g.B; ++b)
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t h = 0; h < g.H; ++h)
          for (int64_t w = 0; w < g.W; ++w)
            first[g.XIndex(b, c, h, w, false)] = out[k][g.XIndex(b, c, h, w, cl)];
    out[k] = first;
  }
  return out;
}

// Channels-last x is transposed to channel planes and back around the channels-first
// kernels, so both layouts must give the same bits: any misplaced element of a
// transposed tile (or of its channel and pixel tails) shows here exactly.
template <class T>
void ExpectLayoutsAgree(const Geometry& g) {
  SCOPED_TRACE(Name(g, true) + (sizeof(T) == 8 ? " double" : " float"));
  const Data<T> x = Random<T>(g.B * g.C * g.H * g.W, 31),
                y = Random<T>(g.B * g.Hout() * g.Wout(), 32);
  Data<T> mask = Random<T>(std::max<int64_t>(g.MaskElems(), 1), 33, 0.0, 1.0);
  for (size_t i = 0; i < mask.v.size(); i += 5) mask.v[i] = T(0);
  const auto first = AllOutputs<T>(g, false, x.v, y.v, mask.v);
  const auto last = AllOutputs<T>(g, true, x.v, y.v, mask.v);
  const char* ops[] = {"forward", "adjoint", "pinv", "pinv divide-by-mask", "gap step"};
  for (int k = 0; k < 5; ++k) {
    ASSERT_EQ(first[k].size(), last[k].size());
    EXPECT_EQ(std::memcmp(first[k].data(), last[k].data(), first[k].size() * sizeof(T)), 0)
        << ops[k];
  }
}

TEST(ShiftSum, ChannelsLastMatchesChannelsFirstBitwise) {
  const std::vector<Geometry> shapes = {
      {2, 28, 3, 37, 2, false, 0, 2.0 / 28},
      {1, 31, 2, 70, 1, false, 0, 1.0},
      {1, 7, 4, 13, -3, false, 0, 0.5},
      {2, 4, 2, 8, 1, false, 0, 1.0},
      {1, 3, 2, 6, 2, false, 0, 1.0},
      {2, 9, 3, 11, -2, true, 0, 0.3},
      // Rows of several chunks of pixels, and rows wide enough that the forward
      // transposes a slice of channels at a time (a row of planes above 32 KiB).
      {1, 13, 3, 600, -1, false, 0, 1.0},
      {1, 13, 2, 3000, -1, false, 0, 1.0},
      {1, 7, 2, 5000, 2, false, 0, 0.5}};
  for (Geometry g : shapes) {
    for (int32_t kind = NORMKIT_MASK_NONE; kind <= NORMKIT_MASK_PHI_BCHW; ++kind) {
      g.mask_kind = kind;
      ExpectLayoutsAgree<float>(g);
      ExpectLayoutsAgree<double>(g);
    }
  }
}

// The channels-last transposition is written per SIMD target (128-bit tiles, scalar
// on the scalar target): run the channels-last ops on every target against the
// reference, with channel and pixel counts that leave tails.
TEST(ShiftSum, ChannelsLastOnEveryTarget) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (const Geometry& g : {Geometry{2, 7, 3, 13, 2, false, NORMKIT_MASK_HW, 0.5},
                              Geometry{1, 9, 2, 11, -1, false, NORMKIT_MASK_PHI_CHW, 1.0},
                              Geometry{1, 6, 3, 10, 2, true, NORMKIT_MASK_CHW, 1.0},
                              // 256-bit tiles and channel tails, several chunks of pixels
                              Geometry{1, 19, 2, 150, -3, false, NORMKIT_MASK_PHI_CHW, 0.5},
                              Geometry{2, 17, 2, 70, 5, false, NORMKIT_MASK_BCHW, 1.0}}) {
      CheckAllOps<float>(g, true, 2);
      CheckAllOps<double>(g, true, 1);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The forward of channels-last x against the reference and against channels-first x
// (the same bits), and the GAP step against channels-first x; 3 threads.
// x in channels-first (`first`) and channels-last (`last`) order holds the same bits.
template <class T>
void ExpectSameBits(const Geometry& g, const std::vector<T>& first, const std::vector<T>& last,
                    const char* what) {
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t h = 0; h < g.H; ++h)
        for (int64_t w = 0; w < g.W; ++w)
          ASSERT_EQ(std::memcmp(&first[g.XIndex(b, c, h, w, false)],
                                &last[g.XIndex(b, c, h, w, true)], sizeof(T)),
                    0)
              << what << " " << b << " " << c << " " << h << " " << w;
}

template <class T>
void CheckForwardLayouts(const Geometry& g) {
  SCOPED_TRACE(Name(g, true) + (sizeof(T) == 8 ? " double" : " float"));
  const int64_t nx = g.B * g.C * g.H * g.W, ny = g.B * g.Hout() * g.Wout();
  const Data<T> x = Random<T>(nx, 41);
  Data<T> mask = Random<T>(std::max<int64_t>(g.MaskElems(), 1), 42, 0.0, 1.0);
  for (size_t i = 0; i < mask.v.size(); i += 7) mask.v[i] = T(0);
  std::vector<T> xl(nx);
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t h = 0; h < g.H; ++h)
        for (int64_t w = 0; w < g.W; ++w)
          xl[g.XIndex(b, c, h, w, true)] = x.v[g.XIndex(b, c, h, w, false)];
  normkit_shift_sum_params params;
  normkit_shift_sum_params_init(&params, g.S);
  params.scale = g.scale;
  params.mask_kind = g.mask_kind;
  params.mask = g.mask_kind == NORMKIT_MASK_NONE ? nullptr : mask.v.data();
  Context ctx(3);
  const std::vector<int64_t> xshape = {g.B, g.C, g.H, g.W}, yshape = {g.B, 1, g.Hout(), g.Wout()};
  std::vector<T> y_first(ny, T(-9)), y_last(ny, T(-9));
  normkit_tensor xf = TensorOf(const_cast<T*>(x.v.data()), NORMKIT_LAYOUT_CHANNELS_FIRST, xshape);
  normkit_tensor xc = TensorOf(xl.data(), NORMKIT_LAYOUT_CHANNELS_LAST, xshape);
  normkit_tensor yf = TensorOf(y_first.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, yshape);
  normkit_tensor yc = TensorOf(y_last.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, yshape);
  ASSERT_EQ(normkit_shift_sum(ctx.ctx, &xf, &params, &yf), NORMKIT_SUCCESS);
  ASSERT_EQ(normkit_shift_sum(ctx.ctx, &xc, &params, &yc), NORMKIT_SUCCESS);
  Geometry ga = g;
  ga.scale = std::fabs(g.scale);
  std::vector<double> absx(nx), absm(mask.v.size());
  for (int64_t i = 0; i < nx; ++i) absx[i] = std::fabs(static_cast<double>(x.v[i]));
  for (size_t i = 0; i < absm.size(); ++i) absm[i] = std::fabs(static_cast<double>(mask.v[i]));
  ExpectClose(y_last, RefForward(g, x.d(), mask.d(), false), RefForward(ga, absx, absm, false), g.C,
              "forward");
  EXPECT_EQ(std::memcmp(y_first.data(), y_last.data(), ny * sizeof(T)), 0);
  // The GAP step (A x, the residual and the update, each from the [W, C] rows when C is
  // at least a vector) against the channels-first step, tested against the reference.
  const Data<T> y = Random<T>(ny, 43);
  std::vector<T> gf = x.v, gl = xl;
  normkit_tensor yin = TensorOf(const_cast<T*>(y.v.data()), NORMKIT_LAYOUT_CHANNELS_FIRST, yshape);
  normkit_tensor gft = TensorOf(gf.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, xshape);
  normkit_tensor glt = TensorOf(gl.data(), NORMKIT_LAYOUT_CHANNELS_LAST, xshape);
  ASSERT_EQ(normkit_shift_sum_gap_step(ctx.ctx, &gft, &yin, &params, 0.7, 0.25, nullptr),
            NORMKIT_SUCCESS);
  ASSERT_EQ(normkit_shift_sum_gap_step(ctx.ctx, &glt, &yin, &params, 0.7, 0.25, nullptr),
            NORMKIT_SUCCESS);
  ExpectSameBits(g, gf, gl, "gap step");
  // The adjoint of the same y, likewise.
  std::vector<T> af(nx, T(-9)), al(nx, T(-9));
  normkit_tensor aft = TensorOf(af.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, xshape);
  normkit_tensor alt = TensorOf(al.data(), NORMKIT_LAYOUT_CHANNELS_LAST, xshape);
  ASSERT_EQ(normkit_shift_sum_adjoint(ctx.ctx, &yin, &params, &aft), NORMKIT_SUCCESS);
  ASSERT_EQ(normkit_shift_sum_adjoint(ctx.ctx, &yin, &params, &alt), NORMKIT_SUCCESS);
  ExpectSameBits(g, af, al, "adjoint");
}

// CheckForwardLayouts for each shape with no mask and a [H, W] one, float and double, on
// every SIMD target; with all_ops also CheckAllOps (the adjoint and pseudo-inverses).
void CheckLayoutsOnEveryTarget(const std::vector<Geometry>& shapes, bool all_ops) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (Geometry g : shapes) {
      for (int32_t kind : {NORMKIT_MASK_NONE, NORMKIT_MASK_HW}) {
        g.mask_kind = kind;
        CheckForwardLayouts<float>(g);
        CheckForwardLayouts<double>(g);
        if (all_ops) {
          CheckAllOps<float>(g, true, 2);
          CheckAllOps<double>(g, true, 1);
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Channels-last rows with no mask or a [H, W] one, and up to four vectors of channels,
// are summed and updated without a transposition (ShiftSumSkew, ShiftSumSkewAxpy,
// written per target): on every target, against the reference and bit for bit against
// channels-first x. The channel counts span under one to four vectors and past them
// (the planes path) on 4-, 8- and 16-lane targets; |S| = W and |S| > W (gaps); odd row
// counts (a row walked alone); phases of equal pixel counts (walked side by side) and
// of unequal ones. (Ranges of odd length over threads:
// BitwiseIdenticalAcrossThreadCounts.)
TEST(ShiftSum, SkewedWalksOnEveryTarget) {
  const std::vector<Geometry> shapes = {
      {1, 2, 3, 5, 1, false, 0, 1.0},        {2, 9, 3, 11, -2, false, 0, 0.5},
      {1, 16, 2, 16, 3, false, 0, 1.0},      {1, 17, 3, 20, -1, false, 0, 1.0},
      {2, 33, 1, 40, 2, false, 0, 0.25},     {1, 64, 3, 9, 1, false, 0, 1.0},
      {1, 5, 3, 7, 7, false, 0, 1.0},        {1, 5, 2, 7, -8, false, 0, 1.0},
      {2, 28, 5, 37, 2, false, 0, 2.0 / 28}, {2, 28, 3, 36, 2, false, 0, 2.0 / 28},
      {1, 20, 3, 24, -2, false, 0, 1.0},     {1, 7, 3, 30, 4, false, 0, 1.0}};
  CheckLayoutsOnEveryTarget(shapes, false);
}

// Channels-last rows past four vectors of channels, no mask or a [H, W] one, are
// summed by phases (ShiftSumPhases: each pixel's channels one contiguous run into a
// phase of its y row), walking the pixels in the order that gives each y element its
// channels 0, 1, ...; the adjoint reads each pixel's run back from y's phases. On
// every target, against the reference and bit for bit against channels-first x.
// Steps of either sign, |S| = 1, |S| > W (pixels alone in their
// phase), channel counts with and without a partial last vector, B > 1.
TEST(ShiftSum, PhaseWalksOnEveryTarget) {
  const std::vector<Geometry> shapes = {
      {1, 70, 3, 9, -3, false, 0, 1.0},   {2, 97, 2, 5, 7, false, 0, 0.5},
      {1, 130, 2, 13, 2, false, 0, 1.0},  {2, 65, 3, 16, 1, false, 0, 2.0 / 65},
      {1, 128, 1, 11, -1, false, 0, 1.0}, {1, 80, 2, 6, -9, false, 0, 1.0}};
  CheckLayoutsOnEveryTarget(shapes, true);
}

// <A x, y> = <x, A^T y> in float64, for every mask form, both axes and layouts.
TEST(ShiftSum, AdjointIdentity) {
  for (int32_t kind = NORMKIT_MASK_NONE; kind <= NORMKIT_MASK_PHI_BCHW; ++kind) {
    for (bool along_h : {false, true}) {
      for (bool cl : {false, true}) {
        const Geometry g{2, 7, 9, 23, along_h ? -2 : 3, along_h, kind, 0.3};
        const auto layout = cl ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
        const int64_t nx = g.B * g.C * g.H * g.W, ny = g.B * g.Hout() * g.Wout();
        Data<double> x = Random<double>(nx, 5), y = Random<double>(ny, 6),
                     m = Random<double>(std::max<int64_t>(g.MaskElems(), 1), 7);
        std::vector<double> ax(ny), aty(nx);
        normkit_shift_sum_params params;
        normkit_shift_sum_params_init(&params, g.S);
        params.axis = along_h ? NORMKIT_SHIFT_ALONG_H : NORMKIT_SHIFT_ALONG_W;
        params.scale = g.scale;
        params.mask_kind = kind;
        params.mask = kind == NORMKIT_MASK_NONE ? nullptr : m.v.data();
        normkit_tensor xt = TensorOf(x.v.data(), layout, {g.B, g.C, g.H, g.W});
        normkit_tensor axt =
            TensorOf(ax.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {g.B, g.Hout(), g.Wout()});
        normkit_tensor yt =
            TensorOf(y.v.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {g.B, g.Hout(), g.Wout()});
        normkit_tensor atyt = TensorOf(aty.data(), layout, {g.B, g.C, g.H, g.W});
        ASSERT_EQ(normkit_shift_sum(nullptr, &xt, &params, &axt), NORMKIT_SUCCESS);
        ASSERT_EQ(normkit_shift_sum_adjoint(nullptr, &yt, &params, &atyt), NORMKIT_SUCCESS);
        double lhs = 0, rhs = 0, mag = 0;
        for (int64_t i = 0; i < ny; ++i) lhs += ax[i] * y.v[i], mag += std::fabs(ax[i] * y.v[i]);
        for (int64_t i = 0; i < nx; ++i) rhs += x.v[i] * aty[i];
        EXPECT_NEAR(lhs, rhs, 1e-6 * mag) << "mask " << kind << " along_h " << along_h;
      }
    }
  }
}

// Seed 003's own three formulations of A (a loop over channels adding shifted
// slices, a convolution with a one-hot kernel, scatter_add with precomputed indices)
// and its A_pinv, written the way the seed writes them, agree with ours.
TEST(ShiftSum, SeedFormulationsAgree) {
  const int64_t B = 2, C = 28, H = 16, W = 256, S = 2, Wp = W + (C - 1) * S;
  Data<float> x = Random<float>(B * C * H * W, 11), mask = Random<float>(H * W, 12, 0.0, 1.0);
  for (auto& v : mask.v)
    if (v == 0.0f) v = 1e-12f;
  // z = x * mask (broadcast over B and C), as the seed does before shifting.
  std::vector<double> z(B * C * H * W);
  for (int64_t i = 0; i < B * C * H * W; ++i)
    z[i] = static_cast<double>(x.v[i]) * mask.v[i % (H * W)];
  // Method 1: y[..., i*S:i*S+W] += z[:, i].
  std::vector<double> y1(B * H * Wp, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < C; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          y1[(b * H + h) * Wp + i * S + w] += z[((b * C + i) * H + h) * W + w];
  // Method 2: conv2d with kernel[:, C-i-1, :, i*S] = 1, padding (0, (C-1)*S).
  const int64_t K = (C - 1) * S + 1, pad = (C - 1) * S;
  std::vector<double> y2(B * H * Wp, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t o = 0; o < Wp; ++o)
        for (int64_t ci = 0; ci < C; ++ci)
          for (int64_t k = 0; k < K; ++k) {
            const bool one = k % S == 0 && C - 1 - k / S == ci;  // kernel[ci][k]
            const int64_t w = o + k - pad;
            if (one && w >= 0 && w < W)
              y2[(b * H + h) * Wp + o] += z[((b * C + ci) * H + h) * W + w];
          }
  // Method 3: scatter_add with indices x + i*S + y*out_W.
  std::vector<double> y3(B * H * Wp, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < C; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          y3[b * H * Wp + w + i * S + h * Wp] += z[((b * C + i) * H + h) * W + w];

  std::vector<float> y(B * H * Wp);
  normkit_shift_sum_params params;
  normkit_shift_sum_params_init(&params, S);
  params.mask_kind = NORMKIT_MASK_HW;
  params.mask = mask.v.data();
  normkit_tensor xt = TensorOf(x.v.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {B, C, H, W});
  normkit_tensor yt = TensorOf(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {B, 1, H, Wp});
  ASSERT_EQ(normkit_shift_sum(nullptr, &xt, &params, &yt), NORMKIT_SUCCESS);
  for (const auto* want : {&y1, &y2, &y3}) {
    for (int64_t i = 0; i < B * H * Wp; ++i)
      ASSERT_NEAR(y[i], (*want)[i], 1e-5 * (1 + std::fabs((*want)[i])));
  }
  // A_pinv(y, mask) = cat(windows(y / alpha)) / mask.
  std::vector<double> alpha(Wp, 0.0);
  for (int64_t i = 0; i < C; ++i)
    for (int64_t w = 0; w < W; ++w) alpha[i * S + w] += 1;
  std::vector<float> xp(B * C * H * W);
  normkit_tensor xpt = TensorOf(xp.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {B, C, H, W});
  ASSERT_EQ(
      normkit_shift_sum_pinv(nullptr, &yt, &params, NORMKIT_PINV_DIVIDE_BY_MASK, nullptr, &xpt),
      NORMKIT_SUCCESS);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < C; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          const double want =
              y[(b * H + h) * Wp + i * S + w] / alpha[i * S + w] / mask.v[h * W + w];
          const float got = xp[((b * C + i) * H + h) * W + w];
          ASSERT_NEAR(got, want, 1e-5 * (1 + std::fabs(want)));
        }
}

// NaN and Inf reach exactly the outputs that sum them (A) or read them (A^T). In
// channels-last x, the vector loads of a pixel's channels also read the next pixels'
// (the skewed forward's spare lanes): what they read must not reach a sum.
TEST(ShiftSum, NonFiniteValuesStayWhereTheyLand) {
  const Geometry g{2, 5, 4, 9, 2, false, NORMKIT_MASK_NONE, 1.0};
  std::vector<float> x(g.B * g.C * g.H * g.W, 0.5f), y(g.B * g.Hout() * g.Wout());
  normkit_shift_sum_params params;
  normkit_shift_sum_params_init(&params, g.S);
  normkit_tensor yt =
      TensorOf(y.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {g.B, 1, g.Hout(), g.Wout()});
  for (bool cl : {false, true}) {
    SCOPED_TRACE(cl ? "channels-last" : "channels-first");
    std::fill(x.begin(), x.end(), 0.5f);
    x[g.XIndex(0, 1, 2, 3, cl)] = std::numeric_limits<float>::quiet_NaN();
    x[g.XIndex(1, 0, 0, 0, cl)] = std::numeric_limits<float>::infinity();
    normkit_tensor xt =
        TensorOf(x.data(), cl ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST,
                 {g.B, g.C, g.H, g.W});
    ASSERT_EQ(normkit_shift_sum(nullptr, &xt, &params, &yt), NORMKIT_SUCCESS);
    for (int64_t b = 0; b < g.B; ++b)
      for (int64_t r = 0; r < g.Hout(); ++r)
        for (int64_t v = 0; v < g.Wout(); ++v) {
          const float got = y[g.YIndex(b, r, v)];
          if (b == 0 && r == 2 && v == 3 + g.Off(1)) {
            EXPECT_TRUE(std::isnan(got));
          } else if (b == 1 && r == 0 && v == 0) {
            EXPECT_TRUE(std::isinf(got));
          } else {
            EXPECT_TRUE(std::isfinite(got)) << b << " " << r << " " << v;
          }
        }
  }
  std::fill(x.begin(), x.end(), 0.5f);
  normkit_tensor xt = TensorOf(x.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {g.B, g.C, g.H, g.W});
  // Adjoint: a NaN in y row (0, 2) at column 5 reaches x (0, c, 2, 5 - c*S) only.
  std::fill(y.begin(), y.end(), 1.0f);
  y[g.YIndex(0, 2, 5)] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_EQ(normkit_shift_sum_adjoint(nullptr, &yt, &params, &xt), NORMKIT_SUCCESS);
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t h = 0; h < g.H; ++h)
        for (int64_t w = 0; w < g.W; ++w) {
          const bool hit = b == 0 && h == 2 && w + g.Off(c) == 5;
          EXPECT_EQ(std::isnan(x[g.XIndex(b, c, h, w, false)]), hit) << b << c << h << w;
        }
}

TEST(ShiftSum, BitwiseIdenticalAcrossThreadCounts) {
  // x is 1.5 MB: above the size below which calls stay on one thread (1 MiB).
  for (int32_t kind : {NORMKIT_MASK_CHW, NORMKIT_MASK_HW}) {
    SCOPED_TRACE(kind);
    const Geometry g{3, 28, 65, 70, 2, false, kind, 2.0 / 28};
    Data<float> x = Random<float>(g.B * g.C * g.H * g.W, 21),
                y = Random<float>(g.B * g.Hout() * g.Wout(), 22),
                m = Random<float>(g.MaskElems(), 23, 0.0, 1.0);
    normkit_shift_sum_params params;
    normkit_shift_sum_params_init(&params, g.S);
    params.scale = g.scale;
    params.mask_kind = g.mask_kind;
    params.mask = m.v.data();
    for (bool cl : {false, true}) {
      const auto layout = cl ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
      std::vector<float> first_y, first_x;
      for (int threads : {1, 2, 3, 8}) {
        Context ctx(threads);
        std::vector<float> yo(y.v.size()), xg = x.v;
        normkit_tensor xt = TensorOf(x.v.data(), layout, {g.B, g.C, g.H, g.W});
        normkit_tensor yt =
            TensorOf(yo.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {g.B, 1, g.Hout(), g.Wout()});
        normkit_tensor yin =
            TensorOf(y.v.data(), NORMKIT_LAYOUT_CHANNELS_FIRST, {g.B, 1, g.Hout(), g.Wout()});
        normkit_tensor xgt = TensorOf(xg.data(), layout, {g.B, g.C, g.H, g.W});
        ASSERT_EQ(normkit_shift_sum(ctx.ctx, &xt, &params, &yt), NORMKIT_SUCCESS);
        ASSERT_EQ(normkit_shift_sum_gap_step(ctx.ctx, &xgt, &yin, &params, 0.5, 0.1, nullptr),
                  NORMKIT_SUCCESS);
        if (first_y.empty()) {
          first_y = yo;
          first_x = xg;
        } else {
          ASSERT_EQ(std::memcmp(first_y.data(), yo.data(), yo.size() * 4), 0) << threads;
          ASSERT_EQ(std::memcmp(first_x.data(), xg.data(), xg.size() * 4), 0) << threads;
        }
      }
    }
  }
}

}  // namespace
}  // namespace normkit_test
