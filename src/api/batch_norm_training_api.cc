// SPDX-License-Identifier: Apache-2.0
// C entry point of batch norm in training mode (the forward pass).
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

// The C-float arrays: aligned, none over y, the outputs over nothing (x included: it is
// read again after they are written), the inputs free to share memory with each other.
normkit_status CheckArrays(const char* op, const TensorView& x, const TensorView& y,
                           std::initializer_list<NamedArray> arrays) {
  const int64_t C = x.channels;
  for (const NamedArray& a : arrays) {
    NORMKIT_RETURN_IF_ERROR(CheckParamDisjoint(op, a.name, a.data, C, y));
    if (a.output && a.data != nullptr &&
        RangesOverlap(a.data, C * static_cast<int64_t>(sizeof(float)), x.data, x.bytes)) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s overlaps the input x", op, a.name);
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
    NORMKIT_RETURN_IF_ERROR(ValidateUnaryTensors(kOp, x, y, &xv, &yv));
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
    NORMKIT_RETURN_IF_ERROR(CheckArrays(kOp, xv, yv,
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
