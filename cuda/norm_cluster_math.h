// SPDX-License-Identifier: Apache-2.0
// The arithmetic of the CUDA cluster plans (Hopper thread-block clusters), channels-last
// and channels-first: how a cluster's blocks split a sample or a unit, their pivots and
// moments. Host-and-device code, replayed on the CPU by the tests like norm_math.h.
#ifndef NORMKIT_CUDA_NORM_CLUSTER_MATH_H_
#define NORMKIT_CUDA_NORM_CLUSTER_MATH_H_

#include <cstdint>

#include "core/host_device.h"
#include "core/moments.h"
#include "cuda/norm_math.h"

namespace normkit {
namespace cuda {

// ---- The cluster plan (Hopper, channels-last group norm): a cluster of `blocks` thread
// blocks per sample. A channels-last group is strided by C, so a block per (n, group)
// reads Cg floats out of every C (32 bytes per position at C / G = 8, 4 bytes for
// instance norm) and the memory system moves more than the block uses. Here each block
// takes a contiguous run of the sample's positions with all C channels and takes the
// moments of every group's part of it; the blocks of the cluster then merge each other's
// moments through distributed shared memory in rank order (Chan), so every block holds
// the same bits of every statistic. The run is read from memory once where it fits in
// shared memory; rows beyond that are read again (from L2) by the later passes.
// Thread t owns the float4 column t % cols (4 channels) of the rows t / cols,
// t / cols + lanes, ...: its 4 channels never change.
// Few samples (batch 1) would leave most of the GPU idle with a cluster per sample
// (16 blocks), so a sample's channels split into `slices` of whole groups, a cluster
// each: a block then reads a 64-byte or longer segment of every row.
// A block sums each group about a pivot of its own (ClusterPivot); where the pivot
// turns out far from the block's mean (FlatMoments' test), the block sums again about
// that mean, from shared memory for its cached rows. ----

constexpr uint32_t kClusterMaxBlocks = 16;  // a non-portable cluster size (Hopper allows 16)
constexpr uint32_t kClusterThreads = 256;   // threads a block aims for (see Of)
// Bytes of rows a block aims for where the sample allows: three blocks per H100
// multiprocessor, so the loads of one overlap the sums and stores of the others.
constexpr int64_t kClusterRowTarget = 64 * 1024;
// Rows a thread loads before it uses any.
constexpr uint32_t kClusterBatch = 4;

struct ClusterUnits {
  // C and groups: a slice's channels and groups; stride: the floats between rows in
  // memory (the tensor's C).
  uint32_t C = 0, groups = 0, Cg = 0, positions = 0, samples = 0, stride = 0;
  uint32_t slices = 1;  // clusters per sample, each C channels

  uint32_t blocks = 1;       // per sample: the size of the cluster
  uint32_t rows = 0;         // positions per block; the last blocks may have fewer
  uint32_t cached_rows = 0;  // of a block's rows, the first ones held in shared memory
  uint32_t cols = 0;         // C / 4
  uint32_t lanes = 1;        // threads per column
  uint32_t threads = 0;      // cols * lanes rounded up to whole warps

  NORMKIT_HOST_DEVICE uint32_t RowsOf(uint32_t rank) const {
    const uint32_t begin = rank * rows;
    if (begin >= positions) return 0;
    return positions - begin < rows ? positions - begin : rows;
  }
  NORMKIT_HOST_DEVICE uint32_t Active() const { return cols * lanes; }

