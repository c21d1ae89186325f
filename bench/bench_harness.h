// SPDX-License-Identifier: Apache-2.0
// Google Benchmark harness of every op's benchmark: times the op and, interleaved in
// the same loop, the copy reference of DESIGN.md over the same bytes and threads, and
// reports both bandwidths and their ratio.
#ifndef NORMKIT_BENCH_BENCH_HARNESS_H_
#define NORMKIT_BENCH_BENCH_HARNESS_H_

#include <benchmark/benchmark.h>

#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"

namespace normkit_bench {

// `bytes`: what the op must move (x read once, y written once). The reference moves
// `ref_elems` floats: memcpy out of place (and ratio_to_loop: a plain vector loop
// y = x + 0), x = a*x + b in place. `y`: where the out-of-place references write, the
// op's own output when it has ref_elems floats (nullptr: a buffer of their own). With
// read_elems > 0, also ratio_to_read: the time of a plain parallel sum over read_src,
// over the op's.
//
// Why the op's y: with a buffer of their own, the op's y was the coldest destination
// of the three (memcpy wrote where the loop had just written, the loop where memcpy
// had), which on cache-sized tensors charged the op for it: 1x64x56x56 affine, 2
// threads, read 0.63 of memcpy that way against 0.83 when memcpy, a plain loop and the
// op alternate on one x and one y (2026-11-27). Writing y, each finds x and y where the
// one before left them.
inline void RunAgainstCopy(benchmark::State& state, const std::function<void()>& run_op,
                           int threads, const float* x, int64_t ref_elems, bool in_place,
                           int64_t bytes, float* y = nullptr, const float* read_src = nullptr,
                           int64_t read_elems = 0,
                           const std::function<void()>& run_bound = nullptr) {
  Buffer ref = MakeBuffer(ref_elems, 3);
  float* const dst = in_place || !y ? ref.get() : y;
  const auto run_ref = [&] {
    if (in_place) {
      ParallelScaleInPlace(threads, ref.get(), ref_elems);
    } else {
      ParallelCopy(threads, dst, x, ref_elems);
    }
  };
  const auto run_loop = [&] { ParallelLoopCopy(threads, dst, x, ref_elems); };
  volatile float sink = 0;
  const auto run_read = [&] { sink = sink + ParallelReadSum(threads, read_src, read_elems); };
  run_op();
  run_ref();
  double op_total = 0, ref_total = 0, read_total = 0, loop_total = 0, bound_total = 0;
  for (auto _ : state) {
    const double t_op = Seconds(run_op);
    ref_total += Seconds(run_ref);
    if (!in_place) loop_total += Seconds(run_loop);
    if (read_elems > 0) read_total += Seconds(run_read);
    if (run_bound) bound_total += Seconds(run_bound);
    op_total += t_op;
    state.SetIterationTime(t_op);
  }
  // Out of place, also the time of a plain vector loop y = x + 0 over the op's: what
  // memcpy gains over any loop of plain stores (ParallelLoopCopy) is not in it.
  if (!in_place) state.counters["ratio_to_loop"] = loop_total / op_total;
  // And that loop's own ratio to memcpy: the most any kernel of plain stores can read
  // in ratio_to_ref on this shape (0.72-0.78 one thread at 600-800 KiB on Zen 5, where
  // memcpy's rep movsb writes lines without reading them first).
  if (!in_place) state.counters["loop_ratio_to_ref"] = ref_total / loop_total;
  // Optional second reference: a plain read of read_elems floats at read_src (for the
  // shift-sum forward, x: at 1.0 the op runs as fast as reading its input).
  if (read_elems > 0) state.counters["ratio_to_read"] = read_total / op_total;
  // Optional memory bound of the op: plain loops with its passes' traffic and no
  // arithmetic (batch norm training: x read, then x read and y written), in the same run.
  if (run_bound) state.counters["ratio_to_bound"] = bound_total / op_total;
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["GB/s"] = static_cast<double>(bytes) * state.iterations() / op_total / 1e9;
  state.counters["ref_GB/s"] = static_cast<double>(bytes) * state.iterations() / ref_total / 1e9;
  state.counters["ratio_to_ref"] = ref_total / op_total;
}

inline std::string ShapeName(const std::vector<int64_t>& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "x" : "") + std::to_string(s[i]);
  return r;
}

inline void RegisterTimed(const std::string& name, std::function<void(benchmark::State&)> fn) {
  benchmark::RegisterBenchmark(name.c_str(), [fn](benchmark::State& st) { fn(st); })
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond)
      ->MinTime(0.2);
}

}  // namespace normkit_bench

#endif  // NORMKIT_BENCH_BENCH_HARNESS_H_
