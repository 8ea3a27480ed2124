// The library's own threads (CM, serving, progress, link readers and writers, multicast
// receiver, the arena's life-lock holder).
#pragma once

#include <cstddef>
#include <functional>
#include <utility>

namespace softrdma {

/// Runs `body` on a new detached thread that takes none of the application's signals, and
/// returns once that thread runs. A thread still starting holds locks of the C library and of
/// sanitizer runtimes; a fork() right after the call that created it would leave the child
/// unable to start threads of its own.
void start_named_thread(const char* name, std::function<void()> body);

/// start_named_thread, for a name that `top -H` and `perf` will show whole.
template <size_t N>
void start_background_thread(const char (&name)[N], std::function<void()> body) {
  static_assert(N <= 16, "a Linux thread name holds at most 15 characters");
  start_named_thread(name, std::move(body));
}

}  // namespace softrdma
