// SPDX-License-Identifier: Apache-2.0
// The main job: runs every op on the seed workloads, checks each result against a
// double-precision reference, and prints time, GB/s and the ratio to the same-run
// copy reference (parallel memcpy out of place; parallel x = a*x + b in place) of
// the same bytes with the same threads.
//
//   ./build/bench/normkit_demo            # everything
//   ./build/bench/normkit_demo --quick    # small shapes only (used by the tests)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"

namespace normkit_bench {
namespace {

struct Workload {
  const char* source;
  std::vector<int64_t> shape;
};

int g_failures = 0;

std::string ShapeName(const std::vector<int64_t>& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "x" : "") + std::to_string(s[i]);
  return r;
}

// Checks ~1M evenly spread elements of y against want(n, c, offset) in double.
template <class Want>
bool CheckSample(const float* y, int64_t N, int64_t C, int64_t S, bool channels_last, Want want) {
  const int64_t numel = N * C * S, step = std::max<int64_t>(1, numel / (1 << 20));
  for (int64_t i = 0; i < numel; i += step) {
    const int64_t c = channels_last ? i % C : (i / S) % C;
    const int64_t n = i / (C * S);
    double w, mag;
    want(n, c, i, &w, &mag);
    if (!(std::fabs(y[i] - w) <= 4 * 1.2e-7 * mag + 1e-30)) {
      std::printf("  MISMATCH at %lld: got %.9g want %.9g\n", static_cast<long long>(i), y[i], w);
      return false;
    }
  }
  return true;
}

void PrintRow(const char* op, const Workload& w, normkit_layout layout, bool in_place, int threads,
              const PairTiming& t, int64_t bytes, bool ok) {
  std::printf(
      "| %-22s | %-8s | %-16s | %-4s | %-7s | %2d | %9.3f | %7.2f | %7.2f | %5.2f | %-4s |\n", op,
      w.source, ShapeName(w.shape).c_str(),
      layout == NORMKIT_LAYOUT_CHANNELS_LAST ? "NHWC" : "NCHW", in_place ? "inplace" : "out",
      threads, t.op_s * 1e3, bytes / t.op_s / 1e9, bytes / t.ref_s / 1e9, t.ref_s / t.op_s,
      ok ? "ok" : "FAIL");
  if (!ok) ++g_failures;
}

void RunWorkload(const Workload& w, int threads) {
  const int64_t N = w.shape[0], C = w.shape[1], numel = Numel(w.shape), S = numel / (N * C);
  const int64_t bytes = 2 * numel * static_cast<int64_t>(sizeof(float));
  Buffer x0 = MakeBuffer(numel, 11), x = MakeBuffer(numel, 11), y = MakeBuffer(numel, 12),
         ref = MakeBuffer(numel, 13);
  // Scales in [0.5, 0.9] keep repeated in-place runs bounded and away from denormals.
  Buffer scale = MakeBuffer(N * C, 14), shift = MakeBuffer(N * C, 15), gamma = MakeBuffer(C, 16),
         mean = MakeBuffer(C, 17), var = MakeBuffer(C, 18);
  for (int64_t i = 0; i < N * C; ++i) scale[i] = 0.7f + 0.2f * scale[i];
  for (int64_t c = 0; c < C; ++c) {
    gamma[c] = 0.7f + 0.2f * gamma[c];
    var[c] = 1.0f;
  }
  const float eps = 1e-5f;
  normkit_context* ctx = nullptr;
  normkit_context_create(threads, &ctx);

  struct OpSpec {
    const char* name;
    bool per_sample, has_shift, batch_norm;
  };
  const OpSpec ops[] = {{"affine", false, true, false},
                        {"affine per-sample (000)", true, true, false},
                        {"scale only (004)", false, false, false},
                        {"batch_norm_inference", false, true, true}};
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST;
    for (const OpSpec& op : ops) {
      for (bool in_place : {false, true}) {
        std::memcpy(x.get(), x0.get(), numel * sizeof(float));
        float* out = in_place ? x.get() : y.get();
        normkit_tensor xt = Desc(x.get(), layout, w.shape), yt = Desc(out, layout, w.shape);
        const auto call = [&] {
          const normkit_status s =
              op.batch_norm
                  ? normkit_batch_norm_inference(ctx, &xt, gamma.get(), shift.get(), mean.get(),
                                                 var.get(), eps, &yt)
                  : normkit_affine(ctx, &xt, scale.get(), op.has_shift ? shift.get() : nullptr,
                                   op.per_sample ? NORMKIT_PARAMS_PER_SAMPLE_CHANNEL
                                                 : NORMKIT_PARAMS_PER_CHANNEL,
                                   &yt);
          if (s != NORMKIT_SUCCESS) std::printf("  error: %s\n", normkit_last_error());
        };
        call();
        const bool ok = CheckSample(
            out, N, C, S, cl, [&](int64_t n, int64_t c, int64_t i, double* want, double* mag) {
              const double xv = x0[i];
              if (op.batch_norm) {
                const double s = gamma[c] / std::sqrt(static_cast<double>(var[c]) + eps);
                *want = (xv - mean[c]) * s + shift[c];
                *mag = std::fabs(xv * s) + std::fabs(mean[c] * s) + std::fabs(shift[c]);
              } else {
                const int64_t p = op.per_sample ? n * C + c : c;
                const double b = op.has_shift ? shift[p] : 0.0;
                *want = xv * scale[p] + b;
                *mag = std::fabs(xv * scale[p]) + std::fabs(b);
              }
            });
        const PairTiming t = TimePair(
            call,
            [&] {
              if (in_place)
                ParallelScaleInPlace(threads, ref.get(), numel);
              else
                ParallelCopy(threads, ref.get(), x.get(), numel);
            },
            bytes);
        PrintRow(op.name, w, layout, in_place, threads, t, bytes, ok);
      }
    }
  }
  normkit_context_destroy(ctx);
}

