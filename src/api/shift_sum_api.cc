// SPDX-License-Identifier: Apache-2.0
// C entry points of the shift-sum (CASSI) operators: validate the tensors, the
// parameters and the mask against the geometry, then run on the device.
#include <cmath>
#include <cstddef>
#include <utility>

#include "api/guard.h"
#include "core/context.h"
#include "core/size_math.h"
#include "core/tensor.h"
#include "cpu/shift_sum.h"
#include "cuda/ops.h"
#include "normkit/normkit.h"

namespace normkit {
namespace {

// The first version of the parameter struct: every field up to and including `mask`.
constexpr uint32_t kParamsV1Size = offsetof(normkit_shift_sum_params, mask) + sizeof(const void*);

bool IsHalf(normkit_dtype dtype) {
  return dtype == NORMKIT_DTYPE_BFLOAT16 || dtype == NORMKIT_DTYPE_FLOAT16;
}

// A validated call: the geometry, the dtypes and the mask, before choosing float or double.
struct ShiftSumCall {
  normkit_dtype dtype = NORMKIT_DTYPE_FLOAT32;        // x's
  normkit_dtype other_dtype = NORMKIT_DTYPE_FLOAT32;  // y's or xs's (set by their checks)
  int64_t B = 0, C = 0, H = 0, W = 0, H_out = 0, W_out = 0;
  bool channels_last = false;
  const normkit_shift_sum_params* params = nullptr;
  int64_t mask_elems = 0;
  int64_t normalizer_elems = 0;  // [H', W'], or [B, H', W'] for per-sample masks

  // The computing type: float64 for float64 tensors, else float32. Masks, normalizers
  // and Phi_s are stored in it (float32 beside bfloat16 / float16 tensors).
  normkit_dtype math() const {
    return dtype == NORMKIT_DTYPE_FLOAT64 ? NORMKIT_DTYPE_FLOAT64 : NORMKIT_DTYPE_FLOAT32;
  }
  int64_t elem_size() const { return DtypeSize(math()); }
  // A half tensor in the call: the float32 drivers on widened chunks (CPU only).
  bool stored() const { return IsHalf(dtype) || IsHalf(other_dtype); }
  int64_t y_elems() const { return B * H_out * W_out; }

  template <class T>
  ShiftSumProblem<T> Problem() const {
    ShiftSumProblem<T> p;
    p.B = B, p.C = C, p.H = H, p.W = W;
    p.step = params->step;
    p.along_h = params->axis == NORMKIT_SHIFT_ALONG_H;
    p.channels_last = channels_last;
    p.mask_kind = static_cast<ShiftMask>(params->mask_kind);
    p.mask = static_cast<const T*>(params->mask);
    p.scale = static_cast<T>(params->scale);
    FinishShiftSumProblem(&p);
    return p;
  }
};

// Returns fn(T()) for the call's dtype T.
template <class Fn>
normkit_status DispatchDtype(const ShiftSumCall& call, const Fn& fn) {
  return call.math() == NORMKIT_DTYPE_FLOAT64 ? fn(double()) : fn(float());
}

// For CUDA tensors: the device exists and every array of the call is device memory.
normkit_status CheckCudaCall(const char* op, const TensorView& x,
                             std::initializer_list<cuda::NamedPointer> arrays) {
  return cuda::CheckCall(op, x.device_index, arrays);
}

normkit_status ValidateParams(const char* op, const normkit_shift_sum_params* params) {
  NORMKIT_RETURN_IF_ERROR(CheckNotNull(op, "params", params));
  if (params->struct_size < kParamsV1Size) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: params->struct_size = %u, expected >= %u (initialize with "
                "normkit_shift_sum_params_init)",
                op, params->struct_size, kParamsV1Size);
  }
  if (params->axis != NORMKIT_SHIFT_ALONG_W && params->axis != NORMKIT_SHIFT_ALONG_H) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: params->axis = %d is not a normkit_shift_axis",
                op, params->axis);
  }
  if (params->mask_kind < NORMKIT_MASK_NONE || params->mask_kind > NORMKIT_MASK_PHI_BCHW) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: params->mask_kind = %d is not a normkit_mask_kind", op, params->mask_kind);
  }
  if ((params->mask_kind == NORMKIT_MASK_NONE) != (params->mask == nullptr)) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                params->mask ? "%s: params->mask is set but params->mask_kind is NONE"
                             : "%s: params->mask is NULL but params->mask_kind needs a mask",
                op);
  }
  if (!std::isfinite(params->scale) || params->scale == 0.0) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: params->scale = %g, must be finite and != 0",
                op, params->scale);
  }
  return NORMKIT_SUCCESS;
}

