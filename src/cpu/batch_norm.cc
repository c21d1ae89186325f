// SPDX-License-Identifier: Apache-2.0
#include "cpu/batch_norm.h"

#include <vector>

#include "cpu/affine.h"
#include "cpu/memory_plan.h"

namespace normkit {
namespace cpu {

void BatchNormInference(const normkit_context& context, const TensorView& x, const TensorView& y,
                        const fold::BatchNormParams& bn) {
  // Small models' channel counts fold into the stack: a heap pair per call showed
  // up in batch norms of a few microseconds.
  constexpr int64_t kStackChannels = 1024;
  float on_stack[2 * kStackChannels];
  std::vector<float> on_heap;
  float* scale = on_stack;
  if (x.channels > kStackChannels) {
    on_heap.resize(2 * static_cast<size_t>(x.channels));
    scale = on_heap.data();
  }
  float* shift = scale + x.channels;
  fold::BatchNormScaleShift(x.channels, bn, scale, shift);
  AffineParams params;
  params.scale = scale;
  params.shift = shift;
  // Below kMinParallelBytes a batch norm stays on the calling thread, though the
  // affine alone splits sooner (see memory_plan.h).
  Affine(ContextForBytes(context, x.bytes * 2), x, y, params);
}

}  // namespace cpu
}  // namespace normkit