// Group norm (seed 002) and its edge shapes, with and without the fused SiLU; the
// row-wise layer / RMS norm. Checked against per-(n, g) statistics in double.
void RunGroupNorm(const char* source, const std::vector<int64_t>& shape, int64_t G, int threads) {
  const Workload w{source, shape};
  const int64_t N = shape[0], C = shape[1], numel = Numel(shape), S = numel / (N * C), Cg = C / G;
  const int64_t bytes = 2 * numel * static_cast<int64_t>(sizeof(float));
  Buffer x = MakeBuffer(numel, 31), y = MakeBuffer(numel, 32), ref = MakeBuffer(numel, 33),
         gamma = MakeBuffer(C, 34), beta = MakeBuffer(C, 35);
  normkit_context* ctx = nullptr;
  normkit_context_create(threads, &ctx);
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST;
    const auto offset = [&](int64_t n, int64_t c, int64_t s) {
      return cl ? (n * S + s) * C + c : (n * C + c) * S + s;
    };
    std::vector<double> mean(N * G), rstd(N * G);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t g = 0; g < G; ++g) {
        double sum = 0, sq = 0;
        for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c)
          for (int64_t s = 0; s < S; ++s) sum += x[offset(n, c, s)];
        const double m = sum / (Cg * S);
        for (int64_t c = g * Cg; c < (g + 1) * Cg; ++c)
          for (int64_t s = 0; s < S; ++s) sq += (x[offset(n, c, s)] - m) * (x[offset(n, c, s)] - m);
        mean[n * G + g] = m;
        rstd[n * G + g] = 1.0 / std::sqrt(sq / (Cg * S) + 1e-5);
      }
    }
    for (int32_t act : {NORMKIT_ACTIVATION_NONE, NORMKIT_ACTIVATION_SILU}) {
      normkit_tensor xt = Desc(x.get(), layout, shape), yt = Desc(y.get(), layout, shape);
      const auto call = [&] {
        if (normkit_group_norm(ctx, &xt, G, gamma.get(), beta.get(), 1e-5f, act, &yt, nullptr,
                               nullptr) != NORMKIT_SUCCESS)
          std::printf("  error: %s\n", normkit_last_error());
      };
      call();
      bool ok = true;
      const int64_t step = std::max<int64_t>(1, numel / (1 << 20));
      for (int64_t i = 0; i < numel && ok; i += step) {
        const int64_t c = cl ? i % C : (i / S) % C, n = i / (C * S), g = c / Cg;
        const double t = (x[i] - mean[n * G + g]) * rstd[n * G + g] * gamma[c];
        double want = t + beta[c];
        if (act == NORMKIT_ACTIVATION_SILU) want = want / (1 + std::exp(-want));
        if (!(std::fabs(y[i] - want) <= 1e-5 * (std::fabs(t) + std::fabs(beta[c])) + 1e-7)) {
          std::printf("  MISMATCH at %lld: got %.9g want %.9g\n", static_cast<long long>(i), y[i],
                      want);
          ok = false;
        }
      }
      const PairTiming tm = TimePair(
          call, [&] { ParallelCopy(threads, ref.get(), x.get(), numel); }, bytes);
      const std::string name =
          "group_norm G=" + std::to_string(G) + (act == NORMKIT_ACTIVATION_SILU ? " +silu" : "");
      PrintRow(name.c_str(), w, layout, false, threads, tm, bytes, ok);
    }
  }
  normkit_context_destroy(ctx);
}

