// SPDX-License-Identifier: Apache-2.0
// How a CUDA kernel reads and writes one element of a storage type: every value is widened
// to float for the math and the float result rounded to nearest-even into the output, as
// on CPU (the same bits). float32 is host-and-device code (the CPU tests replay the
// kernels with it); the half types are device code of the .cu files.
#ifndef NORMKIT_CUDA_STORAGE_H_
#define NORMKIT_CUDA_STORAGE_H_

#include <cstdint>
#include <type_traits>

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

// Four consecutive elements, widened to float (a vector item of the norm kernels).
struct Float4 {
  float x, y, z, w;
};

NORMKIT_HOST_DEVICE inline Float4 LoadFloat4(const float* p) {
#if defined(__CUDA_ARCH__)
  const float4 v = *reinterpret_cast<const float4*>(p);
  return {v.x, v.y, v.z, v.w};
#else
  return {p[0], p[1], p[2], p[3]};
#endif
}

NORMKIT_HOST_DEVICE inline void StoreFloat4(float* p, const Float4& v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<float4*>(p) = make_float4(v.x, v.y, v.z, v.w);
#else
  p[0] = v.x, p[1] = v.y, p[2] = v.z, p[3] = v.w;
#endif
}

// Load4 / Store4: four elements of a storage type at p, aligned to four elements (one
// 16-byte access for float, one 8-byte access for the half types).
NORMKIT_HOST_DEVICE inline Float4 Load4(const float* p) {
  return LoadFloat4(p);
}
NORMKIT_HOST_DEVICE inline void Store4(float* p, const Float4& v) {
  StoreFloat4(p, v);
}

template <>
struct Element<float> {
  NORMKIT_HOST_DEVICE static float ToFloat(float v) { return v; }
  NORMKIT_HOST_DEVICE static float FromFloat(float v) { return v; }
};

// a[i] in the math type T: T's own arrays as they are, a half storage type (x, y of a
// bfloat16 / float16 call, math in float) widened.
template <class T, class S>
NORMKIT_HOST_DEVICE T ValueAt(const S* a, int64_t i) {
  if constexpr (std::is_same<S, T>::value) {
    return a[i];
  } else {
    return static_cast<T>(Element<S>::ToFloat(a[i]));
  }
}

// A math-type value stored as S: as it is, or rounded to nearest even into a half type.
template <class S, class T>
NORMKIT_HOST_DEVICE S StoredAs(T v) {
  if constexpr (std::is_same<S, T>::value) {
    return v;
  } else {
    return Element<S>::FromFloat(static_cast<float>(v));
  }
}

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

__device__ inline Float4 Load4(const __half* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
  return {a.x, a.y, b.x, b.y};
}
__device__ inline Float4 Load4(const __nv_bfloat16* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
  return {a.x, a.y, b.x, b.y};
}
// Rounded to nearest even, as Element<T>::FromFloat.
__device__ inline void Store4(__half* p, const Float4& v) {
  const __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
  uint2 raw;
  raw.x = *reinterpret_cast<const uint32_t*>(&a);
  raw.y = *reinterpret_cast<const uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = raw;
}
__device__ inline void Store4(__nv_bfloat16* p, const Float4& v) {
  const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
  uint2 raw;
  raw.x = *reinterpret_cast<const uint32_t*>(&a);
  raw.y = *reinterpret_cast<const uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = raw;
}

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