  // Dynamic shared memory, in this order: the cached rows (floats), the threads' sums per
  // lane and channel (lanes x C x {s1, s2} doubles), the block's group sums (G x {s1, s2}
  // doubles), the block's group moments (G Moments, read by the whole cluster), the
  // groups' UnitAffine, pivots (floats) and retry flags (bytes).
  NORMKIT_HOST_DEVICE size_t LaneSumsOffset() const {
    return static_cast<size_t>(cached_rows) * C * sizeof(float);
  }
  NORMKIT_HOST_DEVICE size_t GroupSumsOffset() const {
    return LaneSumsOffset() + static_cast<size_t>(lanes) * C * 2 * sizeof(double);
  }
  NORMKIT_HOST_DEVICE size_t MomentsOffset() const {
    return GroupSumsOffset() + static_cast<size_t>(groups) * 2 * sizeof(double);
  }
  NORMKIT_HOST_DEVICE size_t AffineOffset() const {
    return MomentsOffset() + static_cast<size_t>(groups) * sizeof(Moments);
  }
  NORMKIT_HOST_DEVICE size_t PivotsOffset() const {
    return AffineOffset() + static_cast<size_t>(groups) * sizeof(UnitAffine);
  }
  NORMKIT_HOST_DEVICE size_t RetryOffset() const {
    return PivotsOffset() + static_cast<size_t>(groups) * sizeof(float);
  }
  NORMKIT_HOST_DEVICE size_t SharedBytes() const { return (RetryOffset() + groups + 15) / 16 * 16; }