// bfloat16 bits to float (exact) and a float rounded to bfloat16 (nearest even; the
// values here are finite): the half rows' references.
float FromBF16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
float RoundedToBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return FromBF16(static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16));
}

// Layer / RMS norm of [rows, D]; with `add`, the fused residual add first (h = x + r
// written too: x, r read and y, h written, against a copy of those bytes). Checked on
// every 97th row against the norm of h (h = x without the add) in double. With `bf16`,
// every array in bfloat16 (half the bytes; h rounded to it, y within bfloat16's
// precision of the double norm of that h).
void RunRowNorm(const std::vector<int64_t>& shape, bool rms, bool add, int threads,
                bool bf16 = false) {
  const Workload w{"rows", shape};
  const int64_t rows = shape[0], D = shape[1], numel = rows * D;
  const int64_t arrays = add ? 2 : 1;  // inputs (x, r); as many outputs (y, h)
  const int64_t elem = bf16 ? 2 : 4, floats = (arrays * numel * elem + 3) / 4;
  const int64_t bytes = 2 * arrays * numel * elem;
  const int32_t dtype = bf16 ? NORMKIT_DTYPE_BFLOAT16 : NORMKIT_DTYPE_FLOAT32;
  int64_t in_floats;
  Buffer in =
      MakeTensorBuffer({arrays * rows, D}, NORMKIT_LAYOUT_CHANNELS_FIRST, dtype, 41, &in_floats);
  Buffer out = MakeBuffer(floats, 42), ref = MakeBuffer(floats, 43), gamma = MakeBuffer(D, 44),
         beta = MakeBuffer(D, 45);
  // Element i of an array of the call (x, r in `in`; y, h in `out`), as a float.
  const auto at = [&](const Buffer& b, int64_t i) {
    if (!bf16) return b[i];
    uint16_t v;
    std::memcpy(&v, reinterpret_cast<const char*>(b.get()) + 2 * i, 2);
    return FromBF16(v);
  };
  normkit_context* ctx = nullptr;
  normkit_context_create(threads, &ctx);
  const auto layout = NORMKIT_LAYOUT_CHANNELS_FIRST;
  const auto second = [&](const Buffer& b) {
    return reinterpret_cast<char*>(b.get()) + numel * elem;
  };
  normkit_tensor xt = Desc(in.get(), layout, shape), yt = Desc(out.get(), layout, shape);
  normkit_tensor rt = Desc(second(in), layout, shape), ht = Desc(second(out), layout, shape);
  for (auto* t : {&xt, &yt, &rt, &ht}) t->dtype = dtype;
  const auto call = [&] {
    normkit_status st;
    if (add) {
      st = rms ? normkit_add_rms_norm(ctx, &xt, &rt, nullptr, gamma.get(), 1e-5f, &yt, &ht, nullptr)
               : normkit_add_layer_norm(ctx, &xt, &rt, nullptr, gamma.get(), beta.get(), 1e-5f, &yt,
                                        &ht, nullptr, nullptr);
    } else {
      st =
          rms ? normkit_rms_norm(ctx, &xt, gamma.get(), 1e-5f, &yt, nullptr)
              : normkit_layer_norm(ctx, &xt, gamma.get(), beta.get(), 1e-5f, &yt, nullptr, nullptr);
    }
    if (st != NORMKIT_SUCCESS) std::printf("  error: %s\n", normkit_last_error());
  };
  call();
  bool ok = true;
  // float32: a few float ulps of the row's scale; bfloat16: its rounding (2^-8 relative).
  const double tolerance = bf16 ? 1.0 / 256 : 1e-5;
  std::vector<float> hr(static_cast<size_t>(D));
  for (int64_t row = 0; row < rows && ok; row += 97) {
    for (int64_t d = 0; d < D; ++d) {
      const int64_t i = row * D + d;
      const float sum = at(in, i) + at(in, numel + i);
      hr[d] = !add ? at(in, i) : bf16 ? RoundedToBF16(sum) : sum;
      if (add && at(out, numel + i) != hr[d]) {
        std::printf("  MISMATCH in h at row %lld\n", static_cast<long long>(row));
        ok = false;
      }
    }
    double m = 0, sq = 0;
    if (!rms) {
      for (int64_t d = 0; d < D; ++d) m += hr[d];
      m /= D;
    }
    for (int64_t d = 0; d < D; ++d) sq += (hr[d] - m) * (hr[d] - m);
    const double rs = 1.0 / std::sqrt(sq / D + 1e-5);
    for (int64_t d = 0; d < D && ok; ++d) {
      const double t = (hr[d] - m) * rs * gamma[d], b = rms ? 0.0 : beta[d];
      if (!(std::fabs(at(out, row * D + d) - (t + b)) <=
            tolerance * (std::fabs(t) + std::fabs(b)) + 1e-7)) {
        std::printf("  MISMATCH at row %lld\n", static_cast<long long>(row));
        ok = false;
      }
    }
  }
  const PairTiming tm = TimePair(
      call, [&] { ParallelCopy(threads, ref.get(), in.get(), floats); }, bytes);
  const std::string name =
      std::string(add ? "add + " : "") + (rms ? "rms_norm" : "layer_norm") + (bf16 ? " bf16" : "");
  PrintRow(name.c_str(), w, layout, false, threads, tm, bytes, ok);
  normkit_context_destroy(ctx);
}

