/* SPDX-License-Identifier: Apache-2.0
 *
 * Same-process A/B of two normkit builds: normkit_ab_compare OLD.so NEW.so C H W G
 * [calls] [nhwc] [threads] [act] [batch] [data].
 *
 * Loads both shared libraries with dlmopen (separate link-map namespaces, so the
 * two copies of the same soname do not collide) and alternates calls of
 * normkit_group_norm on a batch x C x H x W tensor (batch 1 unless given; gamma and
 * beta set), each call timed
 * alone, plus a memcpy of the tensor after each pair. Prints the medians, each
 * build's ratio to memcpy, B/A, and whether the two builds' last outputs are the
 * same bits. G = ln or rms times normkit_layer_norm or normkit_rms_norm instead,
 * on a [C, H*W] tensor (rows, D); G = affine times normkit_affine (per-channel
 * scale and shift), G = bn normkit_batch_norm_inference (running means within a few
 * standard deviations: the folded path; bnfar: about 100 standard deviations out, where
 * builds from stop 42 on subtract the mean first). act: none (default), relu or silu, group norm's fused
 * activation. G = ssA, ssAt or gap: normkit_shift_sum (A), normkit_shift_sum_adjoint (A^T) or
 * normkit_shift_sum_gap_step (lambda 0.5, gamma 0.01, x restored before each call, untimed) on
 * [batch, C, H, W] with step 2 along W and an [H, W] mask; the output compared is y for A,
 * x for A^T and the GAP step.
 *
 * Why: this 2-core VM drifts between phases where the same call takes 5.4 or
 * 8.5 us. Two builds timed in separate runs compare phases, not code; in one
 * process, calls alternated, both see the same phase. A 6% regression of
 * 1x256x14x14 G=32 (stop 33) was invisible between runs and plain here.
 * Pin it to one core (taskset -c 1) and repeat it a few times. On tensors larger
 * than the caches the two positions are not equal: 4096x768 layer norm, the same
 * library against a copy of itself, read B/A 0.78-0.97. There, run both orders.
 * The memcpy is one thread's whatever `threads` is. With threads > 1 each build has
 * its own OpenMP runtime, whose idle workers spin while the other build runs: two
 * threads then time slower than one (32x512x56x56 NHWC: 18 ms against 14.7); compare
 * thread counts above one with normkit_bench and LD_LIBRARY_PATH instead.
 * x varies with the position (a step every H*W elements), so almost every
 * channels-last statistics block takes its second pass (a pivot far from a group's
 * mean: 96 of 256 block-groups at 128x256x28x28 G=32); the benchmark's uniform data
 * takes none, and neither does data = flat (x without the steps).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <normkit/normkit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef normkit_status (*GroupNormFn)(const normkit_context*, const normkit_tensor*, int64_t,
                                      const float*, const float*, float, int32_t,
                                      const normkit_tensor*, float*, float*);
typedef normkit_status (*LayerNormFn)(const normkit_context*, const normkit_tensor*, const float*,
                                      const float*, float, const normkit_tensor*, float*, float*);
typedef normkit_status (*RmsNormFn)(const normkit_context*, const normkit_tensor*, const float*,
                                    float, const normkit_tensor*, float*);
typedef normkit_status (*AffineFn)(const normkit_context*, const normkit_tensor*, const float*,
                                   const float*, int32_t, const normkit_tensor*);
typedef normkit_status (*BatchNormFn)(const normkit_context*, const normkit_tensor*, const float*,
                                      const float*, const float*, const float*, float,
                                      const normkit_tensor*);
typedef normkit_status (*ContextCreateFn)(int32_t, normkit_context**);
typedef normkit_status (*ShiftSumFn)(const normkit_context*, const normkit_tensor*,
                                     const normkit_shift_sum_params*, const normkit_tensor*);
typedef normkit_status (*GapStepFn)(const normkit_context*, const normkit_tensor*,
                                    const normkit_tensor*, const normkit_shift_sum_params*, double,
                                    double, const void*);

static double NowNs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static int CompareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc < 7) {
    fprintf(
        stderr,
        "usage: %s OLD.so NEW.so C H W G [calls=3000] [nhwc=0] [threads=1] [act=none] [batch=1] "
        "[data=steps|flat]\n",
        argv[0]);
    return 2;
  }
  const long C = atol(argv[3]), H = atol(argv[4]), W = atol(argv[5]);
  const int rows_op = strcmp(argv[6], "ln") == 0 ? 1 : strcmp(argv[6], "rms") == 0 ? 2 : 0;
  const int bn_far = strcmp(argv[6], "bnfar") == 0; /* running means 100 std out */
  const int bn_op = strcmp(argv[6], "bn") == 0 || bn_far;
  const int affine_op = strcmp(argv[6], "affine") == 0 || bn_op;
  /* shift-sum: 1 = A, 2 = A^T, 3 = GAP step */
  const int ss_op = strcmp(argv[6], "ssA") == 0    ? 1
                    : strcmp(argv[6], "ssAt") == 0 ? 2
                    : strcmp(argv[6], "gap") == 0  ? 3
                                                   : 0;
  const long G = rows_op || affine_op || ss_op ? 1 : atol(argv[6]);
  const int calls = argc > 7 ? atoi(argv[7]) : 3000;
  const int nhwc = argc > 8 ? atoi(argv[8]) : 0;
  const int threads = argc > 9 ? atoi(argv[9]) : 1;
  const char* act_name = argc > 10 ? argv[10] : "none";
  const long batch = argc > 11 ? atol(argv[11]) : 1;           /* N (group norm and affine) */
  const int flat = argc > 12 && strcmp(argv[12], "flat") == 0; /* no steps in x */
  const int act = strcmp(act_name, "silu") == 0   ? NORMKIT_ACTIVATION_SILU
                  : strcmp(act_name, "relu") == 0 ? NORMKIT_ACTIVATION_RELU
                                                  : NORMKIT_ACTIVATION_NONE;
  if (act == NORMKIT_ACTIVATION_NONE && strcmp(act_name, "none") != 0) {
    fprintf(stderr, "act must be none, relu or silu, not %s\n", act_name);
    return 2;
  }
  if (C < 1 || H < 1 || W < 1 || G < 1 || calls < 1 || threads < 1 || batch < 1) {
    fprintf(stderr, "C, H, W, G, calls, threads and batch must be >= 1\n");
    return 2;
  }
  GroupNormFn group_norm[2];
  LayerNormFn layer_norm[2];
  AffineFn affine[2];
  BatchNormFn batch_norm[2];
  RmsNormFn rms_norm[2];
  ShiftSumFn shift_sum[2], shift_sum_adjoint[2];
  GapStepFn gap_step[2];
  normkit_context* context[2];
  for (int k = 0; k < 2; ++k) {
    void* lib = dlmopen(LM_ID_NEWLM, argv[1 + k], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
      fprintf(stderr, "%s\n", dlerror());
      return 1;
    }
    group_norm[k] = (GroupNormFn)dlsym(lib, "normkit_group_norm");
    layer_norm[k] = (LayerNormFn)dlsym(lib, "normkit_layer_norm");
    affine[k] = (AffineFn)dlsym(lib, "normkit_affine");
    batch_norm[k] = (BatchNormFn)dlsym(lib, "normkit_batch_norm_inference");
    rms_norm[k] = (RmsNormFn)dlsym(lib, "normkit_rms_norm");
    shift_sum[k] = (ShiftSumFn)dlsym(lib, "normkit_shift_sum");
    shift_sum_adjoint[k] = (ShiftSumFn)dlsym(lib, "normkit_shift_sum_adjoint");
    gap_step[k] = (GapStepFn)dlsym(lib, "normkit_shift_sum_gap_step");
    ContextCreateFn create = (ContextCreateFn)dlsym(lib, "normkit_context_create");
    if (group_norm[k] == NULL || layer_norm[k] == NULL || rms_norm[k] == NULL ||
        affine[k] == NULL || batch_norm[k] == NULL || create == NULL || shift_sum[k] == NULL ||
        shift_sum_adjoint[k] == NULL || gap_step[k] == NULL ||
        create(threads, &context[k]) != 0) {
      fprintf(stderr, "%s: no normkit_group_norm / normkit_context_create\n", argv[1 + k]);
      return 1;
    }
  }
  const long n = batch * C * H * W;
  const long ss_w = W + (C - 1) * 2;            /* shift-sum: y is [batch, 1, H, ss_w] */
  const long ny = ss_op ? batch * H * ss_w : n; /* elements of y */
  const long big = ny > n ? ny : n;
  float* x = aligned_alloc(64, ((size_t)big * 4 + 63) / 64 * 64);
  float* y = aligned_alloc(64, ((size_t)big * 4 + 63) / 64 * 64);
  float* x0 = malloc((size_t)n * 4); /* x as made: restored before each GAP step */
  float* mask = malloc((size_t)H * W * 4);
  float* y_a = malloc((size_t)big * 4); /* the builds' last outputs, copied out */
  float* y_b = malloc((size_t)big * 4);
  float* copy_dst = aligned_alloc(64, ((size_t)n * 4 + 63) / 64 * 64); /* memcpy's, shift-sum */
  if (!x0 || !mask || !copy_dst) return 1;
  const long params = rows_op ? H * W : C;
  float* gamma = malloc((size_t)params * 4);
  float* beta = malloc((size_t)params * 4);
  double* times[3];
  for (int k = 0; k < 3; ++k) times[k] = malloc((size_t)calls * sizeof(double));
  if (!x || !y || !y_b || !y_a || !gamma || !beta || !times[0] || !times[1] || !times[2]) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  for (long i = 0; i < n; ++i)
    x[i] = (float)((i * 2654435761u) % 1000) / 1000.f + (flat ? 0 : (i / (H * W)) % 7);
  for (long i = 0; i < ny; ++i) y[i] = (float)((i * 40503u) % 997) / 997.f;
  for (long i = 0; i < H * W; ++i) mask[i] = (i * 7919u) % 5 == 0 ? 0.f : 0.5f + (i % 3) * 0.25f;
  memcpy(x0, x, (size_t)n * 4);
  normkit_shift_sum_params ssp;
  normkit_shift_sum_params_init(&ssp, 2);
  ssp.mask_kind = NORMKIT_MASK_HW;
  ssp.mask = mask;
  float* far_mean = malloc((size_t)params * 4);
  if (!far_mean) return 1;
  for (long c = 0; c < params; ++c) {
    gamma[c] = 1 + 0.01f * c;
    beta[c] = 0.1f * c;
    far_mean[c] = 100 * (1 + 0.01f * c) + 0.1f * c; /* over 16 std: mean-first in new builds */
  }
  normkit_tensor xt, yt;
  memset(&xt, 0, sizeof xt);
  xt.struct_size = sizeof xt;
  xt.data = x;
  xt.dtype = NORMKIT_DTYPE_FLOAT32;
  xt.layout = nhwc ? NORMKIT_LAYOUT_CHANNELS_LAST : NORMKIT_LAYOUT_CHANNELS_FIRST;
  xt.rank = 4;
  xt.shape[0] = batch;
  xt.shape[1] = C;
  xt.shape[2] = H;
  xt.shape[3] = W;
  if (rows_op) {
    xt.rank = 2;
    xt.shape[1] = H * W;
    xt.shape[0] = batch * C;
  }
  yt = xt;
  yt.data = y;
  if (ss_op) {
    yt.shape[1] = 1;
    yt.shape[3] = ss_w;
  }
  float* out_data = ss_op >= 2 ? x : y; /* what the op writes */
  const long n_out = ss_op >= 2 ? n : ny;
  for (int r = 0; r < calls; ++r) {
    for (int j = 0; j < 2; ++j) {
      const int k = (r & 1) ? 1 - j : j;  // alternate which build goes first
      const normkit_tensor* out = &yt;    // one output buffer: the same cache state for both
      if (ss_op == 3) memcpy(x, x0, (size_t)n * 4); /* the GAP step updates x */
      const double t0 = NowNs();
      const normkit_status s =
          ss_op == 1   ? shift_sum[k](context[k], &xt, &ssp, &yt)
          : ss_op == 2 ? shift_sum_adjoint[k](context[k], &yt, &ssp, &xt)
          : ss_op == 3 ? gap_step[k](context[k], &xt, &yt, &ssp, 0.5, 0.01, NULL)
          : bn_op ? batch_norm[k](context[k], &xt, gamma, beta, bn_far ? far_mean : beta, gamma, 1e-5f,
                                out)
          : affine_op    ? affine[k](context[k], &xt, gamma, beta, NORMKIT_PARAMS_PER_CHANNEL, out)
          : rows_op == 1 ? layer_norm[k](context[k], &xt, gamma, beta, 1e-5f, out, NULL, NULL)
          : rows_op == 2
              ? rms_norm[k](context[k], &xt, gamma, 1e-5f, out, NULL)
              : group_norm[k](context[k], &xt, G, gamma, beta, 1e-5f, act, out, NULL, NULL);
      times[k][r] = NowNs() - t0;
      if (r == calls - 1) memcpy(k == 0 ? y_a : y_b, out_data, (size_t)n_out * 4);  // last outputs
      if (s != 0) {
        fprintf(stderr, "%s: status %d\n", argv[1 + k], (int)s);
        return 1;
      }
    }
    const double t0 = NowNs();
    memcpy(ss_op ? copy_dst : y, x, (size_t)n * 4); /* shift-sum: y is an input, kept */
    times[2][r] = NowNs() - t0;
  }
  for (int k = 0; k < 3; ++k) qsort(times[k], (size_t)calls, sizeof(double), CompareDoubles);
  const double a = times[0][calls / 2], b = times[1][calls / 2], copy = times[2][calls / 2];
  printf(
      "%ldx%ldx%ldx%ld %s%s %s %s threads=%d: A %.2f us  B %.2f us  memcpy %.2f us  "
      "ratios %.3f %.3f  B/A %.3f  outputs %s\n",
      batch, C, H, W, rows_op || affine_op || ss_op ? "" : "G=", argv[6], nhwc ? "NHWC" : "NCHW", act_name,
      threads, a / 1e3, b / 1e3, copy / 1e3, copy / a, copy / b, b / a,
      memcmp(y_a, y_b, (size_t)n_out * 4) == 0 ? "same bits" : "DIFFER");
  return 0;
}
