// This process's pid without a system call: glibc's getpid() no longer caches it, and the
// checks "is this object from before a fork()?" run on every connection and every CQ.
#pragma once

#include <sys/types.h>

namespace softrdma {

/// What getpid() returns, read from a variable that a fork() child handler refreshes.
pid_t current_pid();

}  // namespace softrdma
