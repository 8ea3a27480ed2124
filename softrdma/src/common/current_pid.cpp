#include "common/current_pid.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace softrdma {
namespace detail {

// Written before other threads can read it (at load, or under the static guard below) and
// in a fork()ed child before any other thread runs there.
pid_t g_current_pid = 0;

namespace {

void refresh() {
  g_current_pid = getpid();
}

bool watch_forks() {
  refresh();
  pthread_atfork(nullptr, nullptr, refresh);
  return true;
}

[[gnu::constructor]] void at_load() {
  first_current_pid();
}

}  // namespace

pid_t first_current_pid() {
  [[maybe_unused]] static const bool watching = watch_forks();
  return g_current_pid;
}

}  // namespace detail

bool pid_gone(pid_t pid) {
  return kill(pid, 0) != 0 && errno == ESRCH;
}

const char* proc_stat_fields(pid_t pid, char* buf, size_t size) {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  const ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0) return nullptr;
  buf[n] = '\0';
  // "pid (name) state ...": counted from the last ')'.
  const char* name_end = std::strrchr(buf, ')');
  return name_end && name_end[1] == ' ' ? name_end + 2 : nullptr;
}

bool exited_state(const char* fields) {
  return fields[0] == 'Z' || fields[0] == 'X';
}

bool pid_exited(pid_t pid) {
  if (pid_gone(pid)) return true;
  char buf[256];
  const char* fields = proc_stat_fields(pid, buf, sizeof buf);
  // Unreadable: reaped meanwhile, or no /proc, where kill(2) is all there is to ask.
  return fields ? exited_state(fields) : pid_gone(pid);
}

}  // namespace softrdma
