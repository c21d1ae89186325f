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

}  // namespace normkit
