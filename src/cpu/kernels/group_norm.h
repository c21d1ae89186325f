// SPDX-License-Identifier: Apache-2.0
// Kernels of the normalization family (group / instance / layer / RMS norm): moments of
// cache-resident blocks in double, and the fused normalize-affine-activation pass.
// No threads here: src/cpu/group_norm.cc splits the work and merges the moments.
#ifndef NORMKIT_CPU_KERNELS_GROUP_NORM_H_
#define NORMKIT_CPU_KERNELS_GROUP_NORM_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/moments.h"
#include "cpu/kernels/storage.h"

namespace normkit {
namespace kernels {

// Activation fused after the affine of a normalization.
enum class Activation : int { kNone = 0, kRelu = 1, kSilu = 2 };

using ::normkit::FromShiftedSums;
using ::normkit::MergeMoments;
using ::normkit::Moments;
using ::normkit::PivotTooFar;

// SpanMoments' pivot is the mean of kPivotVectors vectors of the span (spans of
// at least that many vectors) loaded at these offsets.
constexpr size_t kPivotVectors = 4;
inline int64_t SampledSpanOffset(size_t j, int64_t n) {
  return static_cast<int64_t>(j) * (n / static_cast<int64_t>(kPivotVectors));
}

// Moments of x[0, n) (the span should be cache-resident) from shifted sums
// s1 = sum(x - p), s2 = sum((x - p)^2) about a pivot p sampled from the span,
// float within short runs and carried in double; a second pass about the mean the
// first found when the pivot was too far from it (PivotTooFar). The order of every
// sum depends only on n, the data and the SIMD target.
//
// The group-norm kernels read x in its storage (x_storage: float32, bfloat16 or float16),
// each element widened exactly to float as it is loaded: a half x gets the bits of the
// float32 call on its values, with no float copy of it made. Their `const float*`
// overloads are the float32 calls.
Moments SpanMoments(const void* x, Storage x_storage, int64_t n);
inline Moments SpanMoments(const float* x, int64_t n) {
  return SpanMoments(x, Storage::kFloat32, n);
}

// As exact as SpanMoments but not its bits (four float chains where it has two): the
// statistics of a [rows, D] layer norm row. Its bits depend only on n, the data and
// the SIMD target.
Moments RowMoments(const void* x, Storage x_storage, int64_t n);
inline Moments RowMoments(const float* x, int64_t n) {
  return RowMoments(x, Storage::kFloat32, n);
}

// 1 / sqrt(variance + eps) of a normalization, the variance biased (m2 / count).
inline double ReciprocalStd(const Moments& m, float eps) {
  return 1.0 / std::sqrt(m.m2 / m.count + static_cast<double>(eps));
}

// The mean of span k = x[k * n, (k + 1) * n) and 1 / sqrt(variance + eps), for
// k < count: the statistics of the batched group / instance norm (short consecutive
// spans). Spans of one vector to 64 vectors are taken a vector's worth at a time, span
// j in lane j, about a pivot at their mean: as exact as SpanMoments but not its bits.
// Other lengths: SpanMoments and ReciprocalStd. A span's bits depend only on its data,
// n and the SIMD target, not on count or on where the span is in x.
void SpanMeanRstdEach(const void* x, Storage x_storage, int64_t n, int64_t count, float eps,
                      double* mean, double* rstd);
inline void SpanMeanRstdEach(const float* x, int64_t n, int64_t count, float eps, double* mean,
                             double* rstd) {
  SpanMeanRstdEach(x, Storage::kFloat32, n, count, eps, mean, rstd);
}

// 1 / sqrt(mean(x^2) + eps) of span k = x[k * n, (k + 1) * n), for k < count (RMS
// norm of short rows): spans of one to 32 vectors a vector's worth at a time, span j
// in lane j (float sums, then double; not SpanSumSquares' bits); other lengths from
// SpanSumSquares. A span's bits depend only on its data, n and the SIMD target.
void SpanRmsEach(const void* x, Storage x_storage, int64_t n, int64_t count, float eps,
                 double* rstd);
inline void SpanRmsEach(const float* x, int64_t n, int64_t count, float eps, double* rstd) {
  SpanRmsEach(x, Storage::kFloat32, n, count, eps, rstd);
}

// The apply pass's parameters of channels that are groups of their own (instance
// norm), for c < count: mean_f[c] = the float nearest mean[c],
// scale[c] = gamma[c] * rstd[c], shift[c] = beta[c] - (mean[c] - mean_f[c]) * scale[c]
// (ApplyNormPlanes' parameters), computed in double and rounded to float. gamma and beta
// may be null (1 and 0). The outputs must not overlap the inputs.
void ChannelParametersEach(const double* mean, const double* rstd, const float* gamma,
                           const float* beta, int64_t count, float* mean_f, float* scale,
                           float* shift);

// Sum of x[i]^2 over x[0, n), carried in double (RMS norm).
double SpanSumSquares(const void* x, Storage x_storage, int64_t n);
inline double SpanSumSquares(const float* x, int64_t n) {
  return SpanSumSquares(x, Storage::kFloat32, n);
}

// The rows a block's statistics pivots are sampled from: `samples` rows spread evenly
// over the block, the first one included. Spread rather than consecutive: neighbouring
// positions of an image are alike, and a pivot more than a standard deviation from the
// mean costs the block a second pass.
inline int64_t SampledRow(int64_t j, int64_t samples, int64_t rows) {
  return j * rows / samples;
}

// Scratch of a channels-last block's statistics: pivot (channels floats), run (2 *
// channels floats: the row streams' float sums), s1 and s2 (channels doubles each).
struct ColumnScratch {
  float* pivot;
  float* run;
  double* s1;
  double* s2;
};

// Moments of each of `groups` groups of a channels-last block of `rows` rows of `channels`
// floats (out[g]): per-channel shifted sums about a pivot per group, the mean of its
// channels in `samples` sampled rows (SampledRow), carried in double and added up per
// group; groups whose pivot was too far from their mean (PivotTooFar) are summed again
// about it. from_memory: x comes from DRAM rather than cache, which picks the order rows
// are read in (the sums are the same either way only up to rounding: the choice must
// depend on the shape alone). One call does the whole block.
void ColumnBlockMoments(const void* x, Storage x_storage, int64_t rows, int64_t channels,
                        int64_t groups, int64_t samples, bool from_memory,
                        const ColumnScratch& scratch, Moments* out);
inline void ColumnBlockMoments(const float* x, int64_t rows, int64_t channels, int64_t groups,
                               int64_t samples, bool from_memory, const ColumnScratch& scratch,
                               Moments* out) {
  ColumnBlockMoments(x, Storage::kFloat32, rows, channels, groups, samples, from_memory, scratch,
                     out);
}

// Channels-last instance norm of a block of `rows` rows of `channels` floats: mean[c]
// and rstd[c] (ReciprocalStd) of each channel's column, from shifted sums about the
// mean of its values in `samples` sampled rows (SampledRow), with a second pass for
// the channels whose pivot was too far from their mean. The same bits as
// ColumnBlockMoments with one channel a group. Scratch: pivot (channels floats), s1 and s2
// (channels doubles each), scratch (2 * channels floats).
void ColumnMeanRstd(const void* x, Storage x_storage, int64_t rows, int64_t channels,
                    int64_t samples, float eps, bool from_memory, float* pivot, double* s1,
                    double* s2, float* scratch, double* mean, double* rstd);

// `stream`: non-temporal stores (outputs larger than the last-level cache); each call
// ends with the fence that orders them. y is stored as y_storage: half outputs are the
// float results rounded to nearest even (made a cache-resident chunk at a time).
//
// Channels-first: y = act((x - mean[j]) * scale[j] + shift[j]) over n elements of
// consecutive planes of `plane` elements, the first element at `offset` in its
// plane; j counts planes from that first one. mean[j] is the float nearest the exact
// mean m of plane j's group, scale[j] = gamma * rstd and
// shift[j] = beta - (m - mean[j]) * scale[j]. Subtracting the mean first keeps the result
// exact when the mean is large next to the standard deviation; the folded form
// x * scale + (beta - m * scale) would lose those digits.
void ApplyNormPlanes(const void* x, Storage x_storage, void* y, Storage y_storage, int64_t n,
                     int64_t plane, int64_t offset, const float* mean, const float* scale,
                     const float* shift, Activation act, bool stream);
inline void ApplyNormPlanes(const float* x, void* y, Storage y_storage, int64_t n, int64_t plane,
                            int64_t offset, const float* mean, const float* scale,
                            const float* shift, Activation act, bool stream) {
  ApplyNormPlanes(x, Storage::kFloat32, y, y_storage, n, plane, offset, mean, scale, shift, act,
                  stream);
}

// ApplyNormPlanes over planes of one group: one mean for all of them (the same bits as
// a mean array of copies). The per-plane mean's loads and splices measured 1-2% of
// a fused group norm (1x64x56x56 G=32, one thread).
void ApplyNormGroupPlanes(const void* x, Storage x_storage, void* y, Storage y_storage, int64_t n,
                          int64_t plane, int64_t offset, float mean, const float* scale,
                          const float* shift, Activation act, bool stream);
inline void ApplyNormGroupPlanes(const float* x, void* y, Storage y_storage, int64_t n,
                                 int64_t plane, int64_t offset, float mean, const float* scale,
                                 const float* shift, Activation act, bool stream) {
  ApplyNormGroupPlanes(x, Storage::kFloat32, y, y_storage, n, plane, offset, mean, scale, shift,
                       act, stream);
}

// ApplyNormGroupPlanes (the same output bits) over n elements of one group, and the
// moments of the n elements at `next` (the same part of the next group, not
// overlapping y), read while y is written: SpanMoments(next, n) to the bit, on every
// SIMD target. Any alignment of y; `stream` takes effect only where y is on a vector
// boundary (streaming stores from elsewhere would need a peel, which would move the
// vectors of `next` off SpanMoments' grid).
Moments ApplyNormPlanesThenMoments(const void* x, Storage x_storage, float* y, int64_t n,
                                   int64_t plane, int64_t offset, float mean, const float* scale,
                                   const float* shift, Activation act, bool stream,
                                   const void* next);
inline Moments ApplyNormPlanesThenMoments(const float* x, float* y, int64_t n, int64_t plane,
                                          int64_t offset, float mean, const float* scale,
                                          const float* shift, Activation act, bool stream,
                                          const float* next) {
  return ApplyNormPlanesThenMoments(x, Storage::kFloat32, y, n, plane, offset, mean, scale, shift,
                                    act, stream, next);
}

// Channels-last rows of `channels` floats, parameters per channel (rows of `channels`).
struct NormRows {
  const float* mean;
  const float* scale;
  const float* shift;
};
// from_memory: x comes from DRAM rather than cache (picks the order rows are read in).
void ApplyNormRows(const void* x, Storage x_storage, void* y, Storage y_storage, int64_t rows,
                   int64_t channels, const NormRows& p, Activation act, bool stream,
                   bool from_memory);
inline void ApplyNormRows(const float* x, void* y, Storage y_storage, int64_t rows,
                          int64_t channels, const NormRows& p, Activation act, bool stream,
                          bool from_memory) {
  ApplyNormRows(x, Storage::kFloat32, y, y_storage, rows, channels, p, act, stream, from_memory);
}

// One row of a [rows, D] layer / RMS norm:
//   y[d] = ((x[d] - mean) * rstd + offset) * gamma[d] + beta[d]
// where mean is the float nearest the row's mean m and offset = -(m - mean) * rstd.
// gamma and beta may be null (1 and 0); RMS norm passes mean = offset = 0. y is stored as
// y_storage (half: the float result rounded to nearest even); `stream`: non-temporal
// stores, fenced before the call returns.
void ApplyRowNorm(const void* x, Storage x_storage, void* y, Storage y_storage, int64_t n,
                  float mean, float rstd, float offset, const float* gamma, const float* beta,
                  bool stream);

// Rows [0, rows) of a [rows, D] layer / RMS norm, each as ApplyRowNorm with its own
// mean[r], rstd[r] and offset[r]: row r at x + r * D and y + r * D, walked in column chunks
// across the rows (gamma and beta stay in L1). next: null, or the next_rows rows (of x's
// storage, D apart) to be read after these, prefetched into L2 as these are written.
struct RowScales {
  const float* mean;
  const float* rstd;
  const float* offset;
};
void ApplyRowNorms(const void* x, Storage x_storage, void* y, Storage y_storage, int64_t rows,
                   int64_t D, const RowScales& s, const float* gamma, const float* beta,
                   bool stream, const void* next = nullptr, int64_t next_rows = 0);

// out[i] = x[i] widened to float for i < n, x stored as `storage`: the shift-sum family's
// half chunks (its row kernels compute in their stored type). The norms load half x
// themselves.
void WidenToFloat(const void* x, Storage storage, int64_t n, float* out);

// y[i] = x[i] stored as `storage` for i < n (half: rounded to nearest even); `stream`:
// non-temporal stores, fenced by the caller (hwy::FlushStream). The shift-sum family's
// half outputs, computed in float.
void NarrowFromFloat(const float* x, int64_t n, void* y, Storage storage, bool stream);

// h[i] = (x[i] + r[i]) + bias[i] for i < n (bias null: x[i] + r[i]), each add rounded to
// float in that order, h stored as x and r are (`storage`; half: that sum rounded to
// nearest even): the residual add of the fused add + norm. h may be x or r.
void ResidualAdd(const void* x, const void* r, Storage storage, const float* bias, int64_t n,
                 void* h);

// y[i] = x[i] for i < n, both stored as `storage`; `stream`: non-temporal stores, fenced
// by the caller. The fused add + norm's h, made in cache, streamed to the caller's array.
void CopyElements(const void* x, Storage storage, int64_t n, void* y, bool stream);

}  // namespace kernels
}  // namespace normkit

#endif  // NORMKIT_CPU_KERNELS_GROUP_NORM_H_
