// SPDX-License-Identifier: Apache-2.0
#include "core/tensor.h"

#include <cstddef>

#include "core/error.h"
#include "core/size_math.h"

namespace normkit {
namespace {

// The first version of the descriptor: every field up to and including `data`.
constexpr uint32_t kTensorV1Size = offsetof(normkit_tensor, data) + sizeof(void*);

// Logical dim names (the shape is logical whatever the layout).
const char* DimName(int32_t rank, int32_t i) {
  static const char* const kNames[4][5] = {{"N", "C", "", "", ""},
                                           {"N", "C", "L", "", ""},
                                           {"N", "C", "H", "W", ""},
                                           {"N", "C", "D", "H", "W"}};
  return kNames[rank - 2][i];
}

}  // namespace

int64_t DtypeSize(int32_t dtype) {
  switch (dtype) {
    case NORMKIT_DTYPE_FLOAT32: return 4;
    case NORMKIT_DTYPE_FLOAT16: return 2;
    case NORMKIT_DTYPE_BFLOAT16: return 2;
    case NORMKIT_DTYPE_FLOAT64: return 8;
  }
  return 0;
}

const char* DtypeName(int32_t dtype) {
  switch (dtype) {
    case NORMKIT_DTYPE_FLOAT32: return "float32";
    case NORMKIT_DTYPE_FLOAT16: return "float16";
    case NORMKIT_DTYPE_BFLOAT16: return "bfloat16";
    case NORMKIT_DTYPE_FLOAT64: return "float64";
  }
  return "unknown";
}

normkit_status CheckElementAligned(const char* op, const char* name, const void* p,
                                   int64_t elem_size) {
  if (p != nullptr && reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(elem_size) != 0) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: %s = %p is not aligned to its %lld-byte elements", op, name, p,
                static_cast<long long>(elem_size));
  }
  return NORMKIT_SUCCESS;
}

normkit_status ValidateTensor(const char* op, const char* name, const normkit_tensor* t,
                              TensorView* out, bool shape_only) {
  if (t == nullptr) return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", op, name);
  if (t->struct_size < kTensorV1Size) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: %s->struct_size = %u, expected >= %u (initialize the descriptor with "
                "normkit_tensor_init)",
                op, name, t->struct_size, kTensorV1Size);
  }
  if (t->data == nullptr && !shape_only)
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s->data is NULL", op, name);
  const int64_t elem = DtypeSize(t->dtype);
  if (elem == 0) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s->dtype = %d is not a normkit_dtype", op,
                name, t->dtype);
  }
  if (reinterpret_cast<uintptr_t>(t->data) % static_cast<uintptr_t>(elem) != 0) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: %s->data = %p is not aligned to its %lld-byte elements (%s)", op, name,
                t->data, static_cast<long long>(elem), DtypeName(t->dtype));
  }
  if (t->layout != NORMKIT_LAYOUT_CHANNELS_FIRST && t->layout != NORMKIT_LAYOUT_CHANNELS_LAST) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s->layout = %d is not a normkit_layout", op,
                name, t->layout);
  }
  if (t->device != NORMKIT_DEVICE_CPU && t->device != NORMKIT_DEVICE_CUDA) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s->device = %d is not a normkit_device", op,
                name, t->device);
  }
  if (t->device == NORMKIT_DEVICE_CUDA && t->device_index < 0) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s->device_index = %d, must be >= 0", op, name,
                t->device_index);
  }
  if (t->rank < 2 || t->rank > NORMKIT_MAX_RANK) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: %s->rank = %d, expected 2..5 (N, C, up to 3 spatial dims)", op, name, t->rank);
  }
  int64_t numel = 1;
  for (int32_t i = 0; i < t->rank; ++i) {
    if (t->shape[i] < 1) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s->shape[%d] (%s) = %lld, must be >= 1", op,
                  name, i, DimName(t->rank, i), static_cast<long long>(t->shape[i]));
    }
    if (!CheckedMul(numel, t->shape[i], &numel)) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s's element count overflows int64", op,
                  name);
    }
  }
  int64_t bytes = 0;
  if (!CheckedMul(numel, elem, &bytes) ||
      static_cast<uint64_t>(bytes) > UINTPTR_MAX - reinterpret_cast<uintptr_t>(t->data)) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: %s describes more bytes than the address space holds", op, name);
  }
  out->data = t->data;
  out->dtype = static_cast<normkit_dtype>(t->dtype);
  out->layout = static_cast<normkit_layout>(t->layout);
  out->device = static_cast<normkit_device>(t->device);
  out->device_index = t->device_index;
  out->rank = t->rank;
  for (int32_t i = 0; i < NORMKIT_MAX_RANK; ++i) out->shape[i] = i < t->rank ? t->shape[i] : 1;
  out->batch = t->shape[0];
  out->channels = t->shape[1];
  out->spatial = numel / (out->batch * out->channels);
  out->numel = numel;
  out->bytes = bytes;
  return NORMKIT_SUCCESS;
}

