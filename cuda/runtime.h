// SPDX-License-Identifier: Apache-2.0
// What every CUDA op needs around its kernels: the device of the call, the context's
// stream, stream-ordered scratch memory, launch checks and grid sizes.
#ifndef NORMKIT_CUDA_RUNTIME_H_
#define NORMKIT_CUDA_RUNTIME_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "normkit/normkit.h"

namespace normkit {
namespace cuda {

// Makes `device` current for the scope of a call and restores the caller's device.
class DeviceScope {
 public:
  explicit DeviceScope(int32_t device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

// The stream calls with `ctx` run on (NULL context: the default stream).
cudaStream_t StreamOf(const normkit_context* ctx);

// Maps a CUDA error of `what` to a status and message (OUT_OF_MEMORY, else INTERNAL).
normkit_status CudaFail(const char* op, const char* what, cudaError_t error);

// cudaGetLastError after kernel launches.
normkit_status LaunchStatus(const char* op);

// Device memory for the duration of one call, allocated and freed in stream order, so
// the host never waits for it.
class Scratch {
 public:
  explicit Scratch(cudaStream_t stream) : stream_(stream) {}
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  // Allocates `bytes` (one buffer per Scratch) into *out.
  normkit_status Allocate(const char* op, int64_t bytes, void** out);

 private:
  cudaStream_t stream_;
  void* ptr_ = nullptr;
};

constexpr int kBlockThreads = 256;

// Blocks for `work` independent items of kBlockThreads each, capped to keep grid-stride
// loops busy without oversubscribing (and within the grid limit).
inline unsigned GridFor(int64_t work) {
  const int64_t blocks = (work + kBlockThreads - 1) / kBlockThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > (1 << 20) ? (1 << 20) : blocks));
}

// The most dynamic shared memory one block of the current device may opt into, less
// 1 KiB for the kernels' own static shared memory.
int64_t MaxDynamicShared();

// The compute capability's major number of the current device (9: Hopper).
int32_t ComputeCapabilityMajor();

// Streaming multiprocessors of the current device (for plans that must fill the GPU).
int32_t MultiprocessorCount();

}  // namespace cuda
}  // namespace normkit

#endif  // NORMKIT_CUDA_RUNTIME_H_
