// SPDX-License-Identifier: Apache-2.0
// CUDA group norm (and instance / channel layer norm) and the row-wise layer / RMS norm.
//
// Plans (all deterministic: every sum has a fixed thread assignment and reduction tree,
// no atomics):
//  - fused: one block per unit (an (n, group) or a row). Sum in double, then the squared
//    deviations about that mean in double (two passes: exact, never E[x^2] - E[x]^2),
//    then the output. Units up to 44 KiB are kept in shared memory, so x is read from
//    memory once; larger ones are re-read from L2.
//  - split, when there are too few units to fill the GPU (N = 1 shapes): each block
//    takes the moments of a fixed chunk of a unit, one thread per unit merges its chunks
//    in order (Chan), and a third kernel writes the output.
//  - flat (norm_math.h): one block per unit, the unit in shared memory.
//  - cluster (Hopper; norm_math.h): channels-last, a cluster of blocks per sample (or per
//    slice of a sample's channels at small batch), each block a contiguous run of
//    positions; channels-first, a cluster per (n, group), each block a contiguous run of
//    it. The blocks merge their moments through distributed shared memory in rank order.
//  - warp rows (norm_math.h): [rows, D] layer / RMS norm, a warp per row in registers.
//
// x and y are float32, bfloat16 or float16 (cuda/storage.h: read as float, statistics as for
// float, the result rounded to nearest even). The half types take every plan but the
// channels-last cluster plan; shared memory holds x as stored.
#include <cooperative_groups.h>

#include <algorithm>
#include <type_traits>

#include "cuda/async_copy.h"
#include "cuda/norm_cluster_math.h"
#include "cuda/norm_math.h"
#include "cuda/ops.h"
#include "cuda/runtime.h"

