// SPDX-License-Identifier: Apache-2.0
// Copies from global to shared memory that need no registers to stage them: cp.async
// (8 or 16 bytes per thread, Ampere and later) and the bulk copy engine (any multiple of 16
// bytes from one thread, Hopper), which completes on an mbarrier. Device code only;
// callers keep each use behind the matching __CUDA_ARCH__ and a run-time capability check.
#ifndef NORMKIT_CUDA_ASYNC_COPY_H_
#define NORMKIT_CUDA_ASYNC_COPY_H_

#include <cstdint>

namespace normkit {
namespace cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
__device__ inline uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from `src` (global) to `dst` (shared), both 16-byte aligned.
__device__ inline void AsyncCopy16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(SharedAddress(dst)), "l"(src)
               : "memory");
}

// 8 bytes from `src` (global) to `dst` (shared), both 8-byte aligned (through L1: the
// 16-byte form alone may bypass it).
__device__ inline void AsyncCopy8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(SharedAddress(dst)), "l"(src)
               : "memory");
}
// Waits for this thread's cp.async copies (a __syncthreads must follow before other
// threads read them).
__device__ inline void AsyncCopyWaitAll() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// A block's bulk copies: thread 0 calls Start (the block synchronizes inside), then Copy
// for each piece; every thread calls Wait.
class BulkCopies {
 public:
  // `barrier` is a __shared__ uint64_t; `bytes` the sum of the pieces to come.
  __device__ BulkCopies(uint64_t* barrier, uint32_t bytes) : bar_(SharedAddress(barrier)) {
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar_) : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar_), "r"(bytes)
                   : "memory");
    }
  }
  // From thread 0: `bytes` (a multiple of 16) from `src` to `dst`, both 16-byte aligned.
  __device__ void Copy(void* dst, const void* src, uint32_t bytes) const {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
            "r"(SharedAddress(dst)),
        "l"(src), "r"(bytes), "r"(bar_)
        : "memory");
  }
  // Until every byte announced has arrived.
  __device__ void Wait() const {
    uint32_t done = 0;
    do {
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
          " selp.u32 %0, 1, 0, p;\n}"
          : "=r"(done)
          : "r"(bar_)
          : "memory");
    } while (done == 0);
  }

 private:
  uint32_t bar_;
};
#endif

}  // namespace cuda
}  // namespace normkit

#endif  // NORMKIT_CUDA_ASYNC_COPY_H_
