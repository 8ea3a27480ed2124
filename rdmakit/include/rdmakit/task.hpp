// Task<T>: the coroutine type of rdmakit's data path. Lazy (starts when awaited or spawned),
// resumes its awaiter by symmetric transfer, and never throws across the data path: an
// exception escaping a task is a programming error.
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <utility>

#include "rdmakit/error.hpp"

namespace rdmakit {

template <typename T>
class Task;

namespace detail {

struct PromiseBase {
  std::coroutine_handle<> continuation;
  bool detached = false;

  std::suspend_always initial_suspend() noexcept { return {}; }
  struct FinalAwaiter {
    bool await_ready() noexcept { return false; }
    template <typename Promise>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<Promise> done) noexcept {
      PromiseBase& self = done.promise();
      if (self.detached) {
        done.destroy();
        return std::noop_coroutine();
      }
      return self.continuation ? self.continuation : std::noop_coroutine();
    }
    void await_resume() noexcept {}
  };
  FinalAwaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept {
    programming_error("an exception escaped an rdmakit::Task (the data path must not throw)");
  }
};

template <typename T>
struct Promise : PromiseBase {
  std::optional<T> value;
  Task<T> get_return_object() noexcept;
  template <typename U>
  void return_value(U&& v) {
    value.emplace(std::forward<U>(v));
  }
};

template <>
struct Promise<void> : PromiseBase {
  Task<void> get_return_object() noexcept;
  void return_void() noexcept {}
};

}  // namespace detail

template <typename T = void>
/// A lazy coroutine returning T: starts when awaited or spawn()ed; owns its frame.
class [[nodiscard]] Task {
 public:
  /// The coroutine's promise (C++ protocol).
  using promise_type = detail::Promise<T>;
  /// Handle to the coroutine's frame.
  using Handle = std::coroutine_handle<promise_type>;

  Task() = default;
  /// Takes ownership of the coroutine `h` (made by the promise).
  explicit Task(Handle h) noexcept : handle_(h) {}
  /// Takes over `other`'s coroutine.
  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  /// Destroys this task's coroutine, then takes over `other`'s.
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() {
    if (handle_) handle_.destroy();
  }

  /// True when it has finished (or holds none).
  bool done() const noexcept { return !handle_ || handle_.done(); }

  /// Runs the task and resumes the awaiting coroutine with its result.
  auto operator co_await() && noexcept {
    struct Awaiter {
      Handle handle;
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<> waiting) noexcept {
        handle.promise().continuation = waiting;
        return handle;
      }
      T await_resume() noexcept {
        if constexpr (!std::is_void_v<T>) return std::move(*handle.promise().value);
      }
    };
    RDMAKIT_REQUIRE(handle_ != nullptr, "co_await on an empty or moved-from rdmakit::Task");
    return Awaiter{handle_};
  }

  /// Starts the task and lets it run to completion on its own; its frame frees itself.
  friend void spawn(Task&& task) noexcept {
    RDMAKIT_REQUIRE(task.handle_ != nullptr, "spawn of an empty rdmakit::Task");
    Handle h = std::exchange(task.handle_, {});
    h.promise().detached = true;
    h.resume();
  }

  /// Starts the task; the caller keeps it and checks done()/result() (e.g. while polling).
  void start() noexcept {
    RDMAKIT_REQUIRE(handle_ && !handle_.done(), "start of an empty or finished rdmakit::Task");
    handle_.resume();
  }
  /// The value of a finished task.
  T result() noexcept requires(!std::is_void_v<T>) {
    RDMAKIT_REQUIRE(handle_ && handle_.done(), "result of an unfinished rdmakit::Task");
    return std::move(*handle_.promise().value);
  }

 private:
  Handle handle_;
};

namespace detail {
template <typename T>
Task<T> Promise<T>::get_return_object() noexcept {
  return Task<T>(std::coroutine_handle<Promise<T>>::from_promise(*this));
}
inline Task<void> Promise<void>::get_return_object() noexcept {
  return Task<void>(std::coroutine_handle<Promise<void>>::from_promise(*this));
}
}  // namespace detail

}  // namespace rdmakit
