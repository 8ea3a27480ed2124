// FunctionRef<R(Args...)>: a non-owning reference to a callable, for callbacks that run
// before the call taking them returns (fill a buffer, handle responses in poll()). Two
// words, no allocation.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace rdmakit::rpc {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
/// A non-owning reference to a callable with signature R(Args...); the callable must
/// outlive every call through it.
class FunctionRef<R(Args...)> {
 public:
  template <typename F>
  /// Refers to `f` (not copied).
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
           std::is_invocable_r_v<R, F&, Args...>) FunctionRef(F&& f)
  noexcept  // NOLINT(google-explicit-constructor): used like a function
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}

  /// Calls the referenced callable.
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace rdmakit::rpc
