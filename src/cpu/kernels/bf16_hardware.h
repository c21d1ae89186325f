// SPDX-License-Identifier: Apache-2.0
// bfloat16 rounding by the CPU's own instruction where it has one: x86's AVX512_BF16
// (VCVTNEPS2BF16). Highway 1.0 has no target with it: the AVX-512 kernels are compiled
// with it allowed (target_attributes-inl.h) and round a vector at a time by RoundToBF16
// where UseBF16Instruction() says the CPU has it; NarrowToBF16Hardware does a span out of
// line. Both round to nearest even and quiet NaNs as storage-inl.h's integer rounding
// does (the same bits on every input: float subnormals, which the instruction reads as
// zero, are rounded by the integer ops).
#ifndef NORMKIT_CPU_KERNELS_BF16_HARDWARE_H_
#define NORMKIT_CPU_KERNELS_BF16_HARDWARE_H_

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 10))
#define NORMKIT_BF16_INSTRUCTION 1
#include <immintrin.h>
#else
#define NORMKIT_BF16_INSTRUCTION 0
#endif

namespace normkit {
namespace kernels {

// Whether NarrowToBF16Hardware can run: built for x86-64 by a compiler that has the
// instruction, on a CPU (and OS) with AVX512F, AVX512BW, AVX512DQ, AVX512VL and AVX512_BF16.
bool HaveBF16Hardware();

// y[i] = x[i] rounded to bfloat16 bits, for i < n. stream: non-temporal stores where y is
// on a 32-byte boundary (the caller fences). Call only when HaveBF16Hardware().
void NarrowToBF16Hardware(const float* x, size_t n, uint16_t* y, bool stream);

namespace detail {
extern bool use_bf16_instruction;  // HaveBF16Hardware(), unless a test turned it off
}  // namespace detail

// Whether the AVX-512 kernels round bfloat16 by RoundToBF16 (a load of a flag, so that a
// kernel's loop can test it per vector).
inline bool UseBF16Instruction() {
  return detail::use_bf16_instruction;
}

// Tests: off makes the AVX-512 kernels round bfloat16 by the integer operations, as on a
// CPU without AVX512_BF16; on restores what the CPU has.
void SetBF16InstructionForTest(bool on);

#if NORMKIT_BF16_INSTRUCTION
#define NORMKIT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

// Sixteen floats rounded to bfloat16 bits. Float subnormals (read as zero by the
// instruction) get the integer rounding, (u + 0x7FFF + odd) >> 16.
NORMKIT_BF16_TARGET inline __attribute__((always_inline)) __m256i RoundToBF16(__m512 v) {
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
#endif

}  // namespace kernels
}  // namespace normkit

#endif  // NORMKIT_CPU_KERNELS_BF16_HARDWARE_H_
