// SPDX-License-Identifier: Apache-2.0
// CUDA affine: y = x * scale + shift, per channel or per sample and channel, either
// layout; one fused multiply-add per element, as on CPU, so every launch shape gives the
// same bits. Tensors below 2^31 elements run the flat kernel: 4 floats per load where
// the layout allows it, 4 loads in flight per thread before any store (a memory-bound
// kernel needs that many bytes in flight to reach copy speed), and the parameter index
// from 32-bit multiply-high divisions. Larger tensors take the 64-bit chunked kernel.

#include <vector>

#include "core/batch_norm_math.h"
#include "cuda/affine_math.h"
#include "cuda/ops.h"
#include "cuda/runtime.h"

namespace normkit {
namespace cuda {
namespace {

constexpr int kUnroll = 4;
constexpr uint32_t kFlatBlockItems = kBlockThreads * kUnroll;

__device__ float Param(const float* p, uint32_t i, float absent) {
  return p != nullptr ? p[i] : absent;
}

// (x - center) * scale + shift, one FMA (x - 0 is x: the same bits without a center).
__device__ float AffineOf(float x, const float* center, const float* scale, const float* shift,
                          uint32_t p) {
  return fmaf(x - Param(center, p, 0.0f), Param(scale, p, 1.0f), Param(shift, p, 0.0f));
}

// Items (float4 vectors, or floats) [block * kFlatBlockItems, +kFlatBlockItems), thread t
// taking t, t + kBlockThreads, ...; `count` items in the tensor.
template <bool kVector>
__global__ void AffineFlatKernel(const float* x, float* y, const float* center, const float* scale,
                                 const float* shift, AffineIndex ix, uint32_t count) {
  const uint32_t first = blockIdx.x * kFlatBlockItems + threadIdx.x;
  if constexpr (kVector) {
    const auto* xv = reinterpret_cast<const float4*>(x);
    auto* yv = reinterpret_cast<float4*>(y);
    float4 v[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const uint32_t i = first + j * kBlockThreads;
      if (i < count) v[j] = xv[i];
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const uint32_t i = first + j * kBlockThreads;
      if (i >= count) break;
      const uint32_t p = ix.Param(4 * i);
      const uint32_t step = ix.channels_last ? 1 : 0;  // lanes are channels c..c+3, or one
      float4 r;
      r.x = AffineOf(v[j].x, center, scale, shift, p);
      r.y = AffineOf(v[j].y, center, scale, shift, p + step);
      r.z = AffineOf(v[j].z, center, scale, shift, p + 2 * step);
      r.w = AffineOf(v[j].w, center, scale, shift, p + 3 * step);
      yv[i] = r;
    }
  } else {
    float v[kUnroll];
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const uint32_t i = first + j * kBlockThreads;
      if (i < count) v[j] = x[i];
    }
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
      const uint32_t i = first + j * kBlockThreads;
      if (i >= count) break;
      const uint32_t p = ix.Param(i);
      y[i] = AffineOf(v[j], center, scale, shift, p);
    }
  }
}

// scale = gamma / sqrt(var + eps), shift = beta - mean * scale in float:
// cpu::BatchNormScaleShift's formula, with the _rn intrinsics so that nvcc cannot
// contract it into an FMA the CPU does not use (same bits as the CPU fold).
// Centered (running means far from the spread, FoldsExactly false): shift = beta, for
// (x - mean) * scale + beta.
__global__ void BatchNormFoldKernel(const float* gamma, const float* beta, const float* mean,
                                    const float* var, float eps, int64_t C, bool centered,
                                    float* scale, float* shift) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const float g = gamma != nullptr ? gamma[c] : 1.0f;
  const float b = beta != nullptr ? beta[c] : 0.0f;
  const float s = __fdiv_rn(g, __fsqrt_rn(__fadd_rn(var[c], eps)));
  scale[c] = s;
  shift[c] = centered ? b : __fsub_rn(b, __fmul_rn(mean[c], s));
}

