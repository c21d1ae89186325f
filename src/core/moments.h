// SPDX-License-Identifier: Apache-2.0
// Moments of a set of values and their exact pairwise merge, shared by the CPU and
// CUDA normalizations (statistics of blocks or chunks are merged in a fixed order), and
// the shifted sums they are taken from.
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

// Whether shifted sums about a pivot lost too many digits to trust: true when the
// pivot is further from the mean than one standard deviation, i.e. when
// s1^2 / n > s2 / 2. Below that, s2 - s1^2 / n keeps all but one bit of s2's
// precision.
NORMKIT_HOST_DEVICE inline bool PivotTooFar(double count, double s1, double s2) {
  return s1 * s1 > 0.5 * count * s2;
}

// Moments of `count` values from their shifted sums about `pivot`. With the pivot
// near the mean (in units of the spread) s2 - s1^2 / count does not cancel; this is
// not E[x^2] - E[x]^2, whose pivot is 0.
NORMKIT_HOST_DEVICE inline Moments FromShiftedSums(double count, float pivot, double s1,
                                                   double s2) {
  Moments m;
  m.count = count;
  m.mean = static_cast<double>(pivot) + s1 / count;
  const double m2 = s2 - s1 * (s1 / count);
  m.m2 = m2 > 0.0 ? m2 : 0.0;
  return m;
}

}  // namespace normkit

#endif  // NORMKIT_CORE_MOMENTS_H_
