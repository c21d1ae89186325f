// SPDX-License-Identifier: Apache-2.0
// Benchmarks of the normalization family on seed 002's shapes and the edge shapes:
// group norm (with and without the fused SiLU), instance norm, layer / RMS norm over
// [4096, 768] and [4096, 128], the fused residual add + layer / RMS norm; both layouts, 1 and all
// threads, against the same-run memcpy.
//
//   ./build/bench/normkit_bench --benchmark_filter='seed002'
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_harness.h"

namespace normkit_bench {
namespace {

enum class Norm { kGroup, kInstance, kLayerRows, kRmsRows };

const char* NormName(Norm op) {
  switch (op) {
    case Norm::kGroup: return "group_norm";
    case Norm::kInstance: return "instance_norm";
    case Norm::kLayerRows: return "layer_norm";
    case Norm::kRmsRows: return "rms_norm";
  }
  return "?";
}

// dtype: of x and y (bfloat16 / float16: the reference then moves the op's own bytes).
void RunNorm(benchmark::State& state, Norm op, std::vector<int64_t> shape, int64_t groups,
             normkit_layout layout, int32_t activation, bool in_place, int threads,
             int32_t dtype = NORMKIT_DTYPE_FLOAT32) {
  const int64_t numel = Numel(shape), C = shape[1];
  const int64_t elem = ElementBytes(dtype);
  int64_t floats;  // the buffers' size in floats
  Buffer x = MakeTensorBuffer(shape, layout, dtype, 1, &floats), y = MakeBuffer(floats, 2);
  Buffer gamma = MakeBuffer(C, 4), beta = MakeBuffer(C, 5);
  normkit_context* ctx = nullptr;
  normkit_context_create(threads, &ctx);
  normkit_tensor xt = Desc(x.get(), layout, shape),
                 yt = Desc(in_place ? x.get() : y.get(), layout, shape);
  xt.dtype = yt.dtype = dtype;
  const auto run_op = [&] {
    normkit_status st = NORMKIT_SUCCESS;
    switch (op) {
      case Norm::kGroup:
        st = normkit_group_norm(ctx, &xt, groups, gamma.get(), beta.get(), 1e-5f, activation, &yt,
                                nullptr, nullptr);
        break;
      case Norm::kInstance:
        st = normkit_instance_norm(ctx, &xt, gamma.get(), beta.get(), 1e-5f, activation, &yt,
                                   nullptr, nullptr);
        break;
      case Norm::kLayerRows:
        st = normkit_layer_norm(ctx, &xt, gamma.get(), beta.get(), 1e-5f, &yt, nullptr, nullptr);
        break;
      case Norm::kRmsRows: st = normkit_rms_norm(ctx, &xt, gamma.get(), 1e-5f, &yt, nullptr); break;
    }
    if (st != NORMKIT_SUCCESS) std::abort();
  };
  RunAgainstCopy(state, run_op, threads, x.get(), floats, in_place, 2 * numel * elem, y.get());
  normkit_context_destroy(ctx);
}

void Register(const std::string& group, Norm op, const std::vector<int64_t>& shape, int64_t groups,
              normkit_layout layout, int32_t activation, bool in_place, int threads,
              int32_t dtype = NORMKIT_DTYPE_FLOAT32) {
  std::string name = group + "/" + NormName(op);
  if (dtype != NORMKIT_DTYPE_FLOAT32) name += dtype == NORMKIT_DTYPE_BFLOAT16 ? "/bf16" : "/f16";
  name += "/" + ShapeName(shape);
  if (op == Norm::kGroup) name += "/G:" + std::to_string(groups);
  if (op == Norm::kGroup || op == Norm::kInstance) {
    name += layout == NORMKIT_LAYOUT_CHANNELS_LAST ? "/NHWC" : "/NCHW";
  }
  if (activation == NORMKIT_ACTIVATION_SILU) name += "/silu";
  name +=
      std::string(in_place ? "/inplace" : "/outofplace") + "/threads:" + std::to_string(threads);
  RegisterTimed(name, [=](benchmark::State& st) {
    RunNorm(st, op, shape, groups, layout, activation, in_place, threads, dtype);
  });
}

// The fused residual add + layer / RMS norm over [rows, D]: x and residual read, y and h
// written (h_out given: a transformer block's add & norm), all four in `dtype`; the
// reference copies those 4 arrays' bytes (2 in, 2 out).
void RunAddNorm(benchmark::State& state, bool rms, int64_t rows, int64_t D, int threads,
                int32_t dtype) {
  const int64_t n = rows * D, elem = ElementBytes(dtype);
  int64_t floats;  // x and residual together, in floats
  Buffer in = MakeTensorBuffer({2 * rows, D}, NORMKIT_LAYOUT_CHANNELS_FIRST, dtype, 1, &floats);
  Buffer out = MakeBuffer(floats, 2);
  Buffer bias = MakeBuffer(D, 3), gamma = MakeBuffer(D, 4), beta = MakeBuffer(D, 5);
  normkit_context* ctx = nullptr;
  normkit_context_create(threads, &ctx);
  const auto layout = NORMKIT_LAYOUT_CHANNELS_FIRST;
  const auto second = [&](Buffer& b) { return reinterpret_cast<char*>(b.get()) + n * elem; };
  normkit_tensor xt = Desc(in.get(), layout, {rows, D}), rt = Desc(second(in), layout, {rows, D});
  normkit_tensor yt = Desc(out.get(), layout, {rows, D}), ht = Desc(second(out), layout, {rows, D});
  for (auto* t : {&xt, &rt, &yt, &ht}) t->dtype = dtype;
  const auto run_op = [&] {
    const normkit_status st =
        rms ? normkit_add_rms_norm(ctx, &xt, &rt, bias.get(), gamma.get(), 1e-5f, &yt, &ht, nullptr)
            : normkit_add_layer_norm(ctx, &xt, &rt, bias.get(), gamma.get(), beta.get(), 1e-5f, &yt,
                                     &ht, nullptr, nullptr);
    if (st != NORMKIT_SUCCESS) std::abort();
  };
  RunAgainstCopy(state, run_op, threads, in.get(), floats, false, 4 * n * elem, out.get());
  normkit_context_destroy(ctx);
}

int RegisterAll() {
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  std::vector<int> thread_counts = {1};
  if (all > 1) thread_counts.push_back(all);
  const auto layouts = {NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_LAYOUT_CHANNELS_LAST};
  struct Shape {
    std::string group;
    std::vector<int64_t> shape;
    int64_t groups;
  };
  const std::vector<Shape> group_shapes = {{"seed002", {128, 256, 28, 28}, 32},
                                           {"seed002", {32, 512, 56, 56}, 32},
                                           {"edge", {1, 64, 56, 56}, 32},
                                           {"edge", {1, 256, 14, 14}, 32},
                                           {"edge", {1, 32, 112, 112}, 8},
                                           // Diffusion U-Net blocks at batch 1 (channels-last
                                           // samples of few positions and wide rows).
                                           {"unet", {1, 1280, 8, 8}, 32},
                                           {"unet", {1, 640, 16, 16}, 32}};
  for (const auto& s : group_shapes)
    for (auto layout : layouts)
      for (int32_t act : {NORMKIT_ACTIVATION_NONE, NORMKIT_ACTIVATION_SILU})
        for (int t : thread_counts)
          Register(s.group, Norm::kGroup, s.shape, s.groups, layout, act, false, t);
  for (const auto& s : group_shapes)
    for (auto layout : layouts)
      for (int t : thread_counts)
        Register(s.group, Norm::kGroup, s.shape, s.groups, layout, NORMKIT_ACTIVATION_NONE, true,
                 t);
  for (auto layout : layouts)
    for (int t : thread_counts)
      Register("instance", Norm::kInstance, {8, 64, 128, 128}, 0, layout, NORMKIT_ACTIVATION_NONE,
               false, t);
  // Instance norm on small planes (a group a plane: the batched channels-first path).
  for (const auto& shape :
       {std::vector<int64_t>{1, 256, 14, 14}, std::vector<int64_t>{1, 1024, 7, 7}})
    for (auto layout : layouts)
      for (int t : thread_counts)
        Register("edge", Norm::kInstance, shape, 0, layout, NORMKIT_ACTIVATION_NONE, false, t);
  // [4096, 768] and [2048, 4096] (12 and 32 MiB: a BERT-base and a 7B-model prefill),
  // [4096, 128]: short rows (per-head QK norm), whose statistics go in batches; then
  // decode-sized calls (one to 32 tokens).
  for (Norm op : {Norm::kLayerRows, Norm::kRmsRows})
    for (const auto& shape : {std::vector<int64_t>{4096, 768}, std::vector<int64_t>{2048, 4096},
                              std::vector<int64_t>{4096, 128}, std::vector<int64_t>{1, 4096},
                              std::vector<int64_t>{8, 4096}, std::vector<int64_t>{32, 4096},
                              std::vector<int64_t>{1, 768}})
      for (int t : thread_counts)
        Register("rows", op, shape, 0, NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_ACTIVATION_NONE,
                 false, t);
  // Residual add + norm at the row-norm shapes and decode-sized calls; in half, also
  // [8192, 4096] (64 MiB an array in bfloat16): from memory.
  using Rows = std::vector<std::pair<int64_t, int64_t>>;
  const Rows add_shapes = {{4096, 768}, {2048, 4096}, {1, 4096}, {8, 4096}, {32, 4096}, {1, 768}};
  const Rows half_add_shapes = {{4096, 768}, {8192, 4096}, {1, 4096}};
  for (int32_t dtype : {NORMKIT_DTYPE_FLOAT32, NORMKIT_DTYPE_BFLOAT16, NORMKIT_DTYPE_FLOAT16})
    for (bool rms : {false, true})
      for (const auto& [rows, D] : dtype == NORMKIT_DTYPE_FLOAT32 ? add_shapes : half_add_shapes)
        for (int t : thread_counts) {
          const std::string name = std::string("rows/") +
                                   (rms ? "add_rms_norm/" : "add_layer_norm/") +
                                   (dtype == NORMKIT_DTYPE_FLOAT32    ? ""
                                    : dtype == NORMKIT_DTYPE_BFLOAT16 ? "bf16/"
                                                                      : "f16/") +
                                   std::to_string(rows) + "x" + std::to_string(D) +
                                   "/outofplace/threads:" + std::to_string(t);
          RegisterTimed(name,
                        [=](benchmark::State& st) { RunAddNorm(st, rms, rows, D, t, dtype); });
        }
  // Half rows, and [16384, 4096] (128 MiB in bfloat16): from memory.
  for (int32_t dtype : {NORMKIT_DTYPE_BFLOAT16, NORMKIT_DTYPE_FLOAT16})
    for (Norm op : {Norm::kLayerRows, Norm::kRmsRows})
      for (const auto& shape : {std::vector<int64_t>{4096, 768}, std::vector<int64_t>{4096, 128},
                                std::vector<int64_t>{16384, 4096}})
        for (int t : thread_counts)
          Register("rows", op, shape, 0, NORMKIT_LAYOUT_CHANNELS_FIRST, NORMKIT_ACTIVATION_NONE,
                   false, t, dtype);
  // Half group norm: the seed shapes (51 and 103 MB in bfloat16) and an edge shape.
  for (int32_t dtype : {NORMKIT_DTYPE_BFLOAT16, NORMKIT_DTYPE_FLOAT16})
    for (const auto& s : {group_shapes[0], group_shapes[1], group_shapes[3]})
      for (auto layout : layouts)
        for (int32_t act : {NORMKIT_ACTIVATION_NONE, NORMKIT_ACTIVATION_SILU})
          for (int t : thread_counts)
            Register(s.group, Norm::kGroup, s.shape, s.groups, layout, act, false, t, dtype);
  return 0;
}
const int registered = RegisterAll();

}  // namespace
}  // namespace normkit_bench
