#include "common/current_pid.hpp"

#include <pthread.h>
#include <unistd.h>

namespace softrdma {
namespace {

// Written when first needed and in a fork()ed child, before any other thread runs there.
pid_t g_pid = 0;

void refresh() {
  g_pid = getpid();
}

}  // namespace

pid_t current_pid() {
  [[maybe_unused]] static const bool registered =
      (refresh(), pthread_atfork(nullptr, nullptr, refresh), true);
  return g_pid;
}

}  // namespace softrdma
