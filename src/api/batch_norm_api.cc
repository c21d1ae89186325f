// SPDX-License-Identifier: Apache-2.0
// C entry points of batch-norm inference and of folding it into scale / shift,
// convolutions and linear layers.

#include <utility>

#include "api/guard.h"
#include "core/context.h"
#include "core/tensor.h"
#include "cpu/batch_norm.h"
#include "cpu/fold.h"
#include "cuda/ops.h"
#include "normkit/normkit.h"

namespace normkit {

namespace {

normkit_status ValidateVariance(const char* op, int64_t channels, const float* var) {
  const int64_t c = cpu::FirstInvalidVariance(channels, var);
  if (c == channels) return NORMKIT_SUCCESS;
  return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: running_var[%lld] = %g, must be finite and >= 0",
              op, static_cast<long long>(c), static_cast<double>(var[c]));
}

normkit_status ValidateBatchNormParams(const char* op, int64_t channels,
                                       const BatchNormParams& bn) {
  NORMKIT_RETURN_IF_ERROR(CheckNotNull(op, "running_mean", bn.mean));
  NORMKIT_RETURN_IF_ERROR(CheckNotNull(op, "running_var", bn.var));
  NORMKIT_RETURN_IF_ERROR(CheckElementAligned(op, "gamma", bn.gamma, sizeof(float)));
  NORMKIT_RETURN_IF_ERROR(CheckElementAligned(op, "beta", bn.beta, sizeof(float)));
  NORMKIT_RETURN_IF_ERROR(CheckElementAligned(op, "running_mean", bn.mean, sizeof(float)));
  NORMKIT_RETURN_IF_ERROR(CheckElementAligned(op, "running_var", bn.var, sizeof(float)));
  NORMKIT_RETURN_IF_ERROR(CheckEps(op, bn.eps));
  return ValidateVariance(op, channels, bn.var);
}

// Batch norm on CUDA tensors: the parameters are device arrays. The CUDA module folds
// them on the device with the CPU's formula and hands running_var to the same
// validation as on CPU before it writes y.
normkit_status BatchNormInferenceCuda(const char* op, const normkit_context* context,
                                      const TensorView& x, const TensorView& y,
                                      const BatchNormParams& bn) {
  NORMKIT_RETURN_IF_ERROR(CheckNotNull(op, "running_mean", bn.mean));
  NORMKIT_RETURN_IF_ERROR(CheckNotNull(op, "running_var", bn.var));
  NORMKIT_RETURN_IF_ERROR(CheckEps(op, bn.eps));
  for (const auto& [name, p] : {std::pair<const char*, const float*>{"gamma", bn.gamma},
                                {"beta", bn.beta},
                                {"running_mean", bn.mean},
                                {"running_var", bn.var}}) {
    NORMKIT_RETURN_IF_ERROR(CheckElementAligned(op, name, p, sizeof(float)));
  }
  NORMKIT_RETURN_IF_ERROR(cuda::CheckCall(op, x.device_index,
                                          {{"x", x.data},
                                           {"y", y.data},
                                           {"gamma", bn.gamma},
                                           {"beta", bn.beta},
                                           {"running_mean", bn.mean},
                                           {"running_var", bn.var}}));
  const int64_t C = x.channels;
  return cuda::BatchNormInference(
      op, context, x, y, bn.gamma, bn.beta, bn.mean, bn.var, bn.eps,
      [&](const float* host_var) { return ValidateVariance(op, C, host_var); });
}

normkit_status CheckChannels(const char* op, const char* name, int64_t value) {
  if (value < 1) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s = %lld, must be >= 1", op, name,
                static_cast<long long>(value));
  }
  return NORMKIT_SUCCESS;
}

// An output array must not partially overlap any BN input; the very same array is
// fine: each channel's inputs are all read before its outputs are written (the fold
// kernel, and the double scale / shift of FoldBatchNormIntoConv, made before any write).
normkit_status CheckOutputVsBatchNorm(const char* op, const char* name, const float* out,
                                      int64_t count, const BatchNormParams& bn) {
  NORMKIT_RETURN_IF_ERROR(
      CheckSameOrDisjoint(op, name, out, count, "gamma", bn.gamma, count, true));
  NORMKIT_RETURN_IF_ERROR(CheckSameOrDisjoint(op, name, out, count, "beta", bn.beta, count, true));
  NORMKIT_RETURN_IF_ERROR(
      CheckSameOrDisjoint(op, name, out, count, "running_mean", bn.mean, count, true));
  return CheckSameOrDisjoint(op, name, out, count, "running_var", bn.var, count, true);
}

