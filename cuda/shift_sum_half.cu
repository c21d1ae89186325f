// SPDX-License-Identifier: Apache-2.0
// The CUDA shift-sum family on bfloat16 / float16 tensors. The row walks (channels-first
// along W: forward, adjoint, Moore-Penrose pseudo-inverse, GAP step) read and write the
// half tensors as stored (ShiftSumRowsStored, shift_sum.cu). The rest takes chunks of whole
// samples widened into a float scratch on the device, the float32 kernels on the chunk,
// the output rounded back to nearest even (cuda/storage.h). Every output element of the
// float kernels is one thread's fixed-order sum over its own sample, so either way a half
// call is bitwise the float32 CUDA call on the widened values, rounded.
#include <algorithm>

#include "cuda/ops.h"
#include "cuda/runtime.h"
#include "cuda/shift_sum_stored.h"
#include "cuda/storage.h"

namespace normkit {
namespace cuda {
namespace {

// Float scratch per chunk: small enough to stay in the L2 cache of an H100 (50 MB)
// between the widening, the operator and the rounding.
constexpr int64_t kChunkBytes = int64_t{24} << 20;

template <class T>
__global__ void WidenKernel(const T* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = Element<T>::ToFloat(in[i]);
  }
}

template <class T>
__global__ void NarrowKernel(const float* in, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = Element<T>::FromFloat(in[i]);
  }
}

// A stored tensor, one of its chunks in float.
struct Operand {
  StoredArray array;
  int64_t per_sample = 0;  // elements
  bool read = false;
  float* scratch = nullptr;  // half: the chunk in float

  bool half() const { return array.dtype != NORMKIT_DTYPE_FLOAT32; }
  int64_t Bytes() const { return array.dtype == NORMKIT_DTYPE_FLOAT32 ? 4 : 2; }
  char* Sample(int64_t b) const {
    return static_cast<char*>(array.data) + b * per_sample * Bytes();
  }
  float* View(int64_t b) const { return half() ? scratch : reinterpret_cast<float*>(Sample(b)); }
};

// Calls fn(T{}) with the element type of a half dtype.
template <class Fn>
void DispatchHalf(normkit_dtype dtype, Fn&& fn) {
  if (dtype == NORMKIT_DTYPE_BFLOAT16) {
    fn(__nv_bfloat16{});
  } else {
    fn(__half{});
  }
}

normkit_status Widen(const char* op, cudaStream_t stream, const Operand& o, int64_t b0,
                     int64_t samples) {
  const int64_t n = samples * o.per_sample;
  DispatchHalf(o.array.dtype, [&](auto zero) {
    using T = decltype(zero);
    WidenKernel<<<GridFor(n), kBlockThreads, 0, stream>>>(reinterpret_cast<const T*>(o.Sample(b0)),
                                                          o.scratch, n);
  });
  return LaunchStatus(op);
}

normkit_status Narrow(const char* op, cudaStream_t stream, const Operand& o, int64_t b0,
                      int64_t samples) {
  const int64_t n = samples * o.per_sample;
  DispatchHalf(o.array.dtype, [&](auto zero) {
    using T = decltype(zero);
    NarrowKernel<<<GridFor(n), kBlockThreads, 0, stream>>>(o.scratch,
                                                           reinterpret_cast<T*>(o.Sample(b0)), n);
  });
  return LaunchStatus(op);
}

// The float32 operator of `call` on float device arrays.
normkit_status RunFloat(const char* op, const normkit_context* ctx, int32_t device,
                        const ShiftSumStoredCall& call, const ShiftSumProblem<float>& p,
                        const float* normalizer, const float* src, float* dst) {
  switch (call.op) {
    case ShiftSumOp::kForward: return ShiftSumForward(op, ctx, device, p, src, dst);
    case ShiftSumOp::kAdjoint: return ShiftSumAdjoint(op, ctx, device, p, src, dst);
    case ShiftSumOp::kPinv:
      return ShiftSumPinv(op, ctx, device, p, call.mode, normalizer, src, dst);
    case ShiftSumOp::kGapStep:
      return ShiftSumGapStep(op, ctx, device, p, call.lambda, call.gamma, normalizer, src, dst);
    case ShiftSumOp::kShift: return ShiftStack(op, ctx, device, p, true, src, dst);
    case ShiftSumOp::kUnshift: return ShiftStack(op, ctx, device, p, false, src, dst);
  }
  return NORMKIT_SUCCESS;
}

}  // namespace

normkit_status ShiftSumStored(const char* op, const normkit_context* ctx, int32_t device,
                              const ShiftSumProblem<float>& p, const ShiftSumStoredCall& call) {
  bool taken = false;
  NORMKIT_RETURN_IF_ERROR(ShiftSumRowsStored(op, ctx, device, p, call, &taken));
  if (taken) return NORMKIT_SUCCESS;
  DeviceScope scope(device);
  if (scope.status() != cudaSuccess) return CudaFail(op, "cudaSetDevice", scope.status());
  const cudaStream_t stream = StreamOf(ctx);

  Operand in, out;
  SampleElems(p, call.op, &in.per_sample, &out.per_sample);
  in.array = call.in;
  in.read = true;
  out.array = call.out;
  out.read = call.op == ShiftSumOp::kGapStep;  // x in place

  const int64_t y_elems = p.H_out * p.W_out;
  const int64_t sample_floats = (in.half() ? in.per_sample : 0) + (out.half() ? out.per_sample : 0);
  const int64_t chunk =
      std::clamp<int64_t>(kChunkBytes / std::max<int64_t>(4 * sample_floats, 1), 1, p.B);
  // Everything is allocated before any output is written: the chunk scratch and a
  // normalizer the chunks share (computed once rather than once per chunk).
  const bool shared_normalizer = UsesNormalizer(call.op, call.mode) && call.normalizer == nullptr &&
                                 p.mask_kind != ShiftMask::kNone && !p.PerSampleMask() &&
                                 chunk < p.B;
  Scratch scratch(stream);
  void* buffer = nullptr;
  NORMKIT_RETURN_IF_ERROR(scratch.Allocate(
      op, 4 * (chunk * sample_floats + (shared_normalizer ? y_elems : 0)) + 16, &buffer));
  float* next = static_cast<float*>(buffer);
  for (Operand* o : {&in, &out}) {
    if (o->half()) o->scratch = next, next += chunk * o->per_sample;
  }
  const float* normalizer = call.normalizer;
  if (shared_normalizer) {
    NORMKIT_RETURN_IF_ERROR(ShiftSumNormalizer(op, ctx, device, p, next));
    normalizer = next;
  }

  for (int64_t b0 = 0; b0 < p.B; b0 += chunk) {
    const int64_t samples = std::min(chunk, p.B - b0);
    for (const Operand* o : {&in, &out}) {
      if (o->half() && o->read) NORMKIT_RETURN_IF_ERROR(Widen(op, stream, *o, b0, samples));
    }
    const float* norm =
        normalizer != nullptr && p.PerSampleMask() ? normalizer + b0 * y_elems : normalizer;
    NORMKIT_RETURN_IF_ERROR(RunFloat(op, ctx, device, call, SampleRange(p, b0, samples), norm,
                                     in.View(b0), out.View(b0)));
    if (out.half()) NORMKIT_RETURN_IF_ERROR(Narrow(op, stream, out, b0, samples));
  }
  return NORMKIT_SUCCESS;
}

}  // namespace cuda
}  // namespace normkit
