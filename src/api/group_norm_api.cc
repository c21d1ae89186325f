// SPDX-License-Identifier: Apache-2.0
// C entry points of the normalization family: group norm and its instance / channel
// layer norm forms, and the row-wise layer norm and RMS norm.
#include <utility>

#include "api/guard.h"
#include "core/context.h"
#include "core/size_math.h"
#include "core/tensor.h"
#include "cpu/group_norm.h"
#include "cuda/ops.h"
#include "normkit/normkit.h"

namespace normkit {
namespace {

normkit_status CheckActivation(const char* op, int32_t activation) {
  if (activation != NORMKIT_ACTIVATION_NONE && activation != NORMKIT_ACTIVATION_RELU &&
      activation != NORMKIT_ACTIVATION_SILU) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: activation = %d is not a normkit_activation",
                op, activation);
  }
  return NORMKIT_SUCCESS;
}

// A statistics output of `count` floats shares no byte with x, y or any other array.
normkit_status CheckStatsOutput(const char* op, const char* name, const float* out, int64_t count,
                                const TensorView& x, const TensorView& y, const char* other_name,
                                const float* other, int64_t other_count) {
  if (out == nullptr) return NORMKIT_SUCCESS;
  const int64_t bytes = count * static_cast<int64_t>(sizeof(float));
  if (RangesOverlap(out, bytes, x.data, x.bytes)) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s overlaps the input x", op, name);
  }
  NORMKIT_RETURN_IF_ERROR(CheckParamDisjoint(op, name, out, count, y));
  return CheckSameOrDisjoint(op, name, out, count, other_name, other, other_count, false);
}

// eps and the arrays every normalization takes: gamma / beta of `params` floats
// must not overlap y; mean_out / rstd_out of `stats` floats must not overlap anything.
normkit_status ValidateNormArrays(const char* op, const TensorView& xv, const TensorView& yv,
                                  float eps, const float* gamma, const float* beta, int64_t params,
                                  float* mean_out, float* rstd_out, int64_t stats) {
  NORMKIT_RETURN_IF_ERROR(CheckEps(op, eps));
  NORMKIT_RETURN_IF_ERROR(CheckParamDisjoint(op, "gamma", gamma, params, yv));
  NORMKIT_RETURN_IF_ERROR(CheckParamDisjoint(op, "beta", beta, params, yv));
  for (const auto& [name, out] : {std::pair<const char*, float*>{"mean_out", mean_out},
                                  std::pair<const char*, float*>{"rstd_out", rstd_out}}) {
    NORMKIT_RETURN_IF_ERROR(CheckStatsOutput(op, name, out, stats, xv, yv, "gamma", gamma, params));
    NORMKIT_RETURN_IF_ERROR(CheckStatsOutput(op, name, out, stats, xv, yv, "beta", beta, params));
  }
  return CheckSameOrDisjoint(op, "mean_out", mean_out, stats, "rstd_out", rstd_out, stats, false);
}

normkit_status NormCuda(const char* op, const normkit_context* context, const TensorView& xv,
                        const TensorView& yv, const NormArgs& args, bool rows) {
  NORMKIT_RETURN_IF_ERROR(cuda::CheckCall(op, xv.device_index,
                                          {{"x", xv.data},
                                           {"y", yv.data},
                                           {"gamma", args.gamma},
                                           {"beta", args.beta},
                                           {"mean_out", args.mean},
                                           {"rstd_out", args.rstd}}));
  return cuda::Norm(op, context, xv, yv, args, rows);
}

normkit_status GroupNormEntry(const char* op, const normkit_context* context,
                              const normkit_tensor* x, int64_t groups, bool groups_is_channels,
                              const float* gamma, const float* beta, float eps, int32_t activation,
                              const normkit_tensor* y, float* mean_out, float* rstd_out) {
  return Guarded(op, [&] {
    TensorView xv, yv;
    NORMKIT_RETURN_IF_ERROR(ValidateUnaryTensors(op, x, y, &xv, &yv, UnaryDtypes::kStoragePairs));
    if (groups_is_channels) groups = xv.channels;
    if (groups < 1) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: groups = %lld, must be >= 1", op,
                  static_cast<long long>(groups));
    }
    if (xv.channels % groups != 0) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: C=%lld is not divisible by groups=%lld", op,
                  static_cast<long long>(xv.channels), static_cast<long long>(groups));
    }
    NORMKIT_RETURN_IF_ERROR(CheckActivation(op, activation));
    NORMKIT_RETURN_IF_ERROR(ValidateNormArrays(op, xv, yv, eps, gamma, beta, xv.channels, mean_out,
                                               rstd_out, xv.batch * groups));
    NormArgs args;
    args.groups = groups;
    args.gamma = gamma;
    args.beta = beta;
    args.eps = eps;
    args.activation = activation;
    args.mean = mean_out;
    args.rstd = rstd_out;
    if (xv.on_cuda()) return NormCuda(op, context, xv, yv, args, false);
    cpu::GroupNorm(ResolveContext(context), xv, yv, args);
    return NORMKIT_SUCCESS;
  });
}

