/* SPDX-License-Identifier: Apache-2.0 */
/* Per-call time of affine and batch-norm inference on one N=1 shape against a copy of
 * the same bytes with the same threads (an OpenMP region, each thread memcpy-ing its
 * chunk; in place: x = a*x + b), for the calls of a few microseconds where the cost of
 * starting threads shows.
 *
 * Unlike normkit_bench, which interleaves op and copy call by call, this times blocks
 * of calls (BLOCK affine calls, then BLOCK batch-norm calls, then BLOCK copies, for
 * `rounds` rounds) and reports the median over rounds of each block's median call. In
 * a POOL build that matters: the pool's workers and OpenMP's both spin for a while
 * after a call, and interleaved calls of the two then fight over the cores.
 *
 * The copy is an OpenMP region by default (`omp`), or, with `normkit`, an affine call
 * with neither scale nor shift (a copy through normkit's own threads): in a POOL
 * build, the OpenMP copy leaves OpenMP's workers spinning on the cores the pool's
 * workers need next (README, "Threads and contexts"), so compare POOL and OPENMP builds'
 * call times with `normkit`. In place, the `normkit` copy copies x onto itself, which is
 * not the in-place scale of DESIGN.md: use its ratio out of place only.
 *
 * usage: normkit_call_bench C H W [nchw|nhwc] [out|in] [threads] [rounds] [omp|normkit]
 * e.g.   normkit_call_bench 256 14 14 nchw out 2 15 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "normkit/normkit.h"

#define BLOCK 400
#define MAX_ROUNDS 64

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int CompareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double Median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), CompareDoubles);
  return v[n / 2];
}

static void Copy(int threads, float* dst, const float* src, int64_t n, int in_place) {
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (in_place) {
      for (int64_t i = begin; i < end; ++i) dst[i] = 0.999f * dst[i] + 0.001f;
    } else {
      memcpy(dst + begin, src + begin, (size_t)(end - begin) * sizeof(float));
    }
  }
}

static void Check(normkit_status status) {
  if (status != NORMKIT_SUCCESS) {
    fprintf(stderr, "normkit: %s\n", normkit_last_error());
    exit(1);
  }
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s C H W [nchw|nhwc] [out|in] [threads] [rounds]\n", argv[0]);
    return 2;
  }
  const int64_t c = atoll(argv[1]), h = atoll(argv[2]), w = atoll(argv[3]);
  const int nhwc = argc > 4 && strcmp(argv[4], "nhwc") == 0;
  const int in_place = argc > 5 && strcmp(argv[5], "in") == 0;
  const int threads = argc > 6 ? atoi(argv[6]) : omp_get_max_threads();
  int rounds = argc > 7 ? atoi(argv[7]) : 15;
  const int normkit_copy = argc > 8 && strcmp(argv[8], "normkit") == 0;
  if (c < 1 || h < 1 || w < 1 || threads < 1 || rounds < 1) return 2;
  if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
  const int64_t n = c * h * w;
  const size_t bytes = ((size_t)n * sizeof(float) + 63) / 64 * 64;
  float* x = aligned_alloc(64, bytes);
  float* y = aligned_alloc(64, bytes);
  float* ref = aligned_alloc(64, bytes);
  float* params = malloc((size_t)c * 6 * sizeof(float));
  if (!x || !y || !ref || !params) return 1;
  for (int64_t i = 0; i < n; ++i) x[i] = y[i] = ref[i] = (float)(i % 1000) / 1000.0f + 0.5f;
  float *gamma = params, *beta = params + c, *mean = params + 2 * c, *var = params + 3 * c;
  float *scale = params + 4 * c, *shift = params + 5 * c;
  for (int64_t i = 0; i < c; ++i) {
    gamma[i] = 1.0f + 0.01f * (float)i;
    beta[i] = 0.1f;
    mean[i] = 0.2f;
    var[i] = 1.5f;
  }
  Check(normkit_batch_norm_fold(c, gamma, beta, mean, var, 1e-5f, scale, shift));

  normkit_context* ctx = NULL;
  Check(normkit_context_create(threads, &ctx));
  const int64_t shape[4] = {1, c, h, w};
  normkit_tensor tx, ty;
  normkit_tensor_init(&tx, x, NORMKIT_DTYPE_FLOAT32,
                      nhwc ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST, 4,
                      shape);
  ty = tx;
  ty.data = in_place ? x : y;

  double block[3][MAX_ROUNDS], call[BLOCK];
  for (int r = 0; r < rounds; ++r) {
    for (int which = 0; which < 3; ++which) {
      for (int i = 0; i < BLOCK; ++i) {
        const double t0 = Now();
        if (which == 0) {
          Check(normkit_affine(ctx, &tx, scale, shift, 0, &ty));
        } else if (which == 1) {
          Check(normkit_batch_norm_inference(ctx, &tx, gamma, beta, mean, var, 1e-5f, &ty));
        } else if (normkit_copy) {
          Check(normkit_affine(ctx, &tx, NULL, NULL, 0, &ty));
        } else {
          Copy(threads, in_place ? ref : y, x, n, in_place);
        }
        call[i] = Now() - t0;
      }
      block[which][r] = Median(call, BLOCK);
    }
  }
  const double affine = Median(block[0], rounds), bn = Median(block[1], rounds);
  const double copy = Median(block[2], rounds);
  printf(
      "%s backend, 1x%lldx%lldx%lld %s %s, %d thread(s): affine %.2f us (ratio %.2f), "
      "batch_norm %.2f us (ratio %.2f), %s copy %.2f us\n",
      normkit_threading_backend(), (long long)c, (long long)h, (long long)w, nhwc ? "NHWC" : "NCHW",
      in_place ? "in place" : "out of place", threads, affine * 1e6, copy / affine, bn * 1e6,
      copy / bn, normkit_copy ? "normkit" : "OpenMP", copy * 1e6);
  normkit_context_destroy(ctx);
  free(params);
  free(ref);
  free(y);
  free(x);
  return 0;
}
