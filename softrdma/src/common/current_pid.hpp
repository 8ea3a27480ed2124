// This process's pid without a system call: glibc's getpid() no longer caches it, and the
// checks "is this object from before a fork()?" and every cross-process lock need it.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace softrdma {

namespace detail {
/// Set when the library is loaded (or first asked) and in every fork()ed child.
extern pid_t g_current_pid;
pid_t first_current_pid();
}  // namespace detail

/// No process has this pid any more (a zombie still counts as there).
bool pid_gone(pid_t pid);
/// The process of this pid has exited: gone, or a zombie not yet reaped by its parent, which
/// has no memory left to touch. False when that cannot be told (no /proc to read). A look
/// at /proc: for waits that have lasted, not for every turn of a spin.
bool pid_exited(pid_t pid);

/// The fields of /proc/<pid>/stat from the state on (the 3rd), read into `buf`; null when
/// they cannot be read. The command name before them may hold spaces and ')'.
const char* proc_stat_fields(pid_t pid, char* buf, size_t size);
/// The state field at `fields` (proc_stat_fields) says the process has exited (a zombie).
bool exited_state(const char* fields);

/// What getpid() returns: one load on the common path.
inline pid_t current_pid() {
  const pid_t pid = detail::g_current_pid;
  return pid != 0 ? pid : detail::first_current_pid();
}

}  // namespace softrdma
