// Who this process is, in a form that survives pid reuse: pid plus the kernel's start time.
#pragma once

#include <sys/types.h>
#include <cstdint>

namespace softrdma {

struct ProcessId {
  pid_t pid = 0;
  uint64_t start_time = 0;  // clock ticks since boot, /proc/<pid>/stat field 22

  bool operator==(const ProcessId&) const = default;
};

/// This process's identity; recomputed after fork().
const ProcessId& self_process();

/// The network namespace this process lives in (inode of /proc/self/ns/net).
uint64_t self_netns();

/// True while the process runs and is the same incarnation (not a reused pid); a zombie
/// (exited, not yet reaped) has exited.
bool process_alive(const ProcessId& who);

/// Start time of `pid`, or 0 when it does not exist.
uint64_t process_start_time(pid_t pid);

}  // namespace softrdma