// x: a valid rank-4 float32 / float64 CPU tensor; fills the geometry of `call`.
normkit_status ValidateX(const char* op, const char* name, const normkit_tensor* x,
                         const normkit_shift_sum_params* params, TensorView* xv, ShiftSumCall* call,
                         bool shape_only = false) {
  NORMKIT_RETURN_IF_ERROR(ValidateTensor(op, name, x, xv, shape_only));
  if (xv->dtype != NORMKIT_DTYPE_FLOAT32 && xv->dtype != NORMKIT_DTYPE_FLOAT64 &&
      !IsHalf(xv->dtype)) {
    return Fail(NORMKIT_ERROR_UNSUPPORTED,
                "%s: %s->dtype = %s is not supported (float32, float64, bfloat16 or float16)", op,
                name, DtypeName(xv->dtype));
  }
  if (xv->rank != 4) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s->rank = %d, expected 4 ([B, C, H, W])", op,
                name, xv->rank);
  }
  call->dtype = xv->dtype;
  call->B = xv->shape[0];
  call->C = xv->shape[1];
  call->H = xv->shape[2];
  call->W = xv->shape[3];
  call->channels_last = xv->channels_last();
  call->params = params;
  // One rule for every step: (C - 1) * |step| and the sizes it makes must fit int64. With
  // C = 1 nothing moves and any step passes, INT64_MIN too (whose magnitude does not
  // exist: taken as 0 here, and it only passes with C = 1, where the geometry drops it).
  const int64_t abs_step =
      params->step == INT64_MIN ? 0 : (params->step < 0 ? -params->step : params->step);
  int64_t spread = 0, out = 0;
  const int64_t along = params->axis == NORMKIT_SHIFT_ALONG_H ? call->H : call->W;
  const int64_t across = params->axis == NORMKIT_SHIFT_ALONG_H ? call->W : call->H;
  int64_t y_elems = 0;
  if ((params->step == INT64_MIN && call->C > 1) || !CheckedMul(call->C - 1, abs_step, &spread) ||
      __builtin_add_overflow(along, spread, &out) || !CheckedMul(out, across, &y_elems) ||
      !CheckedMul(y_elems, call->B, &y_elems) || !CheckedMul(y_elems, call->C, &y_elems) ||
      !CheckedMul(y_elems, call->elem_size(), &y_elems)) {
    // The largest derived buffer (a [B, C, H', W'] mask or shifted stack) must have a byte
    // size that fits int64, or the overlap checks below could not be computed.
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: step = %lld with C = %lld makes the shifted sizes overflow int64", op,
                static_cast<long long>(params->step), static_cast<long long>(call->C));
  }
  call->H_out = params->axis == NORMKIT_SHIFT_ALONG_H ? out : call->H;
  call->W_out = params->axis == NORMKIT_SHIFT_ALONG_H ? call->W : out;
  // Mask and normalizer sizes: at most B * C * H' * W' elements, whose bytes fit (checked above).
  const int64_t plane = call->H * call->W, plane_out = call->H_out * call->W_out;
  switch (params->mask_kind) {
    case NORMKIT_MASK_NONE: call->mask_elems = 0; break;
    case NORMKIT_MASK_HW: call->mask_elems = plane; break;
    case NORMKIT_MASK_CHW: call->mask_elems = call->C * plane; break;
    case NORMKIT_MASK_BCHW: call->mask_elems = call->B * call->C * plane; break;
    case NORMKIT_MASK_PHI_CHW: call->mask_elems = call->C * plane_out; break;
    case NORMKIT_MASK_PHI_BCHW: call->mask_elems = call->B * call->C * plane_out; break;
  }
  const bool per_sample =
      params->mask_kind == NORMKIT_MASK_BCHW || params->mask_kind == NORMKIT_MASK_PHI_BCHW;
  call->normalizer_elems = (per_sample ? call->B : 1) * plane_out;
  return NORMKIT_SUCCESS;
}

