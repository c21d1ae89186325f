// SPDX-License-Identifier: Apache-2.0
// Affine kernels: y = x * scale + shift (or (x - center) * scale + shift) over a flat range
// of a dense tensor stored as float32, bfloat16 or float16 (x and y each; the math in
// float32, parameters float32).
// No threads here: callers split [0, numel) into ranges and call these per range.
#ifndef NORMKIT_CPU_KERNELS_AFFINE_H_
#define NORMKIT_CPU_KERNELS_AFFINE_H_

#include <cstddef>
#include <cstdint>

#include "cpu/kernels/storage.h"

namespace normkit {
namespace kernels {

// Which terms an affine applies; absent terms are skipped, not applied as 1 / 0,
// so scale-only keeps -0.0 and shift-only never multiplies. kCenterScaleShift:
// (x - center) * scale + shift (batch norm with running means far from the spread).
enum class AffineTerms : int { kScaleShift, kScale, kShift, kCopy, kCenterScaleShift };

// Channels-first: the tensor is a sequence of planes of `plane_size` elements,
// plane p using parameter index p % param_count (per channel: param_count = C;
// per sample and channel: param_count = N * C).
struct AffineBroadcastJob {
  const void* x;  // elements of x_storage
  void* y;        // elements of y_storage
  int64_t plane_size;
  int64_t param_count;
  const float* scale;  // may be null when terms excludes it
  const float* shift;
  AffineTerms terms;
  bool stream;       // non-temporal stores for the aligned body (outputs beyond the LLC)
  int64_t numel;     // of the whole tensor (ranges are parts of it): picks the plane walk
  bool from_memory;  // x larger than the last-level cache: picks the loop within a plane
  const float* center = nullptr;  // kCenterScaleShift only, as scale
  Storage x_storage = Storage::kFloat32;
  Storage y_storage = Storage::kFloat32;
};

// Periodic parameters: element i of sample n uses rep[n][(i - n * sample_elems) % period],
// where each rep row holds period + AffineLanes() values and period >= AffineLanes(),
// so a vector of parameters is always one unaligned load. Channels-last uses a period
// that is a multiple of C; small channels-first planes a multiple of C * plane.
struct AffinePeriodicJob {
  const void* x;         // elements of x_storage
  void* y;               // elements of y_storage
  int64_t sample_elems;  // elements per sample; ranges may span samples
  int64_t period;
  int64_t rep_stride;  // floats between rep rows of consecutive samples (0: shared)
  const float* scale_rep;
  const float* shift_rep;
  AffineTerms terms;
  bool stream;
  // Apply each parameter vector to several rows per load: pays off when x is in
  // cache (loads are then the bottleneck), costs prefetch order when it is not.
  bool rows_per_load;
  bool in_cache = false;     // x fits the caches: no two halves in step
  bool from_memory = false;  // x larger than the last-level cache: picks the loop in a period
  const float* center_rep = nullptr;  // kCenterScaleShift only, as scale_rep
  Storage x_storage = Storage::kFloat32;
  Storage y_storage = Storage::kFloat32;
};

void AffineBroadcast(const AffineBroadcastJob& job, int64_t begin, int64_t end);
void AffinePeriodic(const AffinePeriodicJob& job, int64_t begin, int64_t end);

// The same for jobs with half storage on either side (AffineBroadcast / AffinePeriodic
// hand them over): their own translation unit, kernels/affine_half.cc.
void AffineBroadcastHalf(const AffineBroadcastJob& job, int64_t begin, int64_t end);
void AffinePeriodicHalf(const AffinePeriodicJob& job, int64_t begin, int64_t end);

// float32 lanes of the dispatched target's vectors (rep padding and period minimum).
size_t AffineLanes();

// Name of the dispatched SIMD target, e.g. "AVX3".
const char* DispatchedTargetName();

}  // namespace kernels
}  // namespace normkit

#endif  // NORMKIT_CPU_KERNELS_AFFINE_H_