  // The plan for a channels-last group norm of `s`, or false where it does not apply
  // (16-byte aligned x and y, C a multiple of 4 up to 2048, the fixed parts within
  // `max_shared`). C = 2048 gives blocks of 512 threads; the kernel's 80 registers a
  // thread leave no room for blocks of more than 768. With few samples, each splits into
  // slices of whole groups (of 16 channels at least) while the clusters still fit the
  // `multiprocessors` side by side. Blocks hold about kClusterRowTarget bytes of rows,
  // at most `max_blocks` a cluster; with few clusters, more blocks (of 8 KiB of rows at
  // least) fill the `multiprocessors`.
  static bool Of(const NormShape& s, bool aligned, int64_t max_shared, int64_t multiprocessors,
                 uint32_t max_blocks, ClusterUnits* out) {
    if (!s.channels_last || !aligned || s.C % 4 != 0 || s.C > 2048 || s.groups > s.C ||
        s.units / s.groups > 65535 || s.spatial * s.C >= kMaxIndex32) {
      return false;
    }
    ClusterUnits p;
    p.Cg = static_cast<uint32_t>(s.Cg);
    p.positions = static_cast<uint32_t>(s.spatial);
    p.samples = static_cast<uint32_t>(s.units / s.groups);
    p.stride = static_cast<uint32_t>(s.C);
    const auto slice_fits = [&](int64_t slices) {
      return s.groups % slices == 0 && (s.C / slices) % 4 == 0 && s.C / slices >= 16 &&
             p.samples * slices * max_blocks <= multiprocessors;
    };
    while (slice_fits(2 * p.slices)) p.slices *= 2;
    p.C = static_cast<uint32_t>(s.C) / p.slices;
    p.groups = static_cast<uint32_t>(s.groups) / p.slices;
    p.cols = p.C / 4;
    const int64_t clusters = static_cast<int64_t>(p.samples) * p.slices;
    const int64_t row_bytes = p.C * static_cast<int64_t>(sizeof(float));
    const auto rows_for = [&](int64_t blocks) { return (s.spatial + blocks - 1) / blocks; };
    int64_t blocks = 1;
    while (blocks < max_blocks && rows_for(blocks) * row_bytes > kClusterRowTarget) blocks *= 2;
    while (blocks < max_blocks && clusters * blocks < 2 * multiprocessors &&
           rows_for(2 * blocks) * row_bytes >= 8 * 1024) {
      blocks *= 2;
    }
    if (blocks > s.spatial) blocks = s.spatial;
    p.blocks = static_cast<uint32_t>(blocks);
    p.rows = static_cast<uint32_t>(rows_for(blocks));
    // kClusterThreads; twice as many where the rows do not fit and one block holds the
    // multiprocessor (H100: 32x512x56x56 0.47 -> 0.52 of a copy, instance norm
    // 8x64x128x128 0.32 -> 0.35; with three blocks a multiprocessor, 512 threads halve
    // the speed, the registers allowing only one).
    const auto with_threads = [&](uint32_t threads, ClusterUnits* q) {
      *q = p;
      q->cached_rows = 0;
      q->lanes = q->cols >= threads ? 1 : threads / q->cols;
      q->threads = (q->Active() + 31) / 32 * 32;
      const int64_t fixed = static_cast<int64_t>(q->SharedBytes());  // no cached rows yet
      if (fixed > max_shared) return false;
      const int64_t fit = (max_shared - fixed) / row_bytes;
      q->cached_rows = static_cast<uint32_t>(fit < q->rows ? fit : q->rows);
      return true;
    };
    ClusterUnits wide;
    if (!with_threads(kClusterThreads, &p)) return false;
    if (p.cached_rows < p.rows && with_threads(2 * kClusterThreads, &wide)) p = wide;
    *out = p;
    return true;
  }
};

// A block's pivot for group g: the mean of about 32 of its elements in the block's first
// rows (the first min(Cg, 32) channels of ClusterPivotRows rows), in float: any value
// near the mean serves, and a far one only costs the second pass. Random data put the
// block's first element past FlatMoments' limit half the time; a mean of 32 almost never.
NORMKIT_HOST_DEVICE inline uint32_t ClusterPivotChannels(const ClusterUnits& p) {
  return p.Cg < 32 ? p.Cg : 32;
}
NORMKIT_HOST_DEVICE inline uint32_t ClusterPivotRows(const ClusterUnits& p, uint32_t rows) {
  const uint32_t want = (32 + p.Cg - 1) / p.Cg;
  return want < rows ? want : rows;
}
// Row r of a block's slice: in shared memory (`cache`, rows of C) for r < cached, else
// in memory (`x`, rows `stride` apart).
NORMKIT_HOST_DEVICE inline const float* ClusterRow(const float* x, const float* cache,
                                                   const ClusterUnits& p, uint32_t cached,
                                                   uint32_t r) {
  return r < cached ? cache + static_cast<size_t>(r) * p.C : x + static_cast<size_t>(r) * p.stride;
}
NORMKIT_HOST_DEVICE inline float ClusterPivot(const float* x, const float* cache,
                                              const ClusterUnits& p, uint32_t rows, uint32_t g) {
  const uint32_t k = ClusterPivotRows(p, rows), channels = ClusterPivotChannels(p);
  if (k == 0) return 0.0f;
  float sum = 0.0f;
  for (uint32_t r = 0; r < k; ++r) {
    const float* row = ClusterRow(x, cache, p, p.cached_rows, r) + g * p.Cg;
    for (uint32_t c = 0; c < channels; ++c) sum += row[c];
  }
  return sum / static_cast<float>(k * channels);
}

// A block's moments of a group from its sums about `pivot` (count: the group's elements
// in the block); false, with *pivot moved to the block's mean, where the pivot was too
// far from it to trust the sums and `may_retry`.
NORMKIT_HOST_DEVICE inline bool ClusterMoments(const ShiftedSums& s, double count, bool may_retry,
                                               float* pivot, Moments* m) {
  m->count = count;
  if (count == 0.0) {
    m->mean = m->m2 = 0.0;
    return true;
  }
  double mean, var;
  if (!FlatMoments(false, s, count, may_retry, pivot, &mean, &var)) return false;
  m->mean = mean;
  m->m2 = var * count;
  return true;
}

struct LaneSums {
  double s1[4] = {0.0, 0.0, 0.0, 0.0};
  double s2[4] = {0.0, 0.0, 0.0, 0.0};
};

NORMKIT_HOST_DEVICE inline float LaneOf(const Float4& v, int l) {
  return l == 0 ? v.x : l == 1 ? v.y : l == 2 ? v.z : v.w;
}

// Loads rows r0, r0 + lanes, ... (at most kClusterBatch, below `rows`) of column `col`
// into v (ClusterRow); returns how many.
NORMKIT_HOST_DEVICE inline uint32_t ClusterLoadRows(const float* x, const float* cache,
                                                    const ClusterUnits& p, uint32_t rows,
                                                    uint32_t cached, uint32_t col, uint32_t r0,
                                                    Float4 v[kClusterBatch]) {
  uint32_t n = 0;
  for (uint32_t r = r0; n < kClusterBatch && r < rows; r += p.lanes, ++n) {
    v[n] = LoadFloat4(ClusterRow(x, cache, p, cached, r) + 4 * col);
  }
  return n;
}

// A cluster block's pass over its rows for thread (col, lane): the sums of each of the
// thread's 4 channels about its group's pivot, in float over up to kClusterBatch rows
// (loaded before any is used), in double across them.
NORMKIT_HOST_DEVICE inline LaneSums ClusterThreadSums(const float* x, const float* cache,
                                                      const ClusterUnits& p, uint32_t rows,
                                                      uint32_t col, uint32_t lane,
                                                      const float pivot[4]) {
  LaneSums sums;
  const uint32_t cached = rows < p.cached_rows ? rows : p.cached_rows;
  for (uint32_t r0 = lane; r0 < rows; r0 += kClusterBatch * p.lanes) {
    Float4 v[kClusterBatch];
    const uint32_t n = ClusterLoadRows(x, cache, p, rows, cached, col, r0, v);
    for (int l = 0; l < 4; ++l) {
      float a1 = 0.0f, a2 = 0.0f;
      for (uint32_t j = 0; j < n; ++j) {
        const float d = LaneOf(v[j], l) - pivot[l];
        a1 += d;
        a2 += d * d;
      }
      sums.s1[l] += static_cast<double>(a1);
      sums.s2[l] += static_cast<double>(a2);
    }
  }
  return sums;
}

// The output pass of thread (col, lane): y = act(fmaf(x - mean_f, a, b)) with each of its
// channels' UnitAffine terms (mean_f[l], a[l] = Scale(gamma), b[l] = Shift(a, beta)).
NORMKIT_HOST_DEVICE inline void ClusterThreadApply(const float* x, const float* cache, float* y,
                                                   const ClusterUnits& p, uint32_t rows,
                                                   uint32_t col, uint32_t lane,
                                                   const float mean_f[4], const float a[4],
                                                   const float b[4], int32_t activation) {
  const uint32_t cached = rows < p.cached_rows ? rows : p.cached_rows;
  for (uint32_t r0 = lane; r0 < rows; r0 += kClusterBatch * p.lanes) {
    Float4 v[kClusterBatch];
    const uint32_t n = ClusterLoadRows(x, cache, p, rows, cached, col, r0, v);
    for (uint32_t j = 0; j < n; ++j) {
      const uint32_t r = r0 + j * p.lanes;
      StoreFloat4(y + static_cast<size_t>(r) * p.stride + 4 * col,
                  {Activate(fmaf(v[j].x - mean_f[0], a[0], b[0]), activation),
                   Activate(fmaf(v[j].y - mean_f[1], a[1], b[1]), activation),
                   Activate(fmaf(v[j].z - mean_f[2], a[2], b[2]), activation),
                   Activate(fmaf(v[j].w - mean_f[3], a[3], b[3]), activation)});
    }
  }
}

// ---- The cluster plan for channels-first units (Hopper): a unit (one (n, group),
// contiguous) too large for one block's shared memory, or one of too few units to fill
// the GPU, is split over a cluster of blocks, each holding a contiguous run of its
// items in shared memory. A block takes the moments of its run as the flat plan does
// (sums about a pivot from its own first elements, again about its mean where that was
// far off); the cluster merges them in rank order (Chan) and every block writes its run
// from shared memory. One launch and one read of x, where the split plan needs three
// launches, scratch memory and two reads. ----
struct ClusterRuns {
  uint32_t units = 0;
  uint32_t blocks = 1;     // per unit: the size of the cluster
  uint32_t run_items = 0;  // items of 4 elements a block; the last blocks may have fewer
  uint32_t items = 0;      // per unit
  uint32_t threads = kClusterThreads;
  uint32_t elem_bytes = 4;  // x's storage: float, or 2 for bfloat16 / float16 (runs as stored)

