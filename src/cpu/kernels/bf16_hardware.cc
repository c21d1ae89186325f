// SPDX-License-Identifier: Apache-2.0
#include "cpu/kernels/bf16_hardware.h"

namespace normkit {
namespace kernels {

#if NORMKIT_BF16_INSTRUCTION

bool HaveBF16Hardware() {
  static const bool have = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bf16");
  }();
  return have;
}

namespace {

NORMKIT_BF16_TARGET void Narrow(const float* x, size_t n, uint16_t* y, bool stream) {
  size_t i = 0;
  if (stream) {
    // Up to the first 32-byte boundary of y (y is 2-byte aligned), masked.
    const size_t misalign = (reinterpret_cast<uintptr_t>(y) % 32) / 2;
    const size_t peel = misalign == 0 ? 0 : (16 - misalign < n ? 16 - misalign : n);
    if (peel > 0) {
      const __mmask16 m = static_cast<__mmask16>((1u << peel) - 1);
      _mm256_mask_storeu_epi16(y, m, RoundToBF16(_mm512_maskz_loadu_ps(m, x)));
      i = peel;
    }
    if (reinterpret_cast<uintptr_t>(y + i) % 32 == 0) {
      for (; i + 16 <= n; i += 16) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(y + i), RoundToBF16(_mm512_loadu_ps(x + i)));
      }
    }
  }
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), RoundToBF16(_mm512_loadu_ps(x + i)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(y + i, m, RoundToBF16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace

void NarrowToBF16Hardware(const float* x, size_t n, uint16_t* y, bool stream) {
  Narrow(x, n, y, stream);
}

#else  // !NORMKIT_BF16_INSTRUCTION

bool HaveBF16Hardware() {
  return false;
}
void NarrowToBF16Hardware(const float*, size_t, uint16_t*, bool) {}

#endif

namespace detail {
bool use_bf16_instruction = HaveBF16Hardware();
}  // namespace detail

void SetBF16InstructionForTest(bool on) {
  detail::use_bf16_instruction = on && HaveBF16Hardware();
}

}  // namespace kernels
}  // namespace normkit