namespace normkit {
namespace cuda {
namespace {

constexpr int kMaxWarps = 32;

// Sum over the block (whole warps, at most 1024 threads), identical on every thread; the
// tree is fixed by the thread index.
__device__ double BlockSum(double v, double* shared /* kMaxWarps + 1 */) {
  const int warps = blockDim.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double w = lane < warps ? shared[lane] : 0.0;
    for (int offset = 16; offset > 0; offset /= 2) w += __shfl_down_sync(0xffffffffu, w, offset);
    if (lane == 0) shared[kMaxWarps] = w;
  }
  __syncthreads();
  const double total = shared[kMaxWarps];
  __syncthreads();  // `shared` may be reused right away
  return total;
}

// Moments of elements [begin, end) of `unit`; every thread of the block gets them.
// With `cache`, the values are also kept there (index k - begin) for later passes.
template <class TX>
__device__ Moments ChunkMoments(const TX* x, const NormShape& s, int64_t unit, int64_t begin,
                                int64_t end, bool rms, float* cache, double* shared) {
  Moments m;
  m.count = static_cast<double>(end - begin);
  m.mean =
      BlockSum(ThreadSum(x, s, unit, begin, end, threadIdx.x, blockDim.x, rms, cache), shared) /
      m.count;
  if (rms) return m;  // mean of squares; no deviations needed
  m.m2 = BlockSum(ThreadDeviations(x, s, unit, begin, end, threadIdx.x, blockDim.x, m.mean, cache),
                  shared);
  return m;
}

// x and y of storage types TX / TY (cuda/storage.h); the cluster plans take float only.
template <class TX, class TY>
struct NormArgsOf {
  const TX* x;
  TY* y;
  const float* gamma;
  const float* beta;
  float eps;
  int32_t activation;
  bool rms;
  float* mean_out;
  float* rstd_out;
};
using NormKernelArgs = NormArgsOf<float, float>;

template <class Args>
__device__ void WriteStats(const Args& a, int64_t unit, const Moments& m, const UnitAffine& ua) {
  if (a.mean_out != nullptr) a.mean_out[unit] = static_cast<float>(m.mean);
  if (a.rstd_out != nullptr) a.rstd_out[unit] = ua.rstd;
}

__device__ double Variance(const Moments& m, bool rms) {
  return rms ? m.mean : m.m2 / m.count;
}

template <class TX, class TY>
__global__ void FusedNormKernel(NormArgsOf<TX, TY> a, NormShape s, bool cached) {
  extern __shared__ float dynamic_cache[];
  __shared__ double shared[kMaxWarps + 1];
  float* cache = cached ? dynamic_cache : nullptr;
  for (int64_t unit = blockIdx.x; unit < s.units; unit += gridDim.x) {
    const Moments m = ChunkMoments(a.x, s, unit, 0, s.count, a.rms, cache, shared);
    const UnitAffine ua = UnitAffine::From(m.mean, Variance(m, a.rms), a.eps, a.rms);
    if (threadIdx.x == 0) WriteStats(a, unit, m, ua);
    ThreadApply(a.x, a.y, s, unit, 0, s.count, threadIdx.x, blockDim.x, ua, a.gamma, a.beta,
                a.activation, cache);
    __syncthreads();  // the cache is refilled by the next unit
  }
}

// BlockSum of both sums at once (the same tree for each).
__device__ ShiftedSums BlockSums(ShiftedSums v, double* shared /* 2 * (kMaxWarps + 1) */) {
  const int warps = blockDim.x / 32;
  for (int offset = 16; offset > 0; offset /= 2) {
    v.s1 += __shfl_down_sync(0xffffffffu, v.s1, offset);
    v.s2 += __shfl_down_sync(0xffffffffu, v.s2, offset);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[2 * warp] = v.s1, shared[2 * warp + 1] = v.s2;
  __syncthreads();
  if (warp == 0) {
    ShiftedSums w;
    if (lane < warps) w.s1 = shared[2 * lane], w.s2 = shared[2 * lane + 1];
    for (int offset = 16; offset > 0; offset /= 2) {
      w.s1 += __shfl_down_sync(0xffffffffu, w.s1, offset);
      w.s2 += __shfl_down_sync(0xffffffffu, w.s2, offset);
    }
    if (lane == 0) shared[2 * kMaxWarps] = w.s1, shared[2 * kMaxWarps + 1] = w.s2;
  }
  __syncthreads();
  ShiftedSums total;
  total.s1 = shared[2 * kMaxWarps];
  total.s2 = shared[2 * kMaxWarps + 1];
  __syncthreads();  // `shared` may be reused right away
  return total;
}

// How the flat kernel fills its shared memory: through registers (FlatLoadSums), with
// asynchronous copies of one item each (Ampere and later, items of 4 elements: 16 bytes
// of float, 8 of a half type; every item in flight at once, channels-last units too), or
// with one bulk copy (Hopper, contiguous units of a multiple of 16 bytes). The last two
// sum the cache afterwards in FlatLoadSums' per-thread order: the same bits whichever
// fills it.
enum class FlatLoad { kRegisters, kAsyncCopy, kBulkCopy };

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// Items [first, first + items) of the unit, copied to `cache` with cp.async (this
// thread's share), then waits for them.
template <class TX>
__device__ void AsyncLoad(const TX* x, const FlatUnits& f, uint32_t unit, uint32_t first,
                          uint32_t items, TX* cache) {
  for (uint32_t q = threadIdx.x; q < items; q += blockDim.x) {
    if constexpr (sizeof(TX) == 4) {
      AsyncCopy16(cache + 4 * q, x + f.Offset(unit, 4 * (first + q)));
    } else {
      AsyncCopy8(cache + 4 * q, x + f.Offset(unit, 4 * (first + q)));
    }
  }
  AsyncCopyWaitAll();
  __syncthreads();
}
#endif
// The flat plan (norm_math.h): block `unit` holds its unit in shared memory, as stored.
template <FlatLoad kLoad, class TX, class TY>
__global__ void FlatNormKernel(NormArgsOf<TX, TY> a, FlatUnits f) {
  extern __shared__ __align__(16) unsigned char flat_smem[];
  TX* cache = reinterpret_cast<TX*>(flat_smem);
  __shared__ double shared[2 * (kMaxWarps + 1)];
  const uint32_t unit = blockIdx.x;
  const double count = f.count;
  float pivot;
  ShiftedSums s;
  bool cached = false;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kLoad == FlatLoad::kBulkCopy) {
    __shared__ uint64_t barrier;
    const uint32_t bytes = f.count * static_cast<uint32_t>(sizeof(TX));
    const BulkCopies copies(&barrier, bytes);
    if (threadIdx.x == 0) copies.Copy(cache, a.x + f.Offset(unit, 0), bytes);
    copies.Wait();
    cached = true;
  }
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (kLoad == FlatLoad::kAsyncCopy) {
    AsyncLoad(a.x, f, unit, 0, f.items, cache);
    cached = true;
  }
#endif
  if (cached) {
    pivot = a.rms ? 0.0f : Element<TX>::ToFloat(cache[0]);
    s = BlockSums(FlatCacheSums(cache, f, threadIdx.x, blockDim.x, pivot), shared);
  } else {
    pivot = a.rms ? 0.0f : Element<TX>::ToFloat(a.x[f.Offset(unit, 0)]);
    s = BlockSums(FlatLoadSums(a.x, f, unit, threadIdx.x, blockDim.x, pivot, cache), shared);
  }
  double mean, var;
  if (!FlatMoments(a.rms, s, count, true, &pivot, &mean, &var)) {
    s = BlockSums(FlatCacheSums(cache, f, threadIdx.x, blockDim.x, pivot), shared);
    FlatMoments(a.rms, s, count, false, &pivot, &mean, &var);
  }
  const UnitAffine ua = UnitAffine::From(mean, var, a.eps, a.rms);
  if (threadIdx.x == 0) {
    if (a.mean_out != nullptr) a.mean_out[unit] = static_cast<float>(mean);
    if (a.rstd_out != nullptr) a.rstd_out[unit] = ua.rstd;
  }
  FlatApply(cache, a.y, f, unit, threadIdx.x, blockDim.x, ua, a.gamma, a.beta, a.activation);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// The group sums of this block's part (the threads' LaneSums in `lane_sums`): each
// channel's lanes in lane order, then each group's channels, a warp per group (lane k
// takes channels k, k + 32, ..., then a fixed shuffle tree).
__device__ void ClusterBlockGroupSums(const ClusterUnits& p, double* lane_sums,
                                      double* group_sums) {
  __syncthreads();
  for (uint32_t c = threadIdx.x; c < p.C; c += blockDim.x) {
    double s1 = lane_sums[2 * c], s2 = lane_sums[2 * c + 1];
    for (uint32_t i = 1; i < p.lanes; ++i) {
      s1 += lane_sums[2 * (i * p.C + c)];
      s2 += lane_sums[2 * (i * p.C + c) + 1];
    }
    lane_sums[2 * c] = s1, lane_sums[2 * c + 1] = s2;
  }
  __syncthreads();
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (uint32_t g = warp; g < p.groups; g += warps) {
    double s1 = 0.0, s2 = 0.0;
    for (uint32_t k = lane; k < p.Cg; k += 32) {
      s1 += lane_sums[2 * (g * p.Cg + k)];
      s2 += lane_sums[2 * (g * p.Cg + k) + 1];
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      s1 += __shfl_down_sync(0xffffffffu, s1, offset);
      s2 += __shfl_down_sync(0xffffffffu, s2, offset);
    }
    if (lane == 0) group_sums[2 * g] = s1, group_sums[2 * g + 1] = s2;
  }
  __syncthreads();
}

// The moments at `mine` (this block's shared memory) of every block of the cluster,
// merged in rank order (Chan): every block that calls this gets the same bits. Four
// ranks' loads go out before the merges use them.
__device__ Moments MergeClusterMoments(cooperative_groups::cluster_group& cluster,
                                       const Moments* mine, uint32_t blocks) {
  Moments m;
  for (uint32_t r0 = 0; r0 < blocks; r0 += 4) {
    Moments part[4];
#pragma unroll
    for (uint32_t j = 0; j < 4; ++j) {
      if (r0 + j < blocks) part[j] = *cluster.map_shared_rank(mine, r0 + j);
    }
#pragma unroll
    for (uint32_t j = 0; j < 4; ++j) {
      if (r0 + j < blocks) m = MergeMoments(m, part[j]);
    }
  }
  return m;
}

// The block's pass over its rows about `pivots`: its sums of each group in `group_sums`.
__device__ void ClusterPass(const ClusterUnits& p, const float* x, const float* cache,
                            uint32_t rows, const float* pivots, double* lane_sums,
                            double* group_sums) {
  __syncthreads();  // the pivots
  if (threadIdx.x < p.Active()) {
    const uint32_t col = threadIdx.x % p.cols, lane = threadIdx.x / p.cols;
    float pivot[4];
    for (int l = 0; l < 4; ++l) pivot[l] = pivots[(4 * col + l) / p.Cg];
    const LaneSums sums = ClusterThreadSums(x, cache, p, rows, col, lane, pivot);
    for (int l = 0; l < 4; ++l) {
      double* at = lane_sums + 2 * (lane * p.C + 4 * col + l);
      at[0] = sums.s1[l], at[1] = sums.s2[l];
    }
  }
  ClusterBlockGroupSums(p, lane_sums, group_sums);
}
#endif

// The cluster plan (norm_math.h): cluster blockIdx.y is slice blockIdx.y % slices of
// sample blockIdx.y / slices, its block of rank r the positions [r * rows, (r + 1) * rows).
__global__ void ClusterNormKernel(NormKernelArgs a, ClusterUnits p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  __shared__ uint64_t barrier;
  cg::cluster_group cluster = cg::this_cluster();
  const uint32_t rank = cluster.block_rank(), n = blockIdx.y / p.slices;
  const uint32_t c0 = blockIdx.y % p.slices * p.C;  // the slice's first channel
  float* cache = reinterpret_cast<float*>(shared_bytes);
  double* lane_sums = reinterpret_cast<double*>(shared_bytes + p.LaneSumsOffset());
  double* group_sums = reinterpret_cast<double*>(shared_bytes + p.GroupSumsOffset());
  Moments* moments = reinterpret_cast<Moments*>(shared_bytes + p.MomentsOffset());
  UnitAffine* affine = reinterpret_cast<UnitAffine*>(shared_bytes + p.AffineOffset());
  float* pivots = reinterpret_cast<float*>(shared_bytes + p.PivotsOffset());
  bool* retry = reinterpret_cast<bool*>(shared_bytes + p.RetryOffset());

  const size_t first = (static_cast<size_t>(n) * p.positions + rank * p.rows) * p.stride + c0;
  const float* x = a.x + first;
  float* y = a.y + first;
  const uint32_t rows = p.RowsOf(rank);
  const uint32_t cached = rows < p.cached_rows ? rows : p.cached_rows;
  if (p.slices == 1) {  // contiguous rows: one bulk copy
    const uint32_t cached_bytes = cached * p.C * static_cast<uint32_t>(sizeof(float));
    const BulkCopies copies(&barrier, cached_bytes);
    if (threadIdx.x == 0 && cached_bytes > 0) copies.Copy(cache, x, cached_bytes);
    copies.Wait();
  } else {  // a segment of each row: 16 bytes a thread at a time
    for (uint32_t q = threadIdx.x; q < cached * p.cols; q += blockDim.x) {
      const uint32_t r = q / p.cols, col = q % p.cols;
      AsyncCopy16(cache + r * p.C + 4 * col, x + static_cast<size_t>(r) * p.stride + 4 * col);
    }
    AsyncCopyWaitAll();
    __syncthreads();
  }

  // The block's moments of each group. x is only read until the cluster barrier below,
  // which every block passes before it writes y (x may be y).
  const double count = static_cast<double>(p.Cg) * rows;
  for (uint32_t g = threadIdx.x; g < p.groups; g += blockDim.x) {
    pivots[g] = ClusterPivot(x, cache, p, rows, g);
  }
  ClusterPass(p, x, cache, rows, pivots, lane_sums, group_sums);
  int any_retry = 0;
  for (uint32_t g = threadIdx.x; g < p.groups; g += blockDim.x) {
    const ShiftedSums s{group_sums[2 * g], group_sums[2 * g + 1]};
    retry[g] = !ClusterMoments(s, count, true, &pivots[g], &moments[g]);
    any_retry |= retry[g];
  }
  if (__syncthreads_or(any_retry)) {
    ClusterPass(p, x, cache, rows, pivots, lane_sums, group_sums);
    for (uint32_t g = threadIdx.x; g < p.groups; g += blockDim.x) {
      const ShiftedSums s{group_sums[2 * g], group_sums[2 * g + 1]};
      if (retry[g]) ClusterMoments(s, count, false, &pivots[g], &moments[g]);
    }
  }
  cluster.sync();

  // Every block merges the cluster's moments of a group in rank order: the same bits in
  // each.
  for (uint32_t g = threadIdx.x; g < p.groups; g += blockDim.x) {
    const Moments m = MergeClusterMoments(cluster, moments + g, p.blocks);
    const UnitAffine ua = UnitAffine::From(m.mean, m.m2 / m.count, a.eps, false);
    affine[g] = ua;
    if (rank == 0) {
      const uint32_t unit = blockIdx.y * p.groups + g;  // n * G + the slice's groups + g
      if (a.mean_out != nullptr) a.mean_out[unit] = static_cast<float>(m.mean);
      if (a.rstd_out != nullptr) a.rstd_out[unit] = ua.rstd;
    }
  }
  // This block's moments stay in place until the whole cluster has read them: arrive
  // now, wait before leaving.
  cluster.barrier_arrive();
  __syncthreads();

  if (threadIdx.x < p.Active()) {
    const uint32_t col = threadIdx.x % p.cols, lane = threadIdx.x / p.cols;
    float mean_f[4], scale[4], shift[4];
    for (int l = 0; l < 4; ++l) {
      const uint32_t c = 4 * col + l;
      const UnitAffine ua = affine[c / p.Cg];
      mean_f[l] = ua.mean_f;
      scale[l] = ua.Scale(a.gamma != nullptr ? a.gamma[c0 + c] : 1.0f);
      shift[l] = ua.Shift(scale[l], a.beta != nullptr ? a.beta[c0 + c] : 0.0f);
    }
    ClusterThreadApply(x, cache, y, p, rows, col, lane, mean_f, scale, shift, a.activation);
  }
  cluster.barrier_wait();
#endif
}

// The cluster plan for channels-first units (norm_math.h): cluster blockIdx.y is unit
// `unit`, its block of rank r the items [r * run_items, (r + 1) * run_items).
// x and y of storage types TX / TY; the run is kept as stored.
template <class TX, class TY>
__global__ void ClusterRunNormKernel(NormArgsOf<TX, TY> a, FlatUnits f, ClusterRuns c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(16) unsigned char run_smem[];
  TX* run = reinterpret_cast<TX*>(run_smem);
  __shared__ double shared[2 * (kMaxWarps + 1)];
  __shared__ Moments moments;
  __shared__ UnitAffine affine;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const uint32_t rank = cluster.block_rank(), unit = blockIdx.y;
  const uint32_t first = rank * c.run_items, items = c.ItemsOf(rank);
  // cp.async, not the bulk copy: with one mbarrier-completed bulk copy here, synccheck
  // reported a missing mbarrier wait (H100, 2026-11-26) that the other bulk-copy kernels
  // do not show.
  AsyncLoad(a.x, f, unit, first, items, run);

  // FlatCacheSums over this block's items only.
  FlatUnits local = f;
  local.items = items;
  float pivot = RunPivot(run, 4 * items);
  const double count = 4.0 * items;
  ShiftedSums s = BlockSums(FlatCacheSums(run, local, threadIdx.x, blockDim.x, pivot), shared);
  Moments m;
  if (!ClusterMoments(s, count, true, &pivot, &m)) {  // the same branch in every thread
    s = BlockSums(FlatCacheSums(run, local, threadIdx.x, blockDim.x, pivot), shared);
    ClusterMoments(s, count, false, &pivot, &m);
  }
  if (threadIdx.x == 0) moments = m;
  cluster.sync();  // also: x is read, every block may write y (x may be y)

  if (threadIdx.x == 0) {
    const Moments merged = MergeClusterMoments(cluster, &moments, c.blocks);
    affine = UnitAffine::From(merged.mean, merged.m2 / merged.count, a.eps, false);
    if (rank == 0) {
      if (a.mean_out != nullptr) a.mean_out[unit] = static_cast<float>(merged.mean);
      if (a.rstd_out != nullptr) a.rstd_out[unit] = affine.rstd;
    }
  }
  cluster.barrier_arrive();  // `moments` stays until the cluster has read it
  __syncthreads();
  FlatApplyRun(run, a.y, f, unit, first, items, threadIdx.x, blockDim.x, affine, a.gamma, a.beta,
               a.activation);
  cluster.barrier_wait();
#endif
}

// Launches `kernel` on a grid of `blocks` x `units` blocks in clusters of `blocks`, true;
// or false, launching nothing, where the GPU cannot hold one such cluster.
template <class... Params, class... Args>
bool LaunchOnClusters(void (*kernel)(Params...), uint32_t blocks, uint32_t units, uint32_t threads,
                      size_t shared_bytes, cudaStream_t stream, cudaError_t* error, Args... args) {
  if ((*error = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(shared_bytes))) != cudaSuccess ||
      (*error = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1)) !=
          cudaSuccess) {
    return true;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks, units, 1);
  config.blockDim = dim3(threads, 1, 1);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute cluster;
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = blocks;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess || clusters < 1) {
    cudaGetLastError();  // not sticky
    return false;
  }
  *error = cudaLaunchKernelEx(&config, kernel, args...);
  return true;
}

