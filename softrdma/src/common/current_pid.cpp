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

bool pid_exited(pid_t pid) {
  if (pid_gone(pid)) return true;
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return pid_gone(pid);  // reaped meanwhile, or no /proc: as much as kill tells
  // "pid (comm) state ...": the name is at most 16 bytes, but may hold ')' and spaces, so
  // the state is found after the last ')'.
  char stat[256];
  const ssize_t n = read(fd, stat, sizeof stat - 1);
  close(fd);
  if (n <= 0) return false;
  stat[n] = '\0';
  const char* name_end = std::strrchr(stat, ')');
  return name_end && name_end[1] == ' ' && (name_end[2] == 'Z' || name_end[2] == 'X');
}

}  // namespace softrdma
