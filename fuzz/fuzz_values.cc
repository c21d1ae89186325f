// SPDX-License-Identifier: Apache-2.0
// Values, not only statuses: batch norm (inference and fold), group / instance / layer /
// RMS norm on small valid shapes whose data is drawn from the edges of float (means far
// from the spread, sums of squares past FLT_MAX, values near FLT_MAX, subnormals, NaN /
// Inf), at element offsets that misalign the data to anything but its element size,
// with parameters aliasing outputs, compared with a double reference written from the
// definitions. Pointers off their element size and parameters inside y must be
// rejected, with every output untouched. bfloat16 / float16 storage: affine against
// double, the norms and the shift-sum family bitwise against the float32 call on the
// widened values. Batch norm training: the forward and the backward against double, and in
// half bitwise against the float32 call. Any disagreement aborts with what and where.
#include <cfloat>
#include <utility>

#include "fuzz_common.h"
#include "half_reference.h"

namespace normkit_fuzz {
namespace {

[[noreturn]] void Fail(const char* what, int64_t at, double got, double want) {
  std::fprintf(stderr, "%s: element %lld got %.9g want %.9g\n", what, static_cast<long long>(at),
               got, want);
  std::abort();
}

// Buffers of `count` floats placed `offset` floats (or, misaligned, bytes) into storage.
struct Floats {
  std::vector<uint8_t> storage;
  float* p;
  Floats(int64_t count, int64_t offset_floats, int byte_skew) {
    storage.resize(static_cast<size_t>(count + offset_floats + 2) * sizeof(float));
    p = reinterpret_cast<float*>(storage.data() + offset_floats * sizeof(float) + byte_skew);
  }
};

// A value from the edges: base + spread * u, u in [-1, 1].
struct Palette {
  double base, spread;
  static Palette Pick(FuzzedDataProvider& in) {
    static const double kBases[] = {0, 1, -1e4, 1e6, -3e18, 1e30, 2e38, -3.3e38, 1e-39};
    static const double kSpreads[] = {1, 1e-3, 1e-40, 1e19, -1e19, 1e30, 1.5e38, 1e4};
    return {kBases[in.ConsumeIntegralInRange<int>(0, 8)],
            kSpreads[in.ConsumeIntegralInRange<int>(0, 7)]};
  }
  float Draw(uint32_t* state) const {
    *state ^= *state << 13, *state ^= *state >> 17, *state ^= *state << 5;
    const double u = static_cast<double>(*state % 20001) / 10000.0 - 1.0;
    double v = base + spread * u;
    if (v > FLT_MAX) v = FLT_MAX;
    if (v < -FLT_MAX) v = -FLT_MAX;
    return static_cast<float>(v);
  }
};

// (memcpy: the rejection cases fill deliberately misaligned buffers.)
void Fill(float* p, int64_t n, const Palette& pal, uint32_t seed) {
  uint32_t state = seed | 1u;
  for (int64_t i = 0; i < n; ++i) {
    const float v = pal.Draw(&state);
    std::memcpy(reinterpret_cast<char*>(p) + i * sizeof(float), &v, sizeof(float));
  }
}

bool Bad(double v) {
  return !std::isfinite(v);
}

// The outputs of a group / row of `count` values at x[index(k)], k < count, against the
// definition: y = (x - mean) * rstd * gamma + beta (rms: mean 0, no beta).
template <class Index, class Gamma, class Beta>
void CheckGroup(const char* what, const float* x, const float* y, int64_t count, Index index,
                Gamma gamma_of, Beta beta_of, float eps, bool rms, float mean_out, float rstd_out,
                bool has_mean, bool has_rstd) {
  bool non_finite = false;
  double sum = 0;
  for (int64_t k = 0; k < count; ++k) {
    non_finite |= Bad(x[index(k)]);
    sum += x[index(k)];
  }
  if (non_finite) {  // documented: NaN mean, NaN rstd, NaN outputs
    if ((has_mean && !std::isnan(mean_out)) || (has_rstd && !std::isnan(rstd_out))) {
      Fail(what, -1, has_rstd ? rstd_out : mean_out, NAN);
    }
    for (int64_t k = 0; k < count; ++k) {
      if (!std::isnan(y[index(k)])) Fail(what, index(k), y[index(k)], NAN);
    }
    return;
  }
  const double mean = rms ? 0.0 : sum / static_cast<double>(count);
  double m2 = 0;
  for (int64_t k = 0; k < count; ++k) m2 += (x[index(k)] - mean) * (x[index(k)] - mean);
  const double rstd = 1.0 / std::sqrt(m2 / static_cast<double>(count) + eps);
  if (has_rstd && std::fabs(rstd_out - rstd) > 1e-6 * rstd) Fail(what, -2, rstd_out, rstd);
  if (has_mean && std::fabs(mean_out - mean) > 2e-7 * std::fabs(mean) + 1e-6 / rstd) {
    Fail(what, -3, mean_out, mean);
  }
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = index(k);
    const double dev = x[i] - mean;
    if (std::fabs(dev) > 1e38) continue;  // documented: x - mean must stay finite in float
    const double g = gamma_of(k), b = rms ? 0.0 : beta_of(k);
    const double want = dev * rstd * g + b;
    const double tol = 2e-5 * (std::fabs(g) + std::fabs(b)) + 8 * 0x1p-24 * std::fabs(want);
    if (!(std::fabs(y[i] - want) <= tol)) Fail(what, i, y[i], want);
  }
}

void FuzzNorms(FuzzedDataProvider& in, bool rows) {
  const int64_t N = in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t C = in.ConsumeIntegralInRange<int64_t>(1, 24);
  const int64_t S = rows ? 1 : in.ConsumeIntegralInRange<int64_t>(1, 300);
  const int64_t G = rows ? 1 : [&] {
    std::vector<int64_t> divisors;
    for (int64_t g = 1; g <= C; ++g)
      if (C % g == 0) divisors.push_back(g);
    return divisors[in.ConsumeIntegralInRange<size_t>(0, divisors.size() - 1)];
  }();
  const bool rms = rows && in.ConsumeBool();
  const bool cl = in.ConsumeBool();
  const bool in_place = in.ConsumeBool();
  const int64_t numel = N * C * S;
  const Palette pal = Palette::Pick(in);
  Floats x(numel, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Floats y(numel, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  const int64_t P = C;  // gamma / beta: C (group norm) or D = C (rows)
  Floats gamma(P, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Floats beta(P, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Fill(x.p, numel, pal, in.ConsumeIntegral<uint32_t>());
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {  // a NaN or an Inf somewhere
    const float bad[] = {NAN, INFINITY, -INFINITY};
    x.p[in.ConsumeIntegralInRange<int64_t>(0, numel - 1)] =
        bad[in.ConsumeIntegralInRange<int>(0, 2)];
  }
  Fill(gamma.p, P, {1.25, 0.75}, in.ConsumeIntegral<uint32_t>());
  Fill(beta.p, P, {0, 1}, in.ConsumeIntegral<uint32_t>());
  const int64_t units = rows ? N : N * G;  // rows: [N, D = C]
  std::vector<float> mean_out(static_cast<size_t>(units), -7.f), rstd_out(units, -7.f);
  const std::vector<float> x0(x.p, x.p + numel);
  if (in_place) std::memcpy(y.p, x.p, static_cast<size_t>(numel) * sizeof(float));
  float* yd = y.p;
  const float eps = in.ConsumeBool() ? 1e-5f : 1e-30f;
  normkit_tensor xt, yt;
  const int64_t shape[3] = {N, C, S};
  const int32_t layout = cl ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
  normkit_tensor_init(&xt, in_place ? yd : x.p, NORMKIT_DTYPE_FLOAT32,
                      static_cast<normkit_layout>(layout), rows ? 2 : 3, shape);
  normkit_tensor_init(&yt, yd, NORMKIT_DTYPE_FLOAT32, static_cast<normkit_layout>(layout),
                      rows ? 2 : 3, shape);
  normkit_status st;
  if (!rows) {
    st = normkit_group_norm(nullptr, &xt, G, gamma.p, beta.p, eps, NORMKIT_ACTIVATION_NONE, &yt,
                            mean_out.data(), rstd_out.data());
  } else if (rms) {
    st = normkit_rms_norm(nullptr, &xt, gamma.p, eps, &yt, rstd_out.data());
  } else {
    st = normkit_layer_norm(nullptr, &xt, gamma.p, beta.p, eps, &yt, mean_out.data(),
                            rstd_out.data());
  }
  CheckStatus(st);
  if (st != NORMKIT_SUCCESS) {
    std::fprintf(stderr, "valid norm call rejected: %s\n", normkit_last_error());
    std::abort();
  }
  const int64_t Cg = C / G;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t g = 0; g < (rows ? 1 : G); ++g) {
      const int64_t count = rows ? C : Cg * S;
      const auto index = [&](int64_t k) {
        if (rows) return n * C + k;
        const int64_t c = g * Cg + k / S, s = k % S;
        return cl ? (n * S + s) * C + c : (n * C + c) * S + s;
      };
      const auto gamma_of = [&](int64_t k) -> double { return gamma.p[rows ? k : g * Cg + k / S]; };
      const auto beta_of = [&](int64_t k) -> double { return beta.p[rows ? k : g * Cg + k / S]; };
      const int64_t u = rows ? n : n * G + g;
      CheckGroup(rows ? (rms ? "rms_norm" : "layer_norm") : "group_norm", x0.data(), yd, count,
                 index, gamma_of, beta_of, eps, rms, mean_out[u], rstd_out[u], !rms, true);
    }
  }
}

// Batch norm in training mode: each channel's N * S values against the definition
// (CheckGroup: mean, rstd and outputs; NaN / Inf make the channel NaN), and the running
// averages against the double formula with the unbiased variance.
void FuzzBatchNormTraining(FuzzedDataProvider& in) {
  const int64_t N = in.ConsumeIntegralInRange<int64_t>(1, 4);
  const int64_t C = in.ConsumeIntegralInRange<int64_t>(1, 24);
  const int64_t S = in.ConsumeIntegralInRange<int64_t>(N == 1 ? 2 : 1, 400);
  const bool cl = in.ConsumeBool(), in_place = in.ConsumeBool();
  const int64_t numel = N * C * S;
  const Palette pal = Palette::Pick(in);
  Floats x(numel, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Floats y(numel, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Floats gamma(C, 0, 0), beta(C, 0, 0);
  Fill(x.p, numel, pal, in.ConsumeIntegral<uint32_t>());
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    const float bad[] = {NAN, INFINITY, -INFINITY};
    x.p[in.ConsumeIntegralInRange<int64_t>(0, numel - 1)] =
        bad[in.ConsumeIntegralInRange<int>(0, 2)];
  }
  Fill(gamma.p, C, {1.25, 0.75}, in.ConsumeIntegral<uint32_t>());
  Fill(beta.p, C, {0, 1}, in.ConsumeIntegral<uint32_t>());
  const float momentum = in.ConsumeBool() ? 0.1f : 1.0f;
  std::vector<float> rm(static_cast<size_t>(C)), rv(rm.size()), sm(rm.size(), -7.f),
      sr(rm.size(), -7.f);
  Fill(rm.data(), C, {0, 1}, 3);
  Fill(rv.data(), C, {1, 0.5}, 4);
  const std::vector<float> rm0 = rm, rv0 = rv, x0(x.p, x.p + numel);
  if (in_place) std::memcpy(y.p, x.p, static_cast<size_t>(numel) * sizeof(float));
  const float eps = in.ConsumeBool() ? 1e-5f : 1e-30f;
  const int64_t shape[3] = {N, C, S};
  const auto layout = cl ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
  normkit_tensor xt, yt;
  normkit_tensor_init(&xt, in_place ? y.p : x.p, NORMKIT_DTYPE_FLOAT32, layout, 3, shape);
  normkit_tensor_init(&yt, y.p, NORMKIT_DTYPE_FLOAT32, layout, 3, shape);
  if (normkit_batch_norm_training(nullptr, &xt, gamma.p, beta.p, eps, momentum, rm.data(),
                                  rv.data(), &yt, sm.data(), sr.data()) != NORMKIT_SUCCESS) {
    std::fprintf(stderr, "valid batch_norm_training rejected: %s\n", normkit_last_error());
    std::abort();
  }
  const bool layout_cl = cl && S > 1;
  for (int64_t c = 0; c < C; ++c) {
    const auto index = [&](int64_t k) {
      const int64_t n = k / S, s = k % S;
      return layout_cl ? (n * S + s) * C + c : (n * C + c) * S + s;
    };
    const auto gamma_of = [&](int64_t) -> double { return gamma.p[c]; };
    const auto beta_of = [&](int64_t) -> double { return beta.p[c]; };
    const size_t cs = static_cast<size_t>(c);
    CheckGroup("batch_norm_training", x0.data(), y.p, N * S, index, gamma_of, beta_of, eps, false,
               sm[cs], sr[cs], true, true);
    // The running averages, where the statistics are finite.
    double sum = 0, m2 = 0;
    for (int64_t k = 0; k < N * S; ++k) sum += x0[static_cast<size_t>(index(k))];
    const double count = static_cast<double>(N * S), mean = sum / count;
    for (int64_t k = 0; k < N * S; ++k) {
      const double d = x0[static_cast<size_t>(index(k))] - mean;
      m2 += d * d;
    }
    if (!std::isfinite(mean) || !std::isfinite(m2)) continue;
    const double want_m = (1.0 - momentum) * rm0[cs] + momentum * mean;
    const double want_v = (1.0 - momentum) * rv0[cs] + momentum * m2 / (count - 1.0);
    const double rstd = 1.0 / std::sqrt(m2 / count + eps);
    if (std::fabs(rm[cs] - want_m) > 2e-7 * std::fabs(want_m) + 1e-6 / rstd + 1e-38) {
      Fail("batch_norm_training running_mean", c, rm[cs], want_m);
    }
    if (std::fabs(want_v) < 1e38 && std::fabs(rv[cs] - want_v) > 1e-5 * std::fabs(want_v) +
                                                                     1e-6 * (1.0 / (rstd * rstd)) +
                                                                     1e-38) {
      Fail("batch_norm_training running_var", c, rv[cs], want_v);
    }
  }
}

// Batch norm's backward: x and dy from the palettes (dy may hold a NaN), the saved
// statistics those of x (or drawn), dx apart, on x or on dy; dx, grad_gamma and grad_beta
// against the double definition within float's rounding of their terms; a NaN / Inf
// reference must come back the same.
void FuzzBatchNormBackward(FuzzedDataProvider& in) {
  const int64_t N = in.ConsumeIntegralInRange<int64_t>(1, 4);
  const int64_t C = in.ConsumeIntegralInRange<int64_t>(1, 24);
  const int64_t S = in.ConsumeIntegralInRange<int64_t>(1, 400);
  const bool cl = in.ConsumeBool();
  const int alias = in.ConsumeIntegralInRange<int>(0, 2);  // dx apart, on x, on dy
  const int64_t numel = N * C * S;
  const Palette xpal = Palette::Pick(in), dypal = Palette::Pick(in);
  Floats x(numel, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Floats dy(numel, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Floats dx(numel, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Fill(x.p, numel, xpal, in.ConsumeIntegral<uint32_t>());
  Fill(dy.p, numel, dypal, in.ConsumeIntegral<uint32_t>());
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    dy.p[in.ConsumeIntegralInRange<int64_t>(0, numel - 1)] = NAN;
  }
  std::vector<float> gamma(static_cast<size_t>(C)), sm(gamma.size()), sr(gamma.size());
  std::vector<float> gg(gamma.size(), -7.f), gb(gamma.size(), -7.f);
  Fill(gamma.data(), C, {1.25, 0.75}, in.ConsumeIntegral<uint32_t>());
  const bool layout_cl = cl && S > 1;
  const auto index_of = [&](int64_t c, int64_t k) {
    const int64_t n = k / S, s = k % S;
    return layout_cl ? (n * S + s) * C + c : (n * C + c) * S + s;
  };
  const bool drawn_stats = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0, m2 = 0;
    for (int64_t k = 0; k < N * S; ++k) sum += x.p[index_of(c, k)];
    const double mean = sum / static_cast<double>(N * S);
    for (int64_t k = 0; k < N * S; ++k)
      m2 += (x.p[index_of(c, k)] - mean) * (x.p[index_of(c, k)] - mean);
    const size_t cs = static_cast<size_t>(c);
    sm[cs] = drawn_stats ? xpal.base : static_cast<float>(mean);
    sr[cs] = drawn_stats ? 1.0f : static_cast<float>(1.0 / std::sqrt(m2 / (N * S) + 1e-5));
  }
  const std::vector<float> x0(x.p, x.p + numel), dy0(dy.p, dy.p + numel);
  float* dxp = alias == 1 ? x.p : alias == 2 ? dy.p : dx.p;
  const int64_t shape[3] = {N, C, S};
  const auto layout = cl ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
  normkit_tensor xt, dyt, dxt;
  normkit_tensor_init(&xt, x.p, NORMKIT_DTYPE_FLOAT32, layout, 3, shape);
  normkit_tensor_init(&dyt, dy.p, NORMKIT_DTYPE_FLOAT32, layout, 3, shape);
  normkit_tensor_init(&dxt, dxp, NORMKIT_DTYPE_FLOAT32, layout, 3, shape);
  if (normkit_batch_norm_training_backward(nullptr, &xt, &dyt, sm.data(), sr.data(), gamma.data(),
                                           &dxt, gg.data(), gb.data()) != NORMKIT_SUCCESS) {
    std::fprintf(stderr, "valid batch_norm_training_backward rejected: %s\n", normkit_last_error());
    std::abort();
  }
  constexpr double kEps = 1.1920928955078125e-7, kRun = 80 * kEps, kTiny = 1.4e-45;
  // Within tol, or the reference's own rounding to float (an Inf past FLT_MAX: a result
  // within tol of a value just past it may round either way).
  const auto check = [](const char* what, int64_t at, float got, double want, double tol) {
    const bool ok = std::isnan(want)
                        ? std::isnan(got)
                        : got == static_cast<float>(want) || std::fabs(got - want) <= tol;
    if (!ok) Fail(what, at, got, want);
  };
  for (int64_t c = 0; c < C; ++c) {
    const size_t cs = static_cast<size_t>(c);
    const double mean = sm[cs], rstd = sr[cs], count = static_cast<double>(N * S);
    double sum_dy = 0, sum_dot = 0, abs_dy = 0, abs_dot = 0;
    for (int64_t k = 0; k < N * S; ++k) {
      const size_t at = static_cast<size_t>(index_of(c, k));
      const double d = dy0[at], t = static_cast<double>(x0[at]) - mean;
      sum_dy += d, sum_dot += d * t, abs_dy += std::fabs(d), abs_dot += std::fabs(d * t);
    }
    check("batch_norm_backward grad_beta", c, gb[cs], sum_dy,
          kRun * abs_dy + kEps * std::fabs(sum_dy) + count * kTiny);
    check("batch_norm_backward grad_gamma", c, gg[cs], rstd * sum_dot,
          rstd * (kRun * abs_dot + kEps * std::fabs(sum_dot) + count * kTiny) + kTiny);
    const double p = static_cast<double>(gamma[cs]) * rstd;
    const double mean_dy = sum_dy / count, mean_dy_xhat = rstd * sum_dot / count;
    for (int64_t k = 0; k < N * S; ++k) {
      const size_t at = static_cast<size_t>(index_of(c, k));
      const double xhat = (static_cast<double>(x0[at]) - mean) * rstd, d = dy0[at];
      const double want = p * ((d - mean_dy) - xhat * mean_dy_xhat);
      const double terms = std::fabs(d) + std::fabs(mean_dy) + std::fabs(xhat * mean_dy_xhat);
      const double tol =
          std::fabs(p) *
              (6 * kEps * terms +
               (kRun * (abs_dy + std::fabs(xhat) * rstd * abs_dot) + count * kTiny * (1 + rstd)) /
                   count +
               4 * kTiny) +
          kEps * std::fabs(want) + kTiny;
      check("batch_norm_backward dx", static_cast<int64_t>(at), dxp[at], want, tol);
    }
  }
}

void FuzzBatchNorm(FuzzedDataProvider& in) {
  const int64_t N = in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t C = in.ConsumeIntegralInRange<int64_t>(1, 40);
  const int64_t S = in.ConsumeIntegralInRange<int64_t>(1, 200);
  const int64_t numel = N * C * S;
  const bool cl = in.ConsumeBool(), in_place = in.ConsumeBool();
  // Running statistics from the palette (a mean far from the spread, a tiny var).
  const Palette pal = Palette::Pick(in);
  Floats x(numel, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Floats y(numel, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Floats params(4 * C, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  float *gamma = params.p, *beta = params.p + C, *mean = params.p + 2 * C, *var = params.p + 3 * C;
  Fill(gamma, C, {1.25, 0.75}, in.ConsumeIntegral<uint32_t>());
  Fill(beta, C, {0, 1}, in.ConsumeIntegral<uint32_t>());
  Fill(mean, C, {pal.base, std::fabs(pal.spread)}, in.ConsumeIntegral<uint32_t>());
  const double sd = std::min(std::fabs(pal.spread), 1e19);
  Fill(var, C, {sd * sd, 0.5 * sd * sd}, in.ConsumeIntegral<uint32_t>());
  for (int64_t c = 0; c < C; ++c) var[c] = std::fabs(var[c]);
  // x about each channel's running mean, a few of its standard deviations out.
  uint32_t state = in.ConsumeIntegral<uint32_t>() | 1u;
  for (int64_t i = 0; i < numel; ++i) {
    const int64_t c = cl ? i % C : (i / S) % C;
    const Palette around{mean[c], 3.0 * std::sqrt(static_cast<double>(var[c]))};
    x.p[i] = around.Draw(&state);
  }
  const std::vector<float> x0(x.p, x.p + numel);
  if (in_place) std::memcpy(y.p, x.p, static_cast<size_t>(numel) * sizeof(float));
  const int64_t shape[3] = {N, C, S};
  normkit_tensor xt, yt;
  const auto layout = cl ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
  normkit_tensor_init(&xt, in_place ? y.p : x.p, NORMKIT_DTYPE_FLOAT32, layout, 3, shape);
  normkit_tensor_init(&yt, y.p, NORMKIT_DTYPE_FLOAT32, layout, 3, shape);
  const float eps = 1e-5f;
  const normkit_status st =
      normkit_batch_norm_inference(nullptr, &xt, gamma, beta, mean, var, eps, &yt);
  CheckStatus(st);
  if (st != NORMKIT_SUCCESS) {
    std::fprintf(stderr, "valid batch norm rejected: %s\n", normkit_last_error());
    std::abort();
  }
  for (int64_t i = 0; i < numel; ++i) {
    const int64_t c = cl ? i % C : (i / S) % C;
    const double dev = static_cast<double>(x0[i]) - mean[c];
    if (std::fabs(dev) > 1e38) continue;
    const double want = dev / std::sqrt(static_cast<double>(var[c]) + eps) * gamma[c] + beta[c];
    if (std::fabs(want) > 1e38) continue;  // near float's overflow
    const double tol =
        1e-5 * (std::fabs(gamma[c]) + std::fabs(beta[c])) + 8 * 0x1p-24 * std::fabs(want);
    if (!(std::fabs(y.p[i] - want) <= tol)) {
      std::fprintf(stderr,
                   "N=%lld C=%lld S=%lld channels_last=%d in_place=%d: x %.9g mean %.9g "
                   "var %.9g gamma %.9g beta %.9g\n",
                   static_cast<long long>(N), static_cast<long long>(C), static_cast<long long>(S),
                   cl, in_place, x0[i], mean[c], var[c], gamma[c], beta[c]);
      Fail("batch_norm_inference", i, y.p[i], want);
    }
  }
}

// Rejections: a pointer off its element size, a parameter inside y; nothing written.
void FuzzRejections(FuzzedDataProvider& in) {
  const int64_t C = in.ConsumeIntegralInRange<int64_t>(1, 16), S = 8, numel = 2 * C * S;
  const int which = in.ConsumeIntegralInRange<int>(0, 5);
  const int skew = in.ConsumeIntegralInRange<int>(1, 3);
  Floats x(numel, 0, which == 0 ? skew : 0);
  Floats y(numel + 4 * C, 0, which == 1 ? skew : 0);
  Floats p(4 * C, 0, which == 2 ? skew : 0);
  Fill(x.p, numel, {0, 1}, 7);
  Fill(p.p, 4 * C, {1, 0.5}, 9);
  Fill(y.p, numel + 4 * C, {3, 0}, 11);
  const float* mean = p.p + 2 * C;
  if (which >= 3) {  // running_mean (3), gamma (4) or running_var (5) stored inside y
    std::memcpy(y.p + numel - C, p.p + 2 * C, static_cast<size_t>(C) * sizeof(float));
  }
  const float* g = which == 4 ? y.p + numel - C : p.p;
  const float* m = which == 3 ? y.p + numel - C : mean;
  const float* v = which == 5 ? y.p + numel - C : p.p + 3 * C;
  const std::vector<uint8_t> before = y.storage;
  const int64_t shape[3] = {2, C, S};
  normkit_tensor xt, yt;
  normkit_tensor_init(&xt, x.p, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 3, shape);
  normkit_tensor_init(&yt, y.p, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 3, shape);
  const normkit_status st =
      normkit_batch_norm_inference(nullptr, &xt, g, p.p + C, m, v, 1e-5f, &yt);
  CheckStatus(st);
  if (st != NORMKIT_ERROR_INVALID_ARGUMENT || y.storage != before) {
    std::fprintf(stderr, "case %d: status %d (%s), output %s\n", which, st, normkit_last_error(),
                 y.storage != before ? "written" : "untouched");
    std::abort();
  }
}

// The fold with its outputs as any of its input arrays: the documented values.
void FuzzFoldAliasing(FuzzedDataProvider& in) {
  const int64_t C = in.ConsumeIntegralInRange<int64_t>(1, 40);
  std::vector<float> arrays[4];
  for (int k = 0; k < 4; ++k) {
    arrays[k].resize(static_cast<size_t>(C));
    Fill(arrays[k].data(), C, k == 3 ? Palette{2, 1.9} : Palette{0, 2},
         in.ConsumeIntegral<uint32_t>());
  }
  const std::vector<float> g0 = arrays[0], b0 = arrays[1], m0 = arrays[2], v0 = arrays[3];
  std::vector<float> own_scale(C), own_shift(C);
  const int scale_at = in.ConsumeIntegralInRange<int>(0, 4);
  int shift_at = in.ConsumeIntegralInRange<int>(0, 4);
  if (shift_at == scale_at && shift_at < 4) shift_at = 4;
  float* scale = scale_at < 4 ? arrays[scale_at].data() : own_scale.data();
  float* shift = shift_at < 4 ? arrays[shift_at].data() : own_shift.data();
  const normkit_status st =
      normkit_batch_norm_fold(C, arrays[0].data(), arrays[1].data(), arrays[2].data(),
                              arrays[3].data(), 1e-3f, scale, shift);
  CheckStatus(st);
  if (st != NORMKIT_SUCCESS) std::abort();
  for (int64_t c = 0; c < C; ++c) {
    const double s = g0[c] / std::sqrt(static_cast<double>(v0[c]) + 1e-3);
    const double h = b0[c] - m0[c] * s;
    if (std::fabs(scale[c] - s) > 3e-7 * std::fabs(s)) Fail("fold scale", c, scale[c], s);
    if (std::fabs(shift[c] - h) > 3e-7 * (std::fabs(m0[c] * s) + std::fabs(h))) {
      Fail("fold shift", c, shift[c], h);
    }
  }
}

// The dtype pairs (x, y) of half storage: one half dtype, or one side float32.
std::pair<int32_t, int32_t> PickHalfPair(FuzzedDataProvider& in) {
  static const int32_t kPairs[6][2] = {{NORMKIT_DTYPE_FLOAT32, NORMKIT_DTYPE_BFLOAT16},
                                       {NORMKIT_DTYPE_FLOAT32, NORMKIT_DTYPE_FLOAT16},
                                       {NORMKIT_DTYPE_BFLOAT16, NORMKIT_DTYPE_BFLOAT16},
                                       {NORMKIT_DTYPE_FLOAT16, NORMKIT_DTYPE_FLOAT16},
                                       {NORMKIT_DTYPE_BFLOAT16, NORMKIT_DTYPE_FLOAT32},
                                       {NORMKIT_DTYPE_FLOAT16, NORMKIT_DTYPE_FLOAT32}};
  const int32_t* pair = kPairs[in.ConsumeIntegralInRange<int>(0, 5)];
  return {pair[0], pair[1]};
}

// Stores *v as `dtype` at p (half: rounded plainly) and replaces *v with the float the
// library loads from there: the exact widening, NaN payloads included.
void StoreAs(int32_t dtype, float* v, uint8_t* p) {
  using normkit_test::FormatOf;
  if (dtype == NORMKIT_DTYPE_FLOAT32) {
    std::memcpy(p, v, 4);
    return;
  }
  const uint16_t h = normkit_test::Narrow(*v, FormatOf(dtype));
  std::memcpy(p, &h, 2);
  if (dtype == NORMKIT_DTYPE_BFLOAT16 || normkit_test::IsNaNBits(h, FormatOf(dtype))) {
    const uint32_t bits = dtype == NORMKIT_DTYPE_BFLOAT16
                              ? uint32_t{h} << 16
                              : (uint32_t{h} & 0x8000u) << 16 | 0x7f800000u | (h & 0x3ffu) << 13;
    std::memcpy(v, &bits, 4);
  } else {
    *v = static_cast<float>(normkit_test::Decode(h, FormatOf(dtype)));
  }
}

// Output i of `dtype` at p against the float32 result w rounded to it. A NaN w wants a NaN:
// which NaN is unspecified where two meet (x86 keeps the first operand's, and a kernel may
// add a + b where another adds b + a: the same sum for every other value).
void ExpectRounded(const char* what, int32_t dtype, const uint8_t* p, int64_t i, float w) {
  const int64_t size = dtype == NORMKIT_DTYPE_FLOAT32 ? 4 : 2;
  uint32_t got = 0, want;
  std::memcpy(&got, p + size * i, static_cast<size_t>(size));
  bool got_nan;
  if (dtype == NORMKIT_DTYPE_FLOAT32) {
    std::memcpy(&want, &w, 4);
    got_nan = (got & 0x7FFFFFFFu) > 0x7F800000u;
  } else {
    want = normkit_test::Narrow(w, normkit_test::FormatOf(dtype));
    got_nan = normkit_test::IsNaNBits(static_cast<uint16_t>(got), normkit_test::FormatOf(dtype));
  }
  if (std::isnan(w) && got_nan) return;
  if (got != want) Fail(what, i, got, want);
}

// Affine in half storage (every supported pair of dtypes, either layout, in place for one
// dtype, data at any element offset): each output within one unit of its format of the
// double result rounded to it (float32 outputs: within float32 rounding), NaN where the
// input is NaN, the exact rounding of float32 overflow to Inf.
void FuzzHalfAffine(FuzzedDataProvider& in) {
  using normkit_test::Decode;
  using normkit_test::Encode;
  using normkit_test::FormatOf;
  using normkit_test::Narrow;
  const std::pair<int32_t, int32_t> pair = PickHalfPair(in);
  const int32_t xd = pair.first, yd = pair.second;
  const int64_t N = in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t C = in.ConsumeIntegralInRange<int64_t>(1, 40);
  const int64_t S = in.ConsumeIntegralInRange<int64_t>(1, 200);
  const int64_t numel = N * C * S;
  const bool cl = in.ConsumeBool(), in_place = xd == yd && in.ConsumeBool();
  const bool has_scale = in.ConsumeBool(), has_shift = in.ConsumeBool();
  const Palette pal = Palette::Pick(in);
  const int64_t xs = xd == NORMKIT_DTYPE_FLOAT32 ? 4 : 2, ys = yd == NORMKIT_DTYPE_FLOAT32 ? 4 : 2;
  std::vector<uint8_t> xbuf(static_cast<size_t>((numel + 16) * xs));
  std::vector<uint8_t> ybuf(static_cast<size_t>((numel + 16) * ys));
  uint8_t* xp = xbuf.data() + in.ConsumeIntegralInRange<int64_t>(0, 15) * xs;
  uint8_t* yp = in_place ? xp : ybuf.data() + in.ConsumeIntegralInRange<int64_t>(0, 15) * ys;
  const auto get = [](const uint8_t* p, int32_t dtype, int64_t i) -> double {
    if (dtype == NORMKIT_DTYPE_FLOAT32) {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return Decode(h, FormatOf(dtype));
  };
  uint32_t state = in.ConsumeIntegral<uint32_t>() | 1u;
  for (int64_t i = 0; i < numel; ++i) {
    float v = pal.Draw(&state);
    if (state % 97 == 0) v = (state & 64) ? NAN : ((state & 128) ? INFINITY : -INFINITY);
    if (xd == NORMKIT_DTYPE_FLOAT32) {
      std::memcpy(xp + 4 * i, &v, 4);
    } else {
      const uint16_t h = Narrow(v, FormatOf(xd));
      std::memcpy(xp + 2 * i, &h, 2);
    }
  }
  std::vector<double> x0(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) x0[static_cast<size_t>(i)] = get(xp, xd, i);
  std::vector<float> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  Fill(scale.data(), C, {0, 2}, in.ConsumeIntegral<uint32_t>());
  Fill(shift.data(), C, {0, std::fabs(pal.spread) > 1e30 ? 1.0 : pal.spread},
       in.ConsumeIntegral<uint32_t>());
  normkit_tensor xt, yt;
  const int64_t shape[3] = {N, C, S};
  const auto layout = cl ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
  normkit_tensor_init(&xt, xp, static_cast<normkit_dtype>(xd), layout, 3, shape);
  normkit_tensor_init(&yt, yp, static_cast<normkit_dtype>(yd), layout, 3, shape);
  const normkit_status st =
      normkit_affine(nullptr, &xt, has_scale ? scale.data() : nullptr,
                     has_shift ? shift.data() : nullptr, NORMKIT_PARAMS_PER_CHANNEL, &yt);
  if (st != NORMKIT_SUCCESS) {
    std::fprintf(stderr, "valid half affine rejected: %s\n", normkit_last_error());
    std::abort();
  }
  for (int64_t i = 0; i < numel; ++i) {
    const int64_t c = cl ? i % C : (i / S) % C;
    const double v = x0[static_cast<size_t>(i)];
    const double s = has_scale ? scale[static_cast<size_t>(c)] : 1.0;
    const double b = has_shift ? shift[static_cast<size_t>(c)] : 0.0;
    const double want = v * s + b;
    const double got = get(yp, yd, i);
    if (std::isnan(want) || std::isnan(got)) {
      if (std::isnan(want) != std::isnan(got)) Fail("half affine NaN", i, got, want);
      continue;
    }
    // The float32 result lies within err of the exact one (one FMA, or a product and a sum
    // each rounded); rounding to the half format is monotonic, so the output lies between
    // the roundings of want - err and want + err.
    // (plus the absolute rounding of float32 subnormals)
    const double err = 0x1p-23 * (std::fabs(v * s) + std::fabs(b)) + 0x1p-148;
    if (std::fabs(v * s) + err > FLT_MAX || std::fabs(want) + err > FLT_MAX) continue;
    if (yd == NORMKIT_DTYPE_FLOAT32) {
      if (!(std::fabs(got - want) <= err)) Fail("half affine to float32", i, got, want);
      continue;
    }
    const auto f = FormatOf(yd);
    const double lo = Decode(Encode(want - err, f), f), hi = Decode(Encode(want + err, f), f);
    if (!(got >= lo && got <= hi)) Fail("half affine", i, got, want);
  }
}

// Group norm and layer / RMS norm in a half dtype pair: a half x gives bitwise the float32
// call's result on its widened values (statistics included), a half y that result
// rounded (Narrow). The float32 calls themselves are checked against double in FuzzNorms.
void FuzzHalfNorms(FuzzedDataProvider& in) {
  using normkit_test::FormatOf;
  using normkit_test::Narrow;
  const std::pair<int32_t, int32_t> pair = PickHalfPair(in);
  const int32_t xd = pair.first, yd = pair.second;
  const bool rows = in.ConsumeBool();
  const int64_t N = in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t C = in.ConsumeIntegralInRange<int64_t>(1, 24);
  const int64_t S = rows ? 1 : in.ConsumeIntegralInRange<int64_t>(1, 300);
  int64_t G = 1;
  if (!rows) {
    G = in.ConsumeIntegralInRange<int64_t>(1, C);
    while (C % G != 0) --G;
  }
  const bool rms = rows && in.ConsumeBool();
  const bool cl = in.ConsumeBool(), in_place = xd == yd && in.ConsumeBool();
  const int32_t act = rows ? 0 : in.ConsumeIntegralInRange<int32_t>(0, 2);
  const int64_t numel = N * C * S;
  const Palette pal = Palette::Pick(in);
  const int64_t xs = xd == NORMKIT_DTYPE_FLOAT32 ? 4 : 2, ys = yd == NORMKIT_DTYPE_FLOAT32 ? 4 : 2;
  std::vector<uint8_t> xbuf(static_cast<size_t>((numel + 16) * xs));
  std::vector<uint8_t> ybuf(static_cast<size_t>((numel + 16) * ys));
  uint8_t* xp = xbuf.data() + in.ConsumeIntegralInRange<int64_t>(0, 15) * xs;
  uint8_t* yp = in_place ? xp : ybuf.data() + in.ConsumeIntegralInRange<int64_t>(0, 15) * ys;
  std::vector<float> wide(static_cast<size_t>(numel)), wide_y(wide.size());
  Fill(wide.data(), numel, pal, in.ConsumeIntegral<uint32_t>());
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {  // a NaN or an Inf somewhere
    const float bad[] = {NAN, INFINITY, -INFINITY};
    wide[static_cast<size_t>(in.ConsumeIntegralInRange<int64_t>(0, numel - 1))] =
        bad[in.ConsumeIntegralInRange<int>(0, 2)];
  }
  for (int64_t i = 0; i < numel; ++i) StoreAs(xd, &wide[static_cast<size_t>(i)], xp + xs * i);
  std::vector<float> gamma(static_cast<size_t>(C)), beta(static_cast<size_t>(C));
  Fill(gamma.data(), C, {1.25, 0.75}, in.ConsumeIntegral<uint32_t>());
  Fill(beta.data(), C, {0, 1}, in.ConsumeIntegral<uint32_t>());
  const float eps = in.ConsumeBool() ? 1e-5f : 1e-30f;
  const int64_t units = rows ? N : N * G;
  std::vector<float> mean(static_cast<size_t>(units)), rstd(mean.size()), mean_w(mean.size()),
      rstd_w(mean.size());
  const int64_t shape[3] = {N, C, S};
  const auto layout = cl ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
  const int32_t rank = rows ? 2 : 3;
  normkit_tensor xt, yt, wt, wyt;
  normkit_tensor_init(&xt, xp, static_cast<normkit_dtype>(xd), layout, rank, shape);
  normkit_tensor_init(&yt, yp, static_cast<normkit_dtype>(yd), layout, rank, shape);
  normkit_tensor_init(&wt, wide.data(), NORMKIT_DTYPE_FLOAT32, layout, rank, shape);
  normkit_tensor_init(&wyt, wide_y.data(), NORMKIT_DTYPE_FLOAT32, layout, rank, shape);
  const auto run = [&](const normkit_tensor* a, const normkit_tensor* b, float* m, float* r) {
    if (!rows) {
      return normkit_group_norm(nullptr, a, G, gamma.data(), beta.data(), eps, act, b, m, r);
    }
    return rms ? normkit_rms_norm(nullptr, a, gamma.data(), eps, b, r)
               : normkit_layer_norm(nullptr, a, gamma.data(), beta.data(), eps, b, m, r);
  };
  if (run(&wt, &wyt, mean_w.data(), rstd_w.data()) != NORMKIT_SUCCESS ||
      run(&xt, &yt, mean.data(), rstd.data()) != NORMKIT_SUCCESS) {
    std::fprintf(stderr, "valid half norm rejected: %s\n", normkit_last_error());
    std::abort();
  }
  if (std::memcmp(mean.data(), mean_w.data(), mean.size() * 4) != 0 ||
      std::memcmp(rstd.data(), rstd_w.data(), rstd.size() * 4) != 0) {
    Fail("half norm statistics differ from the float32 call's", 0, rstd[0], rstd_w[0]);
  }
  for (int64_t i = 0; i < numel; ++i) {
    ExpectRounded("half norm output is not the float32 result rounded", yd, yp, i,
                  wide_y[static_cast<size_t>(i)]);
  }
}

// The shift-sum family with half tensors (every pair; masks, normalizers float32) on
// small geometries of every path, axis, step sign and mask form, from the edges of
// float (sums overflowing, NaN / Inf): bitwise the float32 call on the widened values,
// rounded to the output's format.
void FuzzHalfShiftSum(FuzzedDataProvider& in) {
  const std::pair<int32_t, int32_t> pair = PickHalfPair(in);  // (read, written)
  const int64_t B = in.ConsumeIntegralInRange<int64_t>(1, 3);
  const int64_t C = in.ConsumeIntegralInRange<int64_t>(1, 40);
  const int64_t H = in.ConsumeIntegralInRange<int64_t>(1, 6);
  const int64_t W = in.ConsumeIntegralInRange<int64_t>(1, 70);
  const int64_t S = in.ConsumeIntegralInRange<int64_t>(-3, 3);
  const bool along_h = in.ConsumeBool(), cl = in.ConsumeBool();
  const int32_t kind = in.ConsumeIntegralInRange<int32_t>(0, 5);
  const int op = in.ConsumeIntegralInRange<int>(0, 6);
  const int64_t spread = (C - 1) * (S < 0 ? -S : S);
  const int64_t Hp = along_h ? H + spread : H, Wp = along_h ? W : W + spread;
  const int64_t nx = B * C * H * W, ny = B * Hp * Wp, ns = B * C * Hp * Wp;
  const bool per_sample = kind == NORMKIT_MASK_BCHW || kind == NORMKIT_MASK_PHI_BCHW;
  const int64_t mask_elems[] = {0, H * W, C * H * W, B * C * H * W, C * Hp * Wp, B * C * Hp * Wp};
  // 0 A, 1 A^T, 2 pinv MP, 3 pinv divide-by-mask, 4 GAP step, 5 shift, 6 unshift.
  const int64_t n_in = op == 0 || op == 5 ? nx : op == 6 ? ns : ny;
  const int64_t n_out = op == 0 ? ny : op == 5 ? ns : nx;
  const Palette pal = Palette::Pick(in);
  const int64_t in_size = pair.first == NORMKIT_DTYPE_FLOAT32 ? 4 : 2;
  const int64_t out_size = pair.second == NORMKIT_DTYPE_FLOAT32 ? 4 : 2;
  std::vector<uint8_t> in_buf(static_cast<size_t>(n_in * in_size));
  std::vector<uint8_t> out_buf(static_cast<size_t>(n_out * out_size));
  std::vector<float> in_wide(static_cast<size_t>(n_in)), out_wide(static_cast<size_t>(n_out));
  Fill(in_wide.data(), n_in, pal, in.ConsumeIntegral<uint32_t>());
  Fill(out_wide.data(), n_out, pal, in.ConsumeIntegral<uint32_t>());  // the GAP step's x
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    in_wide[static_cast<size_t>(in.ConsumeIntegralInRange<int64_t>(0, n_in - 1))] = NAN;
  }
  for (int64_t i = 0; i < n_in; ++i) {
    StoreAs(pair.first, &in_wide[static_cast<size_t>(i)], in_buf.data() + in_size * i);
  }
  for (int64_t i = 0; i < n_out; ++i) {
    StoreAs(pair.second, &out_wide[static_cast<size_t>(i)], out_buf.data() + out_size * i);
  }
  std::vector<float> mask(static_cast<size_t>(std::max<int64_t>(mask_elems[kind], 1)));
  Fill(mask.data(), static_cast<int64_t>(mask.size()), {0.5, 0.5}, in.ConsumeIntegral<uint32_t>());
  for (size_t i = 0; i < mask.size(); i += 5) mask[i] = 0.0f;
  normkit_shift_sum_params params;
  normkit_shift_sum_params_init(&params, S);
  params.axis = along_h ? NORMKIT_SHIFT_ALONG_H : NORMKIT_SHIFT_ALONG_W;
  params.scale = in.ConsumeBool() ? 1.0 : 0.375;
  params.mask_kind = kind;
  params.mask = kind == NORMKIT_MASK_NONE ? nullptr : mask.data();
  const auto layout = cl ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
  const int64_t xshape[4] = {B, C, H, W}, yshape[4] = {B, 1, Hp, Wp}, sshape[4] = {B, C, Hp, Wp};
  std::vector<float> phi(static_cast<size_t>((per_sample ? B : 1) * Hp * Wp));
  const bool given = in.ConsumeBool();
  const auto call = [&](void* src, int32_t src_dtype, void* dst, int32_t dst_dtype) {
    normkit_tensor a, b;
    const int64_t* a_shape = op == 0 || op == 5 ? xshape : op == 6 ? sshape : yshape;
    const int64_t* b_shape = op == 0 ? yshape : op == 5 ? sshape : xshape;
    normkit_tensor_init(&a, src, static_cast<normkit_dtype>(src_dtype),
                        a_shape == yshape ? NORMKIT_LAYOUT_CHANNELS_FIRST : layout, 4, a_shape);
    normkit_tensor_init(&b, dst, static_cast<normkit_dtype>(dst_dtype),
                        b_shape == yshape ? NORMKIT_LAYOUT_CHANNELS_FIRST : layout, 4, b_shape);
    const float* norm = given ? phi.data() : nullptr;
    switch (op) {
      case 0: return normkit_shift_sum(nullptr, &a, &params, &b);
      case 1: return normkit_shift_sum_adjoint(nullptr, &a, &params, &b);
      case 2: return normkit_shift_sum_pinv(nullptr, &a, &params, 0, norm, &b);
      case 3: return normkit_shift_sum_pinv(nullptr, &a, &params, 1, nullptr, &b);
      case 4: return normkit_shift_sum_gap_step(nullptr, &b, &a, &params, 0.5, 0.25, norm);
      case 5: return normkit_shift(nullptr, &a, &params, &b);
      default: return normkit_unshift(nullptr, &a, &params, &b);
    }
  };
  normkit_tensor shape_only;
  normkit_tensor_init(&shape_only, nullptr, static_cast<normkit_dtype>(pair.first), layout, 4,
                      xshape);
  if ((given && normkit_shift_sum_normalizer(nullptr, &shape_only, &params, phi.data()) !=
                    NORMKIT_SUCCESS) ||
      call(in_wide.data(), NORMKIT_DTYPE_FLOAT32, out_wide.data(), NORMKIT_DTYPE_FLOAT32) !=
          NORMKIT_SUCCESS ||
      call(in_buf.data(), pair.first, out_buf.data(), pair.second) != NORMKIT_SUCCESS) {
    std::fprintf(stderr, "valid half shift-sum call rejected: %s\n", normkit_last_error());
    std::abort();
  }
  for (int64_t i = 0; i < n_out; ++i) {
    ExpectRounded("half shift-sum output is not the float32 result rounded", pair.second,
                  out_buf.data(), i, out_wide[static_cast<size_t>(i)]);
  }
}

// The fused residual add + layer / RMS norm: h bitwise the two float adds, y against the
// definition on h (CheckGroup), on edge magnitudes (x + residual overflowing, cancelling),
// with every in-place pairing of the outputs and inputs.
void FuzzAddNorms(FuzzedDataProvider& in) {
  const int64_t rows = in.ConsumeIntegralInRange<int64_t>(1, 4);
  const int64_t D = in.ConsumeIntegralInRange<int64_t>(1, 300);
  const int64_t n = rows * D;
  const bool rms = in.ConsumeBool(), has_bias = in.ConsumeBool(), has_h = in.ConsumeBool();
  Floats x(n, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Floats r(n, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Floats y(n, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Floats h(n, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Floats params(3 * D, in.ConsumeIntegralInRange<int64_t>(0, 15), 0);
  Fill(x.p, n, Palette::Pick(in), in.ConsumeIntegral<uint32_t>());
  Fill(r.p, n, Palette::Pick(in), in.ConsumeIntegral<uint32_t>());
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {  // a NaN or an Inf somewhere
    const float bad[] = {NAN, INFINITY, -INFINITY};
    (in.ConsumeBool() ? x : r).p[in.ConsumeIntegralInRange<int64_t>(0, n - 1)] =
        bad[in.ConsumeIntegralInRange<int>(0, 2)];
  }
  float* bias = params.p;
  float* gamma = params.p + D;
  float* beta = params.p + 2 * D;
  Fill(bias, D, Palette::Pick(in), in.ConsumeIntegral<uint32_t>());
  Fill(gamma, D, {1.25, 0.75}, in.ConsumeIntegral<uint32_t>());
  Fill(beta, D, {0, 1}, in.ConsumeIntegral<uint32_t>());
  std::vector<float> h_want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float sum = x.p[i] + r.p[i];
    h_want[i] = has_bias ? sum + bias[i % D] : sum;
  }
  // 0: own buffers; 1: y = x; 2: y = residual; 3: h = x; 4: h = residual; 5: y = x, h = r.
  const int aliasing = in.ConsumeIntegralInRange<int>(0, has_h ? 5 : 2);
  float* yp = aliasing == 1 || aliasing == 5 ? x.p : aliasing == 2 ? r.p : y.p;
  float* hp = aliasing == 3 ? x.p : aliasing == 4 || aliasing == 5 ? r.p : h.p;
  const float eps = in.ConsumeBool() ? 1e-5f : 1e-30f;
  const int64_t shape[2] = {rows, D};
  normkit_tensor xt, rt, yt, ht;
  for (auto [t, p] :
       {std::pair<normkit_tensor*, float*>{&xt, x.p}, {&rt, r.p}, {&yt, yp}, {&ht, hp}}) {
    normkit_tensor_init(t, p, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 2, shape);
  }
  std::vector<float> mean_out(static_cast<size_t>(rows), -7.f), rstd_out(mean_out);
  const normkit_status st =
      rms ? normkit_add_rms_norm(nullptr, &xt, &rt, has_bias ? bias : nullptr, gamma, eps, &yt,
                                 has_h ? &ht : nullptr, rstd_out.data())
          : normkit_add_layer_norm(nullptr, &xt, &rt, has_bias ? bias : nullptr, gamma, beta, eps,
                                   &yt, has_h ? &ht : nullptr, mean_out.data(), rstd_out.data());
  CheckStatus(st);
  if (st != NORMKIT_SUCCESS) {
    std::fprintf(stderr, "valid add-norm call rejected: %s\n", normkit_last_error());
    std::abort();
  }
  if (has_h && std::memcmp(hp, h_want.data(), static_cast<size_t>(n) * sizeof(float)) != 0) {
    for (int64_t i = 0; i < n; ++i) {
      if (std::memcmp(&hp[i], &h_want[i], sizeof(float)) != 0)
        Fail("add_norm h", i, hp[i], h_want[i]);
    }
  }
  for (int64_t row = 0; row < rows; ++row) {
    CheckGroup(
        rms ? "add_rms_norm" : "add_layer_norm", h_want.data(), yp, D,
        [&](int64_t k) { return row * D + k; }, [&](int64_t k) -> double { return gamma[k]; },
        [&](int64_t k) -> double { return beta[k]; }, eps, rms, mean_out[row], rstd_out[row], !rms,
        true);
  }
}

// The fused residual add + layer / RMS norm in a half dtype pair: x, residual and h of
// x's dtype, h bitwise the two float adds of the widened values rounded plainly (Narrow),
// y and the statistics bitwise the float32 norm of that h's widened values, rounded to
// y's dtype; data off vector boundaries, the in-place pairings of one dtype.
void FuzzHalfAddNorms(FuzzedDataProvider& in) {
  const std::pair<int32_t, int32_t> pair = PickHalfPair(in);
  const int32_t xd = pair.first, yd = pair.second;
  const int64_t rows = in.ConsumeIntegralInRange<int64_t>(1, 4);
  const int64_t D = in.ConsumeIntegralInRange<int64_t>(1, 300);
  const int64_t n = rows * D;
  const bool rms = in.ConsumeBool(), has_bias = in.ConsumeBool(), has_h = in.ConsumeBool();
  const int64_t xs = xd == NORMKIT_DTYPE_FLOAT32 ? 4 : 2, ys = yd == NORMKIT_DTYPE_FLOAT32 ? 4 : 2;
  const auto buffer = [&](int64_t size) {
    return std::vector<uint8_t>(static_cast<size_t>((n + 16) * size));
  };
  std::vector<uint8_t> xbuf = buffer(xs), rbuf = buffer(xs), hbuf = buffer(xs), h_want = buffer(xs),
                       ybuf = buffer(ys);
  const auto at = [&](std::vector<uint8_t>& b, int64_t size) {
    return b.data() + in.ConsumeIntegralInRange<int64_t>(0, 15) * size;
  };
  uint8_t *xp = at(xbuf, xs), *rp = at(rbuf, xs), *hp = at(hbuf, xs), *yp = at(ybuf, ys);
  std::vector<float> xw(static_cast<size_t>(n)), rw(xw.size()), hw(xw.size()), yw(xw.size());
  Fill(xw.data(), n, Palette::Pick(in), in.ConsumeIntegral<uint32_t>());
  Fill(rw.data(), n, Palette::Pick(in), in.ConsumeIntegral<uint32_t>());
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {  // a NaN or an Inf somewhere
    const float bad[] = {NAN, INFINITY, -INFINITY};
    (in.ConsumeBool() ? xw
                      : rw)[static_cast<size_t>(in.ConsumeIntegralInRange<int64_t>(0, n - 1))] =
        bad[in.ConsumeIntegralInRange<int>(0, 2)];
  }
  std::vector<float> params(static_cast<size_t>(3 * D));
  float *bias = params.data(), *gamma = bias + D, *beta = bias + 2 * D;
  Fill(bias, D, Palette::Pick(in), in.ConsumeIntegral<uint32_t>());
  Fill(gamma, D, {1.25, 0.75}, in.ConsumeIntegral<uint32_t>());
  Fill(beta, D, {0, 1}, in.ConsumeIntegral<uint32_t>());
  for (int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<size_t>(i);
    StoreAs(xd, &xw[k], xp + xs * i);
    StoreAs(xd, &rw[k], rp + xs * i);
    const float sum = xw[k] + rw[k];
    hw[k] = has_bias ? sum + bias[i % D] : sum;
    StoreAs(xd, &hw[k], h_want.data() + xs * i);  // h as stored, and its widened value
  }
  // 0: own buffers; 1: y = x; 2: y = residual (one dtype); 3: h = x; 4: h = residual.
  int aliasing = in.ConsumeIntegralInRange<int>(0, has_h ? 4 : 2);
  if (xd != yd && (aliasing == 1 || aliasing == 2)) aliasing = 0;
  if (aliasing == 1) yp = xp;
  if (aliasing == 2) yp = rp;
  if (aliasing == 3) hp = xp;
  if (aliasing == 4) hp = rp;
  const float eps = in.ConsumeBool() ? 1e-5f : 1e-30f;
  const int64_t shape[2] = {rows, D};
  normkit_tensor xt, rt, yt, ht, hwt, ywt;
  normkit_tensor_init(&xt, xp, static_cast<normkit_dtype>(xd), NORMKIT_LAYOUT_CHANNELS_FIRST, 2,
                      shape);
  normkit_tensor_init(&rt, rp, static_cast<normkit_dtype>(xd), NORMKIT_LAYOUT_CHANNELS_FIRST, 2,
                      shape);
  normkit_tensor_init(&ht, hp, static_cast<normkit_dtype>(xd), NORMKIT_LAYOUT_CHANNELS_FIRST, 2,
                      shape);
  normkit_tensor_init(&yt, yp, static_cast<normkit_dtype>(yd), NORMKIT_LAYOUT_CHANNELS_FIRST, 2,
                      shape);
  normkit_tensor_init(&hwt, hw.data(), NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 2,
                      shape);
  normkit_tensor_init(&ywt, yw.data(), NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 2,
                      shape);
  std::vector<float> mean(static_cast<size_t>(rows)), rstd(mean.size()), mean_w(mean.size()),
      rstd_w(mean.size());
  const normkit_status st =
      rms ? normkit_add_rms_norm(nullptr, &xt, &rt, has_bias ? bias : nullptr, gamma, eps, &yt,
                                 has_h ? &ht : nullptr, rstd.data())
          : normkit_add_layer_norm(nullptr, &xt, &rt, has_bias ? bias : nullptr, gamma, beta, eps,
                                   &yt, has_h ? &ht : nullptr, mean.data(), rstd.data());
  const normkit_status st_w =
      rms ? normkit_rms_norm(nullptr, &hwt, gamma, eps, &ywt, rstd_w.data())
          : normkit_layer_norm(nullptr, &hwt, gamma, beta, eps, &ywt, mean_w.data(), rstd_w.data());
  if (st != NORMKIT_SUCCESS || st_w != NORMKIT_SUCCESS) {
    std::fprintf(stderr, "valid half add-norm call rejected: %s\n", normkit_last_error());
    std::abort();
  }
  if (has_h && std::memcmp(hp, h_want.data(), static_cast<size_t>(n * xs)) != 0) {
    Fail("half add_norm h is not the float sum rounded", 0, 0.0, 0.0);
  }
  if ((!rms && std::memcmp(mean.data(), mean_w.data(), mean.size() * 4) != 0) ||
      std::memcmp(rstd.data(), rstd_w.data(), rstd.size() * 4) != 0) {
    Fail("half add_norm statistics differ from the float32 norm of h's", 0, rstd[0], rstd_w[0]);
  }
  for (int64_t i = 0; i < n; ++i) {
    ExpectRounded("half add_norm output is not the float32 norm of h rounded", yd, yp, i,
                  yw[static_cast<size_t>(i)]);
  }
}

// Batch norm training with half tensors: the forward in every pair (in place when x and y
// share a dtype), the backward with x, dy, dx of one half dtype (dx apart, on x, on dy),
// values from the edges of float (sums overflowing, NaN / Inf), data 0-15 elements off:
// every output bitwise the float32 call on the widened values, the half ones rounded.
void FuzzHalfBatchNormTraining(FuzzedDataProvider& in) {
  const bool backward = in.ConsumeBool();
  std::pair<int32_t, int32_t> pair = PickHalfPair(in);
  if (backward) {
    pair.first = pair.first == NORMKIT_DTYPE_FLOAT32 ? pair.second : pair.first;
    pair.second = pair.first;
  }
  const int32_t xd = pair.first, yd = pair.second;
  const int64_t N = in.ConsumeIntegralInRange<int64_t>(1, 4);
  const int64_t C = in.ConsumeIntegralInRange<int64_t>(1, 24);
  const int64_t S = in.ConsumeIntegralInRange<int64_t>(N == 1 ? 2 : 1, 300);
  const bool cl = in.ConsumeBool();
  const int alias = xd == yd ? in.ConsumeIntegralInRange<int>(0, backward ? 2 : 1) : 0;
  const int64_t numel = N * C * S;
  const Palette xpal = Palette::Pick(in), dypal = Palette::Pick(in);
  const int64_t xs = xd == NORMKIT_DTYPE_FLOAT32 ? 4 : 2, ys = yd == NORMKIT_DTYPE_FLOAT32 ? 4 : 2;
  std::vector<uint8_t> xbuf(static_cast<size_t>((numel + 16) * xs));
  std::vector<uint8_t> dybuf(static_cast<size_t>((numel + 16) * xs));
  std::vector<uint8_t> ybuf(static_cast<size_t>((numel + 16) * ys));
  uint8_t* xp = xbuf.data() + in.ConsumeIntegralInRange<int64_t>(0, 15) * xs;
  uint8_t* dyp = dybuf.data() + in.ConsumeIntegralInRange<int64_t>(0, 15) * xs;
  uint8_t* yp = alias == 1   ? xp
                : alias == 2 ? dyp
                             : ybuf.data() + in.ConsumeIntegralInRange<int64_t>(0, 15) * ys;
  // The values as stored, widened: the float32 call's inputs.
  std::vector<float> wide(static_cast<size_t>(numel)), wide_dy(wide.size()), wide_y(wide.size());
  Fill(wide.data(), numel, xpal, in.ConsumeIntegral<uint32_t>());
  Fill(wide_dy.data(), numel, dypal, in.ConsumeIntegral<uint32_t>());
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    const float bad[] = {NAN, INFINITY, -INFINITY};
    auto& v = in.ConsumeBool() ? wide : wide_dy;
    v[static_cast<size_t>(in.ConsumeIntegralInRange<int64_t>(0, numel - 1))] =
        bad[in.ConsumeIntegralInRange<int>(0, 2)];
  }
  for (int64_t i = 0; i < numel; ++i) {
    StoreAs(xd, &wide[static_cast<size_t>(i)], xp + xs * i);
    StoreAs(xd, &wide_dy[static_cast<size_t>(i)], dyp + xs * i);
  }
  const size_t cs = static_cast<size_t>(C);
  std::vector<float> gamma(cs), beta(cs);
  Fill(gamma.data(), C, {1.25, 0.75}, in.ConsumeIntegral<uint32_t>());
  Fill(beta.data(), C, {0, 1}, in.ConsumeIntegral<uint32_t>());
  const int64_t shape[3] = {N, C, S};
  const auto layout = cl ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
  normkit_tensor xt, yt, dyt, wt, wyt, wdyt;
  normkit_tensor_init(&xt, xp, static_cast<normkit_dtype>(xd), layout, 3, shape);
  normkit_tensor_init(&yt, yp, static_cast<normkit_dtype>(yd), layout, 3, shape);
  normkit_tensor_init(&dyt, dyp, static_cast<normkit_dtype>(xd), layout, 3, shape);
  normkit_tensor_init(&wt, wide.data(), NORMKIT_DTYPE_FLOAT32, layout, 3, shape);
  normkit_tensor_init(&wyt, wide_y.data(), NORMKIT_DTYPE_FLOAT32, layout, 3, shape);
  normkit_tensor_init(&wdyt, wide_dy.data(), NORMKIT_DTYPE_FLOAT32, layout, 3, shape);
  // Per-channel arrays of the half call [0] and the float32 call [1]: running mean /
  // var, save mean / rstd (forward); grad_gamma, grad_beta (backward).
  std::vector<float> a[2][4];
  for (auto& call : a) {
    for (auto& v : call) v.assign(cs, 0.5f);
  }
  normkit_status half, single;
  if (!backward) {
    const auto run = [&](const normkit_tensor* x, const normkit_tensor* y, std::vector<float>* v) {
      return normkit_batch_norm_training(nullptr, x, gamma.data(), beta.data(), 1e-5f, 0.1f,
                                         v[0].data(), v[1].data(), y, v[2].data(), v[3].data());
    };
    single = run(&wt, &wyt, a[1]);
    half = run(&xt, &yt, a[0]);
  } else {
    // Saved statistics: the float32 forward's (finite or not).
    std::vector<float> sm(cs), sr(cs);
    normkit_batch_norm_training(nullptr, &wt, nullptr, nullptr, 1e-5f, 0.1f, nullptr, nullptr, &wyt,
                                sm.data(), sr.data());
    const auto run = [&](const normkit_tensor* x, const normkit_tensor* dy,
                         const normkit_tensor* dx, std::vector<float>* v) {
      return normkit_batch_norm_training_backward(nullptr, x, dy, sm.data(), sr.data(),
                                                  gamma.data(), dx, v[0].data(), v[1].data());
    };
    single = run(&wt, &wdyt, &wyt, a[1]);
    half = run(&xt, &dyt, &yt, a[0]);
  }
  if (half != NORMKIT_SUCCESS || single != NORMKIT_SUCCESS) {
    std::fprintf(stderr, "valid half batch norm training rejected: %s\n", normkit_last_error());
    std::abort();
  }
  for (int k = 0; k < 4; ++k) {
    if (std::memcmp(a[0][k].data(), a[1][k].data(), cs * 4) != 0) {
      Fail("half batch norm training's arrays differ from the float32 call's", k, a[0][k][0],
           a[1][k][0]);
    }
  }
  for (int64_t i = 0; i < numel; ++i) {
    ExpectRounded("half batch norm training output is not the float32 result rounded", yd, yp, i,
                  wide_y[static_cast<size_t>(i)]);
  }
}

}  // namespace
}  // namespace normkit_fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  switch (in.ConsumeIntegralInRange<int>(0, 12)) {
    case 12: normkit_fuzz::FuzzHalfBatchNormTraining(in); break;
    case 11: normkit_fuzz::FuzzHalfAddNorms(in); break;
    case 10: normkit_fuzz::FuzzBatchNormBackward(in); break;
    case 9: normkit_fuzz::FuzzBatchNormTraining(in); break;
    case 8: normkit_fuzz::FuzzHalfShiftSum(in); break;
    case 7: normkit_fuzz::FuzzAddNorms(in); break;
    case 6: normkit_fuzz::FuzzHalfNorms(in); break;
    case 5: normkit_fuzz::FuzzHalfAffine(in); break;
    case 0: normkit_fuzz::FuzzNorms(in, false); break;
    case 1: normkit_fuzz::FuzzNorms(in, true); break;
    case 2: normkit_fuzz::FuzzBatchNorm(in); break;
    case 3: normkit_fuzz::FuzzRejections(in); break;
    default: normkit_fuzz::FuzzFoldAliasing(in); break;
  }
  return 0;
}
