/* SPDX-License-Identifier: Apache-2.0
 * The residual stream of a transformer decoder, two blocks deep: after each sublayer,
 * h = x + residual + bias and y = RMS norm of h in one call (normkit_add_rms_norm),
 * h kept as the next residual, written over the old one in place; then the same stream in
 * bfloat16 (the dtype a model keeps it in on CPUs with bfloat16 instructions: half the
 * bytes), where h is the float sum rounded to bfloat16 and y the norm of that h. Checked
 * against plain C loops in double. Exit status 0 means every check passed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "normkit/normkit.h"

#define TOKENS 8
#define D 256

static float x[TOKENS * D], residual[TOKENS * D], y[TOKENS * D], want_h[TOKENS * D];
static float bias[D], weight[D];
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

/* The same two blocks with x, residual, h and y in bfloat16 (bias and weight float32). */
static int bfloat16_stream(void) {
  for (int i = 0; i < TOKENS * D; ++i) residual16[i] = to_bf16((float)(i % 17) / 17.0f - 0.5f);
  const int64_t shape[2] = {TOKENS, D};
  normkit_tensor xt, rt, yt;
  normkit_tensor_init(&xt, x16, NORMKIT_DTYPE_BFLOAT16, NORMKIT_LAYOUT_CHANNELS_FIRST, 2, shape);
  normkit_tensor_init(&rt, residual16, NORMKIT_DTYPE_BFLOAT16, NORMKIT_LAYOUT_CHANNELS_FIRST, 2,
                      shape);
  normkit_tensor_init(&yt, y16, NORMKIT_DTYPE_BFLOAT16, NORMKIT_LAYOUT_CHANNELS_FIRST, 2, shape);
  double worst = 0.0; /* in units of bfloat16's relative precision, 2^-8 */
  for (int block = 0; block < 2; ++block) {
    for (int i = 0; i < TOKENS * D; ++i) x16[i] = to_bf16(sinf(0.37f * (float)(i + block)));
    for (int i = 0; i < TOKENS * D; ++i) {
      want_h[i] = from_bf16(to_bf16((from_bf16(x16[i]) + from_bf16(residual16[i])) + bias[i % D]));
    }
    if (normkit_add_rms_norm(NULL, &xt, &rt, bias, weight, 1e-6f, &yt, &rt, NULL) !=
        NORMKIT_SUCCESS) {
      fprintf(stderr, "bfloat16 add_rms_norm: %s\n", normkit_last_error());
      return 1;
    }
    for (int t = 0; t < TOKENS; ++t) {
      double ms = 0.0;
      for (int d = 0; d < D; ++d) ms += (double)want_h[t * D + d] * want_h[t * D + d];
      const double rstd = 1.0 / sqrt(ms / D + 1e-6);
      for (int d = 0; d < D; ++d) {
        const int i = t * D + d;
        if (from_bf16(residual16[i]) != want_h[i]) {
          fprintf(stderr, "bfloat16 block %d: h[%d] = %g, want %g\n", block, i,
                  from_bf16(residual16[i]), want_h[i]);
          return 1;
        }
        const double want = want_h[i] * rstd * weight[d];
        const double err = fabs(from_bf16(y16[i]) - want) / (fabs(want) + 1e-3) * 256.0;
        if (err > worst) worst = err;
      }
    }
  }
  printf("add_rms_norm bfloat16 [%d, %d], 2 blocks: h exact, y within %.2f of 2^-8 relative\n",
         TOKENS, D, worst);
  /* Rounded once to 8 significant bits: at most 2^-8 relative (plus float32's own error). */
  return worst <= 1.01 ? 0 : 1;
}

int main(void) {
  unsigned state = 12345u;
  for (int i = 0; i < TOKENS * D; ++i) {
    state = state * 1664525u + 1013904223u;
    residual[i] = (float)(state >> 8) / 16777216.0f - 0.5f;
  }
  for (int d = 0; d < D; ++d) {
    bias[d] = 0.01f * (float)(d % 7);
    weight[d] = 1.0f + 0.001f * (float)d;
  }
  const int64_t shape[2] = {TOKENS, D};
  normkit_tensor xt, rt, yt;
  normkit_tensor_init(&xt, x, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 2, shape);
  normkit_tensor_init(&rt, residual, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 2,
                      shape);
  normkit_tensor_init(&yt, y, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 2, shape);
  double worst = 0.0;
  for (int block = 0; block < 2; ++block) {
    /* A sublayer's output (here made up): the x the residual is added to. */
    for (int i = 0; i < TOKENS * D; ++i) x[i] = sinf(0.37f * (float)(i + block));
    for (int i = 0; i < TOKENS * D; ++i) want_h[i] = (x[i] + residual[i]) + bias[i % D];
    /* h over the residual (the next block's), y the input of the next sublayer. */
    const normkit_status s =
        normkit_add_rms_norm(NULL, &xt, &rt, bias, weight, 1e-6f, &yt, &rt, NULL);
    if (s != NORMKIT_SUCCESS) {
      fprintf(stderr, "add_rms_norm: %s\n", normkit_last_error());
      return 1;
    }
    for (int t = 0; t < TOKENS; ++t) {
      double ms = 0.0;
      for (int d = 0; d < D; ++d) ms += (double)want_h[t * D + d] * want_h[t * D + d];
      const double rstd = 1.0 / sqrt(ms / D + 1e-6);
      for (int d = 0; d < D; ++d) {
        const int i = t * D + d;
        if (residual[i] != want_h[i]) {
          fprintf(stderr, "block %d: h[%d] = %g, want %g\n", block, i, residual[i], want_h[i]);
          return 1;
        }
        const double err = fabs(y[i] - want_h[i] * rstd * weight[d]);
        if (err > worst) worst = err;
      }
    }
  }
  printf("add_rms_norm [%d, %d], 2 blocks: h exact, y max abs error %.3g\n", TOKENS, D, worst);
  if (worst >= 1e-5) return 1;
  return bfloat16_stream();
}
