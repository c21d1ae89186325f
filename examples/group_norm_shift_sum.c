/* SPDX-License-Identifier: Apache-2.0
 * C caller: group norm with the fused SiLU (NHWC), RMS norm of [rows, D], and the CASSI
 * shift-sum forward operator with its pseudo-inverse, each checked against plain
 * loops. Exit status 0 means every check passed. */
#include <math.h>
#include <stdio.h>

#include "normkit/normkit.h"

static int report(const char* what, double worst) {
  printf("%s: max rel err %.1e %s\n", what, worst, worst < 1e-5 ? "ok" : "FAILED");
  return worst < 1e-5 ? 0 : 1;
}

static double rel(double got, double want) {
  return fabs(got - want) / (1.0 + fabs(want));
}

int main(void) {
  int failures = 0;
  /* --- group norm, NHWC [N=2, H=3, W=4, C=8], 4 groups, gamma / beta, SiLU --- */
  enum { N = 2, C = 8, HW = 12, G = 4 };
  static float x[N * HW * C], y[N * HW * C];
  float gamma[C], beta[C], mean[N * G], rstd[N * G];
  for (int i = 0; i < N * HW * C; ++i) x[i] = (float)((i * 29) % 97) / 40.0f - 1.0f;
  for (int c = 0; c < C; ++c) gamma[c] = 0.5f + 0.1f * c, beta[c] = 0.05f * c - 0.2f;
  const int64_t shape[4] = {N, C, 3, 4}; /* logical N, C, H, W; layout says NHWC */
  normkit_tensor xt, yt;
  normkit_tensor_init(&xt, x, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_LAST, 4, shape);
  normkit_tensor_init(&yt, y, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_LAST, 4, shape);
  normkit_status s = normkit_group_norm(NULL, &xt, G, gamma, beta, 1e-5f, NORMKIT_ACTIVATION_SILU,
                                        &yt, mean, rstd);
  if (s != NORMKIT_SUCCESS) {
    printf("group_norm failed: %s\n", normkit_last_error());
    return 1;
  }
  double worst = 0;
  for (int n = 0; n < N; ++n) {
    for (int g = 0; g < G; ++g) {
      double sum = 0, sq = 0;
      const int cg = C / G;
      for (int p = 0; p < HW; ++p)
        for (int c = g * cg; c < (g + 1) * cg; ++c) sum += x[(n * HW + p) * C + c];
      const double m = sum / (HW * cg);
      for (int p = 0; p < HW; ++p)
        for (int c = g * cg; c < (g + 1) * cg; ++c) {
          const double d = x[(n * HW + p) * C + c] - m;
          sq += d * d;
        }
      const double r = 1.0 / sqrt(sq / (HW * cg) + 1e-5);
      for (int p = 0; p < HW; ++p)
        for (int c = g * cg; c < (g + 1) * cg; ++c) {
          const int i = (n * HW + p) * C + c;
          const double v = (x[i] - m) * r * gamma[c] + beta[c];
          const double want = v / (1.0 + exp(-v));
          if (rel(y[i], want) > worst) worst = rel(y[i], want);
        }
    }
  }
  failures += report("group_norm NHWC G=4 + SiLU", worst);

  /* --- RMS norm over the last dim of [rows = 6, D = 20] --- */
  static float r_in[6 * 20], r_out[6 * 20], r_gamma[20];
  for (int i = 0; i < 120; ++i) r_in[i] = (float)((i * 13) % 31) / 10.0f - 1.5f;
  for (int d = 0; d < 20; ++d) r_gamma[d] = 1.0f + 0.01f * d;
  const int64_t rows_shape[2] = {6, 20};
  normkit_tensor rt, rot;
  normkit_tensor_init(&rt, r_in, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 2,
                      rows_shape);
  normkit_tensor_init(&rot, r_out, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 2,
                      rows_shape);
  s = normkit_rms_norm(NULL, &rt, r_gamma, 1e-6f, &rot, NULL);
  if (s != NORMKIT_SUCCESS) {
    printf("rms_norm failed: %s\n", normkit_last_error());
    return 1;
  }
  worst = 0;
  for (int i = 0; i < 6; ++i) {
    double ms = 0;
    for (int d = 0; d < 20; ++d) ms += (double)r_in[i * 20 + d] * r_in[i * 20 + d];
    const double r = 1.0 / sqrt(ms / 20 + 1e-6);
    for (int d = 0; d < 20; ++d) {
      const double want = r_in[i * 20 + d] * r * r_gamma[d];
      if (rel(r_out[i * 20 + d], want) > worst) worst = rel(r_out[i * 20 + d], want);
    }
  }
  failures += report("rms_norm [6, 20]", worst);

  /* --- shift-sum: x [1, 3, 2, 5], S = 1 -> y [1, 1, 2, 7]; then the pseudo-inverse --- */
  static float sx[3 * 2 * 5], sy[2 * 7], sback[2 * 7], sx2[3 * 2 * 5];
  for (int i = 0; i < 30; ++i) sx[i] = (float)(i % 7) + 1.0f;
  const int64_t xs_shape[4] = {1, 3, 2, 5}, ys_shape[4] = {1, 1, 2, 7};
  normkit_tensor sxt, syt, sx2t, sbt;
  normkit_tensor_init(&sxt, sx, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, xs_shape);
  normkit_tensor_init(&syt, sy, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, ys_shape);
  normkit_tensor_init(&sx2t, sx2, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4,
                      xs_shape);
  normkit_tensor_init(&sbt, sback, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4,
                      ys_shape);
  normkit_shift_sum_params params;
  normkit_shift_sum_params_init(&params, 1);
  s = normkit_shift_sum(NULL, &sxt, &params, &syt);
  if (s == NORMKIT_SUCCESS)
    s = normkit_shift_sum_pinv(NULL, &syt, &params, NORMKIT_PINV_MOORE_PENROSE, NULL, &sx2t);
  if (s == NORMKIT_SUCCESS) s = normkit_shift_sum(NULL, &sx2t, &params, &sbt);
  if (s != NORMKIT_SUCCESS) {
    printf("shift_sum failed: %s\n", normkit_last_error());
    return 1;
  }
  worst = 0;
  for (int h = 0; h < 2; ++h) {
    for (int v = 0; v < 7; ++v) {
      double want = 0;
      for (int c = 0; c < 3; ++c) {
        const int w = v - c;
        if (w >= 0 && w < 5) want += sx[(c * 2 + h) * 5 + w];
      }
      if (rel(sy[h * 7 + v], want) > worst) worst = rel(sy[h * 7 + v], want);
      if (rel(sback[h * 7 + v], sy[h * 7 + v]) > worst)
        worst = rel(sback[h * 7 + v], sy[h * 7 + v]);
    }
  }
  failures += report("shift_sum S=1 and A(pinv(y)) = y", worst);

  /* A rejected call: C = 8 is not divisible by 3 groups; nothing is written. */
  s = normkit_group_norm(NULL, &xt, 3, gamma, beta, 1e-5f, NORMKIT_ACTIVATION_NONE, &yt, NULL,
                         NULL);
  printf("expected error: %s: %s\n", normkit_status_string(s), normkit_last_error());
  if (s != NORMKIT_ERROR_INVALID_ARGUMENT) ++failures;
  return failures == 0 ? 0 : 1;
}
