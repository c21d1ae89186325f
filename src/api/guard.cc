// SPDX-License-Identifier: Apache-2.0
#include "api/guard.h"

namespace normkit {

normkit_status ValidateUnaryTensors(const char* op, const normkit_tensor* x,
                                    const normkit_tensor* y, TensorView* xv, TensorView* yv) {
  NORMKIT_RETURN_IF_ERROR(ValidateTensor(op, "x", x, xv));
  NORMKIT_RETURN_IF_ERROR(ValidateTensor(op, "y", y, yv));
  NORMKIT_RETURN_IF_ERROR(CheckSameTensorShape(op, *xv, *yv));
  NORMKIT_RETURN_IF_ERROR(CheckSameDevice(op, *xv, "x", *yv, "y"));
  NORMKIT_RETURN_IF_ERROR(CheckInPlaceOrDisjoint(op, *xv, *yv));
  return CheckFloat32(op, "x", *xv);
}

}  // namespace normkit
