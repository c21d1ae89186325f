// SPDX-License-Identifier: Apache-2.0
// bfloat16 rounding by the CPU's own instruction where it has one: x86's AVX512_BF16
// (VCVTNEPS2BF16). Highway 1.0 has no target with it, so it lives here, out of line, and
// the AVX-512 kernels call it a chunk at a time. It rounds to nearest even and quiets NaNs
// as storage-inl.h's integer rounding does (the same bits on every input: float
// subnormals, which the instruction reads as zero, are rounded by the integer ops).
#ifndef NORMKIT_CPU_KERNELS_BF16_HARDWARE_H_
#define NORMKIT_CPU_KERNELS_BF16_HARDWARE_H_

#include <cstddef>
#include <cstdint>

namespace normkit {
namespace kernels {

// Whether NarrowToBF16Hardware can run: built for x86-64 by a compiler that has the
// instruction, on a CPU (and OS) with AVX512F, AVX512BW, AVX512DQ, AVX512VL and AVX512_BF16.
bool HaveBF16Hardware();

// y[i] = x[i] rounded to bfloat16 bits, for i < n. stream: non-temporal stores where y is
// on a 32-byte boundary (the caller fences). Call only when HaveBF16Hardware().
void NarrowToBF16Hardware(const float* x, size_t n, uint16_t* y, bool stream);

}  // namespace kernels
}  // namespace normkit

#endif  // NORMKIT_CPU_KERNELS_BF16_HARDWARE_H_