// Batch norm in training mode (seed 001): batch statistics, running averages, y; checked
// against each channel's mean and variance in double (bf16: x and y in bfloat16, y within
// its rounding). Bytes: x read once, y written once.
void RunBatchNormTraining(const std::vector<int64_t>& shape, normkit_layout layout, int threads,
                          bool bf16 = false) {
  const Workload w{"001", shape};
  const int64_t N = shape[0], C = shape[1], numel = Numel(shape), S = numel / (N * C);
  const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST && S > 1;
  const int32_t dtype = bf16 ? NORMKIT_DTYPE_BFLOAT16 : NORMKIT_DTYPE_FLOAT32;
  int64_t floats;  // x's bytes in floats
  Buffer x = MakeTensorBuffer(shape, layout, dtype, 61, &floats);
  Buffer y = MakeBuffer(floats, 62), ref = MakeBuffer(floats, 63);
  Buffer gamma = MakeBuffer(C, 64), beta = MakeBuffer(C, 65), stats = MakeBuffer(4 * C, 66);
  for (int64_t c = 0; c < C; ++c) stats[C + c] = 1.0f;  // running_var
  // Element i of x or y as a float.
  const auto at = [&](const Buffer& b, int64_t i) {
    if (!bf16) return b[i];
    uint16_t v;
    std::memcpy(&v, reinterpret_cast<const char*>(b.get()) + 2 * i, 2);
    return FromBF16(v);
  };
  normkit_context* ctx = nullptr;
  normkit_context_create(threads, &ctx);
  normkit_tensor xt = Desc(x.get(), layout, shape), yt = Desc(y.get(), layout, shape);
  xt.dtype = yt.dtype = dtype;
  const auto call = [&] {
    float* st = stats.get();
    if (normkit_batch_norm_training(ctx, &xt, gamma.get(), beta.get(), 1e-5f, 0.1f, st, st + C, &yt,
                                    st + 2 * C, st + 3 * C) != NORMKIT_SUCCESS) {
      std::printf("  error: %s\n", normkit_last_error());
    }
  };
  call();
  std::vector<double> mean(static_cast<size_t>(C)), m2(mean.size());
  for (int64_t i = 0; i < numel; ++i) mean[(cl ? i % C : (i / S) % C)] += at(x, i);
  for (double& m : mean) m /= static_cast<double>(N * S);
  for (int64_t i = 0; i < numel; ++i) {
    const int64_t c = cl ? i % C : (i / S) % C;
    m2[c] += (at(x, i) - mean[c]) * (at(x, i) - mean[c]);
  }
  std::vector<float> yf(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) yf[static_cast<size_t>(i)] = at(y, i);
  // CheckSample allows 4 float ulps of *mag; bfloat16 allows its own unit (2^-8).
  const double unit = bf16 ? (1.0 / 256) / (4 * 1.2e-7) : 1.0;
  const bool ok = CheckSample(
      yf.data(), N, C, S, cl, [&](int64_t, int64_t c, int64_t i, double* want, double* mag) {
        const double rstd = 1.0 / std::sqrt(m2[c] / static_cast<double>(N * S) + 1e-5);
        const double z = (at(x, i) - mean[c]) * rstd * gamma[c];
        *want = z + beta[c];
        *mag = 4 * unit * (std::fabs(z) + std::fabs(beta[c]) + std::fabs(gamma[c]));
      });
  const int64_t bytes = 2 * floats * static_cast<int64_t>(sizeof(float));
  const PairTiming tm = TimePair(
      call, [&] { ParallelCopy(threads, ref.get(), x.get(), floats); }, bytes);
  PrintRow(bf16 ? "batch_norm train bf16" : "batch_norm training", w, layout, false, threads, tm,
           bytes, ok);
  normkit_context_destroy(ctx);
}

