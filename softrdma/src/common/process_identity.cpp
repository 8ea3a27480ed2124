#include "common/process_identity.hpp"

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstdlib>

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

namespace {
// Field 22 (the start time) of the fields proc_stat_fields read, which begin at field 3.
uint64_t start_time_field(const char* fields) {
  const char* p = fields;
  for (int field = 3; *p && field < 22; ++p)
    if (*p == ' ') ++field;
  return std::strtoull(p, nullptr, 10);
}
}  // namespace

uint64_t process_start_time(pid_t pid) {
  char buf[1024];
  const char* fields = proc_stat_fields(pid, buf, sizeof buf);
  return fields ? start_time_field(fields) : 0;
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
  if (who.pid <= 0 || pid_gone(who.pid)) return false;
  // A zombie has exited: nothing of it runs, as on a NIC whose driver closed its objects.
  char buf[1024];
  const char* fields = proc_stat_fields(who.pid, buf, sizeof buf);
  return fields && !exited_state(fields) && start_time_field(fields) == who.start_time;
}

}  // namespace softrdma