__global__ void AffineKernel(const float* x, float* y, const float* center, const float* scale,
                             const float* shift, AffineShape shape) {
  AffineThread(x, y, scale, shift, shape, blockIdx.x, threadIdx.x, blockDim.x, center);
}

}  // namespace

normkit_status Affine(const char* op, const normkit_context* ctx, const TensorView& x,
                      const TensorView& y, const float* scale, const float* shift, bool per_sample,
                      const float* center) {
  DeviceScope scope(x.device_index);
  if (scope.status() != cudaSuccess) return CudaFail(op, "cudaSetDevice", scope.status());
  const int64_t numel = x.batch * x.channels * x.spatial;
  const cudaStream_t stream = StreamOf(ctx);
  const auto* xd = static_cast<const float*>(x.data);
  auto* yd = static_cast<float*>(y.data);
  if (numel < kMaxIndex32) {
    const AffineIndex ix = AffineIndex::Of(x.channels, x.spatial, per_sample, x.channels_last());
    const bool vector = AffineVectorizable(x.channels, x.spatial, x.channels_last(), xd, yd);
    const auto count = static_cast<uint32_t>(vector ? numel / 4 : numel);
    const unsigned blocks = (count + kFlatBlockItems - 1) / kFlatBlockItems;
    if (vector) {
      AffineFlatKernel<true>
          <<<blocks, kBlockThreads, 0, stream>>>(xd, yd, center, scale, shift, ix, count);
    } else {
      AffineFlatKernel<false>
          <<<blocks, kBlockThreads, 0, stream>>>(xd, yd, center, scale, shift, ix, count);
    }
    return LaunchStatus(op);
  }
  const AffineShape shape = AffineShape::Of(x.channels, x.spatial, per_sample, x.channels_last());
  AffineKernel<<<static_cast<unsigned>(x.batch * shape.chunks), kBlockThreads, 0, stream>>>(
      xd, yd, center, scale, shift, shape);
  return LaunchStatus(op);
}

normkit_status BatchNormInference(const char* op, const normkit_context* ctx, const TensorView& x,
                                  const TensorView& y, const float* gamma, const float* beta,
                                  const float* mean, const float* var, float eps,
                                  const std::function<normkit_status(const float*)>& validate) {
  DeviceScope scope(x.device_index);
  if (scope.status() != cudaSuccess) return CudaFail(op, "cudaSetDevice", scope.status());
  const cudaStream_t stream = StreamOf(ctx);
  const int64_t C = x.channels;
  Scratch scratch(stream);
  void* buffer = nullptr;
  NORMKIT_RETURN_IF_ERROR(scratch.Allocate(op, 2 * C * sizeof(float), &buffer));
  auto* params = static_cast<float*>(buffer);
  std::vector<float> host_var(static_cast<size_t>(C)), host_mean(static_cast<size_t>(C));
  NORMKIT_RETURN_IF_ERROR(
      CopyToHost(op, ctx, x.device_index, var, C * sizeof(float), host_var.data()));
  NORMKIT_RETURN_IF_ERROR(validate(host_var.data()));
  NORMKIT_RETURN_IF_ERROR(
      CopyToHost(op, ctx, x.device_index, mean, C * sizeof(float), host_mean.data()));
  bool centered = false;
  for (int64_t c = 0; c < C && !centered; ++c) {
    centered = !FoldsExactly(host_mean[c], host_var[c], eps);
  }
  BatchNormFoldKernel<<<static_cast<unsigned>((C + kBlockThreads - 1) / kBlockThreads),
                        kBlockThreads, 0, stream>>>(gamma, beta, mean, var, eps, C, centered,
                                                    params, params + C);
  NORMKIT_RETURN_IF_ERROR(LaunchStatus(op));
  return Affine(op, ctx, x, y, params, params + C, false, centered ? mean : nullptr);
}

}  // namespace cuda
}  // namespace normkit
