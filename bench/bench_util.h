// SPDX-License-Identifier: Apache-2.0
// Timing helpers shared by the benchmark and the demo: aligned buffers, the same-run
// copy references of DESIGN.md, and median-of-repetitions timing.
#ifndef NORMKIT_BENCH_BENCH_UTIL_H_
#define NORMKIT_BENCH_BENCH_UTIL_H_

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "normkit/normkit.h"
#include "tensor_desc.h"

namespace normkit_bench {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], FreeDeleter>;

// 64-byte aligned, filled (touching every page) with values in [-1, 1).
inline Buffer MakeBuffer(int64_t n, uint32_t seed) {
  const size_t bytes = ((static_cast<size_t>(n) * sizeof(float) + 63) / 64) * 64;
  Buffer b(static_cast<float*>(std::aligned_alloc(64, bytes)));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) b[i] = dist(rng);
  return b;
}

// Bytes of one element of a float32, bfloat16 or float16 tensor.
inline int64_t ElementBytes(int32_t dtype) {
  return dtype == NORMKIT_DTYPE_FLOAT32 ? 4 : 2;
}

// A tensor's buffer of `shape` in `dtype` (its size in floats in *floats), filled with
// values in [-1, 1) (half dtypes: rounded to the format by normkit's own conversion).
inline Buffer MakeTensorBuffer(const std::vector<int64_t>& shape, normkit_layout layout,
                               int32_t dtype, uint32_t seed, int64_t* floats) {
  const int64_t numel = normkit_testing::Numel(shape);
  *floats = (numel * ElementBytes(dtype) + 3) / 4;
  Buffer b = MakeBuffer(*floats, seed);
  if (dtype != NORMKIT_DTYPE_FLOAT32) {
    Buffer values = MakeBuffer(numel, seed);
    normkit_tensor from = normkit_testing::Desc(values.get(), layout, shape);
    normkit_tensor to = normkit_testing::Desc(b.get(), layout, shape);
    to.dtype = dtype;
    normkit_affine(nullptr, &from, nullptr, nullptr, NORMKIT_PARAMS_PER_CHANNEL, &to);
  }
  return b;
}

// Copy reference for out-of-place ops: each thread memcpy's its own contiguous chunk.
inline void ParallelCopy(int threads, float* dst, const float* src, int64_t n) {
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    std::memcpy(dst + begin, src + begin, static_cast<size_t>(end - begin) * sizeof(float));
  }
}

// Second copy reference for out-of-place ops: y = x + 0 as a plain vector loop, each
// thread its chunk (the + 0 keeps the compiler from making it a memcpy call). glibc's
// memcpy copies 400 KiB - 1.6 MiB with rep movsb, which on Zen 5 writes lines without
// reading them first: a vector loop of plain loads and stores took 1.3 times as long
// there (800 KiB, one thread). Every kernel with plain stores pays what this loop pays.
inline void ParallelLoopCopy(int threads, float* dst, const float* src, int64_t n) {
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) dst[i] = src[i] + 0.0f;
  }
}

// dst = a + b as a plain vector loop, each thread its chunk: the second pass of a
// two-input op's memory bound (batch norm's backward).
inline void ParallelLoopAdd(int threads, float* dst, const float* a, const float* b, int64_t n) {
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) dst[i] = a[i] + b[i];
  }
}

// Read-only reference: a sum over a flat array, each thread its chunk. An op that
// mostly reads (the shift-sum forward) is also shown against it: on this VM a plain
// read of x takes 0.80-0.94 of the time memcpy takes for the forward's bytes.
inline float ParallelReadSum(int threads, const float* x, int64_t n) {
  float total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = begin; i < end; ++i) s += x[i];
    total += s;
  }
  return total;
}

// Reference for in-place ops: x = a * x + b over a flat array, each thread its chunk.
inline void ParallelScaleInPlace(int threads, float* x, int64_t n) {
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    float* p = x;
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) p[i] = 0.999f * p[i] + 0.001f;
  }
}

inline double Seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Times `op` and `reference` alternately (so both see the same machine state) and
// returns their median seconds. Repetitions scale with the bytes so small shapes
// are not dominated by timer noise.
struct PairTiming {
  double op_s;
  double ref_s;
};
inline PairTiming TimePair(const std::function<void()>& op, const std::function<void()>& reference,
                           int64_t bytes) {
  op();
  reference();
  int reps = static_cast<int>(
      std::clamp<int64_t>((int64_t{2} << 30) / std::max<int64_t>(bytes, 1), 5, 2000));
  std::vector<double> a, b;
  for (int r = 0; r < reps; ++r) {
    a.push_back(Seconds(op));
    b.push_back(Seconds(reference));
  }
  std::nth_element(a.begin(), a.begin() + a.size() / 2, a.end());
  std::nth_element(b.begin(), b.begin() + b.size() / 2, b.end());
  return {a[a.size() / 2], b[b.size() / 2]};
}

using normkit_testing::Desc;
using normkit_testing::Numel;

}  // namespace normkit_bench

#endif  // NORMKIT_BENCH_BENCH_UTIL_H_
