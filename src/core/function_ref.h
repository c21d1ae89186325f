// SPDX-License-Identifier: Apache-2.0
// A non-owning reference to a callable, for the bodies of parallel loops.
#ifndef NORMKIT_CORE_FUNCTION_REF_H_
#define NORMKIT_CORE_FUNCTION_REF_H_

#include <memory>
#include <type_traits>
#include <utility>

namespace normkit {

template <class Signature>
class FunctionRef;

// Calls the callable it was made from, which must outlive it. Unlike std::function
// it never allocates: a std::function of a lambda with more than two captures takes
// the heap, and a loop body built between two parallel regions of one call would
// then allocate after the first region wrote outputs (an out-of-memory there left y
// partly written).
template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f) noexcept  // NOLINT(google-explicit-constructor): lambdas convert
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace normkit

#endif  // NORMKIT_CORE_FUNCTION_REF_H_