NormArgs RowNormArgs(const float* gamma, const float* beta, float eps, bool rms, float* mean_out,
                     float* rstd_out) {
  NormArgs args;
  args.gamma = gamma;
  args.beta = beta;
  args.eps = eps;
  args.rms = rms;
  args.mean = mean_out;
  args.rstd = rstd_out;
  return args;
}

normkit_status RowNormEntry(const char* op, const normkit_context* context, const normkit_tensor* x,
                            const float* gamma, const float* beta, float eps, bool rms,
                            const normkit_tensor* y, float* mean_out, float* rstd_out) {
  return Guarded(op, [&] {
    TensorView xv, yv;
    NORMKIT_RETURN_IF_ERROR(ValidateUnaryTensors(op, x, y, &xv, &yv, UnaryDtypes::kStoragePairs));
    if (xv.rank != 2) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                  "%s: x->rank = %d, expected 2 ([rows, D]; describe [B, T, D] as [B*T, D])", op,
                  xv.rank);
    }
    NORMKIT_RETURN_IF_ERROR(ValidateNormArrays(op, xv, yv, eps, gamma, beta, xv.channels, mean_out,
                                               rstd_out, xv.batch));
    const NormArgs args = RowNormArgs(gamma, beta, eps, rms, mean_out, rstd_out);
    if (xv.on_cuda()) return NormCuda(op, context, xv, yv, args, true);
    cpu::RowNorm(ResolveContext(context), xv, yv, args);
    return NORMKIT_SUCCESS;
  });
}

// An array of `count` floats (NULL passes) shares no byte with the tensor `t`.
normkit_status CheckArrayApart(const char* op, const char* name, const float* p, int64_t count,
                               const char* t_name, const TensorView& t) {
  if (p != nullptr &&
      RangesOverlap(p, count * static_cast<int64_t>(sizeof(float)), t.data, t.bytes)) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s overlaps %s", op, name, t_name);
  }
  return NORMKIT_SUCCESS;
}

normkit_status AddRowNormEntry(const char* op, const normkit_context* context,
                               const normkit_tensor* x, const normkit_tensor* residual,
                               const float* bias, const float* gamma, const float* beta, float eps,
                               bool rms, const normkit_tensor* y, const normkit_tensor* h_out,
                               float* mean_out, float* rstd_out) {
  return Guarded(op, [&] {
    TensorView xv, yv, rv, hv;
    NORMKIT_RETURN_IF_ERROR(ValidateUnaryTensors(op, x, y, &xv, &yv, UnaryDtypes::kStoragePairs));
    if (xv.rank != 2) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                  "%s: x->rank = %d, expected 2 ([rows, D]; describe [B, T, D] as [B*T, D])", op,
                  xv.rank);
    }
    NORMKIT_RETURN_IF_ERROR(ValidateTensor(op, "residual", residual, &rv));
    NORMKIT_RETURN_IF_ERROR(CheckLikeX(op, "residual", xv, rv, false));
    NORMKIT_RETURN_IF_ERROR(CheckInPlaceOrApart(op, "y", yv, "residual", rv));
    if (yv.data == rv.data && yv.dtype != rv.dtype) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                  "%s: y->data == residual->data with y->dtype = %s and residual->dtype = %s (in "
                  "place needs one dtype)",
                  op, DtypeName(yv.dtype), DtypeName(rv.dtype));
    }
    const int64_t D = xv.channels, rows = xv.batch;
    NORMKIT_RETURN_IF_ERROR(
        ValidateNormArrays(op, xv, yv, eps, gamma, beta, D, mean_out, rstd_out, rows));
    NORMKIT_RETURN_IF_ERROR(CheckElementAligned(op, "bias", bias, sizeof(float)));
    NORMKIT_RETURN_IF_ERROR(CheckArrayApart(op, "bias", bias, D, "the output y", yv));
    const std::pair<const char*, const float*> arrays[] = {{"bias", bias},
                                                           {"gamma", gamma},
                                                           {"beta", beta},
                                                           {"mean_out", mean_out},
                                                           {"rstd_out", rstd_out}};
    const int64_t counts[] = {D, D, D, rows, rows};
    for (int i = 3; i < 5; ++i) {  // the statistics outputs against the residual input
      NORMKIT_RETURN_IF_ERROR(
          CheckArrayApart(op, arrays[i].first, arrays[i].second, counts[i], "residual", rv));
      NORMKIT_RETURN_IF_ERROR(CheckSameOrDisjoint(op, arrays[i].first, arrays[i].second, counts[i],
                                                  "bias", bias, D, false));
    }
    if (h_out != nullptr) {
      NORMKIT_RETURN_IF_ERROR(ValidateTensor(op, "h_out", h_out, &hv));
      NORMKIT_RETURN_IF_ERROR(CheckLikeX(op, "h_out", xv, hv, false));
      NORMKIT_RETURN_IF_ERROR(CheckInPlaceOrApart(op, "h_out", hv, "x", xv));
      NORMKIT_RETURN_IF_ERROR(CheckInPlaceOrApart(op, "h_out", hv, "residual", rv));
      if (RangesOverlap(hv.data, hv.bytes, yv.data, yv.bytes)) {
        return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: h_out overlaps y (two outputs)", op);
      }
      for (int i = 0; i < 5; ++i) {
        NORMKIT_RETURN_IF_ERROR(CheckArrayApart(op, arrays[i].first, arrays[i].second, counts[i],
                                                "the output h_out", hv));
      }
    }
    if (xv.on_cuda()) {
      return Fail(NORMKIT_ERROR_UNSUPPORTED,
                  "%s: CUDA tensors are not supported (CPU only for now)", op);
    }
    const NormArgs args = RowNormArgs(gamma, beta, eps, rms, mean_out, rstd_out);
    cpu::RowResidual add;
    add.residual = rv.data;
    add.bias = bias;
    add.h = h_out != nullptr ? hv.data : nullptr;
    cpu::RowNorm(ResolveContext(context), xv, yv, args, &add);
    return NORMKIT_SUCCESS;
  });
}

}  // namespace
}  // namespace normkit

