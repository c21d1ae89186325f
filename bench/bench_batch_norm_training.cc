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
//   ./build/bench/normkit_bench --benchmark_filter='train/'
#include <string>
#include <thread>
#include <vector>

#include "bench_harness.h"

namespace normkit_bench {
namespace {

void RunTraining(benchmark::State& state, const std::vector<int64_t>& shape, normkit_layout layout,
                 int threads) {
  const int64_t numel = Numel(shape), C = shape[1];
  Buffer x = MakeBuffer(numel, 1), y = MakeBuffer(numel, 2);
  Buffer gamma = MakeBuffer(C, 3), beta = MakeBuffer(C, 4);
  Buffer running_mean = MakeBuffer(C, 5), running_var = MakeBuffer(C, 6);
  Buffer save_mean = MakeBuffer(C, 7), save_rstd = MakeBuffer(C, 8);
  for (int64_t c = 0; c < C; ++c) running_var[c] = 1.0f;
  normkit_context* ctx = nullptr;
  normkit_context_create(threads, &ctx);
  const normkit_tensor xt = Desc(x.get(), layout, shape), yt = Desc(y.get(), layout, shape);
  const auto run_op = [&] {
    if (normkit_batch_norm_training(ctx, &xt, gamma.get(), beta.get(), 1e-5f, 0.1f,
                                    running_mean.get(), running_var.get(), &yt, save_mean.get(),
                                    save_rstd.get()) != NORMKIT_SUCCESS) {
      std::abort();
    }
  };
  const bool from_memory = numel * 4 >= (int64_t{24} << 20);
  volatile float sink = 0;
  const auto run_bound = [&] {  // its statistics pass reads x; its output pass copies
    sink = sink + ParallelReadSum(threads, x.get(), numel);
    ParallelLoopCopy(threads, y.get(), x.get(), numel);
  };
  RunAgainstCopy(state, run_op, threads, x.get(), numel, false, (from_memory ? 3 : 2) * numel * 4,
                 y.get(), nullptr, 0, run_bound);
  normkit_context_destroy(ctx);
}

void RunBackward(benchmark::State& state, const std::vector<int64_t>& shape, normkit_layout layout,
                 int threads) {
  const int64_t numel = Numel(shape), C = shape[1];
  Buffer x = MakeBuffer(numel, 1), dy = MakeBuffer(numel, 2), dx = MakeBuffer(numel, 3);
  Buffer gamma = MakeBuffer(C, 4), save_mean = MakeBuffer(C, 5), save_rstd = MakeBuffer(C, 6);
  Buffer grad_gamma = MakeBuffer(C, 7), grad_beta = MakeBuffer(C, 8);
  for (int64_t c = 0; c < C; ++c) save_rstd[c] = 1.0f;
  normkit_context* ctx = nullptr;
  normkit_context_create(threads, &ctx);
  const normkit_tensor xt = Desc(x.get(), layout, shape), dyt = Desc(dy.get(), layout, shape);
  const normkit_tensor dxt = Desc(dx.get(), layout, shape);
  const auto run_op = [&] {
    if (normkit_batch_norm_training_backward(ctx, &xt, &dyt, save_mean.get(), save_rstd.get(),
                                             gamma.get(), &dxt, grad_gamma.get(),
                                             grad_beta.get()) != NORMKIT_SUCCESS) {
      std::abort();
    }
  };
  const bool from_memory = numel * 4 >= (int64_t{24} << 20);
  volatile float sink = 0;
  const auto run_bound = [&] {  // its sums read x and dy; its dx pass reads both, writes dx
    sink =
        sink + ParallelReadSum(threads, x.get(), numel) + ParallelReadSum(threads, dy.get(), numel);
    ParallelLoopAdd(threads, dx.get(), x.get(), dy.get(), numel);
  };
  RunAgainstCopy(state, run_op, threads, x.get(), numel, false, (from_memory ? 5 : 3) * numel * 4,
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
  for (const auto& shape : shapes) {
    for (auto layout : {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST}) {
      if (layout == NORMKIT_LAYOUT_CHANNELS_LAST && shape.size() == 3 && shape[2] > 16) continue;
      for (int t : thread_counts) {
        const std::string name = "train/batch_norm/" + ShapeName(shape) +
                                 (layout == NORMKIT_LAYOUT_CHANNELS_LAST ? "/NHWC" : "/NCHW") +
                                 "/threads:" + std::to_string(t);
        RegisterTimed(name, [=](benchmark::State& st) { RunTraining(st, shape, layout, t); });
        const std::string backward = "train/batch_norm_backward/" + name.substr(17);
        RegisterTimed(backward, [=](benchmark::State& st) { RunBackward(st, shape, layout, t); });
      }
    }
  }
  return 0;
}
const int registered = RegisterAll();

}  // namespace
}  // namespace normkit_bench
