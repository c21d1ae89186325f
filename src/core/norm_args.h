// SPDX-License-Identifier: Apache-2.0
// The validated arguments of a normalization call (group norm and its forms, row layer
// norm, RMS norm), as the API layer hands them to the CPU or the CUDA path.
#ifndef NORMKIT_CORE_NORM_ARGS_H_
#define NORMKIT_CORE_NORM_ARGS_H_

#include <cstdint>

#include "normkit/normkit.h"

namespace normkit {

struct NormArgs {
  int64_t groups = 1;            // group norm: divides C (row norms: 1)
  const float* gamma = nullptr;  // C (or D) floats, or null (1)
  const float* beta = nullptr;   // C (or D) floats, or null (0); not used by RMS norm
  float eps = 1e-5f;
  int32_t activation = NORMKIT_ACTIVATION_NONE;  // a normkit_activation
  bool rms = false;       // RMS norm: no mean subtracted, rstd = 1 / sqrt(mean(x^2) + eps)
  float* mean = nullptr;  // N x groups (or rows) outputs, or null
  float* rstd = nullptr;  // N x groups (or rows) outputs, or null
};

}  // namespace normkit

#endif  // NORMKIT_CORE_NORM_ARGS_H_
