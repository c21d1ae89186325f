/* SPDX-License-Identifier: Apache-2.0
 * The residual stream of a transformer decoder, two blocks deep: after each sublayer,
 * h = x + residual + bias and y = RMS norm of h in one call (normkit_add_rms_norm),
 * h kept as the next residual, written over the old one in place; first in float32, then
 * in bfloat16 (the dtype a model keeps the stream in on CPUs with bfloat16 instructions:
 * half the bytes), where h is the float sum rounded to bfloat16 and y the norm of that h.
 * Checked against plain C loops in double. Exit status 0 means every check passed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "normkit/normkit.h"

#define TOKENS 8
#define D 256

static float bias[D], weight[D], want_h[TOKENS * D];
static float x[TOKENS * D], residual[TOKENS * D], y[TOKENS * D];
static uint16_t x16[TOKENS * D], residual16[TOKENS * D], y16[TOKENS * D];

/* bfloat16 bits <-> float, rounding to nearest even (finite values only here). */
static float from_bf16(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* Element i of the stream's h and y, as the call left them, in each dtype. */
static float h_f32(int i) {
  return residual[i];
}
static float y_f32(int i) {
  return y[i];
}
static float h_bf16(int i) {
  return from_bf16(residual16[i]);
}
static float y_bf16(int i) {
  return from_bf16(y16[i]);
}

/* One block's h against want_h (exactly) and y against the double RMS norm of want_h:
 * the largest error into *worst, absolute or (relative != 0) in units of 2^-8 relative.
 * Returns 0, or 1 after saying which h is wrong. */
static int check_block(int block, float (*h_at)(int), float (*y_at)(int), int relative,
                       double* worst) {
  for (int t = 0; t < TOKENS; ++t) {
    double ms = 0.0;
    for (int d = 0; d < D; ++d) ms += (double)want_h[t * D + d] * want_h[t * D + d];
    const double rstd = 1.0 / sqrt(ms / D + 1e-6);
    for (int d = 0; d < D; ++d) {
      const int i = t * D + d;
      if (h_at(i) != want_h[i]) {
        fprintf(stderr, "block %d: h[%d] = %g, want %g\n", block, i, h_at(i), want_h[i]);
        return 1;
      }
      const double want = want_h[i] * rstd * weight[d];
      double err = fabs(y_at(i) - want);
      if (relative) err = err / (fabs(want) + 1e-3) * 256.0;
      if (err > *worst) *worst = err;
    }
  }
  return 0;
}

/* Two blocks of the stream in `dtype` (float32 or bfloat16): the sublayer outputs x
 * made up, h over the residual, y the input of the next sublayer. */
static int run_stream(normkit_dtype dtype) {
  const int bf16 = dtype == NORMKIT_DTYPE_BFLOAT16;
  for (int i = 0; i < TOKENS * D; ++i) {
    const float r = (float)(i % 17) / 17.0f - 0.5f;
    residual[i] = r;
    residual16[i] = to_bf16(r);
  }
  const int64_t shape[2] = {TOKENS, D};
  normkit_tensor xt, rt, yt;
  normkit_tensor_init(&xt, bf16 ? (void*)x16 : (void*)x, dtype, NORMKIT_LAYOUT_CHANNELS_FIRST, 2,
                      shape);
  normkit_tensor_init(&rt, bf16 ? (void*)residual16 : (void*)residual, dtype,
                      NORMKIT_LAYOUT_CHANNELS_FIRST, 2, shape);
  normkit_tensor_init(&yt, bf16 ? (void*)y16 : (void*)y, dtype, NORMKIT_LAYOUT_CHANNELS_FIRST, 2,
                      shape);
  double worst = 0.0;
  for (int block = 0; block < 2; ++block) {
    for (int i = 0; i < TOKENS * D; ++i) {
      const float xi = sinf(0.37f * (float)(i + block));
      x[i] = xi;
      x16[i] = to_bf16(xi);
      /* Two float adds; in bfloat16 of the stored values, rounded once more. */
      want_h[i] = bf16 ? from_bf16(to_bf16((from_bf16(x16[i]) + h_bf16(i)) + bias[i % D]))
                       : (xi + residual[i]) + bias[i % D];
    }
    const normkit_status s =
        normkit_add_rms_norm(NULL, &xt, &rt, bias, weight, 1e-6f, &yt, &rt, NULL);
    if (s != NORMKIT_SUCCESS) {
      fprintf(stderr, "add_rms_norm: %s\n", normkit_last_error());
      return 1;
    }
    if (check_block(block, bf16 ? h_bf16 : h_f32, bf16 ? y_bf16 : y_f32, bf16, &worst)) return 1;
  }
  if (bf16) {
    printf("add_rms_norm bfloat16 [%d, %d], 2 blocks: h exact, y within %.2f x 2^-8 relative\n",
           TOKENS, D, worst);
    /* Rounded once to 8 significant bits: at most 2^-8 relative (plus float32's error). */
    return worst <= 1.01 ? 0 : 1;
  }
  printf("add_rms_norm [%d, %d], 2 blocks: h exact, y max abs error %.3g\n", TOKENS, D, worst);
  return worst < 1e-5 ? 0 : 1;
}

int main(void) {
  for (int d = 0; d < D; ++d) {
    bias[d] = 0.01f * (float)(d % 7);
    weight[d] = 1.0f + 0.001f * (float)d;
  }
  return run_stream(NORMKIT_DTYPE_FLOAT32) || run_stream(NORMKIT_DTYPE_BFLOAT16);
}