normkit_status CheckSameTensorShape(const char* op, const TensorView& x, const TensorView& y) {
  if (x.dtype != y.dtype) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: y->dtype = %s differs from x->dtype = %s", op,
                DtypeName(y.dtype), DtypeName(x.dtype));
  }
  return CheckSameLayoutAndShape(op, x, y);
}

normkit_status CheckSameLayoutAndShape(const char* op, const TensorView& x, const TensorView& y) {
  if (x.layout != y.layout) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: y->layout = %d differs from x->layout = %d",
                op, y.layout, x.layout);
  }
  if (x.rank != y.rank) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: y->rank = %d differs from x->rank = %d", op,
                y.rank, x.rank);
  }
  for (int32_t i = 0; i < x.rank; ++i) {
    if (x.shape[i] != y.shape[i]) {
      return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                  "%s: y->shape[%d] = %lld differs from x->shape[%d] = %lld", op, i,
                  static_cast<long long>(y.shape[i]), i, static_cast<long long>(x.shape[i]));
    }
  }
  return NORMKIT_SUCCESS;
}

normkit_status CheckSameDevice(const char* op, const TensorView& a, const char* a_name,
                               const TensorView& b, const char* b_name) {
  const auto where = [](const TensorView& t) {
    return t.device == NORMKIT_DEVICE_CUDA ? "CUDA" : "CPU";
  };
  if (a.device != b.device) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: %s is a %s tensor but %s is a %s tensor (all tensors of a call must live on "
                "one device)",
                op, a_name, where(a), b_name, where(b));
  }
  if (a.device == NORMKIT_DEVICE_CUDA && a.device_index != b.device_index) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: %s->device_index = %d differs from %s->device_index = %d", op, b_name,
                b.device_index, a_name, a.device_index);
  }
  return NORMKIT_SUCCESS;
}

normkit_status CheckInPlaceOrDisjoint(const char* op, const TensorView& x, const TensorView& y) {
  if (x.data == y.data) return NORMKIT_SUCCESS;
  if (RangesOverlap(x.data, x.bytes, y.data, y.bytes)) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: y partially overlaps x (in place needs y->data == x->data)", op);
  }
  return NORMKIT_SUCCESS;
}

namespace {
bool IsStorageDtype(normkit_dtype d) {
  return d == NORMKIT_DTYPE_FLOAT32 || d == NORMKIT_DTYPE_BFLOAT16 || d == NORMKIT_DTYPE_FLOAT16;
}
}  // namespace

normkit_status CheckStoragePair(const char* op, const TensorView& x, const TensorView& y) {
  for (const auto* t : {&x, &y}) {
    if (!IsStorageDtype(t->dtype)) {
      return Fail(NORMKIT_ERROR_UNSUPPORTED,
                  "%s: %s->dtype = %s is not supported (float32, bfloat16 or float16)", op,
                  t == &x ? "x" : "y", DtypeName(t->dtype));
    }
  }
  if (x.dtype != y.dtype && x.dtype != NORMKIT_DTYPE_FLOAT32 && y.dtype != NORMKIT_DTYPE_FLOAT32) {
    return Fail(NORMKIT_ERROR_UNSUPPORTED,
                "%s: y->dtype = %s with x->dtype = %s is not supported (the same dtype, or one "
                "of them float32)",
                op, DtypeName(y.dtype), DtypeName(x.dtype));
  }
  if (x.data == y.data && x.dtype != y.dtype) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                "%s: y->data == x->data with y->dtype = %s and x->dtype = %s (in place needs one "
                "dtype)",
                op, DtypeName(y.dtype), DtypeName(x.dtype));
  }
  return NORMKIT_SUCCESS;
}

normkit_status CheckFloat32(const char* op, const char* name, const TensorView& t) {
  if (t.dtype != NORMKIT_DTYPE_FLOAT32) {
    return Fail(NORMKIT_ERROR_UNSUPPORTED, "%s: %s->dtype = %s is not supported (float32 only)", op,
                name, DtypeName(t.dtype));
  }
  return NORMKIT_SUCCESS;
}

normkit_status CheckParamDisjoint(const char* op, const char* name, const float* p, int64_t count,
                                  const TensorView& y) {
  NORMKIT_RETURN_IF_ERROR(CheckElementAligned(op, name, p, sizeof(float)));
  if (p != nullptr &&
      RangesOverlap(p, count * static_cast<int64_t>(sizeof(float)), y.data, y.bytes)) {
    return Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: %s overlaps the output y", op, name);
  }
  return NORMKIT_SUCCESS;
}

}  // namespace normkit