// What the plans ask of the current device, queried once per call.
struct DeviceLimits {
  int32_t major;  // compute capability
  int64_t multiprocessors;
  int64_t max_shared;  // dynamic shared memory a block may opt into
};

// Launches a cluster plan (channels-last: per sample, float32 only; channels-first: per
// unit), true; false to fall back to the other plans (no Hopper, a shape the plans do not
// take, or no cluster that fits the GPU). Clusters of 16 blocks are tried first, then
// smaller.
template <class TX, class TY>
bool LaunchClusterNorm(const NormArgsOf<TX, TY>& a, const NormShape& s, bool aligned,
                       const DeviceLimits& device, cudaStream_t stream, cudaError_t* error) {
  *error = cudaSuccess;
  if (device.major < 9) return false;
  for (uint32_t max_blocks = kClusterMaxBlocks; max_blocks >= 1; max_blocks /= 2) {
    bool launched;
    uint32_t blocks;
    if (s.channels_last) {
      if constexpr (!std::is_same<TX, float>::value || !std::is_same<TY, float>::value) {
        return false;
      } else {
        ClusterUnits p;
        if (!ClusterUnits::Of(s, aligned, device.max_shared, device.multiprocessors, max_blocks,
                              &p)) {
          return false;
        }
        blocks = p.blocks;
        launched = LaunchOnClusters(ClusterNormKernel, p.blocks, p.samples * p.slices, p.threads,
                                    p.SharedBytes(), stream, error, a, p);
      }
    } else {
      const FlatUnits f = FlatUnits::Of(s, aligned);
      ClusterRuns c;
      if (!ClusterRuns::Of(s, f, device.max_shared, device.multiprocessors, max_blocks, &c,
                           sizeof(TX))) {
        return false;
      }
      blocks = c.blocks;
      launched = LaunchOnClusters(ClusterRunNormKernel<TX, TY>, c.blocks, c.units, c.threads,
                                  c.SharedBytes(), stream, error, a, f, c);
    }
    if (launched) return true;
    if (blocks < max_blocks) return false;  // smaller clusters would not change the plan
  }
  return false;
}

