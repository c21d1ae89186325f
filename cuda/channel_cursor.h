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

// Division by a divisor fixed at launch, in 32 bits, with a multiply-high and a shift
// instead of a division (Granlund & Montgomery; the form PyTorch's IntDivider uses).
// Exact for every dividend below 2^31 and every divisor from 1 to 2^31.
struct U32Divider {
  uint32_t divisor = 1, multiplier = 1, shift = 0;

  static U32Divider Of(uint32_t d) {
    U32Divider r;
    r.divisor = d;
    while ((uint64_t{1} << r.shift) < d) ++r.shift;
    r.multiplier =
        static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << r.shift) - d)) / d + 1);
    return r;
  }
  NORMKIT_HOST_DEVICE uint32_t Div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t t = __umulhi(n, multiplier);
#else
    const uint32_t t = static_cast<uint32_t>((static_cast<uint64_t>(n) * multiplier) >> 32);
#endif
    return (t + n) >> shift;
  }
  NORMKIT_HOST_DEVICE uint32_t Mod(uint32_t n) const {
    return n - Div(n) * divisor;
  }
};

// Indices below this use 32-bit index math (U32Divider) in the kernels.
constexpr int64_t kMaxIndex32 = int64_t{1} << 31;

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
