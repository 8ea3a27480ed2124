// Every connection holds file descriptors (its CM socket, its CQs' completion channels), and
// the kernel grows a process's descriptor table by doubling it. In a process with several
// threads (any softrdma process: the arena's life thread, the CM thread) each growth waits
// for an RCU grace period, 10 to 25 ms here: the 81st RDMA CM connection of a process took
// that long where the others took 0.25 ms. Growing the table once, when the library is
// loaded and the process usually has one thread, costs a few microseconds and a few KiB. A
// forked child starts with a table only as large as its open descriptors need, and with one
// thread, so it grows its table again at once.
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

namespace softrdma {
namespace {

// Enough for a few thousand connections; a larger table is grown by the kernel as usual.
constexpr rlim_t kReservedDescriptors = 4096;

void reserve_fd_table() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur < 2) return;
  const rlim_t highest = std::min(limit.rlim_cur, kReservedDescriptors) - 1;
  // The lowest free descriptor at or above `highest`: never one the process uses.
  const int probe = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, static_cast<int>(highest));
  if (probe >= 0) close(probe);
}

[[gnu::constructor]] void reserve_now_and_in_forked_children() {
  reserve_fd_table();
  pthread_atfork(nullptr, nullptr, reserve_fd_table);
}

}  // namespace
}  // namespace softrdma