// Batch norm's backward (seed 001's forward and backward benchmark): dx, grad_gamma,
// grad_beta from the forward's saved statistics; dx checked against the double definition
// from each channel's sums of dy and dy * (x - mean). Bytes: x and dy read once, dx written.
void RunBatchNormBackward(const std::vector<int64_t>& shape, normkit_layout layout, int threads) {
  const Workload w{"001", shape};
  const int64_t N = shape[0], C = shape[1], numel = Numel(shape), S = numel / (N * C);
  const bool cl = layout == NORMKIT_LAYOUT_CHANNELS_LAST && S > 1;
  Buffer x = MakeBuffer(numel, 71), dy = MakeBuffer(numel, 72), dx = MakeBuffer(numel, 73);
  Buffer ref = MakeBuffer(numel, 74), gamma = MakeBuffer(C, 75), stats = MakeBuffer(4 * C, 76);
  normkit_context* ctx = nullptr;
  normkit_context_create(threads, &ctx);
  const normkit_tensor xt = Desc(x.get(), layout, shape), dyt = Desc(dy.get(), layout, shape);
  const normkit_tensor dxt = Desc(dx.get(), layout, shape);
  float* st = stats.get();  // save_mean, save_rstd, grad_gamma, grad_beta
  if (normkit_batch_norm_training(ctx, &xt, nullptr, nullptr, 1e-5f, 0.1f, nullptr, nullptr, &dxt,
                                  st, st + C) != NORMKIT_SUCCESS) {
    std::printf("  error: %s\n", normkit_last_error());
  }
  const auto call = [&] {
    if (normkit_batch_norm_training_backward(ctx, &xt, &dyt, st, st + C, gamma.get(), &dxt,
                                             st + 2 * C, st + 3 * C) != NORMKIT_SUCCESS) {
      std::printf("  error: %s\n", normkit_last_error());
    }
  };
  call();
  std::vector<double> sum_dy(static_cast<size_t>(C)), sum_dot(sum_dy.size());
  for (int64_t i = 0; i < numel; ++i) {
    const int64_t c = cl ? i % C : (i / S) % C;
    sum_dy[c] += dy[i];
    sum_dot[c] += dy[i] * (static_cast<double>(x[i]) - st[c]);
  }
  const double count = static_cast<double>(N * S);
  const bool ok = CheckSample(
      dx.get(), N, C, S, cl, [&](int64_t, int64_t c, int64_t i, double* want, double* mag) {
        const double rstd = st[C + c], p = gamma[c] * rstd;
        const double xhat = (static_cast<double>(x[i]) - st[c]) * rstd;
        const double mean_dy = sum_dy[c] / count, mean_dy_xhat = rstd * sum_dot[c] / count;
        *want = p * ((dy[i] - mean_dy) - xhat * mean_dy_xhat);
        *mag = 8 * std::fabs(p) *
               (std::fabs(dy[i]) + std::fabs(mean_dy) + std::fabs(xhat * mean_dy_xhat) + 1e-3);
      });
  const int64_t bytes = 3 * numel * static_cast<int64_t>(sizeof(float));
  const PairTiming tm = TimePair(
      call, [&] { ParallelCopy(threads, ref.get(), x.get(), numel); }, bytes);
  PrintRow("batch_norm backward", w, layout, false, threads, tm, bytes, ok);
  normkit_context_destroy(ctx);
}

