// SPDX-License-Identifier: Apache-2.0
// Status strings, last error, version, dispatch target and contexts.
#include <algorithm>
#include <cstring>
#include <new>

#include "api/guard.h"
#include "core/context.h"
#include "core/error.h"
#include "core/parallel.h"
#include "cpu/info.h"
#include "cuda/ops.h"
#include "normkit/normkit.h"

#define NORMKIT_STR2(x) #x
#define NORMKIT_STR(x) NORMKIT_STR2(x)

extern "C" {

NORMKIT_API const char* normkit_status_string(normkit_status status) {
  // As an integer: C callers may pass any value, which a C++ enum cannot hold.
  static_assert(sizeof(normkit_status) == sizeof(int32_t), "normkit_status is an int");
  int32_t code;
  std::memcpy(&code, &status, sizeof code);
  switch (code) {
    case NORMKIT_SUCCESS: return "success";
    case NORMKIT_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case NORMKIT_ERROR_UNSUPPORTED: return "unsupported";
    case NORMKIT_ERROR_DEVICE_UNAVAILABLE: return "device unavailable";
    case NORMKIT_ERROR_OUT_OF_MEMORY: return "out of memory";
    case NORMKIT_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

NORMKIT_API const char* normkit_last_error(void) {
  return normkit::LastError();
}

NORMKIT_API uint32_t normkit_version(void) {
  return (NORMKIT_VERSION_MAJOR << 16) | (NORMKIT_VERSION_MINOR << 8) | NORMKIT_VERSION_PATCH;
}

NORMKIT_API const char* normkit_version_string(void) {
  return NORMKIT_STR(NORMKIT_VERSION_MAJOR) "." NORMKIT_STR(NORMKIT_VERSION_MINOR) "." NORMKIT_STR(
      NORMKIT_VERSION_PATCH);
}

NORMKIT_API const char* normkit_simd_target(void) {
  return normkit::cpu::SimdTargetName();
}

NORMKIT_API const char* normkit_threading_backend(void) {
  return normkit::ThreadingBackendName();
}

NORMKIT_API normkit_status normkit_context_create(int32_t num_threads, normkit_context** out) {
  constexpr const char* kOp = "context_create";
  return normkit::Guarded(kOp, [&] {
    NORMKIT_RETURN_IF_ERROR(normkit::CheckNotNull(kOp, "out", out));
    if (num_threads < 0 || num_threads > NORMKIT_MAX_THREADS) {
      return normkit::Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                           "%s: num_threads = %d, must be in [0, %d] (0 = default)", kOp,
                           num_threads, NORMKIT_MAX_THREADS);
    }
    *out = normkit::MakeContext(num_threads).release();
    return NORMKIT_SUCCESS;
  });
}

NORMKIT_API normkit_status normkit_context_create_with_parallel_for(
    int32_t num_threads, normkit_parallel_for_fn parallel_for, void* pool, normkit_context** out) {
  constexpr const char* kOp = "context_create_with_parallel_for";
  return normkit::Guarded(kOp, [&] {
    NORMKIT_RETURN_IF_ERROR(normkit::CheckNotNull(kOp, "out", out));
    if (parallel_for == nullptr) {
      return normkit::Fail(NORMKIT_ERROR_INVALID_ARGUMENT, "%s: parallel_for is NULL", kOp);
    }
    if (num_threads < 1 || num_threads > NORMKIT_MAX_THREADS) {
      return normkit::Fail(NORMKIT_ERROR_INVALID_ARGUMENT,
                           "%s: num_threads = %d, must be in [1, %d]", kOp, num_threads,
                           NORMKIT_MAX_THREADS);
    }
    // One thread of normkit's backend: the host's pool does the parallel work.
    auto context = normkit::MakeContext(1);
    context->num_threads = num_threads;
    context->host_parallel_for = parallel_for;
    context->host_pool = pool;
    *out = context.release();
    return NORMKIT_SUCCESS;
  });
}

NORMKIT_API void normkit_context_destroy(normkit_context* context) {
  delete context;
}

NORMKIT_API int32_t normkit_context_num_threads(const normkit_context* context) {
  return normkit::ResolveContext(context).num_threads;
}

NORMKIT_API normkit_status normkit_context_set_cuda_stream(normkit_context* context, void* stream) {
  constexpr const char* kOp = "context_set_cuda_stream";
  return normkit::Guarded(kOp, [&] {
    NORMKIT_RETURN_IF_ERROR(normkit::CheckNotNull(kOp, "context", context));
    context->cuda_stream = stream;
    return NORMKIT_SUCCESS;
  });
}

NORMKIT_API void* normkit_context_cuda_stream(const normkit_context* context) {
  return normkit::ResolveContext(context).cuda_stream;
}

NORMKIT_API int32_t normkit_cuda_device_count(void) {
  return normkit::cuda::DeviceCount();
}

}  // extern "C"

// Descriptor helpers for callers that cannot use the header's static inline ones.
extern "C" {

NORMKIT_API size_t normkit_tensor_struct_size(void) {
  return sizeof(normkit_tensor);
}

NORMKIT_API void normkit_tensor_set(void* t, void* data, int32_t dtype, int32_t layout,
                                    int32_t rank, const int64_t* shape) {
  if (t == nullptr) return;
  auto* d = static_cast<normkit_tensor*>(t);
  // A rank the ops reject is kept as given (they say why); only the shape copy is capped.
  const int32_t copied = shape == nullptr ? 0 : (rank < 0 ? 0 : std::min(rank, NORMKIT_MAX_RANK));
  std::memset(d, 0, sizeof(*d));  // padding too: callers may compare bytes
  normkit_tensor_init(d, data, static_cast<normkit_dtype>(dtype),
                      static_cast<normkit_layout>(layout), copied, shape);
  d->dtype = dtype;
  d->layout = layout;
  d->rank = rank;
}

NORMKIT_API void normkit_tensor_set_device(void* t, int32_t device, int32_t device_index) {
  if (t == nullptr) return;
  auto* d = static_cast<normkit_tensor*>(t);
  d->device = device;
  d->device_index = device_index;
}

NORMKIT_API size_t normkit_shift_sum_params_struct_size(void) {
  return sizeof(normkit_shift_sum_params);
}

NORMKIT_API void normkit_shift_sum_params_set(void* p, int64_t step, int32_t axis, double scale,
                                              int32_t mask_kind, const void* mask) {
  if (p == nullptr) return;
  auto* d = static_cast<normkit_shift_sum_params*>(p);
  std::memset(d, 0, sizeof(*d));
  normkit_shift_sum_params_init(d, step);
  d->axis = axis;
  d->scale = scale;
  d->mask_kind = mask_kind;
  d->mask = mask;
}

}  // extern "C"
