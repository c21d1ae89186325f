/* SPDX-License-Identifier: Apache-2.0
 * Best-of-15 time of one shift-sum call on seed 003's large shape with bfloat16 x
 * (2x512x256x256, S = 2, a [H, W] mask), one thread, through the C API: for A/B runs of
 * two builds of the library in one shell, where this noisy VM's ratios to a same-run
 * copy swing more than the change (docs/performance.md, "Streamed half x two vectors to a
 * store"). Build and run against two libraries, alternating:
 *   gcc -O2 bench/shift_sum_half_timer.c -Iinclude -Lbuild -lnormkit -o /tmp/timer
 *   mkdir -p /tmp/lib-old /tmp/lib-new   # each library from a `cp` of its own: a freshly
 *   cp OLD/libnormkit.so.0 /tmp/lib-old/    # linked file once ran 1.8x slower than a copy
 *   cp build/libnormkit.so.0 /tmp/lib-new/  # of its bytes (docs/performance.md)
 *   for i in 1 2 3; do for l in old new; do
 *     LD_LIBRARY_PATH=/tmp/lib-$l /tmp/timer adjoint; done; done
 * Modes: adjoint (normkit_shift_sum_adjoint), gap (normkit_shift_sum_gap_step). X_OFFSET=K:
 * x K bytes (even) past a 64-byte boundary instead of malloc's placement. */
#include <normkit/normkit.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const int gap = argc > 1 && strcmp(argv[1], "gap") == 0;
  const int64_t B = 2, C = 512, H = 256, W = 256, S = 2, W_out = W + S * (C - 1);
  float* y = malloc(sizeof(float) * (size_t)(B * H * W_out));
  float* m = malloc(sizeof(float) * (size_t)(H * W));
  /* x from malloc (16 bytes off a cache line here, as NumPy's), or X_OFFSET bytes off one */
  const char* offset = getenv("X_OFFSET");
  const size_t x_bytes = sizeof(uint16_t) * (size_t)(B * C * H * W);
  char* x_base = offset ? aligned_alloc(64, x_bytes + 64) : malloc(x_bytes);
  uint16_t* x = x_base ? (uint16_t*)(x_base + (offset ? atoi(offset) : 0)) : NULL;
  if (!y || !m || !x) return 1;
  for (int64_t i = 0; i < B * H * W_out; ++i) y[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
  for (int64_t i = 0; i < H * W; ++i) m[i] = (i * 31 % 7) < 3 ? 0.0f : 1.0f;
  for (int64_t i = 0; i < B * C * H * W; ++i) x[i] = 0x3f80; /* 1.0 in bfloat16 */
  const int64_t x_shape[4] = {B, C, H, W}, y_shape[3] = {B, H, W_out};
  normkit_tensor xt, yt;
  normkit_tensor_init(&xt, x, NORMKIT_DTYPE_BFLOAT16, NORMKIT_LAYOUT_CHANNELS_FIRST, 4, x_shape);
  normkit_tensor_init(&yt, y, NORMKIT_DTYPE_FLOAT32, NORMKIT_LAYOUT_CHANNELS_FIRST, 3, y_shape);
  normkit_shift_sum_params p;
  normkit_shift_sum_params_init(&p, S);
  p.mask_kind = NORMKIT_MASK_HW;
  p.mask = m;
  p.scale = 0.5;
  normkit_context* ctx = NULL;
  if (normkit_context_create(1, &ctx) != NORMKIT_SUCCESS) return 1;
  double best = 1e30;
  for (int r = 0; r < 15; ++r) {
    const double t0 = Now();
    const normkit_status st = gap ? normkit_shift_sum_gap_step(ctx, &xt, &yt, &p, 0.5, 0.1, NULL)
                                  : normkit_shift_sum_adjoint(ctx, &yt, &p, &xt);
    const double t = Now() - t0;
    if (st != NORMKIT_SUCCESS) {
      fprintf(stderr, "%s\n", normkit_last_error());
      return 1;
    }
    if (t < best) best = t;
  }
  printf("%s best of 15: %.2f ms\n", gap ? "gap" : "adjoint", best * 1e3);
  normkit_context_destroy(ctx);
  free(x_base);
  free(m);
  free(y);
  return 0;
}
