/* SPDX-License-Identifier: Apache-2.0
 * C caller with half-precision activations: a training step of batch norm on bfloat16
 * tensors (stored as uint16_t bits: the forward with batch statistics, then the backward),
 * batch norm inference in place; and normalize-and-narrow from float32 to float16. The bits
 * are converted here with plain C to check the results. Exit status 0 means every check
 * passed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "normkit/normkit.h"

#define N 2
#define C 4
#define HW 45

/* bfloat16 is the top half of a float32: widening is a shift. */
static float bf16_to_float(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Rounds to nearest even (finite inputs). */
static uint16_t float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* float16 bits to float (normal and subnormal values; this example makes no Inf / NaN). */
static float f16_to_float(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float v = e ? ldexpf((float)(m + 1024), e - 25) : ldexpf((float)m, -24);
  return (h & 0x8000) ? -v : v;
}

int main(void) {
  enum { COUNT = N * C * HW };
  static uint16_t x_bf16[COUNT], y_f16[COUNT];
  static float x_f32[COUNT], before[COUNT];
  const float gamma[C] = {1.0f, 0.5f, 2.0f, -1.0f}, beta[C] = {0.0f, 0.25f, -1.0f, 3.0f};
  const float mean[C] = {0.1f, -0.2f, 0.3f, 1.0f}, var[C] = {1.0f, 4.0f, 0.25f, 2.0f};
  const float eps = 1e-5f;
  const int64_t shape[3] = {N, C, HW};
  int failures = 0;
  for (int i = 0; i < COUNT; ++i) {
    x_f32[i] = (float)((i * 37) % 101) / 25.0f - 2.0f;
    x_bf16[i] = float_to_bf16(x_f32[i]);
    before[i] = bf16_to_float(x_bf16[i]);
  }

  /* A training step on bfloat16: y from the batch's statistics (saved, float32), then dx
   * and the parameter gradients from dy. */
  {
    static uint16_t y[COUNT], dy[COUNT], dx[COUNT];
    float save_mean[C], save_rstd[C], grad_gamma[C], grad_beta[C];
    for (int i = 0; i < COUNT; ++i) dy[i] = float_to_bf16((float)((i * 13) % 7) / 7.0f - 0.5f);
    normkit_tensor xt, yt, dyt, dxt;
    normkit_tensor_init(&xt, x_bf16, NORMKIT_DTYPE_BFLOAT16, NORMKIT_LAYOUT_CHANNELS_FIRST, 3,
                        shape);
    normkit_tensor_init(&yt, y, NORMKIT_DTYPE_BFLOAT16, NORMKIT_LAYOUT_CHANNELS_FIRST, 3, shape);
    normkit_tensor_init(&dyt, dy, NORMKIT_DTYPE_BFLOAT16, NORMKIT_LAYOUT_CHANNELS_FIRST, 3, shape);
    normkit_tensor_init(&dxt, dx, NORMKIT_DTYPE_BFLOAT16, NORMKIT_LAYOUT_CHANNELS_FIRST, 3, shape);
    if (normkit_batch_norm_training(NULL, &xt, gamma, beta, eps, 0.1f, NULL, NULL, &yt, save_mean,
                                    save_rstd) != NORMKIT_SUCCESS ||
        normkit_batch_norm_training_backward(NULL, &xt, &dyt, save_mean, save_rstd, gamma, &dxt,
                                             grad_gamma, grad_beta) != NORMKIT_SUCCESS) {
      printf("batch_norm_training: %s\n", normkit_last_error());
      return 1;
    }
    for (int c = 0; c < C && !failures; ++c) {
      double sum = 0, m2 = 0, sum_dy = 0, sum_dot = 0;
      for (int n = 0; n < N; ++n)
        for (int i = 0; i < HW; ++i) sum += before[(n * C + c) * HW + i];
      const double mu = sum / (N * HW);
      for (int n = 0; n < N; ++n)
        for (int i = 0; i < HW; ++i) {
          const int at = (n * C + c) * HW + i;
          m2 += (before[at] - mu) * (before[at] - mu);
          sum_dy += bf16_to_float(dy[at]);
          sum_dot += bf16_to_float(dy[at]) * (before[at] - mu);
        }
      const double rstd = 1.0 / sqrt(m2 / (N * HW) + eps);
      for (int n = 0; n < N; ++n)
        for (int i = 0; i < HW; ++i) {
          const int at = (n * C + c) * HW + i;
          const double xhat = (before[at] - mu) * rstd;
          const double want_y = xhat * gamma[c] + beta[c];
          const double want_dx =
              gamma[c] * rstd *
              (bf16_to_float(dy[at]) - sum_dy / (N * HW) - xhat * rstd * sum_dot / (N * HW));
          /* One bfloat16 unit of each (and float's error in dx's cancelling terms). */
          if (fabs(bf16_to_float(y[at]) - want_y) > fabs(want_y) * 0x1p-7 + 1e-6 ||
              fabs(bf16_to_float(dx[at]) - want_dx) > fabs(want_dx) * 0x1p-7 + 1e-5) {
            printf("bfloat16 batch norm training: element %d: y %g dx %g, expected %g %g\n", at,
                   bf16_to_float(y[at]), bf16_to_float(dx[at]), want_y, want_dx);
            failures = 1;
          }
        }
      if (fabs(grad_beta[c] - sum_dy) > 1e-5 * (1 + fabs(sum_dy))) failures = 1;
    }
    if (!failures) printf("bfloat16 batch norm training step (forward, backward): ok\n");
  }

  /* Batch norm in place on bfloat16: x and y are one tensor. */
  normkit_tensor t;
  normkit_tensor_init(&t, x_bf16, NORMKIT_DTYPE_BFLOAT16, NORMKIT_LAYOUT_CHANNELS_FIRST, 3, shape);
  if (normkit_batch_norm_inference(NULL, &t, gamma, beta, mean, var, eps, &t) != NORMKIT_SUCCESS) {
    printf("batch_norm_inference: %s\n", normkit_last_error());
    return 1;
  }
  for (int i = 0; i < COUNT && !failures; ++i) {
    const int c = (i / HW) % C;
    const double want = (before[i] - mean[c]) / sqrt(var[c] + (double)eps) * gamma[c] + beta[c];
    /* One bfloat16 unit (2^-7 relative) of the exact value, and a little for the fold. */
    if (fabs(bf16_to_float(x_bf16[i]) - want) > fabs(want) * 0x1p-7 + 1e-6) {
      printf("bfloat16 batch norm: element %d is %g, expected %g\n", i, bf16_to_float(x_bf16[i]),
             want);
      failures = 1;
    }
  }
  if (!failures) printf("bfloat16 batch norm in place: ok\n");

  /* float32 in, float16 out: the affine and the narrowing in one pass. */
  normkit_tensor xt, yt;
  normkit_tensor_init(&xt, x_f32, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 3, shape);
  normkit_tensor_init(&yt, y_f16, NORMKIT_DTYPE_FLOAT16, NORMKIT_LAYOUT_CHANNELS_FIRST, 3, shape);
  if (normkit_affine(NULL, &xt, gamma, beta, NORMKIT_PARAMS_PER_CHANNEL, &yt) != NORMKIT_SUCCESS) {
    printf("affine: %s\n", normkit_last_error());
    return 1;
  }
  for (int i = 0; i < COUNT && failures < 2; ++i) {
    const int c = (i / HW) % C;
    const double want = (double)x_f32[i] * gamma[c] + beta[c];
    if (fabs(f16_to_float(y_f16[i]) - want) > fabs(want) * 0x1p-10 + 1e-7) {
      printf("float32 -> float16 affine: element %d is %g, expected %g\n", i,
             f16_to_float(y_f16[i]), want);
      failures = 2;
    }
  }
  if (failures < 2) printf("float32 -> float16 affine: ok\n");

  /* Two half dtypes in one call are not a pair normkit runs: a clear error, y untouched. */
  normkit_tensor_init(&xt, x_bf16, NORMKIT_DTYPE_BFLOAT16, NORMKIT_LAYOUT_CHANNELS_FIRST, 3, shape);
  const normkit_status status =
      normkit_affine(NULL, &xt, gamma, beta, NORMKIT_PARAMS_PER_CHANNEL, &yt);
  printf("bfloat16 -> float16: %s: %s\n", normkit_status_string(status), normkit_last_error());
  if (status != NORMKIT_ERROR_UNSUPPORTED) failures = 3;
  return failures ? 1 : 0;
}