// Shift-sum (seed 003): A, A^T, Moore-Penrose pinv and the fused GAP step, with the
// seed's [H, W] mask and s = 2/C; A checked against a direct double sum on sampled rows,
// pinv by A(A+ y) = y. Bytes: x and y once each (GAP: x read and written once).
void RunShiftSum(const char* source, int64_t B, int64_t C, int64_t H, int64_t W, int64_t S,
                 normkit_layout layout, int threads) {
  const int64_t Wp = W + (C - 1) * S, nx = B * C * H * W, ny = B * H * Wp;
  const Workload w{source, {B, C, H, W}};
  Buffer x = MakeBuffer(nx, 51), y = MakeBuffer(ny, 52), y2 = MakeBuffer(ny, 53),
         xp = MakeBuffer(nx, 54), mask = MakeBuffer(H * W, 55), ref = MakeBuffer(nx, 56),
         phi_s = MakeBuffer(H * Wp, 57);
  for (int64_t i = 0; i < H * W; ++i) mask[i] = 0.5f + 0.5f * std::fabs(mask[i]);  // no zeros
  normkit_context* ctx = nullptr;
  normkit_context_create(threads, &ctx);
  normkit_shift_sum_params params;
  normkit_shift_sum_params_init(&params, S);
  params.scale = 2.0 / static_cast<double>(C);
  params.mask_kind = NORMKIT_MASK_HW;
  params.mask = mask.get();
  normkit_tensor xt = Desc(x.get(), layout, {B, C, H, W});
  normkit_tensor xpt = Desc(xp.get(), layout, {B, C, H, W});
  normkit_tensor yt = Desc(y.get(), NORMKIT_LAYOUT_CHANNELS_FIRST, {B, 1, H, Wp});
  normkit_tensor y2t = Desc(y2.get(), NORMKIT_LAYOUT_CHANNELS_FIRST, {B, 1, H, Wp});
  const auto check = [](normkit_status st) {
    if (st != NORMKIT_SUCCESS) std::printf("  error: %s\n", normkit_last_error());
  };
  check(normkit_shift_sum_normalizer(ctx, &xt, &params, phi_s.get()));
  const auto forward = [&] { check(normkit_shift_sum(ctx, &xt, &params, &yt)); };
  forward();
  bool ok = true;
  for (int64_t b = 0; b < B && ok; b += std::max<int64_t>(1, B / 3)) {
    for (int64_t h = 0; h < H && ok; h += 37) {
      for (int64_t v = 0; v < Wp && ok; ++v) {
        double want = 0, mag = 0;
        for (int64_t c = 0; c < C; ++c) {
          const int64_t wi = v - c * S;
          if (wi < 0 || wi >= W) continue;
          const int64_t xi = layout == NORMKIT_LAYOUT_CHANNELS_LAST
                                 ? ((b * H + h) * W + wi) * C + c
                                 : ((b * C + c) * H + h) * W + wi;
          const double t = params.scale * mask[h * W + wi] * x[xi];
          want += t;
          mag += std::fabs(t);
        }
        if (!(std::fabs(y[(b * H + h) * Wp + v] - want) <= 4.0 * C * 1.2e-7 * mag + 1e-30)) {
          std::printf("  MISMATCH at (%lld, %lld, %lld)\n", static_cast<long long>(b),
                      static_cast<long long>(h), static_cast<long long>(v));
          ok = false;
        }
      }
    }
  }
  const int64_t fwd_bytes = (nx + ny) * static_cast<int64_t>(sizeof(float));
  const auto copy_ref = [&](int64_t elems) {
    return [&, elems] { ParallelCopy(threads, ref.get(), x.get(), elems); };
  };
  PrintRow("shift_sum A", w, layout, false, threads,
           TimePair(forward, copy_ref((nx + ny) / 2), fwd_bytes), fwd_bytes, ok);
  const auto adjoint = [&] { check(normkit_shift_sum_adjoint(ctx, &yt, &params, &xpt)); };
  PrintRow("shift_sum adjoint", w, layout, false, threads,
           TimePair(adjoint, copy_ref((nx + ny) / 2), fwd_bytes), fwd_bytes, ok);
  // pinv: A(A+ y) must give y back wherever some channel covers the position (all here).
  const auto pinv = [&] {
    check(normkit_shift_sum_pinv(ctx, &yt, &params, NORMKIT_PINV_MOORE_PENROSE, phi_s.get(), &xpt));
  };
  pinv();
  check(normkit_shift_sum(ctx, &xpt, &params, &y2t));
  bool pinv_ok = true;
  for (int64_t i = 0; i < ny; i += 97) {
    if (!(std::fabs(y2[i] - y[i]) <= 1e-4 * (1 + std::fabs(y[i])))) pinv_ok = false;
  }
  PrintRow("shift_sum pinv", w, layout, false, threads,
           TimePair(pinv, copy_ref((nx + ny) / 2), fwd_bytes), fwd_bytes, pinv_ok);
  const auto gap = [&] {
    check(normkit_shift_sum_gap_step(ctx, &xt, &yt, &params, 1e-3, 0.5, phi_s.get()));
  };
  const int64_t gap_bytes = 2 * nx * static_cast<int64_t>(sizeof(float));
  PrintRow("shift_sum GAP step", w, layout, true, threads, TimePair(gap, copy_ref(nx), gap_bytes),
           gap_bytes, true);
  if (!pinv_ok) std::printf("  pinv: A(A+ y) != y\n");
  normkit_context_destroy(ctx);
}

