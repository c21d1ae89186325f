// SPDX-License-Identifier: Apache-2.0
// CUDA affine: y = x * scale + shift, per channel or per sample and channel, either
// layout; one fused multiply-add per element, as on CPU, so every launch shape gives the
// same bits. x and y are float32, bfloat16 or float16 (cuda/storage.h: float math, each
// result rounded to nearest-even, as on CPU). Tensors below 2^31 elements run the flat
// kernel: 16 bytes per load where the layout allows it, 4 loads in flight per thread before any
// store (a memory-bound kernel needs that many bytes in flight to reach copy speed), and the
// parameter index from 32-bit multiply-high divisions. Larger tensors take the 64-bit chunked
// kernel.

#include <vector>

#include "core/batch_norm_math.h"
#include "cuda/affine_math.h"
#include "cuda/ops.h"
#include "cuda/runtime.h"
#include "cuda/storage.h"

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

// kLanes elements of T moved as one load or store (16 bytes: float4, or 8 halves).
template <class T, int kLanes>
struct alignas(kLanes * sizeof(T)) Lanes {
  T v[kLanes];
};

// The kLanes parameters p, p + 1, ... of a channels-last vector (p a multiple of kLanes,
// the array 16-byte aligned): float4 loads instead of kLanes scalar ones (half vectors
// carry 8 channels in 16 bytes, and 16 scalar parameter loads a vector made the NHWC
// kernel issue-bound at half the copy's speed).
template <int kLanes>
__device__ void ParamLanes(const float* a, uint32_t p, float absent, float (&out)[kLanes]) {
  if (a == nullptr) {
#pragma unroll
    for (int l = 0; l < kLanes; ++l) out[l] = absent;
    return;
  }
  const auto* v = reinterpret_cast<const float4*>(a + p);
#pragma unroll
  for (int q = 0; q < kLanes / 4; ++q) {
    const float4 f = v[q];
    out[4 * q] = f.x, out[4 * q + 1] = f.y, out[4 * q + 2] = f.z, out[4 * q + 3] = f.w;
  }
}

// Items (vectors of kLanes elements) [block * kFlatBlockItems, +kFlatBlockItems), thread t
// taking t, t + kBlockThreads, ...; `count` items in the tensor. x and y may be of
// different storage (float math, each result rounded to nearest-even into TY).
// kChannelVector: channels-last lanes whose parameters load as float4s (ParamLanes).
template <int kLanes, bool kChannelVector, class TX, class TY>
__global__ void AffineFlatKernel(const TX* x, TY* y, const float* center, const float* scale,
                                 const float* shift, AffineIndex ix, uint32_t count) {
  using XV = Lanes<TX, kLanes>;
  using YV = Lanes<TY, kLanes>;
  const uint32_t first = blockIdx.x * kFlatBlockItems + threadIdx.x;
  const auto* xv = reinterpret_cast<const XV*>(x);
  auto* yv = reinterpret_cast<YV*>(y);
  XV v[kUnroll];
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    const uint32_t i = first + j * kBlockThreads;
    if (i < count) v[j] = xv[i];
  }
#pragma unroll
  for (int j = 0; j < kUnroll; ++j) {
    const uint32_t i = first + j * kBlockThreads;
    if (i >= count) break;
    const uint32_t p = ix.Param(kLanes * i);
    YV r;
    if constexpr (kChannelVector) {
      float m[kLanes], sc[kLanes], sh[kLanes];
      ParamLanes(center, p, 0.0f, m);
      ParamLanes(scale, p, 1.0f, sc);
      ParamLanes(shift, p, 0.0f, sh);
#pragma unroll
      for (int l = 0; l < kLanes; ++l) {
        r.v[l] = Element<TY>::FromFloat(fmaf(Element<TX>::ToFloat(v[j].v[l]) - m[l], sc[l], sh[l]));
      }
    } else {
      const uint32_t step = ix.channels_last ? 1 : 0;  // lanes are channels c, c+1, ..., or one
#pragma unroll
      for (int l = 0; l < kLanes; ++l) {
        r.v[l] = Element<TY>::FromFloat(
            AffineOf(Element<TX>::ToFloat(v[j].v[l]), center, scale, shift, p + l * step));
      }
    }
    yv[i] = r;
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

template <class TX, class TY>
__global__ void AffineKernel(const TX* x, TY* y, const float* center, const float* scale,
                             const float* shift, AffineShape shape) {
  AffineThread(x, y, scale, shift, shape, blockIdx.x, threadIdx.x, blockDim.x, center);
}

// The kernels for one storage pair. Vectors of 16 bytes of the wider element (4 floats,
// or 8 halves when both sides are half) where alignment and layout allow.
template <class TX, class TY>
normkit_status AffineTyped(const char* op, cudaStream_t stream, const TensorView& x,
                           const TensorView& y, const float* scale, const float* shift,
                           bool per_sample, const float* center) {
  constexpr int kLanes = 16 / (sizeof(TX) > sizeof(TY) ? sizeof(TX) : sizeof(TY));
  const int64_t numel = x.batch * x.channels * x.spatial;
  const auto* xd = static_cast<const TX*>(x.data);
  auto* yd = static_cast<TY*>(y.data);
  if (numel < kMaxIndex32) {
    const AffineIndex ix = AffineIndex::Of(x.channels, x.spatial, per_sample, x.channels_last());
    const bool vector = AffineVectorizable(x.channels, x.spatial, x.channels_last(), xd, sizeof(TX),
                                           yd, sizeof(TY), kLanes);
    const auto count = static_cast<uint32_t>(vector ? numel / kLanes : numel);
    const unsigned blocks = (count + kFlatBlockItems - 1) / kFlatBlockItems;
    const auto aligned16 = [](const float* a) { return reinterpret_cast<uintptr_t>(a) % 16 == 0; };
    const bool channel_vector =
        vector && x.channels_last() && aligned16(center) && aligned16(scale) && aligned16(shift);
    if (channel_vector) {
      AffineFlatKernel<kLanes, true>
          <<<blocks, kBlockThreads, 0, stream>>>(xd, yd, center, scale, shift, ix, count);
    } else if (vector) {
      AffineFlatKernel<kLanes, false>
          <<<blocks, kBlockThreads, 0, stream>>>(xd, yd, center, scale, shift, ix, count);
    } else {
      AffineFlatKernel<1, false>
          <<<blocks, kBlockThreads, 0, stream>>>(xd, yd, center, scale, shift, ix, count);
    }
    return LaunchStatus(op);
  }
  const AffineShape shape = AffineShape::Of(x.channels, x.spatial, per_sample, x.channels_last());
  AffineKernel<<<static_cast<unsigned>(x.batch * shape.chunks), kBlockThreads, 0, stream>>>(
      xd, yd, center, scale, shift, shape);
  return LaunchStatus(op);
}

}  // namespace

normkit_status Affine(const char* op, const normkit_context* ctx, const TensorView& x,
                      const TensorView& y, const float* scale, const float* shift, bool per_sample,
                      const float* center) {
  DeviceScope scope(x.device_index);
  if (scope.status() != cudaSuccess) return CudaFail(op, "cudaSetDevice", scope.status());
  const cudaStream_t stream = StreamOf(ctx);
  return DispatchStoragePair(x.dtype, y.dtype, [&](auto tx, auto ty) {
    return AffineTyped<decltype(tx), decltype(ty)>(op, stream, x, y, scale, shift, per_sample,
                                                   center);
  });
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