// The dtype of x's partner `name` (y or xs): x's own, or with a half x or partner the
// other float32 (the storage pairs of every op; float64 pairs only with itself).
normkit_status CheckPartnerDtype(const char* op, const char* name, normkit_dtype dtype,
                                 ShiftSumCall* call) {
  if (dtype != call->dtype) {
    if (dtype == NORMKIT_DTYPE_FLOAT64 || call->dtype == NORMKIT_DTYPE_FLOAT64 ||
        !(IsHalf(dtype) || dtype == NORMKIT_DTYPE_FLOAT32)) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s->dtype = %s differs from x->dtype = %s",
                  op, name, DtypeName(dtype), DtypeName(call->dtype));
    }
    if (IsHalf(dtype) && IsHalf(call->dtype)) {
      return Fail(NORMKIT_ERROR_UNSUPPORTED,
                  "%s: %s->dtype = %s with x->dtype = %s is not supported (the same dtype, or one "
                  "of them float32)",
                  op, name, DtypeName(dtype), DtypeName(call->dtype));
    }
  }
  call->other_dtype = dtype;
  return NORMKIT_SUCCESS;
}

// y: [B, 1, H', W'] (rank 4, either layout tag) or [B, H', W'] (rank 3, channels-first).
normkit_status ValidateY(const char* op, const normkit_tensor* y, ShiftSumCall* call_ptr,
                         TensorView* yv) {
  NORMKIT_RETURN_IF_ERROR(ValidateTensor(op, "y", y, yv));
  NORMKIT_RETURN_IF_ERROR(CheckPartnerDtype(op, "y", yv->dtype, call_ptr));
  const ShiftSumCall& call = *call_ptr;
  const bool rank4 = yv->rank == 4 && yv->shape[0] == call.B && yv->shape[1] == 1 &&
                     yv->shape[2] == call.H_out && yv->shape[3] == call.W_out;
  const bool rank3 = yv->rank == 3 && !yv->channels_last() && yv->shape[0] == call.B &&
                     yv->shape[1] == call.H_out && yv->shape[2] == call.W_out;
  if (!rank4 && !rank3) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: y must be [B, 1, H', W'] = [%lld, 1, %lld, %lld] (or rank-3 channels-first "
                "[B, H', W']) for x [%lld, %lld, %lld, %lld] with step %lld",
                op, static_cast<long long>(call.B), static_cast<long long>(call.H_out),
                static_cast<long long>(call.W_out), static_cast<long long>(call.B),
                static_cast<long long>(call.C), static_cast<long long>(call.H),
                static_cast<long long>(call.W), static_cast<long long>(call.params->step));
  }
  return NORMKIT_SUCCESS;
}

// An array of `elems` values of the call's dtype must not overlap `out` (a tensor).
normkit_status CheckDisjoint(const char* op, const char* name, const void* p, int64_t elems,
                             const TensorView& out, const char* out_name,
                             const ShiftSumCall& call) {
  NORMKIT_RETURN_IF_ERROR(CheckElementAligned(op, name, p, call.elem_size()));
  if (p != nullptr && RangesOverlap(p, elems * call.elem_size(), out.data, out.bytes)) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s overlaps the output %s", op, name,
                out_name);
  }
  return NORMKIT_SUCCESS;
}

normkit_status CheckTensorsDisjoint(const char* op, const TensorView& a, const char* a_name,
                                    const TensorView& b, const char* b_name) {
  if (RangesOverlap(a.data, a.bytes, b.data, b.bytes)) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s overlaps %s", op, a_name, b_name);
  }
  return NORMKIT_SUCCESS;
}

