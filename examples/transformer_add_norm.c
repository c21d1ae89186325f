/* SPDX-License-Identifier: Apache-2.0
 * The residual stream of a transformer decoder, two blocks deep: after each sublayer,
 * h = x + residual + bias and y = RMS norm of h in one call (normkit_add_rms_norm),
 * h kept as the next residual, written over the old one in place. Checked against plain
 * C loops in double. Exit status 0 means every check passed. */
#include <math.h>
#include <stdio.h>

#include "normkit/normkit.h"

#define TOKENS 8
#define D 256

static float x[TOKENS * D], residual[TOKENS * D], y[TOKENS * D], want_h[TOKENS * D];
static float bias[D], weight[D];

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
  return worst < 1e-5 ? 0 : 1;
}