__device__ int64_t ChunkEnd(int64_t begin, int64_t chunk, int64_t count) {
  return begin + chunk < count ? begin + chunk : count;
}

// Block (unit, q) -> moments of chunk q of the unit.
template <class TX, class TY>
__global__ void PartialMomentsKernel(NormArgsOf<TX, TY> a, NormShape s, int64_t chunks,
                                     int64_t chunk, Moments* partial) {
  __shared__ double shared[kMaxWarps + 1];
  for (int64_t b = blockIdx.x; b < s.units * chunks; b += gridDim.x) {
    const int64_t unit = b / chunks, begin = (b - unit * chunks) * chunk;
    const Moments m =
        ChunkMoments(a.x, s, unit, begin, ChunkEnd(begin, chunk, s.count), a.rms, nullptr, shared);
    if (threadIdx.x == 0) partial[b] = m;
  }
}

// One thread per unit merges its chunks in chunk order.
template <class TX, class TY>
__global__ void MergeMomentsKernel(NormArgsOf<TX, TY> a, NormShape s, int64_t chunks,
                                   const Moments* partial, UnitAffine* affine) {
  for (int64_t unit = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; unit < s.units;
       unit += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Moments m = partial[unit * chunks];
    for (int64_t q = 1; q < chunks; ++q) m = MergeMoments(m, partial[unit * chunks + q]);
    const UnitAffine ua = UnitAffine::From(m.mean, Variance(m, a.rms), a.eps, a.rms);
    WriteStats(a, unit, m, ua);
    affine[unit] = ua;
  }
}