// x and y of an operator call; `out` names the one written.
normkit_status ValidateXY(const char* op, const normkit_tensor* x, const normkit_tensor* y,
                          const normkit_shift_sum_params* params, bool x_is_output, TensorView* xv,
                          TensorView* yv, ShiftSumCall* call) {
  NORMKIT_RETURN_IF_ERROR(ValidateParams(op, params));
  NORMKIT_RETURN_IF_ERROR(ValidateX(op, "x", x, params, xv, call));
  NORMKIT_RETURN_IF_ERROR(ValidateY(op, y, call, yv));
  NORMKIT_RETURN_IF_ERROR(CheckSameDevice(op, *xv, "x", *yv, "y"));
  NORMKIT_RETURN_IF_ERROR(CheckTensorsDisjoint(op, *xv, "x", *yv, "y"));
  const TensorView& out = x_is_output ? *xv : *yv;
  return CheckDisjoint(op, "params->mask", params->mask, call->mask_elems, out,
                       x_is_output ? "x" : "y", *call);
}

normkit_dtype DtypeOf(kernels::Storage storage) {
  return storage == kernels::Storage::kBFloat16  ? NORMKIT_DTYPE_BFLOAT16
         : storage == kernels::Storage::kFloat16 ? NORMKIT_DTYPE_FLOAT16
                                                 : NORMKIT_DTYPE_FLOAT32;
}

// The names of the tensor `op` reads and of the one it writes, as the C API calls them.
std::pair<const char*, const char*> StoredNames(ShiftSumOp op) {
  switch (op) {
    case ShiftSumOp::kForward: return {"x", "y"};
    case ShiftSumOp::kShift: return {"x", "xs"};
    case ShiftSumOp::kUnshift: return {"xs", "x"};
    default: return {"y", "x"};
  }
}

// A call with a bfloat16 / float16 tensor: on CPU the float32 drivers on widened chunks
// of samples (or the row kernels reading and writing half as stored); on CUDA the float32
// kernels on chunks of samples widened on the device.
normkit_status RunStored(const char* op, const normkit_context* context, const TensorView& x,
                         const normkit_shift_sum_params* params, const ShiftSumCall& call,
                         cpu::ShiftSumStoredCall stored) {
  if (x.on_cuda()) {
    const auto [in_name, out_name] = StoredNames(stored.op);
    NORMKIT_RETURN_IF_ERROR(cuda::CheckCall(op, x.device_index,
                                            {{in_name, stored.in.data},
                                             {out_name, stored.out.data},
                                             {"params->mask", params->mask},
                                             {"normalizer", stored.normalizer}}));
    cuda::ShiftSumStoredCall device_call{stored.op,
                                         {stored.in.data, DtypeOf(stored.in.storage)},
                                         {stored.out.data, DtypeOf(stored.out.storage)}};
    device_call.mode = stored.mode;
    device_call.lambda = stored.lambda;
    device_call.gamma = stored.gamma;
    device_call.normalizer = stored.normalizer;
    return cuda::ShiftSumStored(op, context, x.device_index, call.Problem<float>(), device_call);
  }
  cpu::ShiftSumStored(ResolveContext(context), call.Problem<float>(), stored);
  return NORMKIT_SUCCESS;
}

cpu::StoredTensor Stored(const TensorView& t) {
  return {t.data, kernels::StorageOf(t.dtype)};
}

}  // namespace
}  // namespace normkit

using normkit::ShiftSumCall;
using normkit::TensorView;

extern "C" NORMKIT_API normkit_status normkit_shift_sum(const normkit_context* context,
                                                        const normkit_tensor* x,
                                                        const normkit_shift_sum_params* params,
                                                        const normkit_tensor* y) {
  constexpr const char* kOp = "shift_sum";
  return normkit::Guarded(kOp, [&] {
    TensorView xv, yv;
    ShiftSumCall call;
    NORMKIT_RETURN_IF_ERROR(normkit::ValidateXY(kOp, x, y, params, false, &xv, &yv, &call));
    if (call.stored()) {
      return normkit::RunStored(
          kOp, context, xv, params, call,
          {normkit::cpu::ShiftSumOp::kForward, normkit::Stored(xv), normkit::Stored(yv)});
    }
    return normkit::DispatchDtype(call, [&](auto zero) {
      using T = decltype(zero);
      const auto* in = static_cast<const T*>(xv.data);
      auto* out = static_cast<T*>(yv.data);
      if (xv.on_cuda()) {
        NORMKIT_RETURN_IF_ERROR(normkit::CheckCudaCall(
            kOp, xv, {{"x", in}, {"y", out}, {"params->mask", params->mask}}));
        return normkit::cuda::ShiftSumForward(kOp, context, xv.device_index, call.Problem<T>(), in,
                                              out);
      }
      normkit::cpu::ShiftSumForward(normkit::ResolveContext(context), call.Problem<T>(), in, out);
      return NORMKIT_SUCCESS;
    });
  });
}