normkit_status FoldIntoConv(const char* op, float* weight, int64_t out_channels,
                            int64_t in_channels, int64_t groups, int64_t kernel_elems,
                            int32_t weight_order, const float* bias, float* folded_bias,
                            const BatchNormParams& bn) {
  NORMKIT_RETURN_IF_ERROR(CheckNotNull(op, "weight", weight));
  NORMKIT_RETURN_IF_ERROR(CheckNotNull(op, "folded_bias", folded_bias));
  NORMKIT_RETURN_IF_ERROR(CheckChannels(op, "out_channels", out_channels));
  NORMKIT_RETURN_IF_ERROR(CheckChannels(op, "in_channels", in_channels));
  NORMKIT_RETURN_IF_ERROR(CheckChannels(op, "groups", groups));
  NORMKIT_RETURN_IF_ERROR(CheckChannels(op, "kernel_elems", kernel_elems));
  if (in_channels % groups != 0 || out_channels % groups != 0) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: groups = %lld must divide in_channels = %lld and out_channels = %lld", op,
                static_cast<long long>(groups), static_cast<long long>(in_channels),
                static_cast<long long>(out_channels));
  }
  if (weight_order != NORMKIT_CONV_WEIGHT_OIHW &&
      weight_order != NORMKIT_CONV_WEIGHT_IOHW_TRANSPOSED) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: weight_order = %d is not a normkit_conv_weight_order", op, weight_order);
  }
  int64_t weight_count = 0;
  if (!CheckedMul(out_channels, in_channels / groups, &weight_count) ||
      !CheckedMul(weight_count, kernel_elems, &weight_count) ||
      !CheckedMul(weight_count, static_cast<int64_t>(sizeof(float)), &weight_count)) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: the weight's size overflows int64", op);
  }
  weight_count /= static_cast<int64_t>(sizeof(float));
  NORMKIT_RETURN_IF_ERROR(ValidateBatchNormParams(op, out_channels, bn));
  const int64_t O = out_channels;
  NORMKIT_RETURN_IF_ERROR(CheckOutputVsBatchNorm(op, "folded_bias", folded_bias, O, bn));
  NORMKIT_RETURN_IF_ERROR(
      CheckSameOrDisjoint(op, "folded_bias", folded_bias, O, "bias", bias, O, true));
  // The weight is rewritten before the bias is read: nothing else may live in it.
  NORMKIT_RETURN_IF_ERROR(CheckSameOrDisjoint(op, "weight", weight, weight_count, "folded_bias",
                                              folded_bias, O, false));
  NORMKIT_RETURN_IF_ERROR(
      CheckSameOrDisjoint(op, "weight", weight, weight_count, "bias", bias, O, false));
  NORMKIT_RETURN_IF_ERROR(
      CheckSameOrDisjoint(op, "weight", weight, weight_count, "gamma", bn.gamma, O, false));
  NORMKIT_RETURN_IF_ERROR(
      CheckSameOrDisjoint(op, "weight", weight, weight_count, "beta", bn.beta, O, false));
  NORMKIT_RETURN_IF_ERROR(
      CheckSameOrDisjoint(op, "weight", weight, weight_count, "running_mean", bn.mean, O, false));
  NORMKIT_RETURN_IF_ERROR(
      CheckSameOrDisjoint(op, "weight", weight, weight_count, "running_var", bn.var, O, false));

  cpu::ConvShape shape{out_channels, in_channels, groups, kernel_elems,
                       weight_order == NORMKIT_CONV_WEIGHT_OIHW
                           ? cpu::ConvWeightOrder::kOIHW
                           : cpu::ConvWeightOrder::kIOHWTransposed};
  cpu::FoldBatchNormIntoConv(shape, weight, bias, folded_bias, bn);
  return NORMKIT_SUCCESS;
}

}  // namespace
}  // namespace normkit