template <class TX, class TY>
__global__ void ApplyKernel(NormArgsOf<TX, TY> a, NormShape s, int64_t chunks, int64_t chunk,
                            const UnitAffine* affine) {
  for (int64_t b = blockIdx.x; b < s.units * chunks; b += gridDim.x) {
    const int64_t unit = b / chunks, begin = (b - unit * chunks) * chunk;
    ThreadApply(a.x, a.y, s, unit, begin, ChunkEnd(begin, chunk, s.count), threadIdx.x, blockDim.x,
                affine[unit], a.gamma, a.beta, a.activation, nullptr);
  }
}

// A lane's float, summed over the warp in double by a fixed butterfly: every lane gets
// the same bits (each step adds the same two values in every pair of lanes).
__device__ double WarpSum(float v) {
  double s = v;
  for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
  return s;
}

// The warp-per-row plan (norm_math.h): warp w of the grid takes rows w, w + warps, ...
// A lane's channels are the same in every row, so its gamma and beta (16-byte aligned,
// or null: 1 and 0) are loaded once, as float4 items.
template <uint32_t kItems, class TX, class TY>
__global__ void WarpRowsKernel(NormArgsOf<TX, TY> a, uint32_t rows, uint32_t D) {
  const uint32_t lane = threadIdx.x % 32, warps_per_block = blockDim.x / 32;
  const uint32_t n = WarpRowLaneItems(D, lane);
  const double count = D;
  Float4 gamma[kItems], beta[kItems];
#pragma unroll
  for (uint32_t i = 0; i < kItems; ++i) {
    if (i >= n) break;
    const uint32_t c = 4 * (lane + 32 * i);
    gamma[i] = a.gamma != nullptr ? LoadFloat4(a.gamma + c) : Float4{1.0f, 1.0f, 1.0f, 1.0f};
    beta[i] = a.beta != nullptr ? LoadFloat4(a.beta + c) : Float4{0.0f, 0.0f, 0.0f, 0.0f};
  }
  for (uint32_t row = blockIdx.x * warps_per_block + threadIdx.x / 32; row < rows;
       row += gridDim.x * warps_per_block) {
    const size_t first = static_cast<size_t>(row) * D;
    Float4 v[kItems];
#pragma unroll
    for (uint32_t i = 0; i < kItems; ++i) {
      if (i < n) v[i] = Load4(a.x + first + 4 * (lane + 32 * i));
    }
    float m1 = 0.0f, s1, s2;
    if (!a.rms) {
      const float pivot = __shfl_sync(0xffffffffu, v[0].x, 0);  // the row's first element
      WarpRowLaneSums(v, n, pivot, false, &s1, &s2);
      m1 = WarpRowFirstMean(pivot, WarpSum(s1), count);
    }
    WarpRowLaneSums(v, n, m1, true, &s1, &s2);
    const double c1 = a.rms ? 0.0 : WarpSum(s1), q = WarpSum(s2);
    double mean, var;
    WarpRowMoments(a.rms, m1, c1, q, count, &mean, &var);
    const UnitAffine ua = UnitAffine::From(mean, var, a.eps, a.rms);
    if (lane == 0) {
      Moments m;
      m.count = count, m.mean = mean, m.m2 = var * count;
      WriteStats(a, row, m, ua);
    }
#pragma unroll
    for (uint32_t i = 0; i < kItems; ++i) {
      if (i >= n) break;
      const uint32_t c = 4 * (lane + 32 * i);
      const int32_t act = a.activation;
      Store4(a.y + first + c, {ua.Apply(v[i].x, gamma[i].x, beta[i].x, act),
                               ua.Apply(v[i].y, gamma[i].y, beta[i].y, act),
                               ua.Apply(v[i].z, gamma[i].z, beta[i].z, act),
                               ua.Apply(v[i].w, gamma[i].w, beta[i].w, act)});
    }
  }
}

