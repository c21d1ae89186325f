// SPDX-License-Identifier: Apache-2.0
// CUDA affine: y = x * scale + shift, per channel or per sample and channel, either
// layout. Each block owns a fixed chunk of one sample (chunks from the shape only), so
// results never depend on the launch; one fused multiply-add per element, as on CPU.
#include <vector>

#include "cuda/channel_cursor.h"
#include "cuda/ops.h"
#include "cuda/runtime.h"

namespace normkit {
namespace cuda {
namespace {

constexpr int64_t kChunkElems = 8192;  // 32 elements per thread

__global__ void AffineKernel(const float* __restrict__ x, float* __restrict__ y,
                             const float* __restrict__ scale, const float* __restrict__ shift,
                             int64_t C, int64_t spatial, int64_t chunks, bool per_sample,
                             bool channels_last) {
  const int64_t sample_elems = C * spatial;
  const int64_t n = blockIdx.x / chunks;
  const int64_t begin = (blockIdx.x - n * chunks) * kChunkElems;
  const int64_t end = begin + kChunkElems < sample_elems ? begin + kChunkElems : sample_elems;
  const int64_t param_base = per_sample ? n * C : 0;
  const float* xs = x + n * sample_elems;
  float* ys = y + n * sample_elems;
  ChannelCursor cursor(begin + threadIdx.x, blockDim.x, C, spatial, channels_last);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x, cursor.Next()) {
    const int64_t p = param_base + cursor.channel();
    const float s = scale != nullptr ? scale[p] : 1.0f;
    const float b = shift != nullptr ? shift[p] : 0.0f;
    ys[i] = fmaf(xs[i], s, b);
  }
}

}  // namespace

normkit_status Affine(const char* op, const normkit_context* ctx, const TensorView& x,
                      const TensorView& y, const float* scale, const float* shift,
                      bool per_sample) {
  DeviceScope scope(x.device_index);
  if (scope.status() != cudaSuccess) return CudaFail(op, "cudaSetDevice", scope.status());
  const int64_t chunks = (x.channels * x.spatial + kChunkElems - 1) / kChunkElems;
  AffineKernel<<<static_cast<unsigned>(x.batch * chunks), kBlockThreads, 0, StreamOf(ctx)>>>(
      static_cast<const float*>(x.data), static_cast<float*>(y.data), scale, shift, x.channels,
      x.spatial, chunks, per_sample, x.channels_last());
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
    error = cudaMemcpyAsync(params + C, host_shift, C * sizeof(float), cudaMemcpyHostToDevice,
                            stream);
  }
  if (error != cudaSuccess) return CudaFail(op, "uploading the folded scale / shift", error);
  return Affine(op, ctx, x, y, params, params + C, false);
}

}  // namespace cuda
}  // namespace normkit