extern "C" {

NORMKIT_API normkit_status normkit_batch_norm_fold(int64_t channels, const float* gamma,
                                                   const float* beta, const float* running_mean,
                                                   const float* running_var, float eps,
                                                   float* scale, float* shift) {
  using namespace normkit;
  constexpr const char* kOp = "batch_norm_fold";
  return Guarded(kOp, [&] {
    NORMKIT_RETURN_IF_ERROR(CheckChannels(kOp, "channels", channels));
    NORMKIT_RETURN_IF_ERROR(CheckNotNull(kOp, "scale", scale));
    NORMKIT_RETURN_IF_ERROR(CheckNotNull(kOp, "shift", shift));
    const BatchNormParams bn{gamma, beta, running_mean, running_var, eps};
    NORMKIT_RETURN_IF_ERROR(ValidateBatchNormParams(kOp, channels, bn));
    NORMKIT_RETURN_IF_ERROR(
        CheckSameOrDisjoint(kOp, "scale", scale, channels, "shift", shift, channels, false));
    NORMKIT_RETURN_IF_ERROR(CheckOutputVsBatchNorm(kOp, "scale", scale, channels, bn));
    NORMKIT_RETURN_IF_ERROR(CheckOutputVsBatchNorm(kOp, "shift", shift, channels, bn));
    cpu::BatchNormScaleShift(channels, bn, scale, shift);
    return NORMKIT_SUCCESS;
  });
}

NORMKIT_API normkit_status normkit_batch_norm_inference(
    const normkit_context* context, const normkit_tensor* x, const float* gamma, const float* beta,
    const float* running_mean, const float* running_var, float eps, const normkit_tensor* y) {
  using namespace normkit;
  constexpr const char* kOp = "batch_norm_inference";
  return Guarded(kOp, [&] {
    TensorView xv, yv;
    NORMKIT_RETURN_IF_ERROR(ValidateUnaryTensors(kOp, x, y, &xv, &yv, UnaryDtypes::kStoragePairs));
    const BatchNormParams bn{gamma, beta, running_mean, running_var, eps};
    // y is written while the parameters are read (folded per range, on other threads).
    const int64_t C = xv.channels;
    NORMKIT_RETURN_IF_ERROR(CheckParamDisjoint(kOp, "gamma", gamma, C, yv));
    NORMKIT_RETURN_IF_ERROR(CheckParamDisjoint(kOp, "beta", beta, C, yv));
    NORMKIT_RETURN_IF_ERROR(CheckParamDisjoint(kOp, "running_mean", running_mean, C, yv));
    NORMKIT_RETURN_IF_ERROR(CheckParamDisjoint(kOp, "running_var", running_var, C, yv));
    if (xv.on_cuda()) return BatchNormInferenceCuda(kOp, context, xv, yv, bn);
    NORMKIT_RETURN_IF_ERROR(ValidateBatchNormParams(kOp, xv.channels, bn));
    cpu::BatchNormInference(ResolveContext(context), xv, yv, bn);
    return NORMKIT_SUCCESS;
  });
}

NORMKIT_API normkit_status normkit_fold_batch_norm_into_conv(
    float* weight, int64_t out_channels, int64_t in_channels, int64_t groups, int64_t kernel_elems,
    int32_t weight_order, const float* bias, float* folded_bias, const float* gamma,
    const float* beta, const float* running_mean, const float* running_var, float eps) {
  using namespace normkit;
  constexpr const char* kOp = "fold_batch_norm_into_conv";
  return Guarded(kOp, [&] {
    return FoldIntoConv(kOp, weight, out_channels, in_channels, groups, kernel_elems, weight_order,
                        bias, folded_bias, {gamma, beta, running_mean, running_var, eps});
  });
}

NORMKIT_API normkit_status normkit_fold_batch_norm_into_linear(
    float* weight, int64_t out_features, int64_t in_features, const float* bias, float* folded_bias,
    const float* gamma, const float* beta, const float* running_mean, const float* running_var,
    float eps) {
  using namespace normkit;
  constexpr const char* kOp = "fold_batch_norm_into_linear";
  return Guarded(kOp, [&] {
    return FoldIntoConv(kOp, weight, out_features, in_features, 1, 1, NORMKIT_CONV_WEIGHT_OIHW,
                        bias, folded_bias, {gamma, beta, running_mean, running_var, eps});
  });
}

}  // extern "C"
