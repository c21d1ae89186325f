// SPDX-License-Identifier: Apache-2.0
#include "api/guard.h"

namespace normkit {

normkit_status ValidateUnaryTensors(const char* op, const normkit_tensor* x,
                                    const normkit_tensor* y, TensorView* xv, TensorView* yv,
                                    UnaryDtypes dtypes) {
  NORMKIT_RETURN_IF_ERROR(ValidateTensor(op, "x", x, xv));
  NORMKIT_RETURN_IF_ERROR(ValidateTensor(op, "y", y, yv));
  if (dtypes == UnaryDtypes::kFloat32) {
    NORMKIT_RETURN_IF_ERROR(CheckSameTensorShape(op, *xv, *yv));
  } else {
    NORMKIT_RETURN_IF_ERROR(CheckSameLayoutAndShape(op, *xv, *yv));
  }
  NORMKIT_RETURN_IF_ERROR(CheckSameDevice(op, *xv, "x", *yv, "y"));
  if (dtypes == UnaryDtypes::kStoragePairs) {
    NORMKIT_RETURN_IF_ERROR(CheckStoragePair(op, *xv, *yv));
  }
  NORMKIT_RETURN_IF_ERROR(CheckInPlaceOrDisjoint(op, *xv, *yv));
  return dtypes == UnaryDtypes::kFloat32 ? CheckFloat32(op, "x", *xv) : NORMKIT_SUCCESS;
}

normkit_status CheckLikeX(const char* op, const char* name, const TensorView& x,
                          const TensorView& t, bool same_layout) {
  if (t.dtype != x.dtype) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s->dtype = %s differs from x->dtype = %s", op,
                name, DtypeName(t.dtype), DtypeName(x.dtype));
  }
  if (same_layout && t.layout != x.layout) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s->layout = %d differs from x->layout = %d",
                op, name, t.layout, x.layout);
  }
  if (t.rank != x.rank) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s->rank = %d differs from x->rank = %d", op,
                name, t.rank, x.rank);
  }
  for (int32_t i = 0; i < x.rank; ++i) {
    if (t.shape[i] != x.shape[i]) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                  "%s: %s->shape[%d] = %lld differs from x->shape[%d] = %lld", op, name, i,
                  static_cast<long long>(t.shape[i]), i, static_cast<long long>(x.shape[i]));
    }
  }
  return CheckSameDevice(op, x, "x", t, name);
}

normkit_status CheckInPlaceOrApart(const char* op, const char* out_name, const TensorView& out,
                                   const char* in_name, const TensorView& in) {
  if (out.data == in.data || !RangesOverlap(out.data, out.bytes, in.data, in.bytes)) {
    return NORMKIT_SUCCESS;
  }
  return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
              "%s: %s partially overlaps %s (in place needs %s->data == %s->data)", op, out_name,
              in_name, out_name, in_name);
}

}  // namespace normkit
