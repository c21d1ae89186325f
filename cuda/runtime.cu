// SPDX-License-Identifier: Apache-2.0
// Device discovery and the checks a CUDA call makes before it writes anything. The
// CUDA runtime is linked statically; on a machine without a driver or GPU its calls
// return errors (never crash), which become DEVICE_UNAVAILABLE here.
#include "core/context.h"
#include "cuda/ops.h"
#include "cuda/runtime.h"

namespace normkit {
namespace cuda {

DeviceScope::DeviceScope(int32_t device) {
  status_ = cudaGetDevice(&previous_);
  if (status_ == cudaSuccess && previous_ != device) status_ = cudaSetDevice(device);
}

DeviceScope::~DeviceScope() {
  int current = -1;
  if (previous_ >= 0 && cudaGetDevice(&current) == cudaSuccess && current != previous_) {
    cudaSetDevice(previous_);
  }
}

cudaStream_t StreamOf(const normkit_context* ctx) {
  return static_cast<cudaStream_t>(ResolveContext(ctx).cuda_stream);
}

normkit_status CudaFail(const char* op, const char* what, cudaError_t error) {
  const normkit_status status =
      error == cudaErrorMemoryAllocation ? NORMKIT_ERROR_OUT_OF_MEMORY : NORMKIT_ERROR_INTERNAL;
  return Fail(status, "%s: %s failed: %s (%s)", op, what, cudaGetErrorString(error),
              cudaGetErrorName(error));
}

normkit_status LaunchStatus(const char* op) {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? NORMKIT_SUCCESS : CudaFail(op, "a kernel launch", error);
}

Scratch::~Scratch() {
  if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
}

normkit_status Scratch::Allocate(const char* op, int64_t bytes, void** out) {
  if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
  ptr_ = nullptr;
  const cudaError_t error =
      cudaMallocAsync(&ptr_, static_cast<size_t>(bytes < 1 ? 1 : bytes), stream_);
  if (error != cudaSuccess) {
    ptr_ = nullptr;
    return CudaFail(op, "cudaMallocAsync of scratch memory", error);
  }
  *out = ptr_;
  return NORMKIT_SUCCESS;
}

int32_t MultiprocessorCount() {
  int device = 0, count = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 1;
  }
  return count < 1 ? 1 : count;
}

int32_t ComputeCapabilityMajor() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    return 0;
  }
  return major;
}

int64_t MaxDynamicShared() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    return 0;
  }
  return bytes > 1024 ? bytes - 1024 : 0;
}

int32_t DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // not sticky: leave no error behind for the caller's own CUDA code
    return 0;
  }
  return count;
}

normkit_status CheckCall(const char* op, int32_t device_index,
                         std::initializer_list<NamedPointer> arrays) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Fail(NORMKIT_ERROR_DEVICE_UNAVAILABLE,
                "%s: the tensors are CUDA tensors, but this machine has no usable CUDA device "
                "(cudaGetDeviceCount: %s)",
                op, error != cudaSuccess ? cudaGetErrorString(error) : "0 devices");
  }
  if (device_index < 0 || device_index >= count) {
    return Fail(NORMKIT_ERROR_DEVICE_UNAVAILABLE,
                "%s: device_index = %d, but this machine has %d CUDA device(s)", op, device_index,
                count);
  }
  for (const NamedPointer& a : arrays) {
    if (a.ptr == nullptr) continue;
    cudaPointerAttributes attr{};
    const cudaError_t e = cudaPointerGetAttributes(&attr, a.ptr);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                  "%s: %s is not memory CUDA knows (cudaPointerGetAttributes: %s)", op, a.name,
                  cudaGetErrorString(e));
    }
    if (attr.type == cudaMemoryTypeManaged) continue;
    if (attr.type != cudaMemoryTypeDevice) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                  "%s: %s is host memory, but the tensors are CUDA tensors (every array of a "
                  "CUDA call must be device or managed memory)",
                  op, a.name);
    }
    if (attr.device != device_index) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                  "%s: %s lives on CUDA device %d, but the tensors name device_index = %d", op,
                  a.name, attr.device, device_index);
    }
  }
  return NORMKIT_SUCCESS;
}

normkit_status CopyToHost(const char* op, const normkit_context* ctx, int32_t device_index,
                          const void* src, int64_t bytes, void* dst) {
  DeviceScope scope(device_index);
  if (scope.status() != cudaSuccess) return CudaFail(op, "cudaSetDevice", scope.status());
  const cudaStream_t stream = StreamOf(ctx);
  cudaError_t error =
      cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream);
  if (error == cudaSuccess) error = cudaStreamSynchronize(stream);
  if (error != cudaSuccess) {
    return Fail(NORMKIT_ERROR_INTERNAL,
                "%s: copying parameters to the host for validation failed: %s", op,
                cudaGetErrorString(error));
  }
  return NORMKIT_SUCCESS;
}

}  // namespace cuda
}  // namespace normkit
