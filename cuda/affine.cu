// SPDX-License-Identifier: Apache-2.0
// CUDA affine: y = x * scale + shift, per channel or per sample and channel, either
// layout. Each block owns a fixed chunk of one sample (chunks from the shape only), so
// results never depend on the launch; one fused multiply-add per element, as on CPU.

#include "cuda/affine_math.h"
#include "cuda/ops.h"
#include "cuda/runtime.h"

namespace normkit {
namespace cuda {
namespace {

__global__ void AffineKernel(const float* x, float* y, const float* scale, const float* shift,
                             AffineShape shape) {
  AffineThread(x, y, scale, shift, shape, blockIdx.x, threadIdx.x, blockDim.x);
}

}  // namespace

normkit_status Affine(const char* op, const normkit_context* ctx, const TensorView& x,
                      const TensorView& y, const float* scale, const float* shift,
                      bool per_sample) {
  DeviceScope scope(x.device_index);
  if (scope.status() != cudaSuccess) return CudaFail(op, "cudaSetDevice", scope.status());
  const AffineShape shape = AffineShape::Of(x.channels, x.spatial, per_sample, x.channels_last());
  AffineKernel<<<static_cast<unsigned>(x.batch * shape.chunks), kBlockThreads, 0, StreamOf(ctx)>>>(
      static_cast<const float*>(x.data), static_cast<float*>(y.data), scale, shift, shape);
  return LaunchStatus(op);
}

normkit_status AffineHostParams(const char* op, const normkit_context* ctx, const TensorView& x,
                                const TensorView& y, const float* host_scale,
                                const float* host_shift) {
  DeviceScope scope(x.device_index);
  if (scope.status() != cudaSuccess) return CudaFail(op, "cudaSetDevice", scope.status());
  const cudaStream_t stream = StreamOf(ctx);
  const int64_t C = x.channels;
  Scratch scratch(stream);
  void* buffer = nullptr;
  NORMKIT_RETURN_IF_ERROR(scratch.Allocate(op, 2 * C * sizeof(float), &buffer));
  auto* params = static_cast<float*>(buffer);
  // Pageable sources: cudaMemcpyAsync returns once the host buffers are staged.
  cudaError_t error =
      cudaMemcpyAsync(params, host_scale, C * sizeof(float), cudaMemcpyHostToDevice, stream);
  if (error == cudaSuccess) {
    error =
        cudaMemcpyAsync(params + C, host_shift, C * sizeof(float), cudaMemcpyHostToDevice, stream);
  }
  if (error != cudaSuccess) return CudaFail(op, "uploading the folded scale / shift", error);
  return Affine(op, ctx, x, y, params, params + C, false);
}

}  // namespace cuda
}  // namespace normkit
