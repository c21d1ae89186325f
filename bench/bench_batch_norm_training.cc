// SPDX-License-Identifier: Apache-2.0
// Batch norm in training mode (the forward and the backward) on seed 001's grid: batch 8-128,
// channels 2-1024, 1-D features up to 102400, 2-D 32x32 to 128x128, 3-D 32^3 and 64^3; 1 and 2
// threads, both layouts where there are spatial dims.
//
// The op's memory bound: x is read twice (statistics, then output) when it does not fit
// in the last-level cache, and y written once. So `bytes` counts x twice plus y for
// tensors past 24 MiB, x once plus y for those that stay in cache. ratio_to_ref is the
// time of a same-run memcpy of x over the op's (at the bound about 2/3 past the cache);
// ratio_to_bound measures that bound in the same run: plain loops reading x, then copying
// it (the backward: reading x and dy, then dx = x + dy); 1.0 is at the bound.
//
// The backward reads x and dy twice (sums, then dx) when they do not fit in the
// last-level cache and writes dx once: `bytes` counts 5 tensors past 24 MiB of x, 3 below
// (ratio_to_ref about 0.4 past the cache at that bound).
//
// bf16 / f16 rows: x, y (the backward: x, dy, dx) in that dtype, the per-channel arrays
// float32; bytes, the copy and the bound are of the half bytes.
//
//   ./build/bench/normkit_bench --benchmark_filter='train/'
#include <string>
#include <thread>
#include <vector>

#include "bench_harness.h"

