// SPDX-License-Identifier: Apache-2.0
// The CUDA path as the API layer sees it. Arguments reach these functions validated
// (shapes, overlaps, values) except for what only CUDA can check: whether the device
// exists and whether each pointer is device memory (CheckCall). Builds without the
// CUDA module link cuda/unavailable.cc instead, where every function reports
// DEVICE_UNAVAILABLE.
#ifndef NORMKIT_CUDA_OPS_H_
#define NORMKIT_CUDA_OPS_H_

#include <cstdint>
#include <functional>
#include <initializer_list>

#include "core/norm_args.h"
#include "core/shift_geometry.h"
#include "core/tensor.h"
#include "normkit/normkit.h"

namespace normkit {
namespace cuda {

// Usable CUDA devices: 0 without the module, a driver or a GPU.
int32_t DeviceCount();

// One array of a call, named as in the C API (NULL arrays are skipped).
struct NamedPointer {
  const char* name;
  const void* ptr;
};

// A CUDA call can run: this build has CUDA, device `device_index` exists, and every
// array is device or managed memory of that device.
normkit_status CheckCall(const char* op, int32_t device_index,
                         std::initializer_list<NamedPointer> arrays);

// Copies `bytes` of device memory at `src` to the host buffer `dst`, waiting for the
// context's stream.
normkit_status CopyToHost(const char* op, const normkit_context* ctx, int32_t device_index,
                          const void* src, int64_t bytes, void* dst);

// y = (x - center) * scale + shift; scale / shift are device arrays (or NULL) of C or
// N x C floats; center (NULL: 0) is used by batch norm only.
normkit_status Affine(const char* op, const normkit_context* ctx, const TensorView& x,
                      const TensorView& y, const float* scale, const float* shift, bool per_sample,
                      const float* center = nullptr);

// Batch-norm inference on CUDA tensors (every parameter a device array; gamma, beta may
// be NULL). Folds into scale / shift on the device with the CPU's float formula (the
// same bits), after copying running_var to the host and calling validate(host_var);
// only if it succeeds is y written. Running means far from the spread (FoldsExactly,
// checked on a host copy) are subtracted first, as on CPU. Waiting on the stream for those two
// copies is the price of validating before writing.
normkit_status BatchNormInference(const char* op, const normkit_context* ctx, const TensorView& x,
                                  const TensorView& y, const float* gamma, const float* beta,
                                  const float* mean, const float* var, float eps,
                                  const std::function<normkit_status(const float*)>& validate);

// Group norm, or (rows) the row-wise layer / RMS norm of a [rows, D] tensor. The
// arrays of `args` are device arrays or NULL.
normkit_status Norm(const char* op, const normkit_context* ctx, const TensorView& x,
                    const TensorView& y, const NormArgs& args, bool rows);

// The shift-sum family; pointers are device arrays of the call's dtype.
template <class T>
normkit_status ShiftSumForward(const char* op, const normkit_context* ctx, int32_t device,
                               const ShiftSumProblem<T>& p, const T* x, T* y);
template <class T>
normkit_status ShiftSumAdjoint(const char* op, const normkit_context* ctx, int32_t device,
                               const ShiftSumProblem<T>& p, const T* y, T* x);
template <class T>
normkit_status ShiftSumNormalizer(const char* op, const normkit_context* ctx, int32_t device,
                                  const ShiftSumProblem<T>& p, T* phi_s);
template <class T>
normkit_status ShiftSumPinv(const char* op, const normkit_context* ctx, int32_t device,
                            const ShiftSumProblem<T>& p, PinvMode mode, const T* normalizer,
                            const T* y, T* x);
template <class T>
normkit_status ShiftSumGapStep(const char* op, const normkit_context* ctx, int32_t device,
                               const ShiftSumProblem<T>& p, T lambda, T gamma, const T* normalizer,
                               const T* y, T* x);
// forward: `in` is x and `out` the shifted stack xs; otherwise xs -> x.
template <class T>
normkit_status ShiftStack(const char* op, const normkit_context* ctx, int32_t device,
                          const ShiftSumProblem<T>& p, bool forward, const T* in, T* out);

// A tensor of a shift-sum call with a bfloat16 / float16 side: its data and dtype.
struct StoredArray {
  void* data;
  normkit_dtype dtype;
};

// The operator `op` on stored tensors (shift_sum_half.cu): `in` is the tensor it reads
// (x of the forward and shift, y of the adjoint, pinv and GAP step, xs of unshift), `out`
// the one it writes (x in place for the GAP step, which also reads it). Chunks of whole
// samples are widened into a float scratch on the device, the float32 kernels run on
// them and the output is rounded to nearest even: bitwise the float32 CUDA call on the
// widened values, rounded. Masks, normalizers and parameters are float32 device arrays.
struct ShiftSumStoredCall {
  ShiftSumOp op;
  StoredArray in, out;
  PinvMode mode = PinvMode::kMoorePenrose;
  float lambda = 1.0f, gamma = 0.0f;
  const float* normalizer = nullptr;  // null: computed
};
normkit_status ShiftSumStored(const char* op, const normkit_context* ctx, int32_t device,
                              const ShiftSumProblem<float>& p, const ShiftSumStoredCall& call);

// Explicit instantiations of the shift-sum family for T (float and double), in the
// file that defines them (shift_sum.cu, or unavailable.cc without the module).
#define NORMKIT_CUDA_INSTANTIATE_SHIFT_SUM(T)                                                      \
  template normkit_status ShiftSumForward<T>(const char*, const normkit_context*, int32_t,         \
                                             const ShiftSumProblem<T>&, const T*, T*);             \
  template normkit_status ShiftSumAdjoint<T>(const char*, const normkit_context*, int32_t,         \
                                             const ShiftSumProblem<T>&, const T*, T*);             \
  template normkit_status ShiftSumNormalizer<T>(const char*, const normkit_context*, int32_t,      \
                                                const ShiftSumProblem<T>&, T*);                    \
  template normkit_status ShiftSumPinv<T>(const char*, const normkit_context*, int32_t,            \
                                          const ShiftSumProblem<T>&, PinvMode, const T*, const T*, \
                                          T*);                                                     \
  template normkit_status ShiftSumGapStep<T>(const char*, const normkit_context*, int32_t,         \
                                             const ShiftSumProblem<T>&, T, T, const T*, const T*,  \
                                             T*);                                                  \
  template normkit_status ShiftStack<T>(const char*, const normkit_context*, int32_t,              \
                                        const ShiftSumProblem<T>&, bool, const T*, T*);

}  // namespace cuda
}  // namespace normkit

#endif  // NORMKIT_CUDA_OPS_H_
