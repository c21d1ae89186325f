// SPDX-License-Identifier: Apache-2.0
#include "core/context.h"

#include <cstdlib>
#include <thread>

namespace normkit {

int32_t DefaultNumThreads() {
  if (const char* env = std::getenv("NORMKIT_NUM_THREADS")) {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n > 0 && n <= 4096) return static_cast<int32_t>(n);
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int32_t>(hw);
}

std::unique_ptr<normkit_context> MakeContext(int32_t num_threads) {
  auto context = std::make_unique<normkit_context>();
  context->num_threads = num_threads > 0 ? num_threads : DefaultNumThreads();
#if defined(NORMKIT_THREADING_TBB)
  context->arena = std::make_unique<tbb::task_arena>(context->num_threads);
  context->arena->initialize();
#endif
  return context;
}

const normkit_context& ResolveContext(const normkit_context* context) {
  if (context != nullptr) return *context;
  // Built once, on first use, thread-safely (C++11 magic statics); never destroyed so
  // calls from other static destructors stay valid.
  static const normkit_context* const default_context = MakeContext(0).release();
  return *default_context;
}

const normkit_context& SerialContext() {
  static const normkit_context* const serial_context = MakeContext(1).release();
  return *serial_context;
}

}  // namespace normkit
