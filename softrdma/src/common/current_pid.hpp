// This process's pid without a system call: glibc's getpid() no longer caches it, and the
// checks "is this object from before a fork()?" and every cross-process lock need it.
#pragma once

#include <sys/types.h>

namespace softrdma {

namespace detail {
/// Set when the library is loaded (or first asked) and in every fork()ed child.
extern pid_t g_current_pid;
pid_t first_current_pid();
}  // namespace detail

/// No process has this pid any more (a zombie still counts as there).
bool pid_gone(pid_t pid);
/// The process of this pid has exited: gone, or a zombie not yet reaped by its parent, which
/// has no memory left to touch. False when that cannot be told (no /proc to read).
bool pid_exited(pid_t pid);

/// What getpid() returns: one load on the common path.
inline pid_t current_pid() {
  const pid_t pid = detail::g_current_pid;
  return pid != 0 ? pid : detail::first_current_pid();
}

}  // namespace softrdma
