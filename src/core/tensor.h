// SPDX-License-Identifier: Apache-2.0
// Validated, internal view of a normkit_tensor, and the checks the API layer shares.
#ifndef NORMKIT_CORE_TENSOR_H_
#define NORMKIT_CORE_TENSOR_H_

#include <cstdint>

#include "normkit/normkit.h"

namespace normkit {

// A tensor whose descriptor passed ValidateTensor: dims >= 1, sizes do not overflow.
struct TensorView {
  void* data = nullptr;
  normkit_dtype dtype = NORMKIT_DTYPE_FLOAT32;
  normkit_layout layout = NORMKIT_LAYOUT_CHANNELS_FIRST;
  normkit_device device = NORMKIT_DEVICE_CPU;
  int32_t device_index = 0;
  int32_t rank = 0;
  int64_t shape[NORMKIT_MAX_RANK] = {};
  int64_t batch = 0;     // N
  int64_t channels = 0;  // C
  int64_t spatial = 0;   // product of the spatial dims (1 for rank 2)
  int64_t numel = 0;
  int64_t bytes = 0;

  bool channels_last() const { return layout == NORMKIT_LAYOUT_CHANNELS_LAST; }
  bool on_cuda() const { return device == NORMKIT_DEVICE_CUDA; }
};

// 0 for an unknown dtype. Takes the raw int32 field: converting an out-of-range value
// to the enum type first would be undefined behavior (found by fuzz_affine).
int64_t DtypeSize(int32_t dtype);
const char* DtypeName(int32_t dtype);

// Checks the descriptor `t` (named `name` in messages of `op`) and fills `out`. Its
// data must be aligned to its element size; shape_only: a descriptor that only gives
// a shape (its data is never read) may have NULL data.
normkit_status ValidateTensor(const char* op, const char* name, const normkit_tensor* t,
                              TensorView* out, bool shape_only = false);

// An array (NULL passes) must start on a multiple of its element size: kernels load
// whole elements, and a misaligned one is undefined behaviour in C and C++.
normkit_status CheckElementAligned(const char* op, const char* name, const void* p,
                                   int64_t elem_size);

// y must have x's dtype, layout, rank and shape.
normkit_status CheckSameTensorShape(const char* op, const TensorView& x, const TensorView& y);

// y must have x's layout, rank and shape (any dtype).
normkit_status CheckSameLayoutAndShape(const char* op, const TensorView& x, const TensorView& y);

// x and y each float32, bfloat16 or float16: one dtype, or one of them float32 (the pairs
// the affine family runs). In place (y->data == x->data) needs one dtype; CUDA tensors
// float32 only.
normkit_status CheckStoragePair(const char* op, const TensorView& x, const TensorView& y);

// a and b live on one device (CPU, or the same CUDA device).
normkit_status CheckSameDevice(const char* op, const TensorView& a, const char* a_name,
                               const TensorView& b, const char* b_name);

// y may be x itself (in place) but must not otherwise overlap x.
normkit_status CheckInPlaceOrDisjoint(const char* op, const TensorView& x, const TensorView& y);

// Only float32 (the dtype of every op but the shift-sum family).
normkit_status CheckFloat32(const char* op, const char* name, const TensorView& t);

// A float array of `count` values (NULL passes) must be float-aligned and must not
// overlap the output `y`.
normkit_status CheckParamDisjoint(const char* op, const char* name, const float* p, int64_t count,
                                  const TensorView& y);

}  // namespace normkit

#endif  // NORMKIT_CORE_TENSOR_H_