namespace normkit_bench {
namespace {

void RunTraining(benchmark::State& state, const std::vector<int64_t>& shape, normkit_layout layout,
                 int threads, int32_t dtype) {
  const int64_t numel = Numel(shape), C = shape[1];
  int64_t floats;  // x's bytes in floats
  Buffer x = MakeTensorBuffer(shape, layout, dtype, 1, &floats), y = MakeBuffer(floats, 2);
  Buffer gamma = MakeBuffer(C, 3), beta = MakeBuffer(C, 4);
  Buffer running_mean = MakeBuffer(C, 5), running_var = MakeBuffer(C, 6);
  Buffer save_mean = MakeBuffer(C, 7), save_rstd = MakeBuffer(C, 8);
  for (int64_t c = 0; c < C; ++c) running_var[c] = 1.0f;
  normkit_context* ctx = nullptr;
  normkit_context_create(threads, &ctx);
  normkit_tensor xt = Desc(x.get(), layout, shape), yt = Desc(y.get(), layout, shape);
  xt.dtype = yt.dtype = dtype;
  const auto run_op = [&] {
    if (normkit_batch_norm_training(ctx, &xt, gamma.get(), beta.get(), 1e-5f, 0.1f,
                                    running_mean.get(), running_var.get(), &yt, save_mean.get(),
                                    save_rstd.get()) != NORMKIT_SUCCESS) {
      std::abort();
    }
  };
  const bool from_memory = floats * 4 >= (int64_t{24} << 20);
  volatile float sink = 0;
  const auto run_bound = [&] {  // its statistics pass reads x; its output pass copies
    sink = sink + ParallelReadSum(threads, x.get(), floats);
    ParallelLoopCopy(threads, y.get(), x.get(), floats);
  };
  RunAgainstCopy(state, run_op, threads, x.get(), floats, false, (from_memory ? 3 : 2) * floats * 4,
                 y.get(), nullptr, 0, run_bound);
  normkit_context_destroy(ctx);
}

void RunBackward(benchmark::State& state, const std::vector<int64_t>& shape, normkit_layout layout,
                 int threads, int32_t dtype) {
  const int64_t C = shape[1];
  int64_t floats;  // each tensor's bytes in floats
  Buffer x = MakeTensorBuffer(shape, layout, dtype, 1, &floats);
  Buffer dy = MakeTensorBuffer(shape, layout, dtype, 2, &floats), dx = MakeBuffer(floats, 3);
  Buffer gamma = MakeBuffer(C, 4), save_mean = MakeBuffer(C, 5), save_rstd = MakeBuffer(C, 6);
  Buffer grad_gamma = MakeBuffer(C, 7), grad_beta = MakeBuffer(C, 8);
  for (int64_t c = 0; c < C; ++c) save_rstd[c] = 1.0f;
  normkit_context* ctx = nullptr;
  normkit_context_create(threads, &ctx);
  normkit_tensor xt = Desc(x.get(), layout, shape), dyt = Desc(dy.get(), layout, shape);
  normkit_tensor dxt = Desc(dx.get(), layout, shape);
  xt.dtype = dyt.dtype = dxt.dtype = dtype;
  const auto run_op = [&] {
    if (normkit_batch_norm_training_backward(ctx, &xt, &dyt, save_mean.get(), save_rstd.get(),
                                             gamma.get(), &dxt, grad_gamma.get(),
                                             grad_beta.get()) != NORMKIT_SUCCESS) {
      std::abort();
    }
  };
  const bool from_memory = floats * 4 >= (int64_t{24} << 20);
  volatile float sink = 0;
  const auto run_bound = [&] {  // its sums read x and dy; its dx pass reads both, writes dx
    sink = sink + ParallelReadSum(threads, x.get(), floats) +
           ParallelReadSum(threads, dy.get(), floats);
    ParallelLoopAdd(threads, dx.get(), x.get(), dy.get(), floats);
  };
  RunAgainstCopy(state, run_op, threads, x.get(), floats, false, (from_memory ? 5 : 3) * floats * 4,
                 dx.get(), nullptr, 0, run_bound);
  normkit_context_destroy(ctx);
}

int RegisterAll() {
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  std::vector<int> thread_counts = {1};
  if (all > 1) thread_counts.push_back(all);
  const std::vector<std::vector<int64_t>> shapes = {
      {32, 256, 1024},     {8, 2, 102400},    {128, 1024, 16},   {8, 1024, 1024},
      {32, 32, 64, 64},    {16, 256, 32, 32}, {8, 32, 128, 128}, {128, 2, 128, 128},
      {8, 32, 32, 32, 32}, {8, 2, 64, 64, 64}};
  // The half rows: a shape of each kind past the cache (1-D, 2-D both layouts, 3-D) and
  // the short planes.
  const std::vector<std::vector<int64_t>> half_shapes = {
      {32, 256, 1024}, {128, 1024, 16}, {8, 32, 128, 128}, {8, 2, 64, 64, 64}};
  const auto register_dtype = [&](const std::vector<int64_t>& shape, int32_t dtype) {
    const std::string type = dtype == NORMKIT_DTYPE_BFLOAT16  ? "bf16/"
                             : dtype == NORMKIT_DTYPE_FLOAT16 ? "f16/"
                                                              : "";
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      if (layout == NORMKIT_LAYOUT_CHANNELS_LAST && shape.size() == 3 && shape[2] > 16) continue;
      for (int t : thread_counts) {
        const std::string rest = type + ShapeName(shape) +
                                 (layout == NORMKIT_LAYOUT_CHANNELS_LAST ? "/NHWC" : "/NCHW") +
                                 "/threads:" + std::to_string(t);
        RegisterTimed("train/batch_norm/" + rest,
                      [=](benchmark::State& st) { RunTraining(st, shape, layout, t, dtype); });
        RegisterTimed("train/batch_norm_backward/" + rest,
                      [=](benchmark::State& st) { RunBackward(st, shape, layout, t, dtype); });
      }
    }
  };
  for (const auto& shape : shapes) register_dtype(shape, NORMKIT_DTYPE_FLOAT32);
  for (int32_t dtype : {NORMKIT_DTYPE_BFLOAT16, NORMKIT_DTYPE_FLOAT16}) {
    for (const auto& shape : half_shapes) register_dtype(shape, dtype);
  }
  return 0;
}
const int registered = RegisterAll();

}  // namespace
}  // namespace normkit_bench
