// SPDX-License-Identifier: Apache-2.0
// The context behind the opaque normkit_context handle: how many threads a call may use.
#ifndef NORMKIT_CORE_CONTEXT_H_
#define NORMKIT_CORE_CONTEXT_H_

#include <cstdint>
#include <memory>

#include "normkit/normkit.h"

namespace normkit {
// What the threading backend keeps per context (TBB: an arena capped at num_threads),
// defined in core/parallel.cc: only that file and context.cc depend on the backend, so
// every other object file is the same whichever backend is built.
struct ThreadingState;
struct ThreadingStateDeleter {
  void operator()(ThreadingState* state) const;
};
// A backend's state for a context of `num_threads` (nullptr when it keeps none).
// Throws std::bad_alloc.
ThreadingState* NewThreadingState(int32_t num_threads);
}  // namespace normkit

struct normkit_context {
  int32_t num_threads = 1;
  // cudaStream_t for calls on CUDA tensors; nullptr is the default stream.
  void* cuda_stream = nullptr;
  std::unique_ptr<normkit::ThreadingState, normkit::ThreadingStateDeleter> threading;
  // The host's parallel-for (normkit_context_create_with_parallel_for), used instead of
  // the threading backend when set.
  normkit_parallel_for_fn host_parallel_for = nullptr;
  void* host_pool = nullptr;
};

namespace normkit {

// NORMKIT_NUM_THREADS if set to a positive integer, else the hardware threads.
int32_t DefaultNumThreads();

// NORMKIT_NUM_THREADS's value: a decimal integer in [1, NORMKIT_MAX_THREADS], spaces
// around it allowed; 0 for anything else (unset, empty, a sign, garbage, out of range),
// which means every hardware thread.
int32_t ParseNumThreads(const char* text);

// Builds a context for `num_threads` (0 = default). Throws std::bad_alloc.
std::unique_ptr<normkit_context> MakeContext(int32_t num_threads);

// `context`, or the process-wide default one when it is NULL.
const normkit_context& ResolveContext(const normkit_context* context);

// A one-thread context, for calls too small to be worth waking other threads.
const normkit_context& SerialContext();

}  // namespace normkit

#endif  // NORMKIT_CORE_CONTEXT_H_
