// SPDX-License-Identifier: Apache-2.0
// How a CUDA kernel reads and writes one element of a storage type: every value is widened
// to float for the math and the float result rounded to nearest-even into the output, as
// on CPU (the same bits). float32 is host-and-device code (the CPU tests replay the
// kernels with it); the half types are device code of the .cu files.
#ifndef NORMKIT_CUDA_STORAGE_H_
#define NORMKIT_CUDA_STORAGE_H_

#include "core/host_device.h"
#include "normkit/normkit.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace normkit {
namespace cuda {

template <class T>
struct Element;

template <>
struct Element<float> {
  NORMKIT_HOST_DEVICE static float ToFloat(float v) { return v; }
  NORMKIT_HOST_DEVICE static float FromFloat(float v) { return v; }
};

#if defined(__CUDACC__)
template <>
struct Element<__half> {
  __device__ static float ToFloat(__half v) { return __half2float(v); }
  __device__ static __half FromFloat(float v) { return __float2half_rn(v); }
};

template <>
struct Element<__nv_bfloat16> {
  __device__ static float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 FromFloat(float v) { return __float2bfloat16_rn(v); }
};

// Calls fn(TX{}, TY{}) with the element types of a validated storage pair: the same dtype,
// or one of them float32 (seven pairs).
template <class Fn>
auto DispatchStoragePair(normkit_dtype x, normkit_dtype y, Fn&& fn) {
  if (x == NORMKIT_DTYPE_BFLOAT16) {
    return y == NORMKIT_DTYPE_BFLOAT16 ? fn(__nv_bfloat16{}, __nv_bfloat16{})
                                       : fn(__nv_bfloat16{}, float{});
  }
  if (x == NORMKIT_DTYPE_FLOAT16) {
    return y == NORMKIT_DTYPE_FLOAT16 ? fn(__half{}, __half{}) : fn(__half{}, float{});
  }
  if (y == NORMKIT_DTYPE_BFLOAT16) return fn(float{}, __nv_bfloat16{});
  if (y == NORMKIT_DTYPE_FLOAT16) return fn(float{}, __half{});
  return fn(float{}, float{});
}
#endif

}  // namespace cuda
}  // namespace normkit

#endif  // NORMKIT_CUDA_STORAGE_H_
