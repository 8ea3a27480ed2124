#include "common/process_identity.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/current_pid.hpp"

namespace softrdma {
namespace {

ProcessId g_self;
uint64_t g_netns = 0;

void compute_self() {
  g_self.pid = getpid();
  g_self.start_time = process_start_time(g_self.pid);
  struct stat st {};
  g_netns = stat("/proc/self/ns/net", &st) == 0 ? st.st_ino : 0;
}

void init_once() {
  compute_self();
  pthread_atfork(nullptr, nullptr, compute_self);
}

}  // namespace

uint64_t process_start_time(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // The command name (field 2) may contain spaces and parentheses: count from the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (!p) return 0;
  int field = 2;
  for (; *p && field < 22; ++p)
    if (*p == ' ') ++field;
  return std::strtoull(p, nullptr, 10);
}

const ProcessId& self_process() {
  // A function-local static: after the first call, one inlined load of its guard.
  [[maybe_unused]] static const bool initialised = (init_once(), true);
  return g_self;
}

uint64_t self_netns() {
  self_process();
  return g_netns;
}

bool process_alive(const ProcessId& who) {
  if (who.pid <= 0) return false;
  if (pid_gone(who.pid)) return false;
  return process_start_time(who.pid) == who.start_time;
}

}  // namespace softrdma
