// SPDX-License-Identifier: Apache-2.0
// Moments of a set of values and their exact pairwise merge, shared by the CPU and
// CUDA normalizations (statistics of blocks or chunks are merged in a fixed order).
#ifndef NORMKIT_CORE_MOMENTS_H_
#define NORMKIT_CORE_MOMENTS_H_

#include "core/host_device.h"

namespace normkit {

// Count, mean and sum of squared deviations from the mean (M2) of a set of values.
struct Moments {
  double count = 0.0;
  double mean = 0.0;
  double m2 = 0.0;
};

// Chan et al.'s pairwise merge: the moments of the union of two disjoint sets.
// Exact in the sense that no E[x^2] - E[x]^2 cancellation ever happens.
NORMKIT_HOST_DEVICE inline Moments MergeMoments(const Moments& a, const Moments& b) {
  if (a.count == 0.0) return b;
  if (b.count == 0.0) return a;
  Moments m;
  m.count = a.count + b.count;
  const double delta = b.mean - a.mean;
  m.mean = a.mean + delta * (b.count / m.count);
  m.m2 = a.m2 + b.m2 + delta * delta * (a.count * b.count / m.count);
  return m;
}

}  // namespace normkit

#endif  // NORMKIT_CORE_MOMENTS_H_