extern "C" NORMKIT_API normkit_status
normkit_shift_sum_adjoint(const normkit_context* context, const normkit_tensor* y,
                          const normkit_shift_sum_params* params, const normkit_tensor* x) {
  constexpr const char* kOp = "shift_sum_adjoint";
  return normkit::Guarded(kOp, [&] {
    TensorView xv, yv;
    ShiftSumCall call;
    NORMKIT_RETURN_IF_ERROR(normkit::ValidateXY(kOp, x, y, params, true, &xv, &yv, &call));
    if (call.stored()) {
      return normkit::RunStored(
          kOp, context, xv, params, call,
          {normkit::cpu::ShiftSumOp::kAdjoint, normkit::Stored(yv), normkit::Stored(xv)});
    }
    return normkit::DispatchDtype(call, [&](auto zero) {
      using T = decltype(zero);
      const auto* in = static_cast<const T*>(yv.data);
      auto* out = static_cast<T*>(xv.data);
      if (xv.on_cuda()) {
        NORMKIT_RETURN_IF_ERROR(normkit::CheckCudaCall(
            kOp, xv, {{"y", in}, {"x", out}, {"params->mask", params->mask}}));
        return normkit::cuda::ShiftSumAdjoint(kOp, context, xv.device_index, call.Problem<T>(), in,
                                              out);
      }
      normkit::cpu::ShiftSumAdjoint(normkit::ResolveContext(context), call.Problem<T>(), in, out);
      return NORMKIT_SUCCESS;
    });
  });
}

extern "C" NORMKIT_API normkit_status
normkit_shift_sum_normalizer(const normkit_context* context, const normkit_tensor* x,
                             const normkit_shift_sum_params* params, void* phi_s) {
  constexpr const char* kOp = "shift_sum_normalizer";
  return normkit::Guarded(kOp, [&] {
    TensorView xv;
    ShiftSumCall call;
    NORMKIT_RETURN_IF_ERROR(normkit::ValidateParams(kOp, params));
    NORMKIT_RETURN_IF_ERROR(normkit::ValidateX(kOp, "x", x, params, &xv, &call, true));
    NORMKIT_RETURN_IF_ERROR(normkit::CheckNotNull(kOp, "phi_s", phi_s));
    NORMKIT_RETURN_IF_ERROR(normkit::CheckElementAligned(kOp, "phi_s", phi_s, call.elem_size()));
    NORMKIT_RETURN_IF_ERROR(
        normkit::CheckElementAligned(kOp, "params->mask", params->mask, call.elem_size()));
    if (params->mask && normkit::RangesOverlap(params->mask, call.mask_elems * call.elem_size(),
                                               phi_s, call.normalizer_elems * call.elem_size())) {
      return normkit::Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                           "%s: params->mask overlaps the output phi_s", kOp);
    }
    return normkit::DispatchDtype(call, [&](auto zero) {
      using T = decltype(zero);
      if (xv.on_cuda()) {
        NORMKIT_RETURN_IF_ERROR(
            normkit::CheckCudaCall(kOp, xv, {{"phi_s", phi_s}, {"params->mask", params->mask}}));
        return normkit::cuda::ShiftSumNormalizer(kOp, context, xv.device_index, call.Problem<T>(),
                                                 static_cast<T*>(phi_s));
      }
      normkit::cpu::ShiftSumNormalizer(normkit::ResolveContext(context), call.Problem<T>(),
                                       static_cast<T*>(phi_s));
      return NORMKIT_SUCCESS;
    });
  });
}

