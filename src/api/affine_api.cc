// SPDX-License-Identifier: Apache-2.0
// C entry point of the affine op: validate everything, then run on the device.
#include "api/guard.h"
#include "core/context.h"
#include "core/tensor.h"
#include "cpu/affine.h"
#include "cuda/ops.h"
#include "normkit/normkit.h"

extern "C" NORMKIT_API normkit_status normkit_affine(const normkit_context* context,
                                                     const normkit_tensor* x, const float* scale,
                                                     const float* shift, int32_t param_kind,
                                                     const normkit_tensor* y) {
  using namespace normkit;
  constexpr const char* kOp = "affine";
  return Guarded(kOp, [&] {
    TensorView xv, yv;
    NORMKIT_RETURN_IF_ERROR(ValidateUnaryTensors(kOp, x, y, &xv, &yv, UnaryDtypes::kStoragePairs));
    if (param_kind != NORMKIT_PARAMS_PER_CHANNEL &&
        param_kind != NORMKIT_PARAMS_PER_SAMPLE_CHANNEL) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: param_kind = %d is not a normkit_param_kind",
                  kOp, param_kind);
    }
    cpu::AffineParams params;
    params.scale = scale;
    params.shift = shift;
    params.per_sample = param_kind == NORMKIT_PARAMS_PER_SAMPLE_CHANNEL;
    const int64_t count = params.per_sample ? xv.batch * xv.channels : xv.channels;
    NORMKIT_RETURN_IF_ERROR(CheckParamDisjoint(kOp, "scale", scale, count, yv));
    NORMKIT_RETURN_IF_ERROR(CheckParamDisjoint(kOp, "shift", shift, count, yv));
    if (xv.on_cuda()) {
      NORMKIT_RETURN_IF_ERROR(
          cuda::CheckCall(kOp, xv.device_index,
                          {{"x", xv.data}, {"y", yv.data}, {"scale", scale}, {"shift", shift}}));
      return cuda::Affine(kOp, context, xv, yv, scale, shift, params.per_sample);
    }
    cpu::Affine(ResolveContext(context), xv, yv, params);
    return NORMKIT_SUCCESS;
  });
}