// Folding BN into a conv is checked by running conv then BN and the folded conv.
void RunFoldCheck() {
  const int64_t O = 64, I = 32, K = 9;
  Buffer wt = MakeBuffer(O * I * K, 21), bias = MakeBuffer(O, 22), gamma = MakeBuffer(O, 23),
         beta = MakeBuffer(O, 24), mean = MakeBuffer(O, 25), var = MakeBuffer(O, 26),
         x = MakeBuffer(I * K, 27);
  for (int64_t o = 0; o < O; ++o) var[o] = var[o] * var[o] + 0.1f;
  std::vector<double> want(O);
  for (int64_t o = 0; o < O; ++o) {  // one output pixel of a 3x3 conv over a 3x3 input
    double acc = bias[o];
    for (int64_t j = 0; j < I * K; ++j) acc += static_cast<double>(wt[o * I * K + j]) * x[j];
    want[o] = (acc - mean[o]) / std::sqrt(static_cast<double>(var[o]) + 1e-5) * gamma[o] + beta[o];
  }
  std::vector<float> folded(O);
  const normkit_status s = normkit_fold_batch_norm_into_conv(
      wt.get(), O, I, 1, K, NORMKIT_CONV_WEIGHT_OIHW, bias.get(), folded.data(), gamma.get(),
      beta.get(), mean.get(), var.get(), 1e-5f);
  double worst = 0;
  for (int64_t o = 0; o < O; ++o) {
    double acc = folded[o];
    for (int64_t j = 0; j < I * K; ++j) acc += static_cast<double>(wt[o * I * K + j]) * x[j];
    worst = std::max(worst, std::fabs(acc - want[o]) / (1 + std::fabs(want[o])));
  }
  const bool ok = s == NORMKIT_SUCCESS && worst < 1e-5;
  std::printf(
      "\nfold_batch_norm_into_conv 64x32x3x3: conv+BN vs folded conv, max rel diff %.2e  %s\n",
      worst, ok ? "ok" : "FAIL");
  if (!ok) ++g_failures;
}

}  // namespace
}  // namespace normkit_bench

