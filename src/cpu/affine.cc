// SPDX-License-Identifier: Apache-2.0
#include "cpu/affine.h"

#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "cpu/kernels/affine.h"

namespace normkit {
namespace cpu {
namespace {

using kernels::AffineTerms;

AffineTerms TermsOf(const AffineParams& p) {
  if (p.scale && p.shift) return AffineTerms::kScaleShift;
  if (p.scale) return AffineTerms::kScale;
  if (p.shift) return AffineTerms::kShift;
  return AffineTerms::kCopy;
}

// Repeats `values` (base entries, entry j used `repeat` times in a row) into a row of
// period + lanes floats, where period is the smallest multiple of base * repeat that
// is >= lanes: any run of `lanes` parameters is then one contiguous load.
void BuildRepRow(const float* values, int64_t base, int64_t repeat, int64_t period, int64_t lanes,
                 float* row) {
  const int64_t cycle = base * repeat;
  for (int64_t j = 0; j < period + lanes; ++j) row[j] = values[(j % cycle) / repeat];
}

int64_t PeriodFor(int64_t cycle, int64_t lanes) {
  return cycle * ((lanes + cycle - 1) / cycle);
}

void RunBlocks(const normkit_context& context, int64_t numel,
               const std::function<void(int64_t, int64_t)>& range) {
  const int64_t tasks = (numel + kAffineBlockElems - 1) / kAffineBlockElems;
  ParallelFor(context, tasks, [&](int64_t task) {
    const int64_t begin = task * kAffineBlockElems;
    const int64_t end = begin + kAffineBlockElems < numel ? begin + kAffineBlockElems : numel;
    range(begin, end);
  });
}

}  // namespace

void Affine(const normkit_context& context, const TensorView& x, const TensorView& y,
            const AffineParams& params) {
  const auto* xd = static_cast<const float*>(x.data);
  auto* yd = static_cast<float*>(y.data);
  const AffineTerms terms = TermsOf(params);
  const bool stream = x.data != y.data && y.bytes >= kStreamingStoreBytes &&
                      reinterpret_cast<uintptr_t>(yd) % sizeof(float) == 0;
  const int64_t lanes = static_cast<int64_t>(kernels::AffineLanes());
  const int64_t N = x.batch, C = x.channels, S = x.spatial;

  // Channels-first planes at least a vector long: broadcast one scalar per plane.
  // Per-sample parameters with tiny planes also go here (their periodic table would
  // be as large as the tensor); everything else uses periodic parameter rows.
  if (!x.channels_last() && (S >= lanes || params.per_sample)) {
    kernels::AffineBroadcastJob job{
        xd, yd, S, params.per_sample ? N * C : C, params.scale, params.shift, terms, stream};
    RunBlocks(context, x.numel, [&](int64_t b, int64_t e) { kernels::AffineBroadcast(job, b, e); });
    return;
  }
  // Channels-last: parameter j of a sample's flat run is c = j % C. Tiny
  // channels-first planes: c = (j / S) % C, i.e. each value repeated S times.
  const int64_t repeat = x.channels_last() ? 1 : S;
  const int64_t period = PeriodFor(C * repeat, lanes);
  const int64_t rows = params.per_sample ? N : 1;
  const int64_t row_len = period + lanes;
  std::vector<float> scale_rep(params.scale ? rows * row_len : 0);
  std::vector<float> shift_rep(params.shift ? rows * row_len : 0);
  for (int64_t r = 0; r < rows; ++r) {
    if (params.scale)
      BuildRepRow(params.scale + r * C, C, repeat, period, lanes, &scale_rep[r * row_len]);
    if (params.shift)
      BuildRepRow(params.shift + r * C, C, repeat, period, lanes, &shift_rep[r * row_len]);
  }
  kernels::AffinePeriodicJob job{xd,
                                 yd,
                                 C * S,
                                 period,
                                 params.per_sample ? row_len : 0,
                                 params.scale ? scale_rep.data() : nullptr,
                                 params.shift ? shift_rep.data() : nullptr,
                                 terms,
                                 stream};
  RunBlocks(context, x.numel, [&](int64_t b, int64_t e) { kernels::AffinePeriodic(job, b, e); });
}

}  // namespace cpu
}  // namespace normkit
