// SPDX-License-Identifier: Apache-2.0
#include "cpu/batch_norm.h"

#include <algorithm>
#include <cstdint>

#include "core/aligned_array.h"
#include "core/parallel.h"
#include "cpu/affine.h"
#include "cpu/kernels/batch_norm_fold.h"
#include "cpu/kernels/group_norm.h"
#include "cpu/memory_plan.h"

namespace normkit {
namespace cpu {
namespace {

// Elements (channels-first) or about that many (channels-last: whole rows) per task:
// fixed by the shape, and each element's result is one subtraction and one FMA, so
// the split never changes a bit.
constexpr int64_t kCenteredBlockElems = int64_t{1} << 15;

// y = (x - mean[c]) * scale[c] + beta[c], with scale the fold's: the group-norm apply
// pass with the running mean as every channel's mean. For running means far from the
// spread (kernels::kExactFoldRatio), where the folded shift would lose their digits.
void CenteredBatchNorm(const normkit_context& context, const TensorView& x, const TensorView& y,
                       const fold::BatchNormParams& bn) {
  const int64_t N = x.batch, C = x.channels, S = x.spatial;
  const size_t stride = AlignedCount<float>(static_cast<size_t>(C));
  AlignedArray<float> params = AllocateAligned<float>(3 * stride);
  float* mean = params.get();
  float* scale = mean + stride;
  float* shift = scale + stride;
  std::copy(bn.mean, bn.mean + C, mean);
  fold::BatchNormScaleShift(C, bn, scale, shift);  // its shift is not used
  for (int64_t c = 0; c < C; ++c) shift[c] = bn.beta ? bn.beta[c] : 0.0f;

  const auto* xd = static_cast<const float*>(x.data);
  auto* yd = static_cast<float*>(y.data);
  const bool stream = x.data != y.data && y.bytes >= kStreamingStoreBytes;
  const bool from_memory = x.bytes >= kStreamingStoreBytes;
  const normkit_context& ctx = ContextForBytes(context, x.bytes * 2, kMinParallelAffineBytes);
  if (x.channels_last() && S > 1) {
    const int64_t rows = N * S;
    const int64_t rows_per_task = std::max<int64_t>(1, kCenteredBlockElems / C);
    const kernels::NormRows p{mean, scale, shift};
    ParallelFor(ctx, (rows + rows_per_task - 1) / rows_per_task, [&](int64_t t) {
      const int64_t r0 = t * rows_per_task, r1 = std::min(rows, r0 + rows_per_task);
      kernels::ApplyNormRows(xd + r0 * C, yd + r0 * C, r1 - r0, C, p, kernels::Activation::kNone,
                             stream, from_memory);
    });
    return;
  }
  // Channels-first (or one position): tasks never cross samples, so plane j of a task's
  // range is channel (first plane + j).
  const int64_t sample = C * S;
  const int64_t per_sample = (sample + kCenteredBlockElems - 1) / kCenteredBlockElems;
  ParallelFor(ctx, N * per_sample, [&](int64_t t) {
    const int64_t n = t / per_sample;
    const int64_t b = (t % per_sample) * kCenteredBlockElems;
    const int64_t e = std::min(sample, b + kCenteredBlockElems);
    const int64_t c = b / S, off = n * sample + b;
    kernels::ApplyNormPlanes(xd + off, yd + off, e - b, S, b % S, mean + c, scale + c, shift + c,
                             kernels::Activation::kNone, stream);
  });
}

}  // namespace

void BatchNormInference(const normkit_context& context, const TensorView& x, const TensorView& y,
                        const fold::BatchNormParams& bn) {
  if (!kernels::FoldIsExact(bn.mean, bn.var, bn.eps, x.channels)) {
    return CenteredBatchNorm(context, x, y, bn);
  }
  // The affine folds the parameters per range, on the threads that read them.
  AffineParams params;
  params.fold_from = &bn;
  Affine(context, x, y, params);
}

}  // namespace cpu
}  // namespace normkit
