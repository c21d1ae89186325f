// SPDX-License-Identifier: Apache-2.0
// Helpers every C entry point uses: exception barrier and argument checks.
#ifndef NORMKIT_API_GUARD_H_
#define NORMKIT_API_GUARD_H_

#include <cmath>
#include <cstdint>
#include <new>

#include "core/error.h"
#include "core/size_math.h"
#include "core/tensor.h"
#include "normkit/normkit.h"

namespace normkit {

// Runs `body` (returning normkit_status) so that no exception crosses the C ABI.
template <class Body>
normkit_status Guarded(const char* op, Body&& body) noexcept {
  try {
    ClearError();
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(NORMKIT_ERROR_OUT_OF_MEMORY, "%s: out of memory for scratch buffers", op);
  } catch (...) {
    return Fail(NORMKIT_ERROR_INTERNAL, "%s: unexpected internal exception", op);
  }
}

inline normkit_status CheckNotNull(const char* op, const char* name, const void* p) {
  if (p == nullptr) return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
  return NORMKIT_SUCCESS;
}

inline normkit_status CheckEps(const char* op, float eps) {
  if (!std::isfinite(eps) || !(eps > 0.0f)) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: eps = %g, must be finite and > 0", op,
                static_cast<double>(eps));
  }
  return NORMKIT_SUCCESS;
}

// Two float arrays either are the same array (element-wise aliasing the op allows)
// or share no byte; each is float-aligned. Null arrays pass.
inline normkit_status CheckSameOrDisjoint(const char* op, const char* a_name, const float* a,
                                          int64_t a_count, const char* b_name, const float* b,
                                          int64_t b_count, bool allow_same) {
  NORMKIT_RETURN_IF_ERROR(CheckElementAligned(op, a_name, a, sizeof(float)));
  NORMKIT_RETURN_IF_ERROR(CheckElementAligned(op, b_name, b, sizeof(float)));
  if (a == nullptr || b == nullptr) return NORMKIT_SUCCESS;
  if (allow_same && a == b) return NORMKIT_SUCCESS;
  const auto size = static_cast<int64_t>(sizeof(float));
  if (RangesOverlap(a, a_count * size, b, b_count * size)) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s overlaps %s%s", op, a_name, b_name,
                allow_same ? " (only the very same array is allowed)" : "");
  }
  return NORMKIT_SUCCESS;
}

// The dtypes a unary op runs: float32 alone, or float32 / bfloat16 / float16 storage in
// the pairs CheckStoragePair allows.
enum class UnaryDtypes { kFloat32, kStoragePairs };

// x and y valid tensors of one layout and shape on one device, y == x (in place) or
// disjoint, their dtypes as `dtypes` allows. Shared by every unary op (affine, batch
// norm, the norms).
normkit_status ValidateUnaryTensors(const char* op, const normkit_tensor* x,
                                    const normkit_tensor* y, TensorView* xv, TensorView* yv,
                                    UnaryDtypes dtypes = UnaryDtypes::kFloat32);

// `t` (named `name`) has x's dtype, rank and shape (and, `same_layout`, its layout) and
// lives on x's device: a second input or output of an op shaped like its x.
normkit_status CheckLikeX(const char* op, const char* name, const TensorView& x,
                          const TensorView& t, bool same_layout);

// An output may be an input itself (in place) but share no other byte with it.
normkit_status CheckInPlaceOrApart(const char* op, const char* out_name, const TensorView& out,
                                   const char* in_name, const TensorView& in);

}  // namespace normkit

#endif  // NORMKIT_API_GUARD_H_
