// SPDX-License-Identifier: Apache-2.0
// What one thread of the CUDA affine kernel does, as host-and-device code so the CPU
// tests run it for every thread of every block.
#ifndef NORMKIT_CUDA_AFFINE_MATH_H_
#define NORMKIT_CUDA_AFFINE_MATH_H_

#include <cmath>
#include <cstdint>

#include "cuda/channel_cursor.h"

namespace normkit {
namespace cuda {

// A block owns kAffineChunkElems consecutive elements of one sample.
constexpr int64_t kAffineChunkElems = 8192;

struct AffineShape {
  int64_t C = 1, spatial = 1;
  int64_t chunks = 1;  // per sample
  bool per_sample = false;
  bool channels_last = false;

  static AffineShape Of(int64_t C, int64_t spatial, bool per_sample, bool channels_last) {
    AffineShape s{C, spatial, 1, per_sample, channels_last};
    s.chunks = (C * spatial + kAffineChunkElems - 1) / kAffineChunkElems;
    return s;
  }
};

// Block `block` (sample block / chunks, chunk block % chunks), thread `tid` of `threads`.
NORMKIT_HOST_DEVICE inline void AffineThread(const float* x, float* y, const float* scale,
                                             const float* shift, const AffineShape& s,
                                             int64_t block, int64_t tid, int64_t threads) {
  const int64_t sample_elems = s.C * s.spatial;
  const int64_t n = block / s.chunks;
  const int64_t begin = (block - n * s.chunks) * kAffineChunkElems;
  const int64_t end =
      begin + kAffineChunkElems < sample_elems ? begin + kAffineChunkElems : sample_elems;
  const int64_t param_base = s.per_sample ? n * s.C : 0;
  const float* xs = x + n * sample_elems;
  float* ys = y + n * sample_elems;
  ChannelCursor cursor(begin + tid, threads, s.C, s.spatial, s.channels_last);
  for (int64_t i = begin + tid; i < end; i += threads, cursor.Next()) {
    const int64_t p = param_base + cursor.channel();
    const float sc = scale != nullptr ? scale[p] : 1.0f;
    const float sh = shift != nullptr ? shift[p] : 0.0f;
    ys[i] = fmaf(xs[i], sc, sh);
  }
}

}  // namespace cuda
}  // namespace normkit

#endif  // NORMKIT_CUDA_AFFINE_MATH_H_
