// SPDX-License-Identifier: Apache-2.0
// CPU affine: plans the layout strategy and the blocks, then runs the kernels in parallel.
#ifndef NORMKIT_CPU_AFFINE_H_
#define NORMKIT_CPU_AFFINE_H_

#include "core/context.h"
#include "core/tensor.h"
#include "cpu/fold.h"
#include "cpu/memory_plan.h"

namespace normkit {
namespace cpu {

struct AffineParams {
  const float* scale = nullptr;  // C or N * C floats, or null (scale 1)
  const float* shift = nullptr;  // same count as scale, or null (shift 0)
  bool per_sample = false;       // N * C (row-major) instead of C
  // Batch norm: scale and shift are not given but folded from these (per channel)
  // by each range, for the channels it reads, on the thread that reads them.
  const BatchNormParams* fold_from = nullptr;
  // With fold_from: y = (x - mean) * scale + beta instead of the folded x * scale + shift
  // (running means far from the spread, whose digits the folded shift would lose).
  bool centered = false;
  // Given parameters (per channel, with scale and shift): y = (x - center) * scale + shift.
  const float* center = nullptr;
};

// y = x * scale + shift (or (x - center) * scale + shift) on validated CPU tensors of the
// same shape, each float32, bfloat16 or float16 (math in float32, y rounded to nearest
// even); y may be x (same dtype). Throws std::bad_alloc before writing anything if scratch fails.
void Affine(const normkit_context& context, const TensorView& x, const TensorView& y,
            const AffineParams& params);

// Elements per parallel task: kAffineBlockElems, or for tensors smaller than
// kMinAffineBlocks such blocks, numel / kMinAffineBlocks but not under
// kMinAffineBlockElems. Fixed by the shape, so task boundaries never depend on the
// thread count (an affine's bits would not anyway: each element is one FMA).
constexpr int64_t kAffineBlockElems = int64_t{1} << 15;
constexpr int64_t kMinAffineBlocks = 64;
constexpr int64_t kMinAffineBlockElems = int64_t{1} << 10;

// Largest parameter row (floats) built for channels-first tensors with tiny planes.
constexpr int64_t kMaxPeriodicRow = 4096;

// Channels-last tensors up to this size count as cache-resident (no two halves in
// step) and apply each parameter vector to several rows, out of place only from
// kAffineRowsMinBytes up. Measured on Zen 4: 0.8 -> 0.95 of memcpy at 1-4 MiB; at 8 MiB
// and beyond, where DRAM sets the pace, the interleaved rows defeat the prefetcher:
// 1.6 -> 0.85. On Zen 5 the rows made no difference at 1.6-3.2 MiB; within L2 they
// lost out of place (same-process A/B, one thread, the plain loop's time over the
// rows': 1x1024x7x7 0.79, 1x320x16x16 0.77, 1x512x14x14 0.85, 1x2048x7x7 0.88) and
// won in place (1x1024x7x7: 0.93 of the flat scale with them, 0.75 without).
constexpr int64_t kAffineRowsMaxBytes = int64_t{4} << 20;
constexpr int64_t kAffineRowsMinBytes = int64_t{1} << 20;

// Longest parameter period (floats) chosen as lcm(C, lanes) for channels-last rows.
constexpr int64_t kMaxLcmPeriod = 4096;

// Parameter rows up to this many floats (every lcm period and tiny-plane row) are
// built on the stack of each thread that reads them.
constexpr int64_t kLocalRepFloats = kMaxLcmPeriod + 64;

}  // namespace cpu
}  // namespace normkit

#endif  // NORMKIT_CPU_AFFINE_H_