extern "C" NORMKIT_API normkit_status normkit_shift_sum_pinv(const normkit_context* context,
                                                             const normkit_tensor* y,
                                                             const normkit_shift_sum_params* params,
                                                             int32_t mode, const void* normalizer,
                                                             const normkit_tensor* x) {
  constexpr const char* kOp = "shift_sum_pinv";
  return normkit::Guarded(kOp, [&] {
    TensorView xv, yv;
    ShiftSumCall call;
    NORMKIT_RETURN_IF_ERROR(normkit::ValidateXY(kOp, x, y, params, true, &xv, &yv, &call));
    if (mode != NORMKIT_PINV_MOORE_PENROSE && mode != NORMKIT_PINV_DIVIDE_BY_MASK) {
      return normkit::Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                           "%s: mode = %d is not a normkit_pinv_mode", kOp, mode);
    }
    if (mode == NORMKIT_PINV_DIVIDE_BY_MASK && normalizer != nullptr) {
      return normkit::Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                           "%s: normalizer must be NULL with NORMKIT_PINV_DIVIDE_BY_MASK (it "
                           "divides by the count of covering channels, not by Phi_s)",
                           kOp);
    }
    NORMKIT_RETURN_IF_ERROR(normkit::CheckDisjoint(kOp, "normalizer", normalizer,
                                                   call.normalizer_elems, xv, "x", call));
    if (call.stored()) {
      normkit::cpu::ShiftSumStoredCall stored{normkit::cpu::ShiftSumOp::kPinv, normkit::Stored(yv),
                                              normkit::Stored(xv)};
      stored.mode = static_cast<normkit::PinvMode>(mode);
      stored.normalizer = static_cast<const float*>(normalizer);
      return normkit::RunStored(kOp, context, xv, params, call, stored);
    }
    return normkit::DispatchDtype(call, [&](auto zero) {
      using T = decltype(zero);
      const auto pinv_mode = static_cast<normkit::PinvMode>(mode);
      const auto* norm = static_cast<const T*>(normalizer);
      const auto* in = static_cast<const T*>(yv.data);
      auto* out = static_cast<T*>(xv.data);
      if (xv.on_cuda()) {
        NORMKIT_RETURN_IF_ERROR(normkit::CheckCudaCall(
            kOp, xv,
            {{"y", in}, {"x", out}, {"params->mask", params->mask}, {"normalizer", normalizer}}));
        return normkit::cuda::ShiftSumPinv(kOp, context, xv.device_index, call.Problem<T>(),
                                           pinv_mode, norm, in, out);
      }
      normkit::cpu::ShiftSumPinv(normkit::ResolveContext(context), call.Problem<T>(), pinv_mode,
                                 norm, in, out);
      return NORMKIT_SUCCESS;
    });
  });
}

extern "C" NORMKIT_API normkit_status normkit_shift_sum_gap_step(
    const normkit_context* context, const normkit_tensor* x, const normkit_tensor* y,
    const normkit_shift_sum_params* params, double lambda, double gamma, const void* normalizer) {
  constexpr const char* kOp = "shift_sum_gap_step";
  return normkit::Guarded(kOp, [&] {
    TensorView xv, yv;
    ShiftSumCall call;
    NORMKIT_RETURN_IF_ERROR(normkit::ValidateXY(kOp, x, y, params, true, &xv, &yv, &call));
    if (!std::isfinite(lambda) || !std::isfinite(gamma)) {
      return normkit::Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                           "%s: lambda = %g and gamma = %g must be finite", kOp, lambda, gamma);
    }
    NORMKIT_RETURN_IF_ERROR(normkit::CheckDisjoint(kOp, "normalizer", normalizer,
                                                   call.normalizer_elems, xv, "x", call));
    if (call.stored()) {
      normkit::cpu::ShiftSumStoredCall stored{normkit::cpu::ShiftSumOp::kGapStep,
                                              normkit::Stored(yv), normkit::Stored(xv)};
      stored.lambda = static_cast<float>(lambda);
      stored.gamma = static_cast<float>(gamma);
      stored.normalizer = static_cast<const float*>(normalizer);
      return normkit::RunStored(kOp, context, xv, params, call, stored);
    }
    return normkit::DispatchDtype(call, [&](auto zero) {
      using T = decltype(zero);
      const auto* norm = static_cast<const T*>(normalizer);
      const auto* in = static_cast<const T*>(yv.data);
      auto* inout = static_cast<T*>(xv.data);
      if (xv.on_cuda()) {
        NORMKIT_RETURN_IF_ERROR(normkit::CheckCudaCall(
            kOp, xv,
            {{"x", inout}, {"y", in}, {"params->mask", params->mask}, {"normalizer", normalizer}}));
        return normkit::cuda::ShiftSumGapStep(kOp, context, xv.device_index, call.Problem<T>(),
                                              static_cast<T>(lambda), static_cast<T>(gamma), norm,
                                              in, inout);
      }
      normkit::cpu::ShiftSumGapStep(normkit::ResolveContext(context), call.Problem<T>(),
                                    static_cast<T>(lambda), static_cast<T>(gamma), norm, in, inout);
      return NORMKIT_SUCCESS;
    });
  });
}