  NORMKIT_HOST_DEVICE uint32_t ItemsOf(uint32_t rank) const {
    const uint32_t begin = rank * run_items;
    if (begin >= items) return 0;
    return items - begin < run_items ? items - begin : run_items;
  }
  size_t SharedBytes() const { return static_cast<size_t>(run_items) * 4 * elem_bytes; }

  // The plan for the channels-first units of `f` (items of 4 elements of `elem_bytes`),
  // or false where it does not apply: units of items of 1 element, or too large for
  // `max_blocks` blocks of `max_shared` bytes. Runs of about kClusterRowTarget bytes;
  // with few units, more blocks (runs of 8 KiB at least) fill the `multiprocessors`.
  static bool Of(const NormShape& s, const FlatUnits& f, int64_t max_shared,
                 int64_t multiprocessors, uint32_t max_blocks, ClusterRuns* out,
                 int64_t elem_bytes = sizeof(float)) {
    if (s.channels_last || !f.vector || s.units > 65535 || s.units * s.count >= kMaxIndex32) {
      return false;
    }
    ClusterRuns c;
    c.units = static_cast<uint32_t>(s.units);
    c.items = f.items;
    c.elem_bytes = static_cast<uint32_t>(elem_bytes);
    const auto run_for = [&](int64_t blocks) { return (int64_t{c.items} + blocks - 1) / blocks; };
    const int64_t item_bytes = 4 * elem_bytes;
    int64_t blocks = 1;
    while (blocks < max_blocks && run_for(blocks) * item_bytes > kClusterRowTarget) blocks *= 2;
    while (blocks < max_blocks && c.units * blocks < 2 * multiprocessors &&
           run_for(2 * blocks) * item_bytes >= 8 * 1024) {
      blocks *= 2;
    }
    if (blocks > c.items) blocks = c.items;
    c.blocks = static_cast<uint32_t>(blocks);
    c.run_items = static_cast<uint32_t>(run_for(blocks));
    if (static_cast<int64_t>(c.SharedBytes()) > max_shared) return false;
    *out = c;
    return true;
  }
};

// A block's pivot for its run (in shared memory, `elems` elements as stored): the mean of
// its first 32 elements (or all of them), in float.
template <class TC>
NORMKIT_HOST_DEVICE inline float RunPivot(const TC* run, uint32_t elems) {
  const uint32_t n = elems < 32 ? elems : 32;
  if (n == 0) return 0.0f;
  float sum = 0.0f;
  for (uint32_t k = 0; k < n; ++k) sum += Element<TC>::ToFloat(run[k]);
  return sum / static_cast<float>(n);
}

// The output pass of thread `tid` over a block's run: items [first, first + items) of
// `unit`, read from `run` (item first at run[0]).
template <class TC, class TY>
NORMKIT_HOST_DEVICE inline void FlatApplyRun(const TC* run, TY* y, const FlatUnits& f,
                                             uint32_t unit, uint32_t first, uint32_t items,
                                             uint32_t tid, uint32_t threads, const UnitAffine& ua,
                                             const float* gamma, const float* beta,
                                             int32_t activation) {
  const auto affine = [&](uint32_t k, float v) {
    const uint32_t c = f.Channel(unit, k);
    return ua.Apply(v, gamma ? gamma[c] : 1.0f, beta ? beta[c] : 0.0f, activation);
  };
  for (uint32_t q = tid; q < items; q += threads) {
    const uint32_t k = 4 * (first + q);
    const Float4 v = Load4(run + 4 * q);
    Store4(y + f.Offset(unit, k),
           {affine(k, v.x), affine(k + 1, v.y), affine(k + 2, v.z), affine(k + 3, v.w)});
  }
}

}  // namespace cuda
}  // namespace normkit

#endif  // NORMKIT_CUDA_NORM_CLUSTER_MATH_H_
