/* SPDX-License-Identifier: Apache-2.0
 * C caller: affine (per-channel and per-sample, in place), batch-norm inference, and an
 * error path, each checked against a plain loop. Exit status 0 means every check passed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "normkit/normkit.h"

#define N 2
#define C 3
#define H 4
#define W 5

static int check(const char* what, const float* got, const double* want, int count) {
  for (int i = 0; i < count; ++i) {
    if (fabs(got[i] - want[i]) > 1e-5 * (1.0 + fabs(want[i]))) {
      printf("%s: element %d is %g, expected %g\n", what, i, got[i], want[i]);
      return 1;
    }
  }
  printf("%s: ok\n", what);
  return 0;
}

int main(void) {
  enum { COUNT = N * C * H * W };
  static float x[COUNT], y[COUNT];
  static double want[COUNT];
  const float scale[C] = {0.5f, -2.0f, 3.0f}, shift[C] = {1.0f, 0.0f, -1.0f};
  const float mean[C] = {0.1f, 0.2f, 0.3f}, var[C] = {1.0f, 4.0f, 0.25f};
  const int64_t shape[4] = {N, C, H, W};
  int failures = 0;
  for (int i = 0; i < COUNT; ++i) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;

  printf("normkit %s, SIMD target %s, threading %s\n", normkit_version_string(),
         normkit_simd_target(), normkit_threading_backend());

  normkit_context* ctx = NULL;
  if (normkit_context_create(2, &ctx) != NORMKIT_SUCCESS) return 1;

  /* Affine, NCHW, out of place. */
  normkit_tensor xt, yt;
  normkit_tensor_init(&xt, x, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, shape);
  normkit_tensor_init(&yt, y, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, shape);
  normkit_status s = normkit_affine(ctx, &xt, scale, shift, NORMKIT_PARAMS_PER_CHANNEL, &yt);
  if (s != NORMKIT_SUCCESS) {
    printf("affine failed: %s\n", normkit_last_error());
    return 1;
  }
  for (int i = 0; i < COUNT; ++i) {
    const int c = (i / (H * W)) % C;
    want[i] = (double)x[i] * scale[c] + shift[c];
  }
  failures += check("affine NCHW", y, want, COUNT);

  /* Batch norm inference, NHWC, in place (y is x). */
  static float z[COUNT];
  for (int i = 0; i < COUNT; ++i) z[i] = x[i];
  normkit_tensor zt;
  normkit_tensor_init(&zt, z, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_LAST, 4, shape);
  s = normkit_batch_norm_inference(ctx, &zt, scale, shift, mean, var, 1e-5f, &zt);
  if (s != NORMKIT_SUCCESS) {
    printf("batch_norm_inference failed: %s\n", normkit_last_error());
    return 1;
  }
  for (int i = 0; i < COUNT; ++i) {
    const int c = i % C; /* channels last: C is the fastest dim */
    want[i] = ((double)x[i] - mean[c]) / sqrt((double)var[c] + 1e-5) * scale[c] + shift[c];
  }
  failures += check("batch_norm_inference NHWC in place", z, want, COUNT);

  /* A rejected call: C = 3 in x, 4 in y. Nothing is written and the message says why. */
  const int64_t bad_shape[4] = {N, 4, H, W};
  normkit_tensor bad;
  normkit_tensor_init(&bad, y, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, bad_shape);
  s = normkit_affine(ctx, &xt, scale, shift, NORMKIT_PARAMS_PER_CHANNEL, &bad);
  printf("expected error: %s: %s\n", normkit_status_string(s), normkit_last_error());
  if (s != NORMKIT_ERROR_INVALID_ARGUMENT) ++failures;

  normkit_context_destroy(ctx);
  printf("%s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
