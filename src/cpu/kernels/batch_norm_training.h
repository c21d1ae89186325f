// SPDX-License-Identifier: Apache-2.0
// Kernels of batch norm in training mode: the forward's channels-last statistics and output
// for channel counts that divide a vector (the other shapes take the group-norm kernels),
// and the backward's per-channel sums of dy and dy * (x - mean) over a block and the input
// gradient from them. No threads here: src/cpu/batch_norm_training.cc and
// src/cpu/batch_norm_backward.cc split the work and merge the block results in a fixed
// order.
//
// Tensors are read (and dx, y written) in their storage: float32, bfloat16 or float16, each
// element widened exactly to float as it is loaded and every result rounded to nearest
// even when stored. A half call gets the bits of the float32 call on its widened values.
// The backward's x, dy and dx share one storage.
#ifndef NORMKIT_CPU_KERNELS_BATCH_NORM_TRAINING_H_
#define NORMKIT_CPU_KERNELS_BATCH_NORM_TRAINING_H_

#include <cstdint>

#include "core/moments.h"
#include "cpu/kernels/storage.h"

namespace normkit {
namespace kernels {

// Whether the SIMD target in use walks a channels-last block of `channels` channels as one
// flat span whose lane l is always channel l % channels (fewer channels than lanes, a
// divisor of them: 1, 2, 4 on AVX2). FlatColumnMoments and ApplyFlatNorm need it.
bool FlatChannels(int64_t channels);

// The moments (count, mean, m2) of each channel of a channels-last block of `rows` rows
// of `channels` values, into out[0, channels): two passes over the block (its sums, then
// shifted sums about each channel's float mean), float runs of at most 64 terms a lane
// carried in double. The fast statistics' limits: a sum or square past FLT_MAX gives a
// non-finite mean or m2, for the caller's exact fallback.
void FlatColumnMoments(const void* x, Storage x_storage, int64_t rows, int64_t channels,
                       Moments* out);

// y = (x - mean[c]) * scale[c] + shift[c] over `rows` channels-last rows of `channels`
// values (FlatChannels). y may be x.
void ApplyFlatNorm(const void* x, Storage x_storage, void* y, Storage y_storage, int64_t rows,
                   int64_t channels, const float* mean, const float* scale, const float* shift);

// Channels-first planes of `plane` values (a few: 128x1024x16) in channel blocks: the
// width of a block, in values, whole planes and whole vectors of the SIMD target in use
// (at most 8 vectors), or 0 when no such block exists (then the planes go one by one).
int64_t ShortPlaneBlockWidth(int64_t plane);

// The moments of each channel of a block of channels-first x: `rows` samples, `width`
// values of each (width / plane channels, width <= ShortPlaneBlockWidth(plane), a multiple
// of plane), samples row_stride values apart; into out[0, width / plane). Shifted sums
// about the mean of the channel's first 16 values, float runs of at most 64 terms a lane
// carried in double; a second pass about the float mean the first found where that pivot
// was too far from it (non-finite sums: a non-finite mean or m2, for the caller's exact
// fallback). The block should fit L2 (a second pass reads it from there).
void ShortPlaneBlockMoments(const void* x, Storage x_storage, int64_t rows, int64_t row_stride,
                            int64_t width, int64_t plane, Moments* out);

// The sums of one channel over a block: sum(dy) and sum(dy * (x - mean)) (float runs of
// at most 64 terms a lane, carried in double), and max |dy|, max |x - mean| (NaN-blind:
// a NaN shows in the sums), which bound the float apply's intermediates.
struct GradSums {
  double sum_dy = 0.0;
  double sum_dy_xmu = 0.0;
  float max_abs_dy = 0.0f;
  float max_abs_xmu = 0.0f;
};

// Adds block b to a (the caller merges blocks in memory order).
inline void MergeGradSums(GradSums& a, const GradSums& b) {
  a.sum_dy += b.sum_dy;
  a.sum_dy_xmu += b.sum_dy_xmu;
  a.max_abs_dy = b.max_abs_dy > a.max_abs_dy ? b.max_abs_dy : a.max_abs_dy;
  a.max_abs_xmu = b.max_abs_xmu > a.max_abs_xmu ? b.max_abs_xmu : a.max_abs_xmu;
}

// The floats of the widest vector of any SIMD target (SVE's 2048 bits).
constexpr int64_t kWidestVectorFloats = 64;

// Per-channel arrays of the channels-last kernels hold this many floats: the channels,
// then zeros (whole vectors of every SIMD target).
constexpr int64_t PaddedChannels(int64_t channels) {
  return (channels + kWidestVectorFloats - 1) / kWidestVectorFloats * kWidestVectorFloats;
}

// The sums of one channel's span x[0, n), dy[0, n) about `mean` (channels-first).
GradSums SpanGradSums(const void* x, const void* dy, Storage storage, int64_t n, float mean);

// The sums of `count` whole planes of n elements each, plane j at x + j * n, dy + j * n
// about mean[(first_channel + j) % channels], into out[j]: SpanGradSums of each plane.
void PlaneGradSums(const void* x, const void* dy, Storage storage, int64_t n, int64_t count,
                   const float* mean, int64_t channels, int64_t first_channel, GradSums* out);

// The sums of each channel of a block of channels-first x and dy (rows, row_stride, width
// and plane as ShortPlaneBlockMoments) about mean[c] for channel c of the block, into
// out[0, width / plane): float runs of at most 64 terms a lane carried in double.
void ShortPlaneBlockGradSums(const void* x, const void* dy, Storage storage, int64_t rows,
                             int64_t row_stride, int64_t width, int64_t plane, const float* mean,
                             GradSums* out);

// The sums of each channel of a channels-last block of `rows` rows of `channels` values
// (row r, channel c at r * channels + c) about mean[c], into out[0, channels). mean:
// PaddedChannels(channels) floats; scratch: 4 * PaddedChannels(channels) floats, 64-byte
// aligned.
void ColumnGradSums(const void* x, const void* dy, Storage storage, int64_t rows, int64_t channels,
                    const float* mean, float* scratch, GradSums* out);

// Per-channel coefficients of the input gradient:
//   dx = p * ((dy - mean_dy) - (x - mean) * rstd * mean_dy_xhat)
// in float, p = gamma * rstd, mean_dy = sum(dy) / n, mean_dy_xhat = rstd * sum(dy * (x -
// mean)) / n. The caller has checked that no intermediate can overflow.
struct GradCoefficients {
  const float* mean;
  const float* rstd;
  const float* mean_dy;
  const float* mean_dy_xhat;
  const float* p;
};

// dx[0, n) of one channel's span, with the coefficients at index `channel` of k. dx may be
// x or dy.
void ApplyGradSpan(const void* x, const void* dy, void* dx, Storage storage, int64_t n,
                   const GradCoefficients& k, int64_t channel);

// dx of `count` planes of n elements each (plane j at x + j * n), plane j with the
// coefficients of channel first_channel + j: ApplyGradSpan of each plane.
void ApplyGradPlanes(const void* x, const void* dy, void* dx, Storage storage, int64_t n,
                     int64_t count, const GradCoefficients& k, int64_t first_channel);

// dx of `rows` channels-last rows of `channels` values, channel c's coefficients at index
// c of k (arrays of PaddedChannels(channels) floats). dx may be x or dy.
void ApplyGradRows(const void* x, const void* dy, void* dx, Storage storage, int64_t rows,
                   int64_t channels, const GradCoefficients& k);

}  // namespace kernels
}  // namespace normkit

#endif  // NORMKIT_CPU_KERNELS_BATCH_NORM_TRAINING_H_
