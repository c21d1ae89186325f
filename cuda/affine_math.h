// SPDX-License-Identifier: Apache-2.0
// What one thread of the CUDA affine kernel does, as host-and-device code so the CPU
// tests run it for every thread of every block.
#ifndef NORMKIT_CUDA_AFFINE_MATH_H_
#define NORMKIT_CUDA_AFFINE_MATH_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cuda/channel_cursor.h"
#include "cuda/storage.h"

namespace normkit {
namespace cuda {

// The 64-bit kernel (tensors of kMaxIndex32 elements or more): a block owns kAffineChunkElems
// consecutive elements of one sample.
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

// The flat kernels (every tensor below kMaxIndex32 elements): element e of the whole
// tensor -> the index of its scale / shift, with 32-bit divisions by constants.
// Channels-first: plane = e / spatial is n * C + c, so per-sample parameters are indexed
// by the plane itself. Channels-last: c = e % C, n = e / (C * spatial).
struct AffineIndex {
  U32Divider spatial_div, channel_div, sample_div;
  uint32_t C = 1;
  bool per_sample = false, channels_last = false;

  static AffineIndex Of(int64_t C, int64_t spatial, bool per_sample, bool channels_last) {
    AffineIndex ix;
    ix.spatial_div = U32Divider::Of(static_cast<uint32_t>(spatial));
    ix.channel_div = U32Divider::Of(static_cast<uint32_t>(C));
    ix.sample_div = U32Divider::Of(static_cast<uint32_t>(C * spatial));
    ix.C = static_cast<uint32_t>(C);
    ix.per_sample = per_sample;
    ix.channels_last = channels_last;
    return ix;
  }
  NORMKIT_HOST_DEVICE uint32_t Param(uint32_t e) const {
    if (!channels_last) {
      const uint32_t plane = spatial_div.Div(e);
      return per_sample ? plane : channel_div.Mod(plane);
    }
    const uint32_t c = channel_div.Mod(e);
    return per_sample ? sample_div.Div(e) * C + c : c;
  }
};

// Whether the flat kernel may move `lanes` elements at a time: x and y aligned to a whole
// vector of their element sizes, and every aligned group of `lanes` elements in one plane
// (channels-first) or channels c..c+lanes-1 of one position.
inline bool AffineVectorizable(int64_t C, int64_t spatial, bool channels_last, const void* x,
                               size_t x_bytes, const void* y, size_t y_bytes, int lanes) {
  const bool aligned = reinterpret_cast<uintptr_t>(x) % (lanes * x_bytes) == 0 &&
                       reinterpret_cast<uintptr_t>(y) % (lanes * y_bytes) == 0;
  return aligned && (channels_last ? C % lanes == 0 : spatial % lanes == 0);
}

// Block `block` (sample block / chunks, chunk block % chunks), thread `tid` of `threads`.
// center (batch norm with running means far from the spread): y = (x - center) * scale
// + shift; x - 0 is x, so without one the bits are a plain FMA's. TX / TY: the storage
// of x and y (float math, the result rounded into TY).
template <class TX, class TY>
NORMKIT_HOST_DEVICE void AffineThread(const TX* x, TY* y, const float* scale, const float* shift,
                                      const AffineShape& s, int64_t block, int64_t tid,
                                      int64_t threads, const float* center = nullptr) {
  const int64_t sample_elems = s.C * s.spatial;
  const int64_t n = block / s.chunks;
  const int64_t begin = (block - n * s.chunks) * kAffineChunkElems;
  const int64_t end =
      begin + kAffineChunkElems < sample_elems ? begin + kAffineChunkElems : sample_elems;
  const int64_t param_base = s.per_sample ? n * s.C : 0;
  const TX* xs = x + n * sample_elems;
  TY* ys = y + n * sample_elems;
  ChannelCursor cursor(begin + tid, threads, s.C, s.spatial, s.channels_last);
  for (int64_t i = begin + tid; i < end; i += threads, cursor.Next()) {
    const int64_t p = param_base + cursor.channel();
    const float sc = scale != nullptr ? scale[p] : 1.0f;
    const float sh = shift != nullptr ? shift[p] : 0.0f;
    const float m = center != nullptr ? center[p] : 0.0f;
    ys[i] = Element<TY>::FromFloat(fmaf(Element<TX>::ToFloat(xs[i]) - m, sc, sh));
  }
}

}  // namespace cuda
}  // namespace normkit

#endif  // NORMKIT_CUDA_AFFINE_MATH_H_
