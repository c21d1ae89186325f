// SPDX-License-Identifier: Apache-2.0
// Google Benchmark for affine, scale-only and batch-norm inference on the seed shapes.
// Each benchmark times the op and, interleaved in the same loop, the copy reference of
// DESIGN.md (parallel memcpy for out-of-place, parallel in-place x = a*x + b for in
// place) over the same bytes and threads; it reports both bandwidths and their ratio.
//
//   ./build/bench/normkit_bench --benchmark_filter='seed000'
#include <string>
#include <thread>
#include <vector>

#include "bench_harness.h"

namespace normkit_bench {
namespace {

enum class Op { kAffine, kPerSample, kScaleOnly, kBatchNorm, kNaiveLoop };
const char* OpName(Op op) {
  switch (op) {
    case Op::kAffine: return "affine";
    case Op::kPerSample: return "affine_per_sample";
    case Op::kScaleOnly: return "scale_only";
    case Op::kBatchNorm: return "batch_norm";
    case Op::kNaiveLoop: return "naive_broadcast_loop";
  }
  return "?";
}

// What frameworks' generic broadcasting does for x * w.view(1,C,1,1) + b: an index
// computation per element, one thread. Shown as the contrast the seeds complain about.
void NaiveBroadcast(const float* x, float* y, const float* w, const float* b, int64_t N, int64_t C,
                    int64_t S, bool channels_last) {
  for (int64_t i = 0; i < N * C * S; ++i) {
    const int64_t c = channels_last ? i % C : (i / S) % C;
    y[i] = x[i] * w[c] + b[c];
  }
}

// dtype: of x and y (float32, or bfloat16 / float16 storage: then the reference moves
// the op's own bytes, half those of float32).
void Run(benchmark::State& state, Op op, std::vector<int64_t> shape, normkit_layout layout,
         bool in_place, int threads, int32_t dtype = NORMKIT_DTYPE_FLOAT32) {
  const int64_t numel = Numel(shape), C = shape[1], N = shape[0], S = numel / (N * C);
  const int64_t elem = ElementBytes(dtype);
  int64_t floats;  // the buffers' size in floats
  Buffer x = MakeTensorBuffer(shape, layout, dtype, 1, &floats), y = MakeBuffer(floats, 2);
  // Per-sample parameters (seed 000) are N x C; the others read the first C.
  Buffer scale = MakeBuffer(N * C, 4), shift = MakeBuffer(N * C, 5), mean = MakeBuffer(C, 6),
         var = MakeBuffer(C, 7);
  for (int64_t c = 0; c < C; ++c) var[c] = var[c] * var[c] + 0.5f;
  normkit_context* ctx = nullptr;
  normkit_context_create(threads, &ctx);
  normkit_tensor xt = Desc(x.get(), layout, shape),
                 yt = Desc(in_place ? x.get() : y.get(), layout, shape);
  xt.dtype = yt.dtype = dtype;
  const auto run_op = [&] {
    switch (op) {
      case Op::kAffine:
        normkit_affine(ctx, &xt, scale.get(), shift.get(), NORMKIT_PARAMS_PER_CHANNEL, &yt);
        break;
      case Op::kPerSample:
        normkit_affine(ctx, &xt, scale.get(), shift.get(), NORMKIT_PARAMS_PER_SAMPLE_CHANNEL, &yt);
        break;
      case Op::kScaleOnly:
        normkit_affine(ctx, &xt, scale.get(), nullptr, NORMKIT_PARAMS_PER_CHANNEL, &yt);
        break;
      case Op::kBatchNorm:
        normkit_batch_norm_inference(ctx, &xt, scale.get(), shift.get(), mean.get(), var.get(),
                                     1e-5f, &yt);
        break;
      case Op::kNaiveLoop:
        NaiveBroadcast(x.get(), in_place ? x.get() : y.get(), scale.get(), shift.get(), N, C, S,
                       layout == NORMKIT_LAYOUT_CHANNELS_LAST);
        break;
    }
  };
  // Read x once, write y once.
  RunAgainstCopy(state, run_op, threads, x.get(), floats, in_place, 2 * numel * elem, y.get());
  normkit_context_destroy(ctx);
}

void Register(const std::string& group, Op op, const std::vector<int64_t>& shape,
              normkit_layout layout, bool in_place, int threads,
              int32_t dtype = NORMKIT_DTYPE_FLOAT32) {
  const char* type = dtype == NORMKIT_DTYPE_BFLOAT16  ? "/bf16"
                     : dtype == NORMKIT_DTYPE_FLOAT16 ? "/f16"
                                                      : "";
  const std::string name = group + "/" + OpName(op) + type + "/" + ShapeName(shape) + "/" +
                           (layout == NORMKIT_LAYOUT_CHANNELS_LAST ? "NHWC" : "NCHW") + "/" +
                           (in_place ? "inplace" : "outofplace") +
                           "/threads:" + std::to_string(threads);
  RegisterTimed(
      name, [=](benchmark::State& st) { Run(st, op, shape, layout, in_place, threads, dtype); });
}

int RegisterAll() {
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  std::vector<int> thread_counts = {1};
  if (all > 1) thread_counts.push_back(all);
  const auto layouts = {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST};
  // Seed 000 (per-sample parameters) / 004 (scale only) and the N = 1 edge shapes:
  // every op, both places.
  const std::vector<std::pair<std::string, std::vector<int64_t>>> main_shapes = {
      {"seed000", {64, 256, 64, 64}}, {"seed000", {16, 256, 64, 64}}, {"edge", {1, 64, 56, 56}},
      {"edge", {1, 256, 14, 14}},     {"edge", {1, 32, 112, 112}},    {"edge", {1, 3, 224, 224}},
      {"edge", {1, 1024, 7, 7}}};
  for (const auto& [group, shape] : main_shapes)
    for (Op op : {Op::kAffine, Op::kPerSample, Op::kScaleOnly, Op::kBatchNorm})
      for (auto layout : layouts)
        for (bool in_place : {false, true})
          for (int t : thread_counts) Register(group, op, shape, layout, in_place, t);
  // bfloat16 and float16 storage: affine and batch norm, against memcpy of their own bytes.
  for (const auto& [group, shape] : main_shapes)
    for (int32_t dtype : {NORMKIT_DTYPE_BFLOAT16, NORMKIT_DTYPE_FLOAT16})
      for (Op op : {Op::kAffine, Op::kBatchNorm})
        for (auto layout : layouts)
          for (bool in_place : {false, true})
            for (int t : thread_counts) Register(group, op, shape, layout, in_place, t, dtype);
  // The naive broadcast loop as a contrast, one thread.
  for (const auto& [group, shape] : main_shapes)
    for (auto layout : layouts) Register(group, Op::kNaiveLoop, shape, layout, false, 1);
  // Seed 001's batch-norm grid (batch x channels x spatial), under 1e8 elements.
  for (int64_t n : {8, 32, 128})
    for (int64_t c : {32, 256, 1024})
      for (const auto& sp : std::vector<std::vector<int64_t>>{{16}, {1024}, {64, 64}}) {
        std::vector<int64_t> shape = {n, c};
        shape.insert(shape.end(), sp.begin(), sp.end());
        if (Numel(shape) >= 100000000) continue;
        for (auto layout : layouts)
          for (bool in_place : {false, true})
            for (int t : thread_counts)
              Register("seed001", Op::kBatchNorm, shape, layout, in_place, t);
      }
  return 0;
}
const int registered = RegisterAll();

}  // namespace
}  // namespace normkit_bench
