// SPDX-License-Identifier: Apache-2.0
// Walks indices with a fixed stride and keeps index / divisor and index % divisor up to
// date without a division per step (64-bit division costs tens of instructions on a
// GPU, more than a memory-bound kernel can spend per element). Host-and-device code:
// the CPU tests check it in every build with CUDA.
#ifndef NORMKIT_CUDA_CHANNEL_CURSOR_H_
#define NORMKIT_CUDA_CHANNEL_CURSOR_H_

#include <cstdint>

#include "core/host_device.h"

namespace normkit {
namespace cuda {

struct DivModCursor {
  NORMKIT_HOST_DEVICE DivModCursor(int64_t index, int64_t stride, int64_t divisor)
      : quot(index / divisor),
        rem(index % divisor),
        divisor_(divisor),
        step_q_(stride / divisor),
        step_r_(stride % divisor) {}

  // index += stride.
  NORMKIT_HOST_DEVICE void Next() {
    quot += step_q_;
    rem += step_r_;
    if (rem >= divisor_) {
      rem -= divisor_;
      ++quot;
    }
  }

  int64_t quot, rem;

 private:
  int64_t divisor_, step_q_, step_r_;
};

// The channel of element `index` of one sample (C channels x `spatial` positions):
// index / spatial channels-first, index % C channels-last.
struct ChannelCursor {
  NORMKIT_HOST_DEVICE ChannelCursor(int64_t index, int64_t stride, int64_t C, int64_t spatial,
                                    bool channels_last)
      : channels_last_(channels_last), cursor_(index, stride, channels_last ? C : spatial) {}
  NORMKIT_HOST_DEVICE int64_t channel() const {
    return channels_last_ ? cursor_.rem : cursor_.quot;
  }
  NORMKIT_HOST_DEVICE void Next() { cursor_.Next(); }

 private:
  bool channels_last_;
  DivModCursor cursor_;
};

}  // namespace cuda
}  // namespace normkit

#endif  // NORMKIT_CUDA_CHANNEL_CURSOR_H_
