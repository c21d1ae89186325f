// SPDX-License-Identifier: Apache-2.0
// C entry points of batch norm in training mode: the forward and the backward pass.
#include <cmath>
#include <utility>

#include "api/guard.h"
#include "core/context.h"
#include "core/tensor.h"
#include "cpu/batch_norm_training.h"
#include "normkit/normkit.h"

namespace normkit {
namespace {

struct NamedArray {
  const char* name;
  const float* data;
  bool output;
};

// A tensor of the call by name; view null: not given.
struct NamedTensor {
  const char* name;
  const TensorView* view;
};

// The C-float arrays of a call (C floats each): aligned, none over the output tensor
// `out`, the array outputs over no input tensor (those are read again after the arrays
// are written) and no other array; the array inputs free to share memory.
normkit_status CheckArrays(const char* op, int64_t C, NamedTensor out,
                           std::initializer_list<NamedTensor> inputs,
                           std::initializer_list<NamedArray> arrays) {
  const int64_t bytes = C * static_cast<int64_t>(sizeof(float));
  for (const NamedArray& a : arrays) {
    NORMKIT_RETURN_IF_ERROR(CheckElementAligned(op, a.name, a.data, sizeof(float)));
    if (a.data == nullptr) continue;
    if (out.view != nullptr && RangesOverlap(a.data, bytes, out.view->data, out.view->bytes)) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s overlaps the output %s", op, a.name,
                  out.name);
    }
    if (!a.output) continue;
    for (const NamedTensor& in : inputs) {
      if (RangesOverlap(a.data, bytes, in.view->data, in.view->bytes)) {
        return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s overlaps the input %s", op, a.name,
                    in.name);
      }
    }
  }
  for (const NamedArray& a : arrays) {
    for (const NamedArray& b : arrays) {
      if (&a == &b || !(a.output || b.output)) continue;
      NORMKIT_RETURN_IF_ERROR(CheckSameOrDisjoint(op, a.name, a.data, C, b.name, b.data, C, false));
    }
  }
  return NORMKIT_SUCCESS;
}

}  // namespace
}  // namespace normkit

extern "C" NORMKIT_API normkit_status normkit_batch_norm_training(
    const normkit_context* context, const normkit_tensor* x, const float* gamma, const float* beta,
    float eps, float momentum, float* running_mean, float* running_var, const normkit_tensor* y,
    float* save_mean, float* save_rstd) {
  using namespace normkit;
  constexpr const char* kOp = "batch_norm_training";
  return Guarded(kOp, [&] {
    TensorView xv, yv;
    NORMKIT_RETURN_IF_ERROR(ValidateUnaryTensors(kOp, x, y, &xv, &yv, UnaryDtypes::kStoragePairs));
    if (xv.on_cuda()) {
      return Fail(NORMKIT_ERROR_UNSUPPORTED, "%s: x is a CUDA tensor (CPU only for now)", kOp);
    }
    if (xv.batch * xv.spatial < 2) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                  "%s: x has %lld value(s) per channel (N * spatial), training needs at least 2",
                  kOp, static_cast<long long>(xv.batch * xv.spatial));
    }
    NORMKIT_RETURN_IF_ERROR(CheckEps(kOp, eps));
    if (!(momentum >= 0.0f && momentum <= 1.0f)) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: momentum = %g, must be in [0, 1]", kOp,
                  static_cast<double>(momentum));
    }
    if ((running_mean == nullptr) != (running_var == nullptr)) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                  "%s: running_mean and running_var must both be given or both be NULL (%s is "
                  "NULL)",
                  kOp, running_mean ? "running_var" : "running_mean");
    }
    NORMKIT_RETURN_IF_ERROR(CheckArrays(kOp, xv.channels, {"y", &yv}, {{"x", &xv}},
                                        {{"gamma", gamma, false},
                                         {"beta", beta, false},
                                         {"running_mean", running_mean, true},
                                         {"running_var", running_var, true},
                                         {"save_mean", save_mean, true},
                                         {"save_rstd", save_rstd, true}}));
    cpu::BatchNormTrainingArgs args;
    args.gamma = gamma;
    args.beta = beta;
    args.eps = eps;
    args.momentum = momentum;
    args.running_mean = running_mean;
    args.running_var = running_var;
    args.save_mean = save_mean;
    args.save_rstd = save_rstd;
    cpu::BatchNormTraining(ResolveContext(context), xv, yv, args);
    return NORMKIT_SUCCESS;
  });
}

extern "C" NORMKIT_API normkit_status normkit_batch_norm_training_backward(
    const normkit_context* context, const normkit_tensor* x, const normkit_tensor* dy,
    const float* save_mean, const float* save_rstd, const float* gamma, const normkit_tensor* dx,
    float* grad_gamma, float* grad_beta) {
  using namespace normkit;
  constexpr const char* kOp = "batch_norm_training_backward";
  return Guarded(kOp, [&] {
    TensorView xv, dyv, dxv;
    NORMKIT_RETURN_IF_ERROR(ValidateTensor(kOp, "x", x, &xv));
    NORMKIT_RETURN_IF_ERROR(ValidateTensor(kOp, "dy", dy, &dyv));
    NORMKIT_RETURN_IF_ERROR(CheckLikeX(kOp, "dy", xv, dyv, true));
    if (dx != nullptr) {
      NORMKIT_RETURN_IF_ERROR(ValidateTensor(kOp, "dx", dx, &dxv));
      NORMKIT_RETURN_IF_ERROR(CheckLikeX(kOp, "dx", xv, dxv, true));
    }
    if (xv.on_cuda()) {
      return Fail(NORMKIT_ERROR_UNSUPPORTED, "%s: x is a CUDA tensor (CPU only for now)", kOp);
    }
    // x, dy and dx of one dtype (CheckLikeX): float32, bfloat16 or float16.
    NORMKIT_RETURN_IF_ERROR(CheckStoragePair(kOp, xv, xv));
    NORMKIT_RETURN_IF_ERROR(CheckNotNull(kOp, "save_mean", save_mean));
    NORMKIT_RETURN_IF_ERROR(CheckNotNull(kOp, "save_rstd", save_rstd));
    if (dx != nullptr) {
      NORMKIT_RETURN_IF_ERROR(CheckInPlaceOrApart(kOp, "dx", dxv, "x", xv));
      NORMKIT_RETURN_IF_ERROR(CheckInPlaceOrApart(kOp, "dx", dxv, "dy", dyv));
    }
    NORMKIT_RETURN_IF_ERROR(CheckArrays(kOp, xv.channels, {"dx", dx ? &dxv : nullptr},
                                        {{"x", &xv}, {"dy", &dyv}},
                                        {{"save_mean", save_mean, false},
                                         {"save_rstd", save_rstd, false},
                                         {"gamma", gamma, false},
                                         {"grad_gamma", grad_gamma, true},
                                         {"grad_beta", grad_beta, true}}));
    cpu::BatchNormBackwardArgs args;
    args.save_mean = save_mean;
    args.save_rstd = save_rstd;
    args.gamma = gamma;
    args.grad_gamma = grad_gamma;
    args.grad_beta = grad_beta;
    cpu::BatchNormTrainingBackward(ResolveContext(context), xv, dyv, dx ? &dxv : nullptr, args);
    return NORMKIT_SUCCESS;
  });
}