constexpr int64_t kMaxGrid = 1 << 30;

unsigned Blocks(int64_t work) {
  return static_cast<unsigned>(std::min(work, kMaxGrid));
}

// Norm for x and y of storage types TX / TY.
template <class TX, class TY>
normkit_status NormOf(const char* op, cudaStream_t stream, const TensorView& x, const TensorView& y,
                      const NormArgs& args, bool rows) {
  constexpr bool kFloat = std::is_same<TX, float>::value && std::is_same<TY, float>::value;
  const NormShape s =
      rows ? NormShape::ForRows(x.batch, x.channels)
           : NormShape::ForGroups(x.batch, x.channels, x.spatial, args.groups, x.channels_last());
  const NormArgsOf<TX, TY> a{static_cast<const TX*>(x.data),
                             static_cast<TY*>(y.data),
                             args.gamma,
                             args.beta,
                             args.eps,
                             args.activation,
                             args.rms,
                             args.mean,
                             args.rstd};

  // x and y on a boundary of 4 of their elements (16 bytes for float, 8 for the half types).
  const bool aligned = reinterpret_cast<uintptr_t>(x.data) % (4 * sizeof(TX)) == 0 &&
                       reinterpret_cast<uintptr_t>(y.data) % (4 * sizeof(TY)) == 0;
  const bool params_aligned =
      (reinterpret_cast<uintptr_t>(args.gamma) | reinterpret_cast<uintptr_t>(args.beta)) % 16 == 0;
  if (rows && UseWarpRows(s, aligned && params_aligned)) {
    const uint32_t items = static_cast<uint32_t>((s.count / 4 + 31) / 32);
    const auto kernel = items <= 4   ? WarpRowsKernel<4, TX, TY>
                        : items <= 8 ? WarpRowsKernel<8, TX, TY>
                                     : WarpRowsKernel<kWarpRowItems, TX, TY>;
    constexpr int64_t kWarpsPerBlock = kBlockThreads / 32;
    const unsigned blocks = Blocks((s.units + kWarpsPerBlock - 1) / kWarpsPerBlock);
    kernel<<<blocks, kBlockThreads, 0, stream>>>(a, static_cast<uint32_t>(s.units),
                                                 static_cast<uint32_t>(s.count));
    return LaunchStatus(op);
  }
  const DeviceLimits device{ComputeCapabilityMajor(), MultiprocessorCount(), MaxDynamicShared()};
  const NormPlan plan = PlanNorm(s, device.multiprocessors);
  const bool flat = UseFlatNorm(s, plan, device.max_shared, sizeof(TX));
  // A cluster plan where the flat plan does not apply (few large groups: H100,
  // 1x32x112x112 G=8 NHWC 54 -> 18 us; H200, against the split plan in one run, NCHW
  // 44 -> 11-12 us, 1x512x64x64 G=32 58 -> 20 us, 1x128x256x256 108 -> 44 us) or, channels-last,
  // reads 4 bytes a position (instance norm 8x64x128x128: 0.13 -> 0.35 of a copy). Where the flat
  // plan reads 32 bytes a position it stays faster (128x256x28x28 G=32 NHWC: 0.72 against 0.52,
  // 32x512x56x56 0.67 against 0.52).
  // The channels-last cluster kernel reads and writes float only; the channels-first one
  // keeps its run as stored.
  if (!rows && !args.rms && (!flat || (s.channels_last && s.Cg == 1)) &&
      (kFloat || !s.channels_last)) {
    cudaError_t error;
    if (LaunchClusterNorm(a, s, aligned, device, stream, &error)) {
      return error != cudaSuccess ? CudaFail(op, "the cluster group norm launch", error)
                                  : LaunchStatus(op);
    }
  }
  if (flat) {
    const int64_t unit_bytes = s.count * static_cast<int64_t>(sizeof(TX));
    const FlatUnits f = FlatUnits::Of(s, aligned);
    // Asynchronous copies pay off where one batch of register loads per thread cannot
    // hold the unit (H100, NHWC 32x512x56x56 G=32: 0.56 -> 0.67 of a copy; on
    // 128x256x28x28, 4 items a thread, they measured 0.70 against 0.73). The bulk copy
    // needs a unit of whole 16-byte pieces at a 16-byte boundary (always so for float
    // items; a half unit of a multiple of 8 elements).
    // Half units take half the shared memory: with half the threads (8 items each) a
    // multiprocessor holds twice the blocks, so twice the units' loads are in flight.
    const int threads = FlatThreads(f, sizeof(TX) == 2 ? 8 : 4);
    const bool big = f.items > kFlatBatch * static_cast<uint32_t>(threads);
    const bool bulk = f.vector && !f.channels_last && device.major >= 9 && unit_bytes % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
    const auto kernel = bulk ? FlatNormKernel<FlatLoad::kBulkCopy, TX, TY>
                        : f.vector && big && device.major >= 8
                            ? FlatNormKernel<FlatLoad::kAsyncCopy, TX, TY>
                            : FlatNormKernel<FlatLoad::kRegisters, TX, TY>;
    if (unit_bytes > 48 * 1024) {
      const cudaError_t e = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(unit_bytes));
      if (e != cudaSuccess) return CudaFail(op, "cudaFuncSetAttribute", e);
    }
    kernel<<<static_cast<unsigned>(s.units), threads, unit_bytes, stream>>>(a, f);
    return LaunchStatus(op);
  }
  const int64_t unit_bytes = s.count * static_cast<int64_t>(sizeof(float));  // a float cache
  if (plan.chunks == 1) {
    const bool cached = unit_bytes <= kCachedUnitBytes;
    FusedNormKernel<<<Blocks(s.units), kBlockThreads, cached ? unit_bytes : 0, stream>>>(a, s,
                                                                                         cached);
    return LaunchStatus(op);
  }

  const int64_t chunks = plan.chunks, chunk = plan.chunk;
  Scratch scratch(stream);
  void* buffer = nullptr;
  NORMKIT_RETURN_IF_ERROR(scratch.Allocate(
      op, s.units * chunks * sizeof(Moments) + s.units * sizeof(UnitAffine) + 16, &buffer));
  auto* partial = static_cast<Moments*>(buffer);
  auto* affine = reinterpret_cast<UnitAffine*>(partial + s.units * chunks);
  PartialMomentsKernel<<<Blocks(s.units * chunks), kBlockThreads, 0, stream>>>(a, s, chunks, chunk,
                                                                               partial);
  MergeMomentsKernel<<<GridFor(s.units), kBlockThreads, 0, stream>>>(a, s, chunks, partial, affine);
  ApplyKernel<<<Blocks(s.units * chunks), kBlockThreads, 0, stream>>>(a, s, chunks, chunk, affine);
  return LaunchStatus(op);
}

}  // namespace

normkit_status Norm(const char* op, const normkit_context* ctx, const TensorView& x,
                    const TensorView& y, const NormArgs& args, bool rows) {
  DeviceScope scope(x.device_index);
  if (scope.status() != cudaSuccess) return CudaFail(op, "cudaSetDevice", scope.status());
  const cudaStream_t stream = StreamOf(ctx);
  return DispatchStoragePair(x.dtype, y.dtype, [&](auto tx, auto ty) {
    return NormOf<decltype(tx), decltype(ty)>(op, stream, x, y, args, rows);
  });
}

}  // namespace cuda
}  // namespace normkit