int main(int argc, char** argv) {
  using namespace normkit_bench;
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int all = std::max(1u, std::thread::hardware_concurrency());
  std::printf("normkit %s | SIMD target %s | threading %s | %d hardware threads\n\n",
              normkit_version_string(), normkit_simd_target(), normkit_threading_backend(), all);
  std::printf(
      "ratio = op GB/s / reference GB/s, same bytes, same threads, same run (reference: parallel "
      "memcpy\n"
      "out of place, parallel in-place x = a*x + b in place). GB/s counts x read once + y written "
      "once.\n\n");
  std::printf("| %-22s | %-8s | %-16s | %-4s | %-7s | %2s | %9s | %7s | %7s | %5s | %-4s |\n", "op",
              "seed", "shape", "lay", "place", "th", "ms", "GB/s", "ref", "ratio", "chk");
  std::printf("|%s|\n", std::string(125, '-').c_str());
  std::vector<Workload> workloads;
  if (quick) {
    workloads = {{"edge", {1, 64, 56, 56}}, {"edge", {1, 3, 224, 224}}, {"001", {8, 32, 16}}};
  } else {
    workloads = {
        {"000", {64, 256, 64, 64}},  {"000", {16, 256, 64, 64}}, {"001", {8, 1024, 64, 64}},
        {"001", {128, 1024, 16}},    {"edge", {1, 64, 56, 56}},  {"edge", {1, 256, 14, 14}},
        {"edge", {1, 32, 112, 112}}, {"edge", {1, 3, 224, 224}}, {"edge", {1, 1024, 7, 7}}};
  }
  for (const Workload& w : workloads) {
    RunWorkload(w, 1);
    if (all > 1) RunWorkload(w, all);
  }
  struct GroupWorkload {
    const char* source;
    std::vector<int64_t> shape;
    int64_t groups;
  };
  std::vector<GroupWorkload> group_workloads = {{"edge", {1, 64, 56, 56}, 32}};
  if (!quick) {
    group_workloads = {{"002", {128, 256, 28, 28}, 32}, {"002", {32, 512, 56, 56}, 32},
                       {"edge", {1, 64, 56, 56}, 32},   {"edge", {1, 256, 14, 14}, 32},
                       {"edge", {1, 32, 112, 112}, 8},  {"inst", {8, 64, 128, 128}, 64}};
  }
  for (const auto& g : group_workloads) {
    RunGroupNorm(g.source, g.shape, g.groups, 1);
    if (all > 1) RunGroupNorm(g.source, g.shape, g.groups, all);
  }
  const std::vector<int64_t> rows_shape =
      quick ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{4096, 768};
  for (bool bf16 : {false, true}) {  // bfloat16: the same rows in half the bytes
    for (bool add : {false, true}) {
      for (bool rms : {false, true}) {
        RunRowNorm(rows_shape, rms, add, 1, bf16);
        if (all > 1) RunRowNorm(rows_shape, rms, add, all, bf16);
      }
    }
  }
  const std::vector<std::vector<int64_t>> train_shapes =
      quick ? std::vector<std::vector<int64_t>>{{8, 32, 16, 16}}
            : std::vector<std::vector<int64_t>>{
                  {32, 256, 1024}, {8, 32, 128, 128}, {128, 2, 128, 128}, {8, 32, 32, 32, 32}};
  for (const auto& shape : train_shapes) {
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      if (layout == NORMKIT_LAYOUT_CHANNELS_LAST && shape.size() == 3) continue;
      RunBatchNormTraining(shape, layout, 1);
      if (all > 1) RunBatchNormTraining(shape, layout, all);
      RunBatchNormBackward(shape, layout, 1);
      if (all > 1) RunBatchNormBackward(shape, layout, all);
    }
  }
  // The same forward in bfloat16 (half the bytes), a 2-D shape in both layouts.
  for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
    RunBatchNormTraining(train_shapes[quick ? 0 : 1], layout, 1, true);
    if (all > 1) RunBatchNormTraining(train_shapes[quick ? 0 : 1], layout, all, true);
  }
  struct ShiftWorkload {
    const char* source;
    int64_t B, C, H, W, S;
  };
  const std::vector<ShiftWorkload> shift_workloads =
      quick ? std::vector<ShiftWorkload>{{"003", 2, 28, 64, 64, 2}}
            : std::vector<ShiftWorkload>{{"003", 16, 28, 256, 256, 2},
                                         {"real", 1, 28, 660, 660, 2},
                                         {"pnp", 16, 31, 256, 256, 1}};
  for (const auto& s : shift_workloads) {
    // Channels-last x on the seed's own shape only (the first workload).
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      if (layout == NORMKIT_LAYOUT_CHANNELS_LAST && &s != &shift_workloads.front()) continue;
      RunShiftSum(s.source, s.B, s.C, s.H, s.W, s.S, layout, 1);
      if (all > 1) RunShiftSum(s.source, s.B, s.C, s.H, s.W, s.S, layout, all);
    }
  }
  RunFoldCheck();
  std::printf("\n%s: %d check(s) failed\n",
              g_failures ? "FAILED" : "all results match the reference", g_failures);
  return g_failures ? 1 : 0;
}
