// SPDX-License-Identifier: Apache-2.0
// Marks functions shared by the CPU code and the CUDA kernels: __host__ __device__
// under nvcc, nothing for the host compiler.
#ifndef NORMKIT_CORE_HOST_DEVICE_H_
#define NORMKIT_CORE_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define NORMKIT_HOST_DEVICE __host__ __device__
#else
#define NORMKIT_HOST_DEVICE
#endif

// Unrolls the next loop n times in device code (host compilers do not know the pragma).
#define NORMKIT_PRAGMA(x) _Pragma(#x)
#if defined(__CUDA_ARCH__)
#define NORMKIT_UNROLL(n) NORMKIT_PRAGMA(unroll n)
#else
#define NORMKIT_UNROLL(n)
#endif

#endif  // NORMKIT_CORE_HOST_DEVICE_H_
