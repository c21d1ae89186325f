// SPDX-License-Identifier: Apache-2.0
// The ways the fused residual add + norm's outputs may be its inputs (in place), for the
// float32 and half tests of normkit_add_layer_norm / normkit_add_rms_norm.
#ifndef NORMKIT_TESTS_ADD_NORM_PAIRINGS_H_
#define NORMKIT_TESTS_ADD_NORM_PAIRINGS_H_

namespace normkit_test {

struct AddNormPairing {
  const char* name;
  int y_on, h_on;  // 0: its own buffer, 1: x, 2: residual (h_on -1: no h)
};

inline constexpr AddNormPairing kAddNormPairings[] = {
    {"y = x", 1, 0},        {"y = residual", 2, 0},        {"h = x", 0, 1},
    {"h = residual", 0, 2}, {"y = x, h = residual", 1, 2}, {"y = residual, h = x", 2, 1},
    {"y = x, no h", 1, -1}};

}  // namespace normkit_test

#endif  // NORMKIT_TESTS_ADD_NORM_PAIRINGS_H_