extern "C" NORMKIT_API normkit_status normkit_group_norm(const normkit_context* context,
                                                         const normkit_tensor* x, int64_t groups,
                                                         const float* gamma, const float* beta,
                                                         float eps, int32_t activation,
                                                         const normkit_tensor* y, float* mean_out,
                                                         float* rstd_out) {
  return normkit::GroupNormEntry("group_norm", context, x, groups, false, gamma, beta, eps,
                                 activation, y, mean_out, rstd_out);
}

extern "C" NORMKIT_API normkit_status normkit_instance_norm(
    const normkit_context* context, const normkit_tensor* x, const float* gamma, const float* beta,
    float eps, int32_t activation, const normkit_tensor* y, float* mean_out, float* rstd_out) {
  return normkit::GroupNormEntry("instance_norm", context, x, 0, true, gamma, beta, eps, activation,
                                 y, mean_out, rstd_out);
}

extern "C" NORMKIT_API normkit_status normkit_channel_layer_norm(
    const normkit_context* context, const normkit_tensor* x, const float* gamma, const float* beta,
    float eps, int32_t activation, const normkit_tensor* y, float* mean_out, float* rstd_out) {
  return normkit::GroupNormEntry("channel_layer_norm", context, x, 1, false, gamma, beta, eps,
                                 activation, y, mean_out, rstd_out);
}

extern "C" NORMKIT_API normkit_status normkit_layer_norm(const normkit_context* context,
                                                         const normkit_tensor* x,
                                                         const float* gamma, const float* beta,
                                                         float eps, const normkit_tensor* y,
                                                         float* mean_out, float* rstd_out) {
  return normkit::RowNormEntry("layer_norm", context, x, gamma, beta, eps, false, y, mean_out,
                               rstd_out);
}

extern "C" NORMKIT_API normkit_status normkit_rms_norm(const normkit_context* context,
                                                       const normkit_tensor* x, const float* gamma,
                                                       float eps, const normkit_tensor* y,
                                                       float* rstd_out) {
  return normkit::RowNormEntry("rms_norm", context, x, gamma, nullptr, eps, true, y, nullptr,
                               rstd_out);
}

extern "C" NORMKIT_API normkit_status normkit_add_layer_norm(
    const normkit_context* context, const normkit_tensor* x, const normkit_tensor* residual,
    const float* bias, const float* gamma, const float* beta, float eps, const normkit_tensor* y,
    const normkit_tensor* h_out, float* mean_out, float* rstd_out) {
  return normkit::AddRowNormEntry("add_layer_norm", context, x, residual, bias, gamma, beta, eps,
                                  false, y, h_out, mean_out, rstd_out);
}

extern "C" NORMKIT_API normkit_status normkit_add_rms_norm(
    const normkit_context* context, const normkit_tensor* x, const normkit_tensor* residual,
    const float* bias, const float* gamma, float eps, const normkit_tensor* y,
    const normkit_tensor* h_out, float* rstd_out) {
  return normkit::AddRowNormEntry("add_rms_norm", context, x, residual, bias, gamma, nullptr, eps,
                                  true, y, h_out, nullptr, rstd_out);
}
