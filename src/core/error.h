// SPDX-License-Identifier: Apache-2.0
// Error reporting: a status plus a thread-local message that names the argument.
#ifndef NORMKIT_CORE_ERROR_H_
#define NORMKIT_CORE_ERROR_H_

#include <string>

#include "normkit/normkit.h"

namespace normkit {

// Sets this thread's last-error message (printf format) and returns `status`.
normkit_status Fail(normkit_status status, const char* format, ...)
    __attribute__((format(printf, 2, 3)));

// Clears the message at the start of a successful call path.
void ClearError();

const char* LastError();

}  // namespace normkit

// Evaluates a normkit_status expression and returns it from the caller if not OK.
#define NORMKIT_RETURN_IF_ERROR(expr)                     \
  do {                                                    \
    const normkit_status nk_status_ = (expr);             \
    if (nk_status_ != NORMKIT_SUCCESS) return nk_status_; \
  } while (0)

#endif  // NORMKIT_CORE_ERROR_H_
