// SPDX-License-Identifier: Apache-2.0
// The half tests' walk over SIMD targets (needs the library's internals: tests only, not
// the fuzzers, which see the public API and half_reference.h).
#ifndef NORMKIT_TESTS_HALF_TARGETS_H_
#define NORMKIT_TESTS_HALF_TARGETS_H_

#include <gtest/gtest.h>

#include <cstdint>

#include "cpu/kernels/bf16_hardware.h"
#include "hwy/targets.h"

namespace normkit_test {

// f() on every SIMD target this CPU runs, and on the AVX-512 ones once more with the
// bfloat16 rounding instruction turned off where the CPU has it (as a CPU without
// AVX512_BF16 runs them: the integer rounding).
template <class F>
void ForEachHalfTarget(F&& f) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    f();
    const bool avx512 = (target & (HWY_AVX3 | HWY_AVX3_DL)) != 0;
    if (avx512 && normkit::kernels::HaveBF16Hardware()) {
      SCOPED_TRACE("without AVX512_BF16");
      normkit::kernels::SetBF16InstructionForTest(false);
      f();
      normkit::kernels::SetBF16InstructionForTest(true);
    }
  }
  hwy::SetSupportedTargetsForTest(0);  // back to what the CPU reports
}

}  // namespace normkit_test

#endif  // NORMKIT_TESTS_HALF_TARGETS_H_
