// SPDX-License-Identifier: Apache-2.0
#include "core/error.h"

#include <cstdarg>
#include <cstdio>

namespace normkit {
namespace {
thread_local std::string t_last_error;
}  // namespace

normkit_status Fail(normkit_status status, const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  t_last_error.assign(buffer);
  return status;
}

void ClearError() {
  t_last_error.clear();
}

const char* LastError() {
  return t_last_error.c_str();
}

}  // namespace normkit
