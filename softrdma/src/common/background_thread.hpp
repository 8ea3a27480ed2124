// The library's own threads (CM, serving, progress, link readers and writers, multicast
// receiver, the arena's life-lock holder).
#pragma once

#include <functional>

namespace softrdma {

/// Runs `body` on a new detached thread that takes none of the application's signals, and
/// returns once that thread runs. A thread still starting holds locks of the C library and of
/// sanitizer runtimes; a fork() right after the call that created it would leave the child
/// unable to start threads of its own.
void start_background_thread(std::function<void()> body);

}  // namespace softrdma
