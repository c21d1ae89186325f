// SPDX-License-Identifier: Apache-2.0
// The CUDA interface of a build without the CUDA module: there is no device to use,
// so every CUDA call reports DEVICE_UNAVAILABLE with the reason.
#include "core/error.h"
#include "cuda/ops.h"

namespace normkit {
namespace cuda {
namespace {

normkit_status NoCuda(const char* op) {
  return Fail(NORMKIT_ERROR_DEVICE_UNAVAILABLE,
              "%s: the tensors are CUDA tensors, but this build of normkit has no CUDA module "
              "(configure with a CUDA toolkit and -DNORMKIT_CUDA=AUTO or ON)",
              op);
}

}  // namespace

int32_t DeviceCount() {
  return 0;
}

normkit_status CheckCall(const char* op, int32_t, std::initializer_list<NamedPointer>) {
  return NoCuda(op);
}

normkit_status CopyToHost(const char* op, const normkit_context*, int32_t, const void*, int64_t,
                          void*) {
  return NoCuda(op);
}

normkit_status Affine(const char* op, const normkit_context*, const TensorView&, const TensorView&,
                      const float*, const float*, bool, const float*) {
  return NoCuda(op);
}

normkit_status BatchNormInference(const char* op, const normkit_context*, const TensorView&,
                                  const TensorView&, const float*, const float*, const float*,
                                  const float*, float,
                                  const std::function<normkit_status(const float*)>&) {
  return NoCuda(op);
}

normkit_status Norm(const char* op, const normkit_context*, const TensorView&, const TensorView&,
                    const NormArgs&, bool) {
  return NoCuda(op);
}

template <class T>
normkit_status ShiftSumForward(const char* op, const normkit_context*, int32_t,
                               const ShiftSumProblem<T>&, const T*, T*) {
  return NoCuda(op);
}
template <class T>
normkit_status ShiftSumAdjoint(const char* op, const normkit_context*, int32_t,
                               const ShiftSumProblem<T>&, const T*, T*) {
  return NoCuda(op);
}
template <class T>
normkit_status ShiftSumNormalizer(const char* op, const normkit_context*, int32_t,
                                  const ShiftSumProblem<T>&, T*) {
  return NoCuda(op);
}
template <class T>
normkit_status ShiftSumPinv(const char* op, const normkit_context*, int32_t,
                            const ShiftSumProblem<T>&, PinvMode, const T*, const T*, T*) {
  return NoCuda(op);
}
template <class T>
normkit_status ShiftSumGapStep(const char* op, const normkit_context*, int32_t,
                               const ShiftSumProblem<T>&, T, T, const T*, const T*, T*) {
  return NoCuda(op);
}
template <class T>
normkit_status ShiftStack(const char* op, const normkit_context*, int32_t,
                          const ShiftSumProblem<T>&, bool, const T*, T*) {
  return NoCuda(op);
}

normkit_status ShiftSumStored(const char* op, const normkit_context*, int32_t,
                              const ShiftSumProblem<float>&, const ShiftSumStoredCall&) {
  return NoCuda(op);
}

NORMKIT_CUDA_INSTANTIATE_SHIFT_SUM(float)
NORMKIT_CUDA_INSTANTIATE_SHIFT_SUM(double)

}  // namespace cuda
}  // namespace normkit
