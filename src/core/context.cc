// SPDX-License-Identifier: Apache-2.0
#include "core/context.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <thread>

namespace normkit {

int32_t ParseNumThreads(const char* text) {
  if (text == nullptr) return 0;
  while (std::isspace(static_cast<unsigned char>(*text))) ++text;
  if (!std::isdigit(static_cast<unsigned char>(*text))) return 0;  // no sign, no garbage
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(text, &end, 10);
  while (std::isspace(static_cast<unsigned char>(*end))) ++end;
  if (errno != 0 || *end != '\0' || n < 1 || n > NORMKIT_MAX_THREADS) return 0;
  return static_cast<int32_t>(n);
}

int32_t DefaultNumThreads() {
  if (const int32_t n = ParseNumThreads(std::getenv("NORMKIT_NUM_THREADS"))) return n;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int32_t>(hw);
}

std::unique_ptr<normkit_context> MakeContext(int32_t num_threads) {
  auto context = std::make_unique<normkit_context>();
  context->num_threads = num_threads > 0 ? num_threads : DefaultNumThreads();
  context->threading.reset(NewThreadingState(context->num_threads));
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