namespace normkit {
namespace {

// xs: x's layout, [B, C, H', W'], its dtype x's partner (CheckPartnerDtype).
normkit_status ValidateStack(const char* op, const TensorView& xs, ShiftSumCall* call_ptr,
                             bool channels_last) {
  NORMKIT_RETURN_IF_ERROR(CheckPartnerDtype(op, "xs", xs.dtype, call_ptr));
  const ShiftSumCall& call = *call_ptr;
  if (xs.rank != 4 || xs.channels_last() != channels_last || xs.shape[0] != call.B ||
      xs.shape[1] != call.C || xs.shape[2] != call.H_out || xs.shape[3] != call.W_out) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: xs must be x's layout with shape [B, C, H', W'] = "
                "[%lld, %lld, %lld, %lld]",
                op, static_cast<long long>(call.B), static_cast<long long>(call.C),
                static_cast<long long>(call.H_out), static_cast<long long>(call.W_out));
  }
  return NORMKIT_SUCCESS;
}

normkit_status ShiftEntry(const char* op, const normkit_context* context, const normkit_tensor* x,
                          const normkit_tensor* xs, const normkit_shift_sum_params* params,
                          bool forward) {
  return Guarded(op, [&] {
    NORMKIT_RETURN_IF_ERROR(ValidateParams(op, params));
    TensorView xv, sv;
    ShiftSumCall call;
    NORMKIT_RETURN_IF_ERROR(ValidateX(op, "x", x, params, &xv, &call));
    NORMKIT_RETURN_IF_ERROR(ValidateTensor(op, "xs", xs, &sv));
    NORMKIT_RETURN_IF_ERROR(ValidateStack(op, sv, &call, xv.channels_last()));
    NORMKIT_RETURN_IF_ERROR(CheckSameDevice(op, xv, "x", sv, "xs"));
    NORMKIT_RETURN_IF_ERROR(CheckTensorsDisjoint(op, xv, "x", sv, "xs"));
    if (call.stored()) {
      return RunStored(op, context, xv, params, call,
                       {forward ? cpu::ShiftSumOp::kShift : cpu::ShiftSumOp::kUnshift,
                        Stored(forward ? xv : sv), Stored(forward ? sv : xv)});
    }
    return DispatchDtype(call, [&](auto zero) {
      using T = decltype(zero);
      const auto problem = call.Problem<T>();
      const auto* in = static_cast<const T*>(forward ? xv.data : sv.data);
      auto* out = static_cast<T*>(forward ? sv.data : xv.data);
      if (xv.on_cuda()) {
        NORMKIT_RETURN_IF_ERROR(CheckCudaCall(op, xv, {{"x", xv.data}, {"xs", sv.data}}));
        return cuda::ShiftStack(op, context, xv.device_index, problem, forward, in, out);
      }
      if (forward) {
        cpu::Shift(ResolveContext(context), problem, in, out);
      } else {
        cpu::Unshift(ResolveContext(context), problem, in, out);
      }
      return NORMKIT_SUCCESS;
    });
  });
}

}  // namespace
}  // namespace normkit

extern "C" NORMKIT_API normkit_status normkit_shift(const normkit_context* context,
                                                    const normkit_tensor* x,
                                                    const normkit_shift_sum_params* params,
                                                    const normkit_tensor* xs) {
  return normkit::ShiftEntry("shift", context, x, xs, params, true);
}

extern "C" NORMKIT_API normkit_status normkit_unshift(const normkit_context* context,
                                                      const normkit_tensor* xs,
                                                      const normkit_shift_sum_params* params,
                                                      const normkit_tensor* x) {
  return normkit::ShiftEntry("unshift", context, x, xs, params, false);
}
