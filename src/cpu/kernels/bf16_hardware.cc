// SPDX-License-Identifier: Apache-2.0
#include "cpu/kernels/bf16_hardware.h"

#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 10))
#define NORMKIT_BF16_HARDWARE 1
#include <immintrin.h>
#else
#define NORMKIT_BF16_HARDWARE 0
#endif

namespace normkit {
namespace kernels {

#if NORMKIT_BF16_HARDWARE

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

#define NORMKIT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

// Sixteen floats (the lanes of `lanes`) rounded to bfloat16 bits. VCVTNEPS2BF16 rounds to
// nearest even and quiets NaNs keeping the payload's top bits, as the integer rounding
// does, but reads float subnormals as zero: those lanes get (u + 0x7FFF + odd) >> 16.
NORMKIT_BF16_TARGET inline __m256i Round16(__m512 v) {
  __m256i r = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  const __mmask16 subnormal = _mm512_fpclass_ps_mask(v, 0x20);
  if (subnormal != 0) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd), 16);
    r = _mm256_mask_mov_epi16(r, subnormal, _mm512_cvtepi32_epi16(rounded));
  }
  return r;
}

NORMKIT_BF16_TARGET void Narrow(const float* x, size_t n, uint16_t* y, bool stream) {
  size_t i = 0;
  if (stream) {
    // Up to the first 32-byte boundary of y (y is 2-byte aligned), masked.
    const size_t misalign = (reinterpret_cast<uintptr_t>(y) % 32) / 2;
    const size_t peel = misalign == 0 ? 0 : (16 - misalign < n ? 16 - misalign : n);
    if (peel > 0) {
      const __mmask16 m = static_cast<__mmask16>((1u << peel) - 1);
      _mm256_mask_storeu_epi16(y, m, Round16(_mm512_maskz_loadu_ps(m, x)));
      i = peel;
    }
    if (reinterpret_cast<uintptr_t>(y + i) % 32 == 0) {
      for (; i + 16 <= n; i += 16) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(y + i), Round16(_mm512_loadu_ps(x + i)));
      }
    }
  }
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), Round16(_mm512_loadu_ps(x + i)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(y + i, m, Round16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace

void NarrowToBF16Hardware(const float* x, size_t n, uint16_t* y, bool stream) {
  Narrow(x, n, y, stream);
}

#else  // !NORMKIT_BF16_HARDWARE

bool HaveBF16Hardware() {
  return false;
}
void NarrowToBF16Hardware(const float*, size_t, uint16_t*, bool) {}

#endif

}  // namespace kernels
}  // namespace normkit
