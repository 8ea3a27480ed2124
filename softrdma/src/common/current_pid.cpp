#include "common/current_pid.hpp"

#include <pthread.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>

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

}  // namespace softrdma
